//! Harness contracts and evidence bundles (spec shared-state.md §5): what work
//! was planned (a contract, `hctr_…`) and what happened (an evidence bundle,
//! `evb_…`). Wire names are camelCase, as the shared state's are.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Resource, Risk, Timestamp};

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

/// One step of the planned work.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlannedAction {
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

/// A change of a contract's status: from what, to what, by whom, when, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusChange {
    pub from: Option<ContractStatus>,
    pub to: ContractStatus,
    pub by: String,
    pub at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Planned work (`hctr_…`): its goal, planned actions, read and write sets,
/// required tools, verification and rollback plans, success criteria and risk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HarnessContract {
    #[serde(default)]
    pub id: String,
    /// What the work is for: not empty.
    #[schemars(regex(pattern = r"\S"))]
    pub goal: String,
    #[serde(default)]
    pub status: ContractStatus,
    #[serde(default)]
    pub planned_actions: Vec<PlannedAction>,
    #[serde(default)]
    pub read_set: Vec<Resource>,
    #[serde(default)]
    pub write_set: Vec<Resource>,
    #[serde(default)]
    pub required_tools: Vec<String>,
    /// How the result will be checked: one entry per verifier (a command for a
    /// plan step's contract).
    #[serde(default)]
    pub verification_plan: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_plan: Option<String>,
    #[serde(default)]
    pub success_criteria: Vec<String>,
    /// Given, or derived from the write set and the tools when not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<Risk>,
    /// Whether `risk` was derived (not given).
    #[serde(default)]
    pub risk_derived: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_state_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The task and step whose plan–execute–verify made this contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
    #[serde(default)]
    pub evidence_bundle_ids: Vec<String>,
    #[serde(default)]
    pub history: Vec<StatusChange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<Timestamp>,
}

/// What an evidence item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvidenceItem {
    #[serde(default)]
    pub id: String,
    pub kind: EvidenceKind,
    /// Not empty, nor only spaces.
    #[schemars(regex(pattern = r"\S"))]
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::de::integral"
    )]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub capture: Capture,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<Resource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Timestamp>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    Passed,
    Failed,
    Skipped,
    Pending,
}

impl CheckStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Passed => "passed",
            CheckStatus::Failed => "failed",
            CheckStatus::Skipped => "skipped",
            CheckStatus::Pending => "pending",
        }
    }
}

/// One verification: what was checked, by whom, how it came out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvidenceCheck {
    #[serde(default)]
    pub id: String,
    /// Not empty, nor only spaces.
    #[schemars(regex(pattern = r"\S"))]
    pub name: String,
    pub status: CheckStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verifier: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
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

/// A person's review of the evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Review {
    #[serde(default)]
    pub id: String,
    pub reviewer: String,
    pub verdict: ReviewVerdict,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Timestamp>,
}

/// What happened (`evb_…`): items, checks, risks, untested areas, reviews and
/// a confidence between 0 and 1.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvidenceBundle {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness_contract_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_state_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
    #[serde(default)]
    pub items: Vec<EvidenceItem>,
    #[serde(default)]
    pub checks: Vec<EvidenceCheck>,
    #[serde(default)]
    pub risks: Vec<String>,
    #[serde(default)]
    pub untested_areas: Vec<String>,
    #[serde(default)]
    pub reviews: Vec<Review>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<Timestamp>,
}
