//! `rein-bench fork`: how long a fork of a long task takes to be running.
//!
//! The source: a task of `--events` events (no-op steps, idempotent, three
//! events each) whose workspace holds `--workspace-mb` MiB (in 1 MiB files)
//! and `--files` small files, kept as the task was taken up. The fork: just
//! before its last step, through [`Engine::fork`] (the log read and folded,
//! the workspace written from what was kept, the fork's first event
//! committed), then run until its first step has started. Each phase is
//! timed on its own beside the whole: reading and folding the log, writing
//! the workspace.

use super::*;

use rein_core::fork::{Fork, ForkPoint};
use rein_core::saved::WorkspaceHistory;
use rein_protocol::TaskChange;
use serde_json::json;

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v.get(v.len() / 2).copied().map_or(0.0, ms)
}

/// Fills `dir` with `mb` files of 1 MiB (no two alike) and `files` small ones.
fn fill(dir: &Path, mb: u64, files: usize) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir.join("big"))?;
    let mut block = vec![0u8; 1 << 20];
    for i in 0..mb {
        for (j, b) in block.iter_mut().enumerate() {
            *b = ((j as u64).wrapping_mul(2_654_435_761) >> 13) as u8 ^ i as u8;
        }
        block[..8].copy_from_slice(&i.to_le_bytes());
        std::fs::write(dir.join("big").join(format!("blob{i}.bin")), &block)?;
    }
    for i in 0..files {
        let sub = dir.join(format!("src/d{}", i % 50));
        std::fs::create_dir_all(&sub)?;
        std::fs::write(
            sub.join(format!("f{i}.txt")),
            format!("file {i}\n").repeat(40),
        )?;
    }
    Ok(())
}

pub async fn run(
    events: usize,
    workspace_mb: u64,
    files: usize,
    forks: usize,
    dir: &Path,
) -> anyhow::Result<serde_json::Value> {
    let store = Arc::new(SqliteStore::open(&dir.join("rein.db"))?);
    let keeper = Arc::new(
        rein_store::SavedWorkspaces::open(&dir.join("saved")).map_err(anyhow::Error::msg)?,
    );
    let mut config = EngineConfig::new(dir.join("ws"));
    config.saved = Some(keeper.clone());
    let engine = Arc::new(Engine::new(
        store.clone(),
        Arc::new(CommandExecutor::unsandboxed()),
        config,
    ));
    let steps = (events / 3).max(2);
    let plan: Vec<TaskStep> = (0..steps)
        .map(|i| TaskStep {
            idempotent: true,
            ..TaskStep::new(format!("s{i}"), StepAction::Noop)
        })
        .collect();
    let source = engine
        .create(CreateTask::of(TaskDecomposition::new("fork bench", plan)))
        .await?;
    let ws = std::path::PathBuf::from(
        source
            .head
            .resources
            .workspace_path
            .clone()
            .unwrap_or_default(),
    );
    fill(&ws, workspace_mb, files)?;
    let started = Instant::now();
    let done = engine.run(source.id(), RunOptions::default()).await?;
    anyhow::ensure!(
        done.status() == TaskStatus::Completed,
        "{:?}",
        done.head.error
    );
    let source_ms = ms(started.elapsed());
    let last = format!("s{}", steps - 1);

    let (mut whole, mut to_running, mut reads, mut writes) = (vec![], vec![], vec![], vec![]);
    for _ in 0..forks {
        // The phases alone: the log read and folded; the workspace written.
        let t = Instant::now();
        let log = engine.events(source.id(), 0, usize::MAX).await?;
        let _ = rein_core::fold::fold(&log)?;
        reads.push(t.elapsed());
        let root = log
            .iter()
            .find_map(|e| match &e.change {
                TaskChange::WorkspaceSaved { workspace, .. } => workspace.root.clone(),
                _ => None,
            })
            .ok_or_else(|| anyhow::anyhow!("no kept workspace"))?;
        let into = dir.join(format!("restore-{}", reads.len()));
        let t = Instant::now();
        keeper
            .restore(&root, &into)
            .await
            .map_err(anyhow::Error::msg)?;
        writes.push(t.elapsed());
        std::fs::remove_dir_all(&into)?;

        // The fork, until its first step runs.
        let mut seen = engine.subscribe();
        let t = Instant::now();
        let fork = engine
            .fork(
                source.id(),
                Fork {
                    point: ForkPoint::Before(last.clone()),
                    workspace: None,
                    set: Default::default(),
                    confined_to: None,
                },
            )
            .await?;
        whole.push(t.elapsed());
        let id = fork.id().clone();
        let runner = {
            let engine = Arc::clone(&engine);
            let id = id.clone();
            tokio::spawn(async move { engine.run(&id, RunOptions::default()).await })
        };
        loop {
            let e = seen.recv().await?;
            if e.task_id.as_ref() == Some(&id)
                && matches!(e.change, TaskChange::CheckpointEntered { .. })
            {
                break;
            }
        }
        to_running.push(t.elapsed());
        let ran = runner.await??;
        anyhow::ensure!(
            ran.status() == TaskStatus::Completed,
            "{:?}",
            ran.head.error
        );
        let fork_ws = ran
            .head
            .resources
            .workspace_path
            .clone()
            .unwrap_or_default();
        std::fs::remove_dir_all(fork_ws)?;
    }
    let log_len = engine.summary(source.id()).await?.last_seq;
    Ok(json!({
        "bench": "fork",
        "events": log_len,
        "workspace_mb": workspace_mb,
        "files": files + workspace_mb as usize,
        "source_run_ms": source_ms,
        "forks": forks,
        "fork_made_p50_ms": median(whole),
        "fork_running_p50_ms": median(to_running),
        "log_read_and_fold_p50_ms": median(reads),
        "workspace_written_p50_ms": median(writes),
    }))
}
