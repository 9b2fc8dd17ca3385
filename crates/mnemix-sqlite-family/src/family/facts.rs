//! Facts, written once: remember (dedupe, supersede, eviction), lexical recall through the token
//! index, reads, forget and expiry. A remember runs in a write transaction its caller holds; a
//! recall in a read transaction, so the facts it reads are those it ranked. A recall with a
//! vector ranks the subject's facts held in memory ([`HeldFacts`], texts included) while their
//! generation stands (a database trigger changes it with every write of them, by any connection
//! or process).

use std::sync::Arc;

use mnemix_core::adapter::{decode_f32_le, encode_f32_le, fact_tokens, order_history};
use mnemix_core::adapter::{
    held_key, page_newest_first, HeldChange, HeldFact, HeldFacts, HeldFactsCache,
};
use mnemix_core::lexical::tokenize;
use mnemix_core::{
    ConversationId, Fact, FactId, FactQuery, MemoryError, NewFact, Page, Provenance, RecallQuery,
    RememberOptions, RememberOutcome, RememberStatus, Result, Scope, ScoredFact, Timestamp,
};

use super::{count_to_db, millis, subject_of, to_json};
use crate::driver::{Conn, Param, Row};
use crate::fact_columns;
use crate::facts::{self as sql, in_one_transaction, parse_holding, purge_expired};

/// A fact from the columns of [`fact_columns!`] (`pk` first, not read here).
pub fn fact_from(scope: &Scope, row: &Row) -> Result<Fact> {
    let id = |column: usize| -> Result<Option<FactId>> {
        row.opt_string(column)?
            .map(FactId::new)
            .transpose()
            .map_err(|e| row.corrupt("fact id", e))
    };
    Ok(Fact {
        id: id(1)?.ok_or_else(|| row.corrupt("fact id", "missing"))?,
        scope: scope.clone(),
        text: row.string(2)?,
        kind: row.opt_string(3)?,
        key: row.opt_string(4)?,
        tags: serde_json::from_str(&row.string(5)?).map_err(|e| row.corrupt("fact tags", e))?,
        score: row.opt_real(6)?.map(|s| s as f32),
        source: row
            .opt_string(7)?
            .map(|s| serde_json::from_str(&s))
            .transpose()
            .map_err(|e| row.corrupt("fact source", e))?,
        embedding: row.opt_blob(8)?.map(|b| decode_f32_le(&b)),
        created_at: Timestamp::from_millis(row.int(9)?),
        updated_at: Timestamp::from_millis(row.int(10)?),
        expires_at: row.opt_int(11)?.map(Timestamp::from_millis),
        valid_to: row.opt_int(12)?.map(Timestamp::from_millis),
        superseded_by: id(13)?,
        provenance: provenance_of(row, 14)?,
        valid_from: row.opt_int(15)?.map(Timestamp::from_millis),
        valid_until: row.opt_int(16)?.map(Timestamp::from_millis),
    })
}

/// A fact's provenance column: its JSON, or unrecorded when the fact was written before
/// provenance was (NULL).
fn provenance_of(row: &Row, column: usize) -> Result<Provenance> {
    row.opt_string(column)?
        .map(|json| serde_json::from_str(&json))
        .transpose()
        .map(Option::unwrap_or_default)
        .map_err(|e| row.corrupt("fact provenance", e))
}

fn facts_from(scope: &Scope, rows: &[Row]) -> Result<Vec<Fact>> {
    rows.iter().map(|row| fact_from(scope, row)).collect()
}

fn fact_id(row: &Row, column: usize) -> Result<FactId> {
    FactId::new(row.string(column)?).map_err(|e| row.corrupt("fact id", e))
}

/// Indexes a fact's tokens (a restore's; a remember indexes in its insert).
async fn insert_tokens<C: Conn>(conn: &mut C, scope: &Scope, pk: i64, text: &str) -> Result<()> {
    let tokens = to_json(&fact_tokens(text));
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        pk.into(),
        Param::Text(&tokens),
    ];
    conn.execute(sql::INSERT_TOKENS, &params).await.map(drop)
}

/// The current fact of a key and text: `?1` namespace, `?2` subject, `?4` key, `?5` text (`?3`
/// is the purge's now).
macro_rules! same_fact {
    () => {
        concat!(
            "SELECT ",
            fact_columns!(),
            " FROM facts WHERE namespace = ?1 AND subject = ?2 AND superseded_by IS NULL
              AND key IS ?4 AND text = ?5 LIMIT 1"
        )
    };
}
/// The subject's facts generation (NULL when it never held a fact), as one row: `?1`
/// namespace, `?2` subject.
macro_rules! generation {
    () => {
        "SELECT (SELECT generation FROM fact_generations WHERE namespace = ?1 AND subject = ?2)"
    };
}
/// A remember's read: the generation its writes start from, the expired facts purged (expired
/// facts are never returned), then the current fact of the same key and text.
macro_rules! probe {
    () => {
        concat!(generation!(), ";\n", purge_expired!(), ";\n", same_fact!())
    };
}

