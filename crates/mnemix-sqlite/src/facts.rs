//! Facts: dedupe, supersede, eviction and lexical/semantic recall through the token table.

use async_trait::async_trait;
use mnemix_core::adapter::page_newest_first;
use mnemix_core::adapter::{decode_f32_le, encode_f32_le};
use mnemix_core::adapter::{fact_tokens, order_history};
use mnemix_core::lexical::tokenize;
use mnemix_core::{
    ConversationId, Fact, FactId, FactQuery, FactStore, MemoryError, NewFact, Page, RecallQuery,
    RememberOptions, RememberOutcome, RememberStatus, Result, Scope, ScoredFact, Timestamp,
};
use mnemix_sqlite_sql as sql;
use mnemix_sqlite_sql::fact_columns;
use mnemix_sqlite_sql::facts::{in_one_transaction, parse_holding, Candidate};
use sqlx::sqlite::{SqliteConnection, SqliteRow};
use sqlx::Row;

use crate::connections::Tx;
use crate::db::{corrupt, millis, subject_of, to_json, DbResult};
use crate::writer::GroupTx;
use crate::SqliteStore;

pub(crate) fn fact_from(scope: &Scope, row: &SqliteRow) -> Result<Fact> {
    let id = |column: &str| -> Result<Option<FactId>> {
        row.get::<Option<String>, _>(column)
            .map(FactId::new)
            .transpose()
            .map_err(|e| corrupt("fact id", e))
    };
    Ok(Fact {
        id: id("id")?.ok_or_else(|| corrupt("fact id", "missing"))?,
        scope: scope.clone(),
        text: row.get("text"),
        kind: row.get("kind"),
        key: row.get("key"),
        tags: serde_json::from_str(row.get("tags")).map_err(|e| corrupt("fact tags", e))?,
        score: row.get::<Option<f64>, _>("score").map(|s| s as f32),
        source: row
            .get::<Option<String>, _>("source")
            .map(|s| serde_json::from_str(&s))
            .transpose()
            .map_err(|e| corrupt("fact source", e))?,
        embedding: row
            .get::<Option<Vec<u8>>, _>("embedding")
            .map(|b| decode_f32_le(&b)),
        created_at: Timestamp::from_millis(row.get("created_at")),
        updated_at: Timestamp::from_millis(row.get("updated_at")),
        expires_at: row
            .get::<Option<i64>, _>("expires_at")
            .map(Timestamp::from_millis),
        valid_to: row
            .get::<Option<i64>, _>("valid_to")
            .map(Timestamp::from_millis),
        superseded_by: id("superseded_by")?,
    })
}

fn facts_from(scope: &Scope, rows: &[SqliteRow]) -> Result<Vec<Fact>> {
    rows.iter().map(|row| fact_from(scope, row)).collect()
}

pub(crate) async fn insert_tokens(
    conn: &mut SqliteConnection,
    scope: &Scope,
    pk: i64,
    text: &str,
) -> Result<()> {
    let tokens: Vec<String> = fact_tokens(text).into_iter().collect();
    sqlx::query(sql::facts::INSERT_TOKENS)
        .bind(scope.namespace().as_str())
        .bind(subject_of(scope))
        .bind(pk)
        .bind(to_json(&tokens))
        .execute(conn)
        .await
        .db()?;
    Ok(())
}

/// A remember's read: the scope's expired facts purged (expired facts are never returned), then
/// the current fact of the same key and text, if any.
macro_rules! remember_probe {
    () => {
        concat!(
            "DELETE FROM facts WHERE namespace = ?1 AND subject = ?2 AND expires_at <= ?5;
             SELECT ",
            fact_columns!(),
            " FROM facts WHERE namespace = ?1 AND subject = ?2 AND superseded_by IS NULL
              AND key IS ?3 AND text = ?4 LIMIT 1"
        )
    };
}

/// A remember's write: the fact, its tokens, and its key.
macro_rules! remember_insert {
    () => {
        "INSERT INTO facts (namespace, subject, id, text, kind, key, tags, score, source,
             embedding, created_at, updated_at, expires_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, ?12);
         INSERT INTO fact_tokens (namespace, subject, token, fact)
         SELECT ?1, ?2, value, (SELECT pk FROM facts WHERE namespace = ?1 AND subject = ?2 AND id = ?3)
         FROM json_each(?13);
         SELECT pk FROM facts WHERE namespace = ?1 AND subject = ?2 AND id = ?3"
    };
}

