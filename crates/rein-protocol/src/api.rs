//! The admin API's bodies and query parameters: what each route takes and
//! answers. The server's handlers build and read these, the CLI's remote client
//! reads the same types, and the OpenAPI document's schemas are derived from
//! them, so the three cannot tell different stories.
//!
//! Requests refuse fields they do not know (`additionalProperties: false` in
//! the document); query names are snake_case on every route.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    AgentSessionInfo, ApprovalRequest, Conflict, ContractStatus, Decision, EvidenceBundle,
    HarnessContract, HarnessMetrics, ReviewVerdict, RunnerInfo, SharedHarnessState, SnapshotId,
    TaskDecomposition, TaskId, TaskState, TaskStatus, Timestamp, WorkspaceEnvironment,
};

/// The largest integer a JSON number holds exactly: positions and counts in
/// queries stay below it.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// The characters a URL carries as they are (RFC 3986's unreserved ones).
const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `value` as one path segment or one query value of a URL: everything but
/// the unreserved characters percent-encoded.
pub fn escape(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, UNRESERVED).to_string()
}

/// What every 4xx and 5xx answer holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "Error")]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorDetail {
    /// What went wrong, for scripts: `bad_request`, `not_found`, `conflict`, …
    pub code: String,
    /// What went wrong, for people, and what to do next.
    pub message: String,
}

/// One page of a listing, newest first; `next_cursor` asks for the next page
/// (`null`: this is the last).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "{T}Page")]
pub struct Page<T> {
    pub items: Vec<T>,
    #[serde(default)]
    pub next_cursor: Option<String>,
}

impl<T> Page<T> {
    pub fn new(items: Vec<T>, next_cursor: Option<String>) -> Page<T> {
        Page { items, next_cursor }
    }
}

impl<T> Default for Page<T> {
    fn default() -> Page<T> {
        Page::new(Vec::new(), None)
    }
}

/// A whole listing, or as much of it as was asked for (no cursor).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "{T}List")]
pub struct List<T> {
    pub items: Vec<T>,
}

impl<T> List<T> {
    pub fn new(items: Vec<T>) -> List<T> {
        List { items }
    }
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskEnvelope {
    pub task: TaskState,
    /// What the task's model calls used, by model (`GET
    /// /admin/tasks/{id}`).
    pub usage: Option<crate::UsageReport>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PlanEnvelope {
    pub plan: TaskDecomposition,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalEnvelope {
    pub approval: ApprovalRequest,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SharedStateEnvelope {
    pub state: SharedHarnessState,
}

/// A governance-ledger entry, as the seed's detail and mutation responses
/// name it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GovernanceEnvelope {
    pub entry: crate::GovernanceEntry,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContractEnvelope {
    pub contract: HarnessContract,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EvidenceEnvelope {
    pub evidence: EvidenceBundle,
}

/// A shared state after conflict detection, with what was found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConflictReport {
    pub state: SharedHarnessState,
    pub conflicts: Vec<Conflict>,
}

/// An agent session; shown alone, with the sessions it delegated.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentSessionEnvelope {
    pub session: AgentSessionInfo,
    pub children: Option<Vec<AgentSessionInfo>>,
}

/// A snapshot without its payload, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SnapshotInfo {
    pub id: SnapshotId,
    pub task_id: TaskId,
    /// The position in the task's log it copies.
    pub seq: u64,
    pub created_at: Timestamp,
}

/// A snapshot just taken, with the status of the task it copies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TakenSnapshot {
    pub id: SnapshotId,
    pub task_id: TaskId,
    pub seq: u64,
    pub created_at: Timestamp,
    pub status: TaskStatus,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SnapshotEnvelope {
    pub snapshot: TakenSnapshot,
}

/// A record of a change made outside a task's log (shared states, contracts,
/// evidence): who did what to which subject, and when. Written in the same
/// transaction as the change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AuditRecord {
    /// Its position (0 before it is stored).
    pub seq: u64,
    pub at: Timestamp,
    pub who: String,
    /// What was done: `shared_state.create`, `shared_state.add_action`, …
    pub action: String,
    /// What it was done to: a shared state's, contract's or bundle's id.
    pub subject: String,
    #[serde(default)]
    pub detail: serde_json::Value,
}

/// What a pause or abort did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ControlResult {
    /// Done here: the task is now in this status.
    Applied { status: TaskStatus },
    /// The task's live runner was asked and will act shortly.
    Requested { runner: RunnerInfo },
    /// Nothing to do: the task already was in this status.
    Already { status: TaskStatus },
}

