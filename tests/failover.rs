//! A Redis Cluster master killed under load and its replica promoted, three times: four
//! writers and two readers on one conversation (the history checker's workload) while the
//! replica of the conversation's slot is stalled (SIGSTOP, its link cut) for 300 ms, its
//! master SIGKILLed, the replica let go on and promoted, and the killed node started again (it
//! rejoins as the new master's replica). Whatever the master answered during the stall its
//! replica never received: without `replicas` the failover loses those writes, and the checker
//! says so. The store waits for one replica (`replicas=1`): nothing a caller was told, written
//! or read, may be taken back by the failover. When the run ends, [`mnemix_conformance::history::check`] must find no
//! acknowledged append lost, none twice, no partial batch, every read a prefix of the final
//! order.
//!
//! It needs a cluster it may kill nodes of: `MNEMIX_FAILOVER_CLUSTER_CONTAINER` names the
//! compose stack's cluster container (three masters, a replica each) behind
//! `MNEMIX_TEST_REDIS_CLUSTER_URLS` (`cargo xtask reliability` sets both); without it this is
//! a named skip. `MNEMIX_FAULTS_REPORT=FILE` appends its figures: the acknowledged appends
//! and each failover's time, from the kill to a cluster that serves the slot again.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mnemix::{NewConversation, OpenOptions, RetryPolicy, Scope};
use mnemix_conformance::history::{record_until, Workload};

const FAILOVERS: usize = 3;

