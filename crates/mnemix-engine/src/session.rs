//! [`Session`]: one run's view of a stored conversation — what the model reads, what the run
//! adds, and what it added.

use std::sync::{Mutex, PoisonError};

use mnemix_core::limits::MAX_LOAD_SEQS;
use mnemix_core::Message;
use mnemix_core::{AppendOptions, LoadOptions, NewConversation};
use mnemix_core::{ConversationId, MessageId, Scope};
use mnemix_core::{MemoryError, Result};
use serde_json::json;

use crate::{Memory, SUMMARY_METADATA_KEY};

/// What [`Session::read`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionView {
    /// Every message of the conversation.
    Full,
    /// Only the last `n` messages, starting where a model can continue (a tool result whose
    /// call fell out of the window is left out, as every load does).
    SlidingWindow(usize),
    /// The last `keep` messages after one message summarising everything before them. The
    /// summary is the engine's own (the [`Summarizer`](crate::Summarizer) given to the builder,
    /// stored in the conversation as `prepare` stores it): each message is summarised once,
    /// when it leaves the window, however often the session is read.
    Summarizing {
        /// Messages kept verbatim after the summary.
        keep: usize,
    },
}

/// One run's view of a stored conversation, the memory interface of agent loops that read the
/// whole history at every step: [`read`](Self::read) (what the model sees: the conversation
/// through the [`SessionView`]), [`store`](Self::store) (one message, durable when it returns)
/// and [`appended`](Self::appended) (only the messages this run stored).
///
/// It works over any backend's conversation, since it only appends and loads. Messages it
/// stores are plain appends: the next [`Memory::commit`] of the conversation embeds them and
/// extracts facts from them, as it does for every message after its cursors.
///
/// ```
/// use std::sync::Arc;
/// use mnemix_core::{ConversationId, InMemoryBackend, Message, Scope};
/// use mnemix_engine::{Memory, SessionView};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mnemix_core::Result<()> {
/// let memory = Memory::builder(Arc::new(InMemoryBackend::new())).build()?;
/// let scope = Scope::for_subject("user-42")?;
/// let thread = ConversationId::new("trip-planning")?;
/// let run = memory.session(&scope, &thread, SessionView::SlidingWindow(30)).await?;
/// run.store(Message::user("Book me a flight to Tokyo.")).await?;
/// run.store(Message::assistant("Which day?")).await?;
/// assert_eq!(run.read().await?.len(), 2);
///
/// // The next run sees the first as history; only its own messages are appended.
/// let next = memory.session(&scope, &thread, SessionView::Full).await?;
/// next.store(Message::user("Friday.")).await?;
/// assert_eq!((next.read().await?.len(), next.appended().await?.len()), (3, 1));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Session<'a> {
    memory: &'a Memory,
    scope: Scope,
    conversation: ConversationId,
    view: SessionView,
    /// The seqs this run stored, in the order it stored them.
    stored: Mutex<Vec<u64>>,
}

impl Memory {
    /// Opens a run on the conversation `id` of `scope` (created when it does not exist yet):
    /// what was stored before is its history, what [`Session::store`] adds is its own.
    ///
    /// A window of 0 messages, or a summarizing view on a memory built without a summarizer, is
    /// `InvalidInput`.
    pub async fn session(
        &self,
        scope: &Scope,
        id: &ConversationId,
        view: SessionView,
    ) -> Result<Session<'_>> {
        match view {
            SessionView::SlidingWindow(0) | SessionView::Summarizing { keep: 0 } => {
                return Err(MemoryError::invalid(
                    "a session's window must keep at least one message",
                ));
            }
            SessionView::Summarizing { .. } if self.summarizer.is_none() => {
                return Err(MemoryError::invalid(
                    "a summarizing session needs a Summarizer given to the builder",
                ));
            }
            _ => {}
        }
        let new = NewConversation::default().with_id(id.clone());
        match self.backend.create_conversation(scope, new).await {
            Ok(_) => {}
            Err(e) if e.is_already_exists() => {}
            Err(e) => return Err(e),
        }
        Ok(Session {
            memory: self,
            scope: scope.clone(),
            conversation: id.clone(),
            view,
            stored: Mutex::new(Vec::new()),
        })
    }
}

impl Session<'_> {
    /// The conversation this run is on.
    pub fn conversation(&self) -> &ConversationId {
        &self.conversation
    }

    /// What the model reads: the conversation, history and this run's messages alike, through
    /// the session's [`SessionView`].
    pub async fn read(&self) -> Result<Vec<Message>> {
        let backend = &self.memory.backend;
        let (scope, id) = (&self.scope, &self.conversation);
        let keep = match self.view {
            SessionView::Full => None,
            SessionView::SlidingWindow(keep) | SessionView::Summarizing { keep } => Some(keep),
        };
        let mut load = LoadOptions::default();
        load.last = keep;
        let window = backend.load(scope, id, load).await?;
        let SessionView::Summarizing { .. } = self.view else {
            return Ok(window.into_iter().map(|m| m.message).collect());
        };
        let Some(first) = window.first().map(|m| m.seq).filter(|&seq| seq > 1) else {
            return Ok(window.into_iter().map(|m| m.message).collect());
        };
        let thread = backend.get_conversation(scope, id).await?;
        let summary = self.memory.summary(scope, &thread, first - 1).await?;
        // A user message, as agent loops drop system messages from memory (they write their
        // own); its id names what it covers and it is dated as the window's first message, so
        // two reads of one summary give the same message.
        let mut summary =
            Message::user(format!("[Summary of the earlier conversation: {summary}]"))
                .with_id(MessageId::new(format!("summary-through-{}", first - 1))?);
        summary.created_at = window[0].message.created_at;
        summary
            .metadata
            .insert(SUMMARY_METADATA_KEY.to_owned(), json!(first - 1));
        Ok(std::iter::once(summary)
            .chain(window.into_iter().map(|m| m.message))
            .collect())
    }

    /// Stores one message at the end of the conversation; durable when it returns. Storing a
    /// message id again (a retry) stores nothing and counts once in
    /// [`appended`](Self::appended); the same id with other content is a `Conflict`.
    pub async fn store(&self, message: Message) -> Result<()> {
        let receipt = self
            .memory
            .backend
            .append(
                &self.scope,
                &self.conversation,
                vec![message],
                AppendOptions::default(),
            )
            .await?;
        let mut stored = self.stored.lock().unwrap_or_else(PoisonError::into_inner);
        for (_, seq) in receipt.appended.iter().chain(&receipt.duplicates) {
            if !stored.contains(seq) {
                stored.push(*seq);
            }
        }
        Ok(())
    }

    /// Only the messages this run stored, in the order it stored them, as stored (not the
    /// history, nor what another writer appended meanwhile).
    pub async fn appended(&self) -> Result<Vec<Message>> {
        let seqs = self
            .stored
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut messages = Vec::with_capacity(seqs.len());
        for chunk in seqs.chunks(MAX_LOAD_SEQS) {
            let loaded = self
                .memory
                .backend
                .load_seqs(&self.scope, &self.conversation, chunk)
                .await?;
            messages.extend(loaded.into_iter().map(|m| m.message));
        }
        Ok(messages)
    }
}
