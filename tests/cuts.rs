//! Cut connections: a [`FaultProxy`] between the store and PostgreSQL or Redis drops the
//! connection at every client-message boundary of an operation in turn — before the message
//! reaches the server ([`Fault::Drop`]) and after the server did the work but before its answer
//! comes back ([`Fault::LoseReply`]); and delays each message in turn ([`Fault::Delay`]).
//! After each cut the store's content shows the operation
//! applied wholly or not at all, and after the caller's retry, exactly once: checked by reading
//! the store, not by trusting the receipt.
//!
//! `MNEMIX_FAULTS_REPORT=FILE` appends one JSON line per backend, operation and fault (the
//! figures RELIABILITY.md gives).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::Duration;

use mnemix::{
    AppendOptions, CheckpointId, CheckpointStatus, CheckpointUpdate, ConversationId, FactQuery,
    LoadOptions, MemoryError, Message, MessageId, NewCheckpoint, NewConversation, NewFact,
    RememberOptions, RetryPolicy, Scope, Store, WorkingMemoryKey, WorkingMemoryUpdate,
};

use mnemix::transfer::{as_restored_by, Record};
use mnemix_testkit::faults::{Fault, FaultProxy};
use mnemix_tests::{proxied, Server};
use serde_json::json;

/// More boundaries than this means the operation never completed unfaulted: a broken test.
const MAX_BOUNDARY: u64 = 400;

/// What the store shows of an operation.
#[derive(Debug, PartialEq, Eq)]
enum Effect {
    None,
    Once,
    Duplicated,
    /// Applied in part: never acceptable.
    Partial(String),
}

#[derive(Debug, Default)]
struct Tally {
    /// Cuts that fired (one per boundary).
    cuts: u64,
    /// Of those, how often the first call failed (the caller saw the cut).
    failed: u64,
    /// After a failed first call and before the retry: applied, or not.
    applied_before_retry: u64,
    /// After the retry: the outcomes.
    once: u64,
    lost: u64,
    duplicated: u64,
    partial: u64,
}

/// One operation under cuts: prepared in a fresh scope, run (and run again, as the caller's
/// retry, when it fails), and its effect read back from the store.
trait Operation {
    const NAME: &'static str;
    async fn setup(&self, store: &Store, scope: &Scope) -> mnemix::Result<()>;
    async fn run(&self, store: &Store, scope: &Scope) -> mnemix::Result<()>;
    async fn effect(&self, store: &Store, scope: &Scope) -> mnemix::Result<Effect>;
}

fn conversation_id() -> ConversationId {
    ConversationId::new("thread").expect("a valid id")
}

/// A batch of three messages appended to a thread of two; the front layer retries it itself.
struct Append {
    batch: Vec<Message>,
}

impl Append {
    fn new() -> Self {
        let batch = (0..3)
            .map(|i| Message::user(format!("batch message {i}")).with_id(MessageId::generate()))
            .collect();
        Self { batch }
    }
}

impl Operation for Append {
    const NAME: &'static str = "append";

    async fn setup(&self, store: &Store, scope: &Scope) -> mnemix::Result<()> {
        let new = NewConversation::default().with_id(conversation_id());
        store.create_conversation(scope, new).await?;
        let earlier = vec![Message::user("one"), Message::assistant("two")];
        store
            .append(scope, &conversation_id(), earlier, AppendOptions::default())
            .await?;
        Ok(())
    }

    async fn run(&self, store: &Store, scope: &Scope) -> mnemix::Result<()> {
        store
            .append(
                scope,
                &conversation_id(),
                self.batch.clone(),
                AppendOptions::default(),
            )
            .await
            .map(drop)
    }

    async fn effect(&self, store: &Store, scope: &Scope) -> mnemix::Result<Effect> {
        let stored = store
            .load(scope, &conversation_id(), LoadOptions::raw())
            .await?;
        let seqs: Vec<u64> = stored.iter().map(|m| m.seq).collect();
        if seqs != (1..=stored.len() as u64).collect::<Vec<_>>() {
            return Ok(Effect::Partial(format!("seqs not contiguous: {seqs:?}")));
        }
        let counts: Vec<usize> = self
            .batch
            .iter()
            .map(|m| stored.iter().filter(|s| s.message.id == m.id).count())
            .collect();
        Ok(
            match (counts.iter().min(), counts.iter().max(), stored.len()) {
                (Some(0), Some(0), 2) => Effect::None,
                (Some(1), Some(1), 5) => Effect::Once,
                (Some(n), _, _) if *n > 1 => Effect::Duplicated,
                _ => Effect::Partial(format!(
                    "batch counts {counts:?} in {} messages",
                    stored.len()
                )),
            },
        )
    }
}

