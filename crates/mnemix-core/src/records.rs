use std::collections::BTreeMap;
use std::fmt;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::checkpoint::Checkpoint;
use crate::conversation::Conversation;
use crate::error::{MemoryError, Result};
use crate::fact::Fact;
use crate::message::StoredMessage;
use crate::migration::lowercase_hex;
use crate::scope::{validate_identifier, ConversationId, Namespace, Scope};
use crate::time::Timestamp;
use crate::vector::{CollectionSpec, VectorRecord};
use crate::working::{WorkingMemory, WorkingMemoryKey};

/// The `format` of an export's header line.
pub const FORMAT: &str = "agent-memory-export";
/// The export format version this build writes and the newest it reads. Version 3's facts
/// carry their provenance and valid time (a fact of an older file reads as unrecorded, always
/// true); version 2 ends with an [`ExportTrailer`]; version 1 had none.
pub const FORMAT_VERSION: u32 = 3;

/// The first line of a JSON Lines export; every following line is one [`Record`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportHeader {
    /// Always [`FORMAT`].
    pub format: String,
    /// The format version ([`FORMAT_VERSION`] when written by this build).
    pub version: u32,
    /// The backend it was exported from.
    pub backend: String,
    /// When the export started (the exporting store's clock).
    pub exported_at: Timestamp,
}

impl ExportHeader {
    /// The header of an export written now from `backend`.
    pub fn new(backend: &str, exported_at: Timestamp) -> Self {
        Self {
            format: FORMAT.to_owned(),
            version: FORMAT_VERSION,
            backend: backend.to_owned(),
            exported_at,
        }
    }

    /// `InvalidInput` unless this build can read the export.
    pub fn check(&self) -> Result<()> {
        if self.format != FORMAT {
            return Err(MemoryError::invalid(format!(
                "not an mnemix export (format {:?}, expected {FORMAT:?})",
                self.format
            )));
        }
        if self.version == 0 || self.version > FORMAT_VERSION {
            return Err(MemoryError::invalid(format!(
                "export format version {} is newer than this build reads ({FORMAT_VERSION}); \
                 upgrade mnemix",
                self.version
            )));
        }
        Ok(())
    }
}

/// The last line of an export: how many records it holds and a SHA-256 of their lines, so a
/// file cut short (even at a line boundary) or changed is told apart from a whole one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportTrailer {
    /// Always [`FORMAT`]: what ends.
    pub end: String,
    /// The record lines before it.
    pub records: u64,
    /// Lowercase hex SHA-256 of those lines, each with its `\n`, in file order.
    pub sha256: String,
}

/// Writes a JSON Lines export: the header, one line per record, and the [`ExportTrailer`].
///
/// ```
/// use mnemix_core::transfer::{ExportHeader, ExportReader, ExportWriter, Record};
/// use mnemix_core::{Namespace, Timestamp};
/// let mut writer = ExportWriter::new(Vec::new(), &ExportHeader::new("memory", Timestamp::EPOCH))?;
/// writer.write(&Record::CacheEntry {
///     namespace: Namespace::new("support")?, key: "k".into(), value: vec![1], expires_at: None,
/// })?;
/// let file = writer.finish()?;
/// assert_eq!(ExportReader::new(file.as_slice())?.collect::<Result<Vec<_>, _>>()?.len(), 1);
/// let cut = &file[..file.len() - 10];
/// assert!(ExportReader::new(cut)?.collect::<Result<Vec<_>, _>>().is_err());
/// # Ok::<(), mnemix_core::MemoryError>(())
/// ```
pub struct ExportWriter<W: std::io::Write> {
    out: W,
    hasher: Sha256,
    records: u64,
}

impl<W: std::io::Write> ExportWriter<W> {
    /// Starts an export on `out` with its header line.
    pub fn new(mut out: W, header: &ExportHeader) -> Result<Self> {
        let mut line = serde_json::to_vec(header).expect("headers serialize to JSON");
        line.push(b'\n');
        out.write_all(&line).map_err(write_error)?;
        Ok(Self {
            out,
            hasher: Sha256::new(),
            records: 0,
        })
    }

    /// Writes one record's line.
    pub fn write(&mut self, record: &Record) -> Result<()> {
        let mut line = serde_json::to_vec(record).expect("records serialize to JSON");
        line.push(b'\n');
        self.hasher.update(&line);
        self.records += 1;
        self.out.write_all(&line).map_err(write_error)
    }

    /// The records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Writes the trailer, flushes, and returns the output.
    pub fn finish(mut self) -> Result<W> {
        let trailer = ExportTrailer {
            end: FORMAT.to_owned(),
            records: self.records,
            sha256: lowercase_hex(&self.hasher.finalize()),
        };
        let mut line = serde_json::to_vec(&trailer).expect("trailers serialize to JSON");
        line.push(b'\n');
        self.out.write_all(&line).map_err(write_error)?;
        self.out.flush().map_err(write_error)?;
        Ok(self.out)
    }
}

