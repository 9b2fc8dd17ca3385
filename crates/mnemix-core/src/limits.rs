//! The limits a user can rely on, in one place. Each is enforced the same way on every backend
//! (the front layer and the types check them before a backend is called), and each has a
//! conformance scenario in `mnemix-conformance` that every backend runs.
//!
//! | what | limit | past it | scenario |
//! |---|---|---|---|
//! | identifiers (ids, keys, subjects, namespaces, names) | 1..=[`MAX_ID_BYTES`] bytes (256) of UTF-8, no NUL | `InvalidInput` | `payload::identifiers_at_the_length_limit_round_trip` |
//! | JSON nesting (metadata, tool arguments and results, working memory, checkpoint state, vector metadata) | [`MAX_JSON_DEPTH`] levels (100) | `InvalidInput` at write; what is accepted reads back exactly | `payload::json_deeper_than_the_limit_is_refused_and_the_limit_round_trips` |
//! | free text (messages, facts, vector text) | any UTF-8, NUL included; tested at 1 MiB | — | `payload::one_mebibyte_text_round_trips` |
//! | vector dimensions | 1..=[`MAX_DIMS`] (16,000) on every backend | `InvalidInput` at `ensure_collection` | `vectors::wide_collections_up_to_the_dimension_limit_are_searched` |
//! | vector components | finite `f32`, subnormals included; Euclidean norm at most √[`MAX_SQUARED_NORM`] ≈ 1.8e19; not all zero under cosine | `InvalidInput` | `vectors::scores_stay_finite_and_in_range_at_float_edges`, `vectors::upsert_rejects_nan_and_infinity`, `vectors::zero_vector_is_rejected_only_under_cosine` |
//! | scores | always finite: cosine in [-1, 1] (exactly 1 for a vector against itself), Euclidean in (0, 1], dot at most `f32::MAX` in size | — | `vectors::scores_stay_finite_and_in_range_at_float_edges` |
//! | search `k` | 1..=[`MAX_TOP_K`] (1,000) | `InvalidInput` | `vectors::top_k_and_filter_depth_hold_at_their_limits` |
//! | seqs per `load_seqs` | at most [`MAX_LOAD_SEQS`] (1,000) | `InvalidInput` | `conversations::load_seqs_reads_scattered_messages_as_stored` |
//! | ids per `set_expiry` | at most [`MAX_EXPIRY_BATCH`] (1,000) | `InvalidInput` | `facts::set_expiry_many_changes_only_live_facts_of_the_scope` |
//! | keys per cache batch (`cache_get_many`, `cache_set_many`) | at most [`MAX_CACHE_BATCH`] (1,000) | `InvalidInput` | `cache::batches_read_and_write_like_single_calls` |
//! | page size | 1..=[`MAX_PAGE_SIZE`] (1,000), default [`DEFAULT_PAGE_SIZE`] | `InvalidInput` | `payload::identifiers_at_the_length_limit_round_trip` |
//! | filter nesting | [`MAX_FILTER_DEPTH`] levels of `and`/`or`/`not` (32) | `InvalidInput` | `vectors::top_k_and_filter_depth_hold_at_their_limits` |
//! | memory kinds (structured memories) | identifiers of at most [`MAX_KIND_NAME_BYTES`] (120), no `:`, not starting with `_` | `InvalidInput` at register | `memories::kinds_and_ids_never_share_a_key` |
//! | memory ids | identifiers of at most [`MAX_MEMORY_ID_BYTES`] (120) | `InvalidInput` | `memories::kinds_and_ids_never_share_a_key` |
//! | kind schemas and memory data | [`MAX_JSON_DEPTH`] levels, as other JSON; `unique_on` fields declared and required by the schema | `InvalidInput` at register and at store; what is accepted reads back exactly | `memories::schemas_and_data_at_the_depth_limit_read_back`, `memories::kind_rules_hold_at_register_and_kinds_can_be_deleted` |
//! | reserved names | a fact kind, key or tag starting with [`RESERVED_PREFIX`] (`_`) is the registry's alone | `InvalidInput` on `remember` and `restore` | `memories::registry_records_are_written_by_the_registry_alone` |
//! | restored records | the rules of the writes that made them: facts as `remember`, a conversation's message seqs one contiguous run ending at its last seq | `InvalidInput`, nothing of the batch written | `transfer::restore_refuses_what_the_write_api_refuses` |
//! | lexical tokens | NFKC, lowercased, at least [`MIN_TOKEN_CHARS`] characters | shorter tokens are ignored | `facts::recall_matches_every_unicode_normal_form`, `facts::recall_ignores_short_tokens_and_splits_on_punctuation` |
//!
//! Per backend, beyond these: PostgreSQL with HNSW indexes collections of at most 2,000
//! dimensions (pgvector's limit for `vector`) and searches wider ones exactly, with the same
//! answers; every other backend searches every width the same way it searches narrow ones.

pub use crate::cache::MAX_CACHE_BATCH;
pub use crate::conversation::MAX_LOAD_SEQS;
pub use crate::fact::{DEFAULT_RECALL_LIMIT, MAX_EXPIRY_BATCH};
pub use crate::filter::MAX_FILTER_DEPTH;
pub use crate::message::MAX_JSON_DEPTH;
pub use crate::page::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};
pub use crate::scope::MAX_ID_BYTES;
pub use crate::similarity::MAX_SQUARED_NORM;
pub use crate::vector::{MAX_DIMS, MAX_TOP_K};

/// Shortest token kept by lexical recall, in characters.
pub const MIN_TOKEN_CHARS: usize = 3;
/// The longest kind name, in bytes (a memory's key is its kind, `:`, and its id).
pub const MAX_KIND_NAME_BYTES: usize = 120;
/// The longest memory id, in bytes.
pub const MAX_MEMORY_ID_BYTES: usize = 120;
/// What starts every reserved kind, key and tag: the registry's records use them, and no other
/// fact may.
pub const RESERVED_PREFIX: char = '_';
