//! Driver glue: error mapping, column codecs and the migration runner.

use async_trait::async_trait;
use mnemix_core::migration::Migration;
use mnemix_core::{MemoryError, Metadata, Result};
use mnemix_sqlite_family::driver::{driver_error, Conn, Param, Row, Value};
use mnemix_sqlite_family::family::migrations;

/// The column codecs the SQLite family shares.
pub(crate) use mnemix_sqlite_family::family::{seq_from_db, subject_of, to_json};
use sqlx::sqlite::{Sqlite, SqliteArguments, SqliteConnection, SqliteRow};
use sqlx::{Connection, Decode, Row as _, TypeInfo, ValueRef};

pub(crate) const BACKEND: &str = "sqlite";

/// The schema, oldest first (the SQLite family's SQL crate holds it). Never edit an entry once
/// released: add a new one.
pub const MIGRATIONS: &[Migration] = mnemix_sqlite_family::migrations::SQLITE;

/// `.db()?` turns a driver error into the contract's error kinds.
pub(crate) trait DbResult<T> {
    fn db(self) -> Result<T>;
}

impl<T> DbResult<T> for std::result::Result<T, sqlx::Error> {
    fn db(self) -> Result<T> {
        self.map_err(to_memory_error)
    }
}

/// Busy/locked databases and lost pools are worth retrying; everything else is a backend error.
pub(crate) fn to_memory_error(e: sqlx::Error) -> MemoryError {
    let code = match &e {
        sqlx::Error::Database(db) => db.code().and_then(|c| c.parse::<i32>().ok()),
        _ => None,
    };
    let lost = matches!(
        e,
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_)
    );
    driver_error(BACKEND, code, lost, e)
}

/// A stored value that does not decode: the database was edited by something else.
pub(crate) fn corrupt(what: &str, e: impl std::fmt::Display) -> MemoryError {
    mnemix_sqlite_family::driver::corrupt(BACKEND, what, e)
}

pub(crate) fn metadata_from(text: &str) -> Result<Metadata> {
    mnemix_sqlite_family::driver::metadata_from(BACKEND, text)
}

/// Applies the pending migrations of `known` in one `BEGIN IMMEDIATE` transaction, so several
/// processes opening the same file at once migrate it exactly once. Returns the versions applied.
pub(crate) async fn migrate(conn: &mut SqliteConnection, known: &[Migration]) -> Result<Vec<u32>> {
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.db()?;
    let applied = migrations::apply(&mut Sqlx(&mut tx), known).await?;
    tx.commit().await.db()?;
    Ok(applied)
}

/// sqlx's SQLite connection as the SQLite family's [`Conn`]: the statements written once in
/// `mnemix_sqlite_family::family` run through it.
pub(crate) struct Sqlx<'c>(pub(crate) &'c mut SqliteConnection);

/// `query` with `params` bound in order.
fn bound<'q>(
    sql: &'static str,
    params: &[Param<'q>],
) -> sqlx::query::Query<'q, Sqlite, SqliteArguments> {
    params
        .iter()
        .fold(sqlx::query(sql), |query, param| match *param {
            Param::Null => query.bind(None::<i64>),
            Param::Int(value) => query.bind(value),
            Param::Real(value) => query.bind(value),
            Param::Text(value) | Param::FreeText(value) => query.bind(value),
            Param::Blob(value) => query.bind(value),
        })
}

/// A row's values as the family reads them: each as the storage class it holds.
pub(crate) fn values(row: &SqliteRow) -> Result<Row> {
    let value = |i: usize| -> std::result::Result<Value, sqlx::error::BoxDynError> {
        let raw = row.try_get_raw(i)?;
        if raw.is_null() {
            return Ok(Value::Null);
        }
        let decoded = match raw.type_info().name() {
            "INTEGER" => Value::Integer(<i64 as Decode<Sqlite>>::decode(raw)?),
            "REAL" => Value::Real(<f64 as Decode<Sqlite>>::decode(raw)?),
            "BLOB" => Value::Blob(<Vec<u8> as Decode<Sqlite>>::decode(raw)?),
            _ => Value::Text(<String as Decode<Sqlite>>::decode(raw)?),
        };
        Ok(decoded)
    };
    (0..row.len())
        .map(|i| value(i).map_err(|e| corrupt("column", e)))
        .collect::<Result<_>>()
        .map(|values| Row::new(BACKEND, values))
}

/// Every row of a family statement on `conn`.
pub(crate) async fn family_rows(
    conn: &mut SqliteConnection,
    sql: &'static str,
    params: &[Param<'_>],
) -> Result<Vec<Row>> {
    let rows = bound(sql, params).fetch_all(conn).await.db()?;
    rows.iter().map(values).collect()
}

/// Runs a script of the family's (a migration) on `conn`.
pub(crate) async fn family_script(conn: &mut SqliteConnection, sql: &'static str) -> Result<()> {
    sqlx::raw_sql(sql).execute(conn).await.db().map(drop)
}

/// Runs a family statement on `conn`; the rows it changed.
pub(crate) async fn family_execute(
    conn: &mut SqliteConnection,
    sql: &'static str,
    params: &[Param<'_>],
) -> Result<u64> {
    let done = bound(sql, params).execute(conn).await.db()?;
    Ok(done.rows_affected())
}

#[async_trait]
impl Conn for Sqlx<'_> {
    const BACKEND: &'static str = BACKEND;
    const JOINS_STATEMENTS: bool = true;

    async fn rows(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<Vec<Row>> {
        family_rows(self.0, sql, params).await
    }

    async fn execute(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<u64> {
        family_execute(self.0, sql, params).await
    }

    async fn run_script(&mut self, sql: &'static str) -> Result<()> {
        family_script(self.0, sql).await
    }
}
