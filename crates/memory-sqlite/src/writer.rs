//! Group commit: the writes of this process that arrive while another is being written share
//! one transaction on the writer connection.
//!
//! A write is queued as a job, then its caller waits for either its answer or the writer
//! connection. Whoever gets the connection takes every queued job and runs them one after
//! another in one `BEGIN IMMEDIATE` transaction; after `COMMIT` each job answers with its own
//! value or its own error (a conflict, a missing conversation), as it would have alone. SQLite
//! writes one transaction at a time, so the cost of a transaction (two hops to sqlx's worker
//! thread, the lock, the WAL frames, the `synchronous` fsync) is paid once per group instead of
//! once per write, and the pages the writes share are written once.
//!
//! The group runs in a task of its own, so a caller that stops waiting (a dropped future)
//! never leaves the others' writes half done: they finish and answer as if it had stayed.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use memory_core::{MemoryError, Result};
use sqlx::pool::PoolConnection;
use sqlx::sqlite::SqliteConnection;
use sqlx::{Connection, Sqlite, SqlitePool};
use tokio::sync::oneshot;

use crate::db::{to_memory_error, BACKEND};

/// A future borrowing the writer connection.
pub(crate) type WriteFuture<'c, T> = Pin<Box<dyn Future<Output = T> + Send + 'c>>;

/// What a job leaves for after the commit: answering its caller with its value, or with the
/// group's failure; and, for a job that failed, whether its error may have left writes behind.
struct Answer {
    send: Box<dyn FnOnce(Option<MemoryError>) + Send>,
    poisons: bool,
}

/// A queued write.
trait Job: Send {
    /// Runs the write in the group's transaction: whether it succeeded, and how to answer.
    fn run(self: Box<Self>, conn: &mut SqliteConnection) -> WriteFuture<'_, (bool, Answer)>;
    /// Answers with `e` without running.
    fn fail(self: Box<Self>, e: MemoryError);
}

struct Pending<T, F> {
    work: F,
    reply: oneshot::Sender<Result<T>>,
}

impl<T, F> Job for Pending<T, F>
where
    T: Send + 'static,
    F: for<'c> FnOnce(&'c mut SqliteConnection) -> WriteFuture<'c, Result<T>> + Send + 'static,
{
    fn run(self: Box<Self>, conn: &mut SqliteConnection) -> WriteFuture<'_, (bool, Answer)> {
        let Pending { work, reply } = *self;
        Box::pin(async move {
            let outcome = work(conn).await;
            let succeeded = outcome.is_ok();
            let poisons = outcome.as_ref().err().is_some_and(|e| !is_decision(e));
            let send = Box::new(move |group_failed| {
                let _ = reply.send(match (outcome, group_failed) {
                    (Ok(_), Some(e)) => Err(e),
                    (outcome, _) => outcome,
                });
            });
            (succeeded, Answer { send, poisons })
        })
    }

    fn fail(self: Box<Self>, e: MemoryError) {
        let _ = self.reply.send(Err(e));
    }
}

/// Most writes one transaction takes; the rest wait for the next (a bound on how long one
/// group holds the write lock).
const MAX_GROUP: usize = 64;

/// The writer connection and the writes waiting for it.
#[derive(Clone)]
pub(crate) struct Writer {
    pool: SqlitePool,
    queue: Arc<Mutex<Vec<Box<dyn Job>>>>,
}

impl Writer {
    pub(crate) fn new(pool: SqlitePool) -> Self {
        Self {
            pool,
            queue: Arc::default(),
        }
    }

