//! `rein harness list | explain` with nothing but the built-in runtime: the
//! decision is explained, and an explicit runtime nobody registered is an
//! error naming what is registered.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{json, rein, run_ok};

/// Writes the manifest of the test echo plugin (harness `echo`, labelled
/// "Echo agent") into `dir`.
fn echo_plugin(dir: &std::path::Path) -> std::path::PathBuf {
    common::echo_manifest(
        &dir.join("plugin.toml"),
        "echo",
        &[],
        "[[harnesses]]\nid = \"echo\"\nlabel = \"Echo agent\"\n",
    )
}

#[test]
fn the_builtin_runtime_serves_every_route_until_a_plugin_says_otherwise() {
    let (_dir, data) = common::scratch();
    let listed = json(&run_ok(rein(&data).args(["harness", "list", "--json"])));
    assert_eq!(listed[0]["id"], "rein");
    assert_eq!(listed[0]["builtin"], true);

    let decision = json(&run_ok(rein(&data).args([
        "harness",
        "explain",
        "--provider",
        "openai",
        "--model",
        "gpt-4.1-mini",
        "--json",
    ])));
    assert_eq!(decision["selected"], "rein");
    assert_eq!(decision["reason"], "auto_builtin");
    assert_eq!(decision["policy"]["source"], "default");
    let forced = json(&run_ok(rein(&data).args([
        "harness",
        "explain",
        "--provider",
        "openai",
        "--runtime",
        "rein",
        "--json",
    ])));
    assert_eq!(forced["reason"], "forced_builtin");
    assert_eq!(forced["policy"]["source"], "step");

    let said = common::fails(
        rein(&data).args([
            "harness",
            "explain",
            "--provider",
            "openai",
            "--runtime",
            "codex",
        ]),
        1,
    );
    assert!(said.contains("no harness `codex` is registered (registered: none)"));
}

#[test]
fn a_plugin_named_on_the_command_line_is_listed_asked_and_its_refusal_explained() {
    let (dir, data) = common::scratch();
    let manifest = echo_plugin(dir.path());
    let plugin = ["--plugin", manifest.to_str().unwrap()];
    let listed = json(&run_ok(
        rein(&data).args(plugin).args(["harness", "list", "--json"]),
    ));
    assert_eq!(listed[1]["id"], "echo");
    assert_eq!(listed[1]["plugin"], "echo");
    let decision = json(&run_ok(rein(&data).args(plugin).args([
        "harness",
        "explain",
        "--provider",
        "openai",
        "--model",
        "gpt",
        "--json",
    ])));
    assert_eq!(decision["selected"], "echo");
    assert_eq!(decision["reason"], "auto_plugin");
    assert_eq!(decision["candidates"][0]["reason"], "echo serves openai");
    // Asked for explicitly where it does not serve: the error carries its reason.
    let said = common::fails(
        rein(&data).args(plugin).args([
            "harness",
            "explain",
            "--provider",
            "anthropic",
            "--runtime",
            "echo",
        ]),
        1,
    );
    assert!(
        said.contains("harness \"echo\" does not support anthropic (only openai)"),
        "{said}"
    );
    // The same plugins through REIN_PLUGINS.
    let text = String::from_utf8_lossy(
        &run_ok(
            rein(&data)
                .env("REIN_PLUGINS", &manifest)
                .args(["harness", "list"]),
        )
        .stdout,
    )
    .into_owned();
    assert!(
        text.contains("echo             plugin echo    rein  Echo agent"),
        "{text}"
    );
    // A manifest that cannot be read is bad usage.
    let said = common::fails(
        rein(&data).args(["--plugin", "missing.toml", "harness", "list"]),
        2,
    );
    assert!(said.contains("missing.toml"));
}

