//! Crash safety, for real: `rein` is killed with SIGKILL at random moments while it
//! runs a plan of 200 steps, then resumed, many times over. Afterwards the task must
//! be complete, every step completed exactly once in the log, no completed step run
//! again, and the stored state equal to the fold of the stored log.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use crate::common;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{rein, show, task_ids, write_plan};
use rand::{Rng, SeedableRng};
use rein_core::TaskStore;
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
    let (dir, data, plan) = common::with_plan("plan.toml", &plan());
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

/// Six steps that each write 20 marks, 10 ms apart, naming the step, a fresh id
/// of the attempt and the time: from the marks, when each attempt ran.
fn marking_plan() -> String {
    let mut text = String::from("description = \"overlap test\"\nmax_parallel = 3\n");
    for i in 0..6 {
        let deps = if i >= 3 {
            format!("depends_on = [\"m{}\"]\n", i - 3)
        } else {
            String::new()
        };
        text.push_str(&format!(
            "[[steps]]\nid = \"m{i}\"\nidempotent = true\n{deps}\
             run = '''a=$(cat /proc/sys/kernel/random/uuid); i=0; while [ $i -lt 20 ]; do echo \"$REIN_STEP_ID $a $(date +%s%N)\" >> marks.log; i=$((i+1)); sleep 0.01; done'''\n"
        ));
    }
    text
}