    /// The pool of the one writer connection, for writes that need a transaction of their own.
    pub(crate) fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Runs `work` in a write transaction, possibly shared with other writes of this process,
    /// and answers once that transaction has committed. `work` must leave the connection as it
    /// found it (no `COMMIT`, no `BEGIN`), and may fail with a decision (not found, conflict,
    /// invalid input, already exists) only before its first write: such an error leaves the
    /// others' writes to commit; any other error rolls the whole group back.
    pub(crate) async fn write<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> WriteFuture<'c, Result<T>> + Send + 'static,
    {
        let (reply, mut answer) = oneshot::channel();
        self.queue
            .lock()
            .expect("write queue")
            .push(Box::new(Pending { work, reply }));
        loop {
            tokio::select! {
                biased;
                answered = &mut answer => {
                    return answered.unwrap_or_else(|_| Err(MemoryError::Unavailable {
                        backend: BACKEND,
                        source: "the write's group stopped before it answered".into(),
                    }));
                }
                conn = self.pool.acquire() => {
                    let group = self.take_group();
                    match conn {
                        Ok(conn) if !group.is_empty() => {
                            tokio::spawn(run_group(conn, group));
                        }
                        // Another caller took ours: its answer is on the way.
                        Ok(_) => {}
                        Err(e) => {
                            let e = to_memory_error(e);
                            for job in group {
                                job.fail(group_error(&e));
                            }
                        }
                    }
                }
            }
        }
    }

    fn take_group(&self) -> Vec<Box<dyn Job>> {
        let mut queue = self.queue.lock().expect("write queue");
        let take = queue.len().min(MAX_GROUP);
        let rest = queue.split_off(take);
        std::mem::replace(&mut *queue, rest)
    }
}

/// One group: `BEGIN IMMEDIATE`, the jobs one after another, `COMMIT`, the answers.
///
/// No savepoints (each would cost two more hops to sqlx's worker thread per write): a job
/// fails with a decision — not found, conflict, invalid input, already exists — only before it
/// writes (the contract of [`Writer::write`]), so it answers with its error and the group goes
/// on; any other error may have left part of its writes, so the whole group rolls back, the
/// job answers with its error and the others with a retryable `Unavailable` (nothing of theirs
/// was kept, and the front layer retries them).
async fn run_group(mut conn: PoolConnection<Sqlite>, group: Vec<Box<dyn Job>>) {
    let mut tx = match conn.begin_with("BEGIN IMMEDIATE").await {
        Ok(tx) => tx,
        Err(e) => {
            let e = to_memory_error(e);
            for job in group {
                job.fail(group_error(&e));
            }
            return;
        }
    };
    let mut done: Vec<Answer> = Vec::with_capacity(group.len());
    let mut jobs = group.into_iter();
    let mut failure = None;
    for job in jobs.by_ref() {
        match job.run(&mut tx).await {
            (true, answer) => done.push(answer),
            (false, answer) => {
                let poisons = answer.poisons;
                (answer.send)(None);
                if poisons {
                    failure = Some(MemoryError::Unavailable {
                        backend: BACKEND,
                        source: "another write of its group failed and rolled the group back"
                            .into(),
                    });
                    break;
                }
            }
        }
    }
    let failure = match failure {
        Some(e) => Some(e), // the transaction rolls back as it drops
        None => tx.commit().await.err().map(to_memory_error),
    };
    for answer in done {
        (answer.send)(failure.as_ref().map(group_error));
    }
    if let Some(e) = &failure {
        for job in jobs {
            job.fail(group_error(e));
        }
    }
}

/// An error a job decides before it writes anything (see [`run_group`]).
fn is_decision(e: &MemoryError) -> bool {
    e.is_not_found() || e.is_conflict() || e.is_invalid_input() || e.is_already_exists()
}

/// The group's failure, once per job (a `MemoryError` is not `Clone`), as retryable as it was.
fn group_error(e: &MemoryError) -> MemoryError {
    let source = format!("the write's group transaction failed: {e}").into();
    if e.is_retryable() {
        MemoryError::Unavailable {
            backend: BACKEND,
            source,
        }
    } else {
        MemoryError::Backend {
            backend: BACKEND,
            source,
        }
    }
}
