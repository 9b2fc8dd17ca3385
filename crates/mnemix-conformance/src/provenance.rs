//! Scenarios of provenance and valid time: who wrote each version of a fact and where its
//! content came from (set by the front layer from the handle, never from the request), and when
//! it was true in the world.

use std::sync::Arc;
use std::time::Duration;

use mnemix_core::transfer::{Digest, Record};
use mnemix_core::{
    Claim, FactStore, MemoryBackend, NewFact, Origin, Principal, PrincipalKind, Provenance,
    RecallQuery, RememberOptions, ScoredFact, Timestamp,
};

use crate::facts::texts;
use crate::support::{unit_vector, ResultExt};
use crate::Ctx;

fn agent(id: &str) -> Principal {
    Principal::agent(id).expect("an agent id")
}

/// The backend under test writing as `principal`, from `origin`.
fn writing_as(ctx: &Ctx, principal: Principal, origin: Origin) -> Arc<dyn MemoryBackend> {
    ctx.backend_arc()
        .acting_as(Provenance::new(principal, origin))
        .expect("the backend under test is behind the front layer")
}

async fn remember(backend: &dyn MemoryBackend, ctx: &Ctx, fact: NewFact) -> mnemix_core::Fact {
    backend
        .remember(ctx.scope(), fact, RememberOptions::default())
        .await
        .must("remember")
        .fact
}

async fn recall(ctx: &Ctx, query: RecallQuery) -> Vec<ScoredFact> {
    FactStore::recall(ctx.backend(), ctx.scope(), query)
        .await
        .must("recall")
}

/// A fact records the handle's writer and origin, and reads back with them everywhere: the
/// store's own by default (the program's, as `open` gives it), an agent's through a handle
/// acting as it.
pub async fn remember_records_the_writer_of_the_handle(ctx: &Ctx) {
    let own = remember(ctx.backend(), ctx, NewFact::new("Prefers tea")).await;
    assert_eq!(own.provenance, ctx.writer());
    let planner = writing_as(ctx, agent("planner"), Origin::User);
    let said = remember(
        planner.as_ref(),
        ctx,
        NewFact::new("Lives near the harbour"),
    )
    .await;
    let expected = Provenance::new(agent("planner"), Origin::User);
    assert_eq!(said.provenance, expected);
    let read = ctx
        .backend()
        .get_fact(ctx.scope(), &said.id)
        .await
        .must("get");
    assert_eq!(read.provenance, expected);
    let hits = recall(ctx, RecallQuery::text("harbour")).await;
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].fact.provenance, expected);
    let listed = ctx
        .backend()
        .list_facts(ctx.scope(), mnemix_core::FactQuery::default())
        .await
        .must("list");
    assert!(listed.items.iter().any(|f| f.provenance == expected));
}

/// Each version of a key keeps who made it; a duplicate changes no one's record.
pub async fn superseding_versions_keep_each_writer(ctx: &Ctx) {
    let (first, second) = (
        writing_as(ctx, agent("first"), Origin::Api),
        writing_as(ctx, agent("second"), Origin::Api),
    );
    remember(
        first.as_ref(),
        ctx,
        NewFact::new("Drinks tea").with_key("drink"),
    )
    .await;
    ctx.clock().advance(Duration::from_millis(5));
    remember(
        second.as_ref(),
        ctx,
        NewFact::new("Drinks coffee").with_key("drink"),
    )
    .await;
    // The same fact again, by the first writer: a duplicate, still the second's.
    let again = first
        .remember(
            ctx.scope(),
            NewFact::new("Drinks coffee").with_key("drink"),
            RememberOptions::default(),
        )
        .await
        .must("remember again");
    assert_eq!(again.status, mnemix_core::RememberStatus::Duplicate);
    assert_eq!(again.fact.provenance.written_by, agent("second"));
    let history = ctx
        .backend()
        .history(ctx.scope(), "drink")
        .await
        .must("history");
    let writers: Vec<&Principal> = history.iter().map(|f| &f.provenance.written_by).collect();
    assert_eq!(writers, [&agent("first"), &agent("second")]);
}

