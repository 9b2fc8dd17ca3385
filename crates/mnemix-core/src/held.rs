//! A subject's current facts held in memory per version of them, so a recall with a vector
//! ranks them there instead of reading every fact with its embedding on each call.
//!
//! A backend keeps a version per `(namespace, subject)` that every write of the subject's
//! facts changes, by any process (a trigger, or every fact script), and never gives twice; it
//! reads the subject's current facts once per version into a [`HeldFactsCache`], ranks with
//! [`HeldFacts::rank`] (the definition of [`rank_candidates`]) and reads only the facts
//! ranked. A writer's own change ([`HeldChange`]) is applied after it commits, so its next
//! recall finds the facts held, not cold.

use crate::exact::{MatrixCache, Weighed};
use crate::fact::{rank_candidates, RecallCandidate};
use crate::lexical::{tokenize, QueryTokens};
use crate::{
    Fact, FactId, Origin, Principal, RecallQuery, RememberOutcome, RememberStatus, Scope, Timestamp,
};

/// The current facts of a subject as recall ranks them, at one version of them.
#[derive(Debug, Clone, Default)]
pub struct HeldFacts(Vec<HeldFact>);

/// A held fact: what recall filters and ranks it by, and the row it is read back from (`pk`).
#[derive(Debug, Clone)]
pub struct HeldFact {
    /// The row's key in its store, to read the fact back by (0 for a store that reads it by
    /// id).
    pub pk: i64,
    /// The fact's id (ties rank by it).
    pub id: FactId,
    /// [`Fact::score`].
    pub score: Option<f32>,
    /// [`Fact::created_at`].
    pub created_at: Timestamp,
    /// [`Fact::expires_at`]: a held fact expired at a recall's time is not admitted.
    pub expires_at: Option<Timestamp>,
    /// [`Fact::kind`].
    pub kind: Option<String>,
    /// [`Fact::tags`].
    pub tags: Vec<String>,
    /// The conversation of [`Fact::source`].
    pub conversation: Option<String>,
    /// [`Fact::embedding`].
    pub embedding: Option<Vec<f32>>,
    /// [`Fact::text`]: recall finds the query's words in it.
    pub text: String,
    /// The origin of [`Fact::provenance`].
    pub origin: Origin,
    /// The writer of [`Fact::provenance`].
    pub written_by: Principal,
}

impl HeldFact {
    /// A fact just written, held as a read of the store would hold it.
    pub fn of(pk: i64, fact: &Fact) -> Self {
        Self {
            pk,
            id: fact.id.clone(),
            score: fact.score,
            created_at: fact.created_at,
            expires_at: fact.expires_at,
            kind: fact.kind.clone(),
            tags: fact.tags.clone(),
            conversation: fact
                .source
                .as_ref()
                .map(|source| source.conversation_id.as_str().to_owned()),
            embedding: fact.embedding.clone(),
            text: fact.text.clone(),
            origin: fact.provenance.origin,
            written_by: fact.provenance.written_by.clone(),
        }
    }

    /// [`RecallQuery::admits`], and unexpired at `now`.
    pub fn admitted(&self, query: &RecallQuery, now: Timestamp) -> bool {
        self.expires_at.is_none_or(|at| at > now)
            && query.admits_provenance(self.origin, &self.written_by)
            && query
                .kind
                .as_ref()
                .is_none_or(|k| self.kind.as_ref() == Some(k))
            && query
                .min_score
                .is_none_or(|min| self.score.is_some_and(|s| s >= min))
            && query
                .conversation
                .as_ref()
                .is_none_or(|c| self.conversation.as_deref() == Some(c.as_str()))
            && query.tags.iter().all(|t| self.tags.contains(t))
    }
}

impl HeldFacts {
    /// Holds `facts`: a subject's current (not superseded) facts, expired ones included or
    /// not.
    pub fn new(facts: Vec<HeldFact>) -> Self {
        Self(facts)
    }

    /// The facts held.
    pub fn facts(&self) -> &[HeldFact] {
        &self.0
    }

