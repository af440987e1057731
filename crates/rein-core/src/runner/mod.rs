//! One task's run: the step scheduler (spec `tasks.md` §5 rules 18–19).
//!
//! The loop starts every ready step (dependencies complete, under the parallelism
//! limit), commits the checkpoints it opened before the steps start, waits for a
//! step to end or a control request, records the result, and goes round again.
//! Results and the next steps' starts share one commit, so a chain of steps costs
//! one durable commit per step.
//!
//! Running steps are futures the runner polls itself, not tasks of their own:
//! a step waits on a child process, a model or a person, so running them
//! concurrently needs no thread of theirs, and a step that ends does not have to
//! wake another worker thread to tell the runner (a chain of short steps paid
//! that hand-off on every step). A step that panics fails alone, as a crashed
//! executor.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod approvals;
mod end;
mod forked;
mod launch;
mod progress;
mod questions;
mod recovery;
mod take_up;

use launch::Running;
use progress::{Progress, Progresses};

use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::{FutureExt, future::BoxFuture};
use rein_protocol::{
    ApprovalRequest, ApprovedBy, Approver, Checkpoint, CheckpointId, CheckpointStatus,
    CheckpointType, StepAction, TaskChange, TaskDecomposition, TaskState, TaskStatus, TaskStep,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::context::{RunContext, RunOptions};
use crate::controls::RunnerMessage;
use crate::error::{EngineError, Result};
use crate::executor::{StepOutcome, StepRequest};
use crate::fold::{RETRY_AT, WILL_RETRY};
use crate::lifecycle::{IllegalTransition, Machine, StepEvent, StepState, Steps};
use crate::recorder::{Recorder, SpanRef};
use crate::recorder::{aborted_checkpoint, elapsed_ms, system_checkpoint};
use crate::store::{ControlKind, StoreError};

const DEPENDENCY_FAILED: &str = "dependency_failed";

/// How long a resumed run waits for an interrupted attempt's leftover
/// processes to go after SIGKILL.
const LEFTOVER_WAIT: Duration = Duration::from_secs(5);

/// Closes an attempt that did not finish, for the step to run again.
fn to_run_again(checkpoint_id: CheckpointId, duration_ms: u64, error: String) -> TaskChange {
    TaskChange::CheckpointFailed {
        checkpoint_id,
        duration_ms,
        error,
        output: None,
        will_retry: true,
        error_type: None,
        retry_at: None,
    }
}

/// How long a finished goal task waits for its one-line summary.
const SUMMARY_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether a message ends the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterMessage {
    Continue,
    Abort,
}

pub(crate) struct TaskRun<'e> {
    ctx: &'e RunContext,
    rec: Recorder,
    steps: Vec<Arc<TaskStep>>,
    dependants: Vec<Vec<usize>>,
    /// Dependencies of each step not yet completed or skipped.
    waiting_on: Vec<usize>,
    progress: Progresses,
    attempts: Vec<u32>,
    ready: BTreeSet<usize>,
    running: Running,
    limit: usize,
    fail_fast: bool,
    first_failure: Option<usize>,
    /// The task's workspace, by identity: checked before steps start.
    workspace: rein_sandbox::Pinned,
    /// What the task's directories must keep clear of, checked again as
    /// each step starts what reads them.
    guard: Arc<rein_sandbox::Protected>,
    pausing: Option<String>,
    /// Who aborted the task and why, once an abort request arrived.
    abort_by: Option<(String, String)>,
    /// How many times recovery has retried or waited on each step.
    recoveries: Vec<u32>,
    plan_recovery: rein_protocol::RecoveryPolicy,
    /// What the task's model calls may spend (the plan's `budget`).
    budget: Option<rein_protocol::Budget>,
    /// The shared harness state the steps record themselves into, if any.
    shared_state: Option<String>,
    /// The plan–execute–verify steps with a contract, found once.
    contracts: Vec<ContractWatch>,
    /// Questions running steps asked, and the line they come in on.
    questions: questions::Questions,
    asks: mpsc::UnboundedReceiver<crate::asking::StepMessage>,
    asks_tx: mpsc::UnboundedSender<crate::asking::StepMessage>,
    /// This run already recorded that it took the task up (a goal's
    /// decomposition did, before the plan existed).
    taken_up: bool,
    /// A goal task's goal and route: its finished task gets a one-line summary.
    goal: Option<(String, rein_protocol::Goal)>,
    /// What of the workspace is kept (the configuration's rules with the
    /// plan's on top), and the steps whose end is still to be kept.
    snapshot: rein_protocol::SnapshotRules,
    to_save: Vec<CheckpointId>,
}

