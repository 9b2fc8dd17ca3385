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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VectorSearch {
    /// No vector search: vector operations are `Unsupported`.
    None,
    /// Exact top-k.
    Exact,
    /// An approximate index; recall@10 ≥ 0.95 against exact is required.
    Approximate(VectorIndexKind),
}

/// How much a successful write survives a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Lost when the process or server stops.
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Capabilities {
    /// Vector search mode.
    pub vector_search: VectorSearch,
    /// Full-text (e.g. BM25) search beyond the shared lexical definition.
    pub full_text: bool,
    /// Expiry enforced by the server itself (besides the store clock).
    pub native_ttl: bool,
    /// Durability class.
    pub durability: Durability,
    /// Largest append or upsert batch accepted, if limited.
    pub max_batch: Option<u32>,
    /// Runs against a sharded cluster.
    pub cluster: bool,
}

impl Capabilities {
    /// Whether vectors can be stored and searched at all.
    pub fn has_vectors(&self) -> bool {
        !matches!(self.vector_search, VectorSearch::None)
    }
}
