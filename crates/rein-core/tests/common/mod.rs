//! The engine test harness: a real SQLite store in a temporary directory.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use rein_core::clock::Clock;
use rein_core::store::{
    ApprovalFilter, ControlRequest, NewTask, SnapshotInfo, TaskFilter, TaskPage, TaskWrite,
};
use rein_core::{
    CommandExecutor, CreateTask, Engine, EngineConfig, EngineError, RunOptions, StepExecutor,
    Store, StoreResult,
};
use rein_protocol::{
    ApprovalId, ApprovalRequest, HarnessEvent, LedgerEntry, Snapshot, SnapshotId, TaskChange,
    TaskDecomposition, TaskId, TaskState, TaskStep, TaskSummary,
};
use rein_store::SqliteStore;

/// The SQLite store for tests on tokio's paused clock. The runtime looks idle while
/// it waits on the store's writer thread, and a paused clock then jumps to the next
/// timer; running each write inside `spawn_blocking` (as reads already are) holds
/// the clock still, so only the engine's own timers move time.
#[derive(Debug)]
pub struct HeldClockStore(pub Arc<SqliteStore>);

impl HeldClockStore {
    async fn hold<T: Send + 'static>(
        &self,
        work: impl FnOnce(
            Arc<SqliteStore>,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>
        + Send
        + 'static,
    ) -> T {
        let store = Arc::clone(&self.0);
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || handle.block_on(work(store)))
            .await
            .unwrap()
    }
}

#[async_trait::async_trait]
impl Store for HeldClockStore {
    async fn create(&self, task: NewTask) -> StoreResult<()> {
        self.hold(move |s| Box::pin(async move { s.create(task).await }))
            .await
    }
    async fn save(&self, write: TaskWrite) -> StoreResult<()> {
        self.hold(move |s| Box::pin(async move { s.save(write).await }))
            .await
    }
    async fn load_summary(&self, id: &TaskId) -> StoreResult<Option<TaskSummary>> {
        self.0.load_summary(id).await
    }
    async fn load_plan(&self, id: &TaskId) -> StoreResult<Option<TaskDecomposition>> {
        self.0.load_plan(id).await
    }
    async fn list(&self, filter: &TaskFilter) -> StoreResult<TaskPage> {
        self.0.list(filter).await
    }
    async fn events(
        &self,
        id: &TaskId,
        after: u64,
        limit: usize,
    ) -> StoreResult<Vec<HarnessEvent>> {
        self.0.events(id, after, limit).await
    }
    async fn positions(&self) -> StoreResult<(u64, u64)> {
        self.0.positions().await
    }
    async fn all_events(&self, after: u64, limit: usize) -> StoreResult<Vec<(u64, HarnessEvent)>> {
        self.0.all_events(after, limit).await
    }
    async fn delete(&self, id: &TaskId, expected_seq: u64) -> StoreResult<()> {
        let id = id.clone();
        self.hold(move |s| Box::pin(async move { s.delete(&id, expected_seq).await }))
            .await
    }
    async fn put_snapshot(&self, snapshot: &Snapshot) -> StoreResult<()> {
        let snapshot = snapshot.clone();
        self.hold(move |s| Box::pin(async move { s.put_snapshot(&snapshot).await }))
            .await
    }
    async fn get_snapshot(&self, id: &SnapshotId) -> StoreResult<Option<Snapshot>> {
        self.0.get_snapshot(id).await
    }
    async fn list_snapshots(&self, task_id: &TaskId) -> StoreResult<Vec<SnapshotInfo>> {
        self.0.list_snapshots(task_id).await
    }
    async fn request_control(&self, request: &ControlRequest) -> StoreResult<()> {
        let request = request.clone();
        self.hold(move |s| Box::pin(async move { s.request_control(&request).await }))
            .await
    }
    async fn pending_controls(&self) -> StoreResult<Vec<ControlRequest>> {
        self.0.pending_controls().await
    }
    async fn take_controls(&self, task_id: &TaskId) -> StoreResult<Vec<ControlRequest>> {
        let id = task_id.clone();
        self.hold(move |s| Box::pin(async move { s.take_controls(&id).await }))
            .await
    }
    async fn get_approval(&self, id: &ApprovalId) -> StoreResult<Option<ApprovalRequest>> {
        self.0.get_approval(id).await
    }
    async fn list_approvals(&self, filter: &ApprovalFilter) -> StoreResult<Vec<ApprovalRequest>> {
        self.0.list_approvals(filter).await
    }
    async fn settle_approval(
        &self,
        updated: &ApprovalRequest,
        entry: LedgerEntry,
    ) -> StoreResult<LedgerEntry> {
        let updated = updated.clone();
        self.hold(move |s| Box::pin(async move { s.settle_approval(&updated, entry).await }))
            .await
    }
    async fn ledger(&self, after_seq: u64, limit: usize) -> StoreResult<Vec<LedgerEntry>> {
        self.0.ledger(after_seq, limit).await
    }
    async fn metrics(&self) -> StoreResult<rein_protocol::HarnessMetrics> {
        self.0.metrics().await
    }
    async fn probe(&self) -> StoreResult<rein_core::store::StoreProbe> {
        self.hold(move |s| Box::pin(async move { s.probe().await }))
            .await
    }
    async fn insert_shared_state(
        &self,
        state: &rein_protocol::SharedHarnessState,
        audit: &rein_core::store::AuditRecord,
    ) -> StoreResult<()> {
        self.0.insert_shared_state(state, audit).await
    }
    async fn audit_records(
        &self,
        after: u64,
        limit: usize,
    ) -> StoreResult<Vec<rein_core::store::AuditRecord>> {
        self.0.audit_records(after, limit).await
    }
    async fn insert_record(
        &self,
        record: &rein_core::store::Record,
        audit: &rein_core::store::AuditRecord,
    ) -> StoreResult<()> {
        self.0.insert_record(record, audit).await
    }
    async fn load_record(
        &self,
        kind: rein_core::store::RecordKind,
        id: &str,
    ) -> StoreResult<Option<(rein_core::store::Record, u64)>> {
        self.0.load_record(kind, id).await
    }
    async fn update_record(
        &self,
        record: &rein_core::store::Record,
        expected: u64,
        audit: &rein_core::store::AuditRecord,
    ) -> StoreResult<()> {
        self.0.update_record(record, expected, audit).await
    }
    async fn list_records(
        &self,
        filter: &rein_core::store::RecordFilter,
    ) -> StoreResult<rein_core::store::RecordPage> {
        self.0.list_records(filter).await
    }
    async fn append_journal(
        &self,
        task_id: &rein_protocol::TaskId,
        step_id: &str,
        from: u64,
        entries: &[serde_json::Value],
    ) -> StoreResult<()> {
        self.0.append_journal(task_id, step_id, from, entries).await
    }
    async fn load_journal(
        &self,
        task_id: &rein_protocol::TaskId,
        step_id: &str,
    ) -> StoreResult<Vec<serde_json::Value>> {
        self.0.load_journal(task_id, step_id).await
    }
    async fn load_shared_state(
        &self,
        id: &str,
    ) -> StoreResult<Option<(rein_protocol::SharedHarnessState, u64)>> {
        self.0.load_shared_state(id).await
    }
    async fn update_shared_state(
        &self,
        state: &rein_protocol::SharedHarnessState,
        expected: u64,
        audit: &rein_core::store::AuditRecord,
    ) -> StoreResult<()> {
        self.0.update_shared_state(state, expected, audit).await
    }
    async fn list_shared_states(
        &self,
        filter: &rein_core::store::SharedStateFilter,
    ) -> StoreResult<rein_core::store::SharedStatePage> {
        self.0.list_shared_states(filter).await
    }
}

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub store: Arc<SqliteStore>,
    pub engine: Arc<Engine>,
}

