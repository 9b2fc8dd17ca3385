//! Deletion cascades and `forget_all`.

use std::time::Duration;

use mnemix_core::{
    AppendOptions, ConversationQuery, FactQuery, FactStore, LoadOptions, MemoryError, Metric,
    NewFact, RecallQuery, RememberOptions, Scope, VectorQuery, WorkingMemoryKey,
    WorkingMemoryUpdate,
};
use serde_json::json;

use crate::support::{conversation_with, seed_everything, texts, unit_vector, ResultExt};
use crate::vectors::{collection, record, vid, DIMS};
use crate::Ctx;

/// Deleting a conversation removes its messages, vectors, conversation working memory and cursors.
pub async fn delete_conversation_cascades(ctx: &Ctx) {
    let b = ctx.backend();
    let c = conversation_with(ctx, texts("m", 4)).await;
    let keep = conversation_with(ctx, texts("k", 1)).await;
    let vectors = ctx.capabilities().has_vectors();
    let spec = if vectors {
        Some(collection(ctx, Metric::Cosine).await)
    } else {
        None
    };
    if let Some(spec) = &spec {
        let mut linked = record("msg-vec", unit_vector(DIMS, 1), json!({}));
        linked.conversation_id = Some(c.id.clone());
        let mut other = record("keep-vec", unit_vector(DIMS, 2), json!({}));
        other.conversation_id = Some(keep.id.clone());
        b.upsert_vectors(ctx.scope(), &spec.name, vec![linked, other])
            .await
            .must("upsert");
    }
    let key = WorkingMemoryKey::Conversation(c.id.clone());
    b.set_working_memory(ctx.scope(), &key, WorkingMemoryUpdate::markdown("wm"))
        .await
        .must("wm");
    b.advance_cursor(ctx.scope(), &c.id, "extract", 4)
        .await
        .must("cursor");

    assert!(b
        .delete_conversation(ctx.scope(), &c.id)
        .await
        .must("delete"));
    if let Some(spec) = &spec {
        b.get_vector(ctx.scope(), &spec.name, &vid("msg-vec"))
            .await
            .must_be_not_found("linked vector");
        b.get_vector(ctx.scope(), &spec.name, &vid("keep-vec"))
            .await
            .must("other conversation's vector kept");
    }
    b.get_working_memory(ctx.scope(), &key)
        .await
        .must_be_not_found("conversation working memory");
    // A conversation re-created under the same id starts empty: nothing was left behind.
    let again = mnemix_core::NewConversation::default().with_id(c.id.clone());
    b.create_conversation(ctx.scope(), again)
        .await
        .must("re-create");
    assert!(b
        .load(ctx.scope(), &c.id, LoadOptions::raw())
        .await
        .must("load")
        .is_empty());
    assert_eq!(
        b.cursor(ctx.scope(), &c.id, "extract").await.must("cursor"),
        None
    );
    assert_eq!(
        b.get_working_memory(ctx.scope(), &key).await.must("wm"),
        None
    );
}

/// `forget_all` removes expired facts but counts only those readers could see, as `forget`
/// reports them: whether an expired row is still stored differs between backends.
pub async fn forget_all_counts_only_unexpired_facts(ctx: &Ctx) {
    let b = ctx.backend();
    let now = ctx.clock_now();
    let expiring = |text: &str, at| NewFact::new(text).with_expires_at(at);
    for fact in [
        expiring("expires right now", now),
        expiring(
            "expires in a minute",
            now.saturating_add(Duration::from_mins(1)),
        ),
        expiring(
            "expires in an hour",
            now.saturating_add(Duration::from_hours(1)),
        ),
        NewFact::new("never expires"),
    ] {
        b.remember(ctx.scope(), fact, RememberOptions::default())
            .await
            .must("remember");
    }
    ctx.clock().advance(Duration::from_mins(1));
    let receipt = b.forget_all(ctx.scope()).await.must("forget_all");
    assert_eq!(receipt.facts, 2, "{receipt:?}");
    ctx.clock().advance(Duration::from_hours(2));
    assert_eq!(
        b.forget_all(ctx.scope()).await.must("again").facts,
        0,
        "nothing is left to count"
    );
}

