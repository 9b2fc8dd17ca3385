//! The small keyed documents: working memory, checkpoints and the byte cache.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use mnemix_core::{
    CacheStore, Checkpoint, CheckpointId, CheckpointStatus, CheckpointStore, CheckpointUpdate,
    MemoryError, Namespace, NewCheckpoint, Result, Scope, Timestamp, WorkingMemory,
    WorkingMemoryFormat, WorkingMemoryKey, WorkingMemoryStore, WorkingMemoryUpdate,
};
use mnemix_sqlite_sql as sql;
use sqlx::sqlite::{SqliteConnection, SqliteRow};
use sqlx::Row;

use crate::conversations::conversation_pk;
use crate::db::{corrupt, millis, seq_from_db, seq_to_db, subject_of, to_json, DbResult};
use crate::SqliteStore;

/// The `working_memory.conversation` of a key: the conversation's pk, 0 for the user document.
pub(crate) async fn working_slot(
    conn: &mut SqliteConnection,
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

/// The conversation of a key's document, none for the subject's own.
fn conversation_of(key: &WorkingMemoryKey) -> Option<&str> {
    match key {
        WorkingMemoryKey::Conversation(id) => Some(id.as_str()),
        WorkingMemoryKey::User => None,
    }
}

/// A key's document, in one statement (one snapshot, one hop to sqlx's worker thread): for a
/// conversation's key, a first row says the conversation exists (none: not found); the
/// document's row, if any, follows.
async fn read_working(
    conn: &mut SqliteConnection,
    scope: &Scope,
    key: &WorkingMemoryKey,
) -> Result<Option<WorkingMemory>> {
    type Row = (Option<i64>, Option<String>, Option<String>, i64, i64);
    let conversation = conversation_of(key);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT pk, NULL, NULL, 0, 0 FROM conversations
         WHERE ?3 IS NOT NULL AND namespace = ?1 AND subject = ?2 AND id = ?3
         UNION ALL
         SELECT NULL, content, format, revision, updated_at FROM working_memory
         WHERE namespace = ?1 AND subject = ?2 AND conversation = CASE WHEN ?3 IS NULL THEN 0
               ELSE (SELECT pk FROM conversations
                     WHERE namespace = ?1 AND subject = ?2 AND id = ?3) END",
    )
    .bind(scope.namespace().as_str())
    .bind(subject_of(scope))
    .bind(conversation)
    .fetch_all(conn)
    .await
    .db()?;
    let mut exists = conversation.is_none();
    let mut found = None;
    for (pk, content, format, revision, updated_at) in rows {
        match (pk, content, format) {
            (Some(_), _, _) => exists = true,
            (None, Some(content), Some(format)) => {
                found = Some(WorkingMemory {
                    content,
                    format: format_from(&format)?,
                    revision: seq_from_db(revision),
                    updated_at: Timestamp::from_millis(updated_at),
                });
            }
            _ => return Err(corrupt("working memory", "a row without content")),
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

/// Writes a working-memory document into its slot (set and restore).
pub(crate) async fn write_working(
    conn: &mut SqliteConnection,
    scope: &Scope,
    slot: i64,
    memory: &WorkingMemory,
) -> Result<()> {
    sqlx::query(sql::documents::SET_WORKING_MEMORY)
        .bind(scope.namespace().as_str())
        .bind(subject_of(scope))
        .bind(slot)
        .bind(&memory.content)
        .bind(memory.format.as_str())
        .bind(seq_to_db(memory.revision))
        .bind(millis(memory.updated_at))
        .execute(conn)
        .await
        .db()?;
    Ok(())
}

/// Writes a cache entry with an absolute expiry (`cache_set` and restore).
pub(crate) async fn put_cache(
    conn: &mut SqliteConnection,
    namespace: &Namespace,
    key: &str,
    value: &[u8],
    expires_at: Option<Timestamp>,
) -> Result<()> {
    sqlx::query(sql::documents::SET_CACHE)
        .bind(namespace.as_str())
        .bind(key)
        .bind(value)
        .bind(expires_at.map(millis))
        .execute(conn)
        .await
        .db()?;
    Ok(())
}

#[async_trait]
impl WorkingMemoryStore for SqliteStore {
    async fn get_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
    ) -> Result<Option<WorkingMemory>> {
        let mut conn = self.reader.acquire().await?;
        read_working(&mut conn, scope, key).await
    }

    async fn set_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
        update: WorkingMemoryUpdate,
    ) -> Result<WorkingMemory> {
        let now = self.clock.now();
        // One statement, atomic on its own: the key's slot, the compare-and-set check and the
        // write with its revision bump. No row back means the conversation is missing or the
        // expected revision differs: a second read says which.
        let revision: Option<i64> = sqlx::query_scalar(
            "INSERT INTO working_memory
                 (namespace, subject, conversation, content, format, revision, updated_at)
             SELECT ?1, ?2, slot, ?4, ?5, 1, ?6 FROM (
                 SELECT CASE WHEN ?3 IS NULL THEN 0 ELSE (SELECT pk FROM conversations
                     WHERE namespace = ?1 AND subject = ?2 AND id = ?3) END AS slot)
             WHERE slot IS NOT NULL AND (?7 IS NULL OR ?7 = coalesce((SELECT revision
                 FROM working_memory WHERE namespace = ?1 AND subject = ?2
                   AND conversation = slot), 0))
             ON CONFLICT (namespace, subject, conversation) DO UPDATE SET
                 content = excluded.content, format = excluded.format,
                 revision = working_memory.revision + 1, updated_at = excluded.updated_at
             RETURNING revision",
        )
        .bind(scope.namespace().as_str())
        .bind(subject_of(scope))
        .bind(conversation_of(key))
        .bind(&update.content)
        .bind(update.format.as_str())
        .bind(millis(now))
        .bind(update.expected_revision.map(seq_to_db))
        .fetch_optional(&mut *self.writer.connections().acquire().await?)
        .await
        .db()?;
        if let Some(revision) = revision {
            return Ok(WorkingMemory {
                content: update.content,
                format: update.format,
                revision: seq_from_db(revision),
                updated_at: now,
            });
        }
        let mut conn = self.reader.acquire().await?;
        let current = read_working(&mut conn, scope, key).await?;
        update.check_revision(current.map_or(0, |w| w.revision))?;
        Err(MemoryError::Unavailable {
            backend: crate::db::BACKEND,
            source: "working memory changed between the write and its check".into(),
        })
    }

    async fn clear_working_memory(&self, scope: &Scope, key: &WorkingMemoryKey) -> Result<bool> {
        let mut tx = self.write().await?;
        let slot = working_slot(&mut tx, scope, key).await?;
        let removed = sqlx::query(sql::documents::DELETE_WORKING_MEMORY)
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .bind(slot)
            .execute(&mut *tx)
            .await
            .db()?
            .rows_affected();
        tx.commit().await.db()?;
        Ok(removed > 0)
    }
}

fn status_from(text: &str) -> Result<CheckpointStatus> {
    CheckpointStatus::parse(text).ok_or_else(|| corrupt("checkpoint status", text))
}

macro_rules! checkpoint_columns {
    () => {
        "id, workflow, status, state, version, created_at, updated_at"
    };
}

pub(crate) fn checkpoint_from(row: &SqliteRow) -> Result<Checkpoint> {
    Ok(Checkpoint {
        id: CheckpointId::new(row.get::<String, _>("id"))
            .map_err(|e| corrupt("checkpoint id", e))?,
        workflow: row.get("workflow"),
        status: status_from(row.get("status"))?,
        state: serde_json::from_str(row.get("state"))
            .map_err(|e| corrupt("checkpoint state", e))?,
        version: seq_from_db(row.get("version")),
        created_at: Timestamp::from_millis(row.get("created_at")),
        updated_at: Timestamp::from_millis(row.get("updated_at")),
    })
}

async fn fetch_checkpoint(
    conn: &mut SqliteConnection,
    scope: &Scope,
    id: &CheckpointId,
) -> Result<Checkpoint> {
    let row = sqlx::query(concat!(
        "SELECT ",
        checkpoint_columns!(),
        " FROM checkpoints WHERE namespace = ?1 AND subject = ?2 AND id = ?3"
    ))
    .bind(scope.namespace().as_str())
    .bind(subject_of(scope))
    .bind(id.as_str())
    .fetch_optional(conn)
    .await
    .db()?
    .ok_or_else(|| MemoryError::not_found("checkpoint", id.as_str()))?;
    checkpoint_from(&row)
}

#[async_trait]
impl CheckpointStore for SqliteStore {
    async fn put_checkpoint(&self, scope: &Scope, new: NewCheckpoint) -> Result<Checkpoint> {
        let now = self.clock.now();
        let mut tx = self.write().await?;
        let inserted = sqlx::query(sql::documents::INSERT_CHECKPOINT)
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .bind(new.id.as_str())
            .bind(&new.workflow)
            .bind(new.status.as_str())
            .bind(to_json(&new.state))
            .bind(millis(now))
            .execute(&mut *tx)
            .await
            .db()?;
        if inserted.rows_affected() == 0 {
            return Err(MemoryError::AlreadyExists {
                entity: "checkpoint",
                id: new.id.to_string(),
            });
        }
        tx.commit().await.db()?;
        Ok(new.into_checkpoint(now))
    }

    async fn get_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<Checkpoint> {
        let mut conn = self.reader.acquire().await?;
        fetch_checkpoint(&mut conn, scope, id).await
    }

    async fn update_checkpoint(
        &self,
        scope: &Scope,
        id: &CheckpointId,
        update: CheckpointUpdate,
    ) -> Result<Checkpoint> {
        let now = self.clock.now();
        let mut tx = self.write().await?;
        let mut checkpoint = fetch_checkpoint(&mut tx, scope, id).await?;
        update.apply_to(&mut checkpoint, now)?;
        sqlx::query(sql::documents::UPDATE_CHECKPOINT)
            .bind(checkpoint.status.as_str())
            .bind(to_json(&checkpoint.state))
            .bind(seq_to_db(checkpoint.version))
            .bind(millis(now))
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .bind(id.as_str())
            .execute(&mut *tx)
            .await
            .db()?;
        tx.commit().await.db()?;
        Ok(checkpoint)
    }

    async fn list_suspended(
        &self,
        scope: &Scope,
        workflow: Option<&str>,
    ) -> Result<Vec<Checkpoint>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            checkpoint_columns!(),
            " FROM checkpoints WHERE namespace = ?1 AND subject = ?2 AND status = 'suspended'
               AND (?3 IS NULL OR workflow = ?3) ORDER BY updated_at, id"
        ))
        .bind(scope.namespace().as_str())
        .bind(subject_of(scope))
        .bind(workflow)
        .fetch_all(&mut *self.reader.acquire().await?)
        .await
        .db()?;
        rows.iter().map(checkpoint_from).collect()
    }

    async fn delete_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<bool> {
        let removed = sqlx::query(sql::documents::DELETE_CHECKPOINT)
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .bind(id.as_str())
            .execute(&mut *self.writer.connections().acquire().await?)
            .await
            .db()?
            .rows_affected();
        Ok(removed > 0)
    }
}

