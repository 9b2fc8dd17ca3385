//! Where a test's service comes from: the table of services and how `cargo xtask` provides
//! them are `mnemix-services`' (re-exported here); a test asks with [`locate`]:
//!
//! 1. the service's URL variable (`MNEMIX_TEST_POSTGRES_URL`, `MNEMIX_TEST_REDIS_URL`,
//!    `MNEMIX_TEST_REDIS_CLUSTER_URLS`, `MNEMIX_TEST_LIBSQL_URL`);
//! 2. with the `containers` feature and a reachable Docker engine, a container of its image
//!    started once per test process by testcontainers (without Docker this fails at once: the
//!    signal to skip);
//! 3. otherwise [`SetupError::Unreachable`]: a named skip, or a failure when
//!    `MNEMIX_TEST_REQUIRE` names the backend.

pub use mnemix_services::{
    compose, provision, Image, Service, Spec, CONTAINER_LABEL, PASSWORD, REPLICAS_VAR, SERVICES,
};

use mnemix_conformance::SetupError;

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
            "{} is unset{hint}: {}",
            service.env_var(),
            service.spec().otherwise
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
        let spec = service.spec();
        let Some(image) = &spec.image else {
            return Err(format!("no container recipe: {}", spec.otherwise));
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
