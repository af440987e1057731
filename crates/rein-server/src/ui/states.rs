//! Shared harness states in the Control UI: the list, and one state with its
//! participants, its actions with what each read and wrote, and its
//! conflicts, the most severe first; an operator runs detection from the page.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use rein_core::store::SharedStateFilter;
use rein_protocol::{Conflict, Resource, SharedHarnessState};
use serde::Deserialize;

use super::{PageQuery, User, changer, live, opt_time, page};
use crate::AppState;
use crate::auth::Role;

#[derive(Debug, Default, Deserialize)]
pub struct StatesQuery {
    #[serde(default)]
    cursor: Option<String>,
}

pub async fn states(
    State(state): State<AppState>,
    user: User,
    PageQuery(query): PageQuery<StatesQuery>,
) -> Response {
    let source = match &query.cursor {
        Some(c) => format!("/ui/states/list?cursor={}", rein_protocol::api::escape(c)),
        None => "/ui/states/list".to_owned(),
    };
    let list = live("states", &source, states_fragment(&state, &query).await);
    page(
        &user,
        "Shared states",
        html! {
            h1 { "Shared states" }
            p.hint { "What agents working together read, wrote and assumed, and where that collides." }
            (list)
        },
    )
    .into_response()
}

pub async fn states_list(
    State(state): State<AppState>,
    _user: User,
    PageQuery(query): PageQuery<StatesQuery>,
) -> Response {
    states_fragment(&state, &query).await.into_response()
}

async fn states_fragment(state: &AppState, query: &StatesQuery) -> Markup {
    let filter = SharedStateFilter {
        limit: Some(50),
        cursor: query.cursor.clone().filter(|c| !c.is_empty()),
        ..SharedStateFilter::default()
    };
    let listed = match state.engine.shared_states(&filter).await {
        Ok(page) => page,
        Err(e) => return html! { p.error role="alert" { (e.to_string()) } },
    };
    html! {
        @if listed.items.is_empty() {
            p.empty { "No shared states yet. A plan with `shared_state = \"…\"` records itself into one; `rein state create` makes one." }
        } @else {
            table.states {
                thead { tr { th { "State" } th { "Status" } th { "Participants" } th { "Actions" } th { "Open conflicts" } th { "Updated" } } }
                tbody {
                    @for s in &listed.items {
                        @let open = s.conflicts.iter().filter(|c| c.status == rein_protocol::ConflictStatus::Open).count();
                        tr data-state-id=(s.id) {
                            td { a href={"/ui/states/" (rein_protocol::api::escape(&s.id))} { (if s.goal.is_empty() { &s.id } else { &s.goal }) } br; small.id { (s.id) } }
                            td { span class={"badge w-" (s.status.as_str())} { (s.status.as_str()) } }
                            td { (s.participants.len()) }
                            td { (s.actions.len()) }
                            td { @if open > 0 { span.badge.r-high { (open) } } @else { "0" } }
                            td { (opt_time(s.updated_at.as_ref())) }
                        }
                    }
                }
            }
        }
        @if let Some(next) = &listed.next_cursor {
            nav.pager aria-label="pages" {
                a rel="next" href={"/ui/states?cursor=" (rein_protocol::api::escape(next))} { "Next page" }
            }
        }
    }
}

pub async fn shared_state(
    State(state): State<AppState>,
    user: User,
    Path(id): Path<String>,
) -> Response {
    let escaped = rein_protocol::api::escape(&id);
    let body = live(
        "state",
        &format!("/ui/states/{escaped}/body"),
        state_fragment(&state, &id).await,
    );
    // Outside the live part: a detection's answer stays while the state
    // refreshes (detection writes an audit record, which the stream hears).
    let controls = html! {
        @if user.can_change() {
            div.controls {
                button hx-post={"/ui/states/" (escaped) "/detect"} hx-target="#detect-result" { "Detect conflicts" }
                span #detect-result aria-live="polite" {}
            }
        }
    };
    page(
        &user,
        &format!("Shared state {id}"),
        html! { (controls) (body) },
    )
    .into_response()
}

pub async fn state_body(
    State(state): State<AppState>,
    _user: User,
    Path(id): Path<String>,
) -> Response {
    state_fragment(&state, &id).await.into_response()
}

