//! Killed processes: a child (`kill-writer`) appends batches and remembers facts in a loop on
//! SQLite, PostgreSQL or Redis and is SIGKILLed at a random moment, again and again; after each
//! kill the store is opened afresh and every acknowledged batch is there exactly once, no batch
//! is there in part, seqs are contiguous, and every acknowledged fact is there once.
//!
//! `MEMORY_KILLS=N` kills N times per backend (default 10: `cargo xtask kills` runs 100);
//! `MEMORY_FAULTS_REPORT=FILE` appends one JSON line per backend (RELIABILITY.md's figures).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use agent_memory::{ConversationId, FactQuery, LoadOptions, Scope};
use memory_tests::Server;
use serde_json::json;

#[derive(Debug, Default)]
struct Tally {
    kills: u64,
    acknowledged: u64,
    lost: u64,
    partial: u64,
    duplicated: u64,
    facts_acknowledged: u64,
    facts_lost: u64,
    facts_duplicated: u64,
}

/// Acknowledged batches and facts, from the child's file.
fn acknowledged(path: &std::path::Path) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let (mut batches, mut facts) = (BTreeSet::new(), BTreeSet::new());
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("a", k)) => batches.insert(k.parse().expect("a batch number")),
            Some(("r", k)) => facts.insert(k.parse().expect("a batch number")),
            _ => panic!("a torn acknowledgement line: {line:?}"),
        };
    }
    (batches, facts)
}

/// Checks the store against what was acknowledged; returns the next batch number to write.
async fn check(url: &str, scope: &Scope, acks: &std::path::Path, tally: &mut Tally) -> u64 {
    let store = agent_memory::open(url).await.expect("the store reopens");
    let id = ConversationId::new("kills").expect("an id");
    let stored = match store.load(scope, &id, LoadOptions::raw()).await {
        Ok(stored) => stored,
        // Killed before the conversation was made.
        Err(e) if e.is_not_found() => Vec::new(),
        Err(e) => panic!("load after a kill: {e}"),
    };
    let seqs: Vec<u64> = stored.iter().map(|m| m.seq).collect();
    assert_eq!(
        seqs,
        (1..=stored.len() as u64).collect::<Vec<_>>(),
        "seqs are contiguous"
    );
    // batch → positions of its messages.
    let mut batches: BTreeMap<u64, Vec<(usize, u64)>> = BTreeMap::new();
    for (at, m) in stored.iter().enumerate() {
        let (batch, part) = m.message.id.as_str()[1..]
            .split_once('-')
            .expect("an id b{k}-{i}");
        batches
            .entry(batch.parse().expect("k"))
            .or_default()
            .push((at, part.parse().expect("i")));
    }
    let (acked, facts_acked) = acknowledged(acks);
    tally.acknowledged = acked.len() as u64;
    tally.lost = acked.iter().filter(|k| !batches.contains_key(k)).count() as u64;
    tally.partial = 0;
    tally.duplicated = 0;
    for parts in batches.values() {
        let whole = parts.len() == 3
            && parts
                .iter()
                .enumerate()
                .all(|(i, (at, part))| *part == i as u64 && *at == parts[0].0 + i);
        if parts.len() > 3 {
            tally.duplicated += 1;
        } else if !whole {
            tally.partial += 1;
        }
    }
    let query = FactQuery {
        include_superseded: true,
        limit: Some(1000),
        ..FactQuery::default()
    };
    let mut facts: BTreeMap<u64, u64> = BTreeMap::new();
    let mut cursor = None;
    loop {
        let page = store
            .list_facts(
                scope,
                FactQuery {
                    cursor: cursor.clone(),
                    ..query.clone()
                },
            )
            .await
            .expect("facts list");
        for fact in page.items {
            let k = fact.text.strip_prefix("fact ").expect("a fact k");
            *facts.entry(k.parse().expect("k")).or_default() += 1;
        }
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    tally.facts_acknowledged = facts_acked.len() as u64;
    tally.facts_lost = facts_acked
        .iter()
        .filter(|k| !facts.contains_key(k))
        .count() as u64;
    tally.facts_duplicated = facts.values().filter(|n| **n > 1).count() as u64;
    let highest = batches.keys().chain(&acked).max().copied();
    highest.map_or(0, |k| k + 1)
}

async fn kill_again_and_again(backend: &str, url: &str) {
    let kills: u64 = std::env::var("MEMORY_KILLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10);
    let dir = std::env::temp_dir().join(format!("memory-kills-{backend}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let acks = dir.join("acks");
    let subject = memory_tests::unique("kills");
    let scope = Scope::new("faults", subject.as_str()).expect("a scope");
    let mut tally = Tally::default();
    let mut next = 0;
    for _ in 0..kills {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kill-writer"))
            .args([url, "faults", &subject, &next.to_string()])
            .arg(&acks)
            .spawn()
            .expect("the writer starts");
        // Kills land anywhere: while opening (and migrating), between calls, inside them.
        tokio::time::sleep(Duration::from_millis(fastrand::u64(20..400))).await;
        if let Some(status) = child.try_wait().expect("the writer's status") {
            panic!("the writer ended by itself ({status}) before it was killed");
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("the writer is reaped");
        tally.kills += 1;
        next = check(url, &scope, &acks, &mut tally).await;
    }
    let line = json!({
        "test": "kills", "backend": backend, "kills": tally.kills,
        "acknowledged": tally.acknowledged, "lost": tally.lost, "partial": tally.partial,
        "duplicated": tally.duplicated, "facts_acknowledged": tally.facts_acknowledged,
        "facts_lost": tally.facts_lost, "facts_duplicated": tally.facts_duplicated,
    });
    eprintln!("kills on {backend}: {line}");
    memory_tests::report(&[line]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(tally.acknowledged > 0, "the writer got batches through");
    assert_eq!(
        (tally.lost, tally.partial, tally.duplicated),
        (0, 0, 0),
        "{backend}: {tally:?}"
    );
    assert_eq!(
        (tally.facts_lost, tally.facts_duplicated),
        (0, 0),
        "{backend}: {tally:?}"
    );
}

#[tokio::test]
async fn a_killed_sqlite_writer_loses_and_tears_nothing() {
    let dir = std::env::temp_dir().join(format!("memory-kills-db-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let url = format!("sqlite://{}", dir.join("memory.db").display());
    kill_again_and_again("sqlite", &url).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_killed_postgres_writer_loses_and_tears_nothing() {
    if let Some(url) = Server::Postgres.url("kills on postgres") {
        let url = memory_tests::with_param(&url, "schema", "faults");
        kill_again_and_again("postgres", &url).await;
    }
}

#[tokio::test]
async fn a_killed_redis_writer_loses_and_tears_nothing() {
    if let Some(url) = Server::Redis.url("kills on redis") {
        let url = memory_tests::with_param(&url, "prefix", "faults");
        kill_again_and_again("redis", &url).await;
    }
}
