//! Vector collections: `real[]` rows, a partial pgvector HNSW index per collection, and exact
//! re-scoring in Rust.

use async_trait::async_trait;
use futures::future::try_join_all;
use memory_core::exact::ExactIndex;
use memory_core::{
    CollectionSpec, ConversationId, Filter, MemoryError, Metric, Namespace, Result, Scope,
    VectorHit, VectorId, VectorQuery, VectorRecord, VectorSelector, VectorStore,
};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::db::{corrupt, metadata_from, subject_of, text_from, to_json, Db, DbResult};
use crate::filter::compile;
use crate::PostgresStore;

/// A collection row: its pk and spec.
pub(crate) struct CollectionRow {
    pub(crate) pk: i64,
    pub(crate) spec: CollectionSpec,
}

fn metric_from(text: &str) -> Result<Metric> {
    Metric::parse(text).ok_or_else(|| corrupt("metric", text))
}

/// pgvector's operator class and distance operator for a metric.
fn pgvector_ops(metric: Metric) -> (&'static str, &'static str) {
    match metric {
        Metric::Cosine => ("vector_cosine_ops", "<=>"),
        Metric::Dot => ("vector_ip_ops", "<#>"),
        Metric::Euclidean => ("vector_l2_ops", "<->"),
    }
}

pub(crate) fn collection_from(row: &Row) -> Result<CollectionRow> {
    Ok(CollectionRow {
        pk: row.get("pk"),
        spec: CollectionSpec {
            name: row.get("name"),
            dims: usize::try_from(row.get::<_, i32>("dims")).map_err(|e| corrupt("dims", e))?,
            metric: metric_from(row.get("metric"))?,
            model: row.get("model"),
        },
    })
}

pub(crate) const RECORD_COLUMNS: &str = "id, embedding, text, metadata, conversation_id";

pub(crate) fn record_from(row: &Row) -> Result<VectorRecord> {
    Ok(VectorRecord {
        id: VectorId::new(row.get::<_, String>("id")).map_err(|e| corrupt("vector id", e))?,
        vector: row.get("embedding"),
        text: row
            .get::<_, Option<Vec<u8>>>("text")
            .map(text_from)
            .transpose()?,
        metadata: metadata_from(row.get("metadata"))?,
        conversation_id: row
            .get::<_, Option<String>>("conversation_id")
            .map(ConversationId::new)
            .transpose()
            .map_err(|e| corrupt("conversation id", e))?,
    })
}

/// The statement that writes a vector record (upsert and restore).
const UPSERT_VECTOR: &str = "INSERT INTO {s}.vectors
         (collection, subject, id, embedding, text, metadata, filter, conversation_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7::text::jsonb, $8)
     ON CONFLICT (collection, subject, id) DO UPDATE SET
         embedding = excluded.embedding, text = excluded.text, metadata = excluded.metadata,
         filter = excluded.filter, conversation_id = excluded.conversation_id";

impl PostgresStore {
    pub(crate) async fn find_collection(
        &self,
        db: &impl Db,
        namespace: &Namespace,
        name: &str,
    ) -> Result<Option<CollectionRow>> {
        db.row(
            &self.sql(
                "SELECT pk, name, dims, metric, model FROM {s}.collections
                 WHERE namespace = $1 AND name = $2",
            ),
            &[&namespace.as_str(), &name],
        )
        .await?
        .map(|row| collection_from(&row))
        .transpose()
    }

    async fn collection(
        &self,
        db: &impl Db,
        namespace: &Namespace,
        name: &str,
    ) -> Result<CollectionRow> {
        self.find_collection(db, namespace, name)
            .await?
            .ok_or_else(|| MemoryError::not_found("collection", name))
    }

    /// Creates a collection row (and its HNSW index when searches use one); `Ok(None)` when a
    /// collection of that name already exists.
    pub(crate) async fn insert_collection(
        &self,
        db: &impl Db,
        namespace: &Namespace,
        spec: &CollectionSpec,
    ) -> Result<Option<i64>> {
        let row = db
            .row(
                &self.sql(
                    "INSERT INTO {s}.collections (namespace, name, dims, metric, model)
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (namespace, name) DO NOTHING
                     RETURNING pk",
                ),
                &[
                    &namespace.as_str(),
                    &spec.name,
                    &i32::try_from(spec.dims).unwrap_or(i32::MAX),
                    &spec.metric.as_str(),
                    &spec.model,
                ],
            )
            .await?;
        let Some(row) = row else { return Ok(None) };
        let pk: i64 = row.get(0);
        if self.index {
            // Only trusted integers and fixed operator names are formatted into DDL.
            let (ops, _) = pgvector_ops(spec.metric);
            let hnsw = self.config.hnsw;
            db.exec(
                &self.sql(&format!(
                    "CREATE INDEX vectors_hnsw_{pk} ON {{s}}.vectors
                     USING hnsw ((embedding::vector({dims})) {ops})
                     WITH (m = {m}, ef_construction = {efc}) WHERE collection = {pk}",
                    dims = spec.dims,
                    m = hnsw.m,
                    efc = hnsw.ef_construction,
                )),
                &[],
            )
            .await?;
        }
        Ok(Some(pk))
    }

