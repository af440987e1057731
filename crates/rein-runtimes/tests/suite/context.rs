//! An agent step whose conversation far exceeds its model's context window,
//! against a local server that behaves as llama-cpp-python's does with a
//! small `n_ctx` (the hosted APIs cannot be reached here; a real model's
//! weights are not at hand): it counts the request's tokens, refuses one past
//! its window with llama-cpp-python's exact error body, and streams without
//! reporting usage. The scripted model reads a 4,000-character file four
//! times, then answers; a summary request (no tools) is answered with what
//! the transcript shows was read.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_test_support::engine::{assert_completed, completes};
use rein_test_support::model::sse;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rein_core::{CreateTask, Engine, RunOptions};
use rein_core::{JournalStore, TaskStore};
use rein_protocol::{ModelInfo, Models, StepAction, TaskDecomposition, TaskStatus, TaskStep};
use rein_runtimes::openai::ChatConfig;
use serde_json::{Value, json};

/// The server's context window, in its tokens.
const N_CTX: u64 = 2500;

#[derive(Clone)]
struct Server {
    /// Every request, with the tokens it counted and whether it refused it.
    seen: Arc<Mutex<Vec<(Value, u64, bool)>>>,
    /// Says its window at `/props`, as llama.cpp's server does.
    props: bool,
    n_ctx: u64,
}

/// The server's tokens of a request: four bytes of its messages' text a
/// token (a stand-in for a tokenizer; rein's own estimate is not read).
fn counted(body: &Value) -> u64 {
    let bytes: usize = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            m["content"].as_str().map_or(0, str::len)
                + m["tool_calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| c["function"]["arguments"].as_str().map_or(0, str::len) + 20)
                    .sum::<usize>()
                + 8
        })
        .sum();
    (bytes / 4) as u64
}

fn say(text: &str) -> Response {
    sse(vec![
        json!({ "id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "small", "choices": [{ "index": 0, "delta": { "role": "assistant", "content": text }, "finish_reason": null }] }),
        json!({ "id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "small", "choices": [{ "index": 0, "delta": {}, "finish_reason": "stop" }] }),
    ])
}

fn read_call(n: usize) -> Response {
    sse(vec![
        json!({ "id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "small", "choices": [{ "index": 0, "delta": { "role": "assistant", "content": null, "tool_calls": [
            { "index": 0, "id": format!("call_{n}"), "type": "function", "function": { "name": "read_file", "arguments": "{\"path\": \"big.txt\"}" } }] }, "finish_reason": null }] }),
        json!({ "id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "small", "choices": [{ "index": 0, "delta": {}, "finish_reason": "tool_calls" }] }),
    ])
}

/// `reads done: N` in a text (a summary says how many reads came before).
fn reads_said(text: &str) -> usize {
    text.match_indices("reads done: ")
        .filter_map(|(at, m)| {
            text[at + m.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse::<usize>()
                .ok()
        })
        .max()
        .unwrap_or(0)
}

async fn completions(State(server): State<Server>, body: String) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap();
    let tokens = counted(&body);
    let refused = tokens > server.n_ctx;
    server
        .seen
        .lock()
        .unwrap()
        .push((body.clone(), tokens, refused));
    if refused {
        // llama_cpp/server/errors.py, for a chat completion.
        return (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "application/json")],
            json!({ "error": {
                "message": format!("This model's maximum context length is {} tokens. However, you requested {tokens} tokens ({tokens} in the messages, None in the completion). Please reduce the length of the messages or completion.", server.n_ctx),
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            } })
            .to_string(),
        )
            .into_response();
    }
    let messages = body["messages"].as_array().unwrap();
    let text = |m: &Value| m["content"].as_str().unwrap_or_default().to_owned();
    let summary_request = body.get("tools").is_none()
        && messages
            .first()
            .is_some_and(|m| text(m).starts_with("You compact"));
    if summary_request {
        let asked = messages.iter().map(text).collect::<Vec<_>>().join("\n");
        let reads = reads_said(&asked) + asked.matches("[calls read_file").count();
        return say(&format!(
            "The user asked to read big.txt four times. reads done: {reads}. big.txt holds 4000 characters of x."
        ));
    }
    let earlier = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| reads_said(&text(m)))
        .max()
        .unwrap_or(0);
    let reads = earlier + messages.iter().filter(|m| m["role"] == "tool").count();
    if reads < 4 {
        read_call(reads)
    } else {
        say(&format!("read big.txt {reads} times"))
    }
}

