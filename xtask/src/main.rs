//! `cargo xtask`: the project's tasks.
//!
//! - `cargo xtask test` provisions what the tests can use (given URLs, running local services,
//!   `docker compose`, or local binaries on spare ports) and runs the whole workspace's tests.
//! - `cargo xtask conformance --backend NAME` runs the conformance suite for one backend, prints
//!   a matrix by contract and ends with `NAME: N passed, M failed, K skipped`.
//! - `cargo xtask ci` = format check + clippy `-D warnings` + rustdoc `-D warnings` + `test`.
//!
//! Arguments are parsed by hand: three commands and one flag do not justify compiling clap into
//! every `cargo xtask` call.

mod services;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// Backends whose conformance suite `xtask conformance` can run: name → (package, test target).
const BACKENDS: &[(&str, &str, &str)] = &[
    ("memory", "memory-conformance", "memory"),
    ("counting", "custom-adapter-example", "conformance"),
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(),
        Some("conformance") => conformance(&args[1..]),
        Some("ci") => ci(),
        _ => Err(usage()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> String {
    let names: Vec<&str> = BACKENDS.iter().map(|(n, _, _)| *n).collect();
    format!(
        "usage: cargo xtask test | conformance --backend <{}> | ci",
        names.join("|")
    )
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

fn cargo() -> Command {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.current_dir(workspace_root());
    command
}

fn run(mut command: Command) -> Result<(), String> {
    let shown = format!("{command:?}");
    let status = command
        .status()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed ({status})"))
    }
}

/// Property tests run 10,000 cases unless told otherwise.
fn with_test_env(command: &mut Command, services: &services::Provisioned) {
    if std::env::var_os("PROPTEST_CASES").is_none() {
        command.env("PROPTEST_CASES", "10000");
    }
    for (var, url) in &services.urls {
        command.env(var, url);
    }
}

fn test() -> Result<(), String> {
    let services = services::provision();
    let mut command = cargo();
    command.args(["test", "--workspace", "--all-targets"]);
    with_test_env(&mut command, &services);
    run(command)?;
    let mut doc = cargo();
    doc.args(["test", "--workspace", "--doc"]);
    run(doc)?;
    // Print each suite's matrix so the log ends with the per-backend counts.
    for (name, _, _) in BACKENDS {
        conformance_with(name, &services)?;
    }
    Ok(())
}

fn ci() -> Result<(), String> {
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);
    run(fmt)?;
    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    run(clippy)?;
    let mut doc = cargo();
    doc.args(["doc", "--no-deps", "--workspace"])
        .env("RUSTDOCFLAGS", "-D warnings");
    run(doc)?;
    test()
}

fn conformance(args: &[String]) -> Result<(), String> {
    let backend = match args {
        [flag, name] if flag == "--backend" => name.as_str(),
        [flag] if flag.starts_with("--backend=") => &flag["--backend=".len()..],
        _ => return Err(usage()),
    };
    let services = services::provision();
    conformance_with(backend, &services)
}

fn conformance_with(backend: &str, services: &services::Provisioned) -> Result<(), String> {
    let (_, package, target) = BACKENDS
        .iter()
        .find(|(name, _, _)| *name == backend)
        .ok_or_else(usage)?;
    let report = std::env::temp_dir().join(format!(
        "memory-conformance-{backend}-{}.jsonl",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&report);
    let mut command = cargo();
    command.args(["test", "--quiet", "-p", package, "--test", target]);
    command.env("MEMORY_CONFORMANCE_REPORT", &report);
    with_test_env(&mut command, services);
    let output = command
        .output()
        .map_err(|e| format!("cannot run cargo test: {e}"))?;
    let text = std::fs::read_to_string(&report).unwrap_or_default();
    let _ = std::fs::remove_file(&report);

    let mut outcomes: BTreeMap<String, (String, String)> = BTreeMap::new();
    for line in text.lines() {
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("bad report line {line}: {e}"))?;
        let field = |k: &str| value[k].as_str().unwrap_or_default().to_owned();
        outcomes.insert(field("scenario"), (field("outcome"), field("reason")));
    }
    for scenario in memory_conformance::SCENARIOS {
        outcomes.entry(scenario.name.to_owned()).or_insert_with(|| {
            (
                "failed".into(),
                "did not report (build failure or crash)".into(),
            )
        });
    }

    let mut matrix: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
    let mut notes = Vec::new();
    for (scenario, (outcome, reason)) in &outcomes {
        let group = scenario.split("::").next().unwrap_or("?");
        let column = match outcome.as_str() {
            "passed" => 0,
            "skipped" => 2,
            _ => 1,
        };
        matrix.entry(group).or_default()[column] += 1;
        match column {
            1 => notes.push(format!("FAIL {scenario}: {reason}")),
            2 => notes.push(format!("SKIP {scenario}: {reason}")),
            _ => {}
        }
    }
    let totals = matrix.values().fold([0; 3], |acc, row| {
        [acc[0] + row[0], acc[1] + row[1], acc[2] + row[2]]
    });
    println!("\nconformance of the {backend} backend ({package} --test {target})");
    println!(
        "{:<16} {:>7} {:>7} {:>8}",
        "contract", "passed", "failed", "skipped"
    );
    for (group, [passed, failed, skipped]) in &matrix {
        println!("{group:<16} {passed:>7} {failed:>7} {skipped:>8}");
    }
    for note in &notes {
        println!("{note}");
    }
    if !output.status.success() && totals[1] == 0 {
        print!("{}", String::from_utf8_lossy(&output.stdout));
        eprint!("{}", String::from_utf8_lossy(&output.stderr));
    }
    println!(
        "{backend}: {} passed, {} failed, {} skipped",
        totals[0], totals[1], totals[2]
    );
    if totals[1] > 0 || !output.status.success() {
        return Err(format!("{backend} conformance failed"));
    }
    Ok(())
}
