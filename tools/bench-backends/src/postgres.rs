//! PostgreSQL: the hand-written tokio-postgres side.

use std::str::FromStr as _;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use mnemix_core::lexical::tokenize;
use mnemix_core::{ConversationId, MemoryBackend, Message, Scope, Timestamp};
use tokio_postgres::NoTls;

use mnemix_bench::workloads::{MessageRecall, RawDriver};

/// The schema the benchmark owns (dropped and made again at every run); the quick run has
/// its own, so a smoke run never touches a full run's tables.
pub fn schema(quick: bool) -> &'static str {
    if quick {
        "mnemix_bench_quick"
    } else {
        "mnemix_bench"
    }
}

/// The statements mnemix-postgres runs, by hand on tokio-postgres, on the same schema and
/// tables, through a deadpool pool of the same size and recycling, statements prepared once per
/// connection as the store does.
pub struct RawPostgres {
    pool: Pool,
    schema: &'static str,
    /// The message collection's pk, looked up once: the HNSW index is partial on it, and the
    /// planner matches a partial index only against a literal.
    message_collection: tokio::sync::OnceCell<i64>,
}

fn subject_of(scope: &Scope) -> &str {
    scope.subject().map_or("", |s| s.as_str())
}

fn sql(schema: &str, template: &str) -> String {
    template.replace("{s}", schema)
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
                    self.schema,
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
            .prepare_cached(&sql(
                self.schema,
                "SELECT pk, last_seq FROM {s}.conversations
                 WHERE namespace = $1 AND subject = $2 AND id = $3 FOR NO KEY UPDATE",
            ))
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
                self.schema,
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
                self.schema,
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
                self.schema,
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
            .prepare_cached(&sql(
                self.schema,
                "SELECT m.body FROM {s}.conversations c
                 JOIN LATERAL (
                     SELECT seq, body FROM {s}.messages WHERE conversation = c.pk
                     ORDER BY seq DESC LIMIT $4
                 ) m ON true
                 WHERE c.namespace = $1 AND c.subject = $2 AND c.id = $3",
            ))
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

    async fn recall_messages(
        &self,
        scope: &Scope,
        id: &ConversationId,
        recall: &MessageRecall<'_>,
    ) -> Option<Vec<Message>> {
        let client = self.client().await;
        let collection = *self
            .message_collection
            .get_or_init(|| async {
                let statement = client
                    .prepare_cached(&sql(
                        self.schema,
                        "SELECT pk FROM {s}.collections WHERE namespace = $1 AND name = $2",
                    ))
                    .await
                    .expect("prepare");
                client
                    .query_one(
                        &statement,
                        &[&scope.namespace().as_str(), &recall.collection],
                    )
                    .await
                    .expect("the message collection")
                    .get(0)
            })
            .await;
        // The store's tables: the conversation's message vectors before the window (their seq
        // is in the filter document) through the collection's HNSW index, then those messages.
        // Only trusted integers are formatted in.
        let statement = client
            .prepare_cached(&sql(
                self.schema,
                &format!(
                    "SELECT m.body FROM {{s}}.conversations c
                     CROSS JOIN LATERAL (
                         SELECT (v.filter ->> 'seq')::bigint AS seq,
                                v.embedding::vector({dims}) <=> $5::real[]::vector({dims})
                                    AS distance
                         FROM {{s}}.vectors v
                         WHERE v.collection = {collection} AND v.subject = c.subject
                           AND v.conversation_id = c.id
                           AND (v.filter ->> 'seq')::bigint <= c.last_seq - $4
                         ORDER BY v.embedding::vector({dims}) <=> $5::real[]::vector({dims})
                         LIMIT $7
                     ) hit
                     JOIN {{s}}.messages m ON m.conversation = c.pk AND m.seq = hit.seq
                     WHERE c.namespace = $1 AND c.subject = $2 AND c.id = $3
                       AND hit.distance <= $6
                     ORDER BY hit.distance",
                    dims = recall.vector.len()
                ),
            ))
            .await
            .expect("prepare");
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] = [
            &scope.namespace().as_str(),
            &subject_of(scope),
            &id.as_str(),
            &(recall.window as i64),
            &recall.vector,
            &(1.0 - f64::from(recall.min_score)),
            &(recall.limit as i64),
        ];
        // The index's settings, the search and COMMIT in one round trip, as the store sends
        // them (requests polled together are pipelined on the connection).
        // The store's ef_search: its default, which at W10's k is what it searches with.
        let begin = format!(
            "BEGIN; SET LOCAL hnsw.ef_search = {}; SET LOCAL hnsw.iterative_scan = relaxed_order",
            mnemix_postgres::Hnsw::default().ef_search
        );
        let (begun, rows, committed) = futures::join!(
            client.batch_execute(&begin),
            client.query(&statement, &params),
            client.batch_execute("COMMIT"),
        );
        begun.expect("begin");
        committed.expect("commit");
        Some(
            rows.expect("recall messages")
                .iter()
                .map(|r| serde_json::from_str(r.get::<_, &str>(0)).expect("a message"))
                .collect(),
        )
    }

    async fn get_working(&self, scope: &Scope) -> Option<String> {
        let client = self.client().await;
        let statement = client
            .prepare_cached(&sql(
                self.schema,
                "SELECT content FROM {s}.working_memory
                 WHERE namespace = $1 AND subject = $2 AND conversation IS NULL",
            ))
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
            .prepare_cached(&sql(
                self.schema,
                "SELECT revision FROM {s}.working_memory
                 WHERE namespace = $1 AND subject = $2 AND conversation IS NULL",
            ))
            .await
            .expect("prepare");
        let revision: i64 = tx
            .query_opt(&read, &[&scope.namespace().as_str(), &subject_of(scope)])
            .await
            .expect("read revision")
            .map_or(0, |r| r.get(0));
        let write = tx
            .prepare_cached(&sql(
                self.schema,
                "INSERT INTO {s}.working_memory
                     (namespace, subject, conversation, content, format, revision, updated_at)
                 VALUES ($1, $2, NULL, $3, 'markdown', $4, $5)
                 ON CONFLICT (namespace, subject, conversation) DO UPDATE SET
                     content = excluded.content, format = excluded.format,
                     revision = excluded.revision, updated_at = excluded.updated_at",
            ))
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
                self.schema,
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
        mnemix_bench::workloads::rank(&query_tokens, rows, limit)
    }

    async fn list_page(
        &self,
        scope: &Scope,
        after: Option<(i64, String)>,
        limit: usize,
    ) -> Vec<(i64, String)> {
        let client = self.client().await;
        let columns = "pk, id, agent, title, metadata, resource_slug, record_id, created_at, \
                       updated_at, last_seq";
        let (namespace, subject) = (scope.namespace().as_str(), subject_of(scope));
        let limit = limit as i64;
        let rows = if let Some((created_at, id)) = &after {
            let statement = client
                .prepare_cached(&sql(
                    self.schema,
                    &format!(
                        "SELECT {columns} FROM {{s}}.conversations
                         WHERE namespace = $1 AND subject = $2 AND (created_at, id) < ($3, $4)
                         ORDER BY created_at DESC, id DESC LIMIT $5"
                    ),
                ))
                .await
                .expect("prepare");
            client
                .query(&statement, &[&namespace, &subject, created_at, id, &limit])
                .await
        } else {
            let statement = client
                .prepare_cached(&sql(
                    self.schema,
                    &format!(
                        "SELECT {columns} FROM {{s}}.conversations
                         WHERE namespace = $1 AND subject = $2
                         ORDER BY created_at DESC, id DESC LIMIT $3"
                    ),
                ))
                .await
                .expect("prepare");
            client
                .query(&statement, &[&namespace, &subject, &limit])
                .await
        }
        .expect("list");
        rows.iter()
            .map(|r| (r.get("created_at"), r.get("id")))
            .collect()
    }
}

