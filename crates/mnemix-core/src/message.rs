//! Provider-neutral messages and their parts.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{MemoryError, Result};
use crate::scope::MessageId;
use crate::time::Timestamp;

/// The deepest JSON a record may hold: objects and arrays nested at most this many levels
/// (`{"a": {"b": 1}}` is 2). Every backend reads this back, with room for the records that wrap
/// a value in storage (JSON readers stop at 128 levels); deeper values are refused at write
/// with `InvalidInput`, so no stored record can make a read fail.
pub const MAX_JSON_DEPTH: usize = 100;

/// Whether `value` nests deeper than `budget` levels. Recursion never goes past `budget`, so a
/// value of any depth is checked without exhausting the stack.
fn deeper_than(value: &Value, budget: usize) -> bool {
    let children: Box<dyn Iterator<Item = &Value>> = match value {
        Value::Array(items) => Box::new(items.iter()),
        Value::Object(map) => Box::new(map.values()),
        _ => return false,
    };
    budget == 0
        || children
            .into_iter()
            .any(|child| deeper_than(child, budget - 1))
}

/// `InvalidInput` naming `what` when `value` nests deeper than [`MAX_JSON_DEPTH`].
pub fn check_json_depth(what: &str, value: &Value) -> Result<()> {
    if deeper_than(value, MAX_JSON_DEPTH) {
        return Err(MemoryError::invalid(format!(
            "{what} nests JSON deeper than {MAX_JSON_DEPTH} levels"
        )));
    }
    Ok(())
}

/// [`check_json_depth`] for a metadata object (itself one level).
pub fn check_metadata_depth(what: &str, metadata: &Metadata) -> Result<()> {
    if MAX_JSON_DEPTH == 0
        || metadata
            .values()
            .any(|v| deeper_than(v, MAX_JSON_DEPTH - 1))
    {
        return Err(MemoryError::invalid(format!(
            "{what} nests JSON deeper than {MAX_JSON_DEPTH} levels"
        )));
    }
    Ok(())
}

/// JSON object used for free-form metadata.
pub type Metadata = Map<String, Value>;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// System instructions.
    System,
    /// The human (or the client on their behalf, e.g. approval responses).
    User,
    /// The model.
    Assistant,
    /// Tool output.
    Tool,
}

impl Role {
    /// The lowercase name (`"user"`, …), as stored by backends.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }
}

/// Binary or linked content of a [`Part::File`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileSource {
    /// A URL the provider or client can fetch.
    Url(String),
    /// Inline data, base64-encoded.
    Base64(String),
}

/// One piece of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// The model asks for a tool to run.
    ToolCall {
        /// Correlates the call with its result.
        call_id: String,
        /// The tool's name.
        name: String,
        /// The arguments as JSON (compared key-order-insensitively).
        arguments: Value,
    },
    /// The output of a tool call.
    ToolResult {
        /// The call this answers.
        call_id: String,
        /// The output as JSON.
        output: Value,
        /// Whether the tool failed.
        #[serde(default)]
        is_error: bool,
    },
    /// The model asks the user to approve a tool call before it runs.
    ApprovalRequest {
        /// Correlates the request with its response.
        approval_id: String,
        /// The tool call awaiting approval (in the same message).
        call_id: String,
    },
    /// The user's answer to an approval request.
    ApprovalResponse {
        /// The request this answers.
        approval_id: String,
        /// Approved or denied.
        approved: bool,
        /// Optional reason given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Model reasoning kept for providers that require it on replay.
    Reasoning {
        /// The reasoning text.
        text: String,
    },
    /// A file or image.
    File {
        /// Media type such as `image/png`.
        media_type: String,
        /// Where the content is.
        source: FileSource,
    },
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// A tool call part.
    pub fn tool_call(
        call_id: impl Into<String>,
        name: impl Into<String>,
        arguments: Value,
    ) -> Self {
        Self::ToolCall {
            call_id: call_id.into(),
            name: name.into(),
            arguments,
        }
    }

    /// A successful tool result part.
    pub fn tool_result(call_id: impl Into<String>, output: Value) -> Self {
        Self::ToolResult {
            call_id: call_id.into(),
            output,
            is_error: false,
        }
    }

    /// An approval request part.
    pub fn approval_request(approval_id: impl Into<String>, call_id: impl Into<String>) -> Self {
        Self::ApprovalRequest {
            approval_id: approval_id.into(),
            call_id: call_id.into(),
        }
    }

    /// An approval response part.
    pub fn approval_response(approval_id: impl Into<String>, approved: bool) -> Self {
        Self::ApprovalResponse {
            approval_id: approval_id.into(),
            approved,
            reason: None,
        }
    }
}

/// A message of a conversation.
///
/// ```
/// use mnemix_core::{Message, Part, Role};
/// let m = Message::user("hello");
/// assert_eq!(m.role, Role::User);
/// assert_eq!(m.text(), "hello");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Idempotency key of the append; unique within a conversation.
    pub id: MessageId,
    /// Who said it.
    pub role: Role,
    /// Its parts, in order.
    pub parts: Vec<Part>,
    /// When it was created (set by the client; kept as given).
    pub created_at: Timestamp,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Metadata,
}

impl Message {
    /// A message with a fresh id, created now.
    pub fn new(role: Role, parts: Vec<Part>) -> Self {
        Self {
            id: MessageId::generate(),
            role,
            parts,
            created_at: Timestamp::now(),
            metadata: Map::new(),
        }
    }

    /// A user text message.
    pub fn user(text: impl Into<String>) -> Self {
        Self::new(Role::User, vec![Part::text(text)])
    }

    /// An assistant text message.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::new(Role::Assistant, vec![Part::text(text)])
    }

    /// A system message.
    pub fn system(text: impl Into<String>) -> Self {
        Self::new(Role::System, vec![Part::text(text)])
    }

    /// Replaces the id (builder style).
    #[must_use]
    pub fn with_id(mut self, id: MessageId) -> Self {
        self.id = id;
        self
    }

    /// The concatenated text parts, separated by newlines.
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        texts.join("\n")
    }

    /// Checks the JSON it carries — metadata, tool arguments and outputs — against
    /// [`MAX_JSON_DEPTH`].
    pub fn check_json_depth(&self) -> Result<()> {
        check_metadata_depth("message metadata", &self.metadata)?;
        for part in &self.parts {
            match part {
                Part::ToolCall { arguments, .. } => {
                    check_json_depth("tool call arguments", arguments)?;
                }
                Part::ToolResult { output, .. } => check_json_depth("tool result output", output)?,
                _ => {}
            }
        }
        Ok(())
    }

    /// Whether two messages carry the same content: role, parts and metadata (JSON compared
    /// key-order-insensitively); `created_at` is not content.
    pub fn same_content(&self, other: &Self) -> bool {
        self.role == other.role && self.parts == other.parts && self.metadata == other.metadata
    }
}

/// A message as stored: with its position in the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredMessage {
    /// Position in the conversation: 1, 2, 3 … with no gaps at append time.
    pub seq: u64,
    /// The message.
    #[serde(flatten)]
    pub message: Message,
}

impl AsRef<Message> for StoredMessage {
    fn as_ref(&self) -> &Message {
        &self.message
    }
}

impl AsRef<Message> for Message {
    fn as_ref(&self) -> &Message {
        self
    }
}

impl AsMut<Message> for StoredMessage {
    fn as_mut(&mut self) -> &mut Message {
        &mut self.message
    }
}

impl AsMut<Message> for Message {
    fn as_mut(&mut self) -> &mut Message {
        self
    }
}
