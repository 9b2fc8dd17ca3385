//! The payload corpus through every string field: byte-exact round trips, NUL and all.

use mnemix_core::{
    CheckpointId, CheckpointStatus, CollectionSpec, ConversationId, ConversationQuery, FactStore,
    Filter, LoadOptions, Message, MessageId, Metadata, NewCheckpoint, NewConversation, NewFact,
    Part, RecallQuery, RememberOptions, Role, Scope, VectorId, VectorQuery, VectorRecord,
    WorkingMemoryKey, WorkingMemoryUpdate,
};
use serde_json::{json, Value};

use crate::support::{
    conversation, conversation_with, identifier_payloads, load, message, one_mebibyte, payloads,
    unit_vector, ResultExt,
};
use crate::Ctx;

fn metadata_of(payload: &str) -> Metadata {
    let mut m = Metadata::new();
    m.insert("value".into(), Value::String(payload.to_owned()));
    m.insert(
        payload.to_owned(),
        json!({"nested": payload, "list": [payload]}),
    );
    m
}

/// Message text, reasoning, metadata keys and values round-trip byte-exactly.
pub async fn message_text_round_trips(ctx: &Ctx) {
    let sent: Vec<Message> = payloads()
        .into_iter()
        .enumerate()
        .map(|(i, (_, p))| {
            let mut m = message(
                &format!("m{i}"),
                Role::User,
                vec![Part::text(p.clone()), Part::Reasoning { text: p.clone() }],
            );
            m.metadata = metadata_of(&p);
            m
        })
        .collect();
    let c = conversation_with(ctx, sent.clone()).await;
    let loaded = load(ctx, &c.id, LoadOptions::raw()).await;
    for ((name, _), (got, want)) in payloads().iter().zip(loaded.iter().zip(&sent)) {
        assert_eq!(&got.message, want, "payload {name}");
    }
}

/// Tool arguments, results and ids of calls round-trip byte-exactly.
pub async fn tool_calls_and_results_round_trip(ctx: &Ctx) {
    let mut sent = Vec::new();
    for (i, (_, p)) in payloads().into_iter().enumerate() {
        let call_id = format!("call-{i}-{p}");
        let args = json!({ p.clone(): p, "n": [1, 2.5, -3e10], "deep": {"x": null, "y": true} });
        sent.push(message(
            &format!("a{i}"),
            Role::Assistant,
            vec![Part::tool_call(call_id.clone(), format!("tool {p}"), args)],
        ));
        sent.push(message(
            &format!("t{i}"),
            Role::Tool,
            vec![Part::tool_result(call_id, json!({"out": p}))],
        ));
    }
    let c = conversation_with(ctx, sent.clone()).await;
    let loaded = load(ctx, &c.id, LoadOptions::default()).await;
    let got: Vec<Message> = loaded.into_iter().map(|m| m.message).collect();
    assert_eq!(got, sent, "sanitize keeps complete turns and every byte");
}

/// Conversation title, metadata, agent, resource and record fields round-trip.
pub async fn conversation_fields_round_trip(ctx: &Ctx) {
    let b = ctx.backend();
    for (name, p) in payloads() {
        let ident = if p.contains('\0') || p.trim().is_empty() {
            "plain".to_owned()
        } else {
            p.clone()
        };
        let new = NewConversation::default()
            .with_agent(ident.clone())
            .with_title(p.clone())
            .with_metadata(metadata_of(&p))
            .with_resource_slug(ident.clone())
            .with_record_id(ident.clone());
        let created = b.create_conversation(ctx.scope(), new).await.must(name);
        let read = b
            .get_conversation(ctx.scope(), &created.id)
            .await
            .must(name);
        assert_eq!(read, created, "payload {name}");
        assert_eq!(read.title.as_deref(), Some(p.as_str()), "payload {name}");
        let query = ConversationQuery::default()
            .with_agent(ident.clone())
            .with_record_id(ident);
        let found = b.list_conversations(ctx.scope(), query).await.must(name);
        assert!(
            found.items.iter().any(|c| c.id == created.id),
            "filter by payload {name}"
        );
    }
}

