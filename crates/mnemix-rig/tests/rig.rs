//! Our scenarios through rig's traits, on SQLite, PostgreSQL and Redis.
//!
//! rig-core 0.44 ships no conformance check for its stores (its `test_utils` check provider
//! wires, not memory), so these state what rig's `ConversationMemory`, `VectorStoreIndex` and
//! `InsertDocuments` promise, what our stores add (atomic turns, tenant isolation), and compare
//! our vector index with rig's own `InMemoryVectorStore` on the same documents.
//!
//! A server that cannot be reached is a named skip, or a failure when `MNEMIX_TEST_REQUIRE`
//! names it (`postgres`, `redis`).

use std::collections::BTreeSet;
use std::sync::Arc;

use mnemix::embed::HashingEmbedder;
use mnemix::{Message as OurMessage, Part, Role, Store, VectorSearch};
use mnemix_conformance::{is_required, SetupError};
use mnemix_rig::{embedding_model, ConversationHistory, VectorIndex};
use mnemix_testkit::services::{locate, Service};
use rig_core::completion::message::{
    AssistantContent, AssistantMessage, CallId, Message, Text, ToolName, ToolResultContent,
    UserContent,
};
use rig_core::embeddings::EmbeddingsBuilder;
use rig_core::memory::ConversationMemory;
use rig_core::vector_store::in_memory_store::InMemoryVectorStore;
use rig_core::vector_store::request::{Filter, SearchFilter, VectorSearchRequest};
use rig_core::vector_store::{VectorStoreError, VectorStoreIndex};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// A backend under test: its store and what keeps its files alive.
struct Backend {
    store: Store,
    _dir: Option<tempfile::TempDir>,
}

async fn open(name: &str) -> Option<Backend> {
    let (url, dir) = match name {
        "sqlite" => {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite://{}/memory.db", dir.path().display());
            (url, Some(dir))
        }
        server => {
            let service = if server == "postgres" {
                Service::Postgres
            } else {
                Service::Redis
            };
            match locate(service) {
                Ok(url) => (url, None),
                Err(SetupError::Unreachable(why)) if !is_required(server) => {
                    eprintln!("SKIP rig scenarios on {server}: {why}");
                    return None;
                }
                Err(e) => panic!("{server} is required (MNEMIX_TEST_REQUIRE) but: {e:?}"),
            }
        }
    };
    let store = mnemix::open(&url).await.expect("the store opens");
    Some(Backend { store, _dir: dir })
}

/// A namespace no other test uses, so tests share servers without wiping anything.
fn namespace() -> String {
    format!("rig-{:016x}", fastrand::u64(..))
}

fn tool(name: &str) -> ToolName {
    ToolName::new(name).unwrap()
}

/// One of each kind of rig message an agent turn produces.
fn every_kind() -> Vec<Message> {
    vec![
        Message::system("You are terse."),
        Message::User {
            content: vec![
                UserContent::text("What is the weather in Paris? See the photo."),
                UserContent::image_url("https://example.com/paris.png", None, None),
            ],
        },
        Message::Assistant(AssistantMessage::new(vec![
            AssistantContent::reasoning("The user wants the weather; call the tool."),
            AssistantContent::tool_call("call-1", tool("weather"), json!({"city": "Paris"})),
            AssistantContent::tool_call("call-2", tool("time"), json!({"tz": "Europe/Paris"})),
        ])),
        Message::User {
            content: vec![
                UserContent::tool_result(
                    CallId::from_wire("call-1"),
                    tool("weather"),
                    vec![ToolResultContent::text("18°C, clear")],
                ),
                UserContent::tool_result(
                    CallId::from_wire("call-2"),
                    tool("time"),
                    vec![ToolResultContent::Json {
                        value: json!({"hour": 14, "dst": true}),
                    }],
                ),
            ],
        },
        Message::assistant("18°C and clear, at 14:00 — ünïcödé ✓ \u{10FFFF}"),
    ]
}

// ---------------------------------------------------------------------------------------------
// Conversation memory

async fn history_round_trips_every_kind_of_rig_message(store: Store) {
    let history = ConversationHistory::new(store.scope(&namespace(), "ada").unwrap());
    let thread = "thread-1".into();
    history.append(&thread, every_kind()).await.unwrap();
    assert_eq!(history.load(&thread).await.unwrap(), every_kind());
}

async fn an_unknown_conversation_loads_empty(store: Store) {
    let history = ConversationHistory::new(store.scope(&namespace(), "ada").unwrap());
    assert!(history.load(&"never-used".into()).await.unwrap().is_empty());
    history.clear(&"never-used".into()).await.unwrap();
}

