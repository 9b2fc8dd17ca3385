//! Fuzz targets for everything that reads input it does not control.
//!
//! Each [`Target`] turns arbitrary bytes into a call and asserts the properties the call
//! promises; a panic is a finding. The same checks run three ways:
//! - under AFL++ (`cargo xtask fuzz`), coverage-guided, through the `mnemix-fuzz-afl` binary;
//! - in the workspace's tests, over the committed corpus (`corpus/TARGET/`) and a few thousand
//!   pseudo-random inputs, so a regression shows without AFL++;
//! - by hand: `mnemix_fuzz::Target::Cursor.check(b"12:abc")`.
//!
//! ```
//! use mnemix_fuzz::Target;
//! for target in Target::ALL {
//!     target.check(b"{}\n[]"); // returns: no property failed
//! }
//! ```

use std::collections::BTreeSet;

use arbitrary::{Result as Generated, Unstructured};
use mnemix_core::adapter::sort_canonical;
use mnemix_core::adapter::{check_page, Cursor};
use mnemix_core::replay::assert_valid_continuation;
use mnemix_core::replay::{
    is_replay_safe, sanitize_conversation, validate_continuation, ContinuationOptions,
};
use mnemix_core::transfer::Record;
use mnemix_core::transfer::{Digest, ExportReader};
use mnemix_core::{Filter, Message, MessageId, Metadata, Part, Role, StoredMessage, Timestamp};
use serde_json::json;

/// One fuzz target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// [`sanitize_conversation`] over generated histories.
    Sanitize,
    /// [`validate_continuation`] over a generated history and a generated continuation.
    Continuation,
    /// A filter and a metadata object, as JSON, through [`Filter::validate`] and
    /// [`Filter::matches`].
    Filter,
    /// An export file through [`ExportReader`].
    Export,
    /// A page cursor through [`Cursor::decode`] and [`check_page`].
    Cursor,
    /// A stored message body (as every backend keeps it) through serde.
    Message,
}

impl Target {
    /// Every target, in the order `cargo xtask fuzz` runs them.
    pub const ALL: [Self; 6] = [
        Self::Sanitize,
        Self::Continuation,
        Self::Filter,
        Self::Export,
        Self::Cursor,
        Self::Message,
    ];

    /// The target's name: its corpus directory and the binary's argument.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sanitize => "sanitize",
            Self::Continuation => "continuation",
            Self::Filter => "filter",
            Self::Export => "export",
            Self::Cursor => "cursor",
            Self::Message => "message",
        }
    }

    /// The target named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Runs the target on one input; panics when a property fails.
    pub fn check(self, data: &[u8]) {
        match self {
            Self::Sanitize => {
                if let Ok(history) = history(&mut Unstructured::new(data), "m") {
                    check_sanitize(history);
                }
            }
            Self::Continuation => check_continuation(data),
            Self::Filter => check_filter(data),
            Self::Export => check_export(data),
            Self::Cursor => check_cursor(data),
            Self::Message => check_message(data),
        }
    }
}

/// Repair keeps only what is replay-safe, removes nothing from a safe history, drops messages
/// and parts but never reorders or invents them, and is idempotent.
fn check_sanitize(history: Vec<Message>) {
    let safe = sanitize_conversation(history.clone());
    assert!(
        is_replay_safe(&safe),
        "sanitized history is not replay-safe"
    );
    assert_eq!(
        sanitize_conversation(safe.clone()),
        safe,
        "sanitizing twice changed the history"
    );
    if is_replay_safe(&history) {
        assert_eq!(safe, history, "a replay-safe history was changed");
    }
    let mut originals = history.iter();
    for kept in &safe {
        let original = originals
            .find(|m| m.id == kept.id)
            .expect("sanitized messages are the input's, in order");
        assert_eq!(kept.role, original.role);
        let mut parts = original.parts.iter();
        for part in &kept.parts {
            assert!(
                parts.any(|p| p == part),
                "sanitize invented or reordered a part"
            );
        }
    }
    // Stored messages (with seqs) are repaired exactly as bare ones.
    let stored: Vec<StoredMessage> = history
        .into_iter()
        .zip(1..)
        .map(|(message, seq)| StoredMessage { seq, message })
        .collect();
    let repaired: Vec<Message> = sanitize_conversation(stored)
        .into_iter()
        .map(|s| s.message)
        .collect();
    assert_eq!(repaired, safe, "stored messages were repaired differently");
}

