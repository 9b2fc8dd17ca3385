//! The store half of the seam: what the contracts written once need of a SQLite-family store
//! ([`FamilyStore`]: its connections, lent in the mode each call wants, its clock, its held
//! facts), and those contracts, each a generic function here. A core contract cannot be
//! implemented here for a driver crate's store (the orphan rule), so each driver crate invokes
//! the macros that implement it by calling these functions: [`fact_store!`](crate::fact_store),
//! [`document_stores!`](crate::document_stores), [`vector_store!`](crate::vector_store),
//! [`conversation_store!`](crate::conversation_store), [`transfer_store!`](crate::transfer_store). A store's `MemoryBackend` calls
//! [`schema_version`], [`table_counts`] and [`forget_all`] (its name and capabilities are its own).
//!
//! A lent connection is given back with [`Lent::settle`] once the call succeeded; one dropped
//! unsettled (an error, a cancelled future) rolls back whatever it began.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mnemix_core::migration::Migration;
use mnemix_core::transfer::Record;
use mnemix_core::{
    AppendOptions, AppendReceipt, Checkpoint, CheckpointId, CheckpointUpdate, Clock,
    CollectionSpec, Conversation, ConversationId, ConversationQuery, ConversationUpdate,
    DeletionReceipt, Fact, FactId, FactQuery, LoadOptions, MemoryError, Message, Namespace,
    NewCheckpoint, NewConversation, NewFact, Page, RecallQuery, RememberOptions, RememberOutcome,
    Result, Scope, ScoredFact, StoredMessage, Timestamp, VectorId, VectorRecord, VectorSelector,
    WorkingMemory, WorkingMemoryKey, WorkingMemoryUpdate,
};

use mnemix_core::adapter::{held_facts_cache, held_key, HeldChange, HeldFactsCache};

use mnemix_core::changes::{working as working_change, NewChange};
use mnemix_core::{
    Change, ChangeCursor, MemoryBackend, NamespaceReceipt, Operation, Principal, RememberStatus,
    Retention,
};

use super::changes;
use super::vectors::{self, VectorCache, VectorTables};
use super::{conversation_pk, conversations, facts, migrations};
use super::{documents, millis, seq_from_db, subject_of, transfer};
use crate::conversations::AppendRequest;
use crate::driver::Conn;

/// A connection a store lends the family (the tables of its vectors included).
pub trait Lent: VectorTables {
    /// Ends what was begun on it: commits the transaction of a
    /// [`transaction`](FamilyStore::transaction), or one begun in a first statement
    /// ([`Conn::first`]) whose `COMMIT` did not ride in a last one; else nothing.
    fn settle(self) -> impl Future<Output = Result<()>> + Send;
}

/// A SQLite-family store, as the contracts written once use it.
pub trait FamilyStore: Send + Sync {
    /// A connection it lends.
    type Lent<'s>: Lent
    where
        Self: 's;

    /// A reader: each statement reads one snapshot of its own, and statements that must
    /// share one begin a read transaction in the first of them ([`Conn::first`]).
    fn reader(&self) -> impl Future<Output = Result<Self::Lent<'_>>> + Send;

    /// The writer, for a write of one statement (atomic on its own).
    fn writer(&self) -> impl Future<Output = Result<Self::Lent<'_>>> + Send;

    /// A write transaction holding the write lock from its first statement, committed by
    /// [`Lent::settle`].
    fn transaction(&self) -> impl Future<Output = Result<Self::Lent<'_>>> + Send;

    /// A read transaction: one snapshot for every statement in it, ended by [`Lent::settle`].
    fn snapshot(&self) -> impl Future<Output = Result<Self::Lent<'_>>> + Send;

    /// Its clock and what it holds in memory.
    fn common(&self) -> &Common;

    /// Runs a remember in a write transaction (the store's write group, where it has one)
    /// and commits it.
    fn remember_in_group(
        &self,
        remember: Remember,
    ) -> impl Future<Output = Result<(RememberOutcome, HeldChange)>> + Send;

    /// Runs an append in the store's write group, with the group's other appends
    /// ([`conversations::append_group`]), and commits it.
    fn append_in_group(
        &self,
        request: AppendRequest,
    ) -> impl Future<Output = Result<AppendReceipt>> + Send;

    /// "Now", by the store's clock.
    fn now(&self) -> Timestamp {
        self.common().clock.now()
    }
}

/// What every SQLite-family store keeps beside its connections: its clock, and what it holds
/// in memory for searches.
pub struct Common {
    /// The clock that decides "now".
    pub clock: Arc<dyn Clock>,
    /// The subjects' facts held for semantic recall.
    pub held_facts: HeldFactsCache,
    /// The matrices of scopes' vectors held for search.
    pub vector_cache: VectorCache,
}

impl Common {
    /// Nothing held yet; the vector matrices within `vector_cache_bytes`, and the held facts
    /// within as much again (both are embeddings held for exact ranking: one setting bounds
    /// them, and a subject's facts fit where a collection of as many vectors would).
    pub fn new(clock: Arc<dyn Clock>, vector_cache_bytes: usize) -> Self {
        Self {
            clock,
            held_facts: held_facts_cache(vector_cache_bytes),
            vector_cache: VectorCache::new(vector_cache_bytes),
        }
    }
}

/// A remember waiting for its write transaction.
pub struct Remember {
    scope: Scope,
    new: NewFact,
    options: RememberOptions,
    now: Timestamp,
    /// Who asked, read in the asking task: what its change in the feed names.
    writer: Principal,
}

impl Remember {
    /// Runs [`facts::remember`] in the write transaction `tx` is in, with its change.
    pub async fn run<C: Conn>(self, tx: &mut C) -> Result<(RememberOutcome, HeldChange)> {
        let (outcome, held) =
            facts::remember(tx, &self.scope, self.new, self.options, self.now).await?;
        if outcome.status != RememberStatus::Duplicate {
            let change = mnemix_core::changes::remembered(&self.scope, &outcome);
            changes::record(tx, self.scope.namespace(), &change, &self.writer, self.now).await?;
        }
        Ok((outcome, held))
    }
}

