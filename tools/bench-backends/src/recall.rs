//! Q1, retrieval quality: how much of what answers a question the memory puts into the context.
//!
//! The data is a long-conversation benchmark in LoCoMo's JSON layout (conversations of dated
//! sessions of turns; questions naming the turns that answer them, by category). Each
//! conversation is stored through the contracts on the embedded SQLite backend, committed
//! session by session through [`Memory::commit`] (which embeds the messages), and each question
//! is asked through [`Memory::prepare`]; the figure is the share of evidence turns among the
//! context's messages. Beside it, each ranking alone over all turns of the conversation —
//! semantic, the one lexical definition, their hybrid ([`rank_facts`]), and SQLite FTS5's bm25,
//! what a user would reach for instead — reports recall@k.
//!
//! The dataset's license forbids copying it into this repository: it is read from a path given
//! at run time, and the report holds aggregate figures only.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use mnemix_core::adapter::{rank_facts, reciprocal_rank_fusion};
use mnemix_core::embed::Embedder;
use mnemix_core::{
    ConversationId, MemoryBackend, Message, MessageId, NewConversation, Result as MemoryResult,
    Role, Scope, Timestamp,
};
use mnemix_core::{Fact, NewFact, RecallQuery};
use mnemix_engine::config::{Language, MemoryConfig, MergeStrategy};
use mnemix_engine::{embedded_text, ApproxTokenCounter, Memory, TokenCounter};
use serde::Serialize;
use serde_json::{json, Value};

/// A turn's place: session number and turn number (`D3:12` is `(3, 12)`).
pub type DiaId = (u32, u32);

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// Its id.
    pub dia: DiaId,
    /// Who said it.
    pub speaker: String,
    /// What was said, with a shared photo's caption as `[shares a photo: …]`.
    pub text: String,
    /// When its session took place.
    pub at: Timestamp,
}

/// A question and the turns that answer it.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// The question.
    pub text: String,
    /// The evidence turns (ids normalised; ids naming no turn are dropped and counted).
    pub evidence: Vec<DiaId>,
    /// 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial.
    pub category: u8,
}

/// A conversation with its questions.
#[derive(Debug, Clone, PartialEq)]
pub struct Dialogue {
    /// The sample id (`conv-26`).
    pub id: String,
    /// The first speaker (stored as the user; the other as the assistant).
    pub speaker_a: String,
    /// Every turn, in order.
    pub turns: Vec<Turn>,
    /// Its questions.
    pub questions: Vec<Question>,
    /// Evidence ids that named no turn of the conversation.
    pub unknown_evidence: usize,
}

/// The categories reported, with their names.
pub const CATEGORIES: [(u8, &str); 4] = [
    (1, "multi-hop"),
    (2, "temporal"),
    (3, "open-domain"),
    (4, "single-hop"),
];

/// Reads a LoCoMo-layout file.
pub fn read(path: &Path) -> Result<Vec<Dialogue>, String> {
    let json = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&json)
}

/// Parses LoCoMo's JSON: an array of `{sample_id, conversation, qa}`.
pub fn parse(json: &str) -> Result<Vec<Dialogue>, String> {
    let value: Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
    let samples = value
        .as_array()
        .ok_or("expected an array of conversations")?;
    samples
        .iter()
        .enumerate()
        .map(|(i, s)| dialogue(i, s))
        .collect()
}

