//! Forks: a new task from a point of another task's history. Its state is
//! the fold of the source's log up to that point, made ready to run on; its
//! workspace is what rein kept of the source's there, written into a new
//! directory; its agent sessions take over the source's conversations up to
//! there. The source — task, log, workspace — is only read.
//!
//! - A point between a step's end and rein's keeping of the files it left
//!   moves on to the keeping: the fork never has a step completed whose
//!   files it lacks.
//! - An attempt in progress at the point (an approval's question included)
//!   is closed in the fork as one to run again.
//! - A step the fork runs that already completed in the source after the
//!   point, and whose effects a run would repeat (not `idempotent`, or with
//!   the network, or an agent step that called tools that change things), is
//!   asked about before it runs ([`ForkedFrom::ran_in_source`]); the step
//!   the person forked at (`before`, or `at` with `turn`) is not: naming it
//!   is asking for it.
//! - A step's own agent session is taken over whole if the step completed by
//!   the point, up to its `turn` if it is the step forked at, and not at all
//!   otherwise (the step starts its conversation afresh); a shared session up
//!   to the first step that had not completed. The copied entries leave out
//!   their model usage: the fork did not spend it.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use rein_protocol::ids::{new_span_id, new_trace_id};
use rein_protocol::{
    CheckpointStatus, CheckpointType, EventId, ForkedFrom, HarnessEvent, JournalCopy, RanInSource,
    SavedWorkspace, StepAction, TaskChange, TaskDecomposition, TaskId, TaskState, TaskStatus,
    TaskStep,
};
use serde_json::Value;

use crate::engine::Engine;
use crate::error::{EngineError, Result};
use crate::fold::WILL_RETRY;
use crate::recorder::Recorder;
use crate::spans::caller_span;

/// Where in the source's history a fork starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForkPoint {
    /// Just before the step's first attempt started.
    Before(String),
    /// Just after the step last completed, as rein kept the files it left.
    After(String),
    /// As of this event; with a turn, the agent step started at it goes on
    /// after that many turns.
    At { seq: u64, turn: Option<u32> },
}

/// A fork to make.
#[derive(Debug, Clone)]
pub struct Fork {
    pub point: ForkPoint,
    /// An empty directory for the fork's workspace; a new one under the
    /// workspace root if `None`.
    pub workspace: Option<PathBuf>,
    /// Steps' fields, `STEP.FIELD` → value.
    pub set: BTreeMap<String, Value>,
    /// As [`crate::CreateTask::confined_to`].
    pub confined_to: Option<Vec<PathBuf>>,
}

/// The fork point found in a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Located {
    /// The last event the fork's state folds.
    pub seq: u64,
    /// The step the person named, which runs without being asked about.
    pub named: Option<String>,
    pub turn: Option<u32>,
    /// The workspace kept at or before `seq`, and its event.
    pub saved: Option<(u64, SavedWorkspace)>,
}

/// Each checkpoint of a log: the step it records and its type, found once
/// (a log of 100,000 events is looked up many times).
pub(crate) struct Checkpoints<'a>(
    std::collections::HashMap<&'a rein_protocol::CheckpointId, (Option<&'a str>, CheckpointType)>,
);

/// A source task's log, with its checkpoints found once.
pub(crate) struct Log<'a> {
    events: &'a [HarnessEvent],
    checkpoints: Checkpoints<'a>,
}

impl<'a> Checkpoints<'a> {
    pub(crate) fn of(events: &'a [HarnessEvent]) -> Checkpoints<'a> {
        let mut out = std::collections::HashMap::new();
        for e in events {
            match &e.change {
                TaskChange::CheckpointCreated { checkpoint } => {
                    out.insert(
                        &checkpoint.id,
                        (checkpoint.step_id.as_deref(), checkpoint.kind),
                    );
                }
                TaskChange::TaskRestored { state, .. } | TaskChange::TaskForked { state, .. } => {
                    for cp in &state.checkpoints {
                        out.insert(&cp.id, (cp.step_id.as_deref(), cp.kind));
                    }
                }
                _ => {}
            }
        }
        Checkpoints(out)
    }

    fn step(&self, id: &rein_protocol::CheckpointId) -> Option<&'a str> {
        self.0.get(id).and_then(|(step, _)| *step)
    }

