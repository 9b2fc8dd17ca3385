//! Conversations, their messages and cursors, written once: the appends of a write group
//! (whose transaction the driver's group holds) and every read and write of one call.

use mnemix_core::adapter::page_newest_first;
use mnemix_core::{
    AppendReceipt, Conversation, ConversationId, ConversationQuery, ConversationUpdate,
    LoadOptions, MemoryError, Message, Metadata, Page, Result, Scope, StoredMessage, Timestamp,
};

use super::{conversation_pk, count_to_db, millis, seq_from_db, seq_to_db, subject_of, to_json};
use crate::conversations::{self as sql, AppendGroup, AppendRequest, ProbeRow};
use crate::documents::DELETE_WORKING_MEMORY;
use crate::driver::{corrupt, Conn, Param, Row};

/// A stored message's body decoded; what does not decode is `backend`'s corrupt row.
pub fn message_from(backend: &'static str, body: &str) -> Result<Message> {
    serde_json::from_str(body).map_err(|e| corrupt(backend, "message", e))
}

/// The appends of one write group, in the write transaction `tx` is in or begins (see
/// [`AppendGroup`]): one read whatever their number, then one write string where the driver
/// joins statements ([`Conn::JOINS_STATEMENTS`]), else two; `BEGIN IMMEDIATE` rides in the read
/// and `COMMIT` in the write where the driver lets them ([`Conn::first`], [`Conn::last`]). The
/// outer error is a storage failure: nothing of the group may be kept.
pub async fn append_group<C: Conn>(
    tx: &mut C,
    requests: Vec<AppendRequest>,
) -> Result<Vec<Result<AppendReceipt>>> {
    let probe = tx.first(sql::APPEND_PROBE, sql::APPEND_PROBE_BEGINNING);
    let asked = AppendGroup::asked(&requests);
    let probe = tx
        .rows(probe, &[Param::Text(&asked)])
        .await?
        .iter()
        .map(|row| {
            let stored = match (row.opt_int(3)?, row.opt_string(4)?) {
                (Some(seq), Some(body)) => {
                    Some((seq_from_db(seq), message_from(C::BACKEND, &body)?))
                }
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
    let Some((messages, conversations, changes)) = group.write.take() else {
        return Ok(group.outcomes);
    };
    let (messages, conversations, changes) = (
        Param::Text(&messages),
        Param::Text(&conversations),
        Param::Text(&changes),
    );
    if C::JOINS_STATEMENTS {
        // A prune's change count must be its own: the COMMIT then goes after the prunes.
        let write = if group.prunes.is_empty() {
            tx.last(sql::APPEND_WRITE, sql::APPEND_WRITE_COMMITTING)
        } else {
            sql::APPEND_WRITE
        };
        tx.execute(write, &[messages, conversations, changes])
            .await?;
    } else {
        tx.execute(sql::APPEND_INSERT, &[messages]).await?;
        tx.execute(sql::APPEND_UPDATE, &[Param::Null, conversations])
            .await?;
        tx.execute(sql::APPEND_CHANGES, &[Param::Null, Param::Null, changes])
            .await?;
    }
    for (i, pk, cutoff) in std::mem::take(&mut group.prunes) {
        let params = [pk.into(), seq_to_db(cutoff).into()];
        let pruned = tx.execute(sql::DELETE_MESSAGES_THROUGH, &params).await?;
        group.pruned(i, pruned);
    }
    Ok(group.outcomes)
}

/// A conversation's messages as `options` narrow them, in seq order, or `NotFound`: one
/// statement, its own snapshot.
pub async fn load<C: Conn>(
    conn: &mut C,
    scope: &Scope,
    id: &ConversationId,
    options: &LoadOptions,
) -> Result<Vec<StoredMessage>> {
    let roles = options
        .roles
        .as_ref()
        .map(|roles| to_json(&roles.iter().map(|r| r.as_str()).collect::<Vec<_>>()));
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        id.as_str().into(),
        options.after_seq.map_or(0, seq_to_db).into(),
        options.before_seq.map_or(i64::MAX, seq_to_db).into(),
        roles.as_deref().into(),
        options.last.map_or(-1, count_to_db).into(),
    ];
    let read = conn.row(sql::LOAD, &params).await?;
    messages_of_conversation::<C>(read, id)
}

/// The conversation's messages at `seqs` (those it holds), in seq order, or `NotFound`.
pub async fn load_seqs<C: Conn>(
    conn: &mut C,
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
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        id.as_str().into(),
        Param::Text(&wanted),
    ];
    let read = conn.row(sql::LOAD_SEQS, &params).await?;
    messages_of_conversation::<C>(read, id)
}

/// The messages of a [`LOAD`](sql::LOAD)-shaped read in seq order, or `NotFound` when the
/// conversation is not there.
fn messages_of_conversation<C: Conn>(
    read: Option<Row>,
    id: &ConversationId,
) -> Result<Vec<StoredMessage>> {
    let read = read.ok_or_else(|| corrupt(C::BACKEND, "messages", "the read returned no row"))?;
    if read.int(0)? == 0 {
        return Err(MemoryError::not_found("conversation", id.as_str()));
    }
    let Some(messages) = read.opt_string(1)? else {
        return Ok(Vec::new());
    };
    let mut messages: Vec<(i64, Message)> =
        serde_json::from_str(&messages).map_err(|e| read.corrupt("message", e))?;
    messages.sort_unstable_by_key(|(seq, _)| *seq);
    Ok(messages
        .into_iter()
        .map(|(seq, message)| StoredMessage {
            seq: seq_from_db(seq),
            message,
        })
        .collect())
}

/// A conversation from the columns of its statements (`pk` first, not read here).
pub fn conversation_from(scope: &Scope, row: &Row) -> Result<Conversation> {
    let metadata: Metadata =
        serde_json::from_str(&row.string(4)?).map_err(|e| row.corrupt("metadata", e))?;
    Ok(Conversation {
        id: ConversationId::new(row.string(1)?).map_err(|e| row.corrupt("conversation id", e))?,
        scope: scope.clone(),
        agent: row.opt_string(2)?,
        title: row.opt_string(3)?,
        metadata,
        resource_slug: row.opt_string(5)?,
        record_id: row.opt_string(6)?,
        created_at: Timestamp::from_millis(row.int(7)?),
        updated_at: Timestamp::from_millis(row.int(8)?),
        last_seq: seq_from_db(row.int(9)?),
    })
}

/// Stores a new conversation, or `AlreadyExists`.
pub async fn create_conversation<C: Conn>(conn: &mut C, conversation: &Conversation) -> Result<()> {
    let scope = &conversation.scope;
    let metadata = to_json(&conversation.metadata);
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        conversation.id.as_str().into(),
        conversation.agent.as_deref().into(),
        conversation.title.as_deref().map(Param::FreeText).into(),
        Param::Text(&metadata),
        conversation.resource_slug.as_deref().into(),
        conversation.record_id.as_deref().into(),
        millis(conversation.created_at).into(),
    ];
    if conn.execute(sql::INSERT, &params).await? == 0 {
        return Err(MemoryError::AlreadyExists {
            entity: "conversation",
            id: conversation.id.to_string(),
        });
    }
    Ok(())
}

