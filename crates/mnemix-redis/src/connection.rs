//! The store's connection: one multiplexed socket (one per node on a cluster) that every caller
//! of the store shares, guarded so that no caller is ever handed another call's answer.
//!
//! RESP has no request ids: a multiplexed connection pairs answers with requests by their
//! order. If a request never reaches the server (bytes lost while the TCP connection stays
//! open), or an answer never comes back, every answer after it lands on the wrong request —
//! another call's, perhaps another tenant's — and redis-rs keeps the slot of a request whose
//! caller stopped waiting. A timeout would only tell after the wrong answers were handed out.
//! So:
//!
//! - every command and pipeline goes out with an `ECHO` of a nonce of its own, in the same
//!   write, and an answer whose echo is not that nonce is refused as `Unavailable`, never
//!   returned as data;
//! - a connection on which the fate of a request is unknown (a timeout, a refused answer, a
//!   broken socket, a call dropped before its answer) is retired: nothing is sent on it again,
//!   and the next call connects afresh, once, within the connect timeout, so that a silent
//!   server fails a call within the store's timeout.
//!
//! A connection of yours given to the store (a [`ConnectionManager`] or a [`ClusterConnection`],
//! with `.into()`) has its answers checked the same way, but cannot be made again: once its
//! answers have shifted, every call on it fails until you replace it. Give the store a URL or a
//! client instead, and it makes its connections itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::replicas::touched_key;
use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo};
use redis::{
    AsyncConnectionConfig, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Value,
};

/// The store's connection, for commands of your own beside the store's (see
/// [`RedisStore::connection`](crate::RedisStore::connection)); clones share its sockets, and
/// its answers are checked as the store's are.
#[derive(Clone)]
pub struct RedisConnection {
    shared: Arc<Shared>,
}

struct Shared {
    /// What a retired connection is replaced from.
    source: Source,
    current: Mutex<Current>,
    /// Held while connecting afresh: the calls that find the connection retired wait for one
    /// new connection instead of each making its own.
    connecting: tokio::sync::Mutex<()>,
    /// Nonces are this, then a count: unique to this handle, whoever else shares the socket.
    salt: String,
    sent: AtomicU64,
}

struct Current {
    /// How many connections were made before this one.
    generation: u64,
    /// `None` once retired, until a call connects afresh.
    link: Option<Link>,
}

#[derive(Clone)]
enum Link {
    Standalone(MultiplexedConnection),
    Manager(ConnectionManager),
    Cluster(ClusterConnection),
}

enum Source {
    Standalone(redis::Client, AsyncConnectionConfig),
    Cluster(ClusterClient),
    /// A connection given by the caller: never replaced.
    Given,
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConnection")
            .field("cluster", &self.is_cluster())
            .finish_non_exhaustive()
    }
}

impl From<ConnectionManager> for RedisConnection {
    /// A standalone server's connection manager of yours: used as it is, never replaced.
    fn from(manager: ConnectionManager) -> Self {
        Self::with(Source::Given, Link::Manager(manager))
    }
}

impl From<ClusterConnection> for RedisConnection {
    /// A cluster connection of yours: used as it is, never replaced.
    fn from(connection: ClusterConnection) -> Self {
        Self::with(Source::Given, Link::Cluster(connection))
    }
}

impl RedisConnection {
    /// Connects to a standalone server.
    pub(crate) async fn standalone(
        client: redis::Client,
        config: AsyncConnectionConfig,
    ) -> RedisResult<Self> {
        let link = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok(Self::with(
            Source::Standalone(client, config),
            Link::Standalone(link),
        ))
    }

    /// Connects to a cluster.
    pub(crate) async fn cluster(client: ClusterClient) -> RedisResult<Self> {
        let link = client.get_async_connection().await?;
        Ok(Self::with(Source::Cluster(client), Link::Cluster(link)))
    }

    fn with(source: Source, link: Link) -> Self {
        Self {
            shared: Arc::new(Shared {
                source,
                current: Mutex::new(Current {
                    generation: 0,
                    link: Some(link),
                }),
                connecting: tokio::sync::Mutex::new(()),
                salt: uuid::Uuid::now_v7().simple().to_string(),
                sent: AtomicU64::new(0),
            }),
        }
    }

