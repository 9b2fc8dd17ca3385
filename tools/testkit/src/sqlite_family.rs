//! The tests of what a SQLite-family store does with its file, written once and run by
//! the SQLite and libSQL crates: migrations on open (a fresh file, an older schema upgraded keeping
//! its data, a newer or edited one refused), two stores on one file as two processes, and a
//! search through one store seeing another's writes. A crate runs them all with
//! [`sqlite_family_tests!`](crate::sqlite_family_tests), naming its [`FileStore`].

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use mnemix_core::migration::Migration;
use mnemix_core::{
    AppendOptions, ConversationStore, LoadOptions, MemoryBackend, Message, NewConversation, Scope,
};
use mnemix_sqlite_family::family::store::OnFile;

/// How the tests reach a SQLite-family store's file (implemented by a type of the test's own,
/// naming the store, which opens and migrates its file as [`OnFile`] says).
#[async_trait]
pub trait FileStore: Send + 'static {
    /// The store.
    type Store: MemoryBackend + OnFile + std::fmt::Debug + 'static;
    /// `SELECT body, author FROM notes` on the file, read with the store's driver.
    async fn read_note(path: &Path) -> (String, Option<String>);
    /// Lets go of the file.
    async fn close(store: Self::Store) {
        drop(store);
    }
}

fn scope() -> Scope {
    Scope::new("sql-store-tests", "user-1").unwrap()
}

async fn open<S: FileStore>(path: &Path) -> S::Store {
    <S::Store as OnFile>::open_file(path).await.unwrap()
}

/// A fresh file (in folders that do not exist yet) is migrated to the latest version, and
/// reopens with its data.
pub async fn a_fresh_file_is_migrated_to_the_latest_version_and_reopens<S: FileStore>(dir: &Path) {
    let path = dir.join("nested/folder/memory.db");
    let store = open::<S>(&path).await;
    let latest = <S::Store as OnFile>::MIGRATIONS.last().unwrap().version;
    assert_eq!(store.schema_version().await.unwrap(), Some(latest));
    let thread = store
        .create_conversation(&scope(), NewConversation::default())
        .await
        .unwrap();
    S::close(store).await;
    let again = open::<S>(&path).await;
    assert_eq!(again.schema_version().await.unwrap(), Some(latest));
    again.get_conversation(&scope(), &thread.id).await.unwrap();
}

/// An older schema is upgraded by the pending migrations only, keeping its rows.
pub async fn an_older_database_is_upgraded_keeping_its_data<S: FileStore>(dir: &Path) {
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
    let path = dir.join("memory.db");
    assert_eq!(
        <S::Store as OnFile>::migrate_file_with(&path, &[V1])
            .await
            .unwrap(),
        [1]
    );
    assert_eq!(
        <S::Store as OnFile>::migrate_file_with(&path, &[V1, V2])
            .await
            .unwrap(),
        [2]
    );
    assert!(<S::Store as OnFile>::migrate_file_with(&path, &[V1, V2])
        .await
        .unwrap()
        .is_empty());
    assert_eq!(S::read_note(&path).await, ("kept".to_owned(), None));
}

/// A file migrated by a newer release is refused, saying so.
pub async fn a_newer_database_is_refused_with_a_clear_error<S: FileStore>(dir: &Path) {
    let path = dir.join("memory.db");
    let mut newer = <S::Store as OnFile>::MIGRATIONS.to_vec();
    newer.push(Migration {
        version: <S::Store as OnFile>::MIGRATIONS.len() as u32 + 1,
        name: "from-the-future",
        sql: "CREATE TABLE future (x);",
    });
    <S::Store as OnFile>::migrate_file_with(&path, &newer)
        .await
        .unwrap();
    let err = <S::Store as OnFile>::open_file(&path)
        .await
        .expect_err("a newer schema is refused");
    let cause = std::error::Error::source(&err).unwrap().to_string();
    assert!(cause.contains("newer than this build"), "{cause}");
}

/// A file whose recorded migration differs from the embedded one is refused.
pub async fn an_edited_migration_is_refused<S: FileStore>(dir: &Path) {
    let path = dir.join("memory.db");
    let edited = Migration {
        sql: "CREATE TABLE something_else (x);",
        ..<S::Store as OnFile>::MIGRATIONS[0]
    };
    <S::Store as OnFile>::migrate_file_with(&path, &[edited])
        .await
        .unwrap();
    let err = <S::Store as OnFile>::open_file(&path)
        .await
        .expect_err("an edited schema is refused");
    let cause = std::error::Error::source(&err).unwrap().to_string();
    assert!(
        cause.contains("was changed after it was applied"),
        "{cause}"
    );
}

