//! Agent memory on Redis and Redis Cluster.
//!
//! Every write that reads before it writes is one Lua script, so it is atomic on the server
//! with no read-modify-write across round trips; scripts are sent by SHA (`EVALSHA`) and loaded
//! on first use. Every call of the store shares one multiplexed connection (one per node on a
//! cluster): each answer is checked to be its own request's, and a connection on which a
//! request's fate is unknown is never used again (see [`RedisConnection`]). No call waits
//! longer than [`RedisStoreBuilder::timeout`] on a silent server.
//!
//! ```no_run
//! use mnemix_core::{AppendOptions, ConversationStore, LoadOptions, Message, NewConversation, Scope};
//! use mnemix_redis::RedisStore;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> mnemix_core::Result<()> {
//! let store = RedisStore::builder().url("redis://127.0.0.1:6379").open().await?;
//! let scope = Scope::for_subject("user-42")?;
//! let thread = store.create_conversation(&scope, NewConversation::default()).await?;
//! store.append(&scope, &thread.id, vec![Message::user("hi")], AppendOptions::default()).await?;
//! assert_eq!(store.load(&scope, &thread.id, LoadOptions::last(10)).await?.len(), 1);
//! # Ok(()) }
//! ```
//!
//! # Features
//! - `tls`: `rediss://` through rustls (ring provider). Off by default; `mnemix` turns it
//!   on.
//!
//! # Key schema
//!
//! Every key starts with the prefix (default `agent-memory`, the name data was written under before the crates were renamed) and a hash tag. Everything one
//! scope owns carries the tag `{namespace:subject}` (subject empty for the shared scope), so it
//! lives in one cluster slot and a script may touch any of it atomically; namespace-level data
//! (collections, the cache) carries `{namespace}`. In the tag, `%`, `{`, `}` and `:` of a
//! namespace or subject are percent-encoded, so the tag always ends at its own `}`. What
//! follows the tag names the kind before any raw identifier, so no id can make one key look
//! like another.
//!
//! | key (after `PREFIX:{ns:subject}:`) | type | holds |
//! |---|---|---|
//! | `convs` | zset | conversation ids by `created_at` |
//! | `c:ID` | hash | a conversation: `doc` (JSON), `last_seq`, `updated_at` |
//! | `cm:ID` | zset | its messages: score seq, member `message id NUL message JSON` |
//! | `ci:ID` | hash | message id → `seq:sha1 of the content` (idempotency) |
//! | `cc:ID` | hash | cursor name → value |
//! | `cw:ID` | hash | its working memory: `content`, `format`, `revision`, `updated_at` |
//! | `w` | hash | the subject's user working memory (same fields) |
//! | `f:ID` | hash | a fact: `doc` (JSON as created) beside the fields that change |
//! | `fs` | zset | every fact id by `created_at` |
//! | `fc` | set | current (not superseded) fact ids |
//! | `fx` | zset | expiring fact ids by `expires_at` |
//! | `fd` | hash | sha1 of `key NUL text` → current fact id (dedupe) |
//! | `fkc` | hash | fact key → current fact id |
//! | `fh:KEY` | zset | every version of a key by `created_at` (history) |
//! | `ft:TOKEN` | set | current fact ids by lexical token |
//! | `fv` | string | the version token of the scope's facts, set fresh by every write of them |
//! | `v:N` | hash | vector records of collection incarnation N: id → `conversation NUL JSON NUL f32 LE` |
//! | `vt:N` | string | the version token of `v:N`, set fresh by every write of it |
//! | `vc` | set | the incarnations this scope holds records of |
//! | `k:ID` | hash | a checkpoint: `workflow`, `status`, `state`, `version`, timestamps |
//! | `ks` | zset | suspended checkpoint ids by `updated_at` |
//! | `ka` | set | every checkpoint id |
//!
//! | key (after `PREFIX:{ns}:`) | type | holds |
//! |---|---|---|
//! | `cols` | hash | collection name → `incarnation NUL spec JSON` |
//! | `colseq` | string | the last incarnation number drawn |
//! | `vs:N` | set | scope prefixes holding records of incarnation N (for drops) |
//! | `e:KEY` | hash | a cache entry: `value`, `expires_at` (store clock); server TTL too |
//! | `es` | zset | cache keys by `expires_at` (`+inf` without) |
//! | `subjects` | set | subjects (`""`: the shared scope) that have held data |
//!
//! And `PREFIX:namespaces`, a set of the namespaces that have held data. The registry sets are
//! written before the data they announce (they live in other slots); `namespaces` and `scopes`
//! check each candidate for data it still holds. `forget_all` takes the subject out of
//! `subjects`, so no trace of an erased subject stays. `forget_namespace` leaves the
//! namespace's name in `namespaces` (each process adds a name once) and its `colseq` (so that
//! a collection made again never reuses an incarnation number), nothing else.
//!
//! # Vectors
//! Redis 7 has no vector search, so search is exact in Rust over a scope's records of the
//! collection; the capability says `Exact`. Every write of the records sets a fresh version
//! token beside them (`vt:N`) in its script, so a search ranks the matrix this process holds,
//! whose rows are whole records, and reads just the token, and reads every record again
//! (with the token, in one `MULTI`/`EXEC`) only when the token has changed
//! ([`RedisStoreBuilder::vector_cache_bytes`] bounds what is held). A write's script returns
//! the token it replaced, so this process applies its own writes to a matrix held at that token
//! instead of reading the records again; and a search of a collection it has seen reads the
//! collection's spec in the same round trip as the token. A collection's records
//! live in each scope's slot under an *incarnation* drawn when it is made, so dropping it
//! (removing the spec) hides them at once, everywhere; they are then deleted scope by scope.
//!
//! # Facts
//! Recall with a vector ranks every current fact of the scope: it holds them in this process per version
//! token (`fv`, set fresh by every script that changes the scope's facts), ranks there, and
//! reads the ranked facts with the token in one `MULTI`/`EXEC`, reading every current fact again
//! only when the token changed. `remember` returns the token it replaced, so this process
//! applies its own remember to what it holds. A scope whose facts were written before tokens
//! existed has none and is read whole on each recall, until its next write. Lexical recall
//! ranks the held facts too when the scope's are held; otherwise it reads the candidates
//! through the token sets (`ft:TOKEN`).
//!
//! # Consistency
//! Every write to one scope is atomic (one script, one slot). Across slots nothing is: a
//! restore checks everything it could refuse before writing, then writes scope by scope, and
//! running it again completes one cut short. The front layer (`mnemix_core::Checked`) retries appends
//! on lost connections (they are idempotent by message id).
//!
//! # Time
//! Timestamps and expiry follow the store's [`Clock`]; reads compare against it. Behind them,
//! cache entries carry the server's own expiry (`PEXPIRE`, set to the same remaining time), and
//! expired facts are purged, with every index entry, by the next `remember` in their scope.
//!
//! # Durability
//! Declared from the server's persistence settings at open: AOF with `appendfsync always` is
//! durable, AOF `everysec` is buffered with a 1 s window, AOF `no` a 30 s window (the kernel's
//! flush), RDB snapshots only a window of the shortest `save` interval, and no persistence (or
//! a server that refuses `CONFIG GET`) volatile.

