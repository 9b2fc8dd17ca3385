//! The `mnemix` binary of a libSQL build end to end (`cargo test -p mnemix-cli
//! --no-default-features --features libsql`; `cargo xtask ci` runs it): the demo twice on the
//! default libSQL file, then export → import into another file → verify.
#![cfg(feature = "libsql")]

use std::path::Path;
use std::process::{Command, Output};

fn mnemix(dir: &Path, args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_mnemix"))
        .args(args)
        .current_dir(dir)
        .env_remove("MNEMIX_URL")
        .env("NO_COLOR", "1")
        .output()
        .expect("the binary runs");
    assert!(
        output.status.success(),
        "mnemix {args:?}: {}{}",
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
    assert!(stdout(&mnemix(dir.path(), &["demo"])).contains("run 1"));
    assert!(dir.path().join(".mnemix/mnemix-libsql.db").exists());
    let second = stdout(&mnemix(dir.path(), &["demo"]));
    assert!(
        second.contains("found 2 conversations and 8 messages of ada"),
        "{second}"
    );
    let source = "file:./.mnemix/mnemix-libsql.db";
    mnemix(dir.path(), &["export", "--output", "dump.jsonl"]);
    mnemix(
        dir.path(),
        &["--url", "file:imported.db", "import", "dump.jsonl"],
    );
    let verified = stdout(&mnemix(
        dir.path(),
        &["verify", "--from", source, "--to", "file:imported.db"],
    ));
    assert!(
        verified.contains("every count and SHA-256 matches"),
        "{verified}"
    );
    let stats = stdout(&mnemix(dir.path(), &["--url", "file:imported.db", "stats"]));
    assert!(stats.contains("messages"), "{stats}");
}
