//! The Control UI's pages: tasks (filters, cursor paging, submitting a plan),
//! one task (its steps, checkpoints and controls) and the approvals inbox.
//! Each page's live part is a fragment of its own route, fetched again on
//! `/ui/live`'s `changed` events.

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use rein_core::store::{ApprovalFilter, TaskFilter};
use rein_core::{CreateTask, EngineError, RunOptions};
use rein_protocol::{
    ApprovalRequest, ApprovalResponse, ApprovalStatus, Checkpoint, CheckpointStatus,
    CheckpointType, Decision, TaskId, TaskState, TaskStatus, TaskSummary, Timestamp,
};
use serde::Deserialize;

use super::{Refusal, User, changer, page, refusal};
use crate::AppState;
use crate::auth::Role;

/// A value as it reads on the wire (`in_progress`, `high`, …).
fn wire<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

fn time(t: &Timestamp) -> Markup {
    html! { time datetime=(t.to_rfc3339()) { (t.format("%Y-%m-%d %H:%M:%S UTC")) } }
}

fn status_badge(status: TaskStatus) -> Markup {
    html! { span class={"badge s-" (status.as_str())} { (status.as_str()) } }
}

fn engine_refusal(e: EngineError) -> Response {
    let e = crate::error::ApiError::from(e);
    refusal(e.status, &e.message)
}

#[derive(Debug, Default, Deserialize)]
pub struct TasksQuery {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    cursor: Option<String>,
}

impl TasksQuery {
    /// The filter, without empty fields (a form sends them empty).
    fn filter(&self) -> Result<TaskFilter, String> {
        let some = |v: &Option<String>| v.clone().filter(|s| !s.trim().is_empty());
        let status = match some(&self.status) {
            Some(s) => Some(TaskStatus::parse(&s).ok_or(format!("no task status `{s}`"))?),
            None => None,
        };
        Ok(TaskFilter {
            session_id: some(&self.session_id),
            status,
            limit: Some(50),
            cursor: some(&self.cursor),
            ..TaskFilter::default()
        })
    }

    /// The query string of this filter at `cursor`.
    fn with_cursor(&self, cursor: Option<&str>) -> String {
        let mut pairs = Vec::new();
        for (k, v) in [
            ("status", self.status.as_deref()),
            ("session_id", self.session_id.as_deref()),
            ("cursor", cursor),
        ] {
            if let Some(v) = v.filter(|v| !v.is_empty()) {
                pairs.push(format!("{k}={}", encode(v)));
            }
        }
        pairs.join("&")
    }
}

fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub async fn tasks(
    State(state): State<AppState>,
    user: User,
    Query(query): Query<TasksQuery>,
) -> Response {
    let source = format!(
        "/ui/tasks/table?{}",
        query.with_cursor(query.cursor.as_deref())
    );
    let table = live("tasks", &source, tasks_fragment(&state, &query).await);
    let statuses = TaskStatus::ALL;
    page(
        &user,
        "Tasks",
        html! {
            h1 { "Tasks" }
            form.filters method="get" action="/ui/tasks" role="search" {
                label { "Status "
                    select name="status" {
                        option value="" { "any" }
                        @for s in statuses {
                            option value=(s.as_str()) selected[query.status.as_deref() == Some(s.as_str())] { (s.as_str()) }
                        }
                    }
                }
                label { "Session "
                    input type="text" name="session_id" value=[query.session_id.as_deref()];
                }
                button type="submit" { "Filter" }
            }
            (table)
            @if user.can_change() {
                details.submit {
                    summary { "Run a plan" }
                    form hx-post="/ui/tasks" hx-target="#submit-result" {
                        label for="plan-file" { "A plan file (TOML)" }
                        input #plan-file type="file" accept=".toml,text/plain" data-fills="plan-text";
                        label for="plan-text" { "or paste it" }
                        textarea #plan-text name="plan" rows="12" required placeholder="[[steps]]\nid = \"build\"\nrun = \"make\"" {}
                        button type="submit" { "Run" }
                        div #submit-result aria-live="polite" {}
                    }
                }
            }
        },
    )
    .into_response()
}

