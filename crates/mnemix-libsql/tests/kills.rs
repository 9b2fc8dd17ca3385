//! Killed processes on libSQL: a child appends batches and remembers facts in a loop and is
//! SIGKILLed at a random moment, again and again; after each kill the store is opened afresh
//! and checked against what the child acknowledged ([`mnemix_testkit::kills`], as for the
//! other backends in the workspace's `tests/kills.rs`, whose binary cannot link libSQL beside
//! sqlx's SQLite).
//!
//! The child is this test binary itself, running the ignored `writer` entry with its
//! arguments in `MNEMIX_KILL_WRITER`. `MNEMIX_KILLS=N` kills N times (default 10);
//! `MNEMIX_FAULTS_REPORT=FILE` appends the figures (RELIABILITY.md).

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use mnemix_core::{Checked, MemoryBackend, Scope};
use mnemix_libsql::LibsqlStore;
use mnemix_testkit::kills::{kill_again_and_again, kills_from_env, write_until_killed};

/// `PATH`, `SUBJECT`, `FROM` and `ACKS`, separated by tabs.
const WRITER: &str = "MNEMIX_KILL_WRITER";

async fn open(path: &Path) -> Arc<dyn MemoryBackend> {
    let store = LibsqlStore::builder()
        .path(path)
        .open()
        .await
        .expect("the store opens");
    Checked::wrap(Arc::new(store))
}

fn scope(subject: &str) -> Scope {
    Scope::new("faults", subject).expect("a scope")
}

#[tokio::test]
#[ignore = "the child process of a_killed_libsql_writer_loses_and_tears_nothing"]
async fn writer() {
    let Ok(spec) = std::env::var(WRITER) else {
        eprintln!("writer: run by a_killed_libsql_writer_loses_and_tears_nothing only");
        return;
    };
    let [path, subject, from, acks] = spec.split('\t').collect::<Vec<_>>()[..] else {
        panic!("{WRITER} holds PATH, SUBJECT, FROM and ACKS: {spec:?}");
    };
    let backend = open(Path::new(path)).await;
    let from = from.parse().expect("FROM is a batch number");
    write_until_killed(backend.as_ref(), &scope(subject), from, Path::new(acks))
        .await
        .expect("the writer writes until it is killed");
}

#[tokio::test]
async fn a_killed_libsql_writer_loses_and_tears_nothing() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("memory.db");
    let subject = format!("kills-{}", std::process::id());
    let this = std::env::current_exe().expect("the test binary");
    let spawn = |from: u64, acks: &Path| {
        let spec = format!("{}\t{subject}\t{from}\t{}", path.display(), acks.display());
        Command::new(&this)
            .args(["writer", "--exact", "--ignored"])
            .env(WRITER, spec)
            .stdout(Stdio::null())
            .spawn()
            .expect("the writer starts")
    };
    let reopen = || open(&path);
    let acks = dir.path().join("acks");
    let tally =
        kill_again_and_again(kills_from_env(), &scope(&subject), &acks, spawn, reopen).await;
    let line = tally.to_json("libsql");
    eprintln!("kills on libsql: {line}");
    mnemix_testkit::faults::report(&[line]);
    tally.assert_clean("libsql");
}
