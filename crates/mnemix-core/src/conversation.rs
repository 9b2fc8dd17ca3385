//! Conversation threads: the [`ConversationStore`] contract and its types.

use std::collections::HashMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};
use crate::message::{Message, Metadata, Role, StoredMessage};
use crate::scope::{validate_identifier, ConversationId, MessageId, Scope};
use crate::time::Timestamp;

/// A conversation thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    /// Its id, unique within the scope.
    pub id: ConversationId,
    /// Its owner.
    pub scope: Scope,
    /// Per-agent thread key (the seed's `conversational()` segregation key).
    pub agent: Option<String>,
    /// A title.
    pub title: Option<String>,
    /// Free-form metadata.
    pub metadata: Metadata,
    /// An application resource this thread is about (indexed for listing).
    pub resource_slug: Option<String>,
    /// An application record this thread is about (indexed for listing).
    pub record_id: Option<String>,
    /// When it was created (by the store's clock).
    pub created_at: Timestamp,
    /// When it or its messages last changed.
    pub updated_at: Timestamp,
    /// The seq of the last appended message, 0 when empty.
    pub last_seq: u64,
}

/// What to create with [`ConversationStore::create_conversation`]: `default()` and the `with_`
/// methods build one (it may gain fields).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NewConversation {
    /// The id to use; a UUIDv7 is made when `None`.
    pub id: Option<ConversationId>,
    /// Per-agent thread key.
    pub agent: Option<String>,
    /// A title.
    pub title: Option<String>,
    /// Free-form metadata.
    pub metadata: Metadata,
    /// An application resource this thread is about.
    pub resource_slug: Option<String>,
    /// An application record this thread is about.
    pub record_id: Option<String>,
}

impl NewConversation {
    /// The same with this id (or a UUIDv7 made on create).
    #[must_use]
    pub fn with_id(mut self, id: impl Into<Option<ConversationId>>) -> Self {
        self.id = id.into();
        self
    }

    /// The same with a per-agent thread key.
    #[must_use]
    pub fn with_agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = Some(agent.into());
        self
    }

    /// The same with a title.
    #[must_use]
    pub fn with_title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// The same with this metadata.
    #[must_use]
    pub fn with_metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = metadata;
        self
    }

    /// The same about an application resource.
    #[must_use]
    pub fn with_resource_slug(mut self, slug: impl Into<String>) -> Self {
        self.resource_slug = Some(slug.into());
        self
    }

    /// The same about an application record.
    #[must_use]
    pub fn with_record_id(mut self, record_id: impl Into<String>) -> Self {
        self.record_id = Some(record_id.into());
        self
    }

    /// The empty conversation this makes in `scope` (a UUIDv7 id when none was given), created
    /// and updated `now`.
    pub fn into_conversation(self, scope: &Scope, now: Timestamp) -> Conversation {
        Conversation {
            id: self.id.unwrap_or_else(ConversationId::generate),
            scope: scope.clone(),
            agent: self.agent,
            title: self.title,
            metadata: self.metadata,
            resource_slug: self.resource_slug,
            record_id: self.record_id,
            created_at: now,
            updated_at: now,
            last_seq: 0,
        }
    }

    /// Checks the identifier-like fields (agent, resource slug, record id) and the metadata's
    /// depth.
    pub fn validate(&self) -> Result<()> {
        crate::message::check_metadata_depth("conversation metadata", &self.metadata)?;
        for (what, value) in [
            ("agent", &self.agent),
            ("resource slug", &self.resource_slug),
            ("record id", &self.record_id),
        ] {
            if let Some(value) = value {
                validate_identifier(what, value)?;
            }
        }
        Ok(())
    }
}

/// Changes applied by [`ConversationStore::update_conversation`]; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConversationUpdate {
    /// New title (`Some(None)` clears it).
    pub title: Option<Option<String>>,
    /// New metadata, replacing the old object.
    pub metadata: Option<Metadata>,
}

