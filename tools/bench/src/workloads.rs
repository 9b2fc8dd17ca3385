//! The workloads, written once: "ours" drives any backend through the memory contracts, "raw"
//! drives the same backend through a [`RawDriver`] — the same statements or commands written
//! by hand on the driver, on the same tables or keys, with the same pool and transaction shape.
//! The ratio ours ÷ raw is the cost of the abstraction.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use mnemix_core::adapter::ExactIndex;
use mnemix_core::embed::HashingEmbedder;
use mnemix_core::{
    AppendOptions, ConversationId, Filter, LoadOptions, MemoryBackend, Message, NewConversation,
    NewFact, RecallQuery, RememberOptions, Scope, VectorQuery, WorkingMemoryKey,
    WorkingMemoryUpdate,
};

use serde_json::{json, Value};

use crate::voltagent::{self, VoltAgent};
use crate::{compare, Round, Side, Table};

/// How big each workload is: [`Sizes::full`] as the issue sets them, [`Sizes::quick`] for the
/// CI smoke run.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// Interleaved rounds per comparison.
    pub rounds: usize,
    /// W1: messages appended per side and configuration, over `append_conversations`.
    pub append_messages: usize,
    /// W1: conversations the appends spread over.
    pub append_conversations: usize,
    /// W2: messages of the long thread (the short one has 100).
    pub long_thread: usize,
    /// W2: loads per round.
    pub tail_loads: usize,
    /// W2: loads per round of the VoltAgent peer, whose load reads the whole thread (tens of
    /// milliseconds at 100k messages).
    pub peer_tail_loads: usize,
    /// W4: facts over `recall_subjects` subjects, plus one subject with `big_subject_facts`.
    pub facts: usize,
    /// W4: subjects the facts spread over.
    pub recall_subjects: usize,
    /// W4: facts of the one big subject.
    pub big_subject_facts: usize,
    /// W3: conversations of the listed subject.
    pub listed_conversations: usize,
    /// W4 and W5: queries per round.
    pub queries: usize,
    /// W9: operations per round (half get, half set).
    pub working_ops: usize,
    /// W5: vectors searched.
    pub vectors: usize,
    /// W10: turns per session per round (32 sessions).
    pub agent_turns: usize,
    /// W10: facts (with embeddings) of the sessions whose `prepare` recalls facts by words and
    /// vector, one session per size.
    pub hybrid_facts: [usize; 2],
    /// W11: facts and conversations (of four messages) of the subject the inspector shows.
    pub inspected: (usize, usize),
    /// W11: requests per page per round.
    pub page_requests: usize,
    /// W5: queries per round for the sides that scan every row outside a vector engine
    /// (VoltAgent, ours on PostgreSQL without pgvector's index) — seconds per query at 100k.
    pub slow_queries: usize,
}

impl Sizes {
    /// The sizes of the issue.
    pub fn full() -> Self {
        Self {
            rounds: 5,
            append_messages: 100_000,
            append_conversations: 1_000,
            long_thread: 100_000,
            tail_loads: 2_000,
            peer_tail_loads: 100,
            facts: 100_000,
            recall_subjects: 1_000,
            big_subject_facts: 10_000,
            listed_conversations: 10_000,
            queries: 200,
            working_ops: 10_000,
            vectors: 100_000,
            slow_queries: 5,
            agent_turns: 50,
            hybrid_facts: [1_000, 10_000],
            inspected: (100_000, 10_000),
            page_requests: 50,
        }
    }

    /// Small enough for CI (a smoke test: the figures mean little).
    pub fn quick() -> Self {
        Self {
            rounds: 3,
            append_messages: 1_200,
            append_conversations: 20,
            long_thread: 5_000,
            tail_loads: 100,
            peer_tail_loads: 100,
            facts: 1_000,
            recall_subjects: 20,
            big_subject_facts: 500,
            listed_conversations: 1_000,
            queries: 20,
            working_ops: 400,
            vectors: 1_000,
            slow_queries: 10,
            agent_turns: 20,
            hybrid_facts: [100, 1_000],
            inspected: (2_000, 200),
            page_requests: 5,
        }
    }
}

/// The same operations as the contracts, written by hand on one backend's driver.
///
/// Errors panic: a benchmark that fails should stop loudly.
#[async_trait]
pub trait RawDriver: Send + Sync + 'static {
    /// The side's name in the tables (`raw sqlx`, `raw tokio-postgres`, …).
    fn name(&self) -> String;
    /// Creates an empty conversation.
    async fn create_conversation(&self, scope: &Scope, id: &ConversationId);
    /// Appends messages (all new) the way the backend's append does.
    async fn append(&self, scope: &Scope, id: &ConversationId, messages: &[Message]);
    /// The last `n` messages, oldest first.
    async fn load_last(&self, scope: &Scope, id: &ConversationId, n: usize) -> Vec<Message>;
    /// The subject's user working-memory document.
    async fn get_working(&self, scope: &Scope) -> Option<String>;
    /// Writes the subject's user working-memory document, bumping its revision.
    async fn set_working(&self, scope: &Scope, content: &str);
    /// Texts of the `limit` current facts ranked first for `text` by the core lexical rules
    /// (by another ranking where [`alternative_ranking`](Self::alternative_ranking) says so).
    async fn recall(&self, scope: &Scope, text: &str, limit: usize) -> Vec<String>;
    /// A side that stands for what a user might reach for instead of our lexical ranking (SQLite
    /// FTS5's bm25): it runs in W4 only, and its top `limit` is compared with ours (overlap)
    /// instead of required to be the same.
    fn alternative_ranking(&self) -> bool {
        false
    }
    /// Texts of the `limit` current facts ranked first for `text` and `vector` together
    /// (hybrid recall, as a turn's `prepare` asks when the backend searches vectors), as the
    /// store ranks them. `None` on a side that does not do it: its minimal reads fall back to
    /// [`recall`](Self::recall) by words alone, a lower bound.
    async fn recall_hybrid(
        &self,
        _scope: &Scope,
        _text: &str,
        _vector: &[f32],
        _limit: usize,
    ) -> Option<Vec<String>> {
        None
    }
    /// A turn's semantic recall: the messages before the conversation's last `window` nearest
    /// to the query, read in one request where the engine can rank vectors itself (pgvector),
    /// or as the store does where it ranks them in the client (SQLite's engine side: the
    /// subject's vectors held while the collection's generation stays; Redis: held while the
    /// records' version token stays). `None` on a side that does not do it: its minimal reads
    /// have no vector search, a lower bound.
    async fn recall_messages(
        &self,
        _scope: &Scope,
        _id: &ConversationId,
        _recall: &MessageRecall<'_>,
    ) -> Option<Vec<Message>> {
        None
    }
    /// One page of the subject's conversations, newest first, after `after` (created_at
    /// millis, id): their (created_at, id).
    async fn list_page(
        &self,
        scope: &Scope,
        after: Option<(i64, String)>,
        limit: usize,
    ) -> Vec<(i64, String)>;
}

