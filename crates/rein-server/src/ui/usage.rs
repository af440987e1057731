//! The Control UI's model usage: a page with a chart per day and model and
//! the report's tables (`/ui/usage`), and the tables a task's page shows.
//! The numbers are `GET /admin/usage`'s, costed at the server's prices.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use rein_core::store::{UsageFilter, UsageGroup};
use rein_protocol::usage::thousands;
use rein_protocol::{UsageLine, UsageReport};
use serde::Deserialize;

use super::{PageQuery, User, page};
use crate::AppState;

/// The days the page shows unless asked.
const DAYS: i64 = 14;
/// Models drawn in colours of their own; the rest share the last.
const COLOURS: usize = 6;

#[derive(Debug, Default, Deserialize)]
pub struct UsageQuery {
    #[serde(default)]
    days: Option<i64>,
}

/// What a line cost, or that it cannot be said.
fn cost(line: &UsageLine) -> String {
    match line.cost_usd {
        Some(d) if d >= 1.0 => format!("${d:.2}"),
        Some(d) => format!("${d:.4}"),
        None => "unpriced".to_owned(),
    }
}

/// A line's tokens, `~` marking an estimate.
fn tokens(line: &UsageLine) -> String {
    format!(
        "{}{} in ({} cached) / {} out",
        if line.estimated { "~" } else { "" },
        thousands(line.input_tokens),
        thousands(line.cached_input_tokens),
        thousands(line.output_tokens)
    )
}

/// A report as a table: a row per key and the total.
pub fn report_table(report: &UsageReport, heading: &str) -> Markup {
    html! {
        table.usage {
            thead { tr { th { (heading) } th { "Calls" } th { "Tokens" } th { "Cost" } } }
            tbody {
                @for row in report.rows.iter().flatten() {
                    tr data-usage-row=(row.key.as_deref().unwrap_or_default()) {
                        td { (row.key.as_deref().unwrap_or_default()) }
                        td { (row.calls) }
                        td { (tokens(row)) }
                        td { (cost(row)) }
                    }
                }
                tr.total data-usage-total=(report.total.calls) {
                    td { strong { "All" } }
                    td { (report.total.calls) }
                    td { (tokens(&report.total)) }
                    td { (cost(&report.total)) }
                }
            }
        }
        @if !report.total.unpriced.is_empty() {
            p.hint { "No price in the server's rein.toml for " (report.total.unpriced.join(", ")) ": their calls are unpriced, never counted as free." }
        }
    }
}

/// A task's model usage, by model, for its page.
pub async fn task_usage(state: &AppState, task: &rein_protocol::TaskId) -> Markup {
    let found = state
        .engine
        .store()
        .usage(&UsageFilter {
            task_id: Some(task.clone()),
            ..Default::default()
        })
        .await;
    match found {
        Ok(found) if found.is_empty() => html! {},
        Ok(found) => {
            let report = rein_core::store::usage_report(&found, Some("model"), &state.models);
            html! {
                h2 { "Model usage" }
                (report_table(&report, "Model"))
            }
        }
        Err(e) => html! { p.error role="alert" { "Model usage: " (e.to_string()) } },
    }
}

/// A step's usage from its output, in a line.
pub fn step_usage(output: &serde_json::Value) -> Option<String> {
    let usage = output.get("usage")?;
    let n = |k: &str| usage[k].as_u64().unwrap_or(0);
    let estimated = usage["estimated"].as_bool().unwrap_or(false);
    let money = match usage["cost_usd"].as_f64() {
        Some(d) if d >= 1.0 => format!("${d:.2}"),
        Some(d) => format!("${d:.4}"),
        None => "unpriced".to_owned(),
    };
    Some(format!(
        "{}{} in / {} out · {money}",
        if estimated { "~" } else { "" },
        thousands(n("input_tokens")),
        thousands(n("output_tokens"))
    ))
}

