//! `RedbStore`: agent memory in one [redb](https://docs.rs/redb) file — a third party's adapter,
//! written the way the conformance suite's README describes.
//!
//! It is a store of its own, not a wrapper: every record is a JSON value in one ordered table,
//! under a key that starts with its owner, so a scope's records sit together and a prefix scan
//! reads them. What it writes is storage only: input checks, retries and sanitizing come from
//! the front layer (`mnemix_core::Checked`) that `Store::new` and the suite put in front of it,
//! and the decisions every backend shares (`plan_append`, `rank_facts`, `rank_hits`, …) come from
//! `mnemix_core::adapter`.
//!
//! Atomicity is redb's: each write is one write transaction (redb runs one at a time, so a
//! read-then-write never races), and a transaction is never held across an `.await`.
//!
//! ```text
//! s␀{namespace}␀{subject}␀c␀{conversation}                 conversation
//! s␀…␀m␀{conversation}␀{seq, 20 digits}                     message
//! s␀…␀i␀{conversation}␀{message id}                         seq of a message id
//! s␀…␀u␀{conversation}␀{name}                               cursor
//! s␀…␀w␀{conversation, or empty for the user's document}    working memory
//! s␀…␀f␀{fact}   s␀…␀v␀{collection}␀{id}   s␀…␀k␀{checkpoint}
//! n␀{namespace}␀col␀{name}   n␀{namespace}␀cache␀{key}
//! ```
//! (`␀` is a NUL byte, which no identifier may hold; the shared scope's subject is empty.)
//!
//! [`DESCRIPTOR`] lets the front door open it by URL (`redb://PATH`) once a program registers
//! it: `mnemix::register(custom_adapter_example::DESCRIPTOR)?`, then `mnemix::open(url)`.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mnemix_core::adapter::{
    order_history, page_newest_first, plan_append, plan_remember, rank_facts, rank_hits,
    sort_canonical, AppendPlan, RememberPlan,
};
use mnemix_core::descriptor::{BoxOpen, Descriptor, OpenRequest};
use mnemix_core::transfer::Record;
use mnemix_core::{
    AppendOptions, AppendReceipt, CacheStore, Capabilities, Checkpoint, CheckpointId,
    CheckpointStatus, CheckpointStore, CheckpointUpdate, Clock, CollectionSpec, Conversation,
    ConversationId, ConversationQuery, ConversationStore, ConversationUpdate, DeletionReceipt,
    Durability, Fact, FactId, FactQuery, FactStore, LoadOptions, MemoryBackend, MemoryError,
    Message, MessageId, Namespace, NewCheckpoint, NewConversation, NewFact, Page, RecallQuery,
    RememberOptions, RememberOutcome, RememberStatus, Result, Scope, ScoredFact, StoredMessage,
    Subject, SystemClock, Timestamp, TransferStore, VectorHit, VectorId, VectorQuery, VectorRecord,
    VectorSearch, VectorSelector, VectorStore, WorkingMemory, WorkingMemoryKey, WorkingMemoryStore,
    WorkingMemoryUpdate,
};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

const NAME: &str = "redb";
const RECORDS: TableDefinition<'static, &'static str, &'static [u8]> =
    TableDefinition::new("records");

fn db(e: impl Into<redb::Error>) -> MemoryError {
    MemoryError::Backend {
        backend: NAME,
        source: Box::new(e.into()),
    }
}

fn encode(value: &impl Serialize) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| MemoryError::Backend {
        backend: NAME,
        source: Box::new(e),
    })
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| MemoryError::Backend {
        backend: NAME,
        source: Box::new(e),
    })
}

/// The prefix of everything `scope` owns.
fn owner(scope: &Scope) -> String {
    let subject = scope.subject().map_or("", Subject::as_str);
    format!("s\0{}\0{subject}\0", scope.namespace())
}

fn key_of(scope: &Scope, kind: &str, parts: &[&str]) -> String {
    let mut key = owner(scope);
    key.push_str(kind);
    for part in parts {
        key.push('\0');
        key.push_str(part);
    }
    key
}

/// The prefix of a kind's records (`key` with a trailing separator).
fn prefix(scope: &Scope, kind: &str, parts: &[&str]) -> String {
    let mut prefix = key_of(scope, kind, parts);
    prefix.push('\0');
    prefix
}

fn namespace_key(namespace: &Namespace, kind: &str, name: &str) -> String {
    format!("n\0{namespace}\0{kind}\0{name}")
}

fn seq_part(seq: u64) -> String {
    format!("{seq:020}")
}

