//! `cargo xtask`: the project's tasks.
//!
//! - `cargo xtask test` provisions what the tests can use (given URLs, running local services,
//!   docker-compose.yml's stack, or local binaries on spare ports) and runs the whole
//!   workspace's tests. `--compose` runs them against the compose stack, built here and
//!   brought up first (starting `dockerd` if needed), then starts the same images through
//!   testcontainers in a test and runs the stack's `app` service; without Docker it is a named
//!   skip, or a failure when `MNEMIX_TEST_REQUIRE` names `compose`.
//! - `cargo xtask conformance --backend NAME` runs the conformance suite for one backend, prints
//!   a matrix by contract and ends with `NAME: N passed, M failed, K skipped`. With
//!   `--differential CASES` it runs only the differential suite, for CASES generated sequences
//!   per seed (`MNEMIX_DIFFERENTIAL_SEED` runs one seed instead of the fixed list).
//! - `cargo xtask models` fetches the local embedder's model (all-MiniLM-L6-v2) into
//!   `target/models`; `test` does it too.
//! - `cargo xtask bench [--quick] [--scale] [--backend A,B] [--workload W1,W2]` builds the benchmark
//!   binaries, makes the benchmark data (corpus and embeddings, cached in `target/bench-data`),
//!   then runs them: in release into `BENCHMARKS.md` and `benchmarks.json` of `docs/reports/`, or with
//!   `--quick` (small sizes, a smoke test) into `target/bench-report`, built by the same
//!   `cargo build --workspace --all-targets` as the tests so that it reuses their build. A run
//!   of named backends or workloads reports into `target/bench-report` too.
//!   `--scale` runs the cost curves (workload C1) up to 10⁶ records per subject.
//! - `cargo xtask recall --locomo PATH [--quick]` builds the `recall` binary and measures
//!   retrieval quality (Q1) on conversations in LoCoMo's layout into `RECALL.md` and
//!   `recall.json` of `docs/reports/` (with `--quick`, one conversation, into `target/bench-report`,
//!   stored on SQLite, PostgreSQL and Redis, failing unless every context is SQLite's); without
//!   a path (or `MNEMIX_LOCOMO`) it is a named skip.
//! - `cargo xtask reliability [--quick]` runs the fault tests (cut connections, killed
//!   writers, the history checker under cuts) at long-run sizes into `RELIABILITY.md`.
//! - `cargo xtask fuzz [--quick] [--target NAME,…]` runs the `mnemix-fuzz` targets under AFL++
//!   (installing cargo-afl on first use): 10 million executions each into `RELIABILITY.md` and
//!   the committed corpus, or with `--quick` a few seconds each.
//! - `cargo xtask package` checks the published crates: the declared `rust-version` is the
//!   toolchain's, no crate depends on one below it (backends on core alone, the adapter's suite
//!   without the engine), no source includes a file outside its package, and `cargo package`
//!   passes for each in dependency order.
//! - `cargo xtask ci` = format check + clippy `-D warnings` + `package` + rustdoc `-D warnings` +
//!   `test --compose` + `fuzz --quick` + `bench --quick`.
//!
//! `cargo xtask help` (or `--help` after a command) lists the commands and their flags.

mod fuzz;
mod models;
mod reliability;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

use mnemix_services::provision::{self as services, run, target_dir, workspace_root};
use mnemix_services::{compose, CONTAINER_LABEL};

/// Where the committed reports (benchmarks, recall quality, reliability) and the figures they
/// are made from live, beside the Markdown that explains them.
fn reports_dir() -> PathBuf {
    workspace_root().join("docs/reports")
}

/// Which scenarios a backend's conformance test runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Suite {
    /// The contracts' and the engine's (`mnemix-conformance` with its `engine` feature).
    Whole,
    /// The contracts' alone: what a third-party adapter adds by default.
    Contracts,
}

/// Backends whose conformance suite `xtask conformance` can run: name → (package, test target,
/// the scenarios it runs).
const BACKENDS: &[(&str, &str, &str, Suite)] = &[
    ("memory", "mnemix-conformance", "memory", Suite::Whole),
    (
        "redb",
        "custom-adapter-example",
        "conformance",
        Suite::Contracts,
    ),
    ("sqlite", "mnemix-sqlite", "conformance", Suite::Whole),
    ("postgres", "mnemix-postgres", "conformance", Suite::Whole),
    (
        "postgres-exact",
        "mnemix-postgres",
        "conformance_exact",
        Suite::Whole,
    ),
    (
        "postgres-plain",
        "mnemix-postgres",
        "conformance_plain",
        Suite::Whole,
    ),
    ("redis", "mnemix-redis", "conformance", Suite::Whole),
    (
        "redis-cluster",
        "mnemix-redis",
        "conformance_cluster",
        Suite::Whole,
    ),
    ("libsql", "mnemix-libsql", "conformance", Suite::Whole),
    (
        "libsql-scanned",
        "mnemix-libsql",
        "conformance_scanned",
        Suite::Whole,
    ),
    // Runs only with MNEMIX_TEST_LIBSQL_URL (and the `remote` feature): named skips otherwise.
    (
        "libsql-remote",
        "mnemix-libsql",
        "conformance_remote",
        Suite::Whole,
    ),
];

