//! Extraction: the threshold, the hook and the namespace, expiry, kinds, and a failing extractor
//! that leaves the turn committed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use mnemix_core::{
    ConversationId, FactQuery, LoadOptions, Message, Origin, Principal, Provenance, RecallQuery,
    Result, Role, Scope, StoredMessage,
};
use mnemix_engine::{ExtractedFact, ExtractionReport, FactExtractor, Memory};
use serde_json::json;

use crate::support::{conversation, text, ResultExt};
use crate::Ctx;

use super::{config, seqs, turn, ScriptedExtractor};

/// An extractor that fails leaves the turn committed, reports the failure to `on_error` and
/// in the receipt, and the same messages are offered again by the next commit.
pub async fn failing_extractor_leaves_the_turn_committed(ctx: &Ctx) {
    let extractor = Arc::new(ScriptedExtractor::default());
    let errors = Arc::new(AtomicUsize::new(0));
    let mut config = config();
    config.facts.enabled = true;
    config.extract.enabled = true;
    let memory = Memory::builder(ctx.backend_arc())
        .config(config)
        .extractor(extractor.clone())
        .on_error({
            let errors = errors.clone();
            move |_, _, _| {
                errors.fetch_add(1, Ordering::SeqCst);
            }
        })
        .build()
        .must("build");
    let c = conversation(ctx, ctx.scope()).await;
    extractor.fail.store(true, Ordering::SeqCst);
    let receipt = memory
        .commit(ctx.scope(), &c.id, turn(3))
        .await
        .must("a failing extractor never fails the commit");
    assert!(
        matches!(&receipt.extraction, ExtractionReport::Failed { error } if error.contains("timed out")),
        "{receipt:?}"
    );
    assert_eq!(errors.load(Ordering::SeqCst), 1);
    let persisted = ctx
        .backend()
        .load(ctx.scope(), &c.id, LoadOptions::default())
        .await
        .must("load");
    assert_eq!(seqs(&persisted), [1, 2], "the turn is committed");

    extractor.fail.store(false, Ordering::SeqCst);
    let receipt = memory
        .commit(ctx.scope(), &c.id, Vec::new())
        .await
        .must("next commit");
    match receipt.extraction {
        ExtractionReport::Ran {
            messages, stored, ..
        } => {
            assert_eq!(messages, 2, "the unextracted turn is offered again");
            assert_eq!(stored.len(), 1);
            assert_eq!(stored[0].text, "my favourite colour is teal");
        }
        other => panic!("extraction should run: {other:?}"),
    }
    assert_eq!(errors.load(Ordering::SeqCst), 1);
}

/// Facts below `min_confidence` are dropped, `on_extracted` sees exactly what was stored, and
/// `facts.namespace` puts them in the subject's scope of that namespace.
pub async fn extraction_honours_threshold_hook_and_namespace(ctx: &Ctx) {
    let audited = Arc::new(Mutex::new(Vec::new()));
    let mut config = config();
    config.facts.enabled = true;
    config.extract.enabled = true;
    config.extract.min_confidence = 0.85;
    config.facts.namespace = Some(format!("{}-facts", ctx.namespace()));
    let memory = Memory::builder(ctx.backend_arc())
        .config(config)
        .extractor(Arc::new(ScriptedExtractor::default()))
        .on_extracted({
            let audited = audited.clone();
            move |_, _, facts| {
                let mut audited = audited.lock().expect("not poisoned");
                audited.extend(facts.iter().map(|f| f.text.clone()));
            }
        })
        .build()
        .must("build");
    let c = conversation(ctx, ctx.scope()).await;
    let turns: Vec<Message> = [6, 9, 12].into_iter().flat_map(turn).collect();
    let receipt = memory
        .commit(ctx.scope(), &c.id, turns)
        .await
        .must("commit");
    let ExtractionReport::Ran {
        proposed, stored, ..
    } = receipt.extraction
    else {
        panic!("extraction should run: {:?}", receipt.extraction);
    };
    assert_eq!(proposed, 3);
    let texts: Vec<&str> = stored.iter().map(|f| f.text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "my favourite city is Lisbon",
            "my favourite pet is a cat named Miso"
        ]
    );
    assert_eq!(*audited.lock().expect("not poisoned"), texts);
    let facts_scope = memory.facts_scope(ctx.scope());
    assert_ne!(facts_scope.namespace(), ctx.scope().namespace());
    assert_eq!(facts_scope.subject(), ctx.scope().subject());
    let listed = ctx
        .backend()
        .list_facts(&facts_scope, FactQuery::default())
        .await
        .must("list");
    assert_eq!(listed.items.len(), 2);
    let elsewhere = ctx
        .backend()
        .list_facts(ctx.scope(), FactQuery::default())
        .await
        .must("list");
    assert!(elsewhere.items.is_empty());
}