fn write_error(error: std::io::Error) -> MemoryError {
    MemoryError::Backend {
        backend: "export",
        source: Box::new(error),
    }
}

/// Reads a JSON Lines export: the [`ExportHeader`] line, checked when the reader is made, then
/// one [`Record`] per line (blank lines skipped), each decoded and [validated](Record::validate),
/// then the [`ExportTrailer`], whose count and digest must match the lines read. A file that
/// ends without it (cut short, even at a line boundary), or whose trailer does not match, ends
/// in an error after its last record, unless [`accept_unverified`](Self::accept_unverified) was
/// asked for. Every error names its line; nothing after an error is read.
///
/// A line may end in `\r\n` as well as `\n` (a file that went through a text-mode copy): the
/// digest is over each line's text and a `\n`, so both read and verify alike. A carriage return
/// can only be a line's end, never data: JSON escapes one inside a string.
///
/// ```
/// use mnemix_core::transfer::ExportReader;
/// let export = "{\"format\":\"agent-memory-export\",\"version\":1,\"backend\":\"memory\",\"exported_at\":0}\n\
///     {\"kind\":\"cache_entry\",\"namespace\":\"support\",\"key\":\"k\",\"value\":[1],\"expires_at\":null}\n";
/// // Version 1 had no trailer: read only when asked to accept an unverified file.
/// assert!(ExportReader::new(export.as_bytes())?.collect::<Result<Vec<_>, _>>().is_err());
/// let reader = ExportReader::new(export.as_bytes())?.accept_unverified();
/// assert_eq!(reader.header().backend, "memory");
/// assert_eq!(reader.collect::<Result<Vec<_>, _>>()?.len(), 1);
/// # Ok::<(), mnemix_core::MemoryError>(())
/// ```
pub struct ExportReader<R> {
    header: ExportHeader,
    lines: std::io::Lines<R>,
    /// The 1-based number of the last line read.
    line: usize,
    /// Bytes of the lines read so far, with their line ends.
    bytes: u64,
    /// The record lines read, and their digest so far.
    records: u64,
    hasher: Sha256,
    /// The trailer has been read and matched.
    ended: bool,
    /// A missing or mismatched trailer is accepted.
    unverified: bool,
    failed: bool,
}

impl<R: std::io::BufRead> ExportReader<R> {
    /// Reads and checks the header line; `InvalidInput` when the input is empty, the first line
    /// is not a header, or this build cannot read the export's version.
    pub fn new(reader: R) -> Result<Self> {
        let mut lines = reader.lines();
        let first = lines
            .next()
            .ok_or_else(|| MemoryError::invalid("the export is empty: no header line"))?
            .map_err(|e| read_error(1, &e))?;
        let bytes = first.len() as u64 + 1;
        let header: ExportHeader = serde_json::from_str(&first)
            .map_err(|e| MemoryError::invalid(format!("line 1 is not an export header: {e}")))?;
        header.check()?;
        Ok(Self {
            header,
            lines,
            line: 1,
            bytes,
            records: 0,
            hasher: Sha256::new(),
            ended: false,
            unverified: false,
            failed: false,
        })
    }

    /// Reads a file whose trailer is missing (cut short, or written before version 2) or does
    /// not match, yielding the records it holds: for rescuing what a damaged backup still has.
    #[must_use]
    pub fn accept_unverified(mut self) -> Self {
        self.unverified = true;
        self
    }

    /// Checks the trailer on `text` against the records read.
    fn check_trailer(&mut self, trailer: &ExportTrailer) -> Result<()> {
        let sha256 = lowercase_hex(&self.hasher.clone().finalize());
        if trailer.end != FORMAT {
            return Err(MemoryError::invalid(format!(
                "line {}: a trailer of {:?}, not of an mnemix export",
                self.line, trailer.end
            )));
        }
        if !self.unverified && (trailer.records != self.records || trailer.sha256 != sha256) {
            return Err(MemoryError::invalid(format!(
                "line {}: the trailer promises {} records (SHA-256 {}), the file holds {} \
                 (SHA-256 {sha256}): it was changed or cut; nothing was restored \
                 (`--accept-unverified` restores what it holds)",
                self.line, trailer.records, trailer.sha256, self.records
            )));
        }
        self.ended = true;
        Ok(())
    }

    /// The export's header.
    pub fn header(&self) -> &ExportHeader {
        &self.header
    }

    /// The number of the last line read (the header is line 1).
    pub fn line(&self) -> usize {
        self.line
    }

