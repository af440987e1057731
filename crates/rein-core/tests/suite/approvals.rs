//! Approvals as durable pauses (spec `tasks.md` §4) over a real SQLite store: first
//! decision wins, delegation, deadlines and their defaults (on tokio's paused clock),
//! waiting across a stopped runner, and the ledger that records every decision.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use rein_core::clock::{Clock, TokioClock};
use rein_core::store::ApprovalFilter;
use rein_core::{ApprovalStore, EngineError, RunOptions};
use rein_protocol::{
    ApprovalRequest, ApprovalStatus, CheckpointStatus, Decision, LedgerKind, StepAction,
    TaskDecomposition, TaskState, TaskStatus, TaskStep, Trigger,
};

use crate::common;
use common::*;

/// build → ship (approve) → publish.
fn release(options: &[&str], timeout_ms: Option<u64>, on_expiry: Decision) -> TaskDecomposition {
    let ship = TaskStep {
        depends_on: vec!["build".into()],
        checkpoint: rein_protocol::CheckpointType::UserApproval,
        ..TaskStep::new(
            "ship",
            StepAction::Approval {
                title: "Publish the release notes?".into(),
                description: String::new(),
                options: options.iter().map(|o| (*o).to_owned()).collect(),
                recommended: options.first().map(|o| (*o).to_owned()),
                timeout_ms,
                on_expiry,
                trigger: Trigger::SignificantChange,
                priority: None,
            },
        )
    };
    // In-process steps around the approval: real child processes would let tokio's
    // paused clock run ahead while the runtime waits for them.
    let noop = |id: &str, deps: &[&str]| TaskStep {
        depends_on: deps.iter().map(|d| (*d).to_owned()).collect(),
        ..TaskStep::new(id, StepAction::Noop)
    };
    plan(vec![noop("build", &[]), ship, noop("publish", &["ship"])])
}

/// Runs the task in the background until its approval request exists; returns the run and the request.
async fn until_asked(
    h: &Harness,
    state: &TaskState,
    options: RunOptions,
) -> (
    tokio::task::JoinHandle<Result<TaskState, EngineError>>,
    ApprovalRequest,
) {
    let run = h.run_until_running(state, options, "ship").await;
    let filter = ApprovalFilter {
        task_id: Some(state.id().clone()),
        ..Default::default()
    };
    // The request is committed with the checkpoint that was just entered.
    let request = h.engine.approvals(&filter).await.unwrap().pop().unwrap();
    (run, request)
}

#[tokio::test]
async fn an_approval_pauses_the_step_until_a_person_approves() {
    let h = harness();
    let state = h
        .create(release(&["publish", "hold"], None, Decision::Deny))
        .await;
    let (run, request) = until_asked(&h, &state, RunOptions::default()).await;
    assert_eq!(request.status, ApprovalStatus::Pending);
    assert_eq!(request.step_id.as_deref(), Some("ship"));
    assert_eq!(request.recommended_option.as_deref(), Some("publish"));
    let cp = h.engine.get(state.id()).await.unwrap();
    assert_eq!(latest(&cp, "ship").status, CheckpointStatus::InProgress);
    assert!(
        cp.latest_for_step("publish").is_none(),
        "nothing after the approval has run"
    );

    let mut yes = answer(&request, Decision::Approve, "ana");
    yes.selected_option = Some("hold".into());
    let settled = h.engine.decide(yes).await.unwrap();
    assert_eq!(settled.status, ApprovalStatus::Approved);
    let done = run.await.unwrap().unwrap();
    assert_eq!(done.status(), TaskStatus::Completed);
    let ship = done.latest_for_step("ship").unwrap();
    assert_eq!(ship.status, CheckpointStatus::Completed);
    assert_eq!(ship.approved_by.as_ref().unwrap().who, "ana");
    assert_eq!(ship.output.as_ref().unwrap()["selected_option"], "hold");
    h.stored(&done).await;

    let ledger = h.engine.ledger().await.unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(
        (ledger[0].kind, ledger[0].who.as_str()),
        (LedgerKind::Approved, "ana")
    );
    assert_eq!(ledger[0].selected_option.as_deref(), Some("hold"));
    assert!(h.engine.verify_ledger().await.unwrap().1.is_empty());
}

