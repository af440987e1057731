//! The routes of harness contracts and evidence bundles (spec shared-state §5):
//! list, show and create each; move a contract along its status flow; add
//! items, checks and reviews to a bundle. Reads need viewer, changes operator
//! (and CSRF from a browser session); every change writes an audit record.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rein_core::store::RecordFilter;
use rein_protocol::api::{
    ContractEnvelope, ContractQuery, EvidenceEnvelope, EvidenceQuery, Page, ReviewRequest,
    StatusRequest,
};
use rein_protocol::{EvidenceBundle, EvidenceCheck, EvidenceItem, HarnessContract, Review};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::routes::{Body, Caller, Params};

pub async fn list_contracts(
    State(state): State<AppState>,
    Params(q): Params<ContractQuery>,
) -> ApiResult<Json<Page<HarnessContract>>> {
    let filter = RecordFilter::of_contract_query(q).map_err(ApiError::bad_request)?;
    let page = state.engine.records().contracts(&filter).await?;
    Ok(Json(page))
}

pub async fn show_contract(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<ContractEnvelope>> {
    let contract = state.engine.records().contract(&id).await?;
    Ok(Json(ContractEnvelope { contract }))
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
    Ok((
        StatusCode::CREATED,
        Json(ContractEnvelope { contract: created }),
    )
        .into_response())
}

pub async fn change_status(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Body(body): Body<StatusRequest>,
) -> ApiResult<Json<ContractEnvelope>> {
    let changed = state
        .engine
        .records()
        .transition_contract(&id, body.status, &caller.name, body.reason)
        .await?;
    Ok(Json(ContractEnvelope { contract: changed }))
}

pub async fn list_evidence(
    State(state): State<AppState>,
    Params(q): Params<EvidenceQuery>,
) -> ApiResult<Json<Page<EvidenceBundle>>> {
    let filter = RecordFilter::of_evidence_query(q).map_err(ApiError::bad_request)?;
    let page = state.engine.records().evidence_bundles(&filter).await?;
    Ok(Json(page))
}

pub async fn show_evidence(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<EvidenceEnvelope>> {
    let evidence = state.engine.records().evidence(&id).await?;
    Ok(Json(EvidenceEnvelope { evidence }))
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
    Ok((
        StatusCode::CREATED,
        Json(EvidenceEnvelope { evidence: created }),
    )
        .into_response())
}

pub async fn add_item(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Body(body): Body<EvidenceItem>,
) -> ApiResult<Json<EvidenceEnvelope>> {
    let changed = state
        .engine
        .records()
        .add_evidence_item(&id, body, &caller.name)
        .await?;
    Ok(Json(EvidenceEnvelope { evidence: changed }))
}

pub async fn add_check(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Body(body): Body<EvidenceCheck>,
) -> ApiResult<Json<EvidenceEnvelope>> {
    let changed = state
        .engine
        .records()
        .add_evidence_check(&id, body, &caller.name)
        .await?;
    Ok(Json(EvidenceEnvelope { evidence: changed }))
}

pub async fn add_review(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Body(body): Body<ReviewRequest>,
) -> ApiResult<Json<EvidenceEnvelope>> {
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
    Ok(Json(EvidenceEnvelope { evidence: changed }))
}