    /// The bytes read so far (for progress over a file of known size).
    pub fn bytes_read(&self) -> u64 {
        self.bytes
    }

    fn record(&mut self, text: &str) -> Result<Record> {
        if self.ended {
            return Err(MemoryError::invalid(format!(
                "line {} follows the export's trailer",
                self.line
            )));
        }
        self.records += 1;
        self.hasher.update(text.as_bytes());
        self.hasher.update(b"\n");
        let record: Record = serde_json::from_str(text).map_err(|e| {
            MemoryError::invalid(format!("line {} is not a record: {e}", self.line))
        })?;
        record.validate().map_err(|e| match e {
            MemoryError::InvalidInput(reason) => {
                MemoryError::invalid(format!("line {}: {reason}", self.line))
            }
            other => other,
        })?;
        Ok(record)
    }
}

impl<R: std::io::BufRead> Iterator for ExportReader<R> {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            let Some(next) = self.lines.next() else {
                self.failed = true;
                if self.ended || self.unverified {
                    return None;
                }
                return Some(Err(MemoryError::invalid(format!(
                    "the export ends at line {} without its trailer: it was cut short after {} \
                     records (or written before format version 2); nothing was restored \
                     (`--accept-unverified` restores what it holds)",
                    self.line, self.records
                ))));
            };
            self.line += 1;
            let outcome = match next {
                Err(e) => Err(read_error(self.line, &e)),
                Ok(text) => {
                    self.bytes += text.len() as u64 + 1;
                    if text.trim().is_empty() {
                        continue;
                    }
                    match serde_json::from_str::<ExportTrailer>(&text) {
                        Ok(trailer) if !self.ended => match self.check_trailer(&trailer) {
                            Ok(()) => continue,
                            Err(error) => Err(error),
                        },
                        _ => self.record(&text),
                    }
                }
            };
            self.failed = outcome.is_err();
            return Some(outcome);
        }
    }
}

/// A line that cannot be read: bytes that are not UTF-8 are the input's fault.
fn read_error(line: usize, error: &std::io::Error) -> MemoryError {
    MemoryError::invalid(format!("cannot read line {line} of the export: {error}"))
}

/// One stored record of any contract, verbatim.
///
/// Serialized as a JSON object whose `"kind"` field names the [`RecordKind`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
// Most records of an export are facts and messages: boxing the fact would add an allocation to
// each of them to shrink the rarer kinds.
#[allow(clippy::large_enum_variant)]
pub enum Record {
    /// A vector collection (namespace-level).
    Collection {
        /// Its namespace.
        namespace: Namespace,
        /// Its fixed properties.
        spec: CollectionSpec,
    },
    /// A conversation, with its timestamps and `last_seq`.
    Conversation {
        /// The conversation (its scope inside).
        conversation: Conversation,
    },
    /// A message at its sequence number.
    Message {
        /// Owner.
        scope: Scope,
        /// Its conversation.
        conversation_id: ConversationId,
        /// The message and its seq.
        message: StoredMessage,
    },
    /// A named per-conversation cursor.
    Cursor {
        /// Owner.
        scope: Scope,
        /// Its conversation.
        conversation_id: ConversationId,
        /// The cursor's name.
        name: String,
        /// Its value.
        value: u64,
    },
    /// A working-memory document with its revision.
    WorkingMemory {
        /// Owner.
        scope: Scope,
        /// Which document.
        key: WorkingMemoryKey,
        /// The document.
        memory: WorkingMemory,
    },
    /// A fact, current or superseded history.
    Fact {
        /// The fact (its scope inside).
        fact: Fact,
    },
    /// A vector record of a collection.
    Vector {
        /// Owner.
        scope: Scope,
        /// The collection's name (in the scope's namespace).
        collection: String,
        /// The record.
        record: VectorRecord,
    },
    /// A workflow checkpoint with its version.
    Checkpoint {
        /// Owner.
        scope: Scope,
        /// The checkpoint.
        checkpoint: Checkpoint,
    },
    /// An unexpired cache entry (namespace-level).
    CacheEntry {
        /// Its namespace.
        namespace: Namespace,
        /// Its key.
        key: String,
        /// The bytes.
        value: Vec<u8>,
        /// When it expires (store clock), if ever.
        expires_at: Option<Timestamp>,
    },
}

/// The kinds of [`Record`], in restore order (parents before children).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    /// [`Record::Collection`].
    Collection,
    /// [`Record::Conversation`].
    Conversation,
    /// [`Record::Message`].
    Message,
    /// [`Record::Cursor`].
    Cursor,
    /// [`Record::WorkingMemory`].
    WorkingMemory,
    /// [`Record::Fact`].
    Fact,
    /// [`Record::Vector`].
    Vector,
    /// [`Record::Checkpoint`].
    Checkpoint,
    /// [`Record::CacheEntry`].
    CacheEntry,
}

