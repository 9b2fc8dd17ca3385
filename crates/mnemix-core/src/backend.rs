//! [`MemoryBackend`]: every contract in one object, plus what spans them.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::cache::CacheStore;
use crate::capabilities::Capabilities;
use crate::checkpoint::CheckpointStore;
use crate::conversation::ConversationStore;
use crate::error::Result;
use crate::fact::FactStore;
use crate::records::TransferStore;
use crate::scope::{Namespace, Scope};
use crate::time::Timestamp;
use crate::vector::VectorStore;
use crate::working::WorkingMemoryStore;

/// What [`MemoryBackend::forget_all`] removed, by kind of row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletionReceipt {
    /// Conversations.
    pub conversations: u64,
    /// Messages.
    pub messages: u64,
    /// Facts, superseded history included. Expired facts are removed too but not counted:
    /// like [`forget`](crate::FactStore::forget), the receipt reports what readers could see
    /// (when a backend drops expired rows differs, so counting them would too).
    pub facts: u64,
    /// Vector records, in every collection.
    pub vectors: u64,
    /// Working-memory documents (conversation and user).
    pub working_memory: u64,
    /// Checkpoints.
    pub checkpoints: u64,
    /// Per-conversation cursors.
    pub cursors: u64,
    /// Changes of the namespace's feed that named the subject, scrubbed of it (kept in the
    /// feed, in order, without the subject or its records' ids; not in [`total`](Self::total):
    /// nothing was removed). Zero where the backend keeps no feed.
    #[serde(default)]
    pub changes: u64,
}

impl DeletionReceipt {
    /// The receipt erasing `records` (a scope's export) would give: each record counted by its
    /// kind; namespace-level records (collections, cache entries) are not the subject's.
    pub fn of_records(records: &[crate::transfer::Record]) -> Self {
        use crate::transfer::Record;
        let mut receipt = Self::default();
        for record in records {
            let count = match record {
                Record::Conversation { .. } => &mut receipt.conversations,
                Record::Message { .. } => &mut receipt.messages,
                Record::Cursor { .. } => &mut receipt.cursors,
                Record::WorkingMemory { .. } => &mut receipt.working_memory,
                Record::Fact { .. } => &mut receipt.facts,
                Record::Vector { .. } => &mut receipt.vectors,
                Record::Checkpoint { .. } => &mut receipt.checkpoints,
                Record::Collection { .. } | Record::CacheEntry { .. } => continue,
            };
            *count += 1;
        }
        receipt
    }

    /// Each count with its name (`"messages"`, …), in the order of the fields.
    pub fn counts(&self) -> [(&'static str, u64); 7] {
        [
            ("conversations", self.conversations),
            ("messages", self.messages),
            ("facts", self.facts),
            ("vectors", self.vectors),
            ("working_memory", self.working_memory),
            ("checkpoints", self.checkpoints),
            ("cursors", self.cursors),
        ]
    }

    /// Every row removed.
    pub fn total(&self) -> u64 {
        self.conversations
            + self.messages
            + self.facts
            + self.vectors
            + self.working_memory
            + self.checkpoints
            + self.cursors
    }
}

/// What [`MemoryBackend::forget_namespace`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceReceipt {
    /// Scopes erased, the shared scope included.
    pub scopes: u64,
    /// What their erasure removed, summed over the scopes.
    pub records: DeletionReceipt,
    /// Collections dropped.
    pub collections: u64,
    /// Live cache entries removed.
    pub cache_entries: u64,
}

impl NamespaceReceipt {
    /// Every record removed: the scopes' rows, the collections and the cache entries.
    pub fn total(&self) -> u64 {
        self.records.total() + self.collections + self.cache_entries
    }
}

impl std::ops::AddAssign for NamespaceReceipt {
    fn add_assign(&mut self, other: Self) {
        self.scopes += other.scopes;
        self.records += other.records;
        self.collections += other.collections;
        self.cache_entries += other.cache_entries;
    }
}