    fn kind(&self, id: &rein_protocol::CheckpointId) -> Option<CheckpointType> {
        self.0.get(id).map(|(_, kind)| *kind)
    }
}

/// Finds `point` in a task's whole log (`plan` its plan).
pub(crate) fn locate(
    task: &TaskId,
    events: &[HarnessEvent],
    plan: &TaskDecomposition,
    point: &ForkPoint,
    checkpoints: &Checkpoints,
) -> std::result::Result<Located, String> {
    let step_of = |id| checkpoints.step(id).map(str::to_owned);
    let last = events.last().map_or(0, |e| e.seq);
    let has_step = |id: &str| {
        if plan.steps.iter().any(|s| s.id == id) {
            Ok(())
        } else {
            let ids: Vec<&str> = plan.steps.iter().map(|s| s.id.as_str()).collect();
            Err(format!(
                "the plan of task {task} has no step `{id}` (its steps: {})",
                ids.join(", ")
            ))
        }
    };
    let (mut seq, named, turn) = match point {
        ForkPoint::At { seq, turn } => {
            if *seq == 0 || *seq > last {
                return Err(format!(
                    "task {task} has no event {seq}: its log runs from 1 to {last}"
                ));
            }
            let named = match turn {
                None => None,
                Some(_) => {
                    let started = events.get(*seq as usize - 1).and_then(|e| match &e.change {
                        TaskChange::CheckpointEntered { checkpoint_id } => step_of(checkpoint_id),
                        _ => None,
                    });
                    let agent = started.filter(|s| {
                        plan.steps.iter().any(|step| {
                            &step.id == s && matches!(step.action, StepAction::Agent { .. })
                        })
                    });
                    match agent {
                        Some(step) => Some(step),
                        None => {
                            return Err(format!(
                                "event {seq} of task {task} is not the start of an agent step: a turn goes with the event an agent step started at (its turns' `seq` in `rein tasks history {task}`)"
                            ));
                        }
                    }
                }
            };
            (*seq, named, *turn)
        }
        ForkPoint::Before(step) => {
            has_step(step)?;
            // Its first attempt: the first of its checkpoints entered (one
            // skipped because a dependency failed never was).
            let entered = events.iter().find_map(|e| match &e.change {
                TaskChange::CheckpointEntered { checkpoint_id }
                    if step_of(checkpoint_id).as_deref() == Some(step.as_str()) =>
                {
                    Some(checkpoint_id)
                }
                _ => None,
            });
            let first = entered.and_then(|id| {
                events.iter().find(|e| {
                    matches!(&e.change, TaskChange::CheckpointCreated { checkpoint } if &checkpoint.id == id)
                })
            });
            // A fork's (or a restored task's) first event holds the steps
            // that ran before it was made.
            let copied = events.first().is_some_and(|e| match &e.change {
                TaskChange::TaskForked { state, .. } | TaskChange::TaskRestored { state, .. } => {
                    state
                        .checkpoints
                        .iter()
                        .any(|c| c.step_id.as_deref() == Some(step.as_str()))
                }
                _ => false,
            });
            match first {
                Some(e) => (e.seq - 1, Some(step.clone()), None),
                None if copied => {
                    return Err(format!(
                        "step `{step}` ran before task {task} was made from another task (its first event says which): fork that task before it, or fork this one at an event (--at SEQ)"
                    ));
                }
                None => {
                    return Err(format!(
                        "step `{step}` never started in task {task}: there is no point before it to fork from (fork at an event instead: --at SEQ)"
                    ));
                }
            }
        }
        ForkPoint::After(step) => {
            has_step(step)?;
            let passed = events.iter().rev().find_map(|e| match &e.change {
                TaskChange::CheckpointPassed { checkpoint_id, .. }
                    if step_of(checkpoint_id).as_deref() == Some(step.as_str()) =>
                {
                    Some((e.seq, checkpoint_id.clone()))
                }
                _ => None,
            });
            let Some((at, checkpoint)) = passed else {
                return Err(format!(
                    "step `{step}` never completed in task {task}: fork before it instead (--before {step})"
                ));
            };
            // As rein kept the files it left, if it did.
            let kept = events.iter().find_map(|e| match &e.change {
                TaskChange::WorkspaceSaved {
                    checkpoint_id: Some(c),
                    ..
                } if c == &checkpoint => Some(e.seq),
                _ => None,
            });
            (kept.unwrap_or(at), None, None)
        }
    };
    // A step ended at or before the point whose files were kept after it:
    // the point moves on to the keeping (never past the start of the step
    // the fork is before).
    let bound = match point {
        ForkPoint::Before(_) => seq,
        ForkPoint::After(_) | ForkPoint::At { .. } => last,
    };
    loop {
        let ended: HashSet<&rein_protocol::CheckpointId> = events[..seq as usize]
            .iter()
            .filter_map(|e| match &e.change {
                TaskChange::CheckpointPassed { checkpoint_id, .. }
                | TaskChange::CheckpointFailed { checkpoint_id, .. } => Some(checkpoint_id),
                _ => None,
            })
            .collect();
        let later = events[seq as usize..].iter().find_map(|e| match &e.change {
            TaskChange::WorkspaceSaved {
                checkpoint_id: Some(c),
                ..
            } if ended.contains(c) => Some(e.seq),
            _ => None,
        });
        match later {
            Some(kept) if kept > seq && kept <= bound => seq = kept,
            _ => break,
        }
    }
    let saved = events[..seq as usize]
        .iter()
        .rev()
        .find_map(|e| match &e.change {
            TaskChange::WorkspaceSaved { workspace, .. } => Some((e.seq, workspace.clone())),
            _ => None,
        });
    Ok(Located {
        seq,
        named,
        turn,
        saved,
    })
}

