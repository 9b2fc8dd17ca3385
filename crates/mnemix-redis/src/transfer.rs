//! Export and restore: every key of a scope or namespace read back as [`Record`]s, and records
//! written verbatim.
//!
//! Redis has no transaction spanning slots, so a restore checks everything it can refuse
//! (orphans, unknown collections, misfit vectors) before it writes anything, then writes scope
//! by scope; a connection lost midway leaves part written, and running the restore again
//! completes it (records replace by identity). An export reads a scope in several commands, so
//! writes made meanwhile may show in part.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::LazyLock;

use async_trait::async_trait;
use mnemix_core::adapter::fact_tokens;
use mnemix_core::adapter::sort_canonical;
use mnemix_core::transfer::Record;
use mnemix_core::{
    ConversationId, MemoryError, Namespace, Result, Scope, StoredMessage, Subject, Timestamp,
    TransferStore, VectorRecord, VectorStore, WorkingMemoryKey,
};
use redis::Script;

use crate::conversations::{content_of, message_from_member, message_member};
use crate::keys::ScopeKeys;
use crate::working::{working_from, WorkingFields, WORKING_FIELDS};
use crate::{corrupt, to_json, RedisResultExt, RedisStore};

/// A conversation's messages (member, seq), cursors and working-memory fields, as read.
type ConversationChildren = (Vec<(Vec<u8>, f64)>, Vec<(String, u64)>, WorkingFields);

static RESTORE_MESSAGES: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/restore_messages.lua")));
static RESTORE_FACT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("lua/facts_prelude.lua"),
        include_str!("lua/restore_fact.lua")
    ))
});
static CACHE_SET: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/cache_set.lua")));