impl RecordKind {
    /// The name used in exports and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Collection => "collection",
            Self::Conversation => "conversation",
            Self::Message => "message",
            Self::Cursor => "cursor",
            Self::WorkingMemory => "working_memory",
            Self::Fact => "fact",
            Self::Vector => "vector",
            Self::Checkpoint => "checkpoint",
            Self::CacheEntry => "cache_entry",
        }
    }
}

impl fmt::Display for RecordKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Record {
    /// Its kind.
    pub fn kind(&self) -> RecordKind {
        match self {
            Self::Collection { .. } => RecordKind::Collection,
            Self::Conversation { .. } => RecordKind::Conversation,
            Self::Message { .. } => RecordKind::Message,
            Self::Cursor { .. } => RecordKind::Cursor,
            Self::WorkingMemory { .. } => RecordKind::WorkingMemory,
            Self::Fact { .. } => RecordKind::Fact,
            Self::Vector { .. } => RecordKind::Vector,
            Self::Checkpoint { .. } => RecordKind::Checkpoint,
            Self::CacheEntry { .. } => RecordKind::CacheEntry,
        }
    }

    /// The namespace it belongs to.
    pub fn namespace(&self) -> &Namespace {
        match self {
            Self::Collection { namespace, .. } | Self::CacheEntry { namespace, .. } => namespace,
            _ => self.scope().expect("scoped record").namespace(),
        }
    }

    /// Its owner; `None` for namespace-level records (collections, cache entries).
    pub fn scope(&self) -> Option<&Scope> {
        match self {
            Self::Collection { .. } | Self::CacheEntry { .. } => None,
            Self::Conversation { conversation } => Some(&conversation.scope),
            Self::Fact { fact } => Some(&fact.scope),
            Self::Message { scope, .. }
            | Self::Cursor { scope, .. }
            | Self::WorkingMemory { scope, .. }
            | Self::Vector { scope, .. }
            | Self::Checkpoint { scope, .. } => Some(scope),
        }
    }

    /// Sort key of the canonical order: kind (restore order), owner, then identity.
    fn order_key(&self) -> (RecordKind, Option<&Scope>, &str, &str, u64) {
        let (a, b, n) = match self {
            Self::Collection { spec, .. } => (spec.name.as_str(), "", 0),
            Self::Conversation { conversation } => (conversation.id.as_str(), "", 0),
            Self::Message {
                conversation_id,
                message,
                ..
            } => (conversation_id.as_str(), "", message.seq),
            Self::Cursor {
                conversation_id,
                name,
                ..
            } => (conversation_id.as_str(), name.as_str(), 0),
            Self::WorkingMemory { key, .. } => match key {
                WorkingMemoryKey::User => ("", "", 0),
                WorkingMemoryKey::Conversation(id) => (id.as_str(), "", 1),
            },
            Self::Fact { fact } => (fact.id.as_str(), "", 0),
            Self::Vector {
                collection, record, ..
            } => (collection.as_str(), record.id.as_str(), 0),
            Self::Checkpoint { checkpoint, .. } => (checkpoint.id.as_str(), "", 0),
            Self::CacheEntry { key, .. } => (key.as_str(), "", 0),
        };
        (self.kind(), self.scope(), a, b, n)
    }

    /// Checks what can be checked without the store: identifiers, finite vectors, and that
    /// namespace-level records carry no scope mix-ups.
    pub fn validate(&self) -> Result<()> {
        match self {
            Self::Collection { spec, .. } => spec.validate(),
            Self::Cursor { name, .. } => validate_identifier("cursor name", name),
            Self::Vector {
                collection, record, ..
            } => {
                validate_identifier("collection name", collection)?;
                crate::message::check_metadata_depth("vector metadata", &record.metadata)?;
                if record.vector.iter().any(|x| !x.is_finite()) {
                    return Err(MemoryError::invalid(format!(
                        "vector {} holds NaN or infinity",
                        record.id
                    )));
                }
                Ok(())
            }
            Self::Fact { fact } => {
                fact.validate().map_err(|e| {
                    MemoryError::invalid(format!("fact {}: {}", fact.id, reason(&e)))
                })?;
                crate::registry::check_record(fact)
            }
            Self::Checkpoint { checkpoint, .. } => {
                validate_identifier("workflow", &checkpoint.workflow)?;
                crate::message::check_json_depth("checkpoint state", &checkpoint.state)
            }
            Self::CacheEntry { key, .. } => validate_identifier("cache key", key),
            Self::Conversation { conversation } => crate::message::check_metadata_depth(
                "conversation metadata",
                &conversation.metadata,
            ),
            Self::Message { message, .. } => {
                if message.seq == 0 {
                    return Err(MemoryError::invalid("a message's seq starts at 1"));
                }
                message.message.check_json_depth()
            }
            Self::WorkingMemory { .. } => Ok(()),
        }
    }
}

