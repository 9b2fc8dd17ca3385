//! The `agent-memory` binary of a libSQL build end to end (`cargo test -p memory-cli
//! --no-default-features --features libsql`; `cargo xtask ci` runs it): the demo twice on the
//! default libSQL file, then export → import into another file → verify.
#![cfg(feature = "libsql")]

use std::path::Path;
use std::process::{Command, Output};

fn agent_memory(dir: &Path, args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_agent-memory"))
        .args(args)
        .current_dir(dir)
        .env_remove("AGENT_MEMORY_URL")
        .env("NO_COLOR", "1")
        .output()
        .expect("the binary runs");
    assert!(
        output.status.success(),
        "agent-memory {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn demo_export_import_and_verify_on_libsql_files() {
    let dir = tempfile::tempdir().unwrap();
    assert!(stdout(&agent_memory(dir.path(), &["demo"])).contains("run 1"));
    assert!(dir.path().join(".agent-memory/memory-libsql.db").exists());
    let second = stdout(&agent_memory(dir.path(), &["demo"]));
    assert!(
        second.contains("found 2 conversations and 8 messages of ada"),
        "{second}"
    );
    let source = "file:./.agent-memory/memory-libsql.db";
    agent_memory(dir.path(), &["export", "--output", "dump.jsonl"]);
    agent_memory(
        dir.path(),
        &["--url", "file:imported.db", "import", "dump.jsonl"],
    );
    let verified = stdout(&agent_memory(
        dir.path(),
        &["verify", "--from", source, "--to", "file:imported.db"],
    ));
    assert!(
        verified.contains("every count and SHA-256 matches"),
        "{verified}"
    );
    let stats = stdout(&agent_memory(
        dir.path(),
        &["--url", "file:imported.db", "stats"],
    ));
    assert!(stats.contains("messages"), "{stats}");
}
