//! The change feed: every write of a namespace, in the order the store committed them.
//!
//! A write that changes something records one [`Change`] in its own transaction: what was
//! done ([`Operation`]), to which records (their ids, never their text), in which scope, by
//! whom (the [`Principal`] the front layer writes as, never a field of the request) and when.
//! A write that changes nothing (a replayed append, a duplicate remember, forgetting a fact
//! already gone) records nothing, so a retried write is in the feed once.
//!
//! A consumer reads a namespace's changes after a [`ChangeCursor`]
//! ([`MemoryBackend::changes`](crate::MemoryBackend::changes)) and keeps the cursor of the
//! last change it handled; resuming from it, it is given every later change once, whatever
//! wrote concurrently and whenever it stopped. Old changes go by a [`Retention`] policy
//! ([`MemoryBackend::trim_changes`](crate::MemoryBackend::trim_changes)); a cursor from
//! before the trim is refused with a conflict rather than silently skipping what was trimmed.
//!
//! Erasing a subject ([`forget_all`](crate::MemoryBackend::forget_all)) scrubs its changes:
//! they stay in the feed, in order, without the subject, the records' ids or the container
//! ([`Change::scrubbed`]), and the erasure counts them in its receipt.

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};
use crate::fact::{RememberOutcome, RememberStatus};
use crate::provenance::Principal;
use crate::records::Record;
use crate::scope::{FactId, Namespace, Scope, Subject};
use crate::time::Timestamp;
use crate::working::WorkingMemoryKey;

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Operation {
    /// A conversation was created (`within`: its id).
    CreateConversation,
    /// A conversation's title or metadata changed (`within`: its id).
    UpdateConversation,
    /// A conversation and its messages were deleted (`within`: its id).
    DeleteConversation,
    /// Messages were appended (`within`: the conversation; `records`: the new messages' ids).
    Append,
    /// A conversation's named cursor was set or moved (`within`: the conversation; `records`:
    /// the name).
    AdvanceCursor,
    /// Working memory was written (`within`: the conversation, none for the user's).
    SetWorkingMemory,
    /// Working memory was cleared (`within`: the conversation, none for the user's).
    ClearWorkingMemory,
    /// A fact version was stored (`records`: its id, then the id it superseded, if any).
    Remember,
    /// A fact was forgotten (`records`: its id).
    Forget,
    /// A fact's expiry changed (`records`: its id).
    SetExpiry,
    /// A vector collection was created (`within`: its name).
    EnsureCollection,
    /// A vector collection was dropped (`within`: its name).
    DropCollection,
    /// Vectors were written (`within`: the collection; `records`: their ids).
    UpsertVectors,
    /// Vectors were deleted (`within`: the collection; `records`: the ids asked for, or
    /// those the filter matched).
    DeleteVectors,
    /// A checkpoint was stored (`records`: its id).
    PutCheckpoint,
    /// A checkpoint changed (`records`: its id).
    UpdateCheckpoint,
    /// A checkpoint was deleted (`records`: its id).
    DeleteCheckpoint,
    /// Records were restored from an export into the scope.
    Restore,
    /// A subject that owned something was erased (the change names no subject: see
    /// [`Change::scrubbed`]).
    Erase,
}

impl Operation {
    /// Every operation, in declaration order.
    pub const ALL: [Self; 19] = [
        Self::CreateConversation,
        Self::UpdateConversation,
        Self::DeleteConversation,
        Self::Append,
        Self::AdvanceCursor,
        Self::SetWorkingMemory,
        Self::ClearWorkingMemory,
        Self::Remember,
        Self::Forget,
        Self::SetExpiry,
        Self::EnsureCollection,
        Self::DropCollection,
        Self::UpsertVectors,
        Self::DeleteVectors,
        Self::PutCheckpoint,
        Self::UpdateCheckpoint,
        Self::DeleteCheckpoint,
        Self::Restore,
        Self::Erase,
    ];

    /// Its name, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CreateConversation => "create_conversation",
            Self::UpdateConversation => "update_conversation",
            Self::DeleteConversation => "delete_conversation",
            Self::Append => "append",
            Self::AdvanceCursor => "advance_cursor",
            Self::SetWorkingMemory => "set_working_memory",
            Self::ClearWorkingMemory => "clear_working_memory",
            Self::Remember => "remember",
            Self::Forget => "forget",
            Self::SetExpiry => "set_expiry",
            Self::EnsureCollection => "ensure_collection",
            Self::DropCollection => "drop_collection",
            Self::UpsertVectors => "upsert_vectors",
            Self::DeleteVectors => "delete_vectors",
            Self::PutCheckpoint => "put_checkpoint",
            Self::UpdateCheckpoint => "update_checkpoint",
            Self::DeleteCheckpoint => "delete_checkpoint",
            Self::Restore => "restore",
            Self::Erase => "erase",
        }
    }
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Operation {
    type Err = MemoryError;

    fn from_str(text: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|o| o.as_str() == text)
            .ok_or_else(|| MemoryError::invalid(format!("{text:?} is not a change operation")))
    }
}

