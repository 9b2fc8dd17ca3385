//! Vector collections: a table per collection with an `F32_BLOB(dims)` column and a DiskANN
//! index, searched through `vector_top_k` and re-ranked exactly in Rust.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use async_trait::async_trait;
use libsql::Value;
use mnemix_core::adapter::{decode_f32_le, encode_f32_le, tie_across_k, ExactIndex, TopK};
use mnemix_core::{
    ConversationId, Filter, Metric, Namespace, Result, Scope, VectorHit, VectorId, VectorQuery,
    VectorRecord,
};
pub(crate) use mnemix_sqlite_family::family::vectors::CollectionRow;
use mnemix_sqlite_family::family::vectors::{self as family, VectorTables};

use crate::db::{
    corrupt, count_to_db, execute, metadata_from, opt_text, row, rows, scan, subject_of, to_json,
    Conn, RowExt,
};
use crate::lent::Tx;
use crate::LibsqlStore;

/// The most candidates a search asks the DiskANN index for; beyond that it scans the scope
/// exactly, which is then the cheaper way to honour the scope and filter anyway.
pub const MAX_INDEX_CANDIDATES: usize = 4096;

/// The least candidates asked for, however selective the scope: DiskANN's recall at very small
/// `k` is poor, and the exact re-rank of a few hundred rows costs little.
const MIN_INDEX_CANDIDATES: usize = 100;

/// DiskANN settings of every new index: neighbours stored as 8-bit floats, and an insert's
/// search keeps 32 candidates (libSQL's default is 70): faster ingest at the same recall@10,
/// where fewer neighbours, a narrower insert search or 1-bit neighbours lost recall that no
/// candidate budget brought back (measured with `measure-libsql`: the figures are in
/// docs/decisions/libsql-vectors-table-per-collection.md). Re-ranking is exact either way, so
/// these settings only affect which candidates are found.
const INDEX_SETTINGS: &str = "'compress_neighbors=float8', 'insert_l=32'";

/// A collection's own table, and its DiskANN index.
pub(crate) trait Tables {
    /// The collection's table.
    fn table(&self) -> String;
    /// The DiskANN index, for metrics DiskANN knows.
    fn index(&self) -> Option<String>;
}

impl Tables for CollectionRow {
    fn table(&self) -> String {
        table_of(self.pk)
    }

    fn index(&self) -> Option<String> {
        index_metric(self.spec.metric).map(|_| format!("{}_ann", self.table()))
    }
}

/// A collection's table: from the integer pk only, so no name is ever spliced into SQL.
fn table_of(pk: i64) -> String {
    format!("vectors_{pk}")
}

/// DiskANN's name for a metric; it has none for the dot product.
fn index_metric(metric: Metric) -> Option<&'static str> {
    match metric {
        Metric::Cosine => Some("cosine"),
        Metric::Euclidean => Some("l2"),
        Metric::Dot => None,
    }
}

/// Every collection of a namespace, by name.
pub(crate) async fn namespace_collections(
    conn: &Conn,
    namespace: &Namespace,
) -> Result<Vec<CollectionRow>> {
    family::namespace_collections(&mut { conn }, namespace).await
}

/// Columns read by [`record_from`], in its order (unqualified; prefix with an alias as needed).
pub(crate) const RECORD_COLUMNS: &str = "id, vector, text, metadata, conversation_id";

/// A record from [`RECORD_COLUMNS`] at `first`.
pub(crate) fn record_from(
    row: &impl RowExt,
    first: usize,
    include_vector: bool,
) -> Result<VectorRecord> {
    Ok({
        let mut value = VectorRecord::new(
            VectorId::new(row.string(first)?).map_err(|e| corrupt("vector id", e))?,
            if include_vector {
                decode_f32_le(&row.blob(first + 1)?)
            } else {
                Vec::new()
            },
        );
        value.text = row.opt_string(first + 2)?;
        value.metadata = metadata_from(&row.string(first + 3)?)?;
        value.conversation_id = row
            .opt_string(first + 4)?
            .map(ConversationId::new)
            .transpose()
            .map_err(|e| corrupt("conversation id", e))?;
        value
    })
}

