//! [`InMemoryBackend`]: the reference implementation of every contract.
//!
//! One lock around plain collections: every operation is trivially atomic, vector search is an
//! exact scan. It is the behaviour every other backend must match, and a fine store for tests.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{DeletionReceipt, MemoryBackend, NamespaceReceipt};
use crate::cache::CacheStore;
use crate::capabilities::{Capabilities, Durability, VectorSearch};
use crate::changes::{
    working as working_change, Change, ChangeCursor, NewChange, Operation, Retention,
};
use crate::checkpoint::{
    Checkpoint, CheckpointStatus, CheckpointStore, CheckpointUpdate, NewCheckpoint,
};
use crate::conversation::{
    plan_append, AppendOptions, AppendPlan, AppendReceipt, Conversation, ConversationQuery,
    ConversationStore, ConversationUpdate, LoadOptions, NewConversation,
};
use crate::error::{MemoryError, Result};
use crate::fact::{
    order_history, plan_remember, rank_facts, Fact, FactQuery, FactStore, NewFact, RecallQuery,
    RememberOptions, RememberOutcome, RememberPlan, RememberStatus, ScoredFact,
};
use crate::message::{Message, StoredMessage};
use crate::page::{page_newest_first, Page};
use crate::records::{sort_canonical, Record, TransferStore};
use crate::scope::{
    CheckpointId, ConversationId, FactId, MessageId, Namespace, Scope, Subject, VectorId,
};
use crate::time::{Clock, SystemClock, Timestamp};
use crate::vector::{
    rank_hits, CollectionSpec, VectorHit, VectorQuery, VectorRecord, VectorSelector, VectorStore,
};
use crate::working::{WorkingMemory, WorkingMemoryKey, WorkingMemoryStore, WorkingMemoryUpdate};

const NAME: &str = "memory";

/// A conversation with everything that is deleted with it.
struct ConversationEntry {
    conversation: Conversation,
    messages: BTreeMap<u64, Message>,
    seq_by_id: HashMap<MessageId, u64>,
    cursors: HashMap<String, u64>,
    working_memory: Option<WorkingMemory>,
}

impl ConversationEntry {
    fn new(conversation: Conversation) -> Self {
        Self {
            conversation,
            messages: BTreeMap::new(),
            seq_by_id: HashMap::new(),
            cursors: HashMap::new(),
            working_memory: None,
        }
    }
}

struct Collection {
    spec: CollectionSpec,
    records: HashMap<Scope, BTreeMap<VectorId, VectorRecord>>,
}

#[derive(Default)]
struct State {
    conversations: HashMap<Scope, BTreeMap<ConversationId, ConversationEntry>>,
    user_working_memory: HashMap<Scope, Option<WorkingMemory>>,
    facts: HashMap<Scope, HashMap<FactId, Fact>>,
    collections: BTreeMap<(Namespace, String), Collection>,
    checkpoints: HashMap<Scope, HashMap<CheckpointId, Checkpoint>>,
    cache: HashMap<CacheKey, CacheValue>,
    feed: Feed,
}

/// The namespaces' change feeds: one position counter for all, as a table's row ids.
#[derive(Default)]
struct Feed {
    last: u64,
    changes: HashMap<Namespace, VecDeque<Change>>,
    /// The cursor of the last change each namespace's trims removed.
    horizons: HashMap<Namespace, ChangeCursor>,
}

impl Feed {
    /// Records `change` in `namespace`'s feed, by the write in progress's principal.
    fn record(&mut self, namespace: &Namespace, change: NewChange, at: Timestamp) {
        self.last += 1;
        self.changes
            .entry(namespace.clone())
            .or_default()
            .push_back(Change {
                cursor: ChangeCursor::new(0, self.last),
                at,
                operation: change.operation,
                subject: change.subject,
                within: change.within,
                records: change.records,
                principal: crate::changes::writer(),
                scrubbed: false,
            });
    }

    /// The changes of `namespace` naming `subject`.
    fn of_subject<'f>(
        &'f mut self,
        namespace: &Namespace,
        subject: &'f Subject,
    ) -> impl Iterator<Item = &'f mut Change> {
        self.changes
            .get_mut(namespace)
            .into_iter()
            .flatten()
            .filter(move |c| c.subject.as_ref() == Some(subject))
    }
}

/// A cache entry's key and its bytes with their expiry.
type CacheKey = (Namespace, String);
type CacheValue = (Vec<u8>, Option<Timestamp>);

impl State {
    fn entry(&self, scope: &Scope, id: &ConversationId) -> Result<&ConversationEntry> {
        self.conversations
            .get(scope)
            .and_then(|c| c.get(id))
            .ok_or_else(|| MemoryError::not_found("conversation", id.as_str()))
    }

    fn entry_mut(&mut self, scope: &Scope, id: &ConversationId) -> Result<&mut ConversationEntry> {
        self.conversations
            .get_mut(scope)
            .and_then(|c| c.get_mut(id))
            .ok_or_else(|| MemoryError::not_found("conversation", id.as_str()))
    }

    fn collection(&self, namespace: &Namespace, name: &str) -> Result<&Collection> {
        self.collections
            .get(&(namespace.clone(), name.to_owned()))
            .ok_or_else(|| MemoryError::not_found("collection", name))
    }

    fn collection_mut(&mut self, namespace: &Namespace, name: &str) -> Result<&mut Collection> {
        self.collections
            .get_mut(&(namespace.clone(), name.to_owned()))
            .ok_or_else(|| MemoryError::not_found("collection", name))
    }

