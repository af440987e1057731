//! The engine's errors, and [`ErrorKind`], the one classification front ends map
//! to exit codes and HTTP statuses.

use rein_protocol::{SnapshotId, TaskId, TaskStatus};

use crate::fold::FoldError;
use crate::plan::PlanErrors;
use crate::store::StoreError;

pub type Result<T, E = EngineError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("task {0} not found")]
    TaskNotFound(TaskId),
    #[error("snapshot {0} not found")]
    SnapshotNotFound(SnapshotId),
    #[error(transparent)]
    InvalidPlan(#[from] PlanErrors),
    #[error("task {task_id} is {status}: {what}")]
    WrongStatus {
        task_id: TaskId,
        status: TaskStatus,
        what: String,
    },
    #[error(
        "task {task_id} is being run by process {pid} on {host}; pause or abort it (`rein tasks pause {task_id}`), or wait for it"
    )]
    Busy {
        task_id: TaskId,
        pid: u32,
        host: String,
    },
    #[error(
        "task {task_id} was taken up by another process at the same moment; see `rein tasks show {task_id}`"
    )]
    Raced { task_id: TaskId },
    #[error("{0}")]
    BadRequest(String),
    #[error("cannot prepare workspace {path}: {error}")]
    Workspace { path: String, error: std::io::Error },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("task {task_id} has an inconsistent log: {error}")]
    Corrupt { task_id: TaskId, error: FoldError },
}

/// What kind of failure an error is, for exit codes and HTTP statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    NotFound,
    /// The request itself is wrong (bad plan, unknown step, …).
    Invalid,
    /// The request is fine but the task's state does not allow it now.
    Conflict,
    /// Something broke inside rein or its store.
    Internal,
}

impl EngineError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            EngineError::TaskNotFound(_) | EngineError::SnapshotNotFound(_) => ErrorKind::NotFound,
            EngineError::InvalidPlan(_) | EngineError::BadRequest(_) => ErrorKind::Invalid,
            EngineError::WrongStatus { .. }
            | EngineError::Busy { .. }
            | EngineError::Raced { .. } => ErrorKind::Conflict,
            EngineError::Workspace { .. } | EngineError::Corrupt { .. } => ErrorKind::Internal,
            EngineError::Store(e) => match e {
                StoreError::TaskNotFound(_) | StoreError::SnapshotNotFound(_) => {
                    ErrorKind::NotFound
                }
                StoreError::AlreadyExists(_) | StoreError::Conflict { .. } => ErrorKind::Conflict,
                StoreError::BadCursor(_) => ErrorKind::Invalid,
                StoreError::Backend(_) | StoreError::Corrupt(_) => ErrorKind::Internal,
            },
        }
    }
}
