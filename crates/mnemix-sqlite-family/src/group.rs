//! Group commit's queue, as both SQLite-family stores hold it: the writes of a process that
//! arrive while another is being written wait together, and whoever gets the writer connection
//! next takes them all and writes them in one transaction. SQLite writes one transaction at a
//! time, so what a transaction costs (the lock, the WAL frames, the `synchronous` fsync, and a
//! driver's own hops) is paid once per group instead of once per write.

use std::future::Future;
use std::sync::{Mutex, PoisonError};

use mnemix_core::{MemoryError, Result};
use tokio::sync::oneshot;

/// Most writes one transaction takes; the rest wait for the next (a bound on how long one
/// group holds the write lock).
pub const MAX_GROUP: usize = 64;

/// Writes `W` waiting for the writer connection.
#[derive(Debug)]
pub struct WriteQueue<W> {
    waiting: Mutex<Vec<W>>,
}

impl<W> Default for WriteQueue<W> {
    fn default() -> Self {
        Self {
            waiting: Mutex::new(Vec::new()),
        }
    }
}

impl<W> WriteQueue<W> {
    /// Queues `write`, whose answer comes on `answer`, then waits for that answer or for the
    /// connection (`acquire`), whichever comes first. With the connection, hands it and every
    /// queued write (at most [`MAX_GROUP`], this one among them unless another caller took it)
    /// to `lead`, which writes them as one group and answers each, then waits again.
    pub async fn submit<T, C, Acquired, Led>(
        &self,
        backend: &'static str,
        write: W,
        mut answer: oneshot::Receiver<Result<T>>,
        acquire: impl Fn() -> Acquired,
        mut lead: impl FnMut(C, Vec<W>) -> Led,
    ) -> Result<T>
    where
        Acquired: Future<Output = C>,
        Led: Future<Output = ()>,
    {
        self.lock().push(write);
        loop {
            tokio::select! {
                biased;
                answered = &mut answer => {
                    return answered.unwrap_or_else(|_| Err(MemoryError::Unavailable {
                        backend,
                        source: "the write's group stopped before it answered".into(),
                    }));
                }
                conn = acquire() => {
                    let group = self.take_group();
                    lead(conn, group).await;
                }
            }
        }
    }

    fn take_group(&self) -> Vec<W> {
        let mut waiting = self.lock();
        let take = waiting.len().min(MAX_GROUP);
        let rest = waiting.split_off(take);
        std::mem::replace(&mut *waiting, rest)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<W>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A write group's failure as each of its writes answers it (a `MemoryError` is not `Clone`),
/// as retryable as it was: nothing of the group was kept, so a retryable failure may be retried.
pub fn group_error(backend: &'static str, e: &MemoryError) -> MemoryError {
    let source = format!("the write's group transaction failed: {e}").into();
    if e.is_retryable() {
        MemoryError::Unavailable { backend, source }
    } else {
        MemoryError::Backend { backend, source }
    }
}
