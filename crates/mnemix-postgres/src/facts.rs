//! Facts: dedupe, supersede, eviction; recall over the subject's facts held per generation, or
//! (lexical recall of a subject not held) through a GIN token index (see the crate docs).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use mnemix_core::adapter::{fact_tokens, order_history, page_newest_first, rank_facts};
use mnemix_core::adapter::{held_key, HeldChange, HeldFact, HeldFacts};
use mnemix_core::lexical::tokenize;
use mnemix_core::{
    Fact, FactId, FactQuery, FactSource, FactStore, MemoryError, NewFact, Page, Provenance,
    RecallQuery, RememberOptions, RememberOutcome, RememberStatus, Result, Scope, ScoredFact,
    Timestamp,
};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::db::{corrupt, millis, subject_of, text_from, to_json, Db, DbResult};
use crate::PostgresStore;

pub(crate) const FACT_COLUMNS: &str = "pk, id, text, kind, key, tags, score, source, embedding, \
     created_at, updated_at, expires_at, valid_to, superseded_by, provenance, valid_from, \
     valid_until";

pub(crate) fn fact_from(scope: &Scope, row: &Row) -> Result<Fact> {
    let id = |column: &str| -> Result<Option<FactId>> {
        row.get::<_, Option<String>>(column)
            .map(FactId::new)
            .transpose()
            .map_err(|e| corrupt("fact id", e))
    };
    Ok(Fact {
        id: id("id")?.ok_or_else(|| corrupt("fact id", "missing"))?,
        scope: scope.clone(),
        text: text_from(row.get("text"))?,
        kind: row.get("kind"),
        key: row.get("key"),
        tags: row.get("tags"),
        score: row.get("score"),
        source: row
            .get::<_, Option<String>>("source")
            .map(|s| serde_json::from_str(&s))
            .transpose()
            .map_err(|e| corrupt("fact source", e))?,
        embedding: row.get("embedding"),
        created_at: Timestamp::from_millis(row.get("created_at")),
        updated_at: Timestamp::from_millis(row.get("updated_at")),
        expires_at: row
            .get::<_, Option<i64>>("expires_at")
            .map(Timestamp::from_millis),
        valid_to: row
            .get::<_, Option<i64>>("valid_to")
            .map(Timestamp::from_millis),
        superseded_by: id("superseded_by")?,
        provenance: provenance_of(row)?,
        valid_from: row
            .get::<_, Option<i64>>("valid_from")
            .map(Timestamp::from_millis),
        valid_until: row
            .get::<_, Option<i64>>("valid_until")
            .map(Timestamp::from_millis),
    })
}

/// A row's provenance: its JSON, or unrecorded when the fact was written before provenance
/// was (NULL).
fn provenance_of(row: &Row) -> Result<Provenance> {
    row.get::<_, Option<String>>("provenance")
        .map(|json| serde_json::from_str(&json))
        .transpose()
        .map(Option::unwrap_or_default)
        .map_err(|e| corrupt("fact provenance", e))
}

fn facts_from(scope: &Scope, rows: &[Row]) -> Result<Vec<Fact>> {
    rows.iter().map(|row| fact_from(scope, row)).collect()
}

/// The statement that writes a fact verbatim (remember inserts; restore upserts).
pub(crate) const UPSERT_FACT: &str = "INSERT INTO {s}.facts (namespace, subject, id, text, kind,
         key, tags, score, source, embedding, created_at, updated_at, expires_at, valid_to,
         superseded_by, tokens, provenance, valid_from, valid_until)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
         $19)
     ON CONFLICT (namespace, subject, id) DO UPDATE SET
         text = excluded.text, kind = excluded.kind, key = excluded.key, tags = excluded.tags,
         score = excluded.score, source = excluded.source, embedding = excluded.embedding,
         created_at = excluded.created_at, updated_at = excluded.updated_at,
         expires_at = excluded.expires_at, valid_to = excluded.valid_to,
         superseded_by = excluded.superseded_by, tokens = excluded.tokens,
         provenance = excluded.provenance, valid_from = excluded.valid_from,
         valid_until = excluded.valid_until
     RETURNING pk";

