//! Driver glue: statements, row decoding, error mapping and the migration runner.
//!
//! libsql's own `String` decoding goes through a C string, which stops at the first NUL and
//! panics on bytes that are not UTF-8; and its typed getters panic on a type they do not
//! expect. So every column is read as a [`Value`] and decoded here, and free text (which may
//! hold NUL) is bound and stored as a blob ([`text`]). A libsql row of an embedded database is
//! a view of its statement's current step, so rows are copied out ([`DbRow`]) before the next.

use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Mutex as SyncMutex, PoisonError};

use libsql::params::{IntoParams, Params};
use libsql::{Connection, Statement, Value};
use mnemix_core::migration::Migration;
use mnemix_core::{MemoryError, Metadata, Result};
use mnemix_sqlite_family::driver::{self as family, Param};
use mnemix_sqlite_family::migrations;

/// The column codecs the SQLite family shares.
pub(crate) use mnemix_sqlite_family::family::{subject_of, to_json};

pub(crate) const BACKEND: &str = "libsql";

/// The schema, oldest first (the SQLite family's SQL crate holds it). Never edit an entry once
/// released: add a new one.
pub const MIGRATIONS: &[Migration] = migrations::LIBSQL;

/// `.db()?` turns a driver error into the contract's error kinds.
pub(crate) trait DbResult<T> {
    fn db(self) -> Result<T>;
}

impl<T> DbResult<T> for std::result::Result<T, libsql::Error> {
    fn db(self) -> Result<T> {
        self.map_err(to_memory_error)
    }
}

/// Busy/locked databases and lost connections are worth retrying; everything else is a backend
/// error.
pub(crate) fn to_memory_error(e: libsql::Error) -> MemoryError {
    let code = match &e {
        libsql::Error::SqliteFailure(code, _) => Some(*code),
        _ => None,
    };
    let lost = matches!(e, libsql::Error::ConnectionFailed(_));
    family::driver_error(BACKEND, code, lost, e)
}

/// A stored value that does not decode: the database was edited by something else.
pub(crate) fn corrupt(what: &str, e: impl std::fmt::Display) -> MemoryError {
    mnemix_sqlite_family::driver::corrupt(BACKEND, what, e)
}

/// One row's values, copied out of the statement.
#[derive(Debug)]
pub(crate) struct DbRow(Vec<Value>);

impl DbRow {
    fn read(row: &libsql::Row) -> Result<Self> {
        (0..row.column_count())
            .map(|i| row.get_value(i).db())
            .collect::<Result<_>>()
            .map(Self)
    }
}

/// Most statements a connection keeps prepared; past it, the cache starts over (the
/// statements of the store's fixed SQL are far fewer; per-collection vector statements add a
/// few per collection).
const MAX_CACHED_STATEMENTS: usize = 256;

/// A connection and the statements prepared on it.
///
/// libsql keeps no statement cache, and compiling a statement costs as much as running it
/// (an append's statements each cost more to prepare than a whole `BEGIN IMMEDIATE` +
/// `COMMIT`), so a local connection prepares each statement once and reuses it. A remote connection sends the text each time (the server prepares it).
pub struct Conn {
    libsql: Connection,
    /// `None` for a remote database. Statements are taken out while they run, so the lock is
    /// never held across an await.
    statements: Option<SyncMutex<HashMap<Box<str>, Statement>>>,
    /// Whether the page cache is widened for a bulk write ([`Self::widen_cache`]).
    widened: bool,
}

/// The page cache a connection keeps: SQLite's default (2 MB).
pub(crate) const CACHE_KIB: u32 = 2_000;

/// The page cache of a transaction that writes many vectors. Each DiskANN insert rewrites the
/// ~25 KB blocks of the neighbours it links to, so in the default cache a batch's blocks are
/// evicted and read back before it commits; widened for the batch, W7 writes measurably more
/// vectors a second (BENCHMARKS.md), while a larger cache gained no more and a cache kept
/// between batches gained little and kept its memory.
pub(crate) const WIDE_CACHE_KIB: u32 = 256 * 1024;

