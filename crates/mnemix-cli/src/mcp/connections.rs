//! The HTTP connections the server accepts, held to what a shared server needs: replies sent at
//! once (`TCP_NODELAY`: a kept-alive connection's answer never waits for the peer's delayed
//! ACK), headers that must arrive within a deadline (a client that sends them slowly is cut
//! off), and a cap on the connections one peer address holds open, so a few clients trickling
//! bytes cannot take every descriptor. axum's `serve` sets none of these, so the accept loop is
//! written here over hyper's connection builder, as `serve` itself does.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower::ServiceExt as _;

/// What each accepted connection is held to.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// How long a request's headers may take to arrive.
    pub header_read_timeout: Duration,
    /// How many connections one peer address may hold open at once; more are closed as they
    /// are accepted.
    pub per_peer: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            per_peer: 64,
        }
    }
}

/// The open connections of each peer address.
#[derive(Default)]
struct Peers(Mutex<HashMap<IpAddr, usize>>);

/// One open connection of a peer, counted until it is dropped.
struct PeerSlot {
    peers: Arc<Peers>,
    peer: IpAddr,
}

impl PeerSlot {
    /// A slot for one more connection of `peer`, unless it holds `cap` already.
    fn take(peers: &Arc<Peers>, peer: IpAddr, cap: usize) -> Option<Self> {
        let mut open = peers.0.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(peer).or_default();
        if *count >= cap {
            return None;
        }
        *count += 1;
        Some(Self {
            peers: Arc::clone(peers),
            peer,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.peers.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.peer) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.peer);
            }
        }
    }
}

/// An accepted connection as the server sends on it: every reply at once.
fn tuned(stream: TcpStream) -> TcpStream {
    // A socket that refuses the option still serves, only slower.
    let _ = stream.set_nodelay(true);
    stream
}

/// Serves `router` on `listener` until `shutdown` completes, then lets the open connections
/// finish what they are answering.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let peers = Arc::new(Peers::default());
    // Each connection holds a receiver: `closing` tells them to finish, and its `closed()`
    // resolves once every one has.
    let (closing, connections) = watch::channel(false);
    let mut shutdown = pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let Ok((stream, peer)) = accepted else {
            // Out of descriptors, or a connection reset before it was accepted: the listener
            // is still good.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Some(slot) = PeerSlot::take(&peers, peer.ip(), limits.per_peer) else {
            continue; // dropped: closed
        };
        let service = TowerToHyperService::new(
            router
                .clone()
                .map_request(|request: Request<hyper::body::Incoming>| request.map(Body::new)),
        );
        let mut closing = connections.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let mut builder = Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout);
            let connection =
                builder.serve_connection_with_upgrades(TokioIo::new(tuned(stream)), service);
            let mut connection = pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = closing.changed() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
            drop(closing);
        });
    }
    drop(listener);
    let _ = closing.send(true);
    drop(connections);
    closing.closed().await;
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    /// A server of one route on a free port, with `limits`.
    async fn server(limits: ConnectionLimits) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let router = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        tokio::spawn(serve(listener, router, limits, std::future::pending()));
        address
    }

    /// Whether the server closes `stream`: reading it comes to its end (a guard of many seconds keeps a
    /// server that never closes from hanging the test).
    async fn closed_by_server(stream: &mut TcpStream) -> bool {
        let until_closed = async {
            let mut buffer = [0u8; 256];
            // A refusal the server may write first is read past.
            while let Ok(read) = stream.read(&mut buffer).await {
                if read == 0 {
                    break;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(30), until_closed)
            .await
            .is_ok()
    }

    async fn get(stream: &mut TcpStream) -> String {
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: localhost\r\n\r\n")
            .await
            .unwrap();
        let mut answer = vec![0u8; 1024];
        let read = stream.read(&mut answer).await.unwrap();
        String::from_utf8_lossy(&answer[..read]).into_owned()
    }

    #[test]
    fn an_accepted_connection_sends_without_delay() {
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let client = TcpStream::connect(listener.local_addr().unwrap());
            let (accepted, _client) = tokio::join!(listener.accept(), client);
            let (stream, _) = accepted.unwrap();
            assert!(!stream.nodelay().unwrap(), "the system's default delays");
            assert!(tuned(stream).nodelay().unwrap());
        });
    }

    #[tokio::test]
    async fn a_peer_holds_at_most_its_cap_of_connections() {
        let address = server(ConnectionLimits {
            per_peer: 2,
            ..ConnectionLimits::default()
        })
        .await;
        let mut first = TcpStream::connect(address).await.unwrap();
        let mut second = TcpStream::connect(address).await.unwrap();
        assert!(get(&mut first).await.ends_with("ok"));
        assert!(get(&mut second).await.ends_with("ok"));
        let mut third = TcpStream::connect(address).await.unwrap();
        assert!(closed_by_server(&mut third).await, "past the cap");
        drop(first);
        // The slot comes back once the server sees the first one close.
        let mut again = loop {
            let mut stream = TcpStream::connect(address).await.unwrap();
            stream
                .write_all(b"GET / HTTP/1.1\r\nhost: localhost\r\n\r\n")
                .await
                .unwrap();
            let mut answer = vec![0u8; 1024];
            if matches!(stream.read(&mut answer).await, Ok(n) if n > 0) {
                break stream;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(
            get(&mut second).await.ends_with("ok"),
            "the others served on"
        );
        assert!(get(&mut again).await.ends_with("ok"));
    }

    #[tokio::test]
    async fn headers_that_arrive_too_slowly_end_the_connection() {
        let address = server(ConnectionLimits {
            header_read_timeout: Duration::from_millis(200),
            ..ConnectionLimits::default()
        })
        .await;
        let mut slow = TcpStream::connect(address).await.unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nhost: loc")
            .await
            .unwrap();
        assert!(closed_by_server(&mut slow).await, "cut off");
        let mut prompt = TcpStream::connect(address).await.unwrap();
        assert!(get(&mut prompt).await.ends_with("ok"));
    }
}