/// A plan–execute–verify step whose contract follows it.
#[derive(Debug)]
struct ContractWatch {
    step: usize,
    /// Its `STEP.approve` step, if the plan has it.
    approve: Option<usize>,
    contract: String,
    /// The status the contract was last brought to.
    seen: Option<rein_protocol::ContractStatus>,
}

impl<'e> TaskRun<'e> {
    /// The run of a task whose take-up this run has already recorded.
    pub(crate) fn taken_up(mut self) -> Self {
        self.taken_up = true;
        self
    }

    pub(crate) fn new(ctx: &'e RunContext, rec: Recorder, plan: TaskDecomposition) -> Result<Self> {
        let limit = plan
            .max_parallel
            .map_or(ctx.config.max_parallel, |p| p as usize)
            .max(1);
        let shared_state = plan.shared_state.clone();
        let steps: Vec<Arc<TaskStep>> = plan.steps.into_iter().map(Arc::new).collect();
        let index: HashMap<&str, usize> = steps
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id.as_str(), i))
            .collect();
        let mut dependants = vec![Vec::new(); steps.len()];
        for (i, step) in steps.iter().enumerate() {
            for dep in &step.depends_on {
                let d = *index.get(dep.as_str()).ok_or_else(|| {
                    EngineError::BadRequest(format!("stored plan: unknown dependency `{dep}`"))
                })?;
                dependants[d].push(i);
            }
        }
        // Where each step got to, from its latest checkpoint.
        let mut attempts = vec![0u32; steps.len()];
        let mut recoveries = vec![0u32; steps.len()];
        let mut latest: Vec<Option<&Checkpoint>> = vec![None; steps.len()];
        for cp in &rec.state.checkpoints {
            if let Some(&i) = cp.step_id.as_deref().and_then(|s| index.get(s)) {
                attempts[i] = attempts[i].max(cp.attempt);
                latest[i] = Some(cp);
                if cp.metadata.contains_key(RETRY_AT) {
                    recoveries[i] += 1;
                }
            }
        }
        let progress = latest
            .iter()
            .zip(&steps)
            .map(|(cp, step)| match cp {
                None => Progress::NotStarted,
                // An escalation of a failure that a person answered.
                Some(cp)
                    if cp.kind == CheckpointType::UserApproval
                        && !matches!(step.action, StepAction::Approval { .. })
                        && cp.status == CheckpointStatus::Completed =>
                {
                    Progress::NotStarted
                }
                // A failed attempt to be retried later: a durable timer.
                Some(cp)
                    if cp.status == CheckpointStatus::Failed
                        && cp.metadata.contains_key(WILL_RETRY)
                        && cp.metadata.contains_key(RETRY_AT) =>
                {
                    cp.metadata
                        .get(RETRY_AT)
                        .and_then(|v| v.as_str())
                        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                        .map_or(Progress::NotStarted, |t| Progress::Delayed {
                            until: t.to_utc(),
                        })
                }
                Some(cp) => match cp.status {
                    // Recorded but never entered: nothing ran; it starts afresh.
                    CheckpointStatus::Pending => Progress::NotStarted,
                    CheckpointStatus::InProgress => Progress::Interrupted {
                        checkpoint: cp.id.clone(),
                        started_at: cp.started_at,
                    },
                    CheckpointStatus::Completed => Progress::Completed,
                    // A failed attempt to be retried leaves the step to run again.
                    CheckpointStatus::Failed if cp.metadata.contains_key(WILL_RETRY) => {
                        Progress::NotStarted
                    }
                    CheckpointStatus::Failed => Progress::Failed,
                    CheckpointStatus::Skipped
                        if cp.metadata.get("skipped_kind").and_then(|v| v.as_str())
                            == Some(DEPENDENCY_FAILED) =>
                    {
                        Progress::DependencyFailed
                    }
                    CheckpointStatus::Skipped => Progress::Skipped,
                },
            })
            .collect::<Vec<_>>();
        let progress = Progresses::new(progress);
        let workspace = rec
            .state
            .head
            .resources
            .workspace_path
            .clone()
            .map(PathBuf::from)
            .unwrap_or_else(|| ctx.config.workspace_root.join(rec.state.head.id.as_str()));
        let guard = Arc::new(ctx.config.protected(None));
        let workspace = match rec.state.head.resources.workspace_pin {
            // Pinned when the task was made: the path as it was resolved
            // then, the directory by identity, checked before steps start.
            Some(pin) => rein_sandbox::Pinned::new(workspace, pin),
            // A task an older rein made: checked as it is now (a symlink put
            // in its place is refused) and pinned for this run.
            None => {
                let checked = guard
                    .check_workspace(&workspace)
                    .map_err(|why| crate::paths::PathsRefused(vec![why]))?;
                crate::paths::pin(&checked)?
            }
        };
        let first_failure = None;
        let contracts = steps
            .iter()
            .enumerate()
            .filter_map(|(i, step)| {
                let contract = step.pev.as_ref()?.contract_id.clone()?;
                let approve = crate::pev::approve_id(&step.id);
                Some(ContractWatch {
                    step: i,
                    approve: index.get(approve.as_str()).copied(),
                    contract,
                    seen: None,
                })
            })
            .collect();
        let (asks_tx, asks) = mpsc::unbounded_channel();
        let mut run = TaskRun {
            ctx,
            rec,
            waiting_on: vec![0; steps.len()],
            steps,
            dependants,
            progress,
            attempts,
            ready: BTreeSet::new(),
            running: Running::default(),
            limit,
            fail_fast: plan.fail_fast,
            first_failure,
            workspace,
            guard,
            pausing: None,
            abort_by: None,
            recoveries,
            plan_recovery: plan.recovery,
            budget: plan.budget,
            snapshot: ctx
                .config
                .snapshot
                .with(&plan.snapshot.clone().unwrap_or_default()),
            to_save: Vec::new(),
            goal: plan.goal.clone().map(|g| (plan.original_task.clone(), g)),
            shared_state,
            contracts,
            questions: questions::Questions::default(),
            asks,
            asks_tx,
            taken_up: false,
        };
        run.questions.seen = run.unreceived_any();
        Ok(run)
    }

    pub(crate) async fn drive(
        mut self,
        options: RunOptions,
        mut controls: mpsc::UnboundedReceiver<RunnerMessage>,
        starting: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Result<TaskState> {
        self.questions.no_wait = options.no_wait;
        // Held until the run's first steps have started (or it waits).
        let mut starting = match starting {
            Some(permit) => Some(permit),
            None => Arc::clone(&self.ctx.starting).acquire_owned().await.ok(),
        };
        self.reattach_approvals().await?;
        self.decide_operator_choices(&options).await?;
        let leftovers = self.stop_leftovers(options.sweep.as_ref()).await;
        self.take_up(&options, leftovers)?;
        // Committing the take-up is where two processes resuming the same task meet:
        // the store lets one of them through.
        let task_id = self.rec.state.head.id.clone();
        let raced = |e: EngineError| match e {
            EngineError::Store(StoreError::Conflict { .. }) => EngineError::Raced {
                task_id: task_id.clone(),
            },
            other => other,
        };
        if self.rec.state.status() == TaskStatus::Paused {
            self.flush().await.map_err(raced)?;
            return Ok(self.rec.state);
        }
        // A fork takes over the source's conversations before its steps run.
        if let Err(reason) = self.copy_fork_journals().await {
            self.rec.task_event(TaskChange::TaskPaused {
                reason: format!("{reason}; abort the fork, or fork the source again"),
            })?;
            self.flush().await.map_err(raced)?;
            return Ok(self.rec.state);
        }
        let mut taken_up = false;
        self.settle_dependencies()?;
        self.apply_settled()?;
        if self.ctx.config.saved.is_some() {
            // The workspace as this run found it, kept before any step
            // starts: a fork before the first step finds it there.
            self.flush().await.map_err(raced)?;
            taken_up = true;
            self.save_workspace(None).await?;
        }
        let mut pause_seen = false;
        let mut poll = tokio::time::interval(self.ctx.config.control_poll);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // An interrupt or a request that came with a step's end is seen
            // before anything new starts.
            if !pause_seen && options.pause.is_cancelled() {
                pause_seen = true;
                self.pause_on_interrupt();
            }
            while let Ok(message) = controls.try_recv() {
                if self.on_message(message)? == AfterMessage::Abort {
                    return self.abort().await;
                }
            }
            let started = self.start_ready()?;
            if started.is_empty() && self.running.is_empty() {
                if (!self.awaiting_any() && !self.delayed_any()) || !self.scheduling() {
                    // The last results are committed with the task's close.
                    return self.finish().await;
                }
                // Retry timers are waited out; only people are not waited for.
                if options.no_wait && !self.delayed_any() {
                    let reason = self.waiting_reason();
                    self.rec.task_event(TaskChange::TaskPaused { reason })?;
                    self.flush().await.map_err(raced)?;
                    return Ok(self.rec.state);
                }
            }
            if taken_up {
                self.flush().await?;
            } else {
                self.flush().await.map_err(raced)?;
                taken_up = true;
            }
            self.sync_contracts(false).await;
            for i in started {
                self.spawn(i);
            }
            drop(starting.take());
            let deadline = [self.next_deadline(), self.next_retry()]
                .into_iter()
                .flatten()
                .min();
            tokio::select! {
                biased;
                () = options.cancel.cancelled() => return self.stop().await,
                Some(finished) = self.running.next(), if !self.running.is_empty() => {
                    // What a step sent before it ended is its own, recorded first.
                    self.take_step_messages().await?;
                    self.on_joined(finished)?;
                    while let Some(finished) = self.running.next_ended() {
                        self.take_step_messages().await?;
                        self.on_joined(finished)?;
                    }
                    // The workspace as those steps left it, before any step
                    // that depends on them starts.
                    for checkpoint in std::mem::take(&mut self.to_save) {
                        self.save_workspace(Some(checkpoint)).await?;
                    }
                    self.withdraw_questions("the step that asked has ended", false).await?;
                }
                Some(message) = self.asks.recv() => {
                    self.on_step_message(message).await?;
                    // Reports come in bursts: one commit for all that are here.
                    self.take_step_messages().await?;
                }
                () = options.pause.cancelled(), if !pause_seen => {
                    pause_seen = true;
                    self.pause_on_interrupt();
                }
                Some(message) = controls.recv() => {
                    if self.on_message(message)? == AfterMessage::Abort {
                        return self.abort().await;
                    }
                }
                () = tokio::time::sleep(deadline.unwrap_or_default()), if deadline.is_some() => {
                    self.expire_due().await?;
                    self.release_due()?;
                }
                _ = poll.tick(), if self.awaiting_any() || self.questions.any() => self.poll_approvals().await?,
                // A decision made on another node, at once.
                () = self.ctx.changed_elsewhere(crate::store::Change::Decisions),
                    if self.awaiting_any() || self.questions.any() => self.poll_approvals().await?,
            }
        }
    }

    /// Keeps the task's workspace as it is now — as the step whose
    /// checkpoint is `after` left it, or as the run took the task up — and
    /// records what was kept (or why nothing could be: the task goes on
    /// either way).
    async fn save_workspace(&mut self, after: Option<CheckpointId>) -> Result<()> {
        let Some(keeper) = self.ctx.config.saved.clone() else {
            return Ok(());
        };
        // The point is this event's position: a fork at or after it finds it.
        let seq = self.rec.state.head.last_seq + 1;
        // The directory the task was given, by its pin, not whatever its
        // path names now.
        let workspace = match self.workspace.open() {
            Ok(dir) => {
                keeper
                    .save(&self.rec.state.head.id, seq, dir, &self.snapshot)
                    .await
            }
            Err(changed) => rein_protocol::SavedWorkspace {
                unavailable: Some(changed.to_string()),
                ..rein_protocol::SavedWorkspace::default()
            },
        };
        if let Some(why) = &workspace.unavailable {
            tracing::warn!(task_id = %self.rec.state.head.id, "{why}");
        }
        self.rec.task_event(TaskChange::WorkspaceSaved {
            checkpoint_id: after,
            workspace,
        })
    }

    /// Takes a pause/abort request or a settled approval.
    fn on_message(&mut self, message: RunnerMessage) -> Result<AfterMessage> {
        match message {
            RunnerMessage::Control(request) => match request.kind {
                ControlKind::Pause => {
                    self.pausing.get_or_insert_with(|| {
                        format!("paused by {}: {}", request.by, request.reason)
                    });
                }
                ControlKind::Abort => {
                    self.abort_by = Some((request.by, request.reason));
                    return Ok(AfterMessage::Abort);
                }
            },
            RunnerMessage::Settled(request) => self.on_settled(*request)?,
        }
        Ok(AfterMessage::Continue)
    }

    /// Nothing new starts; the task pauses once running steps end.
    fn pause_on_interrupt(&mut self) {
        self.pausing
            .get_or_insert_with(|| "paused by the operator (interrupt)".into());
    }
}
