//! `cargo xtask fuzz [--quick] [--target NAME,…]`: the `mnemix-fuzz` targets under AFL++.
//!
//! AFL++ comes through `cargo-afl` (installed on first use: it builds AFL++ from its bundled
//! source), which instruments with rustc's own sanitizer-coverage pass, so the stable toolchain
//! does. The instrumented build goes to `target/afl`, apart from the workspace build (its
//! RUSTFLAGS differ). Each target starts from its committed corpus (`tools/fuzz/corpus`).
//!
//! The long run (no flag) fuzzes each target for 10 million executions, minimizes what AFL++
//! kept into the committed corpus, and writes the figures into `RELIABILITY.md`'s "Fuzzing"
//! section. `--quick` (CI) fuzzes each target for a few seconds and changes nothing committed.
//! Any crash fails the command and names the input; `mnemix-fuzz-afl TARGET < INPUT` replays it.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The targets, as `mnemix_fuzz::Target::name` spells them.
const TARGETS: [&str; 6] = [
    "sanitize",
    "continuation",
    "filter",
    "export",
    "cursor",
    "message",
];
/// Targets whose input is JSON: AFL++ gets the dictionary of the formats' tokens.
const JSON_TARGETS: [&str; 3] = ["filter", "export", "message"];
/// The cargo-afl release the `afl` dependency of mnemix-fuzz matches.
const CARGO_AFL: &str = "0.18.2";
const LONG_EXECS: u64 = 10_000_000;
const QUICK_SECONDS: u64 = 5;
/// The most inputs of one target the committed corpus keeps.
const MAX_CORPUS: usize = 400;

/// What one target's run did, from AFL++'s `fuzzer_stats`.
struct Outcome {
    target: &'static str,
    execs: u64,
    seconds: u64,
    crashes: u64,
    hangs: u64,
    corpus: u64,
    edges: String,
}

pub fn run(quick: bool, only: &[String]) -> Result<(), String> {
    let targets: Vec<&'static str> = match only {
        [] => TARGETS.to_vec(),
        names => names
            .iter()
            .map(|name| {
                TARGETS
                    .iter()
                    .copied()
                    .find(|t| *t == name.as_str())
                    .ok_or_else(|| {
                        format!("no fuzz target {name:?} (one of {})", TARGETS.join(", "))
                    })
            })
            .collect::<Result<_, _>>()?,
    };
    install_cargo_afl()?;
    let binary = build()?;
    let crate_dir = super::workspace_root().join("tools/fuzz");
    // One AFL++ instance per core at a time (each is single-threaded).
    let jobs = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let mut outcomes = Vec::new();
    for round in targets.chunks(jobs) {
        let results: Vec<Result<Outcome, String>> = std::thread::scope(|scope| {
            let runs: Vec<_> = round
                .iter()
                .map(|target| {
                    let (binary, crate_dir) = (&binary, &crate_dir);
                    scope.spawn(move || {
                        let outcome = fuzz(binary, crate_dir, target, quick)?;
                        if !quick && outcome.crashes == 0 {
                            minimize(binary, crate_dir, target)?;
                        }
                        Ok(outcome)
                    })
                })
                .collect();
            runs.into_iter()
                .map(|run| run.join().expect("a fuzz run"))
                .collect()
        });
        for outcome in results {
            let outcome = outcome?;
            eprintln!(
                "xtask: fuzz {}: {} executions in {} s, {} crashes, {} hangs, {} inputs kept",
                outcome.target,
                outcome.execs,
                outcome.seconds,
                outcome.crashes,
                outcome.hangs,
                outcome.corpus
            );
            outcomes.push(outcome);
        }
    }
    let crashed: Vec<String> = outcomes
        .iter()
        .filter(|o| o.crashes > 0)
        .map(|o| {
            let dir = out_dir(o.target).join("default/crashes");
            format!(
                "{} ({} crashes; replay one with `{} {} < {}/FILE`)",
                o.target,
                o.crashes,
                binary.display(),
                o.target,
                dir.display()
            )
        })
        .collect();
    let reliability = super::reports_dir().join("RELIABILITY.md");
    // A run of some targets (`--target`) keeps the other targets' rows of the last run.
    let kept: Vec<String> = if quick {
        Vec::new()
    } else {
        section(&reliability, "Fuzzing")
            .unwrap_or_default()
            .lines()
            .filter(|line| {
                let name = line
                    .trim_start_matches("| ")
                    .split(' ')
                    .next()
                    .unwrap_or("");
                TARGETS.contains(&name) && outcomes.iter().all(|o| o.target != name)
            })
            .map(str::to_owned)
            .collect()
    };
    let section = render(&outcomes, &kept, quick);
    if quick {
        let dir = super::target_dir().join("bench-report");
        fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        fs::write(dir.join("FUZZING.md"), &section).map_err(|e| e.to_string())?;
    } else {
        write_section(&reliability, "Fuzzing", &section)?;
    }
    if crashed.is_empty() {
        Ok(())
    } else {
        Err(format!("fuzzing found crashes: {}", crashed.join("; ")))
    }
}

