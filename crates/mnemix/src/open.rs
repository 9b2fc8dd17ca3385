//! From a URL to a ready [`Store`], by scheme.

use std::sync::Arc;
use std::time::Duration;

use mnemix_core::{Clock, MemoryError, Result, RetryPolicy, Store, SystemClock};

/// The environment variable [`from_env`] reads.
pub const URL_ENV: &str = "MNEMIX_URL";

/// The environment variable a remote libSQL URL takes its auth token from, unless
/// [`OpenOptions::auth_token`] gives one.
pub const LIBSQL_TOKEN_ENV: &str = "MNEMIX_LIBSQL_AUTH_TOKEN";

/// The store [`from_env`] opens when [`URL_ENV`] is unset: a SQLite file in the current folder.
#[cfg(not(feature = "libsql"))]
pub const DEFAULT_URL: &str = "sqlite://./.mnemix/memory.db";

/// The store [`from_env`] opens when [`URL_ENV`] is unset, in a libSQL build: a libSQL file.
#[cfg(feature = "libsql")]
pub const DEFAULT_URL: &str = "file:./.mnemix/mnemix-libsql.db";

/// Which backend a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scheme {
    /// `memory://`: the in-memory reference backend (nothing survives the process).
    Memory,
    /// `sqlite://FILE`, `sqlite::memory:`.
    Sqlite,
    /// `postgres://`, `postgresql://` (`?schema=NAME` for a schema other than `public`).
    Postgres,
    /// `redis://`, `rediss://` (`?prefix=NAME` for a key prefix other than `agent-memory`).
    Redis,
    /// `redis+cluster://host:port,host:port`.
    RedisCluster,
    /// `file:PATH`, `libsql::memory:`, `libsql://`, `http(s)://`.
    Libsql,
}

impl Scheme {
    /// The scheme of `url`; an unknown one is `InvalidInput` naming the known ones.
    pub fn of(url: &str) -> Result<Self> {
        let scheme = url.split_once(':').map_or(url, |(s, _)| s);
        Ok(match scheme {
            "memory" => Self::Memory,
            "sqlite" => Self::Sqlite,
            "postgres" | "postgresql" => Self::Postgres,
            "redis" | "rediss" => Self::Redis,
            "redis+cluster" => Self::RedisCluster,
            "libsql" | "file" | "http" | "https" => Self::Libsql,
            other => {
                let (here, elsewhere): (Vec<Self>, Vec<Self>) =
                    Self::ALL.into_iter().partition(|s| s.is_compiled_in());
                let forms = |schemes: &[Self]| {
                    schemes
                        .iter()
                        .map(|s| s.url_forms())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let more: Vec<String> = elsewhere
                    .iter()
                    .map(|s| {
                        format!(
                            "the `{}` feature adds {}",
                            s.feature().unwrap_or_default(),
                            s.url_forms()
                        )
                    })
                    .collect();
                return Err(MemoryError::invalid(format!(
                    "unknown URL scheme {other:?} in {:?}: this build opens {}{}",
                    redacted(url),
                    forms(&here),
                    if more.is_empty() {
                        String::new()
                    } else {
                        format!("; {}", more.join("; "))
                    }
                )));
            }
        })
    }

    /// The URL forms of the backend, for messages.
    fn url_forms(self) -> &'static str {
        match self {
            Self::Memory => "memory://",
            Self::Sqlite => "sqlite://FILE",
            Self::Postgres => "postgres://",
            Self::Redis => "redis://, rediss://",
            Self::RedisCluster => "redis+cluster://",
            Self::Libsql => "file:FILE, libsql://",
        }
    }

