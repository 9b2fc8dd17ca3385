//! Vector collections: specs per namespace, records per scope as binary strings, exact top-k
//! in Rust (Redis 7 has no vector search).
//!
//! A collection's records live in each scope's slot under its *incarnation*, a number drawn
//! when the collection is made: dropping a collection removes its spec at once (so its records
//! are gone for every read) and then deletes the records scope by scope; a collection made
//! again under the same name gets a new incarnation and starts empty.
//!
//! A search reads a scope's records once per version: every write of them (the upsert, delete
//! and conversation-delete scripts) sets a fresh token beside them (`vt:N`) in the same script.
//! A search that holds a matrix (see [`MatrixCache`]) ranks it, then reads the hits' records
//! and the token in one transaction: if the token is still the matrix's, every hit is as
//! stored when it was scored (a token is never set twice, so an equal one means no write);
//! otherwise, or with no matrix held, it reads the records and their token in one transaction
//! and keeps the new matrix. The write scripts return the token they replaced: when it is the
//! held matrix's, this process applies its own write to the matrix, so a search after its own
//! write (an agent's next turn) reads no records. Records written before tokens existed have
//! none and are read whole on every search, until their next write.
//!
//! The seam for a server-side index (Redis 8 vector sets, or the query engine) is
//! [`RedisStore::search`]'s candidate read: detect the module at open and ask it for the
//! nearest ids instead of reading every record. Nothing here can test one, so none is used.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use mnemix_core::adapter::{decode_f32_le, encode_f32_le, ExactIndex};
use mnemix_core::{
    CollectionSpec, ConversationId, MemoryError, Metadata, Namespace, Result, Scope, VectorHit,
    VectorId, VectorQuery, VectorRecord, VectorSelector, VectorStore,
};
use redis::Script;
use serde::{Deserialize, Serialize};

use crate::keys::ScopeKeys;
use crate::{corrupt, to_json, RedisResultExt, RedisStore};

static ENSURE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/ensure_collection.lua")));
static DROP: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/drop_collection.lua")));
static UPSERT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/upsert_vectors.lua")));
static DELETE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/delete_vectors.lua")));

/// Matrices by `(scope key base, collection incarnation)`, each at the version token of the
/// records it was read from.
pub(crate) type MatrixCache = mnemix_core::adapter::MatrixCache<(String, String), String>;

/// A fresh version token for a write of vector records: unique, so a matrix read before any
/// other write (by this process or another, even after the records were erased and written
/// again) never matches it.
pub(crate) fn version_token() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}

/// Collections as a search last read them, with their stored value: a search holding a matrix
/// reads the value again in the round trip that checks the records' token, and answers only if
/// both are unchanged (a collection dropped and made again has a new incarnation, so another
/// value).
pub(crate) type SeenCollections = mnemix_core::adapter::SeenCollections<SeenCollection>;

/// A collection as read, with the stored value it was parsed from.
pub(crate) struct SeenCollection {
    value: Vec<u8>,
    stored: StoredCollection,
}

/// A collection as stored: its incarnation and spec.
pub(crate) struct StoredCollection {
    pub(crate) incarnation: String,
    pub(crate) spec: CollectionSpec,
}

/// `incarnation NUL spec JSON`.
pub(crate) fn collection_from(value: &[u8]) -> Result<StoredCollection> {
    let nul = value
        .iter()
        .position(|b| *b == 0)
        .ok_or_else(|| corrupt("collection", "no separator"))?;
    Ok(StoredCollection {
        incarnation: String::from_utf8(value[..nul].to_vec())
            .map_err(|e| corrupt("collection", e))?,
        spec: serde_json::from_slice(&value[nul + 1..]).map_err(|e| corrupt("collection", e))?,
    })
}

/// The JSON part of a stored record.
#[derive(Serialize, Deserialize)]
struct RecordBody {
    text: Option<String>,
    metadata: Metadata,
}

