//! Human decisions: the engine's side of approval requests (spec `tasks.md` §4) and
//! the governance ledger (spec `shared-state.md` §5).
//!
//! A request's `pending` status in the store is the compare-and-set point: the first
//! valid decision wins, and the ledger entry is appended in the same transaction. A
//! decision made in this process reaches the waiting runner at once; one made in
//! another process is picked up by the runner's poll of the store.

use rein_protocol::ledger::{ChainBreak, LedgerCheck, LedgerHead, verify_against};
use rein_protocol::{
    ApprovalId, ApprovalRequest, ApprovalResponse, ApprovalStatus, Decision, LedgerEntry, LedgerId,
    LedgerKind,
};

use crate::context::RunContext;
use crate::error::{EngineError, Result};
use crate::lifecycle::{ApprovalEvent, Approvals, Machine};
use crate::store::{ApprovalFilter, StoreError};

/// Who settles a request whose deadline passed.
pub const EXPIRY_ACTOR: &str = "system:deadline";
/// Who withdraws a request whose task no longer needs it.
pub const REVOKE_ACTOR: &str = "system:revoked";

impl RunContext {
    /// A request, with its deadline honoured: one past its deadline is expired first.
    pub async fn approval(&self, id: &ApprovalId) -> Result<ApprovalRequest> {
        let request = self
            .store
            .get_approval(id)
            .await?
            .ok_or_else(|| EngineError::ApprovalNotFound(id.clone()))?;
        self.expire_if_overdue(request).await
    }

    /// Requests, newest first, with deadlines honoured.
    pub async fn approvals(&self, filter: &ApprovalFilter) -> Result<Vec<ApprovalRequest>> {
        self.expire_overdue().await?;
        Ok(self.store.list_approvals(filter).await?)
    }

    /// Records a person's decision. The first valid decision wins; a later one gets
    /// [`EngineError::AlreadyDecided`] naming the first. `delegate` hands the request
    /// to another approver and keeps it pending; from then on only that
    /// approver may decide it (or delegate it on), [`EngineError::NotAssigned`]
    /// for anyone else.
    pub async fn decide(&self, response: ApprovalResponse) -> Result<ApprovalRequest> {
        self.decide_as(response, false).await
    }

    /// [`RunContext::decide`] by an admin, who may decide a request delegated to
    /// someone else.
    pub async fn decide_overriding(&self, response: ApprovalResponse) -> Result<ApprovalRequest> {
        self.decide_as(response, true).await
    }

    async fn decide_as(
        &self,
        mut response: ApprovalResponse,
        admin: bool,
    ) -> Result<ApprovalRequest> {
        let request = self.approval(&response.request_id).await?;
        // Settled already: the first decision wins, and is named.
        let Ok(status) = Approvals::next(request.status, ApprovalEvent::of(response.decision))
        else {
            return Err(EngineError::AlreadyDecided {
                current: Box::new(request),
            });
        };
        if let Some(assigned_to) = &request.assigned_to
            && !admin
            && assigned_to.trim() != response.decided_by.trim()
        {
            return Err(EngineError::NotAssigned {
                id: request.id.clone(),
                assigned_to: assigned_to.clone(),
                by: response.decided_by.clone(),
            });
        }
        check_response(&request, &mut response)?;
        let mut updated = request.clone();
        updated.status = status;
        if response.decision == Decision::Delegate {
            updated.assigned_to = response.delegate_to.clone();
        }
        let kind = match response.decision {
            Decision::Approve => LedgerKind::Approved,
            Decision::Deny => LedgerKind::Rejected,
            Decision::Skip => LedgerKind::Skipped,
            Decision::Delegate => LedgerKind::Delegated,
        };
        let mut entry = ledger_entry(
            &request,
            kind,
            &response.decided_by,
            response.reason.clone(),
        );
        entry.selected_option = response.selected_option.clone();
        if let Some(to) = &response.delegate_to {
            entry.scope.push_str(&format!(" delegated-to:{to}"));
        }
        updated.response = Some(response);
        self.settle(updated, entry).await
    }

