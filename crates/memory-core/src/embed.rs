//! Turning text into vectors: the [`Embedder`] contract and an offline default.

use async_trait::async_trait;

use crate::error::Result;
use crate::lexical::tokenize;

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
/// use memory_core::embed::{Embedder, HashingEmbedder};
/// use memory_core::similarity::cosine;
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let e = HashingEmbedder::new(256);
/// let v = e.embed(&["hotel near the station".into(), "hotels by the station".into(),
///                   "quarterly tax filing".into()]).await?;
/// assert!(cosine(&v[0], &v[1]) > cosine(&v[0], &v[2]));
/// # Ok::<(), memory_core::MemoryError>(()) }).unwrap();
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
}
