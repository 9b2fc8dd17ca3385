//! The conformance suite against SQLite: a fresh database file per scenario, so scenarios run
//! on a real file with WAL, the writer connection and the reader pool.

use std::sync::Arc;

use mnemix_conformance::SetupError;
use mnemix_core::{Clock, MemoryBackend};
use mnemix_sqlite::SqliteStore;
use mnemix_testkit::sqlite_family::scenario_file;

async fn factory(clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError> {
    let path = scenario_file(env!("CARGO_TARGET_TMPDIR"), "sqlite-conformance");
    let store = SqliteStore::builder()
        .path(path)
        .clock(clock)
        .open()
        .await?;
    Ok(Arc::new(store))
}

mnemix_conformance::suite!("sqlite", factory);
