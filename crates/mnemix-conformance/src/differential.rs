//! The differential, model-based suite: generated sequences of operations over every contract
//! run on [`InMemoryBackend`] (the reference) and on the backend under test, and every answer
//! must be equal.
//!
//! Payloads are chosen to find the defects a hand-written scenario misses: JSON at and past the
//! depth limit and wide, NUL in free text, identifiers at their length limit, vectors at the norm
//! limit, tiny and subnormal components and exact ties, text in every Unicode normal form, and
//! clock moves across expiry instants. Answers are compared as JSON after two normalisations that
//! are not behaviour: generated fact ids become `fact#N` (each backend makes its own), and a
//! page's cursor becomes whether there is one (each page continues with the backend's own).
//!
//! Cases come from [`proptest`](mod@proptest) with fixed seeds ([`SEEDS`]), so a run is
//! reproducible; a failure prints the shrunk sequence of operations that shows it.
//! `MNEMIX_DIFFERENTIAL_CASES` sets the cases per seed (default [`DEFAULT_CASES`]) and
//! `MNEMIX_DIFFERENTIAL_SEED` one seed instead of the list;
//! `cargo xtask conformance --backend NAME --differential CASES` runs it longer.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use mnemix_core::registry;
use mnemix_core::{
    AppendOptions, CheckpointId, CheckpointStatus, CheckpointUpdate, Clock, CollectionSpec,
    ConversationId, ConversationQuery, FactId, FactQuery, Filter, InMemoryBackend, LoadOptions,
    MemoryBackend, MemoryError, Message, MessageId, Metric, Namespace, NewCheckpoint,
    NewConversation, NewFact, Origin, Page, Part, Principal, Provenance, RecallQuery,
    RememberOptions, Role, Scope, Timestamp, VectorId, VectorQuery, VectorRecord, VectorSearch,
    VectorSelector, WorkingMemoryFormat, WorkingMemoryKey, WorkingMemoryUpdate,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use serde_json::{json, Map, Value};

use crate::Ctx;

/// Generated cases per seed when `MNEMIX_DIFFERENTIAL_CASES` is unset (every backend's
/// conformance run, CI included).
pub const DEFAULT_CASES: u32 = 16;

/// The seeds run one after the other when `MNEMIX_DIFFERENTIAL_SEED` is unset.
pub const SEEDS: &[u64] = &[0x00a9_e47e_3e30_0001, 0x2, 0x3];

/// Dimensions of the generated collections.
const DIMS: usize = 4;

/// How many collections a sequence works on.
const COLLECTIONS: u8 = 2;

/// One operation of a generated sequence. Small integers pick among a few conversations,
/// keys, facts and records so that operations meet each other.
#[derive(Debug, Clone)]
enum Op {
    Create {
        conv: u8,
        metadata: Value,
    },
    Append {
        conv: u8,
        messages: Vec<(u8, Role, String, Value)>,
        expect: Option<u8>,
        max: Option<u8>,
    },
    Load {
        conv: u8,
        last: Option<u8>,
        before: Option<u8>,
        after: Option<u8>,
        users_only: bool,
        sanitize: bool,
    },
    Update {
        conv: u8,
        title: String,
        metadata: Value,
    },
    List {
        limit: u8,
        next: bool,
    },
    Delete {
        conv: u8,
    },
    Remember {
        text: String,
        /// An index into [`FACT_KINDS`] (reserved shapes among them).
        kind: Option<u8>,
        key: Option<u8>,
        tags: Vec<u8>,
        score: Option<f32>,
        ttl: Option<u8>,
        max_facts: Option<u8>,
        /// An index into [`fact_vector`]'s directions.
        embedding: Option<u8>,
        /// An index into [`WRITERS`]: the handle it is written through.
        writer: u8,
        /// World time, in [`WORLD_STEP_MS`] steps: when it became true, and for how long.
        valid_from: Option<u8>,
        valid_for: Option<u8>,
    },
    /// A recall by `text`, and by a [`fact_vector`] direction too (hybrid) when given; kept to
    /// writers and origins (indexes into [`WRITERS`]), and of the past when asked.
    Recall {
        text: String,
        limit: u8,
        min_score: Option<f32>,
        vector: Option<u8>,
        written_by: Vec<u8>,
        origins: Vec<u8>,
        /// World time, in [`WORLD_STEP_MS`] steps.
        as_of: Option<u8>,
        /// Seconds before the clock's now.
        known_seconds_ago: Option<u8>,
    },
    GetFact {
        fact: u8,
    },
    Forget {
        fact: u8,
    },
    /// `set_expiry` of these facts (by index, repeats included): in `ttl` seconds, or never.
    SetExpiry {
        facts: Vec<u8>,
        ttl: Option<u8>,
    },
    History {
        key: u8,
    },
    ListFacts {
        superseded: bool,
        limit: u8,
        next: bool,
    },
    SetWorking {
        conv: Option<u8>,
        content: Value,
        expect: Option<u8>,
    },
    GetWorking {
        conv: Option<u8>,
    },
    PutCheckpoint {
        id: u8,
        state: Value,
    },
    UpdateCheckpoint {
        id: u8,
        version: u8,
        state: Value,
    },
    GetCheckpoint {
        id: u8,
    },
    Ensure {
        coll: u8,
        metric: Metric,
    },
    Upsert {
        coll: u8,
        records: Vec<(u8, [f32; DIMS], Value)>,
    },
    Search {
        coll: u8,
        vector: [f32; DIMS],
        k: u8,
        filter: Option<Filter>,
        min_score: Option<f32>,
    },
    DeleteVectors {
        coll: u8,
        ids: Vec<u8>,
    },
    /// `registry::register_kind` of a name from [`KIND_NAMES`] (`:` and `_` among them), a
    /// schema nested `depth` levels (around the limit), unique on a declared, an optional or an
    /// undeclared field.
    RegisterKind {
        name: u8,
        depth: usize,
        unique: u8,
    },
    /// `registry::kinds`, then `registry::grants`.
    Registry,
    /// `registry::put_grant` to the other subject, of no kind or of a name from [`KIND_NAMES`].
    Grant {
        kind: Option<u8>,
    },
    /// `forget` (or with `expire`, `set_expiry`) of a registry record of the shared scope,
    /// picked by its key: only the registry's own operations may change one.
    ChangeRegistryRecord {
        record: u8,
        expire: bool,
    },
    /// Export of the scope, edited by [`edit_export`], restored.
    Restore {
        edit: u8,
    },
    Advance {
        seconds: u8,
    },
    ForgetAll,
    /// `count_owned`: the dry run of `forget_all`.
    CountOwned,
    /// `forget_namespace` of the case's namespace: every scope, collections, cache.
    ForgetNamespace,
    /// The namespace's change feed, from the start: each change's operation, subject,
    /// container, number of ids and writer (where the backend keeps a feed).
    Changes,
}

fn words() -> impl Strategy<Value = String> {
    // Every Unicode form of one word, ligatures and full-width letters, NUL, short tokens.
    let vocabulary = prop::sample::select(vec![
        "café",
        "cafe\u{301}",
        "CAFÉ",
        "Zu\u{308}rich",
        "zürich",
        "ﬁnance",
        "finance",
        "ｆｕｌｌ",
        "full",
        "deploy",
        "deploys",
        "region",
        "ok",
        "a",
        "nul\0byte",
        "東京都",
        "straße",
        "ОКНО",
    ]);
    prop::collection::vec(vocabulary, 1..4).prop_map(|w| w.join(" "))
}

fn free_text() -> impl Strategy<Value = String> {
    prop_oneof![
        words(),
        Just(String::new()),
        Just("\0".to_owned()),
        Just("é".repeat(128)),
        Just("x".repeat(4096)),
    ]
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop::sample::select(vec![0i64, -1, 7, i64::MAX, i64::MIN]).prop_map(Value::from),
        prop::sample::select(vec![0.5f64, -0.0, 1e300, 5e-324, 0.1]).prop_map(Value::from),
        free_text().prop_map(Value::String),
    ]
}

