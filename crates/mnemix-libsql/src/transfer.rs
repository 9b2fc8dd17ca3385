//! Export and restore: every table read back as [`Record`]s, and records written verbatim.

use std::collections::{BTreeSet, HashMap};

use async_trait::async_trait;
use mnemix_core::adapter::sort_canonical;
use mnemix_core::transfer::Record;
use mnemix_core::{
    ConversationId, Namespace, Result, Scope, StoredMessage, Subject, Timestamp, TransferStore,
    WorkingMemoryKey,
};
use mnemix_sqlite_sql as sql;
use mnemix_sqlite_sql::driver::Conn as FamilyConn;
use mnemix_sqlite_sql::family::facts as family;
use mnemix_sqlite_sql::family::vectors::collection_records;
use mnemix_sqlite_sql::family::{conversations, documents};

use crate::conversations::message_from;
use crate::db::{corrupt, millis, rows, seq_from_db, subject_of, Conn, RowExt};
use crate::vectors::{namespace_collections, record_from, Tables, RECORD_COLUMNS};
use crate::LibsqlStore;

fn scope_of(namespace: &Namespace, subject: String) -> Result<Scope> {
    let subject = if subject.is_empty() {
        None
    } else {
        Some(Subject::new(subject).map_err(|e| corrupt("subject", e))?)
    };
    Ok(Scope::from_parts(namespace.clone(), subject))
}

/// Strings of the first column of every row.
async fn strings(
    conn: &Conn,
    sql: &str,
    params: impl libsql::params::IntoParams,
) -> Result<Vec<String>> {
    rows(conn, sql, params)
        .await?
        .iter()
        .map(|r| r.string(0))
        .collect()
}

#[async_trait]
impl TransferStore for LibsqlStore {
    async fn namespaces(&self) -> Result<Vec<Namespace>> {
        let tx = self.read().await?;
        let names = strings(
            &tx,
            sql::transfer::NAMESPACES,
            [millis(self.common.clock.now())],
        )
        .await?;
        names
            .into_iter()
            .map(|n| Namespace::new(n).map_err(|e| corrupt("namespace", e)))
            .collect()
    }

    async fn scopes(&self, namespace: &Namespace) -> Result<Vec<Scope>> {
        let tx = self.read().await?;
        let mut subjects: BTreeSet<String> = strings(
            &tx,
            sql::transfer::SUBJECTS_BUT_VECTORS,
            (namespace.as_str(), millis(self.common.clock.now())),
        )
        .await?
        .into_iter()
        .collect();
        for collection in namespace_collections(&tx, namespace).await? {
            subjects.extend(
                strings(
                    &tx,
                    &format!("SELECT DISTINCT subject FROM {}", collection.table()),
                    (),
                )
                .await?,
            );
        }
        tx.commit().await?;
        subjects
            .into_iter()
            .map(|s| scope_of(namespace, s))
            .collect()
    }

    async fn export_namespace(&self, namespace: &Namespace) -> Result<Vec<Record>> {
        let mut tx = self.read().await?;
        let mut records = collection_records(&mut tx, namespace).await?;
        let entries = rows(
            &tx,
            sql::transfer::EXPORT_CACHE,
            (namespace.as_str(), millis(self.common.clock.now())),
        )
        .await?;
        tx.commit().await?;
        for entry in &entries {
            records.push(Record::CacheEntry {
                namespace: namespace.clone(),
                key: entry.string(0)?,
                value: entry.blob(1)?,
                expires_at: entry.opt_int(2)?.map(Timestamp::from_millis),
            });
        }
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
        for row in FamilyConn::rows(&mut *tx, sql::conversations::OF_SCOPE, &params).await? {
            let conversation = conversations::conversation_from(scope, &row)?;
            ids.insert(row.int(0)?, conversation.id.clone());
            records.push(Record::Conversation { conversation });
        }
        let id_of = |pk: i64| -> Result<ConversationId> {
            ids.get(&pk)
                .cloned()
                .ok_or_else(|| corrupt("conversation reference", pk))
        };

        for row in rows(&tx, sql::transfer::EXPORT_MESSAGES, (namespace, subject)).await? {
            records.push(Record::Message {
                scope: scope.clone(),
                conversation_id: id_of(row.int(0)?)?,
                message: StoredMessage {
                    seq: seq_from_db(row.int(1)?),
                    message: message_from(&row.string(2)?)?,
                },
            });
        }

        for row in rows(&tx, sql::transfer::EXPORT_CURSORS, (namespace, subject)).await? {
            records.push(Record::Cursor {
                scope: scope.clone(),
                conversation_id: id_of(row.int(0)?)?,
                name: row.string(1)?,
                value: seq_from_db(row.int(2)?),
            });
        }

        for row in FamilyConn::rows(&mut *tx, sql::transfer::EXPORT_WORKING_MEMORY, &params).await?
        {
            let key = match row.int(0)? {
                0 => WorkingMemoryKey::User,
                pk => WorkingMemoryKey::Conversation(id_of(pk)?),
            };
            records.push(Record::WorkingMemory {
                scope: scope.clone(),
                key,
                memory: documents::working_from(&row, 1)?,
            });
        }

        let export_facts = [namespace.into(), subject.into(), now.into()];
        for row in FamilyConn::rows(&mut *tx, sql::transfer::EXPORT_FACTS, &export_facts).await? {
            records.push(Record::Fact {
                fact: family::fact_from(scope, &row)?,
            });
        }

        for collection in namespace_collections(&tx, scope.namespace()).await? {
            for row in rows(
                &tx,
                &format!(
                    "SELECT {RECORD_COLUMNS} FROM {} WHERE subject = ?1",
                    collection.table()
                ),
                [subject],
            )
            .await?
            {
                records.push(Record::Vector {
                    scope: scope.clone(),
                    collection: collection.spec.name.clone(),
                    record: record_from(&row, 0, true)?,
                });
            }
        }

        for row in FamilyConn::rows(&mut *tx, sql::transfer::EXPORT_CHECKPOINTS, &params).await? {
            records.push(Record::Checkpoint {
                scope: scope.clone(),
                checkpoint: documents::checkpoint_from(&row)?,
            });
        }
        tx.commit().await?;
        sort_canonical(&mut records);
        Ok(records)
    }

    async fn restore(&self, records: Vec<Record>) -> Result<u64> {
        mnemix_sqlite_sql::family::store::restore(self, records).await
    }
}
