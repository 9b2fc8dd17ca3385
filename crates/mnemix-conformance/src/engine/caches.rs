//! The caches around the engine: the embedder's and the provider's prompt cache.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mnemix_core::embed::{CacheStats, CachedEmbedder, Embedder, HashingEmbedder};
use mnemix_core::Result;
use mnemix_engine::prompt_cache::{CacheableConfig, PromptCacheRegistry, ProviderCacheHandle};
use serde_json::json;

use crate::support::ResultExt;
use crate::Ctx;

/// An embedder that counts the texts it is asked to embed.
struct CountingEmbedder {
    inner: HashingEmbedder,
    texts: AtomicUsize,
}

#[async_trait]
impl Embedder for CountingEmbedder {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn dims(&self) -> usize {
        self.inner.dims()
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        self.texts.fetch_add(texts.len(), Ordering::SeqCst);
        self.inner.embed(texts).await
    }
}

/// The embedding cache on the backend serves each (model, text) once, across embedder
/// instances (a restart), returns exactly the vectors the model made, and expires by TTL.
pub async fn cached_embedder_embeds_each_text_once(ctx: &Ctx) {
    let counting = Arc::new(CountingEmbedder {
        inner: HashingEmbedder::new(64),
        texts: AtomicUsize::new(0),
    });
    let cached = || {
        CachedEmbedder::new(counting.clone(), ctx.backend_arc(), ctx.namespace().clone())
            .with_ttl(Duration::from_mins(1))
    };
    let texts: Vec<String> = ["tea", "coffee", "tea", "water"]
        .map(str::to_owned)
        .to_vec();
    let first = cached();
    let vectors = first.embed(&texts).await.must("embed");
    assert_eq!(
        vectors,
        counting.inner.embed(&texts).await.must("reference")
    );
    assert_eq!(
        counting.texts.load(Ordering::SeqCst),
        4,
        "first batch is all misses"
    );

    let restarted = cached();
    let again = restarted
        .embed(&["water".to_owned(), "juice".to_owned(), "tea".to_owned()])
        .await
        .must("embed again");
    assert_eq!(again[0], vectors[3]);
    assert_eq!(again[2], vectors[0]);
    assert_eq!(
        counting.texts.load(Ordering::SeqCst),
        5,
        "only juice was new"
    );
    assert_eq!(
        restarted.stats(),
        CacheStats {
            hits: 2,
            misses: 1,
            errors: 0
        }
    );

    // Another model never reads these entries.
    let other_model = CachedEmbedder::new(
        Arc::new(HashingEmbedder::new(32)),
        ctx.backend_arc(),
        ctx.namespace().clone(),
    );
    assert_ne!(other_model.key("tea"), first.key("tea"));

    ctx.clock().advance(Duration::from_secs(61));
    cached()
        .embed(&["tea".to_owned()])
        .await
        .must("after expiry");
    assert_eq!(
        counting.texts.load(Ordering::SeqCst),
        6,
        "expired entries are misses"
    );
}

/// Provider cache handles registered by one registry are seen by another on the same backend
/// (another worker, a restart), expire with their TTL and can be removed.
pub async fn prompt_cache_handles_are_shared_and_expire(ctx: &Ctx) {
    let registry = || PromptCacheRegistry::new(ctx.backend_arc(), ctx.namespace().clone());
    let config: CacheableConfig =
        serde_json::from_value(json!({"instructions": true, "tools": true, "ttl": "30m"}))
            .expect("config");
    let fingerprint = PromptCacheRegistry::fingerprint("gemini-2.5-pro", &["instructions", "[]"]);
    let mut handle = ProviderCacheHandle::new("cachedContents/abc123", "gemini-2.5-pro");
    handle.metadata.insert("tokens".into(), json!(4096));

    assert_eq!(
        registry().get("google", &fingerprint).await.must("get"),
        None
    );
    registry()
        .put("google", &fingerprint, &handle, config.ttl)
        .await
        .must("put");
    assert_eq!(
        registry().get("google", &fingerprint).await.must("get"),
        Some(handle.clone())
    );
    assert_eq!(
        registry()
            .get("anthropic", &fingerprint)
            .await
            .must("other provider"),
        None
    );
    registry()
        .get("", &fingerprint)
        .await
        .must_be_invalid("an empty provider");

    ctx.clock().advance(Duration::from_mins(29));
    assert!(registry()
        .get("google", &fingerprint)
        .await
        .must("get")
        .is_some());
    ctx.clock().advance(Duration::from_mins(1));
    assert_eq!(
        registry().get("google", &fingerprint).await.must("expired"),
        None,
        "a handle lives as long as its provider resource"
    );

    registry()
        .put("google", &fingerprint, &handle, config.ttl)
        .await
        .must("put again");
    assert!(registry()
        .remove("google", &fingerprint)
        .await
        .must("remove"));
    assert!(!registry()
        .remove("google", &fingerprint)
        .await
        .must("remove twice"));
}
