//! docker-compose.yml's stack, for `cargo xtask test --compose`: starts `dockerd` when no engine
//! answers, builds the images (`scripts/images.sh`: no registry pull), brings the stack up,
//! waits until every service is healthy, and takes it down (volumes too) when dropped. Its URLs
//! are the `compose` column of [`SERVICES`](super::SERVICES).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The compose project's name, so that the stack never mixes with a user's own.
const PROJECT: &str = "mnemix-test";

/// The `MNEMIX_TEST_*` variables the stack answers, with its URLs; its cluster has a replica per
/// master, which the cluster suite waits for.
pub fn urls() -> Vec<(&'static str, String)> {
    let mut urls: Vec<(&'static str, String)> = super::SERVICES
        .iter()
        .filter_map(|spec| Some((spec.var, spec.compose?.to_owned())))
        .collect();
    urls.push((super::REPLICAS_VAR, "1".to_owned()));
    urls
}

/// The ports docker-compose.yml publishes, which must answer on loopback only.
const PUBLISHED: &[u16] = &[55432, 56379, 57001, 57002, 57003, 57004, 57005, 57006];

/// A running stack; dropping it takes it down.
pub struct Stack {
    compose: Vec<String>,
}

impl Drop for Stack {
    fn drop(&mut self) {
        let _ = self
            .command(&["down", "--volumes", "--remove-orphans"])
            .status();
    }
}

fn quiet(command: &mut Command) -> bool {
    command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether a Docker engine answers.
pub fn engine() -> bool {
    quiet(Command::new("docker").args(["info", "--format", "{{.ServerVersion}}"]))
}

/// Starts `dockerd` in the background when no engine answers, and waits for it (30 s).
fn ensure_engine() -> Result<(), String> {
    if engine() {
        return Ok(());
    }
    let log = super::provision::target_dir().join("dockerd.log");
    std::fs::create_dir_all(super::provision::target_dir()).map_err(|e| e.to_string())?;
    let log = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    Command::new("dockerd")
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("no Docker engine answers and dockerd cannot start: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !engine() {
        if Instant::now() > deadline {
            return Err("dockerd started but no engine answered within 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!("xtask: started dockerd (log in target/dockerd.log)");
    Ok(())
}

/// `docker compose` (v2) when the plugin is there, else Debian's `docker-compose` (1.29).
fn compose_command() -> Result<Vec<String>, String> {
    if quiet(Command::new("docker").args(["compose", "version"])) {
        return Ok(vec!["docker".into(), "compose".into()]);
    }
    if quiet(Command::new("docker-compose").arg("version")) {
        return Ok(vec!["docker-compose".into()]);
    }
    Err("neither `docker compose` nor `docker-compose` runs".into())
}

impl Stack {
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.compose[0]);
        command
            .args(&self.compose[1..])
            .args(["--project-name", PROJECT])
            .args(args)
            .current_dir(super::provision::workspace_root());
        command
    }

    /// Builds the images and brings the stack up, healthy.
    pub fn up() -> Result<Self, String> {
        ensure_engine()?;
        let stack = Self {
            compose: compose_command()?,
        };
        images(None)?;
        // A stack an interrupted run left behind would be restarted as it was, state and all:
        // start from nothing.
        let _ = stack
            .command(&["down", "--volumes", "--remove-orphans"])
            .status();
        super::provision::run(stack.command(&[
            "up",
            "--detach",
            "--force-recreate",
            "--renew-anon-volumes",
        ]))?;
        stack.wait_healthy(Duration::from_mins(2))?;
        eprintln!("xtask: the compose stack is up and healthy");
        loopback_only()?;
        passwords_required()?;
        Ok(stack)
    }

    fn wait_healthy(&self, limit: Duration) -> Result<(), String> {
        let output = self
            .command(&["ps", "-q"])
            .output()
            .map_err(|e| e.to_string())?;
        let ids: Vec<String> = String::from_utf8_lossy(&output.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        if ids.is_empty() {
            return Err("the compose stack has no containers".into());
        }
        let deadline = Instant::now() + limit;
        loop {
            let output = Command::new("docker")
                .args(["inspect", "--format", "{{.Name}} {{.State.Health.Status}}"])
                .args(&ids)
                .output()
                .map_err(|e| e.to_string())?;
            let states = String::from_utf8_lossy(&output.stdout).into_owned();
            if states.lines().all(|l| l.ends_with(" healthy")) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("not healthy after {limit:?}:\n{states}"));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The id of the container running `service`.
    pub fn container(&self, service: &str) -> Result<String, String> {
        let output = self
            .command(&["ps", "-q", service])
            .output()
            .map_err(|e| e.to_string())?;
        String::from_utf8_lossy(&output.stdout)
            .split_whitespace()
            .next()
            .map(str::to_owned)
            .ok_or_else(|| format!("the compose stack runs no {service}"))
    }

    /// Runs docker-compose.yml's `app` service (the CLI in an image, on the compose network)
    /// from the `mnemix` binary at `cli`.
    pub fn run_app(&self, cli: &Path) -> Result<(), String> {
        images(Some(cli))?;
        super::provision::run(self.command(&["run", "--rm", "app"]))
    }
}

/// Checks that no published port answers on the machine's other addresses (`hostname -I`):
/// the stack must not be reachable from the network it is on.
fn loopback_only() -> Result<(), String> {
    let output = Command::new("hostname")
        .arg("-I")
        .output()
        .map_err(|e| format!("hostname -I: {e}"))?;
    let addresses: Vec<std::net::IpAddr> = String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .filter_map(|a| a.parse().ok())
        .filter(|a: &std::net::IpAddr| !a.is_loopback())
        .collect();
    if addresses.is_empty() {
        eprintln!("xtask: SKIP the loopback-only check: this machine has no other address");
        return Ok(());
    }
    for address in &addresses {
        for port in PUBLISHED {
            let at = std::net::SocketAddr::new(*address, *port);
            if std::net::TcpStream::connect_timeout(&at, Duration::from_secs(2)).is_ok() {
                return Err(format!(
                    "the compose stack answers on {at}: it must publish on 127.0.0.1 only"
                ));
            }
        }
    }
    eprintln!(
        "xtask: the compose stack answers on none of {} other address(es) of this machine",
        addresses.len()
    );
    Ok(())
}

/// Checks that a client without the password gets nothing: PostgreSQL asks for it (any
/// answer to the startup message but "authentication ok"), Redis answers `NOAUTH`.
fn passwords_required() -> Result<(), String> {
    use std::io::{Read as _, Write as _};
    let connect = |port: u16| {
        let at = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let stream = std::net::TcpStream::connect_timeout(&at, Duration::from_secs(5))
            .map_err(|e| format!("{at}: {e}"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(stream)
    };
    // A v3 startup message as user postgres; AuthenticationOk is 'R', length 8, code 0.
    let mut postgres = connect(55432)?;
    let body = b"\0\x03\0\0user\0postgres\0database\0test\0\0";
    let mut startup = u32::try_from(body.len() + 4)
        .expect("short")
        .to_be_bytes()
        .to_vec();
    startup.extend_from_slice(body);
    postgres.write_all(&startup).map_err(|e| e.to_string())?;
    let mut answer = [0u8; 9];
    postgres
        .read_exact(&mut answer)
        .map_err(|e| e.to_string())?;
    if answer == [b'R', 0, 0, 0, 8, 0, 0, 0, 0] {
        return Err("the compose PostgreSQL lets a client in without a password".into());
    }
    for port in [56379, 57001] {
        let mut redis = connect(port)?;
        redis.write_all(b"PING\r\n").map_err(|e| e.to_string())?;
        let mut answer = [0u8; 7];
        redis.read_exact(&mut answer).map_err(|e| e.to_string())?;
        if &answer != b"-NOAUTH" {
            return Err(format!(
                "the compose Redis on {port} answers a client without the password: {}",
                String::from_utf8_lossy(&answer)
            ));
        }
    }
    eprintln!("xtask: the compose services refuse a client without the password");
    Ok(())
}

/// `scripts/images.sh`, with the CLI image too when given its binary.
fn images(cli: Option<&Path>) -> Result<(), String> {
    let mut command = Command::new("bash");
    command
        .arg("scripts/images.sh")
        .current_dir(super::provision::workspace_root());
    if let Some(cli) = cli {
        command.arg("--cli").arg(cli);
    }
    super::provision::run(command)
}

/// Removes every container labelled `label` (those testcontainers started and a test process's
/// statics kept alive to its end).
pub fn remove_labelled(label: &str) {
    let Ok(output) = Command::new("docker")
        .args(["ps", "--all", "--quiet", "--filter"])
        .arg(format!("label={label}"))
        .output()
    else {
        return;
    };
    let ids: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    if !ids.is_empty() {
        let _ = quiet(Command::new("docker").args(["rm", "--force"]).args(&ids));
    }
}
