//! The benchmark harness: every figure is a ratio measured in one run.
//!
//! A workload has *sides* — ours, the raw driver doing the same statements, a peer — each a
//! [`Side`] that runs one round of operations and reports each operation's latency.
//! [`compare`] runs the sides interleaved (round `r` starts with side `r mod n`), so drift of
//! the machine (caches, frequency, a neighbour) spreads over every side instead of favouring
//! one; it reports per side the median over rounds of the time per operation, p50/p99 over all
//! operations, throughput, and the ratio to the reference side. [`Report`] renders the tables
//! as Markdown (`BENCHMARKS.md`) and JSON.
//!
//! No test asserts a time: tests check the arithmetic and the interleaving, never speed.
//!
//! This crate links no database driver: the backends' sides live in `mnemix-bench-backends`
//! (SQLite, PostgreSQL, Redis, with the `bench` and `bench-data` binaries) and
//! `mnemix-bench-libsql` (libSQL, whose own SQLite must not meet sqlx's in one binary).

pub mod curves;
pub mod data;
pub mod run;
pub mod vectors;
pub mod voltagent;
pub mod workloads;

use std::fmt::Write as _;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// One round of a side: how long each operation took, and how long the round took in all.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Round {
    /// Per-operation latencies (one entry per operation; a batch counts as one operation).
    pub latencies: Vec<Duration>,
    /// Wall time of the round's operations (setup excluded). With concurrent clients it is
    /// less than the sum of the latencies: time per operation is `elapsed / operations`.
    pub elapsed: Duration,
}

impl Round {
    /// A round of operations run one after another: its wall time is their sum.
    pub fn sequential(latencies: Vec<Duration>) -> Self {
        Self {
            elapsed: latencies.iter().sum(),
            latencies,
        }
    }
}

/// One side of a comparison.
#[async_trait]
pub trait Side: Send {
    /// The name in the table (`ours`, `raw sqlx`, `VoltAgent`, …).
    fn name(&self) -> &str;
    /// Runs one round of the workload.
    async fn round(&mut self) -> Round;
}

/// The figures of one side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideFigures {
    /// The side's name.
    pub name: String,
    /// Median over rounds of the wall time per operation (round time ÷ operations), in
    /// microseconds: the inverse of throughput, whatever the concurrency.
    pub median_us: f64,
    /// Median latency of single operations over all rounds, in microseconds.
    pub p50_us: f64,
    /// 99th-percentile latency of single operations, in microseconds.
    pub p99_us: f64,
    /// Operations per second at the median.
    pub ops_per_sec: f64,
    /// This side's median ÷ the reference's (1.0 for the reference itself).
    pub ratio: f64,
    /// Operations measured in all.
    pub operations: usize,
}

/// A workload's table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Table {
    /// Workload id and description (`W2 load tail: last 50 of a 100k-message thread`).
    pub workload: String,
    /// Backend, sizes, pool and batch settings.
    pub config: String,
    /// The side the ratios divide by.
    pub reference: String,
    /// One row per side, in the order given.
    pub sides: Vec<SideFigures>,
    /// Figures that are not per-operation times (recall@10, bandwidth fraction, cost ratios).
    pub notes: Vec<String>,
}

/// The nearest-rank percentile (`q` in 0–1) of sorted values; zero for none.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median of values (the mean of the middle two for an even count); zero for none.
pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        f64::midpoint(values[mid - 1], values[mid])
    } else {
        values[mid]
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Runs `rounds` rounds of every side, interleaved, and returns the table; `reference` is the
/// index of the side the ratios divide by.
pub async fn compare(
    workload: impl Into<String>,
    config: impl Into<String>,
    rounds: usize,
    reference: usize,
    sides: &mut [&mut dyn Side],
) -> Table {
    assert!(reference < sides.len(), "the reference is one of the sides");
    let mut per_round: Vec<Vec<f64>> = vec![Vec::new(); sides.len()];
    let mut all: Vec<Vec<Duration>> = vec![Vec::new(); sides.len()];
    for round in 0..rounds {
        for offset in 0..sides.len() {
            let index = (round + offset) % sides.len();
            let Round { latencies, elapsed } = sides[index].round().await;
            if latencies.is_empty() {
                continue;
            }
            per_round[index].push(micros(elapsed) / latencies.len() as f64);
            all[index].extend(latencies);
        }
    }
    let medians: Vec<f64> = per_round.iter_mut().map(|r| median(r)).collect();
    let figures = sides
        .iter()
        .enumerate()
        .map(|(i, side)| {
            all[i].sort_unstable();
            SideFigures {
                name: side.name().to_owned(),
                median_us: medians[i],
                p50_us: micros(percentile(&all[i], 0.50)),
                p99_us: micros(percentile(&all[i], 0.99)),
                ops_per_sec: if medians[i] > 0.0 {
                    1e6 / medians[i]
                } else {
                    0.0
                },
                ratio: if medians[reference] > 0.0 {
                    medians[i] / medians[reference]
                } else {
                    f64::NAN
                },
                operations: all[i].len(),
            }
        })
        .collect();
    Table {
        workload: workload.into(),
        config: config.into(),
        reference: sides[reference].name().to_owned(),
        sides: figures,
        notes: Vec::new(),
    }
}

/// The peak resident set of this process (`VmHWM`), in bytes; `None` off Linux.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Every table of a run, with the machine and the command that made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The exact command.
    pub command: String,
    /// CPU, cores, memory, OS.
    pub machine: String,
    /// Peak RSS of the run, in bytes.
    pub peak_rss_bytes: Option<u64>,
    /// The tables, in run order.
    pub tables: Vec<Table>,
    /// Backends or workloads that did not run, and why.
    pub skipped: Vec<String>,
}

