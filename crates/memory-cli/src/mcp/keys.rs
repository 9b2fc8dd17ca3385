//! Bearer keys of the MCP server over HTTP: each bound to one scope, or an admin key; only their
//! SHA-256 digests are stored.
//!
//! A key is 32 random bytes from the operating system, written `amk_` + 64 hex digits. That is
//! as much entropy as the digest, so a fast hash is enough: nobody can guess their way back from
//! a leaked key file, and checking a request costs one SHA-256.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use memory_core::Scope;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What a key grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// One scope: every tool call works in it, whatever the request says.
    Scope(Scope),
    /// Any scope, named by the request's `X-Memory-Namespace` and `X-Memory-Subject` headers
    /// (set in the client's configuration, never by the model).
    Admin,
}

/// One line of the key file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyEntry {
    /// Hex SHA-256 of the key.
    pub sha256: String,
    /// A label for people (who holds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The scope's namespace (absent for an admin key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The scope's subject (absent for an admin key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// An admin key: any scope, by headers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admin: bool,
}

impl KeyEntry {
    fn grant(&self) -> Result<Grant> {
        match (self.admin, &self.namespace, &self.subject) {
            (true, None, None) => Ok(Grant::Admin),
            (false, Some(namespace), Some(subject)) => Ok(Grant::Scope(
                Scope::new(namespace.clone(), subject.clone())
                    .with_context(|| format!("key {}", self.sha256))?,
            )),
            _ => bail!(
                "key {}: give either namespace and subject, or admin: true alone",
                self.sha256
            ),
        }
    }
}

/// The key file: `{"keys": [ … ]}`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct KeyFile {
    /// Every key.
    pub keys: Vec<KeyEntry>,
}

impl KeyFile {
    /// Reads a key file (missing: empty).
    pub fn read(path: &Path) -> Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text)
                .with_context(|| format!("{} is not a key file", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Writes it, readable by its owner only.
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)? + "\n";
        let temporary = path.with_extension("tmp");
        std::fs::write(&temporary, text)
            .with_context(|| format!("cannot write {}", temporary.display()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o600))?;
        }
        std::fs::rename(&temporary, path)
            .with_context(|| format!("cannot write {}", path.display()))
    }
}

/// The keys a running server accepts, by digest.
#[derive(Debug, Clone, Default)]
pub struct Keys(HashMap<[u8; 32], Grant>);

impl Keys {
    /// Loads and checks a key file; an empty one is refused (the server would refuse everyone).
    pub fn load(path: &Path) -> Result<Self> {
        let file = KeyFile::read(path)?;
        if file.keys.is_empty() {
            bail!(
                "{} holds no keys: make one with `agent-memory mcp key --keys {} --subject …`",
                path.display(),
                path.display()
            );
        }
        let mut keys = HashMap::new();
        for entry in &file.keys {
            let digest = parse_digest(&entry.sha256)?;
            keys.insert(digest, entry.grant()?);
        }
        Ok(Self(keys))
    }

    /// What `key` grants, if it is one of them.
    pub fn grant(&self, key: &str) -> Option<&Grant> {
        self.0.get(&digest(key))
    }
}

/// A new key and its entry for the key file.
pub fn generate(grant: &Grant, label: Option<String>) -> Result<(String, KeyEntry)> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("the operating system gave no random bytes: {e}"))?;
    let key = format!("amk_{}", hex(&bytes));
    let (namespace, subject, admin) = match grant {
        Grant::Scope(scope) => (
            Some(scope.namespace().as_str().to_owned()),
            scope.subject().map(|s| s.as_str().to_owned()),
            false,
        ),
        Grant::Admin => (None, None, true),
    };
    let entry = KeyEntry {
        sha256: hex(&digest(&key)),
        label,
        namespace,
        subject,
        admin,
    };
    Ok((key, entry))
}

fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(2 * bytes.len()), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        })
}

fn parse_digest(text: &str) -> Result<[u8; 32]> {
    let bytes: Option<Vec<u8>> = (text.len() == 64)
        .then(|| {
            (0..32)
                .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok())
                .collect()
        })
        .flatten();
    bytes
        .and_then(|b| b.try_into().ok())
        .with_context(|| format!("{text:?} is not a hex SHA-256 (64 hex digits)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_is_accepted_and_only_its_digest_is_kept() {
        let scope = Scope::new("acme", "ada").unwrap();
        let (key, entry) = generate(&Grant::Scope(scope.clone()), None).unwrap();
        assert!(key.starts_with("amk_") && key.len() == 68);
        let file = KeyFile {
            keys: vec![entry.clone()],
        };
        let text = serde_json::to_string(&file).unwrap();
        assert!(!text.contains(&key[4..]), "the key itself is never written");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        file.write(&path).unwrap();
        let keys = Keys::load(&path).unwrap();
        assert_eq!(keys.grant(&key), Some(&Grant::Scope(scope)));
        assert_eq!(keys.grant("amk_wrong"), None);
        let mut flipped = key.clone();
        flipped.pop();
        flipped.push(if key.ends_with('0') { '1' } else { '0' });
        assert_eq!(keys.grant(&flipped), None);
    }

    #[test]
    fn a_key_file_must_say_admin_or_one_scope() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        assert!(Keys::load(&path).is_err(), "no keys at all");
        let (_, mut entry) = generate(&Grant::Admin, None).unwrap();
        entry.subject = Some("ada".into());
        KeyFile { keys: vec![entry] }.write(&path).unwrap();
        assert!(Keys::load(&path).is_err(), "admin with a subject");
        std::fs::write(&path, r#"{"keys":[{"sha256":"xyz","admin":true}]}"#).unwrap();
        assert!(Keys::load(&path).is_err(), "not a digest");
    }
}