pub async fn tasks_table(
    State(state): State<AppState>,
    _user: User,
    Query(query): Query<TasksQuery>,
) -> Response {
    tasks_fragment(&state, &query).await.into_response()
}

/// The table of tasks, and the links to the pages beside it.
async fn tasks_fragment(state: &AppState, query: &TasksQuery) -> Markup {
    let listed = match query.filter() {
        Ok(filter) => state.engine.list(&filter).await.map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    html! {
        @match listed {
            Err(problem) => p.error role="alert" { (problem) },
            Ok(page) => {
                @if page.items.is_empty() {
                    p.empty { "No tasks here yet." }
                } @else {
                    table.tasks {
                        thead { tr { th { "Task" } th { "Status" } th { "Steps" } th { "Session" } th { "Updated" } } }
                        tbody {
                            @for t in &page.items { (task_row(t)) }
                        }
                    }
                }
                nav.pager aria-label="pages" {
                    @if query.cursor.is_some() {
                        a href={"/ui/tasks?" (query.with_cursor(None))} { "First page" }
                    }
                    @if let Some(next) = &page.next_cursor {
                        a rel="next" href={"/ui/tasks?" (query.with_cursor(Some(next)))} { "Next page" }
                    }
                }
            }
        }
    }
}

/// A part of a page that fetches its content from `source` again whenever
/// anything changes: one request at a time, the newest one queued. Nothing of
/// this is inherited by what it holds: a decision or a control inside it is a
/// request of its own, never queued behind (and replaced by) a refresh.
fn live(id: &str, source: &str, content: Markup) -> Markup {
    html! {
        div id=(id) data-live-part hx-get=(source) hx-trigger="rein:changed" hx-swap="innerHTML" hx-sync="this:queue last" hx-disinherit="*" {
            (content)
        }
    }
}

fn task_row(t: &TaskSummary) -> Markup {
    html! {
        tr data-task=(t.id) {
            td {
                a href={"/ui/tasks/" (t.id)} { (t.description) }
                br; small.id { (t.id) }
            }
            td { (status_badge(t.status)) }
            td { (t.steps_finished) "/" (t.steps_total) }
            td { (t.session_id) }
            td { (time(&t.updated_at)) }
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct PlanForm {
    plan: String,
}

/// Runs a pasted or uploaded plan file; on success, the browser goes to it.
pub async fn submit(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<PlanForm>,
) -> Response {
    if let Err(refused) = changer(&state, &headers, Role::Operator) {
        return refused.into_response();
    }
    let spec = match rein_core::plan::parse_plan(&form.plan, std::path::Path::new(".")) {
        Ok(spec) => spec,
        Err((message, _)) => return refusal(StatusCode::BAD_REQUEST, &message),
    };
    let created = state
        .engine
        .create(CreateTask {
            plan: spec.plan,
            session_id: spec.session,
            workspace: spec.workspace,
            confined_to: Some(state.workspace_roots.to_vec()),
        })
        .await;
    match created {
        Ok(task) => {
            let id = task.id().clone();
            let _ = state.start(id.clone(), RunOptions::default());
            (
                [("hx-redirect", format!("/ui/tasks/{id}"))],
                html! { p { "Started " (id) } },
            )
                .into_response()
        }
        Err(e) => engine_refusal(e),
    }
}

fn task_id(id: &str) -> Result<TaskId, Refusal> {
    id.parse()
        .map_err(|e: rein_protocol::ids::InvalidId| Refusal(StatusCode::BAD_REQUEST, e.to_string()))
}

pub async fn task(State(state): State<AppState>, user: User, Path(id): Path<String>) -> Response {
    let id = match task_id(&id) {
        Ok(id) => id,
        Err(refused) => return refused.into_response(),
    };
    let body = live(
        "task",
        &format!("/ui/tasks/{id}/body"),
        task_fragment(&state, &user, &id).await,
    );
    page(&user, &format!("Task {id}"), body).into_response()
}

pub async fn task_body(
    State(state): State<AppState>,
    user: User,
    Path(id): Path<String>,
) -> Response {
    match task_id(&id) {
        Ok(id) => task_fragment(&state, &user, &id).await.into_response(),
        Err(refused) => refused.into_response(),
    }
}

/// A step's state, as its newest checkpoint says.
fn step_state<'a>(task: &'a TaskState, step: &str) -> (String, Option<&'a Checkpoint>) {
    match task.latest_for_step(step) {
        // An approval step in progress is a person's to move.
        Some(cp)
            if cp.kind == CheckpointType::UserApproval
                && cp.status == CheckpointStatus::InProgress =>
        {
            ("awaiting_approval".to_owned(), Some(cp))
        }
        Some(cp) => (wire(&cp.status), Some(cp)),
        None => ("waiting".to_owned(), None),
    }
}

/// The end of a step's output, as its checkpoint recorded it.
fn output_tail(cp: &Checkpoint) -> Option<String> {
    let output = cp.output.as_ref()?;
    let part = |key: &str| output.get(key).and_then(|v| v.as_str()).unwrap_or_default();
    let text = match (part("stdout_tail"), part("stderr_tail")) {
        ("", "") if output.get("stdout_tail").is_some() => return None,
        (out, "") => out.to_owned(),
        ("", err) => err.to_owned(),
        (out, err) => format!("{out}\n{err}"),
    };
    let tail: String = text
        .chars()
        .rev()
        .take(400)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    (!tail.trim().is_empty()).then_some(tail)
}

async fn task_fragment(state: &AppState, user: &User, id: &TaskId) -> Markup {
    let task = match state.engine.get(id).await {
        Ok(task) => task,
        Err(e) => return html! { p.error role="alert" { (e.to_string()) } },
    };
    let plan = state.engine.plan(id).await.ok();
    let head = &task.head;
    html! {
        h1 { (head.description) }
        p.meta {
            (status_badge(head.status)) " "
            small.id { (head.id) } " · session " (head.session_id)
        }
        @if let Some(error) = &head.error {
            p.error { (error) }
        }
        @if user.can_change() && !head.status.is_terminal() {
            div.controls {
                @for (action, label) in [("pause", "Pause"), ("resume", "Resume"), ("abort", "Abort"), ("snapshot", "Snapshot")] {
                    button hx-post={"/ui/tasks/" (id) "/control"} hx-vals=(serde_json::json!({ "action": action }).to_string()) hx-target="#control-result" { (label) }
                }
                span #control-result aria-live="polite" {}
            }
        }
        h2 { "Steps" }
        @if let Some(plan) = &plan {
            table.steps {
                thead { tr { th { "Step" } th { "State" } th { "Attempt" } th { "Took" } th { "Needs" } th { "Output" } } }
                tbody {
                    @for step in &plan.steps {
                        @let (st, cp) = step_state(&task, &step.id);
                        tr data-step=(step.id) data-state=(st) {
                            td { strong { (step.id) } br; small { (step.description) } }
                            td { span class={"badge c-" (st)} { (st) } }
                            td { (cp.map(|c| c.attempt.to_string()).unwrap_or_default()) }
                            td { (cp.and_then(|c| c.duration_ms).map(|ms| format!("{ms} ms")).unwrap_or_default()) }
                            td { (step.depends_on.join(", ")) }
                            td {
                                @if let Some(error) = cp.and_then(|c| c.error.as_deref()) { pre.error { (error) } }
                                @if let Some(tail) = cp.and_then(output_tail) { pre { (tail) } }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Checkpoints" }
        ol.timeline {
            @for cp in &task.checkpoints {
                li {
                    span class={"badge c-" (wire(&cp.status))} { (wire(&cp.status)) } " "
                    strong { (wire(&cp.kind)) }
                    @if let Some(step) = &cp.step_id { " · " (step) }
                    " · attempt " (cp.attempt) " · " (time(&cp.started_at))
                }
            }
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct ControlForm {
    action: String,
}

/// Pause, resume, abort or snapshot, as the signed-in operator.
pub async fn control(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ControlForm>,
) -> Response {
    let who = match changer(&state, &headers, Role::Operator) {
        Ok(who) => who,
        Err(refused) => return refused.into_response(),
    };
    let id = match task_id(&id) {
        Ok(id) => id,
        Err(refused) => return refused.into_response(),
    };
    let reason = "asked in the Control UI";
    let done = match form.action.as_str() {
        "pause" => state
            .engine
            .pause(&id, &who.name, reason)
            .await
            .map(|_| "Pause asked".to_owned()),
        "abort" => state
            .engine
            .abort(&id, &who.name, reason)
            .await
            .map(|_| "Abort asked".to_owned()),
        "snapshot" => state
            .engine
            .snapshot(&id)
            .await
            .map(|s| format!("Snapshot {} taken", s.id)),
        "resume" => {
            let options = RunOptions {
                decided_by: who.name.clone(),
                ..RunOptions::default()
            };
            if state.start(id.clone(), options) {
                Ok("Resuming".to_owned())
            } else {
                return refusal(StatusCode::CONFLICT, "It is already running here.");
            }
        }
        other => return refusal(StatusCode::BAD_REQUEST, &format!("no action `{other}`")),
    };
    match done {
        Ok(message) => html! { span.ok { (message) } }.into_response(),
        Err(e) => engine_refusal(e),
    }
}

pub async fn approvals(State(state): State<AppState>, user: User) -> Response {
    let list = live(
        "approvals",
        "/ui/approvals/list",
        approvals_fragment(&state, &user).await,
    );
    page(
        &user,
        "Approvals",
        html! {
            h1 { "Approvals" }
            (list)
        },
    )
    .into_response()
}

pub async fn approvals_list(State(state): State<AppState>, user: User) -> Response {
    approvals_fragment(&state, &user).await.into_response()
}

/// Pending requests first (most urgent first), then the latest decided.
async fn approvals_fragment(state: &AppState, user: &User) -> Markup {
    let pending = state
        .engine
        .approvals(&ApprovalFilter {
            status: Some(ApprovalStatus::Pending),
            task_id: None,
            limit: Some(200),
        })
        .await;
    let recent = state
        .engine
        .approvals(&ApprovalFilter {
            status: None,
            task_id: None,
            limit: Some(50),
        })
        .await;
    let (mut pending, recent) = match (pending, recent) {
        (Ok(p), Ok(r)) => (p, r),
        (Err(e), _) | (_, Err(e)) => {
            return html! { p.error role="alert" { (e.to_string()) } };
        }
    };
    pending.sort_by_key(|a| std::cmp::Reverse(a.priority));
    let decided: Vec<&ApprovalRequest> = recent
        .iter()
        .filter(|a| a.status != ApprovalStatus::Pending)
        .collect();
    html! {
        h2 { "Waiting (" (pending.len()) ")" }
        @if pending.is_empty() { p.empty { "Nothing waits for a person." } }
        @for a in &pending { (approval_card(a, user, None)) }
        h2 { "Decided" }
        @for a in &decided { (approval_card(a, user, None)) }
    }
}

/// One request: what it asks, and (to an operator, while it waits) the
/// decisions, the recommended option first.
fn approval_card(a: &ApprovalRequest, user: &User, note: Option<&str>) -> Markup {
    let mut options = a.options.clone();
    if let Some(r) = &a.recommended_option
        && let Some(i) = options.iter().position(|o| o == r)
    {
        let r = options.remove(i);
        options.insert(0, r);
    }
    let pending = a.status == ApprovalStatus::Pending;
    html! {
        article.approval id={"a-" (a.id)} data-approval=(a.id) data-status=(wire(&a.status)) {
            header {
                span class={"badge p-" (wire(&a.priority))} { (wire(&a.priority)) }
                " " strong { (a.title) }
                " " span class={"badge a-" (wire(&a.status))} { (wire(&a.status)) }
            }
            @if !a.description.is_empty() { p { (a.description) } }
            @if let Some(q) = &a.question { p.question { (q) } }
            p.meta {
                "Task " a href={"/ui/tasks/" (a.task_id)} { (a.task_id) }
                @if let Some(step) = &a.step_id { " · step " (step) }
                " · trigger " (wire(&a.trigger))
                @if let Some(deadline) = &a.deadline {
                    " · deadline " time.deadline datetime=(deadline.to_rfc3339()) { (deadline.format("%H:%M:%S UTC")) }
                    " (then " (wire(&a.on_expiry)) ")"
                }
            }
            @if let Some(r) = &a.response {
                p.decided {
                    (wire(&r.decision)) " by " strong { (r.decided_by) } " at " (time(&r.decided_at))
                    @if let Some(o) = &r.selected_option { " · " (o) }
                    @if let Some(reason) = &r.reason { " — " (reason) }
                }
            }
            @if let Some(note) = note { p.note role="status" { (note) } }
            @if pending && user.can_change() {
                form.decide hx-post={"/ui/approvals/" (a.id) "/decide"} hx-target={"#a-" (a.id)} hx-swap="outerHTML" {
                    @if !options.is_empty() {
                        label { "Option "
                            select name="option" {
                                @for o in &options {
                                    option value=(o) { (o) @if a.recommended_option.as_deref() == Some(o.as_str()) { " (recommended)" } }
                                }
                            }
                        }
                    }
                    label { "Reason " input type="text" name="reason"; }
                    label { "Delegate to " input type="text" name="delegate_to"; }
                    div.buttons {
                        button name="decision" value="approve" { "Approve" }
                        button name="decision" value="deny" { "Deny" }
                        button name="decision" value="skip" { "Skip" }
                        button name="decision" value="delegate" { "Delegate" }
                    }
                }
            }
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct DecideForm {
    decision: String,
    #[serde(default)]
    option: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    delegate_to: Option<String>,
}

/// A decision from the inbox; one made first elsewhere wins, and the card
/// says who made it.
pub async fn decide(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<DecideForm>,
) -> Response {
    let who = match changer(&state, &headers, Role::Operator) {
        Ok(who) => who,
        Err(refused) => return refused.into_response(),
    };
    let user = User {
        name: who.name.clone(),
        role: who.role,
        csrf: None,
    };
    let id: rein_protocol::ApprovalId = match id.parse() {
        Ok(id) => id,
        Err(e) => return refusal(StatusCode::BAD_REQUEST, &format!("{e}")),
    };
    let decision = match form.decision.as_str() {
        "approve" => Decision::Approve,
        "deny" => Decision::Deny,
        "skip" => Decision::Skip,
        "delegate" => Decision::Delegate,
        other => return refusal(StatusCode::BAD_REQUEST, &format!("no decision `{other}`")),
    };
    let some = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    let response = ApprovalResponse {
        request_id: id.clone(),
        decision,
        selected_option: if decision == Decision::Approve {
            some(form.option)
        } else {
            None
        },
        reason: some(form.reason),
        decided_by: who.name.clone(),
        delegate_to: some(form.delegate_to),
        decided_at: chrono::Utc::now(),
    };
    let decided = if who.role >= Role::Admin {
        state.engine.decide_overriding(response).await
    } else {
        state.engine.decide(response).await
    };
    match decided {
        Ok(a) => approval_card(&a, &user, None).into_response(),
        Err(EngineError::AlreadyDecided { current }) => {
            let first = current
                .response
                .as_ref()
                .map(|r| format!("{} decided it first ({}).", r.decided_by, wire(&r.decision)))
                .unwrap_or_else(|| "It was decided first elsewhere.".to_owned());
            approval_card(&current, &user, Some(&first)).into_response()
        }
        // Refused (an option it does not offer, someone else's to decide):
        // the card stays, saying why.
        Err(e) => match state.engine.approval(&id).await {
            Ok(current) => {
                let message = crate::error::ApiError::from(e).message;
                approval_card(&current, &user, Some(&message)).into_response()
            }
            Err(_) => engine_refusal(e),
        },
    }
}
