//! [`MemoryBackend`](mnemix_core::MemoryBackend) for the SQLite store: its name and capabilities; the rest is the SQLite
//! family's (`mnemix_sqlite_family::memory_backend!`).

use mnemix_core::{Capabilities, Durability, Timestamp, VectorSearch};

use crate::db::BACKEND;
use crate::SqliteStore;

mnemix_sqlite_family::memory_backend!(SqliteStore {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn now(&self) -> Timestamp {
        self.common.clock.now()
    }

    fn capabilities(&self) -> Capabilities {
        // Durable against a process crash in both modes; see the crate docs for power loss.
        Capabilities::default()
            .with_vector_search(VectorSearch::Exact)
            .with_durability(Durability::Durable)
            .with_change_feed()
    }

});