/// Filters and paging for [`ConversationStore::list_conversations`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ConversationQuery {
    /// Only threads of this agent key.
    pub agent: Option<String>,
    /// Only threads about this resource.
    pub resource_slug: Option<String>,
    /// Only threads about this record.
    pub record_id: Option<String>,
    /// Page size (default 50, at most 1000).
    pub limit: Option<usize>,
    /// Cursor from the previous page.
    pub cursor: Option<String>,
}

/// Setters, so that a field added later breaks no caller (`ConversationQuery` is `#[non_exhaustive]`).
impl ConversationQuery {
    /// Sets [`agent`](Self::agent).
    #[must_use]
    pub fn with_agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = Some(agent.into());
        self
    }

    /// Sets [`resource_slug`](Self::resource_slug).
    #[must_use]
    pub fn with_resource_slug(mut self, resource_slug: impl Into<String>) -> Self {
        self.resource_slug = Some(resource_slug.into());
        self
    }

    /// Sets [`record_id`](Self::record_id).
    #[must_use]
    pub fn with_record_id(mut self, record_id: impl Into<String>) -> Self {
        self.record_id = Some(record_id.into());
        self
    }

    /// Sets [`limit`](Self::limit).
    #[must_use]
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Sets [`cursor`](Self::cursor): the `next_cursor` of the previous page (`None` for the
    /// first).
    #[must_use]
    pub fn with_cursor(mut self, cursor: Option<String>) -> Self {
        self.cursor = cursor;
        self
    }
}

impl ConversationQuery {
    /// The page size (default 50); the front layer has checked the limit.
    pub fn page_limit(&self) -> usize {
        crate::page::page_limit(self.limit)
    }

    /// The position to continue after; the front layer has checked the cursor.
    pub fn after(&self) -> Option<crate::page::Cursor> {
        crate::page::page_after(self.cursor.as_deref())
    }

    /// Whether a conversation passes the filters (not the cursor).
    pub fn matches(&self, conversation: &Conversation) -> bool {
        fn field(want: Option<&String>, have: Option<&String>) -> bool {
            want.is_none_or(|w| have == Some(w))
        }
        field(self.agent.as_ref(), conversation.agent.as_ref())
            && field(
                self.resource_slug.as_ref(),
                conversation.resource_slug.as_ref(),
            )
            && field(self.record_id.as_ref(), conversation.record_id.as_ref())
    }
}

/// Options of [`ConversationStore::append`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AppendOptions {
    /// Compare-and-append: the batch applies only if the conversation's `last_seq` equals this.
    pub expected_last_seq: Option<u64>,
    /// Storage limit: after appending, the oldest messages beyond this many are pruned in the
    /// same transaction.
    pub max_messages: Option<u64>,
}

/// Setters, so that a field added later breaks no caller (`AppendOptions` is `#[non_exhaustive]`).
impl AppendOptions {
    /// Sets [`expected_last_seq`](Self::expected_last_seq).
    #[must_use]
    pub fn with_expected_last_seq(mut self, expected_last_seq: u64) -> Self {
        self.expected_last_seq = Some(expected_last_seq);
        self
    }

    /// Sets [`max_messages`](Self::max_messages).
    #[must_use]
    pub fn with_max_messages(mut self, max_messages: u64) -> Self {
        self.max_messages = Some(max_messages);
        self
    }
}

/// What [`ConversationStore::append`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppendReceipt {
    /// Newly stored messages and their seqs, in batch order.
    pub appended: Vec<(MessageId, u64)>,
    /// Messages skipped because the same id with the same content was already stored, with the
    /// seq they have.
    pub duplicates: Vec<(MessageId, u64)>,
    /// The conversation's `last_seq` afterwards.
    pub last_seq: u64,
    /// How many old messages the storage limit pruned.
    pub pruned: u64,
}

/// The most seqs one [`ConversationStore::load_seqs`] reads.
pub const MAX_LOAD_SEQS: usize = 1_000;

