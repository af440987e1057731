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
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HistoryPoint {
    /// The task log's position at this point: the sequence number of the
    /// event that made it. An agent turn, which its step's journal records
    /// rather than the log, has its step's start here.
    pub seq: u64,
    /// When. An agent turn has none: its step's journal keeps no times.
    pub at: Option<Timestamp>,
    pub kind: HistoryKind,
    pub step_id: Option<String>,
    /// The step's attempt (1 for its first run).
    pub attempt: Option<u32>,
    pub checkpoint_id: Option<CheckpointId>,
    /// An agent turn's number among its step's turns, from 1.
    pub turn: Option<u64>,
    /// An agent turn's end in its step's journal: how many entries the
    /// journal held once the turn was written.
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

/// What of a task's workspace rein keeps at each step boundary (`snapshot`
/// in `rein.toml` and in a plan; the plan's patterns add to the
/// configuration's, its cap replaces it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotRules {
    /// Paths left out, as in `.gitignore`: `target/` is a directory of that
    /// name anywhere, `*.log` a file name anywhere, `/build` one at the top.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// The most bytes of files a kept workspace may hold; a larger one is not
    /// kept (the point is recorded as not forkable). `0` keeps nothing.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::de::integral"
    )]
    pub max_bytes: Option<u64>,
}

impl SnapshotRules {
    /// The cap when none is set: 2 GiB.
    pub const DEFAULT_MAX_BYTES: u64 = 2 << 30;

    pub fn is_empty(&self) -> bool {
        self.exclude.is_empty() && self.max_bytes.is_none()
    }

    /// These rules with `over`'s on top: its patterns added, its cap if set.
    pub fn with(&self, over: &SnapshotRules) -> SnapshotRules {
        let mut exclude = self.exclude.clone();
        exclude.extend(over.exclude.iter().cloned());
        SnapshotRules {
            exclude,
            max_bytes: over.max_bytes.or(self.max_bytes),
        }
    }

    pub fn cap(&self) -> u64 {
        self.max_bytes.unwrap_or(Self::DEFAULT_MAX_BYTES)
    }
}

/// A task's workspace as rein kept it at a point of its log.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SavedWorkspace {
    /// The kept tree (a content address, `sha256:…`); none when the
    /// workspace could not be kept, and `unavailable` says why.
    pub root: Option<String>,
    /// Files kept, and their bytes.
    pub files: u64,
    pub bytes: u64,
    /// Bytes this point stored that no earlier point had.
    pub new_bytes: u64,
    /// What was left out: the patterns that matched, and how many files
    /// (special files, sockets and the like, are left out too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded: Vec<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub left_out: u64,
    /// Why the workspace was not kept here (over the cap, a full disk, …).
    pub unavailable: Option<String>,
}

impl SavedWorkspace {
    /// In a line: what was kept, what was new and what was left out; or
    /// why nothing was.
    pub fn describe(&self) -> String {
        if let Some(why) = &self.unavailable {
            return format!("workspace not kept: {why}");
        }
        let mut line = format!(
            "workspace kept: {} files, {} bytes ({} new)",
            self.files, self.bytes, self.new_bytes
        );
        if self.left_out > 0 {
            line.push_str(&format!(
                "; {} left out ({})",
                self.left_out,
                self.excluded.join(", ")
            ));
        }
        line
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Where a fork came from: its source task and the point of the source's log
/// it starts at (the fold of the log up to and including event `seq`), with
/// what the fork must do before it runs.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ForkedFrom {
    pub task_id: TaskId,
    pub seq: u64,
    /// The fork continues the agent session of the step started at `seq`
    /// after this many of its turns.
    pub turn: Option<u32>,
    /// Steps the fork runs that had already completed in the source after
    /// the fork point, and whose effects a run would repeat: each is asked
    /// about before it runs in the fork.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ran_in_source: Vec<RanInSource>,
    /// The agent sessions' conversations the fork takes over, each as the
    /// first `entries` of the source's journal `from`, copied to the fork's
    /// journal `to` as it is first taken up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub journals: Vec<JournalCopy>,
}

impl ForkedFrom {
    /// Where it came from, without what the fork still does (a task's
    /// summary keeps this much).
    pub fn origin(&self) -> ForkedFrom {
        ForkedFrom {
            ran_in_source: Vec::new(),
            journals: Vec::new(),
            ..self.clone()
        }
    }
}

/// A step that completed in a fork's source after the fork point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RanInSource {
    pub step_id: String,
    /// The source's event that completed it, and when.
    pub seq: u64,
    pub at: Timestamp,
    /// What it did there, in a line.
    pub did: String,
}

/// Part of an agent session's journal a fork takes over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct JournalCopy {
    pub from: String,
    pub to: String,
    pub entries: u64,
}
