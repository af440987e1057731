//! The engine end to end over a real SQLite file: lifecycle, scheduling, failure,
//! resume, pause, abort. Steps are real `sh -c` child processes unless a test needs
//! an in-process executor to observe concurrency.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use rein_core::store::{TaskFilter, TaskWrite};
use rein_core::{
    CommandExecutor, ControlOutcome, EngineError, RunOptions, StepExecutor, StepOutcome,
    StepRequest, StoreError, TaskStore,
};
use rein_protocol::{
    CheckpointStatus, CheckpointType, EventType, HarnessEvent, StepAction, TaskDecomposition,
    TaskState, TaskStatus, TaskStep,
};
use tokio_util::sync::CancellationToken;

use crate::common;
use common::*;

#[tokio::test]
async fn a_plan_runs_through_the_five_control_points_in_order() {
    let h = harness();
    let mut gate = step("test", "test -f out.txt", &["make"]);
    gate.checkpoint = CheckpointType::TestPass;
    let state = h
        .run(plan(vec![step("make", "echo hi > out.txt", &[]), gate]))
        .await;
    assert_eq!(state.status(), TaskStatus::Completed);
    let kinds: Vec<CheckpointType> = state.checkpoints.iter().map(|c| c.kind).collect();
    assert_eq!(
        kinds,
        vec![
            CheckpointType::TaskStart,
            CheckpointType::TaskPlan,
            CheckpointType::TaskExec,
            CheckpointType::TestPass,
            CheckpointType::TaskReview,
            CheckpointType::TaskComplete,
        ]
    );
    assert!(
        state
            .checkpoints
            .iter()
            .all(|c| c.status == CheckpointStatus::Completed)
    );
    assert!(state.checkpoints.iter().all(|c| c.duration_ms.is_some()));
    let stored = h.stored(&state).await;
    assert_eq!(stored, state);
    assert_eq!(
        stored.head.context.completed_steps,
        vec!["make".to_owned(), "test".to_owned()]
    );
    assert!(stored.head.context.pending_steps.is_empty());
    let log = h.log(&state).await;
    let types: Vec<EventType> = log.iter().map(HarnessEvent::event_type).collect();
    assert_eq!(types.first(), Some(&EventType::TaskCreated));
    assert_eq!(types.last(), Some(&EventType::TaskCompleted));
    // One trace for the task; step events are children of the task's span.
    assert!(log.iter().all(|e| e.trace_id == state.head.trace_id));
    let step_event = log
        .iter()
        .find(|e| e.event_type() == EventType::CheckpointEntered)
        .unwrap();
    assert_eq!(
        step_event.parent_span_id.as_deref(),
        Some(state.head.span_id.as_str())
    );
}

#[tokio::test]
async fn exit_code_duration_and_output_tail_are_recorded() {
    let h = harness();
    let state = h
        .run(plan(vec![
            step(
                "loud",
                "head -c 10000 /dev/zero | tr '\\0' x; echo; echo warn >&2; echo end",
                &[],
            ),
            step("bad", "echo nope >&2; exit 3", &[]),
        ]))
        .await;
    assert_eq!(state.status(), TaskStatus::Failed);
    let loud = latest(&state, "loud");
    let out = loud.output.as_ref().unwrap();
    assert_eq!(out["exit_code"], 0);
    let tail = out["stdout_tail"].as_str().unwrap();
    assert_eq!(tail.len(), 4096, "the last 4096 bytes are kept");
    assert!(tail.ends_with("x\nend\n"));
    assert_eq!(out["truncated_bytes"], 10_000 + 1 + 4 - 4096);
    assert_eq!(out["stderr_tail"], "warn\n");
    let bad = latest(&state, "bad");
    assert_eq!(bad.status, CheckpointStatus::Failed);
    assert_eq!(bad.output.as_ref().unwrap()["exit_code"], 3);
    assert_eq!(bad.error.as_deref(), Some("command exited with status 3"));
    assert!(
        state
            .head
            .error
            .as_deref()
            .unwrap()
            .contains("step `bad` failed: command exited with status 3")
    );
    h.stored(&state).await;
}

