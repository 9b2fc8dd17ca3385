//! `export`, `import`, `copy` and `verify`: moving every record between stores and files.
//!
//! The file format is JSON Lines: an [`ExportHeader`] line, then one [`Record`] per line, unit
//! by unit (each namespace's collections and cache entries, then each scope's records), so an
//! import restores parents before children, then the [`ExportTrailer`](mnemix_core::transfer::ExportTrailer)
//! (record count and SHA-256).
//!
//! An import reads and checks the whole file (every record, each unit's batch, the trailer)
//! before it writes anything, then restores one unit per transaction: a file that is cut,
//! changed or invalid anywhere restores nothing, and a failure of the target midway leaves
//! whole units restored (running the import again completes it).

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read as _, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use indicatif::{ProgressBar, ProgressStyle};
use mnemix_core::transfer::Record;
use mnemix_core::transfer::{
    check_batch, copy_units, plan, verify_units, ExportHeader, ExportReader, ExportWriter,
    Mismatch, Unit,
};
use mnemix_core::{MemoryBackend, Namespace};

use crate::open::{open, open_existing, redacted};
use crate::ui;

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
    let store = open_existing(url).await?;
    let only = namespace(only)?;
    let units = plan(store.as_ref(), only.as_ref()).await?;
    let sink: Box<dyn Write> = if output == Path::new("-") {
        Box::new(io::stdout().lock())
    } else {
        Box::new(
            File::create(output).with_context(|| format!("cannot create {}", output.display()))?,
        )
    };
    let header = ExportHeader::new(store.backend_name(), mnemix_core::Timestamp::now());
    let mut out = ExportWriter::new(BufWriter::new(sink), &header)?;
    let progress = bar(units.len() as u64, "export");
    for unit in &units {
        progress.set_message(unit.to_string());
        for record in unit.export(store.as_ref()).await? {
            out.write(&record)?;
        }
        progress.inc(1);
    }
    let records = out.records();
    out.finish()?;
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

/// Reads an export (`-` is stdin), checks all of it, then restores it into `url` one unit per
/// transaction. With `unverified`, a file whose trailer is missing or does not match (cut or
/// changed) restores the records it holds.
pub async fn import(url: &str, input: &Path, unverified: bool) -> Result<()> {
    let input = if input == Path::new("-") {
        let mut held = Vec::new();
        io::stdin().lock().read_to_end(&mut held)?;
        Input::Held(held)
    } else {
        Input::File(input)
    };
    let open_input = || input.reader(unverified);

    let (reader, size) = open_input()?;
    let progress = bar(size, "check");
    progress.set_message(format!("bytes, a {} export", reader.header().backend));
    let mut checked = 0u64;
    for_each_unit(reader, |batch, bytes| {
        check_batch(&batch)?;
        checked += batch.len() as u64;
        progress.set_position(bytes);
        Ok(())
    })?;
    progress.finish_and_clear();

    let store = open(url).await?;
    let (reader, size) = open_input()?;
    let progress = bar(size, "import");
    let mut reader = UnitBatches::new(reader);
    let mut records = 0u64;
    while let Some(batch) = reader.next_batch()? {
        records += store.restore(batch).await?;
        progress.set_position(reader.bytes_read());
    }
    progress.finish_and_clear();
    debug_assert_eq!(records, checked);
    ui::good(&format!(
        "imported {records} records from {} into {}",
        input.name(),
        redacted(url)
    ));
    Ok(())
}

/// An export that is read twice (checked, then restored): a file is opened again, standard
/// input is held in memory.
enum Input<'a> {
    File(&'a Path),
    Held(Vec<u8>),
}

/// An export's reader over a file or held bytes.
type Export<'a> = ExportReader<Box<dyn BufRead + 'a>>;

impl Input<'_> {
    /// A reader from the start, and the bytes there are to read (0 when unknown).
    fn reader(&self, unverified: bool) -> Result<(Export<'_>, u64)> {
        let (source, size): (Box<dyn BufRead>, u64) = match self {
            Self::Held(held) => (Box::new(held.as_slice()), held.len() as u64),
            Self::File(path) => {
                let file =
                    File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
                let size = file.metadata().map_or(0, |m| m.len());
                (Box::new(BufReader::new(file)), size)
            }
        };
        let reader = ExportReader::new(source)?;
        Ok((
            if unverified {
                reader.accept_unverified()
            } else {
                reader
            },
            size,
        ))
    }

    fn name(&self) -> String {
        match self {
            Self::File(path) => path.display().to_string(),
            Self::Held(_) => "standard input".to_owned(),
        }
    }
}

/// Calls `each` with every unit's records in turn (and the bytes read so far).
fn for_each_unit<R: BufRead>(
    reader: ExportReader<R>,
    mut each: impl FnMut(Vec<Record>, u64) -> mnemix_core::Result<()>,
) -> Result<()> {
    let mut units = UnitBatches::new(reader);
    while let Some(batch) = units.next_batch()? {
        each(batch, units.bytes_read())?;
    }
    Ok(())
}

/// An export's records, one unit (a namespace's own records, or one scope's) at a time.
struct UnitBatches<R> {
    reader: ExportReader<R>,
    /// The first record of the next unit, read while ending the last.
    next: Option<Record>,
}

impl<R: BufRead> UnitBatches<R> {
    fn new(reader: ExportReader<R>) -> Self {
        Self { reader, next: None }
    }

    fn bytes_read(&self) -> u64 {
        self.reader.bytes_read()
    }

    fn next_batch(&mut self) -> mnemix_core::Result<Option<Vec<Record>>> {
        let mut batch: Vec<Record> = self.next.take().into_iter().collect();
        for record in self.reader.by_ref() {
            let record = record?;
            let same_unit = batch.last().is_none_or(|last| {
                last.scope() == record.scope() && last.namespace() == record.namespace()
            });
            if !same_unit {
                self.next = Some(record);
                return Ok(Some(batch));
            }
            batch.push(record);
        }
        Ok((!batch.is_empty()).then_some(batch))
    }
}

/// Copies every record from one URL to another, one unit per transaction; then, with
/// `verify`, compares both sides unit by unit.
pub async fn copy(from: &str, to: &str, only: Option<&str>, verify: bool) -> Result<()> {
    let (source, target) = (open_existing(from).await?, open(to).await?);
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
    let (source, target) = (open_existing(from).await?, open_existing(to).await?);
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
