//! A custom adapter as a third party would write one: [`CountingStore`] wraps the in-memory
//! reference backend and counts the writes it forwards. `tests/conformance.rs` runs the whole
//! conformance suite against it in a dozen lines.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use memory_core::{
    AppendOptions, AppendReceipt, CacheStore, Capabilities, Checkpoint, CheckpointId,
    CheckpointStore, CheckpointUpdate, Clock, CollectionSpec, Conversation, ConversationId,
    ConversationQuery, ConversationStore, ConversationUpdate, DeletionReceipt, Fact, FactId,
    FactQuery, FactStore, InMemoryBackend, LoadOptions, MemoryBackend, Message, Namespace,
    NewCheckpoint, NewConversation, NewFact, Page, RecallQuery, Record, RememberOptions,
    RememberOutcome, Result, Scope, ScoredFact, StoredMessage, TransferStore, VectorHit, VectorId,
    VectorQuery, VectorRecord, VectorSelector, VectorStore, WorkingMemory, WorkingMemoryKey,
    WorkingMemoryStore, WorkingMemoryUpdate,
};

/// Forwards every call to an inner backend and counts writes.
#[derive(Debug)]
pub struct CountingStore {
    inner: InMemoryBackend,
    writes: AtomicU64,
}

impl CountingStore {
    /// A store whose "now" comes from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            inner: InMemoryBackend::with_clock(clock),
            writes: AtomicU64::new(0),
        }
    }

    /// Writes forwarded so far.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    fn count(&self) {
        self.writes.fetch_add(1, Ordering::Relaxed);
    }
}

#[async_trait]
impl ConversationStore for CountingStore {
    async fn create_conversation(
        &self,
        scope: &Scope,
        new: NewConversation,
    ) -> Result<Conversation> {
        self.count();
        self.inner.create_conversation(scope, new).await
    }
    async fn get_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<Conversation> {
        self.inner.get_conversation(scope, id).await
    }
    async fn list_conversations(
        &self,
        scope: &Scope,
        query: ConversationQuery,
    ) -> Result<Page<Conversation>> {
        self.inner.list_conversations(scope, query).await
    }
    async fn update_conversation(
        &self,
        scope: &Scope,
        id: &ConversationId,
        update: ConversationUpdate,
    ) -> Result<Conversation> {
        self.count();
        self.inner.update_conversation(scope, id, update).await
    }
    async fn delete_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<bool> {
        self.count();
        self.inner.delete_conversation(scope, id).await
    }
    async fn append(
        &self,
        scope: &Scope,
        id: &ConversationId,
        messages: Vec<Message>,
        options: AppendOptions,
    ) -> Result<AppendReceipt> {
        self.count();
        self.inner.append(scope, id, messages, options).await
    }
    async fn load(
        &self,
        scope: &Scope,
        id: &ConversationId,
        options: LoadOptions,
    ) -> Result<Vec<StoredMessage>> {
        self.inner.load(scope, id, options).await
    }
    async fn cursor(&self, scope: &Scope, id: &ConversationId, name: &str) -> Result<Option<u64>> {
        self.inner.cursor(scope, id, name).await
    }
    async fn advance_cursor(
        &self,
        scope: &Scope,
        id: &ConversationId,
        name: &str,
        seq: u64,
    ) -> Result<u64> {
        self.count();
        self.inner.advance_cursor(scope, id, name, seq).await
    }
}

#[async_trait]
impl WorkingMemoryStore for CountingStore {
    async fn get_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
    ) -> Result<Option<WorkingMemory>> {
        self.inner.get_working_memory(scope, key).await
    }
    async fn set_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
        update: WorkingMemoryUpdate,
    ) -> Result<WorkingMemory> {
        self.count();
        self.inner.set_working_memory(scope, key, update).await
    }
    async fn clear_working_memory(&self, scope: &Scope, key: &WorkingMemoryKey) -> Result<bool> {
        self.count();
        self.inner.clear_working_memory(scope, key).await
    }
}

#[async_trait]
impl FactStore for CountingStore {
    async fn remember(
        &self,
        scope: &Scope,
        fact: NewFact,
        options: RememberOptions,
    ) -> Result<RememberOutcome> {
        self.count();
        self.inner.remember(scope, fact, options).await
    }
    async fn recall(&self, scope: &Scope, query: RecallQuery) -> Result<Vec<ScoredFact>> {
        FactStore::recall(&self.inner, scope, query).await
    }
    async fn get_fact(&self, scope: &Scope, id: &FactId) -> Result<Fact> {
        self.inner.get_fact(scope, id).await
    }
    async fn list_facts(&self, scope: &Scope, query: FactQuery) -> Result<Page<Fact>> {
        self.inner.list_facts(scope, query).await
    }
    async fn history(&self, scope: &Scope, key: &str) -> Result<Vec<Fact>> {
        self.inner.history(scope, key).await
    }
    async fn forget(&self, scope: &Scope, id: &FactId) -> Result<bool> {
        self.count();
        self.inner.forget(scope, id).await
    }
}