/// The store mnemix-postgres opens on a fresh schema of `url`, and the raw driver on it.
pub async fn open(url: &str, schema: &'static str) -> (Arc<dyn MemoryBackend>, Arc<dyn RawDriver>) {
    let config = tokio_postgres::Config::from_str(url).expect("a PostgreSQL URL");
    let (client, connection) = config.connect(NoTls).await.expect("connect to PostgreSQL");
    tokio::spawn(connection);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .expect("drop the benchmark schema");
    let store = mnemix_postgres::PostgresStore::builder()
        .url(url)
        .schema(schema)
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
    (
        mnemix_core::Checked::wrap(Arc::new(store)),
        Arc::new(RawPostgres {
            pool,
            schema,
            message_collection: tokio::sync::OnceCell::new(),
        }),
    )
}

/// W5 on PostgreSQL: ours with its HNSW index against the same pgvector HNSW index by hand,
/// and ours exact (a scan in Rust) against pgvector's exact scan by hand, each at 1 and 8
/// clients. The raw tables are `raw_vectors_exact` and `raw_vectors_hnsw` of the benchmark
/// schema, with the store's HNSW parameters.
pub async fn vectors(
    sizes: &mnemix_bench::workloads::Sizes,
    url: &str,
    schema: &'static str,
    ours: &Arc<dyn MemoryBackend>,
    base: &Arc<mnemix_bench::data::Matrix>,
    queries: &Arc<mnemix_bench::data::Matrix>,
) -> Vec<mnemix_bench::Table> {
    use mnemix_bench::vectors::{load_ours, search, Load, PeerSearch, Peers, Selection};
    let hnsw = mnemix_postgres::Hnsw::default();
    let exact_store: Arc<dyn MemoryBackend> = mnemix_core::Checked::wrap(Arc::new(
        mnemix_postgres::PostgresStore::builder()
            .url(url)
            .schema(schema)
            .max_connections(16)
            .vector_index(false)
            .open()
            .await
            .expect("open the exact PostgreSQL store"),
    ));
    let indexed_scope = mnemix_bench::workloads::subject(50_000);
    let exact_scope = Scope::new("bench-exact", "user-50000").expect("valid scope");
    let ours_indexed_load = load_ours(ours, &indexed_scope, base).await;
    // The store makes a collection's HNSW index when a search first finds a scope of it large;
    // after a bulk load it is built at once, as the raw side builds its own after loading.
    let started = std::time::Instant::now();
    let indexed = mnemix_postgres::PostgresStore::builder()
        .url(url)
        .schema(schema)
        .max_connections(1)
        .open()
        .await
        .expect("open a store to build the index")
        .build_vector_index(indexed_scope.namespace(), mnemix_bench::vectors::COLLECTION)
        .await
        .expect("build the HNSW index");
    assert!(indexed, "the benchmark's PostgreSQL has pgvector");
    let ours_index_build = started.elapsed();
    let ours_exact_load = load_ours(&exact_store, &exact_scope, base).await;

    let config = tokio_postgres::Config::from_str(url).expect("a PostgreSQL URL");
    let pool = Pool::builder(Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    ))
    .max_size(16)
    .runtime(Runtime::Tokio1)
    .build()
    .expect("the raw pool");
    let mut client = pool.get().await.expect("a connection");
    client
        .batch_execute(&sql(
            schema,
            &format!(
            "CREATE TABLE {{s}}.raw_vectors_exact (id bigint PRIMARY KEY, subject text NOT NULL,
                 bucket int NOT NULL, decile int NOT NULL, embedding vector({dims}) NOT NULL);
             CREATE TABLE {{s}}.raw_vectors_hnsw (LIKE {{s}}.raw_vectors_exact INCLUDING ALL);",
            dims = mnemix_bench::data::DIMS
        ),
        ))
        .await
        .expect("create the raw tables");
    let started = std::time::Instant::now();
    for table in ["raw_vectors_exact", "raw_vectors_hnsw"] {
        let tx = client.transaction().await.expect("begin");
        let insert = tx
            .prepare(&sql(
                schema,
                &format!(
                    "INSERT INTO {{s}}.{table} (id, subject, bucket, decile, embedding)
                 VALUES ($1, $2, $3, $4, $5::real[]::vector)"
                ),
            ))
            .await
            .expect("prepare");
        for i in 0..base.len() {
            let (bucket, decile) = ((i % 100) as i32, (i % 10) as i32);
            tx.execute(
                &insert,
                &[&(i as i64), &"user-50000", &bucket, &decile, &base.row(i)],
            )
            .await
            .expect("insert a vector");
        }
        tx.commit().await.expect("commit");
    }
    let raw_load = started.elapsed() / 2;
    let started = std::time::Instant::now();
    client
        .batch_execute(&sql(
            schema,
            &format!(
                "CREATE INDEX ON {{s}}.raw_vectors_hnsw USING hnsw (embedding vector_cosine_ops)
                 WITH (m = {}, ef_construction = {}); ANALYZE {{s}}.raw_vectors_exact;
             ANALYZE {{s}}.raw_vectors_hnsw;",
                hnsw.m, hnsw.ef_construction
            ),
        ))
        .await
        .expect("build the raw HNSW index");
    let raw_index_build = started.elapsed();
    drop(client);

    let raw_search = |table: &'static str, setup: String| -> PeerSearch {
        let pool = pool.clone();
        Arc::new(
            move |query: Vec<f32>, k: usize, filter: Option<Selection>| {
                let (pool, setup) = (pool.clone(), setup.clone());
                // Only a fixed column name is formatted in.
                let condition = filter.map_or(String::new(), |f| format!(" AND {} = 0", f.field));
                Box::pin(async move {
                    let mut client = pool.get().await.expect("a connection");
                    let tx = client.transaction().await.expect("begin");
                    tx.batch_execute(&setup).await.expect("settings");
                    let statement = tx
                        .prepare_cached(&sql(
                            schema,
                            &format!(
                                "SELECT id FROM {{s}}.{table} WHERE subject = $1{condition}
                         ORDER BY embedding <=> $2::real[]::vector LIMIT $3"
                            ),
                        ))
                        .await
                        .expect("prepare");
                    let rows = tx
                        .query(&statement, &[&"user-50000", &query, &(k as i64)])
                        .await
                        .expect("search");
                    tx.commit().await.expect("commit");
                    rows.iter().map(|r| r.get::<_, i64>(0) as usize).collect()
                })
            },
        )
    };
    let ef = hnsw.ef_search.max(10);
    let mut tables = Vec::new();
    let hnsw_peers = || Peers {
        exact: Some((
            "raw pgvector SQL, HNSW".into(),
            raw_search(
                "raw_vectors_hnsw",
                format!(
                    "SET LOCAL hnsw.ef_search = {ef}; SET LOCAL hnsw.iterative_scan = relaxed_order"
                ),
            ),
        )),
        voltagent: None,
    };
    for load in Load::W5_AND_W6 {
        let mut table = search(
            sizes,
            "postgres, pgvector HNSW",
            (ours, &indexed_scope),
            base,
            queries,
            hnsw_peers(),
            load,
        )
        .await;
        if load.filter.is_none() {
            let ours_total = ours_indexed_load + ours_index_build;
            let raw_total = raw_load + raw_index_build;
            table.notes.push(format!(
                "load: ours {:.0} vectors/s (upserts of 1,000) then its index built in {:.1} s (build_vector_index): {:.0} vectors/s in all; raw {:.0} vectors/s (prepared inserts in one transaction) then its index built in {:.1} s: {:.0} vectors/s in all; ours ÷ raw {:.2} (m = {}, ef_construction = {}, ef_search = {ef})",
                base.len() as f64 / ours_indexed_load.as_secs_f64(),
                ours_index_build.as_secs_f64(),
                base.len() as f64 / ours_total.as_secs_f64(),
                base.len() as f64 / raw_load.as_secs_f64(),
                raw_index_build.as_secs_f64(),
                base.len() as f64 / raw_total.as_secs_f64(),
                raw_total.as_secs_f64() / ours_total.as_secs_f64(),
                hnsw.m,
                hnsw.ef_construction
            ));
        }
        tables.push(table);
    }
    // Ours exact reads every row of the subject per query: a few queries per round.
    let few = Arc::new(mnemix_bench::data::Matrix {
        data: queries.data[..sizes.slow_queries.min(queries.len()) * mnemix_bench::data::DIMS]
            .to_vec(),
    });
    for clients in [1, 8] {
        let peers = Peers {
            exact: Some((
                "raw pgvector SQL, exact scan".into(),
                raw_search(
                    "raw_vectors_exact",
                    "SET LOCAL enable_indexscan = off".into(),
                ),
            )),
            voltagent: None,
        };
        let mut table = search(
            sizes,
            "postgres, exact",
            (&exact_store, &exact_scope),
            base,
            &few,
            peers,
            Load {
                clients,
                filter: None,
            },
        )
        .await;
        table.notes.push(format!(
            "load: ours exact {:.0} vectors/s (upserts of 1,000)",
            base.len() as f64 / ours_exact_load.as_secs_f64()
        ));
        tables.push(table);
    }
    tables
}
