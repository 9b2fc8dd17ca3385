//! The whole conformance suite against the custom adapter: this is all a third party writes.

use std::sync::Arc;

use custom_adapter_example::CountingStore;
use memory_conformance::SetupError;
use memory_core::{Clock, MemoryBackend};

async fn factory(clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError> {
    Ok(Arc::new(CountingStore::new(clock)))
}

memory_conformance::suite!("counting", factory);
