//! [`MemoryBackend`] for the PostgreSQL store: name, capabilities and `forget_all`.

use async_trait::async_trait;
use mnemix_core::adapter::held_key;
use mnemix_core::{
    Capabilities, DeletionReceipt, Durability, MemoryBackend, Result, Scope, Timestamp,
    VectorIndexKind, VectorSearch,
};

use crate::db::{millis, subject_of, Db, DbResult, BACKEND};
use crate::PostgresStore;

#[async_trait]
impl MemoryBackend for PostgresStore {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
            .with_vector_search(if self.index {
                VectorSearch::Approximate(VectorIndexKind::Hnsw)
            } else {
                VectorSearch::Exact
            })
            .with_durability(Durability::Durable)
    }

    async fn schema_version(&self) -> Result<Option<u32>> {
        let client = self.client().await?;
        let row = client
            .row(
                &self.sql("SELECT coalesce(max(version), 0) FROM {s}.agent_memory_migrations"),
                &[],
            )
            .await?;
        Ok(row.map(|r| u32::try_from(r.get::<_, i32>(0)).unwrap_or(0)))
    }

    async fn table_counts(&self) -> Result<Vec<(String, u64)>> {
        let client = self.client().await?;
        let mut counts = Vec::new();
        for table in [
            "conversations",
            "messages",
            "cursors",
            "facts",
            "collections",
            "vectors",
            "working_memory",
            "checkpoints",
            "cache",
        ] {
            let row = client
                .row(
                    &self.sql(&format!("SELECT count(*) FROM {{s}}.{table}")),
                    &[],
                )
                .await?;
            let rows = row.map_or(0, |r| r.get::<_, i64>(0));
            counts.push((table.to_owned(), u64::try_from(rows).unwrap_or(0)));
        }
        Ok(counts)
    }

    async fn forget_all(&self, scope: &Scope) -> Result<DeletionReceipt> {
        let (namespace, subject) = (scope.namespace().as_str(), subject_of(scope));
        let mut client = self.client().await?;
        let tx = client.transaction().await.db()?;
        let mut receipt = DeletionReceipt::default();
        // Lock the scope's conversations first: an append holds its conversation's row lock
        // until it commits, so this waits for appends in flight and holds off new ones, and
        // the counts below see every message that is removed. Each statement then names these
        // conversations only: one created while the erasure runs is after it, and is kept
        // whole rather than removed uncounted by the cascade.
        let conversations: Vec<i64> = tx
            .rows(
                &self.sql(
                    "SELECT pk FROM {s}.conversations WHERE namespace = $1 AND subject = $2
                     FOR UPDATE",
                ),
                &[&namespace, &subject],
            )
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        // Children first, so each count is what was removed (cascades would hide them).
        for (count, sql) in [
            (
                &mut receipt.messages,
                "DELETE FROM {s}.messages WHERE conversation = ANY($1)",
            ),
            (
                &mut receipt.cursors,
                "DELETE FROM {s}.cursors WHERE conversation = ANY($1)",
            ),
        ] {
            *count = tx.exec(&self.sql(sql), &[&conversations]).await?;
        }
        // Working memory before conversations: a conversation's working memory cascades with it.
        receipt.working_memory = tx
            .exec(
                &self.sql("DELETE FROM {s}.working_memory WHERE namespace = $1 AND subject = $2"),
                &[&namespace, &subject],
            )
            .await?;
        receipt.conversations = tx
            .exec(
                &self.sql("DELETE FROM {s}.conversations WHERE pk = ANY($1)"),
                &[&conversations],
            )
            .await?;
        // Expired facts go uncounted: the receipt counts what readers could see.
        tx.exec(
            &self.sql(
                "DELETE FROM {s}.facts WHERE namespace = $1 AND subject = $2 AND expires_at <= $3",
            ),
            &[&namespace, &subject, &millis(self.clock.now())],
        )
        .await?;
        // The subject's vector versions are taken before its vectors go, and go with them.
        tx.exec(
            &self.sql(crate::vectors::BUMP_SUBJECT_VERSIONS),
            &[&namespace, &subject],
        )
        .await?;
        // The namespace's collections as an array (evaluated once), so a delete of vectors is a
        // lookup by its (collection, subject) key in each partition whatever the statistics:
        // `collection IN (SELECT …)` let a generic plan costed for a few large subjects join by
        // a scan of the partition (docs/decisions/postgres-append-row-lock.md).
        for (count, sql) in [
            (
                &mut receipt.facts,
                "DELETE FROM {s}.facts WHERE namespace = $1 AND subject = $2",
            ),
            (
                &mut receipt.checkpoints,
                "DELETE FROM {s}.checkpoints WHERE namespace = $1 AND subject = $2",
            ),
            (
                &mut receipt.vectors,
                "DELETE FROM {s}.vectors WHERE subject = $2
                   AND collection = ANY(ARRAY(SELECT pk FROM {s}.collections WHERE namespace = $1))",
            ),
        ] {
            *count = tx.exec(&self.sql(sql), &[&namespace, &subject]).await?;
        }
        tx.exec(
            &self.sql(
                "DELETE FROM {s}.vector_versions WHERE subject = $2
                   AND collection = ANY(ARRAY(SELECT pk FROM {s}.collections WHERE namespace = $1))",
            ),
            &[&namespace, &subject],
        )
        .await?;
        // After the facts: their deletes' trigger moves the generation first.
        tx.exec(
            &self.sql("DELETE FROM {s}.fact_generations WHERE namespace = $1 AND subject = $2"),
            &[&namespace, &subject],
        )
        .await?;
        tx.commit().await.db()?;
        self.held_facts.remove(&held_key(scope));
        Ok(receipt)
    }
}
