//! A populated SQLite database copied sqlite → memory → sqlite: every record of every unit is
//! equal on all three stores, and reads on the final copy answer as on the source.

use std::sync::Arc;

use mnemix_conformance::support::seed_every_kind;
use mnemix_conformance::Ctx;
use mnemix_core::transfer::{copy, plan, verify};
use mnemix_core::{
    Clock, FactStore, InMemoryBackend, LoadOptions, ManualClock, MemoryBackend, RecallQuery,
    TransferStore,
};
use mnemix_sqlite::SqliteStore;

async fn sqlite(dir: &tempfile::TempDir, name: &str, clock: &ManualClock) -> Arc<SqliteStore> {
    let store = SqliteStore::builder()
        .path(dir.path().join(name))
        .clock(Arc::new(clock.clone()) as Arc<dyn Clock>)
        .open()
        .await
        .expect("open sqlite");
    Arc::new(store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_to_memory_to_sqlite_keeps_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let source = sqlite(&dir, "source.db", &clock).await;
    // Two namespaces, each with two subjects and the shared scope populated.
    let mut threads = Vec::new();
    for _ in 0..2 {
        let ctx = Ctx::new(source.clone() as Arc<dyn MemoryBackend>, clock.clone());
        let thread = seed_every_kind(&ctx).await;
        threads.push((ctx.scope().clone(), thread));
    }

    let middle = InMemoryBackend::with_clock(Arc::new(clock.clone()));
    let target = sqlite(&dir, "target.db", &clock).await;
    let there = copy(source.as_ref(), &middle, None, |_, _| {})
        .await
        .unwrap();
    let back = copy(&middle, target.as_ref(), None, |_, _| {})
        .await
        .unwrap();
    assert_eq!(there, back, "the same units and records each way");
    assert_eq!(
        there.units,
        2 * 4,
        "per namespace: its own records and 3 scopes"
    );

    let units = plan(source.as_ref(), None).await.unwrap();
    assert_eq!(units, plan(target.as_ref(), None).await.unwrap());
    let mut records = 0;
    for unit in &units {
        let original = unit.export(source.as_ref()).await.unwrap();
        assert!(!original.is_empty(), "{unit} holds records");
        assert_eq!(
            unit.export(&middle).await.unwrap(),
            original,
            "{unit} in memory"
        );
        assert_eq!(
            unit.export(target.as_ref()).await.unwrap(),
            original,
            "{unit} back in sqlite"
        );
        records += original.len() as u64;
    }
    assert_eq!(records, there.records);
    assert!(verify(source.as_ref(), target.as_ref(), None)
        .await
        .unwrap()
        .is_empty());

    // Derived data was rebuilt in the final copy: recall and raw loads answer as on the source.
    for (scope, thread) in &threads {
        let query = RecallQuery::text("likes tea in Oslo");
        let recalled = |hits: Vec<mnemix_core::ScoredFact>| -> Vec<String> {
            hits.into_iter().map(|h| h.fact.text).collect()
        };
        assert_eq!(
            recalled(
                FactStore::recall(target.as_ref(), scope, query.clone())
                    .await
                    .unwrap()
            ),
            recalled(
                FactStore::recall(source.as_ref(), scope, query)
                    .await
                    .unwrap()
            ),
        );
        let load = |store: Arc<SqliteStore>| async move {
            use mnemix_core::ConversationStore as _;
            store.load(scope, thread, LoadOptions::raw()).await.unwrap()
        };
        assert_eq!(load(target.clone()).await, load(source.clone()).await);
    }

    // A change on one side is found.
    let (scope, _) = &threads[0];
    target.forget_all(scope).await.unwrap();
    let mismatches = verify(source.as_ref(), target.as_ref(), None)
        .await
        .unwrap();
    assert_eq!(mismatches.len(), 1);
    assert_eq!(mismatches[0].target.total(), 0);
    assert!(target.export_scope(scope).await.unwrap().is_empty());
}
