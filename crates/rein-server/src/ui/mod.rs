//! The Control UI: pages served by `rein serve` itself under `/ui`, rendered
//! on the server with maud, and kept live with htmx (pinned, embedded in the
//! binary with its licence: nothing is fetched from anywhere but this server)
//! and a page script of rein's own that holds the page's one event stream.
//!
//! A person signs in with a token and gets the API's browser session (an
//! HttpOnly cookie and a CSRF token); every change a page makes is an htmx
//! request carrying the CSRF token in `X-CSRF-Token`, checked by the same
//! [`Auth`](crate::Auth) as the API, and needs the operator role. A viewer's
//! pages show no control that would change anything, and the server refuses
//! the change anyway. `/ui/live` streams one `changed` event whenever a task's
//! log or an audit record moves (at most ten a second, the last always sent);
//! the parts of a page that show such things fetch their content again on it,
//! one request at a time, the newest queued (`hx-sync`). The page script
//! closes the stream when the page is hidden, so pages kept in a browser's
//! back/forward cache do not use up its connections to the server.

mod graph;
mod history;
mod pages;
mod states;
mod system;
mod usage;

use axum::Router;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::{DOCTYPE, Markup, html};

use crate::AppState;
use crate::auth::{Principal, Role, SESSION_COOKIE};

/// The UI's routes (beside the API's, on the same port).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui") }))
        .route("/ui", get(|| async { Redirect::to("/ui/tasks") }))
        .route("/ui/login", get(login_page).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/live", get(live_stream))
        .route("/ui/assets/{name}", get(asset))
        .route("/ui/tasks", get(pages::tasks).post(pages::submit))
        .route("/ui/tasks/goal", post(pages::submit_goal))
        .route("/ui/tasks/table", get(pages::tasks_table))
        .route("/ui/tasks/{id}", get(pages::task))
        .route("/ui/tasks/{id}/body", get(pages::task_body))
        .route("/ui/tasks/{id}/control", post(pages::control))
        .route("/ui/tasks/{id}/history", get(history::history))
        .route("/ui/tasks/{id}/history/body", get(history::history_body))
        .route("/ui/tasks/{id}/history/{seq}", get(history::point))
        .route("/ui/tasks/{id}/fork", post(history::fork))
        .route("/ui/snapshots/{id}/restore", post(pages::restore))
        .route("/ui/approvals", get(pages::approvals))
        .route("/ui/approvals/list", get(pages::approvals_list))
        .route("/ui/approvals/{id}/decide", post(pages::decide))
        .route("/ui/states", get(states::states))
        .route("/ui/states/list", get(states::states_list))
        .route("/ui/states/{id}", get(states::shared_state))
        .route("/ui/states/{id}/body", get(states::state_body))
        .route("/ui/states/{id}/detect", post(states::detect))
        .route("/ui/ledger", get(system::ledger))
        .route("/ui/ledger/entries", get(system::ledger_entries))
        .route("/ui/ledger/verify", get(system::verify))
        .route("/ui/usage", get(usage::usage))
        .route("/ui/health", get(system::health))
        .route("/ui/health/body", get(system::health_body))
        .route("/ui/harnesses", get(system::harnesses))
        .route("/ui/harnesses/explain", get(system::explain))
        .layer(axum::middleware::map_response(page_headers))
}

/// What every UI answer says about where it may run: scripts and styles
/// from rein's own assets only (the pages hold no inline script or style),
/// never inside a frame (`frame-ancestors 'none'`, and `X-Frame-Options:
/// DENY` for browsers that predate it), so another site — or another port
/// of the same host — cannot frame a signed-in page and steer clicks on it.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
    style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
    base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

async fn page_headers(mut response: Response) -> Response {
    use axum::http::{HeaderValue, header};
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// Who is looking at a page: signed in (or the local admin of a server with
/// no tokens), with the CSRF token the page's changes carry.
#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
    pub role: Role,
    pub csrf: Option<String>,
}

impl User {
    pub fn can_change(&self) -> bool {
        self.role >= Role::Operator
    }
}

impl FromRequestParts<AppState> for User {
    type Rejection = Response;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<User, Response> {
        if !state.auth.enabled() {
            return Ok(User {
                name: "local".into(),
                role: Role::Admin,
                csrf: None,
            });
        }
        match state.auth.browser_session(&parts.headers) {
            Some((principal, csrf)) => Ok(User {
                name: principal.name,
                role: principal.role,
                csrf: Some(csrf),
            }),
            None => Err(to_login(&parts.headers)),
        }
    }
}

/// To the sign-in page: a redirect, or for an htmx request, the header that
/// makes htmx load it.
fn to_login(headers: &HeaderMap) -> Response {
    if headers.contains_key("hx-request") {
        (
            StatusCode::UNAUTHORIZED,
            [("hx-redirect", "/ui/login")],
            "sign in again",
        )
            .into_response()
    } else {
        Redirect::to("/ui/login").into_response()
    }
}

