//! Plan–execute–verify (spec shared-state §5): a plan step marked `pev` runs
//! as contract → approval → execute → evidence → verification, each part a
//! durable step of the task like any other.
//!
//! - When the task is created, the step gets a harness contract (`proposed`),
//!   an approve step `STEP.approve` before it that names the contract, and a
//!   verify step `STEP.verify` after it that the step's dependants wait for.
//! - The contract follows the steps: approved and executing when the step
//!   starts, rejected when the approval is denied or expires, failed when the
//!   step fails, cancelled when the step is skipped or the task aborted.
//!   [`sync`] derives this from the steps after every commit, so a task resumed
//!   after a crash brings its contracts up to date.
//! - The verify step records what the step did in an evidence bundle, runs
//!   each verifier command in the workspace (a check each), and settles the
//!   contract: `verified` when every verifier passes; otherwise `failed`, and
//!   `rolled_back` if the step's rollback command then succeeds. A failed
//!   verification fails the verify step, so the plan's recovery policy applies
//!   (retry, escalate to a person, …). Verification is idempotent: a verify
//!   step interrupted by a crash runs again and rebuilds its evidence.

use std::sync::Arc;

use rein_protocol::{
    Capture, CheckStatus, Confidence, ContractStatus, EvidenceBundle, EvidenceCheck, EvidenceItem,
    EvidenceKind, HarnessContract, PlannedAction, Risk, RiskLevel, StepAction, StepType,
    TaskDecomposition, TaskStep, TextOr,
};
use tokio_util::sync::CancellationToken;

use crate::contracts::Records;
use crate::executor::{CommandOutput, StepOutcome, StepRequest};
use crate::lifecycle::{Contracts, Machine};
use crate::plan::{PlanErrors, PlanIssue};
use crate::recovery::Failure;
use crate::store::{RecordFilter, RecordKind};
use crate::{EngineError, StepExecutor};

/// The id of the approve step of plan–execute–verify step `step`.
pub fn approve_id(step: &str) -> String {
    format!("{step}.approve")
}

/// The id of the verify step of plan–execute–verify step `step`.
pub fn verify_id(step: &str) -> String {
    format!("{step}.verify")
}

/// Adds the approve and verify steps of every `pev` step that has none yet
/// (a plan exported from a task has them already). Steps that depended on a
/// `pev` step wait for its verification instead.
pub fn expand(mut plan: TaskDecomposition) -> Result<TaskDecomposition, PlanErrors> {
    let mut issues = Vec::new();
    let verified: Vec<String> = plan
        .steps
        .iter()
        .filter_map(|s| match &s.action {
            StepAction::Verify { step } => Some(step.clone()),
            _ => None,
        })
        .collect();
    for s in &plan.steps {
        if let StepAction::Verify { step } = &s.action {
            let target = plan.steps.iter().find(|t| &t.id == step);
            if target.is_none_or(|t| t.pev.is_none()) {
                issues.push(PlanIssue::BadPev {
                    step: s.id.clone(),
                    detail: format!(
                        "it verifies `{step}`, which is not a plan–execute–verify step"
                    ),
                });
            }
        }
        let Some(pev) = &s.pev else { continue };
        if !matches!(s.action, StepAction::Command { .. }) {
            issues.push(PlanIssue::BadPev {
                step: s.id.clone(),
                detail: "plan–execute–verify runs a command; this step runs none".into(),
            });
        }
        if pev.verify.iter().all(|v| v.trim().is_empty()) {
            issues.push(PlanIssue::BadPev {
                step: s.id.clone(),
                detail: "it needs at least one `verify` command that checks its result".into(),
            });
        }
    }
    if !issues.is_empty() {
        return Err(PlanErrors(issues));
    }
    let mut added = Vec::new();
    let targets: Vec<usize> = (0..plan.steps.len())
        .filter(|&i| plan.steps[i].pev.is_some() && !verified.contains(&plan.steps[i].id))
        .collect();
    for i in targets {
        let id = plan.steps[i].id.clone();
        let (approve, verify) = parts(&plan.steps[i]);
        for other in &mut plan.steps {
            for dep in &mut other.depends_on {
                if *dep == id {
                    *dep = verify.id.clone();
                }
            }
        }
        plan.steps[i].depends_on = vec![approve.id.clone()];
        added.push(approve);
        added.push(verify);
    }
    plan.steps.extend(added);
    Ok(plan)
}

