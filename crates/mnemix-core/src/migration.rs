//! Versioned schema migrations: the decision shared by every SQL backend of which embedded
//! migrations to apply, and the refusals (a newer schema, an edited migration).
//!
//! A backend embeds its migrations (`include_str!`), opens a transaction under its own lock
//! (SQLite `BEGIN IMMEDIATE`, Postgres an advisory lock) and hands it to [`apply_pending`] as a
//! [`MigrationTarget`]: the runner reads the versions and checksums recorded there, asks
//! [`pending`] what to run, runs each in the same transaction and records it with its checksum.

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use crate::error::{MemoryError, Result};
use crate::time::Timestamp;

/// One embedded migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// Its version: 1, 2, 3 … with no gaps.
    pub version: u32,
    /// A short name (the file name without the version).
    pub name: &'static str,
    /// The SQL it runs.
    pub sql: &'static str,
}

impl Migration {
    /// The SHA-256 of its SQL, hex: recorded when applied, compared on every open.
    pub fn checksum(&self) -> String {
        lowercase_hex(&Sha256::digest(self.sql.as_bytes()))
    }
}

/// Bytes as lowercase hex (checksums and digests).
pub(crate) fn lowercase_hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// A migration as a database recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedMigration {
    /// Its version.
    pub version: u32,
    /// The checksum recorded when it was applied.
    pub checksum: String,
}

/// Why a database's schema cannot be used by this build.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The database was migrated by a newer release.
    #[error(
        "the database schema is at version {found}, newer than this build supports \
         ({supported}); upgrade mnemix to open it"
    )]
    Newer {
        /// The highest version recorded.
        found: u32,
        /// The highest version this build knows.
        supported: u32,
    },
    /// A recorded migration differs from the embedded one of the same version.
    #[error(
        "migration {version} ({name}) was changed after it was applied: recorded checksum \
         {recorded}, embedded {embedded}"
    )]
    ChecksumMismatch {
        /// The version.
        version: u32,
        /// Its name.
        name: &'static str,
        /// What the database recorded.
        recorded: String,
        /// What this build embeds.
        embedded: String,
    },
}

/// The migrations of `known` still to apply, in order, given what the database recorded.
///
/// A recorded version above every known one is [`SchemaError::Newer`]; a recorded checksum that
/// differs from the embedded migration is [`SchemaError::ChecksumMismatch`]. Both are reported
/// as [`MemoryError::Backend`] of `backend` with the `SchemaError` as source.
///
/// ```
/// use mnemix_core::migration::{pending, AppliedMigration, Migration};
/// const KNOWN: &[Migration] = &[
///     Migration { version: 1, name: "initial", sql: "CREATE TABLE a (x INTEGER);" },
///     Migration { version: 2, name: "b", sql: "CREATE TABLE b (x INTEGER);" },
/// ];
/// let applied = [AppliedMigration { version: 1, checksum: KNOWN[0].checksum() }];
/// let todo = pending(KNOWN, &applied, "sqlite")?;
/// assert_eq!(todo.iter().map(|m| m.version).collect::<Vec<_>>(), [2]);
/// # Ok::<(), mnemix_core::MemoryError>(())
/// ```
pub fn pending<'a>(
    known: &'a [Migration],
    applied: &[AppliedMigration],
    backend: &'static str,
) -> Result<Vec<&'a Migration>> {
    let fail = |e: SchemaError| MemoryError::Backend {
        backend,
        source: Box::new(e),
    };
    let supported = known.iter().map(|m| m.version).max().unwrap_or(0);
    if let Some(found) = applied.iter().map(|a| a.version).max() {
        if found > supported {
            return Err(fail(SchemaError::Newer { found, supported }));
        }
    }
    let mut todo = Vec::new();
    for migration in known {
        match applied.iter().find(|a| a.version == migration.version) {
            Some(recorded) => {
                let embedded = migration.checksum();
                if recorded.checksum != embedded {
                    return Err(fail(SchemaError::ChecksumMismatch {
                        version: migration.version,
                        name: migration.name,
                        recorded: recorded.checksum.clone(),
                        embedded,
                    }));
                }
            }
            None => todo.push(migration),
        }
    }
    Ok(todo)
}

