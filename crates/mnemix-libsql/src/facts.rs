//! Facts, as the SQLite family writes them once (`mnemix_sqlite_sql::family::store`), each call
//! in a read or write transaction of this store
//! ([`FamilyStore`](mnemix_sqlite_sql::family::store::FamilyStore)).

mnemix_sqlite_sql::fact_store!(crate::LibsqlStore);
