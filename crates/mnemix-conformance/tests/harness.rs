//! The harness itself: skips are named and become failures when required; a backend that
//! declares what it does not do fails; unknown scenarios are refused; a backend that never
//! answers fails by the time limit instead of hanging the run.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use mnemix_conformance::{block_on_scenario, BoxFuture, SetupError};
use mnemix_core::{
    Capabilities, Clock, Durability, InMemoryBackend, MemoryBackend, VectorIndexKind, VectorSearch,
};

type Made = BoxFuture<'static, Result<Arc<dyn MemoryBackend>, SetupError>>;

fn unreachable(_: Arc<dyn Clock>) -> Made {
    Box::pin(async { Err(SetupError::Unreachable("no server in this test".into())) })
}

fn declaring(vector_search: VectorSearch) -> impl FnOnce(Arc<dyn Clock>) -> Made {
    move |clock| {
        let caps = Capabilities::default()
            .with_vector_search(vector_search)
            .with_durability(Durability::Volatile);
        Box::pin(async move {
            Ok(
                Arc::new(InMemoryBackend::with_clock(clock).with_capabilities(caps))
                    as Arc<dyn MemoryBackend>,
            )
        })
    }
}

fn never_answers(_: Arc<dyn Clock>) -> Made {
    Box::pin(std::future::pending())
}

fn fails(f: impl FnOnce()) -> bool {
    catch_unwind(AssertUnwindSafe(f)).is_err()
}

#[test]
fn an_unreachable_service_is_a_skip_unless_required() {
    // Distinct backend names keep the two cases apart while tests share the environment.
    std::env::set_var("MNEMIX_TEST_REQUIRE", "ghost-required, other");
    assert!(!fails(|| block_on_scenario(
        "ghost-optional",
        unreachable,
        "conversation::append_assigns_contiguous_seq"
    )));
    assert!(fails(|| block_on_scenario(
        "ghost-required",
        unreachable,
        "conversation::append_assigns_contiguous_seq"
    )));
}

#[test]
fn a_backend_declaring_no_vectors_must_refuse_them() {
    // InMemoryBackend does serve vectors, so declaring `None` is a false declaration.
    let scenario = "vectors::vector_operations_are_unsupported_without_vector_search";
    assert!(fails(|| block_on_scenario(
        "liar",
        declaring(VectorSearch::None),
        scenario
    )));
}

#[test]
fn excluded_scenarios_are_skipped_not_run() {
    // With no vector search declared, a vector scenario is skipped and so cannot fail.
    assert!(!fails(|| block_on_scenario(
        "novec",
        declaring(VectorSearch::None),
        "vectors::upsert_then_get_round_trips"
    )));
    // Declaring an approximate index makes the recall scenario run (exact search passes it).
    let approx = declaring(VectorSearch::Approximate(VectorIndexKind::Hnsw));
    assert!(!fails(|| block_on_scenario(
        "approx",
        approx,
        "vectors::approximate_search_reaches_recall_at_10"
    )));
}

#[test]
fn unknown_scenarios_are_refused() {
    assert!(fails(|| block_on_scenario(
        "memory",
        declaring(VectorSearch::Exact),
        "conversation::no_such_scenario"
    )));
}

#[test]
fn a_backend_that_never_answers_fails_by_the_limit() {
    // Tests share the environment: 5 s is still far past what the others here take.
    std::env::set_var("MNEMIX_TEST_SCENARIO_SECS", "5");
    assert!(fails(|| block_on_scenario(
        "silent",
        never_answers,
        "conversation::append_assigns_contiguous_seq"
    )));
}