    /// Writes records (already checked against the collection) in one pipelined batch.
    pub(crate) async fn write_vectors(
        &self,
        db: &impl Db,
        pk: i64,
        scope: &Scope,
        records: &[VectorRecord],
    ) -> Result<()> {
        let sql = self.sql(UPSERT_VECTOR);
        let rows: Vec<(String, Option<String>)> = records
            .iter()
            .map(|r| {
                let metadata = to_json(&r.metadata);
                // jsonb cannot hold NUL: such rows keep no `filter` and are matched in Rust.
                let filter = (!metadata.contains("\\u0000")).then(|| metadata.clone());
                (metadata, filter)
            })
            .collect();
        let subject = subject_of(scope);
        try_join_all(
            records
                .iter()
                .zip(&rows)
                .map(|(record, (metadata, filter))| {
                    let sql = &sql;
                    async move {
                        let id = record.id.as_str();
                        let text = record.text.as_deref().map(str::as_bytes);
                        let conversation =
                            record.conversation_id.as_ref().map(ConversationId::as_str);
                        let params: [&(dyn ToSql + Sync); 8] = [
                            &pk,
                            &subject,
                            &id,
                            &record.vector,
                            &text,
                            metadata,
                            filter,
                            &conversation,
                        ];
                        db.exec(sql, &params).await
                    }
                }),
        )
        .await?;
        Ok(())
    }

    /// The rows of a collection and subject that the filter's SQL form keeps (a superset when
    /// some rows' metadata is matched in Rust); with `nearest`, the HNSW index's nearest `k`.
    async fn candidates(
        &self,
        client: &mut deadpool_postgres::Object,
        collection: &CollectionRow,
        scope: &Scope,
        filter: Option<&Filter>,
        nearest: Option<(&[f32], usize)>,
        columns: &str,
    ) -> Result<Vec<Row>> {
        let subject = subject_of(scope);
        let compiled = filter.map(|f| compile(f, 1));
        let condition = compiled.as_ref().map_or_else(
            || "true".to_owned(),
            |c| format!("(filter IS NULL OR {})", c.condition),
        );
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&subject];
        if let Some(c) = &compiled {
            params.extend(c.params.iter().map(|p| p.as_ref() as &(dyn ToSql + Sync)));
        }
        // The collection pk is a literal (a trusted integer) so the planner can match the
        // collection's partial index.
        let base = format!(
            "SELECT {columns} FROM {{s}}.vectors
             WHERE collection = {pk} AND subject = $1 AND {condition}",
            pk = collection.pk
        );
        let Some((vector, k)) = nearest else {
            return client.rows(&self.sql(&base), &params).await;
        };
        let k = i64::try_from(k).unwrap_or(i64::MAX);
        let (_, op) = pgvector_ops(collection.spec.metric);
        let sql = format!(
            "{base} ORDER BY embedding::vector({dims}) {op} ${v}::real[]::vector({dims}) LIMIT ${l}",
            dims = collection.spec.dims,
            v = params.len() + 1,
            l = params.len() + 2,
        );
        params.push(&vector);
        params.push(&k);
        let tx = client.transaction().await.db()?;
        // Iterative scans keep going until k rows pass the filter (pgvector 0.8).
        let ef = self
            .config
            .hnsw
            .ef_search
            .max(u32::try_from(k).unwrap_or(1000))
            .min(1000);
        // Both settings in one round trip (simple query protocol).
        tx.batch_execute(&format!(
            "SET LOCAL hnsw.ef_search = {ef}; SET LOCAL hnsw.iterative_scan = relaxed_order"
        ))
        .await
        .db()?;
        let rows = tx.rows(&self.sql(&sql), &params).await?;
        tx.commit().await.db()?;
        Ok(rows)
    }
}

#[async_trait]
impl VectorStore for PostgresStore {
    async fn ensure_collection(
        &self,
        namespace: &Namespace,
        spec: CollectionSpec,
    ) -> Result<CollectionSpec> {
        spec.validate()?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.db()?;
        if self
            .insert_collection(&tx, namespace, &spec)
            .await?
            .is_none()
        {
            let existing = self.collection(&tx, namespace, &spec.name).await?;
            existing.spec.check_same(&spec)?;
            return Ok(existing.spec);
        }
        tx.commit().await.db()?;
        Ok(spec)
    }

