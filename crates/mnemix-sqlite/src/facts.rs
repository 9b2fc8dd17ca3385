//! Facts, as the SQLite family writes them once (`mnemix_sqlite_sql::family::facts`), on this
//! store's connections: a remember in the write group, a recall in a read transaction whose
//! `BEGIN` and `COMMIT` ride in its statements, single statements on a reader or the writer.

use async_trait::async_trait;
use mnemix_core::{
    Fact, FactId, FactQuery, FactStore, NewFact, Page, RecallQuery, RememberOptions,
    RememberOutcome, Result, Scope, ScoredFact, Timestamp,
};
use mnemix_sqlite_sql::family::facts as family;

use crate::connections::Tx;
use crate::db::Sqlx;
use crate::SqliteStore;

#[async_trait]
impl FactStore for SqliteStore {
    async fn remember(
        &self,
        scope: &Scope,
        new: NewFact,
        options: RememberOptions,
    ) -> Result<RememberOutcome> {
        let now = self.clock.now();
        let scope = scope.clone();
        let (outcome, held) = self
            .writer
            .write(move |tx| {
                Box::pin(async move { family::remember(tx, &scope, new, options, now).await })
            })
            .await?;
        held.apply(&self.held_facts);
        Ok(outcome)
    }

    async fn recall(&self, scope: &Scope, query: RecallQuery) -> Result<Vec<ScoredFact>> {
        let mut tx = Tx::begun_in_first_statement(self.reader.acquire().await?);
        let recalled =
            family::recall(&mut tx, &self.held_facts, scope, &query, self.clock.now()).await?;
        tx.finish();
        Ok(recalled)
    }

    async fn get_fact(&self, scope: &Scope, id: &FactId) -> Result<Fact> {
        let mut conn = self.reader.acquire().await?;
        family::get_fact(&mut Sqlx(&mut conn), scope, id, self.clock.now()).await
    }

    async fn list_facts(&self, scope: &Scope, query: FactQuery) -> Result<Page<Fact>> {
        let mut conn = self.reader.acquire().await?;
        family::list_facts(&mut Sqlx(&mut conn), scope, query, self.clock.now()).await
    }

    async fn history(&self, scope: &Scope, key: &str) -> Result<Vec<Fact>> {
        let mut conn = self.reader.acquire().await?;
        family::history(&mut Sqlx(&mut conn), scope, key, self.clock.now()).await
    }

    async fn forget(&self, scope: &Scope, id: &FactId) -> Result<bool> {
        let mut conn = self.writer.connections().acquire().await?;
        family::forget(&mut Sqlx(&mut conn), scope, id, self.clock.now()).await
    }

    async fn set_expiry(
        &self,
        scope: &Scope,
        ids: &[FactId],
        expires_at: Option<Timestamp>,
    ) -> Result<Vec<FactId>> {
        // One statement: all the ids or none.
        let mut conn = self.writer.connections().acquire().await?;
        let now = self.clock.now();
        family::set_expiry(&mut Sqlx(&mut conn), scope, ids, expires_at, now).await
    }
}