/// Runs `write` in a write transaction with the change it reports (none when it changed
/// nothing), recorded by the caller's principal at `now`, and commits both.
macro_rules! recorded {
    ($store:expr, $namespace:expr, $now:expr, |$tx:ident| $write:expr) => {{
        let writer = mnemix_core::changes::writer();
        let mut $tx = $store.transaction().await?;
        let (value, change): (_, Option<NewChange>) = $write.await?;
        if let Some(change) = change {
            changes::record(&mut $tx, $namespace, &change, &writer, $now).await?;
        }
        $tx.settle().await?;
        Ok(value)
    }};
}

/// A SQLite-family store on a file: opened (and migrated) by path or URL, or the file migrated
/// alone (what the family's file tests, in `mnemix-testkit`, need of a store).
pub trait OnFile: Sized {
    /// The store's schema.
    const MIGRATIONS: &'static [Migration];

    /// Opens the store on `path` with its defaults, and applies pending migrations.
    fn open_file(path: &Path) -> impl Future<Output = Result<Self>> + Send;

    /// Opens the store at `url` (its backend's forms) with its defaults.
    fn open_url(url: &str) -> impl Future<Output = Result<Self>> + Send;

    /// The file it is open on; `None` in memory.
    fn file(&self) -> Option<&Path>;

    /// Applies `migrations` instead of [`MIGRATIONS`](Self::MIGRATIONS) to the file, as the
    /// store's migration runner does (upgrade tests); the versions it applied.
    fn migrate_file_with(
        path: &Path,
        migrations: &[Migration],
    ) -> impl Future<Output = Result<Vec<u32>>> + Send;
}

/// Runs `call` on a lent connection and settles it.
macro_rules! lent {
    ($lend:expr, |$conn:ident| $call:expr) => {{
        let mut $conn = $lend.await?;
        let value = $call.await?;
        $conn.settle().await?;
        Ok(value)
    }};
}

/// `FactStore::remember`: remembered in a committed transaction, then applied to what the
/// store holds.
pub async fn remember<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    new: NewFact,
    options: RememberOptions,
) -> Result<RememberOutcome> {
    let remember = Remember {
        scope: scope.clone(),
        new,
        options,
        now: store.now(),
        writer: mnemix_core::changes::writer(),
    };
    let (outcome, held) = store.remember_in_group(remember).await?;
    held.apply(&store.common().held_facts);
    Ok(outcome)
}

/// `FactStore::recall`, on a reader (the recall's statements share one snapshot).
pub async fn recall<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    query: &RecallQuery,
) -> Result<Vec<ScoredFact>> {
    let now = store.now();
    lent!(store.reader(), |conn| facts::recall(
        &mut conn,
        &store.common().held_facts,
        scope,
        query,
        now
    ))
}

/// `FactStore::get_fact`.
pub async fn get_fact<S: FamilyStore>(store: &S, scope: &Scope, id: &FactId) -> Result<Fact> {
    lent!(store.reader(), |conn| facts::get_fact(
        &mut conn,
        scope,
        id,
        store.now()
    ))
}

/// `FactStore::list_facts`.
pub async fn list_facts<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    query: FactQuery,
) -> Result<Page<Fact>> {
    lent!(store.reader(), |conn| facts::list_facts(
        &mut conn,
        scope,
        query,
        store.now()
    ))
}

/// `FactStore::history`.
pub async fn history<S: FamilyStore>(store: &S, scope: &Scope, key: &str) -> Result<Vec<Fact>> {
    lent!(store.reader(), |conn| facts::history(
        &mut conn,
        scope,
        key,
        store.now()
    ))
}

/// `FactStore::forget`.
pub async fn forget<S: FamilyStore>(store: &S, scope: &Scope, id: &FactId) -> Result<bool> {
    let now = store.now();
    recorded!(store, scope.namespace(), now, |tx| async {
        let forgotten = facts::forget(&mut tx, scope, id, now).await?;
        let change = NewChange::new(Operation::Forget, scope).records([id.as_str()]);
        Ok::<_, MemoryError>((forgotten, forgotten.then_some(change)))
    })
}

/// `FactStore::set_expiry`: one statement, all the ids or none.
pub async fn set_expiry<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    ids: &[FactId],
    expires_at: Option<Timestamp>,
) -> Result<Vec<FactId>> {
    let now = store.now();
    recorded!(store, scope.namespace(), now, |tx| async {
        let changed = facts::set_expiry(&mut tx, scope, ids, expires_at, now).await?;
        // In the order asked, as every backend answers.
        let changed: Vec<FactId> = ids
            .iter()
            .filter(|id| changed.contains(id))
            .cloned()
            .collect();
        let change = (!changed.is_empty()).then(|| {
            NewChange::new(Operation::SetExpiry, scope).records(changed.iter().map(FactId::as_str))
        });
        Ok::<_, MemoryError>((changed, change))
    })
}

/// `WorkingMemoryStore::get_working_memory`: one statement.
pub async fn get_working_memory<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    key: &WorkingMemoryKey,
) -> Result<Option<WorkingMemory>> {
    lent!(store.reader(), |conn| documents::get_working_memory(
        &mut conn, scope, key
    ))
}

/// `WorkingMemoryStore::set_working_memory`: one statement and its change.
pub async fn set_working_memory<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    key: &WorkingMemoryKey,
    update: WorkingMemoryUpdate,
) -> Result<WorkingMemory> {
    let now = store.now();
    recorded!(store, scope.namespace(), now, |tx| async {
        let stored = documents::set_working_memory(&mut tx, scope, key, update, now).await?;
        let change = working_change(Operation::SetWorkingMemory, scope, key);
        Ok::<_, MemoryError>((stored, Some(change)))
    })
}