/// The fork's state: `state` (the source's as of the point) made ready to
/// run on as task `id`, in `workspace`.
fn ready_to_run(mut state: TaskState, at: chrono::DateTime<chrono::Utc>) -> TaskState {
    state.head.status = TaskStatus::Pending;
    state.head.error = None;
    state.head.runner = None;
    state.head.current_checkpoint = None;
    state.head.context.blocked_reason = None;
    state.head.resources.started_at = None;
    for cp in &mut state.checkpoints {
        if cp.status == CheckpointStatus::InProgress {
            cp.status = CheckpointStatus::Failed;
            cp.duration_ms =
                Some(u64::try_from((at - cp.started_at).num_milliseconds()).unwrap_or_default());
            cp.error = Some(
                "the fork starts while this attempt was running: it runs again in the fork".into(),
            );
            cp.metadata.insert(WILL_RETRY.into(), true.into());
        }
    }
    crate::engine::fresh_checkpoint_ids(state)
}

/// Whether running `step` again could repeat what it did in the source
/// (whose output is `output`).
fn has_effects(step: &TaskStep, output: Option<&Value>) -> bool {
    if !step.idempotent {
        return true;
    }
    match &step.action {
        StepAction::Command { network, .. } => *network,
        StepAction::Agent {
            network,
            tools,
            mcp,
            ..
        } => {
            let called = output
                .and_then(|o| o["tool_calls"].as_u64())
                .is_some_and(|n| n > 0);
            let changing = !mcp.is_empty()
                || tools
                    .iter()
                    .any(|t| t == "write_file" || t == "run_command" || t == "delegate");
            *network || (called && changing)
        }
        StepAction::Noop | StepAction::Approval { .. } | StepAction::Verify { .. } => false,
    }
}

