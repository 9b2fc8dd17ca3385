//! Embedders for agent memory, each an [`Embedder`](mnemix_core::embed::Embedder) the engine
//! (`mnemix_engine::Memory`) and the vector stores take:
//!
//! - [`OpenAiEmbedder`] (feature `http`, on by default): any server that speaks the OpenAI
//!   embeddings API — OpenAI, Azure OpenAI, vLLM, Ollama, Hugging Face TEI, LiteLLM — with
//!   batching and retries with exponential backoff on 429 and 5xx (honouring `Retry-After`).
//! - `LocalEmbedder` (feature `local`): a sentence-transformers model directory (BERT
//!   family: `config.json`, `tokenizer.json`, `model.safetensors`, pooling config) run with
//!   candle on the CPU. Real semantic embeddings, offline, no Python. Checked against the
//!   reference all-MiniLM-L6-v2 within 1e-3 cosine.
//!
//! Wrap either in [`mnemix_core::embed::CachedEmbedder`] to embed each text once per model.
//!
//! Beside them, [`OpenAiChat`] (feature `http`): a JSON-mode chat completions client with the
//! same retries, which the engine's model extractor and summarizer call
//! (`mnemix_engine::ModelExtractor`, `extract.model` in its config).
//!
//! These live outside mnemix-core so that core stays free of HTTP and tensor dependencies.
//!
//! ```no_run
//! # #[cfg(feature = "http")]
//! # async fn demo() -> mnemix_core::Result<()> {
//! use mnemix_core::embed::Embedder;
//! use mnemix_embed::OpenAiEmbedder;
//!
//! let embedder = OpenAiEmbedder::builder("text-embedding-3-small", 1536)
//!     .api_key(std::env::var("OPENAI_API_KEY").unwrap_or_default())
//!     .build()?;
//! let vectors = embedder.embed(&["Where do I deploy?".to_owned()]).await?;
//! assert_eq!(vectors[0].len(), 1536);
//! # Ok(()) }
//! ```
#![deny(unsafe_code)]

#[cfg(feature = "http")]
mod chat;
#[cfg(feature = "http")]
mod http;
#[cfg(feature = "local")]
mod local;
#[cfg(feature = "http")]
mod transport;

#[cfg(feature = "http")]
pub use chat::{OpenAiChat, OpenAiChatBuilder};
#[cfg(feature = "http")]
pub use http::{OpenAiEmbedder, OpenAiEmbedderBuilder};
#[cfg(feature = "local")]
pub use local::{LocalEmbedder, MODEL_DIR_ENV};
