//! Fallback models: a turn the step's model cannot serve goes to the next
//! model of its route. Against a local server that speaks the
//! chat-completions wire format (the hosted APIs cannot be reached here) and
//! whose models fail as hosted ones do: `busy-N` is rate-limited with
//! `Retry-After: N` (OpenAI's 429 body), `overloaded` answers 503, `broken`
//! 500, `locked` 401; `steady` answers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use rein_core::{CreateTask, RunOptions};
use rein_core::{JournalStore, TaskStore};
use rein_protocol::{StepAction, TaskDecomposition, TaskStatus, TaskStep};
use serde_json::{Value, json};

/// The models asked, in order.
type Asked = Arc<Mutex<Vec<String>>>;

async fn completions(State(asked): State<Asked>, body: String) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap();
    let model = body["model"].as_str().unwrap().to_owned();
    asked.lock().unwrap().push(model.clone());
    let error = |status: StatusCode, kind: &str, code: &str, message: &str| {
        (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            json!({ "error": { "message": message, "type": kind, "param": null, "code": code } })
                .to_string(),
        )
            .into_response()
    };
    if let Some(wait) = model.strip_prefix("busy-") {
        let mut response = error(
            StatusCode::TOO_MANY_REQUESTS,
            "requests",
            "rate_limit_exceeded",
            "Rate limit reached for requests. Please try again later.",
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, wait.parse().unwrap());
        return response;
    }
    match model.as_str() {
        "overloaded" => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "server_is_overloaded",
                "The server is overloaded. Please try again later.",
            );
        }
        "broken" => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "server_error",
                "The server had an error while processing your request.",
            );
        }
        "locked" => {
            return error(
                StatusCode::UNAUTHORIZED,
                "invalid_request_error",
                "invalid_api_key",
                "Incorrect API key provided.",
            );
        }
        _ => {}
    }
    let chunks = [
        json!({ "id": "chatcmpl-9", "object": "chat.completion.chunk", "model": model, "choices": [{ "index": 0, "delta": { "role": "assistant", "content": format!("served by {model}") }, "finish_reason": null }] }),
        json!({ "id": "chatcmpl-9", "object": "chat.completion.chunk", "model": model, "choices": [{ "index": 0, "delta": {}, "finish_reason": "stop" }] }),
        json!({ "id": "chatcmpl-9", "object": "chat.completion.chunk", "model": model, "choices": [], "usage": { "prompt_tokens": 40, "completion_tokens": 4, "total_tokens": 44 } }),
    ];
    let mut text = String::new();
    for c in chunks {
        text.push_str(&format!("data: {c}\n\n"));
    }
    text.push_str("data: [DONE]\n\n");
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from(text))
        .unwrap()
}

async fn start() -> (String, Asked) {
    let asked = Asked::default();
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(Arc::clone(&asked));
    let addr = rein_test_support::model::serve(app).await;
    (format!("http://{addr}/v1"), asked)
}

/// Runs one agent step on `model` with `fallbacks` (the configured default
/// list is `configured`).
async fn run(model: &str, fallbacks: &[&str], configured: &[&str]) -> Ran {
    run_with(model, fallbacks, configured, rein_protocol::Models::new()).await
}

/// What a run ended as, the models asked in order, its store, how long it took.
type Ran = (
    rein_protocol::TaskState,
    Vec<String>,
    Arc<rein_store::SqliteStore>,
    Duration,
);

