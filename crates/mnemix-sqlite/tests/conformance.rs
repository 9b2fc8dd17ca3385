//! The conformance suite against SQLite: a fresh database file per scenario, so scenarios run
//! on a real file with WAL, the writer connection and the reader pool.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use mnemix_conformance::SetupError;
use mnemix_core::{Clock, MemoryBackend};
use mnemix_sqlite::SqliteStore;

/// A folder for this test process's databases, emptied when the process starts.
fn folder() -> &'static PathBuf {
    static FOLDER: OnceLock<PathBuf> = OnceLock::new();
    FOLDER.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sqlite-conformance");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp folder");
        dir
    })
}

async fn factory(clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let path = folder().join(format!(
        "scenario-{}.db",
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let store = SqliteStore::builder()
        .path(path)
        .clock(clock)
        .open()
        .await?;
    Ok(Arc::new(store))
}

mnemix_conformance::suite!("sqlite", factory);
