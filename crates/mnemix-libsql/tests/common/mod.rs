//! A fresh libSQL file per conformance scenario, in a folder of the suite's own.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use mnemix_conformance::SetupError;
use mnemix_core::{Clock, MemoryBackend};
use mnemix_libsql::LibsqlStore;

/// The folder of this test process's databases (one suite per process), emptied when the
/// process first asks for it.
fn folder(suite: &str) -> &'static PathBuf {
    static FOLDER: OnceLock<PathBuf> = OnceLock::new();
    FOLDER.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(suite);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp folder");
        dir
    })
}

/// A store on a fresh file of `suite`'s folder, with `index_min_rows`.
pub async fn open(
    suite: &str,
    clock: Arc<dyn Clock>,
    index_min_rows: usize,
) -> Result<Arc<dyn MemoryBackend>, SetupError> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let path = folder(suite).join(format!(
        "scenario-{}.db",
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let store = LibsqlStore::builder()
        .path(path)
        .index_min_rows(index_min_rows)
        .clock(clock)
        .open()
        .await?;
    Ok(Arc::new(store))
}
