//! The store's own connections: tokio-postgres over a socket that gives up on a silent server.
//!
//! tokio-postgres waits for a reply as long as its socket stays open, and a server host that
//! vanishes without a reset (a half-open connection, a firewall dropping packets, a proxy that
//! hangs) keeps it open for as long as the kernel does: hours. [`Connector`] opens each pooled
//! connection itself, as tokio-postgres would (each host in turn, the config's connect timeout,
//! TCP keepalive and user timeout, `target_session_attrs`), over a [`Watched`] socket that fails
//! with `TimedOut` once the server has been silent for the store's timeout while the client
//! waits on it. The connection then closes, the call fails `Unavailable` (a closed connection
//! is retryable), the pool drops the connection at its next check-out, and the front layer's
//! retry policy applies.
//!
//! Hand-written because tokio-postgres connects its own sockets and offers no read timeout;
//! `Config::connect_raw` takes any stream, so only the socket is ours.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use deadpool_postgres::Connect;
use futures::future::BoxFuture;
use socket2::{SockRef, TcpKeepalive};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::{Instant, Sleep};
use tokio_postgres::config::{Host, LoadBalanceHosts, TargetSessionAttrs};
use tokio_postgres::{Client, Config, NoTls};

/// Opens pooled connections over [`Watched`] sockets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Connector {
    /// How long the server may stay silent while the client waits on it.
    pub(crate) timeout: Duration,
}

impl Connect for Connector {
    fn connect(
        &self,
        config: &Config,
    ) -> BoxFuture<'_, Result<(Client, JoinHandle<()>), tokio_postgres::Error>> {
        let config = config.clone();
        Box::pin(async move {
            let mut last = None;
            for (host, port) in targets(&config) {
                let socket: Box<dyn Stream> = match open(&config, &host, port).await {
                    Ok(socket) => Box::new(Watched::new(socket, self.timeout)),
                    Err(e) => Box::new(Refused(Some(e))),
                };
                let (client, connection) = match config.connect_raw(socket, NoTls).await {
                    Ok(pair) => pair,
                    Err(e) => {
                        last = Some(e);
                        continue;
                    }
                };
                let task = tokio::spawn(async move {
                    // The error reaches the client as a closed connection.
                    let _ = connection.await;
                });
                if config.get_target_session_attrs() == TargetSessionAttrs::ReadWrite
                    && read_only(&client).await
                {
                    task.abort();
                    continue;
                }
                return Ok((client, task));
            }
            match last {
                Some(e) => Err(e),
                // Every host was read-only (or none was given): tokio-postgres's own answer.
                None => Err(config
                    .connect(NoTls)
                    .await
                    .err()
                    .unwrap_or_else(tokio_postgres::Error::__private_api_timeout)),
            }
        })
    }
}

/// Whether a session is read-only (a standby), for `target_session_attrs=read-write`.
async fn read_only(client: &Client) -> bool {
    match client.simple_query("SHOW transaction_read_only").await {
        Ok(messages) => messages.iter().any(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0) == Some("on"),
            _ => false,
        }),
        Err(_) => true,
    }
}

/// The hosts to try, in order (shuffled with `load_balance_hosts=random`), each with its port:
/// a `hostaddr` stands for its host's name.
fn targets(config: &Config) -> Vec<(Host, u16)> {
    let hosts = config.get_hosts();
    let addrs = config.get_hostaddrs();
    let ports = config.get_ports();
    let mut targets: Vec<(Host, u16)> = (0..hosts.len().max(addrs.len()))
        .filter_map(|i| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            let host = match addrs.get(i) {
                Some(addr) => Host::Tcp(addr.to_string()),
                None => hosts.get(i)?.clone(),
            };
            Some((host, port))
        })
        .collect();
    if config.get_load_balance_hosts() == LoadBalanceHosts::Random {
        fastrand::shuffle(&mut targets);
    }
    targets
}

/// Connects to one host within the config's connect timeout.
async fn open(config: &Config, host: &Host, port: u16) -> io::Result<Box<dyn Stream>> {
    let connect = async {
        match host {
            Host::Tcp(name) => {
                let mut last =
                    io::Error::new(io::ErrorKind::NotFound, format!("{name} has no address"));
                for addr in tokio::net::lookup_host((name.as_str(), port)).await? {
                    match TcpStream::connect(addr).await {
                        Ok(stream) => return tcp(config, stream),
                        Err(e) => last = e,
                    }
                }
                Err(last)
            }
            #[cfg(unix)]
            Host::Unix(dir) => {
                let path = dir.join(format!(".s.PGSQL.{port}"));
                let stream: Box<dyn Stream> =
                    Box::new(tokio::net::UnixStream::connect(path).await?);
                Ok(stream)
            }
        }
    };
    match config.get_connect_timeout() {
        Some(limit) => tokio::time::timeout(*limit, connect)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connection timed out"))?,
        None => connect.await,
    }
}