/// What a completed step did, in a line.
fn did(step: &TaskStep, output: Option<&Value>) -> String {
    let excerpt = |s: &str| {
        let line = s.lines().next().unwrap_or_default();
        if line.chars().count() > 80 {
            format!("{}…", line.chars().take(80).collect::<String>())
        } else {
            line.to_owned()
        }
    };
    match &step.action {
        StepAction::Command { run, network, .. } => {
            let code = output
                .and_then(|o| o["exit_code"].as_i64())
                .map(|c| format!(", exit {c}"))
                .unwrap_or_default();
            let net = if *network { ", with the network" } else { "" };
            format!("ran `{}`{code}{net}", excerpt(run))
        }
        StepAction::Agent { prompt, .. } => {
            let calls = output
                .and_then(|o| o["tool_calls"].as_u64())
                .unwrap_or_default();
            format!("agent: “{}”, {calls} tool call(s)", excerpt(prompt))
        }
        StepAction::Approval { title, .. } => format!("asked “{}”", excerpt(title)),
        StepAction::Noop | StepAction::Verify { .. } => "completed".into(),
    }
}

/// The steps the fork runs that completed in the source after the point,
/// with effects a run would repeat.
fn ran_after(
    events: &[HarnessEvent],
    located: &Located,
    plan: &TaskDecomposition,
    state: &TaskState,
    checkpoints: &Checkpoints,
) -> Vec<RanInSource> {
    let done = &state.head.context.completed_steps;
    let mut out: Vec<RanInSource> = Vec::new();
    for e in &events[located.seq as usize..] {
        let TaskChange::CheckpointPassed {
            checkpoint_id,
            output,
            ..
        } = &e.change
        else {
            continue;
        };
        let Some(step_id) = checkpoints.step(checkpoint_id).map(str::to_owned) else {
            continue;
        };
        let Some(step) = plan.steps.iter().find(|s| s.id == step_id) else {
            continue;
        };
        // An answered escalation is not the step's run.
        let kind = checkpoints.kind(checkpoint_id);
        if kind != Some(step.checkpoint)
            || done.contains(&step_id)
            || located.named.as_deref() == Some(step_id.as_str())
            || !has_effects(step, output.as_ref())
        {
            continue;
        }
        let ran = RanInSource {
            step_id: step_id.clone(),
            seq: e.seq,
            at: e.timestamp,
            did: did(step, output.as_ref()),
        };
        match out.iter_mut().find(|r| r.step_id == step_id) {
            Some(earlier) => *earlier = ran,
            None => out.push(ran),
        }
    }
    out
}

/// How many entries of a journal the first `turn` model answers of the step
/// whose part begins at `from` take, with what followed the last of them
/// (its tool calls' results); `Err(turns it has)` if it has fewer.
fn through_turn(entries: &[Value], from: usize, turn: u32) -> std::result::Result<usize, u32> {
    let mut seen = 0;
    for (i, entry) in entries.iter().enumerate().skip(from) {
        // The next step's part of a shared session.
        if i > from && entry.get("turn_of").is_some() {
            return if seen >= turn { Ok(i) } else { Err(seen) };
        }
        if entry["message"]["role"] == "assistant" {
            if seen == turn {
                return Ok(i);
            }
            seen += 1;
        }
    }
    if seen >= turn {
        Ok(entries.len())
    } else {
        Err(seen)
    }
}

/// Applies `--set STEP.FIELD=VALUE` to the fork's plan: to a step's own
/// field, or its action's; a field the step does not have is refused.
pub(crate) fn apply_set(
    plan: &mut TaskDecomposition,
    set: &BTreeMap<String, Value>,
    done: &[String],
) -> std::result::Result<(), String> {
    for (key, value) in set {
        // The longest step id the key starts with: ids may hold dots.
        let found = plan
            .steps
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                key.strip_prefix(s.id.as_str())
                    .is_some_and(|rest| rest.starts_with('.') && rest.len() > 1)
            })
            .max_by_key(|(_, s)| s.id.len())
            .map(|(i, s)| (i, key[s.id.len() + 1..].to_owned()));
        let Some((i, field)) = found else {
            let ids: Vec<&str> = plan.steps.iter().map(|s| s.id.as_str()).collect();
            return Err(format!(
                "--set {key}: write it STEP.FIELD=VALUE, STEP one of the plan's steps ({})",
                ids.join(", ")
            ));
        };
        let step = &plan.steps[i];
        if done.contains(&step.id) {
            return Err(format!(
                "--set {key}: step `{}` had completed at the fork point, so the fork does not run it; fork before it (--before {}) to change it",
                step.id, step.id
            ));
        }
        if field == "id" {
            return Err(format!("--set {key}: a step's id cannot be changed"));
        }
        let own = STEP_FIELDS.contains(&field.as_str())
            || serde_json::to_value(step)
                .ok()
                .and_then(|j| j.as_object().map(|o| o.contains_key(&field)))
                .unwrap_or(false);
        // As given; else, for a text field, as its text (`run=true` is the
        // command `true`, not a boolean).
        let changed = set_field(step, &field, own, value).or_else(|first| match value {
            Value::String(_) => Err(first),
            other => {
                set_field(step, &field, own, &Value::String(other.to_string())).map_err(|_| first)
            }
        });
        let changed = changed.map_err(|why| format!("--set {key}: {why}"))?;
        plan.steps[i] = changed;
    }
    Ok(())
}

