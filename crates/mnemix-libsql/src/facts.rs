//! Facts: dedupe, supersede, eviction and lexical/semantic recall through the token table.

use async_trait::async_trait;
use libsql::Value;
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
use mnemix_sqlite_sql::facts::{
    parse_holding, Candidate, FACTS_BY_PKS, RECALL_CANDIDATES_ALL, RECALL_CANDIDATES_HOLDING,
};

use crate::db::{
    corrupt, count_to_db, execute, millis, row, rows, subject_of, text, to_json, Conn, DbRow,
    RowExt,
};
use crate::LibsqlStore;

/// Columns read by [`fact_from`], in its order.
pub(crate) const FACT_COLUMNS: &str = fact_columns!();

pub(crate) fn fact_from(scope: &Scope, row: &DbRow) -> Result<Fact> {
    let id = |column: usize| -> Result<Option<FactId>> {
        row.opt_string(column)?
            .map(FactId::new)
            .transpose()
            .map_err(|e| corrupt("fact id", e))
    };
    Ok(Fact {
        id: id(1)?.ok_or_else(|| corrupt("fact id", "missing"))?,
        scope: scope.clone(),
        text: row.string(2)?,
        kind: row.opt_string(3)?,
        key: row.opt_string(4)?,
        tags: serde_json::from_str(&row.string(5)?).map_err(|e| corrupt("fact tags", e))?,
        score: row.opt_real(6)?.map(|s| s as f32),
        source: row
            .opt_string(7)?
            .map(|s| serde_json::from_str(&s))
            .transpose()
            .map_err(|e| corrupt("fact source", e))?,
        embedding: row.opt_blob(8)?.map(|b| decode_f32_le(&b)),
        created_at: Timestamp::from_millis(row.int(9)?),
        updated_at: Timestamp::from_millis(row.int(10)?),
        expires_at: row.opt_int(11)?.map(Timestamp::from_millis),
        valid_to: row.opt_int(12)?.map(Timestamp::from_millis),
        superseded_by: id(13)?,
    })
}

fn facts_from(scope: &Scope, rows: &[DbRow]) -> Result<Vec<Fact>> {
    rows.iter().map(|row| fact_from(scope, row)).collect()
}

/// An optional embedding as a statement parameter.
pub(crate) fn embedding_value(embedding: Option<&[f32]>) -> Value {
    embedding.map_or(Value::Null, |e| Value::Blob(encode_f32_le(e)))
}

pub(crate) async fn insert_tokens(conn: &Conn, scope: &Scope, pk: i64, text: &str) -> Result<()> {
    let tokens: Vec<String> = fact_tokens(text).into_iter().collect();
    execute(
        conn,
        sql::facts::INSERT_TOKENS,
        (
            scope.namespace().as_str(),
            subject_of(scope),
            pk,
            to_json(&tokens),
        ),
    )
    .await?;
    Ok(())
}

/// A semantic recall's candidate row.
fn candidate_from(row: &DbRow) -> Result<Candidate> {
    Candidate::new(
        row.int(0)?,
        row.string(1)?,
        row.opt_real(2)?,
        row.int(3)?,
        row.opt_string(4)?.as_deref(),
        row.opt_blob(5)?.as_deref(),
    )
    .map_err(|e| corrupt("recall candidate", e))
}

