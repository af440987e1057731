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
    ConfidenceLevel, ContractStatus, EvidenceBundle, EvidenceCheck, EvidenceItem, HarnessContract,
    Review, Risk,
};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::routes::{Body, Caller, one_of, parse_time};

/// What a listing of contracts or bundles filters on beyond its own
/// fields: the seed's filters (actor, channel, source session, tag, times).
struct Seed {
    tag: Option<String>,
    actor_id: Option<String>,
    channel_id: Option<String>,
    source_session_id: Option<String>,
    created_from: Option<String>,
    created_to: Option<String>,
}

/// The seed's filters of a contract or evidence query (the same fields).
macro_rules! seed_of {
    ($q:expr) => {
        Seed {
            tag: $q.tag,
            actor_id: $q.actor_id,
            channel_id: $q.channel_id,
            source_session_id: $q.source_session_id,
            created_from: $q.created_from,
            created_to: $q.created_to,
        }
    };
}

impl Seed {
    fn into_filter(self, mut f: RecordFilter) -> ApiResult<RecordFilter> {
        f.tag = self.tag;
        f.created_from = parse_time("createdFromUtc", &self.created_from)?;
        f.created_to = parse_time("createdToUtc", &self.created_to)?;
        let named = [
            ("actorId", self.actor_id),
            ("channelId", self.channel_id),
            ("sourceSessionId", self.source_session_id),
        ];
        f.fields
            .extend(named.into_iter().filter_map(|(n, v)| Some((n, v?))));
        Ok(f)
    }
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
    if let Some(s) = &q.status {
        parse_status(s)?;
    }
    let mut f = RecordFilter::new(RecordKind::Contract);
    f.status = q.status;
    f.task_id = q.task_id;
    f.shared_state_id = q.shared_state_id;
    f.limit = q.limit;
    f.cursor = q.cursor;
    let risk: Option<Risk> = one_of(
        "riskLevel",
        &q.risk_level,
        "unknown, low, medium, high, critical",
    )?;
    if let Some(risk) = risk {
        f.fields.push(("riskLevel", risk.as_str().to_owned()));
    }
    let seed = seed_of!(q);
    let page = state
        .engine
        .records()
        .contracts(&seed.into_filter(f)?)
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
    let mut f = RecordFilter::new(RecordKind::Evidence);
    f.task_id = q.task_id;
    f.shared_state_id = q.shared_state_id;
    f.contract_id = q.contract_id;
    f.limit = q.limit;
    f.cursor = q.cursor;
    let level: Option<ConfidenceLevel> =
        one_of("confidence", &q.confidence, "unknown, low, medium, high")?;
    if let Some(level) = level {
        f.fields.push(("confidence", level.as_str().to_owned()));
    }
    if let Some(l) = q.learning_proposal_id {
        f.fields.push(("learningProposalId", l));
    }
    let seed = seed_of!(q);
    let page = state
        .engine
        .records()
        .evidence_bundles(&seed.into_filter(f)?)
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