/// `WorkingMemoryStore::clear_working_memory`: the slot is read, then deleted.
pub async fn clear_working_memory<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    key: &WorkingMemoryKey,
) -> Result<bool> {
    recorded!(store, scope.namespace(), store.now(), |tx| async {
        let cleared = documents::clear_working_memory(&mut tx, scope, key).await?;
        let change = working_change(Operation::ClearWorkingMemory, scope, key);
        Ok::<_, MemoryError>((cleared, cleared.then_some(change)))
    })
}

/// `CheckpointStore::put_checkpoint`.
pub async fn put_checkpoint<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    new: NewCheckpoint,
) -> Result<Checkpoint> {
    let now = store.now();
    recorded!(store, scope.namespace(), now, |tx| async {
        let stored = documents::put_checkpoint(&mut tx, scope, new, now).await?;
        let change = NewChange::new(Operation::PutCheckpoint, scope).records([stored.id.as_str()]);
        Ok::<_, MemoryError>((stored, Some(change)))
    })
}

/// `CheckpointStore::get_checkpoint`.
pub async fn get_checkpoint<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    id: &CheckpointId,
) -> Result<Checkpoint> {
    lent!(store.reader(), |conn| documents::get_checkpoint(
        &mut conn, scope, id
    ))
}

/// `CheckpointStore::update_checkpoint`: read, checked and written in one transaction.
pub async fn update_checkpoint<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    id: &CheckpointId,
    update: CheckpointUpdate,
) -> Result<Checkpoint> {
    let now = store.now();
    recorded!(store, scope.namespace(), now, |tx| async {
        let stored = documents::update_checkpoint(&mut tx, scope, id, update, now).await?;
        let change = NewChange::new(Operation::UpdateCheckpoint, scope).records([id.as_str()]);
        Ok::<_, MemoryError>((stored, Some(change)))
    })
}

/// `CheckpointStore::list_suspended`.
pub async fn list_suspended<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    workflow: Option<&str>,
) -> Result<Vec<Checkpoint>> {
    lent!(store.reader(), |conn| documents::list_suspended(
        &mut conn, scope, workflow
    ))
}

/// `CheckpointStore::delete_checkpoint`.
pub async fn delete_checkpoint<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    id: &CheckpointId,
) -> Result<bool> {
    recorded!(store, scope.namespace(), store.now(), |tx| async {
        let deleted = documents::delete_checkpoint(&mut tx, scope, id).await?;
        let change = NewChange::new(Operation::DeleteCheckpoint, scope).records([id.as_str()]);
        Ok::<_, MemoryError>((deleted, deleted.then_some(change)))
    })
}

/// `CacheStore::cache_get`.
pub async fn cache_get<S: FamilyStore>(
    store: &S,
    namespace: &Namespace,
    key: &str,
) -> Result<Option<Vec<u8>>> {
    lent!(store.reader(), |conn| documents::cache_get(
        &mut conn,
        namespace,
        key,
        store.now()
    ))
}

/// `CacheStore::cache_get_many`: one statement.
pub async fn cache_get_many<S: FamilyStore>(
    store: &S,
    namespace: &Namespace,
    keys: &[String],
) -> Result<Vec<Option<Vec<u8>>>> {
    lent!(store.reader(), |conn| documents::cache_get_many(
        &mut conn,
        namespace,
        keys,
        store.now()
    ))
}

/// `CacheStore::cache_set`.
pub async fn cache_set<S: FamilyStore>(
    store: &S,
    namespace: &Namespace,
    key: &str,
    value: &[u8],
    ttl: Option<Duration>,
) -> Result<()> {
    let expires = ttl.map(|ttl| store.now().saturating_add(ttl));
    lent!(store.writer(), |conn| documents::put_cache(
        &mut conn, namespace, key, value, expires
    ))
}

/// `CacheStore::cache_set_many`: one transaction, one commit for the batch.
pub async fn cache_set_many<S: FamilyStore>(
    store: &S,
    namespace: &Namespace,
    entries: &[(String, Vec<u8>)],
    ttl: Option<Duration>,
) -> Result<()> {
    let expires = ttl.map(|ttl| store.now().saturating_add(ttl));
    let mut tx = store.transaction().await?;
    for (key, value) in entries {
        documents::put_cache(&mut tx, namespace, key, value, expires).await?;
    }
    tx.settle().await
}

/// `CacheStore::cache_delete`.
pub async fn cache_delete<S: FamilyStore>(
    store: &S,
    namespace: &Namespace,
    key: &str,
) -> Result<bool> {
    lent!(store.writer(), |conn| documents::cache_delete(
        &mut conn,
        namespace,
        key,
        store.now()
    ))
}

/// `VectorStore::ensure_collection`.
pub async fn ensure_collection<S: FamilyStore>(
    store: &S,
    namespace: &Namespace,
    spec: CollectionSpec,
) -> Result<CollectionSpec> {
    recorded!(store, namespace, store.now(), |tx| async {
        let existing = vectors::ensure_collection(&mut tx, namespace, &spec).await?;
        let change = existing.is_none().then(|| {
            NewChange::namespace_wide(Operation::EnsureCollection).within(spec.name.as_str())
        });
        Ok::<_, MemoryError>((existing.unwrap_or_else(|| spec.clone()), change))
    })
}

/// `VectorStore::list_collections`.
pub async fn list_collections<S: FamilyStore>(
    store: &S,
    namespace: &Namespace,
) -> Result<Vec<CollectionSpec>> {
    let mut conn = store.reader().await?;
    let found = vectors::namespace_collections(&mut conn, namespace).await?;
    conn.settle().await?;
    Ok(found.into_iter().map(|c| c.spec).collect())
}

/// `VectorStore::drop_collection`.
pub async fn drop_collection<S: FamilyStore>(
    store: &S,
    namespace: &Namespace,
    name: &str,
) -> Result<bool> {
    recorded!(store, namespace, store.now(), |tx| async {
        let dropped = vectors::drop_collection(&mut tx, namespace, name).await?;
        let change = NewChange::namespace_wide(Operation::DropCollection).within(name);
        Ok::<_, MemoryError>((dropped, dropped.then_some(change)))
    })
}

