//! The server's embedder, run where it cannot hold up other tenants: hashing a text is CPU
//! work in proportion to its length (a tool call may carry 4 MB), and on the runtime's threads
//! it would delay every other request those threads serve. Each call runs on Tokio's blocking
//! pool instead.

use std::sync::Arc;

use async_trait::async_trait;
use mnemix_core::embed::{Embedder, HashingEmbedder};
use mnemix_core::{MemoryError, Result};

/// An embedder whose work runs on the blocking pool: `embed_one` embeds one text
/// synchronously.
pub struct OffRuntime<F> {
    embed_one: Arc<F>,
    model_id: String,
    dims: usize,
}

impl OffRuntime<Box<dyn Fn(&str) -> Vec<f32> + Send + Sync>> {
    /// The offline hashing embedder (what `mnemix search` uses), off the runtime.
    pub fn hashing() -> Self {
        let hashing = HashingEmbedder::default();
        let (model_id, dims) = (hashing.model_id().to_owned(), hashing.dims());
        Self::new(
            Box::new(move |text: &str| hashing.embed_one(text)),
            model_id,
            dims,
        )
    }
}

impl<F> OffRuntime<F>
where
    F: Fn(&str) -> Vec<f32> + Send + Sync + 'static,
{
    /// Embeds with `embed_one`, as the model `model_id` of `dims` components.
    pub fn new(embed_one: F, model_id: String, dims: usize) -> Self {
        Self {
            embed_one: Arc::new(embed_one),
            model_id,
            dims,
        }
    }
}

#[async_trait]
impl<F> Embedder for OffRuntime<F>
where
    F: Fn(&str) -> Vec<f32> + Send + Sync + 'static,
{
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn dims(&self) -> usize {
        self.dims
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let embed_one = Arc::clone(&self.embed_one);
        let texts = texts.to_vec();
        tokio::task::spawn_blocking(move || texts.iter().map(|t| embed_one(t)).collect())
            .await
            .map_err(|e| MemoryError::model("embedder", e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::thread::ThreadId;

    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn embedding_runs_off_the_runtime_thread() {
        let ran_on: Arc<Mutex<Vec<ThreadId>>> = Arc::default();
        let embedder = OffRuntime::new(
            {
                let ran_on = Arc::clone(&ran_on);
                move |text: &str| {
                    ran_on.lock().unwrap().push(std::thread::current().id());
                    vec![text.len() as f32; 4]
                }
            },
            "test".to_owned(),
            4,
        );
        let vectors = embedder
            .embed(&["ab".to_owned(), "abc".to_owned()])
            .await
            .unwrap();
        assert_eq!(vectors, [vec![2.0; 4], vec![3.0; 4]]);
        let runtime_thread = std::thread::current().id();
        let ran_on = ran_on.lock().unwrap();
        assert_eq!(ran_on.len(), 2);
        assert!(
            ran_on.iter().all(|id| *id != runtime_thread),
            "each text was embedded off the runtime's thread"
        );
    }

    #[tokio::test]
    async fn the_hashing_embedder_off_the_runtime_gives_the_same_vectors() {
        let texts = vec!["hotel near the station".to_owned()];
        let off = OffRuntime::hashing().embed(&texts).await.unwrap();
        let on = HashingEmbedder::default().embed(&texts).await.unwrap();
        assert_eq!(off, on);
        assert_eq!(
            OffRuntime::hashing().model_id(),
            HashingEmbedder::default().model_id()
        );
    }
}