/// The reason an `InvalidInput` gives (its message without the variant's prefix).
fn reason(error: &MemoryError) -> String {
    match error {
        MemoryError::InvalidInput(reason) => reason.clone(),
        other => other.to_string(),
    }
}

/// Checks a batch of records to restore as the writes that made them were checked: each record
/// ([`Record::validate`]), and the messages of each conversation in the batch, whose seqs are
/// distinct and contiguous (a conversation's messages are only ever pruned from its start) and,
/// when the batch holds the conversation, end at its `last_seq`.
pub fn check_batch(records: &[Record]) -> Result<()> {
    records.iter().try_for_each(Record::validate)?;
    let mut seqs: BTreeMap<(&Scope, &ConversationId), Vec<u64>> = BTreeMap::new();
    let mut last_seqs: BTreeMap<(&Scope, &ConversationId), u64> = BTreeMap::new();
    for record in records {
        match record {
            Record::Message {
                scope,
                conversation_id,
                message,
            } => seqs
                .entry((scope, conversation_id))
                .or_default()
                .push(message.seq),
            Record::Conversation { conversation } => {
                last_seqs.insert(
                    (&conversation.scope, &conversation.id),
                    conversation.last_seq,
                );
            }
            _ => {}
        }
    }
    for (key @ (scope, id), seqs) in &mut seqs {
        seqs.sort_unstable();
        let (first, last) = (seqs[0], seqs[seqs.len() - 1]);
        let contiguous = seqs.windows(2).all(|pair| pair[1] == pair[0] + 1);
        let ends_right = last_seqs.get(key).is_none_or(|&last_seq| last == last_seq);
        if !contiguous || !ends_right {
            return Err(MemoryError::invalid(format!(
                "conversation {id} of {scope}: its messages' seqs {first}..={last} ({} messages) \
                 are not one contiguous run{}",
                seqs.len(),
                last_seqs
                    .get(key)
                    .map(|l| format!(" ending at its last seq {l}"))
                    .unwrap_or_default()
            )));
        }
    }
    Ok(())
}

/// Sorts records into the canonical order every export returns: by kind in restore order, then
/// owner, then identity (messages by seq).
pub fn sort_canonical(records: &mut [Record]) {
    records.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
}

/// Export and restore of whole stores, for backups and moves between backends.
///
/// A store lists what it holds by namespace and scope, exports each as [`Record`]s, and restores
/// records verbatim. Expired facts and cache entries are not exported: no read returns them.
#[async_trait]
pub trait TransferStore: Send + Sync {
    /// The namespaces that hold any record.
    ///
    /// # Behavior
    /// - Sorted; a namespace appears when it holds a collection, a live cache entry or any
    ///   scope's record.
    async fn namespaces(&self) -> Result<Vec<Namespace>>;

    /// The scopes of a namespace that own any record.
    ///
    /// # Behavior
    /// - Sorted (the shared scope first); a scope appears when it owns a conversation, a
    ///   working-memory document, an unexpired fact, a vector or a checkpoint, and not otherwise.
    async fn scopes(&self, namespace: &Namespace) -> Result<Vec<Scope>>;

    /// The namespace-level records: its collections and live cache entries.
    ///
    /// # Behavior
    /// - In canonical order ([`sort_canonical`]); expired cache entries are left out.
    async fn export_namespace(&self, namespace: &Namespace) -> Result<Vec<Record>>;

    /// Every record a scope owns.
    ///
    /// # Behavior
    /// - Conversations, messages (verbatim seq, pruned ones absent), cursors, working memory,
    ///   facts with their superseded history, vectors of every collection and checkpoints, in
    ///   canonical order ([`sort_canonical`]); expired facts are left out.
    async fn export_scope(&self, scope: &Scope) -> Result<Vec<Record>>;

    /// Writes records verbatim, all or nothing, and returns how many were written.
    ///
    /// # Behavior
    /// - Ids, seqs, timestamps, revisions and versions are kept: an export of the restored
    ///   scope equals the records restored, and every read answers as in the source.
    /// - A record replaces the stored one with the same identity, so restoring twice is the
    ///   same as restoring once.
    /// - A message, cursor or conversation document whose conversation is neither stored nor
    ///   in the batch, or a vector whose collection is missing, is `NotFound`; a vector of the
    ///   wrong dimension is `InvalidInput`; on any error nothing is written.
    async fn restore(&self, records: Vec<Record>) -> Result<u64>;
}

