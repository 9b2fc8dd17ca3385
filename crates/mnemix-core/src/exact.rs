//! Exact top-k search over vectors laid out in one contiguous matrix, shared by every backend
//! that scans in Rust (SQLite, Redis) so they rank exactly like the reference.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::message::Metadata;
use crate::scope::{ConversationId, VectorId};
use crate::similarity::{cosine_with_squared_norms, dot, Metric};
use crate::vector::{VectorHit, VectorQuery, VectorRecord};

/// One scope's vectors of one collection, row-major in a single `Vec<f32>`, with their ids,
/// squared norms (for cosine) and metadata (for filters). One made by
/// [`holding_records`](Self::holding_records) also keeps each row's text and conversation, so a
/// search's hits are whole records ([`record`](Self::record)) without another read.
///
/// Scores are bit-identical to [`Metric::score`]: cosine uses the same squared norms, only
/// computed once per row instead of once per query.
///
/// ```
/// use mnemix_core::adapter::ExactIndex;
/// use mnemix_core::{Metadata, Metric, VectorId, VectorQuery};
/// let mut index = ExactIndex::new(2, Metric::Cosine);
/// index.push(VectorId::new("east")?, &[1.0, 0.0], Metadata::new());
/// index.push(VectorId::new("north")?, &[0.0, 1.0], Metadata::new());
/// let hits = index.search(&VectorQuery::new(vec![0.9, 0.1], 1));
/// assert_eq!(index.id(hits[0].0).as_str(), "east");
/// # Ok::<(), mnemix_core::MemoryError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ExactIndex {
    dims: usize,
    metric: Metric,
    ids: Vec<VectorId>,
    data: Vec<f32>,
    squared_norms: Vec<f32>,
    metadata: Vec<Metadata>,
    /// Each row's text and conversation, when the index holds records.
    payloads: Option<Vec<Payload>>,
}

/// What a record holds besides its id, vector and metadata.
#[derive(Debug, Clone, Default, PartialEq)]
struct Payload {
    text: Option<String>,
    conversation_id: Option<ConversationId>,
}

impl Payload {
    fn of(record: &VectorRecord) -> Self {
        Self {
            text: record.text.clone(),
            conversation_id: record.conversation_id.clone(),
        }
    }
}

impl ExactIndex {
    /// An empty index for vectors of `dims` components compared by `metric`.
    pub fn new(dims: usize, metric: Metric) -> Self {
        Self {
            dims,
            metric,
            ids: Vec::new(),
            data: Vec::new(),
            squared_norms: Vec::new(),
            metadata: Vec::new(),
            payloads: None,
        }
    }

    /// An empty index that also keeps each row's text and conversation: rows are added with
    /// [`push_record_le_bytes`](Self::push_record_le_bytes) or [`upsert`](Self::upsert), and
    /// [`record`](Self::record) hands a row back whole.
    pub fn holding_records(dims: usize, metric: Metric) -> Self {
        Self {
            payloads: Some(Vec::new()),
            ..Self::new(dims, metric)
        }
    }

    /// Adds a row; `vector` must have `dims` components (checked when it was stored).
    pub fn push(&mut self, id: VectorId, vector: &[f32], metadata: Metadata) {
        debug_assert!(
            self.payloads.is_none(),
            "a record index takes whole records"
        );
        self.push_row(id, vector, metadata, Payload::default());
    }

    fn push_row(&mut self, id: VectorId, vector: &[f32], metadata: Metadata, payload: Payload) {
        debug_assert_eq!(vector.len(), self.dims);
        self.squared_norms.push(dot(vector, vector));
        self.data.extend_from_slice(vector);
        self.ids.push(id);
        self.metadata.push(metadata);
        if let Some(payloads) = &mut self.payloads {
            payloads.push(payload);
        }
    }

    /// Adds a row from a little-endian `f32` blob (see [`decode_f32_le`]) without an
    /// intermediate `Vec`.
    pub fn push_le_bytes(&mut self, id: VectorId, bytes: &[u8], metadata: Metadata) {
        debug_assert!(
            self.payloads.is_none(),
            "a record index takes whole records"
        );
        self.push_le_bytes_row(id, bytes, metadata);
    }

    fn push_le_bytes_row(&mut self, id: VectorId, bytes: &[u8], metadata: Metadata) {
        let start = self.data.len();
        self.data.extend(f32_le_iter(bytes));
        debug_assert_eq!(self.data.len() - start, self.dims);
        let row = &self.data[start..];
        self.squared_norms.push(dot(row, row));
        self.ids.push(id);
        self.metadata.push(metadata);
    }

