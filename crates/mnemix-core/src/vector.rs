//! Vector collections: the [`VectorStore`] contract and its types.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};
use crate::filter::Filter;
use crate::message::Metadata;
use crate::scope::{validate_identifier, ConversationId, Namespace, Scope, VectorId};
use crate::similarity::{dot_f64, Metric, MAX_SQUARED_NORM};

/// Largest dimension accepted.
pub const MAX_DIMS: usize = 16_000;
/// Largest `k` of a search.
pub const MAX_TOP_K: usize = 1000;

/// Collections by namespace and name as a backend's searches last read them (whatever a
/// backend keeps of one: its spec, its key), so a search can skip the lookup and check the
/// collection in the same round trip as the search instead. At most 4,096 are remembered;
/// past that, the map starts over.
///
/// ```
/// use mnemix_core::adapter::SeenCollections;
/// use mnemix_core::Namespace;
/// let seen = SeenCollections::default();
/// let notes = Namespace::new("notes")?;
/// seen.insert(&notes, "messages", 7_i64);
/// assert_eq!(seen.get(&notes, "messages").as_deref(), Some(&7));
/// assert!(seen.get(&notes, "facts").is_none());
/// # Ok::<(), mnemix_core::MemoryError>(())
/// ```
#[derive(Debug)]
pub struct SeenCollections<C> {
    all: Mutex<HashMap<(String, String), Arc<C>>>,
}

impl<C> Default for SeenCollections<C> {
    fn default() -> Self {
        Self {
            all: Mutex::default(),
        }
    }
}

impl<C> SeenCollections<C> {
    const MAX: usize = 4096;

    /// The collection as last read, if remembered.
    pub fn get(&self, namespace: &Namespace, name: &str) -> Option<Arc<C>> {
        self.lock()
            .get(&(namespace.as_str().to_owned(), name.to_owned()))
            .cloned()
    }

    /// Remembers a collection as just read; returns it.
    pub fn insert(&self, namespace: &Namespace, name: &str, collection: C) -> Arc<C> {
        let collection = Arc::new(collection);
        let mut all = self.lock();
        if all.len() >= Self::MAX {
            all.clear();
        }
        all.insert(
            (namespace.as_str().to_owned(), name.to_owned()),
            Arc::clone(&collection),
        );
        collection
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<(String, String), Arc<C>>> {
        self.all.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A collection's fixed properties: [`CollectionSpec::new`] builds one (it may gain fields).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CollectionSpec {
    /// Name, unique within a namespace (identifier rules).
    pub name: String,
    /// Dimension of every vector.
    pub dims: usize,
    /// How vectors are compared.
    pub metric: Metric,
    /// The embedding model id that made the vectors; a different model is refused.
    pub model: String,
}

impl CollectionSpec {
    /// A cosine collection.
    pub fn new(name: impl Into<String>, dims: usize, model: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            dims,
            metric: Metric::Cosine,
            model: model.into(),
        }
    }

    /// The same with another metric.
    #[must_use]
    pub fn with_metric(mut self, metric: Metric) -> Self {
        self.metric = metric;
        self
    }

    /// Checks name, dimension and model id.
    pub fn validate(&self) -> Result<()> {
        validate_identifier("collection name", &self.name)?;
        validate_identifier("model id", &self.model)?;
        if self.dims == 0 || self.dims > MAX_DIMS {
            return Err(MemoryError::invalid(format!(
                "dims must be in 1..={MAX_DIMS}, got {}",
                self.dims
            )));
        }
        Ok(())
    }

    /// Checks that a caller's spec agrees with the stored one (same dims, metric and model).
    pub fn check_same(&self, requested: &CollectionSpec) -> Result<()> {
        if self.dims != requested.dims {
            return Err(MemoryError::invalid(format!(
                "collection {} has {} dims, not {}",
                self.name, self.dims, requested.dims
            )));
        }
        if self.metric != requested.metric {
            return Err(MemoryError::invalid(format!(
                "collection {} uses metric {}, not {}",
                self.name,
                self.metric.as_str(),
                requested.metric.as_str()
            )));
        }
        if self.model != requested.model {
            return Err(MemoryError::invalid(format!(
                "collection {} holds vectors of model {:?}, not {:?}",
                self.name, self.model, requested.model
            )));
        }
        Ok(())
    }

    /// Checks a vector for this collection (see [`check_vector`]).
    pub fn check_vector(&self, vector: &[f32]) -> Result<()> {
        check_vector(vector, self.dims, self.metric)
    }
}

/// Checks a vector: `dims` long, every component finite, a Euclidean norm of at most
/// √[`MAX_SQUARED_NORM`] (about 1.8e19, so every score between two vectors is finite), and
/// under cosine not all zero (subnormal components are fine: scores are computed without
/// underflow).
pub fn check_vector(vector: &[f32], dims: usize, metric: Metric) -> Result<()> {
    if vector.len() != dims {
        return Err(MemoryError::invalid(format!(
            "vector has {} dims, expected {dims}",
            vector.len()
        )));
    }
    check_finite(vector)?;
    if dot_f64(vector, vector) > MAX_SQUARED_NORM {
        return Err(MemoryError::invalid(
            "vector norm exceeds 1.8e19 (its squared norm must fit in an f32)",
        ));
    }
    if metric == Metric::Cosine && vector.iter().all(|x| *x == 0.0) {
        return Err(MemoryError::invalid(
            "zero vector has no direction under cosine",
        ));
    }
    Ok(())
}

fn check_finite(vector: &[f32]) -> Result<()> {
    match vector.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(MemoryError::invalid(format!(
            "vector component {i} is not finite"
        ))),
        None => Ok(()),
    }
}

