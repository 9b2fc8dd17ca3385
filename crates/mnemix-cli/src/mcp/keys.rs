//! Bearer keys of the MCP server over HTTP: each bound to one scope, or an admin key; only their
//! SHA-256 digests are stored.
//!
//! A key is 32 random bytes from the operating system, written `amk_` + 64 hex digits. That is
//! as much entropy as the digest, so a fast hash is enough: nobody can guess their way back from
//! a leaked key file, and checking a request costs one SHA-256.
//!
//! The key file is changed only under an exclusive lock on `FILE.lock` (read, change, write a
//! temporary file, rename it over), so concurrent `mcp key` runs never lose each other's keys,
//! and a key is printed only once it is read back from the file. A running server re-reads the
//! file when it changes and on SIGHUP ([`KeyRing`]).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context as _, Result};
use mnemix_core::{Principal, Scope, Timestamp};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A key's identity: the SHA-256 of the key.
pub type KeyId = [u8; 32];

/// How many hex digits of a key's digest `mcp key list` shows and `revoke` takes at least.
pub const SHORT_ID: usize = 12;

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
    /// When it was made (absent in files written before keys had dates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Timestamp>,
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

    /// The short id `mcp key list` shows: the first hex digits of the digest.
    pub fn short_id(&self) -> &str {
        &self.sha256[..SHORT_ID.min(self.sha256.len())]
    }

    /// What it grants, in words.
    pub fn grants(&self) -> String {
        match (&self.namespace, &self.subject) {
            _ if self.admin => "admin (any scope, by headers)".to_owned(),
            (Some(namespace), Some(subject)) => format!("{namespace}/{subject}"),
            _ => "(invalid)".to_owned(),
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
    /// Reads a key file (missing: empty, the file `keys add` starts).
    pub fn read(path: &Path) -> Result<Self> {
        match std::fs::read_to_string(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            read => Self::parse(path, read),
        }
    }

    /// Reads a key file that must be there: a server's, where a file missing for a moment (a
    /// deploy that renames a new file in) is a file that does not read, not one without keys.
    fn read_existing(path: &Path) -> Result<Self> {
        Self::parse(path, std::fs::read_to_string(path))
    }

    fn parse(path: &Path, read: std::io::Result<String>) -> Result<Self> {
        let text = read.with_context(|| format!("cannot read {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{} is not a key file", path.display()))
    }

    /// Changes the file under its lock: reads it, applies `change`, writes it back whole (a
    /// temporary file renamed over it, readable by its owner only). Concurrent callers, in this
    /// process or another, take turns.
    pub fn update<T>(path: &Path, change: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let lock_path = sibling(path, "lock");
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .with_context(|| format!("cannot open the lock file {}", lock_path.display()))?;
        lock.lock()
            .with_context(|| format!("cannot lock {}", lock_path.display()))?;
        let mut file = Self::read(path)?;
        let answer = change(&mut file)?;
        file.write(path)?;
        drop(lock);
        Ok(answer)
    }

    /// Writes it whole, readable by its owner only. Callers hold the lock ([`KeyFile::update`]).
    fn write(&self, path: &Path) -> Result<()> {
        use std::io::Write as _;
        let text = serde_json::to_string_pretty(self)? + "\n";
        let temporary = sibling(path, &format!("tmp.{}", std::process::id()));
        let mut options = File::options();
        options.create(true).truncate(true).write(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut out = options
            .open(&temporary)
            .with_context(|| format!("cannot write {}", temporary.display()))?;
        out.write_all(text.as_bytes())
            .and_then(|()| out.sync_all())
            .with_context(|| format!("cannot write {}", temporary.display()))?;
        std::fs::rename(&temporary, path)
            .with_context(|| format!("cannot write {}", path.display()))
    }
}

/// `keys.json` → `keys.json.lock`.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".");
    name.push(suffix);
    PathBuf::from(name)
}

/// Adds a new key to the file and returns it, once it is read back from the file.
pub fn add(path: &Path, grant: &Grant, label: Option<String>) -> Result<String> {
    let (key, entry) = generate(grant, label)?;
    KeyFile::update(path, |file| {
        file.keys.push(entry.clone());
        Ok(())
    })?;
    let written = KeyFile::read(path)?;
    if !written.keys.contains(&entry) {
        bail!(
            "the new key is not in {} after writing it: nothing was added",
            path.display()
        );
    }
    Ok(key)
}

/// Removes the keys whose digest starts with `id` (at least [`SHORT_ID`] hex digits, naming
/// one key) or, with `label`, every key of that label. Returns what was removed.
pub fn revoke(path: &Path, id: Option<&str>, label: Option<&str>) -> Result<Vec<KeyEntry>> {
    KeyFile::update(path, |file| {
        let chosen: Vec<usize> = match (id, label) {
            (Some(id), None) => {
                let id = id.to_ascii_lowercase();
                if id.len() < SHORT_ID || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                    bail!("{id:?} is not a key id: give the {SHORT_ID} hex digits `mcp key list` shows");
                }
                let found: Vec<usize> = (0..file.keys.len())
                    .filter(|&i| file.keys[i].sha256.starts_with(&id))
                    .collect();
                if found.len() > 1 {
                    bail!("{id} names {} keys: give more digits", found.len());
                }
                found
            }
            (None, Some(label)) => (0..file.keys.len())
                .filter(|&i| file.keys[i].label.as_deref() == Some(label))
                .collect(),
            _ => bail!("name the key to revoke: its id, or --label"),
        };
        if chosen.is_empty() {
            bail!(
                "no key in {} matches {}",
                path.display(),
                id.map_or_else(|| format!("label {:?}", label.unwrap_or("")), str::to_owned)
            );
        }
        let mut removed = Vec::new();
        for i in chosen.into_iter().rev() {
            removed.push(file.keys.remove(i));
        }
        removed.reverse();
        Ok(removed)
    })
}

