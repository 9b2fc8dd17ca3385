//! The conformance suite against an embedded libSQL file: a fresh database per scenario, so
//! scenarios run on a real file with WAL, the writer connection, the readers and the DiskANN
//! indexes. Every search goes through the index (`index_min_rows(0)`): the scenarios' scopes
//! are small enough that the default would scan them exactly, and the index path (over-fetch,
//! filters, at least `min(k, matching)` hits) is the one that needs proving. The suite runs
//! again as `libsql-scanned` with the default, where those scopes are scanned through the
//! matrices a store holds per generation.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use memory_conformance::SetupError;
use memory_core::{Clock, MemoryBackend};
use memory_libsql::LibsqlStore;

/// A folder for this test process's databases, emptied when the process starts.
fn folder() -> &'static PathBuf {
    static FOLDER: OnceLock<PathBuf> = OnceLock::new();
    FOLDER.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("libsql-conformance");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp folder");
        dir
    })
}

/// A store on a fresh file, searching through the index when `indexed`.
async fn open(clock: Arc<dyn Clock>, indexed: bool) -> Result<Arc<dyn MemoryBackend>, SetupError> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let path = folder().join(format!(
        "scenario-{}.db",
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let mut builder = LibsqlStore::builder().path(path).clock(clock);
    if indexed {
        builder = builder.index_min_rows(0);
    }
    Ok(Arc::new(builder.open().await?))
}

async fn factory(clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError> {
    open(clock, true).await
}

memory_conformance::suite!("libsql", factory);

mod scanned {
    use super::*;

    async fn factory(clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError> {
        open(clock, false).await
    }

    memory_conformance::suite!("libsql-scanned", factory);
}
