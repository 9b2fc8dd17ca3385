//! The `mnemix` binary end to end: the demo twice on one folder, the conformance command,
//! and a clear refusal for a backend that is not compiled in. These run on the default build
//! (SQLite); a libSQL build (`--no-default-features --features libsql`) runs `cli_libsql.rs`.
#![cfg(feature = "sqlite")]

use std::path::Path;
use std::process::{Command, Output};

fn mnemix(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mnemix"))
        .args(args)
        .current_dir(dir)
        .env_remove("MNEMIX_URL")
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
    let first = mnemix(dir.path(), &["demo"]);
    assert!(
        first.status.success(),
        "{}{}",
        stdout(&first),
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(stdout(&first).contains("run 1"), "{}", stdout(&first));
    assert!(
        !stdout(&first).contains('✘'),
        "an expected refusal is a passed check: {}",
        stdout(&first)
    );
    assert!(dir.path().join(".mnemix/memory.db").exists());

    let second = mnemix(dir.path(), &["demo"]);
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

    let listed = mnemix(
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
    let run = mnemix(dir.path(), &["conformance", "--url", "memory://"]);
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

/// The store-wide counts `stats` prints, but facts: an expired fact, which no read can see and
/// `namespaces` does not list, stays until the store drops it (see the closing note of the
/// erasure in `conformance`).
fn counts(dir: &Path, url: &str) -> Vec<String> {
    let run = mnemix(dir, &["--url", url, "stats"]);
    assert!(run.status.success(), "{}", stdout(&run));
    stdout(&run)
        .lines()
        .filter(|l| {
            let name = l.split_whitespace().next().unwrap_or_default();
            [
                "conversations",
                "messages",
                "collections",
                "vectors",
                "working_memory",
                "checkpoints",
                "cache",
            ]
            .contains(&name)
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn conformance_against_a_store_with_data_leaves_it_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let url = "sqlite://./team.db";
    let demo = mnemix(dir.path(), &["--url", url, "demo"]);
    assert!(demo.status.success(), "{}", stdout(&demo));
    let before = counts(dir.path(), url);
    assert!(before
        .iter()
        .any(|l| l.trim_start().starts_with("conversations") && !l.ends_with(" 0")));

    let run = mnemix(dir.path(), &["conformance", "--url", url]);
    let text = stdout(&run);
    assert!(run.status.success(), "{text}");
    assert!(text.contains("removed the suite's test data: "), "{text}");
    assert_eq!(
        counts(dir.path(), url),
        before,
        "the suite's data is gone, the team's stays"
    );
}

#[test]
fn a_backend_that_is_not_compiled_in_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let run = mnemix(
        dir.path(),
        &[
            "--url",
            "libsql://127.0.0.1:8080",
            "stats",
            "--subject",
            "x",
        ],
    );
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("libsql backend, which this build leaves out"),
        "{err}"
    );
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn export_import_copy_and_verify_move_every_record_between_files() {
    let dir = tempfile::tempdir().unwrap();
    let source = "sqlite://./.mnemix/memory.db";
    assert!(mnemix(dir.path(), &["demo"]).status.success());

    let export = mnemix(dir.path(), &["export", "--output", "dump.jsonl"]);
    assert!(export.status.success(), "{}", stderr(&export));
    let dump = std::fs::read_to_string(dir.path().join("dump.jsonl")).unwrap();
    let header: serde_json::Value = serde_json::from_str(dump.lines().next().unwrap()).unwrap();
    assert_eq!(header["format"], "agent-memory-export");
    assert_eq!(header["version"], 3);
    assert!(dump.contains(r#"{"kind":"message""#), "{dump}");
    let trailer: serde_json::Value = serde_json::from_str(dump.lines().last().unwrap()).unwrap();
    assert_eq!(trailer["end"], "agent-memory-export");
    assert_eq!(trailer["records"], dump.lines().count() - 2, "{trailer}");

    let import = mnemix(
        dir.path(),
        &["--url", "sqlite://imported.db", "import", "dump.jsonl"],
    );
    assert!(import.status.success(), "{}", stderr(&import));
    let verified = mnemix(
        dir.path(),
        &["verify", "--from", source, "--to", "sqlite://imported.db"],
    );
    assert!(
        verified.status.success(),
        "{}{}",
        stdout(&verified),
        stderr(&verified)
    );
    assert!(stdout(&verified).contains("every count and SHA-256 matches"));

    let copied = mnemix(
        dir.path(),
        &[
            "copy",
            "--from",
            source,
            "--to",
            "sqlite://copied.db",
            "--verify",
        ],
    );
    assert!(copied.status.success(), "{}", stderr(&copied));
    assert!(stdout(&copied).contains("every count and SHA-256 matches"));

    // A difference is reported by kind, and fails.
    let forget = mnemix(
        dir.path(),
        &[
            "--url",
            "sqlite://copied.db",
            "--namespace",
            "demo",
            "forget",
            "--subject",
            "ada",
            "--yes",
        ],
    );
    assert!(forget.status.success());
    let differs = mnemix(
        dir.path(),
        &["verify", "--from", source, "--to", "sqlite://copied.db"],
    );
    assert!(!differs.status.success());
    assert!(
        stdout(&differs).contains("demo/ada differs"),
        "{}",
        stdout(&differs)
    );
    assert!(stdout(&differs).contains("message: 8 in the source, 0 in the target"));
}

/// A backup that was cut (at a line boundary or inside a line) or changed restores nothing,
/// and says why; `--accept-unverified` restores what a cut file holds; a record the write API
/// would refuse is refused even then, before anything is written.
#[test]
fn a_cut_or_changed_export_restores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    assert!(mnemix(dir.path(), &["demo"]).status.success());
    let export = mnemix(dir.path(), &["export", "--output", "dump.jsonl"]);
    assert!(export.status.success(), "{}", stderr(&export));
    let dump = std::fs::read_to_string(dir.path().join("dump.jsonl")).unwrap();
    let lines: Vec<&str> = dump.lines().collect();
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    let import = |file: &str, target: &str, more: &[&str]| {
        let url = format!("sqlite://{target}");
        let mut args = vec!["--url", url.as_str(), "import", file];
        args.extend(more);
        mnemix(dir.path(), &args)
    };

    // Cut at a line boundary: the trailer and the last three records gone.
    let kept = &lines[..lines.len() - 4];
    write("cut.jsonl", &(kept.join("\n") + "\n"));
    let run = import("cut.jsonl", "cut.db", &[]);
    assert!(!run.status.success());
    assert!(stderr(&run).contains("cut short"), "{}", stderr(&run));
    assert!(!dir.path().join("cut.db").exists(), "nothing was written");

    // Cut inside a line.
    write("torn.jsonl", &dump[..dump.len() * 2 / 3]);
    let run = import("torn.jsonl", "torn.db", &[]);
    assert!(!run.status.success());
    assert!(stderr(&run).contains("line"), "{}", stderr(&run));
    assert!(!dir.path().join("torn.db").exists(), "nothing was written");

    // Changed: one message's text edited keeps its shape but not the digest.
    let edited = dump.replacen("Lisbon", "Madrid", 1);
    assert_ne!(edited, dump);
    write("edited.jsonl", &edited);
    let run = import("edited.jsonl", "edited.db", &[]);
    assert!(!run.status.success());
    assert!(
        stderr(&run).contains("trailer promises"),
        "{}",
        stderr(&run)
    );

    // Asked for, a cut file restores what it holds.
    let run = import("cut.jsonl", "cut.db", &["--accept-unverified"]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(
        stdout(&run).contains(&format!("imported {} records", kept.len() - 1)),
        "{}",
        stdout(&run)
    );

    // A message's seq moved from 3 to 30: refused even unverified, and nothing written.
    let moved: Vec<String> = lines
        .iter()
        .map(|line| {
            if line.contains(r#""kind":"message""#) && line.contains(r#""seq":3,"#) {
                line.replacen(r#""seq":3,"#, r#""seq":30,"#, 1)
            } else {
                (*line).to_owned()
            }
        })
        .collect();
    write("moved.jsonl", &(moved.join("\n") + "\n"));
    let run = import("moved.jsonl", "moved.db", &["--accept-unverified"]);
    assert!(!run.status.success());
    assert!(stderr(&run).contains("contiguous"), "{}", stderr(&run));
    assert!(!dir.path().join("moved.db").exists(), "nothing was written");
}

/// A run cut short (piped into `head`) leaves `trip-N` without its follow-up; every later run
/// still succeeds.
#[test]
fn the_demo_runs_after_an_interrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/.mnemix/memory.db", dir.path().display());
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let store = mnemix::open(&url).await.unwrap();
            let ada = store.scope("demo", "ada").unwrap();
            let id = mnemix_core::ConversationId::new("trip-1").unwrap();
            ada.new_conversation().id(id).await.unwrap();
        });
    let run = mnemix(dir.path(), &["demo"]);
    assert!(run.status.success(), "{}{}", stdout(&run), stderr(&run));
    assert!(stdout(&run).contains("run 2"), "{}", stdout(&run));
    let again = mnemix(dir.path(), &["demo"]);
    assert!(again.status.success(), "{}", stderr(&again));
}

/// A command that only reads never creates a database: a mistyped path is an error naming it,
/// not an empty store; a URL's options that would be dropped are refused.
#[test]
fn reading_commands_never_create_a_database() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["--url", "sqlite://./no/such/dir/x.db", "stats"][..],
        &[
            "--url",
            "sqlite://./typo.db",
            "--namespace",
            "demo",
            "facts",
            "list",
            "--subject",
            "ada",
        ],
        &[
            "--url",
            "sqlite://./typo.db",
            "export",
            "--output",
            "out.jsonl",
        ],
        &[
            "copy",
            "--from",
            "sqlite://./typo.db",
            "--to",
            "sqlite://./target.db",
            "--verify",
        ],
        &[
            "verify",
            "--from",
            "sqlite://./typo.db",
            "--to",
            "sqlite://./typo2.db",
        ],
    ] {
        let run = mnemix(dir.path(), args);
        assert!(!run.status.success(), "{args:?}: {}", stdout(&run));
        assert!(
            stderr(&run).contains("typo.db") || stderr(&run).contains("no/such/dir/x.db"),
            "{args:?}: the error names the path: {}",
            stderr(&run)
        );
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "nothing was created: {left:?}");

    let options = mnemix(dir.path(), &["--url", "sqlite://./x.db?mode=ro", "migrate"]);
    assert!(!options.status.success());
    assert!(stderr(&options).contains("mode=ro"), "{}", stderr(&options));
    // A command that writes creates the database, folders included.
    let made = mnemix(dir.path(), &["--url", "sqlite://./new/x.db", "migrate"]);
    assert!(made.status.success(), "{}", stderr(&made));
    assert!(dir.path().join("new/x.db").exists());
}

/// An empty answer says what was empty; `forget` without `--yes` says it is a dry run and what
/// `--yes` would erase; `facts list` shows the ids `forget` needs.
#[test]
fn empty_answers_and_dry_runs_say_so() {
    let dir = tempfile::tempdir().unwrap();
    assert!(mnemix(dir.path(), &["demo"]).status.success());
    let said = |args: &[&str]| {
        let run = mnemix(dir.path(), &[&["--namespace", "demo"][..], args].concat());
        assert!(run.status.success(), "{args:?}: {}", stderr(&run));
        stdout(&run)
    };
    let nobody = ["--subject", "nobody"];
    assert!(said(&[&["facts", "list"][..], &nobody].concat()).contains("no facts"));
    assert!(said(&[&["conversations", "list"][..], &nobody].concat()).contains("no conversations"));
    assert!(said(&[&["facts", "recall"][..], &nobody, &["tea"]].concat()).contains("no fact"));
    let dry = said(&["forget", "--subject", "ada"]);
    assert!(
        dry.contains("dry run") && dry.contains("8 message"),
        "{dry}"
    );
    let listed = said(&["facts", "list", "--subject", "ada", "--history"]);
    assert!(
        listed.contains("UTC") && listed.contains("(superseded)"),
        "{listed}"
    );
    // Nothing was erased by the dry run.
    assert!(said(&["conversations", "list", "--subject", "ada"]).contains("trip-1"));
}

/// One cause, said once: a refused connection is named once, not three times; an unknown
/// scheme lists what this build opens and which feature adds the rest.
#[test]
fn errors_say_each_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    // Port 1 on the loopback: nothing listens, the connection is refused at once.
    for url in [
        "postgres://postgres@127.0.0.1:1/test",
        "redis://127.0.0.1:1",
    ] {
        let run = mnemix(dir.path(), &["--url", url, "stats"]);
        assert!(!run.status.success());
        let said = stderr(&run);
        assert_eq!(said.matches("Connection refused").count(), 1, "{said}");
        assert!(
            !said.contains("server: error connecting to server"),
            "{said}"
        );
    }
    let run = mnemix(dir.path(), &["--url", "foo://x", "stats"]);
    let said = stderr(&run);
    assert!(
        said.contains("this build opens memory://, sqlite://FILE"),
        "{said}"
    );
    assert!(
        said.contains("the `libsql` feature adds file:FILE, libsql://"),
        "{said}"
    );
}

#[test]
fn import_refuses_a_newer_export_format() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("future.jsonl"),
        r#"{"format":"agent-memory-export","version":99,"backend":"sqlite","exported_at":0}"#,
    )
    .unwrap();
    let run = mnemix(
        dir.path(),
        &["--url", "memory://", "import", "future.jsonl"],
    );
    assert!(!run.status.success());
    assert!(
        stderr(&run).contains("newer than this build reads"),
        "{}",
        stderr(&run)
    );
}

