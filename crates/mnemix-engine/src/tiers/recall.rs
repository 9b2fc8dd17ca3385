//! Semantic recall: every message with text is embedded by a commit step (in its conversational
//! context, driven by its own cursor), and `prepare` recalls, around the window, the best of
//! the older messages nearest the turn's query and of those its words match best (hybrid).

use std::collections::{HashMap, HashSet};
use std::sync::PoisonError;

use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use mnemix_core::adapter::reciprocal_rank_fusion;
use mnemix_core::lexical;

use crate::terms::{QuestionTerms, TermsCache};
use mnemix_core::Timestamp;
use mnemix_core::{AppendReceipt, CollectionSpec, Filter, VectorHit, VectorQuery, VectorRecord};
use mnemix_core::{ConversationId, MessageId, Namespace, Scope, VectorId};
use mnemix_core::{LoadOptions, MemoryError, Message, Part, Result, Role, StoredMessage};

use crate::config::{check_positive, check_unit, SemanticRecallConfig};
use crate::context::RecalledMessage;
use crate::explain::{MessageCandidate, MessageVerdict};
use crate::Memory;

/// The collection (in the caller's namespace) holding message embeddings for semantic recall.
pub const MESSAGE_COLLECTION: &str = "agent-memory-messages";
/// The conversation cursor below which every message is embedded.
pub const EMBEDDED_CURSOR: &str = "agent-memory.embedded";

/// How much memory a [`Memory`] keeps the terms of recalled messages in (about 500 bytes for a
/// paragraph, so some 30,000 messages): re-ranking a turn's candidates then reads no message's
/// words again.
pub(crate) const RECALLED_TERMS_BUDGET: usize = 16 << 20;

impl SemanticRecallConfig {
    pub(crate) fn validate(&self) -> Result<()> {
        check_positive("semantic_recall.limit", self.limit)?;
        check_positive("semantic_recall.candidates", self.candidates)?;
        check_unit("semantic_recall.threshold", self.threshold)?;
        check_unit("semantic_recall.context_weight", self.context_weight)
    }
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

impl Memory {
    /// The conversation's messages nearest to the query's `vector` (`prepare`'s first round,
    /// before the window is known), with the vector; none when the tier is off or there is no
    /// query.
    pub(crate) async fn nearest_messages(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        vector: Option<&[f32]>,
    ) -> Result<Option<(Vec<f32>, Vec<VectorHit>)>> {
        let Some(vector) = vector.filter(|_| self.config.semantic_recall.enabled) else {
            return Ok(None);
        };
        let k = self.first_message_search_k();
        let hits = self
            .search_messages(scope, conversation, vector, None, k)
            .await?;
        Ok(Some((vector.to_vec(), hits)))
    }

    /// Every message of the conversation recall knows ([`is_said`]), in order, when recall looks
    /// for the question's words in them (`prepare`'s first round: the window is not known yet,
    /// so the whole conversation is read beside it).
    pub(crate) async fn said_messages(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        wants_query: bool,
    ) -> Result<Option<Vec<StoredMessage>>> {
        let recall = &self.config.semantic_recall;
        if !(wants_query && recall.enabled && recall.candidate_count() > recall.limit) {
            return Ok(None);
        }
        let options = LoadOptions::default()
            .with_roles(vec![Role::User, Role::Assistant])
            .with_sanitize(false);
        let mut said = self.backend.load(scope, conversation, options).await?;
        said.retain(|m| is_said(&m.message));
        Ok(Some(said))
    }

    /// The older messages recalled around the window (`prepare`'s second round, which knows
    /// where the window starts), from the first round's `nearest` and `said` messages.
    pub(crate) async fn recalled_before(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        user_input: &str,
        nearest: Option<(Vec<f32>, Vec<VectorHit>)>,
        said: Option<Vec<StoredMessage>>,
        window_start: u64,
    ) -> Result<(Vec<RecalledMessage>, Vec<MessageCandidate>)> {
        match nearest {
            Some((vector, hits)) => {
                let earlier = said.map(|mut said| {
                    said.retain(|m| m.seq < window_start);
                    said
                });
                self.recall_messages(
                    scope,
                    conversation,
                    (user_input, &vector),
                    hits,
                    earlier,
                    window_start,
                )
                .await
            }
            None => Ok((Vec::new(), Vec::new())),
        }
    }

