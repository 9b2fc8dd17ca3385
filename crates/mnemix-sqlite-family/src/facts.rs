//! Facts: recall through the token index.
//!
//! Recall reads what the index tells of each candidate — which query tokens it holds, its
//! score, age and id — ranks those with `mnemix_core::adapter::rank_candidates`, then reads only
//! the facts that made the top ([`FACTS_BY_PKS`]), in the same read transaction. No fact's text
//! is decoded or tokenized to rank it, and a lexical recall's candidates come back as one value.
//! A recall with a vector ranks the subject's current facts with their embeddings, read
//! ([`HELD_FACTS`]) once per generation of the subject's facts and held in memory.
//!
//! The candidate statements bind: `?1` namespace, `?2` subject (`''` for the shared scope), `?3`
//! now (milliseconds), `?4` the query's distinct tokens as a JSON array in their sorted order,
//! `?5` kind, `?6` minimum score (REAL), `?7` the required tags (JSON array), `?8` the
//! conversation id.

use std::collections::HashMap;
use std::num::ParseIntError;

use mnemix_core::adapter::{rank_candidates, RecallCandidate};
use mnemix_core::{Fact, FactId, RecallQuery, ScoredFact, Timestamp};

/// The columns of a whole fact, in the order the backends decode them.
#[macro_export]
macro_rules! fact_columns {
    () => {
        "pk, id, text, kind, key, tags, score, source, embedding, created_at, updated_at, \
         expires_at, valid_to, superseded_by, provenance, valid_from, valid_until"
    };
}

/// A live fact by id: `?1` namespace, `?2` subject, `?3` id, `?4` now.
pub const BY_ID: &str = concat!(
    "SELECT ",
    fact_columns!(),
    " FROM facts WHERE namespace = ?1 AND subject = ?2 AND id = ?3
      AND (expires_at IS NULL OR expires_at > ?4)"
);

/// The live facts of a key, superseded ones included (its history): `?1` namespace, `?2`
/// subject, `?3` key, `?4` now; in no order.
pub const BY_KEY: &str = concat!(
    "SELECT ",
    fact_columns!(),
    " FROM facts WHERE namespace = ?1 AND subject = ?2 AND key = ?3
      AND (expires_at IS NULL OR expires_at > ?4)"
);

/// A page of a subject's live facts, newest first, whose position is `after`.
macro_rules! list_page {
    ($after:literal) => {
        concat!(
            "SELECT ",
            fact_columns!(),
            " FROM facts WHERE namespace = ?1 AND subject = ?2
              AND (expires_at IS NULL OR expires_at > ?3)
              AND (?4 OR superseded_by IS NULL) AND (?5 IS NULL OR kind = ?5)
              AND NOT EXISTS (SELECT 1 FROM json_each(?6) wanted
                              WHERE wanted.value NOT IN (SELECT value FROM json_each(facts.tags)))
              AND ",
            $after,
            " ORDER BY created_at DESC, id DESC LIMIT (SELECT ?9)"
        )
    };
}

/// The first page of a subject's live facts, newest first: `?1` namespace, `?2` subject, `?3`
/// now, `?4` whether superseded facts are included, `?5` kind (NULL: any), `?6` the required
/// tags (JSON array), `?7` and `?8` NULL, `?9` limit. Two statements, this and
/// [`LIST_AFTER`], so that both seek the index.
pub const LIST_FIRST: &str = list_page!("?7 IS NULL AND ?8 IS NULL");

/// The page after a cursor: as [`LIST_FIRST`], with `?7` and `?8` the `created_at` and id of
/// the last fact seen.
pub const LIST_AFTER: &str = list_page!("(created_at, id) < (?7, ?8)");

/// The statement of a page: [`LIST_AFTER`] when it continues after a cursor, else
/// [`LIST_FIRST`].
pub fn list_page(after_cursor: bool) -> &'static str {
    if after_cursor {
        LIST_AFTER
    } else {
        LIST_FIRST
    }
}

