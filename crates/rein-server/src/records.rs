//! The routes of harness contracts and evidence bundles (spec shared-state §5):
//! list, show and create each; move a contract along its status flow; add
//! items, checks and reviews to a bundle. Reads need viewer, changes operator
//! (and CSRF from a browser session); every change writes an audit record.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rein_core::store::{RecordFilter, RecordKind};
use rein_protocol::api::{
    ContractEnvelope, ContractQuery, EvidenceEnvelope, EvidenceQuery, Page, ReviewRequest,
    StatusRequest,
};
use rein_protocol::{
    ContractStatus, EvidenceBundle, EvidenceCheck, EvidenceItem, HarnessContract, Review,
};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::routes::{Body, Caller};

/// What a listing of contracts or bundles filters on.
struct Filter {
    status: Option<String>,
    task_id: Option<String>,
    shared_state_id: Option<String>,
    contract_id: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

fn filter(kind: RecordKind, q: Filter) -> ApiResult<RecordFilter> {
    if let Some(s) = &q.status {
        parse_status(s)?;
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
    query: Result<Query<ContractQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Page<HarnessContract>>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let q = Filter {
        status: q.status,
        task_id: q.task_id,
        shared_state_id: q.shared_state_id,
        contract_id: None,
        limit: q.limit,
        cursor: q.cursor,
    };
    let page = state
        .engine
        .records()
        .contracts(&filter(RecordKind::Contract, q)?)
        .await?;
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
    query: Result<Query<EvidenceQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Page<EvidenceBundle>>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let q = Filter {
        status: None,
        task_id: q.task_id,
        shared_state_id: q.shared_state_id,
        contract_id: q.contract_id,
        limit: q.limit,
        cursor: q.cursor,
    };
    let page = state
        .engine
        .records()
        .evidence_bundles(&filter(RecordKind::Evidence, q)?)
        .await?;
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
