//! Agent memory on PostgreSQL (+ pgvector): the production backend.
//!
//! Every contract of [`mnemix_core`] through deadpool-postgres and tokio-postgres, passing the
//! whole conformance suite.
//!
//! ```no_run
//! use mnemix_core::{AppendOptions, ConversationStore, LoadOptions, Message, NewConversation, Scope};
//! use mnemix_postgres::PostgresStore;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> mnemix_core::Result<()> {
//! let store = PostgresStore::builder()
//!     .url("postgres://postgres@127.0.0.1:5432/test")
//!     .schema("mnemix")
//!     .open()
//!     .await?;
//! let scope = Scope::for_subject("user-42")?;
//! let thread = store.create_conversation(&scope, NewConversation::default()).await?;
//! store.append(&scope, &thread.id, vec![Message::user("hi")], AppendOptions::default()).await?;
//! assert_eq!(store.load(&scope, &thread.id, LoadOptions::last(10)).await?.len(), 1);
//! # Ok(()) }
//! ```
//!
//! # Design
//! - **Schema.** All tables live in one schema (default `public`), validated
//!   (`^[a-z_][a-z0-9_]{0,62}$`) and quoted; nothing from a request is spliced into SQL.
//! - **Migrations** are embedded ([`MIGRATIONS`]) and applied on open in one transaction under
//!   `pg_advisory_xact_lock`, so processes starting together migrate exactly once; each is
//!   recorded with its SHA-256 in `agent_memory_migrations`. A newer or edited schema is
//!   refused. `CREATE EXTENSION IF NOT EXISTS vector` runs when the server has pgvector.
//! - **Appends** lock the conversation row (`FOR NO KEY UPDATE`, which foreign-key checks do
//!   not wait on), so concurrent writers to one
//!   conversation serialise there and seqs stay contiguous; the batch is one transaction, and a
//!   retry after a lost connection is safe because appends are idempotent by message id (the
//!   front layer, `mnemix_core::Checked`, retries `Unavailable` appends).
//! - **Free text** that may hold NUL (titles, fact text, working memory, vector text) is UTF-8
//!   `bytea`, because `text` and `jsonb` reject NUL; JSON documents are `text` (NUL is escaped
//!   there). Vector metadata is also kept as `jsonb` for SQL filters.
//! - **Recall with a vector** (semantic or hybrid) ranks every current fact of the subject:
//!   it holds them in the client per generation of the subject's facts (`fact_generations`,
//!   which statement triggers move with every write of them), and one statement reads the
//!   facts it ranked with the current generation; a generation moved meanwhile reads the
//!   subject's facts again. A remember's own change is applied to what it held. Ranking is
//!   core's ([`mnemix_core::adapter::HeldFacts`]).
//! - **Lexical recall** ranks the held facts too when the subject's are held; otherwise it
//!   reads candidates through a GIN index on each fact's core tokens (`text[]`, `&&`) and ranks
//!   them with [`mnemix_core::adapter::rank_facts`]: exactly the core definition either way.
//! - **Vectors** are pgvector's `vector` (without pgvector, or with
//!   [`PostgresStoreBuilder::pgvector`] off, the f32 values little-endian in `bytea`), each
//!   with its norm (computed in `f64` by the writer), kept inline in their rows. Each
//!   collection's rows are a partition of their own (`vectors_<pk>`, made with the collection),
//!   so a search reads no other collection's rows.
//! - **Held matrices**: an exact search of a scope smaller than `index_min_rows` whose vectors
//!   fit [`PostgresStoreBuilder::vector_cache_bytes`] ranks the scope's records held in the
//!   client. One statement reads the scope's version (`vector_versions`, which every vector
//!   write moves in its own transaction) and the records are read again, in one snapshot with
//!   their version, only when it changed; this store's own writes keep its matrices current.
//! - **Exact search** of a larger scope ranks the rows in the server with pgvector (cosine and
//!   Euclidean) and only the nearest come back, as many as it takes to hold every row that can
//!   reach the top `k` by the core's scores (pgvector's `float` sums and ours differ by a
//!   bounded rounding error; rows whose norms it cannot sum faithfully always come back).
//!   Dot-product collections, and stores without pgvector, are scanned in Rust over the rows
//!   the SQL filter keeps.
//! - **HNSW indexes**, one per collection on its partition, over `embedding::vector(dims)`
//!   (cosine, inner-product or L2 ops by metric), are made once a search finds one scope of the
//!   collection large ([`PostgresStoreBuilder::index_min_rows`], default
//!   [`DEFAULT_INDEX_MIN_ROWS`]; or at once with [`PostgresStore::build_vector_index`]), in
//!   the background and without blocking writers; until then writes maintain no index and
//!   searches are exact. Index searches use iterative scans so filters still return
//!   `min(k, matching)`; candidates are re-scored exactly in Rust, and a tie across the `k`-th
//!   place is settled by an exact scan so ties break by id as everywhere. pgvector indexes at
//!   most 2,000 dimensions: wider collections (up to the core's 16,000) get no index. Search is
//!   declared approximate; with [`PostgresStoreBuilder::vector_index`] off it is exact.
//! - **Filters** compile to parameterised SQL over `jsonb` with the core semantics; rows whose
//!   metadata holds NUL (which `jsonb` cannot store) are checked in Rust.
//! - **Bulk writes** (restore, and `upsert_vectors` of 64 records or more) go through binary
//!   `COPY` into a temporary table and one `INSERT … SELECT` with the usual conflict rules; a
//!   load that grows the vectors table by a fifth refreshes its planner statistics, so the
//!   HNSW index is used right away.

