//! The routes: tasks, snapshots, approvals, the ledger, metrics. Every handler
//! checks the caller's role first: reads need viewer, changes need operator.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use rein_core::RunOptions;
use rein_core::store::{ApprovalFilter, ControlKind, TaskFilter};
use rein_protocol::api::{
    ApprovalEnvelope, ApprovalQuery, CompletionRequest, ControlResult, DecisionRequest,
    ExplainQuery, HarnessInfo, List, LogQuery, Page, PlanEnvelope, Reason, ResumeAllResult,
    ResumeRequest, ResumeResult, SessionRequest, SessionResponse, SnapshotEnvelope, SnapshotInfo,
    SubmitTask, TakenSnapshot, TaskEnvelope, TaskQuery, UsageQuery, VerifyQuery,
};
use rein_protocol::{
    ApprovalId, ApprovalRequest, ApprovalResponse, HarnessEvent, LedgerEntry, SelectionDecision,
    SnapshotId, TaskDecomposition, TaskId, TaskSummary,
};
use serde::de::DeserializeOwned;

use crate::AppState;
use crate::auth::{Principal, SESSION_COOKIE};
use crate::error::{ApiError, ApiResult};

/// The caller, authenticated (and CSRF-checked for cookie mutations).
#[derive(Debug)]
pub struct Caller(pub Principal);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        // Checked already, against the route table's role.
        if let Some(caller) = parts.extensions.get::<Principal>() {
            return Ok(Caller(caller.clone()));
        }
        state
            .auth
            .principal(&parts.method, &parts.headers)
            .map(Caller)
    }
}

/// A JSON body whose rejections are API errors naming what is wrong (400, or 413
/// for a body over the limit).
#[derive(Debug)]
pub struct Body<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(value)) => Ok(Body(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

/// A query string whose rejections are 400s naming what is wrong.
#[derive(Debug)]
pub struct Params<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(Params(value)),
            Err(rejection) => Err(ApiError::bad_request(rejection.body_text())),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            rejection.body_text(),
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as JSON with `Content-Type: application/json`",
        ),
        // Malformed JSON and JSON of the wrong shape (axum says 422) are both 400.
        _ => ApiError::bad_request(rejection.body_text()),
    }
}

/// An id from a path or a query, checked: a malformed one is a 400 naming the
/// form expected (what the OpenAPI document's pattern says).
pub(crate) fn parse_id<T>(id: &str) -> ApiResult<T>
where
    T: std::str::FromStr<Err = rein_protocol::ids::InvalidId>,
{
    id.parse()
        .map_err(|e: rein_protocol::ids::InvalidId| ApiError::bad_request(e.to_string()))
}

fn task_id(id: &str) -> ApiResult<TaskId> {
    parse_id(id)
}

/// `value` read as the enum `T`, or a 400 naming `field` and `allowed`.
pub(crate) fn one_of<T: serde::de::DeserializeOwned>(
    field: &str,
    value: &Option<String>,
    allowed: &str,
) -> ApiResult<Option<T>> {
    rein_core::queries::one_of(field, value.as_deref(), allowed).map_err(ApiError::bad_request)
}

pub(crate) fn parse_time(
    name: &str,
    value: &Option<String>,
) -> ApiResult<Option<rein_protocol::Timestamp>> {
    rein_core::queries::time(name, value.as_deref()).map_err(ApiError::bad_request)
}

pub async fn list_tasks(
    State(state): State<AppState>,
    Params(q): Params<TaskQuery>,
) -> ApiResult<Json<Page<TaskSummary>>> {
    let filter = TaskFilter::of_query(q).map_err(ApiError::bad_request)?;
    Ok(Json(state.engine.list(&filter).await?))
}

