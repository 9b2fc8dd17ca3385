//! The small keyed documents: working memory, checkpoints and the byte cache.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use mnemix_core::{
    CacheStore, Checkpoint, CheckpointId, CheckpointStatus, CheckpointStore, CheckpointUpdate,
    MemoryError, Namespace, NewCheckpoint, Result, Scope, Timestamp, WorkingMemory,
    WorkingMemoryFormat, WorkingMemoryKey, WorkingMemoryStore, WorkingMemoryUpdate,
};
use tokio_postgres::Row;

use crate::db::{corrupt, from_db, millis, subject_of, text_from, to_db, to_json, Db, DbResult};
use crate::PostgresStore;

pub(crate) fn format_from(text: &str) -> Result<WorkingMemoryFormat> {
    WorkingMemoryFormat::parse(text).ok_or_else(|| corrupt("working memory format", text))
}

/// A working-memory row's `content, format, revision, updated_at` columns.
pub(crate) fn working_from(row: &Row, first: usize) -> Result<WorkingMemory> {
    Ok(WorkingMemory {
        content: text_from(row.get(first))?,
        format: format_from(row.get(first + 1))?,
        revision: from_db(row.get(first + 2)),
        updated_at: Timestamp::from_millis(row.get(first + 3)),
    })
}

fn status_from(text: &str) -> Result<CheckpointStatus> {
    CheckpointStatus::parse(text).ok_or_else(|| corrupt("checkpoint status", text))
}

pub(crate) const CHECKPOINT_COLUMNS: &str =
    "id, workflow, status, state, version, created_at, updated_at";

pub(crate) fn checkpoint_from(row: &Row) -> Result<Checkpoint> {
    Ok(Checkpoint {
        id: CheckpointId::new(row.get::<_, String>("id"))
            .map_err(|e| corrupt("checkpoint id", e))?,
        workflow: row.get("workflow"),
        status: status_from(row.get("status"))?,
        state: serde_json::from_str(row.get("state"))
            .map_err(|e| corrupt("checkpoint state", e))?,
        version: from_db(row.get("version")),
        created_at: Timestamp::from_millis(row.get("created_at")),
        updated_at: Timestamp::from_millis(row.get("updated_at")),
    })
}

impl PostgresStore {
    /// The `working_memory.conversation` of a key: the conversation's pk (`NotFound` when it is
    /// not in the scope), NULL for the user document.
    pub(crate) async fn working_slot(
        &self,
        db: &impl Db,
        scope: &Scope,
        key: &WorkingMemoryKey,
    ) -> Result<Option<i64>> {
        match key {
            WorkingMemoryKey::Conversation(id) => {
                Ok(Some(self.conversation_pk(db, scope, id, false).await?.0))
            }
            WorkingMemoryKey::User => Ok(None),
        }
    }

    async fn read_working(
        &self,
        db: &impl Db,
        scope: &Scope,
        slot: Option<i64>,
    ) -> Result<Option<WorkingMemory>> {
        db.row(
            &self.sql(
                "SELECT content, format, revision, updated_at FROM {s}.working_memory
                 WHERE namespace = $1 AND subject = $2 AND conversation IS NOT DISTINCT FROM $3",
            ),
            &[&scope.namespace().as_str(), &subject_of(scope), &slot],
        )
        .await?
        .map(|row| working_from(&row, 0))
        .transpose()
    }

    async fn fetch_checkpoint(
        &self,
        db: &impl Db,
        scope: &Scope,
        id: &CheckpointId,
        lock: bool,
    ) -> Result<Checkpoint> {
        let lock = if lock { " FOR UPDATE" } else { "" };
        let row = db
            .row(
                &self.sql(&format!(
                    "SELECT {CHECKPOINT_COLUMNS} FROM {{s}}.checkpoints
                     WHERE namespace = $1 AND subject = $2 AND id = $3{lock}"
                )),
                &[
                    &scope.namespace().as_str(),
                    &subject_of(scope),
                    &id.as_str(),
                ],
            )
            .await?
            .ok_or_else(|| MemoryError::not_found("checkpoint", id.as_str()))?;
        checkpoint_from(&row)
    }
}

