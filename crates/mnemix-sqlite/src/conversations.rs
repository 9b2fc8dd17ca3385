//! Conversations, their messages and cursors, and export and restore, as the SQLite family
//! writes them once (`mnemix_sqlite_family::family::store`) on this store's connections: an append
//! in the write group (`BEGIN IMMEDIATE` riding in its read, `COMMIT` in its write), a load in
//! one statement on a reader, an export in one read transaction.

mnemix_sqlite_family::conversation_store!(crate::SqliteStore);
mnemix_sqlite_family::transfer_store!(crate::SqliteStore);
