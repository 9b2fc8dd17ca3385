//! The conformance suite against a standalone Redis: the server from `MNEMIX_TEST_REDIS_URL`
//! (which `cargo xtask test` sets), a named skip without one, a failure when
//! `MNEMIX_TEST_REQUIRE` names redis. Each scenario writes under a key prefix of its own;
//! prefixes of runs over an hour old are swept.

mod common;

use std::sync::Arc;

use mnemix_conformance::SetupError;
use mnemix_core::{Clock, MemoryBackend};
use mnemix_redis::RedisStore;
use mnemix_testkit::services::{locate, Service};

async fn factory(clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError> {
    let url = locate(Service::Redis)?;
    common::sweep_stale_prefixes(&url).await;
    let store = RedisStore::builder()
        .url(&url)
        .prefix(&common::scenario_prefix())
        .clock(clock)
        .open()
        .await?;
    Ok(Arc::new(store))
}

mnemix_conformance::suite!("redis", factory);
