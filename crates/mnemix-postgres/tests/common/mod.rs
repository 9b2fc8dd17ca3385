//! A schema that each test run starts fresh, without pulling it from under a concurrent run.
//!
//! Every conformance scenario makes collections (each with its own partial HNSW index) in new
//! namespaces and never drops them, so one schema shared by every run would grow without end
//! and slow the planner. Each test process holds a shared advisory lock on its schema for its
//! whole life; a process that can take the lock exclusively is alone, drops the schema and lets
//! the store migrate it again. The lock lives in a session on a thread of its own, so it ends
//! with the process, however that ends.

use std::sync::{mpsc, OnceLock};

use mnemix_conformance::SetupError;
use mnemix_core::MemoryError;
use tokio_postgres::NoTls;

/// Drops `schema` if no other process is using it, then marks it as used by this process until
/// it exits. Once per process; later calls return the first call's outcome. An unreachable
/// server is [`SetupError::Unreachable`] (a named skip unless required); a failed reset fails.
pub fn fresh_schema(url: &str, schema: &'static str) -> Result<(), SetupError> {
    /// `Err((reached, why))`: the outcome, kept to be handed to every later caller.
    static HELD: OnceLock<Result<(), (bool, String)>> = OnceLock::new();
    let outcome = HELD.get_or_init(|| {
        let url = url.to_owned();
        let (done, outcome) = mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the lock session");
            runtime.block_on(async move {
                let (client, connection) = match tokio_postgres::connect(&url, NoTls).await {
                    Ok(pair) => pair,
                    Err(e) => {
                        let _ = done.send(Err((false, format!("cannot connect: {e}"))));
                        return;
                    }
                };
                let session = tokio::spawn(connection);
                let reset = reset(&client, schema).await;
                let _ = done.send(reset.map_err(|e| (true, format!("resetting {schema}: {e}"))));
                // Keeps the session, and with it the shared lock, until the process exits.
                let _ = session.await;
            });
        });
        outcome
            .recv()
            .unwrap_or_else(|_| Err((true, "the lock session ended".into())))
    });
    match outcome.clone() {
        Ok(()) => Ok(()),
        Err((false, why)) => Err(SetupError::Unreachable(why)),
        Err((true, why)) => Err(SetupError::Failed(MemoryError::Backend {
            backend: "postgres",
            source: why.into(),
        })),
    }
}

async fn reset(client: &tokio_postgres::Client, schema: &str) -> Result<(), tokio_postgres::Error> {
    let key = format!("mnemix tests {schema}");
    let alone: bool = client
        .query_one("SELECT pg_try_advisory_lock(hashtext($1))", &[&key])
        .await?
        .get(0);
    if alone {
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await?;
    }
    // A session never conflicts with its own locks: take the shared one, then let the
    // exclusive one go.
    client
        .execute("SELECT pg_advisory_lock_shared(hashtext($1))", &[&key])
        .await?;
    if alone {
        client
            .execute("SELECT pg_advisory_unlock(hashtext($1))", &[&key])
            .await?;
    }
    Ok(())
}