/// One unit of a copy: a namespace's own records, or one scope's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unit {
    /// Collections and cache entries of a namespace.
    Namespace(Namespace),
    /// Everything a scope owns.
    Scope(Scope),
}

impl Unit {
    /// Its records in `store`.
    pub async fn export<S: TransferStore + ?Sized>(&self, store: &S) -> Result<Vec<Record>> {
        match self {
            Self::Namespace(namespace) => store.export_namespace(namespace).await,
            Self::Scope(scope) => store.export_scope(scope).await,
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Namespace(namespace) => write!(f, "{namespace} (namespace)"),
            Self::Scope(scope) => write!(f, "{scope}"),
        }
    }
}

/// What a store holds, as units in restore order: each namespace's own records, then its scopes.
/// `only` restricts the plan to one namespace.
pub async fn plan<S: TransferStore + ?Sized>(
    store: &S,
    only: Option<&Namespace>,
) -> Result<Vec<Unit>> {
    let namespaces = match only {
        Some(namespace) => vec![namespace.clone()],
        None => store.namespaces().await?,
    };
    let mut units = Vec::new();
    for namespace in namespaces {
        let scopes = store.scopes(&namespace).await?;
        units.push(Unit::Namespace(namespace));
        units.extend(scopes.into_iter().map(Unit::Scope));
    }
    Ok(units)
}

/// What [`copy`] moved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyReport {
    /// Units copied (namespaces and scopes).
    pub units: u64,
    /// Records written.
    pub records: u64,
}

/// Copies every record of `from` (or of one namespace) into `to`, one unit per restore
/// transaction; `progress` hears of each unit as it lands. Re-running it is harmless: restore
/// replaces records with the same identity.
pub async fn copy<A, B, F>(
    from: &A,
    to: &B,
    only: Option<&Namespace>,
    progress: F,
) -> Result<CopyReport>
where
    A: TransferStore + ?Sized,
    B: TransferStore + ?Sized,
    F: FnMut(&Unit, u64),
{
    copy_units(from, to, &plan(from, only).await?, progress).await
}

/// [`copy`] of the given units (from [`plan`]), for callers that show progress against the
/// total; `progress` hears of each unit and the records written for it.
pub async fn copy_units<A, B, F>(
    from: &A,
    to: &B,
    units: &[Unit],
    mut progress: F,
) -> Result<CopyReport>
where
    A: TransferStore + ?Sized,
    B: TransferStore + ?Sized,
    F: FnMut(&Unit, u64),
{
    let mut report = CopyReport::default();
    for unit in units {
        let written = to.restore(unit.export(from).await?).await?;
        progress(unit, written);
        report.units += 1;
        report.records += written;
    }
    Ok(report)
}

/// The records as a restore by `importer` writes them: each fact written by the importer,
/// imported, the file's account kept as its claim ([`Provenance::imported_by`]); every other
/// record as it is. An export of what a restore wrote equals this of what it was given.
///
/// [`Provenance::imported_by`]: crate::Provenance::imported_by
pub fn as_restored_by(
    records: impl IntoIterator<Item = Record>,
    importer: &crate::Principal,
) -> Vec<Record> {
    records
        .into_iter()
        .map(|record| match record {
            Record::Fact { mut fact } => {
                fact.provenance = fact.provenance.imported_by(importer);
                Record::Fact { fact }
            }
            other => other,
        })
        .collect()
}

/// Counts by kind and a SHA-256 over the canonical JSON of a set of records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Digest {
    /// Records per kind.
    pub counts: BTreeMap<RecordKind, u64>,
    /// Lowercase hex SHA-256 of the records' JSON lines in canonical order.
    pub sha256: String,
}

impl Digest {
    /// The digest of `records` (in any order). A fact counts by its provenance's
    /// [`account`](crate::Provenance::account): a restore records the importer as the writer of
    /// what it restores and keeps the file's account, so a copy digests as its source does.
    pub fn of(records: &[Record]) -> Self {
        let mut sorted: Vec<Record> = records
            .iter()
            .cloned()
            .map(|record| match record {
                Record::Fact { mut fact } => {
                    let account = fact.provenance.account();
                    fact.provenance = crate::Provenance::new(account.written_by, account.origin);
                    Record::Fact { fact }
                }
                other => other,
            })
            .collect();
        sort_canonical(&mut sorted);
        let mut hasher = Sha256::new();
        let mut counts = BTreeMap::new();
        for record in &sorted {
            *counts.entry(record.kind()).or_insert(0) += 1;
            let line = serde_json::to_vec(record).expect("records serialize to JSON");
            hasher.update(&line);
            hasher.update(b"\n");
        }
        let sha256 = lowercase_hex(&hasher.finalize());
        Self { counts, sha256 }
    }

    /// Records counted.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }
}