impl Conn {
    /// `conn`, caching its statements unless it is `remote`.
    pub(crate) fn new(conn: Connection, remote: bool) -> Self {
        Self {
            libsql: conn,
            statements: (!remote).then(SyncMutex::default),
            widened: false,
        }
    }

    /// Widens a local connection's page cache for a bulk write, until [`Self::narrow_cache`]
    /// (a remote server keeps its own cache).
    pub(crate) async fn widen_cache(&mut self) -> Result<()> {
        if self.statements.is_some() && !self.widened {
            self.set_cache(WIDE_CACHE_KIB).await?;
            self.widened = true;
        }
        Ok(())
    }

    /// Gives back what [`Self::widen_cache`] took: SQLite frees the pages beyond the limit.
    pub(crate) async fn narrow_cache(&mut self) -> Result<()> {
        if self.widened {
            self.set_cache(CACHE_KIB).await?;
            self.widened = false;
        }
        Ok(())
    }

    async fn set_cache(&self, kib: u32) -> Result<()> {
        // A negative size is in KiB, a positive one in pages.
        self.libsql
            .execute_batch(&format!("PRAGMA cache_size = -{kib};"))
            .await
            .db()
            .map(drop)
    }

    /// The statement for `sql`, prepared once; give it back with [`Self::give_back`].
    async fn statement(&self, sql: &str) -> Result<(Box<str>, Statement)> {
        let cached = self.statements.as_ref().and_then(|statements| {
            statements
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove_entry(sql)
        });
        match cached {
            Some(found) => Ok(found),
            None => Ok((sql.into(), self.libsql.prepare(sql).await.db()?)),
        }
    }

    /// Keeps a statement that ran to its end for the next call, reset (so it holds no
    /// snapshot or lock meanwhile).
    fn give_back(&self, sql: Box<str>, statement: Statement) {
        let Some(statements) = &self.statements else {
            return;
        };
        statement.reset();
        let mut statements = statements.lock().unwrap_or_else(PoisonError::into_inner);
        if statements.len() >= MAX_CACHED_STATEMENTS {
            statements.clear();
        }
        statements.insert(sql, statement);
    }
}

impl std::ops::Deref for Conn {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.libsql
    }
}

/// Every row of a query.
pub(crate) async fn rows(conn: &Conn, sql: &str, params: impl IntoParams) -> Result<Vec<DbRow>> {
    let mut all = Vec::new();
    scan(conn, sql, params, |row| {
        all.push(DbRow::read(row)?);
        Ok(())
    })
    .await?;
    Ok(all)
}

/// Hands every row of a query to `each` as the driver holds it, before the next step: a scan
/// copies only the columns `each` reads, and holds no more than one row.
pub(crate) async fn scan(
    conn: &Conn,
    sql: &str,
    params: impl IntoParams,
    mut each: impl FnMut(&libsql::Row) -> Result<()>,
) -> Result<()> {
    // A remote connection runs the SQL as is; a local one reuses a cached statement, given
    // back once its rows are read.
    let (mut rows, reused) = if conn.statements.is_none() {
        (conn.query(sql, params).await.db()?, None)
    } else {
        let (sql, statement) = conn.statement(sql).await?;
        let rows = statement
            .query(every_parameter(&statement, params)?)
            .await
            .db()?;
        (rows, Some((sql, statement)))
    };
    while let Some(row) = rows.next().await.db()? {
        each(&row)?;
    }
    drop(rows);
    if let Some((sql, statement)) = reused {
        conn.give_back(sql, statement);
    }
    Ok(())
}

