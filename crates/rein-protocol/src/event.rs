//! Events (spec `tasks.md` §6 rule 22).
//!
//! Every change to a task is a [`TaskChange`] appended to the task's log inside a
//! [`HarnessEvent`] envelope, which carries the sequence number, the time, and the
//! trace ids. On the wire the change appears as the envelope's `type` and `data`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Timestamp;
use crate::approval::{ApprovalRequest, ApprovalResponse, ApprovalStatus};
use crate::ids::{ApprovalId, CheckpointId, EventId, SnapshotId, TaskId};
use crate::recovery::{ErrorType, RecoveryAction};
use crate::task::{ApprovedBy, Checkpoint, RunnerInfo, TaskState};

/// Every event type. The first eleven are the seed's; the rest are rein's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    TaskCreated,
    TaskStarted,
    TaskCompleted,
    TaskFailed,
    CheckpointEntered,
    CheckpointPassed,
    CheckpointFailed,
    RecoveryAttempted,
    RecoverySucceeded,
    HumanApprovalRequested,
    HumanApprovalReceived,
    TaskResumed,
    TaskPaused,
    TaskCancelled,
    TaskRestored,
    CheckpointCreated,
    CheckpointSkipped,
    RecoveryFailed,
    RuntimeSelected,
    AgentUpdate,
    ProcessStarted,
    PlanDecomposed,
    Compacted,
    WorkspaceSaved,
    TaskForked,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::TaskCreated => "task_created",
            EventType::TaskStarted => "task_started",
            EventType::TaskCompleted => "task_completed",
            EventType::TaskFailed => "task_failed",
            EventType::CheckpointEntered => "checkpoint_entered",
            EventType::CheckpointPassed => "checkpoint_passed",
            EventType::CheckpointFailed => "checkpoint_failed",
            EventType::RecoveryAttempted => "recovery_attempted",
            EventType::RecoverySucceeded => "recovery_succeeded",
            EventType::HumanApprovalRequested => "human_approval_requested",
            EventType::HumanApprovalReceived => "human_approval_received",
            EventType::TaskResumed => "task_resumed",
            EventType::TaskPaused => "task_paused",
            EventType::TaskCancelled => "task_cancelled",
            EventType::TaskRestored => "task_restored",
            EventType::CheckpointCreated => "checkpoint_created",
            EventType::CheckpointSkipped => "checkpoint_skipped",
            EventType::RecoveryFailed => "recovery_failed",
            EventType::RuntimeSelected => "runtime_selected",
            EventType::AgentUpdate => "agent_update",
            EventType::ProcessStarted => "process_started",
            EventType::PlanDecomposed => "plan_decomposed",
            EventType::Compacted => "compacted",
            EventType::WorkspaceSaved => "workspace_saved",
            EventType::TaskForked => "task_forked",
        }
    }
}

