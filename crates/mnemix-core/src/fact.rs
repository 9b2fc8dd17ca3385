//! Facts ("user memory"): the [`FactStore`] contract, its types and the shared ranking.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};
use crate::lexical;
use crate::provenance::{Origin, Principal, Provenance};
use crate::scope::{validate_identifier, ConversationId, FactId, MessageId, Scope};
use crate::similarity::cosine;
use crate::time::Timestamp;
use crate::Page;

/// Where a fact was learned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FactSource {
    /// The conversation.
    pub conversation_id: ConversationId,
    /// The messages it was extracted from.
    pub message_ids: Vec<MessageId>,
}

/// A statement about a subject that travels across conversations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fact {
    /// Its id.
    pub id: FactId,
    /// Its owner.
    pub scope: Scope,
    /// The statement.
    pub text: String,
    /// A kind or schema name (`"preference"`, `"profile"`, …).
    pub kind: Option<String>,
    /// Supersede key: a new fact with the same key replaces this one (kept as history).
    pub key: Option<String>,
    /// Tags.
    pub tags: Vec<String>,
    /// Confidence in [0, 1].
    pub score: Option<f32>,
    /// Where it was learned.
    pub source: Option<FactSource>,
    /// Embedding for semantic recall.
    pub embedding: Option<Vec<f32>>,
    /// When it was stored.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
    /// When it stops being returned.
    pub expires_at: Option<Timestamp>,
    /// When it was superseded (it is history from then on).
    pub valid_to: Option<Timestamp>,
    /// The fact that superseded it.
    pub superseded_by: Option<FactId>,
    /// Who wrote this version and where its content came from: set by the front layer from
    /// the handle that wrote it, never from the request (see [`Provenance`]).
    #[serde(default)]
    pub provenance: Provenance,
    /// When it became true in the world, as its writer said (world time: not when the store
    /// learned it, which is `created_at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_from: Option<Timestamp>,
    /// When it stopped being true in the world: as its writer said, or closed by a version of
    /// its key that became true later ([`closed_valid_until`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<Timestamp>,
}

impl Fact {
    /// Whether the fact is past its expiry at `now`.
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }

    /// Whether it is current: not superseded.
    pub fn is_current(&self) -> bool {
        self.superseded_by.is_none()
    }

    /// [`FactStore::set_expiry`]'s rule for one fact in hand: a live fact takes the new expiry
    /// and `updated_at = now` (true); an expired one is left as it is (false).
    pub fn apply_expiry(&mut self, expires_at: Option<Timestamp>, now: Timestamp) -> bool {
        if self.is_expired(now) {
            return false;
        }
        self.expires_at = expires_at;
        self.updated_at = now;
        true
    }
}

/// What [`FactStore::remember`] stores: [`NewFact::new`] and the `with_` methods build one
/// (it may gain fields).
///
/// ```
/// use mnemix_core::NewFact;
/// let fact = NewFact::new("Prefers window seats").with_key("seat").with_tags(["travel"]);
/// assert_eq!(fact.key.as_deref(), Some("seat"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NewFact {
    /// The statement (non-empty).
    pub text: String,
    /// Kind.
    pub kind: Option<String>,
    /// Supersede key.
    pub key: Option<String>,
    /// Tags.
    pub tags: Vec<String>,
    /// Confidence in [0, 1].
    pub score: Option<f32>,
    /// Where it was learned.
    pub source: Option<FactSource>,
    /// Embedding for semantic recall (finite, non-zero).
    pub embedding: Option<Vec<f32>>,
    /// Expiry.
    pub expires_at: Option<Timestamp>,
    /// When it became true in the world (see [`Fact::valid_from`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_from: Option<Timestamp>,
    /// When it stopped being true in the world (after `valid_from`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<Timestamp>,
    /// Set by the front layer alone, from the handle's context: no request can carry it.
    #[serde(skip)]
    provenance: Provenance,
}

