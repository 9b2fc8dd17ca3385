//! The conformance suite against PostgreSQL without pgvector (`pgvector(false)`): vectors stored
//! as f32 little-endian `bytea` and searched by an exact scan in Rust, as on a server that has no
//! pgvector, in the same database as the other suites.

mod common;

use std::sync::Arc;

use mnemix_conformance::SetupError;
use mnemix_core::{Clock, MemoryBackend};
use mnemix_postgres::PostgresStore;
use mnemix_testkit::services::{locate, Service};

const SCHEMA: &str = "agent_memory_conformance_plain";

async fn factory(clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError> {
    let url = locate(Service::Postgres)?;
    common::fresh_schema(&url, SCHEMA)?;
    let store = PostgresStore::builder()
        .url(&url)
        .schema(SCHEMA)
        .max_connections(8)
        .pgvector(false)
        .clock(clock)
        .open()
        .await?;
    Ok(Arc::new(store))
}

mnemix_conformance::suite!("postgres-plain", factory);