/// libSQL bundles its own SQLite: a crate linking it must never also pull in these, or two
/// copies of the `sqlite3_*` symbols meet in one binary (the linker may not even complain).
const LINKED_BESIDE_LIBSQL: &[&str] = &["libsqlite3-sys", "rusqlite"];

/// The project's tasks.
#[derive(clap::Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "The project's tasks"
)]
enum Task {
    /// Every test of the workspace, with the services found or started for them.
    Test {
        /// Against docker-compose.yml's stack (built and brought up here), plus the images
        /// started by testcontainers and the stack's `app` service.
        #[arg(long)]
        compose: bool,
    },
    /// One backend's conformance suite, as a matrix by contract.
    Conformance {
        /// The backend.
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(BACKENDS.iter().map(|(name, ..)| *name)))]
        backend: String,
        /// Only the differential suite, with this many generated sequences per seed.
        #[arg(long, value_name = "CASES")]
        differential: Option<u32>,
    },
    /// Fetches the local embedder's model into target/models.
    Models,
    /// Checks what publishing needs: rust-version, layering, packaged files, `cargo package`.
    Package,
    /// Format, clippy, package, rustdoc, `test --compose`, `fuzz --quick`, `bench --quick`.
    Ci,
    /// The benchmarks: into BENCHMARKS.md and benchmarks.json, or a smoke run with --quick.
    Bench {
        /// Small sizes, into target/bench-report.
        #[arg(long)]
        quick: bool,
        /// Only these backends (comma-separated), passed on to the benchmark binary; the report
        /// goes to target/bench-report.
        #[arg(long)]
        backend: Option<String>,
        /// Only these workloads (comma-separated: W1,W2,W4,W5,W9; C1 the cost curves), passed
        /// on likewise; the report goes to target/bench-report.
        #[arg(long)]
        workload: Option<String>,
        /// The cost curves (C1, unless workloads are named) up to 10⁶ records per subject.
        #[arg(long)]
        scale: bool,
    },
    /// Retrieval quality (Q1) on conversations in LoCoMo's layout, into RECALL.md.
    Recall {
        /// One conversation, into target/bench-report.
        #[arg(long)]
        quick: bool,
        /// The conversations; without them the task is a named skip.
        #[arg(long, env = "MNEMIX_LOCOMO")]
        locomo: Option<PathBuf>,
    },
    /// The fault tests at long-run sizes, into RELIABILITY.md.
    Reliability {
        /// CI's sizes, into target/bench-report.
        #[arg(long)]
        quick: bool,
    },
    /// The fuzz targets under AFL++: 10 million executions each, or a few seconds with --quick.
    Fuzz {
        /// A few seconds each.
        #[arg(long)]
        quick: bool,
        /// Only these targets (comma-separated).
        #[arg(long = "target", value_delimiter = ',', value_name = "NAME")]
        targets: Vec<String>,
    },
}

fn main() -> ExitCode {
    let result = match <Task as clap::Parser>::parse() {
        Task::Test { compose } => test(compose),
        Task::Conformance {
            backend,
            differential,
        } => conformance(&backend, differential),
        Task::Ci => ci(),
        Task::Package => package(),
        Task::Models => models::minilm().map(|dir| println!("{}", dir.display())),
        Task::Bench {
            quick,
            backend,
            workload,
            scale,
        } => {
            let workload = workload.or_else(|| scale.then(|| "C1".to_owned()));
            bench(quick, scale, backend.as_deref(), workload.as_deref())
        }
        Task::Recall { quick, locomo } => recall(quick, locomo),
        Task::Reliability { quick } => reliability::run(quick),
        Task::Fuzz { quick, targets } => fuzz::run(quick, &targets),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

/// What `cargo run` sets for the binary it runs besides `CARGO_PKG_*` (see [`cargo`]).
const GIVEN_TO_XTASK: &[&str] = &[
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_MANIFEST_LINKS",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
];

fn cargo() -> Command {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.current_dir(workspace_root());
    // `cargo xtask` is `cargo run`, which gives xtask its package's variables; a build script
    // that reruns when one of them changes (ring's: CARGO_PKG_NAME, CARGO_MANIFEST_DIR, …) would
    // see them differ from a plain `cargo test` and rebuild, and everything above it with it.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_") || GIVEN_TO_XTASK.contains(&name.as_ref()) {
            command.env_remove(name.as_ref());
        }
    }
    command
}

/// Runs a `cargo test`, relaying its output as it comes, and adds to `failed` the lines that
/// name what failed (`test NAME ... FAILED`, and cargo's `error:` lines with the targets to
/// rerun): [`test()`] says them again last, so a log cut to its tail still names the failure.
fn run_tests(mut command: Command, failed: &mut Vec<String>) -> Result<(), String> {
    use std::io::{BufRead, BufReader, Read, Write};
    /// Copies `from` to `to` line by line, keeping the lines `keep` picks.
    fn relay(from: impl Read, mut to: impl Write, keep: fn(&str) -> bool) -> Vec<String> {
        let mut kept = Vec::new();
        let mut from = BufReader::new(from);
        let mut line = Vec::new();
        while from.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            let _ = to.write_all(&line).and_then(|()| to.flush());
            let text = String::from_utf8_lossy(&line);
            if keep(text.trim_end()) {
                kept.push(text.trim_end().to_owned());
            }
            line.clear();
        }
        kept
    }
    let shown = format!("{command:?}");
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let tests = std::thread::spawn(move || {
        stdout.map_or_else(Vec::new, |out| {
            relay(out, std::io::stdout(), |line| {
                line.starts_with("test ") && line.ends_with(" FAILED")
            })
        })
    });
    let targets = stderr.map_or_else(Vec::new, |err| {
        relay(err, std::io::stderr(), |line| {
            // cargo's, then cargo-nextest's: a failed, timed-out or crashed test.
            line.starts_with("error")
                || line.starts_with("    `-p")
                || ["FAIL [", "TIMEOUT [", "SIGSEGV [", "SIGABRT [", "ABORT ["]
                    .iter()
                    .any(|status| line.trim_start().starts_with(status))
        })
    });
    failed.extend(tests.join().unwrap_or_default());
    failed.extend(targets);
    let status = child
        .wait()
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

