//! Scenarios of [`VectorStore`](mnemix_core::VectorStore).

use std::collections::HashSet;

use mnemix_core::{
    CollectionSpec, Filter, Metric, VectorHit, VectorId, VectorQuery, VectorRecord, VectorSelector,
};
use serde_json::json;

use crate::support::{collection_names, unit_vector, ResultExt};
use crate::Ctx;

/// Dimension of the scenarios' small collections.
pub const DIMS: usize = 16;

pub(crate) fn vid(id: &str) -> VectorId {
    VectorId::new(id).expect("valid id")
}

pub(crate) async fn collection(ctx: &Ctx, metric: Metric) -> CollectionSpec {
    let spec = CollectionSpec::new(format!("col-{}", metric.as_str()), DIMS, "test-model")
        .with_metric(metric);
    ctx.backend()
        .ensure_collection(ctx.namespace(), spec)
        .await
        .must("ensure collection")
}

pub(crate) fn record(id: &str, vector: Vec<f32>, metadata: serde_json::Value) -> VectorRecord {
    let serde_json::Value::Object(metadata) = metadata else {
        panic!("metadata must be a JSON object")
    };
    VectorRecord::new(vid(id), vector)
        .with_metadata(metadata)
        .with_text(format!("text of {id}"))
}

/// Upserts `n` random records `r0..rn` into the main scope.
pub(crate) async fn seeded(ctx: &Ctx, spec: &CollectionSpec, n: u64) -> Vec<VectorRecord> {
    let records: Vec<_> = (0..n)
        .map(|i| record(&format!("r{i}"), unit_vector(spec.dims, i), json!({"i": i})))
        .collect();
    ctx.backend()
        .upsert_vectors(ctx.scope(), &spec.name, records.clone())
        .await
        .must("upsert");
    records
}

/// `record` as a search returns it: without its vector (searches do not ask for it).
pub(crate) fn as_hit(mut record: VectorRecord) -> VectorRecord {
    record.vector = Vec::new();
    record
}

fn hit_ids(hits: &[VectorHit]) -> Vec<&str> {
    hits.iter().map(|h| h.record.id.as_str()).collect()
}

/// `ensure_collection` is idempotent and lists the collection.
pub async fn ensure_collection_is_idempotent(ctx: &Ctx) {
    let first = collection(ctx, Metric::Cosine).await;
    let second = collection(ctx, Metric::Cosine).await;
    assert_eq!(first, second);
    let listed = ctx
        .backend()
        .list_collections(ctx.namespace())
        .await
        .must("list");
    assert_eq!(listed, vec![first]);
}

/// Another dims, metric or model for an existing collection is `InvalidInput`.
pub async fn ensure_collection_with_other_dims_metric_or_model_is_rejected(ctx: &Ctx) {
    let spec = collection(ctx, Metric::Cosine).await;
    let b = ctx.backend();
    let other_dims = {
        let mut value = spec.clone();
        value.dims = DIMS + 1;
        value
    };
    b.ensure_collection(ctx.namespace(), other_dims)
        .await
        .must_be_invalid("dims");
    let other_metric = spec.clone().with_metric(Metric::Dot);
    b.ensure_collection(ctx.namespace(), other_metric)
        .await
        .must_be_invalid("metric");
    let other_model = {
        let mut value = spec.clone();
        value.model = "another-model".into();
        value
    };
    b.ensure_collection(ctx.namespace(), other_model)
        .await
        .must_be_invalid("model");
    let zero = {
        let mut value = spec;
        value.name = "zero".into();
        value.dims = 0;
        value
    };
    b.ensure_collection(ctx.namespace(), zero)
        .await
        .must_be_invalid("zero dims");
}

/// Collections are listed by name and dropped with their records; a search after the drop is
/// `NotFound`, and a collection made again under the name (with another metric) is searched as
/// the new one, also by a handle that searched the old one.
pub async fn drop_collection_removes_it_and_its_records(ctx: &Ctx) {
    let spec = collection(ctx, Metric::Cosine).await;
    let other = collection(ctx, Metric::Dot).await;
    seeded(ctx, &spec, 3).await;
    let search = |name: String, query: Vec<f32>| async move {
        ctx.backend()
            .search(ctx.scope(), &name, VectorQuery::new(query, 5))
            .await
    };
    let before = search(spec.name.clone(), unit_vector(DIMS, 0))
        .await
        .must("search before the drop");
    assert_eq!(before.len(), 3);
    let names = collection_names(ctx).await;
    assert_eq!(
        names,
        [spec.name.clone(), other.name.clone()],
        "sorted by name"
    );
    assert!(ctx
        .backend()
        .drop_collection(ctx.namespace(), &spec.name)
        .await
        .must("drop"));
    assert!(!ctx
        .backend()
        .drop_collection(ctx.namespace(), &spec.name)
        .await
        .must("drop again"));
    ctx.backend()
        .get_vector(ctx.scope(), &spec.name, &vid("r0"))
        .await
        .must_be_not_found("record of dropped");
    search(spec.name.clone(), unit_vector(DIMS, 0))
        .await
        .must_be_not_found("search of dropped");
    let recreated = ctx
        .backend()
        .ensure_collection(
            ctx.namespace(),
            CollectionSpec::new(spec.name.clone(), DIMS, "test-model")
                .with_metric(Metric::Euclidean),
        )
        .await
        .must("made again");
    let hits = search(recreated.name.clone(), unit_vector(DIMS, 0))
        .await
        .must("search");
    assert!(hits.is_empty(), "a recreated collection starts empty");
    let fresh = record("fresh", unit_vector(DIMS, 7), json!({}));
    ctx.backend()
        .upsert_vectors(ctx.scope(), &recreated.name, vec![fresh.clone()])
        .await
        .must("upsert");
    let query = unit_vector(DIMS, 0);
    let hits = search(recreated.name.clone(), query.clone())
        .await
        .must("search");
    assert_eq!(hit_ids(&hits), ["fresh"]);
    assert_ranked_like_reference(Metric::Euclidean, &query, &[fresh], &hits);
}

