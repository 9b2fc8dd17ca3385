//! Running one scenario against a backend: fresh scope, clock, skips, requirements, report.

use std::future::Future;
use std::io::Write as _;
use std::pin::Pin;
use std::sync::Arc;

use mnemix_core::{
    Capabilities, Checked, Clock, ManualClock, MemoryBackend, MemoryError, Namespace,
    NamespaceReceipt, Scope, Timestamp, VectorSearch,
};

/// A boxed future, as returned by factories and scenarios.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a factory could not make a backend.
#[derive(Debug)]
pub enum SetupError {
    /// The service is not reachable (no URL, no Docker): a named skip, or a failure when
    /// `MNEMIX_TEST_REQUIRE` names the backend.
    Unreachable(String),
    /// The service was reached but setting up failed: always a failure.
    Failed(MemoryError),
}

impl From<MemoryError> for SetupError {
    fn from(e: MemoryError) -> Self {
        Self::Failed(e)
    }
}

/// What every scenario gets: a fresh backend handle, its clock, and scopes no other run uses.
pub struct Ctx {
    backend: Arc<dyn MemoryBackend>,
    /// The factory's backend before [`Checked::wrap`].
    bare: Arc<dyn MemoryBackend>,
    clock: ManualClock,
    namespace: Namespace,
    scope: Scope,
    other: Scope,
}

/// Every namespace a context has handed out in this process.
static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A random namespace, noted as the suite's.
fn fresh_namespace() -> Namespace {
    let namespace = Namespace::new(format!("t{}", random_word(12))).expect("valid namespace");
    HANDED_OUT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(namespace.as_str().to_owned());
    namespace
}

/// Whether `namespace` is one the suite's scenarios wrote in, in this process: handed out by
/// a [`Ctx`], or derived from one (`{namespace}-…`). A run against a store that holds other
/// data erases these, and only these, at its end.
pub fn is_suite_namespace(namespace: &Namespace) -> bool {
    let name = namespace.as_str();
    let handed_out = HANDED_OUT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    handed_out.contains(name)
        || name
            .split_once('-')
            .is_some_and(|(base, _)| handed_out.contains(base))
}

fn random_word(len: usize) -> String {
    (0..len)
        .map(|_| fastrand::alphanumeric().to_ascii_lowercase())
        .collect()
}

impl Ctx {
    /// A context over `backend` (which must have been built with `clock`), with a random
    /// namespace and two random subjects, so runs never collide and never wipe shared data.
    pub fn new(backend: Arc<dyn MemoryBackend>, clock: ManualClock) -> Self {
        let namespace = fresh_namespace();
        let scope = Scope::from_parts(
            namespace.clone(),
            Some(subject(&format!("alice-{}", random_word(8)))),
        );
        let other = Scope::from_parts(
            namespace.clone(),
            Some(subject(&format!("bob-{}", random_word(8)))),
        );
        Self {
            bare: Arc::clone(&backend),
            backend,
            clock,
            namespace,
            scope,
            other,
        }
    }

    /// The backend as its factory made it, before the front layer: for planting what only
    /// storage damage could (a record the registry cannot read). `None` when the factory's
    /// backend already is behind the front layer (an `open(url)` store), so nothing can be
    /// planted.
    pub fn unchecked(&self) -> Option<&dyn MemoryBackend> {
        (!self.bare.is_checked()).then_some(self.bare.as_ref())
    }

    /// The backend under test.
    pub fn backend(&self) -> &dyn MemoryBackend {
        self.backend.as_ref()
    }

    /// A shared handle to the backend (for concurrent scenarios).
    pub fn backend_arc(&self) -> Arc<dyn MemoryBackend> {
        Arc::clone(&self.backend)
    }

    /// Who the backend under test writes as (the program's, unless its factory opened it as
    /// another writer).
    pub fn writer(&self) -> mnemix_core::Provenance {
        self.backend.writer().unwrap_or_default()
    }

    /// The backend's capabilities.
    pub fn capabilities(&self) -> Capabilities {
        self.backend.capabilities()
    }

    /// The clock the backend was built with.
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// The scenario's namespace (random).
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The main subject's scope.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Another subject in the same namespace.
    pub fn other_scope(&self) -> &Scope {
        &self.other
    }