#[async_trait]
impl WorkingMemoryStore for PostgresStore {
    async fn get_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
    ) -> Result<Option<WorkingMemory>> {
        let client = self.client().await?;
        let slot = self.working_slot(&client, scope, key).await?;
        self.read_working(&client, scope, slot).await
    }

    async fn set_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
        update: WorkingMemoryUpdate,
    ) -> Result<WorkingMemory> {
        let now = self.clock.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.db()?;
        let slot = self.working_slot(&tx, scope, key).await?;
        // Compare-and-set needs the read and the write in one critical section, also when the
        // document does not exist yet (no row to lock): an advisory lock per document.
        let lock_key = format!(
            "working-memory\u{1f}{}\u{1f}{}\u{1f}{slot:?}",
            scope.namespace(),
            subject_of(scope)
        );
        tx.exec(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
            &[&lock_key],
        )
        .await?;
        let current = self
            .read_working(&tx, scope, slot)
            .await?
            .map_or(0, |w| w.revision);
        let stored = update.apply(current, now)?;
        self.write_working(&tx, scope, slot, &stored).await?;
        tx.commit().await.db()?;
        Ok(stored)
    }

    async fn clear_working_memory(&self, scope: &Scope, key: &WorkingMemoryKey) -> Result<bool> {
        let client = self.client().await?;
        let slot = self.working_slot(&client, scope, key).await?;
        let removed = client
            .exec(
                &self.sql(
                    "DELETE FROM {s}.working_memory WHERE namespace = $1 AND subject = $2
                       AND conversation IS NOT DISTINCT FROM $3",
                ),
                &[&scope.namespace().as_str(), &subject_of(scope), &slot],
            )
            .await?;
        Ok(removed > 0)
    }
}

#[async_trait]
impl CheckpointStore for PostgresStore {
    async fn put_checkpoint(&self, scope: &Scope, new: NewCheckpoint) -> Result<Checkpoint> {
        let now = self.clock.now();
        let client = self.client().await?;
        let inserted = client
            .exec(
                &self.sql(
                    "INSERT INTO {s}.checkpoints (namespace, subject, id, workflow, status, state,
                         version, created_at, updated_at)
                     VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $7)
                     ON CONFLICT (namespace, subject, id) DO NOTHING",
                ),
                &[
                    &scope.namespace().as_str(),
                    &subject_of(scope),
                    &new.id.as_str(),
                    &new.workflow,
                    &new.status.as_str(),
                    &to_json(&new.state),
                    &millis(now),
                ],
            )
            .await?;
        if inserted == 0 {
            return Err(MemoryError::AlreadyExists {
                entity: "checkpoint",
                id: new.id.to_string(),
            });
        }
        Ok(new.into_checkpoint(now))
    }

    async fn get_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<Checkpoint> {
        let client = self.client().await?;
        self.fetch_checkpoint(&client, scope, id, false).await
    }

    async fn update_checkpoint(
        &self,
        scope: &Scope,
        id: &CheckpointId,
        update: CheckpointUpdate,
    ) -> Result<Checkpoint> {
        let now = self.clock.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.db()?;
        // The row lock makes the version fence and the write one critical section.
        let mut checkpoint = self.fetch_checkpoint(&tx, scope, id, true).await?;
        update.apply_to(&mut checkpoint, now)?;
        tx.exec(
            &self.sql(
                "UPDATE {s}.checkpoints SET status = $1, state = $2, version = $3, updated_at = $4
                 WHERE namespace = $5 AND subject = $6 AND id = $7",
            ),
            &[
                &checkpoint.status.as_str(),
                &to_json(&checkpoint.state),
                &to_db(checkpoint.version),
                &millis(now),
                &scope.namespace().as_str(),
                &subject_of(scope),
                &id.as_str(),
            ],
        )
        .await?;
        tx.commit().await.db()?;
        Ok(checkpoint)
    }

    async fn list_suspended(
        &self,
        scope: &Scope,
        workflow: Option<&str>,
    ) -> Result<Vec<Checkpoint>> {
        let client = self.client().await?;
        let rows = client
            .rows(
                &self.sql(&format!(
                    "SELECT {CHECKPOINT_COLUMNS} FROM {{s}}.checkpoints
                     WHERE namespace = $1 AND subject = $2 AND status = 'suspended'
                       AND ($3::text IS NULL OR workflow = $3) ORDER BY updated_at, id"
                )),
                &[&scope.namespace().as_str(), &subject_of(scope), &workflow],
            )
            .await?;
        rows.iter().map(checkpoint_from).collect()
    }

    async fn delete_checkpoint(&self, scope: &Scope, id: &CheckpointId) -> Result<bool> {
        let client = self.client().await?;
        let removed = client
            .exec(
                &self.sql(
                    "DELETE FROM {s}.checkpoints WHERE namespace = $1 AND subject = $2 AND id = $3",
                ),
                &[
                    &scope.namespace().as_str(),
                    &subject_of(scope),
                    &id.as_str(),
                ],
            )
            .await?;
        Ok(removed > 0)
    }
}

