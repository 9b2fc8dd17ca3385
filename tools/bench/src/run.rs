//! What the `bench` and `bench-libsql` binaries share: the arguments every run takes, the
//! corpus as the workloads read it, the workloads every backend runs, and writing the report.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mnemix_core::MemoryBackend;

use crate::data::{self, Matrix, DIMS};
use crate::voltagent::VoltAgent;
use crate::workloads::{self, RawDriver, Sizes};
use crate::{Report, Table};

/// The workloads run when none are named.
pub const ALL_WORKLOADS: &str = "W1,W2,W3,W4,W5,W7,W8,W9,W10,W11";

/// The arguments of every benchmark binary.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Workloads to run (comma-separated): W1 append, W2 load tail, W3 list conversations,
    /// W4 lexical recall, W5 and W6 vector search, W7 vector ingest, W8 forget_all, W9 working
    /// memory, W10 agent turn, W11 the inspector's pages (SQLite); C1 cost curves (not run
    /// unless named).
    #[arg(long, value_delimiter = ',', default_value = ALL_WORKLOADS)]
    pub workload: Vec<String>,
    /// Small sizes, for a smoke test: the figures mean little.
    #[arg(long)]
    pub quick: bool,
    /// C1's cost curves up to 10⁶ records per subject (else 10⁵).
    #[arg(long)]
    pub scale: bool,
    /// The data folder `cargo xtask bench` fills (corpus and embeddings).
    #[arg(long, default_value = "target/bench-data")]
    pub data: PathBuf,
    /// Where BENCHMARKS.md and benchmarks.json go.
    #[arg(long, default_value = "target/bench-report")]
    pub out: PathBuf,
    /// The command recorded in the report.
    #[arg(long, default_value = "cargo xtask bench")]
    pub command: String,
}

impl Common {
    /// The sizes `--quick` picks.
    pub fn sizes(&self) -> Sizes {
        if self.quick {
            Sizes::quick()
        } else {
            Sizes::full()
        }
    }

    /// Whether workload `w` (`W1`, …) was asked for.
    pub fn wants(&self, w: &str) -> bool {
        self.workload.iter().any(|x| x.eq_ignore_ascii_case(w))
    }

    /// Reads the corpus, and the embeddings when a vector workload runs.
    pub fn texts(&self) -> Result<Texts, String> {
        let sizes = self.sizes();
        let paragraphs = data::paragraphs(&self.data)?;
        let sentences = data::sentences(&paragraphs);
        let queries = sentences[sentences.len() - sizes.queries..].to_vec();
        let vectors = if ["W5", "W7", "W8"].iter().any(|w| self.wants(w)) {
            Some(vectors_of(&self.data, &sizes)?)
        } else {
            None
        };
        Ok(Texts {
            paragraphs,
            sentences,
            queries,
            ingest: vectors.as_ref().map(|(base, _)| base.clone()),
            vectors,
        })
    }

    /// Writes `BENCHMARKS.md` and `benchmarks.json` into `--out`, and C1's plots (one SVG per
    /// backend and axis, `benchmarks/c1-<backend>.svg` and `benchmarks/c1-tenants-<backend>.svg`,
    /// shown under the report); returns the Markdown.
    pub fn write(&self, report: &Report) -> Result<String, String> {
        std::fs::create_dir_all(&self.out).map_err(|e| e.to_string())?;
        let mut markdown = report.markdown();
        if let Some(slopes) = crate::curves::slopes(&report.tables) {
            let _ = write!(
                markdown,
                "\n## C1 slopes\n\nThe slope of log(cost) on log(size) of each hot path, by records its subject holds / by tenants its store holds (0: does not grow; 1: grows as fast as the size). A tenant slope in bold grows with the store rather than with the tenant.\n\n{slopes}"
            );
        }
        let plots = crate::curves::plots(&report.tables);
        if !plots.is_empty() {
            let dir = self.out.join("benchmarks");
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            markdown.push_str("\n## C1 cost curves, plotted\n");
            for plot in plots {
                std::fs::write(dir.join(&plot.file), &plot.svg).map_err(|e| e.to_string())?;
                let _ = write!(
                    markdown,
                    "\n![{}](benchmarks/{})\n",
                    plot.caption, plot.file
                );
            }
        }
        std::fs::write(self.out.join("BENCHMARKS.md"), &markdown).map_err(|e| e.to_string())?;
        std::fs::write(
            self.out.join("benchmarks.json"),
            serde_json::to_string_pretty(report).expect("report serializes"),
        )
        .map_err(|e| e.to_string())?;
        Ok(markdown)
    }
}