/// Upserting into, reading from or searching a missing collection is `NotFound`.
pub async fn missing_collection_is_not_found(ctx: &Ctx) {
    let b = ctx.backend();
    b.upsert_vectors(
        ctx.scope(),
        "nope",
        vec![record("a", unit_vector(DIMS, 1), json!({}))],
    )
    .await
    .must_be_not_found("upsert");
    b.get_vector(ctx.scope(), "nope", &vid("a"))
        .await
        .must_be_not_found("get");
    b.search(
        ctx.scope(),
        "nope",
        VectorQuery::new(unit_vector(DIMS, 1), 3),
    )
    .await
    .must_be_not_found("search");
}

/// A record reads back exactly.
pub async fn upsert_then_get_round_trips(ctx: &Ctx) {
    let spec = collection(ctx, Metric::Cosine).await;
    let mut r = record(
        "a",
        unit_vector(DIMS, 3),
        json!({"lang": "en", "n": 1.5, "tags": ["x"], "deep": {"k": null}}),
    );
    r.conversation_id = Some(mnemix_core::ConversationId::new("conv-1").unwrap());
    let written = ctx
        .backend()
        .upsert_vectors(ctx.scope(), &spec.name, vec![r.clone()])
        .await
        .must("upsert");
    assert_eq!(written, 1);
    assert_eq!(
        ctx.backend()
            .get_vector(ctx.scope(), &spec.name, &vid("a"))
            .await
            .must("get"),
        r
    );
}

/// Upserting an existing id replaces the record.
pub async fn upsert_replaces_existing_id(ctx: &Ctx) {
    let spec = collection(ctx, Metric::Cosine).await;
    seeded(ctx, &spec, 2).await;
    let replacement = record("r1", unit_vector(DIMS, 50), json!({"v": 2}));
    ctx.backend()
        .upsert_vectors(ctx.scope(), &spec.name, vec![replacement.clone()])
        .await
        .must("replace");
    assert_eq!(
        ctx.backend()
            .get_vector(ctx.scope(), &spec.name, &vid("r1"))
            .await
            .must("get"),
        replacement
    );
    let hits = ctx
        .backend()
        .search(
            ctx.scope(),
            &spec.name,
            VectorQuery::new(unit_vector(DIMS, 50), 10),
        )
        .await
        .must("search");
    assert_eq!(hits.len(), 2, "replaced, not duplicated");
    assert_eq!(hits[0].record.id.as_str(), "r1");
}

/// A large batch (bulk-loaded by some backends) that repeats an id keeps its last record.
pub async fn upsert_large_batch_keeps_last_of_repeated_id(ctx: &Ctx) {
    let spec = collection(ctx, Metric::Cosine).await;
    let mut batch: Vec<_> = (0..300)
        .map(|i| record(&format!("r{i}"), unit_vector(DIMS, i), json!({"i": i})))
        .collect();
    let last = record("r7", unit_vector(DIMS, 7_000), json!({"i": "replaced"}));
    batch.push(last.clone());
    ctx.backend()
        .upsert_vectors(ctx.scope(), &spec.name, batch)
        .await
        .must("upsert");
    assert_eq!(
        ctx.backend()
            .get_vector(ctx.scope(), &spec.name, &vid("r7"))
            .await
            .must("get"),
        last
    );
    let hits = ctx
        .backend()
        .search(
            ctx.scope(),
            &spec.name,
            VectorQuery::new(unit_vector(DIMS, 7_000), 5),
        )
        .await
        .must("search");
    let ids: HashSet<&str> = hit_ids(&hits).into_iter().collect();
    assert_eq!(ids.len(), 5, "one record per id");
    assert_eq!(hits[0].record, as_hit(last));
    for id in ["r0", "r299"] {
        ctx.backend()
            .get_vector(ctx.scope(), &spec.name, &vid(id))
            .await
            .must("the rest of the batch");
    }
}

