//! Vector collections' rows, which both backends keep in `collections` alike (each keeps the
//! vectors themselves its own way: sqlx's store in one table, libSQL's in a table per
//! collection).

/// A namespace's collection by name: `?1` namespace, `?2` name.
#[macro_export]
macro_rules! find_collection {
    () => {
        "SELECT pk, name, dims, metric, model, generation FROM collections
         WHERE namespace = ?1 AND name = ?2"
    };
}

/// [`find_collection!`](crate::find_collection) as a statement of its own.
pub const FIND_COLLECTION: &str = find_collection!();

/// A namespace's collections by name: `?1` namespace.
pub const NAMESPACE_COLLECTIONS: &str =
    "SELECT pk, name, dims, metric, model, generation FROM collections
     WHERE namespace = ?1 ORDER BY name";

/// A new collection's row: `?1` namespace, `?2` name, `?3` dims, `?4` metric, `?5` model;
/// returns its pk.
pub const INSERT_COLLECTION: &str = "INSERT INTO collections (namespace, name, dims, metric, model)
     VALUES (?1, ?2, ?3, ?4, ?5) RETURNING pk";

/// A collection's row, by pk (`?1`).
pub const DELETE_COLLECTION: &str = "DELETE FROM collections WHERE pk = ?1";

/// Marks a write of a collection's vectors (`?1` pk), once per transaction that makes one: a
/// matrix held at the generation before is no longer the data.
pub const BUMP_GENERATION: &str =
    "UPDATE collections SET generation = generation + 1 WHERE pk = ?1";
