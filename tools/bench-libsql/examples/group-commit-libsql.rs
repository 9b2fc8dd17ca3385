//! Group commit on an embedded libSQL file: one-message appends per second by 1 and by 8
//! concurrent writers (tasks of a multi-threaded runtime, as in the benchmark's W1), each
//! append to one of 1,000 conversations, at both durability settings. With `synchronous=FULL`
//! every transaction ends in an fsync, which a group shares; with `NORMAL` a commit writes the
//! WAL frames of the pages it changed and no fsync. Rounds of the four configurations are
//! interleaved; figures are medians of 5 rounds.
//!
//! `cargo run --release -p mnemix-bench-libsql --example group-commit-libsql`

use std::sync::Arc;
use std::time::{Duration, Instant};

use mnemix_core::{
    AppendOptions, ConversationId, ConversationStore, Message, NewConversation, Scope,
};
use mnemix_libsql::{LibsqlStore, Synchronous};

const CONVERSATIONS: usize = 1_000;
const ROUND: Duration = Duration::from_secs(2);
const ROUNDS: usize = 5;

struct Setup {
    store: Arc<LibsqlStore>,
    threads: Arc<Vec<ConversationId>>,
    scope: Scope,
}

async fn setup(dir: &std::path::Path, synchronous: Synchronous) -> Setup {
    let store = LibsqlStore::builder()
        .path(dir.join(format!("{synchronous:?}.db")))
        .synchronous(synchronous)
        .open()
        .await
        .unwrap();
    let scope = Scope::for_subject("writer").unwrap();
    let mut threads = Vec::with_capacity(CONVERSATIONS);
    for _ in 0..CONVERSATIONS {
        let created = store
            .create_conversation(&scope, NewConversation::default())
            .await
            .unwrap();
        threads.push(created.id);
    }
    Setup {
        store: Arc::new(store),
        threads: Arc::new(threads),
        scope,
    }
}

/// Appends per second by `writers` tasks for one round.
async fn round(setup: &Setup, writers: usize, first: usize) -> f64 {
    let started = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (store, threads, scope) = (
                setup.store.clone(),
                setup.threads.clone(),
                setup.scope.clone(),
            );
            tokio::spawn(async move {
                let mut n = 0;
                while started.elapsed() < ROUND {
                    let id = &threads[(first + w + n * writers) % CONVERSATIONS];
                    let message = Message::user(format!("message {n} of writer {w}"));
                    store
                        .append(&scope, id, vec![message], AppendOptions::default())
                        .await
                        .unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut appends = 0;
    for task in tasks {
        appends += task.await.unwrap();
    }
    appends as f64 / started.elapsed().as_secs_f64()
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let setups = [
        ("NORMAL", setup(dir.path(), Synchronous::Normal).await),
        ("FULL", setup(dir.path(), Synchronous::Full).await),
    ];
    let mut rates = vec![[Vec::new(), Vec::new()]; setups.len()];
    for r in 0..ROUNDS {
        for (s, (_, setup)) in setups.iter().enumerate() {
            for (i, writers) in [1, 8].into_iter().enumerate() {
                rates[s][i].push(round(setup, writers, r * 7).await);
            }
        }
    }
    for ((name, _), [one, eight]) in setups.iter().zip(rates) {
        let (one, eight) = (median(one), median(eight));
        println!(
            "synchronous={name}: 1 writer {one:.0} appends/s, 8 writers {eight:.0} appends/s, \
             8 ÷ 1 = {:.2}",
            eight / one
        );
    }
}