impl NewFact {
    /// A fact with just its text.
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }

    /// The same with a kind.
    #[must_use]
    pub fn with_kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// The same with a supersede key.
    #[must_use]
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// The same with these tags (in place of any it had).
    #[must_use]
    pub fn with_tags(mut self, tags: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// The same with a confidence (or none).
    #[must_use]
    pub fn with_score(mut self, score: impl Into<Option<f32>>) -> Self {
        self.score = score.into();
        self
    }

    /// The same with where it was learned (or nowhere).
    #[must_use]
    pub fn with_source(mut self, source: impl Into<Option<FactSource>>) -> Self {
        self.source = source.into();
        self
    }

    /// The same with an embedding (or none).
    #[must_use]
    pub fn with_embedding(mut self, embedding: impl Into<Option<Vec<f32>>>) -> Self {
        self.embedding = embedding.into();
        self
    }

    /// The same expiring at this time (or never).
    #[must_use]
    pub fn with_expires_at(mut self, expires_at: impl Into<Option<Timestamp>>) -> Self {
        self.expires_at = expires_at.into();
        self
    }

    /// The same true in the world from this time (or since an unknown time).
    #[must_use]
    pub fn with_valid_from(mut self, valid_from: impl Into<Option<Timestamp>>) -> Self {
        self.valid_from = valid_from.into();
        self
    }

    /// The same true in the world until this time (or still).
    #[must_use]
    pub fn with_valid_until(mut self, valid_until: impl Into<Option<Timestamp>>) -> Self {
        self.valid_until = valid_until.into();
        self
    }

    /// Who writes it, as the front layer set it ([`Provenance::default`], unrecorded, until
    /// then): what a backend stores.
    pub fn provenance(&self) -> &Provenance {
        &self.provenance
    }

    /// The front layer's: the provenance of the handle writing it.
    pub(crate) fn set_provenance(&mut self, provenance: Provenance) {
        self.provenance = provenance;
    }

    /// The current fact this makes in `scope`: a fresh id, created and updated `now`.
    pub fn into_fact(self, scope: &Scope, now: Timestamp) -> Fact {
        Fact {
            id: FactId::generate(),
            scope: scope.clone(),
            text: self.text,
            kind: self.kind,
            key: self.key,
            tags: self.tags,
            score: self.score,
            source: self.source,
            embedding: self.embedding,
            created_at: now,
            updated_at: now,
            expires_at: self.expires_at,
            valid_to: None,
            superseded_by: None,
            provenance: self.provenance,
            valid_from: self.valid_from,
            valid_until: self.valid_until,
        }
    }

    /// Checks text, identifiers, score, embedding and valid time.
    pub fn validate(&self) -> Result<()> {
        check_fact_fields(
            &self.text,
            self.kind.as_deref(),
            self.key.as_deref(),
            &self.tags,
            self.score,
            self.embedding.as_deref(),
        )?;
        check_valid_time(self.valid_from, self.valid_until)
    }
}

/// The rules every written fact follows, whether remembered or restored: non-empty text,
/// identifiers for kind, key and tags, a score in [0, 1], a usable embedding.
fn check_fact_fields(
    text: &str,
    kind: Option<&str>,
    key: Option<&str>,
    tags: &[String],
    score: Option<f32>,
    embedding: Option<&[f32]>,
) -> Result<()> {
    if text.trim().is_empty() {
        return Err(MemoryError::invalid("fact text must not be empty"));
    }
    for (what, value) in [("fact kind", kind), ("fact key", key)] {
        if let Some(value) = value {
            validate_identifier(what, value)?;
        }
    }
    tags.iter()
        .try_for_each(|t| validate_identifier("tag", t))?;
    if let Some(score) = score {
        if !(0.0..=1.0).contains(&score) {
            return Err(MemoryError::invalid(format!(
                "fact score must be in [0, 1], got {score}"
            )));
        }
    }
    if let Some(embedding) = embedding {
        crate::vector::check_vector(embedding, embedding.len(), crate::Metric::Cosine)?;
    }
    Ok(())
}

/// A valid time is an interval: it ends after it starts.
fn check_valid_time(from: Option<Timestamp>, until: Option<Timestamp>) -> Result<()> {
    match (from, until) {
        (Some(from), Some(until)) if until <= from => Err(MemoryError::invalid(format!(
            "a fact's valid_until ({}) must be after its valid_from ({})",
            until.as_millis(),
            from.as_millis()
        ))),
        _ => Ok(()),
    }
}

impl Fact {
    /// Checks a stored fact (one being restored) by the rules [`NewFact::validate`] applies
    /// to a new one, and its provenance.
    pub fn validate(&self) -> Result<()> {
        check_fact_fields(
            &self.text,
            self.kind.as_deref(),
            self.key.as_deref(),
            &self.tags,
            self.score,
            self.embedding.as_deref(),
        )?;
        self.provenance.validate()?;
        check_valid_time(self.valid_from, self.valid_until)
    }

    /// Whether it was true in the world at `t`: from `valid_from` (or, when its writer gave
    /// none, from when the store learned it) until `valid_until` (or, when none was given,
    /// until it was superseded, or still).
    pub fn valid_at(&self, t: Timestamp) -> bool {
        let from = self.valid_from.unwrap_or(self.created_at);
        let until = self.valid_until.or(self.valid_to);
        from <= t && until.is_none_or(|until| t < until)
    }

