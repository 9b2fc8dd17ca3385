//! For those writing a backend: the helpers an adapter calls, in one place.
//!
//! The front layer ([`Checked`](crate::Checked)) has already checked every argument an adapter
//! receives (see its docs for what remains the adapter's own). What stays — storing, reading,
//! atomicity, isolation by scope — is the adapter's, and the decisions every backend must take
//! identically are written once here for it to call:
//!
//! | helper | what it decides |
//! |---|---|
//! | [`plan_append`] | an append under its lock or transaction: idempotency by message id, compare-and-append, seqs |
//! | [`WorkingMemoryUpdate::apply`](crate::WorkingMemoryUpdate::apply), [`CheckpointUpdate::apply_to`](crate::CheckpointUpdate::apply_to) | fenced writes against the stored revision or version |
//! | [`plan_remember`] | a remember over the scope's facts: dedupe, supersede, `max_facts` eviction |
//! | [`rank_facts`], [`rank_candidates`], [`closed_valid_until`], [`eviction_order`], [`fact_tokens`], [`order_history`] | lexical/semantic/hybrid recall (over whole facts, or over what a token index tells of them), the valid time a supersede closes, the eviction order, what to index, the order of a key's versions |
//! | [`HeldFacts`], [`HeldChange`] | a subject's current facts held per version, ranked there, a writer's change applied after its commit |
//! | [`rank_hits`], [`ExactIndex`], [`TopK`], [`MatrixCache`], [`tie_across_k`], [`Filter::matches`](crate::Filter::matches) | vector order and ties, exact top-k (over a matrix, or over a scan as it streams), a scan's matrix kept per version of the data, when an index's ties need settling, what a filter means |
//! | [`page_newest_first`], [`Cursor`] | keyset paging of newest-first listings |
//! | [`NewConversation::into_conversation`](crate::NewConversation::into_conversation), [`NewFact::into_fact`](crate::NewFact::into_fact), [`NewCheckpoint::into_checkpoint`](crate::NewCheckpoint::into_checkpoint) | the records a create makes |
//! | [`sort_canonical`] | the order of an export and of a restore |
//! | [`migration`](crate::migration) | embedded SQL migrations: checksums, which to apply, newer or edited schemas refused |
//! | [`url`](crate::url) | `?param=` options in URLs, passwords hidden in messages |
//! | [`encode_f32_le`], [`decode_f32_le`] | vectors as little-endian bytes |
//! | [`cosine`], [`dot`], [`norm`], [`l2_squared`], … | the similarity kernels every backend scores with |
//! | [`check_vector`], [`SeenCollections`] | a vector against its collection, collections known to exist |
//! | [`check_page`], [`page_limit`] | a listing's page size (its cursor: the query's `after`) |

pub use crate::backend::forget_namespace_records;
pub use crate::conversation::{plan_append, AppendPlan};
pub use crate::exact::{
    decode_f32_le, encode_f32_le, tie_across_k, ExactIndex, MatrixCache, TopK, Weighed,
};
pub use crate::fact::{
    closed_valid_until, eviction_order, fact_tokens, order_history, plan_remember, rank_candidates,
    rank_facts, reciprocal_rank_fusion, RecallCandidate, RememberPlan, RRF_K,
};
pub use crate::front::FrontLayerOnly;
pub use crate::held::{
    held_facts_cache, held_key, HeldChange, HeldFact, HeldFacts, HeldFactsCache,
};
pub use crate::page::{check_page, page_limit, page_newest_first, Cursor};
pub use crate::records::sort_canonical;
pub use crate::similarity::{cosine, dot, dot_f64, l2_squared, norm};
pub use crate::vector::{check_vector, rank_hits, SeenCollections};
