//! The runner's side of approval steps: raising the request, waiting for it
//! durably, and turning the decision (or the expiry default) into the step's outcome.

use std::sync::Arc;
use std::time::Duration;

use rein_protocol::{
    ApprovalContext, ApprovalId, ApprovalRequest, ApprovalResponse, ApprovalStatus, ApprovedBy,
    Approver, Checkpoint, CheckpointId, Decision, StepAction, TaskChange, Trigger,
};

use super::{Progress, TaskRun};
use crate::approvals::EXPIRY_ACTOR;
use crate::clock::until;
use crate::context::RunOptions;
use crate::error::{EngineError, Result};
use crate::fold::APPROVAL_ID;
use crate::lifecycle::StepEvent;
use crate::recorder::SpanRef;

/// What a person may answer about a step that may have partly run.
pub const INTERRUPTED_CHOICES: [&str; 3] = ["rerun", "skip", "abort"];

/// What a step runs, for a person asked about it: its command, or its
/// agent's prompt.
pub(super) fn command_of(action: &StepAction) -> Option<String> {
    match action {
        StepAction::Command { run, .. } => Some(run.clone()),
        StepAction::Agent { prompt, .. } => Some(format!("agent: {prompt}")),
        StepAction::Noop | StepAction::Approval { .. } | StepAction::Verify { .. } => None,
    }
}

