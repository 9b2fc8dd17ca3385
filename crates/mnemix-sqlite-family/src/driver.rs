//! The seam between the SQLite family's store code and a driver: a connection that runs a
//! statement with positional parameters and hands back its rows as SQLite's five storage
//! classes. The code written once against it ([`family`](crate::family)) is each backend's; a
//! driver crate (sqlx's SQLite, libsql) implements [`Conn`] for its connections and maps its
//! errors, and nothing else.
//!
//! ```
//! use mnemix_sqlite_family::driver::{Row, Value};
//! let row = Row::new("example", vec![Value::Integer(7), Value::Blob(b"free text".to_vec())]);
//! assert_eq!(row.int(0)?, 7);
//! assert_eq!(row.string(1)?, "free text"); // free text may be stored as a blob
//! assert!(row.string(0).is_err()); // an integer is not text: the store says it is corrupt
//! # Ok::<(), mnemix_core::MemoryError>(())
//! ```

use async_trait::async_trait;
use mnemix_core::{MemoryError, Metadata, Result};

/// A statement parameter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Param<'a> {
    /// SQL NULL.
    Null,
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Real(f64),
    /// Text that holds no NUL: identifiers, JSON, formats. Stored as TEXT by every driver.
    Text(&'a str),
    /// Free text, which may hold NUL: stored as TEXT or as a blob, as the driver needs (libsql
    /// reads TEXT through a C string, which stops at the first NUL); read back by
    /// [`Row::string`] either way.
    FreeText(&'a str),
    /// Bytes.
    Blob(&'a [u8]),
}

impl From<i64> for Param<'_> {
    fn from(value: i64) -> Self {
        Self::Int(value)
    }
}

impl From<f64> for Param<'_> {
    fn from(value: f64) -> Self {
        Self::Real(value)
    }
}

impl From<bool> for Param<'_> {
    fn from(value: bool) -> Self {
        Self::Int(value.into())
    }
}

impl<'a> From<&'a [u8]> for Param<'a> {
    fn from(value: &'a [u8]) -> Self {
        Self::Blob(value)
    }
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(value: &'a str) -> Self {
        Self::Text(value)
    }
}

impl<'a> From<&'a String> for Param<'a> {
    fn from(value: &'a String) -> Self {
        Self::Text(value)
    }
}

impl<'a, T: Into<Param<'a>>> From<Option<T>> for Param<'a> {
    fn from(value: Option<T>) -> Self {
        value.map_or(Self::Null, Into::into)
    }
}

/// A value read back: one of SQLite's storage classes.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// NULL.
    Null,
    /// INTEGER.
    Integer(i64),
    /// REAL.
    Real(f64),
    /// TEXT.
    Text(String),
    /// BLOB.
    Blob(Vec<u8>),
}

/// A row's values, with typed reads that never panic: a value of a type the column cannot
/// hold is `corrupt` (the database was edited by something else).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    backend: &'static str,
    values: Vec<Value>,
}

impl Row {
    /// The values of a row read by `backend` (the name its errors carry).
    pub fn new(backend: &'static str, values: Vec<Value>) -> Self {
        Self { backend, values }
    }

    /// A stored value that does not decode.
    pub fn corrupt(&self, what: &str, e: impl std::fmt::Display) -> MemoryError {
        corrupt(self.backend, what, e)
    }

    fn value(&self, column: usize) -> Result<&Value> {
        self.values
            .get(column)
            .ok_or_else(|| self.corrupt("row", format!("no column {column}")))
    }

    /// An INTEGER column.
    pub fn int(&self, column: usize) -> Result<i64> {
        self.opt_int(column)?
            .ok_or_else(|| self.corrupt("integer", format!("NULL in column {column}")))
    }

    /// An INTEGER column that may be NULL.
    pub fn opt_int(&self, column: usize) -> Result<Option<i64>> {
        match self.value(column)? {
            Value::Null => Ok(None),
            Value::Integer(i) => Ok(Some(*i)),
            other => Err(self.corrupt("integer", format!("{other:?}"))),
        }
    }

    /// A REAL column that may be NULL (an integer reads as its value).
    pub fn opt_real(&self, column: usize) -> Result<Option<f64>> {
        match self.value(column)? {
            Value::Null => Ok(None),
            Value::Real(r) => Ok(Some(*r)),
            Value::Integer(i) => Ok(Some(*i as f64)),
            other => Err(self.corrupt("real", format!("{other:?}"))),
        }
    }

