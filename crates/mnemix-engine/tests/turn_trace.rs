//! What one turn asks of the store, read from the front layer's `tracing` spans: which calls,
//! and how many are in flight at once.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use mnemix_core::embed::{Embedder, HashingEmbedder};
use mnemix_core::{
    ConversationId, InMemoryBackend, MemoryError, Message, Result, Scope, StoredMessage, VectorId,
    VectorRecord, VectorStore as _,
};
use mnemix_engine::config::MemoryConfig;
use mnemix_engine::{CommitReceipt, ExtractedFact, FactExtractor, Memory, Summarizer};
use tracing::span;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// The target of the front layer's spans: one per call reaching a backend.
const FRONT: &str = "mnemix_core::front";

#[derive(Debug, Default)]
struct Calls {
    names: Vec<&'static str>,
}

impl Calls {
    fn count(&self, name: &str) -> usize {
        self.names.iter().filter(|n| **n == name).count()
    }
}

/// Records the name of every front-layer span as it opens.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Calls>>);

impl Recorder {
    fn take(&self) -> Calls {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn seen(&self, name: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .count(name)
            > 0
    }

    /// Yields until a call named `name` has been made; an error if it never is, which is what
    /// happens when the caller waits for this future before making that call.
    async fn wait_for(&self, name: &str) -> Result<()> {
        for _ in 0..1_000 {
            if self.seen(name) {
                return Ok(());
            }
            tokio::task::yield_now().await;
        }
        Err(MemoryError::invalid(format!(
            "`{name}` was not called while this step ran"
        )))
    }
}

const QUERY: &str = "which hotel near the station";
const SAID: &str = "my flight to Lisbon leaves on Friday";

/// Embeds a batch holding `trigger` only once a call named `after` has been made.
struct WaitingEmbedder {
    recorder: Recorder,
    trigger: &'static str,
    after: &'static str,
    inner: HashingEmbedder,
}

#[async_trait]
impl Embedder for WaitingEmbedder {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn dims(&self) -> usize {
        self.inner.dims()
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        if texts.iter().any(|t| t == self.trigger) {
            self.recorder.wait_for(self.after).await?;
        }
        Ok(texts.iter().map(|t| self.inner.embed_one(t)).collect())
    }
}

/// Proposes one fact from whatever it is given.
struct OneFact;

#[async_trait]
impl FactExtractor for OneFact {
    async fn extract(
        &self,
        _: &Scope,
        _: &ConversationId,
        messages: &[StoredMessage],
    ) -> Result<Vec<ExtractedFact>> {
        Ok(vec![ExtractedFact::new(
            format!("the user sent {} messages", messages.len()),
            0.9,
        )])
    }
}

/// Summarises by counting.
struct CountingSummarizer;

#[async_trait]
impl Summarizer for CountingSummarizer {
    async fn summarize(&self, _: Option<&str>, messages: &[StoredMessage]) -> Result<String> {
        Ok(format!("{} earlier messages", messages.len()))
    }
}

impl<S> Layer<S> for Recorder
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &span::Attributes<'_>, _: &span::Id, _: Context<'_, S>) {
        if attrs.metadata().target() == FRONT {
            let mut calls = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            calls.names.push(attrs.metadata().name());
        }
    }
}

/// A conversation of user-1 holding six messages, two of them about a hotel near the station
/// (seqs 1 and 3); returns its scope and id.
async fn six_messages_said(memory: &Memory) -> (Scope, ConversationId) {
    let scope = Scope::for_subject("user-1").expect("scope");
    let (thread, _) = memory
        .auto_conversation(&scope, "trace", 0)
        .await
        .expect("conversation");
    let said = [
        "the hotel near the central station has a rooftop pool",
        "quarterly tax filing is due in April",
        "the hotel near the station serves breakfast at seven",
        "tomorrow it will rain in the mountains",
        "what about dinner",
        "pasta then",
    ];
    let messages: Vec<Message> = said.iter().map(|s| Message::user(*s)).collect();
    memory
        .commit(&scope, &thread.id, messages)
        .await
        .expect("commit");
    (scope, thread.id)
}