fn dialogue(index: usize, sample: &Value) -> Result<Dialogue, String> {
    let id = sample["sample_id"]
        .as_str()
        .map_or_else(|| format!("conversation-{index}"), str::to_owned);
    let conversation = sample["conversation"]
        .as_object()
        .ok_or_else(|| format!("{id}: no conversation"))?;
    let speaker_a = conversation
        .get("speaker_a")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut sessions: BTreeMap<u32, &Vec<Value>> = BTreeMap::new();
    for (key, value) in conversation {
        if let (Some(n), Some(turns)) = (
            key.strip_prefix("session_").and_then(|n| n.parse().ok()),
            value.as_array(),
        ) {
            sessions.insert(n, turns);
        }
    }
    let mut turns = Vec::new();
    for (n, session) in sessions {
        let date = conversation
            .get(&format!("session_{n}_date_time"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let at = session_time(date).ok_or_else(|| format!("{id}: session {n} date {date:?}"))?;
        for turn in session {
            let dia = turn["dia_id"]
                .as_str()
                .and_then(dia_id)
                .ok_or_else(|| format!("{id}: a turn of session {n} has no dia_id"))?;
            let mut text = turn["text"].as_str().unwrap_or_default().to_owned();
            if let Some(caption) = turn["blip_caption"].as_str() {
                write!(text, " [shares a photo: {caption}]").expect("a String");
            }
            turns.push(Turn {
                dia,
                speaker: turn["speaker"].as_str().unwrap_or_default().to_owned(),
                text,
                at,
            });
        }
    }
    let known: HashSet<DiaId> = turns.iter().map(|t| t.dia).collect();
    let mut unknown_evidence = 0;
    let mut questions = Vec::new();
    for qa in sample["qa"].as_array().into_iter().flatten() {
        let mut evidence = Vec::new();
        for item in qa["evidence"].as_array().into_iter().flatten() {
            for dia in item.as_str().map(evidence_ids).unwrap_or_default() {
                if !known.contains(&dia) {
                    unknown_evidence += 1;
                } else if !evidence.contains(&dia) {
                    evidence.push(dia);
                }
            }
        }
        questions.push(Question {
            text: qa["question"].as_str().unwrap_or_default().to_owned(),
            evidence,
            category: qa["category"]
                .as_u64()
                .and_then(|c| u8::try_from(c).ok())
                .unwrap_or(0),
        });
    }
    Ok(Dialogue {
        id,
        speaker_a,
        turns,
        questions,
        unknown_evidence,
    })
}

/// `D3:12` as `(3, 12)`; also the data's variants `D:3:12` and `D03:012`.
pub fn dia_id(text: &str) -> Option<DiaId> {
    let rest = text.trim().strip_prefix('D')?.trim_start_matches(':');
    let (session, turn) = rest.split_once(':')?;
    Some((session.trim().parse().ok()?, turn.trim().parse().ok()?))
}

/// The ids in one evidence string, which may hold several (`"D8:6; D9:17"`).
pub fn evidence_ids(text: &str) -> Vec<DiaId> {
    text.split([';', ','])
        .flat_map(str::split_whitespace)
        .filter_map(dia_id)
        .collect()
}

/// A session's `1:56 pm on 8 May, 2023` as a UTC timestamp.
pub fn session_time(text: &str) -> Option<Timestamp> {
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let (clock, date) = text.split_once(" on ")?;
    let (hm, meridiem) = clock.trim().split_once(' ')?;
    let (h, m) = hm.split_once(':')?;
    let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    let h = match (meridiem.to_ascii_lowercase().as_str(), h) {
        ("am", 12) => 0,
        ("am", h) => h,
        ("pm", 12) => 12,
        ("pm", h) => h + 12,
        _ => return None,
    };
    let mut words = date.split([' ', ',']).filter(|w| !w.is_empty());
    let day: u32 = words.next()?.parse().ok()?;
    let month = words.next()?;
    let year: i64 = words.next()?.parse().ok()?;
    let month = MONTHS
        .iter()
        .position(|m| month.to_ascii_lowercase().starts_with(m))? as u32
        + 1;
    Some(Timestamp::from_utc(year, month, day, h, m))
}

/// An embedder that remembers every vector it made, so the rankings alone reuse the vectors
/// the engine computed on commit instead of running the model twice.
pub struct Remembering {
    inner: Arc<dyn Embedder>,
    seen: Mutex<HashMap<String, Vec<f32>>>,
}

impl Remembering {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Embedder>) -> Self {
        Self {
            inner,
            seen: Mutex::new(HashMap::new()),
        }
    }

    fn known(&self, text: &str) -> Option<Vec<f32>> {
        self.seen.lock().expect("not poisoned").get(text).cloned()
    }
}

#[async_trait]
impl Embedder for Remembering {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn dims(&self) -> usize {
        self.inner.dims()
    }

    async fn embed(&self, texts: &[String]) -> MemoryResult<Vec<Vec<f32>>> {
        let missing: Vec<String> = texts
            .iter()
            .filter(|t| self.known(t).is_none())
            .cloned()
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        if !missing.is_empty() {
            let vectors = self.inner.embed(&missing).await?;
            let mut seen = self.seen.lock().expect("not poisoned");
            seen.extend(missing.into_iter().zip(vectors));
        }
        Ok(texts
            .iter()
            .map(|t| self.known(t).expect("embedded above"))
            .collect())
    }
}

/// How a turn's text is put to a ranking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextForm {
    /// The message text alone.
    Bare,
    /// The text the engine embeds ([`embedded_text`]: `Speaker (date): text`).
    Embedded,
}

impl TextForm {
    fn name(self) -> &'static str {
        match self {
            Self::Bare => "text alone",
            Self::Embedded => "speaker (date): text",
        }
    }

    fn of(self, message: &Message) -> String {
        match self {
            Self::Bare => message.text(),
            Self::Embedded => embedded_text(message),
        }
    }
}

/// A `prepare` configuration measured.
#[derive(Debug, Clone)]
pub struct Setting {
    /// Its name in the report.
    pub name: String,
    /// The engine's configuration.
    pub config: MemoryConfig,
}

impl Setting {
    /// The conversation window and semantic recall (the tiers Q1 measures) as given.
    pub fn recall(name: &str, window: usize, limit: usize, threshold: f32) -> Self {
        let mut config = MemoryConfig::default();
        config.conversation.enabled = true;
        config.conversation.window_size = Some(window);
        config.semantic_recall.enabled = true;
        config.semantic_recall.limit = limit;
        config.semantic_recall.threshold = threshold;
        config.semantic_recall.merge = MergeStrategy::Prepend;
        Self {
            name: name.to_owned(),
            config,
        }
    }

    /// The settings every run measures: the engine's defaults with semantic recall on, as the
    /// README configures them (window 6, limit 14 of the 100 nearest and the 100 best by
    /// words, fused, over English terms, vectors carrying the conversation before them: a
    /// context of at most 20 turns), the same with each message embedded alone, the same
    /// matching words as written, the same recalling by the embedding alone (candidates =
    /// limit), the same 20 turns as a window of 4 and 16 recalled, and the README's settings
    /// until Q1 was measured (limit 3, threshold 0.6).
    pub fn standard() -> Vec<Self> {
        let mut defaults = MemoryConfig::default();
        defaults.semantic_recall.enabled = true;
        let (window, limit) = (defaults.window_size(), defaults.semantic_recall.limit);
        let recall = &defaults.semantic_recall;
        let threshold = recall.threshold;
        let named = format!(
            "defaults: window {window}, limit {limit} of {} candidates, context weight {}, {}",
            recall.candidate_count(),
            recall.context_weight,
            recall
                .language
                .map_or("words as written".to_owned(), |l| format!("{l:?}"))
        );
        vec![
            Self::recall(&named, window, limit, threshold),
            Self::recall(
                "defaults, each message embedded alone: context weight 0",
                window,
                limit,
                threshold,
            )
            .context_weight(0.0),
            Self::recall(
                "defaults, words as written: language null",
                window,
                limit,
                threshold,
            )
            .language(None),
            Self::recall(
                "embedding alone: candidates = limit",
                window,
                limit,
                threshold,
            )
            .candidates(limit),
            Self::recall("window 4, limit 16", 4, 16, threshold),
            Self::recall(
                "window 10, limit 3, threshold 0.6 (README before)",
                10,
                3,
                0.6,
            ),
        ]
    }

