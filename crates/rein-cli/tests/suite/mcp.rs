//! Agent steps with MCP tools, from the command line, against the MCP
//! reference servers from npm (`@modelcontextprotocol/server-filesystem` and
//! `server-everything`, installed by `.ci/run`) and the fake chat server that
//! plays the model (the hosted API cannot be reached here): stdio servers in
//! the step's sandbox, a streamable HTTP one declared in `rein.toml`, the
//! permission rules on `mcp:SERVER/TOOL`, a crash between two calls, a server
//! that hangs or cannot start.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::model;
use rein_test_support::npm as npm_packages;

use std::path::{Path, PathBuf};

use common::{eventually, json, run_ok, task_ids, write_plan};
use serde_json::Value;

/// The filesystem server's entry point, and the directory it may read.
fn filesystem_server() -> (PathBuf, PathBuf) {
    let dir = npm_packages::mcp_servers_dir();
    (
        dir.join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"),
        dir,
    )
}

fn everything_server() -> PathBuf {
    npm_packages::mcp_servers_dir()
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

/// A plan of one agent step with `prompt`, the workspace `ws` beside it,
/// the filesystem server declared as `fs` (serving the workspace), and
/// `more` after the step (its other keys, then more tables).
fn plan(dir: &Path, prompt: &str, step: &str, more: &str) -> PathBuf {
    let (fs, modules) = filesystem_server();
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    write_plan(
        dir,
        "mcp.toml",
        &format!(
            r#"
description = "MCP tools"
workspace = "ws"

[mcp_servers.fs]
command = "node"
args = ["{fs}", "."]
allow_read = ["{modules}"]

[[steps]]
id = "agent"
kind = "agent"
prompt = "{prompt}"
{step}
{more}
"#,
            fs = fs.display(),
            modules = modules.display()
        ),
    )
}

/// The agent step's last output in a task's state.
fn agent_output(state: &Value) -> Value {
    state["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|c| c["step_id"] == "agent" && !c["output"].is_null())
        .map(|c| c["output"].clone())
        .unwrap_or(Value::Null)
}

#[test]
fn an_agent_step_lists_and_reads_the_workspace_through_the_filesystem_server() {
    let model = model::model();
    let (dir, data) = common::scratch();
    let plan = plan(dir.path(), "mcp: list and read", "mcp = [\"fs\"]", "");
    std::fs::write(dir.path().join("ws/notes.txt"), "the notes say hello").unwrap();

    let state = json(&run_ok(
        model.rein(&data).args(["run", "--json"]).arg(&plan),
    ));
    assert_eq!(state["status"], "completed", "{state:#}");
    let output = agent_output(&state);
    let text = output["text"].as_str().unwrap();
    assert!(text.contains("[FILE] notes.txt"), "{text}");
    assert!(text.contains("the notes say hello"), "{text}");
    // The server ran in the step's sandbox, reading its own code beside the
    // workspace.
    let served = &output["mcp"][0];
    assert_eq!(served["name"], "fs");
    assert_eq!(served["transport"], "stdio");
    assert!(served["tools"].as_u64().unwrap() >= 10, "{served}");
    assert_ne!(served["reach"]["sandbox"], "none", "{served}");
    assert_eq!(served["reach"]["network"], false, "{served}");

    // The model was offered the server's tools, namespaced, with their schemas.
    let requests = model.requests();
    let tools = requests[0]["tools"].as_array().unwrap();
    let read = tools
        .iter()
        .find(|t| t["function"]["name"] == "fs__read_text_file")
        .unwrap_or_else(|| panic!("{tools:#?}"));
    assert_eq!(
        read["function"]["parameters"]["required"],
        serde_json::json!(["path"])
    );

    // What the server wrote to stderr is in the task's log.
    let task = state["id"].as_str().unwrap();
    let events = String::from_utf8_lossy(
        &run_ok(common::rein(&data).args(["tasks", "events", task, "--json"])).stdout,
    )
    .into_owned();
    assert!(
        events.contains("mcp_stderr") && events.contains("Secure MCP Filesystem Server"),
        "{events}"
    );
}

#[test]
fn a_denied_mcp_tool_is_refused_naming_the_rule() {
    let model = model::model();
    let (dir, data) = common::scratch();
    let plan = plan(dir.path(), "mcp: write", "mcp = [\"fs\"]", "");
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[[rules]]\nverdict = \"allow\"\nmcp = \"fs/*\"\n\
         [[rules]]\nverdict = \"deny\"\nmcp = \"fs/write_file\"\n",
    )
    .unwrap();

    let state = json(&run_ok(
        model
            .rein(&data)
            .arg("--policy")
            .arg(&policy)
            .args(["run", "--json"])
            .arg(&plan),
    ));
    assert_eq!(state["status"], "completed", "{state:#}");
    let text = agent_output(&state)["text"].as_str().unwrap().to_owned();
    assert!(
        text.contains("refused by the permission rules")
            && text.contains("deny mcp `fs/write_file`"),
        "{text}"
    );
    assert!(!dir.path().join("ws/x.txt").exists());
}

#[test]
fn an_mcp_tool_the_rules_ask_about_waits_for_a_person_and_runs_once_approved() {
    let model = model::model();
    let (dir, data) = common::scratch();
    let plan = plan(dir.path(), "mcp: write", "mcp = [\"fs\"]", "");
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[[rules]]\nverdict = \"ask\"\nmcp = \"fs/write_file\"\n",
    )
    .unwrap();
    let with_policy = |cmd: &mut std::process::Command| {
        cmd.arg("--policy").arg(&policy);
    };

    let mut run = model.rein(&data);
    with_policy(&mut run);
    let out = run
        .args(["run", "--no-wait", "--json"])
        .arg(&plan)
        .output()
        .unwrap();
    let paused: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(paused["status"], "paused", "{paused:#}");
    assert!(
        !dir.path().join("ws/x.txt").exists(),
        "nothing was written before a person said so"
    );
    let pending = json(&run_ok(common::rein(&data).args([
        "approvals",
        "list",
        "--status",
        "pending",
        "--json",
    ])));
    let request = &pending.as_array().unwrap()[0];
    let asked = request.to_string();
    assert!(asked.contains("fs/write_file"), "{asked}");
    run_ok(common::rein(&data).args([
        "approvals",
        "approve",
        request["id"].as_str().unwrap(),
        "--option",
        "rerun",
        "--as",
        "ana",
    ]));

    let mut resume = model.rein(&data);
    with_policy(&mut resume);
    let task = paused["id"].as_str().unwrap();
    let state = json(&run_ok(resume.args(["tasks", "resume", task, "--json"])));
    assert_eq!(state["status"], "completed", "{state:#}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ws/x.txt")).unwrap(),
        "written"
    );
    let text = agent_output(&state)["text"].as_str().unwrap().to_owned();
    assert!(text.contains("(approved by ana)"), "{text}");
}