/// A change to a task: what one entry of its log says happened.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
pub enum TaskChange {
    /// The task exists, `pending`, with its plan's steps all pending.
    TaskCreated {
        description: String,
        session_id: String,
        workspace_path: Option<String>,
        /// Which directory the workspace is, and whose (absent in tasks
        /// made before rein recorded it: pinned when they next run).
        workspace_pin: Option<crate::task::WorkspacePin>,
        pending_steps: Vec<String>,
        trace_id: String,
        span_id: String,
    },
    /// A runner took the task up: `pending` → `in_progress`.
    TaskStarted {
        runner: Option<RunnerInfo>,
    },
    /// A runner took up a paused or interrupted task again.
    TaskResumed {
        runner: Option<RunnerInfo>,
        /// Interrupted steps the operator chose to run again.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        rerun: Vec<String>,
        /// Interrupted steps the operator chose to skip.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        skip: Vec<String>,
    },
    TaskPaused {
        reason: String,
    },
    TaskCompleted {},
    TaskFailed {
        error: String,
    },
    TaskCancelled {
        reason: String,
        by: String,
    },
    /// First entry of a task restored from a snapshot: its state is the snapshot's.
    TaskRestored {
        snapshot_id: SnapshotId,
        from_task_id: TaskId,
        state: Box<TaskState>,
    },
    /// First entry of a fork: its state is the fold of the source's log up
    /// to the fork point, made ready to run on (see [`crate::ForkedFrom`]);
    /// its workspace was made from what rein kept of the source's there.
    TaskForked {
        from: Box<crate::ForkedFrom>,
        state: Box<TaskState>,
        workspace: crate::history::SavedWorkspace,
    },
    /// A checkpoint is recorded, `pending`.
    CheckpointCreated {
        checkpoint: Box<Checkpoint>,
    },
    /// `pending` → `in_progress`.
    CheckpointEntered {
        checkpoint_id: CheckpointId,
    },
    /// `in_progress` → `completed`.
    CheckpointPassed {
        checkpoint_id: CheckpointId,
        duration_ms: u64,
        output: Option<serde_json::Value>,
        approved_by: Option<ApprovedBy>,
    },
    /// `in_progress` → `failed`.
    CheckpointFailed {
        checkpoint_id: CheckpointId,
        duration_ms: u64,
        error: String,
        output: Option<serde_json::Value>,
        /// The step will run again in a new attempt: this failure is not its outcome.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        will_retry: bool,
        /// The kind of error, when the failure was classified.
        error_type: Option<ErrorType>,
        /// With `will_retry`: not before this time (a durable timer).
        retry_at: Option<Timestamp>,
    },
    /// Recovery acts on a classified failure of a step.
    RecoveryAttempted {
        step_id: String,
        checkpoint_id: CheckpointId,
        error_type: ErrorType,
        action: RecoveryAction,
        /// How many times recovery has acted on this step, this one included.
        attempt: u32,
        retry_at: Option<Timestamp>,
    },
    /// A step that needed recovery passed.
    RecoverySucceeded {
        step_id: String,
        attempts: u32,
    },
    /// Recovery gave up on a step: retries ran out, or the strategy was to abort.
    RecoveryFailed {
        step_id: String,
        error_type: ErrorType,
        attempts: u32,
        reason: String,
    },
    /// A step asks a person; it waits until the request is settled.
    HumanApprovalRequested {
        request: Box<ApprovalRequest>,
    },
    /// The runner took in what happened to a request: a decision, an expiry (with
    /// the default applied), or a delegation (the request stays pending).
    HumanApprovalReceived {
        request_id: ApprovalId,
        status: ApprovalStatus,
        response: Option<ApprovalResponse>,
    },
    /// The runtime that serves an agent step's attempt, and why (spec
    /// harness-sdk §2 rule 6).
    RuntimeSelected {
        checkpoint_id: CheckpointId,
        decision: Box<crate::SelectionDecision>,
    },
    /// What an agent step's runtime reported while it ran: an ACP
    /// `session/update` other than message text, or a plugin's agent event.
    AgentUpdate {
        checkpoint_id: CheckpointId,
        update: serde_json::Value,
    },
    /// A command step's attempt started its process group.
    ProcessStarted {
        checkpoint_id: CheckpointId,
        process: crate::task::StepProcess,
    },
    /// CP2 made the task's goal into a plan of these steps (stored with this
    /// event): they are the task's pending steps from now on.
    PlanDecomposed {
        checkpoint_id: CheckpointId,
        steps: Vec<String>,
    },
    /// An agent step's conversation was compacted to fit its model's context
    /// window: its older part summarised (`reason`: `threshold`, `overflow`
    /// or `by_hand`), about `tokens_before` → `tokens_after`.
    Compacted {
        checkpoint_id: CheckpointId,
        session: String,
        /// `PROVIDER/MODEL` that wrote the summary.
        model: String,
        reason: String,
        /// The messages the summary stands for.
        messages: u64,
        tokens_before: u64,
        tokens_after: u64,
    },
    /// rein kept the task's workspace as it was here: as the step whose
    /// checkpoint this names ended, or (none) as the task was taken up; or
    /// says why it could not (`workspace.unavailable`), and the point is not
    /// one a fork can start from with its files.
    WorkspaceSaved {
        checkpoint_id: Option<CheckpointId>,
        workspace: crate::history::SavedWorkspace,
    },
    /// `pending` or `in_progress` → `skipped`.
    CheckpointSkipped {
        checkpoint_id: CheckpointId,
        reason: String,
        duration_ms: Option<u64>,
    },
}

/// What an agent reported ([`TaskChange::AgentUpdate`]), for a person: a tool
/// call and its status, a plan, or the kind of update.
/// Describes a run's agent updates one after another, naming an update that
/// names its tool call only by id (`tool_call_update`) by the title its
/// `tool_call` gave.
#[derive(Debug, Default)]
pub struct AgentUpdateLines {
    titles: std::collections::HashMap<String, String>,
}

