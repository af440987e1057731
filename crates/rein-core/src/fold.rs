//! State is the fold of the log: [`genesis`] turns a task's first event into its
//! state, [`apply`] applies every later one. The engine applies each event to its
//! in-memory state as it records it, and a test folds the stored log to check the
//! stored state equals it.

use rein_protocol::{CheckpointStatus, HarnessEvent, TaskChange, TaskContext, TaskHead};
use rein_protocol::{TaskResources, TaskState, TaskStatus};

use crate::lifecycle::{
    CheckpointEvent, IllegalTransition, TaskEvent, checkpoint_transition, task_transition,
};

/// Metadata key set on a failed checkpoint whose step runs again in a new attempt.
pub const WILL_RETRY: &str = "will_retry";

/// Metadata keys on a failed attempt: its error type, and when it may run again.
pub const ERROR_TYPE: &str = "error_type";
/// Checkpoint metadata: the runtime that served an agent step's attempt.
pub const RUNTIME: &str = "runtime";

pub const RETRY_AT: &str = "retry_at";
/// Metadata key on a checkpoint opened by recovery (an escalation), naming the action.
pub const RECOVERY: &str = "recovery";

/// Metadata keys on the checkpoint of a step waiting for a person.
pub const APPROVAL_ID: &str = "approval_id";
pub const APPROVAL_STATUS: &str = "approval_status";
/// The questions a running step asked (request id → status), on its checkpoint.
pub const QUESTIONS: &str = "questions";
/// Checkpoint metadata: the process group of a command step's attempt (a
/// [`rein_protocol::StepProcess`]).
pub const PROCESS: &str = "process";

/// An event that cannot be applied to the state it was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FoldError {
    #[error("event {seq} is out of order: the task's log is at {last_seq}")]
    OutOfOrder { seq: u64, last_seq: u64 },
    #[error("a task's log must start with task_created or task_restored, not {0}")]
    BadGenesis(&'static str),
    #[error("{0} can only be the first event of a task")]
    SecondGenesis(&'static str),
    #[error("event {seq} names checkpoint {checkpoint_id}, which the task does not have")]
    UnknownCheckpoint { seq: u64, checkpoint_id: String },
    #[error("event {seq} records checkpoint {checkpoint_id} a second time")]
    DuplicateCheckpoint { seq: u64, checkpoint_id: String },
    #[error("event {seq}: a new checkpoint must start pending, not {status}")]
    CheckpointNotPending { seq: u64, status: CheckpointStatus },
    #[error("event {seq}: {error}")]
    Illegal {
        seq: u64,
        error: Box<IllegalTransition>,
    },
    #[error("event {seq} belongs to task {got}, not {expected}")]
    WrongTask {
        seq: u64,
        expected: String,
        got: String,
    },
    #[error("the log is empty")]
    Empty,
}

/// The state a task's first event creates.
pub fn genesis(event: &HarnessEvent) -> Result<TaskState, FoldError> {
    if event.seq != 1 {
        return Err(FoldError::OutOfOrder {
            seq: event.seq,
            last_seq: 0,
        });
    }
    let task_id = event
        .task_id
        .clone()
        .ok_or(FoldError::BadGenesis("an event without task_id"))?;
    match &event.change {
        TaskChange::TaskCreated {
            description,
            session_id,
            workspace_path,
            workspace_pin,
            pending_steps,
            trace_id,
            span_id,
        } => Ok(TaskState {
            head: TaskHead {
                id: task_id,
                session_id: session_id.clone(),
                description: description.clone(),
                status: TaskStatus::Pending,
                current_checkpoint: None,
                context: TaskContext {
                    task_history: Vec::new(),
                    completed_steps: Vec::new(),
                    pending_steps: pending_steps.iter().cloned().collect(),
                    blocked_reason: None,
                },
                resources: TaskResources {
                    workspace_path: workspace_path.clone(),
                    workspace_pin: *workspace_pin,
                    container_id: None,
                    started_at: None,
                    last_active_at: Some(event.timestamp),
                },
                error: None,
                trace_id: trace_id.clone(),
                span_id: span_id.clone(),
                parent_span_id: event.parent_span_id.clone(),
                runner: None,
                restored_from: None,
                forked_from: None,
                last_seq: 1,
                created_at: event.timestamp,
                updated_at: event.timestamp,
            },
            checkpoints: Vec::new(),
        }),
        TaskChange::TaskRestored {
            state,
            snapshot_id,
            from_task_id,
        } => {
            let mut state = copied(state, task_id, from_task_id, event);
            state.head.restored_from = Some(snapshot_id.clone());
            Ok(state)
        }
        TaskChange::TaskForked { from, state, .. } => {
            let mut state = copied(state, task_id, &from.task_id, event);
            state.head.restored_from = None;
            state.head.forked_from = Some((**from).clone());
            state.head.parent_span_id = event.parent_span_id.clone();
            Ok(state)
        }
        other => Err(FoldError::BadGenesis(other.event_type().as_str())),
    }
}

/// The state a restored or forked task starts from: `state`, copied from
/// task `from`, as task `task_id`'s, made by `event`.
fn copied(
    state: &TaskState,
    task_id: rein_protocol::TaskId,
    from: &rein_protocol::TaskId,
    event: &HarnessEvent,
) -> TaskState {
    let mut state = state.clone();
    state.head.id = task_id;
    state.head.context.task_history.push(from.clone());
    state.head.runner = None;
    state.head.trace_id = event.trace_id.clone();
    state.head.span_id = event.span_id.clone();
    state.head.resources.last_active_at = Some(event.timestamp);
    state.head.last_seq = 1;
    state.head.created_at = event.timestamp;
    state.head.updated_at = event.timestamp;
    for cp in &mut state.checkpoints {
        cp.task_id = state.head.id.clone();
    }
    state
}

/// Applies one event to a task's state.
pub fn apply(state: &mut TaskState, event: &HarnessEvent) -> Result<(), FoldError> {
    apply_checked(state, event, Checked::Nothing)
}

/// What a whole fold ([`fold`]) keeps beside the state, so that a long log
/// folds in time proportional to its length: the checkpoint ids seen (a new
/// one is checked against them, not against every checkpoint), and the steps
/// finished (taken out of `pending_steps` once, at the end, not one by one).
#[derive(Default)]
struct Batch {
    ids: std::collections::HashSet<rein_protocol::CheckpointId>,
    finished: std::collections::HashSet<String>,
}

/// What the caller of [`apply_checked`] has already checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Checked {
    Nothing,
    /// A created checkpoint's id is not one the state has (the recorder keeps
    /// an index of them; the fold would compare it with every checkpoint).
    NewCheckpointIsNew,
}