    /// Removes the scope's expired facts; expired facts are never returned.
    fn purge_expired_facts(&mut self, scope: &Scope, now: Timestamp) -> &mut HashMap<FactId, Fact> {
        let facts = self.facts.entry(scope.clone()).or_default();
        facts.retain(|_, f| !f.is_expired(now));
        facts
    }

    /// The working-memory slot of a key (conversation keys must name a conversation of the scope).
    fn working_slot(
        &mut self,
        scope: &Scope,
        key: &WorkingMemoryKey,
    ) -> Result<&mut Option<WorkingMemory>> {
        match key {
            WorkingMemoryKey::Conversation(id) => {
                Ok(&mut self.entry_mut(scope, id)?.working_memory)
            }
            WorkingMemoryKey::User => {
                Ok(self.user_working_memory.entry(scope.clone()).or_default())
            }
        }
    }
}

/// The reference backend: everything in process memory behind one lock.
///
/// Like every backend it only stores: use it behind the front layer ([`Store`](crate::Store),
/// or `mnemix::open("memory://")`), which checks input and sanitizes loads.
///
/// ```
/// use mnemix_core::{ConversationStore, InMemoryBackend, Message, NewConversation, LoadOptions, AppendOptions, Scope, Store};
/// # tokio_test_block(async {
/// let store = Store::new(InMemoryBackend::new());
/// let scope = Scope::for_subject("user-42")?;
/// let thread = store.create_conversation(&scope, NewConversation::default()).await?;
/// store.append(&scope, &thread.id, vec![Message::user("hi")], AppendOptions::default()).await?;
/// let history = store.load(&scope, &thread.id, LoadOptions::last(10)).await?;
/// assert_eq!(history[0].seq, 1);
/// # Ok::<(), mnemix_core::MemoryError>(()) });
/// # fn tokio_test_block<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
pub struct InMemoryBackend {
    state: RwLock<State>,
    clock: Arc<dyn Clock>,
    capabilities: Capabilities,
}

impl std::fmt::Debug for InMemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryBackend")
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl Default for InMemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl InMemoryBackend {
    /// `memory://`: how the front door (`mnemix::open`) finds the in-memory reference backend.
    /// Nothing survives the process.
    pub const DESCRIPTOR: crate::descriptor::Descriptor =
        crate::descriptor::Descriptor::new("memory", &["memory"], "memory://", open_request);
}

#[allow(clippy::needless_pass_by_value)] // the descriptor's signature: a backend that awaits moves it
fn open_request(request: crate::descriptor::OpenRequest) -> crate::descriptor::BoxOpen {
    let backend: Arc<dyn MemoryBackend> =
        Arc::new(InMemoryBackend::with_clock(Arc::clone(request.clock())));
    Box::pin(std::future::ready(Ok(backend)))
}

