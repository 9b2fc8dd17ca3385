//! Scenarios of [`mnemix_core::FactStore`].

use std::time::Duration;

use mnemix_core::adapter::rank_facts;
use mnemix_core::{
    FactId, FactQuery, FactSource, FactStore, MessageId, NewFact, RecallQuery, RememberOptions,
    RememberStatus,
};

use crate::support::{cid, unit_vector, ResultExt};
use crate::Ctx;

async fn remember(ctx: &Ctx, fact: NewFact) -> mnemix_core::RememberOutcome {
    ctx.backend()
        .remember(ctx.scope(), fact, RememberOptions::default())
        .await
        .must("remember")
}

async fn recall(ctx: &Ctx, query: RecallQuery) -> Vec<mnemix_core::ScoredFact> {
    FactStore::recall(ctx.backend(), ctx.scope(), query)
        .await
        .must("recall")
}

/// The texts of recalled facts, in their order.
pub(crate) fn texts(hits: &[mnemix_core::ScoredFact]) -> Vec<&str> {
    hits.iter().map(|h| h.fact.text.as_str()).collect()
}

fn scored(text: &str, score: f32) -> NewFact {
    NewFact::new(text).with_score(score)
}

/// A remembered fact keeps every field and reads back.
pub async fn remember_stores_every_field(ctx: &Ctx) {
    let new = NewFact::new("Prefers TypeScript strict mode")
        .with_kind("preference")
        .with_key("ts-mode")
        .with_tags(["code", "style"])
        .with_score(0.9)
        .with_source(FactSource {
            conversation_id: cid("c-1"),
            message_ids: vec![MessageId::new("m-1").unwrap()],
        })
        .with_expires_at(ctx.clock_now().saturating_add(Duration::from_hours(1)));
    let outcome = remember(ctx, new.clone()).await;
    assert_eq!(outcome.status, RememberStatus::Created);
    let fact = ctx
        .backend()
        .get_fact(ctx.scope(), &outcome.fact.id)
        .await
        .must("get");
    assert_eq!(fact, outcome.fact);
    assert_eq!(
        (&fact.text, &fact.kind, &fact.key),
        (&new.text, &new.kind, &new.key)
    );
    assert_eq!(
        (&fact.tags, fact.score, &fact.source),
        (&new.tags, new.score, &new.source)
    );
    assert_eq!(fact.expires_at, new.expires_at);
    assert_eq!(fact.created_at, ctx.clock_now());
    assert!(fact.is_current());
}

/// Identical text (same key or both keyless) is a duplicate: one fact, nothing changes.
pub async fn remember_identical_text_is_a_duplicate(ctx: &Ctx) {
    let first = remember(ctx, NewFact::new("Allergic to peanuts")).await;
    let second = remember(ctx, NewFact::new("Allergic to peanuts")).await;
    assert_eq!(second.status, RememberStatus::Duplicate);
    assert_eq!(second.fact.id, first.fact.id);
    let page = ctx
        .backend()
        .list_facts(ctx.scope(), FactQuery::default())
        .await
        .must("list");
    assert_eq!(page.items.len(), 1);
}

/// A new text for a key supersedes the current fact and keeps it as history.
pub async fn remember_with_key_supersedes_and_keeps_history(ctx: &Ctx) {
    let keyed = |t: &str| NewFact::new(t).with_key("city");
    let old = remember(ctx, keyed("Lives in Paris")).await.fact;
    ctx.clock().advance(Duration::from_secs(1));
    let outcome = remember(ctx, keyed("Lives in Berlin")).await;
    assert_eq!(
        outcome.status,
        RememberStatus::Superseded {
            previous: old.id.clone()
        }
    );
    let old_now = ctx
        .backend()
        .get_fact(ctx.scope(), &old.id)
        .await
        .must("get old");
    assert_eq!(old_now.superseded_by.as_ref(), Some(&outcome.fact.id));
    assert_eq!(old_now.valid_to, Some(ctx.clock_now()));
    assert!(!old_now.is_current() && outcome.fact.is_current());
    let again = remember(ctx, keyed("Lives in Berlin")).await;
    assert_eq!(again.status, RememberStatus::Duplicate);
}

/// History lists every version of a key, oldest first, the current one last.
pub async fn history_lists_versions_oldest_first(ctx: &Ctx) {
    for city in ["Paris", "Berlin", "Oslo"] {
        remember(
            ctx,
            NewFact::new(format!("Lives in {city}")).with_key("city"),
        )
        .await;
        ctx.clock().advance(Duration::from_secs(1));
    }
    remember(ctx, NewFact::new("Engineer").with_key("job")).await;
    let history = ctx
        .backend()
        .history(ctx.scope(), "city")
        .await
        .must("history");
    let texts: Vec<_> = history.iter().map(|f| f.text.as_str()).collect();
    assert_eq!(
        texts,
        ["Lives in Paris", "Lives in Berlin", "Lives in Oslo"]
    );
    assert!(history[..2].iter().all(|f| !f.is_current()) && history[2].is_current());
    assert!(ctx
        .backend()
        .history(ctx.scope(), "unknown")
        .await
        .must("unknown")
        .is_empty());
}

/// Superseded facts are never recalled.
pub async fn superseded_facts_are_not_recalled(ctx: &Ctx) {
    let keyed = |t: &str| NewFact::new(t).with_key("editor");
    remember(ctx, keyed("Editor choice is vim")).await;
    remember(ctx, keyed("Editor choice is emacs")).await;
    let hits = recall(ctx, RecallQuery::text("editor choice")).await;
    assert_eq!(texts(&hits), ["Editor choice is emacs"]);
}

