//! Scenarios of concurrent writers: nothing lost, nothing applied twice, one winner per fence.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use mnemix_core::{
    AppendOptions, FactStore, LoadOptions, NewFact, RecallQuery, RememberOptions, Role,
    WorkingMemoryKey, WorkingMemoryUpdate,
};

use crate::support::{
    assert_one_winner, collection_names, conversation, conversation_with, load, race, text, texts,
    ResultExt,
};
use crate::Ctx;

const WRITERS: usize = 8;
const BATCHES: usize = 200;
const BATCH_SIZE: usize = 2;

/// 4 writers and 2 readers on one conversation leave a history [`crate::history::check`]
/// finds valid: nothing acknowledged lost, nothing twice, batches whole, every read a prefix
/// of the final order holding what was acknowledged before it, writer and real-time order kept.
pub async fn concurrent_appends_and_reads_pass_the_history_checker(ctx: &Ctx) {
    let c = conversation(ctx, ctx.scope()).await;
    let workload = crate::history::Workload::default();
    let mut history = crate::history::record(
        ctx.backend_arc(),
        ctx.scope().clone(),
        c.id.clone(),
        workload,
    )
    .await;
    history
        .finish(ctx.backend(), ctx.scope(), &c.id)
        .await
        .must("the final load");
    assert_eq!(
        history.acknowledged(),
        workload.writers * workload.batches,
        "without faults every append is acknowledged ({} tries failed)",
        history.failed_tries
    );
    assert!(history.reads() > 0, "the readers read");
    assert_eq!(crate::history::check(&history), Vec::<String>::new());
}

/// 8 writers × 200 batches on one conversation: 0 lost, 0 duplicated, no seq gaps, each
/// writer's order kept and each batch contiguous.
pub async fn concurrent_appends_lose_and_duplicate_nothing(ctx: &Ctx) {
    let c = conversation(ctx, ctx.scope()).await;
    let results = race(ctx, WRITERS, |backend, scope, w| {
        let id = c.id.clone();
        async move {
            for b in 0..BATCHES {
                let batch = (0..BATCH_SIZE)
                    .map(|i| {
                        text(
                            &format!("w{w}-b{b}-{i}"),
                            Role::User,
                            &format!("{w} {b} {i}"),
                        )
                    })
                    .collect();
                backend
                    .append(&scope, &id, batch, AppendOptions::default())
                    .await?;
            }
            Ok(())
        }
    })
    .await;
    for result in results {
        result.must("concurrent append");
    }
    let loaded = load(ctx, &c.id, LoadOptions::raw()).await;
    let total = WRITERS * BATCHES * BATCH_SIZE;
    assert_eq!(loaded.len(), total, "lost or duplicated messages");
    let expected: Vec<u64> = (1..=total as u64).collect();
    assert_eq!(
        loaded.iter().map(|m| m.seq).collect::<Vec<_>>(),
        expected,
        "seqs must be 1..=N with no gaps"
    );
    let mut unique = HashSet::new();
    assert!(
        loaded.iter().all(|m| unique.insert(m.message.id.clone())),
        "an id appears twice"
    );
    let mut last_seen: HashMap<String, (usize, usize, u64)> = HashMap::new();
    for m in &loaded {
        let id = m.message.id.as_str();
        let mut fields = id.split('-');
        let writer = fields.next().expect("writer").to_owned();
        let batch: usize = fields.next().expect("batch")[1..]
            .parse()
            .expect("batch number");
        let item: usize = fields.next().expect("item").parse().expect("item number");
        if let Some((prev_batch, prev_item, prev_seq)) = last_seen.get(&writer) {
            assert!(
                (batch, item) > (*prev_batch, *prev_item),
                "writer {writer} out of order at {id}"
            );
            if batch == *prev_batch {
                assert_eq!(m.seq, prev_seq + 1, "batch {writer}/{batch} not contiguous");
            }
        }
        last_seen.insert(writer, (batch, item, m.seq));
    }
    let read = ctx
        .backend()
        .get_conversation(ctx.scope(), &c.id)
        .await
        .must("get");
    assert_eq!(read.last_seq, total as u64);
}

