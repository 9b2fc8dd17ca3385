//! Facts: a hash each, token sets for lexical recall, one script for remember (dedupe,
//! supersede, eviction) so it is atomic, and recall over the scope's facts held per version
//! token (see the crate docs).

use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use mnemix_core::adapter::{fact_tokens, order_history, page_newest_first, rank_facts};
use mnemix_core::adapter::{held_key, HeldChange, HeldFact, HeldFacts};
use mnemix_core::{
    Fact, FactId, FactQuery, FactStore, MemoryError, NewFact, Page, RecallQuery, RememberOptions,
    RememberOutcome, RememberStatus, Result, Scope, ScoredFact, Timestamp,
};
use redis::Script;

use crate::keys::ScopeKeys;
use crate::paging::IdPager;
use crate::vectors::version_token;
use crate::{corrupt, to_json, RedisResultExt, RedisStore};

macro_rules! fact_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("lua/facts_prelude.lua"),
                include_str!($file)
            ))
        })
    };
}

static REMEMBER: LazyLock<Script> = fact_script!("lua/remember.lua");
static FORGET: LazyLock<Script> = fact_script!("lua/forget_fact.lua");
static SET_EXPIRY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/set_expiry.lua")));

const FACT_FIELDS: [&str; 6] = [
    "doc",
    "updated_at",
    "valid_to",
    "superseded_by",
    "expires_at",
    "valid_until",
];

/// A fact hash's fields as read, in [`FACT_FIELDS`] order.
type FactFields = (
    Option<String>,
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// An optional time as a script takes it: milliseconds, or empty.
fn millis_or_empty(t: Option<Timestamp>) -> String {
    t.map(|t| t.as_millis().to_string()).unwrap_or_default()
}

/// A millisecond field a script may have left empty.
fn optional_millis(field: Option<String>, what: &str) -> Result<Option<Timestamp>> {
    field
        .filter(|v| !v.is_empty())
        .map(|v| v.parse().map(Timestamp::from_millis))
        .transpose()
        .map_err(|e| corrupt(what, e))
}

/// The fact of a hash: the document written at creation with the fields that change later
/// (a script never edits JSON).
fn fact_from(fields: FactFields) -> Result<Option<Fact>> {
    let (Some(doc), Some(updated_at), valid_to, superseded_by, expires_at, valid_until) = fields
    else {
        return Ok(None);
    };
    let mut fact: Fact = serde_json::from_str(&doc).map_err(|e| corrupt("fact", e))?;
    fact.updated_at = Timestamp::from_millis(updated_at);
    fact.valid_to = optional_millis(valid_to, "fact valid_to")?;
    fact.expires_at = optional_millis(expires_at, "fact expires_at")?;
    // A supersede may close it; a fact written before valid time was kept has no field.
    if valid_until.is_some() {
        fact.valid_until = optional_millis(valid_until, "fact valid_until")?;
    }
    fact.superseded_by = superseded_by
        .filter(|s| !s.is_empty())
        .map(FactId::new)
        .transpose()
        .map_err(|e| corrupt("fact superseded_by", e))?;
    Ok(Some(fact))
}

/// The reply of a transaction that reads the facts' version token, then fact hashes.
fn token_and_facts(reply: Vec<redis::Value>) -> Result<(Option<String>, Vec<FactFields>)> {
    let mut values = reply.into_iter();
    let parse_error = |e: redis::ParsingError| corrupt("facts read", e);
    let token = values
        .next()
        .map(redis::from_redis_value)
        .transpose()
        .map_err(parse_error)?
        .flatten();
    let rows = values
        .map(redis::from_redis_value)
        .collect::<std::result::Result<_, _>>()
        .map_err(parse_error)?;
    Ok((token, rows))
}

impl RedisStore {
    /// The unexpired facts of these ids, in their order (missing ones skipped).
    pub(crate) async fn read_facts(&self, keys: &ScopeKeys, ids: &[String]) -> Result<Vec<Fact>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("HMGET").arg(keys.fact(id)).arg(&FACT_FIELDS);
        }
        let rows: Vec<FactFields> = pipe.query_async(&mut self.conn()).await.db()?;
        let now = self.clock.now();
        let mut facts = Vec::with_capacity(rows.len());
        for row in rows {
            if let Some(fact) = fact_from(row)? {
                if !fact.is_expired(now) {
                    facts.push(fact);
                }
            }
        }
        Ok(facts)
    }

    /// Recall over the scope's facts held at their version token: the facts ranked are read
    /// with the token in one transaction. `None` when the scope has no token (its facts predate
    /// tokens, or it holds none) or it kept changing, for the caller to read the candidates
    /// instead.
    async fn recall_held(
        &self,
        scope: &Scope,
        keys: &ScopeKeys,
        query: &RecallQuery,
    ) -> Result<Option<Vec<ScoredFact>>> {
        let now = self.clock.now();
        let key = held_key(scope);
        let mut held = self.held_facts.latest(&key);
        for _ in 0..3 {
            let read = match held.take() {
                Some(held) => Some(held),
                None => self.read_held_facts(scope, keys).await?,
            };
            let Some((token, facts)) = read else {
                return Ok(None);
            };
            let ranked = facts.rank(query, now);
            let mut pipe = redis::pipe();
            pipe.atomic().get(keys.facts_version());
            for (fact, _) in &ranked {
                pipe.cmd("HMGET")
                    .arg(keys.fact(fact.id.as_str()))
                    .arg(&FACT_FIELDS);
            }
            let (current, rows) = token_and_facts(pipe.query_async(&mut self.conn()).await.db()?)?;
            if current.as_deref() != Some(token.as_str()) {
                continue;
            }
            let mut recalled = Vec::with_capacity(ranked.len());
            for ((_, relevance), row) in ranked.into_iter().zip(rows) {
                // At the token it was ranked at, a fact is gone only if another clock found it
                // expired and purged it: read everything again.
                let Some(fact) = fact_from(row)? else {
                    return Ok(None);
                };
                recalled.push(ScoredFact { fact, relevance });
            }
            return Ok(Some(recalled));
        }
        Ok(None)
    }

    /// The scope's current facts as recall holds them, with their version token, kept: read
    /// as the ids and the token, then the facts and the token again, which must be unchanged.
    /// `None` without a token, or when it changed between the two reads.
    async fn read_held_facts(
        &self,
        scope: &Scope,
        keys: &ScopeKeys,
    ) -> Result<Option<(String, Arc<HeldFacts>)>> {
        let (token, ids): (Option<String>, Vec<String>) = redis::pipe()
            .atomic()
            .get(keys.facts_version())
            .smembers(keys.current_facts())
            .query_async(&mut self.conn())
            .await
            .db()?;
        let Some(token) = token else {
            return Ok(None);
        };
        let mut pipe = redis::pipe();
        pipe.atomic().get(keys.facts_version());
        for id in &ids {
            pipe.cmd("HMGET").arg(keys.fact(id)).arg(&FACT_FIELDS);
        }
        let (again, rows) = token_and_facts(pipe.query_async(&mut self.conn()).await.db()?)?;
        if again.as_deref() != Some(token.as_str()) {
            return Ok(None);
        }
        let mut facts = Vec::with_capacity(rows.len());
        for row in rows {
            if let Some(fact) = fact_from(row)? {
                if fact.is_current() {
                    facts.push(HeldFact::of(0, &fact));
                }
            }
        }
        let held = Arc::new(HeldFacts::new(facts));
        self.held_facts
            .insert(held_key(scope), token.clone(), Arc::clone(&held));
        Ok(Some((token, held)))
    }

    async fn members(&self, command: &str, key: String) -> Result<Vec<String>> {
        let mut cmd = redis::cmd(command);
        cmd.arg(key);
        if command != "SMEMBERS" {
            cmd.arg(0).arg(-1);
        }
        cmd.query_async(&mut self.conn()).await.db()
    }
}

