//! CP2 of a goal task, inside its run: the goal is decomposed (see
//! [`crate::goal`]) before any step exists, every attempt a checkpoint of
//! type `task_plan` that is durable before the model is asked. An accepted
//! answer's plan is stored with the `plan_decomposed` event in one
//! transaction; a refused one is recorded with its errors and sent back; a
//! crash mid-request leaves an in-progress checkpoint that the next run marks
//! interrupted and asks again (a completion changes nothing, so asking twice
//! is harmless).

use std::sync::Arc;
use std::time::Instant;

use rein_protocol::{
    ApprovedBy, Approver, Checkpoint, CheckpointStatus, CheckpointType, ErrorType, RunnerInfo,
    TaskChange, TaskDecomposition, TaskState, TaskStatus,
};
use serde_json::json;
use tokio::sync::mpsc;

use crate::context::{RunContext, RunOptions};
use crate::controls::RunnerMessage;
use crate::error::{EngineError, Result};
use crate::goal::{Answered, DecomposeError, Decomposition, Refused};
use crate::harness::completion::{Completion, CompletionFailure, CompletionRequest};
use crate::harness::isolated::CompletionError;
use crate::recorder::aborted_checkpoint;
use crate::recorder::{Recorder, SpanRef};
use crate::store::{ControlKind, StoreError};

/// What a run records when it takes a task up.
pub(crate) fn take_up_change(
    runner: &RunnerInfo,
    state: &TaskState,
    options: &RunOptions,
) -> TaskChange {
    let runner = Some(runner.clone());
    match state.status() {
        TaskStatus::Pending => TaskChange::TaskStarted { runner },
        _ => TaskChange::TaskResumed {
            runner,
            rerun: options.rerun.clone(),
            skip: options.skip.clone(),
        },
    }
}

/// Whether a plan is a goal still to be decomposed.
pub(crate) fn undecomposed(plan: &TaskDecomposition) -> bool {
    plan.goal.is_some() && plan.steps.is_empty()
}

/// Where CP2 left the task.
// One per run, moved once: its size does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Planned {
    /// The plan is stored; the run goes on to its steps.
    Plan(Recorder, TaskDecomposition),
    /// The task paused, failed or was cancelled, or the run was stopped.
    Ended(Box<TaskState>),
}

/// Whether a completion's failure may pass (the task pauses, and resuming it
/// asks again), or never will (the task fails).
fn passes(failure: &CompletionFailure) -> bool {
    matches!(
        failure,
        CompletionFailure::Completion(
            CompletionError::TimedOut
                | CompletionError::Failed(_)
                | CompletionError::Credential { .. }
                | CompletionError::Ended
        )
    )
}

/// The plan rules beyond the plan file's, as a goal's answer must meet them:
/// the permission rules (a high-risk step asks a person; a denied one is an
/// error sent back to the model).
pub(crate) fn plan_check(
    policy: &Arc<rein_sandbox::Policy>,
) -> impl Fn(TaskDecomposition) -> std::result::Result<TaskDecomposition, Vec<String>> + use<> {
    let policy = Arc::clone(policy);
    move |plan| {
        let strings = |e: crate::plan::PlanErrors| e.0.iter().map(ToString::to_string).collect();
        let plan = crate::permissions::apply(plan, &policy).map_err(strings)?;
        crate::plan::validate(plan).map_err(strings)
    }
}

fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl RunContext {
    /// Records how CP2 ended the task (`change`), commits it, and hands the
    /// task back.
    async fn end_with(&self, mut rec: Recorder, change: TaskChange) -> Result<Planned> {
        rec.task_event(change)?;
        rec.flush(&self.store, &self.events).await?;
        Ok(Planned::Ended(Box::new(rec.state)))
    }

    /// Decomposes a goal task's goal into its plan (CP2); see the module.
    pub(crate) async fn decompose_task(
        &self,
        state: TaskState,
        plan: &TaskDecomposition,
        options: &RunOptions,
        controls: &mut mpsc::UnboundedReceiver<RunnerMessage>,
    ) -> Result<Planned> {
        let goal = plan.goal.clone().unwrap_or_default();
        let goal_text = plan.original_task.clone();
        let mut rec = Recorder::resume(state);
        let task_id = rec.state.head.id.clone();
        rec.task_event(take_up_change(&self.runner, &rec.state, options))?;
        for cp in rec.state.checkpoints.clone() {
            if cp.kind == CheckpointType::TaskPlan && cp.status == CheckpointStatus::InProgress {
                rec.task_event(TaskChange::CheckpointFailed {
                    checkpoint_id: cp.id,
                    duration_ms: crate::recorder::elapsed_ms(cp.started_at),
                    error: "interrupted: rein stopped while the goal was being decomposed; asking again".into(),
                    output: None,
                    will_retry: true,
                    error_type: None,
                    retry_at: None,
                })?;
            }
        }
        // Two processes taking the same task up meet here: one gets through.
        rec.flush(&self.store, &self.events)
            .await
            .map_err(|e| match e {
                EngineError::Store(StoreError::Conflict { .. }) => EngineError::Raced {
                    task_id: task_id.clone(),
                },
                other => other,
            })?;
        let refused: Vec<Refused> = rec
            .state
            .checkpoints
            .iter()
            .filter(|c| c.kind == CheckpointType::TaskPlan)
            .filter_map(|c| c.output.as_ref()?.get("refused").cloned())
            .filter_map(|r| serde_json::from_value(r).ok())
            .collect();
        let workspace = rec.state.head.resources.workspace_path.clone();
        let listing = workspace
            .as_deref()
            .map(|w| crate::goal::list_workspace(std::path::Path::new(w)))
            .unwrap_or_default();
        let fail = |error: String| TaskChange::TaskFailed { error };
        let Some(completer) = self.completer.clone() else {
            let why = "this rein has no model runtime to decompose a goal with";
            return self.end_with(rec, fail(why.into())).await;
        };
        let mut d = match Decomposition::new(&goal_text, &goal, &listing) {
            Ok(d) => d.after(&refused),
            Err(e) => return self.end_with(rec, fail(e.to_string())).await,
        };
        if !d.has_attempts() {
            let last = refused.last().map(|r| r.errors.clone()).unwrap_or_default();
            let error = DecomposeError::Refused {
                attempts: d.budget(),
                last,
            };
            return self.end_with(rec, fail(error.to_string())).await;
        }
        let check = plan_check(&self.config.policy);
        let mut pausing: Option<String> = None;
        loop {
            let span = SpanRef::child_of(&rec.state.head.span_id);
            let request = d.request();
            // The attempt is the answer's: a request that rein's stop
            // interrupted gave none, and is not counted against the goal's
            // attempts (its checkpoint says it was interrupted).
            let attempt = d.attempt();
            let checkpoint = Checkpoint {
                input: Some(json!({
                    "goal": goal_text,
                    "route": request.route,
                    "attempts": d.budget(),
                    "workspace_paths_listed": listing.paths.len(),
                })),
                ..Checkpoint::pending(task_id.clone(), None, CheckpointType::TaskPlan, attempt)
            };
            let cp = rec.enter_checkpoint(checkpoint, &span)?;
            // The attempt is on record before the model is asked.
            rec.flush(&self.store, &self.events).await?;
            let started = Instant::now();
            let asked = ask(&*completer, &request, options, controls, &mut pausing).await;
            let ms = elapsed_ms(started);
            let answer = match asked {
                Asked::Stopped => return Ok(Planned::Ended(Box::new(rec.state))),
                Asked::Aborted { by, reason } => {
                    rec.record(aborted_checkpoint(cp, ms, &by), &span)?;
                    return self
                        .end_with(rec, TaskChange::TaskCancelled { reason, by })
                        .await;
                }
                Asked::Answer(answer) => *answer,
            };
            let (answered, served) = match answer {
                Ok(completion) => {
                    crate::harness::completion::meter(
                        &self.store,
                        &task_id,
                        "decompose",
                        &completion,
                    )
                    .await;
                    rec.record(
                        TaskChange::RuntimeSelected {
                            checkpoint_id: cp.clone(),
                            decision: Box::new(completion.selection.clone()),
                        },
                        &span,
                    )?;
                    let served = json!({
                        "runtime": completion.selection.selected,
                        "profile": completion.profile,
                        "request_durations_ms": completion.request_durations_ms,
                        "stop_reason": completion.stop_reason,
                    });
                    (d.answer(completion, &check), served)
                }
                // An answer that cannot be used (empty, a tool call) is
                // refused like one that is not JSON: asked again while the
                // goal's attempts last.
                Err(failure) => {
                    if let Some(why) = crate::goal::unusable(&failure) {
                        (d.unusable(why), serde_json::Value::Null)
                    } else {
                        let error = format!("the goal could not be decomposed: {failure}");
                        let again = passes(&failure);
                        rec.record(
                            TaskChange::CheckpointFailed {
                                checkpoint_id: cp,
                                duration_ms: ms,
                                error: error.clone(),
                                output: None,
                                will_retry: again,
                                error_type: None,
                                retry_at: None,
                            },
                            &span,
                        )?;
                        let change = if again {
                            TaskChange::TaskPaused {
                                reason: format!("{error}; resume the task to ask again"),
                            }
                        } else {
                            fail(error)
                        };
                        return self.end_with(rec, change).await;
                    }
                }
            };
            match answered {
                Answered::Accepted(mut done) => {
                    // What the goal's task may spend stays the person's,
                    // whatever the model's plan says.
                    done.plan.budget = plan.budget.or(done.plan.budget);
                    let steps: Vec<String> = done.plan.steps.iter().map(|s| s.id.clone()).collect();
                    let edges: usize = done.plan.steps.iter().map(|s| s.depends_on.len()).sum();
                    rec.record(
                        TaskChange::CheckpointPassed {
                            checkpoint_id: cp.clone(),
                            duration_ms: ms,
                            output: Some(json!({
                                "decomposition": done.answer,
                                "plan": { "steps": steps, "dependencies": edges },
                                "attempt": done.attempt,
                                "completion": served,
                            })),
                            approved_by: Some(ApprovedBy {
                                kind: Approver::System,
                                who: "plan_validator".into(),
                            }),
                        },
                        &span,
                    )?;
                    rec.record(
                        TaskChange::PlanDecomposed {
                            checkpoint_id: cp,
                            steps,
                        },
                        &span,
                    )?;
                    rec.replace_plan(done.plan.clone());
                    if let Some(reason) = pausing {
                        return self.end_with(rec, TaskChange::TaskPaused { reason }).await;
                    }
                    rec.flush(&self.store, &self.events).await?;
                    return Ok(Planned::Plan(rec, done.plan));
                }
                Answered::Refused { refused, again } => {
                    let errors = refused.errors.join("; ");
                    rec.record(
                        TaskChange::CheckpointFailed {
                            checkpoint_id: cp,
                            duration_ms: ms,
                            error: format!("the model's answer was refused: {errors}"),
                            output: Some(json!({ "refused": refused, "completion": served })),
                            will_retry: again,
                            error_type: Some(ErrorType::ValidationError),
                            retry_at: None,
                        },
                        &span,
                    )?;
                    if !again {
                        let error = DecomposeError::Refused {
                            attempts: d.budget(),
                            last: refused.errors,
                        };
                        return self.end_with(rec, fail(error.to_string())).await;
                    }
                    if let Some(reason) = pausing.take() {
                        return self.end_with(rec, TaskChange::TaskPaused { reason }).await;
                    }
                }
            }
        }
    }
}