    /// The backend's name (`"sqlite"`, `"redis-cluster"`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
            Self::Redis => "redis",
            Self::RedisCluster => "redis-cluster",
            Self::Libsql => "libsql",
        }
    }

    /// The Cargo feature of `mnemix` that brings this backend in (`None`: always there).
    pub fn feature(self) -> Option<&'static str> {
        match self {
            Self::Memory => None,
            Self::Sqlite => Some("sqlite"),
            Self::Postgres => Some("postgres"),
            Self::Redis | Self::RedisCluster => Some("redis"),
            Self::Libsql => Some("libsql"),
        }
    }

    /// Whether this build has the backend.
    pub fn is_compiled_in(self) -> bool {
        match self {
            Self::Memory => true,
            Self::Sqlite => cfg!(feature = "sqlite"),
            Self::Postgres => cfg!(feature = "postgres"),
            Self::Redis | Self::RedisCluster => cfg!(feature = "redis"),
            Self::Libsql => cfg!(feature = "libsql"),
        }
    }

    /// Every scheme, compiled in or not.
    const ALL: [Self; 6] = [
        Self::Memory,
        Self::Sqlite,
        Self::Postgres,
        Self::Redis,
        Self::RedisCluster,
        Self::Libsql,
    ];

    /// Every scheme this build can open.
    pub fn compiled_in() -> Vec<Self> {
        Self::ALL
            .into_iter()
            .filter(|s| s.is_compiled_in())
            .collect()
    }
}

/// `url` with any password replaced by `***`, for messages and logs.
pub use mnemix_core::url::redacted;

/// How to open a store: the URL, and what a URL cannot say.
///
/// ```
/// use std::sync::Arc;
/// use mnemix::{ManualClock, OpenOptions, RetryPolicy, Timestamp};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let clock = ManualClock::new(Timestamp::from_millis(1_700_000_000_000));
/// let store = OpenOptions::new("sqlite::memory:")
///     .clock(Arc::new(clock))              // "now" for expiry and timestamps
///     .retry(RetryPolicy::never())         // fail at once instead of retrying
///     .open()
///     .await?;
/// assert_eq!(store.backend_name(), "sqlite");
/// # Ok::<(), mnemix::MemoryError>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct OpenOptions {
    url: String,
    clock: Arc<dyn Clock>,
    retry: RetryPolicy,
    auth_token: Option<String>,
    create_if_missing: bool,
    timeout: Option<Duration>,
}