/// A record as stored: `conversation id NUL JSON(text, metadata) NUL f32 little-endian`.
/// The conversation id leads so the conversation-delete script can match it without JSON.
pub(crate) fn encode_record(record: &VectorRecord) -> Vec<u8> {
    let conversation = record
        .conversation_id
        .as_ref()
        .map_or("", ConversationId::as_str);
    let body = to_json(&RecordBody {
        text: record.text.clone(),
        metadata: record.metadata.clone(),
    });
    let mut out = Vec::with_capacity(conversation.len() + body.len() + 2 + record.vector.len() * 4);
    out.extend_from_slice(conversation.as_bytes());
    out.push(0);
    out.extend_from_slice(body.as_bytes());
    out.push(0);
    out.extend_from_slice(&encode_f32_le(&record.vector));
    out
}

/// The three parts of a stored record: conversation id, JSON body, vector bytes.
fn record_parts(value: &[u8]) -> Result<(&[u8], &[u8], &[u8])> {
    let split = |bytes: &[u8]| -> Result<usize> {
        bytes
            .iter()
            .position(|b| *b == 0)
            .ok_or_else(|| corrupt("vector record", "no separator"))
    };
    let first = split(value)?;
    let rest = &value[first + 1..];
    let second = split(rest)?;
    Ok((&value[..first], &rest[..second], &rest[second + 1..]))
}

fn body_from(body: &[u8]) -> Result<RecordBody> {
    serde_json::from_slice(body).map_err(|e| corrupt("vector record", e))
}

pub(crate) fn decode_record(id: &str, value: &[u8]) -> Result<VectorRecord> {
    let (conversation_id, body, vector) = decoded_parts(value)?;
    Ok({
        let mut value = VectorRecord::new(
            VectorId::new(id).map_err(|e| corrupt("vector id", e))?,
            decode_f32_le(vector),
        );
        value.text = body.text;
        value.metadata = body.metadata;
        value.conversation_id = conversation_id;
        value
    })
}

/// A stored record's conversation and body decoded, its vector's bytes as they are.
fn decoded_parts(value: &[u8]) -> Result<(Option<ConversationId>, RecordBody, &[u8])> {
    let (conversation, body, vector) = record_parts(value)?;
    let conversation =
        std::str::from_utf8(conversation).map_err(|e| corrupt("vector record", e))?;
    let conversation_id = (!conversation.is_empty())
        .then(|| ConversationId::new(conversation))
        .transpose()
        .map_err(|e| corrupt("vector record", e))?;
    Ok((conversation_id, body_from(body)?, vector))
}

impl RedisStore {
    pub(crate) async fn find_collection(
        &self,
        namespace: &Namespace,
        name: &str,
    ) -> Result<Option<StoredCollection>> {
        let value = self.collection_value(namespace, name).await?;
        value.as_deref().map(collection_from).transpose()
    }

    /// The stored value of a collection (`incarnation NUL spec JSON`).
    async fn collection_value(&self, namespace: &Namespace, name: &str) -> Result<Option<Vec<u8>>> {
        redis::cmd("HGET")
            .arg(self.keys.namespace(namespace).collections())
            .arg(name)
            .query_async(&mut self.conn())
            .await
            .db()
    }

    /// Reads a collection for a search and remembers it for the next ones.
    async fn seen_collection(
        &self,
        namespace: &Namespace,
        name: &str,
    ) -> Result<Arc<SeenCollection>> {
        let value = self
            .collection_value(namespace, name)
            .await?
            .ok_or_else(|| MemoryError::not_found("collection", name))?;
        let seen = SeenCollection {
            stored: collection_from(&value)?,
            value,
        };
        Ok(self.seen_collections.insert(namespace, name, seen))
    }

    async fn collection(&self, namespace: &Namespace, name: &str) -> Result<StoredCollection> {
        self.find_collection(namespace, name)
            .await?
            .ok_or_else(|| MemoryError::not_found("collection", name))
    }

    /// Every collection of a namespace by incarnation.
    pub(crate) async fn collections_by_incarnation(
        &self,
        namespace: &Namespace,
    ) -> Result<HashMap<String, CollectionSpec>> {
        let all: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL")
            .arg(self.keys.namespace(namespace).collections())
            .query_async(&mut self.conn())
            .await
            .db()?;
        all.iter()
            .map(|(_, value)| collection_from(value).map(|c| (c.incarnation, c.spec)))
            .collect()
    }

