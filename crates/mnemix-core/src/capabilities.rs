//! What a backend can do, so the suite and callers know what to expect.

use serde::{Deserialize, Serialize};

/// The kind of approximate vector index a backend uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VectorIndexKind {
    /// Hierarchical navigable small world graph (pgvector).
    Hnsw,
    /// DiskANN (libSQL).
    DiskAnn,
    /// Inverted file index.
    IvfFlat,
    /// Something else.
    Other,
}

/// How a backend searches vectors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VectorSearch {
    /// No vector search: vector operations are `Unsupported`.
    #[default]
    None,
    /// Exact top-k.
    Exact,
    /// An approximate index; recall@10 ≥ 0.95 against exact is required.
    Approximate(VectorIndexKind),
}

/// How much a successful write survives a crash.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Lost when the process or server stops.
    #[default]
    Volatile,
    /// Written behind: up to this many milliseconds of writes may be lost.
    Buffered {
        /// The loss window in milliseconds.
        loss_window_ms: u32,
    },
    /// Durable once the call returns.
    Durable,
}

/// A backend's capabilities: small and `Copy`, so it can be checked cheaply.
///
/// `#[non_exhaustive]`: an adapter starts from [`Capabilities::default`] (no vector search,
/// volatile) and states what it has with the `with_*` methods, so a field added later breaks
/// no adapter.
///
/// ```
/// use mnemix_core::{Capabilities, Durability, VectorSearch};
///
/// let caps = Capabilities::default()
///     .with_vector_search(VectorSearch::Exact)
///     .with_durability(Durability::Durable);
/// assert!(caps.has_vectors());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Capabilities {
    /// Vector search mode: which vector scenarios of the suite apply.
    pub vector_search: VectorSearch,
    /// Durability class, which operators see in `mnemix stats` and benchmarks compare at.
    pub durability: Durability,
    /// Whether its writes record the namespace's change feed
    /// ([`MemoryBackend::changes`](crate::MemoryBackend::changes)).
    pub change_feed: bool,
}

impl Capabilities {
    /// The same with this vector search mode.
    #[must_use]
    pub const fn with_vector_search(mut self, vector_search: VectorSearch) -> Self {
        self.vector_search = vector_search;
        self
    }

    /// The same with this durability class.
    #[must_use]
    pub const fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The same, recording the change feed.
    #[must_use]
    pub const fn with_change_feed(mut self) -> Self {
        self.change_feed = true;
        self
    }

    /// Whether vectors can be stored and searched at all.
    pub fn has_vectors(&self) -> bool {
        !matches!(self.vector_search, VectorSearch::None)
    }
}

impl std::fmt::Display for VectorSearch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::None => f.write_str("none"),
            Self::Exact => f.write_str("exact"),
            Self::Approximate(kind) => write!(f, "approximate ({kind:?})"),
        }
    }
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Volatile => f.write_str("volatile"),
            Self::Buffered { loss_window_ms } => {
                write!(
                    f,
                    "buffered (up to {loss_window_ms} ms of writes may be lost)"
                )
            }
            Self::Durable => f.write_str("durable"),
        }
    }
}
