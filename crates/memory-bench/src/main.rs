//! `bench`: runs the workloads against their references and writes `BENCHMARKS.md` and
//! `benchmarks.json`. Run it through `cargo xtask bench`, which makes the data first.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use memory_bench::data::{self, Matrix, DIMS};
use memory_bench::vectors::{Load, Selection};
use memory_bench::voltagent::VoltAgent;
use memory_bench::workloads::RawDriver;
use memory_bench::workloads::{self, Sizes};
use memory_bench::{peak_rss_bytes, postgres, sqlite, vectors, Report, Table};
use memory_core::MemoryBackend;

/// Benchmarks of agent memory against the raw drivers and peers, on real text and embeddings.
#[derive(Debug, Parser)]
#[command(name = "bench")]
struct Args {
    /// Backends to run (comma-separated): sqlite, postgres, redis.
    #[arg(long, value_delimiter = ',', default_value = "sqlite,postgres,redis")]
    backend: Vec<String>,
    /// Workloads to run (comma-separated): W1 append, W2 load tail, W3 list conversations,
    /// W4 lexical recall, W5 and W6 vector search, W8 forget_all, W9 working memory, W10
    /// agent turn.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "W1,W2,W3,W4,W5,W8,W9,W10"
    )]
    workload: Vec<String>,
    /// Small sizes, for a smoke test: the figures mean little.
    #[arg(long)]
    quick: bool,
    /// The data folder `cargo xtask bench` fills (corpus and embeddings).
    #[arg(long, default_value = "target/bench-data")]
    data: PathBuf,
    /// Where BENCHMARKS.md and benchmarks.json go.
    #[arg(long, default_value = "target/bench-report")]
    out: PathBuf,
    /// The PostgreSQL server of the `postgres` backend (a schema `agent_memory_bench` is
    /// dropped and made again).
    #[arg(long, env = "MEMORY_TEST_POSTGRES_URL")]
    postgres_url: Option<String>,
    /// Where `cargo xtask bench` installed the VoltAgent peer (`node_modules` and `peer.mjs`);
    /// without it the peer rows are left out.
    #[arg(long)]
    voltagent: Option<PathBuf>,
    /// The Redis server of the `redis` backend (keys under `agent-memory-bench:` are deleted
    /// first).
    #[arg(long, env = "MEMORY_TEST_REDIS_URL")]
    redis_url: Option<String>,
    /// The command recorded in the report.
    #[arg(long, default_value = "cargo xtask bench")]
    command: String,
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse::<u64>().ok())
        })
        .map_or_else(String::new, |kib| {
            format!(", {:.0} GiB", kib as f64 / 1_048_576.0)
        });
    let os = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|o| {
            o.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|n| n.trim_matches('"').to_owned())
        })
        .unwrap_or_default();
    format!("{cpu}, {cores} cores{memory}, {os}")
}

/// The corpus as the workloads use it.
struct Texts {
    paragraphs: Vec<String>,
    sentences: Vec<String>,
    queries: Vec<String>,
    /// The embeddings (base, held-out queries), when W5 or W8 runs.
    vectors: Option<(Arc<Matrix>, Arc<Matrix>)>,
}

/// W1, W2, W4 and W9: ours against the raw driver on one backend.
async fn common(
    sizes: &Sizes,
    backend: &str,
    ours: &Arc<dyn MemoryBackend>,
    raw: &Arc<dyn RawDriver>,
    peer: Option<&Arc<VoltAgent>>,
    texts: &Texts,
    wants: &impl Fn(&str) -> bool,
) -> Vec<Table> {
    let mut tables = Vec::new();
    if wants("W1") {
        eprintln!("bench: {backend} W1");
        tables.extend(workloads::append(sizes, backend, ours, raw, peer, &texts.paragraphs).await);
    }
    if wants("W2") {
        eprintln!("bench: {backend} W2");
        tables
            .extend(workloads::load_tail(sizes, backend, ours, raw, peer, &texts.paragraphs).await);
    }
    if wants("W3") {
        eprintln!("bench: {backend} W3");
        tables.extend(workloads::list_conversations(sizes, backend, ours, raw).await);
    }
    if wants("W4") {
        eprintln!("bench: {backend} W4");
        tables.extend(
            workloads::recall(sizes, backend, ours, raw, &texts.sentences, &texts.queries).await,
        );
    }
    if wants("W9") {
        eprintln!("bench: {backend} W9");
        tables.extend(
            workloads::working_memory(sizes, backend, ours, raw, peer, &texts.paragraphs).await,
        );
    }
    if wants("W10") {
        eprintln!("bench: {backend} W10");
        tables.extend(workloads::agent_turn(sizes, backend, ours, &texts.paragraphs).await);
    }
    if wants("W8") {
        eprintln!("bench: {backend} W8");
        let vectors = texts.vectors.as_ref().map(|(base, _)| base.as_ref());
        tables.extend(workloads::forget_all(sizes, backend, ours, &texts.sentences, vectors).await);
    }
    tables
}

