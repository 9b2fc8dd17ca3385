//! The conformance suite against the in-memory reference backend.

use std::sync::Arc;

use mnemix_conformance::SetupError;
use mnemix_core::{Clock, InMemoryBackend, MemoryBackend};

async fn factory(clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError> {
    Ok(Arc::new(InMemoryBackend::with_clock(clock)))
}

mnemix_conformance::suite!("memory", factory);
