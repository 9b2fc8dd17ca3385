//! The small keyed documents: working memory, checkpoints and the byte cache, as the SQLite
//! family writes them once (`mnemix_sqlite_sql::family::documents`), on this store's
//! connections: reads on a reader, single statements on the writer, read-then-write in a
//! write transaction.

use std::time::Duration;

use async_trait::async_trait;
use mnemix_core::{
    CacheStore, Checkpoint, CheckpointId, CheckpointStore, CheckpointUpdate, Namespace,
    NewCheckpoint, Result, Scope, WorkingMemory, WorkingMemoryKey, WorkingMemoryStore,
    WorkingMemoryUpdate,
};
use mnemix_sqlite_sql::family::documents as family;

use crate::db::{DbResult, Sqlx};
use crate::SqliteStore;

#[async_trait]
impl WorkingMemoryStore for SqliteStore {
    async fn get_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
    ) -> Result<Option<WorkingMemory>> {
        let mut conn = self.reader.acquire().await?;
        family::get_working_memory(&mut Sqlx(&mut conn), scope, key).await
    }

    async fn set_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
        update: WorkingMemoryUpdate,
    ) -> Result<WorkingMemory> {
        let now = self.clock.now();
        let mut conn = self.writer.connections().acquire().await?;
        family::set_working_memory(&mut Sqlx(&mut conn), scope, key, update, now).await
    }

    async fn clear_working_memory(&self, scope: &Scope, key: &WorkingMemoryKey) -> Result<bool> {
        let mut tx = self.write().await?;
        let removed = family::clear_working_memory(&mut Sqlx(&mut tx), scope, key).await?;
        tx.commit().await.db()?;
        Ok(removed)
    }
}

#[async_trait]
impl CheckpointStore for SqliteStore {
    async fn put_checkpoint(&self, scope: &Scope, new: NewCheckpoint) -> Result<Checkpoint> {
        let now = self.clock.now();
        let mut conn = self.writer.connections().acquire().await?;
        family::put_checkpoint(&mut Sqlx(&mut conn), scope, new, now).await
    }

    async fn get_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<Checkpoint> {
        let mut conn = self.reader.acquire().await?;
        family::get_checkpoint(&mut Sqlx(&mut conn), scope, id).await
    }

    async fn update_checkpoint(
        &self,
        scope: &Scope,
        id: &CheckpointId,
        update: CheckpointUpdate,
    ) -> Result<Checkpoint> {
        let now = self.clock.now();
        let mut tx = self.write().await?;
        let checkpoint =
            family::update_checkpoint(&mut Sqlx(&mut tx), scope, id, update, now).await?;
        tx.commit().await.db()?;
        Ok(checkpoint)
    }

    async fn list_suspended(
        &self,
        scope: &Scope,
        workflow: Option<&str>,
    ) -> Result<Vec<Checkpoint>> {
        let mut conn = self.reader.acquire().await?;
        family::list_suspended(&mut Sqlx(&mut conn), scope, workflow).await
    }

    async fn delete_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<bool> {
        let mut conn = self.writer.connections().acquire().await?;
        family::delete_checkpoint(&mut Sqlx(&mut conn), scope, id).await
    }
}

#[async_trait]
impl CacheStore for SqliteStore {
    async fn cache_get(&self, namespace: &Namespace, key: &str) -> Result<Option<Vec<u8>>> {
        let mut conn = self.reader.acquire().await?;
        family::cache_get(&mut Sqlx(&mut conn), namespace, key, self.clock.now()).await
    }

    async fn cache_set(
        &self,
        namespace: &Namespace,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        let expires = ttl.map(|ttl| self.clock.now().saturating_add(ttl));
        let mut conn = self.writer.connections().acquire().await?;
        family::put_cache(&mut Sqlx(&mut conn), namespace, key, &value, expires).await
    }

    async fn cache_get_many(
        &self,
        namespace: &Namespace,
        keys: &[String],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let mut conn = self.reader.acquire().await?;
        family::cache_get_many(&mut Sqlx(&mut conn), namespace, keys, self.clock.now()).await
    }

    async fn cache_set_many(
        &self,
        namespace: &Namespace,
        entries: Vec<(String, Vec<u8>)>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        let expires = ttl.map(|ttl| self.clock.now().saturating_add(ttl));
        // One transaction: one commit for the batch.
        let mut tx = self.write().await?;
        for (key, value) in &entries {
            family::put_cache(&mut Sqlx(&mut tx), namespace, key, value, expires).await?;
        }
        tx.commit().await.db()
    }

    async fn cache_delete(&self, namespace: &Namespace, key: &str) -> Result<bool> {
        let mut conn = self.writer.connections().acquire().await?;
        family::cache_delete(&mut Sqlx(&mut conn), namespace, key, self.clock.now()).await
    }
}
