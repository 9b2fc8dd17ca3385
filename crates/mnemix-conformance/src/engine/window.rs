//! The window's thread: one per subject and agent key.

use std::collections::BTreeSet;
use std::sync::Arc;

use mnemix_core::ConversationId;

use crate::support::ResultExt;
use crate::Ctx;

use super::{config, memory, seqs, turn};

/// Concurrent first uses of `auto_conversation` meet on one thread per (subject, agent key);
/// another key or subject gets its own, and the history is the tail, replay-safe.
pub async fn auto_conversation_is_one_thread_per_subject_and_agent(ctx: &Ctx) {
    let memory = Arc::new(memory(ctx, config()));
    let tasks = (0..8).map(|_| {
        let memory = memory.clone();
        let scope = ctx.scope().clone();
        tokio::spawn(async move { memory.auto_conversation(&scope, "support", 10).await })
    });
    let threads: Vec<_> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(|t| t.expect("task").must("auto conversation"))
        .collect();
    let ids: BTreeSet<&ConversationId> = threads.iter().map(|(t, _)| &t.id).collect();
    assert_eq!(ids.len(), 1, "one thread: {ids:?}");
    let (thread, history) = &threads[0];
    assert!(history.is_empty());
    assert_eq!(thread.agent.as_deref(), Some("support"));

    let (sales, _) = memory
        .auto_conversation(ctx.scope(), "sales", 10)
        .await
        .must("other agent");
    let (theirs, _) = memory
        .auto_conversation(ctx.other_scope(), "support", 10)
        .await
        .must("other subject");
    assert_ne!(sales.id, thread.id);
    assert_eq!(
        ctx.backend()
            .get_conversation(ctx.other_scope(), &theirs.id)
            .await
            .must("theirs")
            .scope,
        *ctx.other_scope()
    );

    memory
        .commit(ctx.scope(), &thread.id, (1..=4).flat_map(turn).collect())
        .await
        .must("commit");
    let (again, history) = memory
        .auto_conversation(ctx.scope(), "support", 3)
        .await
        .must("again");
    assert_eq!(again.id, thread.id);
    assert_eq!(seqs(&history), [6, 7, 8]);
    memory
        .auto_conversation(ctx.scope(), "", 3)
        .await
        .must_be_invalid("an agent key follows identifier rules");
}