    /// Expires every pending request whose deadline has passed.
    pub async fn expire_overdue(&self) -> Result<Vec<ApprovalRequest>> {
        let pending = self
            .store
            .list_approvals(&ApprovalFilter {
                status: Some(ApprovalStatus::Pending),
                limit: Some(crate::store::MAX_APPROVALS_PAGE),
                ..ApprovalFilter::default()
            })
            .await?;
        let mut expired = Vec::new();
        for request in pending {
            if self.is_overdue(&request) {
                expired.push(self.expire_if_overdue(request).await?);
            }
        }
        Ok(expired)
    }

    /// The counters of spec §6 rule 21 (deadlines honoured first, so that expired
    /// requests count as expired).
    pub async fn metrics(&self) -> Result<rein_protocol::HarnessMetrics> {
        self.expire_overdue().await?;
        Ok(self.store.metrics().await?)
    }

    /// The ledger, oldest first.
    pub async fn ledger(&self) -> Result<Vec<LedgerEntry>> {
        let mut all = Vec::new();
        loop {
            let after = all.last().map_or(0, |e: &LedgerEntry| e.seq);
            let page = self.store.ledger(after, 1000).await?;
            if page.is_empty() {
                return Ok(all);
            }
            all.extend(page);
        }
    }

    /// Appends a decision recorded by hand (the seed's governance entry):
    /// `decidedBy`, or `caller` when not given, decided it. A field rein sets
    /// (`id`, times, a revocation's) is refused naming it.
    pub async fn add_governance(
        &self,
        add: rein_protocol::GovernanceAdd,
        caller: &str,
    ) -> Result<rein_protocol::GovernanceEntry> {
        if let Some(why) = add.set_by_rein() {
            return Err(EngineError::BadRequest(why));
        }
        let who = add
            .decided_by
            .filter(|w| !w.trim().is_empty())
            .unwrap_or_else(|| caller.to_owned());
        let details = add.details;
        let scope = details.scope_key.clone().unwrap_or_else(|| {
            if details.action_summary.is_empty() {
                details.scope.as_str().to_owned()
            } else {
                details.action_summary.clone()
            }
        });
        let mut entry = LedgerEntry::new(add.decision, &who, scope);
        entry.reason = add.decision_reason;
        entry.details = Some(Box::new(details));
        let sealed = self.store.append_ledger(entry).await?;
        Ok(rein_protocol::GovernanceEntry::of(
            &sealed,
            None,
            chrono::Utc::now(),
        ))
    }

    /// Takes an entry back: appends a `revoked` entry that names it, by
    /// `revoked_by` (the caller when not given). The entry itself is never
    /// changed; it reads as revoked from then on. Refused (409) for an entry
    /// already revoked or one that is itself a revocation.
    pub async fn revoke_governance(
        &self,
        id: &str,
        request: rein_protocol::RevokeRequest,
        caller: &str,
    ) -> Result<rein_protocol::GovernanceEntry> {
        let target: LedgerId = id
            .parse()
            .map_err(|_| EngineError::Store(StoreError::LedgerEntryNotFound(id.to_owned())))?;
        let who = request
            .revoked_by
            .filter(|w| !w.trim().is_empty())
            .unwrap_or_else(|| caller.to_owned());
        let mut entry = LedgerEntry::new(LedgerKind::Revoked, &who, format!("ledger:{target}"));
        entry.reason = request.reason;
        entry.revokes = Some(target);
        self.store.append_ledger(entry).await?;
        self.governance_entry(id).await
    }