/// Drops the index entries of the key's current fact: `?3` namespace, `?4` subject, `?5` key.
macro_rules! unindex_current {
    () => {
        "DELETE FROM fact_tokens WHERE fact IN (SELECT pk FROM facts
             WHERE namespace = ?3 AND subject = ?4 AND key = ?5 AND superseded_by IS NULL)"
    };
}
/// Supersedes the key's current fact, returning its id and pk: `?1` now, `?2` the new fact's
/// id, `?6` its valid_from (which may close the old one's valid time, as
/// `mnemix_core::adapter::closed_valid_until` says).
macro_rules! supersede_current {
    () => {
        "UPDATE facts SET valid_to = ?1, superseded_by = ?2, updated_at = ?1,
             valid_until = CASE WHEN ?6 IS NOT NULL AND (valid_from IS NULL OR valid_from < ?6)
                 AND (valid_until IS NULL OR ?6 < valid_until) THEN ?6 ELSE valid_until END
         WHERE namespace = ?3 AND subject = ?4 AND key = ?5 AND superseded_by IS NULL
         RETURNING id, pk"
    };
}
/// A key's current fact superseded; history is not recalled, so its tokens leave the index.
macro_rules! supersede {
    () => {
        concat!(unindex_current!(), ";\n", supersede_current!())
    };
}

/// The fact, returning its pk: `?1`–`?12` and `?14`–`?16` its columns.
macro_rules! insert_fact {
    () => {
        "INSERT INTO facts (namespace, subject, id, text, kind, key, tags, score, source,
             embedding, created_at, updated_at, expires_at, provenance, valid_from, valid_until)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, ?12, ?14, ?15, ?16)
         RETURNING pk"
    };
}
/// Its tokens: `?13` (JSON array).
macro_rules! index_fact {
    () => {
        "INSERT INTO fact_tokens (namespace, subject, token, fact)
         SELECT ?1, ?2, value, (SELECT pk FROM facts WHERE namespace = ?1 AND subject = ?2 AND id = ?3)
         FROM json_each(?13)"
    };
}
/// A remember's write: the fact and its tokens, then the generation they made.
macro_rules! insert {
    () => {
        concat!(insert_fact!(), ";\n", index_fact!(), ";\n", generation!())
    };
}
/// Deletes the evicted facts: `?3` their pks (JSON array).
macro_rules! delete_evicted {
    () => {
        "DELETE FROM facts WHERE pk IN (SELECT value FROM json_each(?3))"
    };
}
/// An eviction: the evicted facts deleted, then the generation that made (`?1` namespace, `?2`
/// subject).
macro_rules! evict {
    () => {
        concat!(delete_evicted!(), ";\n", generation!())
    };
}

