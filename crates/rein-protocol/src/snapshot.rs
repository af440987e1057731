//! Snapshots: copies of a task's state at a point of its log.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Timestamp;
use crate::ids::{SnapshotId, TaskId};
use crate::plan::TaskDecomposition;
use crate::task::TaskState;

/// A copy of a task's state, taken after the event numbered `seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Snapshot {
    pub id: SnapshotId,
    pub task_id: TaskId,
    pub seq: u64,
    pub created_at: Timestamp,
    pub state: TaskState,
    pub plan: TaskDecomposition,
}
