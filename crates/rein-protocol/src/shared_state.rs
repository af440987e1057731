//! Shared harness state (spec shared-state.md §1): who takes part in delegated
//! or multi-agent work, what each read and wrote under which assumptions and
//! versions, what still needs verifying, and where the work conflicts. Wire names
//! are camelCase, as in the seed's JSON; fields the seed's example leaves out
//! take their defaults (statuses `active`, empty lists, no timestamps yet).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Timestamp;

/// What a step does about a conflict with a running action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Enforcement {
    Serialize,
    Reject,
}

/// The status of a state, a participant or an action.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkStatus {
    #[default]
    Active,
    Completed,
    Failed,
    Cancelled,
    Blocked,
    Unknown,
}

impl WorkStatus {
    pub const ALL: [WorkStatus; 6] = [
        WorkStatus::Active,
        WorkStatus::Completed,
        WorkStatus::Failed,
        WorkStatus::Cancelled,
        WorkStatus::Blocked,
        WorkStatus::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WorkStatus::Active => "active",
            WorkStatus::Completed => "completed",
            WorkStatus::Failed => "failed",
            WorkStatus::Cancelled => "cancelled",
            WorkStatus::Blocked => "blocked",
            WorkStatus::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Option<WorkStatus> {
        WorkStatus::ALL.into_iter().find(|w| w.as_str() == s)
    }
}

/// What a participant does; `custom` when not given, as in the seed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ParticipantRole {
    Manager,
    Planner,
    Coder,
    Reviewer,
    Tester,
    SecurityReviewer,
    OpsVerifier,
    DocsWriter,
    Researcher,
    Operator,
    #[default]
    Custom,
}

impl ParticipantRole {
    pub fn as_str(self) -> &'static str {
        match self {
            ParticipantRole::Manager => "manager",
            ParticipantRole::Planner => "planner",
            ParticipantRole::Coder => "coder",
            ParticipantRole::Reviewer => "reviewer",
            ParticipantRole::Tester => "tester",
            ParticipantRole::SecurityReviewer => "security_reviewer",
            ParticipantRole::OpsVerifier => "ops_verifier",
            ParticipantRole::DocsWriter => "docs_writer",
            ParticipantRole::Researcher => "researcher",
            ParticipantRole::Operator => "operator",
            ParticipantRole::Custom => "custom",
        }
    }
}

/// How risky an action is.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    /// The seed's `unknown`: not said. It counts as low where risk decides.
    #[default]
    Unknown,
    Low,
    Medium,
    High,
    Critical,
}

