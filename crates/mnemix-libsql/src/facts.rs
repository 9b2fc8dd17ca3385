//! Facts, as the SQLite family writes them once (`mnemix_sqlite_family::family::store`), each call
//! in a read or write transaction of this store
//! ([`FamilyStore`](mnemix_sqlite_family::family::store::FamilyStore)).

mnemix_sqlite_family::fact_store!(crate::LibsqlStore);
