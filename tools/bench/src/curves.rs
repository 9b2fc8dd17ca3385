//! C1: cost curves — how each hot path's cost grows with what is stored.
//!
//! Two axes, each hot path a table per axis:
//!
//! - **records**: one subject per size (10³, 10⁴, 10⁵ records; 10⁶ with `--scale`), each
//!   holding a conversation of that many messages, that many facts with embeddings and that many
//!   vectors in a collection. The sizes run interleaved (round `r` starts at size `r mod n`), so
//!   the machine's drift spreads over every size.
//! - **tenants**: one subject of [`PROBE_RECORDS`] records measured while the same store fills
//!   with 10, 100, … 10⁵ other tenants (subjects), each holding a little of everything. The
//!   stages run one after another as the store grows (a store cannot be interleaved with its own
//!   past); a path whose cost rises here grows with the store, not with its tenant.
//!
//! The ratio is to the smallest size, and the note gives the slope of log(cost) on log(size) by
//! least squares: 0 for a path that does not grow, 1 for one that reads all of it.

use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use futures::StreamExt as _;
use mnemix_core::embed::HashingEmbedder;
use mnemix_core::{
    AppendOptions, CollectionSpec, ConversationId, LoadOptions, MemoryBackend, Message,
    NewConversation, NewFact, RecallQuery, RememberOptions, Scope, VectorId, VectorQuery,
    VectorRecord, WorkingMemoryKey, WorkingMemoryUpdate,
};
use mnemix_engine::Memory;

use crate::workloads::{nth, subject, FnSide};
use crate::{compare, Round, Side, Table};

/// The collection the curves' vectors live in.
const COLLECTION: &str = "curves";
/// Sentences kept out of the facts, for queries.
const QUERIES: usize = 1_000;
/// The embedder's dimensions (the hashing embedder: no model time is counted).
const DIMS: usize = 384;
/// The records of the subject the tenant axis measures.
pub const PROBE_RECORDS: usize = 1_000;
/// Messages each other tenant holds (with one fact, one vector and a working memory).
const TENANT_MESSAGES: usize = 10;
/// Operations per round of every curve, at most …
const OPERATIONS: usize = 20;
/// … and a round ends early once it has taken this long (a path that reads 10⁵ records may
/// take seconds a call; its medians need rounds, not calls).
const ROUND_BUDGET: std::time::Duration = std::time::Duration::from_secs(1);

/// What a curve's subject holds.
struct Subject {
    records: usize,
    scope: Scope,
    thread: ConversationId,
}

/// What a curve's x axis counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Axis {
    /// The records the measured subject holds.
    Records,
    /// The tenants the store holds besides the measured subject.
    Tenants,
}

impl Axis {
    const ALL: [Axis; 2] = [Axis::Records, Axis::Tenants];

    /// The title every table of the axis starts with.
    fn title(self) -> &'static str {
        match self {
            Axis::Records => "C1 cost curve: ",
            Axis::Tenants => "C1 tenant curve: ",
        }
    }

    /// How a side names its size: `1000 records`, `10 tenants`.
    fn unit(self) -> &'static str {
        match self {
            Axis::Records => " records",
            Axis::Tenants => " tenants",
        }
    }

    /// The x axis's label.
    fn label(self) -> &'static str {
        match self {
            Axis::Records => "records the subject holds",
            Axis::Tenants => "other tenants the store holds",
        }
    }

    /// The plot's file name for a backend.
    fn file(self, backend: &str) -> String {
        match self {
            Axis::Records => format!("c1-{backend}.svg"),
            Axis::Tenants => format!("c1-tenants-{backend}.svg"),
        }
    }
}

/// The records sizes: `quick` for a smoke run, else 10³–10⁵, and 10⁶ too with `scale`.
pub fn sizes(quick: bool, scale: bool) -> Vec<usize> {
    match (quick, scale) {
        (true, _) => vec![100, 1_000],
        (false, false) => vec![1_000, 10_000, 100_000],
        (false, true) => vec![1_000, 10_000, 100_000, 1_000_000],
    }
}

