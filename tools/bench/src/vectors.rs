//! W5: top-10 vector search over real embeddings — ours, a peer's exact KNN, and the floor a
//! plain sequential read of the same matrix sets (the memory-bandwidth limit of a scan; with a
//! filter, of the rows it keeps).

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use mnemix_core::{CollectionSpec, VectorQuery, VectorRecord};
use mnemix_core::{MemoryBackend, Scope, VectorId};
use serde_json::json;

use crate::data::{Matrix, DIMS};
use crate::voltagent::{self, VoltAgent};
use crate::workloads::{run_clients, FnSide, Sizes};
use crate::{compare, Side, Table};

/// The collection the workload fills.
pub const COLLECTION: &str = "w5";

/// W6's filters: row `i` carries `bucket = i % 100` and `decile = i % 10` in its metadata,
/// so `bucket = 0` keeps 1% of the rows and `decile = 0` keeps 10%.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selection {
    /// The metadata field (and column) filtered on.
    pub field: &'static str,
    /// Row `i` matches when `i % modulus == 0`.
    pub modulus: usize,
}

impl Selection {
    /// 1% of the rows.
    pub const ONE_PERCENT: Selection = Selection {
        field: "bucket",
        modulus: 100,
    };
    /// 10% of the rows.
    pub const TEN_PERCENT: Selection = Selection {
        field: "decile",
        modulus: 10,
    };

    /// Whether row `i` matches.
    pub fn keeps(self, i: usize) -> bool {
        i.is_multiple_of(self.modulus)
    }
}

/// The metadata of row `i`.
pub fn metadata_of(i: usize) -> mnemix_core::Metadata {
    let mut metadata = mnemix_core::Metadata::new();
    metadata.insert("bucket".into(), (i % 100).into());
    metadata.insert("decile".into(), (i % 10).into());
    metadata
}

/// Exact top-`k` ids of every query by cosine among the rows `filter` keeps, ties by id —
/// what an exact search must return.
pub fn ground_truth(
    base: &Matrix,
    queries: &Matrix,
    k: usize,
    filter: Option<Selection>,
) -> Vec<Vec<usize>> {
    let norms: Vec<f32> = (0..base.len()).map(|i| norm(base.row(i))).collect();
    (0..queries.len())
        .map(|q| {
            let query = queries.row(q);
            let qn = norm(query);
            let mut scored: Vec<(f32, usize)> = (0..base.len())
                .filter(|&i| filter.is_none_or(|f| f.keeps(i)))
                .map(|i| (dot(query, base.row(i)) / (qn * norms[i]), i))
                .collect();
            let k = k.min(scored.len());
            scored.select_nth_unstable_by(k.saturating_sub(1), |a, b| {
                b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
            });
            scored.truncate(k);
            scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            scored.into_iter().map(|(_, i)| i).collect()
        })
        .collect()
}