/// A resume that was started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ResumeResult {
    pub task_id: TaskId,
    pub resuming: bool,
}

/// The tasks a resume of everything started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ResumeAllResult {
    pub task_ids: Vec<TaskId>,
}

/// Why a pause or abort is asked (it goes into the task's log).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Reason {
    pub reason: Option<String>,
}

/// Which steps a resume runs again and which it marks skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeRequest {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rerun: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip: Vec<String>,
}

/// `POST /admin/tasks/{id}/fork`: where in the source's history the fork
/// starts (exactly one of `before`, `after` and `at`; `turn` only with
/// `at`), and what it changes.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [
    {
        "required": ["before"],
        "properties": {
            "before": { "type": "string" },
            "after": { "type": "null" }, "at": { "type": "null" }, "turn": { "type": "null" },
        },
    },
    {
        "required": ["after"],
        "properties": {
            "after": { "type": "string" },
            "before": { "type": "null" }, "at": { "type": "null" }, "turn": { "type": "null" },
        },
    },
    {
        "required": ["at"],
        "properties": {
            "at": { "type": "integer" },
            "before": { "type": "null" }, "after": { "type": "null" },
        },
    },
]))]
pub struct ForkRequest {
    /// Just before this step's first attempt started.
    #[schemars(length(min = 1))]
    pub before: Option<String>,
    /// Just after this step completed (as rein kept the workspace then).
    #[schemars(length(min = 1))]
    pub after: Option<String>,
    /// As of this event of the source's log (`seq` of a history point).
    #[schemars(range(min = 1))]
    pub at: Option<u64>,
    /// With `at` (an agent step's start) or `before`: the step's agent
    /// session continues after this many of its turns.
    pub turn: Option<u32>,
    /// An empty directory to make the fork's workspace in (a server's caller
    /// may name only one inside its `--workspace-root`); a new one under the
    /// data directory if absent.
    pub workspace: Option<String>,
    /// Steps' fields for the fork, as `STEP.FIELD` → value (for example
    /// `{"draft.model": "other-model"}` or `{"build.run": "make test"}`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[schemars(extend("propertyNames" = { "pattern": "^.+\\..+$" }))]
    pub set: std::collections::BTreeMap<String, serde_json::Value>,
}

/// `POST /admin/tasks/{id}/retry`: a failed task forked just before its
/// first failed step, with these changes.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryRequest {
    /// An empty directory to make the fork's workspace in (a server's caller
    /// may name only one inside its `--workspace-root`); a new one under the
    /// data directory if absent.
    pub workspace: Option<String>,
    /// Steps' fields for the fork, as `STEP.FIELD` → value (for example
    /// `{"draft.model": "other-model"}` or `{"build.run": "make test"}`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[schemars(extend("propertyNames" = { "pattern": "^.+\\..+$" }))]
    pub set: std::collections::BTreeMap<String, serde_json::Value>,
}

/// A person's answer to an approval request; who decided is whoever is signed in.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    pub decision: Decision,
    pub selected_option: Option<String>,
    pub reason: Option<String>,
    /// Who decides instead (with `delegate`).
    pub delegate_to: Option<String>,
}

/// A contract's move along its status flow.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusRequest {
    pub status: ContractStatus,
    pub reason: Option<String>,
}

