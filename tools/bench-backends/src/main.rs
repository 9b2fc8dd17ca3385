//! `bench`: runs the workloads against their references and writes `BENCHMARKS.md` and
//! `benchmarks.json`. Run it through `cargo xtask bench`, which makes the data first.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Parser;
use mnemix_bench::data::{self, Matrix, DIMS};
use mnemix_bench::run::{common, machine, Common};
use mnemix_bench::vectors::Load;
use mnemix_bench::voltagent::VoltAgent;
use mnemix_bench::workloads::{self, Sizes};
use mnemix_bench::{peak_rss_bytes, vectors, Report, Table};
use mnemix_bench_backends::{postgres, sqlite};
use mnemix_core::MemoryBackend;

/// Benchmarks of agent memory against the raw drivers and peers, on real text and embeddings.
#[derive(Debug, Parser)]
#[command(name = "bench")]
struct Args {
    /// Backends to run (comma-separated): sqlite, postgres, redis, libsql.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "sqlite,postgres,redis,libsql"
    )]
    backend: Vec<String>,
    #[command(flatten)]
    common: Common,
    /// The PostgreSQL server of the `postgres` backend (a schema `mnemix_bench` is
    /// dropped and made again).
    #[arg(long, env = "MNEMIX_TEST_POSTGRES_URL")]
    postgres_url: Option<String>,
    /// Where `cargo xtask bench` installed the VoltAgent peer (`node_modules` and `peer.mjs`);
    /// without it the peer rows are left out.
    #[arg(long)]
    voltagent: Option<PathBuf>,
    /// The Redis server of the `redis` backend (keys under `mnemix-bench:` are deleted
    /// first).
    #[arg(long, env = "MNEMIX_TEST_REDIS_URL")]
    redis_url: Option<String>,
    /// The `bench-libsql` binary (crate mnemix-bench-libsql), which runs the `libsql` backend
    /// in a process of its own: libSQL's SQLite must not meet the one this binary links.
    #[arg(long)]
    libsql_bench: Option<PathBuf>,
}

/// The report of this run's tables, with the machine and the peak RSS so far.
fn report(command: String, skipped: Vec<String>, tables: Vec<Table>) -> Report {
    Report {
        skipped,
        command,
        machine: machine(),
        peak_rss_bytes: peak_rss_bytes(),
        tables,
    }
}

/// Runs the `libsql` backend's binary with this run's arguments; returns its tables, with its
/// peak RSS noted on the first.
fn libsql(binary: &Path, common: &Common) -> Result<(Vec<Table>, Vec<String>), String> {
    // Scratch beside the data, like the SQLite run's files: the merged report is the one kept.
    let out = common.data.join("run-libsql-report");
    let mut command = std::process::Command::new(binary);
    command
        .arg("--workload")
        .arg(common.workload.join(","))
        .arg("--data")
        .arg(&common.data)
        .arg("--out")
        .arg(&out)
        .arg("--command")
        .arg(&common.command);
    if common.quick {
        command.arg("--quick");
    }
    let status = command
        .status()
        .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    if !status.success() {
        return Err(format!("{} failed: {status}", binary.display()));
    }
    let json = std::fs::read_to_string(out.join("benchmarks.json")).map_err(|e| e.to_string())?;
    let report: Report = serde_json::from_str(&json).map_err(|e| e.to_string())?;
    let mut tables = report.tables;
    if let (Some(first), Some(rss)) = (tables.first_mut(), report.peak_rss_bytes) {
        first.notes.push(format!(
            "peak RSS of the bench-libsql process (all libsql workloads): {:.1} MiB",
            rss as f64 / 1_048_576.0
        ));
    }
    Ok((tables, report.skipped))
}

