//! Exit codes scripts can trust, and the one place errors become them.
//!
//! 0 success · 1 failure (task failed or cancelled, not found, refused, store
//! error) · 2 bad usage or invalid input (clap uses 2 as well) · 3 the task is not
//! finished but waiting (paused, or stopped and resumable).

use rein_core::plan::PlanFileError;
use rein_core::{EngineError, ErrorKind};
use rein_protocol::TaskStatus;

pub const SUCCESS: u8 = 0;
pub const FAILURE: u8 = 1;
pub const USAGE: u8 = 2;
pub const WAITING: u8 = 3;

pub fn code_for(error: &anyhow::Error) -> u8 {
    if let Some(e) = error.downcast_ref::<EngineError>() {
        return match e.kind() {
            ErrorKind::Invalid => USAGE,
            ErrorKind::NotFound
            | ErrorKind::Conflict
            | ErrorKind::Forbidden
            | ErrorKind::Internal => FAILURE,
        };
    }
    if let Some(e) = error.downcast_ref::<PlanFileError>() {
        return match e {
            PlanFileError::Read { .. } => FAILURE,
            PlanFileError::Parse { .. } | PlanFileError::Invalid { .. } => USAGE,
        };
    }
    if let Some(e) = error.downcast_ref::<crate::client::RemoteError>() {
        return if e.is_usage() { USAGE } else { FAILURE };
    }
    if error.downcast_ref::<UsageError>().is_some()
        || error.downcast_ref::<crate::client::BadUrl>().is_some()
    {
        return USAGE;
    }
    FAILURE
}

/// The error's code in the API's terms (`{"error": {"code", "message"}}`):
/// the server's own code for an answer of the API (local commands ask the
/// same router in-process), else one that says what kind of error it is.
pub fn error_code(error: &anyhow::Error) -> String {
    if let Some(e) = error.downcast_ref::<crate::client::RemoteError>() {
        return match e {
            crate::client::RemoteError::Api { code, .. } => code.clone(),
            crate::client::RemoteError::Unreachable { .. } => "unreachable".to_owned(),
            crate::client::RemoteError::Protocol { .. } => "bad_answer".to_owned(),
        };
    }
    if let Some(e) = error.downcast_ref::<EngineError>() {
        return match e.kind() {
            ErrorKind::Invalid => "bad_request",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::Internal => "internal",
        }
        .to_owned();
    }
    match code_for(error) {
        USAGE => "bad_request",
        _ => "failed",
    }
    .to_owned()
}

/// Input the user can fix: a malformed id, time or status.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The exit code for a task that a run or follow left in `status`.
pub fn for_status(status: TaskStatus) -> u8 {
    match status {
        TaskStatus::Completed => SUCCESS,
        TaskStatus::Failed | TaskStatus::Cancelled => FAILURE,
        TaskStatus::Paused | TaskStatus::InProgress | TaskStatus::Pending => WAITING,
    }
}
