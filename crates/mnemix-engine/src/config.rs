//! [`MemoryConfig`]: the memory tiers of an agent, as plain data loaded from YAML, TOML or JSON.
//!
//! Every tier is off until enabled, as in the seed systems' `memory:` blocks. Keys are
//! `snake_case`; the seeds' `camelCase` spellings (`windowSize`, `retrievalLimit`, …) are
//! accepted as aliases so an existing YAML block loads unchanged. Unknown keys are errors, and
//! [`MemoryConfig::validate`] names the field at fault.
//!
//! ```
//! use mnemix_engine::config::{MemoryConfig, MergeStrategy};
//! # #[cfg(feature = "yaml")] {
//! let config = MemoryConfig::from_yaml(r"
//! conversation: { enabled: true, window_size: 12, summarize: true }
//! facts: { enabled: true, namespace: support }
//! semantic_recall: { enabled: true, merge: interleave }
//! ")?;
//! assert_eq!(config.conversation.window_size, Some(12));
//! assert_eq!(config.semantic_recall.merge, MergeStrategy::Interleave);
//! assert_eq!(config.knowledge.retrieval_limit, 5); // defaults fill the rest
//!
//! let error = MemoryConfig::from_yaml("facts: { namespace: Support }").unwrap_err();
//! assert!(error.to_string().contains("facts.namespace"));
//! # }
//! # Ok::<(), mnemix_core::MemoryError>(())
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::terms::Language;
use mnemix_core::{MemoryError, Result};
use mnemix_core::{Origin, Principal, Ttl};

/// Every tier of an agent's memory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct MemoryConfig {
    /// Recent dialogue: the window and the summary of what fell out of it.
    pub conversation: ConversationConfig,
    /// Retrieval from shared knowledge collections (RAG).
    pub knowledge: KnowledgeConfig,
    /// Facts learned about the subject, recalled for the latest user text.
    pub facts: FactsConfig,
    /// The working-memory document shown to the model and its tools.
    #[serde(alias = "workingMemory")]
    pub working_memory: WorkingMemoryConfig,
    /// Older messages of the conversation recalled by meaning.
    #[serde(alias = "semanticRecall", alias = "semanticMemory")]
    pub semantic_recall: SemanticRecallConfig,
    /// How recalled facts are injected into the prompt.
    pub inject: InjectConfig,
    /// Automatic fact extraction after each turn.
    pub extract: ExtractConfig,
}

/// The conversation tier (off by default).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ConversationConfig {
    /// Whether recent messages are loaded into the context.
    pub enabled: bool,
    /// How many recent messages the window holds (at least 1). Unset by default: the 10 most
    /// recent, or the 6 most recent when semantic recall is on, whose `limit` (14) older
    /// messages best matching the input then fill a context of at most 20
    /// ([`MemoryConfig::window_size`]). On a long-conversation benchmark 6 + 14 put more of
    /// the turns that answer a question into the context than 10 + 10 (RECALL.md, "How each
    /// default was chosen"): a question about an older exchange is answered by what recall
    /// finds, not by the window. Set it to keep more recent turns verbatim.
    #[serde(alias = "windowSize")]
    pub window_size: Option<usize>,
    /// Whether messages older than the window are summarised (needs a `Summarizer`).
    pub summarize: bool,
}

/// The knowledge tier: similarity search over collections of the namespace's shared scope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct KnowledgeConfig {
    /// Whether knowledge is retrieved.
    pub enabled: bool,
    /// Names of the vector collections searched.
    pub sources: Vec<String>,
    /// Most documents retrieved per turn, over all sources.
    #[serde(alias = "retrievalLimit")]
    pub retrieval_limit: usize,
    /// Least similarity (0–1) a document needs to be included.
    #[serde(alias = "similarityThreshold")]
    pub similarity_threshold: f32,
}

impl Default for KnowledgeConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            sources: Vec::new(),
            retrieval_limit: 5,
            similarity_threshold: 0.7,
        }
    }
}

