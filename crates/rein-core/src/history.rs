//! A task's history ([`rein_protocol::History`]), read from its log and its
//! steps' journals: [`points`] is a pure function of the two, so what the
//! history says is what the log says.

use std::collections::HashMap;

use rein_protocol::{
    ApprovalStatus, CheckpointId, CheckpointType, HarnessEvent, HistoryKind, HistoryPoint,
    TaskChange,
};
use serde_json::Value;

/// The longest excerpt of free text (an error, a reason, a reply) a point's
/// description carries.
const EXCERPT: usize = 80;

/// What the history needs to know of a checkpoint its events name.
struct Known {
    step_id: Option<String>,
    kind: CheckpointType,
    attempt: u32,
}

/// The points of a task's history, oldest first: from its log, and from the
/// journals of its steps (step id, entries in order) for the agent turns.
/// A step's turns follow the point where it last started (a new attempt goes
/// on from its journal, so its last attempt is the one the journal ends in),
/// in the order its journal holds them.
pub fn points(events: &[HarnessEvent], journals: &[(String, Vec<Value>)]) -> Vec<HistoryPoint> {
    let mut known: HashMap<CheckpointId, Known> = HashMap::new();
    let mut out = Vec::new();
    // Where each step's turns go: after its latest start.
    let mut turns_at: HashMap<String, usize> = HashMap::new();
    for event in events {
        let point = |kind, description| point(event, kind, description);
        match &event.change {
            TaskChange::TaskCreated { description, .. } => {
                out.push(point(
                    HistoryKind::TaskCreated,
                    format!("created: {}", excerpt(description)),
                ));
            }
            TaskChange::TaskRestored {
                snapshot_id,
                from_task_id,
                state,
            } => {
                know_all(&mut known, state);
                out.push(point(
                    HistoryKind::TaskCreated,
                    format!("restored from snapshot {snapshot_id} of task {from_task_id}"),
                ));
            }
            TaskChange::TaskForked { from, state, .. } => {
                know_all(&mut known, state);
                let turn = from
                    .turn
                    .map(|n| format!(", after turn {n}"))
                    .unwrap_or_default();
                out.push(point(
                    HistoryKind::TaskCreated,
                    format!(
                        "forked from task {} at event {}{turn}",
                        from.task_id, from.seq
                    ),
                ));
            }
            TaskChange::TaskStarted { .. } => {
                out.push(point(HistoryKind::TaskStarted, "started".into()));
            }
            TaskChange::TaskResumed { rerun, skip, .. } => {
                let mut said = String::from("resumed");
                if !rerun.is_empty() {
                    said.push_str(&format!(", running again {}", rerun.join(", ")));
                }
                if !skip.is_empty() {
                    said.push_str(&format!(", skipping {}", skip.join(", ")));
                }
                out.push(point(HistoryKind::TaskStarted, said));
            }
            TaskChange::TaskPaused { reason } => {
                out.push(point(
                    HistoryKind::TaskPaused,
                    format!("paused: {}", excerpt(reason)),
                ));
            }
            TaskChange::TaskCompleted {} => {
                out.push(point(HistoryKind::TaskEnded, "completed".into()))
            }
            TaskChange::TaskFailed { error } => {
                out.push(point(
                    HistoryKind::TaskEnded,
                    format!("failed: {}", excerpt(error)),
                ));
            }
            TaskChange::TaskCancelled { reason, by } => out.push(point(
                HistoryKind::TaskEnded,
                format!("cancelled by {by}: {}", excerpt(reason)),
            )),
            TaskChange::CheckpointCreated { checkpoint } => {
                known.insert(
                    checkpoint.id.clone(),
                    Known {
                        step_id: checkpoint.step_id.clone(),
                        kind: checkpoint.kind,
                        attempt: checkpoint.attempt,
                    },
                );
            }
            TaskChange::CheckpointEntered { checkpoint_id } => {
                if let Some(Known {
                    step_id: Some(step),
                    attempt,
                    ..
                }) = known.get(checkpoint_id)
                {
                    turns_at.insert(step.clone(), out.len() + 1);
                    out.push(step_point(
                        event,
                        HistoryKind::StepStarted,
                        step,
                        *attempt,
                        checkpoint_id,
                        format!("step {step} started{}", attempt_note(*attempt)),
                    ));
                }
            }
            TaskChange::CheckpointPassed {
                checkpoint_id,
                duration_ms,
                ..
            } => settled(
                &mut out,
                &known,
                event,
                checkpoint_id,
                format!("passed in {}", took(*duration_ms)),
            ),
            TaskChange::CheckpointFailed {
                checkpoint_id,
                error,
                will_retry,
                ..
            } => {
                let again = if *will_retry {
                    " (it will run again)"
                } else {
                    ""
                };
                settled(
                    &mut out,
                    &known,
                    event,
                    checkpoint_id,
                    format!("failed: {}{again}", excerpt(error)),
                );
            }
            TaskChange::CheckpointSkipped {
                checkpoint_id,
                reason,
                ..
            } => settled(
                &mut out,
                &known,
                event,
                checkpoint_id,
                format!("skipped: {}", excerpt(reason)),
            ),
            TaskChange::HumanApprovalReceived {
                request_id,
                status,
                response,
            } if *status != ApprovalStatus::Pending => {
                let by = response
                    .as_ref()
                    .map(|r| format!(" by {}", r.decided_by))
                    .unwrap_or_default();
                out.push(point(
                    HistoryKind::ApprovalDecided,
                    format!("approval {request_id} {}{by}", status.as_str()),
                ));
            }
            _ => {}
        }
    }
    // Each step's turns, after the point where they were taken.
    let mut inserts: Vec<(usize, Vec<HistoryPoint>)> = Vec::new();
    for (step, entries) in journals {
        let Some(&after) = turns_at.get(step) else {
            continue;
        };
        let start = &out[after - 1];
        let turns = turns(step, entries, start);
        if !turns.is_empty() {
            inserts.push((after, turns));
        }
    }
    inserts.sort_by_key(|(after, _)| std::cmp::Reverse(*after));
    for (after, turns) in inserts {
        out.splice(after..after, turns);
    }
    out
}

