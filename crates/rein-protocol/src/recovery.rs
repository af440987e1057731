//! Error recovery (spec `tasks.md` §3): the eight error types, the six actions, and
//! strategies that say which action an error type gets.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What kind of error a failure is. The first three are recoverable by waiting or
/// trying again; the next three need a person; the last two are final.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    Transient,
    RateLimit,
    ResourceBusy,
    PermissionDenied,
    ValidationError,
    SecurityViolation,
    Fatal,
    Unsupported,
}

impl ErrorType {
    pub const ALL: [ErrorType; 8] = [
        ErrorType::Transient,
        ErrorType::RateLimit,
        ErrorType::ResourceBusy,
        ErrorType::PermissionDenied,
        ErrorType::ValidationError,
        ErrorType::SecurityViolation,
        ErrorType::Fatal,
        ErrorType::Unsupported,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::Transient => "transient",
            ErrorType::RateLimit => "rate_limit",
            ErrorType::ResourceBusy => "resource_busy",
            ErrorType::PermissionDenied => "permission_denied",
            ErrorType::ValidationError => "validation_error",
            ErrorType::SecurityViolation => "security_violation",
            ErrorType::Fatal => "fatal",
            ErrorType::Unsupported => "unsupported",
        }
    }
}

impl std::fmt::Display for ErrorType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryAction {
    /// Run the step again after an exponential backoff with jitter.
    Retry,
    /// Run the step again after the time the error asks for (Retry-After), or the delay.
    Wait,
    /// Record the step as skipped; its dependants go on.
    Skip,
    /// Pause the task; resuming runs the step again.
    Pause,
    /// Fail the step: its dependants do not run and the task fails.
    Abort,
    /// Ask a person: run it again, skip it, or abort.
    Escalate,
}

impl RecoveryAction {
    pub fn as_str(self) -> &'static str {
        match self {
            RecoveryAction::Retry => "retry",
            RecoveryAction::Wait => "wait",
            RecoveryAction::Skip => "skip",
            RecoveryAction::Pause => "pause",
            RecoveryAction::Abort => "abort",
            RecoveryAction::Escalate => "escalate",
        }
    }
}

/// How one error type is handled. Unset fields take the action's defaults.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RecoveryStrategy {
    pub action: RecoveryAction,
    /// For retry and wait: how many times before `fallback` applies.
    #[serde(default, deserialize_with = "crate::de::integral")]
    pub max_retries: Option<u32>,
    /// For retry: the first backoff; for wait: the wait when the error names none.
    #[serde(default, deserialize_with = "crate::de::integral")]
    pub retry_delay_ms: Option<u64>,
    /// What happens once retries run out (abort unless set).
    pub fallback: Option<RecoveryAction>,
}

impl RecoveryStrategy {
    pub fn action(action: RecoveryAction) -> RecoveryStrategy {
        RecoveryStrategy {
            action,
            max_retries: None,
            retry_delay_ms: None,
            fallback: None,
        }
    }
}

/// Strategies by error type: a plan's or a step's overrides of the defaults.
pub type RecoveryPolicy = BTreeMap<ErrorType, RecoveryStrategy>;
