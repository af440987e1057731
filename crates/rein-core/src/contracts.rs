//! Harness contracts (`hctr_…`) and evidence bundles (`evb_…`), spec
//! shared-state §5: creating them, moving a contract along its status flow,
//! adding items, checks and reviews to a bundle. Every change is one optimistic
//! write with its audit record, so concurrent changes are never lost.
//!
//! A contract's risk, when not given, is derived from what it writes and the
//! tools it needs ([`derive_risk`]). An evidence item that claims a side effect
//! inside an external agent runtime is `unsupported` unless the runtime reported
//! it through a rein-owned callback; only rein itself records `rein` items.

use std::sync::Arc;

use rein_protocol::{
    Capture, Confidence, ContractId, ContractStatus, EvidenceBundle, EvidenceCheck, EvidenceId,
    EvidenceItem, EvidenceKind, HarnessContract, Resource, Review, Risk, StatusChange, TextOr,
    Timestamp, ToolRequirement,
};

use crate::clock::Clock;
use crate::context::RunContext;
use crate::shared_state::upsert;
use crate::store::{AuditRecord, Record, RecordFilter, RecordKind, StoreError};
use crate::store::{UPDATE_TRIES, audit};
use crate::{EngineError, Store};

/// Tools that act beyond the files of the workspace: a contract needing one is
/// at least high risk.
const REACHING_TOOLS: &[&str] = &[
    "shell",
    "bash",
    "sh",
    "exec",
    "sudo",
    "rm",
    "curl",
    "wget",
    "http",
    "network",
    "deploy",
    "kubectl",
    "terraform",
    "docker",
    "ssh",
    "scp",
    "git-push",
];

/// Resource kinds whose writes are critical whatever their path.
const CRITICAL_KINDS: &[&str] = &["secret", "credential", "database", "production"];

/// The risk of planned work from what it writes and the tools it needs:
/// - critical: it writes a resource marked sensitive, or of kind secret,
///   credential, database or production;
/// - high: it writes a directory (a whole tree), an absolute path, or a
///   resource named by URI, or it needs a tool that reaches beyond the
///   workspace (a shell, the network, deployment, deletion);
/// - medium: it writes anything else;
/// - low: it writes nothing.
pub fn derive_risk(write_set: &[Resource], required_tools: &[TextOr<ToolRequirement>]) -> Risk {
    let critical = write_set.iter().any(|r| {
        r.sensitive
            || CRITICAL_KINDS
                .iter()
                .any(|k| r.kind.eq_ignore_ascii_case(k))
    });
    if critical {
        return Risk::Critical;
    }
    let wide = write_set.iter().any(|r| {
        r.kind.eq_ignore_ascii_case("directory")
            || r.kind.eq_ignore_ascii_case("dir")
            || r.uri.is_some()
            || r.path.as_deref().is_some_and(|p| p.starts_with('/'))
    });
    let reaching = required_tools.iter().any(|t| {
        let t = t.said();
        let t = t.trim().to_ascii_lowercase().replace(' ', "-");
        REACHING_TOOLS.contains(&t.as_str())
    });
    if wide || reaching {
        Risk::High
    } else if write_set.is_empty() {
        Risk::Low
    } else {
        Risk::Medium
    }
}