impl AgentUpdateLines {
    /// Remembers the title a tool call's report gives it, by the call's id.
    pub fn learn(&mut self, update: &serde_json::Value) {
        if let (Some(id), Some(title)) = (
            update["toolCallId"].as_str().filter(|i| !i.is_empty()),
            update["title"].as_str().filter(|t| !t.is_empty()),
        ) {
            self.titles.insert(id.to_owned(), title.to_owned());
        }
    }

    /// The update as one line, a call named only by its id named by the
    /// title learnt for it.
    pub fn describe(&self, update: &serde_json::Value) -> String {
        let untitled = update["title"].as_str().is_none_or(str::is_empty);
        match update["toolCallId"].as_str().map(|id| self.titles.get(id)) {
            Some(Some(title)) if untitled => {
                let mut named = update.clone();
                named["title"] = serde_json::Value::String(title.clone());
                describe_agent_update(&named)
            }
            _ => describe_agent_update(update),
        }
    }

    /// Learns from the update, then describes it.
    pub fn line(&mut self, update: &serde_json::Value) -> String {
        self.learn(update);
        self.describe(update)
    }
}

pub fn describe_agent_update(update: &serde_json::Value) -> String {
    let text = |k: &str| update[k].as_str().unwrap_or_default();
    match text("sessionUpdate") {
        "tool_call" | "tool_call_update" => {
            let title = if text("title").is_empty() {
                text("toolCallId")
            } else {
                text("title")
            };
            let status = text("status");
            if status.is_empty() {
                format!("tool {title}")
            } else {
                format!("tool {title}: {status}")
            }
        }
        "plan" => {
            let steps: Vec<&str> = update["entries"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e["content"].as_str())
                .collect();
            format!("plan: {}", steps.join("; "))
        }
        "compacted" => format!(
            "compacted the conversation ({}): about {} → {} tokens",
            text("reason"),
            update["tokens_before"].as_u64().unwrap_or_default(),
            update["tokens_after"].as_u64().unwrap_or_default()
        ),
        "fallback" => format!(
            "fell back from {} to {}: {}",
            text("from"),
            text("to"),
            text("reason")
        ),
        "" => update.to_string().chars().take(120).collect(),
        other => other.replace('_', " "),
    }
}

impl TaskChange {
    /// The runner took in where `request` stands now (its status and response).
    pub fn approval_received(request: &ApprovalRequest) -> TaskChange {
        TaskChange::HumanApprovalReceived {
            request_id: request.id.clone(),
            status: request.status,
            response: request.response.clone(),
        }
    }

    pub fn event_type(&self) -> EventType {
        match self {
            TaskChange::TaskCreated { .. } => EventType::TaskCreated,
            TaskChange::TaskStarted { .. } => EventType::TaskStarted,
            TaskChange::TaskResumed { .. } => EventType::TaskResumed,
            TaskChange::TaskPaused { .. } => EventType::TaskPaused,
            TaskChange::TaskCompleted {} => EventType::TaskCompleted,
            TaskChange::TaskFailed { .. } => EventType::TaskFailed,
            TaskChange::TaskCancelled { .. } => EventType::TaskCancelled,
            TaskChange::TaskRestored { .. } => EventType::TaskRestored,
            TaskChange::TaskForked { .. } => EventType::TaskForked,
            TaskChange::CheckpointCreated { .. } => EventType::CheckpointCreated,
            TaskChange::CheckpointEntered { .. } => EventType::CheckpointEntered,
            TaskChange::CheckpointPassed { .. } => EventType::CheckpointPassed,
            TaskChange::CheckpointFailed { .. } => EventType::CheckpointFailed,
            TaskChange::CheckpointSkipped { .. } => EventType::CheckpointSkipped,
            TaskChange::HumanApprovalRequested { .. } => EventType::HumanApprovalRequested,
            TaskChange::HumanApprovalReceived { .. } => EventType::HumanApprovalReceived,
            TaskChange::RecoveryAttempted { .. } => EventType::RecoveryAttempted,
            TaskChange::RecoverySucceeded { .. } => EventType::RecoverySucceeded,
            TaskChange::RecoveryFailed { .. } => EventType::RecoveryFailed,
            TaskChange::RuntimeSelected { .. } => EventType::RuntimeSelected,
            TaskChange::AgentUpdate { .. } => EventType::AgentUpdate,
            TaskChange::ProcessStarted { .. } => EventType::ProcessStarted,
            TaskChange::PlanDecomposed { .. } => EventType::PlanDecomposed,
            TaskChange::Compacted { .. } => EventType::Compacted,
            TaskChange::WorkspaceSaved { .. } => EventType::WorkspaceSaved,
        }
    }

