//! Scenarios of [`ConversationStore`](mnemix_core::ConversationStore).

use std::time::Duration;

use mnemix_core::{
    AppendOptions, ConversationQuery, ConversationUpdate, LoadOptions, Message, NewConversation,
    Part, Role,
};
use serde_json::json;

use crate::support::{cid, conversation, conversation_with, load, message, text, texts, ResultExt};
use crate::Ctx;

fn seqs(messages: &[mnemix_core::StoredMessage]) -> Vec<u64> {
    messages.iter().map(|m| m.seq).collect()
}

fn ids(messages: &[mnemix_core::StoredMessage]) -> Vec<String> {
    messages.iter().map(|m| m.message.id.to_string()).collect()
}

/// Without an id the store makes a UUIDv7.
pub async fn create_assigns_uuid_v7_when_no_id_given(ctx: &Ctx) {
    let c = conversation(ctx, ctx.scope()).await;
    let id = c.id.as_str();
    assert_eq!(id.len(), 36, "UUID text form: {id}");
    assert_eq!(&id[14..15], "7", "version nibble of {id}");
    assert_eq!(c.last_seq, 0);
    assert_eq!(&c.scope, ctx.scope());
}

/// A client id is kept, with every field given.
pub async fn create_keeps_client_id_and_fields(ctx: &Ctx) {
    let mut metadata = mnemix_core::Metadata::new();
    metadata.insert("channel".into(), json!("web"));
    let new = NewConversation::default()
        .with_id(cid("thread-1"))
        .with_agent("support-agent")
        .with_title("Billing")
        .with_metadata(metadata.clone())
        .with_resource_slug("invoices")
        .with_record_id("inv-7");
    let created = ctx
        .backend()
        .create_conversation(ctx.scope(), new)
        .await
        .must("create");
    let read = ctx
        .backend()
        .get_conversation(ctx.scope(), &cid("thread-1"))
        .await
        .must("get");
    assert_eq!(created, read);
    assert_eq!(read.agent.as_deref(), Some("support-agent"));
    assert_eq!(read.title.as_deref(), Some("Billing"));
    assert_eq!(read.metadata, metadata);
    assert_eq!(read.resource_slug.as_deref(), Some("invoices"));
    assert_eq!(read.record_id.as_deref(), Some("inv-7"));
    assert_eq!(read.created_at, ctx.clock_now());
    assert_eq!(read.updated_at, read.created_at);
}

/// The same id twice in a scope is `AlreadyExists`; in another scope it is independent.
pub async fn create_duplicate_id_is_already_exists_only_within_scope(ctx: &Ctx) {
    let new = || NewConversation::default().with_id(cid("same"));
    ctx.backend()
        .create_conversation(ctx.scope(), new())
        .await
        .must("first");
    ctx.backend()
        .create_conversation(ctx.scope(), new())
        .await
        .must_be_already_exists("second in same scope");
    ctx.backend()
        .create_conversation(ctx.other_scope(), new())
        .await
        .must("same id, other subject");
}

/// Reading a missing conversation is `NotFound`.
pub async fn get_missing_is_not_found(ctx: &Ctx) {
    ctx.backend()
        .get_conversation(ctx.scope(), &cid("nope"))
        .await
        .must_be_not_found("get missing");
}

/// Listing is newest first.
pub async fn list_is_newest_first(ctx: &Ctx) {
    let mut made = Vec::new();
    for _ in 0..5 {
        made.push(conversation(ctx, ctx.scope()).await.id);
        ctx.clock().advance(Duration::from_millis(5));
    }
    made.reverse();
    let page = ctx
        .backend()
        .list_conversations(ctx.scope(), ConversationQuery::default())
        .await
        .must("list");
    let listed: Vec<_> = page.items.into_iter().map(|c| c.id).collect();
    assert_eq!(listed, made);
    assert!(page.next_cursor.is_none());
}

