//! The chat client and the engine's `ModelExtractor` against a local server that speaks the
//! chat completions API: facts and summaries with no user code, and every failure (HTTP
//! errors, malformed JSON, a reply of the wrong shape) handed to `on_error` without failing
//! the turn.
#![cfg(feature = "http")]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mnemix_core::registry::KindSpec;
use mnemix_core::{FactQuery, InMemoryBackend, Message, NewConversation, Scope, Timestamp};
use mnemix_embed::OpenAiChat;
use mnemix_engine::config::MemoryConfig;
use mnemix_engine::{ExtractionReport, Memories, Memory, MemoryQuery, ModelExtractor};
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use common::requests;

/// A chat completion whose message is `content`.
fn completion(content: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
    }))
}

async fn serving(response: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(response)
        .mount(&server)
        .await;
    server
}

fn chat(server: &MockServer) -> OpenAiChat {
    OpenAiChat::builder("test-chat")
        .base_url(format!("{}/v1", server.uri()))
        .backoff(Duration::from_millis(1), Duration::from_millis(5))
        .max_retries(2)
        .build()
        .expect("a chat client")
}

fn extracting() -> MemoryConfig {
    let mut config = MemoryConfig::default();
    config.conversation.enabled = true;
    config.facts.enabled = true;
    config.extract.enabled = true;
    config
}

type Errors = Arc<Mutex<Vec<String>>>;

/// A memory extracting with `chat`, recording what reaches `on_error`.
fn memory(chat: OpenAiChat) -> (Memory, Errors) {
    memory_with(chat, extracting())
}

fn memory_with(chat: OpenAiChat, config: MemoryConfig) -> (Memory, Errors) {
    let errors = Errors::default();
    let memory = Memory::builder(Arc::new(InMemoryBackend::new()))
        .config(config)
        .extractor(Arc::new(ModelExtractor::new(chat)))
        .on_error({
            let errors = errors.clone();
            move |_, _, e| errors.lock().unwrap().push(e.to_string())
        })
        .build()
        .expect("build");
    (memory, errors)
}

/// One committed turn; its extraction report.
async fn commit_turn(memory: &Memory, scope: &Scope) -> ExtractionReport {
    let thread = memory
        .backend()
        .create_conversation(scope, NewConversation::default())
        .await
        .expect("conversation");
    let turn = vec![
        Message::user("I'm allergic to peanuts and I live in Lyon."),
        Message::assistant("Noted."),
    ];
    let receipt = memory
        .commit(scope, &thread.id, turn)
        .await
        .expect("the turn is committed whatever the model does");
    assert_eq!(receipt.append.appended.len(), 2);
    receipt.extraction
}

