//! Scenarios of metadata filter semantics: every operator, as [`Filter::matches`] defines it.

use mnemix_core::{CollectionSpec, FieldPath, Filter, Metric, VectorQuery, VectorRecord};
use serde_json::json;

use crate::support::{unit_vector, ResultExt};
use crate::vectors::{record, DIMS};
use crate::Ctx;

/// Records with varied metadata shapes (missing fields, other types, nesting, null).
fn corpus() -> Vec<VectorRecord> {
    let metas = [
        json!({"lang": "en", "year": 2020, "score": 0.5, "draft": false, "meta": {"src": "web"}}),
        json!({"lang": "de", "year": 2021, "score": 1.0, "draft": true, "meta": {"src": "pdf"}}),
        json!({"lang": "en", "year": 2022, "score": 2, "meta": {"src": "web", "deep": {"x": 1}}}),
        json!({"lang": "fr", "year": "2023", "tag": null}),
        json!({"year": 2024, "lang": ["en", "de"]}),
        json!({"lang": "EN", "year": 2019.5, "name": "O'Brien; --"}),
        json!({}),
        json!({"lang": "en", "year": 1999, "draft": false, "name": "a\\b%_"}),
    ];
    metas
        .iter()
        .enumerate()
        .map(|(i, m)| record(&format!("d{i}"), unit_vector(DIMS, i as u64), m.clone()))
        .collect()
}

/// Searches the corpus with `filter` and compares with the reference evaluator; returns the ids.
async fn check(ctx: &Ctx, filter: Filter) -> Vec<String> {
    let spec = CollectionSpec::new("filters", DIMS, "test-model").with_metric(Metric::Cosine);
    ctx.backend()
        .ensure_collection(ctx.namespace(), spec.clone())
        .await
        .must("ensure");
    let records = corpus();
    ctx.backend()
        .upsert_vectors(ctx.scope(), &spec.name, records.clone())
        .await
        .must("upsert");
    let query = VectorQuery::new(unit_vector(DIMS, 999), 100).with_filter(filter.clone());
    let hits = ctx
        .backend()
        .search(ctx.scope(), &spec.name, query)
        .await
        .must("filtered search");
    let mut got: Vec<String> = hits.iter().map(|h| h.record.id.to_string()).collect();
    got.sort();
    let mut want: Vec<String> = records
        .iter()
        .filter(|r| filter.matches(&r.metadata))
        .map(|r| r.id.to_string())
        .collect();
    want.sort();
    assert_eq!(got, want, "filter {filter:?}");
    got
}

/// `eq` matches same-typed equal values only (numbers numerically, strings case-sensitively).
pub async fn filter_eq_matches_same_typed_values(ctx: &Ctx) {
    assert_eq!(
        check(ctx, Filter::eq("lang", "en")).await,
        ["d0", "d2", "d7"]
    );
    assert_eq!(
        check(ctx, Filter::eq("score", 1)).await,
        ["d1"],
        "1 equals 1.0"
    );
    assert_eq!(check(ctx, Filter::eq("draft", false)).await, ["d0", "d7"]);
    assert!(
        check(ctx, Filter::eq("year", "2020")).await.is_empty(),
        "string never equals number"
    );
}

/// `ne` is exactly not-`eq`: missing fields and other types match.
pub async fn filter_ne_matches_missing_and_other_types(ctx: &Ctx) {
    assert_eq!(
        check(ctx, Filter::ne("lang", "en")).await,
        ["d1", "d3", "d4", "d5", "d6"]
    );
}

/// `in` matches any listed value; an empty list matches nothing.
pub async fn filter_in_matches_any_listed_value(ctx: &Ctx) {
    assert_eq!(
        check(ctx, Filter::any_of("lang", ["de", "fr"])).await,
        ["d1", "d3"]
    );
    assert_eq!(
        check(ctx, Filter::any_of("year", [2020, 2024])).await,
        ["d0", "d4"]
    );
    assert!(check(ctx, Filter::any_of::<&str>("lang", []))
        .await
        .is_empty());
}

/// Ranges compare numbers numerically and ignore values of other types.
pub async fn filter_range_compares_numbers(ctx: &Ctx) {
    assert_eq!(
        check(ctx, Filter::range("year").gte(2020).lt(2022)).await,
        ["d0", "d1"]
    );
    assert_eq!(
        check(ctx, Filter::range("year").gt(2019)).await,
        ["d0", "d1", "d2", "d4", "d5"]
    );
    assert_eq!(
        check(ctx, Filter::range("score").lte(1.0)).await,
        ["d0", "d1"]
    );
}