/// The approve and verify steps of `step`.
fn parts(step: &TaskStep) -> (TaskStep, TaskStep) {
    let mut approve = TaskStep::new(
        approve_id(&step.id),
        StepAction::approval(
            format!("Approve the contract of step `{}`?", step.id),
            describe(step),
        ),
    );
    approve.description = format!("approval of the contract of `{}`", step.id);
    approve.step_type = StepType::Approve;
    approve.checkpoint = rein_protocol::CheckpointType::UserApproval;
    approve.depends_on = step.depends_on.clone();
    approve.risk_level = step.risk_level;
    let mut verify = TaskStep::new(
        verify_id(&step.id),
        StepAction::Verify {
            step: step.id.clone(),
        },
    );
    verify.description = format!("verification of `{}`", step.id);
    verify.step_type = StepType::Review;
    verify.checkpoint = rein_protocol::CheckpointType::QualityGate;
    verify.depends_on = vec![step.id.clone()];
    verify.idempotent = true;
    verify.risk_level = step.risk_level;
    (approve, verify)
}

/// What a person approving the contract reads.
fn describe(step: &TaskStep) -> String {
    let pev = step.pev.clone().unwrap_or_default();
    let mut lines = vec![format!("Runs `{}`.", command_of(step))];
    if !step.writes.is_empty() {
        lines.push(format!("Writes: {}.", step.writes.join(", ")));
    }
    lines.push(format!("Verified by: {}.", pev.verify.join("; ")));
    lines.push(match &pev.rollback {
        Some(r) => format!("Rolled back by `{r}` if verification fails."),
        None => "No rollback if verification fails.".into(),
    });
    if let Some(c) = &pev.contract_id {
        lines.push(format!("Contract {c}."));
    }
    lines.join(" ")
}

/// The command a step runs ("" for a step that runs none).
fn command_of(step: &TaskStep) -> &str {
    match &step.action {
        StepAction::Command { run, .. } => run,
        _ => "",
    }
}

/// The contract a `pev` step proposes.
fn contract_of(
    step: &TaskStep,
    task_id: &str,
    session_id: &str,
    shared_state: Option<&str>,
) -> HarnessContract {
    let run = command_of(step).to_owned();
    let pev = step.pev.clone().unwrap_or_default();
    let tool = run.split_whitespace().next().unwrap_or("sh").to_owned();
    let mut success = vec![format!("`{run}` exits 0")];
    success.extend(pev.verify.iter().map(|v| format!("`{v}` exits 0")));
    HarnessContract {
        id: String::new(),
        goal: if step.description.is_empty() {
            format!("step `{}`", step.id)
        } else {
            step.description.clone()
        },
        status: ContractStatus::Proposed,
        planned_actions: vec![PlannedAction {
            title: step.id.clone(),
            tool_name: Some(tool.clone()),
            command: Some(run),
            ..PlannedAction::default()
        }],
        read_set: step
            .reads
            .iter()
            .map(|p| crate::shared_state::declared(p))
            .collect(),
        write_set: step
            .writes
            .iter()
            .map(|p| crate::shared_state::declared(p))
            .collect(),
        required_tools: vec![tool.into()],
        verification_plan: pev.verify.iter().map(|v| v.as_str().into()).collect(),
        rollback_plan: pev.rollback.as_deref().map(Into::into),
        success_criteria: success,
        // A step marked medium or high risk says so; a low one is derived.
        risk: match step.risk_level {
            RiskLevel::Low => None,
            RiskLevel::Medium => Some(Risk::Medium),
            RiskLevel::High => Some(Risk::High),
        },
        risk_derived: false,
        shared_state_id: shared_state.map(str::to_owned),
        session_id: Some(session_id.to_owned()),
        task_id: Some(task_id.to_owned()),
        step_id: Some(step.id.clone()),
        ..HarnessContract::default()
    }
}