#[tokio::test]
async fn the_first_decision_wins_and_a_second_is_told_who_won() {
    let h = harness();
    let state = h.create(release(&[], None, Decision::Deny)).await;
    let (run, request) = until_asked(&h, &state, RunOptions::default()).await;
    h.engine
        .decide(answer(&request, Decision::Deny, "bob"))
        .await
        .unwrap();
    let err = h
        .engine
        .decide(answer(&request, Decision::Approve, "ana"))
        .await
        .unwrap_err();
    let EngineError::AlreadyDecided { current } = &err else {
        panic!("{err}")
    };
    assert_eq!(current.status, ApprovalStatus::Denied);
    assert!(err.to_string().contains("already denied by bob"), "{err}");
    let failed = run.await.unwrap().unwrap();
    assert_eq!(failed.status(), TaskStatus::Failed);
    assert!(
        failed
            .latest_for_step("ship")
            .unwrap()
            .error
            .as_deref()
            .unwrap()
            .contains("denied by bob")
    );
    assert_eq!(latest(&failed, "publish").status, CheckpointStatus::Skipped);
    assert_eq!(
        h.engine.ledger().await.unwrap().len(),
        1,
        "the losing decision is not recorded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_decisions_exactly_one_wins_every_time() {
    let h = harness();
    let state = h.create(release(&[], None, Decision::Deny)).await;
    let (run, request) = until_asked(&h, &state, RunOptions::default()).await;
    let mut deciders = tokio::task::JoinSet::new();
    for n in 0..24 {
        let engine = h.engine.clone();
        let decision = if n % 2 == 0 {
            Decision::Approve
        } else {
            Decision::Skip
        };
        let response = answer(&request, decision, &format!("person{n}"));
        deciders.spawn(async move { engine.decide(response).await });
    }
    let mut winners = Vec::new();
    let mut told = Vec::new();
    while let Some(outcome) = deciders.join_next().await {
        match outcome.unwrap() {
            Ok(won) => winners.push(won),
            Err(EngineError::AlreadyDecided { current }) => told.push(current),
            Err(other) => panic!("unexpected: {other}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one decision wins");
    let winner = winners[0].response.as_ref().unwrap().decided_by.clone();
    assert_eq!(told.len(), 23);
    assert!(
        told.iter()
            .all(|c| c.response.as_ref().unwrap().decided_by == winner),
        "all told who won"
    );
    run.await.unwrap().unwrap();
    let ledger = h.engine.ledger().await.unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].who, winner);
}

#[tokio::test]
async fn skip_lets_the_plan_go_on_and_delegate_keeps_it_pending() {
    let h = harness();
    let state = h.create(release(&[], None, Decision::Deny)).await;
    let (run, request) = until_asked(&h, &state, RunOptions::default()).await;
    let mut hand_over = answer(&request, Decision::Delegate, "ana");
    hand_over.delegate_to = Some("carol".into());
    let delegated = h.engine.decide(hand_over).await.unwrap();
    assert_eq!(delegated.status, ApprovalStatus::Pending);
    assert_eq!(delegated.assigned_to.as_deref(), Some("carol"));
    // Delegated, it is carol's: nobody else decides it, nor hands it on.
    for (decision, who) in [(Decision::Approve, "ana"), (Decision::Deny, "bob")] {
        let err = h
            .engine
            .decide(answer(&request, decision, who))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, EngineError::NotAssigned { assigned_to, .. } if assigned_to == "carol"),
            "{err}"
        );
        assert_eq!(err.kind(), rein_core::ErrorKind::Forbidden);
        assert!(err.to_string().contains("only carol"), "{err}");
    }
    let mut again = answer(&request, Decision::Delegate, "ana");
    again.delegate_to = Some("mallory".into());
    assert!(h.engine.decide(again).await.is_err());
    h.engine
        .decide(answer(&request, Decision::Skip, "carol"))
        .await
        .unwrap();
    let done = run.await.unwrap().unwrap();
    assert_eq!(done.status(), TaskStatus::Completed);
    assert_eq!(latest(&done, "ship").status, CheckpointStatus::Skipped);
    assert_eq!(latest(&done, "publish").status, CheckpointStatus::Completed);
    let kinds: Vec<LedgerKind> = h
        .engine
        .ledger()
        .await
        .unwrap()
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, vec![LedgerKind::Delegated, LedgerKind::Skipped]);
}