async fn props(State(server): State<Server>) -> Response {
    if !server.props {
        return StatusCode::NOT_FOUND.into_response();
    }
    axum::Json(
        json!({ "default_generation_settings": { "n_ctx": server.n_ctx }, "total_slots": 1 }),
    )
    .into_response()
}

async fn start(props_said: bool, n_ctx: u64) -> (String, Server) {
    let server = Server {
        seen: Arc::default(),
        props: props_said,
        n_ctx,
    };
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .route("/props", get(props))
        .with_state(server.clone());
    let addr = rein_test_support::model::serve(app).await;
    (format!("http://{addr}/v1"), server)
}

async fn engine(
    dir: &std::path::Path,
    base: &str,
    models: Models,
) -> (Arc<Engine>, Arc<rein_store::SqliteStore>) {
    let agent = rein_test_support::engine::agent_on(ChatConfig {
        base_url: base.into(),
        api_key: None,
        model: "small".into(),
        idle_timeout: Duration::from_secs(10),
        stream: true,
    })
    .with_models(models);
    let t = rein_test_support::engine::engine_in(dir)
        .executor(Arc::new(agent))
        .workspaces_here()
        .build();
    (t.engine, t.store)
}

fn reads_step() -> TaskStep {
    TaskStep::new(
        "reads",
        StepAction::agent(
            "Read big.txt four times, then say how often you read it.",
            &["read_file"],
        ),
    )
}

/// The task of one agent step that reads `big.txt` (4,000 characters) four
/// times, run to its end.
async fn run_reads(engine: &Engine, dir: &std::path::Path) -> rein_protocol::TaskState {
    let workspace = dir.join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("big.txt"), "x".repeat(4000)).unwrap();
    let state = engine
        .create(CreateTask {
            plan: TaskDecomposition::new("reads", vec![reads_step()]),
            session_id: None,
            workspace: Some(workspace),
            confined_to: None,
        })
        .await
        .unwrap();
    engine.run(state.id(), RunOptions::default()).await.unwrap()
}

