//! A task's history: the points of its log a person can look back at (and,
//! later, fork from): each step started and finished with its attempt, each
//! engine checkpoint settled, each approval decided, each agent turn of each
//! step, and the task's own changes of status.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Timestamp;
use crate::ids::{CheckpointId, TaskId};
use crate::task::TaskStatus;

/// What happened at a point of a task's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HistoryKind {
    /// The task was created (or restored from a snapshot).
    TaskCreated,
    /// A runner took the task up, first or again.
    TaskStarted,
    TaskPaused,
    /// The task ended: completed, failed or cancelled.
    TaskEnded,
    /// An engine checkpoint (confirm, plan, review, quality gate, …) passed,
    /// failed or was skipped.
    Checkpoint,
    /// An attempt of a step began.
    StepStarted,
    /// An attempt of a step passed, failed or was skipped.
    StepFinished,
    /// A person's (or an expiry's) answer to an approval request was taken in.
    ApprovalDecided,
    /// An agent step's model answered: one turn of its conversation.
    AgentTurn,
}

impl HistoryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            HistoryKind::TaskCreated => "task_created",
            HistoryKind::TaskStarted => "task_started",
            HistoryKind::TaskPaused => "task_paused",
            HistoryKind::TaskEnded => "task_ended",
            HistoryKind::Checkpoint => "checkpoint",
            HistoryKind::StepStarted => "step_started",
            HistoryKind::StepFinished => "step_finished",
            HistoryKind::ApprovalDecided => "approval_decided",
            HistoryKind::AgentTurn => "agent_turn",
        }
    }
}

/// One point of a task's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HistoryPoint {
    /// The task log's position at this point: the sequence number of the
    /// event that made it. An agent turn, which its step's journal records
    /// rather than the log, has its step's start here.
    pub seq: u64,
    /// When. An agent turn has none: its step's journal keeps no times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Timestamp>,
    pub kind: HistoryKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
    /// The step's attempt (1 for its first run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_id: Option<CheckpointId>,
    /// An agent turn's number among its step's turns, from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u64>,
    /// An agent turn's end in its step's journal: how many entries the
    /// journal held once the turn was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_entries: Option<u64>,
    /// What happened, in one line.
    pub description: String,
}

/// A task's history, oldest point first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct History {
    pub task_id: TaskId,
    pub status: TaskStatus,
    /// The log's last position.
    pub last_seq: u64,
    pub points: Vec<HistoryPoint>,
}
