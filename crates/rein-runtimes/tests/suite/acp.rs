//! The ACP runtime against real ACP agent processes: a small agent on the
//! official ACP TypeScript SDK (`tests/acp/agent.mjs`, its package installed
//! by `.ci/run` with `npm ci`) that streams updates, asks permission and edits
//! a file — and agents that crash, hang or talk nonsense
//! (`tests/acp/misbehave.py`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rein_core::executor::{Asker, StepMessage};
use rein_core::harness::{
    AttemptEvent, AttemptParams, AttemptResult, HarnessError, HarnessRegistry,
};
use rein_protocol::{ApprovalRequest, ApprovalResponse, CheckpointId, Decision, TaskId};
use rein_runtimes::{load_manifest, register_plugin};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use rein_test_support::npm as npm_packages;

fn agent_dir() -> PathBuf {
    npm_packages::acp_agent_dir()
}

/// A manifest for an ACP agent run as `command`, with `env`.
fn manifest(dir: &Path, command: &[String], env: &[(&str, &str)]) -> PathBuf {
    let quoted: Vec<String> = command.iter().map(|c| format!("{c:?}")).collect();
    let env: Vec<String> = env.iter().map(|(k, v)| format!("{k} = {v:?}")).collect();
    let text = format!(
        "id = \"test-agent\"\nprotocol = \"acp\"\ncommand = [{}]\n\n[env]\n{}\n\n\
         [[harnesses]]\nid = \"acp-test\"\nlabel = \"ACP test agent\"\nauto_selection_provider_ids = []\n",
        quoted.join(", "),
        env.join("\n")
    );
    let path = dir.join("agent.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn sdk_agent(dir: &Path, env: &[(&str, &str)]) -> HarnessRegistry {
    let script = agent_dir().join("agent.mjs").display().to_string();
    let state = dir.join("agent-state").display().to_string();
    let mut env = env.to_vec();
    env.push(("ACP_TEST_STATE", &state));
    registry(&manifest(dir, &["node".into(), script], &env))
}

fn misbehaving(dir: &Path, mode: &str) -> HarnessRegistry {
    misbehaving_with(dir, &[mode])
}

fn misbehaving_with(dir: &Path, args: &[&str]) -> HarnessRegistry {
    let script = agent_dir().join("misbehave.py").display().to_string();
    let mut command = vec!["python3".to_owned(), script];
    command.extend(args.iter().map(|a| (*a).to_owned()));
    registry(&manifest(dir, &command, &[]))
}

fn registry(path: &Path) -> HarnessRegistry {
    let mut registry = HarnessRegistry::new(1);
    let (m, dir) = load_manifest(path).unwrap();
    assert!(register_plugin(&mut registry, m, dir).is_empty());
    registry
}

/// What the step's run got from the attempt, in order: reports (by kind of
/// update) and questions.
#[derive(Debug, Default)]
struct Seen {
    asked: Vec<ApprovalRequest>,
    log: Vec<String>,
}

/// A person who answers every question with `decision` (and `option`), and
/// what the step's run was sent.
fn person(decision: Decision, option: Option<&str>) -> (Asker, tokio::task::JoinHandle<Seen>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<StepMessage>();
    let option = option.map(str::to_owned);
    let answers = tokio::spawn(async move {
        let mut seen = Seen::default();
        while let Some(message) = rx.recv().await {
            let ask = match message {
                StepMessage::Ask(ask) => *ask,
                StepMessage::Report { update, .. } => {
                    seen.log
                        .push(update["sessionUpdate"].as_str().unwrap_or("?").to_owned());
                    continue;
                }
                StepMessage::Started { .. } => continue,
            };
            seen.log.push("question".into());
            let q = ask.question;
            let mut request = ApprovalRequest {
                description: q.description,
                options: q.options,
                question: Some(q.key),
                ..ApprovalRequest::pending(
                    TaskId::new(),
                    CheckpointId::new(),
                    Some("draft".into()),
                    q.trigger,
                    q.title,
                    chrono::Utc::now(),
                )
            };
            seen.asked.push(request.clone());
            request.status = decision.status();
            request.response = Some(ApprovalResponse {
                request_id: request.id.clone(),
                decision,
                selected_option: option.clone(),
                reason: None,
                decided_by: "alice".into(),
                delegate_to: None,
                decided_at: chrono::Utc::now(),
            });
            let _ = ask.reply.send(Ok(request));
        }
        seen
    });
    (Asker::new(0, tx), answers)
}

struct Attempt {
    result: Result<AttemptResult, HarnessError>,
    events: Vec<AttemptEvent>,
}

async fn attempt(
    registry: &HarnessRegistry,
    workspace: &Path,
    prompt: &str,
    asker: Option<Asker>,
    cancel: CancellationToken,
    deadline: Duration,
) -> Attempt {
    let policy = std::sync::Arc::default();
    attempt_under(registry, workspace, prompt, asker, cancel, deadline, policy).await
}

/// [`attempt`] under the permission rules `policy`.
async fn attempt_under(
    registry: &HarnessRegistry,
    workspace: &Path,
    prompt: &str,
    asker: Option<Asker>,
    cancel: CancellationToken,
    deadline: Duration,
    policy: std::sync::Arc<rein_sandbox::Policy>,
) -> Attempt {
    let harness = &registry.get("acp-test").unwrap().harness;
    let (events, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let result = harness
        .run_attempt(AttemptParams {
            attempt_id: "task.draft.1".into(),
            prompt: prompt.into(),
            tools: Vec::new(),
            session_key: "task-1".into(),
            workspace: rein_sandbox::Pinned::pin(&workspace.canonicalize().unwrap()).unwrap(),
            deadline,
            cancel,
            events,
            asker,
            journal: None,
            mcp_servers: Vec::new(),
            policy,
            images: Vec::new(),
            delegated_execution: None,
        })
        .await;
    let mut seen = Vec::new();
    while let Ok(e) = rx.try_recv() {
        seen.push(e);
    }
    Attempt {
        result,
        events: seen,
    }
}

/// One attempt of the SDK agent (run with `env`) on `prompt`, a person
/// answering its questions with `answer` (`None`: nobody to ask), in a fresh
/// directory (`dir`) whose `ws` is the workspace.
struct Answered {
    dir: tempfile::TempDir,
    ws: PathBuf,
    run: Attempt,
}

async fn answered(
    env: &[(&str, &str)],
    answer: Option<(Decision, Option<&str>)>,
    prompt: &str,
) -> Answered {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let registry = sdk_agent(dir.path(), env);
    let asker = answer.map(|(decision, option)| person(decision, option).0);
    let run = attempt(
        &registry,
        &ws,
        prompt,
        asker,
        CancellationToken::new(),
        LONG,
    )
    .await;
    Answered { dir, ws, run }
}

fn workspace(dir: &Path) -> PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    ws
}

fn agent_updates(events: &[AttemptEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            AttemptEvent::Agent(v) => v["sessionUpdate"].as_str().map(str::to_owned),
            AttemptEvent::PartialReply(_) => None,
        })
        .collect()
}

