//! [`MemoryBuilder`]: a [`Memory`]'s collaborators, and the checks that every enabled tier has
//! what it needs.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use mnemix_core::embed::{Embedder, HashingEmbedder};
use mnemix_core::{ConversationId, Fact, MemoryBackend, MemoryError, Namespace, Result, Scope};

use crate::config::MemoryConfig;
use crate::context::{ApproxTokenCounter, TokenCounter};
use crate::memories::Memories;
#[cfg(feature = "model-extractor")]
use crate::model::ModelExtractor;
use crate::schema;
use crate::tiers::recall::RECALLED_TERMS_BUDGET;
use crate::{FactExtractor, Memory, Summarizer};

pub(crate) type ErrorHook = Arc<dyn Fn(&Scope, &ConversationId, &MemoryError) + Send + Sync>;
pub(crate) type ExtractedHook = Arc<dyn Fn(&Scope, &ConversationId, &[Fact]) + Send + Sync>;

/// Builds a [`Memory`].
pub struct MemoryBuilder {
    backend: Arc<dyn MemoryBackend>,
    config: MemoryConfig,
    embedder: Option<Arc<dyn Embedder>>,
    summarizer: Option<Arc<dyn Summarizer>>,
    extractor: Option<Arc<dyn FactExtractor>>,
    tokens: Arc<dyn TokenCounter>,
    on_error: Option<ErrorHook>,
    on_extracted: Option<ExtractedHook>,
}

impl MemoryBuilder {
    pub(crate) fn new(backend: Arc<dyn MemoryBackend>) -> Self {
        Self {
            // Behind the front layer (a no-op for a `Store`): loads sanitized, input checked.
            backend: mnemix_core::Checked::wrap(backend),
            config: MemoryConfig::default(),
            embedder: None,
            summarizer: None,
            extractor: None,
            tokens: Arc::new(ApproxTokenCounter),
            on_error: None,
            on_extracted: None,
        }
    }

    /// The tiers (default: all off).
    #[must_use]
    pub fn config(mut self, config: MemoryConfig) -> Self {
        self.config = config;
        self
    }