/// `VectorStore::upsert_vectors`: written in one transaction, then applied to the scope's
/// held matrix (the collection's other matrices move to the new generation).
pub async fn upsert_vectors<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    collection: &str,
    records: Vec<VectorRecord>,
) -> Result<usize> {
    let writer = mnemix_core::changes::writer();
    let mut tx = store.transaction().await?;
    let collection = vectors::collection(&mut tx, scope.namespace(), collection).await?;
    vectors::write_vectors(&mut tx, &collection, scope, &records).await?;
    if !records.is_empty() {
        let change = NewChange::new(Operation::UpsertVectors, scope)
            .within(collection.spec.name.as_str())
            .records(records.iter().map(|r| r.id.as_str()));
        changes::record(&mut tx, scope.namespace(), &change, &writer, store.now()).await?;
    }
    tx.settle().await?;
    if !records.is_empty() {
        store.common().vector_cache.written_by_subject(
            &collection.pk,
            subject_of(scope),
            collection.generation,
            |matrix| matrix.upsert(&records),
        );
    }
    Ok(records.len())
}

/// `VectorStore::get_vector`.
pub async fn get_vector<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    collection: &str,
    id: &VectorId,
) -> Result<VectorRecord> {
    let mut conn = store.reader().await?;
    let collection = vectors::collection(&mut conn, scope.namespace(), collection).await?;
    let found = conn.read_vector(&collection, subject_of(scope), id).await?;
    conn.settle().await?;
    found.ok_or_else(|| MemoryError::not_found("vector", id.as_str()))
}

/// `VectorStore::delete_vectors`: deleted in one transaction, then from the scope's held
/// matrix.
pub async fn delete_vectors<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    collection: &str,
    selector: VectorSelector,
) -> Result<usize> {
    let writer = mnemix_core::changes::writer();
    let mut tx = store.transaction().await?;
    let collection = vectors::collection(&mut tx, scope.namespace(), collection).await?;
    let (ids, removed) = vectors::delete_selected(&mut tx, &collection, scope, selector).await?;
    if removed > 0 {
        let change = NewChange::new(Operation::DeleteVectors, scope)
            .within(collection.spec.name.as_str())
            .records(ids.iter().map(VectorId::as_str));
        changes::record(&mut tx, scope.namespace(), &change, &writer, store.now()).await?;
    }
    tx.settle().await?;
    if removed > 0 {
        store.common().vector_cache.written_by_subject(
            &collection.pk,
            subject_of(scope),
            collection.generation,
            |matrix| matrix.remove(&ids),
        );
    }
    Ok(usize::try_from(removed).unwrap_or(usize::MAX))
}

/// `ConversationStore::create_conversation`: one statement.
pub async fn create_conversation<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    new: NewConversation,
) -> Result<Conversation> {
    let now = store.now();
    let conversation = new.into_conversation(scope, now);
    recorded!(store, scope.namespace(), now, |tx| async {
        conversations::create_conversation(&mut tx, &conversation).await?;
        let change =
            NewChange::new(Operation::CreateConversation, scope).within(conversation.id.as_str());
        Ok::<_, MemoryError>((conversation.clone(), Some(change)))
    })
}

/// `ConversationStore::get_conversation`.
pub async fn get_conversation<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    id: &ConversationId,
) -> Result<Conversation> {
    lent!(store.reader(), |conn| conversations::get_conversation(
        &mut conn, scope, id
    ))
}

/// `ConversationStore::list_conversations`.
pub async fn list_conversations<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    query: ConversationQuery,
) -> Result<Page<Conversation>> {
    lent!(store.reader(), |conn| conversations::list_conversations(
        &mut conn, scope, query
    ))
}

/// `ConversationStore::update_conversation`: read and written in one transaction.
pub async fn update_conversation<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    id: &ConversationId,
    update: ConversationUpdate,
) -> Result<Conversation> {
    let now = store.now();
    recorded!(store, scope.namespace(), now, |tx| async {
        let updated = conversations::update_conversation(&mut tx, scope, id, update, now).await?;
        let change = NewChange::new(Operation::UpdateConversation, scope).within(id.as_str());
        Ok::<_, MemoryError>((updated, Some(change)))
    })
}

/// `ConversationStore::delete_conversation`: the conversation, its working memory and its
/// vectors in one transaction.
pub async fn delete_conversation<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    id: &ConversationId,
) -> Result<bool> {
    let writer = mnemix_core::changes::writer();
    let mut tx = store.transaction().await?;
    let pk = match conversation_pk(&mut tx, scope, id).await {
        Ok((pk, _)) => pk,
        Err(e) if e.is_not_found() => return Ok(false),
        Err(e) => return Err(e),
    };
    let touched = tx.delete_scope_vectors(scope, Some(id)).await?;
    vectors::bump_generations(&mut tx, touched).await?;
    conversations::delete_conversation(&mut tx, scope, pk).await?;
    let change = NewChange::new(Operation::DeleteConversation, scope).within(id.as_str());
    changes::record(&mut tx, scope.namespace(), &change, &writer, store.now()).await?;
    tx.settle().await?;
    Ok(true)
}

/// `ConversationStore::append`: in the store's write group.
pub async fn append<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    id: &ConversationId,
    messages: Vec<Message>,
    options: AppendOptions,
) -> Result<AppendReceipt> {
    let request = AppendRequest::new(scope, id, messages, options, store.now());
    store.append_in_group(request).await
}

/// `ConversationStore::load`: one statement.
pub async fn load<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    id: &ConversationId,
    options: &LoadOptions,
) -> Result<Vec<StoredMessage>> {
    lent!(store.reader(), |conn| conversations::load(
        &mut conn, scope, id, options
    ))
}

/// `ConversationStore::load_seqs`: one statement.
pub async fn load_seqs<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    id: &ConversationId,
    seqs: &[u64],
) -> Result<Vec<StoredMessage>> {
    lent!(store.reader(), |conn| conversations::load_seqs(
        &mut conn, scope, id, seqs
    ))
}

