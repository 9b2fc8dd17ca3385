//! PostgreSQL-specific guarantees beyond the suite: two pools racing appends to one
//! conversation, a connection killed in the middle of an append, planner statistics kept
//! current through a load of many batches, vectors carried through migration 3, and each
//! collection's partition (migration 5).
//!
//! Needs `MNEMIX_TEST_POSTGRES_URL` (set by `cargo xtask test`); without it each test says so
//! and passes as a skip, unless `MNEMIX_TEST_REQUIRE` names postgres.

use std::collections::HashSet;
use std::time::Duration;

use mnemix_conformance::{is_required, SetupError};
use mnemix_core::{
    AppendOptions, CollectionSpec, ConversationStore, LoadOptions, Message, MessageId, Namespace,
    NewConversation, Scope, VectorId, VectorRecord, VectorStore,
};
use mnemix_postgres::PostgresStore;
use mnemix_testkit::services::{locate, Service};
use tokio_postgres::NoTls;

const SCHEMA: &str = "agent_memory_tests";

/// Whether the server can install pgvector.
async fn has_pgvector(client: &tokio_postgres::Client) -> bool {
    client
        .query_opt(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'",
            &[],
        )
        .await
        .unwrap()
        .is_some()
}

/// A plain client on its own connection (driven in the background), beside the store's pool.
async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// The server's URL, or `None` (a named skip) when there is none and it is not required.
fn server(test: &str) -> Option<String> {
    match locate(Service::Postgres) {
        Ok(url) => Some(url),
        Err(SetupError::Unreachable(why)) if !is_required("postgres") => {
            eprintln!("SKIP postgres::{test}: {why}");
            None
        }
        Err(e) => panic!("postgres is required: {e:?}"),
    }
}

async fn store(url: &str) -> PostgresStore {
    store_in(url, SCHEMA).await
}

/// A store on `schema` (made and migrated when new).
async fn store_in(url: &str, schema: &str) -> PostgresStore {
    PostgresStore::builder()
        .url(url)
        .schema(schema)
        .max_connections(4)
        .open()
        .await
        .expect("open")
}

/// A name part no other run uses: the clock in nanoseconds, in hex.
fn unique() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{nanos:x}")
}

/// A subject no other run uses.
fn scope() -> Scope {
    Scope::new("pg-tests", format!("subject-{}", unique())).unwrap()
}

