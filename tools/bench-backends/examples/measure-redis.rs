//! A small measurement of the Redis store (not the benchmark suite; that is issue 8's):
//! appends per second of 1- and 10-message batches and loads of the last 50 messages of a
//! 10,000-message thread, each against the same commands issued by hand with the redis crate
//! (interleaved rounds, medians), and exact top-10 latency over 100,000 vectors of 384 dims in
//! one subject against the sequential read of the same matrix.
//!
//! `MEASURE_REDIS_URL=redis://127.0.0.1:6379 cargo run --release -p mnemix-bench-backends --example measure-redis`
//! (a `redis+cluster://host:port,…` URL measures a cluster).

use std::time::Instant;

use mnemix_core::{
    AppendOptions, CollectionSpec, ConversationStore, LoadOptions, Message, NewConversation, Scope,
    StoredMessage, VectorQuery, VectorRecord, VectorStore,
};
use mnemix_redis::RedisStore;
use redis::aio::ConnectionLike;

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// The key prefix of this run's data.
fn prefix() -> String {
    format!("measure-{}", std::process::id())
}

/// The scope's key prefix, as the store's key schema writes it (see the crate docs).
fn base(scope: &Scope) -> String {
    format!(
        "{}:{{{}:{}}}:",
        prefix(),
        scope.namespace(),
        scope.subject().unwrap()
    )
}

/// A store on this run's key prefix.
async fn open(url: &str) -> RedisStore {
    RedisStore::builder()
        .url(url)
        .prefix(&prefix())
        .open()
        .await
        .unwrap()
}

async fn ours(store: &RedisStore, scope: &Scope, batch: usize, batches: usize) -> f64 {
    let thread = store
        .create_conversation(scope, NewConversation::default())
        .await
        .unwrap();
    let started = Instant::now();
    for _ in 0..batches {
        let messages = (0..batch)
            .map(|i| Message::user(format!("message {i}")))
            .collect();
        store
            .append(scope, &thread.id, messages, AppendOptions::default())
            .await
            .unwrap();
    }
    (batch * batches) as f64 / started.elapsed().as_secs_f64()
}

