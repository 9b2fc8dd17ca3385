//! The engine's default embedder with the `local-embedder` feature: the local all-MiniLM-L6-v2
//! when its model is installed, the hashing embedder otherwise, and `prepare` says which ran.
//!
//! The model directory comes from `MNEMIX_TEST_MINILM_DIR`, else `target/models/all-MiniLM-L6-v2`
//! (`cargo xtask models`); without it the test prints a named skip, and fails when
//! `MNEMIX_TEST_REQUIRE` names `minilm`. `cargo xtask test` runs this file with the feature on.
#![cfg(feature = "local-embedder")]

use std::path::PathBuf;
use std::sync::Arc;

use mnemix_core::{InMemoryBackend, Message, MessageId, Scope};
use mnemix_embed::MODEL_DIR_ENV;
use mnemix_engine::config::MemoryConfig;
use mnemix_engine::Memory;

fn model_dir() -> Option<PathBuf> {
    mnemix_testkit::services::minilm_dir("default embedder")
}

/// The embedder a builder given none picked, as `prepare` reports it after one committed turn.
async fn default_embedder_of_a_turn() -> mnemix_core::Result<Option<String>> {
    let config = MemoryConfig::from_yaml(
        "conversation: { enabled: true, window_size: 1 }
semantic_recall: { enabled: true }",
    )?;
    let memory = Memory::builder(Arc::new(InMemoryBackend::new()))
        .config(config)
        .build()?;
    let scope = Scope::new("default-embedder", "u")?;
    let (thread, _) = memory.auto_conversation(&scope, "agent", 0).await?;
    let said = ["I keep bees on the roof", "thanks"].map(|text| {
        let mut message = Message::user(text);
        message.id = MessageId::new(text.replace(' ', "-")).expect("an id");
        message
    });
    memory.commit(&scope, &thread.id, said.to_vec()).await?;
    let context = memory
        .prepare(&scope, &thread.id, "Who keeps bees?")
        .await?;
    assert_eq!(context.recalled.len(), 1, "{context:?}");
    Ok(context.embedder)
}

// One test: it sets the process's environment.
#[tokio::test]
async fn the_local_model_is_the_default_when_installed_else_the_hashing_embedder() {
    let Some(dir) = model_dir() else { return };
    let empty = std::env::temp_dir().join(format!("no-model-{}", std::process::id()));
    std::fs::create_dir_all(&empty).expect("a scratch directory");

    std::env::set_var(MODEL_DIR_ENV, &dir);
    let used = default_embedder_of_a_turn().await.expect("a turn");
    assert!(
        used.as_deref()
            .is_some_and(|id| id.starts_with("all-MiniLM-L6-v2@")),
        "{used:?}"
    );

    // Named but not there: an error naming the directory, never a silent fallback.
    std::env::set_var(MODEL_DIR_ENV, &empty);
    let error = default_embedder_of_a_turn().await.expect_err("no model");
    assert!(error.to_string().contains("no-model-"), "{error}");

    // Not named and not in the cache: the offline hashing embedder.
    std::env::remove_var(MODEL_DIR_ENV);
    std::env::set_var("XDG_CACHE_HOME", &empty);
    let used = default_embedder_of_a_turn().await.expect("a turn");
    assert_eq!(used.as_deref(), Some("hashing-fnv1a-384"));
    let _ = std::fs::remove_dir_all(&empty);
}