/// The first `sizes.vectors` embeddings, and the held-out queries after them.
fn vectors_of(
    data_dir: &std::path::Path,
    sizes: &Sizes,
) -> Result<(Arc<Matrix>, Arc<Matrix>), String> {
    let all = data::embeddings(data_dir, sizes.vectors + sizes.queries)?;
    let (base, queries) = all.data.split_at(sizes.vectors * DIMS);
    Ok((
        Arc::new(Matrix {
            data: base.to_vec(),
        }),
        Arc::new(Matrix {
            data: queries.to_vec(),
        }),
    ))
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
    let runs = [
        Load {
            clients: 1,
            filter: None,
        },
        Load {
            clients: 8,
            filter: None,
        },
        Load {
            clients: 1,
            filter: Some(Selection::ONE_PERCENT),
        },
        Load {
            clients: 1,
            filter: Some(Selection::TEN_PERCENT),
        },
    ];
    for load in runs {
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

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = Args::parse();
    let sizes = if args.quick {
        Sizes::quick()
    } else {
        Sizes::full()
    };
    let wants = |w: &str| args.workload.iter().any(|x| x.eq_ignore_ascii_case(w));
    let paragraphs = data::paragraphs(&args.data)?;
    let sentences = data::sentences(&paragraphs);
    let queries: Vec<String> = sentences[sentences.len() - sizes.queries..].to_vec();
    let vectors = if wants("W5") || wants("W8") {
        Some(vectors_of(&args.data, &sizes)?)
    } else {
        None
    };
    let texts = Texts {
        paragraphs,
        sentences,
        queries,
        vectors,
    };
    let mut tables: Vec<Table> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    for backend in &args.backend {
        match backend.as_str() {
            "sqlite" => {
                let dir = args.data.join("run-sqlite");
                let _ = std::fs::remove_dir_all(&dir);
                std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                let (ours, raw) = sqlite::open(&dir.join("memory.db")).await;
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
                    common(&sizes, backend, &ours, &raw, peer.as_ref(), &texts, &wants).await,
                );
                if wants("W5") {
                    eprintln!("bench: sqlite W5");
                    let (base, queries) = texts.vectors.clone().expect("loaded for W5");
                    let embeddings =
                        data::embeddings_file(&args.data, sizes.vectors + sizes.queries)?;
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
            }
            "postgres" => {
                let Some(url) = args.postgres_url.as_deref() else {
                    skipped.push(
                        "postgres: no server (set MEMORY_TEST_POSTGRES_URL or --postgres-url)"
                            .into(),
                    );
                    continue;
                };
                let schema = postgres::schema(args.quick);
                let (ours, raw) = postgres::open(url, schema).await;
                tables.extend(common(&sizes, backend, &ours, &raw, None, &texts, &wants).await);
                if wants("W5") {
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
                        .push("redis: no server (set MEMORY_TEST_REDIS_URL or --redis-url)".into());
                    continue;
                };
                let prefix = memory_bench::redis::prefix(args.quick);
                let (ours, raw) = memory_bench::redis::open(url, prefix).await;
                tables.extend(common(&sizes, backend, &ours, &raw, None, &texts, &wants).await);
            }
            other => {
                return Err(format!(
                    "unknown backend {other:?} (known: sqlite, postgres, redis)"
                ))
            }
        }
    }
    for note in &skipped {
        eprintln!("bench: skipped {note}");
    }
    let report = Report {
        skipped,
        command: args.command,
        machine: machine(),
        peak_rss_bytes: peak_rss_bytes(),
        tables,
    };
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let markdown = report.markdown();
    std::fs::write(args.out.join("BENCHMARKS.md"), &markdown).map_err(|e| e.to_string())?;
    std::fs::write(
        args.out.join("benchmarks.json"),
        serde_json::to_string_pretty(&report).expect("report serializes"),
    )
    .map_err(|e| e.to_string())?;
    println!("{markdown}");
    Ok(())
}
