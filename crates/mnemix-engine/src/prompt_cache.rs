//! Prompt-cache markers and a registry of provider cache handles.
//!
//! [`CacheableConfig`] says which stable parts of a prompt a provider adapter should mark as
//! cacheable (Anthropic's `cache_control`, OpenAI's `prompt_cache_key`, Google's
//! `cachedContent`); it is plain data, the adapters live with the agent framework.
//! [`PromptCacheRegistry`] keeps the handles of stateful provider caches (Google's
//! `cachedContents/…` resources) on a [`CacheStore`], so they survive restarts and are shared
//! by every worker on the same backend instead of being recreated per process.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use mnemix_engine::prompt_cache::{CacheableConfig, PromptCacheRegistry, ProviderCacheHandle};
//! use mnemix_core::{InMemoryBackend, Namespace};
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let config: CacheableConfig = serde_json::from_str(r#"{"instructions": true, "messages": 4, "ttl": "6h"}"#)?;
//! assert_eq!(config.ttl, Duration::from_secs(6 * 3600));
//! assert_eq!(config.last_cached_message(10), Some(3));
//!
//! let registry = PromptCacheRegistry::new(Arc::new(InMemoryBackend::new()), Namespace::new("prompt-cache")?);
//! let fingerprint = PromptCacheRegistry::fingerprint("gemini-2.5-pro", &["You are a support agent."]);
//! let handle = ProviderCacheHandle::new("cachedContents/abc123", "gemini-2.5-pro");
//! registry.put("google", &fingerprint, &handle, config.ttl).await?;
//! assert_eq!(registry.get("google", &fingerprint).await?, Some(handle));
//! # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
//! ```

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use mnemix_core::CacheStore;
use mnemix_core::Metadata;
use mnemix_core::{validate_identifier, Namespace};
use mnemix_core::{MemoryError, Result};

/// The default cache lifetime: one hour.
pub const DEFAULT_TTL: Duration = Duration::from_hours(1);

/// Which parts of a prompt are stable enough to cache (the seeds' `CacheableConfig`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheableConfig {
    /// Cache the system instructions.
    pub instructions: bool,
    /// Cache the tool definitions.
    pub tools: bool,
    /// Cache the first N (oldest) messages.
    pub messages: usize,
    /// Cache lifetime, written as a duration (`"30m"`, `"2h"`, `"1d"`; default one hour).
    /// Providers without a per-call lifetime ignore it.
    #[serde(serialize_with = "write_duration", deserialize_with = "read_duration")]
    pub ttl: Duration,
}

impl Default for CacheableConfig {
    fn default() -> Self {
        Self {
            instructions: false,
            tools: false,
            messages: 0,
            ttl: DEFAULT_TTL,
        }
    }
}

impl CacheableConfig {
    /// Whether anything is marked.
    pub fn is_enabled(&self) -> bool {
        self.instructions || self.tools || self.messages > 0
    }

    /// The index of the last cached message of a prompt of `message_count` messages: the
    /// block an adapter marks (`None` when no message is cached).
    pub fn last_cached_message(&self, message_count: usize) -> Option<usize> {
        self.messages.min(message_count).checked_sub(1)
    }
}

/// Parses a duration of one or more `<number><unit>` groups, unit `s`, `m`, `h` or `d`
/// (`"90s"`, `"30m"`, `"1h30m"`, `"1d"`); anything else, or zero, is `InvalidInput`.
///
/// ```
/// use std::time::Duration;
/// use mnemix_engine::prompt_cache::parse_duration;
/// assert_eq!(parse_duration("1h30m")?, Duration::from_secs(5400));
/// assert!(parse_duration("2 weeks").is_err());
/// # Ok::<(), mnemix_core::MemoryError>(())
/// ```
pub fn parse_duration(text: &str) -> Result<Duration> {
    let invalid = || {
        MemoryError::invalid(format!(
            "{text:?} is not a duration: write groups of a number and a unit s, m, h or d, like 30m, 2h or 1d"
        ))
    };
    let mut total: u64 = 0;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(invalid());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(invalid)?;
        let number: u64 = rest[..digits].parse().map_err(|_| invalid())?;
        let mut chars = rest[digits..].chars();
        let unit = match chars.next() {
            Some('s') => 1,
            Some('m') => 60,
            Some('h') => 3600,
            Some('d') => 86_400,
            _ => return Err(invalid()),
        };
        total = number
            .checked_mul(unit)
            .and_then(|seconds| total.checked_add(seconds))
            .ok_or_else(invalid)?;
        rest = chars.as_str();
    }
    if total == 0 {
        return Err(invalid());
    }
    Ok(Duration::from_secs(total))
}

/// Writes a duration in the largest unit that divides it (`"6h"`, `"90s"`).
pub fn format_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match [(86_400, 'd'), (3600, 'h'), (60, 'm')]
        .into_iter()
        .find(|(unit, _)| seconds > 0 && seconds.is_multiple_of(*unit))
    {
        Some((unit, suffix)) => format!("{}{suffix}", seconds / unit),
        None => format!("{seconds}s"),
    }
}

fn write_duration<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format_duration(*duration))
}

fn read_duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