/// What a turn's semantic recall asks for, as W10's engine configuration sets it.
#[derive(Debug, Clone, Copy)]
pub struct MessageRecall<'a> {
    /// The collection the engine embeds messages into.
    pub collection: &'a str,
    /// The query's embedding.
    pub vector: &'a [f32],
    /// Messages in the window (the last `window`) are not recalled.
    pub window: usize,
    /// At most this many.
    pub limit: usize,
    /// The least cosine similarity recalled.
    pub min_score: f32,
}

impl MessageRecall<'_> {
    /// The seqs this recall finds in a scope's matrix of whole records, ranked as the store
    /// ranks a held matrix: the nearest `limit` of `conversation`'s vectors before the window
    /// (the conversation's last seq is `last_seq`), at least `min_score` similar, best first.
    pub fn seqs_in(&self, index: &ExactIndex, conversation: &str, last_seq: i64) -> Vec<u64> {
        let before = last_seq - i64::try_from(self.window).expect("window") + 1;
        #[allow(clippy::cast_precision_loss)] // seqs far below 2^52
        let mut query =
            VectorQuery::new(self.vector.to_vec(), self.limit).with_filter(Filter::and([
                Filter::eq("conversation_id", conversation),
                Filter::range("seq").lt(before as f64),
            ]));
        query.min_score = Some(self.min_score);
        index
            .search_records(&query)
            .expect("a matrix of records")
            .iter()
            .filter_map(|hit| hit.record.metadata.get("seq")?.as_u64())
            .collect()
    }
}

/// A side made of a closure called once per round.
pub struct FnSide<F> {
    name: String,
    next: F,
}

impl<F, Fut> FnSide<F>
where
    F: FnMut() -> Fut + Send,
    Fut: Future<Output = Round> + Send,
{
    /// A side named `name` whose rounds `next` runs.
    pub fn new(name: impl Into<String>, next: F) -> Self {
        Self {
            name: name.into(),
            next,
        }
    }
}

#[async_trait]
impl<F, Fut> Side for FnSide<F>
where
    F: FnMut() -> Fut + Send,
    Fut: Future<Output = Round> + Send,
{
    fn name(&self) -> &str {
        &self.name
    }

    async fn round(&mut self) -> Round {
        (self.next)().await
    }
}

/// Runs `jobs` on `clients` concurrent tasks (job `i` on task `i mod clients`, each task's
/// jobs one after another), timing every job and the whole.
pub async fn run_clients<J, F, Fut>(clients: usize, jobs: Vec<J>, op: F) -> Round
where
    J: Send + 'static,
    F: Fn(J) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let clients = clients.max(1);
    let mut queues: Vec<Vec<J>> = (0..clients).map(|_| Vec::new()).collect();
    for (i, job) in jobs.into_iter().enumerate() {
        queues[i % clients].push(job);
    }
    let started = Instant::now();
    let tasks: Vec<_> = queues
        .into_iter()
        .map(|queue| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(queue.len());
                for job in queue {
                    let t = Instant::now();
                    op(job).await;
                    latencies.push(t.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("a benchmark client panicked"));
    }
    Round {
        latencies,
        elapsed: started.elapsed(),
    }
}

/// Scope of subject `i` in the benchmark namespace.
pub fn subject(i: usize) -> Scope {
    Scope::new("bench", format!("user-{i}")).expect("valid scope")
}

/// Text `i` of a list, cycling.
pub fn nth(texts: &[String], i: usize) -> &str {
    &texts[i % texts.len()]
}

