//! libSQL on its file: the SQLite family's file tests (URLs, migrations, several stores on one
//! file; written once in mnemix-testkit), the DiskANN index (recall on 20,000 vectors, a dropped
//! collection's table), and the builder.

use std::path::Path;

use mnemix_conformance::support::clustered_vectors;
use mnemix_core::adapter::ExactIndex;
use mnemix_core::{
    CollectionSpec, MemoryBackend, Metadata, Metric, Scope, VectorId, VectorQuery, VectorRecord,
    VectorStore,
};
use mnemix_libsql::LibsqlStore;
use mnemix_testkit::sqlite_family::FileStore;

fn scope() -> Scope {
    Scope::new("libsql-tests", "user-1").unwrap()
}

async fn open(path: &std::path::Path) -> LibsqlStore {
    LibsqlStore::builder().path(path).open().await.unwrap()
}

/// The SQLite family's file tests (migrations, two stores on one file), on this store.
struct LibsqlFile;

#[async_trait::async_trait]
impl FileStore for LibsqlFile {
    type Store = LibsqlStore;

    async fn read_note(path: &Path) -> (String, Option<String>) {
        let conn = libsql::Builder::new_local(path)
            .build()
            .await
            .unwrap()
            .connect()
            .unwrap();
        let mut rows = conn
            .query("SELECT body, author FROM notes", ())
            .await
            .unwrap();
        let row = rows.next().await.unwrap().unwrap();
        let text = |column| match row.get_value(column).unwrap() {
            libsql::Value::Text(text) => Some(text),
            libsql::Value::Null => None,
            other => panic!("not text: {other:?}"),
        };
        (text(0).unwrap(), text(1))
    }
}

mnemix_testkit::sqlite_family_tests!(LibsqlFile, file_url = "file://", memory_url = ":memory:");

/// The acceptance figure of the DiskANN path: 20,000 clustered 384-dim vectors over ten
/// subjects, so the caller's scope keeps 10% of the rows, and recall@10 against the exact top
/// 10 of that subject at least 0.95. (Vectors are clustered like real embeddings; the same
/// generator feeds the measure example.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_at_10_over_20k_vectors_with_a_subject_keeping_10_percent() {
    const DIMS: usize = 384;
    const SUBJECTS: usize = 10;
    const PER_SUBJECT: usize = 2_000;
    const QUERIES: usize = 30;
    let dir = tempfile::tempdir().unwrap();
    // Always through the index: by default a 2,000-row scope is scanned exactly (faster).
    let store = LibsqlStore::builder()
        .path(dir.path().join("recall.db"))
        .index_min_rows(0)
        .open()
        .await
        .unwrap();
    let scopes: Vec<Scope> = (0..SUBJECTS)
        .map(|s| Scope::new("libsql-recall", format!("user-{s}")).unwrap())
        .collect();
    let namespace = scopes[0].namespace();
    store
        .ensure_collection(namespace, CollectionSpec::new("docs", DIMS, "clustered"))
        .await
        .unwrap();
    let data = clustered_vectors(SUBJECTS * PER_SUBJECT + QUERIES, DIMS, 11);
    let (rows, queries) = data.split_at(SUBJECTS * PER_SUBJECT);
    // Subjects interleave, as users' writes do, so no subject is one region of the table.
    for chunk in 0..rows.len() / 1_000 {
        for (s, scope) in scopes.iter().enumerate() {
            let records: Vec<_> = (chunk * 1_000..(chunk + 1) * 1_000)
                .filter(|i| i % SUBJECTS == s)
                .map(|i| {
                    VectorRecord::new(VectorId::new(format!("v{i}")).unwrap(), rows[i].clone())
                })
                .collect();
            store.upsert_vectors(scope, "docs", records).await.unwrap();
        }
    }
    let scope = &scopes[3];
    let mut exact = ExactIndex::new(DIMS, Metric::Cosine);
    for i in (0..rows.len()).filter(|i| i % SUBJECTS == 3) {
        exact.push(
            VectorId::new(format!("v{i}")).unwrap(),
            &rows[i],
            Metadata::new(),
        );
    }
    let (mut found, mut wanted) = (0, 0);
    for q in queries {
        let query = VectorQuery::new(q.clone(), 10);
        let truth: Vec<&str> = exact
            .search(&query)
            .iter()
            .map(|(row, _)| exact.id(*row).as_str())
            .collect();
        let hits = store.search(scope, "docs", query).await.unwrap();
        assert_eq!(hits.len(), 10);
        assert!(
            hits.windows(2).all(|w| w[0].score >= w[1].score),
            "best first"
        );
        found += hits
            .iter()
            .filter(|h| truth.contains(&h.record.id.as_str()))
            .count();
        wanted += truth.len();
    }
    let recall = found as f64 / wanted as f64;
    println!(
        "recall@10 over {} vectors, scope {PER_SUBJECT}: {recall:.3}",
        rows.len()
    );
    assert!(recall >= 0.95, "recall@10 {recall:.3} < 0.95");
}

