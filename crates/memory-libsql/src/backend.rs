//! [`MemoryBackend`] for the libSQL store: name, capabilities and `forget_all`.

use async_trait::async_trait;
use memory_core::{
    Capabilities, DeletionReceipt, Durability, MemoryBackend, Result, Scope, VectorIndexKind,
    VectorSearch,
};

use crate::db::{execute, subject_of, BACKEND};
use crate::vectors::delete_scope_vectors;
use crate::LibsqlStore;

#[async_trait]
impl MemoryBackend for LibsqlStore {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            vector_search: VectorSearch::Approximate(VectorIndexKind::DiskAnn),
            full_text: false,
            native_ttl: false,
            // Durable against a process crash in both modes; see the crate docs for power loss.
            durability: Durability::Durable,
            max_batch: None,
            cluster: false,
        }
    }

    async fn forget_all(&self, scope: &Scope) -> Result<DeletionReceipt> {
        scope.require_subject("forget_all")?;
        let (namespace, subject) = (scope.namespace().as_str(), subject_of(scope));
        let tx = self.write().await?;
        let mut receipt = DeletionReceipt::default();
        // Children first, so each count is what was removed (cascades would hide them).
        for (count, sql) in [
            (
                &mut receipt.messages,
                "DELETE FROM messages WHERE conversation IN
                     (SELECT pk FROM conversations WHERE namespace = ?1 AND subject = ?2)",
            ),
            (
                &mut receipt.cursors,
                "DELETE FROM cursors WHERE conversation IN
                     (SELECT pk FROM conversations WHERE namespace = ?1 AND subject = ?2)",
            ),
            (
                &mut receipt.working_memory,
                "DELETE FROM working_memory WHERE namespace = ?1 AND subject = ?2",
            ),
            (
                &mut receipt.conversations,
                "DELETE FROM conversations WHERE namespace = ?1 AND subject = ?2",
            ),
            (
                &mut receipt.facts,
                "DELETE FROM facts WHERE namespace = ?1 AND subject = ?2",
            ),
            (
                &mut receipt.checkpoints,
                "DELETE FROM checkpoints WHERE namespace = ?1 AND subject = ?2",
            ),
        ] {
            *count = execute(&tx, sql, (namespace, subject)).await?;
        }
        receipt.vectors = delete_scope_vectors(&tx, scope).await?;
        tx.commit().await?;
        Ok(receipt)
    }
}
