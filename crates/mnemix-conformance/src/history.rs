//! A history checker for one conversation under concurrent appenders and readers, in the
//! manner of Jepsen's Elle for list-append: every operation is recorded with its invocation
//! and completion times and its result, then [`check`] verifies the history against the final
//! contents:
//!
//! - every acknowledged append is there (none lost), no message is there twice;
//! - every batch is there whole and contiguous, or not at all (an append that failed may
//!   have applied: its outcome is unknown, but never partial);
//! - seqs are `1..=n` with no gap;
//! - every successful read is a prefix of the final order (nothing reordered, nothing
//!   appearing then vanishing), and holds every append acknowledged before it began;
//! - each writer's batches keep the writer's order, and an append acknowledged before another
//!   began comes before it (real-time order).
//!
//! [`record`] runs the workload (writers retry a failed batch as a caller would, then move
//! on); the faults come from outside it (a proxy cutting connections, a restarted server).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mnemix_core::{
    AppendOptions, ConversationId, LoadOptions, MemoryBackend, MemoryError, Message, MessageId,
    Part, Role, Scope,
};

/// The workload's shape.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// Concurrent appenders.
    pub writers: usize,
    /// Batches each writer appends.
    pub batches: usize,
    /// Messages per batch.
    pub batch_size: usize,
    /// Concurrent readers, each loading the whole conversation until the writers are done.
    pub readers: usize,
    /// Tries per batch (the first included) before a writer gives the batch up as unknown.
    pub attempts: u32,
    /// How long a writer waits after each batch (none by default): spreads a workload over a
    /// schedule of faults that takes seconds.
    pub pause: Duration,
}

impl Default for Workload {
    fn default() -> Self {
        Self {
            writers: 4,
            batches: 50,
            batch_size: 2,
            readers: 2,
            attempts: 10,
            pause: Duration::ZERO,
        }
    }
}

/// One recorded operation.
#[derive(Debug, Clone)]
pub enum Op {
    /// An append of one batch (the writer's `batch`-th), with every try's outcome folded in:
    /// `acknowledged` when a try returned `Ok`.
    Append {
        /// Which writer.
        writer: usize,
        /// The writer's batch number.
        batch: usize,
        /// The batch's message ids, in order.
        ids: Vec<MessageId>,
        /// When the first try began.
        invoked: Instant,
        /// When the last try ended.
        completed: Instant,
        /// Whether a try returned `Ok`.
        acknowledged: bool,
    },
    /// A successful read of the whole conversation: its ids in seq order.
    Read {
        /// When it began.
        invoked: Instant,
        /// The ids it returned.
        ids: Vec<MessageId>,
    },
}

/// A recorded history and the conversation's final contents.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Every operation.
    pub ops: Vec<Op>,
    /// `(seq, id)` of the final load, in seq order.
    pub last: Vec<(u64, MessageId)>,
    /// Tries that failed (retried or given up).
    pub failed_tries: u64,
    /// Reads that failed.
    pub failed_reads: u64,
}

impl History {
    /// Appends acknowledged.
    pub fn acknowledged(&self) -> usize {
        self.ops
            .iter()
            .filter(|op| {
                matches!(
                    op,
                    Op::Append {
                        acknowledged: true,
                        ..
                    }
                )
            })
            .count()
    }

    /// Successful reads.
    pub fn reads(&self) -> usize {
        self.ops
            .iter()
            .filter(|op| matches!(op, Op::Read { .. }))
            .count()
    }

    /// The figures of a run that [`check`] judged with `anomalies`, as the JSON
    /// fields a report row carries (`appends`, `acknowledged`, `reads`, `failed_tries`,
    /// `failed_reads`, `anomalies`); a test adds its own beside them.
    pub fn figures(&self, anomalies: &[String]) -> serde_json::Map<String, serde_json::Value> {
        let serde_json::Value::Object(figures) = serde_json::json!({
            "appends": self.ops.iter().filter(|op| matches!(op, Op::Append { .. })).count(),
            "acknowledged": self.acknowledged(),
            "reads": self.reads(),
            "failed_tries": self.failed_tries,
            "failed_reads": self.failed_reads,
            "anomalies": anomalies.len(),
        }) else {
            unreachable!("a JSON object literal")
        };
        figures
    }
}

fn batch(writer: usize, batch: usize, size: usize) -> Vec<Message> {
    (0..size)
        .map(|i| {
            Message::new(
                Role::User,
                vec![Part::text(format!(
                    "writer {writer} batch {batch} part {i}"
                ))],
            )
            .with_id(MessageId::generate())
        })
        .collect()
}