fn windowed(n: u64) -> Models {
    Models::from([(
        "openai/small".to_owned(),
        ModelInfo {
            context_window: Some(n),
            ..ModelInfo::default()
        },
    )])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_past_an_unknown_window_compacts_at_the_overflow_error_and_finishes() {
    // The window is nowhere to be found: the first refusal says it.
    let (base, server) = start(false, N_CTX).await;
    let dir = tempfile::tempdir().unwrap();
    let (engine, store) = engine(dir.path(), &base, Models::new()).await;
    let done = run_reads(&engine, dir.path()).await;
    assert_completed(&done);
    let output = done
        .latest_for_step("reads")
        .unwrap()
        .output
        .clone()
        .unwrap();
    assert_eq!(output["text"], "read big.txt 4 times");
    assert_eq!(output["tool_calls"], 4);

    let seen = server.seen.lock().unwrap().clone();
    // One request was refused, and the same turn asked again, compacted.
    let refused: Vec<usize> = (0..seen.len()).filter(|i| seen[*i].2).collect();
    assert_eq!(
        refused.len(),
        1,
        "{:?}",
        seen.iter().map(|s| s.1).collect::<Vec<_>>()
    );
    let summary = &seen[refused[0] + 1].0;
    assert!(
        summary.get("tools").is_none(),
        "the summary asks with no tools"
    );
    let retried = &seen[refused[0] + 2];
    assert!(!retried.2 && retried.1 <= N_CTX);
    // After it learned the window, no request passed it.
    assert!(seen[refused[0] + 1..].iter().all(|s| !s.2));

    // The summary is a session entry of its own, with the call it took.
    let journal = store.load_journal(done.id(), "reads").await.unwrap();
    let compactions: Vec<&Value> = journal
        .iter()
        .filter(|e| e.get("compacted").is_some())
        .collect();
    assert!(!compactions.is_empty());
    let first = &compactions[0]["compacted"];
    assert_eq!(first["reason"], "overflow");
    assert!(
        first["tokens_after"].as_u64() < first["tokens_before"].as_u64(),
        "{first}"
    );
    assert!(first["summary"].as_str().unwrap().contains("reads done"));
    assert_eq!(compactions[0]["usage"]["estimated"], true);
    // The step's usage counts every call it caused: its turns and summaries.
    let calls = seen.iter().filter(|s| !s.2).count() as u64;
    let metered = journal.iter().filter(|e| e.get("usage").is_some()).count() as u64;
    assert_eq!(metered, calls);
    let usage = store
        .usage(&rein_core::store::UsageFilter {
            task_id: Some(done.id().clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(usage.iter().map(|r| r.calls).sum::<u64>(), calls);

    // The task's log says it compacted, with the tokens before and after.
    let log = store.events(done.id(), 0, usize::MAX).await.unwrap();
    let said: Vec<(u64, u64)> = log
        .iter()
        .filter_map(|e| match &e.change {
            rein_protocol::TaskChange::Compacted {
                tokens_before,
                tokens_after,
                reason,
                ..
            } if reason == "overflow" || reason == "threshold" => {
                Some((*tokens_before, *tokens_after))
            }
            _ => None,
        })
        .collect();
    assert_eq!(said.len(), compactions.len());
    assert_eq!(
        said[0],
        (
            first["tokens_before"].as_u64().unwrap(),
            first["tokens_after"].as_u64().unwrap()
        )
    );
    // Said once, as an event of its own, not also as an agent update.
    assert!(!log.iter().any(|e| matches!(
        &e.change,
        rein_protocol::TaskChange::AgentUpdate { update, .. } if update["sessionUpdate"] == "compacted"
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_window_compacts_before_the_server_refuses_anything() {
    // Once from the configuration, once from llama.cpp's /props.
    for (props_said, models) in [(false, windowed(N_CTX)), (true, Models::new())] {
        let (base, server) = start(props_said, N_CTX).await;
        let dir = tempfile::tempdir().unwrap();
        let (engine, store) = engine(dir.path(), &base, models).await;
        let done = run_reads(&engine, dir.path()).await;
        assert_completed(&done);
        let seen = server.seen.lock().unwrap().clone();
        assert!(
            seen.iter().all(|s| !s.2),
            "props {props_said}: {:?}",
            seen.iter().map(|s| s.1).collect::<Vec<_>>()
        );
        let journal = store.load_journal(done.id(), "reads").await.unwrap();
        let reasons: Vec<&str> = journal
            .iter()
            .filter_map(|e| e["compacted"]["reason"].as_str())
            .collect();
        assert!(!reasons.is_empty() && reasons.iter().all(|r| *r == "threshold"));
        // Every request the model answered held under 80 % of the window by
        // rein's count; the server's own count stays under the window.
        assert!(seen.iter().all(|s| s.1 <= N_CTX));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_that_cannot_fit_fails_the_step_saying_so() {
    // A window smaller than one file's answer: nothing older to summarise
    // can make the newest call and its answer fit.
    let (base, _server) = start(false, 900).await;
    let dir = tempfile::tempdir().unwrap();
    let (engine, _store) = engine(dir.path(), &base, windowed(900)).await;
    let done = run_reads(&engine, dir.path()).await;
    assert_ne!(done.status(), TaskStatus::Completed);
    let error = rein_test_support::engine::step_error(&done, "reads");
    assert!(
        error.contains("does not fit") && error.contains("context window of 900 tokens"),
        "{error}"
    );
    assert!(!error.contains("answered 400"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_step_continues_from_the_journaled_summary() {
    let (base, server) = start(true, N_CTX).await;
    let dir = tempfile::tempdir().unwrap();
    let (engine, store) = engine(dir.path(), &base, Models::new()).await;
    let done = run_reads(&engine, dir.path()).await;
    assert_completed(&done);
    // The journal as a resume reads it: cut after its first summary, the
    // rest of the conversation comes from the summary, never recomputed.
    let journal = store.load_journal(done.id(), "reads").await.unwrap();
    let at = journal
        .iter()
        .position(|e| e.get("compacted").is_some())
        .unwrap();
    let summaries_before = server
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.0.get("tools").is_none())
        .count();
    assert!(summaries_before >= 1);

    // A second task's step journal, written with the entries up to and
    // including the summary: its run asks no summary of what was summarised.
    let workspace = dir.path().join("ws2");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("big.txt"), "x".repeat(4000)).unwrap();
    let step = reads_step();
    let state = engine
        .create(CreateTask {
            plan: TaskDecomposition::new("again", vec![step]),
            session_id: None,
            workspace: Some(workspace),
            confined_to: None,
        })
        .await
        .unwrap();
    store
        .append_journal(state.id(), "reads", 0, &journal[..=at])
        .await
        .unwrap();
    server.seen.lock().unwrap().clear();
    completes(&engine, state.id()).await;
    let seen = server.seen.lock().unwrap().clone();
    // Its first request is the summary and what was kept, not the whole.
    let first = &seen[0].0["messages"];
    assert!(
        first[1]["content"]
            .as_str()
            .unwrap()
            .starts_with("[rein compacted"),
        "{first}"
    );
    assert!(seen.iter().all(|s| !s.2));
}
