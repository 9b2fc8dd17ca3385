-- A generation per subject's facts, changed by every write of them, so a recall may rank from
-- the subject's facts held in memory (read once per generation) instead of reading them all
-- each time. Triggers keep it, so no write can forget to. Generations come from one clock for
-- the whole database: a subject erased and written again never meets a generation it had.
CREATE TABLE fact_clock (
    only  INTEGER PRIMARY KEY CHECK (only = 1),
    value INTEGER NOT NULL
);
INSERT INTO fact_clock (only, value) VALUES (1, 1);

CREATE TABLE fact_generations (
    namespace  TEXT    NOT NULL,
    subject    TEXT    NOT NULL,
    generation INTEGER NOT NULL,
    PRIMARY KEY (namespace, subject)
) WITHOUT ROWID;
INSERT INTO fact_generations (namespace, subject, generation)
    SELECT DISTINCT namespace, subject, 1 FROM facts;

CREATE TRIGGER facts_inserted AFTER INSERT ON facts BEGIN
    UPDATE fact_clock SET value = value + 1;
    INSERT INTO fact_generations (namespace, subject, generation)
        VALUES (NEW.namespace, NEW.subject, (SELECT value FROM fact_clock))
        ON CONFLICT (namespace, subject) DO UPDATE SET generation = excluded.generation;
END;

CREATE TRIGGER facts_updated AFTER UPDATE ON facts BEGIN
    UPDATE fact_clock SET value = value + 1;
    INSERT INTO fact_generations (namespace, subject, generation)
        VALUES (NEW.namespace, NEW.subject, (SELECT value FROM fact_clock))
        ON CONFLICT (namespace, subject) DO UPDATE SET generation = excluded.generation;
END;

CREATE TRIGGER facts_deleted AFTER DELETE ON facts BEGIN
    UPDATE fact_clock SET value = value + 1;
    UPDATE fact_generations SET generation = (SELECT value FROM fact_clock)
        WHERE namespace = OLD.namespace AND subject = OLD.subject;
END;
