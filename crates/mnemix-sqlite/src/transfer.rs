//! Export and restore: every table read back as [`Record`]s, and records written verbatim.

use std::collections::HashMap;

use async_trait::async_trait;
use mnemix_core::adapter::sort_canonical;
use mnemix_core::transfer::Record;
use mnemix_core::{
    ConversationId, Namespace, Result, Scope, StoredMessage, Subject, Timestamp, TransferStore,
    WorkingMemoryKey,
};
use mnemix_sqlite_sql as sql;
use mnemix_sqlite_sql::driver::Conn;
use mnemix_sqlite_sql::family::facts as family;
use mnemix_sqlite_sql::family::vectors::collection_records;
use mnemix_sqlite_sql::family::{conversations, documents};
use sqlx::Row;

use crate::conversations::message_from;
use crate::db::{corrupt, millis, seq_from_db, subject_of, values, DbResult, Sqlx};
use crate::vectors::record_from;
use crate::SqliteStore;

fn scope_of(namespace: &Namespace, subject: String) -> Result<Scope> {
    let subject = if subject.is_empty() {
        None
    } else {
        Some(Subject::new(subject).map_err(|e| corrupt("subject", e))?)
    };
    Ok(Scope::from_parts(namespace.clone(), subject))
}

#[async_trait]
impl TransferStore for SqliteStore {
    async fn namespaces(&self) -> Result<Vec<Namespace>> {
        let names: Vec<String> = sqlx::query_scalar(sql::transfer::NAMESPACES)
            .bind(millis(self.common.clock.now()))
            .fetch_all(&mut *self.reader.acquire().await?)
            .await
            .db()?;
        names
            .into_iter()
            .map(|n| Namespace::new(n).map_err(|e| corrupt("namespace", e)))
            .collect()
    }

    async fn scopes(&self, namespace: &Namespace) -> Result<Vec<Scope>> {
        let subjects: Vec<String> = sqlx::query_scalar(concat!(
            mnemix_sqlite_sql::subjects_but_vectors!(),
            " UNION SELECT v.subject FROM vectors v JOIN collections c ON c.pk = v.collection
                   WHERE c.namespace = ?1
             ORDER BY 1"
        ))
        .bind(namespace.as_str())
        .bind(millis(self.common.clock.now()))
        .fetch_all(&mut *self.reader.acquire().await?)
        .await
        .db()?;
        subjects
            .into_iter()
            .map(|s| scope_of(namespace, s))
            .collect()
    }

    async fn export_namespace(&self, namespace: &Namespace) -> Result<Vec<Record>> {
        let mut tx = self.read().await?;
        let mut records = collection_records(&mut tx, namespace).await?;
        let entries: Vec<(String, Vec<u8>, Option<i64>)> =
            sqlx::query_as(sql::transfer::EXPORT_CACHE)
                .bind(namespace.as_str())
                .bind(millis(self.common.clock.now()))
                .fetch_all(&mut *tx)
                .await
                .db()?;
        tx.commit().await.db()?;
        records.extend(
            entries
                .into_iter()
                .map(|(key, value, expires_at)| Record::CacheEntry {
                    namespace: namespace.clone(),
                    key,
                    value,
                    expires_at: expires_at.map(Timestamp::from_millis),
                }),
        );
        sort_canonical(&mut records);
        Ok(records)
    }

    async fn export_scope(&self, scope: &Scope) -> Result<Vec<Record>> {
        let (namespace, subject) = (scope.namespace().as_str(), subject_of(scope));
        let now = millis(self.common.clock.now());
        // One read transaction: the export is one snapshot.
        let mut tx = self.read().await?;
        let mut records = Vec::new();
        let mut ids: HashMap<i64, ConversationId> = HashMap::new();

        let params = [namespace.into(), subject.into()];
        for row in &tx.rows(sql::conversations::OF_SCOPE, &params).await? {
            let conversation = conversations::conversation_from(scope, row)?;
            ids.insert(row.int(0)?, conversation.id.clone());
            records.push(Record::Conversation { conversation });
        }
        let id_of = |pk: i64| -> Result<ConversationId> {
            ids.get(&pk)
                .cloned()
                .ok_or_else(|| corrupt("conversation reference", pk))
        };

        let messages: Vec<(i64, i64, String)> = sqlx::query_as(sql::transfer::EXPORT_MESSAGES)
            .bind(namespace)
            .bind(subject)
            .fetch_all(&mut *tx)
            .await
            .db()?;
        for (pk, seq, body) in messages {
            records.push(Record::Message {
                scope: scope.clone(),
                conversation_id: id_of(pk)?,
                message: StoredMessage {
                    seq: seq_from_db(seq),
                    message: message_from(&body)?,
                },
            });
        }

        let cursors: Vec<(i64, String, i64)> = sqlx::query_as(sql::transfer::EXPORT_CURSORS)
            .bind(namespace)
            .bind(subject)
            .fetch_all(&mut *tx)
            .await
            .db()?;
        for (pk, name, value) in cursors {
            records.push(Record::Cursor {
                scope: scope.clone(),
                conversation_id: id_of(pk)?,
                name,
                value: seq_from_db(value),
            });
        }

        let documents = Sqlx(&mut tx)
            .rows(sql::transfer::EXPORT_WORKING_MEMORY, &params)
            .await?;
        for row in &documents {
            let key = match row.int(0)? {
                0 => WorkingMemoryKey::User,
                pk => WorkingMemoryKey::Conversation(id_of(pk)?),
            };
            records.push(Record::WorkingMemory {
                scope: scope.clone(),
                key,
                memory: documents::working_from(row, 1)?,
            });
        }

        let facts = sqlx::query(sql::transfer::EXPORT_FACTS)
            .bind(namespace)
            .bind(subject)
            .bind(now)
            .fetch_all(&mut *tx)
            .await
            .db()?;
        for row in &facts {
            records.push(Record::Fact {
                fact: family::fact_from(scope, &values(row)?)?,
            });
        }

        let vectors = sqlx::query(
            "SELECT c.name, v.id, v.vector, v.text, v.metadata, v.conversation_id
             FROM vectors v JOIN collections c ON c.pk = v.collection
             WHERE c.namespace = ?1 AND v.subject = ?2",
        )
        .bind(namespace)
        .bind(subject)
        .fetch_all(&mut *tx)
        .await
        .db()?;
        for row in &vectors {
            records.push(Record::Vector {
                scope: scope.clone(),
                collection: row.get("name"),
                record: record_from(row, true)?,
            });
        }

        let checkpoints = Sqlx(&mut tx)
            .rows(sql::transfer::EXPORT_CHECKPOINTS, &params)
            .await?;
        for row in &checkpoints {
            records.push(Record::Checkpoint {
                scope: scope.clone(),
                checkpoint: documents::checkpoint_from(row)?,
            });
        }
        tx.commit().await.db()?;
        sort_canonical(&mut records);
        Ok(records)
    }

    async fn restore(&self, records: Vec<Record>) -> Result<u64> {
        mnemix_sqlite_sql::family::store::restore(self, records).await
    }
}