impl RedisStore {
    /// Whether a scope owns any record a read can see.
    async fn owns_anything(&self, scope: &Scope) -> Result<bool> {
        let keys = self.keys.scope(scope);
        let now = self.clock.now().as_millis();
        let (conversations, user_document, facts, expired, checkpoints, incarnations): (
            bool,
            bool,
            u64,
            u64,
            u64,
            Vec<String>,
        ) = redis::pipe()
            .exists(keys.conversations())
            .exists(keys.working(&WorkingMemoryKey::User))
            .zcard(keys.facts())
            .zcount(keys.expiring_facts(), "-inf", now)
            .scard(keys.checkpoint_ids())
            .smembers(keys.vector_incarnations())
            .query_async(&mut self.conn())
            .await
            .db()?;
        if conversations || user_document || facts > expired || checkpoints > 0 {
            return Ok(true);
        }
        let live = self.collections_by_incarnation(scope.namespace()).await?;
        for incarnation in incarnations.iter().filter(|i| live.contains_key(*i)) {
            let held: u64 = redis::cmd("HLEN")
                .arg(keys.vectors(incarnation))
                .query_async(&mut self.conn())
                .await
                .db()?;
            if held > 0 {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The live cache keys of a namespace: unexpired by the store's clock in the index, and
    /// still held (the server's TTL may have taken an entry first: the index and the entries
    /// expire by different clocks when the store's is not the server's).
    async fn live_cache_keys(&self, namespace: &Namespace) -> Result<Vec<String>> {
        let now = self.clock.now().as_millis();
        let keys = self.keys.namespace(namespace);
        let indexed: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(keys.cache_index())
            .arg(format!("({now}"))
            .arg("+inf")
            .query_async(&mut self.conn())
            .await
            .db()?;
        if indexed.is_empty() {
            return Ok(indexed);
        }
        let mut exists = redis::pipe();
        for key in &indexed {
            exists.exists(keys.cache_entry(key));
        }
        let held: Vec<bool> = exists.query_async(&mut self.conn()).await.db()?;
        Ok(indexed
            .into_iter()
            .zip(held)
            .filter_map(|(key, held)| held.then_some(key))
            .collect())
    }

    /// The ids of a scope's conversations, oldest first.
    pub(crate) async fn conversation_ids(&self, keys: &ScopeKeys) -> Result<Vec<ConversationId>> {
        let ids: Vec<String> = redis::cmd("ZRANGE")
            .arg(keys.conversations())
            .arg(0)
            .arg(-1)
            .query_async(&mut self.conn())
            .await
            .db()?;
        ids.into_iter()
            .map(|id| ConversationId::new(id).map_err(|e| corrupt("conversation id", e)))
            .collect()
    }

    /// Every namespace ever registered, whether or not it still holds data.
    pub(crate) async fn registered_namespaces(&self) -> Result<Vec<Namespace>> {
        let names: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.keys.namespaces())
            .query_async(&mut self.conn())
            .await
            .db()?;
        names
            .into_iter()
            .map(|name| Namespace::new(name).map_err(|e| corrupt("namespace", e)))
            .collect()
    }

    async fn export_conversations(
        &self,
        scope: &Scope,
        keys: &ScopeKeys,
        records: &mut Vec<Record>,
    ) -> Result<()> {
        for id in self.conversation_ids(keys).await? {
            // One deleted since the id was read is skipped.
            let Ok(conversation) = self.read_conversation(keys, &id).await else {
                continue;
            };
            records.push(Record::Conversation { conversation });
            let (messages, cursors, document): ConversationChildren = redis::pipe()
                .cmd("ZRANGE")
                .arg(keys.messages(&id))
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .hgetall(keys.cursors(&id))
                .cmd("HMGET")
                .arg(keys.working(&WorkingMemoryKey::Conversation(id.clone())))
                .arg(&WORKING_FIELDS)
                .query_async(&mut self.conn())
                .await
                .db()?;
            for (member, seq) in messages {
                records.push(Record::Message {
                    scope: scope.clone(),
                    conversation_id: id.clone(),
                    message: message_from_member(&member, seq as u64)?,
                });
            }
            for (name, value) in cursors {
                records.push(Record::Cursor {
                    scope: scope.clone(),
                    conversation_id: id.clone(),
                    name,
                    value,
                });
            }
            if let Some(memory) = working_from(document)? {
                records.push(Record::WorkingMemory {
                    scope: scope.clone(),
                    key: WorkingMemoryKey::Conversation(id.clone()),
                    memory,
                });
            }
        }
        Ok(())
    }

    /// Checks what a restore could refuse before anything is written: a child whose
    /// conversation is neither in the batch nor stored, a vector whose collection is neither,
    /// a vector of the wrong dimension.
    async fn check_restore(&self, records: &[Record]) -> Result<()> {
        let mut conversations: HashSet<(&Scope, &ConversationId)> = HashSet::new();
        let mut collections: HashMap<(&Namespace, &str), mnemix_core::CollectionSpec> =
            HashMap::new();
        for record in records {
            match record {
                Record::Conversation { conversation } => {
                    conversations.insert((&conversation.scope, &conversation.id));
                }
                Record::Collection { namespace, spec } => {
                    collections.insert((namespace, spec.name.as_str()), spec.clone());
                }
                _ => {}
            }
        }
        for record in records {
            let parent = match record {
                Record::Message {
                    scope,
                    conversation_id,
                    ..
                }
                | Record::Cursor {
                    scope,
                    conversation_id,
                    ..
                } => Some((scope, conversation_id)),
                Record::WorkingMemory {
                    scope,
                    key: WorkingMemoryKey::Conversation(id),
                    ..
                } => Some((scope, id)),
                Record::Vector {
                    scope,
                    collection,
                    record,
                } => {
                    let key = (scope.namespace(), collection.as_str());
                    if let Entry::Vacant(slot) = collections.entry(key) {
                        let stored = self
                            .find_collection(scope.namespace(), collection)
                            .await?
                            .ok_or_else(|| {
                                MemoryError::not_found("collection", collection.as_str())
                            })?;
                        slot.insert(stored.spec);
                    }
                    collections[&key].check_vector(&record.vector)?;
                    None
                }
                _ => None,
            };
            if let Some((scope, id)) = parent {
                if !conversations.contains(&(scope, id)) {
                    let exists: bool = redis::cmd("EXISTS")
                        .arg(self.keys.scope(scope).conversation(id))
                        .query_async(&mut self.conn())
                        .await
                        .db()?;
                    if !exists {
                        return Err(MemoryError::not_found("conversation", id.as_str()));
                    }
                    conversations.insert((scope, id));
                }
            }
        }
        Ok(())
    }

    async fn restore_fact(&self, fact: &mnemix_core::Fact) -> Result<()> {
        let keys = self.keys.scope(&fact.scope);
        let fact_key = fact.key.clone().unwrap_or_default();
        let tokens: Vec<String> = fact_tokens(&fact.text).into_iter().collect();
        let millis =
            |t: Option<Timestamp>| t.map(|t| t.as_millis().to_string()).unwrap_or_default();
        // The document holds what never changes; the changing fields are kept beside it.
        let mut doc = fact.clone();
        doc.valid_to = None;
        doc.superseded_by = None;
        let _: i64 = RESTORE_FACT
            .key(keys.facts())
            .arg(keys.base())
            .arg(fact.id.as_str())
            .arg(&fact_key)
            .arg(format!("{fact_key}\0{}", fact.text).into_bytes())
            .arg(to_json(&doc))
            .arg(fact.created_at.as_millis())
            .arg(fact.score.map(|s| s.to_string()).unwrap_or_default())
            .arg(millis(fact.expires_at))
            .arg(tokens.join(" "))
            .arg(fact.updated_at.as_millis())
            .arg(millis(fact.valid_to))
            .arg(
                fact.superseded_by
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
            )
            .arg(crate::vectors::version_token())
            .arg(millis(fact.valid_from))
            .arg(millis(fact.valid_until))
            .invoke_async(&mut self.conn())
            .await
            .db()?;
        Ok(())
    }
}

#[async_trait]
impl TransferStore for RedisStore {
    async fn namespaces(&self) -> Result<Vec<Namespace>> {
        let mut held = Vec::new();
        for namespace in self.registered_namespaces().await? {
            let collections: u64 = redis::cmd("HLEN")
                .arg(self.keys.namespace(&namespace).collections())
                .query_async(&mut self.conn())
                .await
                .db()?;
            if collections > 0
                || !self.live_cache_keys(&namespace).await?.is_empty()
                || !self.scopes(&namespace).await?.is_empty()
            {
                held.push(namespace);
            }
        }
        held.sort();
        Ok(held)
    }

    async fn scopes(&self, namespace: &Namespace) -> Result<Vec<Scope>> {
        let subjects: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.keys.namespace(namespace).subjects())
            .query_async(&mut self.conn())
            .await
            .db()?;
        let mut owners = Vec::new();
        for subject in subjects {
            let subject = if subject.is_empty() {
                None
            } else {
                Some(Subject::new(subject).map_err(|e| corrupt("subject", e))?)
            };
            let scope = Scope::from_parts(namespace.clone(), subject);
            if self.owns_anything(&scope).await? {
                owners.push(scope);
            }
        }
        owners.sort();
        Ok(owners)
    }

    async fn export_namespace(&self, namespace: &Namespace) -> Result<Vec<Record>> {
        let mut records: Vec<Record> = self
            .list_collections(namespace)
            .await?
            .into_iter()
            .map(|spec| Record::Collection {
                namespace: namespace.clone(),
                spec,
            })
            .collect();
        let keys = self.keys.namespace(namespace);
        let now = self.clock.now().as_millis();
        for key in self.live_cache_keys(namespace).await? {
            let (value, expires_at): (Option<Vec<u8>>, Option<i64>) = redis::cmd("HMGET")
                .arg(keys.cache_entry(&key))
                .arg(&["value", "expires_at"])
                .query_async(&mut self.conn())
                .await
                .db()?;
            if let Some(value) = value.filter(|_| expires_at.is_none_or(|at| at > now)) {
                records.push(Record::CacheEntry {
                    namespace: namespace.clone(),
                    key,
                    value,
                    expires_at: expires_at.map(Timestamp::from_millis),
                });
            }
        }
        sort_canonical(&mut records);
        Ok(records)
    }

    async fn export_scope(&self, scope: &Scope) -> Result<Vec<Record>> {
        let keys = self.keys.scope(scope);
        let mut records = Vec::new();
        self.export_conversations(scope, &keys, &mut records)
            .await?;
        let user: WorkingFields = redis::cmd("HMGET")
            .arg(keys.working(&WorkingMemoryKey::User))
            .arg(&WORKING_FIELDS)
            .query_async(&mut self.conn())
            .await
            .db()?;
        if let Some(memory) = working_from(user)? {
            records.push(Record::WorkingMemory {
                scope: scope.clone(),
                key: WorkingMemoryKey::User,
                memory,
            });
        }
        let fact_ids: Vec<String> = redis::cmd("ZRANGE")
            .arg(keys.facts())
            .arg(0)
            .arg(-1)
            .query_async(&mut self.conn())
            .await
            .db()?;
        for fact in self.read_facts(&keys, &fact_ids).await? {
            records.push(Record::Fact { fact });
        }
        let live = self.collections_by_incarnation(scope.namespace()).await?;
        let incarnations: Vec<String> = redis::cmd("SMEMBERS")
            .arg(keys.vector_incarnations())
            .query_async(&mut self.conn())
            .await
            .db()?;
        for incarnation in incarnations {
            // Records of a dropped collection are invisible (and on their way out).
            let Some(spec) = live.get(&incarnation) else {
                continue;
            };
            for record in self.read_records(&keys, &incarnation).await? {
                records.push(Record::Vector {
                    scope: scope.clone(),
                    collection: spec.name.clone(),
                    record,
                });
            }
        }
        let checkpoint_ids: Vec<String> = redis::cmd("SMEMBERS")
            .arg(keys.checkpoint_ids())
            .query_async(&mut self.conn())
            .await
            .db()?;
        for checkpoint in self.read_checkpoints(&keys, &checkpoint_ids).await? {
            records.push(Record::Checkpoint {
                scope: scope.clone(),
                checkpoint,
            });
        }
        sort_canonical(&mut records);
        Ok(records)
    }

    async fn restore(&self, records: Vec<Record>) -> Result<u64> {
        let mut records = records;
        sort_canonical(&mut records);
        self.check_restore(&records).await?;
        let written = records.len() as u64;
        // Messages and vectors are written in bulk per conversation and per collection, after
        // the parents (records come in canonical order).
        let mut messages: BTreeMap<(Scope, ConversationId), Vec<StoredMessage>> = BTreeMap::new();
        let mut vectors: BTreeMap<(Scope, String), Vec<VectorRecord>> = BTreeMap::new();
        let mut registered: HashSet<Scope> = HashSet::new();
        for record in records {
            if let Some(scope) = record_scope(&record) {
                if registered.insert(scope.clone()) {
                    self.register_scope(scope).await?;
                }
            }
            match record {
                Record::Collection { namespace, spec } => {
                    self.insert_collection(&namespace, &spec)
                        .await?
                        .spec
                        .check_same(&spec)?;
                }
                Record::Conversation { conversation: c } => {
                    let keys = self.keys.scope(&c.scope);
                    let () = redis::pipe()
                        .hset_multiple(
                            keys.conversation(&c.id),
                            &[
                                ("doc", to_json(&c)),
                                ("last_seq", c.last_seq.to_string()),
                                ("updated_at", c.updated_at.as_millis().to_string()),
                            ],
                        )
                        .ignore()
                        .zadd(
                            keys.conversations(),
                            c.id.as_str(),
                            c.created_at.as_millis(),
                        )
                        .ignore()
                        .query_async(&mut self.conn())
                        .await
                        .db()?;
                }
                Record::Message {
                    scope,
                    conversation_id,
                    message,
                } => messages
                    .entry((scope, conversation_id))
                    .or_default()
                    .push(message),
                Record::Cursor {
                    scope,
                    conversation_id,
                    name,
                    value,
                } => {
                    let () = redis::cmd("HSET")
                        .arg(self.keys.scope(&scope).cursors(&conversation_id))
                        .arg(name)
                        .arg(value)
                        .query_async(&mut self.conn())
                        .await
                        .map(|_: i64| ())
                        .db()?;
                }
                Record::WorkingMemory { scope, key, memory } => {
                    let () = redis::cmd("HSET")
                        .arg(self.keys.scope(&scope).working(&key))
                        .arg("content")
                        .arg(memory.content.as_bytes())
                        .arg("format")
                        .arg(memory.format.as_str())
                        .arg("revision")
                        .arg(memory.revision)
                        .arg("updated_at")
                        .arg(memory.updated_at.as_millis())
                        .query_async(&mut self.conn())
                        .await
                        .map(|_: i64| ())
                        .db()?;
                }
                Record::Fact { fact } => self.restore_fact(&fact).await?,
                Record::Vector {
                    scope,
                    collection,
                    record,
                } => vectors.entry((scope, collection)).or_default().push(record),
                Record::Checkpoint { scope, checkpoint } => {
                    let keys = self.keys.scope(&scope);
                    let id = checkpoint.id.as_str();
                    let mut pipe = redis::pipe();
                    pipe.cmd("HSET")
                        .arg(keys.checkpoint(id))
                        .arg("workflow")
                        .arg(&checkpoint.workflow)
                        .arg("status")
                        .arg(checkpoint.status.as_str())
                        .arg("state")
                        .arg(to_json(&checkpoint.state))
                        .arg("version")
                        .arg(checkpoint.version)
                        .arg("created_at")
                        .arg(checkpoint.created_at.as_millis())
                        .arg("updated_at")
                        .arg(checkpoint.updated_at.as_millis())
                        .ignore()
                        .sadd(keys.checkpoint_ids(), id)
                        .ignore();
                    if checkpoint.status == mnemix_core::CheckpointStatus::Suspended {
                        pipe.zadd(keys.suspended(), id, checkpoint.updated_at.as_millis());
                    } else {
                        pipe.zrem(keys.suspended(), id);
                    }
                    let () = pipe.ignore().query_async(&mut self.conn()).await.db()?;
                }
                Record::CacheEntry {
                    namespace,
                    key,
                    value,
                    expires_at,
                } => {
                    self.register_namespace(&namespace).await?;
                    let keys = self.keys.namespace(&namespace);
                    let now = self.clock.now().as_millis();
                    let _: i64 = CACHE_SET
                        .key(keys.cache_entry(&key))
                        .key(keys.cache_index())
                        .arg(&key)
                        .arg(value)
                        .arg(
                            expires_at
                                .map(|t| t.as_millis().to_string())
                                .unwrap_or_default(),
                        )
                        .arg(
                            expires_at
                                .map(|t| t.as_millis().saturating_sub(now).to_string())
                                .unwrap_or_default(),
                        )
                        .arg(now)
                        .invoke_async(&mut self.conn())
                        .await
                        .db()?;
                }
            }
        }
        for ((scope, conversation), batch) in messages {
            let keys = self.keys.scope(&scope);
            let mut script = RESTORE_MESSAGES.key(keys.messages(&conversation));
            script.key(keys.message_ids(&conversation));
            for StoredMessage { seq, message } in &batch {
                let member = message_member(message);
                let body = &member[member.find('\0').map_or(0, |nul| nul + 1)..];
                script
                    .arg(seq)
                    .arg(message.id.as_str())
                    .arg(content_of(message))
                    .arg(body);
            }
            let _: i64 = script.invoke_async(&mut self.conn()).await.db()?;
        }
        for ((scope, collection), batch) in vectors {
            let stored = self
                .find_collection(scope.namespace(), &collection)
                .await?
                .ok_or_else(|| MemoryError::not_found("collection", collection.as_str()))?;
            self.write_records(&scope, &stored.incarnation, &batch)
                .await?;
        }
        Ok(written)
    }
}

/// The scope a record belongs to (`None` for namespace-level records).
fn record_scope(record: &Record) -> Option<&Scope> {
    match record {
        Record::Conversation { conversation } => Some(&conversation.scope),
        Record::Fact { fact } => Some(&fact.scope),
        Record::Message { scope, .. }
        | Record::Cursor { scope, .. }
        | Record::WorkingMemory { scope, .. }
        | Record::Vector { scope, .. }
        | Record::Checkpoint { scope, .. } => Some(scope),
        Record::Collection { .. } | Record::CacheEntry { .. } => None,
    }
}