pub async fn usage(
    State(state): State<AppState>,
    user: User,
    PageQuery(query): PageQuery<UsageQuery>,
) -> Response {
    let days = query.days.unwrap_or(DAYS).clamp(1, 366);
    let now = chrono::Utc::now();
    let since = (now - chrono::Duration::days(days - 1))
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc());
    let store = state.engine.store();
    let by_day = store
        .usage(&UsageFilter {
            since,
            by: UsageGroup::Day,
            ..Default::default()
        })
        .await;
    let body = match by_day {
        Err(e) => html! { p.error role="alert" { (e.to_string()) } },
        Ok(rows) => {
            let by_model = rein_core::store::usage_report(&rows, Some("model"), &state.models);
            let by_date = rein_core::store::usage_report(&rows, Some("day"), &state.models);
            let first = since.map(|s| s.date_naive()).unwrap_or(now.date_naive());
            let dates: Vec<chrono::NaiveDate> = first
                .iter_days()
                .take_while(|d| *d <= now.date_naive())
                .collect();
            html! {
                p.meta {
                    "The last " (days) " days (UTC), at the server's prices. "
                    @for d in [7, 14, 30, 90] {
                        a href={"/ui/usage?days=" (d)} { (d) " days" } " "
                    }
                }
                (chart(&rows, &dates, &by_model))
                h2 { "By model" }
                (report_table(&by_model, "Model"))
                h2 { "By day" }
                (report_table(&by_date, "Day"))
                p.hint { "The same as " a href={"/admin/usage?by=day&since=" (since.map(|s| s.to_rfc3339()).unwrap_or_default())} { "/admin/usage" } " and " code { "rein usage --by day" } "." }
            }
        }
    };
    page(
        &user,
        "Usage",
        html! {
            h1 { "Model usage" }
            (body)
        },
    )
    .into_response()
}

/// A model's part of a day's bar: its model, tokens, top and height.
type Segment<'a> = (&'a String, u64, f64, f64);

/// Tokens per day, a bar per day stacked by model, each segment with its
/// numbers in its title.
fn chart(
    rows: &[rein_core::store::UsageRow],
    dates: &[chrono::NaiveDate],
    by_model: &UsageReport,
) -> Markup {
    const W: f64 = 600.0;
    const H: f64 = 160.0;
    const PAD: f64 = 24.0;
    let models: Vec<String> = by_model
        .rows
        .iter()
        .flatten()
        .filter_map(|r| r.key.clone())
        .collect();
    let colour = |model: &str| {
        models
            .iter()
            .position(|m| m == model)
            .unwrap_or(0)
            .min(COLOURS - 1)
    };
    // Tokens by day and model.
    let mut cells: std::collections::BTreeMap<(String, String), u64> = Default::default();
    for r in rows {
        *cells
            .entry((r.key.clone(), format!("{}/{}", r.provider, r.model)))
            .or_default() += r.usage.total();
    }
    let day_total = |day: &str| -> u64 {
        cells
            .iter()
            .filter(|((d, _), _)| d == day)
            .map(|(_, n)| *n)
            .sum()
    };
    let keys: Vec<String> = dates
        .iter()
        .map(|d| d.format("%Y-%m-%d").to_string())
        .collect();
    let most = keys.iter().map(|d| day_total(d)).max().unwrap_or(0).max(1);
    let slot = (W - PAD) / keys.len().max(1) as f64;
    let height = |n: u64| n as f64 / most as f64 * (H - 2.0 * PAD);
    let all: u64 = cells.values().sum();
    let label = format!(
        "Model tokens per day over {} days: {} in all",
        keys.len(),
        thousands(all)
    );
    // Each day's segments, bottom up: (model, tokens, y, height).
    let bars: Vec<(&String, Vec<Segment>)> = keys
        .iter()
        .map(|day| {
            let mut base = 0u64;
            let segments = cells
                .iter()
                .filter(|((d, _), _)| d == day)
                .map(|((_, model), n)| {
                    base += n;
                    (model, *n, H - PAD - height(base), height(*n))
                })
                .collect();
            (day, segments)
        })
        .collect();
    html! {
        figure.chart.usage-chart data-tokens=(all) data-days=(keys.len()) {
            svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label=(label) viewBox={"0 0 " (W) " " (H)} {
                line.axis x1=(PAD) y1=(H - PAD) x2=(W) y2=(H - PAD) {}
                text.tick x="0" y=(PAD) { (thousands(most)) }
                text.tick x="0" y=(H - PAD) { "0" }
                @for (i, (day, segments)) in bars.iter().enumerate() {
                    @let x = PAD + i as f64 * slot + 1.0;
                    g data-day=(day) data-day-tokens=(day_total(day)) {
                        @for (model, n, y, h) in segments {
                            rect class={"m" (colour(model))} data-model=(model) x=(format!("{x:.1}")) y=(format!("{y:.1}")) width=(format!("{:.1}", (slot - 2.0).max(1.0))) height=(format!("{h:.1}")) {
                                title { (day) " · " (model) ": " (thousands(*n)) " tokens" }
                            }
                        }
                        @if i % 7 == 0 || keys.len() <= 14 {
                            text.tick x=(format!("{x:.1}")) y=(format!("{:.1}", H - 6.0)) { (day.get(5..).unwrap_or(day)) }
                        }
                    }
                }
            }
            figcaption {
                @for model in &models {
                    span class={"key m" (colour(model))} { "■" } " " (model) " "
                }
                @if models.is_empty() { "No model calls in these days." } @else { " — tokens in and out, per UTC day" }
            }
        }
    }
}
