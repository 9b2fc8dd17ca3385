//! Where a backend's test service comes from, in this order:
//!
//! 1. its URL variable (`MNEMIX_TEST_POSTGRES_URL`, `MNEMIX_TEST_REDIS_URL`,
//!    `MNEMIX_TEST_REDIS_CLUSTER_URLS`, `MNEMIX_TEST_LIBSQL_URL`);
//! 2. with the `containers` feature and a reachable Docker engine, a container started once per
//!    test process by testcontainers (without Docker this fails at once: the signal to skip);
//! 3. otherwise [`SetupError::Unreachable`]: a named skip, or a failure when
//!    `MNEMIX_TEST_REQUIRE` names the backend.
//!
//! `cargo xtask test` sets the URL variables for the services it provisions.

use mnemix_conformance::SetupError;

/// A service a backend's tests need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// PostgreSQL with pgvector.
    Postgres,
    /// A standalone Redis.
    Redis,
    /// A Redis Cluster (comma-separated seed URLs).
    RedisCluster,
    /// A remote libSQL server (sqld).
    Libsql,
}

impl Service {
    /// The variable that gives its URL.
    pub fn env_var(self) -> &'static str {
        match self {
            Self::Postgres => "MNEMIX_TEST_POSTGRES_URL",
            Self::Redis => "MNEMIX_TEST_REDIS_URL",
            Self::RedisCluster => "MNEMIX_TEST_REDIS_CLUSTER_URLS",
            Self::Libsql => "MNEMIX_TEST_LIBSQL_URL",
        }
    }
}

/// The service's URL, from its variable or a container; `Unreachable` says why neither worked.
pub fn locate(service: Service) -> Result<String, SetupError> {
    if let Some(url) = std::env::var(service.env_var())
        .ok()
        .filter(|u| !u.trim().is_empty())
    {
        return Ok(url);
    }
    #[cfg(feature = "containers")]
    {
        containers::start(service).map_err(|why| {
            SetupError::Unreachable(format!(
                "{} is unset and no container could start: {why}",
                service.env_var()
            ))
        })
    }
    #[cfg(not(feature = "containers"))]
    {
        // Only Postgres and Redis have a container recipe; naming the feature elsewhere misleads.
        let hint = match service {
            Service::Postgres | Service::Redis => " (and the `containers` feature is off)",
            Service::RedisCluster | Service::Libsql => "",
        };
        Err(SetupError::Unreachable(format!(
            "{} is unset{hint}",
            service.env_var()
        )))
    }
}

#[cfg(feature = "containers")]
mod containers {
    use std::sync::{Mutex, OnceLock};

    use testcontainers::core::{IntoContainerPort, WaitFor};
    use testcontainers::runners::SyncRunner;
    use testcontainers::{Container, GenericImage, ImageExt};

    use super::Service;

    type Started = Mutex<Result<(Container<GenericImage>, String), String>>;

    /// The label on every container started here: a static is never dropped, so its container
    /// outlives the test process; `cargo xtask test --compose` removes them by this label.
    pub const LABEL: &str = "agent-memory.tests";

    /// Containers live as long as the test process (one per service, shared by all scenarios).
    static POSTGRES: OnceLock<Started> = OnceLock::new();
    static REDIS: OnceLock<Started> = OnceLock::new();

    /// The password the images are started with (as docker-compose.yml's).
    const PASSWORD: &str = "mnemix";

    /// One of `scripts/images.sh`'s images, started with its password in `password_var` and
    /// healthy (each has a HEALTHCHECK).
    fn start_image(
        name: &str,
        port: u16,
        password_var: &str,
        url: impl Fn(u16) -> String,
    ) -> Started {
        Mutex::new((|| {
            let container = GenericImage::new(name, "dev")
                .with_exposed_port(port.tcp())
                .with_wait_for(WaitFor::healthcheck())
                .with_env_var(password_var, PASSWORD)
                .with_label(LABEL, "containers")
                .start()
                .map_err(|e| format!("{name}:dev (built by scripts/images.sh): {e}"))?;
            let host_port = container
                .get_host_port_ipv4(port)
                .map_err(|e| e.to_string())?;
            Ok((container, url(host_port)))
        })())
    }

    pub(super) fn start(service: Service) -> Result<String, String> {
        let slot = match service {
            Service::Postgres => POSTGRES.get_or_init(|| {
                start_image("mnemix/postgres", 5432, "POSTGRES_PASSWORD", |port| {
                    format!("postgres://postgres:{PASSWORD}@127.0.0.1:{port}/test")
                })
            }),
            Service::Redis => REDIS.get_or_init(|| {
                start_image("mnemix/redis", 6379, "REDIS_PASSWORD", |port| {
                    format!("redis://:{PASSWORD}@127.0.0.1:{port}")
                })
            }),
            Service::RedisCluster | Service::Libsql => return Err(
                "no container recipe: provide the URL (cargo xtask test starts a local cluster)"
                    .to_owned(),
            ),
        };
        slot.lock()
            .map_err(|e| e.to_string())?
            .as_ref()
            .map(|(_, url)| url.clone())
            .map_err(Clone::clone)
    }
}

/// The all-MiniLM-L6-v2 model directory the local-embedder tests use: `MNEMIX_TEST_MINILM_DIR`,
/// else `target/models/all-MiniLM-L6-v2` (`cargo xtask models` fetches it). Without it, `None`
/// after printing a named skip for `tests`, or a failure when `MNEMIX_TEST_REQUIRE` names
/// `minilm`.
pub fn minilm_dir(tests: &str) -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("MNEMIX_TEST_MINILM_DIR").map_or_else(
        || {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/models/all-MiniLM-L6-v2")
        },
        std::path::PathBuf::from,
    );
    if dir.join("model.safetensors").exists() {
        return Some(dir);
    }
    let reason = format!(
        "no all-MiniLM-L6-v2 at {} (run `cargo xtask models` or set MNEMIX_TEST_MINILM_DIR)",
        dir.display()
    );
    mnemix_conformance::skip("minilm", tests, &reason);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_url_wins() {
        // Libsql has no container recipe, so only the variable can make it reachable.
        std::env::set_var("MNEMIX_TEST_LIBSQL_URL", "libsql://example.invalid");
        assert_eq!(
            locate(Service::Libsql).ok().as_deref(),
            Some("libsql://example.invalid")
        );
        std::env::set_var("MNEMIX_TEST_LIBSQL_URL", " ");
        assert!(matches!(
            locate(Service::Libsql),
            Err(SetupError::Unreachable(_))
        ));
        std::env::remove_var("MNEMIX_TEST_LIBSQL_URL");
    }
}