/// `forget_all` returns a receipt counting every kind of row removed.
pub async fn forget_all_receipt_counts_every_row(ctx: &Ctx) {
    let expected = seed_everything(ctx).await;
    let receipt = ctx
        .backend()
        .forget_all(ctx.scope())
        .await
        .must("forget_all");
    assert_eq!(receipt, expected);
    let again = ctx
        .backend()
        .forget_all(ctx.scope())
        .await
        .must("forget_all again");
    assert_eq!(again.total(), 0, "nothing left to forget");
}

/// An erasure's dry run (`count_owned`) counts what `forget_all` then erases, expired facts
/// left out as the receipt leaves them out, erases nothing, and refuses the shared scope.
pub async fn count_owned_is_the_receipt_forget_all_then_gives(ctx: &Ctx) {
    let b = ctx.backend();
    let expected = seed_everything(ctx).await;
    let now = ctx.clock_now();
    b.remember(
        ctx.scope(),
        NewFact::new("expires in a minute")
            .with_expires_at(now.saturating_add(Duration::from_mins(1))),
        RememberOptions::default(),
    )
    .await
    .must("remember");
    ctx.clock().advance(Duration::from_mins(2));
    let counted = b.count_owned(ctx.scope()).await.must("count_owned");
    let mut expected = expected;
    if ctx.capabilities().change_feed {
        // The expired fact is gone; the change its remember recorded is not.
        expected.changes += 1;
    }
    assert_eq!(counted, expected, "the expired fact is not counted");
    assert_eq!(
        b.count_owned(ctx.scope()).await.must("again"),
        counted,
        "a dry run erases nothing"
    );
    let other = b
        .count_owned(ctx.other_scope())
        .await
        .must("another subject");
    assert_eq!(b.forget_all(ctx.scope()).await.must("forget_all"), counted);
    assert_eq!(b.count_owned(ctx.scope()).await.must("after").total(), 0);
    assert_eq!(
        b.count_owned(ctx.other_scope())
            .await
            .must("another subject after"),
        other
    );
    let shared = Scope::shared(ctx.scope().namespace().as_str()).must("shared scope");
    assert!(matches!(
        b.count_owned(&shared).await,
        Err(MemoryError::InvalidInput(_))
    ));
}

/// After `forget_all` no read of the subject finds anything.
pub async fn forget_all_leaves_nothing_behind(ctx: &Ctx) {
    seed_everything(ctx).await;
    let b = ctx.backend();
    b.forget_all(ctx.scope()).await.must("forget_all");
    let s = ctx.scope();
    assert!(b
        .list_conversations(s, ConversationQuery::default())
        .await
        .must("conversations")
        .items
        .is_empty());
    let facts = FactQuery::default().with_include_superseded(true);
    assert!(b.list_facts(s, facts).await.must("facts").items.is_empty());
    assert!(b.history(s, "city").await.must("history").is_empty());
    assert!(FactStore::recall(b, s, RecallQuery::text("likes"))
        .await
        .must("recall")
        .is_empty());
    assert_eq!(
        b.get_working_memory(s, &WorkingMemoryKey::User)
            .await
            .must("wm"),
        None
    );
    assert!(b
        .list_suspended(s, None)
        .await
        .must("checkpoints")
        .is_empty());
    let collections = if ctx.capabilities().has_vectors() {
        b.list_collections(ctx.namespace())
            .await
            .must("collections")
    } else {
        Vec::new()
    };
    for spec in collections {
        let hits = b
            .search(s, &spec.name, VectorQuery::new(unit_vector(DIMS, 0), 10))
            .await
            .must("search");
        assert!(hits.is_empty(), "vectors left in {}", spec.name);
    }
}

/// `forget_all` leaves other subjects, the shared scope and the cache untouched.
pub async fn forget_all_leaves_others_untouched(ctx: &Ctx) {
    seed_everything(ctx).await;
    let b = ctx.backend();
    let other = ctx.other_scope();
    let theirs = b
        .create_conversation(other, mnemix_core::NewConversation::default())
        .await
        .must("theirs");
    b.append(other, &theirs.id, texts("t", 2), AppendOptions::default())
        .await
        .must("append");
    b.remember(
        &ctx.shared_scope(),
        NewFact::new("shared knowledge"),
        RememberOptions::default(),
    )
    .await
    .must("shared");
    b.cache_set(ctx.namespace(), "k", b"v".to_vec(), None)
        .await
        .must("cache");
    let spec = if ctx.capabilities().has_vectors() {
        Some(collection(ctx, Metric::Cosine).await)
    } else {
        None
    };
    if let Some(spec) = &spec {
        b.upsert_vectors(
            other,
            &spec.name,
            vec![record("c0", unit_vector(DIMS, 0), json!({}))],
        )
        .await
        .must("their vector");
    }
    b.forget_all(ctx.scope()).await.must("forget_all");
    assert_eq!(
        b.load(other, &theirs.id, LoadOptions::raw())
            .await
            .must("theirs")
            .len(),
        2
    );
    assert_eq!(
        FactStore::recall(b, &ctx.shared_scope(), RecallQuery::text("shared"))
            .await
            .must("shared")
            .len(),
        1
    );
    assert!(b
        .cache_get(ctx.namespace(), "k")
        .await
        .must("cache")
        .is_some());
    if let Some(spec) = &spec {
        b.get_vector(other, &spec.name, &vid("c0"))
            .await
            .must("their vector with the same id");
    }
}

