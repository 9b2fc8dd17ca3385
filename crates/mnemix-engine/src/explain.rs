//! Why `prepare` put what it put in front of the model: [`Memory::explain`] builds the same
//! context and, beside it, every candidate recall weighed with the signals that ranked it and
//! what became of it.

use serde::{Deserialize, Serialize};

use mnemix_core::{ConversationId, FactId, Result, Scope};

use crate::context::Context;
use crate::Memory;

/// A turn's context with the reasons for what recall chose ([`Memory::explain`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Explained {
    /// The context, exactly as [`Memory::prepare`] builds it for the same state.
    pub context: Context,
    /// Why recall chose its messages.
    pub recall: RecallExplanation,
}

/// The candidates of semantic recall and of the facts tier, each with its signals and its
/// verdict.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RecallExplanation {
    /// The first seq of the window: recall looks only before it.
    pub window_start: u64,
    /// Every older message recall weighed, in its final order (the recalled first, as recalled),
    /// then those it left before ranking (in the window, past the candidates).
    pub messages: Vec<MessageCandidate>,
    /// The facts recall returned, best first, and whether each was injected.
    pub facts: Vec<FactCandidate>,
}

/// A message semantic recall weighed, and the signals that ranked it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MessageCandidate {
    /// Its seq.
    pub seq: u64,
    /// Cosine similarity of its vector to the question's, when it was among the nearest
    /// searched.
    pub similarity: Option<f32>,
    /// Its rank (1 = nearest) among the nearest messages before the window.
    pub nearness_rank: Option<usize>,
    /// The question's word relevance of the message itself (hybrid recall; `None` when it
    /// holds none of the question's words).
    pub own_relevance: Option<f64>,
    /// Its word relevance with what it carries of its neighbours' (hybrid recall; `None` when
    /// 0).
    pub relevance: Option<f64>,
    /// Its rank (1 = best) by word relevance among the pooled candidates.
    pub word_rank: Option<usize>,
    /// The reciprocal-rank fusion of its two ranks, which orders the pool (hybrid recall).
    pub fused: Option<f64>,
    /// What became of it.
    pub verdict: MessageVerdict,
}

impl MessageCandidate {
    /// A candidate with no signal yet.
    pub(crate) fn unranked(seq: u64, verdict: MessageVerdict) -> Self {
        Self {
            seq,
            similarity: None,
            nearness_rank: None,
            own_relevance: None,
            relevance: None,
            word_rank: None,
            fused: None,
            verdict,
        }
    }
}

/// What became of a candidate message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageVerdict {
    /// Recalled: in the context's `recalled`, in this order.
    Recalled,
    /// Ranked below `semantic_recall.limit`.
    PastLimit,
    /// Among the nearest, but in the window already (so not recalled again).
    InWindow,
    /// Among the nearest searched, but past `semantic_recall.candidates`.
    PastCandidates,
    /// Chosen, but deleted since it was embedded (a storage limit pruned it).
    Pruned,
}

/// A fact the facts tier recalled, and whether it was injected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FactCandidate {
    /// The fact's id.
    pub id: FactId,
    /// Recall's score of it (word relevance, cosine, or their fused rank, by the recall's mode).
    pub relevance: f64,
    /// The fact's own score (its confidence), which the token budget drops the weakest by.
    pub score: Option<f32>,
    /// Whether it is in the context's facts; `false`: the token budget left it out.
    pub injected: bool,
}

impl Memory {
    /// [`prepare`](Memory::prepare), with why: the same context, built by the same reads, and
    /// beside it every candidate recall weighed, its signals and its verdict. The messages
    /// marked [`MessageVerdict::Recalled`] are exactly the context's `recalled`, in order; the
    /// facts marked injected are exactly its `facts`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use mnemix_core::{InMemoryBackend, Message, Scope};
    /// use mnemix_engine::config::MemoryConfig;
    /// use mnemix_engine::{Memory, MessageVerdict};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mnemix_core::Result<()> {
    /// let mut config = MemoryConfig::default();
    /// config.conversation.enabled = true;
    /// config.conversation.window_size = Some(2);
    /// config.semantic_recall.enabled = true;
    /// let memory = Memory::builder(Arc::new(InMemoryBackend::new())).config(config).build()?;
    /// let scope = Scope::for_subject("user-42")?;
    /// let (thread, _) = memory.auto_conversation(&scope, "support", 0).await?;
    /// let turns = ["My cat is called Miso", "Nice name", "I deploy to fly.io", "Noted", "Hi", "Hello"];
    /// let messages = turns.iter().enumerate().map(|(i, text)| {
    ///     if i % 2 == 0 { Message::user(*text) } else { Message::assistant(*text) }
    /// });
    /// memory.commit(&scope, &thread.id, messages.collect()).await?;
    ///
    /// let explained = memory.explain(&scope, &thread.id, "What is my cat called?").await?;
    /// let recalled: Vec<u64> = explained.recall.messages.iter()
    ///     .filter(|m| m.verdict == MessageVerdict::Recalled)
    ///     .map(|m| m.seq)
    ///     .collect();
    /// let in_context: Vec<u64> = explained.context.recalled.iter().map(|r| r.message.seq).collect();
    /// assert_eq!(recalled, in_context);
    /// assert_eq!(explained.recall.window_start, 5);
    /// # Ok(()) }
    /// ```
    pub async fn explain(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        user_input: &str,
    ) -> Result<Explained> {
        let (context, recall) = self
            .prepare_explained(scope, conversation, user_input)
            .await?;
        Ok(Explained { context, recall })
    }
}
