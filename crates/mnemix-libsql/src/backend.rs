//! [`MemoryBackend`](mnemix_core::MemoryBackend) for the libSQL store: its name and capabilities; the rest is the SQLite
//! family's (`mnemix_sqlite_family::memory_backend!`).

use mnemix_core::{Capabilities, Durability, Timestamp, VectorIndexKind, VectorSearch};

use crate::db::BACKEND;
use crate::LibsqlStore;

mnemix_sqlite_family::memory_backend!(LibsqlStore {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn now(&self) -> Timestamp {
        self.common.clock.now()
    }

    fn capabilities(&self) -> Capabilities {
        // Durable against a process crash in both modes; see the crate docs for power loss.
        // A store that never asks the index scans every scope exactly.
        let search = if self.config.index_min_rows == usize::MAX {
            VectorSearch::Exact
        } else {
            VectorSearch::Approximate(VectorIndexKind::DiskAnn)
        };
        Capabilities::default()
            .with_vector_search(search)
            .with_durability(Durability::Durable)
            .with_change_feed()
    }

});