#[tokio::test]
async fn a_failed_step_stops_only_its_dependants() {
    let h = harness();
    let state = h
        .run(plan(vec![
            step("root", "true", &[]),
            step("broken", "false", &["root"]),
            step("child", "true", &["broken"]),
            step("grandchild", "true", &["child"]),
            step("sibling", "true", &["root"]),
            step("after-sibling", "true", &["sibling"]),
        ]))
        .await;
    assert_eq!(state.status(), TaskStatus::Failed);
    for ok in ["root", "sibling", "after-sibling"] {
        assert_eq!(
            latest(&state, ok).status,
            CheckpointStatus::Completed,
            "{ok}"
        );
    }
    assert_eq!(latest(&state, "broken").status, CheckpointStatus::Failed);
    for skipped in ["child", "grandchild"] {
        let cp = latest(&state, skipped);
        assert_eq!(cp.status, CheckpointStatus::Skipped, "{skipped}");
        assert!(
            cp.metadata["skipped_reason"]
                .as_str()
                .unwrap()
                .contains("failed")
        );
    }
    assert!(
        !state
            .checkpoints
            .iter()
            .any(|c| c.kind == CheckpointType::TaskComplete)
    );
    h.stored(&state).await;
}

#[tokio::test]
async fn fail_fast_starts_nothing_after_the_first_failure() {
    let h = harness_with(Arc::new(CommandExecutor::unsandboxed()), 1);
    let mut p = plan(vec![
        step("a", "false", &[]),
        step("b", "true", &[]),
        step("c", "true", &[]),
    ]);
    p.fail_fast = true;
    let state = h.run(p).await;
    assert_eq!(state.status(), TaskStatus::Failed);
    for never in ["b", "c"] {
        let cp = latest(&state, never);
        assert_eq!(cp.status, CheckpointStatus::Skipped);
        assert!(
            cp.metadata["skipped_reason"]
                .as_str()
                .unwrap()
                .contains("fail_fast")
        );
        assert_eq!(
            cp.duration_ms, None,
            "a step that never ran has no duration"
        );
    }
}

#[tokio::test]
async fn a_step_past_its_timeout_is_stopped_and_fails() {
    let h = harness();
    let mut slow = step("slow", "sleep 30", &[]);
    slow.timeout_ms = Some(150);
    // A timeout is transient and retried by default; here it must simply fail.
    slow.recovery.insert(
        rein_protocol::ErrorType::Transient,
        rein_protocol::RecoveryStrategy::action(rein_protocol::RecoveryAction::Abort),
    );
    let started = std::time::Instant::now();
    let state = h.run(plan(vec![slow])).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the step was stopped, not waited for"
    );
    let cp = latest(&state, "slow");
    assert_eq!(cp.status, CheckpointStatus::Failed);
    assert!(
        cp.error
            .as_deref()
            .unwrap()
            .starts_with("timed out after 150ms"),
        "{:?}",
        cp.error
    );
    assert_eq!(cp.output.as_ref().unwrap()["timed_out"], true);
}

/// An in-process executor that records how many steps run at once.
#[derive(Debug, Default)]
struct Gauge {
    now: AtomicUsize,
    max: AtomicUsize,
}

#[async_trait]
impl StepExecutor for Gauge {
    async fn execute(&self, _: StepRequest, _: CancellationToken) -> StepOutcome {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(40)).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        StepOutcome::Passed { output: None }
    }
}

