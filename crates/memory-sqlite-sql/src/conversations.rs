//! Conversations: their rows, message trims and cursors.

/// The columns of a conversation, in the order the backends decode them.
#[macro_export]
macro_rules! conversation_columns {
    () => {
        "pk, id, agent, title, metadata, resource_slug, record_id, created_at, updated_at, last_seq"
    };
}

/// A conversation by id: `?1` namespace, `?2` subject, `?3` id.
pub const BY_ID: &str = concat!(
    "SELECT ",
    conversation_columns!(),
    " FROM conversations WHERE namespace = ?1 AND subject = ?2 AND id = ?3"
);

/// A subject's conversations (its export): `?1` namespace, `?2` subject.
pub const OF_SCOPE: &str = concat!(
    "SELECT ",
    conversation_columns!(),
    " FROM conversations WHERE namespace = ?1 AND subject = ?2"
);

/// A page of a subject's conversations, newest first, whose position is `after`.
macro_rules! list_page {
    ($after:literal) => {
        concat!(
            "SELECT ",
            conversation_columns!(),
            " FROM conversations WHERE namespace = ?1 AND subject = ?2
              AND (?3 IS NULL OR agent = ?3) AND (?4 IS NULL OR resource_slug = ?4)
              AND (?5 IS NULL OR record_id = ?5) AND ",
            $after,
            " ORDER BY created_at DESC, id DESC LIMIT (SELECT ?8)"
        )
    };
}

/// The first page of a subject's conversations, newest first: `?1` namespace, `?2` subject,
/// `?3` agent, `?4` resource slug, `?5` record id (each NULL when not asked), `?6` and `?7`
/// NULL, `?8` limit. Two statements, this and [`LIST_AFTER`], rather than `?6 IS NULL OR …`,
/// so that both seek the index.
pub const LIST_FIRST: &str = list_page!("?6 IS NULL AND ?7 IS NULL");

/// The page after a cursor: as [`LIST_FIRST`], with `?6` and `?7` the `created_at` and id of
/// the last conversation seen.
pub const LIST_AFTER: &str = list_page!("(created_at, id) < (?6, ?7)");

/// The statement of a page: [`LIST_AFTER`] when it continues after a cursor, else
/// [`LIST_FIRST`].
pub fn list_page(after_cursor: bool) -> &'static str {
    if after_cursor {
        LIST_AFTER
    } else {
        LIST_FIRST
    }
}

/// A conversation's row and last seq: `?1` namespace, `?2` subject, `?3` id.
pub const PK_AND_LAST_SEQ: &str = "SELECT pk, last_seq FROM conversations
    WHERE namespace = ?1 AND subject = ?2 AND id = ?3";

/// Deletes a conversation's messages up to a seq: `?1` conversation pk, `?2` seq.
pub const DELETE_MESSAGES_THROUGH: &str = "DELETE FROM messages
    WHERE conversation = ?1 AND seq <= ?2";

/// Creates a conversation unless its id is taken (no row changed then): `?1` namespace, `?2`
/// subject, `?3` id, `?4` agent, `?5` title, `?6` metadata, `?7` resource slug, `?8` record id,
/// `?9` now.
pub const INSERT: &str =
    "INSERT INTO conversations (namespace, subject, id, agent, title, metadata,
        resource_slug, record_id, created_at, updated_at, last_seq)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, 0)
    ON CONFLICT (namespace, subject, id) DO NOTHING";

/// Sets a conversation's title and metadata: `?1` title, `?2` metadata, `?3` now, `?4` namespace,
/// `?5` subject, `?6` id.
pub const UPDATE_TITLE_AND_METADATA: &str =
    "UPDATE conversations SET title = ?1, metadata = ?2, updated_at = ?3
    WHERE namespace = ?4 AND subject = ?5 AND id = ?6";

/// Deletes a conversation (its messages and cursors cascade): `?1` pk.
pub const DELETE_BY_PK: &str = "DELETE FROM conversations WHERE pk = ?1";

/// A conversation's cursor, in one statement (its own snapshot): one row when the conversation
/// (`?1` namespace, `?2` subject, `?3` id) exists, holding the value of its cursor `?4` (NULL when
/// never advanced); no row when the conversation does not.
pub const CURSOR: &str = "SELECT cursors.value FROM conversations
    LEFT JOIN cursors ON cursors.conversation = conversations.pk AND cursors.name = ?4
    WHERE conversations.namespace = ?1 AND conversations.subject = ?2 AND conversations.id = ?3";

/// Moves a cursor forward only, returning where it stands: `?1` conversation pk, `?2` name, `?3`
/// value.
pub const ADVANCE_CURSOR: &str = "INSERT INTO cursors (conversation, name, value)
    VALUES (?1, ?2, ?3)
    ON CONFLICT (conversation, name) DO UPDATE SET value = max(value, excluded.value)
    RETURNING value";
