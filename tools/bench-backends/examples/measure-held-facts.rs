//! A small measurement of hybrid fact recall (words and vector) on the SQLite store, which ranks
//! a subject's facts held in memory while their generation stands: in a subject of 1,000 and
//! one of 10,000 facts with 384-dimension embeddings, the median recall
//!
//! - **held**: after another recall (nothing written since);
//! - **after its own remember**: after this store remembered a new fact in the subject (the
//!   writer brings what it holds to the generation its write made);
//! - **after another handle's remember**: after a second store on the same file remembered one
//!   (what is held is stale, so the subject's facts are read again).
//!
//! - **engine limit**: the same recall by hand on rusqlite (`EngineSqlite::recall_hybrid`: the
//!   candidates, the held facts, core's ranking, the top facts), on the same file.
//!
//! Rounds interleave the four. Every fact holds the query's word: every fact is ranked on
//! both sides of the fusion.
//!
//! `cargo run --release -p mnemix-bench-backends --example measure-held-facts`

use std::sync::Arc;
use std::time::{Duration, Instant};

use mnemix_bench::workloads::RawDriver as _;
use mnemix_bench_backends::sqlite::EngineSqlite;
use mnemix_core::{FactStore, NewFact, RecallQuery, RememberOptions, Scope};
use mnemix_sqlite::SqliteStore;

const DIMS: usize = 384;

/// A seeded pseudo-random unit vector.
fn vector(seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let v: Vec<f32> = (0..DIMS)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / norm).collect()
}

fn fact(seed: u64) -> NewFact {
    NewFact::new(format!("a note on topic {seed} with detail {}", seed * 7))
        .with_embedding(vector(seed))
}

/// Remembers the next fact in `scope` through `store`.
async fn remember_next(store: &SqliteStore, scope: &Scope, seed: &mut u64) {
    *seed += 1;
    store
        .remember(scope, fact(*seed), RememberOptions::default())
        .await
        .unwrap();
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("held.db").display());
    let store = Arc::new(SqliteStore::builder().url(&url).open().await.unwrap());
    let other = SqliteStore::builder().url(&url).open().await.unwrap();
    let engine = EngineSqlite::open(&dir.path().join("held.db"));
    let mut seed = 0u64;
    for facts in [1_000u64, 10_000] {
        let scope = Scope::new("measure", format!("subject-{facts}")).unwrap();
        for _ in 0..facts {
            remember_next(&store, &scope, &mut seed).await;
        }
        let recall = |n: u64| {
            let (store, scope) = (store.clone(), scope.clone());
            async move {
                let query = RecallQuery::text("which topic")
                    .with_vector(vector(1_000_000 + n))
                    .with_limit(8);
                let started = Instant::now();
                let hits = store.recall(&scope, query).await.unwrap();
                assert_eq!(hits.len(), 8);
                started.elapsed()
            }
        };
        let by_hand = |n: u64| {
            let (engine, scope) = (&engine, scope.clone());
            async move {
                let vector = vector(1_000_000 + n);
                let started = Instant::now();
                let hits = engine
                    .recall_hybrid(&scope, "which topic", &vector, 8)
                    .await
                    .unwrap();
                assert_eq!(hits.len(), 8);
                started.elapsed()
            }
        };
        let (mut held, mut own, mut stale, mut limit) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for round in 0..30u64 {
            recall(round).await;
            held.push(recall(round).await);
            by_hand(round).await;
            limit.push(by_hand(round).await);
            remember_next(&store, &scope, &mut seed).await;
            own.push(recall(round).await);
            remember_next(&other, &scope, &mut seed).await;
            stale.push(recall(round).await);
        }
        println!(
            "hybrid recall among {facts} facts: held {:?}, engine limit {:?}, after its own remember {:?}, after another handle's remember {:?}",
            median(held),
            median(limit),
            median(own),
            median(stale)
        );
    }
}
