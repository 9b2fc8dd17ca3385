//! Working memory, checkpoints and the byte cache, written once for the family's drivers.

use std::collections::HashMap;

use mnemix_core::{
    Checkpoint, CheckpointId, CheckpointStatus, CheckpointUpdate, MemoryError, Namespace,
    NewCheckpoint, Result, Scope, Timestamp, WorkingMemory, WorkingMemoryFormat, WorkingMemoryKey,
    WorkingMemoryUpdate,
};

use super::{conversation_pk, millis, seq_from_db, seq_to_db, subject_of, to_json};
use crate::documents as sql;
use crate::driver::{Conn, Param, Row};

/// The conversation of a key's document, none for the subject's own.
fn conversation_of(key: &WorkingMemoryKey) -> Option<&str> {
    match key {
        WorkingMemoryKey::Conversation(id) => Some(id.as_str()),
        WorkingMemoryKey::User => None,
    }
}

/// The `working_memory.conversation` of a key: the conversation's pk, 0 for the user document.
pub async fn working_slot<C: Conn>(
    conn: &mut C,
    scope: &Scope,
    key: &WorkingMemoryKey,
) -> Result<i64> {
    match key {
        WorkingMemoryKey::Conversation(id) => Ok(conversation_pk(conn, scope, id).await?.0),
        WorkingMemoryKey::User => Ok(0),
    }
}

/// A key's document, in one statement (one snapshot): for a conversation's key, a first row
/// says the conversation exists (none: `NotFound`); the document's row, if any, follows.
pub async fn get_working_memory<C: Conn>(
    conn: &mut C,
    scope: &Scope,
    key: &WorkingMemoryKey,
) -> Result<Option<WorkingMemory>> {
    let conversation = conversation_of(key);
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        conversation.into(),
    ];
    let rows = conn.rows(sql::GET_WORKING_MEMORY, &params).await?;
    let mut exists = conversation.is_none();
    let mut found = None;
    for row in rows {
        if row.opt_int(0)?.is_some() {
            exists = true;
        } else {
            found = Some(working_from(&row, 1)?);
        }
    }
    if !exists {
        return Err(MemoryError::not_found(
            "conversation",
            conversation.unwrap_or(""),
        ));
    }
    Ok(found)
}

/// A working-memory document from `content, format, revision, updated_at` at `first`.
pub fn working_from(row: &Row, first: usize) -> Result<WorkingMemory> {
    let format = row.string(first + 1)?;
    Ok(WorkingMemory {
        content: row.string(first)?,
        format: WorkingMemoryFormat::parse(&format)
            .ok_or_else(|| row.corrupt("working memory format", &format))?,
        revision: seq_from_db(row.int(first + 2)?),
        updated_at: Timestamp::from_millis(row.int(first + 3)?),
    })
}

/// Sets a key's document in one statement, atomic on its own: the key's slot, the
/// compare-and-set check and the write with its revision bump. When it writes nothing (the
/// conversation is missing or the expected revision differs), a second read says which.
pub async fn set_working_memory<C: Conn>(
    conn: &mut C,
    scope: &Scope,
    key: &WorkingMemoryKey,
    update: WorkingMemoryUpdate,
    now: Timestamp,
) -> Result<WorkingMemory> {
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        conversation_of(key).into(),
        Param::FreeText(&update.content),
        update.format.as_str().into(),
        millis(now).into(),
        update.expected_revision.map(seq_to_db).into(),
    ];
    if let Some(row) = conn.row(sql::SET_WORKING_MEMORY_CHECKED, &params).await? {
        return Ok(WorkingMemory {
            revision: seq_from_db(row.int(0)?),
            content: update.content,
            format: update.format,
            updated_at: now,
        });
    }
    let current = get_working_memory(conn, scope, key).await?;
    update.check_revision(current.map_or(0, |w| w.revision))?;
    Err(MemoryError::Unavailable {
        backend: C::BACKEND,
        source: "working memory changed between the write and its check".into(),
    })
}

/// Deletes a key's document; whether there was one. Run it in a write transaction: the slot is
/// read first.
pub async fn clear_working_memory<C: Conn>(
    tx: &mut C,
    scope: &Scope,
    key: &WorkingMemoryKey,
) -> Result<bool> {
    let slot = working_slot(tx, scope, key).await?;
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        slot.into(),
    ];
    Ok(tx.execute(sql::DELETE_WORKING_MEMORY, &params).await? > 0)
}

/// Writes a working-memory document into its slot as it is (restore).
pub async fn write_working<C: Conn>(
    conn: &mut C,
    scope: &Scope,
    slot: i64,
    memory: &WorkingMemory,
) -> Result<()> {
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        slot.into(),
        Param::FreeText(&memory.content),
        memory.format.as_str().into(),
        seq_to_db(memory.revision).into(),
        millis(memory.updated_at).into(),
    ];
    conn.execute(sql::SET_WORKING_MEMORY, &params).await?;
    Ok(())
}

/// A checkpoint from [`CHECKPOINT_COLUMNS`](sql::CHECKPOINT_COLUMNS).
pub fn checkpoint_from(row: &Row) -> Result<Checkpoint> {
    let status = row.string(2)?;
    Ok(Checkpoint {
        id: CheckpointId::new(row.string(0)?).map_err(|e| row.corrupt("checkpoint id", e))?,
        workflow: row.string(1)?,
        status: CheckpointStatus::parse(&status)
            .ok_or_else(|| row.corrupt("checkpoint status", &status))?,
        state: serde_json::from_str(&row.string(3)?)
            .map_err(|e| row.corrupt("checkpoint state", e))?,
        version: seq_from_db(row.int(4)?),
        created_at: Timestamp::from_millis(row.int(5)?),
        updated_at: Timestamp::from_millis(row.int(6)?),
    })
}

