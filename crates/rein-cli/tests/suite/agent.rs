//! Agent steps from the command line against a local fake chat-completions
//! server (the hosted API cannot be reached here): `rein run` with an agent
//! step, killed with SIGKILL between two tool calls and resumed — the first
//! tool call and the model turns already answered are not repeated.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use rein_protocol::usage::thousands;
use rein_test_support::model as fake;

use common::{eventually, in_workspace, json, rein, run_ok, task_ids, write_plan};

const PLAN: &str = r#"
description = "Run two commands through the agent"

[[steps]]
id = "agent"
kind = "agent"
prompt = "twice"
tools = ["run_command"]
"#;

#[test]
fn a_rein_killed_between_two_tool_calls_resumes_without_repeating_the_first() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (base, seen) = runtime.block_on(fake::fake_model());
    let (_dir, data, plan) = common::with_plan("agent.toml", PLAN);
    let with_model = |cmd: &mut std::process::Command| {
        cmd.env("OPENAI_BASE_URL", &base)
            .env("OPENAI_API_KEY", "sk-test")
            .env("REIN_MODEL", "gpt-test");
    };

    let mut run = rein(&data);
    with_model(&mut run);
    let mut runner = common::spawn_quiet(run.arg("run").arg(&plan));
    let task = eventually("the task exists", || task_ids(&data).first().cloned());
    let started = in_workspace(&data, &task, "started");
    eventually("the second tool call is running", || {
        started.exists().then_some(())
    });
    common::kill9(&mut runner);
    assert_eq!(
        seen.0.lock().unwrap().len(),
        2,
        "two model turns before the kill"
    );

    let mut resume = rein(&data);
    with_model(&mut resume);
    let state = json(&run_ok(resume.args(["tasks", "resume", &task, "--json"])));
    assert_eq!(state["status"], "completed", "{state}");
    // The first command ran once; the interrupted one ran again; no model turn
    // was asked for twice.
    let runs = std::fs::read_to_string(in_workspace(&data, &task, "runs.log")).unwrap();
    assert_eq!(runs, "ran\n");
    let requests = seen.0.lock().unwrap().clone();
    assert_eq!(requests.len(), 3);
    let last = requests[2]["messages"].as_array().unwrap();
    let answers: Vec<&str> = last
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(answers.len(), 2);
    assert!(answers[1].contains("second"), "{answers:?}");
    let output = common::checkpoint(&state, "agent", None)["output"].clone();
    assert_eq!(output["text"], "both ran");
    assert_eq!(output["selection"]["selected"], "rein");
    // Metered: what the server reported for its three turns, token for
    // token — the two before the kill read back from the journal, none
    // counted twice.
    let reported = |field: &str| common::reported(&requests, field);
    let usage = &output["usage"];
    assert_eq!(usage["input_tokens"], reported("/prompt_tokens"), "{usage}");
    assert_eq!(
        usage["cached_input_tokens"],
        reported("/prompt_tokens_details/cached_tokens")
    );
    assert_eq!(usage["output_tokens"], reported("/completion_tokens"));
    assert_eq!(usage["reasoning_tokens"], 0);
    assert!(usage.get("estimated").is_none(), "{usage}");
    assert_eq!(
        usage["by_model"]["openai/gpt-test"]["input_tokens"],
        usage["input_tokens"]
    );
    assert!(reported("/prompt_tokens") > 0);
    // Each turn's usage is journaled with it, with the model that served it.
    let turns: Vec<serde_json::Value> = requests
        .iter()
        .map(|r| r["stream_options"].clone())
        .collect();
    assert!(
        turns.iter().all(|o| o["include_usage"] == true),
        "{turns:?}"
    );
    // `rein tasks show` says it, per step and in all.
    let mut show = rein(&data);
    let shown = run_ok(show.args(["tasks", "show", &task]));
    let shown = String::from_utf8_lossy(&shown.stdout);
    let line = format!(
        "model usage: {} in ({} cached) / {} out tokens",
        thousands(reported("/prompt_tokens")),
        thousands(reported("/prompt_tokens_details/cached_tokens")),
        thousands(reported("/completion_tokens"))
    );
    assert!(shown.contains(&line), "{line}\n{shown}");
    // No price configured: unpriced, never $0.
    assert!(usage.get("cost_usd").is_none(), "{usage}");
    assert_eq!(usage["unpriced"], serde_json::json!(["openai/gpt-test"]));
    assert!(shown.contains(&format!("{line} unpriced")), "{shown}");
    let report = json(&run_ok(rein(&data).args(["usage", "--json"])));
    assert_eq!(report["input_tokens"], usage["input_tokens"], "{report}");
    assert_eq!(report["cost_usd"], serde_json::Value::Null);
    assert_eq!(report["unpriced"], serde_json::json!(["openai/gpt-test"]));
}