/// `extract.extract_with` alone turns extraction on: the model named in the config is asked
/// in JSON mode with the transcript, and its facts are stored with their scores and tags.
#[tokio::test]
async fn extract_with_in_the_config_extracts_facts_without_code() {
    let reply = json!({"facts": [
        {"fact": "The user is allergic to peanuts", "score": 0.95, "tags": ["health"]},
        {"fact": "The user lives in Lyon", "score": 0.9},
        {"fact": "The user might like jazz", "score": 0.2},
    ]});
    let server = serving(completion(&reply.to_string())).await;
    // The only test of this binary that reads the environment.
    std::env::set_var("MNEMIX_CHAT_BASE_URL", format!("{}/v1", server.uri()));
    std::env::set_var("MNEMIX_CHAT_API_KEY", "sk-test");
    let mut config = extracting();
    config.extract.extract_with = Some("small-model".into());
    let memory = Memory::builder(Arc::new(InMemoryBackend::new()))
        .config(config)
        .build()
        .expect("no extractor needed in code");
    let scope = Scope::for_subject("user-1").unwrap();
    let ExtractionReport::Ran {
        proposed, stored, ..
    } = commit_turn(&memory, &scope).await
    else {
        panic!("extraction should run");
    };
    assert_eq!(proposed, 3);
    let mut texts: Vec<(&str, Option<f32>, &[String])> = stored
        .iter()
        .map(|f| (f.text.as_str(), f.score, f.tags.as_slice()))
        .collect();
    texts.sort_by(|a, b| a.0.cmp(b.0));
    assert_eq!(
        texts,
        [
            (
                "The user is allergic to peanuts",
                Some(0.95),
                &["health".to_owned()][..]
            ),
            ("The user lives in Lyon", Some(0.9), &[][..]),
        ]
    );
    let sent = requests(&server).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["model"], "small-model");
    assert_eq!(sent[0]["response_format"]["type"], "json_object");
    let user = sent[0]["messages"][1]["content"].as_str().unwrap();
    assert!(user.contains("user: I'm allergic to peanuts"), "{user}");
    assert!(sent[0]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .contains(r#"{"facts": [{"fact""#));
    let headers = &server.received_requests().await.unwrap()[0].headers;
    assert_eq!(headers["authorization"], "Bearer sk-test");
}

/// The prompt asks for the dates a message states, the transcript dates each message, and the
/// reply's dates become the facts' valid time; a date that does not exist, or an interval
/// that ends before it starts, is dropped and the fact kept.
#[tokio::test]
async fn the_dates_a_message_states_become_valid_time() {
    let reply = json!({"facts": [
        {"fact": "The user lives in Lyon", "score": 0.9, "valid_from": "2026-03-01"},
        {"fact": "The user worked at Acme", "score": 0.9,
         "valid_from": "2024-01-15", "valid_until": "2026-06-30"},
        {"fact": "The user is allergic to peanuts", "score": 0.9, "valid_from": "2026-02-30"},
        {"fact": "The user owned a bike", "score": 0.9,
         "valid_from": "2026-05-01", "valid_until": "2026-01-01"},
    ]});
    let server = serving(completion(&reply.to_string())).await;
    let (memory, errors) = memory(chat(&server));
    let scope = Scope::for_subject("user-1").unwrap();
    let ExtractionReport::Ran { stored, .. } = commit_turn(&memory, &scope).await else {
        panic!("extraction should run: {:?}", errors.lock().unwrap());
    };
    let mut valid: Vec<(&str, Option<Timestamp>, Option<Timestamp>)> = stored
        .iter()
        .map(|f| (f.text.as_str(), f.valid_from, f.valid_until))
        .collect();
    valid.sort_by(|a, b| a.0.cmp(b.0));
    let day = |y, m, d| Some(Timestamp::from_utc(y, m, d, 0, 0));
    assert_eq!(
        valid,
        [
            ("The user is allergic to peanuts", None, None),
            ("The user lives in Lyon", day(2026, 3, 1), None),
            ("The user owned a bike", None, None),
            (
                "The user worked at Acme",
                day(2024, 1, 15),
                day(2026, 6, 30)
            ),
        ]
    );
    let sent = requests(&server).await;
    let prompt = sent[0]["messages"][0]["content"].as_str().unwrap();
    assert!(prompt.contains(r#""valid_from""#), "{prompt}");
    let transcript = sent[0]["messages"][1]["content"].as_str().unwrap();
    let line = transcript
        .lines()
        .find(|l| l.ends_with("] user: I'm allergic to peanuts and I live in Lyon."))
        .unwrap_or_else(|| panic!("{transcript}"));
    let date = line.strip_prefix('[').and_then(|l| l.get(..10)).unwrap();
    assert!(Timestamp::from_date(date).is_ok(), "{line}");
}

/// Replies the extractor cannot use — not JSON, JSON of the wrong shape, an HTTP error — go
/// to `on_error`, are reported as failed, and never fail the turn or store a fact.
#[tokio::test]
async fn bad_replies_go_to_on_error_and_the_turn_stays_committed() {
    let cases = [
        ("not JSON", completion("Sure! The user likes peanuts.")),
        ("wrong shape", completion(r#"{"facts": "peanuts"}"#)),
        ("JSON but no object", completion("[1, 2]")),
        (
            "a fact without a score",
            completion(r#"{"facts": [{"fact": "x"}]}"#),
        ),
        (
            "HTTP 400",
            ResponseTemplate::new(400).set_body_string("bad model"),
        ),
        ("HTTP 503 after retries", ResponseTemplate::new(503)),
    ];
    for (case, response) in cases {
        let server = serving(response).await;
        let (memory, errors) = memory(chat(&server));
        let scope = Scope::for_subject("user-1").unwrap();
        let report = commit_turn(&memory, &scope).await;
        assert!(
            matches!(report, ExtractionReport::Failed { .. }),
            "{case}: {report:?}"
        );
        let errors = errors.lock().unwrap().clone();
        assert_eq!(errors.len(), 1, "{case}: {errors:?}");
        let facts = memory
            .backend()
            .list_facts(&scope, FactQuery::default())
            .await
            .unwrap();
        assert!(facts.items.is_empty(), "{case}");
        let tries = requests(&server).await.len();
        let expected = if case.starts_with("HTTP 503") { 3 } else { 1 };
        assert_eq!(tries, expected, "{case}: a 5xx is retried, nothing else is");
    }
}

/// As a summarizer the model gets the summary so far and the messages since, and its
/// `summary` is what `prepare` puts in the context.
#[tokio::test]
async fn the_model_writes_the_summary_prepare_uses() {
    let server = serving(completion(r#"{"summary": "The user planned a trip."}"#)).await;
    let mut config = MemoryConfig::default();
    config.conversation.enabled = true;
    config.conversation.window_size = Some(2);
    config.conversation.summarize = true;
    let memory = Memory::builder(Arc::new(InMemoryBackend::new()))
        .config(config)
        .summarizer(Arc::new(ModelExtractor::new(chat(&server))))
        .build()
        .expect("build");
    let scope = Scope::for_subject("user-1").unwrap();
    let thread = memory
        .backend()
        .create_conversation(&scope, NewConversation::default())
        .await
        .unwrap();
    let turn = vec![
        Message::user("Plan a trip to Kyoto."),
        Message::assistant("When?"),
        Message::user("In April."),
        Message::assistant("Booked."),
    ];
    memory.commit(&scope, &thread.id, turn).await.unwrap();
    let context = memory.prepare(&scope, &thread.id, "").await.unwrap();
    assert_eq!(context.summary.as_deref(), Some("The user planned a trip."));
    let sent = requests(&server).await;
    let input = sent[0]["messages"][1]["content"].as_str().unwrap();
    // Each line dated: `[YYYY-MM-DD] role: text`.
    let undated: Vec<&str> = input
        .lines()
        .skip(1)
        .map(|line| line.split_once("] ").map_or(line, |(_, rest)| rest))
        .collect();
    assert!(input.starts_with("Messages:\n["), "{input}");
    assert_eq!(
        undated[..2],
        ["user: Plan a trip to Kyoto.", "assistant: When?"]
    );
    assert!(!input.contains("In April"), "only what left the window");
}

/// With kinds registered in the facts' namespace, the prompt names those `extract.kinds`
/// offers with their schemas, and the memories the model returns are stored as memories of
/// their kind; one of an unknown kind goes to `on_error` and the rest are kept.
#[tokio::test]
async fn registered_kinds_are_offered_and_their_memories_stored() {
    let reply = json!({
        "facts": [],
        "memories": [
            {"kind": "Preference", "data": {"category": "food", "value": "vegan"}, "score": 0.9},
            {"kind": "Nonexistent", "data": {"x": 1}, "score": 0.9},
        ],
    });
    let server = serving(completion(&reply.to_string())).await;
    let mut config = extracting();
    config.extract.kinds = vec!["Preference".into()];
    let (memory, errors) = memory_with(chat(&server), config);
    let scope = Scope::for_subject("user-1").unwrap();
    let memories = Memories::new(Arc::clone(memory.backend()));
    let schema = json!({"type": "object", "required": ["category", "value"],
        "properties": {"category": {"type": "string"}, "value": {"type": "string"}}});
    memories
        .register_kind(
            scope.namespace(),
            KindSpec::new("Preference", schema).unique_on(["category"]),
        )
        .await
        .unwrap();
    memories
        .register_kind(scope.namespace(), KindSpec::new("Unoffered", json!({})))
        .await
        .unwrap();
    let ExtractionReport::Ran { stored, .. } = commit_turn(&memory, &scope).await else {
        panic!("extraction should run");
    };
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].kind.as_deref(), Some("Preference"));
    let errors = errors.lock().unwrap().clone();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("Nonexistent"), "{}", errors[0]);
    let found = memories
        .search(&scope, MemoryQuery::default().with_text("food"))
        .await
        .unwrap();
    assert_eq!(found[0].memory.data["value"], "vegan");
    let prompt = requests(&server).await[0]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        !prompt.contains("Unoffered"),
        "only the kinds extract.kinds names"
    );
    assert!(
        prompt.contains(r#""kind":"Preference""#)
            && prompt.contains(r#""required":["category","value"]"#),
        "{prompt}"
    );
}