/// Calls `each` with every key starting with `prefix` (empty, or ending in the separator) and
/// its stored bytes, in key order.
fn each_under(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    prefix: &str,
    mut each: impl FnMut(&str, &[u8]) -> Result<()>,
) -> Result<()> {
    // Keys under `…␀` sort below `…\u{1}`, whatever follows the separator.
    let end = match prefix.strip_suffix('\0') {
        Some(stem) => format!("{stem}\u{1}"),
        None => "\u{10ffff}\u{10ffff}".to_owned(), // the whole table: keys start with n or s
    };
    for entry in table.range(prefix..end.as_str()).map_err(db)? {
        let (key, value) = entry.map_err(db)?;
        each(key.value(), value.value())?;
    }
    Ok(())
}

/// Every `(key, value)` under `prefix`, decoded.
fn scan<T: DeserializeOwned>(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    prefix: &str,
) -> Result<Vec<(String, T)>> {
    let mut found = Vec::new();
    each_under(table, prefix, |key, value| {
        found.push((key.to_owned(), decode(value)?));
        Ok(())
    })?;
    Ok(found)
}

/// Every key under `prefix` (values are not decoded).
fn keys_under(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    prefix: &str,
) -> Result<Vec<String>> {
    let mut keys = Vec::new();
    each_under(table, prefix, |key, _| {
        keys.push(key.to_owned());
        Ok(())
    })?;
    Ok(keys)
}

fn read<T: DeserializeOwned>(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &str,
) -> Result<Option<T>> {
    table
        .get(key)
        .map_err(db)?
        .map(|value| decode(value.value()))
        .transpose()
}

type Table<'txn> = redb::Table<'txn, &'static str, &'static [u8]>;

fn write(table: &mut Table<'_>, key: &str, value: &impl Serialize) -> Result<()> {
    table.insert(key, encode(value)?.as_slice()).map_err(db)?;
    Ok(())
}

fn remove(table: &mut Table<'_>, key: &str) -> Result<bool> {
    Ok(table.remove(key).map_err(db)?.is_some())
}

/// Removes every key under `prefix`; how many.
fn remove_prefix(table: &mut Table<'_>, prefix: &str) -> Result<u64> {
    let keys = keys_under(table, prefix)?;
    for key in &keys {
        remove(table, key)?;
    }
    Ok(keys.len() as u64)
}

#[derive(Serialize, Deserialize)]
struct CacheValue {
    value: Vec<u8>,
    expires_at: Option<Timestamp>,
}

/// Agent memory in one redb file.
pub struct RedbStore {
    db: Database,
    clock: Arc<dyn Clock>,
}

impl RedbStore {
    /// Opens (or creates) the database at `path`, on the system clock.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with_clock(path, Arc::new(SystemClock))
    }

    /// Opens (or creates) the database at `path`, with `clock` deciding "now".
    pub fn open_with_clock(path: impl AsRef<Path>, clock: Arc<dyn Clock>) -> Result<Self> {
        let database = Database::create(path).map_err(db)?;
        let txn = database.begin_write().map_err(db)?;
        txn.open_table(RECORDS).map_err(db)?;
        txn.commit().map_err(db)?;
        Ok(Self {
            db: database,
            clock,
        })
    }

    /// Runs `f` in a read transaction.
    fn reading<T>(
        &self,
        f: impl FnOnce(&redb::ReadOnlyTable<&'static str, &'static [u8]>) -> Result<T>,
    ) -> Result<T> {
        let txn = self.db.begin_read().map_err(db)?;
        f(&txn.open_table(RECORDS).map_err(db)?)
    }

    /// Runs `f` in a write transaction, committed only when it succeeds.
    fn writing<T>(&self, f: impl FnOnce(&mut Table<'_>) -> Result<T>) -> Result<T> {
        let txn = self.db.begin_write().map_err(db)?;
        let out = {
            let mut table = txn.open_table(RECORDS).map_err(db)?;
            f(&mut table)?
        };
        txn.commit().map_err(db)?;
        Ok(out)
    }
}

fn conversation_in(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    scope: &Scope,
    id: &ConversationId,
) -> Result<Conversation> {
    read(table, &key_of(scope, "c", &[id.as_str()]))?
        .ok_or_else(|| MemoryError::not_found("conversation", id.as_str()))
}

fn collection_in(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    namespace: &Namespace,
    name: &str,
) -> Result<CollectionSpec> {
    read(table, &namespace_key(namespace, "col", name))?
        .ok_or_else(|| MemoryError::not_found("collection", name))
}

fn working_key(scope: &Scope, key: &WorkingMemoryKey) -> String {
    match key {
        WorkingMemoryKey::Conversation(id) => key_of(scope, "w", &[id.as_str()]),
        WorkingMemoryKey::User => key_of(scope, "w", &[""]),
    }
}

/// A working-memory document's key, after checking that its conversation exists.
fn working_slot(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    scope: &Scope,
    key: &WorkingMemoryKey,
) -> Result<String> {
    if let WorkingMemoryKey::Conversation(id) = key {
        conversation_in(table, scope, id)?;
    }
    Ok(working_key(scope, key))
}