/// Recall equals the core's reference ranking on a varied corpus and several queries.
pub async fn recall_matches_lexical_definition(ctx: &Ctx) {
    let corpus = [
        ("Project Foo deploys to fly.io us-east", Some(0.9)),
        ("Foo uses PostgreSQL 16 with pgvector", Some(0.8)),
        ("Prefers dark mode in every editor", None),
        ("The deploy pipeline for Foo runs nightly", Some(0.5)),
        ("Straße names in München are hard", Some(0.7)),
        ("STRASSE is not the same token as straße", Some(0.7)),
        ("東京都 office opens at nine", Some(0.6)),
        ("Uses an M1 Mac; ok with x86 builds", Some(0.4)),
        ("foo-bar_baz tokens: foo bar baz", None),
    ];
    let mut facts = Vec::new();
    for (i, (text, score)) in corpus.iter().enumerate() {
        ctx.clock().advance(Duration::from_millis(1 + i as u64));
        facts.push(
            remember(ctx, NewFact::new(*text).with_score(*score))
                .await
                .fact,
        );
    }
    for query in [
        "where does foo deploy",
        "FOO",
        "straße münchen",
        "東京都",
        "mac builds x86",
        "bar baz qux",
        "to a",
    ] {
        let q = RecallQuery::text(query).with_limit(20);
        let got = recall(ctx, q.clone()).await;
        let want = rank_facts(&q, facts.iter().cloned());
        let got_ids: Vec<_> = got.iter().map(|h| (&h.fact.id, h.relevance)).collect();
        let want_ids: Vec<_> = want.iter().map(|h| (&h.fact.id, h.relevance)).collect();
        assert_eq!(got_ids, want_ids, "query {query:?}");
    }
}

/// Order: relevance, then score (none last), then newest, then id.
pub async fn recall_orders_by_relevance_score_then_recency(ctx: &Ctx) {
    remember(ctx, scored("alpha beta gamma", 0.1)).await;
    ctx.clock().advance(Duration::from_millis(5));
    remember(ctx, scored("alpha only old", 0.9)).await;
    ctx.clock().advance(Duration::from_millis(5));
    remember(ctx, scored("alpha only new", 0.9)).await;
    remember(ctx, NewFact::new("alpha without score")).await;
    remember(ctx, scored("alpha low", 0.2)).await;
    let hits = recall(ctx, RecallQuery::text("alpha beta")).await;
    assert_eq!(
        texts(&hits),
        [
            "alpha beta gamma",
            "alpha only new",
            "alpha only old",
            "alpha low",
            "alpha without score"
        ]
    );
    // "alpha" is in all 5 matches, "beta" in 1: their weights ln(1 + 0.5/5.5), ln(1 + 4.5/1.5).
    let (alpha, beta) = ((1.0_f64 + 0.5 / 5.5).ln(), 4.0_f64.ln());
    assert!((hits[0].relevance - 1.0).abs() < f64::EPSILON);
    assert!((hits[1].relevance - alpha / (alpha + beta)).abs() < 1e-12);
}

/// Query words are weighted by how rare they are among the matching facts: one rare word
/// outranks several common ones (a plain share of the words would put the first fact first).
pub async fn recall_weighs_rare_words_over_common_ones(ctx: &Ctx) {
    for text in [
        "What the user does on weekends",
        "The user likes to paint lakes",
        "What the user drinks: tea",
        "What the user reads: novels",
        "What the user does at work",
    ] {
        remember(ctx, NewFact::new(text)).await;
    }
    let hits = recall(ctx, RecallQuery::text("What does the user paint?")).await;
    assert_eq!(
        hits[0].fact.text, "The user likes to paint lakes",
        "{hits:?}"
    );
    assert_eq!(hits.len(), 5);
}

/// Tokens shorter than 3 characters never match; punctuation splits tokens.
pub async fn recall_ignores_short_tokens_and_splits_on_punctuation(ctx: &Ctx) {
    remember(ctx, NewFact::new("go to db at 9")).await;
    remember(ctx, NewFact::new("user's e-mail: alice@example.com")).await;
    assert!(recall(ctx, RecallQuery::text("go db at")).await.is_empty());
    assert_eq!(
        texts(&recall(ctx, RecallQuery::text("example")).await),
        ["user's e-mail: alice@example.com"]
    );
    assert_eq!(
        texts(&recall(ctx, RecallQuery::text("ALICE")).await).len(),
        1
    );
    assert!(
        recall(ctx, RecallQuery::text("exam")).await.is_empty(),
        "no prefix matching"
    );
}

/// Matching is case-insensitive over Unicode.
pub async fn recall_is_case_insensitive_over_unicode(ctx: &Ctx) {
    remember(ctx, NewFact::new("ÄRGER mit ОКНО")).await;
    assert_eq!(recall(ctx, RecallQuery::text("ärger")).await.len(), 1);
    assert_eq!(recall(ctx, RecallQuery::text("окно")).await.len(), 1);
}