    /// The facts `query` recalls at `now`, as [`rank_candidates`] ranks the admitted ones
    /// (the query's words found in their texts), with their relevances, best first, limited.
    pub fn rank(&self, query: &RecallQuery, now: Timestamp) -> Vec<(&HeldFact, f64)> {
        let admitted: Vec<&HeldFact> = self.0.iter().filter(|f| f.admitted(query, now)).collect();
        let words = query
            .text
            .as_deref()
            .map(|text| QueryTokens::new(&tokenize(text)));
        let positions: Vec<Vec<usize>> = admitted
            .iter()
            .map(|f| {
                words
                    .as_ref()
                    .map(|words| words.held_positions(&f.text))
                    .unwrap_or_default()
            })
            .collect();
        let candidates: Vec<RecallCandidate<'_>> = admitted
            .iter()
            .zip(&positions)
            .map(|(f, held)| RecallCandidate {
                held,
                embedding: f.embedding.as_deref(),
                score: f.score,
                created_at: f.created_at,
                id: &f.id,
            })
            .collect();
        rank_candidates(query, &candidates)
            .into_iter()
            .map(|(at, relevance)| (admitted[at], relevance))
            .collect()
    }
}

impl Weighed for HeldFacts {
    fn approximate_bytes(&self) -> usize {
        self.0
            .iter()
            .map(|f| {
                96 + f.id.as_str().len()
                    + f.kind.as_ref().map_or(0, String::len)
                    + f.tags.iter().map(|t| t.len() + 24).sum::<usize>()
                    + f.conversation.as_ref().map_or(0, String::len)
                    + f.embedding.as_ref().map_or(0, |e| e.len() * 4)
                    + f.text.len()
                    + f.written_by.id.len()
                    + f.written_by.label.as_ref().map_or(0, String::len)
            })
            .sum()
    }
}

/// The held facts of every subject a store recalled from, by [`held_key`] and version (a
/// generation number, or a token never set twice).
pub type HeldFactsCache<V = i64> = MatrixCache<(String, String), V, HeldFacts>;

/// A store's held facts cache, within `bytes` (then it starts over): 10,000 facts of a
/// 384-dimension embedder take about 17 MiB. A subject whose facts do not fit is read again on
/// each recall with a vector.
pub fn held_facts_cache<V: PartialEq>(bytes: usize) -> HeldFactsCache<V> {
    MatrixCache::new(bytes)
}

/// The key of a scope's held facts: `(namespace, subject)`, `""` for the shared scope.
pub fn held_key(scope: &Scope) -> (String, String) {
    (
        scope.namespace().as_str().to_owned(),
        scope.subject().map_or("", |s| s.as_str()).to_owned(),
    )
}

/// What a remember did to its subject's current facts, from the version it found (under the
/// writers' lock, before its writes) to the one its writes made: applied to the held facts once
/// the write commits (never before: a rolled-back write's version may not be the data), so the
/// writer's next recall finds them held, not cold.
#[derive(Debug)]
#[must_use = "apply it once the transaction commits"]
pub struct HeldChange<V = i64> {
    key: (String, String),
    /// The version before the writes; `None` when nothing is to be applied (the subject held
    /// no fact, or nothing was written).
    pub from: Option<V>,
    /// The version after them.
    pub to: Option<V>,
    /// Expired facts were purged as of this time.
    now: Timestamp,
    /// The facts superseded or evicted.
    removed: Vec<FactId>,
    /// The fact written.
    added: Option<HeldFact>,
}

impl<V: PartialEq> HeldChange<V> {
    /// A remember of `scope`'s facts at `now` that found them at version `from`.
    pub fn starting(scope: &Scope, from: Option<V>, now: Timestamp) -> Self {
        Self {
            key: held_key(scope),
            from,
            to: None,
            now,
            removed: Vec::new(),
            added: None,
        }
    }

