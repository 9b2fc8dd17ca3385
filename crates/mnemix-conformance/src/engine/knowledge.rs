//! Knowledge: sources searched above their threshold.

use mnemix_core::embed::{Embedder, HashingEmbedder};
use mnemix_core::{CollectionSpec, VectorId, VectorRecord};

use crate::support::{conversation, ResultExt};
use crate::Ctx;

use super::{config, memory};

/// Knowledge comes from the configured shared collections, above the threshold, best first,
/// at most `retrieval_limit`; a source that does not exist is a clear error.
pub async fn knowledge_hits_come_from_sources_above_threshold(ctx: &Ctx) {
    let embedder = HashingEmbedder::new(384);
    let docs = [
        ("refunds", "refunds are paid within five working days"),
        ("refund-policy", "a refund needs the original receipt"),
        ("shipping", "parcels ship from Rotterdam every morning"),
    ];
    ctx.backend()
        .ensure_collection(
            ctx.namespace(),
            CollectionSpec::new("handbook", embedder.dims(), embedder.model_id()),
        )
        .await
        .must("collection");
    let records: Vec<VectorRecord> = docs
        .iter()
        .map(|(id, body)| {
            let mut record =
                VectorRecord::new(VectorId::new(*id).expect("id"), embedder.embed_one(body));
            record.text = Some((*body).to_owned());
            record
        })
        .collect();
    ctx.backend()
        .upsert_vectors(&ctx.shared_scope(), "handbook", records)
        .await
        .must("upsert");

    let mut config = config();
    config.knowledge.enabled = true;
    config.knowledge.sources = vec!["handbook".into()];
    config.knowledge.retrieval_limit = 2;
    config.knowledge.similarity_threshold = 0.2;
    let memory = memory(ctx, config.clone());
    let c = conversation(ctx, ctx.scope()).await;
    let context = memory
        .prepare(ctx.scope(), &c.id, "when are refunds paid")
        .await
        .must("prepare");
    let ids: Vec<&str> = context
        .knowledge
        .iter()
        .map(|h| h.record.id.as_str())
        .collect();
    assert_eq!(ids.first(), Some(&"refunds"), "{ids:?}");
    assert!(!ids.contains(&"shipping"), "{ids:?}");
    assert!(context
        .knowledge
        .windows(2)
        .all(|w| w[0].score >= w[1].score));
    assert!(context
        .system_prompt("")
        .contains("<knowledge>\n- refunds are paid"));

    config.knowledge.sources = vec!["no-such-handbook".into()];
    mnemix_engine::Memory::builder(ctx.backend_arc())
        .config(config)
        .build()
        .must("build")
        .prepare(ctx.scope(), &c.id, "refunds")
        .await
        .must_be_invalid("a missing knowledge source");
}
