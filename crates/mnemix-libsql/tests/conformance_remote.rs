//! The conformance suite against a remote libSQL server (sqld, Turso): the one in
//! `MNEMIX_TEST_LIBSQL_URL`, with `MNEMIX_TEST_LIBSQL_AUTH_TOKEN` when it needs a token. There
//! is no such server on the project's machines, so without the variable every scenario is a
//! named skip (a failure when `MNEMIX_TEST_REQUIRE` names libsql-remote). Run it with
//! `cargo test -p mnemix-libsql --features remote --test conformance_remote`; every scenario
//! uses random namespaces, so a shared server needs no reset.

use std::sync::Arc;

use mnemix_conformance::SetupError;
use mnemix_core::{Clock, MemoryBackend};
use mnemix_libsql::LibsqlStore;
use mnemix_testkit::services::{locate, Service};

async fn factory(clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError> {
    let url = locate(Service::Libsql)?;
    let token = std::env::var("MNEMIX_TEST_LIBSQL_AUTH_TOKEN").unwrap_or_default();
    // Without the `remote` feature, `open` explains that it is needed: a failure, not a skip,
    // because a server was asked for.
    let store = LibsqlStore::builder()
        .url(&url)
        .auth_token(token)
        .clock(clock)
        .open()
        .await?;
    Ok(Arc::new(store))
}

mnemix_conformance::suite!("libsql-remote", factory);
