//! rig's [`VectorStoreIndex`] and [`InsertDocuments`] over our vector collections.

// rig's traits return its `VectorStoreError` (over 200 bytes); its size is rig's to choose.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use mnemix_core::embed::Embedder;
use mnemix_core::limits::MAX_TOP_K;
use mnemix_core::{
    CollectionSpec, FieldPath, Filter, FilterValue, MemoryError, Metadata, Scoped, VectorHit,
    VectorId, VectorRecord,
};
use rig_core::driver::DynModel;
use rig_core::embeddings::Embedding;
use rig_core::operation::Embedding as EmbeddingOp;
use rig_core::vector_store::request::{Filter as RigFilter, FilterError, VectorSearchRequest};
use rig_core::vector_store::{
    flatten_embedded, InsertDocuments, VectorSearchIdResult, VectorSearchResult, VectorStoreError,
    VectorStoreIndex,
};
use rig_core::wasm_compat::WasmCompatSend;
use rig_core::Embed;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::embedding::embedding_model;

/// A rig vector index on one of our collections, in one scope: documents inserted and
/// searched through it are that scope's only.
///
/// - **Documents** must serialize to a JSON object: its fields are the record's metadata (what
///   rig's filters match, what `top_n` deserializes back) and the embedded text is the record's
///   text.
/// - **Ids**: a document with an `id` field (string or integer) is stored under that id
///   (`id#n` for the n-th of several embeddings), so inserting it again replaces it; without
///   one, the id is a digest of the document and the embedded text, so inserting the same
///   document twice stores it once.
/// - **Filters**: rig's `Filter` (`eq`, `gt`, `lt`, `and`, `or`) becomes our filter AST, never
///   query text: `eq` on a top-level field with a string, number or boolean, `gt`/`lt` with a
///   number or string. Anything else is a `FilterError`.
/// - **`samples`** is our `k` (at most 1,000; 0 returns nothing); **`threshold`** our
///   `min_score`. Scores are the collection metric's similarity, higher is closer.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use mnemix_core::embed::HashingEmbedder;
/// use mnemix_rig::VectorIndex;
/// use rig_core::vector_store::{request::VectorSearchRequest, InsertDocuments, VectorStoreIndex};
///
/// #[derive(serde::Serialize, serde::Deserialize, rig_core::Embed)]
/// struct Note {
///     id: String,
///     #[embed]
///     text: String,
/// }
///
/// let store = mnemix::open("sqlite::memory:").await?;
/// let embedder = Arc::new(HashingEmbedder::new(64));
/// let index = VectorIndex::with_embedder(store.scope("support", "user-42")?, "notes", embedder).await?;
///
/// let note = Note { id: "n1".into(), text: "prefers tea with lemon".into() };
/// index.insert(vec![note]).await?;
///
/// let request = VectorSearchRequest::builder().query("tea").samples(3).build();
/// let hits = index.top_n::<Note>(request).await?;
/// assert_eq!(hits[0].id, "n1");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct VectorIndex {
    scoped: Scoped,
    collection: String,
    model: DynModel<EmbeddingOp>,
}

impl VectorIndex {
    /// An index on the collection `spec` describes (created if missing, checked if not), with
    /// `model` embedding the queries. The model must make vectors of `spec.dims`.
    pub async fn new(
        scoped: Scoped,
        spec: CollectionSpec,
        model: impl Into<DynModel<EmbeddingOp>>,
    ) -> Result<Self, MemoryError> {
        let spec = scoped.ensure_collection(spec).await?;
        Ok(Self {
            scoped,
            collection: spec.name,
            model: model.into(),
        })
    }

    /// An index on the cosine collection `collection` whose dimension and model id are
    /// `embedder`'s, with `embedder` embedding queries (and documents, through
    /// [`VectorIndex::insert`]).
    pub async fn with_embedder(
        scoped: Scoped,
        collection: &str,
        embedder: Arc<dyn Embedder>,
    ) -> Result<Self, MemoryError> {
        let spec = CollectionSpec::new(collection, embedder.dims(), embedder.model_id());
        Self::new(scoped, spec, embedding_model(embedder)).await
    }

    /// The model that embeds queries (and, through [`VectorIndex::insert`], documents).
    pub fn model(&self) -> &DynModel<EmbeddingOp> {
        &self.model
    }

    /// Embeds `documents` with the index's model (every `#[embed]` text of each) and inserts
    /// them: rig's `EmbeddingsBuilder` and [`InsertDocuments::insert_documents`] in one call.
    pub async fn insert<Doc>(&self, documents: Vec<Doc>) -> Result<(), VectorStoreError>
    where
        Doc: Serialize + Embed + WasmCompatSend,
    {
        let embedded = rig_core::embeddings::EmbeddingsBuilder::new(self.model.clone())
            .documents(documents)
            .map_err(|e| VectorStoreError::datastore(MemoryError::invalid(e.to_string())))?
            .build()
            .await?;
        self.insert_documents(embedded).await
    }