    /// Adds a whole record's row to an index [holding records](Self::holding_records), its
    /// vector as a little-endian `f32` blob.
    pub fn push_record_le_bytes(
        &mut self,
        id: VectorId,
        bytes: &[u8],
        metadata: Metadata,
        text: Option<String>,
        conversation_id: Option<ConversationId>,
    ) {
        debug_assert!(self.payloads.is_some(), "only a record index keeps records");
        self.push_le_bytes_row(id, bytes, metadata);
        if let Some(payloads) = &mut self.payloads {
            payloads.push(Payload {
                text,
                conversation_id,
            });
        }
    }

    /// Adds a whole record's row to an index [holding records](Self::holding_records).
    pub fn push_record(&mut self, record: VectorRecord) {
        debug_assert!(self.payloads.is_some(), "only a record index keeps records");
        let payload = Payload {
            text: record.text,
            conversation_id: record.conversation_id,
        };
        self.push_row(record.id, &record.vector, record.metadata, payload);
    }

    /// Row `row` as a whole record — its vector too when `with_vector`, else an empty one — if
    /// the index [holds records](Self::holding_records).
    pub fn record(&self, row: usize, with_vector: bool) -> Option<VectorRecord> {
        let payload = self.payloads.as_ref()?.get(row)?;
        Some(VectorRecord {
            id: self.ids[row].clone(),
            vector: if with_vector {
                self.data[row * self.dims..(row + 1) * self.dims].to_vec()
            } else {
                Vec::new()
            },
            text: payload.text.clone(),
            metadata: self.metadata[row].clone(),
            conversation_id: payload.conversation_id.clone(),
        })
    }

    /// Whether the index keeps whole records ([`holding_records`](Self::holding_records)).
    pub fn holds_records(&self) -> bool {
        self.payloads.is_some()
    }

    /// The index after an upsert of `records` (checked against the collection): rows with
    /// their ids are replaced, the others added; a repeated id ends as its last record, as in
    /// the store.
    pub fn upsert(&mut self, records: &[VectorRecord]) {
        let mut pending: HashMap<&str, &VectorRecord> =
            records.iter().map(|r| (r.id.as_str(), r)).collect();
        for row in 0..self.len() {
            if let Some(record) = pending.remove(self.ids[row].as_str()) {
                let dims = self.dims;
                let slot = &mut self.data[row * dims..(row + 1) * dims];
                slot.copy_from_slice(&record.vector);
                self.squared_norms[row] = dot(&record.vector, &record.vector);
                self.metadata[row].clone_from(&record.metadata);
                if let Some(payloads) = &mut self.payloads {
                    payloads[row] = Payload::of(record);
                }
            }
        }
        // Added in the batch's order (the last of a repeated id), for a deterministic layout.
        for record in records {
            if let Some(last) = pending.remove(record.id.as_str()) {
                let payload = if self.payloads.is_some() {
                    Payload::of(last)
                } else {
                    Payload::default()
                };
                self.push_row(
                    last.id.clone(),
                    &last.vector,
                    last.metadata.clone(),
                    payload,
                );
            }
        }
    }

    /// The index after a delete of `ids`: their rows are removed (the row order changes).
    pub fn remove(&mut self, ids: &[VectorId]) {
        let ids: HashSet<&str> = ids.iter().map(VectorId::as_str).collect();
        let mut row = 0;
        while row < self.len() {
            if ids.contains(self.ids[row].as_str()) {
                self.swap_remove(row);
            } else {
                row += 1;
            }
        }
    }

