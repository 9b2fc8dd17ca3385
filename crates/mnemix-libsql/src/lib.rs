//! Agent memory on libSQL: SQLite with a native vector index, embedded or remote.
//!
//! Every contract of [`mnemix_core`] on one libSQL database, passing the whole conformance
//! suite, with vector search through libSQL's DiskANN index.
//!
//! ```
//! use mnemix_core::{AppendOptions, ConversationStore, LoadOptions, Message, NewConversation, Scope};
//! use mnemix_libsql::LibsqlStore;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> mnemix_core::Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! let store = LibsqlStore::builder().path(dir.path().join("memory.db")).open().await?;
//! let scope = Scope::for_subject("user-42")?;
//! let thread = store.create_conversation(&scope, NewConversation::default()).await?;
//! store.append(&scope, &thread.id, vec![Message::user("hi")], AppendOptions::default()).await?;
//! assert_eq!(store.load(&scope, &thread.id, LoadOptions::last(10)).await?.len(), 1);
//! # Ok(()) }
//! ```
//!
//! # Design
//! - **One writer, a pool of readers.** A file database runs in WAL mode: writes go through one
//!   connection behind an async mutex and every write transaction starts with
//!   `BEGIN IMMEDIATE`, so it holds the write lock before it reads; concurrent writers in this
//!   process queue on the mutex, writers in other processes wait in the busy handler
//!   (`busy_timeout`). Appends that arrive while another write holds the connection share one
//!   transaction (group commit), each with its own receipt or error. Reads take a connection
//!   of their own and never block writes. An in-memory or remote database has one connection,
//!   shared by reads and writes. Each local connection keeps its statements prepared (libsql
//!   has no statement cache, and compiling a statement costs as much as running it).
//! - **Vectors.** Each collection's vectors live in a table of their own whose column is
//!   `F32_BLOB(dims)`, with a DiskANN index (`libsql_vector_idx`, cosine or l2, neighbours
//!   compressed to 8-bit floats) for cosine and Euclidean collections. A search asks the index
//!   (`vector_top_k`) for more candidates than `k` — scaled by how small a part of the
//!   collection the caller's scope is — keeps those in the scope and matching the filter, and
//!   re-ranks them exactly in Rust ([`mnemix_core::adapter::TopK`]), so scores equal the
//!   exact ones. When fewer than `k` candidates survive, it asks again for four times as many;
//!   past [`MAX_INDEX_CANDIDATES`] it scans the scope exactly. So scope and filter always hold
//!   and at least `min(k, matching)` hits come back. Capabilities declare
//!   `Approximate(DiskAnn)`. A write of many vectors (an upsert or a restore of 16 or more)
//!   widens the writer's page cache to 256 MiB until it commits: each DiskANN insert rewrites
//!   its neighbours' ~25 KB blocks, which SQLite's default 2 MB cache would evict and read
//!   back within the batch (BENCHMARKS.md, W7).
//! - **Small scopes are scanned.** Below [`DEFAULT_INDEX_MIN_ROWS`] vectors in the caller's
//!   scope (tunable with [`LibsqlStoreBuilder::index_min_rows`]), and always for dot-product
//!   collections (DiskANN has no such metric), a search scans the scope exactly: up to a few
//!   thousand rows that is as fast as one index query (the `measure-libsql` example), with
//!   perfect recall. The scanned scope's records are read once into a matrix
//!   ([`mnemix_core::adapter::MatrixCache`], within
//!   [`vector_cache_bytes`](LibsqlStoreBuilder::vector_cache_bytes)) held at the collection's
//!   `generation`, which every transaction that writes its vectors bumps, from any process; a
//!   search whose matrix is at the generation it reads sends that one statement. A write
//!   through this store updates its own subject's held matrix and carries the collection's other
//!   subjects' to the new generation, so an agent's turn never reads its scope again. A scope
//!   too large for the budget streams instead: ranked as the rows arrive, keeping only the best
//!   `k`, and reading a row's id and metadata only when its score could enter them.
//! - **Free text is stored as BLOB.** libsql's Rust driver reads TEXT through a C string, which
//!   would cut text at its first NUL; titles, fact text, working memory and vector text are
//!   bound and stored as bytes, and every column is decoded without panicking.
//! - **Durability.** Like SQLite: `synchronous=NORMAL` (the default) survives a crash of the
//!   process; [`Synchronous::Full`] survives power loss too, at an fsync per commit.
//! - **Migrations** are embedded ([`MIGRATIONS`]), applied on open under `BEGIN IMMEDIATE` and
//!   recorded with SHA-256 checksums in `agent_memory_migrations`.
//! - **One store with SQLite.** The schema, its migrations, every statement the two stores send
//!   alike (fact recall through the token index among them, which never reads a fact's text to
//!   rank it) and the contracts around them live once in `mnemix-sqlite-family`, over this
//!   crate's connection; what is this crate's own is the connection, its group of appends and
//!   the vectors' tables with their search.
//! - **Calls block briefly.** libSQL's embedded engine runs a statement on the calling thread;
//!   like any embedded SQLite, use a multi-threaded Tokio runtime.
//!
//! # Remote databases
//! With the feature `remote`, `LibsqlStoreBuilder::remote` (or a `libsql://`, `http://` or
//! `https://` URL) talks to a libSQL server (sqld, Turso) over its HTTP protocol; the auth token
//! never appears in `Debug` output. The conformance suite runs against a server only when
//! `MNEMIX_TEST_LIBSQL_URL` (and `MNEMIX_TEST_LIBSQL_AUTH_TOKEN` if it needs one) is set:
//! there is no server on the project's CI machines, so remote mode is built there but not
//! tested, and the suite reports that as a named skip.
//!
//! # Linking
//! libSQL bundles its own SQLite. It cannot be linked into one binary with sqlx's bundled
//! SQLite or rusqlite (duplicate `sqlite3_*` symbols), so this crate depends on neither, and a
//! program uses either `mnemix-sqlite` or `mnemix-libsql`, never both.