impl PostgresStore {
    /// Writes `fact` with [`UPSERT_FACT`], its tokens included: its row's `pk`.
    pub(crate) async fn write_fact(&self, db: &impl Db, fact: &Fact) -> Result<i64> {
        let tokens: Vec<String> = fact_tokens(&fact.text).into_iter().collect();
        let row = db
            .row(
                &self.sql(UPSERT_FACT),
                &[
                    &fact.scope.namespace().as_str(),
                    &subject_of(&fact.scope),
                    &fact.id.as_str(),
                    &fact.text.as_bytes(),
                    &fact.kind,
                    &fact.key,
                    &fact.tags,
                    &fact.score,
                    &fact.source.as_ref().map(to_json),
                    &fact.embedding,
                    &millis(fact.created_at),
                    &millis(fact.updated_at),
                    &fact.expires_at.map(millis),
                    &fact.valid_to.map(millis),
                    &fact.superseded_by.as_ref().map(FactId::as_str),
                    &tokens,
                    &to_json(&fact.provenance),
                    &fact.valid_from.map(millis),
                    &fact.valid_until.map(millis),
                ],
            )
            .await?
            .ok_or_else(|| corrupt("fact", "its write returned no key"))?;
        Ok(row.get(0))
    }

    /// Recall over the subject's held facts: the facts ranked and the current generation in
    /// one statement. `None` when the generation moved under each of a few attempts, for the
    /// caller to read the candidates in one statement instead.
    async fn recall_held(
        &self,
        client: &deadpool_postgres::Object,
        scope: &Scope,
        query: &RecallQuery,
        now: Timestamp,
    ) -> Result<Option<Vec<ScoredFact>>> {
        let key = held_key(scope);
        let (namespace, subject) = (scope.namespace().as_str(), subject_of(scope));
        let mut held = self.held_facts.latest(&key);
        for _ in 0..3 {
            let read = match held.take() {
                Some(held) => Some(held),
                None => self.read_held_facts(client, scope).await?,
            };
            let Some((generation, facts)) = read else {
                // No generation: the subject holds no fact (erased, perhaps by another
                // process), and nothing of it is kept in memory either.
                self.held_facts.remove(&key);
                return Ok(Some(Vec::new()));
            };
            let ranked = facts.rank(query, now);
            let pks: Vec<i64> = ranked.iter().map(|(f, _)| f.pk).collect();
            let rows = client
                .rows(
                    &self.sql(&format!(
                        "SELECT g.generation, f.*
                         FROM {{s}}.fact_generations g
                         LEFT JOIN LATERAL (
                             SELECT {FACT_COLUMNS} FROM {{s}}.facts
                             WHERE namespace = $1 AND subject = $2 AND pk = ANY($3)
                         ) f ON true
                         WHERE g.namespace = $1 AND g.subject = $2"
                    )),
                    &[&namespace, &subject, &pks],
                )
                .await?;
            let Some(first) = rows.first() else {
                self.held_facts.remove(&key);
                return Ok(Some(Vec::new()));
            };
            if first.get::<_, i64>("generation") != generation {
                continue;
            }
            let mut read: HashMap<i64, Fact> = HashMap::with_capacity(rows.len());
            for row in &rows {
                if let Some(pk) = row.get::<_, Option<i64>>("pk") {
                    read.insert(pk, fact_from(scope, row)?);
                }
            }
            return ranked
                .into_iter()
                .map(|(held, relevance)| {
                    let fact = read
                        .remove(&held.pk)
                        .ok_or_else(|| corrupt("fact", "ranked at its generation but not read"))?;
                    Ok(ScoredFact { fact, relevance })
                })
                .collect::<Result<Vec<_>>>()
                .map(Some);
        }
        Ok(None)
    }

    /// The subject's current facts as recall holds them, read in one snapshot with their
    /// generation, and kept; `None` when the subject has no generation (it holds no fact).
    async fn read_held_facts(
        &self,
        client: &deadpool_postgres::Object,
        scope: &Scope,
    ) -> Result<Option<(i64, Arc<HeldFacts>)>> {
        let rows = client
            .rows(
                &self.sql(
                    "SELECT g.generation, f.pk, f.id, f.text, f.score, f.created_at,
                            f.expires_at, f.kind, f.tags, f.source, f.embedding, f.provenance
                     FROM {s}.fact_generations g
                     LEFT JOIN {s}.facts f ON f.namespace = g.namespace
                          AND f.subject = g.subject AND f.superseded_by IS NULL
                     WHERE g.namespace = $1 AND g.subject = $2",
                ),
                &[&scope.namespace().as_str(), &subject_of(scope)],
            )
            .await?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let generation: i64 = first.get("generation");
        let mut facts = Vec::with_capacity(rows.len());
        for row in &rows {
            let Some(pk) = row.get::<_, Option<i64>>("pk") else {
                continue;
            };
            let source: Option<FactSource> = row
                .get::<_, Option<String>>("source")
                .map(|s| serde_json::from_str(&s))
                .transpose()
                .map_err(|e| corrupt("fact source", e))?;
            let provenance = provenance_of(row)?;
            facts.push(HeldFact {
                pk,
                id: FactId::new(row.get::<_, String>("id")).map_err(|e| corrupt("fact id", e))?,
                score: row.get("score"),
                created_at: Timestamp::from_millis(row.get("created_at")),
                expires_at: row
                    .get::<_, Option<i64>>("expires_at")
                    .map(Timestamp::from_millis),
                kind: row.get("kind"),
                tags: row.get("tags"),
                conversation: source.map(|s| s.conversation_id.as_str().to_owned()),
                embedding: row.get("embedding"),
                text: text_from(row.get("text"))?,
                origin: provenance.origin,
                written_by: provenance.written_by,
            });
        }
        let held = Arc::new(HeldFacts::new(facts));
        self.held_facts
            .insert(held_key(scope), generation, Arc::clone(&held));
        Ok(Some((generation, held)))
    }

