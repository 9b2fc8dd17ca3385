//! Agent memory on SQLite: the embedded default backend.
//!
//! Every contract of [`mnemix_core`] on one SQLite file through sqlx, passing the whole
//! conformance suite.
//!
//! ```
//! use mnemix_core::{AppendOptions, ConversationStore, LoadOptions, Message, NewConversation, Scope};
//! use mnemix_sqlite::SqliteStore;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> mnemix_core::Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! let store = SqliteStore::builder().path(dir.path().join("memory.db")).open().await?;
//! let scope = Scope::for_subject("user-42")?;
//! let thread = store.create_conversation(&scope, NewConversation::default()).await?;
//! store.append(&scope, &thread.id, vec![Message::user("hi")], AppendOptions::default()).await?;
//! assert_eq!(store.load(&scope, &thread.id, LoadOptions::last(10)).await?.len(), 1);
//! # Ok(()) }
//! ```
//!
//! # Design
//! - **One writer, several readers.** WAL lets readers run beside the single writer SQLite
//!   allows. Writes go through exactly one connection and every write transaction starts with
//!   `BEGIN IMMEDIATE`, so it holds the write lock before it reads: writers in other processes
//!   wait in the busy handler (`busy_timeout`), and no read-then-write transaction can fail to
//!   upgrade its lock. Reads use the reader connections and never block writes. The store holds
//!   its connections itself: sqlx's pool pings each connection it takes back, a second hop to
//!   its worker thread on every call.
//! - **Group commit.** Appends and remembers that arrive while another write is running share
//!   the next transaction, each answering with its own outcome (its receipt, its `Conflict`);
//!   the group's appends are decided together from one read and stored with one write.
//! - **Few statements.** Every statement string is a hop to sqlx's worker thread, so a hot path
//!   sends as few as its work allows: a read is one statement (its own snapshot); `BEGIN
//!   IMMEDIATE` rides in a group's first statement string and `COMMIT` in its last, so a lone
//!   append is two hops, its read and its write.
//! - **Durability.** `synchronous=NORMAL` (the default) survives a crash of the process; a
//!   power loss or OS crash may roll back the last transactions. [`Synchronous::Full`] makes every
//!   commit durable against that too, at the cost of an fsync per commit.
//! - **Migrations** are embedded ([`MIGRATIONS`]), applied on open under `BEGIN IMMEDIATE` and
//!   recorded with SHA-256 checksums in `agent_memory_migrations`. An older database is upgraded;
//!   a newer one, or one whose recorded migration differs from the embedded one, is refused.
//! - **Recall** reads from a token table (`fact_tokens`, the core tokens of every current fact)
//!   which query tokens each candidate holds, never its text, ranks the candidates with
//!   [`mnemix_core::adapter::rank_candidates`] (exactly the core definition), then reads only the
//!   facts that made the top, in the same read transaction. A lexical recall's candidates come
//!   back as one JSON value (sqlx hands rows one by one across threads: thousands of rows cost
//!   more than the query); a semantic or hybrid recall reads every admitted fact's embedding. The
//!   statements are the SQLite family's (`mnemix-sqlite-family`).
//! - **Vectors** are little-endian `f32` blobs. Search is an exact scan in Rust over a contiguous
//!   matrix ([`mnemix_core::adapter::ExactIndex`]) cached per collection and subject, and checked
//!   against the collection's `generation` (bumped by every write, from any process), so a
//!   cached matrix is never stale. The matrix holds whole records (texts too, counted in the
//!   cache's budget), so a search whose matrix is held is one statement, the collection's row,
//!   and its hits come from memory. A vector upsert or delete of this store applies itself to
//!   the written subject's matrix and moves the collection's other matrices to the new
//!   generation, so its next searches read no rows.
//! - **Linking.** This crate bundles SQLite through sqlx. libSQL bundles its own SQLite: the two
//!   cannot be linked into one binary, so no crate that links libSQL may depend on this one.

mod backend;
mod connections;
mod conversations;
mod db;
mod documents;
mod facts;
mod vectors;
mod writer;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use mnemix_core::adapter::HeldChange;
use mnemix_core::descriptor::{BoxOpen, Descriptor, OpenRequest};
use mnemix_core::migration::Migration;
use mnemix_core::{
    AppendReceipt, Clock, MemoryBackend, MemoryError, RememberOutcome, Result, SystemClock,
};
use mnemix_sqlite_family::builder::Options;
use mnemix_sqlite_family::conversations::AppendRequest;
use mnemix_sqlite_family::family::store::{Common, FamilyStore, OnFile, Remember};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{ConnectOptions, SqlitePool};

pub use db::MIGRATIONS;

use crate::connections::{Connections, Tx};
use crate::db::DbResult;

