//! The configuration file: `rein config show` says what is in force and where
//! each value came from (flag over environment over file over default, secrets
//! redacted), a key the file does not know is refused naming it, and the file
//! really configures a run (its provider settings reach the model server, a
//! local fake that speaks the streaming wire format).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use rein_test_support::model as fake;

use common::{json, rein, run_ok, write_plan};
use serde_json::Value;

fn setting<'a>(shown: &'a Value, key: &str) -> &'a Value {
    shown["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == key)
        .unwrap_or_else(|| panic!("no setting {key} in {shown}"))
}

/// `rein --config FILE config show`.
fn config_show(data: &std::path::Path, file: &std::path::Path) -> std::process::Command {
    let mut cmd = rein(data);
    cmd.arg("--config").arg(file).args(["config", "show"]);
    cmd
}

#[test]
fn config_show_names_where_each_value_came_from_and_redacts_secrets() {
    let (dir, data) = common::scratch();
    let file = common::write_config(
        dir.path(),
        "sandbox = \"none\"\nplugins = [\"plugins/echo.toml\"]\n[openai]\nmodel = \"from-file\"\napi_key = \"sk-secret\"\nidle_timeout = \"5m\"\nstream = false\n[anthropic]\nmax_tokens = 2048\n",
    );
    let shown = json(&run_ok(
        config_show(&data, &file)
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .arg("--json"),
    ));
    let from_file = format!("file {}", file.display());
    assert_eq!(shown["file"], file.display().to_string());
    assert_eq!(setting(&shown, "sandbox")["value"], "none");
    assert_eq!(setting(&shown, "sandbox")["source"], from_file.as_str());
    // A path in the file is the file's directory's.
    assert_eq!(
        setting(&shown, "plugins")["value"],
        dir.path().join("plugins/echo.toml").display().to_string()
    );
    assert_eq!(setting(&shown, "openai.model")["value"], "from-file");
    assert_eq!(setting(&shown, "openai.api_key")["value"], "<redacted>");
    assert_eq!(setting(&shown, "openai.idle_timeout")["value"], "5m");
    assert_eq!(setting(&shown, "anthropic.max_tokens")["value"], "2048");
    assert_eq!(setting(&shown, "openai.stream")["value"], "false");
    assert_eq!(setting(&shown, "anthropic.stream")["source"], "default");
    assert_eq!(setting(&shown, "openai.base_url")["source"], "default");
    assert_eq!(setting(&shown, "data_dir")["source"], "flag --data-dir");
    let text = String::from_utf8(run_ok(&mut config_show(&data, &file)).stdout).unwrap();
    assert!(!text.contains("sk-secret"), "{text}");

    // The environment beats the file, and a flag beats both.
    let shown = json(&run_ok(
        rein(&data)
            .arg("--config")
            .arg(&file)
            .env("REIN_MODEL", "from-env")
            .env("REIN_SANDBOX", "landlock")
            .args(["--sandbox", "bubblewrap", "config", "show", "--json"]),
    ));
    assert_eq!(setting(&shown, "openai.model")["value"], "from-env");
    assert_eq!(setting(&shown, "openai.model")["source"], "env REIN_MODEL");
    assert_eq!(setting(&shown, "sandbox")["value"], "bubblewrap");
    assert_eq!(setting(&shown, "sandbox")["source"], "flag --sandbox");

    // Without a file, the defaults.
    let shown = json(&run_ok(rein(&data).args(["config", "show", "--json"])));
    assert!(shown["file"].is_null());
    assert_eq!(setting(&shown, "sandbox")["source"], "default");
    assert_eq!(setting(&shown, "openai.model")["value"], "gpt-4.1-mini");
}