    /// Removes row `row` by moving the last row into its place.
    fn swap_remove(&mut self, row: usize) {
        let dims = self.dims;
        let last = self.len() - 1;
        if row != last {
            self.data
                .copy_within(last * dims..(last + 1) * dims, row * dims);
        }
        self.data.truncate(last * dims);
        self.squared_norms.swap_remove(row);
        self.ids.swap_remove(row);
        self.metadata.swap_remove(row);
        if let Some(payloads) = &mut self.payloads {
            payloads.swap_remove(row);
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The id of row `row`.
    pub fn id(&self, row: usize) -> &VectorId {
        &self.ids[row]
    }

    /// Bytes held (for cache accounting): the matrix, norms, ids and texts; metadata estimated.
    pub fn approximate_bytes(&self) -> usize {
        let payloads = self.payloads.as_ref().map_or(0, |payloads| {
            payloads
                .iter()
                .map(|p| p.text.as_ref().map_or(0, String::len) + 48)
                .sum()
        });
        payloads
            + self.data.len() * 4
            + self.squared_norms.len() * 4
            + self
                .ids
                .iter()
                .map(|id| id.as_str().len() + 24)
                .sum::<usize>()
            + self.metadata.len() * 48
    }

    /// [`search`](Self::search)'s hits as whole records (vectors only when the query includes
    /// them), if the index [holds records](Self::holding_records).
    pub fn search_records(&self, query: &VectorQuery) -> Option<Vec<VectorHit>> {
        self.search(query)
            .into_iter()
            .map(|(row, score)| {
                let record = self.record(row, query.include_vectors)?;
                Some(VectorHit { record, score })
            })
            .collect()
    }

    /// The query's top `k` rows as `(row, score)`, best first (score descending, id ascending),
    /// only rows matching the filter and scoring at least `min_score`. The query must already
    /// be validated against the collection.
    pub fn search(&self, query: &VectorQuery) -> Vec<(usize, f32)> {
        let q = &query.vector;
        let q_squared = dot(q, q);
        let mut scored: Vec<(f32, usize)> = (0..self.len())
            .filter(|&row| {
                query
                    .filter
                    .as_ref()
                    .is_none_or(|f| f.matches(&self.metadata[row]))
            })
            .map(|row| {
                let v = &self.data[row * self.dims..(row + 1) * self.dims];
                let score = score(self.metric, q, q_squared, v, || self.squared_norms[row]);
                (score, row)
            })
            .filter(|(score, _)| query.min_score.is_none_or(|min| *score >= min))
            .collect();
        let order = |a: &(f32, usize), b: &(f32, usize)| {
            rank_order((a.0, self.ids[a.1].as_str()), (b.0, self.ids[b.1].as_str()))
        };
        if scored.len() > query.k {
            scored.select_nth_unstable_by(query.k - 1, order);
            scored.truncate(query.k);
        }
        scored.sort_by(order);
        scored
            .into_iter()
            .map(|(score, row)| (row, score))
            .collect()
    }
}

/// A row's score: cosine from the squared norms (the row's computed only for cosine), the other
/// metrics directly; every exact ranking scores through here, so all give the same bits.
fn score(
    metric: Metric,
    q: &[f32],
    q_squared: f32,
    v: &[f32],
    v_squared: impl FnOnce() -> f32,
) -> f32 {
    match metric {
        Metric::Cosine => cosine_with_squared_norms(q, v, q_squared, v_squared()),
        metric => metric.score(q, v),
    }
}

/// The order of every exact ranking, on `(score, id)`: score descending, then id ascending.
fn rank_order(a: (f32, &str), b: (f32, &str)) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1))
}

/// The best `k` rows of a scan offered one at a time, in [`ExactIndex::search`]'s order (score
/// descending, then id ascending) and with its scores bit for bit, holding only the `k` best:
/// a backend that streams a scan ranks it without holding the scan, and reads a row's id and
/// metadata only when its score could enter ([`could_enter`](Self::could_enter)).
///
/// ```
/// use mnemix_core::adapter::{encode_f32_le, TopK};
/// use mnemix_core::{Metric, VectorQuery};
/// let query = VectorQuery::new(vec![1.0, 0.0], 1);
/// let mut top = TopK::new(&query, Metric::Dot);
/// for (id, vector) in [("east", [1.0, 0.0]), ("north", [0.0, 1.0])] {
///     let score = top.score_le_bytes(&encode_f32_le(&vector)).expect("2 dims");
///     if top.could_enter(score) {
///         top.offer(score, id, id.len());
///     }
/// }
/// assert_eq!(top.into_ranked(), [(4, 1.0)], "east, by its payload");
/// ```
#[derive(Debug)]
pub struct TopK<T> {
    query: Vec<f32>,
    query_squared: f32,
    metric: Metric,
    k: usize,
    min_score: Option<f32>,
    /// A row's vector, decoded into the same buffer every time.
    row: Vec<f32>,
    /// The best rows so far; the greatest (the worst of them) on top.
    kept: std::collections::BinaryHeap<Kept<T>>,
}

#[derive(Debug)]
struct Kept<T> {
    score: f32,
    id: Box<str>,
    payload: T,
}

/// Worse is greater: the rank order.
impl<T> Ord for Kept<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        rank_order((self.score, &self.id), (other.score, &other.id))
    }
}

impl<T> PartialOrd for Kept<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> PartialEq for Kept<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl<T> Eq for Kept<T> {}

impl<T> TopK<T> {
    /// An empty ranking for `query` (validated against its collection, whose metric is
    /// `metric`); its filter is the caller's to apply, its `k` and `min_score` are applied here.
    pub fn new(query: &VectorQuery, metric: Metric) -> Self {
        Self {
            query_squared: dot(&query.vector, &query.vector),
            query: query.vector.clone(),
            metric,
            k: query.k,
            min_score: query.min_score,
            row: Vec::with_capacity(query.vector.len()),
            kept: std::collections::BinaryHeap::with_capacity(query.k.saturating_add(1)),
        }
    }