#[async_trait]
impl FactStore for RedisStore {
    async fn remember(
        &self,
        scope: &Scope,
        new: NewFact,
        options: RememberOptions,
    ) -> Result<RememberOutcome> {
        let now = self.clock.now();
        let fact = new.into_fact(scope, now);
        self.register_scope(scope).await?;
        let keys = self.keys.scope(scope);
        let tokens: Vec<String> = fact_tokens(&fact.text).into_iter().collect();
        let fact_key = fact.key.clone().unwrap_or_default();
        let version = version_token();
        let reply: Vec<String> = REMEMBER
            .key(keys.facts())
            .arg(keys.base())
            .arg(now.as_millis())
            .arg(fact.id.as_str())
            .arg(&fact_key)
            .arg(format!("{fact_key}\0{}", fact.text).into_bytes())
            .arg(to_json(&fact))
            .arg(fact.created_at.as_millis())
            .arg(fact.score.map(|s| s.to_string()).unwrap_or_default())
            .arg(millis_or_empty(fact.expires_at))
            .arg(options.max_facts.map(|m| m.to_string()).unwrap_or_default())
            .arg(tokens.join(" "))
            .arg(&version)
            .arg(millis_or_empty(fact.valid_from))
            .arg(millis_or_empty(fact.valid_until))
            .invoke_async(&mut self.conn())
            .await
            .db()?;
        let status = reply.first().map(String::as_str).unwrap_or_default();
        let id_at = |i: usize| -> Result<FactId> {
            FactId::new(reply.get(i).cloned().unwrap_or_default())
                .map_err(|e| corrupt("remember reply", e))
        };
        if status == "duplicate" {
            let existing = id_at(1)?;
            let fact = self
                .read_facts(&keys, &[existing.to_string()])
                .await?
                .pop()
                .ok_or_else(|| MemoryError::not_found("fact", existing.as_str()))?;
            return Ok(RememberOutcome {
                fact,
                status: RememberStatus::Duplicate,
                evicted: Vec::new(),
            });
        }
        let status = match status {
            "created" => RememberStatus::Created,
            "superseded" => RememberStatus::Superseded {
                previous: id_at(1)?,
            },
            other => return Err(corrupt("remember reply", other)),
        };
        let evicted: Vec<FactId> = (3..reply.len()).map(id_at).collect::<Result<_>>()?;
        // The script replaced the facts' version token: what this process held at the old one
        // takes the remember and is current at the new one.
        let replaced = reply.get(2).filter(|t| !t.is_empty()).cloned();
        let outcome = RememberOutcome {
            fact,
            status,
            evicted,
        };
        let mut change = HeldChange::starting(scope, replaced, now);
        change.to = Some(version);
        change.wrote(0, &outcome);
        change.apply(&self.held_facts);
        Ok(outcome)
    }

