//! The conformance suite against PostgreSQL with the HNSW index turned off: exact searches that
//! pgvector ranks in the server, held to the exact top-k scenarios.

mod common;

use std::sync::Arc;

use mnemix_conformance::SetupError;
use mnemix_core::{Clock, MemoryBackend};
use mnemix_postgres::PostgresStore;
use mnemix_testkit::services::{locate, Service};

const SCHEMA: &str = "agent_memory_conformance_exact";

async fn factory(clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError> {
    let url = locate(Service::Postgres)?;
    common::fresh_schema(&url, SCHEMA)?;
    let store = PostgresStore::builder()
        .url(&url)
        .schema(SCHEMA)
        .max_connections(8)
        .vector_index(false)
        .clock(clock)
        .open()
        .await?;
    Ok(Arc::new(store))
}

mnemix_conformance::suite!("postgres-exact", factory);