    /// What the commit's embedding step needs of the new messages, kept before the append
    /// takes them (nothing when the tier is off).
    pub(crate) fn to_embed(&self, new_messages: &[Message]) -> HashMap<MessageId, Message> {
        if !self.config.semantic_recall.enabled {
            return HashMap::new();
        }
        new_messages
            .iter()
            .map(|m| (m.id.clone(), m.clone()))
            .collect()
    }

    /// The embedded cursor's position (0 when unset), read beside the append: when it stands
    /// just before the appended messages, they are all there is to embed, with no read after
    /// the append. `None` when the tier is off or the read failed (the step then reads what
    /// follows the cursor).
    pub(crate) async fn embedded_cursor(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
    ) -> Option<u64> {
        if !self.config.semantic_recall.enabled {
            return None;
        }
        let cursor = self.backend.cursor(scope, conversation, EMBEDDED_CURSOR);
        cursor.await.ok().map(|at| at.unwrap_or(0))
    }

    /// The commit's embedding step: every message after the embedded cursor that carries
    /// text; a failure goes to `on_error` and is reported, and the next commit embeds them.
    pub(crate) async fn embedding_step(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        embedded: Option<u64>,
        append: &AppendReceipt,
        said: &HashMap<MessageId, Message>,
    ) -> EmbeddingReport {
        if !self.config.semantic_recall.enabled {
            return EmbeddingReport::Skipped;
        }
        let just_appended = embedded.and_then(|cursor| only_appended_after(cursor, append, said));
        match self
            .embed_new_messages(scope, conversation, just_appended)
            .await
        {
            Ok(None) => EmbeddingReport::Skipped,
            Ok(Some(messages)) => EmbeddingReport::Embedded { messages },
            Err(error) => EmbeddingReport::Failed {
                error: self.report_failure(scope, conversation, &error),
            },
        }
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
        let with_text: Vec<&StoredMessage> = fresh.iter().filter(|m| is_said(&m.message)).collect();
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
    ) -> Result<Vec<VectorHit>> {
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

    /// Older messages (before `window_start`) of this conversation relevant to the query: the
    /// nearest candidates before the window (from the first round's `hits`, the nearest
    /// `candidates + window_size` of the whole conversation) and, when recall is hybrid, the
    /// candidates the question's words rank best over the `earlier` messages (every one before
    /// the window), in [`hybrid_order`]; beside them, every candidate weighed with its signals.
    async fn recall_messages(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        (text, vector): (&str, &[f32]),
        hits: Vec<VectorHit>,
        earlier: Option<Vec<StoredMessage>>,
        window_start: u64,
    ) -> Result<(Vec<RecalledMessage>, Vec<MessageCandidate>)> {
        if window_start <= 1 {
            return Ok((Vec::new(), Vec::new()));
        }
        let recall = &self.config.semantic_recall;
        let candidates = recall.candidate_count();
        let seq_of = |hit: &VectorHit| hit.record.metadata.get("seq")?.as_u64();
        let searched = hits.len();
        let (mut hits, in_window): (Vec<VectorHit>, Vec<VectorHit>) = hits
            .into_iter()
            .partition(|hit| seq_of(hit).is_some_and(|seq| seq < window_start));
        if hits.len() < candidates && searched == self.first_message_search_k() {
            // More of the nearest were at or past the window start than the window holds:
            // messages appended since it was read. Search before the window itself.
            hits = self
                .search_messages(scope, conversation, vector, Some(window_start), candidates)
                .await?;
        }
        let past_candidates = hits.split_off(candidates.min(hits.len()));
        let cosine: HashMap<u64, f32> = hits
            .iter()
            .filter_map(|hit| Some((seq_of(hit)?, hit.score)))
            .collect();
        let nearness: Vec<u64> = hits.iter().filter_map(seq_of).collect();
        let (ranked, mut by_seq) = if let Some(earlier) = earlier {
            let query = QuestionTerms::of_question(text, recall.language);
            // Under a threshold only messages known to be that near are recalled: the words
            // then order the nearest and propose none of their own.
            let proposed = if recall.threshold > 0.0 {
                0
            } else {
                candidates
            };
            let words = Words {
                query: &query,
                carried: f64::from(recall.context_weight),
                terms: &self.recalled_terms,
            };
            let ranked = hybrid_order(&words, &nearness, &earlier, proposed);
            let by_seq: HashMap<u64, StoredMessage> =
                earlier.into_iter().map(|m| (m.seq, m)).collect();
            (ranked, by_seq)
        } else {
            (Ranking::by_nearness(nearness), HashMap::new())
        };
        let chosen: Vec<u64> = ranked.order.iter().copied().take(recall.limit).collect();
        let missing: Vec<u64> = chosen
            .iter()
            .copied()
            .filter(|seq| !by_seq.contains_key(seq))
            .collect();
        if !missing.is_empty() {
            by_seq.extend(
                self.backend
                    .load_seqs(scope, conversation, &missing)
                    .await?
                    .into_iter()
                    .map(|stored| (stored.seq, stored)),
            );
        }
        let weighed = ranked.candidates(&cosine, recall.limit, |seq| by_seq.contains_key(&seq));
        let left = |hits: Vec<VectorHit>, verdict| {
            hits.into_iter().filter_map(move |hit| {
                Some(MessageCandidate {
                    similarity: Some(hit.score),
                    ..MessageCandidate::unranked(seq_of(&hit)?, verdict)
                })
            })
        };
        let weighed = weighed
            .into_iter()
            .chain(left(in_window, MessageVerdict::InWindow))
            .chain(left(past_candidates, MessageVerdict::PastCandidates))
            .collect();
        // Best first, as ranked; a message pruned since it was embedded is simply not
        // recalled.
        let recalled = chosen
            .iter()
            .filter_map(|seq| {
                let mut stored = by_seq.remove(seq)?;
                stored
                    .message
                    .parts
                    .retain(|p| matches!(p, Part::Text { .. }));
                Some(RecalledMessage {
                    message: stored,
                    score: cosine.get(seq).copied().unwrap_or(0.0),
                })
            })
            .collect();
        Ok((recalled, weighed))
    }
}

/// Whether recall knows a message: said by the user or the assistant, with text. The
/// embedding step embeds exactly these, and only these are looked in for the question's words.
fn is_said(message: &Message) -> bool {
    matches!(message.role, Role::User | Role::Assistant) && !message.text().trim().is_empty()
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

/// How the question's words weigh the messages before the window.
struct Words<'a> {
    /// The question's terms.
    query: &'a QuestionTerms,
    /// The share of the relevance of the messages next to it that a message carries, each way
    /// (`context_weight`, as its vector carries the vector before it).
    carried: f64,
    /// The messages' terms, remembered.
    terms: &'a TermsCache,
}

/// The hybrid order of recall, as seqs with the signals that made it. The pool is the nearest messages (`nearness`,
/// nearest first) and the `proposed` best others by the question's lexical relevance over
/// `earlier` (every message before the window, each as it was embedded: speaker, day and text,
/// over its terms in the query's language, the weights of the question's terms taken over the
/// whole of it), each message carrying `carried` of the relevance of the one before it, as its
/// vector carries the vector before it (a reply is found by the words of what it answered), and
/// as much of the one after it (a question is found by the words of its answer), fading. The
/// pool is ordered by reciprocal-rank fusion of nearness and relevance among the pool. Ties
/// keep the pool's order: the nearer first, then the more relevant, then the later message.
///
/// The pool is what makes recall hybrid and not a re-ranking: a message holding the
/// question's rare words (a name, a place) is a candidate even when its vector is not among
/// the nearest, as the nearest are even when they share no word with the question.
fn hybrid_order(
    words: &Words<'_>,
    nearness: &[u64],
    earlier: &[StoredMessage],
    proposed: usize,
) -> Ranking {
    let texts: Vec<String> = earlier.iter().map(|m| embedded_text(&m.message)).collect();
    let held = words
        .terms
        .held_terms_of_each(words.query, texts.iter().map(String::as_str));
    // Each message's own relevance, then what it carries of the messages before it and after
    // it, fading by `carried` per message each way.
    let own = lexical::relevances_of_held(words.query.len(), &held);
    // Only the messages holding some of the question's words, as `relevance` below: a map of
    // every earlier message would cost each turn a map the size of the conversation.
    let own_relevance: HashMap<u64, f64> = earlier
        .iter()
        .zip(&own)
        .filter(|(_, r)| **r > 0.0)
        .map(|(m, r)| (m.seq, *r))
        .collect();
    let (mut before, mut after) = (own.clone(), own.clone());
    for i in 1..own.len() {
        before[i] += words.carried * before[i - 1];
    }
    for i in (1..own.len()).rev() {
        after[i - 1] += words.carried * after[i];
    }
    let relevance_of_index: Vec<f64> = (0..own.len())
        .map(|i| before[i] + after[i] - own[i])
        .collect();
    let relevance: HashMap<u64, f64> = earlier
        .iter()
        .zip(relevance_of_index)
        .filter(|(_, r)| *r > 0.0)
        .map(|(m, r)| (m.seq, r))
        .collect();
    let by_relevance = |list: &mut Vec<u64>| {
        // Stable: ties keep the order they came in.
        list.sort_by(|a, b| relevance[b].total_cmp(&relevance[a]));
    };
    let mut best_by_words: Vec<u64> = earlier
        .iter()
        .rev()
        .map(|m| m.seq)
        .filter(|seq| relevance.contains_key(seq))
        .collect();
    by_relevance(&mut best_by_words);
    let mut pool: Vec<u64> = nearness.to_vec();
    let near: HashSet<u64> = nearness.iter().copied().collect();
    pool.extend(
        best_by_words
            .into_iter()
            .filter(|seq| !near.contains(seq))
            .take(proposed),
    );
    let mut lexical: Vec<u64> = pool
        .iter()
        .copied()
        .filter(|seq| relevance.contains_key(seq))
        .collect();
    by_relevance(&mut lexical);
    let fused = reciprocal_rank_fusion([nearness, lexical.as_slice()]);
    // Stable: ties keep the pool's order (nearest first, then the best by words).
    pool.sort_by(|a, b| fused[b].total_cmp(&fused[a]));
    Ranking {
        order: pool,
        nearness: nearness.to_vec(),
        own_relevance,
        relevance,
        by_words: lexical,
        fused,
    }
}

/// Recall's order of the candidates, and the signals that made it.
struct Ranking {
    /// The candidates, best first.
    order: Vec<u64>,
    /// The nearest candidates, nearest first.
    nearness: Vec<u64>,
    /// Each earlier message's own word relevance, where above 0 (hybrid recall).
    own_relevance: HashMap<u64, f64>,
    /// Each earlier message's word relevance with its carry, where above 0 (hybrid recall).
    relevance: HashMap<u64, f64>,
    /// The pooled candidates the words rank, best first (hybrid recall).
    by_words: Vec<u64>,
    /// Each pooled candidate's fused score (hybrid recall).
    fused: HashMap<u64, f64>,
}

impl Ranking {
    /// The order of vector recall alone: nearest first.
    fn by_nearness(nearness: Vec<u64>) -> Self {
        Self {
            order: nearness.clone(),
            nearness,
            own_relevance: HashMap::new(),
            relevance: HashMap::new(),
            by_words: Vec::new(),
            fused: HashMap::new(),
        }
    }