/// Text is compared in Unicode normalisation form NFKC and lowercase: `café` typed with a
/// combining accent (NFD) or precomposed (NFC), upper or lower case, a ligature or full-width
/// letters all recall the same fact, with full relevance.
pub async fn recall_matches_every_unicode_normal_form(ctx: &Ctx) {
    remember(
        ctx,
        NewFact::new("Meet at the cafe\u{301} in Zu\u{308}rich"),
    )
    .await;
    remember(ctx, NewFact::new("ﬁnal ｒｅｐｏｒｔ due")).await;
    for (query, expected) in [
        ("café", "Meet at the cafe\u{301} in Zu\u{308}rich"),
        (
            "CAFE\u{301} ZÜRICH",
            "Meet at the cafe\u{301} in Zu\u{308}rich",
        ),
        ("Final REPORT", "ﬁnal ｒｅｐｏｒｔ due"),
    ] {
        let hits = recall(ctx, RecallQuery::text(query)).await;
        assert_eq!(texts(&hits), [expected], "query {query:?}");
        assert!(
            (hits[0].relevance - 1.0).abs() < f64::EPSILON,
            "every query token matched: {query:?}"
        );
    }
}

/// `limit` caps the result (default 10).
pub async fn recall_respects_limit(ctx: &Ctx) {
    for i in 0..15 {
        remember(ctx, NewFact::new(format!("shared token number {i}"))).await;
    }
    assert_eq!(recall(ctx, RecallQuery::text("shared")).await.len(), 10);
    assert_eq!(
        recall(ctx, RecallQuery::text("shared").with_limit(3))
            .await
            .len(),
        3
    );
}

/// Tags filter with all-of semantics; kind filters exactly.
pub async fn recall_filters_by_tags_and_kind(ctx: &Ctx) {
    remember(
        ctx,
        NewFact::new("deploy on friday")
            .with_tags(["work", "infra"])
            .with_kind("note"),
    )
    .await;
    remember(ctx, NewFact::new("deploy checklist").with_tags(["work"])).await;
    remember(
        ctx,
        NewFact::new("deploy the garden")
            .with_tags(["home"])
            .with_kind("note"),
    )
    .await;
    let q = |tags: &[&str], kind: Option<&str>| {
        let mut value = RecallQuery::text("deploy");
        value.tags = tags.iter().map(|t| (*t).to_owned()).collect();
        value.kind = kind.map(Into::into);
        value
    };
    assert_eq!(recall(ctx, q(&["work"], None)).await.len(), 2);
    assert_eq!(
        texts(&recall(ctx, q(&["work", "infra"], None)).await),
        ["deploy on friday"]
    );
    assert_eq!(recall(ctx, q(&[], Some("note"))).await.len(), 2);
    assert_eq!(
        texts(&recall(ctx, q(&["home"], Some("note"))).await),
        ["deploy the garden"]
    );
    assert!(recall(ctx, q(&["nope"], None)).await.is_empty());
}

/// The filters (tags, kind, minimum score, conversation) apply before the words are weighed:
/// each word's weight is taken over the facts the query admits, exactly as the reference ranks.
pub async fn recall_weighs_words_over_the_admitted_facts_only(ctx: &Ctx) {
    let from = |conversation: &str| {
        Some(FactSource {
            conversation_id: cid(conversation),
            message_ids: vec![MessageId::new("m-1").unwrap()],
        })
    };
    let corpus = [
        (
            "deploy the api on friday",
            &["work", "infra"][..],
            Some("note"),
            Some(0.9),
            from("c-a"),
        ),
        (
            "deploy the garden lights",
            &["home"][..],
            Some("note"),
            Some(0.4),
            from("c-b"),
        ),
        (
            "api keys rotate on friday",
            &["work"][..],
            None,
            None,
            from("c-a"),
        ),
        (
            "the api deploy checklist",
            &["work", "infra"][..],
            Some("task"),
            Some(0.7),
            None,
        ),
        ("friday api review", &[][..], None, Some(0.8), from("c-b")),
        (
            "deploy deploy deploy",
            &["work"][..],
            Some("note"),
            Some(0.5),
            from("c-a"),
        ),
    ];
    let mut facts = Vec::new();
    for (i, (text, tags, kind, score, source)) in corpus.into_iter().enumerate() {
        ctx.clock().advance(Duration::from_millis(1 + i as u64));
        let mut new = NewFact::new(text)
            .with_tags(tags.iter().copied())
            .with_score(score)
            .with_source(source);
        new.kind = kind.map(Into::into);
        facts.push(remember(ctx, new).await.fact);
    }
    let query = |tags: &[&str], kind: Option<&str>, min_score, conversation: Option<&str>| {
        let mut value = RecallQuery::text("deploy api friday");
        value.tags = tags.iter().map(|t| (*t).to_owned()).collect();
        value.kind = kind.map(Into::into);
        value.min_score = min_score;
        value.conversation = conversation.map(cid);
        value
    };
    let queries = [
        query(&[], None, None, None),
        query(&["work"], None, None, None),
        query(&["work", "infra"], None, None, None),
        query(&[], Some("note"), None, None),
        query(&[], None, Some(0.6), None),
        query(&[], None, None, Some("c-a")),
        query(&["work"], Some("note"), Some(0.5), Some("c-a")),
        query(&["nowhere"], None, None, None),
    ];
    let relevance_of_one = |q: &RecallQuery| {
        rank_facts(q, facts.iter().cloned())
            .iter()
            .find(|hit| hit.fact.text == "deploy deploy deploy")
            .map(|hit| hit.relevance)
    };
    assert_ne!(
        relevance_of_one(&queries[0]),
        relevance_of_one(&queries[1]),
        "the scenario's filters change the weights"
    );
    for q in queries {
        let got = recall(ctx, q.clone()).await;
        let want = rank_facts(&q, facts.iter().cloned());
        let got: Vec<_> = got.iter().map(|h| (&h.fact.text, h.relevance)).collect();
        let want: Vec<_> = want.iter().map(|h| (&h.fact.text, h.relevance)).collect();
        assert_eq!(got, want, "query {q:?}");
    }
}