/// The verdict is well-formed and agrees with its `Result` form; a history continues itself;
/// an accepted continuation starts with the persisted history, and each of its prefixes that
/// still holds that history is accepted too.
fn check_continuation(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok((persisted, incoming, options)) = continuation(&mut u) else {
        return;
    };
    let verdict = validate_continuation(&persisted, &incoming, &options);
    assert_eq!(verdict.ok, verdict.code.is_none());
    assert_eq!(verdict.ok, verdict.index.is_none());
    assert_eq!(verdict.ok, verdict.reason.is_empty());
    assert_eq!(
        verdict.ok,
        assert_valid_continuation(&persisted, &incoming, &options).is_ok()
    );
    assert!(validate_continuation(&persisted, &persisted, &options).ok);
    if let Some(index) = verdict.index {
        assert!(index <= incoming.len(), "rejection index past the input");
    }
    if verdict.ok {
        assert!(incoming.len() >= persisted.len());
        for (stored, sent) in persisted.iter().zip(&incoming) {
            assert_eq!((&stored.id, stored.role), (&sent.id, sent.role));
            assert_eq!(stored.parts, sent.parts);
        }
        for end in persisted.len()..incoming.len() {
            assert!(
                validate_continuation(&persisted, &incoming[..end], &options).ok,
                "a prefix of an accepted continuation was rejected"
            );
        }
    }
}

/// Input: a filter as JSON, a newline, a metadata object as JSON. A valid filter survives a
/// JSON round trip, and its combinators obey their laws on the metadata.
fn check_filter(data: &[u8]) {
    let (filter, metadata) = match data.iter().position(|b| *b == b'\n') {
        Some(newline) => (&data[..newline], &data[newline + 1..]),
        None => (data, &b"{}"[..]),
    };
    let Ok(filter) = serde_json::from_slice::<Filter>(filter) else {
        return;
    };
    if filter.validate().is_err() {
        return;
    }
    let text = serde_json::to_string(&filter).expect("a filter serializes");
    let back: Filter = serde_json::from_str(&text).expect("a serialized filter reads back");
    assert_eq!(back, filter, "filter changed in a JSON round trip");
    let Ok(metadata) = serde_json::from_slice::<Metadata>(metadata) else {
        return;
    };
    let matched = filter.matches(&metadata);
    assert_eq!(
        Filter::not(filter.clone()).matches(&metadata),
        !matched,
        "not"
    );
    assert_eq!(
        Filter::and([filter.clone()]).matches(&metadata),
        matched,
        "and of one"
    );
    assert_eq!(
        Filter::or([filter.clone()]).matches(&metadata),
        matched,
        "or of one"
    );
    assert!(Filter::and([]).matches(&metadata), "and of none");
    assert!(!Filter::or([]).matches(&metadata), "or of none");
    let and_true = Filter::and([filter.clone(), Filter::and([])]).matches(&metadata);
    assert_eq!(and_true, matched, "and with everything");
    if let Filter::Eq { path, value } = &filter {
        let ne = Filter::Ne {
            path: path.clone(),
            value: value.clone(),
        };
        assert_eq!(ne.matches(&metadata), !matched, "ne is not(eq)");
    }
}

/// Every record the reader accepts is valid, survives a JSON round trip, and can be sorted and
/// digested; the reader stops at its first error, which is always `InvalidInput`.
fn check_export(data: &[u8]) {
    let Ok(reader) = ExportReader::new(data) else {
        return;
    };
    let mut records = Vec::new();
    let mut failed = false;
    for record in reader {
        assert!(!failed, "the reader went on after an error");
        match record {
            Ok(record) => {
                record.validate().expect("an accepted record is valid");
                let text = serde_json::to_string(&record).expect("a record serializes");
                let back: Record = serde_json::from_str(&text).expect("a record reads back");
                assert_eq!(back, record, "record changed in a JSON round trip");
                records.push(record);
            }
            Err(e) => {
                assert!(e.is_invalid_input(), "unexpected error kind: {e}");
                failed = true;
            }
        }
    }
    // What `verify` and the CLI do with a whole export.
    let digest = Digest::of(&records);
    assert_eq!(digest.total(), records.len() as u64);
    sort_canonical(&mut records);
}