#[test]
fn a_rein_killed_between_two_mcp_calls_does_not_repeat_the_first() {
    let model = model::model();
    let (dir, data) = common::scratch();
    let plan = plan(
        dir.path(),
        "mcp: move, wait, read",
        "mcp = [\"fs\"]\ntools = [\"run_command\"]",
        "",
    );
    std::fs::write(dir.path().join("ws/a.txt"), "moved once").unwrap();

    let mut runner = common::spawn_quiet(model.rein(&data).arg("run").arg(&plan));
    let task = eventually("the task exists", || task_ids(&data).first().cloned());
    let started = dir.path().join("ws/started");
    eventually("the command after the first MCP call is running", || {
        started.exists().then_some(())
    });
    common::kill9(&mut runner);
    assert_eq!(model.requests().len(), 2, "two model turns before the kill");

    let state = json(&run_ok(
        model.rein(&data).args(["tasks", "resume", &task, "--json"]),
    ));
    assert_eq!(state["status"], "completed", "{state:#}");
    // The move ran once (a second one would have found no a.txt), the read
    // found what it moved, and no model turn was asked for twice.
    let requests = model.requests();
    assert_eq!(requests.len(), 4);
    let answers: Vec<String> = requests[3]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(answers.len(), 3, "{answers:?}");
    assert!(answers[0].contains("Successfully moved"), "{answers:?}");
    assert!(answers[2].contains("moved once"), "{answers:?}");
    assert!(
        !answers.iter().any(|a| a.starts_with("error")),
        "{answers:?}"
    );
    assert!(!dir.path().join("ws/a.txt").exists());
}

