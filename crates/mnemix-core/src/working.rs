//! Working memory: one small document per conversation or per user, updated with compare-and-set.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};
use crate::scope::{ConversationId, Scope};
use crate::time::Timestamp;

/// Which working-memory document.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkingMemoryKey {
    /// The document of one conversation (deleted with it).
    Conversation(ConversationId),
    /// The document of the scope's subject, shared by all their conversations.
    User,
}

/// How the content is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkingMemoryFormat {
    /// Free Markdown (typically following a template).
    #[default]
    Markdown,
    /// A JSON document (typically validated against a schema by the engine).
    Json,
}

impl WorkingMemoryFormat {
    /// The lowercase name (`"markdown"`, `"json"`), as stored by backends.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Markdown => "markdown",
            Self::Json => "json",
        }
    }

    /// The format named by [`as_str`](Self::as_str).
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Markdown, Self::Json]
            .into_iter()
            .find(|f| f.as_str() == name)
    }
}

/// A stored working-memory document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkingMemory {
    /// The content.
    pub content: String,
    /// Its format.
    pub format: WorkingMemoryFormat,
    /// Bumped by every set; starts at 1.
    pub revision: u64,
    /// When it was last set (store clock).
    pub updated_at: Timestamp,
}

/// A write of [`WorkingMemoryStore::set_working_memory`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkingMemoryUpdate {
    /// The new content.
    pub content: String,
    /// Its format.
    pub format: WorkingMemoryFormat,
    /// Compare-and-set: applies only if the current revision equals this (0 = must not exist).
    pub expected_revision: Option<u64>,
}

impl WorkingMemoryUpdate {
    /// Markdown content, unconditional.
    pub fn markdown(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            format: WorkingMemoryFormat::Markdown,
            expected_revision: None,
        }
    }

    /// JSON content, unconditional.
    pub fn json(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            format: WorkingMemoryFormat::Json,
            expected_revision: None,
        }
    }

    /// Makes the write conditional on the current revision.
    #[must_use]
    pub fn expecting(mut self, revision: u64) -> Self {
        self.expected_revision = Some(revision);
        self
    }

    /// Rejects JSON content that does not parse.
    pub fn validate(&self) -> Result<()> {
        if self.format == WorkingMemoryFormat::Json {
            serde_json::from_str::<serde_json::Value>(&self.content).map_err(|e| {
                MemoryError::invalid(format!("working memory is not valid JSON: {e}"))
            })?;
        }
        Ok(())
    }

    /// The document this write makes over one at revision `current` (0 when absent): checks
    /// the compare-and-set precondition, then bumps the revision, stamped `now`.
    pub fn apply(self, current: u64, now: Timestamp) -> Result<WorkingMemory> {
        self.check_revision(current)?;
        Ok(WorkingMemory {
            content: self.content,
            format: self.format,
            revision: current + 1,
            updated_at: now,
        })
    }

    /// Checks the compare-and-set precondition against the current revision (0 when absent).
    pub fn check_revision(&self, current: u64) -> Result<()> {
        match self.expected_revision {
            Some(expected) if expected != current => Err(MemoryError::conflict(
                format!("working memory is at revision {current}, not {expected}"),
                Some(current),
            )),
            _ => Ok(()),
        }
    }
}

/// Working-memory documents.
#[async_trait]
pub trait WorkingMemoryStore: Send + Sync {
    /// Reads a document.
    ///
    /// # Behavior
    /// - `None` when never set or cleared.
    /// - A conversation key of a conversation missing from the scope is `NotFound`.
    async fn get_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
    ) -> Result<Option<WorkingMemory>>;

    /// Writes a document.
    ///
    /// # Behavior
    /// - Every write bumps `revision` by one (the first write makes revision 1).
    /// - With `expected_revision` it is compare-and-set: a mismatch is `Conflict` with
    ///   `current` = the stored revision (0 when absent) and nothing changes.
    /// - JSON content that does not parse is `InvalidInput`.
    /// - Conversation and user documents are separate; a conversation key of a conversation
    ///   missing from the scope is `NotFound`.
    async fn set_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
        update: WorkingMemoryUpdate,
    ) -> Result<WorkingMemory>;

    /// Removes a document; returns whether it existed.
    ///
    /// # Behavior
    /// - A conversation key of a conversation missing from the scope is `NotFound`.
    async fn clear_working_memory(&self, scope: &Scope, key: &WorkingMemoryKey) -> Result<bool>;
}
