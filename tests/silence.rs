//! A silent server: a [`FaultProxy`] holds the store's connection open and lets nothing
//! through, either way (no reset ever comes). A call waits at most the store's timeout and
//! fails `Unavailable`; the next call, and the front layer's retry of a read, go to a fresh
//! connection and succeed.
//!
//! A server that accepts connections and never answers any (a blackhole): a call fails within
//! the timeout (and a second to spare), and with the default retry policy within as many
//! timeouts as it has tries, plus its waits; once the server answers again, so does the store.
//!
//! [`FaultProxy`]: mnemix_testkit::faults::FaultProxy

use std::time::{Duration, Instant};

use std::sync::Arc;

use mnemix::{
    AppendOptions, LoadOptions, MemoryError, Message, NewConversation, RetryPolicy, Scope, Store,
};
use mnemix_testkit::faults::{Fault, FaultProxy};
use mnemix_tests::{proxied_cluster, proxied_with, Server};

/// The stores' timeout here: short, so the test is quick.
const LIMIT: Duration = Duration::from_secs(2);

/// Far past the timeout: a call still running then hangs, and the test fails instead.
const HANG: Duration = Duration::from_mins(1);

async fn silence(server: Server) {
    let tests = format!("silence on {}", server.name());
    let Some(url) = server.url(&tests) else {
        return;
    };
    for retry in [RetryPolicy::never(), RetryPolicy::default()] {
        let (proxy, store) = proxied_with(server, &url, |o| o.retry(retry).timeout(Some(LIMIT)))
            .await
            .expect("a store through the proxy");
        let scope = Scope::new("silence", mnemix_tests::unique("subject")).expect("a scope");
        let thread = store
            .create_conversation(&scope, NewConversation::default())
            .await
            .expect("a conversation before the silence");
        store
            .append(
                &scope,
                &thread.id,
                vec![Message::user("hello")],
                AppendOptions::default(),
            )
            .await
            .expect("an append before the silence");

        proxy.arm(1, Fault::Silence);
        let started = Instant::now();
        let silent =
            tokio::time::timeout(HANG, store.load(&scope, &thread.id, LoadOptions::last(10)))
                .await
                .unwrap_or_else(|_| panic!("{}: a call on a silent server hung", server.name()));
        let waited = started.elapsed();
        assert!(proxy.disarm(), "the silence fell on the load");
        eprintln!(
            "silence on {} (retry {} tries): {:?} after {waited:?} (timeout {LIMIT:?})",
            server.name(),
            retry.attempts,
            silent.as_ref().map(Vec::len),
        );
        if retry.attempts == 1 {
            assert!(
                matches!(silent, Err(MemoryError::Unavailable { .. })),
                "{}: {silent:?}",
                server.name()
            );
            assert!(waited >= LIMIT, "it gave up before its timeout: {waited:?}");
        } else {
            // The retry went to a new connection, past the silent one.
            assert_eq!(
                silent.expect("the retried load").len(),
                1,
                "{}",
                server.name()
            );
        }

        // The silent connection is not used again: the next call is answered.
        let after =
            tokio::time::timeout(HANG, store.load(&scope, &thread.id, LoadOptions::last(10)))
                .await
                .expect("no hang after the silence")
                .unwrap_or_else(|e| panic!("{}: the call after the silence: {e}", server.name()));
        assert_eq!(after.len(), 1);
        store.forget_all(&scope).await.expect("clean up");
    }
}

/// The longest a call may take against a blackhole under `retry`: each try its timeout (and a
/// second to spare), and the waits between tries (twice the longest, for their jitter).
fn bound(retry: RetryPolicy) -> Duration {
    let waits: Duration = (1..retry.attempts)
        .map(|n| (retry.first_delay * 2u32.pow(n - 1)).min(retry.max_delay) * 2)
        .sum();
    (LIMIT + Duration::from_secs(1)) * retry.attempts + waits
}

async fn blackhole(server: Server) {
    let tests = format!("blackhole on {}", server.name());
    let Some(url) = server.url(&tests) else {
        return;
    };
    for retry in [RetryPolicy::never(), RetryPolicy::default()] {
        let (proxy, store) = proxied_with(server, &url, |o| o.retry(retry).timeout(Some(LIMIT)))
            .await
            .expect("a store through the proxy");
        calls_through_a_blackhole(server.name(), &store, &[proxy], retry).await;
    }
}

/// Two calls through `proxies` gone blackhole each fail `Unavailable` within [`bound`] of
/// `retry`; once the blackhole ends, the store answers again.
async fn calls_through_a_blackhole(
    backend: &str,
    store: &Store,
    proxies: &[FaultProxy],
    retry: RetryPolicy,
) {
    let scope = Scope::new("silence", mnemix_tests::unique("subject")).expect("a scope");
    let thread = store
        .create_conversation(&scope, NewConversation::default())
        .await
        .expect("a conversation before the blackhole");

    for proxy in proxies {
        proxy.arm(1, Fault::Blackhole);
    }
    for call in 0..2 {
        let started = Instant::now();
        let answer =
            tokio::time::timeout(HANG, store.load(&scope, &thread.id, LoadOptions::last(10)))
                .await
                .unwrap_or_else(|_| panic!("{backend}: a call on a blackhole hung"));
        let waited = started.elapsed();
        eprintln!(
            "blackhole on {backend} (retry {} tries), call {call}: {:?} after {waited:?} (bound {:?})",
            retry.attempts,
            answer.as_ref().map(Vec::len),
            bound(retry),
        );
        assert!(
            matches!(answer, Err(MemoryError::Unavailable { .. })),
            "{backend}: {answer:?}"
        );
        assert!(
            waited <= bound(retry),
            "{backend} (retry {} tries): failed after {waited:?}, past {:?}",
            retry.attempts,
            bound(retry)
        );
    }
    let fired = proxies.iter().filter(|proxy| proxy.disarm()).count();
    assert!(fired > 0, "the blackhole fell on the load");

    let started = Instant::now();
    loop {
        match store.load(&scope, &thread.id, LoadOptions::last(10)).await {
            Ok(messages) => {
                assert!(messages.is_empty());
                break;
            }
            Err(e) => assert!(
                started.elapsed() < bound(retry) + LIMIT,
                "{backend}: no answer after the blackhole: {e}"
            ),
        }
    }
    store.forget_all(&scope).await.expect("clean up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_postgres_server_fails_every_call_within_the_timeout() {
    blackhole(Server::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_redis_server_fails_every_call_within_the_timeout() {
    blackhole(Server::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_redis_cluster_fails_every_call_within_the_timeout() {
    for retry in [RetryPolicy::never(), RetryPolicy::default()] {
        let Some((proxies, store)) =
            proxied_cluster("blackhole on redis-cluster", Some(LIMIT)).await
        else {
            return;
        };
        let store = Store::with_retry(Arc::new(store), retry);
        calls_through_a_blackhole("redis-cluster", &store, &proxies, retry).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_postgres_server_fails_a_call_within_the_timeout() {
    silence(Server::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_redis_server_fails_a_call_within_the_timeout() {
    silence(Server::Redis).await;
}