/// Appends whose callers stop waiting (a dropped future: a timeout, a cancelled request) land
/// whole or not at all — now or later, as a server may commit what a client stopped waiting
/// for — and the appends around them (which a store may write in the same transaction) land
/// and answer as if alone: 8 writers append 20 batches of 3 each; the odd
/// writers give up on each append after 0–300 µs. Every batch is stored whole or not at all, in
/// contiguous seqs, once; every acknowledged batch is stored; every even writer's batch lands.
pub async fn abandoned_appends_land_whole_or_not_at_all(ctx: &Ctx) {
    const ABANDONING_BATCHES: usize = 20;
    let c = conversation(ctx, ctx.scope()).await;
    let acknowledged = race(ctx, WRITERS, |backend, scope, w| {
        let id = c.id.clone();
        async move {
            let mut acknowledged = Vec::new();
            for b in 0..ABANDONING_BATCHES {
                let batch = (0..3)
                    .map(|i| text(&format!("w{w}-b{b}-{i}"), Role::User, "abandoned?"))
                    .collect();
                let append = backend.append(&scope, &id, batch, AppendOptions::default());
                if w % 2 == 0 {
                    append.await?;
                    acknowledged.push(format!("w{w}-b{b}"));
                } else {
                    // The future is polled at least once, then dropped at the deadline.
                    let patience = std::time::Duration::from_micros(50 * (b % 7) as u64);
                    if let Ok(appended) = tokio::time::timeout(patience, append).await {
                        appended?;
                        acknowledged.push(format!("w{w}-b{b}"));
                    }
                }
            }
            Ok(acknowledged)
        }
    })
    .await;
    let loaded = load(ctx, &c.id, LoadOptions::raw()).await;
    let seqs: Vec<u64> = loaded.iter().map(|m| m.seq).collect();
    assert_eq!(
        seqs,
        (1..=loaded.len() as u64).collect::<Vec<_>>(),
        "seqs without gaps"
    );
    let mut batches: HashMap<String, Vec<(u64, String)>> = HashMap::new();
    for m in &loaded {
        let id = m.message.id.to_string();
        let (batch, item) = id.rsplit_once('-').expect("w-b-i ids");
        batches
            .entry(batch.to_owned())
            .or_default()
            .push((m.seq, item.to_owned()));
    }
    for (batch, items) in &batches {
        let first = items[0].0;
        let expected: Vec<(u64, String)> = (0..3).map(|i| (first + i, i.to_string())).collect();
        assert_eq!(items, &expected, "batch {batch} whole, once, in order");
    }
    for (w, result) in acknowledged.into_iter().enumerate() {
        let acknowledged = result.must("an append its caller waits for lands");
        if w % 2 == 0 {
            assert_eq!(
                acknowledged.len(),
                ABANDONING_BATCHES,
                "writer {w} waited for all"
            );
        }
        for batch in acknowledged {
            assert!(
                batches.contains_key(&batch),
                "acknowledged {batch} is stored"
            );
        }
    }
}

/// Writers retrying the same batches concurrently store each message exactly once.
pub async fn concurrent_retries_of_one_batch_apply_once(ctx: &Ctx) {
    let c = conversation(ctx, ctx.scope()).await;
    let results = race(ctx, WRITERS, |backend, scope, _| {
        let id = c.id.clone();
        async move {
            for b in 0..25 {
                let batch = (0..4)
                    .map(|i| text(&format!("b{b}-{i}"), Role::User, "same"))
                    .collect();
                backend
                    .append(&scope, &id, batch, AppendOptions::default())
                    .await?;
            }
            Ok(())
        }
    })
    .await;
    for result in results {
        result.must("retry append");
    }
    let loaded = load(ctx, &c.id, LoadOptions::raw()).await;
    assert_eq!(loaded.len(), 100);
    assert_eq!(loaded.last().map(|m| m.seq), Some(100));
}

/// Of concurrent compare-and-appends from the same seq exactly one wins; the others see
/// `Conflict` with the new seq.
pub async fn concurrent_compare_and_append_has_one_winner(ctx: &Ctx) {
    let c = conversation(ctx, ctx.scope()).await;
    let results = race(ctx, WRITERS, |backend, scope, w| {
        let id = c.id.clone();
        async move {
            let options = AppendOptions::default().with_expected_last_seq(0);
            backend
                .append(
                    &scope,
                    &id,
                    vec![text(&format!("w{w}"), Role::User, "race")],
                    options,
                )
                .await
        }
    })
    .await;
    assert_one_winner(&results);
    assert!(results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .all(|e| e.current() == Some(1)));
    assert_eq!(load(ctx, &c.id, LoadOptions::raw()).await.len(), 1);
}

