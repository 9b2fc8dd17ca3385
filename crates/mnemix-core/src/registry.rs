//! A namespace's registry: the kinds of structured memories and the grants by which one
//! subject (an agent) shares its memories with another.
//!
//! Both are kept as facts of reserved kinds ([`KIND_RECORD`], [`GRANT_RECORD`]) in the
//! namespace's shared scope, so every backend — ours and anyone's — stores them atomically,
//! supersedes them with history, and exports, copies and verifies them as it does facts, with
//! no table or key of their own. A subject's own facts never hold them, so recall of a subject
//! never meets them. The front layer's [`forget_all`](crate::MemoryBackend::forget_all) removes
//! the grants from and to the subject it erases.
//!
//! Only this module writes registry records. Kinds, keys and tags starting with `_` are its
//! reserved shapes: the front layer refuses them on every other path (`remember` without a
//! [`RegistryWrite`], which only this module can make; a restore record that is not a
//! well-formed registry record, [`check_record`]), so nobody forges a grant or replaces a schema
//! through the facts API. Reads skip a record they cannot decode (and log it), so one bad record
//! never makes a namespace's kinds or shared search fail.
//!
//! Checking memories against a kind's JSON Schema is the engine's (`mnemix_engine::Memories`);
//! what is kept here is what every store must agree on: the record formats, the keys, the
//! canonical JSON of a memory's data, and the limits that keep what is accepted readable.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use std::collections::{BTreeMap, HashSet};

use crate::backend::MemoryBackend;
use crate::error::{MemoryError, Result};
use crate::fact::{Fact, FactQuery, NewFact, RememberOptions};
use crate::front::FrontLayerOnly;
use crate::limits::{MAX_KIND_NAME_BYTES, MAX_MEMORY_ID_BYTES, RESERVED_PREFIX};
use crate::message::check_json_depth;
use crate::migration::lowercase_hex;
use crate::records::Record;
use crate::scope::{validate_identifier, FactId, Namespace, Scope, Subject};

/// The fact kind of a registered memory kind (in the namespace's shared scope).
pub const KIND_RECORD: &str = "_kind";
/// The fact kind of a sharing grant (in the namespace's shared scope).
pub const GRANT_RECORD: &str = "_grant";

/// Proof that a write comes from this module: it alone can make one, and the front layer
/// refuses a fact of the reserved shapes in a [`RememberOptions`] without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistryWrite(());

/// `InvalidInput` when a fact's kind, key or any tag has a reserved shape (starts with `_`).
pub fn check_unreserved(kind: Option<&str>, key: Option<&str>, tags: &[String]) -> Result<()> {
    let fields = [("kind", kind), ("key", key)]
        .into_iter()
        .filter_map(|(what, value)| Some((what, value?)))
        .chain(tags.iter().map(|tag| ("tag", tag.as_str())));
    for (what, value) in fields {
        if value.starts_with(RESERVED_PREFIX) {
            return Err(MemoryError::invalid(format!(
                "fact {what} {value:?} starts with `{RESERVED_PREFIX}`: reserved for the registry of \
                 kinds and grants (register kinds and grant through the registry)"
            )));
        }
    }
    Ok(())
}

/// Whether `fact` has a registry record's shape (a reserved kind, key or tag): the front
/// layer lets only the registry's own operations change it.
pub fn is_registry_record(fact: &Fact) -> bool {
    check_unreserved(fact.kind.as_deref(), fact.key.as_deref(), &fact.tags).is_err()
}

