//! From a URL to a ready [`Store`]: the backend whose scheme the URL has, among those compiled
//! in and those [`register`]ed at run time.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use mnemix_core::descriptor::{scheme_of, Descriptor, OpenRequest};
use mnemix_core::{Clock, MemoryError, Result, RetryPolicy, Store};

use crate::{compiled_in, FEATURES};

/// The environment variable [`from_env`] reads.
pub const URL_ENV: &str = "MNEMIX_URL";

/// The store [`from_env`] opens when [`URL_ENV`] is unset: a SQLite file in the current folder.
#[cfg(not(feature = "libsql"))]
pub const DEFAULT_URL: &str = "sqlite://./.mnemix/memory.db";

/// The store [`from_env`] opens when [`URL_ENV`] is unset, in a libSQL build: a libSQL file.
#[cfg(feature = "libsql")]
pub const DEFAULT_URL: &str = "file:./.mnemix/mnemix-libsql.db";

/// Backends registered at run time, after those compiled in.
static REGISTERED: RwLock<Vec<Descriptor>> = RwLock::new(Vec::new());

/// Lets [`open`] (and everything that opens by URL, the `mnemix` command's library included)
/// open `descriptor`'s schemes: how a third party's adapter is opened by URL like ours.
/// Registering the same backend again changes nothing; a scheme another backend opens, no
/// scheme at all, or one that is not a URL scheme (a letter, then letters, digits, `+`, `-`,
/// `.`) is `InvalidInput`.
///
/// ```
/// use mnemix::descriptor::{BoxOpen, Descriptor, OpenRequest};
/// use mnemix::{InMemoryBackend, MemoryBackend};
/// use std::sync::Arc;
///
/// fn open(request: OpenRequest) -> BoxOpen {
///     Box::pin(async move {
///         Ok(Arc::new(InMemoryBackend::with_clock(request.clock().clone())) as Arc<dyn MemoryBackend>)
///     })
/// }
/// const SCRATCH: Descriptor = Descriptor::new("scratch", &["scratch"], "scratch://", open);
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// mnemix::register(SCRATCH)?;
/// let store = mnemix::open("scratch://").await?;
/// assert_eq!(store.backend_name(), "memory");
/// assert!(mnemix::register(Descriptor::new("other", &["sqlite"], "sqlite://", open)).is_err());
/// assert!(mnemix::register(Descriptor::new("none", &[], "", open)).is_err());
/// assert!(mnemix::register(Descriptor::new("bad", &["bad scheme"], "", open)).is_err());
/// assert!(mnemix::register(Descriptor::new("blank", &[""], "", open)).is_err());
/// # Ok::<(), mnemix::MemoryError>(())
/// # }).unwrap();
/// ```
pub fn register(descriptor: Descriptor) -> Result<()> {
    if let Some(bad) = descriptor.schemes().iter().find(|s| !is_url_scheme(s)) {
        return Err(MemoryError::invalid(format!(
            "cannot register the {} backend: {bad:?} is not a URL scheme",
            descriptor.name()
        )));
    }
    if descriptor.schemes().is_empty() {
        return Err(MemoryError::invalid(format!(
            "cannot register the {} backend: it names no URL scheme",
            descriptor.name()
        )));
    }
    let mut registered = REGISTERED.write().unwrap_or_else(PoisonError::into_inner);
    let known = with_compiled_in(&registered);
    if known
        .iter()
        .any(|d| d.name() == descriptor.name() && d.schemes() == descriptor.schemes())
    {
        return Ok(());
    }
    if let Some((taken, by)) = descriptor.schemes().iter().find_map(|scheme| {
        known
            .iter()
            .find(|d| d.schemes().contains(scheme))
            .map(|d| (*scheme, d.name()))
    }) {
        return Err(MemoryError::invalid(format!(
            "cannot register the {} backend: the {by} backend opens {taken}:// already",
            descriptor.name()
        )));
    }
    registered.push(descriptor);
    Ok(())
}