/// `step` with `field` (its own if `own`, else its action's) set to
/// `value`; refused if the step does not take it, or would drop it.
fn set_field(
    step: &TaskStep,
    field: &str,
    own: bool,
    value: &Value,
) -> std::result::Result<TaskStep, String> {
    let mut json = serde_json::to_value(step).map_err(|e| e.to_string())?;
    if own {
        json[field] = value.clone();
    } else {
        json["action"][field] = value.clone();
    }
    let changed: TaskStep = serde_json::from_value(json).map_err(|e| e.to_string())?;
    // What was set must be there: a field the step does not know would be
    // dropped.
    let back = serde_json::to_value(&changed).map_err(|e| e.to_string())?;
    let kept = if own {
        &back[field]
    } else {
        &back["action"][field]
    };
    if kept != value {
        let kind = back["action"]["kind"].as_str().unwrap_or("a");
        return Err(format!(
            "step `{}` ({kind} step) has no field `{field}` that takes {value}",
            step.id
        ));
    }
    Ok(changed)
}

/// Writes what `keeper` kept (`kept`) into `dir`: a new directory made
/// beside it under a temporary name and renamed into place, so a fork
/// stopped halfway leaves no half-written workspace where a task's is.
async fn make_fork_workspace(
    keeper: &std::sync::Arc<dyn crate::saved::WorkspaceHistory>,
    task: &TaskId,
    kept: &SavedWorkspace,
    dir: &std::path::Path,
) -> Result<crate::saved::Restored> {
    let root = kept.root.as_deref().unwrap_or_default();
    let refused = |error: String| EngineError::Workspace {
        path: dir.display().to_string(),
        error: std::io::Error::other(error),
    };
    let named_empty = dir.exists();
    if named_empty {
        // A directory the person named: it must be empty, and is written
        // in place.
        let empty = std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none());
        if !empty {
            return Err(refused(format!(
                "{} is not empty: a fork's workspace is written only into a new or empty directory",
                dir.display()
            )));
        }
        let made = keeper.restore_for(task, root, dir).await;
        if made.is_err() {
            discard(dir, true);
        }
        return made.map_err(refused);
    }
    let parent = dir.parent().unwrap_or(std::path::Path::new("."));
    crate::paths::make_workspace(parent).map_err(|e| refused(e.to_string()))?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    sweep_stopped_forks(parent);
    let partial = parent.join(format!(".{name}.forking.{}", std::process::id()));
    let made = keeper
        .restore_for(task, root, &partial)
        .await
        .map_err(refused)?;
    std::fs::rename(&partial, dir).map_err(|e| refused(e.to_string()))?;
    Ok(made)
}

/// Takes away a workspace written for a fork that was not made: a new
/// directory whole, a named one's contents (it was empty).
fn discard(dir: &std::path::Path, named: bool) {
    let gone = if named {
        std::fs::read_dir(dir).and_then(|entries| {
            for entry in entries.flatten() {
                let path = entry.path();
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    std::fs::remove_dir_all(path)?;
                } else {
                    std::fs::remove_file(path)?;
                }
            }
            Ok(())
        })
    } else {
        std::fs::remove_dir_all(dir)
    };
    if let Err(e) = gone {
        tracing::warn!(path = %dir.display(), "cannot take away a workspace written for a fork that was not made: {e}");
    }
}