/// A review as a person posts it: the reviewer is whoever is signed in.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewRequest {
    pub verdict: ReviewVerdict,
    pub comment: Option<String>,
    /// One with the same id is replaced.
    pub id: Option<String>,
}

/// Pins an agent session to a runtime, or unpins it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PinRequest {
    /// `rein` or a harness id; `null` (or absent) unpins.
    #[serde(default)]
    #[schemars(regex(pattern = r"\S"))]
    pub runtime: Option<String>,
}

/// Hands an agent session to another plugin to run (harness-sdk rules
/// 22–23), or takes it back (`plugin: null`). The session must be
/// model-locked and pinned to its owner's harness, and that harness must list
/// the plugin in `delegated_execution_plugin_ids`. The session's key, store
/// path and id, when given, must be exactly the stored ones: a refusal names
/// every difference.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DelegateSessionRequest {
    /// The plugin to run the session; `null` (or absent) takes it back.
    #[serde(default)]
    #[schemars(regex(pattern = r"\S"))]
    pub plugin: Option<String>,
    /// The key harnesses are given for the session (its `ses_…` id).
    #[serde(default)]
    pub session_key: Option<String>,
    /// Where the session is kept: its task (`task_…`).
    #[serde(default)]
    pub store_path: Option<String>,
    /// The runtime's own id for the conversation (`native_session_id`).
    #[serde(default)]
    pub session_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionRequest {
    /// One of the server's tokens.
    pub token: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionResponse {
    /// Send it as `X-CSRF-Token` with every change made with the cookie.
    pub csrf_token: String,
}

/// A task to run: a `plan` (its steps), or a `goal` a model decomposes at CP2
/// (with the `provider` … `max_parallel` keys that go with a goal).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [
    {
        "required": ["plan"],
        "properties": {
            "plan": { "type": "object" },
            "goal": { "type": "null" },
            "provider": { "type": "null" },
            "model": { "type": "null" },
            "runtime": { "type": "null" },
            "confirm": { "type": "null" },
            "attempts": { "type": "null" },
            "max_tokens": { "type": "null" },
            "max_parallel": { "type": "null" },
        },
    },
    {
        "required": ["goal"],
        "properties": { "goal": { "type": "string" }, "plan": { "type": "null" } },
    },
]))]
pub struct SubmitTask {
    pub plan: Option<TaskDecomposition>,
    /// Instead of a plan: what the task is to achieve, decomposed into steps by
    /// a model at CP2.
    #[schemars(regex(pattern = r"\S"))]
    pub goal: Option<String>,
    pub provider: Option<String>,
    pub model: Option<String>,
    /// `auto`, `rein` or a harness id.
    #[schemars(regex(pattern = r"\S"))]
    pub runtime: Option<String>,
    /// Whether a person confirms the decomposed plan before it runs (default true).
    pub confirm: Option<bool>,
    #[serde(default, deserialize_with = "crate::de::integral")]
    #[schemars(range(min = 1, max = 10))]
    pub attempts: Option<u32>,
    /// The most tokens one decomposition answer may have (default 4096).
    #[serde(default, deserialize_with = "crate::de::integral")]
    #[schemars(range(min = 256, max = 131_072))]
    pub max_tokens: Option<u32>,
    #[serde(default, deserialize_with = "crate::de::integral")]
    #[schemars(range(min = 1))]
    pub max_parallel: Option<u32>,
    /// What the goal's model calls may spend, all its steps together (a
    /// plan says it as its own `budget`).
    pub budget: Option<crate::Budget>,
    pub session_id: Option<String>,
    /// An absolute directory inside one of the server's `--workspace-root`
    /// directories; refused without one.
    pub workspace: Option<std::path::PathBuf>,
}

