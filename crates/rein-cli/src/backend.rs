//! Where a command's tasks live: the store opened here (embedded), or a running
//! `rein serve` reached over HTTP. Commands call the same operations on either and
//! print the same output.

use std::sync::Arc;

use rein_core::contracts::{ContractPage, EvidencePage};
use rein_core::store::{
    ApprovalFilter, RecordFilter, SharedStateFilter, SharedStatePage, SnapshotInfo, TaskFilter,
    TaskPage,
};
use rein_core::{ControlOutcome, Engine};
use rein_protocol::api::{
    ApprovalEnvelope, ConflictReport, ContractEnvelope, ControlResult, DecisionRequest,
    EvidenceEnvelope, List, PlanEnvelope, Reason, ResumeRequest, ResumeResult, ReviewRequest,
    SharedStateEnvelope, SnapshotEnvelope, StatusRequest, TakenSnapshot, TaskEnvelope, escape,
};
use rein_protocol::{
    Action, ApprovalId, ApprovalRequest, ApprovalResponse, Conflict, ContractStatus,
    EvidenceBundle, EvidenceCheck, EvidenceItem, HarnessContract, HarnessEvent, HarnessMetrics,
    LedgerEntry, Participant, Review, ReviewVerdict, SharedHarnessState, SnapshotId,
    TaskDecomposition, TaskId, TaskState, Timestamp,
};
use serde::Deserialize;

use crate::remote::Client;

#[derive(Debug, Clone)]
pub enum Backend {
    Local(Arc<Engine>),
    Remote(Client),
}

/// What a pause or abort did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Done: the task is now in this status.
    Applied,
    /// The task's live runner (this process id) was asked and will act shortly.
    Requested { pid: u32 },
    /// The task already was where it was asked to go.
    Already,
}

/// A snapshot just taken.
pub type Snapshot = TakenSnapshot;

/// What `rein evidence add-item | add-check | review` adds.
#[derive(Debug)]
pub enum EvidencePart {
    Item(EvidenceItem),
    Check(EvidenceCheck),
    Review {
        verdict: ReviewVerdict,
        comment: Option<String>,
    },
}

/// A record filter as the API's query parameters.
fn record_query(filter: &RecordFilter) -> Vec<(&'static str, String)> {
    let mut query = Vec::new();
    for (name, value) in [
        ("status", &filter.status),
        ("task_id", &filter.task_id),
        ("shared_state_id", &filter.shared_state_id),
        ("contract_id", &filter.contract_id),
        ("cursor", &filter.cursor),
    ] {
        if let Some(v) = value {
            query.push((name, v.clone()));
        }
    }
    if let Some(l) = filter.limit {
        query.push(("limit", l.to_string()));
    }
    query
}

/// Turns an empty JSON body (204) into `()`.
#[derive(Deserialize)]
struct Nothing;

impl Backend {
    pub fn is_remote(&self) -> bool {
        matches!(self, Backend::Remote(_))
    }

    /// The engine's clock here; the wall clock against a server.
    pub fn now(&self) -> Timestamp {
        match self {
            Backend::Local(engine) => engine.config().clock.now(),
            Backend::Remote(_) => chrono::Utc::now(),
        }
    }

    pub async fn get(&self, id: &TaskId) -> anyhow::Result<TaskState> {
        Ok(match self {
            Backend::Local(e) => e.get(id).await?,
            Backend::Remote(c) => c.task(id).await?,
        })
    }

    pub async fn plan(&self, id: &TaskId) -> anyhow::Result<TaskDecomposition> {
        Ok(match self {
            Backend::Local(e) => e.plan(id).await?,
            Backend::Remote(c) => {
                c.get::<PlanEnvelope>(&format!("admin/tasks/{id}/plan"), &[])
                    .await?
                    .plan
            }
        })
    }

    pub async fn events(
        &self,
        id: &TaskId,
        after: u64,
        limit: usize,
    ) -> anyhow::Result<Vec<HarnessEvent>> {
        Ok(match self {
            Backend::Local(e) => e.events(id, after, limit).await?,
            Backend::Remote(c) => {
                let query = [("after", after.to_string()), ("limit", limit.to_string())];
                c.get::<List<HarnessEvent>>(&format!("admin/tasks/{id}/events"), &query)
                    .await?
                    .items
            }
        })
    }