    async fn recall(&self, scope: &Scope, query: RecallQuery) -> Result<Vec<ScoredFact>> {
        let keys = self.keys.scope(scope);
        let semantic = query.vector.is_some();
        let tokens = fact_tokens(query.text.as_deref().unwrap_or_default());
        if !semantic && tokens.is_empty() {
            return Ok(Vec::new());
        }
        // Lexical recall ranks held facts only when they are held already (by a recall with a
        // vector, or kept current by this process's remembers): reading every fact of a large
        // scope to hold it costs more than the candidates of its token sets.
        if semantic || self.held_facts.latest(&held_key(scope)).is_some() {
            if let Some(recalled) = self.recall_held(scope, &keys, &query).await? {
                return Ok(recalled);
            }
        }
        let ids: Vec<String> = if semantic {
            self.members("SMEMBERS", keys.current_facts()).await?
        } else {
            let mut cmd = redis::cmd("SUNION");
            for token in &tokens {
                cmd.arg(keys.fact_token(token));
            }
            cmd.query_async(&mut self.conn()).await.db()?
        };
        let candidates = self.read_facts(&keys, &ids).await?;
        Ok(rank_facts(
            &query,
            candidates.into_iter().filter(Fact::is_current),
        ))
    }

    async fn get_fact(&self, scope: &Scope, id: &FactId) -> Result<Fact> {
        let keys = self.keys.scope(scope);
        self.read_facts(&keys, &[id.to_string()])
            .await?
            .pop()
            .ok_or_else(|| MemoryError::not_found("fact", id.as_str()))
    }

    async fn list_facts(&self, scope: &Scope, query: FactQuery) -> Result<Page<Fact>> {
        let keys = self.keys.scope(scope);
        let mut pager = IdPager::new(keys.facts(), query.after(), query.page_limit());
        let mut found = Vec::new();
        while let Some(ids) = pager.next(self, found.len()).await? {
            let read = self.read_facts(&keys, &ids).await?;
            found.extend(read.into_iter().filter(|f| query.matches(f)));
        }
        Ok(page_newest_first(
            found,
            |f| (f.created_at, f.id.as_str()),
            None,
            pager.size,
        ))
    }

    async fn history(&self, scope: &Scope, key: &str) -> Result<Vec<Fact>> {
        let keys = self.keys.scope(scope);
        let ids = self.members("ZRANGE", keys.fact_versions(key)).await?;
        self.read_facts(&keys, &ids).await.map(order_history)
    }

    async fn forget(&self, scope: &Scope, id: &FactId) -> Result<bool> {
        let keys = self.keys.scope(scope);
        let removed: i64 = FORGET
            .key(keys.facts())
            .arg(keys.base())
            .arg(id.as_str())
            .arg(self.clock.now().as_millis())
            .arg(version_token())
            .invoke_async(&mut self.conn())
            .await
            .db()?;
        Ok(removed == 1)
    }

    async fn set_expiry(
        &self,
        scope: &Scope,
        ids: &[FactId],
        expires_at: Option<Timestamp>,
    ) -> Result<Vec<FactId>> {
        let keys = self.keys.scope(scope);
        let mut call = SET_EXPIRY.key(keys.facts());
        call.arg(keys.base()).arg(self.clock.now().as_millis()).arg(
            expires_at
                .map(|t| t.as_millis().to_string())
                .unwrap_or_default(),
        );
        call.arg(version_token());
        for id in ids {
            call.arg(id.as_str());
        }
        let changed: Vec<String> = call.invoke_async(&mut self.conn()).await.db()?;
        changed
            .into_iter()
            .map(|id| FactId::new(id).map_err(|e| corrupt("set_expiry reply", e)))
            .collect()
    }
}
