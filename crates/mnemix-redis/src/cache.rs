//! The cache: a hash per entry with the store clock's expiry, the server's TTL behind it, and
//! an index of keys by expiry for export.

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use mnemix_core::{CacheStore, Namespace, Result};
use redis::Script;

use crate::{RedisResultExt, RedisStore};

static SET: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/cache_set.lua")));
static DELETE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/cache_delete.lua")));

#[async_trait]
impl CacheStore for RedisStore {
    async fn cache_get(&self, namespace: &Namespace, key: &str) -> Result<Option<Vec<u8>>> {
        let (value, expires_at): (Option<Vec<u8>>, Option<i64>) = redis::cmd("HMGET")
            .arg(self.keys.namespace(namespace).cache_entry(key))
            .arg(&["value", "expires_at"])
            .query_async(&mut self.conn())
            .await
            .db()?;
        let now = self.clock.now().as_millis();
        Ok(value.filter(|_| expires_at.is_none_or(|at| at > now)))
    }

    async fn cache_set(
        &self,
        namespace: &Namespace,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        self.register_namespace(namespace).await?;
        let keys = self.keys.namespace(namespace);
        let now = self.clock.now();
        let expires_at = ttl.map(|ttl| now.saturating_add(ttl));
        let remaining = expires_at.map(|at| at.as_millis().saturating_sub(now.as_millis()));
        let _: i64 = SET
            .key(keys.cache_entry(key))
            .key(keys.cache_index())
            .arg(key)
            .arg(value)
            .arg(
                expires_at
                    .map(|at| at.as_millis().to_string())
                    .unwrap_or_default(),
            )
            .arg(remaining.map(|ms| ms.to_string()).unwrap_or_default())
            .arg(now.as_millis())
            .invoke_async(&mut self.conn())
            .await
            .db()?;
        Ok(())
    }

    async fn cache_delete(&self, namespace: &Namespace, key: &str) -> Result<bool> {
        let keys = self.keys.namespace(namespace);
        let live: i64 = DELETE
            .key(keys.cache_entry(key))
            .key(keys.cache_index())
            .arg(key)
            .arg(self.clock.now().as_millis())
            .invoke_async(&mut self.conn())
            .await
            .db()?;
        Ok(live == 1)
    }
}