mod backend;
mod conversations;
mod db;
mod documents;
mod facts;
mod lent;
mod vectors;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex as SyncMutex, PoisonError};

use libsql::{Database, TransactionBehavior};
use mnemix_core::adapter::HeldChange;
use mnemix_core::descriptor::{BoxOpen, Descriptor, OpenRequest};
use mnemix_core::migration::Migration;
use mnemix_core::{
    AppendReceipt, Clock, MemoryBackend, MemoryError, RememberOutcome, Result, SystemClock,
};
use mnemix_sqlite_family::builder::Options;
use mnemix_sqlite_family::conversations::AppendRequest;
use mnemix_sqlite_family::family::store::{Common, FamilyStore, OnFile, Remember};
use tokio::sync::{Mutex, Semaphore};

pub use db::MIGRATIONS;
pub use vectors::MAX_INDEX_CANDIDATES;

use crate::db::{Conn, DbResult};
use crate::lent::{ReaderLease, Readers, Tx};

/// The file a builder given no path or URL opens.
pub const DEFAULT_PATH: &str = "./.mnemix/mnemix-libsql.db";

/// Below this many vectors in the caller's scope, a search scans them exactly: measured faster
/// than a DiskANN query there (see the crate docs and `measure-libsql`).
pub const DEFAULT_INDEX_MIN_ROWS: usize = 2_000;

/// Vectors a write must hold for the writer's page cache to be widened while it runs: each
/// DiskANN insert can rewrite dozens of its neighbours' ~25 KB blocks, so a few inserts
/// outgrow SQLite's default cache, and the two `PRAGMA`s cost microseconds against
/// milliseconds per insert.
const BULK_VECTORS: usize = 16;

/// SQLite's `synchronous` setting for the database file (the SQLite family's one).
pub use mnemix_sqlite_family::Synchronous;

/// Where the database lives.
#[derive(Clone, PartialEq, Eq)]
enum Location {
    File(PathBuf),
    Memory,
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    Remote {
        url: String,
        auth_token: String,
    },
}

/// How a [`LibsqlStore`] is opened; its `Debug` hides a remote auth token.
#[derive(Clone)]
pub struct LibsqlConfig {
    location: Location,
    options: Options,
    index_min_rows: usize,
}

