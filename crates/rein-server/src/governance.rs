//! The governance ledger in the seed's terms (seed 000, `GovernanceLedger…`):
//! list it with the seed's filters, add a decision by hand, show one entry,
//! revoke one. Entries are never changed: a revocation is an entry of its own,
//! and an entry reads as revoked once one names it.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rein_protocol::api::{GovernanceEnvelope, List};
use rein_protocol::{
    GovernanceAdd, GovernanceEntry, GovernanceQuery, GovernanceScope, LedgerKind, RevokeRequest,
    Risk,
};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::routes::{Body, Caller, Params, one_of, parse_time};

pub async fn list(
    State(state): State<AppState>,
    Params(q): Params<GovernanceQuery>,
) -> ApiResult<Json<List<GovernanceEntry>>> {
    let decision: Option<LedgerKind> = one_of(
        "decision",
        &q.decision,
        "approved, rejected, skipped, delegated, escalated, expired, revoked, unknown",
    )?;
    let risk: Option<Risk> = one_of(
        "riskLevel",
        &q.risk_level,
        "unknown, low, medium, high, critical",
    )?;
    let scope: Option<GovernanceScope> = one_of(
        "scope",
        &q.scope,
        "once, session, actor, channel, project, tool, global, unknown",
    )?;
    if let Some(s) = &q.status
        && !["active", "expired", "revoked"].contains(&s.as_str())
    {
        return Err(ApiError::bad_request(format!(
            "status `{s}` is not one of active, expired, revoked"
        )));
    }
    let from = parse_time("createdFromUtc", &q.created_from_utc)?;
    let to = parse_time("createdToUtc", &q.created_to_utc)?;
    let same = |want: &Option<String>, got: &Option<String>| {
        want.as_ref().is_none_or(|w| got.as_ref() == Some(w))
    };
    let keep = |e: &GovernanceEntry| {
        let d = &e.details;
        decision.is_none_or(|k| e.decision == k)
            && q.status.as_ref().is_none_or(|s| &e.status == s)
            && risk.is_none_or(|r| d.risk_level == r)
            && scope.is_none_or(|s| d.scope == s)
            && same(&q.tool_name, &d.tool_name)
            && same(&q.action_type, &d.action_type)
            && same(&q.session_id, &d.session_id)
            && same(&q.actor_id, &d.actor_id)
            && same(&q.channel_id, &d.channel_id)
            && q.decided_by.as_ref().is_none_or(|w| &e.decided_by == w)
            && q.tag.as_ref().is_none_or(|t| d.tags.contains(t))
            && from.is_none_or(|f| e.created_at >= f)
            && to.is_none_or(|t| e.created_at < t)
    };
    let limit = q.limit.unwrap_or(100);
    Ok(Json(List::new(state.engine.governance(keep, limit).await?)))
}

pub async fn add(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Body(body): Body<GovernanceAdd>,
) -> ApiResult<Response> {
    let entry = state.engine.add_governance(body, &caller.name).await?;
    Ok((StatusCode::CREATED, Json(GovernanceEnvelope { entry })).into_response())
}

pub async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<GovernanceEnvelope>> {
    let entry = state.engine.governance_entry(&id).await?;
    Ok(Json(GovernanceEnvelope { entry }))
}

pub async fn revoke(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Body(body): Body<RevokeRequest>,
) -> ApiResult<Json<GovernanceEnvelope>> {
    let entry = state
        .engine
        .revoke_governance(&id, body, &caller.name)
        .await?;
    Ok(Json(GovernanceEnvelope { entry }))
}
