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
mod questions;
mod recovery;

use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::{FutureExt, future::BoxFuture};
use rein_protocol::{
    ApprovalRequest, ApprovedBy, Approver, Checkpoint, CheckpointId, CheckpointStatus,
    CheckpointType, StepAction, TaskChange, TaskDecomposition, TaskState, TaskStatus, TaskStep,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::controls::RunnerMessage;
use crate::engine::{Engine, RunOptions, aborted_checkpoint, elapsed_ms, system_checkpoint};
use crate::error::{EngineError, Result};
use crate::executor::{StepOutcome, StepRequest};
use crate::fold::{RETRY_AT, WILL_RETRY};
use crate::lifecycle::{IllegalTransition, Machine, StepEvent, StepState, Steps};
use crate::recorder::{Recorder, SpanRef};
use crate::store::{ControlKind, StoreError};

/// A step's place in its lifecycle ([`Steps`]), with what the runner keeps
/// for it there.
#[derive(Debug)]
enum Progress {
    NotStarted,
    Running {
        checkpoint: CheckpointId,
        span: SpanRef,
        token: CancellationToken,
    },
    /// Its attempt has ended; the runner is recording the outcome.
    Ended,
    /// Waiting for a person to settle `request`.
    Awaiting {
        checkpoint: CheckpointId,
        span: SpanRef,
        request: Box<ApprovalRequest>,
    },
    /// To run again once `until` has passed (a durable retry timer).
    Delayed {
        until: rein_protocol::Timestamp,
    },
    /// Left in progress by a runner that stopped.
    Interrupted {
        checkpoint: CheckpointId,
        started_at: rein_protocol::Timestamp,
    },
    Completed,
    /// Skipped on purpose: counts as done for the steps that depend on it.
    Skipped,
    Failed,
    /// Not run because a dependency failed.
    DependencyFailed,
}

impl Progress {
    fn state(&self) -> StepState {
        match self {
            Progress::NotStarted => StepState::NotStarted,
            Progress::Running { .. } => StepState::Running,
            Progress::Ended => StepState::Ended,
            Progress::Awaiting { .. } => StepState::Awaiting,
            Progress::Delayed { .. } => StepState::Delayed,
            Progress::Interrupted { .. } => StepState::Interrupted,
            Progress::Completed => StepState::Completed,
            Progress::Skipped => StepState::Skipped,
            Progress::Failed => StepState::Failed,
            Progress::DependencyFailed => StepState::DependencyFailed,
        }
    }

    fn satisfies_dependants(&self) -> bool {
        matches!(self, Progress::Completed | Progress::Skipped)
    }
    fn is_failure(&self) -> bool {
        matches!(self, Progress::Failed | Progress::DependencyFailed)
    }
}

/// Each step's progress, with how many steps wait on a person or on a retry
/// timer: the run loop asks both on every turn, and counting them as they change
/// spares it a walk over every step of a long plan. Reads go through the slice;
/// every change goes through [`Progresses::set`], which holds it to the step
/// lifecycle's table.
struct Progresses {
    items: Vec<Progress>,
    awaiting: usize,
    delayed: usize,
}

impl Progresses {
    fn new(items: Vec<Progress>) -> Progresses {
        let (awaiting, delayed) = Progresses::count(&items);
        Progresses {
            items,
            awaiting,
            delayed,
        }
    }

    /// (awaiting, delayed) among `items`, counted.
    fn count(items: &[Progress]) -> (usize, usize) {
        let count = |f: fn(&Progress) -> bool| items.iter().filter(|p| f(p)).count();
        (
            count(|p| matches!(p, Progress::Awaiting { .. })),
            count(|p| matches!(p, Progress::Delayed { .. })),
        )
    }

    /// Moves step `i` by `event` to `new`, which must be where the step
    /// lifecycle's table takes it; returns what it was.
    fn set(
        &mut self,
        i: usize,
        event: StepEvent,
        new: Progress,
    ) -> std::result::Result<Progress, IllegalTransition> {
        let to = Steps::next(self.items[i].state(), event)?;
        if to != new.state() {
            return Err(IllegalTransition {
                kind: Steps::KIND,
                id: None,
                from: Steps::state_name(self.items[i].state()).to_owned(),
                event: format!(
                    "{} into {}",
                    Steps::event_name(event),
                    Steps::state_name(new.state())
                ),
                allowed: vec![format!(
                    "{} into {}",
                    Steps::event_name(event),
                    Steps::state_name(to)
                )],
            });
        }
        let old = std::mem::replace(&mut self.items[i], new);
        for (p, add) in [(&old, false), (&self.items[i], true)] {
            let counter = match p {
                Progress::Awaiting { .. } => &mut self.awaiting,
                Progress::Delayed { .. } => &mut self.delayed,
                _ => continue,
            };
            if add {
                *counter += 1;
            } else {
                *counter -= 1;
            }
        }
        // Every engine test that waits on a person or a timer checks the counts.
        debug_assert_eq!(
            (self.awaiting, self.delayed),
            Progresses::count(&self.items)
        );
        Ok(old)
    }

    /// The request step `i` waits on, to bring up to date.
    fn awaited_mut(&mut self, i: usize) -> Option<&mut ApprovalRequest> {
        match &mut self.items[i] {
            Progress::Awaiting { request, .. } => Some(request),
            _ => None,
        }
    }
}

impl std::ops::Deref for Progresses {
    type Target = [Progress];
    fn deref(&self) -> &[Progress] {
        &self.items
    }
}

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

type Finished = (usize, StepOutcome, Duration);

/// How long a finished goal task waits for its one-line summary.
const SUMMARY_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether a message ends the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterMessage {
    Continue,
    Abort,
}

pub(crate) struct TaskRun<'e> {
    engine: &'e Engine,
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
    asks: mpsc::UnboundedReceiver<crate::executor::StepMessage>,
    asks_tx: mpsc::UnboundedSender<crate::executor::StepMessage>,
    /// This run already recorded that it took the task up (a goal's
    /// decomposition did, before the plan existed).
    taken_up: bool,
    /// A goal task's goal and route: its finished task gets a one-line summary.
    goal: Option<(String, rein_protocol::Goal)>,
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

    pub(crate) fn new(engine: &'e Engine, rec: Recorder, plan: TaskDecomposition) -> Result<Self> {
        let limit = plan
            .max_parallel
            .map_or(engine.config.max_parallel, |p| p as usize)
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
            .unwrap_or_else(|| {
                engine
                    .config
                    .workspace_root
                    .join(rec.state.head.id.as_str())
            });
        let guard = Arc::new(engine.config.protected(None));
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
            engine,
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
            None => Arc::clone(&self.engine.starting).acquire_owned().await.ok(),
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
        let mut taken_up = false;
        self.settle_dependencies()?;
        self.apply_settled()?;
        let mut pause_seen = false;
        let mut poll = tokio::time::interval(self.engine.config.control_poll);
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
                () = self.engine.changed_elsewhere(crate::store::Change::Decisions),
                    if self.awaiting_any() || self.questions.any() => self.poll_approvals().await?,
            }
        }
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

    /// Records the start or resumption, and settles steps a stopped runner left in
    /// progress: idempotent ones (and `--rerun`) run again, `--skip` ones are
    /// skipped, and any other pauses the task naming it.
    fn take_up(
        &mut self,
        options: &RunOptions,
        mut leftovers: HashMap<usize, std::result::Result<Option<String>, String>>,
    ) -> Result<()> {
        if !self.taken_up {
            let change =
                crate::goal_run::take_up_change(&self.engine.runner, &self.rec.state, options);
            self.rec.task_event(change)?;
        }
        for i in 0..self.steps.len() {
            let Progress::Interrupted {
                checkpoint,
                started_at,
            } = &self.progress[i]
            else {
                continue;
            };
            let (checkpoint, duration_ms) = (checkpoint.clone(), elapsed_ms(*started_at));
            let step = Arc::clone(&self.steps[i]);
            // Nothing of the attempt may still run beside a new one, nor while
            // a person is asked whether it partly ran.
            let leftover = match leftovers.remove(&i).unwrap_or(Ok(None)) {
                Ok(found) => found,
                Err(reason) => {
                    self.rec.task_event(TaskChange::TaskPaused { reason })?;
                    return Ok(());
                }
            };
            let found = leftover
                .as_deref()
                .map(|l| format!("; {l}"))
                .unwrap_or_default();
            if options.skip.contains(&step.id) {
                self.rec.task_event(TaskChange::CheckpointSkipped {
                    checkpoint_id: checkpoint,
                    reason: "skipped by the operator after rein stopped while it was running"
                        .into(),
                    duration_ms: Some(duration_ms),
                })?;
                self.set(i, StepEvent::Skip, Progress::Skipped)?;
            } else if step.idempotent || options.rerun.contains(&step.id) {
                let why = if step.idempotent {
                    "it is idempotent"
                } else {
                    "the operator chose --rerun"
                };
                self.rec.task_event(to_run_again(
                    checkpoint,
                    duration_ms,
                    format!("interrupted: rein stopped while this step was running{found}; running it again because {why}"),
                ))?;
                self.set(i, StepEvent::RunAgain, Progress::NotStarted)?;
            } else {
                // It may have partly run: a person decides.
                self.ask_interrupted(i, checkpoint, leftover.as_deref())?;
            }
        }
        Ok(())
    }

    /// Stops what is left of the interrupted attempts' processes: each one's
    /// process group as recorded, and any process started with its `REIN_*`
    /// marks (which also finds an attempt killed before its group was
    /// recorded). Off the async threads: it looks at `/proc` and may wait.
    /// An attempt `sweep` (taken after the runner stopped) did not see is gone.
    /// By step: `Ok(what was found)`, or `Err(why the task must pause)` when
    /// some of it is still there after the wait.
    async fn stop_leftovers(
        &self,
        sweep: Option<&rein_sandbox::process::Sweep>,
    ) -> HashMap<usize, std::result::Result<Option<String>, String>> {
        use rein_sandbox::process::{Leftover, stop_leftover};
        let mut out = HashMap::new();
        for i in 0..self.steps.len() {
            let Progress::Interrupted { checkpoint, .. } = &self.progress[i] else {
                continue;
            };
            let Some(cp) = self.rec.state.checkpoint(checkpoint) else {
                continue;
            };
            let recorded = cp
                .metadata
                .get(crate::fold::PROCESS)
                .and_then(|p| serde_json::from_value::<rein_protocol::StepProcess>(p.clone()).ok());
            let marks = crate::executor::attempt_marks(
                &self.rec.state.head.id,
                &self.steps[i].id,
                cp.attempt,
            );
            if let Some(sweep) = sweep {
                let marks: Vec<(&str, &str)> =
                    marks.iter().map(|(k, v)| (*k, v.as_str())).collect();
                if !sweep.saw(recorded.as_ref(), &marks) {
                    out.insert(i, Ok(None));
                    continue;
                }
            }
            let looked = tokio::task::spawn_blocking(move || {
                let marks: Vec<(&str, &str)> =
                    marks.iter().map(|(k, v)| (*k, v.as_str())).collect();
                stop_leftover(recorded.as_ref(), &marks, LEFTOVER_WAIT)
            })
            .await;
            let step = &self.steps[i].id;
            out.insert(
                i,
                match looked {
                    Ok(Leftover::Gone) => Ok(None),
                    Ok(Leftover::Stopped { processes }) => Ok(Some(format!(
                        "{processes} process(es) of the interrupted attempt were still running and were stopped first"
                    ))),
                    Ok(Leftover::StillThere { processes }) => Err(format!(
                        "{processes} process(es) of an interrupted attempt of `{step}` are still running after SIGKILL; stop them, then resume the task"
                    )),
                    Err(e) => Err(format!(
                        "could not look for what is left of an interrupted attempt of `{step}` ({e}); resume the task again"
                    )),
                },
            );
        }
        out
    }

    /// Counts open dependencies, fills the ready set, and marks the dependants of
    /// failed steps (a resumed run may find failures that were not propagated yet).
    fn settle_dependencies(&mut self) -> Result<()> {
        let mut failed = Vec::new();
        self.waiting_on.fill(0);
        for j in 0..self.steps.len() {
            if !self.progress[j].satisfies_dependants() {
                for &i in &self.dependants[j] {
                    self.waiting_on[i] += 1;
                }
            }
            if self.progress[j].is_failure() {
                failed.push(j);
            }
        }
        for i in failed {
            self.fail_dependants(i)?;
        }
        for i in 0..self.steps.len() {
            if matches!(self.progress[i], Progress::NotStarted) && self.waiting_on[i] == 0 {
                self.ready.insert(i);
            }
        }
        Ok(())
    }

    fn scheduling(&self) -> bool {
        self.pausing.is_none() && !(self.fail_fast && self.first_failure.is_some())
    }

    /// Opens checkpoints for ready steps, up to the limit; they start after the commit.
    fn start_ready(&mut self) -> Result<Vec<usize>> {
        let mut started = Vec::new();
        // Nothing starts in a workspace that is no longer the directory the
        // task was given: the task pauses, saying what changed. (A person's
        // step and a no-op do nothing there: no look is needed for them.)
        let starts_work = self.ready.iter().any(|&i| {
            !matches!(
                self.steps[i].action,
                StepAction::Approval { .. } | StepAction::Noop
            )
        });
        if self.scheduling()
            && starts_work
            && self.running.len() < self.limit
            && let Err(changed) = self.workspace.verify()
        {
            tracing::warn!(task_id = %self.rec.state.head.id, "{changed}");
            self.pausing = Some(format!(
                "{changed}. Nothing more runs there: put the directory back and resume the task (`rein tasks resume`), or abort it"
            ));
            return Ok(started);
        }
        while self.scheduling() && self.running.len() + started.len() < self.limit {
            let Some(i) = self.ready.pop_first() else {
                break;
            };
            let step = Arc::clone(&self.steps[i]);
            self.attempts[i] += 1;
            if matches!(step.action, StepAction::Approval { .. }) {
                // A person does this step: it waits without taking a running slot.
                self.ask(i)?;
                continue;
            }
            let span = SpanRef::child_of(&self.rec.state.head.span_id);
            let input = match &step.action {
                StepAction::Command { run, .. } => Some(serde_json::json!({
                    "run": run,
                    "timeout_ms": step.timeout_ms,
                    "idempotent": step.idempotent,
                })),
                StepAction::Verify { step } => Some(serde_json::json!({ "verify": step })),
                StepAction::Agent {
                    prompt,
                    provider,
                    model,
                    runtime,
                    tools,
                    session,
                    limits,
                    mcp,
                    network,
                } => Some(serde_json::json!({
                    "prompt": prompt, "provider": provider, "model": model,
                    "runtime": runtime, "tools": tools, "session": session,
                    "limits": limits,
                    // The servers by name: a declaration may hold secrets.
                    "mcp": mcp.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
                    "network": network,
                })),
                StepAction::Noop | StepAction::Approval { .. } => None,
            };
            let checkpoint = Checkpoint {
                input,
                ..Checkpoint::pending(
                    self.rec.state.head.id.clone(),
                    Some(step.id.clone()),
                    step.checkpoint,
                    self.attempts[i],
                )
            };
            let id = self.rec.enter_checkpoint(checkpoint, &span)?;
            self.set(
                i,
                StepEvent::Start,
                Progress::Running {
                    checkpoint: id,
                    span,
                    token: CancellationToken::new(),
                },
            )?;
            started.push(i);
        }
        Ok(started)
    }

    /// Who told step `i` to run again, if this attempt follows a person's answer
    /// to its escalation (its checkpoint before the running one).
    fn approved_rerun(&self, i: usize) -> Option<String> {
        // Every checkpoint of a step counts an attempt: the first has none before it.
        if self.attempts[i] <= 1 {
            return None;
        }
        let id = &self.steps[i].id;
        self.rec
            .state
            .checkpoints
            .iter()
            .rev()
            .filter(|cp| cp.step_id.as_deref() == Some(id.as_str()))
            .nth(1)
            .filter(|cp| {
                cp.kind == CheckpointType::UserApproval && cp.status == CheckpointStatus::Completed
            })
            .map(|cp| {
                cp.approved_by
                    .as_ref()
                    .map_or_else(|| "a person".to_owned(), |a| a.who.clone())
            })
    }

    fn spawn(&mut self, i: usize) {
        let Progress::Running {
            token,
            checkpoint,
            span,
        } = &self.progress[i]
        else {
            return;
        };
        // A child of the task's span (the current one while the runner
        // drives), exported with the span id the step's events carry.
        let span = crate::engine::with_span_id(&span.span_id, || {
            tracing::info_span!(
                "step",
                step_id = %self.steps[i].id,
                checkpoint_id = %checkpoint,
                attempt = self.attempts[i],
                trace_id = %self.rec.state.head.trace_id,
                span_id = %span.span_id,
            )
        });
        let request = StepRequest {
            task_id: self.rec.state.head.id.clone(),
            step: Arc::clone(&self.steps[i]),
            attempt: self.attempts[i],
            workspace: self.workspace.clone(),
            output_tail_bytes: self.engine.config.output_tail_bytes,
            policy: Arc::clone(&self.engine.config.policy),
            journal: matches!(self.steps[i].action, StepAction::Agent { .. }).then(|| {
                crate::journal::Journal::new(
                    Arc::clone(&self.engine.store),
                    &self.rec.state.head.id,
                    &self.steps[i].id,
                )
            }),
            approved_by: self.approved_rerun(i),
            asker: Some(crate::executor::Asker::new(i, self.asks_tx.clone())),
            data_dir: self.engine.config.data_dir.clone(),
            guard: Arc::clone(&self.guard),
            sessions: matches!(self.steps[i].action, StepAction::Agent { .. })
                .then(|| self.engine.sessions()),
            task_budget: self.budget,
        };
        let executor = Arc::clone(&self.engine.executor);
        let token = token.clone();
        // A verify step is the engine's: it checks what its step did.
        let verification = match &self.steps[i].action {
            StepAction::Verify { step } => {
                self.steps
                    .iter()
                    .find(|s| &s.id == step)
                    .map(|target| crate::pev::Verification {
                        records: self.engine.records(),
                        executor: Arc::clone(&executor),
                        step: Arc::clone(target),
                        request: request.clone(),
                        output: self
                            .rec
                            .state
                            .checkpoints
                            .iter()
                            .rev()
                            .find(|cp| {
                                cp.step_id.as_deref() == Some(step.as_str())
                                    && cp.status == CheckpointStatus::Completed
                            })
                            .and_then(|cp| cp.output.clone()),
                        shared_state: self.shared_state.clone(),
                    })
            }
            _ => None,
        };
        // With a shared state named by the plan, the step records itself there: an
        // action as it starts, and how it ended.
        let recording = self
            .shared_state
            .clone()
            .filter(|_| verification.is_none())
            .map(|state| {
                (
                    Arc::clone(&self.engine.store),
                    Arc::clone(&self.engine.config.clock),
                    state,
                    crate::shared_state::step_action(
                        &self.rec.state.head.id,
                        &self.steps[i],
                        rein_protocol::WorkStatus::Active,
                    ),
                )
            });
        // An agent step run by a runtime rein does not run leaves evidence of
        // its side effects.
        let evidence = matches!(self.steps[i].action, StepAction::Agent { .. }).then(|| {
            (
                self.engine.records(),
                self.rec.state.head.id.to_string(),
                self.steps[i].id.clone(),
                self.shared_state.clone(),
            )
        });
        let poll = self.engine.config.control_poll;
        let step = async move {
            if let Some((store, clock, state, action)) = &recording {
                // Under the state's enforcement this waits (serialize) or
                // refuses (reject) while the step collides with a running one.
                let start = crate::shared_state::start_step(
                    store.as_ref(),
                    state,
                    action.clone(),
                    clock.as_ref(),
                    poll,
                    &token,
                )
                .await;
                if let crate::shared_state::Start::Rejected(conflict) = start {
                    let error = format!(
                        "shared state {state} rejects the step: {} ({})",
                        conflict.summary, conflict.id
                    );
                    let outcome = StepOutcome::Failed {
                        error,
                        output: serde_json::to_value(&*conflict).ok(),
                        failure: crate::recovery::Failure::Validation,
                    };
                    return (i, outcome, Duration::ZERO);
                }
            }
            let started = Instant::now();
            let mut outcome = match verification {
                Some(v) => v.run(token).await,
                None => executor.execute(request, token).await,
            };
            let elapsed = started.elapsed();
            if let Some((records, task, step, state)) = evidence
                && let StepOutcome::Passed {
                    output: Some(output),
                }
                | StepOutcome::Failed {
                    output: Some(output),
                    ..
                } = &mut outcome
            {
                records
                    .record_agent_evidence(&task, &step, state, output)
                    .await;
            }
            if let Some((store, clock, state, action)) = recording {
                let status = match &outcome {
                    StepOutcome::Passed { .. } => rein_protocol::WorkStatus::Completed,
                    StepOutcome::Failed { .. } => rein_protocol::WorkStatus::Failed,
                    StepOutcome::Cancelled => rein_protocol::WorkStatus::Cancelled,
                };
                let ended = rein_protocol::Action { status, ..action };
                crate::shared_state::record_step(store.as_ref(), &state, ended, clock.now(), true)
                    .await;
            }
            (i, outcome, elapsed)
        }
        .instrument(span);
        let step = std::panic::AssertUnwindSafe(step)
            .catch_unwind()
            .map(move |ended| {
                ended.unwrap_or_else(|panic| {
                    let error = format!(
                        "the step's executor crashed (panic: {})",
                        panic_message(&*panic)
                    );
                    let failure = crate::recovery::Failure::Internal;
                    let outcome = StepOutcome::Failed {
                        error,
                        output: None,
                        failure,
                    };
                    (i, outcome, Duration::ZERO)
                })
            });
        self.running.push(Box::pin(step));
    }

    fn on_joined(&mut self, (i, outcome, elapsed): Finished) -> Result<()> {
        // A step the run already closed (an abort) has nothing more to record.
        if !matches!(self.progress[i], Progress::Running { .. }) {
            return Ok(());
        }
        let Progress::Running {
            checkpoint, span, ..
        } = self.set(i, StepEvent::End, Progress::Ended)?
        else {
            return Ok(());
        };
        let duration_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        if let Some(question) = self.take_parked(i) {
            // Stopped to wait for a person (--no-wait): it runs again on resume.
            self.rec.record(
                to_run_again(
                    checkpoint,
                    duration_ms,
                    format!(
                        "stopped to wait for a person to answer {question}; it runs again when the task resumes"
                    ),
                ),
                &span,
            )?;
            self.set(i, StepEvent::RunAgain, Progress::NotStarted)?;
            return Ok(());
        }
        // An agent step's output names the runtime selected: an event of its own.
        let selection = match &outcome {
            StepOutcome::Passed { output } | StepOutcome::Failed { output, .. }
                if matches!(self.steps[i].action, StepAction::Agent { .. }) =>
            {
                output
                    .as_ref()
                    .and_then(|o| o.get("selection"))
                    .and_then(|s| {
                        serde_json::from_value::<rein_protocol::SelectionDecision>(s.clone()).ok()
                    })
            }
            _ => None,
        };
        if let Some(decision) = selection {
            self.rec.record(
                TaskChange::RuntimeSelected {
                    checkpoint_id: checkpoint.clone(),
                    decision: Box::new(decision),
                },
                &span,
            )?;
        }
        match outcome {
            StepOutcome::Passed { output } => {
                self.rec.record(
                    TaskChange::CheckpointPassed {
                        checkpoint_id: checkpoint,
                        duration_ms,
                        output,
                        approved_by: None,
                    },
                    &span,
                )?;
                if self.recoveries[i] > 0 {
                    self.rec.record(
                        TaskChange::RecoverySucceeded {
                            step_id: self.steps[i].id.clone(),
                            attempts: self.recoveries[i],
                        },
                        &span,
                    )?;
                }
                self.complete(i, StepEvent::Pass)?;
            }
            StepOutcome::Failed {
                error,
                output,
                failure,
            } => {
                let failed = recovery::FailedAttempt {
                    checkpoint,
                    span,
                    duration_ms,
                    error,
                    output,
                };
                self.recover(i, failed, &failure)?;
            }
            StepOutcome::Cancelled => {
                self.fail_step(
                    i,
                    checkpoint,
                    &span,
                    duration_ms,
                    "cancelled while running".to_owned(),
                )?;
            }
        }
        Ok(())
    }

    /// Records an attempt's failure as the step's outcome: its dependants will not run.
    fn fail_step(
        &mut self,
        i: usize,
        checkpoint: CheckpointId,
        span: &SpanRef,
        duration_ms: u64,
        error: String,
    ) -> Result<()> {
        self.rec.record(
            TaskChange::CheckpointFailed {
                checkpoint_id: checkpoint,
                duration_ms,
                error,
                output: None,
                will_retry: false,
                error_type: None,
                retry_at: None,
            },
            span,
        )?;
        self.mark_failed(i)
    }

    /// Marks a step failed for good and records its dependants as not run.
    fn mark_failed(&mut self, i: usize) -> Result<()> {
        self.set(i, StepEvent::Fail, Progress::Failed)?;
        self.first_failure.get_or_insert(i);
        self.fail_dependants(i)
    }

    /// Lets a step run again: ready now if nothing it depends on is outstanding.
    fn run_again(&mut self, i: usize) -> Result<()> {
        self.set(i, StepEvent::RunAgain, Progress::NotStarted)?;
        if self.waiting_on[i] == 0 {
            self.ready.insert(i);
        }
        Ok(())
    }

    /// Moves step `i` by `event` to `new` (see [`Progresses::set`]), naming the
    /// step if its lifecycle does not allow it.
    fn set(&mut self, i: usize, event: StepEvent, new: Progress) -> Result<Progress> {
        self.progress.set(i, event, new).map_err(|e| {
            e.of(format!(
                "`{}` of task {}",
                self.steps[i].id, self.rec.state.head.id
            ))
            .into()
        })
    }

    /// Marks a step done (`Pass`: completed, `Skip`: skipped) and readies what
    /// waited only on it.
    fn complete(&mut self, i: usize, event: StepEvent) -> Result<()> {
        let done = match event {
            StepEvent::Pass => Progress::Completed,
            _ => Progress::Skipped,
        };
        self.set(i, event, done)?;
        for d in self.dependants[i].clone() {
            self.waiting_on[d] -= 1;
            if self.waiting_on[d] == 0 && matches!(self.progress[d], Progress::NotStarted) {
                self.ready.insert(d);
            }
        }
        Ok(())
    }

    /// Records every step that (transitively) depends on `failed` as not run.
    fn fail_dependants(&mut self, failed: usize) -> Result<()> {
        let mut stack = vec![failed];
        while let Some(f) = stack.pop() {
            for d in self.dependants[f].clone() {
                if !matches!(self.progress[d], Progress::NotStarted) {
                    continue;
                }
                let reason = format!("not run: dependency `{}` failed", self.steps[f].id);
                self.skip_unstarted(d, reason, DEPENDENCY_FAILED)?;
                self.set(d, StepEvent::Block, Progress::DependencyFailed)?;
                stack.push(d);
            }
        }
        Ok(())
    }

    fn skip_unstarted(&mut self, i: usize, reason: String, kind: &str) -> Result<()> {
        self.ready.remove(&i);
        self.attempts[i] += 1;
        let span = SpanRef::child_of(&self.rec.state.head.span_id);
        let mut metadata = std::collections::BTreeMap::new();
        metadata.insert("skipped_kind".to_owned(), serde_json::Value::from(kind));
        let checkpoint = Checkpoint {
            metadata,
            ..Checkpoint::pending(
                self.rec.state.head.id.clone(),
                Some(self.steps[i].id.clone()),
                self.steps[i].checkpoint,
                self.attempts[i],
            )
        };
        let id = self.rec.create_checkpoint(checkpoint, &span)?;
        self.rec.record(
            TaskChange::CheckpointSkipped {
                checkpoint_id: id,
                reason,
                duration_ms: None,
            },
            &span,
        )
    }

    async fn flush(&mut self) -> Result<()> {
        self.rec
            .flush(&self.engine.store, &self.engine.events)
            .await
    }

    /// Nothing runs and nothing more will start: the task pauses, fails or completes.
    async fn finish(mut self) -> Result<TaskState> {
        let unstarted: Vec<usize> = (0..self.steps.len())
            .filter(|&i| {
                matches!(
                    self.progress[i],
                    Progress::NotStarted | Progress::Delayed { .. }
                )
            })
            .collect();
        if let Some(reason) = self.pausing.clone()
            && (!unstarted.is_empty() || self.awaiting_any())
        {
            self.rec.task_event(TaskChange::TaskPaused { reason })?;
        } else if let Some(first) = self.first_failure.or_else(|| {
            (0..self.steps.len()).find(|&i| matches!(self.progress[i], Progress::Failed))
        }) {
            let name = self.steps[first].id.clone();
            for request in self.awaited() {
                let why = format!("the plan stopped after `{name}` failed (fail_fast)");
                self.withdraw(request, &why).await?;
            }
            for i in unstarted {
                self.skip_unstarted(
                    i,
                    format!("not run: fail_fast stopped the plan after `{name}` failed"),
                    "fail_fast",
                )?;
            }
            let failed: Vec<&str> = (0..self.steps.len())
                .filter(|&i| matches!(self.progress[i], Progress::Failed))
                .map(|i| self.steps[i].id.as_str())
                .collect();
            let error = match self
                .rec
                .state
                .latest_for_step(&name)
                .and_then(|c| c.error.clone())
            {
                Some(e) => format!("step `{name}` failed: {e}"),
                None => format!("step `{name}` failed"),
            };
            let error = if failed.len() > 1 {
                format!(
                    "{error} ({} steps failed: {})",
                    failed.len(),
                    failed.join(", ")
                )
            } else {
                error
            };
            self.rec.task_event(TaskChange::TaskFailed { error })?;
        } else {
            let summary = self.summarize().await;
            self.review_and_complete(summary)?;
        }
        self.flush().await?;
        self.sync_contracts(false).await;
        if self.rec.state.status().is_terminal() {
            crate::engine::export_root_span(&self.rec.state);
        }
        Ok(self.rec.state)
    }

    /// Brings the contracts of plan–execute–verify steps up to date with their
    /// steps (see [`crate::pev`]): after a commit, so a contract never runs ahead
    /// of the log, and on every resume. Contracts are records beside the task;
    /// one that cannot be updated now is logged and tried again next time.
    async fn sync_contracts(&mut self, aborted: bool) {
        if self.contracts.is_empty() {
            return;
        }
        let records = self.engine.records();
        for w in 0..self.contracts.len() {
            let ContractWatch {
                step: i, approve, ..
            } = self.contracts[w];
            let step_id = self.steps[i].id.clone();
            let denied = approve.is_some_and(|j| matches!(self.progress[j], Progress::Failed));
            use rein_protocol::ContractStatus as C;
            let target = match &self.progress[i] {
                _ if aborted => Some((C::Cancelled, "the task was aborted".to_owned())),
                Progress::Running { .. } | Progress::Completed => {
                    Some((C::Executing, format!("step `{step_id}` started")))
                }
                Progress::Failed => Some((C::Failed, format!("step `{step_id}` failed"))),
                Progress::Skipped => Some((C::Cancelled, format!("step `{step_id}` was skipped"))),
                Progress::DependencyFailed if denied => Some((
                    C::Rejected,
                    format!(
                        "the approval `{}` was denied or expired",
                        crate::pev::approve_id(&step_id)
                    ),
                )),
                Progress::DependencyFailed => Some((
                    C::Cancelled,
                    format!("a step that `{step_id}` depends on failed"),
                )),
                _ => None,
            };
            let Some((target, reason)) = target else {
                continue;
            };
            let watch = &mut self.contracts[w];
            if watch.seen == Some(target) {
                continue;
            }
            match crate::pev::advance(&records, &watch.contract, target, "rein", &reason).await {
                Ok(()) => watch.seen = Some(target),
                Err(e) => {
                    tracing::warn!(contract = %watch.contract, error = %e, "cannot bring the contract up to date")
                }
            }
        }
    }

    /// CP5: a system review unless the plan has review steps, then completion.
    /// A goal task's one-line account of what it did, from an isolated
    /// completion on the goal's route; `None` for a plan task, or when the model
    /// does not answer (the task completes all the same).
    async fn summarize(&self) -> Option<String> {
        let (goal_text, goal) = self.goal.as_ref()?;
        let completer = self.engine.completer.as_ref()?;
        let mut prompt = format!(
            "Say in one line, at most 25 words, what this finished task did.\nThe goal was: {goal_text}\nIts steps:\n"
        );
        for step in &self.steps {
            let said = self
                .rec
                .state
                .latest_for_step(&step.id)
                .and_then(|c| c.output.as_ref()?.get("text")?.as_str().map(str::to_owned))
                .unwrap_or_default();
            let said: String = said.chars().take(300).collect();
            prompt.push_str(&format!("- {}: {} {}\n", step.id, step.description, said));
        }
        let request = crate::harness::completion::CompletionRequest {
            prompt,
            system: None,
            route: crate::goal::route(goal),
            timeout: SUMMARY_TIMEOUT,
            // One line is asked for.
            shape: crate::harness::isolated::AnswerShape {
                max_tokens: Some(200),
                json_schema: None,
            },
        };
        match completer.complete(&request).await {
            Ok(done) => {
                crate::harness::completion::meter(
                    &self.engine.store,
                    &self.rec.state.head.id,
                    "summary",
                    &done,
                )
                .await;
                let line: String = done.text.trim().lines().next()?.chars().take(300).collect();
                (!line.is_empty()).then_some(line)
            }
            Err(e) => {
                tracing::warn!(error = %e, "no summary for the finished task");
                None
            }
        }
    }

    fn review_and_complete(&mut self, line: Option<String>) -> Result<()> {
        let skipped = self
            .progress
            .iter()
            .filter(|p| matches!(p, Progress::Skipped))
            .count();
        let mut summary = serde_json::json!({
            "steps": self.steps.len(),
            "completed": self.steps.len() - skipped,
            "skipped": skipped,
        });
        if let Some(line) = line {
            summary["summary"] = line.into();
        }
        if !self
            .steps
            .iter()
            .any(|s| s.checkpoint == CheckpointType::TaskReview)
        {
            system_checkpoint(
                &mut self.rec,
                CheckpointType::TaskReview,
                None,
                Some(summary.clone()),
                ApprovedBy {
                    kind: Approver::System,
                    who: "policy:all_steps_passed".into(),
                },
            )?;
        }
        system_checkpoint(
            &mut self.rec,
            CheckpointType::TaskComplete,
            None,
            Some(summary),
            ApprovedBy {
                kind: Approver::System,
                who: "policy:all_steps_passed".into(),
            },
        )?;
        self.rec.task_event(TaskChange::TaskCompleted {})
    }

    /// Stops running steps, records them as cancelled, and cancels the task.
    async fn abort(mut self) -> Result<TaskState> {
        self.cancel_running().await;
        let (by, reason) = self
            .abort_by
            .clone()
            .unwrap_or_else(|| ("operator".into(), "aborted".into()));
        self.withdraw_questions(&format!("the task was aborted by {by}"), true)
            .await?;
        for i in 0..self.steps.len() {
            let (checkpoint, span, request) = match &self.progress[i] {
                Progress::Running {
                    checkpoint, span, ..
                } => (checkpoint.clone(), span.clone(), None),
                Progress::Awaiting {
                    checkpoint,
                    span,
                    request,
                } => (checkpoint.clone(), span.clone(), Some((**request).clone())),
                _ => continue,
            };
            if let Some(request) = request {
                self.engine
                    .revoke(request, &format!("the task was aborted by {by}"))
                    .await?;
            }
            let duration_ms = self
                .rec
                .state
                .checkpoint(&checkpoint)
                .map_or(0, |c| elapsed_ms(c.started_at));
            self.rec
                .record(aborted_checkpoint(checkpoint, duration_ms, &by), &span)?;
            self.set(i, StepEvent::Fail, Progress::Failed)?;
        }
        self.rec
            .task_event(TaskChange::TaskCancelled { reason, by })?;
        self.flush().await?;
        self.sync_contracts(true).await;
        crate::engine::export_root_span(&self.rec.state);
        Ok(self.rec.state)
    }

    /// Stops running steps without recording them: the task stays in progress and
    /// its interrupted steps are settled on resume, exactly as after a crash.
    async fn stop(mut self) -> Result<TaskState> {
        self.cancel_running().await;
        self.flush().await?;
        Ok(self.rec.state)
    }

    async fn cancel_running(&mut self) {
        for p in self.progress.iter() {
            if let Progress::Running { token, .. } = p {
                token.cancel();
            }
        }
        while self.running.next().await.is_some() {}
    }
}

