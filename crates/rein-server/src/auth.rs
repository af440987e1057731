//! Operator auth: tokens (stored as SHA-256 hashes) with roles viewer < operator <
//! admin, presented as `Authorization: Bearer TOKEN`; and browser sessions — a
//! token exchanged at `POST /auth/session` for an HttpOnly, SameSite=Strict cookie
//! and a CSRF token that every mutation from the cookie must carry in
//! `X-CSRF-Token`.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::http::{HeaderMap, Method};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{ApiError, ApiResult};

pub const SESSION_COOKIE: &str = "rein_session";
pub const CSRF_HEADER: &str = "x-csrf-token";

pub use rein_protocol::endpoints::Role;

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub role: Role,
    /// Came with a session cookie (so mutations need the CSRF header).
    pub cookie: bool,
}

/// A caller inside this process (the CLI's embedded commands calling the
/// router directly), put on the request as an extension: a request from the
/// network cannot carry one, so it stands in for a token.
#[derive(Debug, Clone)]
pub struct InProcess(pub Principal);

/// One configured token: its name, role and SHA-256 (hex).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenEntry {
    pub name: String,
    pub role: Role,
    pub sha256: String,
}

pub fn hash_token(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Compares without stopping at the first difference.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[derive(Debug)]
struct Session {
    principal: Principal,
    csrf: String,
}

#[derive(Debug, Default)]
pub struct Auth {
    tokens: Vec<TokenEntry>,
    sessions: Mutex<HashMap<String, Session>>,
}

fn random_hex() -> String {
    (0..4)
        .map(|_| format!("{:016x}", rand::random::<u64>()))
        .collect()
}

impl Auth {
    /// Auth with these tokens; with none, every request is let in as an admin
    /// (the server then refuses to listen anywhere but loopback).
    pub fn new(tokens: Vec<TokenEntry>) -> Auth {
        Auth {
            tokens,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    pub fn enabled(&self) -> bool {
        !self.tokens.is_empty()
    }

    fn by_token(&self, token: &str) -> Option<Principal> {
        let hash = hash_token(token);
        self.tokens
            .iter()
            .find(|t| same(&t.sha256, &hash))
            .map(|t| Principal {
                name: t.name.clone(),
                role: t.role,
                cookie: false,
            })
    }

    /// Starts a browser session for a valid token: (cookie value, CSRF token).
    pub fn open_session(&self, token: &str) -> ApiResult<(String, String)> {
        let principal = self.by_token(token).ok_or_else(ApiError::unauthorized)?;
        let (id, csrf) = (random_hex(), random_hex());
        let session = Session {
            principal: Principal {
                cookie: true,
                ..principal
            },
            csrf: csrf.clone(),
        };
        self.sessions
            .lock()
            .map_err(|_| ApiError::unauthorized())?
            .insert(id.clone(), session);
        Ok((id, csrf))
    }

    /// The browser session the request's cookie names: who it is, and the
    /// CSRF token its changes must carry.
    pub fn browser_session(&self, headers: &HeaderMap) -> Option<(Principal, String)> {
        let id = session_cookie(headers)?;
        let sessions = self.sessions.lock().ok()?;
        sessions
            .get(&id)
            .map(|s| (s.principal.clone(), s.csrf.clone()))
    }

    /// Ends the browser session the request's cookie names, if there is one.
    pub fn close_session(&self, headers: &HeaderMap) {
        if let (Some(id), Ok(mut sessions)) = (session_cookie(headers), self.sessions.lock()) {
            sessions.remove(&id);
        }
    }

    /// Who sent the request, checking the CSRF header of cookie mutations.
    pub fn principal(&self, method: &Method, headers: &HeaderMap) -> ApiResult<Principal> {
        if !self.enabled() {
            return Ok(Principal {
                name: "local".into(),
                role: Role::Admin,
                cookie: false,
            });
        }
        if let Some(value) = headers.get(axum::http::header::AUTHORIZATION) {
            let token = value
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .ok_or_else(ApiError::unauthorized)?;
            return self
                .by_token(token.trim())
                .ok_or_else(ApiError::unauthorized);
        }
        let Some(id) = session_cookie(headers) else {
            return Err(ApiError::unauthorized());
        };
        let sessions = self.sessions.lock().map_err(|_| ApiError::unauthorized())?;
        let session = sessions.get(&id).ok_or_else(ApiError::unauthorized)?;
        let mutation = !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
        if mutation {
            let sent = headers
                .get(CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            if !same(sent, &session.csrf) {
                return Err(ApiError::forbidden(
                    "a change from a browser session needs the session's CSRF token in the X-CSRF-Token header",
                ));
            }
        }
        Ok(session.principal.clone())
    }
}

fn session_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == SESSION_COOKIE)
        .map(|(_, v)| v.to_owned())
}

/// Fails unless `principal` has at least `role`.
pub fn require(principal: &Principal, role: Role) -> ApiResult<()> {
    if principal.role >= role {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!(
            "{} is a {:?}; this needs {:?} or above",
            principal.name, principal.role, role
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered_and_checked() {
        let viewer = Principal {
            name: "v".into(),
            role: Role::Viewer,
            cookie: false,
        };
        assert!(require(&viewer, Role::Viewer).is_ok());
        let err = require(&viewer, Role::Operator).unwrap_err();
        assert_eq!(err.status, axum::http::StatusCode::FORBIDDEN);
        assert!(Role::Admin > Role::Operator && Role::Operator > Role::Viewer);
    }

    #[test]
    fn tokens_are_matched_by_hash() {
        let auth = Auth::new(vec![TokenEntry {
            name: "ci".into(),
            role: Role::Operator,
            sha256: hash_token("s3cret"),
        }]);
        assert_eq!(auth.by_token("s3cret").unwrap().role, Role::Operator);
        assert!(auth.by_token("s3cre").is_none());
        assert_eq!(hash_token("s3cret").len(), 64);
    }
}
