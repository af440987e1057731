//! Plan–execute–verify through the engine, over a real SQLite store and real
//! child processes: contract → approval → execute → evidence → verification,
//! and what becomes of the contract when the approval is denied, verification
//! fails, or the task is picked up by another engine after a stop.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use rein_test_support::engine::{assert_completed, completes};

use std::sync::Arc;

use common::*;
use rein_core::ControlOutcome;
use rein_core::store::{ApprovalFilter, RecordFilter, RecordKind};
use rein_protocol::{
    ApprovalStatus, Capture, CheckStatus, ContractStatus, Decision, EvidenceKind, HarnessContract,
    Pev, Risk, StepAction, TaskChange, TaskDecomposition, TaskState, TaskStatus,
};

/// `setup` writes the file, `change` (plan–execute–verify) rewrites it and is
/// verified by `check`, and `after` depends on `change`.
fn pev_plan(check: &str, rollback: Option<&str>) -> TaskDecomposition {
    let mut change = step("change", "echo new > out.txt", &["setup"]);
    change.writes = vec!["out.txt".into()];
    change.pev = Some(Pev {
        verify: vec!["test -s out.txt".into(), check.into()],
        rollback: rollback.map(str::to_owned),
        contract_id: None,
    });
    plan(vec![
        step("setup", "echo old > out.txt", &[]),
        change,
        step("after", "true", &["change"]),
    ])
}

/// The one contract in the store.
/// A task of one pev step running `command`, created and started without
/// waiting: the task, and its step's contract.
async fn started(h: &Harness, command: &str) -> (rein_protocol::TaskState, String) {
    let state = h.create(pev_plan(command, None)).await;
    let id = contract_id(h).await;
    h.engine.run(state.id(), no_wait()).await.unwrap();
    (state, id)
}

/// The contract `id` as the store has it now.
async fn contract_now(h: &Harness, id: &str) -> rein_protocol::HarnessContract {
    h.engine.records().contract(id).await.unwrap()
}

/// Every contract the store has.
async fn contracts(h: &Harness) -> Vec<rein_protocol::HarnessContract> {
    h.engine
        .records()
        .contracts(&RecordFilter::new(RecordKind::Contract))
        .await
        .unwrap()
        .items
}

async fn contract_id(h: &Harness) -> String {
    let contracts = contracts(h).await;
    assert_eq!(contracts.len(), 1, "one contract: {contracts:?}");
    contracts[0].id.clone()
}

async fn pending_approval(h: &Harness, state: &TaskState) -> rein_protocol::ApprovalRequest {
    let filter = ApprovalFilter {
        status: Some(ApprovalStatus::Pending),
        task_id: Some(state.id().clone()),
        limit: None,
    };
    let pending = h.engine.approvals(&filter).await.unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    pending.into_iter().next().unwrap()
}

/// Answers the task's one pending approval, as ana.
async fn decide(h: &Harness, state: &TaskState, decision: Decision) {
    let request = pending_approval(h, state).await;
    h.engine
        .decide(answer(&request, decision, "ana"))
        .await
        .unwrap();
}

/// Runs the task until it waits for its contract's approval, then answers it.
async fn decide_contract(h: &Harness, state: &TaskState, decision: Decision) {
    h.engine.run(state.id(), no_wait()).await.unwrap();
    decide(h, state, decision).await;
}

