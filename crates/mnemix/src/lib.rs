//! Agent memory for Rust: conversation history, working memory, learned facts and vector recall
//! on the database a team already runs, picked by URL.
//!
//! One dependency, one call: [`open`] (or [`from_env`], which reads `MNEMIX_URL`) returns a
//! [`Store`] for `sqlite://`, `postgres://`, `redis://`, `redis+cluster://`, `file:`/`libsql://`
//! or `memory://`, with its schema migrated. Every call goes through the front layer
//! ([`Checked`]): input checks, one retry policy and sanitized loads, the same on every backend.
//!
//! ```
//! use mnemix::prelude::*;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! # let dir = tempfile::tempdir().unwrap();
//! # std::env::set_var("MNEMIX_URL", format!("sqlite://{}/memory.db", dir.path().display()));
//! // sqlite://./memory.db here; postgres://… or redis://… in production: no code changes.
//! let store = mnemix::from_env().await?;
//! let user = store.scope("support", "user-42")?;
//!
//! let thread = user.new_conversation().await?;
//! user.conversation(&thread.id).append([Message::user("My project is Foo")]).await?;
//! let window = user.conversation(&thread.id).load().last(10).await?;
//! assert_eq!(window.len(), 1);
//! # Ok::<(), MemoryError>(())
//! # }).unwrap();
//! ```
//!
//! # Features
//! `sqlite` and `engine` (default), `postgres`, `redis`, `redis-tls` (`rediss://`), `libsql`,
//! `libsql-remote`, `embed-http` (`embedders::OpenAiEmbedder`) and `embed-local`
//! (`embedders::LocalEmbedder`, and with `engine` the default embedder of `Memory` when the
//! model is installed: `MNEMIX_MODEL_DIR` or `~/.cache/mnemix/models/all-MiniLM-L6-v2`).
//! `sqlite` and `libsql` exclude each other: both link a SQLite C
//! library, so a libSQL build drops the default (`default-features = false, features =
//! ["libsql"]`).
//!
//! Everything of `mnemix-core` is re-exported here (the contracts, the model, the engine), so a
//! program depends on this crate alone; the backend crates are under [`backends`] for their own
//! builders and options.

#![deny(unsafe_code)]

#[cfg(all(feature = "sqlite", feature = "libsql"))]
compile_error!(
    "features `sqlite` and `libsql` of mnemix cannot be enabled together: sqlx's bundled \
     SQLite and libSQL both define the sqlite3_* C symbols, so they cannot link into one binary. \
     Use `default-features = false, features = [\"libsql\"]` for a libSQL build."
);

mod open;

// The contracts, their records and the front layer, by name: what a program that opens a store
// needs. What only an adapter needs (`adapter`, the ranking and SQL helpers) stays in
// `mnemix_core`.
/// The modules a program reaches into: descriptors (for [`register`]), embedders, the
/// handles' request builders, the limits, the kinds and grants, replay safety (sanitizing and
/// checking continuations), and export, restore and copy.
pub use mnemix_core::{changes, descriptor, embed, handle, limits, registry, replay, transfer};
pub use mnemix_core::{
    validate_identifier, AppendOptions, AppendReceipt, BoxError, CacheStore, Capabilities, Change,
    ChangeCursor, Checked, Checkpoint, CheckpointId, CheckpointStatus, CheckpointStore,
    CheckpointUpdate, Claim, Clock, CollectionSpec, Conversation, ConversationHandle,
    ConversationId, ConversationQuery, ConversationStore, ConversationUpdate, DeletionReceipt,
    Durability, Fact, FactId, FactQuery, FactSource, FactStore, Facts, FieldPath, FileSource,
    Filter, FilterValue, InMemoryBackend, LoadOptions, ManualClock, MemoryBackend, MemoryError,
    Message, MessageId, Metadata, Metric, Namespace, NamespaceReceipt, NewCheckpoint,
    NewConversation, NewFact, Operation, Origin, Page, Part, Principal, PrincipalKind, Provenance,
    RecallQuery, RememberOptions, RememberOutcome, RememberStatus, Result, Retention, RetryPolicy,
    Role, Scope, Scoped, ScoredFact, Store, StoredMessage, Subject, SystemClock, Timestamp,
    TransferStore, Ttl, VectorHit, VectorId, VectorIndexKind, VectorQuery, VectorRecord,
    VectorSearch, VectorSelector, VectorStore, Vectors, WorkingMemory, WorkingMemoryFormat,
    WorkingMemoryHandle, WorkingMemoryKey, WorkingMemoryStore, WorkingMemoryUpdate,
    DEFAULT_SERVER_TIMEOUT,
};
pub use open::{
    descriptor_for, descriptors, from_env, open, redacted, register, OpenOptions, DEFAULT_URL,
    URL_ENV,
};

