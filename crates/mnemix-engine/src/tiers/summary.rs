//! The summary: what left the window, summarised incrementally and kept in the conversation's
//! metadata.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::json;

use mnemix_core::{Conversation, ConversationUpdate, LoadOptions, Result, Scope, StoredMessage};

use crate::Memory;

/// The conversation metadata key holding the stored summary; also the metadata key of the
/// summary message a [`SessionView::Summarizing`](crate::SessionView::Summarizing) read puts
/// first (the last seq it covers).
pub const SUMMARY_METADATA_KEY: &str = "agent_memory_summary";

/// Summarises messages that left the window.
#[async_trait]
pub trait Summarizer: Send + Sync {
    /// The summary of `previous` (the summary so far, if any) followed by `messages`, which are
    /// the messages that left the window since, oldest first.
    async fn summarize(&self, previous: Option<&str>, messages: &[StoredMessage])
        -> Result<String>;
}

/// The summary kept in the conversation's metadata: text and the last seq it covers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct StoredSummary {
    text: String,
    through_seq: u64,
}

impl Memory {
    /// The summary of everything before the window (`prepare`'s second round, which knows
    /// where the window starts); none when summaries are off or nothing precedes the window.
    pub(crate) async fn summary_before(
        &self,
        scope: &Scope,
        thread: &Conversation,
        window_start: u64,
    ) -> Result<Option<String>> {
        let conversation = &self.config.conversation;
        if !(conversation.enabled && conversation.summarize && window_start > 1) {
            return Ok(None);
        }
        self.summary(scope, thread, window_start - 1)
            .await
            .map(Some)
    }

    /// The summary through `through_seq`, reusing the stored one and summarising only what
    /// left the window since.
    pub(crate) async fn summary(
        &self,
        scope: &Scope,
        thread: &Conversation,
        through_seq: u64,
    ) -> Result<String> {
        let stored: Option<StoredSummary> = thread
            .metadata
            .get(SUMMARY_METADATA_KEY)
            .and_then(|v| serde_json::from_value(v.clone()).ok());
        if let Some(stored) = &stored {
            if stored.through_seq >= through_seq {
                return Ok(stored.text.clone());
            }
        }
        let after = stored.as_ref().map_or(0, |s| s.through_seq);
        let left_window = self
            .backend
            .load(
                scope,
                &thread.id,
                LoadOptions::default()
                    .with_after_seq(after)
                    .with_before_seq(through_seq + 1),
            )
            .await?;
        let summarizer = self
            .summarizer
            .as_ref()
            .expect("build() requires a summarizer when summarize is on");
        let text = summarizer
            .summarize(stored.as_ref().map(|s| s.text.as_str()), &left_window)
            .await?;
        let mut metadata = thread.metadata.clone();
        metadata.insert(
            SUMMARY_METADATA_KEY.to_owned(),
            json!(StoredSummary {
                text: text.clone(),
                through_seq,
            }),
        );
        self.backend
            .update_conversation(
                scope,
                &thread.id,
                ConversationUpdate {
                    metadata: Some(metadata),
                    ..ConversationUpdate::default()
                },
            )
            .await?;
        Ok(text)
    }
}
