//! What the editor is shown of a run: the task's events and the steps' reports
//! turned into ACP session updates (plan entries, tool calls, agent text).

use super::*;

/// A task seen from the client: its plan's entries and what became of each.
pub(super) struct View {
    pub(super) task: TaskId,
    pub(super) session: String,
    /// The last event sent.
    pub(super) seen_to: u64,
    /// The plan's steps: id, description, high risk.
    pub(super) steps: Vec<(String, String, bool)>,
    /// Each step checkpoint's step.
    pub(super) checkpoints: HashMap<CheckpointId, String>,
    pub(super) status: HashMap<String, CheckpointStatus>,
    pub(super) sent_plan: Option<Vec<PlanEntry>>,
    /// The steps a person denied (an approve step's "deny").
    pub(super) denied: HashSet<String>,
    /// The task stopped (paused, failed, aborted or completed): nothing of it
    /// is being worked on.
    pub(super) stopped: bool,
}

impl View {
    pub(super) fn new(task: TaskId, session: &str) -> View {
        View {
            task,
            session: session.to_owned(),
            seen_to: 0,
            steps: Vec::new(),
            checkpoints: HashMap::new(),
            status: HashMap::new(),
            sent_plan: None,
            denied: HashSet::new(),
            stopped: false,
        }
    }

    pub(super) async fn load_plan(&mut self, engine: &Engine) {
        if let Ok(plan) = engine.plan(&self.task).await {
            self.steps = plan
                .steps
                .iter()
                .map(|s| {
                    (
                        s.id.clone(),
                        s.description.clone(),
                        s.risk_level == RiskLevel::High,
                    )
                })
                .collect();
        }
    }

    /// Reads the task's log from the start: what it shows is sent to `cx` as
    /// a replay (its prompt included), or only taken in.
    pub(super) async fn read_log(
        &mut self,
        engine: &Engine,
        cx: Option<&ConnectionTo<Client>>,
    ) -> Result<(), EngineError> {
        loop {
            let events = engine.events(&self.task, self.seen_to, 500).await?;
            if events.is_empty() {
                return Ok(());
            }
            for event in &events {
                let updates = self.updates(engine, event, true).await;
                if let Some(cx) = cx {
                    for update in updates {
                        send(cx, &self.session, update);
                    }
                }
            }
        }
    }

    /// The plan as ACP entries, if it changed since it was last sent.
    pub(super) fn plan_update(&mut self) -> Option<SessionUpdate> {
        if self.steps.is_empty() {
            return None;
        }
        let entries: Vec<PlanEntry> = self
            .steps
            .iter()
            .map(|(id, description, high)| {
                // ACP has pending, in progress and completed: a step that
                // did not get done is never `completed`, and one that is not
                // being worked on (the task stopped) never `in_progress`, so
                // an editor's plan neither spins nor ticks what did not run.
                let status = self.status.get(id);
                let (state, note) = match status {
                    None | Some(CheckpointStatus::Pending) => (PlanEntryStatus::Pending, ""),
                    Some(CheckpointStatus::InProgress) if self.stopped => {
                        (PlanEntryStatus::Pending, " (stopped)")
                    }
                    Some(CheckpointStatus::InProgress) => (PlanEntryStatus::InProgress, ""),
                    Some(CheckpointStatus::Completed) => (PlanEntryStatus::Completed, ""),
                    Some(CheckpointStatus::Skipped) => (PlanEntryStatus::Pending, " (skipped)"),
                    Some(CheckpointStatus::Failed) if self.denied.contains(id) => {
                        (PlanEntryStatus::Pending, " (denied)")
                    }
                    Some(CheckpointStatus::Failed) => (PlanEntryStatus::Pending, " (failed)"),
                };
                let priority = if *high {
                    PlanEntryPriority::High
                } else {
                    PlanEntryPriority::Medium
                };
                PlanEntry::new(format!("{id}: {description}{note}"), priority, state)
            })
            .collect();
        if self.sent_plan.as_ref() == Some(&entries) {
            return None;
        }
        self.sent_plan = Some(entries.clone());
        Some(SessionUpdate::Plan(Plan::new(entries)))
    }

    /// The task stopped: the plan as it stands, nothing in progress.
    pub(super) fn stop(&mut self) -> Option<SessionUpdate> {
        self.stopped = true;
        self.plan_update()
    }