/// [`ground_truth`], computed once per matrix, queries and filter in this process: every
/// table of a backend (clients, index or exact) and every backend search the same data.
pub fn ground_truth_cached(
    base: &Matrix,
    queries: &Matrix,
    k: usize,
    filter: Option<Selection>,
) -> Arc<Vec<Vec<usize>>> {
    use std::collections::HashMap;
    use std::hash::{Hash as _, Hasher as _};
    type Cache = Mutex<HashMap<u64, Arc<Vec<Vec<usize>>>>>;
    static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
    // The key covers every query and the base's size and ends: cheap, and two different
    // query sets never share an answer.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (base.len(), k, filter.map(|f| (f.field, f.modulus))).hash(&mut hasher);
    for x in queries
        .data
        .iter()
        .chain(base.row(0))
        .chain(base.row(base.len().saturating_sub(1)))
    {
        x.to_bits().hash(&mut hasher);
    }
    let key = hasher.finish();
    let cache = CACHE.get_or_init(Cache::default);
    if let Some(found) = cache.lock().expect("not poisoned").get(&key) {
        return found.clone();
    }
    let truth = Arc::new(ground_truth(base, queries, k, filter));
    cache
        .lock()
        .expect("not poisoned")
        .insert(key, truth.clone());
    truth
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn norm(a: &[f32]) -> f32 {
    dot(a, a).sqrt()
}

/// Fraction of the true top-k found, averaged over queries.
pub fn recall_at_k(found: &[Vec<usize>], truth: &[Vec<usize>]) -> f64 {
    let total: f64 = found
        .iter()
        .zip(truth)
        .map(|(f, t)| {
            let t: HashSet<&usize> = t.iter().collect();
            f.iter().filter(|i| t.contains(i)).count() as f64 / t.len().max(1) as f64
        })
        .sum();
    total / truth.len().max(1) as f64
}

fn vector_id(i: usize) -> VectorId {
    VectorId::new(format!("v{i:07}")).expect("valid id")
}

fn index_of(id: &VectorId) -> usize {
    id.as_str()[1..].parse().expect("a benchmark id")
}

/// Loads `base` into ours in batches of 1,000; returns how long it took.
pub async fn load_ours(store: &Arc<dyn MemoryBackend>, scope: &Scope, base: &Matrix) -> Duration {
    store
        .ensure_collection(
            scope.namespace(),
            CollectionSpec::new(COLLECTION, DIMS, "all-MiniLM-L6-v2"),
        )
        .await
        .expect("ensure collection");
    let started = Instant::now();
    for start in (0..base.len()).step_by(1_000) {
        let records = (start..base.len().min(start + 1_000))
            .map(|i| {
                VectorRecord::new(vector_id(i), base.row(i).to_vec()).with_metadata(metadata_of(i))
            })
            .collect();
        store
            .upsert_vectors(scope, COLLECTION, records)
            .await
            .expect("upsert vectors");
    }
    started.elapsed()
}

/// W7: ingest of `base` in batches of 100 and of 1,000, each into a fresh collection of a
/// subject of its own. Round `r` upserts the `r`-th slice of the rows, so each side ends with
/// every row and sees its index grow as it would in use; an operation is one batch.
pub async fn ingest(
    sizes: &Sizes,
    backend: &str,
    ours: &Arc<dyn MemoryBackend>,
    base: &Arc<Matrix>,
) -> Table {
    let scope = crate::workloads::subject(70_000);
    let per_round = base.len().div_ceil(sizes.rounds);
    let mut sides = Vec::new();
    for batch in [100, 1_000] {
        let collection = format!("w7-batch-{batch}");
        ours.ensure_collection(
            scope.namespace(),
            CollectionSpec::new(&collection, DIMS, "all-MiniLM-L6-v2"),
        )
        .await
        .expect("ensure collection");
        let (store, base, scope) = (ours.clone(), base.clone(), scope.clone());
        let mut round = 0;
        sides.push(FnSide::new(
            format!("ours, batches of {batch}"),
            move || {
                let rows = (round * per_round)..base.len().min((round + 1) * per_round);
                round += 1;
                let (store, base, scope, collection) = (
                    store.clone(),
                    base.clone(),
                    scope.clone(),
                    collection.clone(),
                );
                async move {
                    let mut latencies = Vec::new();
                    for start in rows.clone().step_by(batch) {
                        let records: Vec<VectorRecord> = (start..rows.end.min(start + batch))
                            .map(|i| {
                                VectorRecord::new(vector_id(i), base.row(i).to_vec())
                                    .with_metadata(metadata_of(i))
                            })
                            .collect();
                        let n = records.len();
                        let started = Instant::now();
                        store
                            .upsert_vectors(&scope, &collection, records)
                            .await
                            .expect("upsert vectors");
                        // An operation is one vector, so both batch sizes compare per vector:
                        // each of the batch's vectors took its share of the batch's time.
                        let share = started.elapsed() / u32::try_from(n).expect("a batch");
                        latencies.extend(std::iter::repeat_n(share, n));
                    }
                    crate::Round::sequential(latencies)
                }
            },
        ));
    }
    let mut refs: Vec<&mut dyn Side> = sides.iter_mut().map(|s| s as &mut dyn Side).collect();
    let mut table = compare(
        format!("W7 vector ingest: batches of 100 and 1,000, {backend}"),
        format!(
            "{} × {DIMS} embeddings per side into an empty collection (the backend's default index), {} rounds of {per_round} rows",
            base.len(),
            sizes.rounds
        ),
        sizes.rounds,
        1,
        &mut refs,
    )
    .await;
    table.notes.push(
        "an operation is one vector: the p50 and p99 are of a batch's time ÷ its size, ops/s is vectors/s"
            .to_owned(),
    );
    if backend == "postgres" {
        table.notes.push(
            "PostgreSQL makes a collection's HNSW index when a search first finds a scope of it large (10,000 rows by default), so no index is maintained here; W5's load line gives a load with its index built"
                .to_owned(),
        );
    }
    table
}

/// A reference's search: ids (row numbers) of the `k` nearest to a query.
pub type PeerSearch =
    Arc<dyn Fn(Vec<f32>, usize, Option<Selection>) -> BoxFuture<'static, Vec<usize>> + Send + Sync>;

/// How a comparison queries: concurrent clients, and the W6 filter if any.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Concurrent clients.
    pub clients: usize,
    /// W6's filter; `None` for W5.
    pub filter: Option<Selection>,
}

