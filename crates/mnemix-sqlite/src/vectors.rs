//! Vector collections: f32 blobs in SQLite, exact top-k in Rust over a cached matrix.

use std::sync::Arc;

use async_trait::async_trait;
use mnemix_core::adapter::{decode_f32_le, encode_f32_le, ExactIndex};
use mnemix_core::{
    ConversationId, MemoryError, Result, Scope, VectorHit, VectorId, VectorQuery, VectorRecord,
};
use mnemix_sqlite_sql::family::vectors::{self as family, CollectionRow, VectorTables};
use sqlx::sqlite::{SqliteConnection, SqliteRow};
use sqlx::Row;

use crate::connections::Tx;
use crate::db::{corrupt, metadata_from, subject_of, to_json, DbResult, Sqlx};
use crate::SqliteStore;

/// A namespace's collection by name, in a read transaction this statement begins.
const FIND_COLLECTION_BEGINNING_READ: &str =
    concat!("BEGIN;\n", mnemix_sqlite_sql::find_collection!());

/// Bumps the generation of every collection in `pks` (duplicates allowed), once each.
pub(crate) async fn bump_generations(conn: &mut SqliteConnection, pks: Vec<i64>) -> Result<()> {
    family::bump_generations(&mut Sqlx(conn), pks).await
}

/// Deletes the scope's vectors whose `conversation_id` is `id`, in every collection of the
/// namespace (part of deleting the conversation).
pub(crate) async fn delete_conversation_vectors(
    conn: &mut SqliteConnection,
    scope: &Scope,
    id: &ConversationId,
) -> Result<()> {
    let touched: Vec<i64> = sqlx::query_scalar(
        "DELETE FROM vectors WHERE subject = ?2 AND conversation_id = ?3
           AND collection IN (SELECT pk FROM collections WHERE namespace = ?1)
         RETURNING collection",
    )
    .bind(scope.namespace().as_str())
    .bind(subject_of(scope))
    .bind(id.as_str())
    .fetch_all(&mut *conn)
    .await
    .db()?;
    bump_generations(conn, touched).await
}

pub(crate) fn record_from(row: &SqliteRow, include_vector: bool) -> Result<VectorRecord> {
    record_of(
        row.get("id"),
        if include_vector {
            decode_f32_le(row.get::<&[u8], _>("vector"))
        } else {
            Vec::new()
        },
        row.get("text"),
        row.get("metadata"),
        row.get("conversation_id"),
    )
}

/// A record from its columns as stored (the vector already decoded).
fn record_of(
    id: String,
    vector: Vec<f32>,
    text: Option<String>,
    metadata: &str,
    conversation_id: Option<String>,
) -> Result<VectorRecord> {
    let mut record = VectorRecord::new(
        VectorId::new(id).map_err(|e| corrupt("vector id", e))?,
        vector,
    )
    .with_metadata(metadata_from(metadata)?)
    .with_conversation_id(conversation_of(conversation_id)?);
    record.text = text;
    Ok(record)
}

/// A stored `conversation_id` column.
fn conversation_of(id: Option<String>) -> Result<Option<ConversationId>> {
    id.map(ConversationId::new)
        .transpose()
        .map_err(|e| corrupt("conversation id", e))
}

/// A vector's row as a matrix reads it: id, vector, metadata, text, conversation.
type MatrixRow = (String, Vec<u8>, String, Option<String>, Option<String>);

impl SqliteStore {
    /// The scope's matrix of a collection as of `collection.generation`, from the cache or read
    /// in the caller's transaction (so it matches the snapshot the generation came from).
    async fn matrix(
        &self,
        conn: &mut SqliteConnection,
        collection: &CollectionRow,
        subject: &str,
    ) -> Result<Arc<ExactIndex>> {
        let key = (collection.pk, subject.to_owned());
        if let Some(index) = self.common.vector_cache.get(&key, &collection.generation) {
            return Ok(index);
        }
        let rows: Vec<MatrixRow> = sqlx::query_as(
            "SELECT id, vector, metadata, text, conversation_id FROM vectors
             WHERE collection = ?1 AND subject = ?2",
        )
        .bind(collection.pk)
        .bind(subject)
        .fetch_all(conn)
        .await
        .db()?;
        let mut index = ExactIndex::holding_records(collection.spec.dims, collection.spec.metric);
        for (id, vector, metadata, text, conversation_id) in rows {
            if vector.len() != collection.spec.dims * 4 {
                return Err(corrupt("vector", format!("{} bytes", vector.len())));
            }
            index.push_record_le_bytes(
                VectorId::new(id).map_err(|e| corrupt("vector id", e))?,
                &vector,
                metadata_from(&metadata)?,
                text,
                conversation_of(conversation_id)?,
            );
        }
        let index = Arc::new(index);
        self.common
            .vector_cache
            .insert(key, collection.generation, Arc::clone(&index));
        Ok(index)
    }
}