/// Identifiers made of hostile characters (ids, keys, subjects) round-trip and stay isolated.
pub async fn identifiers_round_trip(ctx: &Ctx) {
    let b = ctx.backend();
    for (name, p) in identifier_payloads() {
        let scope = Scope::new(ctx.namespace().as_str(), format!("{p}-subject")).expect("subject");
        let id = ConversationId::new(p.clone()).expect("conversation id");
        let new = NewConversation::default().with_id(id.clone());
        b.create_conversation(&scope, new).await.must(name);
        let m = Message {
            id: MessageId::new(p.clone()).expect("id"),
            ..Message::user(p.clone())
        };
        b.append(
            &scope,
            &id,
            vec![m.clone()],
            mnemix_core::AppendOptions::default(),
        )
        .await
        .must(name);
        let loaded = b.load(&scope, &id, LoadOptions::raw()).await.must(name);
        assert_eq!(loaded[0].message, m, "payload {name}");
        b.get_conversation(ctx.scope(), &id)
            .await
            .must_be_not_found(name);
        let cp = NewCheckpoint::new(
            CheckpointId::new(p.clone()).unwrap(),
            p.clone(),
            CheckpointStatus::Suspended,
            json!(p),
        );
        b.put_checkpoint(&scope, cp.clone()).await.must(name);
        assert_eq!(
            b.list_suspended(&scope, Some(&p)).await.must(name)[0].id,
            cp.id,
            "payload {name}"
        );
    }
}

/// Fact text, kind, key and tags round-trip; recall still finds them.
pub async fn fact_fields_round_trip(ctx: &Ctx) {
    let b = ctx.backend();
    for (i, (name, p)) in payloads().into_iter().enumerate() {
        let ident = if p.contains('\0') || p.trim().is_empty() {
            "plain".to_owned()
        } else {
            p.clone()
        };
        let text = format!("{p} marker{}", name.replace(' ', ""));
        let key = format!("k{i}-{ident}");
        let new = NewFact::new(text.clone())
            .with_kind(ident.clone())
            .with_key(key.clone())
            .with_tags([ident.clone()]);
        let stored = b
            .remember(ctx.scope(), new, RememberOptions::default())
            .await
            .must(name)
            .fact;
        let read = b.get_fact(ctx.scope(), &stored.id).await.must(name);
        assert_eq!(read.text, text, "payload {name}");
        assert_eq!(
            (read.kind.as_deref(), read.key.as_deref()),
            (Some(ident.as_str()), Some(key.as_str()))
        );
        assert_eq!(read.tags, vec![ident.clone()]);
        let query =
            RecallQuery::text(format!("marker{}", name.replace(' ', ""))).with_tags(vec![ident]);
        let hits = FactStore::recall(b, ctx.scope(), query).await.must(name);
        assert_eq!(hits.len(), 1, "recall with payload tag {name}");
    }
}

/// Working-memory content round-trips.
pub async fn working_memory_round_trips(ctx: &Ctx) {
    let c = conversation(ctx, ctx.scope()).await;
    let key = WorkingMemoryKey::Conversation(c.id);
    for (name, p) in payloads() {
        ctx.backend()
            .set_working_memory(ctx.scope(), &key, WorkingMemoryUpdate::markdown(p.clone()))
            .await
            .must(name);
        let read = ctx
            .backend()
            .get_working_memory(ctx.scope(), &key)
            .await
            .must(name)
            .expect("set");
        assert_eq!(read.content, p, "payload {name}");
        let doc = json!({ "k": p, p.clone(): 1 }).to_string();
        ctx.backend()
            .set_working_memory(ctx.scope(), &key, WorkingMemoryUpdate::json(doc.clone()))
            .await
            .must(name);
        let read = ctx
            .backend()
            .get_working_memory(ctx.scope(), &key)
            .await
            .must(name)
            .expect("set");
        assert_eq!(read.content, doc, "json payload {name}");
    }
}

