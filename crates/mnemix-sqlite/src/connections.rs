//! The connections the store holds and lends out itself.
//!
//! Not sqlx's pool: a pooled connection goes back through a spawned task that pings it first,
//! a second trip to the connection's worker thread on every call (see
//! `docs/decisions/sqlite-writer-and-readers.md` for what it cost). A local
//! SQLite connection does not go stale as a network one does, so a lent connection comes back
//! as it is; one lent in a transaction that was never settled (an error, a cancelled future) is
//! rolled back when next lent.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

use mnemix_core::Result;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{ConnectOptions, Executor};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use async_trait::async_trait;
use mnemix_sqlite_family::driver::{Conn, Param, Row};
use mnemix_sqlite_family::family::store::Lent;

use crate::db::{family_execute, family_rows, family_script, to_memory_error, DbResult, BACKEND};

/// At most `size` connections, opened when first needed and kept open. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Connections(Arc<Shared>);

struct Shared {
    options: SqliteConnectOptions,
    size: u32,
    /// Idle connections, each with whether it must be rolled back before its next use.
    idle: Mutex<Vec<(SqliteConnection, bool)>>,
    permits: Arc<Semaphore>,
}

impl Connections {
    /// Opens the first connection now, so a bad path or option fails here (and an in-memory
    /// database, which lives as long as a connection to it, is there from the start).
    pub(crate) async fn open(options: SqliteConnectOptions, size: u32) -> Result<Self> {
        let first = options.connect().await.db()?;
        Ok(Self(Arc::new(Shared {
            options,
            size,
            idle: Mutex::new(vec![(first, false)]),
            permits: Arc::new(Semaphore::new(size as usize)),
        })))
    }

    /// A connection, waiting while all `size` are lent.
    pub(crate) async fn acquire(&self) -> Result<Lease> {
        let permit = self
            .0
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| to_memory_error(sqlx::Error::PoolClosed))?;
        // Lent at once, so a connection is never lost if this future is dropped midway.
        let mut lease = Lease {
            conn: None,
            unsettled: false,
            home: self.0.clone(),
            _permit: permit,
        };
        let idle = self.0.idle.lock().expect("idle connections").pop();
        match idle {
            Some((conn, unsettled)) => (lease.conn, lease.unsettled) = (Some(conn), unsettled),
            None => lease.conn = Some(self.0.options.connect().await.db()?),
        }
        if lease.unsettled {
            // It fails only when the transaction had ended after all (its COMMIT ran).
            let _ = lease.execute("ROLLBACK").await;
            lease.unsettled = false;
        }
        Ok(lease)
    }

    /// Waits for every lent connection to come back, then closes them all; later acquires fail.
    pub(crate) async fn close(&self) {
        let Ok(all) = self.0.permits.acquire_many(self.0.size).await else {
            return; // closed already
        };
        self.0.permits.close();
        drop(all);
        let idle = std::mem::take(&mut *self.0.idle.lock().expect("idle connections"));
        for (conn, _) in idle {
            let _ = sqlx::Connection::close(conn).await;
        }
    }
}

/// A lent connection; it goes back when dropped.
pub(crate) struct Lease {
    conn: Option<SqliteConnection>,
    unsettled: bool,
    home: Arc<Shared>,
    _permit: OwnedSemaphorePermit,
}

impl Lease {
    /// Whether a transaction is open on it: one still open when the lease is dropped is rolled
    /// back before the connection is lent again.
    pub(crate) fn in_transaction(&mut self, open: bool) {
        self.unsettled = open;
    }
}

impl Deref for Lease {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        self.conn
            .as_ref()
            .expect("a lease holds its connection until dropped")
    }
}

impl DerefMut for Lease {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        self.conn
            .as_mut()
            .expect("a lease holds its connection until dropped")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if !self.home.permits.is_closed() {
                let mut idle = self.home.idle.lock().expect("idle connections");
                idle.push((conn, self.unsettled));
            }
        }
    }
}