#[async_trait]
impl VectorStore for CountingStore {
    async fn ensure_collection(
        &self,
        namespace: &Namespace,
        spec: CollectionSpec,
    ) -> Result<CollectionSpec> {
        self.count();
        self.inner.ensure_collection(namespace, spec).await
    }
    async fn list_collections(&self, namespace: &Namespace) -> Result<Vec<CollectionSpec>> {
        self.inner.list_collections(namespace).await
    }
    async fn drop_collection(&self, namespace: &Namespace, name: &str) -> Result<bool> {
        self.count();
        self.inner.drop_collection(namespace, name).await
    }
    async fn upsert_vectors(
        &self,
        scope: &Scope,
        collection: &str,
        records: Vec<VectorRecord>,
    ) -> Result<usize> {
        self.count();
        self.inner.upsert_vectors(scope, collection, records).await
    }
    async fn get_vector(
        &self,
        scope: &Scope,
        collection: &str,
        id: &VectorId,
    ) -> Result<VectorRecord> {
        self.inner.get_vector(scope, collection, id).await
    }
    async fn delete_vectors(
        &self,
        scope: &Scope,
        collection: &str,
        selector: VectorSelector,
    ) -> Result<usize> {
        self.count();
        self.inner.delete_vectors(scope, collection, selector).await
    }
    async fn search(
        &self,
        scope: &Scope,
        collection: &str,
        query: VectorQuery,
    ) -> Result<Vec<VectorHit>> {
        self.inner.search(scope, collection, query).await
    }
}

#[async_trait]
impl CheckpointStore for CountingStore {
    async fn put_checkpoint(&self, scope: &Scope, checkpoint: NewCheckpoint) -> Result<Checkpoint> {
        self.count();
        self.inner.put_checkpoint(scope, checkpoint).await
    }
    async fn get_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<Checkpoint> {
        self.inner.get_checkpoint(scope, id).await
    }
    async fn update_checkpoint(
        &self,
        scope: &Scope,
        id: &CheckpointId,
        update: CheckpointUpdate,
    ) -> Result<Checkpoint> {
        self.count();
        self.inner.update_checkpoint(scope, id, update).await
    }
    async fn list_suspended(
        &self,
        scope: &Scope,
        workflow: Option<&str>,
    ) -> Result<Vec<Checkpoint>> {
        self.inner.list_suspended(scope, workflow).await
    }
    async fn delete_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<bool> {
        self.count();
        self.inner.delete_checkpoint(scope, id).await
    }
}

#[async_trait]
impl CacheStore for CountingStore {
    async fn cache_get(&self, namespace: &Namespace, key: &str) -> Result<Option<Vec<u8>>> {
        self.inner.cache_get(namespace, key).await
    }
    async fn cache_set(
        &self,
        namespace: &Namespace,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        self.count();
        self.inner.cache_set(namespace, key, value, ttl).await
    }
    async fn cache_delete(&self, namespace: &Namespace, key: &str) -> Result<bool> {
        self.count();
        self.inner.cache_delete(namespace, key).await
    }
}

#[async_trait]
impl TransferStore for CountingStore {
    async fn namespaces(&self) -> Result<Vec<Namespace>> {
        self.inner.namespaces().await
    }
    async fn scopes(&self, namespace: &Namespace) -> Result<Vec<Scope>> {
        self.inner.scopes(namespace).await
    }
    async fn export_namespace(&self, namespace: &Namespace) -> Result<Vec<Record>> {
        self.inner.export_namespace(namespace).await
    }
    async fn export_scope(&self, scope: &Scope) -> Result<Vec<Record>> {
        self.inner.export_scope(scope).await
    }
    async fn restore(&self, records: Vec<Record>) -> Result<u64> {
        self.count();
        self.inner.restore(records).await
    }
}

#[async_trait]
impl MemoryBackend for CountingStore {
    fn backend_name(&self) -> &'static str {
        "counting"
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn forget_all(&self, scope: &Scope) -> Result<DeletionReceipt> {
        self.count();
        self.inner.forget_all(scope).await
    }
}