    /// The checkpoint this change is about, if any.
    pub fn checkpoint_id(&self) -> Option<&CheckpointId> {
        match self {
            TaskChange::CheckpointCreated { checkpoint } => Some(&checkpoint.id),
            TaskChange::HumanApprovalRequested { request } => Some(&request.checkpoint_id),
            TaskChange::RecoveryAttempted { checkpoint_id, .. }
            | TaskChange::RuntimeSelected { checkpoint_id, .. }
            | TaskChange::AgentUpdate { checkpoint_id, .. }
            | TaskChange::ProcessStarted { checkpoint_id, .. }
            | TaskChange::PlanDecomposed { checkpoint_id, .. }
            | TaskChange::Compacted { checkpoint_id, .. } => Some(checkpoint_id),
            TaskChange::CheckpointEntered { checkpoint_id }
            | TaskChange::CheckpointPassed { checkpoint_id, .. }
            | TaskChange::CheckpointFailed { checkpoint_id, .. }
            | TaskChange::CheckpointSkipped { checkpoint_id, .. } => Some(checkpoint_id),
            TaskChange::WorkspaceSaved { checkpoint_id, .. } => checkpoint_id.as_ref(),
            TaskChange::TaskCreated { .. }
            | TaskChange::TaskStarted { .. }
            | TaskChange::TaskResumed { .. }
            | TaskChange::TaskPaused { .. }
            | TaskChange::TaskCompleted {}
            | TaskChange::TaskFailed { .. }
            | TaskChange::TaskCancelled { .. }
            | TaskChange::TaskRestored { .. }
            | TaskChange::TaskForked { .. }
            | TaskChange::HumanApprovalReceived { .. }
            | TaskChange::RecoverySucceeded { .. }
            | TaskChange::RecoveryFailed { .. } => None,
        }
    }
}

/// One event: an entry of a task's log, as stored and as streamed.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HarnessEvent {
    pub id: EventId,
    /// Position in the task's log, from 1 without gaps.
    pub seq: u64,
    pub timestamp: Timestamp,
    #[serde(flatten)]
    pub change: TaskChange,
    pub task_id: Option<TaskId>,
    pub checkpoint_id: Option<CheckpointId>,
    pub session_id: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: Option<String>,
}

impl HarnessEvent {
    pub fn event_type(&self) -> EventType {
        self.change.event_type()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_type_names_match_the_wire_tag() {
        let change = TaskChange::TaskPaused { reason: "x".into() };
        let json = serde_json::to_value(&change).unwrap();
        assert_eq!(json["type"], change.event_type().as_str());
        let completed = serde_json::to_value(TaskChange::TaskCompleted {}).unwrap();
        assert_eq!(completed["type"], EventType::TaskCompleted.as_str());
        let seed = serde_json::to_value(EventType::HumanApprovalReceived).unwrap();
        assert_eq!(seed, EventType::HumanApprovalReceived.as_str());
    }

    #[test]
    fn envelope_carries_type_and_data_at_top_level_and_round_trips() {
        let ev = HarnessEvent {
            id: EventId::new(),
            seq: 7,
            timestamp: chrono::Utc::now(),
            change: TaskChange::TaskFailed {
                error: "boom".into(),
            },
            task_id: Some(TaskId::new()),
            checkpoint_id: None,
            session_id: "s".into(),
            trace_id: crate::ids::new_trace_id(),
            span_id: crate::ids::new_span_id(),
            parent_span_id: None,
        };
        let json = serde_json::to_value(&ev).unwrap();
        assert_eq!(json["type"], "task_failed");
        assert_eq!(json["data"]["error"], "boom");
        let back: HarnessEvent = serde_json::from_value(json).unwrap();
        assert_eq!(back, ev);
    }
}