    /// The ledger in the seed's terms, newest first, each entry's status as of
    /// now, filtered as the seed's list query says.
    pub async fn governance(
        &self,
        keep: impl Fn(&rein_protocol::GovernanceEntry) -> bool,
        limit: usize,
    ) -> Result<Vec<rein_protocol::GovernanceEntry>> {
        let entries = self.ledger().await?;
        let now = chrono::Utc::now();
        let revocations: std::collections::HashMap<&LedgerId, &LedgerEntry> = entries
            .iter()
            .filter_map(|e| e.revokes.as_ref().map(|t| (t, e)))
            .collect();
        Ok(entries
            .iter()
            .rev()
            .map(|e| rein_protocol::GovernanceEntry::of(e, revocations.get(&e.id).copied(), now))
            .filter(|e| keep(e))
            .take(limit)
            .collect())
    }

    /// One entry in the seed's terms.
    pub async fn governance_entry(&self, id: &str) -> Result<rein_protocol::GovernanceEntry> {
        self.governance(|e| e.id == id, 1)
            .await?
            .pop()
            .ok_or_else(|| EngineError::Store(StoreError::LedgerEntryNotFound(id.to_owned())))
    }

    /// Every break in the ledger's hash chain (none when it is intact), and how many
    /// entries were checked.
    pub async fn verify_ledger(&self) -> Result<(usize, Vec<ChainBreak>)> {
        let (entries, problems, _) = self.check_ledger(None).await?;
        Ok((entries, problems))
    }

    /// The ledger checked, against `head` (recorded earlier) if given: what was
    /// found, with the head now. An entry whose stored bytes cannot be read is
    /// a problem named like any other, not an error.
    pub async fn check_ledger(
        &self,
        head: Option<&LedgerHead>,
    ) -> Result<(usize, Vec<ChainBreak>, Option<LedgerHead>)> {
        let entries = match self.ledger().await {
            Ok(entries) => entries,
            Err(EngineError::Store(StoreError::Corrupt(detail))) => {
                return Ok((0, vec![ChainBreak::Damaged { detail }], None));
            }
            Err(e) => return Err(e),
        };
        let mut problems = verify_against(&entries, head);
        // Entries the store lost with committed writes: the ledger is checked
        // against its head as recorded then, for good.
        for lost in self.store.lost_writes().await? {
            let Some(head) = lost.ledger_head else {
                continue;
            };
            if !entries
                .iter()
                .any(|e| e.seq == head.seq && e.hash == head.hash)
            {
                problems.push(ChainBreak::Lost {
                    head,
                    detected_at: lost.detected_at.to_rfc3339(),
                    acknowledged: lost.acknowledged_at.is_some(),
                });
            }
        }
        Ok((entries.len(), problems, LedgerHead::of(&entries)))
    }

    /// [`RunContext::check_ledger`] as the wire shape.
    pub async fn ledger_check(&self, head: Option<LedgerHead>) -> Result<LedgerCheck> {
        let (entries, problems, now) = self.check_ledger(head.as_ref()).await?;
        Ok(LedgerCheck {
            entries: entries as u64,
            intact: problems.is_empty(),
            problems: problems.iter().map(ToString::to_string).collect(),
            head: now,
            against: head,
        })
    }