/// One isolated completion: prompt-only, no tools.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompletionRequest {
    /// Not empty, nor only spaces.
    #[schemars(regex(pattern = r"\S"))]
    pub prompt: String,
    pub system: Option<String>,
    pub provider: Option<String>,
    pub model: Option<String>,
    /// `auto`, `rein` or a harness id.
    #[schemars(regex(pattern = r"\S"))]
    pub runtime: Option<String>,
    /// Milliseconds for the whole completion (default 120000).
    #[serde(default, deserialize_with = "crate::de::integral")]
    #[schemars(range(min = 1, max = 1_800_000))]
    pub timeout_ms: Option<u64>,
    /// A JSON Schema the answer must match.
    pub schema: Option<serde_json::Map<String, serde_json::Value>>,
    /// What counts as an answer (spec harness-sdk rule 20): `default` refuses
    /// empty visible text; `strict` (the SDK's `strict_visible`) takes it,
    /// and never shows thinking as text.
    pub visibility: Option<Visibility>,
}

/// The output text policy of an isolated completion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Visibility {
    #[default]
    Default,
    #[serde(alias = "strict_visible")]
    Strict,
}

/// Who prepares a harness's credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuthBootstrap {
    /// rein: the harness is handed the transport and auth to use.
    Host,
    /// The harness prepares its own.
    Harness,
}

/// A runtime runs can select: the built-in one, or a registered harness with
/// what it declares.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HarnessInfo {
    pub id: String,
    pub label: String,
    /// The plugin that registered it (`null`: built in).
    #[serialize_always]
    pub plugin: Option<String>,
    pub builtin: bool,
    /// What its runtime speaks: `rein` or `acp`.
    pub protocol: String,
    /// Providers `auto` may choose it for (absent: it is asked for every one).
    pub auto_selection_provider_ids: Option<Vec<String>>,
    pub auth_bootstrap: Option<AuthBootstrap>,
    /// Where its sessions' work happens: a provider-hosted workspace or a
    /// local folder.
    pub workspace_environment: Option<WorkspaceEnvironment>,
    pub delegated_execution_plugin_ids: Option<Vec<String>>,
    /// The plugin's status (enabled, disabled, revoked); none for the
    /// built-in runtime.
    pub status: Option<String>,
}

/// How a component, or the whole server, is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    Healthy,
    Degraded,
    Unhealthy,
}

impl HealthStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            HealthStatus::Healthy => "healthy",
            HealthStatus::Degraded => "degraded",
            HealthStatus::Unhealthy => "unhealthy",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Component {
    pub status: HealthStatus,
    pub detail: String,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Alert {
    /// `warning` or `critical`.
    pub severity: String,
    /// The component it is about (`task_store`, `permission_manager`, …).
    pub component: String,
    pub message: String,
    /// When it was first seen.
    pub timestamp: Timestamp,
    /// Whether the component is healthy again (the alert is kept for an
    /// hour after that, so a problem that came and went is still told).
    pub resolved: bool,
    pub resolved_at: Option<Timestamp>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Components {
    pub task_store: Component,
    pub sandbox_manager: Component,
    pub permission_manager: Component,
    pub audit_logger: Component,
}

impl Components {
    /// Each component with its name on the wire.
    pub fn named(&self) -> [(&'static str, &Component); 4] {
        [
            ("task_store", &self.task_store),
            ("sandbox_manager", &self.sandbox_manager),
            ("permission_manager", &self.permission_manager),
            ("audit_logger", &self.audit_logger),
        ]
    }
}

/// `/healthz`: each component probed for real (spec §6 rule 23).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    pub status: HealthStatus,
    pub components: Components,
    pub metrics: Option<HarnessMetrics>,
    pub alerts: Vec<Alert>,
    /// This node and the tasks it holds by lease, where several nodes share
    /// the store (PostgreSQL); absent on a store one machine owns.
    pub node: Option<NodeHealth>,
}

/// One node of several sharing a store: `/healthz`'s `node`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeHealth {
    /// The node, as its leases name it.
    pub runner: crate::RunnerInfo,
    /// How long a lease lasts unless renewed (it is renewed every quarter of it).
    pub lease_ms: u64,
    /// The tasks this node holds a live lease on, by id.
    pub leases: Vec<crate::TaskId>,
    /// Tasks running here now, and the most this node takes at once.
    pub running: usize,
    pub max_tasks: usize,
}

/// An approval status, or `all`.
fn approval_status_or_all(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let one = generator.subschema_for::<crate::ApprovalStatus>();
    schemars::json_schema!({ "anyOf": [one, { "const": "all" }] })
}

/// `GET /admin/tasks`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskQuery {
    /// Only this session's tasks.
    pub session_id: Option<String>,
    /// Only tasks in this status.
    #[serde(default)]
    #[schemars(with = "TaskStatus")]
    pub status: Option<String>,
    /// Created at or after (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub created_from: Option<String>,
    /// Created before (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub created_to: Option<String>,
    /// 1–500 (default 50).
    #[serde(default, deserialize_with = "crate::de::within::<_, _, 1, 500>")]
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<usize>,
    /// `next_cursor` of the previous page (the id of its last task).
    #[serde(default)]
    #[schemars(with = "TaskId")]
    pub cursor: Option<String>,
    /// Only the forks of this task.
    #[serde(default)]
    #[schemars(with = "TaskId")]
    pub forked_from: Option<String>,
}

