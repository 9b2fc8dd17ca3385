//! Vector collections: f32 blobs in SQLite, exact top-k in Rust over a cached matrix.

use std::sync::Arc;

use async_trait::async_trait;
use mnemix_core::adapter::{decode_f32_le, encode_f32_le, ExactIndex};
use mnemix_core::{
    CollectionSpec, ConversationId, MemoryError, Metric, Namespace, Result, Scope, VectorHit,
    VectorId, VectorQuery, VectorRecord, VectorSelector, VectorStore,
};
use sqlx::sqlite::{SqliteConnection, SqliteRow};
use sqlx::Row;

use crate::connections::Tx;
use crate::db::{corrupt, metadata_from, subject_of, to_json, DbResult};
use crate::SqliteStore;

/// Matrices by `(collection pk, subject)`, each at the collection generation it was read at.
pub(crate) type MatrixCache = mnemix_core::adapter::MatrixCache<(i64, String), i64>;

/// A collection row: its pk, spec and generation.
pub(crate) struct CollectionRow {
    pub(crate) pk: i64,
    pub(crate) spec: CollectionSpec,
    pub(crate) generation: i64,
}

fn metric_from(text: &str) -> Result<Metric> {
    Metric::parse(text).ok_or_else(|| corrupt("metric", text))
}

/// A namespace's collection by name.
macro_rules! find_collection_statement {
    () => {
        "SELECT pk, name, dims, metric, model, generation FROM collections
         WHERE namespace = ?1 AND name = ?2"
    };
}
const FIND_COLLECTION: &str = find_collection_statement!();

pub(crate) async fn find_collection(
    conn: &mut SqliteConnection,
    namespace: &Namespace,
    name: &str,
) -> Result<Option<CollectionRow>> {
    find_collection_with(conn, FIND_COLLECTION, namespace, name).await
}

/// [`find_collection`] by `statement`, which is [`FIND_COLLECTION`] after statements that
/// return nothing (a `BEGIN`).
async fn find_collection_with(
    conn: &mut SqliteConnection,
    statement: &'static str,
    namespace: &Namespace,
    name: &str,
) -> Result<Option<CollectionRow>> {
    let row: Option<(i64, String, i64, String, String, i64)> = sqlx::query_as(statement)
        .bind(namespace.as_str())
        .bind(name)
        .fetch_optional(conn)
        .await
        .db()?;
    row.map(|(pk, name, dims, metric, model, generation)| {
        Ok(CollectionRow {
            pk,
            spec: CollectionSpec {
                name,
                dims: usize::try_from(dims).map_err(|e| corrupt("dims", e))?,
                metric: metric_from(&metric)?,
                model,
            },
            generation,
        })
    })
    .transpose()
}

async fn collection(
    conn: &mut SqliteConnection,
    namespace: &Namespace,
    name: &str,
) -> Result<CollectionRow> {
    find_collection(conn, namespace, name)
        .await?
        .ok_or_else(|| MemoryError::not_found("collection", name))
}

