//! Agent sessions from the command line: steps naming one session share its
//! conversation (against the fake chat server, which speaks the streaming
//! wire format), `rein sessions list | show | reset | pin`, a `delegate` call
//! that survives two SIGKILLs without running twice, and a plugin's executor
//! controller ensured, found stale after a SIGKILL, retired, and reset
//! through the plugin (the test echo plugin, a real child process).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::model;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::{eventually, json, rein, run_ok, task_ids, write_plan};
use model::model;
use serde_json::Value;

fn sessions_of(data: &Path, task: &str) -> Vec<Value> {
    json(&run_ok(
        rein(data).args(["sessions", "list", "--task", task, "--json"]),
    ))["items"]
        .as_array()
        .unwrap()
        .clone()
}

fn named<'a>(sessions: &'a [Value], name: &str) -> &'a Value {
    sessions
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no session named {name} in {sessions:?}"))
}

/// The text a step's newest completed checkpoint recorded.
fn step_text(state: &Value, step: &str) -> String {
    common::newest_checkpoint(state, step, Some("completed"))
        .and_then(|c| c["output"]["text"].as_str())
        .unwrap_or_default()
        .to_owned()
}

const SHARED: &str = r#"
description = "a code word"
[[steps]]
id = "tell"
kind = "agent"
prompt = "Remember: the code word is heron."
session = "talk"
[[steps]]
id = "ask"
kind = "agent"
prompt = "What was the code word?"
session = "talk"
depends_on = ["tell"]
[[steps]]
id = "alone"
kind = "agent"
prompt = "What was the code word?"
depends_on = ["tell"]
"#;

