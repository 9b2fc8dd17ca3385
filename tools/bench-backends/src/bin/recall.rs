//! `recall`: Q1, retrieval quality on a long-conversation benchmark in LoCoMo's layout; writes
//! `RECALL.md` and `recall.json`. Run it through `cargo xtask recall --locomo PATH`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Parser;
use mnemix_bench_backends::recall::{self, Bm25, Dialogue, Remembering, Setting};
use mnemix_core::embed::{Embedder, HashingEmbedder};
use mnemix_core::MemoryBackend;

/// Retrieval quality: the share of evidence turns `Memory::prepare` puts into the context, and
/// each ranking's recall@k, with the offline hashing embedder and (given its model) MiniLM.
#[derive(Debug, Parser)]
#[command(name = "recall")]
struct Args {
    /// The conversations, in LoCoMo's JSON layout; without it Q1 is a named skip.
    #[arg(long, env = "MNEMIX_LOCOMO")]
    locomo: Option<PathBuf>,
    /// A sentence-transformers model directory (all-MiniLM-L6-v2, as `cargo xtask models`
    /// fetches it); without it the MiniLM rows are a named skip.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Scratch space for the stores.
    #[arg(long, default_value = "target/bench-data")]
    data: PathBuf,
    /// Where RECALL.md and recall.json go.
    #[arg(long, default_value = "target/bench-report")]
    out: PathBuf,
    /// The command recorded in the report.
    #[arg(long, default_value = "cargo xtask recall")]
    command: String,
    /// Only the first conversation, for a smoke test.
    #[arg(long)]
    quick: bool,
    /// The backends the conversations are stored on, comma-separated (`sqlite`, `postgres`,
    /// `redis`): the first one's figures are reported, every other one must give the same
    /// contexts. PostgreSQL and Redis are reached at `MNEMIX_TEST_POSTGRES_URL` and
    /// `MNEMIX_TEST_REDIS_URL`; one without its URL is a named skip.
    #[arg(long, default_value = "sqlite", value_delimiter = ',')]
    backends: Vec<String>,
    /// The facts of the subject when the cost of each stage of `prepare` is measured (on the
    /// first backend, over the longest conversation).
    #[arg(long, default_value_t = 100_000)]
    cost_facts: usize,
    /// Also write each conversation as recall sees it (turns as embedded with their vectors,
    /// questions with theirs and the query terms each turn holds) into this directory, to try
    /// rankings offline (`tools/bench-backends/scripts/recall_mirror.py` ranks them as the
    /// engine does, in seconds). It holds the dataset's text: keep it out of the repository.
    #[arg(long)]
    dump: Option<PathBuf>,
}

/// The namespace every scope of the run is in, erased before and after.
const NAMESPACE: &str = "locomo";

/// A store of `backend` with nothing of an earlier run, or why there is none.
async fn open(backend: &str, dir: &Path, name: &str) -> Result<Arc<dyn MemoryBackend>, String> {
    let url = |variable: &str| {
        std::env::var(variable).map_err(|_| format!("{backend} skipped: no {variable}"))
    };
    let store: Arc<dyn MemoryBackend> = match backend {
        "sqlite" => return store(dir, name).await,
        "postgres" => Arc::new(
            mnemix_postgres::PostgresStore::builder()
                .url(&url("MNEMIX_TEST_POSTGRES_URL")?)
                .schema("mnemix_recall")
                .open()
                .await
                .map_err(|e| e.to_string())?,
        ),
        "redis" => Arc::new(
            mnemix_redis::RedisStore::builder()
                .url(&url("MNEMIX_TEST_REDIS_URL")?)
                .prefix("mnemix-recall")
                .open()
                .await
                .map_err(|e| e.to_string())?,
        ),
        other => {
            return Err(format!(
                "unknown backend {other:?} (sqlite, postgres, redis)"
            ))
        }
    };
    let store = mnemix_core::Checked::wrap(store);
    erase(&store).await?;
    Ok(store)
}

