//! Vector collections written once: their rows, and the writes every driver makes alike
//! (ensure, upsert, delete, drop, restore) through what each keeps its own way
//! ([`VectorTables`]: the tables that hold the vectors).

use async_trait::async_trait;
use mnemix_core::transfer::Record;
use mnemix_core::{
    CollectionSpec, ConversationId, MemoryError, Metric, Namespace, Result, Scope, VectorId,
    VectorRecord, VectorSelector,
};

use super::{count_to_db, subject_of};
use crate::driver::{corrupt, metadata_from, Conn, Row};
use crate::vectors as sql;

/// Matrices of scopes' vectors by `(collection pk, subject)`, each at the collection
/// generation it was read at.
pub type VectorCache = mnemix_core::adapter::MatrixCache<(i64, String), i64>;

/// A collection's row: its pk, spec and generation (bumped once by every transaction that
/// writes its vectors).
#[derive(Debug, Clone)]
pub struct CollectionRow {
    /// Its primary key (never reused).
    pub pk: i64,
    /// Its spec.
    pub spec: CollectionSpec,
    /// Its generation.
    pub generation: i64,
}

/// The tables a driver keeps a collection's vectors in, on a connection in the caller's
/// transaction.
#[async_trait]
pub trait VectorTables: Conn {
    /// Creates what holds a new collection's vectors, once its row is written.
    async fn create_vector_table(&mut self, collection: &CollectionRow) -> Result<()> {
        let _ = collection;
        Ok(())
    }

    /// Drops what holds a collection's vectors, before its row is deleted.
    async fn drop_vector_table(&mut self, collection: &CollectionRow) -> Result<()> {
        let _ = collection;
        Ok(())
    }

    /// Prepares for a write of `vectors` vectors in this transaction.
    async fn before_writing(&mut self, vectors: usize) -> Result<()> {
        let _ = vectors;
        Ok(())
    }

    /// Inserts or replaces a subject's vector (checked against its collection by the caller).
    async fn write_vector(
        &mut self,
        collection: &CollectionRow,
        subject: &str,
        record: &VectorRecord,
    ) -> Result<()>;

    /// A subject's vector, if any.
    async fn read_vector(
        &mut self,
        collection: &CollectionRow,
        subject: &str,
        id: &VectorId,
    ) -> Result<Option<VectorRecord>>;

    /// The id and metadata (its JSON text) of every vector of the subject.
    async fn ids_and_metadata(
        &mut self,
        collection: &CollectionRow,
        subject: &str,
    ) -> Result<Vec<(String, String)>>;

    /// Deletes the subject's vectors among `ids`; how many there were.
    async fn delete_vectors(
        &mut self,
        collection: &CollectionRow,
        subject: &str,
        ids: &[VectorId],
    ) -> Result<u64>;

    /// Deletes the scope's vectors in every collection of its namespace (those of
    /// conversation `of` only, when given): the collection of each vector deleted, once per
    /// vector (the caller bumps their generations).
    async fn delete_scope_vectors(
        &mut self,
        scope: &Scope,
        of: Option<&ConversationId>,
    ) -> Result<Vec<i64>>;

    /// The subjects (`''` for the shared scope) holding vectors in the namespace's
    /// collections, in no order and possibly repeated.
    async fn vector_subjects(&mut self, namespace: &Namespace) -> Result<Vec<String>>;

    /// Every vector of the scope, whole, with the name of its collection.
    async fn scope_vectors(&mut self, scope: &Scope) -> Result<Vec<(String, VectorRecord)>>;

    /// How many vectors every collection holds together.
    async fn count_vectors(&mut self) -> Result<u64>;

    /// How many vectors the scope holds in every collection of its namespace: what
    /// [`delete_scope_vectors`](Self::delete_scope_vectors) would delete.
    async fn count_scope_vectors(&mut self, scope: &Scope) -> Result<u64>;
}

/// A collection from the columns of [`FIND_COLLECTION`](crate::vectors::FIND_COLLECTION).
pub fn collection_from(row: &Row) -> Result<CollectionRow> {
    let metric = row.string(3)?;
    Ok(CollectionRow {
        pk: row.int(0)?,
        spec: CollectionSpec::new(
            row.string(1)?,
            usize::try_from(row.int(2)?).map_err(|e| row.corrupt("dims", e))?,
            row.string(4)?,
        )
        .with_metric(Metric::parse(&metric).ok_or_else(|| row.corrupt("metric", &metric))?),
        generation: row.int(5)?,
    })
}

/// A namespace's collection by name.
pub async fn find_collection<C: Conn>(
    conn: &mut C,
    namespace: &Namespace,
    name: &str,
) -> Result<Option<CollectionRow>> {
    find_collection_by(conn, sql::FIND_COLLECTION, namespace, name).await
}

/// [`find_collection`] by `statement`: [`find_collection!`](crate::find_collection) after
/// statements that return no row (a `BEGIN`).
pub async fn find_collection_by<C: Conn>(
    conn: &mut C,
    statement: &'static str,
    namespace: &Namespace,
    name: &str,
) -> Result<Option<CollectionRow>> {
    let params = [namespace.as_str().into(), name.into()];
    conn.row(statement, &params)
        .await?
        .map(|row| collection_from(&row))
        .transpose()
}

