//! Redis: the hand-written redis-crate side — mnemix-redis's own Lua scripts (the same files)
//! and reads, on the same keys, through a connection manager as the store uses. It leaves out
//! what only the store needs: the namespace/subject registry (`SADD`s that let `namespaces`
//! and `scopes` work on a cluster without `SCAN`), so the ratio shows that cost too.

use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use mnemix_core::adapter::fact_tokens;
use mnemix_core::adapter::ExactIndex;
use mnemix_core::lexical::tokenize;
use mnemix_core::{
    ConversationId, Filter, MemoryBackend, Message, Metadata, NewConversation, Scope, Timestamp,
    VectorId, VectorQuery,
};
use redis::aio::ConnectionManager;
use redis::{Script, Value};

use mnemix_bench::workloads::{MessageRecall, RawDriver};

/// The key prefix the benchmark owns (its keys are deleted at every run); the quick run has
/// its own.
pub fn prefix(quick: bool) -> &'static str {
    if quick {
        "mnemix-bench-quick"
    } else {
        "mnemix-bench"
    }
}

static CREATE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(include_str!(
        "../../../crates/mnemix-redis/src/lua/create_conversation.lua"
    ))
});
static APPEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(include_str!(
        "../../../crates/mnemix-redis/src/lua/append.lua"
    ))
});
static LOAD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(include_str!(
        "../../../crates/mnemix-redis/src/lua/load.lua"
    ))
});
static SET_WORKING: LazyLock<Script> = LazyLock::new(|| {
    Script::new(include_str!(
        "../../../crates/mnemix-redis/src/lua/set_working_memory.lua"
    ))
});

/// The raw side on Redis.
pub struct RawRedis {
    conn: ConnectionManager,
    prefix: &'static str,
    /// The matrix of the scope last recalled from, as the store holds one: by the key of the
    /// scope's records and their version token.
    held: std::sync::Mutex<Option<HeldMatrix>>,
    /// The message collection's incarnation and spec, looked up once (the benchmark never
    /// drops it).
    message_collection: tokio::sync::OnceCell<(String, mnemix_core::CollectionSpec)>,
}

/// A scope's records as a matrix, at the version token they were read at.
struct HeldMatrix {
    records: String,
    token: Option<Vec<u8>>,
    /// The matrix, and each row's message seq.
    index: Arc<(ExactIndex, Vec<Option<f64>>)>,
}

/// The scope's key prefix: `PREFIX:{namespace:subject}:` (the benchmark's names need no
/// escaping).
fn base(prefix: &str, scope: &Scope) -> String {
    format!(
        "{prefix}:{{{}:{}}}:",
        scope.namespace().as_str(),
        scope.subject().map_or("", |s| s.as_str())
    )
}

/// What the store sends as a message's canonical content (role, parts, metadata).
fn content_of(message: &Message) -> String {
    serde_json::to_string(&(&message.role, &message.parts, &message.metadata))
        .expect("content serializes")
}

/// A fact hash's `doc`, `updated_at`, `valid_to` and `superseded_by`.
type FactFields = (Option<String>, Option<i64>, Option<String>, Option<String>);

#[derive(serde::Deserialize)]
struct FactDoc {
    id: String,
    text: String,
}

#[async_trait]
impl RawDriver for RawRedis {
    fn name(&self) -> String {
        "raw redis-rs".into()
    }

    async fn create_conversation(&self, scope: &Scope, id: &ConversationId) {
        let conversation = NewConversation::default()
            .with_id(id.clone())
            .into_conversation(scope, Timestamp::now());
        let base = base(self.prefix, scope);
        let created: i64 = CREATE
            .key(format!("{base}c:{id}"))
            .key(format!("{base}convs"))
            .arg(id.as_str())
            .arg(conversation.created_at.as_millis())
            .arg(serde_json::to_string(&conversation).expect("serializes"))
            .invoke_async(&mut self.conn.clone())
            .await
            .expect("create conversation");
        assert_eq!(created, 1);
    }

    async fn append(&self, scope: &Scope, id: &ConversationId, messages: &[Message]) {
        let base = base(self.prefix, scope);
        let mut invocation = APPEND.key(format!("{base}c:{id}"));
        invocation
            .key(format!("{base}cm:{id}"))
            .key(format!("{base}ci:{id}"))
            .arg(Timestamp::now().as_millis())
            .arg("")
            .arg("");
        for message in messages {
            invocation
                .arg(message.id.as_str())
                .arg(content_of(message))
                .arg(serde_json::to_string(message).expect("serializes"));
        }
        let reply: Vec<Value> = invocation
            .invoke_async(&mut self.conn.clone())
            .await
            .expect("append");
        assert!(
            matches!(reply.first(), Some(Value::BulkString(s)) if s == b"ok"),
            "append: {reply:?}"
        );
    }

