//! Conversations and cursors, written once (appends and loads are each driver's: their shapes
//! follow what the driver pays for, see the stores).

use mnemix_core::adapter::page_newest_first;
use mnemix_core::{
    Conversation, ConversationId, ConversationQuery, ConversationUpdate, MemoryError, Metadata,
    Page, Result, Scope, Timestamp,
};

use super::{conversation_pk, count_to_db, millis, seq_from_db, seq_to_db, subject_of, to_json};
use crate::conversations as sql;
use crate::documents::DELETE_WORKING_MEMORY;
use crate::driver::{Conn, Param, Row};

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
