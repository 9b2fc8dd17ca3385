//! Semantic recall: merge strategies, who spoke and when, lexical fusion and candidates, word
//! forms, replies found by what they answered, and a failing embedder that leaves the turn
//! committed.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use mnemix_core::embed::{Embedder, HashingEmbedder};
use mnemix_core::{Message, NewFact, RememberOptions, Result, Role, Timestamp};
use mnemix_engine::config::{MemoryConfig, MergeStrategy};
use mnemix_engine::{EmbeddingReport, Memory, MessageVerdict, RecalledMessage, MESSAGE_COLLECTION};
use serde_json::json;

use crate::support::{conversation, text, ResultExt};
use crate::Ctx;

use super::{config, memory, memory_embedding, seqs, ScriptedEmbedder};

/// The config these scenarios start from: semantic recall on, behind a window of one message
/// (every older message is recall's to find).
fn recall_config() -> MemoryConfig {
    let mut config = config();
    config.conversation.window_size = Some(1);
    config.semantic_recall.enabled = true;
    config
}

/// The seqs of the recalled messages, best first.
fn recalled_seqs(recalled: &[RecalledMessage]) -> Vec<u64> {
    recalled.iter().map(|r| r.message.seq).collect()
}

/// An embedder that fails on demand.
struct FlakyEmbedder {
    inner: HashingEmbedder,
    down: AtomicBool,
}

#[async_trait]
impl Embedder for FlakyEmbedder {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn dims(&self) -> usize {
        self.inner.dims()
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        if self.down.load(Ordering::SeqCst) {
            return Err(mnemix_core::MemoryError::model(
                "embedder",
                "503 Service Unavailable",
            ));
        }
        self.inner.embed(texts).await
    }
}

/// An embedder that fails leaves the turn committed: the failure is reported and the next
/// commit embeds what was missed with its own messages, so semantic recall finds it.
pub async fn failing_embedder_leaves_the_turn_committed(ctx: &Ctx) {
    let embedder = Arc::new(FlakyEmbedder {
        inner: HashingEmbedder::new(384),
        down: AtomicBool::new(true),
    });
    let errors = Arc::new(AtomicUsize::new(0));
    let mut config = recall_config();
    config.semantic_recall.threshold = 0.3;
    // Each message embedded alone: the threshold then admits the hotel message only, not the
    // reply that would carry it.
    config.semantic_recall.context_weight = 0.0;
    let memory = Memory::builder(ctx.backend_arc())
        .config(config)
        .embedder(embedder.clone())
        .on_error({
            let errors = errors.clone();
            move |_, _, _| {
                errors.fetch_add(1, Ordering::SeqCst);
            }
        })
        .build()
        .must("build");
    let c = conversation(ctx, ctx.scope()).await;
    let said = vec![
        text(
            "m0",
            Role::User,
            "the hotel near the station has a rooftop pool",
        ),
        text("m1", Role::Assistant, "noted"),
    ];
    let receipt = memory
        .commit(ctx.scope(), &c.id, said)
        .await
        .must("an embedder failure never fails the commit");
    assert!(
        matches!(&receipt.embedding, EmbeddingReport::Failed { error } if error.contains("503")),
        "{receipt:?}"
    );
    assert_eq!(errors.load(Ordering::SeqCst), 1);
    assert_eq!(receipt.append.last_seq, 2, "the turn is committed");

    embedder.down.store(false, Ordering::SeqCst);
    let receipt = memory
        .commit(
            ctx.scope(),
            &c.id,
            vec![text("m2", Role::User, "thanks, that is all")],
        )
        .await
        .must("next commit");
    assert_eq!(
        receipt.embedding,
        EmbeddingReport::Embedded { messages: 3 },
        "the backlog with the new message"
    );
    let context = memory
        .prepare(ctx.scope(), &c.id, "a hotel with a pool near the station")
        .await
        .must("prepare");
    let recalled = recalled_seqs(&context.recalled);
    assert_eq!(recalled, [1], "the backlog was embedded and is recalled");
}

