//! A task's history as a timeline (`/ui/tasks/{id}/history`): every point
//! `GET /admin/tasks/{id}/history` lists, newest last, narrowed to one kind
//! by a link, each opening onto the task's state as of that point (the fold
//! of its log up to there, `/ui/tasks/{id}/history/{seq}`, fetched when
//! opened). The list is live while the task is unfinished; a refresh then
//! closes a point that was open. An operator forks the task from a point
//! ("Fork from here", `POST /ui/tasks/{id}/fork`): the fork runs in the
//! server and the browser goes to it.

use axum::Form;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use rein_protocol::{History, HistoryKind, TaskId, TaskState};
use serde::Deserialize;

use super::{PageQuery, Refusal, User, changer, engine_refusal, live, opt_time, page, parse_id};
use crate::AppState;
use crate::auth::Role;

/// The kinds a person narrows the timeline to, in the order offered.
const KINDS: [HistoryKind; 9] = [
    HistoryKind::TaskCreated,
    HistoryKind::TaskStarted,
    HistoryKind::TaskPaused,
    HistoryKind::TaskEnded,
    HistoryKind::Checkpoint,
    HistoryKind::StepStarted,
    HistoryKind::StepFinished,
    HistoryKind::ApprovalDecided,
    HistoryKind::AgentTurn,
];

#[derive(Debug, Default, Deserialize)]
pub struct KindQuery {
    #[serde(default)]
    kind: Option<String>,
}

/// The kind `?kind=` names, or a refusal naming the kinds there are.
fn kind_of(query: &KindQuery) -> Result<Option<HistoryKind>, Refusal> {
    match query.kind.as_deref().filter(|k| !k.is_empty()) {
        None => Ok(None),
        Some(named) => KINDS
            .into_iter()
            .find(|k| k.as_str() == named)
            .map(Some)
            .ok_or_else(|| {
                let known: Vec<&str> = KINDS.iter().map(|k| k.as_str()).collect();
                Refusal(
                    axum::http::StatusCode::BAD_REQUEST,
                    format!(
                        "no points are of kind `{named}`; the kinds are {}",
                        known.join(", ")
                    ),
                )
            }),
    }
}

/// The task and the kind a request names, and the task's history; else the
/// answer that refuses the request.
async fn asked(
    state: &AppState,
    id: &str,
    query: &KindQuery,
) -> Result<(TaskId, Option<HistoryKind>, History), Response> {
    let named = parse_id::<TaskId>(id).and_then(|id| Ok((id, kind_of(query)?)));
    let (id, kind) = named.map_err(IntoResponse::into_response)?;
    let history = state.engine.history(&id).await.map_err(engine_refusal)?;
    Ok((id, kind, history))
}