/// W1: appends of `batch` messages by `writers` concurrent writers, both sides into their
/// own conversations of the same database.
pub async fn append(
    sizes: &Sizes,
    backend: &str,
    ours: &Arc<dyn MemoryBackend>,
    raws: &[Arc<dyn RawDriver>],
    peer: Option<&Arc<VoltAgent>>,
    paragraphs: &[String],
) -> Vec<Table> {
    let mut tables = Vec::new();
    for (batch, writers) in [(1, 1), (10, 1), (1, 8), (10, 8)] {
        let conversations = sizes.append_conversations;
        let per_round = (sizes.append_messages / sizes.rounds / batch).max(1);
        let threads = |tag: &str| -> Threads {
            (0..conversations)
                .map(|c| {
                    (
                        subject(c % 100),
                        ConversationId::new(format!("w1-{tag}-b{batch}-w{writers}-{c}"))
                            .expect("valid id"),
                    )
                })
                .collect()
        };
        let ours_threads = Arc::new(threads("ours"));
        let raw_threads: Vec<Arc<Threads>> = (0..raws.len())
            .map(|r| Arc::new(threads(&format!("raw{r}"))))
            .collect();
        for (scope, id) in ours_threads.iter() {
            ours.create_conversation(scope, NewConversation::default().with_id(id.clone()))
                .await
                .expect("create conversation");
        }
        for (raw, threads) in raws.iter().zip(&raw_threads) {
            for (scope, id) in threads.iter() {
                raw.create_conversation(scope, id).await;
            }
        }
        // The peer twice, each on conversations of its own: at our durability, and as shipped.
        let peer_runs: Vec<(&Arc<VoltAgent>, &str, &str, Arc<Threads>)> = peer
            .into_iter()
            .flat_map(|peer| {
                [
                    (peer, voltagent::NAME, "NORMAL", Arc::new(threads("peer"))),
                    (
                        peer,
                        voltagent::SHIPPED,
                        "FULL",
                        Arc::new(threads("peer-shipped")),
                    ),
                ]
            })
            .collect();
        for (peer, _, _, threads) in &peer_runs {
            peer.call(json!({ "op": "create", "threads": peer_threads_json(threads) }))
                .await
                .expect("VoltAgent creates conversations");
        }
        // Each round's batches, made before the clock starts: (conversation, messages).
        let make_jobs = move |round: usize, paragraphs: &[String]| -> Vec<(usize, Vec<Message>)> {
            (0..per_round)
                .map(|j| {
                    let n = round * per_round + j;
                    let messages = (0..batch)
                        .map(|k| Message::user(nth(paragraphs, n * batch + k)))
                        .collect();
                    (n % conversations, messages)
                })
                .collect()
        };
        let texts: Arc<Vec<String>> = Arc::new(paragraphs.to_vec());
        let mut ours_round = 0;
        let mut ours_side = FnSide::new("ours", || {
            let jobs = make_jobs(ours_round, &texts);
            ours_round += 1;
            let (store, threads) = (ours.clone(), ours_threads.clone());
            run_clients(
                writers,
                jobs,
                move |(c, messages): (usize, Vec<Message>)| {
                    let (store, threads) = (store.clone(), threads.clone());
                    async move {
                        let (scope, id) = &threads[c];
                        store
                            .append(scope, id, messages, AppendOptions::default())
                            .await
                            .expect("append");
                    }
                },
            )
        });
        let mut raw_sides: Vec<_> = raws
            .iter()
            .zip(&raw_threads)
            .map(|(raw, threads)| {
                let (raw, threads, texts) = (raw.clone(), threads.clone(), texts.clone());
                let mut raw_round = 0;
                FnSide::new(raw.name(), move || {
                    let jobs = make_jobs(raw_round, &texts);
                    raw_round += 1;
                    let (driver, threads) = (raw.clone(), threads.clone());
                    run_clients(
                        writers,
                        jobs,
                        move |(c, messages): (usize, Vec<Message>)| {
                            let (driver, threads) = (driver.clone(), threads.clone());
                            async move {
                                let (scope, id) = &threads[c];
                                driver.append(scope, id, &messages).await;
                            }
                        },
                    )
                })
            })
            .collect();
        let mut peer_sides: Vec<_> = peer_runs
            .into_iter()
            .map(|(peer, name, synchronous, peer_threads)| {
                let (peer, texts) = (peer.clone(), texts.clone());
                let mut peer_round = 0;
                FnSide::new(name, move || {
                    let jobs: Vec<Value> = make_jobs(peer_round, &texts)
                        .into_iter()
                        .map(|(c, messages)| {
                            let (scope, id) = &peer_threads[c];
                            let texts: Vec<String> = messages.iter().map(Message::text).collect();
                            json!([subject_name(scope), id.as_str(), texts])
                        })
                        .collect();
                    peer_round += 1;
                    let peer = peer.clone();
                    let request = json!({
                        "op": "append", "clients": writers, "jobs": jobs,
                        "synchronous": synchronous,
                    });
                    async move { peer.round(request).await }
                })
            })
            .collect();
        let mut sides: Vec<&mut dyn Side> = vec![&mut ours_side];
        sides.extend(raw_sides.iter_mut().map(|side| side as &mut dyn Side));
        sides.extend(peer_sides.iter_mut().map(|side| side as &mut dyn Side));
        let mut table = compare(
            format!("W1 append: batches of {batch}, {writers} writer(s)"),
            format!(
                "{backend}; {} messages per side over {conversations} conversations, {} rounds",
                per_round * batch * sizes.rounds,
                sizes.rounds
            ),
            sizes.rounds,
            raws.len(),
            &mut sides,
        )
        .await;
        peer_note(&mut table);
        tables.push(table);
    }
    tables
}

/// Conversations of a side: each one's scope and id.
type Threads = Vec<(Scope, ConversationId)>;

/// W3: a subject's conversations, newest first, walked page by page (50 per page, 20 pages a
/// round, each from the previous page's cursor).
pub async fn list_conversations(
    sizes: &Sizes,
    backend: &str,
    ours: &Arc<dyn MemoryBackend>,
    raw: &Arc<dyn RawDriver>,
) -> Vec<Table> {
    let scope = subject(70_000);
    for i in 0..sizes.listed_conversations {
        ours.create_conversation(
            &scope,
            NewConversation::default()
                .with_id(ConversationId::new(format!("w3-{i:06}")).expect("valid id"))
                .with_title(format!("conversation {i}")),
        )
        .await
        .expect("create conversation");
    }
    let pages = 20.min(sizes.listed_conversations / 50).max(1);
    let (store, ours_scope) = (ours.clone(), scope.clone());
    let mut ours_side = FnSide::new("ours", || {
        let (store, scope) = (store.clone(), ours_scope.clone());
        async move {
            let mut latencies = Vec::with_capacity(pages);
            let mut cursor = None;
            for _ in 0..pages {
                let t = Instant::now();
                let page = store
                    .list_conversations(
                        &scope,
                        mnemix_core::ConversationQuery::default()
                            .with_limit(50)
                            .with_cursor(cursor.take()),
                    )
                    .await
                    .expect("list conversations");
                latencies.push(t.elapsed());
                assert_eq!(page.items.len(), 50);
                cursor = page.next_cursor;
            }
            Round::sequential(latencies)
        }
    });
    let raw_scope = scope.clone();
    let mut raw_side = FnSide::new(raw.name(), || {
        let (driver, scope) = (raw.clone(), raw_scope.clone());
        async move {
            let mut latencies = Vec::with_capacity(pages);
            let mut after = None;
            for _ in 0..pages {
                let t = Instant::now();
                let page = driver.list_page(&scope, after.take(), 50).await;
                latencies.push(t.elapsed());
                assert_eq!(page.len(), 50);
                after = page.last().cloned();
            }
            Round::sequential(latencies)
        }
    });
    vec![
        compare(
            "W3 list conversations: pages of 50",
            format!(
                "{backend}; a subject with {} conversations, {pages} pages walked by cursor per round, {} rounds",
                sizes.listed_conversations, sizes.rounds
            ),
            sizes.rounds,
            1,
            &mut [&mut ours_side, &mut raw_side],
        )
        .await,
    ]
}

