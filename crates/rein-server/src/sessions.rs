//! The routes of agent sessions (`ses_…`, under `/admin/agent-sessions`: the
//! `session` of `/admin/sessions/{session}/harness-state` is the one tasks are
//! grouped by): list and show them (viewer), reset
//! one through its harness, pin one to a runtime, hand one to another plugin
//! (operator, CSRF from a browser session). A delegated child session is its
//! owner's to change: a reset, pin or hand-over of one is a 409 naming the
//! owner.

use axum::Json;
use axum::extract::{Path, State};
use rein_protocol::api::{
    AgentSessionEnvelope, DelegateSessionRequest, Page, PinRequest, SessionQuery,
};
use rein_protocol::{AgentSessionInfo, SessionId, SessionStatus, TaskId};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::routes::{Body, Caller, Params, parse_id};

pub async fn list_sessions(
    State(state): State<AppState>,
    Params(q): Params<SessionQuery>,
) -> ApiResult<Json<Page<AgentSessionInfo>>> {
    let task = q.task_id.as_deref().map(parse_id::<TaskId>).transpose()?;
    let status = q.status.as_deref().map(parse_status).transpose()?;
    let page = state
        .engine
        .sessions()
        .list(
            task.as_ref(),
            status,
            q.parent.as_deref(),
            q.limit,
            q.cursor,
        )
        .await?;
    Ok(Json(page))
}

fn parse_status(s: &str) -> ApiResult<SessionStatus> {
    match s {
        "active" => Ok(SessionStatus::Active),
        "ended" => Ok(SessionStatus::Ended),
        other => Err(ApiError::bad_request(format!(
            "session status `{other}` is not one of active, ended"
        ))),
    }
}

pub async fn show_session(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<AgentSessionEnvelope>> {
    parse_id::<SessionId>(&id)?;
    let sessions = state.engine.sessions();
    let session = sessions.get(&id).await?;
    let children = sessions
        .list(None, None, Some(&id), Some(500), None)
        .await?
        .items;
    Ok(Json(AgentSessionEnvelope {
        session,
        children: Some(children),
    }))
}

pub async fn reset_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<AgentSessionEnvelope>> {
    parse_id::<SessionId>(&id)?;
    let reset = state
        .engine
        .sessions()
        .reset(&id, &state.harnesses, &caller.name)
        .await?;
    Ok(Json(AgentSessionEnvelope {
        session: reset,
        children: None,
    }))
}

pub async fn pin_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Body(body): Body<PinRequest>,
) -> ApiResult<Json<AgentSessionEnvelope>> {
    parse_id::<SessionId>(&id)?;
    if body.runtime.as_deref().is_some_and(|r| r.trim().is_empty()) {
        return Err(ApiError::bad_request(
            "runtime must not be empty; send null to unpin",
        ));
    }
    let pinned = state
        .engine
        .sessions()
        .pin(&id, body.runtime.as_deref(), &state.harnesses, &caller.name)
        .await?;
    Ok(Json(AgentSessionEnvelope {
        session: pinned,
        children: None,
    }))
}

/// Hands a session to another plugin, or takes it back (harness-sdk rules
/// 22–23): refused with 409 naming every difference, 400 for a plugin that
/// is not loaded.
pub async fn delegate_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Body(body): Body<DelegateSessionRequest>,
) -> ApiResult<Json<AgentSessionEnvelope>> {
    parse_id::<SessionId>(&id)?;
    if body.plugin.as_deref().is_some_and(|p| p.trim().is_empty()) {
        return Err(ApiError::bad_request(
            "plugin must not be empty; send null to take the session back",
        ));
    }
    let asked = rein_core::harness::delegation::DelegateAsk {
        session_key: body.session_key,
        store_path: body.store_path,
        session_id: body.session_id,
    };
    let session = state
        .engine
        .sessions()
        .delegate(
            &id,
            body.plugin.as_deref(),
            &asked,
            &state.harnesses,
            &caller.name,
        )
        .await?;
    Ok(Json(AgentSessionEnvelope {
        session,
        children: None,
    }))
}
