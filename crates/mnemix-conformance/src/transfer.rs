//! Scenarios of [`TransferStore`](mnemix_core::TransferStore): export, restore, and what a
//! store says it holds.

use std::time::Duration;

use mnemix_core::transfer::Record;
use mnemix_core::transfer::{as_restored_by, Digest};
use mnemix_core::{
    AppendOptions, CheckpointId, CheckpointStatus, FactStore, LoadOptions, Metric, NewCheckpoint,
    NewConversation, NewFact, RecallQuery, RememberOptions, Scope, StoredMessage, Timestamp,
    VectorQuery,
};
use serde_json::json;

use crate::support::{cid, seed_every_kind, texts, unit_vector, ResultExt};
use crate::vectors::{collection, record, DIMS};
use crate::Ctx;

/// Everything a reader sees of the main scope, to compare before and after a restore.
#[derive(Debug, PartialEq)]
struct Observed {
    window: Vec<StoredMessage>,
    recall: Vec<String>,
    history: Vec<String>,
    suspended: Vec<String>,
    nearest: Option<String>,
    cursor: Option<u64>,
}

async fn observe(ctx: &Ctx, thread: &mnemix_core::ConversationId) -> Observed {
    let (b, s) = (ctx.backend(), ctx.scope());
    let nearest = if ctx.capabilities().has_vectors() {
        let query = VectorQuery::new(unit_vector(DIMS, 1), 1);
        b.search(s, "col-cosine", query)
            .await
            .must("search")
            .first()
            .map(|hit| hit.record.id.to_string())
    } else {
        None
    };
    Observed {
        window: b
            .load(s, thread, LoadOptions::raw())
            .await
            .must("load window"),
        recall: FactStore::recall(b, s, RecallQuery::text("likes tea in Oslo"))
            .await
            .must("recall")
            .into_iter()
            .map(|f| f.fact.text)
            .collect(),
        history: b
            .history(s, "city")
            .await
            .must("history")
            .into_iter()
            .map(|f| f.text)
            .collect(),
        suspended: b
            .list_suspended(s, None)
            .await
            .must("suspended")
            .into_iter()
            .map(|c| c.id.to_string())
            .collect(),
        nearest,
        cursor: b.cursor(s, thread, "extract").await.must("cursor"),
    }
}

async fn export_all(ctx: &Ctx) -> (Vec<Record>, Vec<Record>) {
    let b = ctx.backend();
    (
        b.export_namespace(ctx.namespace())
            .await
            .must("export namespace"),
        b.export_scope(ctx.scope()).await.must("export scope"),
    )
}

/// An export restored into an emptied scope is the same export, and every read answers as before
/// (the lexical index and vector caches are rebuilt); appends continue after the restored seq.
pub async fn export_then_restore_round_trips_every_record(ctx: &Ctx) {
    let b = ctx.backend();
    let thread = seed_every_kind(ctx).await;
    let before = observe(ctx, &thread).await;
    let (namespace_records, scope_records) = export_all(ctx).await;
    let digest = Digest::of(&scope_records);
    let kinds = digest.counts.len();
    let expected_kinds = if ctx.capabilities().has_vectors() {
        7
    } else {
        6
    };
    assert_eq!(
        kinds, expected_kinds,
        "scope export covers every kind: {digest:?}"
    );
    assert_eq!(
        namespace_records.len(),
        usize::from(ctx.capabilities().has_vectors()) * 3 + 1,
        "collections and the cache entry"
    );

    // The other subject holds the payload corpus in every field: it goes through the same trip.
    let payload_records = b
        .export_scope(ctx.other_scope())
        .await
        .must("export payload scope");
    for scope in [ctx.scope(), ctx.other_scope()] {
        b.forget_all(scope).await.must("forget_all");
        assert!(b
            .export_scope(scope)
            .await
            .must("export emptied")
            .is_empty());
    }
    let written = b.restore(scope_records.clone()).await.must("restore scope");
    assert_eq!(written, scope_records.len() as u64);
    b.restore(payload_records.clone())
        .await
        .must("restore payload scope");
    b.restore(namespace_records.clone())
        .await
        .must("restore namespace records over themselves");

    // Facts come back written by the restorer, their first account kept.
    let restored = |records: &[Record]| as_restored_by(records.to_vec(), &ctx.writer().written_by);
    assert_eq!(
        b.export_scope(ctx.other_scope())
            .await
            .must("export payload scope again"),
        restored(&payload_records),
        "every payload round-trips"
    );
    let (namespace_again, scope_again) = export_all(ctx).await;
    assert_eq!(
        scope_again,
        restored(&scope_records),
        "restored export equals the source"
    );
    assert_eq!(
        Digest::of(&scope_again),
        digest,
        "and digests as the source"
    );
    assert_eq!(namespace_again, namespace_records);
    assert_eq!(
        observe(ctx, &thread).await,
        before,
        "reads answer as before"
    );

    let receipt = b
        .append(
            ctx.scope(),
            &thread,
            texts("after", 1),
            AppendOptions::default(),
        )
        .await
        .must("append after restore");
    assert_eq!(
        receipt.last_seq, 6,
        "seq continues from the restored last_seq"
    );
}

