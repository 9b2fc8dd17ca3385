//! A whole turn through every tier: window, summary, token budget and facts together, and the
//! scope a turn stays in.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use mnemix_core::{ConversationId, FactQuery, Message, Role};

use mnemix_core::replay::ContinuationOptions;
use mnemix_engine::config::MemoryConfig;
use mnemix_engine::{ApproxTokenCounter, ExtractionReport, Memory, TokenCounter};

use crate::support::{conversation, text, ResultExt};
use crate::Ctx;

use super::{config, joined, memory, seqs, turn, user_line, ScriptedExtractor, SeqSummarizer};

/// Twenty turns through `prepare`/`commit` with a scripted extractor and summarizer: the
/// window, summary and token budget hold on every turn; facts of one conversation reach the
/// next; resending the whole history extracts nothing again; a forged continuation is rejected.
pub async fn twenty_turn_conversation_keeps_window_summary_budget_and_facts(ctx: &Ctx) {
    const WINDOW: usize = 6;
    const BUDGET: usize = 30;
    let summarizer = Arc::new(SeqSummarizer::default());
    let extractor = Arc::new(ScriptedExtractor::default());
    let mut config = config();
    config.conversation.window_size = Some(WINDOW);
    config.conversation.summarize = true;
    config.facts.enabled = true;
    config.extract.enabled = true;
    config.extract.tags = vec!["auto".into()];
    config.inject.token_budget = Some(BUDGET);
    let build = |config: MemoryConfig| {
        Memory::builder(ctx.backend_arc())
            .config(config)
            .summarizer(summarizer.clone())
            .extractor(extractor.clone())
            .build()
            .must("build memory")
    };
    let memory = build(config.clone());
    let scope = ctx.scope();
    let first = conversation(ctx, scope).await;

    let mut summaries = 0;
    for i in 1..=20 {
        let context = memory
            .prepare(scope, &first.id, &user_line(i))
            .await
            .must("prepare");
        let persisted = 2 * (i as u64 - 1);
        let start = persisted.saturating_sub(WINDOW as u64) + 1;
        assert_eq!(
            seqs(&context.messages),
            (start..=persisted).collect::<Vec<_>>(),
            "turn {i}: the window is the last {WINDOW} messages"
        );
        if start > 1 {
            summaries += 1;
            assert_eq!(
                context.summary.as_deref(),
                Some(joined(1..=start - 1).as_str()),
                "turn {i}: the summary covers exactly what left the window"
            );
        } else {
            assert_eq!(
                context.summary, None,
                "turn {i}: nothing left the window yet"
            );
        }
        if let Some(block) = &context.user_memory {
            assert!(
                ApproxTokenCounter.count(block) <= BUDGET,
                "turn {i}: the user-memory block fits the budget: {block}"
            );
        }
        let receipt = memory
            .commit(scope, &first.id, turn(i))
            .await
            .must("commit");
        assert_eq!(receipt.append.appended.len(), 2);
        match receipt.extraction {
            ExtractionReport::Ran { messages, .. } => assert_eq!(messages, 2, "turn {i}"),
            other => panic!("turn {i}: extraction should run, got {other:?}"),
        }
    }
    // The summary was computed once per move of the window, and is reused, even by another
    // engine over the same backend (a restarted process).
    assert_eq!(summarizer.calls.load(Ordering::SeqCst), summaries);
    build(config.clone())
        .prepare(scope, &first.id, "")
        .await
        .must("prepare again");
    assert_eq!(
        summarizer.calls.load(Ordering::SeqCst),
        summaries + 1,
        "the last turn moved the window once more"
    );
    memory
        .prepare(scope, &first.id, "")
        .await
        .must("prepare unchanged");
    assert_eq!(summarizer.calls.load(Ordering::SeqCst), summaries + 1);

    // Four facts were confident enough; their source is the conversation.
    let stored = ctx
        .backend()
        .list_facts(scope, FactQuery::default())
        .await
        .must("list facts");
    let mut texts: Vec<&str> = stored.items.iter().map(|f| f.text.as_str()).collect();
    texts.sort_unstable();
    assert_eq!(
        texts,
        [
            "my favourite city is Lisbon",
            "my favourite colour is teal",
            "my favourite food is ramen",
            "my favourite pet is a cat named Miso",
        ]
    );
    for fact in &stored.items {
        assert_eq!(fact.tags, ["auto"]);
        let source = fact.source.as_ref().expect("a source");
        assert_eq!(source.conversation_id, first.id);
    }

    // A new conversation of the same subject sees the facts, trimmed to the budget by
    // dropping the lowest-scored first.
    let second = conversation(ctx, scope).await;
    let context = memory
        .prepare(scope, &second.id, "what is my favourite thing?")
        .await
        .must("prepare second");
    assert!(context.messages.is_empty());
    let block = context.user_memory.expect("facts are injected");
    assert!(ApproxTokenCounter.count(&block) <= BUDGET, "{block}");
    assert!(
        block.contains("my favourite colour is teal"),
        "the best fact survives the budget: {block}"
    );
    assert!(
        !context.facts.is_empty() && context.facts.len() < 4,
        "the budget drops some facts: {block}"
    );
    let kept: Vec<f32> = context.facts.iter().filter_map(|f| f.fact.score).collect();
    let dropped: Vec<f32> = stored
        .items
        .iter()
        .filter(|f| !context.facts.iter().any(|k| k.fact.id == f.id))
        .filter_map(|f| f.score)
        .collect();
    let lowest_kept = kept.iter().copied().fold(f32::INFINITY, f32::min);
    assert!(
        dropped.iter().all(|&d| d <= lowest_kept),
        "the lowest scores go first: kept {kept:?}, dropped {dropped:?}"
    );

    // Resending the whole history stores nothing and extracts nothing again.
    let history: Vec<Message> = (1..=20).flat_map(turn).collect();
    let receipt = memory
        .commit(scope, &first.id, history.clone())
        .await
        .must("resend");
    assert!(receipt.append.appended.is_empty());
    assert_eq!(receipt.append.duplicates.len(), 40);
    assert_eq!(receipt.extraction, ExtractionReport::Skipped);
    let seen = extractor.seen();
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(seen.len(), 40, "every message was extracted once");
    assert_eq!(unique.len(), 40);

    // A forged continuation (a rewritten past message) is rejected and writes nothing; an
    // honest one appends only its new suffix.
    let mut forged = history.clone();
    forged[4] = text("u3", Role::User, "turn 3: my favourite colour is red");
    forged.push(text("u21", Role::User, "turn 21"));
    memory
        .continue_with(scope, &first.id, forged, &ContinuationOptions::default())
        .await
        .must_be_invalid("forged continuation");
    let mut honest = history;
    honest.push(text("u21", Role::User, "turn 21"));
    let receipt = memory
        .continue_with(scope, &first.id, honest, &ContinuationOptions::default())
        .await
        .must("honest continuation");
    assert_eq!(receipt.append.appended.len(), 1);
    assert_eq!(receipt.append.last_seq, 41);
}

/// A conversation of another subject, or a missing one, is `NotFound` to `prepare` and
/// `commit`, whatever tiers are on.
pub async fn prepare_and_commit_stay_in_scope(ctx: &Ctx) {
    let memory = memory(ctx, MemoryConfig::default());
    let theirs = conversation(ctx, ctx.other_scope()).await;
    memory
        .prepare(ctx.scope(), &theirs.id, "hello")
        .await
        .must_be_not_found("prepare of another subject's conversation");
    memory
        .commit(ctx.scope(), &theirs.id, turn(1))
        .await
        .must_be_not_found("commit into another subject's conversation");
    let missing = ConversationId::new("no-such-conversation").expect("valid id");
    memory
        .prepare(ctx.scope(), &missing, "hello")
        .await
        .must_be_not_found("prepare of a missing conversation");
    let untouched = ctx
        .backend()
        .get_conversation(ctx.other_scope(), &theirs.id)
        .await
        .must("get");
    assert_eq!(untouched.last_seq, 0);
}