impl fmt::Debug for LibsqlConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("LibsqlConfig");
        match &self.location {
            Location::File(path) => s.field("path", path),
            Location::Memory => s.field("path", &":memory:"),
            Location::Remote { url, auth_token } => s.field("url", url).field(
                "auth_token",
                &if auth_token.is_empty() { "" } else { "***" },
            ),
        };
        s.field("options", &self.options)
            .field("index_min_rows", &self.index_min_rows)
            .finish()
    }
}

impl LibsqlConfig {
    /// The database file, `None` in memory or remote.
    pub fn path(&self) -> Option<&Path> {
        match &self.location {
            Location::File(path) => Some(path),
            _ => None,
        }
    }

    /// Whether the database is a remote server's.
    pub fn is_remote(&self) -> bool {
        matches!(self.location, Location::Remote { .. })
    }
}

/// Builds a [`LibsqlStore`]; see [`LibsqlStore::builder`].
#[derive(Debug)]
pub struct LibsqlStoreBuilder {
    config: LibsqlConfig,
    url_error: Option<String>,
    clock: Arc<dyn Clock>,
    create_if_missing: bool,
}

impl LibsqlStoreBuilder {
    mnemix_sqlite_family::family_builder_setters!(
        url = concat!(
            "A URL: `file:relative/file.db`, `file:///absolute/file.db`, `:memory:`, or (feature ",
            "`remote`) `libsql://…`, `http://…`, `https://…` with the token from ",
            "[`auth_token`](Self::auth_token)."
        )
    );

    /// A remote libSQL server (sqld, Turso) at `url` with an auth token (empty for none).
    #[cfg(feature = "remote")]
    #[must_use]
    pub fn remote(mut self, url: impl Into<String>, auth_token: impl Into<String>) -> Self {
        self.config.location = Location::Remote {
            url: url.into(),
            auth_token: auth_token.into(),
        };
        self
    }

    /// The auth token of a remote URL given to [`url`](Self::url); ignored otherwise.
    #[must_use]
    pub fn auth_token(mut self, token: impl Into<String>) -> Self {
        if let Location::Remote { auth_token, .. } = &mut self.config.location {
            *auth_token = token.into();
        }
        self
    }

    /// Searches whose scope holds fewer vectors than this scan them exactly instead of asking
    /// the DiskANN index (default [`DEFAULT_INDEX_MIN_ROWS`]; 0 always uses the index;
    /// `usize::MAX` never does, and the store then declares exact vector search).
    #[must_use]
    pub fn index_min_rows(mut self, rows: usize) -> Self {
        self.config.index_min_rows = rows;
        self
    }

    /// Opens the database and applies pending migrations.
    pub async fn open(self) -> Result<LibsqlStore> {
        if let Some(e) = self.url_error {
            return Err(MemoryError::invalid(e));
        }
        let config = self.config;
        let (database, shared) = match &config.location {
            Location::Memory => (
                libsql::Builder::new_local(":memory:").build().await.db()?,
                true,
            ),
            Location::File(path) => {
                if !self.create_if_missing && !path.exists() {
                    return Err(MemoryError::not_found(
                        "libSQL database",
                        path.display().to_string(),
                    ));
                }
                if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(parent).map_err(|e| MemoryError::Backend {
                        backend: db::BACKEND,
                        source: format!("cannot create {}: {e}", parent.display()).into(),
                    })?;
                }
                (libsql::Builder::new_local(path).build().await.db()?, false)
            }
            Location::Remote { url, auth_token } => (open_remote(url, auth_token).await?, true),
        };
        let writer = connect(&database, &config).await?;
        db::migrate(&writer, MIGRATIONS).await?;
        Ok(LibsqlStore {
            readers: (!shared).then(|| Readers {
                idle: SyncMutex::new(Vec::new()),
                permits: Arc::new(Semaphore::new(config.options.readers)),
            }),
            writer: Arc::new(Mutex::new(writer)),
            appends: mnemix_sqlite_family::group::WriteQueue::default(),
            common: Common::new(self.clock, config.options.vector_cache_bytes),
            database,
            config,
        })
    }
}

