//! The memory engine: the tiers of [`MemoryConfig`] composed over any [`MemoryBackend`].
//!
//! An agent turn is two calls: [`Memory::prepare`] before the model runs (window, summary,
//! recalled messages, knowledge, facts and working memory, as a [`Context`]) and
//! [`Memory::commit`] after it (append, embed, extract facts). The engine uses only the
//! contracts, so it behaves the same on every backend.
//!
//! ```
//! use std::sync::Arc;
//! use mnemix_core::{InMemoryBackend, Message, Scope};
//! use mnemix_engine::config::MemoryConfig;
//! use mnemix_engine::Memory;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> mnemix_core::Result<()> {
//! let mut config = MemoryConfig::default();
//! config.conversation.enabled = true;
//! config.facts.enabled = true;
//! let memory = Memory::builder(Arc::new(InMemoryBackend::new())).config(config).build()?;
//!
//! let scope = Scope::for_subject("user-42")?;
//! let (thread, _history) = memory.auto_conversation(&scope, "support", 50).await?;
//! let context = memory.prepare(&scope, &thread.id, "Where do I deploy?").await?;
//! let _system = context.system_prompt("You are a support agent.");
//! // … call the model with `_system` and `context.messages` …
//! memory
//!     .commit(&scope, &thread.id, vec![Message::user("Where do I deploy?"), Message::assistant("To fly.io.")])
//!     .await?;
//! assert_eq!(memory.prepare(&scope, &thread.id, "").await?.messages.len(), 2);
//! # Ok(()) }
//! ```

pub mod config;
mod context;
mod memories;
#[cfg(feature = "model-extractor")]
mod model;
pub mod prompt_cache;
mod schema;
mod session;
mod working;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

pub use context::{
    escape_fenced, user_memory_block, ApproxTokenCounter, Context, RecalledMessage, TokenCounter,
    WorkingMemoryBlock,
};
pub use memories::{
    Memories, MemoryHit, MemoryOutcome, MemoryQuery, MemorySource, NewMemory, SearchScope,
    StoredMemory,
};
#[cfg(feature = "model-extractor")]
pub use model::ModelExtractor;
pub use session::{Session, SessionView};
pub use working::{ToolDefinition, WORKING_MEMORY_TOOLS};

use crate::config::{MemoryConfig, MergeStrategy, WorkingMemoryScope};
use mnemix_core::adapter::rank_hits;
use mnemix_core::adapter::reciprocal_rank_fusion;
use mnemix_core::embed::{Embedder, HashingEmbedder};
use mnemix_core::lexical::{self, Language};
use mnemix_core::registry::KindSpec;
use mnemix_core::Filter;
use mnemix_core::MemoryBackend;
use mnemix_core::WorkingMemoryKey;
use mnemix_core::{assert_valid_continuation, ContinuationOptions};
use mnemix_core::{
    AppendOptions, AppendReceipt, Conversation, ConversationUpdate, LoadOptions, NewConversation,
};
use mnemix_core::{CollectionSpec, VectorQuery, VectorRecord};
use mnemix_core::{ConversationId, MessageId, Namespace, Scope, VectorId};
use mnemix_core::{Fact, FactSource, NewFact, RecallQuery, RememberOptions, RememberStatus};
use mnemix_core::{MemoryError, Result};
use mnemix_core::{Message, Part, Role, StoredMessage};
use mnemix_core::{Timestamp, Ttl};

/// The collection (in the caller's namespace) holding message embeddings for semantic recall.
pub const MESSAGE_COLLECTION: &str = "agent-memory-messages";
/// The conversation cursor below which every message is embedded.
pub const EMBEDDED_CURSOR: &str = "agent-memory.embedded";
/// The conversation cursor below which every message went through fact extraction.
pub const EXTRACTED_CURSOR: &str = "agent-memory.extracted";
/// The conversation metadata key holding the stored summary; also the metadata key of the
/// summary message a [`SessionView::Summarizing`] read puts first (the last seq it covers).
pub const SUMMARY_METADATA_KEY: &str = "agent_memory_summary";

/// How much memory a [`Memory`] keeps the terms of recalled messages in (about 500 bytes for a
/// paragraph, so some 30,000 messages): re-ranking a turn's candidates then reads no message's
/// words again.
const RECALLED_TERMS_BUDGET: usize = 16 << 20;

/// Summarises messages that left the window.
#[async_trait]
pub trait Summarizer: Send + Sync {
    /// The summary of `previous` (the summary so far, if any) followed by `messages`, which are
    /// the messages that left the window since, oldest first.
    async fn summarize(&self, previous: Option<&str>, messages: &[StoredMessage])
        -> Result<String>;
}

/// A fact an extractor found, with its confidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtractedFact {
    /// The fact.
    pub text: String,
    /// How sure the extractor is (0–1); below `extract.min_confidence` it is dropped.
    pub confidence: f32,
    /// Tags, added to the configured ones.
    #[serde(default)]
    pub tags: Vec<String>,
    /// A key: a new fact of the same key supersedes the old one.
    #[serde(default)]
    pub key: Option<String>,
    /// A kind.
    #[serde(default)]
    pub kind: Option<String>,
    /// How long it lasts (`"24h"`); without one, `extract.ttl` applies, and without that it is
    /// permanent.
    #[serde(default)]
    pub ttl: Option<Ttl>,
    /// Structured data: with a `kind` registered in the facts' namespace, the fact is stored
    /// as a memory of that kind ([`Memories`]), checked against its schema and superseding by
    /// its unique fields; `text` may then be empty. Data that breaks the schema goes to
    /// `on_error` and is skipped.
    #[serde(default)]
    pub data: Option<serde_json::Value>,
}