impl InMemoryBackend {
    /// An empty store on the wall clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An empty store whose "now" comes from `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            state: RwLock::new(State::default()),
            clock,
            capabilities: Capabilities::default()
                .with_vector_search(VectorSearch::Exact)
                .with_durability(Durability::Volatile)
                .with_change_feed(),
        }
    }

    /// Declares other capabilities than the reference's (exact vectors, volatile). Behaviour does
    /// not change: this is for testing how a suite or an engine reacts to what a backend declares.
    #[must_use]
    pub fn with_capabilities(mut self, capabilities: Capabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl ConversationStore for InMemoryBackend {
    async fn create_conversation(
        &self,
        scope: &Scope,
        new: NewConversation,
    ) -> Result<Conversation> {
        let now = self.clock.now();
        let conversation = new.into_conversation(scope, now);
        let mut state = self.write();
        let threads = state.conversations.entry(scope.clone()).or_default();
        if threads.contains_key(&conversation.id) {
            return Err(MemoryError::AlreadyExists {
                entity: "conversation",
                id: conversation.id.to_string(),
            });
        }
        threads.insert(
            conversation.id.clone(),
            ConversationEntry::new(conversation.clone()),
        );
        let change =
            NewChange::new(Operation::CreateConversation, scope).within(conversation.id.as_str());
        state.feed.record(scope.namespace(), change, now);
        Ok(conversation)
    }

    async fn get_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<Conversation> {
        Ok(self.read().entry(scope, id)?.conversation.clone())
    }

    async fn list_conversations(
        &self,
        scope: &Scope,
        query: ConversationQuery,
    ) -> Result<Page<Conversation>> {
        let state = self.read();
        let mut matching: Vec<Conversation> = state
            .conversations
            .get(scope)
            .into_iter()
            .flat_map(BTreeMap::values)
            .map(|entry| &entry.conversation)
            .filter(|c| query.matches(c))
            .cloned()
            .collect();
        matching.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
        Ok(page_newest_first(
            matching,
            |c| (c.created_at, c.id.as_str()),
            query.after().as_ref(),
            query.page_limit(),
        ))
    }

    async fn update_conversation(
        &self,
        scope: &Scope,
        id: &ConversationId,
        update: ConversationUpdate,
    ) -> Result<Conversation> {
        let now = self.clock.now();
        let mut state = self.write();
        let conversation = &mut state.entry_mut(scope, id)?.conversation;
        if let Some(title) = update.title {
            conversation.title = title;
        }
        if let Some(metadata) = update.metadata {
            conversation.metadata = metadata;
        }
        conversation.updated_at = now;
        let conversation = conversation.clone();
        let change = NewChange::new(Operation::UpdateConversation, scope).within(id.as_str());
        state.feed.record(scope.namespace(), change, now);
        Ok(conversation)
    }

    async fn delete_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<bool> {
        let now = self.clock.now();
        let mut state = self.write();
        let existed = state
            .conversations
            .get_mut(scope)
            .and_then(|c| c.remove(id))
            .is_some();
        if existed {
            for collection in state.collections.values_mut() {
                if let Some(records) = collection.records.get_mut(scope) {
                    records.retain(|_, r| r.conversation_id.as_ref() != Some(id));
                }
            }
            let change = NewChange::new(Operation::DeleteConversation, scope).within(id.as_str());
            state.feed.record(scope.namespace(), change, now);
        }
        Ok(existed)
    }

    async fn append(
        &self,
        scope: &Scope,
        id: &ConversationId,
        messages: Vec<Message>,
        options: AppendOptions,
    ) -> Result<AppendReceipt> {
        let now = self.clock.now();
        let mut state = self.write();
        let entry = state.entry_mut(scope, id)?;
        let AppendPlan { fresh, mut receipt } =
            plan_append(entry.conversation.last_seq, messages, &options, |id| {
                let seq = *entry.seq_by_id.get(id)?;
                entry.messages.get(&seq).map(|m| (seq, m))
            })?;
        if fresh.is_empty() {
            return Ok(receipt);
        }
        let change = NewChange::new(Operation::Append, scope)
            .within(id.as_str())
            .records(fresh.iter().map(|m| m.message.id.as_str()));
        for StoredMessage { seq, message } in fresh {
            entry.seq_by_id.insert(message.id.clone(), seq);
            entry.messages.insert(seq, message);
        }
        if let Some(max) = options.max_messages {
            while entry.messages.len() as u64 > max {
                if let Some((_, pruned)) = entry.messages.pop_first() {
                    entry.seq_by_id.remove(&pruned.id);
                    receipt.pruned += 1;
                }
            }
        }
        let conversation = &mut entry.conversation;
        conversation.last_seq = receipt.last_seq;
        conversation.updated_at = now;
        state.feed.record(scope.namespace(), change, now);
        Ok(receipt)
    }

    async fn load(
        &self,
        scope: &Scope,
        id: &ConversationId,
        options: LoadOptions,
    ) -> Result<Vec<StoredMessage>> {
        let state = self.read();
        let entry = state.entry(scope, id)?;
        let lower = options.after_seq.map_or(0, |a| a.saturating_add(1));
        let upper = options.before_seq.unwrap_or(u64::MAX);
        if lower >= upper {
            return Ok(Vec::new());
        }
        let selected = entry
            .messages
            .range(lower..upper)
            .rev()
            .filter(|(seq, m)| options.selects(**seq, m.role))
            .take(options.last.unwrap_or(usize::MAX))
            .map(|(seq, m)| StoredMessage {
                seq: *seq,
                message: m.clone(),
            });
        let mut window: Vec<StoredMessage> = selected.collect();
        window.reverse();
        Ok(window)
    }

    async fn load_seqs(
        &self,
        scope: &Scope,
        id: &ConversationId,
        seqs: &[u64],
    ) -> Result<Vec<StoredMessage>> {
        let state = self.read();
        let entry = state.entry(scope, id)?;
        Ok(seqs
            .iter()
            .filter_map(|seq| {
                entry.messages.get(seq).map(|m| StoredMessage {
                    seq: *seq,
                    message: m.clone(),
                })
            })
            .collect())
    }

    async fn cursor(&self, scope: &Scope, id: &ConversationId, name: &str) -> Result<Option<u64>> {
        Ok(self.read().entry(scope, id)?.cursors.get(name).copied())
    }

    async fn advance_cursor(
        &self,
        scope: &Scope,
        id: &ConversationId,
        name: &str,
        seq: u64,
    ) -> Result<u64> {
        let now = self.clock.now();
        let mut state = self.write();
        let cursors = &mut state.entry_mut(scope, id)?.cursors;
        let before = cursors.get(name).copied();
        let value = before.map_or(seq, |value| value.max(seq));
        cursors.insert(name.to_owned(), value);
        // A cursor set for the first time is a change, at whatever value.
        let moved = before != Some(value);
        if moved {
            let change = NewChange::new(Operation::AdvanceCursor, scope)
                .within(id.as_str())
                .records([name]);
            state.feed.record(scope.namespace(), change, now);
        }
        Ok(value)
    }
}

#[async_trait]
impl WorkingMemoryStore for InMemoryBackend {
    async fn get_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
    ) -> Result<Option<WorkingMemory>> {
        let state = self.read();
        match key {
            WorkingMemoryKey::Conversation(id) => {
                Ok(state.entry(scope, id)?.working_memory.clone())
            }
            WorkingMemoryKey::User => Ok(state.user_working_memory.get(scope).cloned().flatten()),
        }
    }

    async fn set_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
        update: WorkingMemoryUpdate,
    ) -> Result<WorkingMemory> {
        let now = self.clock.now();
        let mut state = self.write();
        let slot = state.working_slot(scope, key)?;
        let current = slot.as_ref().map_or(0, |w| w.revision);
        let stored = update.apply(current, now)?;
        *slot = Some(stored.clone());
        let change = working_change(Operation::SetWorkingMemory, scope, key);
        state.feed.record(scope.namespace(), change, now);
        Ok(stored)
    }

    async fn clear_working_memory(&self, scope: &Scope, key: &WorkingMemoryKey) -> Result<bool> {
        let now = self.clock.now();
        let mut state = self.write();
        let cleared = state.working_slot(scope, key)?.take().is_some();
        if cleared {
            let change = working_change(Operation::ClearWorkingMemory, scope, key);
            state.feed.record(scope.namespace(), change, now);
        }
        Ok(cleared)
    }
}