/// `extract.ttl` gives every extracted fact its expiry, from the store's now; once it passes
/// the facts are gone.
pub async fn extracted_facts_expire_after_the_configured_ttl(ctx: &Ctx) {
    let mut config = config();
    config.facts.enabled = true;
    config.extract.enabled = true;
    config.extract.ttl = Some("1h".parse().expect("a TTL"));
    let memory = Memory::builder(ctx.backend_arc())
        .config(config)
        .extractor(Arc::new(ScriptedExtractor::default()))
        .build()
        .must("build");
    let c = conversation(ctx, ctx.scope()).await;
    let now = ctx.clock_now();
    let receipt = memory
        .commit(ctx.scope(), &c.id, turn(6))
        .await
        .must("commit");
    let ExtractionReport::Ran { stored, .. } = receipt.extraction else {
        panic!("extraction should run: {:?}", receipt.extraction);
    };
    assert_eq!(stored.len(), 1);
    let in_an_hour = Some(now.saturating_add(std::time::Duration::from_hours(1)));
    assert_eq!(stored[0].expires_at, in_an_hour);
    let list = || ctx.backend().list_facts(ctx.scope(), FactQuery::default());
    assert_eq!(list().await.must("list").items.len(), 1);
    ctx.clock().advance(std::time::Duration::from_hours(1));
    assert!(list().await.must("list").items.is_empty());
}

/// What extraction stores records the extractor (its model) as the writer, whatever wrote
/// the turn; from messages none of which is a tool's result its origin is `extracted`, from a
/// batch holding one it is `tool`, which a recall by origin leaves out.
pub async fn extraction_records_the_extractor_and_the_tool_origin(ctx: &Ctx) {
    let mut config = config();
    config.facts.enabled = true;
    config.extract.enabled = true;
    let memory = Memory::builder(ctx.backend_arc())
        .config(config)
        .extractor(Arc::new(ScriptedExtractor::default()))
        .build()
        .must("build");
    let c = conversation(ctx, ctx.scope()).await;
    let stored = |receipt: mnemix_engine::CommitReceipt| match receipt.extraction {
        ExtractionReport::Ran { stored, .. } => stored,
        other => panic!("extraction should run: {other:?}"),
    };
    let said = stored(
        memory
            .commit(ctx.scope(), &c.id, turn(6))
            .await
            .must("commit"),
    );
    let extractor = Principal::extractor("extractor").expect("a model name");
    assert_eq!(said.len(), 1);
    assert_eq!(
        said[0].provenance,
        Provenance::new(extractor.clone(), Origin::Extracted)
    );
    let mut with_a_tool = turn(9);
    with_a_tool.push(text("t9", Role::Tool, "weather: sunny"));
    let from_tools = stored(
        memory
            .commit(ctx.scope(), &c.id, with_a_tool)
            .await
            .must("commit"),
    );
    assert_eq!(from_tools.len(), 1);
    assert_eq!(
        from_tools[0].provenance,
        Provenance::new(extractor, Origin::Tool)
    );
    let trusted = RecallQuery::text("favourite").with_origins([Origin::Extracted]);
    let recalled = ctx
        .backend()
        .recall(ctx.scope(), trusted)
        .await
        .must("recall");
    let texts: Vec<&str> = recalled.iter().map(|h| h.fact.text.as_str()).collect();
    assert_eq!(texts, [said[0].text.as_str()]);
}

