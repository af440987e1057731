//! Goals and isolated completions from the command line, against a local fake
//! chat-completions server that speaks the real streaming wire format (the
//! hosted API cannot be reached here): `rein plan draft`, `rein run --goal`
//! (with a refused answer sent back, a person's confirmation, and a SIGKILL
//! while the model is being asked), and `rein complete --schema`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::model;

use std::path::Path;

use common::{eventually, json, rein, run_ok, task_ids};
use model::model;
use serde_json::Value;

const GOAL: &str = "Write release notes for the changes in CHANGELOG.md";

fn user_prompt(request: &Value) -> String {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap()
        .to_owned()
}

fn workspace(dir: &Path) -> std::path::PathBuf {
    let ws = dir.join("project");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("CHANGELOG.md"), "0.3.0\n- goals become plans\n").unwrap();
    ws
}

fn events(data: &Path, task: &str) -> Vec<Value> {
    let out = run_ok(rein(data).args(["tasks", "events", task, "--json"]));
    json(&out).as_array().unwrap().clone()
}

/// The checkpoints of a goal's planning (each decomposition asked for),
/// oldest first.
fn plan_checkpoints(state: &Value) -> Vec<&Value> {
    state["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "task_plan")
        .collect()
}

#[test]
fn plan_draft_writes_a_plan_that_runs_and_sends_a_refused_answer_back() {
    let m = model();
    let (dir, data) = common::scratch();
    let ws = workspace(dir.path());
    let file = dir.path().join("plan.toml");
    let out = run_ok(
        m.rein(&data)
            .args(["plan", "draft", "--goal", GOAL, "--workspace"])
            .arg(&ws)
            .arg("-o")
            .arg(&file),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("answer 1 was refused and sent back"),
        "{stderr}"
    );
    let asked = m.decompositions();
    assert_eq!(asked.len(), 2, "one refused answer, one accepted");
    for request in &asked {
        assert!(request.get("tools").is_none(), "isolated: {request}");
        assert_eq!(request["messages"][0]["role"], "system");
    }
    // The first prompt lists the workspace; the second carries the errors.
    assert!(user_prompt(&asked[0]).contains("CHANGELOG.md"));
    let retry = user_prompt(&asked[1]);
    assert!(retry.contains("\"delete\""), "{retry}");
    assert!(retry.contains("riskLevel"), "{retry}");

    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("kind = \"review\""), "{text}");
    assert!(text.contains("confirm = true"), "{text}");
    // What the draft says is a plan `rein plan check` takes, steps in order.
    let checked = json(&run_ok(
        rein(&data).args(["plan", "check", "--json"]).arg(&file),
    ));
    let ids: Vec<&str> = checked["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["confirm", "notes", "check"]);
    assert_eq!(checked["steps"][1]["type"], "write");
    assert_eq!(checked["steps"][2]["checkpoint"], "task_review");
    // No task was made.
    assert!(task_ids(&data).is_empty());
}

#[test]
fn run_goal_yes_decomposes_and_its_steps_write_the_files() {
    let m = model();
    let (dir, data) = common::scratch();
    let ws = workspace(dir.path());
    let state = json(&run_ok(
        m.rein(&data)
            .args(["run", "--goal", GOAL, "--yes", "--json", "--workspace"])
            .arg(&ws),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    let notes = std::fs::read_to_string(ws.join("RELEASE_NOTES.md")).unwrap();
    assert_eq!(notes, "rein 0.3.0: contracts, evidence and agent steps.\n");
    let task = state["id"].as_str().unwrap();
    // Its history says a model was asked for the steps, once per attempt.
    let followed =
        String::from_utf8_lossy(&run_ok(m.rein(&data).args(["tasks", "follow", task])).stdout)
            .into_owned();
    assert!(
        followed.contains("planning the goal: asking the model for steps (attempt 2)"),
        "{followed}"
    );
    // CP2: a refused attempt, then the accepted one with the decomposition.
    let plans = plan_checkpoints(&state);
    assert_eq!(plans.len(), 2, "{plans:?}");
    assert_eq!(plans[0]["status"], "failed");
    assert!(
        plans[0]["error"].as_str().unwrap().contains("refused"),
        "{}",
        plans[0]
    );
    assert_eq!(plans[1]["status"], "completed");
    assert_eq!(
        plans[1]["output"]["decomposition"]["steps"][0]["id"],
        "notes"
    );
    let types: Vec<String> = events(&data, task)
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect();
    assert!(types.contains(&"plan_decomposed".to_owned()), "{types:?}");
    // The finished task's one-line summary, asked of the goal's model with no tools.
    let shown =
        String::from_utf8(run_ok(rein(&data).args(["tasks", "show", task])).stdout).unwrap();
    assert!(
        shown.contains("summary: Wrote RELEASE_NOTES.md for 0.3.0 and checked it."),
        "{shown}"
    );
    let summaries: Vec<Value> = m
        .requests()
        .into_iter()
        .filter(|r| user_prompt(r).starts_with("Say in one line"))
        .collect();
    assert_eq!(summaries.len(), 1);
    assert!(summaries[0].get("tools").is_none());
    assert!(user_prompt(&summaries[0]).contains("- notes: Read CHANGELOG.md"));
    let step_requests: Vec<Value> = m
        .requests()
        .into_iter()
        .filter(|r| user_prompt(r).starts_with("Read CHANGELOG.md"))
        .collect();
    let tools: Vec<&str> = step_requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["read_file", "list_dir", "write_file"]);
    assert!(user_prompt(&step_requests[0]).contains(GOAL));
    // Every model call the task caused counts toward it: both decomposition
    // attempts, the step's turns, the summary; token for token as reported.
    let report = json(&run_ok(
        rein(&data).args(["usage", "--task", task, "--json"]),
    ));
    let requests = m.requests();
    assert_eq!(report["calls"], requests.len(), "{report}");
    let reported = common::reported(&requests, "/prompt_tokens");
    assert_eq!(report["input_tokens"], reported);
    assert_eq!(report["estimated"], false);
}

#[test]
fn a_goal_waits_for_a_person_to_confirm_its_plan_and_high_risk_steps() {
    let m = model();
    let (dir, data) = common::scratch();
    let ws = workspace(dir.path());
    let out = common::exits(
        m.rein(&data)
            .args([
                "run",
                "--goal",
                "risky notes",
                "--no-wait",
                "--json",
                "--workspace",
            ])
            .arg(&ws),
        3,
    );
    let state = json(&out);
    assert_eq!(state["status"], "paused");
    let task = state["id"].as_str().unwrap().to_owned();
    let asks = common::pending(&data);
    assert_eq!(asks.len(), 1, "{asks:?}");
    assert_eq!(asks[0]["step_id"], "confirm");
    let description = asks[0]["description"].as_str().unwrap();
    assert!(description.contains("notes, check"), "{description}");
    nothing_ran(&ws);
    let id = asks[0]["id"].as_str().unwrap();
    run_ok(rein(&data).args(["approvals", "approve", id, "--as", "alice"]));

    // The high-risk step asks next, before it runs.
    common::exits(
        m.rein(&data)
            .args(["tasks", "resume", &task, "--no-wait", "--json"]),
        3,
    );
    nothing_ran(&ws);
    let pending = common::pending(&data);
    let permit = pending.first().cloned().expect("a request waits");
    assert_eq!(permit["step_id"], "notes.permit");
    assert!(
        permit["description"]
            .as_str()
            .unwrap()
            .contains("overwrites the notes"),
        "{permit}"
    );
    run_ok(rein(&data).args([
        "approvals",
        "approve",
        permit["id"].as_str().unwrap(),
        "--as",
        "alice",
    ]));
    let state = json(&run_ok(
        m.rein(&data).args(["tasks", "resume", &task, "--json"]),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    assert!(ws.join("RELEASE_NOTES.md").exists());
    let ledger = json(&run_ok(rein(&data).args(["ledger", "list", "--json"])));
    let by_alice = ledger
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e.to_string().contains("alice"))
        .count();
    assert_eq!(by_alice, 2, "{ledger}");
}

fn nothing_ran(ws: &Path) {
    assert!(
        !ws.join("RELEASE_NOTES.md").exists(),
        "a step ran unconfirmed"
    );
}

#[test]
fn a_rein_killed_while_the_model_decomposes_asks_again_on_resume() {
    let m = model();
    let (dir, data) = common::scratch();
    let ws = workspace(dir.path());
    let mut runner = common::spawn_quiet(
        m.rein(&data)
            .args([
                "run",
                "--goal",
                "hang, then write release notes",
                "--yes",
                // One answer allowed: the interrupted request is not one.
                "--attempts",
                "1",
                "--workspace",
            ])
            .arg(&ws),
    );
    eventually("the model is being asked", || {
        (!m.decompositions().is_empty()).then_some(())
    });
    let task = task_ids(&data)[0].clone();
    common::kill9(&mut runner);
    let state = common::show(&data, &task);
    assert_eq!(state["status"], "in_progress", "{state}");

    let state = json(&run_ok(
        m.rein(&data).args(["tasks", "resume", &task, "--json"]),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    assert_eq!(m.decompositions().len(), 2, "{:#?}", m.decompositions());
    let plans = plan_checkpoints(&state);
    assert_eq!(plans.len(), 2);
    assert!(
        plans[0]["error"]
            .as_str()
            .unwrap()
            .starts_with("interrupted"),
        "{}",
        plans[0]
    );
    // The interrupted request gave no answer: the one after it is the
    // goal's first attempt.
    assert_eq!(plans[0]["attempt"], 1);
    assert_eq!(plans[1]["attempt"], 1);
    assert!(ws.join("RELEASE_NOTES.md").exists());
}

#[test]
fn an_empty_or_cut_off_decomposition_is_asked_again_naming_why() {
    for (goal, why) in [
        (
            "say nothing, then write release notes",
            "the answer was empty",
        ),
        (
            "cut off, then write release notes",
            "the answer was cut off at the token limit (4096 tokens, the goal's `max_tokens`)",
        ),
    ] {
        let m = model();
        let (dir, data) = common::scratch();
        let ws = workspace(dir.path());
        let state = json(&run_ok(
            m.rein(&data)
                .args([
                    "run",
                    "--goal",
                    goal,
                    "--yes",
                    "--attempts",
                    "2",
                    "--json",
                    "--workspace",
                ])
                .arg(&ws),
        ));
        assert_eq!(state["status"], "completed", "{goal}: {state}");
        let asked = m.decompositions();
        assert_eq!(asked.len(), 2, "{goal}");
        // Bounded, and asked for as structured output.
        assert_eq!(asked[0]["max_tokens"], 4096);
        assert_eq!(asked[0]["response_format"]["type"], "json_schema");
        assert!(
            asked[0]["response_format"]["json_schema"]["schema"]["properties"]["steps"].is_object(),
            "{}",
            asked[0]["response_format"]
        );
        // The second request says what was wrong with the first answer.
        assert!(asked[1].to_string().contains(why), "{goal}: {}", asked[1]);
        let plans = plan_checkpoints(&state);
        assert_eq!(plans.len(), 2);
        assert!(
            plans[0]["error"].as_str().unwrap().contains(why),
            "{goal}: {}",
            plans[0]
        );
        assert_eq!(plans[1]["attempt"], 2);
        assert!(ws.join("RELEASE_NOTES.md").exists(), "{goal}");
    }
}

#[test]
fn a_goal_whose_answers_are_always_refused_fails_naming_why() {
    let m = model();
    let (_dir, data) = common::scratch();
    let out = common::exits(
        m.rein(&data).args([
            "run",
            "--goal",
            "nonsense",
            "--yes",
            "--attempts",
            "2",
            "--json",
        ]),
        1,
    );
    let state = json(&out);
    assert_eq!(state["status"], "failed");
    let error = state["error"].as_str().unwrap();
    assert!(error.contains("refused 2 time(s)"), "{error}");
    assert!(error.contains("originalTask"), "{error}");
    assert_eq!(m.decompositions().len(), 2);
}

#[test]
fn complete_checks_the_answer_against_a_schema_and_sends_no_tools() {
    let m = model();
    let (dir, data) = common::scratch();
    let out = run_ok(m.rein(&data).args(["complete", "--json", "hello"]));
    let done = json(&out);
    assert_eq!(done["text"], "I do not know this script");
    assert_eq!(done["selection"]["selected"], "rein");
    assert_eq!(done["runtime"], "rein");
    let sent = m.requests();
    assert!(sent[0].get("tools").is_none(), "{}", sent[0]);

    // A schema the answer matches: the JSON is printed.
    let schema = dir.path().join("plan.schema.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "required": ["original_task", "steps"]}"#,
    )
    .unwrap();
    let out = run_ok(
        m.rein(&data)
            .args(["complete", "--schema"])
            .arg(&schema)
            .arg(format!("Goal: {GOAL}\n")),
    );
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["original_task"], "notes");

    // One it does not: exit 1, naming the violation.
    std::fs::write(&schema, r#"{"type": "array"}"#).unwrap();
    let stderr = common::fails(
        m.rein(&data)
            .args(["complete", "--schema"])
            .arg(&schema)
            .arg("hello"),
        1,
    );
    assert!(stderr.contains("does not match the schema"), "{stderr}");
    // An answer that calls a tool is refused (spec harness-sdk rule 20).
    let stderr = common::fails(m.rein(&data).args(["complete", "write notes"]), 1);
    assert!(stderr.contains("returned a tool call"), "{stderr}");
    // A schema that is none: exit 2.
    std::fs::write(&schema, r#"{"type": 7}"#).unwrap();
    common::exits(
        m.rein(&data)
            .args(["complete", "--schema"])
            .arg(&schema)
            .arg("hello"),
        2,
    );
}

#[test]
fn a_server_decomposes_a_goal_and_serves_completions() {
    let m = model();
    let (dir, data) = common::scratch();
    let ws = workspace(dir.path());
    let (_server, addr) = common::serve_with(
        m.rein(&data),
        Some(common::OPERATOR_TOKEN),
        &["--workspace-root".as_ref(), ws.as_os_str()],
    );
    let client = common::client(dir.path().join("client"), &addr, common::OPERATOR_TOKEN);

    let done = json(&run_ok(&mut client(&["complete", "--json", "hello"])));
    assert_eq!(done["text"], "I do not know this script");
    // A goal with a budget, over the API: the task's plan carries it.
    let state = json(&run_ok(
        client(&[
            "run",
            "--goal",
            GOAL,
            "--yes",
            "--budget-tokens",
            "1000000",
            "--json",
            "--workspace",
        ])
        .arg(&ws),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    assert!(ws.join("RELEASE_NOTES.md").exists());
    let id = state["id"].as_str().unwrap();
    let (status, plan) = common::operator_get(&addr, &format!("/admin/tasks/{id}/plan"));
    assert_eq!(status, 200, "{plan}");
    let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
    assert_eq!(plan["plan"]["budget"]["tokens"], 1_000_000, "{plan}");

    let post = |path: &str, body: &str| {
        common::http(
            &addr,
            "POST",
            path,
            Some(common::OPERATOR_TOKEN),
            Some(("application/json", body)),
        )
    };
    let (status, body) = post(
        "/admin/tasks",
        r#"{"goal": "x", "plan": {"original_task": "x", "steps": []}}"#,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("not both"), "{body}");
    let (status, body) = post("/admin/tasks", r#"{"goal": "x", "attempts": 0}"#);
    assert_eq!(status, 400, "{body}");
    let (status, body) = post("/admin/tasks", r#"{"goal": "x", "max_tokens": 100}"#);
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("max_tokens must be between 256 and 131072"),
        "{body}"
    );
    let (status, body) = post("/admin/tasks", r#"{"goal": "x", "budget": {"tokens": 0}}"#);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("budget: `tokens` is at least 1"), "{body}");
    let (status, body) = post(
        "/admin/tasks",
        r#"{"plan": {"original_task": "x", "steps": []}, "model": "m"}"#,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("goes with a `goal`"), "{body}");
    let (status, body) = post("/admin/completions", r#"{"prompt": " "}"#);
    assert_eq!(status, 400, "{body}");
    let (status, body) = post(
        "/admin/completions",
        r#"{"prompt": "hello", "schema": {"type": "array"}}"#,
    );
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("does not match the schema"), "{body}");
    let (status, body) = post(
        "/admin/completions",
        r#"{"prompt": "hello", "runtime": "nope"}"#,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("no harness `nope`"), "{body}");
    // A provider nothing here speaks is the caller's to fix, not the model's.
    let (status, body) = post(
        "/admin/completions",
        r#"{"prompt": "hello", "provider": "mistral"}"#,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("speaks the providers"), "{body}");
}

#[test]
fn a_rein_killed_in_a_decomposed_step_resumes_the_stored_plan_without_asking_again() {
    let m = model();
    let (dir, data) = common::scratch();
    let ws = workspace(dir.path());
    let mut runner = common::spawn_quiet(
        m.rein(&data)
            .args(["run", "--goal", "slow step", "--yes", "--workspace"])
            .arg(&ws),
    );
    eventually("the step's second command is running", || {
        ws.join("started").exists().then_some(())
    });
    common::kill9(&mut runner);
    let task = task_ids(&data)[0].clone();
    let state = json(&run_ok(
        m.rein(&data).args(["tasks", "resume", &task, "--json"]),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    // The plan was not asked for again, and the first command did not run twice.
    assert_eq!(m.decompositions().len(), 1);
    assert_eq!(
        std::fs::read_to_string(ws.join("runs.log")).unwrap(),
        "ran\n"
    );
    let decomposed = events(&data, &task)
        .iter()
        .filter(|e| e["type"] == "plan_decomposed")
        .count();
    assert_eq!(decomposed, 1);
}

/// A model that answers in the seed's exact `TaskDecomposition` shape
/// (camelCase, `blockingSteps`) is understood the first time: the draft
/// orders the steps as `blockingSteps` says and keeps what each step needs.
#[test]
fn a_decomposition_in_the_seeds_exact_shape_is_taken_at_once() {
    let m = model();
    let (dir, data) = common::scratch();
    let ws = workspace(dir.path());
    let out = run_ok(
        m.rein(&data)
            .args([
                "plan",
                "draft",
                "--goal",
                "seed shaped notes",
                "--workspace",
            ])
            .arg(&ws),
    );
    assert_eq!(m.decompositions().len(), 1, "accepted at the first answer");
    let draft = String::from_utf8_lossy(&out.stdout).into_owned();
    let plan: toml::Value = toml::from_str(&draft).unwrap();
    let steps = plan["steps"].as_array().unwrap();
    let check = steps
        .iter()
        .find(|s| s["id"].as_str() == Some("check"))
        .unwrap();
    assert_eq!(
        check["depends_on"].as_array().unwrap()[0].as_str(),
        Some("notes"),
        "{draft}"
    );
    assert_eq!(
        check["risk_description"].as_str(),
        Some("none: it only reads"),
        "{draft}"
    );
    let notes = steps
        .iter()
        .find(|s| s["id"].as_str() == Some("notes"))
        .unwrap();
    assert_eq!(
        notes["required_permissions"].as_array().unwrap()[0].as_str(),
        Some("file_write")
    );
    // The schema the model was asked to follow uses the seed's names.
    let system = m.decompositions()[0]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        system.contains("\"originalTask\"") && system.contains("\"blockingSteps\""),
        "{system}"
    );
}

/// Rule 20 through the command line: empty visible text is refused as an
/// answer unless `--visible strict` says it is one.
#[test]
fn an_empty_answer_is_refused_unless_strict_visibility_is_asked_for() {
    let m = model();
    let (_dir, data) = common::scratch();
    let said = common::fails(m.rein(&data).args(["complete", "Answer with nothing"]), 1);
    assert!(said.contains("returned empty output"), "{said}");
    let done = json(&run_ok(m.rein(&data).args([
        "complete",
        "--visible",
        "strict",
        "--json",
        "Answer with nothing",
    ])));
    assert_eq!(done["text"], "");
    assert_eq!(done["stop_reason"], "stop");
}

/// Rule 21 through the command line: a plugin that answers isolated
/// completions itself is reported as the runtime that answered; one that
/// declares rein's host-prepared path for its owner is dispatched there, and
/// rein is reported.
#[test]
fn the_reported_completion_runtime_is_the_one_that_answered() {
    let m = model();
    let (dir, data) = common::scratch();
    let manifest = |extra: &str| {
        common::echo_manifest(
            &dir.path().join("plugin.toml"),
            "echo",
            &[],
            &format!("[[harnesses]]\nid = \"echo\"\nisolated_completion = true\n{extra}"),
        )
    };
    let own = manifest("");
    let done = json(&run_ok(m.rein(&data).arg("--plugin").arg(&own).args([
        "complete",
        "--runtime",
        "echo",
        "--json",
        "hello there",
    ])));
    assert_eq!(done["text"], "Title: hello there");
    assert_eq!(
        (
            done["selection"]["selected"].as_str(),
            done["runtime"].as_str()
        ),
        (Some("echo"), Some("echo"))
    );
    let asked = m.requests().len();
    let host = manifest("isolated_completion_runtime = { host = \"openclaw\" }\n");
    let done = json(&run_ok(m.rein(&data).arg("--plugin").arg(&host).args([
        "complete",
        "--runtime",
        "echo",
        "--json",
        "hello there",
    ])));
    assert_eq!(
        done["text"], "I do not know this script",
        "rein's path asked the model"
    );
    assert_eq!(
        (
            done["selection"]["selected"].as_str(),
            done["runtime"].as_str()
        ),
        (Some("echo"), Some("rein"))
    );
    assert_eq!(m.requests().len(), asked + 1);
}

/// Rule 16 through the command line: `[auth_profiles.NAME]` in rein.toml are
/// the credentials an isolated completion walks, in `auth_order`: a key the
/// provider refuses (401) hands over to the next profile, and the completion
/// says which profile served it.
#[test]
fn an_isolated_completion_falls_back_across_auth_profiles_in_order() {
    let m = model();
    let (dir, data) = common::scratch();
    let config = common::write_config(
        dir.path(),
        "auth_order = [\"old\", \"new\"]\n\n[auth_profiles.old]\napi_key = \"sk-expired\"\n\n[auth_profiles.new]\napi_key_env = \"REIN_TEST_NEW_KEY\"\n",
    );
    let done = json(&run_ok(
        m.rein(&data)
            .env("REIN_TEST_NEW_KEY", "sk-good")
            .arg("--config")
            .arg(&config)
            .args(["complete", "--json", "hello"]),
    ));
    assert_eq!(done["profile"], "new", "{done}");
    let seen = m.requests();
    assert_eq!(
        seen[0]["refused_key"], "sk-expired",
        "the first profile was tried first"
    );
    assert_eq!(seen.len(), 2);
    // Only the refused key: the completion fails naming the credential.
    std::fs::write(&config, "[auth_profiles.old]\napi_key = \"sk-expired\"\n").unwrap();
    let said = common::fails(
        m.rein(&data)
            .arg("--config")
            .arg(&config)
            .args(["complete", "hello"]),
        1,
    );
    assert!(said.contains("401") && said.contains("old"), "{said}");
    // A profile order naming no profile, or a key variable not set: exit 2.
    for (text, named) in [
        ("auth_order = [\"ghost\"]\n", "ghost"),
        (
            "[auth_profiles.x]\napi_key_env = \"REIN_TEST_UNSET_KEY\"\n",
            "REIN_TEST_UNSET_KEY",
        ),
    ] {
        std::fs::write(&config, text).unwrap();
        let out = m
            .rein(&data)
            .arg("--config")
            .arg(&config)
            .args(["complete", "hello"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(named),
            "{text}"
        );
    }
}

/// A goal with no model configured is refused before anything is made
/// (exit 2), saying how to point rein at a model, a local one included.
#[test]
fn a_goal_with_no_model_configured_is_refused_before_anything_is_made() {
    let (_dir, data) = common::scratch();
    let said = common::fails(
        common::rein(&data)
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .args(["run", "--goal", "write the release notes", "--yes"]),
        2,
    );
    for needle in [
        "none is configured",
        "https://api.openai.com/v1",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "llama-cpp-python[server]",
        "Nothing was created",
    ] {
        assert!(said.contains(needle), "{needle}: {said}");
    }
    let listed = common::json(&common::run_ok(
        common::rein(&data).args(["tasks", "list", "--json"]),
    ))["items"]
        .clone();
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "{listed}");
}