    /// Whether this is a cluster's connection.
    pub fn is_cluster(&self) -> bool {
        match &self.shared.source {
            Source::Cluster(_) => true,
            Source::Standalone(..) => false,
            Source::Given => matches!(self.current().link, Some(Link::Cluster(_))),
        }
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Current> {
        self.shared
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The connection to send on and its generation, connecting afresh if it was retired.
    async fn link(&self) -> RedisResult<(u64, Link)> {
        if let Some(ready) = self.ready() {
            return Ok(ready);
        }
        let _connecting = self.shared.connecting.lock().await;
        if let Some(ready) = self.ready() {
            return Ok(ready);
        }
        // One attempt, within the source's connect timeout: the call fails rather than wait
        // through reconnection's retries, and the next call tries again.
        let fresh = match &self.shared.source {
            Source::Standalone(client, config) => Link::Standalone(
                client
                    .get_multiplexed_async_connection_with_config(config)
                    .await?,
            ),
            Source::Cluster(client) => Link::Cluster(client.get_async_connection().await?),
            Source::Given => unreachable!("a given connection is never retired"),
        };
        let mut current = self.current();
        current.generation += 1;
        current.link = Some(fresh.clone());
        Ok((current.generation, fresh))
    }

    fn ready(&self) -> Option<(u64, Link)> {
        let current = self.current();
        current.link.clone().map(|link| (current.generation, link))
    }

    /// Sends nothing more on connection `generation` (unless it was replaced already).
    fn retire(&self, generation: u64) {
        if matches!(self.shared.source, Source::Given) {
            return;
        }
        let mut current = self.current();
        if current.generation == generation {
            current.link = None;
        }
    }

    fn nonce(&self) -> String {
        let n = self.shared.sent.fetch_add(1, Ordering::Relaxed);
        format!("{}:{n}", self.shared.salt)
    }

    /// Sends `pipeline` (to `route` on a cluster, else where its keys go) with an `ECHO` of a
    /// fresh nonce, and returns its `count` answers after `offset`, once the echo shows that
    /// they are this call's.
    async fn send(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
        route: Option<Route>,
    ) -> RedisResult<Vec<Value>> {
        let (generation, link) = self.link().await?;
        let nonce = self.nonce();
        let mut echoed = pipeline.clone();
        echoed.cmd("ECHO").arg(nonce.as_str());
        // In a transaction the echo is queued with the rest and answered inside EXEC's reply
        // (one more QUEUED to skip); otherwise it is one more answer.
        let (offset, count) = if pipeline.is_transaction() {
            (offset + 1, count)
        } else {
            (offset, count + 1)
        };
        let mut unsettled = Unsettled {
            connection: self,
            generation,
            settled: false,
        };
        let answered = link.send(echoed, offset, count, route).await;
        let checked = answered.and_then(|values| take_echo(values, &nonce, pipeline));
        unsettled.settled = checked.as_ref().err().is_none_or(|e| !fate_unknown(e));
        checked
    }

    /// Sends `cmd` to the master of `key`'s slot on a cluster, or to the server.
    pub(crate) async fn send_to_master_of(&self, key: &[u8], cmd: &Cmd) -> RedisResult<Value> {
        let route = self
            .is_cluster()
            .then(|| Route::with_key(key, redis::cluster_routing::SlotAddr::Master));
        self.send(&single(cmd), 0, 1, route).await.map(only)
    }
}

/// Retires its connection when dropped unsettled: a call dropped before its answer, or
/// answered with an error that leaves its request's fate unknown.
struct Unsettled<'a> {
    connection: &'a RedisConnection,
    generation: u64,
    settled: bool,
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.connection.retire(self.generation);
        }
    }
}

impl Link {
    async fn command(self, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Self::Standalone(mut c) => c.req_packed_command(cmd).await,
            Self::Manager(mut c) => c.req_packed_command(cmd).await,
            Self::Cluster(mut c) => c.req_packed_command(cmd).await,
        }
    }

    async fn send(
        self,
        pipeline: Pipeline,
        offset: usize,
        count: usize,
        route: Option<Route>,
    ) -> RedisResult<Vec<Value>> {
        match self {
            Self::Standalone(mut c) => c.req_packed_commands(&pipeline, offset, count).await,
            Self::Manager(mut c) => c.req_packed_commands(&pipeline, offset, count).await,
            Self::Cluster(mut c) => match route {
                Some(route) => {
                    let route = SingleNodeRoutingInfo::SpecificNode(route);
                    c.route_pipeline(pipeline, offset, count, route).await
                }
                None => c.req_packed_commands(&pipeline, offset, count).await,
            },
        }
    }
}

/// A pipeline of `cmd` alone.
fn single(cmd: &Cmd) -> Pipeline {
    let mut pipeline = Pipeline::new();
    pipeline.add_command(cmd.clone());
    pipeline
}

fn only(mut values: Vec<Value>) -> Value {
    values.pop().unwrap_or(Value::Nil)
}

/// `values` without the echo, or an error if the echo is not `nonce` (the answers are some
/// other request's).
fn take_echo(mut values: Vec<Value>, nonce: &str, pipeline: &Pipeline) -> RedisResult<Vec<Value>> {
    let echo = if pipeline.is_transaction() {
        // EXEC's reply: the transaction's answers, the echo last.
        match values.last_mut() {
            Some(Value::Array(answers)) => answers.pop(),
            _ => None,
        }
    } else {
        values.pop()
    };
    let matches = match &echo {
        Some(Value::BulkString(bytes)) => bytes == nonce.as_bytes(),
        Some(Value::SimpleString(text)) => text == nonce,
        _ => false,
    };
    if matches {
        Ok(values)
    } else {
        Err(mismatch())
    }
}

/// The error of an answer that was not its request's.
fn mismatch() -> RedisError {
    RedisError::from((
        ErrorKind::Io,
        "an answer did not match its request",
        "the connection's answers are out of step with its requests; it is not used again"
            .to_owned(),
    ))
}

/// Whether after `e` the connection may hold answers out of step with its requests.
fn fate_unknown(e: &RedisError) -> bool {
    e.is_timeout() || e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error()
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            if self.is_cluster() && touched_key(cmd).is_none() {
                // A command that names no key goes to every node, or any (`SCRIPT LOAD`,
                // `CONFIG GET`): its answer is no one node's to echo, and holds no stored data.
                let (_, link) = self.link().await?;
                return link.command(cmd).await;
            }
            self.send(&single(cmd), 0, 1, None).await.map(only)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move { self.send(pipeline, offset, count, None).await })
    }

    fn get_db(&self) -> i64 {
        match &self.current().link {
            Some(Link::Standalone(c)) => c.get_db(),
            Some(Link::Manager(c)) => c.get_db(),
            Some(Link::Cluster(c)) => c.get_db(),
            None => 0,
        }
    }
}