impl ExtractedFact {
    /// A fact with a confidence.
    pub fn new(text: impl Into<String>, confidence: f32) -> Self {
        Self {
            text: text.into(),
            confidence,
            tags: Vec::new(),
            key: None,
            kind: None,
            ttl: None,
            data: None,
        }
    }
}

/// The kind and data of an extracted fact meant as a structured memory.
fn structured(fact: &ExtractedFact) -> Option<(&str, &serde_json::Value)> {
    fact.kind.as_deref().zip(fact.data.as_ref())
}

/// Distils facts from new messages (typically a small model in JSON mode).
#[async_trait]
pub trait FactExtractor: Send + Sync {
    /// Facts found in `messages`: the conversation's messages that no extraction has seen yet,
    /// oldest first.
    async fn extract(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        messages: &[StoredMessage],
    ) -> Result<Vec<ExtractedFact>>;

    /// [`extract`](Self::extract), knowing the kinds registered in the facts' namespace, so
    /// that it may also return structured memories of them (an [`ExtractedFact`] with `kind`
    /// and `data`). The engine calls this one; by default it ignores the kinds.
    async fn extract_into(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        messages: &[StoredMessage],
        kinds: &[KindSpec],
    ) -> Result<Vec<ExtractedFact>> {
        let _ = kinds;
        self.extract(scope, conversation, messages).await
    }
}

/// What happened to fact extraction in a commit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ExtractionReport {
    /// Extraction is off, or every message was seen before.
    Skipped,
    /// The extractor ran over `messages` messages.
    Ran {
        /// Messages the extractor saw.
        messages: usize,
        /// Facts it proposed.
        proposed: usize,
        /// Facts stored (created or superseding); duplicates and low-confidence ones are not.
        stored: Vec<Fact>,
    },
    /// Extraction failed; the turn is committed and the same messages are offered again next
    /// time.
    Failed {
        /// What went wrong.
        error: String,
    },
}

/// What happened to embedding for semantic recall in a commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum EmbeddingReport {
    /// Semantic recall is off, or every message was embedded before.
    Skipped,
    /// New messages were embedded (those without text are passed over).
    Embedded {
        /// Messages embedded.
        messages: usize,
    },
    /// Embedding failed (the embedder is down, say); the turn is committed and the same
    /// messages are embedded by the next commit.
    Failed {
        /// What went wrong.
        error: String,
    },
}

/// The result of [`Memory::commit`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommitReceipt {
    /// The append.
    pub append: AppendReceipt,
    /// Embedding for semantic recall.
    pub embedding: EmbeddingReport,
    /// Fact extraction.
    pub extraction: ExtractionReport,
}

type ErrorHook = Arc<dyn Fn(&Scope, &ConversationId, &MemoryError) + Send + Sync>;
type ExtractedHook = Arc<dyn Fn(&Scope, &ConversationId, &[Fact]) + Send + Sync>;

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
    /// [`HashingEmbedder`] of 384 dims. [`Context::embedder`] says which one a turn used.
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
            recalled_terms: lexical::TermsCache::new(
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

/// What a turn's query found in the first round of `prepare`.
struct Found {
    /// The query's embedding and the conversation's messages nearest to it, when semantic
    /// recall is on.
    messages: Option<(Vec<f32>, Vec<mnemix_core::VectorHit>)>,
    knowledge: Vec<mnemix_core::VectorHit>,
    /// The recalled facts and their fenced block, when facts are on and there is input.
    facts: Option<(Vec<mnemix_core::ScoredFact>, Option<String>)>,
}

/// The tiers of memory over one backend; cheap to share (`Arc<Memory>`) across tasks.
pub struct Memory {
    /// Structured memories over the same backend (extraction into kinds).
    memories: Memories,
    backend: Arc<dyn MemoryBackend>,
    embedder: Arc<dyn Embedder>,
    summarizer: Option<Arc<dyn Summarizer>>,
    extractor: Option<Arc<dyn FactExtractor>>,
    tokens: Arc<dyn TokenCounter>,
    on_error: Option<ErrorHook>,
    on_extracted: Option<ExtractedHook>,
    facts_namespace: Option<Namespace>,
    working_schema: Option<schema::Schema>,
    /// Whether the backend searches vectors; without, facts are recalled and stored by text.
    vectors: bool,
    config: MemoryConfig,
    /// The terms of the messages recall ranks again (hybrid): the same messages are
    /// candidates turn after turn, so each is split and stemmed once.
    recalled_terms: lexical::TermsCache,
    /// Namespaces whose message collection is known to exist (saves a round trip per commit).
    collections_ready: Mutex<HashSet<Namespace>>,
}

impl fmt::Debug for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Memory")
            .field("backend", &self.backend.backend_name())
            .field("embedder", &self.embedder.model_id())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The summary kept in the conversation's metadata: text and the last seq it covers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct StoredSummary {
    text: String,
    through_seq: u64,
}

