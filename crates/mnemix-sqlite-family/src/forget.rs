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

/// What [`subject_rows`] would delete, counted (`?1` namespace, `?2` subject, `?3` now): each
/// statement the same rows' `count(*)`, and for facts what is left after the purge of expired
/// ones (every fact less those the purge takes: two index-only counts, where a filter on
/// the expiry would read every row), in one row.
pub const COUNT_SUBJECT_ROWS: &str = "SELECT
    (SELECT count(*) FROM messages WHERE conversation IN
         (SELECT pk FROM conversations WHERE namespace = ?1 AND subject = ?2)),
    (SELECT count(*) FROM cursors WHERE conversation IN
         (SELECT pk FROM conversations WHERE namespace = ?1 AND subject = ?2)),
    (SELECT count(*) FROM working_memory WHERE namespace = ?1 AND subject = ?2),
    (SELECT count(*) FROM conversations WHERE namespace = ?1 AND subject = ?2),
    ((SELECT count(*) FROM facts WHERE namespace = ?1 AND subject = ?2)
         - (SELECT count(*) FROM facts WHERE namespace = ?1 AND subject = ?2
               AND expires_at <= ?3)),
    (SELECT count(*) FROM checkpoints WHERE namespace = ?1 AND subject = ?2)";

/// Erases the subject's facts generation (its facts are gone; the row names the subject): `?1`
/// namespace, `?2` subject. Sent after the facts' deletion, whose triggers write it.
pub const ERASE_FACTS_GENERATION: &str =
    "DELETE FROM fact_generations WHERE namespace = ?1 AND subject = ?2";

#[cfg(test)]
mod tests {
    use super::*;

    /// The counts are the deletes' rows: each count is its delete with the verb changed (for
    /// facts, less the purge of expired facts), in the receipt's order.
    #[test]
    fn each_count_is_its_delete_as_a_count() {
        let normal = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
        let counts = normal(COUNT_SUBJECT_ROWS);
        let mut receipt = DeletionReceipt::default();
        let mut expected = Vec::new();
        let as_count =
            |delete: &str| normal(delete).replacen("DELETE FROM", "SELECT count(*) FROM", 1);
        for (_, delete) in subject_rows(&mut receipt) {
            let count = as_count(delete);
            expected.push(if count.contains(" facts WHERE") {
                format!("(({count}) - ({}))", as_count(crate::facts::PURGE_EXPIRED))
            } else {
                format!("({count})")
            });
        }
        assert_eq!(counts, format!("SELECT {}", expected.join(", ")));
    }
}
