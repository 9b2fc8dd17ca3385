//! [`Memories`]: structured memories — a kind plus JSON data checked against the kind's schema —
//! stored, superseded, searched and shared over any backend.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use mnemix_core::registry::{self, canonical_json, memory_id, memory_key, Grant, KindSpec};
use mnemix_core::MemoryBackend;
use mnemix_core::{ConversationId, FactId, Namespace, Scope, Subject};
use mnemix_core::{Fact, FactSource, NewFact, RecallQuery, RememberOptions, RememberStatus};
use mnemix_core::{MemoryError, Result};
use mnemix_core::{Origin, Principal, Provenance, Timestamp, Ttl};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::schema::{self, Schema};

/// A memory to store: a registered kind and data that follows its schema.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NewMemory {
    /// The kind (registered in the scope's namespace).
    pub kind: String,
    /// The data, checked against the kind's JSON Schema.
    pub data: Value,
    /// For a kind without `unique_on`: the memory to update (a new version supersedes the
    /// current one); none creates a memory with a fresh id. Refused for kinds with
    /// `unique_on`, whose ids come from the unique fields.
    pub id: Option<String>,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// How sure the writer is, in [0, 1].
    pub confidence: Option<f32>,
    /// The conversation (and messages) it comes from.
    pub source: Option<FactSource>,
    /// When it expires; `ttl` wins when both are set.
    pub expires_at: Option<Timestamp>,
    /// Expires this long after it is stored.
    pub ttl: Option<Ttl>,
    /// Embedding for semantic search.
    pub embedding: Option<Vec<f32>>,
    /// When it became true in the world (not when it is stored); a new version with a later
    /// one closes the current version's `valid_until` there.
    pub valid_from: Option<Timestamp>,
    /// When it stopped being true in the world.
    pub valid_until: Option<Timestamp>,
}

impl NewMemory {
    /// A memory of `kind` holding `data`.
    pub fn new(kind: impl Into<String>, data: Value) -> Self {
        Self {
            kind: kind.into(),
            data,
            ..Self::default()
        }
    }
}

/// A stored memory, one version of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredMemory {
    /// The memory's id: the same across its versions (from the unique fields, given, or made
    /// when it was created). A plain fact's id is its fact id.
    pub id: String,
    /// This version's fact id (for `get_fact`, `set_expiry`, `forget`).
    pub version: FactId,
    /// Its kind; none for a plain fact without one.
    pub kind: Option<String>,
    /// Its data; a plain fact's is its text.
    pub data: Value,
    /// Tags.
    pub tags: Vec<String>,
    /// How sure the writer was.
    pub confidence: Option<f32>,
    /// Where it was learned.
    pub source: Option<FactSource>,
    /// When this version was stored.
    pub created_at: Timestamp,
    /// When it expires.
    pub expires_at: Option<Timestamp>,
    /// Whether this is the current version (not superseded).
    pub is_latest: bool,
    /// Who wrote this version and where its content came from.
    pub provenance: Provenance,
    /// When it became true in the world, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_from: Option<Timestamp>,
    /// When it stopped being true in the world, if known (or closed by a later version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<Timestamp>,
}

impl StoredMemory {
    /// The memory a fact holds: structured when its key is `kind:id` and its text JSON, else
    /// a plain fact whose data is its text.
    pub fn from_fact(fact: Fact) -> Self {
        let structured = memory_id(&fact)
            .map(str::to_owned)
            .zip(serde_json::from_str::<Value>(&fact.text).ok());
        let is_latest = fact.is_current();
        let (id, data) = match structured {
            Some((id, data)) => (id, data),
            None => (fact.id.to_string(), Value::String(fact.text)),
        };
        Self {
            id,
            version: fact.id,
            kind: fact.kind,
            data,
            tags: fact.tags,
            confidence: fact.score,
            source: fact.source,
            created_at: fact.created_at,
            expires_at: fact.expires_at,
            is_latest,
            provenance: fact.provenance,
            valid_from: fact.valid_from,
            valid_until: fact.valid_until,
        }
    }
}

/// What [`Memories::store`] did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryOutcome {
    /// The memory as stored (or as it already was).
    pub memory: StoredMemory,
    /// Created, a duplicate of the current version (nothing changed), or superseding it.
    pub status: RememberStatus,
}

/// Whose memories a search reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchScope {
    /// The subject's own.
    Own,
    /// Only what other subjects of the namespace granted it.
    Shared,
    /// Both (the default).
    #[default]
    All,
}