/// Extracts `my favourite CATEGORY is VALUE` as a `Preference` memory; a value in digits
/// becomes a number, which the kind's schema refuses.
struct PreferenceExtractor;

#[async_trait]
impl FactExtractor for PreferenceExtractor {
    async fn extract(
        &self,
        _scope: &Scope,
        _conversation: &ConversationId,
        messages: &[StoredMessage],
    ) -> Result<Vec<ExtractedFact>> {
        Ok(messages
            .iter()
            .filter(|m| m.message.role == Role::User)
            .filter_map(|m| {
                let said = m.message.text();
                let rest = said.split_once("my favourite ")?.1;
                let (category, value) = rest.split_once(" is ")?;
                let value = value
                    .parse::<u64>()
                    .map_or_else(|_| json!(value), |n| json!(n));
                Some(ExtractedFact {
                    kind: Some("Preference".into()),
                    data: Some(json!({"category": category, "value": value})),
                    ..ExtractedFact::new("", 0.9)
                })
            })
            .collect())
    }
}

/// An extractor may return kind + data: each is stored as a memory of the kind (checked
/// against its schema; one that breaks it goes to `on_error` while the others are stored),
/// superseding by the kind's unique fields; resending the conversation extracts and creates
/// nothing (the cursor), and the same memory again would be a duplicate.
pub async fn extraction_into_kinds_supersedes_and_resending_creates_nothing(ctx: &Ctx) {
    let memories = crate::memories::memories(ctx);
    crate::memories::register_kinds(ctx, &memories).await;
    let errors = Arc::new(Mutex::new(Vec::new()));
    let mut config = config();
    config.facts.enabled = true;
    config.extract.enabled = true;
    let memory = Memory::builder(ctx.backend_arc())
        .config(config)
        .extractor(Arc::new(PreferenceExtractor))
        .on_error({
            let errors = errors.clone();
            move |_, _, e| errors.lock().expect("not poisoned").push(e.to_string())
        })
        .build()
        .must("build");
    let c = conversation(ctx, ctx.scope()).await;
    let said = [
        "my favourite city is Lisbon",
        "my favourite number is 7",
        "my favourite city is Porto",
    ];
    let mut history = Vec::new();
    for (i, line) in said.iter().enumerate() {
        let turn = vec![
            text(&format!("u{i}"), Role::User, line),
            text(&format!("a{i}"), Role::Assistant, "noted"),
        ];
        history.extend(turn.clone());
        ctx.clock().advance(Duration::from_millis(1));
        memory.commit(ctx.scope(), &c.id, turn).await.must("commit");
    }
    let errors = errors.lock().expect("not poisoned").clone();
    assert_eq!(errors.len(), 1, "the number breaks the schema: {errors:?}");
    assert!(errors[0].contains("/value"), "{}", errors[0]);
    let city = memories
        .search(ctx.scope(), crate::memories::search("city"))
        .await
        .must("search");
    assert_eq!(city.len(), 1);
    assert_eq!(city[0].memory.data["value"], "Porto");
    let versions = memories
        .history(ctx.scope(), "Preference", &city[0].memory.id)
        .await
        .must("history");
    assert_eq!(versions.len(), 2, "Lisbon kept as history");
    let receipt = memory
        .commit(ctx.scope(), &c.id, history)
        .await
        .must("resend the whole conversation");
    assert!(receipt.append.appended.is_empty());
    assert_eq!(receipt.extraction, ExtractionReport::Skipped);
    assert_eq!(
        memories
            .history(ctx.scope(), "Preference", &city[0].memory.id)
            .await
            .must("history")
            .len(),
        2,
        "nothing created"
    );
}