/// Waits until process `pid` has a child process (it launched a step), polling
/// every 200 µs; false if none came within `timeout`.
fn wait_for_launch(pid: u32, timeout: Duration) -> bool {
    let until = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < until {
        let launched = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|t| {
                std::fs::read_to_string(t.path().join("children"))
                    .is_ok_and(|c| !c.trim().is_empty())
            });
        if launched {
            return true;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    false
}

/// The task's marks file, once the task exists.
fn marks_file(data: &std::path::Path) -> Option<std::path::PathBuf> {
    let id = task_ids(data).first().cloned()?;
    let state = show(data, &id);
    let ws = state["resources"]["workspace_path"].as_str()?;
    Some(std::path::Path::new(ws).join("marks.log"))
}

fn len_of(marks: Option<&std::path::PathBuf>) -> u64 {
    marks
        .and_then(|m| std::fs::metadata(m).ok())
        .map_or(0, |m| m.len())
}

/// Waits until the marks file has grown past `from` bytes (a step is
/// running), polling every millisecond; gives up after `timeout`.
fn wait_for_marks(
    data: &std::path::Path,
    marks: &mut Option<std::path::PathBuf>,
    from: u64,
    timeout: Duration,
) {
    let until = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < until {
        if marks.is_none() {
            *marks = marks_file(data);
        }
        if len_of(marks.as_ref()) > from {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Kills rein at random moments — the first milliseconds after it launched
/// steps included — under `sandbox`, resuming each time, and checks from the
/// marks the steps wrote that no two attempts of one step ever ran at once.
fn no_attempt_outlives_a_killed_rein(sandbox: &str) {
    let (_dir, data, plan) = common::with_plan("plan.toml", &marking_plan());
    let seed: u64 = std::env::var("REIN_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261201);
    eprintln!("{sandbox}: seed {seed} (set REIN_CRASH_SEED to replay)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let command = |data: &std::path::Path| {
        let mut cmd = next_command(data, &plan);
        cmd.args(["--sandbox", sandbox]);
        cmd
    };
    let mut kills = 0;
    let mut marks = None;
    for round in 0..24 {
        if let Some(id) = task_ids(&data).first()
            && show(&data, id)["status"] == "completed"
        {
            break;
        }
        let marked = len_of(marks.as_ref());
        let mut child = command(&data).spawn().unwrap();
        if round % 2 == 0 {
            // Right after it launched a step: the first few milliseconds, where
            // the step's process is not yet the command (or the sandbox).
            wait_for_launch(child.id(), Duration::from_secs(5));
            std::thread::sleep(Duration::from_micros(rng.random_range(0..2_000)));
        } else {
            // Anywhere in the 120 ms after its steps began to write (on a
            // loaded machine rein can take longer than that to get there).
            wait_for_marks(&data, &mut marks, marked, Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(rng.random_range(0..120)));
        }
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        child.wait().unwrap();
    }
    for _ in 0..10 {
        if task_ids(&data)
            .first()
            .is_some_and(|id| show(&data, id)["status"] == "completed")
        {
            break;
        }
        command(&data).status().unwrap();
    }
    let id = task_ids(&data)[0].clone();
    let state = show(&data, &id);
    assert_eq!(state["status"], "completed", "{sandbox}: {state:#}");
    // Whatever a killed attempt left would write on after this point.
    std::thread::sleep(Duration::from_millis(300));
    let marks = std::fs::read_to_string(
        std::path::Path::new(state["resources"]["workspace_path"].as_str().unwrap())
            .join("marks.log"),
    )
    .unwrap();
    // (step, attempt) → (first mark, last mark, marks).
    let mut spans: HashMap<(String, String), (u128, u128, usize)> = HashMap::new();
    for line in marks.lines() {
        let mut parts = line.split(' ');
        let (Some(step), Some(attempt), Some(at)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let Ok(at) = at.parse::<u128>() else {
            continue;
        };
        let span = spans
            .entry((step.to_owned(), attempt.to_owned()))
            .or_insert((at, at, 0));
        span.0 = span.0.min(at);
        span.1 = span.1.max(at);
        span.2 += 1;
    }
    let mut overlaps = Vec::new();
    for (a, (a0, a1, _)) in &spans {
        for (b, (b0, b1, _)) in &spans {
            if a.0 == b.0 && a.1 < b.1 && a0 <= b1 && b0 <= a1 {
                overlaps.push(format!("{} attempts {} and {}", a.0, a.1, b.1));
            }
        }
    }
    let cut = spans.values().filter(|(_, _, n)| *n < 20).count();
    eprintln!(
        "{sandbox}: {kills} kills, {} attempts, {cut} cut short, {} overlapping",
        spans.len(),
        overlaps.len()
    );
    assert!(
        overlaps.is_empty(),
        "{sandbox}: attempts overlapped: {overlaps:?}"
    );
    assert!(kills >= 12, "{sandbox}: only {kills} kills landed");
    assert!(
        cut >= 2,
        "{sandbox}: only {cut} attempts were cut short by a kill: the test proved little"
    );
}

#[test]
fn no_attempt_outlives_a_killed_rein_under_bubblewrap() {
    no_attempt_outlives_a_killed_rein("bubblewrap");
}

#[test]
fn no_attempt_outlives_a_killed_rein_under_landlock() {
    no_attempt_outlives_a_killed_rein("landlock");
}

#[test]
fn no_attempt_outlives_a_killed_rein_unsandboxed() {
    no_attempt_outlives_a_killed_rein("none");
}

/// Whether `pid` runs (a zombie does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, after)| after.split_whitespace().next() != Some("Z"))
    })
}

/// A server taking tasks over at start stops what their interrupted attempts
/// left before it runs them again. A step's supervisor takes its processes
/// with rein; killed together with rein (the OOM killer taking both, say), it
/// cannot, and a background process of the step outlives them both: the one
/// look at the processes the server takes at start finds it by its marks.
#[test]
fn a_server_taking_over_stops_what_an_interrupted_attempt_left_running() {
    let (dir, data) = common::scratch();
    let left = dir.path().join("left.pid");
    let script = format!(
        "if [ \"$REIN_ATTEMPT\" = 1 ]; then sleep 300 & echo $! > {}; wait; fi",
        left.display()
    );
    let plan = write_plan(
        dir.path(),
        "plan.toml",
        &format!(
            "description = \"leaves a process\"\n[[steps]]\nid = \"leaves\"\nidempotent = true\nrun = {}\n",
            serde_json::to_string(&script).unwrap()
        ),
    );
    let mut first = common::spawn_quiet(rein(&data).args(["--sandbox", "none", "run"]).arg(&plan));
    let pid: u32 = common::eventually("the step to start its background process", || {
        std::fs::read_to_string(&left).ok()?.trim().parse().ok()
    });
    // rein and the step's supervisor killed together (the OOM killer taking
    // both, say): nothing is left to take the step's background process
    // with them.
    let supervisor: i32 =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", first.id()))
            .ok()
            .and_then(|c| c.split_whitespace().next()?.parse().ok())
            .or_else(|| {
                std::fs::read_dir(format!("/proc/{}/task", first.id()))
                    .ok()?
                    .flatten()
                    .find_map(|t| {
                        std::fs::read_to_string(t.path().join("children"))
                            .ok()?
                            .split_whitespace()
                            .next()?
                            .parse()
                            .ok()
                    })
            })
            .expect("the step's supervisor");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(supervisor),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    common::kill9(&mut first);
    assert!(
        running(pid),
        "the background process outlives rein and its supervisor"
    );

    let mut serve = rein(&data)
        .args(["--sandbox", "none", "serve", "--listen", "127.0.0.1:0"])
        .env("REIN_TOKEN", "takeover-token-0123")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _addr = common::listening(&mut serve);
    let server = common::Server(serve);
    let id = task_ids(&data)[0].clone();
    common::eventually("the task to complete on the server", || {
        (show(&data, &id)["status"] == "completed").then_some(())
    });
    drop(server);
    assert!(!running(pid), "the leftover {pid} was stopped");
    let events = rein(&data).args(["tasks", "events", &id]).output().unwrap();
    let events = String::from_utf8_lossy(&events.stdout);
    assert!(
        events.contains(
            "1 process(es) of the interrupted attempt were still running and were stopped first"
        ),
        "{events}"
    );
}

/// Processes burning a CPU each, for as long as this lives: a busy machine.
struct Busy(Vec<std::process::Child>);

impl Busy {
    fn cpus(n: usize) -> Busy {
        Busy(
            (0..n)
                .map(|_| {
                    Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .spawn()
                        .unwrap()
                })
                .collect(),
        )
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The live processes whose environment or command line carries `token`
/// (every process of a step carries its `env`; bubblewrap and the trampoline
/// carry it in their arguments), with their names.
fn carrying(token: &str) -> Vec<(u32, String)> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me && running(pid))
        .filter(|pid| {
            ["environ", "cmdline"].iter().any(|file| {
                std::fs::read(format!("/proc/{pid}/{file}"))
                    .is_ok_and(|bytes| bytes.windows(token.len()).any(|w| w == token.as_bytes()))
            })
        })
        .map(|pid| {
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            (pid, name.trim().to_owned())
        })
        .collect()
}

/// Kills `rein run` 20 times while it launches steps that spread (a
/// compound command's child, a background job, a daemon that left the
/// session), under `sandbox`, with three CPU-bound processes beside it: 0.5
/// s after each kill no process of any step is left, bubblewrap's included.
fn no_step_process_outlives_a_killed_rein(sandbox: &str) {
    let dir = tempfile::tempdir().unwrap();
    let seed: u64 = std::env::var("REIN_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261204);
    eprintln!("{sandbox}: seed {seed} (set REIN_CRASH_SEED to replay)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut kills = 0;
    let mut spread = 0;
    for round in 0..20 {
        let token = format!("rein-tree-{}-{sandbox}-{round}", std::process::id());
        let mut text = String::from("description = \"spread\"\nmax_parallel = 3\n");
        for i in 0..3 {
            text.push_str(&format!(
                "[[steps]]\nid = \"s{i}\"\nenv = {{ TREE = \"{token}\" }}\n\
                 run = 'setsid sleep 60 & (sleep 60; echo late) & sleep 0.05; touch spread{i}; sleep 3; echo done >> f'\n"
            ));
        }
        let plan = write_plan(dir.path(), &format!("plan{round}.toml"), &text);
        let data = dir.path().join(format!("data{round}"));
        let mut child =
            common::spawn_quiet(rein(&data).args(["--sandbox", sandbox, "run"]).arg(&plan));
        if round % 2 == 0 {
            // During the launches.
            wait_for_launch(child.id(), Duration::from_secs(10));
            std::thread::sleep(Duration::from_micros(rng.random_range(0..3_000)));
        } else {
            // Once the steps have spread.
            let until = std::time::Instant::now() + Duration::from_secs(10);
            while std::time::Instant::now() < until {
                let ws = task_ids(&data).first().map(|id| {
                    std::path::PathBuf::from(
                        show(&data, id)["resources"]["workspace_path"]
                            .as_str()
                            .unwrap_or_default(),
                    )
                });
                if ws.is_some_and(|ws| ws.join("spread0").exists()) {
                    spread += 1;
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let left = carrying(&token);
        assert!(
            left.is_empty(),
            "{sandbox}: round {round}: 0.5 s after the kill, still there: {left:?}"
        );
    }
    eprintln!("{sandbox}: {kills} kills, {spread} after the steps spread");
    assert_eq!(kills, 20, "{sandbox}: every round killed rein mid-run");
    assert!(
        spread >= 8,
        "{sandbox}: only {spread} kills came after the steps spread"
    );
}

/// One sandbox after another, beside the same three busy processes.
#[test]
fn no_step_process_outlives_a_killed_rein_under_any_sandbox_on_a_busy_machine() {
    let _busy = Busy::cpus(3);
    for sandbox in ["bubblewrap", "landlock", "none"] {
        no_step_process_outlives_a_killed_rein(sandbox);
    }
}

/// Committed writes live in the store's write-ahead log (`rein.db-wal`) until
/// SQLite copies them into `rein.db`. A server killed with a task created and
/// its approval answered leaves them there; deleting the log then takes them
/// away, and SQLite opens what is left as a whole store. rein finds it at
/// open (stderr), in `rein health` (unhealthy, exit 1) and in `rein ledger
/// verify` (the answered approval's entry is gone), until acknowledged —
/// and the ledger keeps saying so after. The same store with its log kept
/// says nothing: no false alarm after a crash.
#[test]
fn a_deleted_write_ahead_log_is_found_at_open_in_health_and_by_ledger_verify() {
    const TOKEN: &str = "wal-operator-token-0123";
    let (dir, data) = common::scratch();
    let (mut server, addr) = common::start(&data, TOKEN);
    let plan = "description = \"ask first\"\n\n[[steps]]\nid = \"ask\"\nkind = \"approve\"\ntitle = \"go?\"\n";
    let (status, body) = common::http(
        &addr,
        "POST",
        "/admin/tasks",
        Some(TOKEN),
        Some(("application/toml", plan)),
    );
    assert!(status == 201 || status == 202, "{status} {body}");
    let task = serde_json::from_str::<serde_json::Value>(&body).unwrap()["task"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let approval = common::eventually("the approval request", || {
        let (_, body) = common::http(
            &addr,
            "GET",
            "/admin/approvals?status=pending",
            Some(TOKEN),
            None,
        );
        let list: serde_json::Value = serde_json::from_str(&body).ok()?;
        list["items"][0]["id"].as_str().map(str::to_owned)
    });
    let (status, body) = common::http(
        &addr,
        "POST",
        &format!("/admin/approvals/{approval}/decision"),
        Some(TOKEN),
        Some(("application/json", r#"{"decision":"approve"}"#)),
    );
    assert_eq!(status, 200, "{body}");
    common::eventually("the task to complete", || {
        let (_, body) = common::http(
            &addr,
            "GET",
            &format!("/admin/tasks/{task}"),
            Some(TOKEN),
            None,
        );
        let shown: serde_json::Value = serde_json::from_str(&body).ok()?;
        (shown["task"]["status"] == "completed").then_some(())
    });
    common::kill9(&mut server.0);
    let wal = data.join("rein.db-wal");
    assert!(
        std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0),
        "the killed server left its commits in the write-ahead log"
    );
    // The same store, log kept: the control.
    let kept = dir.path().join("kept");
    std::fs::create_dir(&kept).unwrap();
    for name in ["rein.db", "rein.db-wal", "rein.db-shm", "rein.db-head"] {
        std::fs::copy(data.join(name), kept.join(name)).unwrap();
    }
    std::fs::remove_file(&wal).unwrap();
    let _ = std::fs::remove_file(data.join("rein.db-shm"));

    let health = rein(&data).arg("health").output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&health.stdout),
        String::from_utf8_lossy(&health.stderr),
    );
    assert_eq!(health.status.code(), Some(1), "{out}{err}");
    assert!(
        out.contains("task_store          unhealthy") && out.contains("lost committed writes"),
        "{out}"
    );
    assert!(
        err.contains("WARNING: the store lost committed writes"),
        "{err}"
    );
    // It is true: the task is gone.
    assert!(
        !task_ids(&data).contains(&task),
        "the task survived the lost log"
    );
    let verify = rein(&data).args(["ledger", "verify"]).output().unwrap();
    let said = String::from_utf8_lossy(&verify.stdout);
    assert_ne!(verify.status.code(), Some(0), "{said}");
    assert!(said.contains("were lost with committed writes"), "{said}");

    let ack = rein(&data)
        .args(["health", "--acknowledge-lost-writes"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&ack.stdout);
    assert_eq!(ack.status.code(), Some(0), "{said}");
    assert!(said.contains("acknowledged 1 loss"), "{said}");
    let health = common::exits(rein(&data).arg("health"), 0);
    assert!(!String::from_utf8_lossy(&health.stderr).contains("WARNING"));
    // The ledger's entries are still gone, and it still says so.
    let verify = rein(&data).args(["ledger", "verify"]).output().unwrap();
    assert_ne!(verify.status.code(), Some(0));

    // The control: nothing lost, nothing said.
    let health = rein(&kept).arg("health").output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&health.stdout),
        String::from_utf8_lossy(&health.stderr),
    );
    assert_eq!(health.status.code(), Some(0), "{out}{err}");
    assert!(
        !err.contains("WARNING") && !out.contains("lost"),
        "{out}{err}"
    );
    assert!(task_ids(&kept).contains(&task));
    common::exits(rein(&kept).args(["ledger", "verify"]), 0);
}