/// A wrong dimension anywhere in a batch rejects the whole batch.
pub async fn upsert_rejects_wrong_dimension_atomically(ctx: &Ctx) {
    let spec = collection(ctx, Metric::Cosine).await;
    let batch = vec![
        record("ok", unit_vector(DIMS, 1), json!({})),
        record("bad", unit_vector(DIMS - 1, 2), json!({})),
    ];
    ctx.backend()
        .upsert_vectors(ctx.scope(), &spec.name, batch)
        .await
        .must_be_invalid("short vector");
    ctx.backend()
        .get_vector(ctx.scope(), &spec.name, &vid("ok"))
        .await
        .must_be_not_found("nothing written");
}

/// NaN and infinite components are `InvalidInput`.
pub async fn upsert_rejects_nan_and_infinity(ctx: &Ctx) {
    let spec = collection(ctx, Metric::Dot).await;
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut v = unit_vector(DIMS, 1);
        v[3] = bad;
        ctx.backend()
            .upsert_vectors(ctx.scope(), &spec.name, vec![record("x", v, json!({}))])
            .await
            .must_be_invalid("non-finite");
    }
}

/// A zero vector is refused under cosine (stored or queried) and accepted under dot and L2.
pub async fn zero_vector_is_rejected_only_under_cosine(ctx: &Ctx) {
    let cosine = collection(ctx, Metric::Cosine).await;
    let zero = vec![0.0; DIMS];
    let b = ctx.backend();
    b.upsert_vectors(
        ctx.scope(),
        &cosine.name,
        vec![record("z", zero.clone(), json!({}))],
    )
    .await
    .must_be_invalid("store zero");
    b.search(ctx.scope(), &cosine.name, VectorQuery::new(zero.clone(), 1))
        .await
        .must_be_invalid("query zero");
    for metric in [Metric::Dot, Metric::Euclidean] {
        let spec = collection(ctx, metric).await;
        b.upsert_vectors(
            ctx.scope(),
            &spec.name,
            vec![record("z", zero.clone(), json!({}))],
        )
        .await
        .must("zero ok");
    }
}

/// A query of the wrong dimension, a non-finite one, or k outside 1..=1000 is `InvalidInput`.
pub async fn search_rejects_bad_queries(ctx: &Ctx) {
    let spec = collection(ctx, Metric::Cosine).await;
    let b = ctx.backend();
    b.search(
        ctx.scope(),
        &spec.name,
        VectorQuery::new(unit_vector(DIMS + 2, 1), 3),
    )
    .await
    .must_be_invalid("dims");
    let mut nan = unit_vector(DIMS, 1);
    nan[0] = f32::NAN;
    b.search(ctx.scope(), &spec.name, VectorQuery::new(nan, 3))
        .await
        .must_be_invalid("nan");
    b.search(
        ctx.scope(),
        &spec.name,
        VectorQuery::new(unit_vector(DIMS, 1), 0),
    )
    .await
    .must_be_invalid("k 0");
    b.search(
        ctx.scope(),
        &spec.name,
        VectorQuery::new(unit_vector(DIMS, 1), 1001),
    )
    .await
    .must_be_invalid("k 1001");
}

/// Exact top-k equals a brute-force ranking for `metric` (scores within 1e-4).
async fn exact_top_k_matches_reference(ctx: &Ctx, metric: Metric) {
    let spec = collection(ctx, metric).await;
    let records = seeded(ctx, &spec, 300).await;
    for q in 0..5 {
        let query = unit_vector(DIMS, 10_000 + q);
        let hits = ctx
            .backend()
            .search(ctx.scope(), &spec.name, VectorQuery::new(query.clone(), 10))
            .await
            .must("search");
        assert_eq!(hits.len(), 10);
        assert_ranked_like_reference(metric, &query, &records, &hits);
    }
}

/// `hits` are the first of `records` ranked by `metric`'s score against `query` (best first,
/// ties by id), scores within float noise of the reference's.
fn assert_ranked_like_reference(
    metric: Metric,
    query: &[f32],
    records: &[VectorRecord],
    hits: &[VectorHit],
) {
    let mut reference: Vec<(f32, &str)> = records
        .iter()
        .map(|r| (metric.score(query, &r.vector), r.id.as_str()))
        .collect();
    reference.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    for (hit, (score, id)) in hits.iter().zip(&reference) {
        let tolerance = 1e-4 * score.abs().max(1.0);
        assert!(
            (hit.score - score).abs() < tolerance,
            "{metric:?}: score of {} is {}, reference {score}",
            hit.record.id,
            hit.score
        );
        if hit.record.id.as_str() != *id {
            // Only a tie within float noise may swap places.
            let theirs = reference
                .iter()
                .find(|(_, rid)| *rid == hit.record.id.as_str())
                .expect("known id")
                .0;
            assert!(
                (theirs - score).abs() < tolerance / 10.0,
                "{metric:?}: got {}, expected {id}",
                hit.record.id
            );
        }
    }
}