mod backend;
mod cache;
mod checkpoints;
mod connection;
mod conversations;
mod facts;
mod keys;
mod paging;
mod replicas;
mod transfer;
mod vectors;
mod working;

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex};

pub use crate::connection::RedisConnection;
use crate::keys::Keys;
use mnemix_core::descriptor::{BoxOpen, Descriptor, OpenRequest};
use mnemix_core::url::redacted;
use mnemix_core::{
    Clock, Durability, MemoryBackend, MemoryError, Namespace, Result, Scope, SystemClock,
};

pub(crate) const BACKEND: &str = "redis";

/// Where a [`RedisStore`] connects.
#[derive(Clone)]
enum Target {
    Url(String),
    Cluster(Vec<String>),
    Client(Box<redis::Client>),
    ClusterClient(Box<redis::cluster::ClusterClient>),
    Connection(Box<RedisConnection>),
}

/// Builds a [`RedisStore`]; see [`RedisStore::builder`].
pub struct RedisStoreBuilder {
    target: Option<Target>,
    prefix: String,
    clock: Arc<dyn Clock>,
    timeout: Option<std::time::Duration>,
    vector_cache_bytes: usize,
    replicas: u32,
    /// A `replicas=` URL parameter that is not a count, refused by `open`.
    bad_replicas: Option<String>,
}