impl Load {
    /// W5 at 1 and 8 clients, then W6 at 1% and 10% selectivity with 1 client: the loads every
    /// backend's vector comparison runs.
    pub const W5_AND_W6: [Load; 4] = [
        Load {
            clients: 1,
            filter: None,
        },
        Load {
            clients: 8,
            filter: None,
        },
        Load {
            clients: 1,
            filter: Some(Selection::ONE_PERCENT),
        },
        Load {
            clients: 1,
            filter: Some(Selection::TEN_PERCENT),
        },
    ];
}

/// The references W5 runs beside ours.
#[derive(Default)]
pub struct Peers<'a> {
    /// Another implementation of the same search (sqlite-vec, raw pgvector SQL): its name
    /// and how to run it.
    pub exact: Option<(String, PeerSearch)>,
    /// The VoltAgent peer, loaded already, and the embeddings file its queries come from.
    pub voltagent: Option<(&'a Arc<VoltAgent>, &'a Path)>,
}

/// W5 at `clients` concurrent clients: ours against the peers and the sequential read of the
/// matrix. Ratios divide by ours.
pub async fn search(
    sizes: &Sizes,
    label: &str,
    ours: (&Arc<dyn MemoryBackend>, &Scope),
    base: &Arc<Matrix>,
    queries: &Arc<Matrix>,
    peers: Peers<'_>,
    load: Load,
) -> Table {
    let Load { clients, filter } = load;
    let with_filter = move |query: VectorQuery| match filter {
        Some(f) => query.with_filter(mnemix_core::Filter::eq(f.field, 0_i64)),
        None => query,
    };
    let Peers {
        exact: peer,
        voltagent,
    } = peers;
    let (ours, scope) = (ours.0, ours.1.clone());
    let truth = ground_truth_cached(base, queries, 10, filter);
    let found_ours: Arc<Mutex<Vec<Vec<usize>>>> = Arc::default();
    let q = queries.len();

    // Warm-up outside the clock: ours builds its matrix cache, the peer fills its page cache.
    ours.search(
        &scope,
        COLLECTION,
        with_filter(VectorQuery::new(queries.row(0).to_vec(), 10)),
    )
    .await
    .expect("search");
    if let Some((_, run)) = &peer {
        run(queries.row(0).to_vec(), 10, filter).await;
    }
    let (store, ours_queries, ours_found) = (ours.clone(), queries.clone(), found_ours.clone());
    let ours_scope = scope.clone();
    let mut ours_side = FnSide::new("ours", || {
        let (store, queries, found, scope) = (
            store.clone(),
            ours_queries.clone(),
            ours_found.clone(),
            ours_scope.clone(),
        );
        async move {
            *found.lock().expect("not poisoned") = vec![Vec::new(); q];
            run_clients(clients, (0..q).collect(), move |i: usize| {
                let (store, queries, found, scope) =
                    (store.clone(), queries.clone(), found.clone(), scope.clone());
                async move {
                    let hits = store
                        .search(
                            &scope,
                            COLLECTION,
                            with_filter(VectorQuery::new(queries.row(i).to_vec(), 10)),
                        )
                        .await
                        .expect("search");
                    found.lock().expect("not poisoned")[i] =
                        hits.iter().map(|h| index_of(&h.record.id)).collect();
                }
            })
            .await
        }
    });

    let found_peer: Arc<Mutex<Vec<Vec<usize>>>> = Arc::default();
    let mut peer_side = peer.map(|(name, run)| {
        let (queries, found) = (queries.clone(), found_peer.clone());
        FnSide::new(name, move || {
            let (queries, found, run) = (queries.clone(), found.clone(), run.clone());
            async move {
                *found.lock().expect("not poisoned") = vec![Vec::new(); q];
                run_clients(clients, (0..q).collect(), move |i: usize| {
                    let (queries, found, run) = (queries.clone(), found.clone(), run.clone());
                    async move {
                        let ids = run(queries.row(i).to_vec(), 10, filter).await;
                        found.lock().expect("not poisoned")[i] = ids;
                    }
                })
                .await
            }
        })
    });

    // VoltAgent scans every row in JavaScript per query: it gets a few queries per round.
    let volt_queries = q.min(sizes.slow_queries);
    let found_volt: Arc<Mutex<Vec<Vec<usize>>>> = Arc::default();
    let mut volt_side = voltagent.map(|(peer, embeddings)| {
        let request = json!({
            "op": "search", "path": embeddings, "offset": base.len(), "count": volt_queries,
            "dims": DIMS, "k": 10, "clients": clients,
            "filter": filter.map(|f| json!({ f.field: 0 })),
        });
        let found = found_volt.clone();
        FnSide::new(voltagent::NAME, move || {
            let (peer, request, found) = (peer.clone(), request.clone(), found.clone());
            async move {
                let reply = peer.call(request).await.expect("a VoltAgent search round");
                *found.lock().expect("not poisoned") =
                    serde_json::from_value(reply["found"].clone()).expect("ids");
                voltagent::round_of(&reply)
            }
        })
    });

    // The floor: one plain pass per query over the rows a search must score — the whole
    // matrix, or with a filter the rows it keeps, gathered as if an index had laid them out
    // together — as many passes at once as clients.
    let selected: Option<Arc<Vec<f32>>> = filter.map(|f| {
        Arc::new(
            (0..base.len())
                .filter(|&i| f.keeps(i))
                .flat_map(|i| base.row(i).iter().copied())
                .collect(),
        )
    });
    let floor_bytes = 4 * selected.as_ref().map_or(base.data.len(), |rows| rows.len());
    let floor_name = if filter.is_some() {
        "sequential read of the matching rows"
    } else {
        "sequential read of the matrix"
    };
    let floor_base = base.clone();
    let mut floor_side = FnSide::new(floor_name, || {
        let (base, selected) = (floor_base.clone(), selected.clone());
        run_clients(clients, (0..q).collect(), move |_: usize| {
            let (base, selected) = (base.clone(), selected.clone());
            async move {
                let rows: &[f32] = selected.as_deref().map_or(&base.data, Vec::as_slice);
                // Integer addition of the bits: associative, so the compiler vectorises it and
                // the pass runs at memory speed rather than at float-add latency.
                let sum = rows.iter().fold(0u32, |a, x| a.wrapping_add(x.to_bits()));
                std::hint::black_box(sum);
            }
        })
    });

    let mut sides: Vec<&mut dyn Side> = vec![&mut ours_side];
    if let Some(peer) = peer_side.as_mut() {
        sides.push(peer);
    }
    if let Some(volt) = volt_side.as_mut() {
        sides.push(volt);
    }
    sides.push(&mut floor_side);
    let mut table = compare(
        match filter {
            None => format!("W5 top-10 vector search, {label}, {clients} client(s)"),
            Some(f) => format!(
                "W6 filtered top-10 vector search, {}% of the rows ({} = 0), {label}, {clients} client(s)",
                100 / f.modulus,
                f.field
            ),
        },
        format!(
            "{} × {DIMS} all-MiniLM-L6-v2 embeddings of Debian description sentences in one subject, cosine; {q} held-out queries per round, {} rounds",
            base.len(),
            sizes.rounds
        ),
        sizes.rounds,
        0,
        &mut sides,
    )
    .await;
    drop(sides);
    drop(ours_side);
    drop(peer_side);
    drop(volt_side);
    let ours_recall = recall_at_k(&found_ours.lock().expect("not poisoned"), &truth);
    table.notes.push(format!(
        "recall@10 of ours against exact ground truth: {ours_recall:.4}"
    ));
    let peer_found = found_peer.lock().expect("not poisoned");
    if !peer_found.is_empty() {
        let name = &table.sides[1].name;
        table.notes.push(format!(
            "recall@10 of {name}: {:.4}",
            recall_at_k(&peer_found, &truth)
        ));
    }
    let volt_found = found_volt.lock().expect("not poisoned");
    if !volt_found.is_empty() {
        table.notes.push(format!(
            "recall@10 of {}: {:.4} ({volt_queries} queries per round)",
            voltagent::NAME,
            recall_at_k(&volt_found, &truth[..volt_found.len()])
        ));
        crate::workloads::peer_note(&mut table);
    }
    let floor = table.sides.last().map_or(f64::NAN, |s| s.median_us);
    let bytes = floor_bytes as f64;
    if label.contains("exact") {
        table.notes.push(format!(
            "the sequential read moves {:.1} GB/s; ours reaches {:.0}% of it (floor ÷ ours)",
            bytes / floor / 1e3,
            100.0 * floor / table.sides[0].median_us
        ));
    }
    table
}
