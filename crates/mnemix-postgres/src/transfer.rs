//! Export and restore: every table read back as [`Record`]s, and records written verbatim.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use mnemix_core::adapter::sort_canonical;
use mnemix_core::transfer::Record;
use mnemix_core::{
    ConversationId, MemoryError, Namespace, Result, Scope, StoredMessage, Subject, Timestamp,
    TransferStore, WorkingMemoryKey,
};
use tokio_postgres::types::{ToSql, Type};

use crate::conversations::{conversation_from, message_from, CONVERSATION_COLUMNS};
use crate::db::{
    corrupt, from_db, millis, stage, subject_of, to_db, to_json, Complete, Db, DbResult,
    StagedColumn,
};
use crate::documents::{checkpoint_from, working_from, CHECKPOINT_COLUMNS};
use crate::facts::{fact_from, FACT_COLUMNS};
use crate::vectors::{record_from, CollectionRow, VectorRow};
use crate::PostgresStore;

fn scope_of(namespace: &Namespace, subject: String) -> Result<Scope> {
    let subject = if subject.is_empty() {
        None
    } else {
        Some(Subject::new(subject).map_err(|e| corrupt("subject", e))?)
    };
    Ok(Scope::from_parts(namespace.clone(), subject))
}

/// Live rows only: no read returns an expired fact or cache entry, so no export does either.
const LIVE: &str = "(expires_at IS NULL OR expires_at > $1)";

#[async_trait]
impl TransferStore for PostgresStore {
    async fn namespaces(&self) -> Result<Vec<Namespace>> {
        let client = self.client().await?;
        let rows = client
            .rows(
                &self.sql(&format!(
                    "SELECT namespace FROM {{s}}.conversations
                     UNION SELECT namespace FROM {{s}}.working_memory
                     UNION SELECT namespace FROM {{s}}.facts WHERE {LIVE}
                     UNION SELECT namespace FROM {{s}}.collections
                     UNION SELECT namespace FROM {{s}}.checkpoints
                     UNION SELECT namespace FROM {{s}}.cache WHERE {LIVE}
                     ORDER BY 1"
                )),
                &[&millis(self.clock.now())],
            )
            .await?;
        rows.iter()
            .map(|row| Namespace::new(row.get::<_, String>(0)).map_err(|e| corrupt("namespace", e)))
            .collect()
    }

    async fn scopes(&self, namespace: &Namespace) -> Result<Vec<Scope>> {
        let client = self.client().await?;
        let rows = client
            .rows(
                &self.sql(&format!(
                    "SELECT subject FROM {{s}}.conversations WHERE namespace = $2
                     UNION SELECT subject FROM {{s}}.working_memory WHERE namespace = $2
                     UNION SELECT subject FROM {{s}}.facts WHERE namespace = $2 AND {LIVE}
                     UNION SELECT v.subject FROM {{s}}.vectors v
                           JOIN {{s}}.collections c ON c.pk = v.collection WHERE c.namespace = $2
                     UNION SELECT subject FROM {{s}}.checkpoints WHERE namespace = $2
                     ORDER BY 1"
                )),
                &[&millis(self.clock.now()), &namespace.as_str()],
            )
            .await?;
        rows.into_iter()
            .map(|row| scope_of(namespace, row.get(0)))
            .collect()
    }

    async fn export_namespace(&self, namespace: &Namespace) -> Result<Vec<Record>> {
        let mut client = self.client().await?;
        // One snapshot for the whole unit.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .db()?;
        let mut records = Vec::new();
        for row in tx
            .rows(
                &self.sql("SELECT pk, name, dims, metric, model FROM {s}.collections WHERE namespace = $1"),
                &[&namespace.as_str()],
            )
            .await?
        {
            records.push(Record::Collection {
                namespace: namespace.clone(),
                spec: crate::vectors::collection_from(&row)?.spec,
            });
        }
        for row in tx
            .rows(
                &self.sql(&format!(
                    "SELECT key, value, expires_at FROM {{s}}.cache WHERE {LIVE} AND namespace = $2"
                )),
                &[&millis(self.clock.now()), &namespace.as_str()],
            )
            .await?
        {
            records.push(Record::CacheEntry {
                namespace: namespace.clone(),
                key: row.get(0),
                value: row.get(1),
                expires_at: row.get::<_, Option<i64>>(2).map(Timestamp::from_millis),
            });
        }
        tx.commit().await.db()?;
        sort_canonical(&mut records);
        Ok(records)
    }

