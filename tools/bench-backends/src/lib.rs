//! The sides of the SQLite, PostgreSQL and Redis benchmarks: each backend's raw driver doing
//! the same statements as the store, and its vector peers (sqlite-vec, raw pgvector SQL).
//!
//! The harness they plug into is `mnemix-bench`; the binaries here are `bench` (the workloads
//! of these three backends, and `mnemix-bench-libsql`'s run merged into one report) and
//! `bench-data` (the corpus and its embeddings). Run them through `cargo xtask bench`.

pub mod inspector;
pub mod postgres;
pub mod recall;
pub mod redis;
pub mod sqlite;