async fn bump_generation(conn: &mut SqliteConnection, pk: i64) -> Result<()> {
    sqlx::query("UPDATE collections SET generation = generation + 1 WHERE pk = ?1")
        .bind(pk)
        .execute(conn)
        .await
        .db()?;
    Ok(())
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

/// Creates a collection row (the caller has checked that none of that name exists).
pub(crate) async fn insert_collection(
    conn: &mut SqliteConnection,
    namespace: &Namespace,
    spec: &CollectionSpec,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO collections (namespace, name, dims, metric, model) VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .bind(namespace.as_str())
    .bind(&spec.name)
    .bind(i64::try_from(spec.dims).unwrap_or(i64::MAX))
    .bind(spec.metric.as_str())
    .bind(&spec.model)
    .execute(conn)
    .await
    .db()?;
    Ok(())
}

/// Writes one vector record (checked against its collection by the caller); the caller bumps
/// the collection's generation.
pub(crate) async fn write_vector(
    conn: &mut SqliteConnection,
    collection: i64,
    scope: &Scope,
    record: &VectorRecord,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO vectors (collection, subject, id, vector, text, metadata, conversation_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (collection, subject, id) DO UPDATE SET
             vector = excluded.vector, text = excluded.text,
             metadata = excluded.metadata, conversation_id = excluded.conversation_id",
    )
    .bind(collection)
    .bind(subject_of(scope))
    .bind(record.id.as_str())
    .bind(encode_f32_le(&record.vector))
    .bind(record.text.as_deref())
    .bind(to_json(&record.metadata))
    .bind(record.conversation_id.as_ref().map(ConversationId::as_str))
    .execute(conn)
    .await
    .db()?;
    Ok(())
}

/// Bumps the generation of every collection in `pks` (duplicates allowed).
pub(crate) async fn bump_generations(conn: &mut SqliteConnection, mut pks: Vec<i64>) -> Result<()> {
    pks.sort_unstable();
    pks.dedup();
    for pk in pks {
        bump_generation(conn, pk).await?;
    }
    Ok(())
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
    Ok(VectorRecord {
        id: VectorId::new(id).map_err(|e| corrupt("vector id", e))?,
        vector,
        text,
        metadata: metadata_from(metadata)?,
        conversation_id: conversation_of(conversation_id)?,
    })
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
        if let Some(index) = self.vector_cache.get(&key, &collection.generation) {
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
        self.vector_cache
            .insert(key, collection.generation, Arc::clone(&index));
        Ok(index)
    }
}

#[async_trait]
impl VectorStore for SqliteStore {
    async fn ensure_collection(
        &self,
        namespace: &Namespace,
        spec: CollectionSpec,
    ) -> Result<CollectionSpec> {
        let mut tx = self.write().await?;
        if let Some(existing) = find_collection(&mut tx, namespace, &spec.name).await? {
            existing.spec.check_same(&spec)?;
            return Ok(existing.spec);
        }
        insert_collection(&mut tx, namespace, &spec).await?;
        tx.commit().await.db()?;
        Ok(spec)
    }

    async fn list_collections(&self, namespace: &Namespace) -> Result<Vec<CollectionSpec>> {
        let rows: Vec<(String, i64, String, String)> = sqlx::query_as(
            "SELECT name, dims, metric, model FROM collections WHERE namespace = ?1 ORDER BY name",
        )
        .bind(namespace.as_str())
        .fetch_all(&mut *self.reader.acquire().await?)
        .await
        .db()?;
        rows.into_iter()
            .map(|(name, dims, metric, model)| {
                Ok(CollectionSpec {
                    name,
                    dims: usize::try_from(dims).map_err(|e| corrupt("dims", e))?,
                    metric: metric_from(&metric)?,
                    model,
                })
            })
            .collect()
    }

    async fn drop_collection(&self, namespace: &Namespace, name: &str) -> Result<bool> {
        // Vectors go by cascade; the pk is never reused (AUTOINCREMENT), so cached matrices of
        // the old collection can never be mistaken for the new one's.
        let removed = sqlx::query("DELETE FROM collections WHERE namespace = ?1 AND name = ?2")
            .bind(namespace.as_str())
            .bind(name)
            .execute(&mut *self.writer.connections().acquire().await?)
            .await
            .db()?
            .rows_affected();
        Ok(removed > 0)
    }

    async fn upsert_vectors(
        &self,
        scope: &Scope,
        collection: &str,
        records: Vec<VectorRecord>,
    ) -> Result<usize> {
        let mut tx = self.write().await?;
        let collection = self::collection(&mut tx, scope.namespace(), collection).await?;
        for record in &records {
            collection.spec.check_vector(&record.vector)?;
        }
        for record in &records {
            write_vector(&mut tx, collection.pk, scope, record).await?;
        }
        if !records.is_empty() {
            bump_generation(&mut tx, collection.pk).await?;
        }
        tx.commit().await.db()?;
        if !records.is_empty() {
            self.vector_cache.written_by_subject(
                &collection.pk,
                subject_of(scope),
                collection.generation,
                |matrix| matrix.upsert(&records),
            );
        }
        Ok(records.len())
    }

    async fn get_vector(
        &self,
        scope: &Scope,
        collection: &str,
        id: &VectorId,
    ) -> Result<VectorRecord> {
        let mut tx = self.read().await?;
        let collection = self::collection(&mut tx, scope.namespace(), collection).await?;
        let row = sqlx::query(
            "SELECT id, vector, text, metadata, conversation_id FROM vectors
             WHERE collection = ?1 AND subject = ?2 AND id = ?3",
        )
        .bind(collection.pk)
        .bind(subject_of(scope))
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await
        .db()?
        .ok_or_else(|| MemoryError::not_found("vector", id.as_str()))?;
        tx.commit().await.db()?;
        record_from(&row, true)
    }

    async fn delete_vectors(
        &self,
        scope: &Scope,
        collection: &str,
        selector: VectorSelector,
    ) -> Result<usize> {
        let mut tx = self.write().await?;
        let collection = self::collection(&mut tx, scope.namespace(), collection).await?;
        let ids: Vec<VectorId> = match selector {
            VectorSelector::Ids(ids) => ids,
            VectorSelector::Filter(filter) => {
                let rows: Vec<(String, String)> = sqlx::query_as(
                    "SELECT id, metadata FROM vectors WHERE collection = ?1 AND subject = ?2",
                )
                .bind(collection.pk)
                .bind(subject_of(scope))
                .fetch_all(&mut *tx)
                .await
                .db()?;
                let mut matching = Vec::new();
                for (id, metadata) in rows {
                    if filter.matches(&metadata_from(&metadata)?) {
                        matching.push(VectorId::new(id).map_err(|e| corrupt("vector id", e))?);
                    }
                }
                matching
            }
        };
        let removed = sqlx::query(
            "DELETE FROM vectors WHERE collection = ?1 AND subject = ?2
               AND id IN (SELECT value FROM json_each(?3))",
        )
        .bind(collection.pk)
        .bind(subject_of(scope))
        .bind(to_json(&ids))
        .execute(&mut *tx)
        .await
        .db()?
        .rows_affected();
        if removed > 0 {
            bump_generation(&mut tx, collection.pk).await?;
        }
        tx.commit().await.db()?;
        if removed > 0 {
            self.vector_cache.written_by_subject(
                &collection.pk,
                subject_of(scope),
                collection.generation,
                |matrix| matrix.remove(&ids),
            );
        }
        Ok(usize::try_from(removed).unwrap_or(usize::MAX))
    }

    async fn search(
        &self,
        scope: &Scope,
        collection: &str,
        query: VectorQuery,
    ) -> Result<Vec<VectorHit>> {
        // The matrix holds whole records, so a search whose matrix is held at the collection's
        // generation is one statement (its own snapshot). Otherwise the row is read again in a
        // read transaction with the matrix, so the matrix is the data at that generation.
        let row = find_collection(
            &mut *self.reader.acquire().await?,
            scope.namespace(),
            collection,
        )
        .await?
        .ok_or_else(|| MemoryError::not_found("collection", collection))?;
        row.spec.check_vector(&query.vector)?;
        let key = (row.pk, subject_of(scope).to_owned());
        let index = if let Some(index) = self.vector_cache.get(&key, &row.generation) {
            index
        } else {
            let mut tx = Tx::begun_in_first_statement(self.reader.acquire().await?);
            let read = async {
                let row = find_collection_with(
                    tx.conn(),
                    concat!("BEGIN;\n", find_collection_statement!()),
                    scope.namespace(),
                    collection,
                )
                .await?
                .ok_or_else(|| MemoryError::not_found("collection", collection))?;
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