/// Restoring the same records twice leaves the same store as restoring them once.
pub async fn restore_twice_is_the_same_as_once(ctx: &Ctx) {
    let b = ctx.backend();
    seed_every_kind(ctx).await;
    let (_, records) = export_all(ctx).await;
    b.restore(records.clone()).await.must("restore over itself");
    b.restore(records.clone()).await.must("restore again");
    let (_, again) = export_all(ctx).await;
    assert_eq!(again, as_restored_by(records, &ctx.writer().written_by));
}

/// A record whose parent is missing fails the whole batch, and nothing of it is written.
pub async fn restore_is_all_or_nothing_and_needs_parents(ctx: &Ctx) {
    let b = ctx.backend();
    let fresh = NewConversation::default()
        .with_id(cid("restored"))
        .into_conversation(ctx.scope(), ctx.clock_now());
    let orphan = Record::Message {
        scope: ctx.scope().clone(),
        conversation_id: cid("never-created"),
        message: StoredMessage {
            seq: 1,
            message: mnemix_core::Message::user("lost"),
        },
    };
    let conversation = Record::Conversation {
        conversation: fresh.clone(),
    };
    b.restore(vec![conversation.clone(), orphan])
        .await
        .must_be_not_found("message of a missing conversation");
    b.get_conversation(ctx.scope(), &fresh.id)
        .await
        .must_be_not_found("nothing of the failed batch is written");

    // A conversation earlier in the same batch is a parent.
    let child = Record::Cursor {
        scope: ctx.scope().clone(),
        conversation_id: fresh.id.clone(),
        name: "extract".into(),
        value: 7,
    };
    b.restore(vec![child, conversation])
        .await
        .must("parent in the same batch, in any order");
    assert_eq!(
        b.cursor(ctx.scope(), &fresh.id, "extract")
            .await
            .must("cursor"),
        Some(7)
    );

    if ctx.capabilities().has_vectors() {
        let spec = collection(ctx, Metric::Cosine).await;
        let vector = |collection: &str, dims: usize| Record::Vector {
            scope: ctx.scope().clone(),
            collection: collection.to_owned(),
            record: record("v", unit_vector(dims, 1), json!({})),
        };
        b.restore(vec![vector("no-such-collection", DIMS)])
            .await
            .must_be_not_found("vector of a missing collection");
        b.restore(vec![vector(&spec.name, DIMS + 1)])
            .await
            .must_be_invalid("vector of the wrong dimension");
    }
}

/// `scopes` lists exactly the scopes that own a live record; `namespaces` includes theirs.
pub async fn scopes_list_exactly_the_owners(ctx: &Ctx) {
    let b = ctx.backend();
    let remember = |scope: Scope, text: &'static str, expires_at: Option<Timestamp>| async move {
        let fact = NewFact::new(text).with_expires_at(expires_at);
        b.remember(&scope, fact, RememberOptions::default())
            .await
            .must("remember");
    };
    remember(ctx.scope().clone(), "owns a fact", None).await;
    remember(ctx.shared_scope(), "shared knowledge", None).await;
    let checkpoint = NewCheckpoint::new(
        CheckpointId::new("run").unwrap(),
        "w",
        CheckpointStatus::Suspended,
        json!({}),
    );
    b.put_checkpoint(ctx.other_scope(), checkpoint)
        .await
        .must("checkpoint");
    let forgotten = Scope::from_parts(ctx.namespace().clone(), Some("gone".try_into().unwrap()));
    remember(forgotten.clone(), "soon forgotten", None).await;
    b.forget_all(&forgotten).await.must("forget_all");
    let expired = Scope::from_parts(ctx.namespace().clone(), Some("expired".try_into().unwrap()));
    let soon = ctx.clock_now().saturating_add(Duration::from_secs(1));
    remember(expired, "expires soon", Some(soon)).await;
    ctx.clock().advance(Duration::from_secs(2));

    let mut expected = vec![
        ctx.shared_scope(),
        ctx.scope().clone(),
        ctx.other_scope().clone(),
    ];
    expected.sort();
    assert_eq!(b.scopes(ctx.namespace()).await.must("scopes"), expected);
    assert!(b
        .namespaces()
        .await
        .must("namespaces")
        .contains(ctx.namespace()));
    let unused = ctx.foreign_namespace_scope();
    assert!(b
        .scopes(unused.namespace())
        .await
        .must("scopes of an unused namespace")
        .is_empty());
}

