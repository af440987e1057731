//! Human-readable output: one-line descriptions of events, task summaries, tables.

use rein_protocol::usage::thousands;
use std::collections::HashMap;

use rein_protocol::{
    Checkpoint, CheckpointId, CheckpointType, HarnessEvent, TaskChange, TaskState, TaskSummary,
};

/// What the renderer knows about each checkpoint: its step and type.
#[derive(Debug, Default)]
pub struct CheckpointIndex(
    HashMap<CheckpointId, (Option<String>, CheckpointType, u32)>,
    /// The CP2 checkpoints that ask a model for a goal's steps (their input
    /// names the goal); an ordinary plan's CP2 only checks the plan.
    std::collections::HashSet<CheckpointId>,
    /// The title of each tool call an agent reported, by its id: its later
    /// updates, which carry only the id, are named by the tool.
    rein_protocol::event::AgentUpdateLines,
);

impl CheckpointIndex {
    pub fn from_state(state: &TaskState) -> Self {
        let mut index = CheckpointIndex::default();
        for cp in &state.checkpoints {
            index.learn(cp);
        }
        index
    }

    pub fn learn(&mut self, cp: &Checkpoint) {
        self.0
            .insert(cp.id.clone(), (cp.step_id.clone(), cp.kind, cp.attempt));
        if cp.kind == CheckpointType::TaskPlan
            && cp.input.as_ref().is_some_and(|i| i.get("goal").is_some())
        {
            self.1.insert(cp.id.clone());
        }
    }

    /// Records what an event teaches, returning the step and type of its checkpoint.
    pub fn observe(&mut self, event: &HarnessEvent) {
        match &event.change {
            TaskChange::CheckpointCreated { checkpoint } => self.learn(checkpoint),
            TaskChange::AgentUpdate { update, .. } => self.2.learn(update),
            _ => {}
        }
    }

    /// The plan step a checkpoint records, if it records one.
    pub fn step(&self, id: &CheckpointId) -> Option<&str> {
        self.0.get(id).and_then(|(step, _, _)| step.as_deref())
    }

    fn name(&self, id: &CheckpointId) -> (String, bool, u32) {
        match self.0.get(id) {
            Some((Some(step), kind, attempt)) => (format!("{step} [{kind}]"), true, *attempt),
            Some((None, kind, attempt)) => {
                (format!("{} {kind}", kind.phase().label()), false, *attempt)
            }
            None => (id.to_string(), false, 1),
        }
    }
}

pub fn duration_ms(ms: u64) -> String {
    rein_core::history::human_duration(ms)
}