/// A place in a namespace's feed: the changes after it are the ones not yet handled.
///
/// Two numbers, whose meaning is the backend's (a row's position; on PostgreSQL, the
/// writing transaction's id before it); cursors of one namespace order as the feed does.
/// Written `epoch-position`, and serialized so.
///
/// ```
/// use mnemix_core::ChangeCursor;
/// let cursor: ChangeCursor = "0-42".parse()?;
/// assert_eq!(cursor, ChangeCursor::new(0, 42));
/// assert_eq!(cursor.to_string(), "0-42");
/// assert!(ChangeCursor::START < cursor);
/// assert!("42".parse::<ChangeCursor>().is_err());
/// # Ok::<(), mnemix_core::MemoryError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ChangeCursor {
    epoch: u64,
    position: u64,
}

impl ChangeCursor {
    /// Before every change: a consumer that has handled none reads from here, and is given
    /// the oldest change still retained first.
    pub const START: Self = Self::new(0, 0);

    /// A cursor of the backend's two numbers.
    pub const fn new(epoch: u64, position: u64) -> Self {
        Self { epoch, position }
    }

    /// The first number (the order's major part).
    pub const fn epoch(self) -> u64 {
        self.epoch
    }

    /// The second number.
    pub const fn position(self) -> u64 {
        self.position
    }
}

impl std::fmt::Display for ChangeCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.epoch, self.position)
    }
}

impl std::str::FromStr for ChangeCursor {
    type Err = MemoryError;

    fn from_str(text: &str) -> Result<Self> {
        let invalid = || {
            MemoryError::invalid(format!(
                "change cursor {text:?} is not two whole numbers as epoch-position (\"0-42\")"
            ))
        };
        let (epoch, position) = text.split_once('-').ok_or_else(invalid)?;
        let number = |part: &str| {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid());
            }
            part.parse::<u64>().map_err(|_| invalid())
        };
        Ok(Self::new(number(epoch)?, number(position)?))
    }
}

impl Serialize for ChangeCursor {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ChangeCursor {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// One write, as the feed records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Its place in the namespace's feed.
    pub cursor: ChangeCursor,
    /// When the store committed it, by the store's clock.
    pub at: Timestamp,
    /// What was done.
    pub operation: Operation,
    /// The subject whose scope it changed; none for the namespace's shared scope, a
    /// namespace-wide record (a collection) or a scrubbed change.
    pub subject: Option<Subject>,
    /// The conversation, collection or working-memory slot the records belong to.
    pub within: Option<String>,
    /// The ids of the records written (see each [`Operation`]).
    pub records: Vec<String>,
    /// Who made it.
    pub principal: Principal,
    /// Its subject was erased since: subject, container and ids are gone.
    pub scrubbed: bool,
}

/// What a write records in its transaction: a [`Change`] before the store gives it a place
/// and a time, and before the front layer's principal is attached ([`writer`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewChange {
    /// What was done.
    pub operation: Operation,
    /// The subject whose scope it changed (none: the shared scope or namespace-wide).
    pub subject: Option<Subject>,
    /// The container of the records.
    pub within: Option<String>,
    /// The ids of the records written.
    pub records: Vec<String>,
}

impl NewChange {
    /// `operation` in `scope`.
    pub fn new(operation: Operation, scope: &Scope) -> Self {
        Self {
            operation,
            subject: scope.subject().cloned(),
            within: None,
            records: Vec::new(),
        }
    }

    /// `operation` on a namespace-wide record (a collection).
    pub fn namespace_wide(operation: Operation) -> Self {
        Self {
            operation,
            subject: None,
            within: None,
            records: Vec::new(),
        }
    }

    /// The same, in this container.
    #[must_use]
    pub fn within(mut self, container: impl Into<String>) -> Self {
        self.within = Some(container.into());
        self
    }

    /// The same, naming these records.
    #[must_use]
    pub fn records<I, S>(mut self, ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.records = ids.into_iter().map(Into::into).collect();
        self
    }

    /// The stored subject: `""` for none (the shared scope's convention).
    pub fn subject_column(&self) -> &str {
        self.subject.as_ref().map_or("", Subject::as_str)
    }

    /// The records as stored: a JSON array of strings.
    pub fn records_column(&self) -> String {
        serde_json::to_string(&self.records).expect("strings serialize")
    }
}

/// The change of a working-memory write (`operation` sets or clears it): `within` the
/// conversation, none for the subject's own document.
pub fn working(operation: Operation, scope: &Scope, key: &WorkingMemoryKey) -> NewChange {
    let change = NewChange::new(operation, scope);
    match key {
        WorkingMemoryKey::Conversation(id) => change.within(id.as_str()),
        WorkingMemoryKey::User => change,
    }
}