/// Vector text, ids and metadata round-trip, through get and through search, and filters match
/// payload values literally.
pub async fn vector_payloads_round_trip(ctx: &Ctx) {
    let spec = CollectionSpec::new("payloads", 8, "m");
    ctx.backend()
        .ensure_collection(ctx.namespace(), spec.clone())
        .await
        .must("ensure");
    let records: Vec<VectorRecord> = payloads()
        .into_iter()
        .enumerate()
        .map(|(i, (_, p))| {
            VectorRecord::new(
                VectorId::new(format!("v{i}")).unwrap(),
                unit_vector(8, i as u64),
            )
            .with_text(p.clone())
            .with_metadata(metadata_of(&p))
        })
        .collect();
    ctx.backend()
        .upsert_vectors(ctx.scope(), &spec.name, records.clone())
        .await
        .must("upsert");
    for ((name, p), want) in payloads().into_iter().zip(&records) {
        assert_eq!(
            &ctx.backend()
                .get_vector(ctx.scope(), &spec.name, &want.id)
                .await
                .must(name),
            want,
            "payload {name}"
        );
        if p.contains('\0') {
            continue; // filter strings exclude NUL by contract
        }
        let query =
            VectorQuery::new(unit_vector(8, 0), 100).with_filter(Filter::eq("value", p.as_str()));
        let hits = ctx
            .backend()
            .search(ctx.scope(), &spec.name, query)
            .await
            .must(name);
        assert_eq!(hits.len(), 1, "filter on payload {name}");
        assert_eq!(
            hits[0].record,
            crate::vectors::as_hit(want.clone()),
            "search hit of payload {name}"
        );
    }
    // And a search hands every record back as written, its vector included when asked.
    let mut query = VectorQuery::new(unit_vector(8, 0), 100);
    query.include_vectors = true;
    let mut found: Vec<VectorRecord> = ctx
        .backend()
        .search(ctx.scope(), &spec.name, query)
        .await
        .must("search every payload")
        .into_iter()
        .map(|hit| hit.record)
        .collect();
    found.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
    let mut written = records;
    written.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
    assert_eq!(found, written);
}

/// Checkpoint state round-trips.
pub async fn checkpoint_state_round_trips(ctx: &Ctx) {
    for (i, (name, p)) in payloads().into_iter().enumerate() {
        let state = json!({ "s": p, p.clone(): [p] });
        let new = NewCheckpoint::new(
            CheckpointId::new(format!("cp{i}")).unwrap(),
            "w",
            CheckpointStatus::Running,
            state.clone(),
        );
        ctx.backend()
            .put_checkpoint(ctx.scope(), new.clone())
            .await
            .must(name);
        assert_eq!(
            ctx.backend()
                .get_checkpoint(ctx.scope(), &new.id)
                .await
                .must(name)
                .state,
            state,
            "payload {name}"
        );
    }
}

/// Cache keys made of hostile characters round-trip their values.
pub async fn cache_keys_round_trip(ctx: &Ctx) {
    for (name, p) in identifier_payloads() {
        ctx.backend()
            .cache_set(ctx.namespace(), &p, p.as_bytes().to_vec(), None)
            .await
            .must(name);
    }
    for (name, p) in identifier_payloads() {
        assert_eq!(
            ctx.backend()
                .cache_get(ctx.namespace(), &p)
                .await
                .must(name),
            Some(p.into_bytes()),
            "payload {name}"
        );
    }
}

/// One mebibyte of text round-trips through a message, a fact, working memory and the cache.
pub async fn one_mebibyte_text_round_trips(ctx: &Ctx) {
    let big = one_mebibyte();
    let b = ctx.backend();
    let c = conversation_with(
        ctx,
        vec![message("big", Role::User, vec![Part::text(big.clone())])],
    )
    .await;
    assert_eq!(
        b.load(ctx.scope(), &c.id, LoadOptions::raw())
            .await
            .must("load")[0]
            .message
            .text(),
        big
    );
    let fact = b
        .remember(
            ctx.scope(),
            NewFact::new(big.clone()),
            RememberOptions::default(),
        )
        .await
        .must("fact")
        .fact;
    assert_eq!(
        b.get_fact(ctx.scope(), &fact.id).await.must("get").text,
        big
    );
    assert_eq!(
        FactStore::recall(b, ctx.scope(), RecallQuery::text("memory"))
            .await
            .must("recall")
            .len(),
        1
    );
    let key = WorkingMemoryKey::User;
    b.set_working_memory(
        ctx.scope(),
        &key,
        WorkingMemoryUpdate::markdown(big.clone()),
    )
    .await
    .must("wm");
    assert_eq!(
        b.get_working_memory(ctx.scope(), &key)
            .await
            .must("wm")
            .expect("set")
            .content,
        big
    );
    b.cache_set(ctx.namespace(), "big", big.clone().into_bytes(), None)
        .await
        .must("cache");
    assert_eq!(
        b.cache_get(ctx.namespace(), "big").await.must("cache"),
        Some(big.into_bytes())
    );
}