pub fn harness_with(executor: Arc<dyn StepExecutor>, max_parallel: usize) -> Harness {
    build(executor, max_parallel, None)
}

/// A harness whose deadlines follow `clock` (a `TokioClock` under `tokio::time::pause`).
pub fn harness_with_clock(clock: Arc<dyn Clock>) -> Harness {
    build(Arc::new(CommandExecutor::unsandboxed()), 4, Some(clock))
}

/// A harness with its own executor and clock.
pub fn harness_on(executor: Arc<dyn StepExecutor>, clock: Arc<dyn Clock>) -> Harness {
    build(executor, 4, Some(clock))
}

fn build(
    executor: Arc<dyn StepExecutor>,
    max_parallel: usize,
    clock: Option<Arc<dyn Clock>>,
) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("rein.db")).unwrap());
    let mut config = EngineConfig::new(dir.path().join("workspaces"));
    config.max_parallel = max_parallel;
    config.control_poll = Duration::from_millis(20);
    let engine_store: Arc<dyn Store> = if clock.is_some() {
        Arc::new(HeldClockStore(store.clone()))
    } else {
        store.clone()
    };
    if let Some(clock) = clock {
        config.clock = clock;
        // Deadlines of minutes on a paused clock: polling every 20 ms would mean
        // tens of thousands of store reads.
        config.control_poll = Duration::from_secs(1);
    }
    let engine = Arc::new(Engine::new(engine_store, executor, config));
    Harness { dir, store, engine }
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
        self.engine
            .create(CreateTask {
                plan: p,
                session_id: None,
                workspace: None,
                confined_to: None,
            })
            .await
            .unwrap()
    }

    pub async fn run(&self, p: TaskDecomposition) -> TaskState {
        let state = self.create(p).await;
        self.resume(state.id()).await
    }

    /// Runs (or resumes) a stored task to where it stops.
    pub async fn resume(&self, id: &TaskId) -> TaskState {
        self.engine.run(id, RunOptions::default()).await.unwrap()
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

/// Run options that pause instead of waiting for a person.
pub fn no_wait() -> RunOptions {
    RunOptions {
        no_wait: true,
        ..RunOptions::default()
    }
}
