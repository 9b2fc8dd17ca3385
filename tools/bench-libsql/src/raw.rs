//! The hand-written side: mnemix-libsql's statements on the libsql driver, on the same file
//! and tables, with the same connections (one writer, `readers` readers), pragmas and
//! transaction shapes (`BEGIN IMMEDIATE` writes, deferred read transactions). Each statement is
//! prepared at every call, as libsql's `query` and `execute` do (the driver keeps no statement
//! cache; the store keeps its own).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use libsql::{Connection, Database, TransactionBehavior, Value};
use mnemix_bench::workloads::{
    in_rank_order, query_tokens_json, rank_holding, MessageRecall, RawDriver,
};
use mnemix_core::adapter::ExactIndex;
use mnemix_core::{ConversationId, Message, Metric, Scope, Timestamp, VectorId};
use mnemix_sqlite_family::conversations::list_page;
use mnemix_sqlite_family::facts::{FACTS_BY_PKS, RECALL_CANDIDATES_HOLDING};
use tokio::sync::Mutex;

/// mnemix-libsql's statements by hand.
pub struct RawLibsql {
    _database: Database,
    writer: Mutex<Connection>,
    readers: Vec<Mutex<Connection>>,
    next: AtomicUsize,
    /// The one scope's matrix a turn's recall holds, as the store holds a scanned scope's.
    held: std::sync::Mutex<Option<HeldMatrix>>,
}

/// A subject's vectors as whole records, read at a collection's generation.
struct HeldMatrix {
    collection: i64,
    generation: i64,
    subject: String,
    index: Arc<ExactIndex>,
}

/// A connection with the store's pragmas.
async fn connect(database: &Database) -> Connection {
    let conn = database.connect().expect("connect");
    conn.busy_timeout(Duration::from_secs(5))
        .expect("busy timeout");
    conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL;")
        .await
        .expect("pragmas");
    conn
}

/// Every row of a query as values.
pub async fn rows(
    conn: &Connection,
    sql: &str,
    params: impl libsql::params::IntoParams,
) -> Vec<Vec<Value>> {
    let mut rows = conn.query(sql, params).await.expect("query");
    let mut all = Vec::new();
    while let Some(row) = rows.next().await.expect("next row") {
        all.push(
            (0..row.column_count())
                .map(|i| row.get_value(i).expect("a value"))
                .collect(),
        );
    }
    all
}

/// Text stored as TEXT or as a blob (free text, which may hold NUL, is a blob).
pub fn string(value: &Value) -> String {
    match value {
        Value::Text(s) => s.clone(),
        Value::Blob(b) => String::from_utf8(b.clone()).expect("UTF-8"),
        other => panic!("not text: {other:?}"),
    }
}

fn int(value: &Value) -> i64 {
    match value {
        Value::Integer(i) => *i,
        other => panic!("not an integer: {other:?}"),
    }
}

fn subject_of(scope: &Scope) -> &str {
    scope.subject().map_or("", |s| s.as_str())
}

impl RawLibsql {
    /// Opens the file mnemix-libsql made (WAL already set by the store).
    pub async fn open(path: &Path, readers: usize) -> Self {
        let database = libsql::Builder::new_local(path)
            .build()
            .await
            .expect("open the libSQL file");
        let writer = Mutex::new(connect(&database).await);
        let mut pool = Vec::with_capacity(readers);
        for _ in 0..readers.max(1) {
            pool.push(Mutex::new(connect(&database).await));
        }
        Self {
            _database: database,
            writer,
            readers: pool,
            next: AtomicUsize::new(0),
            held: std::sync::Mutex::new(None),
        }
    }

    /// Every row of a read on a reader connection, outside a transaction.
    pub async fn query(
        &self,
        sql: &str,
        params: impl libsql::params::IntoParams,
    ) -> Vec<Vec<Value>> {
        let conn = self.reader().await;
        rows(&conn, sql, params).await
    }

    /// A reader connection: the next in turn.
    async fn reader(&self) -> tokio::sync::MutexGuard<'_, Connection> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let n = self.readers.len();
        for i in 0..n {
            if let Ok(conn) = self.readers[(start + i) % n].try_lock() {
                return conn;
            }
        }
        self.readers[start % n].lock().await
    }
}

#[async_trait]
impl RawDriver for RawLibsql {
    fn name(&self) -> String {
        "raw libsql".into()
    }

