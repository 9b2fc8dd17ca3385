//! The schema of each SQLite-family backend and the ledger its runner keeps.
//!
//! The two schemas differ where the stores do: libSQL keeps free text (titles, fact text,
//! working memory, vector text) as BLOB, because its Rust driver reads TEXT through a C string
//! that would end at the first NUL, and holds each collection's vectors in a table of its own
//! (`F32_BLOB(dims)` with a DiskANN index, made by `ensure_collection`), where SQLite keeps one
//! `vectors` table of little-endian f32 blobs. Later migrations are the same text for both,
//! but where one schema catches up with the other (libSQL's 3 adds SQLite's collection
//! `generation`), so a shared one may have another number in each (the facts generations are
//! SQLite's 3 and libSQL's 4, the facts' provenance SQLite's 4 and libSQL's 5, the change feed SQLite's 5 and libSQL's 6).
//! Never edit a released migration: its checksum is recorded in every database it made.

use mnemix_core::migration::Migration;

/// mnemix-sqlite's schema, oldest first.
pub const SQLITE: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../migrations/sqlite/0001_initial.sql"),
    },
    REMEMBER_BY_INDEX,
    Migration {
        version: 3,
        ..FACT_GENERATIONS
    },
    Migration {
        version: 4,
        ..FACT_PROVENANCE
    },
    Migration {
        version: 5,
        ..CHANGE_FEED
    },
];

/// mnemix-libsql's schema, oldest first.
pub const LIBSQL: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../migrations/libsql/0001_initial.sql"),
    },
    REMEMBER_BY_INDEX,
    Migration {
        version: 3,
        name: "collection_generation",
        sql: include_str!("../migrations/libsql/0003_collection_generation.sql"),
    },
    FACT_GENERATIONS,
    FACT_PROVENANCE,
    CHANGE_FEED,
];

/// Version 2 of both: remember's purge and duplicate check by index.
const REMEMBER_BY_INDEX: Migration = Migration {
    version: 2,
    name: "remember_by_index",
    sql: include_str!("../migrations/0002_remember_by_index.sql"),
};

/// A generation per subject's facts, kept by triggers, for the facts recall holds in memory:
/// libSQL's 4, SQLite's 3.
const FACT_GENERATIONS: Migration = Migration {
    version: 4,
    name: "fact_generations",
    sql: include_str!("../migrations/fact_generations.sql"),
};

/// Each fact version's provenance and valid time: libSQL's 5, SQLite's 4.
const FACT_PROVENANCE: Migration = Migration {
    version: 5,
    name: "fact_provenance",
    sql: include_str!("../migrations/fact_provenance.sql"),
};

/// The namespaces' change feeds: libSQL's 6, SQLite's 5.
const CHANGE_FEED: Migration = Migration {
    version: 6,
    name: "change_feed",
    sql: include_str!("../migrations/change_feed.sql"),
};

/// Creates the ledger of applied migrations when missing.
pub const CREATE_LEDGER: &str = "CREATE TABLE IF NOT EXISTS agent_memory_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    checksum   TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
)";

/// What the ledger records: `version, checksum`, oldest first.
pub const RECORDED: &str = "SELECT version, checksum FROM agent_memory_migrations ORDER BY version";

/// Records a migration: `?1` version, `?2` name, `?3` checksum, `?4` applied at (milliseconds).
pub const RECORD: &str = "INSERT INTO agent_memory_migrations (version, name, checksum, applied_at)
    VALUES (?1, ?2, ?3, ?4)";

/// One row when the database has a ledger.
pub const LEDGER_EXISTS: &str =
    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'agent_memory_migrations'";

/// The schema version the ledger records (NULL when it records none).
pub const SCHEMA_VERSION: &str = "SELECT max(version) FROM agent_memory_migrations";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_schemas_number_their_migrations_from_one_without_gaps() {
        for schema in [SQLITE, LIBSQL] {
            let versions: Vec<u32> = schema.iter().map(|m| m.version).collect();
            assert_eq!(versions, (1..=schema.len() as u32).collect::<Vec<_>>());
        }
    }

    #[test]
    fn released_migrations_keep_their_checksums() {
        // What databases made by earlier releases recorded: a changed byte refuses to open them.
        let released = [
            (
                SQLITE[0],
                "e650daccb37755a279823007824fbc9013022b5a7b84f79cefce9a257efe41a5",
            ),
            (
                LIBSQL[0],
                "ed21260cedbee978fd30d61bb57ea4a15f87c000ae4e94c250e6ebfdaeaeb2e8",
            ),
            (
                SQLITE[1],
                "522ae8d5fd16bfda4e49ed16d98a2a78ea3bf77985bbc2855f58f462ecdbf298",
            ),
            (
                LIBSQL[1],
                "522ae8d5fd16bfda4e49ed16d98a2a78ea3bf77985bbc2855f58f462ecdbf298",
            ),
            (
                LIBSQL[2],
                "770f6a548a304f19f62e7d73598e6c37b9669fca31bf06daa405e6044cd1ae3e",
            ),
        ];
        for (migration, checksum) in released {
            assert_eq!(migration.checksum(), checksum, "{}", migration.name);
        }
    }
}