#[test]
fn steps_naming_one_session_share_its_conversation_and_the_session_can_be_pinned_and_reset() {
    let m = model();
    let (_dir, data, plan) = common::with_plan("plan.toml", SHARED);
    let state = json(&run_ok(
        m.rein(&data)
            .args(["run", "--json"])
            .arg(&plan)
            .stderr(Stdio::null()),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    // The later step of the session saw what the earlier one was told; a step
    // of its own did not.
    assert_eq!(step_text(&state, "ask"), "The code word was heron.");
    assert_eq!(step_text(&state, "alone"), "I was never told a code word.");

    let task = state["id"].as_str().unwrap();
    let sessions = sessions_of(&data, task);
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    let talk = named(&sessions, "talk");
    assert_eq!(talk["shared"], true);
    assert_eq!(talk["steps"], serde_json::json!(["tell", "ask"]));
    assert_eq!(talk["runtime"], "rein");
    assert_eq!(talk["turns"], 2);
    assert_eq!(talk["status"], "ended");
    assert_eq!(
        named(&sessions, "alone")["steps"],
        serde_json::json!(["alone"])
    );
    let id = talk["id"].as_str().unwrap();
    assert!(id.starts_with("ses_"), "{id}");

    // Pinning to a runtime nobody registered is bad usage, naming the runtimes.
    let said = common::fails(
        rein(&data).args(["sessions", "pin", id, "--runtime", "codex"]),
        2,
    );
    assert!(said.contains("no runtime `codex`"), "{said}");
    let pinned = json(&run_ok(rein(&data).args([
        "sessions",
        "pin",
        id,
        "--runtime",
        "rein",
        "--json",
    ])));
    assert_eq!(pinned["pinned_runtime"], "rein");
    let unpinned = json(&run_ok(
        rein(&data).args(["sessions", "pin", id, "--unpin", "--json"]),
    ));
    assert!(unpinned.get("pinned_runtime").is_none(), "{unpinned}");

    let reset = json(&run_ok(
        rein(&data).args(["sessions", "reset", id, "--json"]),
    ));
    assert_eq!(reset["generation"], 1);
    assert_eq!(reset["turns"], 0);
    let shown = run_ok(rein(&data).args(["sessions", "show", id]));
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("steps tell, ask"), "{shown}");
    assert!(shown.contains("turns 0, generation 1"), "{shown}");

    let missing = common::exits(
        rein(&data).args(["sessions", "show", "ses_01JAAAAAAAAAAAAAAAAAAAAAAA"]),
        1,
    );
    assert!(String::from_utf8_lossy(&missing.stderr).contains("not found"));

    // The same through the API, and `--url`.
    let (_server, addr) = common::start(&data, "session-test-token");
    let url = format!("http://{addr}");
    let remote = |args: &[&str]| {
        json(&run_ok(
            rein(&data)
                .args(["--url", &url, "--token", "session-test-token", "sessions"])
                .args(args),
        ))
    };
    let listed = remote(&["list", "--task", task, "--json"]);
    assert_eq!(listed["items"], serde_json::json!(sessions_of(&data, task)));
    let shown = remote(&["show", id, "--json"]);
    assert_eq!(shown["session"]["generation"], 1);
    let (status, body) = common::http(
        &addr,
        "POST",
        &format!("/admin/agent-sessions/{id}/pin"),
        Some("session-test-token"),
        Some(("application/json", r#"{"runtime": "codex"}"#)),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("no runtime `codex`"), "{body}");
    let (status, _) = common::http(
        &addr,
        "GET",
        "/admin/agent-sessions/ses_01JAAAAAAAAAAAAAAAAAAAAAAA",
        Some("session-test-token"),
        None,
    );
    assert_eq!(status, 404);
    // A malformed id is refused before anything is looked up, naming the form.
    for (method, path) in [
        ("GET", "/admin/agent-sessions/ses_nope"),
        ("POST", "/admin/agent-sessions/ses_nope/reset"),
    ] {
        let (status, body) = common::http(&addr, method, path, Some("session-test-token"), None);
        assert_eq!(status, 400, "{method} {path}: {body}");
        assert!(body.contains("expected `ses_`"), "{body}");
    }
    let pinned = remote(&["pin", id, "--runtime", "rein", "--json"]);
    assert_eq!(pinned["pinned_runtime"], "rein");
    let reset = remote(&["reset", id, "--json"]);
    assert_eq!(reset["generation"], 2);
}

#[test]
fn steps_sharing_a_session_must_be_ordered_by_their_dependencies() {
    let (dir, data) = common::scratch();
    // `ask` no longer waits for `tell`: both could talk at once.
    let unordered = SHARED.replacen("depends_on = [\"tell\"]\n", "", 1);
    let plan = write_plan(dir.path(), "plan.toml", &unordered);
    let err = common::fails(rein(&data).args(["plan", "check"]).arg(&plan), 2);
    assert!(
        err.contains(
            "steps `tell` and `ask` share session `talk` but neither depends on the other"
        ),
        "{err}"
    );
}

const DELEGATING: &str = r#"
description = "delegate"
[[steps]]
id = "lead"
kind = "agent"
prompt = "Delegate the work"
tools = ["run_command", "delegate"]
"#;

#[test]
fn a_delegation_survives_sigkill_without_running_twice_and_only_its_owner_may_change_it() {
    let m = model();
    let (dir, data) = common::scratch();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let plan = write_plan(dir.path(), "plan.toml", DELEGATING);
    let spawn = |args: &[&str]| {
        m.rein(&data)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut runner = spawn(&[
        "run",
        plan.to_str().unwrap(),
        "--workspace",
        ws.to_str().unwrap(),
    ]);
    // Killed while the child waits in its second command…
    eventually("the child's second command is running", || {
        ws.join("child-started").exists().then_some(())
    });
    common::kill9(&mut runner);
    let task = task_ids(&data)[0].clone();
    // …and again once the child has answered and the parent waits.
    let mut runner = spawn(&["tasks", "resume", &task]);
    eventually("the parent's command is running", || {
        ws.join("parent-started").exists().then_some(())
    });
    common::kill9(&mut runner);
    let state = json(&run_ok(
        m.rein(&data).args(["tasks", "resume", &task, "--json"]),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    assert_eq!(
        step_text(&state, "lead"),
        "parent done; the helper said: child done"
    );
    // The child's first command ran once: the child was picked up where it
    // stopped, and the finished child was not run again.
    assert_eq!(
        std::fs::read_to_string(ws.join("child.log")).unwrap(),
        "child\n"
    );

    let sessions = sessions_of(&data, &task);
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    let parent = named(&sessions, "lead");
    let child = named(&sessions, "delegate:lead:call_d");
    assert_eq!(child["delegation"]["parent"], parent["id"]);
    assert_eq!(child["delegation"]["answer"], "child done");
    assert_eq!(child["route"], parent["route"]);
    assert_eq!(child["status"], "ended");
    let children = json(&run_ok(rein(&data).args([
        "sessions",
        "list",
        "--parent",
        parent["id"].as_str().unwrap(),
        "--json",
    ])))["items"]
        .clone();
    assert_eq!(children.as_array().unwrap().len(), 1);
    // The task's log has the delegation.
    let events = json(&run_ok(
        rein(&data).args(["tasks", "events", &task, "--json"]),
    ));
    let delegations = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e.to_string().contains("\"delegation\""))
        .count();
    assert!(delegations >= 2, "{events}");

    // Nobody but the owner changes the child.
    let child_id = child["id"].as_str().unwrap();
    for args in [
        vec!["sessions", "reset", child_id],
        vec!["sessions", "pin", child_id, "--runtime", "rein"],
    ] {
        let err = common::fails(rein(&data).args(&args), 1);
        assert!(
            err.contains(&format!(
                "owned by session {}",
                parent["id"].as_str().unwrap()
            )),
            "{err}"
        );
    }
}

/// The echo plugin's manifest, with an executor controller working in
/// `exec`, started with `mode`.
fn echo_plugin(dir: &Path, name: &str, mode: &str, exec: &Path) -> std::path::PathBuf {
    common::echo_manifest(
        &dir.join(name),
        "echo",
        &[mode],
        &format!(
            "[[harnesses]]\nid = \"echo\"\nlabel = \"Echo agent\"\n[executor]\nworkspace_directory = {:?}\n",
            exec.display().to_string()
        ),
    )
}

const ECHOED: &str = r#"
description = "echo"
[[steps]]
id = "first"
kind = "agent"
runtime = "echo"
prompt = "hang once"
session = "work"
[[steps]]
id = "second"
kind = "agent"
runtime = "echo"
prompt = "say hi"
session = "work"
depends_on = ["first"]
"#;

/// A data directory and a workspace, with the echo plugin (`ok.toml`) whose
/// executor controller works in `exec`.
struct Echo {
    dir: tempfile::TempDir,
    data: std::path::PathBuf,
    ws: std::path::PathBuf,
    exec: std::path::PathBuf,
    ok: std::path::PathBuf,
}

impl Echo {
    fn new() -> Echo {
        let dir = tempfile::tempdir().unwrap();
        let (data, ws, exec) = (
            dir.path().join("data"),
            dir.path().join("ws"),
            dir.path().join("exec"),
        );
        std::fs::create_dir(&ws).unwrap();
        std::fs::create_dir(&exec).unwrap();
        let ok = echo_plugin(dir.path(), "ok.toml", "ok", &exec);
        Echo {
            dir,
            data,
            ws,
            exec,
            ok,
        }
    }

    /// `rein` with the plugin of `manifest`.
    fn with(&self, manifest: &Path) -> Command {
        let mut cmd = rein(&self.data);
        cmd.arg("--plugin").arg(manifest);
        cmd
    }

    /// `rein` with the plugin that works.
    fn rein(&self) -> Command {
        self.with(&self.ok)
    }

    /// What the executor controller was asked, a line a call.
    fn log(&self) -> String {
        std::fs::read_to_string(self.exec.join("executor.log")).unwrap_or_default()
    }

    /// `rein run` of [`ECHOED`] in the workspace, once its first attempt
    /// (after `ensure`) is under way.
    fn running(&self) -> Child {
        let plan = write_plan(self.dir.path(), "plan.toml", ECHOED);
        let runner = common::spawn_quiet(
            self.rein()
                .arg("run")
                .arg(&plan)
                .arg("--workspace")
                .arg(&self.ws),
        );
        eventually("the first attempt is running", || {
            self.ws.join("hung").exists().then_some(())
        });
        runner
    }
}

#[test]
fn a_plugins_executor_is_ensured_found_stale_after_sigkill_retired_and_reset_through_the_plugin() {
    let echo = Echo::new();
    let data = &echo.data;
    let stuck = echo_plugin(echo.dir.path(), "stuck.toml", "reset-fails", &echo.exec);
    // Killed after `ensure`, while the harness works on the first turn.
    let mut runner = echo.running();
    common::kill9(&mut runner);
    let task = task_ids(data)[0].clone();
    let log = || echo.log();
    assert_eq!(log().lines().count(), 1, "{}", log());
    let state = json(&run_ok(
        echo.rein().args(["tasks", "resume", &task, "--json"]),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    assert_eq!(step_text(&state, "second"), "SAY HI");

    // The executor from before the crash was stale: retired, and a new one
    // ensured for both steps of the session, retired when the task ended.
    let lines: Vec<(String, String)> = log()
        .lines()
        .map(|l| {
            let (method, env) = l.split_once(' ').unwrap();
            (method.to_owned(), env.to_owned())
        })
        .collect();
    let methods: Vec<&str> = lines.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(
        methods,
        [
            "executor/ensure",
            "executor/retire",
            "executor/ensure",
            "executor/retire"
        ],
        "{lines:?}"
    );
    assert_eq!(lines[0].1, lines[1].1);
    assert_eq!(lines[2].1, lines[3].1);
    assert_ne!(lines[0].1, lines[2].1);
    let sessions = sessions_of(data, &task);
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let work = &sessions[0];
    let id = work["id"].as_str().unwrap();
    assert!(lines[0].1.starts_with(id), "{lines:?}");
    assert_eq!(work["runtime"], "echo");
    assert_eq!(work["executor"]["phase"], "retired");
    assert_eq!(work["executor"]["environment_id"], lines[2].1.as_str());
    assert_eq!(work["steps"], serde_json::json!(["first", "second"]));

    // Without the plugin, nothing would reset its side: refused, saying so.
    let said = common::fails(rein(data).args(["sessions", "reset", id]), 1);
    assert!(said.contains("name its plugin with --plugin"), "{said}");
    // A reset whose required cleanup fails is refused, and the session stays.
    let err = common::fails(echo.with(&stuck).args(["sessions", "reset", id]), 1);
    assert!(
        err.contains("was not reset") && err.contains("the native sandbox is still attached"),
        "{err}"
    );
    let kept = json(&run_ok(rein(data).args(["sessions", "show", id, "--json"])));
    assert_eq!(kept["session"]["generation"], 0);
    // Through a plugin whose cleanup works, it is reset.
    let reset = json(&run_ok(
        echo.rein().args(["sessions", "reset", id, "--json"]),
    ));
    assert_eq!(reset["generation"], 1);
}

#[test]
fn a_session_is_not_reset_while_its_task_runs_and_a_reset_retires_its_executor() {
    let echo = Echo::new();
    let data = &echo.data;
    let with = || echo.rein();
    let mut runner = echo.running();
    let task = task_ids(data)[0].clone();
    let id = sessions_of(data, &task)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let err = common::fails(with().args(["sessions", "reset", &id]), 1);
    assert!(
        err.contains("while its task") && err.contains("is running (process"),
        "{err}"
    );

    // Once nothing runs it (rein was killed), the reset goes through the
    // plugin and retires the session's executor.
    common::kill9(&mut runner);
    let reset = json(&run_ok(with().args(["sessions", "reset", &id, "--json"])));
    assert_eq!(reset["generation"], 1);
    assert_eq!(reset["executor"]["phase"], "retired");
    let log = || echo.log();
    let methods = |log: &str| -> Vec<String> {
        log.lines()
            .map(|l| l.split(' ').next().unwrap().to_owned())
            .collect()
    };
    assert_eq!(methods(&log()), ["executor/ensure", "executor/retire"]);

    // The next turn is the new generation's: a new executor, retired at the end.
    let state = json(&run_ok(with().args(["tasks", "resume", &task, "--json"])));
    assert_eq!(state["status"], "completed", "{state}");
    assert_eq!(
        methods(&log()),
        [
            "executor/ensure",
            "executor/retire",
            "executor/ensure",
            "executor/retire"
        ]
    );
    let shown = json(&run_ok(
        rein(data).args(["sessions", "show", &id, "--json"]),
    ));
    assert_eq!(shown["session"]["executor"]["generation"], 1);
    assert_eq!(shown["session"]["turns"], 2);
}

#[test]
fn aborting_a_paused_task_retires_its_sessions_executors() {
    let echo = Echo::new();
    let data = &echo.data;
    let plan = write_plan(
        echo.dir.path(),
        "plan.toml",
        "description = \"held\"\n[[steps]]\nid = \"first\"\nkind = \"agent\"\nruntime = \"echo\"\nprompt = \"say one\"\n[[steps]]\nid = \"hold\"\nkind = \"approve\"\ntitle = \"Go on?\"\ndepends_on = [\"first\"]\n",
    );
    let with = || echo.rein();
    common::exits(with().arg("run").arg(&plan).arg("--no-wait"), 3);
    let log = || echo.log();
    assert_eq!(log().lines().count(), 1, "{}", log());
    let task = task_ids(data)[0].clone();
    run_ok(with().args(["tasks", "abort", &task]));
    let lines: Vec<String> = log().lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[1].starts_with("executor/retire"), "{lines:?}");
    let session = &sessions_of(data, &task)[0];
    assert_eq!(session["status"], "ended");
    assert_eq!(session["executor"]["phase"], "retired");
}

#[test]
fn a_session_is_compacted_by_hand_on_its_own_model_and_metered() {
    let m = model();
    let (_dir, data, plan) = common::with_plan(
        "notes.toml",
        "description = \"notes\"\n[[steps]]\nid = \"agent\"\nkind = \"agent\"\nprompt = \"write notes\"\ntools = [\"write_file\", \"run_command\"]\n",
    );
    let state = json(&run_ok(
        m.rein(&data)
            .args(["run", "--json"])
            .arg(&plan)
            .stderr(Stdio::null()),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    let task = state["id"].as_str().unwrap();
    let id = sessions_of(&data, task)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let calls = |data: &Path| {
        json(&run_ok(rein(data).args([
            "usage",
            "--session",
            &id,
            "--json",
        ])))["calls"]
            .as_u64()
            .unwrap()
    };
    let before = calls(&data);
    let asked = m.requests().len();
    let done = json(&run_ok(
        m.rein(&data).args(["sessions", "compact", &id, "--json"]),
    ));
    assert_eq!(done["compacted"], true, "{done}");
    assert_eq!(done["model"], "openai/gpt-test");
    assert!(done["messages"].as_u64().unwrap() > 0, "{done}");
    assert!(
        done["tokens_after"].as_u64() < done["tokens_before"].as_u64(),
        "{done}"
    );
    // One request, with no tools, summarised it; metered with the session.
    let requests = m.requests();
    assert_eq!(requests.len(), asked + 1);
    assert!(requests[asked].get("tools").is_none());
    assert_eq!(calls(&data), before + 1);
    // A session that is not there is named.
    let out = m
        .rein(&data)
        .args(["sessions", "compact", "ses_01JAAAAAAAAAAAAAAAAAAAAAAA"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("ses_01JAAAAAAAAAAAAAAAAAAAAAAA"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `plan` on the server `remote` reaches, without waiting (exit 3: it
/// waits for a person), until its gate asks: the task's state then, and the
/// request's id.
fn run_to_gate(remote: &dyn Fn(&[&str]) -> Command, plan: &Path) -> (Value, String) {
    let started = common::exits(remote(&["run", "--no-wait", "--json"]).arg(plan), 3);
    let started: Value = serde_json::from_slice(&started.stdout).unwrap();
    let request = eventually("the gate asks", || {
        let pending = json(&run_ok(&mut remote(&["approvals", "list", "--json"])));
        pending
            .as_array()
            .unwrap()
            .first()
            .map(|r| r["id"].as_str().unwrap().to_owned())
    });
    (started, request)
}

/// Approves `request` and waits until `task` ends: its state then.
fn approve_to_end(remote: &dyn Fn(&[&str]) -> Command, request: &str, task: &str) -> Value {
    run_ok(&mut remote(&["approvals", "approve", request]));
    eventually("the task ends", || {
        let s = json(&run_ok(&mut remote(&["tasks", "show", task, "--json"])));
        (s["status"] != "in_progress" && s["status"] != "paused").then_some(s)
    })
}

/// A plugin manifest for the test echo plugin: plugin `id` with harness
/// `harness`, and what else its harness declares.
fn plugin(dir: &Path, id: &str, harness: &str, more: &str) -> std::path::PathBuf {
    common::echo_manifest(
        &dir.join(format!("{id}.toml")),
        id,
        &["ok"],
        &format!("[[harnesses]]\nid = {harness:?}\nlabel = \"Echo\"\n{more}"),
    )
}

const HANDED: &str = r#"
description = "handed over"
[[steps]]
id = "first"
kind = "agent"
prompt = "who runs first"
runtime = "acme"
session = "work"
[[steps]]
id = "gate"
kind = "approve"
title = "Hand the session over?"
depends_on = ["first"]
[[steps]]
id = "second"
kind = "agent"
prompt = "who runs second"
session = "work"
depends_on = ["gate"]
"#;

/// Harness-sdk rules 22–24 through the user's paths, on a running server
/// with three real plugin processes: `acme` owns the sessions its harness
/// serves and trusts `runner` only. A session is handed over with `rein
/// sessions delegate` (and the API), refused naming what differs, and its
/// next turn runs on `runner`'s harness scoped to `acme`; a step's
/// `delegate` calls are handed to the plugin its `delegate_to` names.
#[test]
fn a_session_is_handed_only_to_a_plugin_its_owner_trusts_and_runs_there_as_the_owners() {
    let m = model();
    let (dir, data) = common::scratch();
    let acme = plugin(
        dir.path(),
        "acme",
        "acme",
        "delegated_execution_plugin_ids = [\"runner\"]\n",
    );
    let runner = plugin(dir.path(), "runner", "runner-h", "");
    let other = plugin(dir.path(), "other", "other-h", "");
    let policy = dir.path().join("runtimes.toml");
    std::fs::write(&policy, "[models]\n\"openai/gpt-test\" = \"acme\"\n").unwrap();
    let token = "hand-over-operator-token";
    let mut server = m.rein(&data);
    server
        .args(["--plugin", acme.to_str().unwrap()])
        .args(["--plugin", runner.to_str().unwrap()])
        .args(["--plugin", other.to_str().unwrap()])
        .args(["--runtime-policy", policy.to_str().unwrap()]);
    let (_server, addr) = common::serve(server, token);
    let remote = common::client(dir.path().join("client"), &addr, token);
    let plan = write_plan(dir.path(), "handed.toml", HANDED);
    let (started, request) = run_to_gate(&remote, &plan);
    let task = started["id"].as_str().unwrap().to_owned();
    let listed = json(&run_ok(&mut remote(&[
        "sessions", "list", "--task", &task, "--json",
    ])))["items"]
        .clone();
    let work = named(listed.as_array().unwrap(), "work").clone();
    let id = work["id"].as_str().unwrap();
    assert_eq!(work["runtime"], "acme");

    let refused = |args: &[&str], code: i32| {
        let out = remote(&["sessions", "delegate", id])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        err
    };
    // Not pinned to its owner's harness: not locked to it (rule 23).
    let err = refused(&["--to", "runner"], 1);
    assert!(
        err.contains("its runtime override is unset rather than the owner's harness `acme`"),
        "{err}"
    );
    run_ok(&mut remote(&["sessions", "pin", id, "--runtime", "acme"]));
    // A plugin the owner does not list (rule 22), one nobody loaded, and an
    // identity that is not the stored one (rule 23).
    let err = refused(&["--to", "other"], 1);
    assert!(
        err.contains("plugin `other` may not run sessions of plugin `acme`"),
        "{err}"
    );
    let err = refused(&["--to", "ghost"], 2);
    assert!(err.contains("no plugin `ghost` is loaded"), "{err}");
    let err = refused(
        &[
            "--to",
            "runner",
            "--session-key",
            "agent:main",
            "--store-path",
            "elsewhere",
        ],
        1,
    );
    assert!(
        err.contains(&format!(
            "session key `agent:main` is not the stored `{id}`"
        )) && err.contains(&format!(
            "store path `elsewhere` is not the stored `{task}`"
        )),
        "{err}"
    );
    // The API says the same, with 409.
    let (status, body) = common::http(
        &addr,
        "POST",
        &format!("/admin/agent-sessions/{id}/delegate"),
        Some(token),
        Some(("application/json", r#"{"plugin": "other"}"#)),
    );
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains("may not run sessions of plugin `acme`"),
        "{body}"
    );
    let (status, body) = common::http(
        &addr,
        "POST",
        &format!("/admin/agent-sessions/{id}/delegate"),
        Some(token),
        Some(("application/json", r#"{"plugin": "runner", "owner": "x"}"#)),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("owner"), "{body}");
    let handed = json(&run_ok(&mut remote(&[
        "sessions",
        "delegate",
        id,
        "--to",
        "runner",
        "--session-key",
        id,
        "--json",
    ])));
    let d = &handed["delegated_execution"];
    assert_eq!(
        (
            d["plugin"].as_str(),
            d["harness"].as_str(),
            d["owner"].as_str(),
            d["owner_harness"].as_str()
        ),
        (Some("runner"), Some("runner-h"), Some("acme"), Some("acme")),
        "{handed}"
    );
    assert_eq!(d["by"], "admin", "{handed}");

    let state = approve_to_end(&remote, &request, &task);
    assert_eq!(state["status"], "completed", "{state}");
    assert_eq!(step_text(&state, "first"), "WHO RUNS FIRST by acme");
    assert_eq!(
        step_text(&state, "second"),
        "WHO RUNS SECOND by runner-h for acme on acme"
    );
    let second = common::checkpoint(&state, "second", None);
    assert_eq!(second["output"]["plugin"], "runner");
    assert_eq!(
        second["output"]["delegated_execution"]["ownerPluginId"],
        "acme"
    );
    // The session stays its owner's: served by `acme`, two turns.
    let shown = json(&run_ok(&mut remote(&["sessions", "show", id, "--json"])));
    assert_eq!(shown["session"]["runtime"], "acme");
    assert_eq!(shown["session"]["turns"], 2);
    let back = json(&run_ok(&mut remote(&[
        "sessions",
        "delegate",
        id,
        "--take-back",
        "--json",
    ])));
    assert!(back.get("delegated_execution").is_none(), "{back}");

    // A step's `delegate` calls, handed to the plugin it names: the child is
    // made on the route's harness (`acme`, by the runtime policy) and runs
    // on `runner`'s.
    let lead = |to: &str| {
        write_plan(
            dir.path(),
            &format!("lead-{to}.toml"),
            &format!(
                "description = \"lead\"\n[[steps]]\nid = \"lead\"\nkind = \"agent\"\nprompt = \"Hand it over\"\nruntime = \"rein\"\ntools = [\"delegate\"]\ndelegate_to = {to:?}\n"
            ),
        )
    };
    let state = json(&run_ok(remote(&["run", "--json"]).arg(lead("runner"))));
    assert_eq!(state["status"], "completed", "{state}");
    assert_eq!(
        step_text(&state, "lead"),
        "the helper said: WHO IS THE HELPER by runner-h for acme on acme"
    );
    let sessions = json(&run_ok(&mut remote(&[
        "sessions",
        "list",
        "--task",
        state["id"].as_str().unwrap(),
        "--json",
    ])))["items"]
        .clone();
    let child = named(sessions.as_array().unwrap(), "delegate:lead:call_h");
    assert_eq!(child["pinned_runtime"], "acme", "{child}");
    assert_eq!(child["delegated_execution"]["plugin"], "runner", "{child}");
    assert_eq!(child["delegated_execution"]["by"], "task", "{child}");
    // To a plugin the owner does not trust: the step's attempt is refused
    // as a permission (escalated to a person: exit 3), naming why.
    let out = common::exits(
        remote(&["run", "--no-wait", "--json"]).arg(lead("other")),
        3,
    );
    let state: Value = serde_json::from_slice(&out.stdout).unwrap();
    let refused = common::checkpoint(&state, "lead", Some("failed"));
    assert_eq!(
        refused["metadata"]["error_type"], "permission_denied",
        "{refused}"
    );
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("plugin `other` may not run sessions of plugin `acme`"),
        "{refused}"
    );
}

/// Rule 11 through `rein harness reload` on a running server: between two
/// turns of one session, the plugin is reloaded; its old program is gone,
/// the next turn is answered by a new one, and the executor ensured under
/// the old registration is retired as stale and ensured again. A revoked
/// plugin is not reloaded (409, exit 1); an unknown one is named.
#[test]
fn a_reloaded_plugin_answers_from_a_new_program_and_its_executors_are_ensured_again() {
    let (dir, data) = common::scratch();
    let exec = dir.path().join("exec");
    std::fs::create_dir_all(&exec).unwrap();
    let manifest = echo_plugin(dir.path(), "echo.toml", "ok", &exec);
    let token = "reload-operator-token";
    let mut server = rein(&data);
    server.args(["--plugin", manifest.to_str().unwrap()]);
    let (_server, addr) = common::serve(server, token);
    let remote = common::client(dir.path().join("client"), &addr, token);
    let plan = write_plan(
        dir.path(),
        "reload.toml",
        "description = \"reload\"\n[[steps]]\nid = \"first\"\nkind = \"agent\"\nprompt = \"pid\"\nruntime = \"echo\"\nsession = \"work\"\n[[steps]]\nid = \"gate\"\nkind = \"approve\"\ntitle = \"Go on?\"\ndepends_on = [\"first\"]\n[[steps]]\nid = \"second\"\nkind = \"agent\"\nprompt = \"pid\"\nruntime = \"echo\"\nsession = \"work\"\ndepends_on = [\"gate\"]\n",
    );
    let (started, request) = run_to_gate(&remote, &plan);
    let task = started["id"].as_str().unwrap().to_owned();
    let pid_of = |state: &Value, step: &str| -> u32 {
        step_text(state, step)
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let first = pid_of(&started, "first");
    assert!(Path::new(&format!("/proc/{first}")).exists());

    let rows = json(&run_ok(&mut remote(&[
        "harness", "reload", "echo", "--json",
    ])));
    assert!(
        rows.as_array().unwrap().iter().any(|r| r["id"] == "echo"),
        "{rows}"
    );
    // The old program is gone: nothing of it outlives the reload.
    eventually("the old program ends", || {
        let stat = std::fs::read_to_string(format!("/proc/{first}/stat")).unwrap_or_default();
        // Gone, or a zombie not yet reaped.
        (stat.is_empty() || stat.contains(") Z ")).then_some(())
    });

    let state = approve_to_end(&remote, &request, &task);
    assert_eq!(state["status"], "completed", "{state}");
    assert_ne!(pid_of(&state, "second"), first, "{state}");
    let log = std::fs::read_to_string(exec.join("executor.log")).unwrap();
    let calls: Vec<&str> = log.lines().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(
        calls,
        [
            "executor/ensure",
            "executor/retire",
            "executor/ensure",
            "executor/retire"
        ],
        "{log}"
    );

    let unknown = common::exits(&mut remote(&["harness", "reload", "ghost"]), 1);
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no plugin `ghost`"));
    run_ok(&mut remote(&["harness", "revoke", "echo"]));
    let revoked = common::exits(&mut remote(&["harness", "reload", "echo"]), 1);
    assert!(String::from_utf8_lossy(&revoked.stderr).contains("stays revoked"));
}
