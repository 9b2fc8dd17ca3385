//! Export and restore, written once: every table read back as [`Record`]s in one snapshot,
//! and records written verbatim; vectors through each driver's [`VectorTables`].

use std::collections::{BTreeSet, HashMap};

use mnemix_core::adapter::sort_canonical;
use mnemix_core::transfer::Record;
use mnemix_core::{
    ConversationId, Namespace, Result, Scope, StoredMessage, Subject, Timestamp, WorkingMemoryKey,
};

use super::conversations::{conversation_from, message_from};
use super::vectors::{self, bump_generations, ensure_collection, CollectionRow, VectorTables};
use super::{
    conversation_pk, documents, facts, millis, seq_from_db, seq_to_db, subject_of, to_json,
};
use crate::driver::{corrupt, Conn, Param};
use crate::transfer as sql;

/// Every namespace that holds anything, in order, as of `now` (milliseconds).
pub async fn namespaces<C: Conn>(conn: &mut C, now: i64) -> Result<Vec<Namespace>> {
    let rows = conn.rows(sql::NAMESPACES, &[now.into()]).await?;
    rows.iter()
        .map(|row| Namespace::new(row.string(0)?).map_err(|e| row.corrupt("namespace", e)))
        .collect()
}

/// The scopes of a namespace that hold anything, in order, read in the snapshot `tx` is in.
pub async fn scopes<C: VectorTables>(
    tx: &mut C,
    namespace: &Namespace,
    now: i64,
) -> Result<Vec<Scope>> {
    let params = [namespace.as_str().into(), now.into()];
    let mut subjects = BTreeSet::new();
    for row in tx.rows(sql::SUBJECTS_BUT_VECTORS, &params).await? {
        subjects.insert(row.string(0)?);
    }
    subjects.extend(tx.vector_subjects(namespace).await?);
    subjects
        .into_iter()
        .map(|subject| scope_of::<C>(namespace, subject))
        .collect()
}

/// A stored subject column as its scope.
fn scope_of<C: Conn>(namespace: &Namespace, subject: String) -> Result<Scope> {
    let subject = if subject.is_empty() {
        None
    } else {
        Some(Subject::new(subject).map_err(|e| corrupt(C::BACKEND, "subject", e))?)
    };
    Ok(Scope::from_parts(namespace.clone(), subject))
}

