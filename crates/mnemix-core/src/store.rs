//! [`Store`]: what a program holds — any backend, behind the front layer.

use std::sync::Arc;

use crate::backend::MemoryBackend;
use crate::front::{Checked, RetryPolicy};
use crate::provenance::{Origin, Principal, Provenance};

/// A backend behind the front layer ([`Checked`]): the handle a program keeps and clones.
///
/// [`Store::scope`] gives a handle bound to one subject ([`Scoped`](crate::Scoped)), whose
/// calls read well (`user.conversation(&id).load().last(10).await`). The store also
/// dereferences to [`dyn MemoryBackend`](MemoryBackend), so every contract method is called on
/// it directly. Either way each call is checked, retried and sanitized once, the same way for
/// every backend. `mnemix::open` returns one; a third party's adapter becomes one with
/// [`Store::new`].
///
/// ```
/// use mnemix_core::{ConversationStore, InMemoryBackend, NewConversation, Scope, Store};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let store = Store::new(InMemoryBackend::new());
/// let scope = Scope::new("support", "user-42")?;
/// let thread = store.create_conversation(&scope, NewConversation::default()).await?;
/// assert_eq!(store.get_conversation(&scope, &thread.id).await?.last_seq, 0);
/// // Checked in front of every backend: an empty cursor name never reaches storage.
/// assert!(store.cursor(&scope, &thread.id, "").await.unwrap_err().is_invalid_input());
/// # Ok::<(), mnemix_core::MemoryError>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct Store {
    backend: Arc<dyn MemoryBackend>,
}

impl Store {
    /// `backend` behind the front layer, with the default [`RetryPolicy`].
    pub fn new(backend: impl MemoryBackend + 'static) -> Self {
        Self::from_arc(Arc::new(backend))
    }

    /// A shared backend behind the front layer (left as it is when it is behind it already).
    pub fn from_arc(backend: Arc<dyn MemoryBackend>) -> Self {
        Self {
            backend: Checked::wrap(backend),
        }
    }

    /// `backend` behind the front layer with another retry policy.
    pub fn with_retry(backend: Arc<dyn MemoryBackend>, retry: RetryPolicy) -> Self {
        Self {
            backend: Arc::new(Checked::with_retry(backend, retry)),
        }
    }

    /// The same store writing as `principal`: every fact written through what this returns
    /// records it as its writer, and [`Origin::Api`] as where its content came from (see
    /// [`Provenance`]). A program names the agent it runs with [`Principal::agent`]; a server
    /// acts as the caller it authenticated, so nothing a client sends names another writer.
    ///
    /// ```
    /// use mnemix_core::{FactStore, InMemoryBackend, NewFact, Principal, Scope, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let store = Store::new(InMemoryBackend::new());
    /// let planner = store.acting_as(Principal::agent("planner")?);
    /// let scope = Scope::new("support", "user-42")?;
    /// let fact = planner.remember(&scope, NewFact::new("Likes tea"), Default::default()).await?;
    /// assert_eq!(fact.fact.provenance.written_by, Principal::agent("planner")?);
    /// # Ok::<(), mnemix_core::MemoryError>(())
    /// # }).unwrap();
    /// ```
    #[must_use]
    pub fn acting_as(&self, principal: Principal) -> Self {
        self.writing_as(Provenance::new(principal, Origin::Api))
    }

    /// The same store writing as `writer`: its principal, and the origin of what it writes
    /// (a program recording what its user said writes [`Origin::User`]; the engine's
    /// extractor writes [`Origin::Extracted`] or [`Origin::Tool`]).
    #[must_use]
    pub fn writing_as(&self, writer: Provenance) -> Self {
        Self {
            backend: self
                .backend
                .acting_as(writer)
                .expect("a store's backend is behind the front layer"),
        }
    }

    /// Who it writes as.
    pub fn writer(&self) -> Provenance {
        self.backend.writer().unwrap_or_default()
    }

    /// The checked backend as a shared trait object, for APIs that take one (the engine's
    /// `Memory::builder`, `transfer::copy`).
    pub fn backend(&self) -> Arc<dyn MemoryBackend> {
        Arc::clone(&self.backend)
    }
}

impl std::ops::Deref for Store {
    type Target = dyn MemoryBackend;

    fn deref(&self) -> &Self::Target {
        self.backend.as_ref()
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend.backend_name())
            .finish()
    }
}

impl From<Store> for Arc<dyn MemoryBackend> {
    fn from(store: Store) -> Self {
        store.backend
    }
}