    /// Whether the store knew it at `t`: stored by then and not yet superseded.
    pub fn known_at(&self, t: Timestamp) -> bool {
        self.created_at <= t && self.valid_to.is_none_or(|superseded| t < superseded)
    }
}

/// The `valid_until` a key's current version takes when `new_valid_from` supersedes it: the
/// new version's start when that is after the old one's start and before its given end (the
/// old one stopped being true when the new one became true); otherwise its own.
///
/// ```
/// use mnemix_core::adapter::closed_valid_until;
/// use mnemix_core::Timestamp;
/// let (march, june) = (Timestamp::from_millis(3), Timestamp::from_millis(6));
/// assert_eq!(closed_valid_until(None, None, Some(march)), Some(march));
/// assert_eq!(closed_valid_until(Some(june), None, Some(march)), None);
/// assert_eq!(closed_valid_until(None, Some(march), Some(june)), Some(march));
/// ```
pub fn closed_valid_until(
    old_valid_from: Option<Timestamp>,
    old_valid_until: Option<Timestamp>,
    new_valid_from: Option<Timestamp>,
) -> Option<Timestamp> {
    match new_valid_from {
        Some(start)
            if old_valid_from.is_none_or(|from| from < start)
                && old_valid_until.is_none_or(|until| start < until) =>
        {
            Some(start)
        }
        _ => old_valid_until,
    }
}

/// Options of [`FactStore::remember`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RememberOptions {
    /// Keep at most this many current facts in the scope, evicting in the same transaction.
    pub max_facts: Option<usize>,
    /// Set by the registry of kinds and grants alone (nothing else can make a
    /// [`RegistryWrite`](crate::registry::RegistryWrite)): the front layer refuses a fact of the
    /// registry's reserved shapes (a kind, key or tag starting with `_`) without it.
    #[serde(skip)]
    pub registry: Option<crate::registry::RegistryWrite>,
}

/// Setters, so that a field added later breaks no caller (`RememberOptions` is `#[non_exhaustive]`).
impl RememberOptions {
    /// Sets [`max_facts`](Self::max_facts).
    #[must_use]
    pub fn with_max_facts(mut self, max_facts: usize) -> Self {
        self.max_facts = Some(max_facts);
        self
    }
}

/// What [`FactStore::remember`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum RememberStatus {
    /// A new fact was stored.
    Created,
    /// A current fact with the same key and text existed; nothing changed.
    Duplicate,
    /// A new fact replaced the current fact of its key, which is now history.
    Superseded {
        /// The fact replaced.
        previous: FactId,
    },
}

/// The result of [`FactStore::remember`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RememberOutcome {
    /// The stored (or already present) fact.
    pub fact: Fact,
    /// What happened.
    pub status: RememberStatus,
    /// Facts evicted by `max_facts`, in eviction order.
    pub evicted: Vec<FactId>,
}

/// A recall of [`FactStore::recall`]: lexical with `text`, semantic with `vector`, hybrid with both.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RecallQuery {
    /// Query text (lexical recall).
    pub text: Option<String>,
    /// Query embedding (semantic recall against fact embeddings, cosine).
    pub vector: Option<Vec<f32>>,
    /// Only facts carrying every one of these tags.
    pub tags: Vec<String>,
    /// Only facts of this kind.
    pub kind: Option<String>,
    /// Only facts whose score is at least this (facts without a score are excluded).
    pub min_score: Option<f32>,
    /// Only facts learned in this conversation (their `source`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<ConversationId>,
    /// Most results (default 10).
    pub limit: Option<usize>,
    /// Only facts of one of these origins (all when empty): e.g. leave out what was derived
    /// from tool results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub origins: Vec<Origin>,
    /// Only facts written by one of these principals ([`Principal::same_writer`]; all when
    /// empty): e.g. leave out what another agent wrote.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub written_by: Vec<Principal>,
    /// What was true in the world at this time ([`Fact::valid_at`]), superseded versions
    /// included, instead of what the store holds as current.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_of: Option<Timestamp>,
    /// What the store knew at this time ([`Fact::known_at`]): the versions current then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_at: Option<Timestamp>,
}

/// Setters, so that a field added later breaks no caller (`RecallQuery` is `#[non_exhaustive]`).
impl RecallQuery {
    /// Sets [`origins`](Self::origins).
    #[must_use]
    pub fn with_origins(mut self, origins: impl IntoIterator<Item = Origin>) -> Self {
        self.origins = origins.into_iter().collect();
        self
    }

    /// Sets [`written_by`](Self::written_by).
    #[must_use]
    pub fn with_written_by(mut self, principals: impl IntoIterator<Item = Principal>) -> Self {
        self.written_by = principals.into_iter().collect();
        self
    }