/// Proposes the contract of every `pev` step that has none, and names it in
/// the step and its approve step.
pub(crate) async fn propose(
    records: &Records,
    plan: &mut TaskDecomposition,
    task_id: &str,
    session_id: &str,
) -> Result<Vec<String>, EngineError> {
    let mut made = Vec::new();
    for i in 0..plan.steps.len() {
        let step = &plan.steps[i];
        if step.pev.as_ref().is_none_or(|p| p.contract_id.is_some()) {
            continue;
        }
        let contract = contract_of(step, task_id, session_id, plan.shared_state.as_deref());
        let contract = match records.create_contract(contract, "rein").await {
            Ok(c) => c,
            Err(e) => {
                withdraw(records, &made, "the task could not be created").await;
                return Err(e);
            }
        };
        made.push(contract.id.clone());
        let id = plan.steps[i].id.clone();
        if let Some(pev) = plan.steps[i].pev.as_mut() {
            pev.contract_id = Some(contract.id.clone());
        }
        let text = describe(&plan.steps[i]);
        let approve = approve_id(&id);
        if let Some(a) = plan.steps.iter_mut().find(|s| s.id == approve)
            && let StepAction::Approval {
                title, description, ..
            } = &mut a.action
        {
            *title = format!("Approve contract {} for step `{id}`?", contract.id);
            *description = text;
        }
    }
    Ok(made)
}

/// Cancels contracts proposed for a task that was never created.
pub(crate) async fn withdraw(records: &Records, ids: &[String], why: &str) {
    for id in ids {
        if let Err(e) = records
            .transition_contract(id, ContractStatus::Cancelled, "rein", Some(why.into()))
            .await
        {
            tracing::warn!(contract = %id, error = %e, "cannot cancel the contract");
        }
    }
}

/// Cancels the contracts of `plan` that are not final (its task was aborted
/// while nobody ran it).
pub(crate) async fn cancel_open(records: &Records, plan: &TaskDecomposition, why: &str) {
    for step in &plan.steps {
        let Some(id) = step.pev.as_ref().and_then(|p| p.contract_id.as_deref()) else {
            continue;
        };
        if let Err(e) = advance(records, id, ContractStatus::Cancelled, "rein", why).await {
            tracing::warn!(contract = %id, error = %e, "cannot cancel the contract");
        }
    }
}

/// Moves a contract towards `target` along its flow (through `approved` on the
/// way to `executing`); nothing if it is there, past it, or cannot get there.
pub(crate) async fn advance(
    records: &Records,
    id: &str,
    target: ContractStatus,
    by: &str,
    reason: &str,
) -> Result<(), EngineError> {
    advance_decided(records, id, target, by, None, reason).await
}

/// [`advance`], with the move to `approved` made by `approver` — the person
/// who approved the step's approval — when one is known.
pub(crate) async fn advance_decided(
    records: &Records,
    id: &str,
    target: ContractStatus,
    by: &str,
    approver: Option<&str>,
    reason: &str,
) -> Result<(), EngineError> {
    let now = records.clock.now();
    let audit = crate::store::audit(now, by, &format!("contract.{}", target.as_str()), id);
    records
        .change_contract(id, &audit, |c| {
            let Some(path) = path(c.status, target) else {
                return Ok(None);
            };
            for to in path {
                let by = match (to, approver) {
                    (ContractStatus::Approved, Some(person)) => person,
                    _ => by,
                };
                crate::contracts::transition(c, to, by, Some(reason.to_owned()), now)?;
            }
            Ok(Some(()))
        })
        .await?;
    Ok(())
}

/// The statuses from `from` to `to` (excluding `from`), shortest first; `None`
/// if `from` is `to` or `to` cannot be reached.
fn path(from: ContractStatus, to: ContractStatus) -> Option<Vec<ContractStatus>> {
    if from == to {
        return None;
    }
    let mut queue = std::collections::VecDeque::from([vec![from]]);
    while let Some(route) = queue.pop_front() {
        let last = *route.last()?;
        for next in Contracts::TABLE
            .iter()
            .filter(|(from, _, _)| *from == last)
            .map(|&(_, _, to)| to)
        {
            if route.contains(&next) {
                continue;
            }
            let mut longer = route.clone();
            longer.push(next);
            if next == to {
                longer.remove(0);
                return Some(longer);
            }
            queue.push_back(longer);
        }
    }
    None
}

