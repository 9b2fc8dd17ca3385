//! Driver glue: the statement helpers, error mapping, column codecs and the migration runner.

use async_trait::async_trait;
use bytes::{BufMut, BytesMut};
use futures::TryStreamExt as _;
use mnemix_core::migration::{apply_pending, AppliedMigration, Migration, MigrationTarget};
use mnemix_core::{MemoryError, Metadata, Result, Scope, Timestamp};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{to_sql_checked, FromSql, IsNull, ToSql, Type};
use tokio_postgres::{GenericClient, Row, RowStream, ToStatement};

pub(crate) const BACKEND: &str = "postgres";

/// The schema, oldest first. Never edit an entry once released: add a new one. `{schema}` in
/// the SQL is replaced by the configured schema, quoted.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../migrations/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "vector norms",
        sql: include_str!("../migrations/0002_vector_norms.sql"),
    },
    Migration {
        version: 3,
        name: "vector storage",
        sql: include_str!("../migrations/0003_vector_storage.sql"),
    },
    Migration {
        version: 4,
        name: "remember by index",
        sql: include_str!("../migrations/0004_remember_by_index.sql"),
    },
    Migration {
        version: 5,
        name: "vectors by collection",
        sql: include_str!("../migrations/0005_vectors_by_collection.sql"),
    },
    Migration {
        version: 6,
        name: "vector versions",
        sql: include_str!("../migrations/0006_vector_versions.sql"),
    },
    Migration {
        version: 7,
        name: "working memory by conversation",
        sql: include_str!("../migrations/0007_working_memory_by_conversation.sql"),
    },
    Migration {
        version: 8,
        name: "fact generations",
        sql: include_str!("../migrations/0008_fact_generations.sql"),
    },
    Migration {
        version: 9,
        name: "fact provenance",
        sql: include_str!("../migrations/0009_fact_provenance.sql"),
    },
];

/// Parameters of a statement.
pub(crate) type Params<'a> = [&'a (dyn ToSql + Sync)];