/// The file a builder given no path or URL opens.
pub const DEFAULT_PATH: &str = "./.mnemix/memory.db";

/// SQLite's `synchronous` setting for the database file (the SQLite family's one).
pub use mnemix_sqlite_family::Synchronous;

/// Where the database lives.
#[derive(Clone, PartialEq, Eq)]
enum Location {
    File(PathBuf),
    Memory,
    ExistingPool,
}

/// `sqlite://FILE`, `sqlite::memory:`: how `mnemix::open` finds this backend.
pub const DESCRIPTOR: Descriptor = Descriptor::new(
    "sqlite",
    &["sqlite"],
    "sqlite://FILE, sqlite::memory:",
    open_request,
);

fn open_request(request: OpenRequest) -> BoxOpen {
    Box::pin(async move {
        let store = SqliteStore::builder()
            .url(request.url())
            .create_if_missing(request.create_if_missing())
            .clock(Arc::clone(request.clock()))
            .open()
            .await?;
        Ok(Arc::new(store) as Arc<dyn MemoryBackend>)
    })
}

/// How a [`SqliteStore`] is opened; its `Debug` shows the path (there is nothing secret).
#[derive(Clone)]
pub struct SqliteConfig {
    location: Location,
    options: Options,
}

impl fmt::Debug for SqliteConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("SqliteConfig");
        match &self.location {
            Location::File(path) => s.field("path", path),
            Location::Memory => s.field("path", &":memory:"),
            Location::ExistingPool => s.field("path", &"<existing pool>"),
        };
        s.field("options", &self.options).finish()
    }
}

impl SqliteConfig {
    /// The database file, `None` in memory or on an existing pool.
    pub fn path(&self) -> Option<&Path> {
        match &self.location {
            Location::File(path) => Some(path),
            _ => None,
        }
    }
}

/// Builds a [`SqliteStore`]; see [`SqliteStore::builder`].
#[derive(Debug)]
pub struct SqliteStoreBuilder {
    config: SqliteConfig,
    pool: Option<SqlitePool>,
    url_error: Option<String>,
    clock: Arc<dyn Clock>,
    create_if_missing: bool,
}

impl SqliteStoreBuilder {
    mnemix_sqlite_family::family_builder_setters!(
        url = concat!(
            "A `sqlite://` URL: `sqlite://relative/file.db`, `sqlite:///absolute/file.db` or ",
            "`sqlite::memory:`."
        )
    );

    /// The connect options and size of an existing pool (kept as they are; writes still use
    /// `BEGIN IMMEDIATE`): the store opens its own connections with them, shared by reads and
    /// writes.
    #[must_use]
    pub fn pool(mut self, pool: SqlitePool) -> Self {
        self.config.location = Location::ExistingPool;
        self.pool = Some(pool);
        self
    }

    /// Opens the database and applies pending migrations.
    pub async fn open(self) -> Result<SqliteStore> {
        if let Some(e) = self.url_error {
            return Err(MemoryError::invalid(e));
        }
        let config = self.config;
        let (writer, reader) = match (&config.location, self.pool) {
            (Location::ExistingPool, Some(pool)) => {
                // The pool's own options and size; reads and writes share the connections.
                let options = (*pool.connect_options()).clone();
                let size = pool.options().get_max_connections().max(1);
                let connections = Connections::open(options, size).await?;
                (connections.clone(), connections)
            }
            (Location::Memory, _) => {
                // One connection, kept open: an in-memory database lives and dies with it.
                let options = connect_options(&config, SqliteConnectOptions::new());
                let connections = Connections::open(options, 1).await?;
                (connections.clone(), connections)
            }
            (Location::File(path), _) => {
                if !self.create_if_missing && !path.exists() {
                    return Err(MemoryError::not_found(
                        "SQLite database",
                        path.display().to_string(),
                    ));
                }
                if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(parent).map_err(|e| MemoryError::Backend {
                        backend: db::BACKEND,
                        source: format!("cannot create {}: {e}", parent.display()).into(),
                    })?;
                }
                let options = connect_options(
                    &config,
                    SqliteConnectOptions::new()
                        .filename(path)
                        .create_if_missing(true),
                );
                let writer = Connections::open(options.clone(), 1).await?;
                let readers = u32::try_from(config.options.readers).unwrap_or(u32::MAX);
                let reader = Connections::open(options, readers).await?;
                (writer, reader)
            }
            (Location::ExistingPool, None) => unreachable!("pool() sets both"),
        };
        db::migrate(&mut *writer.acquire().await?, MIGRATIONS).await?;
        Ok(SqliteStore {
            writer: writer::Writer::new(writer),
            reader,
            common: Common::new(self.clock, config.options.vector_cache_bytes),
            config,
        })
    }
}

