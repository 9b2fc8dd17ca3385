//! The store of agent memory's SQLite-family backends (`mnemix-sqlite` on sqlx, `mnemix-libsql`
//! on libsql), written once: their schemas and migrations ([`migrations`]), the statements
//! both send alike, what both decide alike from what those statements read (a write group's
//! appends: [`conversations::AppendGroup`]; fact recall's ranking), and the contracts
//! themselves over the seam a driver crate implements ([`driver::Conn`] for its connections,
//! [`family::store::FamilyStore`] for its store, [`family::vectors::VectorTables`] for the
//! tables of its vectors; [`family`]). A driver crate holds its connections, its group commit
//! and its vectors' layout and search; every statement it sends goes through its `Conn`.
//!
//! Never a driver: each backend links its own SQLite (sqlx's bundled one, or libSQL's), and the
//! two must not meet in one binary. Statements use
//! numbered placeholders (`?1`), which both drivers bind positionally; where a statement reads
//! free text, it does so in a way both schemas serve (mnemix-libsql stores free text as BLOB).
//! A bound row limit is written `LIMIT (SELECT ?n)`: SQLite (3.51, as bundled here) compiles
//! a bare `LIMIT ?n` with the value bound at the time, so every new binding makes the cached
//! statement expire and be prepared again (W2 in BENCHMARKS.md, loading the last messages of a
//! long conversation, was measurably slower against the engine's limit with `LIMIT ?n`).
//!
//! ```
//! use mnemix_sqlite_family::facts::{held_positions, RECALL_CANDIDATES_HOLDING};
//! assert!(RECALL_CANDIDATES_HOLDING.contains("fact_tokens"));
//! assert_eq!(held_positions(Some("3,0")), Ok(vec![0, 3]));
//! ```

pub mod builder;
pub mod conversations;
pub mod documents;
pub mod driver;
pub mod facts;
pub mod family;
pub mod forget;
pub mod group;
pub mod migrations;
pub mod transfer;
pub mod vectors;

/// What the macros ([`fact_store!`], [`document_stores!`], [`family_builder_setters!`]) name, re-exported so that
/// a driver crate invoking them needs no dependency of its own on these crates.
#[doc(hidden)]
pub mod __private {
    pub use async_trait::async_trait;
    pub use mnemix_core as core;
}

/// SQLite's `synchronous` setting for a database file, as both backends take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// fsync at checkpoints only: safe against process crashes (the default).
    #[default]
    Normal,
    /// fsync at every commit: safe against power loss too.
    Full,
}

impl Synchronous {
    /// The value of `PRAGMA synchronous` that sets it.
    ///
    /// ```
    /// assert_eq!(mnemix_sqlite_family::Synchronous::Full.pragma_value(), "FULL");
    /// ```
    pub fn pragma_value(self) -> &'static str {
        match self {
            Self::Normal => "NORMAL",
            Self::Full => "FULL",
        }
    }
}
