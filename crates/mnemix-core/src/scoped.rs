use std::future::IntoFuture;

use futures::future::BoxFuture;

use crate::backend::DeletionReceipt;
use crate::conversation::{
    AppendOptions, AppendReceipt, Conversation, ConversationQuery, ConversationUpdate, LoadOptions,
    NewConversation,
};
use crate::error::Result;
use crate::fact::{
    Fact, FactQuery, FactSource, NewFact, RecallQuery, RememberOptions, RememberOutcome, ScoredFact,
};
use crate::filter::Filter;
use crate::message::{Message, Metadata, Role, StoredMessage};
use crate::page::Page;
use crate::provenance::{Origin, Principal};
use crate::scope::{ConversationId, FactId, Scope, VectorId};
use crate::store::Store;
use crate::time::{Timestamp, Ttl};
use crate::vector::{CollectionSpec, VectorHit, VectorQuery, VectorRecord, VectorSelector};
use crate::working::{WorkingMemory, WorkingMemoryKey, WorkingMemoryUpdate};

/// Makes a request builder awaitable: `.await` on it runs the request.
macro_rules! awaitable {
    ($builder:ident => $output:ty, |$this:ident| $body:expr) => {
        impl<'a> IntoFuture for $builder<'a> {
            type Output = Result<$output>;
            type IntoFuture = BoxFuture<'a, Result<$output>>;

            fn into_future(self) -> Self::IntoFuture {
                let $this = self;
                Box::pin(async move { $body })
            }
        }
    };
}

impl Store {
    /// A handle on one subject's memory in a namespace (identifier rules apply to both).
    pub fn scope(&self, namespace: &str, subject: &str) -> Result<Scoped> {
        Ok(self.at(Scope::new(namespace, subject)?))
    }

    /// A handle on a namespace's shared scope (knowledge no subject owns).
    pub fn shared(&self, namespace: &str) -> Result<Scoped> {
        Ok(self.at(Scope::shared(namespace)?))
    }

    /// A handle on `scope`.
    pub fn at(&self, scope: Scope) -> Scoped {
        Scoped {
            store: self.clone(),
            scope,
        }
    }
}

/// One scope's memory: its conversations, facts, working memory and vectors.
#[derive(Debug, Clone)]
pub struct Scoped {
    store: Store,
    scope: Scope,
}

impl Scoped {
    /// The scope every call of this handle takes.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The store underneath, for the contracts themselves.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Creates a conversation; set its fields with the builder's methods, then `.await`.
    pub fn new_conversation(&self) -> CreateConversation<'_> {
        CreateConversation {
            scoped: self,
            new: NewConversation::default(),
        }
    }

    /// A handle on one conversation (nothing is read until a call).
    pub fn conversation<'a>(&'a self, id: &'a ConversationId) -> ConversationHandle<'a> {
        ConversationHandle { scoped: self, id }
    }

    /// Lists the scope's conversations, newest first (one page; `.cursor(..)` for the next).
    pub fn conversations(&self) -> ListConversations<'_> {
        ListConversations {
            scoped: self,
            query: ConversationQuery::default(),
        }
    }

    /// The scope's facts.
    pub fn facts(&self) -> Facts<'_> {
        Facts { scoped: self }
    }

    /// The subject's own working-memory document, shared by all their conversations.
    pub fn working_memory(&self) -> WorkingMemoryHandle<'_> {
        WorkingMemoryHandle {
            scoped: self,
            key: WorkingMemoryKey::User,
        }
    }

    /// The scope's records in one vector collection of the namespace.
    pub fn vectors<'a>(&'a self, collection: &'a str) -> Vectors<'a> {
        Vectors {
            scoped: self,
            collection,
        }
    }

    /// Creates the namespace's collection `spec`, or checks that the existing one agrees.
    pub async fn ensure_collection(&self, spec: CollectionSpec) -> Result<CollectionSpec> {
        self.store
            .ensure_collection(self.scope.namespace(), spec)
            .await
    }

    /// Erases everything the subject owns and returns what was removed.
    pub async fn forget_all(&self) -> Result<DeletionReceipt> {
        self.store.forget_all(&self.scope).await
    }
}