/// With prices in `rein.toml`, a step's usage is costed by the formula:
/// (input − cached) × input price + cached × cached price + output ×
/// output price, per million tokens.
#[test]
fn a_priced_models_usage_is_costed_by_the_formula() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (base, seen) = runtime.block_on(fake::fake_model());
    let (dir, data) = common::scratch();
    let config = common::write_config(
        dir.path(),
        "[models.\"openai/gpt-test\"]\ninput_usd_per_mtok = 2.0\ncached_input_usd_per_mtok = 0.5\noutput_usd_per_mtok = 8.0\ncontext_window = 128000\n",
    );
    let plan = write_plan(
        dir.path(),
        "notes.toml",
        "description = \"notes\"\n[[steps]]\nid = \"agent\"\nkind = \"agent\"\nprompt = \"write notes\"\ntools = [\"write_file\", \"run_command\"]\n",
    );
    let mut run = rein(&data);
    run.env("OPENAI_BASE_URL", &base)
        .env("OPENAI_API_KEY", "sk-test")
        .env("REIN_MODEL", "gpt-test")
        .arg("--config")
        .arg(&config)
        .args(["run", "--json"])
        .arg(&plan);
    let state = json(&run_ok(&mut run));
    assert_eq!(state["status"], "completed", "{state}");
    let usage = common::checkpoint(&state, "agent", None)["output"]["usage"].clone();
    let requests = seen.0.lock().unwrap().clone();
    let reported = |field: &str| common::reported(&requests, field) as f64;
    let (input, cached, output) = (
        reported("/prompt_tokens"),
        reported("/prompt_tokens_details/cached_tokens"),
        reported("/completion_tokens"),
    );
    let expected = ((input - cached) * 2.0 + cached * 0.5 + output * 8.0) / 1e6;
    let cost = usage["cost_usd"].as_f64().unwrap();
    assert!(
        (cost - expected).abs() < 1e-12,
        "{cost} vs {expected}: {usage}"
    );
    assert_eq!(
        usage["by_model"]["openai/gpt-test"]["cost_usd"],
        usage["cost_usd"]
    );
    assert!(usage.get("unpriced").is_none());
    // `rein usage` reads the same from the store: in all, by task, model, day.
    let report = |args: &[&str]| {
        json(&run_ok(
            rein(&data)
                .arg("--config")
                .arg(&config)
                .args(["usage", "--json"])
                .args(args),
        ))
    };
    let all = report(&[]);
    assert_eq!(all["input_tokens"], usage["input_tokens"], "{all}");
    assert_eq!(all["cached_input_tokens"], usage["cached_input_tokens"]);
    assert_eq!(all["output_tokens"], usage["output_tokens"]);
    assert_eq!(all["calls"], requests.len());
    assert!(
        (all["cost_usd"].as_f64().unwrap() - expected).abs() < 1e-12,
        "{all}"
    );
    let task = state["id"].as_str().unwrap();
    let by_task = report(&["--by", "task"]);
    assert_eq!(by_task["rows"][0]["key"], task, "{by_task}");
    assert_eq!(by_task["rows"][0]["input_tokens"], usage["input_tokens"]);
    let by_model = report(&["--by", "model"]);
    assert_eq!(by_model["rows"][0]["key"], "openai/gpt-test", "{by_model}");
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    assert_eq!(report(&["--by", "day"])["rows"][0]["key"], today);
    assert_eq!(report(&["--task", task])["calls"], requests.len());
    assert_eq!(report(&["--since", "1h"])["calls"], requests.len());
    assert_eq!(report(&["--until", "1h"])["calls"], 0);
    let shown = run_ok(
        rein(&data)
            .arg("--config")
            .arg(&config)
            .args(["usage", "--by", "model"]),
    );
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("openai/gpt-test") && shown.contains("$0.0"),
        "{shown}"
    );
    let bad = common::exits(rein(&data).args(["usage", "--by", "week"]), 2);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("task, model or day"));
    // `rein config show` lists what it knows of the model.
    let shown = run_ok(
        rein(&data)
            .arg("--config")
            .arg(&config)
            .args(["config", "show"]),
    );
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("models.openai/gpt-test")
            && shown.contains("input $2/Mtok, cached input $0.5/Mtok, output $8/Mtok, context window 128000 tokens"),
        "{shown}"
    );
    // A price that is not one is refused, naming it.
    std::fs::write(
        &config,
        "[models.\"openai/gpt-test\"]\ninput_usd_per_mtok = -1\n",
    )
    .unwrap();
    let said = common::fails(
        rein(&data)
            .arg("--config")
            .arg(&config)
            .args(["config", "show"]),
        2,
    );
    assert!(
        said.contains("models.\"openai/gpt-test\"") && said.contains("input_usd_per_mtok"),
        "{said}"
    );
}