fn statuses(c: &HarnessContract) -> Vec<ContractStatus> {
    c.history.iter().map(|h| h.to).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pev_step_runs_as_contract_approval_execution_evidence_and_verification() {
    let h = harness();
    let state = h.create(pev_plan("grep -q new out.txt", None)).await;
    let stored = h.engine.plan(state.id()).await.unwrap();
    let ids: Vec<&str> = stored.steps.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "setup",
            "change",
            "after",
            "change.approve",
            "change.verify"
        ]
    );
    let by_id = |id: &str| stored.steps.iter().find(|s| s.id == id).unwrap();
    assert_eq!(by_id("change.approve").depends_on, ["setup"]);
    assert_eq!(by_id("change").depends_on, ["change.approve"]);
    assert_eq!(by_id("change.verify").depends_on, ["change"]);
    assert_eq!(
        by_id("after").depends_on,
        ["change.verify"],
        "dependants wait for verification"
    );

    // The contract is proposed with the task, and named by the step and its approval.
    let id = contract_id(&h).await;
    assert!(id.starts_with("hctr_"), "{id}");
    assert_eq!(
        by_id("change").pev.as_ref().unwrap().contract_id.as_deref(),
        Some(id.as_str())
    );
    let StepAction::Approval {
        title, description, ..
    } = &by_id("change.approve").action
    else {
        panic!("an approval");
    };
    assert!(title.contains(&id), "{title}");
    assert!(description.contains("grep -q new out.txt"), "{description}");
    let records = h.engine.records();
    let contract = records.contract(&id).await.unwrap();
    assert_eq!(contract.status, ContractStatus::Proposed);
    assert_eq!(contract.task_id.as_deref(), Some(state.id().as_str()));
    assert_eq!(contract.step_id.as_deref(), Some("change"));
    assert_eq!(contract.required_tools, ["echo"]);
    assert_eq!(contract.write_set[0].path.as_deref(), Some("out.txt"));
    // One file written with a plain tool: medium, derived.
    assert_eq!(
        (contract.risk, contract.risk_derived),
        (Some(Risk::Medium), true)
    );
    assert_eq!(
        contract.verification_plan,
        ["test -s out.txt", "grep -q new out.txt"]
    );

    // Nothing runs before a person approves.
    let paused = h.engine.run(state.id(), no_wait()).await.unwrap();
    assert_eq!(paused.status(), TaskStatus::Paused);
    assert!(paused.latest_for_step("change").is_none());
    assert_eq!(
        records.contract(&id).await.unwrap().status,
        ContractStatus::Proposed
    );
    decide(&h, &state, Decision::Approve).await;
    let done = h.resume(state.id()).await;
    assert_completed(&done);

    // In order: approval, execution, verification, then the dependant.
    let entered = |step: &str| latest(&done, step).started_at;
    assert!(entered("change.approve") <= entered("change"));
    assert!(entered("change") <= entered("change.verify"));
    assert!(entered("change.verify") <= entered("after"));
    let contract = records.contract(&id).await.unwrap();
    assert_eq!(
        statuses(&contract),
        [
            ContractStatus::Proposed,
            ContractStatus::Approved,
            ContractStatus::Executing,
            ContractStatus::Verified
        ]
    );

    // The evidence: what the step did and what each verifier said, captured by rein.
    assert_eq!(contract.evidence_bundle_ids.len(), 1);
    let bundle = records
        .evidence(&contract.evidence_bundle_ids[0])
        .await
        .unwrap();
    assert_eq!(bundle.harness_contract_id.as_deref(), Some(id.as_str()));
    assert_eq!(bundle.task_id.as_deref(), Some(state.id().as_str()));
    let kinds: Vec<(EvidenceKind, &str, Option<i32>)> = bundle
        .items
        .iter()
        .map(|i| (i.kind, i.title.as_str(), i.exit_code))
        .collect();
    assert_eq!(
        kinds,
        [
            (EvidenceKind::CommandOutput, "echo new > out.txt", Some(0)),
            (EvidenceKind::TestResult, "test -s out.txt", Some(0)),
            (EvidenceKind::TestResult, "grep -q new out.txt", Some(0)),
        ]
    );
    assert!(bundle.items.iter().all(|i| i.capture == Capture::Rein));
    assert!(
        bundle
            .checks
            .iter()
            .all(|c| c.status == CheckStatus::Passed)
    );
    assert_eq!(bundle.checks.len(), 2);
    assert_eq!(
        bundle.confidence,
        Some(rein_protocol::Confidence::Score(1.0))
    );
    // The harness runs steps unsandboxed, and the evidence says so.
    assert_eq!(
        bundle.risks,
        [
            "unsandboxed: `echo new > out.txt` ran with rein's own permissions",
            "unsandboxed: the verifier `test -s out.txt` ran with rein's own permissions",
            "unsandboxed: the verifier `grep -q new out.txt` ran with rein's own permissions",
        ]
    );
    let verify = latest(&done, "change.verify");
    assert_eq!(
        verify.output.as_ref().unwrap()["evidence"],
        bundle.id.as_str()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_verification_fails_the_contract_rolls_it_back_and_stops_the_dependants() {
    let h = harness();
    let state = h
        .create(pev_plan(
            "grep -q newer out.txt",
            Some("echo old > out.txt"),
        ))
        .await;
    let id = contract_id(&h).await;
    decide_contract(&h, &state, Decision::Approve).await;
    // A failed verification is a validation error: the task pauses for a person
    // (the plan's recovery policy may say otherwise).
    let done = h.resume(state.id()).await;
    assert_eq!(done.status(), TaskStatus::Paused);
    let error = latest(&done, "change.verify").error.clone().unwrap();
    assert!(
        error.contains("`grep -q newer out.txt` exited 1"),
        "{error}"
    );
    assert!(error.contains("rolled back"), "{error}");
    assert!(
        done.latest_for_step("after")
            .is_none_or(|c| c.output.is_none())
    );
    let workspace = done.head.resources.workspace_path.clone().unwrap();
    assert_eq!(
        std::fs::read_to_string(std::path::Path::new(&workspace).join("out.txt")).unwrap(),
        "old\n",
        "the rollback ran"
    );
    let records = h.engine.records();
    let contract = records.contract(&id).await.unwrap();
    assert_eq!(
        statuses(&contract)[2..],
        [
            ContractStatus::Executing,
            ContractStatus::Failed,
            ContractStatus::RolledBack
        ]
    );
    let bundle = records
        .evidence(&contract.evidence_bundle_ids[0])
        .await
        .unwrap();
    let checks: Vec<CheckStatus> = bundle.checks.iter().map(|c| c.status).collect();
    assert_eq!(checks, [CheckStatus::Passed, CheckStatus::Failed]);
    assert_eq!(
        bundle.confidence,
        Some(rein_protocol::Confidence::Score(0.5))
    );
    assert!(
        bundle
            .items
            .iter()
            .any(|i| i.title == "rollback: echo old > out.txt"),
        "{:?}",
        bundle.items
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_approval_rejects_the_contract_and_nothing_runs() {
    let h = harness();
    let state = h.create(pev_plan("true", None)).await;
    let id = contract_id(&h).await;
    decide_contract(&h, &state, Decision::Deny).await;
    let done = h.resume(state.id()).await;
    assert_eq!(done.status(), TaskStatus::Failed);
    let workspace = done.head.resources.workspace_path.clone().unwrap();
    assert_eq!(
        std::fs::read_to_string(std::path::Path::new(&workspace).join("out.txt")).unwrap(),
        "old\n",
        "the step never ran"
    );
    let contract = contract_now(&h, &id).await;
    assert_eq!(
        statuses(&contract),
        [ContractStatus::Proposed, ContractStatus::Rejected]
    );
    assert!(contract.evidence_bundle_ids.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_engine_over_the_same_store_finishes_what_the_first_started() {
    let h = harness();
    let (state, id) = started(&h, "grep -q new out.txt").await;
    let request = pending_approval(&h, &state).await;

    // A second engine, as after a restart: the plan, the pending approval and
    // the contract are all in the file.
    let engine = rein_test_support::engine::engine_in(h.dir.path())
        .build()
        .engine;
    engine
        .decide(answer(&request, Decision::Approve, "ana"))
        .await
        .unwrap();
    completes(&engine, state.id()).await;
    assert_eq!(
        engine.records().contract(&id).await.unwrap().status,
        ContractStatus::Verified
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_the_task_cancels_its_contract() {
    let h = harness();
    let (state, id) = started(&h, "true").await;
    h.engine
        .abort(state.id(), "ana", "not today")
        .await
        .unwrap();
    let contract = contract_now(&h, &id).await;
    assert_eq!(contract.status, ContractStatus::Cancelled, "{contract:?}");
}

/// A process that died between committing an abort and cancelling the
/// contracts leaves them open on a cancelled task; aborting again closes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_again_cancels_a_contract_an_interrupted_abort_left_open() {
    let h = harness();
    let (state, id) = started(&h, "true").await;
    // The abort's commit, and nothing after it.
    let mut rec = rein_core::recorder::Recorder::resume(h.engine.get(state.id()).await.unwrap());
    rec.task_event(TaskChange::TaskCancelled {
        reason: "not today".into(),
        by: "ana".into(),
    })
    .unwrap();
    let store: Arc<dyn rein_core::Store> = h.store.clone();
    rec.flush(&store, &tokio::sync::broadcast::channel(1).0)
        .await
        .unwrap();
    let open = contract_now(&h, &id).await;
    assert_ne!(open.status, ContractStatus::Cancelled, "{open:?}");

    let again = h.engine.abort(state.id(), "bo", "still not").await.unwrap();
    assert!(
        matches!(again, ControlOutcome::AlreadyThere(TaskStatus::Cancelled)),
        "{again:?}"
    );
    let contract = contract_now(&h, &id).await;
    assert_eq!(contract.status, ContractStatus::Cancelled, "{contract:?}");
}

/// A task restored from a snapshot is a new task: the contract of a step it
/// will run is its own, and running it leaves the original's contract alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_task_runs_under_a_contract_of_its_own() {
    let h = harness();
    let original = h.create(pev_plan("grep -q new out.txt", None)).await;
    let first = contract_id(&h).await;
    let snapshot = h.engine.snapshot(original.id()).await.unwrap();
    let restored = h.engine.restore(&snapshot.id).await.unwrap();

    let plan = h.engine.plan(restored.id()).await.unwrap();
    let step = plan.steps.iter().find(|s| s.id == "change").unwrap();
    let own = step.pev.as_ref().unwrap().contract_id.clone().unwrap();
    assert_ne!(own, first);
    let contract = contract_now(&h, &own).await;
    assert_eq!(contract.task_id.as_deref(), Some(restored.id().as_str()));
    assert_eq!(contract.status, ContractStatus::Proposed);

    decide_contract(&h, &restored, Decision::Approve).await;
    completes(&h.engine, restored.id()).await;
    let contract = contract_now(&h, &own).await;
    assert_eq!(contract.status, ContractStatus::Verified, "{contract:?}");
    let untouched = contract_now(&h, &first).await;
    assert_eq!(statuses(&untouched), [ContractStatus::Proposed]);
}

#[tokio::test]
async fn plans_that_cannot_run_as_pev_are_refused_naming_the_step() {
    let h = harness();
    let mut no_verify = step("x", "true", &[]);
    no_verify.pev = Some(Pev::default());
    let mut verify_other =
        rein_protocol::TaskStep::new("v", StepAction::Verify { step: "x".into() });
    verify_other.depends_on = vec!["x".into()];
    for (p, expected) in [
        (
            plan(vec![no_verify]),
            "step `x`: plan–execute–verify: it needs at least one `verify` command",
        ),
        (
            plan(vec![step("x", "true", &[]), verify_other]),
            "step `v`: plan–execute–verify: it verifies `x`, which is not a plan–execute–verify step",
        ),
    ] {
        let err = h
            .engine
            .create(rein_core::CreateTask::of(p))
            .await
            .unwrap_err();
        assert!(err.to_string().contains(expected), "{err}");
    }
    // Nothing was proposed for plans that were refused.
    let proposed = contracts(&h).await;
    assert!(proposed.is_empty(), "{proposed:?}");
}