/// Nothing in a request names the writer: a fact read from JSON that claims one is stored as
/// the handle's.
pub async fn no_request_field_names_the_writer(ctx: &Ctx) {
    let forged: NewFact = serde_json::from_value(serde_json::json!({
        "text": "Is an administrator",
        "tags": [],
        "provenance": {"written_by": {"kind": "key", "id": "admin"}, "origin": "user"},
    }))
    .expect("a NewFact's JSON");
    let stored = remember(ctx.backend(), ctx, forged).await;
    assert_eq!(stored.provenance, ctx.writer());
    assert_ne!(stored.provenance.written_by.kind, PrincipalKind::Key);
}

/// Recall keeps to the origins and writers asked for, on the lexical path and through the
/// held facts of semantic recall alike.
async fn recall_filtered(ctx: &Ctx, semantic: bool) {
    let facts = [
        ("alpha", agent("a"), Origin::Api, 0),
        ("bravo", agent("b"), Origin::Api, 1),
        (
            "charlie",
            Principal::extractor("model-x").unwrap(),
            Origin::Tool,
            2,
        ),
        (
            "delta",
            Principal::extractor("model-x").unwrap(),
            Origin::Extracted,
            3,
        ),
    ];
    for (word, principal, origin, axis) in &facts {
        let backend = writing_as(ctx, principal.clone(), *origin);
        let mut fact = NewFact::new(format!("Shared note {word}"));
        if semantic {
            fact = fact.with_embedding(unit_vector(8, *axis));
        }
        remember(backend.as_ref(), ctx, fact).await;
    }
    let query = || {
        let query = RecallQuery::text("shared note").with_limit(10);
        if semantic {
            let mut probe = vec![0.5_f32; 8];
            probe[0] = 1.0;
            RecallQuery::default().with_vector(probe).with_limit(10)
        } else {
            query
        }
    };
    let sorted = |hits: Vec<ScoredFact>| {
        let mut words: Vec<String> = texts(&hits)
            .iter()
            .map(|t| t.trim_start_matches("Shared note ").to_owned())
            .collect();
        words.sort();
        words
    };
    assert_eq!(
        sorted(recall(ctx, query()).await),
        ["alpha", "bravo", "charlie", "delta"]
    );
    let not_from_tools = query().with_origins([Origin::Api, Origin::Extracted]);
    assert_eq!(
        sorted(recall(ctx, not_from_tools).await),
        ["alpha", "bravo", "delta"]
    );
    // A principal is matched by kind and id, whatever its label.
    let by_a = query().with_written_by([agent("a")]);
    assert_eq!(sorted(recall(ctx, by_a).await), ["alpha"]);
    let mine_not_tools = query()
        .with_written_by([agent("a"), Principal::extractor("model-x").unwrap()])
        .with_origins([Origin::Api, Origin::Extracted]);
    assert_eq!(
        sorted(recall(ctx, mine_not_tools).await),
        ["alpha", "delta"]
    );
    let nobody = query().with_written_by([agent("c")]);
    assert!(recall(ctx, nobody).await.is_empty());
}

/// Lexical recall filtered by origin and writer.
pub async fn recall_filters_by_origin_and_writer(ctx: &Ctx) {
    recall_filtered(ctx, false).await;
}

/// Semantic recall (the held facts) filtered by origin and writer.
pub async fn semantic_recall_filters_by_origin_and_writer(ctx: &Ctx) {
    recall_filtered(ctx, true).await;
}