/// Past the limit the order still decides which facts come back: among facts holding the same
/// query words (equally relevant), score, then recency, then id pick the first `limit`.
pub async fn recall_picks_past_the_limit_by_score_recency_then_id(ctx: &Ctx) {
    let mut facts = Vec::new();
    for i in 0..12 {
        // One instant, no score: only the ids tell these apart.
        let new = NewFact::new(format!("alpha beta same instant {i:02}"));
        facts.push(remember(ctx, new).await.fact);
    }
    for i in 0..12 {
        ctx.clock().advance(Duration::from_millis(1 + (i % 3)));
        let new = NewFact::new(format!("alpha gamma moment {i:02}"))
            .with_score([None, Some(0.5), Some(0.9)][i as usize % 3]);
        facts.push(remember(ctx, new).await.fact);
    }
    for (query, limit) in [
        ("alpha", 5),
        ("alpha", 13),
        ("beta", 4),
        ("gamma", 3),
        ("alpha beta", 7),
        ("alpha gamma", 2),
    ] {
        let q = RecallQuery::text(query).with_limit(limit);
        let got = recall(ctx, q.clone()).await;
        let want = rank_facts(&q, facts.iter().cloned());
        assert_eq!(got.len(), limit.min(want.len()));
        let got: Vec<_> = got.iter().map(|h| (&h.fact.text, h.relevance)).collect();
        let want: Vec<_> = want.iter().map(|h| (&h.fact.text, h.relevance)).collect();
        assert_eq!(got, want, "{query:?} limit {limit}");
    }
}

/// `min_score` excludes lower-scored and unscored facts.
pub async fn recall_min_score_excludes_low_and_unscored(ctx: &Ctx) {
    remember(ctx, scored("coffee black", 0.9)).await;
    remember(ctx, scored("coffee with milk", 0.6)).await;
    remember(ctx, NewFact::new("coffee unknown")).await;
    let hits = recall(ctx, RecallQuery::text("coffee").with_min_score(0.7)).await;
    assert_eq!(texts(&hits), ["coffee black"]);
}

/// A query without tokens recalls nothing; a query with neither text nor vector is invalid.
pub async fn recall_without_tokens_returns_nothing(ctx: &Ctx) {
    remember(ctx, NewFact::new("anything at all")).await;
    assert!(recall(ctx, RecallQuery::text("?! a b")).await.is_empty());
    FactStore::recall(ctx.backend(), ctx.scope(), RecallQuery::default())
        .await
        .must_be_invalid("no query");
}

/// Expired facts are never returned by get, list, recall or history.
pub async fn expired_facts_are_never_returned(ctx: &Ctx) {
    let expires_at = Some(ctx.clock_now().saturating_add(Duration::from_mins(1)));
    let fact = remember(
        ctx,
        NewFact::new("temporary token")
            .with_expires_at(expires_at)
            .with_key("k"),
    )
    .await
    .fact;
    remember(ctx, NewFact::new("permanent token")).await;
    assert_eq!(recall(ctx, RecallQuery::text("token")).await.len(), 2);
    ctx.clock().advance(Duration::from_secs(61));
    assert_eq!(
        texts(&recall(ctx, RecallQuery::text("token")).await),
        ["permanent token"]
    );
    ctx.backend()
        .get_fact(ctx.scope(), &fact.id)
        .await
        .must_be_not_found("get expired");
    let page = ctx
        .backend()
        .list_facts(ctx.scope(), FactQuery::default())
        .await
        .must("list");
    assert_eq!(page.items.len(), 1);
    assert!(ctx
        .backend()
        .history(ctx.scope(), "k")
        .await
        .must("history")
        .is_empty());
}

/// `max_facts` evicts lowest score first, then oldest; never the new fact.
pub async fn max_facts_evicts_lowest_score_then_oldest(ctx: &Ctx) {
    let options = |n| RememberOptions::default().with_max_facts(n);
    let b = ctx.backend();
    let mut ids = Vec::new();
    for (text, score) in [
        ("one", Some(0.5)),
        ("two", Some(0.2)),
        ("three", Some(0.2)),
        ("four", None),
        ("five", Some(0.9)),
    ] {
        ctx.clock().advance(Duration::from_millis(3));
        let f = NewFact::new(text).with_score(score);
        ids.push(
            b.remember(ctx.scope(), f, RememberOptions::default())
                .await
                .must("seed")
                .fact
                .id,
        );
    }
    ctx.clock().advance(Duration::from_millis(3));
    let outcome = b
        .remember(ctx.scope(), scored("six", 0.0), options(3))
        .await
        .must("evict");
    // order: four (no score), two (0.2, older), three (0.2, newer), one, five
    assert_eq!(
        outcome.evicted,
        vec![ids[3].clone(), ids[1].clone(), ids[2].clone()]
    );
    let left: Vec<FactId> = b
        .list_facts(ctx.scope(), FactQuery::default())
        .await
        .must("list")
        .items
        .into_iter()
        .map(|f| f.id)
        .collect();
    assert_eq!(left.len(), 3);
    assert!(
        left.contains(&outcome.fact.id),
        "the new fact is never evicted"
    );
    b.remember(ctx.scope(), NewFact::new("x"), options(0))
        .await
        .must_be_invalid("max_facts 0");
}