    pub async fn list(&self, filter: &TaskFilter) -> anyhow::Result<TaskPage> {
        Ok(match self {
            Backend::Local(e) => e.list(filter).await?,
            Backend::Remote(c) => {
                let mut query = Vec::new();
                if let Some(s) = &filter.session_id {
                    query.push(("session_id", s.clone()));
                }
                if let Some(s) = filter.status {
                    query.push(("status", s.as_str().to_owned()));
                }
                if let Some(t) = filter.created_from {
                    query.push(("created_from", t.to_rfc3339()));
                }
                if let Some(t) = filter.created_to {
                    query.push(("created_to", t.to_rfc3339()));
                }
                if let Some(l) = filter.limit {
                    query.push(("limit", l.to_string()));
                }
                if let Some(c) = &filter.cursor {
                    query.push(("cursor", c.clone()));
                }
                c.get::<TaskPage>("admin/tasks", &query).await?
            }
        })
    }

    /// Pauses (`abort == false`) or aborts a task, as `by` when embedded (a server
    /// records the token's name).
    pub async fn control(
        &self,
        id: &TaskId,
        abort: bool,
        by: &str,
        reason: &str,
    ) -> anyhow::Result<Control> {
        match self {
            Backend::Local(e) => {
                let outcome = if abort {
                    e.abort(id, by, reason).await?
                } else {
                    e.pause(id, by, reason).await?
                };
                Ok(match outcome {
                    ControlOutcome::Applied(_) => Control::Applied,
                    ControlOutcome::Requested { runner } => Control::Requested { pid: runner.pid },
                    ControlOutcome::AlreadyThere(_) => Control::Already,
                })
            }
            Backend::Remote(c) => {
                let what = if abort { "abort" } else { "pause" };
                let reason = Reason {
                    reason: Some(reason.to_owned()),
                };
                let body: ControlResult =
                    c.post(&format!("admin/tasks/{id}/{what}"), reason).await?;
                Ok(match body {
                    ControlResult::Applied { .. } => Control::Applied,
                    ControlResult::Requested { runner } => Control::Requested { pid: runner.pid },
                    ControlResult::Already { .. } => Control::Already,
                })
            }
        }
    }

    /// Asks the server to run a task (remote only; embedded runs are driven here).
    pub async fn start(
        &self,
        id: &TaskId,
        rerun: &[String],
        skip: &[String],
    ) -> anyhow::Result<()> {
        if let Backend::Remote(c) = self {
            let request = ResumeRequest {
                rerun: rerun.to_vec(),
                skip: skip.to_vec(),
            };
            let _: ResumeResult = c.post(&format!("admin/tasks/{id}/resume"), request).await?;
        }
        Ok(())
    }

    pub async fn snapshot(&self, id: &TaskId) -> anyhow::Result<Snapshot> {
        Ok(match self {
            Backend::Local(e) => {
                let s = e.snapshot(id).await?;
                Snapshot {
                    status: s.state.status(),
                    id: s.id,
                    task_id: s.task_id,
                    seq: s.seq,
                    created_at: s.created_at,
                }
            }
            Backend::Remote(c) => {
                c.call::<SnapshotEnvelope>(
                    reqwest::Method::POST,
                    &format!("admin/tasks/{id}/snapshots"),
                    &[],
                    None,
                )
                .await?
                .snapshot
            }
        })
    }

    pub async fn snapshots(&self, id: &TaskId) -> anyhow::Result<Vec<SnapshotInfo>> {
        Ok(match self {
            Backend::Local(e) => {
                e.get(id).await?;
                e.store().list_snapshots(id).await?
            }
            Backend::Remote(c) => {
                c.get::<List<SnapshotInfo>>(&format!("admin/tasks/{id}/snapshots"), &[])
                    .await?
                    .items
            }
        })
    }