/// A conversation, or `NotFound` in this scope.
pub async fn get_conversation<C: Conn>(
    conn: &mut C,
    scope: &Scope,
    id: &ConversationId,
) -> Result<Conversation> {
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        id.as_str().into(),
    ];
    let row = conn
        .row(sql::BY_ID, &params)
        .await?
        .ok_or_else(|| MemoryError::not_found("conversation", id.as_str()))?;
    conversation_from(scope, &row)
}

/// A page of the subject's conversations, newest first.
pub async fn list_conversations<C: Conn>(
    conn: &mut C,
    scope: &Scope,
    query: ConversationQuery,
) -> Result<Page<Conversation>> {
    let limit = query.page_limit();
    let cursor = query.after();
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        query.agent.as_deref().into(),
        query.resource_slug.as_deref().into(),
        query.record_id.as_deref().into(),
        cursor.as_ref().map(|c| c.created_at.as_millis()).into(),
        cursor.as_ref().map(|c| c.id.as_str()).into(),
        count_to_db(limit + 1).into(),
    ];
    // Two statements rather than `?cursor IS NULL OR …`, so both seek the index.
    let rows = conn.rows(sql::list_page(cursor.is_some()), &params).await?;
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

/// Updates a conversation's title and metadata in the write transaction `tx` is in.
pub async fn update_conversation<C: Conn>(
    tx: &mut C,
    scope: &Scope,
    id: &ConversationId,
    update: ConversationUpdate,
    now: Timestamp,
) -> Result<Conversation> {
    let mut conversation = get_conversation(tx, scope, id).await?;
    if let Some(title) = update.title {
        conversation.title = title;
    }
    if let Some(metadata) = update.metadata {
        conversation.metadata = metadata;
    }
    conversation.updated_at = now;
    let metadata = to_json(&conversation.metadata);
    let params = [
        conversation.title.as_deref().map(Param::FreeText).into(),
        Param::Text(&metadata),
        millis(now).into(),
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        id.as_str().into(),
    ];
    tx.execute(sql::UPDATE_TITLE_AND_METADATA, &params).await?;
    Ok(conversation)
}

/// Deletes the conversation of row `pk` in the write transaction `tx` is in: its messages and
/// cursors go by foreign-key cascade, its working memory here (its vectors are the caller's).
pub async fn delete_conversation<C: Conn>(tx: &mut C, scope: &Scope, pk: i64) -> Result<()> {
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        pk.into(),
    ];
    tx.execute(DELETE_WORKING_MEMORY, &params).await?;
    tx.execute(sql::DELETE_BY_PK, &[pk.into()]).await?;
    Ok(())
}

/// A cursor's value (`None` if never set), or `NotFound` for the conversation.
pub async fn cursor<C: Conn>(
    conn: &mut C,
    scope: &Scope,
    id: &ConversationId,
    name: &str,
) -> Result<Option<u64>> {
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        id.as_str().into(),
        name.into(),
    ];
    let found = conn
        .row(sql::CURSOR, &params)
        .await?
        .ok_or_else(|| MemoryError::not_found("conversation", id.as_str()))?;
    Ok(found.opt_int(0)?.map(seq_from_db))
}

/// Moves a cursor forward (never back) in the write transaction `tx` is in; its value after.
pub async fn advance_cursor<C: Conn>(
    tx: &mut C,
    scope: &Scope,
    id: &ConversationId,
    name: &str,
    seq: u64,
) -> Result<u64> {
    let (pk, _) = conversation_pk(tx, scope, id).await?;
    let params = [pk.into(), name.into(), seq_to_db(seq).into()];
    let value = tx
        .row(sql::ADVANCE_CURSOR, &params)
        .await?
        .ok_or_else(|| crate::driver::corrupt(C::BACKEND, "cursor", "its upsert returned no row"))?
        .int(0)?;
    Ok(seq_from_db(value))
}