/// The same script with the same arguments, by hand: what any client keeping seqs and
/// idempotency atomic on Redis must send.
async fn raw(
    store: &RedisStore,
    conn: &mut impl ConnectionLike,
    scope: &Scope,
    batch: usize,
    batches: usize,
) -> f64 {
    let thread = store
        .create_conversation(scope, NewConversation::default())
        .await
        .unwrap();
    let script = redis::Script::new(include_str!(
        "../../../crates/mnemix-redis/src/lua/append.lua"
    ));
    let base = base(scope);
    let started = Instant::now();
    for _ in 0..batches {
        let mut call = script.key(format!("{base}c:{}", thread.id));
        call.key(format!("{base}cm:{}", thread.id))
            .key(format!("{base}ci:{}", thread.id))
            .arg(0)
            .arg("")
            .arg("");
        for i in 0..batch {
            let m = Message::user(format!("message {i}"));
            call.arg(m.id.as_str())
                .arg(serde_json::to_string(&(&m.role, &m.parts, &m.metadata)).unwrap())
                .arg(serde_json::to_string(&m).unwrap());
        }
        let _: Vec<redis::Value> = call.invoke_async(conn).await.unwrap();
    }
    (batch * batches) as f64 / started.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    let url =
        std::env::var("MEASURE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let store = open(&url).await;
    // The hand-written commands go over the store's own connection: same socket, same
    // multiplexing, only the layer above differs.
    let mut conn = store.connection();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .unwrap();
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?");
    println!(
        "Redis {version}{}, durability {:?}",
        if store.is_cluster() { " cluster" } else { "" },
        store.durability()
    );

    for batch in [1, 10] {
        let batches = 4000 / batch;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for round in 0..5 {
            let scope = Scope::new("measure", format!("appends-{batch}-{round}")).unwrap();
            a.push(ours(&store, &scope, batch, batches).await);
            b.push(raw(&store, &mut conn, &scope, batch, batches).await);
        }
        let (a, b) = (median(a), median(b));
        println!(
            "append, batches of {batch:>2}: ours {a:>7.0} msg/s, by hand {b:>7.0} msg/s, ours/raw {:.2}",
            a / b
        );
    }

    // Loads of the last 50 of a 10,000-message thread.
    let scope = Scope::new("measure", "loads").unwrap();
    let thread = store
        .create_conversation(&scope, NewConversation::default())
        .await
        .unwrap();
    for chunk in 0..100 {
        let messages = (0..100)
            .map(|i| Message::user(format!("message {chunk}-{i} with a sentence of text")))
            .collect();
        store
            .append(&scope, &thread.id, messages, AppendOptions::default())
            .await
            .unwrap();
    }
    let messages_key = format!("{}cm:{}", base(&scope), thread.id);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let started = Instant::now();
        for _ in 0..500 {
            let window = store
                .load(&scope, &thread.id, LoadOptions::last(50))
                .await
                .unwrap();
            assert_eq!(window.len(), 50);
        }
        a.push(500.0 / started.elapsed().as_secs_f64());
        let started = Instant::now();
        for _ in 0..500 {
            let members: Vec<(Vec<u8>, f64)> = redis::cmd("ZREVRANGEBYSCORE")
                .arg(&messages_key)
                .arg("+inf")
                .arg("-inf")
                .arg("WITHSCORES")
                .arg("LIMIT")
                .arg(0)
                .arg(50)
                .query_async(&mut conn)
                .await
                .unwrap();
            let window: Vec<StoredMessage> = members
                .iter()
                .rev()
                .map(|(member, seq)| {
                    let nul = member.iter().position(|b| *b == 0).unwrap();
                    StoredMessage {
                        seq: *seq as u64,
                        message: serde_json::from_slice(&member[nul + 1..]).unwrap(),
                    }
                })
                .collect();
            assert_eq!(window.len(), 50);
        }
        b.push(500.0 / started.elapsed().as_secs_f64());
    }
    let (a, b) = (median(a), median(b));
    println!(
        "load last 50 of 10,000: ours {a:>6.0} loads/s, by hand {b:>6.0} loads/s, ours/raw {:.2}",
        a / b
    );

    // Exact top-10 over 100,000 x 384 in one subject (W5's size): the first search reads the
    // records and keeps their matrix, later ones rank it after one token check; against what
    // every search used to read (HGETALL of the records) and the floor a sequential read of the
    // same matrix sets.
    let (n, dims) = (100_000, 384);
    let scope = Scope::new("measure", "vectors").unwrap();
    store
        .ensure_collection(
            scope.namespace(),
            CollectionSpec::new("docs", dims, "random"),
        )
        .await
        .unwrap();
    let mut rng = fastrand::Rng::with_seed(7);
    let mut unit = || -> Vec<f32> {
        let v: Vec<f32> = (0..dims).map(|_| rng.f32() - 0.5).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / norm).collect()
    };
    let mut matrix = Vec::with_capacity(n * dims);
    let started = Instant::now();
    for c in 0..n / 1000 {
        let records: Vec<VectorRecord> = (0..1000)
            .map(|i| VectorRecord::new(format!("v{c}-{i}").try_into().unwrap(), unit()))
            .collect();
        for record in &records {
            matrix.extend_from_slice(&record.vector);
        }
        store.upsert_vectors(&scope, "docs", records).await.unwrap();
    }
    let ingest = n as f64 / started.elapsed().as_secs_f64();
    // A stored vector as the query: its own record must come first.
    let query = || VectorQuery::new(matrix[..dims].to_vec(), 10);
    let started = Instant::now();
    let hits = store.search(&scope, "docs", query()).await.unwrap();
    let first = started.elapsed().as_secs_f64();
    assert_eq!(hits[0].record.id.as_str(), "v0-0");
    // The hash holding them (incarnation 1: the namespace's first collection).
    let records_key = format!("{}v:1", base(&scope));
    let (mut searches, mut fetches, mut floors) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..50 {
        let started = Instant::now();
        let hits = store.search(&scope, "docs", query()).await.unwrap();
        searches.push(started.elapsed().as_secs_f64());
        assert_eq!(hits.len(), 10);
        let started = Instant::now();
        // Integer addition of the bits, as W5's floor: it vectorises and runs at memory speed.
        let sum = matrix.iter().fold(0u32, |a, x| a.wrapping_add(x.to_bits()));
        std::hint::black_box(sum);
        floors.push(started.elapsed().as_secs_f64());
        if round % 10 == 0 {
            let started = Instant::now();
            let all: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL")
                .arg(&records_key)
                .query_async(&mut conn)
                .await
                .unwrap();
            fetches.push(started.elapsed().as_secs_f64());
            assert_eq!(all.len(), n);
        }
    }
    // A write by another client: the next search reads the records again.
    let writer = open(&url).await;
    let mut rewrites = Vec::new();
    for i in 0..5 {
        let mut near = matrix[..dims].to_vec();
        near[0] += 1e-3;
        let id = format!("written-{i}");
        writer
            .upsert_vectors(
                &scope,
                "docs",
                vec![VectorRecord::new(id.as_str().try_into().unwrap(), near)],
            )
            .await
            .unwrap();
        let started = Instant::now();
        let hits = store.search(&scope, "docs", query()).await.unwrap();
        rewrites.push(started.elapsed().as_secs_f64());
        assert!(
            hits.iter().any(|hit| hit.record.id.as_str() == id),
            "the write is seen"
        );
    }
    let (search, fetch, floor, rewrite) = (
        median(searches),
        median(fetches),
        median(floors),
        median(rewrites),
    );
    println!(
        "exact top-10 over {n} x {dims} in one subject: held matrix {:.2} ms median; first \
         search {:.0} ms, after another client's write {:.0} ms; HGETALL of the records by hand \
         {:.0} ms (what every search read before); sequential read of the matrix {:.2} ms \
         ({:.1} GB/s): ours reaches {:.0}% of it; ingest {ingest:.0} vectors/s",
        search * 1e3,
        first * 1e3,
        rewrite * 1e3,
        fetch * 1e3,
        floor * 1e3,
        (n * dims * 4) as f64 / floor / 1e9,
        100.0 * floor / search
    );

    // Leave nothing behind.
    let keys: Vec<String> = if store.is_cluster() {
        Vec::new()
    } else {
        redis::cmd("KEYS")
            .arg(format!("{}:*", prefix()))
            .query_async(&mut conn)
            .await
            .unwrap()
    };
    for chunk in keys.chunks(500) {
        let _: i64 = redis::cmd("UNLINK")
            .arg(chunk)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}
