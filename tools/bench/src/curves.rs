//! C1: cost curves — how each hot path's cost grows with the records its subject holds.
//!
//! One subject per size (10³, 10⁴, 10⁵ records; 10⁶ with `--scale`), each holding a
//! conversation of that many messages, that many facts with embeddings and that many vectors in
//! a collection. Each hot path is one table whose sides are the sizes, run interleaved (round
//! `r` starts at size `r mod n`) so the machine's drift spreads over every size; the ratio is
//! to the smallest size, and the note gives the slope of log(cost) on log(size) by least
//! squares: 0 for a path that does not grow with its subject, 1 for one that reads all of it.

use std::sync::Arc;
use std::time::Instant;

use mnemix_core::embed::HashingEmbedder;
use mnemix_core::{
    AppendOptions, CollectionSpec, ConversationId, LoadOptions, MemoryBackend, Message,
    NewConversation, NewFact, RecallQuery, RememberOptions, Scope, VectorId, VectorQuery,
    VectorRecord,
};

use crate::workloads::{nth, subject, FnSide};
use crate::{compare, Round, Side, Table};

/// The collection the curves' vectors live in.
const COLLECTION: &str = "curves";
/// Sentences kept out of the facts, for queries.
const QUERIES: usize = 1_000;
/// The embedder's dimensions (the hashing embedder: no model time is counted).
const DIMS: usize = 384;

/// What a curve's subject holds.
struct Subject {
    records: usize,
    scope: Scope,
    thread: ConversationId,
}

/// The sizes: `quick` for a smoke run, else 10³–10⁵, and 10⁶ too with `scale`.
pub fn sizes(quick: bool, scale: bool) -> Vec<usize> {
    match (quick, scale) {
        (true, _) => vec![100, 1_000],
        (false, false) => vec![1_000, 10_000, 100_000],
        (false, true) => vec![1_000, 10_000, 100_000, 1_000_000],
    }
}

/// The slope of `ln y` on `ln x` by least squares.
pub fn slope(points: &[(f64, f64)]) -> f64 {
    let logs: Vec<(f64, f64)> = points.iter().map(|&(x, y)| (x.ln(), y.ln())).collect();
    let n = logs.len() as f64;
    let (mx, my) = (
        logs.iter().map(|p| p.0).sum::<f64>() / n,
        logs.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let covariance: f64 = logs.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let variance: f64 = logs.iter().map(|p| (p.0 - mx).powi(2)).sum();
    covariance / variance
}

/// Fills a subject with `records` messages, facts (with embeddings) and vectors.
async fn fill(
    ours: &Arc<dyn MemoryBackend>,
    at: usize,
    records: usize,
    sentences: &[String],
) -> Subject {
    let scope = subject(80_000 + at);
    let embedder = HashingEmbedder::new(DIMS);
    let thread = ours
        .create_conversation(&scope, NewConversation::default())
        .await
        .expect("a conversation")
        .id;
    for start in (0..records).step_by(100) {
        let batch = (start..(start + 100).min(records))
            .map(|i| Message::user(nth(sentences, i)))
            .collect();
        ours.append(&scope, &thread, batch, AppendOptions::default())
            .await
            .expect("append");
    }
    for i in 0..records {
        // Unique texts (a duplicate would not be stored), numbered once the sentences run out.
        let kept = sentences.len() - QUERIES;
        let text = if i < kept {
            sentences[i].clone()
        } else {
            format!("{} ({i})", sentences[i % kept])
        };
        ours.remember(
            &scope,
            NewFact {
                embedding: Some(embedder.embed_one(&text)),
                ..NewFact::new(text)
            },
            RememberOptions::default(),
        )
        .await
        .expect("remember");
    }
    for start in (0..records).step_by(500) {
        let batch = (start..(start + 500).min(records))
            .map(|i| {
                let id = VectorId::new(format!("v{i}")).expect("a vector id");
                VectorRecord::new(id, embedder.embed_one(nth(sentences, i)))
            })
            .collect();
        ours.upsert_vectors(&scope, COLLECTION, batch)
            .await
            .expect("upsert");
    }
    Subject {
        records,
        scope,
        thread,
    }
}

/// One operation of a curve: the store, the subject of one size, the operation's number and
/// the query text it may use.
struct Call {
    store: Arc<dyn MemoryBackend>,
    subjects: Arc<Vec<Subject>>,
    at: usize,
    n: usize,
    text: String,
}

impl Call {
    fn subject(&self) -> &Subject {
        &self.subjects[self.at]
    }

    fn vector(&self) -> Vec<f32> {
        HashingEmbedder::new(DIMS).embed_one(&self.text)
    }
}

/// What every curve of a backend shares: its subjects (one per size) and the query texts.
struct Curves<'a> {
    backend: &'a str,
    store: Arc<dyn MemoryBackend>,
    subjects: Arc<Vec<Subject>>,
    texts: Arc<Vec<String>>,
}

