//! Human in the loop (spec `tasks.md` §4): approval requests, the people's answers,
//! and the triggers that raise them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Timestamp;
use crate::ids::{ApprovalId, CheckpointId, TaskId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalType {
    Security,
    Decision,
    Destructive,
    Approval,
}

impl ApprovalType {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalType::Security => "security",
            ApprovalType::Decision => "decision",
            ApprovalType::Destructive => "destructive",
            ApprovalType::Approval => "approval",
        }
    }
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    Low,
    Medium,
    High,
    Critical,
}

impl Priority {
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Medium => "medium",
            Priority::High => "high",
            Priority::Critical => "critical",
        }
    }
}

/// What made rein ask a person (seed 5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    SecurityViolation,
    PermissionDenied,
    SuspiciousCommand,
    AmbiguousTask,
    MultipleOptions,
    TaskBlocked,
    DestructiveAction,
    ExternalNetworkCall,
    SignificantChange,
}

impl Trigger {
    pub const ALL: [Trigger; 9] = [
        Trigger::SecurityViolation,
        Trigger::PermissionDenied,
        Trigger::SuspiciousCommand,
        Trigger::AmbiguousTask,
        Trigger::MultipleOptions,
        Trigger::TaskBlocked,
        Trigger::DestructiveAction,
        Trigger::ExternalNetworkCall,
        Trigger::SignificantChange,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::SecurityViolation => "security_violation",
            Trigger::PermissionDenied => "permission_denied",
            Trigger::SuspiciousCommand => "suspicious_command",
            Trigger::AmbiguousTask => "ambiguous_task",
            Trigger::MultipleOptions => "multiple_options",
            Trigger::TaskBlocked => "task_blocked",
            Trigger::DestructiveAction => "destructive_action",
            Trigger::ExternalNetworkCall => "external_network_call",
            Trigger::SignificantChange => "significant_change",
        }
    }

    /// The seed's priority for each trigger.
    pub fn priority(self) -> Priority {
        match self {
            Trigger::SecurityViolation
            | Trigger::PermissionDenied
            | Trigger::SuspiciousCommand
            | Trigger::DestructiveAction => Priority::High,
            Trigger::AmbiguousTask | Trigger::MultipleOptions | Trigger::TaskBlocked => {
                Priority::Medium
            }
            Trigger::ExternalNetworkCall | Trigger::SignificantChange => Priority::Low,
        }
    }

    /// The kind of request each trigger raises.
    pub fn approval_type(self) -> ApprovalType {
        match self {
            Trigger::SecurityViolation | Trigger::PermissionDenied | Trigger::SuspiciousCommand => {
                ApprovalType::Security
            }
            Trigger::AmbiguousTask | Trigger::MultipleOptions | Trigger::TaskBlocked => {
                ApprovalType::Decision
            }
            Trigger::DestructiveAction => ApprovalType::Destructive,
            Trigger::ExternalNetworkCall | Trigger::SignificantChange => ApprovalType::Approval,
        }
    }
}

/// `pending` until the first valid decision; `skipped` is rein's addition for a
/// `skip` decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Denied,
    Expired,
    Skipped,
}

impl ApprovalStatus {
    pub const ALL: [ApprovalStatus; 5] = [
        ApprovalStatus::Pending,
        ApprovalStatus::Approved,
        ApprovalStatus::Denied,
        ApprovalStatus::Expired,
        ApprovalStatus::Skipped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Expired => "expired",
            ApprovalStatus::Skipped => "skipped",
        }
    }

    pub fn parse(value: &str) -> Option<ApprovalStatus> {
        ApprovalStatus::ALL
            .into_iter()
            .find(|s| s.as_str() == value)
    }
}

impl std::fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Approve,
    Deny,
    Skip,
    Delegate,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Deny => "deny",
            Decision::Skip => "skip",
            Decision::Delegate => "delegate",
        }
    }

    /// The status a decision leaves its request in (`delegate` keeps it pending).
    pub fn status(self) -> ApprovalStatus {
        match self {
            Decision::Approve => ApprovalStatus::Approved,
            Decision::Deny => ApprovalStatus::Denied,
            Decision::Skip => ApprovalStatus::Skipped,
            Decision::Delegate => ApprovalStatus::Pending,
        }
    }
}

/// What the request is about.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalContext {
    pub command: Option<String>,
    pub file_path: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<String>,
    pub risk_assessment: Option<String>,
}

/// A person's answer to a request.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalResponse {
    pub request_id: ApprovalId,
    pub decision: Decision,
    pub selected_option: Option<String>,
    pub reason: Option<String>,
    pub decided_by: String,
    /// With `delegate`: the approver the request goes to.
    pub delegate_to: Option<String>,
    pub decided_at: Timestamp,
}

/// A request for a person's decision; a durable pause of the step that raised it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalRequest {
    pub id: ApprovalId,
    pub task_id: TaskId,
    pub checkpoint_id: CheckpointId,
    pub step_id: Option<String>,
    pub trigger: Trigger,
    #[serde(rename = "type")]
    pub kind: ApprovalType,
    pub priority: Priority,
    pub title: String,
    pub description: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    pub recommended_option: Option<String>,
    #[serde(default)]
    pub context: ApprovalContext,
    pub timeout_s: Option<u64>,
    pub deadline: Option<Timestamp>,
    /// What the deadline passing means: `deny` unless the plan says otherwise.
    pub on_expiry: Decision,
    /// The approver it was delegated to, if any.
    pub assigned_to: Option<String>,
    pub created_at: Timestamp,
    pub status: ApprovalStatus,
    /// The decision that settled it (or the last delegation while pending).
    pub response: Option<ApprovalResponse>,
    /// Set when a running step asked this itself (an agent asking permission):
    /// the question's identity, the same each time the step asks it again. The
    /// step receives the decision; the step is not settled by it.
    pub question: Option<String>,
}

impl ApprovalRequest {
    /// A new pending request raised by `trigger` (which sets its type and priority),
    /// with no options, deadline or context: set those with struct update syntax.
    pub fn pending(
        task_id: TaskId,
        checkpoint_id: CheckpointId,
        step_id: Option<String>,
        trigger: Trigger,
        title: String,
        created_at: Timestamp,
    ) -> ApprovalRequest {
        ApprovalRequest {
            id: ApprovalId::new(),
            task_id,
            checkpoint_id,
            step_id,
            trigger,
            kind: trigger.approval_type(),
            priority: trigger.priority(),
            title,
            description: String::new(),
            options: Vec::new(),
            recommended_option: None,
            context: ApprovalContext::default(),
            timeout_s: None,
            deadline: None,
            on_expiry: Decision::Deny,
            assigned_to: None,
            created_at,
            status: ApprovalStatus::Pending,
            response: None,
            question: None,
        }
    }
}