/// W5 on SQLite: ours against sqlite-vec and the sequential read, at 1 and 8 clients.
async fn sqlite_vectors(
    sizes: &Sizes,
    ours: &Arc<dyn MemoryBackend>,
    dir: &std::path::Path,
    base: &Arc<Matrix>,
    queries: &Arc<Matrix>,
    voltagent: Option<(&Arc<VoltAgent>, &std::path::Path, f64)>,
) -> Vec<Table> {
    let scope = workloads::subject(50_000);
    let ours_load = vectors::load_ours(ours, &scope, base).await;
    let subject = scope
        .subject()
        .map_or(String::new(), |s| s.as_str().to_owned());
    let (peer, peer_load) = sqlite::SqliteVec::load(&dir.join("sqlite-vec.db"), base, &subject, 8);
    let peer = Arc::new(peer);
    let mut tables = Vec::new();
    for load in Load::W5_AND_W6 {
        let (peer, subject) = (peer.clone(), subject.clone());
        let run: vectors::PeerSearch = Arc::new(move |q, k, filter| {
            let (peer, subject) = (peer.clone(), subject.clone());
            // rusqlite is synchronous: searches run on the blocking pool.
            Box::pin(async move {
                tokio::task::spawn_blocking(move || peer.search(&q, k, &subject, filter))
                    .await
                    .expect("sqlite-vec search")
            })
        });
        let mut table = vectors::search(
            sizes,
            "sqlite, exact",
            (ours, &scope),
            base,
            queries,
            vectors::Peers {
                exact: Some(("sqlite-vec 0.1.9 (rusqlite)".into(), run)),
                voltagent: voltagent.map(|(peer, path, _)| (peer, path)),
            },
            load,
        )
        .await;
        if load.filter.is_none() {
            table.notes.push(format!(
                "load: ours {:.0} vectors/s (upserts of 1,000), sqlite-vec {:.0} vectors/s (one transaction){}",
                base.len() as f64 / ours_load.as_secs_f64(),
                base.len() as f64 / peer_load.as_secs_f64(),
                voltagent.map_or(String::new(), |(_, _, rate)| format!(
                    ", VoltAgent {rate:.0} vectors/s (storeBatch of 1,000)"
                ))
            ));
        }
        tables.push(table);
    }
    tables
}