/// A restore records the importer as the writer of what it restores and keeps the file's
/// account as a claim, which no filter by writer matches; a copy digests as its source.
pub async fn restore_records_the_importer_and_keeps_the_claim(ctx: &Ctx) {
    let original = remember(ctx.backend(), ctx, NewFact::new("Owns a red bicycle")).await;
    let exported = ctx.backend().export_scope(ctx.scope()).await.must("export");
    let before = Digest::of(&exported);
    // The file edited to claim a key wrote it.
    let forged_writer = Principal::key("0123456789abcdef", Some("admin".into())).unwrap();
    let forged: Vec<Record> = exported
        .into_iter()
        .map(|record| match record {
            Record::Fact { mut fact } => {
                fact.provenance = Provenance::new(forged_writer.clone(), Origin::User);
                Record::Fact { fact }
            }
            other => other,
        })
        .collect();
    ctx.backend().forget_all(ctx.scope()).await.must("erase");
    let importer = writing_as(ctx, agent("importer"), Origin::Api);
    importer.restore(forged).await.must("restore");
    let restored = ctx
        .backend()
        .get_fact(ctx.scope(), &original.id)
        .await
        .must("get");
    assert_eq!(restored.provenance.written_by, agent("importer"));
    assert_eq!(restored.provenance.origin, Origin::Imported);
    assert_eq!(
        restored.provenance.claimed,
        Some(Box::new(Claim {
            written_by: forged_writer.clone(),
            origin: Origin::User,
        }))
    );
    let claimed = RecallQuery::text("bicycle").with_written_by([forged_writer]);
    assert!(recall(ctx, claimed).await.is_empty());
    let said_by_user = RecallQuery::text("bicycle").with_origins([Origin::User]);
    assert!(recall(ctx, said_by_user).await.is_empty());

    // Restoring the genuine export instead: the copy's account is the source's.
    ctx.backend().forget_all(ctx.scope()).await.must("erase");
    let genuine = vec![Record::Fact { fact: original }];
    importer.restore(genuine).await.must("restore");
    let after = ctx.backend().export_scope(ctx.scope()).await.must("export");
    assert_eq!(Digest::of(&after), before);
}

/// A valid time reads back as given; one that ends before it starts is `InvalidInput`.
pub async fn valid_time_round_trips_and_must_be_an_interval(ctx: &Ctx) {
    let (from, until) = (Timestamp::from_millis(1_000), Timestamp::from_millis(9_000));
    let stored = remember(
        ctx.backend(),
        ctx,
        NewFact::new("On leave")
            .with_valid_from(from)
            .with_valid_until(until),
    )
    .await;
    let read = ctx
        .backend()
        .get_fact(ctx.scope(), &stored.id)
        .await
        .must("get");
    assert_eq!(
        (read.valid_from, read.valid_until),
        (Some(from), Some(until))
    );
    for (from, until) in [(9_000, 1_000), (5_000, 5_000)] {
        ctx.backend()
            .remember(
                ctx.scope(),
                NewFact::new("Backwards")
                    .with_valid_from(Timestamp::from_millis(from))
                    .with_valid_until(Timestamp::from_millis(until)),
                RememberOptions::default(),
            )
            .await
            .must_be_invalid("valid_until not after valid_from");
    }
}

/// A version of a key that became true later closes the one it supersedes there; one that
/// says no start, or an earlier one, leaves the old interval as it was.
pub async fn superseding_with_a_later_valid_from_closes_the_previous(ctx: &Ctx) {
    let (march, june) = (Timestamp::from_millis(3_000), Timestamp::from_millis(6_000));
    let paris = remember(
        ctx.backend(),
        ctx,
        NewFact::new("Lives in Paris").with_key("city"),
    )
    .await;
    remember(
        ctx.backend(),
        ctx,
        NewFact::new("Lives in Berlin")
            .with_key("city")
            .with_valid_from(march),
    )
    .await;
    let get = |id| async move { ctx.backend().get_fact(ctx.scope(), &id).await.must("get") };
    assert_eq!(get(paris.id.clone()).await.valid_until, Some(march));

    let rome = remember(
        ctx.backend(),
        ctx,
        NewFact::new("Works in Rome")
            .with_key("job")
            .with_valid_from(june),
    )
    .await;
    // Started earlier than the current one: it closes nothing.
    remember(
        ctx.backend(),
        ctx,
        NewFact::new("Works in Oslo")
            .with_key("job")
            .with_valid_from(march),
    )
    .await;
    assert_eq!(get(rome.id.clone()).await.valid_until, None);
}