    async fn create_conversation(&self, scope: &Scope, id: &ConversationId) {
        let writer = self.writer.lock().await;
        let tx = writer
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .await
            .expect("begin");
        tx.execute(
            "INSERT INTO conversations (namespace, subject, id, agent, title, metadata,
                 resource_slug, record_id, created_at, updated_at, last_seq)
             VALUES (?1, ?2, ?3, NULL, NULL, '{}', NULL, NULL, ?4, ?4, 0)",
            (
                scope.namespace().as_str(),
                subject_of(scope),
                id.as_str(),
                Timestamp::now().as_millis(),
            ),
        )
        .await
        .expect("insert conversation");
        tx.commit().await.expect("commit");
    }

    async fn append(&self, scope: &Scope, id: &ConversationId, messages: &[Message]) {
        let writer = self.writer.lock().await;
        let tx = writer
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .await
            .expect("begin");
        let ids: Vec<&str> = messages.iter().map(|m| m.id.as_str()).collect();
        // The same idempotency probe as the store.
        let found = rows(
            &tx,
            "SELECT c.pk, c.last_seq, NULL, NULL FROM conversations c
             WHERE c.namespace = ?1 AND c.subject = ?2 AND c.id = ?3
             UNION ALL
             SELECT c.pk, c.last_seq, m.seq, m.body FROM conversations c
             CROSS JOIN json_each(?4) i
             CROSS JOIN messages m ON m.conversation = c.pk AND m.id = i.value
             WHERE c.namespace = ?1 AND c.subject = ?2 AND c.id = ?3",
            (
                scope.namespace().as_str(),
                subject_of(scope),
                id.as_str(),
                serde_json::to_string(&ids).expect("ids serialize"),
            ),
        )
        .await;
        let first = found.first().expect("the conversation exists");
        assert_eq!(found.len(), 1, "the benchmark appends new messages only");
        let (pk, mut seq) = (int(&first[0]), int(&first[1]));
        for message in messages {
            seq += 1;
            tx.execute(
                "INSERT INTO messages (conversation, seq, id, role, body) VALUES (?1, ?2, ?3, ?4, ?5)",
                (
                    pk,
                    seq,
                    message.id.as_str(),
                    message.role.as_str(),
                    serde_json::to_string(message).expect("message serializes"),
                ),
            )
            .await
            .expect("insert message");
        }
        tx.execute(
            "UPDATE conversations SET last_seq = ?1, updated_at = ?2 WHERE pk = ?3",
            (seq, Timestamp::now().as_millis(), pk),
        )
        .await
        .expect("update conversation");
        tx.commit().await.expect("commit");
    }

    async fn load_last(&self, scope: &Scope, id: &ConversationId, n: usize) -> Vec<Message> {
        let conn = self.reader().await;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .await
            .expect("begin");
        let pk = rows(
            &tx,
            "SELECT pk, last_seq FROM conversations WHERE namespace = ?1 AND subject = ?2 AND id = ?3",
            (scope.namespace().as_str(), subject_of(scope), id.as_str()),
        )
        .await;
        let pk = int(&pk.first().expect("the conversation")[0]);
        let found = rows(
            &tx,
            "SELECT seq, body FROM messages WHERE conversation = ?1 ORDER BY seq DESC LIMIT ?2",
            (pk, n as i64),
        )
        .await;
        tx.commit().await.expect("commit");
        found
            .iter()
            .rev()
            .map(|row| serde_json::from_str(&string(&row[1])).expect("a message"))
            .collect()
    }

    async fn get_working(&self, scope: &Scope) -> Option<String> {
        let conn = self.reader().await;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .await
            .expect("begin");
        let found = rows(
            &tx,
            "SELECT content, format, revision, updated_at FROM working_memory
             WHERE namespace = ?1 AND subject = ?2 AND conversation = 0",
            (scope.namespace().as_str(), subject_of(scope)),
        )
        .await;
        tx.commit().await.expect("commit");
        found.first().map(|row| string(&row[0]))
    }

    async fn set_working(&self, scope: &Scope, content: &str) {
        let writer = self.writer.lock().await;
        let tx = writer
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .await
            .expect("begin");
        let current = rows(
            &tx,
            "SELECT revision FROM working_memory
             WHERE namespace = ?1 AND subject = ?2 AND conversation = 0",
            (scope.namespace().as_str(), subject_of(scope)),
        )
        .await;
        let revision = current.first().map_or(0, |row| int(&row[0]));
        tx.execute(
            "INSERT INTO working_memory
                 (namespace, subject, conversation, content, format, revision, updated_at)
             VALUES (?1, ?2, 0, ?3, 'markdown', ?4, ?5)
             ON CONFLICT (namespace, subject, conversation) DO UPDATE SET
                 content = excluded.content, format = excluded.format,
                 revision = excluded.revision, updated_at = excluded.updated_at",
            (
                scope.namespace().as_str(),
                subject_of(scope),
                Value::Blob(content.as_bytes().to_vec()),
                revision + 1,
                Timestamp::now().as_millis(),
            ),
        )
        .await
        .expect("write working memory");
        tx.commit().await.expect("commit");
    }

    async fn recall(&self, scope: &Scope, text: &str, limit: usize) -> Vec<String> {
        let conn = self.reader().await;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .await
            .expect("begin");
        // The store's statements: candidates from the token index, ranked, the top read whole.
        let found = rows(
            &tx,
            RECALL_CANDIDATES_HOLDING,
            (
                scope.namespace().as_str(),
                subject_of(scope),
                Timestamp::now().as_millis(),
                query_tokens_json(text),
                Value::Null,
                Value::Null,
                "[]",
                Value::Null,
                "[]",
                "[]",
            ),
        )
        .await;
        let top = rank_holding(text, &string(&found[0][0]), limit);
        let facts = rows(
            &tx,
            FACTS_BY_PKS,
            [serde_json::to_string(&top).expect("pks serialize")],
        )
        .await;
        tx.commit().await.expect("commit");
        in_rank_order(
            &top,
            facts.iter().map(|row| (int(&row[0]), string(&row[2]))),
        )
    }

    /// The store's reads of a turn's semantic recall, in one read transaction: the collection's
    /// generation, the subject's vectors (read once as whole records, then held while the
    /// generation stays, as the store holds a scanned scope), the conversation's last seq, the
    /// nearest before the window ranked in the client, and their messages.
    async fn recall_messages(
        &self,
        scope: &Scope,
        id: &ConversationId,
        recall: &MessageRecall<'_>,
    ) -> Option<Vec<Message>> {
        let conn = self.reader().await;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .await
            .expect("begin");
        let (namespace, subject) = (scope.namespace().as_str(), subject_of(scope));
        let collection = rows(
            &tx,
            "SELECT pk, generation, dims, metric FROM collections
             WHERE namespace = ?1 AND name = ?2",
            (namespace, recall.collection),
        )
        .await;
        let row = collection.first()?;
        let (pk, generation) = (int(&row[0]), int(&row[1]));
        let held = self
            .held
            .lock()
            .expect("not poisoned")
            .as_ref()
            .filter(|held| {
                (held.collection, held.generation, held.subject.as_str())
                    == (pk, generation, subject)
            })
            .map(|held| held.index.clone());
        let index = if let Some(index) = held {
            index
        } else {
            let dims = usize::try_from(int(&row[2])).expect("dimensions the store wrote");
            let metric = Metric::parse(&string(&row[3])).expect("a metric the store wrote");
            let mut index = ExactIndex::holding_records(dims, metric);
            for row in rows(
                &tx,
                &format!(
                    "SELECT id, vector, metadata, text, conversation_id FROM vectors_{pk}
                     WHERE subject = ?1"
                ),
                [subject],
            )
            .await
            {
                let Value::Blob(vector) = &row[1] else {
                    panic!("a vector blob")
                };
                index.push_record_le_bytes(
                    VectorId::new(string(&row[0])).expect("a vector id"),
                    vector,
                    serde_json::from_str(&string(&row[2])).expect("metadata"),
                    (row[3] != Value::Null).then(|| string(&row[3])),
                    (row[4] != Value::Null)
                        .then(|| ConversationId::new(string(&row[4])).expect("an id")),
                );
            }
            let index = Arc::new(index);
            *self.held.lock().expect("not poisoned") = Some(HeldMatrix {
                collection: pk,
                generation,
                subject: subject.to_owned(),
                index: index.clone(),
            });
            index
        };
        let conversation = rows(
            &tx,
            "SELECT pk, last_seq FROM conversations
             WHERE namespace = ?1 AND subject = ?2 AND id = ?3",
            (namespace, subject, id.as_str()),
        )
        .await;
        let (conversation, last_seq) = (int(&conversation[0][0]), int(&conversation[0][1]));
        let seqs = recall.seqs_in(&index, id.as_str(), last_seq);
        let bodies = rows(
            &tx,
            "SELECT body FROM messages
             WHERE conversation = ?1 AND seq IN (SELECT value FROM json_each(?2))",
            (
                conversation,
                serde_json::to_string(&seqs).expect("seqs serialize"),
            ),
        )
        .await;
        tx.commit().await.expect("commit");
        Some(
            bodies
                .iter()
                .map(|row| serde_json::from_str(&string(&row[0])).expect("a stored message"))
                .collect(),
        )
    }

    async fn list_page(
        &self,
        scope: &Scope,
        after: Option<(i64, String)>,
        limit: usize,
    ) -> Vec<(i64, String)> {
        let conn = self.reader().await;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .await
            .expect("begin");
        let (namespace, subject) = (scope.namespace().as_str(), subject_of(scope));
        // The store's statements, with no agent, resource or record asked.
        let statement = list_page(after.is_some());
        let (created_at, id) = after.unzip();
        let none: Option<&str> = None;
        let found = rows(
            &tx,
            statement,
            (
                namespace,
                subject,
                none,
                none,
                none,
                created_at,
                id,
                limit as i64,
            ),
        )
        .await;
        tx.commit().await.expect("commit");
        found
            .iter()
            .map(|row| (int(&row[7]), string(&row[1])))
            .collect()
    }
}
