//! Redis-specific guarantees beyond the suite: two clients (two connection managers, or two
//! cluster connections) racing appends to one conversation. (A server restarted in the middle
//! of a stream of appends is `tests/restart.rs`.)
//!
//! Needs `MNEMIX_TEST_REDIS_URL` / `MNEMIX_TEST_REDIS_CLUSTER_URLS` (set by `cargo xtask
//! test`); without them each test says so and passes as a skip, unless `MNEMIX_TEST_REQUIRE`
//! names redis / redis-cluster.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use mnemix_conformance::{is_required, SetupError};
use mnemix_core::{
    AppendOptions, ConversationStore, FactStore, LoadOptions, Message, MessageId, NewConversation,
    Scope,
};
use mnemix_redis::RedisStore;
use mnemix_testkit::services::{locate, Service};

/// The service's address, or `None` (a named skip) when there is none and it is not required.
fn server(service: Service, backend: &str, test: &str) -> Option<String> {
    match locate(service) {
        Ok(url) => Some(url),
        Err(SetupError::Unreachable(why)) if !is_required(backend) => {
            eprintln!("SKIP {backend}::{test}: {why}");
            None
        }
        Err(e) => panic!("{backend} is required: {e:?}"),
    }
}

async fn store(service: Service, address: &str, prefix: &str) -> RedisStore {
    let builder = RedisStore::builder().prefix(prefix);
    let builder = match service {
        Service::RedisCluster => builder.cluster(address.split(',').map(str::trim)),
        _ => builder.url(address),
    };
    builder.open().await.expect("open")
}

fn message(id: &str) -> Message {
    Message {
        id: MessageId::new(id).unwrap(),
        ..Message::user(format!("text of {id}"))
    }
}

/// Every message once, seqs 1..=n without gaps, in an order where each writer's batches keep
/// their own order.
fn assert_whole(stored: &[mnemix_core::StoredMessage], expected: usize) {
    assert_eq!(stored.len(), expected, "nothing lost, nothing duplicated");
    let seqs: Vec<u64> = stored.iter().map(|m| m.seq).collect();
    assert_eq!(
        seqs,
        (1..=expected as u64).collect::<Vec<_>>(),
        "contiguous seqs"
    );
    let ids: HashSet<&str> = stored.iter().map(|m| m.message.id.as_str()).collect();
    assert_eq!(ids.len(), expected, "every id once");
}

