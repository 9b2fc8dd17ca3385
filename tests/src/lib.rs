//! What the workspace's cross-backend tests share: where each server is, and a store opened
//! through a [`FaultProxy`] in front of it.

use std::collections::HashMap;
use std::net::SocketAddr;

use mnemix::backends::redis::RedisStore;
use mnemix::{ConversationId, OpenOptions, RetryPolicy, Scope, Store};
use mnemix_conformance::history::{check, History};
use mnemix_conformance::SetupError;
use mnemix_testkit::faults::{FaultProxy, Protocol};
use mnemix_testkit::services::{locate, Service};
use redis::cluster::NodeAddress;

/// A server backend the fault tests run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// PostgreSQL (`MNEMIX_TEST_POSTGRES_URL`).
    Postgres,
    /// A standalone Redis (`MNEMIX_TEST_REDIS_URL`).
    Redis,
}

impl Server {
    /// Its name in `MNEMIX_TEST_REQUIRE` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::Redis => "redis",
        }
    }

    fn service(self) -> Service {
        match self {
            Self::Postgres => Service::Postgres,
            Self::Redis => Service::Redis,
        }
    }

    fn protocol(self) -> Protocol {
        match self {
            Self::Postgres => Protocol::Postgres,
            Self::Redis => Protocol::Redis,
        }
    }

    /// The server's URL, or `None` after a named skip of `tests` (a failure when
    /// `MNEMIX_TEST_REQUIRE` names it).
    pub fn url(self, tests: &str) -> Option<String> {
        match locate(self.service()) {
            Ok(url) => Some(url),
            Err(SetupError::Unreachable(why)) => {
                mnemix_conformance::skip(self.name(), tests, &why);
                None
            }
            Err(SetupError::Failed(e)) => panic!("{}: {e}", self.name()),
        }
    }
}

/// `host:port` of a `scheme://[user[:password]@]host[:port][/path][?query]` URL.
pub fn authority(url: &str, default_port: u16) -> Option<(String, u16)> {
    let rest = url.split_once("://")?.1;
    let rest = rest.split(['/', '?']).next()?;
    let host_port = rest.rsplit_once('@').map_or(rest, |(_, hp)| hp);
    match host_port.rsplit_once(':') {
        Some((host, port)) => Some((host.to_owned(), port.parse().ok()?)),
        None => Some((host_port.to_owned(), default_port)),
    }
}

/// `url` with its authority replaced by `addr` (credentials, path and query kept).
pub fn through(url: &str, addr: SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let credentials = authority.rsplit_once('@').map(|(c, _)| c);
    match credentials {
        Some(c) => format!("{scheme}://{c}@{addr}{tail}"),
        None => format!("{scheme}://{addr}{tail}"),
    }
}

/// `url` with `name=value` added to its query.
pub fn with_param(url: &str, name: &str, value: &str) -> String {
    let join = if url.contains('?') { '&' } else { '?' };
    format!("{url}{join}{name}={value}")
}

/// `prefix-PID-RANDOM`: a subject (or id prefix) no other run uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), fastrand::u64(..))
}

pub use mnemix_testkit::faults::report;