/// A stored vector with its payload: [`VectorRecord::new`] and the `with_` methods build one
/// (it may gain fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct VectorRecord {
    /// Id within the collection and scope.
    pub id: VectorId,
    /// The embedding.
    pub vector: Vec<f32>,
    /// The text it embeds, if kept.
    pub text: Option<String>,
    /// Metadata for filters.
    pub metadata: Metadata,
    /// The conversation it came from (deleted with it).
    pub conversation_id: Option<ConversationId>,
}

impl VectorRecord {
    /// A record with no text or metadata.
    pub fn new(id: VectorId, vector: Vec<f32>) -> Self {
        Self {
            id,
            vector,
            text: None,
            metadata: Metadata::new(),
            conversation_id: None,
        }
    }

    /// The same keeping the text it embeds.
    #[must_use]
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    /// The same with this metadata.
    #[must_use]
    pub fn with_metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = metadata;
        self
    }

    /// The same belonging to a conversation (deleted with it), or to none.
    #[must_use]
    pub fn with_conversation_id(mut self, conversation: impl Into<Option<ConversationId>>) -> Self {
        self.conversation_id = conversation.into();
        self
    }
}

/// A search of [`VectorStore::search`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct VectorQuery {
    /// The query embedding.
    pub vector: Vec<f32>,
    /// How many hits at most (1..=1000).
    pub k: usize,
    /// Only records whose metadata matches.
    pub filter: Option<Filter>,
    /// Only hits scoring at least this.
    pub min_score: Option<f32>,
    /// Return the stored vectors in the hits (off by default: it is most of the bytes).
    pub include_vectors: bool,
}

/// Setters, so that a field added later breaks no caller (`VectorQuery` is `#[non_exhaustive]`).
impl VectorQuery {
    /// Sets [`min_score`](Self::min_score).
    #[must_use]
    pub fn with_min_score(mut self, min_score: f32) -> Self {
        self.min_score = Some(min_score);
        self
    }

    /// Sets [`include_vectors`](Self::include_vectors).
    #[must_use]
    pub fn with_include_vectors(mut self, include_vectors: bool) -> Self {
        self.include_vectors = include_vectors;
        self
    }
}

impl VectorQuery {
    /// The `k` nearest to `vector`.
    pub fn new(vector: Vec<f32>, k: usize) -> Self {
        Self {
            vector,
            k,
            filter: None,
            min_score: None,
            include_vectors: false,
        }
    }

    /// Restricts to records matching `filter`.
    #[must_use]
    pub fn with_filter(mut self, filter: Filter) -> Self {
        self.filter = Some(filter);
        self
    }

