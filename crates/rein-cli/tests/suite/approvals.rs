//! Approvals from the command line, across processes: a waiting `rein run` continues
//! when another process decides; the ledger catches an edited row.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{SHIP_PLAN, json, pending, rein, run_ok, show, task_ids};

/// Starts `plan` without waiting; the id of the request it waits on.
fn waiting_request(data: &Path, plan: &Path) -> String {
    rein(data)
        .arg("run")
        .arg(plan)
        .arg("--no-wait")
        .output()
        .unwrap();
    pending(data)[0]["id"].as_str().unwrap().to_owned()
}

fn wait_for_request(data: &Path) -> String {
    let start = Instant::now();
    loop {
        if let Some(r) = pending(data).first() {
            return r["id"].as_str().unwrap().to_owned();
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no approval request appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_waiting_run_continues_when_another_process_decides() {
    let (_dir, data, plan) = common::with_plan("ship.toml", SHIP_PLAN);
    let runner = rein(&data)
        .arg("run")
        .arg(&plan)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let id = wait_for_request(&data);
    let listed = &pending(&data)[0];
    for field in ["id", "task_id", "status", "title"] {
        assert!(
            !listed[field].is_null(),
            "approvals list --json items carry {field}: {listed}"
        );
    }
    assert_eq!(listed["status"], "pending");

    let out = run_ok(rein(&data).args([
        "approvals",
        "approve",
        &id,
        "--option",
        "hold",
        "--as",
        "ana",
        "--reason",
        "wait for QA",
    ]));
    assert!(String::from_utf8_lossy(&out.stdout).contains("approved by ana"));
    let finished = runner.wait_with_output().unwrap();
    assert_eq!(
        finished.status.code(),
        Some(0),
        "the waiting run went on and completed"
    );
    let text = String::from_utf8_lossy(&finished.stdout);
    assert!(text.contains("waiting  ship for a person"), "{text}");
    assert!(text.contains("approved by ana (option `hold`)"), "{text}");

    // A second decision is refused, naming the first.
    let said = common::fails(
        rein(&data).args(["approvals", "deny", &id, "--as", "bob"]),
        1,
    );
    assert!(
        said.contains("already approved by ana") && said.contains("option `hold`"),
        "{said}"
    );

    let shown = json(&run_ok(rein(&data).args([
        "approvals",
        "show",
        &id,
        "--json",
    ])));
    assert_eq!(shown["status"], "approved");
    assert_eq!(shown["response"]["selected_option"], "hold");
    let ledger = json(&run_ok(rein(&data).args(["ledger", "list", "--json"])));
    assert_eq!(ledger.as_array().unwrap().len(), 1);
    assert_eq!(ledger[0]["who"], "ana");
    assert_eq!(ledger[0]["reason"], "wait for QA");
}

#[test]
fn no_wait_exits_3_and_resume_after_the_decision_completes() {
    let (_dir, data, plan) = common::with_plan("ship.toml", SHIP_PLAN);
    common::exits(rein(&data).arg("run").arg(&plan).arg("--no-wait"), 3);
    let id = task_ids(&data)[0].clone();
    assert_eq!(show(&data, &id)["status"], "paused");
    let request = pending(&data)[0]["id"].as_str().unwrap().to_owned();
    run_ok(rein(&data).args(["approvals", "skip", &request, "--as", "carol"]));
    common::exits(rein(&data).args(["tasks", "resume", &id]), 0);
    let state = show(&data, &id);
    let ship = common::checkpoint(&state, "ship", None);
    assert_eq!(ship["status"], "skipped");
    assert!(pending(&data).is_empty());
}

#[test]
fn bad_decisions_are_refused_with_what_to_do() {
    let (_dir, data, plan) = common::with_plan("ship.toml", SHIP_PLAN);
    let request = waiting_request(&data, &plan);
    let said = common::fails(
        rein(&data).args(["approvals", "approve", &request, "--option", "yolo"]),
        2,
    );
    assert!(said.contains("choose one of: publish, hold"));
    common::exits(rein(&data).args(["approvals", "approve", "apr_nope"]), 2);
    let said = common::fails(
        rein(&data).args(["approvals", "approve", "apr_01ARZ3NDEKTSV4RRFFQ69G5FAV"]),
        1,
    );
    assert!(said.contains("not found"));
    common::exits(
        rein(&data).args(["approvals", "list", "--status", "maybe"]),
        2,
    );
}

#[test]
fn an_edited_ledger_row_is_reported_by_verify() {
    let (_dir, data, plan) = common::with_plan("ship.toml", SHIP_PLAN);
    // Three decisions in the ledger: delegate, then approve; then a second task denied.
    let first = waiting_request(&data, &plan);
    run_ok(rein(&data).args([
        "approvals",
        "delegate",
        &first,
        "--to",
        "carol",
        "--as",
        "ana",
    ]));
    // Delegated to carol, it is hers to decide.
    let said = common::fails(
        rein(&data).args(["approvals", "approve", &first, "--as", "ana"]),
        1,
    );
    assert!(said.contains("only carol"));
    run_ok(rein(&data).args(["approvals", "approve", &first, "--as", "carol"]));
    let second = waiting_request(&data, &plan);
    run_ok(rein(&data).args(["approvals", "deny", &second, "--as", "dave"]));
    let out = run_ok(rein(&data).args(["ledger", "verify"]));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ledger intact: 3 entries"));

    // Someone rewrites who approved, straight in the SQLite file.
    let conn = rusqlite::Connection::open(data.join("rein.db")).unwrap();
    let body: String = conn
        .query_row("SELECT body FROM ledger WHERE seq = 2", [], |r| r.get(0))
        .unwrap();
    let forged = body.replace("\"who\":\"carol\"", "\"who\":\"mallory\"");
    assert_ne!(body, forged);
    conn.execute("UPDATE ledger SET body = ?1 WHERE seq = 2", [forged])
        .unwrap();
    drop(conn);
    let out = rein(&data).args(["ledger", "verify"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "a broken ledger fails verify");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("ledger BROKEN") && said.contains("entry 2"),
        "{said}"
    );
    let report = json(
        &rein(&data)
            .args(["ledger", "verify", "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(report["intact"], false);

    // Removing an entry is caught as well.
    let conn = rusqlite::Connection::open(data.join("rein.db")).unwrap();
    conn.execute("UPDATE ledger SET body = ?1 WHERE seq = 2", [body])
        .unwrap();
    conn.execute("DELETE FROM ledger WHERE seq = 1", [])
        .unwrap();
    drop(conn);
    let out = common::exits(rein(&data).args(["ledger", "verify"]), 1);
    assert!(String::from_utf8_lossy(&out.stdout).contains("entry 1 is missing"));
}

#[test]
fn a_removed_tail_is_caught_against_a_recorded_head_and_damaged_bytes_are_named() {
    let (_dir, data, plan) = common::with_plan("ship.toml", SHIP_PLAN);
    for who in ["ana", "bob", "carol"] {
        let id = waiting_request(&data, &plan);
        run_ok(rein(&data).args(["approvals", "deny", &id, "--as", who]));
    }
    let report = json(&run_ok(rein(&data).args(["ledger", "verify", "--json"])));
    assert_eq!(report["entries"], 3);
    let head = format!(
        "{}:{}",
        report["head"]["seq"],
        report["head"]["hash"].as_str().unwrap()
    );
    let out = run_ok(rein(&data).args(["ledger", "verify"]));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("head {head}")));
    let out = run_ok(rein(&data).args(["ledger", "verify", "--head", &head]));
    assert!(String::from_utf8_lossy(&out.stdout).contains("still holds the recorded head 3"));

    // The newest entry deleted straight in the file: the chain alone cannot tell.
    let conn = rusqlite::Connection::open(data.join("rein.db")).unwrap();
    conn.execute("DELETE FROM ledger WHERE seq = 3", [])
        .unwrap();
    drop(conn);
    let out = run_ok(rein(&data).args(["ledger", "verify"]));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ledger intact: 2 entries"));
    // Against the head recorded before, it is caught.
    let out = common::exits(rein(&data).args(["ledger", "verify", "--head", &head]), 1);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("recorded head") && said.contains("is gone"),
        "{said}"
    );
    let bad = rein(&data)
        .args(["ledger", "verify", "--head", "3:xyz"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "a malformed head is bad usage");

    // Damaged bytes in an entry: named, not a raw conversion error.
    let conn = rusqlite::Connection::open(data.join("rein.db")).unwrap();
    conn.execute(
        "UPDATE ledger SET body = CAST(X'7B22FFFE' AS TEXT) WHERE seq = 2",
        [],
    )
    .unwrap();
    drop(conn);
    let out = common::exits(rein(&data).args(["ledger", "verify"]), 1);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("ledger entry 2 is damaged") && said.contains("not valid UTF-8"),
        "{said}"
    );
    assert!(!said.contains("Conversion error"), "{said}");
}

#[test]
fn the_approval_example_works_as_its_comments_say() {
    let data = tempfile::tempdir().unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/approval.toml");
    common::exits(
        rein(data.path()).arg("run").arg(&example).arg("--no-wait"),
        3,
    );
    let request = &pending(data.path())[0];
    assert_eq!(request["title"], "Publish the release notes?");
    assert!(request["deadline"].is_string());
    let id = request["id"].as_str().unwrap();
    run_ok(rein(data.path()).args(["approvals", "approve", id, "--option", "publish"]));
    let task = task_ids(data.path())[0].clone();
    common::exits(rein(data.path()).args(["tasks", "resume", &task]), 0);
    let workspace = show(data.path(), &task)["resources"]["workspace_path"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(Path::new(&workspace).join("public/NOTES.md").exists());
}

#[test]
fn metrics_json_has_the_four_families() {
    let (_dir, data, plan) = common::with_plan("ship.toml", SHIP_PLAN);
    let request = waiting_request(&data, &plan);
    run_ok(rein(&data).args(["approvals", "deny", &request, "--as", "bob"]));
    let m = json(&run_ok(rein(&data).args(["metrics", "--json"])));
    assert_eq!(m["tasks"]["total"], 1);
    assert_eq!(m["tasks"]["paused"], 1);
    assert_eq!(m["checkpoints"]["by_type"]["user_approval"], 1);
    assert_eq!(m["human_loop"]["requests"], 1);
    assert_eq!(m["human_loop"]["denials"], 1);
    assert!(m["recovery"]["attempts"].is_u64());
}

/// rein is killed (SIGKILL) while its task waits both on a retry timer and on a
/// person; the restarted rein honours both: the retry runs at the recorded time
/// and the request expires at its original deadline.
#[test]
fn after_kill_9_a_retry_timer_and_an_approval_deadline_are_both_honoured() {
    let (_dir, data, plan) = common::with_plan(
        "timers.toml",
        r#"
description = "timers"
[[steps]]
id = "flaky"
run = '[ "$REIN_ATTEMPT" -gt 1 ] || exit 75'
recovery = { transient = { action = "wait", retry_delay = "3s" } }
[[steps]]
id = "ask"
kind = "approve"
title = "Go on?"
timeout = "4s"
default = "approve"
[[steps]]
id = "after"
run = "true"
depends_on = ["flaky", "ask"]
"#,
    );
    let mut runner = rein(&data)
        .arg("run")
        .arg(&plan)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let (task, retry_at) = loop {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the task never got to wait"
        );
        std::thread::sleep(Duration::from_millis(20));
        let Some(task) = task_ids(&data).first().cloned() else {
            continue;
        };
        let state = show(&data, &task);
        let cps = state["checkpoints"].as_array().unwrap();
        let retry_at = cps
            .iter()
            .find(|c| c["step_id"] == "flaky" && c["status"] == "failed")
            .and_then(|c| c["metadata"]["retry_at"].as_str().map(str::to_owned));
        let asking = cps
            .iter()
            .any(|c| c["step_id"] == "ask" && c["status"] == "in_progress");
        if let (Some(at), true) = (retry_at, asking) {
            break (task, at);
        }
    };
    runner.kill().unwrap(); // SIGKILL
    runner.wait().unwrap();
    let retry_at: chrono::DateTime<chrono::Utc> = retry_at.parse().unwrap();
    let requests = pending(&data);
    assert_eq!(requests.len(), 1);
    let deadline: chrono::DateTime<chrono::Utc> =
        requests[0]["deadline"].as_str().unwrap().parse().unwrap();

    let out = rein(&data)
        .args(["tasks", "resume", &task])
        .output()
        .unwrap();
    let finished = chrono::Utc::now();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let state = show(&data, &task);
    assert_eq!(state["status"], "completed");
    let cps = state["checkpoints"].as_array().unwrap();
    let second: chrono::DateTime<chrono::Utc> = cps
        .iter()
        .find(|c| c["step_id"] == "flaky" && c["attempt"] == 2)
        .unwrap()["started_at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        second >= retry_at,
        "the retry waited for its recorded time ({second} < {retry_at})"
    );
    let ask = cps.iter().rev().find(|c| c["step_id"] == "ask").unwrap();
    assert_eq!(
        ask["approved_by"]["who"], "system:deadline",
        "expired, default approve"
    );
    let all = common::all_approvals(&data);
    assert_eq!(
        all.as_array().unwrap().len(),
        1,
        "the same request, not a new one"
    );
    assert_eq!(all[0]["status"], "expired");
    assert!(finished >= deadline, "the deadline was waited for");
    // A fresh four-second question after the restart would have ended later.
    assert!(
        finished < deadline + chrono::TimeDelta::milliseconds(2500),
        "{finished} vs deadline {deadline}"
    );
}

#[test]
fn a_plan_with_confirm_runs_nothing_until_a_person_confirms() {
    let (_dir, data, plan) = common::with_plan(
        "confirm.toml",
        "description='Rotate the keys'\nconfirm=true\n[[steps]]\nid='rotate'\nrun='echo rotated > done'\n",
    );
    common::exits(rein(&data).arg("run").arg(&plan).arg("--no-wait"), 3);
    let task = task_ids(&data)[0].clone();
    let state = show(&data, &task);
    assert!(
        state["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["step_id"] != "rotate"),
        "nothing ran"
    );
    let request = &pending(&data)[0];
    assert_eq!(request["title"], "Start this task? Rotate the keys");
    run_ok(rein(&data).args([
        "approvals",
        "approve",
        request["id"].as_str().unwrap(),
        "--as",
        "ana",
    ]));
    common::exits(rein(&data).args(["tasks", "resume", &task]), 0);
    let confirm = common::checkpoint(&show(&data, &task), "confirm", None);
    assert_eq!(
        (
            confirm["type"].as_str(),
            confirm["approved_by"]["who"].as_str()
        ),
        (Some("user_approval"), Some("ana"))
    );
}

/// On a terminal, `rein run` asks inline; here a real pseudo-terminal (`script`)
/// carries the typed answer.
#[test]
fn on_a_terminal_the_question_is_asked_inline() {
    let (_dir, data, plan) = common::with_plan("ship.toml", SHIP_PLAN);
    let child = common::rein_on_terminal(&data, &[Path::new("run"), &plan]);
    // Type the answer once the question is there.
    wait_for_request(&data);
    let (code, screen) = common::type_and_wait(child, "2\n");
    assert_eq!(code, Some(0), "{screen}");
    assert!(screen.contains("? Publish the release notes?"), "{screen}");
    assert!(
        screen.contains("[1] publish  (recommended, Enter)"),
        "{screen}"
    );
    let all = common::all_approvals(&data);
    assert_eq!(all[0]["status"], "approved");
    assert_eq!(all[0]["response"]["selected_option"], "hold");
    assert_eq!(all[0]["response"]["decided_by"], "terminal-user");
}

/// A decision without `--as`, `$REIN_USER` or `$USER` is the operating
/// system's user's, by name: never an anonymous `cli`.
#[test]
fn a_decision_without_a_name_is_the_os_users() {
    let (_dir, data, plan) = common::with_plan("ship.toml", SHIP_PLAN);
    let request = waiting_request(&data, &plan);
    common::exits(
        rein(&data)
            .env_remove("USER")
            .env_remove("REIN_USER")
            .args(["approvals", "approve", &request, "--option", "publish"]),
        0,
    );
    let whoami = std::process::Command::new("id")
        .arg("-un")
        .output()
        .unwrap();
    let whoami = String::from_utf8_lossy(&whoami.stdout).trim().to_owned();
    assert!(!whoami.is_empty());
    let shown = json(&run_ok(rein(&data).args([
        "approvals",
        "show",
        &request,
        "--json",
    ])));
    assert_eq!(shown["response"]["decided_by"], whoami.as_str(), "{shown}");
}