/// A contract as it is stored when created: an id if it has none, its risk
/// (derived if not given), timestamps and the first entry of its history.
/// Only `draft` and `proposed` are statuses a contract may start in.
pub fn prepare_contract(
    mut contract: HarnessContract,
    now: Timestamp,
    by: &str,
) -> Result<HarnessContract, EngineError> {
    if contract.goal.trim().is_empty() {
        return Err(EngineError::BadRequest(
            "a harness contract needs a `goal`: what the work is for".into(),
        ));
    }
    if !matches!(
        contract.status,
        ContractStatus::Draft | ContractStatus::Proposed
    ) {
        return Err(EngineError::BadRequest(format!(
            "a harness contract starts as `draft` or `proposed`, not `{}`; create it, then move it with a status change",
            contract.status.as_str()
        )));
    }
    check_id(&contract.id, "harness contract")?;
    if contract.id.is_empty() {
        contract.id = ContractId::new().to_string();
    }
    crate::conflicts::check_resources_of(
        contract.read_set.iter().chain(&contract.write_set),
        &format!("harness contract `{}`", contract.id),
    )
    .map_err(|e| EngineError::BadRequest(e.to_string()))?;
    match contract.risk {
        Some(_) => contract.risk_derived = false,
        None => {
            // The riskiest of what the sets and tools say and what each
            // planned action says of itself.
            let planned = contract.planned_actions.iter().map(|a| {
                a.risk_level
                    .unwrap_or_default()
                    .max(derive_risk(&a.write_set, &[]))
            });
            let derived = planned
                .chain([derive_risk(&contract.write_set, &contract.required_tools)])
                .max()
                .unwrap_or_default();
            contract.risk = Some(derived);
            contract.risk_derived = true;
        }
    }
    contract.history = vec![StatusChange {
        from: None,
        to: contract.status,
        by: by.to_owned(),
        at: now,
        reason: None,
    }];
    contract.evidence_bundle_ids.clear();
    // A creation time the caller gives (the seed's `createdAtUtc`) is kept.
    contract.created_at.get_or_insert(now);
    contract.updated_at = Some(now);
    Ok(contract)
}

/// Ids given by callers are kept, but must be usable in a URL path.
fn check_id(id: &str, what: &str) -> Result<(), EngineError> {
    let bad = id
        .chars()
        .any(|c| c.is_whitespace() || c == '/' || c == '?' || c == '#' || c == '%');
    // `.` and `..` are path segments every client resolves away.
    if bad || id.chars().count() > 200 || id == "." || id == ".." {
        return Err(EngineError::BadRequest(format!(
            "{what} id `{id}` must be at most 200 characters without spaces, `/`, `?`, `#` or `%`, and not `.` or `..`"
        )));
    }
    Ok(())
}

/// Moves `contract` to `to` if its flow allows it.
pub fn transition(
    contract: &mut HarnessContract,
    to: ContractStatus,
    by: &str,
    reason: Option<String>,
    now: Timestamp,
) -> Result<(), EngineError> {
    let from = contract.status;
    crate::lifecycle::contract_transition(from, to).map_err(|e| e.of(&contract.id))?;
    contract.status = to;
    if to == ContractStatus::Approved {
        contract.approved_at = Some(now);
    }
    if matches!(
        to,
        ContractStatus::Verified
            | ContractStatus::Failed
            | ContractStatus::Rejected
            | ContractStatus::RolledBack
            | ContractStatus::Cancelled
    ) {
        contract.completed_at = Some(now);
    }
    contract.history.push(StatusChange {
        from: Some(from),
        to,
        by: by.to_owned(),
        at: now,
        reason,
    });
    contract.updated_at = Some(now);
    Ok(())
}

/// An evidence bundle as it is stored when created: ids for it and its parts,
/// timestamps, and its items' capture checked.
pub fn prepare_evidence(
    mut bundle: EvidenceBundle,
    now: Timestamp,
) -> Result<EvidenceBundle, EngineError> {
    check_id(&bundle.id, "evidence bundle")?;
    if bundle.id.is_empty() {
        bundle.id = EvidenceId::new().to_string();
    }
    check_confidence(bundle.confidence)?;
    let items = std::mem::take(&mut bundle.items);
    for item in items {
        add_item(&mut bundle, item, now, false)?;
    }
    let checks = std::mem::take(&mut bundle.checks);
    for check in checks {
        add_check(&mut bundle, check, now)?;
    }
    let reviews = std::mem::take(&mut bundle.reviews);
    for review in reviews {
        add_review(&mut bundle, review, now)?;
    }
    bundle.created_at.get_or_insert(now);
    bundle.updated_at = Some(now);
    Ok(bundle)
}

fn check_confidence(confidence: Option<Confidence>) -> Result<(), EngineError> {
    match confidence {
        Some(Confidence::Score(c)) if !(0.0..=1.0).contains(&c) => Err(EngineError::BadRequest(
            format!("`confidence` must be between 0 and 1, not {c}"),
        )),
        _ => Ok(()),
    }
}