/// One line for an event, or `None` for events that only matter to machines.
pub fn describe(event: &HarnessEvent, index: &CheckpointIndex) -> Option<String> {
    let line = match &event.change {
        TaskChange::TaskCreated { description, .. } => format!("task created: {description}"),
        TaskChange::TaskRestored {
            snapshot_id,
            from_task_id,
            ..
        } => {
            format!("task restored from snapshot {snapshot_id} of {from_task_id}")
        }
        TaskChange::TaskForked {
            from, workspace, ..
        } => {
            let turn = from
                .turn
                .map(|n| format!(" after turn {n}"))
                .unwrap_or_default();
            format!(
                "task forked from {} at event {}{turn}; {}",
                from.task_id,
                from.seq,
                workspace.describe()
            )
        }
        TaskChange::TaskStarted { .. } => "task started".to_owned(),
        TaskChange::TaskResumed { rerun, skip, .. } => {
            let mut s = "task resumed".to_owned();
            if !rerun.is_empty() {
                s.push_str(&format!(" (re-running {})", rerun.join(", ")));
            }
            if !skip.is_empty() {
                s.push_str(&format!(" (skipping {})", skip.join(", ")));
            }
            s
        }
        TaskChange::TaskPaused { reason } => format!("task paused: {reason}"),
        TaskChange::TaskCompleted {} => "task completed".to_owned(),
        // A step's error was on its own `failed` line just before, and the
        // run's last line says it again: this one names the step only.
        TaskChange::TaskFailed { error } => match error
            .strip_prefix("step `")
            .and_then(|rest| rest.split_once("` failed: "))
        {
            Some((step, _)) => format!("task failed: step `{step}` failed (its error is above)"),
            None => format!("task failed: {error}"),
        },
        TaskChange::TaskCancelled { reason, by } => format!("task cancelled by {by}: {reason}"),
        TaskChange::CheckpointCreated { .. } | TaskChange::ProcessStarted { .. } => return None,
        TaskChange::CheckpointEntered { checkpoint_id } => {
            let (name, is_step, attempt) = index.name(checkpoint_id);
            if !is_step {
                // A goal's CP2 is a request to a model, worth a line; a
                // plan's CP2 only checks the plan.
                return index.1.contains(checkpoint_id).then(|| {
                    format!("planning the goal: asking the model for steps (attempt {attempt})")
                });
            }
            if attempt > 1 {
                format!("started  {name} (attempt {attempt})")
            } else {
                format!("started  {name}")
            }
        }
        TaskChange::CheckpointPassed {
            checkpoint_id,
            duration_ms: ms,
            ..
        } => {
            let (name, is_step, _) = index.name(checkpoint_id);
            if is_step {
                format!("passed   {name} in {}", duration_ms(*ms))
            } else {
                format!("{name} passed")
            }
        }
        TaskChange::CheckpointFailed {
            checkpoint_id,
            duration_ms: ms,
            error,
            output,
            ..
        } => {
            let (name, _, _) = index.name(checkpoint_id);
            let mut line = format!("failed   {name} after {}: {error}", duration_ms(*ms));
            for tail in output_tail(output.as_ref(), 3) {
                line.push_str(&format!("\n    | {tail}"));
            }
            line
        }
        TaskChange::RecoveryAttempted {
            step_id,
            error_type,
            action,
            attempt,
            retry_at,
            ..
        } => {
            let when = retry_at
                .map(|t| format!(" at {} UTC", t.format("%H:%M:%S")))
                .unwrap_or_default();
            format!(
                "recover  {step_id}: {error_type} error, {} (#{attempt}){when}",
                action.as_str()
            )
        }
        TaskChange::RecoverySucceeded { step_id, attempts } => {
            format!("recover  {step_id}: passed after {attempts} recovery attempt(s)")
        }
        TaskChange::RecoveryFailed {
            step_id,
            error_type,
            reason,
            ..
        } => {
            format!("recover  {step_id}: gave up on the {error_type} error ({reason})")
        }
        TaskChange::RuntimeSelected { decision, .. } => {
            let reason = serde_json::to_value(decision.reason)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            format!("runtime  {} ({reason})", decision.selected)
        }
        TaskChange::AgentUpdate { update, .. } => agent_update(update, index),
        TaskChange::Compacted {
            model,
            reason,
            messages,
            tokens_before,
            tokens_after,
            ..
        } => format!(
            "compact  {messages} messages summarised by {model} ({reason}): about {tokens_before} → {tokens_after} tokens"
        ),
        TaskChange::PlanDecomposed { steps, .. } => {
            format!("planned  {} steps: {}", steps.len(), steps.join(", "))
        }
        TaskChange::WorkspaceSaved { workspace, .. } => {
            format!("saved    {}", workspace.describe())
        }
        TaskChange::HumanApprovalRequested { request } => {
            let step = request.step_id.as_deref().unwrap_or("task");
            format!("waiting  {step} for a person: {}", ask(request))
        }
        TaskChange::HumanApprovalReceived {
            request_id,
            status,
            response,
        } => {
            let by = response
                .as_ref()
                .map(|r| r.decided_by.as_str())
                .unwrap_or("the deadline");
            match (status, response) {
                (rein_protocol::ApprovalStatus::Pending, Some(r)) => format!(
                    "delegated {request_id} to {}",
                    r.delegate_to.as_deref().unwrap_or("someone else")
                ),
                (status, r) => {
                    let option = r
                        .as_ref()
                        .and_then(|r| r.selected_option.as_deref())
                        .map(|o| format!(" (option `{o}`)"))
                        .unwrap_or_default();
                    format!("answered {request_id}: {status} by {by}{option}")
                }
            }
        }
        TaskChange::CheckpointSkipped {
            checkpoint_id,
            reason,
            ..
        } => {
            let (name, _, _) = index.name(checkpoint_id);
            format!("skipped  {name}: {reason}")
        }
    };
    Some(line)
}

/// The last `lines` lines a step printed: its stderr, or its stdout if stderr is empty.
pub fn output_tail(output: Option<&serde_json::Value>, lines: usize) -> Vec<String> {
    let Some(output) = output else {
        return Vec::new();
    };
    let text = ["stderr_tail", "stdout_tail"]
        .iter()
        .filter_map(|k| output.get(*k).and_then(|v| v.as_str()))
        .find(|t| !t.trim().is_empty())
        .unwrap_or_default();
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..]
        .iter()
        .map(|l| l.chars().take(200).collect())
        .collect()
}

/// An agent's report as one line.
fn agent_update(update: &serde_json::Value, index: &CheckpointIndex) -> String {
    format!("agent    {}", index.2.describe(update))
}

