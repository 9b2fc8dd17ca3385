-- agent-memory SQLite schema, version 1.
-- `subject` is '' for the namespace-wide shared scope (subjects are never empty).
-- Timestamps are milliseconds since the Unix epoch (the store's clock).

CREATE TABLE conversations (
    pk            INTEGER PRIMARY KEY,
    namespace     TEXT    NOT NULL,
    subject       TEXT    NOT NULL,
    id            TEXT    NOT NULL,
    agent         TEXT,
    title         TEXT,
    metadata      TEXT    NOT NULL,
    resource_slug TEXT,
    record_id     TEXT,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    last_seq      INTEGER NOT NULL DEFAULT 0,
    UNIQUE (namespace, subject, id)
);
CREATE INDEX conversations_newest ON conversations (namespace, subject, created_at DESC, id DESC);

-- A message body is the whole message as JSON (NUL is escaped there, so it round-trips).
CREATE TABLE messages (
    conversation INTEGER NOT NULL REFERENCES conversations (pk) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    id           TEXT    NOT NULL,
    role         TEXT    NOT NULL,
    body         TEXT    NOT NULL,
    PRIMARY KEY (conversation, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX messages_by_id ON messages (conversation, id);

CREATE TABLE cursors (
    conversation INTEGER NOT NULL REFERENCES conversations (pk) ON DELETE CASCADE,
    name         TEXT    NOT NULL,
    value        INTEGER NOT NULL,
    PRIMARY KEY (conversation, name)
) WITHOUT ROWID;

-- `conversation` is the conversation's pk, or 0 for the subject's user document.
CREATE TABLE working_memory (
    namespace    TEXT    NOT NULL,
    subject      TEXT    NOT NULL,
    conversation INTEGER NOT NULL,
    content      TEXT    NOT NULL,
    format       TEXT    NOT NULL,
    revision     INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (namespace, subject, conversation)
) WITHOUT ROWID;

CREATE TABLE facts (
    pk            INTEGER PRIMARY KEY,
    namespace     TEXT    NOT NULL,
    subject       TEXT    NOT NULL,
    id            TEXT    NOT NULL,
    text          TEXT    NOT NULL,
    kind          TEXT,
    key           TEXT,
    tags          TEXT    NOT NULL,
    score         REAL,
    source        TEXT,
    embedding     BLOB,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    expires_at    INTEGER,
    valid_to      INTEGER,
    superseded_by TEXT,
    UNIQUE (namespace, subject, id)
);
CREATE INDEX facts_newest ON facts (namespace, subject, created_at DESC, id DESC);
CREATE INDEX facts_by_key ON facts (namespace, subject, key) WHERE key IS NOT NULL;

-- The lexical index: the core tokens of every *current* fact (superseded facts drop theirs).
CREATE TABLE fact_tokens (
    namespace TEXT    NOT NULL,
    subject   TEXT    NOT NULL,
    token     TEXT    NOT NULL,
    fact      INTEGER NOT NULL REFERENCES facts (pk) ON DELETE CASCADE,
    PRIMARY KEY (namespace, subject, token, fact)
) WITHOUT ROWID;
CREATE INDEX fact_tokens_by_fact ON fact_tokens (fact);

-- `generation` changes with every write to the collection's vectors: in-process caches of the
-- vector matrix compare it to know they are current, even when another process wrote.
CREATE TABLE collections (
    pk         INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace  TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    dims       INTEGER NOT NULL,
    metric     TEXT    NOT NULL,
    model      TEXT    NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0,
    UNIQUE (namespace, name)
);

-- Vectors are little-endian f32 blobs; the scope's namespace is the collection's.
CREATE TABLE vectors (
    collection      INTEGER NOT NULL REFERENCES collections (pk) ON DELETE CASCADE,
    subject         TEXT    NOT NULL,
    id              TEXT    NOT NULL,
    vector          BLOB    NOT NULL,
    text            TEXT,
    metadata        TEXT    NOT NULL,
    conversation_id TEXT,
    UNIQUE (collection, subject, id)
);
CREATE INDEX vectors_by_conversation ON vectors (subject, conversation_id)
    WHERE conversation_id IS NOT NULL;

CREATE TABLE checkpoints (
    namespace  TEXT    NOT NULL,
    subject    TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    workflow   TEXT    NOT NULL,
    status     TEXT    NOT NULL,
    state      TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (namespace, subject, id)
) WITHOUT ROWID;
CREATE INDEX checkpoints_suspended ON checkpoints (namespace, subject, updated_at, id)
    WHERE status = 'suspended';

CREATE TABLE cache (
    namespace  TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    value      BLOB    NOT NULL,
    expires_at INTEGER,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