    /// The same with messages' vectors carrying `weight` of the conversation before them.
    #[must_use]
    pub fn context_weight(mut self, weight: f32) -> Self {
        self.config.semantic_recall.context_weight = weight;
        self
    }

    /// The same with the lexical side of message recall in `language`.
    #[must_use]
    pub fn language(mut self, language: Option<Language>) -> Self {
        self.config.semantic_recall.language = language;
        self
    }

    /// The same with `candidates` proposed by each ranking.
    #[must_use]
    pub fn candidates(mut self, candidates: usize) -> Self {
        self.config.semantic_recall.candidates = candidates;
        self
    }
}

/// Evidence found out of evidence asked, per category.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Tally {
    /// Per category: (found, asked).
    pub by_category: BTreeMap<u8, (usize, usize)>,
}

impl Tally {
    fn add(&mut self, category: u8, found: usize, asked: usize) {
        let entry = self.by_category.entry(category).or_default();
        entry.0 += found;
        entry.1 += asked;
    }

    /// The share found in `category`, or over categories 1–4 when `None`.
    pub fn share(&self, category: Option<u8>) -> f64 {
        let (found, asked) = self
            .by_category
            .iter()
            .filter(|(c, _)| category.map_or(CATEGORIES.iter().any(|(k, _)| k == *c), |k| k == **c))
            .fold((0, 0), |(f, a), (_, (found, asked))| (f + found, a + asked));
        if asked == 0 {
            0.0
        } else {
            found as f64 / asked as f64
        }
    }
}

/// What `prepare` put into the context under one setting.
#[derive(Debug, Clone, Serialize)]
pub struct PrepareFigures {
    /// The embedder.
    pub embedder: String,
    /// The setting's name.
    pub setting: String,
    /// Evidence turns in the context.
    pub evidence: Tally,
    /// The same per conversation, in the order of the dialogues.
    pub by_dialogue: Vec<Tally>,
    /// The median time of one `prepare`, in milliseconds, the question's vector remembered.
    pub prepare_p50_ms: f64,
    /// The median time of embedding one question, in milliseconds.
    pub embedding_p50_ms: f64,
    /// Every context, as the seqs of its messages in order, question after question: what two
    /// backends must agree on.
    #[serde(skip)]
    pub contexts: Vec<Vec<u64>>,
    /// Mean messages in the context.
    pub mean_turns: f64,
    /// Mean tokens of those messages (the engine's approximate counter).
    pub mean_tokens: f64,
}

/// One ranking alone: evidence in its top k.
#[derive(Debug, Clone, Serialize)]
pub struct RankingFigures {
    /// The embedder (empty for rankings that use none).
    pub embedder: String,
    /// The ranking.
    pub ranking: String,
    /// The text form ranked.
    pub text: String,
    /// Per k (5, 10, 20): evidence in the top k.
    pub at: BTreeMap<usize, Tally>,
}

/// Ranks a dialogue's turns (by index) for a question in a text form, at most `limit`; `None`
/// when bm25 is unavailable.
pub type Bm25Ranking<'a> = dyn Fn(usize, &str, TextForm, usize) -> Option<Vec<usize>> + 'a;

/// The k of recall@k reported.
pub const KS: [usize; 3] = [5, 10, 20];

