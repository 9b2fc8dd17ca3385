//! A fault-injecting TCP proxy for the tests that cut a store's connection to its server.
//!
//! [`FaultProxy`] sits between a store and PostgreSQL or Redis and forwards whole protocol
//! messages (it parses the client's side of the wire: PostgreSQL's frontend messages, Redis's
//! RESP commands), so a fault lands exactly on a message boundary. Armed with
//! [`FaultProxy::arm`], it counts the client messages that cross it from then on, over every
//! connection, and on the `n`-th one:
//!
//! - [`Fault::Drop`] closes that connection instead of forwarding the message: the server saw
//!   messages `1..n` and nothing more;
//! - [`Fault::LoseReply`] forwards the message, then closes the connection when the server
//!   answers (or after 250 ms): the server did the work, the client never hears of it;
//! - [`Fault::Delay`] holds the message back for a while, then forwards it and goes on;
//! - [`Fault::Silence`] swallows that message and everything after it on that connection, in
//!   both directions, and keeps the connection open: a server gone without a reset;
//! - [`Fault::Blackhole`] does the same on every connection, those opened later included: a
//!   server that accepts connections and never answers;
//! - [`Fault::Lose`] discards that message and a few after it, on whichever connections carry
//!   them, and forwards the rest, every connection still open: requests that never reach the
//!   server on a connection that stays up (to the client, as if their answers were lost).
//!
//! One arm, one fault; [`FaultProxy::disarm`] says whether it fired, and ends a blackhole. Cutting at `n = 1, 2, …`
//! until an operation completes without the fault firing tries every boundary in turn.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The wire protocol whose client messages the proxy counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// PostgreSQL's frontend protocol (v3): untyped startup messages, then typed ones.
    Postgres,
    /// Redis's RESP: each command is one array of bulk strings (or one inline line).
    Redis,
}

/// What happens to the armed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Close the connection instead of forwarding the message.
    Drop,
    /// Forward the message, then close the connection before the server's answer reaches the
    /// client.
    LoseReply,
    /// Forward the message after this delay (a stall when long), then go on.
    Delay(Duration),
    /// Forward nothing more on this connection, either way, and never close it.
    Silence,
    /// Forward nothing more on any connection, either way, new ones included, and close none,
    /// until [`FaultProxy::disarm`].
    Blackhole,
    /// Discard this many client messages (this one and the next), then forward again; no
    /// connection is closed.
    Lose(u64),
}

#[derive(Default)]
struct State {
    /// `(messages still to pass before the fault, the fault)`.
    armed: Option<(u64, Fault)>,
    fired: bool,
    /// Connections ended by [`FaultProxy::cut_all`] so far.
    severed: u64,
    /// A [`Fault::Blackhole`] in force.
    blackhole: bool,
    /// Client messages a [`Fault::Lose`] still discards.
    losing: u64,
}

/// A TCP proxy in front of one server; it stops when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    /// Bumped by [`FaultProxy::cut_all`]; every connection watches it.
    cut: watch::Sender<u64>,
    accept: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut_all();
    }
}

impl FaultProxy {
    /// Listens on a spare loopback port and forwards each connection to `upstream`.
    pub async fn start(upstream: SocketAddr, protocol: Protocol) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let (cut, watching) = watch::channel(0);
        let shared = Arc::clone(&state);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let state = Arc::clone(&shared);
                let watching = watching.clone();
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(upstream).await {
                        relay(client, server, protocol, state, watching).await;
                    }
                });
            }
        });
        Ok(Self {
            addr,
            state,
            cut,
            accept,
        })
    }

    /// The address to connect to instead of the server's.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The fault hits the `n`-th client message from now (`n` ≥ 1), on whichever connection
    /// carries it.
    pub fn arm(&self, n: u64, fault: Fault) {
        let mut state = self.state.lock().expect("proxy state");
        state.armed = Some((n.max(1) - 1, fault));
        state.fired = false;
    }

    /// Disarms, and ends a blackhole; whether the fault fired since [`arm`](Self::arm).
    pub fn disarm(&self) -> bool {
        let mut state = self.state.lock().expect("proxy state");
        state.armed = None;
        state.blackhole = false;
        std::mem::take(&mut state.fired)
    }

    /// How many open connections [`cut_all`](Self::cut_all) has ended so far.
    pub fn severed(&self) -> u64 {
        self.state.lock().expect("proxy state").severed
    }

    /// Closes every open connection now (new ones are accepted as usual).
    pub fn cut_all(&self) {
        self.cut.send_modify(|epoch| *epoch += 1);
    }
}

