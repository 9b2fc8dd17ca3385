//! The small keyed documents: working memory, checkpoints and the byte cache, as the SQLite
//! family writes them once (`mnemix_sqlite_family::family::store`), each call in a read or
//! write transaction of this store.

mnemix_sqlite_family::document_stores!(crate::LibsqlStore);
