//! What every OpenAI-compatible client here shares: where the API is, the key, and how a
//! request is retried.

use std::fmt;
use std::time::Duration;

use mnemix_core::{MemoryError, Result};
use reqwest::header::RETRY_AFTER;
use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The longest wait a `Retry-After` header can impose.
const MAX_RETRY_AFTER: Duration = Duration::from_mins(1);

/// The settings of an OpenAI-compatible API (each client's builder holds one).
#[derive(Clone)]
pub(crate) struct HttpSettings {
    pub(crate) base_url: String,
    pub(crate) api_key: Option<String>,
    pub(crate) max_retries: u32,
    pub(crate) initial_backoff: Duration,
    pub(crate) max_backoff: Duration,
    pub(crate) timeout: Duration,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            base_url: "https://api.openai.com/v1".to_owned(),
            api_key: None,
            max_retries: 5,
            initial_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(10),
            timeout: Duration::from_mins(1),
        }
    }
}

impl fmt::Debug for HttpSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpSettings")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "***"))
            .field("max_retries", &self.max_retries)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl HttpSettings {
    /// The defaults, with `{PREFIX}_BASE_URL` (or `OPENAI_BASE_URL`) and `{PREFIX}_API_KEY`
    /// (or `OPENAI_API_KEY`) from the environment.
    pub(crate) fn from_env(prefix: &str) -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut settings = Self::default();
        if let Some(url) = var(&format!("{prefix}_BASE_URL")).or_else(|| var("OPENAI_BASE_URL")) {
            settings.base_url = url;
        }
        settings.api_key = var(&format!("{prefix}_API_KEY")).or_else(|| var("OPENAI_API_KEY"));
        settings
    }

    /// Checks the settings and makes the client for `{base_url}/{path}`; errors name `who`.
    pub(crate) fn endpoint(
        &self,
        who: &str,
        component: &'static str,
        path: &str,
    ) -> Result<Endpoint> {
        let invalid = |what: String| MemoryError::invalid(format!("{who}: {what}"));
        if self.initial_backoff > self.max_backoff {
            return Err(invalid("the initial backoff exceeds the maximum".into()));
        }
        let base = self.base_url.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(invalid(format!(
                "base_url {base:?} must start with http:// or https://"
            )));
        }
        let client = reqwest::Client::builder()
            .timeout(self.timeout)
            .build()
            .map_err(|e| MemoryError::model(component, e))?;
        Ok(Endpoint {
            client,
            url: format!("{base}/{path}"),
            component,
            settings: self.clone(),
        })
    }
}

/// The builder methods of [`HttpSettings`], written once for every client's builder (each has
/// a field `http`).
macro_rules! http_settings_methods {
    () => {
        /// The API root, up to and without the endpoint's path (default
        /// `https://api.openai.com/v1`).
        #[must_use]
        pub fn base_url(mut self, url: impl Into<String>) -> Self {
            self.http.base_url = url.into();
            self
        }

        /// Sent as `Authorization: Bearer …`; none by default (local servers need none). An
        /// empty key counts as none.
        #[must_use]
        pub fn api_key(mut self, key: impl Into<String>) -> Self {
            self.http.api_key = Some(key.into()).filter(|k| !k.is_empty());
            self
        }

        /// Retries of a request after a 429, 5xx, timeout or refused connection (default 5).
        #[must_use]
        pub fn max_retries(mut self, retries: u32) -> Self {
            self.http.max_retries = retries;
            self
        }

        /// The first backoff and its cap (default 250 ms, 10 s).
        #[must_use]
        pub fn backoff(mut self, initial: std::time::Duration, max: std::time::Duration) -> Self {
            self.http.initial_backoff = initial;
            self.http.max_backoff = max;
            self
        }

        /// The time limit of one request (default 60 s).
        #[must_use]
        pub fn timeout(mut self, timeout: std::time::Duration) -> Self {
            self.http.timeout = timeout;
            self
        }
    };
}
pub(crate) use http_settings_methods;

/// One endpoint of an OpenAI-compatible API, with its retries.
#[derive(Clone)]
pub(crate) struct Endpoint {
    client: reqwest::Client,
    pub(crate) url: String,
    component: &'static str,
    settings: HttpSettings,
}

impl Endpoint {
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

    /// POSTs `body` as JSON and reads the answer as `R`.
    ///
    /// A 429, a 5xx, a timeout or a refused connection is retried up to `max_retries` times,
    /// waiting `Retry-After` when the server sends one (at most a minute), else the backoff.
    /// Any other status or a body that is not an `R` is [`MemoryError::Model`], not retried.
    pub(crate) async fn post<B: Serialize + ?Sized, R: DeserializeOwned>(
        &self,
        body: &B,
    ) -> Result<R> {
        let mut attempt = 0;
        loop {
            let mut request = self.client.post(&self.url).json(body);
            if let Some(key) = &self.settings.api_key {
                request = request.bearer_auth(key);
            }
            let wait = match request.send().await {
                Ok(response) if response.status().is_success() => {
                    return response.json().await.map_err(|e| {
                        MemoryError::model(self.component, format!("malformed response: {e}"))
                    });
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
                        self.component,
                        format!("{} answered {status}: {excerpt}", self.url),
                    ));
                }
                Err(error)
                    if (error.is_timeout() || error.is_connect())
                        && attempt < self.settings.max_retries =>
                {
                    self.backoff(attempt)
                }
                Err(error) => return Err(MemoryError::model(self.component, error)),
            };
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
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