    /// Every record of one collection incarnation in a scope.
    pub(crate) async fn read_records(
        &self,
        keys: &ScopeKeys,
        incarnation: &str,
    ) -> Result<Vec<VectorRecord>> {
        let all: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL")
            .arg(keys.vectors(incarnation))
            .query_async(&mut self.conn())
            .await
            .db()?;
        all.iter()
            .map(|(id, value)| decode_record(id, value))
            .collect()
    }

    /// Writes records already checked against their collection, and notes the scope as a
    /// holder of the incarnation (so a drop can find them).
    pub(crate) async fn write_records(
        &self,
        scope: &Scope,
        incarnation: &str,
        records: &[VectorRecord],
    ) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let keys = self.keys.scope(scope);
        let token = version_token();
        let mut script = UPSERT.key(keys.vectors(incarnation));
        script
            .key(keys.vector_incarnations())
            .key(keys.vector_token(incarnation))
            .arg(incarnation)
            .arg(&token);
        for record in records {
            script.arg(record.id.as_str()).arg(encode_record(record));
        }
        let mut holders = redis::cmd("SADD");
        holders
            .arg(
                self.keys
                    .namespace(scope.namespace())
                    .collection_holders(incarnation),
            )
            .arg(keys.base());
        // Sent together, in this order on one connection (the holders set lives in the
        // namespace's slot, the records in the scope's: not one script on a cluster).
        let (previous, _): (String, i64) = futures::try_join!(
            async { script.invoke_async(&mut self.conn()).await.db() },
            async { holders.query_async(&mut self.conn()).await.db() },
        )?;
        self.vector_cache.advance(
            &(keys.base().to_owned(), incarnation.to_owned()),
            &previous,
            token,
            |matrix| matrix.upsert(records),
        );
        Ok(())
    }

    /// Creates a collection unless it exists; returns what is stored.
    pub(crate) async fn insert_collection(
        &self,
        namespace: &Namespace,
        spec: &CollectionSpec,
    ) -> Result<StoredCollection> {
        let keys = self.keys.namespace(namespace);
        let value: Vec<u8> = ENSURE
            .key(keys.collections())
            .key(keys.collection_counter())
            .arg(&spec.name)
            .arg(to_json(spec))
            .invoke_async(&mut self.conn())
            .await
            .db()?;
        self.register_namespace(namespace).await?;
        collection_from(&value)
    }
}

#[async_trait]
impl VectorStore for RedisStore {
    async fn ensure_collection(
        &self,
        namespace: &Namespace,
        spec: CollectionSpec,
    ) -> Result<CollectionSpec> {
        let stored = self.insert_collection(namespace, &spec).await?;
        stored.spec.check_same(&spec)?;
        Ok(stored.spec)
    }

    async fn list_collections(&self, namespace: &Namespace) -> Result<Vec<CollectionSpec>> {
        let mut specs: Vec<CollectionSpec> = self
            .collections_by_incarnation(namespace)
            .await?
            .into_values()
            .collect();
        specs.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(specs)
    }

    async fn drop_collection(&self, namespace: &Namespace, name: &str) -> Result<bool> {
        let keys = self.keys.namespace(namespace);
        let reply: Vec<String> = DROP
            .key(keys.collections())
            .arg(name)
            .arg(keys.base())
            .invoke_async(&mut self.conn())
            .await
            .db()?;
        let Some((incarnation, holders)) = reply.split_first() else {
            return Ok(false);
        };
        // The spec is gone, so no read sees these records any more; delete them scope by scope
        // (each scope is a slot of its own).
        for base in holders {
            let () = redis::pipe()
                .cmd("DEL")
                .arg(format!("{base}v:{incarnation}"))
                .arg(format!("{base}vt:{incarnation}"))
                .ignore()
                .cmd("SREM")
                .arg(format!("{base}vc"))
                .arg(incarnation)
                .ignore()
                .query_async(&mut self.conn())
                .await
                .db()?;
        }
        Ok(true)
    }

    async fn upsert_vectors(
        &self,
        scope: &Scope,
        collection: &str,
        records: Vec<VectorRecord>,
    ) -> Result<usize> {
        let collection = self.collection(scope.namespace(), collection).await?;
        for record in &records {
            collection.spec.check_vector(&record.vector)?;
        }
        // The scope is registered in the same round trip as the write, sent first.
        futures::try_join!(
            self.register_scope(scope),
            self.write_records(scope, &collection.incarnation, &records),
        )?;
        Ok(records.len())
    }