/// Stores every dialogue on `backend` through a [`Memory`] with `embedder`, asks every question
/// under each setting, and ranks each question's turns alone; `bm25` ranks a dialogue's turns
/// (by index) for a question, `None` when FTS5 is unavailable.
pub async fn evaluate(
    dialogues: &[Dialogue],
    backend: Arc<dyn MemoryBackend>,
    embedder: Arc<Remembering>,
    embedder_name: &str,
    settings: &[Setting],
    bm25: &Bm25Ranking<'_>,
    dump: Option<&Path>,
) -> Result<(Vec<PrepareFigures>, Vec<RankingFigures>), String> {
    let err = |e: mnemix_core::MemoryError| e.to_string();
    let memories: Vec<Memory> = settings
        .iter()
        .map(|s| {
            Memory::builder(backend.clone())
                .config(s.config.clone())
                .embedder(embedder.clone())
                .build()
                .map_err(err)
        })
        .collect::<Result<_, _>>()?;
    let counter = ApproxTokenCounter;
    let mut prepared: Vec<(Tally, usize, usize, usize)> =
        vec![(Tally::default(), 0, 0, 0); settings.len()];
    let mut by_dialogue: Vec<Vec<Tally>> =
        vec![vec![Tally::default(); dialogues.len()]; settings.len()];
    let mut timings: Vec<Vec<f64>> = vec![Vec::new(); settings.len()];
    let mut embedding_ms: Vec<f64> = Vec::new();
    let mut contexts: Vec<Vec<Vec<u64>>> = vec![Vec::new(); settings.len()];
    let forms = [TextForm::Bare, TextForm::Embedded];
    let rankings = ["semantic", "lexical", "hybrid", "bm25", "semantic + bm25"];
    let mut ranked: BTreeMap<(usize, usize), BTreeMap<usize, Tally>> = BTreeMap::new();
    for (index, dialogue) in dialogues.iter().enumerate() {
        // Each setting stores the conversation in its own scope: what a commit stores (the
        // vectors' context) is a setting too. The embedder remembers its vectors, so the model
        // runs once per text whatever the number of settings.
        let scopes: Vec<Scope> = (0..settings.len())
            .map(|s| Scope::new("locomo", format!("d{index}-s{s}")).map_err(err))
            .collect::<Result<_, _>>()?;
        let id = ConversationId::new(format!("dialogue-{index}")).map_err(err)?;
        let scope = &scopes[0];
        let said = said_in(dialogue)?;
        for (memory, scope) in memories.iter().zip(&scopes) {
            store(memory, scope, &id, dialogue, &said).await?;
        }
        // Turns are stored in order from seq 1.
        let seq_to_dia: Vec<DiaId> = dialogue.turns.iter().map(|t| t.dia).collect();
        // The rankings alone rank every turn as a fact of the turn's text in each form.
        let mut candidates: Vec<Vec<Fact>> = Vec::new();
        for form in forms {
            let texts: Vec<String> = said.iter().map(|m| form.of(m)).collect();
            let vectors = embedder.embed(&texts).await.map_err(err)?;
            candidates.push(
                dialogue
                    .turns
                    .iter()
                    .zip(texts.into_iter().zip(vectors))
                    .map(|(turn, (text, vector))| {
                        let mut fact = NewFact::new(text);
                        fact.embedding = Some(vector);
                        let mut fact = fact.into_fact(scope, turn.at);
                        // Turn order breaks ties the way recency would.
                        fact.key = Some(format!("{}-{}", turn.dia.0, turn.dia.1));
                        fact
                    })
                    .collect(),
            );
        }
        let index_of: HashMap<DiaId, usize> = dialogue
            .turns
            .iter()
            .enumerate()
            .map(|(i, t)| (t.dia, i))
            .collect();
        if let Some(dir) = dump {
            dump_dialogue(dir, embedder_name, dialogue, &said, &seq_to_dia, &embedder).await?;
        }
        for question in &dialogue.questions {
            let reported = CATEGORIES.iter().any(|(c, _)| *c == question.category);
            if question.evidence.is_empty() || !reported {
                continue;
            }
            let evidence: HashSet<DiaId> = question.evidence.iter().copied().collect();
            let count = |dias: &mut dyn Iterator<Item = DiaId>| {
                dias.collect::<HashSet<_>>().intersection(&evidence).count()
            };
            // The question is embedded once, timed apart: every `prepare` below finds its
            // vector remembered, so their times are the memory's own.
            let started = std::time::Instant::now();
            let vector = embedder
                .embed(std::slice::from_ref(&question.text))
                .await
                .map_err(err)?
                .remove(0);
            embedding_ms.push(started.elapsed().as_secs_f64() * 1e3);
            for (s, memory) in memories.iter().enumerate() {
                let started = std::time::Instant::now();
                let context = memory
                    .prepare(&scopes[s], &id, &question.text)
                    .await
                    .map_err(err)?;
                timings[s].push(started.elapsed().as_secs_f64() * 1e3);
                contexts[s].push(context.messages.iter().map(|m| m.seq).collect());
                let found = count(&mut context.messages.iter().filter_map(|m| {
                    seq_to_dia
                        .get(usize::try_from(m.seq).ok()?.checked_sub(1)?)
                        .copied()
                }));
                let tokens: usize = context
                    .messages
                    .iter()
                    .map(|m| counter.count(&m.message.text()))
                    .sum();
                let entry = &mut prepared[s];
                entry.0.add(question.category, found, evidence.len());
                by_dialogue[s][index].add(question.category, found, evidence.len());
                entry.1 += context.messages.len();
                entry.2 += tokens;
                entry.3 += 1;
            }
            let top = *KS.iter().max().expect("ks");
            for (f, form) in forms.iter().enumerate() {
                let by_fact = |query: RecallQuery| -> Vec<usize> {
                    rank_facts(&query, candidates[f].iter().cloned())
                        .into_iter()
                        .filter_map(|hit| {
                            let key = hit.fact.key?;
                            let (s, t) = key.split_once('-')?;
                            index_of.get(&(s.parse().ok()?, t.parse().ok()?)).copied()
                        })
                        .collect()
                };
                let query = |text: bool, vector: Option<&Vec<f32>>| {
                    let mut value = RecallQuery::default();
                    value.text = text.then(|| question.text.clone());
                    value.vector = vector.cloned();
                    value.limit = Some(top);
                    value
                };
                let semantic = by_fact(query(false, Some(&vector)));
                let lexical = by_fact(query(true, None));
                let hybrid = by_fact(query(true, Some(&vector)));
                let bm25_hits = bm25(index, &question.text, *form, top);
                let fused = bm25_hits.as_ref().map(|b| fuse(&[&semantic, b], top));
                let lists = [
                    Some(semantic),
                    Some(lexical),
                    Some(hybrid),
                    bm25_hits,
                    fused,
                ];
                for (r, list) in lists.iter().enumerate() {
                    let Some(list) = list else { continue };
                    for k in KS {
                        let found = count(&mut list.iter().take(k).map(|&i| dialogue.turns[i].dia));
                        ranked.entry((r, f)).or_default().entry(k).or_default().add(
                            question.category,
                            found,
                            evidence.len(),
                        );
                    }
                }
            }
        }
    }
    let embedding_p50_ms = median(&mut embedding_ms);
    let prepare = settings
        .iter()
        .zip(prepared)
        .zip(by_dialogue.into_iter().zip(timings).zip(contexts))
        .map(
            |(
                (setting, (evidence, turns, tokens, asked)),
                ((by_dialogue, mut timings), contexts),
            )| PrepareFigures {
                embedder: embedder_name.to_owned(),
                setting: setting.name.clone(),
                evidence,
                by_dialogue,
                prepare_p50_ms: median(&mut timings),
                embedding_p50_ms,
                contexts,
                mean_turns: turns as f64 / asked.max(1) as f64,
                mean_tokens: tokens as f64 / asked.max(1) as f64,
            },
        )
        .collect();
    let rankings = ranked
        .into_iter()
        .map(|((r, f), at)| RankingFigures {
            embedder: if rankings[r] == "lexical" || rankings[r] == "bm25" {
                String::new()
            } else {
                embedder_name.to_owned()
            },
            ranking: rankings[r].to_owned(),
            text: forms[f].name().to_owned(),
            at,
        })
        .collect();
    Ok((prepare, rankings))
}

