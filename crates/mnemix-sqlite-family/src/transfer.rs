//! Export and restore: a subject's rows read out, and written back as they were.

/// Live rows only, "now" bound as parameter `$now`: no read returns an expired fact or cache
/// entry, so no export does either.
macro_rules! live {
    ($now:literal) => {
        concat!("(expires_at IS NULL OR expires_at > ?", $now, ")")
    };
}

/// Every namespace that holds anything, in order: `?1` now.
pub const NAMESPACES: &str = concat!(
    "SELECT namespace FROM conversations UNION SELECT namespace FROM working_memory
     UNION SELECT namespace FROM facts WHERE ",
    live!(1),
    " UNION SELECT namespace FROM collections UNION SELECT namespace FROM checkpoints
     UNION SELECT namespace FROM cache WHERE ",
    live!(1),
    " ORDER BY 1"
);

/// The subjects (`''` for the shared scope) of a namespace's rows but its vectors, which each
/// backend lays out its own way: `?1` namespace, `?2` now; in no order.
pub const SUBJECTS_BUT_VECTORS: &str = "SELECT subject FROM conversations WHERE namespace = ?1
    UNION SELECT subject FROM working_memory WHERE namespace = ?1
    UNION SELECT subject FROM facts WHERE namespace = ?1
          AND (expires_at IS NULL OR expires_at > ?2)
    UNION SELECT subject FROM checkpoints WHERE namespace = ?1";

/// The tables `table_counts` reports, in its order, with the statement that counts each
/// (`None` for the vectors, which each backend lays out its own way).
pub const TABLE_COUNTS: [(&str, Option<&str>); 8] = [
    ("conversations", Some("SELECT count(*) FROM conversations")),
    ("messages", Some("SELECT count(*) FROM messages")),
    ("facts", Some("SELECT count(*) FROM facts")),
    ("collections", Some("SELECT count(*) FROM collections")),
    ("vectors", None),
    (
        "working_memory",
        Some("SELECT count(*) FROM working_memory"),
    ),
    ("checkpoints", Some("SELECT count(*) FROM checkpoints")),
    ("cache", Some("SELECT count(*) FROM cache")),
];

/// A namespace's live cache entries: `?1` namespace, `?2` now.
pub const EXPORT_CACHE: &str = concat!(
    "SELECT key, value, expires_at FROM cache WHERE namespace = ?1 AND ",
    live!(2)
);

/// A subject's live facts, whole: `?1` namespace, `?2` subject, `?3` now.
pub const EXPORT_FACTS: &str = concat!(
    "SELECT ",
    crate::fact_columns!(),
    " FROM facts WHERE namespace = ?1 AND subject = ?2 AND ",
    live!(3)
);

/// A subject's messages: `?1` namespace, `?2` subject.
pub const EXPORT_MESSAGES: &str = "SELECT m.conversation, m.seq, m.body FROM messages m
    JOIN conversations c ON c.pk = m.conversation
    WHERE c.namespace = ?1 AND c.subject = ?2";

/// A subject's cursors: `?1` namespace, `?2` subject.
pub const EXPORT_CURSORS: &str = "SELECT k.conversation, k.name, k.value FROM cursors k
    JOIN conversations c ON c.pk = k.conversation
    WHERE c.namespace = ?1 AND c.subject = ?2";

/// A subject's working-memory documents: `?1` namespace, `?2` subject.
pub const EXPORT_WORKING_MEMORY: &str =
    "SELECT conversation, content, format, revision, updated_at FROM working_memory
    WHERE namespace = ?1 AND subject = ?2";

/// A scope's checkpoints, for export: `?1` namespace, `?2` subject.
pub const EXPORT_CHECKPOINTS: &str = concat!(
    "SELECT ",
    crate::checkpoint_columns!(),
    " FROM checkpoints WHERE namespace = ?1 AND subject = ?2"
);

/// Writes an exported conversation over whatever has its id.
pub const RESTORE_CONVERSATION: &str =
    "INSERT INTO conversations (namespace, subject, id, agent, title, metadata,
        resource_slug, record_id, created_at, updated_at, last_seq)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
    ON CONFLICT (namespace, subject, id) DO UPDATE SET
        agent = excluded.agent, title = excluded.title,
        metadata = excluded.metadata, resource_slug = excluded.resource_slug,
        record_id = excluded.record_id, created_at = excluded.created_at,
        updated_at = excluded.updated_at, last_seq = excluded.last_seq";

/// Writes an exported message.
pub const RESTORE_MESSAGE: &str =
    "INSERT OR REPLACE INTO messages (conversation, seq, id, role, body)
    VALUES (?1, ?2, ?3, ?4, ?5)";

/// Writes an exported cursor.
pub const RESTORE_CURSOR: &str = "INSERT OR REPLACE INTO cursors (conversation, name, value)
    VALUES (?1, ?2, ?3)";

/// Writes an exported fact over whatever has its id, returning its pk.
pub const RESTORE_FACT: &str =
    "INSERT INTO facts (namespace, subject, id, text, kind, key, tags, score, source,
        embedding, created_at, updated_at, expires_at, valid_to, superseded_by, provenance,
        valid_from, valid_until)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)
    ON CONFLICT (namespace, subject, id) DO UPDATE SET
        text = excluded.text, kind = excluded.kind, key = excluded.key,
        tags = excluded.tags, score = excluded.score, source = excluded.source,
        embedding = excluded.embedding, created_at = excluded.created_at,
        updated_at = excluded.updated_at, expires_at = excluded.expires_at,
        valid_to = excluded.valid_to, superseded_by = excluded.superseded_by,
        provenance = excluded.provenance, valid_from = excluded.valid_from,
        valid_until = excluded.valid_until
    RETURNING pk";

/// Writes an exported checkpoint.
pub const RESTORE_CHECKPOINT: &str = "INSERT OR REPLACE INTO checkpoints
        (namespace, subject, id, workflow, status, state, version, created_at,
         updated_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";