/// Installs cargo-afl unless this release is there already; its install builds AFL++.
fn install_cargo_afl() -> Result<(), String> {
    let installed = Command::new("cargo")
        .args(["afl", "--version"])
        .output()
        .is_ok_and(|out| {
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains(CARGO_AFL)
        });
    if installed {
        return Ok(());
    }
    let mut install = Command::new("cargo");
    install.args(["install", "cargo-afl", "--locked", "--version", CARGO_AFL]);
    super::run(install)
}

/// Builds the instrumented `mnemix-fuzz-afl` into `target/afl` and returns its path.
fn build() -> Result<PathBuf, String> {
    let target_dir = super::target_dir().join("afl");
    let attempt = || {
        let mut build = super::cargo();
        build
            .args([
                "afl",
                "build",
                "--release",
                "-p",
                "mnemix-fuzz",
                "--features",
                "afl",
                "--bin",
                "mnemix-fuzz-afl",
            ])
            .env("CARGO_TARGET_DIR", &target_dir);
        super::run(build)
    };
    if attempt().is_err() {
        // cargo-afl's install only warns when AFL++ did not build; build it now and retry.
        let mut config = super::cargo();
        config.args(["afl", "config", "--build", "--force"]);
        super::run(config)?;
        attempt()?;
    }
    Ok(target_dir.join("release/mnemix-fuzz-afl"))
}

fn out_dir(target: &str) -> PathBuf {
    super::target_dir().join("fuzz").join(target)
}

/// AFL++ in the background-friendly way: no UI, no CPU binding (two-core machines), no core
/// pattern demands (containers cannot change it).
fn quiet_afl(command: &mut Command) -> &mut Command {
    command
        .env("AFL_NO_UI", "1")
        .env("AFL_NO_AFFINITY", "1")
        .env("AFL_SKIP_CPUFREQ", "1")
        .env("AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES", "1")
}

/// `cargo afl TOOL`.
fn afl(tool: &str) -> Command {
    let mut command = super::cargo();
    command.args(["afl", tool]);
    quiet_afl(&mut command);
    command
}