/// The caller of a change a page makes: checked as the API checks one (the
/// session's CSRF token), and refused below `role`. A refusal is a short
/// message htmx shows where the change was asked.
pub fn changer(state: &AppState, headers: &HeaderMap, role: Role) -> Result<Principal, Refusal> {
    let principal = state
        .auth
        .principal(&Method::POST, headers)
        .map_err(Refusal::from)?;
    crate::auth::require(&principal, role).map_err(Refusal::from)?;
    Ok(principal)
}

/// Why a change or a page was refused: a message for the place it was asked
/// from (htmx swaps refusals in as it swaps answers).
#[derive(Debug)]
pub struct Refusal(pub StatusCode, pub String);

impl From<crate::error::ApiError> for Refusal {
    fn from(e: crate::error::ApiError) -> Refusal {
        Refusal(e.status, e.message)
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.0, html! { p.error role="alert" { (self.1) } }).into_response()
    }
}

pub fn refusal(status: StatusCode, message: &str) -> Response {
    Refusal(status, message.to_owned()).into_response()
}

/// What the engine refused, said as the API says it.
fn engine_refusal(e: rein_core::EngineError) -> Response {
    let e = crate::error::ApiError::from(e);
    refusal(e.status, &e.message)
}

/// A page's query string, read as the API reads one ([`Params`]): one that
/// does not parse is a 400 naming what is wrong, shown where the page would
/// have been, not axum's plain-text rejection.
///
/// [`Params`]: crate::routes::Params
#[derive(Debug)]
pub struct PageQuery<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequestParts<S> for PageQuery<T> {
    type Rejection = Refusal;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Refusal> {
        let crate::routes::Params(value) =
            crate::routes::Params::from_request_parts(parts, state).await?;
        Ok(PageQuery(value))
    }
}

/// A form field as given, trimmed; none if it was left blank.
pub fn filled(value: Option<String>) -> Option<String> {
    value.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

/// An id from the path, checked as the API checks one.
pub fn parse_id<T>(id: &str) -> Result<T, Refusal>
where
    T: std::str::FromStr<Err = rein_protocol::ids::InvalidId>,
{
    crate::routes::parse_id(id).map_err(Refusal::from)
}

/// A part of a page that fetches its content from `source` again whenever
/// anything changes: one request at a time, the newest one queued. Nothing of
/// this is inherited by what it holds: a decision or a control inside it is a
/// request of its own, never queued behind (and replaced by) a refresh.
pub fn live(id: &str, source: &str, content: Markup) -> Markup {
    html! {
        div id=(id) data-live-part hx-get=(source) hx-trigger="rein:changed" hx-swap="innerHTML" hx-sync="this:queue last" hx-disinherit="*" {
            (content)
        }
    }
}

fn time(t: &rein_protocol::Timestamp) -> Markup {
    html! { time datetime=(t.to_rfc3339()) { (t.format("%Y-%m-%d %H:%M:%S UTC")) } }
}

fn opt_time(t: Option<&rein_protocol::Timestamp>) -> Markup {
    match t {
        Some(t) => time(t),
        None => html! {},
    }
}

/// A whole page: the header with what the user may open and who they are,
/// then `body`. Changes carry the CSRF token; the page listens to `/ui/live`.
pub fn page(user: &User, title: &str, body: Markup) -> Markup {
    let headers = user
        .csrf
        .as_ref()
        .map(|csrf| serde_json::json!({ "X-CSRF-Token": csrf }).to_string());
    shell(
        title,
        html! {
            body hx-headers=[headers] data-live="/ui/live" {
                header.top {
                    a.brand href="/ui/tasks" { "rein" }
                    nav aria-label="main" {
                        a href="/ui/tasks" { "Tasks" }
                        a href="/ui/approvals" { "Approvals" }
                        a href="/ui/states" { "Shared states" }
                        a href="/ui/ledger" { "Ledger" }
                        a href="/ui/usage" { "Usage" }
                        a href="/ui/health" { "Health" }
                        a href="/ui/harnesses" { "Harnesses" }
                    }
                    div.who {
                        span { (user.name) " · " (role_name(user.role)) }
                        @if user.csrf.is_some() {
                            button.link hx-post="/ui/logout" { "Sign out" }
                        }
                    }
                }
                main { (body) }
            }
        },
    )
}

fn shell(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                // htmx adds no <style> of its own (the page has its own
                // sheet), and swaps in refusals too: they say what went wrong.
                // No settle delay: htmx readies swapped-in content (its forms
                // and buttons) only when it settles, and a click in between
                // submitted a decision's form natively, as a GET, and lost it.
                meta name="htmx-config" content=r#"{"includeIndicatorStyles":false,"defaultSettleDelay":0,"responseHandling":[{"code":"204","swap":false},{"code":"[2345]..","swap":true}]}"#;
                title { (title) " · rein" }
                link rel="stylesheet" href="/ui/assets/rein.css";
                script src="/ui/assets/htmx-2.0.11.min.js" {}
                script src="/ui/assets/rein.js" defer {}
            }
            (body)
        }
    }
}