/// A request as one line: the question, the choices (recommended first), how to
/// answer, and the deadline.
pub fn ask(request: &rein_protocol::ApprovalRequest) -> String {
    let mut choices: Vec<String> = Vec::new();
    if let Some(r) = &request.recommended_option {
        choices.push(format!("{r} (recommended)"));
    }
    choices.extend(
        request
            .options
            .iter()
            .filter(|o| Some(*o) != request.recommended_option.as_ref())
            .cloned(),
    );
    let mut line = request.title.clone();
    if !choices.is_empty() {
        line.push_str(&format!(" [{}]", choices.join(" / ")));
    }
    let option = request
        .recommended_option
        .as_ref()
        .or(request.options.first())
        .map(|o| format!(" --option {o}"))
        .unwrap_or_default();
    line.push_str(&format!(
        " — answer: rein approvals approve {}{option} (or deny, skip)",
        request.id
    ));
    if let Some(deadline) = request.deadline {
        line.push_str(&format!(
            "; deadline {} UTC, then `{}`",
            deadline.format("%H:%M:%S"),
            request.on_expiry.as_str()
        ));
    }
    line
}

/// The line for an event with its time in front.
pub fn timed(event: &HarnessEvent, line: &str) -> String {
    format!("[{}] {line}", event.timestamp.format("%H:%M:%S%.3f"))
}

pub fn short_time(t: &rein_protocol::Timestamp) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// A task's history as a table: log position, time (UTC), what happened.
/// An agent turn, which has no time of its own, is indented under its step.
pub fn history_table(history: &rein_protocol::History) -> String {
    let mut out = format!("{:>5}  {:<23}  {}\n", "SEQ", "TIME (UTC)", "WHAT");
    for p in &history.points {
        let time =
            p.at.map(|t| t.format("%Y-%m-%d %H:%M:%S%.3f").to_string())
                .unwrap_or_default();
        let indent = if p.turn.is_some() { "  " } else { "" };
        out.push_str(&format!(
            "{:>5}  {time:<23}  {indent}{}\n",
            p.seq, p.description
        ));
    }
    out.push_str(&format!(
        "task {} is {} at event {}\n",
        history.task_id, history.status, history.last_seq
    ));
    out
}

pub fn task_table(items: &[TaskSummary]) -> String {
    let row = |id: &str, status: &str, steps: &str, created: &str, description: &str| {
        format!("{id:<31} {status:<11} {steps:>9}  {created:<19} {description}\n")
    };
    let mut out = row("ID", "STATUS", "STEPS", "CREATED (UTC)", "DESCRIPTION");
    for t in items {
        out.push_str(&row(
            t.id.as_str(),
            t.status.as_str(),
            &format!("{}/{}", t.steps_finished, t.steps_total),
            &short_time(&t.created_at),
            &t.description,
        ));
    }
    out
}

pub fn task_details(state: &TaskState) -> String {
    let h = &state.head;
    let mut out = format!("{}  {}\n  {}\n", h.id, h.status, h.description);
    out.push_str(&format!(
        "  session {} · created {} · updated {}\n",
        h.session_id,
        short_time(&h.created_at),
        short_time(&h.updated_at)
    ));
    if let Some(ws) = &h.resources.workspace_path {
        out.push_str(&format!("  workspace {ws}\n"));
    }
    if let Some(from) = &h.forked_from {
        let turn = from
            .turn
            .map(|n| format!(", after turn {n}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "  forked from {} at event {}{turn} (rein tasks history {})\n",
            from.task_id, from.seq, from.task_id
        ));
    }
    if let Some(phase) = state.phase() {
        out.push_str(&format!("  reached {}\n", phase.label()));
    }
    // A finished goal task's one-line account, by its model.
    if let Some(line) = state
        .checkpoints
        .iter()
        .rev()
        .find(|c| c.kind == rein_protocol::CheckpointType::TaskComplete)
        .and_then(|c| c.output.as_ref()?.get("summary")?.as_str())
    {
        out.push_str(&format!("  summary: {line}\n"));
    }
    out.push_str(&format!(
        "  steps: {} finished, {} pending\n",
        h.context.completed_steps.len(),
        h.context.pending_steps.len()
    ));
    if let Some(reason) = &h.context.blocked_reason {
        out.push_str(&format!("  blocked: {reason}\n"));
    }
    if let Some(error) = &h.error {
        out.push_str(&format!("  error: {error}\n"));
    }
    if let Some(r) = &h.runner {
        out.push_str(&format!("  runner: pid {} on {}\n", r.pid, r.host));
    }
    out.push_str("  checkpoints:\n");
    let mut total = rein_protocol::Usage::default();
    let mut total_cost = Some(0.0);
    let mut metered = false;
    for cp in &state.checkpoints {
        let what = match &cp.step_id {
            Some(step) if cp.attempt > 1 => format!("{step} (attempt {})", cp.attempt),
            Some(step) => step.clone(),
            None => String::new(),
        };
        let mut line = format!(
            "    {:<4} {:<16} {:<24} {:<11}",
            cp.kind.phase().label().split(' ').next().unwrap_or(""),
            cp.kind.as_str(),
            what,
            cp.status.as_str()
        );
        if let Some(ms) = cp.duration_ms {
            line.push_str(&format!(" {}", duration_ms(ms)));
        }
        if let Some(code) = cp
            .output
            .as_ref()
            .and_then(|o| o.get("exit_code"))
            .and_then(|c| c.as_i64())
        {
            line.push_str(&format!(" exit {code}"));
        }
        if let Some(by) = &cp.approved_by {
            line.push_str(&format!(" by {}", by.who));
        }
        if let Some((used, cost)) = step_usage(cp) {
            line.push_str(&format!(" {} {}", tokens(&used), dollars(cost)));
            total.add(&used);
            total_cost = total_cost.zip(cost).map(|(a, b)| a + b);
            metered = true;
        }
        if let Some(e) = &cp.error {
            line.push_str(&format!(" — {e}"));
        }
        out.push_str(line.trim_end());
        out.push('\n');
        if cp.status == rein_protocol::CheckpointStatus::Failed {
            for tail in output_tail(cp.output.as_ref(), 5) {
                out.push_str(&format!("         | {tail}\n"));
            }
        }
    }
    if metered {
        out.push_str(&format!(
            "  model usage: {} {}\n",
            tokens(&total),
            dollars(total_cost)
        ));
    }
    out
}

