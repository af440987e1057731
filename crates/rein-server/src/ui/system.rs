//! The Control UI's pages about the server itself: the governance ledger
//! (its entries, and a verification of its hash chain), health with the
//! counters and a chart of the last half hour, and the agent harnesses with
//! which runtime serves a model route.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use rein_core::history::counted;
use rein_protocol::{LedgerHead, WorkspaceKind};
use serde::Deserialize;

use super::{PageQuery, User, live, page, time};
use crate::AppState;
use crate::activity::{BUCKET_SECS, Bucket};

/// Entries per ledger page.
const LEDGER_PAGE: usize = 100;

#[derive(Debug, Default, Deserialize)]
pub struct LedgerQuery {
    #[serde(default)]
    after: Option<u64>,
}

pub async fn ledger(
    State(state): State<AppState>,
    user: User,
    PageQuery(query): PageQuery<LedgerQuery>,
) -> Response {
    let after = query.after.unwrap_or(0);
    let entries = live(
        "ledger",
        &format!("/ui/ledger/entries?after={after}"),
        ledger_fragment(&state, after).await,
    );
    page(
        &user,
        "Ledger",
        html! {
            h1 { "Governance ledger" }
            p.hint { "Every decision on an approval, hash-chained: each entry's hash covers its content and the entry before it." }
            div.controls {
                form hx-get="/ui/ledger/verify" hx-target="#verify-result" {
                    label { "Against a head recorded earlier (optional) "
                        input type="text" name="head" placeholder="SEQ:HASH" size="30";
                    }
                    button type="submit" { "Verify the chain" }
                }
            }
            div #verify-result aria-live="polite" {}
            (entries)
        },
    )
    .into_response()
}

pub async fn ledger_entries(
    State(state): State<AppState>,
    _user: User,
    PageQuery(query): PageQuery<LedgerQuery>,
) -> Response {
    ledger_fragment(&state, query.after.unwrap_or(0))
        .await
        .into_response()
}