#[test]
fn a_key_the_file_does_not_know_or_a_missing_file_is_bad_usage_named() {
    let (dir, data) = common::scratch();
    let file = common::write_config(dir.path(), "[openai]\nmodle = \"typo\"\n");
    let err = common::fails(&mut config_show(&data, &file), 2);
    assert!(err.contains("rein.toml") && err.contains("modle"), "{err}");

    std::fs::write(&file, "[anthropic]\nstream = true\n").unwrap();
    let err = common::fails(
        config_show(&data, &file).env("REIN_ANTHROPIC_STREAM", "sometimes"),
        2,
    );
    assert!(
        err.contains("REIN_ANTHROPIC_STREAM or anthropic.stream is `sometimes`"),
        "{err}"
    );

    std::fs::write(&file, "[openai]\nidle_timeout = \"soon\"\n").unwrap();
    let said = common::fails(&mut config_show(&data, &file), 2);
    assert!(said.contains("`soon`"));

    let said = common::fails(
        rein(&data).args(["--config", "/nonexistent/rein.toml", "tasks", "list"]),
        2,
    );
    assert!(said.contains("/nonexistent/rein.toml does not exist"));
}

#[test]
fn the_users_config_file_configures_the_model_an_agent_step_asks() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (base, seen) = runtime.block_on(fake::fake_model());
    let (dir, data) = common::scratch();
    // The XDG one: found without --config.
    let xdg = dir.path().join("xdg-config").join("rein");
    std::fs::create_dir_all(&xdg).unwrap();
    std::fs::write(
        xdg.join("rein.toml"),
        format!(
            "[openai]\nbase_url = \"{base}\"\nmodel = \"gpt-from-file\"\napi_key = \"sk-file\"\nstream = false\n"
        ),
    )
    .unwrap();
    let plan = write_plan(
        dir.path(),
        "plan.toml",
        "description = \"file\"\n[[steps]]\nid = \"tell\"\nkind = \"agent\"\nprompt = \"Remember: the code word is heron.\"\n",
    );
    let state = json(&run_ok(
        rein(&data)
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_API_KEY")
            .args(["run", "--json"])
            .arg(&plan),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    let asked = seen.0.lock().unwrap()[0].clone();
    assert_eq!(asked["model"], "gpt-from-file");
    // `stream = false` under [openai]: one JSON body asked for, and read.
    assert_eq!(asked["stream"], false, "{asked}");
    assert_eq!(asked["answered_whole"], true);
}

#[test]
fn the_anthropic_and_responses_providers_run_agent_steps_from_the_command_line() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (anthropic, messages) = runtime.block_on(fake::anthropic_like());
    let (responses, _) = runtime.block_on(fake::responses_like());
    let (dir, data) = common::scratch();
    let file = common::write_config(
        dir.path(),
        &format!(
            "[anthropic]\nbase_url = \"{anthropic}\"\napi_key = \"sk-ant-test\"\nmodel = \"claude-from-file\"\n"
        ),
    );
    let plan = write_plan(
        dir.path(),
        "plan.toml",
        "description = \"two providers\"\n[[steps]]\nid = \"claude\"\nkind = \"agent\"\nprovider = \"anthropic\"\nprompt = \"write hello\"\ntools = [\"write_file\"]\n[[steps]]\nid = \"codex\"\nkind = \"agent\"\nprovider = \"openai-responses\"\nprompt = \"write it\"\ntools = [\"write_file\"]\ndepends_on = [\"claude\"]\n",
    );
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let state = json(&run_ok(
        rein(&data)
            .arg("--config")
            .arg(&file)
            .env("OPENAI_BASE_URL", &responses)
            .env_remove("OPENAI_API_KEY")
            .args(["run", "--json", "--workspace"])
            .arg(&ws)
            .arg(&plan),
    ));
    assert_eq!(state["status"], "completed", "{state}");
    assert_eq!(
        std::fs::read_to_string(ws.join("hello.txt")).unwrap(),
        "hello from claude"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("r.txt")).unwrap(),
        "from responses"
    );
    assert_eq!(messages.0.lock().unwrap()[0]["model"], "claude-from-file");
}

#[test]
fn a_failed_steps_error_is_not_repeated_by_the_task_failed_line() {
    let (_dir, data, plan) = common::with_plan(
        "plan.toml",
        "description = \"x\"\n[[steps]]\nid = \"a\"\nkind = \"agent\"\nprovider = \"mistral\"\nprompt = \"hi\"\nrecovery = { validation_error = \"abort\" }\n",
    );
    let out = common::exits(rein(&data).arg("run").arg(&plan), 1);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // On the step's line and in the run's last line; not on the task's.
    assert_eq!(text.matches("not `mistral`").count(), 2, "{text}");
    assert!(
        text.contains("task failed: step `a` failed (its error is above)"),
        "{text}"
    );
}