    /// The embedder for semantic recall, knowledge queries and fact embeddings. By default, with
    /// the `local-embedder` feature, the local all-MiniLM-L6-v2 when its model is installed
    /// (see `mnemix_embed::LocalEmbedder::from_default_dir`: `MNEMIX_MODEL_DIR`, or
    /// `~/.cache/mnemix/models/all-MiniLM-L6-v2`); otherwise the offline
    /// [`HashingEmbedder`] of 384 dims. [`Context::embedder`](crate::Context::embedder) says which one a turn used.
    #[must_use]
    pub fn embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.embedder = Some(embedder);
        self
    }

    /// The summarizer, needed by `conversation.summarize`.
    #[must_use]
    pub fn summarizer(mut self, summarizer: Arc<dyn Summarizer>) -> Self {
        self.summarizer = Some(summarizer);
        self
    }

    /// The fact extractor, needed by `extract.enabled`.
    #[must_use]
    pub fn extractor(mut self, extractor: Arc<dyn FactExtractor>) -> Self {
        self.extractor = Some(extractor);
        self
    }

    /// How tokens are counted for `inject.token_budget` (default [`ApproxTokenCounter`]).
    #[must_use]
    pub fn token_counter(mut self, counter: Arc<dyn TokenCounter>) -> Self {
        self.tokens = counter;
        self
    }

    /// Called when extraction fails (the commit still succeeds).
    #[must_use]
    pub fn on_error(
        mut self,
        hook: impl Fn(&Scope, &ConversationId, &MemoryError) + Send + Sync + 'static,
    ) -> Self {
        self.on_error = Some(Arc::new(hook));
        self
    }

    /// Called with the facts each extraction stored: an audit log against memory poisoning.
    #[must_use]
    pub fn on_extracted(
        mut self,
        hook: impl Fn(&Scope, &ConversationId, &[Fact]) + Send + Sync + 'static,
    ) -> Self {
        self.on_extracted = Some(Arc::new(hook));
        self
    }

    /// `extract.extract_with`: the model extracts facts (and writes summaries) unless the
    /// builder was given its own.
    #[cfg(feature = "model-extractor")]
    fn use_model(&mut self, model: &str) -> Result<()> {
        let wanted = (self.config.extract.enabled && self.extractor.is_none())
            || (self.config.conversation.summarize && self.summarizer.is_none());
        if wanted {
            let extractor = Arc::new(ModelExtractor::from_env(model)?);
            self.extractor.get_or_insert_with(|| extractor.clone());
            self.summarizer.get_or_insert(extractor);
        }
        Ok(())
    }

    #[cfg(not(feature = "model-extractor"))]
    #[allow(clippy::unused_self)]
    fn use_model(&mut self, model: &str) -> Result<()> {
        Err(MemoryError::invalid(format!(
            "memory config: extract.extract_with: {model:?} needs mnemix-engine's \
             `model-extractor` feature (mnemix's `extract-model`)"
        )))
    }

    /// Checks the config and that every enabled tier has what it needs.
    pub fn build(mut self) -> Result<Memory> {
        self.config.validate()?;
        if let Some(model) = self.config.extract.extract_with.clone() {
            self.use_model(&model)?;
        }
        if self.config.conversation.summarize && self.summarizer.is_none() {
            return Err(MemoryError::invalid(
                "memory config: conversation.summarize: no Summarizer was given to the builder",
            ));
        }
        let vectors = self.backend.capabilities().has_vectors();
        for (enabled, field) in [
            (
                self.config.semantic_recall.enabled,
                "semantic_recall.enabled",
            ),
            (self.config.knowledge.enabled, "knowledge.enabled"),
        ] {
            if enabled && !vectors {
                return Err(MemoryError::invalid(format!(
                    "memory config: {field}: backend {} has no vector search",
                    self.backend.backend_name()
                )));
            }
        }
        if self.config.extract.enabled && self.extractor.is_none() {
            return Err(MemoryError::invalid(
                "memory config: extract.enabled: no FactExtractor was given to the builder",
            ));
        }
        let working_schema = self
            .config
            .working_memory
            .json_schema
            .as_ref()
            .map(|schema| schema::compile(schema, "memory config: working_memory.json_schema"))
            .transpose()?;
        let facts_namespace = self
            .config
            .facts
            .namespace
            .clone()
            .map(Namespace::new)
            .transpose()?;
        Ok(Memory {
            memories: Memories::new(Arc::clone(&self.backend)),
            backend: self.backend,
            embedder: match self.embedder {
                Some(embedder) => embedder,
                None => default_embedder()?,
            },
            summarizer: self.summarizer,
            extractor: self.extractor,
            tokens: self.tokens,
            on_error: self.on_error,
            on_extracted: self.on_extracted,
            facts_namespace,
            working_schema,
            vectors,
            recalled_terms: crate::terms::TermsCache::new(
                self.config.semantic_recall.language,
                RECALLED_TERMS_BUDGET,
            ),
            config: self.config,
            collections_ready: Mutex::new(HashSet::new()),
        })
    }
}

/// The embedder a builder given none uses: the local model when the `local-embedder` feature
/// is on and the model is installed, the hashing embedder otherwise.
#[cfg_attr(
    not(feature = "local-embedder"),
    allow(clippy::unnecessary_wraps, reason = "fallible with the local model")
)]
fn default_embedder() -> Result<Arc<dyn Embedder>> {
    #[cfg(feature = "local-embedder")]
    if let Some(local) = mnemix_embed::LocalEmbedder::from_default_dir()? {
        return Ok(Arc::new(local));
    }
    Ok(Arc::new(HashingEmbedder::new(384)))
}