/// Everything the verify step of one `pev` step needs, owned so it can run in
/// a task of its own.
pub(crate) struct Verification {
    pub records: Records,
    pub executor: Arc<dyn StepExecutor>,
    /// The step verified, and the verify step's own request (its workspace,
    /// policy and attempt).
    pub step: Arc<TaskStep>,
    pub request: StepRequest,
    /// What the step's run recorded (its checkpoint's output).
    pub output: Option<serde_json::Value>,
    pub shared_state: Option<String>,
}

impl Verification {
    /// Records the evidence, runs the verifiers, settles the contract.
    pub(crate) async fn run(self, cancel: CancellationToken) -> StepOutcome {
        let Some(pev) = self.step.pev.clone() else {
            return failed(format!(
                "step `{}` is not plan–execute–verify",
                self.step.id
            ));
        };
        let Some(contract_id) = pev.contract_id.clone() else {
            return failed(format!("step `{}` has no contract", self.step.id));
        };
        // A contract verification has settled stays settled: running the
        // verify step again after a failure does not reopen it.
        match self.records.contract(&contract_id).await {
            Ok(c) if c.status == ContractStatus::Verified => {
                return StepOutcome::Passed {
                    output: Some(
                        serde_json::json!({ "contract": contract_id, "already": "verified" }),
                    ),
                };
            }
            Ok(c) if Contracts::is_final(c.status) || c.status == ContractStatus::Failed => {
                return StepOutcome::Failed {
                    error: format!(
                        "contract {contract_id} is already {}: its verification failed; skip this step to go on without it, or abort the task",
                        c.status.as_str()
                    ),
                    output: None,
                    failure: Failure::Validation,
                };
            }
            Ok(_) => {}
            Err(e) => return failed(format!("cannot read contract {contract_id}: {e}")),
        }
        let mut bundle = match self.bundle(&contract_id).await {
            Ok(b) => b,
            Err(e) => return failed(format!("cannot record the evidence: {e}")),
        };
        let now = self.records.clock.now();
        // Each run rebuilds what rein records; what people added stays.
        bundle.items.retain(|i| i.capture != Capture::Rein);
        bundle
            .checks
            .retain(|c| c.verifier.as_deref() != Some("rein"));
        let run = command_of(&self.step).to_owned();
        let step_output = parsed(self.output.as_ref());
        let _ = crate::contracts::add_item(
            &mut bundle,
            item(EvidenceKind::CommandOutput, &run, step_output.as_ref()),
            now,
            true,
        );
        bundle
            .risks
            .retain(|r| !matches!(r, TextOr::Text(t) if t.starts_with(UNSANDBOXED)));
        if unsandboxed(step_output.as_ref()) {
            bundle
                .risks
                .push(format!("{UNSANDBOXED}: `{run}` ran with rein's own permissions").into());
        }
        let mut failures = Vec::new();
        for (n, command) in pev.verify.iter().enumerate() {
            let (outcome, output) = self.command(command, &cancel).await;
            if matches!(outcome, StepOutcome::Cancelled) {
                return StepOutcome::Cancelled;
            }
            let passed = matches!(outcome, StepOutcome::Passed { .. });
            if unsandboxed(output.as_ref()) {
                bundle.risks.push(
                    format!(
                        "{UNSANDBOXED}: the verifier `{command}` ran with rein's own permissions"
                    )
                    .into(),
                );
            }
            let _ = crate::contracts::add_item(
                &mut bundle,
                item(EvidenceKind::TestResult, command, output.as_ref()),
                now,
                true,
            );
            let detail = summary(output.as_ref(), &outcome);
            let _ = crate::contracts::add_check(
                &mut bundle,
                EvidenceCheck {
                    id: format!("verify_{}", n + 1),
                    name: command.clone(),
                    status: if passed {
                        CheckStatus::Passed
                    } else {
                        CheckStatus::Failed
                    },
                    verifier: Some("rein".into()),
                    detail: Some(detail.clone()),
                    command: Some(command.clone()),
                    ..EvidenceCheck::default()
                },
                now,
            );
            if !passed {
                failures.push(format!("`{command}` {detail}"));
            }
        }
        let total = pev.verify.len().max(1) as f64;
        bundle.confidence = Some(Confidence::Score((total - failures.len() as f64) / total));
        bundle.summary = if failures.is_empty() {
            format!("`{run}` ran and {} verifier(s) passed", pev.verify.len())
        } else {
            format!(
                "`{run}` ran; {} of {} verifier(s) failed",
                failures.len(),
                pev.verify.len()
            )
        };
        if !failures.is_empty() && pev.rollback.is_none() {
            bundle
                .risks
                .push("verification failed and the step has no rollback".into());
        }
        let mut rolled_back = None;
        if !failures.is_empty()
            && let Some(rollback) = &pev.rollback
        {
            let (outcome, output) = self.command(rollback, &cancel).await;
            if matches!(outcome, StepOutcome::Cancelled) {
                return StepOutcome::Cancelled;
            }
            let mut rb = item(EvidenceKind::CommandOutput, rollback, output.as_ref());
            rb.title = format!("rollback: {rollback}");
            let _ = crate::contracts::add_item(&mut bundle, rb, now, true);
            rolled_back = Some(matches!(outcome, StepOutcome::Passed { .. }));
            if rolled_back == Some(false) {
                bundle.risks.push(
                    format!(
                        "the rollback `{rollback}` failed: {}",
                        summary(output.as_ref(), &outcome)
                    )
                    .into(),
                );
            }
        }
        let bundle_id = bundle.id.clone();
        if let Err(e) = self
            .records
            .change_evidence(&bundle_id, "rein", "evidence.verify", |b, _| {
                *b = bundle.clone();
                Ok(())
            })
            .await
        {
            return failed(format!("cannot record the evidence: {e}"));
        }
        let (target, reason) = if failures.is_empty() {
            (ContractStatus::Verified, "every verifier passed".to_owned())
        } else {
            (
                ContractStatus::Failed,
                format!("verification failed: {}", failures.join("; ")),
            )
        };
        let settle = async {
            advance(&self.records, &contract_id, target, "rein", &reason).await?;
            if rolled_back == Some(true) {
                advance(
                    &self.records,
                    &contract_id,
                    ContractStatus::RolledBack,
                    "rein",
                    "the rollback command succeeded",
                )
                .await?;
            }
            Ok::<_, EngineError>(())
        };
        if let Err(e) = settle.await {
            return failed(format!("cannot settle contract {contract_id}: {e}"));
        }
        let output = serde_json::json!({
            "contract": contract_id,
            "evidence": bundle_id,
            "checks": bundle.checks.iter().filter(|c| c.verifier.as_deref() == Some("rein")).count(),
            "failed": failures.len(),
            "rolled_back": rolled_back,
        });
        if failures.is_empty() {
            StepOutcome::Passed {
                output: Some(output),
            }
        } else {
            let rollback = match rolled_back {
                Some(true) => "; rolled back",
                Some(false) => "; the rollback failed",
                None => "",
            };
            StepOutcome::Failed {
                error: format!(
                    "verification of `{}` failed: {}{rollback} (contract {contract_id}, evidence {bundle_id})",
                    self.step.id,
                    failures.join("; ")
                ),
                output: Some(output),
                failure: Failure::Validation,
            }
        }
    }

