//! `bench-libsql`: the `libsql` backend's benchmarks — mnemix-libsql against the raw libsql
//! driver on the same file, and its vector search against libSQL's own vector SQL.
//!
//! A binary of its own because libSQL bundles its own SQLite, which must not share a process
//! with the one sqlx and rusqlite link (mnemix-bench's other backends). `bench --backend
//! libsql` runs it and merges its tables; `cargo xtask bench` builds it.

mod raw;

use std::path::Path;
use std::sync::Arc;

use clap::Parser;
use libsql::Value;
use mnemix_bench::data::{Matrix, DIMS};
use mnemix_bench::run::{common, machine, Common};
use mnemix_bench::vectors::{self, Load, PeerSearch, Peers, Selection, COLLECTION};
use mnemix_bench::workloads::{self, RawDriver, Sizes};
use mnemix_bench::{peak_rss_bytes, Report, Table};
use mnemix_core::MemoryBackend;
use mnemix_libsql::LibsqlStore;

use crate::raw::{string, RawLibsql};

/// W7 ingests `1 / W7_FRACTION` of the base on libSQL.
const W7_FRACTION: usize = 10;

/// Benchmarks of mnemix-libsql against the raw libsql driver.
#[derive(Debug, Parser)]
#[command(name = "bench-libsql")]
struct Args {
    #[command(flatten)]
    common: Common,
}

/// The store and the raw driver on one fresh file.
async fn open(path: &Path) -> (Arc<LibsqlStore>, Arc<dyn RawDriver>) {
    let readers = std::thread::available_parallelism()
        .map_or(2, std::num::NonZero::get)
        .max(2);
    let store = LibsqlStore::builder()
        .path(path)
        .readers(readers)
        .open()
        .await
        .expect("open the libSQL store");
    let raw = RawLibsql::open(path, readers).await;
    (Arc::new(store), Arc::new(raw))
}

/// libSQL's vector SQL by hand on the store's own collection table: the exact scan
/// (`vector_distance_cos` over the subject, `ORDER BY … LIMIT k`) or the DiskANN index
/// (`vector_top_k`, asked for exactly `k`, without the store's exact re-rank).
fn raw_search(raw: &Arc<RawLibsql>, table: &str, subject: &str, indexed: bool) -> PeerSearch {
    let (raw, table, subject) = (raw.clone(), table.to_owned(), subject.to_owned());
    Arc::new(
        move |query: Vec<f32>, k: usize, filter: Option<Selection>| {
            let (raw, table, subject) = (raw.clone(), table.clone(), subject.clone());
            Box::pin(async move {
                // Only fixed names (the table, a metadata field) are formatted in.
                let condition = filter.map_or(String::new(), |f| {
                    format!(" AND json_extract(v.metadata, '$.{}') = 0", f.field)
                });
                let sql = if indexed {
                    format!(
                        "SELECT v.id FROM vector_top_k('{table}_ann', ?1, ?2) AS top
                     CROSS JOIN {table} v ON v.rowid = top.id WHERE v.subject = ?3{condition}"
                    )
                } else {
                    format!(
                        "SELECT v.id FROM {table} v WHERE v.subject = ?3{condition}
                     ORDER BY vector_distance_cos(v.vector, ?1) LIMIT ?2"
                    )
                };
                let probe: Vec<u8> = query.iter().flat_map(|x| x.to_le_bytes()).collect();
                let found = raw
                    .query(&sql, (Value::Blob(probe), k as i64, subject.as_str()))
                    .await;
                found
                    .iter()
                    .map(|row| string(&row[0])[1..].parse().expect("a benchmark id"))
                    .collect()
            })
        },
    )
}

/// The database's size in bytes (pages × page size).
async fn file_bytes(raw: &RawLibsql) -> f64 {
    let found = raw
        .query(
            "SELECT (SELECT page_count FROM pragma_page_count())
                  * (SELECT page_size FROM pragma_page_size())",
            (),
        )
        .await;
    match found.first().map(|row| &row[0]) {
        Some(Value::Integer(bytes)) => *bytes as f64,
        other => panic!("no page count: {other:?}"),
    }
}