/// Columns a search reads of every candidate (the text and references only of the winners).
const SCAN_COLUMNS: &str = "rowid, id, vector, metadata";

/// Whether a row's metadata, JSON in `column`, matches `filter`.
fn row_matches(filter: &Filter, row: &impl RowExt, column: usize) -> Result<bool> {
    Ok(filter.matches(&metadata_from(&row.string(column)?)?))
}

/// The exact top `k` of rows of [`SCAN_COLUMNS`] offered one at a time, as `(rowid, score)`:
/// a row's id and metadata are read only when its score could enter, so an unfiltered scan
/// reads each row's vector and nothing else.
struct Ranking<'q> {
    top: TopK<i64>,
    filter: Option<&'q Filter>,
}

impl<'q> Ranking<'q> {
    /// Ranks for `query`, checking `filter` (the query's, or `None` where the caller has
    /// already kept only matching rows).
    fn new(collection: &CollectionRow, query: &VectorQuery, filter: Option<&'q Filter>) -> Self {
        Self {
            top: TopK::new(query, collection.spec.metric),
            filter,
        }
    }

    fn offer(&mut self, row: &impl RowExt) -> Result<()> {
        let vector = row.blob(2)?;
        let score = self
            .top
            .score_le_bytes(&vector)
            .ok_or_else(|| corrupt("vector", format!("{} bytes", vector.len())))?;
        if !self.top.could_enter(score) {
            return Ok(());
        }
        if let Some(filter) = self.filter {
            if !row_matches(filter, row, 3)? {
                return Ok(());
            }
        }
        self.top.offer(score, &row.string(1)?, row.int(0)?);
        Ok(())
    }

    /// The top `k`, best first.
    fn into_ranked(self) -> Vec<(i64, f32)> {
        self.top.into_ranked()
    }
}

/// The records of ranked rowids, in rank order.
async fn hits(
    conn: &Conn,
    collection: &CollectionRow,
    ranked: Vec<(i64, f32)>,
    include_vectors: bool,
) -> Result<Vec<VectorHit>> {
    if ranked.is_empty() {
        return Ok(Vec::new());
    }
    let rowids: Vec<i64> = ranked.iter().map(|(rowid, _)| *rowid).collect();
    let mut records: HashMap<i64, VectorRecord> = HashMap::with_capacity(ranked.len());
    for row in rows(
        conn,
        &format!(
            "SELECT rowid, {RECORD_COLUMNS} FROM {}
             WHERE rowid IN (SELECT value FROM json_each(?1))",
            collection.table()
        ),
        [to_json(&rowids)],
    )
    .await?
    {
        records.insert(row.int(0)?, record_from(&row, 1, include_vectors)?);
    }
    ranked
        .into_iter()
        .map(|(rowid, score)| {
            let record = records
                .remove(&rowid)
                .ok_or_else(|| corrupt("vector", "hit vanished inside one snapshot"))?;
            Ok(VectorHit { record, score })
        })
        .collect()
}

/// How many candidates to ask the index for: `k` scaled by how much of the collection the
/// scope is, doubled for slack (and again under a filter), at least [`MIN_INDEX_CANDIDATES`].
fn first_budget(k: usize, scope_rows: usize, total_rows: usize, filtered: bool) -> usize {
    let spread = total_rows.div_ceil(scope_rows.max(1));
    let budget = k
        .saturating_mul(spread)
        .saturating_mul(if filtered { 4 } else { 2 });
    budget.max(MIN_INDEX_CANDIDATES)
}