/// What the migration runner asks of a database, inside the transaction (and lock) the
/// backend opened for it: a small driver trait, so the runner is written once.
#[async_trait]
pub trait MigrationTarget: Send {
    /// What the ledger of applied migrations records (creating the ledger when missing, unless
    /// the backend made it already).
    async fn recorded(&mut self) -> Result<Vec<AppliedMigration>>;
    /// Runs a migration's SQL (several statements).
    async fn run(&mut self, migration: &Migration) -> Result<()>;
    /// Records a migration as applied, with its checksum and when.
    async fn record(
        &mut self,
        migration: &Migration,
        checksum: &str,
        applied_at: Timestamp,
    ) -> Result<()>;
}

/// Applies the migrations of `known` that `target` has not recorded ([`pending`]: a newer or
/// edited schema is refused before anything runs), in order, each recorded as it runs. Returns
/// the versions applied. The caller commits.
pub async fn apply_pending(
    target: &mut (impl MigrationTarget + ?Sized),
    known: &[Migration],
    backend: &'static str,
) -> Result<Vec<u32>> {
    let recorded = target.recorded().await?;
    let todo = pending(known, &recorded, backend)?;
    for migration in &todo {
        target.run(migration).await?;
        target
            .record(migration, &migration.checksum(), Timestamp::now())
            .await?;
    }
    Ok(todo.iter().map(|m| m.version).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: &[Migration] = &[
        Migration {
            version: 1,
            name: "one",
            sql: "CREATE TABLE one (x);",
        },
        Migration {
            version: 2,
            name: "two",
            sql: "CREATE TABLE two (x);",
        },
    ];

    fn applied(version: u32, checksum: String) -> AppliedMigration {
        AppliedMigration { version, checksum }
    }

    #[test]
    fn fresh_database_gets_everything_in_order() {
        let todo = pending(KNOWN, &[], "test").unwrap();
        assert_eq!(todo, KNOWN.iter().collect::<Vec<_>>());
    }

    #[test]
    fn up_to_date_database_gets_nothing() {
        let done: Vec<_> = KNOWN
            .iter()
            .map(|m| applied(m.version, m.checksum()))
            .collect();
        assert!(pending(KNOWN, &done, "test").unwrap().is_empty());
    }

    #[test]
    fn newer_schema_is_refused_with_both_versions() {
        let err = pending(KNOWN, &[applied(3, "x".into())], "test").unwrap_err();
        let text = std::error::Error::source(&err).unwrap().to_string();
        assert!(text.contains("version 3") && text.contains("(2)"), "{text}");
    }

    /// A ledger in memory and the SQL it was asked to run.
    #[derive(Default)]
    struct Ledger {
        recorded: Vec<AppliedMigration>,
        ran: Vec<&'static str>,
    }

    #[async_trait]
    impl MigrationTarget for Ledger {
        async fn recorded(&mut self) -> Result<Vec<AppliedMigration>> {
            Ok(self.recorded.clone())
        }
        async fn run(&mut self, migration: &Migration) -> Result<()> {
            self.ran.push(migration.sql);
            Ok(())
        }
        async fn record(&mut self, m: &Migration, checksum: &str, _: Timestamp) -> Result<()> {
            self.recorded.push(applied(m.version, checksum.to_owned()));
            Ok(())
        }
    }

    #[tokio::test]
    async fn the_runner_applies_and_records_what_is_pending_once() {
        let mut ledger = Ledger::default();
        ledger.recorded.push(applied(1, KNOWN[0].checksum()));
        assert_eq!(
            apply_pending(&mut ledger, KNOWN, "test").await.unwrap(),
            [2]
        );
        assert_eq!(ledger.ran, [KNOWN[1].sql]);
        assert_eq!(ledger.recorded[1], applied(2, KNOWN[1].checksum()));
        assert!(apply_pending(&mut ledger, KNOWN, "test")
            .await
            .unwrap()
            .is_empty());
        let mut edited = Ledger::default();
        edited.recorded.push(applied(1, "0".repeat(64)));
        assert!(apply_pending(&mut edited, KNOWN, "test").await.is_err());
        assert!(
            edited.ran.is_empty(),
            "nothing runs once the schema is refused"
        );
    }

    #[test]
    fn edited_migration_is_refused() {
        let err = pending(KNOWN, &[applied(1, "0".repeat(64))], "test").unwrap_err();
        let text = std::error::Error::source(&err).unwrap().to_string();
        assert!(text.contains("migration 1 (one) was changed"), "{text}");
    }
}
