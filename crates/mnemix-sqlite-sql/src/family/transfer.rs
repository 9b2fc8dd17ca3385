//! Restoring an export, written once: every record but collections and vectors, which each
//! driver stores its own way (sqlx's store in one table, libSQL's in a table per collection).

use mnemix_core::{CollectionSpec, Namespace, Record, Result, Scope, StoredMessage, VectorRecord};

use super::{conversation_pk, documents, facts, millis, seq_to_db, subject_of, to_json};
use crate::driver::{Conn, Param};
use crate::transfer as sql;

/// A record the driver writes itself.
#[derive(Debug)]
pub enum DriverRecord {
    /// A vector collection.
    Collection {
        /// Its namespace.
        namespace: Namespace,
        /// Its spec.
        spec: CollectionSpec,
    },
    /// A vector of a collection.
    Vector {
        /// Its scope.
        scope: Scope,
        /// Its collection's name.
        collection: String,
        /// The vector.
        record: VectorRecord,
    },
}

/// Writes `record` in the restore transaction `tx` is in, as it was exported. Records come in
/// canonical order, so parents (collections, conversations) are written before their children.
/// A collection or a vector is handed back for the driver to write.
pub async fn restore_record<C: Conn>(tx: &mut C, record: Record) -> Result<Option<DriverRecord>> {
    match record {
        Record::Collection { namespace, spec } => {
            return Ok(Some(DriverRecord::Collection { namespace, spec }))
        }
        Record::Vector {
            scope,
            collection,
            record,
        } => {
            return Ok(Some(DriverRecord::Vector {
                scope,
                collection,
                record,
            }))
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
    Ok(None)
}