/// Metadata-like objects: small and nested, wide, or nested exactly to and past the limit.
fn json_object() -> impl Strategy<Value = Value> {
    let small = json_leaf().prop_recursive(3, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-c\0é]{0,3}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop_oneof![
        4 => prop::collection::btree_map("[a-d]{1,2}", small, 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        1 => Just(Value::Object((0..200).map(|i| (format!("k{i}"), json!(i))).collect())),
        1 => prop::sample::select(vec![
            mnemix_core::limits::MAX_JSON_DEPTH - 1,
            mnemix_core::limits::MAX_JSON_DEPTH,
            mnemix_core::limits::MAX_JSON_DEPTH + 1,
        ])
        .prop_map(nested),
    ]
}

/// An object `depth` levels deep counting itself: `{"d":{"d":…"leaf"}}`.
fn nested(depth: usize) -> Value {
    (1..depth).fold(json!({"d": "leaf"}), |inner, _| json!({ "d": inner }))
}

fn component() -> impl Strategy<Value = f32> {
    prop::sample::select(vec![
        0.0f32, 1.0, -1.0, 0.5, 0.1, 1e-30, 1e-40, 1.2e19, -1.2e19, 3e38,
    ])
}

fn vector() -> impl Strategy<Value = [f32; DIMS]> {
    prop::array::uniform4(component())
}

fn score() -> impl Strategy<Value = Option<f32>> {
    prop::option::of(prop::sample::select(vec![0.0f32, 0.2, 0.5, 1.0, 1.5]))
}

fn filter() -> impl Strategy<Value = Filter> {
    prop_oneof![
        (0i64..3).prop_map(|v| Filter::eq("n", v)),
        (0i64..3).prop_map(|v| Filter::ne("n", v)),
        Just(Filter::exists("s")),
        free_text().prop_map(|s| Filter::eq("s", s)),
        (0i64..3).prop_map(|v| Filter::not(Filter::eq("n", v))),
    ]
}

fn vector_metadata() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => (0i64..3, free_text()).prop_map(|(n, s)| json!({"n": n, "s": s})),
        1 => json_object(),
    ]
}