/// A conversation being created (see [`Scoped::new_conversation`]).
#[must_use = "a request does nothing until it is awaited"]
pub struct CreateConversation<'a> {
    scoped: &'a Scoped,
    new: NewConversation,
}

impl CreateConversation<'_> {
    /// Its id (default: a fresh UUIDv7).
    pub fn id(mut self, id: ConversationId) -> Self {
        self.new.id = Some(id);
        self
    }

    /// The agent it belongs to (per-agent threads of one user).
    pub fn agent(mut self, agent: impl Into<String>) -> Self {
        self.new.agent = Some(agent.into());
        self
    }

    /// A title.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.new.title = Some(title.into());
        self
    }

    /// Free-form metadata.
    pub fn metadata(mut self, metadata: Metadata) -> Self {
        self.new.metadata = metadata;
        self
    }

    /// The application resource it is about.
    pub fn resource(mut self, slug: impl Into<String>) -> Self {
        self.new.resource_slug = Some(slug.into());
        self
    }

    /// The application record it is about.
    pub fn record(mut self, id: impl Into<String>) -> Self {
        self.new.record_id = Some(id.into());
        self
    }
}

awaitable!(CreateConversation => Conversation, |this| {
    this.scoped
        .store
        .create_conversation(&this.scoped.scope, this.new)
        .await
});

/// The scope's conversations, one page (see [`Scoped::conversations`]).
#[must_use = "a request does nothing until it is awaited"]
pub struct ListConversations<'a> {
    scoped: &'a Scoped,
    query: ConversationQuery,
}

impl ListConversations<'_> {
    /// Only this agent's threads.
    pub fn agent(mut self, agent: impl Into<String>) -> Self {
        self.query.agent = Some(agent.into());
        self
    }

    /// Only threads about this resource.
    pub fn resource(mut self, slug: impl Into<String>) -> Self {
        self.query.resource_slug = Some(slug.into());
        self
    }

    /// Only threads about this record.
    pub fn record(mut self, id: impl Into<String>) -> Self {
        self.query.record_id = Some(id.into());
        self
    }

    /// The page size (default 50, at most 1000).
    pub fn limit(mut self, limit: usize) -> Self {
        self.query.limit = Some(limit);
        self
    }

    /// Continue after the page that returned this cursor.
    pub fn cursor(mut self, cursor: impl Into<String>) -> Self {
        self.query.cursor = Some(cursor.into());
        self
    }
}

awaitable!(ListConversations => Page<Conversation>, |this| {
    this.scoped
        .store
        .list_conversations(&this.scoped.scope, this.query)
        .await
});

/// One conversation of a scope (see [`Scoped::conversation`]).
#[derive(Debug, Clone, Copy)]
pub struct ConversationHandle<'a> {
    scoped: &'a Scoped,
    id: &'a ConversationId,
}

impl<'a> ConversationHandle<'a> {
    /// Reads the conversation (`NotFound` when missing from the scope).
    pub async fn get(&self) -> Result<Conversation> {
        self.scoped
            .store
            .get_conversation(&self.scoped.scope, self.id)
            .await
    }

