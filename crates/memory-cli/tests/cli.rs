//! The `agent-memory` binary end to end: the demo twice on one folder, the conformance command,
//! and a clear refusal for a backend that is not compiled in.

use std::path::Path;
use std::process::{Command, Output};

fn agent_memory(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agent-memory"))
        .args(args)
        .current_dir(dir)
        .env_remove("AGENT_MEMORY_URL")
        .env("NO_COLOR", "1")
        .output()
        .expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn demo_runs_twice_and_the_second_run_finds_the_first_runs_data() {
    let dir = tempfile::tempdir().unwrap();
    let first = agent_memory(dir.path(), &["demo"]);
    assert!(
        first.status.success(),
        "{}{}",
        stdout(&first),
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(stdout(&first).contains("run 1"), "{}", stdout(&first));
    assert!(dir.path().join(".agent-memory/memory.db").exists());

    let second = agent_memory(dir.path(), &["demo"]);
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let text = stdout(&second);
    assert!(text.contains("run 2"), "{text}");
    assert!(
        text.contains("found 2 conversations and 8 messages of ada"),
        "{text}"
    );
    assert!(text.contains("already known (deduplicated)"), "{text}");

    let listed = agent_memory(
        dir.path(),
        &[
            "--namespace",
            "demo",
            "conversations",
            "list",
            "--subject",
            "ada",
        ],
    );
    let listing = stdout(&listed);
    assert!(
        listing.contains("trip-1") && listing.contains("trip-2"),
        "{listing}"
    );
}

#[test]
fn conformance_command_prints_the_matrix_and_summary() {
    let dir = tempfile::tempdir().unwrap();
    let run = agent_memory(dir.path(), &["conformance", "--url", "memory://"]);
    let text = stdout(&run);
    assert!(run.status.success(), "{text}");
    let summary = text.lines().last().unwrap();
    assert!(
        summary.starts_with("memory: ") && summary.contains(" passed, 0 failed, "),
        "{summary}"
    );
    assert!(
        text.contains("conversation") && text.contains("skipped"),
        "{text}"
    );
}

#[test]
fn a_backend_that_is_not_compiled_in_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let run = agent_memory(
        dir.path(),
        &[
            "--url",
            "redis+cluster://127.0.0.1:7000",
            "stats",
            "--subject",
            "x",
        ],
    );
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("redis-cluster backend is not in this build"),
        "{err}"
    );
}
