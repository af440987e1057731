//! Permission rules end to end: `rein policy check` names the rule that decided;
//! a denied step stops the plan before anything runs; an asked-about step waits,
//! durably, for a person, and runs only once approved; every run records what the
//! rules said.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{json, rein, run_ok, show, task_ids, write_plan};

const POLICY: &str = r#"
[[rules]]
verdict = "allow"
command = "rm **"

[[rules]]
verdict = "deny"
command = "rm -rf /*"
reason = "never wipe the root"

[[rules]]
verdict = "ask"
command = "touch shipped"
trigger = "destructive_action"

[[rules]]
verdict = "ask"
network = "*"

[[rules]]
verdict = "deny"
mcp = "fs/write_*"
"#;

fn policy_file(dir: &std::path::Path) -> std::path::PathBuf {
    write_plan(dir, "policy.toml", POLICY)
}

#[test]
fn policy_check_prints_the_verdict_and_the_rule_with_a_script_friendly_exit() {
    let (dir, data) = common::scratch();
    let policy = policy_file(dir.path());
    let check = |args: &[&str]| {
        rein(&data)
            .arg("--policy")
            .arg(&policy)
            .args(["policy", "check"])
            .args(args)
            .output()
            .unwrap()
    };
    let out = check(&["--", "rm", "-rf", "/usr"]);
    assert_eq!(out.status.code(), Some(1), "deny exits 1");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("deny: `rm -rf /usr`")
            && said.contains("rule 2 of")
            && said.contains("never wipe the root"),
        "{said}"
    );
    assert_eq!(check(&["--", "rm", "-rf", "build"]).status.code(), Some(0));
    assert_eq!(
        check(&["--", "touch", "shipped"]).status.code(),
        Some(3),
        "ask exits 3"
    );
    let out = check(&["--json", "--script", "cd x && rm -rf /srv"]);
    assert_eq!(out.status.code(), Some(1));
    let decision = json(&out);
    assert_eq!(decision["verdict"], "deny");
    assert_eq!(decision["subject"], "rm -rf /srv");
    let out = check(&["--json", "--mcp", "fs/write_file"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json(&out)["subject"], "mcp:fs/write_file");
    assert_eq!(check(&["--mcp", "fs/read_file"]).status.code(), Some(0));
    let out = check(&["--mcp", "write_file"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("write SERVER/TOOL"));
    assert!(!data.exists(), "checking touches no store");
    // A malformed policy is refused, naming the rule.
    let bad = write_plan(dir.path(), "bad.toml", "[[rules]]\nverdict = 'deny'\n");
    let said = common::fails(
        rein(&data)
            .arg("--policy")
            .arg(&bad)
            .args(["policy", "check", "--", "ls"]),
        2,
    );
    assert!(said.contains("rule 1 of"));
}

#[test]
fn a_denied_step_stops_the_plan_before_anything_runs() {
    let (dir, data, plan) = common::with_plan(
        "p.toml",
        "description = 'wipe'\n[[steps]]\nid = 'ok'\nrun = 'true'\n\
         [[steps]]\nid = 'wipe'\nrun = 'rm -rf /opt'\n",
    );
    let said = common::fails(
        rein(&data)
            .arg("--policy")
            .arg(policy_file(dir.path()))
            .arg("run")
            .arg(&plan),
        2,
    );
    assert!(
        said.contains("step `wipe`: `rm -rf /opt` is denied by rule 2 of"),
        "{said}"
    );
    assert!(task_ids(&data).is_empty(), "no task was created");
    // A step's own rule denies too, and deny wins over the policy's allow.
    let own = write_plan(
        dir.path(),
        "own.toml",
        "description = 'own'\n[[steps]]\nid = 'clean'\nrun = 'rm -rf build'\n\
         permissions = [{ verdict = 'deny', command = 'rm **' }]\n",
    );
    let said = common::fails(
        rein(&data)
            .arg("--policy")
            .arg(policy_file(dir.path()))
            .args(["plan", "check"])
            .arg(&own),
        2,
    );
    assert!(said.contains("rule 1 of step `clean`"), "{said}");
}

#[test]
fn an_asked_step_waits_for_a_person_and_runs_only_once_approved() {
    let (dir, data) = common::scratch();
    let policy = policy_file(dir.path());
    let plan = write_plan(
        dir.path(),
        "p.toml",
        "description = 'ship'\n[[steps]]\nid = 'build'\nrun = 'echo built > built'\n\
         [[steps]]\nid = 'ship'\nrun = 'touch shipped'\ndepends_on = ['build']\n",
    );
    // The plan as the engine takes it: `ship` waits on `ship.permit`.
    let checked = json(&run_ok(
        rein(&data)
            .arg("--policy")
            .arg(&policy)
            .args(["plan", "check", "--json"])
            .arg(&plan),
    ));
    let steps = checked["steps"].as_array().unwrap();
    let ship = steps.iter().find(|s| s["id"] == "ship").unwrap();
    assert_eq!(ship["depends_on"], serde_json::json!(["ship.permit"]));
    let permit = steps.iter().find(|s| s["id"] == "ship.permit").unwrap();
    assert_eq!(permit["depends_on"], serde_json::json!(["build"]));

    let out = rein(&data)
        .arg("--policy")
        .arg(&policy)
        .args(["run", "--no-wait"])
        .arg(&plan)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "it waits for a person");
    let id = task_ids(&data)[0].clone();
    let workspace = data.join("workspaces").join(&id);
    assert!(workspace.join("built").exists());
    assert!(
        !workspace.join("shipped").exists(),
        "nothing ran before the answer"
    );
    let request = &common::pending(&data)[0];
    assert_eq!(request["trigger"], "destructive_action");
    assert_eq!(request["step_id"], "ship.permit");
    assert!(
        request["title"].as_str().unwrap().contains("touch shipped"),
        "{request}"
    );
    run_ok(rein(&data).args(["approvals", "approve", request["id"].as_str().unwrap()]));
    run_ok(
        rein(&data)
            .arg("--policy")
            .arg(&policy)
            .args(["tasks", "resume", &id]),
    );
    assert!(workspace.join("shipped").exists(), "approved, the step ran");
    let state = show(&data, &id);
    let ran = common::checkpoint(&state, "ship", None);
    assert_eq!(ran["output"]["permission"]["verdict"], "ask");
    assert_eq!(ran["output"]["sandbox"], "bubblewrap");
    assert!(
        ran["output"]["policy"]
            .as_str()
            .unwrap()
            .starts_with("5 rule(s): 5 from"),
        "{ran}"
    );
    assert_eq!(ran["output"]["exit_code"], 0);
    assert!(
        ran["output"]["permission"]["rule"]
            .as_str()
            .unwrap()
            .contains("rule 3 of"),
        "{ran}"
    );
}

