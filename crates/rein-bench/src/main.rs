//! `rein-bench`: measures the harness's own cost.
//!
//! `rein-bench steps --tasks N --steps M` runs N tasks of M sequential in-process
//! no-op steps through the engine and the SQLite store (every step durable before
//! the next starts), and prints one JSON line: durable steps per second, the
//! latency of each commit request (p50/p99), and — measured in the same run on the
//! same disk — the ceiling: how many bare `synchronous=FULL` SQLite commits per
//! second this machine does one after another.
#![allow(clippy::print_stdout)]

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clap::{Parser, Subcommand};
use rein_core::store::{
    ApprovalFilter, ControlRequest, NewTask, SnapshotInfo, TaskFilter, TaskPage, TaskWrite,
};
use rein_core::{
    CommandExecutor, CreateTask, Engine, EngineConfig, RunOptions, Store, StoreResult,
};
use rein_protocol::{
    ApprovalId, ApprovalRequest, HarnessEvent, LedgerEntry, Snapshot, SnapshotId, StepAction,
    TaskDecomposition, TaskId, TaskStatus, TaskStep, TaskSummary,
};
use rein_store::SqliteStore;

#[derive(Debug, Parser)]
#[command(name = "rein-bench")]
struct Cli {
    #[command(subcommand)]
    command: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Durable no-op steps per second through the engine.
    Steps {
        #[arg(long, default_value_t = 1)]
        tasks: usize,
        #[arg(long, default_value_t = 1000)]
        steps: usize,
        /// Bare commits to time for the ceiling (0 to skip).
        #[arg(long, default_value_t = 2000)]
        ceiling_commits: usize,
        /// Directory for the store files [default: a temporary directory].
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
}

/// A store that times every commit request on its way through.
#[derive(Debug)]
struct TimedStore {
    inner: SqliteStore,
    latencies: Mutex<Vec<Duration>>,
}

impl TimedStore {
    fn record(&self, started: Instant) {
        if let Ok(mut l) = self.latencies.lock() {
            l.push(started.elapsed());
        }
    }
}

#[async_trait]
impl Store for TimedStore {
    async fn create(&self, task: NewTask) -> StoreResult<()> {
        self.inner.create(task).await
    }
    async fn save(&self, write: TaskWrite) -> StoreResult<()> {
        let started = Instant::now();
        let result = self.inner.save(write).await;
        self.record(started);
        result
    }
    async fn load_summary(&self, id: &TaskId) -> StoreResult<Option<TaskSummary>> {
        self.inner.load_summary(id).await
    }
    async fn load_plan(&self, id: &TaskId) -> StoreResult<Option<TaskDecomposition>> {
        self.inner.load_plan(id).await
    }
    async fn list(&self, filter: &TaskFilter) -> StoreResult<TaskPage> {
        self.inner.list(filter).await
    }
    async fn events(
        &self,
        id: &TaskId,
        after: u64,
        limit: usize,
    ) -> StoreResult<Vec<HarnessEvent>> {
        self.inner.events(id, after, limit).await
    }
    async fn delete(&self, id: &TaskId, expected_seq: u64) -> StoreResult<()> {
        self.inner.delete(id, expected_seq).await
    }
    async fn put_snapshot(&self, snapshot: &Snapshot) -> StoreResult<()> {
        self.inner.put_snapshot(snapshot).await
    }
    async fn get_snapshot(&self, id: &SnapshotId) -> StoreResult<Option<Snapshot>> {
        self.inner.get_snapshot(id).await
    }
    async fn list_snapshots(&self, task_id: &TaskId) -> StoreResult<Vec<SnapshotInfo>> {
        self.inner.list_snapshots(task_id).await
    }
    async fn request_control(&self, request: &ControlRequest) -> StoreResult<()> {
        self.inner.request_control(request).await
    }
    async fn pending_controls(&self) -> StoreResult<Vec<ControlRequest>> {
        self.inner.pending_controls().await
    }
    async fn take_controls(&self, task_id: &TaskId) -> StoreResult<Vec<ControlRequest>> {
        self.inner.take_controls(task_id).await
    }
    async fn get_approval(&self, id: &ApprovalId) -> StoreResult<Option<ApprovalRequest>> {
        self.inner.get_approval(id).await
    }
    async fn list_approvals(&self, filter: &ApprovalFilter) -> StoreResult<Vec<ApprovalRequest>> {
        self.inner.list_approvals(filter).await
    }
    async fn settle_approval(
        &self,
        updated: &ApprovalRequest,
        entry: LedgerEntry,
    ) -> StoreResult<LedgerEntry> {
        self.inner.settle_approval(updated, entry).await
    }
    async fn ledger(&self, after_seq: u64, limit: usize) -> StoreResult<Vec<LedgerEntry>> {
        self.inner.ledger(after_seq, limit).await
    }
    async fn metrics(&self) -> StoreResult<rein_protocol::HarnessMetrics> {
        self.inner.metrics().await
    }
    async fn probe(&self) -> StoreResult<()> {
        self.inner.probe().await
    }
}

/// A chain of `n` no-op steps, each depending on the one before.
fn chain(n: usize) -> TaskDecomposition {
    let steps = (0..n)
        .map(|i| TaskStep {
            depends_on: if i == 0 {
                vec![]
            } else {
                vec![format!("s{}", i - 1)]
            },
            idempotent: true,
            ..TaskStep::new(format!("s{i}"), StepAction::Noop)
        })
        .collect();
    TaskDecomposition::new("bench", steps)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

fn mean_ms(samples: &[Duration]) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.iter().map(Duration::as_secs_f64).sum::<f64>() * 1000.0 / samples.len() as f64
}

/// Bare sequential commits of one small row each, WAL + synchronous=FULL.
fn sqlite_ceiling(dir: &Path, commits: usize) -> anyhow::Result<f64> {
    let conn = rusqlite::Connection::open(dir.join("ceiling.db"))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch("CREATE TABLE t (x INTEGER)")?;
    let started = Instant::now();
    for i in 0..commits {
        conn.execute_batch("BEGIN")?;
        conn.execute("INSERT INTO t VALUES (?1)", [i as i64])?;
        conn.execute_batch("COMMIT")?;
    }
    Ok(commits as f64 / started.elapsed().as_secs_f64())
}

async fn steps(
    tasks: usize,
    steps: usize,
    ceiling_commits: usize,
    dir: &Path,
) -> anyhow::Result<serde_json::Value> {
    let store = Arc::new(TimedStore {
        inner: SqliteStore::open(&dir.join("rein.db"))?,
        latencies: Mutex::new(Vec::new()),
    });
    let engine = Arc::new(Engine::new(
        store.clone(),
        Arc::new(CommandExecutor),
        EngineConfig::new(dir.join("ws")),
    ));
    let mut ids = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        let state = engine
            .create(CreateTask {
                plan: chain(steps),
                session_id: None,
                workspace: None,
            })
            .await?;
        ids.push(state.id().clone());
    }
    let before = store.inner.stats();
    store
        .latencies
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clear();
    let started = Instant::now();
    let mut runs = tokio::task::JoinSet::new();
    for id in ids {
        let engine = engine.clone();
        runs.spawn(async move { engine.run(&id, RunOptions::default()).await });
    }
    while let Some(done) = runs.join_next().await {
        let state = done??;
        anyhow::ensure!(
            state.status() == TaskStatus::Completed,
            "a task ended {}",
            state.status()
        );
    }
    let elapsed = started.elapsed().as_secs_f64();
    let after = store.inner.stats();
    let mut latencies = store
        .latencies
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    latencies.sort();
    let total = tasks * steps;
    let steps_per_s = total as f64 / elapsed;
    let ceiling = if ceiling_commits > 0 {
        Some(sqlite_ceiling(dir, ceiling_commits)?)
    } else {
        None
    };
    Ok(serde_json::json!({
        "bench": "steps",
        "tasks": tasks,
        "steps_per_task": steps,
        "total_steps": total,
        "elapsed_s": (elapsed * 1000.0).round() / 1000.0,
        "steps_per_s": steps_per_s.round(),
        "commit_p50_ms": (percentile(&latencies, 0.50) * 1000.0).round() / 1000.0,
        "commit_p99_ms": (percentile(&latencies, 0.99) * 1000.0).round() / 1000.0,
        "commit_mean_ms": (mean_ms(&latencies) * 1000.0).round() / 1000.0,
        "commit_requests": latencies.len(),
        "sqlite_transactions": after.commits - before.commits,
        "transaction_mean_ms": ((after.busy_ns - before.busy_ns) as f64 / (after.commits - before.commits).max(1) as f64 / 1e3).round() / 1e3,
        "sqlite_ceiling_commits_per_s": ceiling.map(f64::round),
        "steps_per_s_over_ceiling": ceiling.map(|c| (steps_per_s / c * 1000.0).round() / 1000.0),
    }))
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Bench::Steps {
            tasks,
            steps: n,
            ceiling_commits,
            dir,
        } => {
            let temp = tempfile::tempdir()?;
            let dir = dir.unwrap_or_else(|| temp.path().to_owned());
            std::fs::create_dir_all(&dir)?;
            let line = runtime.block_on(steps(tasks, n, ceiling_commits, &dir))?;
            println!("{line}");
        }
    }
    Ok(())
}