impl TaskRun<'_> {
    /// Opens the step's checkpoint and raises its request; the step then waits.
    pub(super) fn ask(&mut self, i: usize) -> Result<()> {
        let step = Arc::clone(&self.steps[i]);
        let StepAction::Approval {
            title,
            description,
            options,
            recommended,
            timeout_ms,
            on_expiry,
            trigger,
            priority,
        } = &step.action
        else {
            return Ok(());
        };
        let span = SpanRef::child_of(&self.rec.state.head.span_id);
        let checkpoint = Checkpoint::pending(
            self.rec.state.head.id.clone(),
            Some(step.id.clone()),
            step.checkpoint,
            self.attempts[i],
        );
        let checkpoint_id = self.rec.enter_checkpoint(checkpoint, &span)?;
        let now = self.ctx.config.clock.now();
        let request = ApprovalRequest {
            priority: priority.unwrap_or_else(|| trigger.priority()),
            description: if description.is_empty() {
                self.rec.state.head.description.clone()
            } else {
                description.clone()
            },
            options: options.clone(),
            recommended_option: recommended.clone(),
            context: ApprovalContext {
                risk_assessment: step.risk_description.clone(),
                ..ApprovalContext::default()
            },
            timeout_s: timeout_ms.map(|ms| ms.div_ceil(1000)),
            deadline: timeout_ms.map(|ms| {
                now + chrono::Duration::milliseconds(i64::try_from(ms).unwrap_or(i64::MAX))
            }),
            on_expiry: *on_expiry,
            ..ApprovalRequest::pending(
                self.rec.state.head.id.clone(),
                checkpoint_id.clone(),
                Some(step.id.clone()),
                *trigger,
                title.clone(),
                now,
            )
        };
        self.await_request(i, checkpoint_id, span, request)
    }

    /// Raises `request` (stored with the next commit) and makes step `i` wait on it.
    pub(super) fn await_request(
        &mut self,
        i: usize,
        checkpoint: CheckpointId,
        span: SpanRef,
        request: ApprovalRequest,
    ) -> Result<()> {
        self.rec.request_approval(request.clone(), &span)?;
        self.wait_on(i, StepEvent::Ask, checkpoint, span, request)
    }

    /// Step `i` waits on `request`, at `checkpoint`: asked now (`Ask`), or
    /// again after a delegation (`Reask`).
    fn wait_on(
        &mut self,
        i: usize,
        event: StepEvent,
        checkpoint: CheckpointId,
        span: SpanRef,
        request: ApprovalRequest,
    ) -> Result<()> {
        self.set(
            i,
            event,
            Progress::Awaiting {
                checkpoint,
                span,
                request: Box::new(request),
            },
        )?;
        Ok(())
    }

    /// Opens a `user_approval` checkpoint of step `i`'s current attempt,
    /// marked `mark` (why a person is asked about the step), for a question.
    pub(super) fn open_question(
        &mut self,
        i: usize,
        mark: (&str, serde_json::Value),
        span: &SpanRef,
    ) -> Result<CheckpointId> {
        let mut checkpoint = Checkpoint::pending(
            self.rec.state.head.id.clone(),
            Some(self.steps[i].id.clone()),
            rein_protocol::CheckpointType::UserApproval,
            self.attempts[i],
        );
        checkpoint.metadata.insert(mark.0.into(), mark.1);
        self.rec.enter_checkpoint(checkpoint, span)
    }

    /// A question whether step `i` runs again, is skipped or is aborted
    /// ([`INTERRUPTED_CHOICES`]), at `checkpoint`, showing what the step runs.
    pub(super) fn rerun_question(
        &self,
        i: usize,
        checkpoint: &CheckpointId,
        trigger: Trigger,
        title: String,
        description: String,
    ) -> ApprovalRequest {
        let step = &self.steps[i];
        ApprovalRequest {
            description,
            options: INTERRUPTED_CHOICES
                .iter()
                .map(|c| (*c).to_owned())
                .collect(),
            context: ApprovalContext {
                command: command_of(&step.action),
                ..ApprovalContext::default()
            },
            ..ApprovalRequest::pending(
                self.rec.state.head.id.clone(),
                checkpoint.clone(),
                Some(step.id.clone()),
                trigger,
                title,
                self.ctx.config.clock.now(),
            )
        }
    }

    /// A step left running by a stopped runner that is not idempotent may have partly
    /// run: ask whether to run it again, skip it, or abort it.
    pub(super) fn ask_interrupted(
        &mut self,
        i: usize,
        checkpoint: CheckpointId,
        leftover: Option<&str>,
    ) -> Result<()> {
        let id = &self.steps[i].id;
        let span = SpanRef::child_of(&self.rec.state.head.span_id);
        let request = self.rerun_question(
            i,
            &checkpoint,
            Trigger::TaskBlocked,
            format!("Step `{id}` may have partly run: run it again, skip it, or abort it?"),
            format!(
                "rein stopped while `{id}` was running, and the step is not idempotent. \
                 rerun: run it again; skip: go on without it; abort: fail the step (its dependants do not run).{}",
                leftover.map(|l| format!(" {l}.")).unwrap_or_default()
            ),
        );
        self.await_request(i, checkpoint, span, request)
    }

    /// `--rerun STEP` / `--skip STEP` on resume: for a step that is interrupted, the
    /// run takes them directly; for one whose interruption already raised a request,
    /// they are the operator's decision on that request.
    pub(super) async fn decide_operator_choices(&mut self, options: &RunOptions) -> Result<()> {
        if let Some(id) = options.rerun.iter().find(|id| options.skip.contains(id)) {
            return Err(EngineError::BadRequest(format!(
                "step `{id}` cannot be both re-run and skipped"
            )));
        }
        let choices = options
            .rerun
            .iter()
            .map(|s| (s, "rerun"))
            .chain(options.skip.iter().map(|s| (s, "skip")));
        for (id, choice) in choices {
            let Some(i) = self.steps.iter().position(|s| &s.id == id) else {
                return Err(EngineError::BadRequest(format!(
                    "the plan has no step `{id}`"
                )));
            };
            let request = match &self.progress[i] {
                Progress::Interrupted { .. } => continue,
                Progress::Awaiting { request, .. }
                    if !matches!(self.steps[i].action, StepAction::Approval { .. }) =>
                {
                    (**request).clone()
                }
                _ => {
                    return Err(EngineError::BadRequest(format!(
                        "step `{id}` was not interrupted; --rerun and --skip only apply to a step that was running when rein stopped"
                    )));
                }
            };
            if request.status != ApprovalStatus::Pending {
                continue; // already decided; applied below
            }
            let response = ApprovalResponse {
                request_id: request.id.clone(),
                decision: Decision::Approve,
                selected_option: Some(choice.to_owned()),
                reason: Some(format!("--{choice} {id} on resume")),
                decided_by: if options.decided_by.trim().is_empty() {
                    "operator".to_owned()
                } else {
                    options.decided_by.clone()
                },
                delegate_to: None,
                decided_at: chrono::Utc::now(),
            };
            let settled = match self.ctx.decide(response).await {
                Ok(settled) => settled,
                Err(EngineError::AlreadyDecided { current }) => *current,
                Err(e) => return Err(e),
            };
            if let Some(request) = self.progress.awaited_mut(i) {
                *request = settled;
            }
        }
        Ok(())
    }

    /// On resume: steps that were waiting for a person wait again (their requests
    /// live in the store, not in the stopped runner).
    pub(super) async fn reattach_approvals(&mut self) -> Result<()> {
        for i in 0..self.steps.len() {
            let Progress::Interrupted { checkpoint, .. } = &self.progress[i] else {
                continue;
            };
            let Some(cp) = self.rec.state.checkpoint(checkpoint) else {
                continue;
            };
            let Some(id) = cp.metadata.get(APPROVAL_ID).and_then(|v| v.as_str()) else {
                continue;
            };
            let id = ApprovalId::parse(id).map_err(|e| EngineError::BadRequest(e.to_string()))?;
            let request = self.ctx.approval(&id).await?;
            let span = SpanRef::child_of(&self.rec.state.head.span_id);
            self.set(
                i,
                StepEvent::Ask,
                Progress::Awaiting {
                    checkpoint: checkpoint.clone(),
                    span,
                    request: Box::new(request),
                },
            )?;
        }
        Ok(())
    }

    /// Requests settled while nobody was waiting for them take effect now.
    pub(super) fn apply_settled(&mut self) -> Result<()> {
        for request in self.awaited() {
            if request.status != ApprovalStatus::Pending {
                self.on_settled(request)?;
            }
        }
        Ok(())
    }

    /// The requests this run waits on: steps' and running steps' questions.
    pub(super) fn awaited(&self) -> Vec<ApprovalRequest> {
        self.waited_on().cloned().collect()
    }

    fn waited_on(&self) -> impl Iterator<Item = &ApprovalRequest> {
        // Most turns of a run wait on nobody: then no step needs a look.
        let steps = if self.awaiting_any() {
            &self.progress[..]
        } else {
            &[]
        };
        steps
            .iter()
            .filter_map(|p| match p {
                Progress::Awaiting { request, .. } => Some(&**request),
                _ => None,
            })
            .chain(self.questions.requests())
    }

    pub(super) fn awaiting_any(&self) -> bool {
        self.progress.awaiting > 0
    }

    /// How long until the nearest deadline of a request this run waits on.
    pub(super) fn next_deadline(&self) -> Option<Duration> {
        let now = self.ctx.config.clock.now();
        self.waited_on()
            .filter(|r| r.status == ApprovalStatus::Pending)
            .filter_map(|r| r.deadline)
            .min()
            .map(|d| until(now, d))
    }

    /// Looks in the store for decisions made by other processes.
    pub(super) async fn poll_approvals(&mut self) -> Result<()> {
        for waiting in self.awaited() {
            let Some(now) = self.ctx.store.get_approval(&waiting.id).await? else {
                continue;
            };
            if now.status != waiting.status || now.assigned_to != waiting.assigned_to {
                self.on_settled(now)?;
            }
        }
        Ok(())
    }

    /// Expires the requests whose deadline passed, applying their defaults.
    pub(super) async fn expire_due(&mut self) -> Result<()> {
        for waiting in self.awaited() {
            if self.ctx.is_overdue(&waiting) {
                let settled = self.ctx.expire_if_overdue(waiting).await?;
                self.on_settled(settled)?;
            }
        }
        Ok(())
    }

    /// The step waiting on request `id`: its index, checkpoint and span.
    fn awaiting_on(&self, id: &ApprovalId) -> Option<(usize, CheckpointId, SpanRef)> {
        self.progress.iter().enumerate().find_map(|(i, p)| match p {
            Progress::Awaiting {
                checkpoint,
                span,
                request,
            } if &request.id == id => Some((i, checkpoint.clone(), span.clone())),
            _ => None,
        })
    }

    /// Applies what happened to a request this run waits on.
    pub(super) fn on_settled(&mut self, request: ApprovalRequest) -> Result<()> {
        if self.answer_question(&request)? {
            return Ok(());
        }
        let Some((i, checkpoint, span)) = self.awaiting_on(&request.id) else {
            return Ok(()); // not ours, or already applied
        };
        self.rec
            .record(TaskChange::approval_received(&request), &span)?;
        if !matches!(self.steps[i].action, StepAction::Approval { .. }) {
            return self.settle_interrupted(i, checkpoint, span, request);
        }
        let duration_ms = self
            .rec
            .state
            .checkpoint(&checkpoint)
            .map_or(0, |c| crate::recorder::elapsed_ms(c.started_at));
        let (outcome, who) = match request.status {
            // Delegated: it keeps waiting, now for someone else.
            ApprovalStatus::Pending => {
                return self.wait_on(i, StepEvent::Reask, checkpoint, span, request);
            }
            ApprovalStatus::Approved => (Decision::Approve, decided_by(&request)),
            ApprovalStatus::Denied => (Decision::Deny, decided_by(&request)),
            ApprovalStatus::Skipped => (Decision::Skip, decided_by(&request)),
            ApprovalStatus::Expired => (request.on_expiry, EXPIRY_ACTOR.to_owned()),
        };
        // The wait for the person is a span of its own, with the ids the
        // step's events carry.
        if let Some(started) = self.rec.state.checkpoint(&checkpoint).map(|c| c.started_at) {
            crate::spans::export_span(
                "approve",
                &self.rec.state.head.trace_id,
                &span.span_id,
                span.parent_span_id.as_deref(),
                started,
                vec![
                    opentelemetry::KeyValue::new("step_id", self.steps[i].id.clone()),
                    opentelemetry::KeyValue::new("checkpoint_id", checkpoint.to_string()),
                    opentelemetry::KeyValue::new("decision", outcome.as_str()),
                    opentelemetry::KeyValue::new("decided_by", who.clone()),
                ],
            );
        }
        let reason = request.response.as_ref().and_then(|r| r.reason.clone());
        let why = match (request.status, &reason) {
            (ApprovalStatus::Expired, _) => format!(
                "no decision before the deadline; the default `{}` applied",
                request.on_expiry.as_str()
            ),
            (_, Some(reason)) => format!("{who}: {reason}"),
            (_, None) => who.clone(),
        };
        match outcome {
            Decision::Approve => {
                let option = request
                    .response
                    .as_ref()
                    .and_then(|r| r.selected_option.clone());
                let approved_by = if request.status == ApprovalStatus::Expired {
                    ApprovedBy {
                        kind: Approver::System,
                        who,
                    }
                } else {
                    ApprovedBy {
                        kind: Approver::User,
                        who,
                    }
                };
                self.rec.record(
                    TaskChange::CheckpointPassed {
                        checkpoint_id: checkpoint,
                        duration_ms,
                        output: Some(serde_json::json!({
                            "approval_id": request.id,
                            "status": request.status,
                            "selected_option": option,
                            "reason": reason,
                        })),
                        approved_by: Some(approved_by),
                    },
                    &span,
                )?;
                self.complete(i, StepEvent::Pass)?;
            }
            Decision::Skip => {
                self.skip_step(
                    i,
                    checkpoint,
                    &span,
                    duration_ms,
                    format!("skipped by {why}"),
                )?;
            }
            Decision::Deny | Decision::Delegate => {
                let error = if request.status == ApprovalStatus::Expired {
                    why
                } else {
                    format!("denied by {why}")
                };
                self.fail_step(i, checkpoint, &span, duration_ms, error)?;
            }
        }
        Ok(())
    }

    /// Applies the decision on a step that may have partly run.
    fn settle_interrupted(
        &mut self,
        i: usize,
        checkpoint: CheckpointId,
        span: SpanRef,
        request: ApprovalRequest,
    ) -> Result<()> {
        let who = match request.status {
            ApprovalStatus::Expired => EXPIRY_ACTOR.to_owned(),
            _ => decided_by(&request),
        };
        let choice = match request.status {
            // Delegated: it keeps waiting, now for someone else.
            ApprovalStatus::Pending => {
                return self.wait_on(i, StepEvent::Reask, checkpoint, span, request);
            }
            ApprovalStatus::Approved => request
                .response
                .as_ref()
                .and_then(|r| r.selected_option.clone())
                .unwrap_or_default(),
            ApprovalStatus::Skipped => "skip".to_owned(),
            ApprovalStatus::Denied | ApprovalStatus::Expired => "abort".to_owned(),
        };
        let duration_ms = self
            .rec
            .state
            .checkpoint(&checkpoint)
            .map_or(0, |c| crate::recorder::elapsed_ms(c.started_at));
        let escalation = self
            .rec
            .state
            .checkpoint(&checkpoint)
            .is_some_and(|c| c.kind == rein_protocol::CheckpointType::UserApproval);
        // Why the step was asked about: rein stopped in it, or (a fork's
        // question) it already ran in the source.
        let why = if self
            .rec
            .state
            .checkpoint(&checkpoint)
            .is_some_and(|c| c.metadata.contains_key(super::forked::FORK_QUESTION))
        {
            "it had already run in the task this one was forked from"
        } else {
            "rein stopped while it was running"
        };
        match choice.as_str() {
            "rerun" if escalation => {
                self.rec.record(
                    TaskChange::CheckpointPassed {
                        checkpoint_id: checkpoint,
                        duration_ms,
                        output: Some(serde_json::json!({ "approval_id": request.id, "selected_option": "rerun" })),
                        approved_by: Some(ApprovedBy { kind: Approver::User, who }),
                    },
                    &span,
                )?;
                self.run_again(i)?;
            }
            "rerun" => {
                self.rec.record(
                    super::to_run_again(
                        checkpoint,
                        duration_ms,
                        format!(
                            "interrupted: rein stopped while this step was running; running it again as {who} decided"
                        ),
                    ),
                    &span,
                )?;
                self.run_again(i)?;
            }
            "skip" => {
                self.skip_step(
                    i,
                    checkpoint,
                    &span,
                    duration_ms,
                    format!("skipped by {who}: {why}"),
                )?;
            }
            _ => {
                let error = format!("abandoned by {who}: {why}");
                self.fail_step(i, checkpoint, &span, duration_ms, error)?;
            }
        }
        Ok(())
    }

    /// Revokes a request nobody needs to answer any more, closing its step as skipped.
    pub(super) async fn withdraw(&mut self, request: ApprovalRequest, why: &str) -> Result<()> {
        let Some((i, checkpoint, span)) = self.awaiting_on(&request.id) else {
            return Ok(());
        };
        let revoked = self.ctx.revoke(request, why).await?;
        self.rec
            .record(TaskChange::approval_received(&revoked), &span)?;
        self.rec.record(
            TaskChange::CheckpointSkipped {
                checkpoint_id: checkpoint,
                reason: format!("not asked any more: {why}"),
                duration_ms: None,
            },
            &span,
        )?;
        self.set(i, StepEvent::Skip, Progress::Skipped)?;
        Ok(())
    }

    /// Why the task pauses when only people can move it on, and how to answer.
    pub(super) fn waiting_reason(&self) -> String {
        let task = &self.rec.state.head.id;
        let asks: Vec<String> = self
            .awaited()
            .iter()
            .map(|r| {
                let step = r.step_id.as_deref().unwrap_or("-");
                let forked = self
                    .rec
                    .state
                    .checkpoint(&r.checkpoint_id)
                    .is_some_and(|c| c.metadata.contains_key(super::forked::FORK_QUESTION));
                if r.trigger == Trigger::TaskBlocked {
                    let why = if forked {
                        "already ran in the task this one was forked from"
                    } else {
                        "may have partly run"
                    };
                    format!(
                        "{} (step `{step}` {why}: `rein tasks resume {task} --rerun {step}` or `--skip {step}`)",
                        r.id
                    )
                } else {
                    format!("{} (\"{}\")", r.id, r.title)
                }
            })
            .collect();
        let first = self
            .awaited()
            .first()
            .map(|r| r.id.to_string())
            .unwrap_or_default();
        format!(
            "waiting for a person to answer {}; answer with `rein approvals approve {first}` (or deny, skip), then `rein tasks resume {task}`",
            asks.join(", ")
        )
    }
}

fn decided_by(request: &ApprovalRequest) -> String {
    request
        .response
        .as_ref()
        .map_or_else(|| "unknown".to_owned(), |r| r.decided_by.clone())
}