/// An exact search over many rows finds the nearest whatever their magnitude. Under cosine, 40
/// faint rows (norm about 1e-24, whose squares underflow `f32` to zero) orthogonal to the query
/// score 0 and outrank 300 rows pointing away from it, and 6 bright rows (norm about 1.1e19, near the
/// limit) along it outrank everything; every metric answers as the reference ranks them. A
/// backend that ranks in its server with `f32` sums must not lose the faint rows.
pub async fn exact_search_finds_the_nearest_rows_of_any_magnitude(ctx: &Ctx) {
    let mut query = vec![0.0; DIMS];
    query[0] = 1.0;
    let scaled = |seed: u64, first: f32, scale: f32| -> Vec<f32> {
        let mut v = unit_vector(DIMS, seed);
        v[0] = first;
        v.iter().map(|x| x * scale).collect()
    };
    let mut records: Vec<VectorRecord> = (0..300)
        .map(|i| {
            let away = scaled(i, -0.5 - (i % 7) as f32 * 0.1, 1.0);
            record(&format!("away{i:03}"), away, json!({}))
        })
        .collect();
    records.extend((0..40).map(|i| {
        record(
            &format!("faint{i:02}"),
            scaled(500 + i, 0.0, 1e-24),
            json!({}),
        )
    }));
    records.extend((0..6).map(|i| {
        record(
            &format!("bright{i}"),
            scaled(600 + i, 3.0, 3.5e18),
            json!({}),
        )
    }));
    for metric in METRICS {
        let spec = ctx
            .backend()
            .ensure_collection(
                ctx.namespace(),
                CollectionSpec::new(format!("magnitudes-{}", metric.as_str()), DIMS, "m")
                    .with_metric(metric),
            )
            .await
            .must("ensure collection");
        ctx.backend()
            .upsert_vectors(ctx.scope(), &spec.name, records.clone())
            .await
            .must("upsert");
        for k in [10, 50] {
            let hits = ctx
                .backend()
                .search(ctx.scope(), &spec.name, VectorQuery::new(query.clone(), k))
                .await
                .must("search");
            assert_eq!(hits.len(), k, "{metric:?}");
            assert_ranked_like_reference(metric, &query, &records, &hits);
        }
    }
}

/// Exact cosine top-k equals the reference.
pub async fn exact_top_k_matches_reference_cosine(ctx: &Ctx) {
    exact_top_k_matches_reference(ctx, Metric::Cosine).await;
}

/// Exact dot-product top-k equals the reference.
pub async fn exact_top_k_matches_reference_dot(ctx: &Ctx) {
    exact_top_k_matches_reference(ctx, Metric::Dot).await;
}

/// Exact Euclidean top-k equals the reference.
pub async fn exact_top_k_matches_reference_euclidean(ctx: &Ctx) {
    exact_top_k_matches_reference(ctx, Metric::Euclidean).await;
}

/// An approximate index reaches recall@10 ≥ 0.95 against exact, scope and filter honoured.
pub async fn approximate_search_reaches_recall_at_10(ctx: &Ctx) {
    let spec = CollectionSpec::new("ann", 64, "test-model");
    ctx.backend()
        .ensure_collection(ctx.namespace(), spec.clone())
        .await
        .must("ensure");
    let records: Vec<_> = (0..2000u64)
        .map(|i| {
            record(
                &format!("r{i}"),
                unit_vector(64, i),
                json!({"even": i % 2 == 0}),
            )
        })
        .collect();
    for chunk in records.chunks(500) {
        ctx.backend()
            .upsert_vectors(ctx.scope(), &spec.name, chunk.to_vec())
            .await
            .must("upsert");
    }
    let (mut found, mut wanted) = (0usize, 0usize);
    for q in 0..20u64 {
        let query = unit_vector(64, 50_000 + q);
        let filter = Filter::eq("even", true);
        let hits = ctx
            .backend()
            .search(
                ctx.scope(),
                &spec.name,
                VectorQuery::new(query.clone(), 10).with_filter(filter),
            )
            .await
            .must("search");
        assert_eq!(hits.len(), 10, "min(k, matching) results");
        assert!(
            hits.iter()
                .all(|h| h.record.metadata["even"] == json!(true)),
            "filter honoured"
        );
        let mut exact: Vec<_> = records
            .iter()
            .filter(|r| r.metadata["even"] == json!(true))
            .map(|r| (Metric::Cosine.score(&query, &r.vector), r.id.as_str()))
            .collect();
        exact.sort_by(|a, b| b.0.total_cmp(&a.0));
        let truth: HashSet<&str> = exact.iter().take(10).map(|(_, id)| *id).collect();
        found += hits
            .iter()
            .filter(|h| truth.contains(h.record.id.as_str()))
            .count();
        wanted += 10;
    }
    let recall = found as f64 / wanted as f64;
    assert!(recall >= 0.95, "recall@10 {recall:.3} < 0.95");
}