    /// A remember, and what it did to the subject's held facts: apply it once committed.
    async fn remember_held(
        &self,
        scope: &Scope,
        new: NewFact,
        options: RememberOptions,
    ) -> Result<(RememberOutcome, HeldChange)> {
        let now = self.clock.now();
        let (namespace, subject) = (scope.namespace().as_str(), subject_of(scope));
        let mut client = self.client().await?;
        let tx = client.transaction().await.db()?;
        // Dedupe, supersede and eviction read then write the scope's facts: one writer per
        // scope at a time (a row lock cannot cover facts that do not exist yet).
        let lock_key = format!("facts\u{1f}{namespace}\u{1f}{subject}");
        tx.exec(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
            &[&lock_key],
        )
        .await?;
        // Expired facts are never returned: purge the scope's before deciding anything.
        tx.exec(
            &self.sql(
                "DELETE FROM {s}.facts WHERE namespace = $1 AND subject = $2 AND expires_at <= $3",
            ),
            &[&namespace, &subject, &millis(now)],
        )
        .await?;
        let same = tx
            .row(
                &self.sql(&format!(
                    "SELECT {FACT_COLUMNS} FROM {{s}}.facts
                     WHERE namespace = $1 AND subject = $2 AND superseded_by IS NULL
                       AND md5(text) = md5($4::bytea) AND key IS NOT DISTINCT FROM $3 AND text = $4
                     LIMIT 1"
                )),
                &[&namespace, &subject, &new.key, &new.text.as_bytes()],
            )
            .await?;
        if let Some(row) = same {
            let outcome = RememberOutcome {
                fact: fact_from(scope, &row)?,
                status: RememberStatus::Duplicate,
                evicted: Vec::new(),
            };
            // Nothing written: the purge, if any, is rolled back.
            return Ok((outcome, HeldChange::starting(scope, None, now)));
        }
        let fact = new.into_fact(scope, now);
        let mut status = RememberStatus::Created;
        if let Some(key) = &fact.key {
            let previous = tx
                .row(
                    &self.sql(
                        // valid_until: mnemix_core::adapter::closed_valid_until.
                        "UPDATE {s}.facts SET valid_to = $1, superseded_by = $2, updated_at = $1,
                             valid_until = CASE WHEN $6::bigint IS NOT NULL
                                 AND (valid_from IS NULL OR valid_from < $6)
                                 AND (valid_until IS NULL OR $6 < valid_until)
                                 THEN $6 ELSE valid_until END
                         WHERE namespace = $3 AND subject = $4 AND key = $5
                           AND superseded_by IS NULL
                         RETURNING id",
                    ),
                    &[
                        &millis(now),
                        &fact.id.as_str(),
                        &namespace,
                        &subject,
                        key,
                        &fact.valid_from.map(millis),
                    ],
                )
                .await?;
            if let Some(row) = previous {
                status = RememberStatus::Superseded {
                    previous: FactId::new(row.get::<_, String>(0))
                        .map_err(|e| corrupt("fact id", e))?,
                };
            }
        }
        let pk = self.write_fact(&tx, &fact).await?;
        let mut evicted = Vec::new();
        if let Some(max) = options.max_facts {
            // The core's eviction order: lowest score first (none lowest), oldest, then id.
            let victims = tx
                .rows(
                    &self.sql(
                        "DELETE FROM {s}.facts WHERE pk IN (
                             SELECT pk FROM {s}.facts
                             WHERE namespace = $1 AND subject = $2 AND superseded_by IS NULL
                               AND id <> $3
                             ORDER BY score ASC NULLS FIRST, created_at ASC, id ASC
                             LIMIT greatest(0, (SELECT count(*) FROM {s}.facts
                                 WHERE namespace = $1 AND subject = $2
                                   AND superseded_by IS NULL) - $4))
                         RETURNING id, score, created_at",
                    ),
                    &[
                        &namespace,
                        &subject,
                        &fact.id.as_str(),
                        &i64::try_from(max).unwrap_or(i64::MAX),
                    ],
                )
                .await?;
            let mut victims: Vec<(Option<f32>, i64, String)> = victims
                .iter()
                .map(|row| (row.get(1), row.get(2), row.get(0)))
                .collect();
            victims.sort_by(|a, b| {
                a.0.unwrap_or(f32::NEG_INFINITY)
                    .total_cmp(&b.0.unwrap_or(f32::NEG_INFINITY))
                    .then(a.1.cmp(&b.1))
                    .then(a.2.cmp(&b.2))
            });
            evicted = victims
                .into_iter()
                .map(|(_, _, id)| FactId::new(id).map_err(|e| corrupt("fact id", e)))
                .collect::<Result<Vec<_>>>()?;
        }
        // The generation before this transaction's writes and after them: the row is this
        // transaction's until it commits, so no other write came between.
        let generations = tx
            .row(
                &self.sql(
                    "SELECT base, generation FROM {s}.fact_generations
                     WHERE namespace = $1 AND subject = $2",
                ),
                &[&namespace, &subject],
            )
            .await?
            .ok_or_else(|| corrupt("facts generation", "no row after a write"))?;
        tx.commit().await.db()?;
        let outcome = RememberOutcome {
            fact,
            status,
            evicted,
        };
        let mut change = HeldChange::starting(scope, generations.get(0), now);
        change.to = Some(generations.get(1));
        change.wrote(pk, &outcome);
        Ok((outcome, change))
    }
}

