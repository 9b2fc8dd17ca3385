//! [`MemoryBackend`]: every contract in one object, plus what spans them.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::cache::CacheStore;
use crate::capabilities::Capabilities;
use crate::checkpoint::CheckpointStore;
use crate::conversation::ConversationStore;
use crate::error::Result;
use crate::fact::FactStore;
use crate::scope::Scope;
use crate::time::Timestamp;
use crate::transfer::TransferStore;
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
}

impl DeletionReceipt {
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
}