/// Older messages similar to the input come back, never one from the window or another
/// conversation, merged by each strategy; commits embed each message once.
pub async fn semantic_recall_merges_older_messages_by_strategy(ctx: &Ctx) {
    let mut config = config();
    config.conversation.window_size = Some(2);
    config.semantic_recall.enabled = true;
    config.semantic_recall.limit = 2;
    config.semantic_recall.threshold = 0.3;
    let memory = memory(ctx, config.clone());
    let c = conversation(ctx, ctx.scope()).await;
    let said = [
        "the hotel near the central station has a rooftop pool",
        "quarterly tax filing is due in April",
        "the hotel near the station serves breakfast at seven",
        "tomorrow it will rain in the mountains",
        "what about dinner",
        "pasta then",
    ];
    let messages: Vec<Message> = said
        .iter()
        .enumerate()
        .map(|(i, s)| text(&format!("m{i}"), Role::User, s))
        .collect();
    let receipt = memory
        .commit(ctx.scope(), &c.id, messages.clone())
        .await
        .must("commit");
    assert_eq!(receipt.embedding, EmbeddingReport::Embedded { messages: 6 });
    let receipt = memory
        .commit(ctx.scope(), &c.id, messages)
        .await
        .must("recommit");
    assert_eq!(
        receipt.embedding,
        EmbeddingReport::Skipped,
        "nothing is embedded twice"
    );

    // Another conversation's hotel talk is never recalled here.
    let other = conversation(ctx, ctx.scope()).await;
    memory
        .commit(
            ctx.scope(),
            &other.id,
            vec![text(
                "x0",
                Role::User,
                "the hotel near the station is quiet",
            )],
        )
        .await
        .must("commit other");

    let query = "which hotel near the station";
    let context = memory
        .prepare(ctx.scope(), &c.id, query)
        .await
        .must("prepare");
    let recalled: BTreeSet<u64> = context.recalled.iter().map(|r| r.message.seq).collect();
    assert_eq!(recalled, BTreeSet::from([1, 3]), "{:?}", context.recalled);
    assert!(context.recalled.iter().all(|r| r.score >= 0.3));
    assert_eq!(
        seqs(&context.messages),
        [5, 6, 1, 3],
        "append is the default"
    );

    for (merge, expected) in [
        (MergeStrategy::Prepend, [1, 3, 5, 6]),
        (MergeStrategy::Append, [5, 6, 1, 3]),
        (MergeStrategy::Interleave, [1, 5, 3, 6]),
    ] {
        let mut config = config.clone();
        config.semantic_recall.merge = merge;
        let context = self::memory(ctx, config)
            .prepare(ctx.scope(), &c.id, query)
            .await
            .must("prepare");
        assert_eq!(seqs(&context.messages), expected, "{merge:?}");
    }

    // The message vectors live in the namespace's message collection, one per text message.
    let hits = ctx
        .backend()
        .search(
            ctx.scope(),
            MESSAGE_COLLECTION,
            mnemix_core::VectorQuery::new(HashingEmbedder::new(384).embed_one(query), 20),
        )
        .await
        .must("search");
    assert_eq!(hits.len(), 7);
}