#[tokio::test]
async fn a_turn_reads_at_once_and_recalls_from_what_its_first_round_read() {
    let recorder = Recorder::default();
    let _trace =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(recorder.clone()));
    let config = MemoryConfig::from_yaml(
        "conversation: { enabled: true, window_size: 2, summarize: true }
semantic_recall: { enabled: true, limit: 3, threshold: 0.0 }
facts: { enabled: true }
working_memory: { enabled: true, scope: user }",
    )
    .expect("config");
    let memory = Memory::builder(Arc::new(InMemoryBackend::new()))
        .config(config)
        // The query is embedded only once working memory was asked for: the first round's
        // reads are made at once, or prepare fails.
        .embedder(Arc::new(WaitingEmbedder {
            recorder: recorder.clone(),
            trigger: QUERY,
            after: "get_working_memory",
            inner: HashingEmbedder::new(384),
        }))
        .summarizer(Arc::new(CountingSummarizer))
        .build()
        .expect("engine");
    let (scope, thread) = six_messages_said(&memory).await;
    recorder.take();

    let context = memory
        .prepare(&scope, &thread, QUERY)
        .await
        .expect("prepare: each round's reads are made at once");
    let calls = recorder.take();
    assert_eq!(context.recalled.len(), 3, "{context:?}");
    assert_eq!(context.summary.as_deref(), Some("4 earlier messages"));
    // First the conversation, the window, the messages recall looks for the question's words
    // in, working memory, and the query's searches (messages and facts); then the summary
    // (reading what left the window and storing it). The recalled messages are among what the
    // first round read: no call loads them. Nothing else, nothing twice.
    for (name, times) in [
        ("get_conversation", 1),
        ("load", 3),
        ("get_working_memory", 1),
        ("update_conversation", 1),
        ("search", 1),
        ("recall", 1),
        ("load_seqs", 0),
    ] {
        assert_eq!(calls.count(name), times, "{name} in {:?}", calls.names);
    }
    assert_eq!(calls.names.len(), 8, "{:?}", calls.names);
    // The searches need the query's embedding, not the window: they are made before the
    // second round's first call (the summary's read of what left the window).
    let position = |name: &str| calls.names.iter().position(|n| *n == name);
    let second_round = calls
        .names
        .iter()
        .enumerate()
        .filter(|(_, n)| **n == "load")
        .nth(2)
        .map(|(i, _)| i);
    for name in ["search", "recall"] {
        assert!(position(name) < second_round, "{name} in {:?}", calls.names);
    }
}

#[tokio::test]
async fn a_commit_embeds_and_extracts_at_once() {
    let recorder = Recorder::default();
    let _trace =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(recorder.clone()));
    let config = MemoryConfig::from_yaml(
        "semantic_recall: { enabled: true }
facts: { enabled: true }
extract: { enabled: true }",
    )
    .expect("config");
    let memory = Memory::builder(Arc::new(InMemoryBackend::new()))
        .config(config)
        // The messages are embedded only once the extracted fact was stored: embedding and
        // extraction run at once, or the embedding fails.
        .embedder(Arc::new(WaitingEmbedder {
            recorder: recorder.clone(),
            trigger: SAID,
            after: "remember",
            inner: HashingEmbedder::new(384),
        }))
        .extractor(Arc::new(OneFact))
        .build()
        .expect("engine");
    let scope = Scope::for_subject("user-1").expect("scope");
    let (thread, _) = memory
        .auto_conversation(&scope, "trace", 0)
        .await
        .expect("conversation");
    let receipt: CommitReceipt = memory
        .commit(&scope, &thread.id, vec![Message::user(SAID)])
        .await
        .expect("commit");
    assert_eq!(
        receipt.embedding,
        mnemix_engine::EmbeddingReport::Embedded { messages: 1 },
        "{:?}",
        recorder.take()
    );
    assert!(
        matches!(&receipt.extraction, mnemix_engine::ExtractionReport::Ran { stored, .. } if stored.len() == 1),
        "{receipt:?}"
    );
}

