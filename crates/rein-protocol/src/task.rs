//! Tasks and checkpoints (spec `tasks.md` §1).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Timestamp;
use crate::ids::{CheckpointId, SnapshotId, TaskId};

/// Status of a task. `cancelled` is rein's addition for an operator abort.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Pending,
    InProgress,
    Completed,
    Failed,
    Paused,
    Cancelled,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 6] = [
        TaskStatus::Pending,
        TaskStatus::InProgress,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Paused,
        TaskStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::InProgress => "in_progress",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Paused => "paused",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    /// Completed, failed and cancelled tasks never change again.
    pub fn is_terminal(self) -> bool {
        match self {
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled => true,
            TaskStatus::Pending | TaskStatus::InProgress | TaskStatus::Paused => false,
        }
    }

    pub fn parse(value: &str) -> Option<TaskStatus> {
        TaskStatus::ALL.into_iter().find(|s| s.as_str() == value)
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The eleven checkpoint types of the seed.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointType {
    TaskStart,
    TaskPlan,
    TaskExec,
    TaskReview,
    TaskComplete,
    SecurityScan,
    PermissionCheck,
    UserApproval,
    QualityGate,
    TestPass,
    BuildPass,
}

impl CheckpointType {
    pub const ALL: [CheckpointType; 11] = [
        CheckpointType::TaskStart,
        CheckpointType::TaskPlan,
        CheckpointType::TaskExec,
        CheckpointType::TaskReview,
        CheckpointType::TaskComplete,
        CheckpointType::SecurityScan,
        CheckpointType::PermissionCheck,
        CheckpointType::UserApproval,
        CheckpointType::QualityGate,
        CheckpointType::TestPass,
        CheckpointType::BuildPass,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointType::TaskStart => "task_start",
            CheckpointType::TaskPlan => "task_plan",
            CheckpointType::TaskExec => "task_exec",
            CheckpointType::TaskReview => "task_review",
            CheckpointType::TaskComplete => "task_complete",
            CheckpointType::SecurityScan => "security_scan",
            CheckpointType::PermissionCheck => "permission_check",
            CheckpointType::UserApproval => "user_approval",
            CheckpointType::QualityGate => "quality_gate",
            CheckpointType::TestPass => "test_pass",
            CheckpointType::BuildPass => "build_pass",
        }
    }

    /// The control point this checkpoint type belongs to.
    ///
    /// `user_approval` belongs to CP3 here; a CP1 confirmation is a `user_approval`
    /// recorded before `task_plan`, which the lifecycle tells apart by order.
    pub fn phase(self) -> Phase {
        match self {
            CheckpointType::TaskStart => Phase::Confirm,
            CheckpointType::TaskPlan => Phase::Plan,
            CheckpointType::TaskExec
            | CheckpointType::PermissionCheck
            | CheckpointType::SecurityScan
            | CheckpointType::UserApproval => Phase::Execute,
            CheckpointType::QualityGate | CheckpointType::TestPass | CheckpointType::BuildPass => {
                Phase::QualityGate
            }
            CheckpointType::TaskReview | CheckpointType::TaskComplete => Phase::Review,
        }
    }
}

impl std::fmt::Display for CheckpointType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The five control points of the lifecycle.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// CP1: the task is confirmed (by policy or by a person).
    Confirm,
    /// CP2: the task is decomposed into steps.
    Plan,
    /// CP3: the steps are executed.
    Execute,
    /// CP4: the task's checks pass.
    QualityGate,
    /// CP5: review done, task complete.
    Review,
}

impl Phase {
    pub fn label(self) -> &'static str {
        match self {
            Phase::Confirm => "CP1 confirm",
            Phase::Plan => "CP2 plan",
            Phase::Execute => "CP3 execute",
            Phase::QualityGate => "CP4 quality gate",
            Phase::Review => "CP5 review",
        }
    }
}

/// Status of a checkpoint: pending → in_progress → completed | failed | skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointStatus {
    Pending,
    InProgress,
    Completed,
    Failed,
    Skipped,
}

