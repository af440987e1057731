//! Agent steps through the engine, over a real SQLite store, against a local
//! fake chat-completions server (the hosted API cannot be reached here): the
//! built-in loop calls tools in the workspace, journals every turn, and stays
//! inside the workspace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_test_support::engine::{assert_completed, completes};
use rein_test_support::model as common;

use std::sync::Arc;
use std::time::Duration;

use rein_core::{CreateTask, Engine, RunOptions};
use rein_core::{JournalStore, TaskStore};
use rein_protocol::{StepAction, TaskDecomposition, TaskStatus, TaskStep};
use rein_runtimes::openai::{Ask, ChatConfig};

fn agent_step(prompt: &str) -> TaskStep {
    TaskStep::new(
        "draft",
        StepAction::agent(
            prompt,
            &["read_file", "write_file", "list_dir", "run_command"],
        ),
    )
}

async fn engine(dir: &std::path::Path, base: &str) -> (Arc<Engine>, Arc<rein_store::SqliteStore>) {
    engine_with(dir, base, rein_sandbox::Policy::default()).await
}

async fn engine_with(
    dir: &std::path::Path,
    base: &str,
    policy: rein_sandbox::Policy,
) -> (Arc<Engine>, Arc<rein_store::SqliteStore>) {
    let agent = rein_test_support::engine::agent(base, "gpt-test");
    let policy = Arc::new(policy);
    let t = rein_test_support::engine::engine_in(dir)
        .executor(Arc::new(agent))
        .workspaces_here()
        .config(move |c| c.policy = policy)
        .build();
    (t.engine, t.store)
}