/// A remember inside a write transaction.
async fn remember_in(
    tx: &mut GroupTx,
    scope: Scope,
    new: NewFact,
    options: RememberOptions,
    now: Timestamp,
) -> Result<RememberOutcome> {
    let (namespace, subject) = (scope.namespace().as_str(), subject_of(&scope));
    // Expired facts are never returned: the scope's are purged before deciding anything, in
    // the same statement string as the duplicate check (one hop to sqlx's worker thread).
    let probe = tx.first(
        remember_probe!(),
        concat!("BEGIN IMMEDIATE;\n", remember_probe!()),
    );
    let same = sqlx::query(probe)
        .bind(namespace)
        .bind(subject)
        .bind(new.key.as_deref())
        .bind(&new.text)
        .bind(millis(now))
        .fetch_optional(tx.conn())
        .await
        .db()?;
    if let Some(row) = same {
        return Ok(RememberOutcome {
            fact: fact_from(&scope, &row)?,
            status: RememberStatus::Duplicate,
            evicted: Vec::new(),
        });
    }
    let fact = new.into_fact(&scope, now);
    let mut status = RememberStatus::Created;
    if let Some(key) = &fact.key {
        // The current fact of the key is superseded and its tokens leave the index (history
        // is not recalled).
        let previous: Option<String> = sqlx::query_scalar(
            "DELETE FROM fact_tokens WHERE fact IN (SELECT pk FROM facts
                 WHERE namespace = ?3 AND subject = ?4 AND key = ?5 AND superseded_by IS NULL);
             UPDATE facts SET valid_to = ?1, superseded_by = ?2, updated_at = ?1
             WHERE namespace = ?3 AND subject = ?4 AND key = ?5 AND superseded_by IS NULL
             RETURNING id",
        )
        .bind(millis(now))
        .bind(fact.id.as_str())
        .bind(namespace)
        .bind(subject)
        .bind(key)
        .fetch_optional(tx.conn())
        .await
        .db()?;
        if let Some(previous) = previous {
            status = RememberStatus::Superseded {
                previous: FactId::new(previous).map_err(|e| corrupt("fact id", e))?,
            };
        }
    }
    // The fact and its tokens in one statement string.
    let tokens: Vec<String> = fact_tokens(&fact.text).into_iter().collect();
    let insert = if options.max_facts.is_some() {
        remember_insert!()
    } else {
        tx.last(remember_insert!(), concat!(remember_insert!(), ";\nCOMMIT"))
    };
    // `fetch_all`, not `fetch_one`: a fetch that stops at its first row would skip the COMMIT.
    let pk: i64 = sqlx::query_scalar(insert)
        .bind(namespace)
        .bind(subject)
        .bind(fact.id.as_str())
        .bind(&fact.text)
        .bind(fact.kind.as_deref())
        .bind(fact.key.as_deref())
        .bind(to_json(&fact.tags))
        .bind(fact.score.map(f64::from))
        .bind(fact.source.as_ref().map(to_json))
        .bind(fact.embedding.as_deref().map(encode_f32_le))
        .bind(millis(now))
        .bind(fact.expires_at.map(millis))
        .bind(to_json(&tokens))
        .fetch_all(tx.conn())
        .await
        .db()?
        .first()
        .copied()
        .ok_or_else(|| corrupt("fact", "its insert returned no key"))?;
    let mut evicted = Vec::new();
    if let Some(max) = options.max_facts {
        // The core's eviction order: lowest score first (none lowest), oldest, then id.
        let victims: Vec<(i64, String)> = sqlx::query_as(sql::facts::EVICTION_VICTIMS)
            .bind(namespace)
            .bind(subject)
            .bind(pk)
            .bind(i64::try_from(max).unwrap_or(i64::MAX))
            .fetch_all(tx.conn())
            .await
            .db()?;
        if !victims.is_empty() {
            let pks: Vec<i64> = victims.iter().map(|(pk, _)| *pk).collect();
            sqlx::query(sql::facts::DELETE_BY_PKS)
                .bind(to_json(&pks))
                .execute(tx.conn())
                .await
                .db()?;
        }
        evicted = victims
            .into_iter()
            .map(|(_, id)| FactId::new(id).map_err(|e| corrupt("fact id", e)))
            .collect::<Result<Vec<_>>>()?;
    }
    Ok(RememberOutcome {
        fact,
        status,
        evicted,
    })
}

/// A semantic recall's candidate row.
fn candidate_from(row: &SqliteRow) -> Result<Candidate> {
    Candidate::new(
        row.get("pk"),
        row.get("id"),
        row.get("score"),
        row.get("created_at"),
        row.get("positions"),
        row.get("embedding"),
    )
    .map_err(|e| corrupt("recall candidate", e))
}

#[async_trait]
impl FactStore for SqliteStore {
    async fn remember(
        &self,
        scope: &Scope,
        new: NewFact,
        options: RememberOptions,
    ) -> Result<RememberOutcome> {
        let now = self.clock.now();
        let scope = scope.clone();
        self.writer
            .write(move |tx| Box::pin(remember_in(tx, scope, new, options, now)))
            .await
    }

