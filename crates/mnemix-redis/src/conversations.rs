//! Conversations and messages: a hash per conversation, a zset of messages by seq, and the
//! append script that allocates seqs, skips retried ids and prunes in one step.

use std::sync::LazyLock;

use async_trait::async_trait;
use mnemix_core::adapter::page_newest_first;
use mnemix_core::{
    AppendOptions, AppendReceipt, Conversation, ConversationId, ConversationQuery,
    ConversationStore, ConversationUpdate, LoadOptions, MemoryError, Message, MessageId,
    NewConversation, Page, Result, Scope, StoredMessage, Timestamp, WorkingMemoryKey,
};
use redis::{Script, Value};

use crate::keys::ScopeKeys;
use crate::paging::IdPager;
use crate::{corrupt, to_json, RedisResultExt, RedisStore};

static CREATE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/create_conversation.lua")));
static UPDATE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/update_conversation.lua")));
static DELETE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/delete_conversation.lua")));
static APPEND: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/append.lua")));
static LOAD: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/load.lua")));
static LOAD_SEQS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/load_seqs.lua")));
static ADVANCE_CURSOR: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/advance_cursor.lua")));

/// A conversation hash's fields as read: `doc`, `last_seq`, `updated_at`.
type ConversationFields = (Option<String>, Option<u64>, Option<i64>);

fn conversation_from(fields: ConversationFields) -> Result<Option<Conversation>> {
    let (Some(doc), Some(last_seq), Some(updated_at)) = fields else {
        return Ok(None);
    };
    let mut conversation: Conversation =
        serde_json::from_str(&doc).map_err(|e| corrupt("conversation", e))?;
    conversation.last_seq = last_seq;
    conversation.updated_at = Timestamp::from_millis(updated_at);
    Ok(Some(conversation))
}

/// A messages-zset member: `id NUL message JSON` (ids never hold NUL; JSON escapes it).
pub(crate) fn message_member(message: &Message) -> String {
    format!("{}\0{}", message.id, to_json(message))
}

pub(crate) fn message_from_member(member: &[u8], seq: u64) -> Result<StoredMessage> {
    let body = member
        .iter()
        .position(|b| *b == 0)
        .map(|nul| &member[nul + 1..])
        .ok_or_else(|| corrupt("message", "no id separator"))?;
    let message: Message = serde_json::from_slice(body).map_err(|e| corrupt("message", e))?;
    Ok(StoredMessage { seq, message })
}

/// What decides whether a retried message is the same one: role, parts and metadata as
/// canonical JSON (serde_json sorts object keys), the fields `Message::same_content` compares.
pub(crate) fn content_of(message: &Message) -> String {
    to_json(&(&message.role, &message.parts, &message.metadata))
}

/// The keys a conversation owns besides its hash, deleted with it.
pub(crate) fn conversation_children(keys: &ScopeKeys, id: &ConversationId) -> [String; 4] {
    [
        keys.messages(id),
        keys.message_ids(id),
        keys.cursors(id),
        keys.working(&WorkingMemoryKey::Conversation(id.clone())),
    ]
}

fn text(value: &Value) -> Result<String> {
    redis::from_redis_value_ref(value).map_err(|e| corrupt("script reply", e))
}

impl RedisStore {
    pub(crate) async fn read_conversation(
        &self,
        keys: &ScopeKeys,
        id: &ConversationId,
    ) -> Result<Conversation> {
        let fields: ConversationFields = redis::cmd("HMGET")
            .arg(keys.conversation(id))
            .arg(&["doc", "last_seq", "updated_at"])
            .query_async(&mut self.conn())
            .await
            .db()?;
        conversation_from(fields)?
            .ok_or_else(|| MemoryError::not_found("conversation", id.as_str()))
    }
}

impl RedisStore {
    /// The conversations of these ids, in their order; ones deleted meanwhile are skipped.
    async fn read_conversations(
        &self,
        keys: &ScopeKeys,
        ids: Vec<String>,
    ) -> Result<Vec<Conversation>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in ids {
            let id = ConversationId::new(id).map_err(|e| corrupt("conversation id", e))?;
            pipe.cmd("HMGET")
                .arg(keys.conversation(&id))
                .arg(&["doc", "last_seq", "updated_at"]);
        }
        let rows: Vec<ConversationFields> = pipe.query_async(&mut self.conn()).await.db()?;
        let mut conversations = Vec::with_capacity(rows.len());
        for row in rows {
            conversations.extend(conversation_from(row)?);
        }
        Ok(conversations)
    }
}

#[async_trait]
impl ConversationStore for RedisStore {
    async fn create_conversation(
        &self,
        scope: &Scope,
        new: NewConversation,
    ) -> Result<Conversation> {
        let conversation = new.into_conversation(scope, self.clock.now());
        self.register_scope(scope).await?;
        let keys = self.keys.scope(scope);
        let created: i64 = CREATE
            .key(keys.conversation(&conversation.id))
            .key(keys.conversations())
            .arg(conversation.id.as_str())
            .arg(conversation.created_at.as_millis())
            .arg(to_json(&conversation))
            .invoke_async(&mut self.conn())
            .await
            .db()?;
        if created == 0 {
            return Err(MemoryError::AlreadyExists {
                entity: "conversation",
                id: conversation.id.to_string(),
            });
        }
        Ok(conversation)
    }

