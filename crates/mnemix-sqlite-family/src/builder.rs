//! What both SQLite-family store builders set alike, written once: the [`Options`] both stores
//! are opened with, and the setters [`family_builder_setters!`](crate::family_builder_setters)
//! adds to a builder.

use std::time::Duration;

use crate::Synchronous;

/// How a SQLite-family store is opened, wherever its database lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `synchronous` of a file (default [`Synchronous::Normal`]).
    pub synchronous: Synchronous,
    /// How long a write waits for another process's write lock (default 5 s).
    pub busy_timeout: Duration,
    /// Reader connections of a file database (default: the number of CPUs, at least 2).
    pub readers: usize,
    /// Memory the vector matrices held for searches may take, and the held facts as much
    /// again (default 256 MiB).
    pub vector_cache_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        Self {
            synchronous: Synchronous::Normal,
            busy_timeout: Duration::from_secs(5),
            readers: cpus.max(2),
            vector_cache_bytes: 256 << 20,
        }
    }
}

/// Adds the setters both SQLite-family builders have to the builder whose `impl` block invokes
/// it: `url` (documented with the forms it is given; the builder's module has
/// `parse_url(&str) -> Result<Location, String>`), `path`, `in_memory`, `create_if_missing`,
/// `synchronous`, `busy_timeout`, `readers`, `vector_cache_bytes` and `clock`. The builder holds
/// `url_error: Option<String>`, `create_if_missing: bool`,
/// `clock: Arc<dyn Clock>` and a `config` with `location` (a `Location` with `File(PathBuf)`
/// and `Memory`) and `options` ([`Options`]).
#[macro_export]
macro_rules! family_builder_setters {
    (url = $url_forms:expr) => {
        #[doc = $url_forms]
        #[doc = ""]
        #[doc = "Anything else is reported by [`open`](Self::open)."]
        #[must_use]
        pub fn url(mut self, url: &str) -> Self {
            match parse_url(url) {
                Ok(location) => self.config.location = location,
                Err(e) => self.url_error = Some(e),
            }
            self
        }

        /// A database file (created, with its parent folders, when missing).
        #[must_use]
        pub fn path(mut self, path: impl Into<::std::path::PathBuf>) -> Self {
            self.config.location = Location::File(path.into());
            self
        }

        /// A private in-memory database, gone when the store is dropped.
        #[must_use]
        pub fn in_memory(mut self) -> Self {
            self.config.location = Location::Memory;
            self
        }

        /// Whether a missing database file is created, with its parent folders (the
        /// default); with `false`, opening a file that does not exist is `NotFound` naming the
        /// path, and nothing is created (what a command that only reads wants: a typo'd path
        /// is an error, not an empty store).
        #[must_use]
        pub fn create_if_missing(mut self, create: bool) -> Self {
            self.create_if_missing = create;
            self
        }

        /// `synchronous` of a file (default [`Synchronous::Normal`]).
        #[must_use]
        pub fn synchronous(mut self, synchronous: $crate::Synchronous) -> Self {
            self.config.options.synchronous = synchronous;
            self
        }

        /// How long a write waits for another process's write lock before failing with
        /// `Unavailable` (default 5 s).
        #[must_use]
        pub fn busy_timeout(mut self, timeout: ::std::time::Duration) -> Self {
            self.config.options.busy_timeout = timeout;
            self
        }

        /// How many reader connections a file database keeps (default: the number of CPUs,
        /// at least 2).
        #[must_use]
        pub fn readers(mut self, readers: usize) -> Self {
            self.config.options.readers = readers.max(1);
            self
        }

        /// Memory the vector matrices held for searches may take, texts included, before
        /// they are let go, and as much again for the subjects' facts held for recall by
        /// vector (default 256 MiB each; 0 holds none, and every search or recall with a
        /// vector reads its rows).
        #[must_use]
        pub fn vector_cache_bytes(mut self, bytes: usize) -> Self {
            self.config.options.vector_cache_bytes = bytes;
            self
        }

        /// The clock that decides "now" for timestamps, expiry and TTL (default: the system
        /// clock).
        #[must_use]
        pub fn clock(
            mut self,
            clock: ::std::sync::Arc<dyn $crate::__private::core::Clock>,
        ) -> Self {
            self.clock = clock;
            self
        }
    };
}
