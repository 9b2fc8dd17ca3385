//! A small measurement of the PostgreSQL store (not the benchmark suite; that is issue 8's):
//! appends per second of 1- and 10-message batches through the store against the same
//! statements written by hand with tokio-postgres (interleaved rounds, medians); restore of
//! 50,000 messages (binary `COPY` through a staging table) against a hand-written binary `COPY`
//! straight into the messages table; and HNSW recall@10 against an exact scan on 20,000
//! clustered 384-dim vectors with top-10 latencies; and exact top-10 on 100,000 × 384 vectors
//! without an index against raw pgvector exact SQL. First, a remember's cost in a subject of 100
//! facts against one of 10,000, interleaved (it must not grow with the subject).
//!
//! `MEASURE_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
//!  cargo run --release -p mnemix-bench-backends --example measure-postgres`

use std::collections::HashSet;
use std::time::{Duration, Instant};

use mnemix_core::{
    AppendOptions, CollectionSpec, ConversationStore, Message, NewConversation, Scope,
    StoredMessage, TransferStore, VectorQuery, VectorRecord, VectorStore,
};

use mnemix_core::transfer::Record;
use mnemix_postgres::PostgresStore;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::Type;

const SCHEMA: &str = "agent_memory_measure";

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

async fn ours(store: &PostgresStore, scope: &Scope, batch: usize, batches: usize) -> f64 {
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

/// The statements an append runs, by hand: lock the row, look up the batch's ids, insert the
/// batch in one statement, bump last_seq.
async fn raw(store: &PostgresStore, scope: &Scope, batch: usize, batches: usize) -> f64 {
    let thread = store
        .create_conversation(scope, NewConversation::default())
        .await
        .unwrap();
    let mut client = store.pool().get().await.unwrap();
    let started = Instant::now();
    for _ in 0..batches {
        let messages: Vec<Message> = (0..batch)
            .map(|i| Message::user(format!("message {i}")))
            .collect();
        let tx = client.transaction().await.unwrap();
        let lock = tx
            .prepare_cached(&format!(
                "SELECT pk, last_seq FROM {SCHEMA}.conversations
                 WHERE namespace = $1 AND subject = $2 AND id = $3 FOR NO KEY UPDATE"
            ))
            .await
            .unwrap();
        let row = tx
            .query_one(
                &lock,
                &[
                    &scope.namespace().as_str(),
                    &scope.subject().unwrap().as_str(),
                    &thread.id.as_str(),
                ],
            )
            .await
            .unwrap();
        let (pk, last): (i64, i64) = (row.get(0), row.get(1));
        let ids: Vec<&str> = messages.iter().map(|m| m.id.as_str()).collect();
        let existing = tx
            .prepare_cached(&format!(
                "SELECT seq, body FROM {SCHEMA}.messages WHERE conversation = $1 AND id = ANY($2)"
            ))
            .await
            .unwrap();
        tx.query(&existing, &[&pk, &ids]).await.unwrap();
        let seqs: Vec<i64> = (1..=batch as i64).map(|i| last + i).collect();
        let roles: Vec<&str> = messages.iter().map(|m| m.role.as_str()).collect();
        let bodies: Vec<String> = messages
            .iter()
            .map(|m| serde_json::to_string(m).unwrap())
            .collect();
        let insert = tx
            .prepare_cached(&format!(
                "INSERT INTO {SCHEMA}.messages (conversation, seq, id, role, body)
                 SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[])"
            ))
            .await
            .unwrap();
        tx.execute(&insert, &[&pk, &seqs, &ids, &roles, &bodies])
            .await
            .unwrap();
        let bump = tx
            .prepare_cached(&format!(
                "UPDATE {SCHEMA}.conversations SET last_seq = $1, updated_at = $2 WHERE pk = $3"
            ))
            .await
            .unwrap();
        tx.execute(&bump, &[&(last + batch as i64), &0i64, &pk])
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    (batch * batches) as f64 / started.elapsed().as_secs_f64()
}

fn messages(n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| {
            Message::user(format!(
                "restored message {i} with a sentence or two of text"
            ))
        })
        .collect()
}

/// Restores one conversation of `n` messages; rows per second.
async fn restore(store: &PostgresStore, scope: &Scope, n: usize) -> f64 {
    let thread = store
        .create_conversation(scope, NewConversation::default())
        .await
        .unwrap();
    let mut records = vec![Record::Conversation {
        conversation: thread.clone(),
    }];
    records.extend(
        messages(n)
            .into_iter()
            .zip(1..)
            .map(|(message, seq)| Record::Message {
                scope: scope.clone(),
                conversation_id: thread.id.clone(),
                message: StoredMessage { seq, message },
            }),
    );
    let started = Instant::now();
    store.restore(records).await.unwrap();
    n as f64 / started.elapsed().as_secs_f64()
}

