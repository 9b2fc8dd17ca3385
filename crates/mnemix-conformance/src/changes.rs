//! Scenarios of the change feed: every write that changed something records one change, by
//! the principal of the handle that made it, in the order the store committed them; a
//! consumer resuming after its cursor sees every change once; retention trims and refuses a
//! cursor from before the trim; erasure scrubs the subject from the feed.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use mnemix_core::{
    AppendOptions, Change, ChangeCursor, CheckpointId, CheckpointStatus, CheckpointUpdate,
    CollectionSpec, ConversationUpdate, FactId, MemoryBackend, MemoryError, Message, NewCheckpoint,
    NewConversation, NewFact, Operation, Origin, Principal, Provenance, RememberOptions, Retention,
    Scope, VectorId, VectorRecord, VectorSelector, WorkingMemoryKey, WorkingMemoryUpdate,
};
use serde_json::json;

use crate::support::ResultExt;
use crate::Ctx;

/// A change as the scenarios compare it: operation, subject, container, records.
type Summary = (Operation, Option<String>, Option<String>, Vec<String>);

fn summary(change: &Change) -> Summary {
    (
        change.operation,
        change.subject.as_ref().map(|s| s.as_str().to_owned()),
        change.within.clone(),
        change.records.clone(),
    )
}

fn agent(id: &str) -> Principal {
    Principal::agent(id).expect("an agent id")
}

/// The backend under test writing as the agent `id`.
fn acting_as(ctx: &Ctx, id: &str) -> Arc<dyn MemoryBackend> {
    ctx.backend_arc()
        .acting_as(Provenance::new(agent(id), Origin::Api))
        .expect("the backend under test is behind the front layer")
}

/// Every change of `scope`'s namespace after `after`, read in pages of `page`.
async fn read_after(
    backend: &dyn MemoryBackend,
    scope: &Scope,
    after: ChangeCursor,
    page: usize,
) -> Vec<Change> {
    let mut all = Vec::new();
    let mut cursor = after;
    loop {
        let changes = backend
            .changes(scope.namespace(), cursor, page)
            .await
            .must("changes");
        let Some(last) = changes.last() else {
            return all;
        };
        cursor = last.cursor;
        all.extend(changes);
    }
}

