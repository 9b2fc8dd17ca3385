//! Finding or starting, before the tests run, the services they can use (`cargo xtask test`):
//! given URL → the machine's own server → docker-compose.yml's stack ([`super::compose`]) →
//! local binary on a spare port in a temp dir. A Redis Cluster is always a throwaway: three
//! local `redis-server` nodes joined by `redis-cli --cluster create`. Whatever is found is
//! passed to the tests as their `MNEMIX_TEST_*` variables ([`super::SERVICES`]); what is not
//! found makes those tests named skips (or failures under `MNEMIX_TEST_REQUIRE`).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Service, SERVICES};

/// The workspace's root (this crate lives in `tools/services`).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the services crate lives in tools/ of the workspace")
        .to_path_buf()
}

/// Cargo's target directory: `CARGO_TARGET_DIR`, or `target` in the workspace.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from)
}

/// Runs `command`, failing with the command shown when it does not succeed.
pub fn run(mut command: Command) -> Result<(), String> {
    let shown = format!("{command:?}");
    let status = command
        .status()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed ({status})"))
    }
}

/// Services found or started; started ones stop when this is dropped.
#[derive(Default)]
pub struct Provisioned {
    /// `(variable, url)` pairs for the tests.
    pub urls: Vec<(&'static str, String)>,
    children: Vec<Child>,
    temp_dirs: Vec<std::path::PathBuf>,
    /// The compose stack, when this started it (down when dropped).
    stack: Option<super::compose::Stack>,
}

impl Drop for Provisioned {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for dir in &self.temp_dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn listening(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok()
}

fn spare_port() -> Option<u16> {
    TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()
        .map(|a| a.port())
}

/// Starts a persistence-free `redis-server` on `port` in a temp dir of its own, with `extra`
/// arguments; it stops, and the dir goes, when `provisioned` is dropped.
fn spawn_redis(provisioned: &mut Provisioned, port: u16, extra: &[&str]) -> Option<()> {
    let dir = std::env::temp_dir().join(format!("mnemix-xtask-redis-{port}"));
    std::fs::create_dir_all(&dir).ok()?;
    let port = port.to_string();
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(extra)
        .current_dir(&dir)
        .stdout(Stdio::null())
        .spawn()
        .ok()?;
    provisioned.children.push(child);
    provisioned.temp_dirs.push(dir);
    Some(())
}

/// Waits up to 5 s for every port to accept connections.
fn wait_listening(ports: &[u16]) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !ports.iter().all(|p| listening(*p)) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// Starts `redis-server` on a spare port in a temp dir, if the binary exists.
fn local_redis(provisioned: &mut Provisioned) -> Option<String> {
    let port = spare_port()?;
    spawn_redis(provisioned, port, &[])?;
    wait_listening(&[port]).then(|| format!("redis://127.0.0.1:{port}"))
}

/// Starts a 3-master Redis Cluster (no replicas) from the local `redis-server` and `redis-cli`
/// on spare ports in temp dirs; returns its seed URLs, comma-separated. The nodes stop, and
/// their dirs go, when `provisioned` is dropped.
fn local_redis_cluster(provisioned: &mut Provisioned) -> Option<String> {
    let mut nodes = Vec::new();
    for _ in 0..3 {
        let (port, bus) = (spare_port()?, spare_port()?);
        let bus = bus.to_string();
        let cluster = [
            "--cluster-enabled",
            "yes",
            "--cluster-port",
            &bus,
            "--cluster-config-file",
            "nodes.conf",
        ];
        spawn_redis(provisioned, port, &cluster)?;
        nodes.push(port);
    }
    if !wait_listening(&nodes) {
        return None;
    }
    let addresses: Vec<String> = nodes.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let created = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(&addresses)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !created {
        return None;
    }
    // Every node must agree that all slots are served before tests start.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ok = nodes.iter().all(|p| {
            Command::new("redis-cli")
                .args(["-p", &p.to_string(), "cluster", "info"])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("cluster_state:ok"))
        });
        if ok {
            break;
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(
        addresses
            .iter()
            .map(|a| format!("redis://{a}"))
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// The machine's own PostgreSQL has no pgvector until `scripts/pgvector.sh` builds it (Debian
/// bookworm does not package it); run the script when the extension is missing and this is a
/// Debian PostgreSQL we may install into.
fn ensure_local_pgvector() {
    let Ok(versions) = std::fs::read_dir("/etc/postgresql") else {
        return;
    };
    let missing = versions.flatten().any(|v| {
        let control = format!(
            "/usr/share/postgresql/{}/extension/vector.control",
            v.file_name().to_string_lossy()
        );
        !std::path::Path::new(&control).exists()
    });
    if missing {
        eprintln!("xtask: pgvector missing for the local PostgreSQL; running scripts/pgvector.sh");
        let status = Command::new("bash")
            .arg("scripts/pgvector.sh")
            .current_dir(workspace_root())
            .status();
        if !status.is_ok_and(|s| s.success()) {
            eprintln!("xtask: scripts/pgvector.sh failed: vector scenarios on postgres will skip");
        }
    }
}

impl Provisioned {
    /// The compose stack, when it serves these tests.
    pub fn stack(&self) -> Option<&super::compose::Stack> {
        self.stack.as_ref()
    }
}

/// docker-compose.yml's stack, built and brought up healthy, serving every service it has
/// (down when the result is dropped).
pub fn compose() -> Result<Provisioned, String> {
    let mut provisioned = Provisioned::default();
    provisioned.stack = Some(super::compose::Stack::up()?);
    for (var, url) in super::compose::urls() {
        eprintln!("xtask: {var} = {url} (docker compose)");
        provisioned.urls.push((var, url));
    }
    Ok(provisioned)
}

/// Finds or starts every service it can and says where each came from.
pub fn provision() -> Provisioned {
    let mut provisioned = Provisioned::default();
    let mut missing = Vec::new();
    for spec in SERVICES {
        if let Some(url) = std::env::var(spec.var)
            .ok()
            .filter(|u| !u.trim().is_empty())
        {
            eprintln!("xtask: {} given: {url}", spec.var);
            provisioned.urls.push((spec.var, url));
        } else if let Some((port, url)) = spec.local.filter(|(port, _)| listening(*port)) {
            if spec.service == Service::Postgres {
                ensure_local_pgvector();
            }
            eprintln!(
                "xtask: {} = {url} (running local service on {port})",
                spec.var
            );
            provisioned.urls.push((spec.var, url.to_owned()));
        } else {
            missing.push(spec);
        }
    }
    // The stack only for a server it has and the machine does not run (a cluster is quicker
    // made from local nodes).
    let from_stack = |spec: &super::Spec| spec.local.is_some() && spec.compose.is_some();
    if missing.iter().any(|spec| from_stack(spec)) && super::compose::engine() {
        match super::compose::Stack::up() {
            Ok(stack) => {
                provisioned.stack = Some(stack);
                for spec in missing.iter().filter(|spec| from_stack(spec)) {
                    let url = spec.compose.expect("filtered on it");
                    eprintln!("xtask: {} = {url} (docker compose)", spec.var);
                    provisioned.urls.push((spec.var, url.to_owned()));
                }
                missing.retain(|spec| !from_stack(spec));
            }
            Err(why) => eprintln!("xtask: the compose stack did not come up: {why}"),
        }
    }
    for spec in missing {
        let started = match spec.service {
            Service::Redis => local_redis(&mut provisioned),
            Service::RedisCluster => local_redis_cluster(&mut provisioned),
            Service::Postgres | Service::Libsql => None,
        };
        match started {
            Some(url) => {
                eprintln!("xtask: {} = {url} (local binaries, temp dirs)", spec.var);
                provisioned.urls.push((spec.var, url));
            }
            None => eprintln!(
                "xtask: {} not available: its tests are named skips",
                spec.var
            ),
        }
    }
    provisioned
}
