//! The engine: the one way into tasks. Creates them from plans, runs and resumes
//! them, snapshots, restores and deletes them; pausing and aborting them are
//! in `interrupt`.

use std::path::PathBuf;
use std::sync::Arc;

use rein_protocol::ids::{new_span_id, new_trace_id};
use rein_protocol::{
    ApprovedBy, Approver, CheckpointId, CheckpointType, EventId, HarnessEvent, RunnerInfo,
    Snapshot, SnapshotId, TaskChange, TaskDecomposition, TaskId, TaskState, TaskStatus,
    TaskSummary,
};
use tokio::sync::broadcast;
use tracing::Instrument;

use crate::controls::ControlHub;
use crate::error::{EngineError, Result};
use crate::executor::StepExecutor;
use crate::process::{current_runner, is_current, runner_alive};
use crate::recorder::Recorder;
use crate::runner::TaskRun;
use crate::store::{Store, TaskFilter, TaskPage};
use crate::{fold, plan};

pub use crate::context::{DEFAULT_MAX_TASKS, EngineConfig, RunContext, RunOptions};
use crate::recorder::system_checkpoint;
use crate::spans::{caller_span, link_to_task_trace};
pub use crate::spans::{follow_traceparent, parse_traceparent, take_next_span_id};

/// What to create a task from.
#[derive(Debug, Clone)]
pub struct CreateTask {
    pub plan: TaskDecomposition,
    pub session_id: Option<String>,
    /// The task's workspace; a fresh directory under the workspace root if `None`.
    pub workspace: Option<PathBuf>,
    /// Where the submitter may point the task (its workspace, the directories
    /// its steps read): `None` for a local user, under the rules of
    /// [`rein_sandbox::guard`]; `Some(roots)` for a server's caller, who may
    /// name only directories inside `roots` (none if it is empty).
    pub confined_to: Option<Vec<PathBuf>>,
}

impl CreateTask {
    /// A task of `plan` in no session, in a fresh workspace, for a local
    /// user.
    pub fn of(plan: TaskDecomposition) -> CreateTask {
        CreateTask {
            plan,
            session_id: None,
            workspace: None,
            confined_to: None,
        }
    }
}

/// What a pause or abort did.
#[derive(Debug, Clone, PartialEq)]
pub enum ControlOutcome {
    /// Done: the task is in its new state.
    Applied(Box<TaskState>),
    /// The task's live runner was asked and will act shortly.
    Requested { runner: RunnerInfo },
    /// Nothing to do: the task already is where it was asked to go.
    AlreadyThere(TaskStatus),
}

/// A task claimed by this engine for a run ([`Engine::claim`]); dropping it
/// releases the claim.
#[derive(Debug)]
pub struct RunClaim {
    id: TaskId,
    claimed_at: rein_protocol::Timestamp,
    guard: crate::controls::RunGuard,
    controls: tokio::sync::mpsc::UnboundedReceiver<crate::controls::RunnerMessage>,
}

/// The one way into tasks. What runs need of it is its [`RunContext`],
/// which it derefs to: `engine.store()`, `engine.decide(..)` and the rest of
/// the context's methods are the engine's.
#[derive(Debug)]
pub struct Engine {
    ctx: RunContext,
    /// Folded states of recently read tasks.
    states: std::sync::Mutex<std::collections::HashMap<TaskId, TaskState>>,
}

impl std::ops::Deref for Engine {
    type Target = RunContext;
    fn deref(&self) -> &RunContext {
        &self.ctx
    }
}

/// How many folded task states the engine keeps for reads.
const STATE_CACHE: usize = 1024;

/// How many runs may be starting at once ([`Engine::starting`]): enough that
/// their first commits still share transactions.
const STARTING: usize = 32;

