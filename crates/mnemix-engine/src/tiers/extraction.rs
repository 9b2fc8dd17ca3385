//! Extraction: facts (and structured memories of registered kinds) distilled from the messages
//! no extraction has seen yet, a commit step driven by its own cursor.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use mnemix_core::registry::KindSpec;
use mnemix_core::{
    ConversationId, Fact, FactSource, NewFact, Origin, Part, Principal, Provenance, Role, Scope,
    StoredMessage,
};
use mnemix_core::{RememberOptions, RememberStatus, Result, Timestamp, Ttl};

use crate::config::{check_unit, invalid, ExtractConfig, FactsConfig};
use crate::memories::NewMemory;
use crate::Memory;

/// The conversation cursor below which every message went through fact extraction.
pub const EXTRACTED_CURSOR: &str = "agent-memory.extracted";

impl ExtractConfig {
    /// Extraction stores facts, so it needs the facts tier.
    pub(crate) fn validate(&self, facts: &FactsConfig) -> Result<()> {
        if self
            .extract_with
            .as_ref()
            .is_some_and(|m| m.trim().is_empty())
        {
            return Err(invalid("extract.extract_with", "names no model"));
        }
        check_unit("extract.min_confidence", self.min_confidence)?;
        if self.enabled && !facts.enabled {
            return Err(invalid(
                "extract.enabled",
                "extraction stores facts: enable the facts tier too",
            ));
        }
        for tag in &self.tags {
            mnemix_core::validate_identifier("tag", tag).map_err(|e| invalid("extract.tags", e))?;
        }
        Ok(())
    }
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
    /// as a memory of that kind ([`Memories`](crate::Memories)), checked against its schema and superseding by
    /// its unique fields; `text` may then be empty. Data that breaks the schema goes to
    /// `on_error` and is skipped.
    #[serde(default)]
    pub data: Option<serde_json::Value>,
    /// When it became true in the world, when a message says so.
    #[serde(default)]
    pub valid_from: Option<Timestamp>,
    /// When it stopped being true, when a message says so.
    #[serde(default)]
    pub valid_until: Option<Timestamp>,
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
            valid_from: None,
            valid_until: None,
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

    /// Who writes what it extracts: the model's name for a model (facts record the extractor
    /// as [`Principal::extractor`](mnemix_core::Principal::extractor) of it). By default
    /// `"extractor"`.
    #[allow(clippy::unnecessary_literal_bound)] // an implementation lends its model's name
    fn model(&self) -> &str {
        "extractor"
    }
}

/// Where facts extracted from `messages` came from: [`Origin::Tool`] when any of them holds a
/// tool's result (text a third party may have written: a deployment can keep it out of a
/// turn), else [`Origin::Extracted`].
fn extracted_origin(messages: &[StoredMessage]) -> Origin {
    let from_a_tool = messages.iter().any(|m| {
        m.message.role == Role::Tool
            || m.message
                .parts
                .iter()
                .any(|part| matches!(part, Part::ToolResult { .. }))
    });
    if from_a_tool {
        Origin::Tool
    } else {
        Origin::Extracted
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

impl Memory {
    /// The commit's extraction step: the extractor over the messages after the extracted
    /// cursor; a failure goes to `on_error` and is reported, and the same messages are offered
    /// again by the next commit.
    pub(crate) async fn extraction_step(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
    ) -> ExtractionReport {
        if !self.config.extract.enabled {
            return ExtractionReport::Skipped;
        }
        self.extract(scope, conversation)
            .await
            .unwrap_or_else(|error| ExtractionReport::Failed {
                error: self.report_failure(scope, conversation, &error),
            })
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
        let writer = Provenance::new(
            Principal::extractor(extractor.model())?,
            extracted_origin(&fresh),
        );
        let backend = self
            .backend
            .acting_as(writer)
            .unwrap_or_else(|| Arc::clone(&self.backend));
        let memories = self.memories.through(Arc::clone(&backend));
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
                    valid_from: fact.valid_from,
                    valid_until: fact.valid_until,
                    ..NewMemory::new(kind, data.clone())
                };
                match memories.store(&facts_scope, memory).await {
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
            let mut new = NewFact::new(fact.text.clone())
                .with_tags(tags)
                .with_score(fact.confidence.min(1.0))
                .with_source(source.clone())
                .with_embedding(embeddings.next())
                .with_expires_at(expires_at)
                .with_valid_from(fact.valid_from)
                .with_valid_until(fact.valid_until);
            new.kind.clone_from(&fact.kind);
            new.key.clone_from(&fact.key);
            let outcome = backend.remember(&facts_scope, new, options).await?;
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
}
