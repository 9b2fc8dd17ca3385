//! The history checker under faults: 4 writers and 2 readers on one conversation while a
//! [`FaultProxy`](mnemix_testkit::faults::FaultProxy) cuts every connection to PostgreSQL
//! or Redis every 5–50 ms, but for every tenth pause, a lull that lasts 250–500 ms and then
//! until an append has committed (so that a loaded machine still checks something). Writers retry as
//! callers do and give a batch up after 10 tries;
//! [`mnemix_conformance::history::check`] must find no anomaly.
//!
//! `MNEMIX_FAULTS_REPORT=FILE` appends one JSON line per backend (RELIABILITY.md's figures);
//! `MNEMIX_HISTORY_BATCHES=N` makes each writer append N batches (default 100).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mnemix::{ConversationId, NewConversation, OpenOptions, RetryPolicy, Scope, Store};
use mnemix_conformance::history::{record, Workload};
use mnemix_tests::{proxied, Server};

async fn history_under_cuts(server: Server) {
    let tests = format!("history under cuts on {}", server.name());
    let Some(url) = server.url(&tests) else {
        return;
    };
    let retry = RetryPolicy {
        attempts: 3,
        first_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(50),
    };
    let (proxy, store) = proxied(server, &url, retry)
        .await
        .expect("a store through the proxy");
    let proxy = Arc::new(proxy);
    let scope = Scope::new("faults", mnemix_tests::unique("history")).expect("a valid scope");
    let conversation = store
        .create_conversation(&scope, NewConversation::default())
        .await
        .expect("a conversation");
    let workload = Workload {
        batches: std::env::var("MNEMIX_HISTORY_BATCHES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(100),
        ..Workload::default()
    };
    // A second store, straight to the server, watches the conversation grow: the cutter's
    // lulls last until it has.
    let watcher = OpenOptions::new(&url)
        .open()
        .await
        .expect("a store straight to the server");
    let cuts = Arc::new(AtomicU64::new(0));
    let cutter = {
        let (proxy, cuts) = (Arc::clone(&proxy), Arc::clone(&cuts));
        let (scope, conversation) = (scope.clone(), conversation.id.clone());
        tokio::spawn(async move {
            let mut seen = 0;
            for cut in 1u64.. {
                // Every 5–50 ms: often enough that every operation meets cuts. Every tenth
                // pause is a lull that lets a connection (PostgreSQL's startup takes several
                // round trips) live to carry an append: it lasts 250–500 ms and then until an
                // append has committed, up to 10 s. A fixed lull was not enough on a loaded
                // machine: twice not one of 400 appends got through some 3,900 cuts.
                if cut % 10 == 0 {
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(250..500))).await;
                    seen = lull_until_grown(&watcher, &scope, &conversation, seen).await;
                } else {
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(5..50))).await;
                }
                proxy.cut_all();
                cuts.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let mut history = record(
        store.backend(),
        scope.clone(),
        conversation.id.clone(),
        workload,
    )
    .await;
    // The final read comes once the cuts have stopped.
    cutter.abort();
    let _ = cutter.await;
    let row = [
        ("test", "history".into()),
        ("backend", server.name().into()),
        ("cuts", cuts.load(Ordering::SeqCst).into()),
        ("severed", proxy.severed().into()),
    ];
    let anomalies =
        mnemix_tests::judge(&mut history, &store, &scope, &conversation.id, &tests, row).await;
    assert!(proxy.severed() > 0, "the cuts ended connections in use");
    assert!(
        history.acknowledged() > 0,
        "no append got through the cuts: the run checked nothing"
    );
    assert_eq!(anomalies, Vec::<String>::new());
}

/// Waits (up to 10 s) until the conversation's `last_seq` passes `seen`, and gives the value
/// it reached; a little longer once it has, for the append's answer to reach its caller.
async fn lull_until_grown(
    watcher: &Store,
    scope: &Scope,
    conversation: &ConversationId,
    seen: u64,
) -> u64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let last_seq = watcher
            .get_conversation(scope, conversation)
            .await
            .map_or(seen, |c| c.last_seq);
        if last_seq > seen {
            tokio::time::sleep(Duration::from_millis(50)).await;
            return last_seq;
        }
        if tokio::time::Instant::now() >= deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_history_under_cuts_has_no_anomaly() {
    history_under_cuts(Server::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_history_under_cuts_has_no_anomaly() {
    history_under_cuts(Server::Redis).await;
}
