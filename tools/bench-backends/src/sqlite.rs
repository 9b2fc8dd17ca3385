//! SQLite: the hand-written sqlx side, and sqlite-vec as the exact-KNN reference.

use std::fmt::Write as _;
use std::path::Path;
use std::str::FromStr as _;
use std::sync::Arc;

use async_trait::async_trait;

use mnemix_core::adapter::{ExactIndex, HeldFact, HeldFacts as CoreHeldFacts};
use mnemix_core::lexical::tokenize;
use mnemix_core::{
    ConversationId, FactId, Message, Metric, RecallQuery, Scope, Timestamp, VectorId,
};
use mnemix_sqlite_family::conversations::list_page;
use mnemix_sqlite_family::facts::{
    FACTS_BY_PKS, FACTS_GENERATION, HELD_FACTS, RECALL_CANDIDATES_HOLDING,
};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow};
use sqlx::{Row as _, SqlitePool};

use mnemix_bench::workloads::{
    in_rank_order, query_tokens_json, rank_holding, MessageRecall, RawDriver,
};

// The statements both hand-written sides (raw sqlx and the engine's limit) send, as the store
// sends them.

/// The store's row of a new, empty conversation.
const INSERT_CONVERSATION: &str =
    "INSERT INTO conversations (namespace, subject, id, agent, title, metadata,
    resource_slug, record_id, created_at, updated_at, last_seq)
    VALUES (?1, ?2, ?3, NULL, NULL, '{}', NULL, NULL, ?4, ?4, 0)";

/// The last `?4` messages of a conversation, newest first, in one statement.
const LOAD_LAST: &str =
    "SELECT body FROM messages WHERE conversation = (SELECT pk FROM conversations
    WHERE namespace = ?1 AND subject = ?2 AND id = ?3)
    ORDER BY seq DESC LIMIT (SELECT ?4)";

/// A subject's user working-memory document.
const GET_WORKING: &str = "SELECT content FROM working_memory
    WHERE namespace = ?1 AND subject = ?2 AND conversation = 0";

/// Its revision, read before a set.
const WORKING_REVISION: &str = "SELECT revision FROM working_memory
    WHERE namespace = ?1 AND subject = ?2 AND conversation = 0";

/// A set of the user document with its new revision.
const SET_WORKING: &str = "INSERT INTO working_memory
    (namespace, subject, conversation, content, format, revision, updated_at)
    VALUES (?1, ?2, 0, ?3, 'markdown', ?4, ?5)
    ON CONFLICT (namespace, subject, conversation) DO UPDATE SET
    content = excluded.content, format = excluded.format,
    revision = excluded.revision, updated_at = excluded.updated_at";

/// The statements mnemix-sqlite runs, by hand on sqlx, on the same file and tables, with the
/// same pools (one writer connection, `readers` reader connections) and `BEGIN IMMEDIATE`
/// write transactions.
pub struct RawSqlite {
    writer: SqlitePool,
    reader: SqlitePool,
}

impl RawSqlite {
    /// Opens the file mnemix-sqlite made (WAL, `synchronous=NORMAL`, as the store does).
    pub async fn open(path: &Path, readers: u32) -> Self {
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
            .expect("a sqlite URL")
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
            .busy_timeout(std::time::Duration::from_secs(5))
            .foreign_keys(true);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await
            .expect("open the writer");
        let reader = SqlitePoolOptions::new()
            .max_connections(readers)
            .connect_with(options)
            .await
            .expect("open the readers");
        Self { writer, reader }
    }
}

fn subject_of(scope: &Scope) -> &str {
    scope.subject().map_or("", |s| s.as_str())
}

#[async_trait]
impl RawDriver for RawSqlite {
    fn name(&self) -> String {
        "raw sqlx".into()
    }

    async fn create_conversation(&self, scope: &Scope, id: &ConversationId) {
        let now = Timestamp::now().as_millis();
        sqlx::query(INSERT_CONVERSATION)
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .bind(id.as_str())
            .bind(now)
            .execute(&self.writer)
            .await
            .expect("insert conversation");
    }

