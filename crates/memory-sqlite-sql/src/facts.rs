//! Facts: recall through the token index.
//!
//! Recall reads what the index tells of each candidate — which query tokens it holds, its
//! score, age, id and (for semantic recall) embedding — ranks those with
//! `memory_core::fact::rank_candidates`, then reads only the facts that made the top
//! ([`FACTS_BY_PKS`]), in the same read transaction. No fact's text is decoded or tokenized to
//! rank it.
//!
//! The candidate statements bind: `?1` namespace, `?2` subject (`''` for the shared scope), `?3`
//! now (milliseconds), `?4` the query's distinct tokens as a JSON array in their sorted order,
//! `?5` kind, `?6` minimum score (REAL), `?7` the required tags (JSON array), `?8` the
//! conversation id. Each returns `pk, id, score, created_at, positions, embedding`.

use std::num::ParseIntError;

/// The columns of a whole fact, in the order the backends decode them.
#[macro_export]
macro_rules! fact_columns {
    () => {
        "pk, id, text, kind, key, tags, score, source, embedding, created_at, updated_at, \
         expires_at, valid_to, superseded_by"
    };
}

/// The recall query's filters on a fact `f` (a current, unexpired fact of the kind, score,
/// tags and conversation asked for): `RecallQuery::admits` in SQL.
macro_rules! recall_admits {
    () => {
        "f.superseded_by IS NULL AND (f.expires_at IS NULL OR f.expires_at > ?3)
           AND (?5 IS NULL OR f.kind = ?5) AND (?6 IS NULL OR f.score >= ?6)
           AND (?8 IS NULL OR json_extract(f.source, '$.conversation_id') = ?8)
           AND NOT EXISTS (SELECT 1 FROM json_each(?7) wanted
                           WHERE wanted.value NOT IN (SELECT value FROM json_each(f.tags)))"
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

/// Lexical recall's candidates: the admitted facts that hold a query token (no embedding).
pub const RECALL_CANDIDATES_HOLDING: &str = concat!(
    held_tokens!(),
    "SELECT f.pk, f.id, f.score, f.created_at, held.positions, NULL AS embedding
     FROM held JOIN facts f ON f.pk = held.fact WHERE ",
    recall_admits!()
);

/// Semantic and hybrid recall's candidates: every admitted fact of the scope, with its
/// embedding and the query tokens it holds (`positions` NULL when none).
pub const RECALL_CANDIDATES_ALL: &str = concat!(
    held_tokens!(),
    "SELECT f.pk, f.id, f.score, f.created_at, held.positions, f.embedding
     FROM facts f LEFT JOIN held ON held.fact = f.pk
     WHERE f.namespace = ?1 AND f.subject = ?2 AND ",
    recall_admits!()
);

/// Whole facts by their `pk`s (`?1`, a JSON array), in no particular order.
pub const FACTS_BY_PKS: &str = concat!(
    "SELECT ",
    fact_columns!(),
    " FROM facts WHERE pk IN (SELECT value FROM json_each(?1))"
);

/// A candidate's `positions` column as `rank_candidates` takes it: ascending positions.
///
/// ```
/// use memory_sqlite_sql::facts::held_positions;
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
pub const PURGE_EXPIRED: &str = "DELETE FROM facts
    WHERE namespace = ?1 AND subject = ?2 AND expires_at <= ?3";

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

/// Deletes facts: `?1` pks (JSON array).
pub const DELETE_BY_PKS: &str = "DELETE FROM facts WHERE pk IN (SELECT value FROM json_each(?1))";

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
