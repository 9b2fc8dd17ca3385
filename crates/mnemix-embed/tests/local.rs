//! The local embedder against reference all-MiniLM-L6-v2 vectors.
//!
//! `tests/data/minilm_reference.json` holds the vectors `shared/tools/minilm/minilm.py` (a
//! numpy re-implementation checked against sentence-transformers) computed for the texts of
//! `minilm_texts.jsonl`, two of them longer than the 128 tokens `tokenizer.json` truncates at.
//! The model directory comes from `MNEMIX_TEST_MINILM_DIR`, else `target/models/all-MiniLM-L6-v2`
//! (`cargo xtask models` fetches it); without it the tests print a named skip, and fail when
//! `MNEMIX_TEST_REQUIRE` names `minilm`.
#![cfg(feature = "local")]

use std::path::PathBuf;

use mnemix_core::adapter::cosine;
use mnemix_core::embed::Embedder;
use mnemix_embed::LocalEmbedder;
use serde_json::Value;

fn model_dir() -> Option<PathBuf> {
    mnemix_testkit::services::minilm_dir("local embedder")
}

fn reference() -> Vec<(String, Vec<f32>)> {
    let data: Value =
        serde_json::from_str(include_str!("data/minilm_reference.json")).expect("reference JSON");
    data["vectors"]
        .as_array()
        .expect("vectors")
        .iter()
        .map(|v| {
            let text = v["text"].as_str().expect("text").to_owned();
            let embedding = v["embedding"]
                .as_array()
                .expect("embedding")
                .iter()
                .map(|x| x.as_f64().expect("number") as f32)
                .collect();
            (text, embedding)
        })
        .collect()
}

#[tokio::test]
async fn matches_the_reference_model_within_1e_3_cosine() {
    let Some(dir) = model_dir() else { return };
    let embedder = LocalEmbedder::load(&dir).expect("load");
    assert_eq!(embedder.dims(), 384);
    assert_eq!(
        embedder.max_seq_length(),
        256,
        "sentence-transformers' limit, not tokenizer.json's"
    );
    assert!(
        embedder.model_id().starts_with("all-MiniLM-L6-v2@"),
        "{}",
        embedder.model_id()
    );
    let reference = reference();
    let texts: Vec<String> = reference.iter().map(|(t, _)| t.clone()).collect();
    let vectors = embedder.embed(&texts).await.expect("embed");
    let mut lowest = f32::INFINITY;
    for ((text, expected), got) in reference.iter().zip(&vectors) {
        let similarity = cosine(expected, got);
        lowest = lowest.min(similarity);
        assert!(
            similarity >= 1.0 - 1e-3,
            "cosine {similarity} to the reference for {:?}",
            text.chars().take(40).collect::<String>()
        );
        let norm: f32 = got.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "unit length, got {norm}");
    }
    println!(
        "lowest cosine to the reference over {} texts: {lowest:.7}",
        texts.len()
    );
    // One at a time gives the same vectors as the padded batch.
    for (text, batched) in texts.iter().zip(&vectors).take(3) {
        let alone = embedder
            .embed(std::slice::from_ref(text))
            .await
            .expect("embed one");
        assert!(cosine(&alone[0], batched) > 1.0 - 1e-5);
    }
}

#[tokio::test]
async fn similar_sentences_are_closer() {
    let Some(dir) = model_dir() else { return };
    let embedder = LocalEmbedder::load(&dir).expect("load");
    let v = embedder
        .embed(&[
            "A man is eating food.".to_owned(),
            "Someone is having a meal.".to_owned(),
            "The stock market fell sharply today.".to_owned(),
        ])
        .await
        .expect("embed");
    assert!(cosine(&v[0], &v[1]) > cosine(&v[0], &v[2]) + 0.2);
}

#[test]
fn a_missing_or_broken_directory_is_a_clear_error() {
    let error = LocalEmbedder::load("/nonexistent/model").unwrap_err();
    assert!(error.to_string().contains("config.json"), "{error}");
}
