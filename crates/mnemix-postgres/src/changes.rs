//! The change feed on PostgreSQL ([`mnemix_core::changes`]): a row in each write's own
//! transaction, carrying that transaction's id. Transactions commit in any order, so a read
//! returns changes in (transaction, position) order and only below a horizon under which
//! nothing can appear later: the oldest transaction, running when the read's snapshot was
//! taken, that is a writer of this store (it holds [`FEED_WRITER`], taken by every write
//! transaction before it has an id) or that has ended since (it may have written). A
//! transaction of anything else that runs long does not hold the feed back.

use mnemix_core::changes::{change_from_columns, trimmed, NewChange};
use mnemix_core::{
    Change, ChangeCursor, Namespace, Principal, Result, Retention, Scope, Timestamp,
};

use crate::begin_snapshot;
use crate::db::{from_db, millis, subject_of, to_db, to_json, Db, DbResult};
use crate::PostgresStore;

/// The advisory lock every write transaction of a store holds, shared, from its first
/// statement: what marks it as one that may record changes.
pub(crate) const FEED_WRITER: i64 = 0x6d6e_656d_6978_6677; // "mnemixfw"

/// The condition on `tx` of the changes that are final, the lock's key bound to `key` (a
/// parameter): below the oldest transaction in progress in the statement's snapshot that holds
/// [`FEED_WRITER`] or has ended since; below the snapshot's xmax when there is none.
/// (`pg_locks` names a transaction by its 32-bit xid, and an advisory lock on a bigint key by
/// its high half in `classid`, its low half in `objid`, with `objsubid` 1.)
fn settled(key: &str) -> String {
    format!(
        "tx < (
            SELECT coalesce(min(x), pg_snapshot_xmax(pg_current_snapshot()))
            FROM pg_snapshot_xip(pg_current_snapshot()) AS x
            WHERE pg_xact_status(x) <> 'in progress'
               OR EXISTS (
                   SELECT 1 FROM pg_locks t
                   JOIN pg_locks a ON a.virtualtransaction = t.virtualtransaction
                   WHERE t.locktype = 'transactionid' AND t.granted
                     AND t.transactionid = (x::text::numeric % 4294967296)::text::xid
                     AND a.locktype = 'advisory' AND a.objsubid = 1 AND a.granted
                     AND a.classid::bigint = ({key}::bigint >> 32) & 4294967295
                     AND a.objid::bigint = {key}::bigint & 4294967295))"
    )
}

impl PostgresStore {
    /// Records `change` in `namespace`'s feed by `writer` at `now`, in the transaction `db`
    /// runs.
    pub(crate) async fn record(
        &self,
        db: &impl Db,
        namespace: &Namespace,
        change: &NewChange,
        writer: &Principal,
        now: Timestamp,
    ) -> Result<()> {
        db.exec(
            &self.sql(
                "INSERT INTO {s}.changes
                     (namespace, subject, at, operation, within, records, principal)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            ),
            &[
                &namespace.as_str(),
                &change.subject_column(),
                &millis(now),
                &change.operation.as_str(),
                &change.within.as_deref(),
                &change.records_column(),
                &to_json(writer),
            ],
        )
        .await?;
        Ok(())
    }

    /// Up to `limit` settled changes of `namespace` after `after`, in one snapshot.
    pub(crate) async fn read_changes(
        &self,
        namespace: &Namespace,
        after: ChangeCursor,
        limit: usize,
    ) -> Result<Vec<Change>> {
        let mut client = self.client().await?;
        let tx = begin_snapshot(&mut client).await?;
        let horizon = tx
            .row(
                &self
                    .sql("SELECT tx::text, position FROM {s}.change_horizons WHERE namespace = $1"),
                &[&namespace.as_str()],
            )
            .await?;
        if let Some(row) = horizon {
            let horizon = cursor(&row.get::<_, String>(0), row.get(1));
            if after != ChangeCursor::START && after < horizon {
                return Err(trimmed(after, horizon));
            }
        }
        let rows = tx
            .rows(
                &self.sql(&format!(
                    "SELECT tx::text, position, at, operation, subject, within, records,
                            principal, scrubbed
                     FROM {{s}}.changes
                     WHERE namespace = $1 AND (tx, position) > ($2::text::xid8, $3)
                       AND {settled}
                     ORDER BY tx, position LIMIT $4",
                    settled = settled("$5")
                )),
                &[
                    &namespace.as_str(),
                    &after.epoch().to_string(),
                    &to_db(after.position()),
                    &i64::try_from(limit).unwrap_or(i64::MAX),
                    &FEED_WRITER,
                ],
            )
            .await?;
        tx.commit().await.db()?;
        rows.iter()
            .map(|row| {
                change_from_columns(
                    cursor(&row.get::<_, String>(0), row.get(1)),
                    Timestamp::from_millis(row.get(2)),
                    row.get(3),
                    row.get(4),
                    row.get(5),
                    row.get(6),
                    row.get(7),
                    row.get(8),
                )
            })
            .collect()
    }

