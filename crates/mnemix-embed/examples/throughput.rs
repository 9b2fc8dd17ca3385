//! Texts per second of the local embedder on real paragraphs.
//!
//! ```sh
//! cargo xtask models                                    # all-MiniLM-L6-v2 into target/models
//! python3 ../shared/tools/corpus/debian_descriptions.py --out /tmp/corpus.jsonl --limit 2000
//! cargo run --release -p mnemix-embed --features local --example throughput -- /tmp/corpus.jsonl 1000
//! ```
//!
//! Arguments: a JSON Lines file with a `text` field, how many texts (default 1000), and the
//! model directory (default `target/models/all-MiniLM-L6-v2`). Texts are cut at 256 characters,
//! as in `shared/tools/minilm`'s figure, so the two can be compared on the same input.

use std::path::PathBuf;
use std::time::Instant;

use mnemix_core::embed::Embedder;
use mnemix_embed::LocalEmbedder;

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let corpus = args
        .first()
        .ok_or("usage: throughput CORPUS.jsonl [N] [MODEL_DIR]")?;
    let n: usize = args.get(1).map_or(Ok(1000), |a| a.parse())?;
    let dir = args.get(2).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/models/all-MiniLM-L6-v2"),
        PathBuf::from,
    );
    let texts: Vec<String> = std::fs::read_to_string(corpus)?
        .lines()
        .take(n)
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            value["text"]
                .as_str()
                .expect("a text field")
                .chars()
                .take(256)
                .collect()
        })
        .collect();
    let loading = Instant::now();
    let embedder = LocalEmbedder::load(&dir)?;
    println!(
        "loaded {} in {:.2?}",
        embedder.model_id(),
        loading.elapsed()
    );
    // One warm-up batch, then the timed run.
    embedder.embed(&texts[..texts.len().min(32)]).await?;
    let started = Instant::now();
    let vectors = embedder.embed(&texts).await?;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{} texts (≤256 chars) in {seconds:.2} s: {:.1} texts/s, {} dims",
        vectors.len(),
        vectors.len() as f64 / seconds,
        embedder.dims()
    );
    Ok(())
}