    async fn export_scope(&self, scope: &Scope) -> Result<Vec<Record>> {
        let (namespace, subject) = (scope.namespace().as_str(), subject_of(scope));
        let now = millis(self.clock.now());
        let mut client = self.client().await?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .db()?;
        let mut records = Vec::new();
        let mut ids: HashMap<i64, ConversationId> = HashMap::new();
        for row in tx
            .rows(
                &self.sql(&format!(
                    "SELECT {CONVERSATION_COLUMNS} FROM {{s}}.conversations
                     WHERE namespace = $1 AND subject = $2"
                )),
                &[&namespace, &subject],
            )
            .await?
        {
            let conversation = conversation_from(scope, &row)?;
            ids.insert(row.get("pk"), conversation.id.clone());
            records.push(Record::Conversation { conversation });
        }
        let id_of = |pk: i64| -> Result<ConversationId> {
            ids.get(&pk)
                .cloned()
                .ok_or_else(|| corrupt("conversation reference", pk))
        };
        for row in tx
            .rows(
                &self.sql(
                    "SELECT m.conversation, m.seq, m.body FROM {s}.messages m
                     JOIN {s}.conversations c ON c.pk = m.conversation
                     WHERE c.namespace = $1 AND c.subject = $2",
                ),
                &[&namespace, &subject],
            )
            .await?
        {
            records.push(Record::Message {
                scope: scope.clone(),
                conversation_id: id_of(row.get(0))?,
                message: StoredMessage {
                    seq: from_db(row.get(1)),
                    message: message_from(row.get(2))?,
                },
            });
        }
        for row in tx
            .rows(
                &self.sql(
                    "SELECT k.conversation, k.name, k.value FROM {s}.cursors k
                     JOIN {s}.conversations c ON c.pk = k.conversation
                     WHERE c.namespace = $1 AND c.subject = $2",
                ),
                &[&namespace, &subject],
            )
            .await?
        {
            records.push(Record::Cursor {
                scope: scope.clone(),
                conversation_id: id_of(row.get(0))?,
                name: row.get(1),
                value: from_db(row.get(2)),
            });
        }
        for row in tx
            .rows(
                &self.sql(
                    "SELECT conversation, content, format, revision, updated_at
                     FROM {s}.working_memory WHERE namespace = $1 AND subject = $2",
                ),
                &[&namespace, &subject],
            )
            .await?
        {
            let key = match row.get::<_, Option<i64>>(0) {
                None => WorkingMemoryKey::User,
                Some(pk) => WorkingMemoryKey::Conversation(id_of(pk)?),
            };
            records.push(Record::WorkingMemory {
                scope: scope.clone(),
                key,
                memory: working_from(&row, 1)?,
            });
        }
        for row in tx
            .rows(
                &self.sql(&format!(
                    "SELECT {FACT_COLUMNS} FROM {{s}}.facts
                     WHERE namespace = $2 AND subject = $3 AND {LIVE}"
                )),
                &[&now, &namespace, &subject],
            )
            .await?
        {
            records.push(Record::Fact {
                fact: fact_from(scope, &row)?,
            });
        }
        for row in tx
            .rows(
                &self.sql(
                    "SELECT c.name, v.id, v.embedding, v.text, v.metadata, v.conversation_id
                     FROM {s}.vectors v JOIN {s}.collections c ON c.pk = v.collection
                     WHERE c.namespace = $1 AND v.subject = $2",
                ),
                &[&namespace, &subject],
            )
            .await?
        {
            records.push(Record::Vector {
                scope: scope.clone(),
                collection: row.get("name"),
                record: record_from(&row)?,
            });
        }
        for row in tx
            .rows(
                &self.sql(&format!(
                    "SELECT {CHECKPOINT_COLUMNS} FROM {{s}}.checkpoints
                     WHERE namespace = $1 AND subject = $2"
                )),
                &[&namespace, &subject],
            )
            .await?
        {
            records.push(Record::Checkpoint {
                scope: scope.clone(),
                checkpoint: checkpoint_from(&row)?,
            });
        }
        tx.commit().await.db()?;
        sort_canonical(&mut records);
        Ok(records)
    }