/// Window and filters of [`ConversationStore::load`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LoadOptions {
    /// Only the last N messages of the selection.
    pub last: Option<usize>,
    /// Only messages with seq strictly below this.
    pub before_seq: Option<u64>,
    /// Only messages with seq strictly above this.
    pub after_seq: Option<u64>,
    /// Only messages of these roles (a role-filtered view is not a transcript: it is never sanitized).
    pub roles: Option<Vec<Role>>,
    /// Run [`sanitize_conversation`](crate::replay::sanitize_conversation) on the window (default true).
    pub sanitize: bool,
}

/// Setters, so that a field added later breaks no caller (`LoadOptions` is `#[non_exhaustive]`).
impl LoadOptions {
    /// Sets [`last`](Self::last).
    #[must_use]
    pub fn with_last(mut self, last: usize) -> Self {
        self.last = Some(last);
        self
    }

    /// Sets [`before_seq`](Self::before_seq).
    #[must_use]
    pub fn with_before_seq(mut self, before_seq: u64) -> Self {
        self.before_seq = Some(before_seq);
        self
    }

    /// Sets [`after_seq`](Self::after_seq).
    #[must_use]
    pub fn with_after_seq(mut self, after_seq: u64) -> Self {
        self.after_seq = Some(after_seq);
        self
    }

    /// Sets [`roles`](Self::roles).
    #[must_use]
    pub fn with_roles(mut self, roles: impl IntoIterator<Item = Role>) -> Self {
        self.roles = Some(roles.into_iter().collect());
        self
    }

    /// Sets [`sanitize`](Self::sanitize).
    #[must_use]
    pub fn with_sanitize(mut self, sanitize: bool) -> Self {
        self.sanitize = sanitize;
        self
    }
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            last: None,
            before_seq: None,
            after_seq: None,
            roles: None,
            sanitize: true,
        }
    }
}

impl LoadOptions {
    /// The last `n` messages, sanitized.
    pub fn last(n: usize) -> Self {
        Self {
            last: Some(n),
            ..Self::default()
        }
    }

    /// Everything, exactly as stored (no sanitizing).
    pub fn raw() -> Self {
        Self {
            sanitize: false,
            ..Self::default()
        }
    }

    /// Whether a message at `seq` with `role` falls in the selection (before `last` is applied).
    pub fn selects(&self, seq: u64, role: Role) -> bool {
        self.before_seq.is_none_or(|b| seq < b)
            && self.after_seq.is_none_or(|a| seq > a)
            && self
                .roles
                .as_ref()
                .is_none_or(|roles| roles.contains(&role))
    }

    /// Applies sanitizing to a loaded window when asked for and meaningful.
    pub fn finish(&self, window: Vec<StoredMessage>) -> Vec<StoredMessage> {
        if self.sanitize && self.roles.is_none() {
            crate::sanitize::sanitize_conversation(window)
        } else {
            window
        }
    }
}

/// What an append will do, decided before anything is written: the new messages with their
/// seqs, and the receipt to return once they are stored (pruning is the store's to count).
#[derive(Debug, Clone, PartialEq)]
pub struct AppendPlan {
    /// Messages to store, in batch order, with seqs `last_seq + 1, …`.
    pub fresh: Vec<StoredMessage>,
    /// The receipt (appended, duplicates, resulting `last_seq`).
    pub receipt: AppendReceipt,
}