/// Runs `workload` against conversation `id` of `scope` (which must exist and be empty) and
/// returns its history, without the final contents: stop the faults, then
/// [`History::finish`]. Errors of single tries are recorded, not raised.
pub async fn record(
    backend: Arc<dyn MemoryBackend>,
    scope: Scope,
    id: ConversationId,
    workload: Workload,
) -> History {
    record_until(backend, scope, id, workload, Arc::default()).await
}

/// [`record`], the writers stopping sooner (after the batch in hand) once `stop` is set: for
/// a schedule of faults whose length is not known in advance.
pub async fn record_until(
    backend: Arc<dyn MemoryBackend>,
    scope: Scope,
    id: ConversationId,
    workload: Workload,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> History {
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers = (0..workload.writers).map(|writer| {
        let (backend, scope, id) = (Arc::clone(&backend), scope.clone(), id.clone());
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let (mut ops, mut failed) = (Vec::new(), 0);
            for b in 0..workload.batches {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let messages = batch(writer, b, workload.batch_size);
                let ids = messages.iter().map(|m| m.id.clone()).collect();
                let invoked = Instant::now();
                let mut acknowledged = false;
                for _ in 0..workload.attempts.max(1) {
                    let result = backend
                        .append(&scope, &id, messages.clone(), AppendOptions::default())
                        .await;
                    if result.is_ok() {
                        acknowledged = true;
                        break;
                    }
                    failed += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                ops.push(Op::Append {
                    writer,
                    batch: b,
                    ids,
                    invoked,
                    completed: Instant::now(),
                    acknowledged,
                });
                if !workload.pause.is_zero() {
                    tokio::time::sleep(workload.pause).await;
                }
            }
            (ops, failed)
        })
    });
    let writers: Vec<_> = writers.collect();
    let readers: Vec<_> = (0..workload.readers)
        .map(|_| {
            let (backend, scope, id) = (Arc::clone(&backend), scope.clone(), id.clone());
            let done = Arc::clone(&done);
            tokio::spawn(async move {
                let (mut ops, mut failed) = (Vec::new(), 0);
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    let invoked = Instant::now();
                    match backend.load(&scope, &id, LoadOptions::raw()).await {
                        Ok(window) => ops.push(Op::Read {
                            invoked,
                            ids: window.into_iter().map(|m| m.message.id).collect(),
                        }),
                        Err(_) => failed += 1,
                    }
                    tokio::task::yield_now().await;
                }
                (ops, failed)
            })
        })
        .collect();
    let mut history = History::default();
    for writer in writers {
        let (ops, failed) = writer.await.expect("a writer task");
        history.ops.extend(ops);
        history.failed_tries += failed;
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    for reader in readers {
        let (ops, failed) = reader.await.expect("a reader task");
        history.ops.extend(ops);
        history.failed_reads += failed;
    }
    history
}

impl History {
    /// Reads the conversation's final contents (once the faults have stopped), retrying a
    /// retryable failure as a caller would: connections cut last may still be in a pool.
    pub async fn finish(
        &mut self,
        backend: &dyn MemoryBackend,
        scope: &Scope,
        id: &ConversationId,
    ) -> Result<(), MemoryError> {
        let mut tries = 0;
        let last = loop {
            match backend.load(scope, id, LoadOptions::raw()).await {
                Ok(last) => break last,
                Err(e) if e.is_retryable() && tries < 20 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(e),
            }
        };
        self.last = last.into_iter().map(|m| (m.seq, m.message.id)).collect();
        Ok(())
    }
}

