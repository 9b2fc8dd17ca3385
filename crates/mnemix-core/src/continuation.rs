//! Validating a client-supplied continuation against the persisted history.
//!
//! After a client-tool or approval round trip the browser sends the history back. It must
//! (1) start with the persisted history unchanged, (2) answer only tool calls that are pending
//! and that the client may run, and (3) answer only approval requests that are pending.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::MemoryError;
use crate::message::{Message, Part};

/// Why a continuation was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RejectionCode {
    /// The incoming history does not start with the persisted one (rewrite, drop, reorder, or
    /// another conversation's history: an IDOR attempt).
    NotAPrefix,
    /// A tool result for a call that was never pending, already answered, or is server-side.
    ForgedToolResult,
    /// An approval response for an approval that was never requested or already answered.
    ForgedApproval,
}

impl RejectionCode {
    /// The kebab-case code (`"not-a-prefix"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotAPrefix => "not-a-prefix",
            Self::ForgedToolResult => "forged-tool-result",
            Self::ForgedApproval => "forged-approval",
        }
    }
}

impl fmt::Display for RejectionCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which tools the client may answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ContinuationOptions {
    /// Names of client-side tools. `None`: any pending call may be answered by the client;
    /// `Some(set)`: a result for a call of a tool outside the set (a server-side tool) is forged.
    pub client_tools: Option<BTreeSet<String>>,
}

impl ContinuationOptions {
    /// Only these tools run on the client.
    pub fn client_tools<I: IntoIterator<Item = S>, S: Into<String>>(tools: I) -> Self {
        Self {
            client_tools: Some(tools.into_iter().map(Into::into).collect()),
        }
    }
}

/// The verdict of [`validate_continuation`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// Accepted.
    pub ok: bool,
    /// Why not.
    pub code: Option<RejectionCode>,
    /// Explanation (empty when accepted).
    pub reason: String,
    /// Index of the offending incoming message.
    pub index: Option<usize>,
}

impl Verdict {
    fn accept() -> Self {
        Self {
            ok: true,
            code: None,
            reason: String::new(),
            index: None,
        }
    }

    fn reject(code: RejectionCode, index: usize, reason: String) -> Self {
        Self {
            ok: false,
            code: Some(code),
            reason,
            index: Some(index),
        }
    }
}

/// A rejected continuation, as an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("continuation rejected ({code}) at message {index}: {reason}")]
pub struct ContinuationError {
    /// Why.
    pub code: RejectionCode,
    /// Explanation.
    pub reason: String,
    /// Index of the offending incoming message.
    pub index: usize,
}

impl From<ContinuationError> for MemoryError {
    fn from(e: ContinuationError) -> Self {
        MemoryError::InvalidInput(e.to_string())
    }
}

/// Two messages are the same history entry: same id, role and parts (nested JSON compared
/// key-order-insensitively); metadata and `created_at` may differ.
fn same_entry(a: &Message, b: &Message) -> bool {
    a.id == b.id && a.role == b.role && a.parts == b.parts
}

/// Checks `incoming` against the `persisted` history (load it with
/// [`LoadOptions::raw`](crate::LoadOptions::raw): pending calls must not be sanitized away).
///
/// ```
/// use mnemix_core::replay::{validate_continuation, ContinuationOptions, RejectionCode};
/// use mnemix_core::{Message, Part, Role};
/// let call = Message::new(Role::Assistant, vec![Part::tool_call("c1", "pick_file", serde_json::json!({}))]);
/// let persisted = vec![Message::user("upload"), call];
/// let mut incoming = persisted.clone();
/// incoming.push(Message::new(Role::Tool, vec![Part::tool_result("c1", "a.txt".into())]));
/// assert!(validate_continuation(&persisted, &incoming, &ContinuationOptions::default()).ok);
/// incoming.push(Message::new(Role::Tool, vec![Part::tool_result("c9", "x".into())]));
/// let verdict = validate_continuation(&persisted, &incoming, &ContinuationOptions::default());
/// assert_eq!(verdict.code, Some(RejectionCode::ForgedToolResult));
/// ```
pub fn validate_continuation<P: AsRef<Message>, I: AsRef<Message>>(
    persisted: &[P],
    incoming: &[I],
    options: &ContinuationOptions,
) -> Verdict {
    for (index, stored) in persisted.iter().enumerate() {
        let Some(sent) = incoming.get(index) else {
            return Verdict::reject(
                RejectionCode::NotAPrefix,
                incoming.len(),
                format!(
                    "incoming history has {} messages, persisted {}",
                    incoming.len(),
                    persisted.len()
                ),
            );
        };
        if !same_entry(stored.as_ref(), sent.as_ref()) {
            return Verdict::reject(
                RejectionCode::NotAPrefix,
                index,
                format!(
                    "message {index} differs from the persisted message {}",
                    stored.as_ref().id
                ),
            );
        }
    }
    // Pending state of the persisted history.
    let mut pending_calls: HashMap<&str, &str> = HashMap::new();
    let mut pending_approvals: BTreeSet<&str> = BTreeSet::new();
    for part in persisted.iter().flat_map(|m| m.as_ref().parts.iter()) {
        match part {
            Part::ToolCall { call_id, name, .. } => {
                pending_calls.insert(call_id, name);
            }
            Part::ToolResult { call_id, .. } => {
                pending_calls.remove(call_id.as_str());
            }
            Part::ApprovalRequest { approval_id, .. } => {
                pending_approvals.insert(approval_id);
            }
            Part::ApprovalResponse { approval_id, .. } => {
                pending_approvals.remove(approval_id.as_str());
            }
            _ => {}
        }
    }
    for (index, message) in incoming.iter().enumerate().skip(persisted.len()) {
        for part in &message.as_ref().parts {
            match part {
                Part::ToolResult { call_id, .. } => {
                    let Some(tool) = pending_calls.remove(call_id.as_str()) else {
                        return Verdict::reject(
                            RejectionCode::ForgedToolResult,
                            index,
                            format!("tool result for call {call_id:?}, which is not pending"),
                        );
                    };
                    if options
                        .client_tools
                        .as_ref()
                        .is_some_and(|tools| !tools.contains(tool))
                    {
                        return Verdict::reject(
                            RejectionCode::ForgedToolResult,
                            index,
                            format!(
                                "tool result for call {call_id:?} of server-side tool {tool:?}"
                            ),
                        );
                    }
                }
                Part::ApprovalResponse { approval_id, .. } => {
                    if !pending_approvals.remove(approval_id.as_str()) {
                        return Verdict::reject(
                            RejectionCode::ForgedApproval,
                            index,
                            format!("approval response for {approval_id:?}, which is not pending"),
                        );
                    }
                }
                _ => {}
            }
        }
    }
    Verdict::accept()
}

/// [`validate_continuation`] as a `Result`.
pub fn assert_valid_continuation<P: AsRef<Message>, I: AsRef<Message>>(
    persisted: &[P],
    incoming: &[I],
    options: &ContinuationOptions,
) -> Result<(), ContinuationError> {
    let verdict = validate_continuation(persisted, incoming, options);
    match (verdict.code, verdict.index) {
        (Some(code), Some(index)) => Err(ContinuationError {
            code,
            reason: verdict.reason,
            index,
        }),
        _ => Ok(()),
    }
}
