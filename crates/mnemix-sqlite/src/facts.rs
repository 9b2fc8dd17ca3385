//! Facts, as the SQLite family writes them once (`mnemix_sqlite_family::family::store`), on this
//! store's connections ([`FamilyStore`](mnemix_sqlite_family::family::store::FamilyStore)): a
//! remember in the write group, a recall on a reader whose `BEGIN` and `COMMIT` ride in its
//! statements, single statements on a reader or the writer.

mnemix_sqlite_family::fact_store!(crate::SqliteStore);