pub(crate) fn apply_checked(
    state: &mut TaskState,
    event: &HarnessEvent,
    checked: Checked,
) -> Result<(), FoldError> {
    apply_in(state, event, checked, None)
}

fn apply_in(
    state: &mut TaskState,
    event: &HarnessEvent,
    checked: Checked,
    mut batch: Option<&mut Batch>,
) -> Result<(), FoldError> {
    let seq = event.seq;
    if seq != state.head.last_seq + 1 {
        return Err(FoldError::OutOfOrder {
            seq,
            last_seq: state.head.last_seq,
        });
    }
    if let Some(task_id) = &event.task_id
        && task_id != &state.head.id
    {
        return Err(FoldError::WrongTask {
            seq,
            expected: state.head.id.to_string(),
            got: task_id.to_string(),
        });
    }
    let illegal = |error| FoldError::Illegal {
        seq,
        error: Box::new(error),
    };
    let head = &mut state.head;
    match &event.change {
        TaskChange::TaskCreated { .. }
        | TaskChange::TaskRestored { .. }
        | TaskChange::TaskForked { .. } => {
            return Err(FoldError::SecondGenesis(event.change.event_type().as_str()));
        }
        TaskChange::TaskStarted { runner } => {
            head.status = task_transition(head.status, TaskEvent::Start).map_err(illegal)?;
            head.runner = runner.clone();
            head.resources.started_at.get_or_insert(event.timestamp);
            head.context.blocked_reason = None;
        }
        TaskChange::TaskResumed { runner, .. } => {
            head.status = task_transition(head.status, TaskEvent::Resume).map_err(illegal)?;
            head.runner = runner.clone();
            head.resources.started_at.get_or_insert(event.timestamp);
            head.context.blocked_reason = None;
        }
        TaskChange::TaskPaused { reason } => {
            head.status = task_transition(head.status, TaskEvent::Pause).map_err(illegal)?;
            head.runner = None;
            head.context.blocked_reason = Some(reason.clone());
        }
        TaskChange::TaskCompleted {} => {
            head.status = task_transition(head.status, TaskEvent::Complete).map_err(illegal)?;
            head.runner = None;
            head.context.blocked_reason = None;
        }
        TaskChange::TaskFailed { error } => {
            head.status = task_transition(head.status, TaskEvent::Fail).map_err(illegal)?;
            head.runner = None;
            head.error = Some(error.clone());
        }
        TaskChange::TaskCancelled { reason, by } => {
            head.status = task_transition(head.status, TaskEvent::Cancel).map_err(illegal)?;
            head.runner = None;
            head.context.blocked_reason = None;
            head.error = Some(format!("cancelled by {by}: {reason}"));
        }
        TaskChange::CheckpointCreated { checkpoint } => {
            if checkpoint.status != CheckpointStatus::Pending {
                return Err(FoldError::CheckpointNotPending {
                    seq,
                    status: checkpoint.status,
                });
            }
            let seen = match batch.as_deref_mut() {
                Some(batch) => !batch.ids.insert(checkpoint.id.clone()),
                None => {
                    checked != Checked::NewCheckpointIsNew
                        && state.checkpoints.iter().any(|c| c.id == checkpoint.id)
                }
            };
            if seen {
                return Err(FoldError::DuplicateCheckpoint {
                    seq,
                    checkpoint_id: checkpoint.id.to_string(),
                });
            }
            let mut cp = (**checkpoint).clone();
            cp.task_id = head.id.clone();
            state.checkpoints.push(cp);
        }
        TaskChange::CheckpointEntered { checkpoint_id } => {
            let cp = find(&mut state.checkpoints, checkpoint_id, seq)?;
            cp.status =
                checkpoint_transition(cp.status, CheckpointEvent::Enter).map_err(illegal)?;
            head.current_checkpoint = Some(checkpoint_id.clone());
        }
        TaskChange::CheckpointPassed {
            checkpoint_id,
            duration_ms,
            output,
            approved_by,
        } => {
            let cp = find(&mut state.checkpoints, checkpoint_id, seq)?;
            cp.status = checkpoint_transition(cp.status, CheckpointEvent::Pass).map_err(illegal)?;
            cp.duration_ms = Some(*duration_ms);
            cp.output = output.clone();
            cp.approved_by = approved_by.clone();
            if let Some(step) = cp.step_id.clone() {
                finish_step(&mut head.context, step, batch.as_deref_mut());
            }
        }
        TaskChange::CheckpointFailed {
            checkpoint_id,
            duration_ms,
            error,
            output,
            will_retry,
            error_type,
            retry_at,
        } => {
            let cp = find(&mut state.checkpoints, checkpoint_id, seq)?;
            cp.status = checkpoint_transition(cp.status, CheckpointEvent::Fail).map_err(illegal)?;
            cp.duration_ms = Some(*duration_ms);
            cp.error = Some(error.clone());
            cp.output = output.clone();
            if *will_retry {
                cp.metadata.insert(WILL_RETRY.into(), true.into());
            }
            if let Some(error_type) = error_type {
                cp.metadata
                    .insert(ERROR_TYPE.into(), error_type.as_str().into());
            }
            if let Some(at) = retry_at {
                cp.metadata.insert(RETRY_AT.into(), at.to_rfc3339().into());
            }
        }
        TaskChange::RecoveryAttempted { .. }
        | TaskChange::RecoverySucceeded { .. }
        | TaskChange::RecoveryFailed { .. }
        | TaskChange::AgentUpdate { .. }
        | TaskChange::Compacted { .. }
        | TaskChange::WorkspaceSaved { .. } => {}
        TaskChange::PlanDecomposed {
            checkpoint_id,
            steps,
        } => {
            // The CP2 checkpoint that decomposed the goal must exist.
            find(&mut state.checkpoints, checkpoint_id, seq)?;
            head.context.pending_steps = steps.iter().cloned().collect();
        }
        TaskChange::ProcessStarted {
            checkpoint_id,
            process,
        } => {
            let cp = find(&mut state.checkpoints, checkpoint_id, seq)?;
            if let Ok(process) = serde_json::to_value(process) {
                cp.metadata.insert(PROCESS.into(), process);
            }
        }
        TaskChange::RuntimeSelected {
            checkpoint_id,
            decision,
        } => {
            let cp = find(&mut state.checkpoints, checkpoint_id, seq)?;
            cp.metadata
                .insert(RUNTIME.into(), decision.selected.clone().into());
        }
        TaskChange::HumanApprovalRequested { request } => {
            let cp = find(&mut state.checkpoints, &request.checkpoint_id, seq)?;
            if request.question.is_some() {
                // A running step's own question: the step waits on it, not the run.
                let questions = cp
                    .metadata
                    .entry(QUESTIONS.to_owned())
                    .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
                if let Some(q) = questions.as_object_mut() {
                    q.insert(request.id.to_string(), request.status.as_str().into());
                }
            } else {
                cp.metadata
                    .insert(APPROVAL_ID.into(), request.id.to_string().into());
                cp.metadata
                    .insert(APPROVAL_STATUS.into(), request.status.as_str().into());
            }
        }
        TaskChange::HumanApprovalReceived {
            request_id, status, ..
        } => {
            let id = request_id.to_string();
            for cp in state.checkpoints.iter_mut().rev() {
                if cp.metadata.get(APPROVAL_ID).and_then(|v| v.as_str()) == Some(id.as_str()) {
                    cp.metadata
                        .insert(APPROVAL_STATUS.into(), status.as_str().into());
                    break;
                }
                if let Some(q) = cp
                    .metadata
                    .get_mut(QUESTIONS)
                    .and_then(serde_json::Value::as_object_mut)
                    && let Some(s) = q.get_mut(&id)
                {
                    *s = status.as_str().into();
                    break;
                }
            }
        }
        TaskChange::CheckpointSkipped {
            checkpoint_id,
            reason,
            duration_ms,
        } => {
            let cp = find(&mut state.checkpoints, checkpoint_id, seq)?;
            cp.status = checkpoint_transition(cp.status, CheckpointEvent::Skip).map_err(illegal)?;
            cp.duration_ms = *duration_ms;
            cp.metadata
                .insert("skipped_reason".into(), reason.clone().into());
            if let Some(step) = cp.step_id.clone() {
                finish_step(&mut head.context, step, batch);
            }
        }
    }
    head.last_seq = seq;
    head.updated_at = event.timestamp;
    head.resources.last_active_at = Some(event.timestamp);
    Ok(())
}

