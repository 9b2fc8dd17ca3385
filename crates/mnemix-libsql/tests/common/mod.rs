//! A fresh libSQL file per conformance scenario, in a folder of the suite's own.

use std::sync::Arc;

use mnemix_conformance::SetupError;
use mnemix_core::{Clock, MemoryBackend};
use mnemix_libsql::LibsqlStore;
use mnemix_testkit::sqlite_family::scenario_file;

/// A store on a fresh file of `suite`'s folder, with `index_min_rows`.
pub async fn open(
    suite: &str,
    clock: Arc<dyn Clock>,
    index_min_rows: usize,
) -> Result<Arc<dyn MemoryBackend>, SetupError> {
    let path = scenario_file(env!("CARGO_TARGET_TMPDIR"), suite);
    let store = LibsqlStore::builder()
        .path(path)
        .index_min_rows(index_min_rows)
        .clock(clock)
        .open()
        .await?;
    Ok(Arc::new(store))
}
