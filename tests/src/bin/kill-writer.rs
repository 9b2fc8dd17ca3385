//! The child process of the kill tests (`tests/kills.rs`): opens the store at a URL and runs
//! [`mnemix_testkit::kills::write_until_killed`] from batch `FROM` on — until it is killed.
//!
//! `kill-writer URL NAMESPACE SUBJECT FROM ACK_FILE`

use std::path::Path;

use mnemix::{MemoryError, Scope};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), MemoryError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, namespace, subject, from, acks] = args.as_slice() else {
        return Err(MemoryError::invalid(
            "usage: kill-writer URL NAMESPACE SUBJECT FROM ACK_FILE",
        ));
    };
    let from: u64 = from
        .parse()
        .map_err(|_| MemoryError::invalid("FROM is a batch number"))?;
    let store = mnemix::open(url).await?;
    let scope = Scope::new(namespace.as_str(), subject.as_str())?;
    mnemix_testkit::kills::write_until_killed(
        store.backend().as_ref(),
        &scope,
        from,
        Path::new(acks),
    )
    .await
}