/// A cursor decodes only into one that encodes back to an equal cursor; `check_page` agrees
/// with `decode`.
fn check_cursor(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Cursor::decode(text) {
        Ok(cursor) => {
            assert_eq!(Cursor::decode(&cursor.encode()).ok(), Some(cursor));
            assert!(check_page(None, Some(text)).is_ok());
        }
        Err(e) => {
            assert!(e.is_invalid_input());
            assert!(check_page(None, Some(text)).is_err());
        }
    }
}

/// A stored message body decodes only into a message that encodes back to an equal one, bare
/// and with its seq (as exports carry it).
fn check_message(data: &[u8]) {
    if let Ok(message) = serde_json::from_slice::<Message>(data) {
        let text = serde_json::to_string(&message).expect("a message serializes");
        let back: Message = serde_json::from_str(&text).expect("a message reads back");
        assert_eq!(back, message, "message changed in a JSON round trip");
        assert!(back.same_content(&message));
    }
    if let Ok(stored) = serde_json::from_slice::<StoredMessage>(data) {
        let text = serde_json::to_string(&stored).expect("a stored message serializes");
        let back: StoredMessage = serde_json::from_str(&text).expect("a stored message reads back");
        assert_eq!(back, stored, "stored message changed in a JSON round trip");
    }
}

// ---- generators: few distinct ids, so that calls, results and approvals meet ----

const IDS: [&str; 4] = ["a", "b", "c", "d"];
const TOOLS: [&str; 2] = ["search", "pick_file"];

fn id(u: &mut Unstructured<'_>) -> Generated<String> {
    Ok((*u.choose(&IDS)?).to_owned())
}

fn part(u: &mut Unstructured<'_>) -> Generated<Part> {
    Ok(match u.int_in_range(0..=6)? {
        0 => Part::text("hi"),
        1 => Part::tool_call(id(u)?, *u.choose(&TOOLS)?, json!({})),
        2 => Part::ToolResult {
            call_id: id(u)?,
            output: json!("ok"),
            is_error: u.arbitrary()?,
        },
        3 => Part::approval_request(id(u)?, id(u)?),
        4 => Part::approval_response(id(u)?, u.arbitrary()?),
        5 => Part::Reasoning {
            text: "because".to_owned(),
        },
        _ => Part::File {
            media_type: "image/png".to_owned(),
            source: mnemix_core::FileSource::Url("https://example.com/a.png".to_owned()),
        },
    })
}

fn message(u: &mut Unstructured<'_>, id: String) -> Generated<Message> {
    let role = *u.choose(&[Role::System, Role::User, Role::Assistant, Role::Tool])?;
    let parts = (0..u.int_in_range(0..=3)?)
        .map(|_| part(u))
        .collect::<Generated<Vec<_>>>()?;
    Ok(Message {
        id: MessageId::new(id).expect("generated ids are valid"),
        role,
        parts,
        created_at: Timestamp::from_millis(0),
        metadata: Metadata::new(),
    })
}

/// Up to 8 messages with ids `{prefix}0`, `{prefix}1`, …
fn history(u: &mut Unstructured<'_>, prefix: &str) -> Generated<Vec<Message>> {
    (0..u.int_in_range(0..=8)?)
        .map(|n| message(u, format!("{prefix}{n}")))
        .collect()
}

/// A persisted history, and an incoming one that mostly continues it (sometimes altered), with
/// the client tools named or not.
fn continuation(
    u: &mut Unstructured<'_>,
) -> Generated<(Vec<Message>, Vec<Message>, ContinuationOptions)> {
    let persisted = history(u, "p")?;
    let mut incoming = persisted.clone();
    match u.int_in_range(0..=5)? {
        0 => incoming.truncate(u.choose_index(persisted.len() + 1)?),
        1 if !incoming.is_empty() => {
            let at = u.choose_index(incoming.len())?;
            incoming[at] = message(u, format!("p{at}"))?;
        }
        _ => {}
    }
    incoming.extend(history(u, "n")?);
    let options = {
        let mut value = ContinuationOptions::default();
        value.client_tools = if u.arbitrary()? {
            Some(BTreeSet::from([TOOLS[1].to_owned()]))
        } else {
            None
        };
        value
    };
    Ok((persisted, incoming, options))
}