/// The test server's URL; `None` (a named skip) without one unless postgres is required.
fn postgres_url(test: &str) -> Option<String> {
    use mnemix_testkit::services::{locate, Service};
    match locate(Service::Postgres) {
        Ok(url) => Some(url),
        Err(why) if !mnemix_conformance::is_required("postgres") => {
            eprintln!("SKIP cli::{test}: {why:?}");
            None
        }
        Err(why) => panic!("postgres is required: {why:?}"),
    }
}

/// Copies the demo's SQLite store to `target` and back, verifying both copies and the
/// round trip; `stats` on the target shows `expected` (its backend's figures).
fn copy_round_trip(target: &str, expected: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let source = "sqlite://./.mnemix/memory.db";
    assert!(mnemix(dir.path(), &["demo"]).status.success());
    assert!(mnemix(dir.path(), &["demo"]).status.success());

    let there = mnemix(
        dir.path(),
        &["copy", "--from", source, "--to", target, "--verify"],
    );
    assert!(
        there.status.success(),
        "{}{}",
        stdout(&there),
        stderr(&there)
    );
    assert!(
        stdout(&there).contains("every count and SHA-256 matches"),
        "{}",
        stdout(&there)
    );
    let stats = mnemix(
        dir.path(),
        &[
            "--url",
            target,
            "--namespace",
            "demo",
            "stats",
            "--subject",
            "ada",
        ],
    );
    assert!(stats.status.success(), "{}", stderr(&stats));
    for shown in expected.iter().chain(&["durability", "subject demo/ada"]) {
        assert!(
            stdout(&stats).contains(shown),
            "{shown}: {}",
            stdout(&stats)
        );
    }
    // The copy holds what the source holds, and the target's table counts say so.
    let source_stats = mnemix(dir.path(), &["--url", source, "stats"]);
    let count_of = |output: &str, table: &str| -> Option<String> {
        output
            .lines()
            .map(str::trim)
            .find(|line| line.split_whitespace().next() == Some(table))
            .map(str::to_owned)
    };
    for table in [
        "conversations",
        "messages",
        "facts",
        "collections",
        "vectors",
        "working_memory",
        "checkpoints",
    ] {
        let there = count_of(&stdout(&stats), table);
        assert!(there.is_some(), "no {table} count: {}", stdout(&stats));
        assert_eq!(there, count_of(&stdout(&source_stats), table), "{table}");
    }

    let back = mnemix(
        dir.path(),
        &[
            "copy",
            "--from",
            target,
            "--to",
            "sqlite://back.db",
            "--verify",
        ],
    );
    assert!(back.status.success(), "{}{}", stdout(&back), stderr(&back));
    let both = mnemix(
        dir.path(),
        &["verify", "--from", source, "--to", "sqlite://back.db"],
    );
    assert!(both.status.success(), "{}{}", stdout(&both), stderr(&both));
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn stats_of_an_unreachable_server_fails() {
    let dir = tempfile::tempdir().unwrap();
    // Port 1: nothing listens there, so the connection is refused at once.
    for url in [
        "postgres://postgres@127.0.0.1:1/test",
        "redis://127.0.0.1:1",
    ] {
        let run = mnemix(dir.path(), &["--url", url, "stats"]);
        assert!(!run.status.success(), "{url}: {}", stdout(&run));
        assert!(
            stderr(&run).contains("cannot open"),
            "{url}: {}",
            stderr(&run)
        );
    }
}

#[test]
fn copy_sqlite_to_postgres_and_back_verifies_equal() {
    let Some(server) = postgres_url("copy_sqlite_to_postgres_and_back_verifies_equal") else {
        return;
    };
    // A schema of its own, dropped at the end, so runs never see each other's data.
    let schema = format!("cli_copy_{}", nanos());
    let separator = if server.contains('?') { '&' } else { '?' };
    copy_round_trip(
        &format!("{server}{separator}schema={schema}"),
        &["(postgres)", "schema version", "messages", "vector search"],
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&server, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
            .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
            .await
            .unwrap();
    });
}

