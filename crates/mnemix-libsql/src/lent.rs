//! What the store lends: reader connections from their idle list, and transactions on the
//! writer or a reader ([`Tx`], the SQLite family's [`Lent`] connection).

use std::sync::{Arc, Mutex as SyncMutex, PoisonError};

use libsql::Transaction;
use mnemix_core::Result;
use mnemix_sqlite_family::family::store::Lent;
use tokio::sync::{OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};

use crate::db::{self, Conn, DbResult};
use crate::BULK_VECTORS;

/// Idle reader connections of a file database, at most `readers` in use at once.
pub(crate) struct Readers {
    pub(crate) idle: SyncMutex<Vec<Conn>>,
    pub(crate) permits: Arc<Semaphore>,
}

/// A transaction and what keeps its connection ours until it ends. Dereferences to the
/// connection; dropped without [`commit`](Self::commit), it rolls back.
pub struct Tx<'a> {
    // Field order is drop order: the transaction ends before its connection is given back.
    pub(crate) transaction: Transaction,
    pub(crate) writer: Option<OwnedMutexGuard<Conn>>,
    pub(crate) reader: Option<ReaderLease<'a>>,
}

impl Tx<'_> {
    pub(crate) async fn commit(self) -> Result<()> {
        let Tx {
            transaction,
            writer,
            reader,
        } = self;
        let committed = transaction.commit().await.db();
        drop(reader);
        if let Some(mut writer) = writer {
            // The commit's outcome is what the caller must learn: a narrowing that failed
            // stays marked, and the next write tries it again.
            let _ = writer.narrow_cache().await;
        }
        committed
    }

    /// Widens the writer's page cache until the transaction ends, when it is to write
    /// `vectors` vectors, [`BULK_VECTORS`] or more (nothing otherwise, nor in a read).
    pub(crate) async fn widen_cache_for(&mut self, vectors: usize) -> Result<()> {
        match &mut self.writer {
            Some(writer) if vectors >= BULK_VECTORS => writer.widen_cache().await,
            _ => Ok(()),
        }
    }
}

impl std::ops::Deref for Tx<'_> {
    type Target = Conn;

    fn deref(&self) -> &Conn {
        self.writer
            .as_deref()
            .or_else(|| self.reader.as_ref()?.conn.as_ref())
            .expect("a transaction holds its connection until it is dropped")
    }
}

impl std::ops::DerefMut for Tx<'_> {
    fn deref_mut(&mut self) -> &mut Conn {
        if let Some(writer) = self.writer.as_deref_mut() {
            return writer;
        }
        self.reader
            .as_mut()
            .and_then(|reader| reader.conn.as_mut())
            .expect("a transaction holds its connection until it is dropped")
    }
}

/// A transaction as the SQLite family's connection: its statements run on the connection.
#[async_trait::async_trait]
impl mnemix_sqlite_family::driver::Conn for Tx<'_> {
    const BACKEND: &'static str = db::BACKEND;

    async fn rows(
        &mut self,
        sql: &'static str,
        params: &[mnemix_sqlite_family::driver::Param<'_>],
    ) -> Result<Vec<mnemix_sqlite_family::driver::Row>> {
        mnemix_sqlite_family::driver::Conn::rows(&mut **self, sql, params).await
    }

    async fn execute(
        &mut self,
        sql: &'static str,
        params: &[mnemix_sqlite_family::driver::Param<'_>],
    ) -> Result<u64> {
        mnemix_sqlite_family::driver::Conn::execute(&mut **self, sql, params).await
    }

    async fn run_script(&mut self, sql: &'static str) -> Result<()> {
        mnemix_sqlite_family::driver::Conn::run_script(&mut **self, sql).await
    }
}

/// Settled, a transaction commits.
impl Lent for Tx<'_> {
    async fn settle(self) -> Result<()> {
        self.commit().await
    }
}

/// A reader connection on loan; given back to the idle list when dropped.
pub(crate) struct ReaderLease<'a> {
    pub(crate) conn: Option<Conn>,
    pub(crate) readers: &'a Readers,
    pub(crate) _permit: OwnedSemaphorePermit,
}

impl Drop for ReaderLease<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.readers
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(conn);
        }
    }
}
