//! The repository's test services, for `cargo xtask` and the tests alike. Each [`Service`] has
//! one row in [`SERVICES`]: the variable that gives its URL, the machine's own server where one
//! usually listens, its image (built by `scripts/images.sh`) and its URL in
//! docker-compose.yml's stack.
//!
//! `cargo xtask test` sets the URL variables before the tests run, with [`provision::provision`]
//! (the variable, the machine's own server, the compose stack, or a local binary on a spare
//! port) or [`provision::compose`] (the compose stack alone, [`compose::Stack`]). A test asks
//! with `mnemix_testkit::services::locate`, which adds testcontainers and the named skip.
//!
//! Standard library only: xtask depends on this crate, not on the suite, so that it builds in
//! seconds (`docs/decisions/ci-in-thirty-minutes.md`).

pub mod compose;
pub mod provision;

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
    /// What gives a URL when the variable is unset and no container can start: said in the
    /// service's named skip.
    pub otherwise: &'static str,
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
        otherwise: "cargo xtask test finds the local server on port 5432 or the compose stack",
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
        otherwise: "cargo xtask test finds the local server on port 6379 or the compose stack",
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
        otherwise:
            "cargo xtask test starts a local cluster with redis-server, or uses the compose \
                    stack's",
    },
    Spec {
        service: Service::Libsql,
        var: "MNEMIX_TEST_LIBSQL_URL",
        local: None,
        image: None,
        compose: None,
        otherwise: "a libSQL server (sqld) of your own, and the `remote` feature: nothing here \
                    starts one",
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
    pub fn row(self) -> usize {
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

/// The label on every container the tests start: a static is never dropped, so its container
/// outlives the test process; `cargo xtask test --compose` removes them by this label.
pub const CONTAINER_LABEL: &str = "mnemix.tests";

/// Whether `MNEMIX_TEST_REQUIRE` (comma-separated names, or `all`) names `what`: the rule of
/// `mnemix_conformance::is_required`, which the tests use, for the tasks that do not link the
/// suite.
pub fn is_required(what: &str) -> bool {
    std::env::var("MNEMIX_TEST_REQUIRE").is_ok_and(|list| {
        list.split(',')
            .map(str::trim)
            .any(|name| name == what || name == "all")
    })
}
