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
    for (name, embedder) in embedders {
        let started = std::time::Instant::now();
        let backend = store(&args.data, &format!("recall-{name}")).await?;
        let embedder = Arc::new(Remembering::new(embedder));
        let (p, r) =
            recall::evaluate(&dialogues, backend, embedder, &name, &settings, &rank_bm25).await?;
        eprintln!(
            "recall: {name} took {:.0} s",
            started.elapsed().as_secs_f64()
        );
        prepare.extend(p);
        rankings.extend(r);
    }
    let markdown = recall::markdown(&args.command, &dialogues, &prepare, &rankings, &skipped);
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    std::fs::write(args.out.join("RECALL.md"), &markdown).map_err(|e| e.to_string())?;
    let json = serde_json::json!({
        "command": args.command,
        "skipped": skipped,
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