/// Adds an item (replacing one with its id). `by_rein` is whether rein itself
/// saw what the item records; only then may it say `rein`.
pub(crate) fn add_item(
    bundle: &mut EvidenceBundle,
    mut item: EvidenceItem,
    now: Timestamp,
    by_rein: bool,
) -> Result<(), EngineError> {
    if item.capture == Capture::Rein && !by_rein {
        return Err(EngineError::BadRequest(format!(
            "evidence item `{}`: only rein records items it captured itself; report it as `reported` (or `callback` when a rein-owned callback delivered it)",
            item.title
        )));
    }
    // Side effects inside an agent runtime rein does not run cannot be vouched
    // for unless the runtime called back into rein as they happened.
    if item.kind == EvidenceKind::ExternalSideEffect && item.capture != Capture::Callback {
        item.capture = Capture::Unsupported;
    }
    upsert(&mut bundle.items, "item", item, now);
    bundle.updated_at = Some(now);
    Ok(())
}

pub(crate) fn add_check(
    bundle: &mut EvidenceBundle,
    check: EvidenceCheck,
    now: Timestamp,
) -> Result<(), EngineError> {
    upsert(&mut bundle.checks, "check", check, now);
    bundle.updated_at = Some(now);
    Ok(())
}

pub(crate) fn add_review(
    bundle: &mut EvidenceBundle,
    review: Review,
    now: Timestamp,
) -> Result<(), EngineError> {
    if review.reviewer.trim().is_empty() {
        return Err(EngineError::BadRequest(
            "a review needs a `reviewer`".into(),
        ));
    }
    upsert(&mut bundle.reviews, "review", review, now);
    bundle.updated_at = Some(now);
    Ok(())
}

fn contract_record(c: &HarnessContract) -> Result<Record, EngineError> {
    Ok(Record {
        kind: RecordKind::Contract,
        id: c.id.clone(),
        status: Some(c.status.as_str().to_owned()),
        task_id: c.task_id.clone(),
        shared_state_id: c.shared_state_id.clone(),
        contract_id: None,
        created_at: c.created_at.unwrap_or_default(),
        body: serde_json::to_value(c).map_err(|e| EngineError::BadRequest(e.to_string()))?,
    })
}

fn evidence_record(b: &EvidenceBundle) -> Result<Record, EngineError> {
    Ok(Record {
        kind: RecordKind::Evidence,
        id: b.id.clone(),
        status: None,
        task_id: b.task_id.clone(),
        shared_state_id: b.shared_state_id.clone(),
        contract_id: b.harness_contract_id.clone(),
        created_at: b.created_at.unwrap_or_default(),
        body: serde_json::to_value(b).map_err(|e| EngineError::BadRequest(e.to_string()))?,
    })
}

fn decode<T: serde::de::DeserializeOwned>(record: Record) -> Result<T, EngineError> {
    serde_json::from_value(record.body).map_err(|e| {
        StoreError::Corrupt(format!("{} {}: {e}", record.kind.noun(), record.id)).into()
    })
}

/// A page of contracts, newest first.
pub type ContractPage = rein_protocol::api::Page<HarnessContract>;

/// A page of evidence bundles, newest first.
pub type EvidencePage = rein_protocol::api::Page<EvidenceBundle>;

/// Contracts and evidence bundles in the engine's store: what [`RunContext::records`]
/// hands out, and what a task's verify step works with.
#[derive(Clone)]
pub struct Records {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) audited: Arc<tokio::sync::Notify>,
}

impl Records {
    /// The record of `kind` named `id`, decoded; not found, said so.
    async fn load<T: serde::de::DeserializeOwned>(
        &self,
        kind: RecordKind,
        id: &str,
    ) -> Result<T, EngineError> {
        match self.store.load_record(kind, id).await? {
            Some((record, _)) => decode(record),
            None => Err(not_found(kind, id)),
        }
    }
}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Records").finish_non_exhaustive()
    }
}

impl RunContext {
    /// The engine's contracts and evidence bundles.
    pub fn records(&self) -> Records {
        Records {
            store: Arc::clone(&self.store),
            clock: Arc::clone(&self.config.clock),
            audited: Arc::clone(&self.audited),
        }
    }
}

