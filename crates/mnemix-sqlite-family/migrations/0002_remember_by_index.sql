-- A remember purges the subject's expired facts and looks for a current duplicate of the new
-- fact before it writes: both by index, so its cost does not grow with the subject's facts.
CREATE INDEX facts_expiring ON facts (namespace, subject, expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX facts_current_text ON facts (namespace, subject, text) WHERE superseded_by IS NULL;