mod backend;
mod conversations;
mod db;
mod documents;
mod facts;
mod filter;
mod hnsw;
mod socket;
mod transfer;
mod vectors;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use mnemix_core::descriptor::{BoxOpen, Descriptor, OpenRequest};
use mnemix_core::{Clock, MemoryBackend, MemoryError, Result, SystemClock};
use tokio_postgres::NoTls;

pub use db::MIGRATIONS;

use crate::db::DbResult;

/// The rows of one scope an exact search compares before its collection gets an HNSW index
/// (see [`PostgresStoreBuilder::index_min_rows`]): pgvector ranks that many rows exactly in
/// about the time of an index search, and a collection of many small scopes never pays for an
/// index on every write, whose maintenance costs many times the row's own insert (BENCHMARKS.md,
/// W7 and W10).
pub const DEFAULT_INDEX_MIN_ROWS: usize = 10_000;

/// HNSW parameters of the per-collection pgvector indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hnsw {
    /// Links per node (pgvector default 16).
    pub m: u32,
    /// Candidate list size while building (pgvector default 64).
    pub ef_construction: u32,
    /// Candidate list size while searching (at least `k` is used).
    pub ef_search: u32,
}

impl Default for Hnsw {
    fn default() -> Self {
        Self {
            m: 16,
            ef_construction: 64,
            ef_search: 100,
        }
    }
}

/// How a [`PostgresStore`] is opened; its `Debug` hides the password.
#[derive(Clone)]
pub struct PostgresConfig {
    connection: Option<tokio_postgres::Config>,
    schema: String,
    max_connections: usize,
    hnsw: Hnsw,
    vector_index: bool,
    pgvector: bool,
    index_min_rows: usize,
    vector_cache_bytes: usize,
    timeout: Option<Duration>,
}

impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("PostgresConfig");
        if let Some(c) = &self.connection {
            let hosts: Vec<String> = c
                .get_hosts()
                .iter()
                .map(|h| match h {
                    tokio_postgres::config::Host::Tcp(h) => h.clone(),
                    tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
                })
                .collect();
            s.field("hosts", &hosts)
                .field("ports", &c.get_ports())
                .field("user", &c.get_user())
                .field("dbname", &c.get_dbname())
                .field(
                    "password",
                    &c.get_password().map_or("<none>", |_| "<hidden>"),
                );
        } else {
            s.field("connection", &"<existing pool>");
        }
        s.field("schema", &self.schema)
            .field("max_connections", &self.max_connections)
            .field("hnsw", &self.hnsw)
            .field("vector_index", &self.vector_index)
            .field("pgvector", &self.pgvector)
            .field("index_min_rows", &self.index_min_rows)
            .field("vector_cache_bytes", &self.vector_cache_bytes)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl PostgresConfig {
    /// The schema the tables live in.
    pub fn schema(&self) -> &str {
        &self.schema
    }
}