#[async_trait]
impl FactStore for PostgresStore {
    async fn remember(
        &self,
        scope: &Scope,
        new: NewFact,
        options: RememberOptions,
    ) -> Result<RememberOutcome> {
        let (outcome, change) = self.remember_held(scope, new, options).await?;
        change.apply(&self.held_facts);
        Ok(outcome)
    }

    async fn recall(&self, scope: &Scope, query: RecallQuery) -> Result<Vec<ScoredFact>> {
        let semantic = query.vector.is_some();
        let tokens: Vec<String> = query
            .text
            .as_deref()
            .map(tokenize)
            .unwrap_or_default()
            .into_iter()
            .collect();
        if !semantic && tokens.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.clock.now();
        let client = self.client().await?;
        // Lexical recall ranks held facts only when they are held already (by a recall with a
        // vector, or kept current by this store's remembers): reading every fact of a large
        // subject to hold it costs more than the candidates its token index gives.
        if semantic || self.held_facts.latest(&held_key(scope)).is_some() {
            let recalled = self.recall_held(&client, scope, &query, now).await?;
            if let Some(recalled) = recalled {
                return Ok(recalled);
            }
        }
        let now = millis(now);
        let (namespace, subject) = (scope.namespace().as_str(), subject_of(scope));
        let rows = if semantic {
            // The generation kept moving: every current fact with its embedding, in one
            // snapshot.
            client
                .rows(
                    &self.sql(&format!(
                        "SELECT {FACT_COLUMNS} FROM {{s}}.facts
                         WHERE namespace = $1 AND subject = $2 AND superseded_by IS NULL
                           AND (expires_at IS NULL OR expires_at > $3)"
                    )),
                    &[&namespace, &subject, &now],
                )
                .await?
        } else {
            client
                .rows(
                    &self.sql(&format!(
                        "SELECT {FACT_COLUMNS} FROM {{s}}.facts
                         WHERE namespace = $1 AND subject = $2 AND tokens && $4::text[]
                           AND superseded_by IS NULL AND (expires_at IS NULL OR expires_at > $3)"
                    )),
                    &[&namespace, &subject, &now, &tokens],
                )
                .await?
        };
        Ok(rank_facts(&query, facts_from(scope, &rows)?))
    }

    async fn get_fact(&self, scope: &Scope, id: &FactId) -> Result<Fact> {
        let client = self.client().await?;
        let row = client
            .row(
                &self.sql(&format!(
                    "SELECT {FACT_COLUMNS} FROM {{s}}.facts
                     WHERE namespace = $1 AND subject = $2 AND id = $3
                       AND (expires_at IS NULL OR expires_at > $4)"
                )),
                &[
                    &scope.namespace().as_str(),
                    &subject_of(scope),
                    &id.as_str(),
                    &millis(self.clock.now()),
                ],
            )
            .await?
            .ok_or_else(|| MemoryError::not_found("fact", id.as_str()))?;
        fact_from(scope, &row)
    }