impl Report {
    /// `BENCHMARKS.md`: a table per workload.
    pub fn markdown(&self) -> String {
        let mut out = String::from("# Benchmarks\n\n");
        let _ = writeln!(out, "Command: `{}`  ", self.command);
        let _ = writeln!(out, "Machine: {}  ", self.machine);
        if let Some(rss) = self.peak_rss_bytes {
            let _ = writeln!(out, "Peak RSS: {:.1} MiB", rss as f64 / 1_048_576.0);
        }
        for skipped in &self.skipped {
            let _ = writeln!(out, "\nSkipped: {skipped}");
        }
        for table in &self.tables {
            let _ = write!(
                out,
                "\n## {}\n\n{}\n\n| side | median µs/op | p50 µs | p99 µs | ops/s | ÷ {} |\n|---|---:|---:|---:|---:|---:|\n",
                table.workload, table.config, table.reference
            );
            for s in &table.sides {
                let _ = writeln!(
                    out,
                    "| {} | {:.1} | {:.1} | {:.1} | {:.0} | {:.2} |",
                    s.name, s.median_us, s.p50_us, s.p99_us, s.ops_per_sec, s.ratio
                );
            }
            if !table.notes.is_empty() {
                out.push('\n');
            }
            for note in &table.notes {
                let _ = writeln!(out, "- {note}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let sorted: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(percentile(&sorted, 0.50), Duration::from_micros(50));
        assert_eq!(percentile(&sorted, 0.99), Duration::from_micros(99));
        assert_eq!(percentile(&sorted, 1.0), Duration::from_micros(100));
        assert_eq!(percentile(&sorted, 0.0), Duration::from_micros(1));
        assert_eq!(percentile(&sorted[..1], 0.99), Duration::from_micros(1));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
        assert!((median(&mut [3.0, 1.0, 2.0]) - 2.0).abs() < f64::EPSILON);
        assert!((median(&mut [4.0, 1.0, 2.0, 3.0]) - 2.5).abs() < f64::EPSILON);
    }

    /// A side with scripted latencies that records when it ran.
    struct Scripted {
        name: &'static str,
        latency: Duration,
        log: std::sync::Arc<std::sync::Mutex<Vec<&'static str>>>,
    }

    #[async_trait]
    impl Side for Scripted {
        fn name(&self) -> &str {
            self.name
        }
        async fn round(&mut self) -> Round {
            self.log.lock().unwrap().push(self.name);
            Round::sequential(vec![self.latency; 4])
        }
    }

    #[tokio::test]
    async fn sides_alternate_and_ratios_divide_by_the_reference() {
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut ours = Scripted {
            name: "ours",
            latency: Duration::from_micros(30),
            log: log.clone(),
        };
        let mut raw = Scripted {
            name: "raw",
            latency: Duration::from_micros(20),
            log: log.clone(),
        };
        let table = compare("W0", "test", 3, 1, &mut [&mut ours, &mut raw]).await;
        assert_eq!(
            *log.lock().unwrap(),
            ["ours", "raw", "raw", "ours", "ours", "raw"],
            "each round starts with the next side"
        );
        assert_eq!(table.reference, "raw");
        let [ours, raw] = &table.sides[..] else {
            panic!("two sides")
        };
        assert!((ours.ratio - 1.5).abs() < 1e-9, "{ours:?}");
        assert!((raw.ratio - 1.0).abs() < 1e-9);
        assert!((ours.median_us - 30.0).abs() < 1e-9);
        assert!((ours.ops_per_sec - 1e6 / 30.0).abs() < 1e-6);
        assert_eq!(ours.operations, 12);
        let markdown = Report {
            command: "cargo xtask bench --quick".into(),
            machine: "test".into(),
            peak_rss_bytes: peak_rss_bytes(),
            tables: vec![table],
            skipped: Vec::new(),
        }
        .markdown();
        assert!(
            markdown.contains("| ours | 30.0 | 30.0 | 30.0 | 33333 | 1.50 |"),
            "{markdown}"
        );
    }
}