async fn turns_accumulate_in_order(store: Store) {
    let history = ConversationHistory::new(store.scope(&namespace(), "ada").unwrap());
    let thread = "thread-1".into();
    let mut expected = Vec::new();
    for turn in 0..5 {
        let messages = vec![
            Message::user(format!("question {turn}")),
            Message::assistant(format!("answer {turn}")),
        ];
        expected.extend(messages.clone());
        history.append(&thread, messages).await.unwrap();
    }
    history.append(&thread, Vec::new()).await.unwrap();
    assert_eq!(history.load(&thread).await.unwrap(), expected);
}

async fn clear_removes_one_conversation_and_it_can_start_again(store: Store) {
    let history = ConversationHistory::new(store.scope(&namespace(), "ada").unwrap());
    let (first, second) = ("first".into(), "second".into());
    history
        .append(&first, vec![Message::user("one")])
        .await
        .unwrap();
    history
        .append(&second, vec![Message::user("two")])
        .await
        .unwrap();
    history.clear(&first).await.unwrap();
    assert!(history.load(&first).await.unwrap().is_empty());
    assert_eq!(
        history.load(&second).await.unwrap(),
        vec![Message::user("two")]
    );
    history
        .append(&first, vec![Message::user("again")])
        .await
        .unwrap();
    assert_eq!(
        history.load(&first).await.unwrap(),
        vec![Message::user("again")]
    );
}

async fn another_subject_never_sees_the_history(store: Store) {
    let ns = namespace();
    let ada = ConversationHistory::new(store.scope(&ns, "ada").unwrap());
    let bob = ConversationHistory::new(store.scope(&ns, "bob").unwrap());
    let other_tenant = ConversationHistory::new(store.scope(&namespace(), "ada").unwrap());
    let thread = "same-id".into();
    ada.append(&thread, vec![Message::user("ada's secret")])
        .await
        .unwrap();
    assert!(bob.load(&thread).await.unwrap().is_empty());
    assert!(other_tenant.load(&thread).await.unwrap().is_empty());
    bob.append(&thread, vec![Message::user("bob's")])
        .await
        .unwrap();
    bob.clear(&thread).await.unwrap();
    assert_eq!(
        ada.load(&thread).await.unwrap(),
        vec![Message::user("ada's secret")]
    );
}

