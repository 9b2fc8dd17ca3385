//! The conformance suite against PostgreSQL: the server from `MEMORY_TEST_POSTGRES_URL` (which
//! `cargo xtask test` sets for the local server), a named skip without one, a failure when
//! `MEMORY_TEST_REQUIRE` names postgres. Scenarios write into random namespaces of one schema,
//! which each run starts fresh (see `common`). Every collection gets its HNSW index when it is
//! made (`index_min_rows(0)`), so the suite's searches prove the index path; the index made when
//! a scope grows is tested in `postgres.rs`.

mod common;

use std::sync::Arc;

use memory_conformance::services::{locate, Service};
use memory_conformance::SetupError;
use memory_core::{Clock, MemoryBackend};
use memory_postgres::PostgresStore;

const SCHEMA: &str = "agent_memory_conformance";

async fn factory(clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError> {
    let url = locate(Service::Postgres)?;
    common::fresh_schema(&url, SCHEMA)?;
    let store = PostgresStore::builder()
        .url(&url)
        .schema(SCHEMA)
        .max_connections(8)
        .index_min_rows(0)
        .clock(clock)
        .open()
        .await?;
    Ok(Arc::new(store))
}

memory_conformance::suite!("postgres", factory);
