//! Moving memory between backends: for every ordered pair of backends (in-memory, SQLite,
//! PostgreSQL, Redis), one of every kind of record is seeded on the source, copied with
//! [`copy`], and the target must then hold exactly the source's records unit by unit (checked
//! by reading both, and by [`verify`]), every tenant's records under that tenant only, and
//! nothing for a tenant that never wrote. The same records also go through the export file
//! format ([`ExportReader`]) unchanged.
//!
//! libSQL is the one backend missing: it cannot share a binary with sqlx's SQLite (two SQLite
//! libraries); the CLI's libSQL build copies through the same [`copy`].

use std::fmt::Write as _;
use std::sync::Arc;

use mnemix::transfer::{as_restored_by, Record};
use mnemix::transfer::{copy, plan, verify, ExportHeader, ExportReader, ExportWriter};
use mnemix::{ManualClock, MemoryBackend, OpenOptions, Scope, Subject};
use mnemix_conformance::support::seed_every_kind;
use mnemix_conformance::Ctx;
use mnemix_tests::{with_param, Server};

const TESTS: &str = "copy between every pair of backends";

/// The backends this run reaches, each opened on `clock`.
async fn backends(
    clock: &ManualClock,
    dir: &std::path::Path,
) -> Vec<(&'static str, Arc<dyn MemoryBackend>)> {
    let mut urls = vec![
        ("memory", "memory://".to_owned()),
        (
            "sqlite",
            format!("sqlite://{}", dir.join("transfer.db").display()),
        ),
    ];
    // Finding a server may start a container through testcontainers' blocking runner.
    let (postgres, redis) =
        tokio::task::spawn_blocking(|| (Server::Postgres.url(TESTS), Server::Redis.url(TESTS)))
            .await
            .expect("the lookup task");
    if let Some(url) = postgres {
        urls.push(("postgres", with_param(&url, "schema", "transfer")));
    }
    if let Some(url) = redis {
        urls.push(("redis", with_param(&url, "prefix", "transfer")));
    }
    let mut opened = Vec::new();
    for (name, url) in urls {
        let store = OpenOptions::new(&url)
            .clock(Arc::new(clock.clone()))
            .open()
            .await
            .unwrap_or_else(|e| panic!("cannot open {name} ({url}): {e}"));
        opened.push((name, store.backend()));
    }
    opened
}

/// Every record of the namespace, unit by unit, as `source` holds them.
async fn units_of(store: &dyn MemoryBackend, ctx: &Ctx) -> Vec<(String, Vec<Record>)> {
    let mut units = Vec::new();
    for unit in plan(store, Some(ctx.namespace())).await.expect("plan") {
        let records = unit.export(store).await.expect("export unit");
        units.push((unit.to_string(), records));
    }
    units
}

/// The records written as an export file (with its trailer) and read back.
fn through_a_file(records: &[Record]) -> Vec<Record> {
    let header = ExportHeader::new("test", mnemix::Timestamp::from_millis(0));
    let mut writer = ExportWriter::new(Vec::new(), &header).expect("the header is written");
    for record in records {
        writer.write(record).expect("a record is written");
    }
    let file = writer.finish().expect("the trailer is written");
    ExportReader::new(file.as_slice())
        .expect("the header reads back")
        .collect::<Result<_, _>>()
        .expect("every record reads back")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copy_between_every_pair_keeps_every_record_and_every_boundary() {
    let clock = ManualClock::default();
    let dir = std::env::temp_dir().join(mnemix_tests::unique("transfer"));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let backends = backends(&clock, &dir).await;
    let mut matrix = String::from("source → target: records copied\n");
    for (source_name, source) in &backends {
        let ctx = Ctx::new(Arc::clone(source), clock.clone());
        seed_every_kind(&ctx).await;
        let expected = units_of(source.as_ref(), &ctx).await;
        let all: Vec<Record> = expected.iter().flat_map(|(_, r)| r.clone()).collect();
        assert!(all.len() > 20, "{source_name}: the seed wrote every kind");
        assert_eq!(through_a_file(&all), all, "{source_name}: the export file");
        let stranger = Scope::from_parts(
            ctx.namespace().clone(),
            Some(Subject::new(mnemix_tests::unique("stranger")).unwrap()),
        );
        for (target_name, target) in &backends {
            if target_name == source_name {
                continue;
            }
            let pair = format!("{source_name} → {target_name}");
            let report = copy(
                source.as_ref(),
                target.as_ref(),
                Some(ctx.namespace()),
                |_, _| {},
            )
            .await
            .unwrap_or_else(|e| panic!("{pair}: copy: {e}"));
            assert_eq!(report.records, all.len() as u64, "{pair}: records copied");
            let mismatches = verify(source.as_ref(), target.as_ref(), Some(ctx.namespace()))
                .await
                .unwrap_or_else(|e| panic!("{pair}: verify: {e}"));
            assert!(mismatches.is_empty(), "{pair}: verify found {mismatches:?}");
            let copied = units_of(target.as_ref(), &ctx).await;
            assert_eq!(
                copied.iter().map(|(u, _)| u).collect::<Vec<_>>(),
                expected.iter().map(|(u, _)| u).collect::<Vec<_>>(),
                "{pair}: the same owners"
            );
            // Facts are written by the copier, their first account kept.
            let copier = target.writer().unwrap_or_default().written_by;
            let expected: Vec<(String, Vec<Record>)> = expected
                .iter()
                .map(|(unit, records)| (unit.clone(), as_restored_by(records.clone(), &copier)))
                .collect();
            for ((unit, got), (_, want)) in copied.iter().zip(&expected) {
                assert_eq!(got, want, "{pair}: unit {unit}");
            }
            assert!(
                target.export_scope(&stranger).await.unwrap().is_empty(),
                "{pair}: a subject that never wrote owns nothing"
            );
            // A second copy over the first changes nothing (restore replaces by identity).
            copy(
                source.as_ref(),
                target.as_ref(),
                Some(ctx.namespace()),
                |_, _| {},
            )
            .await
            .unwrap_or_else(|e| panic!("{pair}: second copy: {e}"));
            assert_eq!(
                units_of(target.as_ref(), &ctx).await,
                expected,
                "{pair}: copied twice"
            );
            let _ = writeln!(matrix, "{pair}: {}", report.records);
        }
    }
    eprintln!("{TESTS}:\n{matrix}");
    let _ = std::fs::remove_dir_all(&dir);
}