/// A message is embedded with its speaker and day (`embedded_text`): a question naming the
/// person finds what they said though the message never names them, and the stored message and
/// its record's text stay as sent.
pub async fn semantic_recall_knows_who_spoke_and_when(ctx: &Ctx) {
    let mut config = recall_config();
    config.semantic_recall.limit = 1;
    config.semantic_recall.threshold = 0.0;
    let memory = memory(ctx, config);
    let c = conversation(ctx, ctx.scope()).await;
    let mut said = Vec::new();
    for (i, (name, body)) in [
        ("Caroline", "I painted a sunrise over the lake last weekend"),
        ("Melanie", "I painted a sunset over the sea last weekend"),
        ("Melanie", "see you soon"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut message = text(&format!("m{i}"), Role::User, body);
        message.created_at = Timestamp::from_utc(2023, 5, 8, 13, 56);
        message.metadata.insert("name".into(), json!(name));
        said.push(message);
    }
    memory.commit(ctx.scope(), &c.id, said).await.must("commit");
    for (question, seq) in [
        ("What did Caroline paint?", 1),
        ("What did Melanie paint?", 2),
    ] {
        let context = memory
            .prepare(ctx.scope(), &c.id, question)
            .await
            .must("prepare");
        let recalled = recalled_seqs(&context.recalled);
        assert_eq!(recalled, [seq], "{question}: {:?}", context.recalled);
    }
    let hits = ctx
        .backend()
        .search(
            ctx.scope(),
            MESSAGE_COLLECTION,
            mnemix_core::VectorQuery::new(HashingEmbedder::new(384).embed_one("Caroline"), 1),
        )
        .await
        .must("search");
    assert_eq!(
        hits[0].record.text.as_deref(),
        Some("I painted a sunrise over the lake last weekend")
    );
}

/// Message recall is hybrid: among the nearest `candidates`, a message holding the question's
/// rare word outranks a nearer one holding none of its words; with `candidates` at `limit`
/// recall is the embedding's order alone.
pub async fn semantic_recall_fuses_lexical_relevance(ctx: &Ctx) {
    let embedder = Arc::new(ScriptedEmbedder {
        rules: vec![
            ("Zanzibar trip?", [1.0, 0.0, 0.0, 0.0]),
            ("beach", [0.9, 0.436, 0.0, 0.0]),
            ("flight", [0.5, 0.0, 0.866, 0.0]),
        ],
    });
    let mut config = recall_config();
    config.semantic_recall.limit = 1;
    // Each message alone: the words' own relevance, not what a neighbour carries.
    config.semantic_recall.context_weight = 0.0;
    let c = conversation(ctx, ctx.scope()).await;
    let said = vec![
        text("m0", Role::User, "a whole week at a sunny beach"),
        text("m1", Role::User, "the Zanzibar flight was long"),
        text("m2", Role::User, "bye"),
    ];
    let memory = |config: MemoryConfig| memory_embedding(ctx, config, &embedder);
    memory(config.clone())
        .commit(ctx.scope(), &c.id, said)
        .await
        .must("commit");
    for (candidates, seq) in [(50, 2), (1, 1)] {
        let mut config = config.clone();
        config.semantic_recall.candidates = candidates;
        let context = memory(config)
            .prepare(ctx.scope(), &c.id, "When was the Zanzibar trip?")
            .await
            .must("prepare");
        let recalled = recalled_seqs(&context.recalled);
        assert_eq!(
            recalled,
            [seq],
            "candidates {candidates}: {:?}",
            context.recalled
        );
        assert_eq!(
            context.embedder.as_deref(),
            Some("scripted"),
            "the embedder that ran"
        );
    }
    config.semantic_recall.enabled = false;
    let context = memory(config)
        .prepare(ctx.scope(), &c.id, "When was the Zanzibar trip?")
        .await
        .must("prepare");
    assert_eq!(context.embedder, None, "no tier embedded the input");
}

/// A question about a trip, and a conversation where one message holds its rare word but is
/// orthogonal to it, and three are ever less near holding none of its words; recall keeps 2 of
/// 3 candidates, each message alone (no context weight).
fn trip_by_words_or_nearness() -> (Arc<ScriptedEmbedder>, MemoryConfig, Vec<Message>) {
    let embedder = Arc::new(ScriptedEmbedder {
        rules: vec![
            ("trip?", [1.0, 0.0, 0.0, 0.0]),
            ("beach", [0.9, 0.436, 0.0, 0.0]),
            ("park", [0.6, 0.8, 0.0, 0.0]),
            ("cafe", [0.3, 0.954, 0.0, 0.0]),
        ],
    });
    let mut config = recall_config();
    config.semantic_recall.limit = 2;
    config.semantic_recall.candidates = 3;
    config.semantic_recall.context_weight = 0.0;
    let said = vec![
        // Orthogonal to the question: never among the nearest.
        text("m0", Role::User, "the Zanzibar flight was long"),
        text("m1", Role::User, "a whole week at a sunny beach"),
        text("m2", Role::User, "a long walk in the park"),
        text("m3", Role::User, "lunch at the cafe"),
        text("m4", Role::User, "bye"),
    ];
    (embedder, config, said)
}

/// Message recall pools two rankings: a message holding the question's rare word is recalled
/// even when its vector is not among the nearest `candidates`; under a threshold only the
/// nearest that similar are candidates, and with `candidates` at `limit` recall is the
/// embedding's order alone.
pub async fn semantic_recall_proposes_messages_by_their_words(ctx: &Ctx) {
    let (embedder, config, said) = trip_by_words_or_nearness();
    let c = conversation(ctx, ctx.scope()).await;
    let memory = |config: MemoryConfig| memory_embedding(ctx, config, &embedder);
    memory(config.clone())
        .commit(ctx.scope(), &c.id, said)
        .await
        .must("commit");
    let cases = [
        ("the two rankings pooled", 3, 0.0, vec![2, 1]),
        ("a threshold", 3, 0.1, vec![2, 3]),
        ("candidates = limit", 2, 0.0, vec![2, 3]),
    ];
    for (case, candidates, threshold, expected) in cases {
        let mut config = config.clone();
        config.semantic_recall.candidates = candidates;
        config.semantic_recall.threshold = threshold;
        let context = memory(config)
            .prepare(ctx.scope(), &c.id, "When was the Zanzibar trip?")
            .await
            .must("prepare");
        let recalled = recalled_seqs(&context.recalled);
        assert_eq!(recalled, expected, "{case}: {:?}", context.recalled);
        let by_words = context.recalled.iter().find(|r| r.message.seq == 1);
        assert!(
            by_words.is_none_or(|r| r.score == 0.0),
            "{case}: a message found by its words alone has no similarity: {by_words:?}"
        );
    }
}

/// `explain` builds the context `prepare` builds, and says why: the messages it marks recalled
/// are the context's recalled ones, in order, with the signals that ranked them (the nearest by
/// its similarity and rank, the one found by its words by its word rank); those ranked below
/// the limit are marked so; the facts it marks injected are the context's facts.
pub async fn explain_agrees_with_recall_and_says_why(ctx: &Ctx) {
    let (embedder, mut config, said) = trip_by_words_or_nearness();
    config.facts.enabled = true;
    let c = conversation(ctx, ctx.scope()).await;
    let memory = memory_embedding(ctx, config, &embedder);
    memory.commit(ctx.scope(), &c.id, said).await.must("commit");
    for fact in [
        "the Zanzibar trip was in May",
        "a trip to Zanzibar costs a lot",
    ] {
        ctx.backend()
            .remember(ctx.scope(), NewFact::new(fact), RememberOptions::default())
            .await
            .must("remember");
    }
    let question = "When was the Zanzibar trip?";
    let explained = memory
        .explain(ctx.scope(), &c.id, question)
        .await
        .must("explain");
    let prepared = memory
        .prepare(ctx.scope(), &c.id, question)
        .await
        .must("prepare");
    assert_eq!(explained.context, prepared, "the context prepare builds");
    let why = &explained.recall;
    assert_eq!(why.window_start, 5, "the window is the last message");
    let recalled: Vec<u64> = why
        .messages
        .iter()
        .filter(|m| m.verdict == MessageVerdict::Recalled)
        .map(|m| m.seq)
        .collect();
    assert_eq!(recalled, recalled_seqs(&prepared.recalled), "{why:?}");
    assert_eq!(
        recalled,
        [2, 1],
        "the nearest, then the one holding the word"
    );
    let candidate = |seq: u64| {
        why.messages
            .iter()
            .find(|m| m.seq == seq && m.verdict != MessageVerdict::InWindow)
            .unwrap_or_else(|| panic!("seq {seq} weighed: {why:?}"))
    };
    let nearest = candidate(2);
    assert_eq!(nearest.nearness_rank, Some(1), "{nearest:?}");
    assert!(
        nearest.similarity.is_some_and(|s| (s - 0.9).abs() < 0.01),
        "{nearest:?}"
    );
    assert!(nearest.fused.is_some(), "hybrid recall fuses: {nearest:?}");
    let by_words = candidate(1);
    assert_eq!(by_words.word_rank, Some(1), "{by_words:?}");
    assert!(
        by_words.own_relevance.is_some_and(|r| r > 0.0),
        "{by_words:?}"
    );
    let past_limit: Vec<u64> = why
        .messages
        .iter()
        .filter(|m| m.verdict == MessageVerdict::PastLimit)
        .map(|m| m.seq)
        .collect();
    assert!(
        past_limit.contains(&3),
        "the park, nearer than the cafe, ranked below the limit: {why:?}"
    );
    for m in &why.messages {
        assert!(
            m.verdict != MessageVerdict::InWindow || m.seq >= why.window_start,
            "only the window's messages are in the window: {m:?}"
        );
    }
    let injected: Vec<_> = why
        .facts
        .iter()
        .filter(|f| f.injected)
        .map(|f| &f.id)
        .collect();
    let in_context: Vec<_> = prepared.facts.iter().map(|f| &f.fact.id).collect();
    assert_eq!(injected, in_context, "{why:?}");
    assert_eq!(why.facts.len(), 2, "both facts recalled: {why:?}");
}

/// A message carries `context_weight` of the lexical relevance of the messages next to it, each
/// way, fading (as its vector carries the vector before it): a reply holding none of the
/// question's words, and nowhere near it, is recalled by the words of what it answered, and
/// the message just before the one holding the word rises first; with a weight of 0 neither.
pub async fn semantic_recall_finds_a_reply_by_the_words_it_answered(ctx: &Ctx) {
    let embedder = Arc::new(ScriptedEmbedder {
        rules: vec![
            ("Zanzibar?", [1.0, 0.0, 0.0, 0.0]),
            ("beach", [0.9, 0.436, 0.0, 0.0]),
            ("park", [0.6, 0.8, 0.0, 0.0]),
            ("cafe", [0.3, 0.954, 0.0, 0.0]),
            // Turned away from the question: never among the nearest.
            ("Zanzibar trip", [-1.0, 0.0, 0.0, 0.0]),
            ("loved", [-0.8, 0.0, 0.6, 0.0]),
        ],
    });
    let mut config = recall_config();
    config.semantic_recall.limit = 5;
    config.semantic_recall.candidates = 6;
    let c = conversation(ctx, ctx.scope()).await;
    let said = vec![
        text("m0", Role::User, "the beach was crowded"),
        text("m1", Role::User, "the park was quiet"),
        text("m2", Role::User, "the cafe was nice"),
        text("m3", Role::User, "what about the Zanzibar trip"),
        text("m4", Role::Assistant, "loved every minute"),
        text("m5", Role::User, "bye"),
    ];
    memory_embedding(ctx, config.clone(), &embedder)
        .commit(ctx.scope(), &c.id, said)
        .await
        .must("commit");
    let default_weight = MemoryConfig::default().semantic_recall.context_weight;
    let cases: [(f32, &[u64]); 2] = [(default_weight, &[3, 1, 2, 4, 5]), (0.0, &[1, 4, 2, 3])];
    for (weight, expected) in cases {
        config.semantic_recall.context_weight = weight;
        let recalled = memory_embedding(ctx, config.clone(), &embedder)
            .prepare(ctx.scope(), &c.id, "Zanzibar?")
            .await
            .must("prepare")
            .recalled;
        let seqs = recalled_seqs(&recalled);
        assert_eq!(seqs, expected, "context weight {weight}: {recalled:?}");
    }
}

/// Recall reads the conversation's messages for the question's words in the caller's scope
/// only: another subject's conversation of the same id, holding the question's rare word, is
/// never recalled, by words or by vector.
pub async fn semantic_recall_reads_only_its_scope(ctx: &Ctx) {
    let memory = memory(ctx, recall_config());
    let id = mnemix_core::ConversationId::new("same-id-in-two-scopes").expect("an id");
    let theirs = vec![
        text("t0", Role::User, "the Zanzibar vault code is 4711"),
        text("t1", Role::User, "bye"),
    ];
    let ours = vec![
        text("o0", Role::User, "the weather was mild"),
        text("o1", Role::User, "lunch was good"),
        text("o2", Role::User, "bye"),
    ];
    for (scope, said) in [(ctx.other_scope(), theirs), (ctx.scope(), ours)] {
        let new = mnemix_core::NewConversation::default().with_id(id.clone());
        ctx.backend()
            .create_conversation(scope, new)
            .await
            .must("create conversation");
        memory.commit(scope, &id, said).await.must("commit");
    }
    let context = memory
        .prepare(ctx.scope(), &id, "What is the Zanzibar vault code?")
        .await
        .must("prepare");
    let mut recalled: Vec<String> = context
        .recalled
        .iter()
        .map(|r| r.message.message.text())
        .collect();
    recalled.sort();
    assert_eq!(
        recalled,
        ["lunch was good", "the weather was mild"],
        "only this scope's older messages, in any order"
    );
}

/// By default the lexical side of message recall reads English: a message holding another form
/// of the question's word ("painted" for "paint") is recalled over a nearer one holding only
/// the question's stop words; matching words as written (`language: null`), neither matches and
/// the nearer wins.
pub async fn semantic_recall_matches_word_forms_of_the_question(ctx: &Ctx) {
    let embedder = Arc::new(ScriptedEmbedder {
        rules: vec![
            ("Caroline", [1.0, 0.0, 0.0, 0.0]),
            ("swimming", [0.9, 0.436, 0.0, 0.0]),
            ("lake", [0.5, 0.0, 0.866, 0.0]),
        ],
    });
    let c = conversation(ctx, ctx.scope()).await;
    let said = vec![
        text("m0", Role::User, "what did you do? went swimming"),
        text("m1", Role::User, "she painted a lake at dawn"),
        text("m2", Role::User, "bye"),
    ];
    let mut config = recall_config();
    config.semantic_recall.limit = 1;
    // Each message alone: the words' own relevance, not what a neighbour carries.
    config.semantic_recall.context_weight = 0.0;
    memory_embedding(ctx, config.clone(), &embedder)
        .commit(ctx.scope(), &c.id, said)
        .await
        .must("commit");
    let default_language = MemoryConfig::default().semantic_recall.language;
    for (language, seq) in [(default_language, 2), (None, 1)] {
        config.semantic_recall.language = language;
        let recalled = memory_embedding(ctx, config.clone(), &embedder)
            .prepare(ctx.scope(), &c.id, "What did Caroline paint?")
            .await
            .must("prepare")
            .recalled;
        let seqs = recalled_seqs(&recalled);
        assert_eq!(seqs, [seq], "language {language:?}: {recalled:?}");
    }
}

/// By default a message's vector carries the conversation before it (`context_weight`), across
/// commits: a reply that names nothing of the question is recalled by what it answered; with a
/// weight of 0 each message is embedded alone and a message nearer on its own wins.
pub async fn semantic_recall_finds_a_reply_by_what_it_answered(ctx: &Ctx) {
    let embedder = Arc::new(ScriptedEmbedder {
        rules: vec![
            ("Paris", [1.0, 0.0, 0.0, 0.0]),
            ("loved", [0.0, 1.0, 0.0, 0.0]),
            ("museum", [0.1, 0.0, 0.995, 0.0]),
        ],
    });
    let default_weight = MemoryConfig::default().semantic_recall.context_weight;
    for (weight, expected) in [(default_weight, [1, 2]), (0.0, [1, 3])] {
        let mut config = recall_config();
        config.semantic_recall.limit = 2;
        config.semantic_recall.context_weight = weight;
        let memory = Memory::builder(ctx.backend_arc())
            .config(config)
            .embedder(embedder.clone())
            .build()
            .must("build memory");
        let c = conversation(ctx, ctx.scope()).await;
        // One commit per message: the context crosses commits through the stored vectors.
        for message in [
            text("m0", Role::User, "Did you go to Paris?"),
            text("m1", Role::Assistant, "yes, loved every minute"),
            text("m2", Role::User, "the museum was closed though"),
            text("m3", Role::Assistant, "bye"),
        ] {
            memory
                .commit(ctx.scope(), &c.id, vec![message])
                .await
                .must("commit");
        }
        let context = memory
            .prepare(ctx.scope(), &c.id, "Paris?")
            .await
            .must("prepare");
        let mut recalled = recalled_seqs(&context.recalled);
        recalled.sort_unstable();
        assert_eq!(
            recalled, expected,
            "context weight {weight}: {:?}",
            context.recalled
        );
    }
}