#[async_trait]
impl CacheStore for SqliteStore {
    async fn cache_get(&self, namespace: &Namespace, key: &str) -> Result<Option<Vec<u8>>> {
        sqlx::query_scalar(sql::documents::CACHE_GET)
            .bind(namespace.as_str())
            .bind(key)
            .bind(millis(self.clock.now()))
            .fetch_optional(&mut *self.reader.acquire().await?)
            .await
            .db()
    }

    async fn cache_set(
        &self,
        namespace: &Namespace,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        let expires = ttl.map(|ttl| self.clock.now().saturating_add(ttl));
        let mut conn = self.writer.connections().acquire().await?;
        put_cache(&mut conn, namespace, key, &value, expires).await
    }

    async fn cache_get_many(
        &self,
        namespace: &Namespace,
        keys: &[String],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let rows: Vec<(String, Vec<u8>)> = sqlx::query_as(sql::documents::CACHE_GET_MANY)
            .bind(namespace.as_str())
            .bind(to_json(&keys))
            .bind(millis(self.clock.now()))
            .fetch_all(&mut *self.reader.acquire().await?)
            .await
            .db()?;
        let found: HashMap<String, Vec<u8>> = rows.into_iter().collect();
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
        let mut tx = self.write().await?;
        for (key, value) in &entries {
            put_cache(&mut tx, namespace, key, value, expires).await?;
        }
        tx.commit().await.db()
    }

    async fn cache_delete(&self, namespace: &Namespace, key: &str) -> Result<bool> {
        let removed: Option<Option<i64>> = sqlx::query_scalar(sql::documents::CACHE_DELETE)
            .bind(namespace.as_str())
            .bind(key)
            .fetch_optional(&mut *self.writer.connections().acquire().await?)
            .await
            .db()?;
        let now = millis(self.clock.now());
        Ok(removed.is_some_and(|expires| expires.is_none_or(|at| at > now)))
    }
}
