//! Who wrote a fact and where its content came from ([`Provenance`]), set by the front layer
//! from the handle's context — never from a field of the request.
//!
//! A program opens its store as itself ([`Principal::program`]) and may name the agent it runs
//! ([`Store::acting_as`](crate::Store::acting_as)); the MCP server and the inspector act as the
//! caller's key, the command line as [`Principal::command`], the engine's extractor as
//! [`Principal::extractor`] with its model. What a client sends (a tool's arguments, a form, an
//! import file) reaches a handle made for it, so nothing it sends can claim another writer:
//! [`NewFact`](crate::NewFact) has no such field, and a restored record is re-attributed to
//! the importer, the file's own account kept as [`Provenance::claimed`].

use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};

/// What kind of writer a [`Principal`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PrincipalKind {
    /// Written before the store recorded its writers.
    Unrecorded,
    /// The program that opened the store, unnamed.
    Program,
    /// An agent, named by the program that opened the store.
    Agent,
    /// A key of the MCP server or the inspector (its id; its label beside).
    Key,
    /// The `mnemix` command line, run by an operator.
    Command,
    /// The engine's extractor (its model's name).
    Extractor,
}

/// Who made a write: set from the caller's context by the front layer.
///
/// Two principals are the same writer when their kind and id are ([`Principal::same_writer`]);
/// the label (a key's) is shown, not compared.
///
/// ```
/// use mnemix_core::Principal;
/// let planner = Principal::agent("planner")?;
/// assert_eq!(planner.to_string(), "agent:planner");
/// assert!(Principal::agent("").is_err());
/// # Ok::<(), mnemix_core::MemoryError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Principal {
    /// The kind of writer.
    pub kind: PrincipalKind,
    /// Its id within its kind (empty for the unnamed program, the command line and writes
    /// before principals were recorded).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// A name shown beside the id (a key's label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// The longest principal id or label, in bytes.
pub const MAX_PRINCIPAL_BYTES: usize = 256;

fn check_part(what: &str, value: &str) -> Result<()> {
    if value.is_empty() || value.len() > MAX_PRINCIPAL_BYTES {
        return Err(MemoryError::invalid(format!(
            "a principal's {what} must be 1 to {MAX_PRINCIPAL_BYTES} bytes, got {}",
            value.len()
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(MemoryError::invalid(format!(
            "a principal's {what} must not hold control characters"
        )));
    }
    Ok(())
}

impl Principal {
    fn unnamed(kind: PrincipalKind) -> Self {
        Self {
            kind,
            id: String::new(),
            label: None,
        }
    }

    fn named(kind: PrincipalKind, id: impl Into<String>) -> Result<Self> {
        let id = id.into();
        check_part("id", &id)?;
        Ok(Self {
            kind,
            id,
            label: None,
        })
    }

    /// A write made before principals were recorded.
    pub fn unrecorded() -> Self {
        Self::unnamed(PrincipalKind::Unrecorded)
    }

    /// The program that opened the store (what a store acts as unless told otherwise).
    pub fn program() -> Self {
        Self::unnamed(PrincipalKind::Program)
    }

    /// The `mnemix` command line.
    pub fn command() -> Self {
        Self::unnamed(PrincipalKind::Command)
    }

    /// An agent the program names. `InvalidInput` for an empty id, one over
    /// [`MAX_PRINCIPAL_BYTES`] or one holding control characters.
    pub fn agent(id: impl Into<String>) -> Result<Self> {
        Self::named(PrincipalKind::Agent, id)
    }

    /// A key, by its id, with its label when it has one.
    pub fn key(id: impl Into<String>, label: Option<String>) -> Result<Self> {
        let mut key = Self::named(PrincipalKind::Key, id)?;
        if let Some(label) = &label {
            check_part("label", label)?;
        }
        key.label = label;
        Ok(key)
    }

    /// The engine's extractor, by its model's name.
    pub fn extractor(model: impl Into<String>) -> Result<Self> {
        Self::named(PrincipalKind::Extractor, model)
    }

    /// Whether `other` is the same writer: same kind and id, whatever the labels.
    pub fn same_writer(&self, other: &Self) -> bool {
        self.kind == other.kind && self.id == other.id
    }

    /// Checks a principal read from outside (an import): the rules of its constructors.
    pub fn validate(&self) -> Result<()> {
        let named = matches!(
            self.kind,
            PrincipalKind::Agent | PrincipalKind::Key | PrincipalKind::Extractor
        );
        if named {
            check_part("id", &self.id)?;
        } else if !self.id.is_empty() {
            return Err(MemoryError::invalid(format!(
                "a principal of kind {:?} has no id",
                self.kind
            )));
        }
        match &self.label {
            Some(label) if self.kind == PrincipalKind::Key => check_part("label", label),
            Some(_) => Err(MemoryError::invalid("only a key principal has a label")),
            None => Ok(()),
        }
    }
}

impl Default for Principal {
    fn default() -> Self {
        Self::unrecorded()
    }
}

impl PrincipalKind {
    /// Every kind, in declaration order.
    pub const ALL: [Self; 6] = [
        Self::Unrecorded,
        Self::Program,
        Self::Agent,
        Self::Key,
        Self::Command,
        Self::Extractor,
    ];

    /// Its name, as [`Principal`]'s display and parse write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unrecorded => "unrecorded",
            Self::Program => "program",
            Self::Agent => "agent",
            Self::Key => "key",
            Self::Command => "command",
            Self::Extractor => "extractor",
        }
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind.as_str())?;
        if !self.id.is_empty() {
            write!(f, ":{}", self.id)?;
        }
        if let Some(label) = &self.label {
            write!(f, " ({label})")?;
        }
        Ok(())
    }
}