/// A provider's handle to a cache it holds (a resource name such as `cachedContents/abc`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderCacheHandle {
    /// The provider's name for the cached content.
    pub name: String,
    /// The model it was created for (a cache serves only that model).
    pub model: String,
    /// Anything else the adapter needs (token count, creation time, …).
    #[serde(default, skip_serializing_if = "Metadata::is_empty")]
    pub metadata: Metadata,
}

impl ProviderCacheHandle {
    /// A handle without metadata.
    pub fn new(name: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            model: model.into(),
            metadata: Metadata::new(),
        }
    }
}

/// Provider cache handles by (provider, prompt fingerprint), kept on a [`CacheStore`].
///
/// Store a handle with the TTL the provider resource was created with, so the registry never
/// hands out a handle the provider has already expired.
#[derive(Clone)]
pub struct PromptCacheRegistry {
    store: Arc<dyn CacheStore>,
    namespace: Namespace,
}

impl std::fmt::Debug for PromptCacheRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptCacheRegistry")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl PromptCacheRegistry {
    /// A registry on `store`, its entries under `namespace`.
    pub fn new(store: Arc<dyn CacheStore>, namespace: Namespace) -> Self {
        Self { store, namespace }
    }

    /// The fingerprint of a cached prompt prefix: SHA-256 (hex) over the model and each part
    /// (instructions, serialized tools, messages), length-prefixed so parts cannot run together.
    pub fn fingerprint<P: AsRef<[u8]>>(model: &str, parts: &[P]) -> String {
        let mut hasher = Sha256::new();
        for part in std::iter::once(model.as_bytes()).chain(parts.iter().map(AsRef::as_ref)) {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
        hex::encode(hasher.finalize())
    }

    fn key(provider: &str, fingerprint: &str) -> Result<String> {
        validate_identifier("provider", provider)?;
        validate_identifier("fingerprint", fingerprint)?;
        // Length-prefixed so ("a:b", "c") and ("a", "b:c") never share a key.
        Ok(format!(
            "prompt-cache:{}:{provider}:{fingerprint}",
            provider.len()
        ))
    }

    /// The handle for a prompt prefix, if one is registered and unexpired.
    pub async fn get(
        &self,
        provider: &str,
        fingerprint: &str,
    ) -> Result<Option<ProviderCacheHandle>> {
        let key = Self::key(provider, fingerprint)?;
        match self.store.cache_get(&self.namespace, &key).await? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                MemoryError::invalid(format!("prompt-cache entry {key} is not a handle: {e}"))
            }),
        }
    }

    /// Registers a handle for `ttl` (the provider resource's own lifetime), replacing any.
    pub async fn put(
        &self,
        provider: &str,
        fingerprint: &str,
        handle: &ProviderCacheHandle,
        ttl: Duration,
    ) -> Result<()> {
        let key = Self::key(provider, fingerprint)?;
        let bytes = serde_json::to_vec(handle)
            .map_err(|e| MemoryError::invalid(format!("cannot serialize a handle: {e}")))?;
        self.store
            .cache_set(&self.namespace, &key, bytes, Some(ttl))
            .await
    }

    /// Forgets a handle (after the provider reports it gone); returns whether one was there.
    pub async fn remove(&self, provider: &str, fingerprint: &str) -> Result<bool> {
        let key = Self::key(provider, fingerprint)?;
        self.store.cache_delete(&self.namespace, &key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_format() {
        for (text, seconds) in [
            ("30m", 1800),
            ("2h", 7200),
            ("1d", 86_400),
            ("90s", 90),
            ("1h30m", 5400),
            (" 6h ", 21_600),
        ] {
            assert_eq!(
                parse_duration(text).unwrap(),
                Duration::from_secs(seconds),
                "{text}"
            );
        }
        for bad in [
            "",
            "30",
            "m",
            "1w",
            "2 h",
            "-1h",
            "0m",
            "1h 30m",
            "99999999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        for seconds in [90, 1800, 5400, 7200, 86_400] {
            let d = Duration::from_secs(seconds);
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }
    }

    #[test]
    fn config_defaults_and_markers() {
        let config: CacheableConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(config, CacheableConfig::default());
        assert_eq!(config.ttl, DEFAULT_TTL);
        assert!(!config.is_enabled());
        assert_eq!(config.last_cached_message(5), None);
        let config: CacheableConfig = serde_json::from_str(r#"{"messages": 4}"#).unwrap();
        assert_eq!(config.last_cached_message(10), Some(3));
        assert_eq!(config.last_cached_message(2), Some(1));
        assert_eq!(config.last_cached_message(0), None);
        assert!(serde_json::from_str::<CacheableConfig>(r#"{"ttl": "soon"}"#).is_err());
        assert!(serde_json::from_str::<CacheableConfig>(r#"{"tool": true}"#).is_err());
        let written = serde_json::to_value(CacheableConfig::default()).unwrap();
        assert_eq!(written["ttl"], "1h");
    }

    #[test]
    fn fingerprints_separate_parts() {
        let a = PromptCacheRegistry::fingerprint("m", &["ab", "c"]);
        assert_ne!(a, PromptCacheRegistry::fingerprint("m", &["a", "bc"]));
        assert_ne!(a, PromptCacheRegistry::fingerprint("n", &["ab", "c"]));
        assert_eq!(a, PromptCacheRegistry::fingerprint("m", &["ab", "c"]));
        assert_eq!(a.len(), 64);
    }
}
