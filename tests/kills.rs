//! Killed processes: a child (`kill-writer`) appends batches and remembers facts in a loop on
//! SQLite, PostgreSQL or Redis and is SIGKILLed at a random moment, again and again; after each
//! kill the store is opened afresh and every acknowledged batch is there exactly once, no batch
//! is there in part, seqs are contiguous, and every acknowledged fact is there once
//! ([`mnemix_testkit::kills`]; libSQL's own kill test is in mnemix-libsql).
//!
//! `MNEMIX_KILLS=N` kills N times per backend (default 10: `cargo xtask reliability` runs 100);
//! `MNEMIX_FAULTS_REPORT=FILE` appends one JSON line per backend (RELIABILITY.md's figures).

use std::process::Command;

use mnemix::Scope;
use mnemix_testkit::kills::{kill_again_and_again, kills_from_env};
use mnemix_tests::Server;

async fn kills_on(backend: &str, url: &str) {
    let dir = std::env::temp_dir().join(mnemix_tests::unique(&format!("kills-{backend}")));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let subject = mnemix_tests::unique("kills");
    let scope = Scope::new("faults", subject.as_str()).expect("a scope");
    let spawn = |from: u64, acks: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_kill-writer"))
            .args([url, "faults", &subject, &from.to_string()])
            .arg(acks)
            .spawn()
            .expect("the writer starts")
    };
    let reopen = || async {
        mnemix::open(url)
            .await
            .expect("the store reopens")
            .backend()
    };
    let tally =
        kill_again_and_again(kills_from_env(), &scope, &dir.join("acks"), spawn, reopen).await;
    let line = tally.to_json(backend);
    eprintln!("kills on {backend}: {line}");
    mnemix_tests::report(&[line]);
    let _ = std::fs::remove_dir_all(&dir);
    tally.assert_clean(backend);
}

#[tokio::test]
async fn a_killed_sqlite_writer_loses_and_tears_nothing() {
    let dir = std::env::temp_dir().join(mnemix_tests::unique("kills-db"));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let url = format!("sqlite://{}", dir.join("memory.db").display());
    kills_on("sqlite", &url).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_killed_postgres_writer_loses_and_tears_nothing() {
    if let Some(url) = Server::Postgres.url("kills on postgres") {
        let url = mnemix_tests::with_param(&url, "schema", "faults");
        kills_on("postgres", &url).await;
    }
}

#[tokio::test]
async fn a_killed_redis_writer_loses_and_tears_nothing() {
    if let Some(url) = Server::Redis.url("kills on redis") {
        let url = mnemix_tests::with_param(&url, "prefix", "faults");
        kills_on("redis", &url).await;
    }
}
