//! Sessions: the engine's history as an agent framework's session store reads it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use mnemix_core::{ConversationId, Message, Role};
use mnemix_engine::{Memory, Session, SessionView, SUMMARY_METADATA_KEY};
use serde_json::json;

use crate::support::{text, ResultExt};
use crate::Ctx;

use super::{config, memory, SeqSummarizer};

/// Stores messages `m{i}` through a session, users on odd `i`, the assistant on even.
async fn store_messages(run: &Session<'_>, range: std::ops::RangeInclusive<usize>) {
    for i in range {
        let role = if i % 2 == 1 {
            Role::User
        } else {
            Role::Assistant
        };
        run.store(text(&format!("m{i}"), role, &format!("message {i}")))
            .await
            .must("store");
    }
}

fn ids(messages: &[Message]) -> Vec<&str> {
    messages.iter().map(|m| m.id.as_str()).collect()
}

/// A session reads the whole conversation (history and its own messages); `appended` is only
/// what this run stored, once per message id, not what another writer appended meanwhile; a
/// later session sees it all as history. A session on a missing conversation creates it.
pub async fn session_reads_history_and_appends_only_its_own(ctx: &Ctx) {
    let memory = memory(ctx, config());
    let thread = ConversationId::new("session-thread").unwrap();
    let first = memory
        .session(ctx.scope(), &thread, SessionView::Full)
        .await
        .must("open on a missing conversation");
    for (id, role) in [("h1", Role::User), ("h2", Role::Assistant)] {
        first.store(text(id, role, id)).await.must("store");
    }
    let run = memory
        .session(ctx.scope(), &thread, SessionView::Full)
        .await
        .must("open");
    assert!(run.appended().await.must("appended").is_empty());
    run.store(text("r1", Role::User, "r1")).await.must("store");
    // Another writer appends meanwhile: history to this run, not its own.
    ctx.backend()
        .append(
            ctx.scope(),
            &thread,
            vec![text("x1", Role::Assistant, "x1")],
            mnemix_core::AppendOptions::default(),
        )
        .await
        .must("other writer");
    run.store(text("r2", Role::User, "r2")).await.must("store");
    run.store(text("r1", Role::User, "r1")).await.must("retry");
    run.store(text("r1", Role::User, "changed"))
        .await
        .must_be_conflict("same id, other content");
    assert_eq!(
        ids(&run.read().await.must("read")),
        ["h1", "h2", "r1", "x1", "r2"]
    );
    assert_eq!(ids(&run.appended().await.must("appended")), ["r1", "r2"]);
    let later = memory
        .session(ctx.scope(), &thread, SessionView::Full)
        .await
        .must("open later");
    assert_eq!(later.read().await.must("read").len(), 5);
    assert!(later.appended().await.must("appended").is_empty());
    assert!(memory
        .session(ctx.scope(), &thread, SessionView::SlidingWindow(0))
        .await
        .is_err_and(|e| e.is_invalid_input()));
}

/// A sliding-window session reads only the last `n` messages; `appended` still holds all of
/// the run's.
pub async fn sliding_window_session_reads_the_last_messages(ctx: &Ctx) {
    let memory = memory(ctx, config());
    let thread = ConversationId::new("window-thread").unwrap();
    let run = memory
        .session(ctx.scope(), &thread, SessionView::SlidingWindow(3))
        .await
        .must("open");
    store_messages(&run, 1..=7).await;
    assert_eq!(ids(&run.read().await.must("read")), ["m5", "m6", "m7"]);
    assert_eq!(run.appended().await.must("appended").len(), 7);
}

/// A summarizing session reads one summary of what left the window, then the last `keep`
/// messages; each message is summarised once, however often the session is read, and the
/// summary is the one `prepare` uses. Without a summarizer it cannot be opened.
pub async fn summarizing_session_summarizes_what_left_the_window(ctx: &Ctx) {
    let thread = ConversationId::new("summary-thread").unwrap();
    memory(ctx, config())
        .session(ctx.scope(), &thread, SessionView::Summarizing { keep: 4 })
        .await
        .must_be_invalid("no summarizer");
    let summarizer = Arc::new(SeqSummarizer::default());
    let memory = Memory::builder(ctx.backend_arc())
        .config(config())
        .summarizer(summarizer.clone())
        .build()
        .must("build");
    let run = memory
        .session(ctx.scope(), &thread, SessionView::Summarizing { keep: 4 })
        .await
        .must("open");
    store_messages(&run, 1..=4).await;
    assert_eq!(
        ids(&run.read().await.must("read")),
        ["m1", "m2", "m3", "m4"]
    );
    assert_eq!(summarizer.calls.load(Ordering::SeqCst), 0);
    store_messages(&run, 5..=10).await;
    let read = run.read().await.must("read");
    assert_eq!(ids(&read[1..]), ["m7", "m8", "m9", "m10"]);
    assert_eq!(read[0].role, Role::User);
    assert_eq!(
        read[0].metadata.get(SUMMARY_METADATA_KEY),
        Some(&json!(6)),
        "the summary covers seqs 1–6"
    );
    assert!(read[0].text().contains("1,2,3,4,5,6"), "{}", read[0].text());
    assert_eq!(run.read().await.must("read again"), read);
    assert_eq!(summarizer.calls.load(Ordering::SeqCst), 1);
    store_messages(&run, 11..=12).await;
    let read = run.read().await.must("read");
    assert!(
        read[0].text().contains("1,2,3,4,5,6,7,8]"),
        "{}",
        read[0].text()
    );
    assert_eq!(summarizer.calls.load(Ordering::SeqCst), 2);
    assert_eq!(run.appended().await.must("appended").len(), 12);
}