/// The tenant counts: `quick` for a smoke run, else 10–10⁵.
pub fn tenant_counts(quick: bool) -> Vec<usize> {
    if quick {
        vec![10, 100]
    } else {
        vec![10, 100, 1_000, 10_000, 100_000]
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

/// Fills subject `scope` with `records` messages, facts (with embeddings) and vectors.
async fn fill(
    ours: &Arc<dyn MemoryBackend>,
    scope: Scope,
    records: usize,
    sentences: &[String],
) -> Subject {
    let embedder = HashingEmbedder::new(DIMS);
    let vectors = ours.capabilities().has_vectors();
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
            NewFact::new(text.clone()).with_embedding(embedder.embed_one(&text)),
            RememberOptions::default(),
        )
        .await
        .expect("remember");
    }
    for start in (0..records).step_by(500).filter(|_| vectors) {
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

/// Fills tenant `i` of the tenant axis: [`TENANT_MESSAGES`] messages, one fact with its
/// embedding, one vector and a working memory.
async fn fill_tenant(
    ours: Arc<dyn MemoryBackend>,
    scope: Scope,
    i: usize,
    sentences: Arc<[String]>,
) {
    let embedder = HashingEmbedder::new(DIMS);
    let thread = ours
        .create_conversation(&scope, NewConversation::default())
        .await
        .expect("a conversation")
        .id;
    let messages = (0..TENANT_MESSAGES)
        .map(|m| Message::user(nth(&sentences, i * TENANT_MESSAGES + m)))
        .collect();
    ours.append(&scope, &thread, messages, AppendOptions::default())
        .await
        .expect("append");
    let text = nth(&sentences, i).to_owned();
    ours.remember(
        &scope,
        NewFact::new(text.clone()).with_embedding(embedder.embed_one(&text)),
        RememberOptions::default(),
    )
    .await
    .expect("remember");
    if ours.capabilities().has_vectors() {
        let id = VectorId::new("v0").expect("a vector id");
        ours.upsert_vectors(
            &scope,
            COLLECTION,
            vec![VectorRecord::new(id, embedder.embed_one(&text))],
        )
        .await
        .expect("upsert");
    }
    ours.set_working_memory(
        &scope,
        &WorkingMemoryKey::User,
        WorkingMemoryUpdate::markdown(text),
    )
    .await
    .expect("set working memory");
}

/// Fills the tenants `range` (subjects numbered from `first`), 16 at once (a server commits
/// them in groups: one at a time, 10⁵ tenants on PostgreSQL took most of an hour).
async fn fill_tenants(
    ours: &Arc<dyn MemoryBackend>,
    first: usize,
    range: std::ops::Range<usize>,
    sentences: &Arc<[String]>,
) {
    futures::stream::iter(range)
        .for_each_concurrent(16, |i| {
            fill_tenant(ours.clone(), subject(first + i), i, sentences.clone())
        })
        .await;
}

/// One operation of a curve: the store and its engine, the subject, the operation's number
/// and the query text it may use.
struct Call {
    store: Arc<dyn MemoryBackend>,
    memory: Arc<Memory>,
    subject: Arc<Subject>,
    n: usize,
    text: String,
}

impl Call {
    fn vector(&self) -> Vec<f32> {
        HashingEmbedder::new(DIMS).embed_one(&self.text)
    }
}

/// A hot path: its name, whether it needs vectors, and one call of it.
struct Path {
    name: &'static str,
    vectors: bool,
    op: Operation,
}

/// One call of a hot path.
type Operation = fn(Call) -> BoxFuture<'static, ()>;

/// The hot paths both axes measure on their subject (`forget_all` aside: it empties what it
/// measures).
fn paths() -> Vec<Path> {
    vec![
        Path {
            name: "append one message",
            vectors: false,
            op: |call| {
                Box::pin(async move {
                    let message = Message::user(format!("a late message {}", call.n));
                    let subject = &call.subject;
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
            },
        },
        Path {
            name: "load the last 50 messages",
            vectors: false,
            op: |call| {
                Box::pin(async move {
                    let subject = &call.subject;
                    let window = call
                        .store
                        .load(&subject.scope, &subject.thread, LoadOptions::last(50))
                        .await
                        .expect("load");
                    assert_eq!(window.len(), 50.min(subject.records));
                })
            },
        },
        Path {
            name: "working memory (get, set)",
            vectors: false,
            op: |call| {
                Box::pin(async move {
                    let scope = &call.subject.scope;
                    if call.n % 2 == 0 {
                        call.store
                            .get_working_memory(scope, &WorkingMemoryKey::User)
                            .await
                            .expect("get working memory");
                    } else {
                        call.store
                            .set_working_memory(
                                scope,
                                &WorkingMemoryKey::User,
                                WorkingMemoryUpdate::markdown(call.text),
                            )
                            .await
                            .expect("set working memory");
                    }
                })
            },
        },
        Path {
            name: "lexical recall, limit 10",
            vectors: false,
            op: |call| {
                Box::pin(async move {
                    let query = RecallQuery::text(call.text.clone()).with_limit(10);
                    call.store
                        .recall(&call.subject.scope, query)
                        .await
                        .expect("recall");
                })
            },
        },
        Path {
            name: "remember one fact",
            vectors: false,
            op: |call| {
                Box::pin(async move {
                    let text = format!("a fact learned late, number {}", call.n);
                    let embedding = HashingEmbedder::new(DIMS).embed_one(&text);
                    let fact = NewFact::new(text).with_embedding(embedding);
                    call.store
                        .remember(&call.subject.scope, fact, RememberOptions::default())
                        .await
                        .expect("remember");
                })
            },
        },
        Path {
            name: "hybrid recall (words and vector), limit 8",
            vectors: true,
            op: |call| {
                Box::pin(async move {
                    let query = RecallQuery::text(call.text.clone())
                        .with_vector(call.vector())
                        .with_limit(8);
                    call.store
                        .recall(&call.subject.scope, query)
                        .await
                        .expect("recall");
                })
            },
        },
        Path {
            name: "prepare (window, facts by words and vector, working memory)",
            vectors: false,
            op: |call| {
                Box::pin(async move {
                    let subject = &call.subject;
                    let context = call
                        .memory
                        .prepare(&subject.scope, &subject.thread, &call.text)
                        .await
                        .expect("prepare");
                    std::hint::black_box(context);
                })
            },
        },
        Path {
            name: "vector search, top 10",
            vectors: true,
            op: |call| {
                Box::pin(async move {
                    let query = VectorQuery::new(call.vector(), 10);
                    let subject = &call.subject;
                    let hits = call
                        .store
                        .search(&subject.scope, COLLECTION, query)
                        .await
                        .expect("search");
                    assert_eq!(hits.len(), 10.min(subject.records));
                })
            },
        },
    ]
}

/// The engine `prepare` runs with: the window, facts (recalled by words, and by vector where
/// the store has vectors) and working memory; no semantic recall of messages, whose vectors
/// the curves' subjects do not hold.
fn engine(store: &Arc<dyn MemoryBackend>) -> Arc<Memory> {
    let config = mnemix_engine::config::MemoryConfig::from_yaml(
        "conversation: { enabled: true }
facts: { enabled: true }
inject: { limit: 8, token_budget: 400 }
working_memory: { enabled: true, scope: user, template: \"# Profile\\n- name:\\n- plan:\" }",
    )
    .expect("a valid configuration");
    Arc::new(
        Memory::builder(store.clone())
            .config(config)
            .embedder(Arc::new(HashingEmbedder::new(DIMS)))
            .build()
            .expect("a valid engine"),
    )
}

/// What every curve of a backend shares.
struct Curves {
    store: Arc<dyn MemoryBackend>,
    memory: Arc<Memory>,
    texts: Arc<Vec<String>>,
}

impl Curves {
    async fn new(store: &Arc<dyn MemoryBackend>, sentences: &[String]) -> Self {
        if store.capabilities().has_vectors() {
            store
                .ensure_collection(
                    subject(0).namespace(),
                    CollectionSpec::new(COLLECTION, DIMS, "hashing"),
                )
                .await
                .expect("the collection");
        }
        Self {
            store: store.clone(),
            memory: engine(store),
            // Queries: the last sentences, which no fact was made of.
            texts: Arc::new(sentences[sentences.len() - QUERIES..].to_vec()),
        }
    }

    fn paths(&self) -> impl Iterator<Item = Path> {
        let vectors = self.store.capabilities().has_vectors();
        paths().into_iter().filter(move |p| vectors || !p.vectors)
    }

    /// A side running `op` on `subject`, `operations` calls per round.
    fn side(
        &self,
        name: String,
        subject: &Arc<Subject>,
        operations: usize,
        op: Operation,
    ) -> impl Side + use<> {
        let (store, memory, subject, texts) = (
            self.store.clone(),
            self.memory.clone(),
            subject.clone(),
            self.texts.clone(),
        );
        let mut round = 0usize;
        FnSide::new(name, move || {
            round += 1;
            let (store, memory, subject, texts) = (
                store.clone(),
                memory.clone(),
                subject.clone(),
                texts.clone(),
            );
            let first = round * operations;
            async move {
                let mut latencies = Vec::with_capacity(operations);
                let round_started = Instant::now();
                for n in first..first + operations {
                    if round_started.elapsed() > ROUND_BUDGET {
                        break;
                    }
                    let call = Call {
                        store: store.clone(),
                        memory: memory.clone(),
                        subject: subject.clone(),
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
    }
}

/// The slope of a table's medians against its sides' sizes, as a note.
fn with_slope(mut table: Table, axis: Axis) -> Table {
    let slope = slope(&points(&table, axis));
    table.notes.push(format!("slope (log-log): {slope:.2}"));
    table
}

/// C1 on one backend's records axis: the hot paths' cost at each subject size.
pub async fn subject_curves(
    backend: &str,
    ours: &Arc<dyn MemoryBackend>,
    sizes: &[usize],
    rounds: usize,
    sentences: &[String],
) -> Vec<Table> {
    let curves = Curves::new(ours, sentences).await;
    let mut subjects = Vec::with_capacity(sizes.len());
    for (at, &records) in sizes.iter().enumerate() {
        eprintln!("bench: {backend} C1 filling a subject of {records} records");
        subjects.push(Arc::new(
            fill(ours, subject(80_000 + at), records, sentences).await,
        ));
    }
    let config = |operations: usize, rounds: usize| {
        format!(
            "{backend}; one subject per size, each holding that many messages (one conversation), facts with embeddings and vectors; up to {operations} operations per round (a round ends after {ROUND_BUDGET:?}), {rounds} rounds; ratios to the smallest size"
        )
    };
    let table = async |name: &str, operations: usize, rounds: usize, op: Operation| {
        let mut sides: Vec<_> = subjects
            .iter()
            .map(|subject| {
                let name = format!("{}{}", subject.records, Axis::Records.unit());
                curves.side(name, subject, operations, op)
            })
            .collect();
        let mut sides: Vec<&mut dyn Side> = sides.iter_mut().map(|s| s as &mut dyn Side).collect();
        let table = compare(
            format!("{}{name}", Axis::Records.title()),
            config(operations, rounds),
            rounds,
            0,
            &mut sides,
        )
        .await;
        with_slope(table, Axis::Records)
    };
    let mut tables = Vec::new();
    for path in curves.paths() {
        tables.push(table(path.name, OPERATIONS, rounds, path.op).await);
    }
    // Last, as it empties the subjects: one forget_all each.
    tables.push(table("forget_all of the subject", 1, 1, forget).await);
    tables
}

/// `forget_all` of the call's subject.
fn forget(call: Call) -> BoxFuture<'static, ()> {
    Box::pin(async move {
        call.store
            .forget_all(&call.subject.scope)
            .await
            .expect("forget_all");
    })
}

/// C1 on one backend's tenant axis: the hot paths' cost on one subject of
/// [`PROBE_RECORDS`] records as the store fills with other tenants, and `forget_all` of a
/// tenant like them.
pub async fn tenant_curves(
    backend: &str,
    ours: &Arc<dyn MemoryBackend>,
    counts: &[usize],
    rounds: usize,
    sentences: &[String],
) -> Vec<Table> {
    const TENANTS: usize = 200_000;
    const LEAVING: usize = 400_000;
    let curves = Curves::new(ours, sentences).await;
    let shared: Arc<[String]> = sentences.into();
    eprintln!("bench: {backend} C1 filling the tenant axis's subject");
    let probe = Arc::new(fill(ours, subject(80_100), PROBE_RECORDS, sentences).await);
    let paths: Vec<Path> = curves.paths().collect();
    let mut stages: Vec<Vec<Table>> = Vec::new();
    let mut filled = 0;
    for &count in counts {
        eprintln!("bench: {backend} C1 filling the store to {count} tenants");
        fill_tenants(ours, TENANTS, filled..count, &shared).await;
        filled = count;
        let name = format!("{count}{}", Axis::Tenants.unit());
        let mut stage = Vec::new();
        for path in &paths {
            let mut side = curves.side(name.clone(), &probe, OPERATIONS, path.op);
            stage.push(compare(path.name, "", rounds, 0, &mut [&mut side]).await);
        }
        // forget_all of tenants like the others, made for it (so the count stays).
        let first = LEAVING + stages.len() * OPERATIONS;
        fill_tenants(ours, first, 0..OPERATIONS, &shared).await;
        let mut leaving: Vec<Scope> = (0..OPERATIONS).map(|i| subject(first + i)).collect();
        let store = ours.clone();
        let mut side = FnSide::new(name, move || {
            let (store, tenants) = (store.clone(), std::mem::take(&mut leaving));
            async move {
                let mut latencies = Vec::new();
                for tenant in tenants {
                    let started = Instant::now();
                    store.forget_all(&tenant).await.expect("forget_all");
                    latencies.push(started.elapsed());
                }
                Round::sequential(latencies)
            }
        });
        stage.push(
            compare(
                "forget_all of a tenant like the others",
                format!("one round: {OPERATIONS} tenants made for it at each stage, forgotten one after another"),
                1,
                0,
                &mut [&mut side],
            )
            .await,
        );
        stages.push(stage);
    }
    let config = format!(
        "{backend}; one subject of {PROBE_RECORDS} records (messages in one conversation, facts with embeddings, vectors) in a store holding that many other tenants, each with {TENANT_MESSAGES} messages, a fact, a vector and a working memory; the stages run one after another as the store fills; up to {OPERATIONS} operations per round (a round ends after {ROUND_BUDGET:?}), {rounds} rounds; ratios to the fewest tenants"
    );
    let Some(first) = stages.first() else {
        return Vec::new();
    };
    (0..first.len())
        .map(|p| {
            let mut sides: Vec<_> = stages
                .iter()
                .map(|stage| stage[p].sides[0].clone())
                .collect();
            let reference = sides[0].median_us;
            for side in &mut sides {
                side.ratio = side.median_us / reference;
            }
            let table = Table {
                workload: format!("{}{}", Axis::Tenants.title(), first[p].workload),
                config: config.clone(),
                reference: sides[0].name.clone(),
                sides,
                notes: (!first[p].config.is_empty())
                    .then(|| first[p].config.clone())
                    .into_iter()
                    .collect(),
            };
            with_slope(table, Axis::Tenants)
        })
        .collect()
}

/// A C1 table's axis and backend (the first field of its config), `None` for another table.
fn c1_of(table: &Table) -> Option<(Axis, String)> {
    let axis = Axis::ALL
        .into_iter()
        .find(|axis| table.workload.starts_with(axis.title()))?;
    let backend = table.config.split(';').next().unwrap_or_default();
    Some((axis, backend.to_owned()))
}

/// A tenant-axis slope above this grows with the store rather than with the tenant: over four
/// decades of tenants, 0.1 is a cost 2.5 times higher.
pub const GROWS_WITH_THE_STORE: f64 = 0.1;

/// The C1 slopes among `tables` as one Markdown table: a row per hot path, a column per
/// backend, each cell `records / tenants` (the slope on each axis), a tenant slope above
/// [`GROWS_WITH_THE_STORE`] in bold. `None` without C1 tables.
pub fn slopes(tables: &[Table]) -> Option<String> {
    use std::fmt::Write as _;
    let mut backends: Vec<String> = Vec::new();
    let mut paths: Vec<String> = Vec::new();
    let mut cells: Vec<(String, String, Axis, f64)> = Vec::new();
    for table in tables {
        let Some((axis, backend)) = c1_of(table) else {
            continue;
        };
        let path = table.workload[axis.title().len()..].to_owned();
        if !backends.contains(&backend) {
            backends.push(backend.clone());
        }
        if !paths.contains(&path) {
            paths.push(path.clone());
        }
        cells.push((backend, path, axis, slope(&points(table, axis))));
    }
    if cells.is_empty() {
        return None;
    }
    let mut out = format!(
        "| hot path | {} |\n|---|{}\n",
        backends.join(" | "),
        "---:|".repeat(backends.len())
    );
    for path in &paths {
        let _ = write!(out, "| {path} |");
        for backend in &backends {
            let slope_of = |axis: Axis| {
                cells
                    .iter()
                    .find(|(b, p, a, _)| b == backend && p == path && *a == axis)
                    .map(|cell| cell.3)
            };
            let records = slope_of(Axis::Records).map_or("–".to_owned(), |s| format!("{s:.2}"));
            let tenants = slope_of(Axis::Tenants).map_or("–".to_owned(), |s| {
                if s > GROWS_WITH_THE_STORE {
                    format!("**{s:.2}**")
                } else {
                    format!("{s:.2}")
                }
            });
            let _ = write!(out, " {records} / {tenants} |");
        }
        out.push('\n');
    }
    Some(out)
}

/// A C1 plot: its file name (`c1-<backend>.svg`, `c1-tenants-<backend>.svg`), its caption and
/// its SVG text.
#[derive(Debug, Clone, PartialEq)]
pub struct Plot {
    /// The file name, under the report's `benchmarks/`.
    pub file: String,
    /// What it shows, for the report.
    pub caption: String,
    /// The SVG.
    pub svg: String,
}

/// The C1 tables among `tables` plotted, one SVG per backend and axis: each hot path a line of
/// its median cost per operation against the records its subject holds (or the tenants its
/// store holds), both axes logarithmic (a path that does not grow is flat; one that reads all
/// its subject rises one decade per decade), in the order the backends ran. Written by hand: a
/// few lines of SVG text, where a plotting crate would bring a font and raster stack for them.
pub fn plots(tables: &[Table]) -> Vec<Plot> {
    let mut groups: Vec<(String, Axis, Vec<&Table>)> = Vec::new();
    for table in tables {
        let Some((axis, backend)) = c1_of(table) else {
            continue;
        };
        match groups
            .iter_mut()
            .find(|(b, a, _)| *b == backend && *a == axis)
        {
            Some((_, _, of)) => of.push(table),
            None => groups.push((backend, axis, vec![table])),
        }
    }
    groups
        .into_iter()
        .map(|(backend, axis, of)| Plot {
            file: axis.file(&backend),
            caption: format!(
                "C1 {}, {backend}",
                axis.title()
                    .trim_start_matches("C1 ")
                    .trim_end_matches(": ")
            ),
            svg: plot(&backend, axis, &of),
        })
        .collect()
}

/// A curve's points: (size, median µs), for sides named "N records" or "N tenants".
fn points(table: &Table, axis: Axis) -> Vec<(f64, f64)> {
    table
        .sides
        .iter()
        .filter_map(|side| {
            let size = side.name.strip_suffix(axis.unit())?.parse::<f64>().ok()?;
            (side.median_us > 0.0).then_some((size, side.median_us))
        })
        .collect()
}

fn plot(backend: &str, axis: Axis, tables: &[&Table]) -> String {
    use std::fmt::Write as _;
    // One colour per hot path (C1 has nine on a backend with vectors), the legend wide enough
    // for the longest name.
    const COLORS: [&str; 10] = [
        "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
        "#bcbd22", "#7f7f7f",
    ];
    let (width, height, left, top, plot_w, plot_h) = (1180.0, 420.0, 70.0, 40.0, 460.0, 330.0);
    let curves: Vec<(&str, Vec<(f64, f64)>)> = tables
        .iter()
        .map(|t| (t.workload.trim_start_matches(axis.title()), points(t, axis)))
        .filter(|(_, p)| !p.is_empty())
        .collect();
    let all = curves.iter().flat_map(|(_, p)| p.iter());
    let decade = |v: f64, up: bool| {
        if up {
            v.log10().ceil()
        } else {
            v.log10().floor()
        }
    };
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all {
        (x0, x1) = (x0.min(decade(x, false)), x1.max(decade(x, true)));
        (y0, y1) = (y0.min(decade(y, false)), y1.max(decade(y, true)));
    }
    if curves.is_empty() {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    let (x1, y1) = (x1.max(x0 + 1.0), y1.max(y0 + 1.0));
    let px = |x: f64| left + (x.log10() - x0) / (x1 - x0) * plot_w;
    let py = |y: f64| top + plot_h - (y.log10() - y0) / (y1 - y0) * plot_h;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{left}\" y=\"22\" font-size=\"15\">C1, {backend}: median per operation \
         against the {}</text>\n",
        axis.label()
    );
    for k in (x0 as i32)..=(x1 as i32) {
        let x = px(10f64.powi(k));
        let _ = write!(
            svg,
            "<line x1=\"{x:.1}\" y1=\"{top}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\n\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">1e{k}</text>\n",
            top + plot_h,
            top + plot_h + 16.0
        );
    }
    for k in (y0 as i32)..=(y1 as i32) {
        let y = py(10f64.powi(k));
        let label = match k {
            ..=2 => format!("{} µs", 10f64.powi(k)),
            3..=5 => format!("{} ms", 10f64.powi(k - 3)),
            _ => format!("{} s", 10f64.powi(k - 6)),
        };
        let _ = write!(
            svg,
            "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>\n",
            left + plot_w,
            left - 6.0,
            y + 4.0
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
        left + plot_w / 2.0,
        height - 8.0,
        axis.label()
    );
    for (i, (name, points)) in curves.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let line: Vec<String> = points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            line.join(" ")
        );
        for &(x, y) in points {
            let _ = writeln!(
                svg,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"/>",
                px(x),
                py(y)
            );
        }
        let legend_y = top + 10.0 + 20.0 * i as f64;
        let _ = writeln!(
            svg,
            "<line x1=\"{0:.1}\" y1=\"{legend_y:.1}\" x2=\"{1:.1}\" y2=\"{legend_y:.1}\" \
             stroke=\"{color}\" stroke-width=\"2\"/><text x=\"{2:.1}\" y=\"{3:.1}\">{name} \
             (slope {4:.2})</text>",
            left + plot_w + 20.0,
            left + plot_w + 40.0,
            left + plot_w + 46.0,
            legend_y + 4.0,
            slope(points)
        );
    }
    svg.push_str("</svg>\n");
    svg
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

    #[test]
    fn a_backends_curves_are_one_plot_per_axis_with_a_line_per_path() {
        use super::Axis;
        use crate::{SideFigures, Table};
        let table = |axis: Axis, path: &str, backend: &str, medians: [f64; 3]| Table {
            workload: format!("{}{path}", axis.title()),
            config: format!("{backend}; one subject per size"),
            reference: format!("10{}", axis.unit()),
            sides: [10, 100, 1_000]
                .iter()
                .zip(medians)
                .map(|(size, median_us)| SideFigures {
                    name: format!("{size}{}", axis.unit()),
                    median_us,
                    p50_us: median_us,
                    p99_us: median_us,
                    ops_per_sec: 1e6 / median_us,
                    ratio: 1.0,
                    operations: 1,
                })
                .collect(),
            notes: Vec::new(),
        };
        let tables = [
            table(
                Axis::Records,
                "append one message",
                "sqlite",
                [50.0, 50.0, 50.0],
            ),
            table(
                Axis::Records,
                "forget_all of the subject",
                "sqlite",
                [1e3, 1e4, 1e5],
            ),
            table(
                Axis::Records,
                "append one message",
                "redis",
                [80.0, 80.0, 80.0],
            ),
            table(
                Axis::Tenants,
                "append one message",
                "sqlite",
                [50.0, 500.0, 5000.0],
            ),
        ];
        let plots = super::plots(&tables);
        let files: Vec<&str> = plots.iter().map(|p| p.file.as_str()).collect();
        assert_eq!(
            files,
            ["c1-sqlite.svg", "c1-redis.svg", "c1-tenants-sqlite.svg"]
        );
        let sqlite = &plots[0].svg;
        assert_eq!(sqlite.matches("<polyline").count(), 2);
        assert!(sqlite.contains("forget_all of the subject (slope 1.00)"));
        assert!(sqlite.contains("append one message (slope 0.00)"));
        assert!(sqlite.starts_with("<svg") && sqlite.ends_with("</svg>\n"));
        let slopes = super::slopes(&tables).expect("C1 tables");
        assert!(
            slopes.starts_with("| hot path | sqlite | redis |\n|---|---:|---:|\n"),
            "{slopes}"
        );
        assert!(
            slopes.contains("| append one message | 0.00 / **1.00** | 0.00 / – |"),
            "{slopes}"
        );
        assert!(slopes.contains("| forget_all of the subject | 1.00 / – | – / – |"));
        assert_eq!(super::slopes(&tables[..0]), None);
        let tenants = &plots[2];
        assert_eq!(tenants.caption, "C1 tenant curve, sqlite");
        assert!(tenants.svg.contains("append one message (slope 1.00)"));
        assert!(tenants.svg.contains("other tenants the store holds"));
    }
}
