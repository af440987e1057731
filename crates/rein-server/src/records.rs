//! The routes of harness contracts and evidence bundles (spec shared-state §5):
//! list, show and create each; move a contract along its status flow; add
//! items, checks and reviews to a bundle. Reads need viewer, changes operator
//! (and CSRF from a browser session); every change writes an audit record.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rein_core::store::{RecordFilter, RecordKind};
use rein_protocol::{
    ContractStatus, EvidenceBundle, EvidenceCheck, EvidenceItem, HarnessContract, Review,
    ReviewVerdict,
};
use serde::Deserialize;
use serde_json::json;

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::routes::{Body, Caller};

/// Query names are snake_case, as on every route; the camelCase ones these
/// routes once took are still accepted.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordQuery {
    status: Option<String>,
    #[serde(alias = "taskId")]
    task_id: Option<String>,
    #[serde(alias = "sharedStateId")]
    shared_state_id: Option<String>,
    #[serde(alias = "contractId")]
    contract_id: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

fn filter(
    kind: RecordKind,
    query: Result<Query<RecordQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<RecordFilter> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if q.limit.is_some_and(|l| l == 0 || l > 500) {
        return Err(ApiError::bad_request("limit must be between 1 and 500"));
    }
    if let Some(s) = &q.status {
        if kind != RecordKind::Contract {
            return Err(ApiError::bad_request(
                "`status` filters contracts; evidence bundles have none",
            ));
        }
        parse_status(s)?;
    }
    if q.contract_id.is_some() && kind != RecordKind::Evidence {
        return Err(ApiError::bad_request(
            "`contractId` filters evidence bundles; for a contract, use its id",
        ));
    }
    Ok(RecordFilter {
        kind,
        status: q.status,
        task_id: q.task_id,
        shared_state_id: q.shared_state_id,
        contract_id: q.contract_id,
        limit: q.limit,
        cursor: q.cursor,
    })
}

fn parse_status(s: &str) -> ApiResult<ContractStatus> {
    ContractStatus::parse(s).ok_or_else(|| {
        let allowed: Vec<&str> = ContractStatus::ALL.iter().map(|c| c.as_str()).collect();
        ApiError::bad_request(format!(
            "contract status `{s}` is not one of {}",
            allowed.join(", ")
        ))
    })
}

pub async fn list_contracts(
    State(state): State<AppState>,
    query: Result<Query<RecordQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let page = state
        .engine
        .records()
        .contracts(&filter(RecordKind::Contract, query)?)
        .await?;
    Ok(Json(
        json!({ "items": page.items, "next_cursor": page.next_cursor }),
    ))
}

pub async fn show_contract(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    Ok(Json(
        json!({ "contract": state.engine.records().contract(&id).await? }),
    ))
}

pub async fn create_contract(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Body(body): Body<HarnessContract>,
) -> ApiResult<Response> {
    let created = state
        .engine
        .records()
        .create_contract(body, &caller.name)
        .await?;
    Ok((StatusCode::CREATED, Json(json!({ "contract": created }))).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusRequest {
    status: String,
    #[serde(default)]
    reason: Option<String>,
}

pub async fn change_status(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Body(body): Body<StatusRequest>,
) -> ApiResult<Json<serde_json::Value>> {
    let to = parse_status(&body.status)?;
    let changed = state
        .engine
        .records()
        .transition_contract(&id, to, &caller.name, body.reason)
        .await?;
    Ok(Json(json!({ "contract": changed })))
}

pub async fn list_evidence(
    State(state): State<AppState>,
    query: Result<Query<RecordQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let page = state
        .engine
        .records()
        .evidence_bundles(&filter(RecordKind::Evidence, query)?)
        .await?;
    Ok(Json(
        json!({ "items": page.items, "next_cursor": page.next_cursor }),
    ))
}

pub async fn show_evidence(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    Ok(Json(
        json!({ "evidence": state.engine.records().evidence(&id).await? }),
    ))
}

pub async fn create_evidence(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Body(body): Body<EvidenceBundle>,
) -> ApiResult<Response> {
    let created = state
        .engine
        .records()
        .create_evidence(body, &caller.name)
        .await?;
    Ok((StatusCode::CREATED, Json(json!({ "evidence": created }))).into_response())
}

pub async fn add_item(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Body(body): Body<EvidenceItem>,
) -> ApiResult<Json<serde_json::Value>> {
    let changed = state
        .engine
        .records()
        .add_evidence_item(&id, body, &caller.name)
        .await?;
    Ok(Json(json!({ "evidence": changed })))
}

pub async fn add_check(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Body(body): Body<EvidenceCheck>,
) -> ApiResult<Json<serde_json::Value>> {
    let changed = state
        .engine
        .records()
        .add_evidence_check(&id, body, &caller.name)
        .await?;
    Ok(Json(json!({ "evidence": changed })))
}

/// A review as a person posts it: the reviewer is whoever is signed in.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewRequest {
    verdict: ReviewVerdict,
    #[serde(default)]
    comment: Option<String>,
    #[serde(default)]
    id: Option<String>,
}

pub async fn add_review(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Body(body): Body<ReviewRequest>,
) -> ApiResult<Json<serde_json::Value>> {
    let review = Review {
        id: body.id.unwrap_or_default(),
        reviewer: caller.name.clone(),
        verdict: body.verdict,
        comment: body.comment,
        at: None,
    };
    let changed = state
        .engine
        .records()
        .add_evidence_review(&id, review, &caller.name)
        .await?;
    Ok(Json(json!({ "evidence": changed })))
}
