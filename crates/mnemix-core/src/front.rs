//! The front layer (see [`Checked`]).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use backon::{ExponentialBuilder, Retryable};

use crate::backend::{DeletionReceipt, MemoryBackend, NamespaceReceipt};
use crate::cache::{CacheStore, MAX_CACHE_BATCH};
use crate::capabilities::Capabilities;
use crate::checkpoint::{Checkpoint, CheckpointStore, CheckpointUpdate, NewCheckpoint};
use crate::conversation::{
    AppendOptions, AppendReceipt, Conversation, ConversationQuery, ConversationStore,
    ConversationUpdate, LoadOptions, NewConversation, MAX_LOAD_SEQS,
};
use crate::error::{MemoryError, Result};
use crate::fact::{
    Fact, FactQuery, FactStore, NewFact, RecallQuery, RememberOptions, RememberOutcome, ScoredFact,
    MAX_EXPIRY_BATCH,
};
use crate::message::{check_json_depth, check_metadata_depth, Message, StoredMessage};
use crate::page::{check_page, Page};
use crate::provenance::{Origin, Principal, Provenance};
use crate::records::{Record, TransferStore};
use crate::scope::{
    validate_identifier, CheckpointId, ConversationId, FactId, Namespace, Scope, VectorId,
};
use crate::time::Timestamp;
use crate::vector::{
    CollectionSpec, VectorHit, VectorQuery, VectorRecord, VectorSelector, VectorStore,
};
use crate::working::{WorkingMemory, WorkingMemoryKey, WorkingMemoryStore, WorkingMemoryUpdate};

/// How long a server backend (PostgreSQL, Redis) waits for a silent server, connecting or
/// for an answer it is owed, before the call fails [`MemoryError::Unavailable`] and the
/// [`RetryPolicy`] applies: each backend's `timeout` setting, and `OpenOptions::timeout` of the
/// front door. Long enough for the longest statement a store sends (a large `forget_all` or
/// restore batch takes seconds), short enough that a vanished host is noticed.
pub const DEFAULT_SERVER_TIMEOUT: Duration = Duration::from_secs(30);