impl Engine {
    pub fn new(
        store: Arc<dyn Store>,
        executor: Arc<dyn StepExecutor>,
        config: EngineConfig,
    ) -> Engine {
        let (events, _) = broadcast::channel(4096);
        let controls = ControlHub::new(Arc::clone(&store), config.control_poll);
        Engine {
            ctx: RunContext {
                store,
                executor,
                config,
                events,
                runner: current_runner(),
                controls,
                audited: Arc::new(tokio::sync::Notify::new()),
                completer: None,
                starting: Arc::new(tokio::sync::Semaphore::new(STARTING)),
            },
            states: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// This engine with `completer` serving its isolated completions (a
    /// goal's decomposition among them).
    pub fn with_completer(
        mut self,
        completer: Arc<dyn crate::harness::completion::Completer>,
    ) -> Engine {
        self.ctx.completer = Some(completer);
        self
    }

    /// One isolated completion (spec harness-sdk §4), its answer checked
    /// against `schema` when one is given.
    pub async fn complete(
        &self,
        request: &crate::harness::completion::CompletionRequest,
        schema: Option<&serde_json::Value>,
    ) -> std::result::Result<
        crate::harness::completion::Completion,
        crate::harness::completion::CompletionFailure,
    > {
        use crate::harness::completion::{AnswerSchema, CompletionFailure};
        let schema = schema.map(AnswerSchema::new).transpose()?;
        let completer = self.completer.as_ref().ok_or_else(|| {
            CompletionFailure::NotConfigured(
                "this rein has no model runtime for completions".into(),
            )
        })?;
        let mut completion = completer.complete(request).await?;
        if let Some(schema) = schema {
            completion.json = Some(
                schema
                    .check(&completion.text)
                    .map_err(CompletionFailure::Invalid)?,
            );
        }
        Ok(completion)
    }

    /// Decomposes a goal into a plan without making a task (`rein plan
    /// draft`): the same request, checks and retries as a goal task's CP2,
    /// over the workspace `workspace` lists; `refused` hears of each refusal.
    pub async fn draft(
        &self,
        goal_text: &str,
        goal: &rein_protocol::Goal,
        workspace: Option<&std::path::Path>,
        refused: impl FnMut(&crate::goal::Refused),
    ) -> std::result::Result<crate::goal::Decomposed, crate::goal::DecomposeError> {
        use crate::harness::completion::CompletionFailure;
        let completer = self.completer.as_ref().ok_or_else(|| {
            crate::goal::DecomposeError::Completion(CompletionFailure::NotConfigured(
                "this rein has no model runtime to decompose a goal with".into(),
            ))
        })?;
        let listing = workspace
            .map(crate::goal::list_workspace)
            .unwrap_or_default();
        let check = crate::goal_run::plan_check(&self.config.policy);
        crate::goal::decompose(&**completer, goal_text, goal, &listing, &check, refused).await
    }

    /// Resolves when this engine has written an audit record since the call
    /// (the wait starts when this is called, not when it is first polled).
    pub fn audited(&self) -> tokio::sync::futures::Notified<'_> {
        self.audited.notified()
    }

    /// Events of every task this engine records, once they are durable.
    pub fn subscribe(&self) -> broadcast::Receiver<HarnessEvent> {
        self.events.subscribe()
    }

    /// A task's state: the fold of its log. Folded states are kept, bounded; a read
    /// checks the task's state row and folds only the events it has not seen.
    pub async fn get(&self, id: &TaskId) -> Result<TaskState> {
        let Some(summary) = self.store.load_summary(id).await? else {
            self.forget(id);
            return Err(EngineError::TaskNotFound(id.clone()));
        };
        let cached = self.states.lock().ok().and_then(|c| c.get(id).cloned());
        let corrupt = |error| EngineError::Corrupt {
            task_id: id.clone(),
            error,
        };
        let state = match cached {
            Some(state) if state.head.last_seq == summary.last_seq => return Ok(state),
            Some(mut state) if state.head.last_seq < summary.last_seq => {
                for event in self
                    .store
                    .events(id, state.head.last_seq, usize::MAX)
                    .await?
                {
                    fold::apply(&mut state, &event).map_err(corrupt)?;
                }
                state
            }
            _ => {
                let events = self.store.events(id, 0, usize::MAX).await?;
                if events.is_empty() {
                    return Err(EngineError::TaskNotFound(id.clone()));
                }
                fold::fold(&events).map_err(corrupt)?
            }
        };
        if let Ok(mut cache) = self.states.lock() {
            if cache.len() >= STATE_CACHE && !cache.contains_key(id) {
                cache.clear();
            }
            cache.insert(id.clone(), state.clone());
        }
        Ok(state)
    }

    /// Keeps `state`, just recorded, for the next read (a fork's, whose
    /// first event holds its whole state, is not read back and folded).
    pub(crate) fn remember(&self, state: &TaskState) {
        if let Ok(mut cache) = self.states.lock() {
            if cache.len() >= STATE_CACHE && !cache.contains_key(state.id()) {
                cache.clear();
            }
            cache.insert(state.id().clone(), state.clone());
        }
    }

    /// Resolves when another node may have written `what` (a store several
    /// nodes share notifies); never, for a store only this machine writes.
    fn forget(&self, id: &TaskId) {
        if let Ok(mut cache) = self.states.lock() {
            cache.remove(id);
        }
    }

    /// A task's state row.
    pub async fn summary(&self, id: &TaskId) -> Result<TaskSummary> {
        self.store
            .load_summary(id)
            .await?
            .ok_or_else(|| EngineError::TaskNotFound(id.clone()))
    }

    pub async fn plan(&self, id: &TaskId) -> Result<TaskDecomposition> {
        self.store
            .load_plan(id)
            .await?
            .ok_or_else(|| EngineError::TaskNotFound(id.clone()))
    }

    pub async fn list(&self, filter: &TaskFilter) -> Result<TaskPage> {
        Ok(self.store.list(filter).await?)
    }

    pub async fn events(
        &self,
        id: &TaskId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<HarnessEvent>> {
        Ok(self.store.events(id, after_seq, limit).await?)
    }

    /// Validates a plan and records a new task for it, through CP1 (confirmed by
    /// policy) and CP2 (the plan). The task is `pending` until it is run.
    pub async fn create(&self, request: CreateTask) -> Result<TaskState> {
        self.create_as(TaskId::new(), request).await
    }

    /// [`Engine::create`], for a task this engine runs next. Where nodes
    /// share the store, the new task's lease is taken before the task exists,
    /// so no other node takes it up first.
    pub async fn create_here(&self, request: CreateTask) -> Result<TaskState> {
        let task_id = TaskId::new();
        let Some(leases) = self.store.leases() else {
            return self.create_as(task_id, request).await;
        };
        if let Err(holder) = leases.claim(&task_id).await? {
            return Err(EngineError::Busy {
                task_id,
                pid: holder.runner.pid,
                host: holder.runner.host,
            });
        }
        let created = self.create_as(task_id.clone(), request).await;
        if created.is_err() {
            leases.release(&task_id).await?;
        }
        created
    }

    async fn create_as(&self, task_id: TaskId, request: CreateTask) -> Result<TaskState> {
        let goal = request.plan.goal.is_some();
        let mut plan = if goal {
            // A goal: its steps come at CP2, when it runs.
            if !request.plan.steps.is_empty() {
                return Err(EngineError::BadRequest(
                    "a goal task starts without steps: give a goal or a plan, not both".into(),
                ));
            }
            if request.plan.original_task.trim().is_empty() {
                return Err(EngineError::BadRequest(
                    "the goal is empty: say what the task is to achieve".into(),
                ));
            }
            request.plan
        } else {
            let plan = plan::validate_given(request.plan)?;
            let plan = plan::validate(crate::permissions::apply(plan, &self.config.policy)?)?;
            plan::validate(crate::pev::expand(plan)?)?
        };
        let guard = self.config.protected(request.confined_to);
        let asked = crate::paths::check(&mut plan, request.workspace.as_deref(), &guard)?;
        // A fresh workspace is rein's own: the submitter's roots do not bind it.
        let (workspace, guard) = match asked {
            Some(dir) => (dir, guard),
            None => (
                self.config.workspace_root.join(task_id.as_str()),
                self.config.protected(None),
            ),
        };
        crate::paths::make_workspace(&workspace).map_err(|error| EngineError::Workspace {
            path: workspace.display().to_string(),
            error,
        })?;
        // Made now, it is resolved and checked again as it is (a symlink put
        // in its place meanwhile is followed), and pinned: every step gets
        // this directory, run as its owner, whatever the path names later.
        let workspace = guard
            .check_workspace(&workspace)
            .map_err(|why| crate::paths::PathsRefused(vec![why]))?;
        let pinned = crate::paths::pin(&workspace)?;
        let requested_session = request.session_id.clone();
        let session_id = request
            .session_id
            .unwrap_or_else(|| self.config.default_session.clone());
        // Made under a traced caller (an API request with a `traceparent`,
        // `rein run` under TRACEPARENT), the task is in the caller's trace,
        // a child of the caller's span.
        let (trace_id, parent_span_id) = match caller_span() {
            Some((trace, parent)) => (trace, Some(parent)),
            None => (new_trace_id(), None),
        };
        let span_id = new_span_id();
        // Plan–execute–verify steps propose their contracts before the task is
        // stored, so the plan stored names them; withdrawn if it is not stored.
        let records = self.records();
        let proposed =
            crate::pev::propose(&records, &mut plan, task_id.as_str(), &session_id).await?;
        let first = HarnessEvent {
            id: EventId::new(),
            seq: 1,
            timestamp: chrono::Utc::now(),
            change: TaskChange::TaskCreated {
                description: plan.original_task.clone(),
                session_id: session_id.clone(),
                workspace_path: Some(workspace.display().to_string()),
                workspace_pin: Some(pinned.pin),
                pending_steps: plan.steps.iter().map(|s| s.id.clone()).collect(),
                trace_id: trace_id.clone(),
                span_id: span_id.clone(),
            },
            task_id: Some(task_id.clone()),
            checkpoint_id: None,
            session_id,
            trace_id,
            span_id,
            parent_span_id,
        };
        let mut rec = Recorder::genesis(first)?;
        let policy = ApprovedBy {
            kind: Approver::System,
            who: "policy:auto_confirm".into(),
        };
        system_checkpoint(
            &mut rec,
            CheckpointType::TaskStart,
            Some(serde_json::json!({ "description": plan.original_task })),
            None,
            policy.clone(),
        )?;
        let edges: usize = plan.steps.iter().map(|s| s.depends_on.len()).sum();
        if !goal {
            system_checkpoint(
                &mut rec,
                CheckpointType::TaskPlan,
                None,
                Some(serde_json::json!({
                    "steps": plan.steps.len(),
                    "dependencies": edges,
                    "max_parallel": plan.max_parallel.map_or(self.config.max_parallel, |p| p as usize),
                    "fail_fast": plan.fail_fast,
                })),
                ApprovedBy {
                    kind: Approver::System,
                    who: "plan_validator".into(),
                },
            )?;
        }
        // The task joins the state it records into just before it is stored, so
        // a task that fails to be made leaves no participant.
        let stored = async {
            if let Some(state) = &plan.shared_state {
                self.join_shared_state(state, &task_id, requested_session, &plan.original_task)
                    .await?;
            }
            rec.flush_new(plan, &self.store, &self.events).await
        };
        if let Err(e) = stored.await {
            crate::pev::withdraw(&records, &proposed, "the task could not be created").await;
            return Err(e);
        }
        Ok(rec.state)
    }

    /// Adds a new task as a participant of the shared state its plan records into
    /// (which must exist).
    async fn join_shared_state(
        &self,
        state: &str,
        task_id: &TaskId,
        session_id: Option<String>,
        description: &str,
    ) -> Result<()> {
        let participant = rein_protocol::Participant {
            id: task_id.to_string(),
            role: rein_protocol::ParticipantRole::Custom,
            session_id,
            agent_id: None,
            display_name: Some(description.to_owned()),
            model_profile_id: None,
            tool_preset: None,
            status: rein_protocol::WorkStatus::Active,
            parent_participant_id: None,
            notes: Some("a rein task".into()),
            started_at: None,
            completed_at: None,
        };
        self.add_participant(state, participant, task_id.as_str())
            .await
            .map_err(|e| match e.kind() {
                crate::ErrorKind::NotFound => EngineError::BadRequest(format!(
                    "the plan records into shared state `{state}`, which does not exist: create it first (rein state create FILE.json)"
                )),
                _ => e,
            })?;
        Ok(())
    }

    /// Runs a task until it completes, fails, pauses or is cancelled; resumes it
    /// from its last completed checkpoint if it ran before.
    pub async fn run(&self, id: &TaskId, options: RunOptions) -> Result<TaskState> {
        let claim = self.claim(id)?;
        self.run_claimed(claim, options).await
    }

    /// Marks a task as run by this engine from now on, before its run starts: a
    /// pause or abort that arrives in between reaches the run. `Busy` if this
    /// engine already runs it. Must be called on a tokio runtime.
    pub fn claim(&self, id: &TaskId) -> Result<RunClaim> {
        match self.controls.register(id) {
            Some((guard, controls)) => Ok(RunClaim {
                id: id.clone(),
                claimed_at: chrono::Utc::now(),
                guard,
                controls,
            }),
            None => Err(EngineError::Busy {
                task_id: id.clone(),
                pid: self.runner.pid,
                host: self.runner.host.clone(),
            }),
        }
    }

    /// Runs something trivial the way this engine runs steps (health checks).
    pub async fn probe_executor(&self) -> crate::ExecutorHealth {
        self.executor.probe().await
    }

    /// How many tasks this engine runs (or has claimed) right now.
    pub fn running(&self) -> usize {
        self.controls.running()
    }

    /// Whether this engine runs (or has claimed) the task right now.
    pub fn runs_here(&self, id: &TaskId) -> bool {
        self.controls.is_running(id)
    }

    /// Runs a task claimed with [`Engine::claim`]; see [`Engine::run`].
    /// Where nodes share the store, the run holds the task's lease (taking
    /// it over if its holder stopped renewing it) and gives it up when it
    /// ends.
    pub async fn run_claimed(&self, claim: RunClaim, options: RunOptions) -> Result<TaskState> {
        let id = claim.id.clone();
        let ran = self.run_leased(claim, options).await;
        if let Some(leases) = self.store.leases()
            && let Err(e) = leases.release(&id).await
        {
            // It runs out by itself.
            tracing::warn!(task = %id, error = %e, "cannot give the task's lease up");
        }
        ran
    }

    async fn run_leased(&self, claim: RunClaim, options: RunOptions) -> Result<TaskState> {
        let RunClaim {
            id,
            claimed_at,
            guard: _guard,
            controls,
        } = claim;
        let id = &id;
        // From its first read until its first steps have started.
        let mut starting = Arc::clone(&self.starting).acquire_owned().await.ok();
        if let Some(leases) = self.store.leases() {
            // The lease decides, whatever the runner's process looks like
            // from here (a node on another host, one paused past its lease),
            // and it is taken before the task is read: from then on the node
            // that held it can no longer write.
            if let Err(holder) = leases.claim(id).await? {
                return Err(EngineError::Busy {
                    task_id: id.clone(),
                    pid: holder.runner.pid,
                    host: holder.runner.host,
                });
            }
        }
        let state = self.get(id).await?;
        let status = state.status();
        if status.is_terminal() {
            return Err(EngineError::WrongStatus {
                task_id: id.clone(),
                status,
                what: "there is nothing left to run".into(),
            });
        }
        if self.store.leases().is_none()
            && status == TaskStatus::InProgress
            && let Some(runner) = &state.head.runner
            && !is_current(runner)
            && runner_alive(runner)
        {
            return Err(EngineError::Busy {
                task_id: id.clone(),
                pid: runner.pid,
                host: runner.host.clone(),
            });
        }
        let plan = self.plan(id).await?;
        // Requests from before the claim were addressed to a runner that is gone;
        // those since are this run's (sent while it was starting). Where nodes
        // share the store, a request is for whichever node holds the task, and
        // the lease was taken before this claim: one sent in between, or left
        // by a holder that died before it took it, is this run's too.
        let shared = self.store.leases().is_some();
        let fresh = self
            .store
            .take_controls(id)
            .await?
            .into_iter()
            .filter(|r| shared || r.requested_at >= claimed_at)
            .collect();
        self.controls.send_controls(id, fresh);
        // One span per task run, carrying the ids its events carry, so logs and
        // exported traces line up with the event log.
        let span = tracing::info_span!(
            "task",
            task_id = %id,
            trace_id = %state.head.trace_id,
            span_id = %state.head.span_id,
        );
        link_to_task_trace(&span, &state.head.trace_id, &state.head.span_id);
        let cleanup = plan.cleanup;
        let mut controls = controls;
        let run = if crate::goal_run::undecomposed(&plan) {
            // A model may take its time to plan: others start meanwhile.
            drop(starting.take());
            let planned = self
                .decompose_task(state, &plan, &options, &mut controls)
                .instrument(span.clone())
                .await?;
            match planned {
                crate::goal_run::Planned::Plan(rec, plan) => {
                    TaskRun::new(self, rec, plan)?.taken_up()
                }
                crate::goal_run::Planned::Ended(state) => return Ok(*state),
            }
        } else {
            TaskRun::new(self, Recorder::resume(state), plan)?
        };
        // A node cut off from a shared store stops the run, and with it the
        // steps' processes, before its lease can run out and another node
        // take the task over; it writes nothing (it could not), and the task
        // is taken up again as after a crash.
        let lost = async {
            match self.store.leases() {
                Some(leases) => leases.lost(id).await,
                None => std::future::pending().await,
            }
        };
        let state = tokio::select! {
            state = run.drive(options, controls, starting).instrument(span) => state?,
            () = lost => {
                tracing::warn!(task = %id, "cannot renew the task's lease; stopping its run before another node takes it over");
                return Err(EngineError::CutOff { task_id: id.clone() });
            }
        };
        if state.status().is_terminal() {
            self.executor.task_ended(id, &self.sessions()).await;
        }
        self.clean_workspace(&state, cleanup);
        Ok(state)
    }

    /// Removes a finished task's fresh workspace if its plan says so. Workspaces a
    /// task was given (not under the workspace root, named after the task) stay.
    fn clean_workspace(&self, state: &TaskState, cleanup: rein_protocol::WorkspaceCleanup) {
        use rein_protocol::WorkspaceCleanup;
        let remove = match (cleanup, state.status()) {
            (_, s) if !s.is_terminal() => false,
            (WorkspaceCleanup::Keep, _) => false,
            (WorkspaceCleanup::OnSuccess, s) => s == TaskStatus::Completed,
            (WorkspaceCleanup::Always, _) => true,
        };
        let Some(path) = state.head.resources.workspace_path.as_deref() else {
            return;
        };
        let fresh = self.config.workspace_root.join(state.id().as_str());
        let fresh = std::fs::canonicalize(&fresh).unwrap_or(fresh);
        if remove && std::path::Path::new(path) == fresh {
            if let Err(e) = std::fs::remove_dir_all(&fresh) {
                tracing::warn!(task = %state.id(), error = %e, "cannot remove the task's workspace");
            }
        }
    }

    /// Every task in `status`, page by page.
    async fn all_in(&self, status: TaskStatus) -> Result<Vec<TaskSummary>> {
        let mut filter = TaskFilter {
            status: Some(status),
            limit: Some(500),
            ..TaskFilter::default()
        };
        let mut out = Vec::new();
        loop {
            let page = self.store.list(&filter).await?;
            out.extend(page.items);
            match page.next_cursor {
                Some(c) => filter.cursor = Some(c),
                None => return Ok(out),
            }
        }
    }

    /// Tasks in progress that another live process runs, with that process:
    /// what `resumable` leaves out, and why.
    pub async fn run_elsewhere(&self) -> Result<Vec<(TaskSummary, RunnerInfo)>> {
        let mut out: Vec<(TaskSummary, RunnerInfo)> = self
            .all_in(TaskStatus::InProgress)
            .await?
            .into_iter()
            .filter_map(|head| {
                let runner = head.runner.clone()?;
                (runner_alive(&runner) && !is_current(&runner)).then_some((head, runner))
            })
            .collect();
        out.sort_by(|a, b| a.0.id.cmp(&b.0.id));
        Ok(out)
    }

    /// Tasks `resume --all` would take up: pending, paused, and in progress with no
    /// live runner (a run under way in this engine counts as live).
    pub async fn resumable(&self) -> Result<Vec<TaskSummary>> {
        let mut out = Vec::new();
        for status in [
            TaskStatus::InProgress,
            TaskStatus::Paused,
            TaskStatus::Pending,
        ] {
            for head in self.all_in(status).await? {
                let live = self.controls.is_running(&head.id)
                    || head
                        .runner
                        .as_ref()
                        .is_some_and(|r| runner_alive(r) && !is_current(r));
                if !(status == TaskStatus::InProgress && live) {
                    out.push(head);
                }
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// [`Engine::resumable`], with one look at this machine's processes taken
    /// after the listing, for a take-over of them all
    /// ([`RunOptions::sweep`]): their runners had stopped when they were
    /// listed, so the look answers for all their interrupted attempts. No look
    /// when there is nothing to take up.
    pub async fn resumable_swept(
        &self,
    ) -> Result<(Vec<TaskSummary>, Option<crate::process::Sweep>)> {
        let tasks = self.resumable().await?;
        if tasks.is_empty() {
            return Ok((tasks, None));
        }
        let sweep = tokio::task::spawn_blocking(crate::process::Sweep::now)
            .await
            .ok();
        Ok((tasks, sweep))
    }

    /// A task's state as of event `seq`: the fold of its log up to and
    /// including it.
    pub async fn state_at(&self, id: &TaskId, seq: u64) -> Result<TaskState> {
        let summary = self.summary(id).await?;
        if seq == 0 || seq > summary.last_seq {
            return Err(EngineError::BadRequest(format!(
                "task {id} has no event {seq}: its log runs from 1 to {}",
                summary.last_seq
            )));
        }
        let events = self
            .store
            .events(id, 0, usize::try_from(seq).unwrap_or(usize::MAX))
            .await?;
        fold::fold(&events).map_err(|error| EngineError::Corrupt {
            task_id: id.clone(),
            error,
        })
    }

    /// A task's history: the points of its log, with its agent steps' turns
    /// from their journals.
    pub async fn history(&self, id: &TaskId) -> Result<rein_protocol::History> {
        let summary = self.summary(id).await?;
        let events = self.store.events(id, 0, usize::MAX).await?;
        let plan = self.plan(id).await?;
        let mut journals = Vec::new();
        // Only agent steps keep a journal (the runner gives no other one).
        let agents = plan
            .steps
            .iter()
            .filter(|s| matches!(s.action, rein_protocol::StepAction::Agent { .. }));
        for step in agents {
            let entries = self.store.load_journal(id, &step.id).await?;
            if !entries.is_empty() {
                journals.push((step.id.clone(), entries));
            }
        }
        Ok(rein_protocol::History {
            task_id: id.clone(),
            status: summary.status,
            last_seq: summary.last_seq,
            points: crate::history::points(&events, &journals),
        })
    }

    /// Copies a task's current state (and plan) into a snapshot.
    pub async fn snapshot(&self, id: &TaskId) -> Result<Snapshot> {
        let state = self.get(id).await?;
        let plan = self.plan(id).await?;
        let snapshot = Snapshot {
            id: SnapshotId::new(),
            task_id: id.clone(),
            seq: state.head.last_seq,
            created_at: chrono::Utc::now(),
            state,
            plan,
        };
        self.store.put_snapshot(&snapshot).await?;
        Ok(snapshot)
    }

    /// Creates a new task whose state equals the snapshot's. The original task and
    /// its log are untouched. A snapshot taken while the task ran gives a paused task.
    pub async fn restore(&self, snapshot_id: &SnapshotId) -> Result<TaskState> {
        let snapshot = self
            .store
            .get_snapshot(snapshot_id)
            .await?
            .ok_or_else(|| EngineError::SnapshotNotFound(snapshot_id.clone()))?;
        let task_id = TaskId::new();
        let first = HarnessEvent {
            id: EventId::new(),
            seq: 1,
            timestamp: chrono::Utc::now(),
            change: TaskChange::TaskRestored {
                snapshot_id: snapshot.id.clone(),
                from_task_id: snapshot.task_id.clone(),
                state: Box::new(fresh_checkpoint_ids(snapshot.state.clone())),
            },
            task_id: Some(task_id),
            checkpoint_id: None,
            session_id: snapshot.state.head.session_id.clone(),
            trace_id: new_trace_id(),
            span_id: new_span_id(),
            parent_span_id: None,
        };
        let mut rec = Recorder::genesis(first)?;
        if rec.state.status() == TaskStatus::InProgress {
            rec.task_event(TaskChange::TaskPaused {
                reason: format!(
                    "restored from snapshot {} of task {} taken while it ran; resume it to continue",
                    snapshot.id, snapshot.task_id
                ),
            })?;
        }
        // The restored task is a new task: the plan–execute–verify steps it may
        // still run get contracts of their own, so it never moves the original's.
        // Finished steps keep theirs, as the record of the work they covered.
        let mut plan = snapshot.plan;
        let records = self.records();
        let proposed = if rec.state.status().is_terminal() {
            Vec::new()
        } else {
            let done = &rec.state.head.context.completed_steps;
            for step in plan.steps.iter_mut().filter(|s| !done.contains(&s.id)) {
                if let Some(pev) = step.pev.as_mut() {
                    pev.contract_id = None;
                }
            }
            let (task, session) = (rec.state.id().clone(), rec.state.head.session_id.clone());
            crate::pev::propose(&records, &mut plan, task.as_str(), &session).await?
        };
        if let Err(e) = rec.flush_new(plan, &self.store, &self.events).await {
            crate::pev::withdraw(&records, &proposed, "the task could not be restored").await;
            return Err(e);
        }
        Ok(rec.state)
    }

    /// Deletes a finished or paused task with its log and snapshots. A task that is
    /// pending or in progress is refused: abort it first.
    pub async fn delete(&self, id: &TaskId) -> Result<()> {
        let head = self.summary(id).await?;
        match head.status {
            TaskStatus::Pending | TaskStatus::InProgress => Err(EngineError::WrongStatus {
                task_id: id.clone(),
                status: head.status,
                what: format!(
                    "a running task cannot be deleted; abort it first (`rein tasks abort {id}`)"
                ),
            }),
            TaskStatus::Paused
            | TaskStatus::Completed
            | TaskStatus::Failed
            | TaskStatus::Cancelled => {
                // Executors still connected for its sessions are released
                // before the sessions go with the task.
                self.executor.task_ended(id, &self.sessions()).await;
                self.store.delete(id, head.last_seq).await?;
                // What only its kept workspaces used goes with it.
                if let Some(keeper) = &self.config.saved
                    && let Err(e) = keeper.release(id).await
                {
                    tracing::warn!(task_id = %id, "the task's kept workspaces stay: {e}");
                }
                Ok(())
            }
        }
    }
}

/// Gives a copied state's checkpoints ids of their own (checkpoint ids are unique
/// across tasks), remembering in each the id it was copied from.
pub(crate) fn fresh_checkpoint_ids(mut state: TaskState) -> TaskState {
    for cp in &mut state.checkpoints {
        let fresh = CheckpointId::new();
        if state.head.current_checkpoint.as_ref() == Some(&cp.id) {
            state.head.current_checkpoint = Some(fresh.clone());
        }
        cp.metadata
            .insert("copied_from".into(), cp.id.to_string().into());
        cp.id = fresh;
    }
    state
}