/// `GET /admin/usage`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    /// Only this task's model calls.
    #[schemars(with = "Option<TaskId>")]
    pub task: Option<String>,
    /// Only this agent session's (`ses_…`).
    pub session: Option<String>,
    /// Recorded at or after (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub since: Option<String>,
    /// Recorded before (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub until: Option<String>,
    /// A row per `task`, `model` or `day` besides the total.
    #[schemars(with = "Option<UsageBy>")]
    pub by: Option<String>,
}

/// What a usage report adds up by.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UsageBy {
    Task,
    Model,
    Day,
}

/// `GET /admin/tasks/{id}/events`, `GET /admin/audit`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogQuery {
    /// Only entries after this position.
    #[serde(
        default,
        deserialize_with = "crate::de::within::<_, _, 0, MAX_SAFE_INTEGER>"
    )]
    #[schemars(range(max = MAX_SAFE_INTEGER))]
    pub after: Option<u64>,
    /// 1–10000 (default 1000).
    #[serde(default, deserialize_with = "crate::de::within::<_, _, 1, 10_000>")]
    #[schemars(range(min = 1, max = 10_000))]
    pub limit: Option<usize>,
}

/// The event and audit streams.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamQuery {
    /// Resume after this position (or send `Last-Event-ID`).
    #[serde(
        default,
        deserialize_with = "crate::de::within::<_, _, 0, MAX_SAFE_INTEGER>"
    )]
    #[schemars(range(max = MAX_SAFE_INTEGER))]
    pub after: Option<u64>,
}

/// `GET /admin/approvals`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalQuery {
    /// An approval status (`pending`, `approved`, …), or `all` (the default).
    #[serde(default)]
    #[schemars(schema_with = "approval_status_or_all")]
    pub status: Option<String>,
    /// Only this task's requests.
    #[serde(default)]
    #[schemars(with = "TaskId")]
    pub task_id: Option<String>,
    /// 1–500 (default 50).
    #[serde(default, deserialize_with = "crate::de::within::<_, _, 1, 500>")]
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<usize>,
}

/// `GET /admin/ledger/verify`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifyQuery {
    /// `SEQ:HASH`, a head recorded earlier: also check that the ledger still
    /// holds it.
    #[schemars(regex(pattern = r"^0*[1-9][0-9]{0,18}:[0-9a-fA-F]{64}$"))]
    pub head: Option<String>,
}

/// `GET /admin/harnesses/explain`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExplainQuery {
    /// The provider.
    #[schemars(length(min = 1))]
    pub provider: String,
    /// The model.
    pub model: Option<String>,
    /// What a step would name: `auto`, `rein` or a harness id.
    pub runtime: Option<String>,
}