#[tokio::test]
async fn decisions_that_do_not_fit_the_request_are_refused_naming_why() {
    let h = harness();
    let state = h
        .create(release(&["publish", "hold"], None, Decision::Deny))
        .await;
    let (run, request) = until_asked(&h, &state, RunOptions::default()).await;
    let mut wrong = answer(&request, Decision::Approve, "ana");
    wrong.selected_option = Some("yolo".into());
    let err = h.engine.decide(wrong).await.unwrap_err();
    assert!(
        err.to_string().contains("`yolo` is not an option")
            && err.to_string().contains("publish, hold"),
        "{err}"
    );
    let mut nobody = answer(&request, Decision::Delegate, "ana");
    nobody.delegate_to = None;
    assert!(
        h.engine
            .decide(nobody)
            .await
            .unwrap_err()
            .to_string()
            .contains("--to NAME")
    );
    let mut option_on_deny = answer(&request, Decision::Deny, "ana");
    option_on_deny.selected_option = Some("hold".into());
    assert!(h.engine.decide(option_on_deny).await.is_err());
    // Approving without an option takes the recommended one.
    let settled = h
        .engine
        .decide(answer(&request, Decision::Approve, "ana"))
        .await
        .unwrap();
    assert_eq!(
        settled.response.unwrap().selected_option.as_deref(),
        Some("publish")
    );
    run.await.unwrap().unwrap();
}

#[tokio::test]
async fn no_wait_pauses_and_a_decision_made_meanwhile_applies_on_resume() {
    let h = harness();
    let state = h.create(release(&[], None, Decision::Deny)).await;
    let paused = h.engine.run(state.id(), no_wait()).await.unwrap();
    assert_eq!(paused.status(), TaskStatus::Paused);
    let reason = paused.head.context.blocked_reason.clone().unwrap();
    assert!(reason.contains("rein approvals approve apr_"), "{reason}");
    let request = h
        .engine
        .approvals(&ApprovalFilter::default())
        .await
        .unwrap()
        .pop()
        .unwrap();
    h.engine
        .decide(answer(&request, Decision::Approve, "ana"))
        .await
        .unwrap();
    let done = h.resume(state.id()).await;
    assert_eq!(done.status(), TaskStatus::Completed);
    h.stored(&done).await;
}

/// How late after its deadline an expiry may land on the paused clock (the test
/// store holds the clock still during writes, so only timers move it).
const DRIFT: chrono::TimeDelta = chrono::TimeDelta::seconds(5);