    /// What one event of the task shows the client; `replay` also shows its
    /// prompt.
    pub(super) async fn updates(
        &mut self,
        engine: &Engine,
        event: &HarnessEvent,
        replay: bool,
    ) -> Vec<SessionUpdate> {
        self.seen_to = event.seq;
        let mut out = Vec::new();
        let step_of = |view: &View, cp: &CheckpointId| view.checkpoints.get(cp).cloned();
        match &event.change {
            TaskChange::TaskCreated { description, .. } => {
                if replay {
                    out.push(SessionUpdate::UserMessageChunk(ContentChunk::new(
                        ContentBlock::Text(TextContent::new(description.clone())),
                    )));
                }
                self.load_plan(engine).await;
                out.extend(self.plan_update());
            }
            TaskChange::PlanDecomposed { .. } => {
                self.load_plan(engine).await;
                out.extend(self.plan_update());
            }
            TaskChange::CheckpointCreated { checkpoint } => {
                if checkpoint.kind != CheckpointType::TaskPlan
                    && let Some(step) = &checkpoint.step_id
                    && self.steps.iter().any(|(id, ..)| id == step)
                {
                    self.checkpoints.insert(checkpoint.id.clone(), step.clone());
                }
            }
            TaskChange::CheckpointEntered { checkpoint_id } => {
                if let Some(step) = step_of(self, checkpoint_id) {
                    self.status.insert(step, CheckpointStatus::InProgress);
                    out.extend(self.plan_update());
                }
            }
            TaskChange::CheckpointPassed {
                checkpoint_id,
                output,
                ..
            } => {
                if let Some(step) = step_of(self, checkpoint_id) {
                    self.status.insert(step, CheckpointStatus::Completed);
                    if let Some(answer) = output
                        .as_ref()
                        .and_then(|o| o.get("text"))
                        .and_then(|t| t.as_str())
                        .filter(|t| !t.trim().is_empty())
                    {
                        out.push(text(&format!("{}\n", answer.trim_end())));
                    }
                    out.extend(self.plan_update());
                }
            }
            TaskChange::CheckpointFailed {
                checkpoint_id,
                error,
                will_retry,
                ..
            } => {
                if let Some(step) = step_of(self, checkpoint_id) {
                    if *will_retry {
                        out.push(text(&format!(
                            "Step {step} failed and will run again: {error}\n"
                        )));
                    } else {
                        self.status.insert(step.clone(), CheckpointStatus::Failed);
                        if error.starts_with("denied by ") {
                            self.denied.insert(step.clone());
                        }
                        out.push(text(&format!("Step {step} failed: {error}\n")));
                        out.extend(self.plan_update());
                    }
                }
            }
            TaskChange::CheckpointSkipped { checkpoint_id, .. } => {
                if let Some(step) = step_of(self, checkpoint_id) {
                    self.status.insert(step, CheckpointStatus::Skipped);
                    out.extend(self.plan_update());
                }
            }
            TaskChange::AgentUpdate {
                checkpoint_id,
                update,
            } => {
                if let Some(update) = tool_update(step_of(self, checkpoint_id), update) {
                    out.push(update);
                }
            }
            TaskChange::HumanApprovalRequested { request } => {
                out.push(SessionUpdate::ToolCall(question_call(request)));
            }
            TaskChange::HumanApprovalReceived {
                request_id,
                status,
                response,
            } if *status != ApprovalStatus::Pending => {
                let by = response
                    .as_ref()
                    .map_or_else(|| "the deadline".to_owned(), |r| r.decided_by.clone());
                let chosen = response
                    .as_ref()
                    .and_then(|r| r.selected_option.as_deref())
                    .map(|o| format!(" ({o})"))
                    .unwrap_or_default();
                let done = if *status == ApprovalStatus::Approved {
                    ToolCallStatus::Completed
                } else {
                    ToolCallStatus::Failed
                };
                out.push(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    request_id.to_string(),
                    ToolCallUpdateFields::new().status(done),
                )));
                out.push(text(&format!("{request_id}: {status}{chosen} by {by}\n")));
            }
            TaskChange::TaskCompleted {} => {
                out.extend(self.stop());
                out.push(text(&format!("Task {} completed.\n", self.task)));
            }
            TaskChange::TaskFailed { error } => {
                out.extend(self.stop());
                out.push(text(&format!("Task {} failed: {error}\n", self.task)));
            }
            TaskChange::TaskPaused { reason } => {
                out.extend(self.stop());
                out.push(text(&format!(
                    "Task {} paused: {reason}. Send /resume to go on.\n",
                    self.task
                )));
            }
            TaskChange::TaskCancelled { reason, by } => {
                out.extend(self.stop());
                out.push(text(&format!(
                    "Task {} was aborted by {by}: {reason}\n",
                    self.task
                )));
            }
            TaskChange::TaskResumed { .. } => {
                self.stopped = false;
                out.extend(self.plan_update());
            }
            _ => {}
        }
        out
    }
}

/// An agent step's tool call, as its runtime reported it, with an id unique in
/// the session (the step's id before the runtime's).
pub(super) fn tool_update(
    step: Option<String>,
    update: &serde_json::Value,
) -> Option<SessionUpdate> {
    let kind = update.get("sessionUpdate")?.as_str()?;
    if kind != "tool_call" && kind != "tool_call_update" {
        return None;
    }
    let mut update = update.clone();
    let call = update.get("toolCallId")?.as_str()?.to_owned();
    update["toolCallId"] =
        serde_json::Value::String(format!("{}/{call}", step.as_deref().unwrap_or("step")));
    serde_json::from_value(update).ok()
}
