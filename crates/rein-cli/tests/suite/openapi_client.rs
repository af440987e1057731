//! A client generated from the server's own OpenAPI document by a third-party
//! generator, openapi-python-client (from PyPI; `.ci/run` installs it):
//! `rein serve` serves the document at `/openapi.json`, the generator makes a
//! client of all of it (no schema refused, no model dropped), and the client
//! lists tasks, reads a task's events and plan, and decides its approval
//! against the real server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;

use common::{SHIP_PLAN, http, run_ok, start};

/// The version `.ci/run` installs.
const GENERATOR: &str = "openapi-python-client==0.29.1";

#[test]
fn a_client_generated_from_openapi_json_drives_a_real_server() {
    let version = Command::new("openapi-python-client")
        .arg("--version")
        .output();
    assert!(
        version.as_ref().is_ok_and(|o| o.status.success()),
        "openapi-python-client is not installed: `pip install {GENERATOR}` (.ci/run does)"
    );
    let (dir, data) = common::scratch();
    let token = "generated-client-token";
    let (_server, addr) = start(&data, token);

    // The document is open: a generator needs no token to read it.
    let (status, document) = http(&addr, "GET", "/openapi.json", None, None);
    assert_eq!(status, 200, "{document}");
    let parsed: serde_json::Value = serde_json::from_str(&document).unwrap();
    assert_eq!(parsed["openapi"], "3.1.0");
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, &document).unwrap();

    let out = Command::new("openapi-python-client")
        .args(["generate", "--meta", "none", "--path"])
        .arg(&file)
        .arg("--output-path")
        .arg(dir.path().join("rein_client"))
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    // Every schema read, every model made. The one thing it skips is the
    // TOML alternative of a task's submission (it makes the JSON one).
    for refusal in ["Unable to process", "Failure to process", "Failed to parse"] {
        assert!(!said.contains(refusal), "{said}");
    }
    let warnings = said.matches("WARNING").count();
    let toml = said
        .matches("Unsupported content type application/toml")
        .count();
    assert_eq!(warnings, toml, "{said}");

    let (status, created) = http(
        &addr,
        "POST",
        "/admin/tasks",
        Some(token),
        Some(("application/toml", SHIP_PLAN)),
    );
    assert_eq!(status, 201, "{created}");
    let task: serde_json::Value = serde_json::from_str(&created).unwrap();
    let task = task["task"]["id"].as_str().unwrap().to_owned();

    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/openapi_client/use_client.py"
    );
    let out = run_ok(
        Command::new("python3")
            .arg(script)
            .arg(format!("http://{addr}"))
            .arg(token)
            .arg(&task)
            .env("PYTHONPATH", dir.path()),
    );
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        seen["listed"]
            .as_array()
            .unwrap()
            .contains(&task.clone().into()),
        "{seen}"
    );
    // Each event is read as the model of its own type (none dropped).
    let models = seen["event_models"].to_string();
    assert!(models.contains("HarnessEventTaskCreated"), "{seen}");
    assert!(
        models.contains("HarnessEventHumanApprovalRequested"),
        "{seen}"
    );
    assert!(
        seen["event_types"]
            .as_array()
            .unwrap()
            .contains(&"task_created".into()),
        "{seen}"
    );
    assert_eq!(
        seen["plan_steps"],
        serde_json::json!(["build", "ship", "publish"])
    );
    // The steps' actions are read as their own models too.
    let actions = seen["step_actions"].to_string();
    assert!(
        actions.contains("StepActionCommand") && actions.contains("StepActionApproval"),
        "{seen}"
    );
    assert_eq!(
        seen["approval_options"],
        serde_json::json!(["publish", "hold"])
    );
    assert_eq!(seen["decided"], "approved");
    assert_eq!(seen["status"], "completed", "{seen}");
}
