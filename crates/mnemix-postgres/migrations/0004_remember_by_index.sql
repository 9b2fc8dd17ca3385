-- A remember purges the subject's expired facts and looks for a current duplicate of the new
-- fact before it writes: both by index, so its cost does not grow with the subject's facts.
-- The duplicate check indexes md5(text), not the text: a B-tree entry holds at most ~2.7 KB.
CREATE INDEX facts_expiring ON {schema}.facts (namespace, subject, expires_at)
    WHERE expires_at IS NOT NULL;
CREATE INDEX facts_current_text ON {schema}.facts (namespace, subject, md5(text))
    WHERE superseded_by IS NULL;