fn op(vectors: bool, feed: bool) -> BoxedStrategy<Op> {
    // Facts with embeddings, and recalls by a vector, where the backend searches vectors:
    // the facts a store holds between recalls meet every write the sequence makes.
    let fact_direction = if vectors {
        prop::option::of(0u8..4).boxed()
    } else {
        Just(None).boxed()
    };
    let conv = 0u8..3;
    let small = || prop::option::of(0u8..6);
    let message = (
        0u8..6,
        prop::sample::select(vec![Role::User, Role::Assistant]),
        free_text(),
        json_object(),
    );
    let mut ops = vec![
        (conv.clone(), json_object())
            .prop_map(|(conv, metadata)| Op::Create { conv, metadata })
            .boxed(),
        (
            conv.clone(),
            prop::collection::vec(message, 0..4),
            small(),
            prop::option::of(1u8..5),
        )
            .prop_map(|(conv, messages, expect, max)| Op::Append {
                conv,
                messages,
                expect,
                max,
            })
            .boxed(),
        (
            conv.clone(),
            small(),
            small(),
            small(),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(conv, last, before, after, users_only, sanitize)| Op::Load {
                    conv,
                    last,
                    before,
                    after,
                    users_only,
                    sanitize,
                },
            )
            .boxed(),
        (conv.clone(), free_text(), json_object())
            .prop_map(|(conv, title, metadata)| Op::Update {
                conv,
                title,
                metadata,
            })
            .boxed(),
        (1u8..4, any::<bool>())
            .prop_map(|(limit, next)| Op::List { limit, next })
            .boxed(),
        conv.clone().prop_map(|conv| Op::Delete { conv }).boxed(),
        (
            words(),
            prop::option::of(0..FACT_KINDS.len() as u8),
            prop::option::of(0u8..5),
            prop::collection::vec(0u8..4, 0..3),
            score(),
            prop::option::of(0u8..4),
            prop::option::of(1u8..5),
            fact_direction.clone(),
            (
                0..WRITERS.len() as u8,
                prop::option::of(0u8..8),
                prop::option::of(0u8..4),
            ),
        )
            .prop_map(
                |(
                    text,
                    kind,
                    key,
                    tags,
                    score,
                    ttl,
                    max_facts,
                    embedding,
                    (writer, valid_from, valid_for),
                )| Op::Remember {
                    text,
                    kind,
                    key,
                    tags,
                    score,
                    ttl,
                    max_facts,
                    embedding,
                    writer,
                    valid_from,
                    valid_for,
                },
            )
            .boxed(),
        (
            words(),
            1u8..5,
            score(),
            fact_direction,
            (
                prop::collection::vec(0..WRITERS.len() as u8, 0..2),
                prop::collection::vec(0..WRITERS.len() as u8, 0..2),
                prop::option::of(0u8..10),
                prop::option::of(0u8..6),
            ),
        )
            .prop_map(
                |(text, limit, min_score, vector, (written_by, origins, as_of, known))| {
                    Op::Recall {
                        text,
                        limit,
                        min_score,
                        vector,
                        written_by,
                        origins,
                        as_of,
                        known_seconds_ago: known,
                    }
                },
            )
            .boxed(),
        any::<u8>().prop_map(|fact| Op::GetFact { fact }).boxed(),
        any::<u8>().prop_map(|fact| Op::Forget { fact }).boxed(),
        (
            prop::collection::vec(any::<u8>(), 0..4),
            prop::option::of(0u8..4),
        )
            .prop_map(|(facts, ttl)| Op::SetExpiry { facts, ttl })
            .boxed(),
        (0u8..3).prop_map(|key| Op::History { key }).boxed(),
        (any::<bool>(), 1u8..4, any::<bool>())
            .prop_map(|(superseded, limit, next)| Op::ListFacts {
                superseded,
                limit,
                next,
            })
            .boxed(),
        (prop::option::of(conv.clone()), json_object(), small())
            .prop_map(|(conv, content, expect)| Op::SetWorking {
                conv,
                content,
                expect,
            })
            .boxed(),
        prop::option::of(conv.clone())
            .prop_map(|conv| Op::GetWorking { conv })
            .boxed(),
        (0u8..2, json_object())
            .prop_map(|(id, state)| Op::PutCheckpoint { id, state })
            .boxed(),
        (0u8..2, 0u8..4, json_object())
            .prop_map(|(id, version, state)| Op::UpdateCheckpoint { id, version, state })
            .boxed(),
        (0u8..2).prop_map(|id| Op::GetCheckpoint { id }).boxed(),
        (0u8..4).prop_map(|seconds| Op::Advance { seconds }).boxed(),
        Just(Op::ForgetAll).boxed(),
        Just(Op::CountOwned).boxed(),
        Just(Op::ForgetNamespace).boxed(),
        (
            0..KIND_NAMES.len() as u8,
            prop::sample::select(vec![
                1,
                mnemix_core::limits::MAX_JSON_DEPTH,
                mnemix_core::limits::MAX_JSON_DEPTH + 1,
            ]),
            0u8..4,
        )
            .prop_map(|(name, depth, unique)| Op::RegisterKind {
                name,
                depth,
                unique,
            })
            .boxed(),
        Just(Op::Registry).boxed(),
        prop::option::of(0..KIND_NAMES.len() as u8)
            .prop_map(|kind| Op::Grant { kind })
            .boxed(),
        (any::<u8>(), any::<bool>())
            .prop_map(|(record, expire)| Op::ChangeRegistryRecord { record, expire })
            .boxed(),
        (0..EXPORT_EDITS)
            .prop_map(|edit| Op::Restore { edit })
            .boxed(),
    ];
    if feed {
        ops.push(Just(Op::Changes).boxed());
    }
    if vectors {
        let metric = prop::sample::select(vec![Metric::Cosine, Metric::Dot, Metric::Euclidean]);
        ops.extend([
            (0..COLLECTIONS, metric)
                .prop_map(|(coll, metric)| Op::Ensure { coll, metric })
                .boxed(),
            (
                0..COLLECTIONS,
                prop::collection::vec((0u8..6, vector(), vector_metadata()), 0..5),
            )
                .prop_map(|(coll, records)| Op::Upsert { coll, records })
                .boxed(),
            (
                0..COLLECTIONS,
                vector(),
                1u8..5,
                prop::option::of(filter()),
                score(),
            )
                .prop_map(|(coll, vector, k, filter, min_score)| Op::Search {
                    coll,
                    vector,
                    k,
                    filter,
                    min_score,
                })
                .boxed(),
            (0..COLLECTIONS, prop::collection::vec(0u8..6, 0..3))
                .prop_map(|(coll, ids)| Op::DeleteVectors { coll, ids })
                .boxed(),
        ]);
    }
    // The four vector operations weigh four times the others: about half of a sequence.
    let weighted = ops
        .into_iter()
        .enumerate()
        .map(|(i, op)| (if i >= NON_VECTOR_OPS { 4 } else { 1 }, op));
    prop::strategy::Union::new_weighted(weighted.collect()).boxed()
}