#[cfg(feature = "remote")]
async fn open_remote(url: &str, auth_token: &str) -> Result<Database> {
    libsql::Builder::new_remote(url.to_owned(), auth_token.to_owned())
        .build()
        .await
        .db()
}

#[cfg(not(feature = "remote"))]
#[allow(clippy::unused_async)] // the same signature as the remote build's
async fn open_remote(url: &str, _auth_token: &str) -> Result<Database> {
    Err(MemoryError::invalid(format!(
        "{url:?} is a remote libSQL database: build mnemix-libsql with the `remote` feature"
    )))
}

/// A new connection with the store's settings (a file's pragmas; nothing for a remote one).
async fn connect(database: &Database, config: &LibsqlConfig) -> Result<Conn> {
    let conn = Conn::new(database.connect().db()?, config.is_remote());
    if config.is_remote() {
        return Ok(conn);
    }
    conn.busy_timeout(config.options.busy_timeout).db()?;
    let synchronous = config.options.synchronous.pragma_value();
    // `journal_mode` answers with a row, so it is a query; an in-memory database keeps "memory".
    db::rows(&conn, "PRAGMA journal_mode = WAL", ()).await?;
    conn.execute_batch(&format!(
        "PRAGMA foreign_keys = ON; PRAGMA synchronous = {synchronous};"
    ))
    .await
    .db()?;
    Ok(conn)
}

fn parse_url(url: &str) -> std::result::Result<Location, String> {
    let url = url.trim();
    if url == ":memory:" || url == "file::memory:" || url == "libsql::memory:" {
        return Ok(Location::Memory);
    }
    if url.starts_with("libsql://") || url.starts_with("http://") || url.starts_with("https://") {
        return Ok(Location::Remote {
            url: url.to_owned(),
            auth_token: String::new(),
        });
    }
    let rest = url.strip_prefix("file:").ok_or_else(|| {
        format!("not a libSQL URL: {url:?} (expected file:path, :memory: or libsql://host)")
    })?;
    let path = rest.strip_prefix("//").unwrap_or(rest);
    if path.is_empty() || path.contains('?') {
        return Err(format!(
            "libSQL URL {url:?} names no plain file (no query parameters are read)"
        ));
    }
    Ok(Location::File(PathBuf::from(path)))
}

/// The environment variable a remote database's auth token comes from when the request to
/// open it carries none.
pub const AUTH_TOKEN_ENV: &str = "MNEMIX_LIBSQL_AUTH_TOKEN";

/// `file:PATH`, `libsql::memory:`, `libsql://…`, `http(s)://…`: how `mnemix::open` finds this
/// backend.
pub const DESCRIPTOR: Descriptor = Descriptor::new(
    "libsql",
    &["libsql", "file", "http", "https"],
    "file:FILE, libsql::memory:, libsql://",
    open_request,
);

fn open_request(request: OpenRequest) -> BoxOpen {
    Box::pin(async move {
        let token = request
            .auth_token()
            .map(str::to_owned)
            .or_else(|| std::env::var(AUTH_TOKEN_ENV).ok())
            .unwrap_or_default();
        let store = LibsqlStore::builder()
            .url(request.url())
            .create_if_missing(request.create_if_missing())
            .auth_token(token)
            .clock(Arc::clone(request.clock()))
            .open()
            .await?;
        Ok(Arc::new(store) as Arc<dyn MemoryBackend>)
    })
}

/// Every memory contract on one libSQL database. Cheap to share behind an `Arc`.
pub struct LibsqlStore {
    database: Database,
    writer: Arc<Mutex<Conn>>,
    /// Appends waiting for the writer connection, written together by whoever gets it.
    appends: mnemix_sqlite_family::group::WriteQueue<conversations::QueuedAppend>,
    /// `None`: reads share the writer's connection (in memory, remote).
    readers: Option<Readers>,
    /// The clock, and what the store holds for searches.
    common: Common,
    config: LibsqlConfig,
}