impl LibsqlStore {
    /// The exact answer for a scope searched by scanning it (below `index_min_rows`, or with no
    /// index): through the scope's matrix, whole records read once per generation of the
    /// collection and held while the scope's vectors fit `vector_cache_bytes`, so the
    /// searches after it read no rows; streamed through [`search_exactly`](Self::search_exactly)
    /// when they do not fit.
    async fn search_scanned(
        &self,
        conn: &Conn,
        collection: &CollectionRow,
        subject: &str,
        query: &VectorQuery,
        scope_rows: usize,
    ) -> Result<Vec<VectorHit>> {
        let vector_bytes = scope_rows.saturating_mul(collection.spec.dims.saturating_mul(4));
        if vector_bytes > self.config.options.vector_cache_bytes {
            return Self::search_exactly(conn, collection, subject, query, false).await;
        }
        let mut matrix = ExactIndex::holding_records(collection.spec.dims, collection.spec.metric);
        scan(
            conn,
            &format!(
                "SELECT {RECORD_COLUMNS} FROM {} WHERE subject = ?1",
                collection.table()
            ),
            [subject],
            |row| {
                let record = record_from(row, 0, true)?;
                if record.vector.len() != collection.spec.dims {
                    return Err(corrupt("vector", format!("{} dims", record.vector.len())));
                }
                matrix.push_record(record);
                Ok(())
            },
        )
        .await?;
        let matrix = Arc::new(matrix);
        self.common.vector_cache.insert(
            (collection.pk, subject.to_owned()),
            collection.generation,
            Arc::clone(&matrix),
        );
        matrix
            .search_records(query)
            .ok_or_else(|| corrupt("vector", "matrix without its records"))
    }

    /// The exact answer: every row of the scope, ranked in Rust as the scan streams (holding
    /// only the best `k`). With `filter_first`, the scope's metadata is read and filtered
    /// first and only the matching rows' vectors are read (for a filter known to keep few
    /// rows, where reading every vector would cost far more than the search).
    async fn search_exactly(
        conn: &Conn,
        collection: &CollectionRow,
        subject: &str,
        query: &VectorQuery,
        filter_first: bool,
    ) -> Result<Vec<VectorHit>> {
        let table = collection.table();
        let ranking = match query.filter.as_ref().filter(|_| filter_first) {
            None => {
                let mut ranking = Ranking::new(collection, query, query.filter.as_ref());
                scan(
                    conn,
                    &format!("SELECT {SCAN_COLUMNS} FROM {table} WHERE subject = ?1"),
                    [subject],
                    |row| ranking.offer(row),
                )
                .await?;
                ranking
            }
            Some(filter) => {
                let mut matching = Vec::new();
                scan(
                    conn,
                    &format!("SELECT rowid, metadata FROM {table} WHERE subject = ?1"),
                    [subject],
                    |row| {
                        if row_matches(filter, row, 1)? {
                            matching.push(row.int(0)?);
                        }
                        Ok(())
                    },
                )
                .await?;
                if matching.is_empty() {
                    return Ok(Vec::new());
                }
                // Every row read next matches: the filter need not be checked again.
                let mut ranking = Ranking::new(collection, query, None);
                scan(
                    conn,
                    &format!(
                        "SELECT {SCAN_COLUMNS} FROM {table}
                         WHERE rowid IN (SELECT value FROM json_each(?1))"
                    ),
                    [to_json(&matching)],
                    |row| ranking.offer(row),
                )
                .await?;
                ranking
            }
        };
        hits(
            conn,
            collection,
            ranking.into_ranked(),
            query.include_vectors,
        )
        .await
    }

