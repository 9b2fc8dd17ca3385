//! The OpenAI-compatible embedder against a local HTTP server that speaks the embeddings API.
#![cfg(feature = "http")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use mnemix_core::embed::{Embedder, HashingEmbedder};
use mnemix_core::{InMemoryBackend, MemoryError, Message, NewConversation, Scope};
use mnemix_embed::OpenAiEmbedder;
use mnemix_engine::config::MemoryConfig;
use mnemix_engine::Memory;
use serde_json::{json, Value};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use common::requests;

const DIMS: usize = 64;

/// Answers like the embeddings API: a deterministic vector per input text, listed in reverse
/// order (the client must sort by `index`).
struct EmbeddingsApi;

impl Respond for EmbeddingsApi {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).expect("a JSON body");
        let embedder = HashingEmbedder::new(DIMS);
        let inputs = body["input"].as_array().expect("input is a list");
        let data: Vec<Value> = inputs
            .iter()
            .enumerate()
            .rev()
            .map(|(index, text)| {
                json!({
                    "object": "embedding",
                    "index": index,
                    "embedding": embedder.embed_one(text.as_str().expect("text")),
                })
            })
            .collect();
        ResponseTemplate::new(200).set_body_json(json!({
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }))
    }
}

/// A server answering every POST with `responder`.
async fn serving(responder: impl Respond + 'static) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(responder)
        .mount(&server)
        .await;
    server
}

fn embedder(server: &MockServer) -> mnemix_embed::OpenAiEmbedderBuilder {
    OpenAiEmbedder::builder("test-embedding", DIMS)
        .base_url(format!("{}/v1", server.uri()))
        .backoff(Duration::from_millis(1), Duration::from_millis(5))
}

fn texts(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("text number {i}")).collect()
}

#[tokio::test]
async fn vectors_come_back_in_text_order_with_the_key_sent() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .and(header("authorization", "Bearer sk-test"))
        .respond_with(EmbeddingsApi)
        .mount(&server)
        .await;
    let embedder = embedder(&server).api_key("sk-test").build().unwrap();
    let input = texts(5);
    let vectors = embedder.embed(&input).await.unwrap();
    let reference = HashingEmbedder::new(DIMS);
    for (text, vector) in input.iter().zip(&vectors) {
        assert_eq!(*vector, reference.embed_one(text));
    }
    let sent = requests(&server).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["model"], "test-embedding");
    assert_eq!(sent[0]["encoding_format"], "float");
    assert!(sent[0].get("dimensions").is_none(), "not sent unless asked");
    assert!(!format!("{embedder:?}").contains("sk-test"), "{embedder:?}");
}

#[tokio::test]
async fn a_429_is_retried_after_retry_after_then_succeeds() {
    // The first request is refused; the catch-all answers the retry.
    let server = serving(EmbeddingsApi).await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "0")
                .set_body_json(json!({"error": {"message": "Rate limit reached"}})),
        )
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    let vectors = embedder(&server)
        .build()
        .unwrap()
        .embed(&texts(2))
        .await
        .unwrap();
    assert_eq!(vectors.len(), 2);
    assert_eq!(requests(&server).await.len(), 2, "one 429, one success");
}

#[tokio::test]
async fn server_errors_are_retried_then_reported() {
    let server = serving(ResponseTemplate::new(503).set_body_string("overloaded")).await;
    let error = embedder(&server)
        .max_retries(2)
        .build()
        .unwrap()
        .embed(&texts(1))
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::Model { .. }), "{error:?}");
    assert!(error.to_string().contains("503"), "{error}");
    assert_eq!(
        requests(&server).await.len(),
        3,
        "the first try and two retries"
    );
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let server = serving(
        ResponseTemplate::new(401)
            .set_body_json(json!({"error": {"message": "Incorrect API key provided"}})),
    )
    .await;
    let error = embedder(&server)
        .build()
        .unwrap()
        .embed(&texts(1))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("401"), "{error}");
    assert!(error.to_string().contains("Incorrect API key"), "{error}");
    assert_eq!(requests(&server).await.len(), 1);
}

