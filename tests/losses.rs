//! Lost bytes: a [`FaultProxy`] discards a few requests in the middle of a burst and forwards
//! the rest, every connection still open (requests that never reach the server, and no reset
//! to say so: to the client, answers that never come). Bursts of concurrent calls of several
//! tenants run through it, and every answer must be its own call's: a call may fail, never
//! receive another call's data. After each burst the store answers
//! again.
//!
//! On a multiplexed connection (Redis) answers are paired with requests by their order, so a
//! lost request shifts every answer after it onto the wrong call unless the store notices.
//!
//! [`FaultProxy`]: mnemix_testkit::faults::FaultProxy

use std::sync::Arc;
use std::time::{Duration, Instant};

use mnemix::backends::postgres::PostgresStore;
use mnemix::{Namespace, RetryPolicy, Store};
use mnemix_testkit::faults::{Fault, FaultProxy};
use mnemix_tests::{proxied_cluster, proxied_with, proxy_before, Server};

/// The stores' timeout here: short, so the bursts are quick.
const LIMIT: Duration = Duration::from_secs(2);
/// How many requests of a burst the proxy loses.
const LOST: u64 = 2;
const BURSTS: usize = 10;
const TENANTS: usize = 3;
const CALLS_PER_TENANT: usize = 10;

/// What the calls of the bursts received.
#[derive(Debug, Default)]
struct Tally {
    right: usize,
    wrong: Vec<String>,
    failed: usize,
    fired: usize,
}

async fn lose_bytes(server: Server) {
    let tests = format!("lost bytes on {}", server.name());
    let Some(url) = server.url(&tests) else {
        return;
    };
    let (proxy, store) = proxied_with(server, &url, |o| {
        o.retry(RetryPolicy::never()).timeout(Some(LIMIT))
    })
    .await
    .expect("a store through the proxy");
    bursts(server.name(), &store, &[proxy]).await;
}