/// A writer to filter by, written `kind` or `kind:id` (`"agent:planner"`, `"command"`): what
/// [`Display`](std::fmt::Display) writes, without a label (labels are not compared).
///
/// ```
/// use mnemix_core::Principal;
/// let planner: Principal = "agent:planner".parse()?;
/// assert!(planner.same_writer(&Principal::agent("planner")?));
/// assert!("robot:r2".parse::<Principal>().unwrap_err().is_invalid_input());
/// # Ok::<(), mnemix_core::MemoryError>(())
/// ```
impl std::str::FromStr for Principal {
    type Err = MemoryError;

    fn from_str(text: &str) -> Result<Self> {
        let (kind, id) = text.split_once(':').unwrap_or((text, ""));
        let kind = PrincipalKind::ALL
            .into_iter()
            .find(|k| k.as_str() == kind)
            .ok_or_else(|| {
                let kinds: Vec<&str> = PrincipalKind::ALL.iter().map(|k| k.as_str()).collect();
                MemoryError::invalid(format!(
                    "writer {text:?}: the kind before ':' is one of {}",
                    kinds.join(", ")
                ))
            })?;
        let principal = Self {
            kind,
            id: id.to_owned(),
            label: None,
        };
        principal.validate()?;
        Ok(principal)
    }
}

/// Where a fact's content came from.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Origin {
    /// Written before the store recorded origins.
    #[default]
    Unrecorded,
    /// Written through the API by its principal (the default of a handle).
    Api,
    /// Said by the user (a program that records what its user stated).
    User,
    /// Said by the assistant.
    Assistant,
    /// Extracted from a conversation by a model ([`PrincipalKind::Extractor`] names which),
    /// from messages none of which was a tool's result.
    Extracted,
    /// Derived from a tool's result (extracted from messages that held one, or recorded from
    /// one): text a third party may have written.
    Tool,
    /// Restored from an export: the file's own account is [`Provenance::claimed`].
    Imported,
}

impl Origin {
    /// Every origin, in declaration order.
    pub const ALL: [Self; 7] = [
        Self::Unrecorded,
        Self::Api,
        Self::User,
        Self::Assistant,
        Self::Extracted,
        Self::Tool,
        Self::Imported,
    ];

    /// Its name, as display, parse and serde write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unrecorded => "unrecorded",
            Self::Api => "api",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Extracted => "extracted",
            Self::Tool => "tool",
            Self::Imported => "imported",
        }
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// ```
/// use mnemix_core::Origin;
/// assert_eq!("tool".parse::<Origin>()?, Origin::Tool);
/// assert!("rumour".parse::<Origin>().is_err());
/// # Ok::<(), mnemix_core::MemoryError>(())
/// ```
impl std::str::FromStr for Origin {
    type Err = MemoryError;