/// The plan a submission asks for: the one given, or a goal's (stepless) plan.
pub(crate) fn into_plan(
    submit: SubmitTask,
) -> ApiResult<(
    TaskDecomposition,
    Option<String>,
    Option<std::path::PathBuf>,
)> {
    let goal_keys = [
        ("provider", submit.provider.is_some()),
        ("model", submit.model.is_some()),
        ("runtime", submit.runtime.is_some()),
        ("confirm", submit.confirm.is_some()),
        ("attempts", submit.attempts.is_some()),
        ("max_tokens", submit.max_tokens.is_some()),
        ("max_parallel", submit.max_parallel.is_some()),
        ("budget", submit.budget.is_some()),
    ];
    let plan = match (submit.plan, submit.goal) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request("give a `plan` or a `goal`, not both"));
        }
        (None, None) => {
            return Err(ApiError::bad_request(
                "give a `plan` (the steps) or a `goal` (a sentence a model decomposes)",
            ));
        }
        (Some(plan), None) => {
            if let Some((key, _)) = goal_keys.iter().find(|(_, set)| *set) {
                return Err(ApiError::bad_request(format!(
                    "`{key}` goes with a `goal`; a `plan` says it in its steps"
                )));
            }
            plan
        }
        (None, Some(goal)) => {
            if submit.attempts.is_some_and(|a| a == 0 || a > 10) {
                return Err(ApiError::bad_request("attempts must be between 1 and 10"));
            }
            if submit
                .max_tokens
                .is_some_and(|n| !(256..=131_072).contains(&n))
            {
                return Err(ApiError::bad_request(
                    "max_tokens must be between 256 and 131072",
                ));
            }
            if submit.max_parallel == Some(0) {
                return Err(ApiError::bad_request("max_parallel must be at least 1"));
            }
            if submit
                .runtime
                .as_deref()
                .is_some_and(|r| r.trim().is_empty())
            {
                return Err(ApiError::bad_request(
                    "runtime must not be empty: name `auto`, `rein` or a harness id, or leave it out",
                ));
            }
            if let Some(Err(e)) = submit.budget.as_ref().map(rein_protocol::Budget::check) {
                return Err(ApiError::bad_request(format!("budget: {e}")));
            }
            let mut plan = TaskDecomposition::new(goal.trim(), Vec::new());
            plan.max_parallel = submit.max_parallel;
            plan.budget = submit.budget;
            plan.goal = Some(rein_protocol::Goal {
                provider: submit.provider,
                model: submit.model,
                runtime: submit.runtime,
                confirm: submit.confirm.unwrap_or(true),
                attempts: submit.attempts,
                max_tokens: submit.max_tokens,
                mcp: Vec::new(),
                images: Vec::new(),
            });
            plan
        }
    };
    Ok((plan, submit.session_id, submit.workspace))
}

/// One isolated completion: prompt-only, no tools, on the runtime the
/// selection policy picks; with `schema`, an answer it refuses is a 502
/// naming each violation.
pub async fn complete(
    State(state): State<AppState>,
    Body(body): Body<CompletionRequest>,
) -> ApiResult<Json<rein_core::harness::completion::Completion>> {
    use rein_core::harness::completion::{self as completion, CompletionFailure, Route};
    if body.prompt.trim().is_empty() {
        return Err(ApiError::bad_request("the prompt is empty"));
    }
    let timeout_ms = body.timeout_ms.unwrap_or(120_000);
    if timeout_ms == 0 || timeout_ms > 1_800_000 {
        return Err(ApiError::bad_request(
            "timeout_ms must be between 1 and 1800000",
        ));
    }
    let request = completion::CompletionRequest {
        prompt: body.prompt,
        system: body.system,
        route: Route {
            provider: body.provider,
            model: body.model,
            runtime: body.runtime,
        },
        timeout: std::time::Duration::from_millis(timeout_ms),
        shape: Default::default(),
        policy: match body.visibility.unwrap_or_default() {
            rein_protocol::api::Visibility::Default => {
                rein_core::harness::isolated::OutputTextPolicy::Default
            }
            rein_protocol::api::Visibility::Strict => {
                rein_core::harness::isolated::OutputTextPolicy::StrictVisible
            }
        },
    };
    let schema = body.schema.map(serde_json::Value::Object);
    // The schema is asked of the model as structured output too, where its
    // provider has that.
    let request = completion::CompletionRequest {
        shape: rein_core::harness::isolated::AnswerShape {
            max_tokens: None,
            json_schema: schema.clone(),
        },
        ..request
    };
    match state.engine.complete(&request, schema.as_ref()).await {
        Ok(done) => Ok(Json(done)),
        Err(e @ (CompletionFailure::BadSchema(_) | CompletionFailure::Selection(_))) => {
            Err(ApiError::bad_request(e.to_string()))
        }
        Err(e @ CompletionFailure::NotConfigured(_)) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_configured",
            e.advised(),
        )),
        Err(e) => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "completion_failed",
            e.advised(),
        )),
    }
}

