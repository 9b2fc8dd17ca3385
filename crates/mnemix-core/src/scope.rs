//! Who owns a record: [`Scope`] (namespace + subject) and the validated identifier types.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};

/// Longest identifier (ids, keys, subjects, names) accepted, in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// Checks the rule shared by every identifier: non-empty, at most [`MAX_ID_BYTES`], no NUL
/// (identifiers become keys and index entries; free text fields may hold NUL, identifiers may not).
pub fn validate_identifier(what: &str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(MemoryError::invalid(format!("{what} must not be empty")));
    }
    if value.len() > MAX_ID_BYTES {
        return Err(MemoryError::invalid(format!(
            "{what} is {} bytes, the limit is {MAX_ID_BYTES}",
            value.len()
        )));
    }
    if value.contains('\0') {
        return Err(MemoryError::invalid(format!("{what} must not contain NUL")));
    }
    Ok(())
}

macro_rules! identifier {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Validates and wraps an identifier (non-empty, at most 256 bytes, no NUL).
            pub fn new(value: impl Into<String>) -> Result<Self> {
                let value = value.into();
                validate_identifier($what, &value)?;
                Ok(Self(value))
            }

            /// The identifier as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = MemoryError;
            fn try_from(value: String) -> Result<Self> {
                Self::new(value)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = MemoryError;
            fn try_from(value: &str) -> Result<Self> {
                Self::new(value)
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }
    };
}

identifier!(
    /// The user or tenant that owns records (non-empty, at most 256 bytes, no NUL).
    Subject, "subject"
);
identifier!(
    /// A conversation's id: given by the client or a UUIDv7 made by the store.
    ConversationId, "conversation id"
);
identifier!(
    /// A message's id: the idempotency key of [`append`](crate::ConversationStore::append).
    MessageId, "message id"
);
identifier!(
    /// A fact's id.
    FactId, "fact id"
);
identifier!(
    /// A vector record's id within a collection.
    VectorId, "vector id"
);
identifier!(
    /// A workflow checkpoint's id.
    CheckpointId, "checkpoint id"
);

impl ConversationId {
    /// A fresh time-ordered UUIDv7.
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }
}

impl MessageId {
    /// A fresh time-ordered UUIDv7.
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }
}

impl FactId {
    /// A fresh time-ordered UUIDv7.
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }
}

/// A namespace: `^[a-z][a-z0-9-]{0,62}$`. Separates applications or environments sharing a database.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Namespace(String);

impl Namespace {
    /// The namespace used when none is given.
    pub const DEFAULT: &'static str = "default";

    /// Validates a namespace against `^[a-z][a-z0-9-]{0,62}$`.
    pub fn new(value: impl Into<String>) -> Result<Self> {
        let value = value.into();
        let mut chars = value.chars();
        let valid_start = chars.next().is_some_and(|c| c.is_ascii_lowercase());
        let valid_rest = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !valid_start || !valid_rest || value.len() > 63 {
            return Err(MemoryError::invalid(format!(
                "namespace {value:?} must match ^[a-z][a-z0-9-]{{0,62}}$"
            )));
        }
        Ok(Self(value))
    }

    /// The namespace as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Namespace {
    fn default() -> Self {
        Self(Self::DEFAULT.to_owned())
    }
}

impl TryFrom<String> for Namespace {
    type Error = MemoryError;
    fn try_from(value: String) -> Result<Self> {
        Self::new(value)
    }
}

impl From<Namespace> for String {
    fn from(value: Namespace) -> String {
        value.0
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Namespace({:?})", self.0)
    }
}

/// Who owns a record: a namespace and, except for namespace-wide shared knowledge, a subject.
///
/// Every read and write of every contract takes a `Scope`, and records are keyed by it: a record
/// of another scope is [`NotFound`](MemoryError::NotFound), never someone else's data.
///
/// ```
/// use mnemix_core::Scope;
/// let scope = Scope::new("support-bot", "user-42")?;
/// assert_eq!(scope.subject().map(|s| s.as_str()), Some("user-42"));
/// assert!(Scope::new("Bad Namespace", "user-42").is_err());
/// # Ok::<(), mnemix_core::MemoryError>(())
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Debug)]
pub struct Scope {
    namespace: Namespace,
    subject: Option<Subject>,
}

impl Scope {
    /// A subject's scope within a namespace.
    pub fn new(namespace: impl Into<String>, subject: impl Into<String>) -> Result<Self> {
        Ok(Self {
            namespace: Namespace::new(namespace)?,
            subject: Some(Subject::new(subject)?),
        })
    }

    /// A subject's scope in the `default` namespace.
    pub fn for_subject(subject: impl Into<String>) -> Result<Self> {
        Ok(Self {
            namespace: Namespace::default(),
            subject: Some(Subject::new(subject)?),
        })
    }

    /// The namespace-wide scope that holds shared knowledge (no subject).
    pub fn shared(namespace: impl Into<String>) -> Result<Self> {
        Ok(Self {
            namespace: Namespace::new(namespace)?,
            subject: None,
        })
    }

    /// Builds a scope from already validated parts.
    pub fn from_parts(namespace: Namespace, subject: Option<Subject>) -> Self {
        Self { namespace, subject }
    }

    /// The namespace.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The subject, `None` for the shared scope.
    pub fn subject(&self) -> Option<&Subject> {
        self.subject.as_ref()
    }

    /// The subject, or `InvalidInput` for the shared scope (for operations that need an owner).
    pub fn require_subject(&self, operation: &str) -> Result<&Subject> {
        self.subject.as_ref().ok_or_else(|| {
            MemoryError::invalid(format!("{operation} needs a scope with a subject"))
        })
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.subject {
            Some(subject) => write!(f, "{}/{}", self.namespace, subject),
            None => write!(f, "{}/*", self.namespace),
        }
    }
}