impl Records {
    /// Stores a new contract; an id that exists is refused, never overwritten.
    pub async fn create_contract(
        &self,
        contract: HarnessContract,
        by: &str,
    ) -> Result<HarnessContract, EngineError> {
        let now = self.clock.now();
        let contract = prepare_contract(contract, now, by)?;
        let record = contract_record(&contract)?;
        self.store
            .insert_record(&record, &audit(now, by, "contract.create", &contract.id))
            .await?;
        self.audited.notify_waiters();
        Ok(contract)
    }

    pub async fn contract(&self, id: &str) -> Result<HarnessContract, EngineError> {
        self.load(RecordKind::Contract, id).await
    }

    pub async fn contracts(&self, filter: &RecordFilter) -> Result<ContractPage, EngineError> {
        let page = self.store.list_records(filter).await?;
        Ok(ContractPage {
            items: page
                .items
                .into_iter()
                .map(decode)
                .collect::<Result<_, _>>()?,
            next_cursor: page.next_cursor,
        })
    }

    /// Moves a contract along its flow; a move the flow does not allow is refused
    /// naming the moves it does.
    pub async fn transition_contract(
        &self,
        id: &str,
        to: ContractStatus,
        by: &str,
        reason: Option<String>,
    ) -> Result<HarnessContract, EngineError> {
        let now = self.clock.now();
        let record = audit(now, by, &format!("contract.{}", to.as_str()), id);
        self.change_contract(id, &record, |c| {
            transition(c, to, by, reason.clone(), now)?;
            Ok(Some(()))
        })
        .await?
        .map(|(c, ())| c)
        .ok_or_else(|| not_found(RecordKind::Contract, id))
    }

    /// Reads, changes and writes back a contract, again if someone wrote in
    /// between. The change may decline (`None`): nothing is written.
    pub(crate) async fn change_contract<T>(
        &self,
        id: &str,
        audit: &AuditRecord,
        mut change: impl FnMut(&mut HarnessContract) -> Result<Option<T>, EngineError>,
    ) -> Result<Option<(HarnessContract, T)>, EngineError> {
        let out = self
            .change_record(RecordKind::Contract, id, audit, |body| {
                let mut contract: HarnessContract = serde_json::from_value(body.clone())
                    .map_err(|e| StoreError::Corrupt(format!("harness contract {id}: {e}")))?;
                let Some(out) = change(&mut contract)? else {
                    return Ok(None);
                };
                Ok(Some((contract_record(&contract)?, (contract, out))))
            })
            .await?;
        if out.is_some() {
            self.audited.notify_waiters();
        }
        Ok(out)
    }