/// `ConversationStore::cursor`: one statement.
pub async fn cursor<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    id: &ConversationId,
    name: &str,
) -> Result<Option<u64>> {
    lent!(store.reader(), |conn| conversations::cursor(
        &mut conn, scope, id, name
    ))
}

/// `ConversationStore::advance_cursor`: one transaction.
pub async fn advance_cursor<S: FamilyStore>(
    store: &S,
    scope: &Scope,
    id: &ConversationId,
    name: &str,
    seq: u64,
) -> Result<u64> {
    recorded!(store, scope.namespace(), store.now(), |tx| async {
        let before = conversations::cursor(&mut tx, scope, id, name).await?;
        let value = conversations::advance_cursor(&mut tx, scope, id, name, seq).await?;
        let change = NewChange::new(Operation::AdvanceCursor, scope)
            .within(id.as_str())
            .records([name]);
        Ok::<_, MemoryError>((value, (Some(value) != before).then_some(change)))
    })
}

/// `TransferStore::namespaces`: one statement.
pub async fn namespaces<S: FamilyStore>(store: &S) -> Result<Vec<Namespace>> {
    let now = millis(store.now());
    lent!(store.reader(), |conn| transfer::namespaces(&mut conn, now))
}

/// `TransferStore::scopes`: one snapshot.
pub async fn scopes<S: FamilyStore>(store: &S, namespace: &Namespace) -> Result<Vec<Scope>> {
    let now = millis(store.now());
    lent!(store.snapshot(), |tx| transfer::scopes(
        &mut tx, namespace, now
    ))
}

/// `TransferStore::export_namespace`: one snapshot.
pub async fn export_namespace<S: FamilyStore>(
    store: &S,
    namespace: &Namespace,
) -> Result<Vec<Record>> {
    let now = millis(store.now());
    lent!(store.snapshot(), |tx| transfer::export_namespace(
        &mut tx, namespace, now
    ))
}

/// `TransferStore::export_scope`: one snapshot.
pub async fn export_scope<S: FamilyStore>(store: &S, scope: &Scope) -> Result<Vec<Record>> {
    let now = millis(store.now());
    lent!(store.snapshot(), |tx| transfer::export_scope(
        &mut tx, scope, now
    ))
}

/// `TransferStore::restore`: one transaction.
pub async fn restore<S: FamilyStore>(store: &S, records: Vec<Record>) -> Result<u64> {
    let (writer, now) = (mnemix_core::changes::writer(), store.now());
    let restored = mnemix_core::changes::restored(&records);
    let mut tx = store.transaction().await?;
    let written = transfer::restore(&mut tx, records).await?;
    for (namespace, change) in &restored {
        changes::record(&mut tx, namespace, change, &writer, now).await?;
    }
    tx.settle().await?;
    Ok(written)
}

/// `MemoryBackend::schema_version`.
pub async fn schema_version<S: FamilyStore>(store: &S) -> Result<Option<u32>> {
    lent!(store.reader(), |conn| migrations::schema_version(&mut conn)).map(Some)
}

/// `MemoryBackend::table_counts`: every table's rows in one snapshot (`vectors` counts every
/// collection's).
pub async fn table_counts<S: FamilyStore>(store: &S) -> Result<Vec<(String, u64)>> {
    let mut tx = store.snapshot().await?;
    let mut counts = Vec::new();
    for (table, statement) in crate::transfer::TABLE_COUNTS {
        let rows = match statement {
            Some(statement) => match tx.row(statement, &[]).await? {
                Some(row) => seq_from_db(row.int(0)?),
                None => 0,
            },
            None => tx.count_vectors().await?,
        };
        counts.push(((*table).to_owned(), rows));
    }
    tx.settle().await?;
    Ok(counts)
}

/// `MemoryBackend::forget_all`: every row of the subject, its vectors included, in one
/// transaction, then what the store holds of it.
pub async fn forget_all<S: FamilyStore>(store: &S, scope: &Scope) -> Result<DeletionReceipt> {
    let (writer, now) = (mnemix_core::changes::writer(), store.now());
    let mut tx = store.transaction().await?;
    let mut receipt = super::forget_subject(&mut tx, scope, now).await?;
    let touched = tx.delete_scope_vectors(scope, None).await?;
    receipt.vectors = touched.len() as u64;
    vectors::bump_generations(&mut tx, touched).await?;
    if scope.subject().is_some() {
        receipt.changes = changes::scrub(&mut tx, scope).await?;
    }
    if receipt.total() > 0 || receipt.changes > 0 {
        let erased = NewChange::namespace_wide(Operation::Erase);
        changes::record(&mut tx, scope.namespace(), &erased, &writer, now).await?;
    }
    tx.settle().await?;
    store.common().held_facts.remove(&held_key(scope));
    Ok(receipt)
}

/// `MemoryBackend::count_owned`: what [`forget_all`] would erase, counted in one snapshot.
pub async fn count_owned<S: FamilyStore>(store: &S, scope: &Scope) -> Result<DeletionReceipt> {
    let (namespace, subject) = (scope.namespace().as_str(), subject_of(scope));
    let params = [namespace.into(), subject.into(), millis(store.now()).into()];
    lent!(store.snapshot(), |tx| async {
        let mut receipt = DeletionReceipt::default();
        if let Some(row) = tx.row(crate::forget::COUNT_SUBJECT_ROWS, &params).await? {
            let count = |i| row.int(i).map(seq_from_db);
            receipt.messages = count(0)?;
            receipt.cursors = count(1)?;
            receipt.working_memory = count(2)?;
            receipt.conversations = count(3)?;
            receipt.facts = count(4)?;
            receipt.checkpoints = count(5)?;
        }
        receipt.vectors = tx.count_scope_vectors(scope).await?;
        receipt.changes = changes::of_subject(&mut tx, scope).await?;
        Ok::<_, mnemix_core::MemoryError>(receipt)
    })
}

