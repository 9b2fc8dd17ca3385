-- Vectors leave `real[]`. Where the store uses pgvector (the extension exists and the store was
-- not told to do without it: `agent_memory.pgvector` is set by the migration runner), they are
-- pgvector's own `vector` type, so a search compares rows without casting each one from an
-- array; otherwise they are `bytea` holding the f32 values little-endian, so reading a row is a
-- copy rather than an array decode. Each collection's HNSW index over
-- `embedding::vector(dims)` is rebuilt by the type change, which takes as long as building it.
--
-- Rows stay whole up to 8,160 bytes: at the default target (2,032) a 384-dim vector (1,540 bytes)
-- beside its text and metadata was moved to the TOAST table, and every row a search compared
-- cost a TOAST lookup (12 ms for 500 rows instead of 1.6 ms). The type change rewrites every
-- row, so rows already stored move back too. Without pgvector the bytes are not compressed,
-- as pgvector does not compress `vector`: f32 values barely compress.
ALTER TABLE {schema}.vectors SET (toast_tuple_target = 8160);

CREATE FUNCTION {schema}.agent_memory_f32le(real[]) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT AS $f$
    SELECT coalesce(
        string_agg(substring(b FROM 4 FOR 1) || substring(b FROM 3 FOR 1)
                   || substring(b FROM 2 FOR 1) || substring(b FROM 1 FOR 1), ''::bytea
                   ORDER BY i),
        ''::bytea)
    FROM unnest($1) WITH ORDINALITY AS e (x, i), float4send(x) AS b
$f$;

DO $do$
DECLARE
    hnsw regclass;
BEGIN
    IF current_setting('agent_memory.pgvector', true) = 'on'
       AND EXISTS (SELECT FROM pg_extension WHERE extname = 'vector') THEN
        ALTER TABLE {schema}.vectors ALTER COLUMN embedding TYPE vector USING embedding::vector;
    ELSE
        -- Without pgvector no HNSW index is used, and none could be rebuilt over `bytea`.
        FOR hnsw IN SELECT indexrelid::regclass FROM pg_index
                    WHERE indrelid = '{schema}.vectors'::regclass
                      AND indexrelid::regclass::text LIKE '%vectors\_hnsw\_%' LOOP
            EXECUTE format('DROP INDEX %s', hnsw);
        END LOOP;
        ALTER TABLE {schema}.vectors
            ALTER COLUMN embedding TYPE bytea USING {schema}.agent_memory_f32le(embedding),
            ALTER COLUMN embedding SET STORAGE EXTERNAL;
    END IF;
END
$do$;

DROP FUNCTION {schema}.agent_memory_f32le(real[]);