/// Concurrent writes that fail and writes that succeed keep their own outcomes (a store that
/// shares one transaction between concurrent writes must not let one's failure undo or fail
/// another): of 8 writers, those with a stale expected seq see `Conflict`, those appending to
/// a missing conversation see `NotFound`, and every other append and remember lands.
pub async fn concurrent_writes_keep_their_own_outcomes(ctx: &Ctx) {
    let c = conversation(ctx, ctx.scope()).await;
    ctx.backend()
        .append(
            ctx.scope(),
            &c.id,
            vec![text("seed", Role::User, "seed")],
            AppendOptions::default(),
        )
        .await
        .must("seed");
    let missing = mnemix_core::ConversationId::new("never-created").must("id");
    for round in 0..5 {
        let results = race(ctx, WRITERS, |backend, scope, w| {
            let (id, missing) = (c.id.clone(), missing.clone());
            async move {
                let message = vec![text(&format!("r{round}-w{w}"), Role::User, "mixed")];
                let appended = match w % 4 {
                    // Stale: the seed's seq was passed before this round began.
                    1 => {
                        let stale = AppendOptions::default().with_expected_last_seq(0);
                        backend.append(&scope, &id, message, stale).await
                    }
                    3 => {
                        backend
                            .append(&scope, &missing, message, AppendOptions::default())
                            .await
                    }
                    _ => {
                        backend
                            .append(&scope, &id, message, AppendOptions::default())
                            .await
                    }
                };
                let remembered = backend
                    .remember(
                        &scope,
                        NewFact::new(format!("round {round} writer {w} remembers")),
                        RememberOptions::default(),
                    )
                    .await;
                Ok::<_, mnemix_core::MemoryError>((appended.map(|_| ()), remembered.map(|_| ())))
            }
        })
        .await;
        for (w, result) in results.into_iter().enumerate() {
            let (appended, remembered) = result.must("the writer's task");
            remembered.must("every remember lands");
            let expected: fn(&mnemix_core::MemoryError) -> bool = match w % 4 {
                1 => mnemix_core::MemoryError::is_conflict,
                3 => mnemix_core::MemoryError::is_not_found,
                _ => {
                    appended.must("a plain append lands");
                    continue;
                }
            };
            assert!(
                appended.as_ref().is_err_and(expected),
                "round {round} writer {w}: a stale append conflicts, one to a missing \
                 conversation is not found: {appended:?}"
            );
        }
    }
    let loaded = load(ctx, &c.id, LoadOptions::raw()).await;
    let mut ids: Vec<String> = loaded.iter().map(|m| m.message.id.to_string()).collect();
    ids.sort();
    let mut expected: Vec<String> = (0..5)
        .flat_map(|round| {
            (0..WRITERS)
                .filter(|w| w % 2 == 0)
                .map(move |w| format!("r{round}-w{w}"))
        })
        .chain(std::iter::once("seed".to_owned()))
        .collect();
    expected.sort();
    assert_eq!(ids, expected, "exactly the plain appends landed");
    let facts = ctx
        .backend()
        .list_facts(ctx.scope(), mnemix_core::FactQuery::default())
        .await
        .must("list facts");
    assert_eq!(facts.items.len(), 5 * WRITERS, "every remember landed once");
}

/// Of concurrent working-memory compare-and-sets from one revision exactly one wins.
pub async fn concurrent_working_memory_compare_and_set_has_one_winner(ctx: &Ctx) {
    let key = WorkingMemoryKey::User;
    ctx.backend()
        .set_working_memory(ctx.scope(), &key, WorkingMemoryUpdate::markdown("v1"))
        .await
        .must("seed");
    let results = race(ctx, WRITERS, |backend, scope, w| async move {
        let update = WorkingMemoryUpdate::markdown(format!("writer {w}")).expecting(1);
        backend
            .set_working_memory(&scope, &WorkingMemoryKey::User, update)
            .await
    })
    .await;
    assert_one_winner(&results);
    let stored = ctx
        .backend()
        .get_working_memory(ctx.scope(), &key)
        .await
        .must("get")
        .expect("set");
    assert_eq!(stored.revision, 2);
}

/// Concurrent supersedes of one key leave exactly one current fact and every version in history.
pub async fn concurrent_supersedes_leave_one_current_fact(ctx: &Ctx) {
    let results = race(ctx, WRITERS, |backend, scope, w| async move {
        let fact = NewFact::new(format!("lives in city {w}")).with_key("city");
        backend
            .remember(&scope, fact, RememberOptions::default())
            .await
    })
    .await;
    for result in results {
        result.must("remember");
    }
    let history = ctx
        .backend()
        .history(ctx.scope(), "city")
        .await
        .must("history");
    assert_eq!(history.len(), WRITERS, "every version kept");
    assert_eq!(
        history.iter().filter(|f| f.is_current()).count(),
        1,
        "exactly one current"
    );
    let recalled = FactStore::recall(ctx.backend(), ctx.scope(), RecallQuery::text("city"))
        .await
        .must("recall");
    assert_eq!(recalled.len(), 1);
}

