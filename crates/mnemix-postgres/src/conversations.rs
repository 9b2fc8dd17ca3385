//! Conversations, messages and cursors.

use std::collections::HashMap;

use async_trait::async_trait;
use mnemix_core::adapter::page_newest_first;
use mnemix_core::adapter::{plan_append, AppendPlan};
use mnemix_core::{
    AppendOptions, AppendReceipt, Conversation, ConversationId, ConversationQuery,
    ConversationStore, ConversationUpdate, LoadOptions, MemoryError, Message, MessageId,
    NewConversation, Page, Result, Scope, StoredMessage, Timestamp,
};
use tokio_postgres::Row;

use crate::db::{
    corrupt, from_db, metadata_from, millis, subject_of, text_from, to_db, to_json, Db, DbResult,
};
use crate::PostgresStore;

pub(crate) const CONVERSATION_COLUMNS: &str =
    "pk, id, agent, title, metadata, resource_slug, record_id, created_at, updated_at, last_seq";

pub(crate) fn conversation_from(scope: &Scope, row: &Row) -> Result<Conversation> {
    Ok(Conversation {
        id: ConversationId::new(row.get::<_, String>("id"))
            .map_err(|e| corrupt("conversation id", e))?,
        scope: scope.clone(),
        agent: row.get("agent"),
        title: row
            .get::<_, Option<Vec<u8>>>("title")
            .map(text_from)
            .transpose()?,
        metadata: metadata_from(row.get("metadata"))?,
        resource_slug: row.get("resource_slug"),
        record_id: row.get("record_id"),
        created_at: Timestamp::from_millis(row.get("created_at")),
        updated_at: Timestamp::from_millis(row.get("updated_at")),
        last_seq: from_db(row.get("last_seq")),
    })
}

pub(crate) fn message_from(body: &str) -> Result<Message> {
    serde_json::from_str(body).map_err(|e| corrupt("message", e))
}

impl PostgresStore {
    /// The conversation's pk and last seq, or `NotFound` in this scope; `lock` takes the row
    /// lock that serialises appends.
    pub(crate) async fn conversation_pk(
        &self,
        db: &impl Db,
        scope: &Scope,
        id: &ConversationId,
        lock: bool,
    ) -> Result<(i64, u64)> {
        let sql = if lock {
            "SELECT pk, last_seq FROM {s}.conversations
             WHERE namespace = $1 AND subject = $2 AND id = $3 FOR NO KEY UPDATE"
        } else {
            "SELECT pk, last_seq FROM {s}.conversations
             WHERE namespace = $1 AND subject = $2 AND id = $3"
        };
        let row = db
            .row(
                &self.sql(sql),
                &[
                    &scope.namespace().as_str(),
                    &subject_of(scope),
                    &id.as_str(),
                ],
            )
            .await?
            .ok_or_else(|| MemoryError::not_found("conversation", id.as_str()))?;
        Ok((row.get(0), from_db(row.get(1))))
    }

    async fn fetch_conversation(
        &self,
        db: &impl Db,
        scope: &Scope,
        id: &ConversationId,
    ) -> Result<Conversation> {
        let row = db
            .row(
                &self.sql(&format!(
                    "SELECT {CONVERSATION_COLUMNS} FROM {{s}}.conversations
                     WHERE namespace = $1 AND subject = $2 AND id = $3"
                )),
                &[
                    &scope.namespace().as_str(),
                    &subject_of(scope),
                    &id.as_str(),
                ],
            )
            .await?
            .ok_or_else(|| MemoryError::not_found("conversation", id.as_str()))?;
        conversation_from(scope, &row)
    }

