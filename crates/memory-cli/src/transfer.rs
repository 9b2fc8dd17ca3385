//! `export`, `import`, `copy` and `verify`: moving every record between stores and files.
//!
//! The file format is JSON Lines: an [`ExportHeader`] line, then one [`Record`] per line, unit
//! by unit (each namespace's collections and cache entries, then each scope's records), so an
//! import restores parents before children.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use indicatif::{ProgressBar, ProgressStyle};
use memory_core::transfer::{
    copy_units, plan, verify_units, ExportHeader, ExportReader, Mismatch, Unit,
};
use memory_core::{MemoryBackend, Namespace, Record};

use crate::open::{open, redacted};
use crate::ui;

/// Records restored per transaction on import; a scope boundary also ends a batch.
const IMPORT_BATCH: usize = 5_000;

fn bar(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "  {{spinner}} {what} [{{bar:30}}] {{pos}}/{{len}} {{msg}} ({{elapsed}})"
        ))
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

fn namespace(name: Option<&str>) -> Result<Option<Namespace>> {
    name.map(Namespace::new)
        .transpose()
        .context("bad --namespace")
}

/// Writes every record of `url` (or of one namespace) to `output` (`-` is stdout).
pub async fn export(url: &str, only: Option<&str>, output: &Path) -> Result<()> {
    let store = open(url).await?;
    let only = namespace(only)?;
    let units = plan(store.as_ref(), only.as_ref()).await?;
    let sink: Box<dyn Write> = if output == Path::new("-") {
        Box::new(io::stdout().lock())
    } else {
        Box::new(
            File::create(output).with_context(|| format!("cannot create {}", output.display()))?,
        )
    };
    let mut out = BufWriter::new(sink);
    let header = ExportHeader::new(store.backend_name(), memory_core::Timestamp::now());
    serde_json::to_writer(&mut out, &header)?;
    out.write_all(b"\n")?;
    let progress = bar(units.len() as u64, "export");
    let mut records = 0u64;
    for unit in &units {
        progress.set_message(unit.to_string());
        for record in unit.export(store.as_ref()).await? {
            serde_json::to_writer(&mut out, &record)?;
            out.write_all(b"\n")?;
            records += 1;
        }
        progress.inc(1);
    }
    out.flush()?;
    progress.finish_and_clear();
    if output != Path::new("-") {
        ui::good(&format!(
            "exported {records} records in {} units from {} to {}",
            units.len(),
            redacted(url),
            output.display()
        ));
    }
    Ok(())
}

/// Reads an export (`-` is stdin) and restores it into `url`.
pub async fn import(url: &str, input: &Path) -> Result<()> {
    let store = open(url).await?;
    let (source, size): (Box<dyn BufRead>, Option<u64>) = if input == Path::new("-") {
        (Box::new(BufReader::new(io::stdin().lock())), None)
    } else {
        let file = File::open(input).with_context(|| format!("cannot open {}", input.display()))?;
        let size = file.metadata().ok().map(|m| m.len());
        (Box::new(BufReader::new(file)), size)
    };
    let mut reader = ExportReader::new(source)?;
    let progress = bar(size.unwrap_or(0), "import");
    progress.set_message(format!("bytes, from a {} export", reader.header().backend));
    let mut batch: Vec<Record> = Vec::new();
    let mut records = 0u64;
    while let Some(record) = reader.next() {
        let record = record?;
        progress.set_position(reader.bytes_read());
        let unit_changes = batch.last().is_some_and(|last| {
            last.scope() != record.scope() || last.namespace() != record.namespace()
        });
        if unit_changes || batch.len() >= IMPORT_BATCH {
            records += store.restore(std::mem::take(&mut batch)).await?;
        }
        batch.push(record);
    }
    records += store.restore(batch).await?;
    progress.finish_and_clear();
    ui::good(&format!(
        "imported {records} records from {} into {}",
        input.display(),
        redacted(url)
    ));
    Ok(())
}

/// Copies every record from one URL to another, one unit per transaction; then, with
/// `verify`, compares both sides unit by unit.
pub async fn copy(from: &str, to: &str, only: Option<&str>, verify: bool) -> Result<()> {
    let (source, target) = (open(from).await?, open(to).await?);
    let units = plan(source.as_ref(), namespace(only)?.as_ref()).await?;
    let progress = bar(units.len() as u64, "copy");
    let report = copy_units(source.as_ref(), target.as_ref(), &units, |unit, _| {
        progress.set_message(unit.to_string());
        progress.inc(1);
    })
    .await?;
    progress.finish_and_clear();
    ui::good(&format!(
        "copied {} records in {} units from {} to {}",
        report.records,
        report.units,
        redacted(from),
        redacted(to)
    ));
    if verify {
        compare(source.as_ref(), target.as_ref(), &units).await?;
    }
    Ok(())
}

/// Compares two stores unit by unit without writing.
pub async fn verify(from: &str, to: &str, only: Option<&str>) -> Result<()> {
    let (source, target) = (open(from).await?, open(to).await?);
    let units = plan(source.as_ref(), namespace(only)?.as_ref()).await?;
    compare(source.as_ref(), target.as_ref(), &units).await
}

/// Counts and content hashes of every unit on both sides; an error when any differs.
async fn compare(
    source: &dyn MemoryBackend,
    target: &dyn MemoryBackend,
    units: &[Unit],
) -> Result<()> {
    let progress = bar(units.len() as u64, "verify");
    let mut records = 0;
    let mismatches = verify_units(source, target, units, |unit, held| {
        progress.set_message(unit.to_string());
        progress.inc(1);
        records += held;
    })
    .await?;
    progress.finish_and_clear();
    if mismatches.is_empty() {
        ui::good(&format!(
            "verified {} units, {records} records: every count and SHA-256 matches",
            units.len()
        ));
        return Ok(());
    }
    for Mismatch {
        unit,
        source: expected,
        target: found,
    } in &mismatches
    {
        ui::refused(&format!("{unit} differs"));
        let kinds: BTreeSet<_> = expected.counts.keys().chain(found.counts.keys()).collect();
        for kind in kinds {
            let (a, b) = (
                expected.counts.get(kind).copied().unwrap_or(0),
                found.counts.get(kind).copied().unwrap_or(0),
            );
            if a != b {
                ui::line(&format!("  {kind}: {a} in the source, {b} in the target"));
            }
        }
        if expected.counts == found.counts {
            ui::line("  same counts, different content");
        }
    }
    bail!(
        "{} of {} units differ between the stores",
        mismatches.len(),
        units.len()
    )
}