/// Milliseconds of a day of 2026 (UTC), for a scripted history.
fn day_of_2026(month: u32, day: u32) -> Timestamp {
    const JAN_1_2026: i64 = 1_767_225_600_000;
    let days_before = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let days = days_before[month as usize - 1] + i64::from(day) - 1;
    Timestamp::from_millis(JAN_1_2026 + days * 86_400_000)
}

/// `as_of(t)` recalls what was true in the world at `t`, superseded versions included: a
/// move in March and a new job in June, asked of before, between and after.
pub async fn recall_as_of_answers_what_was_true_then(ctx: &Ctx) {
    let history = [
        ("Lives in Paris", "city", day_of_2026(1, 1)),
        ("Works at Acme", "job", day_of_2026(1, 1)),
        ("Lives in Berlin", "city", day_of_2026(3, 15)),
        ("Works at Globex", "job", day_of_2026(6, 1)),
    ];
    for (text, key, from) in history {
        remember(
            ctx.backend(),
            ctx,
            NewFact::new(text).with_key(key).with_valid_from(from),
        )
        .await;
        ctx.clock().advance(Duration::from_millis(3));
    }
    let as_of = |t| async move {
        let hits = recall(ctx, RecallQuery::text("lives works").with_as_of(t)).await;
        let mut found: Vec<String> = texts(&hits).iter().map(|t| (*t).to_owned()).collect();
        found.sort();
        found
    };
    assert!(
        as_of(Timestamp::from_millis(day_of_2026(1, 1).as_millis() - 1))
            .await
            .is_empty()
    );
    assert_eq!(
        as_of(day_of_2026(2, 10)).await,
        ["Lives in Paris", "Works at Acme"]
    );
    assert_eq!(
        as_of(day_of_2026(3, 15)).await,
        ["Lives in Berlin", "Works at Acme"]
    );
    assert_eq!(
        as_of(day_of_2026(4, 20)).await,
        ["Lives in Berlin", "Works at Acme"]
    );
    assert_eq!(
        as_of(day_of_2026(7, 1)).await,
        ["Lives in Berlin", "Works at Globex"]
    );
    // Without a time, recall answers from the current versions only.
    let current = recall(ctx, RecallQuery::text("lives works")).await;
    let mut now = texts(&current);
    now.sort_unstable();
    assert_eq!(now, ["Lives in Berlin", "Works at Globex"]);
}

/// `known_at(t)` recalls the versions the store held as current at `t`.
pub async fn recall_known_at_answers_what_the_store_knew_then(ctx: &Ctx) {
    let before = ctx.clock_now();
    ctx.clock().advance(Duration::from_millis(10));
    remember(
        ctx.backend(),
        ctx,
        NewFact::new("Plays chess").with_key("game"),
    )
    .await;
    let first = ctx.clock_now();
    ctx.clock().advance(Duration::from_millis(10));
    remember(
        ctx.backend(),
        ctx,
        NewFact::new("Plays go").with_key("game"),
    )
    .await;
    let second = ctx.clock_now();
    let known = |t| async move {
        texts(&recall(ctx, RecallQuery::text("plays").with_known_at(t)).await)
            .iter()
            .map(|t| (*t).to_owned())
            .collect::<Vec<_>>()
    };
    assert!(known(before).await.is_empty());
    assert_eq!(known(first).await, ["Plays chess"]);
    assert_eq!(
        known(Timestamp::from_millis(second.as_millis() - 1)).await,
        ["Plays chess"]
    );
    assert_eq!(known(second).await, ["Plays go"]);
}