    async fn append(&self, scope: &Scope, id: &ConversationId, messages: &[Message]) {
        let mut tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .expect("begin");
        let ids: Vec<&str> = messages.iter().map(|m| m.id.as_str()).collect();
        // The same idempotency probe as the store: the conversation and the batch's ids
        // already stored.
        let rows: Vec<(i64, i64, Option<i64>, Option<String>)> = sqlx::query_as(
            "SELECT c.pk, c.last_seq, NULL, NULL FROM conversations c
             WHERE c.namespace = ?1 AND c.subject = ?2 AND c.id = ?3
             UNION ALL
             SELECT c.pk, c.last_seq, m.seq, m.body FROM conversations c
             CROSS JOIN json_each(?4) i
             CROSS JOIN messages m ON m.conversation = c.pk AND m.id = i.value
             WHERE c.namespace = ?1 AND c.subject = ?2 AND c.id = ?3",
        )
        .bind(scope.namespace().as_str())
        .bind(subject_of(scope))
        .bind(id.as_str())
        .bind(serde_json::to_string(&ids).expect("ids serialize"))
        .fetch_all(&mut *tx)
        .await
        .expect("probe");
        let (pk, last_seq, _, _) = rows.first().cloned().expect("the conversation exists");
        assert_eq!(rows.len(), 1, "the benchmark appends new messages only");
        // The store's write: the messages from one JSON array and the conversation's seq, in
        // one statement string.
        let rows: Vec<(i64, &str, &str, String)> = messages
            .iter()
            .zip(last_seq + 1..)
            .map(|(m, seq)| {
                let body = serde_json::to_string(m).expect("message serializes");
                (seq, m.id.as_str(), m.role.as_str(), body)
            })
            .collect();
        sqlx::query(
            "INSERT INTO messages (conversation, seq, id, role, body)
             SELECT ?1, value ->> 0, value ->> 1, value ->> 2, value ->> 3 FROM json_each(?2);
             UPDATE conversations SET last_seq = ?3, updated_at = ?4 WHERE pk = ?1",
        )
        .bind(pk)
        .bind(serde_json::to_string(&rows).expect("rows serialize"))
        .bind(last_seq + messages.len() as i64)
        .bind(Timestamp::now().as_millis())
        .execute(&mut *tx)
        .await
        .expect("insert messages");
        tx.commit().await.expect("commit");
    }

    async fn load_last(&self, scope: &Scope, id: &ConversationId, n: usize) -> Vec<Message> {
        // One statement, its own snapshot.
        let bodies: Vec<String> = sqlx::query_scalar(LOAD_LAST)
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .bind(id.as_str())
            .bind(n as i64)
            .fetch_all(&self.reader)
            .await
            .expect("messages");
        bodies
            .iter()
            .rev()
            .map(|b| serde_json::from_str(b).expect("a message"))
            .collect()
    }

    async fn get_working(&self, scope: &Scope) -> Option<String> {
        sqlx::query_scalar(GET_WORKING)
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .fetch_optional(&self.reader)
            .await
            .expect("get working memory")
    }

    async fn set_working(&self, scope: &Scope, content: &str) {
        let mut tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .expect("begin");
        let revision: Option<i64> = sqlx::query_scalar(WORKING_REVISION)
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .fetch_optional(&mut *tx)
            .await
            .expect("read revision");
        sqlx::query(SET_WORKING)
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .bind(content)
            .bind(revision.unwrap_or(0) + 1)
            .bind(Timestamp::now().as_millis())
            .execute(&mut *tx)
            .await
            .expect("write working memory");
        tx.commit().await.expect("commit");
    }

    async fn recall(&self, scope: &Scope, text: &str, limit: usize) -> Vec<String> {
        // The store's statements: candidates from the token index, ranked, the top read whole,
        // in one read transaction.
        let mut tx = self.reader.begin().await.expect("begin");
        let json: String = sqlx::query_scalar(RECALL_CANDIDATES_HOLDING)
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .bind(now())
            .bind(query_tokens_json(text))
            .bind(None::<&str>)
            .bind(None::<f64>)
            .bind("[]")
            .bind(None::<&str>)
            .bind("[]")
            .bind("[]")
            .fetch_one(&mut *tx)
            .await
            .expect("recall candidates");
        let top = rank_holding(text, &json, limit);
        let rows: Vec<SqliteRow> = sqlx::query(FACTS_BY_PKS)
            .bind(serde_json::to_string(&top).expect("pks serialize"))
            .fetch_all(&mut *tx)
            .await
            .expect("the top facts");
        tx.commit().await.expect("commit");
        in_rank_order(&top, rows.iter().map(|r| (r.get("pk"), r.get("text"))))
    }

