//! [`MemoryBackend`] for the Redis store: name, capabilities and `forget_all`.

use std::sync::LazyLock;

use async_trait::async_trait;
use memory_core::{
    Capabilities, DeletionReceipt, MemoryBackend, Result, Scope, TransferStore, VectorSearch,
};
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

    /// Records by kind, counted with `ZCARD`/`HLEN`/`SCARD`/`EXISTS` over the registries
    /// (namespaces, their subjects, each scope's index keys); nothing is decoded. Commands per
    /// scope, plus one per conversation and per collection a scope holds: an operator's command,
    /// not a hot path.
    async fn table_counts(&self) -> Result<Vec<(String, u64)>> {
        let mut counts = [0u64; 8];
        let [conversations, messages, facts, collections, vectors, working_memory, checkpoints, cache] =
            &mut counts;
        for namespace in self.namespaces().await? {
            let keys = self.keys.namespace(&namespace);
            *collections += self.count("HLEN", &keys.collections()).await?;
            *cache += self.count("ZCARD", &keys.cache_index()).await?;
            for scope in self.scopes(&namespace).await? {
                let keys = self.keys.scope(&scope);
                let ids: Vec<String> = redis::cmd("ZRANGE")
                    .arg(keys.conversations())
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut self.conn())
                    .await
                    .db()?;
                *conversations += ids.len() as u64;
                for id in ids {
                    let id = memory_core::ConversationId::new(id)
                        .map_err(|e| crate::corrupt("conversation id", e))?;
                    *messages += self.count("ZCARD", &keys.messages(&id)).await?;
                    *working_memory += self
                        .count(
                            "EXISTS",
                            &keys.working(&memory_core::WorkingMemoryKey::Conversation(id)),
                        )
                        .await?;
                }
                *working_memory += self
                    .count(
                        "EXISTS",
                        &keys.working(&memory_core::WorkingMemoryKey::User),
                    )
                    .await?;
                *facts += self.count("ZCARD", &keys.facts()).await?;
                *checkpoints += self.count("SCARD", &keys.checkpoint_ids()).await?;
                let incarnations: Vec<String> = redis::cmd("SMEMBERS")
                    .arg(keys.vector_incarnations())
                    .query_async(&mut self.conn())
                    .await
                    .db()?;
                for incarnation in incarnations {
                    *vectors += self.count("HLEN", &keys.vectors(&incarnation)).await?;
                }
            }
        }
        Ok([
            "conversations",
            "messages",
            "facts",
            "collections",
            "vectors",
            "working_memory",
            "checkpoints",
            "cache",
        ]
        .into_iter()
        .map(str::to_owned)
        .zip(counts)
        .collect())
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

impl RedisStore {
    /// One counting command (`ZCARD`, `HLEN`, `SCARD`, `EXISTS`) on one key.
    async fn count(&self, command: &str, key: &str) -> Result<u64> {
        redis::cmd(command)
            .arg(key)
            .query_async(&mut self.conn())
            .await
            .db()
    }
}