async fn ledger_fragment(state: &AppState, after: u64) -> Markup {
    let entries = match state.engine.store().ledger(after, LEDGER_PAGE).await {
        Ok(entries) => entries,
        Err(e) => return html! { p.error role="alert" { (e.to_string()) } },
    };
    html! {
        @if entries.is_empty() {
            p.empty { @if after == 0 { "No decisions recorded yet." } @else { "No entries after " (after) "." } }
        } @else {
            table.ledger {
                thead { tr { th { "#" } th { "Decision" } th { "By" } th { "At" } th { "Scope" } th { "Hash" } } }
                tbody {
                    @for e in &entries {
                        tr data-seq=(e.seq) {
                            td { (e.seq) }
                            td {
                                span class={"badge l-" (e.kind.as_str())} { (e.kind.as_str()) }
                                @if let Some(o) = &e.selected_option { " " (o) }
                                @if let Some(r) = &e.reason { br; small { (r) } }
                            }
                            td { (e.who) }
                            td { (time(&e.at)) }
                            td {
                                @if let Some(t) = &e.task_id { a href={"/ui/tasks/" (t)} { (e.scope) } } @else { (e.scope) }
                            }
                            td { code.hash title=(e.hash) { (e.hash.get(..12).unwrap_or(&e.hash)) "…" } }
                        }
                    }
                }
            }
        }
        nav.pager aria-label="pages" {
            @if after > 0 {
                a href="/ui/ledger" { "First entries" }
            }
            @if entries.len() == LEDGER_PAGE {
                @if let Some(last) = entries.last() {
                    a rel="next" href={"/ui/ledger?after=" (last.seq)} { "Next entries" }
                }
            }
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct VerifyForm {
    #[serde(default)]
    head: Option<String>,
}

/// The chain checked (against a head, when one is given): intact or each
/// problem, and the head to record now. A read: any signed-in user may.
pub async fn verify(
    State(state): State<AppState>,
    _user: User,
    PageQuery(form): PageQuery<VerifyForm>,
) -> Response {
    let head = match form
        .head
        .as_deref()
        .map(str::trim)
        .filter(|h| !h.is_empty())
    {
        Some(text) => match LedgerHead::parse(text) {
            Ok(head) => Some(head),
            Err(e) => return super::refusal(axum::http::StatusCode::BAD_REQUEST, &e),
        },
        None => None,
    };
    let check = match state.engine.ledger_check(head).await {
        Ok(check) => check,
        Err(e) => return super::engine_refusal(e),
    };
    html! {
        div.verdict.ok[check.intact] .bad[!check.intact] data-intact=(check.intact) role="status" {
            @if check.intact {
                strong { "Intact" } ": " (counted(check.entries as u64, "entry", "entries")) ", each following the one before it"
                @if let Some(against) = &check.against { ", and the head " (against.seq) " recorded earlier is still in it" }
                "."
            } @else {
                strong { "Broken" } ": " (counted(check.problems.len() as u64, "problem", "problems")) " in " (counted(check.entries as u64, "entry", "entries")) "."
                ul { @for p in &check.problems { li { (p) } } }
            }
            @if let Some(head) = &check.head {
                p { "Head now: " code.head { (head.seq) ":" (head.hash) } " — record it, and verify against it later to catch newest entries removed." }
            }
        }
    }
    .into_response()
}

/// How often the health page probes again. Not on every change, as other
/// live parts: a probe runs a sandboxed command, verifies the whole ledger
/// and aggregates every counter.
const HEALTH_EVERY: &str = "every 5s";

pub async fn health(State(state): State<AppState>, user: User) -> Response {
    let body = html! {
        div #health hx-get="/ui/health/body" hx-trigger=(HEALTH_EVERY) hx-swap="innerHTML" hx-sync="this:replace" {
            (health_fragment(&state).await)
        }
    };
    page(
        &user,
        "Health",
        html! {
            h1 { "Health and metrics" }
            (body)
        },
    )
    .into_response()
}

pub async fn health_body(State(state): State<AppState>, _user: User) -> Response {
    health_fragment(&state).await.into_response()
}

async fn health_fragment(state: &AppState) -> Markup {
    let report = crate::health::check_with(&state.engine, &state.alerts).await;
    let window = state.activity.window(chrono::Utc::now());
    html! {
        p.meta { "The server is " span class={"badge h-" (report.status.as_str())} data-health=(report.status.as_str()) { (report.status.as_str()) } }
        table.components {
            thead { tr { th { "Component" } th { "Status" } th { "Detail" } } }
            tbody {
                @for (name, c) in report.components.named() {
                    tr data-component=(name) {
                        td { (name.replace('_', " ")) }
                        td { span class={"badge h-" (c.status.as_str())} { (c.status.as_str()) } }
                        td { (c.detail) }
                    }
                }
            }
        }
        h2 { "The last half hour" }
        (chart(&window, state.activity.missed()))
        @if let Some(m) = &report.metrics {
            h2 { "Counters" }
            dl.counters {
                dt { "Tasks" } dd data-counter="tasks" { (m.tasks.total) " in all: " (m.tasks.completed) " completed, " (m.tasks.failed) " failed, " (m.tasks.in_progress) " running, " (m.tasks.paused) " paused, " (m.tasks.pending) " pending, " (m.tasks.cancelled) " cancelled" }
                dt { "Checkpoints" } dd data-counter="checkpoints" { (m.checkpoints.total) " in all: " (m.checkpoints.passed) " passed, " (m.checkpoints.failed) " failed, " (m.checkpoints.skipped) " skipped" }
                dt { "Recovery" } dd data-counter="recovery" { (m.recovery.attempts) " attempts, " (m.recovery.successes) " succeeded, " (m.recovery.failures) " gave up" }
                dt { "People" } dd data-counter="human_loop" {
                    (counted(m.human_loop.requests, "request", "requests")) ": " (m.human_loop.pending) " waiting, " (m.human_loop.approvals) " approved, " (m.human_loop.denials) " denied, " (m.human_loop.skips) " skipped, " (m.human_loop.expirations) " expired"
                }
            }
            p.hint { "The same counters as " a href="/admin/metrics" { "/admin/metrics" } " (JSON) and " a href="/metrics" { "/metrics" } " (Prometheus)." }
        }
    }
}

/// Checkpoints passed and failed (stacked bars) and decisions (a line) per
/// minute, as an SVG with each minute's numbers in its title.
fn chart(window: &[Bucket], missed: u64) -> Markup {
    const W: i64 = 600;
    const H: i64 = 160;
    const PAD: i64 = 20;
    // The time axis: a label under every fifth minute.
    const EVERY: usize = 5;
    let most = window
        .iter()
        .map(|b| (b.passed + b.failed).max(b.decisions))
        .max()
        .unwrap_or(0)
        .max(1);
    let slot = (W - PAD) as f64 / window.len().max(1) as f64;
    let y = |n: u64| (H - PAD) as f64 - n as f64 / most as f64 * (H - 2 * PAD) as f64;
    let total = |f: fn(&Bucket) -> u64| window.iter().map(f).sum::<u64>();
    let (passed, failed, decided) = (
        total(|b| b.passed),
        total(|b| b.failed),
        total(|b| b.decisions),
    );
    let line: Vec<String> = window
        .iter()
        .enumerate()
        .map(|(i, b)| {
            format!(
                "{:.1},{:.1}",
                PAD as f64 + (i as f64 + 0.5) * slot,
                y(b.decisions)
            )
        })
        .collect();
    let label = format!(
        "In the last {} minutes: {passed} checkpoints passed, {failed} failed, {decided} decisions",
        window.len() as i64 * BUCKET_SECS / 60
    );
    html! {
        figure.chart data-passed=(passed) data-failed=(failed) data-decisions=(decided) {
            svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label=(label) viewBox={"0 0 " (W) " " (H)} {
                line.axis x1=(PAD) y1=(H - PAD) x2=(W) y2=(H - PAD) {}
                text.tick x="0" y=(PAD) { (most) }
                text.tick x="0" y=(H - PAD) { "0" }
                @for (i, b) in window.iter().enumerate() {
                    @let x = PAD as f64 + i as f64 * slot + 1.0;
                    @let at = chrono::DateTime::from_timestamp(b.start, 0).map(|t| t.format("%H:%M").to_string()).unwrap_or_default();
                    g {
                        title { (at) ": " (b.passed) " passed, " (b.failed) " failed, " (b.decisions) " decisions" }
                        rect.passed x=(format!("{x:.1}")) y=(format!("{:.1}", y(b.passed))) width=(format!("{:.1}", slot - 2.0)) height=(format!("{:.1}", y(0) - y(b.passed))) {}
                        rect.failed x=(format!("{x:.1}")) y=(format!("{:.1}", y(b.passed + b.failed))) width=(format!("{:.1}", slot - 2.0)) height=(format!("{:.1}", y(b.passed) - y(b.passed + b.failed))) {}
                    }
                }
                polyline.decisions points=(line.join(" ")) {}
                @for (i, b) in window.iter().enumerate() {
                    @if i % EVERY == 0 || i + 1 == window.len() {
                        @let x = PAD as f64 + (i as f64 + 0.5) * slot;
                        line.axis x1=(format!("{x:.1}")) y1=(H - PAD) x2=(format!("{x:.1}")) y2=(H - PAD + 4) {}
                        // The last label ends at the edge rather than past it.
                        @let anchor = if i + 1 == window.len() { "end" } else { "middle" };
                        @let at = if i + 1 == window.len() { W as f64 } else { x };
                        text.tick.time x=(format!("{at:.1}")) y=(H - 2) text-anchor=(anchor) {
                            (chrono::DateTime::from_timestamp(b.start, 0).map(|t| t.format("%H:%M").to_string()).unwrap_or_default())
                        }
                    }
                }
            }
            figcaption {
                span.key.passed { "■" } " checkpoints passed (" (passed) ") "
                span.key.failed { "■" } " failed (" (failed) ") "
                span.key.decisions { "—" } " decisions (" (decided) "), per minute (times in UTC); what this server ran since it started"
                @if missed > 0 { " (" (missed) " events were too many to count)" }
            }
        }
    }
}

pub async fn harnesses(State(state): State<AppState>, user: User) -> Response {
    let rows = state.harnesses.list();
    page(
        &user,
        "Harnesses",
        html! {
            h1 { "Agent harnesses" }
            p.hint { "The runtimes agent steps, goals and completions can run on, and where each one's agents work." }
            table.harnesses {
                thead { tr { th { "Harness" } th { "From" } th { "Speaks" } th { "Workspace" } th { "Chosen by auto for" } } }
                tbody {
                    @for h in &rows {
                        tr data-harness=(h.id) {
                            td { strong { (h.id) } br; small { (h.label) } }
                            td { @if let Some(p) = &h.plugin { "plugin " (p) } @else { "built in" } }
                            td { (h.protocol) }
                            td { (workspace(h.workspace_environment.as_ref())) }
                            td {
                                @match &h.auto_selection_provider_ids {
                                    Some(ids) if ids.is_empty() => "no provider",
                                    Some(ids) => (ids.join(", ")),
                                    None => "every provider it supports",
                                }
                            }
                        }
                    }
                }
            }
            h2 { "Which runtime serves a route" }
            form.explain hx-get="/ui/harnesses/explain" hx-target="#explain-result" {
                label { "Provider " input type="text" name="provider" required placeholder="openai"; }
                label { "Model " input type="text" name="model" placeholder="any"; }
                label { "Runtime " input type="text" name="runtime" placeholder="auto"; }
                button type="submit" { "Explain" }
            }
            div #explain-result aria-live="polite" {}
        },
    )
    .into_response()
}

fn workspace(env: Option<&rein_protocol::WorkspaceEnvironment>) -> Markup {
    html! {
        @match env {
            Some(env) => {
                span class={"badge k-" (env.kind.as_str())} data-workspace=(env.kind.as_str()) {
                    (match env.kind { WorkspaceKind::ProviderHosted => "provider-hosted", WorkspaceKind::Local => "local folder" })
                }
                " " small { (env.label) }
            },
            None => span.none { "not said" },
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct ExplainForm {
    provider: String,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    runtime: Option<String>,
}

/// The selection decision for a route, as `rein harness explain` gives it.
pub async fn explain(
    State(state): State<AppState>,
    _user: User,
    PageQuery(form): PageQuery<ExplainForm>,
) -> Response {
    let provider = form.provider.trim().to_owned();
    if provider.is_empty() {
        return super::refusal(axum::http::StatusCode::BAD_REQUEST, "Name a provider.");
    }
    let decided = state
        .harnesses
        .explain(
            provider,
            super::filled(form.model),
            super::filled(form.runtime),
        )
        .await;
    match decided {
        Ok(d) => html! {
            div.verdict.ok role="status" data-selected=(d.selected) {
                strong { (d.selected) } " serves "
                (d.provider) @if let Some(m) = &d.model { "/" (m) }
                " (" (d.reason.as_str().replace('_', " ")) "; runtime `" (d.policy.runtime) "` from the " (d.policy.source.as_str()) " setting). "
                "Workspace: " (workspace(d.workspace_environment.as_ref()))
                @if !d.candidates.is_empty() {
                    ul {
                        @for c in &d.candidates {
                            li {
                                strong { (c.id) } " " (if c.supported { "supported" } else { "unsupported" })
                                @if let Some(p) = c.priority { ", priority " (p) }
                                @if let Some(r) = &c.reason { ": " (r) }
                            }
                        }
                    }
                }
            }
        }
        .into_response(),
        Err(e) => super::refusal(axum::http::StatusCode::CONFLICT, &e.to_string()),
    }
}