pub fn role_name(role: Role) -> &'static str {
    match role {
        Role::Viewer => "viewer",
        Role::Operator => "operator",
        Role::Admin => "admin",
    }
}

async fn login_page(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !state.auth.enabled() || state.auth.browser_session(&headers).is_some() {
        return Redirect::to("/ui/tasks").into_response();
    }
    login_form(None).into_response()
}

fn login_form(problem: Option<&str>) -> Markup {
    shell(
        "Sign in",
        html! {
            body {
                main.signin {
                    h1 { "Sign in to rein" }
                    form method="post" action="/ui/login" {
                        label for="token" { "Token" }
                        input #token type="password" name="token" autocomplete="current-password" required autofocus;
                        @if let Some(problem) = problem {
                            p.error role="alert" { (problem) }
                        }
                        button type="submit" { "Sign in" }
                    }
                    p.hint { "Use one of the tokens `rein serve` was started with (REIN_TOKEN, or a file given with --tokens)." }
                }
            }
        },
    )
}

#[derive(Debug, serde::Deserialize)]
struct SignIn {
    token: String,
}

async fn login(
    State(state): State<AppState>,
    form: Result<axum::Form<SignIn>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(axum::Form(form)) = form else {
        return (
            StatusCode::BAD_REQUEST,
            login_form(Some("Send the form with a token.")),
        )
            .into_response();
    };
    match state.auth.open_session(form.token.trim()) {
        Ok((id, _csrf)) => {
            let cookie = format!("{SESSION_COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/");
            (
                StatusCode::SEE_OTHER,
                [
                    (header::SET_COOKIE, cookie),
                    (header::LOCATION, "/ui/tasks".to_owned()),
                ],
            )
                .into_response()
        }
        Err(_) => (
            StatusCode::UNAUTHORIZED,
            login_form(Some("That token is not one this server knows.")),
        )
            .into_response(),
    }
}

/// Signs out: the session ends here, and the browser forgets its cookie.
async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(refused) = changer(&state, &headers, Role::Viewer) {
        return refused.into_response();
    }
    state.auth.close_session(&headers);
    let expired = format!("{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    (
        [
            (header::SET_COOKIE, expired),
            (
                header::HeaderName::from_static("hx-redirect"),
                "/ui/login".to_owned(),
            ),
        ],
        "signed out",
    )
        .into_response()
}

/// The WebDriver capabilities the UI is tested and measured under: Debian's
/// Chromium, headless, with its profile in `profile`, and none of the
/// background connections it would make beyond this machine.
pub fn headless_chromium(profile: &std::path::Path) -> serde_json::Map<String, serde_json::Value> {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": "/usr/bin/chromium",
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                "--window-size=1280,1000",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    caps
}

/// The least time between two `changed` events of one page.
const LIVE_PACE: std::time::Duration = std::time::Duration::from_millis(100);

/// One `changed` event each time a task's log or the audit records move.
async fn live_stream(State(state): State<AppState>, _user: User) -> Response {
    crate::events::stream(4, move |tx| async move {
        let mut tasks = state.hub.all();
        let mut audit = state.hub.audit();
        loop {
            tokio::select! {
                woke = tasks.changed() => if woke.is_err() { return },
                woke = audit.changed() => if woke.is_err() { return },
                () = tx.closed() => return,
                () = state.shutdown.cancelled() => return,
            }
            // Not empty: a browser drops an event without data.
            if tx
                .send(Ok(Event::default().event("changed").data("1")))
                .await
                .is_err()
            {
                return;
            }
            // At most ten a second: a change meanwhile is kept by the
            // watchers and sent next, so the last one always arrives.
            tokio::select! {
                () = tokio::time::sleep(LIVE_PACE) => {}
                () = tx.closed() => return,
                () = state.shutdown.cancelled() => return,
            }
        }
    })
}

/// The embedded files: htmx (0BSD, its licence beside it), the style sheet
/// and the page script.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "htmx-2.0.11.min.js",
        "text/javascript",
        include_str!("../../assets/ui/htmx-2.0.11.min.js"),
    ),
    (
        "rein.css",
        "text/css",
        include_str!("../../assets/ui/rein.css"),
    ),
    (
        "rein.js",
        "text/javascript",
        include_str!("../../assets/ui/rein.js"),
    ),
    (
        "LICENSE-htmx",
        "text/plain",
        include_str!("../../assets/ui/LICENSE-htmx"),
    ),
];

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, media, text)) => (
            [
                (header::CONTENT_TYPE, HeaderValue::from_static(media)),
                (
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("public, max-age=3600"),
                ),
            ],
            *text,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
    }
}