    async fn recall(&self, scope: &Scope, query: RecallQuery) -> Result<Vec<ScoredFact>> {
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
        // Rank what the token index tells of the candidates, then read only the top facts; both
        // in one read transaction, so the facts are those that were ranked.
        let mut tx = Tx::begun_in_first_statement(self.reader.acquire().await?);
        let bound = |sql| {
            sqlx::query(sql)
                .bind(scope.namespace().as_str())
                .bind(subject_of(scope))
                .bind(millis(self.clock.now()))
                .bind(to_json(&query_tokens))
                .bind(query.kind.as_deref())
                .bind(query.min_score.map(f64::from))
                .bind(to_json(&query.tags))
                .bind(query.conversation.as_ref().map(ConversationId::as_str))
        };
        let candidates = if semantic {
            let rows = bound(in_one_transaction::ALL)
                .fetch_all(tx.conn())
                .await
                .db()?;
            rows.iter()
                .map(candidate_from)
                .collect::<Result<Vec<_>>>()?
        } else {
            let rows = bound(in_one_transaction::HOLDING)
                .fetch_all(tx.conn())
                .await
                .db()?;
            let json: &str = rows
                .first()
                .ok_or_else(|| corrupt("recall candidates", "no row"))?
                .get(0);
            parse_holding(json).map_err(|e| corrupt("recall candidate", e))?
        };
        let ranked = sql::facts::rank(&query, &candidates);
        let pks: Vec<i64> = ranked.iter().map(|&(pk, _)| pk).collect();
        let rows = sqlx::query(in_one_transaction::FACTS_BY_PKS)
            .bind(to_json(&pks))
            .fetch_all(tx.conn())
            .await
            .db()?;
        tx.finish();
        let facts: Vec<(i64, Fact)> = rows
            .iter()
            .map(|row| Ok((row.get::<i64, _>("pk"), fact_from(scope, row)?)))
            .collect::<Result<_>>()?;
        sql::facts::in_rank_order(ranked, facts).map_err(|e| corrupt("fact", e))
    }

    async fn get_fact(&self, scope: &Scope, id: &FactId) -> Result<Fact> {
        let row = sqlx::query(sql::facts::BY_ID)
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .bind(id.as_str())
            .bind(millis(self.clock.now()))
            .fetch_optional(&mut *self.reader.acquire().await?)
            .await
            .db()?
            .ok_or_else(|| MemoryError::not_found("fact", id.as_str()))?;
        fact_from(scope, &row)
    }

    async fn list_facts(&self, scope: &Scope, query: FactQuery) -> Result<Page<Fact>> {
        let limit = query.page_limit();
        let cursor = query.after();
        let statement = sql::facts::list_page(cursor.is_some());
        let rows = sqlx::query(statement)
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .bind(millis(self.clock.now()))
            .bind(query.include_superseded)
            .bind(query.kind.as_deref())
            .bind(to_json(&query.tags))
            .bind(cursor.as_ref().map(|c| c.created_at.as_millis()))
            .bind(cursor.as_ref().map(|c| c.id.as_str()))
            .bind(i64::try_from(limit + 1).unwrap_or(i64::MAX))
            .fetch_all(&mut *self.reader.acquire().await?)
            .await
            .db()?;
        Ok(page_newest_first(
            facts_from(scope, &rows)?,
            |f| (f.created_at, f.id.as_str()),
            None,
            limit,
        ))
    }

    async fn history(&self, scope: &Scope, key: &str) -> Result<Vec<Fact>> {
        let rows = sqlx::query(sql::facts::BY_KEY)
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .bind(key)
            .bind(millis(self.clock.now()))
            .fetch_all(&mut *self.reader.acquire().await?)
            .await
            .db()?;
        facts_from(scope, &rows).map(order_history)
    }

    async fn forget(&self, scope: &Scope, id: &FactId) -> Result<bool> {
        // An expired fact is removed too, but was already gone to readers: not reported.
        let live: Option<bool> = sqlx::query_scalar(sql::facts::DELETE_BY_ID)
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .bind(id.as_str())
            .bind(millis(self.clock.now()))
            .fetch_optional(&mut *self.writer.connections().acquire().await?)
            .await
            .db()?;
        Ok(live == Some(true))
    }

    async fn set_expiry(
        &self,
        scope: &Scope,
        ids: &[FactId],
        expires_at: Option<Timestamp>,
    ) -> Result<Vec<FactId>> {
        // One statement: all the ids or none.
        let changed: Vec<String> = sqlx::query_scalar(sql::facts::SET_EXPIRY)
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .bind(to_json(&ids))
            .bind(expires_at.map(millis))
            .bind(millis(self.clock.now()))
            .fetch_all(&mut *self.writer.connections().acquire().await?)
            .await
            .db()?;
        changed
            .into_iter()
            .map(|id| FactId::new(id).map_err(|e| corrupt("fact id", e)))
            .collect()
    }
}