/// Whether cargo-nextest is installed: the workspace's tests then run under it, each test a
/// process of its own and several at once (`.config/nextest.toml`), so that one slow test no
/// longer holds up every test binary after it; without it, `cargo test`.
fn nextest() -> bool {
    cargo()
        .args(["nextest", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn report_path(label: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "mnemix-conformance-{label}-{}.jsonl",
        std::process::id()
    ))
}

/// Runs the whole workspace's tests once; every suite reports into one file, which then prints
/// a matrix per backend (so no suite runs twice). With `--compose`, against the compose stack.
fn test(compose: bool) -> Result<(), String> {
    let services = if compose {
        match services::compose() {
            Ok(services) => services,
            Err(why) if mnemix_services::is_required("compose") => {
                return Err(format!("MNEMIX_TEST_REQUIRE names compose: {why}"))
            }
            Err(why) => {
                eprintln!("xtask: SKIP the compose suite: {why}");
                services::provision()
            }
        }
    } else {
        services::provision()
    };
    let report = report_path("workspace");
    let _ = std::fs::remove_file(&report);
    let mut command = cargo();
    // Every test binary runs even when one fails, so the matrices show every backend's real
    // outcome rather than "did not report".
    if nextest() {
        command.args(["nextest", "run"]);
    } else {
        command.arg("test");
    }
    command.args(["--workspace", "--all-targets", "--no-fail-fast"]);
    command.env("MNEMIX_CONFORMANCE_REPORT", &report);
    with_test_env(&mut command, &services);
    // mnemix-embed's `local` feature is on in the workspace build (the benchmark data needs
    // it), so its tests against the real model run here.
    match models::minilm() {
        Ok(dir) => {
            command.env("MNEMIX_TEST_MINILM_DIR", dir);
        }
        Err(reason) => eprintln!("xtask: no all-MiniLM-L6-v2 for the local embedder: {reason}"),
    }
    match models::mcp_pythons() {
        Ok(pythons) => {
            command.env("MNEMIX_TEST_MCP_PYTHON", pythons);
        }
        Err(reason) => eprintln!("xtask: no Python MCP SDK for the MCP server's tests: {reason}"),
    }
    let mut failed_tests = Vec::new();
    let tests = run_tests(command, &mut failed_tests);
    // Memory's default embedder with the `local-embedder` feature (off in the workspace build,
    // so that the engine's other tests keep the hashing embedder whatever the machine holds).
    // --workspace keeps the tests' build (its features) for everything below the engine: built
    // as the engine's package alone, candle, gemm and tokenizers were built again (5 minutes of
    // a fresh CI run).
    let mut default_embedder = cargo();
    default_embedder.args([
        "test",
        "--workspace",
        "--features",
        "mnemix-engine/local-embedder",
        "--test",
        "default_embedder",
    ]);
    with_test_env(&mut default_embedder, &services);
    if let Ok(dir) = models::minilm() {
        default_embedder.env("MNEMIX_TEST_MINILM_DIR", dir);
    }
    let tests = tests.and(run_tests(default_embedder, &mut failed_tests));
    let mut doc = cargo();
    doc.args(["test", "--workspace", "--doc"]);
    let docs = run_tests(doc, &mut failed_tests);
    // Only `--compose` asks for them (the plain run's fallback to the stack does not).
    let containers = match services.stack() {
        Some(stack) if compose => compose_extras(stack, &mut failed_tests),
        _ => Ok(()),
    };
    let outcomes = read_report(&report)?;
    let _ = std::fs::remove_file(&report);
    let scenarios = scenarios()?;
    let mut failed_suites = Vec::new();
    let mut failures = Vec::new();
    for (backend, package, target, suite) in BACKENDS {
        let (_, failed) = print_matrix(backend, package, target, *suite, &scenarios, &outcomes);
        if !failed.is_empty() {
            failed_suites.push(*backend);
        }
        failures.extend(failed.into_iter().map(|failure| (backend, failure)));
    }
    for skipped in outcomes.iter().filter(|r| r.backend.is_empty()) {
        println!("SKIP {}: {}", skipped.scenario, skipped.reason);
    }
    // Again, last: a log cut to its head and tail still says which backend failed what, and why.
    for (backend, (scenario, reason)) in failures {
        let reason: String = reason.split_whitespace().collect::<Vec<_>>().join(" ");
        let reason: String = reason.chars().take(600).collect();
        println!("FAIL {backend} {scenario}: {reason}");
    }
    for line in &failed_tests {
        println!("FAILED {line}");
    }
    tests?;
    docs?;
    containers?;
    if failed_suites.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "conformance failed for {}",
            failed_suites.join(", ")
        ))
    }
}

