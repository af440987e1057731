//! Error recovery (spec `tasks.md` §3) on tokio's paused clock: backoff, Retry-After,
//! skip, pause, abort, escalate, and retry timers that survive a stopped runner.
//! Steps are scripted in-process so that only the engine's own timers move time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rein_core::clock::{Clock, TokioClock};
use rein_core::recovery::Failure;
use rein_core::{RunOptions, StepExecutor, StepOutcome, StepRequest};
use rein_protocol::{
    CheckpointStatus, ErrorType, EventType, HarnessEvent, HistoryKind, RecoveryAction,
    RecoveryStrategy, StepAction, TaskChange, TaskState, TaskStatus, TaskStep,
};
use tokio_util::sync::CancellationToken;

use crate::common;
use common::*;

/// Each step's outcome per attempt (the last one repeats).
#[derive(Debug, Default)]
struct Scripted(HashMap<String, Vec<StepOutcome>>);

#[async_trait]
impl StepExecutor for Scripted {
    async fn execute(&self, request: StepRequest, _: CancellationToken) -> StepOutcome {
        let script = &self.0[&request.step.id];
        let n = (request.attempt as usize)
            .saturating_sub(1)
            .min(script.len() - 1);
        script[n].clone()
    }
}

fn fails(failure: Failure) -> StepOutcome {
    StepOutcome::Failed {
        error: format!("{failure:?}"),
        output: None,
        failure,
    }
}

fn passes() -> StepOutcome {
    StepOutcome::Passed { output: None }
}

fn noop(id: &str, deps: &[&str]) -> TaskStep {
    TaskStep {
        depends_on: deps.iter().map(|d| (*d).to_owned()).collect(),
        ..TaskStep::new(id, StepAction::Noop)
    }
}

/// `work` then `after`, with `work` scripted.
fn setup(script: Vec<StepOutcome>) -> (Harness, Arc<TokioClock>) {
    let clock = Arc::new(TokioClock::new());
    let mut steps = HashMap::new();
    steps.insert("work".to_owned(), script);
    steps.insert("after".to_owned(), vec![passes()]);
    (harness_on(Arc::new(Scripted(steps)), clock.clone()), clock)
}

fn two_steps(work: TaskStep) -> rein_protocol::TaskDecomposition {
    plan(vec![work, noop("after", &["work"])])
}

async fn log(h: &Harness, state: &TaskState) -> Vec<HarnessEvent> {
    h.log(state).await
}

fn of_type(events: &[HarnessEvent], t: EventType) -> Vec<&HarnessEvent> {
    events.iter().filter(|e| e.event_type() == t).collect()
}

fn attempts<'a>(state: &'a TaskState, step: &str) -> Vec<&'a rein_protocol::Checkpoint> {
    state
        .checkpoints
        .iter()
        .filter(|c| c.step_id.as_deref() == Some(step))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_transient_error_is_retried_with_exponential_backoff_then_succeeds() {
    let transient = Failure::Exit { code: 75 };
    let (h, _) = setup(vec![fails(transient.clone()), fails(transient), passes()]);
    let state = h.create(two_steps(noop("work", &[]))).await;
    let started = tokio::time::Instant::now();
    let done = h.resume(state.id()).await;
    assert_eq!(done.status(), TaskStatus::Completed);
    let tries = attempts(&done, "work");
    assert_eq!(tries.len(), 3);
    assert_eq!(tries[0].metadata["error_type"], "transient");
    assert_eq!(
        (tries[2].attempt, tries[2].status),
        (3, CheckpointStatus::Completed)
    );
    let events = log(&h, &done).await;
    let retries: Vec<_> = of_type(&events, EventType::RecoveryAttempted);
    assert_eq!(retries.len(), 2);
    assert_eq!(of_type(&events, EventType::RecoverySucceeded).len(), 1);
    // 5 s then 10 s, each within ±20 % jitter: 4..6 + 8..12 seconds in all.
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(12) && waited < Duration::from_secs(20),
        "{waited:?}"
    );
    h.stored(&done).await;
}