impl LibsqlStore {
    /// A builder with the defaults: WAL, `synchronous=NORMAL`, 5 s busy timeout, the system
    /// clock, and the file [`DEFAULT_PATH`] unless another location is given.
    pub fn builder() -> LibsqlStoreBuilder {
        LibsqlStoreBuilder {
            config: LibsqlConfig {
                location: Location::File(PathBuf::from(DEFAULT_PATH)),
                options: Options::default(),
                index_min_rows: DEFAULT_INDEX_MIN_ROWS,
            },
            url_error: None,
            clock: Arc::new(SystemClock),
            create_if_missing: true,
        }
    }

    /// How the store was opened.
    pub fn config(&self) -> &LibsqlConfig {
        &self.config
    }

    /// A write transaction holding the write lock from its first statement.
    async fn write(&self) -> Result<Tx<'_>> {
        let mut writer = Arc::clone(&self.writer).lock_owned().await;
        // A bulk write that failed before its commit left the cache widened.
        writer.narrow_cache().await?;
        let tx = writer
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .await
            .db()?;
        Ok(Tx {
            transaction: tx,
            writer: Some(writer),
            reader: None,
        })
    }

    /// A read transaction: one snapshot for every statement in it.
    async fn read(&self) -> Result<Tx<'_>> {
        let Some(readers) = &self.readers else {
            let writer = Arc::clone(&self.writer).lock_owned().await;
            let tx = writer
                .transaction_with_behavior(TransactionBehavior::Deferred)
                .await
                .db()?;
            return Ok(Tx {
                transaction: tx,
                writer: Some(writer),
                reader: None,
            });
        };
        let permit = Arc::clone(&readers.permits)
            .acquire_owned()
            .await
            .map_err(|e| MemoryError::Unavailable {
                backend: db::BACKEND,
                source: Box::new(e),
            })?;
        let idle = readers
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let conn = match idle {
            Some(conn) => conn,
            None => connect(&self.database, &self.config).await?,
        };
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .await
            .db()?;
        Ok(Tx {
            transaction: tx,
            writer: None,
            reader: Some(ReaderLease {
                conn: Some(conn),
                readers,
                _permit: permit,
            }),
        })
    }
}

impl fmt::Debug for LibsqlStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LibsqlStore")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The store as the SQLite family's contracts written once take it: every call in a read or
/// write transaction of its own, a remember too.
impl FamilyStore for LibsqlStore {
    type Lent<'s> = Tx<'s>;

    async fn reader(&self) -> Result<Tx<'_>> {
        self.read().await
    }

    async fn writer(&self) -> Result<Tx<'_>> {
        self.write().await
    }

    async fn transaction(&self) -> Result<Tx<'_>> {
        self.write().await
    }

    async fn snapshot(&self) -> Result<Tx<'_>> {
        self.read().await
    }

    fn common(&self) -> &Common {
        &self.common
    }

    async fn remember_in_group(&self, remember: Remember) -> Result<(RememberOutcome, HeldChange)> {
        let mut tx = self.write().await?;
        let remembered = remember.run(&mut tx).await?;
        tx.commit().await?;
        Ok(remembered)
    }

    async fn append_in_group(&self, request: AppendRequest) -> Result<AppendReceipt> {
        self.append_grouped(request).await
    }
}

impl OnFile for LibsqlStore {
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
        let database = libsql::Builder::new_local(path).build().await.db()?;
        let conn = Conn::new(database.connect().db()?, false);
        db::migrate(&conn, migrations).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::RowExt;

    async fn cache_kib(conn: &Conn) -> i64 {
        let size = db::row(conn, "PRAGMA cache_size", ()).await.unwrap();
        -size.unwrap().int(0).unwrap()
    }

    #[tokio::test]
    async fn a_bulk_write_widens_the_writers_cache_only_until_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let store = LibsqlStore::builder()
            .path(dir.path().join("cache.db"))
            .open()
            .await
            .unwrap();
        let narrow = i64::from(db::CACHE_KIB);
        let wide = i64::from(db::WIDE_CACHE_KIB);

        let mut small = store.write().await.unwrap();
        small.widen_cache_for(BULK_VECTORS - 1).await.unwrap();
        assert_eq!(
            cache_kib(&small).await,
            narrow,
            "a small write keeps the cache"
        );
        small.commit().await.unwrap();