/// One of four directions of a fact's embedding or a recall's vector (few, so facts tie).
fn fact_vector(direction: u8) -> Vec<f32> {
    crate::support::unit_vector(4, u64::from(direction))
}

/// How many of [`op`]'s strategies come before the vector ones.
const NON_VECTOR_OPS: usize = 23;

/// Fact kinds a remember draws from: ordinary ones, and the registry's reserved shapes.
const FACT_KINDS: [&str; 4] = ["note", "a:b", "_kind", "_grant"];
/// Fact keys a remember draws from: `key-N`, a key of a memory's shape, reserved ones.
const FACT_KEYS: [&str; 5] = ["key-0", "key-1", "a:b:x", "_kind:Pref", "_grant:x"];
/// Fact tags a remember draws from (one reserved).
const FACT_TAGS: [&str; 4] = ["tag0", "tag1", "tag2", "_to:x"];
/// Kind names the registry operations draw from: valid, with `:`, reserved.
const KIND_NAMES: [&str; 4] = ["Pref", "Note", "a:b", "_x"];
/// How many edits [`edit_export`] knows.
const EXPORT_EDITS: u8 = 7;

/// A kind's schema: an object nested `depth` levels, declaring `category` (required) and
/// `note` (optional).
fn kind_schema(depth: usize) -> Value {
    let mut schema = json!({"type": "object", "required": ["category"],
        "properties": {"category": {"type": "string"}, "note": {"type": "string"}}});
    if depth > 1 {
        schema["properties"]["deep"] = nested(depth.saturating_sub(2).max(1));
    }
    schema
}

/// An export of a scope as a restore would see it after an edit: 0 none, 1 the first message's
/// seq moved past the end, 2 NUL in the first fact's key, 3 the first fact's kind reserved,
/// 4 the first fact's text emptied, 5 its score out of range, 6 the first fact moved to the
/// shared scope under a registry kind.
fn edit_export(records: &mut [mnemix_core::transfer::Record], edit: u8) {
    use mnemix_core::transfer::Record;
    let first_message = records.iter_mut().find_map(|r| match r {
        Record::Message { message, .. } => Some(message),
        _ => None,
    });
    if edit == 1 {
        if let Some(message) = first_message {
            message.seq += 10;
        }
        return;
    }
    let Some(fact) = records.iter_mut().find_map(|r| match r {
        Record::Fact { fact } => Some(fact),
        _ => None,
    }) else {
        return;
    };
    match edit {
        2 => fact.key = Some("a\0b".into()),
        3 => fact.kind = Some("_kind".into()),
        4 => fact.text = String::new(),
        5 => fact.score = Some(7.0),
        6 => {
            fact.scope = Scope::shared(fact.scope.namespace().as_str()).expect("shared scope");
            fact.kind = Some("_grant".into());
        }
        _ => {}
    }
}

/// What one backend has made so far that later operations refer to.
#[derive(Default)]
struct Made {
    /// Fact ids in the order this backend returned them (a `fact` operand picks by index).
    facts: Vec<FactId>,
    /// Each fact id's alias, `fact#N`, the same across backends when they agree.
    aliases: HashMap<String, String>,
    /// The next page's cursor of the last conversation and fact listings.
    conversations_cursor: Option<String>,
    facts_cursor: Option<String>,
}

impl Made {
    fn learn(&mut self, id: &FactId) {
        if !self.aliases.contains_key(id.as_str()) {
            self.aliases
                .insert(id.to_string(), format!("fact#{}", self.aliases.len()));
            self.facts.push(id.clone());
        }
    }