    async fn list_page(
        &self,
        scope: &Scope,
        after: Option<(i64, String)>,
        limit: usize,
    ) -> Vec<(i64, String)> {
        // The store's statements, with no agent, resource or record asked.
        let statement = list_page(after.is_some());
        let (created_at, id) = after.unzip();
        let rows: Vec<SqliteRow> = sqlx::query(statement)
            .bind(scope.namespace().as_str())
            .bind(subject_of(scope))
            .bind(None::<&str>)
            .bind(None::<&str>)
            .bind(None::<&str>)
            .bind(created_at)
            .bind(id)
            .bind(limit as i64)
            .fetch_all(&self.reader)
            .await
            .expect("list");
        rows.iter()
            .map(|r| (r.get("created_at"), r.get("id")))
            .collect()
    }
}

/// sqlite-vec's exact KNN (`vec0`, cosine, partitioned by subject) on rusqlite, as a
/// reference for our exact search: one connection per client, as many as our reader pool.
pub struct SqliteVec {
    conns: Vec<std::sync::Mutex<rusqlite::Connection>>,
    next: std::sync::atomic::AtomicUsize,
}

impl SqliteVec {
    /// Loads `vectors` (row `i` is id `i`) into a `vec0` table of a fresh file at `path`,
    /// all under `subject`; returns the store and how long the load took.
    pub fn load(
        path: &Path,
        vectors: &mnemix_bench::data::Matrix,
        subject: &str,
        connections: usize,
    ) -> (Self, std::time::Duration) {
        register_sqlite_vec();
        let _ = std::fs::remove_file(path);
        let conn = rusqlite::Connection::open(path).expect("open the sqlite-vec file");
        conn.execute_batch(&format!(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;
             CREATE VIRTUAL TABLE items USING vec0(
                 embedding float[{}] distance_metric=cosine, subject text partition key,
                 bucket integer, decile integer)",
            mnemix_bench::data::DIMS
        ))
        .expect("create vec0 table");
        let started = std::time::Instant::now();
        let tx = conn.unchecked_transaction().expect("begin");
        {
            let mut insert = tx
                .prepare(
                    "INSERT INTO items (rowid, embedding, subject, bucket, decile)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .expect("prepare insert");
            for i in 0..vectors.len() {
                insert
                    .execute(rusqlite::params![
                        i as i64,
                        as_bytes(vectors.row(i)),
                        subject,
                        (i % 100) as i64,
                        (i % 10) as i64
                    ])
                    .expect("insert vector");
            }
        }
        tx.commit().expect("commit");
        let took = started.elapsed();
        let mut conns = vec![std::sync::Mutex::new(conn)];
        for _ in 1..connections.max(1) {
            let conn = rusqlite::Connection::open(path).expect("open the sqlite-vec file");
            conns.push(std::sync::Mutex::new(conn));
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        (Self { conns, next }, took)
    }

    /// The ids of the `k` nearest to `query` within `subject`, nearest first.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        subject: &str,
        filter: Option<mnemix_bench::vectors::Selection>,
    ) -> Vec<usize> {
        let start = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let n = self.conns.len();
        // A free connection if there is one, else wait for the next in turn.
        let conn = (0..n)
            .find_map(|i| self.conns[(start + i) % n].try_lock().ok())
            .unwrap_or_else(|| self.conns[start % n].lock().expect("not poisoned"));
        // Only a fixed column name is formatted in.
        let condition = filter.map_or(String::new(), |f| format!(" AND {} = 0", f.field));
        let mut statement = conn
            .prepare_cached(&format!(
                "SELECT rowid FROM items WHERE embedding MATCH ?1 AND k = ?2 AND subject = ?3{condition}
                 ORDER BY distance"
            ))
            .expect("prepare search");
        statement
            .query_map(
                rusqlite::params![as_bytes(query), k as i64, subject],
                |row| row.get::<_, i64>(0),
            )
            .expect("search")
            .map(|id| id.expect("a rowid") as usize)
            .collect()
    }
}

fn as_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Makes every SQLite connection opened from now on in this process load sqlite-vec.
fn register_sqlite_vec() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: sqlite3_vec_init has the signature of an SQLite extension entry point
        // (db, error message, API routines) -> int, which sqlite3_auto_extension calls with
        // exactly those arguments; the pointer is a static function, valid for the process.
        #[allow(unsafe_code)]
        unsafe {
            type Entry = unsafe extern "C" fn(
                *mut rusqlite::ffi::sqlite3,
                *mut *mut std::os::raw::c_char,
                *const rusqlite::ffi::sqlite3_api_routines,
            ) -> std::os::raw::c_int;
            let entry: Entry = std::mem::transmute(sqlite_vec::sqlite3_vec_init as *const ());
            rusqlite::ffi::sqlite3_auto_extension(Some(entry));
        }
    });
}