    pub async fn restore(&self, id: &SnapshotId) -> anyhow::Result<TaskState> {
        Ok(match self {
            Backend::Local(e) => e.restore(id).await?,
            Backend::Remote(c) => {
                c.call::<TaskEnvelope>(
                    reqwest::Method::POST,
                    &format!("admin/snapshots/{id}/restore"),
                    &[],
                    None,
                )
                .await?
                .task
            }
        })
    }

    pub async fn delete(&self, id: &TaskId) -> anyhow::Result<()> {
        match self {
            Backend::Local(e) => e.delete(id).await?,
            Backend::Remote(c) => {
                let Nothing = c
                    .call(
                        reqwest::Method::DELETE,
                        &format!("admin/tasks/{id}"),
                        &[],
                        None,
                    )
                    .await?;
            }
        }
        Ok(())
    }

    pub async fn approvals(&self, filter: &ApprovalFilter) -> anyhow::Result<Vec<ApprovalRequest>> {
        Ok(match self {
            Backend::Local(e) => e.approvals(filter).await?,
            Backend::Remote(c) => {
                let mut query = vec![(
                    "status",
                    filter.status.map_or("all", |s| s.as_str()).to_owned(),
                )];
                if let Some(t) = &filter.task_id {
                    query.push(("task_id", t.to_string()));
                }
                if let Some(l) = filter.limit {
                    query.push(("limit", l.to_string()));
                }
                c.get::<List<ApprovalRequest>>("admin/approvals", &query)
                    .await?
                    .items
            }
        })
    }

    pub async fn approval(&self, id: &ApprovalId) -> anyhow::Result<ApprovalRequest> {
        Ok(match self {
            Backend::Local(e) => e.approval(id).await?,
            Backend::Remote(c) => {
                c.get::<ApprovalEnvelope>(&format!("admin/approvals/{id}"), &[])
                    .await?
                    .approval
            }
        })
    }

    /// Records a decision; a server records it as the token's name, not
    /// `response.decided_by`.
    pub async fn decide(&self, response: ApprovalResponse) -> anyhow::Result<ApprovalRequest> {
        Ok(match self {
            Backend::Local(e) => e.decide(response).await?,
            Backend::Remote(c) => {
                let body = DecisionRequest {
                    decision: response.decision,
                    selected_option: response.selected_option,
                    reason: response.reason,
                    delegate_to: response.delegate_to,
                };
                c.post::<ApprovalEnvelope>(
                    &format!("admin/approvals/{}/decision", response.request_id),
                    body,
                )
                .await?
                .approval
            }
        })
    }

    pub async fn ledger(&self) -> anyhow::Result<Vec<LedgerEntry>> {
        Ok(match self {
            Backend::Local(e) => e.ledger().await?,
            Backend::Remote(c) => c.get::<List<LedgerEntry>>("admin/ledger", &[]).await?.items,
        })
    }

    pub async fn verify_ledger(
        &self,
        head: Option<rein_protocol::LedgerHead>,
    ) -> anyhow::Result<rein_protocol::LedgerCheck> {
        Ok(match self {
            Backend::Local(e) => e.ledger_check(head).await?,
            Backend::Remote(c) => {
                let query: Vec<(&str, String)> =
                    head.iter().map(|h| ("head", h.to_string())).collect();
                c.get("admin/ledger/verify", &query).await?
            }
        })
    }

    pub async fn shared_states(
        &self,
        filter: &SharedStateFilter,
    ) -> anyhow::Result<SharedStatePage> {
        Ok(match self {
            Backend::Local(e) => e.shared_states(filter).await?,
            Backend::Remote(c) => {
                let mut query = Vec::new();
                if let Some(s) = &filter.session_id {
                    query.push(("session_id", s.clone()));
                }
                if let Some(s) = filter.status {
                    query.push(("status", s.as_str().to_owned()));
                }
                if let Some(t) = &filter.tag {
                    query.push(("tag", t.clone()));
                }
                if let Some(l) = filter.limit {
                    query.push(("limit", l.to_string()));
                }
                if let Some(c) = &filter.cursor {
                    query.push(("cursor", c.clone()));
                }
                c.get("admin/harness/shared-state", &query).await?
            }
        })
    }