/// The keys a running server accepts, by digest.
#[derive(Debug, Clone, Default)]
pub struct Keys {
    grants: HashMap<KeyId, Grant>,
    labels: HashMap<KeyId, String>,
}

impl Keys {
    /// Loads and checks a key file; an empty one is refused (the server would refuse everyone).
    pub fn load(path: &Path) -> Result<Self> {
        let keys = if path.exists() {
            Self::read(path)?
        } else {
            Self::default()
        };
        if keys.grants.is_empty() {
            bail!(
                "{} holds no keys: make one with `mnemix mcp key --keys {} --subject …`",
                path.display(),
                path.display()
            );
        }
        Ok(keys)
    }

    /// Reads and checks a key file, empty or not.
    fn read(path: &Path) -> Result<Self> {
        let file = KeyFile::read_existing(path)?;
        let mut keys = Self::default();
        for entry in &file.keys {
            let digest = parse_digest(&entry.sha256)?;
            keys.grants.insert(digest, entry.grant()?);
            if let Some(label) = &entry.label {
                keys.labels.insert(digest, label.clone());
            }
        }
        Ok(keys)
    }

    /// The key's identity and what it grants, if it is one of them.
    pub fn grant(&self, key: &str) -> Option<(KeyId, &Grant)> {
        let id = digest(key);
        self.grants.get(&id).map(|grant| (id, grant))
    }

    /// Who key `id` is, as what it writes records it ([`Principal::key`]): the first 16 hex
    /// digits of its digest (the key file's `sha256`, never the key), with its label when the
    /// label is one a principal can carry.
    pub fn principal(&self, id: &KeyId) -> Principal {
        let short = hex(&id[..8]);
        let label = self.labels.get(id).cloned();
        Principal::key(short.clone(), label)
            .or_else(|_| Principal::key(short, None))
            .expect("16 hex digits are a principal id")
    }

    /// What key `id` grants now, if it is still one of them.
    pub fn grant_of(&self, id: &KeyId) -> Option<&Grant> {
        self.grants.get(id)
    }

    /// Whether key `id` grants `scope` (its own scope, or any for an admin key).
    pub fn grants(&self, id: &KeyId, scope: &Scope) -> bool {
        match self.grants.get(id) {
            Some(Grant::Admin) => true,
            Some(Grant::Scope(own)) => own == scope,
            None => false,
        }
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.grants.len()
    }
}

/// The keys of a running server, re-read from their file when it changes.
pub struct KeyRing {
    path: PathBuf,
    keys: RwLock<Arc<Keys>>,
    seen: RwLock<Option<Stamp>>,
}

/// What tells that a file changed: a rename over it gives a new inode, an edit a new length or
/// modification time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    #[cfg(unix)]
    inode: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let metadata = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: metadata.modified().ok(),
        len: metadata.len(),
        #[cfg(unix)]
        inode: std::os::unix::fs::MetadataExt::ino(&metadata),
    })
}

/// How often a running server looks at its key file.
pub const KEY_FILE_POLL: Duration = Duration::from_secs(1);

impl KeyRing {
    /// Loads the key file (refusing an empty one).
    pub fn load(path: &Path) -> Result<Self> {
        let seen = stamp(path);
        let keys = Keys::load(path)?;
        Ok(Self {
            path: path.to_owned(),
            keys: RwLock::new(Arc::new(keys)),
            seen: RwLock::new(seen),
        })
    }