/// The engine: `Memory` (prepare and commit an agent turn over any store), its `config`, the
/// provider `prompt_cache` and the working-memory tools.
#[cfg(feature = "engine")]
pub use mnemix_engine as engine;

/// The one list of the backends this crate knows. Each row: the feature that brings the
/// backend in, its crate (re-exported under [`backends`] by the row's name), the descriptors
/// `open` finds it by, and the URL schemes and forms the feature adds (for the message of a
/// build without it). Adding a backend is a row here and its feature in Cargo.toml.
macro_rules! backends {
    ($( $feature:literal => $name:ident = $krate:ident [$($descriptor:ident),+] $schemes:expr, $forms:literal; )*) => {
        /// The backend crates, for their own builders, configuration and operator functions.
        pub mod backends {
            $(
                #[cfg(feature = $feature)]
                pub use $krate as $name;
            )*
        }

        /// The descriptors of the backends this build has: the in-memory reference, then each
        /// enabled feature's.
        fn compiled_in() -> Vec<mnemix_core::descriptor::Descriptor> {
            vec![
                mnemix_core::InMemoryBackend::DESCRIPTOR,
                $($(
                    #[cfg(feature = $feature)]
                    $krate::$descriptor,
                )+)*
            ]
        }

        /// Every backend feature with the URL schemes and forms it adds.
        const FEATURES: &[(&str, &[&str], &str)] = &[$( ($feature, $schemes, $forms), )*];
    };
}

backends! {
    "sqlite" => sqlite = mnemix_sqlite [DESCRIPTOR] &["sqlite"], "sqlite://FILE";
    "postgres" => postgres = mnemix_postgres [DESCRIPTOR] &["postgres", "postgresql"], "postgres://";
    "redis" => redis = mnemix_redis [DESCRIPTOR, CLUSTER_DESCRIPTOR]
        &["redis", "rediss", "redis+cluster"], "redis://, rediss://, redis+cluster://";
    "libsql" => libsql = mnemix_libsql [DESCRIPTOR]
        &["libsql", "file", "http", "https"], "file:FILE, libsql://";
}

/// Embedders beyond the offline [`HashingEmbedder`](crate::embed::HashingEmbedder): an
/// OpenAI-compatible HTTP API (`embed-http`) and local sentence-transformers models
/// (`embed-local`).
#[cfg(any(feature = "embed-http", feature = "embed-local"))]
pub mod embedders {
    #[cfg(feature = "embed-local")]
    pub use mnemix_embed::LocalEmbedder;
    #[cfg(feature = "embed-http")]
    pub use mnemix_embed::{OpenAiChat, OpenAiChatBuilder, OpenAiEmbedder, OpenAiEmbedderBuilder};
}

/// What a program needs, in one `use mnemix::prelude::*;`.
pub mod prelude {
    pub use crate::{from_env, open, OpenOptions};
    pub use mnemix_core::{
        AppendOptions, CacheStore, CheckpointStore, CollectionSpec, ConversationId,
        ConversationStore, FactStore, Filter, LoadOptions, MemoryBackend, MemoryError, Message,
        NewConversation, NewFact, Origin, Principal, RecallQuery, RememberOptions, Role, Scope,
        Scoped, Store, Timestamp, TransferStore, Ttl, VectorQuery, VectorRecord, VectorStore,
        WorkingMemoryKey, WorkingMemoryStore, WorkingMemoryUpdate,
    };
}

/// The repository README's examples, compiled and run as doctests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
