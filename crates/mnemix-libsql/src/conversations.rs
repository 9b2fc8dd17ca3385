//! Conversations, messages and cursors.

use std::sync::Arc;

use async_trait::async_trait;
use libsql::{TransactionBehavior, Value};
use mnemix_core::{
    AppendOptions, AppendReceipt, Conversation, ConversationId, ConversationQuery,
    ConversationStore, ConversationUpdate, LoadOptions, MemoryError, Message, NewConversation,
    Page, Result, Scope, StoredMessage,
};
use mnemix_sqlite_sql as sql;
use mnemix_sqlite_sql::conversations::{AppendGroup, AppendRequest, ProbeRow};
use mnemix_sqlite_sql::family::conversations as family;
use mnemix_sqlite_sql::group::group_error;
use tokio::sync::{oneshot, OwnedMutexGuard};

use crate::db::{
    corrupt, execute, row, rows, seq_from_db, seq_to_db, subject_of, to_json, Conn, DbResult,
    RowExt, BACKEND,
};
use crate::LibsqlStore;

pub(crate) fn message_from(body: &str) -> Result<Message> {
    serde_json::from_str(body).map_err(|e| corrupt("message", e))
}

/// The conversation's row (pk and last seq), or `NotFound` in this scope.
pub(crate) async fn conversation_pk(
    conn: &Conn,
    scope: &Scope,
    id: &ConversationId,
) -> Result<(i64, u64)> {
    let found = row(
        conn,
        sql::conversations::PK_AND_LAST_SEQ,
        (scope.namespace().as_str(), subject_of(scope), id.as_str()),
    )
    .await?
    .ok_or_else(|| MemoryError::not_found("conversation", id.as_str()))?;
    Ok((found.int(0)?, seq_from_db(found.int(1)?)))
}

#[async_trait]
impl ConversationStore for LibsqlStore {
    async fn create_conversation(
        &self,
        scope: &Scope,
        new: NewConversation,
    ) -> Result<Conversation> {
        let conversation = new.into_conversation(scope, self.common.clock.now());
        let mut tx = self.write().await?;
        family::create_conversation(&mut *tx, &conversation).await?;
        tx.commit().await?;
        Ok(conversation)
    }

    async fn get_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<Conversation> {
        let mut tx = self.read().await?;
        family::get_conversation(&mut *tx, scope, id).await
    }

    async fn list_conversations(
        &self,
        scope: &Scope,
        query: ConversationQuery,
    ) -> Result<Page<Conversation>> {
        let mut tx = self.read().await?;
        family::list_conversations(&mut *tx, scope, query).await
    }

    async fn update_conversation(
        &self,
        scope: &Scope,
        id: &ConversationId,
        update: ConversationUpdate,
    ) -> Result<Conversation> {
        let now = self.common.clock.now();
        let mut tx = self.write().await?;
        let conversation = family::update_conversation(&mut *tx, scope, id, update, now).await?;
        tx.commit().await?;
        Ok(conversation)
    }

    async fn delete_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<bool> {
        let mut tx = self.write().await?;
        let pk = match conversation_pk(&tx, scope, id).await {
            Ok((pk, _)) => pk,
            Err(e) if e.is_not_found() => return Ok(false),
            Err(e) => return Err(e),
        };
        crate::vectors::delete_conversation_vectors(&tx, scope, id).await?;
        family::delete_conversation(&mut *tx, scope, pk).await?;
        tx.commit().await?;
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
        self.append_in_group(request).await
    }