impl Risk {
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Unknown => "unknown",
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
            Risk::Critical => "critical",
        }
    }
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct SharedHarnessState {
    #[serde(default)]
    pub id: String,
    #[serde(default, deserialize_with = "crate::de::reference")]
    #[schemars(length(min = 1))]
    pub session_id: Option<String>,
    #[serde(default, deserialize_with = "crate::de::reference")]
    #[schemars(length(min = 1))]
    pub parent_session_id: Option<String>,
    #[serde(default, deserialize_with = "crate::de::reference")]
    #[schemars(length(min = 1))]
    pub harness_contract_id: Option<String>,
    #[serde(default)]
    pub status: WorkStatus,
    #[serde(default)]
    pub goal: String,
    #[serde(default)]
    pub participants: Vec<Participant>,
    #[serde(default)]
    pub actions: Vec<Action>,
    #[serde(default)]
    pub shared_read_set: Vec<Resource>,
    #[serde(default)]
    pub shared_write_set: Vec<Resource>,
    #[serde(default)]
    pub assumptions: Vec<Assumption>,
    #[serde(default)]
    pub version_dependencies: Vec<VersionDependency>,
    #[serde(default)]
    pub verifier_obligations: Vec<VerifierObligation>,
    #[serde(default)]
    pub conflicts: Vec<Conflict>,
    #[serde(default)]
    pub evidence_bundle_ids: Vec<String>,
    #[serde(default)]
    pub governance_ledger_ids: Vec<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub metadata: BTreeMap<String, serde_json::Value>,
    /// Beyond the seed (which is passive): what a recording task's step does
    /// when its writes conflict with an action still running — wait for it
    /// (`serialize`) or fail naming the conflict (`reject`). None: record only.
    pub enforcement: Option<Enforcement>,
    #[serde(rename = "createdAtUtc", alias = "createdAt")]
    pub created_at: Option<Timestamp>,
    #[serde(rename = "updatedAtUtc", alias = "updatedAt")]
    pub updated_at: Option<Timestamp>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct Participant {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub role: ParticipantRole,
    #[serde(default, deserialize_with = "crate::de::reference")]
    #[schemars(length(min = 1))]
    pub session_id: Option<String>,
    pub agent_id: Option<String>,
    pub display_name: Option<String>,
    pub model_profile_id: Option<String>,
    pub tool_preset: Option<String>,
    #[serde(default)]
    pub status: WorkStatus,
    pub parent_participant_id: Option<String>,
    pub notes: Option<String>,
    #[serde(rename = "startedAtUtc", alias = "startedAt")]
    pub started_at: Option<Timestamp>,
    #[serde(rename = "completedAtUtc", alias = "completedAt")]
    pub completed_at: Option<Timestamp>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct Action {
    #[serde(default)]
    pub id: String,
    pub participant_id: Option<String>,
    #[serde(default)]
    pub title: String,
    pub summary: Option<String>,
    #[serde(default)]
    pub status: WorkStatus,
    pub tool_name: Option<String>,
    #[serde(default)]
    pub read_set: Vec<Resource>,
    #[serde(default)]
    pub write_set: Vec<Resource>,
    #[serde(default)]
    pub assumptions: Vec<Assumption>,
    #[serde(default)]
    pub version_dependencies: Vec<VersionDependency>,
    #[serde(default)]
    pub verifier_obligations: Vec<VerifierObligation>,
    #[serde(default, deserialize_with = "crate::de::reference")]
    #[schemars(length(min = 1))]
    pub evidence_bundle_id: Option<String>,
    #[serde(default, deserialize_with = "crate::de::reference")]
    #[schemars(length(min = 1))]
    pub harness_contract_id: Option<String>,
    pub risk_level: Option<Risk>,
    #[serde(rename = "startedAtUtc", alias = "startedAt")]
    pub started_at: Option<Timestamp>,
    #[serde(rename = "completedAtUtc", alias = "completedAt")]
    pub completed_at: Option<Timestamp>,
}

/// Something read or written: a file, a directory, a key, a record, a URL.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct Resource {
    /// `unknown` when not given, as in the seed.
    #[serde(default = "unknown_kind")]
    pub kind: String,
    pub path: Option<String>,
    pub key: Option<String>,
    pub id: Option<String>,
    pub uri: Option<String>,
    pub version: Option<String>,
    pub scope: Option<String>,
    pub description: Option<String>,
    /// The seed's `isSensitive`; rein's earlier `sensitive` is read too.
    #[serde(default, rename = "isSensitive", alias = "sensitive")]
    pub sensitive: bool,
}

fn unknown_kind() -> String {
    "unknown".to_owned()
}

impl Resource {
    /// What names it for a person: its path, key, id or URI, else its kind.
    pub fn name(&self) -> &str {
        [&self.path, &self.key, &self.id, &self.uri]
            .into_iter()
            .find_map(|v| v.as_deref())
            .unwrap_or(&self.kind)
    }

    /// The names of `resources`, comma-separated.
    pub fn names(resources: &[Resource]) -> String {
        resources
            .iter()
            .map(Resource::name)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct Assumption {
    #[serde(default)]
    pub id: String,
    pub key: Option<String>,
    pub value: Option<String>,
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub verified: bool,
    #[serde(default, deserialize_with = "crate::de::reference")]
    #[schemars(length(min = 1))]
    pub evidence_bundle_id: Option<String>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct VersionDependency {
    #[serde(default)]
    pub id: String,
    pub resource: Option<Resource>,
    pub version: Option<String>,
    pub description: Option<String>,
    #[serde(default = "yes")]
    pub required: bool,
}

fn yes() -> bool {
    true
}

fn unknown_status() -> WorkStatus {
    WorkStatus::Unknown
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct VerifierObligation {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub title: String,
    pub verifier: Option<String>,
    /// Required unless said otherwise, as in the seed.
    #[serde(default = "yes")]
    pub required: bool,
    pub resource: Option<Resource>,
    /// `unknown` until a verifier reports, as in the seed.
    #[serde(default = "unknown_status")]
    pub status: WorkStatus,
    pub summary: Option<String>,
    #[serde(default, deserialize_with = "crate::de::reference")]
    #[schemars(length(min = 1))]
    pub evidence_bundle_id: Option<String>,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ConflictType {
    WriteWrite,
    ReadWrite,
    Assumption,
    VerifierObligation,
}

impl ConflictType {
    pub fn as_str(self) -> &'static str {
        match self {
            ConflictType::WriteWrite => "write_write",
            ConflictType::ReadWrite => "read_write",
            ConflictType::Assumption => "assumption",
            ConflictType::VerifierObligation => "verifier_obligation",
        }
    }
}

/// What to do about a conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConflictPolicy {
    Allow,
    Warn,
    Serialize,
    Escalate,
    Reject,
}

impl ConflictPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ConflictPolicy::Allow => "allow",
            ConflictPolicy::Warn => "warn",
            ConflictPolicy::Serialize => "serialize",
            ConflictPolicy::Escalate => "escalate",
            ConflictPolicy::Reject => "reject",
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConflictStatus {
    /// The seed calls it `active`.
    #[default]
    #[serde(alias = "active")]
    Open,
    Resolved,
    Dismissed,
}

impl ConflictStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConflictStatus::Open => "open",
            ConflictStatus::Resolved => "resolved",
            ConflictStatus::Dismissed => "dismissed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Conflict {
    pub id: String,
    #[serde(rename = "type")]
    pub conflict_type: ConflictType,
    pub summary: String,
    pub participants: Vec<String>,
    pub actions: Vec<String>,
    pub resources: Vec<Resource>,
    pub policy: ConflictPolicy,
    pub severity: Risk,
    #[serde(default)]
    pub status: ConflictStatus,
    pub recommendation: String,
}

crate::objects_only!(
    SharedHarnessState,
    Participant,
    Action,
    Resource,
    Assumption,
    VersionDependency,
    VerifierObligation,
);