/// Folds a whole log into the state it describes.
pub fn fold<'a>(
    events: impl IntoIterator<Item = &'a HarnessEvent>,
) -> Result<TaskState, FoldError> {
    let mut events = events.into_iter();
    let first = events.next().ok_or(FoldError::Empty)?;
    let mut state = genesis(first)?;
    let mut batch = Batch {
        ids: state.checkpoints.iter().map(|c| c.id.clone()).collect(),
        finished: state.head.context.completed_steps.iter().cloned().collect(),
    };
    for event in events {
        apply_in(&mut state, event, Checked::Nothing, Some(&mut batch))?;
    }
    let pending = &mut state.head.context.pending_steps;
    pending.retain(|s| !batch.finished.contains(s));
    Ok(state)
}

fn find<'a>(
    checkpoints: &'a mut [rein_protocol::Checkpoint],
    id: &rein_protocol::CheckpointId,
    seq: u64,
) -> Result<&'a mut rein_protocol::Checkpoint, FoldError> {
    // Newest first: the checkpoint an event names is almost always a recent one.
    checkpoints
        .iter_mut()
        .rev()
        .find(|c| &c.id == id)
        .ok_or_else(|| FoldError::UnknownCheckpoint {
            seq,
            checkpoint_id: id.to_string(),
        })
}