/// The facts tier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct FactsConfig {
    /// Whether facts are recalled and injected (and, with `extract`, learned).
    pub enabled: bool,
    /// Most current facts kept per subject; the oldest lowest-scored are evicted.
    #[serde(alias = "maxFacts")]
    pub max_facts: usize,
    /// The namespace facts live in (`^[a-z][a-z0-9-]*$`), so two agents never read each other's
    /// facts; by default the caller's scope's namespace.
    pub namespace: Option<String>,
    /// Only facts of these origins are recalled into a turn (all when empty): e.g. `[api,
    /// user, assistant, extracted]` keeps out what was derived from tool results.
    pub origins: Vec<Origin>,
    /// Only facts these principals wrote are recalled into a turn (all when empty), e.g.
    /// `[{kind: agent, id: planner}]`.
    pub written_by: Vec<Principal>,
}

impl Default for FactsConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            max_facts: 100,
            namespace: None,
            origins: Vec::new(),
            written_by: Vec::new(),
        }
    }
}

/// Which document working memory is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkingMemoryScope {
    /// One document per conversation.
    #[default]
    Conversation,
    /// One document per subject, shared by its conversations.
    User,
}

/// The working-memory tier: free-form Markdown, a Markdown template, or JSON under a schema.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct WorkingMemoryConfig {
    /// Whether the working-memory block and tools are offered.
    pub enabled: bool,
    /// Per conversation (default) or per user.
    pub scope: WorkingMemoryScope,
    /// A Markdown template shown while the document is empty.
    pub template: Option<String>,
    /// A JSON Schema the document must satisfy (the document is then JSON).
    #[serde(alias = "schema", alias = "jsonSchema")]
    pub json_schema: Option<Value>,
}

/// Where recalled older messages go relative to the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeStrategy {
    /// Before the window.
    Prepend,
    /// After the window (the seeds' default).
    #[default]
    Append,
    /// Alternating: one recalled message, then one of the window, and so on.
    Interleave,
}

/// Semantic recall of older messages of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct SemanticRecallConfig {
    /// Whether messages are embedded on commit and recalled on prepare.
    pub enabled: bool,
    /// Most messages recalled (14 by default: with the default window a context of at most 20
    /// messages).
    #[serde(alias = "semanticLimit")]
    pub limit: usize,
    /// Least cosine similarity to the user input; 0 by default, so the nearest `limit` older
    /// messages are recalled whatever their similarity. Above 0, only the nearest that similar
    /// are candidates (the question's words then order them and propose none). A threshold
    /// means something only on one embedder's scale: on a long-conversation benchmark (`cargo
    /// xtask recall`) the median cosine between a question and the turns that answer it is
    /// about 0.5 with all-MiniLM-L6-v2 and about 0.2 with the hashing embedder, so the seeds'
    /// 0.7 recalled almost nothing with either.
    #[serde(alias = "semanticThreshold")]
    pub threshold: f32,
    /// How recalled messages merge with the window.
    #[serde(alias = "mergeStrategy")]
    pub merge: MergeStrategy,
    /// How many candidates each ranking proposes before the best `limit` are recalled (100 by
    /// default): the nearest older messages by embedding, and the older messages the
    /// question's words match best over the whole conversation before the window (the
    /// question's rare words weigh most); the pool is ordered by fusing nearness with lexical
    /// relevance. At most `limit` makes recall purely semantic (and reads no message to find
    /// words). The lexical side reads every message of the conversation at each `prepare`
    /// (what that costs: RECALL.md, "What each stage of `prepare` costs"); a conversation of
    /// tens of thousands of messages is better served by `candidates` at `limit` or pruning.
    /// On a long-conversation benchmark the pool put more of the answering turns into the
    /// context than ranking the nearest alone, with either embedder (RECALL.md, "How each
    /// default was chosen").
    pub candidates: usize,
    /// How much of the conversation before it a message's vector carries (0.4 by default; 0
    /// embeds each message alone): the stored vector is the unit sum of the message's own
    /// embedding and `context_weight` times the stored vector of the message embedded before
    /// it, which carries the one before it in turn, fading; and a message's lexical relevance
    /// to the question carries `context_weight` of the relevance of the messages next to it,
    /// each way, fading in the same way. A reply ("yes, loved it!") is then found by the
    /// question it answered, by meaning and by words. How 0.4 was chosen, and what carrying
    /// relevance too added: RECALL.md, "How each default was chosen".
    pub context_weight: f32,
    /// The language of the conversation, for the lexical side of the ranking (English by
    /// default; `null` matches words as written, in any language): word forms fold to their
    /// stems ("painted" finds "paint") and the question's stop words ("what", "did", "the")
    /// are left out. On a long-conversation benchmark English put more of the answering turns
    /// into the context than `null`, with either embedder (RECALL.md). Facts' recall matches
    /// words as written: their tokens are what every backend indexes.
    pub language: Option<Language>,
}