/// Where a search found a memory: as JSON `"own"` or `{"shared": {"owner": "…"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemorySource {
    /// The searching subject's own.
    Own,
    /// Shared with it by `owner`'s grant.
    Shared {
        /// The subject that shared it.
        owner: Subject,
    },
}

/// A search of [`Memories::search`]: lexical with `text`, semantic with `vector`, both hybrid
/// (the facts' recall), filtered. `default()` and the `with_` methods build one (it may gain
/// fields).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MemoryQuery {
    /// Query text.
    pub text: Option<String>,
    /// Query embedding.
    pub vector: Option<Vec<f32>>,
    /// Only memories of this kind.
    pub kind: Option<String>,
    /// Only memories carrying every one of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Only memories learned in this conversation.
    pub conversation: Option<ConversationId>,
    /// Only memories at least this confident.
    pub min_confidence: Option<f32>,
    /// Most results (default 10).
    pub limit: Option<usize>,
    /// Own, shared, or all (default).
    #[serde(default)]
    pub scope: SearchScope,
    /// Only memories of these origins (all when empty).
    #[serde(default)]
    pub origins: Vec<Origin>,
    /// Only memories these principals wrote (all when empty): e.g. leave out what another
    /// agent wrote into a memory shared through a grant.
    #[serde(default)]
    pub written_by: Vec<Principal>,
}

impl MemoryQuery {
    /// The same kept to these origins.
    #[must_use]
    pub fn with_origins(mut self, origins: impl IntoIterator<Item = Origin>) -> Self {
        self.origins = origins.into_iter().collect();
        self
    }

    /// The same kept to what these principals wrote.
    #[must_use]
    pub fn with_written_by(mut self, principals: impl IntoIterator<Item = Principal>) -> Self {
        self.written_by = principals.into_iter().collect();
        self
    }

    /// The same searching for this text.
    #[must_use]
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    /// The same searching near this embedding (or not by vector).
    #[must_use]
    pub fn with_vector(mut self, vector: impl Into<Option<Vec<f32>>>) -> Self {
        self.vector = vector.into();
        self
    }

    /// The same keeping only memories of this kind.
    #[must_use]
    pub fn with_kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// The same keeping only memories carrying every one of these tags.
    #[must_use]
    pub fn with_tags(mut self, tags: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// The same keeping only memories learned in this conversation (or in any).
    #[must_use]
    pub fn with_conversation(mut self, conversation: impl Into<Option<ConversationId>>) -> Self {
        self.conversation = conversation.into();
        self
    }

    /// The same keeping only memories at least this confident (or any).
    #[must_use]
    pub fn with_min_confidence(mut self, min: impl Into<Option<f32>>) -> Self {
        self.min_confidence = min.into();
        self
    }

    /// The same returning at most this many (or the default).
    #[must_use]
    pub fn with_limit(mut self, limit: impl Into<Option<usize>>) -> Self {
        self.limit = limit.into();
        self
    }

    /// The same searching own, shared or all memories.
    #[must_use]
    pub fn with_scope(mut self, scope: SearchScope) -> Self {
        self.scope = scope;
        self
    }
}

/// A memory a search found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryHit {
    /// The memory (`is_latest` is always true: searches read current versions).
    pub memory: StoredMemory,
    /// How relevant, as the facts' recall scores it (lexical in [0, 1], cosine, or fused).
    pub relevance: f64,
    /// Own, or shared by whom.
    pub source: MemorySource,
}