fn connect_options(config: &SqliteConfig, options: SqliteConnectOptions) -> SqliteConnectOptions {
    options
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(match config.options.synchronous {
            Synchronous::Normal => SqliteSynchronous::Normal,
            Synchronous::Full => SqliteSynchronous::Full,
        })
        .busy_timeout(config.options.busy_timeout)
        .foreign_keys(true)
}

fn parse_url(url: &str) -> std::result::Result<Location, String> {
    let rest = url
        .strip_prefix("sqlite:")
        .ok_or_else(|| format!("not a sqlite URL: {url:?} (expected sqlite://path)"))?;
    if rest == ":memory:" || rest == "//:memory:" {
        return Ok(Location::Memory);
    }
    let path = rest.strip_prefix("//").unwrap_or(rest);
    if let Some((_, query)) = path.split_once('?') {
        return Err(format!(
            "sqlite URL {url:?}: options ({query}) are not read; give the file's path alone"
        ));
    }
    if path.is_empty() {
        return Err(format!("sqlite URL {url:?} names no file"));
    }
    // Validate the way sqlx would read it, so a malformed URL fails here and not at connect.
    SqliteConnectOptions::from_str(url).map_err(|e| format!("bad sqlite URL {url:?}: {e}"))?;
    Ok(Location::File(PathBuf::from(path)))
}

/// Every memory contract on one SQLite database. Cheap to share behind an `Arc`.
pub struct SqliteStore {
    writer: writer::Writer,
    reader: Connections,
    config: SqliteConfig,
    /// The clock, and what the store holds for searches.
    common: Common,
}

impl SqliteStore {
    /// A builder with the defaults: WAL, `synchronous=NORMAL`, 5 s busy timeout, the system
    /// clock, and the file [`DEFAULT_PATH`] unless another location is given.
    pub fn builder() -> SqliteStoreBuilder {
        SqliteStoreBuilder {
            config: SqliteConfig {
                location: Location::File(PathBuf::from(DEFAULT_PATH)),
                options: Options::default(),
            },
            pool: None,
            url_error: None,
            clock: Arc::new(SystemClock),
            create_if_missing: true,
        }
    }

    /// How the store was opened.
    pub fn config(&self) -> &SqliteConfig {
        &self.config
    }

    /// Closes the store's connections, waiting for those in use.
    pub async fn close(&self) {
        self.writer.connections().close().await;
        self.reader.close().await;
    }

    /// A write transaction holding the write lock from its first statement.
    async fn write(&self) -> Result<Tx> {
        Tx::begin(
            self.writer.connections().acquire().await?,
            "BEGIN IMMEDIATE",
        )
        .await
    }

    /// A read transaction: one snapshot for every statement in it.
    async fn read(&self) -> Result<Tx> {
        Tx::begin(self.reader.acquire().await?, "BEGIN").await
    }
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The store as the SQLite family's contracts written once take it: reads on a reader and
/// single-statement writes on the writer, neither in a transaction unless the family's first
/// statement begins one; a remember in the write group.
impl FamilyStore for SqliteStore {
    type Lent<'s> = Tx;

    async fn reader(&self) -> Result<Tx> {
        Ok(Tx::lent(self.reader.acquire().await?))
    }

    async fn writer(&self) -> Result<Tx> {
        Ok(Tx::lent(self.writer.connections().acquire().await?))
    }

    async fn transaction(&self) -> Result<Tx> {
        self.write().await
    }

    async fn snapshot(&self) -> Result<Tx> {
        self.read().await
    }

    fn common(&self) -> &Common {
        &self.common
    }

    async fn remember_in_group(&self, remember: Remember) -> Result<(RememberOutcome, HeldChange)> {
        self.writer
            .write(move |tx| Box::pin(remember.run(tx)))
            .await
    }

    async fn append_in_group(&self, request: AppendRequest) -> Result<AppendReceipt> {
        self.writer.append(request).await
    }
}

impl OnFile for SqliteStore {
    const MIGRATIONS: &'static [Migration] = MIGRATIONS;

    async fn open_file(path: &Path) -> Result<Self> {
        Self::builder().path(path).open().await
    }

    async fn open_url(url: &str) -> Result<Self> {
        Self::builder().url(url).open().await
    }

    fn file(&self) -> Option<&Path> {
        self.config.path()
    }

    async fn migrate_file_with(path: &Path, migrations: &[Migration]) -> Result<Vec<u32>> {
        let mut conn = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .connect()
            .await
            .db()?;
        let applied = db::migrate(&mut conn, migrations).await;
        let _ = sqlx::Connection::close(conn).await;
        applied
    }
}
