//! mnemix for [rig](https://docs.rs/rig-core): rig's conversation memory and vector
//! stores on any mnemix backend — SQLite, PostgreSQL, Redis, libSQL or your own.
//!
//! Built against **rig-core 0.44** (rig's agent runtime is rig-agent 0.44), the newest release
//! that builds on this workspace's Rust (rig 0.45 and later need a newer compiler than the
//! `rust-version` we support).
//!
//! - [`ConversationHistory`] is rig's [`ConversationMemory`](rig_core::memory::ConversationMemory)
//!   over our conversations: give it to an agent with `AgentBuilder::memory(..)`.
//! - [`VectorIndex`] is rig's [`VectorStoreIndex`](rig_core::vector_store::VectorStoreIndex)
//!   and [`InsertDocuments`](rig_core::vector_store::InsertDocuments) over one of our vector
//!   collections; rig's filters become our filter AST ([`to_filter`]).
//! - [`embedding_model`] makes any of our embedders a rig embedding model.
//!
//! Every value here is bound to one scope (namespace and subject) when it is made, from a
//! [`Scoped`](mnemix_core::Scoped) handle: an agent's conversation ids and queries cannot
//! reach another tenant's data.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = mnemix::open("sqlite::memory:").await?;
//! let history = mnemix_rig::ConversationHistory::new(store.scope("support", "user-42")?);
//! // rig_agent::AgentBuilder::new(model).memory(history).conversation("thread-1").build()
//! # let _ = history;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

mod conversation;
mod embedding;
mod message;
mod vector;

pub use conversation::ConversationHistory;
pub use embedding::embedding_model;
pub use message::{to_rig_history, to_stored, RIG_MESSAGE_KEY};
pub use vector::{to_filter, VectorIndex};