/// Runs a script of statements that number one parameter list: joined in one call where the
/// driver takes several ([`Conn::JOINS_STATEMENTS`]; `joined` is `parts` `;`-separated, or
/// the same with `BEGIN` or `COMMIT` riding), else each of `parts` with the first of `params`
/// it numbers. The rows of every part, in order.
async fn script<C: Conn>(
    conn: &mut C,
    joined: &'static str,
    parts: &[(&'static str, usize)],
    params: &[Param<'_>],
) -> Result<Vec<Row>> {
    if C::JOINS_STATEMENTS {
        return conn.rows(joined, params).await;
    }
    let mut rows = Vec::new();
    for &(part, numbered) in parts {
        rows.extend(conn.rows(part, &params[..numbered]).await?);
    }
    Ok(rows)
}

/// A remember in the write transaction `tx` is in; `now` is its time. With its outcome, what it
/// did to the subject's held facts: [`HeldChange::apply`] it once the transaction commits.
pub async fn remember<C: Conn>(
    tx: &mut C,
    scope: &Scope,
    new: NewFact,
    options: RememberOptions,
    now: Timestamp,
) -> Result<(RememberOutcome, HeldChange)> {
    let (namespace, subject) = (scope.namespace().as_str(), subject_of(scope));
    let probe_sql = tx.first(probe!(), concat!("BEGIN IMMEDIATE;\n", probe!()));
    let probe_params = [
        namespace.into(),
        subject.into(),
        millis(now).into(),
        new.key.as_deref().into(),
        Param::FreeText(&new.text),
    ];
    let parts = [(generation!(), 2), (purge_expired!(), 3), (same_fact!(), 5)];
    let probed = script(tx, probe_sql, &parts, &probe_params).await?;
    let (generation, same) = probed
        .split_first()
        .ok_or_else(|| crate::driver::corrupt(C::BACKEND, "facts generation", "no row"))?;
    let mut change = HeldChange::starting(scope, generation.opt_int(0)?, now);
    if let Some(row) = same.first() {
        // Nothing written but perhaps a purge: what is held stays at its generation.
        change.from = None;
        let outcome = RememberOutcome {
            fact: fact_from(scope, row)?,
            status: RememberStatus::Duplicate,
            evicted: Vec::new(),
        };
        return Ok((outcome, change));
    }
    let fact = new.into_fact(scope, now);
    let mut status = RememberStatus::Created;
    if let Some(key) = &fact.key {
        let params = [
            millis(now).into(),
            fact.id.as_str().into(),
            namespace.into(),
            subject.into(),
            key.into(),
            fact.valid_from.map(millis).into(),
        ];
        let parts = [(unindex_current!(), 5), (supersede_current!(), 6)];
        if let Some(previous) = script(tx, supersede!(), &parts, &params).await?.first() {
            status = RememberStatus::Superseded {
                previous: fact_id(previous, 0)?,
            };
        }
    }
    let (tags, source) = (to_json(&fact.tags), fact.source.as_ref().map(to_json));
    let embedding = fact.embedding.as_deref().map(encode_f32_le);
    let tokens = to_json(&fact_tokens(&fact.text));
    let provenance = to_json(&fact.provenance);
    let params = [
        namespace.into(),
        subject.into(),
        fact.id.as_str().into(),
        Param::FreeText(&fact.text),
        fact.kind.as_deref().into(),
        fact.key.as_deref().into(),
        Param::Text(&tags),
        fact.score.map(f64::from).into(),
        source.as_deref().into(),
        embedding.as_deref().into(),
        millis(now).into(),
        fact.expires_at.map(millis).into(),
        Param::Text(&tokens),
        Param::Text(&provenance),
        fact.valid_from.map(millis).into(),
        fact.valid_until.map(millis).into(),
    ];
    let insert_sql = if options.max_facts.is_some() {
        insert!()
    } else {
        tx.last(insert!(), concat!(insert!(), ";\nCOMMIT"))
    };
    let parts = [
        (insert_fact!(), 16),
        (index_fact!(), 13),
        (generation!(), 2),
    ];
    let inserted = script(tx, insert_sql, &parts, &params).await?;
    let [pk, generation] = inserted.as_slice() else {
        return Err(crate::driver::corrupt(
            C::BACKEND,
            "fact",
            "its insert returned no key or generation",
        ));
    };
    let pk = pk.int(0)?;
    change.to = generation.opt_int(0)?;
    let mut evicted = Vec::new();
    if let Some(max) = options.max_facts {
        // The core's eviction order: lowest score first (none lowest), oldest, then id.
        let params = [
            namespace.into(),
            subject.into(),
            pk.into(),
            count_to_db(max).into(),
        ];
        let victims = tx.rows(sql::EVICTION_VICTIMS, &params).await?;
        if !victims.is_empty() {
            let pks = victims
                .iter()
                .map(|v| v.int(0))
                .collect::<Result<Vec<_>>>()?;
            let json = to_json(&pks);
            let params = [namespace.into(), subject.into(), Param::Text(&json)];
            let parts = [(delete_evicted!(), 3), (generation!(), 2)];
            let generation = script(tx, evict!(), &parts, &params).await?;
            change.to = generation
                .first()
                .ok_or_else(|| crate::driver::corrupt(C::BACKEND, "facts generation", "no row"))?
                .opt_int(0)?;
        }
        evicted = victims
            .iter()
            .map(|v| fact_id(v, 1))
            .collect::<Result<_>>()?;
    }
    let outcome = RememberOutcome {
        fact,
        status,
        evicted,
    };
    change.wrote(pk, &outcome);
    Ok((outcome, change))
}

/// The subject's held facts at `generation`: from the cache, or read in the read transaction
/// `tx` is in (the snapshot the generation was read in, so the rows are of that generation) and
/// kept.
async fn held_facts<C: Conn>(
    tx: &mut C,
    cache: &HeldFactsCache,
    scope: &Scope,
    generation: i64,
) -> Result<Arc<HeldFacts>> {
    let key = held_key(scope);
    if let Some(held) = cache.get(&key, &generation) {
        return Ok(held);
    }
    let params = [scope.namespace().as_str().into(), subject_of(scope).into()];
    let rows = tx.rows(sql::HELD_FACTS, &params).await?;
    let mut facts = Vec::with_capacity(rows.len());
    for row in &rows {
        let provenance = provenance_of(row, 10)?;
        facts.push(HeldFact {
            pk: row.int(0)?,
            id: fact_id(row, 1)?,
            score: row.opt_real(2)?.map(|s| s as f32),
            created_at: Timestamp::from_millis(row.int(3)?),
            expires_at: row.opt_int(4)?.map(Timestamp::from_millis),
            kind: row.opt_string(5)?,
            tags: serde_json::from_str(&row.string(6)?).map_err(|e| row.corrupt("fact tags", e))?,
            conversation: row.opt_string(7)?,
            embedding: row.opt_blob(8)?.map(|b| decode_f32_le(&b)),
            text: row.string(9)?,
            origin: provenance.origin,
            written_by: provenance.written_by,
        });
    }
    let held = Arc::new(HeldFacts::new(facts));
    cache.insert(key, generation, Arc::clone(&held));
    Ok(held)
}

/// A recall in the read transaction `tx` is in (its `BEGIN` may ride in the first statement and
/// its `COMMIT` in the last): rank what the token index tells of the candidates (for a recall
/// with a vector, the subject's held facts at the generation read first), then read only the
/// top facts.
pub async fn recall<C: Conn>(
    tx: &mut C,
    cache: &HeldFactsCache,
    scope: &Scope,
    query: &RecallQuery,
    now: Timestamp,
) -> Result<Vec<ScoredFact>> {
    let query_tokens: Vec<String> = query
        .text
        .as_deref()
        .map(tokenize)
        .unwrap_or_default()
        .into_iter()
        .collect();
    let semantic = query.vector.is_some();
    if query_tokens.is_empty() && !semantic {
        return Ok(Vec::new());
    }
    let ranked = if semantic {
        // Every admitted fact of the subject, ranked where it is held, with the query's words
        // found in the held texts: only the generation is read first.
        let params = [scope.namespace().as_str().into(), subject_of(scope).into()];
        let statement = tx.first(sql::FACTS_GENERATION, in_one_transaction::GENERATION);
        let generation = match tx.row(statement, &params).await? {
            Some(row) => row.opt_int(0)?,
            None => None,
        };
        if let Some(generation) = generation {
            held_facts(tx, cache, scope, generation)
                .await?
                .rank(query, now)
                .into_iter()
                .map(|(f, relevance)| (f.pk, relevance))
                .collect()
        } else {
            // The subject holds no fact (erased, perhaps by another process): nothing of it is
            // kept in memory either.
            cache.remove(&held_key(scope));
            Vec::new()
        }
    } else {
        let (tokens, tags) = (to_json(&query_tokens), to_json(&query.tags));
        let origins = to_json(&query.origins);
        let writers = to_json(
            &query
                .written_by
                .iter()
                .map(|p| (p.kind, p.id.as_str()))
                .collect::<Vec<_>>(),
        );
        let params = [
            scope.namespace().as_str().into(),
            subject_of(scope).into(),
            millis(now).into(),
            Param::Text(&tokens),
            query.kind.as_deref().into(),
            query.min_score.map(f64::from).into(),
            Param::Text(&tags),
            query
                .conversation
                .as_ref()
                .map(ConversationId::as_str)
                .into(),
            Param::Text(&origins),
            Param::Text(&writers),
        ];
        let statement = tx.first(sql::RECALL_CANDIDATES_HOLDING, in_one_transaction::HOLDING);
        let row = tx
            .row(statement, &params)
            .await?
            .ok_or_else(|| crate::driver::corrupt(C::BACKEND, "recall candidates", "no row"))?;
        let holding =
            parse_holding(&row.string(0)?).map_err(|e| row.corrupt("recall candidate", e))?;
        sql::rank(query, &holding)
    };
    // Sent even when nothing ranked: the transaction's `COMMIT` may ride in it.
    let pks = to_json(&ranked.iter().map(|&(pk, _)| pk).collect::<Vec<_>>());
    let statement = tx.last(sql::FACTS_BY_PKS, in_one_transaction::FACTS_BY_PKS);
    let facts = tx
        .rows(statement, &[Param::Text(&pks)])
        .await?
        .iter()
        .map(|row| Ok((row.int(0)?, fact_from(scope, row)?)))
        .collect::<Result<Vec<_>>>()?;
    sql::in_rank_order(ranked, facts).map_err(|e| crate::driver::corrupt(C::BACKEND, "fact", e))
}

/// A live fact by id, or `NotFound`.
pub async fn get_fact<C: Conn>(
    conn: &mut C,
    scope: &Scope,
    id: &FactId,
    now: Timestamp,
) -> Result<Fact> {
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        id.as_str().into(),
        millis(now).into(),
    ];
    let row = conn
        .row(sql::BY_ID, &params)
        .await?
        .ok_or_else(|| MemoryError::not_found("fact", id.as_str()))?;
    fact_from(scope, &row)
}

/// A page of the subject's live facts, newest first.
pub async fn list_facts<C: Conn>(
    conn: &mut C,
    scope: &Scope,
    query: FactQuery,
    now: Timestamp,
) -> Result<Page<Fact>> {
    let limit = query.page_limit();
    let cursor = query.after();
    let tags = to_json(&query.tags);
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        millis(now).into(),
        query.include_superseded.into(),
        query.kind.as_deref().into(),
        Param::Text(&tags),
        cursor.as_ref().map(|c| c.created_at.as_millis()).into(),
        cursor.as_ref().map(|c| c.id.as_str()).into(),
        count_to_db(limit + 1).into(),
    ];
    let rows = conn.rows(sql::list_page(cursor.is_some()), &params).await?;
    Ok(page_newest_first(
        facts_from(scope, &rows)?,
        |f| (f.created_at, f.id.as_str()),
        None,
        limit,
    ))
}

/// A key's live facts, superseded ones included, in the order of its history.
pub async fn history<C: Conn>(
    conn: &mut C,
    scope: &Scope,
    key: &str,
    now: Timestamp,
) -> Result<Vec<Fact>> {
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        key.into(),
        millis(now).into(),
    ];
    let rows = conn.rows(sql::BY_KEY, &params).await?;
    facts_from(scope, &rows).map(order_history)
}