/// A unit whose records differ between two stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The unit.
    pub unit: Unit,
    /// Its digest in the source.
    pub source: Digest,
    /// Its digest in the target.
    pub target: Digest,
}

/// Compares every unit of `from` (or of one namespace) with the same unit in `to`, by counts
/// and content hash; returns the units that differ (empty when the copy is exact).
pub async fn verify<A, B>(from: &A, to: &B, only: Option<&Namespace>) -> Result<Vec<Mismatch>>
where
    A: TransferStore + ?Sized,
    B: TransferStore + ?Sized,
{
    verify_units(from, to, &plan(from, only).await?, |_, _| {}).await
}

/// [`verify`] of the given units (from [`plan`]); `progress` hears of each unit and the
/// records it holds in the source.
pub async fn verify_units<A, B, F>(
    from: &A,
    to: &B,
    units: &[Unit],
    mut progress: F,
) -> Result<Vec<Mismatch>>
where
    A: TransferStore + ?Sized,
    B: TransferStore + ?Sized,
    F: FnMut(&Unit, u64),
{
    let mut mismatches = Vec::new();
    for unit in units {
        let source = Digest::of(&unit.export(from).await?);
        let target = Digest::of(&unit.export(to).await?);
        progress(unit, source.total());
        if source != target {
            mismatches.push(Mismatch {
                unit: unit.clone(),
                source,
                target,
            });
        }
    }
    Ok(mismatches)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    fn scope() -> Scope {
        Scope::new("ns", "ada").unwrap()
    }

    #[test]
    fn header_refuses_other_formats_and_newer_versions() {
        let header = ExportHeader::new("sqlite", Timestamp::from_millis(1));
        header.check().unwrap();
        let newer = ExportHeader {
            version: FORMAT_VERSION + 1,
            ..header.clone()
        };
        assert!(newer.check().unwrap_err().to_string().contains("newer"));
        let other = ExportHeader {
            format: "something".into(),
            ..header
        };
        assert!(other.check().is_err());
    }

    #[test]
    fn export_reader_names_the_line_it_cannot_read_and_stops_there() {
        let header =
            serde_json::to_string(&ExportHeader::new("sqlite", Timestamp::from_millis(1))).unwrap();
        let entry = |key: &str| {
            serde_json::to_string(&Record::CacheEntry {
                namespace: Namespace::new("ns").unwrap(),
                key: key.into(),
                value: vec![1],
                expires_at: None,
            })
            .unwrap()
        };
        let error = |input: &[u8]| match ExportReader::new(input) {
            Ok(_) => panic!("read {:?}", String::from_utf8_lossy(input)),
            Err(e) => {
                assert!(e.is_invalid_input(), "{e}");
                e.to_string()
            }
        };
        assert!(error(b"").contains("empty"));
        assert!(error(b"{}\n").contains("line 1"));
        assert!(error(b"\xff\n").contains("line 1"));

        // Blank lines are skipped; a bad record names its line, and nothing after it is read.
        let text = format!("{header}\n\n{}\nnot json\n{}\n", entry("a"), entry("b"));
        let mut reader = ExportReader::new(text.as_bytes()).unwrap();
        assert!(reader.next().unwrap().is_ok());
        let bad = reader.next().unwrap().unwrap_err();
        assert!(bad.to_string().contains("line 4"), "{bad}");
        assert!(reader.next().is_none());

        // A record that decodes but is invalid is refused with its line too.
        let text = format!("{header}\n{}\n", entry(""));
        let invalid = ExportReader::new(text.as_bytes())
            .unwrap()
            .next()
            .unwrap()
            .unwrap_err();
        assert!(invalid.to_string().contains("line 2"), "{invalid}");
        assert_eq!(
            ExportReader::new(text.as_bytes()).unwrap().bytes_read(),
            header.len() as u64 + 1
        );
    }

    /// An export whose lines end in CRLF reads and verifies as the original does.
    #[test]
    fn an_export_with_crlf_line_ends_verifies_like_the_original() {
        let mut writer =
            ExportWriter::new(Vec::new(), &ExportHeader::new("memory", Timestamp::EPOCH)).unwrap();
        for key in ["a", "b"] {
            writer
                .write(&Record::CacheEntry {
                    namespace: Namespace::new("ns").unwrap(),
                    key: key.into(),
                    value: b"line one\r\nline two".to_vec(),
                    expires_at: None,
                })
                .unwrap();
        }
        let lf = String::from_utf8(writer.finish().unwrap()).unwrap();
        let crlf = lf.replace('\n', "\r\n");
        let read = |text: &str| {
            ExportReader::new(text.as_bytes())
                .unwrap()
                .collect::<Result<Vec<_>>>()
                .unwrap()
        };
        assert_eq!(read(&crlf), read(&lf));
        assert_eq!(read(&lf).len(), 2);
        // A changed record is still caught.
        let changed = crlf.replacen("\"a\"", "\"c\"", 1);
        assert!(ExportReader::new(changed.as_bytes())
            .unwrap()
            .collect::<Result<Vec<_>>>()
            .is_err());
    }

    #[test]
    fn canonical_order_puts_parents_first_and_messages_by_seq() {
        let message = |seq| Record::Message {
            scope: scope(),
            conversation_id: ConversationId::new("c").unwrap(),
            message: StoredMessage {
                seq,
                message: Message::user("x"),
            },
        };
        let conversation = Record::Conversation {
            conversation: crate::NewConversation {
                id: Some(ConversationId::new("c").unwrap()),
                ..Default::default()
            }
            .into_conversation(&scope(), Timestamp::from_millis(0)),
        };
        let collection = Record::Collection {
            namespace: scope().namespace().clone(),
            spec: CollectionSpec::new("docs", 3, "m"),
        };
        let mut records = vec![message(10), message(2), conversation.clone(), collection];
        sort_canonical(&mut records);
        let kinds: Vec<_> = records.iter().map(Record::kind).collect();
        assert_eq!(
            kinds,
            [
                RecordKind::Collection,
                RecordKind::Conversation,
                RecordKind::Message,
                RecordKind::Message
            ]
        );
        let seqs: Vec<u64> = records
            .iter()
            .filter_map(|r| match r {
                Record::Message { message, .. } => Some(message.seq),
                _ => None,
            })
            .collect();
        assert_eq!(seqs, [2, 10]);
        assert_eq!(records[1], conversation);
    }

    #[test]
    fn records_round_trip_through_json_lines_with_a_kind_tag() {
        let record = Record::Vector {
            scope: scope(),
            collection: "docs".into(),
            record: VectorRecord::new(
                crate::VectorId::new("v").unwrap(),
                vec![0.1, f32::MIN_POSITIVE, 1e-40, -3.402_823_5e38],
            ),
        };
        let line = serde_json::to_string(&record).unwrap();
        assert!(line.starts_with(r#"{"kind":"vector""#), "{line}");
        let back: Record = serde_json::from_str(&line).unwrap();
        assert_eq!(back, record);
    }

    #[test]
    fn digest_ignores_order_and_sees_every_change() {
        let fact = |text: &str| Record::Fact {
            fact: crate::NewFact::new(text).into_fact(&scope(), Timestamp::from_millis(5)),
        };
        let (a, b) = (fact("likes tea"), fact("likes coffee"));
        let one = Digest::of(&[a.clone(), b.clone()]);
        assert_eq!(one, Digest::of(&[b.clone(), a.clone()]));
        assert_eq!(one.total(), 2);
        let Record::Fact { fact: mut changed } = b else {
            unreachable!()
        };
        changed.updated_at = Timestamp::from_millis(6);
        assert_ne!(one, Digest::of(&[a, Record::Fact { fact: changed }]));
    }

    /// A fact of a version 1 or 2 file (no provenance, no valid time) reads as unrecorded and
    /// always true, and a version 3 fact keeps what it carries.
    #[test]
    fn facts_of_older_formats_read_as_unrecorded() {
        let older = r#"{"kind":"fact","fact":{"id":"f1","scope":{"namespace":"app","subject":"u"},
            "text":"Likes tea","kind":null,"key":null,"tags":[],"score":null,"source":null,
            "embedding":null,"created_at":5,"updated_at":5,"expires_at":null,"valid_to":null,
            "superseded_by":null}}"#;
        let Record::Fact { fact } = serde_json::from_str(older).unwrap() else {
            panic!("a fact record");
        };
        assert_eq!(fact.provenance, crate::Provenance::default());
        assert_eq!((fact.valid_from, fact.valid_until), (None, None));
        assert!(fact.valid_at(Timestamp::from_millis(5)));

        let mut current = fact.clone();
        current.provenance =
            crate::Provenance::new(crate::Principal::agent("a").unwrap(), crate::Origin::User);
        current.valid_from = Some(Timestamp::from_millis(1));
        let line = serde_json::to_string(&Record::Fact {
            fact: current.clone(),
        })
        .unwrap();
        let Record::Fact { fact: read } = serde_json::from_str(&line).unwrap() else {
            panic!("a fact record");
        };
        assert_eq!(read, current);
    }

    #[test]
    fn validate_rejects_non_finite_vectors() {
        let record = Record::Vector {
            scope: scope(),
            collection: "docs".into(),
            record: VectorRecord::new(crate::VectorId::new("v").unwrap(), vec![f32::NAN]),
        };
        assert!(record.validate().unwrap_err().is_invalid_input());
    }
}