/// A connection or a transaction: statements are prepared once per connection and cached.
#[async_trait]
pub(crate) trait Db: Sync {
    async fn rows(&self, sql: &str, params: &Params<'_>) -> Result<Vec<Row>>;
    async fn exec(&self, sql: &str, params: &Params<'_>) -> Result<u64>;
    /// Runs SQL without preparing it (nor caching it): DDL whose text names one object, which
    /// would otherwise leave a cached statement per object on every connection.
    async fn batch(&self, sql: &str) -> Result<()>;

    async fn row(&self, sql: &str, params: &Params<'_>) -> Result<Option<Row>> {
        Ok(self.rows(sql, params).await?.into_iter().next())
    }
}

#[async_trait]
impl Db for deadpool_postgres::Object {
    async fn rows(&self, sql: &str, params: &Params<'_>) -> Result<Vec<Row>> {
        let statement = self.prepare_cached(sql).await.db()?;
        Ok(self.complete(&statement, params).await?.0)
    }
    async fn exec(&self, sql: &str, params: &Params<'_>) -> Result<u64> {
        let statement = self.prepare_cached(sql).await.db()?;
        Ok(self.complete(&statement, params).await?.1)
    }
    async fn batch(&self, sql: &str) -> Result<()> {
        self.batch_execute(sql).await.db()
    }
}

#[async_trait]
impl Db for deadpool_postgres::Transaction<'_> {
    async fn rows(&self, sql: &str, params: &Params<'_>) -> Result<Vec<Row>> {
        let statement = self.prepare_cached(sql).await.db()?;
        Ok(self.complete(&statement, params).await?.0)
    }
    async fn exec(&self, sql: &str, params: &Params<'_>) -> Result<u64> {
        let statement = self.prepare_cached(sql).await.db()?;
        Ok(self.complete(&statement, params).await?.1)
    }
    async fn batch(&self, sql: &str) -> Result<()> {
        self.batch_execute(sql).await.db()
    }
}

/// Statements whose answers are known to be whole. The server answers a statement with its
/// rows and then `CommandComplete`; the driver ends the answer at the `ReadyForQuery` that
/// follows the request's `Sync`. When the statement's own messages were lost on the way and
/// only the `Sync` arrived, the server never ran it, and the driver's `query` would answer no
/// rows and its `execute` 0 — a read that found nothing, a write that changed nothing. So
/// every statement goes through here: an answer without `CommandComplete` is `Unavailable`.
#[async_trait]
pub(crate) trait Complete {
    /// The statement's rows and the count its `CommandComplete` gave.
    async fn complete<T>(&self, statement: &T, params: &Params<'_>) -> Result<(Vec<Row>, u64)>
    where
        T: ?Sized + ToStatement + Sync + Send;
}

/// A client or a transaction (deadpool's wrappers reach theirs by `Deref`).
#[async_trait]
impl<C: GenericClient + Sync> Complete for C {
    async fn complete<T>(&self, statement: &T, params: &Params<'_>) -> Result<(Vec<Row>, u64)>
    where
        T: ?Sized + ToStatement + Sync + Send,
    {
        whole(self.query_raw(statement, raw(params)).await.db()?).await
    }
}

/// `params` as the driver's raw calls take them.
fn raw<'a>(params: &'a Params<'a>) -> impl ExactSizeIterator<Item = &'a dyn ToSql> {
    params.iter().map(|param| *param as &dyn ToSql)
}

async fn whole(stream: RowStream) -> Result<(Vec<Row>, u64)> {
    futures::pin_mut!(stream);
    let mut rows = Vec::new();
    while let Some(row) = stream.try_next().await.db()? {
        rows.push(row);
    }
    stream
        .rows_affected()
        .map(|count| (rows, count))
        .ok_or_else(|| MemoryError::Unavailable {
            backend: BACKEND,
            source: "the server's answer ended before its statement completed: the statement \
                     never reached it"
                .into(),
        })
}

/// A column of a staging table: its name, its SQL type and the driver type COPY encodes.
pub(crate) struct StagedColumn {
    pub(crate) name: &'static str,
    pub(crate) sql: &'static str,
    pub(crate) ty: Type,
}

/// Bulk writes go through binary `COPY` into a temporary table, dropped at commit, from which
/// one `INSERT … SELECT` applies them with the usual conflict rules (`COPY` alone cannot
/// upsert). The table is created per transaction and its statements are not cached: a bulk
/// write is rare next to the statements the cache is for.
pub(crate) async fn stage<const N: usize>(
    tx: &deadpool_postgres::Transaction<'_>,
    table: &str,
    columns: &[StagedColumn; N],
    rows: &[[&(dyn ToSql + Sync); N]],
) -> Result<()> {
    let definitions: Vec<String> = columns
        .iter()
        .map(|c| format!("{} {}", c.name, c.sql))
        .collect();
    tx.batch_execute(&format!(
        "CREATE TEMPORARY TABLE {table} ({}) ON COMMIT DROP",
        definitions.join(", ")
    ))
    .await
    .db()?;
    let sink = tx
        .copy_in(&format!("COPY {table} FROM STDIN (FORMAT binary)"))
        .await
        .db()?;
    let types: Vec<Type> = columns.iter().map(|c| c.ty.clone()).collect();
    let writer = BinaryCopyInWriter::new(sink, &types);
    futures::pin_mut!(writer);
    for row in rows {
        writer.as_mut().write(row).await.db()?;
    }
    writer.finish().await.db()?;
    Ok(())
}

/// `.db()?` turns a driver error into the contract's error kinds.
pub(crate) trait DbResult<T> {
    fn db(self) -> Result<T>;
}

impl<T> DbResult<T> for std::result::Result<T, tokio_postgres::Error> {
    fn db(self) -> Result<T> {
        self.map_err(to_memory_error)
    }
}

impl<T> DbResult<T> for std::result::Result<T, deadpool_postgres::PoolError> {
    fn db(self) -> Result<T> {
        self.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(e) => to_memory_error(e),
            other => MemoryError::Unavailable {
                backend: BACKEND,
                source: Box::new(other),
            },
        })
    }
}

/// Lost connections, serialization failures, deadlocks and shutdowns are worth retrying;
/// everything else is a backend error.
pub(crate) fn to_memory_error(e: tokio_postgres::Error) -> MemoryError {
    let retryable = e.is_closed()
        || match e.code() {
            Some(code) => {
                code == &SqlState::T_R_SERIALIZATION_FAILURE
                    || code == &SqlState::T_R_DEADLOCK_DETECTED
                    || code == &SqlState::ADMIN_SHUTDOWN
                    || code == &SqlState::CRASH_SHUTDOWN
                    || code == &SqlState::CANNOT_CONNECT_NOW
                    || code.code().starts_with("08")
            }
            // No SQLSTATE: the error came from the socket, not the server.
            None => true,
        };
    if retryable {
        MemoryError::Unavailable {
            backend: BACKEND,
            source: Box::new(e),
        }
    } else {
        MemoryError::Backend {
            backend: BACKEND,
            source: Box::new(e),
        }
    }
}

/// A stored value that does not decode: the database was edited by something else.
pub(crate) fn corrupt(what: &str, e: impl std::fmt::Display) -> MemoryError {
    MemoryError::corrupt(BACKEND, what, e)
}

/// The `subject` column of a scope: '' for the shared scope.
pub(crate) fn subject_of(scope: &Scope) -> &str {
    scope.subject().map_or("", |s| s.as_str())
}

pub(crate) fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).expect("model types serialize to JSON")
}