    /// The clock's current instant.
    pub fn clock_now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The namespace-wide shared scope.
    pub fn shared_scope(&self) -> Scope {
        Scope::from_parts(self.namespace.clone(), None)
    }

    /// The main subject in another (random) namespace.
    pub fn foreign_namespace_scope(&self) -> Scope {
        let namespace = fresh_namespace();
        Scope::from_parts(namespace, self.scope.subject().cloned())
    }
}

fn subject(s: &str) -> mnemix_core::Subject {
    mnemix_core::Subject::new(s).expect("valid subject")
}

/// A capability a scenario needs; a backend without it gets a named skip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// Runs everywhere.
    None,
    /// Needs vector search (exact or approximate).
    Vectors,
    /// Needs exact vector search.
    ExactVectors,
    /// Needs an approximate index (checks its recall).
    ApproximateVectors,
    /// Runs only where vector search is absent (checks it is refused).
    NoVectors,
    /// Needs the backend as its factory made it, not already behind the front layer (plants
    /// what only storage damage could, through [`Ctx::unchecked`]).
    Unchecked,
    /// Needs the change feed.
    ChangeFeed,
    /// Needs the change feed and vector search.
    ChangeFeedAndVectors,
}

impl Requirement {
    /// `Err(reason)` when the capabilities exclude the scenario.
    pub fn check(self, caps: &Capabilities) -> Result<(), &'static str> {
        if matches!(self, Self::ChangeFeed | Self::ChangeFeedAndVectors) && !caps.change_feed {
            return Err("backend declares no change feed");
        }
        match (self, caps.vector_search) {
            (Self::None | Self::Unchecked | Self::ChangeFeed, _)
            | (
                Self::Vectors | Self::ChangeFeedAndVectors,
                VectorSearch::Exact | VectorSearch::Approximate(_),
            )
            | (Self::ExactVectors, VectorSearch::Exact)
            | (Self::ApproximateVectors, VectorSearch::Approximate(_))
            | (Self::NoVectors, VectorSearch::None) => Ok(()),
            (
                Self::Vectors | Self::ExactVectors | Self::ChangeFeedAndVectors,
                VectorSearch::None,
            ) => Err("backend declares no vector search"),
            (Self::ExactVectors, VectorSearch::Approximate(_)) => {
                Err("backend declares approximate vector search")
            }
            (Self::ApproximateVectors, _) => Err("backend declares no approximate vector index"),
            (Self::NoVectors, _) => Err("backend declares vector search"),
        }
    }
}

/// A scenario: a name that reads as a sentence, what it needs, and the function.
pub struct Scenario {
    /// `group::name`.
    pub name: &'static str,
    /// The capability it needs.
    pub requires: Requirement,
    /// The scenario; panics on a violation.
    pub run: for<'a> fn(&'a Ctx) -> BoxFuture<'a, ()>,
}

/// How one scenario ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It held.
    Passed,
    /// It was violated (or panicked).
    Failed,
    /// It was skipped by name.
    Skipped,
}

/// Whether `MNEMIX_TEST_REQUIRE` (comma-separated backend names, or `all`) names the backend.
pub fn is_required(backend: &str) -> bool {
    std::env::var("MNEMIX_TEST_REQUIRE").is_ok_and(|list| {
        list.split(',')
            .map(str::trim)
            .any(|name| name == backend || name == "all")
    })
}

/// Prints past libtest's output capture, so skips are visible in a normal `cargo test` run.
pub(crate) fn announce(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// A named skip of `tests` for want of `what` (a backend or a tool), printed past the output
/// capture; a failure instead when `MNEMIX_TEST_REQUIRE` names `what`.
pub fn skip(what: &str, tests: &str, reason: &str) {
    assert!(
        !is_required(what),
        "MNEMIX_TEST_REQUIRE names {what}: {tests}: {reason}"
    );
    announce(&format!("SKIP {tests}: {reason}"));
    // Also into the report, where a runner that hides a passing test's output (cargo-nextest)
    // still finds it: `cargo xtask test` says these skips last.
    report(&serde_json::json!({ "skipped": tests, "needs": what, "reason": reason }));
}

fn record(backend: &str, scenario: &str, outcome: Outcome, reason: &str) {
    report(&serde_json::json!({
        "backend": backend,
        "scenario": scenario,
        "outcome": format!("{outcome:?}").to_lowercase(),
        "reason": reason,
    }));
}

/// Appends `line` to the JSON report `MNEMIX_CONFORMANCE_REPORT` names, if it names one.
fn report(line: &serde_json::Value) {
    // Tests run in parallel threads of one process: serialize the appends, one write per line
    // (and processes running at once append whole lines: the file is opened to append).
    static REPORT_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let Ok(path) = std::env::var("MNEMIX_CONFORMANCE_REPORT") else {
        return;
    };
    let _guard = REPORT_LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = file.write_all(format!("{line}\n").as_bytes());
    }
}