/// [`BURSTS`] bursts of concurrent reads of three tenants through `proxies`, each losing
/// [`LOST`] requests a few into the burst; asserts no answer was another call's, and that the
/// store answers after each burst.
async fn bursts(backend: &str, store: &Store, proxies: &[FaultProxy]) {
    // Each tenant a namespace of its own; each call reads an entry no other call reads.
    let run = mnemix_tests::unique("losses");
    let tenants: Vec<Namespace> = (0..TENANTS)
        .map(|t| Namespace::new(format!("{run}-t{t}")).expect("a namespace"))
        .collect();
    let expected = |tenant: usize, call: usize| format!("tenant {tenant}, entry {call}");
    for (t, namespace) in tenants.iter().enumerate() {
        for call in 0..CALLS_PER_TENANT {
            store
                .cache_set(
                    namespace,
                    &format!("entry-{call}"),
                    expected(t, call).into_bytes(),
                    Some(Duration::from_mins(10)),
                )
                .await
                .expect("an entry before the faults");
        }
    }

    let mut tally = Tally::default();
    for burst in 0..BURSTS {
        // The loss begins a few requests into the burst, so that some of it crosses first.
        for proxy in proxies {
            proxy.arm(1 + (burst as u64 % 5), Fault::Lose(LOST));
        }
        let calls = (0..TENANTS).flat_map(|t| (0..CALLS_PER_TENANT).map(move |c| (t, c)));
        let answers = futures::future::join_all(calls.map(|(t, call)| {
            let store = store.clone();
            let namespace = tenants[t].clone();
            async move {
                let answer = store.cache_get(&namespace, &format!("entry-{call}")).await;
                (t, call, answer)
            }
        }))
        .await;
        let fired = proxies.iter().filter(|proxy| proxy.disarm()).count();
        tally.fired += usize::from(fired > 0);
        for (t, call, answer) in answers {
            match answer {
                Ok(Some(bytes)) if bytes == expected(t, call).as_bytes() => tally.right += 1,
                Ok(other) => tally.wrong.push(format!(
                    "burst {burst}: tenant {t}'s entry {call} read {:?}",
                    other.map(|b| String::from_utf8_lossy(&b).into_owned())
                )),
                // Mostly `Unavailable`; PostgreSQL may answer a call whose messages were
                // partly lost with an error of its own. Its own, either way.
                Err(_) => tally.failed += 1,
            }
        }
        // The store answers again.
        let started = Instant::now();
        loop {
            match store.cache_get(&tenants[0], "entry-0").await {
                Ok(Some(bytes)) if bytes == expected(0, 0).as_bytes() => break,
                Ok(other) => tally.wrong.push(format!(
                    "after burst {burst}: tenant 0's entry 0 read {:?}",
                    other.map(|b| String::from_utf8_lossy(&b).into_owned())
                )),
                Err(e) => assert!(
                    started.elapsed() < 3 * LIMIT,
                    "{backend}: no answer {:?} after burst {burst}: {e}",
                    started.elapsed()
                ),
            }
        }
    }
    let row = serde_json::json!({
        "test": "lost bytes",
        "backend": backend,
        "bursts": BURSTS,
        "calls": BURSTS * TENANTS * CALLS_PER_TENANT,
        "right": tally.right,
        "wrong": tally.wrong.len(),
        "failed": tally.failed,
    });
    eprintln!("lost bytes on {backend}: {row}");
    mnemix_tests::report(&[row]);
    assert_eq!(tally.fired, BURSTS, "every burst met the loss");
    assert!(
        tally.wrong.is_empty(),
        "{backend}: {} answers were another call's:\n{}",
        tally.wrong.len(),
        tally.wrong.join("\n")
    );
    assert!(tally.right > 0, "{backend}: no call was answered");
    for namespace in &tenants {
        store.forget_namespace(namespace).await.expect("clean up");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_bytes_never_give_a_postgres_caller_another_calls_answer() {
    lose_bytes(Server::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_bytes_never_give_a_redis_caller_another_calls_answer() {
    lose_bytes(Server::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_bytes_never_give_a_redis_cluster_caller_another_calls_answer() {
    let tests = "lost bytes on redis-cluster";
    if let Some((proxies, store)) = proxied_cluster(tests, Some(LIMIT)).await {
        let store = Store::with_retry(Arc::new(store), RetryPolicy::never());
        bursts("redis-cluster", &store, &proxies).await;
    }
}

/// PostgreSQL answers a request with its statement's rows, `CommandComplete`, and then the
/// `ReadyForQuery` of its `Sync`. When the statement's `Execute` is lost and its `Bind` and
/// `Sync` arrive, the server runs nothing and answers `BindComplete`, `ReadyForQuery`: the
/// store must fail the call, not read it as "no rows" (a cache entry that is there would read
/// as missing, a write would report nothing changed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_statement_whose_messages_were_lost_fails_rather_than_answers_empty() {
    let tests = "a lost PostgreSQL statement";
    let Some(url) = Server::Postgres.url(tests) else {
        return;
    };
    let (proxy, url) = proxy_before(Server::Postgres, &url).await.expect("a proxy");
    // One connection, so the next call's messages are the next ones the proxy sees.
    let store = PostgresStore::builder()
        .url(&url)
        .max_connections(1)
        .timeout(Some(LIMIT))
        .open()
        .await
        .expect("a store through the proxy");
    let store = Store::with_retry(Arc::new(store), RetryPolicy::never());
    let namespace = Namespace::new(mnemix_tests::unique("lost")).expect("a namespace");
    store
        .cache_set(&namespace, "entry", b"there".to_vec(), None)
        .await
        .expect("an entry");
    // Prepared (and cached) now: a read is Bind, Execute, Sync. Each try loses one or two of
    // them (losing the Execute alone is the case the driver would read as "no rows").
    let read = || store.cache_get(&namespace, "entry");
    assert_eq!(read().await.expect("a read"), Some(b"there".to_vec()));
    let mut failed = 0;
    for (at, count) in [(1, 1), (2, 1), (3, 1), (1, 2), (2, 2)] {
        proxy.arm(at, Fault::Lose(count));
        let lost = read().await;
        let fired = proxy.disarm();
        eprintln!("{tests}: losing {count} message(s) from message {at} on: {lost:?}");
        match lost {
            Ok(value) => assert_eq!(
                value,
                Some(b"there".to_vec()),
                "losing {count} message(s) from message {at} on: an answer that is not the entry's"
            ),
            Err(_) => failed += usize::from(fired),
        }
        // The store answers again.
        let started = Instant::now();
        while read().await.ok().flatten().is_none() {
            assert!(started.elapsed() < 3 * LIMIT, "no answer after the loss");
        }
    }
    assert!(failed > 0, "a loss fell on a read");
    store.forget_namespace(&namespace).await.expect("clean up");
}
