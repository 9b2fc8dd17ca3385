//! Our embedders as rig embedding models.

use std::sync::Arc;

use mnemix_core::embed::Embedder;
use rig_core::driver::{DynModel, Exchange, Local, Model, Opened, Opening, Step, Transport};
use rig_core::embeddings::{Embedding, EmbeddingResponse};
use rig_core::error::ProviderError;
use rig_core::operation::Embedding as EmbeddingOp;
use rig_core::wire::Capabilities;

/// How many texts rig sends in one call (its `EmbeddingsBuilder` batches by this).
const MAX_DOCUMENTS: usize = 64;

/// Any of our [`Embedder`]s — the offline `HashingEmbedder`, a local MiniLM, an
/// OpenAI-compatible API — as a rig embedding model, for rig's `EmbeddingsBuilder` and for
/// [`VectorIndex`](crate::VectorIndex) queries. It runs in process: rig's wire is
/// [`Local`], its transport the embedder.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use mnemix_core::embed::HashingEmbedder;
///
/// let model = mnemix_rig::embedding_model(Arc::new(HashingEmbedder::new(64)));
/// let embedding = model.embed_text("tea with lemon").await?;
/// assert_eq!(embedding.vec.len(), 64);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub fn embedding_model(embedder: Arc<dyn Embedder>) -> DynModel<EmbeddingOp> {
    let wire = Local::<EmbeddingOp>::new("mnemix")
        .with_id(embedder.model_id())
        .with_capabilities(Capabilities::embedding(MAX_DOCUMENTS, embedder.dims()));
    Model::new(wire, EmbedderTransport(embedder)).into()
}

/// The transport of [`embedding_model`]: it answers a batch of texts with their vectors.
#[derive(Clone)]
struct EmbedderTransport(Arc<dyn Embedder>);

impl Transport<Local<EmbeddingOp>> for EmbedderTransport {
    fn send(&self, texts: Vec<String>, _exchange: Exchange) -> Opening<Step<EmbeddingOp>> {
        let embedder = Arc::clone(&self.0);
        Opening::new(async move {
            let vectors = embedder
                .embed(&texts)
                .await
                .map_err(|e| ProviderError::Provider(e.to_string()))?;
            let embeddings = texts
                .into_iter()
                .zip(vectors)
                .map(|(document, vector)| Embedding {
                    document,
                    vec: vector.into_iter().map(f64::from).collect(),
                })
                .collect();
            let end = Step::End(EmbeddingResponse::new(embeddings));
            Ok(Opened::new(futures::stream::iter([Ok(end)])))
        })
    }
}