/// Reading a missing fact is `NotFound`.
pub async fn get_missing_fact_is_not_found(ctx: &Ctx) {
    ctx.backend()
        .get_fact(ctx.scope(), &FactId::new("missing").unwrap())
        .await
        .must_be_not_found("get");
}

/// Listing is newest first, pages with a cursor, hides history unless asked, and filters.
pub async fn list_facts_pages_and_filters(ctx: &Ctx) {
    for i in 0..7 {
        ctx.clock().advance(Duration::from_millis(1));
        let tags: &[&str] = if i % 2 == 0 { &["even"] } else { &[] };
        remember(
            ctx,
            NewFact::new(format!("fact {i}")).with_tags(tags.iter().copied()),
        )
        .await;
    }
    remember(ctx, NewFact::new("v1").with_key("k")).await;
    remember(ctx, NewFact::new("v2").with_key("k")).await;
    let b = ctx.backend();
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = b
            .list_facts(
                ctx.scope(),
                FactQuery::default()
                    .with_limit(3)
                    .with_cursor(cursor.take()),
            )
            .await
            .must("page");
        seen.extend(page.items.into_iter().map(|f| (f.created_at, f.id)));
        if page.next_cursor.is_none() {
            break;
        }
        cursor = page.next_cursor;
    }
    assert_eq!(seen.len(), 8, "7 + the current version of k");
    let mut sorted = seen.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(seen, sorted);
    let all = b
        .list_facts(
            ctx.scope(),
            FactQuery::default().with_include_superseded(true),
        )
        .await
        .must("all");
    assert_eq!(all.items.len(), 9);
    let even = b
        .list_facts(ctx.scope(), FactQuery::default().with_tags(["even"]))
        .await
        .must("even");
    assert_eq!(even.items.len(), 4);
    let bad = FactQuery::default().with_cursor(Some("garbage".into()));
    b.list_facts(ctx.scope(), bad)
        .await
        .must_be_invalid("bad cursor");
    // A cursor's id is an identifier: NUL in it is malformed, never a backend error.
    let nul = FactQuery::default().with_cursor(Some("1:\0".into()));
    b.list_facts(ctx.scope(), nul)
        .await
        .must_be_invalid("cursor holding NUL");
}

/// Forget removes a fact and reports whether it existed.
pub async fn forget_removes_a_fact(ctx: &Ctx) {
    let fact = remember(ctx, NewFact::new("to be forgotten")).await.fact;
    assert!(ctx
        .backend()
        .forget(ctx.scope(), &fact.id)
        .await
        .must("forget"));
    assert!(!ctx
        .backend()
        .forget(ctx.scope(), &fact.id)
        .await
        .must("forget again"));
    ctx.backend()
        .get_fact(ctx.scope(), &fact.id)
        .await
        .must_be_not_found("get forgotten");
    assert!(recall(ctx, RecallQuery::text("forgotten")).await.is_empty());
}

/// `forget` reports whether a fact that reads could see was removed: an expired fact
/// (`expires_at <= now`, the same instant included) is removed but reported `false`, like an
/// unknown id.
pub async fn forget_of_an_expired_fact_reports_false(ctx: &Ctx) {
    let now = ctx.clock_now();
    let expiring = |text: &str, at| NewFact::new(text).with_expires_at(at);
    let at_now = remember(ctx, expiring("expires right now", now)).await.fact;
    let soon = now.saturating_add(Duration::from_mins(1));
    let later = remember(ctx, expiring("expires in a minute", soon))
        .await
        .fact;
    let still = remember(
        ctx,
        expiring(
            "expires in two",
            soon.saturating_add(Duration::from_mins(1)),
        ),
    )
    .await
    .fact;
    let b = ctx.backend();
    assert!(!b
        .forget(ctx.scope(), &at_now.id)
        .await
        .must("forget at expiry"));
    ctx.clock().advance(Duration::from_mins(1));
    assert!(!b
        .forget(ctx.scope(), &later.id)
        .await
        .must("forget expired"));
    assert!(b.forget(ctx.scope(), &still.id).await.must("forget live"));
    for id in [&at_now.id, &later.id, &still.id] {
        b.get_fact(ctx.scope(), id)
            .await
            .must_be_not_found("forgotten");
        assert!(!b.forget(ctx.scope(), id).await.must("forget again"));
    }
}

/// Empty text, out-of-range scores, bad identifiers and bad embeddings are `InvalidInput`.
pub async fn remember_rejects_invalid_input(ctx: &Ctx) {
    let b = ctx.backend();
    let bad = [
        NewFact::new("   "),
        scored("x", 1.5),
        scored("x", -0.1),
        NewFact::new("x").with_key(String::new()),
        NewFact::new("x").with_tags(["nul\0tag"]),
        NewFact::new("x").with_embedding(vec![f32::NAN, 1.0]),
        NewFact::new("x").with_embedding(vec![0.0, 0.0]),
    ];
    for fact in bad {
        let what = format!("{fact:?}");
        b.remember(ctx.scope(), fact, RememberOptions::default())
            .await
            .must_be_invalid(&what);
    }
    assert!(b
        .list_facts(ctx.scope(), FactQuery::default())
        .await
        .must("list")
        .items
        .is_empty());
}

