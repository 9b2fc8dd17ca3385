//! Conversations, messages and cursors.

use std::collections::HashMap;

use async_trait::async_trait;
use memory_core::page::page_newest_first;
use memory_core::{
    plan_append, AppendOptions, AppendPlan, AppendReceipt, Conversation, ConversationId,
    ConversationQuery, ConversationStore, ConversationUpdate, LoadOptions, MemoryError, Message,
    MessageId, NewConversation, Page, Result, Scope, StoredMessage, Timestamp,
};
use memory_sqlite_sql as sql;
use sqlx::sqlite::{SqliteConnection, SqliteRow};
use sqlx::Row;

use crate::db::{
    corrupt, metadata_from, millis, seq_from_db, seq_to_db, subject_of, to_json, DbResult,
};
use crate::writer::GroupTx;
use crate::SqliteStore;

pub(crate) fn conversation_from(scope: &Scope, row: &SqliteRow) -> Result<Conversation> {
    let id: String = row.get("id");
    Ok(Conversation {
        id: ConversationId::new(id).map_err(|e| corrupt("conversation id", e))?,
        scope: scope.clone(),
        agent: row.get("agent"),
        title: row.get("title"),
        metadata: metadata_from(row.get("metadata"))?,
        resource_slug: row.get("resource_slug"),
        record_id: row.get("record_id"),
        created_at: Timestamp::from_millis(row.get("created_at")),
        updated_at: Timestamp::from_millis(row.get("updated_at")),
        last_seq: seq_from_db(row.get("last_seq")),
    })
}

pub(crate) fn message_from(body: &str) -> Result<Message> {
    serde_json::from_str(body).map_err(|e| corrupt("message", e))
}

/// The conversation's row (pk and last seq), or `NotFound` in this scope.
pub(crate) async fn conversation_pk(
    conn: &mut SqliteConnection,
    scope: &Scope,
    id: &ConversationId,
) -> Result<(i64, u64)> {
    let row: Option<(i64, i64)> = sqlx::query_as(sql::conversations::PK_AND_LAST_SEQ)
        .bind(scope.namespace().as_str())
        .bind(subject_of(scope))
        .bind(id.as_str())
        .fetch_optional(conn)
        .await
        .db()?;
    row.map(|(pk, last)| (pk, seq_from_db(last)))
        .ok_or_else(|| MemoryError::not_found("conversation", id.as_str()))
}

async fn fetch_conversation(
    conn: &mut SqliteConnection,
    scope: &Scope,
    id: &ConversationId,
) -> Result<Conversation> {
    let row = sqlx::query(sql::conversations::BY_ID)
        .bind(scope.namespace().as_str())
        .bind(subject_of(scope))
        .bind(id.as_str())
        .fetch_optional(conn)
        .await
        .db()?
        .ok_or_else(|| MemoryError::not_found("conversation", id.as_str()))?;
    conversation_from(scope, &row)
}

/// The appends' read: for each `[namespace, subject, conversation id, [message ids]]` whose
/// conversation exists, a row (its index, pk, last seq) and one more per message id it holds
/// (`CROSS JOIN` keeps SQLite's planner to this order: each id is one lookup in `messages_by_id`
/// however long the thread, where joining on the conversation first scans its messages).
macro_rules! append_probe {
    () => {
        "SELECT r.key, c.pk, c.last_seq, NULL, NULL FROM json_each(?1) r
         CROSS JOIN conversations c ON c.namespace = r.value ->> 0
                                   AND c.subject = r.value ->> 1 AND c.id = r.value ->> 2
         UNION ALL
         SELECT r.key, c.pk, c.last_seq, m.seq, m.body FROM json_each(?1) r
         CROSS JOIN conversations c ON c.namespace = r.value ->> 0
                                   AND c.subject = r.value ->> 1 AND c.id = r.value ->> 2
         CROSS JOIN json_each(r.value, '$[3]') i
         CROSS JOIN messages m ON m.conversation = c.pk AND m.id = i.value"
    };
}

/// The appends' write: every new message from one JSON array of `[pk, seq, id, role, body]`,
/// every conversation's new last seq from one of `[pk, last seq, updated at]`.
macro_rules! append_write {
    () => {
        "INSERT INTO messages (conversation, seq, id, role, body)
         SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4 FROM json_each(?1);
         UPDATE conversations SET last_seq = u.value ->> 1, updated_at = u.value ->> 2
         FROM json_each(?2) u WHERE conversations.pk = u.value ->> 0"
    };
}

/// A row of [`append_probe!`]: request index, conversation pk and last seq, and a stored
/// message's seq and body.
type ProbeRow = (i64, i64, i64, Option<i64>, Option<String>);