/// How one scenario went, for callers that collect results instead of panicking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioResult {
    /// `group::name`.
    pub name: &'static str,
    /// Passed, failed or skipped.
    pub outcome: Outcome,
    /// Why it was skipped or failed (empty when it passed).
    pub reason: String,
}

/// A failure with the panic that caused it, so [`run_scenario`] can re-raise it unchanged.
struct Failure {
    reason: String,
    panic: Option<Box<dyn std::any::Any + Send>>,
}

/// How long one scenario may take, its backend's setup included: `MNEMIX_TEST_SCENARIO_SECS`
/// (seconds), or 600 — far past any scenario on a working backend (the slowest take seconds).
fn scenario_limit() -> std::time::Duration {
    let secs = std::env::var("MNEMIX_TEST_SCENARIO_SECS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(600);
    std::time::Duration::from_secs(secs)
}

/// Runs one scenario: `Ok` with `Passed` or `Skipped` and a reason, or the failure.
async fn execute<F>(
    backend: &str,
    factory: F,
    scenario: &Scenario,
) -> Result<(Outcome, String), Failure>
where
    F: FnOnce(Arc<dyn Clock>) -> BoxFuture<'static, Result<Arc<dyn MemoryBackend>, SetupError>>,
{
    let name = scenario.name;
    // A store that never answers fails the scenario, by name, instead of hanging the run.
    let limit = scenario_limit();
    let deadline = tokio::time::Instant::now() + limit;
    let timed_out = || Failure {
        reason: format!("did not finish within {} s", limit.as_secs()),
        panic: None,
    };
    let clock = ManualClock::new(Timestamp::now());
    let made = tokio::time::timeout_at(deadline, factory(Arc::new(clock.clone())))
        .await
        .map_err(|_| timed_out())?;
    let made = match made {
        Ok(made) => made,
        Err(SetupError::Unreachable(reason)) if !is_required(backend) => {
            return Ok((Outcome::Skipped, format!("{backend} unreachable: {reason}")));
        }
        Err(error) => {
            return Err(Failure {
                reason: format!("cannot set up the backend: {error:?}"),
                panic: None,
            })
        }
    };
    if let Err(reason) = scenario.requires.check(&made.capabilities()) {
        return Ok((Outcome::Skipped, reason.to_owned()));
    }
    if scenario.requires == Requirement::Unchecked && made.is_checked() {
        return Ok((
            Outcome::Skipped,
            "the store under test is already behind the front layer: nothing can be planted"
                .to_owned(),
        ));
    }
    // What users get from `open`: the backend behind the front layer, which checks input,
    // retries and sanitizes once for every backend. The suite holds the pair to the contract.
    let bare = Arc::clone(&made);
    let made = Checked::wrap(made);
    let mut ctx = Ctx::new(made, clock);
    ctx.bare = bare;
    let run = scenario.run;
    let task = tokio::spawn(async move { run(&ctx).await });
    let abort = task.abort_handle();
    let Ok(joined) = tokio::time::timeout_at(deadline, task).await else {
        abort.abort();
        return Err(timed_out());
    };
    match joined {
        Ok(()) => Ok((Outcome::Passed, String::new())),
        Err(error) if error.is_panic() => {
            let panic = error.into_panic();
            let reason = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panicked".to_owned());
            Err(Failure {
                reason,
                panic: Some(panic),
            })
        }
        Err(error) => Err(Failure {
            reason: format!("{name}: {error}"),
            panic: None,
        }),
    }
}

/// Runs the scenario `name` against a backend made by `factory`; what the suite's tests call.
///
/// Skips (printed as `SKIP <scenario>: <reason>`) when the backend's capabilities exclude the
/// scenario or its service is unreachable and not required; panics when the scenario fails, the
/// service is required but unreachable, or the name is unknown.
pub async fn run_scenario<F>(backend: &str, factory: F, name: &str)
where
    F: FnOnce(Arc<dyn Clock>) -> BoxFuture<'static, Result<Arc<dyn MemoryBackend>, SetupError>>,
{
    let scenario = crate::SCENARIOS
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("unknown conformance scenario {name}"));
    match execute(backend, factory, scenario).await {
        Ok((outcome, reason)) => {
            if outcome == Outcome::Skipped {
                announce(&format!("SKIP {name}: {reason}"));
            }
            record(backend, name, outcome, &reason);
        }
        Err(failure) => {
            record(backend, name, Outcome::Failed, &failure.reason);
            match failure.panic {
                Some(panic) => std::panic::resume_unwind(panic),
                None => panic!("{backend}: {name}: {}", failure.reason),
            }
        }
    }
}