/// A fact remembered; the caller's retry finds it a duplicate when the first try stored it.
struct Remember;

impl Operation for Remember {
    const NAME: &'static str = "remember";

    async fn setup(&self, store: &Store, scope: &Scope) -> mnemix::Result<()> {
        store
            .remember(
                scope,
                NewFact::new("prefers aisle seats"),
                RememberOptions::default(),
            )
            .await
            .map(drop)
    }

    async fn run(&self, store: &Store, scope: &Scope) -> mnemix::Result<()> {
        store
            .remember(
                scope,
                NewFact::new("drinks green tea"),
                RememberOptions::default(),
            )
            .await
            .map(drop)
    }

    async fn effect(&self, store: &Store, scope: &Scope) -> mnemix::Result<Effect> {
        let query = FactQuery::default().with_include_superseded(true);
        let facts = store.list_facts(scope, query).await?.items;
        let tea = facts
            .iter()
            .filter(|f| f.text == "drinks green tea")
            .count();
        if facts.len() != tea + 1 {
            return Ok(Effect::Partial(format!("{} facts", facts.len())));
        }
        Ok(match tea {
            0 => Effect::None,
            1 => Effect::Once,
            _ => Effect::Duplicated,
        })
    }
}

/// A working-memory compare-and-set from revision 1; a retry's `Conflict` tells the caller
/// the first try applied.
struct SetWorkingMemory;

impl Operation for SetWorkingMemory {
    const NAME: &'static str = "working-memory set";

    async fn setup(&self, store: &Store, scope: &Scope) -> mnemix::Result<()> {
        store
            .set_working_memory(
                scope,
                &WorkingMemoryKey::User,
                WorkingMemoryUpdate::markdown("v1"),
            )
            .await
            .map(drop)
    }

    async fn run(&self, store: &Store, scope: &Scope) -> mnemix::Result<()> {
        let update = WorkingMemoryUpdate {
            expected_revision: Some(1),
            ..WorkingMemoryUpdate::markdown("v2")
        };
        store
            .set_working_memory(scope, &WorkingMemoryKey::User, update)
            .await
            .map(drop)
    }

    async fn effect(&self, store: &Store, scope: &Scope) -> mnemix::Result<Effect> {
        let stored = store
            .get_working_memory(scope, &WorkingMemoryKey::User)
            .await?
            .ok_or_else(|| MemoryError::invalid("working memory vanished"))?;
        Ok(match (stored.content.as_str(), stored.revision) {
            ("v1", 1) => Effect::None,
            ("v2", 2) => Effect::Once,
            ("v2", _) => Effect::Duplicated,
            (content, revision) => Effect::Partial(format!("{content:?} at revision {revision}")),
        })
    }
}

fn checkpoint_id() -> CheckpointId {
    CheckpointId::new("run").expect("a valid id")
}

/// A fenced checkpoint update from version 1; as for working memory, a retry's `Conflict`
/// means the first try applied.
struct UpdateCheckpoint;

impl Operation for UpdateCheckpoint {
    const NAME: &'static str = "checkpoint update";

    async fn setup(&self, store: &Store, scope: &Scope) -> mnemix::Result<()> {
        let checkpoint = NewCheckpoint::new(
            checkpoint_id(),
            "trip",
            CheckpointStatus::Running,
            json!({"step": 1}),
        );
        store.put_checkpoint(scope, checkpoint).await.map(drop)
    }

    async fn run(&self, store: &Store, scope: &Scope) -> mnemix::Result<()> {
        let update = CheckpointUpdate {
            expected_version: 1,
            status: CheckpointStatus::Suspended,
            state: json!({"step": 2}),
        };
        store
            .update_checkpoint(scope, &checkpoint_id(), update)
            .await
            .map(drop)
    }

    async fn effect(&self, store: &Store, scope: &Scope) -> mnemix::Result<Effect> {
        let stored = store.get_checkpoint(scope, &checkpoint_id()).await?;
        Ok(match (stored.version, stored.state["step"].as_u64()) {
            (1, Some(1)) => Effect::None,
            (2, Some(2)) => Effect::Once,
            (v, Some(2)) if v > 2 => Effect::Duplicated,
            (v, step) => Effect::Partial(format!("version {v} with step {step:?}")),
        })
    }
}

/// Everything a subject holds, beside a neighbour who must keep all of theirs.
async fn fill(store: &Store, scope: &Scope) -> mnemix::Result<()> {
    Append::new().setup(store, scope).await?;
    Remember.setup(store, scope).await?;
    SetWorkingMemory.setup(store, scope).await?;
    UpdateCheckpoint.setup(store, scope).await
}