/// Deletes a fact: whether it was live (an expired one is removed too, but was already gone
/// to readers).
pub async fn forget<C: Conn>(
    conn: &mut C,
    scope: &Scope,
    id: &FactId,
    now: Timestamp,
) -> Result<bool> {
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        id.as_str().into(),
        millis(now).into(),
    ];
    let live = conn.row(sql::DELETE_BY_ID, &params).await?;
    live.map_or(Ok(false), |row| Ok(row.int(0)? == 1))
}

/// Sets the expiry of the subject's live facts among `ids` in one statement (all or none);
/// returns the ids it set.
pub async fn set_expiry<C: Conn>(
    conn: &mut C,
    scope: &Scope,
    ids: &[FactId],
    expires_at: Option<Timestamp>,
    now: Timestamp,
) -> Result<Vec<FactId>> {
    let ids = to_json(&ids);
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        Param::Text(&ids),
        expires_at.map(millis).into(),
        millis(now).into(),
    ];
    let changed = conn.rows(sql::SET_EXPIRY, &params).await?;
    changed.iter().map(|row| fact_id(row, 0)).collect()
}

/// A restored fact, as it was (its history included): upserted by id, and in the token index
/// when current (the index holds current facts only).
pub async fn restore_fact<C: Conn>(conn: &mut C, fact: &Fact) -> Result<()> {
    let (tags, source) = (to_json(&fact.tags), fact.source.as_ref().map(to_json));
    let embedding = fact.embedding.as_deref().map(encode_f32_le);
    let provenance = to_json(&fact.provenance);
    let params = [
        fact.scope.namespace().as_str().into(),
        subject_of(&fact.scope).into(),
        fact.id.as_str().into(),
        Param::FreeText(&fact.text),
        fact.kind.as_deref().into(),
        fact.key.as_deref().into(),
        Param::Text(&tags),
        fact.score.map(f64::from).into(),
        source.as_deref().into(),
        embedding.as_deref().into(),
        millis(fact.created_at).into(),
        millis(fact.updated_at).into(),
        fact.expires_at.map(millis).into(),
        fact.valid_to.map(millis).into(),
        fact.superseded_by.as_ref().map(FactId::as_str).into(),
        Param::Text(&provenance),
        fact.valid_from.map(millis).into(),
        fact.valid_until.map(millis).into(),
    ];
    let pk = conn
        .row(crate::transfer::RESTORE_FACT, &params)
        .await?
        .ok_or_else(|| crate::driver::corrupt(C::BACKEND, "fact", "its upsert returned no row"))?
        .int(0)?;
    conn.execute(sql::DELETE_TOKENS, &[pk.into()]).await?;
    if fact.is_current() {
        insert_tokens(conn, &fact.scope, pk, &fact.text).await?;
    }
    Ok(())
}
