//! A small measurement of the SQLite store's hot paths (not a benchmark suite; that is the
//! benchmark crate's job): appends per second with 1- and 10-message batches, and the cost of
//! loading the last 50 messages of a 100,000-message thread against a 100-message one, beside
//! the cost of one trivial statement through sqlx (the floor under every statement); and a
//! remember's cost in a subject of 100 facts against one of 10,000, interleaved (a third of
//! them expiring later, a fifth keyed), which must not grow with the subject.
//! `MEASURE_URL` picks another database (e.g. `sqlite::memory:`).
//!
//! `cargo run --release -p mnemix-bench-backends --example measure-sqlite`

use std::time::{Duration, Instant};

use mnemix_core::{
    AppendOptions, ConversationId, ConversationStore, LoadOptions, Message, NewConversation, Scope,
    WorkingMemoryKey, WorkingMemoryStore, WorkingMemoryUpdate,
};
use mnemix_sqlite::SqliteStore;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

async fn thread(store: &SqliteStore, scope: &Scope) -> ConversationId {
    store
        .create_conversation(scope, NewConversation::default())
        .await
        .unwrap()
        .id
}

async fn fill(
    store: &SqliteStore,
    scope: &Scope,
    id: &ConversationId,
    messages: usize,
    batch: usize,
) -> Duration {
    let started = Instant::now();
    for b in 0..messages / batch {
        let batch: Vec<Message> = (0..batch)
            .map(|i| {
                Message::user(format!(
                    "message {} of a long agent conversation",
                    b * batch + i
                ))
            })
            .collect();
        store
            .append(scope, id, batch, AppendOptions::default())
            .await
            .unwrap();
    }
    started.elapsed()
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        SqliteStore::builder()
            .url(&std::env::var("MEASURE_URL").unwrap_or_else(|_| {
                format!("sqlite://{}", dir.path().join("measure.db").display())
            }))
            .open()
            .await
            .unwrap();
    let scope = Scope::new("measure", "user-1").unwrap();

    for batch in [1usize, 10] {
        let id = thread(&store, &scope).await;
        let messages = 5_000;
        let took = fill(&store, &scope, &id, messages, batch).await;
        println!(
            "append, batches of {batch:>2}: {:>8.0} messages/s ({:>6.0} batches/s), {messages} messages",
            messages as f64 / took.as_secs_f64(),
            (messages / batch) as f64 / took.as_secs_f64()
        );
    }

    // Group commit: 8 writers, each appending single messages to its own conversation.
    let store = std::sync::Arc::new(store);
    for writers in [1usize, 8] {
        let per_writer = 4_000 / writers;
        let mut ids = Vec::new();
        for _ in 0..writers {
            ids.push(thread(&store, &scope).await);
        }
        let started = Instant::now();
        let tasks: Vec<_> = ids
            .into_iter()
            .map(|id| {
                let (store, scope) = (store.clone(), scope.clone());
                tokio::spawn(async move {
                    for i in 0..per_writer {
                        store
                            .append(
                                &scope,
                                &id,
                                vec![Message::user(format!("message {i}"))],
                                AppendOptions::default(),
                            )
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let took = started.elapsed();
        println!(
            "append, {writers} writer(s), batches of 1: {:>8.0} messages/s",
            (per_writer * writers) as f64 / took.as_secs_f64()
        );
    }

    // Working memory: alternating get and set of one user document.
    let started = Instant::now();
    for i in 0..2_000 {
        if i % 2 == 0 {
            store
                .get_working_memory(&scope, &WorkingMemoryKey::User)
                .await
                .unwrap();
        } else {
            store
                .set_working_memory(
                    &scope,
                    &WorkingMemoryKey::User,
                    WorkingMemoryUpdate::markdown(format!("notes {i}")),
                )
                .await
                .unwrap();
        }
    }
    println!(
        "working memory, 50/50 get/set: {:?} per operation",
        started.elapsed() / 2_000
    );

    // The floor under every call: one trivial statement through sqlx's SQLite worker thread.
    let pool = sqlx::SqlitePool::connect("sqlite::memory:").await.unwrap();
    let started = Instant::now();
    for _ in 0..5_000 {
        sqlx::query("SELECT 1").execute(&pool).await.unwrap();
    }
    println!(
        "raw sqlx `SELECT 1` round trip: {:?}",
        started.elapsed() / 5_000
    );

    let (first, last) = mnemix_conformance::support::remember_growth(&*store, "measure").await;
    println!(
        "remember: among 100 facts {first:?}, among 10,000 {last:?}, ratio {:.2}",
        last.as_secs_f64() / first.as_secs_f64()
    );

    let long = thread(&store, &scope).await;
    let short = thread(&store, &scope).await;
    fill(&store, &scope, &long, 100_000, 100).await;
    fill(&store, &scope, &short, 100, 100).await;
    let mut rounds = (Vec::new(), Vec::new());
    for _ in 0..21 {
        // Interleaved, so both sides see the same machine state.
        for (id, samples) in [(&long, &mut rounds.0), (&short, &mut rounds.1)] {
            let started = Instant::now();
            for _ in 0..100 {
                let window = store.load(&scope, id, LoadOptions::last(50)).await.unwrap();
                assert_eq!(window.len(), 50);
            }
            samples.push(started.elapsed() / 100);
        }
    }
    let (long_load, short_load) = (median(rounds.0), median(rounds.1));
    // An append must not grow with its thread: one message to each, interleaved.
    let mut appends = (Vec::new(), Vec::new());
    for round in 0..21 {
        for (id, samples) in [(&long, &mut appends.0), (&short, &mut appends.1)] {
            let started = Instant::now();
            for i in 0..20 {
                let message = Message::user(format!("late message {round}-{i}"));
                store
                    .append(&scope, id, vec![message], AppendOptions::default())
                    .await
                    .unwrap();
            }
            samples.push(started.elapsed() / 20);
        }
    }
    let (long_append, short_append) = (median(appends.0), median(appends.1));
    println!(
        "append 1: 100,000-message thread {long_append:?}, 100-message thread {short_append:?}, ratio {:.2}",
        long_append.as_secs_f64() / short_append.as_secs_f64()
    );
    // The front layer's share: the same loads through `Checked` (validation, retry, span,
    // sanitizing the window), interleaved with the bare store's.
    let checked = mnemix_core::Checked::wrap(store.clone());
    let mut split = (Vec::new(), Vec::new());
    for _ in 0..21 {
        let started = Instant::now();
        for _ in 0..100 {
            store
                .load(&scope, &long, LoadOptions::last(50))
                .await
                .unwrap();
        }
        split.0.push(started.elapsed() / 100);
        let started = Instant::now();
        for _ in 0..100 {
            checked
                .load(&scope, &long, LoadOptions::last(50))
                .await
                .unwrap();
        }
        split.1.push(started.elapsed() / 100);
    }
    println!(
        "load last 50: bare store {:?}, through the front layer {:?}",
        median(split.0),
        median(split.1)
    );
    println!(
        "load last 50: 100,000-message thread {long_load:?}, 100-message thread {short_load:?}, ratio {:.2}",
        long_load.as_secs_f64() / short_load.as_secs_f64()
    );
}