#[tokio::test]
async fn a_commit_embeds_what_it_appended_without_reading_it_back() {
    let recorder = Recorder::default();
    let _trace =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(recorder.clone()));
    let config = MemoryConfig::from_yaml("semantic_recall: { enabled: true }").expect("config");
    let memory = Memory::builder(Arc::new(InMemoryBackend::new()))
        .config(config)
        .build()
        .expect("engine");
    let (scope, thread) = six_messages_said(&memory).await;
    recorder.take();
    let receipt = memory
        .commit(
            &scope,
            &thread,
            vec![Message::user(SAID), Message::assistant("have a good trip")],
        )
        .await
        .expect("commit");
    let calls = recorder.take();
    assert_eq!(
        receipt.embedding,
        mnemix_engine::EmbeddingReport::Embedded { messages: 2 },
        "{calls:?}"
    );
    // The embedded cursor is read beside the append and stands just before the new messages:
    // they are embedded as sent, with no read of what follows the cursor. What is read is the
    // message said before them and its vector, which the new vectors carry a share of.
    assert_eq!(
        calls.names,
        [
            "append",
            "cursor",
            "load",
            "get_vector",
            "upsert_vectors",
            "advance_cursor"
        ],
        "{calls:?}"
    );
    let vectors = memory
        .backend()
        .search(
            &scope,
            mnemix_engine::MESSAGE_COLLECTION,
            mnemix_core::VectorQuery::new(HashingEmbedder::new(384).embed_one(SAID), 1),
        )
        .await
        .expect("search");
    assert_eq!(vectors[0].record.text.as_deref(), Some(SAID));
    assert_eq!(vectors[0].record.metadata["seq"], 7, "stored at its seq");
}

/// Embeds like the hashing embedder; the first time it embeds the query, it first stores
/// `late` vectors nearest to it in the conversation, at seqs past anything the window read can
/// have seen: messages appended by another writer while the turn was prepared.
struct LateWriter {
    store: Arc<InMemoryBackend>,
    target: Mutex<Option<(Scope, ConversationId, usize)>>,
    inner: HashingEmbedder,
}

#[async_trait]
impl Embedder for LateWriter {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn dims(&self) -> usize {
        self.inner.dims()
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let vectors: Vec<Vec<f32>> = texts.iter().map(|t| self.inner.embed_one(t)).collect();
        let target = self
            .target
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take_if(|_| texts.iter().any(|t| t == QUERY));
        if let Some((scope, conversation, late)) = target {
            let records = (0..late)
                .map(|i| {
                    let seq = 100 + i;
                    let id = VectorId::new(format!("late-{i}")).expect("an id");
                    let mut record = VectorRecord::new(id, vectors[0].clone());
                    record.conversation_id = Some(conversation.clone());
                    record.metadata = serde_json::json!({
                        "conversation_id": conversation.as_str(),
                        "seq": seq,
                    })
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
                    record
                })
                .collect();
            self.store
                .upsert_vectors(&scope, mnemix_engine::MESSAGE_COLLECTION, records)
                .await?;
        }
        Ok(vectors)
    }
}

#[tokio::test]
async fn recall_searches_before_the_window_when_later_messages_filled_the_first_search() {
    let recorder = Recorder::default();
    let _trace =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(recorder.clone()));
    let config = MemoryConfig::from_yaml(
        "conversation: { enabled: true, window_size: 2 }
semantic_recall: { enabled: true, limit: 2, candidates: 2, threshold: 0.0 }",
    )
    .expect("config");
    let store = Arc::new(InMemoryBackend::new());
    let embedder = Arc::new(LateWriter {
        store: store.clone(),
        target: Mutex::new(None),
        inner: HashingEmbedder::new(384),
    });
    let memory = Memory::builder(store)
        .config(config)
        .embedder(embedder.clone())
        .build()
        .expect("engine");
    let (scope, thread) = six_messages_said(&memory).await;
    // As many late vectors as the first search asks for (candidates + window): it finds only them.
    *embedder
        .target
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = Some((scope.clone(), thread.clone(), 4));
    recorder.take();

    let context = memory
        .prepare(&scope, &thread, QUERY)
        .await
        .expect("prepare");
    let recalled: Vec<u64> = context.recalled.iter().map(|r| r.message.seq).collect();
    assert_eq!(recalled, [1, 3], "{context:?}");
    assert_eq!(recorder.take().count("search"), 2);
}