/// What asking the model came to.
enum Asked {
    Answer(Box<std::result::Result<Completion, CompletionFailure>>),
    /// The run was stopped (`options.cancel`): the task stays as a crash leaves it.
    Stopped,
    Aborted {
        by: String,
        reason: String,
    },
}

/// One completion, with the run's controls heard meanwhile: a pause lets the
/// answer come and pauses after it; an abort or a stop drops the request.
async fn ask(
    completer: &dyn crate::harness::completion::Completer,
    request: &CompletionRequest,
    options: &RunOptions,
    controls: &mut mpsc::UnboundedReceiver<RunnerMessage>,
    pausing: &mut Option<String>,
) -> Asked {
    let call = completer.complete(request);
    tokio::pin!(call);
    loop {
        tokio::select! {
            biased;
            () = options.cancel.cancelled() => return Asked::Stopped,
            answer = &mut call => return Asked::Answer(Box::new(answer)),
            Some(message) = controls.recv() => {
                if let RunnerMessage::Control(request) = message {
                    match request.kind {
                        ControlKind::Pause => {
                            pausing.get_or_insert_with(|| {
                                format!("paused by {}: {}", request.by, request.reason)
                            });
                        }
                        ControlKind::Abort => {
                            return Asked::Aborted {
                                by: request.by,
                                reason: request.reason,
                            };
                        }
                    }
                }
            }
            () = options.pause.cancelled(), if pausing.is_none() => {
                *pausing = Some("paused by the operator (interrupt)".into());
            }
        }
    }
}
