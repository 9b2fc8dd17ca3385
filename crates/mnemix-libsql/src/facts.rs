//! Facts, as the SQLite family writes them once (`mnemix_sqlite_sql::family::facts`), each call
//! in a read or write transaction of this store.

use async_trait::async_trait;
use mnemix_core::{
    Fact, FactId, FactQuery, FactStore, NewFact, Page, RecallQuery, RememberOptions,
    RememberOutcome, Result, Scope, ScoredFact, Timestamp,
};
use mnemix_sqlite_sql::family::facts as family;

use crate::LibsqlStore;

#[async_trait]
impl FactStore for LibsqlStore {
    async fn remember(
        &self,
        scope: &Scope,
        new: NewFact,
        options: RememberOptions,
    ) -> Result<RememberOutcome> {
        let now = self.clock.now();
        let mut tx = self.write().await?;
        let (outcome, held) = family::remember(&mut *tx, scope, new, options, now).await?;
        tx.commit().await?;
        held.apply(&self.held_facts);
        Ok(outcome)
    }

    async fn recall(&self, scope: &Scope, query: RecallQuery) -> Result<Vec<ScoredFact>> {
        let mut tx = self.read().await?;
        family::recall(&mut *tx, &self.held_facts, scope, &query, self.clock.now()).await
    }

    async fn get_fact(&self, scope: &Scope, id: &FactId) -> Result<Fact> {
        let mut tx = self.read().await?;
        family::get_fact(&mut *tx, scope, id, self.clock.now()).await
    }

    async fn list_facts(&self, scope: &Scope, query: FactQuery) -> Result<Page<Fact>> {
        let mut tx = self.read().await?;
        family::list_facts(&mut *tx, scope, query, self.clock.now()).await
    }

    async fn history(&self, scope: &Scope, key: &str) -> Result<Vec<Fact>> {
        let mut tx = self.read().await?;
        family::history(&mut *tx, scope, key, self.clock.now()).await
    }

    async fn forget(&self, scope: &Scope, id: &FactId) -> Result<bool> {
        let mut tx = self.write().await?;
        let live = family::forget(&mut *tx, scope, id, self.clock.now()).await?;
        tx.commit().await?;
        Ok(live)
    }

    async fn set_expiry(
        &self,
        scope: &Scope,
        ids: &[FactId],
        expires_at: Option<Timestamp>,
    ) -> Result<Vec<FactId>> {
        // One statement: all the ids or none.
        let mut tx = self.write().await?;
        let now = self.clock.now();
        let changed = family::set_expiry(&mut *tx, scope, ids, expires_at, now).await?;
        tx.commit().await?;
        Ok(changed)
    }
}
