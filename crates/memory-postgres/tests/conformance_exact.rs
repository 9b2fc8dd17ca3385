//! The conformance suite against PostgreSQL with the HNSW index turned off: the exact scan that
//! serves searches on servers without pgvector, held to the exact top-k scenarios.

use std::sync::Arc;

use memory_conformance::services::{locate, Service};
use memory_conformance::SetupError;
use memory_core::{Clock, MemoryBackend};
use memory_postgres::PostgresStore;

async fn factory(clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError> {
    let url = locate(Service::Postgres)?;
    let store = PostgresStore::builder()
        .url(&url)
        .schema("agent_memory_conformance_exact")
        .max_connections(8)
        .vector_index(false)
        .clock(clock)
        .open()
        .await?;
    Ok(Arc::new(store))
}

memory_conformance::suite!("postgres-exact", factory);
