//! The command opens the third party's adapter by URL: its demo writes a redb file, a second
//! process reads it back.

use std::process::{Command, Output};

fn mnemix_redb(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mnemix-redb"))
        .args(args)
        .current_dir(dir)
        .env_remove("MNEMIX_URL")
        .output()
        .expect("mnemix-redb runs")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_command_opens_redb_urls_with_the_adapter_registered() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("redb://{}", dir.path().join("memory.redb").display());

    let first = stdout(&mnemix_redb(dir.path(), &["--url", &url, "demo"]));
    assert!(first.contains("run 1"), "{first}");
    let second = stdout(&mnemix_redb(dir.path(), &["--url", &url, "demo"]));
    assert!(second.contains("run 2"), "{second}");
    let stats = stdout(&mnemix_redb(dir.path(), &["--url", &url, "stats"]));
    assert!(stats.contains("redb"), "{stats}");

    // A URL of no backend here names the ones it knows, the registered one among them.
    let unknown = mnemix_redb(dir.path(), &["--url", "nope://x", "stats"]);
    assert!(!unknown.status.success());
    let said = String::from_utf8_lossy(&unknown.stderr);
    assert!(said.contains("redb://FILE"), "{said}");
}