/// The running steps' futures. The runner is shared with the threads that may
/// poll its task, so it must be `Sync`; the futures are only ever touched through
/// `&mut`, which `SyncWrapper` makes a guarantee.
#[derive(Default)]
struct Running(sync_wrapper::SyncWrapper<FuturesUnordered<BoxFuture<'static, Finished>>>);

impl Running {
    fn push(&mut self, step: BoxFuture<'static, Finished>) {
        self.0.get_mut().push(step);
    }

    fn len(&mut self) -> usize {
        self.0.get_mut().len()
    }

    fn is_empty(&mut self) -> bool {
        self.0.get_mut().is_empty()
    }

    /// The next step to end.
    async fn next(&mut self) -> Option<Finished> {
        self.0.get_mut().next().await
    }

    /// A step that has ended already, if any.
    fn next_ended(&mut self) -> Option<Finished> {
        self.0.get_mut().next().now_or_never().flatten()
    }
}

/// What a panic said, for the step's error.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panicked".to_owned())
}

#[cfg(test)]
mod tests {
    use super::{Progress, Progresses, StepEvent};

    #[test]
    fn progresses_count_the_steps_on_a_retry_timer_as_they_change() {
        let at = chrono::Utc::now();
        let mut p = Progresses::new(vec![
            Progress::Delayed { until: at },
            Progress::NotStarted,
            Progress::Completed,
        ]);
        assert_eq!((p.awaiting, p.delayed), (0, 1));
        let cp = rein_protocol::CheckpointId::new();
        let running = || Progress::Running {
            checkpoint: cp.clone(),
            span: crate::recorder::SpanRef::child_of("0000000000000001"),
            token: tokio_util::sync::CancellationToken::new(),
        };
        p.set(1, StepEvent::Start, running()).unwrap();
        p.set(1, StepEvent::End, Progress::Ended).unwrap();
        assert!(matches!(
            p.set(1, StepEvent::Delay, Progress::Delayed { until: at }),
            Ok(Progress::Ended)
        ));
        assert_eq!(p.delayed, 2);
        // Delayed to delayed is no transition: refused, and still counted once.
        let err = p
            .set(1, StepEvent::Delay, Progress::Delayed { until: at })
            .unwrap_err();
        assert_eq!(
            (err.from.as_str(), err.event.as_str()),
            ("delayed", "delay")
        );
        assert_eq!(p.delayed, 2);
        // An event that leads elsewhere than the progress given is refused too.
        assert!(p.set(0, StepEvent::RunAgain, Progress::Failed).is_err());
        assert!(matches!(
            p.set(0, StepEvent::RunAgain, Progress::NotStarted),
            Ok(Progress::Delayed { .. })
        ));
        p.set(1, StepEvent::RunAgain, Progress::NotStarted).unwrap();
        assert_eq!((p.awaiting, p.delayed), (0, 0));
        assert!(matches!(p[2], Progress::Completed));
    }
}
