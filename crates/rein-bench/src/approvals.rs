//! `rein-bench approvals`: a decision to the next step, and memory with tasks
//! paused on approvals.

use super::*;

/// `ask` (a person decides) then `next` (a no-op).
pub(super) fn ask_then_next() -> TaskDecomposition {
    let ask = TaskStep {
        checkpoint: rein_protocol::CheckpointType::UserApproval,
        ..TaskStep::new("ask", StepAction::approval("Go on?", ""))
    };
    let next = TaskStep {
        depends_on: vec!["ask".into()],
        ..TaskStep::new("next", StepAction::Noop)
    };
    TaskDecomposition::new("approval bench", vec![ask, next])
}

/// A field of /proc/self/status in MiB (VmRSS now, VmHWM at its peak).
pub(super) fn memory_mib(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

pub(super) async fn approvals(
    decisions: usize,
    paused: usize,
    dir: &Path,
) -> anyhow::Result<serde_json::Value> {
    use rein_protocol::{ApprovalResponse, Decision, TaskChange};
    let store = Arc::new(SqliteStore::open(&dir.join("rein.db"))?);
    let engine = command_engine(store, dir);

    // Decision → next step: a runner waits in this process; time from the decision's
    // commit (decide returns) to the next step's checkpoint being entered (committed).
    let mut latencies = Vec::with_capacity(decisions);
    for _ in 0..decisions {
        let state = engine.create(CreateTask::of(ask_then_next())).await?;
        let mut events = engine.subscribe();
        let run = {
            let engine = engine.clone();
            let id = state.id().clone();
            tokio::spawn(async move { engine.run(&id, RunOptions::default()).await })
        };
        let request = loop {
            let event = events.recv().await?;
            if let TaskChange::HumanApprovalRequested { request } = event.change {
                break request;
            }
        };
        let mut next_cp = None;
        let response = ApprovalResponse {
            request_id: request.id.clone(),
            decision: Decision::Approve,
            selected_option: None,
            reason: None,
            decided_by: "bench".into(),
            delegate_to: None,
            decided_at: chrono::Utc::now(),
        };
        engine.decide(response).await?;
        let decided = Instant::now();
        loop {
            let event = events.recv().await?;
            match &event.change {
                TaskChange::CheckpointCreated { checkpoint }
                    if checkpoint.step_id.as_deref() == Some("next") =>
                {
                    next_cp = Some(checkpoint.id.clone());
                }
                TaskChange::CheckpointEntered { checkpoint_id }
                    if Some(checkpoint_id) == next_cp.as_ref() =>
                {
                    latencies.push(decided.elapsed());
                    break;
                }
                _ => {}
            }
        }
        let done = run.await??;
        anyhow::ensure!(
            done.status() == TaskStatus::Completed,
            "a task ended {}",
            done.status()
        );
    }
    latencies.sort();

    // Memory: many tasks paused on a person, each run until it pauses.
    let rss_before = memory_mib("VmRSS:");
    let started = Instant::now();
    let mut runs = tokio::task::JoinSet::new();
    for _ in 0..paused {
        let state = engine.create(CreateTask::of(ask_then_next())).await?;
        let engine = engine.clone();
        runs.spawn(async move {
            engine
                .run(
                    state.id(),
                    RunOptions {
                        no_wait: true,
                        ..RunOptions::default()
                    },
                )
                .await
        });
        // Keep a bounded number of runs in flight, as a server taking up tasks would.
        while runs.len() >= 256 {
            let state = runs
                .join_next()
                .await
                .ok_or_else(|| anyhow::anyhow!("no run"))???;
            anyhow::ensure!(
                state.status() == TaskStatus::Paused,
                "a task ended {}",
                state.status()
            );
        }
    }
    while let Some(done) = runs.join_next().await {
        let state = done??;
        anyhow::ensure!(
            state.status() == TaskStatus::Paused,
            "a task ended {}",
            state.status()
        );
    }
    let pausing_s = started.elapsed().as_secs_f64();
    let waiting = engine
        .store()
        .list_approvals(&rein_core::store::ApprovalFilter {
            status: Some(rein_protocol::ApprovalStatus::Pending),
            limit: Some(1),
            ..Default::default()
        })
        .await?;
    anyhow::ensure!(!waiting.is_empty(), "no request is pending");
    let metrics = engine.metrics().await?;
    Ok(serde_json::json!({
        "bench": "approvals",
        "decisions": decisions,
        "decision_to_next_step_p50_ms": (percentile(&latencies, 0.50) * 1000.0).round() / 1000.0,
        "decision_to_next_step_p99_ms": (percentile(&latencies, 0.99) * 1000.0).round() / 1000.0,
        "paused_tasks": metrics.tasks.paused,
        "pending_requests": metrics.human_loop.pending,
        "pausing_s": (pausing_s * 100.0).round() / 100.0,
        "rss_mib_before": rss_before.map(|v| v.round()),
        "rss_mib_with_paused": memory_mib("VmRSS:").map(|v| v.round()),
        "peak_rss_mib": memory_mib("VmHWM:").map(|v| v.round()),
    }))
}
