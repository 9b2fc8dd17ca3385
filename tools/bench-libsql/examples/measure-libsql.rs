//! The figures of the libSQL backend's vector search, on an embedded file: 20,000 clustered
//! 384-dim vectors, ingest rate, recall@10 against exact, and top-10 latency of our search
//! (through the DiskANN index, and through the exact scan it picks for small scopes) against an
//! exact scan in SQL and against the bare DiskANN query (no scope, no re-rank), twice: with ten
//! subjects (the caller's scope keeps 10% of the rows) and with all rows in one scope. Figures
//! are medians over 50 queries, the variants interleaved. First, a remember's cost in a subject
//! of 100 facts against one of 10,000, interleaved (it must not grow with the subject).
//!
//! `cargo run --release -p mnemix-bench-libsql --example measure-libsql`

use std::time::{Duration, Instant};

use mnemix_conformance::support::clustered_vectors;
use mnemix_core::adapter::{encode_f32_le, ExactIndex};
use mnemix_core::{
    CollectionSpec, Metadata, Metric, Scope, VectorId, VectorQuery, VectorRecord, VectorStore,
};
use mnemix_libsql::LibsqlStore;

const DIMS: usize = 384;
const ROWS: usize = 20_000;
const QUERIES: usize = 50;

fn median(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1e3
}

/// Loads `rows` into collection `name` (pk `pk`), spread over `subjects` subjects in batches of
/// 1,000 (interleaved, as users' writes are); returns the ingest rate.
async fn ingest(store: &LibsqlStore, name: &str, subjects: usize, rows: &[Vec<f32>]) -> f64 {
    let scopes: Vec<Scope> = (0..subjects)
        .map(|s| Scope::new("measure", format!("user-{s}")).unwrap())
        .collect();
    store
        .ensure_collection(
            scopes[0].namespace(),
            CollectionSpec::new(name, DIMS, "clustered"),
        )
        .await
        .unwrap();
    let started = Instant::now();
    for chunk in rows.chunks(1_000).enumerate() {
        let (c, chunk) = chunk;
        for (s, scope) in scopes.iter().enumerate() {
            let records: Vec<_> = chunk
                .iter()
                .enumerate()
                .filter(|(i, _)| i % subjects == s)
                .map(|(i, v)| {
                    VectorRecord::new(
                        VectorId::new(format!("v{}", c * 1_000 + i)).unwrap(),
                        v.clone(),
                    )
                })
                .collect();
            store.upsert_vectors(scope, name, records).await.unwrap();
        }
    }
    rows.len() as f64 / started.elapsed().as_secs_f64()
}

async fn count_rows(raw: &libsql::Connection, sql: &str, probe: &[f32], subject: &str) -> usize {
    let mut rows = raw
        .query(sql, (encode_f32_le(probe), subject))
        .await
        .unwrap();
    let mut n = 0;
    while rows.next().await.unwrap().is_some() {
        n += 1;
    }
    n
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    label: &str,
    stores: [&LibsqlStore; 2],
    raw: &libsql::Connection,
    table: &str,
    name: &str,
    subjects: usize,
    rows: &[Vec<f32>],
    queries: &[Vec<f32>],
) {
    let scope = Scope::new("measure", "user-0").unwrap();
    let mut exact = ExactIndex::new(DIMS, Metric::Cosine);
    for (i, v) in rows.iter().enumerate().filter(|(i, _)| i % subjects == 0) {
        exact.push(VectorId::new(format!("v{i}")).unwrap(), v, Metadata::new());
    }
    let exact_sql = format!(
        "SELECT id FROM {table} WHERE subject = ?2 ORDER BY vector_distance_cos(vector, ?1) LIMIT 10"
    );
    let bare_sql =
        format!("SELECT id FROM vector_top_k('{table}_ann', ?1, 10) WHERE ?2 IS NOT NULL");
    let mut times: [Vec<Duration>; 4] = Default::default();
    let mut found = [0usize; 2];
    let mut wanted = 0;
    for q in queries {
        let query = VectorQuery::new(q.clone(), 10);
        let truth: Vec<&str> = exact
            .search(&query)
            .iter()
            .map(|(row, _)| exact.id(*row).as_str())
            .collect();
        wanted += truth.len();
        for (variant, store) in stores.iter().enumerate() {
            let t = Instant::now();
            let hits = store.search(&scope, name, query.clone()).await.unwrap();
            times[variant].push(t.elapsed());
            found[variant] += hits
                .iter()
                .filter(|h| truth.contains(&h.record.id.as_str()))
                .count();
        }
        let t = Instant::now();
        assert_eq!(count_rows(raw, &exact_sql, q, "user-0").await, 10);
        times[2].push(t.elapsed());
        let t = Instant::now();
        assert_eq!(count_rows(raw, &bare_sql, q, "user-0").await, 10);
        times[3].push(t.elapsed());
    }
    let [indexed, scanned, sql, bare] = times.map(median);
    println!("{label}: scope of {} rows", exact.len());
    println!(
        "  ours through DiskANN  {indexed:7.2} ms  recall@10 {:.3}",
        found[0] as f64 / wanted as f64
    );
    println!(
        "  ours, exact scan      {scanned:7.2} ms  recall@10 {:.3}",
        found[1] as f64 / wanted as f64
    );
    println!(
        "  exact scan in SQL     {sql:7.2} ms  (ours through DiskANN / this: {:.2})",
        indexed / sql
    );
    println!(
        "  bare vector_top_k     {bare:7.2} ms  (ours through DiskANN / this: {:.2})",
        indexed / bare
    );
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("measure.db");
    // Two stores on one file: one always asks the index, one always scans (the store's default
    // picks between them by scope size, see `index_min_rows`).
    let indexed = LibsqlStore::builder()
        .path(&path)
        .index_min_rows(0)
        .open()
        .await
        .unwrap();
    let scanning = LibsqlStore::builder()
        .path(&path)
        .index_min_rows(usize::MAX)
        .open()
        .await
        .unwrap();
    let (first, last) = mnemix_conformance::support::remember_growth(&indexed, "measure").await;
    println!(
        "remember: among 100 facts {first:?}, among 10,000 {last:?}, ratio {:.2}",
        last.as_secs_f64() / first.as_secs_f64()
    );
    let data = clustered_vectors(ROWS + QUERIES, DIMS, 11);
    let (rows, queries) = data.split_at(ROWS);
    println!(
        "libSQL {}, {ROWS} × {DIMS} clustered vectors",
        libsql::version()
    );
    let rate = ingest(&indexed, "subjects", 10, rows).await;
    println!("ingest with the DiskANN index, 10 subjects: {rate:.0} vectors/s");
    let rate = ingest(&indexed, "shared", 1, rows).await;
    println!("ingest with the DiskANN index, one scope:   {rate:.0} vectors/s");
    let raw = libsql::Builder::new_local(&path)
        .build()
        .await
        .unwrap()
        .connect()
        .unwrap();
    let stores = [&indexed, &scanning];
    measure(
        "ten subjects",
        stores,
        &raw,
        "vectors_1",
        "subjects",
        10,
        rows,
        queries,
    )
    .await;
    measure(
        "one scope",
        stores,
        &raw,
        "vectors_2",
        "shared",
        1,
        rows,
        queries,
    )
    .await;
}