/// Writes `dialogue` as recall sees it into `dir/{embedder}-{id}.json`, to try rankings
/// offline: each turn's id, speaker and text as embedded with its vector (before the context
/// weight), and each question's text, category, evidence (as turn indexes), vector, and the
/// positions of its English query terms each turn holds (`held`, `qlen` terms in all: what
/// [`relevances_of_held`](mnemix_core::lexical::relevances_of_held) takes). It holds the
/// dataset's text: keep it out of the repository.
async fn dump_dialogue(
    dir: &Path,
    embedder_name: &str,
    dialogue: &Dialogue,
    said: &[Message],
    seq_to_dia: &[DiaId],
    embedder: &Remembering,
) -> Result<(), String> {
    use mnemix_engine::terms::{QuestionTerms, TermsCache};
    let err = |e: mnemix_core::MemoryError| e.to_string();
    let texts: Vec<String> = said.iter().map(embedded_text).collect();
    let vectors = embedder.embed(&texts).await.map_err(err)?;
    let terms = TermsCache::new(Some(Language::English), 1 << 24);
    let mut questions = Vec::new();
    for question in &dialogue.questions {
        let query = QuestionTerms::of_question(&question.text, Some(Language::English));
        let held = terms.held_terms_of_each(&query, texts.iter().map(String::as_str));
        let vector = embedder
            .embed(std::slice::from_ref(&question.text))
            .await
            .map_err(err)?
            .remove(0);
        let evidence: Vec<Option<usize>> = question
            .evidence
            .iter()
            .map(|dia| seq_to_dia.iter().position(|d| d == dia))
            .collect();
        questions.push(json!({
            "text": question.text,
            "category": question.category,
            "evidence": evidence,
            "vector": vector,
            "held": held,
            "qlen": query.len(),
        }));
    }
    let turns: Vec<Value> = dialogue
        .turns
        .iter()
        .zip(texts.iter().zip(&vectors))
        .map(|(turn, (text, vector))| {
            json!({"dia": [turn.dia.0, turn.dia.1], "speaker": turn.speaker, "text": text, "vector": vector})
        })
        .collect();
    let dump = json!({"id": dialogue.id, "turns": turns, "questions": questions});
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    std::fs::write(
        dir.join(format!("{embedder_name}-{}.json", dialogue.id)),
        dump.to_string(),
    )
    .map_err(|e| e.to_string())
}

/// What one stage of `prepare` adds to a turn: the median `prepare` with the tiers up to it on.
#[derive(Debug, Clone, Serialize)]
pub struct StageCost {
    /// The tiers on.
    pub stage: String,
    /// The median time of one `prepare`, in milliseconds, the question's vector remembered.
    pub prepare_p50_ms: f64,
}

/// The cost of each stage of `prepare` over `dialogue` stored on `backend` (one commit per
/// session) with `facts` facts of its subject (texts of the dialogue's turns, numbered; the
/// hashing embedder's vectors), asking each of its questions once per stage: the window alone,
/// then the nearest messages recalled (candidates = limit), then the defaults' pool of the
/// nearest and the best by words, then facts recalled by words and vector.
pub async fn stage_costs(
    dialogue: &Dialogue,
    backend: Arc<dyn MemoryBackend>,
    facts: usize,
) -> Result<Vec<StageCost>, String> {
    let err = |e: mnemix_core::MemoryError| e.to_string();
    let embedder = Arc::new(Remembering::new(Arc::new(
        mnemix_core::embed::HashingEmbedder::new(384),
    )));
    let scope = Scope::new("locomo", "cost").map_err(err)?;
    let id = ConversationId::new("dialogue").map_err(err)?;
    let mut defaults = MemoryConfig::default();
    defaults.conversation.enabled = true;
    defaults.semantic_recall.enabled = true;
    let memory = |config: &MemoryConfig| {
        Memory::builder(backend.clone())
            .config(config.clone())
            .embedder(embedder.clone())
            .build()
            .map_err(err)
    };
    store(
        &memory(&defaults)?,
        &scope,
        &id,
        dialogue,
        &said_in(dialogue)?,
    )
    .await?;
    for i in 0..facts {
        let turn = &dialogue.turns[i % dialogue.turns.len()];
        let text = format!("{} ({i})", turn.text);
        let mut fact = NewFact::new(text.clone());
        fact.embedding = Some(embedder.embed(&[text]).await.map_err(err)?.remove(0));
        backend
            .remember(&scope, fact, mnemix_core::RememberOptions::default())
            .await
            .map_err(err)?;
    }
    let mut nearest = defaults.clone();
    nearest.semantic_recall.candidates = nearest.semantic_recall.limit;
    let mut window = defaults.clone();
    window.semantic_recall.enabled = false;
    window.conversation.window_size = Some(defaults.window_size());
    let mut with_facts = defaults.clone();
    with_facts.facts.enabled = true;
    let stages = [
        ("the window".to_owned(), window),
        (
            "+ the nearest messages (candidates = limit)".to_owned(),
            nearest,
        ),
        (
            "+ the messages best by their words (the defaults)".to_owned(),
            defaults,
        ),
        (
            format!("+ facts: {facts} of the subject, by words and vector"),
            with_facts,
        ),
    ];
    let questions: Vec<String> = dialogue.questions.iter().map(|q| q.text.clone()).collect();
    embedder.embed(&questions).await.map_err(err)?;
    let mut costs = Vec::new();
    for (stage, config) in &stages {
        let memory = memory(config)?;
        // Once unmeasured: the first turn of a tier fills what it holds.
        memory
            .prepare(&scope, &id, &questions[0])
            .await
            .map_err(err)?;
        let mut times = Vec::with_capacity(questions.len());
        for question in &questions {
            let started = std::time::Instant::now();
            let context = memory.prepare(&scope, &id, question).await.map_err(err)?;
            times.push(started.elapsed().as_secs_f64() * 1e3);
            std::hint::black_box(context);
        }
        costs.push(StageCost {
            stage: stage.clone(),
            prepare_p50_ms: median(&mut times),
        });
    }
    Ok(costs)
}

/// Every turn of `dialogue` as the message stored, in order.
fn said_in(dialogue: &Dialogue) -> Result<Vec<Message>, String> {
    dialogue
        .turns
        .iter()
        .map(|turn| message(dialogue, turn))
        .collect()
}