    /// The score of a row stored as a little-endian `f32` blob, or `None` when the blob does
    /// not hold the query's dimensions.
    pub fn score_le_bytes(&mut self, bytes: &[u8]) -> Option<f32> {
        if bytes.len() != self.query.len() * 4 {
            return None;
        }
        self.row.clear();
        self.row.extend(f32_le_iter(bytes));
        let (q, v) = (&self.query, &self.row);
        Some(score(self.metric, q, self.query_squared, v, || dot(v, v)))
    }

    /// Whether a row of `score` may enter the best `k` (if its id and filter allow): false
    /// rows need not be read further.
    pub fn could_enter(&self, score: f32) -> bool {
        if self.k == 0 || !self.min_score.is_none_or(|min| score >= min) {
            return false;
        }
        self.kept.len() < self.k
            || self
                .kept
                .peek()
                .is_none_or(|worst| score.total_cmp(&worst.score).is_ge())
    }

    /// Offers a row (one that [could enter](Self::could_enter) and matches the filter): it is
    /// kept if it ranks among the best `k` so far.
    pub fn offer(&mut self, score: f32, id: &str, payload: T) {
        if !self.could_enter(score) {
            return;
        }
        if self.kept.len() == self.k {
            let worst = self.kept.peek().expect("k > 0 rows kept");
            if rank_order((score, id), (worst.score, &worst.id)).is_ge() {
                return;
            }
            self.kept.pop();
        }
        self.kept.push(Kept {
            score,
            id: id.into(),
            payload,
        });
    }

    /// The rows kept, best first, as `(payload, score)`.
    pub fn into_ranked(self) -> Vec<(T, f32)> {
        self.kept
            .into_sorted_vec()
            .into_iter()
            .map(|kept| (kept.payload, kept.score))
            .collect()
    }
}

/// Matrices by key (a collection and a scope), each with the version of the stored data it was
/// read at, within a memory budget: a backend that scans in Rust reads a scope's matrix once per
/// version instead of once per query.
///
/// A backend keeps a version that every write of the records changes (SQLite a generation
/// bumped in the writing transaction, Redis a fresh token set by the writing script) and reads
/// it with the query; [`get`](Self::get) answers only for the same version, so a write by any
/// client is seen by the next search.
///
/// ```
/// use std::sync::Arc;
/// use mnemix_core::adapter::{ExactIndex, MatrixCache};
/// use mnemix_core::Metric;
/// let cache = MatrixCache::new(1 << 20);
/// cache.insert("notes/user-1", 7, Arc::new(ExactIndex::new(2, Metric::Cosine)));
/// assert!(cache.get(&"notes/user-1", &7).is_some());
/// assert!(cache.get(&"notes/user-1", &8).is_none(), "written since");
/// ```
///
/// It holds an [`ExactIndex`] by default, or anything else read per version of the data that
/// knows its size ([`Weighed`]): a scope's facts as recall ranks them, say.
#[derive(Debug)]
pub struct MatrixCache<K, V, T = ExactIndex> {
    budget: usize,
    state: std::sync::Mutex<CacheState<K, V, T>>,
}

/// What a [`MatrixCache`] holds: something that knows about how many bytes it takes.
pub trait Weighed {
    /// Bytes held, for the cache's budget.
    fn approximate_bytes(&self) -> usize;
}

impl Weighed for ExactIndex {
    fn approximate_bytes(&self) -> usize {
        ExactIndex::approximate_bytes(self)
    }
}

#[derive(Debug)]
struct CacheState<K, V, T> {
    entries: std::collections::HashMap<K, (V, Arc<T>)>,
    bytes: usize,
}

impl<K: Eq + std::hash::Hash, V: PartialEq, T: Weighed + Clone> MatrixCache<K, V, T> {
    /// A cache holding at most `budget` bytes of matrices (0 caches nothing).
    pub fn new(budget: usize) -> Self {
        Self {
            budget,
            state: std::sync::Mutex::new(CacheState {
                entries: std::collections::HashMap::new(),
                bytes: 0,
            }),
        }
    }

    /// The matrix of `key` if it was read at `version`.
    pub fn get(&self, key: &K, version: &V) -> Option<Arc<T>> {
        let state = self.state();
        let (cached, index) = state.entries.get(key)?;
        (cached == version).then(|| Arc::clone(index))
    }

