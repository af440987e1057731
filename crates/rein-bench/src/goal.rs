//! `rein-bench goal --steps N`: how long rein takes from a decomposition's
//! answer to the first step running — checking the answer against its
//! schema, making the plan through the plan-file format, the permission
//! rules, the store write of the plan with its CP2 events, and scheduling —
//! on a real SQLite store. The model is an in-process completer that answers
//! at once (the model's own time is not rein's), and steps pass at once.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rein_core::executor::{StepOutcome, StepRequest};
use rein_core::harness::completion::{Completer, Completion, CompletionFailure, CompletionRequest};
use rein_core::harness::isolated::CompletionOwner;
use rein_core::{CreateTask, Engine, EngineConfig, RunOptions, StepExecutor};
use rein_protocol::{
    BUILTIN_RUNTIME, Goal, PolicySource, SelectionDecision, SelectionPolicy, SelectionReason,
    TaskDecomposition,
};
use rein_store::SqliteStore;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// When the answer left the model, and when the first step began.
#[derive(Debug, Default)]
struct Marks {
    answered: Option<Instant>,
    first_step: Option<Instant>,
}

/// Answers every decomposition with the same chain of `steps` write steps.
#[derive(Debug)]
struct AtOnce {
    answer: String,
    marks: Arc<Mutex<Marks>>,
}

#[async_trait]
impl Completer for AtOnce {
    async fn complete(&self, _: &CompletionRequest) -> Result<Completion, CompletionFailure> {
        let done = Completion {
            text: self.answer.clone(),
            json: None,
            selection: SelectionDecision {
                provider: "openai".into(),
                model: None,
                policy: SelectionPolicy {
                    source: PolicySource::Default,
                    runtime: "auto".into(),
                },
                selected: BUILTIN_RUNTIME.into(),
                reason: SelectionReason::AutoBuiltin,
                candidates: Vec::new(),
                workspace_environment: None,
                fallback_models: Vec::new(),
            },
            owner: CompletionOwner::Host,
            runtime: "rein".into(),
            profile: "default".into(),
            request_durations_ms: vec![0],
            stop_reason: "stop".into(),
            duration_ms: 0,
            usage: None,
        };
        // The first request is the decomposition (a later one, the summary).
        if let Ok(mut m) = self.marks.lock() {
            m.answered.get_or_insert_with(Instant::now);
        }
        Ok(done)
    }
}

/// Passes every step, noting when the first began.
#[derive(Debug)]
struct Passing {
    marks: Arc<Mutex<Marks>>,
}

#[async_trait]
impl StepExecutor for Passing {
    async fn execute(&self, _: StepRequest, _: CancellationToken) -> StepOutcome {
        if let Ok(mut m) = self.marks.lock() {
            m.first_step.get_or_insert_with(Instant::now);
        }
        StepOutcome::Passed { output: None }
    }
}

fn answer(steps: usize) -> String {
    let steps: Vec<_> = (0..steps)
        .map(|i| {
            let depends_on: Vec<String> = if i == 0 {
                Vec::new()
            } else {
                vec![format!("s{}", i - 1)]
            };
            json!({ "id": format!("s{i}"), "type": "write", "risk_level": "low",
                    "description": format!("Write part {i} of the report into part-{i}.md."),
                    "depends_on": depends_on })
        })
        .collect();
    json!({ "original_task": "a report", "risk_level": "low", "steps": steps }).to_string()
}

pub async fn goal(steps: usize, runs: usize, dir: &std::path::Path) -> anyhow::Result<String> {
    let mut latencies = Vec::new();
    for run in 0..runs {
        let marks = Arc::new(Mutex::new(Marks::default()));
        let run_dir = dir.join(format!("run-{run}"));
        std::fs::create_dir_all(&run_dir)?;
        let store = Arc::new(SqliteStore::open(&run_dir.join("rein.db"))?);
        let engine = Engine::new(
            store,
            Arc::new(Passing {
                marks: Arc::clone(&marks),
            }),
            EngineConfig::new(run_dir.join("workspaces")),
        )
        .with_completer(Arc::new(AtOnce {
            answer: answer(steps),
            marks: Arc::clone(&marks),
        }));
        let mut plan = TaskDecomposition::new("a report", Vec::new());
        plan.goal = Some(Goal {
            confirm: false,
            ..Goal::default()
        });
        let task = engine.create(CreateTask::of(plan)).await?;
        let state = engine.run(task.id(), RunOptions::default()).await?;
        anyhow::ensure!(
            state.head.context.completed_steps.len() == steps,
            "the task did not run its {steps} steps: {:?}",
            state.status()
        );
        let m = marks.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        let (Some(a), Some(f)) = (m.answered, m.first_step) else {
            anyhow::bail!("no answer or no step was seen");
        };
        latencies.push(f.duration_since(a));
    }
    latencies.sort();
    let ms = |d: Duration| (d.as_secs_f64() * 1e6).round() / 1e3;
    Ok(json!({
        "bench": "goal",
        "steps": steps,
        "runs": runs,
        "answer_to_first_step_ms": {
            "min": ms(latencies[0]),
            "median": ms(latencies[latencies.len() / 2]),
            "max": ms(latencies[latencies.len() - 1]),
        },
    })
    .to_string())
}
