//! A JSON-mode chat client for any server that speaks the OpenAI chat completions API: what the
//! engine's model extractor and summarizer call.

use std::fmt;

use mnemix_core::{MemoryError, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::transport::{http_settings_methods, Endpoint, HttpSettings};

const COMPONENT: &str = "chat model";

/// Chat completions from `POST {base_url}/chat/completions` (the OpenAI API shape), asked for
/// a JSON object (`response_format: {"type": "json_object"}`, temperature 0).
///
/// # Behavior
/// - Retries as [`OpenAiEmbedder`](crate::OpenAiEmbedder) does: a 429, a 5xx, a timeout or a
///   refused connection up to `max_retries` times, honouring `Retry-After`.
/// - Any other status, a reply without a message, or a message that is not a JSON object is
///   [`MemoryError::Model`].
/// - The API key is never printed.
#[derive(Clone)]
pub struct OpenAiChat {
    endpoint: Endpoint,
    model: String,
}

impl fmt::Debug for OpenAiChat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiChat")
            .field("endpoint", &self.endpoint.url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// Builds an [`OpenAiChat`].
#[derive(Debug, Clone)]
pub struct OpenAiChatBuilder {
    http: HttpSettings,
    model: String,
}

impl OpenAiChatBuilder {
    http_settings_methods!();

    /// Checks the settings and makes the HTTP client.
    pub fn build(self) -> Result<OpenAiChat> {
        if self.model.trim().is_empty() {
            return Err(MemoryError::invalid("openai chat: model must not be empty"));
        }
        let endpoint = self
            .http
            .endpoint("openai chat", COMPONENT, "chat/completions")?;
        Ok(OpenAiChat {
            endpoint,
            model: self.model,
        })
    }
}

#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: [ChatMessage<'a>; 2],
    response_format: ResponseFormat,
    temperature: f32,
}

#[derive(Serialize)]
struct ChatMessage<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Serialize)]
struct ResponseFormat {
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Deserialize)]
struct ChatResponse {
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    message: ReplyMessage,
}

#[derive(Deserialize)]
struct ReplyMessage {
    content: Option<String>,
}

impl OpenAiChat {
    /// A builder for `model`.
    pub fn builder(model: impl Into<String>) -> OpenAiChatBuilder {
        OpenAiChatBuilder {
            http: HttpSettings::default(),
            model: model.into(),
        }
    }

    /// `model` on the server the environment names: `MNEMIX_CHAT_BASE_URL` (or
    /// `OPENAI_BASE_URL`), `MNEMIX_CHAT_API_KEY` (or `OPENAI_API_KEY`).
    pub fn from_env(model: impl Into<String>) -> Result<Self> {
        OpenAiChatBuilder {
            http: HttpSettings::from_env("MNEMIX_CHAT"),
            model: model.into(),
        }
        .build()
    }

    /// The model's name.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The JSON object the model answers to `system` then `user`.
    pub async fn complete_json(&self, system: &str, user: &str) -> Result<Value> {
        let body = ChatRequest {
            model: &self.model,
            messages: [
                ChatMessage {
                    role: "system",
                    content: system,
                },
                ChatMessage {
                    role: "user",
                    content: user,
                },
            ],
            response_format: ResponseFormat {
                kind: "json_object",
            },
            temperature: 0.0,
        };
        let reply: ChatResponse = self.endpoint.post(&body).await?;
        let content = reply
            .choices
            .into_iter()
            .next()
            .and_then(|c| c.message.content)
            .ok_or_else(|| MemoryError::model(COMPONENT, "a reply without a message"))?;
        match serde_json::from_str::<Value>(&content) {
            Ok(value @ Value::Object(_)) => Ok(value),
            Ok(_) => Err(MemoryError::model(
                COMPONENT,
                "the reply is JSON but not an object",
            )),
            Err(e) => {
                let excerpt: String = content.chars().take(200).collect();
                Err(MemoryError::model(
                    COMPONENT,
                    format!("the reply is not JSON ({e}): {excerpt}"),
                ))
            }
        }
    }
}