#[tokio::test]
async fn ready_steps_run_concurrently_up_to_the_limit() {
    let gauge = Arc::new(Gauge::default());
    let h = harness_with(gauge.clone(), 3);
    let steps = (0..7)
        .map(|i| step(&format!("s{i}"), "true", &[]))
        .collect();
    let state = h.run(plan(steps)).await;
    assert_eq!(state.status(), TaskStatus::Completed);
    assert_eq!(gauge.max.load(Ordering::SeqCst), 3);

    let gauge = Arc::new(Gauge::default());
    let h = harness_with(gauge.clone(), 8);
    let mut p = plan(
        (0..5)
            .map(|i| step(&format!("s{i}"), "true", &[]))
            .collect(),
    );
    p.max_parallel = Some(2);
    h.run(p).await;
    assert_eq!(
        gauge.max.load(Ordering::SeqCst),
        2,
        "the plan's own limit wins"
    );
}

/// Starts a run, stops it (as a crash would) once `step` is running, and returns the task.
/// An in-process executor that panics on the step named `boom` and lets every
/// other step take a little while.
#[derive(Debug, Default)]
struct Panicky;

#[async_trait]
impl StepExecutor for Panicky {
    async fn execute(&self, request: StepRequest, _: CancellationToken) -> StepOutcome {
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_ne!(request.step.id, "boom", "out of cheese");
        StepOutcome::Passed { output: None }
    }
}

#[tokio::test]
async fn a_step_whose_executor_panics_fails_alone() {
    let h = harness_with(Arc::new(Panicky), 4);
    let state = h
        .run(plan(vec![
            step("boom", "true", &[]),
            step("sibling", "true", &[]),
            step("after-boom", "true", &["boom"]),
            step("after-sibling", "true", &["sibling"]),
        ]))
        .await;
    assert_eq!(state.status(), TaskStatus::Failed);
    let boom = latest(&state, "boom");
    assert_eq!(boom.status, CheckpointStatus::Failed);
    let error = boom.error.as_deref().unwrap();
    assert!(
        error.contains("the step's executor crashed") && error.contains("out of cheese"),
        "{error}"
    );
    // The step running beside it, and what follows that, are untouched.
    for ok in ["sibling", "after-sibling"] {
        assert_eq!(
            latest(&state, ok).status,
            CheckpointStatus::Completed,
            "{ok}"
        );
    }
    assert_eq!(
        latest(&state, "after-boom").status,
        CheckpointStatus::Skipped
    );
    h.stored(&state).await;
}

async fn interrupted_at(h: &Harness, p: TaskDecomposition, step: &str) -> TaskState {
    let state = h.create(p).await;
    let cancel = CancellationToken::new();
    let options = RunOptions {
        cancel: cancel.clone(),
        ..RunOptions::default()
    };
    let run = h.run_until_running(&state, options, step).await;
    cancel.cancel();
    let stopped = run.await.unwrap().unwrap();
    assert_eq!(
        stopped.status(),
        TaskStatus::InProgress,
        "a stop leaves the task resumable"
    );
    assert_eq!(latest(&stopped, step).status, CheckpointStatus::InProgress);
    stopped
}