    /// One append in one transaction. Without `probe`, it takes none of the batch's ids to be
    /// stored yet and inserts with `ON CONFLICT DO NOTHING`: `None` when that was wrong (an id
    /// was stored, or the plan failed, which a stored id may explain), and nothing was written.
    /// With `probe`, it reads the stored ones first. The usual append (new messages) so sends
    /// no probe; a replay pays for a second transaction.
    async fn append_once(
        &self,
        scope: &Scope,
        id: &ConversationId,
        messages: Vec<Message>,
        options: &AppendOptions,
        probe: bool,
    ) -> Result<Option<AppendReceipt>> {
        let now = self.clock.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.db()?;
        // The row lock: concurrent appends to this conversation queue here.
        let (pk, last_seq) = self.conversation_pk(&tx, scope, id, true).await?;
        let mut stored: HashMap<MessageId, (u64, Message)> = HashMap::new();
        if probe {
            let ids: Vec<&str> = messages.iter().map(|m| m.id.as_str()).collect();
            // A lookup per id by the (conversation, id) key, whatever the statistics: `OFFSET
            // 0` keeps the subquery from being flattened into a join. `id = ANY($2)` (and the
            // same join unfenced) let a generic plan costed for a store's many short
            // conversations scan the whole conversation and filter the ids
            // (docs/decisions/postgres-append-row-lock.md).
            let rows = tx
                .rows(
                    &self.sql(
                        "SELECT m.seq, m.body FROM unnest($2::text[]) AS wanted (id)
                         JOIN LATERAL (
                             SELECT seq, body FROM {s}.messages
                             WHERE conversation = $1 AND id = wanted.id OFFSET 0
                         ) m ON true",
                    ),
                    &[&pk, &ids],
                )
                .await?;
            for row in rows {
                let message = message_from(row.get(1))?;
                stored.insert(message.id.clone(), (from_db(row.get(0)), message));
            }
        }
        let plan = plan_append(last_seq, messages, options, |id| {
            stored.get(id).map(|(seq, m)| (*seq, m))
        });
        let AppendPlan { fresh, mut receipt } = match plan {
            Ok(plan) => plan,
            Err(_) if !probe => return Ok(None),
            Err(e) => return Err(e),
        };
        if fresh.is_empty() {
            return Ok(Some(receipt));
        }
        // One statement for the whole batch: arrays unnested server-side.
        let seqs: Vec<i64> = fresh.iter().map(|m| to_db(m.seq)).collect();
        let fresh_ids: Vec<&str> = fresh.iter().map(|m| m.message.id.as_str()).collect();
        let roles: Vec<&str> = fresh.iter().map(|m| m.message.role.as_str()).collect();
        let bodies: Vec<String> = fresh.iter().map(|m| to_json(&m.message)).collect();
        let inserted = tx
            .exec(
                &self.sql(
                    "INSERT INTO {s}.messages (conversation, seq, id, role, body)
                     SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[])
                     ON CONFLICT (conversation, id) DO NOTHING",
                ),
                &[&pk, &seqs, &fresh_ids, &roles, &bodies],
            )
            .await?;
        if inserted < fresh.len() as u64 {
            // An id was stored: dropping `tx` rolls the insert back. After a probe under the
            // conversation's lock, only a writer that took no lock can have stored it.
            return if probe {
                Err(MemoryError::conflict(
                    "a message of the batch was stored meanwhile, without the conversation's lock",
                    None,
                ))
            } else {
                Ok(None)
            };
        }
        if let Some(max) = options.max_messages {
            // Seqs are contiguous, so the oldest beyond the limit are those at or below
            // last_seq - max.
            if let Some(cutoff) = receipt.last_seq.checked_sub(max) {
                receipt.pruned = tx
                    .exec(
                        &self.sql("DELETE FROM {s}.messages WHERE conversation = $1 AND seq <= $2"),
                        &[&pk, &to_db(cutoff)],
                    )
                    .await?;
            }
        }
        tx.exec(
            &self.sql("UPDATE {s}.conversations SET last_seq = $1, updated_at = $2 WHERE pk = $3"),
            &[&to_db(receipt.last_seq), &millis(now), &pk],
        )
        .await?;
        tx.commit().await.db()?;
        Ok(Some(receipt))
    }
}

