//! The one error type every contract returns.

use std::error::Error as StdError;

/// A boxed error from a driver or other source, kept for `source()` chains.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Result alias used by every contract.
pub type Result<T, E = MemoryError> = std::result::Result<T, E>;

/// What went wrong, as a kind callers can branch on.
///
/// Backends keep their own private error types and map them into this enum, so callers never
/// parse driver messages. New kinds may be added, hence `#[non_exhaustive]`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// The record does not exist *in the caller's scope* (another tenant's record is also `NotFound`).
    #[error("{entity} not found: {id}")]
    NotFound {
        /// What kind of record was looked up (`"conversation"`, `"fact"`, …).
        entity: &'static str,
        /// The id that was looked up.
        id: String,
    },
    /// A record with this id already exists in the scope.
    #[error("{entity} already exists: {id}")]
    AlreadyExists {
        /// What kind of record.
        entity: &'static str,
        /// The id that is taken.
        id: String,
    },
    /// A precondition (expected seq, expected revision or version) or an idempotency check failed.
    #[error("conflict: {reason}")]
    Conflict {
        /// Human-readable explanation.
        reason: String,
        /// The current value of the fenced counter (last seq, revision, version), when there is one.
        current: Option<u64>,
    },
    /// The input is malformed or violates a documented limit; nothing was written.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The backend does not implement this operation (see its [`Capabilities`](crate::Capabilities)).
    #[error("{operation} is not supported by the {backend} backend")]
    Unsupported {
        /// The operation that was refused.
        operation: &'static str,
        /// The backend's name.
        backend: &'static str,
    },
    /// The backend could not be reached, did not answer in time, or asked to retry; the
    /// operation may be retried. Its outcome is unknown: a write may have been applied (its
    /// request arrived, its answer did not). Retrying is safe for the writes the front layer
    /// retries itself (see [`RetryPolicy`](crate::RetryPolicy): `append` is idempotent by
    /// message id); read back before repeating any other.
    #[error("{backend} backend unavailable: {source}")]
    Unavailable {
        /// The backend's name.
        backend: &'static str,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
    /// A model the engine calls failed: an embedder, summarizer or fact extractor (a remote
    /// API after its retries, a local model that would not load).
    #[error("{component} failed: {source}")]
    Model {
        /// What failed (`"embedder"`, `"summarizer"`, `"fact extractor"`, …).
        component: &'static str,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
    /// Any other failure inside the backend.
    #[error("{backend} backend error: {source}")]
    Backend {
        /// The backend's name.
        backend: &'static str,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
}

impl MemoryError {
    /// A value `backend` stored that does not decode (the data was edited by something else):
    /// a [`Backend`](Self::Backend) error naming `what` and why.
    ///
    /// ```
    /// use mnemix_core::MemoryError;
    /// let e = MemoryError::corrupt("sqlite", "metadata", "expected value at line 1");
    /// assert_eq!(
    ///     e.to_string(),
    ///     "sqlite backend error: stored metadata does not decode: expected value at line 1"
    /// );
    /// ```
    pub fn corrupt(backend: &'static str, what: &str, why: impl std::fmt::Display) -> Self {
        Self::Backend {
            backend,
            source: format!("stored {what} does not decode: {why}").into(),
        }
    }

    /// Whether retrying the same call may succeed (connection loss, serialization failure).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }

    /// Builds an [`MemoryError::InvalidInput`] from anything displayable.
    pub fn invalid(reason: impl Into<String>) -> Self {
        Self::InvalidInput(reason.into())
    }

    /// Builds a [`MemoryError::Model`].
    pub fn model(component: &'static str, source: impl Into<BoxError>) -> Self {
        Self::Model {
            component,
            source: source.into(),
        }
    }

    /// Builds a [`MemoryError::NotFound`].
    pub fn not_found(entity: &'static str, id: impl Into<String>) -> Self {
        Self::NotFound {
            entity,
            id: id.into(),
        }
    }

    /// Builds a [`MemoryError::Conflict`].
    pub fn conflict(reason: impl Into<String>, current: Option<u64>) -> Self {
        Self::Conflict {
            reason: reason.into(),
            current,
        }
    }

    /// True for [`MemoryError::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    /// True for [`MemoryError::Conflict`].
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict { .. })
    }

    /// True for [`MemoryError::InvalidInput`].
    pub fn is_invalid_input(&self) -> bool {
        matches!(self, Self::InvalidInput(_))
    }

    /// True for [`MemoryError::AlreadyExists`].
    pub fn is_already_exists(&self) -> bool {
        matches!(self, Self::AlreadyExists { .. })
    }

    /// True for [`MemoryError::Unsupported`].
    pub fn is_unsupported(&self) -> bool {
        matches!(self, Self::Unsupported { .. })
    }

    /// The fenced counter reported by a [`MemoryError::Conflict`], if any.
    pub fn current(&self) -> Option<u64> {
        match self {
            Self::Conflict { current, .. } => *current,
            _ => None,
        }
    }
}