/// Structured memories over any backend: kinds registered per namespace with a JSON Schema and
/// optional unique fields, memories stored as kind + data, searched by kind, tags and
/// conversation, and shared between the subjects (agents) of a namespace by grants.
///
/// A memory is a fact: its text is the canonical JSON of its data, its kind the fact's kind,
/// its key `kind:id`. So it is deduplicated (the same data again changes nothing), superseded
/// with history, atomic under concurrent writers, expired, exported, copied and verified
/// exactly as facts are, on every backend, and recalled by the same lexical, semantic and
/// hybrid ranking. Kinds and grants live in the namespace's registry
/// ([`mnemix_core::registry`]).
///
/// ```
/// use std::sync::Arc;
/// use mnemix_core::{InMemoryBackend, Scope};
/// use mnemix_core::registry::KindSpec;
/// use mnemix_engine::{Memories, MemoryQuery, NewMemory};
/// use serde_json::json;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mnemix_core::Result<()> {
/// let memories = Memories::new(Arc::new(InMemoryBackend::new()));
/// let scope = Scope::new("support", "agent-007")?;
/// let schema = json!({"type": "object", "required": ["category", "value"],
///     "properties": {"category": {"type": "string"}, "value": {"type": "string"}}});
/// memories
///     .register_kind(scope.namespace(), KindSpec::new("Preference", schema).unique_on(["category"]))
///     .await?;
/// let first = json!({"category": "food", "value": "vegetarian"});
/// memories.store(&scope, NewMemory::new("Preference", first)).await?;
/// let second = json!({"category": "food", "value": "vegan"}); // supersedes the first
/// memories.store(&scope, NewMemory::new("Preference", second)).await?;
///
/// let query = MemoryQuery::default().with_text("food").with_kind("Preference");
/// let hits = memories.search(&scope, query).await?;
/// assert_eq!(hits.len(), 1);
/// assert_eq!(hits[0].memory.data["value"], "vegan");
/// # Ok(()) }
/// ```
pub struct Memories {
    backend: Arc<dyn MemoryBackend>,
    /// Compiled schemas by namespace and kind, with the spec they were compiled from (a kind
    /// re-registered elsewhere is compiled again).
    schemas: Arc<Mutex<SchemaCache>>,
}

/// Compiled schemas by (namespace, kind), beside the spec each was compiled from.
type SchemaCache = HashMap<(Namespace, String), (KindSpec, Arc<Schema>)>;

impl std::fmt::Debug for Memories {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memories")
            .field("backend", &self.backend.backend_name())
            .finish_non_exhaustive()
    }
}

impl Memories {
    /// Structured memories over `backend` (behind the front layer).
    pub fn new(backend: Arc<dyn MemoryBackend>) -> Self {
        Self {
            backend: mnemix_core::Checked::wrap(backend),
            schemas: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The same memories, their compiled schemas shared, stored through `backend` (the same
    /// store writing as another principal: [`MemoryBackend::acting_as`]).
    #[must_use]
    pub fn through(&self, backend: Arc<dyn MemoryBackend>) -> Self {
        Self {
            backend: mnemix_core::Checked::wrap(backend),
            schemas: Arc::clone(&self.schemas),
        }
    }

    /// Registers a kind in `namespace`, or replaces its definition (memories stored before are
    /// not checked again). A schema that does not compile, a bad name or bad unique fields is
    /// `InvalidInput`.
    pub async fn register_kind(&self, namespace: &Namespace, spec: KindSpec) -> Result<()> {
        spec.validate()?;
        let compiled = schema::compile(&spec.schema, &format!("kind {}: schema", spec.name))?;
        registry::register_kind(self.backend.as_ref(), namespace, &spec).await?;
        self.schemas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                (namespace.clone(), spec.name.clone()),
                (spec, Arc::new(compiled)),
            );
        Ok(())
    }

    /// Every kind registered in `namespace`, by name.
    pub async fn kinds(&self, namespace: &Namespace) -> Result<Vec<KindSpec>> {
        registry::kinds(self.backend.as_ref(), namespace).await
    }

    /// Deletes kind `name` of `namespace`; whether it was registered. Memories of the kind stay
    /// and read as before; storing more needs the kind registered again.
    pub async fn delete_kind(&self, namespace: &Namespace, name: &str) -> Result<bool> {
        let deleted = registry::delete_kind(self.backend.as_ref(), namespace, name).await?;
        self.schemas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(namespace.clone(), name.to_owned()));
        Ok(deleted)
    }

    /// The kind registered as `name`, with its compiled schema; `InvalidInput` when none is.
    async fn kind(&self, namespace: &Namespace, name: &str) -> Result<(KindSpec, Arc<Schema>)> {
        let spec = registry::kind(self.backend.as_ref(), namespace, name)
            .await?
            .ok_or_else(|| {
                MemoryError::invalid(format!(
                    "memory kind {name:?} is not registered in namespace {}",
                    namespace.as_str()
                ))
            })?;
        let key = (namespace.clone(), name.to_owned());
        let cached = self
            .schemas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .filter(|(known, _)| *known == spec)
            .map(|(_, schema)| Arc::clone(schema));
        if let Some(schema) = cached {
            return Ok((spec, schema));
        }
        let compiled = Arc::new(schema::compile(
            &spec.schema,
            &format!("kind {name}: schema"),
        )?);
        self.schemas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, (spec.clone(), Arc::clone(&compiled)));
        Ok((spec, compiled))
    }