/// Decides an append the same way on every backend: separates duplicates
/// (same id, same content, already stored or earlier in the batch) from new messages, refuses
/// a stored id with different content (`Conflict`) or repeated in the batch with different
/// content (`InvalidInput`), then checks `expected_last_seq` unless the batch is all duplicates.
///
/// `stored` looks a message id up among the conversation's stored messages; `last_seq` is read
/// under the same lock or transaction that will write the plan.
pub fn plan_append<'a>(
    last_seq: u64,
    messages: Vec<Message>,
    options: &AppendOptions,
    stored: impl Fn(&MessageId) -> Option<(u64, &'a Message)>,
) -> Result<AppendPlan> {
    let mut receipt = AppendReceipt {
        last_seq,
        ..AppendReceipt::default()
    };
    let mut fresh: Vec<StoredMessage> = Vec::new();
    let mut in_batch: HashMap<MessageId, usize> = HashMap::new();
    for message in messages {
        if let Some((seq, existing)) = stored(&message.id) {
            if !existing.same_content(&message) {
                return Err(MemoryError::conflict(
                    format!(
                        "message {} is already stored with different content",
                        message.id
                    ),
                    None,
                ));
            }
            receipt.duplicates.push((message.id, seq));
        } else if let Some(&index) = in_batch.get(&message.id) {
            let first = &fresh[index];
            if !first.message.same_content(&message) {
                return Err(MemoryError::invalid(format!(
                    "message id {} appears twice in the batch with different content",
                    message.id
                )));
            }
            receipt.duplicates.push((message.id, first.seq));
        } else {
            let seq = last_seq + fresh.len() as u64 + 1;
            in_batch.insert(message.id.clone(), fresh.len());
            fresh.push(StoredMessage { seq, message });
        }
    }
    if fresh.is_empty() {
        return Ok(AppendPlan { fresh, receipt });
    }
    if let Some(expected) = options.expected_last_seq {
        if expected != last_seq {
            return Err(MemoryError::conflict(
                format!("conversation is at seq {last_seq}, not {expected}"),
                Some(last_seq),
            ));
        }
    }
    receipt.appended = fresh
        .iter()
        .map(|m| (m.message.id.clone(), m.seq))
        .collect();
    receipt.last_seq = last_seq + fresh.len() as u64;
    Ok(AppendPlan { fresh, receipt })
}

/// Conversation threads and their messages.
///
/// Every method takes the caller's [`Scope`]; a conversation of another scope is `NotFound`.
#[async_trait]
pub trait ConversationStore: Send + Sync {
    /// Creates a conversation.
    ///
    /// # Behavior
    /// - Without an id the store makes a UUIDv7.
    /// - An id already used in the same scope is `AlreadyExists`; the same id in another scope is
    ///   independent.
    /// - `created_at` and `updated_at` come from the store's clock; `last_seq` starts at 0.
    async fn create_conversation(
        &self,
        scope: &Scope,
        new: NewConversation,
    ) -> Result<Conversation>;

    /// Reads a conversation.
    ///
    /// # Behavior
    /// - A missing id, or another scope's, is `NotFound`.
    async fn get_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<Conversation>;

    /// Lists the scope's conversations, newest first.
    ///
    /// # Behavior
    /// - Order is `created_at` descending, then id descending.
    /// - Filters by agent, resource slug and record id combine with AND.
    /// - Pages with a keyset cursor: every conversation appears exactly once across the pages,
    ///   even while others are created concurrently (they are newer than the cursor).
    /// - A malformed cursor is `InvalidInput`; so is a limit of 0 or above 1000.
    async fn list_conversations(
        &self,
        scope: &Scope,
        query: ConversationQuery,
    ) -> Result<crate::Page<Conversation>>;

    /// Changes title and/or metadata.
    ///
    /// # Behavior
    /// - Bumps `updated_at`; returns the conversation as it now is.
    /// - A missing id, or another scope's, is `NotFound`.
    async fn update_conversation(
        &self,
        scope: &Scope,
        id: &ConversationId,
        update: ConversationUpdate,
    ) -> Result<Conversation>;

    /// Deletes a conversation.
    ///
    /// # Behavior
    /// - Cascades: its messages, vectors whose `conversation_id` is it (any collection, same
    ///   scope), its conversation-keyed working memory and its cursors go with it.
    /// - Returns whether it existed; another scope's conversation is untouched and reports `false`.
    async fn delete_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<bool>;