    async fn restore(&self, records: Vec<Record>) -> Result<u64> {
        let mut records = records;
        sort_canonical(&mut records);
        let written = records.len() as u64;
        let mut client = self.client().await?;
        let tx = client.transaction().await.db()?;
        let mut collections: HashMap<(Namespace, String), CollectionRow> = HashMap::new();
        // Messages and vectors, the bulk of an export, are written last in bulk; records come
        // in canonical order, so every parent they need is written by then.
        let mut messages = Vec::new();
        let mut vectors = Vec::new();
        for record in records {
            match record {
                Record::Message {
                    scope,
                    conversation_id,
                    message,
                } => messages.push((scope, conversation_id, message)),
                Record::Vector {
                    scope,
                    collection,
                    record,
                } => {
                    let key = (scope.namespace().clone(), collection);
                    if !collections.contains_key(&key) {
                        let row = self
                            .find_collection(&tx, &key.0, &key.1)
                            .await?
                            .ok_or_else(|| MemoryError::not_found("collection", key.1.as_str()))?;
                        collections.insert(key.clone(), row);
                    }
                    let collection = &collections[&key];
                    collection.spec.check_vector(&record.vector)?;
                    vectors.push((collection.pk, scope, record));
                }
                other => self.restore_one(&tx, other).await?,
            }
        }
        self.restore_messages(&tx, &messages).await?;
        let rows: Vec<VectorRow<'_>> = vectors
            .iter()
            .map(|(collection, scope, record)| VectorRow {
                collection: *collection,
                subject: subject_of(scope),
                record,
            })
            .collect();
        self.write_vectors(&tx, &rows).await?;
        tx.commit().await.db()?;
        self.refresh_statistics(&client, rows.len()).await;
        Ok(written)
    }
}

/// The staging table of restored messages. `keep` is false for a message that a later one in
/// the batch replaces (same id or same seq): it still replaces stored ones, as it would have
/// were the records written one by one.
const MESSAGE_STAGING: [StagedColumn; 6] = [
    StagedColumn {
        name: "conversation",
        sql: "bigint",
        ty: Type::INT8,
    },
    StagedColumn {
        name: "seq",
        sql: "bigint",
        ty: Type::INT8,
    },
    StagedColumn {
        name: "id",
        sql: "text COLLATE \"C\"",
        ty: Type::TEXT,
    },
    StagedColumn {
        name: "role",
        sql: "text",
        ty: Type::TEXT,
    },
    StagedColumn {
        name: "body",
        sql: "text",
        ty: Type::TEXT,
    },
    StagedColumn {
        name: "keep",
        sql: "boolean",
        ty: Type::BOOL,
    },
];