    /// Sets [`as_of`](Self::as_of).
    #[must_use]
    pub fn with_as_of(mut self, t: Timestamp) -> Self {
        self.as_of = Some(t);
        self
    }

    /// Sets [`known_at`](Self::known_at).
    #[must_use]
    pub fn with_known_at(mut self, t: Timestamp) -> Self {
        self.known_at = Some(t);
        self
    }

    /// Whether it reads the past ([`as_of`](Self::as_of) or [`known_at`](Self::known_at)):
    /// superseded versions are then candidates too.
    pub fn reads_the_past(&self) -> bool {
        self.as_of.is_some() || self.known_at.is_some()
    }

    /// Whether a fact's writer and origin pass the query's filters by them.
    pub fn admits_provenance(&self, origin: Origin, written_by: &Principal) -> bool {
        (self.origins.is_empty() || self.origins.contains(&origin))
            && (self.written_by.is_empty()
                || self.written_by.iter().any(|p| p.same_writer(written_by)))
    }
    /// Sets [`text`](Self::text).
    #[must_use]
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    /// Sets [`vector`](Self::vector).
    #[must_use]
    pub fn with_vector(mut self, vector: Vec<f32>) -> Self {
        self.vector = Some(vector);
        self
    }

    /// Sets [`tags`](Self::tags).
    #[must_use]
    pub fn with_tags(mut self, tags: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// Sets [`kind`](Self::kind).
    #[must_use]
    pub fn with_kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Sets [`min_score`](Self::min_score).
    #[must_use]
    pub fn with_min_score(mut self, min_score: f32) -> Self {
        self.min_score = Some(min_score);
        self
    }

    /// Sets [`conversation`](Self::conversation).
    #[must_use]
    pub fn with_conversation(mut self, conversation: ConversationId) -> Self {
        self.conversation = Some(conversation);
        self
    }

    /// Sets [`limit`](Self::limit).
    #[must_use]
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }
}

impl RecallQuery {
    /// A lexical recall.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// Checks the query.
    pub fn validate(&self) -> Result<()> {
        if self.text.is_none() && self.vector.is_none() {
            return Err(MemoryError::invalid(
                "recall needs a query text, a query vector, or both",
            ));
        }
        if let Some(v) = &self.vector {
            crate::vector::check_vector(v, v.len(), crate::Metric::Cosine)?;
        }
        if matches!(self.limit, Some(0)) {
            return Err(MemoryError::invalid("recall limit must be at least 1"));
        }
        if self.min_score.is_some_and(|s| !s.is_finite()) {
            return Err(MemoryError::invalid("min_score must be finite"));
        }
        Ok(())
    }

    /// Whether a fact passes the tag, kind, score, conversation, origin, writer and time
    /// filters.
    pub fn admits(&self, fact: &Fact) -> bool {
        self.admits_provenance(fact.provenance.origin, &fact.provenance.written_by)
            && self.as_of.is_none_or(|t| fact.valid_at(t))
            && self.known_at.is_none_or(|t| fact.known_at(t))
            && self.tags.iter().all(|t| fact.tags.contains(t))
            && self
                .kind
                .as_ref()
                .is_none_or(|k| fact.kind.as_ref() == Some(k))
            && self
                .min_score
                .is_none_or(|min| fact.score.is_some_and(|s| s >= min))
            && self.conversation.as_ref().is_none_or(|c| {
                fact.source
                    .as_ref()
                    .is_some_and(|s| &s.conversation_id == c)
            })
    }
}

/// Default number of recalled facts.
pub const DEFAULT_RECALL_LIMIT: usize = 10;
/// The `k` of reciprocal-rank fusion. 60 is the usual choice for long result lists; recall
/// wants its first ten right, and on a long-conversation benchmark 10 put more of the
/// answering turns in the top ten, with either embedder (RECALL.md, "How each default was
/// chosen").
pub const RRF_K: f64 = 10.0;

/// A recalled fact and how relevant it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoredFact {
    /// The fact.
    pub fact: Fact,
    /// Lexical: the IDF-weighted share of query tokens matched ([`lexical::relevances`]);
    /// semantic: cosine; hybrid: fused RRF score.
    pub relevance: f64,
}

/// What recall ranks a current, admitted fact by, without its text or the rest of it: a backend
/// with a token index ([`fact_tokens`]) can read these for a scope's candidates, rank them with
/// [`rank_candidates`] and fetch only the facts that make the top.
#[derive(Debug, Clone, Copy)]
pub struct RecallCandidate<'a> {
    /// The ascending positions, in the order of the query text's tokens
    /// ([`lexical::tokenize`]), of the query tokens the fact's text holds
    /// ([`lexical::held_positions`]); empty when it holds none or the query has no text.
    pub held: &'a [usize],
    /// The fact's embedding.
    pub embedding: Option<&'a [f32]>,
    /// The fact's score.
    pub score: Option<f32>,
    /// When the fact was created.
    pub created_at: Timestamp,
    /// The fact's id.
    pub id: &'a FactId,
}

