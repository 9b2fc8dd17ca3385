//! The conformance suite against an embedded libSQL file that never asks the index
//! (`index_min_rows(usize::MAX)`, so it declares exact search and the exact top-k scenarios
//! run): every search scans its scope through the matrix the store holds per collection
//! generation, kept current by its own writes and refreshed by others', as the default does
//! for scopes under 2,000 vectors (which the scenarios' all are).

mod common;

use std::sync::Arc;

use mnemix_conformance::SetupError;
use mnemix_core::{Clock, MemoryBackend};

async fn factory(clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError> {
    common::open("libsql-conformance-scanned", clock, usize::MAX).await
}

mnemix_conformance::suite!("libsql-scanned", factory);