fn finish_step(context: &mut TaskContext, step: String, batch: Option<&mut Batch>) {
    // In a whole fold, taken out of `pending_steps` at the end.
    if let Some(batch) = batch {
        if batch.finished.insert(step.clone()) {
            context.completed_steps.push(step);
        }
        return;
    }
    // A step leaves `pending_steps` once; steps mostly finish in plan order, so it is
    // usually found at the front.
    if let Some(pos) = context.pending_steps.iter().position(|s| *s == step) {
        context.pending_steps.remove(pos);
        context.completed_steps.push(step);
    } else if !context.completed_steps.contains(&step) {
        context.completed_steps.push(step);
    }
}

#[cfg(test)]
mod tests {
    use rein_protocol::ids::{new_span_id, new_trace_id};
    use rein_protocol::{Checkpoint, CheckpointType, EventId, TaskId};

    use super::*;

    fn event(task: &TaskId, seq: u64, change: TaskChange) -> HarnessEvent {
        HarnessEvent {
            id: EventId::new(),
            seq,
            timestamp: chrono::Utc::now(),
            checkpoint_id: change.checkpoint_id().cloned(),
            change,
            task_id: Some(task.clone()),
            session_id: "s".into(),
            trace_id: new_trace_id(),
            span_id: new_span_id(),
            parent_span_id: None,
        }
    }