/// A free loopback port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed when the test ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `rein --policy POLICY run ARGS.. PLAN` under the fake model, with
/// `policy` written beside the plan.
fn run_under(
    model: &model::Model,
    data: &Path,
    policy: &str,
    args: &[&str],
    plan: &Path,
) -> std::process::Output {
    let file = plan.with_file_name("policy.toml");
    std::fs::write(&file, policy).unwrap();
    model
        .rein(data)
        .arg("--policy")
        .arg(&file)
        .arg("run")
        .args(args)
        .arg(plan)
        .output()
        .unwrap()
}

#[test]
fn the_network_and_servers_an_agent_step_is_given_are_decided_by_the_rules_before_it_runs() {
    let model = model::model();
    let (dir, data) = common::scratch();
    let plan = plan(
        dir.path(),
        "mcp: list and read",
        "mcp = [\"fs\"]\nnetwork = true",
        "",
    );
    std::fs::write(dir.path().join("ws/notes.txt"), "the notes say hello").unwrap();

    // Denied: the plan is refused before anything runs, naming the rule.
    let deny_network = "[[rules]]\nverdict = \"deny\"\nnetwork = \"*\"\n";
    let out = run_under(&model, &data, deny_network, &[], &plan);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("network (any host)") && said.contains("deny network `*`"),
        "{said}"
    );
    // The stdio server's program and what it reads are decided too.
    let deny_node = "[[rules]]\nverdict = \"deny\"\ncommand = \"node **\"\n";
    let out = run_under(&model, &data, deny_node, &[], &plan);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("node "),
        "{out:?}"
    );
    let (_, modules) = filesystem_server();
    let deny_read = format!(
        "[[rules]]\nverdict = \"deny\"\npath = \"{}/**\"\naccess = \"read\"\n",
        modules.display()
    );
    let out = run_under(&model, &data, &deny_read, &[], &plan);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(task_ids(&data).is_empty(), "no task was made");
    assert!(model.requests().is_empty(), "the model was never asked");

    // Asked about: the step waits for a person, then runs.
    let ask_network = "[[rules]]\nverdict = \"ask\"\nnetwork = \"*\"\n";
    let out = run_under(&model, &data, ask_network, &["--no-wait"], &plan);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        model.requests().is_empty(),
        "nothing ran before a person said so"
    );
    let pending = json(&run_ok(common::rein(&data).args([
        "approvals",
        "list",
        "--json",
    ])));
    let request = &pending.as_array().unwrap()[0];
    assert_eq!(request["trigger"], "external_network_call", "{request:#}");
    assert_eq!(request["step_id"], "agent.permit", "{request:#}");
    assert!(
        request["title"]
            .as_str()
            .unwrap()
            .contains("Allow agent step `agent` to run with `network (any host)`"),
        "{request:#}"
    );
    run_ok(common::rein(&data).args(["approvals", "approve", request["id"].as_str().unwrap()]));
    let task = task_ids(&data)[0].clone();
    let file = plan.with_file_name("policy.toml");
    let state = json(&run_ok(
        model
            .rein(&data)
            .arg("--policy")
            .arg(&file)
            .args(["tasks", "resume", &task, "--json"]),
    ));
    assert_eq!(state["status"], "completed", "{state:#}");
    assert_eq!(agent_output(&state)["mcp"][0]["reach"]["network"], true);
}

#[test]
fn a_configured_server_the_rules_deny_is_refused_as_the_step_runs() {
    let model = model::model();
    let (dir, data) = common::scratch();
    let (fs, modules) = filesystem_server();
    let config = common::write_config(
        dir.path(),
        &format!(
            "[mcp_servers.cfs]\ncommand = \"node\"\nargs = [\"{}\", \".\"]\nallow_read = [\"{}\"]\n",
            fs.display(),
            modules.display()
        ),
    );
    let plan = plan(dir.path(), "mcp: echo", "mcp = [\"cfs\"]", "");
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[[rules]]\nverdict = \"deny\"\ncommand = \"node **\"\nreason = \"no node here\"\n",
    )
    .unwrap();
    // The plan names no server of its own to decide on: it is made, and the
    // step is refused when its configured server is known.
    let out = model
        .rein(&data)
        .arg("--config")
        .arg(&config)
        .arg("--policy")
        .arg(&policy)
        .args(["run", "--no-wait", "--json"])
        .arg(&plan)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let state: Value = serde_json::from_slice(&out.stdout).unwrap();
    let said = state.to_string();
    assert!(
        said.contains("is denied by") && said.contains("no node here"),
        "{state:#}"
    );
    assert!(model.requests().is_empty(), "the model was never asked");
}