/// Removes what forks stopped halfway (their process gone) left beside
/// the workspaces: `.NAME.forking.PID` directories no task has.
fn sweep_stopped_forks(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix('.')
            .and_then(|n| n.rsplit_once(".forking."))
            .and_then(|(_, pid)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
        if !alive {
            if let Err(e) = std::fs::remove_dir_all(entry.path()) {
                tracing::warn!(path = %entry.path().display(), "cannot remove a stopped fork's directory: {e}");
            }
        }
    }
}

/// A step's own fields that may be absent from its JSON (unset options).
const STEP_FIELDS: [&str; 8] = [
    "description",
    "timeout_ms",
    "idempotent",
    "risk_description",
    "recovery",
    "permissions",
    "reads",
    "writes",
];

impl Engine {
    /// Makes a fork of task `id` (see the module's doc); it is `pending`,
    /// to be run like any task.
    pub async fn fork(&self, id: &TaskId, fork: Fork) -> Result<TaskState> {
        // The log and the plan, read side by side (a long task's are large).
        let (events, source_plan) =
            tokio::join!(self.store.events(id, 0, usize::MAX), self.plan(id));
        let events = events?;
        if events.is_empty() {
            return Err(EngineError::TaskNotFound(id.clone()));
        }
        let source_plan = source_plan?;
        // Each checkpoint's step and type, looked up all through.
        let log = Log {
            events: &events,
            checkpoints: Checkpoints::of(&events),
        };
        let located = locate(id, log.events, &source_plan, &fork.point, &log.checkpoints)
            .map_err(EngineError::NotForkable)?;
        let Some(keeper) = self.config.saved.clone() else {
            return Err(EngineError::NotForkable(
                "this rein keeps no workspaces (it has no data directory for them), so it cannot fork".into(),
            ));
        };
        let (kept_at, kept) = match &located.saved {
            Some((at, kept)) if kept.root.is_some() => (*at, kept.clone()),
            Some((at, kept)) => {
                return Err(EngineError::NotForkable(format!(
                    "rein could not keep the workspace of task {id} at event {at} ({}), so no fork can start there with its files; fork from another point (rein tasks history {id})",
                    kept.unavailable.as_deref().unwrap_or("no reason recorded")
                )));
            }
            None => {
                return Err(EngineError::NotForkable(format!(
                    "rein kept no workspace of task {id} at or before event {}: fork from a later point (rein tasks history {id})",
                    located.seq
                )));
            }
        };
        // The workspace: an empty directory named, or a new one; written
        // while the log is folded.
        let task_id = TaskId::new();
        let guard = self.config.protected(fork.confined_to.clone());
        let (workspace, guard) = match &fork.workspace {
            Some(dir) => {
                let dir = guard
                    .check_workspace(dir)
                    .map_err(|why| crate::paths::PathsRefused(vec![why]))?;
                (dir, guard)
            }
            None => (
                self.config.workspace_root.join(task_id.as_str()),
                self.config.protected(None),
            ),
        };
        let named = fork.workspace.is_some();
        let writing = {
            let (keeper, task, kept, dir) = (
                keeper.clone(),
                task_id.clone(),
                kept.clone(),
                workspace.clone(),
            );
            tokio::spawn(async move { make_fork_workspace(&keeper, &task, &kept, &dir).await })
        };
        // Made ready to run while the workspace is still being written (a
        // long task's state has many checkpoints to go through).
        let now = chrono::Utc::now();
        let made = self
            .fork_state(id, &log, source_plan, &located, &fork.set, &task_id)
            .await
            .map(|(state, plan, ran, journals, done)| {
                (ready_to_run(state, now), plan, ran, journals, done)
            });
        let written = writing.await.map_err(|e| EngineError::Workspace {
            path: workspace.display().to_string(),
            error: std::io::Error::other(e.to_string()),
        });
        let (state, mut plan, ran_in_source, journals, done, made) = match (made, written) {
            (Ok(m), Ok(Ok(w))) => (m.0, m.1, m.2, m.3, m.4, w),
            (made, written) => {
                // What was written for a fork that is not made goes.
                if matches!(written, Ok(Ok(_))) {
                    discard(&workspace, named);
                }
                made?;
                return Err(match written {
                    Ok(Err(e)) | Err(e) => e,
                    Ok(Ok(_)) => EngineError::NotForkable("the fork could not be made".into()),
                });
            }
        };
        let written_to = workspace.clone();
        let recorded = async {
            let workspace = guard
                .check_workspace(&workspace)
                .map_err(|why| crate::paths::PathsRefused(vec![why]))?;
            let pinned = crate::paths::pin(&workspace)?;
            let mut state = state;
            state.head.resources.workspace_path = Some(workspace.display().to_string());
            state.head.resources.workspace_pin = Some(pinned.pin);
            let from = ForkedFrom {
                task_id: id.clone(),
                seq: located.seq,
                turn: located.turn,
                ran_in_source,
                journals,
            };
            let (trace_id, parent_span_id) = match caller_span() {
                Some((trace, parent)) => (trace, Some(parent)),
                None => (new_trace_id(), None),
            };
            let first = HarnessEvent {
                id: EventId::new(),
                seq: 1,
                timestamp: now,
                change: TaskChange::TaskForked {
                    from: Box::new(from),
                    state: Box::new(state.clone()),
                    workspace: SavedWorkspace {
                        files: made.files,
                        bytes: made.bytes,
                        ..kept
                    },
                },
                task_id: Some(task_id.clone()),
                checkpoint_id: None,
                session_id: state.head.session_id.clone(),
                trace_id,
                span_id: new_span_id(),
                parent_span_id,
            };
            tracing::info!(task_id = %task_id, source = %id, seq = located.seq, kept_at, "forking");
            let mut rec = Recorder::genesis(first)?;
            // Plan–execute–verify steps the fork runs get contracts of their own.
            let records = self.records();
            let finished: HashSet<&str> = done.iter().map(String::as_str).collect();
            for step in plan
                .steps
                .iter_mut()
                .filter(|s| s.pev.is_some() && !finished.contains(s.id.as_str()))
            {
                if let Some(pev) = step.pev.as_mut() {
                    pev.contract_id = None;
                }
            }
            let session = rec.state.head.session_id.clone();
            let proposed =
                crate::pev::propose(&records, &mut plan, task_id.as_str(), &session).await?;
            if let Err(e) = rec.flush_new(plan, &self.store, &self.events).await {
                crate::pev::withdraw(&records, &proposed, "the fork could not be made").await;
                return Err(e);
            }
            Ok(rec.state)
        }
        .await;
        match recorded {
            Ok(state) => {
                self.remember(&state);
                Ok(state)
            }
            Err(e) => {
                discard(&written_to, named);
                Err(e)
            }
        }
    }