    /// Stores a memory of `scope`'s subject.
    ///
    /// # Behavior
    /// - The kind must be registered and the data follow its schema, else `InvalidInput`
    ///   naming the kind and every failing path.
    /// - With `unique_on`, the memory's id is a digest of those fields' values: a memory with
    ///   equal values supersedes the current one (kept as history), atomically under
    ///   concurrent writers; identical data is a `Duplicate` and changes nothing.
    /// - Without, a memory without id is created with a fresh one; with an id, it supersedes
    ///   that memory's current version.
    pub async fn store(&self, scope: &Scope, memory: NewMemory) -> Result<MemoryOutcome> {
        scope.require_subject("storing a memory")?;
        let (spec, schema) = self.kind(scope.namespace(), &memory.kind).await?;
        registry::check_memory_data(&spec.name, &memory.data)?;
        schema.check(&memory.data, &format!("a memory of kind {}", spec.name))?;
        let id = match (spec.unique_id(&memory.data), memory.id) {
            (Some(_), Some(_)) => {
                return Err(MemoryError::invalid(format!(
                    "kind {} identifies its memories by {:?}: store without an id",
                    spec.name, spec.unique_on
                )))
            }
            (Some(id), None) | (None, Some(id)) => id,
            (None, None) => FactId::generate().to_string(),
        };
        let expires_at = match memory.ttl {
            Some(ttl) => Some(ttl.expires_at(self.backend.now())),
            None => memory.expires_at,
        };
        let fact = NewFact::new(canonical_json(&memory.data))
            .with_kind(spec.name.clone())
            .with_key(memory_key(&spec.name, &id)?)
            .with_tags(memory.tags)
            .with_score(memory.confidence)
            .with_source(memory.source)
            .with_embedding(memory.embedding)
            .with_expires_at(expires_at)
            .with_valid_from(memory.valid_from)
            .with_valid_until(memory.valid_until);
        let outcome = self
            .backend
            .remember(scope, fact, RememberOptions::default())
            .await?;
        Ok(MemoryOutcome {
            memory: StoredMemory::from_fact(outcome.fact),
            status: outcome.status,
        })
    }

    /// Stores memories one after another as [`store`](Self::store) does; `ttl` is the
    /// request's default expiry, for those given neither a TTL nor an instant. Each store is
    /// atomic, the batch is not: it stops at the first error, and what was stored before it
    /// stays (storing the batch again is safe: those come back as duplicates).
    pub async fn store_many(
        &self,
        scope: &Scope,
        memories: Vec<NewMemory>,
        ttl: Option<Ttl>,
    ) -> Result<Vec<MemoryOutcome>> {
        let mut outcomes = Vec::with_capacity(memories.len());
        for mut memory in memories {
            if memory.ttl.is_none() && memory.expires_at.is_none() {
                memory.ttl = ttl;
            }
            outcomes.push(self.store(scope, memory).await?);
        }
        Ok(outcomes)
    }

    /// The current version of memory `id` of `kind`; `NotFound` when there is none.
    pub async fn get(&self, scope: &Scope, kind: &str, id: &str) -> Result<StoredMemory> {
        self.history(scope, kind, id)
            .await?
            .into_iter()
            .rfind(|m| m.is_latest)
            .ok_or_else(|| MemoryError::not_found("memory", format!("{kind}:{id}")))
    }

    /// Every version of memory `id` of `kind`, oldest first, the current one last.
    pub async fn history(&self, scope: &Scope, kind: &str, id: &str) -> Result<Vec<StoredMemory>> {
        let versions = self.backend.history(scope, &memory_key(kind, id)?).await?;
        Ok(versions.into_iter().map(StoredMemory::from_fact).collect())
    }

    /// Deletes memory `id` of `kind` with its history; whether it had a live version.
    pub async fn delete(&self, scope: &Scope, kind: &str, id: &str) -> Result<bool> {
        let mut deleted = false;
        for version in self.backend.history(scope, &memory_key(kind, id)?).await? {
            deleted |= self.backend.forget(scope, &version.id).await?;
        }
        Ok(deleted)
    }