/// A namespace's own records (its collections and live cache entries), in canonical order,
/// read in the snapshot `tx` is in.
pub async fn export_namespace<C: VectorTables>(
    tx: &mut C,
    namespace: &Namespace,
    now: i64,
) -> Result<Vec<Record>> {
    let mut records = vectors::collection_records(tx, namespace).await?;
    let params = [namespace.as_str().into(), now.into()];
    for entry in tx.rows(sql::EXPORT_CACHE, &params).await? {
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

/// Every record of a scope, in canonical order, read in the snapshot `tx` is in.
pub async fn export_scope<C: VectorTables>(
    tx: &mut C,
    scope: &Scope,
    now: i64,
) -> Result<Vec<Record>> {
    let params = [scope.namespace().as_str().into(), subject_of(scope).into()];
    let mut records = Vec::new();
    let mut ids: HashMap<i64, ConversationId> = HashMap::new();
    for row in tx.rows(crate::conversations::OF_SCOPE, &params).await? {
        let conversation = conversation_from(scope, &row)?;
        ids.insert(row.int(0)?, conversation.id.clone());
        records.push(Record::Conversation { conversation });
    }
    let id_of = |pk: i64| -> Result<ConversationId> {
        ids.get(&pk)
            .cloned()
            .ok_or_else(|| corrupt(C::BACKEND, "conversation reference", pk))
    };
    for row in tx.rows(sql::EXPORT_MESSAGES, &params).await? {
        records.push(Record::Message {
            scope: scope.clone(),
            conversation_id: id_of(row.int(0)?)?,
            message: StoredMessage {
                seq: seq_from_db(row.int(1)?),
                message: message_from(C::BACKEND, &row.string(2)?)?,
            },
        });
    }
    for row in tx.rows(sql::EXPORT_CURSORS, &params).await? {
        records.push(Record::Cursor {
            scope: scope.clone(),
            conversation_id: id_of(row.int(0)?)?,
            name: row.string(1)?,
            value: seq_from_db(row.int(2)?),
        });
    }
    for row in tx.rows(sql::EXPORT_WORKING_MEMORY, &params).await? {
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
    let live = [params[0], params[1], now.into()];
    for row in tx.rows(sql::EXPORT_FACTS, &live).await? {
        records.push(Record::Fact {
            fact: facts::fact_from(scope, &row)?,
        });
    }
    for (collection, record) in tx.scope_vectors(scope).await? {
        records.push(Record::Vector {
            scope: scope.clone(),
            collection,
            record,
        });
    }
    for row in tx.rows(sql::EXPORT_CHECKPOINTS, &params).await? {
        records.push(Record::Checkpoint {
            scope: scope.clone(),
            checkpoint: documents::checkpoint_from(&row)?,
        });
    }
    sort_canonical(&mut records);
    Ok(records)
}

/// Restores `records` in the write transaction `tx` is in, as they were exported: sorted into
/// canonical order first, so parents (collections, conversations) are written before their
/// children; the generation of every collection it wrote vectors into is bumped once. How many
/// records it wrote.
pub async fn restore<C: VectorTables>(tx: &mut C, mut records: Vec<Record>) -> Result<u64> {
    sort_canonical(&mut records);
    let written = records.len() as u64;
    let vectors = records
        .iter()
        .filter(|record| matches!(record, Record::Vector { .. }))
        .count();
    tx.before_writing(vectors).await?;
    let mut collections = HashMap::new();
    for record in records {
        restore_record(tx, record, &mut collections).await?;
    }
    // The collections looked up are those whose vectors were written.
    bump_generations(tx, collections.values().map(|c| c.pk).collect()).await?;
    Ok(written)
}

/// Writes one record; `collections` holds those its vectors were written into.
async fn restore_record<C: VectorTables>(
    tx: &mut C,
    record: Record,
    collections: &mut HashMap<(Namespace, String), CollectionRow>,
) -> Result<()> {
    match record {
        Record::Collection { namespace, spec } => {
            ensure_collection(tx, &namespace, &spec).await?;
        }
        Record::Vector {
            scope,
            collection,
            record,
        } => {
            let key = (scope.namespace().clone(), collection);
            if !collections.contains_key(&key) {
                let found = vectors::collection(tx, &key.0, &key.1).await?;
                collections.insert(key.clone(), found);
            }
            let collection = &collections[&key];
            collection.spec.check_vector(&record.vector)?;
            tx.write_vector(collection, subject_of(&scope), &record)
                .await?;
        }
        Record::Conversation { conversation: c } => {
            // An upsert, not a REPLACE: replacing the row would cascade to its messages.
            let metadata = to_json(&c.metadata);
            let params = [
                c.scope.namespace().as_str().into(),
                subject_of(&c.scope).into(),
                c.id.as_str().into(),
                c.agent.as_deref().into(),
                c.title.as_deref().map(Param::FreeText).into(),
                Param::Text(&metadata),
                c.resource_slug.as_deref().into(),
                c.record_id.as_deref().into(),
                millis(c.created_at).into(),
                millis(c.updated_at).into(),
                seq_to_db(c.last_seq).into(),
            ];
            tx.execute(sql::RESTORE_CONVERSATION, &params).await?;
        }
        Record::Message {
            scope,
            conversation_id,
            message: StoredMessage { seq, message },
        } => {
            let (pk, _) = conversation_pk(tx, &scope, &conversation_id).await?;
            // REPLACE drops the message stored at this seq or under this id (no table
            // references messages, so nothing else goes with it).
            let body = to_json(&message);
            let params = [
                pk.into(),
                seq_to_db(seq).into(),
                message.id.as_str().into(),
                message.role.as_str().into(),
                Param::Text(&body),
            ];
            tx.execute(sql::RESTORE_MESSAGE, &params).await?;
        }
        Record::Cursor {
            scope,
            conversation_id,
            name,
            value,
        } => {
            let (pk, _) = conversation_pk(tx, &scope, &conversation_id).await?;
            let params = [pk.into(), name.as_str().into(), seq_to_db(value).into()];
            tx.execute(sql::RESTORE_CURSOR, &params).await?;
        }
        Record::WorkingMemory { scope, key, memory } => {
            let slot = documents::working_slot(tx, &scope, &key).await?;
            documents::write_working(tx, &scope, slot, &memory).await?;
        }
        Record::Fact { fact } => facts::restore_fact(tx, &fact).await?,
        Record::Checkpoint { scope, checkpoint } => {
            let state = to_json(&checkpoint.state);
            let params = [
                scope.namespace().as_str().into(),
                subject_of(&scope).into(),
                checkpoint.id.as_str().into(),
                checkpoint.workflow.as_str().into(),
                checkpoint.status.as_str().into(),
                Param::Text(&state),
                seq_to_db(checkpoint.version).into(),
                millis(checkpoint.created_at).into(),
                millis(checkpoint.updated_at).into(),
            ];
            tx.execute(sql::RESTORE_CHECKPOINT, &params).await?;
        }
        Record::CacheEntry {
            namespace,
            key,
            value,
            expires_at,
        } => documents::put_cache(tx, &namespace, &key, &value, expires_at).await?,
    }
    Ok(())
}
