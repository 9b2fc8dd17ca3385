-- agent-memory PostgreSQL schema, version 1. `{schema}` is the configured schema, quoted.
-- `subject` is '' for the namespace-wide shared scope (subjects are never empty).
-- Timestamps are milliseconds since the Unix epoch (the store's clock).
-- Identifiers compare byte-wise (COLLATE "C"), as on every backend. Free text that may hold NUL
-- (which `text` and `jsonb` reject) is UTF-8 in `bytea`; JSON documents are `text` (serde_json
-- escapes NUL as \u0000 there).

CREATE TABLE {schema}.conversations (
    pk            bigserial PRIMARY KEY,
    namespace     text COLLATE "C" NOT NULL,
    subject       text COLLATE "C" NOT NULL,
    id            text COLLATE "C" NOT NULL,
    agent         text COLLATE "C",
    title         bytea,
    metadata      text   NOT NULL,
    resource_slug text COLLATE "C",
    record_id     text COLLATE "C",
    created_at    bigint NOT NULL,
    updated_at    bigint NOT NULL,
    last_seq      bigint NOT NULL DEFAULT 0,
    UNIQUE (namespace, subject, id)
);
CREATE INDEX conversations_newest
    ON {schema}.conversations (namespace, subject, created_at DESC, id DESC);

-- A message body is the whole message as JSON.
CREATE TABLE {schema}.messages (
    conversation bigint NOT NULL REFERENCES {schema}.conversations (pk) ON DELETE CASCADE,
    seq          bigint NOT NULL,
    id           text COLLATE "C" NOT NULL,
    role         text NOT NULL,
    body         text NOT NULL,
    PRIMARY KEY (conversation, seq),
    UNIQUE (conversation, id)
);

CREATE TABLE {schema}.cursors (
    conversation bigint NOT NULL REFERENCES {schema}.conversations (pk) ON DELETE CASCADE,
    name         text COLLATE "C" NOT NULL,
    value        bigint NOT NULL,
    PRIMARY KEY (conversation, name)
);

-- `conversation` is the conversation's pk, NULL for the subject's user document.
CREATE TABLE {schema}.working_memory (
    namespace    text COLLATE "C" NOT NULL,
    subject      text COLLATE "C" NOT NULL,
    conversation bigint REFERENCES {schema}.conversations (pk) ON DELETE CASCADE,
    content      bytea  NOT NULL,
    format       text   NOT NULL,
    revision     bigint NOT NULL,
    updated_at   bigint NOT NULL,
    UNIQUE NULLS NOT DISTINCT (namespace, subject, conversation)
);

-- `tokens` are the core lexical tokens of `text` (the lexical index, through GIN).
CREATE TABLE {schema}.facts (
    pk            bigserial PRIMARY KEY,
    namespace     text COLLATE "C" NOT NULL,
    subject       text COLLATE "C" NOT NULL,
    id            text COLLATE "C" NOT NULL,
    text          bytea  NOT NULL,
    kind          text COLLATE "C",
    key           text COLLATE "C",
    tags          text[] COLLATE "C" NOT NULL,
    score         real,
    source        text,
    embedding     real[],
    created_at    bigint NOT NULL,
    updated_at    bigint NOT NULL,
    expires_at    bigint,
    valid_to      bigint,
    superseded_by text COLLATE "C",
    tokens        text[] COLLATE "C" NOT NULL,
    UNIQUE (namespace, subject, id)
);
CREATE INDEX facts_newest ON {schema}.facts (namespace, subject, created_at DESC, id DESC);
CREATE INDEX facts_by_key ON {schema}.facts (namespace, subject, key) WHERE key IS NOT NULL;
CREATE INDEX facts_tokens ON {schema}.facts USING gin (tokens);

CREATE TABLE {schema}.collections (
    pk        bigserial PRIMARY KEY,
    namespace text COLLATE "C" NOT NULL,
    name      text COLLATE "C" NOT NULL,
    dims      integer NOT NULL,
    metric    text    NOT NULL,
    model     text COLLATE "C" NOT NULL,
    UNIQUE (namespace, name)
);

-- Vectors are `real[]`; with pgvector each collection gets a partial HNSW index over
-- `embedding::vector(dims)`. `filter` is `metadata` as jsonb for SQL filters, NULL when the
-- metadata holds a NUL character (jsonb cannot); such rows are filtered in Rust.
CREATE TABLE {schema}.vectors (
    collection      bigint NOT NULL REFERENCES {schema}.collections (pk) ON DELETE CASCADE,
    subject         text COLLATE "C" NOT NULL,
    id              text COLLATE "C" NOT NULL,
    embedding       real[] NOT NULL,
    text            bytea,
    metadata        text   NOT NULL,
    filter          jsonb,
    conversation_id text COLLATE "C",
    PRIMARY KEY (collection, subject, id)
);
CREATE INDEX vectors_by_conversation ON {schema}.vectors (subject, conversation_id)
    WHERE conversation_id IS NOT NULL;

CREATE TABLE {schema}.checkpoints (
    namespace  text COLLATE "C" NOT NULL,
    subject    text COLLATE "C" NOT NULL,
    id         text COLLATE "C" NOT NULL,
    workflow   text COLLATE "C" NOT NULL,
    status     text   NOT NULL,
    state      text   NOT NULL,
    version    bigint NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    PRIMARY KEY (namespace, subject, id)
);
CREATE INDEX checkpoints_suspended ON {schema}.checkpoints (namespace, subject, updated_at, id)
    WHERE status = 'suspended';

CREATE TABLE {schema}.cache (
    namespace  text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    value      bytea NOT NULL,
    expires_at bigint,
    PRIMARY KEY (namespace, key)
);