#[test]
fn a_runtime_policy_file_pins_models_and_providers_to_runtimes() {
    let (dir, data) = common::scratch();
    let manifest = echo_plugin(dir.path());
    let policy = dir.path().join("runtimes.toml");
    std::fs::write(
        &policy,
        "default = \"auto\"\n[providers]\nopenai = \"echo\"\n[models]\n\"openai/gpt-local\" = \"rein\"\n",
    )
    .unwrap();
    let explain = |model: &str| {
        json(&run_ok(
            rein(&data)
                .args(["--plugin", manifest.to_str().unwrap()])
                .args(["--runtime-policy", policy.to_str().unwrap()])
                .args([
                    "harness",
                    "explain",
                    "--provider",
                    "openai",
                    "--model",
                    model,
                    "--json",
                ]),
        ))
    };
    let d = explain("gpt-local");
    assert_eq!(d["policy"]["source"], "model");
    assert_eq!(
        (d["selected"].as_str(), d["reason"].as_str()),
        (Some("rein"), Some("forced_builtin"))
    );
    let d = explain("gpt-4.1");
    assert_eq!(d["policy"]["source"], "provider");
    assert_eq!(
        (d["selected"].as_str(), d["reason"].as_str()),
        (Some("echo"), Some("forced_plugin"))
    );
    // A policy file that is not one is bad usage, named.
    std::fs::write(&policy, "colour = \"blue\"\n").unwrap();
    let err = common::fails(
        rein(&data)
            .args(["--runtime-policy", policy.to_str().unwrap()])
            .args(["harness", "explain", "--provider", "openai"]),
        2,
    );
    assert!(
        err.contains("runtimes.toml") && err.contains("colour"),
        "{err}"
    );
}

#[test]
fn with_url_the_servers_registry_is_listed_and_explained_not_the_local_one() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = echo_plugin(dir.path());
    let mut with_plugin = rein(&dir.path().join("data"));
    with_plugin.args(["--plugin", manifest.to_str().unwrap()]);
    let (_server, addr) = common::serve(with_plugin, common::OPERATOR_TOKEN);
    // This client names no plugin: what it lists is the server's.
    let remote = common::client(dir.path().join("client"), &addr, common::OPERATOR_TOKEN);
    let listed = json(&run_ok(&mut remote(&["harness", "list", "--json"])));
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["rein", "echo"]);
    let local = json(&run_ok(
        rein(&dir.path().join("client")).args(["harness", "list", "--json"]),
    ));
    assert_eq!(local.as_array().unwrap().len(), 1);

    let decision = json(&run_ok(&mut remote(&[
        "harness",
        "explain",
        "--provider",
        "openai",
        "--model",
        "gpt",
        "--json",
    ])));
    assert_eq!(decision["selected"], "echo");
    assert_eq!(decision["reason"], "auto_plugin");
    let forced = json(&run_ok(&mut remote(&[
        "harness",
        "explain",
        "--provider",
        "openai",
        "--runtime",
        "rein",
        "--json",
    ])));
    assert_eq!(forced["policy"]["source"], "step");
    let stderr = common::fails(
        &mut remote(&[
            "harness",
            "explain",
            "--provider",
            "openai",
            "--runtime",
            "codex",
        ]),
        1,
    );
    assert!(stderr.contains("no harness `codex`"), "{stderr}");
    let (status, _) = common::operator_get(&addr, "/admin/harnesses/explain");
    assert_eq!(status, 400, "provider is required");
}