    /// The contract's evidence bundle from this task, made if there is none.
    async fn bundle(&self, contract_id: &str) -> Result<EvidenceBundle, EngineError> {
        let mut filter = RecordFilter::new(RecordKind::Evidence);
        filter.contract_id = Some(contract_id.to_owned());
        filter.task_id = Some(self.request.task_id.to_string());
        filter.limit = Some(1);
        let page = self.records.evidence_bundles(&filter).await?;
        if let Some(b) = page.items.into_iter().next() {
            return Ok(b);
        }
        let now = self.records.clock.now();
        let bundle = EvidenceBundle {
            summary: format!("verification of step `{}`", self.step.id),
            harness_contract_id: Some(contract_id.to_owned()),
            shared_state_id: self.shared_state.clone(),
            task_id: Some(self.request.task_id.to_string()),
            step_id: Some(self.step.id.clone()),
            ..EvidenceBundle::default()
        };
        let bundle = crate::contracts::prepare_evidence(bundle, now)?;
        self.records.insert_evidence(bundle, "rein", now).await
    }

    /// Runs `command` the way the step ran (same confinement, environment and
    /// limits), in its workspace.
    async fn command(
        &self,
        command: &str,
        cancel: &CancellationToken,
    ) -> (StepOutcome, Option<CommandOutput>) {
        let mut step = (*self.step).clone();
        step.id = self.request.step.id.clone();
        if let StepAction::Command { run, .. } = &mut step.action {
            *run = command.to_owned();
        }
        step.pev = None;
        let request = StepRequest {
            step: Arc::new(step),
            ..self.request.clone()
        };
        let outcome = self.executor.execute(request, cancel.clone()).await;
        let output = match &outcome {
            StepOutcome::Passed { output } | StepOutcome::Failed { output, .. } => {
                parsed(output.as_ref())
            }
            StepOutcome::Cancelled => None,
        };
        (outcome, output)
    }
}

