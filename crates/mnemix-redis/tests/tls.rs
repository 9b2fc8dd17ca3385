//! `rediss://` (feature `tls`): a TLS-only `redis-server` of this test's own, with a
//! certificate from a throwaway CA made by the `openssl` command. A client that trusts the CA
//! stores and reads; one that does not is refused at open.
//!
//! Without `redis-server` or `openssl` it is a named skip, unless `MNEMIX_TEST_REQUIRE` names
//! redis.

#![cfg(feature = "tls")]

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mnemix_conformance::is_required;
use mnemix_core::{AppendOptions, ConversationStore, LoadOptions, Message, NewConversation, Scope};
use mnemix_redis::RedisStore;

/// Kills the server and removes its directory on drop.
struct Server {
    child: Child,
    dir: std::path::PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run(dir: &Path, args: &[&str]) -> std::io::Result<()> {
    let status = Command::new(args[0])
        .args(&args[1..])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("{args:?} failed: {status}")))
    }
}

/// A CA and a server certificate for 127.0.0.1 signed by it, then a TLS-only server.
fn start(port: u16) -> std::io::Result<Server> {
    let dir = std::env::temp_dir().join(format!("mnemix-redis-tls-{port}"));
    std::fs::create_dir_all(&dir)?;
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let ca = [
        &["openssl", "req", "-x509"][..],
        &ec,
        &[
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "1",
            "-subj",
            "/CN=mnemix test CA",
        ],
    ]
    .concat();
    run(&dir, &ca)?;
    let request = [
        &["openssl", "req"][..],
        &ec,
        &[
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    ]
    .concat();
    run(&dir, &request)?;
    std::fs::write(dir.join("san.cnf"), "subjectAltName=IP:127.0.0.1\n")?;
    run(
        &dir,
        &[
            "openssl",
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "1",
            "-extfile",
            "san.cnf",
        ],
    )?;
    let child = Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--tls-cert-file",
            "server.crt",
            "--tls-key-file",
            "server.key",
            "--tls-ca-cert-file",
            "ca.crt",
            "--tls-auth-clients",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .current_dir(&dir)
        .stdout(Stdio::null())
        .spawn()?;
    let server = Server { child, dir };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err(std::io::Error::other("redis-server did not come up"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(server)
}

#[tokio::test]
async fn rediss_stores_through_a_trusted_certificate_and_refuses_an_unknown_one() {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a spare port");
    let server = match start(port) {
        Ok(server) => server,
        Err(e) if !is_required("redis") => {
            eprintln!("SKIP redis::rediss_stores_through_a_trusted_certificate_and_refuses_an_unknown_one: {e}");
            return;
        }
        Err(e) => panic!("redis is required and a TLS redis-server cannot run: {e}"),
    };
    let url = format!("rediss://127.0.0.1:{port}");

    // The system's roots do not know the throwaway CA: refused at open, with the reason.
    let refused = RedisStore::builder().url(&url).open().await.unwrap_err();
    assert!(
        refused.to_string().to_lowercase().contains("certificate"),
        "{refused}"
    );

    let trusted = redis::Client::build_with_tls(
        url.as_str(),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(std::fs::read(server.dir.join("ca.crt")).unwrap()),
        },
    )
    .unwrap();
    let store = RedisStore::builder()
        .client(trusted)
        .prefix(&common::scenario_prefix())
        .open()
        .await
        .unwrap();
    let scope = Scope::new("redis-tests", "tls").unwrap();
    let thread = store
        .create_conversation(&scope, NewConversation::default())
        .await
        .unwrap();
    store
        .append(
            &scope,
            &thread.id,
            vec![Message::user("over TLS")],
            AppendOptions::default(),
        )
        .await
        .unwrap();
    let stored = store
        .load(&scope, &thread.id, LoadOptions::raw())
        .await
        .unwrap();
    assert_eq!(stored.len(), 1);
}