/// A TCP socket with the config's options, as tokio-postgres sets them.
fn tcp(config: &Config, stream: TcpStream) -> io::Result<Box<dyn Stream>> {
    stream.set_nodelay(true)?;
    let socket = SockRef::from(&stream);
    #[cfg(target_os = "linux")]
    if let Some(limit) = config.get_tcp_user_timeout() {
        socket.set_tcp_user_timeout(Some(*limit))?;
    }
    if config.get_keepalives() {
        let mut keepalive = TcpKeepalive::new().with_time(config.get_keepalives_idle());
        #[cfg(not(target_os = "windows"))]
        if let Some(interval) = config.get_keepalives_interval() {
            keepalive = keepalive.with_interval(interval);
        }
        #[cfg(not(target_os = "windows"))]
        if let Some(retries) = config.get_keepalives_retries() {
            keepalive = keepalive.with_retries(retries);
        }
        socket.set_tcp_keepalive(&keepalive)?;
    }
    Ok(Box::new(stream))
}

/// What a connection runs over: a TCP or Unix socket, boxed so one type carries both.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}

impl<S: AsyncRead + AsyncWrite + Send + Unpin> Stream for S {}

/// A socket that could not be opened: its first read or write fails with the connect error,
/// which tokio-postgres then reports (its error type has no public constructor).
struct Refused(Option<io::Error>);

impl Refused {
    fn error<T>(&mut self) -> Poll<io::Result<T>> {
        Poll::Ready(Err(self
            .0
            .take()
            .unwrap_or_else(|| io::ErrorKind::NotConnected.into())))
    }
}

impl AsyncRead for Refused {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.get_mut().error()
    }
}

impl AsyncWrite for Refused {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, _: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().error()
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().error()
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A stream that fails with `TimedOut` when the peer stays silent for `limit` while it is owed
/// an answer: bytes were written since the last bytes read, or a write cannot go out. Any
/// progress, either way, starts the wait again, so a long upload (`COPY`) or a slow but moving
/// reply never times out; a statement the server works on for longer than `limit` without a
/// word does (builds of vector indexes run on connections of their own, without a limit).
pub(crate) struct Watched<S> {
    inner: S,
    limit: Duration,
    /// Whether the peer owes an answer.
    owed: bool,
    deadline: Pin<Box<Sleep>>,
}

impl<S> Watched<S> {
    pub(crate) fn new(inner: S, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            owed: false,
            deadline: Box::pin(tokio::time::sleep(limit)),
        }
    }

    fn progress(&mut self) {
        let at = Instant::now() + self.limit;
        self.deadline.as_mut().reset(at);
    }

    /// While an answer is owed, `Err(TimedOut)` once the deadline passes (else the waker is
    /// registered with it).
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if self.owed && self.deadline.as_mut().poll(cx).is_ready() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the server sent nothing for {:?}", self.limit),
            ));
        }
        Ok(())
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if result.is_ok() && buf.filled().len() > before {
                    this.owed = false;
                    this.progress();
                }
                Poll::Ready(result)
            }
            Poll::Pending => match this.check(cx) {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(result) => {
                if matches!(result, Ok(n) if n > 0) {
                    this.owed = true;
                    this.progress();
                    // Register this task with the new deadline now: tokio-postgres may poll
                    // its read before its write and then wait, and a read that never comes
                    // would otherwise leave no one to notice the deadline passing.
                    let _ = this.deadline.as_mut().poll(cx);
                }
                Poll::Ready(result)
            }
            Poll::Pending => {
                if !this.owed {
                    this.owed = true;
                    this.progress();
                }
                match this.check(cx) {
                    Ok(()) => Poll::Pending,
                    Err(e) => Poll::Ready(Err(e)),
                }
            }
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Ready(result) => Poll::Ready(result),
            Poll::Pending => match this.check(cx) {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_silent_peer_times_out_only_while_it_owes_an_answer() {
        let (client, mut server) = tokio::io::duplex(1024);
        let mut watched = Watched::new(client, Duration::from_secs(5));
        let mut buf = [0u8; 16];
        // Idle and owed nothing: a read waits past the limit.
        let idle = tokio::time::timeout(Duration::from_mins(1), watched.read(&mut buf)).await;
        assert!(idle.is_err(), "an idle connection never times out");
        // Asked, and answered: no error.
        watched.write_all(b"ping").await.unwrap();
        server.write_all(b"pong").await.unwrap();
        assert_eq!(watched.read(&mut buf).await.unwrap(), 4);
        // Asked, and silent: TimedOut after the limit.
        watched.write_all(b"ping").await.unwrap();
        let started = Instant::now();
        let silent = watched.read(&mut buf).await.unwrap_err();
        assert_eq!(silent.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        drop(server);
    }

    /// As tokio-postgres's connection polls: its read (pending: nothing is owed yet), then its
    /// write, then it waits to be woken. The deadline must wake it: before it did, a query on
    /// a silent server hung whenever no other poll came after the write.
    #[tokio::test(start_paused = true)]
    async fn a_write_after_a_pending_read_still_times_out() {
        let (client, server) = tokio::io::duplex(1024);
        let mut watched = Watched::new(client, Duration::from_secs(5));
        let mut wrote = false;
        let started = Instant::now();
        let connection = std::future::poll_fn(|cx| {
            let mut buf = [0u8; 16];
            let mut buf = ReadBuf::new(&mut buf);
            if let Poll::Ready(result) = Pin::new(&mut watched).poll_read(cx, &mut buf) {
                return Poll::Ready(result);
            }
            if !wrote {
                wrote = true;
                assert!(Pin::new(&mut watched).poll_write(cx, b"query").is_ready());
            }
            Poll::Pending
        });
        let outcome = tokio::time::timeout(Duration::from_mins(1), connection)
            .await
            .expect("the deadline woke the connection");
        assert_eq!(outcome.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        drop(server);
    }
}