/// `records` to restore, changed so that each registry key ends with one current version at
/// most: of a key's current versions (the stored one and the batch's), the newest by
/// `(created_at, id)` stays current, and every other one becomes history that it superseded (a
/// stored one through a copy in the batch, which replaces it by identity). So restoring a
/// broad grant beside the narrower one its owner wrote later leaves the narrower one in
/// force, and a kind is never registered twice.
pub(crate) async fn one_current_version(
    backend: &dyn MemoryBackend,
    mut records: Vec<Record>,
) -> Result<Vec<Record>> {
    let mut current: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (at, record) in records.iter().enumerate() {
        if let Record::Fact { fact } = record {
            if let (true, true, Some(key)) =
                (is_registry_record(fact), fact.is_current(), &fact.key)
            {
                let namespace = fact.scope.namespace().as_str().to_owned();
                current
                    .entry((namespace, key.clone()))
                    .or_default()
                    .push(at);
            }
        }
    }
    let in_batch: HashSet<FactId> = records
        .iter()
        .filter_map(|record| match record {
            Record::Fact { fact } => Some(fact.id.clone()),
            _ => None,
        })
        .collect();
    let mut superseded_stored = Vec::new();
    for ((namespace, key), batch) in current {
        let stored: Vec<Fact> = backend
            .history(&shared(&Namespace::new(namespace)?)?, &key)
            .await?
            .into_iter()
            .filter(|fact| fact.is_current() && !in_batch.contains(&fact.id))
            .collect();
        let fact_at = |at: usize| match &records[at] {
            Record::Fact { fact } => fact,
            _ => unreachable!("indexes of fact records"),
        };
        let newest = batch
            .iter()
            .map(|&at| fact_at(at))
            .chain(&stored)
            .max_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)))
            .map(|fact| (fact.id.clone(), fact.created_at));
        let Some((newest, since)) = newest else {
            continue;
        };
        let supersede = |fact: &mut Fact| {
            fact.superseded_by = Some(newest.clone());
            fact.valid_to = Some(since);
            fact.updated_at = fact.updated_at.max(since);
        };
        for at in batch {
            if let Record::Fact { fact } = &mut records[at] {
                if fact.id != newest {
                    supersede(fact);
                }
            }
        }
        for mut fact in stored {
            if fact.id != newest {
                supersede(&mut fact);
                superseded_stored.push(Record::Fact { fact });
            }
        }
    }
    records.extend(superseded_stored);
    Ok(records)
}

/// Forgets registry record `id` past the front layer, which refuses registry records to
/// every other caller (or through `backend` when it is not behind one).
async fn forget_record(backend: &dyn MemoryBackend, scope: &Scope, id: &FactId) -> Result<bool> {
    match backend.behind_front_layer(FrontLayerOnly(())) {
        Some(unguarded) => unguarded.forget(scope, id).await,
        None => backend.forget(scope, id).await,
    }
}

/// Checks a fact being restored: a fact of a reserved shape must be a well-formed registry
/// record (a kind or a grant, in its namespace's shared scope, whose key and tags are the ones
/// this module writes for its content, and whose content decodes and is valid); any other fact
/// must not use a reserved shape.
pub fn check_record(fact: &Fact) -> Result<()> {
    let reserved = check_unreserved(fact.kind.as_deref(), fact.key.as_deref(), &fact.tags);
    let Err(reserved) = reserved else {
        return Ok(());
    };
    let malformed = |why: &str| {
        MemoryError::invalid(format!(
            "fact {} has a registry record's shape but {why}",
            fact.id
        ))
    };
    if fact.scope.subject().is_some() {
        return Err(reserved);
    }
    match fact.kind.as_deref() {
        Some(KIND_RECORD) => {
            let spec: KindSpec = serde_json::from_str(&fact.text)
                .map_err(|e| malformed(&format!("its kind does not decode: {e}")))?;
            spec.validate()?;
            if fact.key.as_deref() != Some(kind_key(&spec.name).as_str()) || !fact.tags.is_empty() {
                return Err(malformed("its key or tags are not its kind's"));
            }
            Ok(())
        }
        Some(GRANT_RECORD) => {
            let grant: Grant = serde_json::from_str(&fact.text)
                .map_err(|e| malformed(&format!("its grant does not decode: {e}")))?;
            grant.validate()?;
            let mut tags = fact.tags.clone();
            tags.sort();
            let mut expected = vec![from_tag(&grant.owner), to_tag(&grant.grantee)];
            expected.sort();
            if fact.key.as_deref() != Some(Grant::key(&grant.owner, &grant.grantee).as_str())
                || tags != expected
            {
                return Err(malformed("its key or tags are not its grant's"));
            }
            Ok(())
        }
        _ => Err(reserved),
    }
}

