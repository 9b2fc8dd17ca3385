//! Conversations, messages and cursors.

use async_trait::async_trait;
use mnemix_core::{
    AppendOptions, AppendReceipt, Conversation, ConversationId, ConversationQuery,
    ConversationStore, ConversationUpdate, LoadOptions, MemoryError, Message, NewConversation,
    Page, Result, Scope, StoredMessage,
};
use mnemix_sqlite_sql as sql;
use mnemix_sqlite_sql::conversations::{AppendGroup, AppendRequest, ProbeRow};
use mnemix_sqlite_sql::family::conversations as family;
use sqlx::sqlite::SqliteConnection;

use crate::db::{corrupt, seq_from_db, seq_to_db, subject_of, to_json, DbResult, Sqlx};
use crate::writer::GroupTx;
use crate::SqliteStore;

pub(crate) fn message_from(body: &str) -> Result<Message> {
    serde_json::from_str(body).map_err(|e| corrupt("message", e))
}

/// The conversation's row (pk and last seq), or `NotFound` in this scope.
pub(crate) async fn conversation_pk(
    conn: &mut SqliteConnection,
    scope: &Scope,
    id: &ConversationId,
) -> Result<(i64, u64)> {
    mnemix_sqlite_sql::family::conversation_pk(&mut Sqlx(conn), scope, id).await
}

/// A row of the appends' read: request index, conversation pk and last seq, and a stored
/// message's seq and body.
type ProbeColumns = (i64, i64, i64, Option<i64>, Option<String>);

/// The appends of one write group in two statement strings whatever their number (see
/// [`AppendGroup`]): `BEGIN IMMEDIATE` rides in the read when the group's transaction is not
/// open yet, `COMMIT` in the write when nothing follows it. The outer error is a storage
/// failure: nothing of the group may be kept.
pub(crate) async fn append_group(
    tx: &mut GroupTx,
    requests: Vec<AppendRequest>,
) -> Result<Vec<Result<AppendReceipt>>> {
    let probe = tx.first(
        sql::append_probe!(),
        concat!("BEGIN IMMEDIATE;\n", sql::append_probe!()),
    );
    let rows: Vec<ProbeColumns> = sqlx::query_as(probe)
        .bind(AppendGroup::asked(&requests))
        .fetch_all(tx.conn())
        .await
        .db()?;
    let probe = rows
        .into_iter()
        .map(|(index, pk, last_seq, seq, body)| {
            let stored = match (seq, body) {
                (Some(seq), Some(body)) => Some((seq_from_db(seq), message_from(&body)?)),
                _ => None,
            };
            Ok(ProbeRow {
                index,
                pk,
                last_seq: seq_from_db(last_seq),
                stored,
            })
        })
        .collect::<Result<_>>()?;
    let mut group = AppendGroup::plan(requests, probe);
    let Some((messages, conversations)) = group.write.take() else {
        return Ok(group.outcomes);
    };
    let write = if group.prunes.is_empty() {
        tx.last(
            sql::append_write!(),
            concat!(sql::append_write!(), ";\nCOMMIT"),
        )
    } else {
        sql::append_write!()
    };
    sqlx::query(write)
        .bind(messages)
        .bind(conversations)
        .execute(tx.conn())
        .await
        .db()?;
    // Not carrying the COMMIT: SQLite's change count outlives the DELETE, and sqlx would add
    // it again for the COMMIT.
    for (i, pk, cutoff) in std::mem::take(&mut group.prunes) {
        let pruned = sqlx::query(sql::conversations::DELETE_MESSAGES_THROUGH)
            .bind(pk)
            .bind(seq_to_db(cutoff))
            .execute(tx.conn())
            .await
            .db()?
            .rows_affected();
        group.pruned(i, pruned);
    }
    Ok(group.outcomes)
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
        let conversation = new.into_conversation(scope, self.common.clock.now());
        let mut tx = self.write().await?;
        family::create_conversation(&mut tx, &conversation).await?;
        tx.commit().await.db()?;
        Ok(conversation)
    }

    async fn get_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<Conversation> {
        let mut conn = self.reader.acquire().await?;
        family::get_conversation(&mut Sqlx(&mut conn), scope, id).await
    }

    async fn list_conversations(
        &self,
        scope: &Scope,
        query: ConversationQuery,
    ) -> Result<Page<Conversation>> {
        let mut conn = self.reader.acquire().await?;
        family::list_conversations(&mut Sqlx(&mut conn), scope, query).await
    }

    async fn update_conversation(
        &self,
        scope: &Scope,
        id: &ConversationId,
        update: ConversationUpdate,
    ) -> Result<Conversation> {
        let now = self.common.clock.now();
        let mut tx = self.write().await?;
        let conversation = family::update_conversation(&mut tx, scope, id, update, now).await?;
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
        crate::vectors::delete_conversation_vectors(&mut tx, scope, id).await?;
        family::delete_conversation(&mut tx, scope, pk).await?;
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
        let request = AppendRequest::new(scope, id, messages, options, self.common.clock.now());
        self.writer.append(request).await
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
        // `LIMIT (SELECT ?7)`, not `LIMIT ?7`: see mnemix-sqlite-sql's crate docs.
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
        let mut conn = self.reader.acquire().await?;
        family::cursor(&mut Sqlx(&mut conn), scope, id, name).await
    }

    async fn advance_cursor(
        &self,
        scope: &Scope,
        id: &ConversationId,
        name: &str,
        seq: u64,
    ) -> Result<u64> {
        let mut tx = self.write().await?;
        let value = family::advance_cursor(&mut tx, scope, id, name, seq).await?;
        tx.commit().await.db()?;
        Ok(value)
    }
}