/// What only a compose run adds: testcontainers starting the same images in a test (no URL
/// variables), and the stack's `app` service (the CLI in an image) run on the compose network.
fn compose_extras(stack: &compose::Stack, failed: &mut Vec<String>) -> Result<(), String> {
    let mut containers = cargo();
    // --workspace keeps the tests' build (its features): no build of its own.
    containers.args(["test", "--workspace", "--test", "containers"]);
    for (var, _) in compose::urls() {
        containers.env_remove(var);
    }
    containers.env("MNEMIX_TEST_REQUIRE", "containers");
    let started = run_tests(containers, failed);
    compose::remove_labelled(CONTAINER_LABEL);
    started?;
    // The workspace's test build made it (the CLI's integration tests run it).
    let cli = target_dir().join("debug/mnemix");
    if !cli.exists() {
        return Err(format!("no {} to put in the app image", cli.display()));
    }
    stack.run_app(&cli)
}

/// Builds the `recall` binary and runs Q1 (see the module docs).
fn recall(quick: bool, locomo: Option<PathBuf>) -> Result<(), String> {
    let Some(locomo) = locomo else {
        println!("xtask: Q1 skipped: no conversations (--locomo PATH or MNEMIX_LOCOMO)");
        return Ok(());
    };
    let started = std::time::Instant::now();
    let target = target_dir();
    let mut build = cargo();
    build.args([
        "build",
        "--quiet",
        "--release",
        "-p",
        "mnemix-bench-backends",
        "--bin",
        "recall",
    ]);
    run(build)?;
    let shown = format!(
        "cargo xtask recall{} --locomo {}",
        if quick { " --quick" } else { "" },
        locomo.display()
    );
    let mut q1 = Command::new(target.join("release").join("recall"));
    q1.current_dir(workspace_root())
        .arg("--locomo")
        .arg(locomo)
        .arg("--data")
        .arg(target.join("bench-data"))
        .arg("--out")
        .arg(if quick {
            target.join("bench-report")
        } else {
            reports_dir()
        })
        .args(["--command", &shown]);
    if quick {
        // The smoke test also stores the conversation on PostgreSQL and Redis (a named skip
        // without their URLs) and fails unless every context is the one SQLite gave.
        q1.args([
            "--quick",
            "--backends",
            "sqlite,postgres,redis",
            "--cost-facts",
            "1000",
        ]);
    }
    match models::minilm() {
        Ok(model) => {
            q1.arg("--model").arg(model);
        }
        Err(reason) => eprintln!("xtask: no MiniLM for Q1: {reason}"),
    }
    let result = run(q1);
    eprintln!(
        "xtask: recall took {:.0} s",
        started.elapsed().as_secs_f64()
    );
    result
}

/// Builds the benchmark binaries, makes the data, then runs them (see the module docs).
fn bench(
    quick: bool,
    scale: bool,
    backend: Option<&str>,
    workload: Option<&str>,
) -> Result<(), String> {
    let mut pass_on: Vec<String> = Vec::new();
    if let Some(backend) = backend {
        pass_on.extend(["--backend".to_owned(), backend.to_owned()]);
    }
    if let Some(workload) = workload {
        pass_on.extend(["--workload".to_owned(), workload.to_owned()]);
    }
    if scale {
        pass_on.push("--scale".to_owned());
    }
    let started = std::time::Instant::now();
    let model = models::minilm()?;
    let target = target_dir();
    let data = target.join("bench-data");
    // A run of some backends or workloads writes a report of those alone: it goes beside the
    // smoke run's, never over the committed one.
    let out = if quick || backend.is_some() || workload.is_some() {
        target.join("bench-report")
    } else {
        reports_dir()
    };
    // The quick run builds what the tests' `cargo test --workspace --all-targets` builds, with
    // the same feature resolution, so it reuses that build and only links the binaries; a
    // `-p` build would resolve features anew and recompile most of the graph.
    let mut build = cargo();
    if quick {
        build.args(["build", "--quiet", "--workspace", "--all-targets"]);
    } else {
        build.args([
            "build",
            "--quiet",
            "--release",
            "-p",
            "mnemix-bench-backends",
            "-p",
            "mnemix-bench-libsql",
        ]);
    }
    run(build)?;
    let binaries = target.join(if quick { "debug" } else { "release" });
    let mut make_data = Command::new(binaries.join("bench-data"));
    make_data
        .current_dir(workspace_root())
        .arg("--data")
        .arg(&data)
        .arg("--model")
        .arg(&model);
    if quick {
        make_data.arg("--quick");
    }
    run(make_data)?;
    let shown = std::iter::once("cargo xtask bench".to_owned())
        .chain(quick.then(|| "--quick".to_owned()))
        .chain(pass_on.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ");
    let mut bench = Command::new(binaries.join("bench"));
    bench
        .current_dir(workspace_root())
        .arg("--data")
        .arg(&data)
        .arg("--out")
        .arg(&out)
        .args(["--command", &shown])
        .args(&pass_on);
    if quick {
        bench.arg("--quick");
    }
    // libSQL's backend runs in a binary of its own (its SQLite must not meet sqlx's).
    bench
        .arg("--libsql-bench")
        .arg(binaries.join("bench-libsql"));
    match voltagent(&target) {
        Ok(install) => {
            bench.arg("--voltagent").arg(install);
        }
        Err(reason) => eprintln!("xtask: no VoltAgent peer: {reason}"),
    }
    let services = services::provision();
    with_test_env(&mut bench, &services);
    let result = run(bench);
    eprintln!(
        "xtask: bench{} took {:.0} s (build, data, peer install and run)",
        if quick { " --quick" } else { "" },
        started.elapsed().as_secs_f64()
    );
    result
}

/// Installs the VoltAgent peer (its npm packages and our `peer.mjs`) into
/// `target/bench-voltagent`; the packages once, the script every time.
fn voltagent(target: &std::path::Path) -> Result<PathBuf, String> {
    let source = workspace_root().join("tools/bench/voltagent");
    let install = target.join("bench-voltagent");
    std::fs::create_dir_all(&install).map_err(|e| e.to_string())?;
    let manifest = std::fs::read(source.join("package.json")).map_err(|e| e.to_string())?;
    let installed = std::fs::read(install.join("package.json")).ok();
    if installed.as_deref() != Some(&manifest[..]) || !install.join("node_modules").exists() {
        std::fs::write(install.join("package.json"), &manifest).map_err(|e| e.to_string())?;
        let mut npm = Command::new("npm");
        npm.args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&install);
        run(npm)?;
    }
    std::fs::copy(source.join("peer.mjs"), install.join("peer.mjs")).map_err(|e| e.to_string())?;
    Ok(install)
}

