//! Scenarios of the memory engine ([`Memory`]): the tiers composed over the backend under test.
//!
//! The engine uses only the contracts, so these scenarios hold it to the same behaviour on every
//! backend. The summarizer and fact extractor are scripted: they record what they were shown.
//!
//! The scenarios follow the engine's modules, one file per tier (and one for a whole turn, one
//! for sessions, one for the caches); the scripted collaborators they share are here.

mod caches;
mod extraction;
mod facts;
mod knowledge;
mod recall;
mod session;
mod turn;
mod window;
mod working;

pub use caches::*;
pub use extraction::*;
pub use facts::*;
pub use knowledge::*;
pub use recall::*;
pub use session::*;
pub use turn::*;
pub use window::*;
pub use working::*;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use mnemix_core::embed::Embedder;
use mnemix_core::{ConversationId, Message, Result, Role, Scope, StoredMessage};
use mnemix_engine::config::MemoryConfig;
use mnemix_engine::{ExtractedFact, FactExtractor, Memory, Summarizer};

use crate::support::{text, ResultExt};
use crate::Ctx;

/// A summarizer whose summary is the list of seqs it has covered, so a test can read off
/// exactly what was summarised; it counts its calls.
#[derive(Default)]
struct SeqSummarizer {
    calls: AtomicUsize,
}

#[async_trait]
impl Summarizer for SeqSummarizer {
    async fn summarize(
        &self,
        previous: Option<&str>,
        messages: &[StoredMessage],
    ) -> Result<String> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let seqs = messages.iter().map(|m| m.seq.to_string());
        Ok(previous
            .map(str::to_owned)
            .into_iter()
            .chain(seqs)
            .collect::<Vec<_>>()
            .join(","))
    }
}

/// An extractor that turns every user message saying `my …` into a fact (confidence from a
/// `[0.xx]` suffix, default 0.9), records every message id it is shown, and fails on demand.
#[derive(Default)]
struct ScriptedExtractor {
    seen: Mutex<Vec<String>>,
    fail: AtomicBool,
}

impl ScriptedExtractor {
    fn seen(&self) -> Vec<String> {
        self.seen.lock().expect("not poisoned").clone()
    }
}

#[async_trait]
impl FactExtractor for ScriptedExtractor {
    async fn extract(
        &self,
        _scope: &Scope,
        _conversation: &ConversationId,
        messages: &[StoredMessage],
    ) -> Result<Vec<ExtractedFact>> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(mnemix_core::MemoryError::model(
                "fact extractor",
                "the extraction model timed out",
            ));
        }
        let mut seen = self.seen.lock().expect("not poisoned");
        let mut facts = Vec::new();
        for stored in messages {
            seen.push(stored.message.id.as_str().to_owned());
            let said = stored.message.text();
            if stored.message.role != Role::User {
                continue;
            }
            if let Some(at) = said.find("my ") {
                let fact = &said[at..];
                let (fact, confidence) = match fact.split_once(" [") {
                    Some((fact, tail)) => (
                        fact,
                        tail.trim_end_matches(']').parse().expect("a confidence"),
                    ),
                    None => (fact, 0.9),
                };
                facts.push(ExtractedFact::new(fact, confidence));
            }
        }
        Ok(facts)
    }
}

fn config() -> MemoryConfig {
    let mut config = MemoryConfig::default();
    config.conversation.enabled = true;
    config
}

fn memory(ctx: &Ctx, config: MemoryConfig) -> Memory {
    Memory::builder(ctx.backend_arc())
        .config(config)
        .build()
        .must("build memory")
}

fn memory_embedding(ctx: &Ctx, config: MemoryConfig, embedder: &Arc<ScriptedEmbedder>) -> Memory {
    Memory::builder(ctx.backend_arc())
        .config(config)
        .embedder(embedder.clone())
        .build()
        .must("build memory")
}

fn seqs(messages: &[StoredMessage]) -> Vec<u64> {
    messages.iter().map(|m| m.seq).collect()
}

fn joined(range: std::ops::RangeInclusive<u64>) -> String {
    range.map(|s| s.to_string()).collect::<Vec<_>>().join(",")
}

/// What the user says in turn `i` of the scripted conversation: four turns state facts of
/// falling confidence, one states a fact below the threshold.
fn user_line(i: usize) -> String {
    match i {
        3 => "turn 3: my favourite colour is teal [0.95]".to_owned(),
        6 => "turn 6: my favourite city is Lisbon [0.9]".to_owned(),
        9 => "turn 9: my favourite pet is a cat named Miso [0.85]".to_owned(),
        12 => "turn 12: my favourite food is ramen [0.8]".to_owned(),
        15 => "turn 15: my favourite sport might be golf [0.3]".to_owned(),
        i => format!("turn {i}: tell me something about rivers"),
    }
}

fn turn(i: usize) -> Vec<Message> {
    vec![
        text(&format!("u{i}"), Role::User, &user_line(i)),
        text(&format!("a{i}"), Role::Assistant, &format!("answer {i}")),
    ]
}

/// An embedder whose vectors the scenario chooses: a text gets the vector of the first rule
/// whose needle it contains, the last axis otherwise.
struct ScriptedEmbedder {
    rules: Vec<(&'static str, [f32; 4])>,
}

#[async_trait]
impl Embedder for ScriptedEmbedder {
    fn model_id(&self) -> &'static str {
        "scripted"
    }

    fn dims(&self) -> usize {
        4
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        Ok(texts
            .iter()
            .map(|text| {
                self.rules
                    .iter()
                    .find(|(needle, _)| text.contains(needle))
                    .map_or([0.0, 0.0, 0.0, 1.0], |(_, vector)| *vector)
                    .to_vec()
            })
            .collect())
    }
}
