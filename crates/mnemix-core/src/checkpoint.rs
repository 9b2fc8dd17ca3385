//! Workflow checkpoints for suspend/resume, fenced by version.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{MemoryError, Result};
use crate::scope::{validate_identifier, CheckpointId, Scope};
use crate::time::Timestamp;

/// Where a workflow run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointStatus {
    /// Running.
    Running,
    /// Suspended, waiting to be resumed.
    Suspended,
    /// Finished.
    Completed,
    /// Failed.
    Failed,
}

impl CheckpointStatus {
    /// The lowercase name (`"suspended"`, …), as stored by backends.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Suspended => "suspended",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }

    /// The status named by [`as_str`](Self::as_str).
    pub fn parse(name: &str) -> Option<Self> {
        [
            Self::Running,
            Self::Suspended,
            Self::Completed,
            Self::Failed,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

/// A stored checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Its id (one per run).
    pub id: CheckpointId,
    /// The workflow it belongs to.
    pub workflow: String,
    /// Status.
    pub status: CheckpointStatus,
    /// The workflow's state as JSON.
    pub state: Value,
    /// Bumped by every update; starts at 1.
    pub version: u64,
    /// When it was created (store clock).
    pub created_at: Timestamp,
    /// When it was last updated (store clock).
    pub updated_at: Timestamp,
}

/// What [`CheckpointStore::put_checkpoint`] creates: [`NewCheckpoint::new`] builds one (it may
/// gain fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NewCheckpoint {
    /// Its id.
    pub id: CheckpointId,
    /// Workflow name.
    pub workflow: String,
    /// Initial status.
    pub status: CheckpointStatus,
    /// Initial state.
    pub state: Value,
}

impl NewCheckpoint {
    /// A checkpoint of `workflow` with this id, status and state.
    pub fn new(
        id: CheckpointId,
        workflow: impl Into<String>,
        status: CheckpointStatus,
        state: Value,
    ) -> Self {
        Self {
            id,
            workflow: workflow.into(),
            status,
            state,
        }
    }

    /// The checkpoint this creates: version 1, created and updated `now`.
    pub fn into_checkpoint(self, now: Timestamp) -> Checkpoint {
        Checkpoint {
            id: self.id,
            workflow: self.workflow,
            status: self.status,
            state: self.state,
            version: 1,
            created_at: now,
            updated_at: now,
        }
    }

    /// Checks the workflow name and the state's depth.
    pub fn validate(&self) -> Result<()> {
        validate_identifier("workflow", &self.workflow)?;
        crate::message::check_json_depth("checkpoint state", &self.state)
    }
}

/// A fenced update of [`CheckpointStore::update_checkpoint`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointUpdate {
    /// Applies only if the stored version equals this.
    pub expected_version: u64,
    /// New status.
    pub status: CheckpointStatus,
    /// New state.
    pub state: Value,
}

impl CheckpointUpdate {
    /// Applies the update to the stored checkpoint if the version fence holds: new status and
    /// state, version bumped, stamped `now`. On a stale version nothing changes.
    pub fn apply_to(self, checkpoint: &mut Checkpoint, now: Timestamp) -> Result<()> {
        self.check_version(checkpoint.version)?;
        checkpoint.status = self.status;
        checkpoint.state = self.state;
        checkpoint.version += 1;
        checkpoint.updated_at = now;
        Ok(())
    }

    /// Checks the version fence against the stored version.
    pub fn check_version(&self, current: u64) -> Result<()> {
        if self.expected_version == current {
            Ok(())
        } else {
            Err(MemoryError::conflict(
                format!(
                    "checkpoint is at version {current}, not {}",
                    self.expected_version
                ),
                Some(current),
            ))
        }
    }
}

/// Workflow state for suspend/resume.
#[async_trait]
pub trait CheckpointStore: Send + Sync {
    /// Creates a checkpoint at version 1.
    ///
    /// # Behavior
    /// - An id already used in the scope is `AlreadyExists`.
    async fn put_checkpoint(&self, scope: &Scope, checkpoint: NewCheckpoint) -> Result<Checkpoint>;

    /// Reads a checkpoint.
    ///
    /// # Behavior
    /// - Missing, or another scope's: `NotFound`.
    async fn get_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<Checkpoint>;

    /// Replaces status and state if the version matches, bumping it.
    ///
    /// # Behavior
    /// - A stale `expected_version` is `Conflict` with `current` = the stored version; of
    ///   concurrent updates from the same version exactly one wins.
    /// - Missing, or another scope's: `NotFound`.
    async fn update_checkpoint(
        &self,
        scope: &Scope,
        id: &CheckpointId,
        update: CheckpointUpdate,
    ) -> Result<Checkpoint>;

    /// Lists the scope's suspended checkpoints.
    ///
    /// # Behavior
    /// - Only status `Suspended`, of one workflow when given; oldest update first, then id.
    async fn list_suspended(
        &self,
        scope: &Scope,
        workflow: Option<&str>,
    ) -> Result<Vec<Checkpoint>>;

    /// Deletes a checkpoint.
    ///
    /// # Behavior
    /// - Returns whether it existed in the scope; afterwards get and update are `NotFound`.
    async fn delete_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<bool>;
}