/// One of the AFL++ tools cargo-afl built, run directly: where cargo-afl keeps them
/// (`$XDG_DATA_HOME/afl.rs/rustc-VERSION/afl.rs-VERSION/afl/bin`).
fn afl_tool(tool: &str) -> Result<Command, String> {
    let data = std::env::var_os("XDG_DATA_HOME").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".local/share"),
        PathBuf::from,
    );
    let root = data.join("afl.rs");
    let found = fs::read_dir(&root)
        .map_err(|e| format!("{}: {e}", root.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .map(|dir| dir.join(format!("afl.rs-{CARGO_AFL}/afl/bin/{tool}")))
        .find(|path| path.is_file())
        .ok_or_else(|| {
            format!(
                "no {tool} of cargo-afl {CARGO_AFL} under {}",
                root.display()
            )
        })?;
    let mut command = Command::new(found);
    quiet_afl(&mut command);
    Ok(command)
}

fn fuzz(
    binary: &Path,
    crate_dir: &Path,
    target: &'static str,
    quick: bool,
) -> Result<Outcome, String> {
    let out = out_dir(target);
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let log = fs::File::create(out.join("afl.log")).map_err(|e| e.to_string())?;
    let mut command = afl("fuzz");
    command
        .arg("-i")
        .arg(crate_dir.join("corpus").join(target))
        .arg("-o")
        .arg(&out);
    // cargo-afl turns CMPLOG on (`-c0`), which needs the LLVM plugins only a nightly build
    // has: without them the CMPLOG fork server never answers. Turn it off again.
    command.args(["-c", "-"]);
    if quick {
        command.args(["-V", &QUICK_SECONDS.to_string()]);
    } else {
        command.args(["-E", &LONG_EXECS.to_string()]);
    }
    if JSON_TARGETS.contains(&target) {
        command.arg("-x").arg(crate_dir.join("json.dict"));
    }
    command
        .arg("--")
        .arg(binary)
        .arg(target)
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    let started = Instant::now();
    let status = command
        .status()
        .map_err(|e| format!("cannot run afl-fuzz: {e}"))?;
    let stats = fs::read_to_string(out.join("default/fuzzer_stats")).map_err(|e| {
        format!(
            "afl-fuzz ({status}) wrote no stats for {target} ({e}): see {}",
            out.join("afl.log").display()
        )
    })?;
    let field = |name: &str| {
        stats
            .lines()
            .find_map(|line| {
                let (key, value) = line.split_once(':')?;
                (key.trim() == name).then(|| value.trim().to_owned())
            })
            .unwrap_or_default()
    };
    let number = |name: &str| field(name).parse::<u64>().unwrap_or(0);
    Ok(Outcome {
        target,
        execs: number("execs_done"),
        seconds: started.elapsed().as_secs(),
        crashes: number("saved_crashes").max(number("unique_crashes")),
        hangs: number("saved_hangs").max(number("unique_hangs")),
        corpus: number("corpus_count"),
        edges: field("bitmap_cvg"),
    })
}

/// Replaces the committed corpus of `target` with the smallest set of what AFL++ kept that
/// covers as much (afl-cmin), capped at [`MAX_CORPUS`] inputs, named by position.
fn minimize(binary: &Path, crate_dir: &Path, target: &str) -> Result<(), String> {
    let minimized = out_dir(target).join("cmin");
    let _ = fs::remove_dir_all(&minimized);
    // AFL++'s afl-cmin is now a Python script that, on these persistent-mode binaries, records
    // no tuples at all and keeps nothing; its shell version beside it works.
    let mut cmin = afl_tool("afl-cmin.bash")?;
    let log = fs::File::create(out_dir(target).join("cmin.log")).map_err(|e| e.to_string())?;
    cmin.arg("-i")
        .arg(out_dir(target).join("default/queue"))
        .arg("-o")
        .arg(&minimized)
        .arg("--")
        .arg(binary)
        .arg(target)
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    super::run(cmin)?;
    let corpus = crate_dir.join("corpus").join(target);
    let mut kept: Vec<PathBuf> = fs::read_dir(&minimized)
        .map_err(|e| e.to_string())?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.is_file())
        .collect();
    // Smallest first, at most MAX_CORPUS: the targets hash with random seeds, so AFL++ sees
    // some instability and afl-cmin keeps thousands of near-duplicates of the JSON targets.
    kept.sort_by_key(|path| (fs::metadata(path).map_or(0, |m| m.len()), path.clone()));
    kept.truncate(MAX_CORPUS);
    if kept.is_empty() {
        return Err(format!("afl-cmin kept nothing for {target}"));
    }
    fs::remove_dir_all(&corpus).map_err(|e| e.to_string())?;
    fs::create_dir_all(&corpus).map_err(|e| e.to_string())?;
    for (n, path) in kept.iter().enumerate() {
        fs::copy(path, corpus.join(format!("{target}-{n:04}"))).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn render(outcomes: &[Outcome], kept: &[String], quick: bool) -> String {
    let mut out = String::from("## Fuzzing\n\n");
    let how = if quick {
        format!("`cargo xtask fuzz --quick` ({QUICK_SECONDS} s per target, as CI runs it)")
    } else {
        format!("`cargo xtask fuzz` ({LONG_EXECS} executions per target)")
    };
    let _ = writeln!(
        out,
        "The targets of `tools/fuzz` under AFL++ (cargo-afl {CARGO_AFL}, rustc's \
         sanitizer-coverage instrumentation on the stable toolchain, persistent mode), from \
         {how}, each starting from its committed corpus; every property a target asserts is \
         listed in its documentation. A crash is any failed property or panic.\n"
    );
    out.push_str(
        "| target | executions | seconds | executions/s | crashes | hangs | inputs kept | map coverage |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut rows: Vec<String> = kept.to_vec();
    for o in outcomes {
        rows.push(format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            o.target,
            o.execs,
            o.seconds,
            o.execs / o.seconds.max(1),
            o.crashes,
            o.hangs,
            o.corpus,
            o.edges
        ));
    }
    rows.sort_by_key(|row| {
        TARGETS
            .iter()
            .position(|t| row.starts_with(&format!("| {t} |")))
    });
    for row in rows {
        let _ = writeln!(out, "{row}");
    }
    out.push('\n');
    out
}

/// Replaces the `## {heading}` section of a markdown file (up to the next `## `), or appends it.
pub fn write_section(path: &Path, heading: &str, section_text: &str) -> Result<(), String> {
    let old = fs::read_to_string(path).unwrap_or_default();
    let new = match section(path, heading) {
        Some(current) => old.replacen(&current, section_text, 1),
        None => format!("{}\n\n{section_text}", old.trim_end()),
    };
    fs::write(path, new).map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!("xtask: wrote the {heading} section of {}", path.display());
    Ok(())
}

/// The `## {heading}` section of a markdown file, if it has one (to keep it when the rest is
/// rewritten).
pub fn section(path: &Path, heading: &str) -> Option<String> {
    let old = fs::read_to_string(path).ok()?;
    let marker = format!("## {heading}\n");
    let start = old.find(&marker)?;
    let rest = &old[start..];
    let end = rest[marker.len()..]
        .find("\n## ")
        .map_or(rest.len(), |i| marker.len() + i + 1);
    Some(rest[..end].to_owned())
}