/// Runs conflict detection as the signed-in operator: how many conflicts
/// it found (the state's part of the page shows them once it refreshes).
pub async fn detect(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let who = match changer(&state, &headers, Role::Operator) {
        Ok(who) => who,
        Err(refused) => return refused.into_response(),
    };
    match state.engine.detect_conflicts(&id, &who.name).await {
        Ok((_, found)) => {
            let said = match found.len() {
                0 => "Detection ran: no conflicts.".to_owned(),
                1 => "Detection ran: 1 conflict.".to_owned(),
                n => format!("Detection ran: {n} conflicts."),
            };
            html! { span.note role="status" { (said) } }.into_response()
        }
        Err(e) => super::engine_refusal(e),
    }
}

fn resources(rs: &[Resource]) -> Markup {
    html! {
        @if rs.is_empty() { span.none { "—" } }
        @for r in rs {
            code title=(r.kind) { (r.name()) } " "
        }
    }
}

async fn state_fragment(state: &AppState, id: &str) -> Markup {
    let s: SharedHarnessState = match state.engine.shared_state(id).await {
        Ok(s) => s,
        Err(e) => return html! { p.error role="alert" { (e.to_string()) } },
    };
    let mut conflicts: Vec<&Conflict> = s.conflicts.iter().collect();
    // The most severe first; open before settled.
    conflicts.sort_by_key(|c| {
        (
            c.status != rein_protocol::ConflictStatus::Open,
            std::cmp::Reverse(c.severity),
        )
    });
    html! {
        h1 { (if s.goal.is_empty() { &s.id } else { &s.goal }) }
        p.meta {
            span class={"badge w-" (s.status.as_str())} { (s.status.as_str()) } " "
            small.id { (s.id) }
            @if let Some(session) = &s.session_id { " · session " (session) }
            @if !s.tags.is_empty() { " · tags " (s.tags.join(", ")) }
        }
        h2 { "Conflicts (" (conflicts.len()) ")" }
        @if conflicts.is_empty() {
            p.empty { "None recorded. Detection looks for write/write, read/write, assumption and missing-verifier conflicts." }
        }
        @for c in &conflicts {
            article class={"conflict r-" (c.severity.as_str())} data-conflict=(c.id) data-severity=(c.severity.as_str()) {
                header {
                    span class={"badge r-" (c.severity.as_str())} { (c.severity.as_str()) } " "
                    strong { (c.conflict_type.as_str().replace('_', "/")) } " "
                    span.badge { (c.status.as_str()) } " "
                    small { "policy " (c.policy.as_str()) }
                }
                p { (c.summary) }
                p.meta {
                    "actions " (c.actions.join(", "))
                    @if !c.participants.is_empty() { " · participants " (c.participants.join(", ")) }
                    @if !c.resources.is_empty() { " · on " (Resource::names(&c.resources)) }
                }
                @if !c.recommendation.is_empty() { p.hint { (c.recommendation) } }
            }
        }
        h2 { "Participants (" (s.participants.len()) ")" }
        @if s.participants.is_empty() { p.empty { "Nobody has joined yet." } } @else {
            table {
                thead { tr { th { "Participant" } th { "Role" } th { "Status" } th { "Session" } } }
                tbody {
                    @for p in &s.participants {
                        tr data-participant=(p.id) {
                            td { strong { (p.display_name.as_deref().unwrap_or(&p.id)) } br; small.id { (p.id) } }
                            td { (p.role.as_str()) }
                            td { span class={"badge w-" (p.status.as_str())} { (p.status.as_str()) } }
                            td { (p.session_id.as_deref().unwrap_or("")) }
                        }
                    }
                }
            }
        }
        h2 { "Actions (" (s.actions.len()) ")" }
        @if s.actions.is_empty() { p.empty { "No actions recorded." } } @else {
            table.actions {
                thead { tr { th { "Action" } th { "By" } th { "Status" } th { "Reads" } th { "Writes" } } }
                tbody {
                    @for a in &s.actions {
                        tr data-action=(a.id) {
                            td { strong { (a.title) } br; small.id { (a.id) } }
                            td { (a.participant_id.as_deref().unwrap_or("")) }
                            td { span class={"badge w-" (a.status.as_str())} { (a.status.as_str()) } }
                            td { (resources(&a.read_set)) }
                            td { (resources(&a.write_set)) }
                        }
                    }
                }
            }
        }
    }
}