#[async_trait]
impl CacheStore for PostgresStore {
    async fn cache_get(&self, namespace: &Namespace, key: &str) -> Result<Option<Vec<u8>>> {
        let client = self.client().await?;
        Ok(client
            .row(
                &self.sql(
                    "SELECT value FROM {s}.cache WHERE namespace = $1 AND key = $2
                       AND (expires_at IS NULL OR expires_at > $3)",
                ),
                &[&namespace.as_str(), &key, &millis(self.clock.now())],
            )
            .await?
            .map(|row| row.get(0)))
    }

    async fn cache_set(
        &self,
        namespace: &Namespace,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        let expires = ttl.map(|ttl| millis(self.clock.now().saturating_add(ttl)));
        let client = self.client().await?;
        self.put_cache(&client, namespace, key, &value, expires)
            .await
    }

    async fn cache_get_many(
        &self,
        namespace: &Namespace,
        keys: &[String],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let client = self.client().await?;
        let rows = client
            .rows(
                &self.sql(
                    "SELECT key, value FROM {s}.cache WHERE namespace = $1 AND key = ANY($2)
                       AND (expires_at IS NULL OR expires_at > $3)",
                ),
                &[&namespace.as_str(), &keys, &millis(self.clock.now())],
            )
            .await?;
        let found: HashMap<String, Vec<u8>> =
            rows.iter().map(|row| (row.get(0), row.get(1))).collect();
        Ok(keys.iter().map(|key| found.get(key).cloned()).collect())
    }

    async fn cache_set_many(
        &self,
        namespace: &Namespace,
        entries: Vec<(String, Vec<u8>)>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        let expires = ttl.map(|ttl| millis(self.clock.now().saturating_add(ttl)));
        let (keys, values): (Vec<String>, Vec<Vec<u8>>) = entries.into_iter().unzip();
        // One statement (the front layer passes each key once, as ON CONFLICT needs).
        let client = self.client().await?;
        client
            .exec(
                &self.sql(
                    "INSERT INTO {s}.cache (namespace, key, value, expires_at)
                     SELECT $1::text, k, v, $4::bigint FROM unnest($2::text[], $3::bytea[]) AS u(k, v)
                     ON CONFLICT (namespace, key) DO UPDATE SET
                         value = excluded.value, expires_at = excluded.expires_at",
                ),
                &[&namespace.as_str(), &keys, &values, &expires],
            )
            .await?;
        Ok(())
    }

    async fn cache_delete(&self, namespace: &Namespace, key: &str) -> Result<bool> {
        let client = self.client().await?;
        let removed = client
            .row(
                &self.sql(
                    "DELETE FROM {s}.cache WHERE namespace = $1 AND key = $2 RETURNING expires_at",
                ),
                &[&namespace.as_str(), &key],
            )
            .await?;
        let now = millis(self.clock.now());
        Ok(removed.is_some_and(|row| row.get::<_, Option<i64>>(0).is_none_or(|at| at > now)))
    }
}

impl PostgresStore {
    /// Writes a working-memory document into its slot (set and restore).
    pub(crate) async fn write_working(
        &self,
        db: &impl Db,
        scope: &Scope,
        slot: Option<i64>,
        memory: &WorkingMemory,
    ) -> Result<()> {
        db.exec(
            &self.sql(
                "INSERT INTO {s}.working_memory
                     (namespace, subject, conversation, content, format, revision, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (namespace, subject, conversation) DO UPDATE SET
                     content = excluded.content, format = excluded.format,
                     revision = excluded.revision, updated_at = excluded.updated_at",
            ),
            &[
                &scope.namespace().as_str(),
                &subject_of(scope),
                &slot,
                &memory.content.as_bytes(),
                &memory.format.as_str(),
                &to_db(memory.revision),
                &millis(memory.updated_at),
            ],
        )
        .await?;
        Ok(())
    }

    /// Writes a cache entry with an absolute expiry (shared by `cache_set` and restore).
    pub(crate) async fn put_cache(
        &self,
        db: &impl Db,
        namespace: &Namespace,
        key: &str,
        value: &[u8],
        expires_at: Option<i64>,
    ) -> Result<()> {
        db.exec(
            &self.sql(
                "INSERT INTO {s}.cache (namespace, key, value, expires_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (namespace, key) DO UPDATE SET
                     value = excluded.value, expires_at = excluded.expires_at",
            ),
            &[&namespace.as_str(), &key, &value, &expires_at],
        )
        .await?;
        Ok(())
    }
}
