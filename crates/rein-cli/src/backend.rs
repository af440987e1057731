//! Where a command's tasks live: the store opened here (embedded), or a
//! running `rein serve` reached over HTTP. Either way a command calls the
//! admin API's operations through one [`Client`]: embedded, the server's own
//! router answers in this process, over the store here. So each operation
//! has one code path, and local and remote output are the same by
//! construction.
//!
//! What is not an API call stays with the engine: embedded, `rein run` and
//! `rein tasks resume` drive their tasks in this process.

use std::sync::Arc;

use rein_core::Engine;
use rein_core::contracts::{ContractPage, EvidencePage};
use rein_core::store::{
    ApprovalFilter, RecordFilter, SharedStateFilter, SharedStatePage, SnapshotInfo, TaskFilter,
    TaskPage,
};
use rein_protocol::api::{
    ControlResult, DecisionRequest, LogQuery, Reason, ResumeRequest, ReviewRequest, StatusRequest,
    TakenSnapshot, VerifyQuery,
};
use rein_protocol::endpoints as op;
use rein_protocol::{
    Action, ApprovalId, ApprovalRequest, ApprovalResponse, Conflict, ContractStatus,
    EvidenceBundle, EvidenceCheck, EvidenceItem, HarnessContract, HarnessEvent, HarnessMetrics,
    LedgerEntry, Participant, ReviewVerdict, SharedHarnessState, SnapshotId, TaskDecomposition,
    TaskId, TaskState, Timestamp,
};

use crate::client::Client;

#[derive(Debug, Clone)]
pub struct Backend {
    client: Client,
    /// Embedded: the engine over the store here, which the router answering
    /// [`Backend::client`] serves (its clock is the one `now` reads).
    engine: Option<Arc<Engine>>,
}

/// Who a decision comes from: `--as`, else $REIN_USER, else $USER, else the
/// operating system's name for this process's user, else "cli".
pub fn actor(flag: Option<&str>) -> String {
    let named = |s: String| Some(s).filter(|s| !s.trim().is_empty());
    flag.map(str::to_owned)
        .and_then(named)
        .or_else(|| std::env::var("REIN_USER").ok().and_then(named))
        .or_else(|| std::env::var("USER").ok().and_then(named))
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map(|u| u.name)
                .and_then(named)
        })
        .unwrap_or_else(|| "cli".to_owned())
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
    Item(Box<EvidenceItem>),
    Check(Box<EvidenceCheck>),
    Review {
        verdict: ReviewVerdict,
        comment: Option<String>,
    },
}

/// What the embedded router serves besides the engine.
#[derive(Debug, Default)]
pub struct Serving {
    /// The harnesses the engine's runs select from (the harness and session
    /// commands report and use them).
    pub harnesses: Option<Arc<rein_core::harness::Harnesses>>,
    /// Models' prices, for what usage cost.
    pub models: rein_protocol::Models,
}

impl Backend {
    /// A running server's API.
    pub fn remote(client: Client) -> Backend {
        Backend {
            client,
            engine: None,
        }
    }

    /// The API served in this process over `engine`, called as the user
    /// running the command (`actor`) as an operator: every
    /// operation is open to them, but, as for an operator of a server, a
    /// request delegated to someone else is that person's to decide (only
    /// an admin token may override a delegation).
    pub fn local(engine: Arc<Engine>, serving: Serving) -> Backend {
        let mut state = rein_server::AppState::new(
            Arc::clone(&engine),
            rein_server::Auth::new(Vec::new()),
            tokio_util::sync::CancellationToken::new(),
        )
        .with_models(serving.models);
        if let Some(harnesses) = serving.harnesses {
            state = state.with_harnesses(harnesses);
        }
        let caller = rein_server::auth::Principal {
            name: actor(None),
            role: rein_server::Role::Operator,
            cookie: false,
        };
        Backend {
            client: Client::in_process(rein_server::router(state), caller),
            engine: Some(engine),
        }
    }

    /// The API, as every operation below calls it.
    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn is_remote(&self) -> bool {
        self.engine.is_none()
    }

    /// The engine's clock here; the wall clock against a server.
    pub fn now(&self) -> Timestamp {
        match &self.engine {
            Some(engine) => engine.config().clock.now(),
            None => chrono::Utc::now(),
        }
    }

    pub async fn get(&self, id: &TaskId) -> anyhow::Result<TaskState> {
        Ok(self.client.task(id).await?)
    }

    pub async fn plan(&self, id: &TaskId) -> anyhow::Result<TaskDecomposition> {
        Ok(self.client.call::<op::TaskPlan>(id, &(), &()).await?.plan)
    }

    pub async fn events(
        &self,
        id: &TaskId,
        after: u64,
        limit: usize,
    ) -> anyhow::Result<Vec<HarnessEvent>> {
        let query = LogQuery {
            after: Some(after),
            limit: Some(limit),
        };
        Ok(self
            .client
            .call::<op::TaskEvents>(id, &query, &())
            .await?
            .items)
    }

