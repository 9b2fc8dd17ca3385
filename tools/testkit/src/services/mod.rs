//! The one place test services come from, for the tests and for `cargo xtask` alike. Each
//! [`Service`] has one row in [`SERVICES`]: the variable that gives its URL, the machine's own
//! server where one usually listens, its image (built by `scripts/images.sh`) and its URL in
//! docker-compose.yml's stack.
//!
//! A test asks with [`locate`]:
//!
//! 1. the service's URL variable (`MNEMIX_TEST_POSTGRES_URL`, `MNEMIX_TEST_REDIS_URL`,
//!    `MNEMIX_TEST_REDIS_CLUSTER_URLS`, `MNEMIX_TEST_LIBSQL_URL`);
//! 2. with the `containers` feature and a reachable Docker engine, a container of its image
//!    started once per test process by testcontainers (without Docker this fails at once: the
//!    signal to skip);
//! 3. otherwise [`SetupError::Unreachable`]: a named skip, or a failure when
//!    `MNEMIX_TEST_REQUIRE` names the backend.
//!
//! `cargo xtask test` sets the URL variables first, with [`provision::provision`] (the
//! variable, the machine's own server, the compose stack, or a local binary on a spare port) or
//! [`provision::compose`] (the compose stack alone, [`compose::Stack`]).

pub mod compose;
pub mod provision;

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

/// The password the images are started with, here and in docker-compose.yml.
pub const PASSWORD: &str = "mnemix";

/// A service's image, as `scripts/images.sh` builds it (tag `dev`).
#[derive(Debug)]
pub struct Image {
    /// The image's name.
    pub name: &'static str,
    /// The port it serves in the container.
    pub port: u16,
    /// The environment variable that sets its password.
    pub password_var: &'static str,
    /// Its URL given the host port it is published on (`{port}`) and [`PASSWORD`]
    /// (`{password}`).
    pub url: &'static str,
}

/// Where a service comes from.
#[derive(Debug)]
pub struct Spec {
    /// The service.
    pub service: Service,
    /// The variable that gives its URL.
    pub var: &'static str,
    /// Where the machine's own server usually listens, and its URL there.
    pub local: Option<(u16, &'static str)>,
    /// Its image, for testcontainers.
    pub image: Option<Image>,
    /// Its URL in docker-compose.yml's stack (which publishes on these ports).
    pub compose: Option<&'static str>,
}

/// Every test service.
pub const SERVICES: &[Spec] = &[
    Spec {
        service: Service::Postgres,
        var: "MNEMIX_TEST_POSTGRES_URL",
        local: Some((5432, "postgres://postgres@127.0.0.1:5432/test")),
        image: Some(Image {
            name: "mnemix/postgres",
            port: 5432,
            password_var: "POSTGRES_PASSWORD",
            url: "postgres://postgres:{password}@127.0.0.1:{port}/test",
        }),
        compose: Some("postgres://postgres:mnemix@127.0.0.1:55432/test"),
    },
    Spec {
        service: Service::Redis,
        var: "MNEMIX_TEST_REDIS_URL",
        local: Some((6379, "redis://127.0.0.1:6379")),
        image: Some(Image {
            name: "mnemix/redis",
            port: 6379,
            password_var: "REDIS_PASSWORD",
            url: "redis://:{password}@127.0.0.1:{port}",
        }),
        compose: Some("redis://:mnemix@127.0.0.1:56379"),
    },
    // A cluster is a throwaway of local nodes (see `provision`) or the compose stack's, whose
    // masters have a replica each (`REPLICAS_VAR`).
    Spec {
        service: Service::RedisCluster,
        var: "MNEMIX_TEST_REDIS_CLUSTER_URLS",
        local: None,
        image: None,
        compose: Some(
            "redis://:mnemix@127.0.0.1:57001,redis://:mnemix@127.0.0.1:57002,\
             redis://:mnemix@127.0.0.1:57003",
        ),
    },
    Spec {
        service: Service::Libsql,
        var: "MNEMIX_TEST_LIBSQL_URL",
        local: None,
        image: None,
        compose: None,
    },
];

/// How many replicas each master of the given cluster has (the cluster suite waits for them).
pub const REPLICAS_VAR: &str = "MNEMIX_TEST_REDIS_REPLICAS";

impl Service {
    /// Its row in [`SERVICES`].
    pub fn spec(self) -> &'static Spec {
        &SERVICES[self.row()]
    }

    /// The index of its row in [`SERVICES`].
    fn row(self) -> usize {
        SERVICES
            .iter()
            .position(|spec| spec.service == self)
            .expect("every service has a row")
    }

    /// The variable that gives its URL.
    pub fn env_var(self) -> &'static str {
        self.spec().var
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
        // Only a service with an image can start as a container; naming the feature elsewhere
        // misleads.
        let hint = if service.spec().image.is_some() {
            " (and the `containers` feature is off)"
        } else {
            ""
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

    use super::{Image, Service, CONTAINER_LABEL, PASSWORD, SERVICES};

    type Started = Mutex<Result<(Container<GenericImage>, String), String>>;

    /// A container per service, living as long as the test process (shared by all scenarios).
    static STARTED: [OnceLock<Started>; SERVICES.len()] =
        [const { OnceLock::new() }; SERVICES.len()];

    /// `image` started with its password and healthy (each image has a HEALTHCHECK).
    fn start_image(image: &Image) -> Result<(Container<GenericImage>, String), String> {
        let container = GenericImage::new(image.name, "dev")
            .with_exposed_port(image.port.tcp())
            .with_wait_for(WaitFor::healthcheck())
            .with_env_var(image.password_var, PASSWORD)
            .with_label(CONTAINER_LABEL, "containers")
            .start()
            .map_err(|e| format!("{}:dev (built by scripts/images.sh): {e}", image.name))?;
        let host_port = container
            .get_host_port_ipv4(image.port)
            .map_err(|e| e.to_string())?;
        let url = image
            .url
            .replace("{password}", PASSWORD)
            .replace("{port}", &host_port.to_string());
        Ok((container, url))
    }

    pub(super) fn start(service: Service) -> Result<String, String> {
        let Some(image) = &service.spec().image else {
            return Err(
                "no container recipe: provide the URL (cargo xtask test starts a local cluster)"
                    .to_owned(),
            );
        };
        // testcontainers' sync runner blocks on a runtime of its own, which panics inside the
        // test's runtime ("Cannot start a runtime from within a runtime"): it starts the
        // container on a thread with no runtime.
        let started = || {
            std::thread::scope(|scope| {
                scope
                    .spawn(|| start_image(image))
                    .join()
                    .unwrap_or_else(|_| Err(format!("starting {} panicked", image.name)))
            })
        };
        STARTED[service.row()]
            .get_or_init(|| Mutex::new(started()))
            .lock()
            .map_err(|e| e.to_string())?
            .as_ref()
            .map(|(_, url)| url.clone())
            .map_err(Clone::clone)
    }
}

/// The label on every container the tests start: a static is never dropped, so its container
/// outlives the test process; `cargo xtask test --compose` removes them by this label.
pub const CONTAINER_LABEL: &str = "mnemix.tests";

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