    /// Appends a batch atomically and idempotently by message id; options are builder methods.
    pub fn append(&self, messages: impl IntoIterator<Item = Message>) -> Append<'a> {
        Append {
            handle: *self,
            messages: messages.into_iter().collect(),
            options: AppendOptions::default(),
        }
    }

    /// Loads messages in order, sanitized; narrow the selection with the builder's methods.
    pub fn load(&self) -> Load<'a> {
        Load {
            handle: *self,
            options: LoadOptions::default(),
        }
    }

    /// Replaces the title (`None` clears it).
    pub async fn set_title(&self, title: Option<String>) -> Result<Conversation> {
        let update = ConversationUpdate {
            title: Some(title),
            metadata: None,
        };
        self.scoped
            .store
            .update_conversation(&self.scoped.scope, self.id, update)
            .await
    }

    /// Replaces the metadata.
    pub async fn set_metadata(&self, metadata: Metadata) -> Result<Conversation> {
        let update = ConversationUpdate {
            title: None,
            metadata: Some(metadata),
        };
        self.scoped
            .store
            .update_conversation(&self.scoped.scope, self.id, update)
            .await
    }

    /// Deletes it with its messages, vectors, working memory and cursors; whether it existed.
    pub async fn delete(&self) -> Result<bool> {
        self.scoped
            .store
            .delete_conversation(&self.scoped.scope, self.id)
            .await
    }

    /// The conversation's own working-memory document.
    pub fn working_memory(&self) -> WorkingMemoryHandle<'a> {
        WorkingMemoryHandle {
            scoped: self.scoped,
            key: WorkingMemoryKey::Conversation(self.id.clone()),
        }
    }
}

/// An append being prepared (see [`ConversationHandle::append`]).
#[must_use = "a request does nothing until it is awaited"]
pub struct Append<'a> {
    handle: ConversationHandle<'a>,
    messages: Vec<Message>,
    options: AppendOptions,
}

impl Append<'_> {
    /// Compare-and-append: apply only if the conversation is at this seq (`Conflict` if not).
    pub fn expect_last_seq(mut self, seq: u64) -> Self {
        self.options.expected_last_seq = Some(seq);
        self
    }

    /// Keep at most this many messages, pruning the oldest in the same transaction.
    pub fn max_messages(mut self, max: u64) -> Self {
        self.options.max_messages = Some(max);
        self
    }
}

awaitable!(Append => AppendReceipt, |this| {
    let ConversationHandle { scoped, id } = this.handle;
    scoped
        .store
        .append(&scoped.scope, id, this.messages, this.options)
        .await
});

/// A load being prepared (see [`ConversationHandle::load`]).
#[must_use = "a request does nothing until it is awaited"]
pub struct Load<'a> {
    handle: ConversationHandle<'a>,
    options: LoadOptions,
}

impl Load<'_> {
    /// Only the last `n` messages of the selection.
    pub fn last(mut self, n: usize) -> Self {
        self.options.last = Some(n);
        self
    }

    /// Only messages with a seq below this.
    pub fn before(mut self, seq: u64) -> Self {
        self.options.before_seq = Some(seq);
        self
    }

    /// Only messages with a seq above this.
    pub fn after(mut self, seq: u64) -> Self {
        self.options.after_seq = Some(seq);
        self
    }

    /// Only messages of these roles (a view, not a transcript: never sanitized).
    pub fn roles(mut self, roles: impl IntoIterator<Item = Role>) -> Self {
        self.options.roles = Some(roles.into_iter().collect());
        self
    }

    /// Exactly as stored, without sanitizing (what continuation checks need).
    pub fn raw(mut self) -> Self {
        self.options.sanitize = false;
        self
    }
}

awaitable!(Load => Vec<StoredMessage>, |this| {
    let ConversationHandle { scoped, id } = this.handle;
    scoped.store.load(&scoped.scope, id, this.options).await
});

/// A working-memory document: the subject's or a conversation's.
#[derive(Debug, Clone)]
pub struct WorkingMemoryHandle<'a> {
    scoped: &'a Scoped,
    key: WorkingMemoryKey,
}

impl WorkingMemoryHandle<'_> {
    /// The document, `None` when never set or cleared.
    pub async fn get(&self) -> Result<Option<WorkingMemory>> {
        self.scoped
            .store
            .get_working_memory(&self.scoped.scope, &self.key)
            .await
    }

    /// Writes it (build the update with [`WorkingMemoryUpdate::markdown`] or `json`, and
    /// `.expecting(revision)` for compare-and-set).
    pub async fn set(&self, update: WorkingMemoryUpdate) -> Result<WorkingMemory> {
        self.scoped
            .store
            .set_working_memory(&self.scoped.scope, &self.key, update)
            .await
    }

    /// Removes it; whether it existed.
    pub async fn clear(&self) -> Result<bool> {
        self.scoped
            .store
            .clear_working_memory(&self.scoped.scope, &self.key)
            .await
    }
}