/// [`run`] with what rein knows of the models (their windows).
async fn run_with(
    model: &str,
    fallbacks: &[&str],
    configured: &[&str],
    models: rein_protocol::Models,
) -> Ran {
    let (base, asked) = start().await;
    let agent = rein_test_support::engine::agent(&base, "unused")
        .with_fallback_models(configured.iter().map(|m| (*m).to_owned()).collect())
        .with_models(models);
    let rein_test_support::engine::TestEngine {
        engine, store, dir, ..
    } = rein_test_support::engine::engine()
        .executor(Arc::new(agent))
        .workspaces_here()
        .build();
    let dir = dir.unwrap();
    let limits = rein_protocol::AgentLimits {
        fallback_models: fallbacks.iter().map(|m| (*m).to_owned()).collect(),
        ..Default::default()
    };
    let mut step = TaskStep::new(
        "ask",
        StepAction::agent("say who serves you", &[]).with_limits(limits),
    );
    if let StepAction::Agent { model: m, .. } = &mut step.action {
        *m = Some(model.into());
    }
    // What the route cannot serve fails the task at once (no recovery
    // retries: the test counts the requests of one attempt).
    for kind in rein_protocol::ErrorType::ALL {
        step.recovery.insert(
            kind,
            rein_protocol::RecoveryStrategy::action(rein_protocol::RecoveryAction::Abort),
        );
    }
    let state = engine
        .create(CreateTask::of(TaskDecomposition::new(
            "fallback",
            vec![step],
        )))
        .await
        .unwrap();
    let began = Instant::now();
    let done = engine.run(state.id(), RunOptions::default()).await.unwrap();
    let took = began.elapsed();
    let asked = asked.lock().unwrap().clone();
    std::mem::forget(dir);
    (done, asked, store, took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_model_is_waited_for_once_then_the_next_serves() {
    let (done, asked, store, took) = run("busy-1", &["openai/steady"], &[]).await;
    assert_eq!(
        done.status(),
        TaskStatus::Completed,
        "{:?}",
        done.head.error
    );
    // Its Retry-After (1 s) was honoured once, then the turn moved on.
    assert_eq!(asked, ["busy-1", "busy-1", "steady"]);
    assert!(took >= Duration::from_secs(1), "{took:?}");
    let output = done.latest_for_step("ask").unwrap().output.clone().unwrap();
    assert_eq!(output["text"], "served by steady");
    assert_eq!(
        output["selection"]["fallback_models"],
        json!(["openai/steady"])
    );
    // The turn is journaled, and metered, as the model that served it.
    let journal = store.load_journal(done.id(), "ask").await.unwrap();
    let served: Vec<&str> = journal
        .iter()
        .filter_map(|e| e["usage"]["model"].as_str())
        .collect();
    assert_eq!(served, ["steady"]);
    assert_eq!(
        output["usage"]["by_model"]["openai/steady"]["input_tokens"],
        40
    );
    assert!(output["usage"]["by_model"].get("openai/busy-1").is_none());
    // The log says it fell back, from which model to which, and why.
    let log = store.events(done.id(), 0, usize::MAX).await.unwrap();
    let fell: Vec<&Value> = log
        .iter()
        .filter_map(|e| match &e.change {
            rein_protocol::TaskChange::AgentUpdate { update, .. }
                if update["sessionUpdate"] == "fallback" =>
            {
                Some(update)
            }
            _ => None,
        })
        .collect();
    assert_eq!(fell.len(), 1);
    assert_eq!(fell[0]["from"], "openai/busy-1");
    assert_eq!(fell[0]["to"], "openai/steady");
    assert!(fell[0]["reason"].as_str().unwrap().contains("429"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_overloaded_or_failing_models_are_passed_at_once() {
    // A Retry-After past the 30 s cap is not waited for; a 503 is not asked
    // again; a 500 is asked twice more; the configured list serves a step
    // that names none.
    let (done, asked, _, took) = run(
        "busy-120",
        &[],
        &["openai/overloaded", "openai/broken", "openai/steady"],
    )
    .await;
    assert_eq!(
        done.status(),
        TaskStatus::Completed,
        "{:?}",
        done.head.error
    );
    assert_eq!(
        asked,
        [
            "busy-120",
            "overloaded",
            "broken",
            "broken",
            "broken",
            "steady"
        ]
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_does_not_fall_back_and_a_route_that_all_fails_names_each() {
    let (done, asked, _, _) = run("locked", &["openai/steady"], &[]).await;
    assert_eq!(asked, ["locked"]);
    let error = rein_test_support::engine::step_error(&done, "ask");
    assert!(error.contains("401"), "{error}");

    let (done, asked, _, _) = run("busy-120", &["openai/overloaded"], &[]).await;
    assert_eq!(asked, ["busy-120", "overloaded"]);
    let step = done.latest_for_step("ask").unwrap();
    let error = step.error.clone().unwrap();
    assert!(
        error.contains("no model of the step's route could serve the turn")
            && error.contains("openai/busy-120: the model API answered 429")
            && error.contains("openai/overloaded: the model API answered 503"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_too_long_for_the_model_goes_to_one_with_room() {
    // `tiny` has a window no request fits, even compacted: `steady` serves.
    let models = rein_protocol::Models::from([(
        "openai/tiny".to_owned(),
        rein_protocol::ModelInfo {
            context_window: Some(10),
            ..rein_protocol::ModelInfo::default()
        },
    )]);
    let (done, asked, store, _) = run_with("tiny", &["openai/steady"], &[], models).await;
    assert_eq!(
        done.status(),
        TaskStatus::Completed,
        "{:?}",
        done.head.error
    );
    // Never sent to the model it could not fit.
    assert_eq!(asked, ["steady"]);
    let log = store.events(done.id(), 0, usize::MAX).await.unwrap();
    let reason = log
        .iter()
        .find_map(|e| match &e.change {
            rein_protocol::TaskChange::AgentUpdate { update, .. }
                if update["sessionUpdate"] == "fallback" =>
            {
                update["reason"].as_str().map(str::to_owned)
            }
            _ => None,
        })
        .unwrap();
    assert!(
        reason.contains("does not fit openai/tiny's context window of 10 tokens"),
        "{reason}"
    );
}