    /// Checks what needs no collection: `k`, `min_score`, finite components and the filter.
    /// The dimension and metric are checked against the stored collection by the backend
    /// ([`CollectionSpec::check_vector`]).
    pub fn validate(&self) -> Result<()> {
        if self.k == 0 || self.k > MAX_TOP_K {
            return Err(MemoryError::invalid(format!(
                "k must be in 1..={MAX_TOP_K}, got {}",
                self.k
            )));
        }
        if self.min_score.is_some_and(|s| !s.is_finite()) {
            return Err(MemoryError::invalid("min_score must be finite"));
        }
        check_finite(&self.vector)?;
        self.filter.as_ref().map_or(Ok(()), Filter::validate)
    }
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VectorHit {
    /// The record (its `vector` is empty unless `include_vectors` was set).
    pub record: VectorRecord,
    /// Similarity score under the collection's metric (higher is closer).
    pub score: f32,
}

/// Which records [`VectorStore::delete_vectors`] removes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VectorSelector {
    /// These ids.
    Ids(Vec<VectorId>),
    /// Every record whose metadata matches.
    Filter(Filter),
}

/// Orders hits best first: score descending, then id ascending. Shared so every exact backend
/// breaks ties the same way.
pub fn rank_hits(hits: &mut [VectorHit]) {
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.record.id.cmp(&b.record.id))
    });
}

/// Vector collections and search.
///
/// Collections belong to a namespace and fix dims, metric and model; records inside belong to
/// a scope (a subject's, or the shared scope for knowledge). Searches see only the caller's scope.
#[async_trait]
pub trait VectorStore: Send + Sync {
    /// Creates a collection, or checks an existing one.
    ///
    /// # Behavior
    /// - Idempotent: the same spec again returns the collection.
    /// - A different dims, metric or model id than the stored one is `InvalidInput`.
    async fn ensure_collection(
        &self,
        namespace: &Namespace,
        spec: CollectionSpec,
    ) -> Result<CollectionSpec>;

    /// Lists a namespace's collections by name.
    ///
    /// # Behavior
    /// - Sorted by name; empty for a namespace with none.
    async fn list_collections(&self, namespace: &Namespace) -> Result<Vec<CollectionSpec>>;

    /// Drops a collection of the namespace.
    ///
    /// # Behavior
    /// - Every record in it goes too, in every scope; returns whether it existed.
    /// - A collection made again under the same name starts empty.
    async fn drop_collection(&self, namespace: &Namespace, name: &str) -> Result<bool>;

    /// Inserts or replaces records by id.
    ///
    /// # Behavior
    /// - All or nothing: a wrong dimension, a NaN/∞ component, or a zero vector under cosine in
    ///   any record is `InvalidInput` and nothing is written.
    /// - A record with an existing id (same scope) replaces it; an id repeated within the batch
    ///   ends as its last record.
    /// - A missing collection is `NotFound`. Returns how many records were written.
    async fn upsert_vectors(
        &self,
        scope: &Scope,
        collection: &str,
        records: Vec<VectorRecord>,
    ) -> Result<usize>;

    /// Reads one record.
    ///
    /// # Behavior
    /// - A missing id, or another scope's, is `NotFound`.
    async fn get_vector(
        &self,
        scope: &Scope,
        collection: &str,
        id: &VectorId,
    ) -> Result<VectorRecord>;

    /// Deletes records of the scope by ids or filter; returns how many.
    ///
    /// # Behavior
    /// - Only the caller's scope is touched; unknown ids are ignored.
    async fn delete_vectors(
        &self,
        scope: &Scope,
        collection: &str,
        selector: VectorSelector,
    ) -> Result<usize>;

    /// The `k` records of the scope most similar to the query.
    ///
    /// # Behavior
    /// - Exact backends return the exact top-k by score, ties by id ascending; approximate ones
    ///   reach recall@10 ≥ 0.95 and still honour scope and filter exactly.
    /// - Returns `min(k, matching records)` hits, best first, only from the caller's scope, only
    ///   records matching the filter and scoring at least `min_score`.
    /// - A query of the wrong dimension, with NaN/∞, or zero under cosine is `InvalidInput`;
    ///   a missing collection is `NotFound`.
    async fn search(
        &self,
        scope: &Scope,
        collection: &str,
        query: VectorQuery,
    ) -> Result<Vec<VectorHit>>;
}
