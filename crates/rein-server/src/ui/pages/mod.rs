//! The Control UI's pages: tasks (filters, cursor paging, submitting a plan),
//! one task (its steps, checkpoints and controls) and the approvals inbox.
//! Each page's live part is a fragment of its own route, fetched again on
//! `/ui/live`'s `changed` events.

mod agent;
mod approvals;

use agent::*;
pub use approvals::{approvals, approvals_list, decide};

use axum::Form;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use rein_core::store::{ApprovalFilter, TaskFilter};
use rein_core::{EngineError, RunOptions};
use rein_protocol::{
    ApprovalRequest, ApprovalResponse, ApprovalStatus, Checkpoint, CheckpointStatus,
    CheckpointType, Decision, TaskId, TaskState, TaskStatus, TaskSummary,
};
use serde::Deserialize;

use super::{PageQuery, User, changer, engine_refusal, live, page, parse_id, refusal, time};
use crate::AppState;
use crate::auth::Role;

fn status_badge(status: TaskStatus) -> Markup {
    html! { span class={"badge s-" (status.as_str())} { (status.as_str()) } }
}

#[derive(Debug, Default, Deserialize)]
pub struct TasksQuery {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    /// Created at or after (a form's `datetime-local`, read as UTC).
    #[serde(default)]
    created_from: Option<String>,
    /// Created before.
    #[serde(default)]
    created_to: Option<String>,
    #[serde(default)]
    cursor: Option<String>,
}

/// A time from a form: `YYYY-MM-DDTHH:MM[:SS]` in UTC (what a
/// `datetime-local` field sends; the pages show times in UTC), or RFC 3339.
fn form_time(name: &str, value: &str) -> Result<rein_protocol::Timestamp, String> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(value) {
        return Ok(t.to_utc());
    }
    ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"]
        .iter()
        .find_map(|f| chrono::NaiveDateTime::parse_from_str(value, f).ok())
        .map(|t| t.and_utc())
        .ok_or_else(|| {
            format!("{name}: `{value}` is not a time; write it as 2026-12-03T14:30 (UTC)")
        })
}

impl TasksQuery {
    /// The filter, without empty fields (a form sends them empty).
    fn filter(&self) -> Result<TaskFilter, String> {
        let some = |v: &Option<String>| v.clone().filter(|s| !s.trim().is_empty());
        let status = match some(&self.status) {
            Some(s) => Some(TaskStatus::parse(&s).ok_or(format!("no task status `{s}`"))?),
            None => None,
        };
        let time =
            |name: &str, v: &Option<String>| some(v).map(|v| form_time(name, v.trim())).transpose();
        Ok(TaskFilter {
            session_id: some(&self.session_id),
            status,
            created_from: time("created from", &self.created_from)?,
            created_to: time("created before", &self.created_to)?,
            limit: Some(50),
            cursor: some(&self.cursor),
            forked_from: None,
        })
    }

    /// The query string of this filter at `cursor`.
    fn with_cursor(&self, cursor: Option<&str>) -> String {
        let mut pairs = Vec::new();
        for (k, v) in [
            ("status", self.status.as_deref()),
            ("session_id", self.session_id.as_deref()),
            ("created_from", self.created_from.as_deref()),
            ("created_to", self.created_to.as_deref()),
            ("cursor", cursor),
        ] {
            if let Some(v) = v.filter(|v| !v.is_empty()) {
                pairs.push(format!("{k}={}", rein_protocol::api::escape(v)));
            }
        }
        pairs.join("&")
    }
}