/// A step of `ci`: its name and what it runs.
type Step<'a> = (&'a str, Box<dyn FnOnce() -> Result<(), String> + 'a>);

fn ci() -> Result<(), String> {
    // Every compile below lints the workspace's own crates as it builds them, as
    // `cargo clippy -- -D warnings` would (its driver and its `CLIPPY_ARGS` convention): the
    // test build is the lint, and no check build of the whole graph runs for clippy alone.
    // `cargo clippy` (the embedder's step) sets both for itself.
    for (name, value) in lint_while_building()? {
        std::env::set_var(name, value);
    }
    let rustdoc = |args: &[&str]| {
        let mut doc = cargo();
        doc.args(["doc", "--no-deps"])
            .args(args)
            .env("RUSTDOCFLAGS", "-D warnings");
        run(doc)
    };
    let steps: Vec<Step<'_>> = vec![
        (
            "fmt",
            Box::new(|| {
                let mut fmt = cargo();
                fmt.args(["fmt", "--all", "--", "--check"]);
                run(fmt)
            }),
        ),
        ("libsql links alone", Box::new(libsql_links_alone)),
        ("package", Box::new(package)),
        // mnemix-embed alone with every feature, as a user builds it: the workspace's build
        // has the same features but may lend it what its own manifest forgets.
        ("clippy embed", Box::new(clippy_embed)),
        ("cli libsql", Box::new(cli_libsql)),
        // The workspace's build has mnemix-embed with every feature: its docs are all here.
        ("rustdoc", Box::new(|| rustdoc(&["--workspace"]))),
        // `--workspace --all-targets`, as `cargo clippy --workspace --all-targets` lints.
        ("test --compose", Box::new(|| test(true))),
        // A few seconds of each fuzz target under AFL++ (the long run is `cargo xtask fuzz`).
        ("fuzz --quick", Box::new(|| fuzz::run(true, &[]))),
        // A smoke run of every benchmark at small sizes: it must work, its times are not judged.
        ("bench --quick", Box::new(|| bench(true, false, None, None))),
    ];
    // What each step took, said last (where a log cut to its tail still shows it), so that
    // whoever keeps CI under its hour knows where the time goes.
    let started = std::time::Instant::now();
    let mut took = Vec::new();
    let mut outcome = Ok(());
    for (name, step) in steps {
        let at = std::time::Instant::now();
        outcome = step();
        took.push((name, at.elapsed().as_secs(), outcome.is_ok()));
        if outcome.is_err() {
            break;
        }
    }
    for (name, seconds, ok) in &took {
        let failed = if *ok { "" } else { " FAILED" };
        println!("xtask ci: {name:<22} {seconds:>5} s{failed}");
    }
    println!(
        "xtask ci: {:<22} {:>5} s",
        "total",
        started.elapsed().as_secs()
    );
    outcome
}

fn clippy_embed() -> Result<(), String> {
    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "-p",
        "mnemix-embed",
        "--all-features",
        "--all-targets",
    ]);
    clippy.args(["--", "-D", "warnings"]);
    run(clippy)
}

/// The CLI's libSQL build (it cannot have the sqlite feature: two SQLites would not link), linted
/// and tested in one compile (under [`ci`], whose builds all lint). Its feature resolution
/// differs from the workspace's, so it builds part of the graph again.
fn cli_libsql() -> Result<(), String> {
    let mut test = cargo();
    test.args([
        "test",
        "-p",
        "mnemix-cli",
        "--no-default-features",
        "--features",
        "libsql,postgres,redis",
        "--test",
        "cli_libsql",
    ]);
    run(test)
}