#[test]
fn copy_sqlite_to_redis_and_back_verifies_equal() {
    use mnemix_testkit::services::{locate, Service};
    let server = match locate(Service::Redis) {
        Ok(url) => url,
        Err(why) if !mnemix_conformance::is_required("redis") => {
            eprintln!("SKIP cli::copy_sqlite_to_redis_and_back_verifies_equal: {why:?}");
            return;
        }
        Err(why) => panic!("redis is required: {why:?}"),
    };
    // A key prefix of its own, deleted at the end.
    let prefix = format!("cli-copy-{}", nanos());
    let separator = if server.contains('?') { '&' } else { '?' };
    copy_round_trip(
        &format!("{server}{separator}prefix={prefix}"),
        &["(redis)", "vector search", "exact", "messages"],
    );

    let client = redis::Client::open(server.as_str()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query(&mut conn)
        .unwrap();
    assert!(!keys.is_empty(), "the copy wrote under its prefix");
    let _: i64 = redis::cmd("UNLINK").arg(&keys).query(&mut conn).unwrap();
}

#[test]
fn kinds_are_registered_listed_and_granted_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("preference.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "required": ["category", "value"],
            "properties": {"category": {"type": "string"}, "value": {"type": "string"}}}"#,
    )
    .unwrap();
    let schema = schema.to_str().unwrap();
    let at = [
        "--url",
        "sqlite://./kinds.db",
        "--namespace",
        "acme",
        "kinds",
    ];
    let run = |args: &[&str]| mnemix(dir.path(), &[&at[..], args].concat());
    let registered = run(&[
        "register",
        "Preference",
        "--schema",
        schema,
        "--unique-on",
        "category",
    ]);
    assert!(registered.status.success(), "{}", stderr(&registered));
    let listed = stdout(&run(&["list"]));
    assert!(
        listed.contains("Preference  unique on category")
            && listed.contains(r#""required":["category","value"]"#),
        "{listed}"
    );
    let typo = run(&[
        "register",
        "Typo",
        "--schema",
        schema,
        "--unique-on",
        "categroy",
    ]);
    assert!(!typo.status.success(), "an undeclared unique field");
    assert!(stderr(&typo).contains("categroy"), "{}", stderr(&typo));
    let unknown = run(&[
        "grant",
        "--owner",
        "agent-1",
        "--grantee",
        "agent-2",
        "--kinds",
        "NoSuchKind",
    ]);
    assert!(!unknown.status.success(), "a grant of an unknown kind");
    assert!(stdout(&run(&["grants"])).contains("no grants"));
    let reserved = run(&["register", "_kind", "--schema", schema]);
    assert!(!reserved.status.success());
    assert!(
        stderr(&reserved).contains("reserved"),
        "{}",
        stderr(&reserved)
    );
    let granted = run(&["grant", "--owner", "agent-1", "--grantee", "agent-2"]);
    assert!(granted.status.success(), "{}", stderr(&granted));
    assert!(
        stdout(&run(&["grants"])).contains("agent-1 → agent-2: every kind"),
        "{}",
        stdout(&run(&["grants"]))
    );
    assert!(stdout(&run(&[
        "revoke",
        "--owner",
        "agent-1",
        "--grantee",
        "agent-2"
    ]))
    .contains("revoked"));
    assert!(stdout(&run(&[
        "revoke",
        "--owner",
        "agent-1",
        "--grantee",
        "agent-2"
    ]))
    .contains("no such grant"));
    assert!(run(&["delete", "Preference"]).status.success());
    assert!(stdout(&run(&["list"])).contains("no kinds registered"));
    assert!(!run(&["delete", "Preference"]).status.success(), "gone");
}