/// A connection lent for the family's statements or a transaction, rolled back before the
/// connection is lent again if dropped with a transaction open (an error, a cancelled future).
pub struct Tx {
    lease: Lease,
    state: State,
}

/// Where a [`Tx`]'s transaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// None is open: each statement commits alone, and a first statement ([`Conn::first`])
    /// may begin one.
    Closed,
    /// Begun in a first statement; a last statement ([`Conn::last`]) may commit it.
    Riding,
    /// Begun by [`Tx::begin`]: its holder commits it.
    Held,
    /// Committed in a last statement.
    Committed,
}

impl Tx {
    /// Opens a transaction with `begin` (`BEGIN` or `BEGIN IMMEDIATE`).
    pub(crate) async fn begin(mut lease: Lease, begin: &'static str) -> Result<Self> {
        // Marked before it is sent: a future dropped while `BEGIN` runs leaves it to be rolled
        // back, not lent again inside a transaction (a read cancelled there once made the
        // connection's next `BEGIN` fail).
        lease.in_transaction(true);
        lease.execute(begin).await.db()?;
        Ok(Self {
            lease,
            state: State::Held,
        })
    }

    /// A connection on which no transaction is open: the family's statements begin one in a
    /// first statement and commit it in a last one ([`Conn::first`], [`Conn::last`]) where
    /// they must share a snapshot, two hops to sqlx's worker thread fewer than
    /// [`begin`](Self::begin) and [`commit`](Self::commit); a lone statement needs neither.
    pub(crate) fn lent(lease: Lease) -> Self {
        Self {
            lease,
            state: State::Closed,
        }
    }

    /// A transaction whose `BEGIN` its caller sends in its own first statement string, and
    /// ends with [`commit`](Self::commit).
    pub(crate) fn begun_in_first_statement(mut lease: Lease) -> Self {
        lease.in_transaction(true);
        Self {
            lease,
            state: State::Riding,
        }
    }

    /// The connection, for the transaction's statements.
    pub(crate) fn conn(&mut self) -> &mut SqliteConnection {
        &mut self.lease
    }

    /// Commits.
    pub(crate) async fn commit(mut self) -> sqlx::Result<()> {
        self.lease.execute("COMMIT").await?;
        self.lease.in_transaction(false);
        Ok(())
    }
}

/// Settled, a lent connection commits what it began and did not commit in a last statement.
impl Lent for Tx {
    async fn settle(mut self) -> Result<()> {
        match self.state {
            State::Closed => Ok(()),
            State::Committed => {
                self.lease.in_transaction(false);
                Ok(())
            }
            State::Riding | State::Held => self.commit().await.db(),
        }
    }
}

/// A lent connection as the SQLite family's; see [`Tx::lent`].
#[async_trait]
impl Conn for Tx {
    const BACKEND: &'static str = BACKEND;
    const JOINS_STATEMENTS: bool = true;

    async fn rows(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<Vec<Row>> {
        family_rows(&mut self.lease, sql, params).await
    }

    async fn execute(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<u64> {
        family_execute(&mut self.lease, sql, params).await
    }

    async fn run_script(&mut self, sql: &'static str) -> Result<()> {
        family_script(&mut self.lease, sql).await
    }

    fn first(&mut self, plain: &'static str, with_begin: &'static str) -> &'static str {
        if self.state == State::Closed {
            // Marked before it is sent: a future dropped midway leaves it to be rolled back.
            self.lease.in_transaction(true);
            self.state = State::Riding;
            with_begin
        } else {
            plain
        }
    }

    fn last(&mut self, plain: &'static str, with_commit: &'static str) -> &'static str {
        if self.state == State::Riding {
            // Still marked open until settled: a last statement that fails leaves it open.
            self.state = State::Committed;
            with_commit
        } else {
            plain
        }
    }
}

impl Deref for Tx {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        &self.lease
    }
}