#[async_trait]
impl FactStore for InMemoryBackend {
    async fn remember(
        &self,
        scope: &Scope,
        new: NewFact,
        options: RememberOptions,
    ) -> Result<RememberOutcome> {
        let now = self.clock.now();
        let mut state = self.write();
        let facts = state.purge_expired_facts(scope, now);
        let RememberPlan {
            outcome,
            superseded,
        } = plan_remember(facts.values(), new, &options, scope, now);
        if outcome.status == RememberStatus::Duplicate {
            return Ok(outcome);
        }
        let change = crate::changes::remembered(scope, &outcome);
        if let Some(previous) = superseded {
            facts.insert(previous.id.clone(), previous);
        }
        facts.insert(outcome.fact.id.clone(), outcome.fact.clone());
        for id in &outcome.evicted {
            facts.remove(id);
        }
        state.feed.record(scope.namespace(), change, now);
        Ok(outcome)
    }

    async fn recall(&self, scope: &Scope, query: RecallQuery) -> Result<Vec<ScoredFact>> {
        let now = self.clock.now();
        let mut state = self.write();
        let facts = state.purge_expired_facts(scope, now);
        Ok(rank_facts(
            &query,
            facts.values().filter(|f| f.is_current()).cloned(),
        ))
    }

    async fn get_fact(&self, scope: &Scope, id: &FactId) -> Result<Fact> {
        let now = self.clock.now();
        self.read()
            .facts
            .get(scope)
            .and_then(|f| f.get(id))
            .filter(|f| !f.is_expired(now))
            .cloned()
            .ok_or_else(|| MemoryError::not_found("fact", id.as_str()))
    }

    async fn list_facts(&self, scope: &Scope, query: FactQuery) -> Result<Page<Fact>> {
        let now = self.clock.now();
        let state = self.read();
        let mut matching: Vec<Fact> = state
            .facts
            .get(scope)
            .into_iter()
            .flat_map(HashMap::values)
            .filter(|f| !f.is_expired(now) && query.matches(f))
            .cloned()
            .collect();
        matching.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
        Ok(page_newest_first(
            matching,
            |f| (f.created_at, f.id.as_str()),
            query.after().as_ref(),
            query.page_limit(),
        ))
    }

    async fn history(&self, scope: &Scope, key: &str) -> Result<Vec<Fact>> {
        let now = self.clock.now();
        let state = self.read();
        let versions: Vec<Fact> = state
            .facts
            .get(scope)
            .into_iter()
            .flat_map(HashMap::values)
            .filter(|f| f.key.as_deref() == Some(key) && !f.is_expired(now))
            .cloned()
            .collect();
        Ok(order_history(versions))
    }

    async fn forget(&self, scope: &Scope, id: &FactId) -> Result<bool> {
        let now = self.clock.now();
        let mut state = self.write();
        let forgotten = state
            .facts
            .get_mut(scope)
            .and_then(|f| f.remove(id))
            .is_some_and(|f| !f.is_expired(now));
        if forgotten {
            let change = NewChange::new(Operation::Forget, scope).records([id.as_str()]);
            state.feed.record(scope.namespace(), change, now);
        }
        Ok(forgotten)
    }

    async fn set_expiry(
        &self,
        scope: &Scope,
        ids: &[FactId],
        expires_at: Option<Timestamp>,
    ) -> Result<Vec<FactId>> {
        let now = self.clock.now();
        let mut state = self.write();
        let Some(facts) = state.facts.get_mut(scope) else {
            return Ok(Vec::new());
        };
        let changed: Vec<FactId> = ids
            .iter()
            .filter(|id| {
                facts
                    .get_mut(*id)
                    .is_some_and(|f| f.apply_expiry(expires_at, now))
            })
            .cloned()
            .collect();
        if !changed.is_empty() {
            let change = NewChange::new(Operation::SetExpiry, scope)
                .records(changed.iter().map(FactId::as_str));
            state.feed.record(scope.namespace(), change, now);
        }
        Ok(changed)
    }
}

#[async_trait]
impl VectorStore for InMemoryBackend {
    async fn ensure_collection(
        &self,
        namespace: &Namespace,
        spec: CollectionSpec,
    ) -> Result<CollectionSpec> {
        let mut state = self.write();
        let key = (namespace.clone(), spec.name.clone());
        if let Some(existing) = state.collections.get(&key) {
            existing.spec.check_same(&spec)?;
            return Ok(existing.spec.clone());
        }
        state.collections.insert(
            key,
            Collection {
                spec: spec.clone(),
                records: HashMap::new(),
            },
        );
        let change = NewChange::namespace_wide(Operation::EnsureCollection).within(&spec.name);
        state.feed.record(namespace, change, self.clock.now());
        Ok(spec)
    }

    async fn list_collections(&self, namespace: &Namespace) -> Result<Vec<CollectionSpec>> {
        Ok(self
            .read()
            .collections
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .map(|(_, c)| c.spec.clone())
            .collect())
    }