    async fn load(
        &self,
        scope: &Scope,
        id: &ConversationId,
        options: LoadOptions,
    ) -> Result<Vec<StoredMessage>> {
        let tx = self.read().await?;
        let (pk, _) = conversation_pk(&tx, scope, id).await?;
        let roles = options.roles.as_ref().map_or(Value::Null, |roles| {
            Value::Text(to_json(
                &roles.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
            ))
        });
        let found = rows(
            &tx,
            "SELECT seq, body FROM messages
             WHERE conversation = ?1 AND seq > ?2 AND seq < ?3
               AND (?4 IS NULL OR role IN (SELECT value FROM json_each(?4)))
             ORDER BY seq DESC LIMIT (SELECT ?5)",
            (
                pk,
                options.after_seq.map_or(0, seq_to_db),
                options.before_seq.map_or(i64::MAX, seq_to_db),
                roles,
                options
                    .last
                    .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX)),
            ),
        )
        .await?;
        tx.commit().await?;
        let mut window = found
            .iter()
            .map(|row| {
                Ok(StoredMessage {
                    seq: seq_from_db(row.int(0)?),
                    message: message_from(&row.string(1)?)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        window.reverse();
        Ok(window)
    }

    async fn load_seqs(
        &self,
        scope: &Scope,
        id: &ConversationId,
        seqs: &[u64],
    ) -> Result<Vec<StoredMessage>> {
        let tx = self.read().await?;
        let (pk, _) = conversation_pk(&tx, scope, id).await?;
        // A seq past i64::MAX was never stored.
        let wanted = to_json(
            &seqs
                .iter()
                .filter_map(|&s| i64::try_from(s).ok())
                .collect::<Vec<_>>(),
        );
        let found = rows(
            &tx,
            "SELECT seq, body FROM messages
             WHERE conversation = ?1 AND seq IN (SELECT value FROM json_each(?2))
             ORDER BY seq",
            (pk, wanted),
        )
        .await?;
        tx.commit().await?;
        found
            .iter()
            .map(|row| {
                Ok(StoredMessage {
                    seq: seq_from_db(row.int(0)?),
                    message: message_from(&row.string(1)?)?,
                })
            })
            .collect()
    }

    async fn cursor(&self, scope: &Scope, id: &ConversationId, name: &str) -> Result<Option<u64>> {
        let mut tx = self.read().await?;
        family::cursor(&mut *tx, scope, id, name).await
    }

    async fn advance_cursor(
        &self,
        scope: &Scope,
        id: &ConversationId,
        name: &str,
        seq: u64,
    ) -> Result<u64> {
        let mut tx = self.write().await?;
        let value = family::advance_cursor(&mut *tx, scope, id, name, seq).await?;
        tx.commit().await?;
        Ok(value)
    }
}

/// An append waiting for the writer connection, and where its answer goes.
pub(crate) type QueuedAppend = (AppendRequest, oneshot::Sender<Result<AppendReceipt>>);

impl LibsqlStore {
    /// Group commit ([`WriteQueue`](mnemix_sqlite_sql::group::WriteQueue)): the appends of
    /// this process that arrive while another write holds the writer connection share one
    /// transaction, written together ([`AppendGroup`]), each answering with its own receipt or
    /// its own error.
    ///
    /// A caller that stops waiting (a dropped future) must not leave the others' appends half
    /// done. An embedded database runs each statement on the calling thread, so the group's
    /// future ends in the poll that starts it and cannot be dropped halfway: it runs here,
    /// without a task's hop (a sizeable part of a local append: BENCHMARKS.md, W1). A remote
    /// database waits
    /// on the network, so its group runs in a task of its own.
    async fn append_in_group(&self, request: AppendRequest) -> Result<AppendReceipt> {
        let (reply, answer) = oneshot::channel();
        let lead = |writer, group: Vec<QueuedAppend>| async move {
            // An empty group: another caller took ours, and its answer is on the way.
            if group.is_empty() {
                return;
            }
            let group = run_append_group(writer, group);
            if self.config.is_remote() {
                tokio::spawn(group);
            } else {
                group.await;
            }
        };
        self.appends
            .submit(
                BACKEND,
                (request, reply),
                answer,
                || Arc::clone(&self.writer).lock_owned(),
                lead,
            )
            .await
    }
}

/// One group of appends in one `BEGIN IMMEDIATE` transaction, then the answers: each append's
/// own outcome after the commit, or, when the transaction fails, the failure for all (nothing of
/// theirs was kept).
async fn run_append_group(writer: OwnedMutexGuard<Conn>, group: Vec<QueuedAppend>) {
    let (requests, replies): (Vec<_>, Vec<_>) = group.into_iter().unzip();
    match append_group(&writer, requests).await {
        Ok(outcomes) => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                let _ = reply.send(outcome);
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(group_error(BACKEND, &e)));
            }
        }
    }
}

async fn append_group(
    conn: &Conn,
    requests: Vec<AppendRequest>,
) -> Result<Vec<Result<AppendReceipt>>> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .await
        .db()?;
    let probe = rows(
        conn,
        sql::conversations::APPEND_PROBE,
        [AppendGroup::asked(&requests)],
    )
    .await?
    .iter()
    .map(|row| {
        let stored = match (row.opt_int(3)?, row.opt_string(4)?) {
            (Some(seq), Some(body)) => Some((seq_from_db(seq), message_from(&body)?)),
            _ => None,
        };
        Ok(ProbeRow {
            index: row.int(0)?,
            pk: row.int(1)?,
            last_seq: seq_from_db(row.int(2)?),
            stored,
        })
    })
    .collect::<Result<_>>()?;
    let mut group = AppendGroup::plan(requests, probe);
    let Some((messages, conversations)) = group.write.take() else {
        return Ok(group.outcomes);
    };
    execute(conn, sql::conversations::APPEND_INSERT, [messages]).await?;
    execute(
        conn,
        sql::conversations::APPEND_UPDATE,
        (Value::Null, conversations),
    )
    .await?;
    for (i, pk, cutoff) in std::mem::take(&mut group.prunes) {
        let pruned = execute(
            conn,
            sql::conversations::DELETE_MESSAGES_THROUGH,
            (pk, seq_to_db(cutoff)),
        )
        .await?;
        group.pruned(i, pruned);
    }
    tx.commit().await.db()?;
    Ok(group.outcomes)
}
