//! Group commit: the writes of this process that arrive while another is being written share
//! one transaction on the writer connection.
//!
//! A write is queued as a job (in the SQLite family's `WriteQueue`, which mnemix-libsql's
//! appends use too), then its caller waits for either its answer or the writer connection. Whoever gets the connection takes every queued job and runs them one after
//! another in one `BEGIN IMMEDIATE` transaction; after `COMMIT` each job answers with its own
//! value or its own error (a conflict, a missing conversation), as it would have alone. SQLite
//! writes one transaction at a time, so the cost of a transaction (the lock, the WAL frames,
//! the `synchronous` fsync) is paid once per group instead of once per write, and the pages the
//! writes share are written once.
//!
//! Every statement string is a hop to sqlx's worker thread, so `BEGIN IMMEDIATE` rides in the
//! group's first statement string and `COMMIT` in its last job's last one ([`GroupTx`]): a
//! lone append is two hops, its read and its write.
//!
//! The group runs in a task of its own, so a caller that stops waiting (a dropped future)
//! never leaves the others' writes half done: they finish and answer as if it had stayed.

use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;
use mnemix_core::{AppendReceipt, MemoryError, Result};
use mnemix_sqlite_family::conversations::AppendRequest;
use mnemix_sqlite_family::driver::{Conn, Param, Row};
use mnemix_sqlite_family::group::{group_error, WriteQueue};
use sqlx::Executor;
use tokio::sync::oneshot;

use crate::connections::{Connections, Lease};
use mnemix_sqlite_family::family::conversations::append_group;

use crate::db::{family_execute, family_rows, family_script, to_memory_error, BACKEND};

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
    fn run(self: Box<Self>, tx: &mut GroupTx) -> WriteFuture<'_, (bool, Answer)>;
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
    F: for<'c> FnOnce(&'c mut GroupTx) -> WriteFuture<'c, Result<T>> + Send + 'static,
{
    fn run(self: Box<Self>, tx: &mut GroupTx) -> WriteFuture<'_, (bool, Answer)> {
        let Pending { work, reply } = *self;
        Box::pin(async move {
            let outcome = work(tx).await;
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

/// A write waiting for the writer connection: an append (the group's appends are read and
/// written together) or any other job.
enum Queued {
    Append(AppendRequest, oneshot::Sender<Result<AppendReceipt>>),
    Job(Box<dyn Job>),
}

impl Queued {
    fn fail(self, e: MemoryError) {
        match self {
            Self::Append(_, reply) => {
                let _ = reply.send(Err(e));
            }
            Self::Job(job) => job.fail(e),
        }
    }
}

/// The writer connection and the writes waiting for it.
pub(crate) struct Writer {
    connections: Connections,
    queue: WriteQueue<Queued>,
}

impl Writer {
    pub(crate) fn new(connections: Connections) -> Self {
        Self {
            connections,
            queue: WriteQueue::default(),
        }
    }

    /// The one writer connection, for writes that need a transaction of their own.
    pub(crate) fn connections(&self) -> &Connections {
        &self.connections
    }

    /// Runs `work` in a write transaction, possibly shared with other writes of this process,
    /// and answers once that transaction has committed. `work` sends its first statement
    /// string through [`Conn::first`] and may send its last through [`Conn::last`]; it
    /// may fail with a decision (not found, conflict, invalid input, already exists) only
    /// before its first write: such an error leaves the others' writes to commit; any other
    /// error rolls the whole group back.
    pub(crate) async fn write<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut GroupTx) -> WriteFuture<'c, Result<T>> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        self.run(Queued::Job(Box::new(Pending { work, reply })), answer)
            .await
    }

    /// Appends in the next write group; see [`append_group`].
    pub(crate) async fn append(&self, request: AppendRequest) -> Result<AppendReceipt> {
        let (reply, answer) = oneshot::channel();
        self.run(Queued::Append(request, reply), answer).await
    }

    /// Queues a write, then waits for its answer or for the connection, whichever comes
    /// first; with the connection, runs every queued write as one group in a task of its own.
    async fn run<T>(&self, write: Queued, answer: oneshot::Receiver<Result<T>>) -> Result<T> {
        let lead = |conn: Result<Lease>, group: Vec<Queued>| {
            match conn {
                Ok(conn) if !group.is_empty() => {
                    tokio::spawn(run_group(conn, group));
                }
                // Another caller took ours: its answer is on the way.
                Ok(_) => {}
                Err(e) => {
                    for write in group {
                        write.fail(group_error(BACKEND, &e));
                    }
                }
            }
            std::future::ready(())
        };
        self.queue
            .submit(BACKEND, write, answer, || self.connections.acquire(), lead)
            .await
    }
}

/// The group's transaction as a job sees it: the writer connection, and whether `BEGIN` and
/// `COMMIT` are still to be sent.
pub(crate) struct GroupTx {
    conn: Lease,
    state: TxState,
    last_job: bool,
}

/// Where the group's transaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxState {
    /// `BEGIN` not sent yet.
    Idle,
    /// `BEGIN` sent.
    Open,
    /// The last job's last statement string ends with `COMMIT`.
    CommitSent,
    /// Committed or rolled back: the connection may be lent again as it is.
    Settled,
}

