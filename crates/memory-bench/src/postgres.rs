//! PostgreSQL: the hand-written tokio-postgres side.

use std::str::FromStr as _;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use memory_core::lexical::tokenize;
use memory_core::{ConversationId, MemoryBackend, Message, Scope, Timestamp};
use tokio_postgres::NoTls;

use crate::workloads::RawDriver;

/// The schema the benchmark owns (dropped and made again at every run).
pub const SCHEMA: &str = "agent_memory_bench";

/// The statements memory-postgres runs, by hand on tokio-postgres, on the same schema and
/// tables, through a deadpool pool of the same size and recycling, statements prepared once per
/// connection as the store does.
pub struct RawPostgres {
    pool: Pool,
}

fn subject_of(scope: &Scope) -> &str {
    scope.subject().map_or("", |s| s.as_str())
}

fn sql(template: &str) -> String {
    template.replace("{s}", SCHEMA)
}

impl RawPostgres {
    async fn client(&self) -> deadpool_postgres::Object {
        self.pool.get().await.expect("a pooled connection")
    }
}

#[async_trait]
impl RawDriver for RawPostgres {
    fn name(&self) -> String {
        "raw tokio-postgres".into()
    }

    async fn create_conversation(&self, scope: &Scope, id: &ConversationId) {
        let client = self.client().await;
        let now = Timestamp::now().as_millis();
        client
            .execute(
                &sql(
                    "INSERT INTO {s}.conversations (namespace, subject, id, agent, title, metadata,
                          resource_slug, record_id, created_at, updated_at, last_seq)
                      VALUES ($1, $2, $3, NULL, NULL, '{}', NULL, NULL, $4, $4, 0)",
                ),
                &[
                    &scope.namespace().as_str(),
                    &subject_of(scope),
                    &id.as_str(),
                    &now,
                ],
            )
            .await
            .expect("insert conversation");
    }

    async fn append(&self, scope: &Scope, id: &ConversationId, messages: &[Message]) {
        let mut client = self.client().await;
        let tx = client.transaction().await.expect("begin");
        let lock = tx
            .prepare_cached(&sql("SELECT pk, last_seq FROM {s}.conversations
                 WHERE namespace = $1 AND subject = $2 AND id = $3 FOR NO KEY UPDATE"))
            .await
            .expect("prepare");
        let row = tx
            .query_one(
                &lock,
                &[
                    &scope.namespace().as_str(),
                    &subject_of(scope),
                    &id.as_str(),
                ],
            )
            .await
            .expect("the conversation exists");
        let (pk, last_seq): (i64, i64) = (row.get(0), row.get(1));
        let ids: Vec<&str> = messages.iter().map(|m| m.id.as_str()).collect();
        let probe = tx
            .prepare_cached(&sql(
                "SELECT seq, body FROM {s}.messages WHERE conversation = $1 AND id = ANY($2)",
            ))
            .await
            .expect("prepare");
        let stored = tx.query(&probe, &[&pk, &ids]).await.expect("probe");
        assert!(stored.is_empty(), "the benchmark appends new messages only");
        let seqs: Vec<i64> = (1..=messages.len() as i64).map(|i| last_seq + i).collect();
        let roles: Vec<&str> = messages.iter().map(|m| m.role.as_str()).collect();
        let bodies: Vec<String> = messages
            .iter()
            .map(|m| serde_json::to_string(m).expect("message serializes"))
            .collect();
        let insert = tx
            .prepare_cached(&sql(
                "INSERT INTO {s}.messages (conversation, seq, id, role, body)
                 SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[])",
            ))
            .await
            .expect("prepare");
        tx.execute(&insert, &[&pk, &seqs, &ids, &roles, &bodies])
            .await
            .expect("insert messages");
        let update = tx
            .prepare_cached(&sql(
                "UPDATE {s}.conversations SET last_seq = $1, updated_at = $2 WHERE pk = $3",
            ))
            .await
            .expect("prepare");
        tx.execute(
            &update,
            &[
                &(last_seq + messages.len() as i64),
                &Timestamp::now().as_millis(),
                &pk,
            ],
        )
        .await
        .expect("update conversation");
        tx.commit().await.expect("commit");
    }

    async fn load_last(&self, scope: &Scope, id: &ConversationId, n: usize) -> Vec<Message> {
        let client = self.client().await;
        let statement = client
            .prepare_cached(&sql("SELECT m.body FROM {s}.conversations c
                 JOIN LATERAL (
                     SELECT seq, body FROM {s}.messages WHERE conversation = c.pk
                     ORDER BY seq DESC LIMIT $4
                 ) m ON true
                 WHERE c.namespace = $1 AND c.subject = $2 AND c.id = $3"))
            .await
            .expect("prepare");
        let rows = client
            .query(
                &statement,
                &[
                    &scope.namespace().as_str(),
                    &subject_of(scope),
                    &id.as_str(),
                    &(n as i64),
                ],
            )
            .await
            .expect("load");
        rows.iter()
            .rev()
            .map(|r| serde_json::from_str(r.get::<_, &str>(0)).expect("a message"))
            .collect()
    }

    async fn get_working(&self, scope: &Scope) -> Option<String> {
        let client = self.client().await;
        let statement = client
            .prepare_cached(&sql("SELECT content FROM {s}.working_memory
                 WHERE namespace = $1 AND subject = $2 AND conversation IS NULL"))
            .await
            .expect("prepare");
        client
            .query_opt(
                &statement,
                &[&scope.namespace().as_str(), &subject_of(scope)],
            )
            .await
            .expect("get working memory")
            .map(|r| String::from_utf8(r.get::<_, Vec<u8>>(0)).expect("UTF-8"))
    }

    async fn set_working(&self, scope: &Scope, content: &str) {
        let mut client = self.client().await;
        let tx = client.transaction().await.expect("begin");
        let key = format!(
            "working-memory\u{1f}{}\u{1f}{}\u{1f}None",
            scope.namespace(),
            subject_of(scope)
        );
        let lock = tx
            .prepare_cached("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .await
            .expect("prepare");
        tx.execute(&lock, &[&key]).await.expect("advisory lock");
        let read = tx
            .prepare_cached(&sql("SELECT revision FROM {s}.working_memory
                 WHERE namespace = $1 AND subject = $2 AND conversation IS NULL"))
            .await
            .expect("prepare");
        let revision: i64 = tx
            .query_opt(&read, &[&scope.namespace().as_str(), &subject_of(scope)])
            .await
            .expect("read revision")
            .map_or(0, |r| r.get(0));
        let write = tx
            .prepare_cached(&sql("INSERT INTO {s}.working_memory
                     (namespace, subject, conversation, content, format, revision, updated_at)
                 VALUES ($1, $2, NULL, $3, 'markdown', $4, $5)
                 ON CONFLICT (namespace, subject, conversation) DO UPDATE SET
                     content = excluded.content, format = excluded.format,
                     revision = excluded.revision, updated_at = excluded.updated_at"))
            .await
            .expect("prepare");
        tx.execute(
            &write,
            &[
                &scope.namespace().as_str(),
                &subject_of(scope),
                &content.as_bytes(),
                &(revision + 1),
                &Timestamp::now().as_millis(),
            ],
        )
        .await
        .expect("write working memory");
        tx.commit().await.expect("commit");
    }

    async fn recall(&self, scope: &Scope, text: &str, limit: usize) -> Vec<String> {
        let query_tokens = tokenize(text);
        let tokens: Vec<&str> = query_tokens.iter().map(String::as_str).collect();
        let client = self.client().await;
        let statement = client
            .prepare_cached(&sql(
                "SELECT pk, id, text, kind, key, tags, score, source, embedding,
                        created_at, updated_at, expires_at, valid_to, superseded_by
                 FROM {s}.facts
                 WHERE namespace = $1 AND subject = $2 AND tokens && $4::text[]
                   AND superseded_by IS NULL AND (expires_at IS NULL OR expires_at > $3)",
            ))
            .await
            .expect("prepare");
        let rows = client
            .query(
                &statement,
                &[
                    &scope.namespace().as_str(),
                    &subject_of(scope),
                    &Timestamp::now().as_millis(),
                    &tokens,
                ],
            )
            .await
            .expect("recall");
        let rows = rows
            .iter()
            .map(|r| {
                let text: Vec<u8> = r.get("text");
                (
                    r.get::<_, String>("id"),
                    String::from_utf8(text).expect("UTF-8"),
                )
            })
            .collect();
        crate::workloads::rank(&query_tokens, rows, limit)
    }
}

/// The store memory-postgres opens on a fresh schema of `url`, and the raw driver on it.
pub async fn open(url: &str) -> (Arc<dyn MemoryBackend>, Arc<dyn RawDriver>) {
    let config = tokio_postgres::Config::from_str(url).expect("a PostgreSQL URL");
    let (client, connection) = config.connect(NoTls).await.expect("connect to PostgreSQL");
    tokio::spawn(connection);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
        .await
        .expect("drop the benchmark schema");
    let store = memory_postgres::PostgresStore::builder()
        .url(url)
        .schema(SCHEMA)
        .max_connections(16)
        .open()
        .await
        .expect("open the PostgreSQL store");
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let pool = Pool::builder(manager)
        .max_size(16)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(30)))
        .create_timeout(Some(Duration::from_secs(10)))
        .build()
        .expect("the raw pool");
    (Arc::new(store), Arc::new(RawPostgres { pool }))
}