/// `forget_all` of the shared scope (no subject) is `InvalidInput`.
pub async fn forget_all_requires_a_subject(ctx: &Ctx) {
    ctx.backend()
        .forget_all(&ctx.shared_scope())
        .await
        .must_be_invalid("shared scope");
}

/// `forget_namespace` erases every scope of the namespace (the shared one too), its
/// collections and its cache entries, counts them, and leaves other namespaces untouched.
pub async fn forget_namespace_erases_everything_in_it_and_nothing_else(ctx: &Ctx) {
    let b = ctx.backend();
    let seeded = seed_everything(ctx).await;
    conversation_with_in(ctx, ctx.other_scope(), 2).await;
    b.remember(
        &ctx.shared_scope(),
        NewFact::new("shared knowledge"),
        RememberOptions::default(),
    )
    .await
    .must("shared fact");
    b.cache_set(ctx.namespace(), "k", b"v".to_vec(), None)
        .await
        .must("cache");
    let foreign = ctx.foreign_namespace_scope();
    let kept = conversation_with_in(ctx, &foreign, 1).await;
    b.cache_set(foreign.namespace(), "k", b"kept".to_vec(), None)
        .await
        .must("foreign cache");

    let receipt = b
        .forget_namespace(ctx.namespace())
        .await
        .must("forget_namespace");
    assert_eq!(
        receipt.scopes, 3,
        "subject, other subject, shared: {receipt:?}"
    );
    let mut expected = seeded;
    expected.conversations += 1;
    expected.messages += 2;
    expected.facts += 1;
    if ctx.capabilities().change_feed {
        // The other subject's conversation and append.
        expected.changes += 2;
    }
    assert_eq!(receipt.records, expected, "every row counted");
    let collections = if ctx.capabilities().has_vectors() {
        2
    } else {
        0
    };
    assert_eq!(receipt.collections, collections, "{receipt:?}");
    assert_eq!(receipt.cache_entries, 1, "{receipt:?}");

    let namespaces = b.namespaces().await.must("namespaces");
    assert!(!namespaces.contains(ctx.namespace()), "{namespaces:?}");
    assert!(namespaces.contains(foreign.namespace()), "{namespaces:?}");
    assert!(b.scopes(ctx.namespace()).await.must("scopes").is_empty());
    assert!(b
        .export_namespace(ctx.namespace())
        .await
        .must("export")
        .is_empty());
    assert!(
        FactStore::recall(b, &ctx.shared_scope(), RecallQuery::text("shared"))
            .await
            .must("shared recall")
            .is_empty()
    );
    assert_eq!(
        b.load(&foreign, &kept.id, LoadOptions::raw())
            .await
            .must("the other namespace's conversation")
            .len(),
        1
    );
    assert_eq!(
        b.cache_get(foreign.namespace(), "k").await.must("cache"),
        Some(b"kept".to_vec())
    );
    let again = b
        .forget_namespace(ctx.namespace())
        .await
        .must("forget_namespace again");
    assert_eq!(again.total(), 0, "nothing left: {again:?}");
    b.forget_namespace(foreign.namespace())
        .await
        .must("the other namespace");
}

async fn conversation_with_in(
    ctx: &Ctx,
    scope: &mnemix_core::Scope,
    messages: usize,
) -> mnemix_core::Conversation {
    let b = ctx.backend();
    let conversation = b
        .create_conversation(scope, mnemix_core::NewConversation::default())
        .await
        .must("conversation");
    b.append(
        scope,
        &conversation.id,
        texts("n", messages),
        AppendOptions::default(),
    )
    .await
    .must("append");
    conversation
}