fn neighbour(scope: &Scope) -> Scope {
    let subject = scope.subject().expect("a subject's scope");
    Scope::new(
        scope.namespace().as_str(),
        format!("{}-neighbour", subject.as_str()),
    )
    .expect("a valid scope")
}

/// What `export_scope` holds, as comparable lines.
async fn exported(store: &Store, scope: &Scope) -> mnemix::Result<Vec<String>> {
    let mut lines: Vec<String> = store
        .export_scope(scope)
        .await?
        .iter()
        .map(|r| serde_json::to_string(r).expect("a record serializes"))
        .collect();
    lines.sort();
    Ok(lines)
}

/// `forget_all` of a subject with a conversation, a fact, working memory and a checkpoint.
#[derive(Default)]
struct ForgetAll {
    /// How many records each of the two subjects holds before.
    records: std::sync::atomic::AtomicUsize,
}

impl Operation for ForgetAll {
    const NAME: &'static str = "forget_all";

    async fn setup(&self, store: &Store, scope: &Scope) -> mnemix::Result<()> {
        fill(store, scope).await?;
        fill(store, &neighbour(scope)).await?;
        let records = exported(store, scope).await?.len();
        assert!(records >= 6, "a filled subject holds {records} records");
        self.records
            .store(records, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    async fn run(&self, store: &Store, scope: &Scope) -> mnemix::Result<()> {
        store.forget_all(scope).await.map(drop)
    }

    async fn effect(&self, store: &Store, scope: &Scope) -> mnemix::Result<Effect> {
        let records = self.records.load(std::sync::atomic::Ordering::SeqCst);
        let kept = exported(store, &neighbour(scope)).await?.len();
        if kept != records {
            return Ok(Effect::Partial(format!(
                "the neighbour kept {kept} records of {records}"
            )));
        }
        Ok(match exported(store, scope).await?.len() {
            0 => Effect::Once,
            n if n == records => Effect::None,
            n => Effect::Partial(format!("{n} of {records} records left")),
        })
    }
}

/// `restore` of a subject's export after it was forgotten (the front layer retries it).
struct Restore {
    records: std::sync::Mutex<Vec<Record>>,
}

impl Operation for Restore {
    const NAME: &'static str = "restore";

    async fn setup(&self, store: &Store, scope: &Scope) -> mnemix::Result<()> {
        fill(store, scope).await?;
        *self.records.lock().expect("records") = store.export_scope(scope).await?;
        store.forget_all(scope).await.map(drop)
    }

    async fn run(&self, store: &Store, _scope: &Scope) -> mnemix::Result<()> {
        // The records name their scope.
        let records = self.records.lock().expect("records").clone();
        store.restore(records).await.map(drop)
    }

    async fn effect(&self, store: &Store, scope: &Scope) -> mnemix::Result<Effect> {
        // Facts come back written by the restorer, their first account kept.
        let records = self.records.lock().expect("records").clone();
        let mut expected: Vec<String> = as_restored_by(records, &store.writer().written_by)
            .iter()
            .map(|r| serde_json::to_string(r).expect("a record serializes"))
            .collect();
        expected.sort();
        let now = exported(store, scope).await?;
        Ok(if now.is_empty() {
            Effect::None
        } else if now == expected {
            Effect::Once
        } else if now.len() > expected.len() {
            Effect::Duplicated
        } else {
            Effect::Partial(format!("{} of {} records", now.len(), expected.len()))
        })
    }
}

/// The caller's retry after a failed call: again until it succeeds, or until a `Conflict`
/// says a fenced write already applied.
async fn retry<O: Operation>(op: &O, store: &Store, scope: &Scope) {
    for _ in 0..20 {
        match op.run(store, scope).await {
            Ok(()) | Err(MemoryError::Conflict { .. }) => return,
            Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("{}: the retry failed with {e}", O::NAME),
        }
    }
    panic!("{}: the retry never got through", O::NAME);
}

/// Cuts `op` at every boundary in turn, with `fault`; returns the tally.
async fn cut_everywhere<O: Operation>(
    op: &O,
    proxy: &FaultProxy,
    store: &Store,
    fault: Fault,
    run_id: &str,
) -> Tally {
    let mut tally = Tally::default();
    for n in 1..=MAX_BOUNDARY {
        let scope = Scope::new("faults", format!("{run_id}-{n}")).expect("a valid scope");
        op.setup(store, &scope)
            .await
            .unwrap_or_else(|e| panic!("{} setup: {e}", O::NAME));
        proxy.arm(n, fault);
        let first = op.run(store, &scope).await;
        if !proxy.disarm() {
            first.unwrap_or_else(|e| panic!("{} without a fault: {e}", O::NAME));
            return tally;
        }
        tally.cuts += 1;
        if let Err(e) = first {
            assert!(
                e.is_retryable() || matches!(e, MemoryError::Conflict { .. }),
                "{} cut at message {n} ({fault:?}) failed with a non-retryable error: {e}",
                O::NAME
            );
            tally.failed += 1;
            match op.effect(store, &scope).await.expect("reading the effect") {
                Effect::Once => tally.applied_before_retry += 1,
                Effect::None => {}
                other => panic!(
                    "{} cut at message {n} ({fault:?}): before the retry the store shows {other:?}",
                    O::NAME
                ),
            }
            retry(op, store, &scope).await;
        }
        match op.effect(store, &scope).await.expect("reading the effect") {
            Effect::Once => tally.once += 1,
            Effect::None => tally.lost += 1,
            Effect::Duplicated => tally.duplicated += 1,
            Effect::Partial(what) => {
                eprintln!(
                    "{} cut at message {n} ({fault:?}): partial after the retry: {what}",
                    O::NAME
                );
                tally.partial += 1;
            }
        }
    }
    panic!("{}: still cut after {MAX_BOUNDARY} messages", O::NAME);
}

async fn cuts(server: Server) {
    let tests = format!("cuts on {}", server.name());
    let Some(url) = server.url(&tests) else {
        return;
    };
    // The front layer's own retries, quick: cuts end connections, not servers.
    let retry = RetryPolicy {
        attempts: 5,
        first_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(100),
    };
    let (proxy, store) = proxied(server, &url, retry)
        .await
        .expect("a store through the proxy");
    let run_id = mnemix_tests::unique("cuts");
    let mut tallies = BTreeMap::new();
    let delay = Fault::Delay(Duration::from_millis(20));
    for fault in [Fault::Drop, Fault::LoseReply, delay] {
        let label = |name: &str| (name.to_owned(), format!("{fault:?}"));
        let id = |name: &str| format!("{run_id}-{}-{fault:?}", name.replace([' ', '_'], "-"));
        let tally = cut_everywhere(&Append::new(), &proxy, &store, fault, &id("append")).await;
        tallies.insert(label(Append::NAME), tally);
        let tally = cut_everywhere(&Remember, &proxy, &store, fault, &id("remember")).await;
        tallies.insert(label(Remember::NAME), tally);
        let tally = cut_everywhere(&SetWorkingMemory, &proxy, &store, fault, &id("wm")).await;
        tallies.insert(label(SetWorkingMemory::NAME), tally);
        let tally = cut_everywhere(&UpdateCheckpoint, &proxy, &store, fault, &id("cp")).await;
        tallies.insert(label(UpdateCheckpoint::NAME), tally);
        let tally =
            cut_everywhere(&ForgetAll::default(), &proxy, &store, fault, &id("forget")).await;
        tallies.insert(label(ForgetAll::NAME), tally);
        let restore = Restore {
            records: std::sync::Mutex::default(),
        };
        let tally = cut_everywhere(&restore, &proxy, &store, fault, &id("restore")).await;
        tallies.insert(label(Restore::NAME), tally);
    }
    report(server, &tallies);
    for ((op, fault), t) in &tallies {
        assert!(t.cuts > 0, "{op} ({fault}) was never cut");
        assert_eq!(
            (t.lost, t.duplicated, t.partial),
            (0, 0, 0),
            "{} {op} ({fault}): {t:?}",
            server.name()
        );
    }
}

fn report(server: Server, tallies: &BTreeMap<(String, String), Tally>) {
    let mut out = std::io::stderr().lock();
    let _ = writeln!(
        out,
        "cuts on {}: operation, fault: cuts / first call failed / applied before the retry / once / lost / duplicated / partial",
        server.name()
    );
    let mut rows = Vec::new();
    for ((op, fault), t) in tallies {
        let _ = writeln!(
            out,
            "  {op}, {fault}: {} / {} / {} / {} / {} / {} / {}",
            t.cuts, t.failed, t.applied_before_retry, t.once, t.lost, t.duplicated, t.partial
        );
        rows.push(json!({
            "test": "cuts", "backend": server.name(), "operation": op, "fault": fault,
            "cuts": t.cuts, "failed": t.failed, "applied_before_retry": t.applied_before_retry,
            "once": t.once, "lost": t.lost, "duplicated": t.duplicated, "partial": t.partial,
        }));
    }
    mnemix_tests::report(&rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cut_of_a_postgres_connection_applies_once_or_not_at_all() {
    cuts(Server::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cut_of_a_redis_connection_applies_once_or_not_at_all() {
    cuts(Server::Redis).await;
}