/// W8: `forget_all` of a subject holding `big_subject_facts` facts, as many vectors and a
/// conversation of as many messages, timed once per round on a fresh copy of the subject
/// (there is no raw side: the contract's whole erasure is the point).
pub async fn forget_all(
    sizes: &Sizes,
    backend: &str,
    ours: &Arc<dyn MemoryBackend>,
    sentences: &[String],
    vectors: Option<&crate::data::Matrix>,
) -> Vec<Table> {
    let n = sizes.big_subject_facts;
    let store = ours.clone();
    let mut round = 0usize;
    let texts: Vec<String> = sentences.iter().take(n).cloned().collect();
    let vectors = vectors.map(|v| crate::data::Matrix {
        data: v.data[..n.min(v.len()) * crate::data::DIMS].to_vec(),
    });
    let mut side = FnSide::new("ours", || {
        round += 1;
        let scope = subject(80_000 + round);
        let (store, texts, vectors) = (store.clone(), texts.clone(), vectors.clone());
        async move {
            for text in &texts {
                store
                    .remember(
                        &scope,
                        NewFact::new(text.clone()),
                        RememberOptions::default(),
                    )
                    .await
                    .expect("remember");
            }
            let id = ConversationId::new("w8").expect("valid id");
            store
                .create_conversation(&scope, NewConversation::default().with_id(id.clone()))
                .await
                .expect("create conversation");
            for chunk in texts.chunks(100) {
                let batch = chunk.iter().map(Message::user).collect();
                store
                    .append(&scope, &id, batch, AppendOptions::default())
                    .await
                    .expect("append");
            }
            if let Some(vectors) = &vectors {
                crate::vectors::load_ours(&store, &scope, vectors).await;
            }
            let t = Instant::now();
            let receipt = store.forget_all(&scope).await.expect("forget_all");
            let took = t.elapsed();
            assert!(receipt.total() >= 2 * texts.len() as u64, "{receipt:?}");
            Round::sequential(vec![took])
        }
    });
    vec![
        compare(
            "W8 forget_all of a subject",
            format!(
                "{backend}; {n} facts, {n} messages in one conversation{}; one erasure per round (fill untimed), {} rounds",
                if vectors.is_some() {
                    format!(", {n} vectors")
                } else {
                    String::new()
                },
                sizes.rounds
            ),
            sizes.rounds,
            0,
            &mut [&mut side],
        )
        .await,
    ]
}

/// W10: an agent turn — `prepare` then `commit` of the user's message and the reply — by 32
/// concurrent sessions (one subject and conversation each), with the window, semantic recall
/// (the offline hashing embedder, so no model time is counted), facts and working memory on.
/// Then one session alone: `prepare` against the minimal reads of its context made by hand on
/// the raw driver, at once.
pub async fn agent_turn(
    sizes: &Sizes,
    backend: &str,
    ours: &Arc<dyn MemoryBackend>,
    raws: &[Arc<dyn RawDriver>],
    paragraphs: &[String],
) -> Vec<Table> {
    const SESSIONS: usize = 32;
    // The engine's defaults with semantic recall on: the window they give, and the best
    // `limit` of the nearest `candidates` and the `candidates` best by words (hybrid), whatever their similarity.
    let config = mnemix_engine::config::MemoryConfig::from_yaml(
        "conversation: { enabled: true }
semantic_recall: { enabled: true, merge: prepend }
facts: { enabled: true }
inject: { limit: 8, token_budget: 400 }
working_memory: { enabled: true, scope: user, template: \"# Profile\\n- name:\\n- plan:\" }",
    )
    .expect("a valid configuration");
    let window = config.window_size();
    let recall = &config.semantic_recall;
    let (candidates, threshold) = (recall.candidate_count(), recall.threshold);
    let memory = Arc::new(
        mnemix_engine::Memory::builder(ours.clone())
            .config(config)
            .embedder(Arc::new(HashingEmbedder::new(384)))
            .build()
            .expect("a valid engine"),
    );
    let mut threads = Vec::with_capacity(SESSIONS);
    for s in 0..SESSIONS {
        let scope = subject(90_000 + s);
        let (thread, _) = memory
            .auto_conversation(&scope, "bench-agent", 0)
            .await
            .expect("a conversation");
        threads.push((scope, thread.id));
    }
    let threads = Arc::new(threads);
    let turns = sizes.agent_turns;
    let texts: Arc<Vec<String>> = Arc::new(paragraphs.to_vec());
    let mut round = 0usize;
    let mut side = FnSide::new("ours", || {
        round += 1;
        let (memory, threads, texts) = (memory.clone(), threads.clone(), texts.clone());
        // Job t * SESSIONS + s is turn t of session s: client s runs its session's turns.
        let jobs: Vec<(usize, usize)> = (0..turns * SESSIONS)
            .map(|j| (j % SESSIONS, round * turns * SESSIONS + j))
            .collect();
        run_clients(SESSIONS, jobs, move |(s, n): (usize, usize)| {
            let (memory, threads, texts) = (memory.clone(), threads.clone(), texts.clone());
            async move {
                let (scope, id) = &threads[s];
                let question = nth(&texts, 2 * n);
                let context = memory.prepare(scope, id, question).await.expect("prepare");
                std::hint::black_box(context);
                memory
                    .commit(
                        scope,
                        id,
                        vec![
                            Message::user(question),
                            Message::assistant(nth(&texts, 2 * n + 1)),
                        ],
                    )
                    .await
                    .expect("commit");
            }
        })
    });
    let concurrent = compare(
        "W10 agent turn: prepare + commit, 32 concurrent sessions",
        format!(
            "{backend}; window {window}, semantic recall (hashing embedder), facts, working memory; {turns} turns per session per round, {} rounds; the p99 column is the per-turn p99",
            sizes.rounds
        ),
        sizes.rounds,
        0,
        &mut [&mut side],
    )
    .await;

    // One session alone, its thread now holding the turns above: the latency a turn's
    // `prepare` adds, against the reads its context needs made by hand at once. Then the same
    // with a subject holding facts with embeddings, which `prepare` recalls by words and vector.
    let mut tables = vec![concurrent];
    let session = PreparingSession {
        memory: memory.clone(),
        raws,
        texts: texts.clone(),
        window,
        candidates,
        threshold,
        prepares: turns * 4,
    };
    let (scope, id) = threads[0].clone();
    tables.push(
        session
            .compare(
                "W10 one session: prepare alone, against its minimal reads".into(),
                format!(
                    "{backend}; the W10 configuration, one session of {} messages and no facts",
                    2 * turns * sizes.rounds
                ),
                sizes.rounds,
                &scope,
                &id,
            )
            .await,
    );
    let sentences = crate::data::sentences(paragraphs);
    let embedder = HashingEmbedder::new(384);
    for (at, &facts) in sizes.hybrid_facts.iter().enumerate() {
        let (scope, id) = threads[1 + at].clone();
        let from = 50_000 * (1 + at);
        for i in 0..facts {
            let text = nth(&sentences, from + i);
            ours.remember(
                &scope,
                NewFact::new(text).with_embedding(embedder.embed_one(text)),
                RememberOptions::default(),
            )
            .await
            .expect("remember");
        }
        let mut table = session
            .compare(
                format!("W10 one session with {facts} facts: prepare alone, against its minimal reads"),
                format!(
                    "{backend}; the W10 configuration, one session of {} messages whose subject holds {facts} facts with embeddings (the hashing embedder's), recalled by words and vector (hybrid)",
                    2 * turns * sizes.rounds
                ),
                sizes.rounds,
                &scope,
                &id,
            )
            .await;
        table.notes.extend(session.same_facts(&scope).await);
        tables.push(table);
    }
    tables
}

/// More messages than any benchmark thread holds: `load_last` of it reads the whole thread.
const EVERY_MESSAGE: usize = 1 << 30;

/// W10's one session alone: `prepare` against the minimal reads of its context made by hand
/// on each raw side, at once.
struct PreparingSession<'a> {
    memory: Arc<mnemix_engine::Memory>,
    raws: &'a [Arc<dyn RawDriver>],
    texts: Arc<Vec<String>>,
    window: usize,
    candidates: usize,
    threshold: f32,
    prepares: usize,
}

