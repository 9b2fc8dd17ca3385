//! The conformance suite against a standalone Redis: the server from `MEMORY_TEST_REDIS_URL`
//! (which `cargo xtask test` sets), a named skip without one, a failure when
//! `MEMORY_TEST_REQUIRE` names redis. Each scenario writes under a key prefix of its own.

use std::sync::Arc;

use memory_conformance::services::{locate, Service};
use memory_conformance::SetupError;
use memory_core::{Clock, MemoryBackend};
use memory_redis::RedisStore;

async fn factory(clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError> {
    let url = locate(Service::Redis)?;
    let store = RedisStore::builder()
        .url(&url)
        .prefix(&format!("conformance-{}", uuid_like()))
        .clock(clock)
        .open()
        .await?;
    Ok(Arc::new(store))
}

/// A prefix no other scenario or run uses.
fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{nanos:x}-{:x}", std::process::id())
}

memory_conformance::suite!("redis", factory);
