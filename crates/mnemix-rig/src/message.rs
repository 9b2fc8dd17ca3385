//! rig messages as our messages and back.
//!
//! A rig [`Message`] is stored as one of our messages whose role and parts say what it holds —
//! text, tool calls, tool results, reasoning — so our engine, search, sanitizer and CLI read it
//! like any other, and whose metadata keeps the rig message whole under [`RIG_MESSAGE_KEY`]:
//! images, documents, citations and provider-native fields have no part of ours, and a rig
//! history must load back exactly as it was appended. A message another program wrote (no
//! such key) is translated from its parts.

use std::collections::HashMap;

use mnemix_core::{Message as StoredMessage, Metadata, Part, Role};
use rig_core::completion::message::{
    AssistantContent, AssistantMessage, CallId, Message, Text, ToolName, ToolResultContent,
    UserContent,
};
use serde_json::Value;

/// The metadata key under which a message keeps the rig message it was made from.
pub const RIG_MESSAGE_KEY: &str = "rig_message";

/// The name a tool result gets when the call it answers is not in the history (rig's results
/// name their tool; ours do not).
const UNKNOWN_TOOL: &str = "unknown_tool";

/// Our message for a rig message: role and parts for everyone, the rig message whole in the
/// metadata.
pub fn to_stored(message: &Message) -> Result<StoredMessage, serde_json::Error> {
    let (role, parts) = match message {
        Message::System { content } => (Role::System, vec![Part::text(content.clone())]),
        Message::User { content } => {
            let only_results = !content.is_empty()
                && content
                    .iter()
                    .all(|c| matches!(c, UserContent::ToolResult(_)));
            let role = if only_results { Role::Tool } else { Role::User };
            (role, content.iter().filter_map(user_part).collect())
        }
        Message::Assistant(turn) => (
            Role::Assistant,
            turn.content.iter().filter_map(assistant_part).collect(),
        ),
    };
    let mut metadata = Metadata::new();
    metadata.insert(RIG_MESSAGE_KEY.to_owned(), serde_json::to_value(message)?);
    let mut stored = StoredMessage::new(role, parts);
    stored.metadata = metadata;
    Ok(stored)
}

fn user_part(content: &UserContent) -> Option<Part> {
    match content {
        UserContent::Text(text) => Some(Part::text(text.text.clone())),
        UserContent::ToolResult(result) => Some(Part::ToolResult {
            call_id: result.call.wire().into_owned(),
            output: result_output(&result.content),
            is_error: result.is_error,
        }),
        // Media live in the kept rig message only: no part of ours says what they are.
        _ => None,
    }
}

fn assistant_part(content: &AssistantContent) -> Option<Part> {
    match content {
        AssistantContent::Text(text) => Some(Part::text(text.text.clone())),
        AssistantContent::ToolCall(call) => Some(Part::ToolCall {
            call_id: call.id.wire().into_owned(),
            name: call.function.name.as_str().to_owned(),
            arguments: Value::Object(call.function.arguments.clone()),
        }),
        AssistantContent::Reasoning(reasoning) => Some(Part::Reasoning {
            text: reasoning.text.clone(),
        }),
        _ => None,
    }
}

/// A tool result's content as one JSON value: a lone text as a string, a lone JSON value as
/// itself, anything else as rig serializes the list.
fn result_output(content: &[ToolResultContent]) -> Value {
    match content {
        [ToolResultContent::Text(text)] => Value::String(text.text.clone()),
        [ToolResultContent::Json { value }] => value.clone(),
        many => serde_json::to_value(many).unwrap_or(Value::Null),
    }
}

/// A loaded history as rig messages: each message's kept rig message, or a translation of its
/// parts when another program wrote it. Messages that translate to nothing (approval parts
/// alone, files) are left out.
pub fn to_rig_history(messages: &[StoredMessage]) -> Vec<Message> {
    // Our tool results do not name their tool; rig's do: find it from the call.
    let mut tool_names: HashMap<&str, &str> = HashMap::new();
    let mut history = Vec::with_capacity(messages.len());
    for message in messages {
        for part in &message.parts {
            if let Part::ToolCall { call_id, name, .. } = part {
                tool_names.insert(call_id, name);
            }
        }
        if let Some(kept) = message
            .metadata
            .get(RIG_MESSAGE_KEY)
            .and_then(|value| serde_json::from_value::<Message>(value.clone()).ok())
        {
            history.push(kept);
        } else if let Some(translated) = translate(message, &tool_names) {
            history.push(translated);
        }
    }
    history
}

fn translate(message: &StoredMessage, tool_names: &HashMap<&str, &str>) -> Option<Message> {
    match message.role {
        Role::System => Some(Message::system(message.text())),
        Role::User | Role::Tool => {
            let content: Vec<UserContent> = message
                .parts
                .iter()
                .filter_map(|part| match part {
                    Part::Text { text } => Some(UserContent::Text(Text::new(text.clone()))),
                    Part::ToolResult {
                        call_id,
                        output,
                        is_error,
                    } => {
                        let name = tool_names.get(call_id.as_str()).copied();
                        let name = ToolName::new(name.unwrap_or(UNKNOWN_TOOL)).ok()?;
                        let content = match output {
                            Value::String(text) => vec![ToolResultContent::Text(Text::new(text))],
                            value => vec![ToolResultContent::Json {
                                value: value.clone(),
                            }],
                        };
                        let mut result =
                            UserContent::tool_result(CallId::from_wire(call_id), name, content);
                        if let UserContent::ToolResult(result) = &mut result {
                            result.is_error = *is_error;
                        }
                        Some(result)
                    }
                    _ => None,
                })
                .collect();
            (!content.is_empty()).then_some(Message::User { content })
        }
        Role::Assistant => {
            let content: Vec<AssistantContent> = message
                .parts
                .iter()
                .filter_map(|part| match part {
                    Part::Text { text } => Some(AssistantContent::text(text.clone())),
                    Part::ToolCall {
                        call_id,
                        name,
                        arguments,
                    } => Some(AssistantContent::tool_call(
                        call_id.clone(),
                        ToolName::new(name.clone()).ok()?,
                        arguments.clone(),
                    )),
                    Part::Reasoning { text } => Some(AssistantContent::reasoning(text.clone())),
                    _ => None,
                })
                .collect();
            (!content.is_empty()).then(|| Message::Assistant(AssistantMessage::new(content)))
        }
    }
}
