-- Each vector's Euclidean norm, computed in double precision by the writer. An exact search that
-- pgvector ranks in the server reads it to tell the rows whose norms pgvector's `float` sums
-- cannot compute faithfully (they always come back to be scored exactly) without recomputing
-- every row's norm per query.
ALTER TABLE {schema}.vectors ADD COLUMN norm double precision;
UPDATE {schema}.vectors
SET norm = (SELECT sqrt(coalesce(sum(x::float8 * x::float8), 0)) FROM unnest(embedding) AS x);
ALTER TABLE {schema}.vectors ALTER COLUMN norm SET NOT NULL;