    async fn drop_collection(&self, namespace: &Namespace, name: &str) -> Result<bool> {
        let mut state = self.write();
        let dropped = state
            .collections
            .remove(&(namespace.clone(), name.to_owned()))
            .is_some();
        if dropped {
            let change = NewChange::namespace_wide(Operation::DropCollection).within(name);
            state.feed.record(namespace, change, self.clock.now());
        }
        Ok(dropped)
    }

    async fn upsert_vectors(
        &self,
        scope: &Scope,
        collection: &str,
        records: Vec<VectorRecord>,
    ) -> Result<usize> {
        let mut state = self.write();
        let collection = state.collection_mut(scope.namespace(), collection)?;
        for record in &records {
            collection.spec.check_vector(&record.vector)?;
        }
        let count = records.len();
        let change = NewChange::new(Operation::UpsertVectors, scope)
            .within(collection.spec.name.as_str())
            .records(records.iter().map(|r| r.id.as_str()));
        let stored = collection.records.entry(scope.clone()).or_default();
        for record in records {
            stored.insert(record.id.clone(), record);
        }
        if count > 0 {
            state
                .feed
                .record(scope.namespace(), change, self.clock.now());
        }
        Ok(count)
    }

    async fn get_vector(
        &self,
        scope: &Scope,
        collection: &str,
        id: &VectorId,
    ) -> Result<VectorRecord> {
        self.read()
            .collection(scope.namespace(), collection)?
            .records
            .get(scope)
            .and_then(|r| r.get(id))
            .cloned()
            .ok_or_else(|| MemoryError::not_found("vector", id.as_str()))
    }

    async fn delete_vectors(
        &self,
        scope: &Scope,
        collection: &str,
        selector: VectorSelector,
    ) -> Result<usize> {
        let mut state = self.write();
        let collection = state.collection_mut(scope.namespace(), collection)?;
        let name = collection.spec.name.clone();
        let Some(records) = collection.records.get_mut(scope) else {
            return Ok(0);
        };
        let before = records.len();
        let selected: Vec<VectorId> = match selector {
            VectorSelector::Ids(ids) => ids,
            VectorSelector::Filter(filter) => records
                .iter()
                .filter(|(_, r)| filter.matches(&r.metadata))
                .map(|(id, _)| id.clone())
                .collect(),
        };
        for id in &selected {
            records.remove(id);
        }
        let removed = before - records.len();
        if removed > 0 {
            let change = NewChange::new(Operation::DeleteVectors, scope)
                .within(name)
                .records(selected.iter().map(VectorId::as_str));
            state
                .feed
                .record(scope.namespace(), change, self.clock.now());
        }
        Ok(removed)
    }

    async fn search(
        &self,
        scope: &Scope,
        collection: &str,
        query: VectorQuery,
    ) -> Result<Vec<VectorHit>> {
        let state = self.read();
        let collection = state.collection(scope.namespace(), collection)?;
        collection.spec.check_vector(&query.vector)?;
        let metric = collection.spec.metric;
        let mut hits: Vec<VectorHit> = collection
            .records
            .get(scope)
            .into_iter()
            .flat_map(BTreeMap::values)
            .filter(|r| query.filter.as_ref().is_none_or(|f| f.matches(&r.metadata)))
            .map(|r| (r, metric.score(&query.vector, &r.vector)))
            .filter(|(_, score)| query.min_score.is_none_or(|min| *score >= min))
            .map(|(r, score)| {
                let mut record = r.clone();
                if !query.include_vectors {
                    record.vector = Vec::new();
                }
                VectorHit { record, score }
            })
            .collect();
        rank_hits(&mut hits);
        hits.truncate(query.k);
        Ok(hits)
    }
}

#[async_trait]
impl CheckpointStore for InMemoryBackend {
    async fn put_checkpoint(&self, scope: &Scope, new: NewCheckpoint) -> Result<Checkpoint> {
        let now = self.clock.now();
        let mut state = self.write();
        let checkpoints = state.checkpoints.entry(scope.clone()).or_default();
        if checkpoints.contains_key(&new.id) {
            return Err(MemoryError::AlreadyExists {
                entity: "checkpoint",
                id: new.id.to_string(),
            });
        }
        let checkpoint = new.into_checkpoint(now);
        checkpoints.insert(checkpoint.id.clone(), checkpoint.clone());
        let change =
            NewChange::new(Operation::PutCheckpoint, scope).records([checkpoint.id.as_str()]);
        state.feed.record(scope.namespace(), change, now);
        Ok(checkpoint)
    }

    async fn get_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<Checkpoint> {
        self.read()
            .checkpoints
            .get(scope)
            .and_then(|c| c.get(id))
            .cloned()
            .ok_or_else(|| MemoryError::not_found("checkpoint", id.as_str()))
    }

    async fn update_checkpoint(
        &self,
        scope: &Scope,
        id: &CheckpointId,
        update: CheckpointUpdate,
    ) -> Result<Checkpoint> {
        let now = self.clock.now();
        let mut state = self.write();
        let checkpoint = state
            .checkpoints
            .get_mut(scope)
            .and_then(|c| c.get_mut(id))
            .ok_or_else(|| MemoryError::not_found("checkpoint", id.as_str()))?;
        update.apply_to(checkpoint, now)?;
        let checkpoint = checkpoint.clone();
        let change = NewChange::new(Operation::UpdateCheckpoint, scope).records([id.as_str()]);
        state.feed.record(scope.namespace(), change, now);
        Ok(checkpoint)
    }

