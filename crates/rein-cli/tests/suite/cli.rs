//! The `rein` binary end to end: exit codes, `--json` shapes, errors that name the
//! problem, and steering a run from another process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use crate::common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{
    eventually, in_workspace, json, rein, run_ok, show, step_status, task_ids, until_exists,
    write_plan,
};

fn example_plan() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/release-notes.toml")
}

/// Waits until `check` holds, polling the store the way a user would.
fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    eventually(what, || check().then_some(()));
}

/// Starts `rein run PLAN` and returns it, with its task id, once `step` is running.
fn run_until_running(data: &Path, plan: &Path, step: &str) -> (std::process::Child, String) {
    run_until_running_to(data, plan, step, Stdio::null())
}

fn run_until_running_to(
    data: &Path,
    plan: &Path,
    step: &str,
    stdout: Stdio,
) -> (std::process::Child, String) {
    let child = rein(data)
        .arg("run")
        .arg(plan)
        .stdout(stdout)
        .spawn()
        .unwrap();
    let mut id = String::new();
    wait_until(&format!("step {step} runs"), || {
        let Some(newest) = task_ids(data).first().cloned() else {
            return false;
        };
        id = newest;
        step_status(&show(data, &id), step).as_deref() == Some("in_progress")
    });
    (child, id)
}

#[test]
fn the_example_runs_through_all_five_control_points() {
    let data = tempfile::tempdir().unwrap();
    let out = run_ok(rein(data.path()).arg("run").arg(example_plan()));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("completed: 6 steps"), "{text}");
    // A plan's CP2 checks the plan: no model is asked for steps.
    let progress = format!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(progress.contains("started "), "{progress}");
    assert!(!progress.contains("planning the goal"), "{progress}");

    let ids = task_ids(data.path());
    assert_eq!(ids.len(), 1);
    let list = json(&run_ok(rein(data.path()).args(["tasks", "list", "--json"])))["items"].clone();
    let task = &list[0];
    for field in ["id", "status", "description", "created_at"] {
        assert!(
            !task[field].is_null(),
            "tasks list --json items carry {field}"
        );
    }
    assert_eq!(task["status"], "completed");

    let state = show(data.path(), &ids[0]);
    let checkpoints = state["checkpoints"].as_array().unwrap();
    for cp in checkpoints {
        for field in ["id", "type", "status"] {
            assert!(!cp[field].is_null(), "checkpoint carries {field}: {cp}");
        }
        assert!(
            cp.get("step_id").is_some(),
            "step_id is always there, null or not: {cp}"
        );
        assert_eq!(cp["status"], "completed");
    }
    let types: Vec<&str> = checkpoints
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    for t in [
        "task_start",
        "task_plan",
        "task_exec",
        "build_pass",
        "test_pass",
        "task_review",
        "task_complete",
    ] {
        assert!(types.contains(&t), "missing {t} in {types:?}");
    }
    let draft = checkpoints
        .iter()
        .find(|c| c["step_id"] == "draft")
        .unwrap();
    assert_eq!(draft["output"]["exit_code"], 0);
    assert!(draft["duration_ms"].is_u64());
    let review = checkpoints
        .iter()
        .find(|c| c["step_id"] == "review")
        .unwrap();
    assert!(
        review["output"]["stdout_tail"]
            .as_str()
            .unwrap()
            .contains("* crash-safe resume")
    );
}

