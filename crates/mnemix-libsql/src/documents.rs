//! The small keyed documents: working memory, checkpoints and the byte cache.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use libsql::Value;
use mnemix_core::{
    CacheStore, Checkpoint, CheckpointId, CheckpointStatus, CheckpointStore, CheckpointUpdate,
    MemoryError, Namespace, NewCheckpoint, Result, Scope, Timestamp, WorkingMemory,
    WorkingMemoryFormat, WorkingMemoryKey, WorkingMemoryStore, WorkingMemoryUpdate,
};
use mnemix_sqlite_sql as sql;

use crate::conversations::conversation_pk;
use crate::db::{
    corrupt, execute, millis, row, rows, seq_from_db, seq_to_db, subject_of, text, to_json, Conn,
    DbRow, RowExt,
};
use crate::LibsqlStore;

/// The `working_memory.conversation` of a key: the conversation's pk, 0 for the user document.
pub(crate) async fn working_slot(
    conn: &Conn,
    scope: &Scope,
    key: &WorkingMemoryKey,
) -> Result<i64> {
    match key {
        WorkingMemoryKey::Conversation(id) => Ok(conversation_pk(conn, scope, id).await?.0),
        WorkingMemoryKey::User => Ok(0),
    }
}

pub(crate) fn format_from(text: &str) -> Result<WorkingMemoryFormat> {
    WorkingMemoryFormat::parse(text).ok_or_else(|| corrupt("working memory format", text))
}

async fn read_working(conn: &Conn, scope: &Scope, slot: i64) -> Result<Option<WorkingMemory>> {
    row(
        conn,
        "SELECT content, format, revision, updated_at FROM working_memory
         WHERE namespace = ?1 AND subject = ?2 AND conversation = ?3",
        (scope.namespace().as_str(), subject_of(scope), slot),
    )
    .await?
    .map(|row| working_from(&row, 0))
    .transpose()
}

/// A working-memory document from `content, format, revision, updated_at` at `first`.
pub(crate) fn working_from(row: &DbRow, first: usize) -> Result<WorkingMemory> {
    Ok(WorkingMemory {
        content: row.string(first)?,
        format: format_from(&row.string(first + 1)?)?,
        revision: seq_from_db(row.int(first + 2)?),
        updated_at: Timestamp::from_millis(row.int(first + 3)?),
    })
}

/// Writes a working-memory document into its slot (set and restore).
pub(crate) async fn write_working(
    conn: &Conn,
    scope: &Scope,
    slot: i64,
    memory: &WorkingMemory,
) -> Result<()> {
    execute(
        conn,
        sql::documents::SET_WORKING_MEMORY,
        (
            scope.namespace().as_str(),
            subject_of(scope),
            slot,
            text(&memory.content),
            memory.format.as_str(),
            seq_to_db(memory.revision),
            millis(memory.updated_at),
        ),
    )
    .await?;
    Ok(())
}

/// Writes a cache entry with an absolute expiry (`cache_set` and restore).
pub(crate) async fn put_cache(
    conn: &Conn,
    namespace: &Namespace,
    key: &str,
    value: &[u8],
    expires_at: Option<Timestamp>,
) -> Result<()> {
    execute(
        conn,
        sql::documents::SET_CACHE,
        (
            namespace.as_str(),
            key,
            Value::Blob(value.to_vec()),
            expires_at.map(millis),
        ),
    )
    .await?;
    Ok(())
}

#[async_trait]
impl WorkingMemoryStore for LibsqlStore {
    async fn get_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
    ) -> Result<Option<WorkingMemory>> {
        let tx = self.read().await?;
        let slot = working_slot(&tx, scope, key).await?;
        let found = read_working(&tx, scope, slot).await?;
        tx.commit().await?;
        Ok(found)
    }

    async fn set_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
        update: WorkingMemoryUpdate,
    ) -> Result<WorkingMemory> {
        let now = self.clock.now();
        let tx = self.write().await?;
        let slot = working_slot(&tx, scope, key).await?;
        let current = read_working(&tx, scope, slot)
            .await?
            .map_or(0, |w| w.revision);
        let stored = update.apply(current, now)?;
        write_working(&tx, scope, slot, &stored).await?;
        tx.commit().await?;
        Ok(stored)
    }

    async fn clear_working_memory(&self, scope: &Scope, key: &WorkingMemoryKey) -> Result<bool> {
        let tx = self.write().await?;
        let slot = working_slot(&tx, scope, key).await?;
        let removed = execute(
            &tx,
            sql::documents::DELETE_WORKING_MEMORY,
            (scope.namespace().as_str(), subject_of(scope), slot),
        )
        .await?;
        tx.commit().await?;
        Ok(removed > 0)
    }
}

fn status_from(text: &str) -> Result<CheckpointStatus> {
    CheckpointStatus::parse(text).ok_or_else(|| corrupt("checkpoint status", text))
}

/// Columns read by [`checkpoint_from`], in its order.
pub(crate) const CHECKPOINT_COLUMNS: &str =
    "id, workflow, status, state, version, created_at, updated_at";

pub(crate) fn checkpoint_from(row: &DbRow) -> Result<Checkpoint> {
    Ok(Checkpoint {
        id: CheckpointId::new(row.string(0)?).map_err(|e| corrupt("checkpoint id", e))?,
        workflow: row.string(1)?,
        status: status_from(&row.string(2)?)?,
        state: serde_json::from_str(&row.string(3)?).map_err(|e| corrupt("checkpoint state", e))?,
        version: seq_from_db(row.int(4)?),
        created_at: Timestamp::from_millis(row.int(5)?),
        updated_at: Timestamp::from_millis(row.int(6)?),
    })
}