    /// Replaces every fact id in the answer by its alias.
    fn normalise(&self, value: &mut Value) {
        match value {
            Value::String(s) => {
                if let Some(alias) = self.aliases.get(s.as_str()) {
                    alias.clone_into(s);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.normalise(v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.normalise(v)),
            _ => {}
        }
    }
}

fn conversation_id(conv: u8) -> ConversationId {
    ConversationId::new(format!("c{conv}-{}", "é".repeat(100))).expect("id")
}

fn collection_name(coll: u8) -> String {
    format!("diff-{coll}")
}

/// A generated message, created at the test clock's instant (not the system's, which moves
/// between the reference's call and the backend's).
fn message_of(
    (id, role, text, metadata): &(u8, Role, String, Value),
    clock: &dyn Clock,
) -> Message {
    let mut message = Message::new(*role, vec![Part::text(text.clone())]);
    message.id = MessageId::new(format!("m{id}")).expect("id");
    message.created_at = clock.now();
    if let Value::Object(map) = metadata {
        message.metadata.clone_from(map);
    }
    message
}

fn object(value: &Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map.clone(),
        other => Map::from_iter([("value".to_owned(), other.clone())]),
    }
}

/// A namespace's whole feed as the reference and a backend can agree on it: ids of facts and
/// cursors are each store's own, so each change's ids are counted, not compared.
async fn feed_summary(
    b: &dyn MemoryBackend,
    namespace: &Namespace,
) -> Result<Vec<Value>, MemoryError> {
    let (mut summary, mut after) = (Vec::new(), mnemix_core::ChangeCursor::START);
    loop {
        let changes = b.changes(namespace, after, 1_000).await?;
        let Some(last) = changes.last() else {
            return Ok(summary);
        };
        after = last.cursor;
        summary.extend(changes.iter().map(|c| {
            json!([
                c.operation,
                c.subject,
                c.within,
                c.records.len(),
                c.principal.to_string(),
                c.scrubbed
            ])
        }));
    }
}

fn answer<T: serde::Serialize>(result: Result<T, MemoryError>) -> Value {
    match result {
        Ok(value) => json!({ "ok": serde_json::to_value(value).expect("answers serialise") }),
        Err(e) if e.is_invalid_input() => json!({ "err": "invalid input" }),
        Err(e) if e.is_not_found() => json!({ "err": "not found" }),
        Err(e) if e.is_conflict() => json!({ "err": "conflict" }),
        Err(e) if e.is_already_exists() => json!({ "err": "already exists" }),
        Err(e) => json!({ "err": format!("unexpected: {e}") }),
    }
}

/// A listing's answer: its items and whether there is more; the backend's own cursor is kept
/// in `cursor` for a following `next` listing.
fn page_answer<T: serde::Serialize>(
    result: Result<Page<T>, MemoryError>,
    cursor: &mut Option<String>,
) -> Value {
    match result {
        Ok(page) => {
            cursor.clone_from(&page.next_cursor);
            json!({ "ok": page.items, "more": page.next_cursor.is_some() })
        }
        Err(e) => answer::<()>(Err(e)),
    }
}

/// The handles facts are written through: who, and from what.
const WRITERS: [(&str, Origin); 4] = [
    ("", Origin::Api),
    ("planner", Origin::Api),
    ("planner", Origin::User),
    ("model", Origin::Tool),
];

/// One step of world time (valid times and `as_of`).
const WORLD_STEP_MS: i64 = 1_000;

/// World time `steps` of [`WORLD_STEP_MS`] after the epoch.
fn world_time(steps: u8) -> Timestamp {
    Timestamp::from_millis(i64::from(steps) * WORLD_STEP_MS)
}

/// The writer of [`WRITERS`] at `index`: the program, an agent, or an extractor.
fn writer_of(index: u8) -> Provenance {
    let (id, origin) = WRITERS[usize::from(index) % WRITERS.len()];
    let principal = match (id, origin) {
        ("", _) => Principal::program(),
        (model, Origin::Tool) => Principal::extractor(model).expect("a model name"),
        (agent, _) => Principal::agent(agent).expect("an agent id"),
    };
    Provenance::new(principal, origin)
}

/// Applies one operation; returns its answer as JSON before normalisation.
#[allow(clippy::too_many_lines)] // one arm per operation reads best as one match
async fn apply(
    b: &dyn MemoryBackend,
    scope: &Scope,
    made: &mut Made,
    clock: &dyn Clock,
    op: &Op,
) -> Value {
    match op {
        Op::Create { conv, metadata } => answer(
            b.create_conversation(
                scope,
                NewConversation::default()
                    .with_id(conversation_id(*conv))
                    .with_metadata(object(metadata)),
            )
            .await,
        ),
        Op::Append {
            conv,
            messages,
            expect,
            max,
        } => answer(
            b.append(
                scope,
                &conversation_id(*conv),
                messages.iter().map(|m| message_of(m, clock)).collect(),
                {
                    let mut value = AppendOptions::default();
                    value.expected_last_seq = expect.map(u64::from);
                    value.max_messages = max.map(u64::from);
                    value
                },
            )
            .await,
        ),
        Op::Load {
            conv,
            last,
            before,
            after,
            users_only,
            sanitize,
        } => answer(
            b.load(scope, &conversation_id(*conv), {
                let mut value = LoadOptions::default();
                value.last = last.map(usize::from);
                value.before_seq = before.map(u64::from);
                value.after_seq = after.map(u64::from);
                value.roles = users_only.then(|| vec![Role::User]);
                value.sanitize = *sanitize;
                value
            })
            .await,
        ),
        Op::Update {
            conv,
            title,
            metadata,
        } => answer(
            b.update_conversation(
                scope,
                &conversation_id(*conv),
                mnemix_core::ConversationUpdate {
                    title: Some(Some(title.clone())),
                    metadata: Some(object(metadata)),
                },
            )
            .await,
        ),
        Op::List { limit, next } => {
            let cursor = if *next {
                made.conversations_cursor.take()
            } else {
                None
            };
            let query = ConversationQuery::default()
                .with_limit(usize::from(*limit))
                .with_cursor(cursor);
            page_answer(
                b.list_conversations(scope, query).await,
                &mut made.conversations_cursor,
            )
        }
        Op::Delete { conv } => answer(b.delete_conversation(scope, &conversation_id(*conv)).await),
        Op::Remember {
            text,
            kind,
            key,
            tags,
            score,
            ttl,
            max_facts,
            embedding,
            writer,
            valid_from,
            valid_for,
        } => {
            let through = b
                .acting_as(writer_of(*writer))
                .expect("both sides are behind the front layer");
            let new = {
                let from = valid_from.map(world_time);
                let until = valid_for.map(|span| {
                    world_time(
                        valid_from
                            .unwrap_or(0)
                            .saturating_add(span)
                            .saturating_add(1),
                    )
                });
                let mut value = NewFact::new(text.clone())
                    .with_valid_from(from)
                    .with_valid_until(until)
                    .with_embedding(embedding.map(fact_vector))
                    .with_tags(tags.iter().map(|&t| FACT_TAGS[usize::from(t)]))
                    .with_score(*score)
                    .with_expires_at(ttl.map(|s| {
                        clock
                            .now()
                            .saturating_add(Duration::from_secs(u64::from(s)))
                    }));
                value.kind = kind.map(|k| FACT_KINDS[usize::from(k)].to_owned());
                value.key = key.map(|k| FACT_KEYS[usize::from(k)].to_owned());
                value
            };
            let options = {
                let mut value = RememberOptions::default();
                value.max_facts = max_facts.map(usize::from);
                value
            };
            let outcome = through.remember(scope, new, options).await;
            if let Ok(outcome) = &outcome {
                made.learn(&outcome.fact.id);
            }
            answer(outcome)
        }
        Op::Recall {
            text,
            limit,
            min_score,
            vector,
            written_by,
            origins,
            as_of,
            known_seconds_ago,
        } => answer(
            b.recall(scope, {
                let mut value = RecallQuery::text(text.clone())
                    .with_written_by(written_by.iter().map(|&w| writer_of(w).written_by))
                    .with_origins(origins.iter().map(|&w| writer_of(w).origin));
                value.vector = vector.map(fact_vector);
                value.limit = Some(usize::from(*limit));
                value.min_score = *min_score;
                value.as_of = as_of.map(world_time);
                value.known_at = known_seconds_ago.map(|ago| {
                    Timestamp::from_millis(clock.now().as_millis() - i64::from(ago) * 1_000)
                });
                value
            })
            .await,
        ),
        Op::GetFact { fact } | Op::Forget { fact } => {
            let Some(id) = (!made.facts.is_empty())
                .then(|| made.facts[usize::from(*fact) % made.facts.len()].clone())
            else {
                return json!("no fact yet");
            };
            if matches!(op, Op::GetFact { .. }) {
                answer(b.get_fact(scope, &id).await)
            } else {
                answer(b.forget(scope, &id).await)
            }
        }
        Op::SetExpiry { facts, ttl } => {
            if made.facts.is_empty() {
                return json!("no fact yet");
            }
            let ids: Vec<FactId> = facts
                .iter()
                .map(|i| made.facts[usize::from(*i) % made.facts.len()].clone())
                .collect();
            let at = ttl.map(|s| {
                clock
                    .now()
                    .saturating_add(Duration::from_secs(u64::from(s)))
            });
            answer(b.set_expiry(scope, &ids, at).await)
        }
        Op::History { key } => answer(b.history(scope, &format!("key-{key}")).await),
        Op::ListFacts {
            superseded,
            limit,
            next,
        } => {
            let cursor = if *next {
                made.facts_cursor.take()
            } else {
                None
            };
            let query = FactQuery::default()
                .with_include_superseded(*superseded)
                .with_limit(usize::from(*limit))
                .with_cursor(cursor);
            page_answer(b.list_facts(scope, query).await, &mut made.facts_cursor)
        }
        Op::SetWorking {
            conv,
            content,
            expect,
        } => answer(
            b.set_working_memory(
                scope,
                &working_key(*conv),
                WorkingMemoryUpdate {
                    content: content.to_string(),
                    format: WorkingMemoryFormat::Json,
                    expected_revision: expect.map(u64::from),
                },
            )
            .await,
        ),
        Op::GetWorking { conv } => answer(b.get_working_memory(scope, &working_key(*conv)).await),
        Op::PutCheckpoint { id, state } => answer(
            b.put_checkpoint(
                scope,
                NewCheckpoint::new(
                    checkpoint_id(*id),
                    "flow",
                    CheckpointStatus::Suspended,
                    state.clone(),
                ),
            )
            .await,
        ),
        Op::UpdateCheckpoint { id, version, state } => answer(
            b.update_checkpoint(
                scope,
                &checkpoint_id(*id),
                CheckpointUpdate {
                    expected_version: u64::from(*version),
                    status: CheckpointStatus::Suspended,
                    state: state.clone(),
                },
            )
            .await,
        ),
        Op::GetCheckpoint { id } => answer(b.get_checkpoint(scope, &checkpoint_id(*id)).await),
        Op::Ensure { coll, metric } => answer(
            b.ensure_collection(
                scope.namespace(),
                CollectionSpec::new(collection_name(*coll), DIMS, "m").with_metric(*metric),
            )
            .await,
        ),
        Op::Upsert { coll, records } => {
            let records = records
                .iter()
                .map(|(id, vector, metadata)| {
                    VectorRecord::new(vector_id(*id), vector.to_vec())
                        .with_metadata(object(metadata))
                        .with_text(format!("record {id}"))
                })
                .collect();
            answer(
                b.upsert_vectors(scope, &collection_name(*coll), records)
                    .await,
            )
        }
        Op::Search {
            coll,
            vector,
            k,
            filter,
            min_score,
        } => {
            let mut query =
                VectorQuery::new(vector.to_vec(), usize::from(*k)).with_include_vectors(true);
            query.filter.clone_from(filter);
            query.min_score = *min_score;
            answer(b.search(scope, &collection_name(*coll), query).await)
        }
        Op::DeleteVectors { coll, ids } => answer(
            b.delete_vectors(
                scope,
                &collection_name(*coll),
                VectorSelector::Ids(ids.iter().map(|i| vector_id(*i)).collect()),
            )
            .await,
        ),
        Op::Advance { .. } => json!("advanced"),
        Op::ForgetAll => answer(b.forget_all(scope).await),
        Op::CountOwned => answer(b.count_owned(scope).await),
        Op::ForgetNamespace => answer(b.forget_namespace(scope.namespace()).await),
        Op::Changes => answer(feed_summary(b, scope.namespace()).await),
        Op::RegisterKind {
            name,
            depth,
            unique,
        } => {
            let unique_on: &[&str] = match unique {
                0 => &[],
                1 => &["category"],
                2 => &["note"],
                _ => &["categroy"],
            };
            let spec = registry::KindSpec::new(KIND_NAMES[usize::from(*name)], kind_schema(*depth))
                .unique_on(unique_on.iter().copied());
            answer(registry::register_kind(b, scope.namespace(), &spec).await)
        }
        Op::Registry => {
            // Invariant, on the reference as on the backend: whatever was written or refused
            // before, the registry reads.
            let kinds = registry::kinds(b, scope.namespace()).await;
            let grants = registry::grants(b, scope.namespace()).await;
            assert!(
                kinds.is_ok() && grants.is_ok(),
                "the registry must always read: {kinds:?} {grants:?}"
            );
            json!({"kinds": answer(kinds), "grants": answer(grants)})
        }
        Op::ChangeRegistryRecord { record, expire } => {
            let shared = Scope::shared(scope.namespace().as_str()).expect("shared scope");
            let query = FactQuery::default()
                .with_include_superseded(true)
                .with_limit(1000);
            let listed = match b.list_facts(&shared, query).await {
                Ok(page) => page.items,
                Err(e) => return answer::<()>(Err(e)),
            };
            // By key and time, not id: ids differ between the backend and the reference.
            let mut records: Vec<_> = listed
                .into_iter()
                .filter(registry::is_registry_record)
                .map(|fact| (fact.key.clone(), fact.created_at, fact.id))
                .collect();
            records.sort();
            let Some((_, _, id)) = records
                .get(usize::from(*record) % records.len().max(1))
                .cloned()
            else {
                return json!("no registry record yet");
            };
            if *expire {
                answer(b.set_expiry(&shared, &[id], None).await)
            } else {
                answer(b.forget(&shared, &id).await)
            }
        }
        Op::Grant { kind } => {
            let grant = registry::Grant {
                kinds: kind
                    .map(|k| KIND_NAMES[usize::from(k)].to_owned())
                    .into_iter()
                    .collect(),
                ..registry::Grant::new(
                    scope.subject().expect("a subject's scope").clone(),
                    mnemix_core::Subject::new("grantee").expect("a subject"),
                )
            };
            answer(registry::put_grant(b, scope.namespace(), &grant).await)
        }
        Op::Restore { edit } => {
            let mut records = match b.export_scope(scope).await {
                Ok(records) => records,
                Err(error) => return answer(Err::<(), _>(error)),
            };
            edit_export(&mut records, *edit);
            let restored = b.restore(records).await;
            // Invariant: a store's own export always restores into it.
            assert!(
                *edit != 0 || restored.is_ok(),
                "an unedited export must restore: {restored:?}"
            );
            answer(restored)
        }
    }
}

fn working_key(conv: Option<u8>) -> WorkingMemoryKey {
    conv.map_or(WorkingMemoryKey::User, |c| {
        WorkingMemoryKey::Conversation(conversation_id(c))
    })
}

fn checkpoint_id(id: u8) -> CheckpointId {
    CheckpointId::new(format!("cp{id}")).expect("id")
}

fn vector_id(id: u8) -> VectorId {
    VectorId::new(format!("v{id}")).expect("id")
}

/// Runs one generated sequence on a fresh reference and a fresh scope of the backend under
/// test; the first answer that differs fails the case.
/// Returns how many approximate searches answered otherwise than the exact reference, within
/// the allowance.
async fn run_case(ctx: &Ctx, case: u64, ops: &[Op]) -> Result<u64, String> {
    let namespace = Namespace::new(format!("{}-d{case}", ctx.namespace())).expect("namespace");
    let scope = Scope::new(namespace.as_str(), "subject").expect("scope");
    let clock: Arc<dyn Clock> = Arc::new(ctx.clock().clone());
    let tested = ctx.backend_arc();
    // The reference writes as the backend under test does (the program's, the command
    // line's), so that both record the same writers.
    let reference =
        mnemix_core::Checked::wrap(Arc::new(InMemoryBackend::with_clock(Arc::clone(&clock))));
    let reference = tested
        .writer()
        .and_then(|writer| reference.acting_as(writer))
        .unwrap_or(reference);
    let approximate = matches!(
        tested.capabilities().vector_search,
        VectorSearch::Approximate(_)
    );
    let feed = tested.capabilities().change_feed;
    let (mut expected_made, mut actual_made) = (Made::default(), Made::default());
    let mut transcript = String::new();
    let mut within_allowance = 0;
    for (step, op) in ops.iter().enumerate() {
        if let Op::Advance { seconds } = op {
            ctx.clock()
                .advance(Duration::from_millis(u64::from(*seconds) * 500));
        }
        let mut expected = apply(
            reference.as_ref(),
            &scope,
            &mut expected_made,
            clock.as_ref(),
            op,
        )
        .await;
        let mut actual = apply(
            tested.as_ref(),
            &scope,
            &mut actual_made,
            clock.as_ref(),
            op,
        )
        .await;
        expected_made.normalise(&mut expected);
        actual_made.normalise(&mut actual);
        if !feed {
            // The reference keeps a change feed; a backend without one scrubs none of it (an
            // erasure's receipt, or a namespace's, whose records hold one).
            for answer in [&mut expected, &mut actual] {
                for receipt in ["/ok", "/ok/records"] {
                    if let Some(receipt) =
                        answer.pointer_mut(receipt).and_then(Value::as_object_mut)
                    {
                        receipt.remove("changes");
                    }
                }
            }
        }
        if matches!(op, Op::Changes) {
            // A change is readable once the writes in flight before it have ended (on
            // PostgreSQL, other writers' too): the feed is read again until it settles.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while actual != expected && std::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
                actual = apply(
                    tested.as_ref(),
                    &scope,
                    &mut actual_made,
                    clock.as_ref(),
                    op,
                )
                .await;
                actual_made.normalise(&mut actual);
            }
        }
        let _ = writeln!(transcript, "{step}: {op:?}");
        let agrees = match op {
            Op::Search {
                coll,
                vector,
                filter,
                min_score,
                ..
            } if approximate && expected != actual => {
                // Every match of the query on the reference, best first: an approximate
                // search may pick other records than the exact top k, never other scores,
                // another order or another count.
                let wide = Op::Search {
                    coll: *coll,
                    vector: *vector,
                    k: u8::MAX,
                    filter: filter.clone(),
                    min_score: *min_score,
                };
                let all = apply(
                    reference.as_ref(),
                    &scope,
                    &mut expected_made,
                    clock.as_ref(),
                    &wide,
                )
                .await;
                within_allowance += 1;
                within_approximate_allowance(&expected, &actual, &all)
            }
            _ => expected == actual,
        };
        if !agrees {
            drop_collections(tested.as_ref(), &namespace).await;
            return Err(format!(
                "step {step} differs\n  operation: {op:?}\n  reference: {expected}\n  backend:   {actual}\nsequence:\n{transcript}"
            ));
        }
    }
    drop_collections(tested.as_ref(), &namespace).await;
    Ok(within_allowance)
}

