//! The engine test harness: a real SQLite store in a temporary directory.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use rein_core::clock::Clock;
use rein_core::{
    CommandExecutor, CreateTask, Engine, EngineError, RunOptions, StepExecutor, TaskStore,
};
use rein_protocol::{
    ApprovalRequest, HarnessEvent, TaskChange, TaskDecomposition, TaskId, TaskState, TaskStep,
};
use rein_store::SqliteStore;

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub store: Arc<SqliteStore>,
    pub engine: Arc<Engine>,
}

pub fn harness_with(executor: Arc<dyn StepExecutor>, max_parallel: usize) -> Harness {
    built(
        rein_test_support::engine::engine()
            .executor(executor)
            .config(move |c| c.max_parallel = max_parallel),
    )
}

/// A harness whose deadlines follow `clock` (a `TokioClock` under `tokio::time::pause`).
pub fn harness_with_clock(clock: Arc<dyn Clock>) -> Harness {
    built(rein_test_support::engine::engine().clock(clock))
}

/// A harness with its own executor and clock.
pub fn harness_on(executor: Arc<dyn StepExecutor>, clock: Arc<dyn Clock>) -> Harness {
    built(
        rein_test_support::engine::engine()
            .executor(executor)
            .clock(clock),
    )
}

fn built(builder: rein_test_support::engine::EngineBuilder) -> Harness {
    let t = builder.build();
    Harness {
        dir: t.dir.unwrap(),
        store: t.store,
        engine: t.engine,
    }
}

pub fn harness() -> Harness {
    harness_with(Arc::new(CommandExecutor::unsandboxed()), 4)
}

pub fn step(id: &str, run: &str, deps: &[&str]) -> TaskStep {
    TaskStep {
        depends_on: deps.iter().map(|d| (*d).to_owned()).collect(),
        ..TaskStep::command(id, run)
    }
}

pub fn plan(steps: Vec<TaskStep>) -> TaskDecomposition {
    TaskDecomposition::new("test", steps)
}

impl Harness {
    pub async fn create(&self, p: TaskDecomposition) -> TaskState {
        self.engine.create(CreateTask::of(p)).await.unwrap()
    }

    pub async fn run(&self, p: TaskDecomposition) -> TaskState {
        let state = self.create(p).await;
        self.resume(state.id()).await
    }

    /// Runs (or resumes) a stored task to where it stops.
    pub async fn resume(&self, id: &TaskId) -> TaskState {
        self.engine.run(id, RunOptions::default()).await.unwrap()
    }

    /// The approval request listed last.
    pub async fn last_request(&self) -> rein_protocol::ApprovalRequest {
        let mut requests = self.engine.approvals(&Default::default()).await.unwrap();
        requests.pop().expect("an approval request")
    }

    pub async fn log(&self, state: &TaskState) -> Vec<HarnessEvent> {
        self.store.events(state.id(), 0, usize::MAX).await.unwrap()
    }

    /// The state as stored: the fold of the stored log, checked against the stored
    /// state row.
    pub async fn stored(&self, state: &TaskState) -> TaskState {
        let folded = rein_core::fold::fold(&self.log(state).await).unwrap();
        let row = self.store.load_summary(state.id()).await.unwrap().unwrap();
        assert_eq!(
            row,
            folded.head.summary(),
            "the state row equals the fold of the log"
        );
        assert_eq!(self.engine.get(state.id()).await.unwrap(), folded);
        folded
    }
}

impl Harness {
    /// Runs a task in the background and returns once `step` is running.
    pub async fn run_until_running(
        &self,
        state: &TaskState,
        options: RunOptions,
        step: &str,
    ) -> tokio::task::JoinHandle<Result<TaskState, EngineError>> {
        let mut events = self.engine.subscribe();
        let engine = self.engine.clone();
        let id = state.id().clone();
        let run = tokio::spawn(async move { engine.run(&id, options).await });
        entered(&mut events, step).await;
        run
    }
}

pub fn latest<'a>(state: &'a TaskState, step: &str) -> &'a rein_protocol::Checkpoint {
    state
        .latest_for_step(step)
        .unwrap_or_else(|| panic!("no checkpoint for {step}"))
}

/// Waits (on the engine's own event stream) until a step's checkpoint is entered.
pub async fn entered(events: &mut tokio::sync::broadcast::Receiver<HarnessEvent>, step: &str) {
    let mut cps = std::collections::HashMap::new();
    loop {
        let e = events.recv().await.unwrap();
        match &e.change {
            TaskChange::CheckpointCreated { checkpoint } => {
                cps.insert(checkpoint.id.clone(), checkpoint.step_id.clone());
            }
            TaskChange::CheckpointEntered { checkpoint_id }
                if cps.get(checkpoint_id).cloned().flatten().as_deref() == Some(step) =>
            {
                return;
            }
            _ => {}
        }
    }
}

/// A person's answer to `request`, with a reason naming them.
pub fn answer(
    request: &ApprovalRequest,
    decision: rein_protocol::Decision,
    who: &str,
) -> rein_protocol::ApprovalResponse {
    rein_protocol::ApprovalResponse {
        request_id: request.id.clone(),
        decision,
        selected_option: None,
        reason: Some(format!("{who} says so")),
        decided_by: who.into(),
        delegate_to: None,
        decided_at: chrono::Utc::now(),
    }
}

/// Approves `request` choosing `option`, as `who`.
pub fn choose(
    request: &ApprovalRequest,
    option: &str,
    who: &str,
) -> rein_protocol::ApprovalResponse {
    rein_protocol::ApprovalResponse {
        selected_option: Some(option.to_owned()),
        ..answer(request, rein_protocol::Decision::Approve, who)
    }
}

/// A plugin named `id`, described as nothing.
pub fn plugin(id: &str) -> rein_core::harness::PluginInfo {
    rein_core::harness::PluginInfo {
        id: id.into(),
        name: id.into(),
        description: String::new(),
        ..rein_core::harness::PluginInfo::default()
    }
}

pub fn no_wait() -> RunOptions {
    RunOptions {
        no_wait: true,
        ..RunOptions::default()
    }
}
