//! Vector collections: f32 blobs in SQLite, exact top-k in Rust over a cached matrix.

use std::sync::Arc;

use async_trait::async_trait;
use mnemix_core::adapter::{decode_f32_le, encode_f32_le, ExactIndex};
use mnemix_core::{
    ConversationId, MemoryError, Namespace, Result, Scope, VectorHit, VectorId, VectorQuery,
    VectorRecord,
};
use mnemix_sqlite_family::driver::{Conn, Param, Row};
use mnemix_sqlite_family::family::vectors::{self as family, CollectionRow, VectorTables};
use sqlx::sqlite::SqliteConnection;

use crate::connections::Tx;
use crate::db::{corrupt, metadata_from, seq_from_db, subject_of, to_json, DbResult, Sqlx};
use crate::SqliteStore;

/// A namespace's collection by name, in a read transaction this statement begins.
const FIND_COLLECTION_BEGINNING_READ: &str =
    concat!("BEGIN;\n", mnemix_sqlite_family::find_collection!());

/// A scope's matrix: `?1` collection pk, `?2` subject.
const READ_MATRIX: &str = "SELECT id, vector, metadata, text, conversation_id FROM vectors
    WHERE collection = ?1 AND subject = ?2";

/// Writes a vector over whatever has its id: `?1` collection pk, `?2` subject, `?3` id,
/// `?4` vector, `?5` text, `?6` metadata, `?7` conversation id.
const WRITE_VECTOR: &str =
    "INSERT INTO vectors (collection, subject, id, vector, text, metadata, conversation_id)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
    ON CONFLICT (collection, subject, id) DO UPDATE SET
        vector = excluded.vector, text = excluded.text,
        metadata = excluded.metadata, conversation_id = excluded.conversation_id";

/// A vector: `?1` collection pk, `?2` subject, `?3` id.
const READ_VECTOR: &str = "SELECT id, vector, text, metadata, conversation_id FROM vectors
    WHERE collection = ?1 AND subject = ?2 AND id = ?3";

/// The ids and metadata of a scope's vectors: `?1` collection pk, `?2` subject.
const IDS_AND_METADATA: &str =
    "SELECT id, metadata FROM vectors WHERE collection = ?1 AND subject = ?2";

/// Deletes a scope's vectors among the JSON array of ids `?3`: `?1` collection pk, `?2`
/// subject.
const DELETE_VECTORS: &str = "DELETE FROM vectors WHERE collection = ?1 AND subject = ?2
    AND id IN (SELECT value FROM json_each(?3))";

/// Deletes a scope's vectors in every collection of the namespace: `?1` namespace, `?2`
/// subject; the collection of each.
const DELETE_SCOPE_VECTORS: &str = "DELETE FROM vectors WHERE subject = ?2
      AND collection IN (SELECT pk FROM collections WHERE namespace = ?1)
    RETURNING collection";

/// How many rows [`DELETE_SCOPE_VECTORS`] would delete.
const COUNT_SCOPE_VECTORS: &str = "SELECT count(*) FROM vectors WHERE subject = ?2
      AND collection IN (SELECT pk FROM collections WHERE namespace = ?1)";

/// As [`DELETE_SCOPE_VECTORS`], those of conversation `?3` only.
const DELETE_CONVERSATION_VECTORS: &str =
    "DELETE FROM vectors WHERE subject = ?2 AND conversation_id = ?3
      AND collection IN (SELECT pk FROM collections WHERE namespace = ?1)
    RETURNING collection";

/// The subjects holding vectors in the namespace `?1`.
const VECTOR_SUBJECTS: &str = "SELECT DISTINCT v.subject FROM vectors v
    JOIN collections c ON c.pk = v.collection WHERE c.namespace = ?1";

/// Every vector of a scope with its collection's name: `?1` namespace, `?2` subject.
const SCOPE_VECTORS: &str = "SELECT c.name, v.id, v.vector, v.text, v.metadata, v.conversation_id
    FROM vectors v JOIN collections c ON c.pk = v.collection
    WHERE c.namespace = ?1 AND v.subject = ?2";

/// A record from the columns `id, vector, text, metadata, conversation_id` from `first`
/// (the vector left empty unless `include_vector`).
fn record_from(row: &Row, first: usize, include_vector: bool) -> Result<VectorRecord> {
    let vector = if include_vector {
        decode_f32_le(&row.blob(first + 1)?)
    } else {
        Vec::new()
    };
    let mut record = VectorRecord::new(
        VectorId::new(row.string(first)?).map_err(|e| corrupt("vector id", e))?,
        vector,
    )
    .with_metadata(metadata_from(&row.string(first + 3)?)?)
    .with_conversation_id(conversation_of(row.opt_string(first + 4)?)?);
    record.text = row.opt_string(first + 2)?;
    Ok(record)
}