/// The recall query's filters on a fact `f` (a current, unexpired fact of the kind, score,
/// tags, conversation, origins (`?9`, a JSON array) and writers (`?10`, a JSON array of `[kind,
/// id]`) asked for): `RecallQuery::admits` in SQL. (None asked, `'[]'`: the test, a
/// table-valued function per fact, is not run. A fact written before provenance was, NULL, is
/// unrecorded.)
macro_rules! recall_admits {
    () => {
        "f.superseded_by IS NULL AND (f.expires_at IS NULL OR f.expires_at > ?3)
           AND (?5 IS NULL OR f.kind = ?5) AND (?6 IS NULL OR f.score >= ?6)
           AND (?8 IS NULL OR json_extract(f.source, '$.conversation_id') = ?8)
           AND (?7 = '[]' OR NOT EXISTS (SELECT 1 FROM json_each(?7) wanted
                           WHERE wanted.value NOT IN (SELECT value FROM json_each(f.tags))))
           AND (?9 = '[]' OR coalesce(json_extract(f.provenance, '$.origin'), 'unrecorded')
                              IN (SELECT value FROM json_each(?9)))
           AND (?10 = '[]' OR EXISTS (SELECT 1 FROM json_each(?10) w
                WHERE json_extract(w.value, '$[0]')
                      = coalesce(json_extract(f.provenance, '$.written_by.kind'), 'unrecorded')
                  AND json_extract(w.value, '$[1]')
                      = coalesce(json_extract(f.provenance, '$.written_by.id'), '')))"
    };
}

/// For each fact of the scope holding a query token, the positions of those it holds in the
/// query's token array (comma-separated, any order): the index, driven by the query's tokens.
macro_rules! held_tokens {
    () => {
        "WITH held AS (
             SELECT ft.fact, group_concat(q.key) AS positions
             FROM json_each(?4) q CROSS JOIN fact_tokens ft
             WHERE ft.namespace = ?1 AND ft.subject = ?2 AND ft.token = q.value
             GROUP BY ft.fact) "
    };
}

/// The body of [`RECALL_CANDIDATES_HOLDING`].
macro_rules! holding {
    () => {
        concat!(
            held_tokens!(),
            "SELECT json_group_array(json_array(f.pk, f.id, f.score, f.created_at, held.positions)),
                    (SELECT generation FROM fact_generations WHERE namespace = ?1 AND subject = ?2)
             FROM held JOIN facts f ON f.pk = held.fact WHERE ",
            recall_admits!()
        )
    };
}

/// Recall's lexical candidates — the admitted facts that hold a query token — as one JSON
/// array of `[pk, id, score, created_at, positions]` ([`parse_holding`]): one row however many
/// facts match, so a driver that pays for every row (sqlx's SQLite hands rows one by one across
/// threads) pays once; then the subject's facts generation (NULL when it never held a fact), by
/// which a semantic recall knows whether the facts it holds in memory are current.
pub const RECALL_CANDIDATES_HOLDING: &str = holding!();

/// A lexical recall candidate as [`RECALL_CANDIDATES_HOLDING`] tells of it, ready to rank
/// ([`as_recall`](Self::as_recall)); a recall with a vector ranks the subject's held facts
/// instead (`family::facts`).
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The fact's row.
    pub pk: i64,
    /// Its id.
    pub id: FactId,
    /// Its score.
    pub score: Option<f32>,
    /// When it was created.
    pub created_at: Timestamp,
    /// The positions of the query tokens it holds, ascending.
    pub held: Vec<usize>,
}

impl Candidate {
    /// A candidate from the columns `pk, id, score, created_at, positions`; the error names what
    /// does not decode.
    pub fn new(
        pk: i64,
        id: String,
        score: Option<f64>,
        created_at: i64,
        positions: Option<&str>,
    ) -> Result<Self, String> {
        Ok(Self {
            pk,
            id: FactId::new(id).map_err(|e| format!("fact id: {e}"))?,
            score: score.map(|s| s as f32),
            created_at: Timestamp::from_millis(created_at),
            held: held_positions(positions).map_err(|e| format!("token position: {e}"))?,
        })
    }