#[tokio::test]
async fn an_interrupted_step_that_is_not_idempotent_asks_a_person_what_to_do() {
    let h = harness();
    let p = plan(vec![
        step("first", "true", &[]),
        step("deploy", "sleep 30", &["first"]),
        step("last", "true", &["deploy"]),
    ]);
    let stopped = interrupted_at(&h, p, "deploy").await;

    let paused = h.engine.run(stopped.id(), no_wait()).await.unwrap();
    assert_eq!(paused.status(), TaskStatus::Paused);
    let reason = paused.head.context.blocked_reason.clone().unwrap();
    assert!(
        reason.contains("`deploy` may have partly run")
            && reason.contains("--rerun deploy")
            && reason.contains("--skip deploy"),
        "{reason}"
    );
    assert_eq!(
        latest(&paused, "deploy").status,
        CheckpointStatus::InProgress,
        "nothing decided yet"
    );
    let requests = h.engine.approvals(&Default::default()).await.unwrap();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.trigger, rein_protocol::Trigger::TaskBlocked);
    assert_eq!(request.options, vec!["rerun", "skip", "abort"]);
    assert_eq!(request.step_id.as_deref(), Some("deploy"));
    assert_eq!(request.context.command.as_deref(), Some("sleep 30"));

    // Asking again without a choice keeps it paused on the same request; a wrong
    // choice is refused.
    let again = h.engine.run(stopped.id(), no_wait()).await.unwrap();
    assert_eq!(again.status(), TaskStatus::Paused);
    assert_eq!(
        h.engine.approvals(&Default::default()).await.unwrap().len(),
        1,
        "not asked twice"
    );
    let wrong = RunOptions {
        rerun: vec!["first".into()],
        ..no_wait()
    };
    let err = h.engine.run(stopped.id(), wrong).await.unwrap_err();
    assert!(
        matches!(err, EngineError::BadRequest(_))
            && err.to_string().contains("`first` was not interrupted"),
        "{err}"
    );

    // --skip on resume is the operator's answer to the request.
    let skip = RunOptions {
        skip: vec!["deploy".into()],
        decided_by: "ops".into(),
        ..RunOptions::default()
    };
    let done = h.engine.run(stopped.id(), skip).await.unwrap();
    assert_eq!(done.status(), TaskStatus::Completed);
    assert_eq!(latest(&done, "deploy").status, CheckpointStatus::Skipped);
    assert_eq!(latest(&done, "last").status, CheckpointStatus::Completed);
    let first_runs = done
        .checkpoints
        .iter()
        .filter(|c| c.step_id.as_deref() == Some("first"))
        .count();
    assert_eq!(first_runs, 1, "a completed step never runs again");
    let ledger = h.engine.ledger().await.unwrap();
    assert_eq!((ledger.len(), ledger[0].who.as_str()), (1, "ops"));
    assert_eq!(ledger[0].selected_option.as_deref(), Some("skip"));
    h.stored(&done).await;
}

#[tokio::test]
async fn answering_rerun_or_abort_for_an_interrupted_step() {
    for choice in ["rerun", "abort"] {
        let h = harness();
        let p = plan(vec![
            step(
                "deploy",
                "[ \"$REIN_ATTEMPT\" -gt 1 ] && exit 0; sleep 30",
                &[],
            ),
            step("after", "true", &["deploy"]),
        ]);
        let stopped = interrupted_at(&h, p, "deploy").await;
        let paused = h.engine.run(stopped.id(), no_wait()).await.unwrap();
        assert_eq!(paused.status(), TaskStatus::Paused);
        let request = h.last_request().await;
        h.engine
            .decide(choose(&request, choice, "ana"))
            .await
            .unwrap();
        let done = h.resume(stopped.id()).await;
        let attempts: Vec<_> = done
            .checkpoints
            .iter()
            .filter(|c| c.step_id.as_deref() == Some("deploy"))
            .collect();
        assert_eq!(
            attempts[0].status,
            CheckpointStatus::Failed,
            "the interrupted attempt"
        );
        if choice == "rerun" {
            assert_eq!(
                done.status(),
                TaskStatus::Completed,
                "re-run as attempt 2, which passes"
            );
            assert_eq!(attempts.len(), 2);
            assert_eq!(
                (attempts[1].attempt, attempts[1].status),
                (2, CheckpointStatus::Completed)
            );
            assert!(
                attempts[0]
                    .error
                    .as_deref()
                    .unwrap()
                    .contains("as ana decided")
            );
        } else {
            assert_eq!(done.status(), TaskStatus::Failed);
            assert!(
                attempts[0]
                    .error
                    .as_deref()
                    .unwrap()
                    .contains("abandoned by ana")
            );
            assert_eq!(latest(&done, "after").status, CheckpointStatus::Skipped);
        }
        h.stored(&done).await;
    }
}