#[tokio::test]
async fn a_refused_connection_is_retried_then_reported() {
    // A port nothing listens on: bind, note it, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = OpenAiEmbedder::builder("m", DIMS)
        .base_url(format!("http://127.0.0.1:{port}/v1"))
        .backoff(Duration::from_millis(1), Duration::from_millis(2))
        .max_retries(1)
        .build()
        .unwrap()
        .embed(&texts(1))
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::Model { .. }), "{error:?}");
}

#[tokio::test]
async fn large_inputs_go_in_batches_in_order() {
    let server = serving(EmbeddingsApi).await;
    let input = texts(7);
    let vectors = embedder(&server)
        .batch_size(3)
        .build()
        .unwrap()
        .embed(&input)
        .await
        .unwrap();
    let reference = HashingEmbedder::new(DIMS);
    assert_eq!(
        vectors,
        input
            .iter()
            .map(|t| reference.embed_one(t))
            .collect::<Vec<_>>()
    );
    let sizes: Vec<usize> = requests(&server)
        .await
        .iter()
        .map(|r| r["input"].as_array().unwrap().len())
        .collect();
    assert_eq!(sizes, [3, 3, 1]);
    assert!(embedder(&server)
        .build()
        .unwrap()
        .embed(&[])
        .await
        .unwrap()
        .is_empty());
    assert_eq!(requests(&server).await.len(), 3, "no request for no text");
}

#[tokio::test]
async fn a_vector_of_the_wrong_length_is_rejected() {
    let server = serving(EmbeddingsApi).await;
    let error = OpenAiEmbedder::builder("m", DIMS + 1)
        .base_url(server.uri())
        .send_dimensions(true)
        .build()
        .unwrap()
        .embed(&texts(1))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("65"), "{error}");
    assert_eq!(requests(&server).await[0]["dimensions"], 65);
}

#[test]
fn bad_settings_are_clear_errors() {
    for (builder, field) in [
        (OpenAiEmbedder::builder("", 8), "model"),
        (OpenAiEmbedder::builder("m", 0), "dims"),
        (OpenAiEmbedder::builder("m", 8).batch_size(0), "batch_size"),
        (
            OpenAiEmbedder::builder("m", 8).base_url("localhost:8080"),
            "base_url",
        ),
    ] {
        let error = builder.build().unwrap_err();
        assert!(error.to_string().contains(field), "{error}");
    }
}

#[tokio::test]
async fn the_engine_recalls_through_the_http_embedder() {
    let server = serving(EmbeddingsApi).await;
    let mut config = MemoryConfig::default();
    config.conversation.enabled = true;
    config.conversation.window_size = Some(1);
    config.semantic_recall.enabled = true;
    // Messages are embedded with their speaker and day (`embedded_text`), the query alone.
    config.semantic_recall.threshold = 0.3;
    let backend = Arc::new(InMemoryBackend::new());
    let memory = Memory::builder(backend.clone())
        .config(config)
        .embedder(Arc::new(embedder(&server).build().unwrap()))
        .build()
        .unwrap();
    let scope = Scope::for_subject("user-1").unwrap();
    let thread = mnemix_core::ConversationStore::create_conversation(
        backend.as_ref(),
        &scope,
        NewConversation::default(),
    )
    .await
    .unwrap();
    memory
        .commit(
            &scope,
            &thread.id,
            vec![
                Message::user("my flight to Lisbon leaves at nine"),
                Message::user("unrelated chatter about the weather"),
            ],
        )
        .await
        .unwrap();
    let context = memory
        .prepare(&scope, &thread.id, "when does my flight to Lisbon leave")
        .await
        .unwrap();
    assert_eq!(context.recalled.len(), 1);
    assert_eq!(context.recalled[0].message.seq, 1);
}
