//! A neutral byte cache with TTL: embedding cache, provider prompt-cache registry.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::scope::Namespace;

/// The most keys one [`CacheStore::cache_get_many`] or [`CacheStore::cache_set_many`] takes.
pub const MAX_CACHE_BATCH: usize = 1_000;

/// Bytes by `(namespace, key)` with optional time-to-live.
#[async_trait]
pub trait CacheStore: Send + Sync {
    /// Reads a value.
    ///
    /// # Behavior
    /// - `None` when missing or expired by the store's clock.
    async fn cache_get(&self, namespace: &Namespace, key: &str) -> Result<Option<Vec<u8>>>;

    /// Writes a value, replacing any previous one and its TTL.
    ///
    /// # Behavior
    /// - With a TTL the entry expires at `now + ttl` (store clock); without, it stays.
    /// - Any bytes round-trip exactly; the key follows identifier rules (`InvalidInput`).
    async fn cache_set(
        &self,
        namespace: &Namespace,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<()>;

    /// Reads several values in one call (the embedding cache looks up a batch of texts).
    ///
    /// # Behavior
    /// - One answer per key, in the order of `keys`, each what [`cache_get`](Self::cache_get)
    ///   would answer; a key asked twice is answered twice.
    /// - At most [`MAX_CACHE_BATCH`] keys (`InvalidInput`); each follows identifier rules.
    ///
    /// The default reads each key with `cache_get`, concurrently (on a pipelining connection,
    /// such as Redis's multiplexed one, that is one round trip); a backend that can answer in
    /// one request overrides it.
    async fn cache_get_many(
        &self,
        namespace: &Namespace,
        keys: &[String],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        futures::future::try_join_all(keys.iter().map(|key| self.cache_get(namespace, key))).await
    }

    /// Writes several values in one call, all with the same TTL.
    ///
    /// # Behavior
    /// - Each entry is written as [`cache_set`](Self::cache_set) writes it; of a key given
    ///   twice, the later value is kept.
    /// - At most [`MAX_CACHE_BATCH`] entries (`InvalidInput`); each key follows identifier
    ///   rules, and a bad key writes nothing.
    /// - Not atomic as a whole: after a failure some entries may be written (a cache may lose
    ///   entries, never hold wrong ones).
    ///
    /// The default writes each entry with `cache_set`, concurrently; a backend that can write
    /// them in one request overrides it.
    async fn cache_set_many(
        &self,
        namespace: &Namespace,
        entries: Vec<(String, Vec<u8>)>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        let writes = entries
            .into_iter()
            .map(|(key, value)| async move { self.cache_set(namespace, &key, value, ttl).await });
        futures::future::try_join_all(writes).await?;
        Ok(())
    }

    /// Removes a value.
    ///
    /// # Behavior
    /// - Returns whether an unexpired value existed; an expired one reports `false`.
    /// - Another namespace's entry with the same key is untouched.
    async fn cache_delete(&self, namespace: &Namespace, key: &str) -> Result<bool>;
}