/// A namespace's collection by name, or `NotFound`.
pub async fn collection<C: Conn>(
    conn: &mut C,
    namespace: &Namespace,
    name: &str,
) -> Result<CollectionRow> {
    find_collection(conn, namespace, name)
        .await?
        .ok_or_else(|| MemoryError::not_found("collection", name))
}

/// A namespace's collections, by name.
pub async fn namespace_collections<C: Conn>(
    conn: &mut C,
    namespace: &Namespace,
) -> Result<Vec<CollectionRow>> {
    let rows = conn
        .rows(sql::NAMESPACE_COLLECTIONS, &[namespace.as_str().into()])
        .await?;
    rows.iter().map(collection_from).collect()
}

/// A namespace's collections as the records an export holds, by name.
pub async fn collection_records<C: Conn>(
    conn: &mut C,
    namespace: &Namespace,
) -> Result<Vec<Record>> {
    let collections = namespace_collections(conn, namespace).await?;
    Ok(collections
        .into_iter()
        .map(|c| Record::Collection {
            namespace: namespace.clone(),
            spec: c.spec,
        })
        .collect())
}

/// Bumps the generation of every collection in `pks` (duplicates allowed), once each.
pub async fn bump_generations<C: Conn>(conn: &mut C, mut pks: Vec<i64>) -> Result<()> {
    pks.sort_unstable();
    pks.dedup();
    for pk in pks {
        conn.execute(sql::BUMP_GENERATION, &[pk.into()]).await?;
    }
    Ok(())
}

/// Creates a collection (the caller has checked that none of that name exists).
pub async fn insert_collection<C: VectorTables>(
    tx: &mut C,
    namespace: &Namespace,
    spec: &CollectionSpec,
) -> Result<()> {
    let params = [
        namespace.as_str().into(),
        spec.name.as_str().into(),
        count_to_db(spec.dims).into(),
        spec.metric.as_str().into(),
        spec.model.as_str().into(),
    ];
    let created = tx
        .row(sql::INSERT_COLLECTION, &params)
        .await?
        .ok_or_else(|| crate::driver::corrupt(C::BACKEND, "collection", "no row inserted"))?;
    let collection = CollectionRow {
        pk: created.int(0)?,
        spec: spec.clone(),
        generation: 0,
    };
    tx.create_vector_table(&collection).await
}

/// The collection named by `spec`, created if missing: the spec of an existing one (which must
/// be the same), `None` when it was created.
pub async fn ensure_collection<C: VectorTables>(
    tx: &mut C,
    namespace: &Namespace,
    spec: &CollectionSpec,
) -> Result<Option<CollectionSpec>> {
    if let Some(existing) = find_collection(tx, namespace, &spec.name).await? {
        existing.spec.check_same(spec)?;
        return Ok(Some(existing.spec));
    }
    insert_collection(tx, namespace, spec).await?;
    Ok(None)
}

/// Drops a collection, its vectors with it; whether there was one.
pub async fn drop_collection<C: VectorTables>(
    tx: &mut C,
    namespace: &Namespace,
    name: &str,
) -> Result<bool> {
    let Some(collection) = find_collection(tx, namespace, name).await? else {
        return Ok(false);
    };
    tx.drop_vector_table(&collection).await?;
    // The pk is never reused (AUTOINCREMENT), so matrices held of the old collection can
    // never be taken for a new one's.
    tx.execute(sql::DELETE_COLLECTION, &[collection.pk.into()])
        .await?;
    Ok(true)
}

/// Writes the scope's `records` into `collection`, each checked first, and bumps its
/// generation when there were any.
pub async fn write_vectors<C: VectorTables>(
    tx: &mut C,
    collection: &CollectionRow,
    scope: &Scope,
    records: &[VectorRecord],
) -> Result<()> {
    for record in records {
        collection.spec.check_vector(&record.vector)?;
    }
    if records.is_empty() {
        return Ok(());
    }
    tx.before_writing(records.len()).await?;
    for record in records {
        tx.write_vector(collection, subject_of(scope), record)
            .await?;
    }
    bump_generations(tx, vec![collection.pk]).await
}

/// Deletes the scope's vectors `selector` picks from `collection`, and bumps its generation
/// when there were any: the ids it asked to delete, and how many there were.
pub async fn delete_selected<C: VectorTables>(
    tx: &mut C,
    collection: &CollectionRow,
    scope: &Scope,
    selector: VectorSelector,
) -> Result<(Vec<VectorId>, u64)> {
    let subject = subject_of(scope);
    let ids = match selector {
        VectorSelector::Ids(ids) => ids,
        VectorSelector::Filter(filter) => {
            let mut matching = Vec::new();
            for (id, metadata) in tx.ids_and_metadata(collection, subject).await? {
                if filter.matches(&metadata_from(C::BACKEND, &metadata)?) {
                    matching
                        .push(VectorId::new(id).map_err(|e| corrupt(C::BACKEND, "vector id", e))?);
                }
            }
            matching
        }
    };
    let removed = tx.delete_vectors(collection, subject, &ids).await?;
    if removed > 0 {
        bump_generations(tx, vec![collection.pk]).await?;
    }
    Ok((ids, removed))
}