/// Reads conversation `id`'s final contents into `history` (the faults must have stopped),
/// checks it, and reports the run: the history's figures with `row` beside them (`test`,
/// `backend` and the test's own), to stderr under `tests` and to `MNEMIX_FAULTS_REPORT`.
/// Returns the anomalies.
pub async fn judge(
    history: &mut History,
    store: &Store,
    scope: &Scope,
    id: &ConversationId,
    tests: &str,
    row: impl IntoIterator<Item = (&'static str, serde_json::Value)>,
) -> Vec<String> {
    history
        .finish(store.backend().as_ref(), scope, id)
        .await
        .expect("the final load");
    let anomalies = check(history);
    let mut line = history.figures(&anomalies);
    line.extend(row.into_iter().map(|(key, value)| (key.to_owned(), value)));
    let line = serde_json::Value::Object(line);
    eprintln!("{tests}: {line}");
    report(&[line]);
    anomalies
}

/// A proxy in front of `server` (at `url`), and a store opened through it with `retry`.
pub async fn proxied(
    server: Server,
    url: &str,
    retry: RetryPolicy,
) -> Result<(FaultProxy, Store), String> {
    proxied_with(server, url, |options| options.retry(retry)).await
}

/// A proxy in front of `server` (at `url`), and a store opened through it with the options
/// `options` makes of the URL's.
pub async fn proxied_with(
    server: Server,
    url: &str,
    options: impl FnOnce(OpenOptions) -> OpenOptions,
) -> Result<(FaultProxy, Store), String> {
    let (proxy, url) = proxy_before(server, url).await?;
    let store = options(OpenOptions::new(&url))
        .open()
        .await
        .map_err(|e| format!("cannot open {url}: {e}"))?;
    Ok((proxy, store))
}

/// A proxy in front of `server` (at `url`), and the URL that reaches the server through it.
pub async fn proxy_before(server: Server, url: &str) -> Result<(FaultProxy, String), String> {
    let default_port = match server {
        Server::Postgres => 5432,
        Server::Redis => 6379,
    };
    let (host, port) = authority(url, default_port).ok_or(format!("no host in {url}"))?;
    let proxy = proxy_to(&host, port, server.protocol()).await?;
    let url = match server {
        // Its own schema, so that other test processes' tables never slow these.
        Server::Postgres => with_param(&through(url, proxy.addr()), "schema", "faults"),
        Server::Redis => with_param(&through(url, proxy.addr()), "prefix", "faults"),
    };
    Ok((proxy, url))
}

/// A proxy in front of `host:port`.
async fn proxy_to(host: &str, port: u16, protocol: Protocol) -> Result<FaultProxy, String> {
    let upstream = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .next()
        .ok_or(format!("{host} has no address"))?;
    FaultProxy::start(upstream, protocol)
        .await
        .map_err(|e| format!("cannot start the proxy: {e}"))
}

/// A proxy in front of each node of the cluster (`MNEMIX_TEST_REDIS_CLUSTER_URLS`), and a store
/// on the cluster through them with `timeout`; `None` after a named skip of `tests`. The nodes
/// announce their own addresses, so the client is led to the proxies by its node address map.
pub async fn proxied_cluster(
    tests: &str,
    timeout: Option<std::time::Duration>,
) -> Option<(Vec<FaultProxy>, RedisStore)> {
    let seeds = match locate(Service::RedisCluster) {
        Ok(seeds) => seeds,
        Err(SetupError::Unreachable(why)) => {
            mnemix_conformance::skip("redis-cluster", tests, &why);
            return None;
        }
        Err(SetupError::Failed(e)) => panic!("redis-cluster: {e}"),
    };
    let seed = seeds.split(',').next().expect("a seed").trim().to_owned();
    let mut connection = redis::Client::open(seed.as_str())
        .expect("a seed URL")
        .get_multiplexed_async_connection()
        .await
        .expect("a connection to a seed");
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut connection)
        .await
        .expect("CLUSTER NODES");
    // "id host:port@bus flags …", a line a node.
    let mut proxies = Vec::new();
    let mut map = HashMap::new();
    let mut urls = Vec::new();
    for line in nodes.lines().filter(|l| !l.trim().is_empty()) {
        let address = line.split_whitespace().nth(1).expect("an address");
        let address = address.split('@').next().expect("host:port");
        let (host, port) = address.rsplit_once(':').expect("host:port");
        let port: u16 = port.parse().expect("a port");
        let proxy = proxy_to(host, port, Protocol::Redis)
            .await
            .expect("a proxy before the node");
        map.insert(
            NodeAddress::new(host.to_owned(), port),
            NodeAddress::new("127.0.0.1", proxy.addr().port()),
        );
        urls.push(through(&seed, proxy.addr()));
        proxies.push(proxy);
    }
    let mut client = redis::cluster::ClusterClientBuilder::new(urls).node_address_map(map);
    if let Some(timeout) = timeout {
        client = client.response_timeout(timeout).connection_timeout(timeout);
    }
    let store = RedisStore::builder()
        .cluster_client(client.build().expect("a cluster client"))
        .prefix("faults")
        .open()
        .await
        .expect("a store through the proxies");
    Some((proxies, store))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_rewritten_to_the_proxy() {
        let addr: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let url = "postgres://postgres:pw@db.example:5433/test?sslmode=disable";
        assert_eq!(authority(url, 5432), Some(("db.example".into(), 5433)));
        assert_eq!(
            through(url, addr),
            "postgres://postgres:pw@127.0.0.1:4000/test?sslmode=disable"
        );
        assert_eq!(
            authority("redis://127.0.0.1", 6379),
            Some(("127.0.0.1".into(), 6379))
        );
        assert_eq!(through("redis://h:1", addr), "redis://127.0.0.1:4000");
        assert_eq!(
            with_param("redis://h:1", "prefix", "p"),
            "redis://h:1?prefix=p"
        );
    }
}