    async fn load_last(&self, scope: &Scope, id: &ConversationId, n: usize) -> Vec<Message> {
        let base = base(self.prefix, scope);
        let reply: Vec<Value> = LOAD
            .key(format!("{base}c:{id}"))
            .key(format!("{base}cm:{id}"))
            .arg(0)
            .arg("+inf")
            .arg(n as i64)
            .invoke_async(&mut self.conn.clone())
            .await
            .expect("load");
        let mut window: Vec<Message> = reply[1..]
            .chunks(2)
            .map(|pair| {
                let member: Vec<u8> = redis::from_redis_value_ref(&pair[0]).expect("a member");
                let nul = member.iter().position(|b| *b == 0).expect("id NUL body");
                serde_json::from_slice(&member[nul + 1..]).expect("a message")
            })
            .collect();
        window.reverse();
        window
    }

    async fn get_working(&self, scope: &Scope) -> Option<String> {
        let fields: (Option<String>, Option<String>, Option<u64>, Option<i64>) =
            redis::cmd("HMGET")
                .arg(format!("{}w", base(self.prefix, scope)))
                .arg(&["content", "format", "revision", "updated_at"])
                .query_async(&mut self.conn.clone())
                .await
                .expect("get working memory");
        fields.0
    }

    async fn set_working(&self, scope: &Scope, content: &str) {
        let key = format!("{}w", base(self.prefix, scope));
        let reply: Vec<String> = SET_WORKING
            .key(&key)
            .key(&key)
            .arg(content.as_bytes())
            .arg("markdown")
            .arg(Timestamp::now().as_millis())
            .arg("")
            .invoke_async(&mut self.conn.clone())
            .await
            .expect("set working memory");
        assert_eq!(reply.first().map(String::as_str), Some("ok"));
    }