async fn fetch_checkpoint(conn: &Conn, scope: &Scope, id: &CheckpointId) -> Result<Checkpoint> {
    let found = row(
        conn,
        &format!(
            "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints
             WHERE namespace = ?1 AND subject = ?2 AND id = ?3"
        ),
        (scope.namespace().as_str(), subject_of(scope), id.as_str()),
    )
    .await?
    .ok_or_else(|| MemoryError::not_found("checkpoint", id.as_str()))?;
    checkpoint_from(&found)
}

#[async_trait]
impl CheckpointStore for LibsqlStore {
    async fn put_checkpoint(&self, scope: &Scope, new: NewCheckpoint) -> Result<Checkpoint> {
        let now = self.clock.now();
        let tx = self.write().await?;
        let inserted = execute(
            &tx,
            sql::documents::INSERT_CHECKPOINT,
            (
                scope.namespace().as_str(),
                subject_of(scope),
                new.id.as_str(),
                new.workflow.as_str(),
                new.status.as_str(),
                to_json(&new.state),
                millis(now),
            ),
        )
        .await?;
        if inserted == 0 {
            return Err(MemoryError::AlreadyExists {
                entity: "checkpoint",
                id: new.id.to_string(),
            });
        }
        tx.commit().await?;
        Ok(new.into_checkpoint(now))
    }

    async fn get_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<Checkpoint> {
        let tx = self.read().await?;
        fetch_checkpoint(&tx, scope, id).await
    }

    async fn update_checkpoint(
        &self,
        scope: &Scope,
        id: &CheckpointId,
        update: CheckpointUpdate,
    ) -> Result<Checkpoint> {
        let now = self.clock.now();
        let tx = self.write().await?;
        let mut checkpoint = fetch_checkpoint(&tx, scope, id).await?;
        update.apply_to(&mut checkpoint, now)?;
        execute(
            &tx,
            sql::documents::UPDATE_CHECKPOINT,
            (
                checkpoint.status.as_str(),
                to_json(&checkpoint.state),
                seq_to_db(checkpoint.version),
                millis(now),
                scope.namespace().as_str(),
                subject_of(scope),
                id.as_str(),
            ),
        )
        .await?;
        tx.commit().await?;
        Ok(checkpoint)
    }

    async fn list_suspended(
        &self,
        scope: &Scope,
        workflow: Option<&str>,
    ) -> Result<Vec<Checkpoint>> {
        let tx = self.read().await?;
        let found = rows(
            &tx,
            &format!(
                "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints
                 WHERE namespace = ?1 AND subject = ?2 AND status = 'suspended'
                   AND (?3 IS NULL OR workflow = ?3) ORDER BY updated_at, id"
            ),
            (scope.namespace().as_str(), subject_of(scope), workflow),
        )
        .await?;
        found.iter().map(checkpoint_from).collect()
    }

    async fn delete_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<bool> {
        let tx = self.write().await?;
        let removed = execute(
            &tx,
            sql::documents::DELETE_CHECKPOINT,
            (scope.namespace().as_str(), subject_of(scope), id.as_str()),
        )
        .await?;
        tx.commit().await?;
        Ok(removed > 0)
    }
}

#[async_trait]
impl CacheStore for LibsqlStore {
    async fn cache_get(&self, namespace: &Namespace, key: &str) -> Result<Option<Vec<u8>>> {
        let tx = self.read().await?;
        row(
            &tx,
            sql::documents::CACHE_GET,
            (namespace.as_str(), key, millis(self.clock.now())),
        )
        .await?
        .map(|row| row.blob(0))
        .transpose()
    }

    async fn cache_set(
        &self,
        namespace: &Namespace,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        let expires = ttl.map(|ttl| self.clock.now().saturating_add(ttl));
        let tx = self.write().await?;
        put_cache(&tx, namespace, key, &value, expires).await?;
        tx.commit().await
    }

    async fn cache_get_many(
        &self,
        namespace: &Namespace,
        keys: &[String],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let tx = self.read().await?;
        let found = rows(
            &tx,
            sql::documents::CACHE_GET_MANY,
            (namespace.as_str(), to_json(&keys), millis(self.clock.now())),
        )
        .await?;
        tx.commit().await?;
        let found = found
            .iter()
            .map(|row| Ok((row.string(0)?, row.blob(1)?)))
            .collect::<Result<HashMap<String, Vec<u8>>>>()?;
        Ok(keys.iter().map(|key| found.get(key).cloned()).collect())
    }

    async fn cache_set_many(
        &self,
        namespace: &Namespace,
        entries: Vec<(String, Vec<u8>)>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        let expires = ttl.map(|ttl| self.clock.now().saturating_add(ttl));
        // One transaction: one commit for the batch.
        let tx = self.write().await?;
        for (key, value) in &entries {
            put_cache(&tx, namespace, key, value, expires).await?;
        }
        tx.commit().await
    }

    async fn cache_delete(&self, namespace: &Namespace, key: &str) -> Result<bool> {
        let tx = self.write().await?;
        let removed = row(&tx, sql::documents::CACHE_DELETE, (namespace.as_str(), key))
            .await?
            .map(|row| row.opt_int(0))
            .transpose()?;
        tx.commit().await?;
        let now = millis(self.clock.now());
        Ok(removed.is_some_and(|expires| expires.is_none_or(|at| at > now)))
    }
}
