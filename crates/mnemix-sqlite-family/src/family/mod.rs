//! The contracts written once for every SQLite-family driver, over [`Conn`]:
//! each function takes the connection its caller holds (a reader, the writer, or a transaction
//! the caller opened and will commit) and sends the family's statements through it.

pub mod changes;
pub mod conversations;
pub mod documents;
pub mod facts;
pub mod migrations;
pub mod store;
pub mod transfer;
pub mod vectors;

use mnemix_core::{ConversationId, DeletionReceipt, MemoryError, Result, Scope, Timestamp};

use crate::driver::Conn;

/// The `subject` column of a scope: `''` for the shared scope.
pub fn subject_of(scope: &Scope) -> &str {
    scope.subject().map_or("", |s| s.as_str())
}

/// A timestamp as stored: milliseconds since the epoch.
pub fn millis(t: Timestamp) -> i64 {
    t.as_millis()
}

/// A seq or revision as stored (SQLite's integers are signed).
pub fn seq_to_db(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

/// A stored seq or revision (a negative one, which no write stores, reads as 0).
pub fn seq_from_db(seq: i64) -> u64 {
    u64::try_from(seq).unwrap_or(0)
}

/// A count or limit as stored.
pub fn count_to_db(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A value as its JSON text (a statement parameter).
pub fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).expect("model types serialize to JSON")
}

/// The conversation's row (pk and last seq), or `NotFound` in this scope.
pub async fn conversation_pk<C: Conn>(
    conn: &mut C,
    scope: &Scope,
    id: &ConversationId,
) -> Result<(i64, u64)> {
    let params = [
        scope.namespace().as_str().into(),
        subject_of(scope).into(),
        id.as_str().into(),
    ];
    let found = conn
        .row(crate::conversations::PK_AND_LAST_SEQ, &params)
        .await?
        .ok_or_else(|| MemoryError::not_found("conversation", id.as_str()))?;
    Ok((found.int(0)?, seq_from_db(found.int(1)?)))
}

/// Deletes every row of the subject but its vectors (each driver's own), in the write
/// transaction `tx` is in; the receipt counts what readers could see (expired facts are purged
/// first, uncounted).
pub async fn forget_subject<C: Conn>(
    tx: &mut C,
    scope: &Scope,
    now: Timestamp,
) -> Result<DeletionReceipt> {
    let (namespace, subject) = (scope.namespace().as_str(), subject_of(scope));
    let params = [namespace.into(), subject.into(), millis(now).into()];
    tx.execute(crate::facts::PURGE_EXPIRED, &params).await?;
    let mut receipt = DeletionReceipt::default();
    for (count, statement) in crate::forget::subject_rows(&mut receipt) {
        *count = tx.execute(statement, &params[..2]).await?;
    }
    tx.execute(crate::forget::ERASE_FACTS_GENERATION, &params[..2])
        .await?;
    Ok(receipt)
}