/// Two stores on one file are two processes as far as SQLite is concerned: separate
/// connections, so only `BEGIN IMMEDIATE` and the busy timeout keep their appends apart.
/// (Run it on a multi-threaded runtime.)
pub async fn writers_on_separate_connections_never_lose_an_append<S: FileStore>(dir: &Path) {
    let path = dir.join("memory.db");
    let stores = [
        Arc::new(open::<S>(&path).await),
        Arc::new(open::<S>(&path).await),
    ];
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

/// A search through one store sees every kind of vector write made through another on the same
/// file (whatever the store keeps in the process, a matrix cache or nothing).
pub async fn searches_see_writes_from_another_connection<S: FileStore>(dir: &Path) {
    let path = dir.join("memory.db");
    let (a, b) = (open::<S>(&path).await, open::<S>(&path).await);
    mnemix_conformance::handles::searches_see_writes_of_another_handle(&a, &b, &scope()).await;
}

/// Two stores on one file: one's recalls see the other's fact writes.
pub async fn recalls_see_facts_written_from_another_connection<S: FileStore>(dir: &Path) {
    let path = dir.join("memory.db");
    let (a, b) = (open::<S>(&path).await, open::<S>(&path).await);
    mnemix_conformance::handles::recalls_see_facts_written_by_another_handle(&a, &b, &scope())
        .await;
}

/// A file's URL (`file_url` then the path) opens the file, which its `Debug` names; the memory
/// URL opens a private database; another backend's URL is `InvalidInput`.
pub async fn urls_open_a_file_or_a_private_memory_database<S: FileStore>(
    dir: &Path,
    file_url: &str,
    memory_url: &str,
) {
    let file = dir.join("via-url.db");
    let url = format!("{file_url}{}", file.display());
    let store = <S::Store as OnFile>::open_url(&url).await.unwrap();
    assert_eq!(store.file(), Some(file.as_path()));
    assert!(format!("{store:?}").contains("via-url.db"));
    assert!(file.exists());
    S::close(store).await;

    let memory = <S::Store as OnFile>::open_url(memory_url).await.unwrap();
    assert_eq!(memory.file(), None);
    let thread = memory
        .create_conversation(&scope(), NewConversation::default())
        .await
        .unwrap();
    memory.get_conversation(&scope(), &thread.id).await.unwrap();

    let err = <S::Store as OnFile>::open_url("postgres://x")
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
}

/// Runs every test of [this module](self) against a [`FileStore`], each in a temporary
/// folder of its own, given the store's file URL prefix and memory URL:
/// `mnemix_testkit::sqlite_family_tests!(MyFile, file_url = "sqlite://", memory_url =
/// "sqlite::memory:");` in an integration test (which needs `tokio` and `tempfile`).
#[macro_export]
macro_rules! sqlite_family_tests {
    ($file:ty, file_url = $file_url:literal, memory_url = $memory_url:literal) => {
        #[tokio::test]
        async fn urls_open_a_file_or_a_private_memory_database() {
            let dir = tempfile::tempdir().unwrap();
            $crate::sqlite_family::urls_open_a_file_or_a_private_memory_database::<$file>(
                dir.path(),
                $file_url,
                $memory_url,
            )
            .await;
        }

        $crate::sqlite_family_tests!(@each $file;
            a_fresh_file_is_migrated_to_the_latest_version_and_reopens,
            an_older_database_is_upgraded_keeping_its_data,
            a_newer_database_is_refused_with_a_clear_error,
            an_edited_migration_is_refused,
            writers_on_separate_connections_never_lose_an_append,
            searches_see_writes_from_another_connection,
            recalls_see_facts_written_from_another_connection,
        );
    };
    (@each $file:ty; $($test:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $test() {
                let dir = tempfile::tempdir().unwrap();
                $crate::sqlite_family::$test::<$file>(dir.path()).await;
            }
        )*
    };
}

/// A fresh database file for one conformance scenario of `suite`, under `tmp` (the test's
/// `CARGO_TARGET_TMPDIR`): `tmp/suite/PID/scenario-N.db`. Each test process has a folder of
/// its own, so that processes running at once (cargo-nextest runs a process per test) never
/// remove each other's files; the folders of processes that have ended are removed when a
/// process first asks (where `/proc` tells which have). A process uses the folder of the first
/// suite it asks for.
pub fn scenario_file(tmp: &str, suite: &str) -> std::path::PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::OnceLock;
    static FOLDER: OnceLock<std::path::PathBuf> = OnceLock::new();
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let folder = FOLDER.get_or_init(|| {
        let base = Path::new(tmp).join(suite);
        let own = std::process::id().to_string();
        let knows_processes = Path::new("/proc/self").exists();
        for entry in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // A folder of its own pid is a leftover of an earlier process with the same pid.
            let ended =
                name == own || (knows_processes && !Path::new("/proc").join(&name).exists());
            if ended {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let folder = base.join(own);
        std::fs::create_dir_all(&folder).expect("a folder for the scenarios' databases");
        folder
    });
    folder.join(format!(
        "scenario-{}.db",
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}
