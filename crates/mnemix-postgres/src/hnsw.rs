//! Each collection's HNSW index, made once a scope of it is large enough to need one.
//!
//! A collection starts without an index: writes maintain none (an HNSW insert costs the server
//! many times the row's own insert: BENCHMARKS.md, W7), and searches are exact, ranked by pgvector
//! in the server. When an exact search's scope holds `index_min_rows` rows, a background task
//! builds the index with `CREATE INDEX CONCURRENTLY` (writers are never blocked), under a
//! session advisory lock so that one process builds while the others keep searching exactly;
//! searches use the index once a lookup finds it valid. A bulk load therefore inserts rows
//! alone and the index is built once, afterwards, as a hand-run load-then-index would.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use deadpool_postgres::{Object, Pool};
use mnemix_core::{Metric, Namespace, Result, Scope};

use crate::db::{subject_of, Db, DbResult};
use crate::vectors::{CollectionRow, SeenCollections};
use crate::Hnsw;

/// How long after a check of a scope's size the next search of it checks again, and after a
/// failed build the next may start.
const RECHECK_AFTER: Duration = Duration::from_mins(1);

/// The most scopes whose last check is remembered; past it the memory starts over.
const MAX_CHECKED: usize = 4096;

/// pgvector's operator class and distance operator for a metric.
pub(crate) fn pgvector_ops(metric: Metric) -> (&'static str, &'static str) {
    match metric {
        Metric::Cosine => ("vector_cosine_ops", "<=>"),
        Metric::Dot => ("vector_ip_ops", "<#>"),
        Metric::Euclidean => ("vector_l2_ops", "<->"),
    }
}

/// The name of collection `pk`'s index (unqualified).
pub(crate) fn index_name(pk: i64) -> String {
    format!("vectors_hnsw_{pk}")
}

/// The name of the partition of `vectors` that holds collection `pk`'s rows (unqualified).
pub(crate) fn partition_name(pk: i64) -> String {
    format!("vectors_{pk}")
}

/// `CREATE INDEX [CONCURRENTLY]` of a collection's HNSW index, on its partition. Only trusted
/// integers and fixed operator names are formatted in; `{s}` is the schema.
pub(crate) fn create_index_sql(
    collection: &CollectionRow,
    hnsw: Hnsw,
    concurrently: bool,
) -> String {
    let (ops, _) = pgvector_ops(collection.spec.metric);
    format!(
        "CREATE INDEX {concurrently} IF NOT EXISTS {name} ON {{s}}.{partition}
         USING hnsw ((embedding::vector({dims})) {ops})
         WITH (m = {m}, ef_construction = {efc}) WHERE collection = {pk}",
        concurrently = if concurrently { "CONCURRENTLY" } else { "" },
        name = index_name(collection.pk),
        partition = partition_name(collection.pk),
        dims = collection.spec.dims,
        m = hnsw.m,
        efc = hnsw.ef_construction,
        pk = collection.pk,
    )
}

/// Builds collections' indexes for one store, and remembers what it checked.
pub(crate) struct IndexBuilder {
    pool: Pool,
    /// The schema, quoted.
    schema: String,
    hnsw: Hnsw,
    min_rows: usize,
    seen: Arc<SeenCollections>,
    /// When each scope (collection pk, subject) was last checked, and when a build of each
    /// collection started or last failed.
    checked: Mutex<HashMap<(i64, String), Instant>>,
    builds: Mutex<HashMap<i64, Build>>,
}

#[derive(Debug, Clone, Copy)]
enum Build {
    Running,
    FailedAt(Instant),
}

impl IndexBuilder {
    pub(crate) fn new(
        pool: Pool,
        schema: String,
        hnsw: Hnsw,
        min_rows: usize,
        seen: Arc<SeenCollections>,
    ) -> Self {
        Self {
            pool,
            schema,
            hnsw,
            min_rows,
            seen,
            checked: Mutex::default(),
            builds: Mutex::default(),
        }
    }

    fn sql(&self, template: &str) -> String {
        template.replace("{s}", &self.schema)
    }

