//! The conformance suite against an embedded libSQL file: a fresh database per scenario, so
//! scenarios run on a real file with WAL, the writer connection, the readers and the DiskANN
//! indexes. Every search goes through the index (`index_min_rows(0)`): the scenarios' scopes
//! are small enough that the default would scan them exactly, and the index path (over-fetch,
//! filters, at least `min(k, matching)` hits) is the one that needs proving here;
//! `conformance_scanned.rs` proves the scanned path.

mod common;

use std::sync::Arc;

use mnemix_conformance::SetupError;
use mnemix_core::{Clock, MemoryBackend};

async fn factory(clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError> {
    common::open("libsql-conformance", clock, 0).await
}

mnemix_conformance::suite!("libsql", factory);
