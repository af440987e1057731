//! rein as an ACP agent (`rein acp`), driven over stdio by a real ACP client:
//! the official TypeScript SDK's client side
//! (`crates/rein-runtimes/tests/acp/client.mjs`). The prompts are goals the
//! fake chat server decomposes (the hosted model API cannot be reached here);
//! the store, the sandbox, the steps and the client are real.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::model;
use rein_test_support::npm as npm_packages;

use std::path::Path;
use std::process::Command;

use common::{json, rein, run_ok};
use model::Model;
use serde_json::{Value, json};

/// A goal whose plan a person confirms, and whose first step is high-risk (it
/// asks before it runs): two questions.
const RISKY: &str = "risky notes";

fn workspace(dir: &Path) -> std::path::PathBuf {
    let ws = dir.join("project");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("CHANGELOG.md"), "0.3.0\n- goals become plans\n").unwrap();
    ws
}

/// Runs the test client's `scenario` against `rein acp` on `data`, in the
/// workspace `ws`; what the client saw.
fn client(m: &Model, data: &Path, ws: &Path, scenario: &str, env: &[(&str, &str)]) -> Value {
    let rein = m.rein(data);
    let mut node = Command::new("node");
    node.arg(npm_packages::acp_agent_dir().join("client.mjs"));
    for (key, value) in rein.get_envs() {
        match value {
            Some(v) => node.env(key, v),
            None => node.env_remove(key),
        };
    }
    node.env("REIN_BIN", common::rein_bin())
        .env("REIN_DATA_DIR", data)
        .env("REIN_ARGS", json!(["--data-dir", data]).to_string())
        .env("ACP_CWD", ws)
        .env("ACP_PROMPT", RISKY)
        .env("ACP_SCENARIO", scenario);
    for (k, v) in env {
        node.env(k, v);
    }
    let out = node.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let seen: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(seen["errors"], json!([]), "{seen:#}");
    seen
}

