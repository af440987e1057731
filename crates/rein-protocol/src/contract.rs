//! Harness contracts and evidence bundles (spec shared-state.md §5): what work
//! was planned (a contract, `hctr_…`) and what happened (an evidence bundle,
//! `evb_…`). Wire names are camelCase, as the shared state's are.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::seed::{Confidence, RecordMetadata, Said, TextOr, first_said};
use crate::{Assumption, Resource, Risk, Timestamp};

/// Where a contract is in its life: draft → proposed → approved → executing →
/// verified | failed | rejected | rolled_back | cancelled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContractStatus {
    #[default]
    Draft,
    Proposed,
    Approved,
    Executing,
    Verified,
    Failed,
    Rejected,
    RolledBack,
    Cancelled,
}

impl ContractStatus {
    pub const ALL: [ContractStatus; 9] = [
        ContractStatus::Draft,
        ContractStatus::Proposed,
        ContractStatus::Approved,
        ContractStatus::Executing,
        ContractStatus::Verified,
        ContractStatus::Failed,
        ContractStatus::Rejected,
        ContractStatus::RolledBack,
        ContractStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ContractStatus::Draft => "draft",
            ContractStatus::Proposed => "proposed",
            ContractStatus::Approved => "approved",
            ContractStatus::Executing => "executing",
            ContractStatus::Verified => "verified",
            ContractStatus::Failed => "failed",
            ContractStatus::Rejected => "rejected",
            ContractStatus::RolledBack => "rolled_back",
            ContractStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<ContractStatus> {
        ContractStatus::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// One step of the planned work: rein's `title`, `toolName` and `command`,
/// and the seed's fields beside them.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct PlannedAction {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    #[serde(default)]
    pub title: String,
    pub description: Option<String>,
    pub tool_name: Option<String>,
    pub command: Option<String>,
    pub action_type: Option<String>,
    pub risk_level: Option<Risk>,
    #[serde(default)]
    pub requires_approval: bool,
    #[serde(default)]
    pub read_set: Vec<Resource>,
    #[serde(default)]
    pub write_set: Vec<Resource>,
    pub expected_outcome: Option<String>,
    pub status: Option<String>,
}

/// A tool the work needs (the seed's `toolsRequired` entry).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct ToolRequirement {
    pub tool_name: String,
    pub purpose: Option<String>,
    #[serde(default)]
    pub requires_approval: bool,
    pub approval_scope: Option<String>,
}

impl Said for ToolRequirement {
    fn said(&self) -> String {
        self.tool_name.clone()
    }
}

/// How the result will be checked (the seed's verification step).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct VerificationStep {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub title: String,
    pub kind: Option<String>,
    pub command: Option<String>,
    pub tool_name: Option<String>,
    pub check_name: Option<String>,
    pub expected_signal: Option<String>,
    #[serde(default = "yes")]
    pub required: bool,
    pub status: Option<String>,
    pub result_summary: Option<String>,
}

impl Said for VerificationStep {
    fn said(&self) -> String {
        first_said(
            &[
                Some(&self.title),
                self.command.as_deref(),
                self.check_name.as_deref(),
            ],
            &self.id,
        )
    }
}

/// How the work is undone (the seed's rollback step).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct RollbackStep {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub title: String,
    pub description: Option<String>,
    pub tool_name: Option<String>,
    pub target: Option<String>,
    pub status: Option<String>,
}

impl Said for RollbackStep {
    fn said(&self) -> String {
        first_said(&[Some(&self.title), self.description.as_deref()], &self.id)
    }
}

/// A limit the work keeps to (the seed's contract constraint).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct Constraint {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub text: String,
    pub scope: Option<String>,
}

/// Whether the work needs a person's approval (the seed's values).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalRequirement {
    #[default]
    None,
    Optional,
    Required,
    AlreadySatisfied,
}

fn yes() -> bool {
    true
}

