//! [`MemoryBackend`] for the libSQL store: name, capabilities and `forget_all`.

use async_trait::async_trait;
use mnemix_core::adapter::held_key;
use mnemix_core::{
    Capabilities, DeletionReceipt, Durability, MemoryBackend, Result, Scope, Timestamp,
    VectorIndexKind, VectorSearch,
};
use mnemix_sqlite_sql::family;

use crate::db::BACKEND;
use crate::vectors::delete_scope_vectors;
use crate::LibsqlStore;

#[async_trait]
impl MemoryBackend for LibsqlStore {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn now(&self) -> Timestamp {
        self.common.clock.now()
    }

    fn capabilities(&self) -> Capabilities {
        // Durable against a process crash in both modes; see the crate docs for power loss.
        // A store that never asks the index scans every scope exactly.
        let search = if self.config.index_min_rows == usize::MAX {
            VectorSearch::Exact
        } else {
            VectorSearch::Approximate(VectorIndexKind::DiskAnn)
        };
        Capabilities::default()
            .with_vector_search(search)
            .with_durability(Durability::Durable)
    }

    async fn schema_version(&self) -> Result<Option<u32>> {
        let tx = self.read().await?;
        crate::db::schema_version(&tx).await.map(Some)
    }

    /// Rows per table; `vectors` sums every collection's table.
    async fn table_counts(&self) -> Result<Vec<(String, u64)>> {
        let tx = self.read().await?;
        let mut counts = Vec::new();
        for table in [
            "conversations",
            "messages",
            "facts",
            "collections",
            "working_memory",
            "checkpoints",
            "cache",
        ] {
            let rows = crate::scalar_count(&tx, &format!("SELECT count(*) FROM {table}")).await?;
            counts.push((table.to_owned(), rows));
        }
        let mut vectors = 0;
        for table in crate::vectors::all_tables(&tx).await? {
            vectors += crate::scalar_count(&tx, &format!("SELECT count(*) FROM {table}")).await?;
        }
        counts.insert(4, ("vectors".to_owned(), vectors));
        tx.commit().await?;
        Ok(counts)
    }

    async fn forget_all(&self, scope: &Scope) -> Result<DeletionReceipt> {
        let mut tx = self.write().await?;
        let mut receipt = family::forget_subject(&mut *tx, scope, self.common.clock.now()).await?;
        receipt.vectors = delete_scope_vectors(&tx, scope).await?;
        tx.commit().await?;
        self.common.held_facts.remove(&held_key(scope));
        Ok(receipt)
    }
}
