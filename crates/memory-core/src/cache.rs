//! A neutral byte cache with TTL: embedding cache, provider prompt-cache registry.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::scope::Namespace;

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

    /// Removes a value.
    ///
    /// # Behavior
    /// - Returns whether an unexpired value existed; an expired one reports `false`.
    /// - Another namespace's entry with the same key is untouched.
    async fn cache_delete(&self, namespace: &Namespace, key: &str) -> Result<bool>;
}