/// W5 on Redis: ours (an exact scan in Rust over the collection's hash, read whole per
/// query) against the sequential read; Redis has no vector SQL to hand-write, and Redis Stack's
/// search module is not the server this backend targets.
async fn redis_vectors(
    sizes: &Sizes,
    ours: &Arc<dyn MemoryBackend>,
    base: &Arc<Matrix>,
    queries: &Arc<Matrix>,
) -> Table {
    let scope = workloads::subject(50_000);
    let load = vectors::load_ours(ours, &scope, base).await;
    // Every query reads the whole collection from the server: a few queries per round.
    let few = Arc::new(Matrix {
        data: queries.data[..sizes.slow_queries.min(queries.len()) * DIMS].to_vec(),
    });
    let mut table = vectors::search(
        sizes,
        "redis, exact",
        (ours, &scope),
        base,
        &few,
        vectors::Peers::default(),
        Load {
            clients: 1,
            filter: None,
        },
    )
    .await;
    table.notes.push(format!(
        "load: ours {:.0} vectors/s (upserts of 1,000)",
        base.len() as f64 / load.as_secs_f64()
    ));
    table
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = Args::parse();
    let sizes = args.common.sizes();
    let texts = args.common.texts()?;
    let mut tables: Vec<Table> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    for backend in &args.backend {
        match backend.as_str() {
            "sqlite" => {
                let dir = args.common.data.join("run-sqlite");
                let _ = std::fs::remove_dir_all(&dir);
                std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                let (ours, raws) = sqlite::open(&dir.join("memory.db")).await;
                // VoltAgent's adapters are libSQL, i.e. SQLite: its peer is the SQLite store.
                let peer = if let Some(install) = &args.voltagent {
                    Some(Arc::new(VoltAgent::start(install, &dir).await?))
                } else {
                    skipped.push(
                        "VoltAgent peer: not installed (run through `cargo xtask bench`)".into(),
                    );
                    None
                };
                tables.extend(
                    common(&args.common, backend, &ours, &raws, peer.as_ref(), &texts).await,
                );
                if args.common.wants("W5") {
                    eprintln!("bench: sqlite W5");
                    let (base, queries) = texts.vectors.clone().expect("loaded for W5");
                    let embeddings =
                        data::embeddings_file(&args.common.data, sizes.vectors + sizes.queries)?;
                    let embeddings = std::path::absolute(embeddings).map_err(|e| e.to_string())?;
                    let peer = match &peer {
                        Some(peer) => {
                            let reply = peer
                                .call(serde_json::json!({
                                    "op": "vectors_load", "path": embeddings,
                                    "count": sizes.vectors, "dims": DIMS
                                }))
                                .await?;
                            let micros = reply["elapsed"].as_f64().unwrap_or(f64::NAN);
                            Some((
                                peer,
                                embeddings.as_path(),
                                sizes.vectors as f64 / micros * 1e6,
                            ))
                        }
                        None => None,
                    };
                    tables.extend(sqlite_vectors(&sizes, &ours, &dir, &base, &queries, peer).await);
                }
                if args.common.wants("W11") {
                    eprintln!("bench: sqlite W11");
                    tables.extend(
                        mnemix_bench_backends::inspector::pages(&sizes, &ours, &texts.sentences)
                            .await,
                    );
                }
            }
            "postgres" => {
                let Some(url) = args.postgres_url.as_deref() else {
                    skipped.push(
                        "postgres: no server (set MNEMIX_TEST_POSTGRES_URL or --postgres-url)"
                            .into(),
                    );
                    continue;
                };
                let schema = postgres::schema(args.common.quick);
                let (ours, raw) = postgres::open(url, schema).await;
                let raws = [raw];
                tables.extend(common(&args.common, backend, &ours, &raws, None, &texts).await);
                if args.common.wants("W5") {
                    eprintln!("bench: postgres W5");
                    let (base, queries) = texts.vectors.clone().expect("loaded for W5");
                    tables.extend(
                        postgres::vectors(&sizes, url, schema, &ours, &base, &queries).await,
                    );
                }
            }
            "redis" => {
                let Some(url) = args.redis_url.as_deref() else {
                    skipped
                        .push("redis: no server (set MNEMIX_TEST_REDIS_URL or --redis-url)".into());
                    continue;
                };
                let prefix = mnemix_bench_backends::redis::prefix(args.common.quick);
                let (ours, raw) = mnemix_bench_backends::redis::open(url, prefix).await;
                let raws = [raw];
                tables.extend(common(&args.common, backend, &ours, &raws, None, &texts).await);
                if args.common.wants("W5") {
                    eprintln!("bench: redis W5");
                    let (base, queries) = texts.vectors.clone().expect("loaded for W5");
                    tables.push(redis_vectors(&sizes, &ours, &base, &queries).await);
                }
            }
            "libsql" => {
                let Some(binary) = &args.libsql_bench else {
                    skipped.push(
                        "libsql: no bench-libsql binary (run through `cargo xtask bench`)".into(),
                    );
                    continue;
                };
                let (libsql_tables, libsql_skipped) = libsql(binary, &args.common)?;
                tables.extend(libsql_tables);
                skipped.extend(libsql_skipped);
            }
            other => {
                return Err(format!(
                    "unknown backend {other:?} (known: sqlite, postgres, redis, libsql)"
                ))
            }
        }
        // A full run takes over an hour: what the backends done so far measured survives a
        // later failure, beside the data (the report in `out` is only ever a whole run's).
        let partial = Common {
            out: args.common.data.join("partial-report"),
            ..args.common.clone()
        };
        partial.write(&report(
            format!("{} (partial: up to {backend})", args.common.command),
            skipped.clone(),
            tables.clone(),
        ))?;
        eprintln!(
            "bench: {backend} done; the run so far is in {}",
            partial.out.display()
        );
    }
    for note in &skipped {
        eprintln!("bench: skipped {note}");
    }
    let markdown = args
        .common
        .write(&report(args.common.command.clone(), skipped, tables))?;
    println!("{markdown}");
    Ok(())
}