pub(crate) fn metadata_from(text: &str) -> Result<Metadata> {
    serde_json::from_str(text).map_err(|e| corrupt("metadata", e))
}

/// Free text is stored as UTF-8 `bytea` (PostgreSQL `text` rejects NUL).
pub(crate) fn text_from(bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes).map_err(|e| corrupt("text", e))
}

/// A vector as a statement parameter, encoded for the `embedding` column's type as the
/// statement reports it: pgvector's `vector`, or the f32 values little-endian in `bytea` where
/// the store does without pgvector (migration 0003). One statement text serves both.
#[derive(Debug)]
pub(crate) struct Embedding<'a>(pub(crate) &'a [f32]);

impl ToSql for Embedding<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        if *ty == Type::BYTEA {
            out.reserve(self.0.len() * 4);
            for x in self.0 {
                out.put_f32_le(*x);
            }
            Ok(IsNull::No)
        } else {
            pgvector::Vector::from(self.0.to_vec()).to_sql(ty, out)
        }
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::BYTEA || <pgvector::Vector as ToSql>::accepts(ty)
    }

    to_sql_checked!();
}

/// A stored vector, decoded from either type of the `embedding` column (see [`Embedding`]).
#[derive(Debug)]
pub(crate) struct StoredEmbedding(pub(crate) Vec<f32>);

impl<'a> FromSql<'a> for StoredEmbedding {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        if *ty != Type::BYTEA {
            return Ok(Self(pgvector::Vector::from_sql(ty, raw)?.into()));
        }
        if !raw.len().is_multiple_of(4) {
            return Err(format!("{} bytes are not a whole number of f32 values", raw.len()).into());
        }
        Ok(Self(
            raw.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        ))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::BYTEA || <pgvector::Vector as FromSql<'_>>::accepts(ty)
    }
}

/// The type of the vectors table's `embedding` column: pgvector's `vector` or `bytea`.
pub(crate) async fn embedding_type(client: &impl Db, table: &str) -> Result<Type> {
    let row = client
        .row(
            "SELECT t.oid, t.typname, n.nspname
             FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
                  JOIN pg_namespace n ON n.oid = t.typnamespace
             WHERE a.attrelid = to_regclass($1) AND a.attname = 'embedding'",
            &[&table],
        )
        .await?
        .ok_or_else(|| corrupt("schema", format!("{table} has no embedding column")))?;
    let (oid, name, schema): (u32, String, String) = (row.get(0), row.get(1), row.get(2));
    match name.as_str() {
        "bytea" => Ok(Type::BYTEA),
        "vector" => Ok(Type::new(
            name,
            oid,
            tokio_postgres::types::Kind::Simple,
            schema,
        )),
        other => Err(corrupt(
            "schema",
            format!("{table}.embedding is of type {other}, neither vector nor bytea"),
        )),
    }
}

