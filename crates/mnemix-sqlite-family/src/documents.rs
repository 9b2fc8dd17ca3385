//! Working memory, the cache and checkpoints.

/// Deletes a working-memory document: `?1` namespace, `?2` subject, `?3` conversation pk (0 for the
/// user's).
pub const DELETE_WORKING_MEMORY: &str = "DELETE FROM working_memory
    WHERE namespace = ?1 AND subject = ?2 AND conversation = ?3";

/// Writes a working-memory document: `?1` namespace, `?2` subject, `?3` conversation pk, `?4`
/// content, `?5` format, `?6` revision, `?7` now.
pub const SET_WORKING_MEMORY: &str = "INSERT INTO working_memory
        (namespace, subject, conversation, content, format, revision, updated_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
    ON CONFLICT (namespace, subject, conversation) DO UPDATE SET
        content = excluded.content, format = excluded.format,
        revision = excluded.revision, updated_at = excluded.updated_at";

/// Sets a cache entry: `?1` namespace, `?2` key, `?3` value, `?4` expires at.
pub const SET_CACHE: &str = "INSERT INTO cache (namespace, key, value, expires_at)
    VALUES (?1, ?2, ?3, ?4)
    ON CONFLICT (namespace, key) DO UPDATE SET
        value = excluded.value, expires_at = excluded.expires_at";

/// Creates a checkpoint unless its id is taken: `?1` namespace, `?2` subject, `?3` id, `?4`
/// workflow, `?5` status, `?6` state, `?7` now.
pub const INSERT_CHECKPOINT: &str = "INSERT INTO checkpoints
        (namespace, subject, id, workflow, status, state, version, created_at, updated_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, ?7, ?7)
    ON CONFLICT (namespace, subject, id) DO NOTHING";

/// Updates a checkpoint: `?1` status, `?2` state, `?3` version, `?4` now, `?5` namespace, `?6`
/// subject, `?7` id.
pub const UPDATE_CHECKPOINT: &str =
    "UPDATE checkpoints SET status = ?1, state = ?2, version = ?3, updated_at = ?4
    WHERE namespace = ?5 AND subject = ?6 AND id = ?7";

/// Deletes a checkpoint: `?1` namespace, `?2` subject, `?3` id.
pub const DELETE_CHECKPOINT: &str = "DELETE FROM checkpoints
    WHERE namespace = ?1 AND subject = ?2 AND id = ?3";

/// A live cache entry's value: `?1` namespace, `?2` key, `?3` now.
pub const CACHE_GET: &str = "SELECT value FROM cache WHERE namespace = ?1 AND key = ?2
    AND (expires_at IS NULL OR expires_at > ?3)";

/// Live cache entries among keys: `?1` namespace, `?2` keys (JSON array), `?3` now.
pub const CACHE_GET_MANY: &str = "SELECT key, value FROM cache
    WHERE namespace = ?1 AND key IN (SELECT value FROM json_each(?2))
      AND (expires_at IS NULL OR expires_at > ?3)";

/// Deletes a cache entry, returning its expiry: `?1` namespace, `?2` key.
pub const CACHE_DELETE: &str = "DELETE FROM cache
    WHERE namespace = ?1 AND key = ?2 RETURNING expires_at";

/// A key's working-memory document in one statement: `?1` namespace, `?2` subject, `?3` the
/// conversation id (NULL for the subject's own document). For a conversation's key, a first row
/// `(pk, NULL, NULL, 0, 0)` says the conversation exists; the document's row `(NULL, content,
/// format, revision, updated_at)`, if any, follows.
pub const GET_WORKING_MEMORY: &str = "SELECT pk, NULL, NULL, 0, 0 FROM conversations
     WHERE ?3 IS NOT NULL AND namespace = ?1 AND subject = ?2 AND id = ?3
     UNION ALL
     SELECT NULL, content, format, revision, updated_at FROM working_memory
     WHERE namespace = ?1 AND subject = ?2 AND conversation = CASE WHEN ?3 IS NULL THEN 0
           ELSE (SELECT pk FROM conversations
                 WHERE namespace = ?1 AND subject = ?2 AND id = ?3) END";

/// Sets a working-memory document in one statement, returning its new revision: `?1`
/// namespace, `?2` subject, `?3` conversation id (NULL: the subject's own), `?4` content, `?5`
/// format, `?6` now, `?7` the expected revision (NULL: any; 0: none yet). No row back: the
/// conversation is missing or the revision differs.
pub const SET_WORKING_MEMORY_CHECKED: &str = "INSERT INTO working_memory
         (namespace, subject, conversation, content, format, revision, updated_at)
     SELECT ?1, ?2, slot, ?4, ?5, 1, ?6 FROM (
         SELECT CASE WHEN ?3 IS NULL THEN 0 ELSE (SELECT pk FROM conversations
             WHERE namespace = ?1 AND subject = ?2 AND id = ?3) END AS slot)
     WHERE slot IS NOT NULL AND (?7 IS NULL OR ?7 = coalesce((SELECT revision
         FROM working_memory WHERE namespace = ?1 AND subject = ?2
           AND conversation = slot), 0))
     ON CONFLICT (namespace, subject, conversation) DO UPDATE SET
         content = excluded.content, format = excluded.format,
         revision = working_memory.revision + 1, updated_at = excluded.updated_at
     RETURNING revision";

/// A checkpoint's columns, in the order the family decodes them.
#[macro_export]
macro_rules! checkpoint_columns {
    () => {
        "id, workflow, status, state, version, created_at, updated_at"
    };
}

/// A checkpoint's columns (see [`checkpoint_columns!`]).
pub const CHECKPOINT_COLUMNS: &str = checkpoint_columns!();

/// A checkpoint: `?1` namespace, `?2` subject, `?3` id.
pub const CHECKPOINT_BY_ID: &str = concat!(
    "SELECT ",
    checkpoint_columns!(),
    " FROM checkpoints WHERE namespace = ?1 AND subject = ?2 AND id = ?3"
);

/// The suspended checkpoints, oldest update first: `?1` namespace, `?2` subject, `?3` workflow
/// (NULL: any).
pub const SUSPENDED_CHECKPOINTS: &str = concat!(
    "SELECT ",
    checkpoint_columns!(),
    " FROM checkpoints WHERE namespace = ?1 AND subject = ?2 AND status = 'suspended'
       AND (?3 IS NULL OR workflow = ?3) ORDER BY updated_at, id"
);