#[test]
fn exit_codes_tell_completed_failed_and_invalid_apart() {
    let (dir, data) = common::scratch();
    let failing = write_plan(
        dir.path(),
        "fail.toml",
        "description='f'\n[[steps]]\nid='a'\nrun='echo disk full >&2; exit 4'\n",
    );
    let out = common::exits(rein(&data).arg("run").arg(&failing), 1);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("failed: step `a` failed: command exited with status 4"),
        "{stdout}"
    );
    assert!(
        stdout.contains("    | disk full"),
        "the failure shows what the step said: {stdout}"
    );

    let cycle = write_plan(
        dir.path(),
        "cycle.toml",
        "description='c'\n[[steps]]\nid='a'\nrun='true'\ndepends_on=['b']\n[[steps]]\nid='b'\nrun='true'\ndepends_on=['a']\n[[steps]]\nid='c'\nrun='true'\ndepends_on=['ghost']\n",
    );
    let stderr = common::fails(rein(&data).arg("run").arg(&cycle), 2);
    assert!(stderr.contains("`c` depends on `ghost`"), "{stderr}");

    let unknown = write_plan(
        dir.path(),
        "unknown.toml",
        "description='u'\n[[steps]]\nid='a'\nrun='true'\nretry=2\ndepend_on=['b']\n",
    );
    let stderr = common::fails(rein(&data).arg("run").arg(&unknown), 2);
    // Both unknown keys at once, each where it is; the misspelt one with the
    // key meant.
    assert!(
        stderr.contains("steps[0] (`a`): unknown key `retry` (`rein plan schema`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("steps[0] (`a`): unknown key `depend_on`; did you mean `depends_on`?"),
        "{stderr}"
    );

    let stderr = common::fails(rein(&data).args(["run", "/no/such/plan.toml"]), 1);
    assert!(stderr.contains("/no/such/plan.toml"), "{stderr}");
    assert_eq!(
        stderr.matches("No such file").count(),
        1,
        "the cause is said once: {stderr}"
    );

    let said = common::fails(rein(&data).args(["tasks", "show", "not-an-id"]), 2);
    assert!(said.contains("`not-an-id` is not a valid id"));
    // A malformed id given to a flag names the flag.
    for listing in [
        ["usage"].as_slice(),
        &["approvals", "list"],
        &["sessions", "list"],
    ] {
        let said = common::fails(rein(&data).args(listing).args(["--task", "nope"]), 2);
        assert!(
            said.contains("--task: `nope` is not a valid id: expected `task_`"),
            "{listing:?}: {said}"
        );
    }

    let said = common::fails(
        rein(&data).args(["tasks", "show", "task_01ARZ3NDEKTSV4RRFFQ69G5FAV"]),
        1,
    );
    assert!(said.contains("not found"));

    let said = common::fails(
        rein(&data).args(["tasks", "list", "--status", "sleeping"]),
        2,
    );
    assert!(said.contains("unknown status `sleeping`"));

    let said = common::fails(
        rein(&data).args(["tasks", "resume", "--all", "--rerun", "x"]),
        2,
    );
    assert!(said.contains("give its id instead of --all"));

    let out = rein(&data).args(["tasks", "frobnicate"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "clap usage errors are 2 as well"
    );
}

#[test]
fn plan_check_validates_without_running() {
    let (_dir, data) = common::scratch();
    let out = run_ok(
        rein(&data)
            .args(["plan", "check"])
            .arg(example_plan())
            .arg("--json"),
    );
    let plan = json(&out);
    assert_eq!(plan["steps"].as_array().unwrap().len(), 6);
    assert_eq!(
        plan["steps"][0]["blocking_steps"],
        serde_json::json!(["count", "draft"])
    );
    assert!(!data.exists(), "checking a plan touches no store");
}

#[test]
fn a_run_paused_and_aborted_from_another_process() {
    let (dir, data, plan) = common::with_plan(
        "slow.toml",
        &format!(
            "description='slow'\n[[steps]]\nid='wait'\nrun='{}'\n[[steps]]\nid='after'\nrun='true'\ndepends_on=['wait']\n",
            until_exists(Path::new("go"))
        ),
    );
    let (mut runner, id) = run_until_running(&data, &plan, "wait");
    let go = in_workspace(&data, &id, "go");
    let out = run_ok(rein(&data).args(["tasks", "pause", &id]));
    assert!(String::from_utf8_lossy(&out.stdout).contains("pause requested"));
    // The runner has the request once it took it from the store; then the step ends.
    let db = rusqlite::Connection::open(data.join("rein.db")).unwrap();
    wait_until("the runner takes the pause request", || {
        db.query_row("SELECT count(*) FROM controls", [], |r| r.get::<_, i64>(0))
            .unwrap()
            == 0
    });
    std::fs::write(&go, "").unwrap();
    let status = runner.wait().unwrap();
    assert_eq!(status.code(), Some(3), "a paused run exits 3");
    let state = show(&data, &id);
    assert_eq!(state["status"], "paused");
    assert_eq!(step_status(&state, "wait").as_deref(), Some("completed"));
    assert_eq!(step_status(&state, "after"), None);

    let out = rein(&data).args(["tasks", "resume", &id]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "the resumed run completes");
    assert_eq!(show(&data, &id)["status"], "completed");

    let long = write_plan(
        dir.path(),
        "long.toml",
        "description='long'\n[[steps]]\nid='forever'\nrun='sleep 60'\n",
    );
    let (mut runner, long_id) = run_until_running(&data, &long, "forever");
    // A running task cannot be deleted.
    let said = common::fails(rein(&data).args(["tasks", "delete", &long_id]), 1);
    assert!(said.contains("abort it first"));
    let follower = rein(&data)
        .args(["tasks", "follow", &long_id])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    // Attributed to the person who ran it ($USER here).
    run_ok(rein(&data).env("USER", "ana").args([
        "tasks",
        "abort",
        &long_id,
        "--reason",
        "changed my mind",
    ]));
    assert_eq!(
        runner.wait().unwrap().code(),
        Some(1),
        "a cancelled run exits 1"
    );
    let followed = follower.wait_with_output().unwrap();
    assert_eq!(
        followed.status.code(),
        Some(1),
        "follow exits 1 for a cancelled task"
    );
    let text = String::from_utf8_lossy(&followed.stdout);
    assert!(
        text.lines()
            .last()
            .unwrap()
            .contains("task cancelled by ana: changed my mind"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    let state = show(&data, &long_id);
    assert_eq!(state["status"], "cancelled");
    assert!(state["error"].as_str().unwrap().contains("changed my mind"));
    run_ok(rein(&data).args(["tasks", "delete", &long_id]));
    assert!(!task_ids(&data).contains(&long_id));
}

#[test]
fn a_killed_run_is_resumed_by_resume_all_and_follow_sees_it_finish() {
    let (_dir, data, plan) = common::with_plan(
        "p.toml",
        "description='k'\n[[steps]]\nid='one'\nrun='echo one >> log'\nidempotent=true\n[[steps]]\nid='two'\nrun='sleep 60'\nidempotent=false\ndepends_on=['one']\n[[steps]]\nid='three'\nrun='echo three >> log'\ndepends_on=['two']\n",
    );
    let (mut runner, id) = run_until_running(&data, &plan, "two");
    runner.kill().unwrap();
    runner.wait().unwrap();

    // `two` is not idempotent: resume asks a person, naming it, and exits 3.
    common::exits(
        rein(&data).args(["tasks", "resume", "--all", "--no-wait"]),
        3,
    );
    let state = show(&data, &id);
    assert_eq!(state["status"], "paused");
    let reason = state["context"]["blocked_reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("rein tasks resume {id} --rerun two")),
        "{reason}"
    );

    let out = common::exits(
        rein(&data).args(["tasks", "resume", &id, "--skip", "two", "--json"]),
        0,
    );
    assert_eq!(json(&out)["status"], "completed");
    let followed = rein(&data)
        .args(["tasks", "follow", &id, "--json"])
        .output()
        .unwrap();
    assert_eq!(
        followed.status.code(),
        Some(0),
        "follow exits 0 when the task completes"
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&followed.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.last().unwrap()["type"], "task_completed");
    let seqs: Vec<u64> = lines.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "follow shows every event once, in order"
    );
    let log = std::fs::read_to_string(
        Path::new(
            show(&data, &id)["resources"]["workspace_path"]
                .as_str()
                .unwrap(),
        )
        .join("log"),
    )
    .unwrap();
    assert_eq!(log, "one\nthree\n", "the completed step did not run again");

    let out = run_ok(rein(&data).args(["tasks", "resume", "--all"]));
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing to resume"));
}

#[test]
fn a_tasks_history_lists_its_points_as_text_and_json() {
    let (_dir, data) = common::scratch();
    run_ok(rein(&data).arg("run").arg(example_plan()).arg("--quiet"));
    let id = task_ids(&data)[0].clone();
    let history = json(&run_ok(
        rein(&data).args(["tasks", "history", &id, "--json"]),
    ));
    assert_eq!(history["task_id"], id.as_str());
    let points = history["points"].as_array().unwrap();
    assert_eq!(points[0]["kind"], "task_created");
    assert_eq!(points.last().unwrap()["description"], "completed");
    let events = json(&run_ok(
        rein(&data).args(["tasks", "events", &id, "--json"]),
    ));
    let events = events.as_array().unwrap();
    assert_eq!(history["last_seq"], events.len());
    // Every step of the plan started once and finished once, in order.
    for p in points {
        let seq = p["seq"].as_u64().unwrap() as usize;
        assert_eq!(p["at"], events[seq - 1]["timestamp"], "{p}");
    }
    let started = points
        .iter()
        .filter(|p| p["kind"] == "step_started")
        .count();
    let finished = points
        .iter()
        .filter(|p| p["kind"] == "step_finished")
        .count();
    assert!(started > 0 && started == finished, "{points:?}");
    let table =
        String::from_utf8(run_ok(rein(&data).args(["tasks", "history", &id])).stdout).unwrap();
    assert!(table.lines().count() == points.len() + 2, "{table}");
    assert!(
        table.ends_with(&format!(
            "task {id} is completed at event {}\n",
            events.len()
        )),
        "{table}"
    );

    let said = common::fails(
        rein(&data).args(["tasks", "history", "task_01ARZ3NDEKTSV4RRFFQ69G5FAV"]),
        1,
    );
    assert!(
        said.contains("task task_01ARZ3NDEKTSV4RRFFQ69G5FAV not found"),
        "{said}"
    );
}

#[test]
fn snapshot_and_restore_from_the_command_line() {
    let (_dir, data) = common::scratch();
    run_ok(rein(&data).arg("run").arg(example_plan()).arg("--quiet"));
    let id = task_ids(&data)[0].clone();
    let snap = json(&run_ok(
        rein(&data).args(["tasks", "snapshot", &id, "--json"]),
    ));
    let snap_id = snap["id"].as_str().unwrap();
    assert!(snap_id.starts_with("snap_"));
    let listed = json(&run_ok(rein(&data).args([
        "tasks",
        "snapshots",
        &id,
        "--json",
    ])));
    assert_eq!(listed[0]["id"], snap_id);
    let restored = json(&run_ok(
        rein(&data).args(["tasks", "restore", snap_id, "--json"]),
    ));
    assert_ne!(restored["id"], id.as_str());
    assert_eq!(restored["status"], "completed");
    assert_eq!(restored["context"]["task_history"], serde_json::json!([id]));
    assert_eq!(task_ids(&data).len(), 2);
    let events = json(&run_ok(rein(&data).args([
        "tasks",
        "events",
        restored["id"].as_str().unwrap(),
        "--json",
    ])));
    assert_eq!(events[0]["type"], "task_restored");
    let said = common::fails(
        rein(&data).args(["tasks", "restore", "snap_01ARZ3NDEKTSV4RRFFQ69G5FAV"]),
        1,
    );
    assert!(said.contains("snapshot snap_01ARZ3NDEKTSV4RRFFQ69G5FAV not found"));
}

#[test]
fn list_filters_and_pages() {
    let (dir, data) = common::scratch();
    let ok = write_plan(
        dir.path(),
        "ok.toml",
        "description='ok'\n[[steps]]\nid='a'\nrun='true'\n",
    );
    for session in ["x", "y", "x"] {
        run_ok(
            rein(&data)
                .arg("run")
                .arg(&ok)
                .args(["--session", session, "--quiet"]),
        );
    }
    let x = json(&run_ok(rein(&data).args([
        "tasks",
        "list",
        "--session",
        "x",
        "--json",
    ])))["items"]
        .clone();
    assert_eq!(x.as_array().unwrap().len(), 2);
    // The next page's cursor is in the JSON, as the API pages; the last
    // page's is null.
    let page = json(&run_ok(
        rein(&data).args(["tasks", "list", "--limit", "2", "--json"]),
    ));
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    let rest = json(&run_ok(rein(&data).args([
        "tasks", "list", "--limit", "2", "--json", "--cursor", &cursor,
    ])));
    assert_eq!(rest["items"].as_array().unwrap().len(), 1);
    assert!(rest["next_cursor"].is_null(), "{rest}");
    let recent = json(&run_ok(
        rein(&data).args(["tasks", "list", "--since", "1h", "--json"]),
    ))["items"]
        .clone();
    assert_eq!(recent.as_array().unwrap().len(), 3);
    let none = json(&run_ok(rein(&data).args([
        "tasks",
        "list",
        "--until",
        "2000-01-01T00:00:00Z",
        "--json",
    ])))["items"]
        .clone();
    assert!(none.as_array().unwrap().is_empty());
}

#[test]
fn a_run_whose_reader_goes_away_still_completes() {
    let (_dir, data, plan) = common::with_plan(
        "p.toml",
        "description='pipe'\n[[steps]]\nid='a'\nrun='sleep 0.2'\n[[steps]]\nid='b'\nrun='true'\ndepends_on=['a']\n",
    );
    let mut child = rein(&data)
        .arg("run")
        .arg(&plan)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // like `rein run plan.toml | head -1` after one line
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "no panic on a closed pipe");
    assert_eq!(show(&data, &task_ids(&data)[0])["status"], "completed");
}

fn signal(child: &std::process::Child, sig: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, sig).unwrap();
}