impl SemanticRecallConfig {
    /// The candidates each ranking proposes, never fewer than `limit`.
    pub fn candidate_count(&self) -> usize {
        self.candidates.max(self.limit)
    }
}

impl Default for SemanticRecallConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            limit: 14,
            threshold: 0.0,
            merge: MergeStrategy::Append,
            candidates: 100,
            context_weight: 0.4,
            language: Some(Language::English),
        }
    }
}

/// How recalled facts become the `<user-memory>` block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct InjectConfig {
    /// Most facts recalled per turn.
    pub limit: usize,
    /// Most tokens the whole block may take; the lowest-scored facts go first.
    #[serde(alias = "tokenBudget")]
    pub token_budget: Option<usize>,
}

impl Default for InjectConfig {
    fn default() -> Self {
        Self {
            limit: 5,
            token_budget: None,
        }
    }
}

/// Automatic fact extraction after each committed turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ExtractConfig {
    /// Whether commits run the `FactExtractor` (needs the facts tier).
    pub enabled: bool,
    /// Least confidence (0–1) an extracted fact needs to be kept: the first defence against
    /// memory poisoning.
    #[serde(alias = "minConfidence")]
    pub min_confidence: f32,
    /// A chat model (OpenAI-compatible, JSON mode) that extracts facts and writes summaries
    /// when the builder is given no extractor or summarizer of its own: `"gpt-4o-mini"`, or a
    /// local server's model. The server and key come from `MNEMIX_CHAT_BASE_URL` /
    /// `OPENAI_BASE_URL` and `MNEMIX_CHAT_API_KEY` / `OPENAI_API_KEY`. Needs the
    /// `model-extractor` feature.
    #[serde(alias = "extractWith", alias = "model")]
    pub extract_with: Option<String>,
    /// Only these registered kinds are offered to the extractor (zkStash's `schemas`); empty:
    /// every kind registered in the facts' namespace.
    #[serde(alias = "schemas")]
    pub kinds: Vec<String>,
    /// How long extracted facts last unless the extractor gives one (`"30s"`, `"15m"`, `"1h"`,
    /// `"7d"`); none: permanent.
    pub ttl: Option<Ttl>,
    /// Tags added to every extracted fact.
    pub tags: Vec<String>,
}

impl Default for ExtractConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            min_confidence: 0.7,
            extract_with: None,
            kinds: Vec::new(),
            ttl: None,
            tags: Vec::new(),
        }
    }
}

pub(crate) fn invalid(field: &str, problem: impl std::fmt::Display) -> MemoryError {
    MemoryError::invalid(format!("memory config: {field}: {problem}"))
}

pub(crate) fn check_unit(field: &str, value: f32) -> Result<()> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(invalid(field, format!("{value} is not between 0 and 1")))
    }
}