#[test]
fn the_example_agent_plan_runs_against_any_openai_compatible_endpoint() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (base, seen) = runtime.block_on(fake::fake_model());
    let (_dir, data) = common::scratch();
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/agent.toml");
    let state = json(&run_ok(
        rein(&data)
            .env("OPENAI_BASE_URL", &base)
            .env("REIN_MODEL", "local-model")
            .args(["run", "--json"])
            .arg(&example),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    let task = state["id"].as_str().unwrap();
    let notes = std::fs::read_to_string(in_workspace(&data, task, "RELEASE_NOTES.md")).unwrap();
    assert_eq!(notes, "rein 0.2.0: contracts, evidence and agent steps.\n");
    let requests = seen.0.lock().unwrap().clone();
    assert_eq!(requests[0]["model"], "local-model");
    assert_eq!(requests.len(), 3);
}

/// A rein killed (SIGKILL) while its step waits at a budget question: the
/// question stays, is answered while nobody runs the task, and the resumed
/// step takes the answer — the grant journaled once, no turn asked twice,
/// no turn counted twice.
#[test]
fn a_rein_killed_during_a_budget_question_loses_nothing_and_counts_nothing_twice() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (base, seen) = runtime.block_on(fake::fake_model());
    let (_dir, data, plan) = common::with_plan(
        "budget.toml",
        "description = \"budget\"\n[[steps]]\nid = \"agent\"\nkind = \"agent\"\nprompt = \"list three times\"\ntools = [\"list_dir\"]\nbudget = { tokens = 300 }\n",
    );
    let with_model = |cmd: &mut std::process::Command| {
        cmd.env("OPENAI_BASE_URL", &base)
            .env("OPENAI_API_KEY", "sk-test")
            .env("REIN_MODEL", "gpt-test");
    };
    let mut run = rein(&data);
    with_model(&mut run);
    let mut runner = common::spawn_quiet(run.arg("run").arg(&plan));
    let question = eventually("the budget question", || {
        common::pending(&data).first().cloned()
    });
    assert!(
        question["title"]
            .as_str()
            .unwrap()
            .starts_with("step `agent` has used "),
        "{question}"
    );
    common::kill9(&mut runner);
    let asked = seen.0.lock().unwrap().len();
    assert!(asked >= 1);
    let id = question["id"].as_str().unwrap();
    run_ok(rein(&data).args([
        "approvals",
        "approve",
        id,
        "--option",
        "allow the amount given as the reason",
        "--reason",
        "100000 tokens",
        "--as",
        "ana",
    ]));
    let task = task_ids(&data).remove(0);
    let mut resume = rein(&data);
    with_model(&mut resume);
    let state = json(&run_ok(resume.args(["tasks", "resume", &task, "--json"])));
    assert_eq!(state["status"], "completed", "{state}");
    // The answer given while rein was down was taken: no second question.
    let all = json(&run_ok(rein(&data).args([
        "approvals",
        "list",
        "--status",
        "all",
        "--json",
    ])));
    assert_eq!(all.as_array().unwrap().len(), 1, "{all}");
    // Four turns in all (three listings and the answer), each asked once,
    // each counted once, token for token.
    let requests = seen.0.lock().unwrap().clone();
    assert_eq!(requests.len(), 4, "{asked} before the kill");
    let report = json(&run_ok(
        rein(&data).args(["usage", "--task", &task, "--json"]),
    ));
    assert_eq!(report["calls"], 4, "{report}");
    let reported = common::reported(&requests, "/prompt_tokens");
    assert_eq!(report["input_tokens"], reported);
    // The grant is in the ledger, with who gave it and why.
    let ledger = json(&run_ok(rein(&data).args(["ledger", "list", "--json"])));
    let grant = common::item(&ledger, "request_id", id);
    assert_eq!(grant["who"], "ana");
}