/// W5/W6 on libSQL: the exact scan (a second store that never asks the index) against
/// `vector_distance_cos` SQL, and the DiskANN search against `vector_top_k` SQL.
async fn libsql_vectors(
    sizes: &Sizes,
    path: &Path,
    ours: &Arc<dyn MemoryBackend>,
    base: &Arc<Matrix>,
    queries: &Arc<Matrix>,
) -> Vec<Table> {
    let scope = workloads::subject(50_000);
    let probe = Arc::new(RawLibsql::open(path, 8).await);
    let before = file_bytes(&probe).await;
    let load = vectors::load_ours(ours, &scope, base).await;
    let bytes_per_vector = (file_bytes(&probe).await - before) / base.len() as f64;
    let exact: Arc<dyn MemoryBackend> = mnemix_core::Checked::wrap(Arc::new(
        LibsqlStore::builder()
            .path(path)
            .index_min_rows(usize::MAX)
            .open()
            .await
            .expect("open the exact store"),
    ));
    let table = probe
        .query(
            "SELECT pk FROM collections WHERE namespace = ?1 AND name = ?2",
            (scope.namespace().as_str(), COLLECTION),
        )
        .await;
    let table = match table.first().map(|row| &row[0]) {
        Some(Value::Integer(pk)) => format!("vectors_{pk}"),
        other => panic!("no collection row: {other:?}"),
    };
    let subject = scope
        .subject()
        .map_or(String::new(), |s| s.as_str().to_owned());
    // Where ours scans every row of the subject (the exact store; the index store at 1%,
    // where too few of the index's candidates match and it falls back to the scan), a few
    // queries per round, as for the other scans.
    let few = Arc::new(Matrix {
        data: queries.data[..sizes.slow_queries.min(queries.len()) * DIMS].to_vec(),
    });
    let runs = [
        ("exact", false, &exact, 1, None, &few),
        ("DiskANN index", true, ours, 1, None, queries),
        ("DiskANN index", true, ours, 8, None, queries),
        (
            "DiskANN index",
            true,
            ours,
            1,
            Some(Selection::ONE_PERCENT),
            &few,
        ),
        (
            "DiskANN index",
            true,
            ours,
            1,
            Some(Selection::TEN_PERCENT),
            queries,
        ),
    ];
    let mut tables = Vec::new();
    for (label, indexed, store, clients, filter, queries) in runs {
        // Under a filter, `vector_top_k` asked for k finds few matching rows: the exact scan
        // is what SQL by hand would do there.
        let raw_indexed = indexed && filter.is_none();
        let name = if raw_indexed {
            "raw libSQL SQL, vector_top_k (k only, no re-rank)"
        } else {
            "raw libSQL SQL, vector_distance_cos"
        };
        let peer = raw_search(&probe, &table, &subject, raw_indexed);
        let mut table = vectors::search(
            sizes,
            &format!("libsql, {label}"),
            (store, &scope),
            base,
            queries,
            Peers {
                exact: Some((name.into(), peer)),
                voltagent: None,
            },
            Load { clients, filter },
        )
        .await;
        if indexed && clients == 1 && filter.is_none() {
            table.notes.push(format!(
                "load and index build: ours {:.0} vectors/s (upserts of 1,000 into a table with its DiskANN index: the index is built row by row); the file grew by {bytes_per_vector:.0} bytes per vector (row, metadata and index)",
                base.len() as f64 / load.as_secs_f64(),
            ));
        }
        tables.push(table);
    }
    tables
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = Args::parse();
    let sizes = args.common.sizes();
    let mut texts = args.common.texts()?;
    // libSQL builds its DiskANN index row by row at a few hundred vectors/s: W7's two sides
    // ingest a tenth of the base here (the table's config gives the count); W5 loads it all.
    texts.ingest = texts.ingest.map(|base| {
        Arc::new(Matrix {
            data: base.data[..(base.len() / W7_FRACTION).max(1) * DIMS].to_vec(),
        })
    });
    let dir = args.common.data.join("run-libsql");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let path = dir.join("memory.db");
    let (store, raw) = open(&path).await;
    let ours: Arc<dyn MemoryBackend> = mnemix_core::Checked::wrap(store);
    let mut tables = common(
        &args.common,
        "libsql",
        &ours,
        std::slice::from_ref(&raw),
        None,
        &texts,
    )
    .await;
    if args.common.wants("W5") {
        eprintln!("bench: libsql W5");
        let (base, queries) = texts.vectors.clone().expect("loaded for W5");
        tables.extend(libsql_vectors(&sizes, &path, &ours, &base, &queries).await);
    }
    let report = Report {
        skipped: Vec::new(),
        command: args.common.command.clone(),
        machine: machine(),
        peak_rss_bytes: peak_rss_bytes(),
        tables,
    };
    args.common.write(&report)?;
    Ok(())
}
