//! Small helpers the scenarios share: message builders, payloads, error-kind assertions.

use std::fmt::Debug;

use mnemix_core::{
    AppendOptions, CheckpointId, CheckpointStatus, Conversation, ConversationId, DeletionReceipt,
    MemoryError, Message, MessageId, Metric, NewCheckpoint, NewConversation, NewFact, Part,
    RememberOptions, Role, Scope, Timestamp, WorkingMemoryKey, WorkingMemoryUpdate,
};
use serde_json::json;

use crate::vectors::{collection, record, DIMS};
use crate::Ctx;

/// Assertions on the kind of a `Result`'s error.
pub trait ResultExt<T> {
    /// The value, or a panic naming `what`.
    fn must(self, what: &str) -> T;
    /// Panics unless the error is `NotFound`.
    fn must_be_not_found(self, what: &str);
    /// Panics unless the error is `Conflict`; returns it.
    fn must_be_conflict(self, what: &str) -> MemoryError;
    /// Panics unless the error is `InvalidInput`.
    fn must_be_invalid(self, what: &str);
    /// Panics unless the error is `AlreadyExists`.
    fn must_be_already_exists(self, what: &str);
}

impl<T: Debug> ResultExt<T> for Result<T, MemoryError> {
    fn must(self, what: &str) -> T {
        self.unwrap_or_else(|e| panic!("{what}: unexpected error {e:?}"))
    }

    fn must_be_not_found(self, what: &str) {
        match self {
            Err(e) if e.is_not_found() => {}
            other => panic!("{what}: expected NotFound, got {other:?}"),
        }
    }

    fn must_be_conflict(self, what: &str) -> MemoryError {
        match self {
            Err(e) if e.is_conflict() => e,
            other => panic!("{what}: expected Conflict, got {other:?}"),
        }
    }

    fn must_be_invalid(self, what: &str) {
        match self {
            Err(e) if e.is_invalid_input() => {}
            other => panic!("{what}: expected InvalidInput, got {other:?}"),
        }
    }

    fn must_be_already_exists(self, what: &str) {
        match self {
            Err(e) if e.is_already_exists() => {}
            other => panic!("{what}: expected AlreadyExists, got {other:?}"),
        }
    }
}

/// A message with a chosen id.
pub fn message(id: &str, role: Role, parts: Vec<Part>) -> Message {
    Message {
        id: MessageId::new(id).expect("valid id"),
        role,
        parts,
        created_at: Timestamp::from_millis(1_700_000_000_000),
        metadata: mnemix_core::Metadata::new(),
    }
}

/// A text message with a chosen id.
pub fn text(id: &str, role: Role, body: &str) -> Message {
    message(id, role, vec![Part::text(body)])
}

/// `n` user text messages `prefix-0`, `prefix-1`, ….
pub fn texts(prefix: &str, n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| {
            text(
                &format!("{prefix}-{i}"),
                Role::User,
                &format!("{prefix} message {i}"),
            )
        })
        .collect()
}

/// An id from text.
pub fn cid(id: &str) -> ConversationId {
    ConversationId::new(id).expect("valid id")
}

/// Creates an empty conversation in `scope`.
pub async fn conversation(ctx: &Ctx, scope: &Scope) -> Conversation {
    ctx.backend()
        .create_conversation(scope, NewConversation::default())
        .await
        .must("create conversation")
}

/// Creates a conversation in the main scope and appends `messages`.
pub async fn conversation_with(ctx: &Ctx, messages: Vec<Message>) -> Conversation {
    let c = conversation(ctx, ctx.scope()).await;
    ctx.backend()
        .append(ctx.scope(), &c.id, messages, AppendOptions::default())
        .await
        .must("append");
    c
}

