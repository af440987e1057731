//! Questions a running step asks a person (an agent asking permission): an
//! approval request of the step's checkpoint whose decision goes back to the
//! step while it runs — kept pending across a stopped run, taken up again when
//! the step asks the same question, withdrawn when nobody needs it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use async_trait::async_trait;
use rein_core::executor::Question;
use rein_core::store::ApprovalFilter;
use rein_core::{RunOptions, StepExecutor, StepOutcome, StepRequest};
use rein_protocol::{
    ApprovalContext, ApprovalRequest, ApprovalStatus, Decision, EventType, StepAction, TaskChange,
    TaskStatus, TaskStep, Trigger,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common;
use common::*;

/// Asks "may I install?" (unless told not to) and passes with the answer.
#[derive(Debug, Default)]
struct Asking {
    quiet: AtomicBool,
    asked: AtomicUsize,
}

fn question(timeout_ms: Option<u64>) -> Question {
    Question {
        key: "install:left-pad".into(),
        trigger: Trigger::SuspiciousCommand,
        title: "The agent wants to run `npm install left-pad`".into(),
        description: "allow it?".into(),
        options: vec!["allow_once".into(), "reject_once".into()],
        recommended: Some("allow_once".into()),
        context: ApprovalContext {
            command: Some("npm install left-pad".into()),
            ..ApprovalContext::default()
        },
        timeout_ms,
        on_expiry: Decision::Deny,
    }
}

#[async_trait]
impl StepExecutor for Asking {
    async fn execute(&self, request: StepRequest, cancel: CancellationToken) -> StepOutcome {
        if self.quiet.load(Ordering::SeqCst) {
            return StepOutcome::Passed {
                output: Some(json!({ "asked": false })),
            };
        }
        self.asked.fetch_add(1, Ordering::SeqCst);
        let timeout = request.step.timeout_ms;
        let asker = request.asker.expect("a running step can ask");
        asker.report(json!({ "sessionUpdate": "plan", "attempt": request.attempt }));
        let answer = tokio::select! {
            a = asker.ask(question(timeout)) => a,
            () = cancel.cancelled() => return StepOutcome::Cancelled,
        };
        match answer {
            Ok(r) => StepOutcome::Passed {
                output: Some(json!({
                    "status": r.status,
                    "option": r.response.and_then(|x| x.selected_option),
                })),
            },
            Err(e) => StepOutcome::Failed {
                error: e.to_string(),
                output: None,
                failure: rein_core::recovery::Failure::Internal,
            },
        }
    }
}

/// A step that may run again after rein stopped (as agent steps may).
fn agent_like(id: &str) -> TaskStep {
    TaskStep {
        idempotent: true,
        ..TaskStep::new(id, StepAction::Noop)
    }
}

fn setup() -> (Harness, Arc<Asking>) {
    let exec = Arc::new(Asking::default());
    (harness_with(exec.clone(), 4), exec)
}

/// Waits until the step's question is raised and stored; returns it.
async fn raised(
    h: &Harness,
    events: &mut tokio::sync::broadcast::Receiver<rein_protocol::HarnessEvent>,
) -> ApprovalRequest {
    loop {
        let e = events.recv().await.unwrap();
        if let TaskChange::HumanApprovalRequested { request } = &e.change {
            // The event is broadcast once committed: the store has the request.
            return h.engine.approval(&request.id).await.unwrap();
        }
    }
}

async fn all_requests(h: &Harness) -> Vec<ApprovalRequest> {
    h.engine
        .approvals(&ApprovalFilter::default())
        .await
        .unwrap()
}

/// Gives `response` while nobody runs the task, then resumes it: the step
/// `draft` runs again, asks its question a second time, and ends with `got`
/// as its output, the one request answered (no second one raised).
async fn answered_then_resumed(
    h: &Harness,
    exec: &Asking,
    state: &rein_protocol::TaskState,
    response: rein_protocol::ApprovalResponse,
    got: serde_json::Value,
) {
    h.engine.decide(response).await.unwrap();
    let done = h.resume(state.id()).await;
    assert_eq!(done.status(), TaskStatus::Completed);
    assert_eq!(exec.asked.load(Ordering::SeqCst), 2);
    assert_eq!(latest(&done, "draft").output.clone().unwrap(), got);
    let requests = all_requests(h).await;
    assert_eq!(requests.len(), 1, "no second request: {requests:?}");
    h.stored(&done).await;
}

type Running = tokio::task::JoinHandle<Result<rein_protocol::TaskState, rein_core::EngineError>>;

/// Runs the task in the background until its step has asked; returns the run
/// and the question's request as stored.
async fn run_until_asked(
    h: &Harness,
    state: &rein_protocol::TaskState,
    options: RunOptions,
) -> (Running, ApprovalRequest) {
    let mut events = h.engine.subscribe();
    let engine = h.engine.clone();
    let id = state.id().clone();
    let run = tokio::spawn(async move { engine.run(&id, options).await });
    let request = raised(h, &mut events).await;
    (run, request)
}

/// rein stops while the step waits for its answer; returns the question's
/// request and the state the stopped run left.
async fn stopped_while_asking(
    h: &Harness,
    state: &rein_protocol::TaskState,
) -> (ApprovalRequest, rein_protocol::TaskState) {
    let cancel = CancellationToken::new();
    let options = RunOptions {
        cancel: cancel.clone(),
        ..RunOptions::default()
    };
    let (run, request) = run_until_asked(h, state, options).await;
    cancel.cancel();
    (request, run.await.unwrap().unwrap())
}

#[tokio::test]
async fn a_running_step_asks_and_gets_the_decision_while_it_runs() {
    let (h, _) = setup();
    let state = h.create(plan(vec![agent_like("draft")])).await;
    let (run, request) = run_until_asked(&h, &state, RunOptions::default()).await;
    assert_eq!(request.status, ApprovalStatus::Pending);
    assert_eq!(request.question.as_deref(), Some("install:left-pad"));
    assert_eq!(request.step_id.as_deref(), Some("draft"));
    assert_eq!(request.options, ["allow_once", "reject_once"]);
    assert_eq!(request.trigger, Trigger::SuspiciousCommand);
    // The step is still running while it waits.
    let now = h.engine.get(state.id()).await.unwrap();
    assert_eq!(
        latest(&now, "draft").status,
        rein_protocol::CheckpointStatus::InProgress
    );
    h.engine
        .decide(choose(&request, "allow_once", "alice"))
        .await
        .unwrap();
    let done = run.await.unwrap().unwrap();
    assert_eq!(done.status(), TaskStatus::Completed);
    let output = latest(&done, "draft").output.clone().unwrap();
    assert_eq!(
        output,
        json!({ "status": "approved", "option": "allow_once" })
    );
    let log = h.log(&done).await;
    let received: Vec<_> = log
        .iter()
        .filter(|e| e.event_type() == EventType::HumanApprovalReceived)
        .collect();
    assert_eq!(received.len(), 1, "the step received the decision once");
    // What the step reported is in the log, before its question.
    let kinds: Vec<EventType> = log.iter().map(|e| e.event_type()).collect();
    let reported = kinds.iter().position(|k| *k == EventType::AgentUpdate);
    let asked = kinds
        .iter()
        .position(|k| *k == EventType::HumanApprovalRequested);
    assert!(reported.is_some() && reported < asked, "{kinds:?}");
    let update = log
        .iter()
        .find_map(|e| match &e.change {
            TaskChange::AgentUpdate { update, .. } => Some(update.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(update, json!({ "sessionUpdate": "plan", "attempt": 1 }));
    // The decision is in the ledger like any other.
    let ledger = h.engine.ledger().await.unwrap();
    assert!(
        ledger
            .iter()
            .any(|l| l.who == "alice" && l.selected_option.as_deref() == Some("allow_once"))
    );
    h.stored(&done).await;
}

#[tokio::test]
async fn a_question_rein_stopped_in_the_middle_of_is_answered_while_it_was_down_and_not_asked_again()
 {
    let (h, exec) = setup();
    let state = h.create(plan(vec![agent_like("draft")])).await;
    // rein stops; the question stays pending in the store.
    let (request, stopped) = stopped_while_asking(&h, &state).await;
    assert_eq!(stopped.status(), TaskStatus::InProgress);
    assert_eq!(
        h.engine.approval(&request.id).await.unwrap().status,
        ApprovalStatus::Pending
    );
    // Answered while nobody runs the task: the step runs again, asks the same
    // question, and gets bob's answer.
    answered_then_resumed(
        &h,
        &exec,
        &state,
        answer(&request, Decision::Deny, "bob"),
        json!({ "status": "denied", "option": null }),
    )
    .await;
}

#[tokio::test]
async fn a_pending_question_is_waited_on_again_after_a_restart() {
    let (h, exec) = setup();
    let state = h.create(plan(vec![agent_like("draft")])).await;
    let (request, _) = stopped_while_asking(&h, &state).await;
    // Resumed with the question still pending: the step waits on the same request.
    let engine = h.engine.clone();
    let id = state.id().clone();
    let run = tokio::spawn(async move { engine.run(&id, RunOptions::default()).await });
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while exec.asked.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the step runs again and asks");
    h.engine
        .decide(choose(&request, "reject_once", "carol"))
        .await
        .unwrap();
    let done = run.await.unwrap().unwrap();
    assert_eq!(
        latest(&done, "draft").output.clone().unwrap(),
        json!({ "status": "approved", "option": "reject_once" })
    );
    assert_eq!(all_requests(&h).await.len(), 1);
    h.stored(&done).await;
}

#[tokio::test]
async fn a_question_the_step_does_not_ask_again_is_withdrawn_when_the_step_ends() {
    let (h, exec) = setup();
    let state = h.create(plan(vec![agent_like("draft")])).await;
    let (request, _) = stopped_while_asking(&h, &state).await;
    exec.quiet.store(true, Ordering::SeqCst);
    let done = h.resume(state.id()).await;
    assert_eq!(done.status(), TaskStatus::Completed);
    let left = h.engine.approval(&request.id).await.unwrap();
    assert_eq!(left.status, ApprovalStatus::Denied);
    assert_eq!(
        left.response.unwrap().decided_by,
        rein_core::approvals::REVOKE_ACTOR
    );
    h.stored(&done).await;
}

#[tokio::test]
async fn aborting_the_task_withdraws_the_question_and_cancels_the_step() {
    let (h, _) = setup();
    let state = h.create(plan(vec![agent_like("draft")])).await;
    let (run, request) = run_until_asked(&h, &state, RunOptions::default()).await;
    h.engine
        .abort(state.id(), "dave", "changed my mind")
        .await
        .unwrap();
    let done = run.await.unwrap().unwrap();
    assert_eq!(done.status(), TaskStatus::Cancelled);
    let left = h.engine.approval(&request.id).await.unwrap();
    assert_eq!(left.status, ApprovalStatus::Denied);
    assert!(
        left.response
            .unwrap()
            .reason
            .unwrap()
            .contains("aborted by dave"),
        "the withdrawal says why"
    );
    // A late answer is refused, naming the withdrawal.
    let late = h
        .engine
        .decide(answer(&request, Decision::Approve, "erin"))
        .await;
    assert!(matches!(
        late,
        Err(rein_core::EngineError::AlreadyDecided { .. })
    ));
    h.stored(&done).await;
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_question_expires_at_its_deadline_with_its_default() {
    let clock = Arc::new(rein_core::clock::TokioClock::new());
    let exec = Arc::new(Asking::default());
    let h = harness_on(exec, clock);
    let mut step = agent_like("draft");
    step.timeout_ms = Some(60_000);
    let state = h.create(plan(vec![step])).await;
    let started = tokio::time::Instant::now();
    let done = h.resume(state.id()).await;
    assert_eq!(
        latest(&done, "draft").output.clone().unwrap(),
        json!({ "status": "expired", "option": null })
    );
    let waited = started.elapsed();
    assert!(
        waited >= std::time::Duration::from_secs(60) && waited < std::time::Duration::from_secs(62),
        "{waited:?}"
    );
    h.stored(&done).await;
}

#[tokio::test]
async fn with_no_wait_a_step_that_asks_is_stopped_and_the_task_pauses_until_the_answer() {
    let (h, exec) = setup();
    let state = h.create(plan(vec![agent_like("draft")])).await;
    let paused = h.engine.run(state.id(), no_wait()).await.unwrap();
    assert_eq!(paused.status(), TaskStatus::Paused);
    let reason = paused
        .head
        .context
        .blocked_reason
        .clone()
        .unwrap_or_default();
    let pending = all_requests(&h).await;
    assert_eq!(pending.len(), 1);
    let request = &pending[0];
    assert_eq!(request.status, ApprovalStatus::Pending);
    assert!(
        reason.contains(&format!("rein approvals approve {}", request.id)),
        "{reason}"
    );
    assert_eq!(
        latest(&paused, "draft").status,
        rein_protocol::CheckpointStatus::Failed,
        "the stopped attempt is closed; the step runs again on resume"
    );
    answered_then_resumed(
        &h,
        &exec,
        &state,
        choose(request, "allow_once", "frank"),
        json!({ "status": "approved", "option": "allow_once" }),
    )
    .await;
}
