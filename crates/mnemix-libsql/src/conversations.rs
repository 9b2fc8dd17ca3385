//! Conversations, their messages and cursors, and export and restore, as the SQLite family
//! writes them once (`mnemix_sqlite_family::family::store`), each call in a transaction of its
//! own; appends in a group of their own (below).

use std::sync::Arc;

use libsql::TransactionBehavior;
use mnemix_core::{AppendReceipt, Result};
use mnemix_sqlite_family::conversations::AppendRequest;
use mnemix_sqlite_family::family::conversations as family;
use mnemix_sqlite_family::group::group_error;
use tokio::sync::{oneshot, OwnedMutexGuard};

use crate::db::{Conn, DbResult, BACKEND};
use crate::LibsqlStore;

mnemix_sqlite_family::conversation_store!(LibsqlStore);
mnemix_sqlite_family::transfer_store!(LibsqlStore);

/// An append waiting for the writer connection, and where its answer goes.
pub(crate) type QueuedAppend = (AppendRequest, oneshot::Sender<Result<AppendReceipt>>);

impl LibsqlStore {
    /// Group commit ([`WriteQueue`](mnemix_sqlite_family::group::WriteQueue)): the appends of
    /// this process that arrive while another write holds the writer connection share one
    /// transaction, written together ([`AppendGroup`]), each answering with its own receipt or
    /// its own error.
    ///
    /// A caller that stops waiting (a dropped future) must not leave the others' appends half
    /// done. An embedded database runs each statement on the calling thread, so the group's
    /// future ends in the poll that starts it and cannot be dropped halfway: it runs here,
    /// without a task's hop (a sizeable part of a local append: BENCHMARKS.md, W1). A remote
    /// database waits
    /// on the network, so its group runs in a task of its own.
    pub(crate) async fn append_grouped(&self, request: AppendRequest) -> Result<AppendReceipt> {
        let (reply, answer) = oneshot::channel();
        let lead = |writer, group: Vec<QueuedAppend>| async move {
            // An empty group: another caller took ours, and its answer is on the way.
            if group.is_empty() {
                return;
            }
            let group = run_append_group(writer, group);
            if self.config.is_remote() {
                tokio::spawn(group);
            } else {
                group.await;
            }
        };
        self.appends
            .submit(
                BACKEND,
                (request, reply),
                answer,
                || Arc::clone(&self.writer).lock_owned(),
                lead,
            )
            .await
    }
}

/// One group of appends in one `BEGIN IMMEDIATE` transaction, then the answers: each append's
/// own outcome after the commit, or, when the transaction fails, the failure for all (nothing of
/// theirs was kept).
async fn run_append_group(writer: OwnedMutexGuard<Conn>, group: Vec<QueuedAppend>) {
    let (requests, replies): (Vec<_>, Vec<_>) = group.into_iter().unzip();
    match append_group(&writer, requests).await {
        Ok(outcomes) => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                let _ = reply.send(outcome);
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(group_error(BACKEND, &e)));
            }
        }
    }
}

async fn append_group(
    conn: &Conn,
    requests: Vec<AppendRequest>,
) -> Result<Vec<Result<AppendReceipt>>> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .await
        .db()?;
    let outcomes = family::append_group(&mut { conn }, requests).await?;
    tx.commit().await.db()?;
    Ok(outcomes)
}