pub async fn history(
    State(state): State<AppState>,
    user: User,
    Path(id): Path<String>,
    PageQuery(query): PageQuery<KindQuery>,
) -> Response {
    let (id, kind, history) = match asked(&state, &id, &query).await {
        Ok(asked) => asked,
        Err(refused) => return refused,
    };
    let rows = timeline(&user, &id, &history, kind);
    // A finished task's history no longer moves: nothing to fetch again.
    let rows = if history.status.is_terminal() {
        html! { div #history { (rows) } }
    } else {
        let source = match kind {
            Some(k) => format!("/ui/tasks/{id}/history/body?kind={}", k.as_str()),
            None => format!("/ui/tasks/{id}/history/body"),
        };
        live("history", &source, rows)
    };
    let body = html! {
        h1 { "History of " a href={"/ui/tasks/" (id)} { (id) } }
        nav.kinds aria-label="kinds" {
            a href={"/ui/tasks/" (id) "/history"} aria-current=[kind.is_none().then_some("page")] { "all" }
            @for k in KINDS {
                " " a href={"/ui/tasks/" (id) "/history?kind=" (k.as_str())}
                    aria-current=[(kind == Some(k)).then_some("page")] { (k.as_str().replace('_', " ")) }
            }
        }
        (rows)
    };
    page(&user, &format!("History of {id}"), body).into_response()
}

pub async fn history_body(
    State(state): State<AppState>,
    user: User,
    Path(id): Path<String>,
    PageQuery(query): PageQuery<KindQuery>,
) -> Response {
    match asked(&state, &id, &query).await {
        Ok((id, kind, history)) => timeline(&user, &id, &history, kind).into_response(),
        Err(refused) => refused,
    }
}

/// The points, oldest first: each a row that opens onto the state there,
/// and (for an operator) forks the task from there.
fn timeline(user: &User, id: &TaskId, history: &History, kind: Option<HistoryKind>) -> Markup {
    let points: Vec<_> = history
        .points
        .iter()
        .filter(|p| kind.is_none_or(|k| p.kind == k))
        .collect();
    html! {
        p.meta { (history.status.as_str()) " · " (history.points.len()) " points · log at event " (history.last_seq) }
        @if points.is_empty() {
            p { "No points of this kind." }
        }
        ol.timeline {
            @for p in points {
                li data-seq=(p.seq) data-kind=(p.kind.as_str()) {
                    details {
                        summary {
                            span.seq { "#" (p.seq) } " "
                            (opt_time(p.at.as_ref())) " "
                            span class={"badge k-" (p.kind.as_str())} { (p.kind.as_str().replace('_', " ")) } " "
                            (p.description)
                        }
                        div hx-get={"/ui/tasks/" (id) "/history/" (p.seq)} hx-trigger="toggle from:closest details once" hx-swap="innerHTML" {
                            small { "the state as of event " (p.seq) "…" }
                        }
                        // Nothing runs on from the task's end.
                        @if user.can_change() && p.kind != HistoryKind::TaskEnded {
                            @let vals = match p.turn {
                                Some(turn) => serde_json::json!({ "at": p.seq, "turn": turn }),
                                None => serde_json::json!({ "at": p.seq }),
                            };
                            @let target = format!("fork-{}-{}", p.seq, p.turn.unwrap_or(0));
                            button.fork hx-post={"/ui/tasks/" (id) "/fork"} hx-vals=(vals.to_string())
                                hx-target={"#" (target)}
                                hx-confirm="Fork the task from here: a new task with its state and workspace as they were, which then runs?" {
                                "Fork from here"
                            }
                            " " span id=(target) {}
                        }
                    }
                }
            }
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct ForkForm {
    at: u64,
    #[serde(default)]
    turn: Option<u32>,
}

/// Forks the task as of event `at` (after `turn` turns of the agent step
/// started there), as the signed-in operator, and runs the fork here; the
/// browser goes to it.
pub async fn fork(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ForkForm>,
) -> Response {
    if let Err(refused) = changer(&state, &headers, Role::Operator) {
        return refused.into_response();
    }
    let id = match parse_id::<TaskId>(&id) {
        Ok(id) => id,
        Err(refused) => return refused.into_response(),
    };
    let fork = rein_core::fork::Fork {
        point: rein_core::fork::ForkPoint::At {
            seq: form.at,
            turn: form.turn,
        },
        workspace: None,
        set: Default::default(),
        confined_to: Some(state.workspace_roots.to_vec()),
    };
    match state.engine.fork(&id, fork).await {
        Ok(task) => {
            let _ = state.start(task.id().clone(), rein_core::RunOptions::default());
            super::pages::started(task.id())
        }
        Err(e) => engine_refusal(e),
    }
}

/// The task's state as of event `seq`: the fold of its log up to there.
pub async fn point(
    State(state): State<AppState>,
    _user: User,
    Path((id, seq)): Path<(String, u64)>,
) -> Response {
    let id = match parse_id::<TaskId>(&id) {
        Ok(id) => id,
        Err(refused) => return refused.into_response(),
    };
    match state.engine.state_at(&id, seq).await {
        Ok(at) => as_of(&at).into_response(),
        Err(e) => engine_refusal(e),
    }
}

fn as_of(task: &TaskState) -> Markup {
    let context = &task.head.context;
    html! {
        dl.as-of data-status=(task.status().as_str()) {
            dt { "status" } dd { (task.status().as_str()) }
            dt { "completed" } dd { (context.completed_steps.join(", ")) }
            dt { "pending" } dd { (context.pending_steps.iter().map(String::as_str).collect::<Vec<_>>().join(", ")) }
            @if let Some(why) = &context.blocked_reason { dt { "blocked" } dd { (why) } }
            @if let Some(error) = &task.head.error { dt { "error" } dd { (error) } }
        }
        table.checkpoints {
            thead { tr { th { "step" } th { "checkpoint" } th { "attempt" } th { "status" } } }
            tbody {
                @for cp in &task.checkpoints {
                    tr data-checkpoint=(cp.id) {
                        td { (cp.step_id.as_deref().unwrap_or("—")) }
                        td { (cp.kind.as_str()) }
                        td { (cp.attempt) }
                        td { (cp.status.as_str()) }
                    }
                }
            }
        }
    }
}