/// What to do with one complete client message.
enum Verdict {
    Forward,
    Drop,
    LoseReply,
    Delay(Duration),
    Silence,
    Discard,
}

fn judge(state: &Mutex<State>) -> Verdict {
    let mut state = state.lock().expect("proxy state");
    if state.blackhole {
        return Verdict::Silence;
    }
    if state.losing > 0 {
        state.losing -= 1;
        return Verdict::Discard;
    }
    match state.armed {
        None => Verdict::Forward,
        Some((0, fault)) => {
            state.armed = None;
            state.fired = true;
            match fault {
                Fault::Drop => Verdict::Drop,
                Fault::LoseReply => Verdict::LoseReply,
                Fault::Delay(d) => Verdict::Delay(d),
                Fault::Silence => Verdict::Silence,
                Fault::Blackhole => {
                    state.blackhole = true;
                    Verdict::Silence
                }
                Fault::Lose(messages) => {
                    state.losing = messages.saturating_sub(1);
                    Verdict::Discard
                }
            }
        }
        Some((left, fault)) => {
            state.armed = Some((left - 1, fault));
            Verdict::Forward
        }
    }
}

async fn relay(
    mut client: TcpStream,
    mut server: TcpStream,
    protocol: Protocol,
    state: Arc<Mutex<State>>,
    mut cut: watch::Receiver<u64>,
) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    // Set once the answer to a LoseReply message must not reach the client.
    let losing = AtomicBool::new(false);
    // Set once the connection goes silent: the server's bytes stop here too.
    let silent = AtomicBool::new(false);
    let upstream = async {
        let mut framer = Framer::new(protocol);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let read = client_read.read(&mut buf).await.unwrap_or(0);
            if read == 0 {
                return;
            }
            framer.push(&buf[..read]);
            while let Some(message) = framer.next_message() {
                match judge(&state) {
                    Verdict::Forward => {}
                    Verdict::Discard => continue,
                    Verdict::Drop => return,
                    Verdict::LoseReply => {
                        losing.store(true, Ordering::SeqCst);
                        let _ = server_write.write_all(&message).await;
                        // The answer ends the connection (below); a message the server
                        // answers only later (a Parse before its Sync) is cut after a while.
                        tokio::time::sleep(Duration::from_millis(250)).await;
                        return;
                    }
                    Verdict::Delay(d) => tokio::time::sleep(d).await,
                    Verdict::Silence => {
                        silent.store(true, Ordering::SeqCst);
                        // Read on, so the client's writes go out; forward nothing.
                        while client_read.read(&mut buf).await.unwrap_or(0) > 0 {}
                        return;
                    }
                }
                if server_write.write_all(&message).await.is_err() {
                    return;
                }
            }
        }
    };
    let downstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let read = server_read.read(&mut buf).await.unwrap_or(0);
            if silent.load(Ordering::SeqCst) {
                if read == 0 {
                    // The server hung up: the client must still hear nothing.
                    std::future::pending::<()>().await;
                }
                continue;
            }
            if read == 0 || losing.load(Ordering::SeqCst) {
                // The answer to the lost message (or anything after it) is dropped here.
                return;
            }
            if client_write.write_all(&buf[..read]).await.is_err() {
                return;
            }
        }
    };
    // A cut (or the proxy dropped) ends every connection open at the time: cuts made before
    // this connection opened are seen already.
    cut.borrow_and_update();
    let cut_now = async {
        let _ = cut.changed().await;
    };
    // Whichever side ends first ends the connection: both sockets close when dropped.
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
        () = cut_now => state.lock().expect("proxy state").severed += 1,
    }
}