/// Builds a [`PostgresStore`]; see [`PostgresStore::builder`].
#[derive(Debug)]
pub struct PostgresStoreBuilder {
    config: PostgresConfig,
    pool: Option<Pool>,
    error: Option<String>,
    clock: Arc<dyn Clock>,
}

impl PostgresStoreBuilder {
    /// A `postgres://` URL (or `key=value` connection string). A `schema=NAME` query
    /// parameter sets [`schema`](Self::schema): `postgres://host/db?schema=mnemix`.
    #[must_use]
    pub fn url(mut self, url: &str) -> Self {
        let (url, schema) = mnemix_core::url::take_query_param(url, "schema");
        if let Some(schema) = schema {
            self.config.schema = schema;
        }
        match tokio_postgres::Config::from_str(&url) {
            Ok(config) => self.config.connection = Some(config),
            Err(e) => self.error = Some(format!("bad PostgreSQL URL: {e}")),
        }
        self
    }

    /// A tokio-postgres connection config.
    #[must_use]
    pub fn config(mut self, config: tokio_postgres::Config) -> Self {
        self.config.connection = Some(config);
        self
    }

    /// An existing deadpool pool (its size and settings are kept).
    #[must_use]
    pub fn pool(mut self, pool: Pool) -> Self {
        self.config.connection = None;
        self.pool = Some(pool);
        self
    }

    /// The schema for the tables (default `public`): `^[a-z_][a-z0-9_]{0,62}$`, created when
    /// missing.
    #[must_use]
    pub fn schema(mut self, schema: &str) -> Self {
        schema.clone_into(&mut self.config.schema);
        self
    }

    /// Pool size when the store makes the pool (default 16).
    #[must_use]
    pub fn max_connections(mut self, n: usize) -> Self {
        self.config.max_connections = n.max(1);
        self
    }