impl PreparingSession<'_> {
    /// What a turn's fact recall asks for: the engine's `inject.limit`.
    const FACTS: usize = 8;

    async fn compare(
        &self,
        title: String,
        setting: String,
        rounds: usize,
        scope: &Scope,
        id: &ConversationId,
    ) -> Table {
        let prepares = self.prepares;
        let mut ours_side = FnSide::new("ours prepare", || {
            let (memory, texts, scope, id) = (
                self.memory.clone(),
                self.texts.clone(),
                scope.clone(),
                id.clone(),
            );
            run_clients(1, (0..prepares).collect(), move |n: usize| {
                let (memory, texts, scope, id) =
                    (memory.clone(), texts.clone(), scope.clone(), id.clone());
                async move {
                    let context = memory
                        .prepare(&scope, &id, nth(&texts, 2 * n))
                        .await
                        .expect("prepare");
                    std::hint::black_box(context);
                }
            })
        });
        let (window, candidates, threshold) = (self.window, self.candidates, self.threshold);
        let mut raw_sides: Vec<_> = self
            .raws
            .iter()
            .map(|raw| {
                let (raw, texts, scope, id) =
                    (raw.clone(), self.texts.clone(), scope.clone(), id.clone());
                FnSide::new(format!("{} minimal reads", raw.name()), move || {
                    let (raw, texts, scope, id) =
                        (raw.clone(), texts.clone(), scope.clone(), id.clone());
                    run_clients(1, (0..prepares).collect(), move |n: usize| {
                        let (raw, texts, scope, id) =
                            (raw.clone(), texts.clone(), scope.clone(), id.clone());
                        async move {
                            let question = nth(&texts, 2 * n);
                            let vector = HashingEmbedder::new(384).embed_one(question);
                            let recall = MessageRecall {
                                collection: mnemix_engine::MESSAGE_COLLECTION,
                                vector: &vector,
                                window,
                                limit: candidates,
                                min_score: threshold,
                            };
                            let facts = async {
                                match raw
                                    .recall_hybrid(&scope, question, &vector, Self::FACTS)
                                    .await
                                {
                                    Some(facts) => facts,
                                    None => raw.recall(&scope, question, Self::FACTS).await,
                                }
                            };
                            // Recall also looks for the question's words in every message
                            // before the window: here the whole thread (the window's few more
                            // cost little).
                            let reads = futures::join!(
                                raw.load_last(&scope, &id, window),
                                raw.get_working(&scope),
                                facts,
                                raw.recall_messages(&scope, &id, &recall),
                                raw.load_last(&scope, &id, EVERY_MESSAGE),
                            );
                            std::hint::black_box(reads);
                        }
                    })
                })
            })
            .collect();
        let mut sides: Vec<&mut dyn Side> = vec![&mut ours_side];
        sides.extend(raw_sides.iter_mut().map(|side| side as &mut dyn Side));
        compare(
            title,
            format!(
                "{setting}; {prepares} prepares per round, {rounds} rounds; each raw side reads the window, working memory, facts (by words and vector where the side ranks both as the store does, else by words alone: a lower bound) and the whole thread (where recall looks for the question's words) at once, and the recalled messages by a vector search in the same round: in the engine (PostgreSQL with pgvector) or as the store does it in the client (SQLite's engine limit, Redis); a side without it is a lower bound"
            ),
            rounds,
            self.raws.len(),
            &mut sides,
        )
        .await
    }

    /// Outside the timed rounds: each raw side that recalls by words and vector recalls the
    /// same facts as the store, in the same order, for the first prepares' questions.
    async fn same_facts(&self, scope: &Scope) -> Vec<String> {
        let mut notes = Vec::new();
        for raw in self.raws {
            let mut checked = 0;
            for n in 0..self.prepares.min(20) {
                let question = nth(&self.texts, 2 * n);
                let vector = HashingEmbedder::new(384).embed_one(question);
                let Some(theirs) = raw
                    .recall_hybrid(scope, question, &vector, Self::FACTS)
                    .await
                else {
                    break;
                };
                let ours: Vec<String> = self
                    .memory
                    .backend()
                    .recall(
                        scope,
                        RecallQuery::text(question)
                            .with_vector(vector)
                            .with_limit(Self::FACTS),
                    )
                    .await
                    .expect("recall")
                    .into_iter()
                    .map(|hit| hit.fact.text)
                    .collect();
                assert_eq!(theirs, ours, "{} recalls the store's facts", raw.name());
                checked += 1;
            }
            if checked > 0 {
                notes.push(format!(
                    "{}: the same facts as ours, in the same order, for {checked} questions",
                    raw.name()
                ));
            }
        }
        notes
    }
}