/// 8 writers supersede one key in the same millisecond, three keys over: history follows the
/// supersede chain (each version's `superseded_by` is the next one) and ends with the current
/// version — not the order of ids, which writers make before they are applied.
pub async fn concurrent_supersedes_keep_history_in_supersede_order(ctx: &Ctx) {
    for round in 0..3 {
        let key = format!("city-{round}");
        let results = race(ctx, WRITERS, |backend, scope, w| {
            let fact = NewFact::new(format!("lives in city {round} {w}")).with_key(key.clone());
            async move {
                backend
                    .remember(&scope, fact, RememberOptions::default())
                    .await
            }
        })
        .await;
        for result in results {
            result.must("remember");
        }
        let history = ctx
            .backend()
            .history(ctx.scope(), &key)
            .await
            .must("history");
        assert_eq!(history.len(), WRITERS, "every version kept");
        for pair in history.windows(2) {
            assert_eq!(
                pair[0].superseded_by.as_ref(),
                Some(&pair[1].id),
                "history is the supersede chain, oldest first: {history:#?}"
            );
        }
        assert!(
            history[WRITERS - 1].is_current(),
            "the current version is last"
        );
    }
}

/// `forget_all` while four writers append to the subject's two conversations: its receipt
/// counts every message that was there, which is every acknowledged append (appends after the
/// erasure find no conversation), and nothing survives.
pub async fn forget_all_counts_messages_appended_concurrently(ctx: &Ctx) {
    const SEEDED: usize = 5;
    const MAX_APPENDS: usize = 250;
    let conversations = [
        conversation_with(ctx, texts("seed-a", SEEDED)).await.id,
        conversation_with(ctx, texts("seed-b", SEEDED)).await.id,
    ];
    let acknowledged = Arc::new(AtomicUsize::new(0));
    let (counter, targets) = (Arc::clone(&acknowledged), conversations.clone());
    let writers = race(ctx, 4, move |backend, scope, w| {
        let id = targets[w % 2].clone();
        let acknowledged = Arc::clone(&counter);
        async move {
            for i in 0..MAX_APPENDS {
                let message = text(&format!("w{w}-{i}"), Role::User, "appended");
                match backend
                    .append(&scope, &id, vec![message], AppendOptions::default())
                    .await
                {
                    Ok(_) => acknowledged.fetch_add(1, SeqCst),
                    Err(e) if e.is_not_found() => return Ok(()),
                    Err(e) => return Err(e),
                };
            }
            Ok(())
        }
    });
    let eraser = async {
        while acknowledged.load(SeqCst) < 40 {
            tokio::task::yield_now().await;
        }
        ctx.backend().forget_all(ctx.scope()).await
    };
    let (writers, receipt) = futures::join!(writers, eraser);
    let receipt = receipt.must("forget_all");
    for result in writers {
        result.must("append");
    }
    let total = 2 * SEEDED + acknowledged.load(SeqCst);
    assert_eq!(
        receipt.messages, total as u64,
        "the receipt counts every acknowledged message"
    );
    assert_eq!(receipt.conversations, 2);
    for id in &conversations {
        ctx.backend()
            .load(ctx.scope(), id, LoadOptions::raw())
            .await
            .must_be_not_found("erased conversation");
    }
}