    async fn list_suspended(
        &self,
        scope: &Scope,
        workflow: Option<&str>,
    ) -> Result<Vec<Checkpoint>> {
        let state = self.read();
        let mut suspended: Vec<Checkpoint> = state
            .checkpoints
            .get(scope)
            .into_iter()
            .flat_map(HashMap::values)
            .filter(|c| {
                c.status == CheckpointStatus::Suspended && workflow.is_none_or(|w| c.workflow == w)
            })
            .cloned()
            .collect();
        suspended.sort_by(|a, b| (a.updated_at, &a.id).cmp(&(b.updated_at, &b.id)));
        Ok(suspended)
    }

    async fn delete_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<bool> {
        let mut state = self.write();
        let deleted = state
            .checkpoints
            .get_mut(scope)
            .and_then(|c| c.remove(id))
            .is_some();
        if deleted {
            let change = NewChange::new(Operation::DeleteCheckpoint, scope).records([id.as_str()]);
            state
                .feed
                .record(scope.namespace(), change, self.clock.now());
        }
        Ok(deleted)
    }
}

#[async_trait]
impl CacheStore for InMemoryBackend {
    async fn cache_get(&self, namespace: &Namespace, key: &str) -> Result<Option<Vec<u8>>> {
        let now = self.clock.now();
        let state = self.read();
        Ok(state
            .cache
            .get(&(namespace.clone(), key.to_owned()))
            .filter(|(_, expires)| expires.is_none_or(|at| at > now))
            .map(|(value, _)| value.clone()))
    }

    async fn cache_set(
        &self,
        namespace: &Namespace,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        let expires = ttl.map(|ttl| self.clock.now().saturating_add(ttl));
        // Expired entries are invisible to get/delete and replaced by the next set of their key;
        // no sweep here, so a set stays O(1).
        self.write()
            .cache
            .insert((namespace.clone(), key.to_owned()), (value, expires));
        Ok(())
    }

    async fn cache_delete(&self, namespace: &Namespace, key: &str) -> Result<bool> {
        let now = self.clock.now();
        let removed = self
            .write()
            .cache
            .remove(&(namespace.clone(), key.to_owned()));
        Ok(removed.is_some_and(|(_, expires)| expires.is_none_or(|at| at > now)))
    }
}