fn tie_break(a: &RecallCandidate<'_>, b: &RecallCandidate<'_>) -> Ordering {
    let score = |f: &RecallCandidate<'_>| f.score.unwrap_or(f32::NEG_INFINITY);
    score(b)
        .total_cmp(&score(a))
        .then_with(|| b.created_at.cmp(&a.created_at))
        .then_with(|| a.id.cmp(b.id))
}

/// Orders hits (positions in `candidates`, relevance) best first.
fn sort_hits(hits: &mut [(usize, f64)], candidates: &[RecallCandidate<'_>]) {
    hits.sort_by(|a, b| {
        b.1.total_cmp(&a.1)
            .then_with(|| tie_break(&candidates[a.0], &candidates[b.0]))
    });
}

/// The reference recall over candidate facts: lexical (see [`lexical`](mod@crate::lexical)), semantic or hybrid
/// (reciprocal-rank fusion with k = [`RRF_K`]) as the query asks, after the tag/kind/score filters, limited.
///
/// Candidates must be current, unexpired facts of the scope. A backend may pass a superset of
/// the facts that can match (e.g. those sharing a token, from its index); the result is the same.
pub fn rank_facts(
    query: &RecallQuery,
    candidates: impl IntoIterator<Item = Fact>,
) -> Vec<ScoredFact> {
    let admitted: Vec<Fact> = candidates.into_iter().filter(|f| query.admits(f)).collect();
    let query_tokens = query
        .text
        .as_deref()
        .map(lexical::tokenize)
        .unwrap_or_default();
    let query_tokens = lexical::QueryTokens::new(&query_tokens);
    let held: Vec<Vec<usize>> = admitted
        .iter()
        .map(|f| query_tokens.held_positions(&f.text))
        .collect();
    let ranked: Vec<RecallCandidate<'_>> = admitted
        .iter()
        .zip(&held)
        .map(|(f, held)| RecallCandidate {
            held,
            embedding: f.embedding.as_deref(),
            score: f.score,
            created_at: f.created_at,
            id: &f.id,
        })
        .collect();
    rank_candidates(query, &ranked)
        .into_iter()
        .map(|(position, relevance)| ScoredFact {
            fact: admitted[position].clone(),
            relevance,
        })
        .collect()
}

/// [`rank_facts`] over candidates already admitted by the query's filters
/// ([`RecallQuery::admits`]): the positions in `candidates` of the recalled facts with their
/// relevances, best first, limited. For lexical recall, candidates holding no query token may be
/// left out; for semantic or hybrid recall every admitted fact must be there.
pub fn rank_candidates(
    query: &RecallQuery,
    candidates: &[RecallCandidate<'_>],
) -> Vec<(usize, f64)> {
    let limit = query.limit.unwrap_or(DEFAULT_RECALL_LIMIT);
    let lexical = query.text.as_deref().map(|text| {
        let held: Vec<&[usize]> = candidates.iter().map(|c| c.held).collect();
        let relevances = lexical::relevances_of_held(lexical::tokenize(text).len(), &held);
        let mut hits: Vec<(usize, f64)> = relevances
            .into_iter()
            .enumerate()
            .filter(|(_, relevance)| *relevance > 0.0)
            .collect();
        sort_hits(&mut hits, candidates);
        hits
    });
    let semantic = query.vector.as_deref().map(|vector| {
        let mut hits: Vec<(usize, f64)> = candidates
            .iter()
            .enumerate()
            .filter_map(|(position, c)| {
                let embedding = c.embedding.filter(|e| e.len() == vector.len())?;
                Some((position, f64::from(cosine(vector, embedding))))
            })
            .collect();
        sort_hits(&mut hits, candidates);
        hits
    });
    let mut ranked = match (lexical, semantic) {
        (Some(hits), None) | (None, Some(hits)) => hits,
        (Some(lexical), Some(semantic)) => {
            let lists: [Vec<usize>; 2] =
                [lexical, semantic].map(|hits| hits.into_iter().map(|(p, _)| p).collect());
            let mut fused: Vec<(usize, f64)> =
                reciprocal_rank_fusion(lists.iter().map(Vec::as_slice))
                    .into_iter()
                    .collect();
            sort_hits(&mut fused, candidates);
            fused
        }
        (None, None) => Vec::new(),
    };
    ranked.truncate(limit);
    ranked
}

/// Reciprocal-rank fusion (k = [`RRF_K`]) of ranked lists: each item's score is the sum over
/// the lists holding it of `1 / (k + rank)`, ranks from 1. The caller orders the result (and
/// breaks its ties).
///
/// ```
/// use mnemix_core::adapter::reciprocal_rank_fusion;
/// let fused = reciprocal_rank_fusion([&["a", "b"][..], &["b", "c"][..]]);
/// assert!(fused["b"] > fused["a"] && fused["a"] > fused["c"]);
/// ```
pub fn reciprocal_rank_fusion<'a, K, L>(lists: L) -> HashMap<K, f64>
where
    K: Eq + std::hash::Hash + Clone + 'a,
    L: IntoIterator<Item = &'a [K]>,
{
    let mut fused: HashMap<K, f64> = HashMap::new();
    for list in lists {
        for (rank, item) in list.iter().enumerate() {
            *fused.entry(item.clone()).or_default() += 1.0 / (RRF_K + (rank + 1) as f64);
        }
    }
    fused
}

/// The eviction order of `max_facts`: lowest score first (no score lowest), then oldest, then id.
pub fn eviction_order(a: &Fact, b: &Fact) -> Ordering {
    let score = |f: &Fact| f.score.unwrap_or(f32::NEG_INFINITY);
    score(a)
        .total_cmp(&score(b))
        .then_with(|| a.created_at.cmp(&b.created_at))
        .then_with(|| a.id.cmp(&b.id))
}

/// What a remember will do, decided before anything is written (see [`plan_remember`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RememberPlan {
    /// What to return. Unless it is a duplicate, `outcome.fact` is to be stored and the facts
    /// of `outcome.evicted` deleted.
    pub outcome: RememberOutcome,
    /// The fact it supersedes, as it is to be stored now (history: `valid_to`,
    /// `superseded_by` and `updated_at` set).
    pub superseded: Option<Fact>,
}

/// Decides a remember the same way on every backend that holds a scope's facts in hand: a
/// duplicate of a current fact changes nothing; otherwise the new fact supersedes the current
/// fact of its key, and `max_facts` evicts current facts in [`eviction_order`], never the new
/// one.
///
/// `facts` are the scope's unexpired facts (current and history), read under the lock or
/// transaction that will write the plan.
pub fn plan_remember<'a>(
    facts: impl IntoIterator<Item = &'a Fact>,
    new: NewFact,
    options: &RememberOptions,
    scope: &Scope,
    now: Timestamp,
) -> RememberPlan {
    let current: Vec<&Fact> = facts.into_iter().filter(|f| f.is_current()).collect();
    if let Some(same) = current
        .iter()
        .find(|f| f.key == new.key && f.text == new.text)
    {
        return RememberPlan {
            outcome: RememberOutcome {
                fact: (*same).clone(),
                status: RememberStatus::Duplicate,
                evicted: Vec::new(),
            },
            superseded: None,
        };
    }
    let fact = new.into_fact(scope, now);
    let superseded = fact
        .key
        .as_ref()
        .and_then(|key| current.iter().find(|f| f.key.as_ref() == Some(key)))
        .map(|previous| Fact {
            valid_to: Some(now),
            superseded_by: Some(fact.id.clone()),
            updated_at: now,
            valid_until: closed_valid_until(
                previous.valid_from,
                previous.valid_until,
                fact.valid_from,
            ),
            ..(*previous).clone()
        });
    let status = superseded
        .as_ref()
        .map_or(RememberStatus::Created, |previous| {
            RememberStatus::Superseded {
                previous: previous.id.clone(),
            }
        });
    let mut evicted = Vec::new();
    if let Some(max) = options.max_facts {
        let mut candidates: Vec<&Fact> = current
            .into_iter()
            .filter(|f| superseded.as_ref().is_none_or(|s| s.id != f.id))
            .collect();
        candidates.sort_by(|a, b| eviction_order(a, b));
        let excess = (candidates.len() + 1).saturating_sub(max);
        evicted = candidates
            .into_iter()
            .take(excess)
            .map(|f| f.id.clone())
            .collect();
    }
    RememberPlan {
        outcome: RememberOutcome {
            fact,
            status,
            evicted,
        },
        superseded,
    }
}