/// Runs every scenario in order against backends made by `factory` and returns each result,
/// calling `progress` after each one; what `mnemix conformance --url` uses.
///
/// Failures are collected, not raised: a panicking scenario still prints its message through
/// the panic hook, then the run goes on.
pub async fn run_suite<F>(
    backend: &str,
    factory: F,
    mut progress: impl FnMut(&ScenarioResult),
) -> Vec<ScenarioResult>
where
    F: Fn(Arc<dyn Clock>) -> BoxFuture<'static, Result<Arc<dyn MemoryBackend>, SetupError>>,
{
    let mut results = Vec::with_capacity(crate::SCENARIOS.len());
    for scenario in crate::SCENARIOS {
        let (outcome, reason) = match execute(backend, &factory, scenario).await {
            Ok(done) => done,
            Err(failure) => (Outcome::Failed, failure.reason),
        };
        record(backend, scenario.name, outcome, &reason);
        let result = ScenarioResult {
            name: scenario.name,
            outcome,
            reason,
        };
        progress(&result);
        results.push(result);
    }
    results
}

/// What [`erase_suite_data`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Erased {
    /// The suite's namespaces erased.
    pub namespaces: usize,
    /// What their erasure removed, summed.
    pub receipt: NamespaceReceipt,
    /// The suite's namespaces still listed afterwards (written while they were erased).
    pub left: usize,
}

/// Erases what this process's scenarios wrote (their namespaces: see [`is_suite_namespace`])
/// from the store `factory` opens, so that a run against a store that holds other data
/// leaves it as it was. The store is opened on a clock at the Unix epoch: nothing the
/// scenarios wrote reads as expired there, so expired facts and cache entries, which no read
/// sees on the real clock, are found and erased too.
pub async fn erase_suite_data<F>(factory: F) -> Result<Erased, SetupError>
where
    F: FnOnce(Arc<dyn Clock>) -> BoxFuture<'static, Result<Arc<dyn MemoryBackend>, SetupError>>,
{
    let backend = factory(Arc::new(ManualClock::new(Timestamp::from_millis(0)))).await?;
    let failed = |e: MemoryError| SetupError::Failed(e);
    let mut erased = Erased::default();
    for namespace in backend.namespaces().await.map_err(failed)? {
        if is_suite_namespace(&namespace) {
            erased.receipt += backend.forget_namespace(&namespace).await.map_err(failed)?;
            erased.namespaces += 1;
        }
    }
    erased.left = backend
        .namespaces()
        .await
        .map_err(failed)?
        .iter()
        .filter(|namespace| is_suite_namespace(namespace))
        .count();
    Ok(erased)
}

/// [`run_scenario`] on a fresh multi-threaded tokio runtime (4 workers); what [`suite!`](crate::suite)'s
/// tests call, so users need no async test attribute.
pub fn block_on_scenario<F>(backend: &str, factory: F, name: &str)
where
    F: FnOnce(Arc<dyn Clock>) -> BoxFuture<'static, Result<Arc<dyn MemoryBackend>, SetupError>>,
{
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(run_scenario(backend, factory, name));
}