/// An append waiting for the writer, with its own clock reading.
pub(crate) struct AppendRequest {
    pub(crate) scope: Scope,
    pub(crate) id: ConversationId,
    pub(crate) messages: Vec<Message>,
    pub(crate) options: AppendOptions,
    pub(crate) now: Timestamp,
}

/// The appends of one write group in two statement strings whatever their number: one read
/// (every conversation and those of each batch's ids it holds) and one write (every new
/// message, every conversation's new last seq). Each append is decided on its own, in queue
/// order — two appends to one conversation see each other as they would one after another —
/// and answers with its receipt or its own error (not found, conflict, invalid input), decided
/// before anything is written. The outer error is a storage failure: nothing of the group
/// may be kept.
pub(crate) async fn append_group(
    tx: &mut GroupTx,
    requests: Vec<AppendRequest>,
) -> Result<Vec<Result<AppendReceipt>>> {
    // [namespace, subject, conversation id, [message ids]], the request's index its key
    let asked: Vec<(&str, &str, &str, Vec<&str>)> = requests
        .iter()
        .map(|r| {
            (
                r.scope.namespace().as_str(),
                subject_of(&r.scope),
                r.id.as_str(),
                r.messages.iter().map(|m| m.id.as_str()).collect(),
            )
        })
        .collect();
    let asked = to_json(&asked);
    let probe = tx.first(
        append_probe!(),
        concat!("BEGIN IMMEDIATE;\n", append_probe!()),
    );
    let rows: Vec<ProbeRow> = sqlx::query_as(probe)
        .bind(asked)
        .fetch_all(tx.conn())
        .await
        .db()?;
    // Per request: its conversation (pk, last seq); per conversation: the messages known so
    // far, stored or appended earlier in this group.
    let mut found: HashMap<usize, (i64, u64)> = HashMap::new();
    let mut known: HashMap<i64, HashMap<MessageId, (u64, Message)>> = HashMap::new();
    for (index, pk, last_seq, seq, body) in rows {
        let index = usize::try_from(index).map_err(|e| corrupt("append index", e))?;
        found.insert(index, (pk, seq_from_db(last_seq)));
        if let (Some(seq), Some(body)) = (seq, body) {
            let message = message_from(&body)?;
            known
                .entry(pk)
                .or_default()
                .insert(message.id.clone(), (seq_from_db(seq), message));
        }
    }
    let mut last_seqs: HashMap<i64, (u64, Timestamp)> = HashMap::new();
    // [pk, seq, id, role, body] of every new message; the body is the message's JSON carried
    // as a JSON string, so it is stored byte for byte.
    let mut fresh_rows: Vec<(i64, u64, String, &'static str, String)> = Vec::new();
    let mut prunes: Vec<(usize, i64, u64)> = Vec::new();
    let mut outcomes = Vec::with_capacity(requests.len());
    for (i, request) in requests.into_iter().enumerate() {
        let Some(&(pk, stored_last)) = found.get(&i) else {
            outcomes.push(Err(MemoryError::not_found(
                "conversation",
                request.id.as_str(),
            )));
            continue;
        };
        let last_seq = last_seqs.get(&pk).map_or(stored_last, |(seq, _)| *seq);
        let messages = known.entry(pk).or_default();
        let plan = plan_append(last_seq, request.messages, &request.options, |id| {
            messages.get(id).map(|(seq, m)| (*seq, m))
        });
        let AppendPlan { fresh, receipt } = match plan {
            Ok(plan) => plan,
            Err(e) => {
                outcomes.push(Err(e));
                continue;
            }
        };
        if !fresh.is_empty() {
            last_seqs.insert(pk, (receipt.last_seq, request.now));
            if let Some(cutoff) = request
                .options
                .max_messages
                .and_then(|max| receipt.last_seq.checked_sub(max))
            {
                prunes.push((i, pk, cutoff));
            }
        }
        for StoredMessage { seq, message } in fresh {
            fresh_rows.push((
                pk,
                seq,
                message.id.to_string(),
                message.role.as_str(),
                to_json(&message),
            ));
            messages.insert(message.id.clone(), (seq, message));
        }
        outcomes.push(Ok(receipt));
    }
    if fresh_rows.is_empty() {
        return Ok(outcomes);
    }
    let conversations: Vec<(i64, i64, i64)> = last_seqs
        .iter()
        .map(|(pk, (seq, now))| (*pk, seq_to_db(*seq), millis(*now)))
        .collect();
    let write = if prunes.is_empty() {
        tx.last(append_write!(), concat!(append_write!(), ";\nCOMMIT"))
    } else {
        append_write!()
    };
    sqlx::query(write)
        .bind(to_json(&fresh_rows))
        .bind(to_json(&conversations))
        .execute(tx.conn())
        .await
        .db()?;
    // Seqs are contiguous (nothing deletes single messages), so with a storage limit the
    // oldest beyond it are exactly those at or below last_seq - max. Not carrying the COMMIT:
    // SQLite's change count outlives the DELETE, and sqlx would add it again for the COMMIT.
    for (i, pk, cutoff) in prunes {
        let pruned = sqlx::query(sql::conversations::DELETE_MESSAGES_THROUGH)
            .bind(pk)
            .bind(seq_to_db(cutoff))
            .execute(tx.conn())
            .await
            .db()?
            .rows_affected();
        if let Some(Ok(receipt)) = outcomes.get_mut(i) {
            receipt.pruned = pruned;
        }
    }
    Ok(outcomes)
}

/// A read's messages as one JSON value, `[[seq, body], …]` in no particular order (NULL when
/// there are none), beside whether the conversation exists, so one statement (one snapshot,
/// one hop) answers both. sqlx hands a statement's rows over from its worker thread one at a
/// time, which costs more than SQLite building the one value; the bodies are the JSON this store
/// wrote, spliced in as they are.
macro_rules! messages_read {
    ($which:literal) => {
        concat!(
            "SELECT EXISTS (SELECT 1 FROM conversations
                            WHERE namespace = ?1 AND subject = ?2 AND id = ?3),
                    (SELECT '[' || group_concat('[' || seq || ',' || body || ']', ',') || ']'
                     FROM (SELECT seq, body FROM messages
                           WHERE conversation = (SELECT pk FROM conversations
                                                 WHERE namespace = ?1 AND subject = ?2
                                                   AND id = ?3) ",
            $which,
            "))"
        )
    };
}

/// The messages of a [`messages_read!`] in seq order, or `NotFound` when the conversation is not
/// there.
fn messages_of_conversation(
    (exists, messages): (bool, Option<String>),
    id: &ConversationId,
) -> Result<Vec<StoredMessage>> {
    if !exists {
        return Err(MemoryError::not_found("conversation", id.as_str()));
    }
    let Some(messages) = messages else {
        return Ok(Vec::new());
    };
    let mut messages: Vec<(i64, Message)> =
        serde_json::from_str(&messages).map_err(|e| corrupt("message", e))?;
    messages.sort_unstable_by_key(|(seq, _)| *seq);
    Ok(messages
        .into_iter()
        .map(|(seq, message)| StoredMessage {
            seq: seq_from_db(seq),
            message,
        })
        .collect())
}

#[async_trait]
impl ConversationStore for SqliteStore {
    async fn create_conversation(
        &self,
        scope: &Scope,
        new: NewConversation,
    ) -> Result<Conversation> {
        let now = self.clock.now();
        let conversation = new.into_conversation(scope, now);
        let mut tx = self.write().await?;
        let inserted = sqlx::query(sql::conversations::INSERT)
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .bind(conversation.id.as_str())
            .bind(conversation.agent.as_deref())
            .bind(conversation.title.as_deref())
            .bind(to_json(&conversation.metadata))
            .bind(conversation.resource_slug.as_deref())
            .bind(conversation.record_id.as_deref())
            .bind(millis(now))
            .execute(&mut *tx)
            .await
            .db()?;
        if inserted.rows_affected() == 0 {
            return Err(MemoryError::AlreadyExists {
                entity: "conversation",
                id: conversation.id.to_string(),
            });
        }
        tx.commit().await.db()?;
        Ok(conversation)
    }

    async fn get_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<Conversation> {
        let mut conn = self.reader.acquire().await?;
        fetch_conversation(&mut conn, scope, id).await
    }

    async fn list_conversations(
        &self,
        scope: &Scope,
        query: ConversationQuery,
    ) -> Result<Page<Conversation>> {
        let limit = query.page_limit();
        let cursor = query.after();
        // Two statements rather than `?cursor IS NULL OR …`, so both seek the index.
        let statement = sql::conversations::list_page(cursor.is_some());
        let rows = sqlx::query(statement)
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .bind(query.agent.as_deref())
            .bind(query.resource_slug.as_deref())
            .bind(query.record_id.as_deref())
            .bind(cursor.as_ref().map(|c| c.created_at.as_millis()))
            .bind(cursor.as_ref().map(|c| c.id.as_str()))
            .bind(i64::try_from(limit + 1).unwrap_or(i64::MAX))
            .fetch_all(&mut *self.reader.acquire().await?)
            .await
            .db()?;
        let items = rows
            .iter()
            .map(|row| conversation_from(scope, row))
            .collect::<Result<Vec<_>>>()?;
        Ok(page_newest_first(
            items,
            |c| (c.created_at, c.id.as_str()),
            None,
            limit,
        ))
    }

    async fn update_conversation(
        &self,
        scope: &Scope,
        id: &ConversationId,
        update: ConversationUpdate,
    ) -> Result<Conversation> {
        let now = self.clock.now();
        let mut tx = self.write().await?;
        let mut conversation = fetch_conversation(&mut tx, scope, id).await?;
        if let Some(title) = update.title {
            conversation.title = title;
        }
        if let Some(metadata) = update.metadata {
            conversation.metadata = metadata;
        }
        conversation.updated_at = now;
        sqlx::query(sql::conversations::UPDATE_TITLE_AND_METADATA)
            .bind(conversation.title.as_deref())
            .bind(to_json(&conversation.metadata))
            .bind(millis(now))
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .bind(id.as_str())
            .execute(&mut *tx)
            .await
            .db()?;
        tx.commit().await.db()?;
        Ok(conversation)
    }

    async fn delete_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<bool> {
        let mut tx = self.write().await?;
        let pk = match conversation_pk(&mut tx, scope, id).await {
            Ok((pk, _)) => pk,
            Err(e) if e.is_not_found() => return Ok(false),
            Err(e) => return Err(e),
        };
        // Messages and cursors go by foreign-key cascade; working memory and vectors by hand.
        sqlx::query(sql::documents::DELETE_WORKING_MEMORY)
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .bind(pk)
            .execute(&mut *tx)
            .await
            .db()?;
        crate::vectors::delete_conversation_vectors(&mut tx, scope, id).await?;
        sqlx::query(sql::conversations::DELETE_BY_PK)
            .bind(pk)
            .execute(&mut *tx)
            .await
            .db()?;
        tx.commit().await.db()?;
        Ok(true)
    }

    async fn append(
        &self,
        scope: &Scope,
        id: &ConversationId,
        messages: Vec<Message>,
        options: AppendOptions,
    ) -> Result<AppendReceipt> {
        self.writer
            .append(AppendRequest {
                scope: scope.clone(),
                id: id.clone(),
                messages,
                options,
                now: self.clock.now(),
            })
            .await
    }

    async fn load(
        &self,
        scope: &Scope,
        id: &ConversationId,
        options: LoadOptions,
    ) -> Result<Vec<StoredMessage>> {
        let roles = options
            .roles
            .as_ref()
            .map(|roles| to_json(&roles.iter().map(|r| r.as_str()).collect::<Vec<_>>()));
        // `LIMIT (SELECT ?7)`, not `LIMIT ?7`: see memory-sqlite-sql's crate docs.
        let read = sqlx::query_as(messages_read!(
            "AND seq > ?4 AND seq < ?5
             AND (?6 IS NULL OR role IN (SELECT value FROM json_each(?6)))
             ORDER BY seq DESC LIMIT (SELECT ?7)"
        ))
        .bind(scope.namespace().as_str())
        .bind(subject_of(scope))
        .bind(id.as_str())
        .bind(options.after_seq.map_or(0, seq_to_db))
        .bind(options.before_seq.map_or(i64::MAX, seq_to_db))
        .bind(roles)
        .bind(
            options
                .last
                .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX)),
        )
        .fetch_one(&mut *self.reader.acquire().await?)
        .await
        .db()?;
        messages_of_conversation(read, id)
    }

    async fn load_seqs(
        &self,
        scope: &Scope,
        id: &ConversationId,
        seqs: &[u64],
    ) -> Result<Vec<StoredMessage>> {
        // A seq past i64::MAX was never stored.
        let wanted = to_json(
            &seqs
                .iter()
                .filter_map(|&s| i64::try_from(s).ok())
                .collect::<Vec<_>>(),
        );
        let read = sqlx::query_as(messages_read!(
            "AND seq IN (SELECT value FROM json_each(?4))"
        ))
        .bind(scope.namespace().as_str())
        .bind(subject_of(scope))
        .bind(id.as_str())
        .bind(wanted)
        .fetch_one(&mut *self.reader.acquire().await?)
        .await
        .db()?;
        messages_of_conversation(read, id)
    }

    async fn cursor(&self, scope: &Scope, id: &ConversationId, name: &str) -> Result<Option<u64>> {
        let found: Option<Option<i64>> = sqlx::query_scalar(sql::conversations::CURSOR)
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .bind(id.as_str())
            .bind(name)
            .fetch_optional(&mut *self.reader.acquire().await?)
            .await
            .db()?;
        let value = found.ok_or_else(|| MemoryError::not_found("conversation", id.as_str()))?;
        Ok(value.map(seq_from_db))
    }

    async fn advance_cursor(
        &self,
        scope: &Scope,
        id: &ConversationId,
        name: &str,
        seq: u64,
    ) -> Result<u64> {
        let mut tx = self.write().await?;
        let (pk, _) = conversation_pk(&mut tx, scope, id).await?;
        let value: i64 = sqlx::query_scalar(sql::conversations::ADVANCE_CURSOR)
            .bind(pk)
            .bind(name)
            .bind(seq_to_db(seq))
            .fetch_one(&mut *tx)
            .await
            .db()?;
        tx.commit().await.db()?;
        Ok(seq_from_db(value))
    }
}