/// RFC 3986's `scheme`: a letter, then letters, digits, `+`, `-` or `.`.
fn is_url_scheme(scheme: &str) -> bool {
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Every backend this process can open: those compiled in, then those registered.
pub fn descriptors() -> Vec<Descriptor> {
    with_compiled_in(&REGISTERED.read().unwrap_or_else(PoisonError::into_inner))
}

/// The backends compiled in, then `registered` (read under the lock its caller holds).
fn with_compiled_in(registered: &[Descriptor]) -> Vec<Descriptor> {
    compiled_in()
        .into_iter()
        .chain(registered.iter().copied())
        .collect()
}

/// The backend that opens `url`; one no backend here opens is `InvalidInput` saying which
/// feature adds it, or which URLs this build opens.
pub fn descriptor_for(url: &str) -> Result<Descriptor> {
    let known = descriptors();
    if let Some(descriptor) = known.iter().find(|d| d.opens(url)) {
        return Ok(*descriptor);
    }
    let scheme = scheme_of(url);
    let forms = known
        .iter()
        .map(Descriptor::url_forms)
        .collect::<Vec<_>>()
        .join(", ");
    if let Some((feature, _, _)) = FEATURES
        .iter()
        .find(|(_, schemes, _)| schemes.contains(&scheme))
    {
        return Err(MemoryError::invalid(format!(
            "{} needs the {feature} backend, which this build leaves out: enable the \
             `{feature}` feature of mnemix (this build opens {forms})",
            redacted(url)
        )));
    }
    let more: Vec<String> = FEATURES
        .iter()
        .filter(|(feature, ..)| !known.iter().any(|d| d.name() == *feature))
        .map(|(feature, _, adds)| format!("the `{feature}` feature adds {adds}"))
        .collect();
    Err(MemoryError::invalid(format!(
        "unknown URL scheme {scheme:?} in {:?}: this build opens {forms}{}",
        redacted(url),
        if more.is_empty() {
            String::new()
        } else {
            format!("; {}", more.join("; "))
        }
    )))
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
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// What the backend is given: the URL and what a URL cannot say.
    request: OpenRequest,
    /// What the front layer does with the backend's retryable failures.
    retry: RetryPolicy,
}

impl OpenOptions {
    /// Options for `url`, on the system clock with the default [`RetryPolicy`].
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            request: OpenRequest::new(url),
            retry: RetryPolicy::default(),
        }
    }

    /// Whether an embedded database file (SQLite, libSQL) that does not exist is created, with
    /// its folders (the default). With `false` it is `NotFound` naming the path and nothing is
    /// created, so a mistyped path fails instead of opening an empty store. Server backends
    /// are unaffected.
    #[must_use]
    pub fn create_if_missing(mut self, create: bool) -> Self {
        self.request = self.request.with_create_if_missing(create);
        self
    }

    /// How long a call to a server backend (PostgreSQL, Redis) waits on a silent server,
    /// connecting or for an answer, before it fails `Unavailable` and the retry policy applies
    /// (default [`DEFAULT_SERVER_TIMEOUT`](mnemix_core::DEFAULT_SERVER_TIMEOUT), 30 s; `None`
    /// waits as long as the connection stays open). Embedded backends are unaffected.
    #[must_use]
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.request = self.request.with_timeout(timeout);
        self
    }

    /// What decides "now" for timestamps and expiry (tests pass a `ManualClock`).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.request = self.request.with_clock(clock);
        self
    }

    /// How retryable failures of idempotent operations are retried.
    #[must_use]
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The auth token of a remote libSQL database (default: the `MNEMIX_LIBSQL_AUTH_TOKEN`
    /// environment variable).
    #[must_use]
    pub fn auth_token(mut self, token: impl Into<String>) -> Self {
        self.request = self.request.with_auth_token(Some(token.into()));
        self
    }

    /// The backend that opens the URL (see [`descriptor_for`]).
    pub fn descriptor(&self) -> Result<Descriptor> {
        descriptor_for(self.request.url())
    }

    /// Opens the store (connecting, and migrating its schema where it has one).
    pub async fn open(self) -> Result<Store> {
        let backend = self.descriptor()?.open(self.request).await?;
        Ok(Store::with_retry(backend, self.retry))
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
/// Adapters [`register`]ed at run time open their own schemes. A scheme whose backend this
/// build leaves out, or an unknown one, is `InvalidInput` saying which feature to enable; an
/// unreachable server is `Unavailable`.
pub async fn open(url: &str) -> Result<Store> {
    OpenOptions::new(url).open().await
}

/// Opens the store named by `MNEMIX_URL`, or [`DEFAULT_URL`] when it is unset: one
/// program, its backend picked per deployment.
pub async fn from_env() -> Result<Store> {
    let url = std::env::var(URL_ENV).unwrap_or_else(|_| DEFAULT_URL.to_owned());
    open(&url).await
}