#[test]
fn a_plugin_that_serves_only_routes_declaring_it_compatible_is_chosen_where_the_policy_says_so() {
    let (dir, data) = common::scratch();
    let manifest = echo_plugin(dir.path());
    let policy = dir.path().join("runtimes.toml");
    std::fs::write(&policy, "[compatible]\ncompat = [\"echo\"]\n").unwrap();
    let explain = |with_policy: bool| {
        let mut cmd = rein(&data);
        cmd.args(["--plugin", manifest.to_str().unwrap()]);
        if with_policy {
            cmd.args(["--runtime-policy", policy.to_str().unwrap()]);
        }
        json(&run_ok(cmd.args([
            "harness",
            "explain",
            "--provider",
            "compat",
            "--json",
        ])))
    };
    // Without the declaration the harness says no, and the built-in runtime serves.
    let d = explain(false);
    assert_eq!(d["selected"], "rein");
    assert_eq!(
        d["candidates"][0]["reason"],
        "effective route is not harness-compatible"
    );
    let d = explain(true);
    assert_eq!(d["selected"], "echo");
    assert_eq!(d["reason"], "auto_plugin");

    // A run on that route is served by the plugin, which was told the session.
    let plan = common::write_plan(
        dir.path(),
        "plan.toml",
        "description = \"compat\"\n[[steps]]\nid = \"hi\"\nkind = \"agent\"\nprovider = \"compat\"\nprompt = \"say hi\"\n",
    );
    let state = json(&run_ok(
        rein(&data)
            .args(["--plugin", manifest.to_str().unwrap()])
            .args(["--runtime-policy", policy.to_str().unwrap()])
            .args(["run", "--json"])
            .arg(&plan),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    let output = common::checkpoint(&state, "hi", Some("completed"))["output"].clone();
    assert_eq!(output["text"], "SAY HI");
    assert_eq!(output["selection"]["selected"], "echo");
    let reason = output["selection"]["candidates"][0]["reason"]
        .as_str()
        .unwrap();
    let session = output["session"].as_str().unwrap();
    assert_eq!(reason, format!("declared compatible; session {session}"));
}

#[test]
fn a_manifest_named_by_its_bare_file_name_starts_from_the_current_directory() {
    let (dir, data) = common::scratch();
    echo_plugin(dir.path());
    let decision = json(&run_ok(
        rein(&data)
            .current_dir(dir.path())
            .args(["--plugin", "plugin.toml"])
            .args(["harness", "explain", "--provider", "openai", "--json"]),
    ));
    // The plugin started and answered: it serves openai.
    assert_eq!(decision["selected"], "echo", "{decision}");
    assert_eq!(decision["candidates"][0]["reason"], "echo serves openai");
}

#[test]
fn a_plugins_reported_usage_is_metered_once_with_the_step() {
    let (dir, data) = common::scratch();
    let manifest = echo_plugin(dir.path());
    let plan = common::write_plan(
        dir.path(),
        "plan.toml",
        "description = \"metered\"\n[[steps]]\nid = \"hi\"\nkind = \"agent\"\nprompt = \"metered hello\"\n",
    );
    let state = json(&run_ok(
        rein(&data)
            .args(["--plugin", manifest.to_str().unwrap()])
            .args(["run", "--json"])
            .arg(&plan),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    let output = common::checkpoint(&state, "hi", Some("completed"))["output"].clone();
    assert_eq!(output["selection"]["selected"], "echo");
    // As the plugin reported it: every prompt token, the cached part, the output.
    assert_eq!(output["usage"]["input_tokens"], 30, "{output}");
    assert_eq!(output["usage"]["cached_input_tokens"], 10);
    assert_eq!(output["usage"]["output_tokens"], 7);
    let report = json(&run_ok(
        rein(&data).args(["usage", "--json", "--by", "model"]),
    ));
    assert_eq!(report["calls"], 1, "{report}");
    assert_eq!(report["input_tokens"], 30);
    assert_eq!(report["estimated"], false);
}

/// An agent step's `images` reach the harness with the attempt (the SDK's
/// `AttemptParams.images`): read from the workspace, typed, in base64. The
/// built-in runtime, which does not send images, refuses the step naming
/// them; a path outside the workspace or of another kind is a plan error.
#[test]
fn an_agent_steps_images_reach_the_harness_and_are_never_dropped() {
    let (dir, data) = common::scratch();
    let manifest = echo_plugin(dir.path());
    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join("docs")).unwrap();
    let png = [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0];
    std::fs::write(project.join("docs/diagram.png"), png).unwrap();
    let plan = |runtime: &str, image: &str| {
        common::write_plan(
            dir.path(),
            "plan.toml",
            &format!(
                "description = \"look\"\nworkspace = \"project\"\n[[steps]]\nid = \"look\"\nkind = \"agent\"\nprompt = \"describe it\"\nruntime = \"{runtime}\"\nimages = [\"{image}\"]\n"
            ),
        )
    };
    let state = json(&run_ok(
        rein(&data)
            .args(["--plugin", manifest.to_str().unwrap()])
            .args(["run", "--json"])
            .arg(plan("echo", "docs/diagram.png")),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    let output = common::checkpoint(&state, "look", Some("completed"))["output"].clone();
    assert_eq!(
        output["text"],
        "DESCRIBE IT [image/png docs/diagram.png 12 bytes 89504e47]"
    );
    // The built-in runtime does not send images: refused, not dropped.
    let out = rein(&data)
        .args(["--sandbox", "none", "run", "--json"])
        .arg(plan("rein", "docs/diagram.png"))
        .output()
        .unwrap();
    // The step failed (and, as a validation error, a person is asked what
    // next: the run pauses, exit 3).
    assert_eq!(out.status.code(), Some(3));
    let paused: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let failed = common::checkpoint(&paused, "look", Some("failed"));
    let error = failed["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("the built-in runtime does not send images"),
        "{error}"
    );
    for (image, why) in [
        ("../secret.png", "inside the workspace"),
        ("notes.txt", "not a PNG, JPEG, GIF or WebP"),
    ] {
        let out = rein(&data)
            .args(["plan", "check"])
            .arg(plan("echo", image))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{image}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains(image) && said.contains(why), "{said}");
    }
}

/// Rules 11 and 13 from the command line: a running server's plugin is
/// disabled (its harness no longer chosen, a run naming it refused saying
/// why), enabled again, and revoked (final: refused naming it until the
/// server restarts); without `--url` there is nothing to change.
#[test]
fn a_running_servers_plugin_is_disabled_enabled_and_revoked() {
    let (dir, data) = common::scratch();
    let manifest = echo_plugin(dir.path());
    let token = common::OPERATOR_TOKEN;
    let mut server = rein(&data);
    server.args(["--plugin", manifest.to_str().unwrap()]);
    let (_server, addr) = common::serve(server, token);
    let remote = common::client(dir.path().join("client"), &addr, token);
    let plan = common::write_plan(
        dir.path(),
        "plan.toml",
        "description = \"hi\"\n[[steps]]\nid = \"hi\"\nkind = \"agent\"\nprompt = \"say hi\"\nruntime = \"echo\"\n",
    );
    let run = || {
        let out = remote(&["run", "--json"]).arg(&plan).output().unwrap();
        let state: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let hi = common::checkpoint(&state, "hi", None);
        (
            hi["status"].as_str().unwrap().to_owned(),
            hi["error"].as_str().unwrap_or_default().to_owned(),
        )
    };
    assert_eq!(run().0, "completed");
    let rows = json(&run_ok(&mut remote(&[
        "harness", "disable", "echo", "--json",
    ])));
    let echo = common::item(&rows, "id", "echo").clone();
    assert_eq!(echo["status"], "disabled");
    let (status, error) = run();
    assert_eq!(status, "failed");
    assert!(error.contains("its plugin is disabled"), "{error}");
    run_ok(&mut remote(&["harness", "enable", "echo"]));
    assert_eq!(run().0, "completed");
    let said =
        String::from_utf8(run_ok(&mut remote(&["harness", "revoke", "echo"])).stdout).unwrap();
    assert!(said.contains("plugin echo is revoked"), "{said}");
    let (status, error) = run();
    assert_eq!(status, "failed");
    assert!(error.contains("its plugin is revoked"), "{error}");
    let again = common::exits(&mut remote(&["harness", "enable", "echo"]), 1);
    assert!(String::from_utf8_lossy(&again.stderr).contains("stays revoked"));
    let unknown = remote(&["harness", "disable", "ghost"]).output().unwrap();
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no plugin `ghost`"));
    // Without --url: nothing to change, exit 2.
    let here = common::exits(rein(&data).args(["harness", "disable", "echo"]), 2);
    assert!(String::from_utf8_lossy(&here.stderr).contains("--url"));
}

/// Rule 10 from the command line: an executor controller may come from a
/// plugin other than the harness's own; its manifest's
/// `activation.on_agent_harnesses` names the runtimes it serves, and rein
/// ensures (and at the task's end retires) that plugin's executor when one
/// of them is selected.
#[test]
fn an_executor_controller_from_another_plugin_serves_the_runtimes_its_activation_names() {
    let (dir, data) = common::scratch();
    let harness = echo_plugin(dir.path());
    let exec = dir.path().join("exec");
    std::fs::create_dir_all(&exec).unwrap();
    let controller = common::echo_manifest(
        &dir.path().join("controller.toml"),
        "echo-exec",
        &[],
        &format!(
            "[executor]\nworkspace_directory = {:?}\n[activation]\non_agent_harnesses = [\"echo\"]\n",
            exec.display().to_string()
        ),
    );
    let plan = common::write_plan(
        dir.path(),
        "plan.toml",
        "description = \"hi\"\n[[steps]]\nid = \"hi\"\nkind = \"agent\"\nprompt = \"say hi\"\nruntime = \"echo\"\n",
    );
    // Without the controller's plugin, nothing is ensured.
    let state = json(&run_ok(
        rein(&data)
            .args(["--plugin", harness.to_str().unwrap()])
            .args(["run", "--json"])
            .arg(&plan),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    assert!(!exec.join("executor.log").exists());
    let state = json(&run_ok(
        rein(&data)
            .args(["--plugin", harness.to_str().unwrap()])
            .args(["--plugin", controller.to_str().unwrap()])
            .args(["run", "--json"])
            .arg(&plan),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    let log = std::fs::read_to_string(exec.join("executor.log")).unwrap();
    let calls: Vec<&str> = log.lines().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(calls, ["executor/ensure", "executor/retire"], "{log}");
}
