//! A Redis Cluster master killed under load and its replica promoted, three times: four
//! writers and two readers on one conversation (the history checker's workload) while the
//! replica of the conversation's slot is stalled (SIGSTOP, its link cut) for 300 ms, its master SIGKILLed,
//! the replica let go on and promoted, and the killed node started again (it rejoins as the
//! new master's replica). Whatever the master answered during the stall its replica never
//! received: without `replicas` the failover loses those writes, and the checker says so. The store waits for one replica
//! (`replicas=1`): nothing a caller was told, written or read, may be taken back by the
//! failover. When the run ends, [`memory_conformance::history::check`] must find no
//! acknowledged append lost, none twice, no partial batch, every read a prefix of the final
//! order.
//!
//! It needs a cluster it may kill nodes of: `MEMORY_FAILOVER_CLUSTER_CONTAINER` names the
//! compose stack's cluster container (three masters, a replica each) behind
//! `MEMORY_TEST_REDIS_CLUSTER_URLS` (`cargo xtask reliability` sets both); without it this is
//! a named skip. `MEMORY_FAULTS_REPORT=FILE` appends its figures: the acknowledged appends
//! and each failover's time, from the kill to a cluster that serves the slot again.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_memory::{NewConversation, OpenOptions, RetryPolicy, Scope};
use memory_conformance::history::{check, record_until, Workload};

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

    /// The port (in the container) of the live master serving `slot`, asked of any live node.
    fn master_of(&self, slot: u16) -> Option<u16> {
        let nodes = self
            .ports
            .iter()
            .find_map(|port| cli(&self.container, *port, &["cluster", "nodes"]))?;
        nodes.lines().find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (address, flags) = (fields.get(1)?, fields.get(2)?);
            if !flags.contains("master") || flags.contains("fail") {
                return None;
            }
            let serves = fields.get(8..).unwrap_or_default().iter().any(|range| {
                let (from, to) = range.split_once('-').unwrap_or((range, range));
                matches!((from.parse::<u16>(), to.parse::<u16>()), (Ok(a), Ok(b)) if (a..=b).contains(&slot))
            });
            let announced: u16 = address.split(['@']).next()?.rsplit(':').next()?.parse().ok()?;
            serves.then_some(announced - self.offset)
        })
    }

    fn slot(&self, key: &str) -> u16 {
        cli(&self.container, self.ports[0], &["cluster", "keyslot", key])
            .and_then(|s| s.trim().parse().ok())
            .expect("the key's slot")
    }

    /// The port of the replica of the master on `port`.
    fn replica_of(&self, port: u16) -> Option<u16> {
        let nodes = cli(&self.container, port, &["cluster", "nodes"])?;
        let fields =
            |line: &str| -> Vec<String> { line.split_whitespace().map(str::to_owned).collect() };
        let id = nodes
            .lines()
            .map(fields)
            .find(|f| f.get(2).is_some_and(|flags| flags.contains("myself")))?[0]
            .clone();
        nodes.lines().map(fields).find_map(|f| {
            (f.get(2)?.contains("slave") && f.get(3)? == &id).then(|| {
                let announced: u16 = f[1].split('@').next()?.rsplit(':').next()?.parse().ok()?;
                Some(announced - self.offset)
            })?
        })
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
    let variable = "MEMORY_FAILOVER_CLUSTER_CONTAINER";
    let Ok(container) = std::env::var(variable) else {
        memory_conformance::skip(
            "failover",
            tests,
            &format!("{variable} names no cluster container this test may kill nodes of"),
        );
        return;
    };
    let seeds = std::env::var("MEMORY_TEST_REDIS_CLUSTER_URLS")
        .unwrap_or_else(|_| panic!("{variable} is set but MEMORY_TEST_REDIS_CLUSTER_URLS is not"));
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
    let subject = memory_tests::unique("failover");
    let scope = Scope::new("faults", subject.as_str()).expect("a valid scope");
    let conversation = store
        .create_conversation(&scope, NewConversation::default())
        .await
        .expect("a conversation");
    let cluster = Cluster::new(container);
    // Everything the scope owns is in the slot of its hash tag (see memory-redis's keys.rs).
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
    history
        .finish(store.backend().as_ref(), &scope, &conversation.id)
        .await
        .expect("the final load");
    let anomalies = check(&history);
    let mut line = history.figures(&anomalies);
    line.insert("test".into(), "failover".into());
    line.insert("backend".into(), "redis-cluster".into());
    line.insert("failovers".into(), FAILOVERS.into());
    let seconds: Vec<String> = failovers
        .iter()
        .map(|d| format!("{:.1}", d.as_secs_f64()))
        .collect();
    line.insert("failover_seconds".into(), seconds.join(", ").into());
    line.insert("seconds".into(), format!("{workload_seconds:.1}").into());
    let line = serde_json::Value::Object(line);
    eprintln!("{tests}: {line}");
    memory_tests::report(&[line]);
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