/// Puts the versions of one key in [`FactStore::history`] order: along the supersede chain,
/// oldest first, the current version last.
///
/// A forgotten or expired version breaks the chain into runs; runs are ordered by their first
/// version's `(created_at, id)`, except that the run ending in the current version is last.
/// Clocks and ids alone cannot give this order: two supersedes in one millisecond from two
/// writers carry ids in the order they were made, not the order they were applied.
///
/// ```
/// use mnemix_core::adapter::order_history;
/// use mnemix_core::{NewFact, Scope, Timestamp};
/// let scope = Scope::for_subject("u")?;
/// let at = Timestamp::from_millis(7);
/// let fact = |text: &str| NewFact::new(text).into_fact(&scope, at);
/// let (tea, mut coffee) = (fact("tea"), fact("coffee"));
/// // `tea` was applied last: it superseded `coffee`, though its id is smaller.
/// coffee.superseded_by = Some(tea.id.clone());
/// let ordered = order_history(vec![tea.clone(), coffee]);
/// assert_eq!(ordered.last().map(|f| &f.id), Some(&tea.id));
/// # Ok::<(), mnemix_core::MemoryError>(())
/// ```
pub fn order_history(mut versions: Vec<Fact>) -> Vec<Fact> {
    versions.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    let position: HashMap<&FactId, usize> = versions
        .iter()
        .enumerate()
        .map(|(i, f)| (&f.id, i))
        .collect();
    let next: Vec<Option<usize>> = versions
        .iter()
        .map(|f| {
            f.superseded_by
                .as_ref()
                .and_then(|id| position.get(id).copied())
        })
        .collect();
    let mut has_previous = vec![false; versions.len()];
    for &n in next.iter().flatten() {
        has_previous[n] = true;
    }
    let mut runs: Vec<Vec<usize>> = Vec::new();
    let mut placed = vec![false; versions.len()];
    // Heads first, in (created_at, id) order; then whatever a cycle (never written by a
    // store) left, so nothing is dropped.
    let heads = (0..versions.len()).filter(|&i| !has_previous[i]);
    for start in heads.chain(0..versions.len()) {
        let mut run = Vec::new();
        let mut at = Some(start);
        while let Some(i) = at.filter(|&i| !placed[i]) {
            placed[i] = true;
            run.push(i);
            at = next[i];
        }
        if !run.is_empty() {
            runs.push(run);
        }
    }
    // Stable: the run that ends current moves last, the others keep their order.
    runs.sort_by_key(|run| {
        run.last()
            .is_some_and(|&i| versions[i].superseded_by.is_none())
    });
    let mut slots: Vec<Option<Fact>> = versions.into_iter().map(Some).collect();
    runs.into_iter()
        .flatten()
        .filter_map(|i| slots[i].take())
        .collect()
}

