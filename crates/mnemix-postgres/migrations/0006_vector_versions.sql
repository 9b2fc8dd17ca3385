-- Each scope's vectors in a collection have a version that every write of them changes in the
-- writing transaction, so a search may hold a scope's matrix in the client and read only the
-- version when nothing changed. Versions come from one sequence, so none repeats, also after a
-- subject's erase removes its rows here. `previous` is the version the last write replaced: a
-- writer whose held matrix was at `previous` applies its own change and holds the new version.
-- A scope without a row here has no vectors. Every writer takes its scope's row first, before
-- any vector row, so writers of one scope queue there.
CREATE SEQUENCE {schema}.vector_versions_seq;

CREATE TABLE {schema}.vector_versions (
    collection bigint NOT NULL REFERENCES {schema}.collections (pk) ON DELETE CASCADE,
    subject    text COLLATE "C" NOT NULL,
    version    bigint NOT NULL,
    previous   bigint,
    PRIMARY KEY (collection, subject)
);

INSERT INTO {schema}.vector_versions (collection, subject, version)
SELECT collection, subject, nextval('{schema}.vector_versions_seq')
FROM (SELECT DISTINCT collection, subject FROM {schema}.vectors) AS scopes;