#[async_trait]
impl MemoryBackend for InMemoryBackend {
    fn backend_name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    async fn changes(
        &self,
        namespace: &Namespace,
        after: ChangeCursor,
        limit: usize,
    ) -> Result<Vec<Change>> {
        let state = self.read();
        if let Some(horizon) = state.feed.horizons.get(namespace) {
            if after != ChangeCursor::START && after < *horizon {
                return Err(crate::changes::trimmed(after, *horizon));
            }
        }
        Ok(state
            .feed
            .changes
            .get(namespace)
            .into_iter()
            .flatten()
            .filter(|c| c.cursor > after)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn trim_changes(&self, namespace: &Namespace, retention: Retention) -> Result<u64> {
        let cutoff = retention.cutoff(self.clock.now());
        let mut state = self.write();
        let Some(changes) = state.feed.changes.get_mut(namespace) else {
            return Ok(0);
        };
        let mut removed = None;
        let mut count = 0;
        while let Some(oldest) = changes.front() {
            let too_many = retention
                .max_entries
                .is_some_and(|max| changes.len() as u64 > max);
            if !(too_many || cutoff.is_some_and(|cutoff| oldest.at < cutoff)) {
                break;
            }
            removed = changes.pop_front().map(|c| c.cursor);
            count += 1;
        }
        if let Some(horizon) = removed {
            state.feed.horizons.insert(namespace.clone(), horizon);
        }
        Ok(count)
    }

    async fn count_owned(&self, scope: &Scope) -> Result<DeletionReceipt> {
        scope.require_subject("count_owned")?;
        let mut receipt = DeletionReceipt::of_records(&self.export_scope(scope).await?);
        if let Some(subject) = scope.subject() {
            // A dry run: counted under the read lock.
            receipt.changes = self
                .read()
                .feed
                .changes
                .get(scope.namespace())
                .map_or(0, |all| {
                    all.iter()
                        .filter(|c| c.subject.as_ref() == Some(subject))
                        .count() as u64
                });
        }
        Ok(receipt)
    }

    async fn forget_namespace(&self, namespace: &Namespace) -> Result<NamespaceReceipt> {
        let receipt = crate::backend::forget_namespace_records(self, namespace).await?;
        let mut state = self.write();
        state.feed.changes.remove(namespace);
        state.feed.horizons.remove(namespace);
        Ok(receipt)
    }

    async fn forget_all(&self, scope: &Scope) -> Result<DeletionReceipt> {
        let now = self.clock.now();
        let mut state = self.write();
        let mut receipt = DeletionReceipt::default();
        for entry in state
            .conversations
            .remove(scope)
            .into_iter()
            .flat_map(BTreeMap::into_values)
        {
            receipt.conversations += 1;
            receipt.messages += entry.messages.len() as u64;
            receipt.cursors += entry.cursors.len() as u64;
            receipt.working_memory += u64::from(entry.working_memory.is_some());
        }
        receipt.working_memory +=
            u64::from(state.user_working_memory.remove(scope).flatten().is_some());
        receipt.facts = state.facts.remove(scope).map_or(0, |facts| {
            facts.values().filter(|f| !f.is_expired(now)).count() as u64
        });
        for collection in state.collections.values_mut() {
            receipt.vectors += collection
                .records
                .remove(scope)
                .map_or(0, |r| r.len() as u64);
        }
        receipt.checkpoints = state
            .checkpoints
            .remove(scope)
            .map_or(0, |c| c.len() as u64);
        if let Some(subject) = scope.subject() {
            for change in state.feed.of_subject(scope.namespace(), subject) {
                crate::changes::scrub(change);
                receipt.changes += 1;
            }
        }
        if receipt.total() > 0 || receipt.changes > 0 {
            let erased = NewChange::namespace_wide(Operation::Erase);
            state.feed.record(scope.namespace(), erased, now);
        }
        Ok(receipt)
    }
}

impl State {
    /// Whether a scope owns any live record.
    fn owns_anything(&self, scope: &Scope, now: Timestamp) -> bool {
        self.conversations.get(scope).is_some_and(|c| !c.is_empty())
            || self
                .user_working_memory
                .get(scope)
                .is_some_and(Option::is_some)
            || self
                .facts
                .get(scope)
                .is_some_and(|f| f.values().any(|f| !f.is_expired(now)))
            || self
                .collections
                .values()
                .any(|c| c.records.get(scope).is_some_and(|r| !r.is_empty()))
            || self.checkpoints.get(scope).is_some_and(|c| !c.is_empty())
    }

    /// Every scope that appears as a key anywhere (some may own nothing).
    fn scope_keys(&self) -> BTreeSet<&Scope> {
        self.conversations
            .keys()
            .chain(self.user_working_memory.keys())
            .chain(self.facts.keys())
            .chain(self.collections.values().flat_map(|c| c.records.keys()))
            .chain(self.checkpoints.keys())
            .collect()
    }

    fn live_cache(&self, now: Timestamp) -> impl Iterator<Item = (&CacheKey, &CacheValue)> {
        self.cache
            .iter()
            .filter(move |(_, (_, expires))| expires.is_none_or(|at| at > now))
    }

    /// The restore checks that need the store: parents exist (stored or earlier in the batch)
    /// and vectors fit their collection. Runs before anything is written.
    fn check_restore(&self, records: &[Record]) -> Result<()> {
        let mut conversations: HashSet<(&Scope, &ConversationId)> = HashSet::new();
        let mut collections: HashMap<(&Namespace, &str), &CollectionSpec> = self
            .collections
            .iter()
            .map(|((ns, name), c)| ((ns, name.as_str()), &c.spec))
            .collect();
        let conversation_known =
            |known: &HashSet<(&Scope, &ConversationId)>, scope: &Scope, id: &ConversationId| {
                known.contains(&(scope, id)) || self.entry(scope, id).is_ok()
            };
        for record in records {
            match record {
                Record::Collection { namespace, spec } => {
                    if let Some(existing) = collections.get(&(namespace, spec.name.as_str())) {
                        existing.check_same(spec)?;
                    }
                    collections.insert((namespace, spec.name.as_str()), spec);
                }
                Record::Conversation { conversation } => {
                    conversations.insert((&conversation.scope, &conversation.id));
                }
                Record::Message {
                    scope,
                    conversation_id: id,
                    ..
                }
                | Record::Cursor {
                    scope,
                    conversation_id: id,
                    ..
                }
                | Record::WorkingMemory {
                    scope,
                    key: WorkingMemoryKey::Conversation(id),
                    ..
                } => {
                    if !conversation_known(&conversations, scope, id) {
                        return Err(MemoryError::not_found("conversation", id.as_str()));
                    }
                }
                Record::Vector {
                    scope,
                    collection,
                    record,
                } => {
                    let spec = collections
                        .get(&(scope.namespace(), collection.as_str()))
                        .ok_or_else(|| MemoryError::not_found("collection", collection))?;
                    spec.check_vector(&record.vector)?;
                }
                Record::WorkingMemory { .. }
                | Record::Fact { .. }
                | Record::Checkpoint { .. }
                | Record::CacheEntry { .. } => {}
            }
        }
        Ok(())
    }

    fn restore_one(&mut self, record: Record) -> Result<()> {
        match record {
            Record::Collection { namespace, spec } => {
                self.collections
                    .entry((namespace, spec.name.clone()))
                    .or_insert_with(|| Collection {
                        spec,
                        records: HashMap::new(),
                    });
            }
            Record::Conversation { conversation } => {
                let threads = self
                    .conversations
                    .entry(conversation.scope.clone())
                    .or_default();
                match threads.get_mut(&conversation.id) {
                    Some(entry) => entry.conversation = conversation,
                    None => {
                        threads.insert(
                            conversation.id.clone(),
                            ConversationEntry::new(conversation),
                        );
                    }
                }
            }
            Record::Message {
                scope,
                conversation_id,
                message: StoredMessage { seq, message },
            } => {
                let entry = self.entry_mut(&scope, &conversation_id)?;
                // The same id elsewhere, or another message at this seq, is replaced.
                if let Some(old_seq) = entry.seq_by_id.remove(&message.id) {
                    entry.messages.remove(&old_seq);
                }
                if let Some(old) = entry.messages.remove(&seq) {
                    entry.seq_by_id.remove(&old.id);
                }
                entry.seq_by_id.insert(message.id.clone(), seq);
                entry.messages.insert(seq, message);
            }
            Record::Cursor {
                scope,
                conversation_id,
                name,
                value,
            } => {
                self.entry_mut(&scope, &conversation_id)?
                    .cursors
                    .insert(name, value);
            }
            Record::WorkingMemory { scope, key, memory } => {
                *self.working_slot(&scope, &key)? = Some(memory);
            }
            Record::Fact { fact } => {
                self.facts
                    .entry(fact.scope.clone())
                    .or_default()
                    .insert(fact.id.clone(), fact);
            }
            Record::Vector {
                scope,
                collection,
                record,
            } => {
                self.collection_mut(&scope.namespace().clone(), &collection)?
                    .records
                    .entry(scope)
                    .or_default()
                    .insert(record.id.clone(), record);
            }
            Record::Checkpoint { scope, checkpoint } => {
                self.checkpoints
                    .entry(scope)
                    .or_default()
                    .insert(checkpoint.id.clone(), checkpoint);
            }
            Record::CacheEntry {
                namespace,
                key,
                value,
                expires_at,
            } => {
                self.cache.insert((namespace, key), (value, expires_at));
            }
        }
        Ok(())
    }
}

#[async_trait]
impl TransferStore for InMemoryBackend {
    async fn namespaces(&self) -> Result<Vec<Namespace>> {
        let now = self.clock.now();
        let state = self.read();
        let mut namespaces: BTreeSet<Namespace> = state
            .scope_keys()
            .into_iter()
            .filter(|scope| state.owns_anything(scope, now))
            .map(|scope| scope.namespace().clone())
            .collect();
        namespaces.extend(state.collections.keys().map(|(ns, _)| ns.clone()));
        namespaces.extend(state.live_cache(now).map(|((ns, _), _)| ns.clone()));
        Ok(namespaces.into_iter().collect())
    }

    async fn scopes(&self, namespace: &Namespace) -> Result<Vec<Scope>> {
        let now = self.clock.now();
        let state = self.read();
        Ok(state
            .scope_keys()
            .into_iter()
            .filter(|scope| scope.namespace() == namespace && state.owns_anything(scope, now))
            .cloned()
            .collect())
    }

    async fn export_namespace(&self, namespace: &Namespace) -> Result<Vec<Record>> {
        let now = self.clock.now();
        let state = self.read();
        let mut records: Vec<Record> = state
            .collections
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .map(|((ns, _), c)| Record::Collection {
                namespace: ns.clone(),
                spec: c.spec.clone(),
            })
            .collect();
        records.extend(
            state
                .live_cache(now)
                .filter(|((ns, _), _)| ns == namespace)
                .map(|((ns, key), (value, expires_at))| Record::CacheEntry {
                    namespace: ns.clone(),
                    key: key.clone(),
                    value: value.clone(),
                    expires_at: *expires_at,
                }),
        );
        sort_canonical(&mut records);
        Ok(records)
    }

    async fn export_scope(&self, scope: &Scope) -> Result<Vec<Record>> {
        let now = self.clock.now();
        let state = self.read();
        let mut records = Vec::new();
        for entry in state
            .conversations
            .get(scope)
            .into_iter()
            .flat_map(BTreeMap::values)
        {
            let id = &entry.conversation.id;
            records.push(Record::Conversation {
                conversation: entry.conversation.clone(),
            });
            records.extend(entry.messages.iter().map(|(seq, message)| Record::Message {
                scope: scope.clone(),
                conversation_id: id.clone(),
                message: StoredMessage {
                    seq: *seq,
                    message: message.clone(),
                },
            }));
            records.extend(entry.cursors.iter().map(|(name, value)| Record::Cursor {
                scope: scope.clone(),
                conversation_id: id.clone(),
                name: name.clone(),
                value: *value,
            }));
            records.extend(
                entry
                    .working_memory
                    .iter()
                    .map(|memory| Record::WorkingMemory {
                        scope: scope.clone(),
                        key: WorkingMemoryKey::Conversation(id.clone()),
                        memory: memory.clone(),
                    }),
            );
        }
        if let Some(Some(memory)) = state.user_working_memory.get(scope) {
            records.push(Record::WorkingMemory {
                scope: scope.clone(),
                key: WorkingMemoryKey::User,
                memory: memory.clone(),
            });
        }
        records.extend(
            state
                .facts
                .get(scope)
                .into_iter()
                .flat_map(HashMap::values)
                .filter(|fact| !fact.is_expired(now))
                .map(|fact| Record::Fact { fact: fact.clone() }),
        );
        for ((_, name), collection) in &state.collections {
            records.extend(
                collection
                    .records
                    .get(scope)
                    .into_iter()
                    .flat_map(BTreeMap::values)
                    .map(|record| Record::Vector {
                        scope: scope.clone(),
                        collection: name.clone(),
                        record: record.clone(),
                    }),
            );
        }
        records.extend(
            state
                .checkpoints
                .get(scope)
                .into_iter()
                .flat_map(HashMap::values)
                .map(|checkpoint| Record::Checkpoint {
                    scope: scope.clone(),
                    checkpoint: checkpoint.clone(),
                }),
        );
        sort_canonical(&mut records);
        Ok(records)
    }

    async fn restore(&self, records: Vec<Record>) -> Result<u64> {
        let changes = crate::changes::restored(&records);
        let mut records = records;
        sort_canonical(&mut records);
        let mut state = self.write();
        // Every check first, then every write: under the one lock that is all or nothing.
        state.check_restore(&records)?;
        let written = records.len() as u64;
        for record in records {
            state.restore_one(record)?;
        }
        let now = self.clock.now();
        for (namespace, change) in changes {
            state.feed.record(&namespace, change, now);
        }
        Ok(written)
    }
}