/// Expired facts and cache entries are not exported: no read returns them.
pub async fn export_leaves_out_expired_records(ctx: &Ctx) {
    let b = ctx.backend();
    let soon = ctx.clock_now().saturating_add(Duration::from_secs(1));
    let fact = NewFact::new("expires soon").with_expires_at(soon);
    b.remember(ctx.scope(), fact, RememberOptions::default())
        .await
        .must("remember");
    b.remember(
        ctx.scope(),
        NewFact::new("stays"),
        RememberOptions::default(),
    )
    .await
    .must("remember");
    b.cache_set(
        ctx.namespace(),
        "short",
        vec![1],
        Some(Duration::from_secs(1)),
    )
    .await
    .must("cache");
    b.cache_set(ctx.namespace(), "long", vec![2], None)
        .await
        .must("cache");
    ctx.clock().advance(Duration::from_secs(2));
    let (namespace_records, scope_records) = export_all(ctx).await;
    let facts: Vec<&str> = scope_records
        .iter()
        .filter_map(|r| match r {
            Record::Fact { fact } => Some(fact.text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(facts, ["stays"]);
    let keys: Vec<&str> = namespace_records
        .iter()
        .filter_map(|r| match r {
            Record::CacheEntry { key, .. } => Some(key.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(keys, ["long"]);
}

/// A change made to a fact before it is restored.
type FactEdit<'a> = dyn Fn(&mut mnemix_core::Fact) + Sync + 'a;

/// A restore passes the checks the writes that made its records passed, the same on every
/// backend: a conversation's messages whose seqs are not one contiguous run ending at its last
/// seq (a seq edited from 3 to 30), a fact with empty text, an empty or oversized tag, a score
/// out of [0, 1], or NUL in its key or kind is `InvalidInput`, and nothing of the batch is
/// written (no key comes back as another key).
pub async fn restore_refuses_what_the_write_api_refuses(ctx: &Ctx) {
    let b = ctx.backend();
    let thread = mnemix_core::NewConversation::default().with_id(cid("edited"));
    b.create_conversation(ctx.scope(), thread)
        .await
        .must("create");
    b.append(
        ctx.scope(),
        &cid("edited"),
        (1..=5)
            .map(|i| mnemix_core::Message::user(format!("m{i}")))
            .collect(),
        mnemix_core::AppendOptions::default(),
    )
    .await
    .must("append");
    let exported = b.export_scope(ctx.scope()).await.must("export");
    let edit_seq = |from: u64, to: u64| {
        exported
            .iter()
            .cloned()
            .map(|mut record| {
                if let Record::Message { message, .. } = &mut record {
                    if message.seq == from {
                        message.seq = to;
                    }
                }
                record
            })
            .collect::<Vec<_>>()
    };
    b.forget_all(ctx.scope()).await.must("erase");
    b.restore(edit_seq(3, 30))
        .await
        .must_be_invalid("a seq edited past the end");
    b.restore(edit_seq(3, 4))
        .await
        .must_be_invalid("two messages at one seq");
    b.get_conversation(ctx.scope(), &cid("edited"))
        .await
        .must_be_not_found("nothing of a refused batch is written");
    b.restore(exported.clone())
        .await
        .must("the export as it was");

    let fact = |edit: &FactEdit<'_>| {
        let mut fact = mnemix_core::NewFact::new("a fact").into_fact(ctx.scope(), ctx.clock_now());
        edit(&mut fact);
        vec![Record::Fact { fact }]
    };
    let long_tag = "t".repeat(10_000);
    let cases: [(&str, &FactEdit<'_>); 8] = [
        ("empty text", &|f| f.text = String::new()),
        ("blank text", &|f| f.text = "  ".into()),
        ("an empty tag", &|f| f.tags = vec![String::new()]),
        ("a 10 kB tag", &|f| f.tags = vec![long_tag.clone()]),
        ("score 7", &|f| f.score = Some(7.0)),
        ("NUL in the key", &|f| f.key = Some("a\0b".into())),
        ("NUL in the kind", &|f| f.kind = Some("a\0b".into())),
        ("a reserved kind", &|f| f.kind = Some("_kind".into())),
    ];
    for (what, edit) in cases {
        b.restore(fact(edit)).await.must_be_invalid(what);
    }
    let facts = b
        .list_facts(ctx.scope(), mnemix_core::FactQuery::default())
        .await
        .must("list");
    assert!(
        facts.items.is_empty(),
        "refused facts were written: {facts:?}"
    );
    b.restore(fact(&|f| f.key = Some("a".into())))
        .await
        .must("a valid fact");
}
