//! Turning text into vectors: the [`Embedder`] contract, an offline default and a cache.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use crate::cache::{CacheStore, MAX_CACHE_BATCH};
use crate::error::{MemoryError, Result};
use crate::lexical::tokenize;
use crate::scope::Namespace;

/// Makes embeddings for texts. The model id is stored with a collection, so vectors of
/// different models are never compared.
#[async_trait]
pub trait Embedder: Send + Sync {
    /// The model id (stored as the collection's `model`).
    fn model_id(&self) -> &str;

    /// Components per vector.
    fn dims(&self) -> usize;

    /// One vector per text, in order; never a zero vector.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>>;
}

/// An offline, deterministic embedder by feature hashing: every token (lexical rules) and each
/// of its character trigrams adds ±1 to a component chosen by a stable hash, and the vector is
/// L2-normalised. No model, no network; texts sharing words or word pieces land close.
///
/// It is for demos, tests and offline use, not a substitute for a trained model. The hash is
/// FNV-1a, written out here because the vectors are persisted: it must never change with the
/// Rust version (std's `DefaultHasher` may).
///
/// ```
/// use mnemix_core::embed::{Embedder, HashingEmbedder};
/// use mnemix_core::adapter::cosine;
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let e = HashingEmbedder::new(256);
/// let v = e.embed(&["hotel near the station".into(), "hotels by the station".into(),
///                   "quarterly tax filing".into()]).await?;
/// assert!(cosine(&v[0], &v[1]) > cosine(&v[0], &v[2]));
/// # Ok::<(), mnemix_core::MemoryError>(()) }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct HashingEmbedder {
    dims: usize,
    model_id: String,
}

impl HashingEmbedder {
    /// An embedder of `dims` components (at least 8).
    pub fn new(dims: usize) -> Self {
        let dims = dims.max(8);
        Self {
            dims,
            model_id: format!("hashing-fnv1a-{dims}"),
        }
    }

    /// Embeds one text synchronously.
    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0.0f32; self.dims];
        let mut add = |feature: &str, weight: f32| {
            let h = fnv1a(feature.as_bytes());
            let index = (h % self.dims as u64) as usize;
            let sign = if (h >> 63) == 0 { 1.0 } else { -1.0 };
            v[index] += sign * weight;
        };
        for token in tokenize(text) {
            add(&token, 1.0);
            let chars: Vec<char> = token.chars().collect();
            for gram in chars.windows(3) {
                add(&format!("#{}", gram.iter().collect::<String>()), 0.5);
            }
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm == 0.0 {
            // No tokens: a fixed direction, so the vector is still valid under cosine.
            v[0] = 1.0;
        } else {
            for x in &mut v {
                *x /= norm;
            }
        }
        v
    }
}

impl Default for HashingEmbedder {
    fn default() -> Self {
        Self::new(256)
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[async_trait]
impl Embedder for HashingEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn dims(&self) -> usize {
        self.dims
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }
}

/// An [`Embedder`] that keeps every vector in a [`CacheStore`] under the hash of (model id,
/// text), so each text is embedded once per model, across restarts and workers sharing the
/// store.
///
/// The cache is an optimisation, never a source of failure: an entry that cannot be read or
/// decoded counts as a miss, and a failed write is counted in [`CacheStats::errors`] but does
/// not fail the call. Only the misses of a batch go to the inner embedder, in one call.
///
/// ```
/// use std::sync::Arc;
/// use mnemix_core::embed::{CachedEmbedder, Embedder, HashingEmbedder};
/// use mnemix_core::{InMemoryBackend, Namespace};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let store = Arc::new(InMemoryBackend::new());
/// let cached = CachedEmbedder::new(Arc::new(HashingEmbedder::new(384)), store, Namespace::new("embeddings")?);
/// cached.embed(&["a cup of tea".into()]).await?;
/// cached.embed(&["a cup of tea".into(), "a pot of coffee".into()]).await?;
/// assert_eq!((cached.stats().hits, cached.stats().misses), (1, 2));
/// # Ok::<(), mnemix_core::MemoryError>(()) }).unwrap();
/// ```
pub struct CachedEmbedder {
    inner: Arc<dyn Embedder>,
    store: Arc<dyn CacheStore>,
    namespace: Namespace,
    ttl: Option<Duration>,
    hits: AtomicU64,
    misses: AtomicU64,
    errors: AtomicU64,
}

/// Counters of a [`CachedEmbedder`] since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Texts served from the cache.
    pub hits: u64,
    /// Texts sent to the inner embedder.
    pub misses: u64,
    /// Batch reads or writes of the cache that failed (the call itself went on): one per
    /// failed `cache_get_many` or `cache_set_many`, whatever its size.
    pub errors: u64,
}

impl CachedEmbedder {
    /// Caches `inner`'s vectors in `store` under `namespace`, without expiry.
    pub fn new(inner: Arc<dyn Embedder>, store: Arc<dyn CacheStore>, namespace: Namespace) -> Self {
        Self {
            inner,
            store,
            namespace,
            ttl: None,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }

    /// Entries expire after `ttl` (by the store's clock).
    #[must_use]
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Hits, misses and errors so far.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }

    /// The cache key of `text`: `embedding:` and the SHA-256 of the model id and the text.
    pub fn key(&self, text: &str) -> String {
        let mut hasher = Sha256::new();
        hasher.update(self.inner.model_id().as_bytes());
        hasher.update([0]);
        hasher.update(text.as_bytes());
        format!("embedding:{}", hex::encode(hasher.finalize()))
    }