    async fn get_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<Conversation> {
        self.read_conversation(&self.keys.scope(scope), id).await
    }

    async fn list_conversations(
        &self,
        scope: &Scope,
        query: ConversationQuery,
    ) -> Result<Page<Conversation>> {
        let keys = self.keys.scope(scope);
        let mut pager = IdPager::new(keys.conversations(), query.after(), query.page_limit());
        let mut found = Vec::new();
        while let Some(ids) = pager.next(self, found.len()).await? {
            let read = self.read_conversations(&keys, ids).await?;
            found.extend(read.into_iter().filter(|c| query.matches(c)));
        }
        Ok(page_newest_first(
            found,
            |c| (c.created_at, c.id.as_str()),
            None,
            pager.size,
        ))
    }

    async fn update_conversation(
        &self,
        scope: &Scope,
        id: &ConversationId,
        update: ConversationUpdate,
    ) -> Result<Conversation> {
        let keys = self.keys.scope(scope);
        let key = keys.conversation(id);
        // The document is replaced only if it is still the one read; appends touch other
        // fields, so they never make this retry.
        loop {
            let fields: ConversationFields = redis::cmd("HMGET")
                .arg(&key)
                .arg(&["doc", "last_seq", "updated_at"])
                .query_async(&mut self.conn())
                .await
                .db()?;
            let read = fields.0.clone();
            let mut conversation = conversation_from(fields)?
                .ok_or_else(|| MemoryError::not_found("conversation", id.as_str()))?;
            if let Some(title) = update.title.clone() {
                conversation.title = title;
            }
            if let Some(metadata) = update.metadata.clone() {
                conversation.metadata = metadata;
            }
            conversation.updated_at = self.clock.now();
            let outcome: i64 = UPDATE
                .key(&key)
                .arg(read)
                .arg(to_json(&conversation))
                .arg(conversation.updated_at.as_millis())
                .invoke_async(&mut self.conn())
                .await
                .db()?;
            match outcome {
                1 => return Ok(conversation),
                -1 => return Err(MemoryError::not_found("conversation", id.as_str())),
                // Another update came first: read again.
                _ => {}
            }
        }
    }

    async fn delete_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<bool> {
        let keys = self.keys.scope(scope);
        let mut script = DELETE.key(keys.conversation(id));
        script.key(keys.conversations());
        for child in conversation_children(&keys, id) {
            script.key(child);
        }
        let existed: i64 = script
            .arg(id.as_str())
            .arg(keys.base())
            .arg(crate::vectors::version_token())
            .invoke_async(&mut self.conn())
            .await
            .db()?;
        Ok(existed == 1)
    }

    async fn append(
        &self,
        scope: &Scope,
        id: &ConversationId,
        messages: Vec<Message>,
        options: AppendOptions,
    ) -> Result<AppendReceipt> {
        let keys = self.keys.scope(scope);
        let mut script = APPEND.key(keys.conversation(id));
        script
            .key(keys.messages(id))
            .key(keys.message_ids(id))
            .arg(self.clock.now().as_millis())
            .arg(
                options
                    .expected_last_seq
                    .map(|s| s.to_string())
                    .unwrap_or_default(),
            )
            .arg(
                options
                    .max_messages
                    .map(|m| m.to_string())
                    .unwrap_or_default(),
            );
        for message in &messages {
            script
                .arg(message.id.as_str())
                .arg(content_of(message))
                .arg(to_json(message));
        }
        let reply: Vec<Value> = script.invoke_async(&mut self.conn()).await.db()?;
        let status = reply.first().map(text).transpose()?.unwrap_or_default();
        let number = |i: usize| -> Result<u64> {
            let value = reply
                .get(i)
                .ok_or_else(|| corrupt("append reply", "too short"))?;
            text(value)?.parse().map_err(|e| corrupt("append reply", e))
        };
        match status.as_str() {
            "ok" => {}
            "not_found" => return Err(MemoryError::not_found("conversation", id.as_str())),
            "conflict" => {
                return Err(MemoryError::conflict(
                    format!(
                        "message {} is already stored with different content",
                        text(&reply[1])?
                    ),
                    None,
                ))
            }
            "invalid" => {
                return Err(MemoryError::invalid(format!(
                    "message id {} appears twice in the batch with different content",
                    text(&reply[1])?
                )))
            }
            "stale" => {
                let last = number(1)?;
                return Err(MemoryError::conflict(
                    format!(
                        "conversation is at seq {last}, not {}",
                        options.expected_last_seq.unwrap_or_default()
                    ),
                    Some(last),
                ));
            }
            other => return Err(corrupt("append reply", other)),
        }
        let mut receipt = AppendReceipt {
            last_seq: number(1)?,
            pruned: number(2)?,
            ..AppendReceipt::default()
        };
        for (i, message) in messages.into_iter().enumerate() {
            let seq = number(3 + 2 * i)?;
            let entry: (MessageId, u64) = (message.id, seq);
            if text(&reply[4 + 2 * i])? == "new" {
                receipt.appended.push(entry);
            } else {
                receipt.duplicates.push(entry);
            }
        }
        Ok(receipt)
    }

