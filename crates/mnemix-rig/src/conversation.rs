//! rig's [`ConversationMemory`] over our conversations.

use mnemix_core::{ConversationId, MemoryError, Scoped};
use rig_core::completion::Message;
use rig_core::id::ConversationId as RigConversationId;
use rig_core::memory::{ConversationMemory, MemoryError as RigMemoryError};
use rig_core::wasm_compat::WasmBoxedFuture;

use crate::message::{to_rig_history, to_stored};

/// rig's conversation memory on any mnemix store, in one scope (namespace and subject):
/// every conversation it loads, appends or clears is that scope's, so one user's agent cannot
/// read another's history whatever conversation id it is given.
///
/// - `load` returns the whole conversation as appended (an unknown conversation is empty);
///   shaping it (windows, token budgets, summaries) is rig-memory's policies' job.
/// - `append` creates the conversation on first use and appends the batch atomically: a turn
///   is stored whole or not at all, in order, under any number of concurrent writers.
/// - `clear` deletes the conversation with everything of it (messages, working memory,
///   vectors, cursors); a later `append` starts it again.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use mnemix_rig::ConversationHistory;
/// use rig_core::completion::Message;
/// use rig_core::memory::ConversationMemory;
///
/// let store = mnemix::open("sqlite::memory:").await?;
/// let history = ConversationHistory::new(store.scope("support", "user-42")?);
/// let thread = "thread-1".into();
/// history.append(&thread, vec![Message::user("My name is Ada."), Message::assistant("Hello, Ada!")]).await?;
/// assert_eq!(history.load(&thread).await?.len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct ConversationHistory {
    scoped: Scoped,
    agent: Option<String>,
}

impl ConversationHistory {
    /// The history of the conversations of `scoped`'s scope.
    pub fn new(scoped: Scoped) -> Self {
        Self {
            scoped,
            agent: None,
        }
    }

    /// Names the agent on the conversations this history creates (our `Conversation::agent`,
    /// which listings filter by).
    #[must_use]
    pub fn agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = Some(agent.into());
        self
    }

    /// The scope-bound handle underneath, for everything else of the scope's memory.
    pub fn scoped(&self) -> &Scoped {
        &self.scoped
    }

    async fn load_history(&self, id: &RigConversationId) -> Result<Vec<Message>, MemoryError> {
        let id = conversation_id(id)?;
        match self.scoped.conversation(&id).load().raw().await {
            Ok(messages) => {
                let messages: Vec<_> = messages.into_iter().map(|m| m.message).collect();
                Ok(to_rig_history(&messages))
            }
            Err(MemoryError::NotFound { .. }) => Ok(Vec::new()),
            Err(error) => Err(error),
        }
    }

    async fn append_turn(
        &self,
        id: &RigConversationId,
        messages: Vec<Message>,
    ) -> Result<(), MemoryError> {
        let id = conversation_id(id)?;
        let stored = messages
            .iter()
            .map(to_stored)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| MemoryError::invalid(format!("a rig message did not serialize: {e}")))?;
        if stored.is_empty() {
            return Ok(());
        }
        // Most appends go to a conversation that exists: try that first, create on NotFound.
        match self.scoped.conversation(&id).append(stored.clone()).await {
            Err(MemoryError::NotFound { .. }) => {
                let mut create = self.scoped.new_conversation().id(id.clone());
                if let Some(agent) = &self.agent {
                    create = create.agent(agent.clone());
                }
                match create.await {
                    // A concurrent append created it first: that is the conversation we want.
                    Ok(_) | Err(MemoryError::AlreadyExists { .. }) => {}
                    Err(error) => return Err(error),
                }
                self.scoped.conversation(&id).append(stored).await?;
            }
            other => {
                other?;
            }
        }
        Ok(())
    }
}

fn conversation_id(id: &RigConversationId) -> Result<ConversationId, MemoryError> {
    ConversationId::new(id.as_str())
}

fn backend(error: MemoryError) -> RigMemoryError {
    RigMemoryError::backend(error)
}

impl ConversationMemory for ConversationHistory {
    fn load<'a>(
        &'a self,
        conversation_id: &'a RigConversationId,
    ) -> WasmBoxedFuture<'a, Result<Vec<Message>, RigMemoryError>> {
        Box::pin(async move { self.load_history(conversation_id).await.map_err(backend) })
    }

    fn append<'a>(
        &'a self,
        conversation_id: &'a RigConversationId,
        messages: Vec<Message>,
    ) -> WasmBoxedFuture<'a, Result<(), RigMemoryError>> {
        Box::pin(async move {
            self.append_turn(conversation_id, messages)
                .await
                .map_err(backend)
        })
    }

    fn clear<'a>(
        &'a self,
        conversation_id: &'a RigConversationId,
    ) -> WasmBoxedFuture<'a, Result<(), RigMemoryError>> {
        Box::pin(async move {
            let id = conversation_id_or(conversation_id)?;
            self.scoped
                .conversation(&id)
                .delete()
                .await
                .map(drop)
                .map_err(backend)
        })
    }
}

fn conversation_id_or(id: &RigConversationId) -> Result<ConversationId, RigMemoryError> {
    conversation_id(id).map_err(backend)
}