impl std::fmt::Debug for OpenOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenOptions")
            .field("url", &redacted(&self.url))
            .field("retry", &self.retry)
            .field("auth_token", &self.auth_token.as_ref().map(|_| "***"))
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl OpenOptions {
    /// Options for `url`, on the system clock with the default [`RetryPolicy`].
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            clock: Arc::new(SystemClock),
            retry: RetryPolicy::default(),
            auth_token: None,
            create_if_missing: true,
            timeout: Some(mnemix_core::DEFAULT_SERVER_TIMEOUT),
        }
    }

    /// Whether an embedded database file (SQLite, libSQL) that does not exist is created, with
    /// its folders (the default). With `false` it is `NotFound` naming the path and nothing is
    /// created, so a mistyped path fails instead of opening an empty store. Server backends
    /// are unaffected.
    #[must_use]
    pub fn create_if_missing(mut self, create: bool) -> Self {
        self.create_if_missing = create;
        self
    }

    /// How long a call to a server backend (PostgreSQL, Redis) waits on a silent server,
    /// connecting or for an answer, before it fails `Unavailable` and the retry policy applies
    /// (default [`DEFAULT_SERVER_TIMEOUT`](mnemix_core::DEFAULT_SERVER_TIMEOUT), 30 s; `None`
    /// waits as long as the connection stays open). Embedded backends are unaffected.
    #[must_use]
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// What decides "now" for timestamps and expiry (tests pass a `ManualClock`).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// How retryable failures of idempotent operations are retried.
    #[must_use]
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The auth token of a remote libSQL database (default: [`LIBSQL_TOKEN_ENV`]).
    #[must_use]
    pub fn auth_token(mut self, token: impl Into<String>) -> Self {
        self.auth_token = Some(token.into());
        self
    }

    /// The scheme of the URL.
    pub fn scheme(&self) -> Result<Scheme> {
        Scheme::of(&self.url)
    }

    /// Opens the store (connecting, and migrating its schema where it has one).
    pub async fn open(self) -> Result<Store> {
        let backend = self.backend(self.scheme()?).await?;
        Ok(Store::with_retry(backend, self.retry))
    }

    #[allow(clippy::unused_async)] // awaits only with a server backend compiled in
    async fn backend(&self, scheme: Scheme) -> Result<Arc<dyn mnemix_core::MemoryBackend>> {
        let (url, clock) = (self.url.as_str(), Arc::clone(&self.clock));
        Ok(match scheme {
            Scheme::Memory => Arc::new(mnemix_core::InMemoryBackend::with_clock(clock)),
            #[cfg(feature = "sqlite")]
            Scheme::Sqlite => Arc::new(
                mnemix_sqlite::SqliteStore::builder()
                    .url(url)
                    .create_if_missing(self.create_if_missing)
                    .clock(clock)
                    .open()
                    .await?,
            ),
            #[cfg(feature = "postgres")]
            Scheme::Postgres => Arc::new(
                mnemix_postgres::PostgresStore::builder()
                    .url(url)
                    .timeout(self.timeout)
                    .clock(clock)
                    .open()
                    .await?,
            ),
            #[cfg(feature = "redis")]
            Scheme::Redis | Scheme::RedisCluster => Arc::new(
                mnemix_redis::RedisStore::builder()
                    .url(url)
                    .timeout(self.timeout)
                    .clock(clock)
                    .open()
                    .await?,
            ),
            #[cfg(feature = "libsql")]
            Scheme::Libsql => {
                let token = self
                    .auth_token
                    .clone()
                    .or_else(|| std::env::var(LIBSQL_TOKEN_ENV).ok())
                    .unwrap_or_default();
                Arc::new(
                    mnemix_libsql::LibsqlStore::builder()
                        .url(url)
                        .create_if_missing(self.create_if_missing)
                        .auth_token(token)
                        .clock(clock)
                        .open()
                        .await?,
                )
            }
            #[allow(unreachable_patterns)] // every scheme compiled in
            _ => {
                return Err(MemoryError::invalid(format!(
                    "{} needs the {} backend, which this build leaves out: enable the `{}` \
                     feature of mnemix (this build has: {})",
                    redacted(url),
                    scheme.name(),
                    scheme.feature().unwrap_or_default(),
                    Scheme::compiled_in()
                        .iter()
                        .map(|s| s.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                )))
            }
        })
    }
}

/// Opens the store `url` names, on the system clock with the default retry policy.
///
/// | URL | backend | feature |
/// |---|---|---|
/// | `sqlite://FILE`, `sqlite::memory:` | SQLite (embedded) | `sqlite` (default) |
/// | `postgres://user@host/db?schema=NAME` | PostgreSQL (+ pgvector) | `postgres` |
/// | `redis://host:6379?prefix=NAME&replicas=N`, `rediss://…` | Redis | `redis`, `redis-tls` |
/// | `redis+cluster://host:port,host:port` | Redis Cluster | `redis` |
/// | `file:PATH`, `libsql::memory:`, `libsql://…` | libSQL | `libsql`, `libsql-remote` |
/// | `memory://` | in-memory reference | always |
///
/// A scheme whose backend this build leaves out, or an unknown one, is `InvalidInput` saying
/// which feature to enable; an unreachable server is `Unavailable`.
pub async fn open(url: &str) -> Result<Store> {
    OpenOptions::new(url).open().await
}

/// Opens the store named by `MNEMIX_URL`, or [`DEFAULT_URL`] when it is unset: one
/// program, its backend picked per deployment.
pub async fn from_env() -> Result<Store> {
    let url = std::env::var(URL_ENV).unwrap_or_else(|_| DEFAULT_URL.to_owned());
    open(&url).await
}