/// `MemoryBackend::forget_namespace`: every scope's records as [`forget_all`] erases them
/// ([`forget_namespace_records`](mnemix_core::adapter::forget_namespace_records)), then the
/// namespace's feed.
pub async fn forget_namespace<S>(store: &S, namespace: &Namespace) -> Result<NamespaceReceipt>
where
    S: FamilyStore + MemoryBackend,
{
    let receipt = mnemix_core::adapter::forget_namespace_records(store, namespace).await?;
    let mut tx = store.transaction().await?;
    changes::forget_namespace(&mut tx, namespace).await?;
    tx.settle().await?;
    Ok(receipt)
}

/// `MemoryBackend::changes`: the horizon and the page in one snapshot.
pub async fn read_changes<S: FamilyStore>(
    store: &S,
    namespace: &Namespace,
    after: ChangeCursor,
    limit: usize,
) -> Result<Vec<Change>> {
    lent!(store.snapshot(), |tx| changes::read(
        &mut tx, namespace, after, limit
    ))
}

/// `MemoryBackend::trim_changes`: one transaction.
pub async fn trim_changes<S: FamilyStore>(
    store: &S,
    namespace: &Namespace,
    retention: Retention,
) -> Result<u64> {
    let now = store.now();
    lent!(store.transaction(), |tx| changes::trim(
        &mut tx, namespace, retention, now
    ))
}

/// Implements [`MemoryBackend`] for a [`FamilyStore`]: the driver's own items (its name, clock
/// and capabilities) and the rest with the functions of [`store`](crate::family::store).
#[macro_export]
macro_rules! memory_backend {
    ($store:ty { $($own:item)* }) => {
        #[$crate::__private::async_trait]
        impl $crate::__private::core::MemoryBackend for $store {
        $($own)*

        async fn schema_version(&self) -> $crate::__private::core::Result<Option<u32>> {
            $crate::family::store::schema_version(self).await
        }

        async fn table_counts(&self) -> $crate::__private::core::Result<Vec<(String, u64)>> {
            $crate::family::store::table_counts(self).await
        }

        async fn forget_all(
            &self,
            scope: &$crate::__private::core::Scope,
        ) -> $crate::__private::core::Result<$crate::__private::core::DeletionReceipt> {
            $crate::family::store::forget_all(self, scope).await
        }

        async fn count_owned(
            &self,
            scope: &$crate::__private::core::Scope,
        ) -> $crate::__private::core::Result<$crate::__private::core::DeletionReceipt> {
            $crate::family::store::count_owned(self, scope).await
        }

        async fn forget_namespace(
            &self,
            namespace: &$crate::__private::core::Namespace,
        ) -> $crate::__private::core::Result<$crate::__private::core::NamespaceReceipt> {
            $crate::family::store::forget_namespace(self, namespace).await
        }

        async fn changes(
            &self,
            namespace: &$crate::__private::core::Namespace,
            after: $crate::__private::core::ChangeCursor,
            limit: usize,
        ) -> $crate::__private::core::Result<Vec<$crate::__private::core::Change>> {
            $crate::family::store::read_changes(self, namespace, after, limit).await
        }

        async fn trim_changes(
            &self,
            namespace: &$crate::__private::core::Namespace,
            retention: $crate::__private::core::Retention,
        ) -> $crate::__private::core::Result<u64> {
            $crate::family::store::trim_changes(self, namespace, retention).await
        }
        }
    };
}

/// Implements [`ConversationStore`](mnemix_core::ConversationStore) for a [`FamilyStore`] with
/// the functions of [`store`](crate::family::store).
#[macro_export]
macro_rules! conversation_store {
    ($store:ty) => {
        #[$crate::__private::async_trait]
        impl $crate::__private::core::ConversationStore for $store {
            async fn create_conversation(
                &self,
                scope: &$crate::__private::core::Scope,
                new: $crate::__private::core::NewConversation,
            ) -> $crate::__private::core::Result<$crate::__private::core::Conversation> {
                $crate::family::store::create_conversation(self, scope, new).await
            }

            async fn get_conversation(
                &self,
                scope: &$crate::__private::core::Scope,
                id: &$crate::__private::core::ConversationId,
            ) -> $crate::__private::core::Result<$crate::__private::core::Conversation> {
                $crate::family::store::get_conversation(self, scope, id).await
            }

            async fn list_conversations(
                &self,
                scope: &$crate::__private::core::Scope,
                query: $crate::__private::core::ConversationQuery,
            ) -> $crate::__private::core::Result<
                $crate::__private::core::Page<$crate::__private::core::Conversation>,
            > {
                $crate::family::store::list_conversations(self, scope, query).await
            }

            async fn update_conversation(
                &self,
                scope: &$crate::__private::core::Scope,
                id: &$crate::__private::core::ConversationId,
                update: $crate::__private::core::ConversationUpdate,
            ) -> $crate::__private::core::Result<$crate::__private::core::Conversation> {
                $crate::family::store::update_conversation(self, scope, id, update).await
            }

            async fn delete_conversation(
                &self,
                scope: &$crate::__private::core::Scope,
                id: &$crate::__private::core::ConversationId,
            ) -> $crate::__private::core::Result<bool> {
                $crate::family::store::delete_conversation(self, scope, id).await
            }

            async fn append(
                &self,
                scope: &$crate::__private::core::Scope,
                id: &$crate::__private::core::ConversationId,
                messages: Vec<$crate::__private::core::Message>,
                options: $crate::__private::core::AppendOptions,
            ) -> $crate::__private::core::Result<$crate::__private::core::AppendReceipt> {
                $crate::family::store::append(self, scope, id, messages, options).await
            }

            async fn load(
                &self,
                scope: &$crate::__private::core::Scope,
                id: &$crate::__private::core::ConversationId,
                options: $crate::__private::core::LoadOptions,
            ) -> $crate::__private::core::Result<Vec<$crate::__private::core::StoredMessage>> {
                $crate::family::store::load(self, scope, id, &options).await
            }

            async fn load_seqs(
                &self,
                scope: &$crate::__private::core::Scope,
                id: &$crate::__private::core::ConversationId,
                seqs: &[u64],
            ) -> $crate::__private::core::Result<Vec<$crate::__private::core::StoredMessage>> {
                $crate::family::store::load_seqs(self, scope, id, seqs).await
            }

            async fn cursor(
                &self,
                scope: &$crate::__private::core::Scope,
                id: &$crate::__private::core::ConversationId,
                name: &str,
            ) -> $crate::__private::core::Result<Option<u64>> {
                $crate::family::store::cursor(self, scope, id, name).await
            }

            async fn advance_cursor(
                &self,
                scope: &$crate::__private::core::Scope,
                id: &$crate::__private::core::ConversationId,
                name: &str,
                seq: u64,
            ) -> $crate::__private::core::Result<u64> {
                $crate::family::store::advance_cursor(self, scope, id, name, seq).await
            }
        }
    };
}

