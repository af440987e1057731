//! Harness plugins as real child processes (a Python script speaking the
//! plugin protocol): selection asks them, attempts stream from them, isolated
//! completions and resets go through them — and a plugin that crashes, hangs
//! or talks nonsense fails the call with an error that says so, never rein.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rein_core::harness::isolated::{AuthProfile, IsolatedRequest, OutputTextPolicy, run_isolated};
use rein_core::harness::{
    AgentSession, AttemptEvent, AttemptParams, HarnessRegistry, RuntimePolicy, SelectionRequest,
    reset_session, select,
};
use rein_protocol::{SelectionReason, Support, SupportContext};
use rein_runtimes::{load_manifest, register_plugin};
use tokio_util::sync::CancellationToken;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/plugins/echo_plugin.py")
}

/// A manifest in `dir` for the test plugin in `mode`, with a short timeout.
fn manifest(dir: &Path, mode: &[&str], extra: &str) -> PathBuf {
    let mut command = vec!["python3".to_owned(), script().display().to_string()];
    command.extend(mode.iter().map(|m| (*m).to_owned()));
    let text = format!(
        "id = \"echo\"\nname = \"Echo\"\ncommand = {}\ntimeout_ms = 1500\n{extra}\n\
         [[harnesses]]\nid = \"echo\"\nlabel = \"Echo agent\"\nisolated_completion = true\n",
        toml_list(&command)
    );
    let path = dir.join("plugin.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn toml_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

fn registry_with(path: &Path) -> HarnessRegistry {
    let mut registry = HarnessRegistry::new(1);
    let (m, dir) = load_manifest(path).unwrap();
    assert!(register_plugin(&mut registry, m, dir).is_empty());
    registry
}

fn ctx(provider: &str) -> SupportContext {
    SupportContext {
        provider: provider.into(),
        model_id: Some("gpt".into()),
        requested_runtime: "auto".into(),
        ..SupportContext::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selection_asks_the_plugin_process() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry_with(&manifest(dir.path(), &["ok"], ""));
    let request = |provider: &str| SelectionRequest {
        provider: provider.into(),
        model: Some("gpt".into()),
        ..SelectionRequest::default()
    };
    let d = select(&registry, &RuntimePolicy::default(), &request("openai"))
        .await
        .unwrap();
    assert_eq!(
        (d.selected.as_str(), d.reason),
        ("echo", SelectionReason::AutoPlugin)
    );
    assert_eq!(d.candidates[0].priority, Some(5));
    let d = select(&registry, &RuntimePolicy::default(), &request("anthropic"))
        .await
        .unwrap();
    assert_eq!(d.reason, SelectionReason::AutoBuiltin);
    assert_eq!(d.candidates[0].reason.as_deref(), Some("only openai"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_streams_its_partial_replies_and_events_before_its_result() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry_with(&manifest(dir.path(), &["ok"], ""));
    let harness = &registry.get("echo").unwrap().harness;
    let (events, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let result = harness
        .run_attempt(AttemptParams {
            attempt_id: "att-1".into(),
            prompt: "write the notes".into(),
            tools: vec!["read_file".into()],
            session_key: "agent:main".into(),
            workspace: rein_sandbox::Pinned::pin(&dir.path().canonicalize().unwrap()).unwrap(),
            deadline: Duration::from_secs(5),
            cancel: CancellationToken::new(),
            events,
            asker: None,
            journal: None,
            mcp_servers: Vec::new(),
            policy: std::sync::Arc::default(),
            images: Vec::new(),
            delegated_execution: None,
        })
        .await
        .unwrap();
    assert_eq!(result.text, "WRITE THE NOTES");
    let mut seen = Vec::new();
    while let Ok(e) = rx.try_recv() {
        seen.push(e);
    }
    assert_eq!(
        seen,
        [
            AttemptEvent::PartialReply("write".into()),
            AttemptEvent::PartialReply("the".into()),
            AttemptEvent::PartialReply("notes".into()),
            AttemptEvent::Agent(serde_json::json!({ "kind": "tool", "tools": ["read_file"] })),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolated_completion_and_reset_go_through_the_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry_with(&manifest(dir.path(), &["ok"], ""));
    let harness = &registry.get("echo").unwrap().harness;
    let request = IsolatedRequest {
        prompt: "release notes for 0.2".into(),
        system: None,
        transport_model: "openai/gpt".into(),
        auth_plan: String::new(),
        profiles: ["expired", "work"]
            .iter()
            .map(|p| AuthProfile {
                id: (*p).into(),
                credential: "k".into(),
            })
            .collect(),
        deadline: Duration::from_secs(5),
        policy: OutputTextPolicy::Default,
        shape: Default::default(),
    };
    let done = run_isolated(harness.as_ref(), &request).await.unwrap();
    assert_eq!(done.text, "Title: release note");
    assert_eq!(
        done.profile, "work",
        "the expired profile's refusal moved on"
    );
    assert_eq!(done.request_durations_ms, [7]);

    let mut stuck = AgentSession {
        key: "stuck".into(),
        harness_id: "echo".into(),
        native_session_id: Some("n".into()),
        turns: 2,
    };
    let err = reset_session(harness.as_ref(), &mut stuck, Vec::new())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("the native sandbox is still attached")
    );
    assert_eq!(stuck.turns, 2);
    let mut fine = AgentSession {
        key: "fine".into(),
        ..stuck.clone()
    };
    reset_session(harness.as_ref(), &mut fine, Vec::new())
        .await
        .unwrap();
    assert_eq!(fine.turns, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugins_executor_controller_is_reached_through_a_handle() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let extra = format!(
        "[executor]\nworkspace_directory = {:?}\n",
        ws.display().to_string()
    );
    let registry = registry_with(&manifest(dir.path(), &["ok"], &extra));
    let handle = registry.resolve_executor_controller("echo").unwrap();
    let binding = rein_core::harness::executor::ExecutorBinding {
        session_key: "agent:main".into(),
        agent_id: "main".into(),
        native_session_id: None,
        environment_id: "env-1".into(),
        remote_url: None,
        workspace_directory: ws.clone(),
    };
    let cancel = CancellationToken::new();
    handle.ensure(&binding, &cancel).await.unwrap();
    handle.retire(&binding, &cancel).await.unwrap();
    let log = std::fs::read_to_string(ws.join("executor.log")).unwrap();
    assert_eq!(log, "executor/ensure env-1\nexecutor/retire env-1\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_crashes_is_named_and_started_again_on_the_next_call() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("crashed-once");
    let registry = registry_with(&manifest(
        dir.path(),
        &["crash-once", marker.to_str().unwrap()],
        "",
    ));
    let harness = &registry.get("echo").unwrap().harness;
    let Support::Unsupported { reason, .. } = harness.supports(&ctx("openai")).await else {
        panic!("a crashed plugin supports nothing");
    };
    let reason = reason.unwrap();
    assert!(reason.contains("plugin `echo` exited"), "{reason}");
    // Started afresh, it answers.
    assert!(matches!(
        harness.supports(&ctx("openai")).await,
        Support::Supported { priority: 5, .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_hangs_is_stopped_at_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry_with(&manifest(dir.path(), &["hang"], ""));
    let harness = &registry.get("echo").unwrap().harness;
    let started = Instant::now();
    let Support::Unsupported { reason, .. } = harness.supports(&ctx("openai")).await else {
        panic!("a hung plugin supports nothing");
    };
    assert!(
        reason
            .unwrap()
            .contains("did not answer harness/supports within 1500 ms; it was stopped")
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_talks_nonsense_is_cut_off_with_what_it_said() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry_with(&manifest(dir.path(), &["garbage"], ""));
    let harness = &registry.get("echo").unwrap().harness;
    let Support::Unsupported { reason, .. } = harness.supports(&ctx("openai")).await else {
        panic!("a garbled plugin supports nothing");
    };
    let reason = reason.unwrap();
    assert!(
        reason.contains("sent something that is not JSON-RPC 2.0")
            && reason.contains("this is not JSON-RPC"),
        "{reason}"
    );
}

#[test]
fn bad_manifests_are_refused_naming_the_file_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    for (text, expected) in [
        (
            "id = \"x\"\ncommand = []\n",
            "`command` must name the program",
        ),
        ("id = \"\"\ncommand = [\"p\"]\n", "`id` must not be empty"),
        (
            "id = \"x\"\ncommand = [\"p\"]\ncolour = 1\n",
            "unknown field `colour`",
        ),
        (
            "id = \"x\"\ncommand = [\"p\"]\n[executor]\nworkspace_directory = \"work\"\n",
            "must be absolute",
        ),
    ] {
        let path = dir.path().join("plugin.toml");
        std::fs::write(&path, text).unwrap();
        let err = load_manifest(&path).unwrap_err().to_string();
        assert!(
            err.contains("plugin.toml") && err.contains(expected),
            "{expected} in {err}"
        );
    }
}

#[tokio::test]
async fn a_plugin_whose_program_is_missing_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plugin.toml");
    std::fs::write(
        &path,
        "id = \"ghost\"\ncommand = [\"./no-such-program\"]\n[[harnesses]]\nid = \"ghost\"\n",
    )
    .unwrap();
    let registry = registry_with(&path);
    let Support::Unsupported { reason, .. } = registry
        .get("ghost")
        .unwrap()
        .harness
        .supports(&ctx("openai"))
        .await
    else {
        panic!("unsupported");
    };
    let reason = reason.unwrap();
    assert!(
        reason.contains("plugin `ghost` cannot be started") && reason.contains("no-such-program"),
        "{reason}"
    );
}