/// The distinct tokens of a fact's text (what backends index for lexical recall).
pub fn fact_tokens(text: &str) -> BTreeSet<String> {
    lexical::tokenize(text)
}

/// Every page of [`FactStore::list_facts`] for `query` (its limit and cursor replaced),
/// first to last.
pub(crate) async fn every_page(
    store: &(impl FactStore + ?Sized),
    scope: &Scope,
    query: FactQuery,
) -> Result<Vec<Fact>> {
    let mut facts = Vec::new();
    let mut cursor = None;
    loop {
        let page = query
            .clone()
            .with_limit(crate::page::MAX_PAGE_SIZE)
            .with_cursor(cursor);
        let page = store.list_facts(scope, page).await?;
        facts.extend(page.items);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(facts),
        }
    }
}

/// Filters and paging of [`FactStore::list_facts`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FactQuery {
    /// Include superseded history.
    pub include_superseded: bool,
    /// Only facts carrying every one of these tags.
    pub tags: Vec<String>,
    /// Only facts of this kind.
    pub kind: Option<String>,
    /// Page size (default 50, at most 1000).
    pub limit: Option<usize>,
    /// Cursor from the previous page.
    pub cursor: Option<String>,
}

/// Setters, so that a field added later breaks no caller (`FactQuery` is `#[non_exhaustive]`).
impl FactQuery {
    /// Sets [`include_superseded`](Self::include_superseded).
    #[must_use]
    pub fn with_include_superseded(mut self, include_superseded: bool) -> Self {
        self.include_superseded = include_superseded;
        self
    }