/// Strings that break naive storage code: quoting, LIKE and JSON-path syntax, escapes, NUL,
/// ZWJ emoji, right-to-left text, combining marks. Each is named for the failure message.
pub fn payloads() -> Vec<(&'static str, String)> {
    vec![
        ("quotes", r#"it's "quoted" `back` 'single'"#.to_owned()),
        (
            "sql comment",
            "x -- y; DROP TABLE messages; /* z */".to_owned(),
        ),
        ("semicolon", "a;b;;c".to_owned()),
        ("like wildcards", "100% _under_ %_%".to_owned()),
        ("json path", "$.a[0].b ->> 'c' #> '{d}'".to_owned()),
        ("backslash", r"C:\path\to\file \\ \n \u0000 \x00".to_owned()),
        ("nul", "before\0after\0".to_owned()),
        ("emoji zwj", "family 👩‍👩‍👧‍👦 flag 🏳️‍🌈 skin 👍🏽".to_owned()),
        (
            "rtl",
            "مرحبا بالعالم \u{202E}desrever\u{202C} שלום".to_owned(),
        ),
        ("combining", "e\u{301} vs é, Å vs A\u{30A}".to_owned()),
        (
            "lua and redis",
            "{hash}:tag* [] ?redis.call('FLUSHALL')".to_owned(),
        ),
        ("control chars", "\t\r\n\u{1b}[31m\u{7f}".to_owned()),
        ("empty-ish", " ".to_owned()),
        ("max unicode", "\u{10FFFF}\u{FFFD}\u{FEFF}".to_owned()),
    ]
}

/// Payloads usable as identifiers (no NUL, at most 256 bytes).
pub fn identifier_payloads() -> Vec<(&'static str, String)> {
    payloads()
        .into_iter()
        .filter(|(_, p)| !p.contains('\0') && !p.trim().is_empty())
        .collect()
}

/// One mebibyte of multi-byte text.
pub fn one_mebibyte() -> String {
    let unit = "agent memory ✓ 記憶 ";
    let mut s = unit.repeat((1 << 20) / unit.len() + 1);
    while s.len() > 1 << 20 {
        s.pop();
    }
    s
}

/// The names of the suite namespace's collections, as listed (sorted by name).
pub async fn collection_names(ctx: &Ctx) -> Vec<String> {
    ctx.backend()
        .list_collections(ctx.namespace())
        .await
        .must("list collections")
        .into_iter()
        .map(|c| c.name)
        .collect()
}

/// A deterministic pseudo-random unit vector for seed `i`.
pub fn unit_vector(dims: usize, seed: u64) -> Vec<f32> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let v: Vec<f32> = (0..dims).map(|_| rng.f32() * 2.0 - 1.0).collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / norm).collect()
}

/// `n` unit vectors of `dims` components around 200 random centres (Gaussian noise of 0.6 per
/// component), seeded: data shaped like real embeddings, on which an approximate index's
/// recall means something (uniform random vectors have no neighbourhoods to find).
pub fn clustered_vectors(n: usize, dims: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let gauss = |rng: &mut fastrand::Rng| -> f32 {
        let (u, v) = (rng.f32().max(1e-9), rng.f32());
        (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
    };
    let centres: Vec<Vec<f32>> = (0..200)
        .map(|_| (0..dims).map(|_| gauss(&mut rng)).collect())
        .collect();
    (0..n)
        .map(|_| {
            let c = &centres[rng.usize(..centres.len())];
            let v: Vec<f32> = c.iter().map(|x| x + 0.6 * gauss(&mut rng)).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / norm).collect()
        })
        .collect()
}

/// Runs `writers` copies of `op` concurrently on separate tasks, each with its own handle to the
/// backend, the main scope and its writer number; returns their results in writer order.
pub async fn race<T, F, Fut>(ctx: &Ctx, writers: usize, op: F) -> Vec<Result<T, MemoryError>>
where
    F: Fn(std::sync::Arc<dyn mnemix_core::MemoryBackend>, Scope, usize) -> Fut,
    Fut: std::future::Future<Output = Result<T, MemoryError>> + Send + 'static,
    T: Send + 'static,
{
    let tasks = (0..writers).map(|w| tokio::spawn(op(ctx.backend_arc(), ctx.scope().clone(), w)));
    futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(|task| task.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic())))
        .collect()
}

/// Asserts exactly one of the raced results succeeded and every other is `Conflict`.
pub fn assert_one_winner<T: Debug>(results: &[Result<T, MemoryError>]) {
    let winners = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(winners, 1, "exactly one writer wins: {results:?}");
    assert!(
        results
            .iter()
            .filter_map(|r| r.as_ref().err())
            .all(MemoryError::is_conflict),
        "the others see Conflict: {results:?}"
    );
}

/// Loads a conversation of the main scope, panicking on error.
pub async fn load(
    ctx: &Ctx,
    id: &ConversationId,
    options: mnemix_core::LoadOptions,
) -> Vec<mnemix_core::StoredMessage> {
    ctx.backend()
        .load(ctx.scope(), id, options)
        .await
        .must("load")
}