impl fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStoreBuilder")
            .field("target", &self.target.as_ref().map(Target::redacted))
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("replicas", &self.replicas)
            .finish_non_exhaustive()
    }
}

impl Target {
    /// For `Debug` and errors: URLs without their passwords.
    fn redacted(&self) -> String {
        match self {
            Self::Url(url) => redacted(url),
            Self::Cluster(nodes) => nodes
                .iter()
                .map(|n| redacted(n))
                .collect::<Vec<_>>()
                .join(","),
            Self::Client(_) => "<client>".into(),
            Self::ClusterClient(_) => "<cluster client>".into(),
            Self::Connection(_) => "<connection>".into(),
        }
    }
}

impl RedisStoreBuilder {
    /// `redis://`, `rediss://` (TLS: feature `tls`, trusting the system's root certificates)
    /// or `redis+cluster://host:port,host:port` (a cluster through any of its nodes). A
    /// `prefix=NAME` query parameter sets [`prefix`](Self::prefix):
    /// `redis://127.0.0.1:6379/?prefix=myapp`. For a private CA or client certificates, give a
    /// client built with `redis::Client::build_with_tls` to [`client`](Self::client).
    #[must_use]
    pub fn url(mut self, url: &str) -> Self {
        let (url, prefix) = mnemix_core::url::take_query_param(url, "prefix");
        if let Some(prefix) = prefix {
            self.prefix = prefix;
        }
        let (url, replicas) = mnemix_core::url::take_query_param(&url, "replicas");
        if let Some(replicas) = replicas {
            match replicas.parse() {
                Ok(replicas) => self.replicas = replicas,
                Err(_) => self.bad_replicas = Some(replicas),
            }
        }
        let url = url.as_str();
        self.target = Some(match url.strip_prefix("redis+cluster://") {
            Some(nodes) => Target::Cluster(
                nodes
                    .split(',')
                    .filter(|n| !n.trim().is_empty())
                    .map(|n| format!("redis://{}", n.trim()))
                    .collect(),
            ),
            None => Target::Url(url.to_owned()),
        });
        self
    }

    /// A cluster through these node URLs (`redis://host:port`).
    #[must_use]
    pub fn cluster<I: IntoIterator<Item = S>, S: Into<String>>(mut self, nodes: I) -> Self {
        self.target = Some(Target::Cluster(nodes.into_iter().map(Into::into).collect()));
        self
    }

    /// An existing client: the store makes its connections from it.
    #[must_use]
    pub fn client(mut self, client: redis::Client) -> Self {
        self.target = Some(Target::Client(Box::new(client)));
        self
    }

    /// An existing cluster client.
    #[must_use]
    pub fn cluster_client(mut self, client: redis::cluster::ClusterClient) -> Self {
        self.target = Some(Target::ClusterClient(Box::new(client)));
        self
    }

    /// An existing connection (shared with the caller: clones multiplex one socket).
    #[must_use]
    pub fn connection(mut self, connection: RedisConnection) -> Self {
        self.target = Some(Target::Connection(Box::new(connection)));
        self
    }