    /// Removes the settled prefix of `namespace`'s feed that `retention` no longer keeps, and
    /// records the horizon; how many changes.
    pub(crate) async fn trim(&self, namespace: &Namespace, retention: Retention) -> Result<u64> {
        let cutoff = retention.cutoff(self.clock.now()).map_or(i64::MIN, millis);
        let newest = retention
            .max_entries
            .map_or(i64::MAX, |n| i64::try_from(n).unwrap_or(i64::MAX));
        let mut client = self.client().await?;
        let tx = client.transaction().await.db()?;
        // The last change of the prefix that goes: the newest settled change before the
        // oldest one kept (every settled change when none is kept).
        let last = tx
            .row(
                &self.sql(&format!(
                    "WITH settled AS (
                         SELECT tx, position, at,
                                row_number() OVER (ORDER BY tx DESC, position DESC) AS rank
                         FROM {{s}}.changes WHERE namespace = $1 AND {settled}
                     ), kept AS (
                         SELECT tx, position FROM settled WHERE NOT (at < $2 OR rank > $3)
                         ORDER BY tx, position LIMIT 1
                     )
                     SELECT tx::text, position FROM settled
                     WHERE NOT EXISTS (SELECT 1 FROM kept)
                        OR (tx, position) < (SELECT tx, position FROM kept)
                     ORDER BY tx DESC, position DESC LIMIT 1",
                    settled = settled("$4")
                )),
                &[&namespace.as_str(), &cutoff, &newest, &FEED_WRITER],
            )
            .await?;
        let Some(last) = last else {
            return Ok(0);
        };
        let (last_tx, last_position): (String, i64) = (last.get(0), last.get(1));
        let removed = tx
            .exec(
                &self.sql(
                    "DELETE FROM {s}.changes
                     WHERE namespace = $1 AND (tx, position) <= ($2::text::xid8, $3)",
                ),
                &[&namespace.as_str(), &last_tx, &last_position],
            )
            .await?;
        tx.exec(
            &self.sql(
                "INSERT INTO {s}.change_horizons AS h (namespace, tx, position)
                 VALUES ($1, $2::text::xid8, $3)
                 ON CONFLICT (namespace) DO UPDATE SET tx = excluded.tx, position = excluded.position
                 WHERE (h.tx, h.position) < (excluded.tx, excluded.position)",
            ),
            &[&namespace.as_str(), &last_tx, &last_position],
        )
        .await?;
        tx.commit().await.db()?;
        Ok(removed)
    }

    /// Scrubs the subject of `scope` from its namespace's feed, in the transaction `db` runs;
    /// how many changes named it.
    pub(crate) async fn scrub(&self, db: &impl Db, scope: &Scope) -> Result<u64> {
        db.exec(
            &self.sql(
                "UPDATE {s}.changes
                 SET subject = '', within = NULL, records = '[]', scrubbed = true
                 WHERE namespace = $1 AND subject = $2",
            ),
            &[&scope.namespace().as_str(), &subject_of(scope)],
        )
        .await
    }

    /// How many changes of its namespace's feed name the subject of `scope`.
    pub(crate) async fn changes_of_subject(&self, db: &impl Db, scope: &Scope) -> Result<u64> {
        let row = db
            .row(
                &self.sql("SELECT count(*) FROM {s}.changes WHERE namespace = $1 AND subject = $2"),
                &[&scope.namespace().as_str(), &subject_of(scope)],
            )
            .await?;
        Ok(row.map_or(0, |r| from_db(r.get(0))))
    }

    /// Removes `namespace`'s feed and horizon.
    pub(crate) async fn forget_feed(&self, namespace: &Namespace) -> Result<()> {
        let client = self.client().await?;
        for table in ["changes", "change_horizons"] {
            client
                .exec(
                    &self.sql(&format!("DELETE FROM {{s}}.{table} WHERE namespace = $1")),
                    &[&namespace.as_str()],
                )
                .await?;
        }
        Ok(())
    }
}

/// A cursor of a transaction id (as text: `xid8` has no binary mapping here) and a position.
fn cursor(tx: &str, position: i64) -> ChangeCursor {
    ChangeCursor::new(tx.parse().unwrap_or(0), from_db(position))
}