/// `GET /admin/agent-sessions`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionQuery {
    /// Only this task's sessions.
    #[serde(default)]
    #[schemars(with = "TaskId")]
    pub task_id: Option<String>,
    /// `active` or `ended`.
    #[serde(default)]
    #[schemars(with = "crate::SessionStatus")]
    pub status: Option<String>,
    /// The children a session delegated.
    pub parent: Option<String>,
    /// 1–500 (default 50).
    #[serde(default, deserialize_with = "crate::de::within::<_, _, 1, 500>")]
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<usize>,
    /// `next_cursor` of the previous page (`TIME|ID`).
    #[schemars(regex(pattern = r"\|"))]
    pub cursor: Option<String>,
}

/// `GET /admin/harness/contracts`. The camelCase names these routes once
/// took are still accepted.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContractQuery {
    /// Only contracts in this status.
    #[serde(default)]
    #[schemars(with = "ContractStatus")]
    pub status: Option<String>,
    /// Only this task's contracts.
    #[serde(alias = "taskId")]
    pub task_id: Option<String>,
    /// Only contracts linked to this shared state.
    #[serde(alias = "sharedStateId")]
    pub shared_state_id: Option<String>,
    /// Only contracts of this risk (the seed's `riskLevel`).
    #[serde(default, alias = "riskLevel")]
    #[schemars(with = "Option<crate::Risk>")]
    pub risk_level: Option<String>,
    /// Only records with this tag.
    pub tag: Option<String>,
    /// Only this actor's (the seed's `actorId`).
    #[serde(alias = "actorId")]
    pub actor_id: Option<String>,
    /// Only this channel's (the seed's `channelId`).
    #[serde(alias = "channelId")]
    pub channel_id: Option<String>,
    /// Only those of this source session (the seed's `sourceSessionId`).
    #[serde(alias = "sourceSessionId")]
    pub source_session_id: Option<String>,
    /// Created at or after (RFC 3339; the seed's `createdFromUtc`).
    #[serde(alias = "createdFromUtc", alias = "createdFrom")]
    #[schemars(extend("format" = "date-time"))]
    pub created_from: Option<String>,
    /// Created before (RFC 3339; the seed's `createdToUtc`).
    #[serde(alias = "createdToUtc", alias = "createdTo")]
    #[schemars(extend("format" = "date-time"))]
    pub created_to: Option<String>,
    /// 1–500 (default 50).
    #[serde(default, deserialize_with = "crate::de::within::<_, _, 1, 500>")]
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<usize>,
    /// `next_cursor` of the previous page (`TIME|ID`).
    #[schemars(regex(pattern = r"\|"))]
    pub cursor: Option<String>,
}

/// `GET /admin/harness/evidence`. The camelCase names these routes once took
/// are still accepted.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvidenceQuery {
    /// Only the bundles of this contract (the seed's `harnessContractId`).
    #[serde(alias = "contractId", alias = "harnessContractId")]
    pub contract_id: Option<String>,
    /// Only the bundles of this task.
    #[serde(alias = "taskId")]
    pub task_id: Option<String>,
    /// Only bundles linked to this shared state.
    #[serde(alias = "sharedStateId")]
    pub shared_state_id: Option<String>,
    /// Only bundles of this learning proposal (the seed's).
    #[serde(alias = "learningProposalId")]
    pub learning_proposal_id: Option<String>,
    /// Only bundles of this confidence level (the seed's levels).
    #[serde(default)]
    #[schemars(with = "Option<crate::ConfidenceLevel>")]
    pub confidence: Option<String>,
    /// Only records with this tag.
    pub tag: Option<String>,
    /// Only this actor's (the seed's `actorId`).
    #[serde(alias = "actorId")]
    pub actor_id: Option<String>,
    /// Only this channel's (the seed's `channelId`).
    #[serde(alias = "channelId")]
    pub channel_id: Option<String>,
    /// Only those of this source session (the seed's `sourceSessionId`).
    #[serde(alias = "sourceSessionId")]
    pub source_session_id: Option<String>,
    /// Created at or after (RFC 3339; the seed's `createdFromUtc`).
    #[serde(alias = "createdFromUtc", alias = "createdFrom")]
    #[schemars(extend("format" = "date-time"))]
    pub created_from: Option<String>,
    /// Created before (RFC 3339; the seed's `createdToUtc`).
    #[serde(alias = "createdToUtc", alias = "createdTo")]
    #[schemars(extend("format" = "date-time"))]
    pub created_to: Option<String>,
    /// 1–500 (default 50).
    #[serde(default, deserialize_with = "crate::de::within::<_, _, 1, 500>")]
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<usize>,
    /// `next_cursor` of the previous page (`TIME|ID`).
    #[schemars(regex(pattern = r"\|"))]
    pub cursor: Option<String>,
}