    /// How long a call waits on a silent server before it fails `Unavailable` (default
    /// [`mnemix_core::DEFAULT_SERVER_TIMEOUT`], 30 s; `None` waits as long as the socket stays
    /// open): connecting, and each answer the server owes — bytes written and none read back
    /// since. Any bytes either way start the wait again, so a long `COPY` or a reply that keeps
    /// coming never times out; a statement the server works on silently for longer does, and
    /// fails as a lost connection would. The connection is dropped and the front layer's retry
    /// policy applies. Background builds of vector indexes run on connections without it.
    /// Applies to the pool the store makes, not to one given with [`pool`](Self::pool).
    #[must_use]
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.config.timeout = timeout;
        self
    }

    /// HNSW parameters for collections created from now on (and `ef_search` for searches).
    #[must_use]
    pub fn hnsw(mut self, hnsw: Hnsw) -> Self {
        self.config.hnsw = hnsw;
        self
    }

    /// Whether to use pgvector HNSW indexes when the server has pgvector (default on). Off,
    /// search is exact (ranked by pgvector in the server) and declared exact.
    #[must_use]
    pub fn vector_index(mut self, on: bool) -> Self {
        self.config.vector_index = on;
        self
    }

    /// How many rows of one scope an exact search must compare before the collection gets its
    /// HNSW index (default [`DEFAULT_INDEX_MIN_ROWS`]). Until then the collection has no index:
    /// writes maintain none, and searches are exact, ranked by pgvector in the server, which up
    /// to that size is about as fast as the index. The first search past it builds the index in
    /// the background (`CREATE INDEX CONCURRENTLY`, one builder across processes), and searches
    /// use it once it is ready; [`PostgresStore::build_vector_index`] builds it at once, e.g.
    /// after a bulk load. `0` creates each collection's index with the collection, as before.
    #[must_use]
    pub fn index_min_rows(mut self, rows: usize) -> Self {
        self.config.index_min_rows = rows;
        self
    }

    /// Memory the held search matrices may take, texts included, before they are all let go
    /// (default 256 MiB; 0 holds none). An exact search of a scope smaller than
    /// [`index_min_rows`](Self::index_min_rows) whose vectors fit holds the scope's records in
    /// the client, and later searches read only the scope's version (every write of the scope
    /// changes it, in its transaction) and rank in memory until a write changes it; this
    /// store's own writes keep its matrices current. Recall holds subjects'
    /// current facts the same way, in a budget of the same size.
    #[must_use]
    pub fn vector_cache_bytes(mut self, bytes: usize) -> Self {
        self.config.vector_cache_bytes = bytes;
        self
    }

    /// Whether to use pgvector where the server has it (default on): the store creates the
    /// extension, a schema it creates stores vectors as pgvector's `vector`, and searches use
    /// HNSW indexes (see [`vector_index`](Self::vector_index)). Off, it never creates the
    /// extension, a schema it creates stores vectors as `bytea` (f32 little-endian), and search
    /// is an exact scan in Rust. A schema keeps the storage it was created with: one created
    /// without pgvector is searched in Rust even once the server has it (copy it into a fresh
    /// schema with `mnemix copy` to move it onto pgvector).
    #[must_use]
    pub fn pgvector(mut self, on: bool) -> Self {
        self.config.pgvector = on;
        self
    }

    /// The clock that decides "now" for timestamps, expiry and TTL (default: the system clock).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Connects, applies pending migrations and detects pgvector.
    pub async fn open(self) -> Result<PostgresStore> {
        if let Some(e) = self.error {
            return Err(MemoryError::invalid(e));
        }
        let config = self.config;
        let schema = quote_schema(&config.schema)?;
        // Index builds get connections of their own, without the timeout: `CREATE INDEX`
        // says nothing until it is done, which on a large collection takes minutes.
        let (pool, builds) = match (self.pool, &config.connection) {
            (Some(pool), _) => (pool.clone(), pool),
            (None, Some(connection)) => (
                make_pool(connection, config.max_connections, config.timeout)?,
                make_pool(connection, 2, None)?,
            ),
            (None, None) => {
                return Err(MemoryError::invalid(
                    "no PostgreSQL connection: give url(), config() or pool()",
                ))
            }
        };
        let mut client = pool.get().await.db()?;
        db::migrate(&mut client, &schema, MIGRATIONS, config.pgvector).await?;
        let embedding_type = db::embedding_type(&client, &format!("{schema}.vectors")).await?;
        // pgvector ranks and indexes only a schema whose vectors are its own type.
        let pgvector = config.pgvector && embedding_type != tokio_postgres::types::Type::BYTEA;
        drop(client);
        let seen_collections = Arc::new(vectors::SeenCollections::default());
        let index_builder = Arc::new(hnsw::IndexBuilder::new(
            builds,
            schema.clone(),
            config.hnsw,
            config.index_min_rows,
            Arc::clone(&seen_collections),
        ));
        let vector_cache = vectors::VectorCache::new(config.vector_cache_bytes);
        let held_facts = mnemix_core::adapter::held_facts_cache(config.vector_cache_bytes);
        Ok(PostgresStore {
            pool,
            clock: self.clock,
            index: pgvector && config.vector_index,
            pgvector,
            embedding_type,
            schema,
            config,
            vector_statistics: vectors::VectorStatistics::default(),
            vector_cache,
            held_facts,
            oversized: vectors::Oversized::default(),
            seen_collections,
            index_builder,
        })
    }
}

/// A pool of `size` connections to `connection`, each giving up on a server silent for
/// `timeout` (see [`PostgresStoreBuilder::timeout`]).
fn make_pool(
    connection: &tokio_postgres::Config,
    size: usize,
    timeout: Option<Duration>,
) -> Result<Pool> {
    let recycling = ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    };
    let manager = match timeout {
        Some(timeout) => {
            Manager::from_connect(connection.clone(), socket::Connector { timeout }, recycling)
        }
        None => Manager::from_config(connection.clone(), NoTls, recycling),
    };
    let connect = connection
        .get_connect_timeout()
        .copied()
        .or(timeout)
        .unwrap_or(mnemix_core::DEFAULT_SERVER_TIMEOUT);
    Pool::builder(manager)
        .max_size(size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(30)))
        .create_timeout(Some(connect))
        .build()
        .map_err(|e| MemoryError::invalid(format!("cannot build the pool: {e}")))
}

