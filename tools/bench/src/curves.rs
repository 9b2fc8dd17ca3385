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

/// The title every C1 table starts with.
const TITLE: &str = "C1 cost curve: ";

/// The C1 tables among `tables` plotted, one SVG per backend: each hot path a line of its
/// median cost per operation against the records its subject holds, both axes logarithmic (a
/// path that does not grow is flat; one that reads all its subject rises one decade per
/// decade). `(backend, svg)`, in the order the backends ran. Written by hand: a few lines of
/// SVG text, where a plotting crate would bring a font and raster stack for them.
pub fn plots(tables: &[Table]) -> Vec<(String, String)> {
    let mut backends: Vec<(String, Vec<&Table>)> = Vec::new();
    for table in tables.iter().filter(|t| t.workload.starts_with(TITLE)) {
        let backend = table
            .config
            .split(';')
            .next()
            .unwrap_or_default()
            .to_owned();
        match backends.iter_mut().find(|(b, _)| *b == backend) {
            Some((_, of)) => of.push(table),
            None => backends.push((backend, vec![table])),
        }
    }
    backends
        .into_iter()
        .map(|(backend, of)| {
            let svg = plot(&backend, &of);
            (backend, svg)
        })
        .collect()
}

/// A curve's points: (records, median µs), for sides named "N records".
fn points(table: &Table) -> Vec<(f64, f64)> {
    table
        .sides
        .iter()
        .filter_map(|side| {
            let records = side.name.strip_suffix(" records")?.parse::<f64>().ok()?;
            (side.median_us > 0.0).then_some((records, side.median_us))
        })
        .collect()
}

fn plot(backend: &str, tables: &[&Table]) -> String {
    use std::fmt::Write as _;
    const COLORS: [&str; 8] = [
        "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
    ];
    let (width, height, left, top, plot_w, plot_h) = (1000.0, 420.0, 70.0, 40.0, 460.0, 330.0);
    let curves: Vec<(&str, Vec<(f64, f64)>)> = tables
        .iter()
        .map(|t| (t.workload.trim_start_matches(TITLE), points(t)))
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
         <text x=\"{left}\" y=\"22\" font-size=\"15\">C1 cost curves, {backend}: median per \
         operation against the records a subject holds</text>\n"
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
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">records the subject holds</text>",
        left + plot_w / 2.0,
        height - 8.0
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
    fn a_backends_curves_are_one_plot_with_a_line_per_path() {
        use crate::{SideFigures, Table};
        let table = |path: &str, backend: &str, medians: [f64; 3]| Table {
            workload: format!("{}{path}", super::TITLE),
            config: format!("{backend}; one subject per size"),
            reference: "1000 records".to_owned(),
            sides: [1_000, 10_000, 100_000]
                .iter()
                .zip(medians)
                .map(|(records, median_us)| SideFigures {
                    name: format!("{records} records"),
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
            table("append one message", "sqlite", [50.0, 50.0, 50.0]),
            table("forget_all of the subject", "sqlite", [1e3, 1e4, 1e5]),
            table("append one message", "redis", [80.0, 80.0, 80.0]),
        ];
        let plots = super::plots(&tables);
        let backends: Vec<&str> = plots.iter().map(|(b, _)| b.as_str()).collect();
        assert_eq!(backends, ["sqlite", "redis"]);
        let (_, sqlite) = &plots[0];
        assert_eq!(sqlite.matches("<polyline").count(), 2);
        assert!(sqlite.contains("forget_all of the subject (slope 1.00)"));
        assert!(sqlite.contains("append one message (slope 0.00)"));
        assert!(sqlite.starts_with("<svg") && sqlite.ends_with("</svg>\n"));
    }
}