pub(crate) fn check_positive(field: &str, value: usize) -> Result<()> {
    if value == 0 {
        Err(invalid(field, "must be at least 1"))
    } else {
        Ok(())
    }
}

/// The window when `conversation.window_size` is unset and semantic recall is off.
pub const DEFAULT_WINDOW: usize = 10;
/// The window when `conversation.window_size` is unset and semantic recall is on.
pub const DEFAULT_WINDOW_WITH_RECALL: usize = 6;

impl MemoryConfig {
    /// How many recent messages the window holds: `conversation.window_size` when set, else
    /// [`DEFAULT_WINDOW`] (10), or [`DEFAULT_WINDOW_WITH_RECALL`] (6) when semantic recall is
    /// on.
    ///
    /// ```
    /// use mnemix_engine::config::MemoryConfig;
    /// let mut config = MemoryConfig::default();
    /// assert_eq!(config.window_size(), 10);
    /// config.semantic_recall.enabled = true;
    /// assert_eq!(config.window_size(), 6); // + 14 recalled: a context of at most 20
    /// config.conversation.window_size = Some(12);
    /// assert_eq!(config.window_size(), 12);
    /// ```
    pub fn window_size(&self) -> usize {
        self.conversation
            .window_size
            .unwrap_or(if self.semantic_recall.enabled {
                DEFAULT_WINDOW_WITH_RECALL
            } else {
                DEFAULT_WINDOW
            })
    }

    /// Checks every field; the error names the first one at fault (`facts.namespace`, …).
    ///
    /// Each tier checks its own section (in its module); what spans two sections is checked
    /// by the tier that needs the other (extraction needs the facts tier).
    pub fn validate(&self) -> Result<()> {
        self.conversation.validate()?;
        self.knowledge.validate()?;
        self.facts.validate()?;
        self.working_memory.validate()?;
        self.semantic_recall.validate()?;
        self.inject.validate()?;
        self.extract.validate(&self.facts)
    }

    /// Loads and validates a config from JSON.
    pub fn from_json(text: &str) -> Result<Self> {
        let config: Self = serde_json::from_str(text)
            .map_err(|e| MemoryError::invalid(format!("memory config: {e}")))?;
        config.validate()?;
        Ok(config)
    }

    /// Loads and validates a config from YAML (the seeds' `memory:` block, without that key).
    #[cfg(feature = "yaml")]
    pub fn from_yaml(text: &str) -> Result<Self> {
        // An empty document is the default config, not an error.
        let config: Self = if text.trim().is_empty() {
            Self::default()
        } else {
            yaml_serde::from_str(text)
                .map_err(|e| MemoryError::invalid(format!("memory config: {e}")))?
        };
        config.validate()?;
        Ok(config)
    }

    /// Loads and validates a config from TOML.
    #[cfg(feature = "toml")]
    pub fn from_toml(text: &str) -> Result<Self> {
        let config: Self = toml::from_str(text)
            .map_err(|e| MemoryError::invalid(format!("memory config: {e}")))?;
        config.validate()?;
        Ok(config)
    }