fn messages(seen: &Value) -> String {
    seen["updates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap())
        .collect()
}

fn the_task(data: &Path) -> Value {
    let ids = common::task_ids(data);
    assert_eq!(ids.len(), 1, "{ids:?}");
    json(&run_ok(
        rein(data).args(["tasks", "show", &ids[0], "--json"]),
    ))
}

/// Who decided each request, by the ledger.
fn decisions(data: &Path) -> Vec<String> {
    json(&run_ok(rein(data).args(["ledger", "list", "--json"])))
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["request_id"].is_string())
        .map(|e| e["who"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_prompt_runs_as_a_goal_task_its_plan_and_tool_calls_stream_and_its_questions_are_permission_requests()
 {
    let m = model::model();
    let (dir, data) = common::scratch();
    let ws = workspace(dir.path());
    let seen = client(&m, &data, &ws, "run", &[]);
    assert_eq!(seen["init"]["agentCapabilities"]["loadSession"], true);
    assert_eq!(seen["stops"], json!(["end_turn"]), "{seen:#}");
    // The turn's answer carries what the task's model calls used (ACP's
    // `usage`): the same as rein usage counts for the task.
    let task = the_task(&data);
    let report = json(&run_ok(rein(&data).args([
        "usage",
        "--task",
        task["id"].as_str().unwrap(),
        "--json",
    ])));
    let usage = &seen["usage"][0];
    assert!(report["calls"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(
        usage["totalTokens"].as_u64().unwrap(),
        report["input_tokens"].as_u64().unwrap() + report["output_tokens"].as_u64().unwrap(),
        "{usage} vs {report}"
    );
    assert_eq!(usage["cachedReadTokens"], report["cached_input_tokens"]);
    // Two questions: the plan's confirmation, then the high-risk step's.
    let asked = seen["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 2, "{seen:#}");
    assert!(
        asked[0]["title"]
            .as_str()
            .unwrap()
            .starts_with("Start this task?"),
        "{}",
        asked[0]
    );
    let kinds: Vec<(&str, &str)> = asked[1]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["optionId"].as_str().unwrap(), o["kind"].as_str().unwrap()))
        .collect();
    assert!(kinds.contains(&("deny", "reject_once")), "{kinds:?}");
    assert!(kinds.contains(&("skip", "reject_once")), "{kinds:?}");
    assert!(kinds.iter().any(|(_, k)| *k == "allow_once"), "{kinds:?}");
    // The plan: sent when the goal was decomposed, its entries following the
    // steps to the end.
    let plans = common::items(&seen["updates"], "sessionUpdate", "plan");
    assert!(plans.len() >= 3, "{plans:?}");
    let entries = |plan: &Value| -> Vec<(String, String)> {
        plan["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let content = e["content"].as_str().unwrap();
                let step = content.split(':').next().unwrap().to_owned();
                (step, e["status"].as_str().unwrap().to_owned())
            })
            .collect()
    };
    // The plan's steps, with the confirmation and the high-risk step's
    // permission rein adds; all pending at first, all completed at the end.
    let steps: Vec<String> = entries(plans[0]).into_iter().map(|(s, _)| s).collect();
    assert_eq!(steps, ["confirm", "notes", "check", "notes.permit"]);
    assert!(entries(plans[0]).iter().all(|(_, s)| s == "pending"));
    let last = plans.last().unwrap();
    assert!(
        entries(last).iter().all(|(_, s)| s == "completed"),
        "{last}"
    );
    assert_eq!(last["entries"][1]["priority"], "high");
    // In between, each step was shown running before it completed.
    let notes_running = plans
        .iter()
        .position(|p| entries(p)[1].1 == "in_progress")
        .unwrap();
    let notes_done = plans
        .iter()
        .position(|p| entries(p)[1].1 == "completed")
        .unwrap();
    assert!(notes_running < notes_done, "{plans:?}");
    // The agent steps' tool calls, with their outcome, and their answers.
    let writes = common::items(&seen["updates"], "toolCallId", "notes/call_2");
    assert_eq!(writes[0]["sessionUpdate"], "tool_call", "{writes:?}");
    assert_eq!(writes[0]["kind"], "edit");
    assert_eq!(writes[0]["title"], "write_file RELEASE_NOTES.md");
    assert_eq!(writes.last().unwrap()["status"], "completed", "{writes:?}");
    let said = messages(&seen);
    assert!(said.contains("Wrote RELEASE_NOTES.md."), "{said}");
    assert!(said.contains("The notes name the version."), "{said}");
    let task = the_task(&data);
    assert!(said.contains(&format!("Task {} completed.", task["id"].as_str().unwrap())));
    assert_eq!(task["status"], "completed");
    assert_eq!(task["session_id"], seen["sessionId"]);
    assert_eq!(
        task["resources"]["workspace_path"].as_str().unwrap(),
        ws.canonicalize().unwrap().to_str().unwrap()
    );
    assert!(ws.join("RELEASE_NOTES.md").exists());
    // Both answers are the client's, in the ledger.
    assert_eq!(
        decisions(&data),
        ["acp:rein-test-editor", "acp:rein-test-editor"]
    );
}

#[test]
fn a_decision_made_elsewhere_reaches_the_client_and_its_later_answer_is_told_it_came_too_late() {
    let m = model::model();
    let (dir, data) = common::scratch();
    let ws = workspace(dir.path());
    let seen = client(&m, &data, &ws, "elsewhere", &[]);
    assert_eq!(seen["stops"], json!(["end_turn"]), "{seen:#}");
    let said = messages(&seen);
    let confirm = seen["asked"][0]["id"].as_str().unwrap();
    assert!(
        said.contains(&format!("{confirm}: approved by alice")),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "Your answer to {confirm} came after it was decided (approved by alice): it was not taken."
        )),
        "{said}"
    );
    // The request's tool call shows how it was settled.
    let settled = seen["updates"]
        .as_array()
        .unwrap()
        .iter()
        .any(|u| u["toolCallId"] == confirm && u["status"] == "completed");
    assert!(settled, "{seen:#}");
    assert_eq!(the_task(&data)["status"], "completed");
    // First answer wins: alice's, then the client's to the next question.
    assert_eq!(decisions(&data), ["alice", "acp:rein-test-editor"]);
}

#[test]
fn a_cancel_pauses_the_task_the_turn_ends_cancelled_and_resume_takes_it_up() {
    let m = model::model();
    let (dir, data) = common::scratch();
    let ws = workspace(dir.path());
    let seen = client(&m, &data, &ws, "cancel", &[]);
    assert_eq!(seen["stops"], json!(["cancelled", "end_turn"]), "{seen:#}");
    let paused_at = seen["pausedAt"].as_u64().unwrap() as usize;
    let before: String = messages(&json!({
        "updates": seen["updates"].as_array().unwrap()[..paused_at]
    }));
    assert!(before.contains("paused"), "{before}");
    assert!(!before.contains("completed."), "{before}");
    assert!(messages(&seen).contains("Resuming task"), "{seen:#}");
    // Paused with nothing run, then resumed by the prompt to the end.
    let task = the_task(&data);
    assert_eq!(task["status"], "completed", "{task:#}");
    let types: Vec<String> = json(&run_ok(rein(&data).args([
        "tasks",
        "events",
        task["id"].as_str().unwrap(),
        "--json",
    ])))
    .as_array()
    .unwrap()
    .iter()
    .map(|e| e["type"].as_str().unwrap().to_owned())
    .collect();
    let paused = types.iter().position(|t| t == "task_paused").unwrap();
    let resumed = types.iter().position(|t| t == "task_resumed").unwrap();
    assert!(paused < resumed, "{types:?}");
    assert!(ws.join("RELEASE_NOTES.md").exists());
}

#[test]
fn a_session_loaded_after_rein_was_killed_replays_its_task_and_asks_its_question_again() {
    let m = model::model();
    let (dir, data) = common::scratch();
    let ws = workspace(dir.path());
    let seen = client(&m, &data, &ws, "kill", &[]);
    let loaded: Vec<&str> = seen["loaded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap())
        .collect();
    // The replay: the prompt, the plan, the question's tool call.
    assert_eq!(loaded.first(), Some(&"user_message_chunk"), "{loaded:?}");
    assert!(
        loaded.contains(&"plan") && loaded.contains(&"tool_call"),
        "{loaded:?}"
    );
    let asked: Vec<&str> = seen["asked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    // The question the killed rein asked is asked again, then the next one.
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert_eq!(asked[0], seen["killedAt"]);
    assert_eq!(asked[1], asked[0]);
    assert_ne!(asked[2], asked[0]);
    let task = the_task(&data);
    assert_eq!(task["status"], "completed", "{task:#}");
    assert!(ws.join("RELEASE_NOTES.md").exists());
}

#[test]
fn the_clients_mcp_servers_are_given_to_the_agent_steps_of_its_tasks() {
    let m = model::model();
    let (dir, data) = common::scratch();
    let ws = workspace(dir.path());
    std::fs::write(ws.join("notes.txt"), "the notes say hello").unwrap();
    // The reference filesystem server, as an editor's settings name it.
    let script = npm_packages::mcp_servers_dir()
        .join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    let servers = json!([{ "name": "fs", "command": "node",
        "args": [script, ws], "env": [] }]);
    let seen = client(
        &m,
        &data,
        &ws,
        "run",
        &[
            ("ACP_PROMPT", "mcp notes"),
            ("ACP_MCP", &servers.to_string()),
        ],
    );
    assert_eq!(seen["stops"], json!(["end_turn"]), "{seen:#}");
    let calls: Vec<(&str, &str)> = seen["updates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| {
            u["sessionUpdate"] == "tool_call_update"
                && u["toolCallId"].as_str().unwrap().starts_with("read/")
        })
        .map(|u| {
            (
                u["toolCallId"].as_str().unwrap(),
                u["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        calls,
        [("read/call_m1", "completed"), ("read/call_m2", "completed")],
        "{seen:#}"
    );
    let said = messages(&seen);
    assert!(said.contains("the notes say hello"), "{said}");
    let task = the_task(&data);
    assert_eq!(task["status"], "completed", "{task:#}");
    // The server ran in the step's sandbox, its code readable there.
    let output = common::checkpoint(&task, "read", Some("completed"))["output"].clone();
    let served = &output["mcp"][0];
    assert_eq!(served["name"], "fs", "{output:#}");
    assert_ne!(served["reach"]["sandbox"], "none", "{served}");
}

#[test]
fn rein_acp_refuses_a_server_url_and_names_what_is_wrong_with_a_cwd() {
    use std::io::{BufRead, Write};
    let (dir, data) = common::scratch();
    let said = common::fails(rein(&data).args(["--url", "http://127.0.0.1:9", "acp"]), 2);
    assert!(said.contains("does not take --url"));
    // Raw JSON-RPC lines: initialize, then a session on a relative directory.
    let mut child = rein(&data)
        .arg("acp")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    {
        let mut ask = |request: Value| {
            writeln!(stdin, "{request}").unwrap();
            let line = lines.next().unwrap().unwrap();
            serde_json::from_str::<Value>(&line).unwrap()
        };
        let init = ask(json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": 1, "clientCapabilities": {} } }));
        assert_eq!(init["result"]["agentInfo"]["name"], "rein", "{init}");
        let refused = ask(json!({ "jsonrpc": "2.0", "id": 2, "method": "session/new",
            "params": { "cwd": "project", "mcpServers": [] } }));
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        assert!(
            refused["error"]["data"]
                .as_str()
                .unwrap()
                .contains("`project` is not an absolute path"),
            "{refused}"
        );
        // A server name the model's tool names cannot carry.
        let refused = ask(json!({ "jsonrpc": "2.0", "id": 4, "method": "session/new",
            "params": { "cwd": workspace(dir.path()), "mcpServers": [
                { "name": "my files", "command": "node", "args": [], "env": [] }] } }));
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        assert!(
            refused["error"]["data"]
                .as_str()
                .unwrap()
                .contains("MCP server `my files`"),
            "{refused}"
        );
        // The data directory is no workspace.
        let refused = ask(json!({ "jsonrpc": "2.0", "id": 3, "method": "session/new",
            "params": { "cwd": data, "mcpServers": [] } }));
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        assert!(
            refused["error"]["data"]
                .as_str()
                .unwrap()
                .contains("cannot be a workspace"),
            "{refused}"
        );
    }
    drop(stdin);
    assert!(
        child.wait().unwrap().success(),
        "rein acp ends when its client does"
    );
}

/// A client speaking raw JSON-RPC lines to `rein acp`.
struct Raw {
    stdin: std::process::ChildStdin,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl Raw {
    fn read(&mut self) -> Value {
        serde_json::from_str(&self.lines.next().unwrap().unwrap()).unwrap()
    }

    /// Sends `request` and returns its answer (notifications skipped).
    fn ask(&mut self, request: Value) -> Value {
        use std::io::Write;
        writeln!(self.stdin, "{request}").unwrap();
        loop {
            let line = self.read();
            if line.get("id") == request.get("id") {
                return line;
            }
        }
    }
}

/// `rein acp` takes what a client sends within bounds, and goes on: a line
/// that is not UTF-8 gets a parse error; `session/load` of an id rein did
/// not issue (`../../etc`, 10,000 characters, a well-formed one it does not
/// know) is refused; a prompt past its size and a session past the most it
/// holds are refused naming the cap.
#[test]
fn rein_acp_refuses_what_it_cannot_take_and_goes_on() {
    use std::io::{BufRead, Write};
    let (dir, data) = common::scratch();
    let ws = workspace(dir.path());
    let mut child = rein(&data)
        .arg("acp")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut raw = Raw {
        stdin: child.stdin.take().unwrap(),
        lines: std::io::BufReader::new(child.stdout.take().unwrap()).lines(),
    };
    raw.stdin
        .write_all(b"{\"jsonrpc\": \"2.0\", \"id\": 1, \xff\xfe}\n")
        .unwrap();
    let parse = raw.read();
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    assert!(parse.to_string().contains("not UTF-8"), "{parse}");
    let init = raw.ask(json!({ "jsonrpc": "2.0", "id": 2, "method": "initialize",
        "params": { "protocolVersion": 1, "clientCapabilities": {} } }));
    assert_eq!(init["result"]["agentInfo"]["name"], "rein", "{init}");
    for (n, id) in [
        "../../etc".to_owned(),
        "x".repeat(10_000),
        format!("acp_{}", "0".repeat(26)),
    ]
    .iter()
    .enumerate()
    {
        let refused = raw.ask(
            json!({ "jsonrpc": "2.0", "id": 10 + n, "method": "session/load",
            "params": { "sessionId": id, "cwd": ws, "mcpServers": [] } }),
        );
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        let said = refused["error"]["data"].as_str().unwrap();
        assert!(
            said.contains("is not one rein issued") || said.contains("is known here"),
            "{said}"
        );
        assert!(
            said.len() < 400,
            "the id is not echoed whole: {} bytes",
            said.len()
        );
    }
    let opened = raw.ask(json!({ "jsonrpc": "2.0", "id": 20, "method": "session/new",
        "params": { "cwd": ws, "mcpServers": [] } }));
    let session = opened["result"]["sessionId"].as_str().unwrap().to_owned();
    let refused = raw.ask(
        json!({ "jsonrpc": "2.0", "id": 21, "method": "session/prompt",
        "params": { "sessionId": session,
            "prompt": [{ "type": "text", "text": "x".repeat(300 * 1024) }] } }),
    );
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["data"]
            .as_str()
            .unwrap()
            .contains("more than the 262144"),
        "{refused}"
    );
    // Sessions up to the cap (one is open already), then refused.
    for n in 0..63 {
        let opened = raw.ask(
            json!({ "jsonrpc": "2.0", "id": 100 + n, "method": "session/new",
            "params": { "cwd": ws, "mcpServers": [] } }),
        );
        assert!(opened["result"]["sessionId"].is_string(), "{opened}");
    }
    let refused = raw.ask(
        json!({ "jsonrpc": "2.0", "id": 200, "method": "session/new",
        "params": { "cwd": ws, "mcpServers": [] } }),
    );
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["data"]
            .as_str()
            .unwrap()
            .contains("the most one rein acp holds (64)"),
        "{refused}"
    );
    drop(raw);
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_cancelled_answer_ends_the_turn_and_a_reloaded_sessions_question_is_asked_once() {
    let m = model::model();
    let (dir, data) = common::scratch();
    let ws = workspace(dir.path());
    let seen = client(&m, &data, &ws, "reload", &[]);
    // `{"outcome": "cancelled"}` alone ends the turn `cancelled` (it did not
    // hang), and the question stays pending for another answerer.
    assert_eq!(seen["stops"], json!(["cancelled", "end_turn"]), "{seen:#}");
    let first = seen["asked"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        seen["pendingAfterCancel"],
        json!([first.clone()]),
        "{seen:#}"
    );
    // Asked again by the load, and not a third time by `/resume` while the
    // client had it.
    let times = seen["asked"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["id"] == first.as_str())
        .count();
    assert_eq!(times, 2, "{seen:#}");
    assert!(
        !messages(&seen).contains("came after it was decided"),
        "{seen:#}"
    );
    assert_eq!(the_task(&data)["status"], "completed");
}

#[test]
fn a_denied_plan_ends_with_no_step_in_progress_in_the_editors_plan() {
    let m = model::model();
    let (dir, data) = common::scratch();
    let ws = workspace(dir.path());
    let seen = client(&m, &data, &ws, "run", &[("ACP_ANSWERS", r#"["deny"]"#)]);
    assert_eq!(seen["stops"], json!(["end_turn"]), "{seen:#}");
    let plans = common::items(&seen["updates"], "sessionUpdate", "plan");
    let last = plans.last().expect("a plan update");
    let entries = last["entries"].as_array().unwrap();
    // Nothing spins: no entry in progress, none ticked that did not run.
    assert!(entries.iter().all(|e| e["status"] == "pending"), "{last:#}");
    let confirm = entries
        .iter()
        .find(|e| e["content"].as_str().unwrap().starts_with("confirm"))
        .unwrap();
    assert!(
        confirm["content"].as_str().unwrap().ends_with("(denied)"),
        "{confirm}"
    );
}

#[test]
fn a_client_without_a_permission_handler_ends_the_turn_and_the_question_stays_pending() {
    // acp-client (from PyPI; `.ci/run` installs it) answers every permission
    // request `cancelled` when it has no handler.
    let m = model::model();
    let (dir, data) = common::scratch();
    let ws = workspace(dir.path());
    let configured = m.rein(&data);
    let mut python = Command::new("python3");
    python.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/acp_client/no_handler.py"
    ));
    for (key, value) in configured.get_envs() {
        match value {
            Some(v) => python.env(key, v),
            None => python.env_remove(key),
        };
    }
    let out = python
        .env("REIN_BIN", common::rein_bin())
        .env("REIN_ARGS", json!(["--data-dir", data]).to_string())
        .env("ACP_CWD", &ws)
        .env("ACP_PROMPT", RISKY)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("No module named 'acp_client'"),
        "acp-client is not installed: `pip install acp-client==0.1.0` (.ci/run does)"
    );
    assert!(out.status.success(), "{stderr}");
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The turn ended (within the client's 60 s), the task paused, and the
    // plan's confirmation waits for another answerer.
    let reply = seen["reply"].as_str().unwrap();
    assert!(reply.contains("paused"), "{seen:#}");
    let task = the_task(&data);
    assert_eq!(task["status"], "paused", "{task:#}");
    let pending = json(&run_ok(rein(&data).args([
        "approvals",
        "list",
        "--status",
        "pending",
        "--json",
    ])));
    let titles: Vec<&str> = pending
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["title"].as_str().unwrap())
        .collect();
    assert_eq!(titles.len(), 1, "{pending:#}");
    assert!(titles[0].starts_with("Start this task?"), "{titles:?}");
}

/// An image an editor sends with its prompt reaches the attempts of the
/// task's agent steps: kept in the workspace (`.rein/images/`), given to every
/// agent step of the goal. Here the steps run on a plugin's harness (the
/// built-in runtime does not send images), which says what it was shown; the
/// goal is decomposed on rein's own path, as the plugin declares.
#[test]
fn a_prompts_image_reaches_the_agent_steps_of_its_task() {
    let m = model::model();
    let (dir, data) = common::scratch();
    let ws = workspace(dir.path());
    let plugin = common::echo_manifest(
        &dir.path().join("echo.toml"),
        "echo",
        &[],
        "[[harnesses]]\nid = \"echo\"\nisolated_completion = true\nisolated_completion_runtime = { host = \"rein\" }\n",
    );
    let args = json!(["--data-dir", data, "--plugin", plugin, "--runtime", "echo"]).to_string();
    // "\x89PNG" and three bytes, in base64.
    let seen = client(
        &m,
        &data,
        &ws,
        "run",
        &[
            ("REIN_ARGS", &args),
            (
                "ACP_PROMPT",
                "Write release notes for the changes in CHANGELOG.md",
            ),
            ("ACP_IMAGE", "iVBORwECAw=="),
        ],
    );
    assert_eq!(
        seen["init"]["agentCapabilities"]["promptCapabilities"]["image"],
        true
    );
    assert_eq!(seen["stops"], json!(["end_turn"]), "{seen:#}");
    let task = the_task(&data);
    assert_eq!(task["status"], "completed", "{task}");
    let images: Vec<_> = std::fs::read_dir(ws.join(".rein/images"))
        .unwrap()
        .collect();
    assert_eq!(images.len(), 1);
    let agent_outputs: Vec<String> = task["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "completed" && c["output"]["selection"]["selected"] == "echo")
        .map(|c| c["output"]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(agent_outputs.len(), 2, "{task}");
    for text in agent_outputs {
        assert!(
            text.contains("image/png .rein/images/") && text.ends_with(" 7 bytes 89504e47]"),
            "{text}"
        );
    }
}
