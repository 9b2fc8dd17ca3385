//! A Redis server killed (`SIGKILL`) and started again, three times, in the middle of a stream
//! of appends: the client reconnects by itself, every batch ends applied exactly once, and no
//! read ever sees part of a batch.
//!
//! The test runs its own `redis-server` (AOF with `appendfsync always`, in a temp dir, on a
//! spare port) so it can kill it; without the binary it is a named skip, unless
//! `MNEMIX_TEST_REQUIRE` names redis.

mod common;

use std::collections::HashSet;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mnemix_conformance::is_required;
use mnemix_core::{
    AppendOptions, ConversationStore, LoadOptions, Message, MessageId, NewConversation, Scope,
};
use mnemix_redis::RedisStore;

/// A `redis-server` of this test's own; killed and its directory removed on drop.
struct Server {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Server {
    fn start(port: u16, dir: PathBuf) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        let mut server = Self {
            port,
            dir,
            child: None,
        };
        server.spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) -> std::io::Result<()> {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ])
            .current_dir(&self.dir)
            .stdout(Stdio::null())
            .spawn()?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn message(id: &str) -> Message {
    Message {
        id: MessageId::new(id).unwrap(),
        ..Message::user(format!("text of {id}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn server_restarted_mid_stream_applies_every_batch_once() {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a spare port");
    let dir = std::env::temp_dir().join(format!("mnemix-redis-restart-{port}"));
    let mut server = match Server::start(port, dir) {
        Ok(server) => server,
        Err(e) if !is_required("redis") => {
            eprintln!("SKIP redis::server_restarted_mid_stream_applies_every_batch_once: cannot run redis-server: {e}");
            return;
        }
        Err(e) => panic!("redis is required and redis-server cannot run: {e}"),
    };
    let url = format!("redis://127.0.0.1:{port}");
    let writer = Arc::new(
        RedisStore::builder()
            .url(&url)
            .prefix(&common::scenario_prefix())
            .open()
            .await
            .expect("open"),
    );
    let scope = Scope::new("redis-tests", "restarted").unwrap();
    let thread = writer
        .create_conversation(&scope, NewConversation::default())
        .await
        .unwrap();
    let (batches, batch) = (400usize, 5usize);
    let appender = {
        let (writer, scope, id) = (writer.clone(), scope.clone(), thread.id.clone());
        tokio::spawn(async move {
            let (mut failures, mut replayed) = (0, 0);
            for n in 0..batches {
                let messages: Vec<Message> =
                    (0..batch).map(|i| message(&format!("m-{n}-{i}"))).collect();
                // A caller sends a failed batch again; the store has retried already.
                loop {
                    match writer
                        .append(&scope, &id, messages.clone(), AppendOptions::default())
                        .await
                    {
                        Ok(receipt) => {
                            // Applied before its reply was lost, then sent again.
                            replayed += usize::from(!receipt.duplicates.is_empty());
                            break;
                        }
                        Err(e) if e.is_retryable() => {
                            failures += 1;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Err(e) => panic!("append failed: {e}"),
                    }
                }
            }
            (failures, replayed)
        })
    };
    // Restart when a quarter, a half and three quarters of the batches are stored.
    let (mut restarts, mut reads) = (0, 0);
    while !appender.is_finished() {
        if let Ok(seen) = writer.load(&scope, &thread.id, LoadOptions::raw()).await {
            assert_eq!(seen.len() % batch, 0, "a read saw part of a batch");
            reads += 1;
            if restarts < 3 && seen.len() >= (restarts + 1) * batches * batch / 4 {
                server.kill();
                tokio::time::sleep(Duration::from_millis(200)).await;
                server.spawn().expect("restart redis-server");
                restarts += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let (failures, replayed) = appender.await.unwrap();
    eprintln!(
        "{restarts} restarts, {failures} appends failed and were sent again by the caller, \
         {replayed} came back as duplicates, {reads} reads"
    );
    assert_eq!(
        restarts, 3,
        "the server was restarted while appends went on"
    );
    let stored = writer
        .load(&scope, &thread.id, LoadOptions::raw())
        .await
        .unwrap();
    assert_eq!(stored.len(), batches * batch, "nothing lost, nothing twice");
    let seqs: Vec<u64> = stored.iter().map(|m| m.seq).collect();
    assert_eq!(seqs, (1..=(batches * batch) as u64).collect::<Vec<_>>());
    let ids: HashSet<&str> = stored.iter().map(|m| m.message.id.as_str()).collect();
    assert_eq!(ids.len(), batches * batch);
    for (i, m) in stored.iter().enumerate() {
        assert_eq!(
            m.message.id.as_str(),
            format!("m-{}-{}", i / batch, i % batch)
        );
    }
}