/// A plan as JSON (`{plan, session_id?}`) or as the TOML of a plan file.
pub async fn submit_task(State(state): State<AppState>, req: Request) -> ApiResult<Response> {
    let toml = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/toml") || v.starts_with("text/plain"));
    let (plan, session_id, workspace) = if toml {
        let bytes = axum::body::to_bytes(req.into_body(), crate::BODY_LIMIT)
            .await
            .map_err(|e| {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", e.to_string())
            })?;
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| ApiError::bad_request("the plan is not UTF-8"))?;
        let spec = rein_core::plan::parse_plan(text, std::path::Path::new("."))
            .map_err(|(message, _)| ApiError::bad_request(message))?;
        (spec.plan, spec.session, spec.workspace)
    } else {
        let Body(submit) = Body::<SubmitTask>::from_request(req, &()).await?;
        into_plan(submit)?
    };
    let created = state.submit(plan, session_id, workspace).await?;
    Ok((
        StatusCode::CREATED,
        Json(TaskEnvelope {
            task: created,
            usage: None,
        }),
    )
        .into_response())
}

pub async fn show_task(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let id = task_id(&id)?;
    let summary = state.engine.summary(&id).await?;
    let body = match state.bodies.get(&id, summary.last_seq) {
        Some(body) => body,
        None => {
            let task = state.engine.get(&id).await?;
            let seq = task.head.last_seq;
            let bytes = serde_json::to_vec(&TaskEnvelope { task, usage: None }).map_err(|e| {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            })?;
            let body = axum::body::Bytes::from(bytes);
            state.bodies.put(id.clone(), seq, body.clone());
            body
        }
    };
    // The task's usage moves with its journal, not its log: read each time
    // and set beside the (kept) task, as `usage`.
    let found = state
        .engine
        .store()
        .usage(&rein_core::store::UsageFilter {
            task_id: Some(id),
            ..Default::default()
        })
        .await
        .map_err(rein_core::EngineError::from)?;
    let usage = serde_json::to_vec(&rein_core::store::usage_report(
        &found,
        Some("model"),
        &state.models,
    ))
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    let mut out = Vec::with_capacity(body.len() + usage.len() + 12);
    out.extend_from_slice(body.strip_suffix(b"}").unwrap_or(&body));
    out.extend_from_slice(b",\"usage\":");
    out.extend_from_slice(&usage);
    out.push(b'}');
    Ok(([(header::CONTENT_TYPE, "application/json")], out).into_response())
}

/// What model calls used, added up, with their cost at the server's prices.
pub async fn usage_report(
    State(state): State<AppState>,
    Params(q): Params<UsageQuery>,
) -> ApiResult<Json<rein_protocol::UsageReport>> {
    let by = q.by.as_deref();
    let group = rein_core::store::usage_group(by).ok_or_else(|| {
        ApiError::bad_request(format!(
            "by `{}`: add up by task, model or day",
            by.unwrap_or_default()
        ))
    })?;
    let filter = rein_core::store::UsageFilter {
        task_id: q.task.as_deref().map(task_id).transpose()?,
        session_id: q.session,
        since: parse_time("since", &q.since)?,
        until: parse_time("until", &q.until)?,
        by: group,
    };
    let found = state
        .engine
        .store()
        .usage(&filter)
        .await
        .map_err(rein_core::EngineError::from)?;
    Ok(Json(rein_core::store::usage_report(
        &found,
        by,
        &state.models,
    )))
}

pub async fn task_events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Params(q): Params<LogQuery>,
) -> ApiResult<Json<List<HarnessEvent>>> {
    let id = task_id(&id)?;
    state.engine.summary(&id).await?;
    let events = state
        .engine
        .events(&id, q.after.unwrap_or(0), q.limit.unwrap_or(1000))
        .await?;
    Ok(Json(List::new(events)))
}

pub async fn pause_task(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Body(body): Body<Reason>,
) -> ApiResult<Json<ControlResult>> {
    control_task(&state, &caller, &id, body, ControlKind::Pause).await
}

