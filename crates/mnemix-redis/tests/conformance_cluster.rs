//! The conformance suite against a Redis Cluster: the nodes from
//! `MNEMIX_TEST_REDIS_CLUSTER_URLS` (comma-separated seed URLs; `cargo xtask test` starts a
//! local 3-master cluster), a named skip without them, a failure when `MNEMIX_TEST_REQUIRE`
//! names redis-cluster. Each scenario writes under a key prefix of its own. With
//! `MNEMIX_TEST_REDIS_REPLICAS=N` (the compose cluster, a replica per master, sets 1) the
//! store waits for N replicas after every command (`replicas`).

mod common;

use std::sync::Arc;

use mnemix_conformance::SetupError;
use mnemix_core::{Clock, MemoryBackend};
use mnemix_redis::RedisStore;
use mnemix_testkit::services::{locate, Service};

async fn factory(clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError> {
    let urls = locate(Service::RedisCluster)?;
    let store = RedisStore::builder()
        .cluster(urls.split(',').map(str::trim))
        .prefix(&common::scenario_prefix())
        .replicas(
            std::env::var("MNEMIX_TEST_REDIS_REPLICAS")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
        )
        .clock(clock)
        .open()
        .await?;
    assert!(store.is_cluster());
    Ok(Arc::new(store))
}

mnemix_conformance::suite!("redis-cluster", factory);
