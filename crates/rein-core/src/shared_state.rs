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
    for a in &state.actions {
        if a.title.trim().is_empty() {
            return Err(SharedStateError::Empty {
                what: "action",
                field: "title",
            });
        }
    }
    for p in &mut state.participants {
        p.started_at.get_or_insert(now);
    }
    for a in &mut state.actions {
        a.started_at.get_or_insert(now);
    }
    state.created_at.get_or_insert(now);
    state.updated_at = Some(now);
    // Paths that climb out of their root are invalid input, refused now.
    crate::conflicts::detect(&state)?;
    Ok(state)
}

/// Adds `participant`, replacing the one with its id; a missing id is generated.
pub fn upsert_participant(
    state: &mut SharedHarnessState,
    mut participant: Participant,
    now: Timestamp,
) {
    if participant.id.trim().is_empty() {
        let taken: HashSet<String> = state.participants.iter().map(|p| p.id.clone()).collect();
        participant.id = next_id("participant", &taken, &mut 0);
    }
    participant.started_at.get_or_insert(now);
    match state
        .participants
        .iter_mut()
        .find(|p| p.id == participant.id)
    {
        Some(existing) => *existing = participant,
        None => state.participants.push(participant),
    }
    state.updated_at = Some(now);
}

/// Adds `action`, replacing the one with its id; a missing id is generated.
pub fn upsert_action(
    state: &mut SharedHarnessState,
    mut action: Action,
    now: Timestamp,
) -> Result<(), SharedStateError> {
    if action.title.trim().is_empty() {
        return Err(SharedStateError::Empty {
            what: "action",
            field: "title",
        });
    }
    if action.id.trim().is_empty() {
        let taken: HashSet<String> = state.actions.iter().map(|a| a.id.clone()).collect();
        action.id = next_id("action", &taken, &mut 0);
    }
    action.started_at.get_or_insert(now);
    let mut next = state.clone();
    match next.actions.iter_mut().find(|a| a.id == action.id) {
        Some(existing) => *existing = action,
        None => next.actions.push(action),
    }
    crate::conflicts::detect(&next)?;
    next.updated_at = Some(now);
    *state = next;
    Ok(())
}
