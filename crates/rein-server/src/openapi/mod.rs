//! The API's routes as one table: the router is built from it, and so is the
//! OpenAPI document, so the two cannot drift apart. The document's schemas are
//! derived from the request, response and query types of
//! [`rein_protocol::api`] that the handlers use. `docs/openapi.json` is the
//! document as generated; a test fails when it is out of date.

mod document;
mod generators;

pub use document::document;
use generators::*;

use axum::routing::{MethodRouter, delete, get, post};
use rein_protocol::api::*;
use rein_protocol::{
    Action, AgentSessionInfo, ApprovalId, ApprovalRequest, EvidenceBundle, EvidenceCheck,
    EvidenceItem, HarnessContract, HarnessEvent, HarnessMetrics, LedgerCheck, LedgerEntry,
    Participant, SelectionDecision, SessionId, SharedHarnessState, SnapshotId, TaskId, TaskSummary,
};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::{Map, Value, json};

use crate::auth::Role;
use crate::{AppState, events, routes};

/// Adds a type's schema to the document's components and answers a reference
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

fn subschema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

fn inline<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    T::json_schema(generator)
}

/// A body of JSON of type `T`.
fn json<T: JsonSchema>() -> Content {
    Content::Json(subschema::<T>)
}

/// A stream of Server-Sent Events, each one's data JSON of type `T`.
fn stream<T: JsonSchema>() -> Content {
    Content::Events(subschema::<T>)
}

/// The query parameters of an operation: the fields of `T`.
fn query<T: JsonSchema>() -> Option<SchemaFn> {
    Some(inline::<T>)
}

/// A path's `{id}`: an id of this kind.
fn id<T: JsonSchema>() -> Option<SchemaFn> {
    Some(subschema::<T>)
}

/// A path's `{id}` that the caller may choose (shared states, contracts,
/// evidence, the sessions tasks are grouped by): any non-empty name.
fn name() -> Option<SchemaFn> {
    Some(|_| json_schema!({ "type": "string", "minLength": 1 }))
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

/// One operation of a route, as documented.
#[derive(Debug, Clone)]
pub struct Operation {
    pub method: &'static str,
    pub summary: &'static str,
    /// `None`: no authentication.
    pub role: Option<Role>,
    /// The type whose fields are its query parameters.
    pub query: Option<SchemaFn>,
    pub request: Option<Content>,
    pub success: u16,
    pub response: Content,
    pub errors: &'static [u16],
}

pub struct Route {
    pub path: &'static str,
    /// What the path's `{id}` is (`None`: it has none).
    pub param: Option<SchemaFn>,
    pub handler: MethodRouter<AppState>,
    pub operations: Vec<Operation>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("path", &self.path)
            .field("operations", &self.operations)
            .finish()
    }
}

fn op(
    method: &'static str,
    summary: &'static str,
    role: Option<Role>,
    success: u16,
    response: Content,
) -> Operation {
    Operation {
        method,
        summary,
        role,
        query: None,
        request: None,
        success,
        response,
        errors: &[400, 401, 403, 404],
    }
}

const V: Option<Role> = Some(Role::Viewer);
const O: Option<Role> = Some(Role::Operator);