#[tokio::test]
async fn rerun_runs_an_interrupted_step_again_as_a_new_attempt() {
    let h = harness();
    let mut s = step("work", "sleep 30", &[]);
    s.timeout_ms = Some(60_000);
    let stopped = interrupted_at(&h, plan(vec![s]), "work").await;
    let rerun = RunOptions {
        rerun: vec!["work".into()],
        cancel: CancellationToken::new(),
        ..RunOptions::default()
    };
    let run = h.run_until_running(&stopped, rerun, "work").await;
    h.engine
        .abort(stopped.id(), "test", "enough")
        .await
        .unwrap();
    let ended = run.await.unwrap().unwrap();
    assert_eq!(ended.status(), TaskStatus::Cancelled);
    let attempts: Vec<_> = ended
        .checkpoints
        .iter()
        .filter(|c| c.step_id.as_deref() == Some("work"))
        .collect();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0].status, CheckpointStatus::Failed);
    assert!(
        attempts[0]
            .error
            .as_deref()
            .unwrap()
            .contains("the operator chose --rerun")
    );
    assert_eq!(attempts[1].attempt, 2);
    assert_eq!(attempts[1].status, CheckpointStatus::Failed);
    assert!(
        attempts[1]
            .error
            .as_deref()
            .unwrap()
            .contains("aborted by test")
    );
    h.stored(&ended).await;
}

#[tokio::test]
async fn an_interrupted_idempotent_step_is_run_again_without_asking() {
    let h = harness();
    let mut s = step("fetch", "[ \"$REIN_ATTEMPT\" -gt 1 ] || sleep 30", &[]);
    s.idempotent = true;
    let stopped = interrupted_at(&h, plan(vec![s]), "fetch").await;
    let done = h.resume(stopped.id()).await;
    assert_eq!(done.status(), TaskStatus::Completed);
    let attempts: Vec<_> = done
        .checkpoints
        .iter()
        .filter(|c| c.step_id.as_deref() == Some("fetch"))
        .collect();
    assert_eq!(attempts.len(), 2);
    assert!(
        attempts[0]
            .error
            .as_deref()
            .unwrap()
            .contains("it is idempotent")
    );
    assert_eq!(
        (attempts[1].attempt, attempts[1].status),
        (2, CheckpointStatus::Completed)
    );
    h.stored(&done).await;
}

#[tokio::test]
async fn pause_lets_running_steps_finish_and_starts_no_more() {
    let h = harness();
    let p = plan(vec![step("a", "sleep 0.3", &[]), step("b", "true", &["a"])]);
    let state = h.create(p).await;
    let pause = CancellationToken::new();
    let options = RunOptions {
        pause: pause.clone(),
        ..RunOptions::default()
    };
    let run = h.run_until_running(&state, options, "a").await;
    pause.cancel();
    let paused = run.await.unwrap().unwrap();
    assert_eq!(paused.status(), TaskStatus::Paused);
    assert_eq!(
        latest(&paused, "a").status,
        CheckpointStatus::Completed,
        "the running step finished"
    );
    assert!(paused.latest_for_step("b").is_none(), "nothing new started");
    let done = h.resume(state.id()).await;
    assert_eq!(done.status(), TaskStatus::Completed);
    h.stored(&done).await;
}

#[tokio::test]
async fn pause_and_abort_reach_a_running_task_through_the_store() {
    let h = harness();
    let state = h
        .create(plan(vec![
            step("a", "sleep 0.3", &[]),
            step("b", "true", &["a"]),
        ]))
        .await;
    let run = h
        .run_until_running(&state, RunOptions::default(), "a")
        .await;
    let outcome = h.engine.pause(state.id(), "ops", "lunch").await.unwrap();
    assert!(
        matches!(outcome, ControlOutcome::Requested { .. }),
        "{outcome:?}"
    );
    let paused = run.await.unwrap().unwrap();
    assert_eq!(paused.status(), TaskStatus::Paused);
    assert_eq!(
        paused.head.context.blocked_reason.as_deref(),
        Some("paused by ops: lunch")
    );
    assert_eq!(
        h.engine.pause(state.id(), "ops", "again").await.unwrap(),
        ControlOutcome::AlreadyThere(TaskStatus::Paused)
    );

    // A paused task nobody runs is aborted at once.
    let ControlOutcome::Applied(cancelled) = h
        .engine
        .abort(state.id(), "ops", "not needed")
        .await
        .unwrap()
    else {
        panic!("expected the abort to apply directly");
    };
    assert_eq!(cancelled.status(), TaskStatus::Cancelled);
    let err = h.engine.pause(state.id(), "ops", "x").await.unwrap_err();
    assert!(matches!(err, EngineError::WrongStatus { .. }), "{err}");
    let err = h
        .engine
        .run(state.id(), RunOptions::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("nothing left to run"), "{err}");
}