/// Semantic recall ranks facts by cosine similarity of their embeddings.
pub async fn semantic_recall_ranks_by_cosine(ctx: &Ctx) {
    let query = unit_vector(16, 1);
    let near: Vec<f32> = query.iter().map(|x| x + 0.01).collect();
    let far = unit_vector(16, 99);
    remember(ctx, NewFact::new("far away").with_embedding(far)).await;
    remember(ctx, NewFact::new("close by").with_embedding(near)).await;
    remember(ctx, NewFact::new("no embedding")).await;
    let hits = recall(ctx, RecallQuery::default().with_vector(query)).await;
    assert_eq!(texts(&hits), ["close by", "far away"]);
    assert!(hits[0].relevance > 0.99);
}

/// Hybrid recall fuses lexical and semantic ranks (RRF), matching the reference.
pub async fn hybrid_recall_fuses_ranks(ctx: &Ctx) {
    let query = unit_vector(8, 7);
    let mut facts = Vec::new();
    for (i, text) in [
        "rust memory store",
        "rust compiler",
        "gardening tips",
        "memory palace",
    ]
    .iter()
    .enumerate()
    {
        let embedding = if i == 2 {
            query.clone()
        } else {
            unit_vector(8, 100 + i as u64)
        };
        ctx.clock().advance(Duration::from_millis(1));
        facts.push(
            remember(ctx, NewFact::new(*text).with_embedding(embedding))
                .await
                .fact,
        );
    }
    let q = RecallQuery::text("rust memory").with_vector(query);
    let got = recall(ctx, q.clone()).await;
    let want = rank_facts(&q, facts);
    assert_eq!(texts(&got), texts(&want));
    assert_eq!(got.len(), 4, "lexical ∪ semantic");
    assert_eq!(got[0].fact.text, "rust memory store");
}

/// A semantic recall sees every write since the last recall, whatever its kind: a store that
/// holds a subject's facts between recalls must notice a remember, a supersede, a forget, a new
/// expiry, an expiry passing with no write at all, and the subject erased then written again.
pub async fn semantic_recall_sees_every_write_since_the_last(ctx: &Ctx) {
    let b = ctx.backend();
    let query = unit_vector(8, 3);
    let q = RecallQuery::default().with_vector(query.clone());
    let about = |text: &str, seed: u64| {
        NewFact::new(text).with_embedding(if seed == 0 {
            query.clone()
        } else {
            unit_vector(8, seed)
        })
    };
    assert!(recall(ctx, q.clone()).await.is_empty(), "nothing yet");
    let keyed = |text: &str| about(text, 0).with_key("lamp");
    remember(ctx, keyed("first lamp")).await;
    assert_eq!(texts(&recall(ctx, q.clone()).await), ["first lamp"]);
    let second = remember(ctx, keyed("second lamp")).await.fact;
    assert_eq!(texts(&recall(ctx, q.clone()).await), ["second lamp"]);
    let other = remember(ctx, about("other lamp", 5)).await.fact;
    assert_eq!(
        texts(&recall(ctx, q.clone()).await),
        ["second lamp", "other lamp"]
    );
    assert!(b.forget(ctx.scope(), &second.id).await.must("forget"));
    assert_eq!(texts(&recall(ctx, q.clone()).await), ["other lamp"]);
    let soon = ctx.clock_now().saturating_add(Duration::from_secs(1));
    b.set_expiry(ctx.scope(), std::slice::from_ref(&other.id), Some(soon))
        .await
        .must("set expiry");
    assert_eq!(texts(&recall(ctx, q.clone()).await), ["other lamp"]);
    ctx.clock().advance(Duration::from_secs(2));
    assert!(
        recall(ctx, q.clone()).await.is_empty(),
        "expired, unwritten"
    );
    remember(ctx, about("kept lamp", 0)).await;
    b.forget_all(ctx.scope()).await.must("forget all");
    assert!(recall(ctx, q.clone()).await.is_empty(), "erased");
    remember(ctx, about("new lamp", 0)).await;
    assert_eq!(texts(&recall(ctx, q).await), ["new lamp"]);
}

