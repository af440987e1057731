//! The API's routes as one table: the router is built from it, and so is the
//! OpenAPI document, so the two cannot drift apart. `docs/openapi.json` is the
//! document as generated; a test fails when it is out of date.

use axum::routing::{MethodRouter, delete, get, post};
use serde_json::{Map, Value, json};

use crate::auth::Role;
use crate::{AppState, events, routes};

/// One operation of a route, as documented.
#[derive(Debug, Clone)]
pub struct Operation {
    pub method: &'static str,
    pub summary: &'static str,
    /// `None`: no authentication.
    pub role: Option<Role>,
    pub query: &'static [(&'static str, &'static str)],
    /// A component schema name, `"toml-or-json"` for plan submission, or `None`.
    pub request: Option<&'static str>,
    pub success: u16,
    /// What the success response holds: a component schema name, or a media note.
    pub response: &'static str,
    pub errors: &'static [u16],
}

pub struct Route {
    pub path: &'static str,
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

const fn op(
    method: &'static str,
    summary: &'static str,
    role: Option<Role>,
    success: u16,
    response: &'static str,
) -> Operation {
    Operation {
        method,
        summary,
        role,
        query: &[],
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
            handler: get(healthz),
            operations: vec![Operation {
                errors: &[503],
                ..op(
                    "get",
                    "Health of the task store, the sandbox manager, the permission manager and the audit logger",
                    None,
                    200,
                    "Health",
                )
            }],
        },
        Route {
            path: "/metrics",
            handler: get(metrics_text),
            operations: vec![op(
                "get",
                "Metrics in the Prometheus text format",
                V,
                200,
                "text/plain",
            )],
        },
        Route {
            path: "/auth/session",
            handler: post(open_session),
            operations: vec![Operation {
                request: Some("SessionRequest"),
                errors: &[400, 401, 413],
                ..op(
                    "post",
                    "Exchange a token for a session cookie and a CSRF token",
                    None,
                    200,
                    "SessionResponse",
                )
            }],
        },
        Route {
            path: "/admin/metrics",
            handler: get(metrics_json),
            operations: vec![op("get", "Metrics as JSON", V, 200, "HarnessMetrics")],
        },
        Route {
            path: "/admin/tasks",
            handler: get(list_tasks).post(submit_task),
            operations: vec![
                Operation {
                    query: &[
                        ("session_id", "only this session's tasks"),
                        ("status", "only tasks in this status"),
                        ("created_from", "created at or after (RFC 3339)"),
                        ("created_to", "created before (RFC 3339)"),
                        ("limit", "1–500 (default 50)"),
                        ("cursor", "next_cursor of the previous page"),
                    ],
                    ..op("get", "List tasks, newest first", V, 200, "TaskPage")
                },
                Operation {
                    request: Some("toml-or-json"),
                    errors: &[400, 401, 403, 413],
                    ..op(
                        "post",
                        "Run a plan (JSON {plan, session_id?, workspace?}, or a plan file's TOML), or a goal a model decomposes (JSON {goal, provider?, model?, runtime?, confirm?, attempts?, …}); a `workspace` or `allow_read` outside the server's --workspace-root is a 400",
                        O,
                        201,
                        "TaskEnvelope",
                    )
                },
            ],
        },
        Route {
            path: "/admin/harnesses",
            handler: get(list_harnesses),
            operations: vec![op(
                "get",
                "The harnesses this server's runs select from, the built-in runtime first",
                V,
                200,
                "HarnessList",
            )],
        },
        Route {
            path: "/admin/harnesses/explain",
            handler: get(explain_harness),
            operations: vec![Operation {
                query: &[
                    ("provider", "the provider (required)"),
                    ("model", "the model"),
                    (
                        "runtime",
                        "what a step would name: auto, rein or a harness id",
                    ),
                ],
                errors: &[400, 401, 403, 404, 409],
                ..op(
                    "get",
                    "Which runtime would serve a model route here, and why (404: no such harness; 409: it cannot serve the route)",
                    V,
                    200,
                    "SelectionDecision",
                )
            }],
        },
        Route {
            path: "/admin/agent-sessions",
            handler: get(crate::sessions::list_sessions),
            operations: vec![Operation {
                query: &[
                    ("task_id", "only this task's sessions"),
                    ("status", "active or ended"),
                    ("parent", "the children a session delegated"),
                    ("limit", "1–500 (default 50)"),
                    ("cursor", "next_cursor of the previous page"),
                ],
                ..op(
                    "get",
                    "Agent sessions (`ses_…`), newest task first",
                    V,
                    200,
                    "AgentSessionPage",
                )
            }],
        },
        Route {
            path: "/admin/agent-sessions/{id}",
            handler: get(crate::sessions::show_session),
            operations: vec![op(
                "get",
                "An agent session with the children it delegated",
                V,
                200,
                "AgentSessionEnvelope",
            )],
        },
        Route {
            path: "/admin/agent-sessions/{id}/reset",
            handler: post(crate::sessions::reset_session),
            operations: vec![Operation {
                errors: &[400, 401, 403, 404, 409],
                ..op(
                    "post",
                    "Reset a session through its harness: its conversation starts over (409: its task is running, its harness's cleanup failed, or it is a delegated child, owned by its parent)",
                    O,
                    200,
                    "AgentSessionEnvelope",
                )
            }],
        },
        Route {
            path: "/admin/agent-sessions/{id}/pin",
            handler: post(crate::sessions::pin_session),
            operations: vec![Operation {
                request: Some("PinRequest"),
                errors: &[400, 401, 403, 404, 409, 413],
                ..op(
                    "post",
                    "Pin a session to a runtime (`rein` or a harness id; null unpins): above every other runtime setting for its later turns (400: no such runtime; 409: a delegated child)",
                    O,
                    200,
                    "AgentSessionEnvelope",
                )
            }],
        },
        Route {
            path: "/admin/completions",
            handler: post(complete),
            operations: vec![Operation {
                request: Some("CompletionRequest"),
                errors: &[400, 401, 403, 413, 502, 503],
                ..op(
                    "post",
                    "One isolated completion: a prompt with no tools, on the runtime the selection policy picks; with `schema`, an answer that does not match is a 502 naming each violation",
                    O,
                    200,
                    "Completion",
                )
            }],
        },
        Route {
            path: "/admin/tasks/{id}",
            handler: get(show_task).merge(delete(delete_task)),
            operations: vec![
                op("get", "A task's state", V, 200, "TaskEnvelope"),
                Operation {
                    errors: &[400, 401, 403, 404, 409],
                    ..op(
                        "delete",
                        "Delete a finished or paused task with its log and snapshots",
                        O,
                        204,
                        "none",
                    )
                },
            ],
        },
        Route {
            path: "/admin/tasks/{id}/events",
            handler: get(task_events),
            operations: vec![Operation {
                query: &[
                    ("after", "only events after this sequence number"),
                    ("limit", "at most this many"),
                ],
                ..op("get", "A task's event log", V, 200, "EventPage")
            }],
        },
        Route {
            path: "/admin/tasks/{id}/events/stream",
            handler: get(events::task_stream),
            operations: vec![Operation {
                query: &[("after", "resume after this event (or send Last-Event-ID)")],
                ..op(
                    "get",
                    "A task's events as Server-Sent Events (id = seq); ends when the task finishes; one `stalled` event (no id) if the task is left in progress by a runner that is gone",
                    V,
                    200,
                    "text/event-stream",
                )
            }],
        },
        Route {
            path: "/admin/events/stream",
            handler: get(events::all_stream),
            operations: vec![Operation {
                query: &[(
                    "after",
                    "resume after this position (or send Last-Event-ID)",
                )],
                ..op(
                    "get",
                    "Every task's events as Server-Sent Events (id = global position)",
                    V,
                    200,
                    "text/event-stream",
                )
            }],
        },
        Route {
            path: "/admin/tasks/{id}/pause",
            handler: post(pause_task),
            operations: vec![Operation {
                request: Some("Reason"),
                errors: &[400, 401, 403, 404, 409],
                ..op("post", "Pause a task", O, 200, "ControlResult")
            }],
        },
        Route {
            path: "/admin/tasks/{id}/abort",
            handler: post(abort_task),
            operations: vec![Operation {
                request: Some("Reason"),
                errors: &[400, 401, 403, 404, 409],
                ..op("post", "Abort a task", O, 200, "ControlResult")
            }],
        },
        Route {
            path: "/admin/tasks/{id}/resume",
            handler: post(resume_task),
            operations: vec![Operation {
                request: Some("ResumeRequest"),
                errors: &[400, 401, 403, 404, 409],
                ..op(
                    "post",
                    "Resume a task in the server",
                    O,
                    202,
                    "ResumeResult",
                )
            }],
        },
        Route {
            path: "/admin/tasks/resume",
            handler: post(resume_all),
            operations: vec![op(
                "post",
                "Resume every unfinished task nobody runs (pending, paused, or left in progress by a stopped runner) in the server",
                O,
                202,
                "ResumeAllResult",
            )],
        },
        Route {
            path: "/admin/tasks/{id}/plan",
            handler: get(task_plan),
            operations: vec![op("get", "A task's plan", V, 200, "PlanEnvelope")],
        },
        Route {
            path: "/admin/tasks/{id}/snapshots",
            handler: get(list_snapshots).post(snapshot_task),
            operations: vec![
                op(
                    "get",
                    "A task's snapshots, oldest first",
                    V,
                    200,
                    "SnapshotPage",
                ),
                op("post", "Snapshot a task", O, 201, "SnapshotEnvelope"),
            ],
        },
        Route {
            path: "/admin/snapshots/{id}/restore",
            handler: post(restore_snapshot),
            operations: vec![op(
                "post",
                "Create a new task from a snapshot",
                O,
                201,
                "TaskEnvelope",
            )],
        },
        Route {
            path: "/admin/approvals",
            handler: get(list_approvals),
            operations: vec![Operation {
                query: &[
                    (
                        "status",
                        "pending (default all), approved, denied, expired, skipped, all",
                    ),
                    ("task_id", "only this task's requests"),
                    ("limit", "at most this many"),
                ],
                ..op(
                    "get",
                    "List approval requests, newest first",
                    V,
                    200,
                    "ApprovalPage",
                )
            }],
        },
        Route {
            path: "/admin/approvals/{id}",
            handler: get(show_approval),
            operations: vec![op("get", "An approval request", V, 200, "ApprovalEnvelope")],
        },
        Route {
            path: "/admin/approvals/{id}/decision",
            handler: post(decide),
            operations: vec![Operation {
                request: Some("DecisionRequest"),
                errors: &[400, 401, 403, 404, 409, 413],
                ..op(
                    "post",
                    "Decide an approval request (the first valid decision wins)",
                    O,
                    200,
                    "ApprovalEnvelope",
                )
            }],
        },
        Route {
            path: "/admin/harness/shared-state",
            handler: get(crate::shared_state::list).post(crate::shared_state::create),
            operations: vec![
                Operation {
                    query: &[
                        ("session_id", "only this session's states"),
                        ("parent_session_id", "only states under this parent session"),
                        ("harness_contract_id", "only states of this contract"),
                        (
                            "status",
                            "active, completed, failed, cancelled, blocked or unknown",
                        ),
                        ("tag", "only states with this tag"),
                        ("created_from", "created at or after (RFC 3339)"),
                        ("created_to", "created before (RFC 3339)"),
                        ("limit", "1–500 (default 50)"),
                        ("cursor", "next_cursor of the previous page"),
                    ],
                    ..op(
                        "get",
                        "List shared harness states, newest first",
                        V,
                        200,
                        "SharedStatePage",
                    )
                },
                Operation {
                    request: Some("SharedHarnessState"),
                    errors: &[400, 401, 403, 409, 413],
                    ..op(
                        "post",
                        "Create a shared harness state (an existing id is 409, never overwritten)",
                        O,
                        201,
                        "SharedStateEnvelope",
                    )
                },
            ],
        },
        Route {
            path: "/admin/harness/shared-state/{id}",
            handler: get(crate::shared_state::show),
            operations: vec![op(
                "get",
                "A shared harness state",
                V,
                200,
                "SharedStateEnvelope",
            )],
        },
        Route {
            path: "/admin/sessions/{id}/harness-state",
            handler: get(crate::shared_state::of_session),
            operations: vec![op(
                "get",
                "The newest shared harness state of a session",
                V,
                200,
                "SharedStateEnvelope",
            )],
        },
        Route {
            path: "/admin/harness/shared-state/{id}/participants",
            handler: post(crate::shared_state::add_participant),
            operations: vec![Operation {
                request: Some("Participant"),
                errors: &[400, 401, 403, 404, 413],
                ..op(
                    "post",
                    "Add a participant (one with the same id is replaced)",
                    O,
                    200,
                    "SharedStateEnvelope",
                )
            }],
        },
        Route {
            path: "/admin/harness/shared-state/{id}/actions",
            handler: post(crate::shared_state::add_action),
            operations: vec![Operation {
                request: Some("Action"),
                errors: &[400, 401, 403, 404, 413],
                ..op(
                    "post",
                    "Add an action (one with the same id is replaced)",
                    O,
                    200,
                    "SharedStateEnvelope",
                )
            }],
        },
        Route {
            path: "/admin/harness/shared-state/{id}/detect-conflicts",
            handler: post(crate::shared_state::detect),
            operations: vec![Operation {
                errors: &[400, 401, 403, 404],
                ..op(
                    "post",
                    "Detect conflicts; the state's conflict list is replaced by what is found",
                    O,
                    200,
                    "ConflictReport",
                )
            }],
        },
        Route {
            path: "/admin/harness/contracts",
            handler: get(crate::records::list_contracts).post(crate::records::create_contract),
            operations: vec![
                Operation {
                    query: &[
                        (
                            "status",
                            "draft, proposed, approved, executing, verified, failed, rejected, rolled_back or cancelled",
                        ),
                        ("task_id", "only the contracts of this task's steps"),
                        (
                            "shared_state_id",
                            "only contracts recording into this shared state",
                        ),
                        ("limit", "1–500 (default 50)"),
                        ("cursor", "next_cursor of the previous page"),
                    ],
                    ..op(
                        "get",
                        "List harness contracts, newest first",
                        V,
                        200,
                        "ContractPage",
                    )
                },
                Operation {
                    request: Some("HarnessContract"),
                    errors: &[400, 401, 403, 409, 413],
                    ..op(
                        "post",
                        "Create a harness contract, as draft or proposed; its risk is derived when not given (an existing id is 409)",
                        O,
                        201,
                        "ContractEnvelope",
                    )
                },
            ],
        },
        Route {
            path: "/admin/harness/contracts/{id}",
            handler: get(crate::records::show_contract),
            operations: vec![op(
                "get",
                "A harness contract with its status history",
                V,
                200,
                "ContractEnvelope",
            )],
        },
        Route {
            path: "/admin/harness/contracts/{id}/status",
            handler: post(crate::records::change_status),
            operations: vec![Operation {
                request: Some("StatusRequest"),
                errors: &[400, 401, 403, 404, 409, 413],
                ..op(
                    "post",
                    "Move a contract along its flow (a move the flow does not allow is 409, naming the allowed ones)",
                    O,
                    200,
                    "ContractEnvelope",
                )
            }],
        },
        Route {
            path: "/admin/harness/evidence",
            handler: get(crate::records::list_evidence).post(crate::records::create_evidence),
            operations: vec![
                Operation {
                    query: &[
                        ("contract_id", "only the bundles of this contract"),
                        ("task_id", "only the bundles of this task"),
                        (
                            "shared_state_id",
                            "only bundles linked to this shared state",
                        ),
                        ("limit", "1–500 (default 50)"),
                        ("cursor", "next_cursor of the previous page"),
                    ],
                    ..op(
                        "get",
                        "List evidence bundles, newest first",
                        V,
                        200,
                        "EvidencePage",
                    )
                },
                Operation {
                    request: Some("EvidenceBundle"),
                    errors: &[400, 401, 403, 409, 413],
                    ..op(
                        "post",
                        "Create an evidence bundle, linked from its contract and shared state (which must exist)",
                        O,
                        201,
                        "EvidenceEnvelope",
                    )
                },
            ],
        },
        Route {
            path: "/admin/harness/evidence/{id}",
            handler: get(crate::records::show_evidence),
            operations: vec![op("get", "An evidence bundle", V, 200, "EvidenceEnvelope")],
        },
        Route {
            path: "/admin/harness/evidence/{id}/items",
            handler: post(crate::records::add_item),
            operations: vec![Operation {
                request: Some("EvidenceItem"),
                errors: &[400, 401, 403, 404, 413],
                ..op(
                    "post",
                    "Add an item (one with the same id is replaced); a side effect inside an external runtime is recorded as unsupported unless it came through a rein-owned callback",
                    O,
                    200,
                    "EvidenceEnvelope",
                )
            }],
        },
        Route {
            path: "/admin/harness/evidence/{id}/checks",
            handler: post(crate::records::add_check),
            operations: vec![Operation {
                request: Some("EvidenceCheck"),
                errors: &[400, 401, 403, 404, 413],
                ..op(
                    "post",
                    "Add a check (one with the same id is replaced)",
                    O,
                    200,
                    "EvidenceEnvelope",
                )
            }],
        },
        Route {
            path: "/admin/harness/evidence/{id}/reviews",
            handler: post(crate::records::add_review),
            operations: vec![Operation {
                request: Some("ReviewRequest"),
                errors: &[400, 401, 403, 404, 413],
                ..op(
                    "post",
                    "Add the caller's review of the evidence",
                    O,
                    200,
                    "EvidenceEnvelope",
                )
            }],
        },
        Route {
            path: "/admin/audit",
            handler: get(crate::shared_state::audit),
            operations: vec![Operation {
                query: &[
                    ("after", "only records after this position"),
                    ("limit", "at most this many (default 1000)"),
                ],
                ..op(
                    "get",
                    "Audit records of changes made outside task logs (shared states, contracts, evidence), oldest first",
                    V,
                    200,
                    "AuditPage",
                )
            }],
        },
        Route {
            path: "/admin/audit/stream",
            handler: get(crate::shared_state::audit_stream),
            operations: vec![Operation {
                query: &[(
                    "after",
                    "resume after this position (or send Last-Event-ID)",
                )],
                ..op(
                    "get",
                    "Audit records as Server-Sent Events (id = position, event = action), live",
                    V,
                    200,
                    "text/event-stream",
                )
            }],
        },
        Route {
            path: "/admin/ledger",
            handler: get(ledger),
            operations: vec![op(
                "get",
                "The governance ledger, oldest first",
                V,
                200,
                "LedgerPage",
            )],
        },
        Route {
            path: "/admin/ledger/verify",
            handler: get(verify_ledger),
            operations: vec![Operation {
                query: &[(
                    "head",
                    "SEQ:HASH, a head recorded earlier: also check that the ledger still holds it",
                )],
                ..op(
                    "get",
                    "Check the ledger's hash chain (and, with ?head=, that it still holds a recorded head)",
                    V,
                    200,
                    "LedgerCheck",
                )
            }],
        },
    ]
}

