//! Every operation of the admin API, defined once: its method, path, the role
//! it needs, the types of its path id, query, request and response, its
//! success status and the errors it documents.
//!
//! The server's router, its role checks and its OpenAPI document are built
//! from [`ALL`]; the CLI's HTTP client calls an operation by its type
//! ([`Endpoint`]), so a path or a body type written here is the only one.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::api::*;
use crate::harness::Completion;
use crate::{
    Action, AgentSessionInfo, ApprovalId, ApprovalRequest, EvidenceBundle, EvidenceCheck,
    EvidenceItem, GovernanceAdd, GovernanceEntry, GovernanceQuery, HarnessContract, HarnessEvent,
    HarnessMetrics, History, LedgerCheck, LedgerEntry, Participant, RevokeRequest,
    SelectionDecision, SessionId, SharedHarnessState, SnapshotId, TaskId, TaskSummary, UsageReport,
};

/// Who may call an operation: roles go viewer < operator < admin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Viewer,
    Operator,
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }
}

/// An operation's HTTP method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Post,
    Delete,
}

impl Method {
    /// As HTTP writes it (`GET`).
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Delete => "DELETE",
        }
    }

    /// As OpenAPI writes it (`get`).
    pub fn lower(self) -> &'static str {
        match self {
            Method::Get => "get",
            Method::Post => "post",
            Method::Delete => "delete",
        }
    }
}

/// Adds a type's schema to a document's components and answers a reference
/// to it (or the schema itself, for a type that is always inlined).
pub type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// What a request or response body holds.
#[derive(Debug, Clone, Copy)]
pub enum Content {
    /// JSON of a type.
    Json(SchemaFn),
    /// A plan as JSON ([`SubmitTask`]) or the TOML of a plan file.
    PlanOrToml,
    /// Text of this media type.
    Text(&'static str),
    /// Server-Sent Events whose data is JSON of a type.
    Events(SchemaFn),
    /// No body (204).
    Empty,
}

/// One operation as the router and the document see it.
#[derive(Debug, Clone, Copy)]
pub struct Operation {
    /// Its type's name (`ShowTask`): the document's `operationId`.
    pub name: &'static str,
    pub method: Method,
    /// The path as a template (`/admin/tasks/{id}`).
    pub path: &'static str,
    /// `None`: no authentication.
    pub role: Option<Role>,
    /// The doc comment of its type, in one line.
    summary: &'static str,
    /// What the path's `{id}` is (`None`: it has none).
    pub param: Option<SchemaFn>,
    /// The type whose fields are its query parameters.
    pub query: Option<SchemaFn>,
    pub request: Option<Content>,
    pub success: u16,
    pub response: Content,
    pub errors: &'static [u16],
}

impl Operation {
    pub fn summary(&self) -> &'static str {
        self.summary.trim()
    }
}

/// A path's `{id}` as the caller gives it: nothing, an id, or a name.
pub trait PathParam {
    /// The path segment, percent-encoded (`None`: the path has no `{id}`).
    fn segment(&self) -> Option<String>;
}

impl PathParam for () {
    fn segment(&self) -> Option<String> {
        None
    }
}

macro_rules! path_params {
    ($($t:ty),*) => {$(
        impl PathParam for $t {
            fn segment(&self) -> Option<String> {
                Some(escape(&self.to_string()))
            }
        }
    )*};
}

path_params!(TaskId, ApprovalId, SnapshotId, SessionId, String, str);

/// One operation, typed: what a client sends and what it gets back.
pub trait Endpoint {
    /// What fills the path's `{id}` (`()`: none).
    type Param: PathParam + ?Sized;
    /// Its query parameters (`()`: none).
    type Query: Serialize;
    /// Its request body (`()`: none).
    type Request: Serialize;
    /// Its success body (`()`: none; for a stream, one event's data).
    type Response: DeserializeOwned;
    const OPERATION: Operation;

    /// The path with its `{id}` filled in.
    fn path(param: &Self::Param) -> String {
        let path = Self::OPERATION.path;
        match param.segment() {
            Some(segment) => path.replacen("{id}", &segment, 1),
            None => path.to_owned(),
        }
    }
}

fn subschema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

fn inline<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    T::json_schema(generator)
}

/// A path's `{id}` that the caller may choose (shared states, contracts,
/// evidence, the sessions tasks are grouped by): any non-empty name but the
/// dot segments, which every client resolves away before sending the path.
fn name(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "minLength": 1, "not": { "enum": [".", ".."] } })
}