/// `docker exec CONTAINER ARGS…`'s output; panics when it fails.
fn exec(container: &str, args: &[&str]) -> String {
    let output = Command::new("docker")
        .arg("exec")
        .arg(container)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run docker exec {args:?}: {e}"));
    assert!(
        output.status.success(),
        "docker exec {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `redis-cli -p PORT ARGS…` inside the container, authenticated; `None` when it fails.
fn cli(container: &str, port: u16, args: &[&str]) -> Option<String> {
    let output = Command::new("docker")
        .args(["exec", container, "bash", "-c"])
        .arg(r#"REDISCLI_AUTH=$REDIS_PASSWORD exec redis-cli -p "$0" "$@""#)
        .arg(port.to_string())
        .args(args)
        .output()
        .ok()?;
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    (output.status.success() && !out.starts_with("Could not connect")).then_some(out)
}

/// One line of `CLUSTER NODES`: `id ip:port@bus flags master ping pong epoch link slots…`.
struct Node {
    id: String,
    /// Its port in the container (the announced one, less the announce offset).
    port: u16,
    flags: String,
    /// Its master's id (`-` for a master).
    master: String,
    /// The slot ranges it serves, inclusive.
    slots: Vec<(u16, u16)>,
}

impl Node {
    fn parse(line: &str, offset: u16) -> Option<Self> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let announced: u16 = fields
            .get(1)?
            .split('@')
            .next()?
            .rsplit(':')
            .next()?
            .parse()
            .ok()?;
        let slots = fields
            .get(8..)
            .unwrap_or_default()
            .iter()
            .filter_map(|range| {
                let (from, to) = range.split_once('-').unwrap_or((range, range));
                Some((from.parse().ok()?, to.parse().ok()?))
            })
            .collect();
        Some(Self {
            id: (*fields.first()?).to_owned(),
            port: announced - offset,
            flags: (*fields.get(2)?).to_owned(),
            master: (*fields.get(3)?).to_owned(),
            slots,
        })
    }

    fn is(&self, flag: &str) -> bool {
        self.flags.split(',').any(|f| f == flag)
    }

    fn serves(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .any(|(from, to)| (*from..=*to).contains(&slot))
    }
}

/// The cluster inside its container: its nodes' ports there, and what the host adds to them.
struct Cluster {
    container: String,
    ports: Vec<u16>,
    offset: u16,
}

impl Cluster {
    fn new(container: String) -> Self {
        let env = |name: &str| exec(&container, &["printenv", name]).trim().to_owned();
        let ports = env("PORTS")
            .split_whitespace()
            .map(|p| p.parse().expect("a port"))
            .collect();
        let offset = env("ANNOUNCE_OFFSET").parse().expect("an offset");
        Self {
            container,
            ports,
            offset,
        }
    }

    /// The cluster as the node on `port` sees it (`CLUSTER NODES`), or any live node when
    /// `port` is `None`.
    fn nodes(&self, port: Option<u16>) -> Option<Vec<Node>> {
        let listing = match port {
            Some(port) => cli(&self.container, port, &["cluster", "nodes"])?,
            None => self
                .ports
                .iter()
                .find_map(|port| cli(&self.container, *port, &["cluster", "nodes"]))?,
        };
        Some(
            listing
                .lines()
                .filter_map(|line| Node::parse(line, self.offset))
                .collect(),
        )
    }

    /// The port (in the container) of the live master serving `slot`, asked of any live node.
    fn master_of(&self, slot: u16) -> Option<u16> {
        self.nodes(None)?
            .into_iter()
            .find(|n| n.is("master") && !n.is("fail") && !n.is("fail?") && n.serves(slot))
            .map(|n| n.port)
    }

    /// The port of the replica of the master on `port`.
    fn replica_of(&self, port: u16) -> Option<u16> {
        let nodes = self.nodes(Some(port))?;
        let me = nodes.iter().find(|n| n.is("myself"))?;
        nodes
            .iter()
            .find(|n| n.is("slave") && n.master == me.id)
            .map(|n| n.port)
    }

    fn slot(&self, key: &str) -> u16 {
        cli(&self.container, self.ports[0], &["cluster", "keyslot", key])
            .and_then(|s| s.trim().parse().ok())
            .expect("the key's slot")
    }

    /// Stops the replica of the master on `port` (SIGSTOP) and cuts its link, SIGKILLs the
    /// master 300 ms later and lets the replica go on: what the master acknowledged in those
    /// 300 ms, its replica never received. Then waits for the replica to serve `slot`
    /// with the cluster `ok`, starts the killed node again and waits until it replicates.
    /// Returns the failover's time, from the kill.
    fn fail_over(&self, port: u16, slot: u16) -> Duration {
        let replica = self.replica_of(port).expect("the master has a replica");
        let signal = |signal: &str, port: u16| {
            exec(
                &self.container,
                &[
                    "bash",
                    "-c",
                    &format!("kill -{signal} $(cat /data/{port}/redis.pid)"),
                ],
            );
        };
        signal("STOP", replica);
        // Its link cut too: what the master writes now stays in the master's backlog (the
        // kernel would otherwise hold it for the stopped replica, and hand it over).
        cli(
            &self.container,
            port,
            &["client", "kill", "type", "replica"],
        );
        std::thread::sleep(Duration::from_millis(300));
        let killed = Instant::now();
        signal("KILL", port);
        signal("CONT", replica);
        let failover = loop {
            assert!(
                killed.elapsed() < Duration::from_mins(1),
                "no replica took over slot {slot} within a minute"
            );
            let promoted = self.master_of(slot).filter(|master| *master != port);
            let ok = promoted.and_then(|master| cli(&self.container, master, &["cluster", "info"]));
            if ok.is_some_and(|info| info.contains("cluster_state:ok")) {
                break killed.elapsed();
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        exec(
            &self.container,
            &[
                "bash",
                "/usr/local/bin/redis-cluster-node",
                &port.to_string(),
            ],
        );
        let restarted = Instant::now();
        while !cli(&self.container, port, &["info", "replication"]).is_some_and(|info| {
            info.contains("role:slave") && info.contains("master_link_status:up")
        }) {
            assert!(
                restarted.elapsed() < Duration::from_mins(1),
                "the killed node did not rejoin as a replica within a minute"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        failover
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_keeps_what_it_acknowledged_through_failovers() {
    let tests = "failovers on redis-cluster";
    let variable = "MNEMIX_FAILOVER_CLUSTER_CONTAINER";
    let Ok(container) = std::env::var(variable) else {
        mnemix_conformance::skip(
            "failover",
            tests,
            &format!("{variable} names no cluster container this test may kill nodes of"),
        );
        return;
    };
    let seeds = std::env::var("MNEMIX_TEST_REDIS_CLUSTER_URLS")
        .unwrap_or_else(|_| panic!("{variable} is set but MNEMIX_TEST_REDIS_CLUSTER_URLS is not"));
    let nodes: Vec<&str> = seeds
        .split(',')
        .map(|url| url.trim().trim_start_matches("redis://"))
        .collect();
    let url = format!(
        "redis+cluster://{}?prefix=failover&replicas=1",
        nodes.join(",")
    );
    // Few retries in the store, many in the workload (every 20 ms, 1,500 times: longer than a
    // failover and the rejoin that lets writes be replicated again).
    let retry = RetryPolicy {
        attempts: 2,
        first_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(50),
    };
    let store = OpenOptions::new(&url)
        .retry(retry)
        .timeout(Some(Duration::from_secs(2)))
        .open()
        .await
        .expect("the store opens");
    let subject = mnemix_tests::unique("failover");
    let scope = Scope::new("faults", subject.as_str()).expect("a valid scope");
    let conversation = store
        .create_conversation(&scope, NewConversation::default())
        .await
        .expect("a conversation");
    let cluster = Cluster::new(container);
    // Everything the scope owns is in the slot of its hash tag (see mnemix-redis's keys.rs).
    let slot = cluster.slot(&format!("failover:{{faults:{subject}}}:"));
    let workload = Workload {
        batches: 100_000,
        attempts: 1_500,
        pause: Duration::from_millis(2),
        ..Workload::default()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let killer = {
        let stop = Arc::clone(&stop);
        tokio::task::spawn_blocking(move || {
            let mut failovers = Vec::new();
            for _ in 0..FAILOVERS {
                std::thread::sleep(Duration::from_millis(300 + fastrand::u64(0..700)));
                let master = cluster.master_of(slot).expect("a master serves the slot");
                failovers.push(cluster.fail_over(master, slot));
            }
            // Writes replicated again: let them run a little before the workload stops.
            std::thread::sleep(Duration::from_millis(500));
            stop.store(true, Ordering::SeqCst);
            failovers
        })
    };
    let started = Instant::now();
    let history = tokio::time::timeout(
        Duration::from_mins(5),
        record_until(
            store.backend(),
            scope.clone(),
            conversation.id.clone(),
            workload,
            Arc::clone(&stop),
        ),
    )
    .await;
    let workload_seconds = started.elapsed().as_secs_f64();
    // Set by the killer after the last failover: the writers stopped for it, not for want of
    // batches.
    let under_load = stop.load(Ordering::SeqCst);
    let failovers = killer.await.expect("the killer");
    let mut history = history.expect("the workload ends within 5 minutes of failovers");
    let seconds: Vec<String> = failovers
        .iter()
        .map(|d| format!("{:.1}", d.as_secs_f64()))
        .collect();
    let row = [
        ("test", "failover".into()),
        ("backend", "redis-cluster".into()),
        ("failovers", FAILOVERS.into()),
        ("failover_seconds", seconds.join(", ").into()),
        ("seconds", format!("{workload_seconds:.1}").into()),
    ];
    let anomalies =
        mnemix_tests::judge(&mut history, &store, &scope, &conversation.id, tests, row).await;
    assert!(
        under_load,
        "the workload ended before the last failover: give it more batches"
    );
    assert!(history.acknowledged() > 0, "appends were acknowledged");
    assert!(
        anomalies.is_empty(),
        "{} anomalies, the first: {:?}",
        anomalies.len(),
        &anomalies[..anomalies.len().min(10)]
    );
    store.forget_all(&scope).await.expect("clean up");
}