    fn from_str(text: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|o| o.as_str() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|o| o.as_str()).collect();
                MemoryError::invalid(format!(
                    "origin {text:?} is not one of {}",
                    names.join(", ")
                ))
            })
    }
}

/// Who wrote a version of a fact and where its content came from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// The writer, as the front layer knew it.
    #[serde(default)]
    pub written_by: Principal,
    /// Where the content came from.
    #[serde(default)]
    pub origin: Origin,
    /// For an imported fact, the writer and origin the file said it had: an account, not a
    /// record (nothing verified it), never what a filter by writer or origin matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed: Option<Box<Claim>>,
}

/// The writer and origin an import file gave a fact ([`Provenance::claimed`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// The writer the file named.
    pub written_by: Principal,
    /// The origin the file named.
    pub origin: Origin,
}

impl Provenance {
    /// Written by `written_by`, from `origin`.
    pub fn new(written_by: Principal, origin: Origin) -> Self {
        Self {
            written_by,
            origin,
            claimed: None,
        }
    }

    /// What a restore by `importer` records for a fact the file says had `self`: written by
    /// the importer, imported, and the file's account kept — its first account when it was
    /// imported before, so a chain of copies stays one claim deep.
    #[must_use]
    pub fn imported_by(self, importer: &Principal) -> Self {
        let claimed = self.claimed.unwrap_or_else(|| {
            Box::new(Claim {
                written_by: self.written_by,
                origin: self.origin,
            })
        });
        Self {
            written_by: importer.clone(),
            origin: Origin::Imported,
            claimed: Some(claimed),
        }
    }

    /// The account a copy is compared by: the first claim for an imported fact, else its own
    /// writer and origin (copy and verify compare this, so a copy equals its source).
    pub fn account(&self) -> Claim {
        self.claimed.as_deref().cloned().unwrap_or_else(|| Claim {
            written_by: self.written_by.clone(),
            origin: self.origin,
        })
    }

    /// Checks a provenance read from outside (an import).
    pub fn validate(&self) -> Result<()> {
        self.written_by.validate()?;
        if let Some(claim) = &self.claimed {
            claim.written_by.validate()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_import_keeps_the_first_account_one_claim_deep() {
        let writer = Principal::key("abc", Some("ops".into())).unwrap();
        let original = Provenance::new(writer.clone(), Origin::User);
        let once = original.clone().imported_by(&Principal::command());
        let twice = once
            .clone()
            .imported_by(&Principal::agent("restorer").unwrap());
        assert_eq!(twice.written_by, Principal::agent("restorer").unwrap());
        assert_eq!(twice.origin, Origin::Imported);
        let first = Claim {
            written_by: writer,
            origin: Origin::User,
        };
        assert_eq!(twice.claimed.as_deref(), Some(&first));
        assert_eq!((original.account(), once.account()), (first.clone(), first));
    }

    #[test]
    fn principals_are_checked_as_their_constructors_check_them() {
        assert!(Principal::agent("a\u{0}b").is_err());
        assert!(Principal::agent("x".repeat(MAX_PRINCIPAL_BYTES + 1)).is_err());
        assert!(Principal::key("k", Some("line\nbreak".into())).is_err());
        let forged = |kind, id: &str, label: Option<&str>| Principal {
            kind,
            id: id.to_owned(),
            label: label.map(str::to_owned),
        };
        assert!(forged(PrincipalKind::Program, "someone", None)
            .validate()
            .is_err());
        assert!(forged(PrincipalKind::Agent, "", None).validate().is_err());
        assert!(forged(PrincipalKind::Agent, "a", Some("l"))
            .validate()
            .is_err());
        assert!(forged(PrincipalKind::Key, "k", Some("ops"))
            .validate()
            .is_ok());
        // The label is shown, not compared.
        let (a, b) = (
            Principal::key("k", Some("old".into())).unwrap(),
            Principal::key("k", None).unwrap(),
        );
        assert!(a.same_writer(&b));
        assert_eq!(a.to_string(), "key:k (old)");
    }
}
