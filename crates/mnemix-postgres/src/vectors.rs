//! Vector collections: `vector` rows (`bytea` without pgvector), a partial pgvector HNSW index
//! per collection, exact ranking by pgvector in the server, and exact re-scoring in Rust.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::try_join_all;
use mnemix_core::adapter::dot_f64;
use mnemix_core::adapter::{tie_across_k, ExactIndex};
use mnemix_core::{
    CollectionSpec, ConversationId, Filter, MemoryError, Metric, Namespace, Result, Scope,
    VectorHit, VectorId, VectorQuery, VectorRecord, VectorSelector, VectorStore,
};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use crate::db::{
    corrupt, metadata_from, stage, subject_of, text_from, to_json, Complete, Db, DbResult,
    Embedding, StagedColumn, StoredEmbedding,
};
use crate::filter::compile;
use crate::hnsw::{create_index_sql, partition_name, pgvector_ops};
use crate::PostgresStore;

/// A collection row: its pk and spec.
#[derive(Debug, Clone)]
pub(crate) struct CollectionRow {
    pub(crate) pk: i64,
    pub(crate) spec: CollectionSpec,
    /// Whether it had a valid HNSW index when looked up (see `find_collection`).
    pub(crate) indexed: bool,
}

fn metric_from(text: &str) -> Result<Metric> {
    Metric::parse(text).ok_or_else(|| corrupt("metric", text))
}

pub(crate) fn collection_from(row: &Row) -> Result<CollectionRow> {
    Ok(CollectionRow {
        pk: row.get("pk"),
        spec: CollectionSpec::new(
            row.get::<_, String>("name"),
            usize::try_from(row.get::<_, i32>("dims")).map_err(|e| corrupt("dims", e))?,
            row.get::<_, String>("model"),
        )
        .with_metric(metric_from(row.get("metric"))?),
        indexed: false,
    })
}

pub(crate) const RECORD_COLUMNS: &str = "id, embedding, text, metadata, conversation_id";

pub(crate) fn record_from(row: &Row) -> Result<VectorRecord> {
    let id = VectorId::new(row.get::<_, String>("id")).map_err(|e| corrupt("vector id", e))?;
    let vector = row
        .try_get::<_, StoredEmbedding>("embedding")
        .map_err(|e| corrupt("vector", e))?
        .0;
    let mut record = VectorRecord::new(id, vector)
        .with_metadata(metadata_from(row.get("metadata"))?)
        .with_conversation_id(
            row.get::<_, Option<String>>("conversation_id")
                .map(ConversationId::new)
                .transpose()
                .map_err(|e| corrupt("conversation id", e))?,
        );
    record.text = row
        .get::<_, Option<Vec<u8>>>("text")
        .map(text_from)
        .transpose()?;
    Ok(record)
}

/// The most rows a filtered index search asks for while it looks past rows that only Rust's
/// filter rejects.
const MAX_CANDIDATES: usize = 10_000;

/// The widest `vector` pgvector's HNSW index takes.
const HNSW_MAX_DIMS: usize = 2000;

/// A batch of at least this many vectors is written through `COPY`.
pub(crate) const BULK_ROWS: usize = 64;

/// Collections as searches last looked them up. A pk is never reused and a collection's spec
/// never changes, so a remembered row stays true for as long as its pk exists; every search
/// statement checks that it does (see `candidates`), and a search that reads no row looks the
/// collection up again.
pub(crate) type SeenCollections = mnemix_core::adapter::SeenCollections<CollectionRow>;

/// Scopes' matrices by `(collection pk, subject)`, each at the scope's version
/// (`vector_versions`; 0 for a scope without vectors).
pub(crate) type VectorCache = mnemix_core::adapter::MatrixCache<(i64, String), i64>;

/// Scopes too large to hold, by `(collection pk, subject)`, at the version they were counted
/// at and when: their searches skip the count until a write changes the version, and for
/// [`Oversized::RECHECK`] skip reading the version too (one round trip less per search of a
/// large scope; a scope shrunk meanwhile is searched on the server, as correctly, until then).
#[derive(Debug, Default)]
pub(crate) struct Oversized(std::sync::Mutex<Counted>);

/// `(collection pk, subject)` → the version a scope was counted at, and when.
type Counted = std::collections::HashMap<(i64, String), (i64, std::time::Instant)>;

impl Oversized {
    /// The most scopes remembered before they are all forgotten (each is counted again).
    const MOST: usize = 4096;
    /// How long a scope found too large is searched on the server without reading its version.
    const RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

    fn at(&self, key: &(i64, String)) -> Option<i64> {
        self.map().get(key).map(|(version, _)| *version)
    }

    /// Whether `key` was found too large less than [`Self::RECHECK`] ago.
    fn recently(&self, key: &(i64, String)) -> bool {
        self.map()
            .get(key)
            .is_some_and(|(_, counted)| counted.elapsed() < Self::RECHECK)
    }

    fn insert(&self, key: (i64, String), version: i64) {
        let mut map = self.map();
        if map.len() >= Self::MOST {
            map.clear();
        }
        map.insert(key, (version, std::time::Instant::now()));
    }