    fn created(task: &TaskId) -> HarnessEvent {
        event(
            task,
            1,
            TaskChange::TaskCreated {
                description: "d".into(),
                session_id: "s".into(),
                workspace_path: None,
                workspace_pin: None,
                pending_steps: vec!["a".into(), "b".into()],
                trace_id: new_trace_id(),
                span_id: new_span_id(),
            },
        )
    }

    fn checkpoint(task: &TaskId, step: &str) -> Checkpoint {
        Checkpoint::pending(task.clone(), Some(step.into()), CheckpointType::TaskExec, 1)
    }

    /// A log that creates the task, starts it and creates checkpoint `cp` (seq 3).
    fn started_with(task: &TaskId, cp: &Checkpoint) -> Vec<HarnessEvent> {
        vec![
            created(task),
            event(task, 2, TaskChange::TaskStarted { runner: None }),
            event(
                task,
                3,
                TaskChange::CheckpointCreated {
                    checkpoint: Box::new(cp.clone()),
                },
            ),
        ]
    }

    #[test]
    fn a_log_folds_into_the_state_it_describes() {
        let task = TaskId::new();
        let cp = checkpoint(&task, "a");
        let mut log = started_with(&task, &cp);
        log.extend([
            event(
                &task,
                4,
                TaskChange::CheckpointEntered {
                    checkpoint_id: cp.id.clone(),
                },
            ),
            event(
                &task,
                5,
                TaskChange::CheckpointPassed {
                    checkpoint_id: cp.id.clone(),
                    duration_ms: 12,
                    output: None,
                    approved_by: None,
                },
            ),
        ]);
        let state = fold(&log).unwrap();
        assert_eq!(state.status(), TaskStatus::InProgress);
        assert_eq!(state.head.last_seq, 5);
        assert_eq!(state.head.context.completed_steps, vec!["a".to_owned()]);
        assert_eq!(state.head.context.pending_steps, vec!["b".to_owned()]);
        assert_eq!(state.checkpoints[0].status, CheckpointStatus::Completed);
        assert_eq!(state.checkpoints[0].duration_ms, Some(12));
        assert_eq!(state.head.current_checkpoint, Some(cp.id));
    }

    /// The recorder checks a new checkpoint's id against an index, not the fold's
    /// scan: the same duplicates must still be refused, whether the first one
    /// came with the state or was recorded since.
    #[test]
    fn the_recorder_refuses_a_duplicate_checkpoint_like_the_fold() {
        let task = TaskId::new();
        let old = checkpoint(&task, "a");
        let log = started_with(&task, &old);
        let mut rec = crate::recorder::Recorder::resume(fold(&log).unwrap());
        let span = rec.task_span();
        let duplicate = |e: crate::EngineError| {
            matches!(
                e,
                crate::EngineError::Corrupt {
                    error: FoldError::DuplicateCheckpoint { .. },
                    ..
                }
            )
        };
        assert!(duplicate(
            rec.create_checkpoint(old.clone(), &span).unwrap_err()
        ));
        let new = checkpoint(&task, "b");
        rec.create_checkpoint(new.clone(), &span).unwrap();
        assert!(duplicate(rec.create_checkpoint(new, &span).unwrap_err()));
        assert!(duplicate(rec.create_checkpoint(old, &span).unwrap_err()));
        // Refused changes left the state as the log of what was recorded has it.
        rec.create_checkpoint(checkpoint(&task, "a"), &span)
            .unwrap();
        assert_eq!(rec.state.checkpoints.len(), 3);
        assert_eq!(rec.state.head.last_seq, 5);
    }