    async fn list_collections(&self, namespace: &Namespace) -> Result<Vec<CollectionSpec>> {
        let client = self.client().await?;
        client
            .rows(
                &self.sql(
                    "SELECT pk, name, dims, metric, model FROM {s}.collections
                     WHERE namespace = $1 ORDER BY name",
                ),
                &[&namespace.as_str()],
            )
            .await?
            .iter()
            .map(|row| collection_from(row).map(|c| c.spec))
            .collect()
    }

    async fn drop_collection(&self, namespace: &Namespace, name: &str) -> Result<bool> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.db()?;
        // Vectors go by cascade; the partial index goes with its collection.
        let dropped = tx
            .row(
                &self.sql(
                    "DELETE FROM {s}.collections WHERE namespace = $1 AND name = $2 RETURNING pk",
                ),
                &[&namespace.as_str(), &name],
            )
            .await?;
        if let Some(row) = &dropped {
            let pk: i64 = row.get(0);
            tx.exec(
                &self.sql(&format!("DROP INDEX IF EXISTS {{s}}.vectors_hnsw_{pk}")),
                &[],
            )
            .await?;
        }
        tx.commit().await.db()?;
        Ok(dropped.is_some())
    }

    async fn upsert_vectors(
        &self,
        scope: &Scope,
        collection: &str,
        records: Vec<VectorRecord>,
    ) -> Result<usize> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.db()?;
        let collection = self.collection(&tx, scope.namespace(), collection).await?;
        for record in &records {
            collection.spec.check_vector(&record.vector)?;
        }
        self.write_vectors(&tx, collection.pk, scope, &records)
            .await?;
        tx.commit().await.db()?;
        Ok(records.len())
    }

    async fn get_vector(
        &self,
        scope: &Scope,
        collection: &str,
        id: &VectorId,
    ) -> Result<VectorRecord> {
        let client = self.client().await?;
        let collection = self
            .collection(&client, scope.namespace(), collection)
            .await?;
        let row = client
            .row(
                &self.sql(&format!(
                    "SELECT {RECORD_COLUMNS} FROM {{s}}.vectors
                     WHERE collection = $1 AND subject = $2 AND id = $3"
                )),
                &[&collection.pk, &subject_of(scope), &id.as_str()],
            )
            .await?
            .ok_or_else(|| MemoryError::not_found("vector", id.as_str()))?;
        record_from(&row)
    }

    async fn delete_vectors(
        &self,
        scope: &Scope,
        collection: &str,
        selector: VectorSelector,
    ) -> Result<usize> {
        if let VectorSelector::Filter(filter) = &selector {
            filter.validate()?;
        }
        let mut client = self.client().await?;
        let collection = self
            .collection(&client, scope.namespace(), collection)
            .await?;
        let ids: Vec<String> = match selector {
            VectorSelector::Ids(ids) => ids.into_iter().map(String::from).collect(),
            VectorSelector::Filter(filter) => {
                let rows = self
                    .candidates(
                        &mut client,
                        &collection,
                        scope,
                        Some(&filter),
                        None,
                        "id, metadata",
                    )
                    .await?;
                let mut matching = Vec::new();
                for row in rows {
                    if filter.matches(&metadata_from(row.get(1))?) {
                        matching.push(row.get(0));
                    }
                }
                matching
            }
        };
        let removed = client
            .exec(
                &self.sql(
                    "DELETE FROM {s}.vectors WHERE collection = $1 AND subject = $2 AND id = ANY($3)",
                ),
                &[&collection.pk, &subject_of(scope), &ids],
            )
            .await?;
        Ok(usize::try_from(removed).unwrap_or(usize::MAX))
    }

    async fn search(
        &self,
        scope: &Scope,
        collection: &str,
        query: VectorQuery,
    ) -> Result<Vec<VectorHit>> {
        // One connection for the collection lookup and the search.
        let mut client = self.client().await?;
        let collection = self
            .collection(&client, scope.namespace(), collection)
            .await?;
        query.validate(&collection.spec)?;
        let nearest = self.index.then_some((query.vector.as_slice(), query.k));
        let rows = self
            .candidates(
                &mut client,
                &collection,
                scope,
                query.filter.as_ref(),
                nearest,
                RECORD_COLUMNS,
            )
            .await?;
        // Exact scores and order (and the exact filter) in Rust, over the candidates.
        let mut index = ExactIndex::new(collection.spec.dims, collection.spec.metric);
        let mut records = Vec::with_capacity(rows.len());
        for row in &rows {
            let record = record_from(row)?;
            index.push(record.id.clone(), &record.vector, record.metadata.clone());
            records.push(Some(record));
        }
        index
            .search(&query)
            .into_iter()
            .map(|(row, score)| {
                let mut record = records[row]
                    .take()
                    .ok_or_else(|| corrupt("vector", "one row hit twice"))?;
                if !query.include_vectors {
                    record.vector = Vec::new();
                }
                Ok(VectorHit { record, score })
            })
            .collect()
    }
}