    /// How long a call waits on a silent server before it fails `Unavailable` (default
    /// [`mnemix_core::DEFAULT_SERVER_TIMEOUT`], 30 s; `None` lifts it, and a cluster then keeps
    /// redis-rs's own): connecting, and each command's answer. The front layer's retry policy
    /// then applies. For connections the store makes from a URL or a [`client`](Self::client)
    /// (a connection or cluster client you give keeps its own settings). redis-rs's own
    /// defaults (500 ms for an answer) are shorter than legitimate scripts on large subjects
    /// (`forget_all` of a subject with ten thousand records can take longer), and the erasure
    /// would run to its end while the caller was told it failed.
    #[must_use]
    pub fn timeout(mut self, timeout: Option<std::time::Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// How many replicas must hold what a call did or saw before the store answers it
    /// (default 0: the master's word). Redis replicates asynchronously, so a master that fails
    /// right after answering can lose a write its promoted replica never received, and with it
    /// what reads had shown of it; with `n` the store sends `WAIT n` after each command (to the
    /// master of the key's slot on a cluster) and fails the call `Unavailable` when fewer than
    /// `n` replicas acknowledge within half of [`timeout`](Self::timeout) (so that `WAIT`'s
    /// answer comes back before the call would time out). Then a failover takes back
    /// nothing a caller was told, at the price of a round trip per command, and of calls
    /// refused while a master has fewer than `n` replicas (after a failover, until the old
    /// master is back as a replica). `replicas=N` in the URL sets it too.
    #[must_use]
    pub fn replicas(mut self, replicas: u32) -> Self {
        self.replicas = replicas;
        self
    }

    /// The prefix of every key (default `agent-memory`): printable ASCII without spaces or
    /// braces, at most 64 bytes. Several stores with their own prefixes share a server.
    #[must_use]
    pub fn prefix(mut self, prefix: &str) -> Self {
        prefix.clone_into(&mut self.prefix);
        self
    }

    /// Memory the vector-matrix cache may hold before it is emptied (default 256 MiB; 0 turns
    /// caching off). A search reads a scope's records of a collection once per version of them
    /// and ranks the held matrix after that; a write by any client is seen by the next search.
    /// Recall holds scopes' current facts the same way, in a budget of the same
    /// size.
    #[must_use]
    pub fn vector_cache_bytes(mut self, bytes: usize) -> Self {
        self.vector_cache_bytes = bytes;
        self
    }

    /// The clock that decides "now" for timestamps and expiry (default: the system clock).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Connects and reads the server's persistence settings.
    pub async fn open(self) -> Result<RedisStore> {
        let valid_prefix = !self.prefix.is_empty()
            && self.prefix.len() <= 64
            && self
                .prefix
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'{' && b != b'}');
        if !valid_prefix {
            return Err(MemoryError::invalid(format!(
                "key prefix {:?} must be 1-64 printable ASCII characters without braces",
                self.prefix
            )));
        }
        if let Some(replicas) = &self.bad_replicas {
            return Err(MemoryError::invalid(format!(
                "replicas={replicas:?} is not a count of replicas"
            )));
        }
        let target = self
            .target
            .ok_or_else(|| MemoryError::invalid("no Redis to connect to: give url()"))?;
        let shown = target.redacted();
        let bad =
            |e: redis::RedisError| MemoryError::invalid(format!("bad Redis URL {shown}: {e}"));
        let config = redis::AsyncConnectionConfig::new()
            .set_response_timeout(self.timeout)
            .set_connection_timeout(self.timeout);
        let connection = match target {
            Target::Url(url) => {
                let client = redis::Client::open(url.as_str()).map_err(bad)?;
                RedisConnection::standalone(client, config)
                    .await
                    .map_err(to_error)?
            }
            Target::Client(client) => RedisConnection::standalone(*client, config)
                .await
                .map_err(to_error)?,
            Target::Cluster(nodes) => {
                let mut builder =
                    redis::cluster::ClusterClient::builder(nodes.iter().map(String::as_str));
                if let Some(timeout) = self.timeout {
                    builder = builder
                        .response_timeout(timeout)
                        .connection_timeout(timeout);
                }
                let client = builder.build().map_err(bad)?;
                RedisConnection::cluster(client).await.map_err(to_error)?
            }
            Target::ClusterClient(client) => {
                RedisConnection::cluster(*client).await.map_err(to_error)?
            }
            Target::Connection(connection) => *connection,
        };
        let durability = durability(&mut connection.clone()).await;
        Ok(RedisStore {
            replicas: self.replicas,
            // WAIT's own limit: half the call's, so that its answer ("k of n") comes back
            // before the call would time out; never 0, which waits for ever.
            wait: (self.timeout.unwrap_or(mnemix_core::DEFAULT_SERVER_TIMEOUT) / 2)
                .max(std::time::Duration::from_millis(1)),
            cluster: connection.is_cluster(),
            connection,
            keys: Keys::new(&self.prefix),
            clock: self.clock,
            durability,
            target: shown,
            registered: Mutex::default(),
            vector_cache: vectors::MatrixCache::new(self.vector_cache_bytes),
            held_facts: mnemix_core::adapter::held_facts_cache(self.vector_cache_bytes),
            seen_collections: vectors::SeenCollections::default(),
        })
    }
}

