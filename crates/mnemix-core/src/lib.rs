#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]

pub mod adapter;
mod backend;
mod cache;
mod capabilities;
pub mod changes;
mod checkpoint;
mod continuation;
mod conversation;
pub mod descriptor;
pub mod embed;
mod error;
mod exact;
mod fact;
mod filter;
mod front;
mod held;
mod in_memory;
pub mod lexical;
pub mod limits;
mod message;
pub mod migration;
mod page;
mod provenance;
mod records;
pub mod registry;
mod sanitize;
mod scope;
mod scoped;
mod similarity;
mod store;
mod time;
pub mod url;
mod vector;
mod working;

pub use backend::{DeletionReceipt, MemoryBackend, NamespaceReceipt};
pub use cache::CacheStore;
pub use capabilities::{Capabilities, Durability, VectorIndexKind, VectorSearch};
pub use changes::{Change, ChangeCursor, NewChange, Operation, Retention};
pub use checkpoint::{
    Checkpoint, CheckpointStatus, CheckpointStore, CheckpointUpdate, NewCheckpoint,
};
pub use conversation::{
    AppendOptions, AppendReceipt, Conversation, ConversationQuery, ConversationStore,
    ConversationUpdate, LoadOptions, NewConversation,
};
pub use error::{BoxError, MemoryError, Result};
pub use fact::{
    Fact, FactQuery, FactSource, FactStore, NewFact, RecallQuery, RememberOptions, RememberOutcome,
    RememberStatus, ScoredFact,
};
pub use filter::{FieldPath, Filter, FilterValue};
pub use front::{Checked, RetryPolicy, DEFAULT_SERVER_TIMEOUT};
pub use in_memory::InMemoryBackend;
pub use message::{FileSource, Message, Metadata, Part, Role, StoredMessage};
pub use page::Page;
pub use provenance::{Claim, Origin, Principal, PrincipalKind, Provenance, MAX_PRINCIPAL_BYTES};
pub use records::TransferStore;
pub use scope::{
    validate_identifier, CheckpointId, ConversationId, FactId, MessageId, Namespace, Scope,
    Subject, VectorId,
};
pub use scoped::{ConversationHandle, Facts, Scoped, Vectors, WorkingMemoryHandle};
pub use similarity::Metric;
pub use store::Store;
pub use time::{Clock, ManualClock, SystemClock, Timestamp, Ttl};
pub use vector::{
    CollectionSpec, VectorHit, VectorQuery, VectorRecord, VectorSelector, VectorStore,
};
pub use working::{
    WorkingMemory, WorkingMemoryFormat, WorkingMemoryKey, WorkingMemoryStore, WorkingMemoryUpdate,
};

pub mod transfer {
    //! Moving memory between stores: the [`TransferStore`](crate::TransferStore) contract, the
    //! [`Record`] every export is made of, the JSON Lines [`ExportHeader`], and
    //! [`copy`] / [`verify`] over any two backends.
    //!
    //! An export is verbatim: ids, sequence numbers, timestamps, revisions and versions are kept,
    //! so a restored store answers every read exactly as the source did. Derived data (the lexical
    //! index, vector caches) is rebuilt by the backend that restores.
    //!
    //! ```
    //! use mnemix_core::transfer::{copy, verify};
    //! use mnemix_core::{FactStore, InMemoryBackend, NewFact, RememberOptions, Scope};
    //! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    //! let source = InMemoryBackend::new();
    //! let scope = Scope::new("support", "user-42")?;
    //! source.remember(&scope, NewFact::new("prefers window seats"), RememberOptions::default()).await?;
    //!
    //! let target = InMemoryBackend::new();
    //! let report = copy(&source, &target, None, |_, _| {}).await?;
    //! assert_eq!(report.records, 1);
    //! assert!(verify(&source, &target, None).await?.is_empty()); // no unit differs
    //! # Ok::<(), mnemix_core::MemoryError>(())
    //! # }).unwrap();
    //! ```

    pub use crate::records::{
        as_restored_by, check_batch, copy, copy_units, plan, verify, verify_units, CopyReport,
        Digest, ExportHeader, ExportReader, ExportTrailer, ExportWriter, Mismatch, Record,
        RecordKind, Unit, FORMAT, FORMAT_VERSION,
    };
}

pub mod replay {
    //! Replay safety: what a model is sent back must be a history it could have produced.
    //! [`sanitize_conversation`] strips what a provider would refuse (a tool call without its
    //! result, a result without its call) from a window, as every load does by default;
    //! [`validate_continuation`] checks a history a client sends back against the stored one
    //! (nothing rewritten, forged or replayed), and [`assert_valid_continuation`] is the same as
    //! a `Result`.

    pub use crate::continuation::{
        assert_valid_continuation, validate_continuation, ContinuationError, ContinuationOptions,
        RejectionCode, Verdict,
    };
    pub use crate::sanitize::{is_replay_safe, sanitize_conversation};
}

pub mod handle {
    //! Calls that read well: handles bound to a scope, and requests whose options are builder
    //! methods, awaited directly.
    //!
    //! ```
    //! use mnemix_core::{InMemoryBackend, Message, Store};
    //!
    //! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    //! let store = Store::new(InMemoryBackend::new());
    //! let user = store.scope("support", "user-42")?;
    //!
    //! let thread = user.new_conversation().title("Billing").await?;
    //! let chat = user.conversation(&thread.id);
    //! chat.append([Message::user("I'm on the Pro plan")]).await?;
    //! let window = chat.load().last(10).await?;
    //! assert_eq!(window.len(), 1);
    //!
    //! user.facts().remember("Is on the Pro plan").key("plan").tags(["billing"]).await?;
    //! let recalled = user.facts().recall("which plan").limit(3).await?;
    //! assert_eq!(recalled[0].fact.text, "Is on the Pro plan");
    //! # Ok::<(), mnemix_core::MemoryError>(())
    //! # }).unwrap();
    //! ```
    //!
    //! The handles only call the contracts of the [`Store`](crate::Store) they come from, so every
    //! call still goes through the front layer; the option structs of the contracts (`AppendOptions`,
    //! `LoadOptions`, …) stay what an adapter implements against.
    //!
    //! The handles themselves ([`Scoped`](crate::Scoped) and those it gives) are at the root;
    //! this module holds the requests their methods return.

    pub use crate::scoped::{
        Append, CreateConversation, ListConversations, ListFacts, Load, Recall, Remember, Search,
    };
}