/// Creates the conversation `id` in `scope` and commits `said` (`dialogue`'s turns) through
/// `memory`, one commit per session, as an agent would store each sitting.
async fn store(
    memory: &Memory,
    scope: &Scope,
    id: &ConversationId,
    dialogue: &Dialogue,
    said: &[Message],
) -> Result<(), String> {
    let err = |e: mnemix_core::MemoryError| e.to_string();
    let new = NewConversation::default().with_id(id.clone());
    memory
        .backend()
        .create_conversation(scope, new)
        .await
        .map_err(err)?;
    let mut start = 0;
    while start < said.len() {
        let session = dialogue.turns[start].dia.0;
        let end = dialogue.turns[start..]
            .iter()
            .position(|t| t.dia.0 != session)
            .map_or(said.len(), |n| start + n);
        memory
            .commit(scope, id, said[start..end].to_vec())
            .await
            .map_err(err)?;
        start = end;
    }
    Ok(())
}

/// The median of `values` (0 when there is none).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// Turn `turn` as the message stored: the first speaker is the user, the other the
/// assistant, the speaker's name in `metadata.name`, created when its session began.
fn message(dialogue: &Dialogue, turn: &Turn) -> Result<Message, String> {
    let role = if turn.speaker == dialogue.speaker_a {
        Role::User
    } else {
        Role::Assistant
    };
    let mut message = Message::new(role, vec![mnemix_core::Part::text(turn.text.clone())]);
    message.id =
        MessageId::new(format!("d{}-{}", turn.dia.0, turn.dia.1)).map_err(|e| e.to_string())?;
    message.created_at = turn.at;
    message.metadata = json!({ "name": turn.speaker })
        .as_object()
        .cloned()
        .unwrap_or_default();
    Ok(message)
}

/// Reciprocal-rank fusion (the facts' hybrid) of ranked lists of turn indexes.
fn fuse(lists: &[&Vec<usize>], limit: usize) -> Vec<usize> {
    let score = reciprocal_rank_fusion(lists.iter().map(|list| list.as_slice()));
    let mut fused: Vec<(usize, f64)> = score.into_iter().collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    fused.into_iter().take(limit).map(|(i, _)| i).collect()
}

/// SQLite FTS5's bm25 over each dialogue's turns: one table per dialogue and text form.
pub struct Bm25 {
    db: Mutex<rusqlite::Connection>,
}

impl Bm25 {
    /// Indexes every dialogue's turns; `None` when this SQLite has no FTS5.
    pub fn index(dialogues: &[Dialogue]) -> Option<Self> {
        let db = rusqlite::Connection::open_in_memory().ok()?;
        for (d, dialogue) in dialogues.iter().enumerate() {
            for form in [TextForm::Bare, TextForm::Embedded] {
                let table = Self::table(d, form);
                db.execute_batch(&format!("CREATE VIRTUAL TABLE {table} USING fts5(text)"))
                    .ok()?;
                let mut insert = db
                    .prepare(&format!("INSERT INTO {table}(rowid, text) VALUES (?1, ?2)"))
                    .ok()?;
                for (i, turn) in dialogue.turns.iter().enumerate() {
                    let said = message(dialogue, turn).ok()?;
                    insert.execute((i as i64, form.of(&said))).ok()?;
                }
            }
        }
        Some(Self { db: Mutex::new(db) })
    }

    fn table(dialogue: usize, form: TextForm) -> String {
        format!("turns_{dialogue}_{}", form as u8)
    }

    /// The `limit` best turns (indexes) of `dialogue` for `question`, any word matching.
    pub fn rank(
        &self,
        dialogue: usize,
        question: &str,
        form: TextForm,
        limit: usize,
    ) -> Option<Vec<usize>> {
        let words: Vec<String> = question
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(|w| format!("\"{}\"", w.to_lowercase()))
            .collect();
        if words.is_empty() {
            return Some(Vec::new());
        }
        let db = self.db.lock().expect("not poisoned");
        let table = Self::table(dialogue, form);
        let mut select = db
            .prepare_cached(&format!(
                "SELECT rowid FROM {table} WHERE {table} MATCH ?1 ORDER BY bm25({table}) LIMIT ?2"
            ))
            .ok()?;
        let rows = select
            .query_map((words.join(" OR "), limit as i64), |row| {
                row.get::<_, i64>(0)
            })
            .ok()?;
        Some(rows.filter_map(Result::ok).map(|i| i as usize).collect())
    }
}

/// How each default of message recall was chosen, after the tables that show it.
const CHOSEN: &str = "\
## How each default was chosen

