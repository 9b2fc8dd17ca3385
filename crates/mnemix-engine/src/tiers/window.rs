//! The window: the conversation's last messages, the thread an agent key finds, and how
//! recalled older messages are merged into the window.

use mnemix_core::{
    Conversation, ConversationId, LoadOptions, MemoryError, NewConversation, Result, Scope,
    StoredMessage,
};

use crate::config::{check_positive, ConversationConfig, MergeStrategy};
use crate::context::RecalledMessage;
use crate::Memory;

impl ConversationConfig {
    pub(crate) fn validate(&self) -> Result<()> {
        if let Some(window) = self.window_size {
            check_positive("conversation.window_size", window)?;
        }
        Ok(())
    }
}

impl Memory {
    /// The window (`prepare`'s first round): the last `window_size` messages, sanitized;
    /// none when the conversation tier is off.
    pub(crate) async fn window(
        &self,
        scope: &Scope,
        conversation: &ConversationId,
    ) -> Result<Vec<StoredMessage>> {
        if !self.config.conversation.enabled {
            return Ok(Vec::new());
        }
        let last = LoadOptions::last(self.config.window_size());
        self.backend.load(scope, conversation, last).await
    }

    /// The conversation of `agent_key` for the scope's subject, created on first use, with its
    /// last `history_limit` messages (replay-safe).
    ///
    /// # Behavior
    /// - One thread per (subject, agent key): its id is derived from the key, so concurrent
    ///   first uses meet on the same thread instead of creating two.
    /// - The agent key follows identifier rules (`InvalidInput`).
    pub async fn auto_conversation(
        &self,
        scope: &Scope,
        agent_key: &str,
        history_limit: usize,
    ) -> Result<(Conversation, Vec<StoredMessage>)> {
        mnemix_core::validate_identifier("agent key", agent_key)?;
        let id = ConversationId::new(format!("agent:{agent_key}"))?;
        let thread = match self.backend.get_conversation(scope, &id).await {
            Ok(thread) => thread,
            Err(MemoryError::NotFound { .. }) => {
                let new = NewConversation::default()
                    .with_id(id.clone())
                    .with_agent(agent_key);
                match self.backend.create_conversation(scope, new).await {
                    Ok(thread) => thread,
                    Err(MemoryError::AlreadyExists { .. }) => {
                        self.backend.get_conversation(scope, &id).await?
                    }
                    Err(error) => return Err(error),
                }
            }
            Err(error) => return Err(error),
        };
        let history = if history_limit == 0 {
            Vec::new()
        } else {
            self.backend
                .load(scope, &thread.id, LoadOptions::last(history_limit))
                .await?
        };
        Ok((thread, history))
    }
}

/// The window merged with recalled messages (both in conversation order): before it, after
/// it, or alternating one recalled message with one of the window, as the seeds do.
pub(crate) fn merge(
    window: Vec<StoredMessage>,
    recalled: &[RecalledMessage],
    strategy: MergeStrategy,
) -> Vec<StoredMessage> {
    if recalled.is_empty() {
        return window;
    }
    let mut older: Vec<StoredMessage> = recalled.iter().map(|r| r.message.clone()).collect();
    older.sort_by_key(|m| m.seq);
    match strategy {
        MergeStrategy::Prepend => older.into_iter().chain(window).collect(),
        MergeStrategy::Append => window.into_iter().chain(older).collect(),
        MergeStrategy::Interleave => {
            let mut merged = Vec::with_capacity(older.len() + window.len());
            let (mut older, mut window) = (older.into_iter(), window.into_iter());
            loop {
                match (older.next(), window.next()) {
                    (None, None) => break,
                    (a, b) => merged.extend(a.into_iter().chain(b)),
                }
            }
            merged
        }
    }
}