/// The store mnemix-sqlite opens on `path`, and the raw driver on the same file.
/// The store on a fresh file, with its raw sides: raw sqlx, then the engine's limit (the
/// reference of the ratios).
pub async fn open(path: &Path) -> (Arc<dyn mnemix_core::MemoryBackend>, Vec<Arc<dyn RawDriver>>) {
    let readers = std::thread::available_parallelism()
        .map_or(2, |n| n.get() as u32)
        .max(2);
    let store = mnemix_sqlite::SqliteStore::builder()
        .path(path)
        .readers(readers as usize)
        .open()
        .await
        .expect("open the SQLite store");
    let raw = RawSqlite::open(path, readers).await;
    let engine = EngineSqlite::open(path);
    let bm25 = Bm25Sqlite {
        engine: EngineSqlite::open(path),
        indexed: tokio::sync::OnceCell::new(),
    };
    (
        mnemix_core::Checked::wrap(Arc::new(store)),
        vec![Arc::new(raw), Arc::new(engine), Arc::new(bm25)],
    )
}

/// What a user would reach for instead of our lexical ranking: SQLite FTS5 over the facts'
/// text, `bm25` order, on rusqlite like the engine's limit. The index holds each fact's text and
/// a token naming its scope, and a query asks for the scope's token AND any of the query's
/// tokens (a scope filter applied after the match would rank every subject's matches first);
/// the scope column weighs nothing in `bm25`. W4 only: the index is filled from the facts table
/// at its first query.
pub struct Bm25Sqlite {
    engine: EngineSqlite,
    indexed: tokio::sync::OnceCell<()>,
}

/// The W4-only side is asked for nothing else.
const RECALL_ONLY: &str = "the bm25 side runs in W4 only";

#[async_trait]
impl RawDriver for Bm25Sqlite {
    fn name(&self) -> String {
        "FTS5 bm25 (rusqlite)".into()
    }

    fn alternative_ranking(&self) -> bool {
        true
    }

    async fn create_conversation(&self, _: &Scope, _: &ConversationId) {
        unreachable!("{RECALL_ONLY}")
    }

    async fn append(&self, _: &Scope, _: &ConversationId, _: &[Message]) {
        unreachable!("{RECALL_ONLY}")
    }

    async fn load_last(&self, _: &Scope, _: &ConversationId, _: usize) -> Vec<Message> {
        unreachable!("{RECALL_ONLY}")
    }

    async fn get_working(&self, _: &Scope) -> Option<String> {
        unreachable!("{RECALL_ONLY}")
    }

    async fn set_working(&self, _: &Scope, _: &str) {
        unreachable!("{RECALL_ONLY}")
    }

    async fn recall(&self, scope: &Scope, text: &str, limit: usize) -> Vec<String> {
        self.indexed
            .get_or_init(|| {
                self.engine.run(|conn| {
                    conn.execute_batch(
                        "DROP TABLE IF EXISTS bench_fts;
                         CREATE VIRTUAL TABLE bench_fts USING fts5(text, scope);
                         INSERT INTO bench_fts (rowid, text, scope)
                             SELECT pk, text, 's' || hex(namespace || '/' || subject)
                             FROM facts WHERE superseded_by IS NULL;",
                    )
                    .expect("build the FTS5 index");
                })
            })
            .await;
        let query: Vec<String> = tokenize(text)
            .into_iter()
            .map(|t| format!("\"{t}\""))
            .collect();
        if query.is_empty() {
            return Vec::new();
        }
        let scope_token: String = format!("{}/{}", scope.namespace().as_str(), subject_of(scope))
            .bytes()
            .fold(String::new(), |mut hex, b| {
                // SQLite's hex(): uppercase, as the index was filled.
                let _ = write!(hex, "{b:02X}");
                hex
            });
        let query = format!("scope : s{scope_token} AND text : ({})", query.join(" OR "));
        self.engine
            .run(move |conn| {
                conn.prepare_cached(
                    "SELECT f.text FROM bench_fts JOIN facts f ON f.pk = bench_fts.rowid
                     WHERE bench_fts MATCH ?1 AND (f.expires_at IS NULL OR f.expires_at > ?2)
                     ORDER BY bm25(bench_fts, 1.0, 0.0) LIMIT ?3",
                )
                .and_then(|mut s| {
                    s.query_map(rusqlite::params![query, now(), limit as i64], |r| r.get(0))?
                        .collect()
                })
                .expect("bm25 recall")
            })
            .await
    }

    async fn list_page(&self, _: &Scope, _: Option<(i64, String)>, _: usize) -> Vec<(i64, String)> {
        unreachable!("{RECALL_ONLY}")
    }
}

