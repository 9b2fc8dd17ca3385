//! `cargo xtask reliability [--quick]`: the fault tests of the `mnemix-tests` crate (cut
//! connections, killed writers, the history checker under cuts, servers killed and restarted,
//! cluster failovers) at their long-run sizes — 100
//! kills per backend, 500 batches per writer — with every figure collected from their JSON
//! report into `docs/reports/RELIABILITY.md` (with `--quick`, CI's sizes, into
//! `target/bench-report/RELIABILITY.md`).

use std::fmt::Write as _;

use serde_json::Value;

pub fn run(quick: bool) -> Result<(), String> {
    let (kills, batches) = if quick { ("10", "100") } else { ("100", "500") };
    // The compose stack when Docker runs (its Redis fsyncs every write), else what `test` finds.
    let services = super::services::compose().unwrap_or_else(|why| {
        eprintln!("xtask: no compose stack ({why}); the services `test` finds instead");
        super::services::provision()
    });
    let against = if services.stack().is_some() {
        "the compose stack (PostgreSQL 15 + pgvector; Redis with `appendfsync always`)"
    } else {
        "the services `cargo xtask test` provisions"
    };
    let report = super::target_dir().join("reliability.jsonl");
    let _ = std::fs::remove_file(&report);
    let mut command = super::cargo();
    // --workspace keeps the tests' build (its features): no build of its own.
    command.args([
        "test",
        "--workspace",
        "--test",
        "cuts",
        "--test",
        "kills",
        "--test",
        "losses",
        "--test",
        "history",
        "--test",
        "restarts",
        "--test",
        "failover",
        "--",
        "--test-threads",
        "1",
    ]);
    for (var, url) in &services.urls {
        command.env(var, url);
    }
    let mut required = String::from("postgres,redis");
    // The servers are killed and restarted only where they are ours to kill: the compose stack.
    if let Some(stack) = services.stack() {
        for service in ["postgres", "redis"] {
            let variable = format!("MNEMIX_RESTART_{}_CONTAINER", service.to_ascii_uppercase());
            command.env(variable, stack.container(service)?);
        }
        command.env(
            "MNEMIX_FAILOVER_CLUSTER_CONTAINER",
            stack.container("redis-cluster")?,
        );
        required.push_str(",restarts,failover");
    }
    command
        .env("MNEMIX_FAULTS_REPORT", &report)
        .env("MNEMIX_KILLS", kills)
        .env("MNEMIX_HISTORY_BATCHES", batches)
        .env("MNEMIX_TEST_REQUIRE", required);
    let started = std::time::Instant::now();
    super::run(command)?;
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    let lines =
        std::fs::read_to_string(&report).map_err(|e| format!("{}: {e}", report.display()))?;
    let rows: Vec<Value> = lines
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the report: {e}"))?;
    let command = if quick {
        "cargo xtask reliability --quick"
    } else {
        "cargo xtask reliability"
    };
    let markdown = render(&rows, command, against, kills, batches, minutes);
    let out = if quick {
        let dir = super::target_dir().join("bench-report");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        dir.join("RELIABILITY.md")
    } else {
        super::reports_dir().join("RELIABILITY.md")
    };
    // The fuzzing figures come from `cargo xtask fuzz`, a run of its own: keep them.
    let markdown = match super::fuzz::section(&out, "Fuzzing") {
        Some(fuzzing) => format!("{}\n\n{fuzzing}", markdown.trim_end()),
        None => markdown,
    };
    std::fs::write(&out, markdown).map_err(|e| format!("{}: {e}", out.display()))?;
    eprintln!("xtask: wrote {}", out.display());
    Ok(())
}