/// Seeds one of everything for the main subject (vectors where the backend has them); returns
/// what `forget_all` must then count.
pub async fn seed_everything(ctx: &Ctx) -> DeletionReceipt {
    let b = ctx.backend();
    let c1 = conversation_with(ctx, texts("a", 3)).await;
    let c2 = conversation_with(ctx, texts("b", 2)).await;
    b.advance_cursor(ctx.scope(), &c1.id, "extract", 3)
        .await
        .must("cursor");
    b.set_working_memory(
        ctx.scope(),
        &WorkingMemoryKey::Conversation(c2.id.clone()),
        WorkingMemoryUpdate::markdown("x"),
    )
    .await
    .must("wm");
    b.set_working_memory(
        ctx.scope(),
        &WorkingMemoryKey::User,
        WorkingMemoryUpdate::markdown("u"),
    )
    .await
    .must("wm");
    for t in ["likes tea", "likes coffee"] {
        b.remember(ctx.scope(), NewFact::new(t), RememberOptions::default())
            .await
            .must("fact");
    }
    let keyed = |t: &str| NewFact::new(t).with_key("city");
    b.remember(ctx.scope(), keyed("in Rome"), RememberOptions::default())
        .await
        .must("fact");
    b.remember(ctx.scope(), keyed("in Oslo"), RememberOptions::default())
        .await
        .must("superseding fact");
    let vectors = if ctx.capabilities().has_vectors() {
        let cosine = collection(ctx, Metric::Cosine).await;
        let dot = collection(ctx, Metric::Dot).await;
        let records = |p: &str| {
            (0..3)
                .map(|i| record(&format!("{p}{i}"), unit_vector(DIMS, i), json!({})))
                .collect()
        };
        b.upsert_vectors(ctx.scope(), &cosine.name, records("c"))
            .await
            .must("vectors");
        b.upsert_vectors(ctx.scope(), &dot.name, records("d"))
            .await
            .must("vectors");
        6
    } else {
        0
    };
    let cp = NewCheckpoint::new(
        CheckpointId::new("run").unwrap(),
        "w",
        CheckpointStatus::Suspended,
        json!({}),
    );
    b.put_checkpoint(ctx.scope(), cp).await.must("checkpoint");
    // Where the feed is kept, each write above recorded one change naming the subject: two
    // creations and two appends, a cursor, two working memories, four facts, the vector
    // upserts (the collections are namespace-wide) and the checkpoint.
    let changes = if ctx.capabilities().change_feed {
        12 + vectors / 3
    } else {
        0
    };
    DeletionReceipt {
        conversations: 2,
        messages: 5,
        facts: 4,
        vectors,
        working_memory: 2,
        checkpoints: 1,
        cursors: 1,
        changes,
    }
}

/// One of every kind of record, for export, restore and copy checks: [`seed_everything`] for
/// the main subject plus a pruned thread (its first seq is 3, `last_seq` 5, cursor at 5), an
/// expiring scored fact and a namespace cache entry; for the other subject, every field of every
/// record filled with the [`payloads`] corpus (NUL, RTL, emoji, …); a shared-scope fact.
/// Returns the pruned thread.
pub async fn seed_every_kind(ctx: &Ctx) -> ConversationId {
    let b = ctx.backend();
    seed_everything(ctx).await;
    let thread = conversation(ctx, ctx.scope()).await;
    let pruning = AppendOptions::default().with_max_messages(3);
    b.append(ctx.scope(), &thread.id, texts("p", 5), pruning)
        .await
        .must("append with pruning");
    b.advance_cursor(ctx.scope(), &thread.id, "extract", 5)
        .await
        .must("cursor");
    let later = NewFact::new("likes night trains")
        .with_expires_at(
            ctx.clock_now()
                .saturating_add(std::time::Duration::from_hours(1)),
        )
        .with_tags(["travel"])
        .with_score(0.3);
    b.remember(ctx.scope(), later, RememberOptions::default())
        .await
        .must("expiring fact");
    b.cache_set(ctx.namespace(), "embedding:abc", vec![0, 1, 255], None)
        .await
        .must("cache");
    b.remember(
        &ctx.shared_scope(),
        NewFact::new("office closes at six"),
        RememberOptions::default(),
    )
    .await
    .must("shared fact");
    seed_payloads(ctx, ctx.other_scope()).await;
    thread.id
}

