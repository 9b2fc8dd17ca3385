//! The migration runner's ledger, written once over [`Conn`]: the driver opens the
//! `BEGIN IMMEDIATE` transaction (so processes opening one file at once migrate it exactly
//! once), [`apply`] runs what is pending in it, and the driver commits.

use async_trait::async_trait;
use mnemix_core::migration::{apply_pending, AppliedMigration, Migration, MigrationTarget};
use mnemix_core::{Result, Timestamp};

use crate::driver::Conn;
use crate::migrations as sql;

/// The runner's view of a connection in a write transaction.
struct Ledger<'c, C>(&'c mut C);

#[async_trait]
impl<C: Conn> MigrationTarget for Ledger<'_, C> {
    async fn recorded(&mut self) -> Result<Vec<AppliedMigration>> {
        self.0.execute(sql::CREATE_LEDGER, &[]).await?;
        self.0
            .rows(sql::RECORDED, &[])
            .await?
            .iter()
            .map(|row| {
                Ok(AppliedMigration {
                    version: u32::try_from(row.int(0)?).unwrap_or(u32::MAX),
                    checksum: row.string(1)?,
                })
            })
            .collect()
    }

    async fn run(&mut self, migration: &Migration) -> Result<()> {
        self.0.run_script(migration.sql).await
    }

    async fn record(
        &mut self,
        migration: &Migration,
        checksum: &str,
        applied_at: Timestamp,
    ) -> Result<()> {
        let params = [
            i64::from(migration.version).into(),
            migration.name.into(),
            checksum.into(),
            applied_at.as_millis().into(),
        ];
        self.0.execute(sql::RECORD, &params).await.map(drop)
    }
}

/// Applies the pending migrations of `known` in the write transaction `tx` is in (the caller
/// commits): the versions applied.
pub async fn apply<C: Conn>(tx: &mut C, known: &[Migration]) -> Result<Vec<u32>> {
    apply_pending(&mut Ledger(tx), known, C::BACKEND).await
}

/// The schema version recorded in the database (0 when never migrated).
pub async fn schema_version<C: Conn>(conn: &mut C) -> Result<u32> {
    if conn.row(sql::LEDGER_EXISTS, &[]).await?.is_none() {
        return Ok(0);
    }
    let version = match conn.row(sql::SCHEMA_VERSION, &[]).await? {
        Some(row) => row.opt_int(0)?,
        None => None,
    };
    Ok(version.map_or(0, |v| u32::try_from(v).unwrap_or(u32::MAX)))
}
