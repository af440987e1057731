//! Pausing and aborting a task: asked of the runner that runs it, wherever
//! it is, or applied at once to a task nobody runs.

use rein_protocol::{
    ApprovalStatus, CheckpointId, CheckpointStatus, RunnerInfo, TaskChange, TaskId, TaskState,
    TaskStatus,
};

use crate::engine::{ControlOutcome, Engine};
use crate::error::{EngineError, Result};
use crate::process::{is_current, runner_alive};
use crate::recorder::{Recorder, aborted_checkpoint, elapsed_ms};
use crate::store::{ApprovalFilter, ControlKind, ControlRequest};

impl Engine {
    /// Pauses a task: a live runner is asked (it lets running steps finish); a task
    /// nobody runs is paused at once.
    pub async fn pause(&self, id: &TaskId, by: &str, reason: &str) -> Result<ControlOutcome> {
        let state = self.get(id).await?;
        match state.status() {
            TaskStatus::Paused => return Ok(ControlOutcome::AlreadyThere(TaskStatus::Paused)),
            s if s.is_terminal() => {
                return Err(EngineError::WrongStatus {
                    task_id: id.clone(),
                    status: s,
                    what: "it cannot be paused".into(),
                });
            }
            _ => {}
        }
        if let Some(runner) = self.live_runner(&state).await? {
            self.request(id, ControlKind::Pause, by, reason).await?;
            return Ok(ControlOutcome::Requested { runner });
        }
        let mut rec = Recorder::resume(state);
        rec.task_event(TaskChange::TaskPaused {
            reason: format!("paused by {by}: {reason}"),
        })?;
        rec.flush(&self.store, &self.events).await?;
        Ok(ControlOutcome::Applied(Box::new(rec.state)))
    }

    /// Aborts a task: a live runner is asked (it stops running steps); a task nobody
    /// runs is cancelled at once, its interrupted steps recorded as failed.
    pub async fn abort(&self, id: &TaskId, by: &str, reason: &str) -> Result<ControlOutcome> {
        let state = self.get(id).await?;
        match state.status() {
            TaskStatus::Cancelled => {
                // Contracts are cancelled after the abort's commit; a process
                // that died in between left them open, and nothing runs a
                // cancelled task again. Aborting it again finishes the job.
                self.cancel_contracts(id, &format!("the task was aborted (repeated by {by})"))
                    .await?;
                self.executor.task_ended(id, &self.sessions()).await;
                return Ok(ControlOutcome::AlreadyThere(TaskStatus::Cancelled));
            }
            s if s.is_terminal() => {
                return Err(EngineError::WrongStatus {
                    task_id: id.clone(),
                    status: s,
                    what: "it has already finished".into(),
                });
            }
            _ => {}
        }
        if let Some(runner) = self.live_runner(&state).await? {
            self.request(id, ControlKind::Abort, by, reason).await?;
            return Ok(ControlOutcome::Requested { runner });
        }
        let mut rec = Recorder::resume(state);
        // Questions the task was waiting on need no answer any more.
        let waiting = self
            .store
            .list_approvals(&ApprovalFilter {
                status: Some(ApprovalStatus::Pending),
                task_id: Some(id.clone()),
                limit: Some(crate::store::MAX_APPROVALS_PAGE),
            })
            .await?;
        for request in waiting {
            let revoked = self
                .revoke(request, &format!("the task was aborted by {by}"))
                .await?;
            rec.task_event(TaskChange::approval_received(&revoked))?;
        }
        cancel_interrupted(&mut rec, by)?;
        rec.task_event(TaskChange::TaskCancelled {
            reason: reason.to_owned(),
            by: by.to_owned(),
        })?;
        rec.flush(&self.store, &self.events).await?;
        // Contracts of work that will not happen now are cancelled.
        self.cancel_contracts(id, &format!("the task was aborted by {by}"))
            .await?;
        // Its sessions end, and their executors are retired.
        self.executor.task_ended(id, &self.sessions()).await;
        Ok(ControlOutcome::Applied(Box::new(rec.state)))
    }

    /// Cancels the contracts of a task's plan that are not final.
    async fn cancel_contracts(&self, id: &TaskId, why: &str) -> Result<()> {
        let plan = self.plan(id).await?;
        crate::pev::cancel_open(&self.records(), &plan, why).await;
        Ok(())
    }

    async fn live_runner(&self, state: &TaskState) -> Result<Option<RunnerInfo>> {
        // Claimed here (the run may not have started yet): the run takes the request.
        if self.controls.is_running(state.id()) {
            return Ok(Some(self.runner.clone()));
        }
        // Where nodes share the store, the runner is the node holding the
        // task's lease, on whatever host.
        if let Some(leases) = self.store.leases() {
            let holder = leases.holder(state.id()).await?;
            return Ok(holder.map(|l| l.runner).filter(|r| *r != self.runner));
        }
        if state.status() != TaskStatus::InProgress {
            return Ok(None);
        }
        Ok(state
            .head
            .runner
            .clone()
            .filter(|r| !is_current(r) && runner_alive(r)))
    }

    async fn request(&self, id: &TaskId, kind: ControlKind, by: &str, reason: &str) -> Result<()> {
        let request = ControlRequest {
            task_id: id.clone(),
            kind,
            by: by.to_owned(),
            reason: reason.to_owned(),
            requested_at: chrono::Utc::now(),
        };
        self.store.request_control(&request).await?;
        // A run in this engine gets it now, not at the watcher's next look.
        self.controls.hand_over(id).await;
        Ok(())
    }
}

/// Records every in-progress checkpoint as failed because the task was aborted.
fn cancel_interrupted(rec: &mut Recorder, by: &str) -> Result<()> {
    let open: Vec<(CheckpointId, u64)> = rec
        .state
        .checkpoints
        .iter()
        .filter(|c| c.status == CheckpointStatus::InProgress)
        .map(|c| (c.id.clone(), elapsed_ms(c.started_at)))
        .collect();
    for (checkpoint_id, duration_ms) in open {
        rec.task_event(aborted_checkpoint(checkpoint_id, duration_ms, by))?;
    }
    Ok(())
}