#[test]
fn a_denied_answer_keeps_the_step_from_running() {
    let (dir, data) = common::scratch();
    let policy = policy_file(dir.path());
    let plan = write_plan(
        dir.path(),
        "p.toml",
        "description = 'net'\n[[steps]]\nid = 'fetch'\nrun = 'touch fetched'\nnetwork = true\n",
    );
    common::exits(
        rein(&data)
            .arg("--policy")
            .arg(&policy)
            .args(["run", "--no-wait"])
            .arg(&plan),
        3,
    );
    let id = task_ids(&data)[0].clone();
    let request = &common::pending(&data)[0];
    assert_eq!(request["trigger"], "external_network_call");
    run_ok(rein(&data).args(["approvals", "deny", request["id"].as_str().unwrap()]));
    let out = rein(&data)
        .arg("--policy")
        .arg(&policy)
        .args(["tasks", "resume", &id])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "denied, the task fails");
    assert!(!data.join("workspaces").join(&id).join("fetched").exists());
}

/// Health probes the real rules (spec tasks.md rule 23): a running server
/// reads its policy file again; broken, the permission manager is unhealthy
/// (503) with a critical alert naming it; changed, degraded; put back, healthy,
/// and the alert stays, resolved.
#[test]
fn health_reads_the_policy_file_again_and_alerts_resolve() {
    let (dir, data) = common::scratch();
    let file = write_plan(dir.path(), "policy.toml", POLICY);
    let mut with_policy = rein(&data);
    with_policy.env("REIN_POLICY", &file);
    let (_server, addr) = common::serve(with_policy, common::OPERATOR_TOKEN);
    let health = || {
        let (status, body) = common::http(&addr, "GET", "/healthz", None, None);
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        (status, body)
    };
    let (_, h) = health();
    assert_eq!(
        h["components"]["permission_manager"]["status"], "healthy",
        "{h}"
    );
    std::fs::write(&file, "[[rules]]\nverdict = \"sometimes\"\n").unwrap();
    let (status, h) = health();
    assert_eq!(status, 503, "{h}");
    let pm = &h["components"]["permission_manager"];
    assert_eq!(pm["status"], "unhealthy", "{h}");
    assert!(pm["detail"].as_str().unwrap().contains("broken"), "{pm}");
    let alert = common::item(&h["alerts"], "component", "permission_manager").clone();
    assert_eq!(
        (alert["severity"].as_str(), alert["resolved"].as_bool()),
        (Some("critical"), Some(false))
    );
    std::fs::write(&file, format!("{POLICY}\n# a comment\n")).unwrap();
    let (_, h) = health();
    assert_eq!(
        h["components"]["permission_manager"]["status"], "degraded",
        "{h}"
    );
    assert!(
        h["components"]["permission_manager"]["detail"]
            .as_str()
            .unwrap()
            .contains("restart rein"),
        "{h}"
    );
    std::fs::write(&file, POLICY).unwrap();
    let (_, h) = health();
    assert_eq!(
        h["components"]["permission_manager"]["status"], "healthy",
        "{h}"
    );
    let alert = common::item(&h["alerts"], "component", "permission_manager").clone();
    assert_eq!(alert["resolved"], true, "{h}");
    assert!(alert["resolved_at"].is_string(), "{alert}");
}