/// `params` with every parameter of a reused statement bound: SQLite keeps a statement's
/// bindings across resets (and libsql cannot clear them), so a parameter left out would keep
/// the last call's value instead of being NULL as in a fresh statement.
fn every_parameter(statement: &Statement, params: impl IntoParams) -> Result<Params> {
    let mut values = match params.into_params().db()? {
        Params::None => Vec::new(),
        Params::Positional(values) => values,
        named @ Params::Named(_) => return Ok(named),
    };
    if values.len() < statement.parameter_count() {
        values.resize(statement.parameter_count(), Value::Null);
    }
    Ok(Params::Positional(values))
}

/// The first row of a query, if any (the statement still runs to completion).
pub(crate) async fn row(conn: &Conn, sql: &str, params: impl IntoParams) -> Result<Option<DbRow>> {
    Ok(rows(conn, sql, params).await?.into_iter().next())
}

/// Runs a statement; returns the rows it changed.
pub(crate) async fn execute(conn: &Conn, sql: &str, params: impl IntoParams) -> Result<u64> {
    if conn.statements.is_none() {
        return conn.execute(sql, params).await.db();
    }
    let (sql, statement) = conn.statement(sql).await?;
    let changed = statement
        .execute(every_parameter(&statement, params)?)
        .await
        .db()?;
    conn.give_back(sql, statement);
    Ok(u64::try_from(changed).unwrap_or(u64::MAX))
}

/// Free text as a statement parameter: a blob, so NUL survives (see the module docs).
pub(crate) fn text(value: &str) -> Value {
    Value::Blob(value.as_bytes().to_vec())
}

/// Optional free text as a statement parameter.
pub(crate) fn opt_text(value: Option<&str>) -> Value {
    value.map_or(Value::Null, text)
}

/// Typed reads of a column that never panic: a value of an unexpected type is `corrupt`.
pub(crate) trait RowExt {
    fn value(&self, column: usize) -> Result<Value>;

    fn int(&self, column: usize) -> Result<i64> {
        self.opt_int(column)?
            .ok_or_else(|| corrupt("integer", format!("NULL in column {column}")))
    }

    fn opt_int(&self, column: usize) -> Result<Option<i64>> {
        match self.value(column)? {
            Value::Null => Ok(None),
            Value::Integer(i) => Ok(Some(i)),
            other => Err(corrupt("integer", format!("{other:?}"))),
        }
    }

    /// Text stored as TEXT (identifiers, JSON) or as a blob (free text).
    fn string(&self, column: usize) -> Result<String> {
        self.opt_string(column)?
            .ok_or_else(|| corrupt("text", format!("NULL in column {column}")))
    }

    fn opt_string(&self, column: usize) -> Result<Option<String>> {
        match self.value(column)? {
            Value::Null => Ok(None),
            Value::Text(s) => Ok(Some(s)),
            Value::Blob(b) => String::from_utf8(b)
                .map(Some)
                .map_err(|e| corrupt("text", e)),
            other => Err(corrupt("text", format!("{other:?}"))),
        }
    }

    fn blob(&self, column: usize) -> Result<Vec<u8>> {
        self.opt_blob(column)?
            .ok_or_else(|| corrupt("blob", format!("NULL in column {column}")))
    }

    fn opt_blob(&self, column: usize) -> Result<Option<Vec<u8>>> {
        match self.value(column)? {
            Value::Null => Ok(None),
            Value::Blob(b) => Ok(Some(b)),
            other => Err(corrupt("blob", format!("{other:?}"))),
        }
    }
}

impl RowExt for DbRow {
    fn value(&self, column: usize) -> Result<Value> {
        self.0
            .get(column)
            .cloned()
            .ok_or_else(|| corrupt("row", format!("no column {column}")))
    }
}

impl RowExt for libsql::Row {
    fn value(&self, column: usize) -> Result<Value> {
        let column = i32::try_from(column).map_err(|e| corrupt("row", e))?;
        self.get_value(column).db()
    }
}

pub(crate) fn metadata_from(text: &str) -> Result<Metadata> {
    mnemix_sqlite_family::driver::metadata_from(BACKEND, text)
}

