//! The VoltAgent peer: its `@voltagent/libsql` adapters in a Node process of ours
//! (`voltagent/peer.mjs`), which times each round itself and reports the latencies, so the
//! pipe between the processes costs the peer nothing.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Mutex;

use crate::Round;

/// The peer's name in the tables. Its appends run at our stores' durability
/// (`synchronous=NORMAL` in WAL), the setting its ratio to ours is taken at.
pub const NAME: &str = "VoltAgent @voltagent/libsql 2.1.2";

/// The peer's appends as it ships: WAL with SQLite's default `synchronous=FULL`.
pub const SHIPPED: &str = "VoltAgent @voltagent/libsql 2.1.2, as shipped (synchronous=FULL)";

/// A running peer process.
pub struct VoltAgent {
    io: Mutex<(ChildStdin, Lines<BufReader<ChildStdout>>)>,
    _child: Child,
}

impl VoltAgent {
    /// Starts `node peer.mjs` in `install` (where `cargo xtask bench` installed the packages
    /// and the script), with its databases in `work`.
    pub async fn start(install: &Path, work: &Path) -> Result<Self, String> {
        let work = std::path::absolute(work).map_err(|e| e.to_string())?;
        // Its stderr (VoltAgent's core warns there that it cannot refresh a model registry
        // over the network) goes to a log beside its databases.
        let log = std::fs::File::create(work.join("voltagent-peer.log"))
            .map_err(|e| format!("cannot create the peer's log: {e}"))?;
        let mut child = Command::new("node")
            .arg("peer.mjs")
            .current_dir(install)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start node (the VoltAgent peer needs Node.js): {e}"))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped")).lines();
        let peer = Self {
            io: Mutex::new((stdin, stdout)),
            _child: child,
        };
        peer.call(json!({ "op": "open", "dir": work })).await?;
        Ok(peer)
    }

    /// Sends one request and waits for its reply.
    pub async fn call(&self, request: Value) -> Result<Value, String> {
        let mut io = self.io.lock().await;
        let (stdin, stdout) = &mut *io;
        let mut line = request.to_string();
        line.push('\n');
        stdin
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("the VoltAgent peer stopped: {e}"))?;
        loop {
            let line = stdout
                .next_line()
                .await
                .map_err(|e| e.to_string())?
                .ok_or("the VoltAgent peer exited")?;
            // Anything else on stdout is a library's log line.
            if let Some(reply) = line.strip_prefix("@@") {
                let reply: Value = serde_json::from_str(reply).map_err(|e| e.to_string())?;
                if reply["ok"].as_bool() == Some(true) {
                    return Ok(reply);
                }
                return Err(format!("VoltAgent peer: {}", reply["error"]));
            }
        }
    }

    /// A request whose reply is a timed round.
    pub async fn round(&self, request: Value) -> Round {
        let reply = self.call(request).await.expect("a VoltAgent round");
        round_of(&reply)
    }
}

/// The round in a reply: `latencies` and `elapsed`, in microseconds.
pub fn round_of(reply: &Value) -> Round {
    let micros = |v: &Value| Duration::from_secs_f64(v.as_f64().unwrap_or(0.0) / 1e6);
    Round {
        latencies: reply["latencies"]
            .as_array()
            .map(|l| l.iter().map(micros).collect())
            .unwrap_or_default(),
        elapsed: micros(&reply["elapsed"]),
    }
}
