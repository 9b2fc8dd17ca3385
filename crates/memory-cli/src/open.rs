//! From a `--url` to a backend, by scheme.

use std::sync::Arc;

use anyhow::{bail, Context as _, Result};
use memory_core::{Clock, InMemoryBackend, MemoryBackend, SystemClock};

/// The default store: a SQLite file in the current folder.
#[cfg(not(feature = "libsql"))]
pub const DEFAULT_URL: &str = "sqlite://./.agent-memory/memory.db";

/// The default store of a libSQL build (which has no sqlx SQLite): a libSQL file.
#[cfg(feature = "libsql")]
pub const DEFAULT_URL: &str = "file:./.agent-memory/memory-libsql.db";

/// Which backend a URL names, before opening it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Memory,
    Sqlite,
    Postgres,
    Redis,
    RedisCluster,
    Libsql,
}

impl Scheme {
    pub fn of(url: &str) -> Result<Self> {
        let scheme = url.split_once(':').map_or(url, |(s, _)| s);
        Ok(match scheme {
            "memory" => Self::Memory,
            "sqlite" => Self::Sqlite,
            "postgres" | "postgresql" => Self::Postgres,
            "redis" | "rediss" => Self::Redis,
            "redis+cluster" => Self::RedisCluster,
            "libsql" | "file" => Self::Libsql,
            other => bail!(
                "unknown URL scheme {other:?} in {url:?}; use memory://, sqlite://, postgres://, \
                 redis://, redis+cluster:// or libsql://"
            ),
        })
    }

    /// The backend's name, as the conformance matrix prints it.
    pub fn backend_name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
            Self::Redis => "redis",
            Self::RedisCluster => "redis-cluster",
            Self::Libsql => "libsql",
        }
    }
}

/// Opens the backend a URL names, with `clock` deciding "now".
pub async fn open_with_clock(url: &str, clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>> {
    match Scheme::of(url)? {
        Scheme::Memory => Ok(Arc::new(InMemoryBackend::with_clock(clock))),
        #[cfg(feature = "sqlite")]
        Scheme::Sqlite => {
            let store = memory_sqlite::SqliteStore::builder()
                .url(url)
                .clock(clock)
                .open()
                .await
                .with_context(|| format!("cannot open {url}"))?;
            Ok(Arc::new(store))
        }
        #[cfg(feature = "postgres")]
        Scheme::Postgres => {
            let store = memory_postgres::PostgresStore::builder()
                .url(url)
                .clock(clock)
                .open()
                .await
                .with_context(|| format!("cannot open {}", redacted(url)))?;
            Ok(Arc::new(store))
        }
        #[cfg(feature = "redis")]
        Scheme::Redis | Scheme::RedisCluster => {
            let store = memory_redis::RedisStore::builder()
                .url(url)
                .clock(clock)
                .open()
                .await
                .with_context(|| format!("cannot open {}", redacted(url)))?;
            Ok(Arc::new(store))
        }
        #[cfg(feature = "libsql")]
        Scheme::Libsql => Ok(Arc::new(open_libsql(url, clock).await?)),
        scheme => bail!(
            "the {} backend is not in this build of agent-memory (URL {url:?}); \
             this build has: {}",
            scheme.backend_name(),
            compiled_in().join(", ")
        ),
    }
}

/// Opens a libSQL URL; a remote one takes its token from `AGENT_MEMORY_LIBSQL_AUTH_TOKEN`.
#[cfg(feature = "libsql")]
pub async fn open_libsql(url: &str, clock: Arc<dyn Clock>) -> Result<memory_libsql::LibsqlStore> {
    memory_libsql::LibsqlStore::builder()
        .url(url)
        .auth_token(std::env::var("AGENT_MEMORY_LIBSQL_AUTH_TOKEN").unwrap_or_default())
        .clock(clock)
        .open()
        .await
        .with_context(|| format!("cannot open {}", redacted(url)))
}

/// Opens the backend a URL names on the system clock.
pub async fn open(url: &str) -> Result<Arc<dyn MemoryBackend>> {
    open_with_clock(url, Arc::new(SystemClock)).await
}

/// The backends compiled into this binary.
pub fn compiled_in() -> Vec<&'static str> {
    let mut names = vec!["memory"];
    if cfg!(feature = "sqlite") {
        names.push("sqlite");
    }
    if cfg!(feature = "postgres") {
        names.push("postgres");
    }
    if cfg!(feature = "redis") {
        names.extend(["redis", "redis-cluster"]);
    }
    if cfg!(feature = "libsql") {
        names.push("libsql");
    }
    names
}

pub use memory_core::url::redacted;