#[tokio::test]
async fn abort_stops_running_steps_and_records_them_failed() {
    let h = harness();
    let state = h
        .create(plan(vec![
            step("long", "sleep 30", &[]),
            step("next", "true", &["long"]),
        ]))
        .await;
    let run = h
        .run_until_running(&state, RunOptions::default(), "long")
        .await;
    let started = std::time::Instant::now();
    h.engine
        .abort(state.id(), "ops", "wrong branch")
        .await
        .unwrap();
    let ended = run.await.unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(ended.status(), TaskStatus::Cancelled);
    assert_eq!(
        ended.head.error.as_deref(),
        Some("cancelled by ops: wrong branch")
    );
    assert_eq!(latest(&ended, "long").status, CheckpointStatus::Failed);
    assert!(ended.latest_for_step("next").is_none());
    h.stored(&ended).await;
}

#[tokio::test]
async fn a_task_cannot_be_run_twice_at_once() {
    let h = harness();
    let state = h.create(plan(vec![step("a", "sleep 0.3", &[])])).await;
    let first = h
        .run_until_running(&state, RunOptions::default(), "a")
        .await;
    let err = h
        .engine
        .run(state.id(), RunOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::Busy { .. }), "{err}");
    assert_eq!(
        first.await.unwrap().unwrap().status(),
        TaskStatus::Completed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_tasks_all_complete_with_consistent_logs() {
    let h = harness_with(Arc::new(CommandExecutor::unsandboxed()), 4);
    let mut runs = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let mut steps: Vec<TaskStep> = (0..10)
            .map(|i| step(&format!("s{i}"), "true", &[]))
            .collect();
        for s in &mut steps {
            s.action = StepAction::Noop;
        }
        let state = h.create(plan(steps)).await;
        let engine = h.engine.clone();
        runs.spawn(async move { engine.run(state.id(), RunOptions::default()).await });
    }
    while let Some(r) = runs.join_next().await {
        let state = r.unwrap().unwrap();
        assert_eq!(state.status(), TaskStatus::Completed);
        assert_eq!(h.stored(&state).await, state);
    }
}

#[tokio::test]
async fn a_stale_writer_is_refused_and_writes_nothing() {
    let h = harness();
    let state = h.run(plan(vec![step("a", "true", &[])])).await;
    let before = h.log(&state).await.len();
    let mut head = state.head.clone();
    head.description = "tampered".into();
    let stale = TaskWrite {
        task_id: state.id().clone(),
        expected_seq: 3,
        events: Vec::new(),
        summary: head.summary(),
        approvals: Vec::new(),
        ledger: Vec::new(),
        plan: None,
    };
    let err = h.store.save(stale.clone()).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict { expected: 3, .. }),
        "{err}"
    );
    assert_eq!(h.log(&state).await.len(), before);
    assert_eq!(h.stored(&state).await.head.description, "test");

    // At the right position, a write without events changes nothing either,
    // not even the status: the summary follows from the log.
    head.status = TaskStatus::Failed;
    let idle = TaskWrite {
        expected_seq: state.head.last_seq,
        summary: head.summary(),
        ..stale
    };
    h.store.save(idle).await.unwrap();
    let summary = h.store.load_summary(state.id()).await.unwrap().unwrap();
    assert_eq!(summary, state.head.summary());
    let failed = TaskFilter {
        status: Some(TaskStatus::Failed),
        ..TaskFilter::default()
    };
    assert!(h.store.list(&failed).await.unwrap().items.is_empty());
}