/// The engine's limit: the same work as the store on rusqlite, one connection on a dedicated
/// thread, prepared statements cached — what a program gets from SQLite with the plainest
/// client and no async runtime between it and the engine.
pub struct EngineSqlite {
    jobs: std::sync::Mutex<std::sync::mpsc::Sender<EngineJob>>,
}

/// The message vectors of one (collection, subject) as the engine's thread holds them while
/// the collection's generation stays, as the store holds its matrices.
struct HeldMatrix {
    collection: i64,
    generation: i64,
    subject: String,
    index: Arc<ExactIndex>,
}

/// The current facts of one subject as the engine's thread holds them while the subject's
/// facts generation stays, as the store holds them: what hybrid recall ranks by.
struct HeldFacts {
    key: (String, String),
    generation: i64,
    facts: CoreHeldFacts,
}

/// What the engine's thread owns: its connection and what it holds.
struct Engine {
    conn: rusqlite::Connection,
    held: Option<HeldMatrix>,
    held_facts: Option<HeldFacts>,
}

type EngineJob = Box<dyn FnOnce(&mut Engine) + Send>;

impl EngineSqlite {
    /// Opens the file mnemix-sqlite made, with the store's settings (WAL,
    /// `synchronous=NORMAL`, 5 s busy timeout, foreign keys).
    pub fn open(path: &Path) -> Self {
        let conn = rusqlite::Connection::open(path).expect("open the file with rusqlite");
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;
             PRAGMA busy_timeout = 5000; PRAGMA foreign_keys = ON;",
        )
        .expect("the store's pragmas");
        let (jobs, queue) = std::sync::mpsc::channel::<EngineJob>();
        std::thread::spawn(move || {
            let mut engine = Engine {
                conn,
                held: None,
                held_facts: None,
            };
            for job in queue {
                job(&mut engine);
            }
        });
        Self {
            jobs: std::sync::Mutex::new(jobs),
        }
    }

    /// Runs `work` on the engine's connection, on its thread, and waits for its value.
    async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut rusqlite::Connection) -> T + Send + 'static,
    ) -> T {
        self.run_engine(move |engine| work(&mut engine.conn)).await
    }

    /// Runs `work` on the engine's thread and waits for its value.
    async fn run_engine<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Engine) -> T + Send + 'static,
    ) -> T {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.jobs
            .lock()
            .expect("engine queue")
            .send(Box::new(move |engine| {
                let _ = reply.send(work(engine));
            }))
            .expect("the engine thread runs");
        answer.await.expect("the engine thread answers")
    }
}

#[async_trait]
impl RawDriver for EngineSqlite {
    fn name(&self) -> String {
        "engine limit (rusqlite)".into()
    }

    async fn create_conversation(&self, scope: &Scope, id: &ConversationId) {
        let (namespace, subject, id) = owned(scope, id.as_str());
        self.run(move |conn| {
            conn.prepare_cached(INSERT_CONVERSATION)
                .and_then(|mut s| s.execute(rusqlite::params![namespace, subject, id, now()]))
                .expect("insert conversation");
        })
        .await;
    }