fn reference(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({ "type": "object", "properties": properties, "required": required })
}

/// Schemas of the envelopes the routes wrap the wire types in.
fn envelopes() -> Vec<(&'static str, Value)> {
    vec![
        (
            "Error",
            object(
                json!({ "error": object(json!({ "code": { "type": "string" }, "message": { "type": "string" } }), &["code", "message"]) }),
                &["error"],
            ),
        ),
        (
            "TaskEnvelope",
            object(json!({ "task": reference("TaskState") }), &["task"]),
        ),
        (
            "TaskPage",
            object(
                json!({ "items": { "type": "array", "items": reference("TaskSummary") }, "next_cursor": { "type": ["string", "null"] } }),
                &["items"],
            ),
        ),
        (
            "EventPage",
            object(
                json!({ "items": { "type": "array", "items": reference("HarnessEvent") } }),
                &["items"],
            ),
        ),
        (
            "ApprovalEnvelope",
            object(
                json!({ "approval": reference("ApprovalRequest") }),
                &["approval"],
            ),
        ),
        (
            "ApprovalPage",
            object(
                json!({ "items": { "type": "array", "items": reference("ApprovalRequest") } }),
                &["items"],
            ),
        ),
        (
            "LedgerPage",
            object(
                json!({ "items": { "type": "array", "items": reference("LedgerEntry") } }),
                &["items"],
            ),
        ),
        (
            "LedgerCheck",
            object(
                json!({ "entries": { "type": "integer" }, "intact": { "type": "boolean" }, "problems": { "type": "array", "items": { "type": "string" } }, "head": reference("LedgerHead"), "against": reference("LedgerHead") }),
                &["entries", "intact", "problems"],
            ),
        ),
        (
            "LedgerHead",
            object(
                json!({ "seq": { "type": "integer", "minimum": 1 }, "hash": { "type": "string", "pattern": "^[0-9a-f]{64}$" } }),
                &["seq", "hash"],
            ),
        ),
        (
            "SnapshotEnvelope",
            object(
                json!({ "snapshot": object(json!({ "id": { "type": "string" }, "task_id": { "type": "string" }, "seq": { "type": "integer" }, "created_at": { "type": "string", "format": "date-time" }, "status": { "type": "string" } }), &["id", "task_id", "seq", "created_at", "status"]) }),
                &["snapshot"],
            ),
        ),
        (
            "SnapshotPage",
            object(
                json!({ "items": { "type": "array", "items": object(json!({ "id": { "type": "string" }, "task_id": { "type": "string" }, "seq": { "type": "integer" }, "created_at": { "type": "string", "format": "date-time" } }), &["id", "task_id", "seq", "created_at"]) } }),
                &["items"],
            ),
        ),
        (
            "PlanEnvelope",
            object(json!({ "plan": reference("TaskDecomposition") }), &["plan"]),
        ),
        (
            "SharedStateEnvelope",
            object(
                json!({ "state": reference("SharedHarnessState") }),
                &["state"],
            ),
        ),
        (
            "SharedStatePage",
            object(
                json!({ "items": { "type": "array", "items": reference("SharedHarnessState") }, "next_cursor": { "type": ["string", "null"] } }),
                &["items"],
            ),
        ),
        (
            "ContractEnvelope",
            object(
                json!({ "contract": reference("HarnessContract") }),
                &["contract"],
            ),
        ),
        (
            "ContractPage",
            object(
                json!({ "items": { "type": "array", "items": reference("HarnessContract") }, "next_cursor": { "type": ["string", "null"] } }),
                &["items"],
            ),
        ),
        (
            "StatusRequest",
            object(
                json!({ "status": reference("ContractStatus"), "reason": { "type": "string" } }),
                &["status"],
            ),
        ),
        (
            "EvidenceEnvelope",
            object(
                json!({ "evidence": reference("EvidenceBundle") }),
                &["evidence"],
            ),
        ),
        (
            "EvidencePage",
            object(
                json!({ "items": { "type": "array", "items": reference("EvidenceBundle") }, "next_cursor": { "type": ["string", "null"] } }),
                &["items"],
            ),
        ),
        (
            "ReviewRequest",
            object(
                json!({ "verdict": reference("ReviewVerdict"), "comment": { "type": "string" }, "id": { "type": "string" } }),
                &["verdict"],
            ),
        ),
        (
            "ConflictReport",
            object(
                json!({ "state": reference("SharedHarnessState"), "conflicts": { "type": "array", "items": reference("Conflict") } }),
                &["state", "conflicts"],
            ),
        ),
        (
            "AuditPage",
            object(
                json!({ "items": { "type": "array", "items": object(json!({ "seq": { "type": "integer" }, "at": { "type": "string", "format": "date-time" }, "who": { "type": "string" }, "action": { "type": "string" }, "subject": { "type": "string" }, "detail": {} }), &["seq", "at", "who", "action", "subject"]) } }),
                &["items"],
            ),
        ),
        (
            "ControlResult",
            object(
                json!({
                    "outcome": { "enum": ["applied", "requested", "already"] },
                    "status": { "type": "string", "description": "the task's status (applied, already)" },
                    "runner": { "type": "object", "description": "the runner that was asked (requested)", "properties": { "host": { "type": "string" }, "pid": { "type": "integer" } } }
                }),
                &["outcome"],
            ),
        ),
        (
            "ResumeAllResult",
            object(
                json!({ "task_ids": { "type": "array", "items": { "type": "string" } } }),
                &["task_ids"],
            ),
        ),
        (
            "ResumeResult",
            object(
                json!({ "task_id": { "type": "string" }, "resuming": { "type": "boolean" } }),
                &["task_id", "resuming"],
            ),
        ),
        (
            "Reason",
            object(json!({ "reason": { "type": "string" } }), &[]),
        ),
        (
            "ResumeRequest",
            object(
                json!({ "rerun": { "type": "array", "items": { "type": "string" } }, "skip": { "type": "array", "items": { "type": "string" } } }),
                &[],
            ),
        ),
        (
            "DecisionRequest",
            object(
                json!({ "decision": { "enum": ["approve", "deny", "skip", "delegate"] }, "selected_option": { "type": "string" }, "reason": { "type": "string" }, "delegate_to": { "type": "string" } }),
                &["decision"],
            ),
        ),
        (
            "SessionRequest",
            object(json!({ "token": { "type": "string" } }), &["token"]),
        ),
        (
            "SessionResponse",
            object(
                json!({ "csrf_token": { "type": "string" } }),
                &["csrf_token"],
            ),
        ),
        (
            "SubmitTask",
            object(
                json!({
                    "plan": reference("TaskDecomposition"),
                    "goal": { "type": "string", "description": "instead of a plan: what the task is to achieve, decomposed into steps by a model at CP2" },
                    "provider": { "type": "string" }, "model": { "type": "string" },
                    "runtime": { "type": "string", "description": "auto, rein or a harness id" },
                    "confirm": { "type": "boolean", "description": "a person confirms the decomposed plan before it runs (default true)" },
                    "attempts": { "type": "integer", "minimum": 1, "maximum": 10 },
                    "max_parallel": { "type": "integer", "minimum": 1 },
                    "session_id": { "type": "string" },
                    "workspace": { "type": "string", "description": "an absolute directory inside one of the server's --workspace-root directories; refused without one" } }),
                &[],
            ),
        ),
        (
            "AgentSessionPage",
            object(
                json!({ "items": { "type": "array", "items": reference("AgentSessionInfo") }, "next_cursor": { "type": ["string", "null"] } }),
                &["items"],
            ),
        ),
        (
            "AgentSessionEnvelope",
            object(
                json!({ "session": reference("AgentSessionInfo"), "children": { "type": "array", "items": reference("AgentSessionInfo") } }),
                &["session"],
            ),
        ),
        (
            "PinRequest",
            object(
                json!({ "runtime": { "type": ["string", "null"], "description": "rein or a harness id; null (or absent) unpins" } }),
                &[],
            ),
        ),
        (
            "HarnessList",
            object(
                json!({ "items": { "type": "array", "items": { "type": "object" } } }),
                &["items"],
            ),
        ),
        (
            "CompletionRequest",
            object(
                json!({
                    "prompt": { "type": "string", "minLength": 1 }, "system": { "type": "string" },
                    "provider": { "type": "string" }, "model": { "type": "string" }, "runtime": { "type": "string" },
                    "timeout_ms": { "type": "integer", "minimum": 1, "maximum": 1_800_000 },
                    "schema": { "type": "object", "description": "a JSON Schema the answer must match" } }),
                &["prompt"],
            ),
        ),
        (
            "Completion",
            object(
                json!({
                    "text": { "type": "string" },
                    "json": { "description": "the answer as JSON, when a schema was given" },
                    "selection": reference("SelectionDecision"),
                    "owner": { "enum": ["host", "harness"] },
                    "runtime": { "enum": ["rein", "self"] },
                    "profile": { "type": "string" },
                    "request_durations_ms": { "type": "array", "items": { "type": "integer" } },
                    "duration_ms": { "type": "integer" } }),
                &[
                    "text",
                    "selection",
                    "owner",
                    "runtime",
                    "profile",
                    "request_durations_ms",
                    "duration_ms",
                ],
            ),
        ),
        (
            "Health",
            object(
                json!({ "status": { "enum": ["healthy", "degraded", "unhealthy"] }, "components": { "type": "object" }, "metrics": reference("HarnessMetrics"), "alerts": { "type": "array" } }),
                &["status", "components", "alerts"],
            ),
        ),
    ]
}