/// A contract as created: a [`HarnessContract`] that starts as `draft` or
/// `proposed` (it moves on with a status change).
fn new_contract(g: &mut SchemaGenerator) -> Schema {
    let contract = g.subschema_for::<HarnessContract>();
    json_schema!({
        "allOf": [contract, { "properties": { "status": { "enum": ["draft", "proposed"] } } }],
    })
}

/// An evidence item as a client sends it: any [`EvidenceItem`] but one
/// claiming rein captured it (only rein records those).
fn reported_item(g: &mut SchemaGenerator) -> Schema {
    let item = g.subschema_for::<EvidenceItem>();
    json_schema!({
        "allOf": [item, { "properties": { "capture": { "not": { "const": "rein" } } } }],
    })
}

/// The errors an operation documents unless it names its own.
const ERRORS: &[u16] = &[400, 401, 403, 404];

macro_rules! or_unit {
    () => {
        ()
    };
    ($t:ty) => {
        $t
    };
}

macro_rules! role {
    (anyone) => {
        None
    };
    ($role:ident) => {
        Some(Role::$role)
    };
}

macro_rules! param_doc {
    () => {
        None
    };
    ($t:ty) => {
        Some(subschema::<$t> as SchemaFn)
    };
    ($t:ty = $doc:expr) => {
        Some($doc as SchemaFn)
    };
}

macro_rules! query_doc {
    () => {
        None
    };
    ($t:ty) => {
        Some(inline::<$t> as SchemaFn)
    };
}

macro_rules! body_doc {
    ($t:ty) => {
        Content::Json(subschema::<$t>)
    };
    ($t:ty = $doc:expr) => {
        $doc
    };
}

macro_rules! request_doc {
    () => { None };
    ($t:ty $(= $doc:expr)?) => { Some(body_doc!($t $(= $doc)?)) };
}

macro_rules! errors {
    () => { ERRORS };
    ([$($error:literal),*]) => { &[$($error),*] };
}