/// A checkpoint, or `NotFound`.
pub async fn get_checkpoint<C: Conn>(
    conn: &mut C,
    scope: &Scope,
    id: &CheckpointId,
) -> Result<Checkpoint> {
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        id.as_str().into(),
    ];
    let found = conn
        .row(sql::CHECKPOINT_BY_ID, &params)
        .await?
        .ok_or_else(|| MemoryError::not_found("checkpoint", id.as_str()))?;
    checkpoint_from(&found)
}

/// Creates a checkpoint; `AlreadyExists` when its id is taken.
pub async fn put_checkpoint<C: Conn>(
    conn: &mut C,
    scope: &Scope,
    new: NewCheckpoint,
    now: Timestamp,
) -> Result<Checkpoint> {
    let state = to_json(&new.state);
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        new.id.as_str().into(),
        new.workflow.as_str().into(),
        new.status.as_str().into(),
        state.as_str().into(),
        millis(now).into(),
    ];
    if conn.execute(sql::INSERT_CHECKPOINT, &params).await? == 0 {
        return Err(MemoryError::AlreadyExists {
            entity: "checkpoint",
            id: new.id.to_string(),
        });
    }
    Ok(new.into_checkpoint(now))
}

/// Applies an update to a checkpoint. Run it in a write transaction: the checkpoint is read
/// first.
pub async fn update_checkpoint<C: Conn>(
    tx: &mut C,
    scope: &Scope,
    id: &CheckpointId,
    update: CheckpointUpdate,
    now: Timestamp,
) -> Result<Checkpoint> {
    let mut checkpoint = get_checkpoint(tx, scope, id).await?;
    update.apply_to(&mut checkpoint, now)?;
    let state = to_json(&checkpoint.state);
    let params = [
        checkpoint.status.as_str().into(),
        state.as_str().into(),
        seq_to_db(checkpoint.version).into(),
        millis(now).into(),
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        id.as_str().into(),
    ];
    tx.execute(sql::UPDATE_CHECKPOINT, &params).await?;
    Ok(checkpoint)
}

/// The suspended checkpoints of a workflow (any workflow: `None`), oldest update first.
pub async fn list_suspended<C: Conn>(
    conn: &mut C,
    scope: &Scope,
    workflow: Option<&str>,
) -> Result<Vec<Checkpoint>> {
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        workflow.into(),
    ];
    let rows = conn.rows(sql::SUSPENDED_CHECKPOINTS, &params).await?;
    rows.iter().map(checkpoint_from).collect()
}

/// Deletes a checkpoint; whether there was one.
pub async fn delete_checkpoint<C: Conn>(
    conn: &mut C,
    scope: &Scope,
    id: &CheckpointId,
) -> Result<bool> {
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        id.as_str().into(),
    ];
    Ok(conn.execute(sql::DELETE_CHECKPOINT, &params).await? > 0)
}

/// A live cache entry's value.
pub async fn cache_get<C: Conn>(
    conn: &mut C,
    namespace: &Namespace,
    key: &str,
    now: Timestamp,
) -> Result<Option<Vec<u8>>> {
    let params = [namespace.as_str().into(), key.into(), millis(now).into()];
    let found = conn.row(sql::CACHE_GET, &params).await?;
    found.map(|row| row.blob(0)).transpose()
}

/// The live values of `keys`, in their order.
pub async fn cache_get_many<C: Conn>(
    conn: &mut C,
    namespace: &Namespace,
    keys: &[String],
    now: Timestamp,
) -> Result<Vec<Option<Vec<u8>>>> {
    let keys_json = to_json(&keys);
    let params = [
        namespace.as_str().into(),
        keys_json.as_str().into(),
        millis(now).into(),
    ];
    let found = conn
        .rows(sql::CACHE_GET_MANY, &params)
        .await?
        .iter()
        .map(|row| Ok((row.string(0)?, row.blob(1)?)))
        .collect::<Result<HashMap<String, Vec<u8>>>>()?;
    Ok(keys.iter().map(|key| found.get(key).cloned()).collect())
}

/// Writes a cache entry with an absolute expiry (`cache_set`, its batches and restore).
pub async fn put_cache<C: Conn>(
    conn: &mut C,
    namespace: &Namespace,
    key: &str,
    value: &[u8],
    expires_at: Option<Timestamp>,
) -> Result<()> {
    let params = [
        namespace.as_str().into(),
        key.into(),
        Param::Blob(value),
        expires_at.map(millis).into(),
    ];
    conn.execute(sql::SET_CACHE, &params).await?;
    Ok(())
}

/// Deletes a cache entry; whether a live one was there.
pub async fn cache_delete<C: Conn>(
    conn: &mut C,
    namespace: &Namespace,
    key: &str,
    now: Timestamp,
) -> Result<bool> {
    let params = [namespace.as_str().into(), key.into()];
    let Some(removed) = conn.row(sql::CACHE_DELETE, &params).await? else {
        return Ok(false);
    };
    Ok(removed.opt_int(0)?.is_none_or(|at| at > millis(now)))
}