/// Fills a conversation with `n` messages in batches of 100; returns its id.
async fn thread_of(
    store: &Arc<dyn MemoryBackend>,
    scope: &Scope,
    name: &str,
    n: usize,
    paragraphs: &[String],
) -> ConversationId {
    let id = ConversationId::new(name).expect("valid id");
    store
        .create_conversation(scope, NewConversation::default().with_id(id.clone()))
        .await
        .expect("create conversation");
    let mut written = 0;
    while written < n {
        let batch: Vec<Message> = (written..n.min(written + 100))
            .map(|i| Message::user(nth(paragraphs, i)))
            .collect();
        written += batch.len();
        store
            .append(scope, &id, batch, AppendOptions::default())
            .await
            .expect("fill thread");
    }
    id
}

/// W2: the last 50 messages of a long thread and of a 100-message one, by both sides.
pub async fn load_tail(
    sizes: &Sizes,
    backend: &str,
    ours: &Arc<dyn MemoryBackend>,
    raws: &[Arc<dyn RawDriver>],
    peer: Option<&Arc<VoltAgent>>,
    paragraphs: &[String],
) -> Vec<Table> {
    let scope = subject(9_000);
    let mut tables = Vec::new();
    let mut medians = Vec::new();
    for length in [sizes.long_thread, 100] {
        let id = thread_of(ours, &scope, &format!("w2-{length}"), length, paragraphs).await;
        let loads = sizes.tail_loads;
        let ours_side_store = ours.clone();
        let (ours_scope, ours_id) = (scope.clone(), id.clone());
        let mut ours_side = FnSide::new("ours", || {
            let (store, scope, id) = (ours_side_store.clone(), ours_scope.clone(), ours_id.clone());
            async move {
                let mut latencies = Vec::with_capacity(loads);
                for _ in 0..loads {
                    let t = Instant::now();
                    let window = store
                        .load(&scope, &id, LoadOptions::last(50))
                        .await
                        .expect("load");
                    latencies.push(t.elapsed());
                    assert_eq!(window.len(), 50);
                }
                Round::sequential(latencies)
            }
        });
        let mut raw_sides: Vec<_> = raws
            .iter()
            .map(|raw| {
                let (raw, raw_scope, raw_id) = (raw.clone(), scope.clone(), id.clone());
                FnSide::new(raw.name(), move || {
                    let (driver, scope, id) = (raw.clone(), raw_scope.clone(), raw_id.clone());
                    async move {
                        let mut latencies = Vec::with_capacity(loads);
                        for _ in 0..loads {
                            let t = Instant::now();
                            let window = driver.load_last(&scope, &id, 50).await;
                            latencies.push(t.elapsed());
                            assert_eq!(window.len(), 50);
                        }
                        Round::sequential(latencies)
                    }
                })
            })
            .collect();
        let peer_id = format!("w2-peer-{length}");
        if let Some(peer) = peer {
            peer.call(json!({ "op": "create", "threads": [[subject_name(&scope), peer_id]] }))
                .await
                .expect("VoltAgent creates a conversation");
            for start in (0..length).step_by(100) {
                let texts: Vec<&str> = (start..length.min(start + 100))
                    .map(|i| nth(paragraphs, i))
                    .collect();
                peer.call(json!({
                    "op": "append", "clients": 1,
                    "jobs": [[subject_name(&scope), peer_id, texts]]
                }))
                .await
                .expect("VoltAgent fills a thread");
            }
        }
        let mut peer_side = peer.map(|peer| {
            let request = json!({
                "op": "load", "userId": subject_name(&scope), "conversationId": peer_id,
                "limit": 50, "loads": sizes.peer_tail_loads.min(loads)
            });
            FnSide::new(voltagent::NAME, move || {
                let (peer, request) = (peer.clone(), request.clone());
                async move { peer.round(request).await }
            })
        });
        let mut sides: Vec<&mut dyn Side> = vec![&mut ours_side];
        sides.extend(raw_sides.iter_mut().map(|side| side as &mut dyn Side));
        if let Some(peer) = peer_side.as_mut() {
            sides.push(peer);
        }
        let mut table = compare(
            format!("W2 load tail: last 50 of a {length}-message thread"),
            format!(
                "{backend}; {loads} loads per round ({} for {}), {} rounds",
                sizes.peer_tail_loads.min(loads),
                voltagent::NAME,
                sizes.rounds
            ),
            sizes.rounds,
            raws.len(),
            &mut sides,
        )
        .await;
        peer_note(&mut table);
        medians.push(
            table
                .sides
                .iter()
                .map(|s| (s.name.clone(), s.median_us))
                .collect::<Vec<_>>(),
        );
        tables.push(table);
    }
    if let [long, short] = &medians[..] {
        let notes: Vec<String> = long
            .iter()
            .zip(short)
            .map(|((name, l), (_, s))| {
                format!(
                    "tail cost, {}-message ÷ 100-message thread, {name}: {:.2}",
                    sizes.long_thread,
                    l / s
                )
            })
            .collect();
        if let Some(last) = tables.last_mut() {
            last.notes = notes;
        }
    }
    tables
}