impl DerefMut for Tx {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        &mut self.lease
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn one_connection() -> (Connections, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("held.db"))
            .create_if_missing(true);
        let connections = Connections::open(options, 1).await.expect("open");
        let mut conn = connections.acquire().await.expect("lease");
        conn.execute("CREATE TABLE t (x INTEGER)")
            .await
            .expect("table");
        drop(conn);
        (connections, dir)
    }

    async fn count(conn: &mut SqliteConnection) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM t")
            .fetch_one(conn)
            .await
            .expect("count")
    }

    #[tokio::test]
    async fn a_transaction_left_open_is_rolled_back_before_the_next_lease() {
        let (connections, _dir) = one_connection().await;
        let mut conn = connections.acquire().await.expect("lease");
        conn.execute("BEGIN IMMEDIATE; INSERT INTO t VALUES (1)")
            .await
            .expect("write");
        conn.in_transaction(true);
        drop(conn);
        let mut tx = Tx::begin(connections.acquire().await.expect("lease"), "BEGIN")
            .await
            .expect("a new transaction opens");
        assert_eq!(count(&mut tx).await, 0, "the unsettled write was kept");
        tx.conn()
            .execute("INSERT INTO t VALUES (2)")
            .await
            .expect("write");
        drop(tx); // unfinished: rolled back too
        let mut conn = connections.acquire().await.expect("lease");
        assert_eq!(count(&mut conn).await, 0);
        let tx = Tx::begin(conn, "BEGIN").await.expect("begin");
        tx.commit().await.expect("a settled lease is lent as it is");
        let mut conn = connections.acquire().await.expect("lease");
        conn.execute("BEGIN")
            .await
            .expect("no transaction was left open");
    }

    #[tokio::test]
    async fn a_lent_connection_commits_what_its_first_statement_began_only_when_settled() {
        let (connections, _dir) = one_connection().await;
        let insert = |tx: &mut Tx, value: &'static str, with_begin: &'static str| {
            let sql = tx.first(value, with_begin);
            (sql, tx.state)
        };
        // Begun in a first statement, no last one to commit it: settling commits.
        let mut tx = Tx::lent(connections.acquire().await.expect("lease"));
        let (sql, state) = insert(
            &mut tx,
            "INSERT INTO t VALUES (1)",
            "BEGIN IMMEDIATE; INSERT INTO t VALUES (1)",
        );
        assert_eq!(state, State::Riding);
        tx.execute(sql, &[]).await.expect("write");
        tx.settle().await.expect("settled");
        let mut conn = connections.acquire().await.expect("lease");
        assert_eq!(count(&mut conn).await, 1, "settling did not commit");

        // The same, dropped unsettled (an error, a cancelled future): rolled back.
        let mut tx = Tx::lent(conn);
        let (sql, _) = insert(
            &mut tx,
            "INSERT INTO t VALUES (2)",
            "BEGIN IMMEDIATE; INSERT INTO t VALUES (2)",
        );
        tx.execute(sql, &[]).await.expect("write");
        drop(tx);
        let mut conn = connections.acquire().await.expect("lease");
        assert_eq!(count(&mut conn).await, 1, "an unsettled write was kept");

        // A lone statement begins nothing: it commits alone, and leaves nothing to roll back.
        let mut tx = Tx::lent(conn);
        tx.execute("INSERT INTO t VALUES (3)", &[])
            .await
            .expect("write");
        assert_eq!(tx.state, State::Closed);
        drop(tx);
        let mut conn = connections.acquire().await.expect("lease");
        assert_eq!(count(&mut conn).await, 2);
        conn.execute("BEGIN")
            .await
            .expect("no transaction was left open");
    }

    #[tokio::test]
    async fn leases_wait_for_a_free_connection_and_close_waits_for_them() {
        let (connections, _dir) = one_connection().await;
        let held = connections.acquire().await.expect("lease");
        let waiting = tokio::time::timeout(Duration::from_millis(50), connections.acquire()).await;
        assert!(
            waiting.is_err(),
            "a second lease of one connection did not wait"
        );
        let closing = tokio::spawn({
            let connections = connections.clone();
            async move { connections.close().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !closing.is_finished(),
            "close did not wait for the lent connection"
        );
        drop(held);
        closing.await.expect("closed");
        assert!(connections.acquire().await.is_err(), "lent after close");
    }
}
