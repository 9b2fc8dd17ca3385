//! What every OpenAI-compatible client here shares: where the API is, the key, and how a
//! request is retried.

use std::fmt;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
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

/// One try's failure: worth another try (after what the server asked for, if it did), or final.
enum Failure {
    Retry {
        after: Option<Duration>,
        error: MemoryError,
    },
    Final(MemoryError),
}

impl Failure {
    fn is_retry(&self) -> bool {
        matches!(self, Self::Retry { .. })
    }

    fn into_error(self) -> MemoryError {
        match self {
            Self::Retry { error, .. } | Self::Final(error) => error,
        }
    }
}

impl Endpoint {
    /// POSTs `body` as JSON and reads the answer as `R`.
    ///
    /// A 429, a 5xx, a timeout or a refused connection is retried up to `max_retries` times by
    /// backon (as the front layer retries): exponential backoff from the initial one, capped,
    /// with jitter so retrying clients spread out; a `Retry-After` the server sends (at most a
    /// minute) replaces the backoff's wait. Any other status or a body that is not an `R` is
    /// [`MemoryError::Model`], not retried; so is the last retryable failure.
    pub(crate) async fn post<B: Serialize + ?Sized, R: DeserializeOwned>(
        &self,
        body: &B,
    ) -> Result<R> {
        let backoff = ExponentialBuilder::default()
            .with_min_delay(self.settings.initial_backoff)
            .with_max_delay(self.settings.max_backoff)
            .with_max_times(self.settings.max_retries as usize)
            .with_jitter();
        (|| self.try_post(body))
            .retry(backoff)
            .sleep(tokio::time::sleep)
            .when(Failure::is_retry)
            // `None` means the tries are spent: a Retry-After never adds one.
            .adjust(|failure, wait| match (failure, wait) {
                (
                    Failure::Retry {
                        after: Some(after), ..
                    },
                    Some(_),
                ) => Some(*after),
                _ => wait,
            })
            .await
            .map_err(Failure::into_error)
    }

    async fn try_post<B: Serialize + ?Sized, R: DeserializeOwned>(
        &self,
        body: &B,
    ) -> std::result::Result<R, Failure> {
        let mut request = self.client.post(&self.url).json(body);
        if let Some(key) = &self.settings.api_key {
            request = request.bearer_auth(key);
        }
        match request.send().await {
            Ok(response) if response.status().is_success() => response.json().await.map_err(|e| {
                Failure::Final(MemoryError::model(
                    self.component,
                    format!("malformed response: {e}"),
                ))
            }),
            Ok(response) => {
                let status = response.status();
                let after = retry_after(&response);
                let text = response.text().await.unwrap_or_default();
                let excerpt: String = text.chars().take(300).collect();
                let error = MemoryError::model(
                    self.component,
                    format!("{} answered {status}: {excerpt}", self.url),
                );
                Err(if retryable(status) {
                    Failure::Retry { after, error }
                } else {
                    Failure::Final(error)
                })
            }
            Err(error) if error.is_timeout() || error.is_connect() => Err(Failure::Retry {
                after: None,
                error: MemoryError::model(self.component, error),
            }),
            Err(error) => Err(Failure::Final(MemoryError::model(self.component, error))),
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