/// Splits the client's byte stream into whole protocol messages.
struct Framer {
    protocol: Protocol,
    pending: Vec<u8>,
    /// PostgreSQL: the next message is an untyped startup-phase message.
    untyped: bool,
}

impl Framer {
    fn new(protocol: Protocol) -> Self {
        Self {
            protocol,
            pending: Vec::new(),
            untyped: true,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    fn next_message(&mut self) -> Option<Vec<u8>> {
        let len = match self.protocol {
            Protocol::Postgres => self.postgres_len()?,
            Protocol::Redis => resp_len(&self.pending)?,
        };
        Some(self.pending.drain(..len).collect())
    }

    fn postgres_len(&mut self) -> Option<usize> {
        // SSLRequest and GSSENCRequest are followed by another untyped message.
        const SSL_REQUEST: usize = 80_877_103;
        const GSSENC_REQUEST: usize = 80_877_104;
        let int = |at: usize| -> Option<usize> {
            let bytes: [u8; 4] = self.pending.get(at..at + 4)?.try_into().ok()?;
            Some(u32::from_be_bytes(bytes) as usize)
        };
        if self.untyped {
            let len = int(0)?;
            if self.pending.len() < len {
                return None;
            }
            let code = int(4)?;
            self.untyped = code == SSL_REQUEST || code == GSSENC_REQUEST;
            Some(len)
        } else {
            let len = 1 + int(1)?;
            (self.pending.len() >= len).then_some(len)
        }
    }
}

/// The length of the first whole RESP command in `bytes`, if it is all there.
fn resp_len(bytes: &[u8]) -> Option<usize> {
    let line_end = |from: usize| -> Option<usize> {
        bytes
            .get(from..)?
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|p| from + p)
    };
    let number = |from: usize, to: usize| -> Option<usize> {
        std::str::from_utf8(&bytes[from..to]).ok()?.parse().ok()
    };
    if bytes.first()? != &b'*' {
        // An inline command: one line.
        return line_end(0).map(|end| end + 2);
    }
    let end = line_end(1)?;
    let count = number(1, end)?;
    let mut at = end + 2;
    for _ in 0..count {
        if bytes.get(at)? != &b'$' {
            return None;
        }
        let end = line_end(at + 1)?;
        let len = number(at + 1, end)?;
        at = end + 2 + len + 2;
        if bytes.len() < at {
            return None;
        }
    }
    Some(at)
}

/// Appends `rows` as JSON lines to the file `MNEMIX_FAULTS_REPORT` names, when it is set: the
/// figures `cargo xtask reliability` puts in RELIABILITY.md.
pub fn report(rows: &[serde_json::Value]) {
    use std::io::Write as _;
    let Some(path) = std::env::var_os("MNEMIX_FAULTS_REPORT") else {
        return;
    };
    let mut lines = String::new();
    for row in rows {
        lines.push_str(&row.to_string());
        lines.push('\n');
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(lines.as_bytes()))
        .expect("the report is written");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp_commands_are_framed_whole() {
        let two = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n";
        assert_eq!(resp_len(two), Some(20));
        assert_eq!(resp_len(&two[20..]), Some(14));
        assert_eq!(resp_len(&two[..19]), None, "a partial command waits");
        assert_eq!(resp_len(b"PING\r\n"), Some(6));
    }

    #[test]
    fn postgres_messages_are_framed_whole() {
        let mut framer = Framer::new(Protocol::Postgres);
        // SSLRequest, then a startup message, then a typed Sync.
        framer.push(&[0, 0, 0, 8, 4, 210, 22, 47]);
        framer.push(&[0, 0, 0, 9, 0, 3, 0, 0, 0]);
        framer.push(&[b'S', 0, 0, 0, 4, b'X', 0]);
        assert_eq!(framer.next_message().map(|m| m.len()), Some(8));
        assert_eq!(framer.next_message().map(|m| m.len()), Some(9));
        assert_eq!(framer.next_message(), Some(vec![b'S', 0, 0, 0, 4]));
        assert_eq!(framer.next_message(), None, "a partial Terminate waits");
    }
}