    /// What the core ranks it by.
    pub fn as_recall(&self) -> RecallCandidate<'_> {
        RecallCandidate {
            held: &self.held,
            embedding: None,
            score: self.score,
            created_at: self.created_at,
            id: &self.id,
        }
    }
}

/// The `pk`s of the candidates the recall returns, best first, with their relevances: the
/// core's ranking ([`rank_candidates`]) of what the candidate statements read.
pub fn rank(query: &RecallQuery, candidates: &[Candidate]) -> Vec<(i64, f64)> {
    let recall: Vec<RecallCandidate<'_>> = candidates.iter().map(Candidate::as_recall).collect();
    rank_candidates(query, &recall)
        .into_iter()
        .map(|(at, relevance)| (candidates[at].pk, relevance))
        .collect()
}

/// The recalled facts in rank order, from the `(pk, fact)`s [`FACTS_BY_PKS`] read in the same
/// transaction; the error names a ranked fact that is missing.
pub fn in_rank_order(
    ranked: Vec<(i64, f64)>,
    facts: impl IntoIterator<Item = (i64, Fact)>,
) -> Result<Vec<ScoredFact>, String> {
    let mut facts: HashMap<i64, Fact> = facts.into_iter().collect();
    ranked
        .into_iter()
        .map(|(pk, relevance)| {
            let fact = facts
                .remove(&pk)
                .ok_or_else(|| format!("ranked fact {pk} missing from its transaction"))?;
            Ok(ScoredFact { fact, relevance })
        })
        .collect()
}

/// The candidates in [`RECALL_CANDIDATES_HOLDING`]'s one value; the error names what does not
/// decode.
///
/// ```
/// use mnemix_sqlite_family::facts::parse_holding;
/// let rows = parse_holding(r#"[[7,"f-1",0.5,1000,"2,0"],[9,"f-2",null,2000,"1"]]"#).unwrap();
/// assert_eq!((rows[0].pk, rows[0].held.as_slice(), rows[1].score), (7, &[0, 2][..], None));
/// ```
pub fn parse_holding(json: &str) -> Result<Vec<Candidate>, String> {
    type Row = (i64, String, Option<f64>, i64, Option<String>);
    let rows: Vec<Row> = serde_json::from_str(json).map_err(|e| e.to_string())?;
    rows.into_iter()
        .map(|(pk, id, score, created_at, positions)| {
            Candidate::new(pk, id, score, created_at, positions.as_deref())
        })
        .collect()
}

/// Whole facts by their `pk`s (`?1`, a JSON array), in no particular order.
pub const FACTS_BY_PKS: &str = concat!(
    "SELECT ",
    fact_columns!(),
    " FROM facts WHERE pk IN (SELECT value FROM json_each(?1))"
);

/// A recall's read transaction in two statement strings, two hops fewer than `BEGIN` and
/// `COMMIT` sent alone: [`RECALL_CANDIDATES_HOLDING`] after `BEGIN`, then [`FACTS_BY_PKS`]
/// before `COMMIT` (run it to its end: a fetch that stops at its first row would never reach the
/// `COMMIT`).
pub mod in_one_transaction {
    /// `BEGIN`, then [`RECALL_CANDIDATES_HOLDING`](super::RECALL_CANDIDATES_HOLDING).
    pub const HOLDING: &str = concat!("BEGIN;\n", holding!());
    /// `BEGIN`, then [`FACTS_GENERATION`](super::FACTS_GENERATION).
    pub const GENERATION: &str = "BEGIN;
SELECT generation FROM fact_generations WHERE namespace = ?1 AND subject = ?2";
    /// [`FACTS_BY_PKS`](super::FACTS_BY_PKS), then `COMMIT`.
    pub const FACTS_BY_PKS: &str = concat!(
        "SELECT ",
        fact_columns!(),
        " FROM facts WHERE pk IN (SELECT value FROM json_each(?1));\nCOMMIT"
    );
}

