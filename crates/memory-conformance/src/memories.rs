//! Scenarios of structured memories ([`memory_engine::Memories`]): kinds and schemas,
//! `unique_on` supersede, ids, search filters and result fields, grants, export.

use std::time::Duration;

use memory_core::registry::{Grant, KindSpec, GRANT_RECORD, KIND_RECORD};
use memory_core::{ConversationId, FactSource, MessageId, RememberStatus, Scope};
use memory_engine::{Memories, MemoryQuery, MemorySource, NewMemory, SearchScope};
use serde_json::{json, Value};

use crate::support::ResultExt;
use crate::Ctx;

pub(crate) fn memories(ctx: &Ctx) -> Memories {
    Memories::new(ctx.backend_arc())
}

fn profile_schema() -> Value {
    json!({
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 0},
            "allergens": {"type": "array", "items": {"type": "string"}}
        }
    })
}

fn preference_schema() -> Value {
    json!({
        "type": "object",
        "required": ["category", "value"],
        "properties": {"category": {"type": "string"}, "value": {"type": "string"}}
    })
}

/// Registers `UserProfile` (no unique fields) and `Preference` (unique on `category`).
pub(crate) async fn register_kinds(ctx: &Ctx, memories: &Memories) {
    memories
        .register_kind(
            ctx.namespace(),
            KindSpec::new("UserProfile", profile_schema()),
        )
        .await
        .must("register UserProfile");
    memories
        .register_kind(
            ctx.namespace(),
            KindSpec::new("Preference", preference_schema()).unique_on(["category"]),
        )
        .await
        .must("register Preference");
}

pub(crate) fn preference(category: &str, value: &str) -> NewMemory {
    NewMemory::new("Preference", json!({"category": category, "value": value}))
}

pub(crate) fn search(text: &str) -> MemoryQuery {
    MemoryQuery {
        text: Some(text.into()),
        ..MemoryQuery::default()
    }
}

/// A memory's data must follow its kind's schema: an unregistered kind, data that breaks the
/// schema (the error names each failing path), a schema that does not compile, a reserved or
/// malformed kind and an id given to a `unique_on` kind are `InvalidInput`, and nothing is
/// stored.
pub async fn store_checks_data_against_its_kind_naming_the_path(ctx: &Ctx) {
    let memories = memories(ctx);
    memories
        .store(ctx.scope(), preference("food", "vegan"))
        .await
        .must_be_invalid("unregistered kind");
    register_kinds(ctx, &memories).await;
    let bad = NewMemory::new(
        "UserProfile",
        json!({"name": "Alice", "age": -3, "allergens": [7]}),
    );
    let error = memories
        .store(ctx.scope(), bad)
        .await
        .expect_err("data breaking the schema");
    assert!(error.is_invalid_input(), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("/age") && message.contains("/allergens/0"),
        "names every failing path: {message}"
    );
    for spec in [
        KindSpec::new("Broken", json!({"type": "no-such-type"})),
        KindSpec::new("_reserved", json!({})),
        KindSpec::new("Twice", json!({})).unique_on(["a", "a"]),
    ] {
        memories
            .register_kind(ctx.namespace(), spec)
            .await
            .must_be_invalid("bad kind");
    }
    let mut with_id = preference("food", "vegan");
    with_id.id = Some("mine".into());
    memories
        .store(ctx.scope(), with_id)
        .await
        .must_be_invalid("an id for a unique_on kind");
    let hits = memories
        .search(ctx.scope(), search("Alice vegan"))
        .await
        .must("search");
    assert!(hits.is_empty(), "nothing was stored: {hits:?}");
}

/// With `unique_on`, equal values in the unique fields supersede the current memory, which
/// stays as history; the same data again is a duplicate; other values make another memory.
pub async fn unique_on_supersedes_and_keeps_history(ctx: &Ctx) {
    let memories = memories(ctx);
    register_kinds(ctx, &memories).await;
    let first = memories
        .store(ctx.scope(), preference("food", "vegetarian"))
        .await
        .must("first");
    assert_eq!(first.status, RememberStatus::Created);
    ctx.clock().advance(Duration::from_millis(1));
    let second = memories
        .store(ctx.scope(), preference("food", "vegan"))
        .await
        .must("second");
    assert_eq!(
        second.status,
        RememberStatus::Superseded {
            previous: first.memory.version.clone()
        }
    );
    assert_eq!(
        second.memory.id, first.memory.id,
        "one memory, two versions"
    );
    let again = memories
        .store(ctx.scope(), preference("food", "vegan"))
        .await
        .must("again");
    assert_eq!(again.status, RememberStatus::Duplicate);
    memories
        .store(ctx.scope(), preference("theme", "dark"))
        .await
        .must("other category");
    let history = memories
        .history(ctx.scope(), "Preference", &first.memory.id)
        .await
        .must("history");
    let values: Vec<(&Value, bool)> = history
        .iter()
        .map(|m| (&m.data["value"], m.is_latest))
        .collect();
    assert_eq!(
        values,
        [(&json!("vegetarian"), false), (&json!("vegan"), true)]
    );
    let current = memories
        .get(ctx.scope(), "Preference", &first.memory.id)
        .await
        .must("get");
    assert_eq!(current.data, json!({"category": "food", "value": "vegan"}));
    let hits = memories
        .search(
            ctx.scope(),
            MemoryQuery {
                kind: Some("Preference".into()),
                ..search("food theme vegan dark vegetarian")
            },
        )
        .await
        .must("search");
    assert_eq!(hits.len(), 2, "only current versions: {hits:?}");
}