    async fn get_vector(
        &self,
        scope: &Scope,
        collection: &str,
        id: &VectorId,
    ) -> Result<VectorRecord> {
        let collection = self.collection(scope.namespace(), collection).await?;
        let keys = self.keys.scope(scope);
        let value: Option<Vec<u8>> = redis::cmd("HGET")
            .arg(keys.vectors(&collection.incarnation))
            .arg(id.as_str())
            .query_async(&mut self.conn())
            .await
            .db()?;
        let value = value.ok_or_else(|| MemoryError::not_found("vector", id.as_str()))?;
        decode_record(id.as_str(), &value)
    }

    async fn delete_vectors(
        &self,
        scope: &Scope,
        collection: &str,
        selector: VectorSelector,
    ) -> Result<usize> {
        let collection = self.collection(scope.namespace(), collection).await?;
        let keys = self.keys.scope(scope);
        let ids: Vec<VectorId> = match selector {
            VectorSelector::Ids(ids) => ids,
            VectorSelector::Filter(filter) => self
                .read_records(&keys, &collection.incarnation)
                .await?
                .into_iter()
                .filter(|r| filter.matches(&r.metadata))
                .map(|r| r.id)
                .collect(),
        };
        if ids.is_empty() {
            return Ok(0);
        }
        let token = version_token();
        let (removed, previous): (usize, String) = DELETE
            .key(keys.vectors(&collection.incarnation))
            .key(keys.vector_token(&collection.incarnation))
            .arg(&token)
            .arg(ids.iter().map(VectorId::as_str).collect::<Vec<_>>())
            .invoke_async(&mut self.conn())
            .await
            .db()?;
        if removed > 0 {
            self.vector_cache.advance(
                &(keys.base().to_owned(), collection.incarnation),
                &previous,
                token,
                |matrix| matrix.remove(&ids),
            );
        }
        Ok(removed)
    }

    async fn search(
        &self,
        scope: &Scope,
        collection: &str,
        query: VectorQuery,
    ) -> Result<Vec<VectorHit>> {
        let keys = self.keys.scope(scope);
        let seen = match self
            .search_held(scope.namespace(), &keys, collection, &query)
            .await?
        {
            Held::Hits(hits) => return Ok(hits),
            // The collection is as seen and its records changed: read them, no lookup.
            Held::RecordsChanged(seen) => seen,
            Held::Unknown => {
                let seen = self.seen_collection(scope.namespace(), collection).await?;
                seen.stored.spec.check_vector(&query.vector)?;
                let cache_key = (keys.base().to_owned(), seen.stored.incarnation.clone());
                if let Some((token, index)) = self.vector_cache.latest(&cache_key) {
                    if let Some(hits) = self
                        .hits_at(&keys, &seen.stored.incarnation, &token, &index, &query)
                        .await?
                    {
                        return Ok(hits);
                    }
                }
                seen
            }
        };
        let cache_key = (keys.base().to_owned(), seen.stored.incarnation.clone());
        self.search_read(&keys, &seen.stored, cache_key, &query)
            .await
    }
}

/// What a search found with the collection as seen and the matrix held (see
/// [`RedisStore::search_held`]).
enum Held {
    /// The collection and the records were unchanged: the hits.
    Hits(Vec<VectorHit>),
    /// The collection was unchanged, its records not: they must be read again.
    RecordsChanged(Arc<SeenCollection>),
    /// No collection seen, no matrix held, or the collection changed: look it up.
    Unknown,
}

impl RedisStore {
    /// A search in one round trip: with the collection seen before and the scope's matrix
    /// held, ranks the matrix and reads the collection's value beside the records' token; the
    /// hits, if neither changed. A collection dropped and made again has another value (its
    /// incarnation), and its records another token.
    async fn search_held(
        &self,
        namespace: &Namespace,
        keys: &ScopeKeys,
        name: &str,
        query: &VectorQuery,
    ) -> Result<Held> {
        let Some(seen) = self.seen_collections.get(namespace, name) else {
            return Ok(Held::Unknown);
        };
        let incarnation = &seen.stored.incarnation;
        // Checked against the spec as seen: if it no longer holds, the slow path checks
        // against the stored one.
        if seen.stored.spec.check_vector(&query.vector).is_err() {
            return Ok(Held::Unknown);
        }
        let Some((token, index)) = self
            .vector_cache
            .latest(&(keys.base().to_owned(), incarnation.clone()))
        else {
            return Ok(Held::Unknown);
        };
        // Two requests sent together: one round trip on one connection (the collection and
        // the records may sit on different cluster nodes, so not one transaction; the
        // collection unchanged and the token unchanged mean the records were as ranked).
        let (value, hits) = futures::try_join!(
            self.collection_value(namespace, name),
            self.hits_at(keys, incarnation, &token, &index, query),
        )?;
        if value.as_deref() != Some(seen.value.as_slice()) {
            return Ok(Held::Unknown);
        }
        Ok(hits.map_or(Held::RecordsChanged(seen), Held::Hits))
    }