        let mut committed = store.write().await.unwrap();
        committed.widen_cache_for(BULK_VECTORS).await.unwrap();
        assert_eq!(cache_kib(&committed).await, wide);
        committed.commit().await.unwrap();
        assert_eq!(cache_kib(&*store.writer.lock().await).await, narrow);

        let mut rolled_back = store.write().await.unwrap();
        rolled_back.widen_cache_for(BULK_VECTORS).await.unwrap();
        drop(rolled_back);
        assert_eq!(cache_kib(&*store.writer.lock().await).await, wide);
        let next = store.write().await.unwrap();
        assert_eq!(cache_kib(&next).await, narrow, "the next write narrows it");

        let read = store.read().await.unwrap();
        assert_eq!(cache_kib(&read).await, narrow, "readers keep the default");
    }

    /// Swaps two vectors' rows behind the store's back: the table changes, the generation not.
    async fn swap_behind_the_store(store: &LibsqlStore, table: &str) {
        use mnemix_core::adapter::encode_f32_le;
        let tx = store.write().await.unwrap();
        for (id, vector) in [("a", [0.0, 1.0]), ("b", [1.0, 0.0])] {
            let sql = format!("UPDATE {table} SET vector = ?1 WHERE id = ?2");
            let blob = libsql::Value::Blob(encode_f32_le(&vector));
            db::execute(&tx, &sql, (blob, id)).await.unwrap();
        }
        tx.commit().await.unwrap();
    }

    async fn bump_behind_the_store(store: &LibsqlStore) {
        let tx = store.write().await.unwrap();
        let sql = "UPDATE collections SET generation = generation + 1";
        db::execute(&tx, sql, ()).await.unwrap();
        tx.commit().await.unwrap();
    }

    /// The id nearest to `[1, 0]` in the scope's `notes`.
    async fn nearest(store: &LibsqlStore, scope: &mnemix_core::Scope) -> String {
        use mnemix_core::{VectorQuery, VectorStore};
        let query = VectorQuery::new(vec![1.0, 0.0], 1);
        let hits = store.search(scope, "notes", query).await.unwrap();
        hits[0].record.id.to_string()
    }

    #[tokio::test]
    async fn a_scanned_scope_is_read_once_per_generation_and_kept_current_by_its_writer() {
        use mnemix_core::{CollectionSpec, Scope, VectorId, VectorRecord, VectorStore};
        let record = |id: &str, vector: [f32; 2]| {
            VectorRecord::new(VectorId::new(id).unwrap(), vector.to_vec())
        };
        for held in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let store = LibsqlStore::builder()
                .path(dir.path().join("held.db"))
                .vector_cache_bytes(if held { 1 << 20 } else { 0 })
                .open()
                .await
                .unwrap();
            let scope = &Scope::for_subject("ada").unwrap();
            let spec = CollectionSpec::new("notes", 2, "test-model");
            store
                .ensure_collection(scope.namespace(), spec)
                .await
                .unwrap();
            let records = vec![record("a", [1.0, 0.0]), record("b", [0.0, 1.0])];
            store.upsert_vectors(scope, "notes", records).await.unwrap();
            assert_eq!(nearest(&store, scope).await, "a");

            let table = {
                use crate::vectors::Tables;
                let mut tx = store.read().await.unwrap();
                mnemix_sqlite_family::family::vectors::find_collection(
                    &mut tx,
                    scope.namespace(),
                    "notes",
                )
                .await
                .unwrap()
                .unwrap()
                .table()
            };
            swap_behind_the_store(&store, &table).await;
            let expected = if held { "a" } else { "b" };
            assert_eq!(
                nearest(&store, scope).await,
                expected,
                "held: no row is read while the generation stands (held = {held})"
            );

            // The writer's own upsert moves its held matrix on (not read again), so the rows
            // changed behind its back still do not show.
            let c = vec![record("c", [0.9, 0.1])];
            store.upsert_vectors(scope, "notes", c).await.unwrap();
            assert_eq!(nearest(&store, scope).await, expected);

            bump_behind_the_store(&store).await;
            assert_eq!(
                nearest(&store, scope).await,
                "b",
                "a new generation is read"
            );
        }
    }
}
