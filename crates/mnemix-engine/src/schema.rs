//! JSON Schemas the engine checks documents against: working memory, structured memories.

use mnemix_core::{MemoryError, Result};
use serde_json::Value;

/// A compiled JSON Schema.
#[cfg(feature = "json-schema")]
pub(crate) struct Schema(jsonschema::Validator);

#[cfg(not(feature = "json-schema"))]
pub(crate) struct Schema;

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Schema")
    }
}

/// Compiles `schema`; `what` names it in the error (`memory config: working_memory.json_schema`).
#[cfg(feature = "json-schema")]
pub(crate) fn compile(schema: &Value, what: &str) -> Result<Schema> {
    jsonschema::validator_for(schema)
        .map(Schema)
        .map_err(|e| MemoryError::invalid(format!("{what}: {e}")))
}

#[cfg(not(feature = "json-schema"))]
pub(crate) fn compile(_schema: &Value, what: &str) -> Result<Schema> {
    Err(MemoryError::invalid(format!(
        "{what}: mnemix-engine was built without its `json-schema` feature"
    )))
}

impl Schema {
    /// Every violation, as `path: message`; `what` names the document in the error.
    #[cfg(feature = "json-schema")]
    pub(crate) fn check(&self, document: &Value, what: &str) -> Result<()> {
        let problems: Vec<String> = self
            .0
            .iter_errors(document)
            .map(|e| {
                let path = e.instance_path().to_string();
                let path = if path.is_empty() {
                    "/".to_owned()
                } else {
                    path
                };
                format!("{path}: {e}")
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(MemoryError::invalid(format!(
                "{what} does not follow its schema: {}",
                problems.join("; ")
            )))
        }
    }

    #[cfg(not(feature = "json-schema"))]
    #[allow(clippy::unused_self)]
    pub(crate) fn check(&self, _document: &Value, _what: &str) -> Result<()> {
        unreachable!("a Schema cannot be built without the json-schema feature")
    }
}