#[test]
fn a_streamable_http_server_declared_in_the_config_file_serves_a_step() {
    let model = model::model();
    let (dir, data) = common::scratch();
    let port = free_port();
    let _server = Killed(common::spawn_quiet(
        std::process::Command::new("node")
            .arg(everything_server())
            .arg("streamableHttp")
            .env("PORT", port.to_string()),
    ));
    eventually("the everything server listens", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    });
    let config = common::write_config(
        dir.path(),
        &format!(
            "[mcp_servers.ev]\nurl = \"http://127.0.0.1:{port}/mcp\"\nheaders = {{ X-Team = \"docs\" }}\n"
        ),
    );
    let shown = json(&run_ok(
        common::rein(&data)
            .arg("--config")
            .arg(&config)
            .args(["config", "show", "--json"]),
    ));
    let ev = shown["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == "mcp_servers.ev")
        .unwrap_or_else(|| panic!("{shown:#}"))
        .clone();
    assert_eq!(
        ev["value"],
        format!("http: http://127.0.0.1:{port}/mcp (headers X-Team=<redacted>)")
    );

    let plan = plan(dir.path(), "mcp: echo", "mcp = [\"ev\"]", "");
    let state = json(&run_ok(
        model
            .rein(&data)
            .arg("--config")
            .arg(&config)
            .args(["run", "--json"])
            .arg(&plan),
    ));
    assert_eq!(state["status"], "completed", "{state:#}");
    let output = agent_output(&state);
    assert_eq!(output["text"], "Echo: hi from rein");
    assert_eq!(output["mcp"][0]["transport"], "streamable_http");
}

/// Runs the agent step `prompt` with MCP server `server` declared by
/// `table` (read access to the test servers' directory added), and returns
/// the two tool answers its final text joins.
fn two_answers(prompt: &str, server: &str, table: &str) -> (String, String) {
    let model = model::model();
    let (dir, data) = common::scratch();
    let plan = plan(
        dir.path(),
        prompt,
        &format!("mcp = [\"{server}\"]"),
        &format!(
            "[mcp_servers.{server}]\n{table}\nallow_read = [\"{}\"]\n",
            npm_packages::mcp_servers_dir().display()
        ),
    );
    let state = json(&run_ok(
        model.rein(&data).args(["run", "--json"]).arg(&plan),
    ));
    assert_eq!(state["status"], "completed", "{state:#}");
    let text = agent_output(&state)["text"].as_str().unwrap().to_owned();
    let (first, second) = text.split_once(" | ").unwrap();
    (first.to_owned(), second.to_owned())
}

#[test]
fn a_call_that_hangs_fails_and_the_server_is_started_again_for_the_next() {
    let (stalled, echoed) = two_answers(
        "mcp: stall, then echo",
        "ev",
        &format!(
            "command = \"node\"\nargs = [\"{}\", \"stdio\"]\ntimeout = \"1s\"",
            everything_server().display()
        ),
    );
    assert!(
        stalled.contains("did not answer `trigger-long-running-operation` within 1s")
            && stalled.contains("started again"),
        "{stalled}"
    );
    assert_eq!(echoed, "Echo: after the stall");
}

#[test]
fn a_server_that_crashes_during_a_call_fails_that_call_and_serves_the_next() {
    let server = npm_packages::mcp_servers_dir().join("crash_once.py");
    let (crashed, worked) = two_answers(
        "mcp: work twice",
        "cr",
        &format!("command = \"python3\"\nargs = [\"{}\"]", server.display()),
    );
    assert!(
        crashed.starts_with("error: MCP server `cr` failed during the call")
            && crashed.contains("exit status: 3")
            && crashed.contains("boom: the server fell over")
            && crashed.contains("started again for the next call"),
        "{crashed}"
    );
    assert_eq!(worked, "worked");
}

