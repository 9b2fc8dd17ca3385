//! Working memory: a hash per document, written by a revision-checking script.

use std::sync::LazyLock;

use async_trait::async_trait;
use mnemix_core::{
    MemoryError, Result, Scope, Timestamp, WorkingMemory, WorkingMemoryFormat, WorkingMemoryKey,
    WorkingMemoryStore, WorkingMemoryUpdate,
};
use redis::Script;

use crate::keys::ScopeKeys;
use crate::{corrupt, RedisResultExt, RedisStore};

static SET: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/set_working_memory.lua")));

/// A document hash's fields as read: content, format, revision, updated_at.
pub(crate) type WorkingFields = (Option<Vec<u8>>, Option<String>, Option<u64>, Option<i64>);

pub(crate) const WORKING_FIELDS: [&str; 4] = ["content", "format", "revision", "updated_at"];

pub(crate) fn working_from(fields: WorkingFields) -> Result<Option<WorkingMemory>> {
    let (Some(content), Some(format), Some(revision), Some(updated_at)) = fields else {
        return Ok(None);
    };
    Ok(Some(WorkingMemory {
        content: String::from_utf8(content).map_err(|e| corrupt("working memory", e))?,
        format: WorkingMemoryFormat::parse(&format)
            .ok_or_else(|| corrupt("working memory format", &format))?,
        revision,
        updated_at: Timestamp::from_millis(updated_at),
    }))
}

impl RedisStore {
    /// The conversation hash a document needs (the document's own key for user documents,
    /// which need nothing): the scripts check it exists.
    fn owner_key(keys: &ScopeKeys, key: &WorkingMemoryKey) -> String {
        match key {
            WorkingMemoryKey::User => keys.working(key),
            WorkingMemoryKey::Conversation(id) => keys.conversation(id),
        }
    }

    /// Whether the conversation a document belongs to exists (user documents: always).
    async fn owner_exists(&self, keys: &ScopeKeys, key: &WorkingMemoryKey) -> Result<bool> {
        match key {
            WorkingMemoryKey::User => Ok(true),
            WorkingMemoryKey::Conversation(id) => redis::cmd("EXISTS")
                .arg(keys.conversation(id))
                .query_async(&mut self.conn())
                .await
                .db(),
        }
    }
}

fn missing(key: &WorkingMemoryKey) -> MemoryError {
    match key {
        WorkingMemoryKey::Conversation(id) => MemoryError::not_found("conversation", id.as_str()),
        WorkingMemoryKey::User => MemoryError::not_found("working memory", "user"),
    }
}

#[async_trait]
impl WorkingMemoryStore for RedisStore {
    async fn get_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
    ) -> Result<Option<WorkingMemory>> {
        let keys = self.keys.scope(scope);
        let fields: WorkingFields = redis::cmd("HMGET")
            .arg(keys.working(key))
            .arg(&WORKING_FIELDS)
            .query_async(&mut self.conn())
            .await
            .db()?;
        let document = working_from(fields)?;
        // A document outlives no conversation (they are deleted together), so only an absent
        // one needs the owner checked.
        if document.is_none() && !self.owner_exists(&keys, key).await? {
            return Err(missing(key));
        }
        Ok(document)
    }

    async fn set_working_memory(
        &self,
        scope: &Scope,
        key: &WorkingMemoryKey,
        update: WorkingMemoryUpdate,
    ) -> Result<WorkingMemory> {
        self.register_scope(scope).await?;
        let keys = self.keys.scope(scope);
        let now = self.clock.now();
        let reply: Vec<String> = SET
            .key(keys.working(key))
            .key(Self::owner_key(&keys, key))
            .arg(update.content.as_bytes())
            .arg(update.format.as_str())
            .arg(now.as_millis())
            .arg(
                update
                    .expected_revision
                    .map(|r| r.to_string())
                    .unwrap_or_default(),
            )
            .invoke_async(&mut self.conn())
            .await
            .db()?;
        let value = reply.get(1).and_then(|v| v.parse::<u64>().ok());
        match (reply.first().map_or("", String::as_str), value) {
            ("ok", Some(revision)) => Ok(WorkingMemory {
                content: update.content,
                format: update.format,
                revision,
                updated_at: now,
            }),
            ("conflict", Some(current)) => Err(update
                .check_revision(current)
                .expect_err("the script saw a different revision")),
            ("not_found", _) => Err(missing(key)),
            (other, _) => Err(corrupt("working memory reply", other)),
        }
    }

    async fn clear_working_memory(&self, scope: &Scope, key: &WorkingMemoryKey) -> Result<bool> {
        let keys = self.keys.scope(scope);
        let removed: i64 = redis::cmd("DEL")
            .arg(keys.working(key))
            .query_async(&mut self.conn())
            .await
            .db()?;
        if removed == 0 && !self.owner_exists(&keys, key).await? {
            return Err(missing(key));
        }
        Ok(removed == 1)
    }
}
