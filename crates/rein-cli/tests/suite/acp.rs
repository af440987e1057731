//! An external ACP agent (the test agent on the official ACP TypeScript SDK)
//! serving an agent step from the command line: its permission request is an
//! approval a person answers from another `rein` process — also after the
//! runner was killed with SIGKILL while the agent waited.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use rein_test_support::npm as npm_packages;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::{eventually, in_workspace, json, pending, rein, run_ok, task_ids, write_plan};

const PLAN: &str = r#"
description = "Draft the notes with an external agent"

[[steps]]
id = "draft"
kind = "agent"
prompt = "write notes.md: drafted by the ACP agent"
runtime = "acp-test"
"#;

/// `rein tasks resume TASK --json` with the agent's plugin: the task's state.
fn resume(data: &Path, plugin: &Path, task: &str) -> serde_json::Value {
    json(&run_ok(
        rein(data)
            .arg("--plugin")
            .arg(plugin)
            .args(["tasks", "resume", task, "--json"]),
    ))
}

/// The agent's manifest, in `dir`.
fn manifest(dir: &Path) -> PathBuf {
    let script = npm_packages::acp_agent_dir().join("agent.mjs");
    let text = format!(
        "id = \"test-agent\"\nprotocol = \"acp\"\ncommand = [\"node\", {:?}]\n\n\
         [env]\nACP_TEST_STATE = {:?}\n\n\
         [[harnesses]]\nid = \"acp-test\"\nlabel = \"ACP test agent\"\nauto_selection_provider_ids = []\n",
        script.display().to_string(),
        dir.join("agent-state").display().to_string()
    );
    let path = dir.join("agent-plugin.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn events_of(data: &Path, task: &str) -> Vec<String> {
    let out = run_ok(rein(data).args(["tasks", "events", task, "--json"]));
    json(&out)
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn draft_output(state: &serde_json::Value) -> serde_json::Value {
    common::checkpoint(state, "draft", None)["output"].clone()
}

#[test]
fn a_person_answers_the_agents_permission_request_from_another_process() {
    let (dir, data) = common::scratch();
    let plugin = manifest(dir.path());
    let plan = write_plan(dir.path(), "acp.toml", PLAN);
    let listed = json(&run_ok(
        rein(&data)
            .arg("--plugin")
            .arg(&plugin)
            .args(["harness", "list", "--json"]),
    ));
    let row = common::item(&listed, "id", "acp-test").clone();
    assert_eq!(
        (row["protocol"].as_str(), row["plugin"].as_str()),
        (Some("acp"), Some("test-agent"))
    );
    let runner = rein(&data)
        .arg("--plugin")
        .arg(&plugin)
        .args(["run", "--json"])
        .arg(&plan)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let request = eventually("the agent asks", || pending(&data).first().cloned());
    assert_eq!(request["step_id"], "draft");
    assert_eq!(request["trigger"], "significant_change");
    assert!(
        request["title"]
            .as_str()
            .unwrap()
            .contains("Write notes.md"),
        "{request}"
    );
    let id = request["id"].as_str().unwrap();
    // Approved without an option: the recommended one, `allow_once`.
    assert_eq!(request["recommended_option"], "allow_once", "{request}");
    run_ok(rein(&data).args(["approvals", "approve", id]));
    let out = runner.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    let state: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(state["status"], "completed", "{state}");
    let task = state["id"].as_str().unwrap();
    assert_eq!(
        std::fs::read_to_string(in_workspace(&data, task, "notes.md")).unwrap(),
        "drafted by the ACP agent"
    );
    let output = draft_output(&state);
    assert_eq!(output["selection"]["selected"], "acp-test");
    assert_eq!(output["permissions"][0]["option"], "opt-allow");
    assert_eq!(output["side_effects"][0]["capture"], "callback");
    // The side effects are evidence too: the write came through rein's
    // callback, and so did the edit the tool call made.
    let bundle = output["evidence_bundle_id"]
        .as_str()
        .expect("an evidence bundle");
    let evidence = json(&run_ok(
        rein(&data).args(["evidence", "show", bundle, "--json"]),
    ));
    let items: Vec<(String, String)> = evidence["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["kind"].as_str().unwrap().to_owned(),
                i["capture"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        items,
        [
            ("file".to_owned(), "callback".to_owned()),
            ("external_side_effect".to_owned(), "callback".to_owned())
        ],
        "{evidence}"
    );
    assert_eq!(evidence["stepId"], "draft", "{evidence}");
    let events = events_of(&data, task);
    // The agent's plan and tool call, as they happened — all of them, also
    // those sent just before its turn ended.
    assert_eq!(
        events.iter().filter(|e| *e == "agent_update").count(),
        4,
        "{events:?}"
    );
    let shown =
        String::from_utf8(run_ok(rein(&data).args(["tasks", "events", task])).stdout).unwrap();
    for line in [
        "agent    plan: Write the file",
        "agent    tool Write notes.md\n",
        // Its later update names the call by its tool, not its id.
        "agent    tool Write notes.md: completed",
    ] {
        assert!(shown.contains(line), "{line:?} in {shown}");
    }
    for kind in [
        "runtime_selected",
        "human_approval_requested",
        "human_approval_received",
    ] {
        assert!(events.iter().any(|e| e == kind), "{kind} in {events:?}");
    }
}

#[test]
fn a_runner_killed_while_the_agent_waits_keeps_the_question_and_resumes_with_its_answer() {
    let (dir, data) = common::scratch();
    let plugin = manifest(dir.path());
    let plan = write_plan(dir.path(), "acp.toml", PLAN);
    let mut runner = common::spawn_quiet(
        rein(&data)
            .arg("--plugin")
            .arg(&plugin)
            .arg("run")
            .arg(&plan),
    );
    let request = eventually("the agent asks", || pending(&data).first().cloned());
    common::kill9(&mut runner);
    let task = task_ids(&data).first().cloned().unwrap();
    // The question outlives the runner, and is answered while nobody runs the task.
    let id = request["id"].as_str().unwrap();
    let shown = json(&run_ok(rein(&data).args([
        "approvals",
        "show",
        id,
        "--json",
    ])));
    assert_eq!(shown["status"], "pending");
    run_ok(rein(&data).args(["approvals", "deny", id, "--reason", "not today"]));
    // Resumed: the agent starts again and asks the same question; the answer
    // given meanwhile is the one it gets. No second request.
    let state = resume(&data, &plugin, &task);
    assert_eq!(state["status"], "completed", "{state}");
    let output = draft_output(&state);
    // The agent's session was in the step's journal: the new agent process
    // loaded it (the killed turn is its history).
    assert!(
        output["text"]
            .as_str()
            .unwrap()
            .starts_with("Resuming after 1 earlier turn(s)."),
        "{output}"
    );
    assert_eq!(output["permissions"][0]["decision"], "denied");
    assert_eq!(output["permissions"][0]["option"], "opt-reject");
    assert!(
        output["text"]
            .as_str()
            .unwrap()
            .contains("Not allowed to write notes.md"),
        "{output}"
    );
    assert!(!in_workspace(&data, &task, "notes.md").exists());
    let all = common::all_approvals(&data);
    assert_eq!(all.as_array().unwrap().len(), 1, "{all}");
}

#[test]
fn the_example_with_no_wait_pauses_on_the_agents_question_and_exits_3() {
    // The example in examples/acp, as the README runs it.
    npm_packages::acp_agent_dir();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/acp");
    let plugin = examples.join("agent-plugin.toml");
    let plan = examples.join("plan.toml");
    let (_dir, data) = common::scratch();
    let out = common::exits(
        rein(&data)
            .arg("--plugin")
            .arg(&plugin)
            .args(["run", "--no-wait"])
            .arg(&plan),
        3,
    );
    let request = pending(&data)
        .first()
        .cloned()
        .expect("the question is pending");
    let id = request["id"].as_str().unwrap();
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!("rein approvals approve {id}")),
        "{said}"
    );
    run_ok(rein(&data).args(["approvals", "approve", id, "--option", "allow_always"]));
    let task = task_ids(&data).first().cloned().unwrap();
    let state = resume(&data, &plugin, &task);
    assert_eq!(state["status"], "completed", "{state}");
    assert_eq!(
        draft_output(&state)["permissions"][0]["option"],
        "opt-always"
    );
    let notes = std::fs::read_to_string(in_workspace(&data, &task, "NOTES.md")).unwrap();
    assert!(notes.starts_with("Drafted by an external agent"), "{notes}");
}

/// On a terminal, the agent's question is asked inline like any other; here a
/// real pseudo-terminal (`script`) carries the typed answer back to the agent.
#[test]
fn on_a_terminal_the_agents_question_is_asked_inline() {
    let (dir, data) = common::scratch();
    let plugin = manifest(dir.path());
    let plan = write_plan(dir.path(), "acp.toml", PLAN);
    let child = common::rein_on_terminal(
        &data,
        &[Path::new("--plugin"), &plugin, Path::new("run"), &plan],
    );
    eventually("the agent asks", || pending(&data).first().cloned());
    // [2] is allow_always, the second kind the agent offers.
    let (code, screen) = common::type_and_wait(child, "2\n");
    assert_eq!(code, Some(0), "{screen}");
    assert!(
        screen.contains("? Agent `acp-test` asks permission to: Write notes.md"),
        "{screen}"
    );
    let task = task_ids(&data).first().cloned().unwrap();
    assert_eq!(
        std::fs::read_to_string(in_workspace(&data, &task, "notes.md")).unwrap(),
        "drafted by the ACP agent"
    );
    let all = common::all_approvals(&data);
    assert_eq!(all[0]["response"]["selected_option"], "allow_always");
    assert_eq!(all[0]["response"]["decided_by"], "terminal-user");
}

#[test]
fn an_acp_agent_is_handed_the_steps_mcp_servers_at_session_new() {
    let (dir, data) = common::scratch();
    let plugin = manifest(dir.path());
    let plan = write_plan(
        dir.path(),
        "mcp.toml",
        r#"
description = "Hand the MCP servers to the agent"

[mcp_servers.fs]
command = "node"
args = ["server.js", "."]
env = { DEBUG = "1" }

[mcp_servers.search]
url = "http://127.0.0.1:9/mcp"
headers = { X-Team = "docs" }

[[steps]]
id = "draft"
kind = "agent"
prompt = "which MCP servers?"
runtime = "acp-test"
mcp = ["fs", "search"]
"#,
    );
    let state = json(&run_ok(
        rein(&data)
            .arg("--plugin")
            .arg(&plugin)
            .args(["run", "--json"])
            .arg(&plan),
    ));
    assert_eq!(state["status"], "completed", "{state:#}");
    let text = draft_output(&state)["text"].as_str().unwrap().to_owned();
    let told: serde_json::Value =
        serde_json::from_str(text.trim_start_matches("Working on it. ")).unwrap();
    assert_eq!(
        told,
        serde_json::json!([
            { "name": "fs", "command": "node", "args": ["server.js", "."],
              "env": [{ "name": "DEBUG", "value": "1" }] },
            { "type": "http", "name": "search", "url": "http://127.0.0.1:9/mcp",
              "headers": [{ "name": "X-Team", "value": "docs" }] },
        ]),
        "{text}"
    );
}

#[test]
fn an_agents_empty_turn_fails_retryable_and_its_upstream_errors_are_classified_by_cause() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = manifest(dir.path());
    for (prompt, error_type, said) in [
        (
            "end with nothing",
            "transient",
            "ended its turn with nothing",
        ),
        ("upstream 429", "rate_limit", "API Error: 429"),
        ("upstream 503", "transient", "API Error: 503"),
        ("upstream 400", "validation_error", "API Error: 400"),
    ] {
        let data = dir.path().join(prompt.replace(' ', "-"));
        // Every kind of failure aborts at once, so that each is seen as it
        // was classified.
        let plan = write_plan(
            dir.path(),
            "plan.toml",
            &format!(
                "description = \"upstream\"\n[[steps]]\nid = \"draft\"\nkind = \"agent\"\nprompt = \"{prompt}\"\nruntime = \"acp-test\"\nrecovery = {{ transient = \"abort\", rate_limit = \"abort\", validation_error = \"abort\", fatal = \"abort\" }}\n"
            ),
        );
        let out = rein(&data)
            .arg("--plugin")
            .arg(&plugin)
            .args(["run", "--no-wait", "--json"])
            .arg(&plan)
            .output()
            .unwrap();
        let state = json(&out);
        assert_ne!(state["status"], "completed", "{prompt}: {state:#}");
        let step = common::checkpoint(&state, "draft", None);
        let error = step["error"].as_str().unwrap_or_default();
        assert!(error.contains(said), "{prompt}: {error}");
        assert_eq!(
            step["metadata"]["error_type"], error_type,
            "{prompt}: {step:#}"
        );
    }
}