    async fn change_record<T>(
        &self,
        kind: RecordKind,
        id: &str,
        audit: &AuditRecord,
        mut change: impl FnMut(&serde_json::Value) -> Result<Option<(Record, T)>, EngineError>,
    ) -> Result<Option<T>, EngineError> {
        let mut last = 0;
        for _ in 0..UPDATE_TRIES {
            let Some((record, version)) = self.store.load_record(kind, id).await? else {
                return Err(not_found(kind, id));
            };
            let Some((mut changed, out)) = change(&record.body)? else {
                return Ok(None);
            };
            changed.created_at = record.created_at;
            last = version;
            match self.store.update_record(&changed, version, audit).await {
                Ok(()) => return Ok(Some(out)),
                Err(StoreError::RecordMoved { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(StoreError::RecordMoved {
            kind,
            id: id.to_owned(),
            expected: last,
        }
        .into())
    }

    /// Stores a new evidence bundle and links it from its contract and shared
    /// state (which must exist).
    pub async fn create_evidence(
        &self,
        bundle: EvidenceBundle,
        by: &str,
    ) -> Result<EvidenceBundle, EngineError> {
        let now = self.clock.now();
        let bundle = prepare_evidence(bundle, now)?;
        self.insert_evidence(bundle, by, now).await
    }

    pub(crate) async fn insert_evidence(
        &self,
        bundle: EvidenceBundle,
        by: &str,
        now: Timestamp,
    ) -> Result<EvidenceBundle, EngineError> {
        if let Some(c) = &bundle.harness_contract_id {
            self.contract(c).await.map_err(|e| match e.kind() {
                crate::ErrorKind::NotFound => EngineError::BadRequest(format!(
                    "evidence bundle names harness contract `{c}`, which does not exist"
                )),
                _ => e,
            })?;
        }
        if let Some(s) = &bundle.shared_state_id {
            if self.store.load_shared_state(s).await?.is_none() {
                return Err(EngineError::BadRequest(format!(
                    "evidence bundle names shared state `{s}`, which does not exist"
                )));
            }
        }
        let record = evidence_record(&bundle)?;
        self.store
            .insert_record(&record, &audit(now, by, "evidence.create", &bundle.id))
            .await?;
        if let Some(c) = &bundle.harness_contract_id {
            let record = audit(now, by, "contract.link_evidence", c);
            self.change_contract(c, &record, |contract| {
                if contract.evidence_bundle_ids.contains(&bundle.id) {
                    return Ok(None);
                }
                contract.evidence_bundle_ids.push(bundle.id.clone());
                contract.updated_at = Some(now);
                Ok(Some(()))
            })
            .await?;
        }
        if let Some(s) = &bundle.shared_state_id {
            let record = audit(now, by, "shared_state.link_evidence", s);
            crate::shared_state::maybe_change_state(self.store.as_ref(), s, &record, |state| {
                if state.evidence_bundle_ids.contains(&bundle.id) {
                    return Ok(None);
                }
                state.evidence_bundle_ids.push(bundle.id.clone());
                state.updated_at = Some(now);
                Ok(Some(()))
            })
            .await?;
        }
        self.audited.notify_waiters();
        Ok(bundle)
    }

    pub async fn evidence(&self, id: &str) -> Result<EvidenceBundle, EngineError> {
        self.load(RecordKind::Evidence, id).await
    }

    pub async fn evidence_bundles(
        &self,
        filter: &RecordFilter,
    ) -> Result<EvidencePage, EngineError> {
        let page = self.store.list_records(filter).await?;
        Ok(EvidencePage {
            items: page
                .items
                .into_iter()
                .map(decode)
                .collect::<Result<_, _>>()?,
            next_cursor: page.next_cursor,
        })
    }

    /// Changes an evidence bundle (`what` names the change in the audit).
    pub(crate) async fn change_evidence(
        &self,
        id: &str,
        by: &str,
        what: &str,
        mut change: impl FnMut(&mut EvidenceBundle, Timestamp) -> Result<(), EngineError>,
    ) -> Result<EvidenceBundle, EngineError> {
        let now = self.clock.now();
        let record = audit(now, by, what, id);
        let out = self
            .change_record(RecordKind::Evidence, id, &record, |body| {
                let mut bundle: EvidenceBundle = serde_json::from_value(body.clone())
                    .map_err(|e| StoreError::Corrupt(format!("evidence bundle {id}: {e}")))?;
                change(&mut bundle, now)?;
                Ok(Some((evidence_record(&bundle)?, bundle)))
            })
            .await?
            .ok_or_else(|| not_found(RecordKind::Evidence, id))?;
        self.audited.notify_waiters();
        Ok(out)
    }

    /// Stores the evidence of an agent step's side effects ([`agent_evidence`])
    /// and names the bundle in its output (`evidence_bundle_id`). Evidence that
    /// cannot be stored is said in the output (`evidence_error`); the step's
    /// own outcome stands.
    pub(crate) async fn record_agent_evidence(
        &self,
        task: &str,
        step: &str,
        shared_state: Option<String>,
        output: &mut serde_json::Value,
    ) {
        let Some(bundle) = agent_evidence(task, step, shared_state, output) else {
            return;
        };
        let now = self.clock.now();
        let stored = match prepare_evidence(bundle, now) {
            Ok(bundle) => self.insert_evidence(bundle, "rein", now).await,
            Err(e) => Err(e),
        };
        let (key, value) = match stored {
            Ok(bundle) => ("evidence_bundle_id", bundle.id),
            Err(e) => ("evidence_error", e.to_string()),
        };
        if let Some(o) = output.as_object_mut() {
            o.insert(key.to_owned(), value.into());
        }
    }

    /// Adds an item to a bundle, replacing the one with its id.
    pub async fn add_evidence_item(
        &self,
        id: &str,
        item: EvidenceItem,
        by: &str,
    ) -> Result<EvidenceBundle, EngineError> {
        self.change_evidence(id, by, "evidence.add_item", |b, now| {
            add_item(b, item.clone(), now, false)
        })
        .await
    }

    /// Adds a check to a bundle, replacing the one with its id.
    pub async fn add_evidence_check(
        &self,
        id: &str,
        check: EvidenceCheck,
        by: &str,
    ) -> Result<EvidenceBundle, EngineError> {
        self.change_evidence(id, by, "evidence.add_check", |b, now| {
            add_check(b, check.clone(), now)
        })
        .await
    }

    /// Adds a person's review to a bundle, replacing the one with its id.
    pub async fn add_evidence_review(
        &self,
        id: &str,
        review: Review,
        by: &str,
    ) -> Result<EvidenceBundle, EngineError> {
        self.change_evidence(id, by, "evidence.add_review", |b, now| {
            add_review(b, review.clone(), now)
        })
        .await
    }
}

fn not_found(kind: RecordKind, id: &str) -> EngineError {
    StoreError::RecordNotFound {
        kind,
        id: id.to_owned(),
    }
    .into()
}

/// The evidence of an agent step whose runtime rein does not run (a plugin's
/// harness, an external ACP agent): one item per side effect its output
/// lists under `side_effects` — a write through rein's callback is `callback`,
/// anything the agent did by itself `unsupported` (spec harness-sdk rule 25) —
/// or, when the output only says `"side_effects": "unsupported"`, one item
/// saying so. `None` when the output names no side effects (the built-in
/// runtime's steps: its journal is rein's own record).
pub fn agent_evidence(
    task_id: &str,
    step_id: &str,
    shared_state: Option<String>,
    output: &serde_json::Value,
) -> Option<EvidenceBundle> {
    let runtime = output
        .get("selection")
        .and_then(|s| s.get("selected"))
        .and_then(serde_json::Value::as_str)
        .unwrap_or("its runtime");
    let text = |v: &serde_json::Value, k: &str| {
        v.get(k)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let items: Vec<EvidenceItem> = match output.get("side_effects")? {
        serde_json::Value::Array(effects) => effects
            .iter()
            .map(|e| {
                let capture = match text(e, "capture").as_str() {
                    "callback" => Capture::Callback,
                    _ => Capture::Unsupported,
                };
                let what = text(e, "what");
                let path = text(e, "path");
                let locations: Vec<String> = e
                    .get("locations")
                    .and_then(serde_json::Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|l| l.as_str().map(str::to_owned))
                    .collect();
                let (kind, title) = if what == "write_file" {
                    (
                        EvidenceKind::File,
                        format!("{runtime} wrote {path} through rein's fs/write_text_file"),
                    )
                } else {
                    let status = text(e, "status");
                    (
                        EvidenceKind::ExternalSideEffect,
                        format!(
                            "{runtime}: {what} tool call `{}`{}",
                            text(e, "title"),
                            if status.is_empty() {
                                String::new()
                            } else {
                                format!(" ({status})")
                            }
                        ),
                    )
                };
                let file = if path.is_empty() {
                    locations.first().cloned()
                } else {
                    Some(path)
                };
                EvidenceItem {
                    id: String::new(),
                    kind,
                    title,
                    content: (!locations.is_empty()).then(|| locations.join("\n")),
                    exit_code: None,
                    capture,
                    resource: file.map(|p| Resource {
                        kind: "file".into(),
                        path: Some(p),
                        ..Resource::default()
                    }),
                    ..EvidenceItem::default()
                }
            })
            .collect(),
        serde_json::Value::String(_) => vec![EvidenceItem {
            id: String::new(),
            kind: EvidenceKind::ExternalSideEffect,
            title: format!("what {runtime} did inside its own runtime is not visible to rein"),
            content: None,
            exit_code: None,
            capture: Capture::Unsupported,
            ..EvidenceItem::default()
        }],
        _ => return None,
    };
    Some(EvidenceBundle {
        summary: format!("side effects of agent step `{step_id}` ({runtime})"),
        shared_state_id: shared_state,
        task_id: Some(task_id.to_owned()),
        step_id: Some(step_id.to_owned()),
        items,
        ..EvidenceBundle::default()
    })
}
