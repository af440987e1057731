//! Validation of shared harness state (spec shared-state §3): what a new state
//! gets (ids, timestamps) and what is refused (duplicate ids, naming them), and
//! how a participant or an action is added (replacing one with the same id).
//! Unknown status, role and risk values never get this far: deserialisation
//! refuses them, naming the value and the allowed set.

use std::collections::HashSet;

use rein_protocol::{Action, Participant, SharedHarnessState, SharedStateId, Timestamp};

/// Why a state, participant or action was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SharedStateError {
    #[error("{what} id `{id}` is used more than once in the request")]
    DuplicateId { what: &'static str, id: String },
    #[error("{what} {field} must not be empty")]
    Empty {
        what: &'static str,
        field: &'static str,
    },
    #[error("{0}")]
    InvalidResource(#[from] crate::conflicts::InvalidResource),
}

/// The first `prefix_N` (N from 1) not in `taken`.
fn next_id(prefix: &str, taken: &HashSet<String>, from: &mut usize) -> String {
    loop {
        *from += 1;
        let id = format!("{prefix}_{from}");
        if !taken.contains(&id) {
            return id;
        }
    }
}

/// A part of a list kept by id (a participant, an action, an evidence item,
/// check or review): it has an id and the time it was added.
pub(crate) trait Part {
    fn id(&self) -> &str;
    fn set_id(&mut self, id: String);
    fn added_at(&mut self) -> &mut Option<Timestamp>;
}

macro_rules! part {
    ($($t:ty => $at:ident),*) => {$(
        impl Part for $t {
            fn id(&self) -> &str {
                &self.id
            }
            fn set_id(&mut self, id: String) {
                self.id = id;
            }
            fn added_at(&mut self) -> &mut Option<Timestamp> {
                &mut self.$at
            }
        }
    )*};
}
part!(
    Participant => started_at,
    Action => started_at,
    rein_protocol::EvidenceItem => at,
    rein_protocol::EvidenceCheck => at,
    rein_protocol::Review => at
);

/// Gives `part` the first free `prefix_N` id if it has none, and `now` if it
/// has no time.
fn fill<P: Part>(list: &[P], prefix: &str, part: &mut P, now: Timestamp) {
    if part.id().trim().is_empty() {
        let taken: HashSet<String> = list.iter().map(|p| p.id().to_owned()).collect();
        part.set_id(next_id(prefix, &taken, &mut 0));
    }
    part.added_at().get_or_insert(now);
}

/// Puts `part` in `list`, replacing the one with its id.
fn place<P: Part>(list: &mut Vec<P>, part: P) {
    match list.iter_mut().find(|p| p.id() == part.id()) {
        Some(existing) => *existing = part,
        None => list.push(part),
    }
}

/// Adds `part` to `list`, replacing the one with its id; a missing id is the
/// first `prefix_N` free, a missing time `now`.
pub(crate) fn upsert<P: Part>(list: &mut Vec<P>, prefix: &str, mut part: P, now: Timestamp) {
    fill(list, prefix, &mut part, now);
    place(list, part);
}

/// Ids for the participants and actions that have none; duplicates refused.
fn fill_ids(state: &mut SharedHarnessState) -> Result<(), SharedStateError> {
    let mut seen = HashSet::new();
    for p in &state.participants {
        if !p.id.is_empty() && !seen.insert(p.id.clone()) {
            return Err(SharedStateError::DuplicateId {
                what: "participant",
                id: p.id.clone(),
            });
        }
    }
    let mut n = 0;
    for p in &mut state.participants {
        if p.id.is_empty() {
            p.id = next_id("participant", &seen, &mut n);
            seen.insert(p.id.clone());
        }
    }
    let mut seen = HashSet::new();
    for a in &state.actions {
        if !a.id.is_empty() && !seen.insert(a.id.clone()) {
            return Err(SharedStateError::DuplicateId {
                what: "action",
                id: a.id.clone(),
            });
        }
    }
    let mut n = 0;
    for a in &mut state.actions {
        if a.id.is_empty() {
            a.id = next_id("action", &seen, &mut n);
            seen.insert(a.id.clone());
        }
    }
    Ok(())
}

/// A state as it is stored when created: an id (`shs_…`) if it has none, ids for
/// its participants and actions, its timestamps; its resources checked.
pub fn prepare_new(
    mut state: SharedHarnessState,
    now: Timestamp,
) -> Result<SharedHarnessState, SharedStateError> {
    if state.id.trim().is_empty() {
        state.id = SharedStateId::new().to_string();
    }
    fill_ids(&mut state)?;
    for p in &mut state.participants {
        p.started_at.get_or_insert(now);
    }
    for a in &mut state.actions {
        a.started_at.get_or_insert(now);
    }
    state.created_at.get_or_insert(now);
    state.updated_at = Some(now);
    // Paths that climb out of their root are invalid input, refused now.
    crate::conflicts::check_state(&state)?;
    Ok(state)
}

/// Adds `participant`, replacing the one with its id; a missing id is generated.
pub fn upsert_participant(
    state: &mut SharedHarnessState,
    participant: Participant,
    now: Timestamp,
) {
    upsert(&mut state.participants, "participant", participant, now);
    state.updated_at = Some(now);
}

/// Adds `action`, replacing the one with its id; a missing id is generated.
pub fn upsert_action(
    state: &mut SharedHarnessState,
    mut action: Action,
    now: Timestamp,
) -> Result<(), SharedStateError> {
    fill(&state.actions, "action", &mut action, now);
    // Only the new action's paths need checking: the rest were checked on the way in.
    crate::conflicts::check_action(&action)?;
    place(&mut state.actions, action);
    state.updated_at = Some(now);
    Ok(())
}

use crate::EngineError;
use crate::context::RunContext;
use crate::store::{SharedStateFilter, SharedStatePage, StoreError};
use crate::store::{UPDATE_TRIES, audit};

impl From<SharedStateError> for EngineError {
    fn from(e: SharedStateError) -> EngineError {
        EngineError::BadRequest(e.to_string())
    }
}

impl RunContext {
    /// Stores a new shared state (ids and timestamps filled in, paths checked);
    /// an id that exists is refused, never overwritten.
    pub async fn create_shared_state(
        &self,
        state: SharedHarnessState,
        by: &str,
    ) -> Result<SharedHarnessState, EngineError> {
        let now = self.config.clock.now();
        let state = prepare_new(state, now)?;
        let audit = audit(now, by, "shared_state.create", &state.id);
        self.store.insert_shared_state(&state, &audit).await?;
        self.audited.notify_waiters();
        Ok(state)
    }

    /// Audit records after position `after`, oldest first.
    pub async fn audit(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<crate::store::AuditRecord>, EngineError> {
        Ok(self.store.audit_records(after, limit).await?)
    }

    pub async fn shared_state(&self, id: &str) -> Result<SharedHarnessState, EngineError> {
        match self.store.load_shared_state(id).await? {
            Some((state, _)) => Ok(state),
            None => Err(StoreError::SharedStateNotFound(id.to_owned()).into()),
        }
    }

    pub async fn shared_states(
        &self,
        filter: &SharedStateFilter,
    ) -> Result<SharedStatePage, EngineError> {
        Ok(self.store.list_shared_states(filter).await?)
    }

    /// The newest shared state of a session.
    pub async fn session_shared_state(
        &self,
        session_id: &str,
    ) -> Result<SharedHarnessState, EngineError> {
        let filter = SharedStateFilter {
            session_id: Some(session_id.to_owned()),
            limit: Some(1),
            ..SharedStateFilter::default()
        };
        self.store
            .list_shared_states(&filter)
            .await?
            .items
            .into_iter()
            .next()
            .ok_or_else(|| {
                EngineError::from(StoreError::SharedStateNotFound(format!(
                    "of session {session_id}"
                )))
            })
    }

    async fn change_shared_state<T>(
        &self,
        id: &str,
        record: crate::store::AuditRecord,
        change: impl FnMut(&mut SharedHarnessState) -> Result<T, EngineError>,
    ) -> Result<(SharedHarnessState, T), EngineError> {
        let changed = change_state(self.store.as_ref(), id, &record, change).await?;
        self.audited.notify_waiters();
        Ok(changed)
    }

    /// Adds a participant, replacing the one with its id.
    pub async fn add_participant(
        &self,
        id: &str,
        participant: Participant,
        by: &str,
    ) -> Result<SharedHarnessState, EngineError> {
        let now = self.config.clock.now();
        let record = audit(now, by, "shared_state.add_participant", id);
        let (state, ()) = self
            .change_shared_state(id, record, |s| {
                upsert_participant(s, participant.clone(), now);
                Ok(())
            })
            .await?;
        Ok(state)
    }

    /// Adds an action, replacing the one with its id.
    pub async fn add_action(
        &self,
        id: &str,
        action: Action,
        by: &str,
    ) -> Result<SharedHarnessState, EngineError> {
        let now = self.config.clock.now();
        let record = audit(now, by, "shared_state.add_action", id);
        let (state, ()) = self
            .change_shared_state(id, record, |s| Ok(upsert_action(s, action.clone(), now)?))
            .await?;
        Ok(state)
    }

    /// Runs conflict detection; the state's conflict list is replaced by what it
    /// finds.
    pub async fn detect_conflicts(
        &self,
        id: &str,
        by: &str,
    ) -> Result<(SharedHarnessState, Vec<rein_protocol::Conflict>), EngineError> {
        let now = self.config.clock.now();
        let record = audit(now, by, "shared_state.detect_conflicts", id);
        self.change_shared_state(id, record, |s| {
            let found = crate::conflicts::detect(s).map_err(SharedStateError::from)?;
            s.conflicts = found.clone();
            s.updated_at = Some(now);
            Ok(found)
        })
        .await
    }
}

/// Reads, changes and writes back a shared state (with `record`), again if
/// someone else wrote in between: concurrent changes are never lost.
pub(crate) async fn change_state<T>(
    store: &dyn crate::Store,
    id: &str,
    record: &crate::store::AuditRecord,
    mut change: impl FnMut(&mut SharedHarnessState) -> Result<T, EngineError>,
) -> Result<(SharedHarnessState, T), EngineError> {
    let changed = maybe_change_state(store, id, record, |s| change(s).map(Some)).await?;
    changed.ok_or_else(|| EngineError::BadRequest("the change was withdrawn".into()))
}

/// [`change_state`], where the change may decline (`None`): then nothing is
/// written and `None` is returned.
pub(crate) async fn maybe_change_state<T>(
    store: &dyn crate::Store,
    id: &str,
    record: &crate::store::AuditRecord,
    mut change: impl FnMut(&mut SharedHarnessState) -> Result<Option<T>, EngineError>,
) -> Result<Option<(SharedHarnessState, T)>, EngineError> {
    let mut last = 0;
    for _ in 0..UPDATE_TRIES {
        let Some((mut state, version)) = store.load_shared_state(id).await? else {
            return Err(StoreError::SharedStateNotFound(id.to_owned()).into());
        };
        let Some(out) = change(&mut state)? else {
            return Ok(None);
        };
        last = version;
        match store.update_shared_state(&state, version, record).await {
            Ok(()) => return Ok(Some((state, out))),
            Err(StoreError::SharedStateMoved { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(StoreError::SharedStateMoved {
        id: id.to_owned(),
        expected: last,
    }
    .into())
}

/// The resource a step's declared path stands for: a directory if it ends in `/`.
pub fn declared(path: &str) -> rein_protocol::Resource {
    let directory = path.len() > 1 && path.ends_with('/');
    rein_protocol::Resource {
        kind: if directory { "directory" } else { "file" }.into(),
        path: Some(if directory {
            path.trim_end_matches('/').to_owned()
        } else {
            path.to_owned()
        }),
        ..rein_protocol::Resource::default()
    }
}

/// The action a task's step records in the plan's shared state.
pub(crate) fn step_action(
    task: &rein_protocol::TaskId,
    step: &rein_protocol::TaskStep,
    status: rein_protocol::WorkStatus,
) -> Action {
    Action {
        id: format!("{task}.{}", step.id),
        participant_id: Some(task.to_string()),
        title: if step.description.is_empty() {
            step.id.clone()
        } else {
            step.description.clone()
        },
        summary: None,
        status,
        tool_name: Some("rein step".into()),
        read_set: step.reads.iter().map(|p| declared(p)).collect(),
        write_set: step.writes.iter().map(|p| declared(p)).collect(),
        assumptions: Vec::new(),
        version_dependencies: Vec::new(),
        verifier_obligations: Vec::new(),
        evidence_bundle_id: None,
        harness_contract_id: None,
        risk_level: Some(match step.risk_level {
            rein_protocol::RiskLevel::Low => rein_protocol::Risk::Low,
            rein_protocol::RiskLevel::Medium => rein_protocol::Risk::Medium,
            rein_protocol::RiskLevel::High => rein_protocol::Risk::High,
        }),
        started_at: None,
        completed_at: None,
    }
}

/// The conflict that keeps `action` from starting under the state's enforcement:
/// one of its write/write or read/write conflicts with another action still
/// active. `None` if it may start (or the state enforces nothing).
pub(crate) fn blocking_conflict(
    state: &SharedHarnessState,
    action: &Action,
) -> Option<rein_protocol::Conflict> {
    state.enforcement?;
    let mut probe = state.clone();
    probe
        .actions
        .retain(|a| a.id == action.id || a.status == rein_protocol::WorkStatus::Active);
    match probe.actions.iter_mut().find(|a| a.id == action.id) {
        Some(existing) => *existing = action.clone(),
        None => probe.actions.push(action.clone()),
    }
    let found = crate::conflicts::detect(&probe).ok()?;
    found.into_iter().find(|c| {
        matches!(
            c.conflict_type,
            rein_protocol::ConflictType::WriteWrite | rein_protocol::ConflictType::ReadWrite
        ) && c.actions.iter().any(|a| a == &action.id)
    })
}

/// What became of a step that asked to start under a state's enforcement.
#[derive(Debug)]
pub(crate) enum Start {
    /// Recorded as active: it may run.
    Go,
    /// The state rejects it: this conflict is why.
    Rejected(Box<rein_protocol::Conflict>),
}

/// Records `action` as started, first waiting (serialize) or refusing (reject)
/// while it conflicts with a running action. The check and the record are one
/// optimistic write, so two steps cannot both pass the check unseen.
pub(crate) async fn start_step(
    store: &dyn crate::Store,
    state_id: &str,
    action: Action,
    clock: &dyn crate::clock::Clock,
    poll: std::time::Duration,
    cancel: &tokio_util::sync::CancellationToken,
) -> Start {
    loop {
        let now = clock.now();
        let record = audit(now, &who(&action), "shared_state.step_started", state_id);
        let mut blocked = None;
        let result = maybe_change_state(store, state_id, &record, |s| {
            if let Some(conflict) = blocking_conflict(s, &action) {
                blocked = Some((conflict, s.enforcement));
                return Ok(None);
            }
            blocked = None;
            upsert_action(s, action.clone(), now)?;
            Ok(Some(()))
        })
        .await;
        match (result, blocked) {
            (Ok(Some(_)), _) => return Start::Go,
            (Ok(None), Some((conflict, Some(rein_protocol::Enforcement::Reject)))) => {
                return Start::Rejected(Box::new(conflict));
            }
            (Ok(None), _) => {
                // Serialize: wait for the other action to end.
                tokio::select! {
                    () = tokio::time::sleep(poll) => {}
                    () = cancel.cancelled() => return Start::Go,
                }
            }
            (Err(e), _) => {
                tracing::warn!(shared_state = state_id, action = %action.id, error = %e, "cannot record the step in the shared state");
                return Start::Go;
            }
        }
    }
}

/// Records a step's action (as it starts, or as it ended). Recording is passive:
/// a failure is logged and the step goes on.
pub(crate) async fn record_step(
    store: &dyn crate::Store,
    state_id: &str,
    mut action: Action,
    now: Timestamp,
    ended: bool,
) {
    let record = audit(
        now,
        &who(&action),
        if ended {
            "shared_state.step_ended"
        } else {
            "shared_state.step_started"
        },
        state_id,
    );
    let result = change_state(store, state_id, &record, |s| {
        if let Some(existing) = s.actions.iter().find(|a| a.id == action.id) {
            action.started_at = existing.started_at;
        }
        if ended {
            action.completed_at = Some(now);
        }
        Ok(upsert_action(s, action.clone(), now)?)
    })
    .await;
    if let Err(e) = result {
        tracing::warn!(shared_state = state_id, action = %action.id, error = %e, "cannot record the step in the shared state");
    }
}

/// Who a task's step records as: its task.
fn who(action: &Action) -> String {
    action
        .participant_id
        .clone()
        .unwrap_or_else(|| "rein".to_owned())
}