    pub async fn list(&self, filter: &TaskFilter) -> anyhow::Result<TaskPage> {
        Ok(self
            .client
            .call::<op::ListTasks>(&(), &filter.query(), &())
            .await?)
    }

    /// Pauses (`abort == false`) or aborts a task, as `by` here (a server
    /// records the token's name).
    pub async fn control(
        &self,
        id: &TaskId,
        abort: bool,
        by: &str,
        reason: &str,
    ) -> anyhow::Result<Control> {
        let reason = Reason {
            reason: Some(reason.to_owned()),
        };
        let client = self.client.acting_as(by);
        let result = if abort {
            client.call::<op::AbortTask>(id, &(), &reason).await?
        } else {
            client.call::<op::PauseTask>(id, &(), &reason).await?
        };
        Ok(match result {
            ControlResult::Applied { .. } => Control::Applied,
            ControlResult::Requested { runner } => Control::Requested { pid: runner.pid },
            ControlResult::Already { .. } => Control::Already,
        })
    }

    /// Asks the server to run a task (remote only; embedded runs are driven here).
    pub async fn start(
        &self,
        id: &TaskId,
        rerun: &[String],
        skip: &[String],
    ) -> anyhow::Result<()> {
        if self.is_remote() {
            let request = ResumeRequest {
                rerun: rerun.to_vec(),
                skip: skip.to_vec(),
            };
            self.client
                .call::<op::ResumeTask>(id, &(), &request)
                .await?;
        }
        Ok(())
    }

    pub async fn snapshot(&self, id: &TaskId) -> anyhow::Result<Snapshot> {
        Ok(self
            .client
            .call::<op::TakeSnapshot>(id, &(), &())
            .await?
            .snapshot)
    }

    pub async fn history(&self, id: &TaskId) -> anyhow::Result<rein_protocol::History> {
        Ok(self.client.call::<op::TaskHistory>(id, &(), &()).await?)
    }

    pub async fn snapshots(&self, id: &TaskId) -> anyhow::Result<Vec<SnapshotInfo>> {
        Ok(self
            .client
            .call::<op::ListSnapshots>(id, &(), &())
            .await?
            .items)
    }

    pub async fn restore(&self, id: &SnapshotId) -> anyhow::Result<TaskState> {
        Ok(self
            .client
            .call::<op::RestoreSnapshot>(id, &(), &())
            .await?
            .task)
    }

    pub async fn delete(&self, id: &TaskId) -> anyhow::Result<()> {
        Ok(self.client.call::<op::DeleteTask>(id, &(), &()).await?)
    }

    pub async fn approvals(&self, filter: &ApprovalFilter) -> anyhow::Result<Vec<ApprovalRequest>> {
        Ok(self
            .client
            .call::<op::ListApprovals>(&(), &filter.query(), &())
            .await?
            .items)
    }

    pub async fn approval(&self, id: &ApprovalId) -> anyhow::Result<ApprovalRequest> {
        Ok(self
            .client
            .call::<op::ShowApproval>(id, &(), &())
            .await?
            .approval)
    }

    /// Records a decision as `response.decided_by` here; a server records it
    /// as the token's name.
    pub async fn decide(&self, response: ApprovalResponse) -> anyhow::Result<ApprovalRequest> {
        let body = DecisionRequest {
            decision: response.decision,
            selected_option: response.selected_option,
            reason: response.reason,
            delegate_to: response.delegate_to,
        };
        Ok(self
            .client
            .acting_as(&response.decided_by)
            .call::<op::Decide>(&response.request_id, &(), &body)
            .await?
            .approval)
    }

    pub async fn ledger(&self) -> anyhow::Result<Vec<LedgerEntry>> {
        Ok(self.client.call::<op::Ledger>(&(), &(), &()).await?.items)
    }

    pub async fn add_governance(
        &self,
        add: &rein_protocol::GovernanceAdd,
    ) -> anyhow::Result<rein_protocol::GovernanceEntry> {
        Ok(self
            .client
            .call::<op::AddGovernance>(&(), &(), add)
            .await?
            .entry)
    }

    pub async fn revoke_governance(
        &self,
        id: &str,
        request: &rein_protocol::RevokeRequest,
    ) -> anyhow::Result<rein_protocol::GovernanceEntry> {
        Ok(self
            .client
            .call::<op::RevokeGovernance>(id, &(), request)
            .await?
            .entry)
    }

    pub async fn verify_ledger(
        &self,
        head: Option<rein_protocol::LedgerHead>,
    ) -> anyhow::Result<rein_protocol::LedgerCheck> {
        let query = VerifyQuery {
            head: head.map(|h| h.to_string()),
        };
        Ok(self
            .client
            .call::<op::VerifyLedger>(&(), &query, &())
            .await?)
    }