/// What a step's model turns used, from its output, and what it cost
/// (`None`: a model it used has no price).
fn step_usage(cp: &rein_protocol::Checkpoint) -> Option<(rein_protocol::Usage, Option<f64>)> {
    let usage = cp.output.as_ref()?.get("usage")?;
    let cost = usage.get("cost_usd").and_then(serde_json::Value::as_f64);
    Some((serde_json::from_value(usage.clone()).ok()?, cost))
}

/// A cost as a person reads it: `$0.0123`, or `unpriced`.
pub fn dollars(cost: Option<f64>) -> String {
    match cost {
        Some(c) if c >= 1.0 => format!("${c:.2}"),
        Some(c) => format!("${c:.4}"),
        None => "unpriced".to_owned(),
    }
}

/// Tokens as a person reads them: `1,234 in (200 cached) / 56 out`, marked
/// `~` when estimated.
pub fn tokens(u: &rein_protocol::Usage) -> String {
    let about = if u.estimated { "~" } else { "" };
    let cached = if u.cached_input_tokens > 0 {
        format!(" ({} cached)", thousands(u.cached_input_tokens))
    } else {
        String::new()
    };
    format!(
        "{about}{} in{cached} / {about}{} out tokens",
        thousands(u.input_tokens),
        thousands(u.output_tokens)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(value: serde_json::Value) -> HarnessEvent {
        HarnessEvent {
            id: rein_protocol::EventId::new(),
            seq: 1,
            timestamp: chrono::Utc::now(),
            change: TaskChange::AgentUpdate {
                checkpoint_id: CheckpointId::new(),
                update: value,
            },
            task_id: None,
            checkpoint_id: None,
            session_id: "s".into(),
            trace_id: "t".into(),
            span_id: "p".into(),
            parent_span_id: None,
        }
    }

    #[test]
    fn a_tool_calls_later_updates_are_named_by_its_tool_not_its_id() {
        let mut index = CheckpointIndex::default();
        let call = update(serde_json::json!({
            "sessionUpdate": "tool_call", "toolCallId": "call_7f3a", "title": "Read notes.md",
            "status": "pending" }));
        index.observe(&call);
        assert_eq!(
            describe(&call, &index).unwrap(),
            "agent    tool Read notes.md: pending"
        );
        let done = update(serde_json::json!({
            "sessionUpdate": "tool_call_update", "toolCallId": "call_7f3a", "status": "completed" }));
        index.observe(&done);
        assert_eq!(
            describe(&done, &index).unwrap(),
            "agent    tool Read notes.md: completed"
        );
        // A call nobody named stays named by its id.
        let other = update(serde_json::json!({
            "sessionUpdate": "tool_call_update", "toolCallId": "call_9", "status": "failed" }));
        assert_eq!(
            describe(&other, &index).unwrap(),
            "agent    tool call_9: failed"
        );
    }
}