/// An agent step's images go to an external ACP agent as `image` content
/// blocks when it says it takes them (`promptCapabilities.image`); one that
/// does not take them fails the step naming why, never losing them.
#[test]
fn images_go_to_an_acp_agent_that_takes_them_as_image_blocks() {
    let (dir, data) = common::scratch();
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("shot.png"), [0x89, b'P', b'N', b'G', 1, 2, 3]).unwrap();
    let plan = write_plan(
        dir.path(),
        "images.toml",
        "description = \"look\"\nworkspace = \"project\"\n[[steps]]\nid = \"draft\"\nkind = \"agent\"\nprompt = \"what images?\"\nruntime = \"acp-test\"\nimages = [\"shot.png\"]\n",
    );
    let plugin = manifest(dir.path());
    let with_images = dir.path().join("image-plugin.toml");
    std::fs::write(
        &with_images,
        std::fs::read_to_string(&plugin)
            .unwrap()
            .replace("[env]\n", "[env]\nACP_TEST_IMAGES = \"1\"\n"),
    )
    .unwrap();
    let state = json(&run_ok(
        rein(&data)
            .arg("--plugin")
            .arg(&with_images)
            .args(["run", "--json"])
            .arg(&plan),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    let text = draft_output(&state)["text"].as_str().unwrap().to_owned();
    assert!(
        text.contains(r#"[{"mimeType":"image/png","bytes":7}]"#),
        "{text}"
    );
    let out = rein(&data)
        .arg("--plugin")
        .arg(&plugin)
        .args(["run", "--json"])
        .arg(&plan)
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let state: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let failed = common::checkpoint(&state, "draft", Some("failed"));
    let error = failed["error"].as_str().unwrap_or_default();
    assert!(error.contains("promptCapabilities.image"), "{error}");
}