/// A rein killed (SIGKILL) while its step's conversation is being
/// compacted — its summary request in flight — resumes and compacts again:
/// the summary nobody answered is neither journaled nor counted, no turn is
/// asked twice, and what was metered equals what the server reported.
#[test]
fn a_rein_killed_during_a_compaction_loses_nothing_and_counts_nothing_twice() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (base, seen) = runtime.block_on(fake::fake_model());
    let (dir, data) = common::scratch();
    // A window the step's turns outgrow.
    let config = common::write_config(
        dir.path(),
        "[models.\"openai/gpt-test\"]\ncontext_window = 300\n",
    );
    let plan = write_plan(
        dir.path(),
        "compact.toml",
        "description = \"compact\"\n[[steps]]\nid = \"agent\"\nkind = \"agent\"\nprompt = \"list three times\"\ntools = [\"list_dir\"]\n",
    );
    let with_model = |cmd: &mut std::process::Command| {
        cmd.env("OPENAI_BASE_URL", &base)
            .env("OPENAI_API_KEY", "sk-test")
            .env("REIN_MODEL", "gpt-test")
            .arg("--config")
            .arg(&config);
    };
    let mut run = rein(&data);
    with_model(&mut run);
    let mut runner = common::spawn_quiet(run.arg("run").arg(&plan));
    let summarising = |r: &serde_json::Value| r.get("tools").is_none();
    eventually("the summary request is in flight", || {
        if let Ok(Some(status)) = runner.try_wait() {
            panic!("rein ended ({status}) before it compacted");
        }
        seen.0.lock().unwrap().iter().any(summarising).then_some(())
    });
    common::kill9(&mut runner);
    let before = seen.0.lock().unwrap().len();
    let task = task_ids(&data).remove(0);
    let mut resume = rein(&data);
    with_model(&mut resume);
    let state = json(&run_ok(resume.args(["tasks", "resume", &task, "--json"])));
    assert_eq!(state["status"], "completed", "{state}");
    let requests = seen.0.lock().unwrap().clone();
    // The resumed step summarised again, then went on; no turn before the
    // kill was asked again.
    let summaries = requests.iter().filter(|r| summarising(r)).count();
    assert_eq!(summaries, 2, "{before} requests before the kill");
    // Four turns (three listings and the answer), each asked once.
    let turns = requests.iter().filter(|r| !summarising(r)).count();
    assert_eq!(turns, 4, "{before} requests before the kill");
    // What was metered: the answered requests, token for token; the one
    // nobody answered, nowhere.
    let answered: Vec<serde_json::Value> = requests
        .iter()
        .filter(|r| r.get("reported_usage").is_some())
        .cloned()
        .collect();
    assert_eq!(answered.len(), requests.len() - 1);
    let report = json(&run_ok(
        rein(&data).args(["usage", "--task", &task, "--json"]),
    ));
    assert_eq!(report["calls"], answered.len(), "{report}");
    let reported = common::reported(&answered, "/prompt_tokens");
    assert_eq!(report["input_tokens"], reported);
    // One compaction journaled, and said in the task's log.
    let events = json(&run_ok(
        rein(&data).args(["tasks", "events", &task, "--json"]),
    ));
    let compacted = common::items(&events, "type", "compacted").len();
    assert_eq!(compacted, 1, "{events}");
}
