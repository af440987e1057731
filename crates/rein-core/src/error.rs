//! The engine's errors, and [`ErrorKind`], the one classification front ends map
//! to exit codes and HTTP statuses.

use rein_protocol::{ApprovalId, ApprovalRequest, ApprovalStatus, SnapshotId, TaskId, TaskStatus};

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
    /// This node could not renew its lease on a task it ran on a shared
    /// store and stopped the run before another node could take it over.
    #[error(
        "stopped task {task_id}: this node could not reach the store to renew its lease on it, so it stopped the task's steps before another node could take it over; whichever node takes it up next resumes it"
    )]
    CutOff { task_id: TaskId },
    #[error("{}", already_decided(.current))]
    AlreadyDecided { current: Box<ApprovalRequest> },
    #[error("approval request {0} not found")]
    ApprovalNotFound(ApprovalId),
    /// A delegated request decided by someone other than its delegate.
    #[error(
        "approval request {id} was delegated to {assigned_to}: only {assigned_to} (or an admin, over the API) may decide it, not {by}"
    )]
    NotAssigned {
        id: ApprovalId,
        assigned_to: String,
        by: String,
    },
    #[error("{0}")]
    BadRequest(String),
    /// A session change its state or its owner does not allow now.
    #[error("{0}")]
    SessionRefused(String),
    /// A fork (or retry) the task's history does not allow: a point it does
    /// not have, one it had ended at, a workspace not kept there, a change
    /// its plan does not take.
    #[error("{0}")]
    NotForkable(String),
    /// A change of status its lifecycle's table does not allow (a contract
    /// moved where it cannot go, a step's run out of order).
    #[error(transparent)]
    IllegalTransition(Box<crate::lifecycle::IllegalTransition>),
    /// A directory the task may not be given (its workspace, `allow_read`).
    #[error(transparent)]
    PathsRefused(#[from] PathsRefused),
    #[error("cannot prepare workspace {path}: {error}")]
    Workspace { path: String, error: std::io::Error },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("task {task_id} has an inconsistent log: {error}")]
    Corrupt { task_id: TaskId, error: FoldError },
}

/// "already approved by ana at …": the first decision, named.
fn already_decided(request: &ApprovalRequest) -> String {
    let first = match (&request.status, &request.response) {
        (ApprovalStatus::Expired, _) => match request.deadline {
            Some(deadline) => format!("expired at its deadline {}", deadline.to_rfc3339()),
            None => "expired".to_owned(),
        },
        (status, Some(r)) => {
            let option = r
                .selected_option
                .as_ref()
                .map(|o| format!(" (option `{o}`)"))
                .unwrap_or_default();
            format!(
                "{status} by {} at {}{option}",
                r.decided_by,
                r.decided_at.to_rfc3339()
            )
        }
        (status, None) => status.to_string(),
    };
    format!(
        "approval request {} was already {first}; the first decision stands",
        request.id
    )
}

/// What kind of failure an error is, for exit codes and HTTP statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    NotFound,
    /// The request itself is wrong (bad plan, unknown step, …).
    Invalid,
    /// The request is fine but the task's state does not allow it now.
    Conflict,
    /// The caller may not do this (a delegated request, someone else's).
    Forbidden,
    /// Something broke inside rein or its store.
    Internal,
}

impl From<crate::lifecycle::IllegalTransition> for EngineError {
    fn from(e: crate::lifecycle::IllegalTransition) -> Self {
        EngineError::IllegalTransition(Box::new(e))
    }
}

impl EngineError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            EngineError::TaskNotFound(_)
            | EngineError::SnapshotNotFound(_)
            | EngineError::ApprovalNotFound(_) => ErrorKind::NotFound,
            EngineError::AlreadyDecided { .. } => ErrorKind::Conflict,
            EngineError::NotAssigned { .. } => ErrorKind::Forbidden,
            EngineError::InvalidPlan(_)
            | EngineError::BadRequest(_)
            | EngineError::PathsRefused(_) => ErrorKind::Invalid,
            EngineError::WrongStatus { .. }
            | EngineError::IllegalTransition { .. }
            | EngineError::Busy { .. }
            | EngineError::Raced { .. }
            | EngineError::CutOff { .. }
            | EngineError::SessionRefused(_)
            | EngineError::NotForkable(_) => ErrorKind::Conflict,
            EngineError::Workspace { .. } | EngineError::Corrupt { .. } => ErrorKind::Internal,
            EngineError::Store(e) => match e {
                StoreError::TaskNotFound(_)
                | StoreError::SnapshotNotFound(_)
                | StoreError::ApprovalNotFound(_)
                | StoreError::SharedStateNotFound(_)
                | StoreError::RecordNotFound { .. }
                | StoreError::LedgerEntryNotFound(_) => ErrorKind::NotFound,
                StoreError::AlreadyExists(_)
                | StoreError::Conflict { .. }
                | StoreError::NotPending { .. }
                | StoreError::SharedStateExists(_)
                | StoreError::SharedStateMoved { .. }
                | StoreError::RecordExists { .. }
                | StoreError::RecordMoved { .. }
                | StoreError::JournalMoved { .. }
                | StoreError::NotRevocable { .. }
                | StoreError::LeaseLost { .. } => ErrorKind::Conflict,
                StoreError::BadCursor(_) => ErrorKind::Invalid,
                StoreError::Backend(_) | StoreError::Corrupt(_) => ErrorKind::Internal,
            },
        }
    }
}

/// Directories a task may not be given, each with the rule that refuses it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct PathsRefused(pub Vec<rein_sandbox::Refused>);