/// A change of a contract's status: from what, to what, by whom, when, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StatusChange {
    pub from: Option<ContractStatus>,
    pub to: ContractStatus,
    pub by: String,
    pub at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Planned work (`hctr_…`): its goal, planned actions, read and write sets,
/// required tools, verification and rollback plans, success criteria and risk,
/// with every field of the seed's contract under the seed's name.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct HarnessContract {
    /// Given by rein when empty; one given must be usable in a URL path.
    #[serde(default)]
    #[schemars(regex(pattern = r"^(?!\.{1,2}$)[^\s/?#%]{0,200}$"))]
    pub id: String,
    /// What the work is for: not empty.
    #[schemars(regex(pattern = r"\S"))]
    pub goal: String,
    #[serde(default)]
    pub status: ContractStatus,
    pub user_request_summary: Option<String>,
    #[serde(default)]
    pub planned_actions: Vec<PlannedAction>,
    #[serde(default)]
    pub read_set: Vec<Resource>,
    #[serde(default)]
    pub write_set: Vec<Resource>,
    /// The seed's `toolsRequired` (objects); rein's `requiredTools` (names)
    /// is read too. Each entry is returned as it came.
    #[serde(default, rename = "toolsRequired", alias = "requiredTools")]
    pub required_tools: Vec<TextOr<ToolRequirement>>,
    #[serde(default)]
    pub assumptions: Vec<Assumption>,
    #[serde(default)]
    pub constraints: Vec<Constraint>,
    /// How the result will be checked: one entry per verifier, text (a
    /// command for a plan step's contract) or the seed's step object.
    #[serde(default)]
    pub verification_plan: Vec<TextOr<VerificationStep>>,
    /// Text, or the seed's list of rollback steps.
    pub rollback_plan: Option<TextOr<Vec<RollbackStep>>>,
    #[serde(default)]
    pub success_criteria: Vec<String>,
    /// The seed's `riskLevel` (rein's earlier `risk` is read too): given, or
    /// derived from the write set, the tools and the planned actions when not.
    #[serde(rename = "riskLevel", alias = "risk")]
    pub risk: Option<Risk>,
    /// Whether `riskLevel` was derived (not given).
    #[serde(default)]
    pub risk_derived: bool,
    #[serde(default)]
    pub approval_required: ApprovalRequirement,
    pub approval_reason: Option<String>,
    #[serde(default, deserialize_with = "crate::de::reference")]
    #[schemars(length(min = 1))]
    pub shared_state_id: Option<String>,
    /// The seed's `sourceSessionId`; rein's earlier `sessionId` is read too.
    #[serde(
        default,
        rename = "sourceSessionId",
        alias = "sessionId",
        deserialize_with = "crate::de::reference"
    )]
    #[schemars(length(min = 1))]
    pub session_id: Option<String>,
    pub actor_id: Option<String>,
    pub channel_id: Option<String>,
    pub sender_id: Option<String>,
    /// The task and step whose plan–execute–verify made this contract.
    #[serde(default, deserialize_with = "crate::de::reference")]
    #[schemars(length(min = 1))]
    pub task_id: Option<String>,
    pub step_id: Option<String>,
    #[serde(default)]
    pub evidence_bundle_ids: Vec<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    pub metadata: Option<RecordMetadata>,
    #[serde(default)]
    pub history: Vec<StatusChange>,
    #[serde(rename = "createdAtUtc", alias = "createdAt")]
    pub created_at: Option<Timestamp>,
    #[serde(rename = "updatedAtUtc", alias = "updatedAt")]
    pub updated_at: Option<Timestamp>,
    /// Set when it moves to `approved`.
    #[serde(rename = "approvedAtUtc")]
    pub approved_at: Option<Timestamp>,
    /// Set when it reaches an end: verified, failed, rejected, rolled back
    /// or cancelled.
    #[serde(rename = "completedAtUtc")]
    pub completed_at: Option<Timestamp>,
}