/// Starts `rein run` on a plan whose step `first` runs `first_run` before `second`,
/// and returns once `first` is running.
fn run_until_first_step_runs(
    data: &Path,
    dir: &Path,
    first_run: &str,
) -> (std::process::Child, String) {
    let plan = write_plan(
        dir,
        "signals.toml",
        &format!(
            "description='signals'\n[[steps]]\nid='first'\nrun='{first_run}'\n[[steps]]\nid='second'\nrun='true'\ndepends_on=['first']\n"
        ),
    );
    run_until_running(data, &plan, "first")
}

#[test]
fn ctrl_c_pauses_once_running_steps_finish() {
    use std::io::BufRead;
    let (dir, data) = common::scratch();
    // The first step runs until the test lets it finish, so the interrupt always
    // lands while it runs.
    let plan = write_plan(
        dir.path(),
        "signals.toml",
        &format!(
            "description='signals'\n[[steps]]\nid='first'\nrun='{}'\n[[steps]]\nid='second'\nrun='true'\ndepends_on=['first']\n",
            until_exists(Path::new("go"))
        ),
    );
    let (mut child, id) = run_until_running_to(&data, &plan, "first", Stdio::piped());
    let go = in_workspace(&data, &id, "go");
    signal(&child, nix::sys::signal::Signal::SIGINT);
    // rein says it will pause once it has taken the interrupt; then the step ends.
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut lines = stdout.lines();
    assert!(
        lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.starts_with("interrupt: pausing once running steps finish")),
        "rein acknowledges the interrupt"
    );
    std::fs::write(&go, "").unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert_eq!(
        child.wait().unwrap().code(),
        Some(3),
        "a paused run exits 3; it said: {rest:?}"
    );
    let state = show(&data, &id);
    assert_eq!(state["status"], "paused");
    assert_eq!(
        step_status(&state, "first").as_deref(),
        Some("completed"),
        "the running step finished"
    );
    assert_eq!(step_status(&state, "second"), None, "nothing new started");
    common::exits(rein(&data).args(["tasks", "resume", &id]), 0);
}

