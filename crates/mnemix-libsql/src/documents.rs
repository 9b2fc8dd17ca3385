//! The small keyed documents: working memory, checkpoints and the byte cache, as the SQLite
//! family writes them once (`mnemix_sqlite_sql::family::documents`), each call in a read or
//! write transaction of this store.

use std::time::Duration;

use async_trait::async_trait;
use mnemix_core::{
    CacheStore, Checkpoint, CheckpointId, CheckpointStore, CheckpointUpdate, Namespace,
    NewCheckpoint, Result, Scope, WorkingMemory, WorkingMemoryKey, WorkingMemoryStore,
    WorkingMemoryUpdate,
};
use mnemix_sqlite_sql::family::documents as family;

use crate::LibsqlStore;

#[async_trait]
impl WorkingMemoryStore for LibsqlStore {
    async fn get_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
    ) -> Result<Option<WorkingMemory>> {
        let mut tx = self.read().await?;
        let found = family::get_working_memory(&mut *tx, scope, key).await?;
        tx.commit().await?;
        Ok(found)
    }

    async fn set_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
        update: WorkingMemoryUpdate,
    ) -> Result<WorkingMemory> {
        let now = self.clock.now();
        let mut tx = self.write().await?;
        let stored = family::set_working_memory(&mut *tx, scope, key, update, now).await?;
        tx.commit().await?;
        Ok(stored)
    }

    async fn clear_working_memory(&self, scope: &Scope, key: &WorkingMemoryKey) -> Result<bool> {
        let mut tx = self.write().await?;
        let removed = family::clear_working_memory(&mut *tx, scope, key).await?;
        tx.commit().await?;
        Ok(removed)
    }
}

#[async_trait]
impl CheckpointStore for LibsqlStore {
    async fn put_checkpoint(&self, scope: &Scope, new: NewCheckpoint) -> Result<Checkpoint> {
        let now = self.clock.now();
        let mut tx = self.write().await?;
        let checkpoint = family::put_checkpoint(&mut *tx, scope, new, now).await?;
        tx.commit().await?;
        Ok(checkpoint)
    }

    async fn get_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<Checkpoint> {
        let mut tx = self.read().await?;
        family::get_checkpoint(&mut *tx, scope, id).await
    }

    async fn update_checkpoint(
        &self,
        scope: &Scope,
        id: &CheckpointId,
        update: CheckpointUpdate,
    ) -> Result<Checkpoint> {
        let now = self.clock.now();
        let mut tx = self.write().await?;
        let checkpoint = family::update_checkpoint(&mut *tx, scope, id, update, now).await?;
        tx.commit().await?;
        Ok(checkpoint)
    }

    async fn list_suspended(
        &self,
        scope: &Scope,
        workflow: Option<&str>,
    ) -> Result<Vec<Checkpoint>> {
        let mut tx = self.read().await?;
        family::list_suspended(&mut *tx, scope, workflow).await
    }

    async fn delete_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<bool> {
        let mut tx = self.write().await?;
        let removed = family::delete_checkpoint(&mut *tx, scope, id).await?;
        tx.commit().await?;
        Ok(removed)
    }
}

#[async_trait]
impl CacheStore for LibsqlStore {
    async fn cache_get(&self, namespace: &Namespace, key: &str) -> Result<Option<Vec<u8>>> {
        let mut tx = self.read().await?;
        family::cache_get(&mut *tx, namespace, key, self.clock.now()).await
    }

    async fn cache_set(
        &self,
        namespace: &Namespace,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        let expires = ttl.map(|ttl| self.clock.now().saturating_add(ttl));
        let mut tx = self.write().await?;
        family::put_cache(&mut *tx, namespace, key, &value, expires).await?;
        tx.commit().await
    }

    async fn cache_get_many(
        &self,
        namespace: &Namespace,
        keys: &[String],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let mut tx = self.read().await?;
        let found = family::cache_get_many(&mut *tx, namespace, keys, self.clock.now()).await?;
        tx.commit().await?;
        Ok(found)
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
            family::put_cache(&mut *tx, namespace, key, value, expires).await?;
        }
        tx.commit().await
    }

    async fn cache_delete(&self, namespace: &Namespace, key: &str) -> Result<bool> {
        let mut tx = self.write().await?;
        let removed = family::cache_delete(&mut *tx, namespace, key, self.clock.now()).await?;
        tx.commit().await?;
        Ok(removed)
    }
}
