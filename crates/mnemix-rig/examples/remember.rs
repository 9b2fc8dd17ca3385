//! A rig agent that remembers its user across runs of the program, on SQLite.
//!
//! ```text
//! cargo run -p mnemix-rig --example remember -- "My name is Ada."
//! cargo run -p mnemix-rig --example remember -- "What is my name?"
//! ```
//!
//! Each run is a new process: the second answers "Your name is Ada." because rig loads the
//! conversation from `./.mnemix/rig-example.db` (or `MNEMIX_URL`) before calling the
//! model and appends the turn after it. The model is scripted, so no network or key is needed:
//! it reads the history rig sends it, as a real model would.

use std::error::Error;

use mnemix_rig::ConversationHistory;
use rig_agent::AgentBuilder;
use rig_core::completion::{AssistantContent, CompletionRequest, CompletionResponse, Usage};
use rig_core::driver::{Exchange, Model, Opened, Opening, Transport};
use rig_core::error::ProviderError;
use rig_core::message::{Message, Origin, UserContent};
use rig_core::test_utils::{MockFrame, MockScript, MOCK_API, MOCK_PROVIDER};
use rig_core::wire::Mode;

/// The default database of this example.
pub const DEFAULT_URL: &str = "sqlite://.mnemix/rig-example.db";

/// One run of the program: open the store, prompt the agent once, return its answer.
pub async fn run(url: &str, prompt: &str) -> Result<String, Box<dyn Error>> {
    let store = mnemix::open(url).await?;
    let history = ConversationHistory::new(store.scope("rig-example", "ada")?).agent("remember");
    let agent = AgentBuilder::new(Model::new(MockScript::new("scripted"), Scripted))
        .memory(history)
        .conversation("chat")
        .build();
    let response = agent.prompt(prompt).run().await?;
    if let Some(append) = &response.memory_append {
        if !append.is_acknowledged() {
            return Err(format!("the turn was not stored: {append:?}").into());
        }
    }
    Ok(response.output())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let prompt = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "What is my name?".to_owned());
    let url = std::env::var("MNEMIX_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    if url == DEFAULT_URL {
        std::fs::create_dir_all(".mnemix")?;
    }
    println!("you:   {prompt}");
    println!("agent: {}", run(&url, &prompt).await?);
    Ok(())
}

/// A scripted model: it learns a name from "my name is …" anywhere in the history it is sent,
/// and answers "what is my name?" from it.
#[derive(Clone)]
struct Scripted;

impl Scripted {
    fn answer(history: &[Message]) -> String {
        let said: Vec<String> = history
            .iter()
            .filter_map(|message| match message {
                Message::User { content } => Some(content),
                _ => None,
            })
            .flatten()
            .filter_map(|content| match content {
                UserContent::Text(text) => Some(text.text.clone()),
                _ => None,
            })
            .collect();
        let name = said.iter().rev().find_map(|text| {
            let lower = text.to_lowercase();
            let at = lower.find("my name is ")? + "my name is ".len();
            let name = text[at..].trim().trim_end_matches(['.', '!']);
            (!name.is_empty()).then(|| name.to_owned())
        });
        let asked = said
            .last()
            .is_some_and(|text| text.to_lowercase().contains("what is my name"));
        match (asked, name) {
            (true, Some(name)) => format!("Your name is {name}."),
            (true, None) => "I don't know your name yet.".to_owned(),
            (false, Some(name)) => format!("Nice to meet you, {name}. I will remember that."),
            (false, None) => "Noted.".to_owned(),
        }
    }
}

impl Transport<MockScript> for Scripted {
    fn send(&self, request: CompletionRequest, exchange: Exchange) -> Opening<MockFrame> {
        if exchange.mode != Mode::Unary {
            return Opening::failed(ProviderError::Provider(
                "the scripted model does not stream".to_owned(),
            ));
        }
        let text = Self::answer(&request.chat_history);
        let response = CompletionResponse::new(
            vec![AssistantContent::text(text)],
            Usage::default(),
            Origin::new(MOCK_API, MOCK_PROVIDER, "scripted"),
            serde_json::Value::Null,
        );
        let frame = MockFrame::Response(Box::new(response));
        Opening::ready(Opened::new(futures::stream::iter([Ok(frame)])))
    }
}