/// A stored `conversation_id` column.
fn conversation_of(id: Option<String>) -> Result<Option<ConversationId>> {
    id.map(ConversationId::new)
        .transpose()
        .map_err(|e| corrupt("conversation id", e))
}

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
        let params = [collection.pk.into(), subject.into()];
        let rows = Sqlx(conn).rows(READ_MATRIX, &params).await?;
        let mut index = ExactIndex::holding_records(collection.spec.dims, collection.spec.metric);
        for row in &rows {
            let vector = row.blob(1)?;
            if vector.len() != collection.spec.dims * 4 {
                return Err(corrupt("vector", format!("{} bytes", vector.len())));
            }
            index.push_record_le_bytes(
                VectorId::new(row.string(0)?).map_err(|e| corrupt("vector id", e))?,
                &vector,
                metadata_from(&row.string(2)?)?,
                row.opt_string(3)?,
                conversation_of(row.opt_string(4)?)?,
            );
        }
        let index = Arc::new(index);
        self.common
            .vector_cache
            .insert(key, collection.generation, Arc::clone(&index));
        Ok(index)
    }
}

mnemix_sqlite_family::vector_store!(SqliteStore, search = search_exact);

/// The vectors of every collection in one table, `vectors`, keyed by collection pk.
#[async_trait]
impl VectorTables for Tx {
    async fn write_vector(
        &mut self,
        collection: &CollectionRow,
        subject: &str,
        record: &VectorRecord,
    ) -> Result<()> {
        let (vector, metadata) = (encode_f32_le(&record.vector), to_json(&record.metadata));
        let params = [
            collection.pk.into(),
            subject.into(),
            record.id.as_str().into(),
            Param::Blob(&vector),
            record.text.as_deref().map(Param::FreeText).into(),
            Param::Text(&metadata),
            record
                .conversation_id
                .as_ref()
                .map(ConversationId::as_str)
                .into(),
        ];
        self.execute(WRITE_VECTOR, &params).await.map(drop)
    }

    async fn read_vector(
        &mut self,
        collection: &CollectionRow,
        subject: &str,
        id: &VectorId,
    ) -> Result<Option<VectorRecord>> {
        let params = [collection.pk.into(), subject.into(), id.as_str().into()];
        let row = self.row(READ_VECTOR, &params).await?;
        row.map(|row| record_from(&row, 0, true)).transpose()
    }

    async fn ids_and_metadata(
        &mut self,
        collection: &CollectionRow,
        subject: &str,
    ) -> Result<Vec<(String, String)>> {
        let params = [collection.pk.into(), subject.into()];
        let rows = self.rows(IDS_AND_METADATA, &params).await?;
        rows.iter()
            .map(|row| Ok((row.string(0)?, row.string(1)?)))
            .collect()
    }

    async fn delete_vectors(
        &mut self,
        collection: &CollectionRow,
        subject: &str,
        ids: &[VectorId],
    ) -> Result<u64> {
        let ids = to_json(&ids);
        let params = [collection.pk.into(), subject.into(), Param::Text(&ids)];
        self.execute(DELETE_VECTORS, &params).await
    }

    async fn delete_scope_vectors(
        &mut self,
        scope: &Scope,
        of: Option<&ConversationId>,
    ) -> Result<Vec<i64>> {
        let mut params = vec![scope.namespace().as_str().into(), subject_of(scope).into()];
        let statement = match of {
            Some(id) => {
                params.push(id.as_str().into());
                DELETE_CONVERSATION_VECTORS
            }
            None => DELETE_SCOPE_VECTORS,
        };
        let rows = self.rows(statement, &params).await?;
        rows.iter().map(|row| row.int(0)).collect()
    }

    async fn vector_subjects(&mut self, namespace: &Namespace) -> Result<Vec<String>> {
        let rows = self
            .rows(VECTOR_SUBJECTS, &[namespace.as_str().into()])
            .await?;
        rows.iter().map(|row| row.string(0)).collect()
    }

    async fn scope_vectors(&mut self, scope: &Scope) -> Result<Vec<(String, VectorRecord)>> {
        let params = [scope.namespace().as_str().into(), subject_of(scope).into()];
        let rows = self.rows(SCOPE_VECTORS, &params).await?;
        rows.iter()
            .map(|row| Ok((row.string(0)?, record_from(row, 1, true)?)))
            .collect()
    }

    async fn count_vectors(&mut self) -> Result<u64> {
        let count = self.row("SELECT count(*) FROM vectors", &[]).await?;
        count.map_or(Ok(0), |row| Ok(seq_from_db(row.int(0)?)))
    }

    async fn count_scope_vectors(&mut self, scope: &Scope) -> Result<u64> {
        let params = [scope.namespace().as_str().into(), subject_of(scope).into()];
        let count = self.row(COUNT_SCOPE_VECTORS, &params).await?;
        count.map_or(Ok(0), |row| Ok(seq_from_db(row.int(0)?)))
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