    pub async fn shared_state(&self, id: &str) -> anyhow::Result<SharedHarnessState> {
        Ok(match self {
            Backend::Local(e) => e.shared_state(id).await?,
            Backend::Remote(c) => {
                c.get::<SharedStateEnvelope>(
                    &format!("admin/harness/shared-state/{}", escape(id)),
                    &[],
                )
                .await?
                .state
            }
        })
    }

    pub async fn session_shared_state(&self, session: &str) -> anyhow::Result<SharedHarnessState> {
        Ok(match self {
            Backend::Local(e) => e.session_shared_state(session).await?,
            Backend::Remote(c) => {
                c.get::<SharedStateEnvelope>(
                    &format!("admin/sessions/{}/harness-state", escape(session)),
                    &[],
                )
                .await?
                .state
            }
        })
    }

    pub async fn create_shared_state(
        &self,
        state: SharedHarnessState,
    ) -> anyhow::Result<SharedHarnessState> {
        Ok(match self {
            Backend::Local(e) => {
                e.create_shared_state(state, &crate::commands::actor(None))
                    .await?
            }
            Backend::Remote(c) => {
                c.post::<SharedStateEnvelope>(
                    "admin/harness/shared-state",
                    serde_json::to_value(state)?,
                )
                .await?
                .state
            }
        })
    }

    pub async fn add_participant(
        &self,
        id: &str,
        participant: Participant,
    ) -> anyhow::Result<SharedHarnessState> {
        Ok(match self {
            Backend::Local(e) => {
                e.add_participant(id, participant, &crate::commands::actor(None))
                    .await?
            }
            Backend::Remote(c) => {
                c.post::<SharedStateEnvelope>(
                    &format!("admin/harness/shared-state/{}/participants", escape(id)),
                    serde_json::to_value(participant)?,
                )
                .await?
                .state
            }
        })
    }

    pub async fn add_action(&self, id: &str, action: Action) -> anyhow::Result<SharedHarnessState> {
        Ok(match self {
            Backend::Local(e) => {
                e.add_action(id, action, &crate::commands::actor(None))
                    .await?
            }
            Backend::Remote(c) => {
                c.post::<SharedStateEnvelope>(
                    &format!("admin/harness/shared-state/{}/actions", escape(id)),
                    serde_json::to_value(action)?,
                )
                .await?
                .state
            }
        })
    }

    /// Runs detection; the state's conflict list is replaced.
    pub async fn detect_conflicts(&self, id: &str) -> anyhow::Result<Vec<Conflict>> {
        Ok(match self {
            Backend::Local(e) => {
                e.detect_conflicts(id, &crate::commands::actor(None))
                    .await?
                    .1
            }
            Backend::Remote(c) => {
                c.call::<ConflictReport>(
                    reqwest::Method::POST,
                    &format!("admin/harness/shared-state/{}/detect-conflicts", escape(id)),
                    &[],
                    None,
                )
                .await?
                .conflicts
            }
        })
    }

    pub async fn contracts(&self, filter: &RecordFilter) -> anyhow::Result<ContractPage> {
        Ok(match self {
            Backend::Local(e) => e.records().contracts(filter).await?,
            Backend::Remote(c) => {
                c.get("admin/harness/contracts", &record_query(filter))
                    .await?
            }
        })
    }

    pub async fn contract(&self, id: &str) -> anyhow::Result<HarnessContract> {
        Ok(match self {
            Backend::Local(e) => e.records().contract(id).await?,
            Backend::Remote(c) => {
                c.get::<ContractEnvelope>(&format!("admin/harness/contracts/{}", escape(id)), &[])
                    .await?
                    .contract
            }
        })
    }

    pub async fn create_contract(
        &self,
        contract: HarnessContract,
    ) -> anyhow::Result<HarnessContract> {
        Ok(match self {
            Backend::Local(e) => {
                e.records()
                    .create_contract(contract, &crate::commands::actor(None))
                    .await?
            }
            Backend::Remote(c) => {
                c.post::<ContractEnvelope>(
                    "admin/harness/contracts",
                    serde_json::to_value(contract)?,
                )
                .await?
                .contract
            }
        })
    }