/// The change of a remember that stored a version (not a duplicate): its id, then the ids of
/// the version it superseded and the facts it evicted.
pub fn remembered(scope: &Scope, outcome: &RememberOutcome) -> NewChange {
    let superseded = match &outcome.status {
        RememberStatus::Superseded { previous } => Some(previous),
        RememberStatus::Created | RememberStatus::Duplicate => None,
    };
    let ids = std::iter::once(&outcome.fact.id)
        .chain(superseded)
        .chain(&outcome.evicted);
    NewChange::new(Operation::Remember, scope).records(ids.map(FactId::as_str))
}

/// The changes a restore of `records` records: one per namespace and scope it writes in
/// (collections namespace-wide), in the order the records first name them. Cache entries are
/// not memory and are in no feed.
pub fn restored(records: &[Record]) -> Vec<(Namespace, NewChange)> {
    let mut changes: Vec<(Namespace, NewChange)> = Vec::new();
    for record in records {
        let change = match record {
            Record::CacheEntry { .. } => continue,
            Record::Collection { .. } => NewChange::namespace_wide(Operation::Restore),
            _ => NewChange::new(Operation::Restore, record.scope().expect("a scoped record")),
        };
        let namespace = record.namespace();
        if !changes.iter().any(|(n, c)| n == namespace && *c == change) {
            changes.push((namespace.clone(), change));
        }
    }
    changes
}

/// Removes what names an erased subject from one of its changes: the subject, the container
/// and the records' ids. Its place, time, operation and principal stay.
pub fn scrub(change: &mut Change) {
    change.subject = None;
    change.within = None;
    change.records.clear();
    change.scrubbed = true;
}

/// A change read back from a backend's columns: one decoding for every backend.
///
/// `subject` is `""` for none; `records` a JSON array of strings; `principal` the
/// [`Principal`]'s JSON.
#[allow(clippy::too_many_arguments)] // a row's columns
pub fn change_from_columns(
    cursor: ChangeCursor,
    at: Timestamp,
    operation: &str,
    subject: &str,
    within: Option<String>,
    records: &str,
    principal: &str,
    scrubbed: bool,
) -> Result<Change> {
    let corrupt = |what: &str, e: &dyn std::fmt::Display| {
        MemoryError::invalid(format!("a stored change's {what} does not read back: {e}"))
    };
    Ok(Change {
        cursor,
        at,
        operation: operation.parse()?,
        subject: (!subject.is_empty())
            .then(|| Subject::new(subject))
            .transpose()?,
        within,
        records: serde_json::from_str(records).map_err(|e| corrupt("records", &e))?,
        principal: serde_json::from_str(principal).map_err(|e| corrupt("principal", &e))?,
        scrubbed,
    })
}

/// How long a namespace's changes are kept: the ones older than `max_age`, and all but the
/// newest `max_entries`, go at the next [`trim_changes`](crate::MemoryBackend::trim_changes).
/// Neither set keeps everything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Changes older than this go.
    pub max_age: Option<Duration>,
    /// Only this many of the newest stay.
    pub max_entries: Option<u64>,
}

impl Retention {
    /// Keeps what is younger than `max_age`.
    pub fn max_age(max_age: Duration) -> Self {
        Self {
            max_age: Some(max_age),
            max_entries: None,
        }
    }

    /// Keeps the newest `max_entries`.
    pub fn max_entries(max_entries: u64) -> Self {
        Self {
            max_age: None,
            max_entries: Some(max_entries),
        }
    }

    /// The commit time before which changes go, at `now`.
    pub fn cutoff(&self, now: Timestamp) -> Option<Timestamp> {
        self.max_age.map(|age| {
            Timestamp::from_millis(
                now.as_millis()
                    .saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX)),
            )
        })
    }
}

/// The most changes one read returns.
pub const MAX_CHANGES_PER_READ: usize = 1_000;

/// Refuses a read's limit outside `1..=`[`MAX_CHANGES_PER_READ`].
pub fn validate_limit(limit: usize) -> Result<()> {
    if (1..=MAX_CHANGES_PER_READ).contains(&limit) {
        Ok(())
    } else {
        Err(MemoryError::invalid(format!(
            "a read of changes takes 1 to {MAX_CHANGES_PER_READ} at a time, not {limit}"
        )))
    }
}

/// The conflict of a cursor from before what a trim kept.
pub fn trimmed(after: ChangeCursor, horizon: ChangeCursor) -> MemoryError {
    MemoryError::Conflict {
        reason: format!(
            "change cursor {after} is before the oldest change kept (trimmed through \
             {horizon}): changes after it were removed by retention"
        ),
        current: None,
    }
}

tokio::task_local! {
    static WRITER: Principal;
}

/// Runs `write` as `principal`: what every change it records names. The front layer wraps
/// each write it passes on.
pub async fn writing_as<F: Future>(principal: Principal, write: F) -> F::Output {
    WRITER.scope(principal, write).await
}

/// Who the write in progress is by: what a backend records in its [`Change`]. Read it before
/// handing the write to another task (a write group): the front layer's principal is the
/// calling task's. Outside the front layer (a backend called directly) it is
/// [`Principal::unrecorded`].
pub fn writer() -> Principal {
    WRITER.try_with(Clone::clone).unwrap_or_default()
}
