//! The small keyed documents: working memory, checkpoints and the byte cache, as the SQLite
//! family writes them once (`mnemix_sqlite_family::family::store`), on this store's
//! connections: reads on a reader, single statements on the writer, read-then-write in a
//! write transaction.

mnemix_sqlite_family::document_stores!(crate::SqliteStore);