/// Filters by agent, resource and record combine with AND.
pub async fn list_filters_by_agent_resource_and_record(ctx: &Ctx) {
    let make = |agent: &str, resource: &str, record: &str| {
        NewConversation::default()
            .with_agent(agent)
            .with_resource_slug(resource)
            .with_record_id(record)
    };
    let b = ctx.backend();
    let target = b
        .create_conversation(ctx.scope(), make("chat", "orders", "o-1"))
        .await
        .must("create");
    b.create_conversation(ctx.scope(), make("chat", "orders", "o-2"))
        .await
        .must("create");
    b.create_conversation(ctx.scope(), make("support", "orders", "o-1"))
        .await
        .must("create");
    let query = |agent: Option<&str>, resource: Option<&str>, record: Option<&str>| {
        let mut value = ConversationQuery::default();
        value.agent = agent.map(Into::into);
        value.resource_slug = resource.map(Into::into);
        value.record_id = record.map(Into::into);
        value
    };
    let count = |q| async {
        b.list_conversations(ctx.scope(), q)
            .await
            .must("list")
            .items
    };
    assert_eq!(count(query(Some("chat"), None, None)).await.len(), 2);
    assert_eq!(count(query(None, Some("orders"), None)).await.len(), 3);
    assert_eq!(count(query(None, None, Some("o-1"))).await.len(), 2);
    let exact = count(query(Some("chat"), Some("orders"), Some("o-1"))).await;
    assert_eq!(exact.len(), 1);
    assert_eq!(exact[0].id, target.id);
    assert!(count(query(Some("nobody"), None, None)).await.is_empty());
}