impl CheckpointStatus {
    pub const ALL: [CheckpointStatus; 5] = [
        CheckpointStatus::Pending,
        CheckpointStatus::InProgress,
        CheckpointStatus::Completed,
        CheckpointStatus::Failed,
        CheckpointStatus::Skipped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointStatus::Pending => "pending",
            CheckpointStatus::InProgress => "in_progress",
            CheckpointStatus::Completed => "completed",
            CheckpointStatus::Failed => "failed",
            CheckpointStatus::Skipped => "skipped",
        }
    }

    pub fn is_final(self) -> bool {
        match self {
            CheckpointStatus::Completed | CheckpointStatus::Failed | CheckpointStatus::Skipped => {
                true
            }
            CheckpointStatus::Pending | CheckpointStatus::InProgress => false,
        }
    }
}

impl std::fmt::Display for CheckpointStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who let a checkpoint pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Approver {
    System,
    User,
}

/// `approved_by`: system or user, plus who (a policy name or a person).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovedBy {
    pub kind: Approver,
    pub who: String,
}

/// One checkpoint of a task.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Checkpoint {
    pub id: CheckpointId,
    pub task_id: TaskId,
    /// The plan step this checkpoint records; `null` for the engine's own checkpoints.
    #[serialize_always]
    #[serde(default)]
    pub step_id: Option<String>,
    #[serde(rename = "type")]
    pub kind: CheckpointType,
    pub status: CheckpointStatus,
    /// 1 for the first run of a step, 2 for the first re-run, …
    pub attempt: u32,
    pub started_at: Timestamp,
    /// Set when the checkpoint leaves `in_progress`.
    pub duration_ms: Option<u64>,
    pub input: Option<serde_json::Value>,
    pub output: Option<serde_json::Value>,
    pub error: Option<String>,
    pub approved_by: Option<ApprovedBy>,
    #[serde(default)]
    pub metadata: BTreeMap<String, serde_json::Value>,
}

impl Checkpoint {
    /// A new checkpoint, `pending`, starting now.
    pub fn pending(
        task_id: TaskId,
        step_id: Option<String>,
        kind: CheckpointType,
        attempt: u32,
    ) -> Checkpoint {
        Checkpoint {
            id: CheckpointId::new(),
            task_id,
            step_id,
            kind,
            status: CheckpointStatus::Pending,
            attempt,
            started_at: chrono::Utc::now(),
            duration_ms: None,
            input: None,
            output: None,
            error: None,
            approved_by: None,
            metadata: BTreeMap::new(),
        }
    }
}

/// `context` of a task.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskContext {
    /// Tasks this one descends from (a restored task lists the task it was restored from).
    #[serde(default)]
    pub task_history: Vec<TaskId>,
    /// Plan steps that completed or were skipped, in the order they finished.
    #[serde(default)]
    pub completed_steps: Vec<String>,
    /// Plan steps not finished yet, in plan order.
    // A deque: steps mostly finish in plan order, so each leaves from (near)
    // the front, which a `Vec` would pay for by moving all the others.
    #[serde(default)]
    pub pending_steps: std::collections::VecDeque<String>,
    /// Why the task is paused or cannot go on, and what to do about it.
    pub blocked_reason: Option<String>,
}

/// `resources` of a task.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskResources {
    pub workspace_path: Option<String>,
    /// Which directory the workspace is, and whose: recorded when the task
    /// was given it, checked before every step starts.
    pub workspace_pin: Option<WorkspacePin>,
    pub container_id: Option<String>,
    pub started_at: Option<Timestamp>,
    pub last_active_at: Option<Timestamp>,
}

/// A task's workspace as it was when the task was given it: the directory
/// (device and inode, so a directory moved or swapped for a symlink is told
/// apart from it) and its owner, as whom a root rein runs the task's steps.
/// Decided once, when the task is created; never re-read from the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WorkspacePin {
    pub device: u64,
    pub inode: u64,
    pub owner_uid: u32,
    pub owner_gid: u32,
}

/// The process running a task, so another process can tell whether it is still alive.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunnerInfo {
    pub host: String,
    pub pid: u32,
    /// The process's start time as the OS reports it, to tell a reused pid apart.
    pub process_start: Option<u64>,
}