    async fn list_facts(&self, scope: &Scope, query: FactQuery) -> Result<Page<Fact>> {
        let limit = query.page_limit();
        let cursor = query.after();
        let client = self.client().await?;
        let (namespace, subject, now) = (
            scope.namespace().as_str(),
            subject_of(scope),
            millis(self.clock.now()),
        );
        let fetch = i64::try_from(limit + 1).unwrap_or(i64::MAX);
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![
            &namespace,
            &subject,
            &now,
            &query.include_superseded,
            &query.kind,
            &query.tags,
            &fetch,
        ];
        // The cursor bound is in the statement only on later pages: as
        // `($8 IS NULL OR (created_at, id) < ($8, $9))` the cached generic plan made it a
        // filter, so every page scanned the subject's facts from the newest down.
        let cursor_millis = cursor.as_ref().map(|c| c.created_at.as_millis());
        let cursor_id = cursor.as_ref().map(|c| c.id.as_str());
        let after = if let (Some(millis), Some(id)) = (&cursor_millis, &cursor_id) {
            params.push(millis);
            params.push(id);
            " AND (created_at, id) < ($8, $9)"
        } else {
            ""
        };
        let rows = client
            .rows(
                &self.sql(&format!(
                    "SELECT {FACT_COLUMNS} FROM {{s}}.facts
                     WHERE namespace = $1 AND subject = $2
                       AND (expires_at IS NULL OR expires_at > $3)
                       AND ($4 OR superseded_by IS NULL) AND ($5::text IS NULL OR kind = $5)
                       AND tags @> $6::text[]{after}
                     ORDER BY created_at DESC, id DESC LIMIT $7"
                )),
                &params,
            )
            .await?;
        Ok(page_newest_first(
            facts_from(scope, &rows)?,
            |f| (f.created_at, f.id.as_str()),
            None,
            limit,
        ))
    }

    async fn history(&self, scope: &Scope, key: &str) -> Result<Vec<Fact>> {
        let client = self.client().await?;
        let rows = client
            .rows(
                &self.sql(&format!(
                    "SELECT {FACT_COLUMNS} FROM {{s}}.facts
                     WHERE namespace = $1 AND subject = $2 AND key = $3
                       AND (expires_at IS NULL OR expires_at > $4)"
                )),
                &[
                    &scope.namespace().as_str(),
                    &subject_of(scope),
                    &key,
                    &millis(self.clock.now()),
                ],
            )
            .await?;
        facts_from(scope, &rows).map(order_history)
    }

    async fn forget(&self, scope: &Scope, id: &FactId) -> Result<bool> {
        let client = self.client().await?;
        // An expired fact is removed too, but was already gone to readers: not reported.
        let live = client
            .row(
                &self.sql(
                    "DELETE FROM {s}.facts WHERE namespace = $1 AND subject = $2 AND id = $3
                     RETURNING expires_at IS NULL OR expires_at > $4",
                ),
                &[
                    &scope.namespace().as_str(),
                    &subject_of(scope),
                    &id.as_str(),
                    &millis(self.clock.now()),
                ],
            )
            .await?;
        Ok(live.is_some_and(|row| row.get::<_, bool>(0)))
    }

    async fn set_expiry(
        &self,
        scope: &Scope,
        ids: &[FactId],
        expires_at: Option<Timestamp>,
    ) -> Result<Vec<FactId>> {
        let client = self.client().await?;
        let ids: Vec<&str> = ids.iter().map(FactId::as_str).collect();
        // One statement: all the ids or none.
        let changed = client
            .rows(
                &self.sql(
                    "UPDATE {s}.facts SET expires_at = $4, updated_at = $5
                     WHERE namespace = $1 AND subject = $2 AND id = ANY($3)
                       AND (expires_at IS NULL OR expires_at > $5)
                     RETURNING id",
                ),
                &[
                    &scope.namespace().as_str(),
                    &subject_of(scope),
                    &ids,
                    &expires_at.map(millis),
                    &millis(self.clock.now()),
                ],
            )
            .await?;
        changed
            .iter()
            .map(|row| FactId::new(row.get::<_, String>(0)).map_err(|e| corrupt("fact id", e)))
            .collect()
    }
}