/// `^[a-z_][a-z0-9_]{0,62}$`, returned double-quoted for SQL.
fn quote_schema(schema: &str) -> Result<String> {
    let mut chars = schema.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && schema.len() <= 63;
    if !valid {
        return Err(MemoryError::invalid(format!(
            "schema {schema:?} must match ^[a-z_][a-z0-9_]{{0,62}}$"
        )));
    }
    Ok(format!("\"{schema}\""))
}

/// `postgres://`, `postgresql://` (`?schema=NAME`): how `mnemix::open` finds this backend.
pub const DESCRIPTOR: Descriptor = Descriptor::new(
    "postgres",
    &["postgres", "postgresql"],
    "postgres://",
    open_request,
);

fn open_request(request: OpenRequest) -> BoxOpen {
    Box::pin(async move {
        let store = PostgresStore::builder()
            .url(request.url())
            .timeout(request.timeout())
            .clock(Arc::clone(request.clock()))
            .open()
            .await?;
        Ok(Arc::new(store) as Arc<dyn MemoryBackend>)
    })
}

/// Every memory contract on one PostgreSQL database. Cheap to share behind an `Arc`.
pub struct PostgresStore {
    pool: Pool,
    clock: Arc<dyn Clock>,
    /// Whether searches use the pgvector HNSW indexes.
    index: bool,
    /// Whether the store uses pgvector (the schema's vectors are its type): exact searches
    /// rank in the server.
    pgvector: bool,
    /// The type of the vectors' `embedding` column (`vector`, or `bytea` without pgvector).
    embedding_type: tokio_postgres::types::Type,
    /// The schema, quoted.
    schema: String,
    config: PostgresConfig,
    vector_statistics: vectors::VectorStatistics,
    /// Scopes' matrices held for exact search, each at its scope's version.
    vector_cache: vectors::VectorCache,
    /// Subjects' current facts held for recall, each at its facts' generation.
    held_facts: mnemix_core::adapter::HeldFactsCache,
    /// Scopes last found too large to hold, each at the version it was counted at.
    oversized: vectors::Oversized,
    /// Collections as searches last looked them up, so a search needs no lookup first.
    seen_collections: Arc<vectors::SeenCollections>,
    /// Builds collections' HNSW indexes once searches need them.
    index_builder: Arc<hnsw::IndexBuilder>,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("config", &self.config)
            .field("hnsw_index", &self.index)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// A builder with the defaults: schema `public`, 16 connections, HNSW m=16,
    /// ef_construction=64, ef_search=100, the system clock.
    pub fn builder() -> PostgresStoreBuilder {
        PostgresStoreBuilder {
            config: PostgresConfig {
                connection: None,
                schema: "public".to_owned(),
                max_connections: 16,
                hnsw: Hnsw::default(),
                vector_index: true,
                pgvector: true,
                index_min_rows: DEFAULT_INDEX_MIN_ROWS,
                vector_cache_bytes: 256 << 20,
                timeout: Some(mnemix_core::DEFAULT_SERVER_TIMEOUT),
            },
            pool: None,
            error: None,
            clock: Arc::new(SystemClock),
        }
    }

    /// How the store was opened.
    pub fn config(&self) -> &PostgresConfig {
        &self.config
    }

    /// Whether searches use pgvector HNSW indexes (pgvector present and not turned off).
    pub fn uses_vector_index(&self) -> bool {
        self.index
    }

    /// The deadpool pool (for statements of your own beside the store's).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// `template` with `{s}` replaced by the quoted schema.
    fn sql(&self, template: &str) -> String {
        template.replace("{s}", &self.schema)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool.get().await.db()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_is_validated() {
        assert_eq!(quote_schema("mnemix").unwrap(), "\"mnemix\"");
        for bad in ["", "Upper", "with space", "x\"; DROP", "1abc"] {
            assert!(quote_schema(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn debug_hides_the_password() {
        let builder = PostgresStore::builder().url("postgres://ada:s3cret@db.example:5433/mem");
        let shown = format!("{:?}", builder.config);
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.contains("<hidden>") && shown.contains("db.example"),
            "{shown}"
        );
    }
}