/// Every route the server serves.
pub fn table() -> Vec<Route> {
    use routes::*;
    vec![
        Route {
            path: "/healthz",
            param: None,
            handler: get(healthz),
            operations: vec![Operation {
                errors: &[503],
                ..op(
                    "get",
                    "Health of the task store, the sandbox manager, the permission manager and the audit logger",
                    None,
                    200,
                    json::<Health>(),
                )
            }],
        },
        Route {
            path: "/openapi.json",
            param: None,
            handler: get(openapi_document),
            operations: vec![Operation {
                errors: &[],
                ..op(
                    "get",
                    "This document: the OpenAPI 3.1 description of every route (open, so that a client generator can read it)",
                    None,
                    200,
                    json::<serde_json::Value>(),
                )
            }],
        },
        Route {
            path: "/metrics",
            param: None,
            handler: get(metrics_text),
            operations: vec![op(
                "get",
                "Metrics in the Prometheus text format",
                V,
                200,
                Content::Text("text/plain"),
            )],
        },
        Route {
            path: "/auth/session",
            param: None,
            handler: post(open_session),
            operations: vec![Operation {
                request: Some(json::<SessionRequest>()),
                errors: &[400, 401, 413],
                ..op(
                    "post",
                    "Exchange a token for a session cookie and a CSRF token",
                    None,
                    200,
                    json::<SessionResponse>(),
                )
            }],
        },
        Route {
            path: "/admin/metrics",
            param: None,
            handler: get(metrics_json),
            operations: vec![op(
                "get",
                "Metrics as JSON",
                V,
                200,
                json::<HarnessMetrics>(),
            )],
        },
        Route {
            path: "/admin/usage",
            param: None,
            handler: get(routes::usage_report),
            operations: vec![Operation {
                query: query::<UsageQuery>(),
                errors: &[400, 401],
                ..op(
                    "get",
                    "What model calls used, in all and by task, model or day, with their cost at the server's prices (null when a model has none, named in `unpriced`)",
                    V,
                    200,
                    json::<rein_protocol::UsageReport>(),
                )
            }],
        },
        Route {
            path: "/admin/tasks",
            param: None,
            handler: get(list_tasks).post(submit_task),
            operations: vec![
                Operation {
                    query: query::<TaskQuery>(),
                    ..op(
                        "get",
                        "List tasks, newest first",
                        V,
                        200,
                        json::<Page<TaskSummary>>(),
                    )
                },
                Operation {
                    request: Some(Content::PlanOrToml),
                    errors: &[400, 401, 403, 413],
                    ..op(
                        "post",
                        "Run a plan (JSON {plan, session_id?, workspace?}, or a plan file's TOML), or a goal a model decomposes (JSON {goal, provider?, model?, runtime?, confirm?, attempts?, …}); a `workspace` or `allow_read` outside the server's --workspace-root is a 400",
                        O,
                        201,
                        json::<TaskEnvelope>(),
                    )
                },
            ],
        },
        Route {
            path: "/admin/harnesses",
            param: None,
            handler: get(list_harnesses),
            operations: vec![op(
                "get",
                "The harnesses this server's runs select from, the built-in runtime first",
                V,
                200,
                json::<List<HarnessInfo>>(),
            )],
        },
        Route {
            path: "/admin/harnesses/explain",
            param: None,
            handler: get(explain_harness),
            operations: vec![Operation {
                query: query::<ExplainQuery>(),
                errors: &[400, 401, 403, 404, 409],
                ..op(
                    "get",
                    "Which runtime would serve a model route here, and why (404: no such harness; 409: it cannot serve the route)",
                    V,
                    200,
                    json::<SelectionDecision>(),
                )
            }],
        },
        Route {
            path: "/admin/agent-sessions",
            param: None,
            handler: get(crate::sessions::list_sessions),
            operations: vec![Operation {
                query: query::<SessionQuery>(),
                ..op(
                    "get",
                    "Agent sessions (`ses_…`), newest task first",
                    V,
                    200,
                    json::<Page<AgentSessionInfo>>(),
                )
            }],
        },
        Route {
            path: "/admin/agent-sessions/{id}",
            param: id::<SessionId>(),
            handler: get(crate::sessions::show_session),
            operations: vec![op(
                "get",
                "An agent session with the children it delegated",
                V,
                200,
                json::<AgentSessionEnvelope>(),
            )],
        },
        Route {
            path: "/admin/agent-sessions/{id}/reset",
            param: id::<SessionId>(),
            handler: post(crate::sessions::reset_session),
            operations: vec![Operation {
                errors: &[400, 401, 403, 404, 409],
                ..op(
                    "post",
                    "Reset a session through its harness: its conversation starts over (409: its task is running, its harness's cleanup failed, or it is a delegated child, owned by its parent)",
                    O,
                    200,
                    json::<AgentSessionEnvelope>(),
                )
            }],
        },
        Route {
            path: "/admin/agent-sessions/{id}/pin",
            param: id::<SessionId>(),
            handler: post(crate::sessions::pin_session),
            operations: vec![Operation {
                request: Some(json::<PinRequest>()),
                errors: &[400, 401, 403, 404, 409, 413],
                ..op(
                    "post",
                    "Pin a session to a runtime (`rein` or a harness id; null unpins): above every other runtime setting for its later turns (400: no such runtime; 409: a delegated child)",
                    O,
                    200,
                    json::<AgentSessionEnvelope>(),
                )
            }],
        },
        Route {
            path: "/admin/completions",
            param: None,
            handler: post(complete),
            operations: vec![Operation {
                request: Some(json::<CompletionRequest>()),
                errors: &[400, 401, 403, 413, 502, 503],
                ..op(
                    "post",
                    "One isolated completion: a prompt with no tools, on the runtime the selection policy picks; with `schema`, an answer that does not match is a 502 naming each violation",
                    O,
                    200,
                    json::<rein_core::harness::completion::Completion>(),
                )
            }],
        },
        Route {
            path: "/admin/tasks/{id}",
            param: id::<TaskId>(),
            handler: get(show_task).merge(delete(delete_task)),
            operations: vec![
                op("get", "A task's state", V, 200, json::<TaskEnvelope>()),
                Operation {
                    errors: &[400, 401, 403, 404, 409],
                    ..op(
                        "delete",
                        "Delete a finished or paused task with its log and snapshots",
                        O,
                        204,
                        Content::Empty,
                    )
                },
            ],
        },
        Route {
            path: "/admin/tasks/{id}/events",
            param: id::<TaskId>(),
            handler: get(task_events),
            operations: vec![Operation {
                query: query::<LogQuery>(),
                ..op(
                    "get",
                    "A task's event log",
                    V,
                    200,
                    json::<List<HarnessEvent>>(),
                )
            }],
        },
        Route {
            path: "/admin/tasks/{id}/events/stream",
            param: id::<TaskId>(),
            handler: get(events::task_stream),
            operations: vec![Operation {
                query: query::<StreamQuery>(),
                ..op(
                    "get",
                    "A task's events as Server-Sent Events (id = seq); ends when the task finishes; one `stalled` event (no id) if the task is left in progress by a runner that is gone",
                    V,
                    200,
                    stream::<HarnessEvent>(),
                )
            }],
        },
        Route {
            path: "/admin/events/stream",
            param: None,
            handler: get(events::all_stream),
            operations: vec![Operation {
                query: query::<StreamQuery>(),
                ..op(
                    "get",
                    "Every task's events as Server-Sent Events (id = global position)",
                    V,
                    200,
                    stream::<HarnessEvent>(),
                )
            }],
        },
        Route {
            path: "/admin/tasks/{id}/pause",
            param: id::<TaskId>(),
            handler: post(pause_task),
            operations: vec![Operation {
                request: Some(json::<Reason>()),
                errors: &[400, 401, 403, 404, 409],
                ..op("post", "Pause a task", O, 200, json::<ControlResult>())
            }],
        },
        Route {
            path: "/admin/tasks/{id}/abort",
            param: id::<TaskId>(),
            handler: post(abort_task),
            operations: vec![Operation {
                request: Some(json::<Reason>()),
                errors: &[400, 401, 403, 404, 409],
                ..op("post", "Abort a task", O, 200, json::<ControlResult>())
            }],
        },
        Route {
            path: "/admin/tasks/{id}/resume",
            param: id::<TaskId>(),
            handler: post(resume_task),
            operations: vec![Operation {
                request: Some(json::<ResumeRequest>()),
                errors: &[400, 401, 403, 404, 409],
                ..op(
                    "post",
                    "Resume a task in the server",
                    O,
                    202,
                    json::<ResumeResult>(),
                )
            }],
        },
        Route {
            path: "/admin/tasks/resume",
            param: None,
            handler: post(resume_all),
            operations: vec![op(
                "post",
                "Resume every unfinished task nobody runs (pending, paused, or left in progress by a stopped runner) in the server",
                O,
                202,
                json::<ResumeAllResult>(),
            )],
        },
        Route {
            path: "/admin/tasks/{id}/plan",
            param: id::<TaskId>(),
            handler: get(task_plan),
            operations: vec![op("get", "A task's plan", V, 200, json::<PlanEnvelope>())],
        },
        Route {
            path: "/admin/tasks/{id}/snapshots",
            param: id::<TaskId>(),
            handler: get(list_snapshots).post(snapshot_task),
            operations: vec![
                op(
                    "get",
                    "A task's snapshots, oldest first",
                    V,
                    200,
                    json::<List<SnapshotInfo>>(),
                ),
                op(
                    "post",
                    "Snapshot a task",
                    O,
                    201,
                    json::<SnapshotEnvelope>(),
                ),
            ],
        },
        Route {
            path: "/admin/snapshots/{id}/restore",
            param: id::<SnapshotId>(),
            handler: post(restore_snapshot),
            operations: vec![op(
                "post",
                "Create a new task from a snapshot",
                O,
                201,
                json::<TaskEnvelope>(),
            )],
        },
        Route {
            path: "/admin/approvals",
            param: None,
            handler: get(list_approvals),
            operations: vec![Operation {
                query: query::<ApprovalQuery>(),
                ..op(
                    "get",
                    "List approval requests, newest first",
                    V,
                    200,
                    json::<List<ApprovalRequest>>(),
                )
            }],
        },
        Route {
            path: "/admin/approvals/{id}",
            param: id::<ApprovalId>(),
            handler: get(show_approval),
            operations: vec![op(
                "get",
                "An approval request",
                V,
                200,
                json::<ApprovalEnvelope>(),
            )],
        },
        Route {
            path: "/admin/approvals/{id}/decision",
            param: id::<ApprovalId>(),
            handler: post(decide),
            operations: vec![Operation {
                request: Some(json::<DecisionRequest>()),
                errors: &[400, 401, 403, 404, 409, 413],
                ..op(
                    "post",
                    "Decide an approval request (the first valid decision wins)",
                    O,
                    200,
                    json::<ApprovalEnvelope>(),
                )
            }],
        },
        Route {
            path: "/admin/harness/shared-state",
            param: None,
            handler: get(crate::shared_state::list).post(crate::shared_state::create),
            operations: vec![
                Operation {
                    query: query::<StateQuery>(),
                    ..op(
                        "get",
                        "List shared harness states, newest first",
                        V,
                        200,
                        json::<Page<SharedHarnessState>>(),
                    )
                },
                Operation {
                    request: Some(json::<SharedHarnessState>()),
                    errors: &[400, 401, 403, 409, 413],
                    ..op(
                        "post",
                        "Create a shared harness state (an existing id is 409, never overwritten)",
                        O,
                        201,
                        json::<SharedStateEnvelope>(),
                    )
                },
            ],
        },
        Route {
            path: "/admin/harness/shared-state/{id}",
            param: name(),
            handler: get(crate::shared_state::show),
            operations: vec![op(
                "get",
                "A shared harness state",
                V,
                200,
                json::<SharedStateEnvelope>(),
            )],
        },
        Route {
            path: "/admin/sessions/{id}/harness-state",
            param: name(),
            handler: get(crate::shared_state::of_session),
            operations: vec![op(
                "get",
                "The newest shared harness state of a session",
                V,
                200,
                json::<SharedStateEnvelope>(),
            )],
        },
        Route {
            path: "/admin/harness/shared-state/{id}/participants",
            param: name(),
            handler: post(crate::shared_state::add_participant),
            operations: vec![Operation {
                request: Some(json::<Participant>()),
                errors: &[400, 401, 403, 404, 413],
                ..op(
                    "post",
                    "Add a participant (one with the same id is replaced)",
                    O,
                    200,
                    json::<SharedStateEnvelope>(),
                )
            }],
        },
        Route {
            path: "/admin/harness/shared-state/{id}/actions",
            param: name(),
            handler: post(crate::shared_state::add_action),
            operations: vec![Operation {
                request: Some(json::<Action>()),
                errors: &[400, 401, 403, 404, 413],
                ..op(
                    "post",
                    "Add an action (one with the same id is replaced)",
                    O,
                    200,
                    json::<SharedStateEnvelope>(),
                )
            }],
        },
        Route {
            path: "/admin/harness/shared-state/{id}/detect-conflicts",
            param: name(),
            handler: post(crate::shared_state::detect),
            operations: vec![Operation {
                errors: &[400, 401, 403, 404],
                ..op(
                    "post",
                    "Detect conflicts; the state's conflict list is replaced by what is found",
                    O,
                    200,
                    json::<ConflictReport>(),
                )
            }],
        },
        Route {
            path: "/admin/harness/contracts",
            param: None,
            handler: get(crate::records::list_contracts).post(crate::records::create_contract),
            operations: vec![
                Operation {
                    query: query::<ContractQuery>(),
                    ..op(
                        "get",
                        "List harness contracts, newest first",
                        V,
                        200,
                        json::<Page<HarnessContract>>(),
                    )
                },
                Operation {
                    request: Some(Content::Json(new_contract)),
                    errors: &[400, 401, 403, 409, 413],
                    ..op(
                        "post",
                        "Create a harness contract, as draft or proposed; its risk is derived when not given (an existing id is 409)",
                        O,
                        201,
                        json::<ContractEnvelope>(),
                    )
                },
            ],
        },
        Route {
            path: "/admin/harness/contracts/{id}",
            param: name(),
            handler: get(crate::records::show_contract),
            operations: vec![op(
                "get",
                "A harness contract with its status history",
                V,
                200,
                json::<ContractEnvelope>(),
            )],
        },
        Route {
            path: "/admin/harness/contracts/{id}/status",
            param: name(),
            handler: post(crate::records::change_status),
            operations: vec![Operation {
                request: Some(json::<StatusRequest>()),
                errors: &[400, 401, 403, 404, 409, 413],
                ..op(
                    "post",
                    "Move a contract along its flow (a move the flow does not allow is 409, naming the allowed ones)",
                    O,
                    200,
                    json::<ContractEnvelope>(),
                )
            }],
        },
        Route {
            path: "/admin/harness/evidence",
            param: None,
            handler: get(crate::records::list_evidence).post(crate::records::create_evidence),
            operations: vec![
                Operation {
                    query: query::<EvidenceQuery>(),
                    ..op(
                        "get",
                        "List evidence bundles, newest first",
                        V,
                        200,
                        json::<Page<EvidenceBundle>>(),
                    )
                },
                Operation {
                    request: Some(json::<EvidenceBundle>()),
                    errors: &[400, 401, 403, 409, 413],
                    ..op(
                        "post",
                        "Create an evidence bundle, linked from its contract and shared state (which must exist)",
                        O,
                        201,
                        json::<EvidenceEnvelope>(),
                    )
                },
            ],
        },
        Route {
            path: "/admin/harness/evidence/{id}",
            param: name(),
            handler: get(crate::records::show_evidence),
            operations: vec![op(
                "get",
                "An evidence bundle",
                V,
                200,
                json::<EvidenceEnvelope>(),
            )],
        },
        Route {
            path: "/admin/harness/evidence/{id}/items",
            param: name(),
            handler: post(crate::records::add_item),
            operations: vec![Operation {
                request: Some(Content::Json(reported_item)),
                errors: &[400, 401, 403, 404, 413],
                ..op(
                    "post",
                    "Add an item (one with the same id is replaced); a side effect inside an external runtime is recorded as unsupported unless it came through a rein-owned callback",
                    O,
                    200,
                    json::<EvidenceEnvelope>(),
                )
            }],
        },
        Route {
            path: "/admin/harness/evidence/{id}/checks",
            param: name(),
            handler: post(crate::records::add_check),
            operations: vec![Operation {
                request: Some(json::<EvidenceCheck>()),
                errors: &[400, 401, 403, 404, 413],
                ..op(
                    "post",
                    "Add a check (one with the same id is replaced)",
                    O,
                    200,
                    json::<EvidenceEnvelope>(),
                )
            }],
        },
        Route {
            path: "/admin/harness/evidence/{id}/reviews",
            param: name(),
            handler: post(crate::records::add_review),
            operations: vec![Operation {
                request: Some(json::<ReviewRequest>()),
                errors: &[400, 401, 403, 404, 413],
                ..op(
                    "post",
                    "Add the caller's review of the evidence",
                    O,
                    200,
                    json::<EvidenceEnvelope>(),
                )
            }],
        },
        Route {
            path: "/admin/audit",
            param: None,
            handler: get(crate::shared_state::audit),
            operations: vec![Operation {
                query: query::<LogQuery>(),
                ..op(
                    "get",
                    "Audit records of changes made outside task logs (shared states, contracts, evidence), oldest first",
                    V,
                    200,
                    json::<List<AuditRecord>>(),
                )
            }],
        },
        Route {
            path: "/admin/audit/stream",
            param: None,
            handler: get(crate::shared_state::audit_stream),
            operations: vec![Operation {
                query: query::<StreamQuery>(),
                ..op(
                    "get",
                    "Audit records as Server-Sent Events (id = position, event = action), live",
                    V,
                    200,
                    stream::<AuditRecord>(),
                )
            }],
        },
        Route {
            path: "/admin/ledger",
            param: None,
            handler: get(ledger),
            operations: vec![op(
                "get",
                "The governance ledger, oldest first",
                V,
                200,
                json::<List<LedgerEntry>>(),
            )],
        },
        Route {
            path: "/admin/ledger/verify",
            param: None,
            handler: get(verify_ledger),
            operations: vec![Operation {
                query: query::<VerifyQuery>(),
                ..op(
                    "get",
                    "Check the ledger's hash chain (and, with ?head=, that it still holds a recorded head)",
                    V,
                    200,
                    json::<LedgerCheck>(),
                )
            }],
        },
    ]
}