#[async_trait]
impl ConversationStore for RedbStore {
    async fn create_conversation(
        &self,
        scope: &Scope,
        new: NewConversation,
    ) -> Result<Conversation> {
        let conversation = new.into_conversation(scope, self.clock.now());
        self.writing(|table| {
            let key = key_of(scope, "c", &[conversation.id.as_str()]);
            if read::<Conversation>(table, &key)?.is_some() {
                return Err(MemoryError::AlreadyExists {
                    entity: "conversation",
                    id: conversation.id.to_string(),
                });
            }
            write(table, &key, &conversation)?;
            Ok(conversation)
        })
    }

    async fn get_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<Conversation> {
        self.reading(|table| conversation_in(table, scope, id))
    }

    async fn list_conversations(
        &self,
        scope: &Scope,
        query: ConversationQuery,
    ) -> Result<Page<Conversation>> {
        let mut matching: Vec<Conversation> = self
            .reading(|table| scan(table, &prefix(scope, "c", &[])))?
            .into_iter()
            .map(|(_, c)| c)
            .filter(|c| query.matches(c))
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
        self.writing(|table| {
            let mut conversation = conversation_in(table, scope, id)?;
            if let Some(title) = update.title {
                conversation.title = title;
            }
            if let Some(metadata) = update.metadata {
                conversation.metadata = metadata;
            }
            conversation.updated_at = now;
            write(table, &key_of(scope, "c", &[id.as_str()]), &conversation)?;
            Ok(conversation)
        })
    }

    async fn delete_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<bool> {
        self.writing(|table| {
            if !remove(table, &key_of(scope, "c", &[id.as_str()]))? {
                return Ok(false);
            }
            for kind in ["m", "i", "u"] {
                remove_prefix(table, &prefix(scope, kind, &[id.as_str()]))?;
            }
            remove(table, &key_of(scope, "w", &[id.as_str()]))?;
            for (key, record) in scan::<VectorRecord>(table, &prefix(scope, "v", &[]))? {
                if record.conversation_id.as_ref() == Some(id) {
                    remove(table, &key)?;
                }
            }
            Ok(true)
        })
    }

    async fn append(
        &self,
        scope: &Scope,
        id: &ConversationId,
        messages: Vec<Message>,
        options: AppendOptions,
    ) -> Result<AppendReceipt> {
        let now = self.clock.now();
        self.writing(|table| {
            let mut conversation = conversation_in(table, scope, id)?;
            // The stored messages the batch's ids name, for the idempotency check.
            let mut stored: HashMap<MessageId, (u64, Message)> = HashMap::new();
            for message in &messages {
                let seq: Option<u64> = read(
                    table,
                    &key_of(scope, "i", &[id.as_str(), message.id.as_str()]),
                )?;
                if let Some(seq) = seq {
                    let at = key_of(scope, "m", &[id.as_str(), &seq_part(seq)]);
                    if let Some(found) = read::<Message>(table, &at)? {
                        stored.insert(message.id.clone(), (seq, found));
                    }
                }
            }
            let AppendPlan { fresh, mut receipt } =
                plan_append(conversation.last_seq, messages, &options, |message_id| {
                    stored.get(message_id).map(|(seq, m)| (*seq, m))
                })?;
            if fresh.is_empty() {
                return Ok(receipt);
            }
            for StoredMessage { seq, message } in &fresh {
                write(
                    table,
                    &key_of(scope, "m", &[id.as_str(), &seq_part(*seq)]),
                    message,
                )?;
                write(
                    table,
                    &key_of(scope, "i", &[id.as_str(), message.id.as_str()]),
                    seq,
                )?;
            }
            if let Some(max) = options.max_messages {
                let held = scan::<Message>(table, &prefix(scope, "m", &[id.as_str()]))?;
                let excess = (held.len() as u64).saturating_sub(max);
                for (key, message) in held.into_iter().take(excess as usize) {
                    remove(table, &key)?;
                    remove(
                        table,
                        &key_of(scope, "i", &[id.as_str(), message.id.as_str()]),
                    )?;
                    receipt.pruned += 1;
                }
            }
            conversation.last_seq = receipt.last_seq;
            conversation.updated_at = now;
            write(table, &key_of(scope, "c", &[id.as_str()]), &conversation)?;
            Ok(receipt)
        })
    }