async fn two_clients_race(service: Service, backend: &str, test: &str) {
    let Some(address) = server(service, backend, test) else {
        return;
    };
    let prefix = common::scenario_prefix();
    let (a, b) = (
        store(service, &address, &prefix).await,
        store(service, &address, &prefix).await,
    );
    let scope = Scope::new("redis-tests", "racer").unwrap();
    let thread = a
        .create_conversation(&scope, NewConversation::default())
        .await
        .unwrap();
    let (per_writer, batch) = (50, 4);
    let write = |store: RedisStore, writer: &'static str| {
        let (scope, id) = (scope.clone(), thread.id.clone());
        tokio::spawn(async move {
            for n in 0..per_writer {
                let messages = (0..batch)
                    .map(|i| message(&format!("{writer}-{n}-{i}")))
                    .collect();
                store
                    .append(&scope, &id, messages, AppendOptions::default())
                    .await
                    .unwrap();
            }
        })
    };
    let (one, two) = (write(a, "a"), write(b, "b"));
    one.await.unwrap();
    two.await.unwrap();
    let reader = store(service, &address, &prefix).await;
    let stored = reader
        .load(&scope, &thread.id, LoadOptions::raw())
        .await
        .unwrap();
    assert_whole(&stored, 2 * per_writer * batch);
    // Each batch is contiguous: no interleaving inside a batch.
    for window in stored.chunks(batch) {
        let first = window[0].message.id.as_str();
        let stem = &first[..first.rfind('-').unwrap()];
        assert!(window
            .iter()
            .all(|m| m.message.id.as_str().starts_with(stem)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_connection_managers_racing_appends_lose_and_duplicate_nothing() {
    two_clients_race(
        Service::Redis,
        "redis",
        "two_connection_managers_racing_appends_lose_and_duplicate_nothing",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_cluster_clients_racing_appends_lose_and_duplicate_nothing() {
    two_clients_race(
        Service::RedisCluster,
        "redis-cluster",
        "two_cluster_clients_racing_appends_lose_and_duplicate_nothing",
    )
    .await;
}

/// After `forget_all` nothing on the server names the subject: no key carries it and the
/// namespace's registry of subjects no longer lists it (GDPR erasure leaves no trace).
/// A store under a prefix of its own (returned) on a manual clock, seeded with every kind of
/// record, as the suite's context.
async fn seeded(url: &str) -> (String, mnemix_conformance::Ctx) {
    let prefix = common::scenario_prefix();
    let clock =
        mnemix_core::ManualClock::new(mnemix_core::Timestamp::from_millis(1_700_000_000_000));
    let store = RedisStore::builder()
        .url(url)
        .prefix(&prefix)
        .clock(Arc::new(clock.clone()))
        .open()
        .await
        .unwrap();
    let ctx = mnemix_conformance::Ctx::new(Arc::new(store), clock);
    mnemix_conformance::support::seed_every_kind(&ctx).await;
    (prefix, ctx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_all_leaves_no_trace_of_the_subject() {
    let Some(url) = server(
        Service::Redis,
        "redis",
        "forget_all_leaves_no_trace_of_the_subject",
    ) else {
        return;
    };
    let (prefix, ctx) = seeded(&url).await;
    let subject = ctx.scope().subject().unwrap().as_str().to_owned();
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys = |pattern: String| {
        let mut conn = conn.clone();
        async move {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(pattern)
                .query_async(&mut conn)
                .await
                .unwrap();
            keys
        }
    };
    assert!(
        !keys(format!("{prefix}:*{subject}*")).await.is_empty(),
        "seeded"
    );
    let receipt = ctx.backend().forget_all(ctx.scope()).await.unwrap();
    assert!(receipt.total() > 0);
    assert_eq!(
        keys(format!("{prefix}:*{subject}*")).await,
        Vec::<String>::new()
    );
    let registered: Vec<String> = redis::cmd("SMEMBERS")
        .arg(format!("{prefix}:{{{}}}:subjects", ctx.namespace()))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!registered.contains(&subject), "{registered:?}");
    assert!(!registered.is_empty(), "the other subject stays registered");
}

/// Erasing a namespace leaves two of its keys: its name in `namespaces` and its collection
/// counter; a scope whose facts were forgotten one by one (no data, a version token left)
/// loses its token too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_namespace_leaves_its_name_and_its_collection_counter() {
    let test = "forget_namespace_leaves_its_name_and_its_collection_counter";
    let Some(url) = server(Service::Redis, "redis", test) else {
        return;
    };
    let (prefix, ctx) = seeded(&url).await;
    let b = ctx.backend();
    let fact = b
        .remember(
            ctx.other_scope(),
            mnemix_core::NewFact::new("soon forgotten"),
            mnemix_core::RememberOptions::default(),
        )
        .await
        .unwrap();
    assert!(b.forget(ctx.other_scope(), &fact.fact.id).await.unwrap());
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let pattern = format!("{prefix}:{{{}*", ctx.namespace());
    let keys = |mut conn: redis::aio::MultiplexedConnection| {
        let pattern = pattern.clone();
        async move {
            let mut keys: Vec<String> = redis::cmd("KEYS")
                .arg(pattern)
                .query_async(&mut conn)
                .await
                .unwrap();
            keys.sort();
            keys
        }
    };
    assert!(keys(conn.clone()).await.len() > 2, "seeded");
    b.forget_namespace(ctx.namespace()).await.unwrap();
    assert_eq!(
        keys(conn.clone()).await,
        [format!("{prefix}:{{{}}}:colseq", ctx.namespace())]
    );
    let names: Vec<String> = redis::cmd("SMEMBERS")
        .arg(format!("{prefix}:namespaces"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(names.contains(&ctx.namespace().as_str().to_owned()));
    assert!(b.namespaces().await.unwrap().is_empty());
}

/// Facts written before their scope had a version token (`fv`, which every fact write now
/// sets) are recalled by vector from the server on every call, and held once a write sets one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn facts_without_a_version_token_are_recalled_from_the_server() {
    let Some(url) = server(
        Service::Redis,
        "redis",
        "facts_without_a_version_token_are_recalled_from_the_server",
    ) else {
        return;
    };
    let prefix = common::scenario_prefix();
    let store = store(Service::Redis, &url, &prefix).await;
    let scope = Scope::new("redis-tests", "tokenless").unwrap();
    let remember = |text: &'static str, vector: [f32; 2]| {
        let store = &store;
        let scope = &scope;
        async move {
            let new = mnemix_core::NewFact::new(text).with_embedding(vector.to_vec());
            store
                .remember(scope, new, mnemix_core::RememberOptions::default())
                .await
                .unwrap();
        }
    };
    let recalled = || async {
        store
            .recall(
                &scope,
                mnemix_core::RecallQuery::text("lake").with_vector(vec![1.0, 0.0]),
            )
            .await
            .unwrap()
            .into_iter()
            .map(|hit| hit.fact.text)
            .collect::<Vec<_>>()
    };
    remember("a lake", [0.0, 1.0]).await;
    remember("a road", [1.0, 0.0]).await;
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let token_keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*tokenless*:fv"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(token_keys.len(), 1, "one scope, one token: {token_keys:?}");
    let _: i64 = redis::cmd("DEL")
        .arg(&token_keys[0])
        .query_async(&mut conn)
        .await
        .unwrap();
    // Hybrid: one fact by its words, one by its vector; the fusion ties and the id decides.
    let both = recalled().await;
    assert_eq!(both.len(), 2, "{both:?}");
    remember("a lake road", [1.0, 0.0]).await;
    assert_eq!(
        recalled().await[0],
        "a lake road",
        "the best by words and vector"
    );
    let token: Option<String> = redis::cmd("GET")
        .arg(&token_keys[0])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(token.is_some(), "a write sets the token again");
}

/// A store opened on another store's connection shares its data and its socket.
#[tokio::test]
async fn a_store_opens_on_an_existing_connection() {
    let Some(url) = server(
        Service::Redis,
        "redis",
        "a_store_opens_on_an_existing_connection",
    ) else {
        return;
    };
    let prefix = common::scenario_prefix();
    let first = store(Service::Redis, &url, &prefix).await;
    let second = RedisStore::builder()
        .connection(first.connection())
        .prefix(&prefix)
        .open()
        .await
        .unwrap();
    let scope = Scope::new("redis-tests", "shared").unwrap();
    let thread = first
        .create_conversation(&scope, NewConversation::default())
        .await
        .unwrap();
    assert_eq!(
        second.get_conversation(&scope, &thread.id).await.unwrap(),
        thread
    );
}

/// Listings read their index in chunks of 256: pages across chunk borders, and hundreds of
/// conversations created in the same millisecond (one zset score), still list every
/// conversation exactly once, newest first.
#[tokio::test]
async fn listings_page_across_index_chunks_and_equal_timestamps() {
    let Some(url) = server(
        Service::Redis,
        "redis",
        "listings_page_across_index_chunks_and_equal_timestamps",
    ) else {
        return;
    };
    let clock =
        mnemix_core::ManualClock::new(mnemix_core::Timestamp::from_millis(1_700_000_000_000));
    let store = RedisStore::builder()
        .url(&url)
        .prefix(&common::scenario_prefix())
        .clock(Arc::new(clock.clone()))
        .open()
        .await
        .unwrap();
    let scope = Scope::new("redis-tests", "pager").unwrap();
    let mut created = Vec::new();
    for i in 0..900 {
        // 600 in one millisecond, then 300 a millisecond apart.
        if i >= 600 {
            clock.advance(Duration::from_millis(1));
        }
        let c = store
            .create_conversation(&scope, NewConversation::default())
            .await
            .unwrap();
        created.push((c.created_at, c.id.to_string()));
    }
    created.sort_by(|a, b| b.cmp(a));
    let expected: Vec<String> = created.into_iter().map(|(_, id)| id).collect();
    for limit in [7, 100, 1000] {
        let (mut listed, mut cursor) = (Vec::new(), None);
        loop {
            let page = store
                .list_conversations(
                    &scope,
                    mnemix_core::ConversationQuery::default()
                        .with_limit(limit)
                        .with_cursor(cursor.take()),
                )
                .await
                .unwrap();
            listed.extend(page.items.into_iter().map(|c| c.id.to_string()));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(listed, expected, "pages of {limit}");
    }
}

/// A search holds a scope's matrix until the records change: every kind of write by another
/// client is seen by the next search of a client that searched before it.
async fn searches_see_writes_of_another_client(service: Service, backend: &str, test: &str) {
    let Some(address) = server(service, backend, test) else {
        return;
    };
    let prefix = common::scenario_prefix();
    let (reader, writer) = (
        store(service, &address, &prefix).await,
        store(service, &address, &prefix).await,
    );
    let scope = Scope::new("redis-tests", "searcher").unwrap();
    mnemix_conformance::handles::searches_see_writes_of_another_handle(&reader, &writer, &scope)
        .await;
    // And fact recalls (the SQLite family holds a subject's facts between them).
    let scope = Scope::new("redis-tests", "recaller").unwrap();
    mnemix_conformance::handles::recalls_see_facts_written_by_another_handle(
        &reader, &writer, &scope,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn searches_see_writes_of_another_connection_manager() {
    searches_see_writes_of_another_client(
        Service::Redis,
        "redis",
        "searches_see_writes_of_another_connection_manager",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn searches_see_writes_of_another_cluster_client() {
    searches_see_writes_of_another_client(
        Service::RedisCluster,
        "redis-cluster",
        "searches_see_writes_of_another_cluster_client",
    )
    .await;
}

/// `replicas(1)` against a server with no replica: a write is refused `Unavailable` once `WAIT`
/// gives up (the store's timeout), never acknowledged; a store without it writes as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_that_are_missing_refuse_the_write() {
    let test = "replicas_that_are_missing_refuse_the_write";
    let Some(url) = server(Service::Redis, "redis", test) else {
        return;
    };
    let prefix = common::scenario_prefix();
    let waiting = RedisStore::builder()
        .url(&url)
        .prefix(&prefix)
        .replicas(1)
        .timeout(Some(Duration::from_millis(200)))
        .open()
        .await
        .expect("open");
    let scope = Scope::new("replicas", "ada").unwrap();
    let refused = waiting
        .create_conversation(&scope, NewConversation::default())
        .await
        .expect_err("no replica acknowledges it");
    assert!(refused.is_retryable(), "{refused}");
    assert!(refused.to_string().contains("0 of 1 replicas"), "{refused}");
    let plain = store(Service::Redis, &url, &prefix).await;
    plain
        .create_conversation(&scope, NewConversation::default())
        .await
        .expect("without replicas the write is the master's");
    let bad = RedisStore::builder()
        .url(&format!("{url}?replicas=one"))
        .open()
        .await
        .expect_err("not a count");
    assert!(bad.is_invalid_input(), "{bad}");
}