/// A recall by vector right after the recaller's own remembers sees exactly what they left:
/// the facts they evicted (`max_facts`), superseded or purged (expired) gone, a duplicate adding
/// nothing, each new fact there.
pub async fn semantic_recall_sees_its_own_evictions_supersedes_and_purges(ctx: &Ctx) {
    let query = unit_vector(8, 3);
    let q = RecallQuery::default().with_vector(query.clone());
    let near = |text: &str, score: f32| {
        NewFact::new(text)
            .with_embedding(query.clone())
            .with_score(score)
    };
    let capped = |fact: NewFact| async move {
        ctx.backend()
            .remember(
                ctx.scope(),
                fact,
                RememberOptions::default().with_max_facts(2),
            )
            .await
            .must("remember")
    };
    capped(near("high", 0.9)).await;
    capped(near("low", 0.1)).await;
    assert_eq!(texts(&recall(ctx, q.clone()).await), ["high", "low"]);
    let outcome = capped(near("middle", 0.5)).await;
    assert_eq!(outcome.evicted.len(), 1, "the lowest score goes");
    assert_eq!(texts(&recall(ctx, q.clone()).await), ["high", "middle"]);
    let duplicate = capped(near("middle", 0.5)).await;
    assert_eq!(duplicate.status, RememberStatus::Duplicate);
    assert_eq!(texts(&recall(ctx, q.clone()).await), ["high", "middle"]);
    let keyed = |text: &str| near(text, 0.95).with_key("colour");
    remember(ctx, keyed("red")).await;
    assert_eq!(
        texts(&recall(ctx, q.clone()).await),
        ["red", "high", "middle"]
    );
    remember(ctx, keyed("blue")).await;
    assert_eq!(
        texts(&recall(ctx, q.clone()).await),
        ["blue", "high", "middle"]
    );
    let soon = ctx.clock_now().saturating_add(Duration::from_secs(1));
    remember(ctx, near("brief", 0.99).with_expires_at(soon)).await;
    assert_eq!(
        texts(&recall(ctx, q.clone()).await),
        ["brief", "blue", "high", "middle"]
    );
    ctx.clock().advance(Duration::from_secs(2));
    remember(ctx, near("after", 0.2)).await;
    assert_eq!(
        texts(&recall(ctx, q.clone()).await),
        ["blue", "high", "middle", "after"]
    );
}

/// Many remembers of one subject at once (which a store may write in one transaction), right
/// after a recall by vector: the next recall by vector finds every one of them.
pub async fn semantic_recall_sees_concurrent_remembers(ctx: &Ctx) {
    let query = unit_vector(8, 4);
    let near = |text: String| NewFact::new(text).with_embedding(query.clone());
    remember(ctx, near("first".into())).await;
    let q = RecallQuery::default()
        .with_vector(query.clone())
        .with_limit(50);
    assert_eq!(recall(ctx, q.clone()).await.len(), 1);
    let writes = (0..16).map(|i| {
        let fact = near(format!("written at once {i}"));
        async move { remember(ctx, fact).await }
    });
    futures::future::join_all(writes).await;
    let mut found: Vec<String> = recall(ctx, q)
        .await
        .into_iter()
        .map(|hit| hit.fact.text)
        .collect();
    found.sort();
    let mut wanted: Vec<String> = (0..16).map(|i| format!("written at once {i}")).collect();
    wanted.push("first".into());
    wanted.sort();
    assert_eq!(found, wanted);
}

/// Expired facts neither make a new one a duplicate nor count toward `max_facts`.
pub async fn expired_facts_neither_dedupe_nor_count_toward_max_facts(ctx: &Ctx) {
    let expires_at = Some(ctx.clock_now().saturating_add(Duration::from_secs(10)));
    let b = ctx.backend();
    for text in ["short lived", "also short lived"] {
        b.remember(
            ctx.scope(),
            NewFact::new(text).with_expires_at(expires_at),
            RememberOptions::default(),
        )
        .await
        .must("seed");
    }
    ctx.clock().advance(Duration::from_secs(11));
    let again = b
        .remember(
            ctx.scope(),
            NewFact::new("short lived"),
            RememberOptions::default(),
        )
        .await
        .must("again");
    assert_eq!(
        again.status,
        RememberStatus::Created,
        "an expired fact is not a duplicate"
    );
    let capped = b
        .remember(
            ctx.scope(),
            NewFact::new("third"),
            RememberOptions::default().with_max_facts(2),
        )
        .await
        .must("capped");
    assert!(
        capped.evicted.is_empty(),
        "expired facts do not count: {:?}",
        capped.evicted
    );
    assert_eq!(
        b.list_facts(ctx.scope(), FactQuery::default())
            .await
            .must("list")
            .items
            .len(),
        2
    );
}

/// `set_expiry` hides a fact once its new expiry passes, everywhere a fact is read; `None`
/// makes an expiring fact permanent; the fact reads back with the new `expires_at` and
/// `updated_at`.
pub async fn set_expiry_expires_a_fact_and_none_makes_it_permanent(ctx: &Ctx) {
    let b = ctx.backend();
    let start = ctx.clock_now();
    let soon = Some(start.saturating_add(Duration::from_mins(1)));
    let doomed = remember(ctx, NewFact::new("doomed lantern")).await.fact;
    let saved = remember(
        ctx,
        NewFact::new("saved lantern")
            .with_expires_at(soon)
            .with_key("lantern"),
    )
    .await
    .fact;
    ctx.clock().advance(Duration::from_secs(1));
    let changed = b
        .set_expiry(ctx.scope(), std::slice::from_ref(&doomed.id), soon)
        .await
        .must("set expiry");
    assert_eq!(changed, std::slice::from_ref(&doomed.id));
    let read = b.get_fact(ctx.scope(), &doomed.id).await.must("get");
    assert_eq!(read.expires_at, soon);
    assert_eq!(read.updated_at, ctx.clock_now());
    assert_eq!(read.created_at, doomed.created_at);
    let changed = b
        .set_expiry(ctx.scope(), std::slice::from_ref(&saved.id), None)
        .await
        .must("make permanent");
    assert_eq!(changed, std::slice::from_ref(&saved.id));
    assert_eq!(
        b.get_fact(ctx.scope(), &saved.id)
            .await
            .must("get")
            .expires_at,
        None
    );
    ctx.clock().advance(Duration::from_mins(2));
    // A write purges what has expired: the fact made permanent is not among them.
    remember(ctx, NewFact::new("another note")).await;
    assert_eq!(
        texts(&recall(ctx, RecallQuery::text("lantern")).await),
        ["saved lantern"]
    );
    b.get_fact(ctx.scope(), &doomed.id)
        .await
        .must_be_not_found("expired by set_expiry");
    let listed = b
        .list_facts(ctx.scope(), FactQuery::default())
        .await
        .must("list");
    let listed: Vec<&str> = listed.items.iter().map(|f| f.text.as_str()).collect();
    assert_eq!(listed, ["another note", "saved lantern"]);
    assert_eq!(
        b.history(ctx.scope(), "lantern")
            .await
            .must("history")
            .len(),
        1
    );
    // An expired fact is never brought back.
    let changed = b
        .set_expiry(ctx.scope(), std::slice::from_ref(&doomed.id), None)
        .await
        .must("revive");
    assert!(changed.is_empty());
    b.get_fact(ctx.scope(), &doomed.id)
        .await
        .must_be_not_found("still expired");
}

