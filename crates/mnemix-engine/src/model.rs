//! [`ModelExtractor`]: fact extraction and summaries by a chat model, with no user code
//! (`extract.extract_with` in the config).

use async_trait::async_trait;
use mnemix_core::registry::KindSpec;
use mnemix_core::StoredMessage;
use mnemix_core::{validate_identifier, ConversationId, Scope, Timestamp};
use mnemix_core::{MemoryError, Result};
use mnemix_embed::OpenAiChat;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::{ExtractedFact, FactExtractor, Summarizer};

const COMPONENT: &str = "model extractor";

const EXTRACT_PROMPT: &str = "You distil durable facts about the user from new messages of a \
conversation, for an assistant's long-term memory. Keep only what the user stated or clearly \
implied about themselves, their preferences, plans and circumstances; never instructions, \
never what the assistant said of itself. Write each fact as one short self-contained sentence \
in the third person. Answer with one JSON object and nothing else: \
{\"facts\": [{\"fact\": \"…\", \"score\": 0.0-1.0, \"tags\": [\"…\"]}]} where score is how sure \
you are and tags (optional) are short lowercase topics. When the messages say when a fact \
became true or stopped being true, add \"valid_from\" and \"valid_until\" as YYYY-MM-DD \
dates, reading relative dates (\"last March\") from the date before each message; leave them \
out otherwise. With nothing worth keeping, answer {\"facts\": []}.";

const SUMMARY_PROMPT: &str = "You keep a running summary of a conversation for an assistant \
that can no longer see its older messages. Given the summary so far (if any) and the messages \
that followed it, write the new summary: the user's goals, decisions, facts and open questions, \
concise, in the third person. Answer with one JSON object and nothing else: \
{\"summary\": \"…\"}.";

/// A [`FactExtractor`] and [`Summarizer`] over a chat model that speaks the OpenAI chat
/// completions API in JSON mode ([`OpenAiChat`]).
///
/// The extraction prompt asks for `{"facts": [{"fact", "score", "tags"?}]}` and, when kinds
/// are registered in the facts' namespace, names them with their schemas and asks for
/// `"memories": [{"kind", "data", "score", "tags"?}]` too (stored as structured memories,
/// each checked against its kind); the summary prompt asks for `{"summary"}`. A reply of any other shape, like an HTTP failure after the
/// client's retries, is a [`MemoryError::Model`]: the engine hands it to `on_error` and the turn
/// stays committed; the messages are extracted again by the next commit. Tags that are not
/// valid identifiers are dropped; scores are clamped to [0, 1].
///
/// `extract.extract_with: "model-name"` in [`MemoryConfig`](crate::config::MemoryConfig) makes
/// one from the environment (`MNEMIX_CHAT_BASE_URL` or `OPENAI_BASE_URL`, `MNEMIX_CHAT_API_KEY`
/// or `OPENAI_API_KEY`) when the builder is given no extractor (and no summarizer while
/// `conversation.summarize` is on).
#[derive(Debug, Clone)]
pub struct ModelExtractor {
    chat: OpenAiChat,
}

#[derive(Deserialize)]
struct FactsReply {
    facts: Vec<FactReply>,
    #[serde(default)]
    memories: Vec<MemoryReply>,
}

#[derive(Deserialize)]
struct MemoryReply {
    kind: String,
    data: Value,
    score: f32,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(flatten)]
    valid: ValidReply,
}

#[derive(Deserialize)]
struct FactReply {
    fact: String,
    score: f32,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(flatten)]
    valid: ValidReply,
}

/// The dates a reply may give a fact: kept only when both are real dates in order, since a
/// model's date is a reading, not a promise (the fact is kept without them).
#[derive(Deserialize, Default)]
struct ValidReply {
    #[serde(default)]
    valid_from: Option<String>,
    #[serde(default)]
    valid_until: Option<String>,
}

impl ValidReply {
    fn dates(&self) -> (Option<Timestamp>, Option<Timestamp>) {
        let read = |date: &Option<String>| date.as_deref().map(Timestamp::from_date);
        match (read(&self.valid_from), read(&self.valid_until)) {
            (Some(Err(_)), _) | (_, Some(Err(_))) => (None, None),
            (Some(Ok(from)), Some(Ok(until))) if from >= until => (None, None),
            (from, until) => (from.and_then(Result::ok), until.and_then(Result::ok)),
        }
    }
}

#[derive(Deserialize)]
struct SummaryReply {
    summary: String,
}