    async fn load(
        &self,
        scope: &Scope,
        id: &ConversationId,
        options: LoadOptions,
    ) -> Result<Vec<StoredMessage>> {
        self.reading(|table| {
            conversation_in(table, scope, id)?;
            let lower = options.after_seq.map_or(0, |a| a.saturating_add(1));
            let upper = options.before_seq.unwrap_or(u64::MAX);
            if lower >= upper {
                return Ok(Vec::new());
            }
            let start = key_of(scope, "m", &[id.as_str(), &seq_part(lower)]);
            let end = key_of(scope, "m", &[id.as_str(), &seq_part(upper)]);
            // Newest first, so `last` reads only the tail it keeps.
            let mut window = Vec::new();
            for entry in table.range(start.as_str()..end.as_str()).map_err(db)?.rev() {
                if window.len() >= options.last.unwrap_or(usize::MAX) {
                    break;
                }
                let (key, value) = entry.map_err(db)?;
                let seq = key
                    .value()
                    .rsplit('\0')
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_default();
                let message: Message = decode(value.value())?;
                if options.selects(seq, message.role) {
                    window.push(StoredMessage { seq, message });
                }
            }
            window.reverse();
            Ok(window)
        })
    }

    async fn cursor(&self, scope: &Scope, id: &ConversationId, name: &str) -> Result<Option<u64>> {
        self.reading(|table| {
            conversation_in(table, scope, id)?;
            read(table, &key_of(scope, "u", &[id.as_str(), name]))
        })
    }

    async fn advance_cursor(
        &self,
        scope: &Scope,
        id: &ConversationId,
        name: &str,
        seq: u64,
    ) -> Result<u64> {
        self.writing(|table| {
            conversation_in(table, scope, id)?;
            let key = key_of(scope, "u", &[id.as_str(), name]);
            let value = read::<u64>(table, &key)?.unwrap_or(0).max(seq);
            write(table, &key, &value)?;
            Ok(value)
        })
    }
}

#[async_trait]
impl WorkingMemoryStore for RedbStore {
    async fn get_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
    ) -> Result<Option<WorkingMemory>> {
        self.reading(|table| read(table, &working_slot(table, scope, key)?))
    }

    async fn set_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
        update: WorkingMemoryUpdate,
    ) -> Result<WorkingMemory> {
        let now = self.clock.now();
        self.writing(|table| {
            let slot = working_slot(table, scope, key)?;
            let current = read::<WorkingMemory>(table, &slot)?.map_or(0, |w| w.revision);
            let stored = update.apply(current, now)?;
            write(table, &slot, &stored)?;
            Ok(stored)
        })
    }

    async fn clear_working_memory(&self, scope: &Scope, key: &WorkingMemoryKey) -> Result<bool> {
        self.writing(|table| {
            let slot = working_slot(table, scope, key)?;
            remove(table, &slot)
        })
    }
}

/// The scope's facts that have not expired at `now`.
fn live_facts(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    scope: &Scope,
    now: Timestamp,
) -> Result<Vec<Fact>> {
    Ok(scan::<Fact>(table, &prefix(scope, "f", &[]))?
        .into_iter()
        .map(|(_, fact)| fact)
        .filter(|fact| !fact.is_expired(now))
        .collect())
}

#[async_trait]
impl FactStore for RedbStore {
    async fn remember(
        &self,
        scope: &Scope,
        new: NewFact,
        options: RememberOptions,
    ) -> Result<RememberOutcome> {
        let now = self.clock.now();
        self.writing(|table| {
            // Expired facts are never returned: purge the scope's before deciding anything.
            let mut facts = Vec::new();
            for (key, fact) in scan::<Fact>(table, &prefix(scope, "f", &[]))? {
                if fact.is_expired(now) {
                    remove(table, &key)?;
                } else {
                    facts.push(fact);
                }
            }
            let RememberPlan {
                outcome,
                superseded,
            } = plan_remember(&facts, new, &options, scope, now);
            if outcome.status == RememberStatus::Duplicate {
                return Ok(outcome);
            }
            let fact_key = |id: &FactId| key_of(scope, "f", &[id.as_str()]);
            if let Some(previous) = &superseded {
                write(table, &fact_key(&previous.id), previous)?;
            }
            write(table, &fact_key(&outcome.fact.id), &outcome.fact)?;
            for id in &outcome.evicted {
                remove(table, &fact_key(id))?;
            }
            Ok(outcome)
        })
    }

    async fn recall(&self, scope: &Scope, query: RecallQuery) -> Result<Vec<ScoredFact>> {
        let facts = self.reading(|table| live_facts(table, scope, self.clock.now()))?;
        Ok(rank_facts(
            &query,
            facts.into_iter().filter(Fact::is_current),
        ))
    }

    async fn get_fact(&self, scope: &Scope, id: &FactId) -> Result<Fact> {
        let now = self.clock.now();
        self.reading(|table| read::<Fact>(table, &key_of(scope, "f", &[id.as_str()])))?
            .filter(|fact| !fact.is_expired(now))
            .ok_or_else(|| MemoryError::not_found("fact", id.as_str()))
    }

