//! [`MemoryBackend`] for the SQLite store: its name and capabilities; the rest is the SQLite
//! family's (`mnemix_sqlite_family::family::store`).

use async_trait::async_trait;
use mnemix_core::{
    Capabilities, DeletionReceipt, Durability, MemoryBackend, Result, Scope, Timestamp,
    VectorSearch,
};
use mnemix_sqlite_family::family::store;

use crate::db::BACKEND;
use crate::SqliteStore;

#[async_trait]
impl MemoryBackend for SqliteStore {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn now(&self) -> Timestamp {
        self.common.clock.now()
    }

    fn capabilities(&self) -> Capabilities {
        // Durable against a process crash in both modes; see the crate docs for power loss.
        Capabilities::default()
            .with_vector_search(VectorSearch::Exact)
            .with_durability(Durability::Durable)
    }

    async fn schema_version(&self) -> Result<Option<u32>> {
        store::schema_version(self).await
    }

    async fn table_counts(&self) -> Result<Vec<(String, u64)>> {
        store::table_counts(self).await
    }

    async fn forget_all(&self, scope: &Scope) -> Result<DeletionReceipt> {
        store::forget_all(self, scope).await
    }

    async fn count_owned(&self, scope: &Scope) -> Result<DeletionReceipt> {
        store::count_owned(self, scope).await
    }
}