/// Defines each operation as a type implementing [`Endpoint`], and [`ALL`].
macro_rules! endpoints {
    ($(
        $(#[doc = $doc:literal])+
        $name:ident = $method:ident $path:literal for $role:ident {
            $(id: $param:ty $(= $param_doc:expr)?,)?
            $(query: $query:ty,)?
            $(request: $request:ty $(= $request_doc:expr)?,)?
            response: $success:literal $response:ty $(= $response_doc:expr)?,
            $(errors: [$($error:literal),*],)?
        }
    )*) => {
        $(
            $(#[doc = $doc])+
            #[derive(Debug, Clone, Copy)]
            pub struct $name;

            impl Endpoint for $name {
                type Param = or_unit!($($param)?);
                type Query = or_unit!($($query)?);
                type Request = or_unit!($($request)?);
                type Response = $response;
                const OPERATION: Operation = Operation {
                    name: stringify!($name),
                    method: Method::$method,
                    path: $path,
                    role: role!($role),
                    summary: concat!($($doc),+),
                    param: param_doc!($($param $(= $param_doc)?)?),
                    query: query_doc!($($query)?),
                    request: request_doc!($($request $(= $request_doc)?)?),
                    success: $success,
                    response: body_doc!($response $(= $response_doc)?),
                    errors: errors!($([$($error),*])?),
                };
            }
        )*

        /// Every operation of the API.
        pub const ALL: &[Operation] = &[$($name::OPERATION),*];
    };
}

endpoints! {
    /// Health of the task store, the sandbox manager, the permission manager and the audit logger
    Healthz = Get "/healthz" for anyone {
        response: 200 Health,
        errors: [503],
    }

    /// This document: the OpenAPI 3.1 description of every route (open, so that a client generator can read it)
    OpenApiDocument = Get "/openapi.json" for anyone {
        response: 200 serde_json::Value,
        errors: [],
    }

    /// This reference as a web page (every operation and schema, no external assets)
    ApiDocs = Get "/docs/api" for anyone {
        response: 200 String = Content::Text("text/html"),
    }

    /// Metrics in the Prometheus text format
    MetricsText = Get "/metrics" for Viewer {
        response: 200 String = Content::Text("text/plain"),
    }

    /// Exchange a token for a session cookie and a CSRF token
    OpenSession = Post "/auth/session" for anyone {
        request: SessionRequest,
        response: 200 SessionResponse,
        errors: [400, 401, 413],
    }

    /// Metrics as JSON
    Metrics = Get "/admin/metrics" for Viewer {
        response: 200 HarnessMetrics,
    }

    /// What model calls used, in all and by task, model or day, with their cost at the server's prices (null when a model has none, named in `unpriced`)
    Usage = Get "/admin/usage" for Viewer {
        query: UsageQuery,
        response: 200 UsageReport,
        errors: [400, 401],
    }

    /// List tasks, newest first
    ListTasks = Get "/admin/tasks" for Viewer {
        query: TaskQuery,
        response: 200 Page<TaskSummary>,
    }

    /// Run a plan (JSON {plan, session_id?, workspace?}, or a plan file's TOML), or a goal a model decomposes (JSON {goal, provider?, model?, runtime?, confirm?, attempts?, …}); a `workspace` or `allow_read` outside the server's --workspace-root is a 400
    CreateTask = Post "/admin/tasks" for Operator {
        request: SubmitTask = Content::PlanOrToml,
        response: 201 TaskEnvelope,
        errors: [400, 401, 403, 413],
    }

    /// The harnesses this server's runs select from, the built-in runtime first
    ListHarnesses = Get "/admin/harnesses" for Viewer {
        response: 200 List<HarnessInfo>,
    }

    /// Switch a loaded plugin off while rein runs: its harnesses are no longer selected, and a run that names one is refused naming why (409: the plugin was revoked)
    DisablePlugin = Post "/admin/harnesses/plugins/{id}/disable" for Admin {
        id: str = name,
        response: 200 List<HarnessInfo>,
        errors: [400, 401, 403, 404, 409],
    }

    /// Switch a disabled plugin on again (409: the plugin was revoked)
    EnablePlugin = Post "/admin/harnesses/plugins/{id}/enable" for Admin {
        id: str = name,
        response: 200 List<HarnessInfo>,
        errors: [400, 401, 403, 404, 409],
    }

    /// Withdraw a plugin's grants while rein runs: what it is running is cancelled, its executor handles stop working, and its harnesses and sessions are refused naming why, until rein restarts
    RevokePlugin = Post "/admin/harnesses/plugins/{id}/revoke" for Admin {
        id: str = name,
        response: 200 List<HarnessInfo>,
        errors: [400, 401, 403, 404, 409],
    }

    /// Reload a plugin while rein runs: its program is restarted at its next call (calls waiting on it fail, saying so), its executor handles stop working and its sessions' executors are retired and ensured again at their next turn (409: the plugin was revoked)
    ReloadPlugin = Post "/admin/harnesses/plugins/{id}/reload" for Admin {
        id: str = name,
        response: 200 List<HarnessInfo>,
        errors: [400, 401, 403, 404, 409],
    }

    /// Which runtime would serve a model route here, and why (404: no such harness; 409: it cannot serve the route)
    ExplainHarness = Get "/admin/harnesses/explain" for Viewer {
        query: ExplainQuery,
        response: 200 SelectionDecision,
        errors: [400, 401, 403, 404, 409],
    }

    /// Agent sessions (`ses_…`), newest task first
    ListAgentSessions = Get "/admin/agent-sessions" for Viewer {
        query: SessionQuery,
        response: 200 Page<AgentSessionInfo>,
    }

    /// An agent session with the children it delegated
    ShowAgentSession = Get "/admin/agent-sessions/{id}" for Viewer {
        id: SessionId,
        response: 200 AgentSessionEnvelope,
    }

    /// Reset a session through its harness: its conversation starts over (409: its task is running, its harness's cleanup failed, or it is a delegated child, owned by its parent)
    ResetAgentSession = Post "/admin/agent-sessions/{id}/reset" for Operator {
        id: SessionId,
        response: 200 AgentSessionEnvelope,
        errors: [400, 401, 403, 404, 409],
    }

    /// Pin a session to a runtime (`rein` or a harness id; null unpins): above every other runtime setting for its later turns (400: no such runtime; 409: a delegated child)
    PinAgentSession = Post "/admin/agent-sessions/{id}/pin" for Operator {
        id: SessionId,
        request: PinRequest,
        response: 200 AgentSessionEnvelope,
        errors: [400, 401, 403, 404, 409, 413],
    }

    /// Hand a session to another plugin to run, or take it back (`plugin: null`): the owner's harness must list the plugin in `delegated_execution_plugin_ids`, the session must be model-locked and pinned to that harness (400: no such plugin; 409: refused, naming every difference, or a delegated child)
    DelegateAgentSession = Post "/admin/agent-sessions/{id}/delegate" for Operator {
        id: SessionId,
        request: DelegateSessionRequest,
        response: 200 AgentSessionEnvelope,
        errors: [400, 401, 403, 404, 409, 413],
    }

    /// One isolated completion: a prompt with no tools, on the runtime the selection policy picks; with `schema`, an answer that does not match is a 502 naming each violation
    Complete = Post "/admin/completions" for Operator {
        request: CompletionRequest,
        response: 200 Completion,
        errors: [400, 401, 403, 413, 502, 503],
    }

    /// A task's state
    ShowTask = Get "/admin/tasks/{id}" for Viewer {
        id: TaskId,
        response: 200 TaskEnvelope,
    }

    /// Delete a finished or paused task with its log and snapshots
    DeleteTask = Delete "/admin/tasks/{id}" for Operator {
        id: TaskId,
        response: 204 () = Content::Empty,
        errors: [400, 401, 403, 404, 409],
    }

    /// A task's event log
    TaskEvents = Get "/admin/tasks/{id}/events" for Viewer {
        id: TaskId,
        query: LogQuery,
        response: 200 List<HarnessEvent>,
    }

    /// A task's events as Server-Sent Events (id = seq); ends when the task finishes; one `stalled` event (no id) if the task is left in progress by a runner that is gone
    TaskEventStream = Get "/admin/tasks/{id}/events/stream" for Viewer {
        id: TaskId,
        query: StreamQuery,
        response: 200 HarnessEvent = Content::Events(subschema::<HarnessEvent>),
    }

    /// Every task's events as Server-Sent Events (id = global position)
    EventStream = Get "/admin/events/stream" for Viewer {
        query: StreamQuery,
        response: 200 HarnessEvent = Content::Events(subschema::<HarnessEvent>),
    }

    /// Pause a task
    PauseTask = Post "/admin/tasks/{id}/pause" for Operator {
        id: TaskId,
        request: Reason,
        response: 200 ControlResult,
        errors: [400, 401, 403, 404, 409],
    }

    /// Abort a task
    AbortTask = Post "/admin/tasks/{id}/abort" for Operator {
        id: TaskId,
        request: Reason,
        response: 200 ControlResult,
        errors: [400, 401, 403, 404, 409],
    }

    /// Resume a task in the server
    ResumeTask = Post "/admin/tasks/{id}/resume" for Operator {
        id: TaskId,
        request: ResumeRequest,
        response: 202 ResumeResult,
        errors: [400, 401, 403, 404, 409],
    }

    /// Resume every unfinished task nobody runs (pending, paused, or left in progress by a stopped runner) in the server
    ResumeAll = Post "/admin/tasks/resume" for Operator {
        response: 202 ResumeAllResult,
    }

    /// A task's plan
    TaskPlan = Get "/admin/tasks/{id}/plan" for Viewer {
        id: TaskId,
        response: 200 PlanEnvelope,
    }

    /// A task's history, oldest point first: each step started and finished (with its attempt), each engine checkpoint settled, each approval decided, each agent turn of each step, and the task's changes of status, with its log position, time and a one-line description
    TaskHistory = Get "/admin/tasks/{id}/history" for Viewer {
        id: TaskId,
        response: 200 History,
    }

    /// Fork a task: a new task whose state is the source's as of a point of its history (before or after a step, or at an event), whose workspace holds the source's files as rein kept them there, and which then runs the rest of the plan. The source is not changed. Steps that already completed in the source after the point and are not idempotent are asked about before they run
    ForkTask = Post "/admin/tasks/{id}/fork" for Operator {
        id: TaskId,
        request: ForkRequest,
        response: 201 TaskEnvelope,
        errors: [400, 401, 403, 404, 409],
    }

    /// Run a failed task again: a fork made just before its first failed step, run
    RetryTask = Post "/admin/tasks/{id}/retry" for Operator {
        id: TaskId,
        request: RetryRequest,
        response: 201 TaskEnvelope,
        errors: [400, 401, 403, 404, 409],
    }

    /// A task's snapshots, oldest first
    ListSnapshots = Get "/admin/tasks/{id}/snapshots" for Viewer {
        id: TaskId,
        response: 200 List<SnapshotInfo>,
    }

    /// Snapshot a task
    TakeSnapshot = Post "/admin/tasks/{id}/snapshots" for Operator {
        id: TaskId,
        response: 201 SnapshotEnvelope,
    }

    /// Create a new task from a snapshot
    RestoreSnapshot = Post "/admin/snapshots/{id}/restore" for Operator {
        id: SnapshotId,
        response: 201 TaskEnvelope,
    }

    /// List approval requests, newest first
    ListApprovals = Get "/admin/approvals" for Viewer {
        query: ApprovalQuery,
        response: 200 List<ApprovalRequest>,
    }

    /// An approval request
    ShowApproval = Get "/admin/approvals/{id}" for Viewer {
        id: ApprovalId,
        response: 200 ApprovalEnvelope,
    }

    /// Decide an approval request (the first valid decision wins)
    Decide = Post "/admin/approvals/{id}/decision" for Operator {
        id: ApprovalId,
        request: DecisionRequest,
        response: 200 ApprovalEnvelope,
        errors: [400, 401, 403, 404, 409, 413],
    }

    /// List shared harness states, newest first
    ListSharedStates = Get "/admin/harness/shared-state" for Viewer {
        query: StateQuery,
        response: 200 Page<SharedHarnessState>,
    }

    /// Create a shared harness state (an existing id is 409, never overwritten)
    CreateSharedState = Post "/admin/harness/shared-state" for Operator {
        request: SharedHarnessState,
        response: 201 SharedStateEnvelope,
        errors: [400, 401, 403, 409, 413],
    }

    /// A shared harness state
    ShowSharedState = Get "/admin/harness/shared-state/{id}" for Viewer {
        id: str = name,
        response: 200 SharedStateEnvelope,
    }

    /// The newest shared harness state of a session
    SessionSharedState = Get "/admin/sessions/{id}/harness-state" for Viewer {
        id: str = name,
        response: 200 SharedStateEnvelope,
    }

    /// Add a participant (one with the same id is replaced)
    AddParticipant = Post "/admin/harness/shared-state/{id}/participants" for Operator {
        id: str = name,
        request: Participant,
        response: 200 SharedStateEnvelope,
        errors: [400, 401, 403, 404, 413],
    }

    /// Add an action (one with the same id is replaced)
    AddAction = Post "/admin/harness/shared-state/{id}/actions" for Operator {
        id: str = name,
        request: Action,
        response: 200 SharedStateEnvelope,
        errors: [400, 401, 403, 404, 413],
    }

    /// Detect conflicts; the state's conflict list is replaced by what is found
    DetectConflicts = Post "/admin/harness/shared-state/{id}/detect-conflicts" for Operator {
        id: str = name,
        response: 200 ConflictReport,
        errors: [400, 401, 403, 404],
    }

    /// List harness contracts, newest first
    ListContracts = Get "/admin/harness/contracts" for Viewer {
        query: ContractQuery,
        response: 200 Page<HarnessContract>,
    }

    /// Create a harness contract, as draft or proposed; its risk is derived when not given (an existing id is 409)
    CreateContract = Post "/admin/harness/contracts" for Operator {
        request: HarnessContract = Content::Json(new_contract),
        response: 201 ContractEnvelope,
        errors: [400, 401, 403, 409, 413],
    }

    /// A harness contract with its status history
    ShowContract = Get "/admin/harness/contracts/{id}" for Viewer {
        id: str = name,
        response: 200 ContractEnvelope,
    }

    /// Move a contract along its flow (a move the flow does not allow is 409, naming the allowed ones)
    ChangeContractStatus = Post "/admin/harness/contracts/{id}/status" for Operator {
        id: str = name,
        request: StatusRequest,
        response: 200 ContractEnvelope,
        errors: [400, 401, 403, 404, 409, 413],
    }

    /// List evidence bundles, newest first
    ListEvidence = Get "/admin/harness/evidence" for Viewer {
        query: EvidenceQuery,
        response: 200 Page<EvidenceBundle>,
    }

    /// Create an evidence bundle, linked from its contract and shared state (which must exist)
    CreateEvidence = Post "/admin/harness/evidence" for Operator {
        request: EvidenceBundle,
        response: 201 EvidenceEnvelope,
        errors: [400, 401, 403, 409, 413],
    }

    /// An evidence bundle
    ShowEvidence = Get "/admin/harness/evidence/{id}" for Viewer {
        id: str = name,
        response: 200 EvidenceEnvelope,
    }

    /// Add an item (one with the same id is replaced); a side effect inside an external runtime is recorded as unsupported unless it came through a rein-owned callback
    AddEvidenceItem = Post "/admin/harness/evidence/{id}/items" for Operator {
        id: str = name,
        request: EvidenceItem = Content::Json(reported_item),
        response: 200 EvidenceEnvelope,
        errors: [400, 401, 403, 404, 413],
    }

    /// Add a check (one with the same id is replaced)
    AddEvidenceCheck = Post "/admin/harness/evidence/{id}/checks" for Operator {
        id: str = name,
        request: EvidenceCheck,
        response: 200 EvidenceEnvelope,
        errors: [400, 401, 403, 404, 413],
    }

    /// Add the caller's review of the evidence
    AddEvidenceReview = Post "/admin/harness/evidence/{id}/reviews" for Operator {
        id: str = name,
        request: ReviewRequest,
        response: 200 EvidenceEnvelope,
        errors: [400, 401, 403, 404, 413],
    }

    /// Audit records of changes made outside task logs (shared states, contracts, evidence), oldest first
    Audit = Get "/admin/audit" for Viewer {
        query: LogQuery,
        response: 200 List<AuditRecord>,
    }

    /// Audit records as Server-Sent Events (id = position, event = action), live
    AuditStream = Get "/admin/audit/stream" for Viewer {
        query: StreamQuery,
        response: 200 AuditRecord = Content::Events(subschema::<AuditRecord>),
    }

    /// The governance ledger, oldest first
    Ledger = Get "/admin/ledger" for Viewer {
        response: 200 List<LedgerEntry>,
    }

    /// Check the ledger's hash chain (and, with ?head=, that it still holds a recorded head)
    VerifyLedger = Get "/admin/ledger/verify" for Viewer {
        query: VerifyQuery,
        response: 200 LedgerCheck,
    }

    /// The ledger in the seed's terms, newest first, each entry's status as of now (active, expired, revoked)
    ListGovernance = Get "/admin/governance/ledger" for Viewer {
        query: GovernanceQuery,
        response: 200 List<GovernanceEntry>,
    }

    /// Record a decision by hand, in the seed's shape (a field rein sets is refused, naming it)
    AddGovernance = Post "/admin/governance/ledger" for Operator {
        request: GovernanceAdd,
        response: 201 GovernanceEnvelope,
        errors: [400, 401, 403, 413],
    }

    /// One ledger entry in the seed's terms
    ShowGovernance = Get "/admin/governance/ledger/{id}" for Viewer {
        id: str = name,
        response: 200 GovernanceEnvelope,
    }

    /// Revoke an entry: a revocation entry naming it is appended (one already revoked, or itself a revocation, is 409)
    RevokeGovernance = Post "/admin/governance/ledger/{id}/revoke" for Operator {
        id: str = name,
        request: RevokeRequest,
        response: 200 GovernanceEnvelope,
        errors: [400, 401, 403, 404, 409, 413],
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn each_operation_is_one_method_on_one_path_with_a_summary() {
        let mut seen = std::collections::HashSet::new();
        for o in ALL {
            assert!(
                seen.insert((o.method, o.path)),
                "{} {} twice",
                o.method.as_str(),
                o.path
            );
            assert!(
                !o.summary().is_empty() && !o.summary().starts_with(' '),
                "{}",
                o.name
            );
            assert_eq!(o.path.contains("{id}"), o.param.is_some(), "{}", o.name);
            assert_eq!(
                o.success == 204,
                matches!(o.response, Content::Empty),
                "{}",
                o.name
            );
        }
        assert_eq!(ALL.len(), 65);
    }

    #[test]
    fn a_path_is_filled_with_its_id_percent_encoded() {
        let id = TaskId::new();
        assert_eq!(ShowTask::path(&id), format!("/admin/tasks/{id}"));
        assert_eq!(
            ShowContract::path("a b/c"),
            "/admin/harness/contracts/a%20b%2Fc"
        );
        assert_eq!(ListTasks::path(&()), "/admin/tasks");
    }
}
