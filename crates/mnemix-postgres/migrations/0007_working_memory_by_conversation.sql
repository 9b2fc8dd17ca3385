-- Deleting a conversation (alone, or in a subject's erase) cascades to its working memory, whose
-- unique key leads with the namespace: without an index leading with `conversation`, each
-- deleted conversation read the whole table. Found by C1's tenant axis (forget_all of a tenant
-- 3–4 ms among 10,000 tenants, 14.8 ms among 100,000); EXPLAIN ANALYZE of one conversation's
-- delete among 100,001 working memories: the cascade's trigger 83.8 ms, 0.12 ms with this index.
CREATE INDEX working_memory_by_conversation ON {schema}.working_memory (conversation)
    WHERE conversation IS NOT NULL;
