//! [`MemoryBackend`] for the Redis store: name, capabilities, `forget_all` and
//! `forget_namespace`.

use std::sync::LazyLock;

use async_trait::async_trait;
use mnemix_core::{
    Capabilities, DeletionReceipt, MemoryBackend, Namespace, NamespaceReceipt, Result, Scope,
    Timestamp, TransferStore, VectorSearch, WorkingMemoryKey,
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

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
            .with_vector_search(VectorSearch::Exact)
            .with_durability(self.durability)
    }

    /// Records by kind, counted with `ZCARD`/`HLEN`/`SCARD`/`EXISTS` (nothing is decoded):
    /// per registered namespace its live collections and cache index, then one pipeline per
    /// scope (its keys share a slot). An operator's command, not a hot path.
    async fn table_counts(&self) -> Result<Vec<(String, u64)>> {
        let mut counts = [0u64; 8];
        let [conversations, messages, facts, collections, vectors, working_memory, checkpoints, cache] =
            &mut counts;
        for namespace in self.registered_namespaces().await? {
            // Records of a dropped collection's incarnation are not counted: no read sees them.
            let live = self.collections_by_incarnation(&namespace).await?;
            *collections += live.len() as u64;
            *cache += redis::cmd("ZCARD")
                .arg(self.keys.namespace(&namespace).cache_index())
                .query_async::<u64>(&mut self.conn())
                .await
                .db()?;
            for scope in self.scopes(&namespace).await? {
                let keys = self.keys.scope(&scope);
                let ids = self.conversation_ids(&keys).await?;
                let mut pipe = redis::pipe();
                pipe.exists(keys.working(&WorkingMemoryKey::User))
                    .zcard(keys.facts())
                    .scard(keys.checkpoint_ids());
                for id in &ids {
                    pipe.zcard(keys.messages(id))
                        .exists(keys.working(&WorkingMemoryKey::Conversation(id.clone())));
                }
                for incarnation in live.keys() {
                    pipe.hlen(keys.vectors(incarnation));
                }
                let replies: Vec<u64> = pipe.query_async(&mut self.conn()).await.db()?;
                let (head, rest) = replies.split_at(3);
                let (per_conversation, per_collection) = rest.split_at(2 * ids.len());
                *conversations += ids.len() as u64;
                *working_memory += head[0];
                *facts += head[1];
                *checkpoints += head[2];
                for pair in per_conversation.chunks(2) {
                    *messages += pair[0];
                    *working_memory += pair[1];
                }
                *vectors += per_collection.iter().sum::<u64>();
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
            .arg(self.clock.now().as_millis())
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
            // No change feed here yet (`Capabilities::change_feed`): nothing to scrub.
            changes: 0,
        })
    }

    /// Every record as every backend erases a namespace, then its bookkeeping: the scopes'
    /// fact version tokens (a scope whose facts were forgotten one by one keeps its token,
    /// and no longer counts as holding data) and the `subjects` set. Two keys stay: `colseq`,
    /// so that a collection made again never draws an incarnation whose records a drop racing
    /// the erasure may not have deleted yet, and the name in `namespaces`, which every process
    /// adds once and would not add again (`namespaces` lists only a namespace holding data).
    async fn forget_namespace(&self, namespace: &Namespace) -> Result<NamespaceReceipt> {
        let receipt = mnemix_core::adapter::forget_namespace_records(self, namespace).await?;
        let keys = self.keys.namespace(namespace);
        let subjects: Vec<String> = redis::cmd("SMEMBERS")
            .arg(keys.subjects())
            .query_async(&mut self.conn())
            .await
            .db()?;
        for subject in subjects {
            let scope = if subject.is_empty() {
                Scope::shared(namespace.as_str())?
            } else {
                Scope::new(namespace.as_str(), subject)?
            };
            let _: i64 = redis::cmd("DEL")
                .arg(self.keys.scope(&scope).facts_version())
                .query_async(&mut self.conn())
                .await
                .db()?;
        }
        let _: i64 = redis::cmd("DEL")
            .arg(keys.subjects())
            .query_async(&mut self.conn())
            .await
            .db()?;
        Ok(receipt)
    }
}