fn message(id: &str) -> Message {
    Message {
        id: MessageId::new(id).unwrap(),
        ..Message::user(format!("text of {id}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pools_racing_appends_lose_and_duplicate_nothing() {
    let Some(url) = server("two_pools_racing_appends_lose_and_duplicate_nothing") else {
        return;
    };
    let (a, b) = (store(&url).await, store(&url).await);
    let scope = scope();
    let thread = a
        .create_conversation(&scope, NewConversation::default())
        .await
        .unwrap();
    let (stores, writers_per_store, batches, batch) = ([&a, &b], 4, 20, 3);
    let mut tasks = Vec::new();
    for (s, store) in stores.into_iter().enumerate() {
        for w in 0..writers_per_store {
            let (scope, id) = (scope.clone(), thread.id.clone());
            tasks.push(async move {
                for n in 0..batches {
                    let messages = (0..batch)
                        .map(|i| message(&format!("s{s}-w{w}-b{n}-m{i}")))
                        .collect();
                    store
                        .append(&scope, &id, messages, AppendOptions::default())
                        .await
                        .unwrap();
                }
            });
        }
    }
    futures::future::join_all(tasks).await;

    let stored = a
        .load(&scope, &thread.id, LoadOptions::raw())
        .await
        .unwrap();
    let expected = 2 * writers_per_store * batches * batch;
    assert_eq!(stored.len(), expected, "nothing lost");
    let seqs: Vec<u64> = stored.iter().map(|m| m.seq).collect();
    assert_eq!(
        seqs,
        (1..=expected as u64).collect::<Vec<_>>(),
        "contiguous seq"
    );
    let ids: HashSet<&str> = stored.iter().map(|m| m.message.id.as_str()).collect();
    assert_eq!(ids.len(), expected, "nothing duplicated");
    // Each batch stayed contiguous: its messages sit at consecutive seqs.
    for window in stored.chunks(batch) {
        let prefix = |m: &mnemix_core::StoredMessage| {
            m.message
                .id
                .as_str()
                .rsplit_once("-m")
                .unwrap()
                .0
                .to_owned()
        };
        assert!(
            window.iter().all(|m| prefix(m) == prefix(&window[0])),
            "a batch was interleaved"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_connection_killed_mid_append_shows_no_partial_batch_and_retries_once() {
    let Some(url) =
        server("a_connection_killed_mid_append_shows_no_partial_batch_and_retries_once")
    else {
        return;
    };
    // Behind the front layer, as `mnemix::open` gives it: that is what retries.
    let store = mnemix_core::Store::new(store(&url).await);
    let scope = scope();
    let thread = store
        .create_conversation(&scope, NewConversation::default())
        .await
        .unwrap();
    let blocker = connect(&url).await;
    let observer = connect(&url).await;
    let pk: i64 = observer
        .query_one(
            &format!("SELECT pk FROM {SCHEMA}.conversations WHERE namespace = $1 AND subject = $2 AND id = $3"),
            &[&"pg-tests", &scope.subject().unwrap().as_str(), &thread.id.as_str()],
        )
        .await
        .unwrap()
        .get(0);

    // An uncommitted row at seq 1 makes the append's batch INSERT wait, inside its transaction.
    blocker.batch_execute("BEGIN").await.unwrap();
    blocker
        .execute(
            &format!("INSERT INTO {SCHEMA}.messages (conversation, seq, id, role, body) VALUES ($1, 1, 'blocker', 'user', '{{}}')"),
            &[&pk],
        )
        .await
        .unwrap();

    let batch: Vec<Message> = (0..10).map(|i| message(&format!("m{i}"))).collect();
    let append = {
        let (scope, id, batch) = (scope.clone(), thread.id.clone(), batch.clone());
        let store = store.clone();
        tokio::spawn(async move {
            store
                .append(&scope, &id, batch, AppendOptions::default())
                .await
        })
    };

    // Find the append's backend, waiting on the lock mid-batch.
    let waiting = format!(
        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'
           AND query LIKE 'INSERT INTO \"{SCHEMA}\".messages%'"
    );
    let mut pid = None;
    for _ in 0..100 {
        if let Some(row) = observer.query(&waiting, &[]).await.unwrap().first() {
            pid = Some(row.get::<_, i32>(0));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = pid.expect("the append reached its INSERT and waits");
    let visible: i64 = observer
        .query_one(
            &format!("SELECT count(*) FROM {SCHEMA}.messages WHERE conversation = $1"),
            &[&pk],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(visible, 0, "nothing of an uncommitted batch is visible");

    observer
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    // The front layer retries on a fresh connection, which waits on the same lock until it is
    // gone.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let visible: i64 = observer
        .query_one(
            &format!("SELECT count(*) FROM {SCHEMA}.messages WHERE conversation = $1"),
            &[&pk],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(visible, 0, "the killed transaction left nothing behind");
    blocker.batch_execute("ROLLBACK").await.unwrap();

    let receipt = append.await.unwrap().expect("the retried append succeeds");
    assert_eq!(receipt.last_seq, 10);
    let stored = store
        .load(&scope, &thread.id, LoadOptions::raw())
        .await
        .unwrap();
    let ids: Vec<&str> = stored.iter().map(|m| m.message.id.as_str()).collect();
    let want: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    assert_eq!(ids, want, "applied once, in order");
    assert_eq!(
        stored.iter().map(|m| m.seq).collect::<Vec<_>>(),
        (1..=10).collect::<Vec<u64>>()
    );
    let again = store
        .append(&scope, &thread.id, batch, AppendOptions::default())
        .await
        .unwrap();
    assert_eq!(
        again.duplicates.len(),
        10,
        "a client retry is recognised as already applied"
    );
}

/// The planner picks a collection's HNSW index only when its statistics know the collection
/// is large. A load in batches that each grow the table by less than a tenth must still keep
/// them current (the store counts rows across writes), whether or not autovacuum runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_load_of_many_batches_keeps_the_vector_statistics_current() {
    let Some(url) = server("a_load_of_many_batches_keeps_the_vector_statistics_current") else {
        return;
    };
    load_and_check_statistics(&url, 1).await;
}

/// Writers past the statistics threshold at once: each used to subtract its own view of the
/// pending count, taking the same rows away twice until the counter wrapped (an overflow panic
/// in debug builds, seen in the benchmarks' concurrent vector loads).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_loads_keep_the_vector_statistics_current() {
    let Some(url) = server("concurrent_loads_keep_the_vector_statistics_current") else {
        return;
    };
    load_and_check_statistics(&url, 8).await;
}

/// Loads 40 batches of 200 vectors from `writers` concurrent tasks into a fresh schema, then
/// checks that the planner's row estimate kept up.
async fn load_and_check_statistics(url: &str, writers: usize) {
    // A schema of its own: only this store writes its vectors table.
    let schema = format!("agent_memory_tests_stats_{}", unique());
    let store = std::sync::Arc::new(
        PostgresStore::builder()
            .url(url)
            .schema(&schema)
            .max_connections(8)
            .open()
            .await
            .expect("open"),
    );
    let scope = scope();
    let namespace = Namespace::new("pg-tests").unwrap();
    store
        .ensure_collection(&namespace, CollectionSpec::new("stats", 4, "test-model"))
        .await
        .unwrap();
    let (batches, batch) = (40, 200);
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (store, scope) = (store.clone(), scope.clone());
            tokio::spawn(async move {
                for b in (w..batches).step_by(writers) {
                    let records = (0..batch)
                        .map(|i| {
                            let n = (b * batch + i) as f32;
                            VectorRecord::new(
                                VectorId::new(format!("v{b}-{i}")).unwrap(),
                                vec![1.0, n.sin(), n.cos(), n / 1000.0],
                            )
                        })
                        .collect();
                    store
                        .upsert_vectors(&scope, "stats", records)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("no writer panicked");
    }
    let client = connect(url).await;
    let known: f32 = client
        .query_one(
            "SELECT reltuples FROM pg_class WHERE oid = to_regclass($1)",
            &[&format!("{schema}.vectors")],
        )
        .await
        .unwrap()
        .get(0);
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
    let written = (batches * batch) as f32;
    // Rows since the last ANALYZE stay under a tenth of the table: known >= written / 1.1.
    assert!(
        known >= 0.9 * written,
        "the planner believes the table holds {known} rows; {written} were written"
    );
}

/// Makes `schema` as the release with the first `migrations` migrations left it, applied and
/// recorded as the store's runner does.
async fn schema_as_released(client: &tokio_postgres::Client, schema: &str, migrations: usize) {
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema};
             CREATE TABLE {schema}.agent_memory_migrations (
                 version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,
                 applied_at bigint NOT NULL)"
        ))
        .await
        .unwrap();
    for migration in &mnemix_postgres::MIGRATIONS[..migrations] {
        client
            .batch_execute(&migration.sql.replace("{schema}", schema))
            .await
            .unwrap();
        client
            .execute(
                &format!("INSERT INTO {schema}.agent_memory_migrations VALUES ($1, $2, $3, 0)"),
                &[
                    &(migration.version as i32),
                    &migration.name,
                    &migration.checksum(),
                ],
            )
            .await
            .unwrap();
    }
}

/// The ids of a search's hits, in order.
fn hit_ids(hits: Vec<mnemix_core::VectorHit>) -> Vec<String> {
    hits.into_iter()
        .map(|h| h.record.id.as_str().to_owned())
        .collect()
}

/// Values whose bits a change of storage could lose: signed zero, the smallest subnormal,
/// the largest finite f32, and ordinary fractions.
const AWKWARD: [f32; 6] = [-0.0, f32::from_bits(1), f32::MAX, -1.5, 0.1, 3.0e-39];

/// A search holds a small scope's matrix in the client until the scope's version changes:
/// every kind of vector write through another store (another process) is seen by the next
/// search; and likewise when nothing is held and the server ranks every search, and when the
/// scope is too large to hold (800 bytes hold 10 rows of 4 dimensions; it has 20), whose
/// searches then read no version for a while.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn searches_see_writes_of_another_store() {
    let Some(url) = server("searches_see_writes_of_another_store") else {
        return;
    };
    for cache_bytes in [1 << 20, 0, 800] {
        let open = || {
            PostgresStore::builder()
                .url(&url)
                .schema(SCHEMA)
                .max_connections(2)
                .vector_cache_bytes(cache_bytes)
                .open()
        };
        let (reader, writer) = (open().await.unwrap(), open().await.unwrap());
        let scope = Scope::new(format!("pg-held-{}", unique()), "searcher").unwrap();
        mnemix_conformance::handles::searches_see_writes_of_another_handle(
            &reader, &writer, &scope,
        )
        .await;
        // And fact recalls (the SQLite family holds a subject's facts between them).
        let scope = Scope::new(format!("pg-facts-{}", unique()), "recaller").unwrap();
        mnemix_conformance::handles::recalls_see_facts_written_by_another_handle(
            &reader, &writer, &scope,
        )
        .await;
    }
}

/// Migration 0003 moves vectors from `real[]` to pgvector's `vector` (the store uses pgvector)
/// or to f32 little-endian `bytea` (it does not), bit for bit, and a store opened afterwards
/// reads and searches them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vectors_written_as_arrays_read_back_bit_for_bit_after_migration_3() {
    let Some(url) = server("vectors_written_as_arrays_read_back_bit_for_bit_after_migration_3")
    else {
        return;
    };
    let client = connect(&url).await;
    let has_pgvector = has_pgvector(&client).await;
    for pgvector in [false, true] {
        if pgvector && !has_pgvector {
            eprintln!("SKIP postgres::migration 3 onto pgvector: the server has no pgvector");
            continue;
        }
        let schema = format!("agent_memory_tests_m3_{}", unique());
        // The schema as release 2 left it, with one vector written as `real[]`.
        schema_as_released(&client, &schema, 2).await;
        client
            .batch_execute(
                &format!(
                    "INSERT INTO {schema}.collections (pk, namespace, name, dims, metric, model)
                 VALUES (1, 'pg-tests', 'm3', 6, 'euclidean', 'test-model');
                 INSERT INTO {schema}.vectors (collection, subject, id, embedding, metadata, norm)
                 VALUES (1, 'ada', 'awkward', $1, '{{}}', 1),
                        (1, 'bob', 'near', '{{0,0,0,0,0,1}}', '{{}}', 1),
                        (1, 'bob', 'far', '{{0,0,0,0,1,0}}', '{{}}', 1)"
                )
                .replace("$1", "'{-0, 1.4e-45, 3.4028235e38, -1.5, 0.1, 3e-39}'"),
            )
            .await
            .unwrap();
        let store = PostgresStore::builder()
            .url(&url)
            .schema(&schema)
            .max_connections(2)
            .pgvector(pgvector)
            .open()
            .await
            .expect("open migrates to 3");
        let scope = Scope::new("pg-tests", "ada").unwrap();
        let read = store
            .get_vector(&scope, "m3", &VectorId::new("awkward").unwrap())
            .await
            .unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&read.vector), bits(&AWKWARD), "pgvector {pgvector}");
        let hits = store
            .search(
                &Scope::new("pg-tests", "bob").unwrap(),
                "m3",
                mnemix_core::VectorQuery::new(vec![0.0, 0.0, 0.0, 0.0, 0.0, 1.0], 1),
            )
            .await
            .unwrap();
        assert_eq!(hits[0].record.id.as_str(), "near", "pgvector {pgvector}");
        let column: String = client
            .query_one(
                "SELECT format_type(atttypid, NULL) FROM pg_attribute
                 WHERE attrelid = to_regclass($1) AND attname = 'embedding'",
                &[&format!("{schema}.vectors")],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(column, if pgvector { "vector" } else { "bytea" });
        // Rows keep their vectors inline (no TOAST lookup per row a search compares), in
        // their collection's partition (migration 5).
        let inline: bool = client
            .query_one(
                "SELECT 'toast_tuple_target=8160' = ANY(reloptions) FROM pg_class
                 WHERE oid = to_regclass($1)",
                &[&format!("{schema}.vectors_1")],
            )
            .await
            .unwrap()
            .get(0);
        assert!(inline, "pgvector {pgvector}");
        drop(store);
        client
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
    }
}

/// Migration 5 moves each collection's rows to a partition of its own and makes its HNSW index
/// again there, as it was; collections made later get their partition with them, and lose it
/// when dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_5_gives_each_collection_its_partition_and_keeps_its_index() {
    let Some(url) = server("migration_5_gives_each_collection_its_partition_and_keeps_its_index")
    else {
        return;
    };
    let client = connect(&url).await;
    if !has_pgvector(&client).await {
        eprintln!("SKIP postgres::migration 5: the server has no pgvector");
        return;
    }
    let schema = format!("agent_memory_tests_m5_{}", unique());
    // The schema as release 4 left it (vectors as pgvector's type): two collections, the first
    // with its partial HNSW index.
    client
        .batch_execute("SET agent_memory.pgvector = 'on'; CREATE EXTENSION IF NOT EXISTS vector")
        .await
        .unwrap();
    schema_as_released(&client, &schema, 4).await;
    client
        .batch_execute(&format!(
            "INSERT INTO {schema}.collections (namespace, name, dims, metric, model)
             VALUES ('pg-tests', 'indexed', 3, 'euclidean', 'test-model'),
                    ('pg-tests', 'plain', 3, 'euclidean', 'test-model');
             INSERT INTO {schema}.vectors (collection, subject, id, embedding, metadata, norm)
             VALUES (1, 'ada', 'near', '[0,0,1]', '{{}}', 1), (1, 'ada', 'far', '[0,1,0]', '{{}}', 1),
                    (2, 'ada', 'other', '[0,0,1]', '{{}}', 1);
             CREATE INDEX vectors_hnsw_1 ON {schema}.vectors
                 USING hnsw ((embedding::vector(3)) vector_l2_ops)
                 WITH (m = 16, ef_construction = 64) WHERE collection = 1;"
        ))
        .await
        .unwrap();
    let store = store_in(&url, &schema).await;
    let partitions = || async {
        client
            .query(
                "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                 WHERE i.inhparent = to_regclass($1) ORDER BY 1",
                &[&format!("{schema}.vectors")],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get::<_, String>(0))
            .collect::<Vec<_>>()
    };
    assert_eq!(partitions().await, ["vectors_1", "vectors_2"]);
    let index_table: String = client
        .query_one(
            "SELECT indrelid::regclass::text FROM pg_index WHERE indexrelid = to_regclass($1)
             AND indisvalid",
            &[&format!("{schema}.vectors_hnsw_1")],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(index_table, format!("{schema}.vectors_1"));
    let scope = Scope::new("pg-tests", "ada").unwrap();
    let query = mnemix_core::VectorQuery::new(vec![0.0, 0.0, 1.0], 2);
    assert_eq!(
        hit_ids(
            store
                .search(&scope, "indexed", query.clone())
                .await
                .unwrap()
        ),
        ["near", "far"]
    );
    assert_eq!(
        hit_ids(store.search(&scope, "plain", query).await.unwrap()),
        ["other"]
    );
    // A collection made now has its partition; a dropped one loses it.
    let namespace = Namespace::new("pg-tests").unwrap();
    store
        .ensure_collection(&namespace, CollectionSpec::new("later", 3, "test-model"))
        .await
        .unwrap();
    assert!(store.drop_collection(&namespace, "plain").await.unwrap());
    assert_eq!(partitions().await, ["vectors_1", "vectors_3"]);
    drop(store);
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
}

/// A drop removes every partition whose collection is gone, not only its own: one a detach
/// interrupted half-way left pending (which would refuse every later detach) and one still
/// attached. The store's tables are then exactly its collections'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_finishes_partitions_earlier_drops_left_behind() {
    let Some(url) = server("a_drop_finishes_partitions_earlier_drops_left_behind") else {
        return;
    };
    let client = connect(&url).await;
    let schema = format!("agent_memory_tests_orphans_{}", unique());
    let store = store_in(&url, &schema).await;
    let namespace = Namespace::new("pg-tests").unwrap();
    for name in ["pending", "attached", "dropped", "kept"] {
        store
            .ensure_collection(&namespace, CollectionSpec::new(name, 3, "test-model"))
            .await
            .unwrap();
    }
    let pk = |name: &'static str| {
        let (client, schema) = (&client, &schema);
        async move {
            let row = client
                .query_one(
                    &format!("SELECT pk FROM {schema}.collections WHERE name = $1"),
                    &[&name],
                )
                .await
                .unwrap();
            row.get::<_, i64>(0)
        }
    };
    let (pending, attached, kept) = (pk("pending").await, pk("attached").await, pk("kept").await);
    // Two collections whose rows went but whose drops stopped short: one before its detach,
    // one with its detach cancelled while it waited for a reader (it stays pending).
    client
        .batch_execute(&format!(
            "DELETE FROM {schema}.collections WHERE name IN ('pending', 'attached')"
        ))
        .await
        .unwrap();
    let reader = connect(&url).await;
    reader
        .batch_execute(&format!("BEGIN; SELECT count(*) FROM {schema}.vectors"))
        .await
        .unwrap();
    let detach = {
        let (url, schema) = (url.clone(), schema.clone());
        tokio::spawn(async move {
            let detacher = connect(&url).await;
            detacher
                .batch_execute(&format!(
                    "ALTER TABLE {schema}.vectors DETACH PARTITION {schema}.vectors_{pending}
                     CONCURRENTLY"
                ))
                .await
        })
    };
    // Cancelled once its first step has committed and it waits for the reader.
    loop {
        let cancelled: i64 = client
            .query_one(
                "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity
                 WHERE query LIKE '%DETACH PARTITION ' || $1 || '%' AND wait_event_type = 'Lock'",
                &[&format!("{schema}.vectors_{pending}")],
            )
            .await
            .unwrap()
            .get(0);
        if cancelled > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(detach.await.unwrap().is_err(), "the detach was cancelled");
    reader.batch_execute("COMMIT").await.unwrap();
    let tables = || async {
        client
            .query(
                "SELECT c.relname::text, coalesce(i.inhdetachpending, false)
                 FROM pg_class c LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
                 WHERE c.relnamespace = to_regnamespace($1) AND c.relkind = 'r'
                   AND c.relname LIKE 'vectors_%' ORDER BY 1",
                &[&schema],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get::<_, String>(0), row.get::<_, bool>(1)))
            .collect::<Vec<_>>()
    };
    assert!(
        tables()
            .await
            .contains(&(format!("vectors_{pending}"), true)),
        "a detach left pending: {:?}",
        tables().await
    );
    assert!(store.drop_collection(&namespace, "dropped").await.unwrap());
    assert_eq!(tables().await, [(format!("vectors_{kept}"), false)]);
    assert!(!tables()
        .await
        .iter()
        .any(|(table, _)| *table == format!("vectors_{attached}")));
    // Making and dropping goes on as before.
    store
        .ensure_collection(&namespace, CollectionSpec::new("later", 3, "test-model"))
        .await
        .unwrap();
    assert!(store.drop_collection(&namespace, "later").await.unwrap());
    assert_eq!(tables().await, [(format!("vectors_{kept}"), false)]);
    drop(store);
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
}

/// Whether collection `name` of `namespace` has a valid HNSW index.
async fn has_valid_index(client: &tokio_postgres::Client, schema: &str, name: &str) -> bool {
    client
        .query_one(
            &format!(
                "SELECT coalesce((SELECT indisvalid FROM pg_index
                     WHERE indexrelid = to_regclass('{schema}.vectors_hnsw_' || c.pk)), false)
                 FROM {schema}.collections c WHERE c.namespace = 'pg-tests' AND c.name = $1"
            ),
            &[&name],
        )
        .await
        .unwrap()
        .get(0)
}