/// The subject's current facts as semantic recall holds them ([`crate::family::facts`]): `pk,
/// id, score, created_at, expires_at, kind, tags, the source's conversation, embedding, text,
/// provenance` of each: `?1` namespace, `?2` subject. Read in the transaction that read the generation
/// ([`FACTS_GENERATION`]), they are the facts of that generation.
pub const HELD_FACTS: &str = "SELECT f.pk, f.id, f.score, f.created_at, f.expires_at, f.kind,
        f.tags, json_extract(f.source, '$.conversation_id'), f.embedding, f.text, f.provenance
    FROM facts f WHERE f.namespace = ?1 AND f.subject = ?2 AND f.superseded_by IS NULL";

/// The subject's facts generation (no row when it never held a fact): `?1` namespace, `?2`
/// subject. A recall with a vector reads it first, and ranks the facts it holds at it.
pub const FACTS_GENERATION: &str =
    "SELECT generation FROM fact_generations WHERE namespace = ?1 AND subject = ?2";

/// A candidate's `positions` column as `rank_candidates` takes it: ascending positions.
///
/// ```
/// use mnemix_sqlite_family::facts::held_positions;
/// assert_eq!(held_positions(None), Ok(vec![]));
/// assert_eq!(held_positions(Some("2,0,1")), Ok(vec![0, 1, 2]));
/// assert!(held_positions(Some("x")).is_err());
/// ```
pub fn held_positions(column: Option<&str>) -> Result<Vec<usize>, ParseIntError> {
    let mut held = column
        .unwrap_or_default()
        .split(',')
        .filter(|p| !p.is_empty())
        .map(str::parse)
        .collect::<Result<Vec<usize>, _>>()?;
    held.sort_unstable();
    Ok(held)
}

/// Deletes a subject's expired facts: `?1` namespace, `?2` subject, `?3` now.
macro_rules! purge_expired {
    () => {
        "DELETE FROM facts WHERE namespace = ?1 AND subject = ?2 AND expires_at <= ?3"
    };
}
pub(crate) use purge_expired;

/// Deletes a subject's expired facts: `?1` namespace, `?2` subject, `?3` now.
pub const PURGE_EXPIRED: &str = purge_expired!();

/// Indexes a fact's tokens: `?1` namespace, `?2` subject, `?3` fact pk, `?4` tokens (JSON array).
pub const INSERT_TOKENS: &str = "INSERT INTO fact_tokens (namespace, subject, token, fact)
    SELECT ?1, ?2, value, ?3 FROM json_each(?4)";

/// The current facts `max_facts` evicts, in eviction order: `?1` namespace, `?2` subject, `?3` the
/// new fact's pk (never evicted), `?4` max facts.
pub const EVICTION_VICTIMS: &str = "SELECT pk, id FROM facts
    WHERE namespace = ?1 AND subject = ?2 AND superseded_by IS NULL AND pk != ?3
    ORDER BY score ASC NULLS FIRST, created_at ASC, id ASC
    LIMIT max(0, (SELECT count(*) FROM facts WHERE namespace = ?1
                  AND subject = ?2 AND superseded_by IS NULL) - ?4)";

/// Deletes a fact, returning whether it was live: `?1` namespace, `?2` subject, `?3` id, `?4` now.
pub const DELETE_BY_ID: &str = "DELETE FROM facts WHERE namespace = ?1 AND subject = ?2 AND id = ?3
    RETURNING expires_at IS NULL OR expires_at > ?4";

/// Sets the expiry of a subject's live facts among ids, returning theirs: `?1` namespace, `?2`
/// subject, `?3` ids (JSON array), `?4` expires at, `?5` now.
pub const SET_EXPIRY: &str = "UPDATE facts SET expires_at = ?4, updated_at = ?5
    WHERE namespace = ?1 AND subject = ?2 AND id IN (SELECT value FROM json_each(?3))
      AND (expires_at IS NULL OR expires_at > ?5)
    RETURNING id";

/// Drops a fact's tokens from the index: `?1` fact pk.
pub const DELETE_TOKENS: &str = "DELETE FROM fact_tokens WHERE fact = ?1";