/// What an evidence item is: rein's kinds and the seed's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceKind {
    ToolCall,
    CommandOutput,
    TestResult,
    Diff,
    File,
    Note,
    /// A side effect inside an agent runtime rein does not run.
    ExternalSideEffect,
    BuildResult,
    StaticAnalysis,
    SecurityCheck,
    Approval,
    HumanReview,
    RuntimeEvent,
    AuditEvent,
    DoctorReport,
    PostureCheck,
    ModelResponse,
    MemoryLookup,
    VerificationResult,
    #[default]
    Unknown,
}

/// How rein knows of an item: it saw it (`rein`), a runtime reported it
/// through a rein-owned callback (`callback`), someone reported it through the
/// API (`reported`), or it is a side effect inside an external runtime that
/// rein cannot vouch for (`unsupported`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Capture {
    Rein,
    Callback,
    #[default]
    Reported,
    Unsupported,
}

/// Where an item came from (the seed's evidence source).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct EvidenceSource {
    pub kind: Option<String>,
    pub id: Option<String>,
    pub path: Option<String>,
    pub uri: Option<String>,
    pub description: Option<String>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct EvidenceItem {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub kind: EvidenceKind,
    #[serde(default)]
    pub title: String,
    pub summary: Option<String>,
    pub content: Option<String>,
    #[serde(default, deserialize_with = "crate::de::integral")]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub capture: Capture,
    pub resource: Option<Resource>,
    pub source: Option<EvidenceSource>,
    pub tool_name: Option<String>,
    pub tool_call_id: Option<String>,
    pub runtime_event_id: Option<String>,
    pub audit_event_id: Option<String>,
    pub status: Option<String>,
    pub input_summary: Option<String>,
    pub output_summary: Option<String>,
    pub error_summary: Option<String>,
    pub redacted_payload: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// When it was added: the seed's `createdAtUtc` (rein's earlier `at` is
    /// read too).
    #[serde(rename = "createdAtUtc", alias = "at")]
    pub at: Option<Timestamp>,
}

/// How a check came out: rein's statuses and the seed's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    Passed,
    Failed,
    Skipped,
    Pending,
    NotRun,
    Running,
    Warning,
    #[default]
    Unknown,
}

impl CheckStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Passed => "passed",
            CheckStatus::Failed => "failed",
            CheckStatus::Skipped => "skipped",
            CheckStatus::Pending => "pending",
            CheckStatus::NotRun => "not_run",
            CheckStatus::Running => "running",
            CheckStatus::Warning => "warning",
            CheckStatus::Unknown => "unknown",
        }
    }
}

/// One verification: what was checked, by whom, how it came out.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct EvidenceCheck {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub name: String,
    pub kind: Option<String>,
    #[serde(default = "yes")]
    pub required: bool,
    #[serde(default)]
    pub status: CheckStatus,
    pub verifier: Option<String>,
    pub summary: Option<String>,
    /// The seed's `details`; rein's earlier `detail` is read too.
    #[serde(rename = "details", alias = "detail")]
    pub detail: Option<String>,
    pub command: Option<String>,
    #[serde(default, deserialize_with = "crate::de::integral")]
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    #[serde(rename = "startedAtUtc")]
    pub started_at: Option<Timestamp>,
    #[serde(rename = "completedAtUtc")]
    pub completed_at: Option<Timestamp>,
    /// When rein recorded it.
    pub at: Option<Timestamp>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReviewVerdict {
    Approved,
    ChangesRequested,
    Rejected,
    Commented,
}

/// A person's review of the evidence (rein's; the seed's are `humanReviews`).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct Review {
    #[serde(default)]
    pub id: String,
    pub reviewer: String,
    pub verdict: ReviewVerdict,
    pub comment: Option<String>,
    pub at: Option<Timestamp>,
}

/// The seed's human review, kept as given.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct HumanReview {
    pub reviewer: Option<String>,
    pub decision: Option<String>,
    pub notes: Option<String>,
    #[serde(rename = "reviewedAtUtc")]
    pub reviewed_at: Option<Timestamp>,
}

