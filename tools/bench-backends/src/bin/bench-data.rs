//! `bench-data`: makes the benchmark data — the Debian descriptions corpus and the
//! all-MiniLM-L6-v2 embeddings of its sentences — unless it is already cached.
//!
//! `cargo xtask bench` runs it before the benchmarks.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use mnemix_bench::data;
use mnemix_bench::workloads::Sizes;
use mnemix_embed::LocalEmbedder;

/// Makes the corpus and the embeddings the benchmarks read.
#[derive(Debug, Parser)]
#[command(name = "bench-data")]
struct Args {
    /// The data folder.
    #[arg(long, default_value = "target/bench-data")]
    data: PathBuf,
    /// The sentence-transformers model directory (`cargo xtask models` fetches it).
    #[arg(long)]
    model: PathBuf,
    /// Only what `bench --quick` needs.
    #[arg(long)]
    quick: bool,
}

/// Texts per call of the embedder (it batches by length inside).
const CHUNK: usize = 512;

fn main() -> Result<(), String> {
    let args = Args::parse();
    let sizes = if args.quick {
        Sizes::quick()
    } else {
        Sizes::full()
    };
    let corpus = data::ensure_corpus(&args.data)?;
    let paragraphs = data::paragraphs(&args.data)?;
    let sentences = data::sentences(&paragraphs);
    eprintln!(
        "bench-data: {} paragraphs, {} sentences in {}",
        paragraphs.len(),
        sentences.len(),
        corpus.display()
    );
    let wanted = sizes.vectors + sizes.queries;
    if data::embeddings(&args.data, wanted).is_ok() {
        eprintln!("bench-data: embeddings of {wanted} sentences are cached");
        return Ok(());
    }
    if sentences.len() < wanted {
        return Err(format!(
            "the corpus has {} sentences, the benchmarks need {wanted}",
            sentences.len()
        ));
    }
    let embedder = LocalEmbedder::load(&args.model).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut vectors = Vec::with_capacity(wanted);
    for chunk in sentences[..wanted].chunks(CHUNK) {
        vectors.extend(embedder.embed_blocking(chunk).map_err(|e| e.to_string())?);
        let rate = vectors.len() as f64 / started.elapsed().as_secs_f64();
        eprintln!(
            "bench-data: embedded {}/{wanted} ({rate:.0} sentences/s)",
            vectors.len()
        );
    }
    let path = data::write_embeddings(&args.data, &vectors)?;
    eprintln!("bench-data: wrote {}", path.display());
    Ok(())
}