impl GroupTx {
    async fn send(&mut self, sql: &'static str) -> Result<()> {
        (&mut *self.conn)
            .execute(sql)
            .await
            .map(drop)
            .map_err(to_memory_error)
    }
}

/// The group's transaction as the SQLite family's connection: `BEGIN` rides in the first
/// job's first statement string and `COMMIT` in the last job's last.
#[async_trait]
impl Conn for GroupTx {
    const BACKEND: &'static str = BACKEND;
    const JOINS_STATEMENTS: bool = true;

    async fn rows(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<Vec<Row>> {
        family_rows(&mut self.conn, sql, params).await
    }

    async fn execute(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<u64> {
        family_execute(&mut self.conn, sql, params).await
    }

    async fn run_script(&mut self, sql: &'static str) -> Result<()> {
        family_script(&mut self.conn, sql).await
    }

    /// `with_begin` (the same statements after `BEGIN IMMEDIATE;`) when the group's transaction
    /// is not open yet, else `plain`.
    fn first(&mut self, plain: &'static str, with_begin: &'static str) -> &'static str {
        if self.state == TxState::Idle {
            self.state = TxState::Open;
            with_begin
        } else {
            plain
        }
    }

    /// `with_commit` (the same statements then `;COMMIT`) when this job is the group's last,
    /// else `plain`.
    fn last(&mut self, plain: &'static str, with_commit: &'static str) -> &'static str {
        if self.last_job && self.state == TxState::Open {
            self.state = TxState::CommitSent;
            with_commit
        } else {
            plain
        }
    }
}

impl Drop for GroupTx {
    /// A group stopped with its transaction open (its task dropped as the runtime shut down):
    /// the connection is rolled back before it is lent again.
    fn drop(&mut self) {
        let open = matches!(self.state, TxState::Open | TxState::CommitSent);
        self.conn.in_transaction(open);
    }
}

/// One group: the jobs one after another in one transaction, then the answers.
///
/// No savepoints (each would cost two more hops to sqlx's worker thread per write): a job
/// fails with a decision — not found, conflict, invalid input, already exists — only before it
/// writes (the contract of [`Writer::write`]), so it answers with its error and the group goes
/// on; any other error may have left part of its writes, so the whole group rolls back, the
/// job answers with its error and the others with a retryable `Unavailable` (nothing of theirs
/// was kept, and the front layer retries them).
async fn run_group(conn: Lease, group: Vec<Queued>) {
    let mut tx = GroupTx {
        conn,
        state: TxState::Idle,
        last_job: false,
    };
    let (mut appends, mut replies, mut jobs) = (Vec::new(), Vec::new(), Vec::new());
    for write in group {
        match write {
            Queued::Append(request, reply) => {
                appends.push(request);
                replies.push(reply);
            }
            Queued::Job(job) => jobs.push(job),
        }
    }
    let mut failure = None;
    let mut receipts = Vec::new();
    if !appends.is_empty() {
        tx.last_job = jobs.is_empty();
        match append_group(&mut tx, appends).await {
            Ok(outcomes) => receipts = outcomes,
            Err(e) => failure = Some(e),
        }
    }
    let count = jobs.len();
    let mut done: Vec<Answer> = Vec::with_capacity(count);
    let mut jobs = jobs.into_iter().enumerate();
    if failure.is_none() {
        for (i, job) in jobs.by_ref() {
            tx.last_job = i + 1 == count;
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
    }
    if failure.is_none() && tx.state == TxState::Open {
        // The last write failed with a decision, or wrote nothing: the others' writes commit.
        failure = tx.send("COMMIT").await.err();
    }
    // A failed group's transaction goes; when even the rollback fails, the connection is
    // rolled back again before it is next lent.
    if failure.is_none() || tx.state == TxState::Idle || tx.send("ROLLBACK").await.is_ok() {
        tx.state = TxState::Settled;
    }
    if let Some(e) = &failure {
        for reply in replies {
            let _ = reply.send(Err(group_error(BACKEND, e)));
        }
        for answer in done {
            (answer.send)(Some(group_error(BACKEND, e)));
        }
        for (_, job) in jobs {
            job.fail(group_error(BACKEND, e));
        }
        return;
    }
    for (reply, receipt) in replies.into_iter().zip(receipts) {
        let _ = reply.send(receipt);
    }
    for answer in done {
        (answer.send)(None);
    }
}

/// An error a job decides before it writes anything (see [`run_group`]).
fn is_decision(e: &MemoryError) -> bool {
    e.is_not_found() || e.is_conflict() || e.is_invalid_input() || e.is_already_exists()
}