    #[test]
    fn illegal_and_out_of_order_events_are_errors_not_panics() {
        let task = TaskId::new();
        let cp = checkpoint(&task, "a");
        let mut state = genesis(&created(&task)).unwrap();
        let skip = event(&task, 3, TaskChange::TaskStarted { runner: None });
        assert_eq!(
            apply(&mut state, &skip),
            Err(FoldError::OutOfOrder {
                seq: 3,
                last_seq: 1
            })
        );
        let done = event(&task, 2, TaskChange::TaskCompleted {});
        assert!(matches!(
            apply(&mut state, &done),
            Err(FoldError::Illegal { .. })
        ));
        let unknown = event(
            &task,
            2,
            TaskChange::CheckpointEntered {
                checkpoint_id: cp.id.clone(),
            },
        );
        assert!(matches!(
            apply(&mut state, &unknown),
            Err(FoldError::UnknownCheckpoint { .. })
        ));
        apply(
            &mut state,
            &event(
                &task,
                2,
                TaskChange::CheckpointCreated {
                    checkpoint: Box::new(cp.clone()),
                },
            ),
        )
        .unwrap();
        let pass_pending = event(
            &task,
            3,
            TaskChange::CheckpointPassed {
                checkpoint_id: cp.id.clone(),
                duration_ms: 1,
                output: None,
                approved_by: None,
            },
        );
        assert!(matches!(
            apply(&mut state, &pass_pending),
            Err(FoldError::Illegal { .. })
        ));
        let again = event(
            &task,
            3,
            TaskChange::CheckpointCreated {
                checkpoint: Box::new(cp),
            },
        );
        assert!(matches!(
            apply(&mut state, &again),
            Err(FoldError::DuplicateCheckpoint { .. })
        ));
        assert!(matches!(
            apply(&mut state, &created(&task)),
            Err(FoldError::OutOfOrder { .. })
        ));
        let other = event(&TaskId::new(), 3, TaskChange::TaskStarted { runner: None });
        assert!(matches!(
            apply(&mut state, &other),
            Err(FoldError::WrongTask { .. })
        ));
        assert_eq!(state.head.last_seq, 2, "failed events change nothing");
    }

    #[test]
    fn a_log_must_start_with_its_genesis() {
        let task = TaskId::new();
        let start = event(&task, 1, TaskChange::TaskStarted { runner: None });
        assert_eq!(genesis(&start), Err(FoldError::BadGenesis("task_started")));
        assert_eq!(fold(Vec::<&HarnessEvent>::new()), Err(FoldError::Empty));
    }

    #[test]
    fn a_failed_attempt_that_will_be_retried_is_marked() {
        let task = TaskId::new();
        let cp = checkpoint(&task, "a");
        let mut state = genesis(&created(&task)).unwrap();
        for (seq, change) in [
            (
                2,
                TaskChange::CheckpointCreated {
                    checkpoint: Box::new(cp.clone()),
                },
            ),
            (
                3,
                TaskChange::CheckpointEntered {
                    checkpoint_id: cp.id.clone(),
                },
            ),
            (
                4,
                TaskChange::CheckpointFailed {
                    checkpoint_id: cp.id.clone(),
                    duration_ms: 5,
                    error: "interrupted".into(),
                    output: None,
                    will_retry: true,
                    error_type: None,
                    retry_at: None,
                },
            ),
        ] {
            apply(&mut state, &event(&task, seq, change)).unwrap();
        }
        assert_eq!(
            state.checkpoints[0].metadata.get(WILL_RETRY),
            Some(&serde_json::Value::Bool(true))
        );
        assert_eq!(
            state.head.context.pending_steps,
            vec!["a".to_owned(), "b".to_owned()]
        );
    }
}