/// Rule 19: what a step declares it needs (`required_permissions`, a
/// decomposition's `requiredPermissions`) is asked of the permission rules
/// before it runs, and recorded as a `permission_check` checkpoint: allowed,
/// it passes naming the decisions; denied, the plan is refused naming the
/// step and the rule; a permission rein does not know is named.
#[test]
fn required_permissions_are_acquired_through_the_rules_and_recorded() {
    let (dir, data) = common::scratch();
    let offline = write_plan(
        dir.path(),
        "offline.toml",
        "[[rules]]\nverdict = \"deny\"\nnetwork = \"*\"\nreason = \"this machine stays offline\"\n",
    );
    let plan = |needs: &str| {
        write_plan(
            dir.path(),
            "plan.toml",
            &format!(
                "description = \"needs\"\n[[steps]]\nid = \"look\"\nrun = \"true\"\nrequired_permissions = [{needs}]\n"
            ),
        )
    };
    let state = json(&run_ok(
        rein(&data)
            .args(["--sandbox", "none", "--policy"])
            .arg(&offline)
            .args(["run", "--json"])
            .arg(plan("\"file_read\", \"execute\"")),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    let checks = common::items(&state["checkpoints"], "type", "permission_check");
    assert_eq!(checks.len(), 1, "{state}");
    assert_eq!(checks[0]["status"], "completed");
    assert_eq!(checks[0]["input"]["step"], "look");
    assert_eq!(
        checks[0]["output"]["decisions"].as_array().unwrap().len(),
        2
    );
    assert_eq!(checks[0]["approved_by"]["who"], "the permission rules");
    // It comes before the step's own checkpoint.
    let at = |kind: &str| {
        state["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .position(|c| c["type"] == kind)
            .unwrap()
    };
    assert!(at("permission_check") < at("task_exec"));
    // Denied by the rules: refused before anything runs, naming the rule.
    let said = common::fails(
        rein(&data)
            .args(["--sandbox", "none", "--policy"])
            .arg(&offline)
            .arg("run")
            .arg(plan("\"network\"")),
        2,
    );
    assert!(
        said.contains("look") && said.contains("this machine stays offline"),
        "{said}"
    );
    let said = common::fails(
        rein(&data)
            .args(["plan", "check"])
            .arg(plan("\"teleport\"")),
        2,
    );
    assert!(
        said.contains("`teleport`") && said.contains("file_read, file_write, network, execute"),
        "{said}"
    );
}

/// CP3's `security_scan`: a step its plan marks high-risk is scanned by the
/// permission rules before it runs — each simple command of its script with
/// the rule that decided it — and the scan is recorded before the step's
/// own checkpoint; a step of ordinary risk is not scanned.
#[test]
fn a_high_risk_step_is_security_scanned_before_it_runs() {
    let (dir, data) = common::scratch();
    let policy = write_plan(
        dir.path(),
        "scan.toml",
        "high_risk = \"allow\"\n[[rules]]\nverdict = \"allow\"\ncommand = \"echo **\"\nreason = \"echo only prints\"\n",
    );
    let plan = write_plan(
        dir.path(),
        "plan.toml",
        "description = \"risky\"\n[[steps]]\nid = \"ship\"\nrun = \"echo one && touch made\"\nrisk_level = \"high\"\n[[steps]]\nid = \"calm\"\nrun = \"true\"\ndepends_on = [\"ship\"]\n",
    );
    let state = json(&run_ok(
        rein(&data)
            .args(["--sandbox", "none", "--policy"])
            .arg(&policy)
            .args(["run", "--json"])
            .arg(&plan),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    let checkpoints = state["checkpoints"].as_array().unwrap();
    let scans: Vec<&serde_json::Value> = checkpoints
        .iter()
        .filter(|c| c["type"] == "security_scan")
        .collect();
    assert_eq!(scans.len(), 1, "{state}");
    let scan = scans[0];
    assert_eq!(scan["status"], "completed");
    assert_eq!(scan["input"]["step"], "ship");
    assert_eq!(scan["input"]["run"], "echo one && touch made");
    let decisions = scan["output"]["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 2, "{scan}");
    assert_eq!(decisions[0]["subject"], "echo one");
    assert!(
        decisions[0]["rule"].as_str().unwrap().contains("echo **"),
        "{scan}"
    );
    assert_eq!(decisions[1]["subject"], "touch made");
    assert_eq!(scan["output"]["strictest"]["verdict"], "allow", "{scan}");
    assert_eq!(scan["approved_by"]["who"], "the permission rules");
    let at = |pred: &dyn Fn(&serde_json::Value) -> bool| checkpoints.iter().position(pred).unwrap();
    assert!(
        at(&|c| c["type"] == "security_scan")
            < at(&|c| c["type"] == "task_exec" && c["step_id"] == "ship")
    );
}