    fn map(&self) -> std::sync::MutexGuard<'_, Counted> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Moves a scope to a new version (see `0006_vector_versions.sql`), first in every
/// transaction that writes its vectors: `(previous, version)`, previous 0 for a scope that
/// had none.
const BUMP_VERSION: &str = "INSERT INTO {s}.vector_versions AS v (collection, subject, version)
     VALUES ($1, $2, nextval('{s}.vector_versions_seq'))
     ON CONFLICT (collection, subject) DO UPDATE SET version = excluded.version,
                                                   previous = v.version
     RETURNING coalesce(v.previous, 0) AS previous, v.version";

/// Moves the subject's scope of every collection of the namespace ($1) to a new version,
/// first in a transaction that deletes the subject's ($2) vectors across collections. Made
/// for every collection, with or without vectors there, so that a writer adding the scope's
/// first vectors meanwhile waits for the delete instead of passing it unseen.
pub(crate) const BUMP_SUBJECT_VERSIONS: &str =
    "INSERT INTO {s}.vector_versions AS v (collection, subject, version)
     SELECT pk, $2::text, nextval('{s}.vector_versions_seq')
     FROM {s}.collections WHERE namespace = $1 ORDER BY pk
     ON CONFLICT (collection, subject) DO UPDATE SET version = excluded.version,
                                                   previous = v.version";

/// A write's move of one scope: `(collection pk, subject)`, and the versions before and after.
pub(crate) struct Moved {
    key: (i64, String),
    previous: i64,
    version: i64,
}

/// Vector rows this store wrote since it last brought the table's statistics up to date, and
/// how many make them stale (see `refresh_statistics`).
#[derive(Debug)]
pub(crate) struct VectorStatistics {
    unanalysed: AtomicUsize,
    threshold: AtomicUsize,
}

impl Default for VectorStatistics {
    fn default() -> Self {
        Self {
            unanalysed: AtomicUsize::new(0),
            // The first bulk write looks at the table.
            threshold: AtomicUsize::new(BULK_ROWS),
        }
    }
}

/// Rows written after an `ANALYZE` of `rows` rows that make its statistics stale: a tenth of
/// the table, and never fewer than a bulk write.
fn statistics_threshold(rows: f32) -> usize {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let tenth = (rows.max(0.0) * 0.1) as usize;
    tenth.max(BULK_ROWS)
}

/// A vector record and where it goes.
pub(crate) struct VectorRow<'a> {
    pub(crate) collection: i64,
    pub(crate) subject: &'a str,
    pub(crate) record: &'a VectorRecord,
}

/// A vector row as statement parameters, in [`UPSERT_VECTOR`] and [`vector_staging`] order.
struct EncodedVector<'a> {
    collection: i64,
    subject: &'a str,
    id: &'a str,
    embedding: Embedding<'a>,
    text: Option<&'a [u8]>,
    metadata: String,
    /// `metadata` for the jsonb column; jsonb cannot hold NUL, so such rows keep none and
    /// are matched in Rust.
    filter: Option<String>,
    conversation_id: Option<&'a str>,
    /// The vector's Euclidean norm, in `f64` (see `MIN_TRUSTED_NORM`).
    norm: f64,
}

impl<'a> EncodedVector<'a> {
    fn new(row: &VectorRow<'a>) -> Self {
        let record = row.record;
        let metadata = to_json(&record.metadata);
        EncodedVector {
            collection: row.collection,
            subject: row.subject,
            id: record.id.as_str(),
            embedding: Embedding(&record.vector),
            text: record.text.as_deref().map(str::as_bytes),
            filter: (!metadata.contains("\\u0000")).then(|| metadata.clone()),
            metadata,
            conversation_id: record.conversation_id.as_ref().map(ConversationId::as_str),
            norm: norm(&record.vector),
        }
    }

    fn params(&self) -> [&(dyn ToSql + Sync); 9] {
        [
            &self.collection,
            &self.subject,
            &self.id,
            &self.embedding,
            &self.text,
            &self.metadata,
            &self.filter,
            &self.conversation_id,
            &self.norm,
        ]
    }
}

/// The staging table of bulk vector writes; `embedding` is the vectors table's column type.
fn vector_staging(embedding: &Type) -> [StagedColumn; 9] {
    [
        StagedColumn {
            name: "collection",
            sql: "bigint",
            ty: Type::INT8,
        },
        StagedColumn {
            name: "subject",
            sql: "text COLLATE \"C\"",
            ty: Type::TEXT,
        },
        StagedColumn {
            name: "id",
            sql: "text COLLATE \"C\"",
            ty: Type::TEXT,
        },
        StagedColumn {
            name: "embedding",
            sql: if *embedding == Type::BYTEA {
                "bytea"
            } else {
                "vector"
            },
            ty: embedding.clone(),
        },
        StagedColumn {
            name: "text",
            sql: "bytea",
            ty: Type::BYTEA,
        },
        StagedColumn {
            name: "metadata",
            sql: "text",
            ty: Type::TEXT,
        },
        StagedColumn {
            name: "filter",
            sql: "text",
            ty: Type::TEXT,
        },
        StagedColumn {
            name: "conversation_id",
            sql: "text COLLATE \"C\"",
            ty: Type::TEXT,
        },
        StagedColumn {
            name: "norm",
            sql: "double precision",
            ty: Type::FLOAT8,
        },
    ]
}

/// The statement that writes a vector record (upsert and restore).
const UPSERT_VECTOR: &str = "INSERT INTO {s}.vectors
         (collection, subject, id, embedding, text, metadata, filter, conversation_id, norm)
     VALUES ($1, $2, $3, $4, $5, $6, $7::text::jsonb, $8, $9)
     ON CONFLICT (collection, subject, id) DO UPDATE SET
         embedding = excluded.embedding, text = excluded.text, metadata = excluded.metadata,
         filter = excluded.filter, conversation_id = excluded.conversation_id,
         norm = excluded.norm";

impl PostgresStore {
    pub(crate) async fn find_collection(
        &self,
        db: &impl Db,
        namespace: &Namespace,
        name: &str,
    ) -> Result<Option<CollectionRow>> {
        let Some(row) = db
            .row(
                &self.sql(
                    "SELECT pk, name, dims, metric, model,
                            coalesce((SELECT indisvalid FROM pg_index
                                      WHERE indexrelid = to_regclass($3 || '.vectors_hnsw_' || pk)),
                                     false) AS indexed
                     FROM {s}.collections WHERE namespace = $1 AND name = $2",
                ),
                &[&namespace.as_str(), &name, &self.schema],
            )
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(CollectionRow {
            indexed: row.get("indexed"),
            ..collection_from(&row)?
        }))
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

    /// Queues this transaction behind every other that makes or drops a collection, before it
    /// takes any other lock: the lock attaching and detaching a partition take on `vectors`
    /// (SHARE UPDATE EXCLUSIVE; reads and vector writes are not blocked by it). Without one
    /// order, collection changes deadlock: attaching locks `collections` for the foreign key
    /// after a creator's insert into it, and detaching locks `collections` while it holds
    /// `vectors` and its partition, which a drop's cascade delete may wait for. `ONLY`: the
    /// partitions stay unlocked (an index build on one would hold a maker up).
    async fn lock_collection_changes(&self, db: &impl Db) -> Result<()> {
        db.batch(&self.sql("LOCK TABLE ONLY {s}.vectors IN SHARE UPDATE EXCLUSIVE MODE"))
            .await
    }