#[test]
fn sigterm_stops_at_once_and_leaves_the_task_resumable() {
    let (dir, data) = common::scratch();
    let (mut child, id) = run_until_first_step_runs(&data, dir.path(), "sleep 60");
    let started = Instant::now();
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(
        child.wait().unwrap().code(),
        Some(3),
        "a stopped run exits 3"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the step was stopped, not waited for"
    );
    let state = show(&data, &id);
    assert_eq!(
        state["status"], "in_progress",
        "stopped as a crash would leave it"
    );
    assert_eq!(step_status(&state, "first").as_deref(), Some("in_progress"));
    // `first` is not idempotent: resuming asks what to do with it.
    let out = common::exits(rein(&data).args(["tasks", "resume", &id, "--no-wait"]), 3);
    assert!(String::from_utf8_lossy(&out.stdout).contains("--rerun first"));
}

#[test]
fn two_processes_resuming_one_task_at_once_cannot_both_run_it() {
    let (_dir, data, plan) = common::with_plan(
        "race.toml",
        &format!(
            "description='race'\n[[steps]]\nid='a'\nrun='{}; echo a >> ran'\nidempotent=true\n[[steps]]\nid='b'\nrun='echo b >> ran'\ndepends_on=['a']\nidempotent=true\n",
            until_exists(Path::new("go"))
        ),
    );
    let (mut first, id) = run_until_running(&data, &plan, "a");
    let go = in_workspace(&data, &id, "go");
    first.kill().unwrap();
    first.wait().unwrap();
    std::fs::write(&go, "").unwrap();
    let resumers: Vec<_> = (0..2)
        .map(|_| {
            rein(&data)
                .args(["tasks", "resume", &id])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outcomes: Vec<_> = resumers
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let winners = outcomes
        .iter()
        .filter(|o| o.status.code() == Some(0))
        .count();
    assert_eq!(winners, 1, "exactly one resume takes the task up");
    let loser = outcomes
        .iter()
        .find(|o| o.status.code() != Some(0))
        .unwrap();
    assert_eq!(loser.status.code(), Some(1));
    let said = String::from_utf8_lossy(&loser.stderr);
    assert!(
        said.contains("taken up by another process") || said.contains("is being run by process"),
        "{said}"
    );
    let state = show(&data, &id);
    assert_eq!(state["status"], "completed");
    let passed = state["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["step_id"] == "b" && c["status"] == "completed")
        .count();
    assert_eq!(passed, 1, "b completed exactly once");
}

#[test]
fn a_store_that_is_not_whole_is_refused_not_started_afresh() {
    let (dir, data) = common::scratch();
    run_ok(rein(&data).args(["tasks", "list"]));
    let db = data.join("rein.db");
    // Truncated to 0 bytes: every command says so; none makes a new store.
    std::fs::write(&db, b"").unwrap();
    for args in [&["tasks", "list"][..], &["ledger", "verify"]] {
        let out = rein(&data).args(args).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {said}");
        assert!(said.contains("is empty (0 bytes)"), "{args:?}: {said}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("intact"));
    }
    assert_eq!(std::fs::metadata(&db).unwrap().len(), 0);

    // A read-only data directory (a read-only mount of its own) is named as such.
    let fresh = dir.path().join("ro");
    run_ok(rein(&fresh).args(["tasks", "list"]));
    let script = format!(
        "mount --bind {d} {d} && mount -o remount,ro,bind {d} && exec {rein} --data-dir {d} tasks list",
        d = fresh.display(),
        rein = common::rein_bin().display()
    );
    let out = std::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c", &script])
        .env_remove("REIN_DATA_DIR")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("is read-only"), "{said}");
}

#[test]
fn resume_all_says_which_process_runs_what_it_leaves() {
    let (_dir, data, plan) = common::with_plan(
        "busy.toml",
        &format!(
            "description='busy'\n[[steps]]\nid='a'\nrun='{}'\n",
            until_exists(Path::new("go"))
        ),
    );
    let (mut running, id) = run_until_running(&data, &plan, "a");
    let out = run_ok(rein(&data).args(["tasks", "resume", "--all"]));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("nothing to resume"), "{said}");
    assert!(
        said.contains(&format!(
            "task {id} is being run by process {}",
            running.id()
        )),
        "{said}"
    );
    std::fs::write(in_workspace(&data, &id, "go"), "").unwrap();
    assert!(running.wait().unwrap().success());
}

/// `rein --version` names the build: the version, the commit it was built
/// from (this checkout's), and the build date.
#[test]
fn the_version_names_the_commit_and_the_build_date() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_ok(rein(dir.path()).arg("--version"));
    let said = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    assert!(
        said.starts_with(&format!(
            "rein {} (commit {head}, built ",
            env!("CARGO_PKG_VERSION")
        )),
        "{said}"
    );
    let date = said.rsplit("built ").next().unwrap().trim_end_matches(')');
    assert_eq!(date.len(), 10, "{said}");
    assert!(
        date.chars().enumerate().all(|(i, c)| if i == 4 || i == 7 {
            c == '-'
        } else {
            c.is_ascii_digit()
        }),
        "{said}"
    );
}

/// `rein completions SHELL` prints a script the shell loads, naming the
/// subcommands; `rein manpages DIR` writes a page per command, read by `man`.
#[test]
fn completions_and_man_pages_are_generated_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    for (shell, marker) in [
        ("bash", "_rein()"),
        ("zsh", "#compdef rein"),
        ("fish", "complete -c rein"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let out = run_ok(rein(dir.path()).args(["completions", shell]));
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(script.contains(marker), "{shell}: {script:.200}");
        assert!(script.contains("delegate"), "{shell}");
    }
    // bash itself takes the script.
    let out = run_ok(rein(dir.path()).args(["completions", "bash"]));
    let script = dir.path().join("rein.bash");
    std::fs::write(&script, &out.stdout).unwrap();
    let loaded = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("source {} && complete -p rein", script.display()))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&loaded.stdout).contains("rein"),
        "{}",
        String::from_utf8_lossy(&loaded.stderr)
    );
    common::exits(rein(dir.path()).args(["completions", "tcsh"]), 2);

    let pages = dir.path().join("man");
    let out = run_ok(rein(dir.path()).arg("manpages").arg(&pages));
    assert!(String::from_utf8_lossy(&out.stdout).contains("man pages into"));
    for page in ["rein.1", "rein-tasks-fork.1", "rein-sessions-delegate.1"] {
        let text =
            std::fs::read_to_string(pages.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{page}");
    }
    // A command's help lists the global options apart, and only those that
    // apply to it.
    let help = |args: &[&str]| {
        String::from_utf8(run_ok(rein(dir.path()).args(args).arg("--help")).stdout).unwrap()
    };
    let list = help(&["tasks", "list"]);
    let (own, global) = list.split_once("Global options:").unwrap();
    assert!(
        own.contains("--cursor") && !own.contains("--store"),
        "{list}"
    );
    assert!(
        global.contains("--store") && global.contains("--url"),
        "{list}"
    );
    for args in [&["completions"][..], &["manpages"], &["plan", "schema"]] {
        let text = help(args);
        assert!(
            !text.contains("Global options") && !text.contains("--data-dir"),
            "{args:?}: {text}"
        );
    }
    let serve = help(&["serve"]);
    assert!(
        serve.contains("--store <URL>") && !serve.contains("--url <URL>"),
        "{serve}"
    );
    // Hidden is not refused: a global option given anyway is taken.
    run_ok(rein(dir.path()).args(["--url", "http://127.0.0.1:1", "completions", "bash"]));
}

