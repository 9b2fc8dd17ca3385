//! Scenarios of [`WorkingMemoryStore`](mnemix_core::WorkingMemoryStore).

use std::time::Duration;

use mnemix_core::{WorkingMemoryFormat, WorkingMemoryKey, WorkingMemoryUpdate};

use crate::support::{cid, conversation, ResultExt};
use crate::Ctx;

/// A document never set reads as `None`.
pub async fn get_unset_is_none(ctx: &Ctx) {
    let c = conversation(ctx, ctx.scope()).await;
    let b = ctx.backend();
    assert_eq!(
        b.get_working_memory(ctx.scope(), &WorkingMemoryKey::User)
            .await
            .must("user"),
        None
    );
    let key = WorkingMemoryKey::Conversation(c.id);
    assert_eq!(
        b.get_working_memory(ctx.scope(), &key)
            .await
            .must("conversation"),
        None
    );
}

/// A set document reads back exactly, at revision 1, stamped by the store clock.
pub async fn set_then_get_round_trips(ctx: &Ctx) {
    let content = "# Profile\n- name: Alice\n- likes: *tea*\n";
    let stored = ctx
        .backend()
        .set_working_memory(
            ctx.scope(),
            &WorkingMemoryKey::User,
            WorkingMemoryUpdate::markdown(content),
        )
        .await
        .must("set");
    assert_eq!(stored.revision, 1);
    assert_eq!(stored.updated_at, ctx.clock_now());
    let read = ctx
        .backend()
        .get_working_memory(ctx.scope(), &WorkingMemoryKey::User)
        .await
        .must("get");
    assert_eq!(read, Some(stored));
}

/// Every set bumps the revision by one.
pub async fn set_bumps_revision(ctx: &Ctx) {
    let key = WorkingMemoryKey::User;
    for expected in 1..=4 {
        ctx.clock().advance(Duration::from_millis(10));
        let stored = ctx
            .backend()
            .set_working_memory(
                ctx.scope(),
                &key,
                WorkingMemoryUpdate::markdown(format!("v{expected}")),
            )
            .await
            .must("set");
        assert_eq!(stored.revision, expected);
        assert_eq!(stored.updated_at, ctx.clock_now());
    }
}

/// A stale expected revision is `Conflict` with the current revision, and changes nothing.
pub async fn compare_and_set_conflict_reports_current_revision(ctx: &Ctx) {
    let key = WorkingMemoryKey::User;
    let b = ctx.backend();
    b.set_working_memory(ctx.scope(), &key, WorkingMemoryUpdate::markdown("a"))
        .await
        .must("1");
    b.set_working_memory(
        ctx.scope(),
        &key,
        WorkingMemoryUpdate::markdown("b").expecting(1),
    )
    .await
    .must("2");
    let err = b
        .set_working_memory(
            ctx.scope(),
            &key,
            WorkingMemoryUpdate::markdown("c").expecting(1),
        )
        .await
        .must_be_conflict("stale");
    assert_eq!(err.current(), Some(2));
    let read = b
        .get_working_memory(ctx.scope(), &key)
        .await
        .must("get")
        .expect("present");
    assert_eq!(read.content, "b");
}

/// Expected revision 0 means "must not exist yet".
pub async fn compare_and_set_zero_requires_absence(ctx: &Ctx) {
    let key = WorkingMemoryKey::User;
    let b = ctx.backend();
    b.set_working_memory(
        ctx.scope(),
        &key,
        WorkingMemoryUpdate::markdown("first").expecting(0),
    )
    .await
    .must("create");
    let err = b
        .set_working_memory(
            ctx.scope(),
            &key,
            WorkingMemoryUpdate::markdown("again").expecting(0),
        )
        .await
        .must_be_conflict("exists");
    assert_eq!(err.current(), Some(1));
}

/// Clear removes the document and reports whether it existed.
pub async fn clear_removes_and_reports(ctx: &Ctx) {
    let key = WorkingMemoryKey::User;
    let b = ctx.backend();
    assert!(!b
        .clear_working_memory(ctx.scope(), &key)
        .await
        .must("clear unset"));
    b.set_working_memory(ctx.scope(), &key, WorkingMemoryUpdate::markdown("x"))
        .await
        .must("set");
    assert!(b
        .clear_working_memory(ctx.scope(), &key)
        .await
        .must("clear"));
    assert_eq!(
        b.get_working_memory(ctx.scope(), &key).await.must("get"),
        None
    );
}

/// User and conversation documents are separate, and so are two conversations'.
pub async fn user_and_conversation_documents_are_separate(ctx: &Ctx) {
    let (c1, c2) = (
        conversation(ctx, ctx.scope()).await,
        conversation(ctx, ctx.scope()).await,
    );
    let b = ctx.backend();
    let k1 = WorkingMemoryKey::Conversation(c1.id);
    let k2 = WorkingMemoryKey::Conversation(c2.id);
    b.set_working_memory(
        ctx.scope(),
        &WorkingMemoryKey::User,
        WorkingMemoryUpdate::markdown("user"),
    )
    .await
    .must("u");
    b.set_working_memory(ctx.scope(), &k1, WorkingMemoryUpdate::markdown("one"))
        .await
        .must("c1");
    let read = |k| async move {
        b.get_working_memory(ctx.scope(), &k)
            .await
            .must("get")
            .map(|w| w.content)
    };
    assert_eq!(read(WorkingMemoryKey::User).await.as_deref(), Some("user"));
    assert_eq!(read(k1).await.as_deref(), Some("one"));
    assert_eq!(read(k2).await, None);
}

/// A conversation key must name a conversation of the scope.
pub async fn conversation_key_requires_existing_conversation(ctx: &Ctx) {
    let key = WorkingMemoryKey::Conversation(cid("nope"));
    let b = ctx.backend();
    b.get_working_memory(ctx.scope(), &key)
        .await
        .must_be_not_found("get");
    b.set_working_memory(ctx.scope(), &key, WorkingMemoryUpdate::markdown("x"))
        .await
        .must_be_not_found("set");
    b.clear_working_memory(ctx.scope(), &key)
        .await
        .must_be_not_found("clear");
}

/// JSON documents must parse; they round-trip as text, format included.
pub async fn json_documents_must_parse(ctx: &Ctx) {
    let key = WorkingMemoryKey::User;
    let b = ctx.backend();
    b.set_working_memory(ctx.scope(), &key, WorkingMemoryUpdate::json("{not json"))
        .await
        .must_be_invalid("bad json");
    assert_eq!(
        b.get_working_memory(ctx.scope(), &key).await.must("get"),
        None,
        "nothing written"
    );
    let doc = r#"{"z": 1, "a": {"list": [1, "two", null]}, "s": "\u0000"}"#;
    let stored = b
        .set_working_memory(ctx.scope(), &key, WorkingMemoryUpdate::json(doc))
        .await
        .must("json");
    assert_eq!(stored.format, WorkingMemoryFormat::Json);
    let read = b
        .get_working_memory(ctx.scope(), &key)
        .await
        .must("get")
        .expect("set");
    assert_eq!(read.content, doc, "JSON kept byte-exactly as text");
    assert_eq!(read.format, WorkingMemoryFormat::Json);
}