    /// The fork's state as of the point (checked), its plan with the
    /// changes, the steps to ask about, the journals to take over, and the
    /// steps done.
    async fn fork_state(
        &self,
        id: &TaskId,
        log: &Log<'_>,
        source_plan: TaskDecomposition,
        located: &Located,
        set: &BTreeMap<String, Value>,
        task_id: &TaskId,
    ) -> Result<(
        TaskState,
        TaskDecomposition,
        Vec<RanInSource>,
        Vec<JournalCopy>,
        Vec<String>,
    )> {
        let state = crate::fold::fold(&log.events[..located.seq as usize]).map_err(|error| {
            EngineError::Corrupt {
                task_id: id.clone(),
                error,
            }
        })?;
        if state.status().is_terminal() {
            return Err(EngineError::NotForkable(format!(
                "task {id} had ended ({}) at event {}: fork from a point before its end (rein tasks history {id})",
                state.status(),
                located.seq
            )));
        }
        let decomposed = log.events[..located.seq as usize]
            .iter()
            .any(|e| matches!(e.change, TaskChange::PlanDecomposed { .. }));
        if source_plan.goal.is_some() && !decomposed {
            return Err(EngineError::NotForkable(format!(
                "task {id} had no plan yet at event {} (its goal was decomposed later): fork from a point after its plan was made",
                located.seq
            )));
        }
        // The plan the fork runs: the source's, as it was at the point
        // (a goal's steps came at its decomposition), with the changes.
        let mut plan = source_plan;
        let done = state.head.context.completed_steps.clone();
        apply_set(&mut plan, set, &done).map_err(EngineError::NotForkable)?;
        if !set.is_empty() {
            plan = crate::plan::validate(plan)?;
        }
        let ran_in_source = ran_after(log.events, located, &plan, &state, &log.checkpoints);
        let journals = self.journals_to_copy(id, task_id, &state, located).await?;
        Ok((state, plan, ran_in_source, journals, done))
    }

