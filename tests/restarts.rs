//! The server killed and restarted under load: four writers and two readers on one
//! conversation (the history checker's workload) while the server's container is SIGKILLed and
//! started again, three times. Writers retry as callers do; when the run ends,
//! [`mnemix_conformance::history::check`] must find no acknowledged append lost, none twice, no
//! partial batch, every read a prefix of the final order: what the server acknowledged, it kept
//! through the crash (PostgreSQL with `fsync`, Redis with `appendfsync always`).
//!
//! It needs a server it may kill: `MNEMIX_RESTART_POSTGRES_CONTAINER` and
//! `MNEMIX_RESTART_REDIS_CONTAINER` name the Docker containers behind `MNEMIX_TEST_POSTGRES_URL`
//! and `MNEMIX_TEST_REDIS_URL` (`cargo xtask reliability` sets them to the compose stack's);
//! without them it is a named skip. `MNEMIX_FAULTS_REPORT=FILE` appends its figures.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mnemix::{NewConversation, OpenOptions, RetryPolicy, Scope};
use mnemix_conformance::history::{record, Workload};
use mnemix_tests::{with_param, Server};

const RESTARTS: usize = 3;

fn docker(args: &[&str]) {
    let status = Command::new("docker")
        .args(args)
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("cannot run docker {args:?}: {e}"));
    assert!(status.success(), "docker {args:?} failed ({status})");
}

async fn restarts_under_load(server: Server) {
    let tests = format!("server restarts on {}", server.name());
    let variable = format!(
        "MNEMIX_RESTART_{}_CONTAINER",
        server.name().to_ascii_uppercase()
    );
    let Ok(container) = std::env::var(&variable) else {
        mnemix_conformance::skip(
            "restarts",
            &tests,
            &format!("{variable} names no container this test may kill"),
        );
        return;
    };
    let Some(url) = server.url(&tests) else {
        return;
    };
    let url = match server {
        Server::Postgres => with_param(&url, "schema", "restarts"),
        Server::Redis => with_param(&url, "prefix", "restarts"),
    };
    // Few retries in the store, many in the workload (every 20 ms, 150 times: longer than a
    // restart), so that the failures reach the history and show the restarts were felt.
    let retry = RetryPolicy {
        attempts: 2,
        first_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(50),
    };
    let store = OpenOptions::new(&url)
        .retry(retry)
        .open()
        .await
        .expect("the store opens");
    let scope = Scope::new("faults", mnemix_tests::unique("restarts")).expect("a valid scope");
    let conversation = store
        .create_conversation(&scope, NewConversation::default())
        .await
        .expect("a conversation");
    // 500 batches per writer outlast three restarts on either server (checked below).
    let workload = Workload {
        batches: 500,
        attempts: 150,
        ..Workload::default()
    };
    let killer = {
        let container = container.clone();
        tokio::task::spawn_blocking(move || {
            let mut downtime = Duration::ZERO;
            for _ in 0..RESTARTS {
                std::thread::sleep(Duration::from_millis(300 + fastrand::u64(0..700)));
                let down = Instant::now();
                docker(&["kill", "--signal", "KILL", &container]);
                docker(&["start", &container]);
                downtime += down.elapsed();
            }
            downtime
        })
    };
    let started = Instant::now();
    let backend = store.backend();
    let history = tokio::time::timeout(
        Duration::from_mins(5),
        record(backend, scope.clone(), conversation.id.clone(), workload),
    )
    .await;
    let workload_seconds = started.elapsed().as_secs_f64();
    let under_load = killer.is_finished();
    let downtime = killer.await.expect("the killer");
    let mut history = history.expect("the workload ends within 5 minutes of restarts");
    let row = [
        ("test", "restarts".into()),
        ("backend", server.name().into()),
        ("restarts", RESTARTS.into()),
        (
            "seconds_down",
            format!("{:.1}", downtime.as_secs_f64()).into(),
        ),
        ("seconds", format!("{workload_seconds:.1}").into()),
    ];
    let anomalies =
        mnemix_tests::judge(&mut history, &store, &scope, &conversation.id, &tests, row).await;
    assert!(
        under_load,
        "the workload ended before the last restart: give it more batches"
    );
    assert_eq!(anomalies, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_keeps_what_it_acknowledged_through_restarts() {
    restarts_under_load(Server::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_keeps_what_it_acknowledged_through_restarts() {
    restarts_under_load(Server::Redis).await;
}