#[tokio::test(start_paused = true)]
async fn at_the_deadline_the_request_expires_and_the_default_applies() {
    let clock = Arc::new(TokioClock::new());
    let h = harness_with_clock(clock.clone());
    let state = h
        .create(release(&[], Some(30 * 60 * 1000), Decision::Deny))
        .await;
    let done = h.resume(state.id()).await;
    let ended = clock.now();
    assert_eq!(done.status(), TaskStatus::Failed);
    let ship = done.latest_for_step("ship").unwrap();
    assert!(
        ship.error.as_deref().unwrap().contains("default `deny`"),
        "{:?}",
        ship.error
    );
    let request = h
        .engine
        .approvals(&ApprovalFilter::default())
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(request.status, ApprovalStatus::Expired);
    let deadline = request.deadline.unwrap();
    assert_eq!(
        deadline - request.created_at,
        chrono::TimeDelta::minutes(30)
    );
    assert!(
        ended >= deadline && ended < deadline + DRIFT,
        "ended {ended}, deadline {deadline}"
    );
    let ledger = h.engine.ledger().await.unwrap();
    assert_eq!((ledger.len(), ledger[0].kind), (1, LedgerKind::Expired));
    // A decision after the deadline is refused, naming the expiry.
    let err = h
        .engine
        .decide(answer(&request, Decision::Approve, "late"))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("already expired at its deadline"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_expiry_default_of_approve_lets_the_plan_go_on() {
    let h = harness_with_clock(Arc::new(TokioClock::new()));
    let state = h
        .create(release(&[], Some(60_000), Decision::Approve))
        .await;
    let done = h.resume(state.id()).await;
    assert_eq!(done.status(), TaskStatus::Completed);
    let ship = done.latest_for_step("ship").unwrap();
    assert_eq!(ship.approved_by.as_ref().unwrap().who, "system:deadline");
}

#[tokio::test(start_paused = true)]
async fn a_deadline_that_passed_while_no_runner_was_there_is_honoured_on_resume() {
    let h = harness_with_clock(Arc::new(TokioClock::new()));
    let state = h
        .create(release(&[], Some(10 * 60 * 1000), Decision::Skip))
        .await;
    // The runner stops (as a crash would) while the step waits.
    let cancel = tokio_util::sync::CancellationToken::new();
    let options = RunOptions {
        cancel: cancel.clone(),
        ..RunOptions::default()
    };
    let run = h.run_until_running(&state, options, "ship").await;
    cancel.cancel();
    let stopped = run.await.unwrap().unwrap();
    assert_eq!(stopped.status(), TaskStatus::InProgress);
    // Time passes beyond the deadline with nobody running the task.
    tokio::time::advance(Duration::from_secs(11 * 60)).await;
    let resumed_at = tokio::time::Instant::now();
    let done = h.resume(state.id()).await;
    // Settled at once, not after a fresh deadline.
    assert!(
        resumed_at.elapsed() < Duration::from_secs(5),
        "nothing left to wait for: {:?}",
        resumed_at.elapsed()
    );
    assert_eq!(done.status(), TaskStatus::Completed);
    assert_eq!(latest(&done, "ship").status, CheckpointStatus::Skipped);
    let ship_checkpoints = done
        .checkpoints
        .iter()
        .filter(|c| c.step_id.as_deref() == Some("ship"))
        .count();
    assert_eq!(ship_checkpoints, 1, "the waiting step was not asked again");
}

#[tokio::test(start_paused = true)]
async fn a_waiting_runner_that_restarts_waits_only_the_rest_of_the_time() {
    let clock = Arc::new(TokioClock::new());
    let h = harness_with_clock(clock.clone());
    let state = h
        .create(release(&[], Some(30 * 60 * 1000), Decision::Deny))
        .await;
    let cancel = tokio_util::sync::CancellationToken::new();
    let options = RunOptions {
        cancel: cancel.clone(),
        ..RunOptions::default()
    };
    let (run, asked) = until_asked(&h, &state, options).await;
    let deadline = asked.deadline.unwrap();
    // Twenty minutes in, the runner stops as a crash would, and a new one takes over.
    tokio::time::advance(Duration::from_secs(20 * 60)).await;
    cancel.cancel();
    run.await.unwrap().unwrap();
    let restarted = clock.now();
    let done = h.resume(state.id()).await;
    let ended = clock.now();
    assert_eq!(done.status(), TaskStatus::Failed, "expired, default deny");
    // The same request, with the same deadline, settled at that deadline: the new
    // runner waited the remaining ten minutes, not a fresh thirty.
    let requests = h
        .engine
        .approvals(&ApprovalFilter::default())
        .await
        .unwrap();
    assert_eq!(requests.len(), 1, "not asked again");
    assert_eq!(
        (requests[0].id.clone(), requests[0].deadline),
        (asked.id, Some(deadline))
    );
    assert!(restarted < deadline, "restarted before the deadline");
    assert!(
        ended >= deadline && ended < deadline + DRIFT,
        "ended {ended}, deadline {deadline}"
    );
}

#[tokio::test]
async fn aborting_a_waiting_task_revokes_its_request() {
    let h = harness();
    let state = h.create(release(&[], None, Decision::Deny)).await;
    let (run, request) = until_asked(&h, &state, RunOptions::default()).await;
    h.engine
        .abort(state.id(), "ops", "not today")
        .await
        .unwrap();
    let ended = run.await.unwrap().unwrap();
    assert_eq!(ended.status(), TaskStatus::Cancelled);
    let revoked = h.engine.approval(&request.id).await.unwrap();
    assert_eq!(revoked.status, ApprovalStatus::Denied);
    let ledger = h.engine.ledger().await.unwrap();
    assert_eq!(ledger.last().unwrap().kind, LedgerKind::Revoked);
    assert!(
        h.engine
            .decide(answer(&request, Decision::Approve, "ana"))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn aborting_a_paused_task_that_waits_on_a_person_revokes_the_question() {
    let h = harness();
    let state = h.create(release(&[], None, Decision::Deny)).await;
    let paused = h.engine.run(state.id(), no_wait()).await.unwrap();
    assert_eq!(paused.status(), TaskStatus::Paused);
    let request = h
        .engine
        .approvals(&ApprovalFilter::default())
        .await
        .unwrap()
        .pop()
        .unwrap();
    let outcome = h
        .engine
        .abort(state.id(), "ops", "not needed")
        .await
        .unwrap();
    let rein_core::ControlOutcome::Applied(cancelled) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(cancelled.status(), TaskStatus::Cancelled);
    assert_eq!(
        h.engine.approval(&request.id).await.unwrap().status,
        ApprovalStatus::Denied
    );
    assert_eq!(
        h.engine.ledger().await.unwrap().last().unwrap().kind,
        LedgerKind::Revoked
    );
    let err = h
        .engine
        .decide(answer(&request, Decision::Approve, "ana"))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("already denied by system:revoked"),
        "{err}"
    );
    h.stored(&cancelled).await;
}

#[tokio::test]
async fn an_admin_may_decide_a_request_delegated_to_someone_else() {
    let h = harness();
    let state = h.create(release(&[], None, Decision::Deny)).await;
    let (run, request) = until_asked(&h, &state, RunOptions::default()).await;
    let mut hand_over = answer(&request, Decision::Delegate, "ana");
    hand_over.delegate_to = Some("carol".into());
    h.engine.decide(hand_over).await.unwrap();
    let decided = h
        .engine
        .decide_overriding(answer(&request, Decision::Approve, "root"))
        .await
        .unwrap();
    assert_eq!(decided.status, ApprovalStatus::Approved);
    assert_eq!(decided.response.unwrap().decided_by, "root");
    assert_eq!(run.await.unwrap().unwrap().status(), TaskStatus::Completed);
}

/// More tasks waiting on people than may be starting at once: a run gives up
/// its place among the starting ones when it waits, so every one of them asks,
/// and a task started after them all still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_tasks_waiting_on_people_than_may_start_at_once_all_ask() {
    let h = harness();
    let mut runs = Vec::new();
    for _ in 0..40 {
        let state = h.create(release(&[], None, Decision::Deny)).await;
        let engine = h.engine.clone();
        let id = state.id().clone();
        runs.push(tokio::spawn(async move {
            engine.run(&id, RunOptions::default()).await
        }));
    }
    let pending = ApprovalFilter {
        status: Some(ApprovalStatus::Pending),
        ..Default::default()
    };
    let asked = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let n = h.store.list_approvals(&pending).await.unwrap().len();
            if n == 40 {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("all 40 tasks ask for their approval");
    assert_eq!(asked, 40);
    let after = tokio::time::timeout(
        Duration::from_secs(20),
        h.run(plan(vec![step("after", "true", &[])])),
    )
    .await
    .expect("a task started after them runs");
    assert_eq!(after.status(), TaskStatus::Completed);
    for run in runs {
        run.abort();
    }
}
