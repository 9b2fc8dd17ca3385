-- Who wrote each version of a fact and where its content came from (the JSON of
-- mnemix_core::Provenance; NULL for a fact written before, read as unrecorded), and when it was
-- true in the world, as its writer said (milliseconds; NULL when not said).
ALTER TABLE facts ADD COLUMN provenance TEXT;
ALTER TABLE facts ADD COLUMN valid_from INTEGER;
ALTER TABLE facts ADD COLUMN valid_until INTEGER;