    /// Moves a contract along its status flow.
    pub async fn move_contract(
        &self,
        id: &str,
        to: ContractStatus,
        reason: Option<String>,
    ) -> anyhow::Result<HarnessContract> {
        Ok(match self {
            Backend::Local(e) => {
                e.records()
                    .transition_contract(id, to, &crate::commands::actor(None), reason)
                    .await?
            }
            Backend::Remote(c) => {
                c.post::<ContractEnvelope>(
                    &format!("admin/harness/contracts/{}/status", escape(id)),
                    StatusRequest { status: to, reason },
                )
                .await?
                .contract
            }
        })
    }

    pub async fn evidence_bundles(&self, filter: &RecordFilter) -> anyhow::Result<EvidencePage> {
        Ok(match self {
            Backend::Local(e) => e.records().evidence_bundles(filter).await?,
            Backend::Remote(c) => {
                c.get("admin/harness/evidence", &record_query(filter))
                    .await?
            }
        })
    }

    pub async fn evidence(&self, id: &str) -> anyhow::Result<EvidenceBundle> {
        Ok(match self {
            Backend::Local(e) => e.records().evidence(id).await?,
            Backend::Remote(c) => {
                c.get::<EvidenceEnvelope>(&format!("admin/harness/evidence/{}", escape(id)), &[])
                    .await?
                    .evidence
            }
        })
    }

    pub async fn create_evidence(&self, bundle: EvidenceBundle) -> anyhow::Result<EvidenceBundle> {
        Ok(match self {
            Backend::Local(e) => {
                e.records()
                    .create_evidence(bundle, &crate::commands::actor(None))
                    .await?
            }
            Backend::Remote(c) => {
                c.post::<EvidenceEnvelope>("admin/harness/evidence", serde_json::to_value(bundle)?)
                    .await?
                    .evidence
            }
        })
    }

    /// Adds an item, a check or the caller's review to an evidence bundle.
    pub async fn add_evidence(
        &self,
        id: &str,
        part: EvidencePart,
    ) -> anyhow::Result<EvidenceBundle> {
        Ok(match self {
            Backend::Local(e) => {
                let records = e.records();
                let by = crate::commands::actor(None);
                match part {
                    EvidencePart::Item(item) => records.add_evidence_item(id, item, &by).await?,
                    EvidencePart::Check(check) => {
                        records.add_evidence_check(id, check, &by).await?
                    }
                    EvidencePart::Review { verdict, comment } => {
                        let review = Review {
                            id: String::new(),
                            reviewer: by.clone(),
                            verdict,
                            comment,
                            at: None,
                        };
                        records.add_evidence_review(id, review, &by).await?
                    }
                }
            }
            Backend::Remote(c) => {
                let (path, body) = match part {
                    EvidencePart::Item(item) => ("items", serde_json::to_value(item)?),
                    EvidencePart::Check(check) => ("checks", serde_json::to_value(check)?),
                    EvidencePart::Review { verdict, comment } => (
                        "reviews",
                        serde_json::to_value(ReviewRequest {
                            verdict,
                            comment,
                            id: None,
                        })?,
                    ),
                };
                c.post::<EvidenceEnvelope>(
                    &format!("admin/harness/evidence/{}/{path}", escape(id)),
                    body,
                )
                .await?
                .evidence
            }
        })
    }

    /// The health report of `/healthz`: each component probed for real.
    pub async fn health(&self) -> anyhow::Result<rein_protocol::api::Health> {
        Ok(match self {
            Backend::Local(e) => rein_server::health::check(e).await,
            Backend::Remote(c) => c.health().await?,
        })
    }

    pub async fn metrics(&self) -> anyhow::Result<HarnessMetrics> {
        Ok(match self {
            Backend::Local(e) => e.metrics().await?,
            Backend::Remote(c) => c.get("admin/metrics", &[]).await?,
        })
    }
}