/// String ranges order by code point; mixed-type bounds are `InvalidInput`.
pub async fn filter_range_compares_strings_by_code_point(ctx: &Ctx) {
    assert_eq!(
        check(ctx, Filter::range("lang").gte("de").lt("en")).await,
        ["d1"]
    );
    assert_eq!(
        check(ctx, Filter::range("lang").lt("a")).await,
        ["d5"],
        "'EN' < 'a' by code point"
    );
    let spec = CollectionSpec::new("filters", DIMS, "test-model");
    let bad =
        VectorQuery::new(unit_vector(DIMS, 1), 3).with_filter(Filter::range("year").gt(1).lt("z"));
    ctx.backend()
        .search(ctx.scope(), &spec.name, bad)
        .await
        .must_be_invalid("mixed bounds");
}

/// `exists` matches present fields, `null` included.
pub async fn filter_exists_counts_null_as_present(ctx: &Ctx) {
    assert_eq!(check(ctx, Filter::exists("tag")).await, ["d3"]);
    assert_eq!(
        check(ctx, Filter::exists("draft")).await,
        ["d0", "d1", "d7"]
    );
}

/// `and`, `or` and `not` compose; empty `and` matches all and empty `or` none.
pub async fn filter_boolean_operators_compose(ctx: &Ctx) {
    let en_recent = Filter::and([Filter::eq("lang", "en"), Filter::range("year").gte(2020)]);
    assert_eq!(check(ctx, en_recent.clone()).await, ["d0", "d2"]);
    assert_eq!(
        check(ctx, Filter::or([en_recent, Filter::eq("lang", "fr")])).await,
        ["d0", "d2", "d3"]
    );
    assert_eq!(
        check(ctx, Filter::not(Filter::exists("lang"))).await,
        ["d6"]
    );
    assert_eq!(check(ctx, Filter::and([])).await.len(), 8);
    assert!(check(ctx, Filter::or([])).await.is_empty());
}

/// Nested paths reach into objects; a path through a non-object matches nothing.
pub async fn filter_nested_paths(ctx: &Ctx) {
    assert_eq!(
        check(ctx, Filter::eq("meta.src", "web")).await,
        ["d0", "d2"]
    );
    assert_eq!(check(ctx, Filter::eq("meta.deep.x", 1)).await, ["d2"]);
    assert!(
        check(ctx, Filter::exists("lang.0")).await.is_empty(),
        "arrays are not objects"
    );
    let dotted = Filter::Eq {
        path: FieldPath::new(["meta.src"]),
        value: "web".into(),
    };
    assert!(
        check(ctx, dotted).await.is_empty(),
        "a key containing a dot is one segment"
    );
}

/// Arrays and objects never equal a scalar.
pub async fn filter_never_matches_arrays_or_objects_as_scalars(ctx: &Ctx) {
    assert!(!check(ctx, Filter::eq("lang", "en"))
        .await
        .contains(&"d4".to_owned()));
    assert!(check(ctx, Filter::eq("meta", "web")).await.is_empty());
}

/// Filter values are data: quotes, SQL and LIKE syntax match literally.
pub async fn filter_values_are_bound_not_spliced(ctx: &Ctx) {
    assert_eq!(check(ctx, Filter::eq("name", "O'Brien; --")).await, ["d5"]);
    assert_eq!(check(ctx, Filter::eq("name", "a\\b%_")).await, ["d7"]);
    assert!(check(ctx, Filter::eq("name", "%")).await.is_empty());
    let weird_key = Filter::eq(FieldPath::new(["'); DROP TABLE x; --"]), "y");
    assert!(check(ctx, weird_key).await.is_empty());
}

/// Malformed filters (no bounds, non-finite numbers, empty paths) are `InvalidInput`.
pub async fn malformed_filters_are_invalid(ctx: &Ctx) {
    let spec = CollectionSpec::new("filters", DIMS, "test-model");
    ctx.backend()
        .ensure_collection(ctx.namespace(), spec.clone())
        .await
        .must("ensure");
    for bad in [
        Filter::range("year"),
        Filter::eq("x", f64::NAN),
        Filter::eq(FieldPath::new(Vec::<String>::new()), 1),
        Filter::range("draft").gt(true),
    ] {
        let query = VectorQuery::new(unit_vector(DIMS, 1), 3).with_filter(bad.clone());
        ctx.backend()
            .search(ctx.scope(), &spec.name, query)
            .await
            .must_be_invalid(&format!("{bad:?}"));
    }
}