pub async fn abort_task(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Body(body): Body<Reason>,
) -> ApiResult<Json<ControlResult>> {
    control_task(&state, &caller, &id, body, ControlKind::Abort).await
}

/// Asks the task's runner to pause or abort, as the caller.
async fn control_task(
    state: &AppState,
    caller: &Principal,
    id: &str,
    body: Reason,
    kind: ControlKind,
) -> ApiResult<Json<ControlResult>> {
    let reason = body
        .reason
        .unwrap_or_else(|| "requested over the API".into());
    let id = task_id(id)?;
    let outcome = match kind {
        ControlKind::Pause => state.engine.pause(&id, &caller.name, &reason).await?,
        ControlKind::Abort => state.engine.abort(&id, &caller.name, &reason).await?,
    };
    Ok(Json(control_result(outcome)))
}

/// `applied` with the task's new status, `requested` with the runner that was
/// asked, or `already` with the status the task is in.
fn control_result(outcome: rein_core::ControlOutcome) -> ControlResult {
    match outcome {
        rein_core::ControlOutcome::Applied(state) => ControlResult::Applied {
            status: state.status(),
        },
        rein_core::ControlOutcome::Requested { runner } => ControlResult::Requested { runner },
        rein_core::ControlOutcome::AlreadyThere(status) => ControlResult::Already { status },
    }
}

pub async fn resume_task(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Body(body): Body<ResumeRequest>,
) -> ApiResult<Response> {
    let id = task_id(&id)?;
    let task = state.engine.summary(&id).await?;
    if task.status.is_terminal() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("task {id} is {}: there is nothing left to run", task.status),
        ));
    }
    let options = RunOptions {
        rerun: body.rerun,
        skip: body.skip,
        decided_by: caller.name,
        ..RunOptions::default()
    };
    if !state.start(id.clone(), options) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("task {id} is already running in this server"),
        ));
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(ResumeResult {
            task_id: id,
            resuming: true,
        }),
    )
        .into_response())
}

/// Resumes every unfinished task nobody runs: pending, paused, and in progress
/// with no live runner.
pub async fn resume_all(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> ApiResult<Response> {
    let (heads, sweep) = state.engine.resumable_swept().await?;
    let mut ids = Vec::with_capacity(heads.len());
    for head in heads {
        let options = RunOptions {
            decided_by: caller.name.clone(),
            sweep: sweep.clone(),
            ..RunOptions::default()
        };
        if state.start(head.id.clone(), options) {
            ids.push(head.id);
        }
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(ResumeAllResult { task_ids: ids }),
    )
        .into_response())
}