    /// Through the DiskANN index — unless the scope holds fewer than `index_min_rows` rows, when
    /// scanning them is faster than any index query. Candidates in the scope and matching the
    /// filter are re-ranked exactly; while fewer than `k` survive, asks again for as many as
    /// the survivors' share says it takes (at least 4× as many), and falls back to the exact
    /// scan once that is past [`MAX_INDEX_CANDIDATES`] (filtering first when the filter kept
    /// under a quarter of the candidates), or when the candidates tie across the `k`-th place
    /// (so ties break by id as everywhere).
    async fn search_index(
        &self,
        conn: &Conn,
        collection: &CollectionRow,
        index: &str,
        subject: &str,
        query: &VectorQuery,
    ) -> Result<Vec<VectorHit>> {
        let table = collection.table();
        let counts = row(
            conn,
            &format!(
                "SELECT (SELECT count(*) FROM {table} WHERE subject = ?1),
                        (SELECT count(*) FROM {table})"
            ),
            [subject],
        )
        .await?
        .ok_or_else(|| corrupt("count", "no row"))?;
        let (scope_rows, total_rows) = (
            usize::try_from(counts.int(0)?).unwrap_or(0),
            usize::try_from(counts.int(1)?).unwrap_or(0),
        );
        if scope_rows == 0 {
            return Ok(Vec::new());
        }
        if scope_rows < self.config.index_min_rows {
            return self
                .search_scanned(conn, collection, subject, query, scope_rows)
                .await;
        }
        let mut budget = first_budget(query.k, scope_rows, total_rows, query.filter.is_some());
        let sql = format!(
            // CROSS JOIN fixes the loop order: the index query runs once, outermost. With a
            // plain JOIN the planner may loop over the scope's rows and re-run it for each.
            "SELECT {columns} FROM vector_top_k('{index}', ?1, ?2) AS top
             CROSS JOIN {table} v ON v.rowid = top.id WHERE v.subject = ?3",
            columns = SCAN_COLUMNS
                .split(", ")
                .map(|c| format!("v.{c}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        let probe = Value::Blob(encode_f32_le(&query.vector));
        // One row past k: a tie across the k-th place shows there, and the index chose among
        // the equal rows, not necessarily the smallest ids, so such a tie is settled exactly.
        let mut one_past_k = query.clone();
        one_past_k.k = query.k + 1;
        // Whether an earlier round showed the filter keeping few of the scope's rows.
        let mut selective = false;
        loop {
            if budget >= total_rows || budget > MAX_INDEX_CANDIDATES {
                return Self::search_exactly(conn, collection, subject, query, selective).await;
            }
            // Candidates are filtered here, once each (all are counted), and the eligible
            // ranked as they stream.
            let mut ranking = Ranking::new(collection, &one_past_k, None);
            let (mut candidates, mut eligible) = (0, 0);
            scan(
                conn,
                &sql,
                (probe.clone(), count_to_db(budget), subject),
                |row| {
                    candidates += 1;
                    if let Some(filter) = &query.filter {
                        if !row_matches(filter, row, 3)? {
                            return Ok(());
                        }
                    }
                    eligible += 1;
                    ranking.offer(row)
                },
            )
            .await?;
            // `k` eligible candidates: farther ones cannot enter the top k (up to the index's
            // approximation), and a `min_score` cut only removes the farthest.
            if eligible >= query.k {
                let mut ranked = ranking.into_ranked();
                if tie_across_k(&ranked, query.k) {
                    return Self::search_exactly(conn, collection, subject, query, false).await;
                }
                ranked.truncate(query.k);
                return hits(conn, collection, ranked, query.include_vectors).await;
            }
            // The share of the scope's candidates the filter kept estimates how many more the
            // index must be asked for (with the same slack as the first budget): ask for that
            // at once, or scan now when it is past what the index is ever asked for.
            let needed = if eligible == 0 {
                budget.saturating_mul(16)
            } else {
                budget.saturating_mul(2 * query.k).div_ceil(eligible)
            };
            selective = query.filter.is_some() && eligible * 4 < candidates;
            budget = needed.max(budget.saturating_mul(4));
        }
    }
}

mnemix_sqlite_family::vector_store!(LibsqlStore, search = search_scope);

/// A table per collection (`vectors_{pk}`), with its DiskANN index for the metrics it knows.
#[async_trait]
impl VectorTables for Tx<'_> {
    async fn create_vector_table(&mut self, collection: &CollectionRow) -> Result<()> {
        let table = collection.table();
        let mut ddl = format!(
            "CREATE TABLE {table} (
                 subject         TEXT NOT NULL,
                 id              TEXT NOT NULL,
                 vector          F32_BLOB({dims}) NOT NULL,
                 text            BLOB,
                 metadata        TEXT NOT NULL,
                 conversation_id TEXT,
                 UNIQUE (subject, id)
             );
             CREATE INDEX {table}_by_conversation ON {table} (subject, conversation_id)
                 WHERE conversation_id IS NOT NULL;",
            dims = collection.spec.dims
        );
        if let (Some(index), Some(metric)) =
            (collection.index(), index_metric(collection.spec.metric))
        {
            write!(
                ddl,
                "CREATE INDEX {index} ON {table}
                     (libsql_vector_idx(vector, 'metric={metric}', {INDEX_SETTINGS}));"
            )
            .expect("writing to a String cannot fail");
        }
        self.execute_batch(&ddl)
            .await
            .map_err(crate::db::to_memory_error)?;
        Ok(())
    }

    async fn drop_vector_table(&mut self, collection: &CollectionRow) -> Result<()> {
        // Dropping the table drops its DiskANN index (and the index's shadow table) with it.
        self.execute_batch(&format!("DROP TABLE {};", collection.table()))
            .await
            .map_err(crate::db::to_memory_error)?;
        Ok(())
    }

    async fn before_writing(&mut self, vectors: usize) -> Result<()> {
        self.widen_cache_for(vectors).await
    }

    /// The vector is bound as its little-endian `f32` blob, which is libSQL's `F32_BLOB`
    /// format.
    async fn write_vector(
        &mut self,
        collection: &CollectionRow,
        subject: &str,
        record: &VectorRecord,
    ) -> Result<()> {
        execute(
            self,
            &format!(
                "INSERT INTO {} (subject, id, vector, text, metadata, conversation_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (subject, id) DO UPDATE SET
                     vector = excluded.vector, text = excluded.text,
                     metadata = excluded.metadata, conversation_id = excluded.conversation_id",
                collection.table()
            ),
            (
                subject,
                record.id.as_str(),
                Value::Blob(encode_f32_le(&record.vector)),
                opt_text(record.text.as_deref()),
                to_json(&record.metadata),
                record.conversation_id.as_ref().map(ConversationId::as_str),
            ),
        )
        .await?;
        Ok(())
    }

    async fn read_vector(
        &mut self,
        collection: &CollectionRow,
        subject: &str,
        id: &VectorId,
    ) -> Result<Option<VectorRecord>> {
        let found = row(
            self,
            &format!(
                "SELECT {RECORD_COLUMNS} FROM {} WHERE subject = ?1 AND id = ?2",
                collection.table()
            ),
            (subject, id.as_str()),
        )
        .await?;
        found.map(|row| record_from(&row, 0, true)).transpose()
    }

    async fn ids_and_metadata(
        &mut self,
        collection: &CollectionRow,
        subject: &str,
    ) -> Result<Vec<(String, String)>> {
        let sql = format!(
            "SELECT id, metadata FROM {} WHERE subject = ?1",
            collection.table()
        );
        rows(self, &sql, [subject])
            .await?
            .iter()
            .map(|row| Ok((row.string(0)?, row.string(1)?)))
            .collect()
    }

    async fn delete_vectors(
        &mut self,
        collection: &CollectionRow,
        subject: &str,
        ids: &[VectorId],
    ) -> Result<u64> {
        execute(
            self,
            &format!(
                "DELETE FROM {} WHERE subject = ?1 AND id IN (SELECT value FROM json_each(?2))",
                collection.table()
            ),
            (subject, to_json(&ids)),
        )
        .await
    }

    async fn delete_scope_vectors(
        &mut self,
        scope: &Scope,
        of: Option<&ConversationId>,
    ) -> Result<Vec<i64>> {
        let mut touched = Vec::new();
        for collection in namespace_collections(self, scope.namespace()).await? {
            let table = collection.table();
            let removed = if let Some(id) = of {
                let sql =
                    format!("DELETE FROM {table} WHERE subject = ?1 AND conversation_id = ?2");
                execute(self, &sql, (subject_of(scope), id.as_str())).await?
            } else {
                let sql = format!("DELETE FROM {table} WHERE subject = ?1");
                execute(self, &sql, [subject_of(scope)]).await?
            };
            let removed = usize::try_from(removed).unwrap_or(usize::MAX);
            touched.extend(std::iter::repeat_n(collection.pk, removed));
        }
        Ok(touched)
    }

    async fn vector_subjects(&mut self, namespace: &Namespace) -> Result<Vec<String>> {
        let mut subjects = Vec::new();
        for collection in namespace_collections(self, namespace).await? {
            let sql = format!("SELECT DISTINCT subject FROM {}", collection.table());
            for row in rows(self, &sql, ()).await? {
                subjects.push(row.string(0)?);
            }
        }
        Ok(subjects)
    }

    async fn scope_vectors(&mut self, scope: &Scope) -> Result<Vec<(String, VectorRecord)>> {
        let mut records = Vec::new();
        for collection in namespace_collections(self, scope.namespace()).await? {
            let sql = format!(
                "SELECT {RECORD_COLUMNS} FROM {} WHERE subject = ?1",
                collection.table()
            );
            for row in rows(self, &sql, [subject_of(scope)]).await? {
                records.push((collection.spec.name.clone(), record_from(&row, 0, true)?));
            }
        }
        Ok(records)
    }

    async fn count_scope_vectors(&mut self, scope: &Scope) -> Result<u64> {
        let mut count = 0;
        for collection in namespace_collections(self, scope.namespace()).await? {
            let sql = format!(
                "SELECT count(*) FROM {} WHERE subject = ?1",
                collection.table()
            );
            if let Some(found) = crate::db::row(self, &sql, [subject_of(scope)]).await? {
                count += u64::try_from(found.int(0)?).unwrap_or(0);
            }
        }
        Ok(count)
    }

    async fn count_vectors(&mut self) -> Result<u64> {
        let mut count = 0;
        for row in rows(self, "SELECT pk FROM collections", ()).await? {
            let sql = format!("SELECT count(*) FROM {}", table_of(row.int(0)?));
            if let Some(found) = crate::db::row(self, &sql, ()).await? {
                count += u64::try_from(found.int(0)?).unwrap_or(0);
            }
        }
        Ok(count)
    }
}

impl LibsqlStore {
    /// `VectorStore::search`: the scope's held matrix, the DiskANN index, or a scan.
    pub(crate) async fn search_scope(
        &self,
        scope: &Scope,
        collection: &str,
        query: VectorQuery,
    ) -> Result<Vec<VectorHit>> {
        let mut tx = self.read().await?;
        let collection = family::collection(&mut tx, scope.namespace(), collection).await?;
        collection.spec.check_vector(&query.vector)?;
        let subject = subject_of(scope);
        let index = collection.index();
        // A held matrix is the scope at this generation; it serves while the scope is scanned
        // (an upsert may since have grown it to where the index serves).
        let scanned_below = if index.is_some() {
            self.config.index_min_rows
        } else {
            usize::MAX
        };
        let held = self
            .common
            .vector_cache
            .get(&(collection.pk, subject.to_owned()), &collection.generation)
            .filter(|matrix| matrix.len() < scanned_below);
        let hits = match (held, index) {
            (Some(matrix), _) => matrix
                .search_records(&query)
                .ok_or_else(|| corrupt("vector", "matrix without its records"))?,
            (None, Some(index)) => {
                self.search_index(&tx, &collection, &index, subject, &query)
                    .await?
            }
            (None, None) => {
                let counted = row(
                    &tx,
                    &format!(
                        "SELECT count(*) FROM {} WHERE subject = ?1",
                        collection.table()
                    ),
                    [subject],
                )
                .await?
                .ok_or_else(|| corrupt("count", "no row"))?;
                let scope_rows = usize::try_from(counted.int(0)?).unwrap_or(usize::MAX);
                self.search_scanned(&tx, &collection, subject, &query, scope_rows)
                    .await?
            }
        };
        tx.commit().await?;
        Ok(hits)
    }
}