/// `{"d": {"d": … "leaf"}}`: `levels` objects inside each other.
fn nested(levels: usize) -> Value {
    (0..levels).fold(json!("leaf"), |inner, _| json!({ "d": inner }))
}

/// Metadata whose deepest value makes it `levels` deep in all (the map is one level).
fn nested_metadata(levels: usize) -> Metadata {
    let mut metadata = Metadata::new();
    metadata.insert("deep".into(), nested(levels - 1));
    metadata
}

/// JSON as deep as `MAX_JSON_DEPTH` round-trips in every JSON-bearing field; one level deeper
/// is `InvalidInput` at write, nothing is stored, and the scope stays readable and exportable.
pub async fn json_deeper_than_the_limit_is_refused_and_the_limit_round_trips(ctx: &Ctx) {
    let b = ctx.backend();
    let (at, over) = (
        mnemix_core::limits::MAX_JSON_DEPTH,
        mnemix_core::limits::MAX_JSON_DEPTH + 1,
    );

    // Conversation metadata, at creation and by update.
    let kept = b
        .create_conversation(
            ctx.scope(),
            NewConversation::default().with_metadata(nested_metadata(at)),
        )
        .await
        .must("metadata at the limit");
    assert_eq!(
        b.get_conversation(ctx.scope(), &kept.id)
            .await
            .must("read back")
            .metadata,
        nested_metadata(at)
    );
    b.create_conversation(
        ctx.scope(),
        NewConversation::default().with_metadata(nested_metadata(over)),
    )
    .await
    .must_be_invalid("conversation metadata over the limit");
    b.update_conversation(
        ctx.scope(),
        &kept.id,
        mnemix_core::ConversationUpdate {
            title: None,
            metadata: Some(nested_metadata(over)),
        },
    )
    .await
    .must_be_invalid("updated metadata over the limit");

    // Message metadata, tool arguments and tool output.
    let mut deep_message = message(
        "deep",
        Role::Assistant,
        vec![Part::tool_call("call-1", "tool", nested(at))],
    );
    deep_message.metadata = nested_metadata(at);
    let answer = message(
        "answer",
        Role::Tool,
        vec![Part::tool_result("call-1", nested(at))],
    );
    b.append(
        ctx.scope(),
        &kept.id,
        vec![deep_message.clone(), answer.clone()],
        mnemix_core::AppendOptions::default(),
    )
    .await
    .must("messages at the limit");
    let loaded = load(ctx, &kept.id, LoadOptions::raw()).await;
    assert_eq!(loaded[0].message, deep_message);
    assert_eq!(loaded[1].message, answer);
    let mut too_deep = vec![
        message("m1", Role::User, vec![Part::text("fine")]),
        message("m2", Role::User, vec![Part::text("metadata")]),
    ];
    too_deep[1].metadata = nested_metadata(over);
    let over_arguments = message(
        "m3",
        Role::Assistant,
        vec![Part::tool_call("call-2", "tool", nested(over))],
    );
    let over_output = message(
        "m4",
        Role::Tool,
        vec![Part::tool_result("call-1", nested(over))],
    );
    for batch in [too_deep, vec![over_arguments], vec![over_output]] {
        b.append(
            ctx.scope(),
            &kept.id,
            batch,
            mnemix_core::AppendOptions::default(),
        )
        .await
        .must_be_invalid("a message over the limit");
    }
    assert_eq!(
        load(ctx, &kept.id, LoadOptions::raw()).await.len(),
        2,
        "nothing of a refused batch is stored"
    );

    // Checkpoint state, at creation and by update.
    let checkpoint = NewCheckpoint::new(
        CheckpointId::new("deep").unwrap(),
        "w",
        CheckpointStatus::Running,
        nested(at),
    );
    b.put_checkpoint(ctx.scope(), checkpoint.clone())
        .await
        .must("state at the limit");
    let refused = {
        let mut value = checkpoint.clone();
        value.id = CheckpointId::new("deeper").unwrap();
        value.state = nested(over);
        value
    };
    b.put_checkpoint(ctx.scope(), refused)
        .await
        .must_be_invalid("state over the limit");
    b.update_checkpoint(
        ctx.scope(),
        &checkpoint.id,
        mnemix_core::CheckpointUpdate {
            expected_version: 1,
            status: CheckpointStatus::Suspended,
            state: nested(over),
        },
    )
    .await
    .must_be_invalid("updated state over the limit");
    assert_eq!(
        b.get_checkpoint(ctx.scope(), &checkpoint.id)
            .await
            .must("read back")
            .state,
        nested(at)
    );

    // Vector metadata.
    if ctx.capabilities().has_vectors() {
        let spec = CollectionSpec::new("deep", 8, "m");
        b.ensure_collection(ctx.namespace(), spec.clone())
            .await
            .must("ensure");
        let record = |id: &str, levels: usize| {
            VectorRecord::new(VectorId::new(id).unwrap(), unit_vector(8, 1))
                .with_metadata(nested_metadata(levels))
        };
        b.upsert_vectors(ctx.scope(), &spec.name, vec![record("at", at)])
            .await
            .must("vector metadata at the limit");
        assert_eq!(
            b.get_vector(ctx.scope(), &spec.name, &VectorId::new("at").unwrap())
                .await
                .must("read back")
                .metadata,
            nested_metadata(at)
        );
        b.upsert_vectors(ctx.scope(), &spec.name, vec![record("over", over)])
            .await
            .must_be_invalid("vector metadata over the limit");
        let hits = b
            .search(
                ctx.scope(),
                &spec.name,
                VectorQuery::new(unit_vector(8, 1), 10),
            )
            .await
            .must("search");
        assert_eq!(hits.len(), 1);
    }

    // Everything that was accepted reads back, listed and exported.
    b.list_conversations(ctx.scope(), ConversationQuery::default())
        .await
        .must("list");
    let exported = b.export_scope(ctx.scope()).await.must("export");
    let restored = b.restore(exported).await.must("restore what was exported");
    assert!(restored > 0);
}