    /// The point `rein tasks retry` forks a failed task at: just before its
    /// first failed step.
    pub async fn retry_point(&self, id: &TaskId) -> Result<ForkPoint> {
        let state = self.get(id).await?;
        if state.status() != TaskStatus::Failed {
            return Err(EngineError::WrongStatus {
                task_id: id.clone(),
                status: state.status(),
                what: format!(
                    "only a failed task is retried; to go back to any point of its history, fork it (rein tasks fork {id} --at SEQ)"
                ),
            });
        }
        // The first step whose attempts all failed, in the order it failed.
        let failed = state
            .checkpoints
            .iter()
            .filter(|cp| {
                cp.status == CheckpointStatus::Failed && !cp.metadata.contains_key(WILL_RETRY)
            })
            .filter_map(|cp| cp.step_id.clone())
            .find(|s| !state.head.context.completed_steps.contains(s));
        match failed {
            Some(step) => Ok(ForkPoint::Before(step)),
            None => Err(EngineError::NotForkable(format!(
                "task {id} failed before any of its steps did ({}): there is no step to run again; fork it at an event instead (rein tasks history {id})",
                state.head.error.as_deref().unwrap_or("no error recorded")
            ))),
        }
    }

    /// What of the source's agent sessions the fork takes over.
    async fn journals_to_copy(
        &self,
        source: &TaskId,
        fork: &TaskId,
        state: &TaskState,
        located: &Located,
    ) -> Result<Vec<JournalCopy>> {
        let done = &state.head.context.completed_steps;
        let too_few = |step: &str, had: u32| {
            EngineError::NotForkable(format!(
                "step `{step}` of task {source} took {had} turn(s): there is no turn {} to fork after",
                located.turn.unwrap_or_default()
            ))
        };
        let mut out = Vec::new();
        for session in self.sessions().of_task(source).await? {
            if session.delegation.is_some() {
                continue;
            }
            let from = crate::sessions::journal_name(&session);
            let to = if session.shared {
                rein_protocol::SessionId::of(fork, &session.name).to_string()
            } else {
                from.clone()
            };
            let entries = self.store.load_journal(source, &from).await?;
            let take = if session.shared {
                // Up to the first step of the session not done at the point.
                let mut take = entries.len();
                for (i, entry) in entries.iter().enumerate() {
                    let Some(step) = entry["turn_of"].as_str() else {
                        continue;
                    };
                    if done.iter().any(|d| d == step) {
                        continue;
                    }
                    take = match (&located.named, located.turn) {
                        (Some(named), Some(turn)) if named == step => {
                            through_turn(&entries, i, turn).map_err(|had| too_few(step, had))?
                        }
                        _ => i,
                    };
                    break;
                }
                take
            } else if done.contains(&session.name) {
                entries.len()
            } else {
                match (&located.named, located.turn) {
                    (Some(named), Some(turn)) if named == &session.name => {
                        through_turn(&entries, 0, turn).map_err(|had| too_few(named, had))?
                    }
                    _ => 0,
                }
            };
            if take > 0 {
                out.push(JournalCopy {
                    from,
                    to,
                    entries: take as u64,
                });
            }
        }
        Ok(out)
    }
}