pub async fn tasks(
    State(state): State<AppState>,
    user: User,
    PageQuery(query): PageQuery<TasksQuery>,
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
                label { "Created from (UTC) "
                    input type="datetime-local" name="created_from" value=[query.created_from.as_deref()];
                }
                label { "Created before (UTC) "
                    input type="datetime-local" name="created_to" value=[query.created_to.as_deref()];
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
                details.submit {
                    summary { "Run a goal" }
                    form hx-post="/ui/tasks/goal" hx-target="#goal-result" {
                        label for="goal-text" { "The goal, in a sentence: a model makes it into a plan" }
                        textarea #goal-text name="goal" rows="3" required placeholder="Add a --version flag to the CLI and test it" {}
                        div.row {
                            label { "Provider " input type="text" name="provider" placeholder="the server's default"; }
                            label { "Model " input type="text" name="model" placeholder="the provider's default"; }
                            label { "Runtime " input type="text" name="runtime" placeholder="auto"; }
                        }
                        label.check { input type="checkbox" name="confirm" checked; " A person confirms the plan before it runs" }
                        button type="submit" { "Run" }
                        div #goal-result aria-live="polite" {}
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
    PageQuery(query): PageQuery<TasksQuery>,
) -> Response {
    tasks_fragment(&state, &query).await.into_response()
}

/// The table of tasks, and the links to the pages beside it.
async fn tasks_fragment(state: &AppState, query: &TasksQuery) -> Markup {
    let listed = match query.filter() {
        Ok(filter) => state.engine.list(&filter).await.map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    // The tasks a person is waited for by: each request still pending.
    let waiting: std::collections::HashMap<String, usize> = state
        .engine
        .approvals(&ApprovalFilter {
            status: Some(ApprovalStatus::Pending),
            task_id: None,
            limit: Some(500),
        })
        .await
        .unwrap_or_default()
        .iter()
        .fold(std::collections::HashMap::new(), |mut by, a| {
            *by.entry(a.task_id.to_string()).or_default() += 1;
            by
        });
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
                            @for t in &page.items { (task_row(t, waiting.get(t.id.as_str()).copied())) }
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

/// A task's row; `waiting`: how many of its requests wait for a person.
fn task_row(t: &TaskSummary, waiting: Option<usize>) -> Markup {
    html! {
        tr data-task=(t.id) {
            td {
                a href={"/ui/tasks/" (t.id)} { (t.description) }
                br; small.id { (t.id) }
            }
            td {
                (status_badge(t.status))
                @if let Some(n) = waiting {
                    " " a.badge.waiting href="/ui/approvals" data-waiting=(n) {
                        "waits for a person"
                        @if n > 1 { " (" (n) ")" }
                    }
                }
            }
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
    match state.submit(spec.plan, spec.session, spec.workspace).await {
        Ok(task) => started(task.id()),
        Err(e) => engine_refusal(e),
    }
}

#[derive(Debug, Deserialize)]
pub struct GoalForm {
    goal: String,
    #[serde(default)]
    provider: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    runtime: Option<String>,
    /// A checkbox: present (`on`) when a person confirms the plan made.
    #[serde(default)]
    confirm: Option<String>,
}

/// Runs a goal: a model makes it into a plan at CP2 (a person confirms the
/// plan first unless the box is cleared); on success, the browser goes to it.
pub async fn submit_goal(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<GoalForm>,
) -> Response {
    if let Err(refused) = changer(&state, &headers, Role::Operator) {
        return refused.into_response();
    }
    let Some(goal) = super::filled(Some(form.goal)) else {
        return refusal(StatusCode::BAD_REQUEST, "Say what the goal is.");
    };
    let submit = rein_protocol::api::SubmitTask {
        goal: Some(goal),
        provider: super::filled(form.provider),
        model: super::filled(form.model),
        runtime: super::filled(form.runtime),
        confirm: Some(form.confirm.is_some()),
        ..Default::default()
    };
    let (plan, session_id, workspace) = match crate::routes::into_plan(submit) {
        Ok(parts) => parts,
        Err(e) => return refusal(e.status, &e.message),
    };
    match state.submit(plan, session_id, workspace).await {
        Ok(task) => started(task.id()),
        Err(e) => engine_refusal(e),
    }
}

/// The answer to a submission that made a task: the browser goes to it.
pub(super) fn started(id: &TaskId) -> Response {
    (
        [("hx-redirect", format!("/ui/tasks/{id}"))],
        html! { p { "Started " (id) } },
    )
        .into_response()
}

/// Restores a snapshot as a new task, as the signed-in operator; the browser
/// goes to it.
pub async fn restore(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(refused) = changer(&state, &headers, Role::Operator) {
        return refused.into_response();
    }
    let id = match parse_id::<rein_protocol::SnapshotId>(&id) {
        Ok(id) => id,
        Err(refused) => return refused.into_response(),
    };
    match state.engine.restore(&id).await {
        Ok(task) => started(task.id()),
        Err(e) => engine_refusal(e),
    }
}

pub async fn task(State(state): State<AppState>, user: User, Path(id): Path<String>) -> Response {
    let id = match parse_id::<TaskId>(&id) {
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
    match parse_id::<TaskId>(&id) {
        Ok(id) => task_fragment(&state, &user, &id).await.into_response(),
        Err(refused) => refused.into_response(),
    }
}

/// A step's state, as its newest checkpoint says.
/// The controls a task's page offers for where the task stands: Pause while
/// it runs, Resume when it is paused or its runner is gone, Abort (styled as
/// the end it is) and Snapshot always.
fn controls(
    head: &rein_protocol::TaskHead,
) -> Vec<(&'static str, &'static str, Option<&'static str>)> {
    let running = head.status == TaskStatus::InProgress
        && head
            .runner
            .as_ref()
            .is_some_and(rein_core::process::runner_alive);
    let mut out = Vec::new();
    if running {
        out.push(("pause", "Pause", None));
    } else {
        out.push(("resume", "Resume", None));
    }
    out.push(("abort", "Abort", Some("danger")));
    out.push(("snapshot", "Snapshot", Some("secondary")));
    out
}

fn step_state<'a>(task: &'a TaskState, step: &str) -> (&'static str, Option<&'a Checkpoint>) {
    match task.latest_for_step(step) {
        // An approval step in progress is a person's to move.
        Some(cp)
            if cp.kind == CheckpointType::UserApproval
                && cp.status == CheckpointStatus::InProgress =>
        {
            ("awaiting_approval", Some(cp))
        }
        Some(cp) => (cp.status.as_str(), Some(cp)),
        None => ("waiting", None),
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

/// Each attempt of a step: its number, how it ended and, for a command, its
/// exit status.
fn attempts(task: &TaskState, step: &str) -> Markup {
    let tries: Vec<&Checkpoint> = task
        .checkpoints
        .iter()
        .filter(|c| c.step_id.as_deref() == Some(step))
        .collect();
    html! {
        @for (i, cp) in tries.iter().enumerate() {
            @if i > 0 { br; }
            span.attempt data-attempt=(cp.attempt) {
                "#" (cp.attempt) " " (cp.status.as_str())
                @if let Some(code) = cp.output.as_ref().and_then(|o| o.get("exit_code")).and_then(|c| c.as_i64()) {
                    " (exit " (code) ")"
                }
            }
        }
    }
}

/// The task's harness contracts and evidence bundles.
async fn task_records(state: &AppState, id: &TaskId) -> Markup {
    use rein_core::store::{RecordFilter, RecordKind};
    let filter = |kind| RecordFilter {
        task_id: Some(id.to_string()),
        limit: Some(100),
        ..RecordFilter::new(kind)
    };
    let records = state.engine.records();
    let contracts = records
        .contracts(&filter(RecordKind::Contract))
        .await
        .map(|p| p.items)
        .unwrap_or_default();
    let evidence = records
        .evidence_bundles(&filter(RecordKind::Evidence))
        .await
        .map(|p| p.items)
        .unwrap_or_default();
    if contracts.is_empty() && evidence.is_empty() {
        return html! {};
    }
    html! {
        h2 { "Contracts and evidence" }
        @for c in &contracts {
            article.contract data-contract=(c.id) {
                header {
                    span.badge { (c.status.as_str()) } " " strong { (c.goal) }
                    @if let Some(risk) = c.risk { " " span class={"badge r-" (risk.as_str())} { "risk " (risk.as_str()) } }
                }
                p.meta {
                    small.id { (c.id) }
                    @if let Some(step) = &c.step_id { " · step " (step) }
                    @if !c.write_set.is_empty() { " · writes " (rein_protocol::Resource::names(&c.write_set)) }
                }
                @if !c.success_criteria.is_empty() {
                    ul { @for s in &c.success_criteria { li { (s) } } }
                }
            }
        }
        @for e in &evidence {
            @let passed = e.checks.iter().filter(|k| k.status == rein_protocol::CheckStatus::Passed).count();
            article.evidence data-evidence=(e.id) {
                header { strong { "Evidence" } " " (e.summary) }
                p.meta {
                    small.id { (e.id) }
                    @if let Some(step) = &e.step_id { " · step " (step) }
                    " · " (e.items.len()) " item(s) · checks " (passed) "/" (e.checks.len()) " passed · " (e.reviews.len()) " review(s)"
                    @if let Some(c) = e.confidence { " · confidence " (format!("{c:.2}")) }
                }
                @if !e.checks.is_empty() {
                    ul {
                        @for k in &e.checks {
                            li { (k.name) ": " (k.status.as_str()) @if let Some(d) = &k.detail { " — " (d) } }
                        }
                    }
                }
            }
        }
    }
}

async fn task_fragment(state: &AppState, user: &User, id: &TaskId) -> Markup {
    let task = match state.engine.get(id).await {
        Ok(task) => task,
        Err(e) => return html! { p.error role="alert" { (e.to_string()) } },
    };
    let plan = state.engine.plan(id).await.ok();
    let head = &task.head;
    let agent = agent_activity(state, &task, plan.as_ref()).await;
    let records = task_records(state, id).await;
    let usage = super::usage::task_usage(state, id).await;
    let snapshots = state
        .engine
        .store()
        .list_snapshots(id)
        .await
        .unwrap_or_default();
    let forks = state
        .engine
        .list(&TaskFilter {
            forked_from: Some(id.clone()),
            limit: Some(500),
            ..TaskFilter::default()
        })
        .await
        .map(|page| page.items)
        .unwrap_or_default();
    html! {
        h1 { (head.description) }
        p.meta {
            (status_badge(head.status)) " "
            small.id { (head.id) } " · session " (head.session_id)
            " · " a.history href={"/ui/tasks/" (id) "/history"} { "history" }
        }
        @if let Some(from) = &head.forked_from {
            p.forked-from {
                "Forked from " a href={"/ui/tasks/" (from.task_id)} { (from.task_id) }
                " at " a href={"/ui/tasks/" (from.task_id) "/history"} { "event " (from.seq) }
                @if let Some(turn) = from.turn { ", after turn " (turn) }
            }
        }
        @if !forks.is_empty() {
            p.forks {
                "Forks: "
                @for (i, fork) in forks.iter().enumerate() {
                    @if i > 0 { ", " }
                    a href={"/ui/tasks/" (fork.id)} data-fork=(fork.id) { (fork.id) }
                    " (" (fork.status.as_str())
                    @if let Some(from) = &fork.forked_from { ", from event " (from.seq) }
                    ")"
                }
            }
        }
        @if let Some(error) = &head.error {
            p.error { (error) }
        }
        @if user.can_change() && !head.status.is_terminal() {
            div.controls {
                @for (action, label, class) in controls(head) {
                    button class=[class] hx-post={"/ui/tasks/" (id) "/control"} hx-vals=(serde_json::json!({ "action": action }).to_string()) hx-target="#control-result" { (label) }
                }
                span #control-result aria-live="polite" {}
            }
        }
        h2 { "Plan" }
        @if let Some(plan) = &plan {
            @if plan.steps.is_empty() {
                p.empty { "The goal is made into steps at CP2, when the task runs." }
            } @else {
                (super::graph::plan_graph(&plan.steps, |step| step_state(&task, step).0))
            }
        }
        h2 { "Steps" }
        @if let Some(plan) = &plan {
            table.steps {
                thead { tr { th { "Step" } th { "State" } th { "Attempt" } th { "Took" } th { "Model usage" } th { "Needs" } th { "Output" } } }
                tbody {
                    @for step in &plan.steps {
                        @let (st, cp) = step_state(&task, &step.id);
                        tr id={"step-" (step.id)} data-step=(step.id) data-state=(st) {
                            td { strong { (step.id) } br; small { (step.description) } }
                            td { span class={"badge c-" (st)} { (st) } }
                            td { (attempts(&task, &step.id)) }
                            td {
                                @match cp {
                                    // A running step counts up from its start (the page's script).
                                    Some(c) if c.status == rein_protocol::CheckpointStatus::InProgress => {
                                        time.elapsed datetime=(c.started_at.to_rfc3339()) { "running" }
                                    }
                                    Some(c) => (c.duration_ms.map(rein_core::history::human_duration).unwrap_or_default()),
                                    None => "",
                                }
                            }
                            td.usage { (cp.and_then(|c| c.output.as_ref()).and_then(super::usage::step_usage).unwrap_or_default()) }
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
        @if !agent.is_empty() {
            h2 { "Agent activity" }
            @for (step, work) in &agent {
                section.agent data-agent-step=(step) {
                    h3 { (step) }
                    @if !work.turns.is_empty() {
                        ol.turns {
                            @for turn in &work.turns {
                                li data-role=(turn.role) {
                                    span.badge { (turn.role) } " "
                                    @if !turn.text.is_empty() { (turn.text) } @else if turn.role == "tool" { span.none { "(no output)" } }
                                    @for call in &turn.calls { br; code { "→ " (call) } }
                                }
                            }
                        }
                    }
                    @if !work.updates.is_empty() {
                        ol.updates {
                            @for line in &work.updates { li { (line) } }
                        }
                    }
                }
            }
        }
        (usage)
        (records)
        h2 { "Snapshots" }
        @if snapshots.is_empty() {
            p.empty { "None taken." }
        } @else {
            ul.snapshots {
                @for snap in snapshots.iter().rev() {
                    li data-snapshot=(snap.id) {
                        code { (snap.id) } " · at log position " (snap.seq) " · " (time(&snap.created_at))
                        @if user.can_change() {
                            " " button hx-post={"/ui/snapshots/" (snap.id) "/restore"} hx-target="#control-result-restore" hx-confirm="Restore this snapshot as a new task?" { "Restore as a new task" }
                        }
                    }
                }
            }
            span #control-result-restore aria-live="polite" {}
        }
        h2 { "Checkpoints" }
        ol.timeline {
            @for cp in &task.checkpoints {
                li {
                    span class={"badge c-" (cp.status.as_str())} { (cp.status.as_str()) } " "
                    strong { (cp.kind.as_str()) }
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
    let id = match parse_id::<TaskId>(&id) {
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
        // The task's part of the page fetches itself again at once: a
        // snapshot moves nothing the live stream hears.
        Ok(message) => (
            [("hx-trigger", "rein:changed")],
            html! { span.ok { (message) } },
        )
            .into_response(),
        Err(e) => engine_refusal(e),
    }
}
