//! Conversations, messages and cursors.

use std::collections::HashMap;

use async_trait::async_trait;
use libsql::{Connection, Value};
use memory_core::page::page_newest_first;
use memory_core::{
    plan_append, AppendOptions, AppendPlan, AppendReceipt, Conversation, ConversationId,
    ConversationQuery, ConversationStore, ConversationUpdate, LoadOptions, MemoryError, Message,
    MessageId, NewConversation, Page, Result, Scope, StoredMessage, Timestamp,
};
use memory_sqlite_sql as sql;

use crate::db::{
    corrupt, count_to_db, execute, metadata_from, millis, opt_text, row, rows, seq_from_db,
    seq_to_db, subject_of, to_json, DbRow, RowExt,
};
use crate::LibsqlStore;

pub(crate) fn conversation_from(scope: &Scope, row: &DbRow) -> Result<Conversation> {
    Ok(Conversation {
        id: ConversationId::new(row.string(1)?).map_err(|e| corrupt("conversation id", e))?,
        scope: scope.clone(),
        agent: row.opt_string(2)?,
        title: row.opt_string(3)?,
        metadata: metadata_from(&row.string(4)?)?,
        resource_slug: row.opt_string(5)?,
        record_id: row.opt_string(6)?,
        created_at: Timestamp::from_millis(row.int(7)?),
        updated_at: Timestamp::from_millis(row.int(8)?),
        last_seq: seq_from_db(row.int(9)?),
    })
}

pub(crate) fn message_from(body: &str) -> Result<Message> {
    serde_json::from_str(body).map_err(|e| corrupt("message", e))
}