/// A backend that declares no vector search refuses vector operations with `Unsupported`.
pub async fn vector_operations_are_unsupported_without_vector_search(ctx: &Ctx) {
    let spec = CollectionSpec::new("none", DIMS, "m");
    match ctx.backend().ensure_collection(ctx.namespace(), spec).await {
        Err(e) if e.is_unsupported() => {}
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

/// Search returns at most k hits, best first, and `min(k, n)` when fewer exist.
pub async fn search_returns_min_of_k_and_matching(ctx: &Ctx) {
    let spec = collection(ctx, Metric::Cosine).await;
    seeded(ctx, &spec, 4).await;
    let hits = ctx
        .backend()
        .search(
            ctx.scope(),
            &spec.name,
            VectorQuery::new(unit_vector(DIMS, 2), 10),
        )
        .await
        .must("search");
    assert_eq!(hits.len(), 4);
    assert_eq!(
        hits[0].record.id.as_str(),
        "r2",
        "the record itself is nearest"
    );
    assert!((hits[0].score - 1.0).abs() < 1e-5);
    assert!(
        hits.windows(2).all(|w| w[0].score >= w[1].score),
        "best first"
    );
    let empty = collection(ctx, Metric::Dot).await;
    assert!(ctx
        .backend()
        .search(
            ctx.scope(),
            &empty.name,
            VectorQuery::new(unit_vector(DIMS, 1), 3)
        )
        .await
        .must("empty")
        .is_empty());
}

/// A filtered search returns `min(k, matching)` even when many nearer records do not match,
/// some of them with metadata only Rust can read (a NUL character, which SQL JSON types reject).
pub async fn filtered_search_fills_k_past_nearer_non_matching(ctx: &Ctx) {
    let spec = collection(ctx, Metric::Cosine).await;
    let query = unit_vector(DIMS, 1);
    let near = |i: u64| -> Vec<f32> {
        let noise = unit_vector(DIMS, 1_000 + i);
        let v: Vec<f32> = query
            .iter()
            .zip(&noise)
            .map(|(q, n)| q + 0.05 * n)
            .collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / norm).collect()
    };
    let mut batch = Vec::new();
    for i in 0..20 {
        let tag = if i % 2 == 0 { "x\u{0}y" } else { "y" };
        batch.push(record(&format!("near{i}"), near(i), json!({"tag": tag})));
    }
    for i in 0..5 {
        batch.push(record(
            &format!("far{i}"),
            unit_vector(DIMS, 100 + i),
            json!({"tag": "x"}),
        ));
    }
    ctx.backend()
        .upsert_vectors(ctx.scope(), &spec.name, batch)
        .await
        .must("upsert");
    let hits = ctx
        .backend()
        .search(
            ctx.scope(),
            &spec.name,
            VectorQuery::new(query.clone(), 4).with_filter(Filter::eq("tag", "x")),
        )
        .await
        .must("search");
    assert_eq!(
        hits.len(),
        4,
        "k of the 5 matching records: {:?}",
        hit_ids(&hits)
    );
    assert!(hit_ids(&hits).iter().all(|id| id.starts_with("far")));
}

/// `min_score` drops hits below it.
pub async fn search_min_score_drops_weak_hits(ctx: &Ctx) {
    let spec = collection(ctx, Metric::Cosine).await;
    seeded(ctx, &spec, 50).await;
    let mut query = VectorQuery::new(unit_vector(DIMS, 7), 50);
    query.min_score = Some(0.3);
    let hits = ctx
        .backend()
        .search(ctx.scope(), &spec.name, query)
        .await
        .must("search");
    assert!(!hits.is_empty() && hits.len() < 50);
    assert!(hits.iter().all(|h| h.score >= 0.3));
}

/// Hits carry text and metadata, and vectors only when asked.
pub async fn search_includes_vectors_only_when_asked(ctx: &Ctx) {
    let spec = collection(ctx, Metric::Cosine).await;
    let records = seeded(ctx, &spec, 3).await;
    let plain = ctx
        .backend()
        .search(
            ctx.scope(),
            &spec.name,
            VectorQuery::new(unit_vector(DIMS, 0), 1),
        )
        .await
        .must("plain");
    assert!(plain[0].record.vector.is_empty());
    assert_eq!(plain[0].record.text, records[0].text);
    assert_eq!(plain[0].record.metadata, records[0].metadata);
    let mut query = VectorQuery::new(unit_vector(DIMS, 0), 1);
    query.include_vectors = true;
    let full = ctx
        .backend()
        .search(ctx.scope(), &spec.name, query)
        .await
        .must("full");
    assert_eq!(full[0].record, records[0]);
}

/// Delete by ids removes those (unknown ids ignored) and reports the count.
pub async fn delete_by_ids_reports_count(ctx: &Ctx) {
    let spec = collection(ctx, Metric::Cosine).await;
    seeded(ctx, &spec, 5).await;
    let deleted = ctx
        .backend()
        .delete_vectors(
            ctx.scope(),
            &spec.name,
            VectorSelector::Ids(vec![vid("r1"), vid("r3"), vid("unknown")]),
        )
        .await
        .must("delete");
    assert_eq!(deleted, 2);
    let hits = ctx
        .backend()
        .search(
            ctx.scope(),
            &spec.name,
            VectorQuery::new(unit_vector(DIMS, 1), 10),
        )
        .await
        .must("search");
    let mut ids = hit_ids(&hits);
    ids.sort_unstable();
    assert_eq!(ids, ["r0", "r2", "r4"]);
}

/// Delete by filter removes exactly the matching records.
pub async fn delete_by_filter_removes_matching(ctx: &Ctx) {
    let spec = collection(ctx, Metric::Cosine).await;
    seeded(ctx, &spec, 10).await;
    let deleted = ctx
        .backend()
        .delete_vectors(
            ctx.scope(),
            &spec.name,
            VectorSelector::Filter(Filter::range("i").gte(6)),
        )
        .await
        .must("delete");
    assert_eq!(deleted, 4);
    let hits = ctx
        .backend()
        .search(
            ctx.scope(),
            &spec.name,
            VectorQuery::new(unit_vector(DIMS, 1), 20),
        )
        .await
        .must("search");
    assert_eq!(hits.len(), 6);
    assert!(hits
        .iter()
        .all(|h| h.record.metadata["i"].as_u64().unwrap() < 6));
}

/// Searches between one handle's own writes rank the records as stored after each write: 40
/// records are searched (a backend may now hold their matrix), then a batch replaces some
/// (vector, metadata and text), adds others and repeats an id, then deletes by ids and by filter
/// follow, each followed by searches, filtered and not, checked against the reference ranking
/// of what must be stored, each hit being its record as stored. A backend that applies its own
/// writes to a held matrix (or the records it keeps) must apply them exactly.
pub async fn searches_after_own_writes_rank_what_is_stored(ctx: &Ctx) {
    let spec = collection(ctx, Metric::Cosine).await;
    let mut stored = seeded(ctx, &spec, 40).await;
    searches_rank(ctx, &spec.name, &stored).await;

    let mut batch: Vec<VectorRecord> = (0..40)
        .step_by(3)
        .map(|i| {
            record(
                &format!("r{i}"),
                unit_vector(DIMS, 500 + i),
                json!({"i": i, "odd": true}),
            )
        })
        .collect();
    batch.extend((40..46).map(|i| {
        record(
            &format!("r{i}"),
            unit_vector(DIMS, 500 + i),
            json!({"i": i}),
        )
    }));
    batch.push(record(
        "r44",
        unit_vector(DIMS, 999),
        json!({"i": 44, "odd": true}),
    ));
    for written in &mut batch {
        written.text = Some(format!("rewritten {}", written.id));
    }
    ctx.backend()
        .upsert_vectors(ctx.scope(), &spec.name, batch.clone())
        .await
        .must("upsert");
    for written in batch {
        match stored.iter_mut().find(|r| r.id == written.id) {
            Some(old) => *old = written,
            None => stored.push(written),
        }
    }
    searches_rank(ctx, &spec.name, &stored).await;

    let gone = [vid("r0"), vid("r7"), vid("r44"), vid("r45")];
    let deleted = ctx
        .backend()
        .delete_vectors(ctx.scope(), &spec.name, VectorSelector::Ids(gone.to_vec()))
        .await
        .must("delete by ids");
    assert_eq!(deleted, gone.len());
    stored.retain(|r| !gone.contains(&r.id));
    searches_rank(ctx, &spec.name, &stored).await;

    let low = Filter::range("i").lt(10);
    let deleted = ctx
        .backend()
        .delete_vectors(ctx.scope(), &spec.name, VectorSelector::Filter(low.clone()))
        .await
        .must("delete by filter");
    assert_eq!(
        deleted,
        stored.iter().filter(|r| low.matches(&r.metadata)).count()
    );
    stored.retain(|r| !low.matches(&r.metadata));
    searches_rank(ctx, &spec.name, &stored).await;
}

/// Searches of `collection`, filtered (`odd`) and not, rank `stored` as the reference does.
async fn searches_rank(ctx: &Ctx, collection: &str, stored: &[VectorRecord]) {
    for q in 0..3 {
        let query = unit_vector(DIMS, 20_000 + q);
        let hits = ctx
            .backend()
            .search(ctx.scope(), collection, VectorQuery::new(query.clone(), 50))
            .await
            .must("search");
        assert_eq!(hits.len(), stored.len().min(50));
        assert_ranked_like_reference(Metric::Cosine, &query, stored, &hits);
        assert_hits_are_stored(stored, &hits);
        let odd = Filter::eq("odd", true);
        let hits = ctx
            .backend()
            .search(
                ctx.scope(),
                collection,
                VectorQuery::new(query.clone(), 50).with_filter(odd.clone()),
            )
            .await
            .must("filtered search");
        let matching: Vec<VectorRecord> = stored
            .iter()
            .filter(|r| odd.matches(&r.metadata))
            .cloned()
            .collect();
        assert_eq!(
            hits.len(),
            matching.len(),
            "the filter reads the new metadata"
        );
        assert_ranked_like_reference(Metric::Cosine, &query, &matching, &hits);
        assert_hits_are_stored(stored, &hits);
    }
}

/// Each hit is its record as `stored` holds it (no vector: none was asked for).
fn assert_hits_are_stored(stored: &[VectorRecord], hits: &[VectorHit]) {
    for hit in hits {
        let record = stored
            .iter()
            .find(|r| r.id == hit.record.id)
            .expect("a stored id");
        assert_eq!(
            hit.record,
            as_hit(record.clone()),
            "a hit is its record as stored"
        );
    }
}

const METRICS: [Metric; 3] = [Metric::Cosine, Metric::Dot, Metric::Euclidean];

/// 60 records score exactly alike (inserted shuffled) among 200 farther ones, and k = 10: every
/// backend returns the ten smallest ids, under every metric — an index that picks among equal
/// rows is settled exactly, also when there are more of them than an index's search list holds
/// and more rows than a backend scans without its index.
#[allow(clippy::float_cmp)] // scores are exact by contract, not approximately equal
pub async fn ties_across_k_break_by_id_on_every_metric(ctx: &Ctx) {
    let same = unit_vector(DIMS, 7);
    for metric in METRICS {
        let spec = CollectionSpec::new(format!("ties-{}", metric.as_str()), DIMS, "test-model")
            .with_metric(metric);
        let spec = ctx
            .backend()
            .ensure_collection(ctx.namespace(), spec)
            .await
            .must("ensure collection");
        // 13 is coprime to 60: every id once, far from sorted.
        let shuffled =
            (0..60).map(|i| record(&format!("t{:02}", i * 13 % 60), same.clone(), json!({})));
        let farther =
            (0..200).map(|i| record(&format!("a{i:03}"), unit_vector(DIMS, 100 + i), json!({})));
        ctx.backend()
            .upsert_vectors(ctx.scope(), &spec.name, shuffled.chain(farther).collect())
            .await
            .must("upsert");
        let hits = ctx
            .backend()
            .search(ctx.scope(), &spec.name, VectorQuery::new(same.clone(), 10))
            .await
            .must("search");
        let expected: Vec<String> = (0..10).map(|i| format!("t{i:02}")).collect();
        assert_eq!(hit_ids(&hits), expected, "{metric:?}");
        let top = metric.score(&same, &same);
        assert!(hits.iter().all(|h| h.score == top), "{metric:?}: {hits:?}");
    }
}

/// Collections of 2,001, 3,072 (common embedding models) and 16,000 dimensions — the limit —
/// are accepted and searched exactly like narrow ones on every backend; 16,001 is refused.
#[allow(clippy::float_cmp)] // scores are exact by contract, not approximately equal
pub async fn wide_collections_up_to_the_dimension_limit_are_searched(ctx: &Ctx) {
    let b = ctx.backend();
    for dims in [2001, 3072, mnemix_core::limits::MAX_DIMS] {
        let spec = b
            .ensure_collection(
                ctx.namespace(),
                CollectionSpec::new(format!("wide-{dims}"), dims, "m"),
            )
            .await
            .must("ensure wide collection");
        let records: Vec<VectorRecord> = (0..6)
            .map(|i| record(&format!("w{i}"), unit_vector(dims, i), json!({"i": i})))
            .collect();
        b.upsert_vectors(ctx.scope(), &spec.name, records.clone())
            .await
            .must("upsert wide");
        let query = records[2].vector.clone();
        let hits = b
            .search(ctx.scope(), &spec.name, VectorQuery::new(query.clone(), 3))
            .await
            .must("search wide");
        let mut reference: Vec<(f32, &str)> = records
            .iter()
            .map(|r| (Metric::Cosine.score(&query, &r.vector), r.id.as_str()))
            .collect();
        reference.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
        let expected: Vec<&str> = reference.iter().take(3).map(|(_, id)| *id).collect();
        assert_eq!(hit_ids(&hits), expected, "{dims} dims");
        assert_eq!(hits[0].score, 1.0, "{dims} dims: a vector against itself");
    }
    b.ensure_collection(
        ctx.namespace(),
        CollectionSpec::new("too-wide", mnemix_core::limits::MAX_DIMS + 1, "m"),
    )
    .await
    .must_be_invalid("over the dimension limit");
}

/// Float edges: vectors up to the norm limit (√f32::MAX ≈ 1.8e19), tiny and subnormal
/// components are accepted and searchable, every score is finite and in its metric's range,
/// equal to the reference, and a record scores exactly 1.0 against itself under cosine and
/// Euclidean (so `min_score = 1.0` finds it). A vector past the norm limit is refused.
#[allow(clippy::float_cmp)] // scores are exact by contract, not approximately equal
pub async fn scores_stay_finite_and_in_range_at_float_edges(ctx: &Ctx) {
    let b = ctx.backend();
    let vectors: [(&str, [f32; 4]); 6] = [
        ("huge", [1.2e19, 1.2e19, 0.0, 0.0]),
        ("huge-negative", [-1.2e19, -1.2e19, 0.0, 0.0]),
        ("tiny", [1e-30, 0.0, 0.0, 0.0]),
        ("subnormal", [1e-40, 1e-40, 0.0, 0.0]),
        ("unit", [0.6, 0.8, 0.0, 0.0]),
        ("mixed", [1.2e19, 0.0, 1e-30, -3.0]),
    ];
    for metric in METRICS {
        let spec = b
            .ensure_collection(
                ctx.namespace(),
                CollectionSpec::new(format!("edges-{}", metric.as_str()), 4, "m")
                    .with_metric(metric),
            )
            .await
            .must("ensure collection");
        let past_limit = vec![3e38, 3e38, 0.0, 0.0];
        b.upsert_vectors(
            ctx.scope(),
            &spec.name,
            vec![record("past", past_limit.clone(), json!({}))],
        )
        .await
        .must_be_invalid("a norm past the limit");
        b.search(ctx.scope(), &spec.name, VectorQuery::new(past_limit, 1))
            .await
            .must_be_invalid("a query past the norm limit");
        let records: Vec<VectorRecord> = vectors
            .iter()
            .map(|(id, v)| record(id, v.to_vec(), json!({})))
            .collect();
        b.upsert_vectors(ctx.scope(), &spec.name, records.clone())
            .await
            .must("upsert edges");
        for query in &records {
            let hits = b
                .search(
                    ctx.scope(),
                    &spec.name,
                    VectorQuery::new(query.vector.clone(), 6),
                )
                .await
                .must("search edges");
            assert_eq!(hits.len(), 6, "{metric:?} {}: every record found", query.id);
            for hit in &hits {
                let stored = &records
                    .iter()
                    .find(|r| r.id == hit.record.id)
                    .expect("known")
                    .vector;
                let expected = metric.score(&query.vector, stored);
                assert_eq!(
                    hit.score, expected,
                    "{metric:?} {} vs {}",
                    query.id, hit.record.id
                );
                assert!(hit.score.is_finite(), "{metric:?}: finite score");
                match metric {
                    Metric::Cosine => assert!((-1.0..=1.0).contains(&hit.score)),
                    Metric::Euclidean => assert!(hit.score > 0.0 && hit.score <= 1.0),
                    Metric::Dot => {}
                }
            }
            if metric != Metric::Dot {
                let exact = VectorQuery::new(query.vector.clone(), 6).with_min_score(1.0);
                let found = b
                    .search(ctx.scope(), &spec.name, exact)
                    .await
                    .must("min_score 1");
                assert!(
                    found.iter().any(|h| h.record.id == query.id),
                    "{metric:?} {} scores 1.0 against itself",
                    query.id
                );
            }
        }
    }
}

/// `k` of exactly [`MAX_TOP_K`](mnemix_core::limits::MAX_TOP_K) (1,000) and a filter nested
/// exactly [`MAX_FILTER_DEPTH`](mnemix_core::limits::MAX_FILTER_DEPTH) (32) deep are served;
/// one more of either is `InvalidInput`.
pub async fn top_k_and_filter_depth_hold_at_their_limits(ctx: &Ctx) {
    use mnemix_core::limits::{MAX_FILTER_DEPTH, MAX_TOP_K};
    let spec = collection(ctx, Metric::Cosine).await;
    seeded(ctx, &spec, 3).await;
    let b = ctx.backend();
    let query = |k| VectorQuery::new(unit_vector(DIMS, 1), k);
    let hits = b
        .search(ctx.scope(), &spec.name, query(MAX_TOP_K))
        .await
        .must("k at the limit");
    assert_eq!(hits.len(), 3);
    b.search(ctx.scope(), &spec.name, query(MAX_TOP_K + 1))
        .await
        .must_be_invalid("k over the limit");
    // `not` nests one level each.
    let deepest = (0..MAX_FILTER_DEPTH).fold(Filter::eq("i", 1), |inner, _| Filter::not(inner));
    // An even number of negations keeps the meaning: the record with i = 1 (32 is even).
    let hits = b
        .search(
            ctx.scope(),
            &spec.name,
            query(3).with_filter(deepest.clone()),
        )
        .await
        .must("filter at the depth limit");
    assert_eq!(hit_ids(&hits), ["r1"]);
    b.search(
        ctx.scope(),
        &spec.name,
        query(3).with_filter(Filter::not(deepest)),
    )
    .await
    .must_be_invalid("filter over the depth limit");
}
