//! Metrics (spec `tasks.md` §6 rule 21), as served by `rein metrics --json`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Timestamp;

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskMetrics {
    pub total: u64,
    pub pending: u64,
    pub in_progress: u64,
    pub completed: u64,
    pub failed: u64,
    pub paused: u64,
    pub cancelled: u64,
    /// Mean time from creation to the end, over completed, failed and cancelled tasks.
    pub average_duration_ms: Option<f64>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CheckpointMetrics {
    pub total: u64,
    pub passed: u64,
    pub failed: u64,
    pub skipped: u64,
    /// Mean duration of checkpoints that passed or failed.
    pub average_duration_ms: Option<f64>,
    /// Checkpoints recorded, by checkpoint type.
    pub by_type: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecoveryMetrics {
    /// Times recovery acted on a failure (retry, wait, skip, pause, escalate).
    pub attempts: u64,
    /// Steps that passed after recovery.
    pub successes: u64,
    /// Steps recovery gave up on.
    pub failures: u64,
    /// Recovery attempts and give-ups, by error type.
    pub by_error_type: BTreeMap<String, u64>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HumanLoopMetrics {
    pub requests: u64,
    pub pending: u64,
    pub approvals: u64,
    pub denials: u64,
    pub skips: u64,
    pub expirations: u64,
    /// Mean time from a request to a person's decision.
    pub average_response_ms: Option<f64>,
}

/// Everything rule 21 asks for, over the tasks in the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HarnessMetrics {
    pub tasks: TaskMetrics,
    pub checkpoints: CheckpointMetrics,
    pub recovery: RecoveryMetrics,
    pub human_loop: HumanLoopMetrics,
    pub generated_at: Timestamp,
}