    async fn append(&self, scope: &Scope, id: &ConversationId, messages: &[Message]) {
        let (namespace, subject, id) = owned(scope, id.as_str());
        let rows: Vec<(String, String, String)> = messages
            .iter()
            .map(|m| {
                (
                    m.id.to_string(),
                    m.role.as_str().to_owned(),
                    serde_json::to_string(m).expect("message serializes"),
                )
            })
            .collect();
        self.run(move |conn| {
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .expect("begin");
            let ids: Vec<&str> = rows.iter().map(|(id, _, _)| id.as_str()).collect();
            let ids = serde_json::to_string(&ids).expect("ids serialize");
            // The store's idempotency probe: the conversation and the batch's ids stored.
            let found: Vec<(i64, i64)> = tx
                .prepare_cached(
                    "SELECT c.pk, c.last_seq FROM conversations c
                     WHERE c.namespace = ?1 AND c.subject = ?2 AND c.id = ?3
                     UNION ALL
                     SELECT c.pk, c.last_seq FROM conversations c
                     CROSS JOIN json_each(?4) i
                     CROSS JOIN messages m ON m.conversation = c.pk AND m.id = i.value
                     WHERE c.namespace = ?1 AND c.subject = ?2 AND c.id = ?3",
                )
                .and_then(|mut s| {
                    s.query_map(rusqlite::params![namespace, subject, id, ids], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })?
                    .collect()
                })
                .expect("probe");
            assert_eq!(found.len(), 1, "the benchmark appends new messages only");
            let (pk, last_seq) = found[0];
            let mut seq = last_seq;
            {
                let mut insert = tx
                    .prepare_cached(
                        "INSERT INTO messages (conversation, seq, id, role, body)
                         VALUES (?1, ?2, ?3, ?4, ?5)",
                    )
                    .expect("prepare insert");
                for (id, role, body) in &rows {
                    seq += 1;
                    insert
                        .execute(rusqlite::params![pk, seq, id, role, body])
                        .expect("insert message");
                }
            }
            tx.prepare_cached(
                "UPDATE conversations SET last_seq = ?1, updated_at = ?2 WHERE pk = ?3",
            )
            .and_then(|mut s| s.execute(rusqlite::params![seq, now(), pk]))
            .expect("update conversation");
            tx.commit().expect("commit");
        })
        .await;
    }

    async fn load_last(&self, scope: &Scope, id: &ConversationId, n: usize) -> Vec<Message> {
        let (namespace, subject, id) = owned(scope, id.as_str());
        let bodies: Vec<String> = self
            .run(move |conn| {
                conn.prepare_cached(LOAD_LAST)
                    .and_then(|mut s| {
                        s.query_map(rusqlite::params![namespace, subject, id, n as i64], |r| {
                            r.get(0)
                        })?
                        .collect()
                    })
                    .expect("messages")
            })
            .await;
        bodies
            .iter()
            .rev()
            .map(|b| serde_json::from_str(b).expect("a message"))
            .collect()
    }

    async fn get_working(&self, scope: &Scope) -> Option<String> {
        let (namespace, subject, _) = owned(scope, "");
        self.run(move |conn| {
            use rusqlite::OptionalExtension as _;
            conn.prepare_cached(GET_WORKING)
                .and_then(|mut s| {
                    s.query_row(rusqlite::params![namespace, subject], |r| r.get(0))
                        .optional()
                })
                .expect("get working memory")
        })
        .await
    }

    async fn set_working(&self, scope: &Scope, content: &str) {
        let (namespace, subject, content) = owned(scope, content);
        self.run(move |conn| {
            use rusqlite::OptionalExtension as _;
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .expect("begin");
            let revision: Option<i64> = tx
                .prepare_cached(WORKING_REVISION)
                .and_then(|mut s| {
                    s.query_row(rusqlite::params![namespace, subject], |r| r.get(0))
                        .optional()
                })
                .expect("read revision");
            tx.prepare_cached(SET_WORKING)
                .and_then(|mut s| {
                    s.execute(rusqlite::params![
                        namespace,
                        subject,
                        content,
                        revision.unwrap_or(0) + 1,
                        now()
                    ])
                })
                .expect("write working memory");
            tx.commit().expect("commit");
        })
        .await;
    }

    async fn recall(&self, scope: &Scope, text: &str, limit: usize) -> Vec<String> {
        let (namespace, subject, text) = owned(scope, text);
        self.run(move |conn| {
            let tx = conn.transaction().expect("begin");
            let (json, _) = lexical_candidates(&tx, &namespace, &subject, now(), &text);
            let top = rank_holding(&text, &json, limit);
            let texts = top_facts(&tx, &top);
            tx.commit().expect("commit");
            texts
        })
        .await
    }

    /// The store's own work, as the engine would do it: in one read transaction, the subject's
    /// facts generation, the subject's facts (read once, then held while the generation stays),
    /// ranked in the client by the core's rules (the query's words found in the held texts),
    /// then the top facts.
    async fn recall_hybrid(
        &self,
        scope: &Scope,
        text: &str,
        vector: &[f32],
        limit: usize,
    ) -> Option<Vec<String>> {
        let (namespace, subject, text) = owned(scope, text);
        let vector = vector.to_vec();
        let texts = self
            .run_engine(move |engine| {
                let tx = engine.conn.transaction().expect("begin");
                let now = now();
                let generation: Option<i64> = tx
                    .prepare_cached(FACTS_GENERATION)
                    .and_then(|mut s| {
                        rusqlite::OptionalExtension::optional(
                            s.query_row(rusqlite::params![namespace, subject], |r| r.get(0)),
                        )
                    })
                    .expect("the facts generation");
                let Some(generation) = generation else {
                    return Vec::new();
                };
                let key = (namespace, subject);
                let held = engine
                    .held_facts
                    .take()
                    .filter(|held| held.key == key && held.generation == generation)
                    .unwrap_or_else(|| HeldFacts {
                        facts: read_facts(&tx, &key),
                        key,
                        generation,
                    });
                let query = RecallQuery::text(text)
                    .with_vector(vector)
                    .with_limit(limit);
                let top: Vec<i64> = held
                    .facts
                    .rank(&query, Timestamp::from_millis(now))
                    .into_iter()
                    .map(|(f, _)| f.pk)
                    .collect();
                let texts = top_facts(&tx, &top);
                tx.commit().expect("commit");
                engine.held_facts = Some(held);
                texts
            })
            .await;
        Some(texts)
    }

    /// The store's own work, as the engine would do it: in one read transaction, the
    /// collection's generation, the subject's vectors as whole records (read once, then held
    /// while the generation stays), the nearest before the window ranked in the client, and
    /// their messages.
    async fn recall_messages(
        &self,
        scope: &Scope,
        id: &ConversationId,
        recall: &MessageRecall<'_>,
    ) -> Option<Vec<Message>> {
        use rusqlite::OptionalExtension as _;
        let (namespace, subject, id) = owned(scope, id.as_str());
        let collection = recall.collection.to_owned();
        let (vector, window, limit, min_score) = (
            recall.vector.to_vec(),
            recall.window,
            recall.limit,
            recall.min_score,
        );
        let bodies: Vec<String> = self
            .run_engine(move |engine| {
                let tx = engine.conn.transaction().expect("begin");
                let (pk, generation, dims, metric): (i64, i64, i64, String) = tx
                    .prepare_cached(
                        "SELECT pk, generation, dims, metric FROM collections
                         WHERE namespace = ?1 AND name = ?2",
                    )
                    .and_then(|mut s| {
                        s.query_row(rusqlite::params![namespace, collection], |r| {
                            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                        })
                        .optional()
                    })
                    .expect("the collection")?;
                let held = engine.held.as_ref().filter(|held| {
                    (held.collection, held.generation, held.subject.as_str())
                        == (pk, generation, subject.as_str())
                });
                let index = if let Some(held) = held {
                    held.index.clone()
                } else {
                    let index = Arc::new(read_matrix(&tx, pk, &subject, dims, &metric));
                    engine.held = Some(HeldMatrix {
                        collection: pk,
                        generation,
                        subject: subject.clone(),
                        index: index.clone(),
                    });
                    index
                };
                let (conversation, last_seq): (i64, i64) = tx
                    .prepare_cached(
                        "SELECT pk, last_seq FROM conversations
                         WHERE namespace = ?1 AND subject = ?2 AND id = ?3",
                    )
                    .and_then(|mut s| {
                        s.query_row(rusqlite::params![namespace, subject, id], |r| {
                            Ok((r.get(0)?, r.get(1)?))
                        })
                    })
                    .expect("the conversation");
                let recall = MessageRecall {
                    collection: &collection,
                    vector: &vector,
                    window,
                    limit,
                    min_score,
                };
                // As the store does: the hits from the held records, then their messages by
                // seq.
                let seqs = recall.seqs_in(&index, &id, last_seq);
                let bodies = tx
                    .prepare_cached(
                        "SELECT body FROM messages WHERE conversation = ?1
                           AND seq IN (SELECT value FROM json_each(?2))",
                    )
                    .and_then(|mut s| {
                        s.query_map(
                            rusqlite::params![
                                conversation,
                                serde_json::to_string(&seqs).expect("seqs serialize")
                            ],
                            |r| r.get(0),
                        )?
                        .collect::<rusqlite::Result<Vec<String>>>()
                    })
                    .expect("the recalled messages");
                tx.commit().expect("commit");
                Some(bodies)
            })
            .await?;
        Some(
            bodies
                .iter()
                .map(|body| serde_json::from_str(body).expect("a message"))
                .collect(),
        )
    }

    async fn list_page(
        &self,
        scope: &Scope,
        after: Option<(i64, String)>,
        limit: usize,
    ) -> Vec<(i64, String)> {
        let (namespace, subject, _) = owned(scope, "");
        self.run(move |conn| {
            let statement = list_page(after.is_some());
            let (created_at, id) = after.unzip();
            let none: Option<&str> = None;
            conn.prepare_cached(statement)
                .and_then(|mut s| {
                    s.query_map(
                        rusqlite::params![
                            namespace,
                            subject,
                            none,
                            none,
                            none,
                            created_at,
                            id,
                            limit as i64
                        ],
                        |r| Ok((r.get(7)?, r.get(1)?)),
                    )?
                    .collect()
                })
                .expect("list")
        })
        .await
    }
}