/// A risk the evidence leaves (the seed's object form).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct EvidenceRisk {
    #[serde(default)]
    pub risk_level: Risk,
    #[serde(default)]
    pub description: String,
    pub mitigation: Option<String>,
    #[serde(default)]
    pub accepted: bool,
    pub accepted_by: Option<String>,
    #[serde(rename = "acceptedAtUtc")]
    pub accepted_at: Option<Timestamp>,
}

impl Said for EvidenceRisk {
    fn said(&self) -> String {
        format!("{} ({})", self.description, self.risk_level.as_str())
    }
}

/// Something left untested (the seed's object form).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct UntestedArea {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub description: String,
    pub reason: Option<String>,
    pub risk_level: Option<Risk>,
}

impl Said for UntestedArea {
    fn said(&self) -> String {
        match &self.reason {
            Some(r) => format!("{} ({r})", self.description),
            None => self.description.clone(),
        }
    }
}

/// An assumption the evidence rests on (the seed's).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct EvidenceAssumption {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub verified: bool,
    pub evidence_item_id: Option<String>,
}

/// What happened (`evb_…`): items, checks, risks, untested areas, reviews and
/// a confidence, with every field of the seed's bundle under the seed's name.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct EvidenceBundle {
    /// Given by rein when empty; one given must be usable in a URL path.
    #[serde(default)]
    #[schemars(regex(pattern = r"^(?!\.{1,2}$)[^\s/?#%]{0,200}$"))]
    pub id: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub summary: String,
    #[serde(default, deserialize_with = "crate::de::reference")]
    #[schemars(length(min = 1))]
    pub source_session_id: Option<String>,
    #[serde(default, deserialize_with = "crate::de::reference")]
    #[schemars(length(min = 1))]
    pub harness_contract_id: Option<String>,
    pub learning_proposal_id: Option<String>,
    pub tool_call_id: Option<String>,
    pub automation_run_id: Option<String>,
    pub actor_id: Option<String>,
    pub channel_id: Option<String>,
    pub sender_id: Option<String>,
    #[serde(default, deserialize_with = "crate::de::reference")]
    #[schemars(length(min = 1))]
    pub shared_state_id: Option<String>,
    #[serde(default, deserialize_with = "crate::de::reference")]
    #[schemars(length(min = 1))]
    pub task_id: Option<String>,
    pub step_id: Option<String>,
    #[serde(default)]
    pub items: Vec<EvidenceItem>,
    #[serde(default)]
    pub checks: Vec<EvidenceCheck>,
    /// Text (rein's form) or the seed's risk objects, each kept as given.
    #[serde(default)]
    pub risks: Vec<TextOr<EvidenceRisk>>,
    #[serde(default)]
    pub assumptions: Vec<EvidenceAssumption>,
    #[serde(default)]
    pub untested_areas: Vec<TextOr<UntestedArea>>,
    #[serde(default)]
    pub reviews: Vec<Review>,
    #[serde(default)]
    pub human_reviews: Vec<HumanReview>,
    /// A score from 0 to 1 or the seed's level.
    pub confidence: Option<Confidence>,
    #[serde(default)]
    pub tags: Vec<String>,
    pub metadata: Option<RecordMetadata>,
    #[serde(rename = "createdAtUtc", alias = "createdAt")]
    pub created_at: Option<Timestamp>,
    #[serde(rename = "updatedAtUtc", alias = "updatedAt")]
    pub updated_at: Option<Timestamp>,
}

crate::objects_only!(
    PlannedAction,
    ToolRequirement,
    VerificationStep,
    RollbackStep,
    Constraint,
    HarnessContract,
    EvidenceSource,
    EvidenceItem,
    EvidenceCheck,
    Review,
    HumanReview,
    EvidenceRisk,
    UntestedArea,
    EvidenceAssumption,
    EvidenceBundle,
);