/// Eight writers storing memories with the same unique values at once leave exactly one
/// current memory and every version in its history.
pub async fn unique_on_is_atomic_under_concurrent_writers(ctx: &Ctx) {
    let memories = std::sync::Arc::new(memories(ctx));
    register_kinds(ctx, &memories).await;
    let writers: Vec<_> = (0..8)
        .map(|i| {
            let memories = std::sync::Arc::clone(&memories);
            let scope = ctx.scope().clone();
            tokio::spawn(async move {
                memories
                    .store(&scope, preference("drink", &format!("tea number {i}")))
                    .await
            })
        })
        .collect();
    let mut ids = Vec::new();
    for writer in writers {
        ids.push(writer.await.expect("writer").must("store").memory.id);
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "one memory id: {ids:?}");
    let history = memories
        .history(ctx.scope(), "Preference", &ids[0])
        .await
        .must("history");
    assert_eq!(history.len(), 8, "every version kept");
    assert_eq!(history.iter().filter(|m| m.is_latest).count(), 1);
    assert!(history.last().is_some_and(|m| m.is_latest), "current last");
    let hits = memories
        .search(ctx.scope(), search("drink tea"))
        .await
        .must("search");
    assert_eq!(hits.len(), 1, "one current: {hits:?}");
}

/// Without `unique_on`, a memory stored without an id is new (a fresh id each time); stored
/// with an id it updates that memory, keeping the old version as history.
pub async fn without_unique_on_an_id_updates(ctx: &Ctx) {
    let memories = memories(ctx);
    register_kinds(ctx, &memories).await;
    let alice = |age: u32| NewMemory::new("UserProfile", json!({"name": "Alice", "age": age}));
    let a = memories.store(ctx.scope(), alice(30)).await.must("a");
    let b = memories.store(ctx.scope(), alice(30)).await.must("b");
    assert_ne!(a.memory.id, b.memory.id, "no id: a new memory each time");
    ctx.clock().advance(Duration::from_millis(1));
    let update = NewMemory {
        id: Some(a.memory.id.clone()),
        ..alice(31)
    };
    let updated = memories.store(ctx.scope(), update).await.must("update");
    assert_eq!(updated.memory.id, a.memory.id);
    assert!(matches!(updated.status, RememberStatus::Superseded { .. }));
    let history = memories
        .history(ctx.scope(), "UserProfile", &a.memory.id)
        .await
        .must("history");
    let ages: Vec<&Value> = history.iter().map(|m| &m.data["age"]).collect();
    assert_eq!(ages, [&json!(30), &json!(31)]);
    let named = NewMemory {
        id: Some("alice-profile".into()),
        ..alice(40)
    };
    let named = memories.store(ctx.scope(), named).await.must("named");
    assert_eq!(named.memory.id, "alice-profile");
    assert!(memories
        .delete(ctx.scope(), "UserProfile", &a.memory.id)
        .await
        .must("delete"));
    memories
        .get(ctx.scope(), "UserProfile", &a.memory.id)
        .await
        .must_be_not_found("deleted with its history");
    assert!(memories
        .history(ctx.scope(), "UserProfile", &a.memory.id)
        .await
        .must("history")
        .is_empty());
}