pub(crate) fn count_to_db(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Applies the pending migrations of `known` in one `BEGIN IMMEDIATE` transaction, so several
/// processes opening the same file at once migrate it exactly once. Returns the versions applied.
pub(crate) async fn migrate(conn: &Conn, known: &[Migration]) -> Result<Vec<u32>> {
    let tx = conn
        .transaction_with_behavior(libsql::TransactionBehavior::Immediate)
        .await
        .db()?;
    let applied = mnemix_sqlite_family::family::migrations::apply(&mut { conn }, known).await?;
    tx.commit().await.db()?;
    Ok(applied)
}

/// A family parameter as libsql binds it: free text as a blob (see the module docs).
fn libsql_value(param: &Param<'_>) -> Value {
    match *param {
        Param::Null => Value::Null,
        Param::Int(value) => Value::Integer(value),
        Param::Real(value) => Value::Real(value),
        Param::Text(value) => Value::Text(value.to_owned()),
        Param::FreeText(value) => text(value),
        Param::Blob(value) => Value::Blob(value.to_vec()),
    }
}

/// A libsql value as the family reads it.
fn family_value(value: Value) -> family::Value {
    match value {
        Value::Null => family::Value::Null,
        Value::Integer(i) => family::Value::Integer(i),
        Value::Real(r) => family::Value::Real(r),
        Value::Text(s) => family::Value::Text(s),
        Value::Blob(b) => family::Value::Blob(b),
    }
}

/// Every row of a family statement on `conn`.
async fn family_rows(
    conn: &Conn,
    sql: &'static str,
    params: &[Param<'_>],
) -> Result<Vec<family::Row>> {
    let params: Vec<Value> = params.iter().map(libsql_value).collect();
    let found = rows(conn, sql, params).await?;
    Ok(found
        .into_iter()
        .map(|row| family::Row::new(BACKEND, row.0.into_iter().map(family_value).collect()))
        .collect())
}

/// Runs a family statement on `conn`; the rows it changed.
async fn family_execute(conn: &Conn, sql: &'static str, params: &[Param<'_>]) -> Result<u64> {
    let params: Vec<Value> = params.iter().map(libsql_value).collect();
    execute(conn, sql, params).await
}

/// A connection as the SQLite family's [`family::Conn`]: the statements written once in
/// `mnemix_sqlite_family::family` run through it, prepared once like every other.
#[async_trait]
impl family::Conn for Conn {
    const BACKEND: &'static str = BACKEND;

    async fn rows(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<Vec<family::Row>> {
        family_rows(self, sql, params).await
    }

    async fn execute(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<u64> {
        family_execute(self, sql, params).await
    }

    async fn run_script(&mut self, sql: &'static str) -> Result<()> {
        self.execute_batch(sql).await.db().map(drop)
    }
}

/// A shared connection as the SQLite family's: libsql runs statements through `&self`.
#[async_trait]
impl family::Conn for &Conn {
    const BACKEND: &'static str = BACKEND;

    async fn rows(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<Vec<family::Row>> {
        family_rows(self, sql, params).await
    }

    async fn execute(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<u64> {
        family_execute(self, sql, params).await
    }

    async fn run_script(&mut self, sql: &'static str) -> Result<()> {
        self.execute_batch(sql).await.db().map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_reused_statement_binds_what_a_call_leaves_out_as_null() {
        let database = libsql::Builder::new_local(":memory:")
            .build()
            .await
            .unwrap();
        let conn = Conn::new(database.connect().unwrap(), false);
        let first = rows(&conn, "SELECT ?1, ?2", (1, 2)).await.unwrap();
        assert_eq!(first[0].int(1).unwrap(), 2);
        let second = rows(&conn, "SELECT ?1, ?2", [3]).await.unwrap();
        assert_eq!(second[0].int(0).unwrap(), 3);
        assert_eq!(second[0].opt_int(1).unwrap(), None, "not the last call's 2");
        let cached = conn.statements.as_ref().unwrap().lock().unwrap().len();
        assert_eq!(cached, 1, "one statement, prepared once");
    }
}