    /// After an exact search of `scope` in an indexable collection without a valid index: in
    /// the background, counts the scope's rows (at most once a minute per scope) and builds the
    /// index when they reach `index_min_rows`. The search itself waits for nothing.
    pub(crate) fn consider(self: &Arc<Self>, scope: &Scope, collection: &CollectionRow) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let key = (collection.pk, subject_of(scope).to_owned());
        {
            let mut checked = lock(&self.checked);
            if checked
                .get(&key)
                .is_some_and(|at| at.elapsed() < RECHECK_AFTER)
            {
                return;
            }
            if checked.len() >= MAX_CHECKED {
                checked.clear();
            }
            checked.insert(key.clone(), Instant::now());
        }
        if !self.claim(collection.pk) {
            return;
        }
        let (builder, namespace, collection) = (
            Arc::clone(self),
            scope.namespace().clone(),
            collection.clone(),
        );
        runtime.spawn(async move {
            let built = match builder.scope_is_large(collection.pk, &key.1).await {
                Ok(true) => builder.build(&collection, false).await,
                other => other.map(|_| false),
            };
            builder.finish(&namespace, collection, &built);
        });
    }

    /// Builds the collection's index now unless it has a valid one, waiting for another
    /// process's build of it rather than starting a second; `Ok(false)` when the collection is
    /// gone.
    pub(crate) async fn build_now(
        self: &Arc<Self>,
        namespace: &Namespace,
        collection: CollectionRow,
    ) -> Result<bool> {
        let built = self.build(&collection, true).await;
        lock(&self.builds).remove(&collection.pk);
        if matches!(built, Ok(true)) {
            self.remember_indexed(namespace, collection);
        }
        built
    }

    /// Marks a build of `pk` as this store's, unless one runs or failed within the minute.
    fn claim(&self, pk: i64) -> bool {
        let mut builds = lock(&self.builds);
        match builds.get(&pk) {
            Some(Build::Running) => false,
            Some(Build::FailedAt(at)) if at.elapsed() < RECHECK_AFTER => false,
            _ => {
                builds.insert(pk, Build::Running);
                true
            }
        }
    }

    fn finish(&self, namespace: &Namespace, collection: CollectionRow, built: &Result<bool>) {
        let mut builds = lock(&self.builds);
        if built.is_err() {
            builds.insert(collection.pk, Build::FailedAt(Instant::now()));
            return;
        }
        builds.remove(&collection.pk);
        drop(builds);
        if matches!(built, Ok(true)) {
            self.remember_indexed(namespace, collection);
        }
    }

    /// Searches remember the collection as indexed, so the next one uses the index.
    fn remember_indexed(&self, namespace: &Namespace, collection: CollectionRow) {
        let name = collection.spec.name.clone();
        self.seen.insert(
            namespace,
            &name,
            CollectionRow {
                indexed: true,
                ..collection
            },
        );
    }

    /// Whether the scope holds at least `index_min_rows` rows of the collection (counting no
    /// further).
    async fn scope_is_large(&self, pk: i64, subject: &str) -> Result<bool> {
        let client = self.pool.get().await.db()?;
        let min = i64::try_from(self.min_rows).unwrap_or(i64::MAX);
        let row = client
            .row(
                &self.sql(
                    "SELECT count(*) >= $3 FROM (SELECT FROM {s}.vectors
                     WHERE collection = $1 AND subject = $2 LIMIT $3) AS scope",
                ),
                &[&pk, &subject, &min],
            )
            .await?;
        Ok(row.is_some_and(|row| row.get(0)))
    }

    /// Builds the index unless a valid one exists: `Ok(true)` when one does now. Builders of
    /// every process take one advisory lock per collection; without `wait` a builder that finds
    /// it taken leaves the build to its holder (`Ok(false)`).
    async fn build(&self, collection: &CollectionRow, wait: bool) -> Result<bool> {
        // A connection of its own, closed when this ends: the session lock must never stay
        // behind on a pooled connection, whatever happens here.
        let client = Object::take(self.pool.get().await.db()?);
        let key = format!("mnemix hnsw {} {}", self.schema, collection.pk);
        if wait {
            client
                .execute("SELECT pg_advisory_lock(hashtext($1))", &[&key])
                .await
                .db()?;
        } else {
            let locked: bool = client
                .query_one("SELECT pg_try_advisory_lock(hashtext($1))", &[&key])
                .await
                .db()?
                .get(0);
            if !locked {
                return Ok(false);
            }
        }
        // Under the lock no other builder runs: an index that is not valid is what a failed or
        // interrupted build left, and is made again.
        let index = format!("{}.{}", self.schema, index_name(collection.pk));
        let valid: Option<bool> = client
            .query_opt(
                "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)",
                &[&index],
            )
            .await
            .db()?
            .map(|row| row.get(0));
        match valid {
            Some(true) => return Ok(true),
            Some(false) => client
                .batch_execute(&format!("DROP INDEX CONCURRENTLY IF EXISTS {index}"))
                .await
                .db()?,
            None => {}
        }
        let exists = "SELECT FROM {s}.collections WHERE pk = $1";
        if client
            .query_opt(&self.sql(exists), &[&collection.pk])
            .await
            .db()?
            .is_none()
        {
            return Ok(false);
        }
        client
            .batch_execute(&self.sql(&create_index_sql(collection, self.hnsw, true)))
            .await
            .db()?;
        // Dropped while the index was being made (its pk never comes back): drop_collection's
        // own DROP INDEX may have run before the index existed.
        if client
            .query_opt(&self.sql(exists), &[&collection.pk])
            .await
            .db()?
            .is_none()
        {
            client
                .batch_execute(&format!("DROP INDEX CONCURRENTLY IF EXISTS {index}"))
                .await
                .db()?;
            return Ok(false);
        }
        Ok(true)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