    async fn recall(&self, scope: &Scope, text: &str, limit: usize) -> Vec<String> {
        let base = base(self.prefix, scope);
        let tokens = fact_tokens(text);
        if tokens.is_empty() {
            return Vec::new();
        }
        let mut union = redis::cmd("SUNION");
        for token in &tokens {
            union.arg(format!("{base}ft:{token}"));
        }
        let ids: Vec<String> = union
            .query_async(&mut self.conn.clone())
            .await
            .expect("token union");
        if ids.is_empty() {
            return Vec::new();
        }
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.cmd("HMGET").arg(format!("{base}f:{id}")).arg(&[
                "doc",
                "updated_at",
                "valid_to",
                "superseded_by",
            ]);
        }
        let rows: Vec<FactFields> = pipe
            .query_async(&mut self.conn.clone())
            .await
            .expect("read facts");
        let rows = rows
            .into_iter()
            .filter_map(|(doc, _, valid_to, superseded_by)| {
                let doc: FactDoc = serde_json::from_str(&doc?).expect("a fact");
                // The store writes "" for a current fact's valid_to and superseded_by.
                let current = valid_to.is_none_or(|v| v.is_empty())
                    && superseded_by.is_none_or(|s| s.is_empty());
                current.then_some((doc.id, doc.text))
            })
            .collect();
        let query_tokens: BTreeSet<String> = tokenize(text);
        mnemix_bench::workloads::rank(&query_tokens, rows, limit)
    }

    /// As the store does: the records' version token and the conversation's last seq in one
    /// round trip (the collection's incarnation looked up once), the scope's records read again only when the token changed (ranked in the
    /// client over a held matrix), then the recalled messages by seq in one pipeline.
    async fn recall_messages(
        &self,
        scope: &Scope,
        id: &ConversationId,
        recall: &MessageRecall<'_>,
    ) -> Option<Vec<Message>> {
        let mut conn = self.conn.clone();
        let base = base(self.prefix, scope);
        let (incarnation, spec) = self
            .message_collection
            .get_or_init(|| async {
                let collection: Vec<u8> = redis::cmd("HGET")
                    .arg(format!(
                        "{}:{{{}}}:cols",
                        self.prefix,
                        scope.namespace().as_str()
                    ))
                    .arg(recall.collection)
                    .query_async(&mut self.conn.clone())
                    .await
                    .expect("the message collection");
                let nul = collection
                    .iter()
                    .position(|b| *b == 0)
                    .expect("incarnation NUL spec");
                (
                    String::from_utf8(collection[..nul].to_vec()).expect("an incarnation"),
                    serde_json::from_slice(&collection[nul + 1..]).expect("a collection spec"),
                )
            })
            .await;
        let records = format!("{base}v:{incarnation}");
        let (token, last_seq): (Option<Vec<u8>>, i64) = redis::pipe()
            .cmd("GET")
            .arg(format!("{base}vt:{incarnation}"))
            .cmd("HGET")
            .arg(format!("{base}c:{id}"))
            .arg("last_seq")
            .query_async(&mut conn)
            .await
            .expect("the version token and last seq");
        let held = self
            .held
            .lock()
            .expect("the held matrix")
            .as_ref()
            .filter(|held| held.records == records && held.token == token)
            .map(|held| held.index.clone());
        let index = if let Some(index) = held {
            index
        } else {
            let values: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL")
                .arg(&records)
                .query_async(&mut conn)
                .await
                .expect("the scope's records");
            let mut index = ExactIndex::new(spec.dims, spec.metric);
            let mut seqs = Vec::with_capacity(values.len());
            for (record, value) in values {
                // `conversation id NUL JSON(text, metadata) NUL f32 little-endian`.
                let first = value.iter().position(|b| *b == 0).expect("a separator");
                let rest = &value[first + 1..];
                let second = rest.iter().position(|b| *b == 0).expect("a separator");
                let body: serde_json::Value =
                    serde_json::from_slice(&rest[..second]).expect("a record body");
                let metadata: Metadata =
                    serde_json::from_value(body["metadata"].clone()).expect("metadata");
                seqs.push(metadata.get("seq").and_then(serde_json::Value::as_f64));
                index.push_le_bytes(
                    VectorId::new(record).expect("a vector id"),
                    &rest[second + 1..],
                    metadata,
                );
            }
            let index = Arc::new((index, seqs));
            *self.held.lock().expect("the held matrix") = Some(HeldMatrix {
                records,
                token,
                index: index.clone(),
            });
            index
        };
        let before = last_seq - recall.window as i64 + 1;
        let mut query =
            VectorQuery::new(recall.vector.to_vec(), recall.limit).with_filter(Filter::and([
                Filter::eq("conversation_id", id.as_str()),
                Filter::range("seq").lt(before as f64),
            ]));
        query.min_score = Some(recall.min_score);
        let (matrix, row_seqs) = &*index;
        let seqs: Vec<f64> = matrix
            .search(&query)
            .iter()
            .filter_map(|(row, _)| row_seqs[*row])
            .collect();
        if seqs.is_empty() {
            return Some(Vec::new());
        }
        let mut pipe = redis::pipe();
        for seq in &seqs {
            pipe.cmd("ZRANGEBYSCORE")
                .arg(format!("{base}cm:{id}"))
                .arg(*seq)
                .arg(*seq);
        }
        let members: Vec<Vec<Vec<u8>>> = pipe
            .query_async(&mut conn)
            .await
            .expect("the recalled messages");
        Some(
            members
                .iter()
                .flatten()
                .map(|member| {
                    let nul = member.iter().position(|b| *b == 0).expect("id NUL body");
                    serde_json::from_slice(&member[nul + 1..]).expect("a message")
                })
                .collect(),
        )
    }

    async fn list_page(
        &self,
        scope: &Scope,
        after: Option<(i64, String)>,
        limit: usize,
    ) -> Vec<(i64, String)> {
        let base = base(self.prefix, scope);
        // Newest first by (created_at, id): from the cursor's millisecond down, skipping what
        // the last page already held at that millisecond (ties order by member, descending).
        let max = after.as_ref().map_or_else(
            || "+inf".to_owned(),
            |(created_at, _)| created_at.to_string(),
        );
        let listed: Vec<(String, f64)> = redis::cmd("ZREVRANGEBYSCORE")
            .arg(format!("{base}convs"))
            .arg(max)
            .arg("-inf")
            .arg("WITHSCORES")
            .arg("LIMIT")
            .arg(0)
            .arg(limit * 2)
            .query_async(&mut self.conn.clone())
            .await
            .expect("list");
        let page: Vec<(i64, String)> = listed
            .into_iter()
            .map(|(id, score)| (score as i64, id))
            .filter(|(created_at, id)| {
                after
                    .as_ref()
                    .is_none_or(|(c, last)| (*created_at, id.as_str()) < (*c, last.as_str()))
            })
            .take(limit)
            .collect();
        let mut pipe = redis::pipe();
        for (_, id) in &page {
            pipe.cmd("HMGET")
                .arg(format!("{base}c:{id}"))
                .arg(&["doc", "last_seq", "updated_at"]);
        }
        let docs: Vec<(Option<String>, Option<i64>, Option<i64>)> = pipe
            .query_async(&mut self.conn.clone())
            .await
            .expect("read conversations");
        for (doc, _, _) in &docs {
            let doc: serde_json::Value =
                serde_json::from_str(doc.as_deref().expect("a document")).expect("JSON");
            std::hint::black_box(doc);
        }
        page
    }
}

/// The store mnemix-redis opens on `url` with the benchmark's prefix (its keys deleted
/// first), and the raw driver on the same server.
pub async fn open(url: &str, prefix: &'static str) -> (Arc<dyn MemoryBackend>, Arc<dyn RawDriver>) {
    let client = redis::Client::open(url).expect("a Redis URL");
    let mut conn = client
        .get_connection_manager()
        .await
        .expect("connect to Redis");
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .expect("scan the benchmark's keys");
        if !keys.is_empty() {
            let _: i64 = redis::cmd("DEL")
                .arg(&keys)
                .query_async(&mut conn)
                .await
                .expect("delete the benchmark's keys");
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let store = mnemix_redis::RedisStore::builder()
        .url(url)
        .prefix(prefix)
        .open()
        .await
        .expect("open the Redis store");
    (
        mnemix_core::Checked::wrap(Arc::new(store)),
        Arc::new(RawRedis {
            conn,
            prefix,
            held: std::sync::Mutex::new(None),
            message_collection: tokio::sync::OnceCell::new(),
        }),
    )
}