impl Curves<'_> {
    /// One hot path at every size, interleaved: `operations` calls of `op` per round.
    async fn curve<F, Fut>(&self, name: &str, rounds: usize, operations: usize, op: F) -> Table
    where
        F: Fn(Call) -> Fut + Copy + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let mut sides: Vec<_> = (0..self.subjects.len())
            .map(|at| {
                let (store, subjects, texts) = (
                    self.store.clone(),
                    self.subjects.clone(),
                    self.texts.clone(),
                );
                let mut round = 0usize;
                FnSide::new(format!("{} records", subjects[at].records), move || {
                    round += 1;
                    let (store, subjects, texts) = (store.clone(), subjects.clone(), texts.clone());
                    let first = round * operations;
                    async move {
                        let mut latencies = Vec::with_capacity(operations);
                        for n in first..first + operations {
                            let call = Call {
                                store: store.clone(),
                                subjects: subjects.clone(),
                                at,
                                n,
                                text: nth(&texts, n).to_owned(),
                            };
                            let started = Instant::now();
                            op(call).await;
                            latencies.push(started.elapsed());
                        }
                        Round::sequential(latencies)
                    }
                })
            })
            .collect();
        let mut sides: Vec<&mut dyn Side> = sides.iter_mut().map(|s| s as &mut dyn Side).collect();
        let mut table = compare(
            format!("C1 cost curve: {name}"),
            format!(
                "{}; one subject per size, each holding that many messages (one conversation), facts with embeddings and vectors; {operations} operations per round, {rounds} rounds; ratios to the smallest size",
                self.backend
            ),
            rounds,
            0,
            &mut sides,
        )
        .await;
        let points: Vec<(f64, f64)> = self
            .subjects
            .iter()
            .zip(&table.sides)
            .map(|(subject, side)| (subject.records as f64, side.median_us))
            .collect();
        table
            .notes
            .push(format!("slope (log-log): {:.2}", slope(&points)));
        table
    }
}

/// C1 on one backend: the hot paths' cost at each subject size.
pub async fn subject_curves(
    backend: &str,
    ours: &Arc<dyn MemoryBackend>,
    sizes: &[usize],
    rounds: usize,
    sentences: &[String],
) -> Vec<Table> {
    let vectors = ours.capabilities().has_vectors();
    if vectors {
        ours.ensure_collection(
            subject(0).namespace(),
            CollectionSpec::new(COLLECTION, DIMS, "hashing"),
        )
        .await
        .expect("the collection");
    }
    let mut subjects = Vec::with_capacity(sizes.len());
    for (at, &records) in sizes.iter().enumerate() {
        eprintln!("bench: {backend} C1 filling a subject of {records} records");
        subjects.push(fill(ours, at, records, sentences).await);
    }
    let curves = Curves {
        backend,
        store: ours.clone(),
        subjects: Arc::new(subjects),
        // Queries: the last sentences, which no fact was made of.
        texts: Arc::new(sentences[sentences.len() - QUERIES..].to_vec()),
    };
    let ops = 20;
    let mut tables = vec![
        curves
            .curve("append one message", rounds, ops, |call| async move {
                let subject = call.subject();
                let message = Message::user(format!("a late message {}", call.n));
                call.store
                    .append(
                        &subject.scope,
                        &subject.thread,
                        vec![message],
                        AppendOptions::default(),
                    )
                    .await
                    .expect("append");
            })
            .await,
        curves
            .curve(
                "load the last 50 messages",
                rounds,
                ops,
                |call| async move {
                    let subject = call.subject();
                    let window = call
                        .store
                        .load(&subject.scope, &subject.thread, LoadOptions::last(50))
                        .await
                        .expect("load");
                    assert_eq!(window.len(), 50.min(subject.records));
                },
            )
            .await,
        curves
            .curve("lexical recall, limit 10", rounds, ops, |call| async move {
                let query = RecallQuery::text(call.text.clone()).with_limit(10);
                call.store
                    .recall(&call.subject().scope, query)
                    .await
                    .expect("recall");
            })
            .await,
        curves
            .curve("remember one fact", rounds, ops, |call| async move {
                let text = format!("a fact learned late, number {}", call.n);
                let fact = NewFact {
                    embedding: Some(HashingEmbedder::new(DIMS).embed_one(&text)),
                    ..NewFact::new(text)
                };
                call.store
                    .remember(&call.subject().scope, fact, RememberOptions::default())
                    .await
                    .expect("remember");
            })
            .await,
    ];
    if vectors {
        tables.push(
            curves
                .curve(
                    "hybrid recall (words and vector), limit 8",
                    rounds,
                    ops,
                    |call| async move {
                        let query = RecallQuery::text(call.text.clone())
                            .with_vector(call.vector())
                            .with_limit(8);
                        call.store
                            .recall(&call.subject().scope, query)
                            .await
                            .expect("recall");
                    },
                )
                .await,
        );
        tables.push(
            curves
                .curve("vector search, top 10", rounds, ops, |call| async move {
                    let query = VectorQuery::new(call.vector(), 10);
                    let subject = call.subject();
                    let hits = call
                        .store
                        .search(&subject.scope, COLLECTION, query)
                        .await
                        .expect("search");
                    assert_eq!(hits.len(), 10.min(subject.records));
                })
                .await,
        );
    }
    // Last, as it empties the subjects: one forget_all each.
    tables.push(
        curves
            .curve("forget_all of the subject", 1, 1, |call| async move {
                call.store
                    .forget_all(&call.subject().scope)
                    .await
                    .expect("forget_all");
            })
            .await,
    );
    tables
}

#[cfg(test)]
mod tests {
    use super::slope;

    #[test]
    fn slope_is_the_power_of_a_power_law() {
        let cubic: Vec<(f64, f64)> = [1.0, 10.0, 100.0]
            .iter()
            .map(|&x| (x, 3.0 * x * x * x))
            .collect();
        assert!((slope(&cubic) - 3.0).abs() < 1e-9);
        let flat = [(1_000.0, 5.0), (10_000.0, 5.0), (100_000.0, 5.0)];
        assert!(slope(&flat).abs() < 1e-9);
    }
}
