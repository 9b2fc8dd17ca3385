//! `forget_all`: every row of a subject.

use mnemix_core::DeletionReceipt;

/// The statements that delete a subject's rows (`?1` namespace, `?2` subject), children first so
/// that each count is what was removed (cascades would hide them), each with the receipt's count
/// it answers. Expired facts are purged before ([`PURGE_EXPIRED`](crate::facts::PURGE_EXPIRED)):
/// the receipt counts what readers could see. Vectors are each backend's own.
pub fn subject_rows(receipt: &mut DeletionReceipt) -> [(&mut u64, &'static str); 6] {
    [
        (
            &mut receipt.messages,
            "DELETE FROM messages WHERE conversation IN
                 (SELECT pk FROM conversations WHERE namespace = ?1 AND subject = ?2)",
        ),
        (
            &mut receipt.cursors,
            "DELETE FROM cursors WHERE conversation IN
                 (SELECT pk FROM conversations WHERE namespace = ?1 AND subject = ?2)",
        ),
        (
            &mut receipt.working_memory,
            "DELETE FROM working_memory WHERE namespace = ?1 AND subject = ?2",
        ),
        (
            &mut receipt.conversations,
            "DELETE FROM conversations WHERE namespace = ?1 AND subject = ?2",
        ),
        (
            &mut receipt.facts,
            "DELETE FROM facts WHERE namespace = ?1 AND subject = ?2",
        ),
        (
            &mut receipt.checkpoints,
            "DELETE FROM checkpoints WHERE namespace = ?1 AND subject = ?2",
        ),
    ]
}

/// Erases the subject's facts generation (its facts are gone; the row names the subject): `?1`
/// namespace, `?2` subject. Sent after the facts' deletion, whose triggers write it.
pub const ERASE_FACTS_GENERATION: &str =
    "DELETE FROM fact_generations WHERE namespace = ?1 AND subject = ?2";