    async fn search(
        &self,
        request: VectorSearchRequest<RigFilter<Value>>,
    ) -> Result<Vec<VectorHit>, VectorStoreError> {
        let samples = request.samples();
        if samples == 0 {
            return Ok(Vec::new());
        }
        if samples > MAX_TOP_K as u64 {
            return Err(VectorStoreError::SamplesOutOfRange {
                requested: samples,
                max: MAX_TOP_K as u64,
            });
        }
        let filter = request.filter().cloned().map(to_filter).transpose()?;
        let query = self.model.embed_text(request.query()).await?;
        let mut search = self
            .scoped
            .vectors(&self.collection)
            .search(query.vec.iter().map(|&x| x as f32).collect())
            .k(samples as usize);
        if let Some(filter) = filter {
            search = search.filter(filter);
        }
        if let Some(threshold) = request.threshold() {
            search = search.min_score(threshold as f32);
        }
        search.await.map_err(VectorStoreError::datastore)
    }
}

impl InsertDocuments for VectorIndex {
    async fn insert_documents<Doc: Serialize + Embed + WasmCompatSend>(
        &self,
        documents: Vec<(Doc, Vec<Embedding>)>,
    ) -> Result<(), VectorStoreError> {
        let mut records = Vec::new();
        for (document, embeddings) in documents {
            let count = embeddings.len();
            let mut index = 0;
            records.extend(flatten_embedded(
                vec![(document, embeddings)],
                |document, embedding| {
                    index += 1;
                    to_record(document, embedding, index, count)
                },
            )?);
        }
        if records.is_empty() {
            return Ok(());
        }
        self.scoped
            .vectors(&self.collection)
            .upsert(records)
            .await
            .map(drop)
            .map_err(VectorStoreError::datastore)
    }
}

impl VectorStoreIndex for VectorIndex {
    type Filter = RigFilter<Value>;

    async fn top_n<T: DeserializeOwned + WasmCompatSend>(
        &self,
        req: VectorSearchRequest<Self::Filter>,
    ) -> Result<Vec<VectorSearchResult<T>>, VectorStoreError> {
        self.search(req)
            .await?
            .into_iter()
            .map(|hit| {
                Ok(VectorSearchResult {
                    score: f64::from(hit.score),
                    id: hit.record.id.as_str().to_owned(),
                    document: serde_json::from_value(Value::Object(hit.record.metadata))?,
                })
            })
            .collect()
    }

    async fn top_n_ids(
        &self,
        req: VectorSearchRequest<Self::Filter>,
    ) -> Result<Vec<VectorSearchIdResult>, VectorStoreError> {
        Ok(self
            .search(req)
            .await?
            .into_iter()
            .map(|hit| VectorSearchIdResult {
                score: f64::from(hit.score),
                id: hit.record.id.as_str().to_owned(),
            })
            .collect())
    }
}

/// One embedding of a document as our record (see [`VectorIndex`] for ids and metadata).
fn to_record(
    document: &Value,
    embedding: Embedding,
    index: usize,
    count: usize,
) -> Result<VectorRecord, VectorStoreError> {
    let Value::Object(metadata) = document else {
        return Err(VectorStoreError::datastore(MemoryError::invalid(
            "a rig document must serialize to a JSON object: its fields are the record's \
             metadata, which filters match and top_n reads back",
        )));
    };
    let own_id = match metadata.get("id") {
        Some(Value::String(id)) => Some(id.clone()),
        Some(Value::Number(id)) if id.is_i64() || id.is_u64() => Some(id.to_string()),
        _ => None,
    };
    let id = match own_id {
        Some(id) if count == 1 => id,
        Some(id) => format!("{id}#{index}"),
        None => digest(metadata, &embedding.document),
    };
    let mut record = VectorRecord::new(
        VectorId::new(id).map_err(VectorStoreError::datastore)?,
        embedding.vec.iter().map(|&x| x as f32).collect(),
    );
    record.text = Some(embedding.document);
    record.metadata.clone_from(metadata);
    Ok(record)
}

/// The id of a document without one: the first 128 bits of SHA-256 over the document's JSON and
/// the embedded text, in hex.
fn digest(metadata: &Metadata, text: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(Value::Object(metadata.clone()).to_string());
    hasher.update([0]);
    hasher.update(text);
    hex::encode(&hasher.finalize()[..16])
}

/// rig's filter as our filter AST: keys are top-level fields, values bound as values.
pub fn to_filter(filter: RigFilter<Value>) -> Result<Filter, FilterError> {
    Ok(match filter {
        RigFilter::Eq(key, value) => Filter::Eq {
            value: scalar(&key, value, true)?,
            path: field(key),
        },
        RigFilter::Gt(key, value) => {
            Filter::range(field(key.clone())).gt(scalar(&key, value, false)?)
        }
        RigFilter::Lt(key, value) => {
            Filter::range(field(key.clone())).lt(scalar(&key, value, false)?)
        }
        RigFilter::And(left, right) => Filter::and([to_filter(*left)?, to_filter(*right)?]),
        RigFilter::Or(left, right) => Filter::or([to_filter(*left)?, to_filter(*right)?]),
    })
}

/// A rig key names one top-level field, dots included.
fn field(key: String) -> FieldPath {
    FieldPath::new([key])
}

fn scalar(key: &str, value: Value, equality: bool) -> Result<FilterValue, FilterError> {
    match value {
        Value::String(s) => Ok(FilterValue::String(s)),
        Value::Number(n) => n
            .as_f64()
            .map(FilterValue::Number)
            .ok_or_else(|| FilterError::TypeError(n.to_string())),
        Value::Bool(b) if equality => Ok(FilterValue::Bool(b)),
        other => Err(FilterError::Must(
            key.to_owned(),
            if equality {
                format!("compare with a string, number or boolean, not {other}")
            } else {
                format!("compare with a string or number, not {other}")
            },
        )),
    }
}