/// The same rows by hand: one binary `COPY` straight into the messages table.
async fn raw_copy(store: &PostgresStore, scope: &Scope, n: usize) -> f64 {
    let thread = store
        .create_conversation(scope, NewConversation::default())
        .await
        .unwrap();
    let rows: Vec<(i64, String, &'static str, String)> = messages(n)
        .into_iter()
        .zip(1..)
        .map(|(m, seq)| {
            (
                seq,
                m.id.to_string(),
                "user",
                serde_json::to_string(&m).unwrap(),
            )
        })
        .collect();
    let mut client = store.pool().get().await.unwrap();
    let started = Instant::now();
    let tx = client.transaction().await.unwrap();
    let pk: i64 = tx
        .query_one(
            &format!(
                "SELECT pk FROM {SCHEMA}.conversations
                 WHERE namespace = $1 AND subject = $2 AND id = $3"
            ),
            &[
                &scope.namespace().as_str(),
                &scope.subject().unwrap().as_str(),
                &thread.id.as_str(),
            ],
        )
        .await
        .unwrap()
        .get(0);
    let sink = tx
        .copy_in(&format!(
            "COPY {SCHEMA}.messages (conversation, seq, id, role, body) FROM STDIN (FORMAT binary)"
        ))
        .await
        .unwrap();
    let writer = BinaryCopyInWriter::new(
        sink,
        &[Type::INT8, Type::INT8, Type::TEXT, Type::TEXT, Type::TEXT],
    );
    futures::pin_mut!(writer);
    for (seq, id, role, body) in &rows {
        writer
            .as_mut()
            .write(&[&pk, seq, id, role, body])
            .await
            .unwrap();
    }
    writer.finish().await.unwrap();
    tx.commit().await.unwrap();
    n as f64 / started.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    let url = std::env::var("MEASURE_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let url = format!("{url}?schema={SCHEMA}");
    let indexed = PostgresStore::builder().url(&url).open().await.unwrap();
    let exact = PostgresStore::builder()
        .url(&url)
        .vector_index(false)
        .open()
        .await
        .unwrap();
    let client = indexed.pool().get().await.unwrap();
    let version: String = client
        .query_one(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'",
            &[],
        )
        .await
        .map_or_else(|_| "absent".into(), |r| r.get(0));
    let server: String = client
        .query_one("SHOW server_version", &[])
        .await
        .unwrap()
        .get(0);
    drop(client);
    println!("PostgreSQL {server}, pgvector {version}");
    // A subject of its own per run: the schema outlives runs.
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let (first, last) =
        mnemix_conformance::support::remember_growth(&indexed, &format!("measure-{run}")).await;
    println!(
        "remember: among 100 facts {first:?}, among 10,000 {last:?}, ratio {:.2}",
        last.as_secs_f64() / first.as_secs_f64()
    );

    let run = std::process::id();
    for batch in [1, 10] {
        let batches = 2000 / batch;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for round in 0..5 {
            let scope = Scope::new("measure", format!("appends-{run}-{batch}-{round}")).unwrap();
            a.push(ours(&indexed, &scope, batch, batches).await);
            b.push(raw(&indexed, &scope, batch, batches).await);
        }
        let (a, b) = (median(a), median(b));
        println!(
            "append, batches of {batch:>2}: ours {a:>7.0} msg/s, hand-written tokio-postgres {b:>7.0} msg/s, ours/raw {:.2}",
            a / b
        );
    }

    let n = 50_000;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for round in 0..3 {
        let scope = Scope::new("measure", format!("restore-{run}-{round}")).unwrap();
        a.push(restore(&indexed, &scope, n).await);
        b.push(raw_copy(&indexed, &scope, n).await);
    }
    let (a, b) = (median(a), median(b));
    println!(
        "restore of {n} messages: ours (binary COPY + staging) {a:>7.0} rows/s, hand-written binary COPY {b:>7.0} rows/s, ours/raw {:.2}",
        a / b
    );

    let (n, dims, queries) = (20_000, 384, 100);
    let data = mnemix_conformance::support::clustered_vectors(n + queries, dims, 7);
    let scope = Scope::new("measure", format!("vectors-{run}")).unwrap();
    let name = format!("recall-{run}");
    let started = Instant::now();
    load_collection(&indexed, &scope, &name, &data[..n]).await;
    let loaded = started.elapsed();
    let building = Instant::now();
    assert!(indexed
        .build_vector_index(scope.namespace(), &name)
        .await
        .unwrap());
    println!(
        "ingest {n} x {dims} in batches of 1000, then the HNSW index built: {:.0} vectors/s ({:.1} s load, {:.1} s build)",
        n as f64 / started.elapsed().as_secs_f64(),
        loaded.as_secs_f64(),
        building.elapsed().as_secs_f64()
    );
    let (mut recall, mut t_index, mut t_exact) = (0.0, Vec::new(), Vec::new());
    for q in &data[n..] {
        let query = VectorQuery::new(q.clone(), 10);
        let t = Instant::now();
        let approx = indexed.search(&scope, &name, query.clone()).await.unwrap();
        t_index.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let truth = exact.search(&scope, &name, query).await.unwrap();
        t_exact.push(t.elapsed().as_secs_f64());
        let truth: HashSet<_> = truth.iter().map(|h| h.record.id.clone()).collect();
        recall += approx
            .iter()
            .filter(|h| truth.contains(&h.record.id))
            .count() as f64
            / 10.0;
    }
    let (ti, te) = (median(t_index), median(t_exact));
    println!(
        "top-10 over {n} x {dims}: HNSW recall@10 {:.3}, median {:.2} ms; exact scan median {:.2} ms; exact/HNSW {:.1}x",
        recall / queries as f64,
        ti * 1e3,
        te * 1e3,
        te / ti
    );
    indexed
        .drop_collection(scope.namespace(), &name)
        .await
        .unwrap();
    exact_against_raw(&exact, run).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// Creates collection `name` of the vectors' width and loads them as `v0`, `v1`, … in upserts of
/// 1,000.
async fn load_collection(store: &PostgresStore, scope: &Scope, name: &str, vectors: &[Vec<f32>]) {
    store
        .ensure_collection(
            scope.namespace(),
            CollectionSpec::new(name, vectors[0].len(), "clustered"),
        )
        .await
        .unwrap();
    for (c, chunk) in vectors.chunks(1000).enumerate() {
        let records = chunk
            .iter()
            .enumerate()
            .map(|(i, v)| {
                VectorRecord::new(format!("v{}", c * 1000 + i).try_into().unwrap(), v.clone())
            })
            .collect();
        store.upsert_vectors(scope, name, records).await.unwrap();
    }
}

/// Exact top-10 on 100,000 × 384 vectors in a collection without an index: ours (pgvector
/// ranks in the server, the nearest rows come back and are re-scored) against the plainest raw
/// pgvector exact query on the same rows, interleaved.
async fn exact_against_raw(exact: &PostgresStore, run: u32) {
    let (n, dims, queries) = (100_000, 384, 20);
    let data = mnemix_conformance::support::clustered_vectors(n + queries, dims, 11);
    let scope = Scope::new("measure", format!("exact-{run}")).unwrap();
    let name = format!("exact-{run}");
    load_collection(exact, &scope, &name, &data[..n]).await;
    let client = exact.pool().get().await.unwrap();
    let pk: i64 = client
        .query_one(
            &format!("SELECT pk FROM {SCHEMA}.collections WHERE namespace = $1 AND name = $2"),
            &[&scope.namespace().as_str(), &name],
        )
        .await
        .unwrap()
        .get(0);
    client
        .batch_execute(&format!("ANALYZE {SCHEMA}.vectors"))
        .await
        .unwrap();
    let raw_sql = format!(
        "SELECT id, embedding FROM {SCHEMA}.vectors WHERE collection = {pk} AND subject = $1
         ORDER BY embedding::vector({dims}) <=> $2::real[]::vector({dims}) LIMIT 10"
    );
    let subject = scope.subject().unwrap().as_str().to_owned();
    let (mut ours, mut raw, mut same) = (Vec::new(), Vec::new(), 0);
    for q in &data[n..] {
        let t = Instant::now();
        let hits = exact
            .search(&scope, &name, VectorQuery::new(q.clone(), 10))
            .await
            .unwrap();
        ours.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let rows = client.query(&raw_sql, &[&subject, q]).await.unwrap();
        raw.push(t.elapsed().as_secs_f64());
        let raw_ids: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        let our_ids: Vec<&str> = hits.iter().map(|h| h.record.id.as_str()).collect();
        same += usize::from(raw_ids == our_ids);
    }
    let (ours, raw) = (median(ours), median(raw));
    println!(
        "exact top-10 over {n} x {dims}, no index: ours {:.2} ms, raw pgvector exact SQL {:.2} ms, ours/raw {:.2} (same ids on {same}/{queries} queries)",
        ours * 1e3,
        raw * 1e3,
        ours / raw
    );
    exact
        .drop_collection(scope.namespace(), &name)
        .await
        .unwrap();
}