impl ModelExtractor {
    /// Extraction and summaries by `chat`.
    pub fn new(chat: OpenAiChat) -> Self {
        Self { chat }
    }

    /// `model` on the server the environment names (see [`OpenAiChat::from_env`]).
    pub fn from_env(model: &str) -> Result<Self> {
        OpenAiChat::from_env(model).map(Self::new)
    }
}

/// The messages as the model reads them: one `[YYYY-MM-DD] role: text` line each, the date
/// the message was written, from which the model reads relative dates.
fn transcript(messages: &[StoredMessage]) -> String {
    messages
        .iter()
        .map(|m| {
            let (year, month, day) = m.message.created_at.utc_date();
            format!(
                "[{year:04}-{month:02}-{day:02}] {}: {}",
                m.message.role.as_str(),
                m.message.text()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn reply<T: serde::de::DeserializeOwned>(value: Value, shape: &str) -> Result<T> {
    serde_json::from_value(value)
        .map_err(|e| MemoryError::model(COMPONENT, format!("the reply is not {shape}: {e}")))
}

/// The extraction prompt, with the registered kinds when there are any.
fn extract_prompt(kinds: &[KindSpec]) -> String {
    if kinds.is_empty() {
        return EXTRACT_PROMPT.to_owned();
    }
    let kinds: Vec<Value> = kinds
        .iter()
        .map(|k| json!({"kind": k.name, "schema": k.schema}))
        .collect();
    format!(
        "{EXTRACT_PROMPT} When the messages hold what one of these kinds describes, also return \
         it as a structured memory whose data follows the kind's JSON Schema, in a second list \
         of the same object: \"memories\": [{{\"kind\": \"…\", \"data\": {{…}}, \"score\": \
         0.0-1.0, \"tags\": [\"…\"]}}] (with \"valid_from\" and \"valid_until\" as for \
         facts). Kinds: {}",
        Value::from(kinds)
    )
}

fn valid_tags(tags: Vec<String>) -> Vec<String> {
    tags.into_iter()
        .filter(|t| validate_identifier("tag", t).is_ok())
        .collect()
}

#[async_trait]
impl FactExtractor for ModelExtractor {
    async fn extract(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
        messages: &[StoredMessage],
    ) -> Result<Vec<ExtractedFact>> {
        self.extract_into(scope, conversation, messages, &[]).await
    }

    fn model(&self) -> &str {
        self.chat.model()
    }

    async fn extract_into(
        &self,
        _scope: &Scope,
        _conversation: &ConversationId,
        messages: &[StoredMessage],
        kinds: &[KindSpec],
    ) -> Result<Vec<ExtractedFact>> {
        let value = self
            .chat
            .complete_json(&extract_prompt(kinds), &transcript(messages))
            .await?;
        let FactsReply { facts, memories } = reply(
            value,
            r#"{"facts": [{"fact", "score", "tags"?}], "memories"?: [{"kind", "data", "score"}]}"#,
        )?;
        let facts = facts.into_iter().filter(|f| f.score.is_finite()).map(|f| {
            let (valid_from, valid_until) = f.valid.dates();
            ExtractedFact {
                tags: valid_tags(f.tags),
                valid_from,
                valid_until,
                ..ExtractedFact::new(f.fact, f.score.clamp(0.0, 1.0))
            }
        });
        let memories = memories
            .into_iter()
            .filter(|m| m.score.is_finite())
            .map(|m| {
                let (valid_from, valid_until) = m.valid.dates();
                ExtractedFact {
                    tags: valid_tags(m.tags),
                    kind: Some(m.kind),
                    data: Some(m.data),
                    valid_from,
                    valid_until,
                    ..ExtractedFact::new("", m.score.clamp(0.0, 1.0))
                }
            });
        Ok(facts.chain(memories).collect())
    }
}

#[async_trait]
impl Summarizer for ModelExtractor {
    async fn summarize(
        &self,
        previous: Option<&str>,
        messages: &[StoredMessage],
    ) -> Result<String> {
        let input = match previous {
            Some(summary) => format!(
                "Summary so far:\n{summary}\n\nMessages since:\n{}",
                transcript(messages)
            ),
            None => format!("Messages:\n{}", transcript(messages)),
        };
        let value = self.chat.complete_json(SUMMARY_PROMPT, &input).await?;
        let SummaryReply { summary } = reply(value, r#"{"summary"}"#)?;
        Ok(summary)
    }
}
