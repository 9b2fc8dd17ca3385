//! Scenarios of [`CheckpointStore`](mnemix_core::CheckpointStore).

use std::time::Duration;

use mnemix_core::{CheckpointId, CheckpointStatus, CheckpointUpdate, NewCheckpoint};
use serde_json::json;

use crate::support::{assert_one_winner, race, ResultExt};
use crate::Ctx;

fn id(s: &str) -> CheckpointId {
    CheckpointId::new(s).expect("valid id")
}

fn new(checkpoint: &str, workflow: &str, status: CheckpointStatus) -> NewCheckpoint {
    NewCheckpoint::new(
        id(checkpoint),
        workflow,
        status,
        json!({"step": 1, "vars": {"a": [1, 2]}}),
    )
}

/// A checkpoint is created at version 1 and reads back exactly.
pub async fn put_then_get_round_trips(ctx: &Ctx) {
    let put = ctx
        .backend()
        .put_checkpoint(
            ctx.scope(),
            new("run-1", "onboarding", CheckpointStatus::Running),
        )
        .await
        .must("put");
    assert_eq!(put.version, 1);
    assert_eq!(put.created_at, ctx.clock_now());
    assert_eq!(
        ctx.backend()
            .get_checkpoint(ctx.scope(), &id("run-1"))
            .await
            .must("get"),
        put
    );
}

/// An id already used in the scope is `AlreadyExists`.
pub async fn put_existing_id_is_already_exists(ctx: &Ctx) {
    let b = ctx.backend();
    b.put_checkpoint(ctx.scope(), new("run-1", "w", CheckpointStatus::Running))
        .await
        .must("put");
    b.put_checkpoint(ctx.scope(), new("run-1", "w", CheckpointStatus::Running))
        .await
        .must_be_already_exists("again");
}

/// An update with the current version applies and bumps it.
pub async fn update_with_current_version_bumps_it(ctx: &Ctx) {
    let b = ctx.backend();
    b.put_checkpoint(ctx.scope(), new("run-1", "w", CheckpointStatus::Running))
        .await
        .must("put");
    ctx.clock().advance(Duration::from_secs(1));
    let update = CheckpointUpdate {
        expected_version: 1,
        status: CheckpointStatus::Suspended,
        state: json!({"step": 2}),
    };
    let updated = b
        .update_checkpoint(ctx.scope(), &id("run-1"), update)
        .await
        .must("update");
    assert_eq!(updated.version, 2);
    assert_eq!(updated.status, CheckpointStatus::Suspended);
    assert_eq!(updated.state, json!({"step": 2}));
    assert_eq!(updated.updated_at, ctx.clock_now());
    assert!(updated.created_at < updated.updated_at);
}

/// A stale version is `Conflict` with the stored version, and changes nothing.
pub async fn update_with_stale_version_is_conflict(ctx: &Ctx) {
    let b = ctx.backend();
    b.put_checkpoint(ctx.scope(), new("run-1", "w", CheckpointStatus::Running))
        .await
        .must("put");
    let update = |v| CheckpointUpdate {
        expected_version: v,
        status: CheckpointStatus::Completed,
        state: json!(v),
    };
    b.update_checkpoint(ctx.scope(), &id("run-1"), update(1))
        .await
        .must("first");
    let err = b
        .update_checkpoint(ctx.scope(), &id("run-1"), update(1))
        .await
        .must_be_conflict("stale");
    assert_eq!(err.current(), Some(2));
    assert_eq!(
        b.get_checkpoint(ctx.scope(), &id("run-1"))
            .await
            .must("get")
            .state,
        json!(1)
    );
}

/// Of concurrent updates from the same version exactly one wins.
pub async fn concurrent_updates_have_one_winner(ctx: &Ctx) {
    ctx.backend()
        .put_checkpoint(ctx.scope(), new("run-1", "w", CheckpointStatus::Running))
        .await
        .must("put");
    let results = race(ctx, 8, |backend, scope, w| async move {
        let update = CheckpointUpdate {
            expected_version: 1,
            status: CheckpointStatus::Running,
            state: json!(w),
        };
        backend
            .update_checkpoint(&scope, &id("run-1"), update)
            .await
    })
    .await;
    assert_one_winner(&results);
    assert_eq!(
        ctx.backend()
            .get_checkpoint(ctx.scope(), &id("run-1"))
            .await
            .must("get")
            .version,
        2
    );
}

/// Only suspended checkpoints are listed, by workflow when asked, oldest update first.
pub async fn list_suspended_filters_by_status_and_workflow(ctx: &Ctx) {
    let b = ctx.backend();
    for (run, workflow, status) in [
        ("a", "onboarding", CheckpointStatus::Suspended),
        ("b", "billing", CheckpointStatus::Suspended),
        ("c", "onboarding", CheckpointStatus::Running),
        ("d", "onboarding", CheckpointStatus::Suspended),
        ("e", "onboarding", CheckpointStatus::Completed),
    ] {
        ctx.clock().advance(Duration::from_millis(10));
        b.put_checkpoint(ctx.scope(), new(run, workflow, status))
            .await
            .must("put");
    }
    let ids = |list: Vec<mnemix_core::Checkpoint>| {
        list.into_iter()
            .map(|c| c.id.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(b.list_suspended(ctx.scope(), None).await.must("all")),
        ["a", "b", "d"]
    );
    assert_eq!(
        ids(b
            .list_suspended(ctx.scope(), Some("onboarding"))
            .await
            .must("one")),
        ["a", "d"]
    );
    assert!(b
        .list_suspended(ctx.scope(), Some("none"))
        .await
        .must("none")
        .is_empty());
}

/// Delete reports whether the checkpoint existed; reads and updates of missing ones are `NotFound`.
pub async fn delete_and_missing_checkpoints(ctx: &Ctx) {
    let b = ctx.backend();
    b.put_checkpoint(ctx.scope(), new("run-1", "w", CheckpointStatus::Running))
        .await
        .must("put");
    assert!(b
        .delete_checkpoint(ctx.scope(), &id("run-1"))
        .await
        .must("delete"));
    assert!(!b
        .delete_checkpoint(ctx.scope(), &id("run-1"))
        .await
        .must("delete again"));
    b.get_checkpoint(ctx.scope(), &id("run-1"))
        .await
        .must_be_not_found("get");
    let update = CheckpointUpdate {
        expected_version: 1,
        status: CheckpointStatus::Running,
        state: json!(null),
    };
    b.update_checkpoint(ctx.scope(), &id("run-1"), update)
        .await
        .must_be_not_found("update");
}