/// The durability class of the server's persistence settings (see the crate docs).
async fn durability(connection: &mut RedisConnection) -> Durability {
    let config: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .query_async(connection)
        .await;
    let setting =
        |reply: redis::RedisResult<Vec<String>>| reply.ok().and_then(|r| r.get(1).cloned());
    let appendonly = setting(config);
    if appendonly.as_deref() == Some("yes") {
        let fsync = setting(
            redis::cmd("CONFIG")
                .arg("GET")
                .arg("appendfsync")
                .query_async(connection)
                .await,
        );
        return match fsync.as_deref() {
            Some("always") => Durability::Durable,
            Some("no") => Durability::Buffered {
                loss_window_ms: 30_000,
            },
            _ => Durability::Buffered {
                loss_window_ms: 1_000,
            },
        };
    }
    let save = setting(
        redis::cmd("CONFIG")
            .arg("GET")
            .arg("save")
            .query_async(connection)
            .await,
    );
    // "3600 1 300 100 60 10000": pairs of seconds and changes; the shortest interval bounds
    // the loss when writes keep coming.
    let shortest = save.as_deref().and_then(|s| {
        s.split_whitespace()
            .step_by(2)
            .filter_map(|secs| secs.parse::<u32>().ok())
            .min()
    });
    match shortest {
        Some(secs) => Durability::Buffered {
            loss_window_ms: secs.saturating_mul(1000),
        },
        None => Durability::Volatile,
    }
}

/// `redis://`, `rediss://` (`?prefix=NAME&replicas=N`): how `mnemix::open` finds this
/// backend on a standalone server.
pub const DESCRIPTOR: Descriptor = Descriptor::new(
    "redis",
    &["redis", "rediss"],
    "redis://, rediss://",
    open_request,
);

/// `redis+cluster://host:port,host:port`: how `mnemix::open` finds this backend on a cluster.
pub const CLUSTER_DESCRIPTOR: Descriptor = Descriptor::new(
    "redis-cluster",
    &["redis+cluster"],
    "redis+cluster://",
    open_request,
);

fn open_request(request: OpenRequest) -> BoxOpen {
    Box::pin(async move {
        let store = RedisStore::builder()
            .url(request.url())
            .timeout(request.timeout())
            .clock(Arc::clone(request.clock()))
            .open()
            .await?;
        Ok(Arc::new(store) as Arc<dyn MemoryBackend>)
    })
}

/// Every memory contract on one Redis server or cluster. Cheap to share behind an `Arc`.
pub struct RedisStore {
    connection: RedisConnection,
    /// Replicas a write must reach before it is acknowledged (see
    /// [`RedisStoreBuilder::replicas`]), and how long `WAIT` waits for them.
    replicas: u32,
    wait: std::time::Duration,
    keys: Keys,
    clock: Arc<dyn Clock>,
    durability: Durability,
    cluster: bool,
    target: String,
    /// Namespaces this process has registered (see `register_namespace`).
    registered: Mutex<HashSet<String>>,
    /// Vector matrices by scope and collection, at their records' version token.
    vector_cache: vectors::MatrixCache,
    /// Scopes' current facts held for recall, at their version token.
    held_facts: mnemix_core::adapter::HeldFactsCache<String>,
    /// Collections as this process's searches last read them, checked on every use.
    seen_collections: vectors::SeenCollections,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("target", &self.target)
            .field("prefix", &self.keys.prefix())
            .field("cluster", &self.cluster)
            .field("durability", &self.durability)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A builder with the defaults: prefix `agent-memory`, the system clock.
    pub fn builder() -> RedisStoreBuilder {
        RedisStoreBuilder {
            target: None,
            prefix: "agent-memory".to_owned(),
            timeout: Some(mnemix_core::DEFAULT_SERVER_TIMEOUT),
            clock: Arc::new(SystemClock),
            vector_cache_bytes: 256 << 20,
            replicas: 0,
            bad_replicas: None,
        }
    }

