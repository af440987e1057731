//! The shared-state routes (spec shared-state §4): list, show, a session's
//! newest, create, add a participant, add an action, detect conflicts. Reads need
//! viewer, changes operator (and CSRF from a browser session).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rein_core::store::SharedStateFilter;
use rein_protocol::api::{
    AuditRecord, ConflictReport, List, LogQuery, Page, SharedStateEnvelope, StateQuery, StreamQuery,
};
use rein_protocol::{Action, Participant, SharedHarnessState};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::routes::{Body, Caller, Params};

pub async fn list(
    State(state): State<AppState>,
    Params(q): Params<StateQuery>,
) -> ApiResult<Json<Page<SharedHarnessState>>> {
    let filter = SharedStateFilter::of_query(q).map_err(ApiError::bad_request)?;
    Ok(Json(state.engine.shared_states(&filter).await?))
}

pub async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<SharedStateEnvelope>> {
    let shared = state.engine.shared_state(&id).await?;
    Ok(Json(SharedStateEnvelope { state: shared }))
}

pub async fn of_session(
    State(state): State<AppState>,
    Path(session): Path<String>,
) -> ApiResult<Json<SharedStateEnvelope>> {
    let shared = state.engine.session_shared_state(&session).await?;
    Ok(Json(SharedStateEnvelope { state: shared }))
}

pub async fn create(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Body(body): Body<SharedHarnessState>,
) -> ApiResult<Response> {
    let created = state.engine.create_shared_state(body, &caller.name).await?;
    Ok((
        StatusCode::CREATED,
        Json(SharedStateEnvelope { state: created }),
    )
        .into_response())
}

pub async fn add_participant(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Body(body): Body<Participant>,
) -> ApiResult<Json<SharedStateEnvelope>> {
    let changed = state
        .engine
        .add_participant(&id, body, &caller.name)
        .await?;
    Ok(Json(SharedStateEnvelope { state: changed }))
}

pub async fn add_action(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Body(body): Body<Action>,
) -> ApiResult<Json<SharedStateEnvelope>> {
    let changed = state.engine.add_action(&id, body, &caller.name).await?;
    Ok(Json(SharedStateEnvelope { state: changed }))
}

pub async fn detect(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<ConflictReport>> {
    let (changed, conflicts) = state.engine.detect_conflicts(&id, &caller.name).await?;
    Ok(Json(ConflictReport {
        state: changed,
        conflicts,
    }))
}

/// Audit records of changes made outside task logs, oldest first.
pub async fn audit(
    State(state): State<AppState>,
    Params(q): Params<LogQuery>,
) -> ApiResult<Json<List<AuditRecord>>> {
    let items = state
        .engine
        .audit(q.after.unwrap_or(0), q.limit.unwrap_or(1000))
        .await?;
    Ok(Json(List::new(items)))
}

/// The audit records, as [`audit_stream`] tails them.
struct AuditLog {
    state: AppState,
    changed: tokio::sync::watch::Receiver<u64>,
}

impl crate::events::Tailed for AuditLog {
    type Item = rein_core::store::AuditRecord;

    async fn read(
        &mut self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<rein_core::store::AuditRecord>, String> {
        self.state
            .engine
            .audit(after, limit)
            .await
            .map_err(|e| e.to_string())
    }

    fn position(record: &rein_core::store::AuditRecord) -> u64 {
        record.seq
    }

    fn frame(record: &rein_core::store::AuditRecord) -> axum::response::sse::Event {
        axum::response::sse::Event::default()
            .id(record.seq.to_string())
            .event(record.action.as_str())
            .json_data(record)
            .unwrap_or_else(|_| axum::response::sse::Event::default().comment("unencodable record"))
    }

    async fn wait(&mut self, _after: u64, _sent: bool, _frames: &crate::events::FrameSink) -> bool {
        self.changed.changed().await.is_ok()
    }
}

/// Audit records as Server-Sent Events (id = the record's position, event = its
/// action), from `Last-Event-ID` or `?after=`: every shared-state change, live.
pub async fn audit_stream(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    Params(query): Params<StreamQuery>,
) -> ApiResult<Response> {
    let after = crate::events::position(&headers, &query)?;
    // Subscribed before the first read, so a record written meanwhile wakes it.
    let log = AuditLog {
        changed: state.hub.audit(),
        state: state.clone(),
    };
    Ok(crate::events::tail(&state, log, after, 500))
}