/// With `--json`, an error is JSON on stdout too, in the API's shape
/// (`{"error": {"code", "message"}}`), with the exit code scripts trust.
#[test]
fn a_json_command_that_fails_prints_its_error_as_json() {
    let (_dir, data) = common::scratch();
    for (id, exit, code, says) in [
        ("task_nope", 2, "bad_request", "task_"),
        (
            "task_01ARZ3NDEKTSV4RRFFQ69G5FAV",
            1,
            "not_found",
            "not found",
        ),
    ] {
        let out = rein(&data)
            .args(["tasks", "show", id, "--json"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(exit), "{id}");
        let error: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{id}: {e}: {}", String::from_utf8_lossy(&out.stdout)));
        assert_eq!(error["error"]["code"], code, "{error}");
        assert!(
            error["error"]["message"].as_str().unwrap().contains(says),
            "{error}"
        );
        // A person still reads it on stderr.
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: "));
    }
    // Without --json, stdout stays empty.
    let out = rein(&data)
        .args(["tasks", "show", "task_nope"])
        .output()
        .unwrap();
    assert!(out.stdout.is_empty());
}

/// A subcommand's help shows its own options first and the global ones
/// apart, under their own heading.
#[test]
fn a_commands_help_puts_its_own_options_before_the_global_ones() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_ok(rein(dir.path()).args(["tasks", "show", "--help"]));
    let help = String::from_utf8_lossy(&out.stdout);
    let global = help
        .find("Global options:")
        .expect("a Global options heading");
    let own = help.find("--json").expect("the command's own --json");
    assert!(own < global, "{help}");
    assert!(help[global..].contains("--data-dir"), "{help}");
    assert!(!help[..global].contains("--data-dir"), "{help}");
}