/// A scope's facts (see [`Scoped::facts`]).
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    scoped: &'a Scoped,
}

impl<'a> Facts<'a> {
    /// Stores a fact; its kind, key, tags, score, source, embedding and expiry are builder
    /// methods.
    pub fn remember(&self, text: impl Into<String>) -> Remember<'a> {
        Remember {
            scoped: self.scoped,
            fact: NewFact::new(text),
            options: RememberOptions::default(),
            ttl: None,
        }
    }

    /// Recalls facts lexically by `text`; `.vector(..)` makes it hybrid.
    pub fn recall(&self, text: impl Into<String>) -> Recall<'a> {
        Recall {
            scoped: self.scoped,
            query: RecallQuery::text(text),
        }
    }

    /// Recalls facts by embedding alone.
    pub fn recall_similar(&self, vector: Vec<f32>) -> Recall<'a> {
        Recall {
            scoped: self.scoped,
            query: RecallQuery {
                vector: Some(vector),
                ..RecallQuery::default()
            },
        }
    }

    /// Lists facts newest first, one page.
    pub fn list(&self) -> ListFacts<'a> {
        ListFacts {
            scoped: self.scoped,
            query: FactQuery::default(),
        }
    }

    /// Reads one fact, current or superseded.
    pub async fn get(&self, id: &FactId) -> Result<Fact> {
        self.scoped.store.get_fact(&self.scoped.scope, id).await
    }

    /// Every version of a key, oldest first.
    pub async fn history(&self, key: &str) -> Result<Vec<Fact>> {
        self.scoped.store.history(&self.scoped.scope, key).await
    }

    /// Deletes a fact; whether it existed.
    pub async fn forget(&self, id: &FactId) -> Result<bool> {
        self.scoped.store.forget(&self.scoped.scope, id).await
    }

    /// Sets when a fact expires, or with `None` makes it permanent; whether a live fact was
    /// changed (an unknown or already expired id is not).
    ///
    /// ```
    /// use mnemix_core::{InMemoryBackend, Store, Ttl};
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let user = Store::new(InMemoryBackend::new()).scope("support", "user-42")?;
    /// let fact = user.facts().remember("is on a trip").ttl("24h".parse::<Ttl>()?).await?.fact;
    /// assert!(fact.expires_at.is_some());
    /// assert!(user.facts().set_expiry(&fact.id, None).await?); // permanent now
    /// assert_eq!(user.facts().get(&fact.id).await?.expires_at, None);
    /// # Ok::<(), mnemix_core::MemoryError>(())
    /// # }).unwrap();
    /// ```
    pub async fn set_expiry(&self, id: &FactId, expires_at: Option<Timestamp>) -> Result<bool> {
        let changed = self
            .scoped
            .store
            .set_expiry(&self.scoped.scope, std::slice::from_ref(id), expires_at)
            .await?;
        Ok(!changed.is_empty())
    }

    /// Sets the same expiry on many facts at once (all or none); the ids of the live facts
    /// changed, in the order given (see [`FactStore::set_expiry`](crate::FactStore::set_expiry)).
    pub async fn set_expiry_many(
        &self,
        ids: &[FactId],
        expires_at: Option<Timestamp>,
    ) -> Result<Vec<FactId>> {
        self.scoped
            .store
            .set_expiry(&self.scoped.scope, ids, expires_at)
            .await
    }

    /// Sets many facts to expire `ttl` from the store's now (see
    /// [`set_expiry_many`](Self::set_expiry_many)).
    pub async fn expire_in(&self, ids: &[FactId], ttl: Ttl) -> Result<Vec<FactId>> {
        let at = ttl.expires_at(self.scoped.store.now());
        self.set_expiry_many(ids, Some(at)).await
    }
}

