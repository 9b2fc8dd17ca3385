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

mod builder;
pub mod config;
mod context;
mod explain;
mod memories;
#[cfg(feature = "model-extractor")]
mod model;
pub mod prompt_cache;
mod schema;
mod session;
pub mod terms;
mod tiers;

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

pub use builder::MemoryBuilder;
pub use context::{
    escape_fenced, user_memory_block, ApproxTokenCounter, Context, RecalledMessage, TokenCounter,
    WorkingMemoryBlock,
};
pub use explain::{Explained, FactCandidate, MessageCandidate, MessageVerdict, RecallExplanation};
pub use memories::{
    Memories, MemoryHit, MemoryOutcome, MemoryQuery, MemorySource, NewMemory, SearchScope,
    StoredMemory,
};
#[cfg(feature = "model-extractor")]
pub use model::ModelExtractor;
pub use session::{Session, SessionView};
pub use tiers::extraction::{ExtractedFact, ExtractionReport, FactExtractor, EXTRACTED_CURSOR};
pub use tiers::recall::{embedded_text, EmbeddingReport, EMBEDDED_CURSOR, MESSAGE_COLLECTION};
pub use tiers::summary::{Summarizer, SUMMARY_METADATA_KEY};
pub use tiers::working::{ToolDefinition, WORKING_MEMORY_TOOLS};

use crate::builder::{ErrorHook, ExtractedHook};
use crate::config::MemoryConfig;
use mnemix_core::embed::Embedder;
use mnemix_core::replay::{assert_valid_continuation, ContinuationOptions};
use mnemix_core::MemoryBackend;
use mnemix_core::{AppendOptions, AppendReceipt, LoadOptions};
use mnemix_core::{ConversationId, Namespace, Scope};
use mnemix_core::{MemoryError, Result};
use mnemix_core::{Message, StoredMessage};

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

/// What a turn's query found in the first round of `prepare`.
struct Found {
    /// The query's embedding and the conversation's messages nearest to it, when semantic
    /// recall is on.
    messages: Option<(Vec<f32>, Vec<mnemix_core::VectorHit>)>,
    knowledge: Vec<mnemix_core::VectorHit>,
    /// The injected facts, their fenced block and every fact recalled, when facts are on and
    /// there is input.
    facts: Option<(
        Vec<mnemix_core::ScoredFact>,
        Option<String>,
        Vec<FactCandidate>,
    )>,
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
    recalled_terms: terms::TermsCache,
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

impl Memory {
    /// A builder over `backend`.
    pub fn builder(backend: Arc<dyn MemoryBackend>) -> MemoryBuilder {
        MemoryBuilder::new(backend)
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
        let (context, _why) = self
            .prepare_explained(scope, conversation, user_input)
            .await?;
        Ok(context)
    }

    /// [`prepare`](Self::prepare)'s context and why recall chose what it did (the reasons come
    /// out of the ranking itself, so [`explain`](Self::explain) cannot disagree with it).
    async fn prepare_explained(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        user_input: &str,
    ) -> Result<(Context, RecallExplanation)> {
        let config = &self.config;
        let wants_query = self.vectors
            && !user_input.trim().is_empty()
            && (config.semantic_recall.enabled || config.knowledge.enabled || config.facts.enabled);

        // First round, at once: every read that needs only the request — the query's
        // searches included, which wait for its embedding but not for the window. The
        // conversation must exist in this scope whatever tiers are on.
        let (thread, window, working_memory, found, said) = futures::try_join!(
            self.backend.get_conversation(scope, conversation),
            self.window(scope, conversation),
            self.working_memory_block(scope, conversation),
            self.find(scope, conversation, user_input, wants_query),
            self.said_messages(scope, conversation, wants_query),
        )?;
        // Everything before this seq is outside the window.
        let window_start = window.first().map_or(thread.last_seq + 1, |m| m.seq);

        // Second round, at once: what needs the window.
        let (summary, recalled) = futures::try_join!(
            self.summary_before(scope, &thread, window_start),
            self.recalled_before(
                scope,
                conversation,
                user_input,
                found.messages,
                said,
                window_start
            ),
        )?;
        let (recalled, messages) = recalled;
        let (facts, user_memory, fact_candidates) = found.facts.unwrap_or_default();
        let context = Context {
            messages: tiers::window::merge(window, &recalled, config.semantic_recall.merge),
            summary,
            recalled,
            knowledge: found.knowledge,
            facts,
            user_memory,
            working_memory,
            embedder: wants_query.then(|| self.embedder.model_id().to_owned()),
        };
        let why = RecallExplanation {
            window_start,
            messages,
            facts: fact_candidates,
        };
        Ok((context, why))
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
        let vector = if wants_query {
            Some(self.embed_one(user_input).await?)
        } else {
            None
        };
        let vector = vector.as_deref();
        let (messages, knowledge, facts) = futures::try_join!(
            self.nearest_messages(scope, conversation, vector),
            self.knowledge(scope, vector),
            self.recalled_facts(scope, user_input, vector),
        )?;
        Ok(Found {
            messages,
            knowledge,
            facts,
        })
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
        let said = self.to_embed(&new_messages);
        let (append, embedded) = futures::join!(
            self.backend
                .append(scope, conversation, new_messages, options),
            self.embedded_cursor(scope, conversation),
        );
        let append = append?;
        // Embedding and extraction follow their own cursors, so they run at once.
        let (embedding, extraction) = futures::join!(
            self.embedding_step(scope, conversation, embedded, &append, &said),
            self.extraction_step(scope, conversation),
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

    /// A commit step's failure, given to `on_error`, as the receipt reports it.
    fn report_failure(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        error: &MemoryError,
    ) -> String {
        if let Some(hook) = &self.on_error {
            hook(scope, conversation, error);
        }
        error.to_string()
    }
}
