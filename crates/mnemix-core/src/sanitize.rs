//! Making loaded history replay-safe: [`sanitize_conversation`] and the independent check
//! [`is_replay_safe`].
//!
//! A *tool turn* is an assistant message with tool calls followed by its *tool-side run*: the
//! messages right after it that are `Tool` messages or `User` messages made only of approval
//! responses. Providers accept a history only if every call of a tool turn is answered by
//! exactly one result inside its run, results and approval responses answer something of that
//! turn, and approval requests point at a call of their own message.

use std::collections::HashSet;

use crate::message::{Message, Part, Role};

fn has_tool_calls(message: &Message) -> bool {
    message.role == Role::Assistant
        && message
            .parts
            .iter()
            .any(|p| matches!(p, Part::ToolCall { .. }))
}

fn is_tool_side(message: &Message) -> bool {
    match message.role {
        Role::Tool => true,
        Role::User => {
            !message.parts.is_empty()
                && message
                    .parts
                    .iter()
                    .all(|p| matches!(p, Part::ApprovalResponse { .. }))
        }
        _ => false,
    }
}

/// Drops what a crash or a bad client left incomplete, so the history can be replayed to a
/// provider: tool calls without a result (with their approval requests), results and approval
/// responses that answer nothing, repeated answers, and the messages this leaves empty (a
/// `Tool` message left without a result is dropped too).
///
/// Pure and idempotent; a replay-safe history comes back unchanged. Works on [`Message`]s and on
/// [`StoredMessage`](crate::StoredMessage)s alike.
///
/// ```
/// use mnemix_core::replay::sanitize_conversation;
/// use mnemix_core::{Message, Part, Role};
/// let call = Message::new(Role::Assistant, vec![Part::tool_call("c1", "search", serde_json::json!({}))]);
/// // crash: the tool result never landed
/// let history = vec![Message::user("find it"), call, Message::user("well?")];
/// let safe = sanitize_conversation(history);
/// assert_eq!(safe.len(), 2);
/// ```
pub fn sanitize_conversation<M: AsRef<Message> + AsMut<Message>>(messages: Vec<M>) -> Vec<M> {
    let mut out = Vec::with_capacity(messages.len());
    let mut iter = messages.into_iter().peekable();
    while let Some(mut head) = iter.next() {
        let was_empty = head.as_ref().parts.is_empty();
        if !has_tool_calls(head.as_ref()) {
            strip(head.as_mut(), &mut Answers::default());
            push_unless_emptied(&mut out, head, was_empty);
            continue;
        }
        let mut run = Vec::new();
        while iter.peek().is_some_and(|m| is_tool_side(m.as_ref())) {
            run.extend(iter.next());
        }
        let answered = answered_calls(head.as_ref(), &run);
        let (calls, approvals) = keep_answered(head.as_mut(), &answered);
        push_unless_emptied(&mut out, head, false);
        let mut answers = Answers {
            calls,
            approvals,
            ..Answers::default()
        };
        for mut message in run {
            let was_empty = message.as_ref().parts.is_empty();
            strip(message.as_mut(), &mut answers);
            push_unless_emptied(&mut out, message, was_empty);
        }
    }
    out
}