/// Search filters by kind, tags, conversation and confidence, and returns each memory's
/// data with its relevance, confidence, `is_latest` and source.
pub async fn search_filters_and_reports_relevance_confidence_latest_and_source(ctx: &Ctx) {
    let memories = memories(ctx);
    register_kinds(ctx, &memories).await;
    let thread = ConversationId::new("trip").unwrap();
    let from_trip = FactSource {
        conversation_id: thread.clone(),
        message_ids: vec![MessageId::new("m-1").unwrap()],
    };
    let stored = [
        NewMemory {
            tags: vec!["health".into()],
            confidence: Some(0.95),
            source: Some(from_trip.clone()),
            ..NewMemory::new(
                "UserProfile",
                json!({"name": "Alice", "allergens": ["peanuts"]}),
            )
        },
        NewMemory {
            confidence: Some(0.6),
            ..preference("food peanuts", "none")
        },
        NewMemory {
            tags: vec!["health".into()],
            ..NewMemory::new("UserProfile", json!({"name": "Bob peanuts"}))
        },
    ];
    for memory in stored {
        memories.store(ctx.scope(), memory).await.must("store");
    }
    let find = |query: MemoryQuery| memories.search(ctx.scope(), query);
    let names = |hits: &[memory_engine::MemoryHit]| -> Vec<Value> {
        let mut names: Vec<Value> = hits
            .iter()
            .map(|h| h.memory.data.get("name").cloned().unwrap_or(Value::Null))
            .collect();
        names.sort_by_key(ToString::to_string);
        names
    };
    let all = find(search("peanuts")).await.must("all");
    assert_eq!(all.len(), 3);
    let by_kind = find(MemoryQuery {
        kind: Some("UserProfile".into()),
        ..search("peanuts")
    })
    .await
    .must("by kind");
    assert_eq!(names(&by_kind), [json!("Alice"), json!("Bob peanuts")]);
    let by_conversation = find(MemoryQuery {
        conversation: Some(thread),
        ..search("peanuts")
    })
    .await
    .must("by conversation");
    assert_eq!(names(&by_conversation), [json!("Alice")]);
    let by_tag_and_confidence = find(MemoryQuery {
        tags: vec!["health".into()],
        min_confidence: Some(0.9),
        ..search("peanuts")
    })
    .await
    .must("by tag");
    assert_eq!(names(&by_tag_and_confidence), [json!("Alice")]);
    let hit = &by_tag_and_confidence[0];
    assert!(
        hit.relevance > 0.0 && hit.relevance <= 1.0,
        "{}",
        hit.relevance
    );
    assert_eq!(hit.memory.confidence, Some(0.95));
    assert!(hit.memory.is_latest);
    assert_eq!(hit.source, MemorySource::Own);
    assert_eq!(hit.memory.kind.as_deref(), Some("UserProfile"));
    assert_eq!(hit.memory.data["allergens"], json!(["peanuts"]));
}

/// Kinds, memories and grants travel in an export like every fact: the namespace's registry
/// is its shared scope's export; restored, they answer as before.
pub async fn export_and_restore_carry_kinds_memories_and_grants(ctx: &Ctx) {
    let memories = memories(ctx);
    register_kinds(ctx, &memories).await;
    let (owner, reader) = (ctx.scope(), ctx.other_scope());
    memories
        .store(owner, preference("food", "vegan"))
        .await
        .must("store");
    memories
        .grant(
            ctx.namespace(),
            Grant::new(
                owner.subject().unwrap().clone(),
                reader.subject().unwrap().clone(),
            ),
        )
        .await
        .must("grant");
    let b = ctx.backend();
    let registry = Scope::shared(ctx.namespace().as_str()).unwrap();
    let registry_records = b.export_scope(&registry).await.must("export registry");
    let kinds: Vec<Option<&str>> = registry_records
        .iter()
        .filter_map(|r| match r {
            memory_core::Record::Fact { fact } => Some(fact.kind.as_deref()),
            _ => None,
        })
        .collect();
    assert_eq!(kinds.iter().filter(|k| **k == Some(KIND_RECORD)).count(), 2);
    assert_eq!(
        kinds.iter().filter(|k| **k == Some(GRANT_RECORD)).count(),
        1
    );
    let owner_records = b.export_scope(owner).await.must("export owner");
    b.forget_all(owner).await.must("forget owner");
    for record in &registry_records {
        if let memory_core::Record::Fact { fact } = record {
            b.forget(&registry, &fact.id).await.must("forget registry");
        }
    }
    memories
        .store(owner, preference("food", "vegan"))
        .await
        .must_be_invalid("the kind is gone");
    b.restore(registry_records).await.must("restore registry");
    b.restore(owner_records).await.must("restore owner");
    let hits = memories
        .search(
            reader,
            MemoryQuery {
                scope: SearchScope::Shared,
                ..search("vegan")
            },
        )
        .await
        .must("search restored");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].memory.data["value"], "vegan");
}

/// A request's default TTL applies to the memories given no expiry of their own; each expires
/// on its own time, and a memory's own TTL wins.
pub async fn store_many_applies_the_request_ttl_to_memories_without_one(ctx: &Ctx) {
    let memories = memories(ctx);
    register_kinds(ctx, &memories).await;
    let ttl = |text: &str| text.parse::<memory_core::Ttl>().expect("a TTL");
    let batch = vec![
        preference("food", "vegan"),
        NewMemory {
            ttl: Some(ttl("7d")),
            ..preference("theme", "dark")
        },
    ];
    let now = ctx.clock_now();
    let stored = memories
        .store_many(ctx.scope(), batch, Some(ttl("1h")))
        .await
        .must("store_many");
    let expiries: Vec<_> = stored.iter().map(|o| o.memory.expires_at).collect();
    assert_eq!(
        expiries,
        [
            Some(now.saturating_add(Duration::from_hours(1))),
            Some(now.saturating_add(Duration::from_hours(7 * 24)))
        ]
    );
    ctx.clock().advance(Duration::from_hours(1));
    let left = memories
        .search(ctx.scope(), search("food theme"))
        .await
        .must("search");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].memory.data["category"], "theme");
}