/// The conversation's row (pk and last seq), or `NotFound` in this scope.
pub(crate) async fn conversation_pk(
    conn: &Connection,
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

async fn fetch_conversation(
    conn: &Connection,
    scope: &Scope,
    id: &ConversationId,
) -> Result<Conversation> {
    let found = row(
        conn,
        sql::conversations::BY_ID,
        (scope.namespace().as_str(), subject_of(scope), id.as_str()),
    )
    .await?
    .ok_or_else(|| MemoryError::not_found("conversation", id.as_str()))?;
    conversation_from(scope, &found)
}

#[async_trait]
impl ConversationStore for LibsqlStore {
    async fn create_conversation(
        &self,
        scope: &Scope,
        new: NewConversation,
    ) -> Result<Conversation> {
        let now = self.clock.now();
        let conversation = new.into_conversation(scope, now);
        let tx = self.write().await?;
        let inserted = execute(
            &tx,
            sql::conversations::INSERT,
            (
                scope.namespace().as_str(),
                subject_of(scope),
                conversation.id.as_str(),
                conversation.agent.as_deref(),
                opt_text(conversation.title.as_deref()),
                to_json(&conversation.metadata),
                conversation.resource_slug.as_deref(),
                conversation.record_id.as_deref(),
                millis(now),
            ),
        )
        .await?;
        if inserted == 0 {
            return Err(MemoryError::AlreadyExists {
                entity: "conversation",
                id: conversation.id.to_string(),
            });
        }
        tx.commit().await?;
        Ok(conversation)
    }

    async fn get_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<Conversation> {
        let tx = self.read().await?;
        fetch_conversation(&tx, scope, id).await
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
        let tx = self.read().await?;
        let found = rows(
            &tx,
            statement,
            (
                scope.namespace().as_str(),
                subject_of(scope),
                query.agent.as_deref(),
                query.resource_slug.as_deref(),
                query.record_id.as_deref(),
                cursor.as_ref().map(|c| c.created_at.as_millis()),
                cursor.as_ref().map(|c| c.id.as_str()),
                count_to_db(limit + 1),
            ),
        )
        .await?;
        let items = found
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
        let tx = self.write().await?;
        let mut conversation = fetch_conversation(&tx, scope, id).await?;
        if let Some(title) = update.title {
            conversation.title = title;
        }
        if let Some(metadata) = update.metadata {
            conversation.metadata = metadata;
        }
        conversation.updated_at = now;
        execute(
            &tx,
            sql::conversations::UPDATE_TITLE_AND_METADATA,
            (
                opt_text(conversation.title.as_deref()),
                to_json(&conversation.metadata),
                millis(now),
                scope.namespace().as_str(),
                subject_of(scope),
                id.as_str(),
            ),
        )
        .await?;
        tx.commit().await?;
        Ok(conversation)
    }

    async fn delete_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<bool> {
        let tx = self.write().await?;
        let pk = match conversation_pk(&tx, scope, id).await {
            Ok((pk, _)) => pk,
            Err(e) if e.is_not_found() => return Ok(false),
            Err(e) => return Err(e),
        };
        // Messages and cursors go by foreign-key cascade; working memory and vectors by hand.
        execute(
            &tx,
            sql::documents::DELETE_WORKING_MEMORY,
            (scope.namespace().as_str(), subject_of(scope), pk),
        )
        .await?;
        crate::vectors::delete_conversation_vectors(&tx, scope, id).await?;
        execute(&tx, sql::conversations::DELETE_BY_PK, [pk]).await?;
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
        let now = self.clock.now();
        let tx = self.write().await?;
        // The conversation and those of the batch's ids already stored, in one statement
        // driven by the ids (`CROSS JOIN` keeps the planner from scanning the conversation's
        // messages: an append does not grow with its thread).
        let ids: Vec<&str> = messages.iter().map(|m| m.id.as_str()).collect();
        let found = rows(
            &tx,
            "SELECT c.pk, c.last_seq, NULL, NULL FROM conversations c
             WHERE c.namespace = ?1 AND c.subject = ?2 AND c.id = ?3
             UNION ALL
             SELECT c.pk, c.last_seq, m.seq, m.body FROM conversations c
             CROSS JOIN json_each(?4) i
             CROSS JOIN messages m ON m.conversation = c.pk AND m.id = i.value
             WHERE c.namespace = ?1 AND c.subject = ?2 AND c.id = ?3",
            (
                scope.namespace().as_str(),
                subject_of(scope),
                id.as_str(),
                to_json(&ids),
            ),
        )
        .await?;
        let Some(first) = found.first() else {
            return Err(MemoryError::not_found("conversation", id.as_str()));
        };
        let (pk, last_seq) = (first.int(0)?, seq_from_db(first.int(1)?));
        let mut stored: HashMap<MessageId, (u64, Message)> = HashMap::with_capacity(found.len());
        for row in &found {
            if let (Some(seq), Some(body)) = (row.opt_int(2)?, row.opt_string(3)?) {
                let message = message_from(&body)?;
                stored.insert(message.id.clone(), (seq_from_db(seq), message));
            }
        }
        let AppendPlan { fresh, mut receipt } = plan_append(last_seq, messages, &options, |id| {
            stored.get(id).map(|(seq, m)| (*seq, m))
        })?;
        if fresh.is_empty() {
            return Ok(receipt);
        }
        for StoredMessage { seq, message } in &fresh {
            execute(
                &tx,
                "INSERT INTO messages (conversation, seq, id, role, body) VALUES (?1, ?2, ?3, ?4, ?5)",
                (
                    pk,
                    seq_to_db(*seq),
                    message.id.as_str(),
                    message.role.as_str(),
                    to_json(message),
                ),
            )
            .await?;
        }
        if let Some(max) = options.max_messages {
            // Seqs are contiguous (nothing deletes single messages), so the oldest beyond the
            // limit are exactly those at or below last_seq - max.
            if let Some(cutoff) = receipt.last_seq.checked_sub(max) {
                receipt.pruned = execute(
                    &tx,
                    sql::conversations::DELETE_MESSAGES_THROUGH,
                    (pk, seq_to_db(cutoff)),
                )
                .await?;
            }
        }
        execute(
            &tx,
            "UPDATE conversations SET last_seq = ?1, updated_at = ?2 WHERE pk = ?3",
            (seq_to_db(receipt.last_seq), millis(now), pk),
        )
        .await?;
        tx.commit().await?;
        Ok(receipt)
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
        let tx = self.read().await?;
        let found = row(
            &tx,
            sql::conversations::CURSOR,
            (
                scope.namespace().as_str(),
                subject_of(scope),
                id.as_str(),
                name,
            ),
        )
        .await?
        .ok_or_else(|| MemoryError::not_found("conversation", id.as_str()))?;
        tx.commit().await?;
        Ok(found.opt_int(0)?.map(seq_from_db))
    }

    async fn advance_cursor(
        &self,
        scope: &Scope,
        id: &ConversationId,
        name: &str,
        seq: u64,
    ) -> Result<u64> {
        let tx = self.write().await?;
        let (pk, _) = conversation_pk(&tx, scope, id).await?;
        let value = row(
            &tx,
            sql::conversations::ADVANCE_CURSOR,
            (pk, name, seq_to_db(seq)),
        )
        .await?
        .ok_or_else(|| corrupt("cursor", "upsert returned no row"))?
        .int(0)?;
        tx.commit().await?;
        Ok(seq_from_db(value))
    }
}