/// A kind of structured memory: its name, the JSON Schema its data follows, and the fields
/// that identify one memory of the kind.
///
/// With `unique_on`, a memory whose values in those fields equal the current one's supersedes
/// it (the old one stays as history); without, each memory is new unless stored with an id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KindSpec {
    /// The kind's name (`"UserProfile"`): an identifier of at most [`MAX_KIND_NAME_BYTES`],
    /// not starting with `_` (reserved).
    pub name: String,
    /// The JSON Schema a memory's data must follow.
    pub schema: Value,
    /// Top-level fields whose values identify a memory of the kind.
    #[serde(default, alias = "uniqueOn", skip_serializing_if = "Vec::is_empty")]
    pub unique_on: Vec<String>,
}

impl KindSpec {
    /// A kind without unique fields.
    pub fn new(name: impl Into<String>, schema: Value) -> Self {
        Self {
            name: name.into(),
            schema,
            unique_on: Vec::new(),
        }
    }

    /// Identifies its memories by these top-level fields.
    #[must_use]
    pub fn unique_on<T: Into<String>>(mut self, fields: impl IntoIterator<Item = T>) -> Self {
        self.unique_on = fields.into_iter().map(Into::into).collect();
        self
    }

    /// Checks the name, the schema's nesting and the unique fields (compiling the schema is the
    /// engine's).
    ///
    /// A unique field must be declared in the schema's `properties` and listed in its
    /// `required`: a memory's identity is never a field it may leave out (a typo'd or optional
    /// field would give every memory the same identity, each superseding the last).
    pub fn validate(&self) -> Result<()> {
        check_kind_name(&self.name)?;
        if !self.schema.is_object() && !self.schema.is_boolean() {
            return Err(MemoryError::invalid(format!(
                "kind {}: a JSON Schema is an object (or a boolean)",
                self.name
            )));
        }
        check_json_depth(&format!("kind {}: the schema", self.name), &self.schema)?;
        let declared = self.schema.get("properties").and_then(Value::as_object);
        let required: Vec<&str> = self
            .schema
            .get("required")
            .and_then(Value::as_array)
            .map(|fields| fields.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (i, field) in self.unique_on.iter().enumerate() {
            if field.is_empty() || self.unique_on[..i].contains(field) {
                return Err(MemoryError::invalid(format!(
                    "kind {}: unique_on fields must be distinct, non-empty names",
                    self.name
                )));
            }
            if !declared.is_some_and(|d| d.contains_key(field))
                || !required.contains(&field.as_str())
            {
                return Err(MemoryError::invalid(format!(
                    "kind {}: unique_on field {field:?} must be declared in the schema's \
                     `properties` and listed in its `required`",
                    self.name
                )));
            }
        }
        Ok(())
    }

    /// The id of the memory `data` is, by the unique fields' values (a missing field counts
    /// as `null`): a digest, so equal values give equal ids across processes and stores.
    /// `None` when the kind has no unique fields.
    pub fn unique_id(&self, data: &Value) -> Option<String> {
        if self.unique_on.is_empty() {
            return None;
        }
        let values: Vec<&Value> = self
            .unique_on
            .iter()
            .map(|field| data.get(field).unwrap_or(&Value::Null))
            .collect();
        Some(short_digest(&canonical_json(&Value::from(
            values.into_iter().cloned().collect::<Vec<_>>(),
        ))))
    }
}

fn check_kind_name(name: &str) -> Result<()> {
    validate_identifier("memory kind", name)?;
    if name.starts_with(RESERVED_PREFIX) || name.contains(':') || name.len() > MAX_KIND_NAME_BYTES {
        return Err(MemoryError::invalid(format!(
            "memory kind {name:?} must be at most {MAX_KIND_NAME_BYTES} bytes, hold no `:` (it \
             ends the kind in a memory's key) and not start with `_` (reserved)"
        )));
    }
    Ok(())
}

/// `InvalidInput` unless a memory's data reads back exactly: nested at most
/// [`MAX_JSON_DEPTH`](crate::limits::MAX_JSON_DEPTH) levels, as every other JSON the stores
/// keep.
pub fn check_memory_data(kind: &str, data: &Value) -> Result<()> {
    check_json_depth(&format!("a memory of kind {kind}"), data)
}

/// The fact key of memory `id` of `kind`: `kind:id` (a kind holds no `:`, so the key names
/// one kind and one id).
pub fn memory_key(kind: &str, id: &str) -> Result<String> {
    check_kind_name(kind)?;
    validate_identifier("memory id", id)?;
    if id.len() > MAX_MEMORY_ID_BYTES {
        return Err(MemoryError::invalid(format!(
            "a memory id is at most {MAX_MEMORY_ID_BYTES} bytes, got {}",
            id.len()
        )));
    }
    Ok(format!("{kind}:{id}"))
}

/// The memory id of a fact stored as a structured memory of its kind (its key is
/// `kind:id`), or `None` for any other fact.
pub fn memory_id(fact: &Fact) -> Option<&str> {
    let kind = fact.kind.as_deref()?;
    fact.key.as_deref()?.strip_prefix(kind)?.strip_prefix(':')
}

/// JSON with every object's keys sorted, so equal values are equal text (what a structured
/// memory stores as its fact's text, and what dedupe compares).
pub fn canonical_json(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                Value::Object(
                    entries
                        .into_iter()
                        .map(|(k, v)| (k.clone(), sorted(v)))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

/// 32 hex digits of SHA-256: ids and keys that are identifiers of bounded length.
fn short_digest(text: &str) -> String {
    let mut hex = lowercase_hex(&Sha256::digest(text.as_bytes()));
    hex.truncate(32);
    hex
}

/// A subject's (an agent's) permission for another subject of the same namespace to read its
/// memories: all of them, or only those of the listed kinds (any of) carrying every listed
/// tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// Whose memories.
    pub owner: Subject,
    /// Who may read them.
    pub grantee: Subject,
    /// Only memories of these kinds (empty: every kind).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<String>,
    /// Only memories carrying every one of these tags (empty: no tag needed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

impl Grant {
    /// Every memory of `owner`, to `grantee`.
    pub fn new(owner: Subject, grantee: Subject) -> Self {
        Self {
            owner,
            grantee,
            kinds: Vec::new(),
            tags: Vec::new(),
        }
    }

    /// Checks the grant on its own: another subject, kind names and tags (not whether the kinds
    /// are registered: [`put_grant`] asks the store).
    pub fn validate(&self) -> Result<()> {
        if self.owner == self.grantee {
            return Err(MemoryError::invalid(
                "a grant shares with another subject, not with its owner",
            ));
        }
        for kind in &self.kinds {
            check_kind_name(kind)?;
        }
        for tag in &self.tags {
            validate_identifier("tag", tag)?;
        }
        check_unreserved(None, None, &self.tags)
    }

    /// Whether the grant lets the grantee read `fact`.
    pub fn admits(&self, fact: &Fact) -> bool {
        (self.kinds.is_empty() || fact.kind.as_ref().is_some_and(|k| self.kinds.contains(k)))
            && self.tags.iter().all(|t| fact.tags.contains(t))
    }

    fn key(owner: &Subject, grantee: &Subject) -> String {
        format!(
            "{GRANT_RECORD}:{}:{}",
            short_digest(owner.as_str()),
            short_digest(grantee.as_str())
        )
    }
}

fn to_tag(grantee: &Subject) -> String {
    format!("_to:{}", short_digest(grantee.as_str()))
}

fn from_tag(owner: &Subject) -> String {
    format!("_from:{}", short_digest(owner.as_str()))
}

fn kind_key(name: &str) -> String {
    format!("{KIND_RECORD}:{name}")
}

/// Registers (or replaces) a kind in `namespace`: stored once, the same spec again changes
/// nothing, another spec supersedes it (memories stored before are not checked again).
pub async fn register_kind(
    backend: &dyn MemoryBackend,
    namespace: &Namespace,
    spec: &KindSpec,
) -> Result<()> {
    spec.validate()?;
    let record = NewFact::new(record_text(spec))
        .with_kind(KIND_RECORD)
        .with_key(kind_key(&spec.name));
    backend
        .remember(&shared(namespace)?, record, registry_write())
        .await?;
    Ok(())
}

/// The options of every registry write.
fn registry_write() -> RememberOptions {
    RememberOptions {
        registry: Some(RegistryWrite(())),
        ..RememberOptions::default()
    }
}

/// Deletes kind `name` of `namespace` (every version of its record); whether it was registered.
/// Memories of the kind stay, and read as before; storing more needs the kind registered again.
pub async fn delete_kind(
    backend: &dyn MemoryBackend,
    namespace: &Namespace,
    name: &str,
) -> Result<bool> {
    check_kind_name(name)?;
    forget_every_version(backend, &shared(namespace)?, &kind_key(name)).await
}

/// Forgets every version of `key` in `scope`; whether any was there.
async fn forget_every_version(
    backend: &dyn MemoryBackend,
    scope: &Scope,
    key: &str,
) -> Result<bool> {
    let mut forgotten = false;
    for version in backend.history(scope, key).await? {
        forgotten |= forget_record(backend, scope, &version.id).await?;
    }
    Ok(forgotten)
}

/// The kind registered as `name` in `namespace`, if any.
pub async fn kind(
    backend: &dyn MemoryBackend,
    namespace: &Namespace,
    name: &str,
) -> Result<Option<KindSpec>> {
    check_kind_name(name)?;
    let versions = backend
        .history(&shared(namespace)?, &kind_key(name))
        .await?;
    Ok(versions
        .into_iter()
        .rfind(Fact::is_current)
        .and_then(|fact| decoded::<KindSpec>(&fact)))
}

/// Grants (or replaces the grant of) `grant.owner`'s memories to `grant.grantee`.
pub async fn put_grant(
    backend: &dyn MemoryBackend,
    namespace: &Namespace,
    grant: &Grant,
) -> Result<()> {
    grant.validate()?;
    for name in &grant.kinds {
        if kind(backend, namespace, name).await?.is_none() {
            return Err(MemoryError::invalid(format!(
                "a grant names kind {name:?}, which is not registered in namespace {}",
                namespace.as_str()
            )));
        }
    }
    let record = NewFact::new(record_text(grant))
        .with_kind(GRANT_RECORD)
        .with_key(Grant::key(&grant.owner, &grant.grantee))
        .with_tags([from_tag(&grant.owner), to_tag(&grant.grantee)]);
    backend
        .remember(&shared(namespace)?, record, registry_write())
        .await?;
    Ok(())
}

/// Revokes `owner`'s grant to `grantee` (every version of it); whether there was one.
pub async fn revoke_grant(
    backend: &dyn MemoryBackend,
    namespace: &Namespace,
    owner: &Subject,
    grantee: &Subject,
) -> Result<bool> {
    forget_every_version(backend, &shared(namespace)?, &Grant::key(owner, grantee)).await
}

/// The grants in force to `grantee`.
pub async fn grants_to(
    backend: &dyn MemoryBackend,
    namespace: &Namespace,
    grantee: &Subject,
) -> Result<Vec<Grant>> {
    let records = grant_records(backend, namespace, to_tag(grantee)).await?;
    Ok(records
        .iter()
        .filter_map(decoded::<Grant>)
        .filter(|grant| &grant.grantee == grantee)
        .collect())
}

/// Every grant in force in `namespace`, by owner then grantee.
pub async fn grants(backend: &dyn MemoryBackend, namespace: &Namespace) -> Result<Vec<Grant>> {
    let mut grants: Vec<Grant> = records(backend, namespace, GRANT_RECORD, Vec::new())
        .await?
        .iter()
        .filter_map(decoded::<Grant>)
        .collect();
    grants.sort_by(|a, b| (&a.owner, &a.grantee).cmp(&(&b.owner, &b.grantee)));
    Ok(grants)
}

/// Removes every grant from or to the subject of `scope`, with every superseded version of
/// each (the front layer's `forget_all` calls it, so erasure leaves no record naming the
/// subject); how many records.
pub async fn forget_grants_of(backend: &dyn MemoryBackend, scope: &Scope) -> Result<u64> {
    let subject = scope.require_subject("forget_all")?;
    let namespace = scope.namespace();
    let shared_scope = shared(namespace)?;
    let mut forgotten = 0;
    for tag in [from_tag(subject), to_tag(subject)] {
        for record in records_with_history(backend, namespace, GRANT_RECORD, vec![tag]).await? {
            forgotten += u64::from(forget_record(backend, &shared_scope, &record.id).await?);
        }
    }
    Ok(forgotten)
}

/// The current grant records carrying `tag`, every page.
async fn grant_records(
    backend: &dyn MemoryBackend,
    namespace: &Namespace,
    tag: String,
) -> Result<Vec<Fact>> {
    records(backend, namespace, GRANT_RECORD, vec![tag]).await
}

/// Every kind registered in `namespace`, by name (a record that does not decode is skipped and
/// logged).
pub async fn kinds(backend: &dyn MemoryBackend, namespace: &Namespace) -> Result<Vec<KindSpec>> {
    let mut kinds: Vec<KindSpec> = records(backend, namespace, KIND_RECORD, Vec::new())
        .await?
        .iter()
        .filter_map(decoded::<KindSpec>)
        .collect();
    kinds.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(kinds)
}

/// The current records of `kind` carrying every one of `tags`, every page.
async fn records(
    backend: &dyn MemoryBackend,
    namespace: &Namespace,
    kind: &str,
    tags: Vec<String>,
) -> Result<Vec<Fact>> {
    listed(backend, namespace, kind, tags, false).await
}

/// The records of `kind` carrying every one of `tags`, superseded versions included.
async fn records_with_history(
    backend: &dyn MemoryBackend,
    namespace: &Namespace,
    kind: &str,
    tags: Vec<String>,
) -> Result<Vec<Fact>> {
    listed(backend, namespace, kind, tags, true).await
}

/// Every page of the shared scope's facts of `kind` carrying `tags`, with history or without
/// (a grantee's every shared search reads the grants: it reads only the current ones).
async fn listed(
    backend: &dyn MemoryBackend,
    namespace: &Namespace,
    kind: &str,
    tags: Vec<String>,
    include_superseded: bool,
) -> Result<Vec<Fact>> {
    let query = FactQuery::default()
        .with_include_superseded(include_superseded)
        .with_kind(kind)
        .with_tags(tags);
    crate::fact::every_page(backend, &shared(namespace)?, query).await
}

fn shared(namespace: &Namespace) -> Result<Scope> {
    Scope::shared(namespace.as_str())
}

/// A registry record's content, or `None` (logged) when it does not decode or is not valid: a
/// record nobody can use is skipped, never the reason a namespace's reads fail.
fn decoded<T: serde::de::DeserializeOwned + Validated>(fact: &Fact) -> Option<T> {
    let content = serde_json::from_str::<T>(&fact.text)
        .map_err(|e| MemoryError::invalid(e.to_string()))
        .and_then(Validated::validated);
    match content {
        Ok(content) => Some(content),
        Err(error) => {
            tracing::warn!(
                target: "mnemix_core::registry",
                record = %fact.id,
                namespace = fact.scope.namespace().as_str(),
                "skipped a registry record that cannot be used: {error}"
            );
            None
        }
    }
}

/// Registry content that checks itself once decoded.
trait Validated: Sized {
    fn validated(self) -> Result<Self>;
}

impl Validated for KindSpec {
    fn validated(self) -> Result<Self> {
        self.validate().map(|()| self)
    }
}

impl Validated for Grant {
    fn validated(self) -> Result<Self> {
        self.validate().map(|()| self)
    }
}

/// A record's text: its canonical JSON.
fn record_text(record: &impl Serialize) -> String {
    canonical_json(&serde_json::to_value(record).expect("registry records serialize to JSON"))
}