/// A fact being stored (see [`Facts::remember`]).
#[must_use = "a request does nothing until it is awaited"]
pub struct Remember<'a> {
    scoped: &'a Scoped,
    fact: NewFact,
    options: RememberOptions,
    ttl: Option<Ttl>,
}

impl Remember<'_> {
    /// Its kind (`"preference"`, `"profile"`, …).
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.fact.kind = Some(kind.into());
        self
    }

    /// Its supersede key: a later fact with the same key replaces it (kept as history).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.fact.key = Some(key.into());
        self
    }

    /// Its tags.
    pub fn tags<T: Into<String>>(mut self, tags: impl IntoIterator<Item = T>) -> Self {
        self.fact.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// Confidence in [0, 1].
    pub fn score(mut self, score: f32) -> Self {
        self.fact.score = Some(score);
        self
    }

    /// Where it was learned.
    pub fn source(mut self, source: FactSource) -> Self {
        self.fact.source = Some(source);
        self
    }

    /// Its embedding, for semantic recall.
    pub fn embedding(mut self, embedding: Vec<f32>) -> Self {
        self.fact.embedding = Some(embedding);
        self
    }

    /// When it became true in the world (world time, not when it is stored).
    pub fn valid_from(mut self, at: Timestamp) -> Self {
        self.fact.valid_from = Some(at);
        self
    }

    /// When it stopped being true in the world.
    pub fn valid_until(mut self, at: Timestamp) -> Self {
        self.fact.valid_until = Some(at);
        self
    }

    /// When it stops being returned.
    pub fn expires_at(mut self, at: Timestamp) -> Self {
        self.fact.expires_at = Some(at);
        self.ttl = None;
        self
    }

    /// Expires `ttl` after it is stored (the store's clock decides "now"); replaces
    /// [`expires_at`](Self::expires_at), the later call winning.
    pub fn ttl(mut self, ttl: Ttl) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Keep at most this many current facts in the scope, evicting the least valuable.
    pub fn max_facts(mut self, max: usize) -> Self {
        self.options.max_facts = Some(max);
        self
    }
}

awaitable!(Remember => RememberOutcome, |this| {
    let mut fact = this.fact;
    if let Some(ttl) = this.ttl {
        fact.expires_at = Some(ttl.expires_at(this.scoped.store.now()));
    }
    this.scoped
        .store
        .remember(&this.scoped.scope, fact, this.options)
        .await
});

/// A recall being prepared (see [`Facts::recall`]).
#[must_use = "a request does nothing until it is awaited"]
pub struct Recall<'a> {
    scoped: &'a Scoped,
    query: RecallQuery,
}

impl Recall<'_> {
    /// Adds a query embedding (hybrid recall by reciprocal-rank fusion with the text).
    pub fn vector(mut self, vector: Vec<f32>) -> Self {
        self.query.vector = Some(vector);
        self
    }

    /// Only facts carrying every one of these tags.
    pub fn tags<T: Into<String>>(mut self, tags: impl IntoIterator<Item = T>) -> Self {
        self.query.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// Only facts of this kind.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.query.kind = Some(kind.into());
        self
    }

    /// Only facts scored at least this.
    pub fn min_score(mut self, score: f32) -> Self {
        self.query.min_score = Some(score);
        self
    }

    /// Most results (default 10).
    pub fn limit(mut self, limit: usize) -> Self {
        self.query.limit = Some(limit);
        self
    }

    /// Only facts of these origins.
    pub fn origins(mut self, origins: impl IntoIterator<Item = Origin>) -> Self {
        self.query.origins = origins.into_iter().collect();
        self
    }

    /// Only facts these principals wrote.
    pub fn written_by(mut self, principals: impl IntoIterator<Item = Principal>) -> Self {
        self.query.written_by = principals.into_iter().collect();
        self
    }

    /// What was true in the world at `t`, superseded versions included.
    pub fn as_of(mut self, t: Timestamp) -> Self {
        self.query.as_of = Some(t);
        self
    }

    /// What the store held as current at `t`.
    pub fn known_at(mut self, t: Timestamp) -> Self {
        self.query.known_at = Some(t);
        self
    }
}