    /// Searches the subject's memories, those other subjects granted it, or both.
    ///
    /// # Behavior
    /// - Each scope is recalled as facts are ([`rank_facts`](mnemix_core::adapter::rank_facts)):
    ///   current, unexpired memories matching the filters; a shared scope only through its
    ///   grant's kinds and tags. The hits are merged by relevance (then own before shared),
    ///   and the best `limit` returned.
    /// - A subject reads another's memories only through a grant in force: none, or revoked,
    ///   and nothing of theirs is found.
    pub async fn search(&self, scope: &Scope, query: MemoryQuery) -> Result<Vec<MemoryHit>> {
        let subject = scope.require_subject("searching memories")?;
        let limit = query
            .limit
            .unwrap_or(mnemix_core::limits::DEFAULT_RECALL_LIMIT);
        let mut recall = RecallQuery::default()
            .with_tags(query.tags.clone())
            .with_origins(query.origins.iter().copied())
            .with_written_by(query.written_by.iter().cloned())
            .with_limit(limit);
        recall.text.clone_from(&query.text);
        recall.vector.clone_from(&query.vector);
        recall.kind.clone_from(&query.kind);
        recall.min_score = query.min_confidence;
        recall.conversation.clone_from(&query.conversation);
        let mut hits = Vec::new();
        if query.scope != SearchScope::Shared {
            hits.extend(
                self.backend
                    .recall(scope, recall.clone())
                    .await?
                    .into_iter()
                    .map(|hit| (hit, MemorySource::Own)),
            );
        }
        if query.scope != SearchScope::Own {
            let grants =
                registry::grants_to(self.backend.as_ref(), scope.namespace(), subject).await?;
            for grant in grants {
                let owner = Scope::new(scope.namespace().as_str(), grant.owner.as_str())?;
                for granted in granted_queries(&grant, &recall) {
                    for hit in self.backend.recall(&owner, granted).await? {
                        if grant.admits(&hit.fact) {
                            let source = MemorySource::Shared {
                                owner: grant.owner.clone(),
                            };
                            hits.push((hit, source));
                        }
                    }
                }
            }
        }
        // Stable: own hits came first, so they stay first among equals.
        hits.sort_by(|a, b| b.0.relevance.total_cmp(&a.0.relevance));
        hits.truncate(limit);
        Ok(hits
            .into_iter()
            .map(|(hit, source)| MemoryHit {
                memory: StoredMemory::from_fact(hit.fact),
                relevance: hit.relevance,
                source,
            })
            .collect())
    }

    /// Lets `grant.grantee` read `grant.owner`'s memories (all, or only the grant's kinds and
    /// tags), replacing any earlier grant between them.
    pub async fn grant(&self, namespace: &Namespace, grant: Grant) -> Result<()> {
        registry::put_grant(self.backend.as_ref(), namespace, &grant).await
    }

    /// Ends `owner`'s grant to `grantee`; whether there was one.
    pub async fn revoke(
        &self,
        namespace: &Namespace,
        owner: &Subject,
        grantee: &Subject,
    ) -> Result<bool> {
        registry::revoke_grant(self.backend.as_ref(), namespace, owner, grantee).await
    }

    /// The grants in force to `grantee`.
    pub async fn grants_to(&self, namespace: &Namespace, grantee: &Subject) -> Result<Vec<Grant>> {
        registry::grants_to(self.backend.as_ref(), namespace, grantee).await
    }

    /// Every grant in force in `namespace`, by owner then grantee.
    pub async fn grants(&self, namespace: &Namespace) -> Result<Vec<Grant>> {
        registry::grants(self.backend.as_ref(), namespace).await
    }
}

/// The recalls a grant allows for `query`: one per granted kind (or one when the grant names
/// none), each with the grant's tags added; none when the query asks for a kind the grant
/// does not give.
fn granted_queries(grant: &Grant, query: &RecallQuery) -> Vec<RecallQuery> {
    let mut tags = query.tags.clone();
    tags.extend(
        grant
            .tags
            .iter()
            .filter(|t| !query.tags.contains(t))
            .cloned(),
    );
    let kinds: Vec<Option<String>> = match (&query.kind, grant.kinds.is_empty()) {
        (_, true) => vec![query.kind.clone()],
        (Some(kind), false) => grant
            .kinds
            .contains(kind)
            .then(|| Some(kind.clone()))
            .into_iter()
            .collect(),
        (None, false) => grant.kinds.iter().cloned().map(Some).collect(),
    };
    kinds
        .into_iter()
        .map(|kind| {
            let mut one = query.clone();
            one.kind = kind;
            one.tags.clone_from(&tags);
            one
        })
        .collect()
}
