//! From a `--url` to a store: `mnemix::open`, with the CLI's error context.

use std::sync::Arc;

use anyhow::{Context as _, Result};
use mnemix::OpenOptions;
use mnemix_core::{Clock, MemoryBackend, Principal};

pub use mnemix::{redacted, DEFAULT_URL};

/// Opens the store a URL names, with `clock` deciding "now".
pub async fn open_with_clock(url: &str, clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>> {
    opened(OpenOptions::new(url).clock(clock), url).await
}

/// Opens with `options`, naming `url` (redacted) when it cannot. What the command writes
/// records the command line as its writer ([`Principal::command`]).
async fn opened(options: OpenOptions, url: &str) -> Result<Arc<dyn MemoryBackend>> {
    let store = options
        .open()
        .await
        .with_context(|| format!("cannot open {}", redacted(url)))?;
    Ok(store.acting_as(Principal::command()).backend())
}

/// Opens the store a URL names on the system clock (creating an embedded database file that is
/// missing: for commands that write).
pub async fn open(url: &str) -> Result<Arc<dyn MemoryBackend>> {
    open_with_clock(url, Arc::new(mnemix_core::SystemClock)).await
}

/// Opens a store that must already exist, for commands that only read: a missing database file
/// is an error naming its path, and nothing is created.
pub async fn open_existing(url: &str) -> Result<Arc<dyn MemoryBackend>> {
    opened(OpenOptions::new(url).create_if_missing(false), url).await
}