pub async fn task_plan(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<PlanEnvelope>> {
    let plan = state.engine.plan(&task_id(&id)?).await?;
    Ok(Json(PlanEnvelope { plan }))
}

pub async fn task_history(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<rein_protocol::History>> {
    Ok(Json(state.engine.history(&task_id(&id)?).await?))
}

/// Forks a task and runs the fork in this server.
pub async fn fork_task(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Body(body): Body<rein_protocol::api::ForkRequest>,
) -> ApiResult<Response> {
    let id = task_id(&id)?;
    let point = match (body.before, body.after, body.at) {
        (Some(step), None, None) if body.turn.is_none() => rein_core::fork::ForkPoint::Before(step),
        (None, Some(step), None) if body.turn.is_none() => rein_core::fork::ForkPoint::After(step),
        (None, None, Some(seq)) => rein_core::fork::ForkPoint::At {
            seq,
            turn: body.turn,
        },
        (None, None, None) => {
            return Err(ApiError::bad_request(
                "say where the fork starts: one of `before` (a step), `after` (a step) or `at` (an event's seq)",
            ));
        }
        _ if body.turn.is_some() => {
            return Err(ApiError::bad_request(
                "`turn` goes with `at` (the seq an agent step started at), alone",
            ));
        }
        _ => {
            return Err(ApiError::bad_request(
                "give one of `before`, `after` and `at`, not several",
            ));
        }
    };
    forked(&state, &id, point, body.workspace, body.set).await
}

/// Runs a failed task again: forks it just before its first failed step.
pub async fn retry_task(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Body(body): Body<rein_protocol::api::RetryRequest>,
) -> ApiResult<Response> {
    let id = task_id(&id)?;
    let point = state.engine.retry_point(&id).await?;
    forked(&state, &id, point, body.workspace, body.set).await
}

async fn forked(
    state: &AppState,
    id: &TaskId,
    point: rein_core::fork::ForkPoint,
    workspace: Option<String>,
    set: std::collections::BTreeMap<String, serde_json::Value>,
) -> ApiResult<Response> {
    let fork = rein_core::fork::Fork {
        point,
        workspace: workspace.map(std::path::PathBuf::from),
        set,
        confined_to: Some(state.workspace_roots.to_vec()),
    };
    let task = state.engine.fork(id, fork).await?;
    let _ = state.start(task.id().clone(), RunOptions::default());
    Ok((
        StatusCode::CREATED,
        Json(TaskEnvelope { task, usage: None }),
    )
        .into_response())
}

pub async fn list_snapshots(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<List<SnapshotInfo>>> {
    let id = task_id(&id)?;
    state.engine.summary(&id).await?;
    let items = state
        .engine
        .store()
        .list_snapshots(&id)
        .await
        .map_err(rein_core::EngineError::from)?;
    Ok(Json(List::new(items)))
}

pub async fn snapshot_task(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let s = state.engine.snapshot(&task_id(&id)?).await?;
    let snapshot = TakenSnapshot {
        status: s.state.status(),
        id: s.id,
        task_id: s.task_id,
        seq: s.seq,
        created_at: s.created_at,
    };
    Ok((StatusCode::CREATED, Json(SnapshotEnvelope { snapshot })).into_response())
}

pub async fn restore_snapshot(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let id: SnapshotId = parse_id(&id)?;
    let task = state.engine.restore(&id).await?;
    Ok((
        StatusCode::CREATED,
        Json(TaskEnvelope { task, usage: None }),
    )
        .into_response())
}

pub async fn delete_task(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    state.engine.delete(&task_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn list_approvals(
    State(state): State<AppState>,
    Params(q): Params<ApprovalQuery>,
) -> ApiResult<Json<List<ApprovalRequest>>> {
    let filter = ApprovalFilter::of_query(q).map_err(ApiError::bad_request)?;
    Ok(Json(List::new(state.engine.approvals(&filter).await?)))
}

fn approval_id(id: &str) -> ApiResult<ApprovalId> {
    parse_id(id)
}

pub async fn show_approval(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<ApprovalEnvelope>> {
    let approval = state.engine.approval(&approval_id(&id)?).await?;
    Ok(Json(ApprovalEnvelope { approval }))
}

pub async fn decide(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Body(body): Body<DecisionRequest>,
) -> ApiResult<Json<ApprovalEnvelope>> {
    let response = ApprovalResponse {
        request_id: approval_id(&id)?,
        decision: body.decision,
        selected_option: body.selected_option,
        reason: body.reason,
        decided_by: caller.name,
        delegate_to: body.delegate_to,
        decided_at: chrono::Utc::now(),
    };
    let approval = state.decide(caller.role, response).await?;
    Ok(Json(ApprovalEnvelope { approval }))
}

pub async fn ledger(State(state): State<AppState>) -> ApiResult<Json<List<LedgerEntry>>> {
    Ok(Json(List::new(state.engine.ledger().await?)))
}

pub async fn verify_ledger(
    State(state): State<AppState>,
    Params(q): Params<VerifyQuery>,
) -> ApiResult<Json<rein_protocol::LedgerCheck>> {
    let head = q
        .head
        .as_deref()
        .map(rein_protocol::LedgerHead::parse)
        .transpose()
        .map_err(|e| ApiError::bad_request(format!("head: {e}")))?;
    Ok(Json(state.engine.ledger_check(head).await?))
}

pub async fn metrics_json(
    State(state): State<AppState>,
) -> ApiResult<Json<rein_protocol::HarnessMetrics>> {
    Ok(Json(state.engine.metrics().await?))
}

pub async fn metrics_text(State(state): State<AppState>) -> ApiResult<Response> {
    let mut text = crate::prometheus::render(&state.engine.metrics().await?);
    let usage = state
        .engine
        .store()
        .usage(&rein_core::store::UsageFilter::default())
        .await
        .map_err(rein_core::EngineError::from)?;
    crate::prometheus::render_usage(&mut text, &usage, &state.models);
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

pub async fn healthz(State(state): State<AppState>) -> Response {
    let health = crate::health::check_with(&state.engine, &state.alerts).await;
    let status = match health.status {
        crate::health::Status::Healthy | crate::health::Status::Degraded => StatusCode::OK,
        crate::health::Status::Unhealthy => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, Json(health)).into_response()
}

pub async fn open_session(
    State(state): State<AppState>,
    Body(body): Body<SessionRequest>,
) -> ApiResult<Response> {
    let (id, csrf) = state.auth.open_session(&body.token)?;
    let cookie = format!("{SESSION_COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/");
    Ok((
        [(header::SET_COOKIE, cookie)],
        Json(SessionResponse { csrf_token: csrf }),
    )
        .into_response())
}

pub async fn not_found() -> ApiError {
    ApiError::not_found(
        "no such route; the API lives under /admin/ (/docs/api lists every operation)",
    )
}

/// A route that exists, asked with a method it does not take: 405 with the
/// same JSON error as every other (axum adds the `Allow` header).
pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{} does not take {method}; its Allow header says what it takes, and /docs/api lists every operation",
            uri.path()
        ),
    )
}

/// The harnesses this server's runs select from (the built-in runtime first).
pub async fn list_harnesses(State(state): State<AppState>) -> ApiResult<Json<List<HarnessInfo>>> {
    Ok(Json(List::new(state.harnesses.list())))
}

/// Why a plugin could not be changed: 404 for one not loaded, 409 for a
/// revoked one.
fn plugin_refused(e: &rein_core::harness::PluginChangeError) -> ApiError {
    use rein_core::harness::PluginChangeError;
    match e {
        PluginChangeError::Unknown { .. } => {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string())
        }
        PluginChangeError::Revoked { .. } => {
            ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string())
        }
    }
}

/// An operator's change of a plugin's status; the harnesses as they are then.
fn change_plugin(
    state: &AppState,
    id: &str,
    to: rein_core::harness::PluginStatus,
) -> ApiResult<Json<List<HarnessInfo>>> {
    match state.harnesses.registry.change_plugin(id, to) {
        Ok(_) => {
            tracing::info!(plugin = id, status = to.as_str(), "plugin status changed");
            Ok(Json(List::new(state.harnesses.list())))
        }
        Err(e) => Err(plugin_refused(&e)),
    }
}

pub async fn disable_plugin(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<List<HarnessInfo>>> {
    change_plugin(&state, &id, rein_core::harness::PluginStatus::Disabled)
}

pub async fn enable_plugin(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<List<HarnessInfo>>> {
    change_plugin(&state, &id, rein_core::harness::PluginStatus::Enabled)
}

/// Reloads a plugin (spec §3 rule 11): a new registration, its program
/// restarted at its next call; the harnesses as they are then.
pub async fn reload_plugin(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<List<HarnessInfo>>> {
    match state.harnesses.registry.reload(&id).await {
        Ok(serial) => {
            tracing::info!(plugin = %id, registration = serial, "plugin reloaded");
            Ok(Json(List::new(state.harnesses.list())))
        }
        Err(e) => Err(plugin_refused(&e)),
    }
}

pub async fn revoke_plugin(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<List<HarnessInfo>>> {
    change_plugin(&state, &id, rein_core::harness::PluginStatus::Revoked)
}

/// Which runtime would serve a model route here, with the whole decision.
pub async fn explain_harness(
    State(state): State<AppState>,
    Params(q): Params<ExplainQuery>,
) -> ApiResult<Json<SelectionDecision>> {
    use rein_core::harness::SelectionError;
    if q.provider.trim().is_empty() {
        return Err(ApiError::bad_request("provider must not be empty"));
    }
    match state
        .harnesses
        .explain(q.provider, q.model, q.runtime)
        .await
    {
        Ok(decision) => Ok(Json(decision)),
        Err(e @ SelectionError::MissingHarness { .. }) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            e.to_string(),
        )),
        Err(e) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            e.to_string(),
        )),
    }
}