    /// Text, stored as TEXT (identifiers, JSON) or as a blob (free text).
    pub fn string(&self, column: usize) -> Result<String> {
        self.opt_string(column)?
            .ok_or_else(|| self.corrupt("text", format!("NULL in column {column}")))
    }

    /// Text that may be NULL.
    pub fn opt_string(&self, column: usize) -> Result<Option<String>> {
        match self.value(column)? {
            Value::Null => Ok(None),
            Value::Text(s) => Ok(Some(s.clone())),
            Value::Blob(b) => String::from_utf8(b.clone())
                .map(Some)
                .map_err(|e| self.corrupt("text", e)),
            other => Err(self.corrupt("text", format!("{other:?}"))),
        }
    }

    /// A BLOB column.
    pub fn blob(&self, column: usize) -> Result<Vec<u8>> {
        self.opt_blob(column)?
            .ok_or_else(|| self.corrupt("blob", format!("NULL in column {column}")))
    }

    /// A BLOB column that may be NULL.
    pub fn opt_blob(&self, column: usize) -> Result<Option<Vec<u8>>> {
        match self.value(column)? {
            Value::Null => Ok(None),
            Value::Blob(b) => Ok(Some(b.clone())),
            other => Err(self.corrupt("blob", format!("{other:?}"))),
        }
    }
}

/// A driver's error as the contract's: `Unavailable` (worth retrying) for a busy or locked
/// database (SQLite's result code `code`, extended or not, is `SQLITE_BUSY` or `SQLITE_LOCKED`)
/// or a `lost` connection; else `Backend`.
///
/// ```
/// use mnemix_sqlite_family::driver::driver_error;
/// let busy = std::io::Error::other("database is locked");
/// assert!(driver_error("sqlite", Some(5 | 256), false, busy).is_retryable());
/// let syntax = std::io::Error::other("near \"SELEC\": syntax error");
/// assert!(!driver_error("sqlite", Some(1), false, syntax).is_retryable());
/// ```
pub fn driver_error(
    backend: &'static str,
    code: Option<i32>,
    lost: bool,
    source: impl std::error::Error + Send + Sync + 'static,
) -> MemoryError {
    let source = Box::new(source);
    if lost || matches!(code.map(|c| c & 0xff), Some(5 | 6)) {
        MemoryError::Unavailable { backend, source }
    } else {
        MemoryError::Backend { backend, source }
    }
}

/// A stored value of `backend` that does not decode: the database was edited by something else.
pub fn corrupt(backend: &'static str, what: &str, e: impl std::fmt::Display) -> MemoryError {
    MemoryError::corrupt(backend, what, e)
}

/// Stored metadata (its JSON text) decoded; what does not decode is `backend`'s corrupt row.
pub fn metadata_from(backend: &'static str, text: &str) -> Result<Metadata> {
    serde_json::from_str(text).map_err(|e| corrupt(backend, "metadata", e))
}

/// A connection of a SQLite-family driver, in whatever transaction its holder opened. Statements
/// are the family's own text (`'static`), so a driver may keep them prepared by their address.
#[async_trait]
pub trait Conn: Send {
    /// The backend's name, which its errors carry.
    const BACKEND: &'static str;

    /// Every row of a statement.
    async fn rows(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<Vec<Row>>;

    /// The first row of a statement, if any (the statement still runs to completion).
    async fn row(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<Option<Row>> {
        Ok(self.rows(sql, params).await?.into_iter().next())
    }

    /// Runs a statement; returns the rows it changed.
    async fn execute(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<u64>;

    /// Runs a script of `;`-separated statements without parameters (a migration).
    async fn run_script(&mut self, sql: &'static str) -> Result<()>;

    /// Whether one call may send several statements, `;`-separated and numbering one parameter
    /// list (each call is a hop to sqlx's worker thread, so joining saves one per statement).
    /// The family then sends a script as one string; otherwise statement by statement.
    const JOINS_STATEMENTS: bool = false;

    /// The first statement string of the transaction this connection is in: `with_begin` (the
    /// same statements after its `BEGIN`) when the driver lets `BEGIN` ride in it and it has
    /// not been sent; by default `plain`, the holder having begun the transaction.
    fn first(&mut self, plain: &'static str, with_begin: &'static str) -> &'static str {
        let _ = with_begin;
        plain
    }

    /// The last statement string of the transaction: `with_commit` (the same statements then
    /// `COMMIT`) when the driver lets `COMMIT` ride in it; by default `plain`, the holder
    /// committing. Run it to its end ([`rows`](Self::rows), [`execute`](Self::execute)).
    fn last(&mut self, plain: &'static str, with_commit: &'static str) -> &'static str {
        let _ = with_commit;
        plain
    }
}