impl Memory {
    /// A builder over `backend`.
    pub fn builder(backend: Arc<dyn MemoryBackend>) -> MemoryBuilder {
        MemoryBuilder {
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

    /// The configuration.
    pub fn config(&self) -> &MemoryConfig {
        &self.config
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn MemoryBackend> {
        &self.backend
    }

    /// The embedder.
    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    /// The scope facts live in: the caller's subject under `facts.namespace` when set.
    pub fn facts_scope(&self, scope: &Scope) -> Scope {
        match &self.facts_namespace {
            Some(namespace) => Scope::from_parts(namespace.clone(), scope.subject().cloned()),
            None => scope.clone(),
        }
    }

    /// Assembles the context for the next model call: `user_input` is the new user text (not
    /// yet committed), the query for facts, knowledge and semantic recall.
    ///
    /// # Behavior
    /// - `messages`: the last `window_size` messages, sanitized (replay-safe), merged with the
    ///   recalled older messages by the merge strategy.
    /// - `summary`: the summary of everything before the window, stored in the conversation's
    ///   metadata and recomputed (incrementally) only when the window has moved.
    /// - `knowledge`: hits of every source above the threshold, best first, at most
    ///   `retrieval_limit` in all.
    /// - `facts`/`user_memory`: hybrid recall (text and embedding) of the subject's facts,
    ///   `inject.limit` of them, fenced and trimmed to `inject.token_budget`.
    /// - `working_memory`: the document of the conversation or user, with its template/schema.
    /// - `embedder`: the model id of the embedder the searches used, when any tier needed one.
    /// - A missing conversation, or another scope's, is `NotFound`.
    #[tracing::instrument(level = "debug", skip_all, fields(conversation = conversation.as_str()))]
    pub async fn prepare(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        user_input: &str,
    ) -> Result<Context> {
        let config = &self.config;
        let has_input = !user_input.trim().is_empty();
        let wants_query = self.vectors
            && has_input
            && (config.semantic_recall.enabled || config.knowledge.enabled || config.facts.enabled);

        // First round, at once: every read that needs only the request — the query's
        // searches included, which wait for its embedding but not for the window. The
        // conversation must exist in this scope whatever tiers are on.
        let (thread, window, working_memory, found) = futures::try_join!(
            self.backend.get_conversation(scope, conversation),
            async {
                if config.conversation.enabled {
                    let last = LoadOptions::last(config.window_size());
                    self.backend.load(scope, conversation, last).await
                } else {
                    Ok(Vec::new())
                }
            },
            async {
                if config.working_memory.enabled {
                    let key = self.working_memory_key(conversation);
                    self.backend.get_working_memory(scope, &key).await.map(Some)
                } else {
                    Ok(None)
                }
            },
            self.find(scope, conversation, user_input, wants_query),
        )?;
        // Everything before this seq is outside the window.
        let window_start = window.first().map_or(thread.last_seq + 1, |m| m.seq);

        // Second round, at once: what needs the window.
        let (summary, recalled) = futures::try_join!(
            async {
                if config.conversation.enabled && config.conversation.summarize && window_start > 1
                {
                    self.summary(scope, &thread, window_start - 1)
                        .await
                        .map(Some)
                } else {
                    Ok(None)
                }
            },
            async {
                match found.messages {
                    Some((vector, hits)) => {
                        self.recall_messages(
                            scope,
                            conversation,
                            (user_input, &vector),
                            hits,
                            window_start,
                        )
                        .await
                    }
                    None => Ok(Vec::new()),
                }
            },
        )?;
        let Found {
            knowledge, facts, ..
        } = found;

        let mut context = Context {
            messages: merge(window, &recalled, config.semantic_recall.merge),
            summary,
            recalled,
            knowledge,
            embedder: wants_query.then(|| self.embedder.model_id().to_owned()),
            ..Context::default()
        };
        if let Some((facts, block)) = facts {
            context.facts = facts;
            context.user_memory = block;
        }
        context.working_memory = working_memory.map(|document| WorkingMemoryBlock {
            scope: config.working_memory.scope,
            document,
            template: config.working_memory.template.clone(),
            json_schema: config.working_memory.json_schema.clone(),
        });
        Ok(context)
    }

    /// Stores a turn: appends `new_messages` (idempotently by id), embeds every message not yet
    /// embedded for semantic recall, then runs fact extraction over every message not yet
    /// extracted.
    ///
    /// # Behavior
    /// - The append is the contract's: all or nothing, contiguous seqs, duplicates skipped.
    /// - Embedding and extraction are driven by per-conversation cursors, not by what this call
    ///   appended: resending the same history embeds and extracts nothing twice, and a crash
    ///   between the append and either step is made up by the next commit.
    /// - A message's vector carries `semantic_recall.context_weight` of the stored vector of the
    ///   message said before it (in this commit or an earlier one), so a reply is found by what
    ///   it answered.
    /// - Extracted facts below `min_confidence` are dropped; the rest are remembered with the
    ///   configured tags, their confidence as score, their source messages and an embedding,
    ///   keeping at most `facts.max_facts`.
    /// - Once the append succeeded the commit succeeds: an embedding or extraction failure goes
    ///   to `on_error`, is reported in the receipt, and those messages are taken up again by the
    ///   next commit.
    #[tracing::instrument(level = "debug", skip_all, fields(conversation = conversation.as_str()))]
    pub async fn commit(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        new_messages: Vec<Message>,
    ) -> Result<CommitReceipt> {
        self.commit_with(scope, conversation, new_messages, AppendOptions::default())
            .await
    }

    async fn commit_with(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        new_messages: Vec<Message>,
        options: AppendOptions,
    ) -> Result<CommitReceipt> {
        // What the embedding needs of the new messages, kept before the append takes them.
        let said: HashMap<MessageId, Message> = if self.config.semantic_recall.enabled {
            new_messages
                .iter()
                .map(|m| (m.id.clone(), m.clone()))
                .collect()
        } else {
            HashMap::new()
        };
        // The embedded cursor is read beside the append: when it stands just before the
        // appended messages, they are all there is to embed, with no read after the append.
        let (append, embedded) = futures::join!(
            self.backend
                .append(scope, conversation, new_messages, options),
            async {
                if self.config.semantic_recall.enabled {
                    self.backend
                        .cursor(scope, conversation, EMBEDDED_CURSOR)
                        .await
                        .ok()
                } else {
                    None
                }
            },
        );
        let append = append?;
        let failed = |error: MemoryError| {
            if let Some(hook) = &self.on_error {
                hook(scope, conversation, &error);
            }
            error.to_string()
        };
        // Embedding and extraction follow their own cursors, so they run at once.
        let (embedding, extraction) = futures::join!(
            async {
                if !self.config.semantic_recall.enabled {
                    return EmbeddingReport::Skipped;
                }
                let just_appended = embedded
                    .and_then(|cursor| only_appended_after(cursor.unwrap_or(0), &append, &said));
                match self
                    .embed_new_messages(scope, conversation, just_appended)
                    .await
                {
                    Ok(None) => EmbeddingReport::Skipped,
                    Ok(Some(messages)) => EmbeddingReport::Embedded { messages },
                    Err(error) => EmbeddingReport::Failed {
                        error: failed(error),
                    },
                }
            },
            async {
                if !self.config.extract.enabled {
                    return ExtractionReport::Skipped;
                }
                self.extract(scope, conversation)
                    .await
                    .unwrap_or_else(|error| ExtractionReport::Failed {
                        error: failed(error),
                    })
            },
        );
        Ok(CommitReceipt {
            append,
            embedding,
            extraction,
        })
    }

    /// Accepts a client-supplied history (after a client-tool or approval round trip): checks
    /// it against the persisted history and commits only the new suffix.
    ///
    /// # Behavior
    /// - A history that rewrites the persisted one, answers a tool call that is not pending (or
    ///   a server-side tool's, per `options`) or an approval never requested is `InvalidInput`
    ///   naming the rejection code; nothing is written.
    /// - The suffix is appended only if nothing was appended since the check (`Conflict`
    ///   otherwise: reload and retry).
    pub async fn continue_with(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        incoming: Vec<Message>,
        options: &ContinuationOptions,
    ) -> Result<CommitReceipt> {
        let persisted = self
            .backend
            .load(scope, conversation, LoadOptions::raw())
            .await?;
        assert_valid_continuation(&persisted, &incoming, options)?;
        let last_seq = persisted.last().map_or(0, |m| m.seq);
        let suffix: Vec<Message> = incoming.into_iter().skip(persisted.len()).collect();
        self.commit_with(
            scope,
            conversation,
            suffix,
            AppendOptions::default().with_expected_last_seq(last_seq),
        )
        .await
    }

    /// The conversation of `agent_key` for the scope's subject, created on first use, with its
    /// last `history_limit` messages (replay-safe).
    ///
    /// # Behavior
    /// - One thread per (subject, agent key): its id is derived from the key, so concurrent
    ///   first uses meet on the same thread instead of creating two.
    /// - The agent key follows identifier rules (`InvalidInput`).
    pub async fn auto_conversation(
        &self,
        scope: &Scope,
        agent_key: &str,
        history_limit: usize,
    ) -> Result<(Conversation, Vec<StoredMessage>)> {
        mnemix_core::validate_identifier("agent key", agent_key)?;
        let id = ConversationId::new(format!("agent:{agent_key}"))?;
        let thread = match self.backend.get_conversation(scope, &id).await {
            Ok(thread) => thread,
            Err(MemoryError::NotFound { .. }) => {
                let new = NewConversation {
                    id: Some(id.clone()),
                    agent: Some(agent_key.to_owned()),
                    ..NewConversation::default()
                };
                match self.backend.create_conversation(scope, new).await {
                    Ok(thread) => thread,
                    Err(MemoryError::AlreadyExists { .. }) => {
                        self.backend.get_conversation(scope, &id).await?
                    }
                    Err(error) => return Err(error),
                }
            }
            Err(error) => return Err(error),
        };
        let history = if history_limit == 0 {
            Vec::new()
        } else {
            self.backend
                .load(scope, &thread.id, LoadOptions::last(history_limit))
                .await?
        };
        Ok((thread, history))
    }

    async fn embed_one(&self, text: &str) -> Result<Vec<f32>> {
        let mut vectors = self.embedder.embed(&[text.to_owned()]).await?;
        vectors
            .pop()
            .filter(|_| vectors.is_empty())
            .ok_or_else(|| MemoryError::invalid("the embedder returned no vector for one text"))
    }

    async fn embed_all(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let vectors = self.embedder.embed(texts).await?;
        if vectors.len() != texts.len() {
            return Err(MemoryError::invalid(format!(
                "the embedder returned {} vectors for {} texts",
                vectors.len(),
                texts.len()
            )));
        }
        Ok(vectors)
    }

    /// The summary through `through_seq`, reusing the stored one and summarising only what
    /// left the window since.
    async fn summary(
        &self,
        scope: &Scope,
        thread: &Conversation,
        through_seq: u64,
    ) -> Result<String> {
        let stored: Option<StoredSummary> = thread
            .metadata
            .get(SUMMARY_METADATA_KEY)
            .and_then(|v| serde_json::from_value(v.clone()).ok());
        if let Some(stored) = &stored {
            if stored.through_seq >= through_seq {
                return Ok(stored.text.clone());
            }
        }
        let after = stored.as_ref().map_or(0, |s| s.through_seq);
        let left_window = self
            .backend
            .load(
                scope,
                &thread.id,
                LoadOptions::default()
                    .with_after_seq(after)
                    .with_before_seq(through_seq + 1),
            )
            .await?;
        let summarizer = self
            .summarizer
            .as_ref()
            .expect("build() requires a summarizer when summarize is on");
        let text = summarizer
            .summarize(stored.as_ref().map(|s| s.text.as_str()), &left_window)
            .await?;
        let mut metadata = thread.metadata.clone();
        metadata.insert(
            SUMMARY_METADATA_KEY.to_owned(),
            json!(StoredSummary {
                text: text.clone(),
                through_seq,
            }),
        );
        self.backend
            .update_conversation(
                scope,
                &thread.id,
                ConversationUpdate {
                    metadata: Some(metadata),
                    ..ConversationUpdate::default()
                },
            )
            .await?;
        Ok(text)
    }

    async fn ensure_message_collection(&self, namespace: &Namespace) -> Result<()> {
        let ready = |set: &HashSet<Namespace>| set.contains(namespace);
        if ready(
            &self
                .collections_ready
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        ) {
            return Ok(());
        }
        let spec = CollectionSpec::new(
            MESSAGE_COLLECTION,
            self.embedder.dims(),
            self.embedder.model_id(),
        );
        self.backend
            .ensure_collection(namespace, spec)
            .await
            .map_err(|error| match error {
                MemoryError::InvalidInput(reason) => MemoryError::invalid(format!(
                    "collection {MESSAGE_COLLECTION} was made by another embedder ({reason}); \
                 drop it or use the same embedder"
                )),
                other => other,
            })?;
        self.collections_ready
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(namespace.clone());
        Ok(())
    }

    /// The messages after a cursor of the conversation, raw (a step must see every message).
    async fn after_cursor(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        cursor: &str,
    ) -> Result<Vec<StoredMessage>> {
        let after = self
            .backend
            .cursor(scope, conversation, cursor)
            .await?
            .unwrap_or(0);
        let options = LoadOptions::default()
            .with_after_seq(after)
            .with_sanitize(false);
        self.backend.load(scope, conversation, options).await
    }

    /// Embeds the messages after the embedded cursor that carry text, then moves the cursor;
    /// `None` when there was no message after it.
    async fn embed_new_messages(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        just_appended: Option<Vec<StoredMessage>>,
    ) -> Result<Option<usize>> {
        let fresh = match just_appended {
            Some(appended) => appended,
            None => {
                self.after_cursor(scope, conversation, EMBEDDED_CURSOR)
                    .await?
            }
        };
        let Some(last) = fresh.last().map(|m| m.seq) else {
            return Ok(None);
        };
        let with_text: Vec<&StoredMessage> = fresh
            .iter()
            .filter(|m| matches!(m.message.role, Role::User | Role::Assistant))
            .filter(|m| !m.message.text().trim().is_empty())
            .collect();
        if !with_text.is_empty() {
            self.ensure_message_collection(scope.namespace()).await?;
            let texts: Vec<String> = with_text
                .iter()
                .map(|m| embedded_text(&m.message))
                .collect();
            let weight = self.config.semantic_recall.context_weight;
            // A weight of 0 keeps the embedder's vectors, with nothing read for them.
            let vectors = if weight > 0.0 {
                let (vectors, before) = futures::join!(
                    self.embed_all(&texts),
                    self.vector_before(scope, conversation, with_text[0].seq)
                );
                in_context(vectors?, before?, weight)
            } else {
                self.embed_all(&texts).await?
            };
            let records: Vec<VectorRecord> = with_text
                .iter()
                .zip(vectors)
                .map(|(stored, vector)| {
                    let mut record =
                        VectorRecord::new(message_vector_id(conversation, stored), vector);
                    // The message's own text: what was embedded is `embedded_text` of it.
                    record.text = Some(stored.message.text());
                    record.conversation_id = Some(conversation.clone());
                    record.metadata = json!({
                        "conversation_id": conversation.as_str(),
                        "message_id": stored.message.id.as_str(),
                        "seq": stored.seq,
                        "role": stored.message.role.as_str(),
                        "speaker": speaker(&stored.message),
                        "created_at": stored.message.created_at.as_millis(),
                    })
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
                    record
                })
                .collect();
            self.backend
                .upsert_vectors(scope, MESSAGE_COLLECTION, records)
                .await?;
        }
        self.backend
            .advance_cursor(scope, conversation, EMBEDDED_CURSOR, last)
            .await?;
        Ok(Some(with_text.len()))
    }

    /// The stored vector of the last message said before `seq` (user or assistant), which the
    /// next vector carries a share of; `None` when there is no such message or it was never
    /// embedded (no text, or semantic recall was off then).
    async fn vector_before(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        seq: u64,
    ) -> Result<Option<Vec<f32>>> {
        let options = LoadOptions::default()
            .with_last(1)
            .with_before_seq(seq)
            .with_roles(vec![Role::User, Role::Assistant])
            .with_sanitize(false);
        let Some(previous) = self.backend.load(scope, conversation, options).await?.pop() else {
            return Ok(None);
        };
        let id = message_vector_id(conversation, &previous);
        match self
            .backend
            .get_vector(scope, MESSAGE_COLLECTION, &id)
            .await
        {
            Ok(record) => Ok(Some(record.vector)),
            Err(error) if error.is_not_found() => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// What the query finds, searched as soon as it is embedded: the conversation's messages
    /// nearest to it (before any window is known), knowledge and the subject's facts.
    async fn find(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        user_input: &str,
        wants_query: bool,
    ) -> Result<Found> {
        let config = &self.config;
        let vector = if wants_query {
            Some(self.embed_one(user_input).await?)
        } else {
            None
        };
        let (messages, knowledge, facts) = futures::try_join!(
            async {
                match (config.semantic_recall.enabled, &vector) {
                    (true, Some(vector)) => {
                        let k = self.first_message_search_k();
                        let hits = self
                            .search_messages(scope, conversation, vector, None, k)
                            .await?;
                        Ok(Some((vector.clone(), hits)))
                    }
                    _ => Ok(None),
                }
            },
            async {
                match (config.knowledge.enabled, &vector) {
                    (true, Some(vector)) => self.knowledge(scope, vector).await,
                    _ => Ok(Vec::new()),
                }
            },
            async {
                if !config.facts.enabled || user_input.trim().is_empty() {
                    return Ok(None);
                }
                let mut query = RecallQuery::text(user_input).with_limit(config.inject.limit);
                query.vector.clone_from(&vector);
                let recalled = self.backend.recall(&self.facts_scope(scope), query).await?;
                Ok(Some(user_memory_block(
                    recalled,
                    config.inject.token_budget,
                    self.tokens.as_ref(),
                )))
            },
        )?;
        Ok(Found {
            messages,
            knowledge,
            facts,
        })
    }

    /// How many hits the first round's message search asks for: the window can hide at most
    /// its size of the nearest messages, so past the candidates by that many, the nearest
    /// candidates before the window are among them whatever the window turns out to be.
    fn first_message_search_k(&self) -> usize {
        let config = &self.config;
        let window = if config.conversation.enabled {
            config.window_size()
        } else {
            0
        };
        config.semantic_recall.candidate_count() + window
    }

    /// The `k` messages of the conversation nearest to `vector` (above the recall threshold),
    /// only those before seq `before` when given.
    async fn search_messages(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        vector: &[f32],
        before: Option<u64>,
        k: usize,
    ) -> Result<Vec<mnemix_core::VectorHit>> {
        let in_conversation = Filter::eq("conversation_id", conversation.as_str());
        let filter = match before {
            Some(seq) => Filter::and([in_conversation, Filter::range("seq").lt(seq as f64)]),
            None => in_conversation,
        };
        let mut query = VectorQuery::new(vector.to_vec(), k).with_filter(filter);
        query.min_score = Some(self.config.semantic_recall.threshold);
        match self.backend.search(scope, MESSAGE_COLLECTION, query).await {
            Ok(hits) => Ok(hits),
            // Nothing was ever embedded in this namespace.
            Err(MemoryError::NotFound { .. }) => Ok(Vec::new()),
            Err(error) => Err(error),
        }
    }

    /// Older messages (before `window_start`) of this conversation relevant to the query, from
    /// the first round's `hits` (the nearest `candidates + window_size` of the whole
    /// conversation): the nearest candidates before the window, ranked by [`hybrid_order`].
    async fn recall_messages(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        (text, vector): (&str, &[f32]),
        hits: Vec<mnemix_core::VectorHit>,
        window_start: u64,
    ) -> Result<Vec<RecalledMessage>> {
        if window_start <= 1 {
            return Ok(Vec::new());
        }
        let candidates = self.config.semantic_recall.candidate_count();
        let seq_of = |hit: &mnemix_core::VectorHit| hit.record.metadata.get("seq")?.as_u64();
        let searched = hits.len();
        let mut hits: Vec<mnemix_core::VectorHit> = hits
            .into_iter()
            .filter(|hit| seq_of(hit).is_some_and(|seq| seq < window_start))
            .collect();
        if hits.len() < candidates && searched == self.first_message_search_k() {
            // More of the nearest were at or past the window start than the window holds:
            // messages appended since it was read. Search before the window itself.
            hits = self
                .search_messages(scope, conversation, vector, Some(window_start), candidates)
                .await?;
        }
        hits.truncate(candidates);
        let mut hits = hybrid_order(
            text,
            hits,
            self.config.semantic_recall.language,
            &self.recalled_terms,
        );
        hits.truncate(self.config.semantic_recall.limit);
        let seqs: Vec<u64> = hits.iter().filter_map(seq_of).collect();
        let mut by_seq: HashMap<u64, StoredMessage> = self
            .backend
            .load_seqs(scope, conversation, &seqs)
            .await?
            .into_iter()
            .map(|stored| (stored.seq, stored))
            .collect();
        // Best first, as the search ranked them; a message pruned since it was embedded is
        // simply not recalled.
        Ok(hits
            .iter()
            .filter_map(|hit| {
                let mut stored = by_seq.remove(&seq_of(hit)?)?;
                stored
                    .message
                    .parts
                    .retain(|p| matches!(p, Part::Text { .. }));
                Some(RecalledMessage {
                    message: stored,
                    score: hit.score,
                })
            })
            .collect())
    }

    /// Knowledge hits of every source, above the threshold, best first, limited.
    async fn knowledge(
        &self,
        scope: &Scope,
        vector: &[f32],
    ) -> Result<Vec<mnemix_core::VectorHit>> {
        let config = &self.config.knowledge;
        let shared = Scope::from_parts(scope.namespace().clone(), None);
        let mut hits = Vec::new();
        for source in &config.sources {
            let mut query = VectorQuery::new(vector.to_vec(), config.retrieval_limit);
            query.min_score = Some(config.similarity_threshold);
            match self.backend.search(&shared, source, query).await {
                Ok(found) => hits.extend(found),
                Err(MemoryError::NotFound { .. }) => {
                    return Err(MemoryError::invalid(format!(
                        "memory config: knowledge.sources: {source} is not a collection of namespace {}",
                        scope.namespace()
                    )))
                }
                Err(error) => return Err(error),
            }
        }
        rank_hits(&mut hits);
        hits.truncate(config.retrieval_limit);
        Ok(hits)
    }

    async fn extract(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
    ) -> Result<ExtractionReport> {
        let extractor = self
            .extractor
            .as_ref()
            .expect("build() requires an extractor when extraction is on");
        let fresh = self
            .after_cursor(scope, conversation, EXTRACTED_CURSOR)
            .await?;
        let Some(last) = fresh.last().map(|m| m.seq) else {
            return Ok(ExtractionReport::Skipped);
        };
        let facts_scope = self.facts_scope(scope);
        let offered = &self.config.extract.kinds;
        let kinds: Vec<KindSpec> =
            mnemix_core::registry::kinds(self.backend.as_ref(), facts_scope.namespace())
                .await?
                .into_iter()
                .filter(|k| offered.is_empty() || offered.contains(&k.name))
                .collect();
        let proposed = extractor
            .extract_into(scope, conversation, &fresh, &kinds)
            .await?;
        let min = self.config.extract.min_confidence;
        let kept: Vec<&ExtractedFact> = proposed
            .iter()
            .filter(|f| {
                f.confidence.is_finite()
                    && f.confidence >= min
                    && (structured(f).is_some() || !f.text.trim().is_empty())
            })
            .collect();
        let texts: Vec<String> = kept
            .iter()
            .map(|f| match structured(f) {
                Some((_, data)) => mnemix_core::registry::canonical_json(data),
                None => f.text.clone(),
            })
            .collect();
        let mut embeddings = if texts.is_empty() || !self.vectors {
            Vec::new()
        } else {
            self.embed_all(&texts).await?
        }
        .into_iter();
        let source = FactSource {
            conversation_id: conversation.clone(),
            message_ids: fresh.iter().map(|m| m.message.id.clone()).collect(),
        };
        let options = RememberOptions::default().with_max_facts(self.config.facts.max_facts);
        let mut stored = Vec::new();
        let now = self.backend.now();
        for fact in kept {
            let mut tags = fact.tags.clone();
            for tag in &self.config.extract.tags {
                if !tags.contains(tag) {
                    tags.push(tag.clone());
                }
            }
            let expires_at = fact
                .ttl
                .or(self.config.extract.ttl)
                .map(|ttl| ttl.expires_at(now));
            if let Some((kind, data)) = structured(fact) {
                let memory = NewMemory {
                    tags,
                    confidence: Some(fact.confidence.min(1.0)),
                    source: Some(source.clone()),
                    embedding: embeddings.next(),
                    expires_at,
                    ..NewMemory::new(kind, data.clone())
                };
                match self.memories.store(&facts_scope, memory).await {
                    Ok(outcome) if outcome.status != RememberStatus::Duplicate => {
                        let fact = self
                            .backend
                            .get_fact(&facts_scope, &outcome.memory.version)
                            .await?;
                        stored.push(fact);
                    }
                    Ok(_) => {}
                    // A memory the kind's schema refuses is skipped, not the turn's others.
                    Err(e) if e.is_invalid_input() => {
                        if let Some(hook) = &self.on_error {
                            hook(scope, conversation, &e);
                        }
                    }
                    Err(e) => return Err(e),
                }
                continue;
            }
            let new = NewFact {
                text: fact.text.clone(),
                kind: fact.kind.clone(),
                key: fact.key.clone(),
                tags,
                score: Some(fact.confidence.min(1.0)),
                source: Some(source.clone()),
                embedding: embeddings.next(),
                expires_at,
            };
            let outcome = self.backend.remember(&facts_scope, new, options).await?;
            if outcome.status != RememberStatus::Duplicate {
                stored.push(outcome.fact);
            }
        }
        self.backend
            .advance_cursor(scope, conversation, EXTRACTED_CURSOR, last)
            .await?;
        if let Some(hook) = &self.on_extracted {
            if !stored.is_empty() {
                hook(scope, conversation, &stored);
            }
        }
        Ok(ExtractionReport::Ran {
            messages: fresh.len(),
            proposed: proposed.len(),
            stored,
        })
    }

    fn working_memory_key(&self, conversation: &ConversationId) -> WorkingMemoryKey {
        match self.config.working_memory.scope {
            WorkingMemoryScope::Conversation => {
                WorkingMemoryKey::Conversation(conversation.clone())
            }
            WorkingMemoryScope::User => WorkingMemoryKey::User,
        }
    }
}

/// The messages after the embedded cursor, when they are exactly the ones just appended: the
/// cursor (read beside the append) stands just before them, none was a duplicate, and their
/// seqs follow one another. `None` sends the commit to read what follows the cursor.
fn only_appended_after(
    cursor: u64,
    receipt: &AppendReceipt,
    said: &HashMap<MessageId, Message>,
) -> Option<Vec<StoredMessage>> {
    if !receipt.duplicates.is_empty() || receipt.appended.is_empty() {
        return None;
    }
    receipt
        .appended
        .iter()
        .zip(cursor + 1..)
        .map(|((id, seq), expected)| {
            (*seq == expected).then_some(())?;
            Some(StoredMessage {
                seq: *seq,
                message: said.get(id)?.clone(),
            })
        })
        .collect()
}

/// The text a message is embedded as for semantic recall: who said it and on which day, then
/// what was said.
///
/// A question names people and days far more often than it repeats a message's words, and a
/// vector of the bare text knows neither. The speaker is the message's `metadata.name` when
/// that is a string (a person's or an agent's name), its role otherwise; the day is the UTC date
/// of its `created_at`. Only the vector is made of this text: the stored message is unchanged.
///
/// ```
/// use mnemix_core::{Message, Timestamp};
/// use mnemix_engine::embedded_text;
///
/// let mut said = Message::user("I went to the support group yesterday");
/// said.created_at = Timestamp::from_utc(2023, 5, 8, 13, 56);
/// assert_eq!(embedded_text(&said), "user (8 May 2023): I went to the support group yesterday");
/// said.metadata.insert("name".into(), "Caroline".into());
/// assert!(embedded_text(&said).starts_with("Caroline (8 May 2023): "));
/// ```
pub fn embedded_text(message: &Message) -> String {
    said_as(speaker(message), message.created_at, &message.text())
}

/// Who said a message: its `metadata.name` when that is a string, its role otherwise.
fn speaker(message: &Message) -> &str {
    message
        .metadata
        .get("name")
        .and_then(serde_json::Value::as_str)
        .unwrap_or(message.role.as_str())
}

/// `Speaker (8 May 2023): text`, the form [`embedded_text`] gives a message.
fn said_as(speaker: &str, at: Timestamp, text: &str) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let (year, month, day) = at.utc_date();
    let month = MONTHS[(month - 1) as usize];
    format!("{speaker} ({day} {month} {year}): {text}")
}

/// Message search hits, nearest first, in hybrid order: reciprocal-rank fusion of their
/// nearness and their lexical relevance to `query` (the one lexical definition, over each
/// message as it was embedded: speaker, day and text, over their terms in `language`). Ties
/// keep the nearer first.
fn hybrid_order(
    query: &str,
    hits: Vec<mnemix_core::VectorHit>,
    language: Option<Language>,
    terms: &lexical::TermsCache,
) -> Vec<mnemix_core::VectorHit> {
    let query = lexical::QueryTokens::of_question(query, language);
    let texts: Vec<String> = hits.iter().map(said).collect();
    let held = terms.held_terms_of_each(&query, texts.iter().map(String::as_str));
    let relevance = lexical::relevances_of_held(query.len(), &held);
    let nearness: Vec<usize> = (0..hits.len()).collect();
    let mut lexical: Vec<usize> = nearness
        .iter()
        .copied()
        .filter(|&i| relevance[i] > 0.0)
        .collect();
    lexical.sort_by(|&a, &b| relevance[b].total_cmp(&relevance[a]).then(a.cmp(&b)));
    let fused = reciprocal_rank_fusion([nearness.as_slice(), lexical.as_slice()]);
    let mut order = nearness;
    order.sort_by(|a, b| fused[b].total_cmp(&fused[a]).then(a.cmp(b)));
    let mut slots: Vec<Option<mnemix_core::VectorHit>> = hits.into_iter().map(Some).collect();
    order.into_iter().filter_map(|i| slots[i].take()).collect()
}

/// Messages' vectors in conversational context, in order: each the unit sum of its own unit
/// embedding and `weight` times the vector before it in context (`before` for the first), so a
/// message carries the conversation before it, fading by `weight` per message (the collection
/// compares by cosine, so scaling changes no ranking). A vector of another length than the one
/// before it (another embedder's) starts afresh.
fn in_context(embedded: Vec<Vec<f32>>, before: Option<Vec<f32>>, weight: f32) -> Vec<Vec<f32>> {
    let mut previous = before;
    embedded
        .into_iter()
        .map(|own| {
            let mut vector = unit(own);
            if let Some(previous) = previous.as_ref().filter(|p| p.len() == vector.len()) {
                for (value, carried) in vector.iter_mut().zip(previous) {
                    *value += weight * carried;
                }
                vector = unit(vector);
            }
            previous = Some(vector.clone());
            vector
        })
        .collect()
}

/// `vector` scaled to length 1 (a zero vector stays as it is).
fn unit(mut vector: Vec<f32>) -> Vec<f32> {
    let norm = mnemix_core::adapter::norm(&vector);
    if norm > 0.0 {
        for value in &mut vector {
            *value /= norm;
        }
    }
    vector
}

/// A message hit's text as it was embedded, from the record (its bare text alone for records
/// written before the speaker and day were kept).
fn said(hit: &mnemix_core::VectorHit) -> String {
    let metadata = &hit.record.metadata;
    let text = hit.record.text.as_deref().unwrap_or_default();
    let speaker = metadata.get("speaker").and_then(serde_json::Value::as_str);
    let at = metadata
        .get("created_at")
        .and_then(serde_json::Value::as_i64);
    match (speaker, at) {
        (Some(speaker), Some(at)) => said_as(speaker, Timestamp::from_millis(at), text),
        _ => text.to_owned(),
    }
}

/// A stable vector id for a message: conversation and message ids may each be long, so the id
/// is a hash of both (idempotent re-embedding replaces the same record).
fn message_vector_id(conversation: &ConversationId, message: &StoredMessage) -> VectorId {
    let mut hasher = Sha256::new();
    hasher.update(conversation.as_str().as_bytes());
    hasher.update([0]);
    hasher.update(message.message.id.as_str().as_bytes());
    let digest = hasher.finalize();
    let id = format!("msg-{}", hex::encode(&digest[..16]));
    VectorId::new(id).expect("a hex id is a valid identifier")
}

/// The window merged with recalled messages (both in conversation order): before it, after
/// it, or alternating one recalled message with one of the window, as the seeds do.
fn merge(
    window: Vec<StoredMessage>,
    recalled: &[RecalledMessage],
    strategy: MergeStrategy,
) -> Vec<StoredMessage> {
    if recalled.is_empty() {
        return window;
    }
    let mut older: Vec<StoredMessage> = recalled.iter().map(|r| r.message.clone()).collect();
    older.sort_by_key(|m| m.seq);
    match strategy {
        MergeStrategy::Prepend => older.into_iter().chain(window).collect(),
        MergeStrategy::Append => window.into_iter().chain(older).collect(),
        MergeStrategy::Interleave => {
            let mut merged = Vec::with_capacity(older.len() + window.len());
            let (mut older, mut window) = (older.into_iter(), window.into_iter());
            loop {
                match (older.next(), window.next()) {
                    (None, None) => break,
                    (a, b) => merged.extend(a.into_iter().chain(b)),
                }
            }
            merged
        }
    }
}