/// The variables that make cargo compile the workspace's own crates with clippy's driver and
/// deny every warning, as `cargo clippy -- -D warnings` would (its `CLIPPY_ARGS` convention):
/// clippy's driver lints each crate, then compiles it as rustc does.
fn lint_while_building() -> Result<[(&'static str, String); 2], String> {
    let which = Command::new("rustup")
        .args(["which", "clippy-driver"])
        .output()
        .map_err(|e| format!("rustup which clippy-driver: {e}"))?;
    if !which.status.success() {
        return Err(format!(
            "rustup which clippy-driver: {}",
            String::from_utf8_lossy(&which.stderr).trim()
        ));
    }
    let driver = String::from_utf8_lossy(&which.stdout).trim().to_owned();
    Ok([
        ("RUSTC_WORKSPACE_WRAPPER", driver),
        (
            "CLIPPY_ARGS",
            "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__".to_owned(),
        ),
    ])
}

/// The published crates, in dependency order (each after everything it depends on).
const PUBLISHED: &[&str] = &[
    "mnemix-core",
    "mnemix-sqlite-family",
    "mnemix-sqlite",
    "mnemix-postgres",
    "mnemix-redis",
    "mnemix-libsql",
    "mnemix-embed",
    "mnemix-engine",
    "mnemix-conformance",
    "mnemix",
    "mnemix-rig",
    "mnemix-cli",
];

/// The house's floors: a crate here must not depend (normally or optionally, with every feature)
/// on any crate named beside it. Backends stand on core alone; the suite an adapter adds stands
/// on core too (the engine's scenarios are its opt-in `engine` feature, checked without it).
const MUST_NOT_DEPEND: &[(&str, &[&str])] = &[
    (
        "mnemix-core",
        &[
            "mnemix-engine",
            "mnemix-conformance",
            "mnemix-bench",
            "mnemix-testkit",
        ],
    ),
    (
        "mnemix-sqlite-family",
        &[
            "mnemix-engine",
            "mnemix-conformance",
            "mnemix-bench",
            "mnemix-testkit",
        ],
    ),
    (
        "mnemix-sqlite",
        &[
            "mnemix-engine",
            "mnemix-conformance",
            "mnemix-bench",
            "mnemix-testkit",
        ],
    ),
    (
        "mnemix-postgres",
        &[
            "mnemix-engine",
            "mnemix-conformance",
            "mnemix-bench",
            "mnemix-testkit",
        ],
    ),
    (
        "mnemix-redis",
        &[
            "mnemix-engine",
            "mnemix-conformance",
            "mnemix-bench",
            "mnemix-testkit",
        ],
    ),
    (
        "mnemix-libsql",
        &[
            "mnemix-engine",
            "mnemix-conformance",
            "mnemix-bench",
            "mnemix-testkit",
        ],
    ),
    (
        "mnemix-embed",
        &[
            "mnemix-engine",
            "mnemix-conformance",
            "mnemix-bench",
            "mnemix-testkit",
        ],
    ),
    (
        "mnemix-engine",
        &["mnemix-conformance", "mnemix-bench", "mnemix-testkit"],
    ),
    (
        "mnemix-rig",
        &[
            "mnemix-engine",
            "mnemix-conformance",
            "mnemix-bench",
            "mnemix-testkit",
        ],
    ),
    (
        "mnemix",
        &["mnemix-conformance", "mnemix-bench", "mnemix-testkit"],
    ),
];

/// What a third-party adapter's test build (the redb example: its suite with default
/// features) must not compile: the engine's configuration formats and JSON Schema.
const NOT_IN_AN_ADAPTERS_TESTS: &[&str] = &["mnemix-engine", "jsonschema", "yaml_serde", "toml"];

/// The inverted tree from `dependency` to `package` along `edges`, when `package` depends on it
/// (`cargo tree -i` fails when the dependency is nowhere in the graph, and prints nothing when
/// it is there by other edges only).
fn depends_on(
    package: &str,
    features: &[&str],
    edges: &str,
    dependency: &str,
) -> Result<Option<String>, String> {
    let output = cargo()
        .args(["tree", "-p", package, "-e", edges, "-i", dependency])
        .args(features)
        .output()
        .map_err(|e| format!("cannot run cargo tree: {e}"))?;
    Ok((output.status.success() && !output.stdout.is_empty())
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned()))
}

/// Fails when a crate depends on one below it in the house, or an adapter's test build
/// compiles what only the engine needs.
fn layering() -> Result<(), String> {
    let mut wrong = Vec::new();
    for (package, forbidden) in MUST_NOT_DEPEND {
        for dependency in *forbidden {
            if depends_on(package, &["--all-features"], "normal,build", dependency)?.is_some() {
                wrong.push(format!("{package} depends on {dependency}"));
            }
        }
    }
    for dependency in ["mnemix-engine", "mnemix-bench", "mnemix-testkit"] {
        if depends_on("mnemix-conformance", &[], "normal,build", dependency)?.is_some() {
            wrong.push(format!(
                "mnemix-conformance (default features) depends on {dependency}"
            ));
        }
    }
    for dependency in NOT_IN_AN_ADAPTERS_TESTS {
        if depends_on(
            "custom-adapter-example",
            &[],
            "normal,build,dev",
            dependency,
        )?
        .is_some()
        {
            wrong.push(format!(
                "an adapter's tests (custom-adapter-example) compile {dependency}"
            ));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the crates' layering is broken:\n  {}",
            wrong.join("\n  ")
        ))
    }
}

