//! [`MemoryBackend`] for the Redis store: name, capabilities and `forget_all`.

use std::sync::LazyLock;

use async_trait::async_trait;
use memory_core::{Capabilities, DeletionReceipt, MemoryBackend, Result, Scope, VectorSearch};
use redis::Script;

use crate::{RedisResultExt, RedisStore, BACKEND};

static FORGET_ALL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("lua/facts_prelude.lua"),
        include_str!("lua/forget_all.lua")
    ))
});

#[async_trait]
impl MemoryBackend for RedisStore {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
            .with_vector_search(VectorSearch::Exact)
            .with_durability(self.durability)
    }

    async fn forget_all(&self, scope: &Scope) -> Result<DeletionReceipt> {
        let keys = self.keys.scope(scope);
        // Everything a subject owns is in its slot: one script erases it atomically; then the
        // subject's name leaves the namespace's registry (another slot).
        let [conversations, messages, cursors, working_memory, facts, vectors, checkpoints]: [u64;
            7] = FORGET_ALL
            .key(keys.conversations())
            .arg(keys.base())
            .invoke_async(&mut self.conn())
            .await
            .db()?;
        let _: i64 = redis::cmd("SREM")
            .arg(self.keys.namespace(scope.namespace()).subjects())
            .arg(scope.subject().map_or("", |s| s.as_str()))
            .query_async(&mut self.conn())
            .await
            .db()?;
        Ok(DeletionReceipt {
            conversations,
            messages,
            facts,
            vectors,
            working_memory,
            checkpoints,
            cursors,
        })
    }
}
