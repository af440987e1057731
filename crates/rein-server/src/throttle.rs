//! Failed sign-ins throttled per client address: a wrong bearer token, a
//! stale session cookie, a wrong token at `POST /auth/session` or the UI's
//! sign-in form. After [`FAILURES`] of them (or the number the server was
//! started with) from one address within [`WINDOW`], every request from that address that needs a sign-in gets 429
//! with `Retry-After` until the window is over — the right token included,
//! so guessing stops paying — while other addresses are served as before.
//! The address comes from the accept loop ([`ClientAddr`]); a request
//! without one (an in-process caller) is not throttled.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::AppState;
use crate::error::ApiError;

/// Failed sign-ins one address may make within [`WINDOW`], unless the
/// server is started with another number (`rein serve --sign-in-failures`).
pub const FAILURES: u32 = 10;
/// How long failed sign-ins are counted, and how long an address that made
/// too many waits.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Addresses remembered at most; the oldest windows go first past it.
const REMEMBERED: usize = 65_536;

/// The address a request's connection came from, set by the accept loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// Failed sign-ins by address.
#[derive(Debug)]
pub struct Throttle {
    windows: Mutex<HashMap<IpAddr, Window>>,
    /// Failed sign-ins an address may make within [`WINDOW`].
    failures: u32,
}

impl Default for Throttle {
    fn default() -> Throttle {
        Throttle::new(FAILURES)
    }
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    failures: u32,
}

impl Throttle {
    /// A throttle letting each address make `failures` failed sign-ins
    /// within [`WINDOW`] (at least one).
    pub fn new(failures: u32) -> Throttle {
        Throttle {
            windows: Mutex::default(),
            failures: failures.max(1),
        }
    }

    /// Failed sign-ins an address may make within [`WINDOW`].
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// How long `addr` still has to wait, if it made too many failed
    /// sign-ins lately.
    pub fn waiting(&self, addr: IpAddr, now: Instant) -> Option<Duration> {
        let windows = self.windows.lock().ok()?;
        let window = windows.get(&addr)?;
        let ends = window.started + WINDOW;
        (window.failures >= self.failures && ends > now).then(|| ends - now)
    }

    /// Counts a failed sign-in from `addr`.
    pub fn failed(&self, addr: IpAddr, now: Instant) {
        let Ok(mut windows) = self.windows.lock() else {
            return;
        };
        if windows.len() >= REMEMBERED {
            windows.retain(|_, w| w.started + WINDOW > now);
        }
        let window = windows.entry(addr).or_insert(Window {
            started: now,
            failures: 0,
        });
        if window.started + WINDOW <= now {
            *window = Window {
                started: now,
                failures: 0,
            };
        }
        window.failures = window.failures.saturating_add(1);
    }
}

/// Whether a request presents credentials (a bearer token, a cookie, the
/// sign-in form): its 401 is a failed sign-in, not a missing one.
fn presents_credentials(request: &Request) -> bool {
    let path = request.uri().path();
    request.headers().contains_key(header::AUTHORIZATION)
        || request.headers().contains_key(header::COOKIE)
        || path == "/auth/session"
        || path == "/ui/login"
}

/// The middleware: refuses an address that is waiting, and counts the
/// failed sign-ins of the rest.
pub async fn throttle(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(ClientAddr(addr)) = request.extensions().get::<ClientAddr>().copied() else {
        return next.run(request).await;
    };
    let presented = presents_credentials(&request);
    if presented && let Some(wait) = state.throttle.waiting(addr, Instant::now()) {
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let mut response = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_failed_sign_ins",
            format!(
                "{} failed sign-ins from {addr} within {} s: try again in {seconds} s",
                state.throttle.failures(),
                WINDOW.as_secs()
            ),
        )
        .into_response();
        if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        return response;
    }
    let response = next.run(request).await;
    if presented && response.status() == StatusCode::UNAUTHORIZED {
        state.throttle.failed(addr, Instant::now());
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_waits_after_too_many_failures_and_others_do_not() {
        let throttle = Throttle::default();
        let (a, b) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([127, 0, 0, 2]));
        let start = Instant::now();
        for i in 0..FAILURES {
            assert_eq!(throttle.waiting(a, start), None, "after {i}");
            throttle.failed(a, start);
        }
        let wait = throttle.waiting(a, start + Duration::from_secs(1));
        assert_eq!(wait, Some(WINDOW - Duration::from_secs(1)));
        assert_eq!(throttle.waiting(b, start), None);
        // The window over, it is let in again, and counts anew.
        assert_eq!(throttle.waiting(a, start + WINDOW), None);
        throttle.failed(a, start + WINDOW);
        assert_eq!(throttle.waiting(a, start + WINDOW), None);
    }

    #[test]
    fn the_number_of_failures_is_the_servers_own() {
        let throttle = Throttle::new(3);
        let a = IpAddr::from([10, 0, 0, 1]);
        let start = Instant::now();
        for _ in 0..2 {
            throttle.failed(a, start);
        }
        assert_eq!(throttle.waiting(a, start), None);
        throttle.failed(a, start);
        assert!(throttle.waiting(a, start).is_some());
    }
}