/// Erases the run's namespace.
async fn erase(store: &Arc<dyn MemoryBackend>) -> Result<(), String> {
    let namespace = mnemix_core::Namespace::new(NAMESPACE).map_err(|e| e.to_string())?;
    store
        .forget_namespace(&namespace)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// A fresh SQLite store in `dir` named `name`.
async fn store(dir: &Path, name: &str) -> Result<Arc<dyn MemoryBackend>, String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let path = dir.join(format!("{name}.db"));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let store = mnemix_sqlite::SqliteStore::builder()
        .path(&path)
        .open()
        .await
        .map_err(|e| e.to_string())?;
    Ok(mnemix_core::Checked::wrap(Arc::new(store)))
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = Args::parse();
    let Some(locomo) = &args.locomo else {
        println!("recall: Q1 skipped: no conversations (--locomo PATH or MNEMIX_LOCOMO)");
        return Ok(());
    };
    let mut dialogues: Vec<Dialogue> = recall::read(locomo)?;
    if args.quick {
        dialogues.truncate(1);
    }
    let bm25 = Bm25::index(&dialogues);
    let mut skipped = Vec::new();
    if bm25.is_none() {
        skipped.push("bm25: this SQLite has no FTS5".to_owned());
    }
    let mut embedders: Vec<(String, Arc<dyn Embedder>)> =
        vec![("hashing".to_owned(), Arc::new(HashingEmbedder::new(384)))];
    match &args.model {
        Some(dir) => {
            let model = mnemix_embed::LocalEmbedder::load(dir).map_err(|e| e.to_string())?;
            embedders.push(("MiniLM".to_owned(), Arc::new(model)));
        }
        None => skipped.push("MiniLM: no model (--model DIR)".to_owned()),
    }
    let settings = Setting::standard();
    let rank_bm25 = |d: usize, q: &str, form, limit| bm25.as_ref()?.rank(d, q, form, limit);
    let (mut prepare, mut rankings) = (Vec::new(), Vec::new());
    let mut agreed: Vec<String> = Vec::new();
    for (name, embedder) in embedders {
        let embedder = Arc::new(Remembering::new(embedder));
        let mut first: Option<Vec<recall::PrepareFigures>> = None;
        for backend_name in &args.backends {
            let started = std::time::Instant::now();
            let backend = match open(backend_name, &args.data, &format!("recall-{name}")).await {
                Ok(backend) => backend,
                Err(reason) if reason.contains("skipped") => {
                    if !skipped.contains(&reason) {
                        eprintln!("recall: {reason}");
                        skipped.push(reason);
                    }
                    continue;
                }
                Err(reason) => return Err(reason),
            };
            let (p, r) = recall::evaluate(
                &dialogues,
                backend.clone(),
                embedder.clone(),
                &name,
                &settings,
                &rank_bm25,
                args.dump.as_deref(),
            )
            .await?;
            erase(&backend).await?;
            eprintln!(
                "recall: {name} on {backend_name} took {:.0} s",
                started.elapsed().as_secs_f64()
            );
            match &first {
                None => {
                    first = Some(p.clone());
                    prepare.extend(p);
                    rankings.extend(r);
                }
                Some(reference) => {
                    for (theirs, ours) in p.iter().zip(reference) {
                        if let Some(at) = theirs
                            .contexts
                            .iter()
                            .zip(&ours.contexts)
                            .position(|(a, b)| a != b)
                        {
                            return Err(format!(
                                "{backend_name} gave another context than {} for question {at} \
                                 ({name}, {}): {:?} against {:?}",
                                args.backends[0],
                                ours.setting,
                                theirs.contexts[at],
                                ours.contexts[at]
                            ));
                        }
                    }
                    let contexts: usize = p.iter().map(|f| f.contexts.len()).sum();
                    agreed.push(format!(
                        "{backend_name} gave the same {contexts} contexts as {} ({name})",
                        args.backends[0]
                    ));
                }
            }
        }
    }
    for line in &agreed {
        eprintln!("recall: {line}");
    }
    let mut costs = Vec::new();
    let longest = dialogues.iter().max_by_key(|d| d.turns.len());
    let backend_name = &args.backends[0];
    let opened = match open(backend_name, &args.data, "recall-cost").await {
        Err(reason) if reason.contains("skipped") => None,
        opened => Some(opened?),
    };
    if let (Some(longest), Some(backend)) = (longest, opened) {
        let started = std::time::Instant::now();
        let stages = recall::stage_costs(longest, backend.clone(), args.cost_facts).await?;
        erase(&backend).await?;
        eprintln!(
            "recall: stage costs took {:.0} s",
            started.elapsed().as_secs_f64()
        );
        costs.push((
            format!(
                "On {backend_name}: {} ({} turns, one commit per session), its {} questions \
                 each asked once per stage with the hashing embedder (no model time; the \
                 question's vector remembered), its subject holding {} facts with embeddings.",
                longest.id,
                longest.turns.len(),
                longest.questions.len(),
                args.cost_facts
            ),
            stages,
        ));
    }
    let markdown = recall::markdown(
        &args.command,
        &dialogues,
        &prepare,
        &rankings,
        &skipped,
        &agreed,
        &costs,
    );
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    std::fs::write(args.out.join("RECALL.md"), &markdown).map_err(|e| e.to_string())?;
    let json = serde_json::json!({
        "command": args.command,
        "skipped": skipped,
        "same_contexts": agreed,
        "stage_costs": costs,
        "prepare": prepare,
        "rankings": rankings,
    });
    std::fs::write(
        args.out.join("recall.json"),
        serde_json::to_string_pretty(&json).map_err(|e| e.to_string())? + "\n",
    )
    .map_err(|e| e.to_string())?;
    print!("{markdown}");
    Ok(())
}
