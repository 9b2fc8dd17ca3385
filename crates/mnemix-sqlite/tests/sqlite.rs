//! SQLite on its file: the SQLite family's file tests (migrations, several stores on one file,
//! the matrix cache seeing another store's writes; written once in mnemix-sqlite-sql), and the
//! builder.

use std::path::Path;

use mnemix_core::migration::Migration;
use mnemix_core::{ConversationStore, NewConversation, Scope};
use mnemix_sqlite::{SqliteStore, MIGRATIONS};
use mnemix_testkit::sqlite_family::FileStore;

fn scope() -> Scope {
    Scope::new("sqlite-tests", "user-1").unwrap()
}

/// The SQLite family's file tests (migrations, two stores on one file), on this store.
struct SqliteFile;

#[async_trait::async_trait]
impl FileStore for SqliteFile {
    type Store = SqliteStore;
    const MIGRATIONS: &'static [Migration] = MIGRATIONS;

    async fn open(path: &Path) -> mnemix_core::Result<SqliteStore> {
        SqliteStore::builder().path(path).open().await
    }

    async fn migrate_file_with(
        path: &Path,
        migrations: &[Migration],
    ) -> mnemix_core::Result<Vec<u32>> {
        mnemix_sqlite::migrate_file_with(path, migrations).await
    }

    async fn read_note(path: &Path) -> (String, Option<String>) {
        let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        sqlx::query_as("SELECT body, author FROM notes")
            .fetch_one(&pool)
            .await
            .unwrap()
    }

    async fn close(store: SqliteStore) {
        store.close().await;
    }
}

mnemix_testkit::sqlite_family_tests!(SqliteFile);

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
