//! Crash safety, for real: `rein` is killed with SIGKILL at random moments while it
//! runs a plan of 200 steps, then resumed, many times over. Afterwards the task must
//! be complete, every step completed exactly once in the log, no completed step run
//! again, and the stored state equal to the fold of the stored log.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{rein, show, task_ids, write_plan};
use rand::{Rng, SeedableRng};
use rein_core::Store;
use rein_protocol::{HarnessEvent, TaskChange, TaskId};

const LAYERS: usize = 50;
const WIDTH: usize = 4;

/// 50 layers of 4 steps; each step depends on the whole layer before it. Every step
/// appends its id to `ran.log`. One in ten is not idempotent.
fn plan() -> String {
    let mut text = String::from("description = \"crash test\"\nmax_parallel = 4\n");
    for layer in 0..LAYERS {
        for i in 0..WIDTH {
            let id = format!("s{layer:02}_{i}");
            let deps: Vec<String> = if layer == 0 {
                Vec::new()
            } else {
                (0..WIDTH)
                    .map(|j| format!("\"s{:02}_{j}\"", layer - 1))
                    .collect()
            };
            let idempotent = (layer * WIDTH + i) % 10 != 7;
            text.push_str(&format!(
                "[[steps]]\nid = \"{id}\"\nrun = \"echo {id} >> ran.log\"\ndepends_on = [{}]\nidempotent = {idempotent}\n",
                deps.join(", ")
            ));
        }
    }
    text
}

/// The steps a person is asked about: interrupted steps that are not idempotent
/// raise an approval request naming the step.
fn asked_steps(data: &std::path::Path, task: &str) -> Vec<String> {
    let out = rein(data)
        .args(["approvals", "list", "--task", task, "--json"])
        .output()
        .unwrap();
    let requests: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    requests
        .as_array()
        .map(|rs| {
            rs.iter()
                .filter_map(|r| r["step_id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The next command that moves the task on: run the plan if no task exists yet,
/// otherwise resume, answering "rerun" for every step a person is asked about.
fn next_command(data: &std::path::Path, plan: &std::path::Path) -> Command {
    let ids = task_ids(data);
    let mut cmd = rein(data);
    match ids.first() {
        None => {
            cmd.arg("run").arg(plan);
        }
        Some(id) => {
            cmd.args(["tasks", "resume", id, "--no-wait"]);
            for step in asked_steps(data, id) {
                cmd.args(["--rerun", &step]);
            }
        }
    }
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    cmd
}

#[test]
fn sigkill_at_random_points_loses_nothing_and_reruns_nothing_completed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let plan = write_plan(dir.path(), "plan.toml", &plan());
    let seed: u64 = std::env::var("REIN_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("crash test seed {seed} (set REIN_CRASH_SEED to replay)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);

    let mut kills = 0;
    for _ in 0..60 {
        if kills >= 30 {
            break;
        }
        if let Some(id) = task_ids(&data).first()
            && show(&data, id)["status"] == "completed"
        {
            break;
        }
        let mut child = next_command(&data, &plan).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(rng.random_range(3..50)));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        child.wait().unwrap();
    }
    // Let it finish, answering any question about interrupted steps with --rerun.
    for _ in 0..20 {
        let ids = task_ids(&data);
        if ids
            .first()
            .is_some_and(|id| show(&data, id)["status"] == "completed")
        {
            break;
        }
        next_command(&data, &plan).status().unwrap();
    }
    assert!(
        kills >= 10,
        "the run finished too fast to be killed often enough ({kills} kills)"
    );

    let ids = task_ids(&data);
    assert_eq!(ids.len(), 1, "exactly one task was created: {ids:?}");
    let id = TaskId::parse(&ids[0]).unwrap();
    let state = show(&data, id.as_str());
    assert_eq!(
        state["status"], "completed",
        "after {kills} kills: {state:#}"
    );

    // The log, read straight from the SQLite file.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rein_store::SqliteStore::open(&data.join("rein.db")).unwrap();
    let (events, stored) = rt.block_on(async {
        let events = store.events(&id, 0, usize::MAX).await.unwrap();
        let stored = store.load_summary(&id).await.unwrap().unwrap();
        (events, stored)
    });
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1, "the log has no gaps");
    }
    let folded = rein_core::fold::fold(&events).unwrap();
    assert_eq!(
        folded.head.summary(),
        stored,
        "the stored state row equals the fold of the stored log"
    );
    assert_eq!(
        serde_json::to_value(&folded).unwrap(),
        state,
        "`rein tasks show` prints the fold of the log"
    );

    let step_of: HashMap<_, _> = events
        .iter()
        .filter_map(|e| match &e.change {
            TaskChange::CheckpointCreated { checkpoint } => {
                Some((checkpoint.id.clone(), checkpoint.step_id.clone()?))
            }
            _ => None,
        })
        .collect();
    let mut completed_at: HashMap<String, u64> = HashMap::new();
    let mut entered: Vec<(String, u64)> = Vec::new();
    for HarnessEvent { seq, change, .. } in &events {
        match change {
            TaskChange::CheckpointPassed { checkpoint_id, .. } => {
                if let Some(step) = step_of.get(checkpoint_id) {
                    let again = completed_at.insert(step.clone(), *seq);
                    assert!(again.is_none(), "step {step} completed twice");
                }
            }
            TaskChange::CheckpointEntered { checkpoint_id } => {
                if let Some(step) = step_of.get(checkpoint_id) {
                    entered.push((step.clone(), *seq));
                }
            }
            _ => {}
        }
    }
    assert_eq!(
        completed_at.len(),
        LAYERS * WIDTH,
        "every step completed exactly once"
    );
    for (step, seq) in &entered {
        assert!(
            *seq < completed_at[step],
            "step {step} was started again after it completed"
        );
    }
    // Every step really ran, and ran no more often than it was started.
    let ran = std::fs::read_to_string(
        std::path::Path::new(stored.workspace_path.as_deref().unwrap()).join("ran.log"),
    )
    .unwrap();
    let mut runs: HashMap<&str, usize> = HashMap::new();
    for line in ran.lines() {
        *runs.entry(line).or_default() += 1;
    }
    for step in completed_at.keys() {
        let starts = entered.iter().filter(|(s, _)| s == step).count();
        let n = runs.get(step.as_str()).copied().unwrap_or(0);
        assert!(
            n >= 1 && n <= starts,
            "step {step} ran {n} times for {starts} starts"
        );
    }
    // Every question about a step that may have partly run was answered, and recorded.
    let ledger = rein_core::Engine::new(
        std::sync::Arc::new(store),
        std::sync::Arc::new(rein_core::CommandExecutor::unsandboxed()),
        rein_core::EngineConfig::new(dir.path().join("ws")),
    );
    let (decisions, breaks) = rt.block_on(ledger.verify_ledger()).unwrap();
    assert!(breaks.is_empty(), "{breaks:?}");
    assert!(
        asked_steps(&data, id.as_str()).is_empty(),
        "no question left pending"
    );
    eprintln!(
        "{kills} kills, {} events, {} attempts for {} steps, {decisions} decisions on interrupted steps",
        events.len(),
        entered.len(),
        completed_at.len()
    );
}