/// Drops the case's collections from the backend: thousands of cases would otherwise leave
/// thousands of collections behind (on libSQL, a table each, which slows every later
/// statement's schema lookup).
async fn drop_collections(b: &dyn MemoryBackend, namespace: &Namespace) {
    for coll in 0..COLLECTIONS {
        let _ = b.drop_collection(namespace, &collection_name(coll)).await;
    }
}

/// Whether an approximate search's answer `actual` is one the contract allows where the exact
/// answer is `expected`: the same error, or as many hits, each a record of `all` (every match,
/// best first) with its exact score, in `all`'s order.
fn within_approximate_allowance(expected: &Value, actual: &Value, all: &Value) -> bool {
    let (Some(expected), Some(actual), Some(all)) = (
        expected["ok"].as_array(),
        actual["ok"].as_array(),
        all["ok"].as_array(),
    ) else {
        return expected == actual;
    };
    let mut candidates = all.iter();
    actual.len() == expected.len()
        && actual
            .iter()
            .all(|hit| candidates.by_ref().any(|candidate| candidate == hit))
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Generated sequences of up to 40 operations over every contract (vectors when the backend
/// has them) answer exactly as the in-memory reference does.
pub async fn generated_sequences_answer_like_the_reference(ctx: &Ctx) {
    let cases = env_number("MNEMIX_DIFFERENTIAL_CASES")
        .map_or(DEFAULT_CASES, |n| u32::try_from(n).unwrap_or(u32::MAX));
    let seeds = env_number("MNEMIX_DIFFERENTIAL_SEED").map_or_else(|| SEEDS.to_vec(), |s| vec![s]);
    let vectors = ctx.capabilities().vector_search != VectorSearch::None;
    let strategy = prop::collection::vec(op(vectors, ctx.capabilities().change_feed), 1..40);
    let (counter, operations, approximated) =
        (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let handle = tokio::runtime::Handle::current();
    for seed in seeds {
        let mut seed_bytes = [0u8; 32];
        seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
        let mut runner = TestRunner::new_with_rng(
            Config {
                cases,
                failure_persistence: None,
                // Shrinking a slow backend's failure can run for long: a shorter sequence
                // after two minutes beats the shortest after an hour.
                max_shrink_time: 120_000,
                ..Config::default()
            },
            TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
        );
        let result = tokio::task::block_in_place(|| {
            runner.run(&strategy, |ops| {
                let case = counter.fetch_add(1, Relaxed);
                operations.fetch_add(ops.len() as u64, Relaxed);
                handle
                    .block_on(run_case(ctx, case, &ops))
                    .map(|n| {
                        approximated.fetch_add(n, Relaxed);
                    })
                    .map_err(TestCaseError::fail)
            })
        });
        crate::harness::announce(&format!(
            "differential: seed {seed:#x}: {} sequences of {} operations so far (shrinking \
             included); {} approximate searches answered other records than the exact top k, \
             within the allowance",
            counter.load(Relaxed),
            operations.load(Relaxed),
            approximated.load(Relaxed),
        ));
        if let Err(failure) = result {
            panic!(
                "the backend differs from the reference (seed {seed:#x}, {cases} cases): {failure}"
            );
        }
    }
}