/// A task of the one step, in a fresh workspace unless one is given.
async fn create(
    engine: &Engine,
    step: TaskStep,
    workspace: Option<std::path::PathBuf>,
) -> rein_protocol::TaskState {
    engine
        .create(CreateTask {
            plan: TaskDecomposition::new("agent", vec![step]),
            session_id: None,
            workspace,
            confined_to: None,
        })
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builtin_agent_calls_tools_in_the_workspace_and_journals_every_turn() {
    let (base, seen) = common::fake_model().await;
    let dir = tempfile::tempdir().unwrap();
    let (engine, store) = engine(dir.path(), &base).await;
    let state = create(&engine, agent_step("write notes"), None).await;
    let done = completes(&engine, state.id()).await;
    let output = done
        .latest_for_step("draft")
        .unwrap()
        .output
        .clone()
        .unwrap();
    assert_eq!(output["selection"]["selected"], "rein");
    assert_eq!(output["selection"]["reason"], "auto_builtin");
    assert_eq!(output["turns"], 3);
    // The rules the run executed under are part of its record.
    assert!(
        output["policy"].as_str().unwrap().contains("allow"),
        "{output}"
    );
    assert_eq!(output["tool_calls"], 2);
    let text = output["text"].as_str().unwrap();
    assert!(
        text.starts_with("done: ") && text.contains("draft"),
        "{text}"
    );
    assert_eq!(in_workspace(&done, "notes.txt"), "draft");

    // The selection is an event of its own, before the step's result.
    let log = store.events(state.id(), 0, usize::MAX).await.unwrap();
    let kinds: Vec<&str> = log.iter().map(|e| e.change.event_type().as_str()).collect();
    let selected = kinds.iter().position(|k| *k == "runtime_selected").unwrap();
    assert_eq!(kinds[selected + 1], "checkpoint_passed", "{kinds:?}");
    let rein_protocol::TaskChange::RuntimeSelected { decision, .. } = &log[selected].change else {
        panic!("a runtime_selected event");
    };
    assert_eq!(decision.selected, "rein");
    assert_eq!(
        done.latest_for_step("draft").unwrap().metadata["runtime"],
        "rein"
    );

    // Three model requests; each carries the answers so far, in the API's shape.
    let requests = seen.0.lock().unwrap().clone();
    assert_eq!(requests.len(), 3);
    let second = requests[1]["messages"].as_array().unwrap();
    assert_eq!(second[2]["tool_calls"][0]["function"]["name"], "write_file");
    assert_eq!(second[3]["role"], "tool");
    assert_eq!(second[3]["tool_call_id"], "call_1");
    assert_eq!(second[3]["content"], "wrote 5 bytes");
    assert_eq!(requests[0]["tools"].as_array().unwrap().len(), 4);

    // The journal holds the whole transcript, one entry per message.
    let journal = store.load_journal(state.id(), "draft").await.unwrap();
    assert_eq!(journal.len(), 7);
    assert_eq!(journal[0]["message"]["role"], "system");
    assert_eq!(journal[6]["message"]["content"], text);

    // The history shows each of the three turns under the step's start,
    // with where it ends in the journal.
    let history = engine.history(state.id()).await.unwrap();
    let started = history
        .points
        .iter()
        .position(|p| p.kind == rein_protocol::HistoryKind::StepStarted)
        .unwrap();
    let turns: Vec<_> = history.points[started + 1..started + 4].to_vec();
    assert!(
        turns
            .iter()
            .all(|t| t.kind == rein_protocol::HistoryKind::AgentTurn
                && t.seq == history.points[started].seq
                && t.step_id.as_deref() == Some("draft")
                && t.at.is_none()),
        "{turns:#?}"
    );
    let ends: Vec<u64> = turns.iter().map(|t| t.journal_entries.unwrap()).collect();
    let assistant: Vec<u64> = (0..journal.len())
        .filter(|&i| journal[i]["message"]["role"] == "assistant")
        .map(|i| i as u64 + 1)
        .collect();
    assert_eq!(ends, assistant);
    assert_eq!(
        turns.iter().map(|t| t.turn.unwrap()).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert!(
        turns[0].description.contains("called write_file"),
        "{turns:#?}"
    );
    assert!(turns[2].description.contains("said \"done: "), "{turns:#?}");
    assert_eq!(
        history.points[started + 4].kind,
        rein_protocol::HistoryKind::StepFinished
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_goes_through_against_a_server_that_behaves_like_llama_cpp() {
    let (base, seen) = common::llama_like().await;
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = engine(dir.path(), &base).await;
    let state = create(&engine, agent_step("write it"), None).await;
    let done = completes(&engine, state.id()).await;
    assert_eq!(in_workspace(&done, "out.txt"), "from llama");
    // The turn that called the tool went back with a content the template reads.
    let second = seen.0.lock().unwrap()[1].clone();
    let turn = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .cloned()
        .unwrap();
    assert_eq!(turn["content"], "");
    assert_eq!(turn["tool_calls"][0]["function"]["name"], "write_file");
    // It reports no usage when streaming (as llama-cpp-python's server does
    // not): rein estimates, a token per four bytes, and says so.
    let usage = usage_of(&done);
    assert_eq!(usage["estimated"], true, "{usage}");
    let sent = seen.0.lock().unwrap()[0]["messages"].to_string().len() as u64;
    let first_turn_at_least = sent / 4;
    assert!(
        usage["input_tokens"].as_u64().unwrap() > first_turn_at_least,
        "{usage}"
    );
    assert!(usage["output_tokens"].as_u64().unwrap() > 0, "{usage}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_steps_timeout_bounds_a_stream_that_never_goes_idle() {
    let (base, _) = common::fake_model().await;
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = engine(dir.path(), &base).await;
    let mut step = agent_step("ramble");
    step.timeout_ms = Some(400);
    step.recovery.insert(
        rein_protocol::ErrorType::Transient,
        rein_protocol::RecoveryStrategy::action(rein_protocol::RecoveryAction::Abort),
    );
    let state = create(&engine, step, None).await;
    let done = engine.run(state.id(), RunOptions::default()).await.unwrap();
    assert_eq!(done.status(), TaskStatus::Failed);
    let error = rein_test_support::engine::step_error(&done, "draft");
    assert_eq!(
        error,
        "the agent step did not finish within its timeout of 400ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_tools_cannot_leave_the_workspace() {
    let (base, _) = common::fake_model().await;
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = engine(dir.path(), &base).await;
    let state = create(&engine, agent_step("escape"), None).await;
    let done = engine.run(state.id(), RunOptions::default()).await.unwrap();
    assert_eq!(done.status(), TaskStatus::Completed);
    let text = done
        .latest_for_step("draft")
        .unwrap()
        .output
        .clone()
        .unwrap()["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.starts_with("error: ") && text.contains("outside.txt"),
        "{text}"
    );
    assert!(!dir.path().join("workspaces/outside.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_model_fails_the_step_as_a_connection_error() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = engine(dir.path(), "http://127.0.0.1:9/v1").await;
    let mut step = agent_step("write notes");
    // Not the default three retries five seconds apart: fail at once.
    step.recovery.insert(
        rein_protocol::ErrorType::Transient,
        rein_protocol::RecoveryStrategy::action(rein_protocol::RecoveryAction::Abort),
    );
    let state = create(&engine, step, None).await;
    let done = engine.run(state.id(), RunOptions::default()).await.unwrap();
    assert_eq!(done.status(), TaskStatus::Failed);
    let error = rein_test_support::engine::step_error(&done, "draft");
    assert!(error.contains("cannot reach the model API"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builtin_runtime_serves_isolated_completions_with_no_tools() {
    let (base, seen) = common::fake_model().await;
    let chat = rein_runtimes::openai::ChatClient::new(ChatConfig {
        base_url: base,
        api_key: None,
        model: "gpt-test".into(),
        idle_timeout: Duration::from_secs(10),
        stream: true,
    });
    let title = rein_runtimes::agent::builtin_isolated_completion(
        &chat,
        "Title this conversation",
        Some("Answer with a title only"),
        rein_core::harness::isolated::OutputTextPolicy::Default,
    )
    .await
    .unwrap();
    assert_eq!(title, "I do not know this script");
    let request = seen.0.lock().unwrap()[0].clone();
    assert!(
        request.get("tools").is_none(),
        "a literally empty tool surface"
    );
    assert_eq!(request["messages"].as_array().unwrap().len(), 2);
    // A tool call is refused, as for any isolated completion.
    let err = rein_runtimes::agent::builtin_isolated_completion(
        &chat,
        "write notes",
        None,
        rein_core::harness::isolated::OutputTextPolicy::Default,
    )
    .await
    .unwrap_err();
    assert_eq!(err.to_string(), "isolated completion returned a tool call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_the_rules_ask_about_waits_for_a_person_and_runs_once_approved() {
    let (base, seen) = common::fake_model().await;
    let dir = tempfile::tempdir().unwrap();
    let policy = rein_sandbox::Policy::parse(
        "[[rules]]\nverdict = \"ask\"\ncommand = \"rm **\"\n",
        "test policy",
    )
    .unwrap();
    let (engine, _) = engine_with(dir.path(), &base, policy).await;
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("old.txt"), "old").unwrap();
    let state = create(&engine, agent_step("risky"), Some(ws.clone())).await;
    let no_wait = RunOptions {
        no_wait: true,
        ..RunOptions::default()
    };
    let paused = engine.run(state.id(), no_wait).await.unwrap();
    assert_eq!(paused.status(), TaskStatus::Paused);
    assert!(
        ws.join("old.txt").exists(),
        "nothing ran before a person said so"
    );
    let pending = pending(&engine, state.id()).await;
    assert_eq!(pending.len(), 1);
    assert!(
        pending[0].description.contains("rm -f old.txt"),
        "{:?}",
        pending[0]
    );
    engine
        .decide(rein_protocol::ApprovalResponse {
            request_id: pending[0].id.clone(),
            decision: rein_protocol::Decision::Approve,
            selected_option: Some("rerun".into()),
            reason: None,
            decided_by: "ana".into(),
            delegate_to: None,
            decided_at: chrono::Utc::now(),
        })
        .await
        .unwrap();
    let done = completes(&engine, state.id()).await;
    assert!(!ws.join("old.txt").exists(), "the approved command ran");
    let text = done
        .latest_for_step("draft")
        .unwrap()
        .output
        .clone()
        .unwrap()["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(text.contains("(approved by ana)"), "{text}");
    // The model's turn was not asked for again.
    assert_eq!(seen.0.lock().unwrap().len(), 2);
}

/// The task's pending approval requests.
async fn pending(
    engine: &Engine,
    task: &rein_protocol::TaskId,
) -> Vec<rein_protocol::ApprovalRequest> {
    engine
        .approvals(&rein_core::store::ApprovalFilter {
            status: Some(rein_protocol::ApprovalStatus::Pending),
            task_id: Some(task.clone()),
            limit: None,
        })
        .await
        .unwrap()
}

/// A file of the task's workspace.
fn in_workspace(done: &rein_protocol::TaskState, name: &str) -> String {
    let ws = std::path::PathBuf::from(done.head.resources.workspace_path.clone().unwrap());
    std::fs::read_to_string(ws.join(name)).unwrap()
}

/// An agent step on `provider`.
fn on_provider(provider: &str, prompt: &str) -> TaskStep {
    let mut step = agent_step(prompt);
    if let StepAction::Agent { provider: p, .. } = &mut step.action {
        *p = Some(provider.into());
    }
    step
}

fn with_limits(prompt: &str, limits: rein_protocol::AgentLimits) -> TaskStep {
    let mut step = agent_step(prompt);
    step.action = step.action.with_limits(limits);
    step
}

fn text_of(done: &rein_protocol::TaskState) -> String {
    done.latest_for_step("draft")
        .unwrap()
        .output
        .clone()
        .unwrap()["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_that_requires_a_tool_call_fails_on_prose_and_its_tool_choice_is_sent() {
    let (base, seen) = common::fake_model().await;
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = engine(dir.path(), &base).await;
    let step = with_limits(
        "prose",
        rein_protocol::AgentLimits {
            tool_choice: Some("write_file".into()),
            require_tool_call: true,
            ..Default::default()
        },
    );
    let state = create(&engine, step, None).await;
    let no_wait = RunOptions {
        no_wait: true,
        ..RunOptions::default()
    };
    let done = engine.run(state.id(), no_wait).await.unwrap();
    // A validation error pauses the task (the default recovery).
    assert_eq!(done.status(), TaskStatus::Paused);
    let error = rein_test_support::engine::step_error(&done, "draft");
    assert!(
        error.starts_with("the agent answered without calling any tool, and the step has require_tool_call = true; its answer: Here is what I would do."),
        "{error}"
    );
    let sent = seen.0.lock().unwrap()[0].clone();
    assert_eq!(
        sent["tool_choice"],
        serde_json::json!({ "type": "function", "function": { "name": "write_file" } })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_tool_choice_holds_until_the_model_made_that_call_so_the_step_finishes() {
    for (choice, forced) in [
        (
            "write_file",
            serde_json::json!({ "type": "function", "function": { "name": "write_file" } }),
        ),
        ("required", serde_json::json!("required")),
    ] {
        let (base, seen) = common::fake_model().await;
        let dir = tempfile::tempdir().unwrap();
        let (engine, store) = engine(dir.path(), &base).await;
        let step = with_limits(
            "write notes",
            rein_protocol::AgentLimits {
                tool_choice: Some(choice.into()),
                ..Default::default()
            },
        );
        let state = create(&engine, step, None).await;
        completes(&engine, state.id()).await;
        // Forced on the first turn only: it called write_file, and the later
        // turns were the server's default, so the model could answer.
        let requests = seen.0.lock().unwrap().clone();
        assert_eq!(requests.len(), 3);
        assert_eq!(requests[0]["tool_choice"], forced, "{choice}");
        assert!(requests[1].get("tool_choice").is_none(), "{choice}");
        assert!(requests[2].get("tool_choice").is_none(), "{choice}");
        // The journal says which turn was forced.
        let journal = store.load_journal(state.id(), "draft").await.unwrap();
        let forced_turns: Vec<&str> = journal
            .iter()
            .filter_map(|e| e["tool_choice"].as_str())
            .collect();
        assert_eq!(forced_turns, [choice]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_streams_tool_calls_are_neither_run_nor_kept_and_the_turn_is_retryable() {
    let (base, _) = common::fake_model().await;
    let dir = tempfile::tempdir().unwrap();
    let (engine, store) = engine(dir.path(), &base).await;
    let mut step = agent_step("garbled");
    step.recovery.insert(
        rein_protocol::ErrorType::Transient,
        rein_protocol::RecoveryStrategy::action(rein_protocol::RecoveryAction::Abort),
    );
    let state = create(&engine, step, None).await;
    let done = engine.run(state.id(), RunOptions::default()).await.unwrap();
    assert_ne!(done.status(), TaskStatus::Completed);
    let cp = done.latest_for_step("draft").unwrap();
    let error = cp.error.clone().unwrap();
    assert!(
        error.starts_with(
            "the model API's answer cannot be acted on: 2 tool calls share the id `toolu_1`"
        ),
        "{error}"
    );
    // Classified as a server's fault: retryable.
    assert_eq!(cp.metadata["error_type"], "transient", "{:?}", cp.metadata);
    // Nothing was run, and no turn of it was journaled.
    let ws = std::path::PathBuf::from(done.head.resources.workspace_path.clone().unwrap());
    assert!(!ws.join("a.txt").exists());
    let journal = store.load_journal(state.id(), "draft").await.unwrap();
    assert!(
        journal.iter().all(|e| e["message"]["role"] != "assistant"),
        "{journal:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_cut_at_the_token_limit_fails_unless_the_step_says_go_on() {
    let (base, seen) = common::fake_model().await;
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = engine(dir.path(), &base).await;
    let no_wait = RunOptions {
        no_wait: true,
        ..RunOptions::default()
    };
    let state = create(&engine, agent_step("long"), None).await;
    let done = engine.run(state.id(), no_wait.clone()).await.unwrap();
    assert_eq!(done.status(), TaskStatus::Paused);
    let error = rein_test_support::engine::step_error(&done, "draft");
    assert!(
        error.contains("output token limit (finish_reason `length`)"),
        "{error}"
    );

    let go_on = with_limits(
        "long",
        rein_protocol::AgentLimits {
            continue_at_length: true,
            ..Default::default()
        },
    );
    let state = create(&engine, go_on, None).await;
    let done = engine.run(state.id(), no_wait).await.unwrap();
    assert_completed(&done);
    assert_eq!(text_of(&done), "part one, part two.");
    // The model was asked to go on, after its own cut answer.
    let last = seen.0.lock().unwrap().last().cloned().unwrap();
    let messages = last["messages"].as_array().unwrap();
    assert_eq!(messages[messages.len() - 2]["content"], "part one, ");
    assert!(
        messages[messages.len() - 1]["content"]
            .as_str()
            .unwrap()
            .starts_with("Your answer was cut off")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_at_its_turn_limit_goes_on_for_the_turns_a_person_grants() {
    let (_dir, engine, state, seen, run) = at_turn_limit(2).await;
    let pending = pending_of(&engine, &state).await;
    assert_eq!(pending.len(), 1);
    assert!(
        pending[0].title.contains("used its 2 model turns"),
        "{:?}",
        pending[0]
    );
    assert_eq!(
        pending[0].options,
        ["2 more turns", "4 more turns", "8 more turns", "stop"]
    );
    assert_eq!(seen.0.lock().unwrap().len(), 2);
    decide(&engine, &pending[0], Some("2 more turns")).await;
    // The waiting run goes on: two more turns, enough to finish; the first
    // two are not asked again.
    let done = run.await.unwrap().unwrap();
    assert_completed(&done);
    assert_eq!(text_of(&done), "listed three times");
    assert_eq!(seen.0.lock().unwrap().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_who_stops_the_agent_at_its_turn_limit_fails_the_step_saying_so() {
    let (_dir, engine, state, _, run) = at_turn_limit(1).await;
    let pending = pending_of(&engine, &state).await;
    decide(&engine, &pending[0], Some("stop")).await;
    let done = run.await.unwrap().unwrap();
    let error = rein_test_support::engine::step_error(&done, "draft");
    assert_eq!(
        error,
        "the agent did not finish within 1 model turns, and ana chose to stop it"
    );
}

/// The run of a task's step, in the background.
type Running = tokio::task::JoinHandle<Result<rein_protocol::TaskState, rein_core::EngineError>>;

/// An agent step of `max_turns` that needs three, running until it stops at
/// its limit and asks a person: the run (waiting for the answer), and what
/// it runs on.
async fn at_turn_limit(
    max_turns: u32,
) -> (
    tempfile::TempDir,
    Arc<Engine>,
    rein_protocol::TaskState,
    common::Seen,
    Running,
) {
    let (base, seen) = common::fake_model().await;
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = engine(dir.path(), &base).await;
    let step = with_limits(
        "list three times",
        rein_protocol::AgentLimits {
            max_turns: Some(max_turns),
            ..Default::default()
        },
    );
    let state = create(&engine, step, None).await;
    let run = tokio::spawn({
        let (engine, id) = (Arc::clone(&engine), state.id().clone());
        async move { engine.run(&id, RunOptions::default()).await }
    });
    for _ in 0..500 {
        if !pending_of(&engine, &state).await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (dir, engine, state, seen, run)
}

/// The task's pending approval requests.
async fn pending_of(
    engine: &Engine,
    state: &rein_protocol::TaskState,
) -> Vec<rein_protocol::ApprovalRequest> {
    engine
        .approvals(&rein_core::store::ApprovalFilter {
            status: Some(rein_protocol::ApprovalStatus::Pending),
            task_id: Some(state.id().clone()),
            limit: None,
        })
        .await
        .unwrap()
}

/// Ana approves `request` with `option`.
async fn decide(engine: &Engine, request: &rein_protocol::ApprovalRequest, option: Option<&str>) {
    engine
        .decide(rein_protocol::ApprovalResponse {
            request_id: request.id.clone(),
            decision: rein_protocol::Decision::Approve,
            selected_option: option.map(str::to_owned),
            reason: None,
            decided_by: "ana".into(),
            delegate_to: None,
            decided_at: chrono::Utc::now(),
        })
        .await
        .unwrap();
}

fn anthropic(base: &str) -> rein_runtimes::anthropic::AnthropicConfig {
    rein_runtimes::anthropic::AnthropicConfig {
        base_url: base.into(),
        api_key: Some("sk-ant-test".into()),
        model: "claude-test".into(),
        max_tokens: 1024,
        idle_timeout: Duration::from_secs(10),
        stream: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_step_on_anthropic_writes_a_file_through_the_messages_api() {
    let (base, seen) = common::anthropic_like().await;
    let agent =
        rein_test_support::engine::agent_on(ChatConfig::default()).with_anthropic(anthropic(&base));
    let rein_test_support::engine::TestEngine {
        store,
        engine,
        dir: _dir,
        ..
    } = rein_test_support::engine::engine()
        .executor(Arc::new(agent))
        .build();
    let step = on_provider("anthropic", "write hello");
    let state = create(&engine, step, None).await;
    let done = completes(&engine, state.id()).await;
    assert_eq!(text_of(&done), "Wrote hello.txt.");
    assert_eq!(in_workspace(&done, "hello.txt"), "hello from claude");
    // The second request carries the turn and the result in the API's shape.
    let second = seen.0.lock().unwrap()[1].clone();
    assert_eq!(second["model"], "claude-test");
    assert_eq!(second["max_tokens"], 1024);
    assert!(
        second["system"][0]["text"]
            .as_str()
            .unwrap()
            .contains("built-in agent")
    );
    assert_eq!(second["tools"][0]["input_schema"]["type"], "object");
    // Prompt caching: the system text, the tools and the conversation's
    // stable prefix are marked (four breakpoints at most).
    let ephemeral = serde_json::json!({ "type": "ephemeral" });
    assert_eq!(second["system"][0]["cache_control"], ephemeral);
    let tools = second["tools"].as_array().unwrap();
    assert_eq!(tools.last().unwrap()["cache_control"], ephemeral);
    let marks = serde_json::to_string(&second)
        .unwrap()
        .matches("\"cache_control\"")
        .count();
    assert!(marks <= 4, "{marks} breakpoints");
    let last = second["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        last["content"].as_array().unwrap().last().unwrap()["cache_control"],
        ephemeral
    );
    let turns = second["messages"].as_array().unwrap();
    assert_eq!(turns[1]["role"], "assistant");
    assert_eq!(
        turns[1]["content"][0],
        serde_json::json!({ "type": "text", "text": "I will write it." })
    );
    assert_eq!(
        turns[1]["content"][1],
        serde_json::json!({ "type": "tool_use", "id": "toolu_1", "name": "write_file", "input": { "path": "hello.txt", "content": "hello from claude" } })
    );
    assert_eq!(turns[2]["role"], "user");
    assert_eq!(turns[2]["content"][0]["type"], "tool_result");
    assert_eq!(turns[2]["content"][0]["tool_use_id"], "toolu_1");
    // Each model turn's journal entry has the provider's request id.
    let journal = rein_core::journal::Journal::new(store.clone(), state.id(), "draft")
        .load()
        .await
        .unwrap();
    let ids: Vec<&str> = journal
        .iter()
        .filter_map(|e| e["request_id"].as_str())
        .collect();
    assert_eq!(ids, ["req_ant_1", "req_ant_1"]);
    // Metered from Anthropic's own fields: every prompt token is the fresh
    // ones, the cache read and the cache written (10 + 6 + 4), the cached
    // part the read; the output, message_delta's last count (20, then 5).
    let usage = usage_of(&done);
    assert_eq!(usage["input_tokens"], 40, "{usage}");
    assert_eq!(usage["cached_input_tokens"], 12);
    assert_eq!(usage["output_tokens"], 25);
    assert_eq!(
        usage["by_model"]["anthropic/claude-test"]["output_tokens"],
        25
    );
    let served: Vec<&str> = journal
        .iter()
        .filter_map(|e| e["usage"]["served_model"].as_str())
        .collect();
    assert_eq!(served, ["claude-test", "claude-test"]);
}

/// The usage in the output of step `draft`.
fn usage_of(done: &rein_protocol::TaskState) -> serde_json::Value {
    done.latest_for_step("draft")
        .unwrap()
        .output
        .clone()
        .unwrap()["usage"]
        .clone()
}

#[tokio::test]
async fn the_messages_apis_refusals_are_classified_like_http_errors() {
    use rein_runtimes::anthropic::AnthropicClient;
    use rein_runtimes::openai::{ChatError, Message};
    let (base, _) = common::anthropic_like().await;
    let ask = |text: &str| {
        vec![Message::User {
            content: text.into(),
        }]
    };
    let client = AnthropicClient::new(anthropic(&base));
    let err = client
        .ask(&ask("busy"), &[], &Ask::default(), |_| {})
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ChatError::Http {
            status: 429,
            message: "Number of requests has exceeded your rate limit".into(),
            retry_after: Some(Duration::from_secs(3)),
            code: Some("rate_limit_error".into()),
        }
    );
    let err = client
        .ask(&ask("overloaded"), &[], &Ask::default(), |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(err, ChatError::Http { status: 529, .. }),
        "{err:?}"
    );
    let wrong_key = AnthropicClient::new(rein_runtimes::anthropic::AnthropicConfig {
        api_key: Some("sk-wrong".into()),
        ..anthropic(&base)
    });
    let err = wrong_key
        .ask(&ask("hello"), &[], &Ask::default(), |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(err, ChatError::Http { status: 401, .. }),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_the_builtin_runtime_does_not_speak_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = engine(dir.path(), "http://127.0.0.1:9/v1").await;
    let step = on_provider("mistral", "write notes");
    let state = create(&engine, step, None).await;
    let no_wait = RunOptions {
        no_wait: true,
        ..RunOptions::default()
    };
    let done = engine.run(state.id(), no_wait).await.unwrap();
    let error = rein_test_support::engine::step_error(&done, "draft");
    assert!(
        error.starts_with(
            "the built-in runtime speaks the providers openai, openai-responses, anthropic, not `mistral`"
        ),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_step_on_the_responses_api_writes_a_file() {
    let (base, seen) = common::responses_like().await;
    let dir = tempfile::tempdir().unwrap();
    let (engine, store) = engine(dir.path(), &base).await;
    let step = on_provider("openai-responses", "write it");
    let state = create(&engine, step, None).await;
    let done = completes(&engine, state.id()).await;
    assert_eq!(text_of(&done), "Wrote it.");
    assert_eq!(in_workspace(&done, "r.txt"), "from responses");
    let second = seen.0.lock().unwrap()[1].clone();
    assert_eq!(second["store"], false);
    assert!(
        second["instructions"]
            .as_str()
            .unwrap()
            .contains("built-in agent")
    );
    assert_eq!(second["tools"][0]["type"], "function");
    assert_eq!(second["tools"][0]["name"], "read_file");
    let input = second["input"].as_array().unwrap();
    assert_eq!(input[1]["type"], "function_call");
    assert_eq!(input[1]["call_id"], "call_r1");
    assert_eq!(input[2]["type"], "function_call_output");
    assert_eq!(input[2]["call_id"], "call_r1");
    let journal = rein_core::journal::Journal::new(store.clone(), state.id(), "draft")
        .load()
        .await
        .unwrap();
    assert!(journal.iter().any(|e| e["request_id"] == "req_resp_1"));
    // Metered from the Responses API's `usage` of `response.completed`.
    let usage = usage_of(&done);
    assert_eq!(usage["input_tokens"], 60, "{usage}");
    assert_eq!(usage["cached_input_tokens"], 16);
    assert_eq!(usage["output_tokens"], 24);
    assert_eq!(usage["reasoning_tokens"], 6);
    assert!(
        journal
            .iter()
            .any(|e| e["usage"]["served_model"] == "gpt-resp-2025")
    );

    // A rate limit reported in the stream is a 429.
    let client = rein_runtimes::responses::ResponsesClient::new(ChatConfig {
        base_url: base.clone(),
        api_key: None,
        model: "gpt-test".into(),
        idle_timeout: Duration::from_secs(10),
        stream: true,
    });
    let busy = [rein_runtimes::openai::Message::User {
        content: "busy".into(),
    }];
    let err = client
        .ask(&busy, &[], &Ask::default(), |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            rein_runtimes::openai::ChatError::Http { status: 429, .. }
        ),
        "{err:?}"
    );
}

/// A step's own `permissions` govern the commands its agent asks for, as the
/// policy file's do: `deny` on every command refuses `run_command` (and the
/// output names the step's rule), `ask` waits for a person.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steps_own_rules_govern_its_agents_commands() {
    let (base, _seen) = common::fake_model().await;
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = engine(dir.path(), &base).await;
    for verdict in ["deny", "ask"] {
        let ws = dir.path().join(format!("ws-{verdict}"));
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("old.txt"), "old").unwrap();
        let mut step = agent_step("risky");
        step.permissions = vec![rein_protocol::PermissionRule {
            verdict: Some(if verdict == "deny" {
                rein_protocol::Verdict::Deny
            } else {
                rein_protocol::Verdict::Ask
            }),
            command: Some("**".into()),
            ..Default::default()
        }];
        let state = create(&engine, step, Some(ws.clone())).await;
        let no_wait = RunOptions {
            no_wait: true,
            ..RunOptions::default()
        };
        let ran = engine.run(state.id(), no_wait).await.unwrap();
        assert!(
            ws.join("old.txt").exists(),
            "{verdict}: the command did not run: {:#?}",
            ran.latest_for_step("draft").map(|c| c.output.clone())
        );
        if verdict == "deny" {
            assert_eq!(ran.status(), TaskStatus::Completed, "{:?}", ran.head.error);
            let output = ran
                .latest_for_step("draft")
                .unwrap()
                .output
                .clone()
                .unwrap();
            let text = output["text"].as_str().unwrap();
            assert!(
                text.contains("refused by the permission rules") && text.contains("step `draft`"),
                "{text}"
            );
            assert!(
                output["policy"]
                    .as_str()
                    .unwrap()
                    .contains("1 from step `draft`"),
                "{output}"
            );
        } else {
            assert_eq!(ran.status(), TaskStatus::Paused);
            let pending = pending(&engine, state.id()).await;
            assert_eq!(pending.len(), 1);
            assert!(
                pending[0].description.contains("rm -f old.txt"),
                "{:?}",
                pending[0]
            );
        }
    }
}

/// A step with `stream = false`.
fn unstreamed(provider: Option<&str>, prompt: &str) -> TaskStep {
    let mut step = with_limits(
        prompt,
        rein_protocol::AgentLimits {
            stream: Some(false),
            ..Default::default()
        },
    );
    if let (StepAction::Agent { provider: p, .. }, Some(provider)) = (&mut step.action, provider) {
        *p = Some(provider.into());
    }
    step
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_with_stream_false_asks_each_provider_for_one_json_body() {
    // Chat Completions: `stream: false`, no `stream_options`; the tool calls
    // and the usage come from the `chat.completion` body.
    let (base, seen) = common::fake_model().await;
    let dir = tempfile::tempdir().unwrap();
    let (chat, store) = engine(dir.path(), &base).await;
    let state = create(&chat, unstreamed(None, "write notes"), None).await;
    let done = completes(&chat, state.id()).await;
    assert_eq!(in_workspace(&done, "notes.txt"), "draft");
    assert!(text_of(&done).starts_with("done: "), "{}", text_of(&done));
    let requests = seen.0.lock().unwrap().clone();
    assert_eq!(requests.len(), 3);
    for r in &requests {
        assert_eq!(r["stream"], false, "{r}");
        assert!(r.get("stream_options").is_none(), "{r}");
        assert_eq!(r["answered_whole"], true);
    }
    let reported: u64 = requests
        .iter()
        .map(|r| r["reported_usage"]["prompt_tokens"].as_u64().unwrap())
        .sum();
    let usage = usage_of(&done);
    assert_eq!(usage["input_tokens"], reported, "{usage}");
    assert_ne!(usage["estimated"], true, "{usage}");
    let journal = rein_core::journal::Journal::new(store.clone(), state.id(), "draft")
        .load()
        .await
        .unwrap();
    assert!(journal.iter().any(|e| e["request_id"] == "req_whole_1"));

    // The Responses API: the response object's output items.
    let (base, seen) = common::responses_like().await;
    let dir = tempfile::tempdir().unwrap();
    let (responses, _) = engine(dir.path(), &base).await;
    let state = create(
        &responses,
        unstreamed(Some("openai-responses"), "write it"),
        None,
    )
    .await;
    let done = completes(&responses, state.id()).await;
    assert_eq!(text_of(&done), "Wrote it.");
    assert_eq!(in_workspace(&done, "r.txt"), "from responses");
    assert!(seen.0.lock().unwrap().iter().all(|r| r["stream"] == false));
    let usage = usage_of(&done);
    assert_eq!(usage["input_tokens"], 60, "{usage}");
    assert_eq!(usage["reasoning_tokens"], 6, "{usage}");

    // The Messages API: the message's blocks, its stop reason and usage.
    let (base, seen) = common::anthropic_like().await;
    let agent =
        rein_test_support::engine::agent_on(ChatConfig::default()).with_anthropic(anthropic(&base));
    let rein_test_support::engine::TestEngine {
        engine: messages,
        dir: _dir,
        ..
    } = rein_test_support::engine::engine()
        .executor(Arc::new(agent))
        .build();
    let state = create(
        &messages,
        unstreamed(Some("anthropic"), "write hello"),
        None,
    )
    .await;
    let done = completes(&messages, state.id()).await;
    assert_eq!(text_of(&done), "Wrote hello.txt.");
    assert_eq!(in_workspace(&done, "hello.txt"), "hello from claude");
    assert!(seen.0.lock().unwrap().iter().all(|r| r["stream"] == false));
    let usage = usage_of(&done);
    assert_eq!(usage["input_tokens"], 40, "{usage}");
    assert_eq!(usage["output_tokens"], 25, "{usage}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_json_answer_to_a_request_for_a_stream_is_read() {
    // A proxy that turned streaming off answers a streamed request with one
    // `chat.completion` body, tool calls in it: the step does its work.
    let (base, seen) = common::fake_model_unstreamed().await;
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = engine(dir.path(), &base).await;
    let state = create(&engine, agent_step("write notes"), None).await;
    let done = completes(&engine, state.id()).await;
    assert_eq!(in_workspace(&done, "notes.txt"), "draft");
    let requests = seen.0.lock().unwrap().clone();
    assert!(requests.iter().all(|r| r["stream"] == true));
    assert!(requests.iter().all(|r| r["answered_whole"] == true));
    assert_ne!(usage_of(&done)["estimated"], true);
}

#[tokio::test]
async fn a_json_body_that_is_not_an_answer_is_named() {
    use axum::routing::post;
    // A 200 `application/json` body that is not JSON, and one without
    // `choices`: each named, never a panic or a silent empty answer.
    let app = axum::Router::new()
        .route(
            "/v1/chat/completions",
            post(|| async {
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    "{\"choices\": [",
                )
            }),
        )
        .route(
            "/v2/chat/completions",
            post(|| async {
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json; charset=utf-8")],
                    "{\"object\": \"list\", \"data\": []}",
                )
            }),
        )
        .route(
            "/v3/chat/completions",
            post(|| async {
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    "{\"error\": {\"message\": \"Rate limit reached\", \"type\": \"rate_limit_error\", \"code\": 429}}",
                )
            }),
        );
    let addr = rein_test_support::model::serve(app).await;
    let ask = [rein_runtimes::openai::Message::User {
        content: "hello".into(),
    }];
    let client = |version: &str| {
        rein_runtimes::openai::ChatClient::new(ChatConfig {
            base_url: format!("http://{addr}/{version}"),
            api_key: None,
            model: "m".into(),
            idle_timeout: Duration::from_secs(10),
            stream: false,
        })
    };
    let err = client("v1")
        .complete(&ask, &[], |_| {})
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("a JSON content type but a body that is not JSON")
            && err.contains("{\"choices\": ["),
        "{err}"
    );
    let err = client("v2")
        .complete(&ask, &[], |_| {})
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("without `choices`"), "{err}");
    let err = client("v3").complete(&ask, &[], |_| {}).await.unwrap_err();
    assert!(
        matches!(
            err,
            rein_runtimes::openai::ChatError::Http { status: 429, .. }
        ),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_turn_is_no_answer_and_the_step_is_retried() {
    let (base, _) = common::fake_model().await;
    let dir = tempfile::tempdir().unwrap();
    let (engine, store) = engine(dir.path(), &base).await;
    let state = create(&engine, agent_step("say nothing once"), None).await;
    let done = completes(&engine, state.id()).await;
    assert_eq!(text_of(&done), "said something");
    // The first attempt failed as a server's fault (retryable), naming why.
    let attempts: Vec<_> = done
        .checkpoints
        .iter()
        .filter(|c| c.step_id.as_deref() == Some("draft"))
        .collect();
    assert_eq!(attempts.len(), 2, "{attempts:#?}");
    let error = attempts[0].error.clone().unwrap();
    assert!(
        error.starts_with("the model's answer was empty: no text and no tool call"),
        "{error}"
    );
    assert_eq!(attempts[0].metadata["error_type"], "transient");
    // The empty turn was not kept: the conversation has one answer.
    let journal = store.load_journal(state.id(), "draft").await.unwrap();
    let answers: Vec<_> = journal
        .iter()
        .filter(|e| e["message"]["role"] == "assistant")
        .collect();
    assert_eq!(answers.len(), 1, "{journal:?}");
}
