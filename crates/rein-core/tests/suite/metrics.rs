//! The counters of spec §6 rule 21, checked against tasks whose outcomes we know.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_protocol::{
    CheckpointType, Decision, ErrorType, RecoveryAction, RecoveryStrategy, StepAction, TaskStep,
};

use crate::common;
use common::*;

#[tokio::test]
async fn metrics_count_tasks_checkpoints_recovery_and_people() {
    let h = harness();
    // Completed: two steps, one of which fails once with a transient error.
    let mut flaky = step("flaky", "[ \"$REIN_ATTEMPT\" -gt 1 ] || exit 75", &[]);
    flaky.recovery.insert(
        ErrorType::Transient,
        RecoveryStrategy {
            retry_delay_ms: Some(10),
            ..RecoveryStrategy::action(RecoveryAction::Retry)
        },
    );
    let ok = h
        .run(plan(vec![flaky, step("after", "true", &["flaky"])]))
        .await;
    // Failed: a fatal error.
    h.run(plan(vec![step("broken", "exit 1", &[])])).await;
    // Waiting on a person, then approved.
    let ask = TaskStep {
        checkpoint: CheckpointType::UserApproval,
        ..TaskStep::new("ask", StepAction::approval("Go?", ""))
    };
    let asked = h.create(plan(vec![ask])).await;
    h.engine.run(asked.id(), no_wait()).await.unwrap();
    let request = h.last_request().await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    h.engine
        .decide(answer(&request, Decision::Approve, "ana"))
        .await
        .unwrap();

    let m = h.engine.metrics().await.unwrap();
    assert_eq!(
        (
            m.tasks.total,
            m.tasks.completed,
            m.tasks.failed,
            m.tasks.paused
        ),
        (3, 1, 1, 1)
    );
    assert!(m.tasks.average_duration_ms.unwrap() >= 0.0);

    // task_start ×3, task_plan ×3, flaky ×2, after, broken, ask, review+complete ×1.
    assert_eq!(m.checkpoints.by_type["task_start"], 3);
    assert_eq!(m.checkpoints.by_type["task_exec"], 4);
    assert_eq!(m.checkpoints.by_type["user_approval"], 1);
    assert_eq!(m.checkpoints.by_type["task_complete"], 1);
    assert_eq!(
        m.checkpoints.total,
        m.checkpoints.by_type.values().sum::<u64>()
    );
    assert_eq!(m.checkpoints.failed, 2, "flaky's first attempt and broken");
    assert!(m.checkpoints.average_duration_ms.is_some());

    assert_eq!(
        (
            m.recovery.attempts,
            m.recovery.successes,
            m.recovery.failures
        ),
        (1, 1, 1)
    );
    assert_eq!(m.recovery.by_error_type["transient"], 1);
    assert_eq!(m.recovery.by_error_type["fatal"], 1);

    assert_eq!(
        (
            m.human_loop.requests,
            m.human_loop.approvals,
            m.human_loop.pending
        ),
        (1, 1, 0)
    );
    assert!(
        m.human_loop.average_response_ms.unwrap() >= 20.0,
        "{:?}",
        m.human_loop.average_response_ms
    );
    assert_eq!(ok.status(), rein_protocol::TaskStatus::Completed);
}