/// `cargo package` of every published crate: a path dependency without a version or a manifest
/// the registry would refuse fails it. `--no-verify`: the packages' sources are the
/// workspace's, built and tested by the rest of CI; verifying would rebuild every dependency
/// once more under a default profile (a quarter of an hour on two cores), so a file outside
/// its package is found by [`outside_files`] instead. `--exclude-lockfile`: cargo orders the
/// packages by the graph of active dependencies only, so a crate would be resolved before an
/// optional dependency of it that is not on the registry yet (mnemix-engine before
/// mnemix-embed); [`PUBLISHED`] holds the order to publish in.
fn package() -> Result<(), String> {
    check_rust_version()?;
    layering()?;
    outside_files()?;
    let mut package = cargo();
    package.args([
        "package",
        "--no-verify",
        "--exclude-lockfile",
        "--allow-dirty",
    ]);
    for name in PUBLISHED {
        package.args(["-p", name]);
    }
    run(package)?;
    println!(
        "packaged {} crates: {}",
        PUBLISHED.len(),
        PUBLISHED.join(", ")
    );
    Ok(())
}

/// The declared `rust-version` is the toolchain CI builds with (major.minor).
fn check_rust_version() -> Result<(), String> {
    let manifest = std::fs::read_to_string(workspace_root().join("Cargo.toml"))
        .map_err(|e| format!("cannot read Cargo.toml: {e}"))?;
    let declared = manifest
        .lines()
        .find_map(|line| line.strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"').to_owned())
        .ok_or("Cargo.toml declares no rust-version")?;
    let output = Command::new("rustc")
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run rustc: {e}"))?;
    let version = String::from_utf8_lossy(&output.stdout);
    let building = version.split_whitespace().nth(1).unwrap_or_default();
    let minor = |v: &str| v.split('.').take(2).collect::<Vec<_>>().join(".");
    if minor(building) == minor(&declared) {
        Ok(())
    } else {
        Err(format!(
            "Cargo.toml declares rust-version {declared} but CI builds with rustc {building}: \
             declare the toolchain that is tested"
        ))
    }
}

/// Fails when a published crate's source includes a file from outside its own folder
/// (`include_str!`, `include_bytes!`, `#[doc = include_str!(…)]`) where a build reads it: the
/// registry's copy would not compile. Doctest-only includes (`#[cfg(doctest)]`) are allowed.
fn outside_files() -> Result<(), String> {
    let mut wrong = Vec::new();
    for name in PUBLISHED {
        let dir = workspace_root().join("crates").join(name);
        let mut stack = vec![dir.join("src")];
        while let Some(path) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&path) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                for (i, line) in lines.iter().enumerate() {
                    for include in ["include_str!(\"", "include_bytes!(\""] {
                        let Some(start) = line.find(include) else {
                            continue;
                        };
                        let relative = &line[start + include.len()..];
                        let relative = &relative[..relative.find('"').unwrap_or(relative.len())];
                        let doctest_only = i > 0 && lines[i - 1].contains("cfg(doctest)")
                            || i > 1 && lines[i - 2].contains("cfg(doctest)");
                        let target = path.parent().unwrap_or(&dir).join(relative);
                        let inside = normalize(&target).starts_with(&dir);
                        if !inside && !doctest_only {
                            wrong.push(format!("{}:{}: {relative}", path.display(), i + 1));
                        }
                    }
                }
            }
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "published crates include files outside their package:\n  {}",
            wrong.join("\n  ")
        ))
    }
}