/// Every free-text field of every kind of record in `scope`, filled with the payload corpus.
async fn seed_payloads(ctx: &Ctx, scope: &Scope) {
    let b = ctx.backend();
    let corpus: Vec<String> = payloads().into_iter().map(|(_, p)| p).collect();
    let joined = corpus.join(" | ");
    let metadata = |i: usize| -> mnemix_core::Metadata {
        let serde_json::Value::Object(map) =
            json!({"text": corpus[i % corpus.len()], "i": i, "nested": {"all": corpus}})
        else {
            unreachable!()
        };
        map
    };
    let new = NewConversation::default()
        .with_title(joined.clone())
        .with_agent("agent")
        .with_metadata(metadata(0));
    let thread = b.create_conversation(scope, new).await.must("conversation");
    let messages: Vec<Message> = corpus
        .iter()
        .enumerate()
        .map(|(i, p)| Message {
            metadata: metadata(i),
            ..text(&format!("m{i}"), Role::User, p)
        })
        .collect();
    let ids: Vec<MessageId> = messages.iter().map(|m| m.id.clone()).collect();
    b.append(scope, &thread.id, messages, AppendOptions::default())
        .await
        .must("append payloads");
    b.set_working_memory(
        scope,
        &WorkingMemoryKey::User,
        WorkingMemoryUpdate::markdown(joined.clone()),
    )
    .await
    .must("working memory");
    for (i, p) in corpus.iter().enumerate() {
        let fact = NewFact::new(format!("fact {i}: {p}"))
            .with_kind("payload")
            .with_tags([format!("t{i}")])
            .with_score(1.0 / (i as f32 + 3.0))
            .with_source(mnemix_core::FactSource {
                conversation_id: thread.id.clone(),
                message_ids: ids.clone(),
            })
            .with_embedding(unit_vector(DIMS, i as u64));
        b.remember(scope, fact, RememberOptions::default())
            .await
            .must("payload fact");
    }
    if ctx.capabilities().has_vectors() {
        let spec = collection(ctx, Metric::Euclidean).await;
        let records = (0..corpus.len())
            .map(|i| {
                let mut r = record(
                    &format!("p{i}"),
                    unit_vector(DIMS, 100 + i as u64),
                    json!({}),
                );
                r.metadata = metadata(i);
                r.text = Some(corpus[i].clone());
                r.conversation_id = Some(thread.id.clone());
                r
            })
            .collect();
        b.upsert_vectors(scope, &spec.name, records)
            .await
            .must("payload vectors");
    }
    let checkpoint = NewCheckpoint::new(
        CheckpointId::new("payload-run").unwrap(),
        "payload",
        CheckpointStatus::Running,
        json!({"corpus": corpus}),
    );
    b.put_checkpoint(scope, checkpoint).await.must("checkpoint");
}

/// How a remember's cost grows with the subject's facts, for the measurement examples: two
/// subjects of `namespace` are filled, one with 100 facts and one with 10,000 (a third expiring
/// in an hour, a fifth keyed, keys repeating every 500); then the same 200 remembers go to each,
/// in interleaved pairs whose order alternates. Returns the medians in the small subject (100 to
/// 300 facts) and in the large one (10,000 to 10,200). Interleaving keeps the machine's drift,
/// the log's growth and its checkpoints alike on both sides, and the same facts ask the same work
/// of both (their keyed fifth supersedes on both), so only the subject's size differs. A store
/// that purges expired facts or finds duplicates by scanning the subject shows a ratio far
/// above 1.
pub async fn remember_growth(
    store: &dyn mnemix_core::FactStore,
    namespace: &str,
) -> (std::time::Duration, std::time::Duration) {
    use mnemix_core::{NewFact, RememberOptions, Timestamp};
    let hour = std::time::Duration::from_hours(1);
    let fact = |text: String, i: u64, key: String| {
        let mut fact = NewFact::new(text);
        if i.is_multiple_of(3) {
            fact.expires_at = Some(Timestamp::now().saturating_add(hour));
        }
        if i.is_multiple_of(5) {
            fact.key = Some(key);
        }
        fact
    };
    let small = Scope::new(namespace, "remember-among-100").expect("scope");
    let large = Scope::new(namespace, "remember-among-10000").expect("scope");
    for (scope, facts) in [(&small, 100u64), (&large, 10_000)] {
        for i in 0..facts {
            let text = format!("fact {i}: the user prefers option {}", i % 97);
            let new = fact(text, i, format!("preference-{}", i % 500));
            store
                .remember(scope, new, RememberOptions::default())
                .await
                .expect("remember");
        }
    }
    let mut took = [Vec::with_capacity(200), Vec::with_capacity(200)];
    for j in 0..200u64 {
        let order = if j.is_multiple_of(2) { [0, 1] } else { [1, 0] };
        for side in order {
            let text = format!("probe {j}: the user now prefers option {}", j % 89);
            let new = fact(text, j, format!("probe-{}", j % 20));
            let started = std::time::Instant::now();
            store
                .remember([&small, &large][side], new, RememberOptions::default())
                .await
                .expect("remember");
            took[side].push(started.elapsed());
        }
    }
    let [among_100, among_10000] = took.map(|mut samples| {
        samples.sort();
        samples[samples.len() / 2]
    });
    (among_100, among_10000)
}