/// The corpus as the workloads use it.
pub struct Texts {
    /// Debian descriptions: messages and working-memory documents.
    pub paragraphs: Vec<String>,
    /// Their sentences: facts.
    pub sentences: Vec<String>,
    /// Held-out sentences: recall queries.
    pub queries: Vec<String>,
    /// The embeddings (base, held-out queries), when W5, W7 or W8 runs.
    pub vectors: Option<(Arc<Matrix>, Arc<Matrix>)>,
    /// The rows W7 ingests: the whole base, unless a backend's binary takes fewer (and says
    /// so in the table's config).
    pub ingest: Option<Arc<Matrix>>,
}

/// The first `sizes.vectors` embeddings, and the held-out queries after them.
fn vectors_of(data_dir: &Path, sizes: &Sizes) -> Result<(Arc<Matrix>, Arc<Matrix>), String> {
    let all = data::embeddings(data_dir, sizes.vectors + sizes.queries)?;
    let (base, queries) = all.data.split_at(sizes.vectors * DIMS);
    Ok((
        Arc::new(Matrix {
            data: base.to_vec(),
        }),
        Arc::new(Matrix {
            data: queries.to_vec(),
        }),
    ))
}

/// W1, W2, W3, W4, W9, W10, C1, W7 and W8 on one backend: ours against its raw driver (and the
/// VoltAgent peer where given).
pub async fn common(
    args: &Common,
    backend: &str,
    ours: &Arc<dyn MemoryBackend>,
    raws: &[Arc<dyn RawDriver>],
    peer: Option<&Arc<VoltAgent>>,
    texts: &Texts,
) -> Vec<Table> {
    let (raws, alternatives): (Vec<_>, Vec<_>) = raws
        .iter()
        .cloned()
        .partition(|raw| !raw.alternative_ranking());
    let raw = &raws[0];
    let sizes = &args.sizes();
    let mut tables = Vec::new();
    if args.wants("W1") {
        eprintln!("bench: {backend} W1");
        tables
            .extend(workloads::append(sizes, backend, ours, &raws, peer, &texts.paragraphs).await);
    }
    if args.wants("W2") {
        eprintln!("bench: {backend} W2");
        tables.extend(
            workloads::load_tail(sizes, backend, ours, &raws, peer, &texts.paragraphs).await,
        );
    }
    if args.wants("W3") {
        eprintln!("bench: {backend} W3");
        tables.extend(workloads::list_conversations(sizes, backend, ours, raw).await);
    }
    if args.wants("W4") {
        eprintln!("bench: {backend} W4");
        let sides: Vec<_> = raws.iter().chain(&alternatives).cloned().collect();
        tables.extend(
            workloads::recall(
                sizes,
                backend,
                ours,
                &sides,
                &texts.sentences,
                &texts.queries,
            )
            .await,
        );
    }
    if args.wants("W9") {
        eprintln!("bench: {backend} W9");
        tables.extend(
            workloads::working_memory(sizes, backend, ours, &raws, peer, &texts.paragraphs).await,
        );
    }
    if args.wants("W10") {
        eprintln!("bench: {backend} W10");
        tables.extend(workloads::agent_turn(sizes, backend, ours, &raws, &texts.paragraphs).await);
    }
    if args.wants("C1") {
        eprintln!("bench: {backend} C1");
        // Tenants first: each stage is measured right after the store's fill, so what the
        // writes leave behind (a checkpoint, a compaction) falls on the larger stages — it can
        // only make a path look as if it grew with the store, never hide that it does.
        tables.extend(
            crate::curves::tenant_curves(
                backend,
                ours,
                &crate::curves::tenant_counts(args.quick),
                sizes.rounds,
                &texts.sentences,
            )
            .await,
        );
        let curve_sizes = crate::curves::sizes(args.quick, args.scale);
        tables.extend(
            crate::curves::subject_curves(
                backend,
                ours,
                &curve_sizes,
                sizes.rounds,
                &texts.sentences,
            )
            .await,
        );
    }
    if args.wants("W7") {
        eprintln!("bench: {backend} W7");
        let rows = texts.ingest.as_ref().expect("loaded for W7");
        tables.push(crate::vectors::ingest(sizes, backend, ours, rows).await);
    }
    if args.wants("W8") {
        eprintln!("bench: {backend} W8");
        let vectors = texts.vectors.as_ref().map(|(base, _)| base.as_ref());
        tables.extend(workloads::forget_all(sizes, backend, ours, &texts.sentences, vectors).await);
    }
    tables
}

/// CPU, cores, memory and OS of this machine, for the report.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse::<u64>().ok())
        })
        .map_or_else(String::new, |kib| {
            format!(", {:.0} GiB", kib as f64 / 1_048_576.0)
        });
    let os = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|o| {
            o.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|n| n.trim_matches('"').to_owned())
        })
        .unwrap_or_default();
    format!("{cpu}, {cores} cores{memory}, {os}")
}