    /// The matrix `key` holds and the version it was read at, whatever the current one: for
    /// a backend that checks the version and reads the data in one request.
    pub fn latest(&self, key: &K) -> Option<(V, Arc<T>)>
    where
        V: Clone,
    {
        let state = self.state();
        let (version, index) = state.entries.get(key)?;
        Some((version.clone(), Arc::clone(index)))
    }

    /// Keeps `key`'s matrix current through a write that took the stored data from version
    /// `from` to `to` and changed `key`'s rows by `change` (the same change the store made,
    /// e.g. [`ExactIndex::upsert`]): if the matrix held is at `from`, it was the data just
    /// before the write, so after `change` it is the data at `to`. Otherwise nothing changes and
    /// the next search reads the data again. The writer's own next search, the common case of
    /// an agent's turn, then needs no read of the whole scope.
    ///
    /// The versions must change with every write (each one atomic), as [`get`](Self::get)
    /// requires anyway.
    pub fn advance(&self, key: &K, from: &V, to: V, change: impl FnOnce(&mut T)) {
        let mut state = self.state();
        let state = &mut *state;
        let Some((version, index)) = state.entries.get_mut(key) else {
            return;
        };
        if version != from {
            return;
        }
        let before = index.approximate_bytes();
        // In place unless a search holds this matrix right now; then on a copy.
        change(Arc::make_mut(index));
        *version = to;
        state.bytes = state.bytes - before + index.approximate_bytes();
        if state.bytes > self.budget {
            // Grown past the budget: read again when next searched.
            if let Some((_, index)) = state.entries.remove(key) {
                state.bytes -= index.approximate_bytes();
            }
        }
    }

    /// Moves every matrix at version `from` whose key `unchanged` accepts to version `to`: for
    /// a store whose one version covers several keys (SQLite's generation per collection), the
    /// keys a write at `from` did not touch hold the data at `to` as they are.
    pub fn carry(&self, from: &V, to: &V, unchanged: impl Fn(&K) -> bool)
    where
        V: Clone,
    {
        let mut state = self.state();
        for (key, (version, _)) in &mut state.entries {
            if version == from && unchanged(key) {
                *version = to.clone();
            }
        }
    }

    /// Keeps `index` as `key`'s matrix at `version`, unless it alone exceeds the budget.
    pub fn insert(&self, key: K, version: V, index: Arc<T>) {
        let bytes = index.approximate_bytes();
        if bytes > self.budget {
            return;
        }
        let mut state = self.state();
        if let Some((_, old)) = state.entries.remove(&key) {
            state.bytes -= old.approximate_bytes();
        }
        if state.bytes + bytes > self.budget {
            // The simplest bounded policy: start over rather than track recency.
            state.entries.clear();
            state.bytes = 0;
        }
        state.entries.insert(key, (version, index));
        state.bytes += bytes;
    }

