//! An embedder for any server that speaks the OpenAI embeddings API.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use memory_core::embed::Embedder;
use memory_core::{MemoryError, Result};
use reqwest::header::RETRY_AFTER;
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};

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
    client: reqwest::Client,
    endpoint: String,
    settings: OpenAiEmbedderBuilder,
}

impl fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("endpoint", &self.endpoint)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Builds an [`OpenAiEmbedder`].
#[derive(Clone)]
pub struct OpenAiEmbedderBuilder {
    base_url: String,
    api_key: Option<String>,
    model: String,
    dims: usize,
    send_dimensions: bool,
    batch_size: usize,
    max_retries: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
    timeout: Duration,
}

impl fmt::Debug for OpenAiEmbedderBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiEmbedderBuilder")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "***"))
            .field("model", &self.model)
            .field("dims", &self.dims)
            .field("batch_size", &self.batch_size)
            .field("max_retries", &self.max_retries)
            .finish_non_exhaustive()
    }
}

impl OpenAiEmbedderBuilder {
    /// The API root, up to and without `/embeddings` (default `https://api.openai.com/v1`).
    #[must_use]
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// Sent as `Authorization: Bearer …`; none by default (local servers need none). An
    /// empty key counts as none.
    #[must_use]
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into()).filter(|k| !k.is_empty());
        self
    }

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

    /// Retries of a request after a 429, 5xx, timeout or refused connection (default 5).
    #[must_use]
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// The first backoff and its cap (default 250 ms, 10 s).
    #[must_use]
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max;
        self
    }

    /// The time limit of one request (default 60 s).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
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
        if self.initial_backoff > self.max_backoff {
            return Err(invalid("the initial backoff exceeds the maximum"));
        }
        let base = self.base_url.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(invalid(&format!(
                "base_url {base:?} must start with http:// or https://"
            )));
        }
        let client = reqwest::Client::builder()
            .timeout(self.timeout)
            .build()
            .map_err(|e| MemoryError::model(COMPONENT, e))?;
        Ok(OpenAiEmbedder {
            client,
            endpoint: format!("{base}/embeddings"),
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

/// The longest wait a `Retry-After` header can impose.
const MAX_RETRY_AFTER: Duration = Duration::from_mins(1);

impl OpenAiEmbedder {
    /// A builder for `model`, whose vectors have `dims` components.
    pub fn builder(model: impl Into<String>, dims: usize) -> OpenAiEmbedderBuilder {
        OpenAiEmbedderBuilder {
            base_url: "https://api.openai.com/v1".to_owned(),
            api_key: None,
            model: model.into(),
            dims,
            send_dimensions: false,
            batch_size: 128,
            max_retries: 5,
            initial_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(10),
            timeout: Duration::from_mins(1),
        }
    }

    /// From the environment: `MEMORY_EMBED_MODEL` and `MEMORY_EMBED_DIMS` (required),
    /// `MEMORY_EMBED_BASE_URL` (or `OPENAI_BASE_URL`), `MEMORY_EMBED_API_KEY` (or
    /// `OPENAI_API_KEY`).
    pub fn from_env() -> Result<Self> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let model = var("MEMORY_EMBED_MODEL")
            .ok_or_else(|| MemoryError::invalid("openai embedder: MEMORY_EMBED_MODEL is unset"))?;
        let dims = var("MEMORY_EMBED_DIMS")
            .ok_or_else(|| MemoryError::invalid("openai embedder: MEMORY_EMBED_DIMS is unset"))?;
        let dims = dims.trim().parse().map_err(|_| {
            MemoryError::invalid(format!(
                "openai embedder: MEMORY_EMBED_DIMS {dims:?} is not a number"
            ))
        })?;
        let mut builder = Self::builder(model, dims);
        if let Some(url) = var("MEMORY_EMBED_BASE_URL").or_else(|| var("OPENAI_BASE_URL")) {
            builder = builder.base_url(url);
        }
        if let Some(key) = var("MEMORY_EMBED_API_KEY").or_else(|| var("OPENAI_API_KEY")) {
            builder = builder.api_key(key);
        }
        builder.build()
    }

    /// The wait before retry `attempt` (0-based): doubling from the initial backoff, capped,
    /// with up to half of it taken off at random so retrying clients spread out.
    fn backoff(&self, attempt: u32) -> Duration {
        let full = self
            .settings
            .initial_backoff
            .saturating_mul(2u32.saturating_pow(attempt))
            .min(self.settings.max_backoff);
        full.mul_f64(1.0 - fastrand::f64() / 2.0)
    }

    async fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let body = EmbeddingRequest {
            model: &self.settings.model,
            input: texts,
            encoding_format: "float",
            dimensions: self.settings.send_dimensions.then_some(self.settings.dims),
        };
        let mut attempt = 0;
        loop {
            let mut request = self.client.post(&self.endpoint).json(&body);
            if let Some(key) = &self.settings.api_key {
                request = request.bearer_auth(key);
            }
            let wait = match request.send().await {
                Ok(response) if response.status().is_success() => {
                    let parsed: EmbeddingResponse = response.json().await.map_err(|e| {
                        MemoryError::model(COMPONENT, format!("malformed response: {e}"))
                    })?;
                    return self.vectors(parsed, texts.len());
                }
                Ok(response)
                    if retryable(response.status()) && attempt < self.settings.max_retries =>
                {
                    retry_after(&response).unwrap_or_else(|| self.backoff(attempt))
                }
                Ok(response) => {
                    let status = response.status();
                    let text = response.text().await.unwrap_or_default();
                    let excerpt: String = text.chars().take(300).collect();
                    return Err(MemoryError::model(
                        COMPONENT,
                        format!("{} answered {status}: {excerpt}", self.endpoint),
                    ));
                }
                Err(error)
                    if (error.is_timeout() || error.is_connect())
                        && attempt < self.settings.max_retries =>
                {
                    self.backoff(attempt)
                }
                Err(error) => return Err(MemoryError::model(COMPONENT, error)),
            };
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
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

fn retryable(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
}

/// `Retry-After` in seconds (the HTTP-date form is rare for APIs and falls back to backoff).
fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    let seconds: f64 = response
        .headers()
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (seconds.is_finite() && seconds >= 0.0)
        .then(|| Duration::from_secs_f64(seconds).min(MAX_RETRY_AFTER))
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