pub(crate) fn millis(t: Timestamp) -> i64 {
    t.as_millis()
}

pub(crate) fn to_db(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(crate) fn from_db(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// The migration runner's view of the migrating transaction, in `schema`.
struct Ledger<'a> {
    tx: &'a deadpool_postgres::Transaction<'a>,
    schema: &'a str,
}

#[async_trait]
impl MigrationTarget for Ledger<'_> {
    async fn recorded(&mut self) -> Result<Vec<AppliedMigration>> {
        let schema = self.schema;
        Ok(self
            .tx
            .rows(
                &format!(
                    "SELECT version, checksum FROM {schema}.agent_memory_migrations ORDER BY version"
                ),
                &[],
            )
            .await?
            .iter()
            .map(|row| AppliedMigration {
                version: u32::try_from(row.get::<_, i32>(0)).unwrap_or(u32::MAX),
                checksum: row.get(1),
            })
            .collect())
    }

    async fn run(&mut self, migration: &Migration) -> Result<()> {
        self.tx
            .batch_execute(&migration.sql.replace("{schema}", self.schema))
            .await
            .db()
    }

    async fn record(
        &mut self,
        migration: &Migration,
        checksum: &str,
        applied_at: Timestamp,
    ) -> Result<()> {
        let schema = self.schema;
        self.tx
            .exec(
                &format!(
                    "INSERT INTO {schema}.agent_memory_migrations (version, name, checksum, applied_at)
                     VALUES ($1, $2, $3, $4)"
                ),
                &[
                    &i32::try_from(migration.version).unwrap_or(i32::MAX),
                    &migration.name,
                    &checksum,
                    &applied_at.as_millis(),
                ],
            )
            .await
            .map(drop)
    }
}

/// Applies the pending migrations of `known` in one transaction under an advisory lock keyed by
/// the schema, so several processes starting at once migrate exactly once; with `pgvector`,
/// creates the `vector` extension when the server has it (under a lock of the database's) and
/// tells the migrations to use it (`agent_memory.pgvector`, read by 0003). Returns the
/// versions applied.
pub(crate) async fn migrate(
    client: &mut deadpool_postgres::Object,
    schema: &str,
    known: &[Migration],
    pgvector: bool,
) -> Result<Vec<u32>> {
    let tx = client.transaction().await.db()?;
    tx.exec(
        "SELECT pg_advisory_xact_lock(hashtext('mnemix migrations ' || $1))",
        &[&schema],
    )
    .await?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE IF NOT EXISTS {schema}.agent_memory_migrations (
             version    integer PRIMARY KEY,
             name       text    NOT NULL,
             checksum   text    NOT NULL,
             applied_at bigint  NOT NULL
         )"
    ))
    .await
    .db()?;
    // A row when the server has pgvector, its installed_version null until it is created.
    let missing = tx
        .row(
            "SELECT installed_version FROM pg_available_extensions WHERE name = 'vector'",
            &[],
        )
        .await?
        .is_some_and(|row| row.get::<_, Option<String>>(0).is_none());
    tx.batch_execute(&format!(
        "SET LOCAL agent_memory.pgvector = {}",
        if pgvector { "on" } else { "off" }
    ))
    .await
    .db()?;
    if pgvector && missing {
        // The extension belongs to the database, not the schema: stores of two schemas opening
        // a fresh database at once would both insert it (a unique violation) without a lock of
        // the database's own. Read committed: after the wait, `IF NOT EXISTS` sees the winner's.
        tx.batch_execute(
            "SELECT pg_advisory_xact_lock(hashtext('mnemix create extension vector'));
             CREATE EXTENSION IF NOT EXISTS vector",
        )
        .await
        .db()?;
    }
    let applied = apply_pending(&mut Ledger { tx: &tx, schema }, known, BACKEND).await?;
    tx.commit().await.db()?;
    Ok(applied)
}