/// The process group of one attempt of a command step, recorded as it starts,
/// so that a runner resuming after a crash can stop what is left of it before
/// deciding whether to run the step again.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StepProcess {
    pub host: String,
    /// The machine's boot the process ran in (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: Option<String>,
    /// The process group id: the pid of its first process.
    pub pgid: u32,
    /// That process's start time as the OS reports it, to tell a reused pid apart.
    pub process_start: Option<u64>,
}

/// Everything of a task's state except its checkpoints: the task's state row.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskHead {
    pub id: TaskId,
    pub session_id: String,
    pub description: String,
    pub status: TaskStatus,
    /// The checkpoint the task is at: the last one entered.
    pub current_checkpoint: Option<CheckpointId>,
    pub context: TaskContext,
    pub resources: TaskResources,
    /// Why the task failed or was cancelled.
    pub error: Option<String>,
    /// Trace id shared by every event of this task.
    pub trace_id: String,
    /// Span id of the task itself; step spans are its children.
    pub span_id: String,
    /// The caller's span the task was made under, when it came with a traced
    /// parent (a W3C `traceparent`): the task's trace is the caller's.
    pub parent_span_id: Option<String>,
    pub runner: Option<RunnerInfo>,
    pub restored_from: Option<SnapshotId>,
    /// The task this one was forked from, and where.
    pub forked_from: Option<crate::ForkedFrom>,
    /// Sequence number of the last event applied (the log's length).
    pub last_seq: u64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// A task at a glance: what listings show and filter on. It is the task's state
/// row in the store, written with every change; the full state is the fold of the
/// task's log.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskSummary {
    pub id: TaskId,
    pub session_id: String,
    pub description: String,
    pub status: TaskStatus,
    /// Plan steps in all, and how many of them finished (completed or skipped).
    pub steps_total: usize,
    pub steps_finished: usize,
    pub blocked_reason: Option<String>,
    pub error: Option<String>,
    pub workspace_path: Option<String>,
    pub runner: Option<RunnerInfo>,
    pub restored_from: Option<SnapshotId>,
    /// The task this one was forked from, and where.
    pub forked_from: Option<crate::ForkedFrom>,
    pub trace_id: String,
    pub last_seq: u64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl TaskHead {
    pub fn summary(&self) -> TaskSummary {
        let finished = self.context.completed_steps.len();
        TaskSummary {
            id: self.id.clone(),
            session_id: self.session_id.clone(),
            description: self.description.clone(),
            status: self.status,
            steps_total: finished + self.context.pending_steps.len(),
            steps_finished: finished,
            blocked_reason: self.context.blocked_reason.clone(),
            error: self.error.clone(),
            workspace_path: self.resources.workspace_path.clone(),
            runner: self.runner.clone(),
            restored_from: self.restored_from.clone(),
            forked_from: self.forked_from.as_ref().map(crate::ForkedFrom::origin),
            trace_id: self.trace_id.clone(),
            last_seq: self.last_seq,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

/// The state of a task: its head and its checkpoints, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskState {
    #[serde(flatten)]
    pub head: TaskHead,
    #[serde(default)]
    pub checkpoints: Vec<Checkpoint>,
}

impl TaskState {
    pub fn id(&self) -> &TaskId {
        &self.head.id
    }

    pub fn status(&self) -> TaskStatus {
        self.head.status
    }

    pub fn checkpoint(&self, id: &CheckpointId) -> Option<&Checkpoint> {
        self.checkpoints.iter().rev().find(|c| &c.id == id)
    }

    /// The latest checkpoint recorded for a plan step, if any.
    pub fn latest_for_step(&self, step_id: &str) -> Option<&Checkpoint> {
        self.checkpoints
            .iter()
            .rev()
            .find(|c| c.step_id.as_deref() == Some(step_id))
    }

    /// The furthest control point reached, from the checkpoints recorded.
    pub fn phase(&self) -> Option<Phase> {
        self.checkpoints.iter().map(|c| c.kind.phase()).max()
    }
}