    /// Reads the scope's records with their token in one transaction, ranks them, and keeps
    /// their matrix when they have a token; the hits come from the same read.
    async fn search_read(
        &self,
        keys: &ScopeKeys,
        collection: &StoredCollection,
        cache_key: (String, String),
        query: &VectorQuery,
    ) -> Result<Vec<VectorHit>> {
        // MULTI/EXEC rather than a script: a script copies every record into Lua and back,
        // a cost that grows with the collection (docs/decisions/redis-hash-tag-and-lua.md).
        let (token, records): (Option<String>, Vec<(String, Vec<u8>)>) = redis::pipe()
            .atomic()
            .get(keys.vector_token(&collection.incarnation))
            .hgetall(keys.vectors(&collection.incarnation))
            .query_async(&mut self.conn())
            .await
            .db()?;
        // A matrix kept for later searches holds whole records, so they read no hits. One
        // used only now takes the vectors (and the metadata, when a filter needs it); its
        // hits' records are decoded whole afterwards.
        let (dims, metric) = (collection.spec.dims, collection.spec.metric);
        let mut index = if token.is_some() {
            ExactIndex::holding_records(dims, metric)
        } else {
            ExactIndex::new(dims, metric)
        };
        for (id, value) in &records {
            let (_, body, vector) = record_parts(value)?;
            if vector.len() != dims * 4 {
                return Err(corrupt("vector", format!("{} bytes in {id}", vector.len())));
            }
            let id = VectorId::new(id.as_str()).map_err(|e| corrupt("vector id", e))?;
            if index.holds_records() {
                let (conversation_id, body, _) = decoded_parts(value)?;
                index.push_record_le_bytes(id, vector, body.metadata, body.text, conversation_id);
            } else {
                let metadata = if query.filter.is_some() {
                    body_from(body)?.metadata
                } else {
                    Metadata::default()
                };
                index.push_le_bytes(id, vector, metadata);
            }
        }
        // A matrix holding records has its hits decoded already.
        let hits = match index.search_records(query) {
            Some(hits) => hits,
            None => index
                .search(query)
                .into_iter()
                .map(|(row, score)| hit(&records[row].0, &records[row].1, score, query))
                .collect::<Result<Vec<_>>>()?,
        };
        if let Some(token) = token {
            self.vector_cache.insert(cache_key, token, Arc::new(index));
        }
        Ok(hits)
    }

    /// Ranks a held matrix, which holds its records, after one read of the records' token: the
    /// hits, if the records are still at `token`.
    async fn hits_at(
        &self,
        keys: &ScopeKeys,
        incarnation: &str,
        token: &str,
        index: &ExactIndex,
        query: &VectorQuery,
    ) -> Result<Option<Vec<VectorHit>>> {
        // The matrix holds the records as of `token`: unchanged since, they are the hits.
        let current: Option<String> = redis::cmd("GET")
            .arg(keys.vector_token(incarnation))
            .query_async(&mut self.conn())
            .await
            .db()?;
        if current.as_deref() != Some(token) {
            return Ok(None);
        }
        index
            .search_records(query)
            .ok_or_else(|| corrupt("vector", "a kept matrix without its records"))
            .map(Some)
    }
}

/// A hit from its stored record.
fn hit(id: &str, value: &[u8], score: f32, query: &VectorQuery) -> Result<VectorHit> {
    let mut record = decode_record(id, value)?;
    if !query.include_vectors {
        record.vector = Vec::new();
    }
    Ok(VectorHit { record, score })
}
