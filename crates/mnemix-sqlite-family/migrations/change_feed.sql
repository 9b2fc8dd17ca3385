-- The change feed (mnemix_core::changes): one row per write that changed something, inserted
-- in the write's own transaction. SQLite writes one transaction at a time, so positions
-- (AUTOINCREMENT: never reused, even after a trim removes the newest rows) are commit order.
-- Ids and principals only, never memory text. `subject` is '' for the shared scope, a
-- namespace-wide record, and a change scrubbed by its subject's erasure.
CREATE TABLE changes (
    position  INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace TEXT    NOT NULL,
    subject   TEXT    NOT NULL,
    at        INTEGER NOT NULL,
    operation TEXT    NOT NULL,
    within    TEXT,
    records   TEXT    NOT NULL,
    principal TEXT    NOT NULL,
    scrubbed  INTEGER NOT NULL DEFAULT 0
);
-- A namespace's feed in order; a subject's changes, for its erasure.
CREATE INDEX changes_by_namespace ON changes (namespace, position);
CREATE INDEX changes_by_subject ON changes (namespace, subject) WHERE subject <> '';
-- The position of the last change each namespace's trims removed.
CREATE TABLE change_horizons (
    namespace TEXT    PRIMARY KEY,
    position  INTEGER NOT NULL
);