    async fn load(
        &self,
        scope: &Scope,
        id: &ConversationId,
        options: LoadOptions,
    ) -> Result<Vec<StoredMessage>> {
        let lower = options.after_seq.map_or(0, |a| a.saturating_add(1));
        let mut upper = options.before_seq.map_or(u64::MAX, |b| b.saturating_sub(1));
        let keys = self.keys.scope(scope);
        // Newest first, in one read of N without a role filter; with one, the last N of the
        // selection are not the last N rows, so read back in chunks until N match.
        let chunk: i64 = match (&options.roles, options.last) {
            (None, Some(n)) => i64::try_from(n).unwrap_or(i64::MAX),
            (Some(_), Some(n)) => i64::try_from(n.saturating_mul(2).max(64)).unwrap_or(i64::MAX),
            (_, None) => -1,
        };
        let mut window = Vec::new();
        'read: loop {
            let upper_arg = if upper == u64::MAX {
                "+inf".to_owned()
            } else {
                upper.to_string()
            };
            let reply: Vec<Value> = LOAD
                .key(keys.conversation(id))
                .key(keys.messages(id))
                .arg(lower)
                .arg(upper_arg)
                .arg(chunk)
                .invoke_async(&mut self.conn())
                .await
                .db()?;
            if reply.is_empty() {
                return Err(MemoryError::not_found("conversation", id.as_str()));
            }
            let rows = &reply[1..];
            let mut oldest = None;
            for pair in rows.chunks(2) {
                let [member, seq] = pair else {
                    return Err(corrupt("load reply", "odd length"));
                };
                let member: Vec<u8> =
                    redis::from_redis_value_ref(member).map_err(|e| corrupt("message", e))?;
                let seq: f64 = redis::from_redis_value_ref(seq).map_err(|e| corrupt("seq", e))?;
                let stored = message_from_member(&member, seq as u64)?;
                oldest = Some(stored.seq);
                if options.selects(stored.seq, stored.message.role) {
                    window.push(stored);
                }
                if options.last.is_some_and(|n| window.len() >= n) {
                    break 'read;
                }
            }
            let full = usize::try_from(chunk).is_ok_and(|c| rows.len() / 2 == c);
            match oldest {
                Some(seq) if full && seq > lower => upper = seq - 1,
                _ => break,
            }
        }
        window.reverse();
        Ok(window)
    }

    async fn load_seqs(
        &self,
        scope: &Scope,
        id: &ConversationId,
        seqs: &[u64],
    ) -> Result<Vec<StoredMessage>> {
        let keys = self.keys.scope(scope);
        let reply: Vec<Value> = LOAD_SEQS
            .key(keys.conversation(id))
            .key(keys.messages(id))
            .arg(seqs)
            .invoke_async(&mut self.conn())
            .await
            .db()?;
        if reply.is_empty() {
            return Err(MemoryError::not_found("conversation", id.as_str()));
        }
        reply[1..]
            .chunks(2)
            .map(|pair| {
                let [member, seq] = pair else {
                    return Err(corrupt("load_seqs reply", "odd length"));
                };
                let member: Vec<u8> =
                    redis::from_redis_value_ref(member).map_err(|e| corrupt("message", e))?;
                let seq: u64 = redis::from_redis_value_ref(seq).map_err(|e| corrupt("seq", e))?;
                message_from_member(&member, seq)
            })
            .collect()
    }

    async fn cursor(&self, scope: &Scope, id: &ConversationId, name: &str) -> Result<Option<u64>> {
        let keys = self.keys.scope(scope);
        let (exists, value): (bool, Option<u64>) = redis::pipe()
            .exists(keys.conversation(id))
            .hget(keys.cursors(id), name)
            .query_async(&mut self.conn())
            .await
            .db()?;
        if !exists {
            return Err(MemoryError::not_found("conversation", id.as_str()));
        }
        Ok(value)
    }

    async fn advance_cursor(
        &self,
        scope: &Scope,
        id: &ConversationId,
        name: &str,
        seq: u64,
    ) -> Result<u64> {
        let keys = self.keys.scope(scope);
        let value: i64 = ADVANCE_CURSOR
            .key(keys.conversation(id))
            .key(keys.cursors(id))
            .arg(name)
            .arg(seq)
            .invoke_async(&mut self.conn())
            .await
            .db()?;
        u64::try_from(value).map_err(|_| MemoryError::not_found("conversation", id.as_str()))
    }
}
