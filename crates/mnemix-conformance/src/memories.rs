//! Scenarios of structured memories ([`mnemix_engine::Memories`]): kinds and schemas,
//! `unique_on` supersede, ids, search filters and result fields, grants, export.

use std::time::Duration;

use mnemix_core::registry::{Grant, KindSpec, GRANT_RECORD, KIND_RECORD};
use mnemix_core::{ConversationId, FactSource, MessageId, RememberStatus, Scope};
use mnemix_engine::{Memories, MemoryQuery, MemorySource, NewMemory, SearchScope};
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
    MemoryQuery::default().with_text(text)
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
            search("food theme vegan dark vegetarian").with_kind("Preference"),
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
    let names = |hits: &[mnemix_engine::MemoryHit]| -> Vec<Value> {
        let mut names: Vec<Value> = hits
            .iter()
            .map(|h| h.memory.data.get("name").cloned().unwrap_or(Value::Null))
            .collect();
        names.sort_by_key(ToString::to_string);
        names
    };
    let all = find(search("peanuts")).await.must("all");
    assert_eq!(all.len(), 3);
    let by_kind = find(search("peanuts").with_kind("UserProfile"))
        .await
        .must("by kind");
    assert_eq!(names(&by_kind), [json!("Alice"), json!("Bob peanuts")]);
    let by_conversation = find(search("peanuts").with_conversation(thread))
        .await
        .must("by conversation");
    assert_eq!(names(&by_conversation), [json!("Alice")]);
    let by_tag_and_confidence = find(
        search("peanuts")
            .with_tags(["health"])
            .with_min_confidence(0.9),
    )
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
            mnemix_core::transfer::Record::Fact { fact } => Some(fact.kind.as_deref()),
            _ => None,
        })
        .collect();
    assert_eq!(kinds.iter().filter(|k| **k == Some(KIND_RECORD)).count(), 2);
    assert_eq!(
        kinds.iter().filter(|k| **k == Some(GRANT_RECORD)).count(),
        1
    );
    let owner_records = b.export_scope(owner).await.must("export owner");
    // Erasing the owner takes its grant; the registry's own operation deletes the kinds.
    b.forget_all(owner).await.must("forget owner");
    for kind in ["UserProfile", "Preference"] {
        assert!(memories
            .delete_kind(ctx.namespace(), kind)
            .await
            .must("delete kind"));
    }
    assert!(b
        .export_scope(&registry)
        .await
        .must("export registry")
        .is_empty());
    memories
        .store(owner, preference("food", "vegan"))
        .await
        .must_be_invalid("the kind is gone");
    b.restore(registry_records).await.must("restore registry");
    b.restore(owner_records).await.must("restore owner");
    let hits = memories
        .search(reader, search("vegan").with_scope(SearchScope::Shared))
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
    let ttl = |text: &str| text.parse::<mnemix_core::Ttl>().expect("a TTL");
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

/// The owner's and reader's subjects of a context.
fn pair(ctx: &Ctx) -> (mnemix_core::Subject, mnemix_core::Subject) {
    (
        ctx.scope().subject().unwrap().clone(),
        ctx.other_scope().subject().unwrap().clone(),
    )
}