/// A subject's vectors of a collection, as the store reads them into its matrix.
fn read_matrix(
    tx: &rusqlite::Transaction<'_>,
    collection: i64,
    subject: &str,
    dims: i64,
    metric: &str,
) -> ExactIndex {
    let mut index = ExactIndex::holding_records(
        usize::try_from(dims).expect("dimensions the store wrote"),
        Metric::parse(metric).expect("a metric the store wrote"),
    );
    let mut statement = tx
        .prepare_cached(
            "SELECT id, vector, metadata, text, conversation_id FROM vectors
             WHERE collection = ?1 AND subject = ?2",
        )
        .expect("prepare");
    let mut rows = statement
        .query(rusqlite::params![collection, subject])
        .expect("vectors");
    while let Some(row) = rows.next().expect("a vector row") {
        let metadata: String = row.get(2).expect("metadata");
        let conversation: Option<String> = row.get(4).expect("conversation id");
        index.push_record_le_bytes(
            VectorId::new(row.get::<_, String>(0).expect("id")).expect("a vector id"),
            row.get_ref(1).expect("vector").as_blob().expect("a blob"),
            serde_json::from_str(&metadata).expect("metadata"),
            row.get(3).expect("text"),
            conversation.map(|id| ConversationId::new(id).expect("a conversation id")),
        );
    }
    index
}