/// How [`Checked`] retries a retryable failure ([`MemoryError::is_retryable`]) of an idempotent
/// operation: up to `attempts` tries in all, waiting `first_delay`, then twice as long each
/// time, never more than `max_delay` (with jitter).
///
/// Retried are every read and the writes that are safe to repeat: `append` (idempotent by
/// message id: a batch whose reply was lost comes back as duplicates, never twice),
/// `advance_cursor` (monotonic), `upsert_vectors` (by id), `ensure_collection`, `cache_set` and
/// `restore` (by identity). Never retried are writes whose repetition would answer differently
/// from the first try: creations (`AlreadyExists`), fenced writes (`Conflict`), `remember`,
/// deletions and `forget_all` (their counts).
///
/// A call against a server that never answers fails after at most `attempts` tries, each
/// bounded by the backend's timeout ([`DEFAULT_SERVER_TIMEOUT`] unless set), and the waits
/// between them (each at most `max_delay`, and up to twice that with its jitter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all, the first included; 1 never retries.
    pub attempts: u32,
    /// The wait before the second try.
    pub first_delay: Duration,
    /// The longest wait between two tries.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// 5 tries, waiting 100 ms, 200 ms, 400 ms, 800 ms: enough to ride out a connection reset
    /// or a server restarted by its supervisor, short enough to fail fast when it is gone.
    fn default() -> Self {
        Self {
            attempts: 5,
            first_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn never() -> Self {
        Self {
            attempts: 1,
            ..Self::default()
        }
    }

    /// Runs `op` until it succeeds, fails with a non-retryable error, or the tries run out.
    pub async fn run<T, F, Fut>(&self, op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let backoff = ExponentialBuilder::default()
            .with_min_delay(self.first_delay)
            .with_max_delay(self.max_delay)
            .with_max_times(self.attempts.saturating_sub(1) as usize)
            .with_jitter();
        op.retry(backoff).when(MemoryError::is_retryable).await
    }
}

/// The front layer: what every backend must do, written once, in front of the backend.
///
/// `Checked` wraps any [`MemoryBackend`] and is itself one. Before a call reaches the backend
/// it checks the input (identifiers, options, paging arguments, vectors and filters — everything
/// that can be judged without reading storage), and it retries retryable failures of idempotent
/// operations under one [`RetryPolicy`]. After a `load` it sanitizes the window. A backend so
/// holds storage code only: it may assume every argument it receives is valid.
///
/// Every call through the layer is a `tracing` span at debug level, named after the method
/// and carrying the backend's name (target `mnemix_core::front`), so a subscriber shows what a
/// turn asked of the store, how long each call took, and which ran at once.
///
/// `mnemix::open`, the engine and the conformance suite wrap every store they are given
/// (wrapping twice is a no-op, see [`Checked::wrap`]), so the checks cannot be forgotten.
///
/// What a backend still checks itself is what needs its storage: a vector's dimension and
/// metric against the stored collection ([`CollectionSpec::check_vector`]), a collection spec
/// against the stored one ([`CollectionSpec::check_same`]), and the decisions of
/// [`plan_append`](crate::adapter::plan_append), [`WorkingMemoryUpdate::apply`] and
/// [`CheckpointUpdate::apply_to`] that compare with stored state.
pub struct Checked {
    inner: Arc<dyn MemoryBackend>,
    retry: RetryPolicy,
    /// Who this layer writes as: what every fact it stores records ([`Provenance`]).
    writer: Provenance,
}

/// The argument of [`MemoryBackend::behind_front_layer`]: only this crate can make one, so
/// nothing outside it reaches the backend behind a front layer and writes what the layer
/// refuses.
///
/// ```compile_fail
/// use mnemix_core::{InMemoryBackend, MemoryBackend, Store};
/// let store = Store::new(InMemoryBackend::new());
/// // Refused by the compiler: the field is private to mnemix-core.
/// let bare = store.behind_front_layer(mnemix_core::adapter::FrontLayerOnly(()));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct FrontLayerOnly(pub(crate) ());

impl std::fmt::Debug for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checked")
            .field("backend", &self.inner.backend_name())
            .field("retry", &self.retry)
            .field("writer", &self.writer)
            .finish()
    }
}

impl Checked {
    /// `backend` behind the front layer with the default [`RetryPolicy`]; a backend that is
    /// already behind it is returned as it is, so wrapping twice never checks or retries twice.
    pub fn wrap(backend: Arc<dyn MemoryBackend>) -> Arc<dyn MemoryBackend> {
        if backend.is_checked() {
            backend
        } else {
            Arc::new(Self::with_retry(backend, RetryPolicy::default()))
        }
    }

    /// `backend` behind the front layer with `retry`. A backend already behind the layer is
    /// taken out of it first, so the new policy replaces the old one: a call is tried as `retry`
    /// says, never that many times for each try of another layer.
    ///
    /// The writer it keeps is the old layer's, or the program's ([`Principal::program`],
    /// [`Origin::Api`]).
    pub fn with_retry(backend: Arc<dyn MemoryBackend>, retry: RetryPolicy) -> Self {
        let writer = backend
            .writer()
            .unwrap_or_else(|| Provenance::new(Principal::program(), Origin::Api));
        Self {
            inner: backend
                .behind_front_layer(FrontLayerOnly(()))
                .unwrap_or(backend),
            retry,
            writer,
        }
    }

    /// A recall of the past ([`RecallQuery::reads_the_past`]), the same way on every backend:
    /// every stored version of the scope's facts, superseded ones included, ranked by
    /// [`rank_facts`](crate::adapter::rank_facts) after the query's filters (its time among
    /// them). It reads the whole scope: the past is asked of rarely.
    async fn recall_the_past(&self, scope: &Scope, query: &RecallQuery) -> Result<Vec<ScoredFact>> {
        // Through this layer's own list_facts, which retries each page.
        let every_version = FactQuery::default().with_include_superseded(true);
        let versions = crate::fact::every_page(self, scope, every_version).await?;
        Ok(crate::fact::rank_facts(query, versions))
    }