fn cells(row: &Value, keys: &[&str]) -> String {
    keys.iter()
        .map(|k| match &row[*k] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The history checker's columns, `(header, report key)`, shared by the runs under cuts and
/// under restarts.
const HISTORY_FIGURES: [(&str, &str); 6] = [
    ("appends", "appends"),
    ("acknowledged", "acknowledged"),
    ("reads", "reads"),
    ("failed tries", "failed_tries"),
    ("failed reads", "failed_reads"),
    ("anomalies", "anomalies"),
];

/// The lost-requests section's text, before its table.
const LOST_REQUESTS: &str =
    "## Lost requests\n\nThe proxy discards two requests in the middle of a \
     burst of 30 concurrent `cache_get`s of three tenants (a namespace each) and forwards the \
     rest, every connection kept open (`tests/losses.rs`): to the client, answers that never \
     come. A connection that pairs answers with requests by their order (Redis's multiplexed \
     one) would hand each later call an earlier one's answer. Every answer must be its own \
     call's: \"wrong\" must be 0; \"failed\" counts the calls that failed instead (on Redis, \
     every call in flight on the connection once its answers were seen out of step).\n\n";

/// A table of the rows of `test`; `columns` are `(header, report key)` pairs.
fn table(out: &mut String, rows: &[Value], test: &str, columns: &[(&str, &str)]) {
    let header: Vec<&str> = columns.iter().map(|(h, _)| *h).collect();
    let keys: Vec<&str> = columns.iter().map(|(_, k)| *k).collect();
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let _ = writeln!(
        out,
        "|{}",
        header
            .iter()
            .enumerate()
            .map(|(i, _)| if i < 3 { "---|" } else { "---:|" })
            .collect::<String>()
    );
    for row in rows.iter().filter(|r| r["test"] == test) {
        let _ = writeln!(out, "| {} |", cells(row, &keys));
    }
    out.push('\n');
}

fn render(
    rows: &[Value],
    command: &str,
    against: &str,
    kills: &str,
    batches: &str,
    minutes: f64,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Reliability\n\nWhat the fault tests of `tests/` (the `mnemix-tests` crate) found, produced by \
         `{command}` ({kills} kills per backend, {batches} batches per history writer; {minutes:.1} \
         minutes) against {against}. CI runs the same tests at \
         10 kills and 100 batches on every push. Every count of lost, duplicated, partial or \
         anomalous must be 0: the tests fail otherwise.\n"
    );
    out.push_str(
        "## Cut connections\n\nA proxy between the store and its server (`mnemix_testkit::faults`) \
         cuts the connection at every client-message boundary of the operation in turn: `Drop` \
         closes it instead of forwarding the message, `LoseReply` forwards it and closes before \
         the answer returns, `Delay` holds it 20 ms. After each cut the caller retries; the \
         store's content (not the receipt) decides: applied once, lost, duplicated, or partial. \
         \"First call failed\" counts cuts the caller saw (the front layer's own retries hide \
         the rest); \"applied before the retry\" counts those where the failed call had in fact \
         applied.\n\n",
    );
    table(
        &mut out,
        rows,
        "cuts",
        &[
            ("backend", "backend"),
            ("operation", "operation"),
            ("fault", "fault"),
            ("cuts", "cuts"),
            ("first call failed", "failed"),
            ("applied before the retry", "applied_before_retry"),
            ("once", "once"),
            ("lost", "lost"),
            ("duplicated", "duplicated"),
            ("partial", "partial"),
        ],
    );
    out.push_str(LOST_REQUESTS);
    table(
        &mut out,
        rows,
        "lost bytes",
        &[
            ("backend", "backend"),
            ("bursts", "bursts"),
            ("calls", "calls"),
            ("right", "right"),
            ("failed", "failed"),
            ("wrong", "wrong"),
        ],
    );
    out.push_str(
        "## Killed processes\n\nA child process appends batches of three messages and remembers \
         a fact after each, and is SIGKILLed at a random moment (20–400 ms after it starts: while \
         opening, between calls, inside them), again and again. After each kill the store is \
         opened afresh and checked against what the child had acknowledged: every acknowledged \
         batch there once, no batch in part, seqs contiguous, every acknowledged fact there \
         once.\n\n",
    );
    table(
        &mut out,
        rows,
        "kills",
        &[
            ("backend", "backend"),
            ("kills", "kills"),
            ("batches acknowledged", "acknowledged"),
            ("lost", "lost"),
            ("partial", "partial"),
            ("duplicated", "duplicated"),
            ("facts acknowledged", "facts_acknowledged"),
            ("facts lost", "facts_lost"),
            ("facts duplicated", "facts_duplicated"),
        ],
    );
    out.push_str(
        "## History checker under cuts\n\nFour writers and two readers on one conversation while \
         the proxy cuts every connection every 5–50 ms (at random; every tenth pause, a lull \
         of 250–500 ms); writers retry a batch up to 10 times and then give it up (its \
         outcome unknown). `mnemix_conformance::history::check` verifies, \
         in the manner of Jepsen's Elle for list-append: no acknowledged append lost, none \
         twice, every batch whole or absent, every read a prefix of the final order holding \
         every append acknowledged before it began, writer and real-time order kept.\n\n",
    );
    let columns = [
        &[
            ("backend", "backend"),
            ("cuts", "cuts"),
            ("connections severed", "severed"),
        ][..],
        &HISTORY_FIGURES,
    ]
    .concat();
    table(&mut out, rows, "history", &columns);
    out.push_str(
        "## Servers killed and restarted\n\nFour writers (500 batches each) and two readers on one \
         conversation while the server's container is SIGKILLed and started again three times \
         (on the compose stack only; the test checks the last restart came before the workload \
         ended). The store retries twice, the writers 150 times every 20 ms, so failures reach \
         the history (\"failed tries\", \"failed reads\") unless the driver hides them. \
         \"Seconds down\" sums the time from each kill until `docker start` returned; the \
         server then still recovers before it answers. The history checker's anomalies must be \
         0: whatever the server acknowledged survived its crash.\n\n",
    );
    let columns = [
        &[
            ("backend", "backend"),
            ("restarts", "restarts"),
            ("seconds down", "seconds_down"),
            ("seconds", "seconds"),
        ][..],
        &HISTORY_FIGURES,
    ]
    .concat();
    table(&mut out, rows, "restarts", &columns);
    out.push_str(
        "## Cluster failovers\n\nFour writers and two readers on one conversation of the compose \
         stack's Redis Cluster (three masters, a replica each, nodes called failed after 3 s) \
         while the replica of the conversation's slot is stalled (SIGSTOP, its link cut) for \
         300 ms, its master SIGKILLed, the replica let go on and promoted, and the killed node \
         started again as the new master's replica, three times; the writers stop half a \
         second after the last rejoin. What the master answered during the stall its replica \
         never received. The store waits for one replica (`replicas=1`: `WAIT` after each \
         command), so a write is acknowledged, and a read answered, only once a replica holds \
         it; writes are refused while the slot's master has no replica (without it, one run \
         of this test found 441 anomalies: acknowledged batches lost, reads taken back). \
         \"Failover seconds\" runs from each kill to a cluster that serves the slot again. The \
         history checker's anomalies must be 0: no failover took back what a caller was \
         told.\n\n",
    );
    let columns = [
        &[
            ("backend", "backend"),
            ("failovers", "failovers"),
            ("failover seconds", "failover_seconds"),
            ("seconds", "seconds"),
        ][..],
        &HISTORY_FIGURES,
    ]
    .concat();
    table(&mut out, rows, "failover", &columns);
    out
}