/// Everything wrong with `history`, in words; empty when it is a valid list-append history.
pub fn check(history: &History) -> Vec<String> {
    let mut anomalies = Vec::new();
    let seqs: Vec<u64> = history.last.iter().map(|(seq, _)| *seq).collect();
    if seqs != (1..=seqs.len() as u64).collect::<Vec<_>>() {
        anomalies.push("the final seqs are not 1..=n".to_owned());
    }
    let mut position: HashMap<&MessageId, usize> = HashMap::new();
    for (at, (_, id)) in history.last.iter().enumerate() {
        if position.insert(id, at).is_some() {
            anomalies.push(format!("message {id} is stored twice"));
        }
    }
    // Where each batch sits in the final order (its first message), if it is there.
    let mut placed: HashMap<(usize, usize), usize> = HashMap::new();
    let mut appends = Vec::new();
    for op in &history.ops {
        let Op::Append {
            writer,
            batch,
            ids,
            invoked,
            completed,
            acknowledged,
        } = op
        else {
            continue;
        };
        let at: Vec<Option<usize>> = ids.iter().map(|id| position.get(id).copied()).collect();
        match at.first().copied().flatten() {
            Some(first) if at.iter().enumerate().all(|(i, p)| *p == Some(first + i)) => {
                placed.insert((*writer, *batch), first);
                appends.push((first, *invoked, *completed, *acknowledged));
            }
            _ if at.iter().all(Option::is_none) => {
                if *acknowledged {
                    anomalies.push(format!(
                        "writer {writer} batch {batch} was acknowledged and is lost"
                    ));
                }
            }
            _ => anomalies.push(format!(
                "writer {writer} batch {batch} is partial or split: positions {at:?}"
            )),
        }
    }
    // Each writer's order.
    let mut by_writer: HashMap<usize, Vec<(usize, usize)>> = HashMap::new();
    for ((writer, batch), first) in &placed {
        by_writer.entry(*writer).or_default().push((*batch, *first));
    }
    for (writer, mut batches) in by_writer {
        batches.sort_unstable();
        if batches.windows(2).any(|w| w[0].1 > w[1].1) {
            anomalies.push(format!("writer {writer}'s batches are out of order"));
        }
    }
    // Real-time order: acknowledged before another began ⇒ before it.
    let mut acked: Vec<_> = appends.iter().filter(|a| a.3).collect();
    acked.sort_by_key(|a| a.2);
    for a in &acked {
        for b in appends.iter().filter(|b| b.1 > a.2) {
            if b.0 < a.0 {
                anomalies.push(format!(
                    "the batch at {} was acknowledged before the one at {} began, yet stands after it",
                    a.0, b.0
                ));
            }
        }
    }
    // Reads: prefixes of the final order, holding what was acknowledged before they began.
    let final_ids: Vec<&MessageId> = history.last.iter().map(|(_, id)| id).collect();
    for op in &history.ops {
        let Op::Read { invoked, ids } = op else {
            continue;
        };
        if ids.len() > final_ids.len() || ids.iter().zip(&final_ids).any(|(a, b)| a != *b) {
            anomalies.push(format!(
                "a read of {} messages is not a prefix of the final order",
                ids.len()
            ));
            continue;
        }
        if let Some(missing) = acked.iter().find(|a| a.2 < *invoked && a.0 >= ids.len()) {
            anomalies.push(format!(
                "a read of {} messages misses the batch at {}, acknowledged before it began",
                ids.len(),
                missing.0
            ));
        }
    }
    anomalies.sort();
    anomalies.dedup();
    anomalies
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<MessageId> {
        (0..n).map(|_| MessageId::generate()).collect()
    }

    fn append(writer: usize, batch: usize, ids: &[MessageId], t: (u64, u64), ack: bool) -> Op {
        let base = Instant::now();
        Op::Append {
            writer,
            batch,
            ids: ids.to_vec(),
            invoked: base + Duration::from_millis(t.0),
            completed: base + Duration::from_millis(t.1),
            acknowledged: ack,
        }
    }

    #[test]
    fn a_valid_history_has_no_anomaly_and_each_fault_is_named() {
        let m = ids(6);
        let last = |order: &[usize]| {
            order
                .iter()
                .enumerate()
                .map(|(i, k)| (i as u64 + 1, m[*k].clone()))
                .collect::<Vec<_>>()
        };
        let base = Instant::now();
        let mut history = History {
            ops: vec![
                append(0, 0, &m[0..2], (0, 10), true),
                append(0, 1, &m[2..4], (20, 30), true),
                append(1, 0, &m[4..6], (0, 40), false),
                Op::Read {
                    invoked: base + Duration::from_millis(31),
                    ids: m[0..4].to_vec(),
                },
            ],
            last: last(&[0, 1, 2, 3, 4, 5]),
            ..History::default()
        };
        assert_eq!(check(&history), Vec::<String>::new());

        // An unacknowledged batch may be missing, never partial.
        history.last = last(&[0, 1, 2, 3, 4]);
        assert!(
            check(&history)[0].contains("partial"),
            "{:?}",
            check(&history)
        );
        history.last = last(&[0, 1, 2, 3]);
        assert_eq!(check(&history), Vec::<String>::new());
        // An acknowledged one is lost, or stored twice.
        history.last = last(&[0, 1]);
        assert!(check(&history).iter().any(|a| a.contains("lost")));
        history.last = last(&[0, 1, 2, 3, 2]);
        assert!(check(&history).iter().any(|a| a.contains("twice")));
        // Writer order and real-time order.
        history.last = last(&[2, 3, 0, 1]);
        assert!(check(&history).iter().any(|a| a.contains("out of order")));
        // A read that is not a prefix, and one that misses an acknowledged batch.
        history.last = last(&[0, 1, 2, 3]);
        history.ops[3] = Op::Read {
            invoked: base + Duration::from_millis(31),
            ids: vec![m[2].clone()],
        };
        assert!(check(&history).iter().any(|a| a.contains("not a prefix")));
        history.ops[3] = Op::Read {
            invoked: base + Duration::from_millis(31),
            ids: m[0..2].to_vec(),
        };
        assert!(check(&history).iter().any(|a| a.contains("misses")));
    }
}