/// The batch form changes every live fact named, current or superseded, at once, and answers
/// with them in the order given, each once; unknown ids, expired facts and another subject's
/// facts are left out and unchanged; more than `MAX_EXPIRY_BATCH` ids are `InvalidInput`.
pub async fn set_expiry_many_changes_only_live_facts_of_the_scope(ctx: &Ctx) {
    let b = ctx.backend();
    let now = ctx.clock_now();
    let city = |text: &str| NewFact::new(text).with_key("city");
    let old = remember(ctx, city("lives in Lyon")).await.fact;
    ctx.clock().advance(Duration::from_millis(1));
    let new = remember(ctx, city("lives in Oslo")).await.fact;
    let plain = remember(ctx, NewFact::new("likes tea")).await.fact;
    let expired = remember(
        ctx,
        NewFact::new("was here").with_expires_at(ctx.clock_now()),
    )
    .await
    .fact;
    let theirs = b
        .remember(
            ctx.other_scope(),
            NewFact::new("their fact"),
            RememberOptions::default(),
        )
        .await
        .must("remember other")
        .fact;
    let unknown = FactId::new("no-such-fact").unwrap();
    let at = Some(now.saturating_add(Duration::from_hours(1)));
    let asked = [
        plain.id.clone(),
        unknown,
        theirs.id.clone(),
        old.id.clone(),
        expired.id.clone(),
        new.id.clone(),
        plain.id.clone(),
    ];
    let changed = b.set_expiry(ctx.scope(), &asked, at).await.must("batch");
    assert_eq!(changed, [plain.id.clone(), old.id.clone(), new.id.clone()]);
    for id in [&plain.id, &old.id, &new.id] {
        assert_eq!(b.get_fact(ctx.scope(), id).await.must("get").expires_at, at);
    }
    let history = b.history(ctx.scope(), "city").await.must("history");
    assert_eq!(history.len(), 2, "a superseded version keeps its place");
    assert_eq!(
        b.get_fact(ctx.other_scope(), &theirs.id)
            .await
            .must("theirs")
            .expires_at,
        None
    );
    assert!(b
        .set_expiry(ctx.scope(), &[], None)
        .await
        .must("empty")
        .is_empty());
    let too_many: Vec<FactId> = (0..=mnemix_core::limits::MAX_EXPIRY_BATCH)
        .map(|i| FactId::new(format!("f-{i}")).unwrap())
        .collect();
    b.set_expiry(ctx.scope(), &too_many, None)
        .await
        .must_be_invalid("too many ids");
    ctx.clock().advance(Duration::from_hours(1));
    assert!(b
        .list_facts(ctx.scope(), FactQuery::default())
        .await
        .must("list")
        .items
        .is_empty());
    assert!(b
        .history(ctx.scope(), "city")
        .await
        .must("history")
        .is_empty());
    b.get_fact(ctx.other_scope(), &theirs.id)
        .await
        .must("theirs stays");
}

/// A TTL (`"30s"`, `"15m"`, `"1h"`, `"7d"`) on remember expires the fact that long after the
/// store's now; `expire_in` moves many facts' expiry by a TTL.
pub async fn remember_with_a_ttl_expires_after_it(ctx: &Ctx) {
    let store = mnemix_core::Store::from_arc(ctx.backend_arc());
    let facts = store.at(ctx.scope().clone());
    let facts = facts.facts();
    let ttl = |text: &str| text.parse::<mnemix_core::Ttl>().unwrap();
    let now = ctx.clock_now();
    let short = facts
        .remember("short lived note")
        .ttl(ttl("30s"))
        .await
        .must("30s");
    assert_eq!(
        short.fact.expires_at,
        Some(now.saturating_add(Duration::from_secs(30)))
    );
    let long = facts
        .remember("long lived note")
        .ttl(ttl("7d"))
        .await
        .must("7d");
    assert_eq!(
        long.fact.expires_at,
        Some(now.saturating_add(Duration::from_hours(7 * 24)))
    );
    let moved = facts
        .expire_in(std::slice::from_ref(&long.fact.id), ttl("15m"))
        .await
        .must("expire_in");
    assert_eq!(moved, std::slice::from_ref(&long.fact.id));
    ctx.clock().advance(Duration::from_secs(30));
    assert_eq!(
        texts(&recall(ctx, RecallQuery::text("note")).await),
        ["long lived note"]
    );
    ctx.clock().advance(Duration::from_mins(15));
    assert!(recall(ctx, RecallQuery::text("note")).await.is_empty());
}