#[test]
fn a_server_that_cannot_start_or_is_not_declared_fails_the_step_saying_which() {
    let model = model::model();
    let (dir, data) = common::scratch();
    let plan = plan(
        dir.path(),
        "mcp: echo",
        "mcp = [\"broken\"]",
        "[mcp_servers.broken]\ncommand = \"no-such-mcp-server\"\n",
    );
    let state = failed_run(&model, &data, &plan);
    // A program that is not there is not retried: the task fails at once.
    assert_eq!(state["status"], "failed", "{state:#}");
    let error = state.to_string();
    assert!(
        error.contains("MCP server `broken` could not be started")
            && error.contains("no-such-mcp-server"),
        "{error}"
    );

    let plan = plan_naming(dir.path(), "nowhere");
    let error = failed_run(&model, &data, &plan).to_string();
    assert!(
        error.contains("names MCP server `nowhere`") && error.contains("[mcp_servers.nowhere]"),
        "{error}"
    );
}

/// `rein run --json PLAN`, which does not complete: the task's state.
fn failed_run(model: &model::Model, data: &Path, plan: &Path) -> Value {
    let out = model
        .rein(data)
        .args(["run", "--json"])
        .arg(plan)
        .output()
        .unwrap();
    assert!(!out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A plan whose agent step names `server`, which nothing declares.
fn plan_naming(dir: &Path, server: &str) -> PathBuf {
    write_plan(
        dir,
        "undeclared.toml",
        &format!(
            "description = \"undeclared\"\n[[steps]]\nid = \"agent\"\nkind = \"agent\"\nprompt = \"mcp: echo\"\nmcp = [\"{server}\"]\n"
        ),
    )
}

/// An MCP server's `allow_read` goes through the guard a step's does: a
/// plan's server that would read `/`, root's home or its keys is refused by
/// `rein plan check` and `rein run` before anything exists, naming the
/// server and the rule; a configured one is refused as the step starts it.
#[test]
fn an_mcp_servers_allow_read_is_guarded_at_check_and_at_start() {
    let model = model::model();
    let (dir, data) = common::scratch();
    for reach in ["/", "/root", "/root/.ssh", "/etc/shadow"] {
        let plan = write_plan(
            dir.path(),
            "reach.toml",
            &format!(
                "description = 'reach'\n\
                 [mcp_servers.peek]\ncommand = 'cat'\nargs = ['/etc/shadow']\nallow_read = ['{reach}']\n\
                 [[steps]]\nid = 'agent'\nkind = 'agent'\nprompt = 'mcp: echo'\nmcp = ['peek']\n"
            ),
        );
        for command in ["plan check", "run"] {
            let out = model
                .rein(&data)
                .args(command.split(' '))
                .arg(&plan)
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{reach}: {command}: {said}");
            assert!(
                said.contains(&format!("allow_read `{reach}`"))
                    && said.contains("MCP server `peek`")
                    && said.contains("refused"),
                "{reach}: {command}: {said}"
            );
        }
    }
    assert!(task_ids(&data).is_empty(), "nothing was made");
    // Declared in the configuration: refused as the step starts it.
    let config = common::write_config(
        dir.path(),
        "[mcp_servers.cpeek]\ncommand = \"cat\"\nargs = [\"/root/.ssh/id_ed25519\"]\nallow_read = [\"/root\"]\n",
    );
    let plan = write_plan(
        dir.path(),
        "configured.toml",
        "description = 'configured'\n\
         [[steps]]\nid = 'agent'\nkind = 'agent'\nprompt = 'mcp: echo'\nmcp = ['cpeek']\n",
    );
    let out = model
        .rein(&data)
        .arg("--config")
        .arg(&config)
        .args(["run", "--no-wait", "--json"])
        .arg(&plan)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let state: Value = serde_json::from_slice(&out.stdout).unwrap();
    let said = state.to_string();
    assert!(
        said.contains("refused to start") && said.contains("root's home"),
        "{state:#}"
    );
}

/// A step's own `permissions` govern its agent's MCP calls as the policy
/// file's do: a step-level `deny` refuses the call, a step-level `ask`
/// waits for a person.
#[test]
fn a_steps_own_rules_govern_its_mcp_calls() {
    let model = model::model();
    let (dir, data) = common::scratch();
    let denied = plan(
        dir.path(),
        "mcp: write",
        "mcp = [\"fs\"]\npermissions = [{ verdict = \"deny\", mcp = \"fs/write_file\", reason = \"read only\" }]",
        "",
    );
    let state = json(&run_ok(
        model.rein(&data).args(["run", "--json"]).arg(&denied),
    ));
    assert_eq!(state["status"], "completed", "{state:#}");
    let output = agent_output(&state);
    let text = output["text"].as_str().unwrap().to_owned();
    assert!(
        text.contains("refused by the permission rules") && text.contains("step `agent`"),
        "{text}"
    );
    assert!(!dir.path().join("ws/x.txt").exists());
    assert!(
        output["policy"]
            .as_str()
            .unwrap()
            .contains("1 from step `agent`"),
        "{output:#}"
    );

    let asked = tempfile::tempdir().unwrap();
    let data = asked.path().join("data");
    let asking = plan(
        asked.path(),
        "mcp: write",
        "mcp = [\"fs\"]\npermissions = [{ verdict = \"ask\", mcp = \"fs/write_file\" }]",
        "",
    );
    common::exits(
        model
            .rein(&data)
            .args(["run", "--no-wait", "--json"])
            .arg(&asking),
        3,
    );
    assert!(!asked.path().join("ws/x.txt").exists(), "nothing ran yet");
    let pending = common::pending(&data);
    assert_eq!(pending.len(), 1, "{pending:#?}");
    assert!(
        pending[0]["description"]
            .as_str()
            .unwrap()
            .contains("fs/write_file"),
        "{:#}",
        pending[0]
    );
}

/// Tool answers past the step's cap are cut for the model, which is told
/// where all of it is kept (and reads on from there); an answer past what
/// rein reads from a server at all is refused at once, not timed out.
#[test]
fn big_tool_answers_are_cut_kept_and_never_taken_for_a_timeout() {
    let model = model::model();
    let (dir, data) = common::scratch();
    let server = npm_packages::mcp_servers_dir().join("big_answer.py");
    let plan = plan(
        dir.path(),
        "mcp: big answers",
        "mcp = [\"big\"]\ntools = [\"read_file\"]",
        &format!(
            "[mcp_servers.big]\ncommand = \"python3\"\nargs = [\"{}\"]\ntimeout = \"30s\"\nallow_read = [\"{}\"]\n",
            server.display(),
            npm_packages::mcp_servers_dir().display()
        ),
    );
    let started = std::time::Instant::now();
    let state = json(&run_ok(
        model.rein(&data).args(["run", "--json"]).arg(&plan),
    ));
    assert_eq!(state["status"], "completed", "{state:#}");
    let text = agent_output(&state)["text"].as_str().unwrap().to_owned();
    let answers: Vec<&str> = text.split(" | ").collect();
    assert_eq!(answers.len(), 4, "{}", clip(&text));
    for (answer, bytes) in [(answers[0], 300_000), (answers[1], 20_000_000)] {
        assert!(
            answer.starts_with("BEGINxxx") && !answer.contains("END"),
            "{}",
            clip(answer)
        );
        assert!(
            answer.contains(&format!(
                "cut at 262144 of its {bytes} bytes (the step's max_tool_answer_bytes is 262144)"
            )) && answer.contains(".rein/tool-answers/agent-call_b"),
            "{}",
            clip(answer)
        );
    }
    let kept = dir.path().join("ws/.rein/tool-answers/agent-call_b1.txt");
    assert_eq!(std::fs::metadata(&kept).unwrap().len(), 20_000_000);
    assert!(
        answers[2]
            .starts_with("error: MCP server `big` answered `emit` with a message over 64 MiB")
            && !answers[2].contains("did not answer"),
        "{}",
        answers[2]
    );
    // The kept file, read on from an offset: its end.
    assert_eq!(answers[3], "xxxxxxxEND");
    // What the model was sent stayed small: no request carried a whole answer.
    let biggest = model
        .requests()
        .iter()
        .map(|r| r.to_string().len())
        .max()
        .unwrap();
    assert!(biggest < 1024 * 1024, "a request of {biggest} bytes");
    // Refused at once, not after the server's 30 s timeout.
    assert!(started.elapsed() < std::time::Duration::from_secs(25));
}

fn clip(text: &str) -> String {
    let mut end = text.len().min(300);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}