Every change is judged on each conversation as well as pooled (the table above, against the
defaults' row): kept only when it helps on at least four of five and on the pooled figure.

- **A context of 20 turns, window 6 + 14 recalled.** The budget is the task's; the split was
  chosen on this development split in an earlier wave. `window 4, limit 16` finds more here
  because every question is asked after the conversation has ended, where the last turns rarely
  hold the answer; an agent mid-conversation needs its last turns, so the window stays at 6.
- **Two rankings pooled, each proposing `candidates` (100).** The messages nearest the
  question and the messages before the window best by its words (weights over the whole
  conversation) are pooled and ordered by fusing nearness with relevance: a mechanism with a
  reason to hold (a rare word of the question finds its message whatever its vector), with no
  parameter fitted; it replaced ranking the 100 nearest again, better on four conversations of
  five and equal on the fifth with both embedders
  (`docs/decisions/recall-pools-two-rankings.md`, with the variants measured and not kept). 100
  was chosen when only the nearest were ranked (1.5 points more than 50).
- **`context_weight` 0.4, on both sides.** A reply is found by what it answered: its vector
  carries the vector before it, and its lexical relevance carries as much of the relevance of
  the messages next to it, each way, fading (the same mechanism on the words, with no constant
  of its own: better than the pool alone on every conversation with both embedders, pooled
  +5.1 hashing and +2.5 MiniLM; carrying only from the message before, +4.6 and +0.7 with one
  conversation worse). `each message embedded alone` (0, both sides off) is worse on every
  conversation. The value (0.3 to 0.5 within half a point, vectors alone) was chosen in an
  earlier wave.
- **Fused by rank, k = 10.** The pool is ordered by reciprocal-rank fusion with core's k (10,
  chosen on this split for facts in an earlier wave); for messages k from 1 to 10 is within 0.8
  points pooled, 30 and 60 lose 1.2 to 3.4. Fusing the two scores instead (each scaled to the
  pool's range, equal weights) gained only while every pooled message's cosine was known, which
  the engine has for the nearest alone; with the cosines it has, hashing lost
  (`docs/decisions/recall-pools-two-rankings.md`).
- **`language` English.** Stems and stop words: `words as written` is worse on every
  conversation with both embedders.
- **`threshold` 0.** A cosine threshold means something on one embedder's scale only; the
  README's 0.6 recalled almost nothing (its row).
- **Each message embedded as `Speaker (date): text`.** The rankings alone below show the gain
  over the text alone for every ranking and embedder. Dates said relatively stay as said:
  resolving them in the text (`yesterday: 7 May 2023`) lost on every conversation with MiniLM
  and moved no temporal question, which asks for the date rather than by it.
";

/// The report as Markdown.
pub fn markdown(
    command: &str,
    dialogues: &[Dialogue],
    prepare: &[PrepareFigures],
    rankings: &[RankingFigures],
    skipped: &[String],
    agreed: &[String],
    stage_costs: &[(String, Vec<StageCost>)],
) -> String {
    let questions: usize = dialogues
        .iter()
        .flat_map(|d| &d.questions)
        .filter(|q| CATEGORIES.iter().any(|(c, _)| *c == q.category) && !q.evidence.is_empty())
        .count();
    let turns: usize = dialogues.iter().map(|d| d.turns.len()).sum();
    let unknown: usize = dialogues.iter().map(|d| d.unknown_evidence).sum();
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "# Recall quality (Q1)\n");
    let _ = writeln!(
        w,
        "Generated by `{command}`. {} conversations, {turns} turns, {questions} questions of \
         categories 1–4 with evidence (adversarial questions are left out; {unknown} evidence ids \
         named no turn). A figure is the share of all evidence turns of the questions that is in \
         the context (or in a ranking's top k).\n",
        dialogues.len()
    );
    for s in skipped {
        let _ = writeln!(w, "- skipped: {s}");
    }
    for a in agreed {
        let _ = writeln!(w, "- {a}");
    }
    if !skipped.is_empty() || !agreed.is_empty() {
        let _ = writeln!(w);
    }
    let _ = writeln!(w, "## Through `Memory::prepare`\n");
    let mut header = String::from("| embedder | setting |");
    let mut rule = String::from("|---|---|");
    for (_, name) in CATEGORIES {
        let _ = write!(header, " {name} |");
        rule.push_str("---:|");
    }
    let _ = writeln!(
        w,
        "{header} all | turns | tokens | prepare p50 |\n{rule}---:|---:|---:|---:|"
    );
    for p in prepare {
        let _ = write!(w, "| {} | {} |", p.embedder, p.setting);
        for (c, _) in CATEGORIES {
            let _ = write!(w, " {:.1}% |", 100.0 * p.evidence.share(Some(c)));
        }
        let _ = writeln!(
            w,
            " **{:.1}%** | {:.1} | {:.0} | {:.2} ms |",
            100.0 * p.evidence.share(None),
            p.mean_turns,
            p.mean_tokens,
            p.prepare_p50_ms
        );
    }
    let mut embedders: Vec<(&str, f64)> = Vec::new();
    for p in prepare {
        if !embedders.iter().any(|(e, _)| *e == p.embedder) {
            embedders.push((&p.embedder, p.embedding_p50_ms));
        }
    }
    let costs: Vec<String> = embedders
        .iter()
        .map(|(e, ms)| format!("{ms:.2} ms with {e}"))
        .collect();
    let _ = writeln!(
        w,
        "\n`prepare p50` is the median time of one `prepare` on this run's store (SQLite unless \
         said otherwise), the question's vector already made; making it took {} (median).",
        costs.join(", ")
    );
    for (setting, stages) in stage_costs {
        let _ = writeln!(w, "\n## What each stage of `prepare` costs\n\n{setting}\n");
        let _ = writeln!(
            w,
            "| tiers on | prepare p50 | the stage adds |\n|---|---:|---:|"
        );
        let mut before = 0.0;
        for stage in stages {
            let _ = writeln!(
                w,
                "| {} | {:.2} ms | {:+.2} ms |",
                stage.stage,
                stage.prepare_p50_ms,
                stage.prepare_p50_ms - before
            );
            before = stage.prepare_p50_ms;
        }
    }
    let _ = writeln!(w, "\n## Per conversation, through `Memory::prepare`\n");
    let _ = write!(w, "| embedder | setting |");
    for d in dialogues {
        let _ = write!(w, " {} |", d.id);
    }
    let _ = writeln!(w, " all | better than the defaults |");
    let _ = write!(w, "|---|---|");
    for _ in dialogues {
        let _ = write!(w, "---:|");
    }
    let _ = writeln!(w, "---:|---|");
    for p in prepare {
        let baseline = prepare.iter().find(|b| b.embedder == p.embedder);
        let _ = write!(w, "| {} | {} |", p.embedder, p.setting);
        for t in &p.by_dialogue {
            let _ = write!(w, " {:.1}% |", 100.0 * t.share(None));
        }
        let verdict = match baseline {
            Some(b) if !std::ptr::eq(b, p) => {
                let better = p
                    .by_dialogue
                    .iter()
                    .zip(&b.by_dialogue)
                    .filter(|(a, b)| a.share(None) > b.share(None))
                    .count();
                let worse = p
                    .by_dialogue
                    .iter()
                    .zip(&b.by_dialogue)
                    .filter(|(a, b)| a.share(None) < b.share(None))
                    .count();
                format!(
                    "{better} of {} (worse on {worse}), {:+.1} pooled",
                    p.by_dialogue.len(),
                    100.0 * (p.evidence.share(None) - b.evidence.share(None))
                )
            }
            _ => "(the defaults)".to_owned(),
        };
        let _ = writeln!(
            w,
            " **{:.1}%** | {verdict} |",
            100.0 * p.evidence.share(None)
        );
    }
    let _ = writeln!(w, "\n{CHOSEN}");
    let _ = writeln!(
        w,
        "## Each ranking alone, over all turns of the conversation\n"
    );
    let mut header = String::from("| ranking | embedder | text |");
    let mut rule = String::from("|---|---|---|");
    for k in KS {
        let _ = write!(header, " @{k} |");
        rule.push_str("---:|");
    }
    for (_, name) in CATEGORIES {
        let _ = write!(header, " {name} @10 |");
        rule.push_str("---:|");
    }
    let _ = writeln!(w, "{header}\n{rule}");
    let mut seen = HashSet::new();
    for r in rankings {
        // Rankings without an embedder are the same in every embedder's run.
        if !seen.insert((r.ranking.clone(), r.embedder.clone(), r.text.clone())) {
            continue;
        }
        let _ = write!(w, "| {} | {} | {} |", r.ranking, r.embedder, r.text);
        for k in KS {
            let share = r.at.get(&k).map_or(0.0, |t| t.share(None));
            let _ = write!(w, " {:.1}% |", 100.0 * share);
        }
        for (c, _) in CATEGORIES {
            let share = r.at.get(&10).map_or(0.0, |t| t.share(Some(c)));
            let _ = write!(w, " {:.1}% |", 100.0 * share);
        }
        let _ = writeln!(w);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_ids_in_every_spelling_of_the_data() {
        assert_eq!(dia_id("D3:12"), Some((3, 12)));
        assert_eq!(dia_id("D:11:26"), Some((11, 26)));
        assert_eq!(dia_id(" D03:012"), Some((3, 12)));
        assert_eq!(evidence_ids("D8:6; D9:17"), vec![(8, 6), (9, 17)]);
        assert_eq!(dia_id("session 3"), None);
    }

    #[test]
    fn session_dates_become_utc_instants() {
        // 2023-05-08T13:56:00Z
        assert_eq!(
            session_time("1:56 pm on 8 May, 2023").map(Timestamp::as_millis),
            Some(1_683_554_160_000)
        );
        assert_eq!(
            session_time("12:09 am on 1 January, 2024").map(Timestamp::as_millis),
            Some(1_704_067_740_000)
        );
        assert_eq!(session_time("yesterday"), None);
    }

    const SMALL: &str = r#"[{"sample_id": "s", "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bob",
        "session_1_date_time": "9:00 am on 2 March, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a grey kitten named Pixel"},
            {"speaker": "Bob", "dia_id": "D1:2", "text": "Lovely, how old is it"},
            {"speaker": "Ann", "dia_id": "D1:3", "text": "Ten weeks"}],
        "session_2_date_time": "6:30 pm on 9 March, 2023",
        "session_2": [
            {"speaker": "Bob", "dia_id": "D2:1", "text": "My bike got a flat tyre"},
            {"speaker": "Ann", "dia_id": "D2:2", "text": "Take the bus then", "blip_caption": "a bus"},
            {"speaker": "Bob", "dia_id": "D2:3", "text": "Will do"}]},
        "qa": [
            {"question": "What is the name of the grey kitten Ann adopted?", "evidence": ["D1:1"], "category": 4},
            {"question": "Whose bike had a flat?", "evidence": ["D2:1; D9:9"], "category": 1},
            {"question": "Trick", "evidence": ["D1:2"], "category": 5}]}]"#;

    #[test]
    fn the_evidence_in_the_context_is_counted_per_category() {
        let dialogues = parse(SMALL).expect("parses");
        let d = &dialogues[0];
        assert_eq!(d.turns.len(), 6);
        assert_eq!(d.turns[4].text, "Take the bus then [shares a photo: a bus]");
        assert_eq!(d.unknown_evidence, 1, "D9:9 names no turn");
        assert_eq!(d.questions[1].evidence, vec![(2, 1)]);

        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let settings = [
            // The window holds the last two turns, recall the nearest older one.
            Setting::recall("recall one", 2, 1, 0.0),
            // Nothing is that similar: the window alone.
            Setting::recall("window only", 2, 1, 0.999),
        ];
        let embedder = Arc::new(Remembering::new(Arc::new(
            mnemix_core::embed::HashingEmbedder::new(384),
        )));
        let backend: Arc<dyn MemoryBackend> =
            mnemix_core::Checked::wrap(Arc::new(mnemix_core::InMemoryBackend::new()));
        let (prepare, rankings) = runtime
            .block_on(evaluate(
                &dialogues,
                backend,
                embedder,
                "hashing",
                &settings,
                &|_, _, _, _| None,
                None,
            ))
            .expect("evaluates");
        let single_hop = |p: &PrepareFigures| p.evidence.by_category[&4];
        assert_eq!(single_hop(&prepare[0]), (1, 1), "the kitten is recalled");
        assert_eq!(single_hop(&prepare[1]), (0, 1), "and outside the window");
        assert!((prepare[1].mean_turns - 2.0).abs() < f64::EPSILON);
        assert!(
            !prepare
                .iter()
                .any(|p| p.evidence.by_category.contains_key(&5)),
            "adversarial questions are not asked"
        );
        let lexical = rankings
            .iter()
            .find(|r| r.ranking == "lexical" && r.text == "text alone")
            .expect("lexical");
        assert_eq!(lexical.at[&5].by_category[&4], (1, 1));
        assert!(rankings.iter().all(|r| !r.ranking.contains("bm25")));
    }
}