    pub async fn shared_states(
        &self,
        filter: &SharedStateFilter,
    ) -> anyhow::Result<SharedStatePage> {
        Ok(self
            .client
            .call::<op::ListSharedStates>(&(), &filter.query(), &())
            .await?)
    }

    pub async fn shared_state(&self, id: &str) -> anyhow::Result<SharedHarnessState> {
        Ok(self
            .client
            .call::<op::ShowSharedState>(id, &(), &())
            .await?
            .state)
    }

    pub async fn session_shared_state(&self, session: &str) -> anyhow::Result<SharedHarnessState> {
        Ok(self
            .client
            .call::<op::SessionSharedState>(session, &(), &())
            .await?
            .state)
    }

    pub async fn create_shared_state(
        &self,
        state: SharedHarnessState,
    ) -> anyhow::Result<SharedHarnessState> {
        Ok(self
            .client
            .call::<op::CreateSharedState>(&(), &(), &state)
            .await?
            .state)
    }

    pub async fn add_participant(
        &self,
        id: &str,
        participant: Participant,
    ) -> anyhow::Result<SharedHarnessState> {
        Ok(self
            .client
            .call::<op::AddParticipant>(id, &(), &participant)
            .await?
            .state)
    }

    pub async fn add_action(&self, id: &str, action: Action) -> anyhow::Result<SharedHarnessState> {
        Ok(self
            .client
            .call::<op::AddAction>(id, &(), &action)
            .await?
            .state)
    }

    /// Runs detection; the state's conflict list is replaced.
    pub async fn detect_conflicts(&self, id: &str) -> anyhow::Result<Vec<Conflict>> {
        Ok(self
            .client
            .call::<op::DetectConflicts>(id, &(), &())
            .await?
            .conflicts)
    }

    pub async fn contracts(&self, filter: &RecordFilter) -> anyhow::Result<ContractPage> {
        Ok(self
            .client
            .call::<op::ListContracts>(&(), &filter.contract_query(), &())
            .await?)
    }

    pub async fn contract(&self, id: &str) -> anyhow::Result<HarnessContract> {
        Ok(self
            .client
            .call::<op::ShowContract>(id, &(), &())
            .await?
            .contract)
    }

    pub async fn create_contract(
        &self,
        contract: HarnessContract,
    ) -> anyhow::Result<HarnessContract> {
        Ok(self
            .client
            .call::<op::CreateContract>(&(), &(), &contract)
            .await?
            .contract)
    }

    /// Moves a contract along its status flow.
    pub async fn move_contract(
        &self,
        id: &str,
        to: ContractStatus,
        reason: Option<String>,
    ) -> anyhow::Result<HarnessContract> {
        let request = StatusRequest { status: to, reason };
        Ok(self
            .client
            .call::<op::ChangeContractStatus>(id, &(), &request)
            .await?
            .contract)
    }

    pub async fn evidence_bundles(&self, filter: &RecordFilter) -> anyhow::Result<EvidencePage> {
        Ok(self
            .client
            .call::<op::ListEvidence>(&(), &filter.evidence_query(), &())
            .await?)
    }

    pub async fn evidence(&self, id: &str) -> anyhow::Result<EvidenceBundle> {
        Ok(self
            .client
            .call::<op::ShowEvidence>(id, &(), &())
            .await?
            .evidence)
    }

    pub async fn create_evidence(&self, bundle: EvidenceBundle) -> anyhow::Result<EvidenceBundle> {
        Ok(self
            .client
            .call::<op::CreateEvidence>(&(), &(), &bundle)
            .await?
            .evidence)
    }

    /// Adds an item, a check or the caller's review to an evidence bundle.
    pub async fn add_evidence(
        &self,
        id: &str,
        part: EvidencePart,
    ) -> anyhow::Result<EvidenceBundle> {
        let added = match part {
            EvidencePart::Item(item) => {
                self.client
                    .call::<op::AddEvidenceItem>(id, &(), &item)
                    .await?
            }
            EvidencePart::Check(check) => {
                self.client
                    .call::<op::AddEvidenceCheck>(id, &(), &check)
                    .await?
            }
            EvidencePart::Review { verdict, comment } => {
                let review = ReviewRequest {
                    verdict,
                    comment,
                    id: None,
                };
                self.client
                    .call::<op::AddEvidenceReview>(id, &(), &review)
                    .await?
            }
        };
        Ok(added.evidence)
    }

    /// The health report of `/healthz`: each component probed for real.
    pub async fn health(&self) -> anyhow::Result<rein_protocol::api::Health> {
        Ok(self.client.health().await?)
    }

    pub async fn metrics(&self) -> anyhow::Result<HarnessMetrics> {
        Ok(self.client.call::<op::Metrics>(&(), &(), &()).await?)
    }
}