/// Only the registry writes registry records: a grant or a kind forged through the facts API
/// (the registry's own kind, key and tags in the shared scope), or any fact with a kind, key or
/// tag starting with `_`, is `InvalidInput`; so is a restore of a registry record that is not
/// well formed or sits in a subject's scope. Nothing forged is then honoured: the "grantee"
/// reads nothing of the "owner".
pub async fn registry_records_are_written_by_the_registry_alone(ctx: &Ctx) {
    let memories = memories(ctx);
    register_kinds(ctx, &memories).await;
    let (owner, reader) = pair(ctx);
    memories
        .store(ctx.scope(), preference("pin", "9931"))
        .await
        .must("store");
    // What the registry writes for a grant, by hand.
    let grant = Grant::new(owner.clone(), reader.clone());
    let mut real = memories.grants(ctx.namespace()).await.must("no grants yet");
    assert!(real.is_empty());
    memories
        .grant(ctx.namespace(), grant.clone())
        .await
        .must("a real grant");
    let shared = ctx.shared_scope();
    let records = ctx.backend().export_scope(&shared).await.must("export");
    let forged_shape = records
        .iter()
        .find_map(|r| match r {
            mnemix_core::transfer::Record::Fact { fact }
                if fact.kind.as_deref() == Some(GRANT_RECORD) =>
            {
                Some(fact.clone())
            }
            _ => None,
        })
        .expect("the grant's record");
    real = memories.grants(ctx.namespace()).await.must("grants");
    assert_eq!(real, std::slice::from_ref(&grant));
    memories
        .revoke(ctx.namespace(), &owner, &reader)
        .await
        .must("revoke");
    let b = ctx.backend();
    let mut forge = mnemix_core::NewFact::new(forged_shape.text.clone())
        .with_tags(forged_shape.tags.iter().map(String::as_str));
    forge.kind.clone_from(&forged_shape.kind);
    forge.key.clone_from(&forged_shape.key);
    b.remember(&shared, forge, mnemix_core::RememberOptions::default())
        .await
        .must_be_invalid("a grant forged through remember");
    let kind_forge = mnemix_core::NewFact::new(r#"{"name":"Preference","schema":true}"#)
        .with_kind(KIND_RECORD)
        .with_key("_kind:Preference");
    b.remember(&shared, kind_forge, mnemix_core::RememberOptions::default())
        .await
        .must_be_invalid("a kind forged through remember");
    for (kind, key, tag) in [
        (Some("_mine"), None, None),
        (None, Some("_key"), None),
        (None, None, Some("_to:someone")),
    ] {
        let mut fact = mnemix_core::NewFact::new("reserved").with_tags(tag);
        fact.kind = kind.map(Into::into);
        fact.key = key.map(Into::into);
        b.remember(ctx.scope(), fact, mnemix_core::RememberOptions::default())
            .await
            .must_be_invalid("a reserved shape in a subject's facts");
    }
    // A restore of the grant's record in a subject's scope, or with tags not its grant's.
    let mut misplaced = forged_shape.clone();
    misplaced.scope = ctx.other_scope().clone();
    b.restore(vec![mnemix_core::transfer::Record::Fact {
        fact: misplaced,
    }])
    .await
    .must_be_invalid("a registry record in a subject's scope");
    let mut retagged = forged_shape.clone();
    retagged.tags.pop();
    b.restore(vec![mnemix_core::transfer::Record::Fact { fact: retagged }])
        .await
        .must_be_invalid("a grant record whose tags are not its grant's");
    assert!(memories
        .grants(ctx.namespace())
        .await
        .must("grants")
        .is_empty());
    let hits = memories
        .search(ctx.other_scope(), shared_pin())
        .await
        .must("shared search");
    assert!(hits.is_empty(), "nothing forged is honoured: {hits:?}");
    // The registry's own record, restored as exported, is accepted.
    b.restore(vec![mnemix_core::transfer::Record::Fact {
        fact: forged_shape,
    }])
    .await
    .must("a well-formed grant record restores");
    assert_eq!(
        memories.grants(ctx.namespace()).await.must("grants"),
        [grant]
    );
}

/// The current registry records of `ctx`'s namespace, as an export of the shared scope shows
/// them.
async fn current_registry_records(ctx: &Ctx, kind: &str) -> Vec<mnemix_core::Fact> {
    let records = ctx
        .backend()
        .export_scope(&ctx.shared_scope())
        .await
        .must("export the shared scope");
    records
        .into_iter()
        .filter_map(|r| match r {
            mnemix_core::transfer::Record::Fact { fact } if fact.kind.as_deref() == Some(kind) => {
                Some(fact)
            }
            _ => None,
        })
        .filter(mnemix_core::Fact::is_current)
        .collect()
}

/// Kinds registered, a preference (`pin`) in `ctx`'s scope, and its owner's grant of every
/// memory to the other subject; the owner and the grantee.
async fn pin_granted(
    ctx: &Ctx,
    memories: &Memories,
) -> (mnemix_core::Subject, mnemix_core::Subject) {
    register_kinds(ctx, memories).await;
    let (owner, reader) = pair(ctx);
    memories
        .store(ctx.scope(), preference("pin", "9931"))
        .await
        .must("store");
    memories
        .grant(ctx.namespace(), Grant::new(owner.clone(), reader.clone()))
        .await
        .must("grant");
    (owner, reader)
}

/// A search for `pin` among the memories shared with the searcher.
fn shared_pin() -> MemoryQuery {
    search("pin").with_scope(SearchScope::Shared)
}

/// `forget` and `set_expiry` refuse a registry record (a grant, a kind) through the facts API:
/// a grant stays in force and a kind registered until the registry's own operations change
/// them, which still can.
pub async fn registry_records_are_changed_by_the_registry_alone(ctx: &Ctx) {
    let memories = memories(ctx);
    let (owner, reader) = pin_granted(ctx, &memories).await;
    let shared = ctx.shared_scope();
    let b = ctx.backend();
    let grant = current_registry_records(ctx, GRANT_RECORD).await;
    let kinds = current_registry_records(ctx, KIND_RECORD).await;
    assert_eq!((grant.len(), kinds.len()), (1, 2), "{grant:?} {kinds:?}");
    for record in grant.iter().chain(&kinds) {
        b.forget(&shared, &record.id)
            .await
            .must_be_invalid("forget of a registry record");
        b.set_expiry(
            &shared,
            std::slice::from_ref(&record.id),
            Some(ctx.clock_now()),
        )
        .await
        .must_be_invalid("set_expiry of a registry record");
        b.set_expiry(&shared, std::slice::from_ref(&record.id), None)
            .await
            .must_be_invalid("set_expiry (permanent) of a registry record");
    }
    let shared_search = shared_pin();
    let hits = memories
        .search(ctx.other_scope(), shared_search.clone())
        .await
        .must("shared search");
    assert_eq!(hits.len(), 1, "the grant is still in force: {hits:?}");
    assert_eq!(
        memories.kinds(ctx.namespace()).await.must("kinds").len(),
        2,
        "both kinds are still registered"
    );
    // The registry's own operations still change them.
    assert!(memories
        .revoke(ctx.namespace(), &owner, &reader)
        .await
        .must("revoke"));
    assert!(memories
        .search(ctx.other_scope(), shared_search)
        .await
        .must("shared search")
        .is_empty());
    assert!(memories
        .delete_kind(ctx.namespace(), "UserProfile")
        .await
        .must("delete a kind"));
    assert_eq!(memories.kinds(ctx.namespace()).await.must("kinds").len(), 1);
}

/// A restore never leaves a registry key with two current versions: an exported grant or kind
/// restored under a new id beside the stored one becomes history when it is older (the owner's
/// narrowing stays in force; a kind lists once, with its stored schema) and supersedes the
/// stored one when it is newer.
pub async fn restore_keeps_one_current_version_of_each_registry_key(ctx: &Ctx) {
    let memories = memories(ctx);
    let (owner, reader) = pin_granted(ctx, &memories).await;
    let broad = current_registry_records(ctx, GRANT_RECORD).await.remove(0);
    ctx.clock().advance(Duration::from_millis(5));
    let narrow = Grant {
        kinds: vec!["UserProfile".into()],
        ..Grant::new(owner.clone(), reader.clone())
    };
    memories
        .grant(ctx.namespace(), narrow.clone())
        .await
        .must("the owner narrows it");
    let shared_search = shared_pin();
    let reader_sees = || async {
        memories
            .search(ctx.other_scope(), shared_search.clone())
            .await
            .must("shared search")
            .len()
    };
    assert_eq!(
        reader_sees().await,
        0,
        "the narrowed grant leaves preferences out"
    );

    // The broad grant again, current, under a new id: older than the narrowing, it is history.
    let b = ctx.backend();
    let again = mnemix_core::Fact {
        id: mnemix_core::FactId::generate(),
        ..broad.clone()
    };
    b.restore(vec![mnemix_core::transfer::Record::Fact { fact: again }])
        .await
        .must("restore an older grant record");
    assert_eq!(
        memories.grants(ctx.namespace()).await.must("grants"),
        std::slice::from_ref(&narrow)
    );
    assert_eq!(reader_sees().await, 0, "the narrowing stays in force");
    let key = broad.key.clone().expect("a grant record has a key");
    let current = |history: &[mnemix_core::Fact]| history.iter().filter(|f| f.is_current()).count();
    assert_eq!(
        current(&b.history(&ctx.shared_scope(), &key).await.must("history")),
        1
    );

    // A kind with a schema that accepts anything, older than the registered one: history.
    let strict = current_registry_records(ctx, KIND_RECORD)
        .await
        .into_iter()
        .find(|f| f.key.as_deref() == Some("_kind:Preference"))
        .expect("the Preference kind's record");
    let lax = mnemix_core::Fact {
        id: mnemix_core::FactId::generate(),
        text: r#"{"name":"Preference","schema":true}"#.into(),
        created_at: mnemix_core::Timestamp::from_millis(strict.created_at.as_millis() - 1),
        updated_at: mnemix_core::Timestamp::from_millis(strict.created_at.as_millis() - 1),
        ..strict.clone()
    };
    b.restore(vec![mnemix_core::transfer::Record::Fact {
        fact: lax.clone(),
    }])
    .await
    .must("restore an older kind record");
    let kinds = memories.kinds(ctx.namespace()).await.must("kinds");
    let preference_kinds: Vec<_> = kinds.iter().filter(|k| k.name == "Preference").collect();
    assert_eq!(preference_kinds.len(), 1, "listed once: {kinds:?}");
    assert_eq!(preference_kinds[0].schema, preference_schema());
    let history = b
        .history(&ctx.shared_scope(), "_kind:Preference")
        .await
        .must("history");
    assert_eq!(current(&history), 1, "{history:?}");

    // Newer than the registered one: it supersedes it. Restoring it twice changes nothing more.
    let newer = mnemix_core::Fact {
        id: mnemix_core::FactId::generate(),
        created_at: ctx.clock_now(),
        updated_at: ctx.clock_now(),
        ..lax
    };
    for _ in 0..2 {
        b.restore(vec![mnemix_core::transfer::Record::Fact {
            fact: newer.clone(),
        }])
        .await
        .must("restore a newer kind record");
        let history = b
            .history(&ctx.shared_scope(), "_kind:Preference")
            .await
            .must("history");
        assert_eq!(current(&history), 1, "{history:?}");
        assert_eq!(
            history.last().map(|f| &f.id),
            Some(&newer.id),
            "{history:?}"
        );
    }
    let kinds = memories.kinds(ctx.namespace()).await.must("kinds");
    assert_eq!(
        kinds.iter().filter(|k| k.name == "Preference").count(),
        1,
        "{kinds:?}"
    );
}

/// A registry record that storage damage made undecodable is skipped, not fatal: the other
/// kinds still list, stores of them still work, and a grantee's shared search still answers.
pub async fn an_unreadable_registry_record_is_skipped(ctx: &Ctx) {
    let bare = ctx
        .unchecked()
        .expect("Requirement::Unchecked: the backend as made");
    let memories = memories(ctx);
    register_kinds(ctx, &memories).await;
    let (owner, reader) = pair(ctx);
    memories
        .grant(ctx.namespace(), Grant::new(owner.clone(), reader.clone()))
        .await
        .must("grant");
    memories
        .store(ctx.scope(), preference("food", "vegan"))
        .await
        .must("store");
    let shared = ctx.shared_scope();
    let plant = |kind: &str, key: &str, tags: Vec<String>| {
        mnemix_core::NewFact::new("{not json")
            .with_kind(kind)
            .with_key(key)
            .with_tags(tags)
    };
    bare.remember(
        &shared,
        plant(KIND_RECORD, "_kind:Broken", Vec::new()),
        mnemix_core::RememberOptions::default(),
    )
    .await
    .must("plant a damaged kind");
    let grant_tags = ctx
        .backend()
        .export_scope(&shared)
        .await
        .must("export")
        .into_iter()
        .find_map(|r| match r {
            mnemix_core::transfer::Record::Fact { fact }
                if fact.kind.as_deref() == Some(GRANT_RECORD) =>
            {
                Some(fact.tags)
            }
            _ => None,
        })
        .expect("the grant's record");
    bare.remember(
        &shared,
        plant(GRANT_RECORD, "_grant:damaged", grant_tags),
        mnemix_core::RememberOptions::default(),
    )
    .await
    .must("plant a damaged grant");
    let names: Vec<String> = memories
        .kinds(ctx.namespace())
        .await
        .must("kinds survive a damaged record")
        .into_iter()
        .map(|k| k.name)
        .collect();
    assert_eq!(names, ["Preference", "UserProfile"]);
    memories
        .store(ctx.scope(), preference("drink", "tea"))
        .await
        .must("stores still work");
    let hits = memories
        .search(
            ctx.other_scope(),
            search("vegan").with_scope(SearchScope::Shared),
        )
        .await
        .must("a grantee's search survives a damaged grant");
    assert_eq!(hits.len(), 1, "{hits:?}");
}

/// Erasing a subject removes every version of every registry record naming it: a grant that
/// was superseded leaves nothing naming the owner in the namespace's export.
pub async fn erasure_removes_every_version_of_its_grants(ctx: &Ctx) {
    let memories = memories(ctx);
    register_kinds(ctx, &memories).await;
    let (owner, reader) = pair(ctx);
    memories
        .grant(ctx.namespace(), Grant::new(owner.clone(), reader.clone()))
        .await
        .must("grant");
    memories
        .grant(
            ctx.namespace(),
            Grant {
                kinds: vec!["Preference".into()],
                ..Grant::new(owner.clone(), reader.clone())
            },
        )
        .await
        .must("grant again, narrower: supersedes");
    ctx.backend().forget_all(ctx.scope()).await.must("erase");
    let left: Vec<_> = ctx
        .backend()
        .export_scope(&ctx.shared_scope())
        .await
        .must("export")
        .into_iter()
        .filter(|r| {
            matches!(r, mnemix_core::transfer::Record::Fact { fact } if fact.kind.as_deref() == Some(GRANT_RECORD))
        })
        .collect();
    assert!(
        left.is_empty(),
        "grant versions left after erasure: {left:?}"
    );
}

/// A memory's key names one kind and one id: a kind name holding `:` is refused, so kind `a`
/// with id `b:x` never meets a kind `a:b` with id `x`; ids may hold `:`.
pub async fn kinds_and_ids_never_share_a_key(ctx: &Ctx) {
    let memories = memories(ctx);
    let schema = json!({"type": "object"});
    memories
        .register_kind(ctx.namespace(), KindSpec::new("a:b", schema.clone()))
        .await
        .must_be_invalid("a kind name with `:`");
    memories
        .register_kind(ctx.namespace(), KindSpec::new("a", schema))
        .await
        .must("register a");
    let stored = memories
        .store(
            ctx.scope(),
            NewMemory {
                id: Some("b:x".into()),
                ..NewMemory::new("a", json!({"n": 1}))
            },
        )
        .await
        .must("an id with `:`");
    let read = memories.get(ctx.scope(), "a", "b:x").await.must("get");
    assert_eq!(read.data, json!({"n": 1}));
    assert_eq!(read.id, stored.memory.id);
    memories
        .get(ctx.scope(), "a:b", "x")
        .await
        .must_be_invalid("a kind name with `:` is never a kind");
}

/// JSON nested `levels` deep: `{"a": {"a": … 0}}`.
fn nested(levels: usize) -> Value {
    (1..levels).fold(json!({"a": 0}), |inner, _| json!({ "a": inner }))
}

/// What is accepted reads back exactly: a schema and a memory's data nested to the JSON depth
/// limit register, store and read back; one level more is refused at register and at store.
pub async fn schemas_and_data_at_the_depth_limit_read_back(ctx: &Ctx) {
    let memories = memories(ctx);
    let limit = mnemix_core::limits::MAX_JSON_DEPTH;
    memories
        .register_kind(ctx.namespace(), KindSpec::new("Deep", nested(limit + 1)))
        .await
        .must_be_invalid("a schema one level past the limit");
    memories
        .register_kind(ctx.namespace(), KindSpec::new("Deep", nested(limit)))
        .await
        .must("a schema at the limit");
    let kinds = memories.kinds(ctx.namespace()).await.must("kinds");
    assert_eq!(kinds.len(), 1);
    assert_eq!(kinds[0].schema, nested(limit));
    memories
        .register_kind(
            ctx.namespace(),
            KindSpec::new("Any", json!({"type": "object"})),
        )
        .await
        .must("register Any");
    let store = |data: Value| NewMemory {
        id: Some("one".into()),
        ..NewMemory::new("Any", data)
    };
    memories
        .store(ctx.scope(), store(nested(limit + 1)))
        .await
        .must_be_invalid("data one level past the limit");
    memories
        .store(ctx.scope(), store(nested(limit)))
        .await
        .must("data at the limit");
    let read = memories.get(ctx.scope(), "Any", "one").await.must("get");
    assert_eq!(read.data, nested(limit));
}

/// A kind's rules are checked when it is registered: `unique_on` must name a field the schema
/// declares and requires (a typo would make every memory supersede the last); a grant must name
/// registered kinds. Kinds can be deleted (storing is then refused; memories stored stay), and
/// the grants of a namespace listed.
pub async fn kind_rules_hold_at_register_and_kinds_can_be_deleted(ctx: &Ctx) {
    let memories = memories(ctx);
    let schema = json!({"type": "object", "required": ["category"],
        "properties": {"category": {"type": "string"}, "note": {"type": "string"}}});
    for field in ["categroy", "note"] {
        memories
            .register_kind(
                ctx.namespace(),
                KindSpec::new("Pref", schema.clone()).unique_on([field]),
            )
            .await
            .must_be_invalid("unique_on naming an undeclared or optional field");
    }
    memories
        .register_kind(
            ctx.namespace(),
            KindSpec::new("Pref", json!(true)).unique_on(["category"]),
        )
        .await
        .must_be_invalid("unique_on with a schema that declares nothing");
    register_kinds(ctx, &memories).await;
    let (owner, reader) = pair(ctx);
    memories
        .grant(
            ctx.namespace(),
            Grant {
                kinds: vec!["NoSuchKind".into()],
                ..Grant::new(owner.clone(), reader.clone())
            },
        )
        .await
        .must_be_invalid("a grant of an unregistered kind");
    memories
        .store(ctx.scope(), preference("food", "vegan"))
        .await
        .must("store");
    assert!(memories
        .delete_kind(ctx.namespace(), "Preference")
        .await
        .must("delete"));
    assert!(!memories
        .delete_kind(ctx.namespace(), "Preference")
        .await
        .must("delete again"));
    let names: Vec<String> = memories
        .kinds(ctx.namespace())
        .await
        .must("kinds")
        .into_iter()
        .map(|k| k.name)
        .collect();
    assert_eq!(names, ["UserProfile"]);
    memories
        .store(ctx.scope(), preference("drink", "tea"))
        .await
        .must_be_invalid("storing a deleted kind");
    let kept = memories
        .search(ctx.scope(), search("vegan"))
        .await
        .must("search");
    assert_eq!(kept.len(), 1, "memories of a deleted kind stay: {kept:?}");
    let grant = Grant {
        kinds: vec!["UserProfile".into()],
        ..Grant::new(owner, reader)
    };
    memories
        .grant(ctx.namespace(), grant.clone())
        .await
        .must("grant");
    assert_eq!(
        memories.grants(ctx.namespace()).await.must("grants"),
        [grant]
    );
}

/// Another subject's memories are read only through a grant in force, and only what it
/// grants: no grant, nothing; a grant limited to a kind, that kind (marked shared by its
/// owner); revoked, nothing; a third subject never; `forget_all` of the owner removes its
/// grants; `own` never reads shared memories.
pub async fn memories_cross_subjects_only_through_a_grant_in_force(ctx: &Ctx) {
    let memories = memories(ctx);
    register_kinds(ctx, &memories).await;
    let (owner, reader) = (ctx.scope(), ctx.other_scope());
    let third = Scope::new(ctx.namespace().as_str(), "carol-third").unwrap();
    let owner_subject = owner.subject().unwrap().clone();
    let reader_subject = reader.subject().unwrap().clone();
    memories
        .store(owner, preference("food", "vegan peanuts"))
        .await
        .must("owner preference");
    memories
        .store(
            owner,
            NewMemory::new("UserProfile", json!({"name": "owner peanuts"})),
        )
        .await
        .must("owner profile");
    memories
        .store(reader, preference("music", "jazz peanuts"))
        .await
        .must("reader's own");
    let shared = |scope: SearchScope| search("peanuts").with_scope(scope);
    let found = |hits: Vec<mnemix_engine::MemoryHit>| -> Vec<(String, MemorySource)> {
        let mut found: Vec<_> = hits
            .into_iter()
            .map(|h| (h.memory.kind.unwrap_or_default(), h.source))
            .collect();
        found.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        found
    };
    assert!(memories
        .search(reader, shared(SearchScope::Shared))
        .await
        .must("no grant")
        .is_empty());
    let grant = Grant {
        kinds: vec!["Preference".into()],
        ..Grant::new(owner_subject.clone(), reader_subject.clone())
    };
    memories.grant(ctx.namespace(), grant).await.must("grant");
    let by_owner = MemorySource::Shared {
        owner: owner_subject.clone(),
    };
    assert_eq!(
        found(
            memories
                .search(reader, shared(SearchScope::Shared))
                .await
                .must("shared")
        ),
        [("Preference".to_owned(), by_owner.clone())]
    );
    assert_eq!(
        found(
            memories
                .search(reader, shared(SearchScope::All))
                .await
                .must("all")
        ),
        [
            ("Preference".to_owned(), MemorySource::Own),
            ("Preference".to_owned(), by_owner)
        ]
    );
    assert_eq!(
        memories
            .search(reader, shared(SearchScope::Own))
            .await
            .must("own")
            .len(),
        1
    );
    for nobody in [&third, owner] {
        let reach = memories
            .search(nobody, shared(SearchScope::Shared))
            .await
            .must("no grant to them");
        assert!(reach.is_empty(), "{nobody:?}: {reach:?}");
    }
    assert!(memories
        .revoke(ctx.namespace(), &owner_subject, &reader_subject)
        .await
        .must("revoke"));
    assert!(memories
        .search(reader, shared(SearchScope::Shared))
        .await
        .must("revoked")
        .is_empty());
    memories
        .grant(
            ctx.namespace(),
            Grant::new(owner_subject.clone(), reader_subject.clone()),
        )
        .await
        .must("grant again");
    assert_eq!(
        memories
            .search(reader, shared(SearchScope::Shared))
            .await
            .must("granted everything")
            .len(),
        2
    );
    ctx.backend().forget_all(owner).await.must("forget owner");
    assert!(memories
        .grants_to(ctx.namespace(), &reader_subject)
        .await
        .must("grants")
        .is_empty());
    assert!(memories
        .search(reader, shared(SearchScope::Shared))
        .await
        .must("owner forgotten")
        .is_empty());
}