#[tokio::test(start_paused = true)]
async fn retries_run_out_and_the_fallback_applies() {
    let (h, _) = setup(vec![fails(Failure::Timeout)]);
    let state = h.create(two_steps(noop("work", &[]))).await;
    let done = h.resume(state.id()).await;
    assert_eq!(done.status(), TaskStatus::Failed);
    assert_eq!(
        attempts(&done, "work").len(),
        4,
        "the first run and three retries"
    );
    let events = log(&h, &done).await;
    assert_eq!(of_type(&events, EventType::RecoveryAttempted).len(), 3);
    let gave_up = of_type(&events, EventType::RecoveryFailed);
    assert_eq!(gave_up.len(), 1);
    let TaskChange::RecoveryFailed {
        reason, error_type, ..
    } = &gave_up[0].change
    else {
        panic!()
    };
    assert_eq!(*error_type, ErrorType::Transient);
    assert!(reason.contains("3 retries ran out"), "{reason}");
    assert_eq!(latest(&done, "after").status, CheckpointStatus::Skipped);
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_waits_for_retry_after_or_else_thirty_seconds() {
    for (retry_after, wait) in [(Some(Duration::from_secs(7)), 7), (None, 30)] {
        let (h, clock) = setup(vec![
            fails(Failure::Http {
                status: 429,
                retry_after,
            }),
            passes(),
        ]);
        let state = h.create(two_steps(noop("work", &[]))).await;
        let t0 = clock.now();
        let done = h.resume(state.id()).await;
        let ended = clock.now();
        assert_eq!(done.status(), TaskStatus::Completed);
        let events = log(&h, &done).await;
        let waited = of_type(&events, EventType::RecoveryAttempted);
        let TaskChange::RecoveryAttempted {
            action,
            error_type,
            retry_at: Some(at),
            ..
        } = &waited[0].change
        else {
            panic!("{:?}", waited[0].change)
        };
        assert_eq!(
            (*action, *error_type),
            (RecoveryAction::Wait, ErrorType::RateLimit)
        );
        // The failure happens first thing, and only the engine's timers move the
        // paused clock: the wait chosen is exactly `at − t0`.
        assert_eq!(*at - t0, chrono::TimeDelta::seconds(wait));
        let failed = attempts(&done, "work")[0];
        assert_eq!(
            failed.metadata["retry_at"],
            at.to_rfc3339(),
            "the durable timer is on the checkpoint"
        );
        assert!(ended >= *at, "the retry ran at the time");
    }
}

#[tokio::test(start_paused = true)]
async fn plan_and_step_overrides_choose_skip_and_pause() {
    // fatal → skip (plan-wide): the step is skipped and the plan goes on.
    let (h, _) = setup(vec![fails(Failure::Exit { code: 1 })]);
    let mut p = two_steps(noop("work", &[]));
    p.recovery.insert(
        ErrorType::Fatal,
        RecoveryStrategy::action(RecoveryAction::Skip),
    );
    let state = h.create(p).await;
    let done = h.resume(state.id()).await;
    assert_eq!(done.status(), TaskStatus::Completed);
    assert_eq!(latest(&done, "work").status, CheckpointStatus::Skipped);
    assert_eq!(latest(&done, "after").status, CheckpointStatus::Completed);

    // validation_error → pause (the default): resuming runs the step again.
    let (h, _) = setup(vec![fails(Failure::Exit { code: 65 }), passes()]);
    let state = h.create(two_steps(noop("work", &[]))).await;
    let paused = h.resume(state.id()).await;
    assert_eq!(paused.status(), TaskStatus::Paused);
    let reason = paused.head.context.blocked_reason.clone().unwrap();
    assert!(
        reason.contains("validation_error") && reason.contains("rein tasks resume"),
        "{reason}"
    );
    let done = h.resume(state.id()).await;
    assert_eq!(done.status(), TaskStatus::Completed);
    assert_eq!(attempts(&done, "work").len(), 2);

    // A step's own override beats the plan's.
    let (h, _) = setup(vec![fails(Failure::Exit { code: 1 })]);
    let mut work = noop("work", &[]);
    work.recovery.insert(
        ErrorType::Fatal,
        RecoveryStrategy::action(RecoveryAction::Abort),
    );
    let mut p = two_steps(work);
    p.recovery.insert(
        ErrorType::Fatal,
        RecoveryStrategy::action(RecoveryAction::Skip),
    );
    let state = h.create(p).await;
    let done = h.resume(state.id()).await;
    assert_eq!(done.status(), TaskStatus::Failed);
}

#[tokio::test(start_paused = true)]
async fn a_permission_error_is_escalated_to_a_person() {
    for (choice, status) in [
        ("rerun", TaskStatus::Completed),
        ("abort", TaskStatus::Failed),
        ("skip", TaskStatus::Completed),
    ] {
        let (h, _) = setup(vec![fails(Failure::Exit { code: 77 }), passes()]);
        let state = h.create(two_steps(noop("work", &[]))).await;
        let paused = h.engine.run(state.id(), no_wait()).await.unwrap();
        assert_eq!(paused.status(), TaskStatus::Paused);
        let request = h.last_request().await;
        assert_eq!(request.trigger, rein_protocol::Trigger::PermissionDenied);
        assert!(
            request.title.contains("failed (permission_denied)"),
            "{}",
            request.title
        );
        // The request says what failed, and the escalation is in the ledger.
        let risk = request.context.risk_assessment.clone().unwrap_or_default();
        assert!(
            risk.contains("attempt 1 failed with a permission_denied error"),
            "{risk}"
        );
        let ledger = h.engine.ledger().await.unwrap();
        let escalated = ledger
            .iter()
            .find(|e| e.kind == rein_protocol::LedgerKind::Escalated)
            .expect("an escalation entry");
        assert_eq!(escalated.request_id.as_ref(), Some(&request.id));
        assert_eq!(escalated.who, "system:recovery");
        assert!(
            escalated
                .reason
                .as_deref()
                .unwrap_or_default()
                .starts_with("permission_denied error:"),
            "{escalated:?}"
        );
        assert!(h.engine.verify_ledger().await.unwrap().1.is_empty());
        h.engine
            .decide(choose(&request, choice, "ana"))
            .await
            .unwrap();
        let done = h.resume(state.id()).await;
        assert_eq!(done.status(), status, "{choice}");
        let last = done.latest_for_step("work").unwrap();
        match choice {
            "rerun" => assert_eq!(
                (last.attempt, last.status),
                (3, CheckpointStatus::Completed)
            ),
            "skip" => assert_eq!(last.status, CheckpointStatus::Skipped),
            _ => assert_eq!(last.status, CheckpointStatus::Failed),
        }
        h.stored(&done).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_retry_timer_survives_a_stopped_runner() {
    let (h, clock) = setup(vec![
        fails(Failure::Http {
            status: 503,
            retry_after: None,
        }),
        passes(),
    ]);
    let mut work = noop("work", &[]);
    work.recovery.insert(
        ErrorType::Transient,
        RecoveryStrategy {
            retry_delay_ms: Some(30_000),
            ..RecoveryStrategy::action(RecoveryAction::Wait)
        },
    );
    let state = h.create(two_steps(work)).await;
    // Stop the runner (as a crash would) ten seconds into its thirty-second wait.
    let cancel = CancellationToken::new();
    let run = {
        let engine = h.engine.clone();
        let id = state.id().clone();
        let options = RunOptions {
            cancel: cancel.clone(),
            ..RunOptions::default()
        };
        tokio::spawn(async move { engine.run(&id, options).await })
    };
    tokio::time::sleep(Duration::from_secs(10)).await;
    cancel.cancel();
    let stopped = run.await.unwrap().unwrap();
    let failed = attempts(&stopped, "work")[0].clone();
    assert_eq!(failed.status, CheckpointStatus::Failed);
    let at: chrono::DateTime<chrono::Utc> = failed.metadata["retry_at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let restarted = clock.now();
    assert!(restarted < at, "stopped before the retry time");
    let done = h.resume(state.id()).await;
    let ended = clock.now();
    assert_eq!(done.status(), TaskStatus::Completed);
    assert_eq!(
        attempts(&done, "work").len(),
        2,
        "one retry, at the recorded time"
    );
    assert!(ended >= at, "the retry waited for its time");
    assert!(
        ended < at + chrono::TimeDelta::seconds(15),
        "and no fresh thirty seconds: {}",
        ended - at
    );
}

#[tokio::test(start_paused = true)]
async fn a_retried_step_shows_each_attempt_in_the_history() {
    let transient = Failure::Exit { code: 75 };
    let (h, _) = setup(vec![fails(transient), passes()]);
    let state = h.create(two_steps(noop("work", &[]))).await;
    let done = h.resume(state.id()).await;
    assert_eq!(done.status(), TaskStatus::Completed);
    let history = h.engine.history(done.id()).await.unwrap();
    assert_eq!(history.last_seq, done.head.last_seq);
    assert_eq!(history.status, TaskStatus::Completed);
    let steps: Vec<(HistoryKind, &str, u32)> = history
        .points
        .iter()
        .filter_map(|p| Some((p.kind, p.step_id.as_deref()?, p.attempt?)))
        .collect();
    use HistoryKind::{StepFinished, StepStarted};
    assert_eq!(
        steps,
        [
            (StepStarted, "work", 1),
            (StepFinished, "work", 1),
            (StepStarted, "work", 2),
            (StepFinished, "work", 2),
            (StepStarted, "after", 1),
            (StepFinished, "after", 1),
        ]
    );
    let said: Vec<&str> = history
        .points
        .iter()
        .map(|p| p.description.as_str())
        .collect();
    assert!(
        said.iter()
            .any(|d| d.starts_with("step work failed") && d.ends_with("(it will run again)")),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|d| d.starts_with("step work (attempt 2) passed in")),
        "{said:?}"
    );
    assert_eq!(history.points[0].kind, HistoryKind::TaskCreated);
    let last = history.points.last().unwrap();
    assert_eq!(
        (last.kind, last.description.as_str()),
        (HistoryKind::TaskEnded, "completed")
    );
    // Each point is the event at its position: same time, in log order.
    let events = log(&h, &done).await;
    let mut seq = 0;
    for p in &history.points {
        assert!(p.seq >= seq, "{p:?} after {seq}");
        seq = p.seq;
        let event = &events[(p.seq - 1) as usize];
        assert_eq!(event.seq, p.seq);
        assert_eq!(Some(event.timestamp), p.at, "{p:?}");
    }
    // The engine's own checkpoints are points too: confirm and plan.
    let engine_points: Vec<&str> = history
        .points
        .iter()
        .filter(|p| p.kind == HistoryKind::Checkpoint)
        .map(|p| p.description.as_str())
        .collect();
    assert!(
        engine_points.contains(&"task_start passed in 0 ms"),
        "{engine_points:?}"
    );
    assert!(
        engine_points
            .iter()
            .any(|d| d.starts_with("task_plan passed")),
        "{engine_points:?}"
    );
}