/// The largest integer a JSON number holds exactly.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// What a path's `{id}` is: an id of the kind its collection holds (a pattern
/// the server checks before it looks), or any non-empty name (shared states,
/// contracts and evidence may be named by the caller; a session id is the
/// caller's).
fn path_schema(path: &str) -> Value {
    use rein_protocol::ids::id_pattern;
    let prefix = [
        ("/admin/tasks/", rein_protocol::TaskId::PREFIX),
        ("/admin/snapshots/", rein_protocol::SnapshotId::PREFIX),
        ("/admin/approvals/", rein_protocol::ApprovalId::PREFIX),
        ("/admin/agent-sessions/", rein_protocol::SessionId::PREFIX),
    ]
    .into_iter()
    .find(|(start, _)| path.starts_with(start));
    match prefix {
        Some((_, prefix)) => json!({ "type": "string", "pattern": id_pattern(prefix) }),
        None => json!({ "type": "string", "minLength": 1 }),
    }
}

/// A query parameter's schema, by its name: page sizes and positions are
/// integers (a paged list's `limit` is refused outside 1–500; the event and
/// audit reads clamp theirs), times are RFC 3339, the rest strings.
fn query_schema(name: &str, description: &str) -> Value {
    match name {
        "limit" if description.starts_with("1–500") => {
            json!({ "type": "integer", "minimum": 1, "maximum": 500 })
        }
        "limit" | "after" => {
            json!({ "type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER })
        }
        "created_from" | "created_to" => json!({ "type": "string", "format": "date-time" }),
        // The explain route needs a provider, and an empty one names none.
        "provider" | "head" => json!({ "type": "string", "minLength": 1 }),
        _ => json!({ "type": "string" }),
    }
}

fn operation(path: &str, o: &Operation) -> Value {
    let mut parameters: Vec<Value> = path
        .split('/')
        .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .map(|name| json!({ "name": name, "in": "path", "required": true, "schema": path_schema(path) }))
        .collect();
    parameters.extend(o.query.iter().map(|(name, description)| {
        let required = description.ends_with("(required)");
        json!({ "name": name, "in": "query", "required": required, "description": description, "schema": query_schema(name, description) })
    }));
    let success = match o.response {
        "none" => json!({ "description": "done" }),
        "text/plain" | "text/event-stream" => {
            json!({ "description": "ok", "content": { o.response: { "schema": { "type": "string" } } } })
        }
        schema => {
            json!({ "description": "ok", "content": { "application/json": { "schema": reference(schema) } } })
        }
    };
    let mut responses = Map::new();
    responses.insert(o.success.to_string(), success);
    // A body that is not JSON (or TOML, where a plan file is taken) is a 415.
    let unsupported: &[u16] = if o.request.is_some() { &[415] } else { &[] };
    for code in o.errors.iter().chain(unsupported) {
        responses.insert(
            code.to_string(),
            json!({ "description": "error", "content": { "application/json": { "schema": reference("Error") } } }),
        );
    }
    let mut out = json!({ "summary": o.summary, "parameters": parameters, "responses": responses });
    if let Some(role) = o.role {
        out["security"] = json!([{ "bearer": [] }, { "session": [], "csrf": [] }]);
        out["x-rein-role"] = json!(role);
    } else {
        out["security"] = json!([]);
    }
    match o.request {
        Some("toml-or-json") => {
            out["requestBody"] = json!({ "required": true, "content": {
                "application/json": { "schema": reference("SubmitTask") },
                "application/toml": { "schema": { "type": "string", "description": "a plan file" } } } });
        }
        Some(schema) => {
            out["requestBody"] = json!({ "required": true, "content": { "application/json": { "schema": reference(schema) } } });
        }
        None => {}
    }
    out
}

/// The OpenAPI 3.1 document of the routes in [`table`].
pub fn document() -> Value {
    let mut schemas = Map::new();
    // The plugin protocol's messages (`plugin/…`) are not the API's.
    for (name, schema) in rein_protocol::schema::all()
        .into_iter()
        .filter(|(name, _)| !name.contains('/'))
    {
        let mut schema = serde_json::to_value(schema).unwrap_or(Value::Null);
        if let Some(defs) = schema
            .as_object_mut()
            .and_then(|o| o.remove("$defs"))
            .and_then(|d| d.as_object().cloned())
        {
            for (def, value) in defs {
                schemas.insert(def, value);
            }
        }
        if let Some(o) = schema.as_object_mut() {
            o.remove("$schema");
        }
        schemas.insert(name.to_owned(), schema);
    }
    for (name, schema) in envelopes() {
        schemas.insert(name.to_owned(), schema);
    }
    let mut paths = Map::new();
    for route in table() {
        let mut item = Map::new();
        for o in &route.operations {
            item.insert(o.method.to_owned(), operation(route.path, o));
        }
        paths.insert(route.path.to_owned(), Value::Object(item));
    }
    let doc = json!({
        "openapi": "3.1.0",
        "info": { "title": "rein admin API", "version": env!("CARGO_PKG_VERSION") },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": { "type": "http", "scheme": "bearer" },
                "session": { "type": "apiKey", "in": "cookie", "name": crate::auth::SESSION_COOKIE },
                "csrf": { "type": "apiKey", "in": "header", "name": "X-CSRF-Token" },
            },
        },
    });
    // schemars points into each schema's own `$defs`; here they all live in components.
    let text = doc.to_string().replace("#/$defs/", "#/components/schemas/");
    rein_protocol::schema::canonical(serde_json::from_str(&text).unwrap_or(doc))
}