    /// `InvalidInput` when any of `ids` is a registry record (a kind or a grant): only the
    /// registry's own operations change those. They live in shared scopes alone.
    async fn refuse_registry_records(&self, scope: &Scope, ids: &[FactId]) -> Result<()> {
        if scope.subject().is_some() {
            return Ok(());
        }
        for id in ids {
            let fact = match self.retried(|| self.inner.get_fact(scope, id)).await {
                Ok(fact) => fact,
                Err(MemoryError::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            if crate::registry::is_registry_record(&fact) {
                return Err(MemoryError::invalid(format!(
                    "fact {id} is a registry record: only the registry's own operations \
                     (registering or deleting a kind, granting or revoking) change it"
                )));
            }
        }
        Ok(())
    }

    /// `op` tried as the retry policy says, as this layer's writer (for a write: what the
    /// change it records names).
    async fn retried<T, F, Fut>(&self, op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        self.written(self.retry.run(op)).await
    }

    /// `write` as this layer's writer: the principal the change it records names.
    fn written<F: std::future::Future>(
        &self,
        write: F,
    ) -> impl std::future::Future<Output = F::Output> {
        crate::changes::writing_as(self.writer.written_by.clone(), write)
    }
}

fn check_cache_batch(len: usize) -> Result<()> {
    if len > MAX_CACHE_BATCH {
        return Err(MemoryError::invalid(format!(
            "a cache batch holds at most {MAX_CACHE_BATCH} keys, got {len}"
        )));
    }
    Ok(())
}

fn check_max(what: &str, value: Option<impl Into<u64> + Copy>) -> Result<()> {
    if value.is_some_and(|v| v.into() == 0) {
        return Err(MemoryError::invalid(format!("{what} must be at least 1")));
    }
    Ok(())
}

#[async_trait]
#[deny(clippy::missing_trait_methods)] // a method left to its default would skip the layer
impl ConversationStore for Checked {
    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn create_conversation(
        &self,
        scope: &Scope,
        new: NewConversation,
    ) -> Result<Conversation> {
        new.validate()?;
        self.written(self.inner.create_conversation(scope, new))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn get_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<Conversation> {
        self.retried(|| self.inner.get_conversation(scope, id))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn list_conversations(
        &self,
        scope: &Scope,
        query: ConversationQuery,
    ) -> Result<Page<Conversation>> {
        check_page(query.limit, query.cursor.as_deref())?;
        self.retried(|| self.inner.list_conversations(scope, query.clone()))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn update_conversation(
        &self,
        scope: &Scope,
        id: &ConversationId,
        update: ConversationUpdate,
    ) -> Result<Conversation> {
        if let Some(metadata) = &update.metadata {
            check_metadata_depth("conversation metadata", metadata)?;
        }
        self.written(self.inner.update_conversation(scope, id, update))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn delete_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<bool> {
        self.written(self.inner.delete_conversation(scope, id))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn append(
        &self,
        scope: &Scope,
        id: &ConversationId,
        messages: Vec<Message>,
        options: AppendOptions,
    ) -> Result<AppendReceipt> {
        check_max("max_messages", options.max_messages)?;
        messages.iter().try_for_each(Message::check_json_depth)?;
        self.retried(|| self.inner.append(scope, id, messages.clone(), options))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn load(
        &self,
        scope: &Scope,
        id: &ConversationId,
        options: LoadOptions,
    ) -> Result<Vec<StoredMessage>> {
        // The backend selects; sanitizing the selection is the same everywhere, so it is here.
        let select = LoadOptions {
            sanitize: false,
            ..options.clone()
        };
        let window = self
            .retried(|| self.inner.load(scope, id, select.clone()))
            .await?;
        Ok(options.finish(window))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn load_seqs(
        &self,
        scope: &Scope,
        id: &ConversationId,
        seqs: &[u64],
    ) -> Result<Vec<StoredMessage>> {
        if seqs.len() > MAX_LOAD_SEQS {
            return Err(MemoryError::invalid(format!(
                "load_seqs reads at most {MAX_LOAD_SEQS} seqs, got {}",
                seqs.len()
            )));
        }
        let mut seqs = seqs.to_vec();
        seqs.sort_unstable();
        seqs.dedup();
        self.retried(|| self.inner.load_seqs(scope, id, &seqs))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn cursor(&self, scope: &Scope, id: &ConversationId, name: &str) -> Result<Option<u64>> {
        validate_identifier("cursor name", name)?;
        self.retried(|| self.inner.cursor(scope, id, name)).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn advance_cursor(
        &self,
        scope: &Scope,
        id: &ConversationId,
        name: &str,
        seq: u64,
    ) -> Result<u64> {
        validate_identifier("cursor name", name)?;
        self.retried(|| self.inner.advance_cursor(scope, id, name, seq))
            .await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)] // a method left to its default would skip the layer
impl WorkingMemoryStore for Checked {
    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn get_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
    ) -> Result<Option<WorkingMemory>> {
        self.retried(|| self.inner.get_working_memory(scope, key))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn set_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
        update: WorkingMemoryUpdate,
    ) -> Result<WorkingMemory> {
        update.validate()?;
        self.written(self.inner.set_working_memory(scope, key, update))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn clear_working_memory(&self, scope: &Scope, key: &WorkingMemoryKey) -> Result<bool> {
        self.written(self.inner.clear_working_memory(scope, key))
            .await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)] // a method left to its default would skip the layer
impl FactStore for Checked {
    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn remember(
        &self,
        scope: &Scope,
        fact: NewFact,
        options: RememberOptions,
    ) -> Result<RememberOutcome> {
        fact.validate()?;
        if options.registry.is_none() {
            crate::registry::check_unreserved(
                fact.kind.as_deref(),
                fact.key.as_deref(),
                &fact.tags,
            )?;
        }
        check_max("max_facts", options.max_facts.map(|n| n as u64))?;
        // A writer built by hand (its fields are public) is held to its constructors' rules,
        // so that what is stored can be exported and restored.
        self.writer.validate()?;
        let mut fact = fact;
        fact.set_provenance(self.writer.clone());
        self.written(self.inner.remember(scope, fact, options))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn recall(&self, scope: &Scope, query: RecallQuery) -> Result<Vec<ScoredFact>> {
        query.validate()?;
        if query.reads_the_past() {
            return self.recall_the_past(scope, &query).await;
        }
        self.retried(|| self.inner.recall(scope, query.clone()))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn get_fact(&self, scope: &Scope, id: &FactId) -> Result<Fact> {
        self.retried(|| self.inner.get_fact(scope, id)).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn list_facts(&self, scope: &Scope, query: FactQuery) -> Result<Page<Fact>> {
        check_page(query.limit, query.cursor.as_deref())?;
        self.retried(|| self.inner.list_facts(scope, query.clone()))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn history(&self, scope: &Scope, key: &str) -> Result<Vec<Fact>> {
        validate_identifier("fact key", key)?;
        self.retried(|| self.inner.history(scope, key)).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn forget(&self, scope: &Scope, id: &FactId) -> Result<bool> {
        self.refuse_registry_records(scope, std::slice::from_ref(id))
            .await?;
        self.written(self.inner.forget(scope, id)).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn set_expiry(
        &self,
        scope: &Scope,
        ids: &[FactId],
        expires_at: Option<Timestamp>,
    ) -> Result<Vec<FactId>> {
        if ids.len() > MAX_EXPIRY_BATCH {
            return Err(MemoryError::invalid(format!(
                "set_expiry takes at most {MAX_EXPIRY_BATCH} ids, got {}",
                ids.len()
            )));
        }
        let mut seen = std::collections::HashSet::new();
        let ids: Vec<FactId> = ids.iter().filter(|id| seen.insert(*id)).cloned().collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.refuse_registry_records(scope, &ids).await?;
        // Setting the same expiry twice leaves the same state: safe to retry.
        let changed: std::collections::HashSet<FactId> = self
            .retried(|| self.inner.set_expiry(scope, &ids, expires_at))
            .await?
            .into_iter()
            .collect();
        Ok(ids.into_iter().filter(|id| changed.contains(id)).collect())
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)] // a method left to its default would skip the layer
impl VectorStore for Checked {
    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn ensure_collection(
        &self,
        namespace: &Namespace,
        spec: CollectionSpec,
    ) -> Result<CollectionSpec> {
        spec.validate()?;
        self.retried(|| self.inner.ensure_collection(namespace, spec.clone()))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn list_collections(&self, namespace: &Namespace) -> Result<Vec<CollectionSpec>> {
        self.retried(|| self.inner.list_collections(namespace))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn drop_collection(&self, namespace: &Namespace, name: &str) -> Result<bool> {
        self.written(self.inner.drop_collection(namespace, name))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn upsert_vectors(
        &self,
        scope: &Scope,
        collection: &str,
        records: Vec<VectorRecord>,
    ) -> Result<usize> {
        for record in &records {
            check_metadata_depth("vector metadata", &record.metadata)?;
        }
        self.retried(|| {
            self.inner
                .upsert_vectors(scope, collection, records.clone())
        })
        .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn get_vector(
        &self,
        scope: &Scope,
        collection: &str,
        id: &VectorId,
    ) -> Result<VectorRecord> {
        self.retried(|| self.inner.get_vector(scope, collection, id))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn delete_vectors(
        &self,
        scope: &Scope,
        collection: &str,
        selector: VectorSelector,
    ) -> Result<usize> {
        if let VectorSelector::Filter(filter) = &selector {
            filter.validate()?;
        }
        self.written(self.inner.delete_vectors(scope, collection, selector))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn search(
        &self,
        scope: &Scope,
        collection: &str,
        query: VectorQuery,
    ) -> Result<Vec<VectorHit>> {
        query.validate()?;
        self.retried(|| self.inner.search(scope, collection, query.clone()))
            .await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)] // a method left to its default would skip the layer
impl CheckpointStore for Checked {
    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn put_checkpoint(&self, scope: &Scope, checkpoint: NewCheckpoint) -> Result<Checkpoint> {
        checkpoint.validate()?;
        self.written(self.inner.put_checkpoint(scope, checkpoint))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn get_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<Checkpoint> {
        self.retried(|| self.inner.get_checkpoint(scope, id)).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn update_checkpoint(
        &self,
        scope: &Scope,
        id: &CheckpointId,
        update: CheckpointUpdate,
    ) -> Result<Checkpoint> {
        check_json_depth("checkpoint state", &update.state)?;
        self.written(self.inner.update_checkpoint(scope, id, update))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn list_suspended(
        &self,
        scope: &Scope,
        workflow: Option<&str>,
    ) -> Result<Vec<Checkpoint>> {
        self.retried(|| self.inner.list_suspended(scope, workflow))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn delete_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<bool> {
        self.written(self.inner.delete_checkpoint(scope, id)).await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)] // a method left to its default would skip the layer
impl CacheStore for Checked {
    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn cache_get(&self, namespace: &Namespace, key: &str) -> Result<Option<Vec<u8>>> {
        validate_identifier("cache key", key)?;
        self.retried(|| self.inner.cache_get(namespace, key)).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn cache_set(
        &self,
        namespace: &Namespace,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        validate_identifier("cache key", key)?;
        self.retried(|| self.inner.cache_set(namespace, key, value.clone(), ttl))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn cache_get_many(
        &self,
        namespace: &Namespace,
        keys: &[String],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        check_cache_batch(keys.len())?;
        keys.iter()
            .try_for_each(|key| validate_identifier("cache key", key))?;
        self.retried(|| self.inner.cache_get_many(namespace, keys))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn cache_set_many(
        &self,
        namespace: &Namespace,
        entries: Vec<(String, Vec<u8>)>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        check_cache_batch(entries.len())?;
        // The later value of a repeated key wins, so a backend writes each key once.
        let mut seen = std::collections::HashSet::new();
        let mut unique: Vec<(String, Vec<u8>)> = Vec::with_capacity(entries.len());
        for (key, value) in entries.into_iter().rev() {
            validate_identifier("cache key", &key)?;
            if seen.insert(key.clone()) {
                unique.push((key, value));
            }
        }
        unique.reverse();
        self.retried(|| self.inner.cache_set_many(namespace, unique.clone(), ttl))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn cache_delete(&self, namespace: &Namespace, key: &str) -> Result<bool> {
        validate_identifier("cache key", key)?;
        self.inner.cache_delete(namespace, key).await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)] // a method left to its default would skip the layer
impl TransferStore for Checked {
    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn namespaces(&self) -> Result<Vec<Namespace>> {
        self.retried(|| self.inner.namespaces()).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn scopes(&self, namespace: &Namespace) -> Result<Vec<Scope>> {
        self.retried(|| self.inner.scopes(namespace)).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn export_namespace(&self, namespace: &Namespace) -> Result<Vec<Record>> {
        self.retried(|| self.inner.export_namespace(namespace))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn export_scope(&self, scope: &Scope) -> Result<Vec<Record>> {
        self.retried(|| self.inner.export_scope(scope)).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn restore(&self, records: Vec<Record>) -> Result<u64> {
        crate::records::check_batch(&records)?;
        // Nothing verifies a file's account of who wrote a fact: the importer wrote it here.
        let records = crate::records::as_restored_by(records, &self.writer.written_by);
        let records = crate::registry::one_current_version(self.inner.as_ref(), records).await?;
        self.retried(|| self.inner.restore(records.clone())).await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)] // a method left to its default would skip the layer
impl MemoryBackend for Checked {
    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn is_checked(&self) -> bool {
        true
    }

    fn behind_front_layer(&self, _only: FrontLayerOnly) -> Option<Arc<dyn MemoryBackend>> {
        Some(Arc::clone(&self.inner))
    }

    fn acting_as(&self, writer: Provenance) -> Option<Arc<dyn MemoryBackend>> {
        Some(Arc::new(Self {
            inner: Arc::clone(&self.inner),
            retry: self.retry,
            writer,
        }))
    }

    fn writer(&self) -> Option<Provenance> {
        Some(self.writer.clone())
    }

    fn now(&self) -> Timestamp {
        self.inner.now()
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn forget_all(&self, scope: &Scope) -> Result<DeletionReceipt> {
        scope.require_subject("forget_all")?;
        let receipt = self.written(self.inner.forget_all(scope)).await?;
        // Grants live in the namespace's registry, not the subject's scope: the subject's
        // name leaves with its data.
        crate::registry::forget_grants_of(self, scope).await?;
        Ok(receipt)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn count_owned(&self, scope: &Scope) -> Result<DeletionReceipt> {
        scope.require_subject("count_owned")?;
        self.retried(|| self.inner.count_owned(scope)).await
    }

    /// The backend's own erasure: the front layer's `forget_all` refuses the shared scope,
    /// which a namespace's erasure takes too (grants included: they live there).
    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn forget_namespace(&self, namespace: &Namespace) -> Result<NamespaceReceipt> {
        self.inner.forget_namespace(namespace).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn schema_version(&self) -> Result<Option<u32>> {
        self.retried(|| self.inner.schema_version()).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn table_counts(&self) -> Result<Vec<(String, u64)>> {
        self.retried(|| self.inner.table_counts()).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn changes(
        &self,
        namespace: &Namespace,
        after: crate::ChangeCursor,
        limit: usize,
    ) -> Result<Vec<crate::Change>> {
        crate::changes::validate_limit(limit)?;
        self.retried(|| self.inner.changes(namespace, after, limit))
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = self.inner.backend_name()))]
    async fn trim_changes(
        &self,
        namespace: &Namespace,
        retention: crate::Retention,
    ) -> Result<u64> {
        // Trimming twice to the same policy leaves the same feed: safe to retry.
        self.retried(|| self.inner.trim_changes(namespace, retention))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{InMemoryBackend, Store};

    /// A store given another retry policy replaces the front layer rather than wrapping it:
    /// one layer, so a call is tried as the new policy says and never that many times per try.
    #[test]
    fn another_retry_policy_replaces_the_front_layer_instead_of_wrapping_it() {
        let store = Store::new(InMemoryBackend::new());
        let again = Store::with_retry(store.backend(), RetryPolicy::never());
        let layer = again.backend();
        let inner = layer
            .behind_front_layer(FrontLayerOnly(()))
            .expect("behind the front layer");
        assert!(
            !inner.is_checked(),
            "the new layer wraps the backend, not the old layer"
        );
        let rewrapped = Checked::with_retry(layer, RetryPolicy::default());
        assert!(rewrapped
            .inner
            .behind_front_layer(FrontLayerOnly(()))
            .is_none());
    }
}