    /// Loads a file by its extension: `.yaml`/`.yml`, `.toml` or `.json`.
    pub fn from_path(path: impl AsRef<std::path::Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| {
            MemoryError::invalid(format!(
                "memory config: cannot read {}: {e}",
                path.display()
            ))
        })?;
        match path.extension().and_then(|e| e.to_str()) {
            #[cfg(feature = "yaml")]
            Some("yaml" | "yml") => Self::from_yaml(&text),
            #[cfg(feature = "toml")]
            Some("toml") => Self::from_toml(&text),
            Some("json") => Self::from_json(&text),
            other => Err(MemoryError::invalid(format!(
                "memory config: {}: unsupported extension {other:?} (yaml, yml, toml or json, as the crate's features allow)",
                path.display()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_seeds() {
        let config = MemoryConfig::default();
        config.validate().unwrap();
        assert!(!config.conversation.enabled);
        assert_eq!(config.window_size(), 10);
        assert_eq!(config.knowledge.retrieval_limit, 5);
        assert!((config.knowledge.similarity_threshold - 0.7).abs() < f32::EPSILON);
        assert_eq!(config.facts.max_facts, 100);
        assert!((config.extract.min_confidence - 0.7).abs() < f32::EPSILON);
        assert_eq!(config.semantic_recall.merge, MergeStrategy::Append);
        assert_eq!(
            config.working_memory.scope,
            WorkingMemoryScope::Conversation
        );
    }

    #[test]
    fn json_round_trips_and_names_bad_fields() {
        let mut config = MemoryConfig::default();
        config.facts.enabled = true;
        config.extract.enabled = true;
        let text = serde_json::to_string(&config).unwrap();
        assert_eq!(MemoryConfig::from_json(&text).unwrap(), config);

        for (text, field) in [
            (
                r#"{"conversation":{"window_size":0}}"#,
                "conversation.window_size",
            ),
            (
                r#"{"knowledge":{"similarity_threshold":1.5}}"#,
                "knowledge.similarity_threshold",
            ),
            (r#"{"knowledge":{"enabled":true}}"#, "knowledge.sources"),
            (r#"{"facts":{"namespace":"9lives"}}"#, "facts.namespace"),
            (r#"{"extract":{"enabled":true}}"#, "extract.enabled"),
            (
                r#"{"extract":{"min_confidence":-0.1}}"#,
                "extract.min_confidence",
            ),
            (r#"{"inject":{"token_budget":0}}"#, "inject.token_budget"),
            (
                r#"{"working_memory":{"template":"x","json_schema":{}}}"#,
                "working_memory",
            ),
            (r#"{"conversation":{"windw_size":3}}"#, "windw_size"),
            (r#"{"semantic_recall":{"merge":"sideways"}}"#, "sideways"),
        ] {
            let error = MemoryConfig::from_json(text).unwrap_err().to_string();
            assert!(error.contains(field), "{text}: {error}");
        }
    }

    #[cfg(feature = "yaml")]
    #[test]
    fn the_seeds_camel_case_yaml_loads() {
        let config = MemoryConfig::from_yaml(
            "
conversation:
  enabled: true
  windowSize: 10
  summarize: true
knowledge:
  enabled: true
  sources: [faq, docs]
  retrievalLimit: 5
  similarityThreshold: 0.7
facts:
  enabled: true
  maxFacts: 100
  namespace: support
workingMemory:
  enabled: true
  scope: user
  schema: { type: object, properties: { tasks: { type: array } } }
",
        )
        .unwrap();
        assert!(config.conversation.summarize);
        assert_eq!(config.knowledge.sources, ["faq", "docs"]);
        assert_eq!(config.facts.namespace.as_deref(), Some("support"));
        assert_eq!(config.working_memory.scope, WorkingMemoryScope::User);
        assert!(config.working_memory.json_schema.is_some());
        assert_eq!(
            MemoryConfig::from_yaml("").unwrap(),
            MemoryConfig::default()
        );
        let error = MemoryConfig::from_yaml("facts: { max_facts: many }").unwrap_err();
        assert!(error.to_string().contains("max_facts"), "{error}");
    }

    #[cfg(feature = "toml")]
    #[test]
    fn toml_loads_with_the_same_rules() {
        let config = MemoryConfig::from_toml(
            "[conversation]\nenabled = true\nwindow_size = 4\n\n[inject]\ntoken_budget = 200\n",
        )
        .unwrap();
        assert_eq!(config.conversation.window_size, Some(4));
        assert_eq!(config.inject.token_budget, Some(200));
        let error = MemoryConfig::from_toml("[facts]\nnamespace = \"Bad Name\"\n").unwrap_err();
        assert!(error.to_string().contains("facts.namespace"), "{error}");
    }
}
