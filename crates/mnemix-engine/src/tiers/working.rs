//! Working memory through the engine: schema validation and the three agent tools.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::config::{invalid, WorkingMemoryConfig, WorkingMemoryScope};
use crate::context::WorkingMemoryBlock;
use crate::Memory;
use mnemix_core::{ConversationId, Scope};
use mnemix_core::{MemoryError, Result};
use mnemix_core::{WorkingMemory, WorkingMemoryKey, WorkingMemoryUpdate};

/// A tool an agent framework can register: name, description and JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The tool's name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

/// The names of the working-memory tools, in the order [`Memory::working_memory_tools`] gives.
pub const WORKING_MEMORY_TOOLS: [&str; 3] = [
    "get_working_memory",
    "update_working_memory",
    "clear_working_memory",
];

impl WorkingMemoryConfig {
    pub(crate) fn validate(&self) -> Result<()> {
        if self.template.is_some() && self.json_schema.is_some() {
            return Err(invalid(
                "working_memory",
                "template and json_schema are alternatives; set one",
            ));
        }
        if let Some(schema) = &self.json_schema {
            if !schema.is_object() && !schema.is_boolean() {
                return Err(invalid(
                    "working_memory.json_schema",
                    "a JSON Schema is an object (or a boolean)",
                ));
            }
        }
        Ok(())
    }
}

impl Memory {
    /// The working-memory block of the context (`prepare`'s first round): the document with
    /// its template or schema; none when the tier is off.
    pub(crate) async fn working_memory_block(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
    ) -> Result<Option<WorkingMemoryBlock>> {
        let config = &self.config.working_memory;
        if !config.enabled {
            return Ok(None);
        }
        let document = self.get_working_memory(scope, conversation).await?;
        Ok(Some(WorkingMemoryBlock {
            scope: config.scope,
            document,
            template: config.template.clone(),
            json_schema: config.json_schema.clone(),
        }))
    }

    /// Whose document it is: the conversation's or the user's, per `working_memory.scope`.
    fn working_memory_key(&self, conversation: &ConversationId) -> WorkingMemoryKey {
        match self.config.working_memory.scope {
            WorkingMemoryScope::Conversation => {
                WorkingMemoryKey::Conversation(conversation.clone())
            }
            WorkingMemoryScope::User => WorkingMemoryKey::User,
        }
    }

    /// The working-memory document of the conversation (or of the user, per config).
    pub async fn get_working_memory(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
    ) -> Result<Option<WorkingMemory>> {
        self.backend
            .get_working_memory(scope, &self.working_memory_key(conversation))
            .await
    }

    /// Replaces the working-memory document.
    ///
    /// # Behavior
    /// - With a JSON Schema configured, `content` must be JSON (a string holding JSON is parsed)
    ///   that follows it, else `InvalidInput` listing every violation; it is stored as JSON.
    /// - Without one it is stored as Markdown: a string as is, any other JSON as its text.
    pub async fn update_working_memory(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        content: Value,
    ) -> Result<WorkingMemory> {
        let update = match &self.working_schema {
            Some(schema) => {
                let document = match content {
                    Value::String(text) => serde_json::from_str(&text).map_err(|e| {
                        MemoryError::invalid(format!("working memory must be JSON: {e}"))
                    })?,
                    other => other,
                };
                schema.check(&document, "working memory")?;
                WorkingMemoryUpdate::json(document.to_string())
            }
            None => WorkingMemoryUpdate::markdown(match content {
                Value::String(text) => text,
                other => other.to_string(),
            }),
        };
        self.backend
            .set_working_memory(scope, &self.working_memory_key(conversation), update)
            .await
    }

    /// Clears the working-memory document; returns whether there was one.
    pub async fn clear_working_memory(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
    ) -> Result<bool> {
        self.backend
            .clear_working_memory(scope, &self.working_memory_key(conversation))
            .await
    }

    /// The three working-memory tools (`get`, `update`, `clear`) with their argument schemas;
    /// `update` takes the configured schema as the type of `content`.
    pub fn working_memory_tools(&self) -> Vec<ToolDefinition> {
        let config = &self.config.working_memory;
        let content = match (&config.json_schema, &config.template) {
            (Some(schema), _) => schema.clone(),
            (None, Some(template)) => json!({
                "type": "string",
                "description": format!("The whole document, in Markdown, following this template:\n{template}"),
            }),
            (None, None) => {
                json!({"type": "string", "description": "The whole document, in Markdown."})
            }
        };
        let no_arguments =
            json!({"type": "object", "properties": {}, "additionalProperties": false});
        vec![
            ToolDefinition {
                name: WORKING_MEMORY_TOOLS[0].to_owned(),
                description: "Read the working memory: durable context kept across turns."
                    .to_owned(),
                parameters: no_arguments.clone(),
            },
            ToolDefinition {
                name: WORKING_MEMORY_TOOLS[1].to_owned(),
                description: "Replace the working memory with an updated document.".to_owned(),
                parameters: json!({
                    "type": "object",
                    "properties": {"content": content},
                    "required": ["content"],
                    "additionalProperties": false,
                }),
            },
            ToolDefinition {
                name: WORKING_MEMORY_TOOLS[2].to_owned(),
                description: "Clear the working memory.".to_owned(),
                parameters: no_arguments,
            },
        ]
    }

    /// Runs a working-memory tool call by name and returns its JSON result: the document
    /// (`null` when empty), the stored document after an update, or whether one was cleared.
    /// An unknown tool name or missing `content` is `InvalidInput`.
    pub async fn call_working_memory_tool(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        name: &str,
        arguments: Value,
    ) -> Result<Value> {
        let document = |memory: Option<WorkingMemory>| {
            memory.map_or(Value::Null, |m| {
                json!({"content": m.content, "format": m.format.as_str(), "revision": m.revision})
            })
        };
        match name {
            "get_working_memory" => Ok(document(
                self.get_working_memory(scope, conversation).await?,
            )),
            "update_working_memory" => {
                let content = match arguments {
                    Value::Object(mut map) => map.remove("content"),
                    _ => None,
                }
                .ok_or_else(|| {
                    MemoryError::invalid("update_working_memory needs a `content` argument")
                })?;
                let stored = self
                    .update_working_memory(scope, conversation, content)
                    .await?;
                Ok(document(Some(stored)))
            }
            "clear_working_memory" => Ok(json!({
                "cleared": self.clear_working_memory(scope, conversation).await?
            })),
            other => Err(MemoryError::invalid(format!(
                "{other} is not a working-memory tool (expected one of {WORKING_MEMORY_TOOLS:?})"
            ))),
        }
    }
}