/// The first `n` changes after `after`, once they are readable: a change is readable once every
/// write that began before it has ended (at once on a store that commits one write at a time;
/// on PostgreSQL, after the other writers' transactions in flight). Gives what it read after
/// 10 s.
async fn settled(ctx: &Ctx, after: ChangeCursor, n: usize) -> Vec<Change> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let changes = read_after(ctx.backend(), ctx.scope(), after, 100).await;
        if changes.len() >= n || std::time::Instant::now() > deadline {
            return changes;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn feed(ctx: &Ctx) -> Vec<Change> {
    read_after(ctx.backend(), ctx.scope(), ChangeCursor::START, 100).await
}

/// The cursor of the namespace's newest change.
async fn newest(ctx: &Ctx) -> ChangeCursor {
    feed(ctx)
        .await
        .last()
        .map_or(ChangeCursor::START, |c| c.cursor)
}

fn vector_id(id: &str) -> VectorId {
    VectorId::new(id).expect("a vector id")
}

fn subject(scope: &Scope) -> Option<String> {
    scope.subject().map(|s| s.as_str().to_owned())
}

fn strings<const N: usize>(ids: [&str; N]) -> Vec<String> {
    ids.iter().map(|&id| id.to_owned()).collect()
}

fn assert_in_feed_order(changes: &[Change]) {
    for pair in changes.windows(2) {
        assert!(
            pair[0].cursor < pair[1].cursor,
            "the feed's cursors increase: {:?} then {:?}",
            pair[0].cursor,
            pair[1].cursor
        );
    }
}

/// Each kind of write of a subject's records one change naming what it wrote and the writer
/// of the handle that wrote it, in the order of the writes, at the store's time.
pub async fn every_write_records_one_change_by_its_writer(ctx: &Ctx) {
    let before = newest(ctx).await;
    let planner = acting_as(ctx, "planner");
    let (b, s) = (planner.as_ref(), ctx.scope());
    let conversation = b
        .create_conversation(s, NewConversation::default())
        .await
        .must("create");
    let update = ConversationUpdate {
        title: Some(Some("Plans".into())),
        metadata: None,
    };
    b.update_conversation(s, &conversation.id, update)
        .await
        .must("update");
    let (hello, hi) = (Message::user("hello"), Message::assistant("hi"));
    let ids = [hello.id.to_string(), hi.id.to_string()];
    b.append(
        s,
        &conversation.id,
        vec![hello, hi],
        AppendOptions::default(),
    )
    .await
    .must("append");
    b.advance_cursor(s, &conversation.id, "read", 2)
        .await
        .must("advance");
    let user = WorkingMemoryKey::User;
    b.set_working_memory(s, &user, WorkingMemoryUpdate::markdown("notes"))
        .await
        .must("set working memory");
    b.clear_working_memory(s, &user).await.must("clear");
    let remember = |text: &str| {
        b.remember(
            s,
            NewFact::new(text).with_key("drink"),
            RememberOptions::default(),
        )
    };
    let tea = remember("Prefers tea").await.must("remember").fact;
    let coffee = remember("Prefers coffee").await.must("supersede").fact;
    let later = ctx.clock_now().saturating_add(Duration::from_hours(1));
    b.set_expiry(s, std::slice::from_ref(&coffee.id), Some(later))
        .await
        .must("set_expiry");
    b.forget(s, &coffee.id).await.must("forget");
    let id = CheckpointId::new("run-1").must("checkpoint id");
    let new = NewCheckpoint::new(id.clone(), "trip", CheckpointStatus::Running, json!({}));
    b.put_checkpoint(s, new).await.must("put checkpoint");
    let update = CheckpointUpdate {
        expected_version: 1,
        status: CheckpointStatus::Completed,
        state: json!({"done": true}),
    };
    b.update_checkpoint(s, &id, update)
        .await
        .must("update checkpoint");
    b.delete_checkpoint(s, &id).await.must("delete checkpoint");
    b.delete_conversation(s, &conversation.id)
        .await
        .must("delete conversation");

    let changes = settled(ctx, before, 14).await;
    let (who, thread) = (subject(s), Some(conversation.id.to_string()));
    let (tea, coffee, run) = (tea.id.as_str(), coffee.id.as_str(), id.as_str());
    let expected: Vec<Summary> = vec![
        (
            Operation::CreateConversation,
            who.clone(),
            thread.clone(),
            vec![],
        ),
        (
            Operation::UpdateConversation,
            who.clone(),
            thread.clone(),
            vec![],
        ),
        (Operation::Append, who.clone(), thread.clone(), ids.to_vec()),
        (
            Operation::AdvanceCursor,
            who.clone(),
            thread.clone(),
            strings(["read"]),
        ),
        (Operation::SetWorkingMemory, who.clone(), None, vec![]),
        (Operation::ClearWorkingMemory, who.clone(), None, vec![]),
        (Operation::Remember, who.clone(), None, strings([tea])),
        (
            Operation::Remember,
            who.clone(),
            None,
            strings([coffee, tea]),
        ),
        (Operation::SetExpiry, who.clone(), None, strings([coffee])),
        (Operation::Forget, who.clone(), None, strings([coffee])),
        (Operation::PutCheckpoint, who.clone(), None, strings([run])),
        (
            Operation::UpdateCheckpoint,
            who.clone(),
            None,
            strings([run]),
        ),
        (
            Operation::DeleteCheckpoint,
            who.clone(),
            None,
            strings([run]),
        ),
        (Operation::DeleteConversation, who, thread, vec![]),
    ];
    assert_eq!(changes.iter().map(summary).collect::<Vec<_>>(), expected);
    assert_in_feed_order(&changes);
    for change in &changes {
        assert_eq!(change.principal, agent("planner"), "{change:?}");
        assert_eq!(change.at, ctx.clock_now(), "the store's time: {change:?}");
        assert!(!change.scrubbed);
    }
}

/// Vector writes record their collection and ids; a collection's creation and drop are
/// namespace-wide (no subject).
pub async fn vector_writes_record_their_collection_and_ids(ctx: &Ctx) {
    let before = newest(ctx).await;
    let indexer = acting_as(ctx, "indexer");
    let (b, s) = (indexer.as_ref(), ctx.scope());
    let spec = CollectionSpec::new("notes", 2, "test-model");
    b.ensure_collection(s.namespace(), spec.clone())
        .await
        .must("ensure");
    b.ensure_collection(s.namespace(), spec)
        .await
        .must("ensure again: nothing changes");
    let record = |id: &str, v: [f32; 2]| VectorRecord::new(vector_id(id), v.to_vec());
    let records = vec![record("a", [1.0, 0.0]), record("b", [0.0, 1.0])];
    b.upsert_vectors(s, "notes", records).await.must("upsert");
    let ids = VectorSelector::Ids(vec![vector_id("a"), vector_id("zz")]);
    b.delete_vectors(s, "notes", ids).await.must("delete");
    b.drop_collection(s.namespace(), "notes").await.must("drop");
    let changes = settled(ctx, before, 4).await;
    let (who, notes) = (subject(s), Some("notes".to_owned()));
    let expected: Vec<Summary> = vec![
        (Operation::EnsureCollection, None, notes.clone(), vec![]),
        (
            Operation::UpsertVectors,
            who.clone(),
            notes.clone(),
            strings(["a", "b"]),
        ),
        (
            Operation::DeleteVectors,
            who,
            notes.clone(),
            strings(["a", "zz"]),
        ),
        (Operation::DropCollection, None, notes, vec![]),
    ];
    assert_eq!(changes.iter().map(summary).collect::<Vec<_>>(), expected);
    assert!(changes.iter().all(|c| c.principal == agent("indexer")));
}

/// A write that changes nothing records nothing: a replayed append, a duplicate remember, a
/// cursor that does not move, and deletions of what is not there. So a retried write is in
/// the feed once.
pub async fn writes_that_change_nothing_record_nothing(ctx: &Ctx) {
    let (b, s) = (ctx.backend(), ctx.scope());
    let conversation = b
        .create_conversation(s, NewConversation::default())
        .await
        .must("create");
    let batch = vec![Message::user("once")];
    b.append(s, &conversation.id, batch.clone(), AppendOptions::default())
        .await
        .must("append");
    let fact = NewFact::new("Prefers tea");
    b.remember(s, fact.clone(), RememberOptions::default())
        .await
        .must("remember");
    b.advance_cursor(s, &conversation.id, "read", 1)
        .await
        .must("advance");
    let written = settled(ctx, ChangeCursor::START, 4).await;
    let before = written.last().expect("the writes' changes").cursor;
    b.append(s, &conversation.id, batch, AppendOptions::default())
        .await
        .must("replayed append");
    b.remember(s, fact, RememberOptions::default())
        .await
        .must("duplicate");
    b.advance_cursor(s, &conversation.id, "read", 1)
        .await
        .must("cursor where it is");
    let missing = FactId::new("f-missing").must("fact id");
    assert!(!b.forget(s, &missing).await.must("forget missing"));
    assert!(!b
        .clear_working_memory(s, &WorkingMemoryKey::User)
        .await
        .must("clear empty"));
    let gone = CheckpointId::new("gone").must("id");
    assert!(!b.delete_checkpoint(s, &gone).await.must("delete missing"));
    let other = mnemix_core::ConversationId::new("no-such").must("id");
    assert!(!b
        .delete_conversation(s, &other)
        .await
        .must("delete missing"));
    // A write that records a change, after them: once it is readable, so is anything before.
    let marker = b
        .remember(s, NewFact::new("marker"), RememberOptions::default())
        .await
        .must("marker");
    let after: Vec<Summary> = settled(ctx, before, 1).await.iter().map(summary).collect();
    let marker = vec![marker.fact.id.to_string()];
    assert_eq!(
        after,
        [(Operation::Remember, subject(s), None, marker)],
        "nothing changed, nothing recorded"
    );
}

/// Pages of any size give the feed in order, each change once; reading after the newest
/// change gives nothing, and after any change gives exactly the ones that followed it.
pub async fn changes_page_in_order_and_resume_after_any_cursor(ctx: &Ctx) {
    let (b, s) = (ctx.backend(), ctx.scope());
    let before = newest(ctx).await;
    for i in 0..13 {
        b.remember(
            s,
            NewFact::new(format!("fact {i}")),
            RememberOptions::default(),
        )
        .await
        .must("remember");
    }
    let whole = settled(ctx, before, 13).await;
    assert_eq!(whole.len(), 13);
    assert_in_feed_order(&whole);
    for page in [1, 4, 13] {
        assert_eq!(
            read_after(b, s, before, page).await,
            whole,
            "pages of {page}"
        );
    }
    for (i, change) in whole.iter().enumerate() {
        assert_eq!(
            read_after(b, s, change.cursor, 5).await,
            whole[i + 1..],
            "after change {i}"
        );
    }
    for limit in [0, mnemix_core::changes::MAX_CHANGES_PER_READ + 1] {
        assert!(matches!(
            b.changes(s.namespace(), before, limit).await,
            Err(MemoryError::InvalidInput(_))
        ));
    }
}

/// A namespace's feed holds its own writes only.
pub async fn each_namespace_has_its_own_feed(ctx: &Ctx) {
    let (b, s) = (ctx.backend(), ctx.scope());
    let foreign = ctx.foreign_namespace_scope();
    let here = b
        .remember(s, NewFact::new("here"), RememberOptions::default())
        .await
        .must("remember");
    let there = b
        .remember(&foreign, NewFact::new("there"), RememberOptions::default())
        .await
        .must("remember elsewhere");
    let ours = settled(ctx, ChangeCursor::START, 1).await;
    assert!(ours
        .iter()
        .any(|c| c.records.first() == Some(&here.fact.id.to_string())));
    assert!(ours
        .iter()
        .all(|c| !c.records.contains(&there.fact.id.to_string())));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut theirs = Vec::new();
    while theirs.is_empty() && std::time::Instant::now() < deadline {
        theirs = read_after(b, &foreign, ChangeCursor::START, 100).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let theirs: Vec<Summary> = theirs.iter().map(summary).collect();
    assert_eq!(
        theirs,
        [(
            Operation::Remember,
            subject(&foreign),
            None,
            vec![there.fact.id.to_string()]
        )]
    );
}

/// Erasing a subject scrubs its changes in place (no subject, container or ids; place, time,
/// operation and writer kept), counts them in the receipt, leaves other subjects' changes
/// whole, and records the erasure by its writer without naming the subject.
pub async fn erasure_scrubs_the_subject_from_the_feed_and_counts_it(ctx: &Ctx) {
    let (b, s, other) = (ctx.backend(), ctx.scope(), ctx.other_scope());
    let before = newest(ctx).await;
    for text in ["Lives in Lyon", "Works at Acme"] {
        b.remember(s, NewFact::new(text), RememberOptions::default())
            .await
            .must("remember");
    }
    b.set_working_memory(
        s,
        &WorkingMemoryKey::User,
        WorkingMemoryUpdate::markdown("n"),
    )
    .await
    .must("working memory");
    b.remember(other, NewFact::new("Another's"), RememberOptions::default())
        .await
        .must("another subject's");
    let written = settled(ctx, before, 4).await;
    let counted = b.count_owned(s).await.must("count_owned");
    assert_eq!(
        counted.changes, 3,
        "the dry run counts the subject's changes"
    );
    let receipt = ctx
        .backend_arc()
        .acting_as(Provenance::new(agent("dpo"), Origin::Api));
    let receipt = receipt
        .expect("behind the front layer")
        .forget_all(s)
        .await
        .must("forget_all");
    assert_eq!(receipt.changes, 3);
    let after = settled(ctx, before, written.len() + 1).await;
    assert_eq!(
        after.len(),
        written.len() + 1,
        "scrubbed in place, plus the erasure"
    );
    for (was, is) in written.iter().zip(&after) {
        assert_eq!(
            (is.cursor, is.at, is.operation, &is.principal),
            (was.cursor, was.at, was.operation, &was.principal)
        );
        if was.subject == s.subject().cloned() {
            assert!(is.scrubbed, "{is:?}");
            assert_eq!(
                (&is.subject, &is.within, is.records.len()),
                (&None, &None, 0)
            );
        } else {
            assert_eq!(is, was, "another subject's change is whole");
        }
    }
    let erased = after.last().expect("the erasure");
    assert_eq!(
        (erased.operation, &erased.subject, &erased.principal),
        (Operation::Erase, &None, &agent("dpo"))
    );
    let subject = s.subject().expect("a subject").as_str();
    assert!(
        !serde_json::to_string(&after)
            .expect("json")
            .contains(subject),
        "the subject's name is nowhere in the feed"
    );
}

/// Retention by count keeps the newest; by age, those younger than it. A cursor from before
/// what was kept is a conflict, never a silent skip; `START` reads from the oldest kept.
pub async fn retention_trims_and_refuses_a_cursor_from_before_it(ctx: &Ctx) {
    let (b, s) = (ctx.backend(), ctx.scope());
    let namespace = s.namespace();
    let before = newest(ctx).await;
    for i in 0..6 {
        b.remember(
            s,
            NewFact::new(format!("fact {i}")),
            RememberOptions::default(),
        )
        .await
        .must("remember");
        ctx.clock().advance(Duration::from_mins(1));
    }
    let written = settled(ctx, before, 6).await;
    let all = feed(ctx).await;
    let keep = 4;
    let removed = b
        .trim_changes(namespace, Retention::max_entries(keep))
        .await
        .must("trim by count");
    assert_eq!(removed, all.len() as u64 - keep);
    let kept = feed(ctx).await;
    assert_eq!(kept, all[all.len() - 4..], "the newest 4, from START");
    let horizon = all[all.len() - 5].cursor;
    let error = b.changes(namespace, all[0].cursor, 10).await;
    if all.len() > 5 {
        assert!(
            matches!(error, Err(MemoryError::Conflict { .. })),
            "{error:?}"
        );
    }
    assert_eq!(
        read_after(b, s, horizon, 10).await,
        kept,
        "the cursor of the last change trimmed reads on"
    );
    // Each fact was written a minute after the one before, and the clock is a minute past the
    // last: 150 s keeps the last two.
    let removed = b
        .trim_changes(namespace, Retention::max_age(Duration::from_secs(150)))
        .await
        .must("trim by age");
    assert_eq!(removed, 2);
    assert_eq!(feed(ctx).await, written[4..]);
    assert_eq!(
        b.trim_changes(namespace, Retention::max_age(Duration::from_secs(150)))
            .await
            .must("again"),
        0
    );
    assert_eq!(
        b.trim_changes(namespace, Retention::default())
            .await
            .must("keep everything"),
        0
    );
}

/// A consumer reading while four writers append, killed (its read dropped mid-flight) and
/// resumed from the cursor of the last change it handled 100 times, handles every append
/// once: no change missed, none twice.
pub async fn a_consumer_resumed_from_its_cursor_sees_every_change_once(ctx: &Ctx) {
    let s = ctx.scope().clone();
    let backend = ctx.backend_arc();
    let conversation = backend
        .create_conversation(&s, NewConversation::default())
        .await
        .must("create");
    let start = newest(ctx).await;
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (backend, s, id) = (Arc::clone(&backend), s.clone(), conversation.id.clone());
            tokio::spawn(async move {
                let mut appended = Vec::new();
                for i in 0..25 {
                    let message = Message::user(format!("writer {w} message {i}"));
                    appended.push(message.id.to_string());
                    backend
                        .append(&s, &id, vec![message], AppendOptions::default())
                        .await
                        .must("append");
                    tokio::task::yield_now().await;
                }
                appended
            })
        })
        .collect();
    let (mut handled, mut cursor, mut kills) = (Vec::<Change>::new(), start, 0);
    let mut writing = true;
    let appends = |handled: &[Change]| {
        handled
            .iter()
            .filter(|c| c.operation == Operation::Append)
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_mins(1);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the consumer handled {} of 100 appends in a minute",
            appends(&handled)
        );
        let limit = fastrand::usize(1..6);
        let read = {
            let (backend, namespace) = (Arc::clone(&backend), s.namespace().clone());
            tokio::spawn(async move { backend.changes(&namespace, cursor, limit).await })
        };
        if kills < 100 && fastrand::bool() {
            // Killed: whatever the read would have given is lost with it.
            for _ in 0..fastrand::usize(0..3) {
                tokio::task::yield_now().await;
            }
            read.abort();
            let _ = read.await;
            kills += 1;
            continue;
        }
        let page = read.await.expect("the read task").must("changes");
        if let Some(last) = page.last() {
            cursor = last.cursor;
            handled.extend(page);
        } else if !writing && kills == 100 && appends(&handled) >= 100 {
            break;
        } else {
            writing = !writers.iter().all(tokio::task::JoinHandle::is_finished);
            tokio::task::yield_now().await;
        }
    }
    assert_eq!(kills, 100, "the consumer was killed 100 times");
    let mut expected = BTreeSet::new();
    for writer in writers {
        expected.extend(writer.await.expect("a writer"));
    }
    assert_in_feed_order(&handled);
    let seen: Vec<&String> = handled
        .iter()
        .filter(|c| c.operation == Operation::Append)
        .flat_map(|c| &c.records)
        .collect();
    let unique: BTreeSet<String> = seen.iter().map(|id| (*id).clone()).collect();
    assert_eq!(seen.len(), unique.len(), "no change handled twice");
    assert_eq!(unique, expected, "every append handled");
}