/// 4 writers rewrite their records with rising versions while a reader searches: every hit is
/// a record as stored at one moment, scored on the vector it returns (a store that scores one
/// version and returns another, e.g. from a matrix read before a write, fails), and the last
/// search after the writers finish sees every record at its last version.
pub async fn concurrent_upserts_never_give_a_hit_of_another_version(ctx: &Ctx) {
    use mnemix_core::{CollectionSpec, Metric, VectorId, VectorQuery, VectorRecord};
    const RECORDS_PER_WRITER: usize = 5;
    const VERSIONS: usize = 40;
    const DIMS: usize = 8;
    let spec = CollectionSpec::new("racing", DIMS, "test-model").with_metric(Metric::Dot);
    ctx.backend()
        .ensure_collection(ctx.namespace(), spec)
        .await
        .must("collection");
    // Version v of a record: first component v + 1 (its score against e_0), the version in
    // its metadata too.
    let version = |w: usize, r: usize, v: usize| {
        let mut vector = vec![0.25; DIMS];
        vector[0] = (v + 1) as f32;
        let mut record =
            VectorRecord::new(VectorId::new(format!("w{w}-r{r}")).expect("id"), vector);
        record.metadata.insert("version".into(), (v as u64).into());
        record
    };
    let query = {
        let mut q = vec![0.0; DIMS];
        q[0] = 1.0;
        q
    };
    let check = |hits: &[mnemix_core::VectorHit]| {
        for hit in hits {
            let v = &hit.record.vector;
            let expected = Metric::Dot.score(&query, v);
            assert!(
                (hit.score - expected).abs() <= 1e-3 * expected.abs().max(1.0),
                "{} scored {} but returned a vector scoring {expected}",
                hit.record.id,
                hit.score
            );
            let stored = hit
                .record
                .metadata
                .get("version")
                .and_then(serde_json::Value::as_f64);
            assert_eq!(
                stored,
                Some(f64::from(v[0]) - 1.0),
                "{}: metadata and vector of one version",
                hit.record.id
            );
        }
    };
    let results = race(ctx, 5, |backend, scope, w| {
        let query = query.clone();
        async move {
            let mut searched = Vec::new();
            if w == 0 {
                for _ in 0..VERSIONS {
                    let mut q = VectorQuery::new(query.clone(), 10);
                    q.include_vectors = true;
                    searched.push(backend.search(&scope, "racing", q).await?);
                    tokio::task::yield_now().await;
                }
            } else {
                for v in 0..VERSIONS {
                    let records = (0..RECORDS_PER_WRITER).map(|r| version(w, r, v)).collect();
                    backend.upsert_vectors(&scope, "racing", records).await?;
                }
            }
            Ok(searched)
        }
    })
    .await;
    for result in results {
        for hits in result.must("race") {
            check(&hits);
        }
    }
    let mut q = VectorQuery::new(query.clone(), 20);
    q.include_vectors = true;
    let last = ctx
        .backend()
        .search(ctx.scope(), "racing", q)
        .await
        .must("search after the writers");
    check(&last);
    assert_eq!(last.len(), 4 * RECORDS_PER_WRITER);
    assert!(
        last.iter()
            .all(|hit| hit.record.vector[0] as usize == VERSIONS),
        "every record at its last version: {last:?}"
    );
}

/// Three rounds in which 8 tasks make 4 collections (two racing for each name) while 4 others
/// drop the collections made the round before: every make answers with the spec, every drop
/// says the collection was there, and afterwards exactly the last round's collections are
/// listed and each takes and finds a record (a store whose collection DDL deadlocks, or races
/// a make or a drop into a failure, fails).
pub async fn concurrent_collection_makes_and_drops_each_end_as_asked(ctx: &Ctx) {
    use mnemix_core::{CollectionSpec, VectorId, VectorQuery, VectorRecord};
    let spec = |name: &str| CollectionSpec::new(name, 3, "test-model");
    let names_of_round =
        |round: usize| -> Vec<String> { (0..4).map(|i| format!("made-{round}-{i}")).collect() };
    let mut made = names_of_round(0);
    for name in &made {
        ctx.backend()
            .ensure_collection(ctx.namespace(), spec(name))
            .await
            .must("collection to drop");
    }
    for round in 1..=3 {
        let names = names_of_round(round);
        // Two makes race for each name.
        let makes = names.iter().chain(&names).map(|name| async move {
            let answer = ctx
                .backend()
                .ensure_collection(ctx.namespace(), spec(name))
                .await
                .must("concurrent make");
            assert_eq!(answer, spec(name), "a make answers with its spec");
        });
        let drops = made.iter().map(|name| async move {
            let dropped = ctx
                .backend()
                .drop_collection(ctx.namespace(), name)
                .await
                .must("concurrent drop");
            assert!(dropped, "{name} was there to drop");
        });
        futures::join!(
            futures::future::join_all(makes),
            futures::future::join_all(drops)
        );
        made = names;
    }
    let listed: Vec<String> = collection_names(ctx)
        .await
        .into_iter()
        .filter(|name| name.starts_with("made-"))
        .collect();
    assert_eq!(listed, made);
    for name in &listed {
        let id = VectorId::new("only").expect("id");
        ctx.backend()
            .upsert_vectors(
                ctx.scope(),
                name,
                vec![VectorRecord::new(id.clone(), vec![1.0, 0.0, 0.0])],
            )
            .await
            .must("upsert into a made collection");
        let hits = ctx
            .backend()
            .search(ctx.scope(), name, VectorQuery::new(vec![1.0, 0.0, 0.0], 1))
            .await
            .must("search a made collection");
        assert_eq!(hits.len(), 1, "{name}");
        assert_eq!(hits[0].record.id, id, "{name}");
    }
}