/// A filter that keeps a few rows of a large scope: the index rounds find fewer than `k` of
/// them, the search scans the scope filtering first, and every matching row comes back in
/// exact order, as an exact search of those rows alone ranks them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selective_filter_over_a_large_scope_returns_every_matching_row_in_order() {
    const DIMS: usize = 16;
    const ROWS: usize = 3_000;
    let dir = tempfile::tempdir().unwrap();
    let store = LibsqlStore::builder()
        .path(dir.path().join("selective.db"))
        .index_min_rows(0)
        .open()
        .await
        .unwrap();
    let scope = scope();
    store
        .ensure_collection(
            scope.namespace(),
            CollectionSpec::new("docs", DIMS, "clustered"),
        )
        .await
        .unwrap();
    let data = clustered_vectors(ROWS + 1, DIMS, 5);
    let bucket =
        |i: usize| Metadata::from_iter([("bucket".to_owned(), serde_json::json!(i % 300))]);
    for chunk in data[..ROWS].chunks(1_000).enumerate() {
        let (c, chunk) = chunk;
        let records = chunk
            .iter()
            .enumerate()
            .map(|(j, v)| {
                let i = c * 1_000 + j;
                VectorRecord::new(VectorId::new(format!("v{i}")).unwrap(), v.clone())
                    .with_metadata(bucket(i))
            })
            .collect();
        store.upsert_vectors(&scope, "docs", records).await.unwrap();
    }
    let filter = mnemix_core::Filter::eq("bucket", 0);
    let mut exact = ExactIndex::new(DIMS, Metric::Cosine);
    for i in (0..ROWS).filter(|i| i % 300 == 0) {
        exact.push(VectorId::new(format!("v{i}")).unwrap(), &data[i], bucket(i));
    }
    let query = VectorQuery::new(data[ROWS].clone(), 20).with_filter(filter);
    let expected: Vec<String> = exact
        .search(&query)
        .iter()
        .map(|(row, _)| exact.id(*row).as_str().to_owned())
        .collect();
    assert_eq!(expected.len(), ROWS / 300);
    let hits = store.search(&scope, "docs", query).await.unwrap();
    let found: Vec<String> = hits
        .iter()
        .map(|h| h.record.id.as_str().to_owned())
        .collect();
    assert_eq!(found, expected);
}

/// Dropping a collection drops its table and index: the same name comes back empty, with the
/// new spec.
#[tokio::test]
async fn a_dropped_collection_leaves_no_table_behind() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("drop.db")).await;
    let scope = scope();
    let spec = CollectionSpec::new("docs", 3, "m");
    store
        .ensure_collection(scope.namespace(), spec.clone())
        .await
        .unwrap();
    store
        .upsert_vectors(
            &scope,
            "docs",
            vec![VectorRecord::new(
                VectorId::new("a").unwrap(),
                vec![1.0, 0.0, 0.0],
            )],
        )
        .await
        .unwrap();
    assert!(store
        .drop_collection(scope.namespace(), "docs")
        .await
        .unwrap());
    let counts = store.table_counts().await.unwrap();
    assert!(counts.contains(&("vectors".to_owned(), 0)), "{counts:?}");
    let wider = CollectionSpec::new("docs", 5, "m").with_metric(Metric::Dot);
    store
        .ensure_collection(scope.namespace(), wider.clone())
        .await
        .unwrap();
    assert_eq!(
        store.list_collections(scope.namespace()).await.unwrap(),
        vec![wider]
    );
    let hits = store
        .search(&scope, "docs", VectorQuery::new(vec![1.0; 5], 3))
        .await
        .unwrap();
    assert!(hits.is_empty());
}

/// A remote URL keeps its token out of `Debug`; without the `remote` feature, opening one says
/// which feature it needs.
#[tokio::test]
async fn remote_urls_hide_their_token() {
    let builder = LibsqlStore::builder()
        .url("libsql://db.example.invalid")
        .auth_token("secret-token");
    let shown = format!("{builder:?}");
    assert!(shown.contains("db.example.invalid"), "{shown}");
    assert!(!shown.contains("secret-token"), "{shown}");
    if !cfg!(feature = "remote") {
        let err = builder.open().await.unwrap_err();
        assert!(
            err.is_invalid_input() && err.to_string().contains("remote"),
            "{err}"
        );
    }
}
