//! [`MemoryBackend`] for the SQLite store: name, capabilities and `forget_all`.

use async_trait::async_trait;
use mnemix_core::adapter::held_key;
use mnemix_core::{
    Capabilities, DeletionReceipt, Durability, MemoryBackend, Result, Scope, Timestamp,
    VectorSearch,
};
use mnemix_sqlite_sql::family;

use crate::db::{subject_of, DbResult, BACKEND};
use crate::vectors::bump_generations;
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
        crate::db::schema_version(&mut *self.reader.acquire().await?)
            .await
            .map(Some)
    }

    async fn table_counts(&self) -> Result<Vec<(String, u64)>> {
        let mut counts = Vec::new();
        for (table, sql) in crate::TABLE_COUNTS {
            let rows: i64 = sqlx::query_scalar(*sql)
                .fetch_one(&mut *self.reader.acquire().await?)
                .await
                .db()?;
            counts.push(((*table).to_owned(), u64::try_from(rows).unwrap_or(0)));
        }
        Ok(counts)
    }

    async fn forget_all(&self, scope: &Scope) -> Result<DeletionReceipt> {
        let (namespace, subject) = (scope.namespace().as_str(), subject_of(scope));
        let mut tx = self.write().await?;
        let mut receipt = family::forget_subject(&mut tx, scope, self.common.clock.now()).await?;
        let touched: Vec<i64> = sqlx::query_scalar(
            "DELETE FROM vectors WHERE subject = ?2
               AND collection IN (SELECT pk FROM collections WHERE namespace = ?1)
             RETURNING collection",
        )
        .bind(namespace)
        .bind(subject)
        .fetch_all(&mut *tx)
        .await
        .db()?;
        receipt.vectors = touched.len() as u64;
        bump_generations(&mut tx, touched).await?;
        tx.commit().await.db()?;
        self.common.held_facts.remove(&held_key(scope));
        Ok(receipt)
    }
}