    /// The keys now.
    pub fn current(&self) -> Arc<Keys> {
        Arc::clone(
            &self
                .keys
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Re-reads the file if it changed since the last read (or always, with `force`). A file that
    /// does not read, or is missing, keeps the keys in force and says why; every key may be
    /// revoked (a file with no key refuses everyone). Returns the new keys when they changed.
    pub fn reload(&self, force: bool) -> Option<Arc<Keys>> {
        let now = stamp(&self.path);
        {
            let mut seen = self
                .seen
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !force && *seen == now {
                return None;
            }
            *seen = now;
        }
        match Keys::read(&self.path) {
            Ok(keys) => {
                let keys = Arc::new(keys);
                *self
                    .keys
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::clone(&keys);
                Some(keys)
            }
            Err(error) => {
                eprintln!(
                    "mnemix mcp: kept the keys in force: {} does not read: {error:#}",
                    self.path.display()
                );
                None
            }
        }
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
        created_at: Some(Timestamp::now()),
    };
    Ok((key, entry))
}

fn digest(key: &str) -> KeyId {
    Sha256::digest(key.as_bytes()).into()
}

fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

fn parse_digest(text: &str) -> Result<KeyId> {
    // hex refuses what `u8::from_str_radix` let through before: a `+` before a digit pair.
    let mut digest = KeyId::default();
    hex::decode_to_slice(text, &mut digest)
        .map(|()| digest)
        .ok()
        .with_context(|| format!("{text:?} is not a hex SHA-256 (64 hex digits)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_is_accepted_and_only_its_digest_is_kept() {
        let scope = Scope::new("acme", "ada").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let key = add(&path, &Grant::Scope(scope.clone()), None).unwrap();
        assert!(key.starts_with("amk_") && key.len() == 68);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(&key[4..]), "the key itself is never written");
        let keys = Keys::load(&path).unwrap();
        assert_eq!(keys.grant(&key).map(|(_, g)| g), Some(&Grant::Scope(scope)));
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
        KeyFile::update(&path, |file| {
            file.keys.push(entry);
            Ok(())
        })
        .unwrap();
        assert!(Keys::load(&path).is_err(), "admin with a subject");
        std::fs::write(&path, r#"{"keys":[{"sha256":"xyz","admin":true}]}"#).unwrap();
        assert!(Keys::load(&path).is_err(), "not a digest");
        let multibyte = "é".repeat(32);
        std::fs::write(
            &path,
            format!(r#"{{"keys":[{{"sha256":"{multibyte}","admin":true}}]}}"#),
        )
        .unwrap();
        assert!(Keys::load(&path).is_err(), "64 bytes, not 64 hex digits");
    }

    #[test]
    fn revoking_takes_one_key_by_id_or_every_key_of_a_label() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let ada = Grant::Scope(Scope::new("acme", "ada").unwrap());
        let first = add(&path, &ada, Some("laptop".into())).unwrap();
        add(&path, &ada, Some("laptop".into())).unwrap();
        let kept = add(&path, &Grant::Admin, Some("ops".into())).unwrap();
        let id = hex(&digest(&first))[..SHORT_ID].to_owned();
        assert!(
            revoke(&path, Some(&id[..6]), None).is_err(),
            "too short an id"
        );
        let held = KeyFile::read(&path).unwrap();
        let nobody = (0..16)
            .map(|d| format!("{d:x}").repeat(SHORT_ID))
            .find(|id| held.keys.iter().all(|k| !k.sha256.starts_with(id)))
            .unwrap();
        assert!(
            revoke(&path, Some(&nobody), None).is_err(),
            "an id of no key"
        );
        let removed = revoke(&path, Some(&id.to_uppercase()), None).unwrap();
        assert_eq!(removed.len(), 1);
        assert!(Keys::load(&path).unwrap().grant(&first).is_none());
        assert_eq!(revoke(&path, None, Some("laptop")).unwrap().len(), 1);
        assert!(
            revoke(&path, None, Some("laptop")).is_err(),
            "nothing left to match"
        );
        let keys = Keys::load(&path).unwrap();
        assert_eq!(keys.len(), 1);
        assert!(keys.grant(&kept).is_some());
    }

    #[test]
    fn a_key_file_missing_for_a_moment_keeps_the_keys_as_an_unreadable_one_does() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let key = add(&path, &Grant::Admin, None).unwrap();
        let ring = KeyRing::load(&path).unwrap();
        let kept = |ring: &KeyRing| ring.current().grant(&key).is_some();
        std::fs::remove_file(&path).unwrap();
        assert!(
            ring.reload(true).is_none(),
            "a missing file changes nothing"
        );
        assert!(
            kept(&ring),
            "the keys stay in force while the file is missing"
        );
        std::fs::write(&path, "{ not json").unwrap();
        assert!(
            ring.reload(true).is_none(),
            "an unreadable file changes nothing"
        );
        assert!(kept(&ring));
        std::fs::write(&path, r#"{"keys":[]}"#).unwrap();
        let none = ring.reload(true).expect("a file with no key reads");
        assert_eq!(none.len(), 0);
        assert!(!kept(&ring), "a file with no key revokes every key");
    }

    #[test]
    fn a_digest_is_64_hex_digits_and_nothing_else() {
        let digest = hex(&[0xab; 32]);
        assert_eq!(parse_digest(&digest).unwrap(), [0xab; 32]);
        assert_eq!(parse_digest(&digest.to_uppercase()).unwrap(), [0xab; 32]);
        // `u8::from_str_radix` took "+a" for 0x0a: a file's digest must be hex digits only.
        assert!(parse_digest(&"+a".repeat(32)).is_err());
        assert!(parse_digest(&digest[..62]).is_err());
        assert!(parse_digest(&format!("{digest}00")).is_err());
        assert!(parse_digest(&"zz".repeat(32)).is_err());
    }
}