/// The lexical candidates of `text` in a subject (unfiltered), and the subject's facts
/// generation: the store's one candidates statement.
fn lexical_candidates(
    tx: &rusqlite::Transaction<'_>,
    namespace: &str,
    subject: &str,
    now: i64,
    text: &str,
) -> (String, Option<i64>) {
    let none: Option<String> = None;
    tx.prepare_cached(RECALL_CANDIDATES_HOLDING)
        .and_then(|mut s| {
            s.query_row(
                rusqlite::params![
                    namespace,
                    subject,
                    now,
                    query_tokens_json(text),
                    none,
                    none,
                    "[]",
                    none,
                    "[]",
                    "[]"
                ],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
        })
        .expect("recall candidates")
}

/// The texts of the facts `top` names, in its order.
fn top_facts(tx: &rusqlite::Transaction<'_>, top: &[i64]) -> Vec<String> {
    let rows = tx
        .prepare_cached(FACTS_BY_PKS)
        .and_then(|mut s| {
            s.query_map([serde_json::to_string(top).expect("pks serialize")], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(2)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .expect("the top facts");
    in_rank_order(top, rows)
}

/// A subject's current facts, as the store reads them to hold.
fn read_facts(
    tx: &rusqlite::Transaction<'_>,
    (namespace, subject): &(String, String),
) -> CoreHeldFacts {
    let mut statement = tx.prepare_cached(HELD_FACTS).expect("prepare");
    let mut rows = statement
        .query(rusqlite::params![namespace, subject])
        .expect("facts");
    let mut facts = Vec::new();
    while let Some(row) = rows.next().expect("a fact row") {
        let provenance: mnemix_core::Provenance = row
            .get::<_, Option<String>>(10)
            .expect("provenance")
            .map(|json| serde_json::from_str(&json).expect("a provenance"))
            .unwrap_or_default();
        facts.push(HeldFact {
            pk: row.get(0).expect("pk"),
            id: FactId::new(row.get::<_, String>(1).expect("id")).expect("a fact id"),
            score: row
                .get::<_, Option<f64>>(2)
                .expect("score")
                .map(|s| s as f32),
            created_at: Timestamp::from_millis(row.get(3).expect("created_at")),
            expires_at: row
                .get::<_, Option<i64>>(4)
                .expect("expires_at")
                .map(Timestamp::from_millis),
            kind: row.get(5).expect("kind"),
            tags: serde_json::from_str(&row.get::<_, String>(6).expect("tags")).expect("tags"),
            conversation: row.get(7).expect("conversation"),
            embedding: row
                .get_ref(8)
                .expect("embedding")
                .as_blob_or_null()
                .expect("a blob")
                .map(|bytes| {
                    bytes
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                        .collect()
                }),
            text: row.get(9).expect("text"),
            origin: provenance.origin,
            written_by: provenance.written_by,
        });
    }
    CoreHeldFacts::new(facts)
}

/// A scope's namespace and subject column, and one more string, owned for the engine thread.
fn owned(scope: &Scope, other: &str) -> (String, String, String) {
    (
        scope.namespace().as_str().to_owned(),
        subject_of(scope).to_owned(),
        other.to_owned(),
    )
}

fn now() -> i64 {
    Timestamp::now().as_millis()
}
