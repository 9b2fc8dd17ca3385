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