    /// Whether the store runs against a cluster.
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// The durability class read from the server at open.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// A handle on the shared connection (clones share the same socket).
    pub(crate) fn conn(&self) -> replicas::Acknowledged {
        replicas::Acknowledged {
            inner: self.connection.clone(),
            replicas: self.replicas,
            wait: self.wait,
        }
    }

    /// The store's connection, for commands of your own (it implements
    /// [`redis::aio::ConnectionLike`]).
    pub fn connection(&self) -> RedisConnection {
        self.connection.clone()
    }

    /// Notes that a namespace holds data, for `namespaces`: a set in a slot of its own, so
    /// not atomic with the write it accompanies; it runs before it, and a stale entry is only
    /// a candidate that `namespaces` checks. Namespace names are kept for good, so each process
    /// adds one once.
    pub(crate) async fn register_namespace(&self, namespace: &Namespace) -> Result<()> {
        if self
            .registered
            .lock()
            .expect("registry memo lock")
            .contains(namespace.as_str())
        {
            return Ok(());
        }
        let _: i64 = redis::cmd("SADD")
            .arg(self.keys.namespaces())
            .arg(namespace.as_str())
            .query_async(&mut self.conn())
            .await
            .db()?;
        let mut registered = self.registered.lock().expect("registry memo lock");
        if registered.len() >= 10_000 {
            registered.clear();
        }
        registered.insert(namespace.as_str().to_owned());
        Ok(())
    }

    /// Notes that a scope (and its namespace) holds data, for `namespaces` and `scopes`. The
    /// subject is added on every call, not remembered: `forget_all` takes it out again, from
    /// any process.
    pub(crate) async fn register_scope(&self, scope: &Scope) -> Result<()> {
        self.register_namespace(scope.namespace()).await?;
        let _: i64 = redis::cmd("SADD")
            .arg(self.keys.namespace(scope.namespace()).subjects())
            .arg(scope.subject().map_or("", |s| s.as_str()))
            .query_async(&mut self.conn())
            .await
            .db()?;
        Ok(())
    }
}

/// Connection failures, and the server's refusals of a command it did not run while it cannot
/// yet (`LOADING` after a restart, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`: redis-rs says wait
/// and retry), are worth retrying; everything else is a backend error.
pub(crate) fn to_error(e: redis::RedisError) -> MemoryError {
    if e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || matches!(e.retry_method(), redis::RetryMethod::WaitAndRetry)
    {
        MemoryError::Unavailable {
            backend: BACKEND,
            source: Box::new(e),
        }
    } else {
        MemoryError::Backend {
            backend: BACKEND,
            source: Box::new(e),
        }
    }
}

/// `.db()?` on a redis result.
pub(crate) trait RedisResultExt<T> {
    fn db(self) -> Result<T>;
}

impl<T> RedisResultExt<T> for redis::RedisResult<T> {
    fn db(self) -> Result<T> {
        self.map_err(to_error)
    }
}

/// A stored value that does not decode: the data was edited by something else.
pub(crate) fn corrupt(what: &str, e: impl fmt::Display) -> MemoryError {
    MemoryError::corrupt(BACKEND, what, e)
}

pub(crate) fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).expect("model types serialize to JSON")
}

#[cfg(test)]
mod tests {
    use redis::{ErrorKind, RedisError, ServerErrorKind};

    use super::to_error;

    #[test]
    fn a_server_still_loading_its_data_is_unavailable_not_a_backend_error() {
        let loading = RedisError::from((
            ErrorKind::Server(ServerErrorKind::BusyLoading),
            "Redis is loading the dataset in memory",
        ));
        assert!(to_error(loading).is_retryable());
        let refused = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "wrong number of arguments",
        ));
        assert!(!to_error(refused).is_retryable());
    }
}
