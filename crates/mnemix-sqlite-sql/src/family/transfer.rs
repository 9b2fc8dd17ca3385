//! Restoring an export, written once: vectors through each driver's [`VectorTables`].

use std::collections::HashMap;

use mnemix_core::adapter::sort_canonical;
use mnemix_core::transfer::Record;
use mnemix_core::{Namespace, Result, StoredMessage};

use super::vectors::{self, bump_generations, ensure_collection, CollectionRow, VectorTables};
use super::{conversation_pk, documents, facts, millis, seq_to_db, subject_of, to_json};
use crate::driver::Param;
use crate::transfer as sql;

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