impl PostgresStore {
    /// Writes restored messages through `COPY`: each replaces the stored message with its id or
    /// its seq, and a conversation that is not stored is `NotFound`.
    async fn restore_messages(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        messages: &[(Scope, ConversationId, StoredMessage)],
    ) -> Result<()> {
        if messages.is_empty() {
            return Ok(());
        }
        let (mut ids, mut seqs) = (HashSet::new(), HashSet::new());
        let mut keep = vec![false; messages.len()];
        for (i, (scope, conversation, m)) in messages.iter().enumerate().rev() {
            let new_id = ids.insert((scope, conversation, m.message.id.as_str()));
            let new_seq = seqs.insert((scope, conversation, m.seq));
            keep[i] = new_id && new_seq;
        }
        // Each conversation's pk once (a missing one is `NotFound`).
        let mut pks: HashMap<(&Scope, &ConversationId), i64> = HashMap::new();
        for (scope, conversation, _) in messages {
            if let Entry::Vacant(slot) = pks.entry((scope, conversation)) {
                slot.insert(
                    self.conversation_pk(tx, scope, conversation, false)
                        .await?
                        .0,
                );
            }
        }
        let encoded: Vec<_> = messages
            .iter()
            .zip(&keep)
            .map(|((scope, conversation, m), keep)| {
                (
                    pks[&(scope, conversation)],
                    to_db(m.seq),
                    m.message.id.as_str(),
                    m.message.role.as_str(),
                    to_json(&m.message),
                    *keep,
                )
            })
            .collect();
        stage(
            tx,
            "agent_memory_messages_in",
            &MESSAGE_STAGING,
            &encoded
                .iter()
                .map(|(conversation, seq, id, role, body, keep)| {
                    let row: [&(dyn ToSql + Sync); 6] = [conversation, seq, id, role, body, keep];
                    row
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        // Replacing stored messages is only needed when the conversations have any: a restore
        // into an empty store skips both joins.
        let conversations: Vec<i64> = pks.into_values().collect();
        let stored = tx
            .row(
                &self.sql("SELECT 1 FROM {s}.messages WHERE conversation = ANY($1) LIMIT 1"),
                &[&conversations],
            )
            .await?
            .is_some();
        if stored {
            for replaced in ["m.id = s.id", "m.seq = s.seq"] {
                tx.complete(
                    &self.sql(&format!(
                        "DELETE FROM {{s}}.messages m USING agent_memory_messages_in s
                         WHERE m.conversation = s.conversation AND {replaced}"
                    )),
                    &[],
                )
                .await?;
            }
        }
        tx.complete(
            &self.sql(
                "INSERT INTO {s}.messages (conversation, seq, id, role, body)
                 SELECT conversation, seq, id, role, body FROM agent_memory_messages_in
                 WHERE keep",
            ),
            &[],
        )
        .await?;
        Ok(())
    }

    /// Writes one record in the restore transaction. Records come in canonical order, so
    /// parents (collections, conversations) are written before their children.
    async fn restore_one(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        record: Record,
    ) -> Result<()> {
        match record {
            Record::Collection { namespace, spec } => {
                if self
                    .insert_collection(tx, &namespace, &spec)
                    .await?
                    .is_none()
                {
                    let existing = self
                        .find_collection(tx, &namespace, &spec.name)
                        .await?
                        .ok_or_else(|| MemoryError::not_found("collection", spec.name.as_str()))?;
                    existing.spec.check_same(&spec)?;
                }
            }
            Record::Conversation { conversation: c } => {
                // An upsert keeps the row (and its pk): its messages stay attached.
                tx.exec(
                    &self.sql(
                        "INSERT INTO {s}.conversations (namespace, subject, id, agent, title,
                             metadata, resource_slug, record_id, created_at, updated_at, last_seq)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
                         ON CONFLICT (namespace, subject, id) DO UPDATE SET
                             agent = excluded.agent, title = excluded.title,
                             metadata = excluded.metadata, resource_slug = excluded.resource_slug,
                             record_id = excluded.record_id, created_at = excluded.created_at,
                             updated_at = excluded.updated_at, last_seq = excluded.last_seq",
                    ),
                    &[
                        &c.scope.namespace().as_str(),
                        &subject_of(&c.scope),
                        &c.id.as_str(),
                        &c.agent,
                        &c.title.as_deref().map(str::as_bytes),
                        &to_json(&c.metadata),
                        &c.resource_slug,
                        &c.record_id,
                        &millis(c.created_at),
                        &millis(c.updated_at),
                        &to_db(c.last_seq),
                    ],
                )
                .await?;
            }
            Record::Cursor {
                scope,
                conversation_id,
                name,
                value,
            } => {
                let (pk, _) = self
                    .conversation_pk(tx, &scope, &conversation_id, false)
                    .await?;
                tx.exec(
                    &self.sql(
                        "INSERT INTO {s}.cursors (conversation, name, value) VALUES ($1, $2, $3)
                         ON CONFLICT (conversation, name) DO UPDATE SET value = excluded.value",
                    ),
                    &[&pk, &name, &to_db(value)],
                )
                .await?;
            }
            Record::WorkingMemory { scope, key, memory } => {
                let slot = self.working_slot(tx, &scope, &key).await?;
                self.write_working(tx, &scope, slot, &memory).await?;
            }
            Record::Fact { fact } => {
                self.write_fact(tx, &fact).await?;
            }
            // Written in bulk by `restore`.
            Record::Message { .. } | Record::Vector { .. } => {}
            Record::Checkpoint { scope, checkpoint } => {
                tx.exec(
                    &self.sql(
                        "INSERT INTO {s}.checkpoints (namespace, subject, id, workflow, status,
                             state, version, created_at, updated_at)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                         ON CONFLICT (namespace, subject, id) DO UPDATE SET
                             workflow = excluded.workflow, status = excluded.status,
                             state = excluded.state, version = excluded.version,
                             created_at = excluded.created_at, updated_at = excluded.updated_at",
                    ),
                    &[
                        &scope.namespace().as_str(),
                        &subject_of(&scope),
                        &checkpoint.id.as_str(),
                        &checkpoint.workflow,
                        &checkpoint.status.as_str(),
                        &to_json(&checkpoint.state),
                        &to_db(checkpoint.version),
                        &millis(checkpoint.created_at),
                        &millis(checkpoint.updated_at),
                    ],
                )
                .await?;
            }
            Record::CacheEntry {
                namespace,
                key,
                value,
                expires_at,
            } => {
                self.put_cache(tx, &namespace, &key, &value, expires_at.map(millis))
                    .await?;
            }
        }
        Ok(())
    }
}