/// An identifier of exactly [`MAX_ID_BYTES`](mnemix_core::limits::MAX_ID_BYTES) (256) bytes of
/// multi-byte UTF-8 round-trips as a subject, conversation id, fact key and checkpoint id; one
/// byte more is refused (by the typed constructors, or `InvalidInput` where a field is a plain
/// string), and a page of exactly 1,000 is served while 1,001 is refused.
pub async fn identifiers_at_the_length_limit_round_trip(ctx: &Ctx) {
    use mnemix_core::limits::{MAX_ID_BYTES, MAX_PAGE_SIZE};
    let b = ctx.backend();
    let at = "é".repeat(MAX_ID_BYTES / 2);
    let over = format!("{at}x");
    assert_eq!(at.len(), MAX_ID_BYTES);
    assert!(
        ConversationId::new(over.clone()).is_err(),
        "typed ids refuse 257 bytes"
    );
    assert!(Scope::new(ctx.namespace().as_str(), over.clone()).is_err());
    assert!(CheckpointId::new(over.clone()).is_err());
    let scope = Scope::new(ctx.namespace().as_str(), at.clone()).expect("subject at the limit");
    let id = ConversationId::new(at.clone()).expect("id at the limit");
    let new = NewConversation::default().with_id(id.clone());
    b.create_conversation(&scope, new)
        .await
        .must("conversation at the limit");
    assert_eq!(b.get_conversation(&scope, &id).await.must("get").id, id);
    let keyed = |key: &str| NewFact::new("a fact under the longest key").with_key(key);
    b.remember(&scope, keyed(&at), RememberOptions::default())
        .await
        .must("fact key at the limit");
    assert_eq!(b.history(&scope, &at).await.must("history").len(), 1);
    b.remember(&scope, keyed(&over), RememberOptions::default())
        .await
        .must_be_invalid("fact key over the limit");
    let checkpoint = NewCheckpoint::new(
        CheckpointId::new(at.clone()).expect("checkpoint id at the limit"),
        at.clone(),
        CheckpointStatus::Suspended,
        json!({}),
    );
    b.put_checkpoint(&scope, checkpoint)
        .await
        .must("checkpoint at the limit");
    let page = |limit| ConversationQuery::default().with_limit(limit);
    let listed = b
        .list_conversations(&scope, page(MAX_PAGE_SIZE))
        .await
        .must("a page of 1,000");
    assert_eq!(listed.items.len(), 1);
    b.list_conversations(&scope, page(MAX_PAGE_SIZE + 1))
        .await
        .must_be_invalid("a page of 1,001");
}