/// The lines `mnemix changes` printed, each a change.
fn changes(dir: &Path, args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = vec!["--namespace", "demo", "changes"];
    all.extend_from_slice(args);
    let output = mnemix(dir, &all);
    assert!(output.status.success(), "{}", stderr(&output));
    stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a change per line"))
        .collect()
}

/// `mnemix changes` prints the namespace's feed as JSON Lines, each write by the command line
/// and never with memory text; resumes after a cursor; follows new writes; trims by count, after
/// which a cursor from before the trim is refused.
#[test]
fn changes_prints_resumes_follows_and_trims_the_feed() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    assert!(mnemix(dir.path(), &["demo"]).status.success());
    let feed = changes(dir.path(), &[]);
    assert!(feed.len() > 5, "{feed:?}");
    for change in &feed {
        assert_eq!(change["principal"]["kind"], "command", "{change}");
    }
    let operations: Vec<&str> = feed
        .iter()
        .map(|c| c["operation"].as_str().unwrap())
        .collect();
    for operation in ["create_conversation", "append", "remember", "erase"] {
        assert!(operations.contains(&operation), "{operations:?}");
    }
    let text = serde_json::to_string(&feed).unwrap();
    assert!(
        !text.contains("Lisbon") && !text.contains("vegetarian"),
        "ids, never text: {text}"
    );
    let third = feed[2]["cursor"].as_str().unwrap();
    assert_eq!(changes(dir.path(), &["--after", third]), feed[3..]);
    assert_eq!(changes(dir.path(), &["--limit", "2"]), feed[..2]);

    let last = feed.last().unwrap()["cursor"].as_str().unwrap().to_owned();
    let mut follower = Command::new(env!("CARGO_BIN_EXE_mnemix"))
        .args([
            "--namespace",
            "demo",
            "changes",
            "--follow",
            "--poll-ms",
            "20",
        ])
        .args(["--after", &last])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(follower.stdout.take().unwrap()).lines();
    assert!(mnemix(dir.path(), &["demo"]).status.success());
    let followed: serde_json::Value =
        serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    follower.kill().unwrap();
    let _ = follower.wait();
    let now = changes(dir.path(), &[]);
    assert_eq!(
        followed,
        now[feed.len()],
        "the first change after the cursor"
    );

    let trimmed = mnemix(
        dir.path(),
        &["--namespace", "demo", "changes", "--trim-to", "3"],
    );
    assert!(trimmed.status.success(), "{}", stderr(&trimmed));
    assert!(
        stdout(&trimmed).contains(&format!("removed {} changes", now.len() - 3)),
        "{}",
        stdout(&trimmed)
    );
    assert_eq!(changes(dir.path(), &[]), now[now.len() - 3..]);
    let refused = mnemix(
        dir.path(),
        &["--namespace", "demo", "changes", "--after", third],
    );
    assert!(!refused.status.success());
    assert!(stderr(&refused).contains("trimmed"), "{}", stderr(&refused));
    let garbage = mnemix(
        dir.path(),
        &["--namespace", "demo", "changes", "--after", "x"],
    );
    assert!(!garbage.status.success());
}