    /// The cached bytes of every key, one batch read per [`MAX_CACHE_BATCH`] keys.
    async fn read_batches(&self, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut found = Vec::with_capacity(keys.len());
        for batch in keys.chunks(MAX_CACHE_BATCH) {
            found.extend(self.store.cache_get_many(&self.namespace, batch).await?);
        }
        Ok(found)
    }

    fn decode(&self, bytes: &[u8]) -> Option<Vec<f32>> {
        (bytes.len() == self.inner.dims() * 4).then(|| {
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    }
}

impl fmt::Debug for CachedEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedEmbedder")
            .field("model", &self.inner.model_id())
            .field("namespace", &self.namespace)
            .field("ttl", &self.ttl)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Embedder for CachedEmbedder {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn dims(&self) -> usize {
        self.inner.dims()
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let keys: Vec<String> = texts.iter().map(|t| self.key(t)).collect();
        // A failed read is a miss of the whole batch: the cache may lose entries, never a turn.
        let mut vectors: Vec<Option<Vec<f32>>> = if let Ok(reads) = self.read_batches(&keys).await {
            reads
                .into_iter()
                .map(|read| read.and_then(|bytes| self.decode(&bytes)))
                .collect()
        } else {
            self.errors.fetch_add(1, Ordering::Relaxed);
            vec![None; keys.len()]
        };
        let missing: Vec<usize> = (0..texts.len()).filter(|&i| vectors[i].is_none()).collect();
        self.hits
            .fetch_add((texts.len() - missing.len()) as u64, Ordering::Relaxed);
        self.misses
            .fetch_add(missing.len() as u64, Ordering::Relaxed);
        if !missing.is_empty() {
            let batch: Vec<String> = missing.iter().map(|&i| texts[i].clone()).collect();
            let fresh = self.inner.embed(&batch).await?;
            if fresh.len() != batch.len() {
                return Err(MemoryError::model(
                    "embedder",
                    format!("{} vectors for {} texts", fresh.len(), batch.len()),
                ));
            }
            let entries: Vec<(String, Vec<u8>)> = missing
                .iter()
                .zip(&fresh)
                .map(|(&i, vector)| {
                    let bytes = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
                    (keys[i].clone(), bytes)
                })
                .collect();
            for batch in entries.chunks(MAX_CACHE_BATCH) {
                let written = self
                    .store
                    .cache_set_many(&self.namespace, batch.to_vec(), self.ttl)
                    .await;
                if written.is_err() {
                    self.errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            for (i, vector) in missing.into_iter().zip(fresh) {
                vectors[i] = Some(vector);
            }
        }
        Ok(vectors.into_iter().flatten().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_unit_vectors() {
        let e = HashingEmbedder::new(64);
        let a = e.embed_one("Window seats, please");
        assert_eq!(a, e.embed_one("window SEATS please!"));
        assert!((a.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-5);
        assert!((e.embed_one("")[0] - 1.0).abs() < f32::EPSILON);
        // FNV-1a's published test vector: the hash must never drift.
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    /// A cache that fails every call.
    struct BrokenCache;

    #[async_trait]
    impl CacheStore for BrokenCache {
        async fn cache_get(&self, _: &Namespace, _: &str) -> Result<Option<Vec<u8>>> {
            Err(MemoryError::invalid("cache down"))
        }
        async fn cache_set(
            &self,
            _: &Namespace,
            _: &str,
            _: Vec<u8>,
            _: Option<Duration>,
        ) -> Result<()> {
            Err(MemoryError::invalid("cache down"))
        }
        async fn cache_delete(&self, _: &Namespace, _: &str) -> Result<bool> {
            Err(MemoryError::invalid("cache down"))
        }
    }

    #[tokio::test]
    async fn a_failing_cache_never_fails_embedding() {
        let inner = Arc::new(HashingEmbedder::new(32));
        let cached = CachedEmbedder::new(
            inner.clone(),
            Arc::new(BrokenCache),
            Namespace::new("e").unwrap(),
        );
        let texts = vec!["tea".to_owned(), "coffee".to_owned()];
        let vectors = cached.embed(&texts).await.unwrap();
        assert_eq!(vectors, inner.embed(&texts).await.unwrap());
        assert_eq!(
            cached.stats(),
            CacheStats {
                hits: 0,
                misses: 2,
                errors: 2
            }
        );
    }

    #[tokio::test]
    async fn a_corrupt_entry_is_a_miss() {
        let store = Arc::new(crate::InMemoryBackend::new());
        let namespace = Namespace::new("e").unwrap();
        let inner = Arc::new(HashingEmbedder::new(32));
        let cached = CachedEmbedder::new(inner.clone(), store.clone(), namespace.clone());
        store
            .cache_set(&namespace, &cached.key("tea"), vec![1, 2, 3], None)
            .await
            .unwrap();
        let vectors = cached.embed(&["tea".to_owned()]).await.unwrap();
        assert_eq!(vectors[0], inner.embed_one("tea"));
        assert_eq!(cached.stats().misses, 1);
        cached.embed(&["tea".to_owned()]).await.unwrap();
        assert_eq!(cached.stats().hits, 1, "the corrupt entry was rewritten");
    }
}
