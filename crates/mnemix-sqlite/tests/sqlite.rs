//! SQLite on its file: the SQLite family's file tests (URLs, migrations, several stores on one
//! file, the matrix cache seeing another store's writes), written once in mnemix-testkit.

use std::path::Path;

use mnemix_sqlite::SqliteStore;
use mnemix_testkit::sqlite_family::FileStore;

/// The SQLite family's file tests (migrations, two stores on one file), on this store.
struct SqliteFile;

#[async_trait::async_trait]
impl FileStore for SqliteFile {
    type Store = SqliteStore;

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

mnemix_testkit::sqlite_family_tests!(
    SqliteFile,
    file_url = "sqlite://",
    memory_url = "sqlite::memory:"
);