    async fn list_facts(&self, scope: &Scope, query: FactQuery) -> Result<Page<Fact>> {
        let mut matching: Vec<Fact> = self
            .reading(|table| live_facts(table, scope, self.clock.now()))?
            .into_iter()
            .filter(|fact| query.matches(fact))
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
        let versions: Vec<Fact> = self
            .reading(|table| live_facts(table, scope, self.clock.now()))?
            .into_iter()
            .filter(|fact| fact.key.as_deref() == Some(key))
            .collect();
        Ok(order_history(versions))
    }

    async fn forget(&self, scope: &Scope, id: &FactId) -> Result<bool> {
        let now = self.clock.now();
        self.writing(|table| {
            // An expired fact is removed too, but was already gone to readers: not reported.
            let key = key_of(scope, "f", &[id.as_str()]);
            let fact = read::<Fact>(table, &key)?;
            remove(table, &key)?;
            Ok(fact.is_some_and(|f| !f.is_expired(now)))
        })
    }

    async fn set_expiry(
        &self,
        scope: &Scope,
        ids: &[FactId],
        expires_at: Option<Timestamp>,
    ) -> Result<Vec<FactId>> {
        let now = self.clock.now();
        // One write transaction: all the ids or none.
        self.writing(|table| {
            let mut changed = Vec::new();
            for id in ids {
                let key = key_of(scope, "f", &[id.as_str()]);
                if let Some(mut fact) = read::<Fact>(table, &key)? {
                    if fact.apply_expiry(expires_at, now) {
                        write(table, &key, &fact)?;
                        changed.push(id.clone());
                    }
                }
            }
            Ok(changed)
        })
    }
}

#[async_trait]
impl VectorStore for RedbStore {
    async fn ensure_collection(
        &self,
        namespace: &Namespace,
        spec: CollectionSpec,
    ) -> Result<CollectionSpec> {
        self.writing(|table| {
            let key = namespace_key(namespace, "col", &spec.name);
            if let Some(existing) = read::<CollectionSpec>(table, &key)? {
                existing.check_same(&spec)?;
                return Ok(existing);
            }
            write(table, &key, &spec)?;
            Ok(spec)
        })
    }

    async fn list_collections(&self, namespace: &Namespace) -> Result<Vec<CollectionSpec>> {
        let start = namespace_key(namespace, "col", "");
        Ok(self
            .reading(|table| scan(table, &start))?
            .into_iter()
            .map(|(_, spec)| spec)
            .collect())
    }

    async fn drop_collection(&self, namespace: &Namespace, name: &str) -> Result<bool> {
        self.writing(|table| {
            if !remove(table, &namespace_key(namespace, "col", name))? {
                return Ok(false);
            }
            for scope in owners(table, namespace)? {
                remove_prefix(table, &prefix(&scope, "v", &[name]))?;
            }
            Ok(true)
        })
    }

    async fn upsert_vectors(
        &self,
        scope: &Scope,
        collection: &str,
        records: Vec<VectorRecord>,
    ) -> Result<usize> {
        self.writing(|table| {
            let spec = collection_in(table, scope.namespace(), collection)?;
            for record in &records {
                spec.check_vector(&record.vector)?;
            }
            for record in &records {
                write(
                    table,
                    &key_of(scope, "v", &[collection, record.id.as_str()]),
                    record,
                )?;
            }
            Ok(records.len())
        })
    }

    async fn get_vector(
        &self,
        scope: &Scope,
        collection: &str,
        id: &VectorId,
    ) -> Result<VectorRecord> {
        self.reading(|table| {
            collection_in(table, scope.namespace(), collection)?;
            read(table, &key_of(scope, "v", &[collection, id.as_str()]))?
                .ok_or_else(|| MemoryError::not_found("vector", id.as_str()))
        })
    }

    async fn delete_vectors(
        &self,
        scope: &Scope,
        collection: &str,
        selector: VectorSelector,
    ) -> Result<usize> {
        self.writing(|table| {
            collection_in(table, scope.namespace(), collection)?;
            let mut deleted = 0;
            match selector {
                VectorSelector::Ids(ids) => {
                    for id in ids {
                        deleted += usize::from(remove(
                            table,
                            &key_of(scope, "v", &[collection, id.as_str()]),
                        )?);
                    }
                }
                VectorSelector::Filter(filter) => {
                    for (key, record) in
                        scan::<VectorRecord>(table, &prefix(scope, "v", &[collection]))?
                    {
                        if filter.matches(&record.metadata) {
                            remove(table, &key)?;
                            deleted += 1;
                        }
                    }
                }
            }
            Ok(deleted)
        })
    }