mnemix_sqlite_sql::vector_store!(SqliteStore, search = search_exact);

/// The vectors of every collection in one table, `vectors`, keyed by collection pk.
#[async_trait]
impl VectorTables for Tx {
    async fn write_vector(
        &mut self,
        collection: &CollectionRow,
        subject: &str,
        record: &VectorRecord,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO vectors (collection, subject, id, vector, text, metadata, conversation_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (collection, subject, id) DO UPDATE SET
                 vector = excluded.vector, text = excluded.text,
                 metadata = excluded.metadata, conversation_id = excluded.conversation_id",
        )
        .bind(collection.pk)
        .bind(subject)
        .bind(record.id.as_str())
        .bind(encode_f32_le(&record.vector))
        .bind(record.text.as_deref())
        .bind(to_json(&record.metadata))
        .bind(record.conversation_id.as_ref().map(ConversationId::as_str))
        .execute(self.conn())
        .await
        .db()?;
        Ok(())
    }

    async fn read_vector(
        &mut self,
        collection: &CollectionRow,
        subject: &str,
        id: &VectorId,
    ) -> Result<Option<VectorRecord>> {
        let row = sqlx::query(
            "SELECT id, vector, text, metadata, conversation_id FROM vectors
             WHERE collection = ?1 AND subject = ?2 AND id = ?3",
        )
        .bind(collection.pk)
        .bind(subject)
        .bind(id.as_str())
        .fetch_optional(self.conn())
        .await
        .db()?;
        row.map(|row| record_from(&row, true)).transpose()
    }

    async fn ids_and_metadata(
        &mut self,
        collection: &CollectionRow,
        subject: &str,
    ) -> Result<Vec<(String, String)>> {
        sqlx::query_as("SELECT id, metadata FROM vectors WHERE collection = ?1 AND subject = ?2")
            .bind(collection.pk)
            .bind(subject)
            .fetch_all(self.conn())
            .await
            .db()
    }

    async fn delete_vectors(
        &mut self,
        collection: &CollectionRow,
        subject: &str,
        ids: &[VectorId],
    ) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM vectors WHERE collection = ?1 AND subject = ?2
               AND id IN (SELECT value FROM json_each(?3))",
        )
        .bind(collection.pk)
        .bind(subject)
        .bind(to_json(&ids))
        .execute(self.conn())
        .await
        .db()?;
        Ok(done.rows_affected())
    }
}

impl SqliteStore {
    /// `VectorStore::search`: an exact scan of the scope's matrix, held or read.
    pub(crate) async fn search_exact(
        &self,
        scope: &Scope,
        collection: &str,
        query: VectorQuery,
    ) -> Result<Vec<VectorHit>> {
        // The matrix holds whole records, so a search whose matrix is held at the collection's
        // generation is one statement (its own snapshot). Otherwise the row is read again in a
        // read transaction with the matrix, so the matrix is the data at that generation.
        let mut reader = self.reader.acquire().await?;
        let row = family::collection(&mut Sqlx(&mut reader), scope.namespace(), collection).await?;
        drop(reader);
        row.spec.check_vector(&query.vector)?;
        let key = (row.pk, subject_of(scope).to_owned());
        let index = if let Some(index) = self.common.vector_cache.get(&key, &row.generation) {
            index
        } else {
            let mut tx = Tx::begun_in_first_statement(self.reader.acquire().await?);
            let read = async {
                let found = family::find_collection_by(
                    &mut Sqlx(tx.conn()),
                    FIND_COLLECTION_BEGINNING_READ,
                    scope.namespace(),
                    collection,
                )
                .await?;
                let row = found.ok_or_else(|| MemoryError::not_found("collection", collection))?;
                row.spec.check_vector(&query.vector)?;
                self.matrix(tx.conn(), &row, subject_of(scope)).await
            }
            .await;
            // Ends the transaction if it began; one that cannot is rolled back later.
            let ended = tx.commit().await;
            let index = read?;
            ended.db()?;
            index
        };
        index
            .search_records(&query)
            .ok_or_else(|| corrupt("vector", "matrix without its records"))
    }
}