/// How the evidence marks a run outside any sandbox.
const UNSANDBOXED: &str = "unsandboxed";

/// A command's recorded output, read once.
fn parsed(output: Option<&serde_json::Value>) -> Option<CommandOutput> {
    output.and_then(|o| serde_json::from_value(o.clone()).ok())
}

/// Whether a command's recorded output says it ran unsandboxed.
fn unsandboxed(output: Option<&CommandOutput>) -> bool {
    output.is_some_and(|o| o.sandbox == "none")
}

fn failed(error: String) -> StepOutcome {
    StepOutcome::Failed {
        error,
        output: None,
        failure: Failure::Unsupported,
    }
}

/// An item rein captured: what `command` printed and how it exited.
fn item(kind: EvidenceKind, command: &str, out: Option<&CommandOutput>) -> EvidenceItem {
    let content = out.map(|o| {
        let mut text = o.stdout_tail.clone();
        if !o.stderr_tail.is_empty() {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&o.stderr_tail);
        }
        text
    });
    EvidenceItem {
        id: String::new(),
        kind,
        title: command.to_owned(),
        content: content.filter(|c| !c.is_empty()),
        exit_code: out.and_then(|o| o.exit_code),
        capture: Capture::Rein,
        ..EvidenceItem::default()
    }
}

/// "exited 1", "timed out", …: how a verifier ended.
fn summary(out: Option<&CommandOutput>, outcome: &StepOutcome) -> String {
    match (out, outcome) {
        (_, StepOutcome::Passed { .. }) => "passed".into(),
        (Some(o), _) if o.timed_out => "timed out".into(),
        (Some(o), _) if o.exit_code.is_some() => {
            format!("exited {}", o.exit_code.unwrap_or_default())
        }
        (_, StepOutcome::Failed { error, .. }) => format!("failed: {error}"),
        (_, StepOutcome::Cancelled) => "was cancelled".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ContractStatus::*;

    #[test]
    fn a_contract_advances_through_approved_to_executing_and_never_backwards() {
        assert_eq!(path(Proposed, Executing), Some(vec![Approved, Executing]));
        assert_eq!(path(Executing, RolledBack), Some(vec![RolledBack]));
        assert_eq!(path(Failed, RolledBack), Some(vec![RolledBack]));
        assert_eq!(path(Executing, Executing), None);
        assert_eq!(path(Verified, Failed), None);
        assert_eq!(path(Executing, Approved), None);
        assert_eq!(
            path(Proposed, Verified),
            Some(vec![Approved, Executing, Verified])
        );
    }
}