/// A collection gets its HNSW index only once a search finds one scope of it large
/// (`index_min_rows`): many small scopes never pay for one on every write. The search that
/// finds it builds it in the background and is answered exactly meanwhile; later searches use
/// it and still rank exactly. `build_vector_index` builds it at once, and `drop_collection`
/// removes it with the collection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collection_gets_its_index_once_a_search_finds_a_scope_large() {
    let Some(url) = server("a_collection_gets_its_index_once_a_search_finds_a_scope_large") else {
        return;
    };
    let client = connect(&url).await;
    let pgvector = has_pgvector(&client).await;
    if !pgvector {
        eprintln!("SKIP postgres::lazy index: the server has no pgvector");
        return;
    }
    let schema = format!("agent_memory_tests_lazy_{}", unique());
    let store = PostgresStore::builder()
        .url(&url)
        .schema(&schema)
        .max_connections(4)
        .index_min_rows(100)
        .open()
        .await
        .unwrap();
    let namespace = Namespace::new("pg-tests").unwrap();
    let vector = |n: usize| {
        let x = n as f32;
        vec![1.0, x.sin(), x.cos(), (x / 7.0).sin()]
    };
    let fill = |subject: &str, rows: usize| {
        let (store, scope) = (&store, Scope::new("pg-tests", subject).unwrap());
        async move {
            let records = (0..rows)
                .map(|n| VectorRecord::new(VectorId::new(format!("v{n}")).unwrap(), vector(n)))
                .collect();
            store.upsert_vectors(&scope, "lazy", records).await.unwrap();
            scope
        }
    };
    store
        .ensure_collection(&namespace, CollectionSpec::new("lazy", 4, "test-model"))
        .await
        .unwrap();
    // Three scopes of 60: 180 rows in the collection, none of them a large scope.
    let mut small = Vec::new();
    for subject in ["s1", "s2", "s3"] {
        small.push(fill(subject, 60).await);
    }
    let query = mnemix_core::VectorQuery::new(vector(1000), 5);
    for scope in &small {
        store.search(scope, "lazy", query.clone()).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!has_valid_index(&client, &schema, "lazy").await);

    // One scope of 150: its search answers exactly and starts the build.
    let large = fill("big", 150).await;
    let expected: Vec<String> = {
        let mut scored: Vec<(f32, String)> = (0..150)
            .map(|n| {
                let (a, b) = (vector(n), vector(1000));
                let dot: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
                let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
                (dot / (norm(&a) * norm(&b)), format!("v{n}"))
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        scored.into_iter().take(5).map(|(_, id)| id).collect()
    };
    assert_eq!(
        hit_ids(store.search(&large, "lazy", query.clone()).await.unwrap()),
        expected
    );
    let mut waited = Duration::ZERO;
    while !has_valid_index(&client, &schema, "lazy").await {
        assert!(
            waited < Duration::from_secs(30),
            "no index 30 s after the search"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += Duration::from_millis(100);
    }
    assert_eq!(
        hit_ids(store.search(&large, "lazy", query.clone()).await.unwrap()),
        expected
    );

    // Built at once on request; gone with its collection.
    store
        .ensure_collection(&namespace, CollectionSpec::new("loaded", 4, "test-model"))
        .await
        .unwrap();
    assert!(!has_valid_index(&client, &schema, "loaded").await);
    assert!(store
        .build_vector_index(&namespace, "loaded")
        .await
        .unwrap());
    assert!(has_valid_index(&client, &schema, "loaded").await);
    assert!(store.drop_collection(&namespace, "lazy").await.unwrap());
    let left: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname LIKE 'vectors_hnsw_%'",
            &[&schema],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 1, "only the index of `loaded` is left");
    drop(store);
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
}