awaitable!(Recall => Vec<ScoredFact>, |this| {
    this.scoped.store.recall(&this.scoped.scope, this.query).await
});

/// A page of facts being listed (see [`Facts::list`]).
#[must_use = "a request does nothing until it is awaited"]
pub struct ListFacts<'a> {
    scoped: &'a Scoped,
    query: FactQuery,
}

impl ListFacts<'_> {
    /// Include superseded history.
    pub fn with_history(mut self) -> Self {
        self.query.include_superseded = true;
        self
    }

    /// Only facts carrying every one of these tags.
    pub fn tags<T: Into<String>>(mut self, tags: impl IntoIterator<Item = T>) -> Self {
        self.query.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// Only facts of this kind.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.query.kind = Some(kind.into());
        self
    }

    /// The page size (default 50, at most 1000).
    pub fn limit(mut self, limit: usize) -> Self {
        self.query.limit = Some(limit);
        self
    }

    /// Continue after the page that returned this cursor.
    pub fn cursor(mut self, cursor: impl Into<String>) -> Self {
        self.query.cursor = Some(cursor.into());
        self
    }
}

awaitable!(ListFacts => Page<Fact>, |this| {
    this.scoped.store.list_facts(&this.scoped.scope, this.query).await
});

/// A scope's records in one collection (see [`Scoped::vectors`]).
#[derive(Debug, Clone, Copy)]
pub struct Vectors<'a> {
    scoped: &'a Scoped,
    collection: &'a str,
}

impl<'a> Vectors<'a> {
    /// Inserts or replaces records by id, all or nothing; how many were written.
    pub async fn upsert(&self, records: impl IntoIterator<Item = VectorRecord>) -> Result<usize> {
        let records = records.into_iter().collect();
        self.scoped
            .store
            .upsert_vectors(&self.scoped.scope, self.collection, records)
            .await
    }

    /// Reads one record.
    pub async fn get(&self, id: &VectorId) -> Result<VectorRecord> {
        self.scoped
            .store
            .get_vector(&self.scoped.scope, self.collection, id)
            .await
    }

    /// Deletes records by id; how many.
    pub async fn delete(&self, ids: impl IntoIterator<Item = VectorId>) -> Result<usize> {
        let selector = VectorSelector::Ids(ids.into_iter().collect());
        self.scoped
            .store
            .delete_vectors(&self.scoped.scope, self.collection, selector)
            .await
    }

    /// Deletes every record whose metadata matches `filter`; how many.
    pub async fn delete_matching(&self, filter: Filter) -> Result<usize> {
        self.scoped
            .store
            .delete_vectors(
                &self.scoped.scope,
                self.collection,
                VectorSelector::Filter(filter),
            )
            .await
    }

    /// The records nearest `vector` (10 unless `.k(..)` says otherwise).
    pub fn search(&self, vector: Vec<f32>) -> Search<'a> {
        Search {
            vectors: *self,
            query: VectorQuery::new(vector, 10),
        }
    }
}

/// A vector search being prepared (see [`Vectors::search`]).
#[must_use = "a request does nothing until it is awaited"]
pub struct Search<'a> {
    vectors: Vectors<'a>,
    query: VectorQuery,
}

impl Search<'_> {
    /// How many hits at most (1..=1000; default 10).
    pub fn k(mut self, k: usize) -> Self {
        self.query.k = k;
        self
    }

    /// Only records whose metadata matches.
    pub fn filter(mut self, filter: Filter) -> Self {
        self.query.filter = Some(filter);
        self
    }

    /// Only hits scoring at least this.
    pub fn min_score(mut self, score: f32) -> Self {
        self.query.min_score = Some(score);
        self
    }

    /// Return the stored vectors in the hits.
    pub fn include_vectors(mut self) -> Self {
        self.query.include_vectors = true;
        self
    }
}

awaitable!(Search => Vec<VectorHit>, |this| {
    let Vectors { scoped, collection } = this.vectors;
    scoped.store.search(&scoped.scope, collection, this.query).await
});