/// `a/b/../c` → `a/c`, without touching the file system.
fn normalize(path: &std::path::Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Fails when anything that links libSQL (mnemix-libsql, with every feature and its tests)
/// also depends on another SQLite.
fn libsql_links_alone() -> Result<(), String> {
    for (linking, other) in ["mnemix-libsql", "mnemix-bench-libsql"]
        .into_iter()
        .flat_map(|linking| {
            LINKED_BESIDE_LIBSQL
                .iter()
                .map(move |other| (linking, other))
        })
    {
        if let Some(tree) = depends_on(linking, &["--all-features"], "normal,build,dev", other)? {
            return Err(format!(
                "{linking} depends on {other}, which links a second SQLite:\n{tree}"
            ));
        }
    }
    Ok(())
}

/// The differential suite's one scenario: `--differential` runs it alone.
const DIFFERENTIAL: &str = "differential::generated_sequences_answer_like_the_reference";

fn conformance(backend: &str, differential: Option<u32>) -> Result<(), String> {
    let (_, package, target, suite) = BACKENDS
        .iter()
        .find(|(name, ..)| *name == backend)
        .ok_or_else(|| format!("no backend {backend:?}"))?;
    let services = services::provision();
    let report = report_path(backend);
    let _ = std::fs::remove_file(&report);
    let mut command = cargo();
    command.args(["test", "--quiet", "-p", package, "--test", target]);
    command.env("MNEMIX_CONFORMANCE_REPORT", &report);
    with_test_env(&mut command, &services);
    if let Some(cases) = differential {
        command.env("MNEMIX_DIFFERENTIAL_CASES", cases.to_string());
        command.args(["--", DIFFERENTIAL]);
    }
    let output = command
        .output()
        .map_err(|e| format!("cannot run cargo test: {e}"))?;
    let outcomes = read_report(&report)?;
    let _ = std::fs::remove_file(&report);
    let [_, failed, _] = if differential.is_some() {
        // The scenario's own count of what it generated and ran.
        String::from_utf8_lossy(&output.stderr)
            .lines()
            .filter(|line| line.starts_with("differential: "))
            .for_each(|line| println!("{backend}: {line}"));
        print_differential(backend, &outcomes)
    } else {
        print_matrix(backend, package, target, *suite, &scenarios()?, &outcomes).0
    };
    if !output.status.success() {
        print!("{}", String::from_utf8_lossy(&output.stdout));
        eprint!("{}", String::from_utf8_lossy(&output.stderr));
    }
    if failed > 0 || !output.status.success() {
        return Err(format!("{backend} conformance failed"));
    }
    Ok(())
}

/// The differential suite's line: passed, failed (with the shrunk sequence) or skipped.
fn print_differential(backend: &str, reported: &[Reported]) -> [usize; 3] {
    let Some(outcome) = reported
        .iter()
        .find(|r| r.backend == backend && r.scenario == DIFFERENTIAL)
    else {
        println!("{backend}: the differential suite did not report");
        return [0, 1, 0];
    };
    println!(
        "{backend}: {DIFFERENTIAL} {} {}",
        outcome.outcome, outcome.reason
    );
    match outcome.outcome.as_str() {
        "passed" => [1, 0, 0],
        "skipped" => [0, 0, 1],
        _ => [0, 1, 0],
    }
}

/// One scenario's outcome as a suite reported it.
struct Reported {
    backend: String,
    scenario: String,
    outcome: String,
    reason: String,
}

fn read_report(path: &std::path::Path) -> Result<Vec<Reported>, String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|line| {
            let value: serde_json::Value =
                serde_json::from_str(line).map_err(|e| format!("bad report line {line}: {e}"))?;
            let field = |k: &str| value[k].as_str().unwrap_or_default().to_owned();
            // A named skip of tests outside the suite: no backend, so in no matrix.
            if value.get("skipped").is_some() {
                return Ok(Reported {
                    backend: String::new(),
                    scenario: field("skipped"),
                    outcome: "skipped".into(),
                    reason: format!("{} (needs {})", field("reason"), field("needs")),
                });
            }
            Ok(Reported {
                backend: field("backend"),
                scenario: field("scenario"),
                outcome: field("outcome"),
                reason: field("reason"),
            })
        })
        .collect()
}

/// A scenario of the suite, as the conformance crate's `scenarios` example lists it.
struct Scenario {
    /// `group::name`.
    name: String,
    /// One of the engine's, which a suite of the contracts alone does not run.
    engine: bool,
}

/// Every scenario of the suite, from the conformance crate's `scenarios` example, built with the
/// workspace's features (so that after the tests' build it only runs): xtask does not link the
/// suite, which would be a build of its own.
fn scenarios() -> Result<Vec<Scenario>, String> {
    let mut build = cargo();
    build.args(["build", "--quiet", "--workspace", "--example", "scenarios"]);
    run(build)?;
    let listing = Command::new(target_dir().join("debug/examples/scenarios"))
        .output()
        .map_err(|e| format!("cannot list the scenarios: {e}"))?;
    if !listing.status.success() {
        return Err(format!("listing the scenarios failed ({})", listing.status));
    }
    let scenarios: Vec<Scenario> = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .map(|(name, part)| Scenario {
            name: name.to_owned(),
            engine: part == "engine",
        })
        .collect();
    if scenarios.is_empty() {
        return Err("the scenarios example listed no scenario".into());
    }
    Ok(scenarios)
}

/// Prints the backend's matrix by contract and its closing line; returns [passed, failed,
/// skipped] and the failed scenarios with their reasons. A canonical scenario that never
/// reported counts as failed.
fn print_matrix<'a>(
    backend: &str,
    package: &str,
    target: &str,
    suite: Suite,
    scenarios: &'a [Scenario],
    reported: &'a [Reported],
) -> ([usize; 3], Vec<(&'a str, &'a str)>) {
    let mut outcomes: BTreeMap<&str, (&str, &str)> = reported
        .iter()
        .filter(|r| r.backend == backend)
        .map(|r| (r.scenario.as_str(), (r.outcome.as_str(), r.reason.as_str())))
        .collect();
    let expected = scenarios
        .iter()
        .filter(|scenario| suite == Suite::Whole || !scenario.engine);
    for scenario in expected {
        outcomes
            .entry(scenario.name.as_str())
            .or_insert(("failed", "did not report (build failure or crash)"));
    }
    let mut matrix: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
    let mut notes = Vec::new();
    let mut failures = Vec::new();
    for (scenario, (outcome, reason)) in &outcomes {
        let group = scenario.split("::").next().unwrap_or("?");
        let column = match *outcome {
            "passed" => 0,
            "skipped" => 2,
            _ => 1,
        };
        matrix.entry(group).or_default()[column] += 1;
        match column {
            1 => {
                notes.push(format!("FAIL {scenario}: {reason}"));
                failures.push((*scenario, *reason));
            }
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
    println!(
        "{backend}: {} passed, {} failed, {} skipped",
        totals[0], totals[1], totals[2]
    );
    (totals, failures)
}