    /// Creates a collection row and its vectors' partition (and its HNSW index when searches
    /// use one and it is made with the collection: `index_min_rows(0)`); `Ok(None)` when a
    /// collection of that name already exists. `db` must be a transaction: the row and its
    /// partition are made together.
    pub(crate) async fn insert_collection(
        &self,
        db: &impl Db,
        namespace: &Namespace,
        spec: &CollectionSpec,
    ) -> Result<Option<i64>> {
        self.lock_collection_changes(db).await?;
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
        // Made apart and attached: `CREATE TABLE … PARTITION OF` would lock `vectors` against
        // every reader and writer (ACCESS EXCLUSIVE); attaching takes SHARE UPDATE EXCLUSIVE.
        let partition = partition_name(pk);
        let mut ddl = format!(
            "CREATE TABLE {{s}}.{partition} (LIKE {{s}}.vectors
                 INCLUDING DEFAULTS INCLUDING STORAGE) WITH (toast_tuple_target = 8160);
             ALTER TABLE {{s}}.vectors ATTACH PARTITION {{s}}.{partition} FOR VALUES IN ({pk});"
        );
        if self.indexable(spec) && self.config.index_min_rows == 0 {
            let collection = CollectionRow {
                pk,
                spec: spec.clone(),
                indexed: false,
            };
            ddl.push_str(&create_index_sql(&collection, self.config.hnsw, false));
        }
        db.batch(&self.sql(&ddl)).await?;
        Ok(Some(pk))
    }

    /// Detaches and drops every partition whose collection is gone: the dropped collection's,
    /// and any a failed or interrupted drop left (a detach interrupted half-way stays pending
    /// and would refuse every later detach until finalized). Each is detached `CONCURRENTLY`
    /// (dropping an attached partition would lock `vectors` against everyone, and wait behind
    /// a running build of its index) and dropped only once detached. A partition is empty from
    /// its collection's delete on and the pk is never reused, so a failure here leaves a table
    /// no search reads; the next drop tries again. Two droppers racing for one partition: the
    /// second's detach fails once the first's has run, and it moves on.
    async fn remove_orphan_partitions(&self, client: &deadpool_postgres::Object) {
        let Ok(orphans) = client
            .rows(
                &self.sql(
                    "SELECT c.relname, c.relispartition,
                            coalesce(i.inhdetachpending, false) AS pending
                     FROM pg_class c LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
                     WHERE c.relnamespace = to_regnamespace($1)
                       AND c.relkind = 'r' AND c.relname ~ '^vectors_[0-9]+$'
                       AND NOT EXISTS (SELECT 1 FROM {s}.collections -- as partition_name
                                       WHERE c.relname = 'vectors_' || pk)
                     ORDER BY pending DESC",
                ),
                &[&self.schema],
            )
            .await
        else {
            return;
        };
        for orphan in orphans {
            // A catalog name matched by `^vectors_[0-9]+$`: safe to format in.
            let table: String = orphan.get("relname");
            let detach = if orphan.get("pending") {
                "FINALIZE"
            } else if orphan.get("relispartition") {
                "CONCURRENTLY"
            } else {
                ""
            };
            if !detach.is_empty() {
                let sql = self.sql(&format!(
                    "ALTER TABLE {{s}}.vectors DETACH PARTITION {{s}}.{table} {detach}"
                ));
                if !detach_waiting_for_others(client, &sql).await {
                    continue;
                }
            }
            // A detached partition keeps its cascading key to `collections`, so dropping it
            // locks `collections` too, after the partition — the reverse of a collection's
            // delete, whose cascade reaches the detached table after `collections`: the two
            // deadlocked. Locking `collections` first takes them in the delete's order.
            let dropped = client
                .batch_execute(&self.sql(&format!(
                    "BEGIN;
                     LOCK TABLE {{s}}.collections IN ACCESS EXCLUSIVE MODE;
                     DROP TABLE IF EXISTS {{s}}.{table};
                     COMMIT;"
                )))
                .await;
            if dropped.is_err() {
                // A failed statement leaves the transaction open and aborted: end it before
                // the connection goes back to the pool.
                let _ = client.batch_execute("ROLLBACK").await;
            }
        }
    }

    /// Writes records already checked against their collections, after moving each written
    /// scope to a new version: small batches as pipelined upserts, large ones through binary
    /// `COPY`. A record repeated in the batch: the last wins. Returns the scopes' moves.
    pub(crate) async fn write_vectors(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        rows: &[VectorRow<'_>],
    ) -> Result<Vec<Moved>> {
        // In one order, so writers of several scopes cannot deadlock on the versions.
        let scopes: std::collections::BTreeSet<(i64, &str)> = rows
            .iter()
            .map(|row| (row.collection, row.subject))
            .collect();
        let bump = tx.prepare_cached(&self.sql(BUMP_VERSION)).await.db()?;
        let upsert = tx.prepare_cached(&self.sql(UPSERT_VECTOR)).await.db()?;
        // Statements on one connection run in the order their futures are first polled: the
        // versions first, then the rows, and a repeated id ends as the last record.
        let bumps = try_join_all(scopes.iter().map(|(collection, subject)| {
            let bump = &bump;
            async move {
                let row = tx.query_one(bump, &[collection, subject]).await.db()?;
                Ok::<_, MemoryError>(Moved {
                    key: (*collection, (*subject).to_owned()),
                    previous: row.get("previous"),
                    version: row.get("version"),
                })
            }
        }));
        let encoded: Vec<EncodedVector<'_>> = rows.iter().map(EncodedVector::new).collect();
        if rows.len() >= BULK_ROWS {
            let moved = bumps.await?;
            self.copy_vectors(tx, &encoded).await?;
            return Ok(moved);
        }
        let upsert = &upsert;
        let writes = try_join_all(
            encoded
                .iter()
                .map(|row| async move { tx.complete(upsert, &row.params()).await }),
        );
        let (moved, _) = futures::try_join!(bumps, writes)?;
        Ok(moved)
    }

    /// Brings the planner's statistics of the vectors table up to date once the rows this
    /// store wrote since they were taken reach a tenth of the table (autovacuum's default
    /// rule, which also holds where autovacuum is off). The planner only chooses a
    /// collection's HNSW index when it knows the collection is large: statistics from before a
    /// load make it scan every row of the collection exactly, orders of magnitude slower than
    /// the index on a large collection. Counting across writes matters: a load of many batches of
    /// 1,000 never grows the table by a tenth in any one of them. Runs after commit, as
    /// `ANALYZE` holds a lock that concurrent `ANALYZE`s wait on.
    pub(crate) async fn refresh_statistics(
        &self,
        client: &deadpool_postgres::Object,
        written: usize,
    ) {
        let statistics = &self.vector_statistics;
        let pending = statistics.unanalysed.fetch_add(written, Relaxed) + written;
        if pending < statistics.threshold.load(Relaxed) {
            return;
        }
        // Statistics are an optimisation: a failure here is not the write's, which has
        // committed.
        let Ok(Some(row)) = client
            .row(
                "SELECT reltuples FROM pg_class WHERE oid = to_regclass($1)",
                &[&self.sql("{s}.vectors")],
            )
            .await
        else {
            return;
        };
        // -1 when never analysed.
        let known: f32 = row.get(0);
        let threshold = statistics_threshold(known);
        if pending < threshold {
            // Another store (or autovacuum) analysed since: wait for the new tenth.
            statistics.threshold.store(threshold, Relaxed);
            return;
        }
        // Claim what is pending, so that of concurrent writers past the threshold one analyses
        // and the counter never wraps (each subtracting its own view of it did: two views of
        // the same rows took them away twice).
        let claimed = statistics.unanalysed.swap(0, Relaxed);
        if claimed == 0 {
            return;
        }
        if client
            .batch_execute(&self.sql("ANALYZE {s}.vectors"))
            .await
            .is_ok()
        {
            // The table now holds about `known + claimed` rows.
            #[allow(clippy::cast_precision_loss)]
            let analysed = known.max(0.0) + claimed as f32;
            statistics
                .threshold
                .store(statistics_threshold(analysed), Relaxed);
        }
    }

    async fn copy_vectors(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        rows: &[EncodedVector<'_>],
    ) -> Result<()> {
        // ON CONFLICT cannot touch a row twice in one statement: keep each key's last record.
        let mut seen = HashSet::new();
        let mut last: Vec<&EncodedVector<'_>> = rows
            .iter()
            .rev()
            .filter(|row| seen.insert((row.collection, row.subject, row.id)))
            .collect();
        last.reverse();
        stage(
            tx,
            "agent_memory_vectors_in",
            &vector_staging(&self.embedding_type),
            &last.iter().map(|row| row.params()).collect::<Vec<_>>(),
        )
        .await?;
        tx.complete(
            &self.sql(
                "INSERT INTO {s}.vectors
                     (collection, subject, id, embedding, text, metadata, filter, conversation_id,
                      norm)
                 SELECT collection, subject, id, embedding, text, metadata, filter::jsonb,
                        conversation_id, norm
                 FROM agent_memory_vectors_in
                 ON CONFLICT (collection, subject, id) DO UPDATE SET
                     embedding = excluded.embedding, text = excluded.text,
                     metadata = excluded.metadata, filter = excluded.filter,
                     conversation_id = excluded.conversation_id, norm = excluded.norm",
            ),
            &[],
        )
        .await?;
        Ok(())
    }

    /// The rows of a collection and subject that the filter's SQL form keeps (a superset when
    /// some rows' metadata is matched in Rust): all of them, or the first `limit` in the order
    /// `read` names.
    async fn candidates(
        &self,
        client: &deadpool_postgres::Object,
        collection: &CollectionRow,
        scope: &Scope,
        filter: Option<&Filter>,
        read: Read<'_>,
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
        // collection's partial index. The EXISTS (a one-time filter) makes rows read prove that
        // the collection existed in the statement's snapshot: a search of a collection
        // remembered from an earlier lookup needs no lookup first.
        let kept = format!(
            "FROM {{s}}.vectors WHERE collection = {pk} AND subject = $1 AND {condition}
               AND EXISTS (SELECT FROM {{s}}.collections WHERE pk = {pk})",
            pk = collection.pk
        );
        let base = format!("SELECT {columns} {kept}");
        let dims = collection.spec.dims;
        let (_, op) = pgvector_ops(collection.spec.metric);
        let (v, l) = (params.len() + 1, params.len() + 2);
        let (vector, limit, sql) = match read {
            Read::All => return client.rows(&self.sql(&base), &params).await,
            Read::Ranked {
                vector,
                limit,
                whole,
                k,
            } => {
                // A row whose norm pgvector's sums cannot compute faithfully has no distance
                // (NULL, "uncertain"): it sorts first and always comes back whole. One sort key,
                // an output name (each row's distance is computed once), which matches no HNSW
                // index's expression: this read must be exact, also when it settles an indexed
                // search's tie. Of the `limit` nearest rows, only the first `whole`, and those
                // within rounding error of the k-th row's distance, come back whole (`whole` is
                // true); the others bring only their distance, which bounds what was not read.
                let distance = format!(
                    "CASE WHEN norm BETWEEN {MIN_TRUSTED_NORM:e} AND {MAX_TRUSTED_NORM:e}
                          THEN embedding {op} ${v}::real[]::vector END"
                );
                let (scale, shift) = near_tie_margin(collection.spec.metric, dims);
                let is_whole = format!(
                    "(n <= {whole} OR distance IS NULL
                      OR coalesce(distance <= kth * {scale:e} + {shift:e}, false))"
                );
                let whole_columns: Vec<String> = columns
                    .split(", ")
                    .map(|c| {
                        if c == "id" {
                            "top.id".to_owned()
                        } else {
                            format!("v.{c}")
                        }
                    })
                    .collect();
                // The ranking sorts narrow rows (id and distance); whole rows are fetched after,
                // by key, for the few that need them.
                let sql = format!(
                    "SELECT {whole_columns}, top.distance, top.distance IS NULL AS uncertain,
                            top.whole
                     FROM (SELECT id, distance, n, {is_whole} AS whole
                           FROM (SELECT *, row_number() OVER nearest AS n,
                                        nth_value(distance, {k}) OVER nearest AS kth
                                 FROM (SELECT id, {distance} AS distance
                                       {kept} ORDER BY distance NULLS FIRST LIMIT ${l}) AS ranked
                                 WINDOW nearest AS (ORDER BY distance NULLS FIRST
                                                    ROWS BETWEEN UNBOUNDED PRECEDING
                                                         AND UNBOUNDED FOLLOWING)) AS numbered
                          ) AS top
                     LEFT JOIN {{s}}.vectors v
                       ON top.whole AND v.collection = {pk} AND v.subject = $1 AND v.id = top.id
                     ORDER BY top.n",
                    whole_columns = whole_columns.join(", "),
                    pk = collection.pk,
                );
                (vector, limit, sql)
            }
            Read::Index(vector, limit) => {
                let sql = format!(
                    "{base} ORDER BY embedding::vector({dims}) {op} ${v}::real[]::vector({dims}) LIMIT ${l}"
                );
                (vector, limit, sql)
            }
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        params.push(&vector);
        params.push(&limit);
        if let Read::Ranked { .. } = read {
            return client.rows(&self.sql(&sql), &params).await;
        }
        let search = client.prepare_cached(&self.sql(&sql)).await.db()?;
        // Iterative scans keep going until k rows pass the filter (pgvector 0.8).
        let ef = self
            .config
            .hnsw
            .ef_search
            .max(u32::try_from(limit).unwrap_or(1000))
            .min(1000);
        // The settings hold for one transaction: BEGIN with them, the search and COMMIT go out
        // in one round trip instead of four. tokio-postgres sends a request when its future is
        // first polled, and `join!` polls them in order on this one connection, so the server
        // runs them in order. A failed setting aborts the transaction: the search then fails
        // rather than running without it, and COMMIT ends the transaction either way.
        let begin = format!(
            "BEGIN; SET LOCAL hnsw.ef_search = {ef}; SET LOCAL hnsw.iterative_scan = relaxed_order"
        );
        let (begun, rows, committed) = futures::join!(
            client.batch_execute(&begin),
            client.complete(&search, &params),
            client.batch_execute("COMMIT"),
        );
        begun.db()?;
        let (rows, _) = rows?;
        committed.db()?;
        Ok(rows)
    }
}

impl PostgresStore {
    /// Builds the HNSW index of a collection now, rather than when a search first needs it
    /// (see [`PostgresStoreBuilder::index_min_rows`](crate::PostgresStoreBuilder::index_min_rows)):
    /// after a bulk load, say, so that the first searches do not rank exactly while it is made.
    /// Writers are not blocked while it is built (`CREATE INDEX CONCURRENTLY`); a build another
    /// process has started is waited for. `Ok(false)` when the collection gets no index
    /// (pgvector absent or turned off, or more than 2,000 dimensions).
    pub async fn build_vector_index(
        &self,
        namespace: &Namespace,
        collection: &str,
    ) -> Result<bool> {
        let row = {
            let client = self.client().await?;
            self.collection(&client, namespace, collection).await?
        };
        if !self.indexable(&row.spec) {
            return Ok(false);
        }
        if row.indexed {
            return Ok(true);
        }
        if self.index_builder.build_now(namespace, row).await? {
            Ok(true)
        } else {
            Err(MemoryError::not_found("collection", collection))
        }
    }
}

/// Which of a collection's rows a search reads.
#[derive(Debug, Clone, Copy)]
enum Read<'q> {
    /// Every row the SQL filter keeps, scored in Rust.
    All,
    /// The HNSW index's nearest `limit` rows to the vector.
    Index(&'q [f32], usize),
    /// The `limit` rows pgvector ranks nearest to the vector exactly (no index), with its
    /// distance and whether that distance may be far from ours (those rows first); whole are
    /// the first `whole` and those as near as the `k`-th but for rounding, the others bring
    /// their distance only.
    Ranked {
        vector: &'q [f32],
        limit: usize,
        whole: usize,
        k: usize,
    },
}

/// `(scale, shift)`: a row pgvector places farther than `kth × scale + shift` from the query,
/// where `kth` is its distance of the k-th row, cannot score as high as that row by our scores
/// (twice the margin [`score_bound`] needs, so it holds with room): such rows need not be read
/// whole.
fn near_tie_margin(metric: Metric, dims: usize) -> (f64, f64) {
    #[allow(clippy::cast_precision_loss)]
    let error = 8.0 * (dims as f64 + 2.0) * f64::from(f32::EPSILON);
    match metric {
        Metric::Euclidean => (1.0 + 8.0 * error, 1e-5),
        Metric::Cosine | Metric::Dot => (1.0, 8.0 * error + 4e-6),
    }
}

/// A row whose norm pgvector's `float` sums can compute far from ours (underflowing or near
/// overflow; it matters to cosine, and costs other metrics only a few more rows read) is read as
/// uncertain: it always comes back, and it bounds nothing. Each row's norm is stored by its
/// writer (in `f64`), so telling them costs no arithmetic per query.
const MIN_TRUSTED_NORM: f64 = 1e-15;
const MAX_TRUSTED_NORM: f64 = 1e18;

/// A vector's Euclidean norm in `f64` (faithful for any checked vector), as stored with each
/// row and compared with the trusted range.
fn norm(vector: &[f32]) -> f64 {
    dot_f64(vector, vector).sqrt()
}

/// The highest score, by our definition, that a row pgvector places at `distance` or farther
/// can have: pgvector sums in `float` as we do, so its distance and our score differ by at most
/// the summation error of `dims` terms (bounded by `dims` units in the last place, times a
/// safety factor). `None` when nothing can be bounded.
fn score_bound(metric: Metric, dims: usize, distance: f64) -> Option<f64> {
    if !distance.is_finite() {
        return None;
    }
    #[allow(clippy::cast_precision_loss)]
    let error = 8.0 * (dims as f64 + 2.0) * f64::from(f32::EPSILON);
    match metric {
        // pgvector's cosine distance is 1 - cosine; each side's cosine is within 3 sums'
        // relative error of the true one (trusted norms only).
        Metric::Cosine => Some(1.0 - distance + 2.0 * error + 1e-6),
        // A sum of squares is within a relative error of the true one, whatever the signs, so
        // each side's distance is within √(1 + error) of it.
        Metric::Euclidean => {
            let nearest = distance / (1.0 + error);
            Some((1.0 / (1.0 + nearest)) * (1.0 + 1e-6) + f64::from(f32::MIN_POSITIVE))
        }
        // An inner product's error scales with the unknown norm of the row.
        Metric::Dot => None,
    }
}

impl PostgresStore {
    /// Whether this collection has an HNSW index once it is large enough: pgvector indexes
    /// `vector` of at most [`HNSW_MAX_DIMS`] dimensions, so wider collections are searched
    /// exactly (correct, and as fast as the exact mode).
    pub(crate) fn indexable(&self, spec: &CollectionSpec) -> bool {
        self.index && spec.dims <= HNSW_MAX_DIMS
    }

    /// Whether pgvector can rank this collection's rows for an exact search of `query`: it
    /// ranks cosine and Euclidean collections (a dot product's error has no bound without the
    /// rows' norms), for a query whose norm its sums compute faithfully.
    fn ranks_exactly(&self, spec: &CollectionSpec, query: &[f32]) -> bool {
        self.pgvector
            && score_bound(spec.metric, spec.dims, 0.0).is_some()
            && (MIN_TRUSTED_NORM..=MAX_TRUSTED_NORM).contains(&norm(query))
    }

    /// The query's hits as `(row, score)` over the candidate records, scored and ordered
    /// exactly in Rust. The candidates are every row the filter keeps; or, with `indexed`, the
    /// HNSW index's nearest rows; or pgvector's exact nearest rows, as many as it takes to hold
    /// every row that can reach the top `k` by our scores.
    async fn ranked(
        &self,
        client: &deadpool_postgres::Object,
        collection: &CollectionRow,
        scope: &Scope,
        query: &VectorQuery,
        indexed: bool,
    ) -> Result<(Vec<Option<VectorRecord>>, Vec<(usize, f32)>)> {
        let vector = query.vector.as_slice();
        let mut read = if indexed {
            Read::Index(vector, query.k)
        } else if self.ranks_exactly(&collection.spec, vector) {
            // The nearest 64 (or 4k) bound what is not read, but only the first k come back
            // whole, with any near-tie of the k-th (a row past them is beyond rounding error,
            // so it bounds the rest): more whole rows slowed `prepare`, and reading only rows
            // that come back whole (none past them to bound the rest) needed a second pass of
            // the whole scope on most large queries (docs/decisions/postgres-held-matrices.md).
            Read::Ranked {
                vector,
                limit: (query.k * 4).max(RANKED_FIRST_READ),
                whole: query.k,
                k: query.k,
            }
        } else {
            Read::All
        };
        loop {
            let rows = self
                .candidates(
                    client,
                    collection,
                    scope,
                    query.filter.as_ref(),
                    read,
                    RECORD_COLUMNS,
                )
                .await?;
            // Rows read whole come first; a ranked read's others brought their distance only.
            let whole = match read {
                Read::Ranked { .. } => rows.iter().take_while(|r| r.get("whole")).count(),
                Read::All | Read::Index(..) => rows.len(),
            };
            let records = rows[..whole]
                .iter()
                .map(|row| record_from(row).map(Some))
                .collect::<Result<Vec<_>>>()?;
            let mut index = ExactIndex::new(collection.spec.dims, collection.spec.metric);
            for record in records.iter().flatten() {
                index.push(record.id.clone(), &record.vector, record.metadata.clone());
            }
            let hits = index.search(query);
            read = match read {
                Read::All => return Ok((records, hits)),
                Read::Index(vector, limit) => {
                    // Rows whose metadata only Rust can filter (it holds NUL) pass the SQL
                    // filter and may fill the index's LIMIT, then fail here: ask for more rows
                    // until k pass or the index has no more.
                    let rejected_in_rust = query.filter.as_ref().is_some_and(|filter| {
                        records
                            .iter()
                            .flatten()
                            .any(|r| !filter.matches(&r.metadata))
                    });
                    if !rejected_in_rust
                        || hits.len() >= query.k
                        || rows.len() < limit
                        || limit >= MAX_CANDIDATES
                    {
                        return Ok((records, hits));
                    }
                    Read::Index(vector, limit.saturating_mul(4).min(MAX_CANDIDATES))
                }
                Read::Ranked {
                    vector, limit, k, ..
                } => {
                    // Every row not read whole is as far as the first such row, or past the
                    // last row of a full read.
                    let all_read = whole == rows.len() && rows.len() < limit;
                    let boundary = rows.get(whole).or(rows.last());
                    if all_read || holds_the_top(collection, query, boundary, &hits) {
                        return Ok((records, hits));
                    }
                    if limit >= MAX_CANDIDATES {
                        Read::All
                    } else {
                        let limit = limit.saturating_mul(4).min(MAX_CANDIDATES);
                        Read::Ranked {
                            vector,
                            limit,
                            whole: limit,
                            k,
                        }
                    }
                }
            };
        }
    }
}

/// Whether collection `pk` exists (`live`) and the version of its scope for subject `$1`
/// (`version`, 0 when the scope has no vectors), as one row: the pk is a trusted integer,
/// formatted in as `candidates` does.
fn live_and_version(pk: i64) -> String {
    format!(
        "SELECT EXISTS (SELECT FROM {{s}}.collections WHERE pk = {pk}) AS live,
                coalesce((SELECT version FROM {{s}}.vector_versions
                          WHERE collection = {pk} AND subject = $1), 0) AS version"
    )
}

/// What a search of a held matrix found.
enum HeldSearch {
    /// The hits, ranked in the client.
    Hits(Vec<VectorHit>),
    /// The collection is gone (it may have been made again, under another pk).
    CollectionGone,
    /// The scope is not held: too large, or holding is off.
    NotHeld,
}

impl PostgresStore {
    /// The most rows of a scope of `spec` that searches hold in the client: the scopes they
    /// search exactly rather than by an index (fewer than `index_min_rows`), whose vectors fit
    /// the cache. 0 when none are held.
    fn holdable_rows(&self, spec: &CollectionSpec) -> usize {
        let fit = self.config.vector_cache_bytes / (spec.dims * 4 + 64).max(1);
        if self.indexable(spec) {
            fit.min(self.config.index_min_rows.saturating_sub(1))
        } else {
            fit
        }
    }

    /// Searches the scope's matrix held in the client: one statement reads the scope's version
    /// (and proves the collection exists); at the version held the search is ranked in memory.
    /// Otherwise, a scope small enough is read whole in one snapshot with its version, and held.
    async fn search_held(
        &self,
        client: &deadpool_postgres::Object,
        collection: &CollectionRow,
        scope: &Scope,
        query: &VectorQuery,
    ) -> Result<HeldSearch> {
        let most = self.holdable_rows(&collection.spec);
        if most == 0 {
            return Ok(HeldSearch::NotHeld);
        }
        let subject = subject_of(scope);
        let key = (collection.pk, subject.to_owned());
        if self.oversized.recently(&key) {
            // The search reads the rows on the server, and finds a dropped collection by
            // reading none.
            return Ok(HeldSearch::NotHeld);
        }
        let held = self.vector_cache.latest(&key);
        // The version searches need not count the scope at: the one held, or the one it was
        // found too large at.
        let known = held
            .as_ref()
            .map(|(version, _)| *version)
            .or_else(|| self.oversized.at(&key))
            .unwrap_or(-1);
        let capped = i64::try_from(most + 1).unwrap_or(i64::MAX);
        let row = client
            .row(
                &self.sql(&format!(
                    "SELECT live, version,
                            CASE WHEN version IN (0, $2) THEN NULL
                                 ELSE (SELECT count(*)
                                       FROM (SELECT FROM {{s}}.vectors
                                             WHERE collection = {pk} AND subject = $1
                                             LIMIT $3) AS capped)
                            END AS rows
                     FROM ({live_and_version}) AS current",
                    pk = collection.pk,
                    live_and_version = live_and_version(collection.pk),
                )),
                &[&subject, &known, &capped],
            )
            .await?
            .ok_or_else(|| corrupt("vector version", "no row"))?;
        if !row.get::<_, bool>("live") {
            return Ok(HeldSearch::CollectionGone);
        }
        let version: i64 = row.get("version");
        if version == 0 {
            // A scope without a version has no vectors.
            return Ok(HeldSearch::Hits(Vec::new()));
        }
        let index = match (held, row.get::<_, Option<i64>>("rows")) {
            (Some((at, index)), _) if at == version => index,
            (_, None) => return Ok(HeldSearch::NotHeld),
            (_, Some(rows)) if rows > i64::try_from(most).unwrap_or(i64::MAX) => {
                self.oversized.insert(key, version);
                return Ok(HeldSearch::NotHeld);
            }
            (_, Some(_)) => {
                let Some((version, index)) = self.read_matrix(client, collection, subject).await?
                else {
                    return Ok(HeldSearch::CollectionGone);
                };
                self.vector_cache.insert(key, version, Arc::clone(&index));
                index
            }
        };
        index
            .search_records(query)
            .map(HeldSearch::Hits)
            .ok_or_else(|| corrupt("vector", "matrix without its records"))
    }

    /// The scope's records and their version, in one snapshot and one round trip; `None` when
    /// the collection is gone.
    async fn read_matrix(
        &self,
        client: &deadpool_postgres::Object,
        collection: &CollectionRow,
        subject: &str,
    ) -> Result<Option<(i64, Arc<ExactIndex>)>> {
        let pk = collection.pk;
        let version = client
            .prepare_cached(&self.sql(&live_and_version(pk)))
            .await
            .db()?;
        let records = client
            .prepare_cached(&self.sql(&format!(
                "SELECT {RECORD_COLUMNS} FROM {{s}}.vectors
                 WHERE collection = {pk} AND subject = $1"
            )))
            .await
            .db()?;
        // Requests polled together go out together and run in order (see `candidates`).
        let params: [&(dyn ToSql + Sync); 1] = [&subject];
        let (begun, version, rows, committed) = futures::join!(
            client.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"),
            client.query_one(&version, &params),
            client.complete(&records, &params),
            client.batch_execute("COMMIT"),
        );
        begun.db()?;
        let (version, (rows, _)) = (version.db()?, rows?);
        committed.db()?;
        if !version.get::<_, bool>("live") {
            return Ok(None);
        }
        let mut index = ExactIndex::holding_records(collection.spec.dims, collection.spec.metric);
        for row in &rows {
            index.push_record(record_from(row)?);
        }
        Ok(Some((version.get("version"), Arc::new(index))))
    }
}

/// The rows a pgvector-ranked exact search ranks first.
const RANKED_FIRST_READ: usize = 64;

/// Runs a partition's detach, waiting out another's: PostgreSQL refuses a detach while any
/// partition of the table is pending one (`OBJECT_NOT_IN_PREREQUISITE_STATE`), and a concurrent
/// detach is pending until the queries that started before it end. Tries for about a second;
/// whether the partition was detached.
async fn detach_waiting_for_others(client: &deadpool_postgres::Object, sql: &str) -> bool {
    const TRIES: u32 = 8;
    let mut wait = std::time::Duration::from_millis(10);
    for tried in 1..=TRIES {
        match client.batch_execute(sql).await {
            Ok(()) => return true,
            Err(e)
                if tried < TRIES
                    && e.code() == Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE) =>
            {
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            Err(_) => return false,
        }
    }
    false
}

/// Whether the rows pgvector ranked and we read whole hold every row that can be in the query's
/// top `k` by our scores: no row as far as `boundary` (the first row not read whole, or the last
/// row read when all were) or farther can score as high as the k-th hit (or as the query's
/// `min_score`).
fn holds_the_top(
    collection: &CollectionRow,
    query: &VectorQuery,
    boundary: Option<&Row>,
    hits: &[(usize, f32)],
) -> bool {
    let Some(boundary) = boundary else {
        return true;
    };
    if boundary.get::<_, bool>("uncertain") {
        return false;
    }
    let distance: f64 = boundary.get("distance");
    let Some(bound) = score_bound(collection.spec.metric, collection.spec.dims, distance) else {
        return false;
    };
    let beyond = |score: f32| f64::from(score) > bound;
    query.min_score.is_some_and(beyond) || (hits.len() >= query.k && beyond(hits[query.k - 1].1))
}

#[async_trait]
impl VectorStore for PostgresStore {
    async fn ensure_collection(
        &self,
        namespace: &Namespace,
        spec: CollectionSpec,
    ) -> Result<CollectionSpec> {
        let mut client = self.client().await?;
        // Most calls find the collection made: they need no lock.
        if let Some(existing) = self.find_collection(&client, namespace, &spec.name).await? {
            existing.spec.check_same(&spec)?;
            return Ok(existing.spec);
        }
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
        self.lock_collection_changes(&tx).await?;
        // Vectors go by cascade.
        let dropped = tx
            .exec(
                &self.sql("DELETE FROM {s}.collections WHERE namespace = $1 AND name = $2"),
                &[&namespace.as_str(), &name],
            )
            .await?;
        tx.commit().await.db()?;
        if dropped == 0 {
            return Ok(false);
        }
        self.remove_orphan_partitions(&client).await;
        Ok(true)
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
        let subject = subject_of(scope);
        let rows: Vec<VectorRow<'_>> = records
            .iter()
            .map(|record| VectorRow {
                collection: collection.pk,
                subject,
                record,
            })
            .collect();
        let moved = self.write_vectors(&tx, &rows).await?;
        tx.commit().await.db()?;
        for scope in moved {
            self.vector_cache
                .advance(&scope.key, &scope.previous, scope.version, |index| {
                    index.upsert(&records);
                });
        }
        self.refresh_statistics(&client, records.len()).await;
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
        let mut client = self.client().await?;
        let collection = self
            .collection(&client, scope.namespace(), collection)
            .await?;
        let ids: Vec<VectorId> = match selector {
            VectorSelector::Ids(ids) => ids,
            VectorSelector::Filter(filter) => {
                let rows = self
                    .candidates(
                        &client,
                        &collection,
                        scope,
                        Some(&filter),
                        Read::All,
                        "id, metadata",
                    )
                    .await?;
                let mut matching = Vec::new();
                for row in rows {
                    if filter.matches(&metadata_from(row.get(1))?) {
                        matching.push(
                            VectorId::new(row.get::<_, String>(0))
                                .map_err(|e| corrupt("vector id", e))?,
                        );
                    }
                }
                matching
            }
        };
        let subject = subject_of(scope);
        let names: Vec<&str> = ids.iter().map(VectorId::as_str).collect();
        let tx = client.transaction().await.db()?;
        let bump = tx.prepare_cached(&self.sql(BUMP_VERSION)).await.db()?;
        let delete = tx
            .prepare_cached(&self.sql(
                "DELETE FROM {s}.vectors WHERE collection = $1 AND subject = $2 AND id = ANY($3)",
            ))
            .await
            .db()?;
        // The version first (see `write_vectors`), in the same round trip.
        let bumped: [&(dyn ToSql + Sync); 2] = [&collection.pk, &subject];
        let deleted: [&(dyn ToSql + Sync); 3] = [&collection.pk, &subject, &names];
        let (moved, (_, removed)) = futures::try_join!(
            async { tx.query_one(&bump, &bumped).await.db() },
            tx.complete(&delete, &deleted),
        )?;
        tx.commit().await.db()?;
        self.vector_cache.advance(
            &(collection.pk, subject.to_owned()),
            &moved.get("previous"),
            moved.get("version"),
            |index| index.remove(&ids),
        );
        Ok(usize::try_from(removed).unwrap_or(usize::MAX))
    }

    async fn search(
        &self,
        scope: &Scope,
        collection: &str,
        query: VectorQuery,
    ) -> Result<Vec<VectorHit>> {
        // One connection for the collection lookup and the search.
        let client = self.client().await?;
        // One row past k: a tie across the k-th place shows there.
        let mut probe = query.clone();
        probe.k = query.k + 1;
        let mut remembered = self
            .seen_collections
            .get(scope.namespace(), collection)
            .filter(|c| c.spec.check_vector(&query.vector).is_ok());
        let (collection, indexed, mut records, mut hits) = loop {
            let was_remembered = remembered.is_some();
            let collection = if let Some(seen) = remembered.take() {
                seen
            } else {
                let looked_up = self
                    .collection(&client, scope.namespace(), collection)
                    .await?;
                looked_up.spec.check_vector(&query.vector)?;
                self.seen_collections
                    .insert(scope.namespace(), collection, looked_up)
            };
            match self
                .search_held(&client, &collection, scope, &query)
                .await?
            {
                HeldSearch::Hits(hits) => return Ok(hits),
                HeldSearch::CollectionGone if was_remembered => continue,
                HeldSearch::CollectionGone => {
                    return Err(MemoryError::not_found("collection", &collection.spec.name))
                }
                HeldSearch::NotHeld => {}
            }
            let indexable = self.indexable(&collection.spec);
            let indexed = indexable && collection.indexed;
            let (records, hits) = self
                .ranked(&client, &collection, scope, &probe, indexed)
                .await?;
            if indexable && !indexed {
                self.index_builder.consider(scope, &collection);
            }
            // A remembered collection that read no row may be gone (or have no rows): look
            // it up and search again.
            if !(was_remembered && records.is_empty()) {
                break (collection, indexed, records, hits);
            }
        };
        if indexed && tie_across_k(&hits, query.k) {
            // The index chose among equal rows, not necessarily the smallest ids that every
            // exact search returns: settle it over every row (rare with real embeddings).
            (records, hits) = self
                .ranked(&client, &collection, scope, &probe, false)
                .await?;
        }
        hits.truncate(query.k);
        hits.into_iter()
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
