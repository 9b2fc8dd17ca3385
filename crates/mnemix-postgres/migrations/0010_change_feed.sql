-- The change feed (mnemix_core::changes): one row per write that changed something, inserted in
-- the write's own transaction, with that transaction's id. Transactions commit concurrently, so
-- positions commit out of order; a read returns only rows of transactions older than every one
-- still running (pg_snapshot_xmin), ordered by (tx, position): below that horizon nothing more
-- can appear. Ids and principals only, never memory text. `subject` is '' for the shared scope,
-- a namespace-wide record and a change scrubbed by its subject's erasure.
CREATE TABLE {schema}.changes (
    position  bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tx        xid8    NOT NULL DEFAULT pg_current_xact_id(),
    namespace text    NOT NULL,
    subject   text    NOT NULL,
    at        bigint  NOT NULL,
    operation text    NOT NULL,
    within    text,
    records   text    NOT NULL,
    principal text    NOT NULL,
    scrubbed  boolean NOT NULL DEFAULT false
);
CREATE INDEX changes_in_order ON {schema}.changes (namespace, tx, position);
CREATE INDEX changes_by_subject ON {schema}.changes (namespace, subject) WHERE subject <> '';
-- The place of the last change each namespace's trims removed.
CREATE TABLE {schema}.change_horizons (
    namespace text   PRIMARY KEY,
    tx        xid8   NOT NULL,
    position  bigint NOT NULL
);
