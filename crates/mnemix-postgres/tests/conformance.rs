//! The conformance suite against PostgreSQL: the server from `MNEMIX_TEST_POSTGRES_URL` (which
//! `cargo xtask test` sets for the local server), a named skip without one, a failure when
//! `MNEMIX_TEST_REQUIRE` names postgres. Scenarios write into random namespaces of one schema,
//! which each run starts fresh (see `common`). Every collection gets its HNSW index when it is
//! made (`index_min_rows(0)`), so the suite's searches prove the index path; the index made when
//! a scope grows is tested in `postgres.rs`.

mod common;

use std::sync::Arc;

use mnemix_conformance::SetupError;
use mnemix_core::{Clock, MemoryBackend};
use mnemix_postgres::PostgresStore;
use mnemix_testkit::services::{locate, Service};

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

mnemix_conformance::suite!("postgres", factory);