/// Pages cover every conversation exactly once, in order.
pub async fn list_pages_cover_every_conversation_once(ctx: &Ctx) {
    let mut made = Vec::new();
    for i in 0..23 {
        made.push(conversation(ctx, ctx.scope()).await.id);
        if i % 3 == 0 {
            ctx.clock().advance(Duration::from_millis(1));
        }
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let query = ConversationQuery::default()
            .with_limit(5)
            .with_cursor(cursor.take());
        let page = ctx
            .backend()
            .list_conversations(ctx.scope(), query)
            .await
            .must("page");
        assert!(page.items.len() <= 5);
        seen.extend(page.items.into_iter().map(|c| (c.created_at, c.id)));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(seen.len(), made.len(), "every conversation exactly once");
    let mut sorted = seen.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(seen, sorted, "newest first across pages");
    made.sort();
    let mut ids: Vec<_> = seen.into_iter().map(|(_, id)| id).collect();
    ids.sort();
    assert_eq!(ids, made);
}

/// Filtered pages walk a long run of conversations created in the same millisecond, most of
/// them filtered out, and still list every match once, newest first (ties by id descending):
/// a store that reads its index in chunks must resume inside the tie without skipping or
/// repeating.
pub async fn list_filtered_pages_cross_a_long_tie(ctx: &Ctx) {
    let b = ctx.backend();
    let mut matching = Vec::new();
    for i in 0..40 {
        let agent = if i % 5 == 0 { "kept" } else { "other" };
        let made = b
            .create_conversation(ctx.scope(), NewConversation::default().with_agent(agent))
            .await
            .must("create");
        if agent == "kept" {
            matching.push((made.created_at, made.id));
        }
        if i == 29 {
            ctx.clock().advance(Duration::from_millis(1));
        }
    }
    let (mut seen, mut cursor, mut pages) = (Vec::new(), None, 0);
    loop {
        let page = b
            .list_conversations(
                ctx.scope(),
                ConversationQuery::default()
                    .with_agent("kept")
                    .with_limit(2)
                    .with_cursor(cursor.take()),
            )
            .await
            .must("page");
        pages += 1;
        assert!(page.items.len() <= 2);
        assert!(page
            .items
            .iter()
            .all(|c| c.agent.as_deref() == Some("kept")));
        seen.extend(page.items.into_iter().map(|c| (c.created_at, c.id)));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    matching.sort_by(|a, b| b.cmp(a));
    assert_eq!(
        seen, matching,
        "every match once, newest first, ties by id descending"
    );
    assert_eq!(pages, 4, "8 matches in pages of 2");
}

/// Conversations created between pages do not shift or repeat later pages.
pub async fn list_cursor_is_stable_under_concurrent_inserts(ctx: &Ctx) {
    for _ in 0..10 {
        conversation(ctx, ctx.scope()).await;
        ctx.clock().advance(Duration::from_millis(1));
    }
    let first = ctx
        .backend()
        .list_conversations(ctx.scope(), ConversationQuery::default().with_limit(4))
        .await
        .must("first page");
    for _ in 0..3 {
        ctx.clock().advance(Duration::from_millis(1));
        conversation(ctx, ctx.scope()).await;
    }
    let mut rest = Vec::new();
    let mut cursor = first.next_cursor.clone();
    while let Some(c) = cursor {
        let page = ctx
            .backend()
            .list_conversations(
                ctx.scope(),
                ConversationQuery::default()
                    .with_limit(4)
                    .with_cursor(Some(c)),
            )
            .await
            .must("next page");
        rest.extend(page.items.into_iter().map(|c| c.id));
        cursor = page.next_cursor;
    }
    assert_eq!(
        rest.len(),
        6,
        "the 6 older conversations, none of the new ones"
    );
    assert!(
        first.items.iter().all(|c| !rest.contains(&c.id)),
        "no repeats"
    );
}

/// A cursor that was not made by the store, or a bad limit, is `InvalidInput`.
pub async fn list_rejects_malformed_cursor_and_bad_limit(ctx: &Ctx) {
    let b = ctx.backend();
    let bad = ConversationQuery::default().with_cursor(Some("not a cursor".into()));
    b.list_conversations(ctx.scope(), bad)
        .await
        .must_be_invalid("malformed cursor");
    // A cursor's id is an identifier: NUL in it is malformed, never a backend error.
    let nul = ConversationQuery::default().with_cursor(Some("1:\0".into()));
    b.list_conversations(ctx.scope(), nul)
        .await
        .must_be_invalid("cursor holding NUL");
    let zero = ConversationQuery::default().with_limit(0);
    b.list_conversations(ctx.scope(), zero)
        .await
        .must_be_invalid("limit 0");
    let huge = ConversationQuery::default().with_limit(1_000_000);
    b.list_conversations(ctx.scope(), huge)
        .await
        .must_be_invalid("limit 1e6");
}

/// Update changes title and metadata and bumps `updated_at`.
pub async fn update_changes_title_and_metadata(ctx: &Ctx) {
    let c = conversation(ctx, ctx.scope()).await;
    ctx.clock().advance(Duration::from_secs(1));
    let mut metadata = mnemix_core::Metadata::new();
    metadata.insert("k".into(), json!({"nested": [1, 2]}));
    let update = ConversationUpdate {
        title: Some(Some("New".into())),
        metadata: Some(metadata.clone()),
    };
    let updated = ctx
        .backend()
        .update_conversation(ctx.scope(), &c.id, update)
        .await
        .must("update");
    assert_eq!(updated.title.as_deref(), Some("New"));
    assert_eq!(updated.metadata, metadata);
    assert!(updated.updated_at > c.updated_at);
    assert_eq!(updated.created_at, c.created_at);
    let read = ctx
        .backend()
        .get_conversation(ctx.scope(), &c.id)
        .await
        .must("get");
    assert_eq!(read, updated);
    let cleared = ctx
        .backend()
        .update_conversation(
            ctx.scope(),
            &c.id,
            ConversationUpdate {
                title: Some(None),
                metadata: None,
            },
        )
        .await
        .must("clear title");
    assert_eq!(cleared.title, None);
    assert_eq!(cleared.metadata, metadata, "metadata left as it was");
}

/// Updating a missing conversation is `NotFound`.
pub async fn update_missing_is_not_found(ctx: &Ctx) {
    ctx.backend()
        .update_conversation(ctx.scope(), &cid("missing"), ConversationUpdate::default())
        .await
        .must_be_not_found("update missing");
}

/// Delete reports whether the conversation existed, and it is gone afterwards.
pub async fn delete_reports_whether_it_existed(ctx: &Ctx) {
    let c = conversation_with(ctx, texts("m", 3)).await;
    assert!(ctx
        .backend()
        .delete_conversation(ctx.scope(), &c.id)
        .await
        .must("delete"));
    assert!(!ctx
        .backend()
        .delete_conversation(ctx.scope(), &c.id)
        .await
        .must("delete again"));
    ctx.backend()
        .get_conversation(ctx.scope(), &c.id)
        .await
        .must_be_not_found("get deleted");
    ctx.backend()
        .load(ctx.scope(), &c.id, LoadOptions::default())
        .await
        .must_be_not_found("load deleted");
}

/// Appends get seqs 1, 2, 3 … with no gaps, across batches, and `last_seq` follows.
pub async fn append_assigns_contiguous_seq(ctx: &Ctx) {
    let c = conversation(ctx, ctx.scope()).await;
    let b = ctx.backend();
    let first = b
        .append(ctx.scope(), &c.id, texts("a", 3), AppendOptions::default())
        .await
        .must("append 1");
    assert_eq!(
        first.appended.iter().map(|(_, s)| *s).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(first.last_seq, 3);
    let second = b
        .append(ctx.scope(), &c.id, texts("b", 2), AppendOptions::default())
        .await
        .must("append 2");
    assert_eq!(
        second.appended.iter().map(|(_, s)| *s).collect::<Vec<_>>(),
        [4, 5]
    );
    let loaded = b
        .load(ctx.scope(), &c.id, LoadOptions::default())
        .await
        .must("load");
    assert_eq!(seqs(&loaded), [1, 2, 3, 4, 5]);
    assert_eq!(ids(&loaded), ["a-0", "a-1", "a-2", "b-0", "b-1"]);
    assert_eq!(
        b.get_conversation(ctx.scope(), &c.id)
            .await
            .must("get")
            .last_seq,
        5
    );
}

/// Appending bumps `updated_at` of the conversation.
pub async fn append_bumps_updated_at(ctx: &Ctx) {
    let c = conversation(ctx, ctx.scope()).await;
    ctx.clock().advance(Duration::from_secs(2));
    ctx.backend()
        .append(ctx.scope(), &c.id, texts("x", 1), AppendOptions::default())
        .await
        .must("append");
    let read = ctx
        .backend()
        .get_conversation(ctx.scope(), &c.id)
        .await
        .must("get");
    assert_eq!(read.updated_at, ctx.clock_now());
}

/// Appending to a missing conversation is `NotFound`.
pub async fn append_to_missing_conversation_is_not_found(ctx: &Ctx) {
    ctx.backend()
        .append(
            ctx.scope(),
            &cid("ghost"),
            texts("x", 1),
            AppendOptions::default(),
        )
        .await
        .must_be_not_found("append to missing");
}

/// An empty batch changes nothing.
pub async fn append_empty_batch_changes_nothing(ctx: &Ctx) {
    let c = conversation_with(ctx, texts("m", 2)).await;
    let receipt = ctx
        .backend()
        .append(ctx.scope(), &c.id, Vec::new(), AppendOptions::default())
        .await
        .must("empty");
    assert!(receipt.appended.is_empty() && receipt.duplicates.is_empty());
    assert_eq!(receipt.last_seq, 2);
}

/// Re-sending stored messages (same id, same content) skips them and reports their seqs.
pub async fn append_is_idempotent_by_message_id(ctx: &Ctx) {
    let c = conversation_with(ctx, texts("m", 3)).await;
    let mut retry = texts("m", 3);
    retry.extend(texts("n", 1));
    let receipt = ctx
        .backend()
        .append(ctx.scope(), &c.id, retry, AppendOptions::default())
        .await
        .must("retry");
    let dup_seqs: Vec<u64> = receipt.duplicates.iter().map(|(_, s)| *s).collect();
    assert_eq!(dup_seqs, [1, 2, 3]);
    assert_eq!(receipt.appended.len(), 1);
    assert_eq!(receipt.appended[0].1, 4);
    let loaded = load(ctx, &c.id, LoadOptions::default()).await;
    assert_eq!(ids(&loaded), ["m-0", "m-1", "m-2", "n-0"]);
}

/// A stored id with different content is `Conflict`, and nothing of the batch is stored.
pub async fn append_same_id_with_different_content_is_conflict(ctx: &Ctx) {
    let c = conversation_with(ctx, texts("m", 2)).await;
    let batch = vec![
        text("fresh", Role::User, "new"),
        text("m-1", Role::User, "tampered"),
    ];
    ctx.backend()
        .append(ctx.scope(), &c.id, batch, AppendOptions::default())
        .await
        .must_be_conflict("tampered");
    let loaded = load(ctx, &c.id, LoadOptions::default()).await;
    assert_eq!(
        ids(&loaded),
        ["m-0", "m-1"],
        "the batch was not partly applied"
    );
    assert_eq!(loaded[1].message.text(), "m message 1");
}

/// The same id twice in a batch is stored once if equal and refused if different.
pub async fn append_handles_repeated_ids_within_a_batch(ctx: &Ctx) {
    let c = conversation(ctx, ctx.scope()).await;
    let b = ctx.backend();
    let twice = vec![text("d", Role::User, "same"), text("d", Role::User, "same")];
    let receipt = b
        .append(ctx.scope(), &c.id, twice, AppendOptions::default())
        .await
        .must("equal twice");
    assert_eq!(receipt.appended.len(), 1);
    assert_eq!(receipt.duplicates.len(), 1);
    let differing = vec![text("e", Role::User, "one"), text("e", Role::User, "two")];
    b.append(ctx.scope(), &c.id, differing, AppendOptions::default())
        .await
        .must_be_invalid("different twice");
    assert_eq!(
        b.load(ctx.scope(), &c.id, LoadOptions::default())
            .await
            .must("load")
            .len(),
        1
    );
}

/// Compare-and-append applies when `expected_last_seq` matches.
pub async fn compare_and_append_applies_on_expected_seq(ctx: &Ctx) {
    let c = conversation_with(ctx, texts("m", 2)).await;
    let options = AppendOptions::default().with_expected_last_seq(2);
    let receipt = ctx
        .backend()
        .append(ctx.scope(), &c.id, texts("n", 1), options)
        .await
        .must("cas");
    assert_eq!(receipt.last_seq, 3);
    let empty = conversation(ctx, ctx.scope()).await;
    let first = AppendOptions::default().with_expected_last_seq(0);
    ctx.backend()
        .append(ctx.scope(), &empty.id, texts("f", 1), first)
        .await
        .must("cas on empty");
}

/// A stale `expected_last_seq` is `Conflict` reporting the current seq; nothing is stored.
pub async fn compare_and_append_conflict_reports_current_seq(ctx: &Ctx) {
    let c = conversation_with(ctx, texts("m", 3)).await;
    let options = AppendOptions::default().with_expected_last_seq(1);
    let err = ctx
        .backend()
        .append(ctx.scope(), &c.id, texts("n", 1), options)
        .await
        .must_be_conflict("stale");
    assert_eq!(err.current(), Some(3));
    assert_eq!(load(ctx, &c.id, LoadOptions::default()).await.len(), 3);
}

/// A retried compare-and-append whose messages all landed succeeds without re-checking.
pub async fn compare_and_append_retry_of_applied_batch_succeeds(ctx: &Ctx) {
    let c = conversation(ctx, ctx.scope()).await;
    let options = AppendOptions::default().with_expected_last_seq(0);
    ctx.backend()
        .append(ctx.scope(), &c.id, texts("m", 2), options)
        .await
        .must("first");
    let retry = ctx
        .backend()
        .append(ctx.scope(), &c.id, texts("m", 2), options)
        .await
        .must("retry");
    assert!(retry.appended.is_empty());
    assert_eq!(retry.duplicates.len(), 2);
    assert_eq!(retry.last_seq, 2);
}

/// `max_messages` prunes the oldest beyond the limit; seqs keep counting.
pub async fn append_storage_limit_prunes_oldest(ctx: &Ctx) {
    let c = conversation_with(ctx, texts("m", 5)).await;
    let options = AppendOptions::default().with_max_messages(4);
    let receipt = ctx
        .backend()
        .append(ctx.scope(), &c.id, texts("n", 2), options)
        .await
        .must("append");
    assert_eq!(receipt.pruned, 3);
    assert_eq!(receipt.last_seq, 7);
    let loaded = load(ctx, &c.id, LoadOptions::default()).await;
    assert_eq!(seqs(&loaded), [4, 5, 6, 7]);
    let bad = AppendOptions::default().with_max_messages(0);
    ctx.backend()
        .append(ctx.scope(), &c.id, texts("z", 1), bad)
        .await
        .must_be_invalid("max 0");
}

/// Load returns messages in seq order with every field as appended.
pub async fn load_returns_messages_as_appended(ctx: &Ctx) {
    let mut m = text("rich", Role::Assistant, "hello");
    m.metadata.insert("model".into(), json!("gpt"));
    m.created_at = mnemix_core::Timestamp::from_millis(1_234_567_890_123);
    let c = conversation_with(ctx, vec![text("u", Role::User, "hi"), m.clone()]).await;
    let loaded = load(ctx, &c.id, LoadOptions::default()).await;
    assert_eq!(loaded.len(), 2);
    assert_eq!(loaded[1].message, m);
    assert_eq!(loaded[1].seq, 2);
}

/// Numbers in metadata and tool arguments come back bit for bit, including those a fast but
/// not correctly rounded JSON parser reads one unit in the last place off (found by fuzzing:
/// `1.1111111111111111e24` came back as `…112e24`), and a retry of such a message is a
/// duplicate, not a `Conflict`.
pub async fn load_returns_numbers_bit_for_bit(ctx: &Ctx) {
    let numbers = json!([
        1.111_111_111_111_111_1e24,
        2.225_073_858_507_201e-308,
        5e-324,
        1.797_693_134_862_315_7e308,
        0.1,
        123_456_789.123_456_79,
        u64::MAX,
        i64::MIN,
    ]);
    let mut m = Message::new(
        Role::Assistant,
        vec![Part::tool_call("c1", "measure", json!({"values": numbers}))],
    )
    .with_id(mnemix_core::MessageId::new("numbers").unwrap());
    m.metadata.insert("values".into(), numbers);
    let c = conversation_with(ctx, vec![m.clone()]).await;
    let loaded = load(ctx, &c.id, LoadOptions::raw()).await;
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0].message, m, "every number as appended");
    let receipt = ctx
        .backend()
        .append(ctx.scope(), &c.id, vec![m], AppendOptions::default())
        .await
        .must("the retry is a duplicate");
    assert_eq!(receipt.duplicates.len(), 1);
}

/// Every part type round-trips.
pub async fn load_round_trips_every_part_type(ctx: &Ctx) {
    let parts = vec![
        Part::text("t"),
        Part::Reasoning {
            text: "thinking".into(),
        },
        Part::tool_call(
            "c1",
            "search",
            json!({"q": "rust", "opts": {"k": 3, "deep": [true, null, 1.5]}}),
        ),
        Part::approval_request("a1", "c1"),
        Part::File {
            media_type: "image/png".into(),
            source: mnemix_core::FileSource::Url("https://x/y.png".into()),
        },
        Part::File {
            media_type: "text/plain".into(),
            source: mnemix_core::FileSource::Base64("aGk=".into()),
        },
    ];
    let answer = vec![Part::ApprovalResponse {
        approval_id: "a1".into(),
        approved: true,
        reason: Some("ok".into()),
    }];
    let result = vec![Part::ToolResult {
        call_id: "c1".into(),
        output: json!({"hits": []}),
        is_error: true,
    }];
    let sent = vec![
        message("1", Role::Assistant, parts),
        message("2", Role::User, answer),
        message("3", Role::Tool, result),
        message("4", Role::System, vec![Part::text("sys")]),
    ];
    let c = conversation_with(ctx, sent.clone()).await;
    let loaded = load(ctx, &c.id, LoadOptions::raw()).await;
    let got: Vec<Message> = loaded.into_iter().map(|m| m.message).collect();
    assert_eq!(got, sent);
}

/// `last` returns the tail, in chronological order.
pub async fn load_last_n_returns_the_tail(ctx: &Ctx) {
    let c = conversation_with(ctx, texts("m", 10)).await;
    let loaded = load(ctx, &c.id, LoadOptions::last(3)).await;
    assert_eq!(seqs(&loaded), [8, 9, 10]);
    let all = load(ctx, &c.id, LoadOptions::last(100)).await;
    assert_eq!(all.len(), 10);
}

/// `before_seq` and `after_seq` select strictly, and combine with `last`.
pub async fn load_selects_before_and_after_seq(ctx: &Ctx) {
    let c = conversation_with(ctx, texts("m", 10)).await;
    let b = ctx.backend();
    let opts = |before, after, last| {
        let mut value = LoadOptions::default();
        value.before_seq = before;
        value.after_seq = after;
        value.last = last;
        value
    };
    assert_eq!(
        seqs(
            &b.load(ctx.scope(), &c.id, opts(Some(4), None, None))
                .await
                .must("before")
        ),
        [1, 2, 3]
    );
    assert_eq!(
        seqs(
            &b.load(ctx.scope(), &c.id, opts(None, Some(8), None))
                .await
                .must("after")
        ),
        [9, 10]
    );
    assert_eq!(
        seqs(
            &b.load(ctx.scope(), &c.id, opts(Some(8), Some(2), Some(2)))
                .await
                .must("both")
        ),
        [6, 7]
    );
    assert!(b
        .load(ctx.scope(), &c.id, opts(Some(3), Some(3), None))
        .await
        .must("empty range")
        .is_empty());
}

/// A role filter returns only those roles, and its last N reach back past other roles.
pub async fn load_filters_by_role(ctx: &Ctx) {
    let messages = vec![
        text("1", Role::System, "s"),
        text("2", Role::User, "u1"),
        text("3", Role::Assistant, "a1"),
        text("4", Role::User, "u2"),
        text("5", Role::Assistant, "a2"),
    ];
    let c = conversation_with(ctx, messages).await;
    let options = LoadOptions::default().with_roles(vec![Role::User]);
    let users = load(ctx, &c.id, options).await;
    assert_eq!(ids(&users), ["2", "4"]);
    let options = LoadOptions::default()
        .with_roles(vec![Role::Assistant, Role::System])
        .with_last(2);
    assert_eq!(ids(&load(ctx, &c.id, options).await), ["3", "5"]);

    // The last N of a role reach back past hundreds of other rows.
    let long: Vec<Message> = (0..400)
        .map(|i| {
            let role = if i % 100 == 0 {
                Role::Assistant
            } else {
                Role::User
            };
            text(&format!("l{i}"), role, "x")
        })
        .collect();
    let long = conversation_with(ctx, long).await;
    let options = LoadOptions::default()
        .with_roles(vec![Role::Assistant])
        .with_last(3);
    assert_eq!(
        ids(&load(ctx, &long.id, options).await),
        ["l100", "l200", "l300"]
    );
}

/// The tail of a long thread comes back whole and exact.
pub async fn load_window_from_long_thread(ctx: &Ctx) {
    let c = conversation(ctx, ctx.scope()).await;
    for batch in 0..20 {
        let messages = texts(&format!("b{batch}"), 100);
        ctx.backend()
            .append(ctx.scope(), &c.id, messages, AppendOptions::default())
            .await
            .must("append");
    }
    let tail = load(ctx, &c.id, LoadOptions::last(5)).await;
    assert_eq!(seqs(&tail), [1996, 1997, 1998, 1999, 2000]);
    assert_eq!(
        ids(&tail),
        ["b19-95", "b19-96", "b19-97", "b19-98", "b19-99"]
    );
}

/// After a crash between a tool call and its result, the loaded history is replay-safe.
pub async fn load_sanitizes_after_crash_between_call_and_result(ctx: &Ctx) {
    let history = vec![
        text("1", Role::User, "weather?"),
        message(
            "2",
            Role::Assistant,
            vec![
                Part::text("checking"),
                Part::tool_call("c1", "weather", json!({})),
            ],
        ),
        // crash: the tool result of c1 never landed; the user wrote again
        text("3", Role::User, "hello?"),
        text("4", Role::Assistant, "sorry"),
    ];
    let c = conversation_with(ctx, history).await;
    let loaded = load(ctx, &c.id, LoadOptions::default()).await;
    assert!(
        mnemix_core::replay::is_replay_safe(&loaded),
        "loaded history must be replay-safe: {loaded:?}"
    );
    assert_eq!(ids(&loaded), ["1", "2", "3", "4"]);
    assert_eq!(
        loaded[1].message.parts,
        vec![Part::text("checking")],
        "the dangling call is dropped"
    );
    let raw = load(ctx, &c.id, LoadOptions::raw()).await;
    assert_eq!(
        raw[1].message.parts.len(),
        2,
        "raw load keeps what is stored"
    );
}

/// A window that starts in the middle of a tool turn drops the orphaned results.
pub async fn load_window_drops_orphan_tool_results(ctx: &Ctx) {
    let history = vec![
        text("1", Role::User, "q"),
        message(
            "2",
            Role::Assistant,
            vec![Part::tool_call("c1", "f", json!({}))],
        ),
        message("3", Role::Tool, vec![Part::tool_result("c1", json!("r"))]),
        text("4", Role::Assistant, "done"),
    ];
    let c = conversation_with(ctx, history).await;
    let loaded = load(ctx, &c.id, LoadOptions::last(2)).await;
    assert_eq!(ids(&loaded), ["4"]);
    let complete = load(ctx, &c.id, LoadOptions::last(3)).await;
    assert_eq!(ids(&complete), ["2", "3", "4"]);
}

/// Loading a missing conversation is `NotFound`.
pub async fn load_missing_is_not_found(ctx: &Ctx) {
    ctx.backend()
        .load(ctx.scope(), &cid("none"), LoadOptions::default())
        .await
        .must_be_not_found("load");
}

/// `load_seqs` reads scattered messages in seq order, each once, exactly as stored (a dangling
/// tool call is kept: scattered messages are not a transcript); seqs with no message are
/// skipped, and at most `MAX_LOAD_SEQS` are read at once.
pub async fn load_seqs_reads_scattered_messages_as_stored(ctx: &Ctx) {
    let mut history = texts("m", 10);
    history[4] = message(
        "call",
        Role::Assistant,
        vec![
            Part::text("checking"),
            Part::tool_call("c1", "weather", json!({})),
        ],
    );
    let c = conversation_with(ctx, history).await;
    // Two more with a limit of 10 prune seqs 1 and 2.
    let prune = AppendOptions::default().with_max_messages(10);
    ctx.backend()
        .append(ctx.scope(), &c.id, texts("n", 2), prune)
        .await
        .must("append");
    let stored = load(ctx, &c.id, LoadOptions::raw()).await;
    let at = |seqs: &[u64]| -> Vec<mnemix_core::StoredMessage> {
        stored
            .iter()
            .filter(|m| seqs.contains(&m.seq))
            .cloned()
            .collect()
    };
    let b = ctx.backend();
    let found = b
        .load_seqs(ctx.scope(), &c.id, &[11, 3, 5, 3, 12, 99, 1, 0, u64::MAX])
        .await
        .must("load_seqs");
    assert_eq!(seqs(&found), [3, 5, 11, 12]);
    assert_eq!(found, at(&[3, 5, 11, 12]));
    assert_eq!(found[1].message.parts.len(), 2, "the dangling call is kept");
    assert!(b
        .load_seqs(ctx.scope(), &c.id, &[])
        .await
        .must("no seqs")
        .is_empty());
    let limit = mnemix_core::limits::MAX_LOAD_SEQS as u64;
    let every: Vec<u64> = (1..=limit).collect();
    let all = b
        .load_seqs(ctx.scope(), &c.id, &every)
        .await
        .must("MAX_LOAD_SEQS seqs");
    assert_eq!(all, stored, "every stored message, as `load` reads them");
    let too_many: Vec<u64> = (1..=limit + 1).collect();
    b.load_seqs(ctx.scope(), &c.id, &too_many)
        .await
        .must_be_invalid("one seq past the limit");
}

/// `load_seqs` of a missing conversation is `NotFound`, even for no seqs (another scope's is
/// in `isolation::conversation_of_other_subject_is_not_found`).
pub async fn load_seqs_of_a_missing_conversation_is_not_found(ctx: &Ctx) {
    for seqs in [&[][..], &[1, 2][..]] {
        ctx.backend()
            .load_seqs(ctx.scope(), &cid("none"), seqs)
            .await
            .must_be_not_found("missing conversation");
    }
}

/// Cursors start unset, move forward only, and need the conversation.
pub async fn cursor_advances_monotonically(ctx: &Ctx) {
    let c = conversation(ctx, ctx.scope()).await;
    let b = ctx.backend();
    assert_eq!(
        b.cursor(ctx.scope(), &c.id, "extract").await.must("unset"),
        None
    );
    assert_eq!(
        b.advance_cursor(ctx.scope(), &c.id, "extract", 5)
            .await
            .must("advance"),
        5
    );
    assert_eq!(
        b.advance_cursor(ctx.scope(), &c.id, "extract", 3)
            .await
            .must("backwards"),
        5
    );
    assert_eq!(
        b.cursor(ctx.scope(), &c.id, "extract").await.must("read"),
        Some(5)
    );
    assert_eq!(
        b.cursor(ctx.scope(), &c.id, "other")
            .await
            .must("other name"),
        None
    );
    b.cursor(ctx.scope(), &cid("missing"), "extract")
        .await
        .must_be_not_found("missing conversation");
    b.advance_cursor(ctx.scope(), &cid("missing"), "x", 1)
        .await
        .must_be_not_found("advance missing");
}