    /// Appends a batch of messages atomically.
    ///
    /// # Behavior
    /// - All or nothing: if any message is rejected, none is stored.
    /// - New messages get seqs `last_seq + 1, last_seq + 2, …` in batch order: contiguous, no
    ///   gaps, even under concurrent writers.
    /// - Idempotent by message id: an id already stored with the same content is skipped and
    ///   reported in `duplicates`; with different content the whole batch is `Conflict`.
    /// - The same id twice in one batch: stored once if the content is equal, `InvalidInput` if not.
    /// - `expected_last_seq` makes it compare-and-append: a mismatch is `Conflict` with
    ///   `current = last_seq` and nothing is stored. A fully duplicate batch (a retry) succeeds
    ///   without checking it.
    /// - `max_messages` prunes the oldest messages beyond the limit in the same transaction.
    /// - An empty batch changes nothing and returns the current `last_seq`.
    /// - A missing conversation, or another scope's, is `NotFound`.
    async fn append(
        &self,
        scope: &Scope,
        id: &ConversationId,
        messages: Vec<Message>,
        options: AppendOptions,
    ) -> Result<AppendReceipt>;

    /// Loads messages in chronological (seq) order.
    ///
    /// # Behavior
    /// - `before_seq`, `after_seq` and `roles` select; `last` keeps the last N of the selection.
    /// - Cost is O(N) in the messages returned, whatever the thread's length.
    /// - With `sanitize` (the default) and no role filter the window is passed through
    ///   [`sanitize_conversation`](crate::replay::sanitize_conversation), so it is replay-safe after a
    ///   crash between a tool call and its result.
    /// - Every string round-trips byte-exactly, NUL included.
    /// - A missing conversation, or another scope's, is `NotFound`.
    async fn load(
        &self,
        scope: &Scope,
        id: &ConversationId,
        options: LoadOptions,
    ) -> Result<Vec<StoredMessage>>;

    /// Loads the messages at `seqs` in one call (what semantic recall found, scattered over
    /// the thread).
    ///
    /// # Behavior
    /// - The stored messages whose seq is in `seqs`, in seq order, each once (the front layer
    ///   passes `seqs` sorted and without repeats), exactly as stored: scattered messages are
    ///   not a transcript, so they are never sanitized.
    /// - A seq with no message (never written, or pruned) is skipped.
    /// - Cost is O(N) in the seqs asked for, whatever the thread's length.
    /// - At most [`MAX_LOAD_SEQS`] seqs (`InvalidInput` past it).
    /// - A missing conversation, or another scope's, is `NotFound`, even for an empty list.
    ///
    /// The default loads each seq with [`load`](Self::load), concurrently; a backend that can
    /// read them in one request overrides it.
    async fn load_seqs(
        &self,
        scope: &Scope,
        id: &ConversationId,
        seqs: &[u64],
    ) -> Result<Vec<StoredMessage>> {
        if seqs.is_empty() {
            self.get_conversation(scope, id).await?;
            return Ok(Vec::new());
        }
        let reads = seqs.iter().map(|&seq| {
            self.load(
                scope,
                id,
                LoadOptions {
                    after_seq: seq.checked_sub(1),
                    before_seq: seq.checked_add(1),
                    sanitize: false,
                    ..LoadOptions::default()
                },
            )
        });
        let windows = futures::future::try_join_all(reads).await?;
        Ok(windows.into_iter().flatten().collect())
    }

    /// Reads a named per-conversation cursor (e.g. the fact extraction watermark).
    ///
    /// # Behavior
    /// - `None` until first advanced; a missing conversation is `NotFound`.
    async fn cursor(&self, scope: &Scope, id: &ConversationId, name: &str) -> Result<Option<u64>>;

    /// Moves a named cursor forward to `seq` and returns its value.
    ///
    /// # Behavior
    /// - Monotonic: the stored value becomes `max(current, seq)`.
    /// - Deleted with the conversation and counted by `forget_all`.
    async fn advance_cursor(
        &self,
        scope: &Scope,
        id: &ConversationId,
        name: &str,
        seq: u64,
    ) -> Result<u64>;
}