async fn concurrent_turns_are_stored_whole_and_none_is_lost(store: Store) {
    const WRITERS: usize = 8;
    const TURNS: usize = 5;
    let history = ConversationHistory::new(store.scope(&namespace(), "ada").unwrap());
    let thread: rig_core::id::ConversationId = "busy".into();
    // Every writer's first append races to create the conversation.
    let tasks: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let (history, thread) = (history.clone(), thread.clone());
            tokio::spawn(async move {
                for turn in 0..TURNS {
                    let turn = vec![
                        Message::user(format!("w{writer} q{turn}")),
                        Message::assistant(format!("w{writer} a{turn}")),
                    ];
                    history.append(&thread, turn).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let loaded = history.load(&thread).await.unwrap();
    assert_eq!(
        loaded.len(),
        WRITERS * TURNS * 2,
        "no message lost or doubled"
    );
    let text = |m: &Message| match m {
        Message::User { content } => match &content[0] {
            UserContent::Text(t) => t.text.clone(),
            other => panic!("{other:?}"),
        },
        Message::Assistant(turn) => match &turn.content[0] {
            AssistantContent::Text(t) => t.text.clone(),
            other => panic!("{other:?}"),
        },
        Message::System { .. } => panic!("no system message was appended"),
    };
    let mut seen = BTreeSet::new();
    for pair in loaded.chunks(2) {
        let (question, answer) = (text(&pair[0]), text(&pair[1]));
        assert_eq!(
            question.replace(" q", " a"),
            answer,
            "a turn's messages stay together"
        );
        assert!(seen.insert(question), "each turn once");
    }
    // Each writer's turns in the order it appended them.
    let order: Vec<String> = loaded.iter().step_by(2).map(text).collect();
    for writer in 0..WRITERS {
        let turns: Vec<_> = order
            .iter()
            .filter(|q| q.starts_with(&format!("w{writer} ")))
            .cloned()
            .collect();
        let expected: Vec<_> = (0..TURNS).map(|t| format!("w{writer} q{t}")).collect();
        assert_eq!(turns, expected);
    }
}

async fn messages_written_through_our_api_load_as_rig_messages(store: Store) {
    let scoped = store.scope(&namespace(), "ada").unwrap();
    let thread = scoped.new_conversation().await.unwrap();
    let mut call = OurMessage::new(Role::Assistant, vec![Part::text("Let me look.")]);
    call.parts
        .push(Part::tool_call("c1", "weather", json!({"city": "Oslo"})));
    scoped
        .conversation(&thread.id)
        .append([
            OurMessage::user("Weather in Oslo?"),
            call,
            OurMessage::new(
                Role::Tool,
                vec![Part::tool_result("c1", json!("-2°C, snow"))],
            ),
            OurMessage::assistant("It is -2°C with snow."),
        ])
        .await
        .unwrap();
    let history = ConversationHistory::new(scoped);
    let loaded = history.load(&thread.id.as_str().into()).await.unwrap();
    assert_eq!(
        loaded,
        vec![
            Message::user("Weather in Oslo?"),
            Message::Assistant(AssistantMessage::new(vec![
                AssistantContent::text("Let me look."),
                AssistantContent::tool_call("c1", tool("weather"), json!({"city": "Oslo"})),
            ])),
            Message::User {
                content: vec![UserContent::tool_result(
                    CallId::from_wire("c1"),
                    tool("weather"),
                    vec![ToolResultContent::Text(Text::new("-2°C, snow"))],
                )],
            },
            Message::assistant("It is -2°C with snow."),
        ]
    );
}

async fn rig_messages_read_through_our_api_as_ours(store: Store) {
    let scoped = store.scope(&namespace(), "ada").unwrap();
    let history = ConversationHistory::new(scoped.clone()).agent("weather-bot");
    history.append(&"t".into(), every_kind()).await.unwrap();
    let id = mnemix::ConversationId::new("t").unwrap();
    assert_eq!(
        scoped
            .conversation(&id)
            .get()
            .await
            .unwrap()
            .agent
            .as_deref(),
        Some("weather-bot")
    );
    let ours = scoped.conversation(&id).load().await.unwrap();
    let roles: Vec<Role> = ours.iter().map(|m| m.message.role).collect();
    assert_eq!(
        roles,
        [
            Role::System,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant
        ]
    );
    assert!(matches!(
        &ours[2].message.parts[1],
        Part::ToolCall { call_id, name, .. } if call_id == "call-1" && name == "weather"
    ));
    assert!(matches!(
        &ours[3].message.parts[1],
        Part::ToolResult { call_id, output, .. } if call_id == "call-2" && output["hour"] == 14
    ));
    assert_eq!(
        ours[1].message.text(),
        "What is the weather in Paris? See the photo."
    );
    // Our sanitized load keeps the tool turn: every call has its result.
    assert_eq!(ours.len(), 5);
}

async fn an_invalid_conversation_id_is_an_error_not_a_panic(store: Store) {
    let history = ConversationHistory::new(store.scope(&namespace(), "ada").unwrap());
    for bad in ["", "nul\0inside", &"x".repeat(257)] {
        let id = bad.into();
        assert!(history.load(&id).await.is_err(), "{bad:?}");
        assert!(
            history
                .append(&id, vec![Message::user("hi")])
                .await
                .is_err(),
            "{bad:?}"
        );
        assert!(history.clear(&id).await.is_err(), "{bad:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Vector index

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, rig_core::Embed)]
struct Note {
    id: String,
    #[embed]
    text: String,
    topic: String,
    year: i64,
    pinned: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, rig_core::Embed)]
struct Anonymous {
    #[embed]
    text: String,
}

const TOPICS: [&str; 4] = ["food", "travel", "work", "music"];
const WORDS: [&str; 12] = [
    "tea", "lemon", "train", "paris", "deadline", "review", "guitar", "jazz", "noodles", "oslo",
    "meeting", "piano",
];

fn notes(n: usize) -> Vec<Note> {
    (0..n)
        .map(|i| Note {
            id: format!("note-{i:03}"),
            text: format!(
                "{} {} {} number {i}",
                WORDS[i % 12],
                WORDS[(i * 7 + 3) % 12],
                WORDS[(i * 5 + 1) % 12]
            ),
            topic: TOPICS[i % 4].to_owned(),
            year: 2015 + (i as i64 % 10),
            pinned: i % 3 == 0,
        })
        .collect()
}

fn embedder() -> Arc<HashingEmbedder> {
    Arc::new(HashingEmbedder::new(64))
}

async fn index(store: &Store, namespace: &str, subject: &str) -> VectorIndex {
    VectorIndex::with_embedder(
        store.scope(namespace, subject).unwrap(),
        "notes",
        embedder(),
    )
    .await
    .unwrap()
}

fn request(query: &str, samples: u64) -> VectorSearchRequest<Filter<Value>> {
    VectorSearchRequest::builder()
        .query(query)
        .samples(samples)
        .build()
}

async fn top_n_ranks_like_rigs_own_in_memory_store(store: Store) {
    let approximate = matches!(
        store.capabilities().vector_search,
        VectorSearch::Approximate(_)
    );
    let ours = index(&store, &namespace(), "ada").await;
    let documents = notes(60);
    ours.insert(documents.clone()).await.unwrap();

    let model = embedding_model(embedder());
    let embedded = EmbeddingsBuilder::new(model.clone())
        .documents(documents.clone())
        .unwrap()
        .build()
        .await
        .unwrap();
    let reference =
        InMemoryVectorStore::from_documents_with_id_f(embedded, |note: &Note| note.id.clone())
            .index(model);

    for query in [
        "tea with lemon",
        "jazz guitar",
        "train to oslo",
        "deadline review",
    ] {
        let want: Vec<_> = reference.top_n::<Note>(request(query, 10)).await.unwrap();
        let got: Vec<_> = ours.top_n::<Note>(request(query, 10)).await.unwrap();
        assert_eq!(got.len(), 10);
        for hit in &got {
            let note = documents.iter().find(|n| n.id == hit.id).unwrap();
            assert_eq!(&hit.document, note, "the document reads back whole");
        }
        let want_ids: BTreeSet<_> = want.iter().map(|h| h.id.clone()).collect();
        let got_ids: BTreeSet<_> = got.iter().map(|h| h.id.clone()).collect();
        let found = want_ids.intersection(&got_ids).count();
        if approximate {
            assert!(found >= 9, "{query}: recall {found}/10");
        } else {
            // Scores tie only for equal texts, which these notes do not have.
            assert_eq!(got_ids, want_ids, "{query}");
            for (g, w) in got.iter().zip(&want) {
                assert!((g.score - w.score).abs() < 1e-4, "{query}: {g:?} vs {w:?}");
            }
        }
        assert!(
            got.windows(2).all(|w| w[0].score >= w[1].score),
            "best first"
        );
        let ids = ours.top_n_ids(request(query, 10)).await.unwrap();
        assert_eq!(
            ids.iter().map(|h| &h.id).collect::<Vec<_>>(),
            got.iter().map(|h| &h.id).collect::<Vec<_>>()
        );
    }
}

async fn filters_select_what_rigs_own_filter_selects(store: Store) {
    let ours = index(&store, &namespace(), "ada").await;
    let documents = notes(40);
    ours.insert(documents.clone()).await.unwrap();
    let filters = [
        Filter::eq("topic", json!("food")),
        Filter::eq("pinned", json!(true)),
        Filter::eq("year", json!(2019)),
        Filter::gt("year", json!(2020)),
        Filter::lt("year", json!(2017.5)),
        Filter::gt("topic", json!("music")),
        Filter::eq("topic", json!("travel")).and(Filter::gt("year", json!(2016))),
        Filter::eq("topic", json!("work")).or(Filter::eq("pinned", json!(true))),
        Filter::eq("topic", json!("nothing")),
        Filter::eq("missing_field", json!(1)),
    ];
    for filter in filters {
        let want: BTreeSet<_> = documents
            .iter()
            .filter(|n| filter.satisfies(&serde_json::to_value(n).unwrap()))
            .map(|n| n.id.clone())
            .collect();
        let request = VectorSearchRequest::builder()
            .query("tea")
            .samples(100)
            .filter(filter.clone())
            .build();
        let got: BTreeSet<_> = ours
            .top_n_ids(request)
            .await
            .unwrap()
            .into_iter()
            .map(|h| h.id)
            .collect();
        assert_eq!(got, want, "{filter:?}");
    }
}

async fn what_cannot_be_translated_or_read_back_is_refused(store: Store) {
    let ours = index(&store, &namespace(), "ada").await;
    ours.insert(notes(3)).await.unwrap();
    for filter in [
        Filter::eq("topic", Value::Null),
        Filter::eq("topic", json!(["a"])),
        Filter::gt("pinned", json!(true)),
        Filter::lt("topic", json!({"a": 1})),
    ] {
        let request = VectorSearchRequest::builder()
            .query("tea")
            .samples(3)
            .filter(filter.clone())
            .build();
        let error = ours.top_n_ids(request).await.unwrap_err();
        assert!(
            matches!(error, VectorStoreError::FilterError(_)),
            "{filter:?}: {error}"
        );
    }
    assert!(ours.top_n_ids(request("tea", 0)).await.unwrap().is_empty());
    assert!(matches!(
        ours.top_n_ids(request("tea", 1001)).await.unwrap_err(),
        VectorStoreError::SamplesOutOfRange {
            requested: 1001,
            max: 1000
        }
    ));
    // A document that is not a JSON object has no fields to filter or read back.
    let error = ours
        .insert(vec!["just a string".to_owned()])
        .await
        .unwrap_err();
    assert!(error.to_string().contains("JSON object"), "{error}");
}

async fn inserting_again_replaces_and_never_duplicates(store: Store) {
    let ours = index(&store, &namespace(), "ada").await;
    let mut documents = notes(5);
    ours.insert(documents.clone()).await.unwrap();
    documents[0].text = "completely new text about pianos".into();
    ours.insert(documents.clone()).await.unwrap();
    let anonymous = vec![
        Anonymous {
            text: "no id here".into(),
        },
        Anonymous {
            text: "nor here".into(),
        },
    ];
    ours.insert(anonymous.clone()).await.unwrap();
    ours.insert(anonymous).await.unwrap();
    let all = ours.top_n::<Value>(request("pianos", 100)).await.unwrap();
    assert_eq!(all.len(), 7, "5 notes by id, 2 anonymous by digest");
    assert_eq!(all[0].id, "note-000");
    assert_eq!(all[0].document["text"], "completely new text about pianos");
}

async fn threshold_keeps_only_hits_at_least_as_close(store: Store) {
    let ours = index(&store, &namespace(), "ada").await;
    ours.insert(notes(30)).await.unwrap();
    let all = ours.top_n_ids(request("tea lemon", 30)).await.unwrap();
    let threshold = all[5].score;
    let request = VectorSearchRequest::builder()
        .query("tea lemon")
        .samples(30)
        .threshold(threshold)
        .build();
    let kept = ours.top_n_ids(request).await.unwrap();
    let expected = all.iter().filter(|h| h.score >= threshold).count();
    assert_eq!(kept.len(), expected);
    assert!(kept.iter().all(|h| h.score >= threshold));
}

async fn another_subject_never_finds_the_documents(store: Store) {
    let ns = namespace();
    let ada = index(&store, &ns, "ada").await;
    let bob = index(&store, &ns, "bob").await;
    ada.insert(notes(10)).await.unwrap();
    assert!(bob.top_n_ids(request("tea", 10)).await.unwrap().is_empty());
    assert_eq!(ada.top_n_ids(request("tea", 10)).await.unwrap().len(), 10);
}

#[tokio::test]
async fn the_embedding_model_is_our_embedder() {
    let ours = embedder();
    let model = embedding_model(ours.clone());
    let texts: Vec<String> = (0..150).map(|i| format!("text {i}")).collect();
    let embedded = EmbeddingsBuilder::new(model.clone())
        .documents(texts.clone())
        .unwrap()
        .build()
        .await
        .unwrap();
    assert_eq!(embedded.len(), 150, "batched by 64, nothing dropped");
    for (text, embeddings) in embedded {
        let want = ours.embed_one(&text);
        let got: Vec<f32> = embeddings[0].vec.iter().map(|&x| x as f32).collect();
        assert_eq!(got, want, "{text}");
    }
}

// ---------------------------------------------------------------------------------------------

/// One test module per backend, each running every scenario (the scenarios travel as one token
/// tree so the backend list and the scenario list can repeat independently).
macro_rules! on_backends {
    ($($backend:ident),*; $scenarios:tt) => {
        $( on_backend!($backend $scenarios); )*
    };
}

macro_rules! on_backend {
    ($backend:ident [$($scenario:ident),* $(,)?]) => {
        mod $backend { $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                if let Some(backend) = super::open(stringify!($backend)).await {
                    super::$scenario(backend.store.clone()).await;
                }
            }
        )* }
    };
}

on_backends!(sqlite, postgres, redis; [
    history_round_trips_every_kind_of_rig_message,
    an_unknown_conversation_loads_empty,
    turns_accumulate_in_order,
    clear_removes_one_conversation_and_it_can_start_again,
    another_subject_never_sees_the_history,
    concurrent_turns_are_stored_whole_and_none_is_lost,
    messages_written_through_our_api_load_as_rig_messages,
    rig_messages_read_through_our_api_as_ours,
    an_invalid_conversation_id_is_an_error_not_a_panic,
    top_n_ranks_like_rigs_own_in_memory_store,
    filters_select_what_rigs_own_filter_selects,
    what_cannot_be_translated_or_read_back_is_refused,
    inserting_again_replaces_and_never_duplicates,
    threshold_keeps_only_hits_at_least_as_close,
    another_subject_never_finds_the_documents,
]);
