#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]

pub mod adapter;
pub mod backend;
pub mod cache;
pub mod capabilities;
pub mod checkpoint;
pub mod continuation;
pub mod conversation;
pub mod descriptor;
pub mod embed;
pub mod error;
pub mod exact;
pub mod fact;
pub mod filter;
pub mod front;
pub mod handle;
pub mod in_memory;
pub mod lexical;
pub mod limits;
pub mod message;
pub mod migration;
pub mod page;
pub mod registry;
pub mod sanitize;
pub mod scope;
pub mod similarity;
pub mod store;
pub mod time;
pub mod transfer;
pub mod url;
pub mod vector;
pub mod working;

pub use backend::{DeletionReceipt, MemoryBackend, NamespaceReceipt};
pub use cache::{CacheStore, MAX_CACHE_BATCH};
pub use capabilities::{Capabilities, Durability, VectorIndexKind, VectorSearch};
pub use checkpoint::{
    Checkpoint, CheckpointStatus, CheckpointStore, CheckpointUpdate, NewCheckpoint,
};
pub use continuation::{
    assert_valid_continuation, validate_continuation, ContinuationError, ContinuationOptions,
    RejectionCode, Verdict,
};
pub use conversation::{
    plan_append, AppendOptions, AppendPlan, AppendReceipt, Conversation, ConversationQuery,
    ConversationStore, ConversationUpdate, LoadOptions, NewConversation, MAX_LOAD_SEQS,
};
pub use error::{BoxError, MemoryError, Result};
pub use fact::{
    Fact, FactQuery, FactSource, FactStore, NewFact, RecallQuery, RememberOptions, RememberOutcome,
    RememberStatus, ScoredFact, MAX_EXPIRY_BATCH,
};
pub use filter::{FieldPath, Filter, FilterValue};
pub use front::{Checked, RetryPolicy, DEFAULT_SERVER_TIMEOUT};
pub use handle::{ConversationHandle, Facts, Scoped, Vectors, WorkingMemoryHandle};
pub use in_memory::InMemoryBackend;
pub use message::{FileSource, Message, Metadata, Part, Role, StoredMessage, MAX_JSON_DEPTH};
pub use page::Page;
pub use sanitize::{is_replay_safe, sanitize_conversation};
pub use scope::{
    CheckpointId, ConversationId, FactId, MessageId, Namespace, Scope, Subject, VectorId,
};
pub use similarity::Metric;
pub use store::Store;
pub use time::{Clock, ManualClock, SystemClock, Timestamp, Ttl};
pub use transfer::{Record, RecordKind, TransferStore};
pub use vector::{
    CollectionSpec, VectorHit, VectorQuery, VectorRecord, VectorSelector, VectorStore,
};
pub use working::{
    WorkingMemory, WorkingMemoryFormat, WorkingMemoryKey, WorkingMemoryStore, WorkingMemoryUpdate,
};