    /// Sets [`tags`](Self::tags).
    #[must_use]
    pub fn with_tags(mut self, tags: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// Sets [`kind`](Self::kind).
    #[must_use]
    pub fn with_kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Sets [`limit`](Self::limit).
    #[must_use]
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Sets [`cursor`](Self::cursor): the `next_cursor` of the previous page (`None` for the
    /// first).
    #[must_use]
    pub fn with_cursor(mut self, cursor: Option<String>) -> Self {
        self.cursor = cursor;
        self
    }
}

impl FactQuery {
    /// The page size (default 50); the front layer has checked the limit.
    pub fn page_limit(&self) -> usize {
        crate::page::page_limit(self.limit)
    }

    /// The position to continue after; the front layer has checked the cursor.
    pub fn after(&self) -> Option<crate::page::Cursor> {
        crate::page::page_after(self.cursor.as_deref())
    }

    /// Whether a fact passes the filters (not the cursor).
    pub fn matches(&self, fact: &Fact) -> bool {
        (self.include_superseded || fact.is_current())
            && self.tags.iter().all(|t| fact.tags.contains(t))
            && self
                .kind
                .as_ref()
                .is_none_or(|k| fact.kind.as_ref() == Some(k))
    }
}

/// Facts about subjects.
///
/// Expired facts are never returned by any method (the store's clock decides "now") and are
/// purged; superseded facts appear only through `get_fact`, `history` and
/// `list_facts(include_superseded)`.
#[async_trait]
pub trait FactStore: Send + Sync {
    /// Stores a fact.
    ///
    /// # Behavior
    /// - Dedupe: a current fact with the same key (or both without key) and identical text is
    ///   returned as `Duplicate`; nothing changes.
    /// - With a key, a different text supersedes the current fact of that key: the old one gets
    ///   `valid_to` and `superseded_by` and stays as history.
    /// - `max_facts` keeps at most that many current facts in the scope, evicting (deleting) in
    ///   [`eviction_order`] in the same transaction; the fact just stored is never evicted.
    /// - Empty text, a score outside [0, 1], a bad embedding or identifier is `InvalidInput`.
    async fn remember(
        &self,
        scope: &Scope,
        fact: NewFact,
        options: RememberOptions,
    ) -> Result<RememberOutcome>;

    /// Recalls facts.
    ///
    /// # Behavior
    /// - Exactly [`rank_facts`] over the scope's current, unexpired facts: lexical per
    ///   [`lexical`](mod@crate::lexical) rules, semantic by cosine to fact embeddings, hybrid by RRF.
    /// - A query with neither text nor vector is `InvalidInput`; one whose text has no token
    ///   (≥ 3 chars) recalls nothing.
    async fn recall(&self, scope: &Scope, query: RecallQuery) -> Result<Vec<ScoredFact>>;

    /// Reads a fact (current or superseded).
    ///
    /// # Behavior
    /// - Missing, expired, or another scope's: `NotFound`.
    async fn get_fact(&self, scope: &Scope, id: &FactId) -> Result<Fact>;

    /// Lists facts newest first with a keyset cursor.
    ///
    /// # Behavior
    /// - Order is `created_at` descending, then id descending; every fact appears exactly once
    ///   across the pages.
    /// - Superseded history is hidden unless `include_superseded`; tags (all-of) and kind filter.
    /// - A malformed cursor or a limit of 0 or above 1000 is `InvalidInput`.
    async fn list_facts(&self, scope: &Scope, query: FactQuery) -> Result<Page<Fact>>;

    /// All versions of a key, oldest first, the current one last.
    ///
    /// # Behavior
    /// - Empty for an unknown key (or another scope's); expired versions are left out.
    /// - The order follows the supersede chain (each version's `superseded_by` is the next
    ///   one), not clocks or ids, so concurrent supersedes within one millisecond still end
    ///   with the current version; [`order_history`] puts fetched versions in this order.
    async fn history(&self, scope: &Scope, key: &str) -> Result<Vec<Fact>>;

    /// Deletes a fact.
    ///
    /// # Behavior
    /// - Returns whether a fact that reads could see was removed: `false` for an unknown id and
    ///   for an expired fact (`expires_at <= now`, already invisible), which is removed all the
    ///   same. Afterwards get is `NotFound` and recall misses it.
    /// - Another scope's fact is untouched and reports `false`.
    async fn forget(&self, scope: &Scope, id: &FactId) -> Result<bool>;

    /// Sets when facts expire (`Some`), or makes them permanent (`None`).
    ///
    /// # Behavior
    /// - Every id naming a live fact of the scope (unexpired, current or superseded) gets
    ///   `expires_at` and `updated_at = now`, all of them at once or none; returns those ids
    ///   (in any order: the front layer answers in the order given). An instant not after now
    ///   expires them at once.
    /// - Unknown ids, another scope's facts and expired facts (already gone to readers) are
    ///   left out of the answer and unchanged: an expired fact is never brought back.
    /// - The front layer drops repeated ids (keeping the first) and refuses more than
    ///   [`MAX_EXPIRY_BATCH`] with `InvalidInput`; an empty list reaches no backend.
    async fn set_expiry(
        &self,
        scope: &Scope,
        ids: &[FactId],
        expires_at: Option<Timestamp>,
    ) -> Result<Vec<FactId>>;
}

/// Most ids one [`FactStore::set_expiry`] takes.
pub const MAX_EXPIRY_BATCH: usize = 1_000;