/// W4: lexical recall, limit 10, in an ordinary subject and in the big one.
pub async fn recall(
    sizes: &Sizes,
    backend: &str,
    ours: &Arc<dyn MemoryBackend>,
    raws: &[Arc<dyn RawDriver>],
    sentences: &[String],
    queries: &[String],
) -> Vec<Table> {
    // Facts i of the ordinary subjects go to subject i mod subjects; the big subject's follow.
    let subjects = sizes.recall_subjects;
    let big = subject(10_000);
    let fill = |scope: Scope, texts: Vec<String>| {
        let store = ours.clone();
        async move {
            for text in texts {
                store
                    .remember(&scope, NewFact::new(text), RememberOptions::default())
                    .await
                    .expect("remember");
            }
        }
    };
    let mut per_subject: Vec<Vec<String>> = vec![Vec::new(); subjects];
    for i in 0..sizes.facts {
        per_subject[i % subjects].push(nth(sentences, i).to_owned());
    }
    // Four writers: SQLite serialises them, servers take them in parallel.
    let mut fills: Vec<_> = per_subject
        .into_iter()
        .enumerate()
        .map(|(s, texts)| fill(subject(20_000 + s), texts))
        .collect();
    fills.push(fill(
        big.clone(),
        (0..sizes.big_subject_facts)
            .map(|i| nth(sentences, sizes.facts + i).to_owned())
            .collect(),
    ));
    for chunk in futures_chunks(fills, 4) {
        futures::future::join_all(chunk).await;
    }
    let mut tables = Vec::new();
    for (label, scope) in [
        (
            format!("a subject with {} facts", sizes.facts / subjects),
            subject(20_000),
        ),
        (
            format!("the subject with {} facts", sizes.big_subject_facts),
            big,
        ),
    ] {
        let queries: Arc<Vec<String>> =
            Arc::new(queries[..sizes.queries.min(queries.len())].to_vec());
        let (store, ours_scope, ours_queries) = (ours.clone(), scope.clone(), queries.clone());
        let hits_ours = Arc::new(AtomicUsize::new(0));
        let mut ours_side = FnSide::new("ours", || {
            let (store, scope, queries) = (store.clone(), ours_scope.clone(), ours_queries.clone());
            let hits = hits_ours.clone();
            async move {
                let mut latencies = Vec::with_capacity(queries.len());
                for q in queries.iter() {
                    let t = Instant::now();
                    let found = store
                        .recall(&scope, RecallQuery::text(q.clone()))
                        .await
                        .expect("recall");
                    latencies.push(t.elapsed());
                    hits.fetch_add(found.len(), Ordering::Relaxed);
                }
                Round::sequential(latencies)
            }
        });
        let mut raw_sides: Vec<_> = raws
            .iter()
            .map(|raw| {
                let (raw, scope, queries) = (raw.clone(), scope.clone(), queries.clone());
                FnSide::new(raw.name(), move || {
                    let (driver, scope, queries) = (raw.clone(), scope.clone(), queries.clone());
                    async move {
                        let mut latencies = Vec::with_capacity(queries.len());
                        for q in queries.iter() {
                            let t = Instant::now();
                            driver.recall(&scope, q, 10).await;
                            latencies.push(t.elapsed());
                        }
                        Round::sequential(latencies)
                    }
                })
            })
            .collect();
        let mut sides: Vec<&mut dyn Side> = vec![&mut ours_side];
        sides.extend(raw_sides.iter_mut().map(|side| side as &mut dyn Side));
        let mut table = compare(
            format!("W4 lexical recall, limit 10: {label}"),
            format!(
                "{backend}; {} facts over {subjects} subjects plus {} in one; {} queries (held-out sentences) per round",
                sizes.facts,
                sizes.big_subject_facts,
                queries.len()
            ),
            sizes.rounds,
            raws.iter().filter(|raw| !raw.alternative_ranking()).count(),
            &mut sides,
        )
        .await;
        let hits_ours = hits_ours.load(Ordering::Relaxed);
        table.notes.push(format!(
            "hits per query: {:.1}",
            hits_ours as f64 / (queries.len() * sizes.rounds) as f64
        ));
        // What each side recalls, against ours, outside the timed rounds.
        let mut ours_top = Vec::with_capacity(queries.len());
        for q in queries.iter() {
            let found = ours
                .recall(&scope, RecallQuery::text(q.clone()))
                .await
                .expect("recall");
            ours_top.push(
                found
                    .into_iter()
                    .map(|hit| hit.fact.text)
                    .collect::<Vec<_>>(),
            );
        }
        let wanted: usize = ours_top.iter().map(Vec::len).sum();
        for raw in raws {
            let mut shared = 0;
            for (q, ours) in queries.iter().zip(&ours_top) {
                let theirs = raw.recall(&scope, q, 10).await;
                if !raw.alternative_ranking() {
                    assert_eq!(theirs.len(), ours.len(), "{} recalls as many", raw.name());
                }
                shared += theirs.iter().filter(|text| ours.contains(text)).count();
            }
            table.notes.push(format!(
                "{}: overlap@10 with ours {:.1}% ({shared} of {wanted} recalled facts)",
                raw.name(),
                100.0 * shared as f64 / wanted.max(1) as f64
            ));
        }
        tables.push(table);
    }
    tables
}

/// Splits futures into groups of `n`.
fn futures_chunks<T>(items: Vec<T>, n: usize) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        if i % n == 0 {
            out.push(Vec::new());
        }
        out.last_mut().expect("pushed").push(item);
    }
    out
}