#[async_trait]
impl FactStore for LibsqlStore {
    async fn remember(
        &self,
        scope: &Scope,
        new: NewFact,
        options: RememberOptions,
    ) -> Result<RememberOutcome> {
        let now = self.clock.now();
        let (namespace, subject) = (scope.namespace().as_str(), subject_of(scope));
        let tx = self.write().await?;
        // Expired facts are never returned: purge the scope's before deciding anything.
        execute(
            &tx,
            sql::facts::PURGE_EXPIRED,
            (namespace, subject, millis(now)),
        )
        .await?;
        let same = row(
            &tx,
            &format!(
                "SELECT {FACT_COLUMNS} FROM facts
                 WHERE namespace = ?1 AND subject = ?2 AND superseded_by IS NULL
                   AND key IS ?3 AND text = ?4 LIMIT 1"
            ),
            (namespace, subject, new.key.as_deref(), text(&new.text)),
        )
        .await?;
        if let Some(row) = same {
            return Ok(RememberOutcome {
                fact: fact_from(scope, &row)?,
                status: RememberStatus::Duplicate,
                evicted: Vec::new(),
            });
        }
        let fact = new.into_fact(scope, now);
        let mut status = RememberStatus::Created;
        if let Some(key) = &fact.key {
            let previous = row(
                &tx,
                "UPDATE facts SET valid_to = ?1, superseded_by = ?2, updated_at = ?1
                 WHERE namespace = ?3 AND subject = ?4 AND key = ?5 AND superseded_by IS NULL
                 RETURNING pk, id",
                (
                    millis(now),
                    fact.id.as_str(),
                    namespace,
                    subject,
                    key.as_str(),
                ),
            )
            .await?;
            if let Some(previous) = previous {
                // History is not recalled: its tokens leave the index.
                execute(&tx, sql::facts::DELETE_TOKENS, [previous.int(0)?]).await?;
                status = RememberStatus::Superseded {
                    previous: FactId::new(previous.string(1)?)
                        .map_err(|e| corrupt("fact id", e))?,
                };
            }
        }
        let pk = row(
            &tx,
            "INSERT INTO facts (namespace, subject, id, text, kind, key, tags, score, source,
                 embedding, created_at, updated_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, ?12) RETURNING pk",
            (
                namespace,
                subject,
                fact.id.as_str(),
                text(&fact.text),
                fact.kind.as_deref(),
                fact.key.as_deref(),
                to_json(&fact.tags),
                fact.score.map(f64::from),
                fact.source.as_ref().map(to_json),
                embedding_value(fact.embedding.as_deref()),
                millis(now),
                fact.expires_at.map(millis),
            ),
        )
        .await?
        .ok_or_else(|| corrupt("fact", "insert returned no row"))?
        .int(0)?;
        insert_tokens(&tx, scope, pk, &fact.text).await?;
        let mut evicted = Vec::new();
        if let Some(max) = options.max_facts {
            // The core's eviction order: lowest score first (none lowest), oldest, then id.
            let victims = rows(
                &tx,
                sql::facts::EVICTION_VICTIMS,
                (namespace, subject, pk, count_to_db(max)),
            )
            .await?;
            if !victims.is_empty() {
                let pks = victims
                    .iter()
                    .map(|v| v.int(0))
                    .collect::<Result<Vec<_>>>()?;
                execute(&tx, sql::facts::DELETE_BY_PKS, [to_json(&pks)]).await?;
            }
            evicted = victims
                .iter()
                .map(|v| FactId::new(v.string(1)?).map_err(|e| corrupt("fact id", e)))
                .collect::<Result<Vec<_>>>()?;
        }
        tx.commit().await?;
        Ok(RememberOutcome {
            fact,
            status,
            evicted,
        })
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
        let tx = self.read().await?;
        let params = (
            scope.namespace().as_str(),
            subject_of(scope),
            millis(self.clock.now()),
            to_json(&query_tokens),
            query.kind.as_deref(),
            query.min_score.map(f64::from),
            to_json(&query.tags),
            query.conversation.as_ref().map(ConversationId::as_str),
        );
        let candidates = if semantic {
            rows(&tx, RECALL_CANDIDATES_ALL, params)
                .await?
                .iter()
                .map(candidate_from)
                .collect::<Result<Vec<_>>>()?
        } else {
            let json = row(&tx, RECALL_CANDIDATES_HOLDING, params)
                .await?
                .ok_or_else(|| corrupt("recall candidates", "no row"))?
                .string(0)?;
            parse_holding(&json).map_err(|e| corrupt("recall candidate", e))?
        };
        let ranked = sql::facts::rank(&query, &candidates);
        if ranked.is_empty() {
            return Ok(Vec::new());
        }
        let pks: Vec<i64> = ranked.iter().map(|&(pk, _)| pk).collect();
        let facts: Vec<(i64, Fact)> = rows(&tx, FACTS_BY_PKS, [to_json(&pks)])
            .await?
            .iter()
            .map(|row| Ok((row.int(0)?, fact_from(scope, row)?)))
            .collect::<Result<_>>()?;
        sql::facts::in_rank_order(ranked, facts).map_err(|e| corrupt("fact", e))
    }

    async fn get_fact(&self, scope: &Scope, id: &FactId) -> Result<Fact> {
        let tx = self.read().await?;
        let found = row(
            &tx,
            sql::facts::BY_ID,
            (
                scope.namespace().as_str(),
                subject_of(scope),
                id.as_str(),
                millis(self.clock.now()),
            ),
        )
        .await?
        .ok_or_else(|| MemoryError::not_found("fact", id.as_str()))?;
        fact_from(scope, &found)
    }

    async fn list_facts(&self, scope: &Scope, query: FactQuery) -> Result<Page<Fact>> {
        let limit = query.page_limit();
        let cursor = query.after();
        let statement = sql::facts::list_page(cursor.is_some());
        let tx = self.read().await?;
        let found = rows(
            &tx,
            statement,
            (
                scope.namespace().as_str(),
                subject_of(scope),
                millis(self.clock.now()),
                query.include_superseded,
                query.kind.as_deref(),
                to_json(&query.tags),
                cursor.as_ref().map(|c| c.created_at.as_millis()),
                cursor.as_ref().map(|c| c.id.as_str()),
                count_to_db(limit + 1),
            ),
        )
        .await?;
        Ok(page_newest_first(
            facts_from(scope, &found)?,
            |f| (f.created_at, f.id.as_str()),
            None,
            limit,
        ))
    }

    async fn history(&self, scope: &Scope, key: &str) -> Result<Vec<Fact>> {
        let tx = self.read().await?;
        let found = rows(
            &tx,
            sql::facts::BY_KEY,
            (
                scope.namespace().as_str(),
                subject_of(scope),
                key,
                millis(self.clock.now()),
            ),
        )
        .await?;
        facts_from(scope, &found).map(order_history)
    }

    async fn forget(&self, scope: &Scope, id: &FactId) -> Result<bool> {
        let tx = self.write().await?;
        // An expired fact is removed too, but was already gone to readers: not reported.
        let live = row(
            &tx,
            sql::facts::DELETE_BY_ID,
            (
                scope.namespace().as_str(),
                subject_of(scope),
                id.as_str(),
                millis(self.clock.now()),
            ),
        )
        .await?;
        tx.commit().await?;
        live.map_or(Ok(false), |row| Ok(row.int(0)? == 1))
    }

    async fn set_expiry(
        &self,
        scope: &Scope,
        ids: &[FactId],
        expires_at: Option<Timestamp>,
    ) -> Result<Vec<FactId>> {
        let tx = self.write().await?;
        // One statement: all the ids or none.
        let changed = rows(
            &tx,
            sql::facts::SET_EXPIRY,
            (
                scope.namespace().as_str(),
                subject_of(scope),
                to_json(&ids),
                expires_at.map(millis),
                millis(self.clock.now()),
            ),
        )
        .await?;
        tx.commit().await?;
        changed
            .iter()
            .map(|row| FactId::new(row.string(0)?).map_err(|e| corrupt("fact id", e)))
            .collect()
    }
}
