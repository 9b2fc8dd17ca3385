//! The whole conformance suite against the custom adapter: this is all a third party writes.

use std::sync::Arc;

use custom_adapter_example::RedbStore;
use mnemix_conformance::SetupError;
use mnemix_core::{Clock, MemoryBackend};

async fn factory(clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError> {
    // A fresh file per scenario. The directory goes at once; the open file lives on until the
    // store is dropped (POSIX unlink semantics), so nothing is left behind.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = RedbStore::open_with_clock(dir.path().join("memory.redb"), clock)?;
    Ok(Arc::new(store))
}

mnemix_conformance::suite!("redb", factory);