impl std::ops::AddAssign for DeletionReceipt {
    fn add_assign(&mut self, other: Self) {
        self.conversations += other.conversations;
        self.messages += other.messages;
        self.facts += other.facts;
        self.vectors += other.vectors;
        self.working_memory += other.working_memory;
        self.checkpoints += other.checkpoints;
        self.cursors += other.cursors;
        self.changes += other.changes;
    }
}

/// A complete backend: all six contracts, export/restore, its capabilities and its name.
///
/// Use it as `Arc<dyn MemoryBackend>`.
#[async_trait]
pub trait MemoryBackend:
    ConversationStore
    + WorkingMemoryStore
    + FactStore
    + VectorStore
    + CheckpointStore
    + CacheStore
    + TransferStore
{
    /// A short stable name (`"memory"`, `"sqlite"`, `"postgres"`, …).
    fn backend_name(&self) -> &'static str;

    /// What this backend can do.
    fn capabilities(&self) -> Capabilities;

    /// Erases everything a subject owns (GDPR): conversations, messages, facts with history,
    /// vectors in every collection, working memory, checkpoints and cursors.
    ///
    /// # Behavior
    /// - Atomic per backend transaction where the storage has them; returns a receipt counting
    ///   every row removed; afterwards no read of the scope finds anything.
    /// - Other subjects and the shared scope are untouched; the cache (keyed by namespace) is not
    ///   subject data and stays. (Behind the front layer, the grants from and to the subject
    ///   go too: see [`registry`](crate::registry).)
    /// - The shared scope (no subject) is `InvalidInput`.
    async fn forget_all(&self, scope: &Scope) -> Result<DeletionReceipt>;

    /// An erasure's dry run: what [`forget_all`](Self::forget_all) would erase now, counted as
    /// its receipt counts, erasing nothing.
    ///
    /// # Behavior
    /// - Equal to the receipt a `forget_all` of the same state returns (expired facts are not
    ///   counted; superseded history is).
    /// - The shared scope (no subject) is `InvalidInput`, as for `forget_all`.
    /// - The default counts the scope's export ([`DeletionReceipt::of_records`]); a backend may
    ///   count in its storage instead, without reading the records.
    async fn count_owned(&self, scope: &Scope) -> Result<DeletionReceipt> {
        scope.require_subject("count_owned")?;
        Ok(DeletionReceipt::of_records(
            &self.export_scope(scope).await?,
        ))
    }

    /// Erases a whole namespace (a tenant leaving): every scope's records as
    /// [`forget_all`](Self::forget_all) erases them, the shared scope's included, then its
    /// collections and its cache entries.
    ///
    /// # Behavior
    /// - Afterwards [`namespaces`](crate::TransferStore::namespaces) does not list it and no
    ///   read of it finds anything; other namespaces are untouched. Erasing an empty or unknown
    ///   namespace removes nothing.
    /// - Scope by scope, not atomic: a write racing the erasure may survive it (erase again).
    /// - The default, in terms of the other methods, is what every backend does; one may do
    ///   the same faster.
    async fn forget_namespace(&self, namespace: &Namespace) -> Result<NamespaceReceipt> {
        forget_namespace_records(self, namespace).await
    }

    /// For operators: the version of the storage schema the store has migrated to, or `None`
    /// for storage without a versioned schema (the default).
    ///
    /// Stores apply their migrations when they open, so after a successful open this is the
    /// newest version the build knows.
    async fn schema_version(&self) -> Result<Option<u32>> {
        Ok(None)
    }

    /// For operators: how many rows (or records) each kind of storage holds, by table or key
    /// kind, in a stable order; empty when the storage cannot tell cheaply (the default).
    async fn table_counts(&self) -> Result<Vec<(String, u64)>> {
        Ok(Vec::new())
    }

    /// The store's "now": the instant its clock gives, which decides expiry (of facts and
    /// cache entries) and stamps what it writes. A TTL is turned into an expiry with it.
    /// Adapters with an injectable clock return that clock's instant; the default is the wall
    /// clock.
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    /// Whether this object is the front layer ([`Checked`](crate::front::Checked)) already, so
    /// that wrapping it again is skipped. Adapters keep the default.
    fn is_checked(&self) -> bool {
        false
    }

    /// The backend behind the front layer, when this object is the front layer, so that a
    /// layer with another retry policy replaces it instead of wrapping it (which would retry
    /// every try of the outer layer), and so that the registry can remove its own records.
    /// What it returns accepts what the front layer refuses, so only this crate can call it:
    /// it takes a [`FrontLayerOnly`](crate::adapter::FrontLayerOnly), which nothing outside
    /// the crate can make. Adapters keep the default.
    fn behind_front_layer(
        &self,
        _only: crate::adapter::FrontLayerOnly,
    ) -> Option<Arc<dyn MemoryBackend>> {
        None
    }

    /// When this object is the front layer: the same layer over the same backend, writing as
    /// `writer` (what each fact it stores records as its
    /// [`provenance`](crate::Fact::provenance)). [`Store::acting_as`](crate::Store::acting_as)
    /// is the way a program calls it. Adapters keep the default (`None`).
    fn acting_as(&self, _writer: crate::Provenance) -> Option<Arc<dyn MemoryBackend>> {
        None
    }

    /// When this object is the front layer: who it writes as. Adapters keep the default.
    fn writer(&self) -> Option<crate::Provenance> {
        None
    }

    /// Up to `limit` changes of `namespace`'s feed after `after`, oldest first (see
    /// [`changes`](crate::changes)).
    ///
    /// # Behavior
    /// - Every write that changed something recorded one change in its own transaction,
    ///   naming the principal it was made by ([`changes::writer`](crate::changes::writer)); a
    ///   write that changed nothing recorded none.
    /// - Resuming after the cursor of the last change read gives every later change once:
    ///   none that commits later is ever placed before a cursor already handed out.
    /// - `after` before what a [`trim_changes`](Self::trim_changes) kept is a
    ///   [`MemoryError::Conflict`](crate::MemoryError::Conflict);
    ///   [`ChangeCursor::START`](crate::ChangeCursor::START) reads from the oldest kept.
    /// - `limit` outside 1..=[`MAX_CHANGES_PER_READ`](crate::changes::MAX_CHANGES_PER_READ) is
    ///   `InvalidInput`.
    /// - The default is `Unsupported`: a backend that records the feed says so in its
    ///   [`Capabilities::change_feed`](crate::Capabilities::change_feed).
    async fn changes(
        &self,
        _namespace: &Namespace,
        _after: crate::ChangeCursor,
        _limit: usize,
    ) -> Result<Vec<crate::Change>> {
        Err(crate::MemoryError::Unsupported {
            operation: "changes",
            backend: self.backend_name(),
        })
    }

    /// Removes the changes of `namespace` that `retention` no longer keeps; how many.
    ///
    /// # Behavior
    /// - Removes those committed before `now - max_age`, and all but the newest
    ///   `max_entries`; reading after a cursor from before the trim is then a conflict.
    /// - The default is `Unsupported`, as for [`changes`](Self::changes).
    async fn trim_changes(
        &self,
        _namespace: &Namespace,
        _retention: crate::Retention,
    ) -> Result<u64> {
        Err(crate::MemoryError::Unsupported {
            operation: "trim_changes",
            backend: self.backend_name(),
        })
    }
}

/// What the default [`MemoryBackend::forget_namespace`] does, for a backend that overrides it
/// to remove bookkeeping of its own afterwards: every scope's records as `forget_all` erases
/// them (the shared scope's included), then the namespace's collections and cache entries.
pub async fn forget_namespace_records<B: MemoryBackend + ?Sized>(
    backend: &B,
    namespace: &Namespace,
) -> Result<NamespaceReceipt> {
    let mut receipt = NamespaceReceipt::default();
    for scope in backend.scopes(namespace).await? {
        receipt.records += backend.forget_all(&scope).await?;
        receipt.scopes += 1;
    }
    if backend.capabilities().has_vectors() {
        for spec in backend.list_collections(namespace).await? {
            receipt.collections += u64::from(backend.drop_collection(namespace, &spec.name).await?);
        }
    }
    for record in backend.export_namespace(namespace).await? {
        if let crate::transfer::Record::CacheEntry { key, .. } = record {
            receipt.cache_entries += u64::from(backend.cache_delete(namespace, &key).await?);
        }
    }
    Ok(receipt)
}
