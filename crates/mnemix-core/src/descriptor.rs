//! How a backend is found by URL. A backend crate exports a [`Descriptor`]: its name, the URL
//! schemes it opens and how to open one from an [`OpenRequest`]. `mnemix::open(url)` takes the
//! descriptor whose scheme the URL has, among the backends compiled in and those registered at
//! run time (`mnemix::register`), so a third party's adapter is opened by URL like ours.
//!
//! ```
//! use std::sync::Arc;
//! use mnemix_core::descriptor::{BoxOpen, Descriptor, OpenRequest};
//! use mnemix_core::{InMemoryBackend, MemoryBackend};
//!
//! fn open(request: OpenRequest) -> BoxOpen {
//!     Box::pin(async move {
//!         let backend: Arc<dyn MemoryBackend> =
//!             Arc::new(InMemoryBackend::with_clock(request.clock().clone()));
//!         Ok(backend)
//!     })
//! }
//!
//! /// `scratch://`: a store of this program's own.
//! pub const SCRATCH: Descriptor = Descriptor::new("scratch", &["scratch"], "scratch://", open);
//! assert!(SCRATCH.opens("scratch://anything"));
//! assert!(!SCRATCH.opens("sqlite://scratch.db"));
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::MemoryBackend;
use crate::error::Result;
use crate::time::{Clock, SystemClock};

/// What a descriptor's `open` returns: the backend, not yet behind the front layer (the caller
/// puts it there).
pub type BoxOpen = Pin<Box<dyn Future<Output = Result<Arc<dyn MemoryBackend>>> + Send>>;

/// A backend as the front door knows it.
#[derive(Clone, Copy)]
pub struct Descriptor {
    name: &'static str,
    schemes: &'static [&'static str],
    url_forms: &'static str,
    open: fn(OpenRequest) -> BoxOpen,
}

impl std::fmt::Debug for Descriptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Descriptor")
            .field("name", &self.name)
            .field("schemes", &self.schemes)
            .finish_non_exhaustive()
    }
}

impl Descriptor {
    /// A backend called `name` (as in its `backend_name`), opening URLs of `schemes` (the text
    /// before the first `:`), whose forms `url_forms` shows in messages (`"sqlite://FILE"`).
    pub const fn new(
        name: &'static str,
        schemes: &'static [&'static str],
        url_forms: &'static str,
        open: fn(OpenRequest) -> BoxOpen,
    ) -> Self {
        Self {
            name,
            schemes,
            url_forms,
            open,
        }
    }

    /// The backend's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The URL schemes it opens.
    pub fn schemes(&self) -> &'static [&'static str] {
        self.schemes
    }

    /// The URL forms it opens, for messages.
    pub fn url_forms(&self) -> &'static str {
        self.url_forms
    }

    /// Whether `url`'s scheme is one of this backend's.
    pub fn opens(&self, url: &str) -> bool {
        self.schemes.contains(&scheme_of(url))
    }

    /// Opens the backend `request` names (connecting, and migrating its schema where it has
    /// one).
    pub fn open(&self, request: OpenRequest) -> BoxOpen {
        (self.open)(request)
    }
}

/// A URL's scheme: the text before its first `:` (`sqlite` of `sqlite::memory:`, `file` of
/// `file:x.db`), or the whole text when it has none.
pub fn scheme_of(url: &str) -> &str {
    url.split_once(':').map_or(url, |(scheme, _)| scheme)
}

/// What opening a store needs beyond its URL. Backends read what applies to them and ignore
/// the rest.
#[derive(Clone)]
#[non_exhaustive]
pub struct OpenRequest {
    url: String,
    clock: Arc<dyn Clock>,
    timeout: Option<Duration>,
    create_if_missing: bool,
    auth_token: Option<String>,
}

impl std::fmt::Debug for OpenRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenRequest")
            .field("url", &crate::url::redacted(&self.url))
            .field("timeout", &self.timeout)
            .field("create_if_missing", &self.create_if_missing)
            .field("auth_token", &self.auth_token.as_ref().map(|_| "***"))
            .finish_non_exhaustive()
    }
}

impl OpenRequest {
    /// A request for `url` on the system clock, with the default server timeout
    /// ([`DEFAULT_SERVER_TIMEOUT`](crate::DEFAULT_SERVER_TIMEOUT)), creating a missing file.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            clock: Arc::new(SystemClock),
            timeout: Some(crate::DEFAULT_SERVER_TIMEOUT),
            create_if_missing: true,
            auth_token: None,
        }
    }

    /// What decides "now" for timestamps and expiry.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// How long a server backend waits on a silent server (`None`: as long as the connection
    /// stays open).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether an embedded database file that does not exist is created (with `false` it is
    /// `NotFound` naming the path).
    #[must_use]
    pub fn with_create_if_missing(mut self, create: bool) -> Self {
        self.create_if_missing = create;
        self
    }

    /// A credential the URL does not carry (a remote libSQL database's auth token).
    #[must_use]
    pub fn with_auth_token(mut self, token: Option<String>) -> Self {
        self.auth_token = token;
        self
    }

    /// The URL, whole.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What decides "now".
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// How long a server backend waits on a silent server.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Whether a missing embedded database file is created.
    pub fn create_if_missing(&self) -> bool {
        self.create_if_missing
    }

    /// The credential the URL does not carry, if one was given.
    pub fn auth_token(&self) -> Option<&str> {
        self.auth_token.as_deref()
    }
}