    /// Forgets `key`'s entry (its data was erased: nothing of it is kept in memory either).
    pub fn remove(&self, key: &K) {
        let mut state = self.state();
        if let Some((_, index)) = state.entries.remove(key) {
            state.bytes -= index.approximate_bytes();
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, CacheState<K, V, T>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The matrices of a store that keeps one generation per collection, bumped by exactly one in
/// each write transaction that changes the collection's vectors (SQLite, libSQL), keyed by
/// `(collection, subject)`.
impl<C: Eq + std::hash::Hash + Clone> MatrixCache<(C, String), i64> {
    /// After a committed write that took `collection` from generation `from` to `from + 1` and
    /// changed only `subject`'s rows by `change` (as [`advance`](Self::advance)): the subject's
    /// held matrix takes the change, and the collection's other subjects' held matrices,
    /// untouched, move to the new generation as they are. So neither the writer's next search
    /// nor another subject's reads the rows again. A write that changed several subjects' rows
    /// only bumps the generation, and their next searches read them again.
    pub fn written_by_subject(
        &self,
        collection: &C,
        subject: &str,
        from: i64,
        change: impl FnOnce(&mut ExactIndex),
    ) {
        let to = from + 1;
        self.advance(&(collection.clone(), subject.to_owned()), &from, to, change);
        // Not the written subject: a matrix of it read before the write, and kept after the
        // advance above, is not the data at `to`.
        self.carry(&from, &to, |(pk, other)| {
            pk == collection && other != subject
        });
    }
}

/// Whether hits ranked best first (at least `k + 1` of them asked for) tie across the `k`-th
/// place. An approximate index chose among the equal rows, not necessarily the smallest ids
/// that the exact order keeps: the answer must then be settled by an exact ranking.
pub fn tie_across_k<T>(hits: &[(T, f32)], k: usize) -> bool {
    k > 0 && hits.len() > k && hits[k].1.total_cmp(&hits[k - 1].1).is_eq()
}

/// Encodes a vector as little-endian `f32`s (4 bytes each): the storage format of every backend
/// that keeps vectors as blobs.
pub fn encode_f32_le(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Decodes [`encode_f32_le`]; trailing bytes that do not make a whole `f32` are ignored.
pub fn decode_f32_le(bytes: &[u8]) -> Vec<f32> {
    f32_le_iter(bytes).collect()
}

fn f32_le_iter(bytes: &[u8]) -> impl Iterator<Item = f32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::Filter;

    fn id(s: &str) -> VectorId {
        VectorId::new(s).unwrap()
    }

    #[test]
    fn a_tie_across_k_is_one_between_the_kth_and_the_next() {
        let hits = [(0, 0.9), (1, 0.5), (2, 0.5), (3, 0.1)];
        assert!(tie_across_k(&hits, 2), "0.5 at places 2 and 3");
        assert!(!tie_across_k(&hits, 1), "0.9 then 0.5");
        assert!(
            !tie_across_k(&hits, 3),
            "a tie inside the top k needs no settling"
        );
        assert!(!tie_across_k(&hits, 4), "nothing past k");
        assert!(!tie_across_k(&hits, 0));
    }

    #[test]
    fn scores_equal_metric_score_bit_for_bit() {
        let rows: Vec<Vec<f32>> = (0..50)
            .map(|i| {
                (0..13)
                    .map(|j| ((i * 7 + j * 3) % 11) as f32 - 4.5)
                    .collect()
            })
            .collect();
        let q: Vec<f32> = (0..13).map(|j| (j % 5) as f32 - 1.25).collect();
        for metric in [Metric::Cosine, Metric::Dot, Metric::Euclidean] {
            let mut index = ExactIndex::new(13, metric);
            for (i, r) in rows.iter().enumerate() {
                index.push_le_bytes(id(&format!("r{i:02}")), &encode_f32_le(r), Metadata::new());
            }
            for (row, score) in index.search(&VectorQuery::new(q.clone(), 50)) {
                assert_eq!(score.to_bits(), metric.score(&q, &rows[row]).to_bits());
            }
        }
    }

    proptest::proptest! {
        /// A streamed ranking is the matrix's ranking: same rows, same order, same score bits,
        /// whatever the ties (few distinct components), `k` and `min_score`.
        #[test]
        fn top_k_ranks_a_stream_as_the_index_ranks_its_matrix(
            rows in proptest::collection::vec(proptest::collection::vec(-2i8..3, 3), 0..40),
            query in proptest::collection::vec(-2i8..3, 3),
            k in 1usize..12,
            min_score in proptest::option::of(-1.0f32..1.0),
        ) {
            let floats = |v: &Vec<i8>| v.iter().map(|x| f32::from(*x)).collect::<Vec<f32>>();
            let mut query = VectorQuery::new(floats(&query), k);
            query.min_score = min_score;
            for metric in [Metric::Cosine, Metric::Dot, Metric::Euclidean] {
                let mut index = ExactIndex::new(3, metric);
                let mut top = TopK::new(&query, metric);
                for (i, row) in rows.iter().enumerate() {
                    // Ids out of row order, so ties cannot break by position by accident.
                    let name = format!("r{:02}", (i * 7) % 41);
                    let bytes = encode_f32_le(&floats(row));
                    index.push_le_bytes(id(&name), &bytes, Metadata::new());
                    let score = top.score_le_bytes(&bytes).unwrap();
                    if top.could_enter(score) {
                        top.offer(score, &name, i);
                    }
                }
                let streamed: Vec<(usize, u32)> =
                    top.into_ranked().into_iter().map(|(i, s)| (i, s.to_bits())).collect();
                let matrix: Vec<(usize, u32)> =
                    index.search(&query).into_iter().map(|(i, s)| (i, s.to_bits())).collect();
                proptest::prop_assert_eq!(streamed, matrix);
            }
        }
    }

    #[test]
    fn a_blob_of_other_dimensions_has_no_score() {
        let mut top: TopK<()> = TopK::new(&VectorQuery::new(vec![1.0, 0.0], 1), Metric::Dot);
        assert_eq!(top.score_le_bytes(&encode_f32_le(&[1.0, 0.0, 0.0])), None);
        assert_eq!(top.score_le_bytes(&[0; 7]), None);
    }

    #[test]
    fn ties_break_by_id_and_filters_apply_before_k() {
        let mut index = ExactIndex::new(2, Metric::Dot);
        let mut keep = Metadata::new();
        keep.insert("keep".into(), true.into());
        index.push(id("b"), &[1.0, 0.0], Metadata::new());
        index.push(id("c"), &[1.0, 0.0], keep.clone());
        index.push(id("a"), &[1.0, 0.0], keep);
        let all = index.search(&VectorQuery::new(vec![1.0, 0.0], 2));
        let ids: Vec<&str> = all.iter().map(|(r, _)| index.id(*r).as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        let query = VectorQuery::new(vec![1.0, 0.0], 1).with_filter(Filter::eq("keep", true));
        assert_eq!(index.id(index.search(&query)[0].0).as_str(), "a");
    }

    #[test]
    fn the_cache_answers_only_for_the_version_read_and_stays_in_budget() {
        let matrix = |rows: usize| {
            let mut index = ExactIndex::new(4, Metric::Dot);
            for i in 0..rows {
                index.push(id(&format!("r{i}")), &[1.0, 2.0, 3.0, 4.0], Metadata::new());
            }
            Arc::new(index)
        };
        let one = matrix(10).approximate_bytes();
        let cache = MatrixCache::new(2 * one);
        cache.insert("a", 1, matrix(10));
        cache.insert("b", 1, matrix(10));
        assert!(cache.get(&"a", &1).is_some() && cache.get(&"b", &1).is_some());
        assert!(cache.get(&"a", &2).is_none(), "another version");
        cache.insert("a", 2, matrix(10));
        assert!(
            cache.get(&"a", &2).is_some(),
            "replaced in place, still in budget"
        );
        assert!(cache.get(&"b", &1).is_some());
        cache.insert("c", 1, matrix(10));
        assert!(cache.get(&"c", &1).is_some());
        assert!(
            cache.get(&"a", &2).is_none() && cache.get(&"b", &1).is_none(),
            "over budget: started over"
        );
        cache.insert("d", 1, matrix(30));
        assert!(
            cache.get(&"d", &1).is_none(),
            "larger than the budget alone"
        );
        assert!(MatrixCache::<_, _>::new(0).get(&"a", &1).is_none());
    }

    #[test]
    fn a_subjects_write_moves_its_collections_matrices_to_the_next_generation() {
        let cache = MatrixCache::new(1 << 20);
        let one = || Arc::new(built(&[record("x", 1.0, 0.0)]));
        let key = |pk: i64, subject: &str| (pk, subject.to_owned());
        cache.insert(key(1, "ada"), 3, one());
        cache.insert(key(1, "bob"), 3, one());
        cache.insert(key(1, "cy"), 2, one());
        cache.insert(key(2, "bob"), 3, one());
        cache.written_by_subject(&1, "ada", 3, |m| m.upsert(&[record("y", 0.0, 1.0)]));
        assert_eq!(
            cache.get(&key(1, "ada"), &4).map(|m| m.len()),
            Some(2),
            "took the write"
        );
        assert!(
            cache.get(&key(1, "bob"), &4).is_some(),
            "untouched: carried"
        );
        assert!(
            cache.get(&key(1, "cy"), &4).is_none(),
            "read at an older generation"
        );
        assert!(
            cache.get(&key(2, "bob"), &3).is_some(),
            "another collection: as it was"
        );
        cache.written_by_subject(&1, "bob", 2, |m| m.remove(&[id("x")]));
        assert!(
            cache.get(&key(1, "bob"), &4).is_some_and(|m| m.len() == 1),
            "not from 2"
        );
    }

    fn record(name: &str, x: f32, y: f32) -> VectorRecord {
        VectorRecord::new(id(name), vec![x, y])
    }

    fn built(records: &[VectorRecord]) -> ExactIndex {
        let mut index = ExactIndex::new(2, Metric::Cosine);
        for r in records {
            index.push(r.id.clone(), &r.vector, r.metadata.clone());
        }
        index
    }

    /// Every row, ranked, as `(id, score bits)`: equal for equal data whatever the row order.
    fn ranked(index: &ExactIndex) -> Vec<(String, u32)> {
        index
            .search(&VectorQuery::new(vec![0.3, 0.7], 100))
            .into_iter()
            .map(|(row, score)| (index.id(row).to_string(), score.to_bits()))
            .collect()
    }

    #[test]
    fn upsert_and_remove_leave_the_index_a_fresh_read_would_build() {
        let stored = [
            record("a", 1.0, 0.0),
            record("b", 0.0, 1.0),
            record("c", 0.5, 0.5),
            record("d", -1.0, 0.2),
        ];
        let mut index = built(&stored);
        let mut tagged = record("b", 0.9, 0.1);
        tagged.metadata.insert("tag".into(), "x".into());
        index.upsert(&[tagged.clone(), record("e", 0.2, 0.2), record("e", 0.1, 0.8)]);
        let after_upsert = [
            stored[0].clone(),
            tagged,
            stored[2].clone(),
            stored[3].clone(),
            record("e", 0.1, 0.8),
        ];
        assert_eq!(ranked(&index), ranked(&built(&after_upsert)));
        let filter = VectorQuery::new(vec![1.0, 0.0], 5).with_filter(Filter::eq("tag", "x"));
        assert_eq!(
            index.search(&filter).len(),
            1,
            "the metadata was replaced too"
        );
        index.remove(&[id("a"), id("e"), id("zz")]);
        assert_eq!(
            ranked(&index),
            ranked(&built(&[
                after_upsert[1].clone(),
                after_upsert[2].clone(),
                after_upsert[3].clone()
            ]))
        );
        index.remove(&[id("b"), id("c"), id("d")]);
        assert!(index.is_empty());
    }

    #[test]
    fn a_write_advances_only_a_matrix_at_the_version_it_started_from() {
        let cache = MatrixCache::new(1 << 20);
        cache.insert("s1", 1, Arc::new(built(&[record("a", 1.0, 0.0)])));
        cache.insert("s2", 1, Arc::new(built(&[record("b", 0.0, 1.0)])));
        let held = cache.get(&"s1", &1).unwrap();
        cache.advance(&"s1", &1, 2, |m| m.upsert(&[record("c", 0.5, 0.5)]));
        assert_eq!(cache.get(&"s1", &2).unwrap().len(), 2);
        assert_eq!(held.len(), 1, "a search holding the old matrix keeps it");
        cache.advance(&"s1", &1, 3, |m| m.upsert(&[record("d", 0.5, 0.5)]));
        assert!(
            cache.get(&"s1", &3).is_none() && cache.get(&"s1", &2).is_some(),
            "the matrix was not at the write's starting version: left as it was"
        );
        assert!(cache.get(&"s2", &2).is_none());
        cache.carry(&1, &2, |key| *key == "s2");
        assert!(cache.get(&"s2", &2).is_some(), "untouched by the write");
        let small = MatrixCache::new(built(&[record("a", 1.0, 0.0)]).approximate_bytes());
        small.insert("s", 1, Arc::new(built(&[record("a", 1.0, 0.0)])));
        small.advance(&"s", &1, 2, |m| m.upsert(&[record("b", 0.0, 1.0)]));
        assert!(
            small.get(&"s", &2).is_none() && small.get(&"s", &1).is_none(),
            "grown past the budget: dropped"
        );
    }

    #[test]
    fn blobs_round_trip() {
        let v = vec![1.5f32, -0.0, f32::MIN_POSITIVE, 3e38];
        assert_eq!(decode_f32_le(&encode_f32_le(&v)), v);
    }

    #[test]
    fn an_index_holding_records_hands_each_row_back_whole_through_writes() {
        let whole = |name: &str, x: f32, text: &str| VectorRecord {
            text: Some(text.to_owned()),
            conversation_id: Some(ConversationId::new(format!("c-{name}")).unwrap()),
            ..record(name, x, 1.0)
        };
        let mut index = ExactIndex::holding_records(2, Metric::Cosine);
        let a = whole("a", 1.0, "first");
        index.push_record_le_bytes(
            a.id.clone(),
            &encode_f32_le(&a.vector),
            a.metadata.clone(),
            a.text.clone(),
            a.conversation_id.clone(),
        );
        let (b, a2, c) = (
            whole("b", 2.0, "second"),
            whole("a", 3.0, "again"),
            whole("c", 4.0, "third"),
        );
        index.upsert(&[b.clone(), a2.clone(), c.clone()]);
        index.remove(std::slice::from_ref(&b.id));
        let mut held: Vec<VectorRecord> = (0..index.len())
            .map(|row| index.record(row, true).expect("held"))
            .collect();
        held.sort_by(|x, y| x.id.cmp(&y.id));
        assert_eq!(
            held,
            [a2.clone(), c],
            "replaced, added and removed with their payloads"
        );
        let row = (0..index.len()).find(|&r| index.id(r) == &a2.id).unwrap();
        assert!(index.record(row, false).unwrap().vector.is_empty());
        assert!(index.holds_records());
        let hits = index
            .search_records(&VectorQuery::new(vec![3.0, 1.0], 1))
            .expect("held");
        assert_eq!(
            hits[0].record,
            VectorRecord {
                vector: Vec::new(),
                ..a2.clone()
            }
        );
        let mut plain = ExactIndex::new(2, Metric::Cosine);
        plain.upsert(&[a2]);
        assert!(plain.record(0, true).is_none() && !plain.holds_records());
        assert!(plain
            .search_records(&VectorQuery::new(vec![3.0, 1.0], 1))
            .is_none());
    }
}
