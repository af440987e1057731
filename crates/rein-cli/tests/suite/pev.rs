//! Plan–execute–verify from the command line, on the embedded store: a plan
//! with a `pev` step pauses for its contract's approval, runs, is verified, and
//! its contract and evidence are read and reviewed with `rein contracts` and
//! `rein evidence`; bad input is named with exit 2.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{json, rein, run_ok, write_plan};

const PLAN: &str = r#"
description = "Rewrite the notes"

[[steps]]
id = "write"
run = "echo draft > notes.txt"

[[steps]]
id = "rewrite"
description = "Rewrite the notes"
run = "echo final > notes.txt"
depends_on = ["write"]
writes = ["notes.txt"]
pev = true
verify = ["grep -q final notes.txt"]
rollback = "echo draft > notes.txt"
"#;

/// The contracts of a task, as `rein contracts list --task` shows them.
fn contracts_of(data: &std::path::Path, task: &str) -> serde_json::Value {
    json(&run_ok(rein(data).args([
        "contracts",
        "list",
        "--task",
        task,
        "--json",
    ])))["items"]
        .clone()
}

#[test]
fn a_pev_plan_is_approved_run_verified_and_its_evidence_reviewed() {
    let (_dir, data, plan) = common::with_plan("notes.toml", PLAN);

    // `rein plan check` shows the steps the engine adds.
    let checked =
        String::from_utf8_lossy(&run_ok(rein(&data).args(["plan", "check"]).arg(&plan)).stdout)
            .into_owned();
    assert!(
        checked.contains("rewrite.approve") && checked.contains("rewrite.verify"),
        "{checked}"
    );

    let paused = rein(&data)
        .args(["--sandbox", "none", "run", "--no-wait", "--json"])
        .arg(&plan)
        .output()
        .unwrap();
    assert_eq!(
        paused.status.code(),
        Some(3),
        "waits for the contract's approval"
    );
    let task = json(&paused)["id"].as_str().unwrap().to_owned();

    let contracts = contracts_of(&data, &task);
    assert_eq!(contracts.as_array().unwrap().len(), 1);
    let contract = contracts[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(contracts[0]["status"], "proposed");

    let pending = common::pending(&data);
    let request = pending[0]["id"].as_str().unwrap().to_owned();
    assert!(
        pending[0]["title"].as_str().unwrap().contains(&contract),
        "{pending:?}"
    );
    run_ok(
        rein(&data)
            .env("REIN_USER", "ana")
            .args(["approvals", "approve", &request]),
    );
    run_ok(rein(&data).args(["--sandbox", "none", "tasks", "resume", &task]));

    let shown =
        String::from_utf8_lossy(&run_ok(rein(&data).args(["contracts", "show", &contract])).stdout)
            .into_owned();
    for expected in [
        "verified",
        "risk medium (derived)",
        "verify grep -q final notes.txt",
        "rollback echo draft > notes.txt",
        "executing by rein",
        // The approval is the person's, not rein's.
        "approved by ana",
    ] {
        assert!(shown.contains(expected), "{expected} in {shown}");
    }

    let bundles = json(&run_ok(rein(&data).args([
        "evidence",
        "list",
        "--contract",
        &contract,
        "--json",
    ])))["items"]
        .clone();
    let bundle = bundles[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(bundles[0]["checks"][0]["status"], "passed");
    let reviewed = json(&run_ok(rein(&data).env("REIN_USER", "bo").args([
        "evidence",
        "review",
        &bundle,
        "--verdict",
        "approved",
        "--comment",
        "reads well",
        "--json",
    ])));
    assert_eq!(reviewed["reviews"][0]["reviewer"], "bo");
    let text =
        String::from_utf8_lossy(&run_ok(rein(&data).args(["evidence", "show", &bundle])).stdout)
            .into_owned();
    assert!(
        text.contains("check verify_1 passed grep -q final notes.txt"),
        "{text}"
    );
    assert!(text.contains("review by bo approved: reads well"), "{text}");

    // A verified contract is final; scripts get exit 1 with the reason.
    let err = common::fails(
        rein(&data).args(["contracts", "status", &contract, "failed"]),
        1,
    );
    assert!(err.contains("nothing (it is final)"), "{err}");
    // An unknown status is a usage error.
    let said = common::fails(
        rein(&data).args(["contracts", "status", &contract, "finished"]),
        2,
    );
    assert!(said.contains("rolled_back"));
}

#[test]
fn pev_keys_are_checked_and_named() {
    let (dir, data) = common::scratch();
    for (text, expected) in [
        (
            "description='d'\n[[steps]]\nid='x'\nrun='true'\nverify=['true']\n",
            "`verify` is only for plan–execute–verify steps; add `pev = true`",
        ),
        (
            "description='d'\n[[steps]]\nid='x'\nrun='true'\npev=true\n",
            "needs `verify`",
        ),
    ] {
        let plan = write_plan(dir.path(), "bad.toml", text);
        let out = rein(&data)
            .args(["plan", "check"])
            .arg(&plan)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{text}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expected), "{expected} in {err}");
    }
}

#[test]
fn a_rein_killed_during_verification_resumes_it_without_running_the_step_again() {
    let (dir, data) = common::scratch();
    // The verifier's first run marks that it started and then hangs (the test
    // kills rein there); a second run passes at once.
    let plan = write_plan(
        dir.path(),
        "notes.toml",
        r#"
description = "Rewrite the notes"

[[steps]]
id = "rewrite"
run = "echo final > notes.txt; echo ran >> runs.log"
writes = ["notes.txt"]
pev = true
verify = ["grep -q final notes.txt", "if [ -e started ]; then true; else touch started; sleep 60; fi"]
"#,
    );
    let paused = common::exits(
        rein(&data).args(["run", "--no-wait", "--json"]).arg(&plan),
        3,
    );
    let task = json(&paused)["id"].as_str().unwrap().to_owned();
    let pending = common::pending(&data);
    run_ok(rein(&data).args(["approvals", "approve", pending[0]["id"].as_str().unwrap()]));

    let mut runner = rein(&data)
        .args(["tasks", "resume", &task])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = common::in_workspace(&data, &task, "started");
    common::eventually("the verifier started", || started.exists().then_some(()));
    common::kill9(&mut runner);

    // The verify step is idempotent: resumed, it runs again and passes.
    let resumed = json(&run_ok(
        rein(&data).args(["tasks", "resume", &task, "--json"]),
    ));
    assert_eq!(resumed["status"], "completed", "{resumed}");
    let runs = std::fs::read_to_string(common::in_workspace(&data, &task, "runs.log")).unwrap();
    assert_eq!(runs, "ran\n", "the step itself ran once");
    let contracts = contracts_of(&data, &task);
    assert_eq!(contracts[0]["status"], "verified", "{contracts}");
    // The evidence was rebuilt, not doubled: one output, two test results, two checks.
    let bundles = json(&run_ok(rein(&data).args(["evidence", "list", "--json"])))["items"].clone();
    assert_eq!(bundles.as_array().unwrap().len(), 1, "{bundles}");
    let kinds: Vec<&str> = bundles[0]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["command_output", "test_result", "test_result"]);
    assert_eq!(bundles[0]["checks"].as_array().unwrap().len(), 2);
}