    /// Withdraws a pending request nobody needs to answer any more (its task was
    /// aborted or stopped): it is denied by the system and recorded as revoked.
    pub(crate) async fn revoke(
        &self,
        request: ApprovalRequest,
        why: &str,
    ) -> Result<ApprovalRequest> {
        let Ok(status) = Approvals::next(request.status, ApprovalEvent::Revoke) else {
            return Ok(request);
        };
        let entry = ledger_entry(
            &request,
            LedgerKind::Revoked,
            REVOKE_ACTOR,
            Some(why.to_owned()),
        );
        let mut updated = request.clone();
        updated.status = status;
        updated.response = Some(ApprovalResponse {
            request_id: request.id.clone(),
            decision: Decision::Deny,
            selected_option: None,
            reason: Some(why.to_owned()),
            decided_by: REVOKE_ACTOR.to_owned(),
            delegate_to: None,
            decided_at: chrono::Utc::now(),
        });
        match self.settle(updated, entry).await {
            Ok(revoked) => Ok(revoked),
            Err(EngineError::AlreadyDecided { current }) => Ok(*current),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn is_overdue(&self, request: &ApprovalRequest) -> bool {
        request.status == ApprovalStatus::Pending
            && request
                .deadline
                .is_some_and(|d| d <= self.config.clock.now())
    }

    /// Expires `request` if its deadline passed and it is still pending; returns it
    /// as it now is (whoever settled it first).
    pub(crate) async fn expire_if_overdue(
        &self,
        request: ApprovalRequest,
    ) -> Result<ApprovalRequest> {
        if !self.is_overdue(&request) {
            return Ok(request);
        }
        let Ok(status) = Approvals::next(request.status, ApprovalEvent::Expire) else {
            return Ok(request);
        };
        let reason = format!(
            "no decision before the deadline; the default `{}` applies",
            request.on_expiry.as_str()
        );
        let entry = ledger_entry(&request, LedgerKind::Expired, EXPIRY_ACTOR, Some(reason));
        let mut updated = request;
        updated.status = status;
        match self.settle(updated, entry).await {
            Ok(expired) => Ok(expired),
            Err(EngineError::AlreadyDecided { current }) => Ok(*current),
            Err(e) => Err(e),
        }
    }

    async fn settle(
        &self,
        updated: ApprovalRequest,
        entry: LedgerEntry,
    ) -> Result<ApprovalRequest> {
        match self.store.settle_approval(&updated, entry).await {
            Ok(_) => {
                self.controls.deliver(&updated);
                Ok(updated)
            }
            Err(StoreError::NotPending { current }) => Err(EngineError::AlreadyDecided { current }),
            Err(e) => Err(e.into()),
        }
    }
}

/// Checks a response against its request, filling in the recommended option when an
/// approval of a request with options names none.
fn check_response(request: &ApprovalRequest, response: &mut ApprovalResponse) -> Result<()> {
    let bad = |m: String| Err(EngineError::BadRequest(m));
    if response.decided_by.trim().is_empty() {
        return bad("a decision needs the name of who made it".into());
    }
    match response.decision {
        Decision::Approve if !request.options.is_empty() => {
            if response.selected_option.is_none() {
                response.selected_option = request.recommended_option.clone();
            }
            match &response.selected_option {
                Some(o) if request.options.contains(o) => Ok(()),
                Some(o) => bad(format!(
                    "`{o}` is not an option of {}; choose one of: {}",
                    request.id,
                    request.options.join(", ")
                )),
                None => bad(format!(
                    "{} asks to choose one of: {} (--option)",
                    request.id,
                    request.options.join(", ")
                )),
            }
        }
        _ if response.selected_option.is_some() && response.decision != Decision::Approve => {
            bad("an option is chosen only when approving".into())
        }
        Decision::Approve if response.selected_option.is_some() => {
            bad(format!("{} has no options to choose from", request.id))
        }
        Decision::Delegate => match response.delegate_to.as_deref().map(str::trim) {
            Some(to) if !to.is_empty() => Ok(()),
            _ => bad("delegate needs the approver to hand the request to (--to NAME)".into()),
        },
        Decision::Approve | Decision::Deny | Decision::Skip => Ok(()),
    }
}

pub(crate) fn ledger_entry(
    request: &ApprovalRequest,
    kind: LedgerKind,
    who: &str,
    reason: Option<String>,
) -> LedgerEntry {
    let step = request
        .step_id
        .as_deref()
        .map(|s| format!(" step:{s}"))
        .unwrap_or_default();
    let mut entry = LedgerEntry::new(kind, who, format!("task:{}{step}", request.task_id));
    entry.request_id = Some(request.id.clone());
    entry.task_id = Some(request.task_id.clone());
    entry.reason = reason;
    entry
}
