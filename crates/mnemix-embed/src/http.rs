//! An embedder for any server that speaks the OpenAI embeddings API.

use std::fmt;

use async_trait::async_trait;
use mnemix_core::embed::Embedder;
use mnemix_core::{MemoryError, Result};
use serde::{Deserialize, Serialize};

use crate::transport::{http_settings_methods, Endpoint, HttpSettings};

const COMPONENT: &str = "embedder";

/// Embeddings from `POST {base_url}/embeddings` (the OpenAI API shape).
///
/// # Behavior
/// - Texts go in batches of at most `batch_size`, in order; the vectors come back in the
///   order of the texts whatever order the server lists them in (by `index`).
/// - A 429, a 5xx, a timeout or a refused connection is retried up to `max_retries` times,
///   waiting `Retry-After` when the server sends one (at most a minute), else an exponential
///   backoff from `initial_backoff` (doubling, capped at `max_backoff`, with jitter).
/// - Any other status, a malformed body, a vector of the wrong length, a non-finite or zero
///   vector is [`MemoryError::Model`], never retried.
/// - The API key is never printed (`Debug` shows `***`).
#[derive(Clone)]
pub struct OpenAiEmbedder {
    endpoint: Endpoint,
    settings: OpenAiEmbedderBuilder,
}

impl fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("endpoint", &self.endpoint.url)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Builds an [`OpenAiEmbedder`].
#[derive(Clone)]
pub struct OpenAiEmbedderBuilder {
    http: HttpSettings,
    model: String,
    dims: usize,
    send_dimensions: bool,
    batch_size: usize,
}

impl fmt::Debug for OpenAiEmbedderBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiEmbedderBuilder")
            .field("http", &self.http)
            .field("model", &self.model)
            .field("dims", &self.dims)
            .field("batch_size", &self.batch_size)
            .finish_non_exhaustive()
    }
}

impl OpenAiEmbedderBuilder {
    http_settings_methods!();

    /// Ask the server for `dims` components (the `dimensions` parameter, which only some
    /// models accept, e.g. OpenAI's text-embedding-3); off by default.
    #[must_use]
    pub fn send_dimensions(mut self, send: bool) -> Self {
        self.send_dimensions = send;
        self
    }

    /// Texts per request (default 128).
    #[must_use]
    pub fn batch_size(mut self, size: usize) -> Self {
        self.batch_size = size;
        self
    }

    /// Checks the settings and makes the HTTP client.
    pub fn build(self) -> Result<OpenAiEmbedder> {
        let invalid = |what: &str| MemoryError::invalid(format!("openai embedder: {what}"));
        if self.model.trim().is_empty() {
            return Err(invalid("model must not be empty"));
        }
        if self.dims == 0 {
            return Err(invalid("dims must be at least 1"));
        }
        if self.batch_size == 0 {
            return Err(invalid("batch_size must be at least 1"));
        }
        let endpoint = self
            .http
            .endpoint("openai embedder", COMPONENT, "embeddings")?;
        Ok(OpenAiEmbedder {
            endpoint,
            settings: self,
        })
    }
}

#[derive(Serialize)]
struct EmbeddingRequest<'a> {
    model: &'a str,
    input: &'a [String],
    encoding_format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<usize>,
}

#[derive(Deserialize)]
struct EmbeddingResponse {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    index: usize,
    embedding: Vec<f32>,
}

impl OpenAiEmbedder {
    /// A builder for `model`, whose vectors have `dims` components.
    pub fn builder(model: impl Into<String>, dims: usize) -> OpenAiEmbedderBuilder {
        OpenAiEmbedderBuilder {
            http: HttpSettings::default(),
            model: model.into(),
            dims,
            send_dimensions: false,
            batch_size: 128,
        }
    }

    /// From the environment: `MNEMIX_EMBED_MODEL` and `MNEMIX_EMBED_DIMS` (required),
    /// `MNEMIX_EMBED_BASE_URL` (or `OPENAI_BASE_URL`), `MNEMIX_EMBED_API_KEY` (or
    /// `OPENAI_API_KEY`).
    pub fn from_env() -> Result<Self> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let model = var("MNEMIX_EMBED_MODEL")
            .ok_or_else(|| MemoryError::invalid("openai embedder: MNEMIX_EMBED_MODEL is unset"))?;
        let dims = var("MNEMIX_EMBED_DIMS")
            .ok_or_else(|| MemoryError::invalid("openai embedder: MNEMIX_EMBED_DIMS is unset"))?;
        let dims = dims.trim().parse().map_err(|_| {
            MemoryError::invalid(format!(
                "openai embedder: MNEMIX_EMBED_DIMS {dims:?} is not a number"
            ))
        })?;
        let mut builder = Self::builder(model, dims);
        builder.http = HttpSettings::from_env("MNEMIX_EMBED");
        builder.build()
    }

    async fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let body = EmbeddingRequest {
            model: &self.settings.model,
            input: texts,
            encoding_format: "float",
            dimensions: self.settings.send_dimensions.then_some(self.settings.dims),
        };
        let parsed: EmbeddingResponse = self.endpoint.post(&body).await?;
        self.vectors(parsed, texts.len())
    }

    fn vectors(&self, response: EmbeddingResponse, expected: usize) -> Result<Vec<Vec<f32>>> {
        let bad = |what: String| MemoryError::model(COMPONENT, what);
        if response.data.len() != expected {
            return Err(bad(format!(
                "{} vectors for {expected} texts",
                response.data.len()
            )));
        }
        let mut slots: Vec<Option<Vec<f32>>> = vec![None; expected];
        for item in response.data {
            if item.embedding.len() != self.settings.dims {
                return Err(bad(format!(
                    "a vector of {} components from {}, configured for {}",
                    item.embedding.len(),
                    self.settings.model,
                    self.settings.dims
                )));
            }
            if item.embedding.iter().any(|x| !x.is_finite())
                || item.embedding.iter().all(|&x| x == 0.0)
            {
                return Err(bad(format!(
                    "a non-finite or zero vector at index {}",
                    item.index
                )));
            }
            match slots.get_mut(item.index) {
                Some(slot @ None) => *slot = Some(item.embedding),
                _ => {
                    return Err(bad(format!(
                        "index {} is out of range or repeated",
                        item.index
                    )))
                }
            }
        }
        Ok(slots.into_iter().flatten().collect())
    }
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    fn model_id(&self) -> &str {
        &self.settings.model
    }

    fn dims(&self) -> usize {
        self.settings.dims
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.settings.batch_size) {
            vectors.extend(self.embed_batch(batch).await?);
        }
        Ok(vectors)
    }
}
