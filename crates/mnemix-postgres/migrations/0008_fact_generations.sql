-- A generation per subject's facts, changed by every statement that writes them (by any
-- connection or process), so a recall with a vector may rank the subject's facts held in the
-- client, read once per generation, instead of reading every fact with its embedding each time.
-- Statement triggers keep it, so no write can forget to. Generations come from one sequence, so
-- none repeats, also after a rollback or a subject's erase.
--
-- `base` is the generation the row had before the writing transaction (`writer`) first changed
-- it: a writer that reads `base` and `generation` before it commits knows that its writes alone
-- took the facts from the one to the other (the row stays locked by it until then), so its held
-- facts at `base` take its change and are current at `generation`.
CREATE SEQUENCE {schema}.fact_generations_seq;

CREATE TABLE {schema}.fact_generations (
    namespace  text COLLATE "C" NOT NULL,
    subject    text COLLATE "C" NOT NULL,
    generation bigint NOT NULL,
    base       bigint,
    writer     bigint,
    PRIMARY KEY (namespace, subject)
);

INSERT INTO {schema}.fact_generations (namespace, subject, generation)
SELECT namespace, subject, nextval('{schema}.fact_generations_seq')
FROM (SELECT DISTINCT namespace, subject FROM {schema}.facts ORDER BY 1, 2) AS subjects;

CREATE FUNCTION {schema}.facts_written() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO {schema}.fact_generations AS g (namespace, subject, generation, writer)
        SELECT namespace, subject, nextval('{schema}.fact_generations_seq'), txid_current()
        FROM (SELECT DISTINCT namespace, subject FROM written_before ORDER BY 1, 2) AS subjects
        ON CONFLICT (namespace, subject) DO UPDATE SET
            generation = excluded.generation,
            base = CASE WHEN g.writer = excluded.writer THEN g.base ELSE g.generation END,
            writer = excluded.writer;
    ELSE
        INSERT INTO {schema}.fact_generations AS g (namespace, subject, generation, writer)
        SELECT namespace, subject, nextval('{schema}.fact_generations_seq'), txid_current()
        FROM (SELECT DISTINCT namespace, subject FROM written ORDER BY 1, 2) AS subjects
        ON CONFLICT (namespace, subject) DO UPDATE SET
            generation = excluded.generation,
            base = CASE WHEN g.writer = excluded.writer THEN g.base ELSE g.generation END,
            writer = excluded.writer;
    END IF;
    RETURN NULL;
END
$f$;

CREATE TRIGGER facts_inserted AFTER INSERT ON {schema}.facts
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.facts_written();
CREATE TRIGGER facts_updated AFTER UPDATE ON {schema}.facts
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.facts_written();
CREATE TRIGGER facts_deleted AFTER DELETE ON {schema}.facts
    REFERENCING OLD TABLE AS written_before
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.facts_written();