#[test]
fn the_configured_fallback_models_are_shown_checked_and_explained() {
    let (dir, data) = common::scratch();
    let file = common::write_config(
        dir.path(),
        "fallback_models = [\"openai/gpt-4o-mini\", \"anthropic/claude-haiku-4-5\"]\n",
    );
    let shown = json(&run_ok(config_show(&data, &file).arg("--json")));
    assert_eq!(
        setting(&shown, "fallback_models")["value"],
        "openai/gpt-4o-mini, anthropic/claude-haiku-4-5"
    );
    // The built-in runtime serves the route, then the configured chain.
    let explained = json(&run_ok(rein(&data).arg("--config").arg(&file).args([
        "harness",
        "explain",
        "--provider",
        "openai",
        "--json",
    ])));
    assert_eq!(
        explained["fallback_models"],
        serde_json::json!(["openai/gpt-4o-mini", "anthropic/claude-haiku-4-5"])
    );
    let text = String::from_utf8(
        run_ok(rein(&data).arg("--config").arg(&file).args([
            "harness",
            "explain",
            "--provider",
            "openai",
        ]))
        .stdout,
    )
    .unwrap();
    assert!(
        text.contains("openai/gpt-4o-mini → anthropic/claude-haiku-4-5"),
        "{text}"
    );
    // A name that is not PROVIDER/MODEL is refused, named.
    std::fs::write(&file, "fallback_models = [\"gpt-4o-mini\"]\n").unwrap();
    let err = common::fails(&mut config_show(&data, &file), 2);
    assert!(
        err.contains("fallback_models") && err.contains("`gpt-4o-mini`"),
        "{err}"
    );
}

#[test]
fn budgets_from_the_file_and_the_flags_are_checked_and_named() {
    let (dir, data) = common::scratch();
    let file = common::write_config(
        dir.path(),
        "daily_budget = { tokens = 5000000, cost_usd = 20.0 }\n",
    );
    let shown = json(&run_ok(config_show(&data, &file).arg("--json")));
    assert_eq!(
        setting(&shown, "daily_budget")["value"],
        "5000000 tokens, $20"
    );
    std::fs::write(&file, "daily_budget = { cost_usd = 0.0 }\n").unwrap();
    let err = common::fails(&mut config_show(&data, &file), 2);
    assert!(
        err.contains("daily_budget: `cost_usd` is a positive number of US dollars"),
        "{err}"
    );
    // A goal's budget from the flags: a bad one is bad usage, before any
    // model is asked.
    let err = common::fails(
        rein(&data).args(["run", "--goal", "tidy up", "--budget-usd=-2"]),
        2,
    );
    assert!(err.contains("--budget-tokens/--budget-usd"), "{err}");
}

/// With nothing set, `rein config show` prints the data directory it uses,
/// not a description of it, and says where it looked for a config file.
#[test]
fn config_show_names_the_default_paths_it_uses_and_looked_at() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(common::rein_bin());
    for setting in common::REIN_SETTINGS {
        cmd.env_remove(setting);
    }
    let out = run_ok(
        cmd.env("XDG_DATA_HOME", dir.path().join("data-home"))
            .env("XDG_CONFIG_HOME", dir.path().join("config-home"))
            .args(["config", "show"]),
    );
    let said = String::from_utf8_lossy(&out.stdout);
    let data = dir.path().join("data-home").join("rein");
    assert!(said.contains(&data.display().to_string()), "{said}");
    let looked = dir
        .path()
        .join("config-home")
        .join("rein")
        .join("rein.toml");
    assert!(
        said.contains(&format!(
            "config file: none (looked for {}",
            looked.display()
        )),
        "{said}"
    );
    let shown = json(&run_ok(
        std::process::Command::new(common::rein_bin())
            .env_remove("REIN_CONFIG")
            .env_remove("REIN_DATA_DIR")
            .env("XDG_DATA_HOME", dir.path().join("data-home"))
            .env("XDG_CONFIG_HOME", dir.path().join("config-home"))
            .args(["config", "show", "--json"]),
    ));
    assert_eq!(shown["looked_for"], looked.display().to_string().as_str());
    assert_eq!(
        setting(&shown, "data_dir")["value"],
        data.display().to_string().as_str()
    );
}