/// Call ids of `head` that get a result inside `run`.
fn answered_calls<M: AsRef<Message>>(head: &Message, run: &[M]) -> HashSet<String> {
    let calls: HashSet<&str> = head
        .parts
        .iter()
        .filter_map(|p| match p {
            Part::ToolCall { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    run.iter()
        .flat_map(|m| m.as_ref().parts.iter())
        .filter_map(|p| match p {
            Part::ToolResult { call_id, .. } if calls.contains(call_id.as_str()) => {
                Some(call_id.clone())
            }
            _ => None,
        })
        .collect()
}

/// Keeps in `head` only answered calls (first occurrence) and approval requests for them, and
/// drops results and responses (a turn's head asks, it does not answer); returns the kept call
/// ids and approval ids.
fn keep_answered(
    head: &mut Message,
    answered: &HashSet<String>,
) -> (HashSet<String>, HashSet<String>) {
    let mut calls = HashSet::new();
    let mut approvals = HashSet::new();
    head.parts.retain(|p| match p {
        Part::ToolCall { call_id, .. } => {
            answered.contains(call_id) && calls.insert(call_id.clone())
        }
        Part::ToolResult { .. } | Part::ApprovalResponse { .. } => false,
        _ => true,
    });
    head.parts.retain(|p| match p {
        Part::ApprovalRequest {
            approval_id,
            call_id,
        } => calls.contains(call_id) && approvals.insert(approval_id.clone()),
        _ => true,
    });
    (calls, approvals)
}

/// What a tool turn may answer, and what its run answered so far.
#[derive(Default)]
struct Answers {
    calls: HashSet<String>,
    approvals: HashSet<String>,
    results: HashSet<String>,
    responses: HashSet<String>,
}

/// For a message that does not head a tool turn: keeps the first result per open call and the
/// first response per open approval of the turn; drops every other result and response, and
/// any tool call or approval request (only an assistant message heading a turn may hold those).
fn strip(message: &mut Message, answers: &mut Answers) {
    message.parts.retain(|p| match p {
        Part::ToolResult { call_id, .. } => {
            answers.calls.contains(call_id) && answers.results.insert(call_id.clone())
        }
        Part::ApprovalResponse { approval_id, .. } => {
            answers.approvals.contains(approval_id) && answers.responses.insert(approval_id.clone())
        }
        Part::ToolCall { .. } | Part::ApprovalRequest { .. } => false,
        _ => true,
    });
}

/// Pushes `message` unless sanitizing emptied it (a message that was empty to begin with is
/// kept), or it is a `Tool` message without results.
fn push_unless_emptied<M: AsRef<Message>>(out: &mut Vec<M>, message: M, was_empty: bool) {
    let m = message.as_ref();
    let emptied = m.parts.is_empty() && !was_empty;
    let resultless_tool =
        m.role == Role::Tool && !m.parts.iter().any(|p| matches!(p, Part::ToolResult { .. }));
    if !emptied && !resultless_tool {
        out.push(message);
    }
}

/// Whether a history can be replayed to a provider as it is: checked as a state machine, written
/// independently of [`sanitize_conversation`] so each checks the other.
pub fn is_replay_safe<M: AsRef<Message>>(messages: &[M]) -> bool {
    // The open tool turn: calls not yet answered, calls answered, approvals requested, answered.
    struct Turn {
        open: HashSet<String>,
        done: HashSet<String>,
        approvals: HashSet<String>,
        approved: HashSet<String>,
    }
    let mut turn: Option<Turn> = None;
    for message in messages.iter().map(AsRef::as_ref) {
        if is_tool_side(message) {
            let Some(t) = turn.as_mut() else { return false };
            if message.role == Role::Tool
                && !message
                    .parts
                    .iter()
                    .any(|p| matches!(p, Part::ToolResult { .. }))
            {
                return false;
            }
            for part in &message.parts {
                match part {
                    Part::ToolResult { call_id, .. } => {
                        if !t.open.remove(call_id) {
                            return false;
                        }
                        t.done.insert(call_id.clone());
                    }
                    Part::ApprovalResponse { approval_id, .. } => {
                        if !t.approvals.contains(approval_id)
                            || !t.approved.insert(approval_id.clone())
                        {
                            return false;
                        }
                    }
                    Part::ApprovalRequest { .. } | Part::ToolCall { .. } => return false,
                    _ => {}
                }
            }
            continue;
        }
        if turn.take().is_some_and(|t| !t.open.is_empty()) {
            return false;
        }
        let mut calls = HashSet::new();
        for part in &message.parts {
            match part {
                Part::ToolCall { call_id, .. } => {
                    if message.role != Role::Assistant || !calls.insert(call_id.clone()) {
                        return false;
                    }
                }
                Part::ToolResult { .. } | Part::ApprovalResponse { .. } => return false,
                _ => {}
            }
        }
        let mut approvals = HashSet::new();
        for part in &message.parts {
            if let Part::ApprovalRequest {
                approval_id,
                call_id,
            } = part
            {
                if !calls.contains(call_id) || !approvals.insert(approval_id.clone()) {
                    return false;
                }
            }
        }
        if !calls.is_empty() {
            turn = Some(Turn {
                open: calls,
                done: HashSet::new(),
                approvals,
                approved: HashSet::new(),
            });
        }
    }
    turn.is_none_or(|t| t.open.is_empty())
}