    /// The remember wrote `outcome`'s fact as row `pk` (0 where facts are read back by id):
    /// it is added, and the fact it superseded and those it evicted are removed.
    pub fn wrote(&mut self, pk: i64, outcome: &RememberOutcome) {
        self.removed.clone_from(&outcome.evicted);
        if let RememberStatus::Superseded { previous } = &outcome.status {
            self.removed.push(previous.clone());
        }
        self.added = Some(HeldFact::of(pk, &outcome.fact));
    }

    /// Brings the subject's held facts, if held at the version this change started from, to
    /// the version it made.
    pub fn apply(self, cache: &HeldFactsCache<V>) {
        let (Some(from), Some(to), Some(added)) = (self.from, self.to, self.added) else {
            return;
        };
        let (now, removed) = (self.now, self.removed);
        cache.advance(&self.key, &from, to, move |held| {
            held.0.retain(|fact| {
                !removed.contains(&fact.id) && fact.expires_at.is_none_or(|at| at > now)
            });
            held.0.push(added);
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{NewFact, Scope};

    fn fact(scope: &Scope, text: &str, embedding: Vec<f32>) -> Fact {
        let mut new = NewFact::new(text);
        new.embedding = Some(embedding);
        new.into_fact(scope, Timestamp::from_millis(1_000))
    }

    #[test]
    fn held_facts_rank_as_whole_facts_do() {
        let scope = Scope::new("ns", "user-1").unwrap();
        let facts = [
            fact(&scope, "the deploy runs on fridays", vec![1.0, 0.0]),
            fact(&scope, "lunch is at noon", vec![0.0, 1.0]),
            fact(&scope, "deploy keys rotate monthly", vec![0.6, 0.8]),
        ];
        let held = HeldFacts::new(
            facts
                .iter()
                .enumerate()
                .map(|(pk, f)| HeldFact::of(i64::try_from(pk).unwrap(), f))
                .collect(),
        );
        let query = RecallQuery::text("when is the deploy").with_vector(vec![0.0, 1.0]);
        let now = Timestamp::from_millis(2_000);
        let by_held: Vec<(String, f64)> = held
            .rank(&query, now)
            .into_iter()
            .map(|(held, r)| (held.id.to_string(), r))
            .collect();
        let by_facts: Vec<(String, f64)> = crate::fact::rank_facts(&query, facts.clone())
            .into_iter()
            .map(|s| (s.fact.id.to_string(), s.relevance))
            .collect();
        assert_eq!(by_held, by_facts);
        assert_eq!(by_held.len(), 3, "hybrid recall ranks every admitted fact");
    }

    #[test]
    fn a_change_applies_only_to_the_version_it_started_from() {
        let scope = Scope::new("ns", "user-1").unwrap();
        let cache = held_facts_cache(1 << 20);
        let old = fact(&scope, "old", vec![1.0]);
        cache.insert(
            held_key(&scope),
            5,
            Arc::new(HeldFacts::new(vec![HeldFact::of(1, &old)])),
        );
        let mut change = HeldChange::starting(&scope, Some(5), Timestamp::from_millis(1_500));
        change.wrote(
            2,
            &RememberOutcome {
                fact: fact(&scope, "new", vec![1.0]),
                status: RememberStatus::Superseded {
                    previous: old.id.clone(),
                },
                evicted: Vec::new(),
            },
        );
        change.to = Some(9);
        change.apply(&cache);
        let held = cache.get(&held_key(&scope), &9).expect("advanced to 9");
        assert_eq!(held.facts().iter().map(|f| f.pk).collect::<Vec<_>>(), [2]);

        let mut stale = HeldChange::starting(&scope, Some(5), Timestamp::from_millis(1_500));
        stale.wrote(
            3,
            &RememberOutcome {
                fact: old.clone(),
                status: RememberStatus::Created,
                evicted: Vec::new(),
            },
        );
        stale.to = Some(11);
        stale.apply(&cache);
        assert!(
            cache.get(&held_key(&scope), &11).is_none(),
            "held at 9, not 5"
        );
    }
}
