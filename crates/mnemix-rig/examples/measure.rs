//! What rig's traits add on top of our own calls: loading a conversation and appending a turn,
//! each measured through `ConversationHistory` and through the store's own API on the same
//! store, in interleaved rounds (medians), so the ratio is the translation's cost alone.
//!
//! ```text
//! cargo run --release -p mnemix-rig --example measure-rig
//! MEASURE_URL=postgres://postgres@127.0.0.1/test cargo run --release -p mnemix-rig --example measure-rig
//! ```
//!
//! Without `MEASURE_URL` it runs on a SQLite file in a temporary directory. A measurement, not a
//! test: it asserts nothing about time.

use std::error::Error;
use std::time::{Duration, Instant};

use mnemix_core::{ConversationId, MessageId, Scoped};
use mnemix_rig::{to_stored, ConversationHistory};
use rig_core::completion::Message;
use rig_core::id::ConversationId as RigConversationId;
use rig_core::memory::ConversationMemory;

const ROUNDS: usize = 200;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let dir = tempfile::tempdir()?;
    let url = std::env::var("MEASURE_URL")
        .unwrap_or_else(|_| format!("sqlite://{}", dir.path().join("measure.db").display()));
    let store = mnemix::open(&url).await?;
    let namespace = format!("measure-rig-{}", fastrand::u64(..));
    let scoped = store.scope(&namespace, "ada")?;
    let history = ConversationHistory::new(scoped.clone());
    println!("backend: {}", url.split(':').next().unwrap_or("?"));
    println!("| operation | through rig | our API | rig ÷ ours |");
    println!("|---|---:|---:|---:|");

    for length in [100, 1_000] {
        let thread = format!("load-{length}");
        let turns: Vec<Message> = (0..length)
            .map(|i| {
                if i % 2 == 0 {
                    Message::user(format!("question {i} about tea and lemons"))
                } else {
                    Message::assistant(format!("answer {i}: lemons go well with tea"))
                }
            })
            .collect();
        for chunk in turns.chunks(100) {
            history
                .append(&thread.as_str().into(), chunk.to_vec())
                .await?;
        }
        let rig_id: RigConversationId = thread.as_str().into();
        let id = ConversationId::new(&thread)?;
        let (rig, ours) = interleaved(
            || async { assert_eq!(history.load(&rig_id).await.unwrap().len(), length) },
            || async { assert_eq!(raw_load(&scoped, &id).await.len(), length) },
        )
        .await;
        row(&format!("load a {length}-message conversation"), rig, ours);
    }

    let turn = vec![
        Message::user("What goes well with tea?"),
        Message::assistant("Lemon, mostly."),
    ];
    let stored = turn.iter().map(to_stored).collect::<Result<Vec<_>, _>>()?;
    let rig_id: RigConversationId = "append-rig".into();
    history.append(&rig_id, turn.clone()).await?;
    let id = ConversationId::new("append-ours")?;
    scoped.new_conversation().id(id.clone()).await?;
    let (rig, ours) = interleaved(
        || async { history.append(&rig_id, turn.clone()).await.unwrap() },
        || async {
            // Fresh ids, as rig's side gets: the same ids again would be an idempotent replay.
            let turn = stored
                .iter()
                .map(|m| m.clone().with_id(MessageId::generate()));
            scoped.conversation(&id).append(turn).await.unwrap();
        },
    )
    .await;
    row("append one turn (user + assistant)", rig, ours);

    scoped.forget_all().await?;
    Ok(())
}

async fn raw_load(scoped: &Scoped, id: &ConversationId) -> Vec<mnemix_core::StoredMessage> {
    scoped.conversation(id).load().raw().await.unwrap()
}

/// Runs `a` and `b` alternately, `ROUNDS` times each after a warm-up, and returns their medians.
async fn interleaved<A, FA, B, FB>(a: A, b: B) -> (Duration, Duration)
where
    A: Fn() -> FA,
    FA: std::future::Future<Output = ()>,
    B: Fn() -> FB,
    FB: std::future::Future<Output = ()>,
{
    for _ in 0..10 {
        a().await;
        b().await;
    }
    let (mut left, mut right) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let start = Instant::now();
        a().await;
        left.push(start.elapsed());
        let start = Instant::now();
        b().await;
        right.push(start.elapsed());
    }
    (median(left), median(right))
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn row(name: &str, rig: Duration, ours: Duration) {
    println!(
        "| {name} | {:.1} µs | {:.1} µs | {:.2} |",
        rig.as_secs_f64() * 1e6,
        ours.as_secs_f64() * 1e6,
        rig.as_secs_f64() / ours.as_secs_f64()
    );
}