/// `GET /admin/harness-states`. The camelCase names these routes once took
/// are still accepted.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StateQuery {
    /// Only this session's states.
    #[serde(alias = "sessionId")]
    pub session_id: Option<String>,
    /// Only the states of this session's children.
    #[serde(alias = "parentSessionId")]
    pub parent_session_id: Option<String>,
    /// Only states linked to this contract.
    #[serde(alias = "harnessContractId")]
    pub harness_contract_id: Option<String>,
    /// Only states in this status.
    #[serde(default)]
    #[schemars(with = "crate::WorkStatus")]
    pub status: Option<String>,
    /// Only states with this tag.
    pub tag: Option<String>,
    /// Created at or after (RFC 3339; the seed's `createdFromUtc`).
    #[serde(alias = "createdFromUtc", alias = "createdFrom")]
    #[schemars(extend("format" = "date-time"))]
    pub created_from: Option<String>,
    /// Created before (RFC 3339; the seed's `createdToUtc`).
    #[serde(alias = "createdToUtc", alias = "createdTo")]
    #[schemars(extend("format" = "date-time"))]
    pub created_to: Option<String>,
    /// 1–500 (default 50).
    #[serde(default, deserialize_with = "crate::de::within::<_, _, 1, 500>")]
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<usize>,
    /// `next_cursor` of the previous page (`TIME|ID`).
    #[schemars(regex(pattern = r"\|"))]
    pub cursor: Option<String>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn pages_and_control_results_read_as_the_server_writes_them() {
        let page: Page<u32> = serde_json::from_str(r#"{"items":[1,2]}"#).unwrap();
        assert_eq!(page, Page::new(vec![1, 2], None));
        assert_eq!(
            serde_json::to_value(&page).unwrap(),
            serde_json::json!({ "items": [1, 2], "next_cursor": null })
        );
        let applied = ControlResult::Applied {
            status: TaskStatus::Paused,
        };
        let text = serde_json::to_string(&applied).unwrap();
        assert_eq!(text, r#"{"outcome":"applied","status":"paused"}"#);
        assert_eq!(
            serde_json::from_str::<ControlResult>(&text).unwrap(),
            applied
        );
    }

    #[test]
    fn requests_refuse_fields_they_do_not_know() {
        let err = serde_json::from_str::<DecisionRequest>(
            r#"{"decision":"approve","decidedBy":"mallory"}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("decidedBy"), "{err}");
        let schema = serde_json::to_value(schemars::schema_for!(DecisionRequest)).unwrap();
        assert_eq!(schema["additionalProperties"], false);
    }

    #[test]
    fn generic_bodies_are_named_after_what_they_hold() {
        use schemars::JsonSchema;
        assert_eq!(Page::<crate::TaskSummary>::schema_name(), "TaskSummaryPage");
        assert_eq!(
            List::<crate::HarnessEvent>::schema_name(),
            "HarnessEventList"
        );
        assert_eq!(ErrorBody::schema_name(), "Error");
    }
}