    async fn search(
        &self,
        scope: &Scope,
        collection: &str,
        query: VectorQuery,
    ) -> Result<Vec<VectorHit>> {
        let (spec, records) = self.reading(|table| {
            let spec = collection_in(table, scope.namespace(), collection)?;
            let records = scan::<VectorRecord>(table, &prefix(scope, "v", &[collection]))?;
            Ok((spec, records))
        })?;
        spec.check_vector(&query.vector)?;
        let mut hits: Vec<VectorHit> = records
            .into_iter()
            .map(|(_, record)| record)
            .filter(|r| query.filter.as_ref().is_none_or(|f| f.matches(&r.metadata)))
            .map(|r| {
                let score = spec.metric.score(&query.vector, &r.vector);
                (r, score)
            })
            .filter(|(_, score)| query.min_score.is_none_or(|min| *score >= min))
            .map(|(mut record, score)| {
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
impl CheckpointStore for RedbStore {
    async fn put_checkpoint(&self, scope: &Scope, new: NewCheckpoint) -> Result<Checkpoint> {
        let now = self.clock.now();
        self.writing(|table| {
            let key = key_of(scope, "k", &[new.id.as_str()]);
            if read::<Checkpoint>(table, &key)?.is_some() {
                return Err(MemoryError::AlreadyExists {
                    entity: "checkpoint",
                    id: new.id.to_string(),
                });
            }
            let checkpoint = new.into_checkpoint(now);
            write(table, &key, &checkpoint)?;
            Ok(checkpoint)
        })
    }

    async fn get_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<Checkpoint> {
        self.reading(|table| read(table, &key_of(scope, "k", &[id.as_str()])))?
            .ok_or_else(|| MemoryError::not_found("checkpoint", id.as_str()))
    }

    async fn update_checkpoint(
        &self,
        scope: &Scope,
        id: &CheckpointId,
        update: CheckpointUpdate,
    ) -> Result<Checkpoint> {
        let now = self.clock.now();
        self.writing(|table| {
            let key = key_of(scope, "k", &[id.as_str()]);
            let mut checkpoint: Checkpoint = read(table, &key)?
                .ok_or_else(|| MemoryError::not_found("checkpoint", id.as_str()))?;
            update.apply_to(&mut checkpoint, now)?;
            write(table, &key, &checkpoint)?;
            Ok(checkpoint)
        })
    }

    async fn list_suspended(
        &self,
        scope: &Scope,
        workflow: Option<&str>,
    ) -> Result<Vec<Checkpoint>> {
        let mut suspended: Vec<Checkpoint> = self
            .reading(|table| scan(table, &prefix(scope, "k", &[])))?
            .into_iter()
            .map(|(_, c): (String, Checkpoint)| c)
            .filter(|c| {
                c.status == CheckpointStatus::Suspended && workflow.is_none_or(|w| c.workflow == w)
            })
            .collect();
        suspended.sort_by(|a, b| (a.updated_at, &a.id).cmp(&(b.updated_at, &b.id)));
        Ok(suspended)
    }

    async fn delete_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<bool> {
        self.writing(|table| remove(table, &key_of(scope, "k", &[id.as_str()])))
    }
}

#[async_trait]
impl CacheStore for RedbStore {
    async fn cache_get(&self, namespace: &Namespace, key: &str) -> Result<Option<Vec<u8>>> {
        let now = self.clock.now();
        let entry: Option<CacheValue> =
            self.reading(|table| read(table, &namespace_key(namespace, "cache", key)))?;
        Ok(entry
            .filter(|e| e.expires_at.is_none_or(|at| at > now))
            .map(|e| e.value))
    }

    async fn cache_set(
        &self,
        namespace: &Namespace,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        let expires_at = ttl.map(|ttl| self.clock.now().saturating_add(ttl));
        self.writing(|table| {
            write(
                table,
                &namespace_key(namespace, "cache", key),
                &CacheValue { value, expires_at },
            )
        })
    }

    async fn cache_delete(&self, namespace: &Namespace, key: &str) -> Result<bool> {
        let now = self.clock.now();
        self.writing(|table| {
            let key = namespace_key(namespace, "cache", key);
            let entry: Option<CacheValue> = read(table, &key)?;
            remove(table, &key)?;
            Ok(entry.is_some_and(|e| e.expires_at.is_none_or(|at| at > now)))
        })
    }
}

/// The scopes of a namespace with any key, live or not.
fn owners(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    namespace: &Namespace,
) -> Result<BTreeSet<Scope>> {
    let mut scopes = BTreeSet::new();
    for key in keys_under(table, &format!("s\0{namespace}\0"))? {
        let subject = key.split('\0').nth(2).unwrap_or_default();
        let subject = (!subject.is_empty())
            .then(|| Subject::new(subject))
            .transpose()?;
        scopes.insert(Scope::from_parts(namespace.clone(), subject));
    }
    Ok(scopes)
}

/// A scope's live records, as export lines (not yet in canonical order).
fn scope_records(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    scope: &Scope,
    now: Timestamp,
) -> Result<Vec<Record>> {
    let base = owner(scope);
    let mut records = Vec::new();
    each_under(table, &base, |key, value| {
        let parts: Vec<&str> = key[base.len()..].split('\0').collect();
        let id = |i: usize| parts.get(i).copied().unwrap_or_default();
        let conversation = || ConversationId::new(id(1));
        let record = match id(0) {
            "c" => Record::Conversation {
                conversation: decode(value)?,
            },
            "m" => Record::Message {
                scope: scope.clone(),
                conversation_id: conversation()?,
                message: StoredMessage {
                    seq: id(2).parse().unwrap_or_default(),
                    message: decode(value)?,
                },
            },
            "u" => Record::Cursor {
                scope: scope.clone(),
                conversation_id: conversation()?,
                name: id(2).to_owned(),
                value: decode(value)?,
            },
            "w" => Record::WorkingMemory {
                scope: scope.clone(),
                key: if id(1).is_empty() {
                    WorkingMemoryKey::User
                } else {
                    WorkingMemoryKey::Conversation(conversation()?)
                },
                memory: decode(value)?,
            },
            "f" => {
                let fact: Fact = decode(value)?;
                if fact.is_expired(now) {
                    return Ok(());
                }
                Record::Fact { fact }
            }
            "v" => Record::Vector {
                scope: scope.clone(),
                collection: id(1).to_owned(),
                record: decode(value)?,
            },
            "k" => Record::Checkpoint {
                scope: scope.clone(),
                checkpoint: decode(value)?,
            },
            _ => return Ok(()), // "i": the message-id index, rebuilt from messages on restore
        };
        records.push(record);
        Ok(())
    })?;
    Ok(records)
}

/// The scopes of a namespace that own a live record, sorted (the shared scope first).
fn held_scopes(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    namespace: &Namespace,
    now: Timestamp,
) -> Result<Vec<Scope>> {
    let mut held = Vec::new();
    for scope in owners(table, namespace)? {
        if !scope_records(table, &scope, now)?.is_empty() {
            held.push(scope);
        }
    }
    Ok(held)
}

#[async_trait]
impl TransferStore for RedbStore {
    async fn namespaces(&self) -> Result<Vec<Namespace>> {
        let now = self.clock.now();
        self.reading(|table| {
            let mut candidates = BTreeSet::new();
            for key in keys_under(table, "")? {
                if let Some(name) = key.split('\0').nth(1) {
                    candidates.insert(Namespace::new(name)?);
                }
            }
            let mut held = Vec::new();
            for namespace in candidates {
                // A collection, or a cache entry that has not expired.
                let mut own = false;
                each_under(table, &format!("n\0{namespace}\0"), |key, value| {
                    own |= key.split('\0').nth(2) != Some("cache")
                        || decode::<CacheValue>(value)?
                            .expires_at
                            .is_none_or(|at| at > now);
                    Ok(())
                })?;
                if own || !held_scopes(table, &namespace, now)?.is_empty() {
                    held.push(namespace);
                }
            }
            Ok(held)
        })
    }

    async fn scopes(&self, namespace: &Namespace) -> Result<Vec<Scope>> {
        let now = self.clock.now();
        self.reading(|table| held_scopes(table, namespace, now))
    }

    async fn export_namespace(&self, namespace: &Namespace) -> Result<Vec<Record>> {
        let now = self.clock.now();
        let mut records = Vec::new();
        for spec in self.list_collections(namespace).await? {
            records.push(Record::Collection {
                namespace: namespace.clone(),
                spec,
            });
        }
        let prefix = namespace_key(namespace, "cache", "");
        for (key, entry) in self.reading(|table| scan::<CacheValue>(table, &prefix))? {
            if entry.expires_at.is_none_or(|at| at > now) {
                records.push(Record::CacheEntry {
                    namespace: namespace.clone(),
                    key: key[prefix.len()..].to_owned(),
                    value: entry.value,
                    expires_at: entry.expires_at,
                });
            }
        }
        sort_canonical(&mut records);
        Ok(records)
    }

    async fn export_scope(&self, scope: &Scope) -> Result<Vec<Record>> {
        let mut records = self.reading(|table| scope_records(table, scope, self.clock.now()))?;
        sort_canonical(&mut records);
        Ok(records)
    }

    async fn restore(&self, records: Vec<Record>) -> Result<u64> {
        let mut records = records;
        sort_canonical(&mut records);
        // One write transaction: an error drops it uncommitted, so nothing is written.
        self.writing(|table| {
            for record in &records {
                restore_one(table, record)?;
            }
            Ok(records.len() as u64)
        })
    }
}

/// Writes one record verbatim, after the checks that need the store (parents first: records
/// come in canonical order, so a parent in the batch is already written).
fn restore_one(table: &mut Table<'_>, record: &Record) -> Result<()> {
    match record {
        Record::Collection { namespace, spec } => {
            let key = namespace_key(namespace, "col", &spec.name);
            match read::<CollectionSpec>(table, &key)? {
                Some(existing) => existing.check_same(spec)?,
                None => write(table, &key, spec)?,
            }
        }
        Record::Conversation { conversation } => write(
            table,
            &key_of(&conversation.scope, "c", &[conversation.id.as_str()]),
            conversation,
        )?,
        Record::Message {
            scope,
            conversation_id: id,
            message: StoredMessage { seq, message },
        } => {
            conversation_in(table, scope, id)?;
            // The same id at another seq, or another message at this seq, is replaced.
            let index = key_of(scope, "i", &[id.as_str(), message.id.as_str()]);
            if let Some(old) = read::<u64>(table, &index)? {
                remove(table, &key_of(scope, "m", &[id.as_str(), &seq_part(old)]))?;
            }
            let at = key_of(scope, "m", &[id.as_str(), &seq_part(*seq)]);
            if let Some(old) = read::<Message>(table, &at)? {
                remove(table, &key_of(scope, "i", &[id.as_str(), old.id.as_str()]))?;
            }
            write(table, &at, message)?;
            write(table, &index, seq)?;
        }
        Record::Cursor {
            scope,
            conversation_id: id,
            name,
            value,
        } => {
            conversation_in(table, scope, id)?;
            write(table, &key_of(scope, "u", &[id.as_str(), name]), value)?;
        }
        Record::WorkingMemory { scope, key, memory } => {
            let slot = working_slot(table, scope, key)?;
            write(table, &slot, memory)?;
        }
        Record::Fact { fact } => {
            write(table, &key_of(&fact.scope, "f", &[fact.id.as_str()]), fact)?;
        }
        Record::Vector {
            scope,
            collection,
            record,
        } => {
            collection_in(table, scope.namespace(), collection)?.check_vector(&record.vector)?;
            write(
                table,
                &key_of(scope, "v", &[collection, record.id.as_str()]),
                record,
            )?;
        }
        Record::Checkpoint { scope, checkpoint } => write(
            table,
            &key_of(scope, "k", &[checkpoint.id.as_str()]),
            checkpoint,
        )?,
        Record::CacheEntry {
            namespace,
            key,
            value,
            expires_at,
        } => write(
            table,
            &namespace_key(namespace, "cache", key),
            &CacheValue {
                value: value.clone(),
                expires_at: *expires_at,
            },
        )?,
    }
    Ok(())
}

#[async_trait]
impl MemoryBackend for RedbStore {
    fn backend_name(&self) -> &'static str {
        NAME
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn capabilities(&self) -> Capabilities {
        // redb commits are durable (fsync) by default; search is an exact scan.
        Capabilities::default()
            .with_vector_search(VectorSearch::Exact)
            .with_durability(Durability::Durable)
    }

    async fn forget_all(&self, scope: &Scope) -> Result<DeletionReceipt> {
        let now = self.clock.now();
        self.writing(|table| {
            let mut receipt = DeletionReceipt::default();
            let mut index_entries = 0;
            let base = owner(scope);
            for key in keys_under(table, &base)? {
                let kind = key[base.len()..].split('\0').next();
                // An expired fact is removed too but not counted, as `forget` reports it.
                let counted = kind != Some("f")
                    || read::<Fact>(table, &key)?.is_some_and(|f| !f.is_expired(now));
                let counter = match kind {
                    Some("c") => &mut receipt.conversations,
                    Some("m") => &mut receipt.messages,
                    Some("f") => &mut receipt.facts,
                    Some("v") => &mut receipt.vectors,
                    Some("w") => &mut receipt.working_memory,
                    Some("k") => &mut receipt.checkpoints,
                    Some("u") => &mut receipt.cursors,
                    _ => &mut index_entries,
                };
                *counter += u64::from(counted);
                remove(table, &key)?;
            }
            Ok(receipt)
        })
    }
}

/// `redb://PATH`: how `mnemix::open` finds this adapter once a program registers it.
pub const DESCRIPTOR: Descriptor = Descriptor::new("redb", &["redb"], "redb://FILE", open_request);

#[allow(clippy::needless_pass_by_value)] // the descriptor's signature: a backend that awaits moves it
fn open_request(request: OpenRequest) -> BoxOpen {
    let opened = request
        .url()
        .strip_prefix("redb://")
        .filter(|path| !path.is_empty())
        .ok_or_else(|| MemoryError::invalid(format!("{:?} is not redb://PATH", request.url())))
        .and_then(|path| {
            if !request.create_if_missing() && !Path::new(path).exists() {
                return Err(MemoryError::not_found("redb database", path));
            }
            RedbStore::open_with_clock(path, Arc::clone(request.clock()))
        })
        .map(|store| Arc::new(store) as Arc<dyn MemoryBackend>);
    Box::pin(std::future::ready(opened))
}