/// W9: working memory, alternating get and set of user documents over 100 subjects.
pub async fn working_memory(
    sizes: &Sizes,
    backend: &str,
    ours: &Arc<dyn MemoryBackend>,
    raws: &[Arc<dyn RawDriver>],
    peer: Option<&Arc<VoltAgent>>,
    paragraphs: &[String],
) -> Vec<Table> {
    let ops = sizes.working_ops;
    let contents: Arc<Vec<String>> = Arc::new(
        (0..ops)
            .map(|i| format!("# Notes\n\n{}\n", nth(paragraphs, i)))
            .collect(),
    );
    let (store, ours_contents) = (ours.clone(), contents.clone());
    let mut ours_side = FnSide::new("ours", || {
        let (store, contents) = (store.clone(), ours_contents.clone());
        async move {
            let mut latencies = Vec::with_capacity(ops);
            for i in 0..ops {
                let scope = subject(30_000 + (i / 2) % 100);
                let t = Instant::now();
                if i % 2 == 0 {
                    store
                        .get_working_memory(&scope, &WorkingMemoryKey::User)
                        .await
                        .expect("get working memory");
                } else {
                    store
                        .set_working_memory(
                            &scope,
                            &WorkingMemoryKey::User,
                            WorkingMemoryUpdate::markdown(contents[i].clone()),
                        )
                        .await
                        .expect("set working memory");
                }
                latencies.push(t.elapsed());
            }
            Round::sequential(latencies)
        }
    });
    let mut raw_sides: Vec<_> = raws
        .iter()
        .enumerate()
        .map(|(r, raw)| {
            let (raw, raw_contents) = (raw.clone(), contents.clone());
            FnSide::new(raw.name(), move || {
                let (driver, contents) = (raw.clone(), raw_contents.clone());
                async move {
                    let mut latencies = Vec::with_capacity(ops);
                    for i in 0..ops {
                        // Other subjects than ours: each side reads what it wrote.
                        let scope = subject(40_000 + 1_000 * r + (i / 2) % 100);
                        let t = Instant::now();
                        if i % 2 == 0 {
                            driver.get_working(&scope).await;
                        } else {
                            driver.set_working(&scope, &contents[i]).await;
                        }
                        latencies.push(t.elapsed());
                    }
                    Round::sequential(latencies)
                }
            })
        })
        .collect();
    let mut peer_side = peer.map(|peer| {
        let ops: Vec<Value> = (0..ops)
            .map(|i| {
                let user = format!("user-{}", 60_000 + (i / 2) % 100);
                if i % 2 == 0 {
                    json!([user, null])
                } else {
                    json!([user, contents[i]])
                }
            })
            .collect();
        let request = json!({ "op": "working", "ops": ops });
        FnSide::new(voltagent::NAME, move || {
            let (peer, request) = (peer.clone(), request.clone());
            async move { peer.round(request).await }
        })
    });
    let mut sides: Vec<&mut dyn Side> = vec![&mut ours_side];
    sides.extend(raw_sides.iter_mut().map(|side| side as &mut dyn Side));
    if let Some(peer) = peer_side.as_mut() {
        sides.push(peer);
    }
    let setting = format!(
        "{backend}; user documents of 100 subjects, {ops} operations per round, {} rounds",
        sizes.rounds
    );
    let mut idle = compare(
        "W9 working memory: 50/50 get/set",
        setting.clone(),
        sizes.rounds,
        raws.len(),
        &mut sides,
    )
    .await;
    peer_note(&mut idle);
    // The same, with every core kept busy by another program's threads: a call that hops
    // between threads waits for a core at each hop.
    let neighbour = Neighbour::start();
    let mut busy = compare(
        "W9 working memory under a CPU-bound neighbour: 50/50 get/set",
        format!(
            "{setting}; meanwhile {} threads spin on the CPU, one per core",
            neighbour.threads()
        ),
        sizes.rounds,
        raws.len(),
        &mut sides,
    )
    .await;
    drop(neighbour);
    peer_note(&mut busy);
    vec![idle, busy]
}

/// A CPU-bound neighbour: one thread per core spinning on arithmetic until dropped.
struct Neighbour {
    stop: Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Neighbour {
    fn start() -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let threads = (0..cores)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 1u64;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..10_000 {
                            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005) + 1);
                        }
                    }
                })
            })
            .collect();
        Self { stop, threads }
    }

    fn threads(&self) -> usize {
        self.threads.len()
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// The subject of a scope, as the peer's user id.
fn subject_name(scope: &Scope) -> &str {
    scope.subject().map_or("", |s| s.as_str())
}

fn peer_threads_json(threads: &[(Scope, ConversationId)]) -> Vec<Value> {
    threads
        .iter()
        .map(|(scope, id)| json!([subject_name(scope), id.as_str()]))
        .collect()
}

/// Adds "peer ÷ ours" for each VoltAgent row the table has (ours is the first row).
pub fn peer_note(table: &mut Table) {
    let ours = table.sides.first().map_or(f64::NAN, |s| s.median_us);
    let notes: Vec<String> = table
        .sides
        .iter()
        .filter(|s| s.name == voltagent::NAME || s.name == voltagent::SHIPPED)
        .map(|peer| format!("{} ÷ ours: {:.2}", peer.name, peer.median_us / ours))
        .collect();
    table.notes.extend(notes);
}

/// The core lexical ranking by hand: relevance descending, ties by id (facts here are
/// unscored, so the core's score tie-break does not apply).
pub fn rank(
    query_tokens: &std::collections::BTreeSet<String>,
    rows: Vec<(String, String)>,
    limit: usize,
) -> Vec<String> {
    let query = mnemix_core::lexical::QueryTokens::new(query_tokens);
    let held: Vec<Vec<usize>> = rows
        .iter()
        .map(|(_, text)| query.held_positions(text))
        .collect();
    let relevance = mnemix_core::lexical::relevances_of_held(query.len(), &held);
    let mut scored: Vec<(f64, String, String)> = rows
        .into_iter()
        .zip(relevance)
        .filter_map(|((id, text), r)| (r > 0.0).then_some((r, id, text)))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    scored.truncate(limit);
    scored.into_iter().map(|(_, _, text)| text).collect()
}

/// The query's tokens as the candidate statement binds them: a JSON array in token order.
pub fn query_tokens_json(text: &str) -> String {
    let tokens: Vec<String> = mnemix_core::lexical::tokenize(text).into_iter().collect();
    serde_json::to_string(&tokens).expect("tokens serialize")
}

/// The `pk`s of the top `limit` of the SQLite family's lexical candidates
/// (`mnemix_sqlite_family::facts::RECALL_CANDIDATES_HOLDING`) by the core's ranking, as the store
/// ranks them.
pub fn rank_holding(text: &str, json: &str, limit: usize) -> Vec<i64> {
    use mnemix_sqlite_family::facts::{parse_holding, rank};
    let query = RecallQuery::text(text).with_limit(limit);
    let candidates = parse_holding(json).expect("candidates");
    rank(&query, &candidates)
        .into_iter()
        .map(|(pk, _)| pk)
        .collect()
}

/// Texts of `(pk, text)` rows in the order of `top`.
pub fn in_rank_order(top: &[i64], rows: impl IntoIterator<Item = (i64, String)>) -> Vec<String> {
    let mut texts: HashMap<i64, String> = rows.into_iter().collect();
    top.iter()
        .map(|pk| texts.remove(pk).expect("a ranked fact is read"))
        .collect()
}

/// Time per operation in microseconds, for notes.
pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