/// Implements [`TransferStore`](mnemix_core::TransferStore) for a [`FamilyStore`] with the
/// functions of [`store`](crate::family::store).
#[macro_export]
macro_rules! transfer_store {
    ($store:ty) => {
        #[$crate::__private::async_trait]
        impl $crate::__private::core::TransferStore for $store {
            async fn namespaces(
                &self,
            ) -> $crate::__private::core::Result<Vec<$crate::__private::core::Namespace>> {
                $crate::family::store::namespaces(self).await
            }

            async fn scopes(
                &self,
                namespace: &$crate::__private::core::Namespace,
            ) -> $crate::__private::core::Result<Vec<$crate::__private::core::Scope>> {
                $crate::family::store::scopes(self, namespace).await
            }

            async fn export_namespace(
                &self,
                namespace: &$crate::__private::core::Namespace,
            ) -> $crate::__private::core::Result<Vec<$crate::__private::core::transfer::Record>>
            {
                $crate::family::store::export_namespace(self, namespace).await
            }

            async fn export_scope(
                &self,
                scope: &$crate::__private::core::Scope,
            ) -> $crate::__private::core::Result<Vec<$crate::__private::core::transfer::Record>>
            {
                $crate::family::store::export_scope(self, scope).await
            }

            async fn restore(
                &self,
                records: Vec<$crate::__private::core::transfer::Record>,
            ) -> $crate::__private::core::Result<u64> {
                $crate::family::store::restore(self, records).await
            }
        }
    };
}

/// Implements [`FactStore`](mnemix_core::FactStore) for a [`FamilyStore`] with the functions
/// of [`store`](crate::family::store).
#[macro_export]
macro_rules! fact_store {
    ($store:ty) => {
        #[$crate::__private::async_trait]
        impl $crate::__private::core::FactStore for $store {
            async fn remember(
                &self,
                scope: &$crate::__private::core::Scope,
                new: $crate::__private::core::NewFact,
                options: $crate::__private::core::RememberOptions,
            ) -> $crate::__private::core::Result<$crate::__private::core::RememberOutcome> {
                $crate::family::store::remember(self, scope, new, options).await
            }

            async fn recall(
                &self,
                scope: &$crate::__private::core::Scope,
                query: $crate::__private::core::RecallQuery,
            ) -> $crate::__private::core::Result<Vec<$crate::__private::core::ScoredFact>> {
                $crate::family::store::recall(self, scope, &query).await
            }

            async fn get_fact(
                &self,
                scope: &$crate::__private::core::Scope,
                id: &$crate::__private::core::FactId,
            ) -> $crate::__private::core::Result<$crate::__private::core::Fact> {
                $crate::family::store::get_fact(self, scope, id).await
            }

            async fn list_facts(
                &self,
                scope: &$crate::__private::core::Scope,
                query: $crate::__private::core::FactQuery,
            ) -> $crate::__private::core::Result<
                $crate::__private::core::Page<$crate::__private::core::Fact>,
            > {
                $crate::family::store::list_facts(self, scope, query).await
            }

            async fn history(
                &self,
                scope: &$crate::__private::core::Scope,
                key: &str,
            ) -> $crate::__private::core::Result<Vec<$crate::__private::core::Fact>> {
                $crate::family::store::history(self, scope, key).await
            }

            async fn forget(
                &self,
                scope: &$crate::__private::core::Scope,
                id: &$crate::__private::core::FactId,
            ) -> $crate::__private::core::Result<bool> {
                $crate::family::store::forget(self, scope, id).await
            }

            async fn set_expiry(
                &self,
                scope: &$crate::__private::core::Scope,
                ids: &[$crate::__private::core::FactId],
                expires_at: Option<$crate::__private::core::Timestamp>,
            ) -> $crate::__private::core::Result<Vec<$crate::__private::core::FactId>> {
                $crate::family::store::set_expiry(self, scope, ids, expires_at).await
            }
        }
    };
}

