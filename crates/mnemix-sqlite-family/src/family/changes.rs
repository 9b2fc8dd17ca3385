//! The change feed of a SQLite-family store ([`mnemix_core::changes`]): a row recorded in
//! each write's own transaction, read by position. SQLite commits one write transaction at a
//! time and positions are `AUTOINCREMENT`, so a position handed out is never preceded by one
//! committed later.

use mnemix_core::changes::{change_from_columns, trimmed, NewChange};
use mnemix_core::{
    Change, ChangeCursor, Namespace, Principal, Result, Retention, Scope, Timestamp,
};

use super::{count_to_db, millis, seq_from_db, subject_of, to_json};
use crate::driver::Conn;

/// Records a change: `?1` namespace, `?2` subject, `?3` at, `?4` operation, `?5` within, `?6`
/// records, `?7` principal.
const INSERT: &str = "INSERT INTO changes
    (namespace, subject, at, operation, within, records, principal)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// A page of a namespace's feed: `?1` namespace, `?2` after position, `?3` limit.
const PAGE: &str = "SELECT position, at, operation, subject, within, records, principal, scrubbed
    FROM changes WHERE namespace = ?1 AND position > ?2 ORDER BY position LIMIT ?3";

/// The position of the last change a trim removed: `?1` namespace.
const HORIZON: &str = "SELECT position FROM change_horizons WHERE namespace = ?1";

/// The position of the first change a retention keeps: `?1` namespace, `?2` the commit time
/// before which changes go (the smallest integer when none), `?3` how many of the newest stay
/// (the largest integer when all). Changes go as a prefix of the feed: the oldest that stays
/// keeps every newer one.
const FIRST_KEPT: &str = "SELECT min(position) FROM changes
    WHERE namespace = ?1 AND NOT (at < ?2 OR position <= coalesce(
        (SELECT position FROM changes WHERE namespace = ?1
         ORDER BY position DESC LIMIT 1 OFFSET ?3), 0))";

/// The newest change before the first kept (`?2`, or every change when NULL): `?1` namespace.
const LAST_TRIMMED: &str = "SELECT max(position) FROM changes
    WHERE namespace = ?1 AND (?2 IS NULL OR position < ?2)";

/// Removes a namespace's changes through a position: `?1` namespace, `?2` position.
const TRIM: &str = "DELETE FROM changes WHERE namespace = ?1 AND position <= ?2";

/// Moves a namespace's horizon forward: `?1` namespace, `?2` position.
const ADVANCE_HORIZON: &str = "INSERT INTO change_horizons (namespace, position) VALUES (?1, ?2)
    ON CONFLICT (namespace) DO UPDATE SET position = max(position, excluded.position)";

/// Scrubs a subject's changes: `?1` namespace, `?2` subject.
const SCRUB: &str = "UPDATE changes SET subject = '', within = NULL, records = '[]', scrubbed = 1
    WHERE namespace = ?1 AND subject = ?2";

/// How many changes name a subject: `?1` namespace, `?2` subject.
const OF_SUBJECT: &str = "SELECT count(*) FROM changes WHERE namespace = ?1 AND subject = ?2";

/// Removes a namespace's feed and horizon: `?1` namespace.
const FORGET_NAMESPACE: [&str; 2] = [
    "DELETE FROM changes WHERE namespace = ?1",
    "DELETE FROM change_horizons WHERE namespace = ?1",
];

/// Records `change` in `namespace`'s feed, by `writer`, at `now`, in the write transaction
/// `tx` is in.
pub async fn record<C: Conn>(
    tx: &mut C,
    namespace: &Namespace,
    change: &NewChange,
    writer: &Principal,
    now: Timestamp,
) -> Result<()> {
    let records = change.records_column();
    let principal = to_json(writer);
    let params = [
        namespace.as_str().into(),
        change.subject_column().into(),
        millis(now).into(),
        change.operation.as_str().into(),
        change.within.as_deref().into(),
        records.as_str().into(),
        principal.as_str().into(),
    ];
    tx.execute(INSERT, &params).await?;
    Ok(())
}

/// Up to `limit` changes of `namespace` after `after`, in one snapshot `conn` is in (the
/// horizon and the page agree).
pub async fn read<C: Conn>(
    conn: &mut C,
    namespace: &Namespace,
    after: ChangeCursor,
    limit: usize,
) -> Result<Vec<Change>> {
    let ns = [namespace.as_str().into()];
    if let Some(horizon) = conn.row(HORIZON, &ns).await? {
        let horizon = ChangeCursor::new(0, seq_from_db(horizon.int(0)?));
        if after != ChangeCursor::START && after < horizon {
            return Err(trimmed(after, horizon));
        }
    }
    let after_position = i64::try_from(after.position()).unwrap_or(i64::MAX);
    let params = [
        namespace.as_str().into(),
        after_position.into(),
        count_to_db(limit).into(),
    ];
    conn.rows(PAGE, &params)
        .await?
        .iter()
        .map(|row| {
            change_from_columns(
                ChangeCursor::new(0, seq_from_db(row.int(0)?)),
                Timestamp::from_millis(row.int(1)?),
                &row.string(2)?,
                &row.string(3)?,
                row.opt_string(4)?,
                &row.string(5)?,
                &row.string(6)?,
                row.int(7)? != 0,
            )
        })
        .collect()
}

/// Removes what `retention` no longer keeps of `namespace`'s feed, at `now`, in the write
/// transaction `tx` is in; how many changes.
pub async fn trim<C: Conn>(
    tx: &mut C,
    namespace: &Namespace,
    retention: Retention,
    now: Timestamp,
) -> Result<u64> {
    let cutoff = retention.cutoff(now).map_or(i64::MIN, millis);
    let newest = retention
        .max_entries
        .map_or(i64::MAX, |n| i64::try_from(n).unwrap_or(i64::MAX));
    let params = [namespace.as_str().into(), cutoff.into(), newest.into()];
    let first_kept = match tx.row(FIRST_KEPT, &params).await? {
        Some(row) => row.opt_int(0)?,
        None => None,
    };
    let last = [namespace.as_str().into(), first_kept.into()];
    let horizon = match tx.row(LAST_TRIMMED, &last).await? {
        Some(row) => row.opt_int(0)?,
        None => None,
    };
    let Some(horizon) = horizon else {
        return Ok(0);
    };
    let through = [namespace.as_str().into(), horizon.into()];
    let removed = tx.execute(TRIM, &through).await?;
    tx.execute(ADVANCE_HORIZON, &through).await?;
    Ok(removed)
}

/// Scrubs the subject of `scope` from its namespace's feed, in the write transaction `tx` is
/// in; how many changes named it.
pub async fn scrub<C: Conn>(tx: &mut C, scope: &Scope) -> Result<u64> {
    let params = [scope.namespace().as_str().into(), subject_of(scope).into()];
    tx.execute(SCRUB, &params).await
}

/// How many changes of its namespace's feed name the subject of `scope`.
pub async fn of_subject<C: Conn>(conn: &mut C, scope: &Scope) -> Result<u64> {
    let params = [scope.namespace().as_str().into(), subject_of(scope).into()];
    match conn.row(OF_SUBJECT, &params).await? {
        Some(row) => Ok(seq_from_db(row.int(0)?)),
        None => Ok(0),
    }
}

/// Removes `namespace`'s feed, in the write transaction `tx` is in.
pub async fn forget_namespace<C: Conn>(tx: &mut C, namespace: &Namespace) -> Result<()> {
    for statement in FORGET_NAMESPACE {
        tx.execute(statement, &[namespace.as_str().into()]).await?;
    }
    Ok(())
}