/// Remembers the checkpoints a copied state (a restored or forked task's
/// first event) starts with.
fn know_all(known: &mut HashMap<CheckpointId, Known>, state: &rein_protocol::TaskState) {
    for cp in &state.checkpoints {
        known.insert(
            cp.id.clone(),
            Known {
                step_id: cp.step_id.clone(),
                kind: cp.kind,
                attempt: cp.attempt,
            },
        );
    }
}

/// A step's agent turns: the entries of its journal that are the model's
/// answers, each placed at `start` (the step's start point).
fn turns(step: &str, entries: &[Value], start: &HistoryPoint) -> Vec<HistoryPoint> {
    let mut n = 0;
    let mut out = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let message = &entry["message"];
        if message["role"] != "assistant" {
            continue;
        }
        n += 1;
        let model = entry["usage"]["model"]
            .as_str()
            .map(|m| format!(" ({m})"))
            .unwrap_or_default();
        out.push(HistoryPoint {
            seq: start.seq,
            at: None,
            kind: HistoryKind::AgentTurn,
            step_id: Some(step.to_owned()),
            attempt: start.attempt,
            checkpoint_id: start.checkpoint_id.clone(),
            turn: Some(n),
            journal_entries: Some(i as u64 + 1),
            description: format!("turn {n} of step {step}{model}: {}", said(message)),
        });
    }
    out
}

/// What a model's answer did, in a few words: the tools it called, else the
/// start of what it said.
fn said(message: &Value) -> String {
    let calls: Vec<&str> = message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .filter_map(|c| c["function"]["name"].as_str().or(c["name"].as_str()))
                .collect()
        })
        .unwrap_or_default();
    if !calls.is_empty() {
        return format!("called {}", calls.join(", "));
    }
    match message["content"].as_str().map(str::trim) {
        Some(text) if !text.is_empty() => format!("said \"{}\"", excerpt(text)),
        _ => "answered nothing".into(),
    }
}

/// The point of a checkpoint leaving `in_progress`: a step's finish, or an
/// engine checkpoint settled.
fn settled(
    out: &mut Vec<HistoryPoint>,
    known: &HashMap<CheckpointId, Known>,
    event: &HarnessEvent,
    checkpoint_id: &CheckpointId,
    how: String,
) {
    let Some(cp) = known.get(checkpoint_id) else {
        return;
    };
    match &cp.step_id {
        Some(step) => {
            out.push(step_point(
                event,
                HistoryKind::StepFinished,
                step,
                cp.attempt,
                checkpoint_id,
                format!("step {step}{} {how}", attempt_note(cp.attempt)),
            ));
        }
        None => out.push(HistoryPoint {
            checkpoint_id: Some(checkpoint_id.clone()),
            ..point(
                event,
                HistoryKind::Checkpoint,
                format!("{} {how}", cp.kind.as_str()),
            )
        }),
    }
}

/// The point `event` makes, of `kind`, said as `description`.
fn point(event: &HarnessEvent, kind: HistoryKind, description: String) -> HistoryPoint {
    HistoryPoint {
        seq: event.seq,
        at: Some(event.timestamp),
        kind,
        step_id: None,
        attempt: None,
        checkpoint_id: None,
        turn: None,
        journal_entries: None,
        description,
    }
}

/// The point `event` makes for an attempt of `step`.
fn step_point(
    event: &HarnessEvent,
    kind: HistoryKind,
    step: &str,
    attempt: u32,
    checkpoint_id: &CheckpointId,
    description: String,
) -> HistoryPoint {
    HistoryPoint {
        step_id: Some(step.to_owned()),
        attempt: Some(attempt),
        checkpoint_id: Some(checkpoint_id.clone()),
        ..point(event, kind, description)
    }
}

/// " (attempt N)" past the first.
fn attempt_note(attempt: u32) -> String {
    if attempt > 1 {
        format!(" (attempt {attempt})")
    } else {
        String::new()
    }
}

fn took(ms: u64) -> String {
    human_duration(ms)
}

/// `n` things, the noun in the number it takes: `1 entry`, `2 entries`.
pub fn counted(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A duration for people: `850 ms` under a second, `12.3 s` under a minute,
/// then whole seconds as `2m 35s` (`1h 2m 3s`).
pub fn human_duration(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1_000.0)
    } else {
        humantime::format_duration(std::time::Duration::from_secs(ms / 1_000)).to_string()
    }
}

/// The first line of `text`, at most [`EXCERPT`] characters (an ellipsis
/// where it was cut).
fn excerpt(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default().trim();
    if line.chars().count() <= EXCERPT && !text.trim().contains('\n') {
        return line.to_owned();
    }
    let cut: String = line.chars().take(EXCERPT).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod duration_tests {
    use super::human_duration;

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(human_duration(850), "850 ms");
        assert_eq!(human_duration(12_340), "12.3 s");
        assert_eq!(human_duration(155_162), "2m 35s");
        assert_eq!(human_duration(3_723_000), "1h 2m 3s");
        assert_eq!(super::counted(1u32, "entry", "entries"), "1 entry");
        assert_eq!(super::counted(0u32, "entry", "entries"), "0 entries");
    }
}