/// The agent's message chunks, streamed as partial replies, put together.
fn partial_replies(events: &[AttemptEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            AttemptEvent::PartialReply(t) => Some(t.as_str()),
            AttemptEvent::Agent(_) => None,
        })
        .collect()
}

fn side_effects(details: &Value) -> Vec<(String, String)> {
    details["side_effects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["what"].as_str().unwrap().to_owned(),
                s["capture"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

const LONG: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_streams_asks_permission_and_edits_through_reins_callback() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let registry = sdk_agent(dir.path(), &[]);
    let (asker, asked) = person(Decision::Approve, Some("allow_once"));
    let run = attempt(
        &registry,
        &ws,
        "write notes.md: release notes for 1.2",
        Some(asker),
        CancellationToken::new(),
        LONG,
    )
    .await;
    let result = run.result.unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.md")).unwrap(),
        "release notes for 1.2"
    );
    assert_eq!(result.stop_reason, "end_turn");
    assert_eq!(
        result.text,
        "Working on it. Wrote notes.md (21 bytes, opt-allow)."
    );
    // Streamed: message chunks as partial replies, the rest as agent events.
    let partial = partial_replies(&run.events);
    assert_eq!(partial, result.text);
    // With a run to report to, updates go there, in order with the question
    // (the tool call is announced before it is asked about).
    assert!(agent_updates(&run.events).is_empty());
    let seen = asked.await.unwrap();
    assert_eq!(
        seen.log,
        [
            "plan",
            "tool_call",
            "question",
            "tool_call_update",
            "tool_call_update"
        ]
    );
    // The question a person got: the tool call, with the ACP option kinds.
    let asked = seen.asked;
    assert_eq!(asked.len(), 1);
    assert_eq!(
        asked[0].options,
        ["allow_once", "allow_always", "reject_once", "reject_always"]
    );
    assert!(
        asked[0].title.contains("Write notes.md"),
        "{}",
        asked[0].title
    );
    assert_eq!(asked[0].trigger, rein_protocol::Trigger::SignificantChange);
    // The decision that went back, and the side effects on record: the write
    // came through rein's callback, so the edit is rein's record.
    let details = result.details;
    assert_eq!(details["permissions"][0]["option"], "opt-allow");
    assert_eq!(details["permissions"][0]["decided_by"], "alice");
    assert_eq!(details["tool_calls"][0]["status"], "completed");
    assert_eq!(
        side_effects(&details),
        [
            ("write_file".to_owned(), "callback".to_owned()),
            ("edit".to_owned(), "callback".to_owned())
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_agent_writes_by_itself_is_recorded_as_unsupported() {
    let Answered { dir: _dir, ws, run } = answered(
        &[("ACP_TEST_WRITE", "native")],
        Some((Decision::Approve, None)),
        "write notes.md: by itself",
    )
    .await;
    let result = run.result.unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.md")).unwrap(),
        "by itself"
    );
    // Approve without an option is allow_once.
    assert_eq!(result.details["permissions"][0]["option"], "opt-allow");
    assert_eq!(
        side_effects(&result.details),
        [("edit".to_owned(), "unsupported".to_owned())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_goes_back_as_reject_once_and_nothing_is_written() {
    let Answered { dir: _dir, ws, run } =
        answered(&[], Some((Decision::Deny, None)), "write notes.md: nope").await;
    let result = run.result.unwrap();
    assert!(!ws.join("notes.md").exists());
    assert!(
        result
            .text
            .ends_with("Not allowed to write notes.md (opt-reject)."),
        "{}",
        result.text
    );
    assert_eq!(result.details["permissions"][0]["decision"], "denied");
    assert_eq!(result.details["tool_calls"][0]["status"], "failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chosen_option_goes_back_as_that_option() {
    let Answered { dir: _dir, ws, run } = answered(
        &[],
        Some((Decision::Approve, Some("reject_always"))),
        "write notes.md: nope",
    )
    .await;
    let text = run.result.unwrap().text;
    assert!(text.ends_with("(opt-never)."), "{text}");
    assert!(!ws.join("notes.md").exists());
}

/// The step's permission rules decide an agent's permission request before
/// any person: a rule that denies the write rejects it (the person, who
/// would approve, is not asked); a rule that allows it grants it with nobody
/// to ask.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_steps_rules_decide_a_permission_request_before_a_person() {
    for verdict in ["deny", "allow"] {
        let dir = tempfile::tempdir().unwrap();
        let ws = workspace(dir.path());
        let registry = sdk_agent(dir.path(), &[]);
        let mut policy = rein_sandbox::Policy::default();
        policy
            .add_rules(
                &[rein_protocol::PermissionRule {
                    verdict: Some(if verdict == "deny" {
                        rein_protocol::Verdict::Deny
                    } else {
                        rein_protocol::Verdict::Allow
                    }),
                    path: Some("**/notes.md".into()),
                    access: Some(rein_protocol::Access::Write),
                    ..Default::default()
                }],
                "step `draft`",
            )
            .unwrap();
        let (asker, asked) = if verdict == "deny" {
            let (asker, asked) = person(Decision::Approve, None);
            (Some(asker), Some(asked))
        } else {
            (None, None)
        };
        let run = attempt_under(
            &registry,
            &ws,
            "write notes.md: by the rules",
            asker,
            CancellationToken::new(),
            LONG,
            std::sync::Arc::new(policy),
        )
        .await;
        let result = run.result.unwrap();
        let decided = &result.details["permissions"][0];
        assert!(
            decided["decided_by"]
                .as_str()
                .unwrap()
                .starts_with("the permission rules (rule 1 of step `draft`"),
            "{verdict}: {}",
            result.details
        );
        if verdict == "deny" {
            assert!(!ws.join("notes.md").exists());
            assert_eq!(decided["option"], "opt-reject", "{}", result.details);
            let seen = asked.unwrap().await.unwrap();
            assert!(seen.asked.is_empty(), "nobody was asked: {:?}", seen.asked);
        } else {
            assert_eq!(
                std::fs::read_to_string(ws.join("notes.md")).unwrap(),
                "by the rules"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_anyone_to_ask_permission_is_refused() {
    let Answered { dir: _dir, ws, run } = answered(&[], None, "write notes.md: nobody asked").await;
    let result = run.result.unwrap();
    assert!(!ws.join("notes.md").exists());
    assert!(
        result.details["permissions"][0]["decided_by"]
            .as_str()
            .unwrap()
            .starts_with("nobody"),
        "{}",
        result.details
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipping_the_question_cancels_the_agents_turn() {
    // The agent ends its turn `end_turn` on a cancelled outcome alone, as real
    // agents do: the turn is cancelled by the `session/cancel` sent first.
    let Answered { dir: _dir, ws, run } = answered(
        &[("ACP_TEST_END_TURN_ON_CANCELLED", "1")],
        Some((Decision::Skip, None)),
        "write notes.md: skipped",
    )
    .await;
    // The agent saw the cancel before the outcome: it did not go on to speak.
    let said = partial_replies(&run.events);
    assert!(!said.contains("nothing written"), "{said}");
    let err = run.result.unwrap_err();
    assert!(
        matches!(&err, HarnessError::Refused { message, .. }
            if message.contains("skipped the permission request for \"Write notes.md\"")
                && message.contains("turn was cancelled")),
        "{err:?}"
    );
    assert!(!ws.join("notes.md").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_attempt_sends_session_cancel_and_the_agent_ends_its_turn() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let registry = sdk_agent(dir.path(), &[("ACP_TEST_SLOW", "1")]);
    let (asker, _) = person(Decision::Approve, None);
    let cancel = CancellationToken::new();
    let later = cancel.clone();
    // Cancelled while the agent works (or, on a slow machine, while it asks:
    // that ends the same way).
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(800)).await;
        later.cancel();
    });
    let harness = &registry.get("acp-test").unwrap().harness;
    let (events, _seen) = tokio::sync::mpsc::unbounded_channel();
    let started = Instant::now();
    let result = harness
        .run_attempt(AttemptParams {
            attempt_id: "a".into(),
            prompt: "write notes.md: slow".into(),
            tools: Vec::new(),
            session_key: "k".into(),
            workspace: rein_sandbox::Pinned::pin(&ws.canonicalize().unwrap()).unwrap(),
            deadline: LONG,
            cancel,
            events,
            asker: Some(asker),
            journal: None,
            mcp_servers: Vec::new(),
            policy: std::sync::Arc::default(),
            images: Vec::new(),
            delegated_execution: None,
        })
        .await;
    assert_eq!(result.unwrap_err(), HarnessError::Cancelled);
    // The agent ended its turn itself (`cancelled`), inside the grace rein
    // gives it before killing it.
    let after_cancel = started.elapsed().saturating_sub(Duration::from_millis(800));
    assert!(after_cancel < Duration::from_secs(3), "{after_cancel:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_reported_usage_comes_back_normalised() {
    let done = answered(&[], None, "metered").await;
    let result = done.run.result.unwrap();
    let (usage, _) = result.usage.expect("the agent reported its usage");
    // Every prompt token (20 fresh, 25 read from the cache, 5 written to
    // it), the cache reads as the cached part.
    assert_eq!(usage.input_tokens, 50);
    assert_eq!(usage.cached_input_tokens, 25);
    assert_eq!(usage.output_tokens, 7);
    assert!(!usage.estimated);
    // An agent that reports none: none.
    let quiet = answered(&[], None, "hello").await.run.result.unwrap();
    assert_eq!(quiet.usage, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_attempt_of_the_same_session_loads_it() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let registry = sdk_agent(dir.path(), &[]);
    let first = attempt(
        &registry,
        &ws,
        "hello",
        None,
        CancellationToken::new(),
        LONG,
    )
    .await;
    let first = first.result.unwrap();
    assert_eq!(first.text, "Working on it. Nothing to write.");
    let second = attempt(
        &registry,
        &ws,
        "again",
        None,
        CancellationToken::new(),
        LONG,
    )
    .await;
    let events = second.events;
    let second = second.result.unwrap();
    assert_eq!(
        second.details["session_id"], first.details["session_id"],
        "session/load of the same session"
    );
    assert!(
        second.text.starts_with("Resuming after 1 earlier turn(s)."),
        "{}",
        second.text
    );
    // Loading replays the earlier turn as updates.
    assert_eq!(agent_updates(&events)[0], "user_message_chunk");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_outside_the_workspace_is_refused_to_the_agent() {
    let Answered { dir, ws: _, run } = answered(
        &[],
        Some((Decision::Approve, None)),
        "write ../escaped.txt: out",
    )
    .await;
    let err = run.result.unwrap_err().to_string();
    assert!(err.contains("outside the task's workspace"), "{err}");
    assert!(!dir.path().join("escaped.txt").exists());
}

async fn misbehaves(mode: &str, deadline: Duration) -> (String, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let registry = misbehaving(dir.path(), mode);
    let started = Instant::now();
    let run = attempt(
        &registry,
        &ws,
        "hi",
        None,
        CancellationToken::new(),
        deadline,
    )
    .await;
    (run.result.unwrap_err().to_string(), started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_crashes_fails_the_attempt_quoting_its_stderr() {
    let (err, took) = misbehaves("crash", LONG).await;
    // Quoted without its terminal escapes.
    assert!(err.contains("agent panicked: out of cheese"), "{err}");
    assert!(!err.contains('\u{1b}'), "{err:?}");
    assert!(err.contains("exit status: 3"), "{err}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_dies_mid_turn_fails_the_attempt() {
    let (err, _) = misbehaves("crash-in-turn", LONG).await;
    assert!(err.contains("died mid-turn"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_cannot_start_says_why() {
    let (err, _) = misbehaves("exit-early", LONG).await;
    assert!(err.contains("no model configured"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_talks_nonsense_is_stopped_quoting_the_line() {
    let (err, took) = misbehaves("garbage", LONG).await;
    assert!(
        err.contains("not JSON-RPC") && err.contains("`this is not json-rpc`"),
        "{err}"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_hangs_is_stopped_at_the_deadline() {
    let (err, took) = misbehaves("hang", Duration::from_millis(1500)).await;
    assert!(err.contains("did not finish within 1500 ms"), "{err}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[tokio::test]
async fn an_acp_manifest_that_cannot_work_is_refused_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.toml");
    let acp = "id = \"x\"\nprotocol = \"acp\"\ncommand = [\"agent\"]\n";
    let cases = [
        (acp.to_owned(), "must declare the harness id"),
        (
            format!("{acp}[[harnesses]]\nid = \"x\"\nisolated_completion = true\n"),
            "no isolated completions",
        ),
        (acp.replace("\"acp\"", "\"mcp\""), "protocol"),
    ];
    for (manifest, problem) in cases {
        std::fs::write(&path, &manifest).unwrap();
        let err = load_manifest(&path).unwrap_err().to_string();
        assert!(err.contains(problem), "{manifest}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_agent_takes_the_processes_it_started_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let pidfile = dir.path().join("child.pid");
    let registry = misbehaving_with(dir.path(), &["orphan", &pidfile.display().to_string()]);
    let run = attempt(
        &registry,
        &ws,
        "hi",
        None,
        CancellationToken::new(),
        Duration::from_millis(1500),
    )
    .await;
    assert!(matches!(run.result, Err(HarnessError::TimedOut { .. })));
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    // Killed with its agent's process group (SIGKILL takes effect as the
    // kernel gets to it): soon gone, or a zombie awaiting its reaper.
    let state = || {
        std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
            .ok()
            .and_then(|s| {
                s.rsplit(')')
                    .next()
                    .and_then(|r| r.split_whitespace().next())
                    .map(str::to_owned)
            })
    };
    let until = Instant::now() + Duration::from_secs(5);
    while state().is_some_and(|s| s != "Z") && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let last = state();
    assert!(
        last.as_deref().is_none_or(|s| s == "Z"),
        "the agent's child {pid} is still running ({last:?})"
    );
}