/// Implements [`WorkingMemoryStore`](mnemix_core::WorkingMemoryStore),
/// [`CheckpointStore`](mnemix_core::CheckpointStore) and
/// [`CacheStore`](mnemix_core::CacheStore) for a [`FamilyStore`] with the functions of
/// [`store`](crate::family::store).
#[macro_export]
macro_rules! document_stores {
    ($store:ty) => {
        #[$crate::__private::async_trait]
        impl $crate::__private::core::WorkingMemoryStore for $store {
            async fn get_working_memory(
                &self,
                scope: &$crate::__private::core::Scope,
                key: &$crate::__private::core::WorkingMemoryKey,
            ) -> $crate::__private::core::Result<Option<$crate::__private::core::WorkingMemory>>
            {
                $crate::family::store::get_working_memory(self, scope, key).await
            }

            async fn set_working_memory(
                &self,
                scope: &$crate::__private::core::Scope,
                key: &$crate::__private::core::WorkingMemoryKey,
                update: $crate::__private::core::WorkingMemoryUpdate,
            ) -> $crate::__private::core::Result<$crate::__private::core::WorkingMemory> {
                $crate::family::store::set_working_memory(self, scope, key, update).await
            }

            async fn clear_working_memory(
                &self,
                scope: &$crate::__private::core::Scope,
                key: &$crate::__private::core::WorkingMemoryKey,
            ) -> $crate::__private::core::Result<bool> {
                $crate::family::store::clear_working_memory(self, scope, key).await
            }
        }

        #[$crate::__private::async_trait]
        impl $crate::__private::core::CheckpointStore for $store {
            async fn put_checkpoint(
                &self,
                scope: &$crate::__private::core::Scope,
                new: $crate::__private::core::NewCheckpoint,
            ) -> $crate::__private::core::Result<$crate::__private::core::Checkpoint> {
                $crate::family::store::put_checkpoint(self, scope, new).await
            }

            async fn get_checkpoint(
                &self,
                scope: &$crate::__private::core::Scope,
                id: &$crate::__private::core::CheckpointId,
            ) -> $crate::__private::core::Result<$crate::__private::core::Checkpoint> {
                $crate::family::store::get_checkpoint(self, scope, id).await
            }

            async fn update_checkpoint(
                &self,
                scope: &$crate::__private::core::Scope,
                id: &$crate::__private::core::CheckpointId,
                update: $crate::__private::core::CheckpointUpdate,
            ) -> $crate::__private::core::Result<$crate::__private::core::Checkpoint> {
                $crate::family::store::update_checkpoint(self, scope, id, update).await
            }

            async fn list_suspended(
                &self,
                scope: &$crate::__private::core::Scope,
                workflow: Option<&str>,
            ) -> $crate::__private::core::Result<Vec<$crate::__private::core::Checkpoint>> {
                $crate::family::store::list_suspended(self, scope, workflow).await
            }

            async fn delete_checkpoint(
                &self,
                scope: &$crate::__private::core::Scope,
                id: &$crate::__private::core::CheckpointId,
            ) -> $crate::__private::core::Result<bool> {
                $crate::family::store::delete_checkpoint(self, scope, id).await
            }
        }

        #[$crate::__private::async_trait]
        impl $crate::__private::core::CacheStore for $store {
            async fn cache_get(
                &self,
                namespace: &$crate::__private::core::Namespace,
                key: &str,
            ) -> $crate::__private::core::Result<Option<Vec<u8>>> {
                $crate::family::store::cache_get(self, namespace, key).await
            }

            async fn cache_set(
                &self,
                namespace: &$crate::__private::core::Namespace,
                key: &str,
                value: Vec<u8>,
                ttl: Option<::std::time::Duration>,
            ) -> $crate::__private::core::Result<()> {
                $crate::family::store::cache_set(self, namespace, key, &value, ttl).await
            }

            async fn cache_get_many(
                &self,
                namespace: &$crate::__private::core::Namespace,
                keys: &[String],
            ) -> $crate::__private::core::Result<Vec<Option<Vec<u8>>>> {
                $crate::family::store::cache_get_many(self, namespace, keys).await
            }

            async fn cache_set_many(
                &self,
                namespace: &$crate::__private::core::Namespace,
                entries: Vec<(String, Vec<u8>)>,
                ttl: Option<::std::time::Duration>,
            ) -> $crate::__private::core::Result<()> {
                $crate::family::store::cache_set_many(self, namespace, &entries, ttl).await
            }

            async fn cache_delete(
                &self,
                namespace: &$crate::__private::core::Namespace,
                key: &str,
            ) -> $crate::__private::core::Result<bool> {
                $crate::family::store::cache_delete(self, namespace, key).await
            }
        }
    };
}

/// Implements [`VectorStore`](mnemix_core::VectorStore) for a [`FamilyStore`] with the
/// functions of [`store`](crate::family::store), and its search with the store's own method
/// `search` names (`async fn(&self, &Scope, &str, VectorQuery) -> Result<Vec<VectorHit>>`).
#[macro_export]
macro_rules! vector_store {
    ($store:ty, search = $search:ident) => {
        #[$crate::__private::async_trait]
        impl $crate::__private::core::VectorStore for $store {
            async fn ensure_collection(
                &self,
                namespace: &$crate::__private::core::Namespace,
                spec: $crate::__private::core::CollectionSpec,
            ) -> $crate::__private::core::Result<$crate::__private::core::CollectionSpec> {
                $crate::family::store::ensure_collection(self, namespace, spec).await
            }

            async fn list_collections(
                &self,
                namespace: &$crate::__private::core::Namespace,
            ) -> $crate::__private::core::Result<Vec<$crate::__private::core::CollectionSpec>> {
                $crate::family::store::list_collections(self, namespace).await
            }

            async fn drop_collection(
                &self,
                namespace: &$crate::__private::core::Namespace,
                name: &str,
            ) -> $crate::__private::core::Result<bool> {
                $crate::family::store::drop_collection(self, namespace, name).await
            }

            async fn upsert_vectors(
                &self,
                scope: &$crate::__private::core::Scope,
                collection: &str,
                records: Vec<$crate::__private::core::VectorRecord>,
            ) -> $crate::__private::core::Result<usize> {
                $crate::family::store::upsert_vectors(self, scope, collection, records).await
            }

            async fn get_vector(
                &self,
                scope: &$crate::__private::core::Scope,
                collection: &str,
                id: &$crate::__private::core::VectorId,
            ) -> $crate::__private::core::Result<$crate::__private::core::VectorRecord> {
                $crate::family::store::get_vector(self, scope, collection, id).await
            }

            async fn delete_vectors(
                &self,
                scope: &$crate::__private::core::Scope,
                collection: &str,
                selector: $crate::__private::core::VectorSelector,
            ) -> $crate::__private::core::Result<usize> {
                $crate::family::store::delete_vectors(self, scope, collection, selector).await
            }

            async fn search(
                &self,
                scope: &$crate::__private::core::Scope,
                collection: &str,
                query: $crate::__private::core::VectorQuery,
            ) -> $crate::__private::core::Result<Vec<$crate::__private::core::VectorHit>> {
                self.$search(scope, collection, query).await
            }
        }
    };
}