#[async_trait]
impl ConversationStore for PostgresStore {
    async fn create_conversation(
        &self,
        scope: &Scope,
        new: NewConversation,
    ) -> Result<Conversation> {
        let now = self.clock.now();
        let conversation = new.into_conversation(scope, now);
        let client = self.client().await?;
        let inserted = client
            .exec(
                &self.sql(
                    "INSERT INTO {s}.conversations (namespace, subject, id, agent, title, metadata,
                         resource_slug, record_id, created_at, updated_at, last_seq)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, 0)
                     ON CONFLICT (namespace, subject, id) DO NOTHING",
                ),
                &[
                    &scope.namespace().as_str(),
                    &subject_of(scope),
                    &conversation.id.as_str(),
                    &conversation.agent,
                    &conversation.title.as_deref().map(str::as_bytes),
                    &to_json(&conversation.metadata),
                    &conversation.resource_slug,
                    &conversation.record_id,
                    &millis(now),
                ],
            )
            .await?;
        if inserted == 0 {
            return Err(MemoryError::AlreadyExists {
                entity: "conversation",
                id: conversation.id.to_string(),
            });
        }
        Ok(conversation)
    }

    async fn get_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<Conversation> {
        let client = self.client().await?;
        self.fetch_conversation(&client, scope, id).await
    }

    async fn list_conversations(
        &self,
        scope: &Scope,
        query: ConversationQuery,
    ) -> Result<Page<Conversation>> {
        let limit = query.page_limit();
        let cursor = query.after();
        let client = self.client().await?;
        // Two statements rather than `($6 IS NULL OR (created_at, id) < ($6, $7))`: under the
        // cached generic plan that predicate is a filter, not an index bound, so every page
        // scanned the subject's conversations from the newest down to the cursor.
        let (namespace, subject) = (scope.namespace().as_str(), subject_of(scope));
        let fetch = i64::try_from(limit + 1).unwrap_or(i64::MAX);
        let filters = "($3::text IS NULL OR agent = $3)
                       AND ($4::text IS NULL OR resource_slug = $4)
                       AND ($5::text IS NULL OR record_id = $5)";
        let rows = match &cursor {
            Some(cursor) => {
                client
                    .rows(
                        &self.sql(&format!(
                            "SELECT {CONVERSATION_COLUMNS} FROM {{s}}.conversations
                             WHERE namespace = $1 AND subject = $2 AND {filters}
                               AND (created_at, id) < ($6, $7)
                             ORDER BY created_at DESC, id DESC LIMIT $8"
                        )),
                        &[
                            &namespace,
                            &subject,
                            &query.agent,
                            &query.resource_slug,
                            &query.record_id,
                            &cursor.created_at.as_millis(),
                            &cursor.id.as_str(),
                            &fetch,
                        ],
                    )
                    .await?
            }
            None => {
                client
                    .rows(
                        &self.sql(&format!(
                            "SELECT {CONVERSATION_COLUMNS} FROM {{s}}.conversations
                             WHERE namespace = $1 AND subject = $2 AND {filters}
                             ORDER BY created_at DESC, id DESC LIMIT $6"
                        )),
                        &[
                            &namespace,
                            &subject,
                            &query.agent,
                            &query.resource_slug,
                            &query.record_id,
                            &fetch,
                        ],
                    )
                    .await?
            }
        };
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
        let mut client = self.client().await?;
        let tx = client.transaction().await.db()?;
        let mut conversation = self.fetch_conversation(&tx, scope, id).await?;
        if let Some(title) = update.title {
            conversation.title = title;
        }
        if let Some(metadata) = update.metadata {
            conversation.metadata = metadata;
        }
        conversation.updated_at = now;
        tx.exec(
            &self.sql(
                "UPDATE {s}.conversations SET title = $1, metadata = $2, updated_at = $3
                 WHERE namespace = $4 AND subject = $5 AND id = $6",
            ),
            &[
                &conversation.title.as_deref().map(str::as_bytes),
                &to_json(&conversation.metadata),
                &millis(now),
                &scope.namespace().as_str(),
                &subject_of(scope),
                &id.as_str(),
            ],
        )
        .await?;
        tx.commit().await.db()?;
        Ok(conversation)
    }

    async fn delete_conversation(&self, scope: &Scope, id: &ConversationId) -> Result<bool> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.db()?;
        // Messages, cursors and working memory go by foreign-key cascade; vectors by hand (their
        // conversation id is not a foreign key: a vector may name a conversation not stored).
        let deleted = tx
            .exec(
                &self.sql(
                    "DELETE FROM {s}.conversations WHERE namespace = $1 AND subject = $2 AND id = $3",
                ),
                &[&scope.namespace().as_str(), &subject_of(scope), &id.as_str()],
            )
            .await?;
        if deleted > 0 {
            tx.exec(
                &self.sql(crate::vectors::BUMP_SUBJECT_VERSIONS),
                &[&scope.namespace().as_str(), &subject_of(scope)],
            )
            .await?;
            tx.exec(
                &self.sql(
                    "DELETE FROM {s}.vectors WHERE subject = $2 AND conversation_id = $3
                       AND collection = ANY(ARRAY(SELECT pk FROM {s}.collections WHERE namespace = $1))",
                ),
                &[
                    &scope.namespace().as_str(),
                    &subject_of(scope),
                    &id.as_str(),
                ],
            )
            .await?;
        }
        tx.commit().await.db()?;
        Ok(deleted > 0)
    }

    async fn append(
        &self,
        scope: &Scope,
        id: &ConversationId,
        messages: Vec<Message>,
        options: AppendOptions,
    ) -> Result<AppendReceipt> {
        // New messages, the usual case, need no probe of the stored ids; a replay is retried
        // with one.
        if let Some(receipt) = self
            .append_once(scope, id, messages.clone(), &options, false)
            .await?
        {
            return Ok(receipt);
        }
        self.append_once(scope, id, messages, &options, true)
            .await
            .map(|receipt| receipt.expect("a probed append returns a receipt or an error"))
    }

    async fn load(
        &self,
        scope: &Scope,
        id: &ConversationId,
        options: LoadOptions,
    ) -> Result<Vec<StoredMessage>> {
        let client = self.client().await?;
        let roles: Option<Vec<&str>> = options
            .roles
            .as_ref()
            .map(|roles| roles.iter().map(|r| r.as_str()).collect());
        // One statement: the conversation (NULL seq when it has no matching message) and the
        // window, newest first, by the (conversation, seq) key. The role filter is in the
        // statement only when asked for: a `($6 IS NULL OR role = ANY($6))` predicate makes
        // the cached generic plan estimate one row and sort the whole thread (a bitmap scan
        // plus top-N sort), so the tail of a long thread cost in proportion to its length.
        let template = |role_filter: &str| {
            format!(
                "SELECT m.seq, m.body FROM {{s}}.conversations c
                 LEFT JOIN LATERAL (
                     SELECT seq, body FROM {{s}}.messages
                     WHERE conversation = c.pk AND seq > $4 AND seq < $5{role_filter}
                     ORDER BY seq DESC LIMIT $6
                 ) m ON true
                 WHERE c.namespace = $1 AND c.subject = $2 AND c.id = $3"
            )
        };
        let (namespace, subject) = (scope.namespace().as_str(), subject_of(scope));
        let (after, before) = (
            options.after_seq.map_or(0, to_db),
            options.before_seq.map_or(i64::MAX, to_db),
        );
        let last = options.last.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let rows = match &roles {
            None => {
                client
                    .rows(
                        &self.sql(&template("")),
                        &[&namespace, &subject, &id.as_str(), &after, &before, &last],
                    )
                    .await?
            }
            Some(roles) => {
                client
                    .rows(
                        &self.sql(&template(" AND role = ANY($7)")),
                        &[
                            &namespace,
                            &subject,
                            &id.as_str(),
                            &after,
                            &before,
                            &last,
                            roles,
                        ],
                    )
                    .await?
            }
        };
        if rows.is_empty() {
            return Err(MemoryError::not_found("conversation", id.as_str()));
        }
        let mut window = Vec::with_capacity(rows.len());
        for row in rows.iter().rev() {
            if let Some(seq) = row.get::<_, Option<i64>>(0) {
                window.push(StoredMessage {
                    seq: from_db(seq),
                    message: message_from(row.get(1))?,
                });
            }
        }
        Ok(window)
    }

    async fn load_seqs(
        &self,
        scope: &Scope,
        id: &ConversationId,
        seqs: &[u64],
    ) -> Result<Vec<StoredMessage>> {
        let client = self.client().await?;
        // A seq past i64::MAX was never stored.
        let wanted: Vec<i64> = seqs.iter().filter_map(|&s| i64::try_from(s).ok()).collect();
        // One statement, as `load`: the conversation (NULL seq when none matches) and the
        // messages at the seqs, by the (conversation, seq) key.
        let rows = client
            .rows(
                &self.sql(
                    "SELECT m.seq, m.body FROM {s}.conversations c
                     LEFT JOIN LATERAL (
                         SELECT seq, body FROM {s}.messages
                         WHERE conversation = c.pk AND seq = ANY($4)
                     ) m ON true
                     WHERE c.namespace = $1 AND c.subject = $2 AND c.id = $3
                     ORDER BY m.seq",
                ),
                &[
                    &scope.namespace().as_str(),
                    &subject_of(scope),
                    &id.as_str(),
                    &wanted,
                ],
            )
            .await?;
        if rows.is_empty() {
            return Err(MemoryError::not_found("conversation", id.as_str()));
        }
        let mut found = Vec::with_capacity(rows.len());
        for row in &rows {
            if let Some(seq) = row.get::<_, Option<i64>>(0) {
                found.push(StoredMessage {
                    seq: from_db(seq),
                    message: message_from(row.get(1))?,
                });
            }
        }
        Ok(found)
    }

    async fn cursor(&self, scope: &Scope, id: &ConversationId, name: &str) -> Result<Option<u64>> {
        let client = self.client().await?;
        let rows = client
            .rows(
                &self.sql(
                    "SELECT k.value FROM {s}.conversations c
                     LEFT JOIN {s}.cursors k ON k.conversation = c.pk AND k.name = $4
                     WHERE c.namespace = $1 AND c.subject = $2 AND c.id = $3",
                ),
                &[
                    &scope.namespace().as_str(),
                    &subject_of(scope),
                    &id.as_str(),
                    &name,
                ],
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| MemoryError::not_found("conversation", id.as_str()))?;
        Ok(row.get::<_, Option<i64>>(0).map(from_db))
    }

    async fn advance_cursor(
        &self,
        scope: &Scope,
        id: &ConversationId,
        name: &str,
        seq: u64,
    ) -> Result<u64> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.db()?;
        let (pk, _) = self.conversation_pk(&tx, scope, id, false).await?;
        let row = tx
            .row(
                &self.sql(
                    "INSERT INTO {s}.cursors (conversation, name, value) VALUES ($1, $2, $3)
                     ON CONFLICT (conversation, name)
                     DO UPDATE SET value = greatest({s}.cursors.value, excluded.value)
                     RETURNING value",
                ),
                &[&pk, &name, &to_db(seq)],
            )
            .await?
            .ok_or_else(|| corrupt("cursor", "upsert returned nothing"))?;
        tx.commit().await.db()?;
        Ok(from_db(row.get(0)))
    }
}