    /// Every ranked candidate with its signals, in order: the first `limit` recalled (or
    /// pruned, when `held` says the message is gone), the rest past the limit.
    fn candidates(
        &self,
        cosine: &HashMap<u64, f32>,
        limit: usize,
        held: impl Fn(u64) -> bool,
    ) -> Vec<MessageCandidate> {
        let ranks = |list: &[u64]| -> HashMap<u64, usize> {
            list.iter()
                .enumerate()
                .map(|(i, &seq)| (seq, i + 1))
                .collect()
        };
        let (nearness_rank, word_rank) = (ranks(&self.nearness), ranks(&self.by_words));
        self.order
            .iter()
            .enumerate()
            .map(|(i, &seq)| {
                let verdict = match (i < limit, held(seq)) {
                    (true, true) => MessageVerdict::Recalled,
                    (true, false) => MessageVerdict::Pruned,
                    (false, _) => MessageVerdict::PastLimit,
                };
                MessageCandidate {
                    similarity: cosine.get(&seq).copied(),
                    nearness_rank: nearness_rank.get(&seq).copied(),
                    own_relevance: self.own_relevance.get(&seq).copied(),
                    relevance: self.relevance.get(&seq).copied(),
                    word_rank: word_rank.get(&seq).copied(),
                    fused: self.fused.get(&seq).copied(),
                    ..MessageCandidate::unranked(seq, verdict)
                }
            })
            .collect()
    }
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
