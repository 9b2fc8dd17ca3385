//! What is specific to SQLite: migrations, several stores on one file, the matrix cache, and
//! the builder.

use std::sync::Arc;

use memory_core::migration::Migration;
use memory_core::{
    AppendOptions, CollectionSpec, ConversationStore, LoadOptions, MemoryBackend, Message,
    NewConversation, Scope, VectorId, VectorQuery, VectorRecord, VectorStore,
};
use memory_sqlite::{SqliteStore, MIGRATIONS};

fn scope() -> Scope {
    Scope::new("sqlite-tests", "user-1").unwrap()
}

async fn open(path: &std::path::Path) -> SqliteStore {
    SqliteStore::builder().path(path).open().await.unwrap()
}

#[tokio::test]
async fn a_fresh_file_is_migrated_to_the_latest_version_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/folder/memory.db");
    let store = open(&path).await;
    let latest = MIGRATIONS.last().unwrap().version;
    assert_eq!(store.schema_version().await.unwrap(), Some(latest));
    let thread = store
        .create_conversation(&scope(), NewConversation::default())
        .await
        .unwrap();
    store.close().await;
    let again = open(&path).await;
    assert_eq!(again.schema_version().await.unwrap(), Some(latest));
    again.get_conversation(&scope(), &thread.id).await.unwrap();
}

#[tokio::test]
async fn an_older_database_is_upgraded_keeping_its_data() {
    const V1: Migration = Migration {
        version: 1,
        name: "notes",
        sql: "CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('kept');",
    };
    const V2: Migration = Migration {
        version: 2,
        name: "notes-author",
        sql: "ALTER TABLE notes ADD COLUMN author TEXT;",
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    assert_eq!(
        memory_sqlite::migrate_file_with(&path, &[V1])
            .await
            .unwrap(),
        [1]
    );
    assert_eq!(
        memory_sqlite::migrate_file_with(&path, &[V1, V2])
            .await
            .unwrap(),
        [2]
    );
    assert!(memory_sqlite::migrate_file_with(&path, &[V1, V2])
        .await
        .unwrap()
        .is_empty());
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let kept: (String, Option<String>) = sqlx::query_as("SELECT body, author FROM notes")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(kept, ("kept".to_owned(), None));
}

#[tokio::test]
async fn a_newer_database_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let mut newer = MIGRATIONS.to_vec();
    newer.push(Migration {
        version: MIGRATIONS.len() as u32 + 1,
        name: "from-the-future",
        sql: "CREATE TABLE future (x);",
    });
    memory_sqlite::migrate_file_with(&path, &newer)
        .await
        .unwrap();
    let err = SqliteStore::builder().path(&path).open().await.unwrap_err();
    let cause = std::error::Error::source(&err).unwrap().to_string();
    assert!(cause.contains("newer than this build"), "{cause}");
}

#[tokio::test]
async fn an_edited_migration_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let edited = Migration {
        sql: "CREATE TABLE something_else (x);",
        ..MIGRATIONS[0]
    };
    memory_sqlite::migrate_file_with(&path, &[edited])
        .await
        .unwrap();
    let err = SqliteStore::builder().path(&path).open().await.unwrap_err();
    let cause = std::error::Error::source(&err).unwrap().to_string();
    assert!(
        cause.contains("was changed after it was applied"),
        "{cause}"
    );
}

/// Two stores on one file are two processes as far as SQLite is concerned: separate
/// connections, so only `BEGIN IMMEDIATE` and the busy timeout keep their appends apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_on_separate_connections_never_lose_an_append() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let stores = [Arc::new(open(&path).await), Arc::new(open(&path).await)];
    let thread = stores[0]
        .create_conversation(&scope(), NewConversation::default())
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for (w, store) in stores.iter().cycle().take(8).enumerate() {
        let (store, id) = (Arc::clone(store), thread.id.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..25 {
                let batch = vec![
                    Message::user(format!("w{w} m{i}a")),
                    Message::user(format!("w{w} m{i}b")),
                ];
                store
                    .append(&scope(), &id, batch, AppendOptions::default())
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let all = stores[1]
        .load(&scope(), &thread.id, LoadOptions::raw())
        .await
        .unwrap();
    assert_eq!(all.len(), 8 * 25 * 2);
    assert!(
        all.iter().enumerate().all(|(i, m)| m.seq == i as u64 + 1),
        "seqs are 1..=400"
    );
    for pair in all.chunks(2) {
        // A batch is contiguous: its two messages are never split by another writer's.
        assert_eq!(
            pair[0].message.text().trim_end_matches('a'),
            pair[1].message.text().trim_end_matches('b')
        );
    }
}

/// A store's cached matrix must notice a write made through another store on the same file.
#[tokio::test]
async fn cached_vectors_see_writes_from_another_connection() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let (a, b) = (open(&path).await, open(&path).await);
    let scope = scope();
    a.ensure_collection(
        scope.namespace(),
        CollectionSpec::new("docs", 2, "test-model"),
    )
    .await
    .unwrap();
    let record = |id: &str, v: [f32; 2]| VectorRecord::new(VectorId::new(id).unwrap(), v.to_vec());
    a.upsert_vectors(&scope, "docs", vec![record("east", [1.0, 0.0])])
        .await
        .unwrap();
    let query = VectorQuery::new(vec![0.0, 1.0], 1);
    let first = a.search(&scope, "docs", query.clone()).await.unwrap();
    assert_eq!(first[0].record.id.as_str(), "east");
    b.upsert_vectors(&scope, "docs", vec![record("north", [0.0, 1.0])])
        .await
        .unwrap();
    let second = a.search(&scope, "docs", query.clone()).await.unwrap();
    assert_eq!(second[0].record.id.as_str(), "north");
    b.forget_all(&scope).await.unwrap();
    assert!(a.search(&scope, "docs", query).await.unwrap().is_empty());
}

#[tokio::test]
async fn urls_and_memory_databases_open() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("via-url.db");
    let store = SqliteStore::builder()
        .url(&format!("sqlite://{}", file.display()))
        .open()
        .await
        .unwrap();
    assert_eq!(store.config().path(), Some(file.as_path()));
    assert!(format!("{:?}", store.config()).contains("via-url.db"));
    assert!(file.exists());

    let memory = SqliteStore::builder()
        .url("sqlite::memory:")
        .open()
        .await
        .unwrap();
    assert_eq!(memory.config().path(), None);
    let thread = memory
        .create_conversation(&scope(), NewConversation::default())
        .await
        .unwrap();
    memory.get_conversation(&scope(), &thread.id).await.unwrap();

    let err = SqliteStore::builder()
        .url("postgres://x")
        .open()
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
}
