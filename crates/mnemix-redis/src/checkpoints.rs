//! Checkpoints: a hash each, a zset of the suspended ones by update time, version-fenced
//! updates in one script.

use std::sync::LazyLock;

use async_trait::async_trait;
use mnemix_core::{
    Checkpoint, CheckpointId, CheckpointStatus, CheckpointStore, CheckpointUpdate, MemoryError,
    NewCheckpoint, Result, Scope, Timestamp,
};
use redis::Script;

use crate::keys::ScopeKeys;
use crate::{corrupt, to_json, RedisResultExt, RedisStore};

static PUT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/put_checkpoint.lua")));
static UPDATE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/update_checkpoint.lua")));
static DELETE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/delete_checkpoint.lua")));

pub(crate) const CHECKPOINT_FIELDS: [&str; 6] = [
    "workflow",
    "status",
    "state",
    "version",
    "created_at",
    "updated_at",
];

/// A checkpoint hash's fields as read, in [`CHECKPOINT_FIELDS`] order.
pub(crate) type CheckpointFields = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<u64>,
    Option<i64>,
    Option<i64>,
);

pub(crate) fn checkpoint_from(id: &str, fields: CheckpointFields) -> Result<Option<Checkpoint>> {
    let (Some(workflow), Some(status), Some(state), Some(version), Some(created), Some(updated)) =
        fields
    else {
        return Ok(None);
    };
    Ok(Some(Checkpoint {
        id: CheckpointId::new(id).map_err(|e| corrupt("checkpoint id", e))?,
        workflow,
        status: CheckpointStatus::parse(&status)
            .ok_or_else(|| corrupt("checkpoint status", &status))?,
        state: serde_json::from_str(&state).map_err(|e| corrupt("checkpoint state", e))?,
        version,
        created_at: Timestamp::from_millis(created),
        updated_at: Timestamp::from_millis(updated),
    }))
}

impl RedisStore {
    pub(crate) async fn read_checkpoints(
        &self,
        keys: &ScopeKeys,
        ids: &[String],
    ) -> Result<Vec<Checkpoint>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("HMGET")
                .arg(keys.checkpoint(id))
                .arg(&CHECKPOINT_FIELDS);
        }
        let rows: Vec<CheckpointFields> = pipe.query_async(&mut self.conn()).await.db()?;
        let mut checkpoints = Vec::with_capacity(rows.len());
        for (id, row) in ids.iter().zip(rows) {
            // One deleted between the index read and this one is skipped.
            if let Some(checkpoint) = checkpoint_from(id, row)? {
                checkpoints.push(checkpoint);
            }
        }
        Ok(checkpoints)
    }
}

#[async_trait]
impl CheckpointStore for RedisStore {
    async fn put_checkpoint(&self, scope: &Scope, new: NewCheckpoint) -> Result<Checkpoint> {
        let now = self.clock.now();
        self.register_scope(scope).await?;
        let keys = self.keys.scope(scope);
        let created: i64 = PUT
            .key(keys.checkpoint(new.id.as_str()))
            .key(keys.suspended())
            .key(keys.checkpoint_ids())
            .arg(new.id.as_str())
            .arg(&new.workflow)
            .arg(new.status.as_str())
            .arg(to_json(&new.state))
            .arg(now.as_millis())
            .invoke_async(&mut self.conn())
            .await
            .db()?;
        if created == 0 {
            return Err(MemoryError::AlreadyExists {
                entity: "checkpoint",
                id: new.id.to_string(),
            });
        }
        Ok(new.into_checkpoint(now))
    }

    async fn get_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<Checkpoint> {
        let keys = self.keys.scope(scope);
        self.read_checkpoints(&keys, &[id.to_string()])
            .await?
            .pop()
            .ok_or_else(|| MemoryError::not_found("checkpoint", id.as_str()))
    }

    async fn update_checkpoint(
        &self,
        scope: &Scope,
        id: &CheckpointId,
        update: CheckpointUpdate,
    ) -> Result<Checkpoint> {
        let now = self.clock.now();
        let keys = self.keys.scope(scope);
        let reply: Vec<String> = UPDATE
            .key(keys.checkpoint(id.as_str()))
            .key(keys.suspended())
            .arg(id.as_str())
            .arg(update.expected_version)
            .arg(update.status.as_str())
            .arg(to_json(&update.state))
            .arg(now.as_millis())
            .invoke_async(&mut self.conn())
            .await
            .db()?;
        let field = |i: usize| reply.get(i).cloned();
        let second = field(2).and_then(|v| v.parse::<i64>().ok());
        match (reply.first().map_or("", String::as_str), field(1), second) {
            ("ok", Some(workflow), Some(created_at)) => Ok(Checkpoint {
                id: id.clone(),
                workflow,
                status: update.status,
                state: update.state,
                version: update.expected_version + 1,
                created_at: Timestamp::from_millis(created_at),
                updated_at: now,
            }),
            ("conflict", Some(current), _) => {
                let current = current
                    .parse()
                    .map_err(|e| corrupt("checkpoint version", e))?;
                Err(update
                    .check_version(current)
                    .expect_err("the script saw a different version"))
            }
            ("not_found", _, _) => Err(MemoryError::not_found("checkpoint", id.as_str())),
            (other, _, _) => Err(corrupt("checkpoint reply", other)),
        }
    }

    async fn list_suspended(
        &self,
        scope: &Scope,
        workflow: Option<&str>,
    ) -> Result<Vec<Checkpoint>> {
        let keys = self.keys.scope(scope);
        // Oldest update first; equal scores come in byte order of id, the listing's tie order.
        let ids: Vec<String> = redis::cmd("ZRANGE")
            .arg(keys.suspended())
            .arg(0)
            .arg(-1)
            .query_async(&mut self.conn())
            .await
            .db()?;
        let mut checkpoints = self.read_checkpoints(&keys, &ids).await?;
        checkpoints.retain(|c| {
            c.status == CheckpointStatus::Suspended && workflow.is_none_or(|w| c.workflow == w)
        });
        Ok(checkpoints)
    }

    async fn delete_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<bool> {
        let keys = self.keys.scope(scope);
        let removed: i64 = DELETE
            .key(keys.checkpoint(id.as_str()))
            .key(keys.suspended())
            .key(keys.checkpoint_ids())
            .arg(id.as_str())
            .invoke_async(&mut self.conn())
            .await
            .db()?;
        Ok(removed == 1)
    }
}
