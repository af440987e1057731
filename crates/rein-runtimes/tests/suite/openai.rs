//! The chat-completions client against a local fake server speaking the real
//! wire format (the hosted API cannot be reached here): server-sent events,
//! content deltas, tool calls streamed in pieces, and the server's errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures_util::StreamExt;
use rein_runtimes::openai::{ChatClient, ChatConfig, ChatError, Message, ToolSpec};
use serde_json::{Value, json};

/// A request as the fake server saw it: its Authorization header and body.
type Request = (Option<String>, Value);

#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Request>>>);

fn sse(chunks: Vec<Value>) -> Response {
    let mut frames: Vec<Result<String, std::io::Error>> = chunks
        .into_iter()
        .map(|c| Ok(format!("data: {c}\n\n")))
        .collect();
    frames.push(Ok("data: [DONE]\n\n".to_owned()));
    let stream = futures_util::stream::iter(frames);
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn delta(d: Value, finish: Option<&str>) -> Value {
    json!({ "id": "chatcmpl-1", "object": "chat.completion.chunk",
            "choices": [{ "index": 0, "delta": d, "finish_reason": finish }] })
}

async fn completions(State(seen): State<Seen>, headers: HeaderMap, body: String) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap();
    let auth = headers
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap().to_owned());
    seen.0.lock().unwrap().push((auth, body.clone()));
    let last = body["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    match last.as_str() {
        "hello" => sse(vec![
            delta(json!({ "role": "assistant", "content": "Hel" }), None),
            delta(json!({ "content": "lo" }), None),
            delta(json!({ "content": "!" }), None),
            delta(json!({}), Some("stop")),
        ]),
        "list" => sse(vec![
            delta(
                json!({ "role": "assistant", "tool_calls": [{ "index": 0, "id": "call_1", "type": "function",
                        "function": { "name": "list_dir", "arguments": "" } }] }),
                None,
            ),
            delta(
                json!({ "tool_calls": [{ "index": 0, "function": { "arguments": "{\"pa" } }] }),
                None,
            ),
            delta(
                json!({ "tool_calls": [{ "index": 0, "function": { "arguments": "th\": \".\"}" } }] }),
                None,
            ),
            delta(
                json!({ "tool_calls": [{ "index": 1, "id": "call_2", "type": "function",
                        "function": { "name": "read_file", "arguments": "{\"path\": \"a.md\"}" } }] }),
                None,
            ),
            delta(json!({}), Some("tool_calls")),
        ]),
        "busy" => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "7")],
            json!({ "error": { "message": "Rate limit reached", "type": "rate_limit" } })
                .to_string(),
        )
            .into_response(),
        "cut" => sse(vec![delta(json!({ "content": "par" }), None)]),
        // llama.cpp when its chat template fails: a 200 and nothing.
        "empty" => Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .body(Body::empty())
            .unwrap(),
        // A server error in the middle of the stream, as OpenAI-compatible
        // proxies send it.
        "midway" => sse(vec![
            delta(json!({ "role": "assistant", "content": "Hel" }), None),
            json!({ "error": { "code": 429, "message": "slow down" } }),
        ]),
        "overloaded" => sse(vec![
            json!({ "error": { "type": "overloaded_error", "message": "Overloaded" } }),
        ]),
        // llama.cpp names the function in every chunk of a call.
        "repeat" => sse(vec![
            delta(
                json!({ "role": "assistant", "tool_calls": [{ "index": 0, "id": "call_1", "type": "function",
                        "function": { "name": "write_file", "arguments": "{\"path\":" } }] }),
                None,
            ),
            delta(
                json!({ "tool_calls": [{ "index": 0, "id": "", "type": "function",
                        "function": { "name": "write_file", "arguments": " \"a.txt\"}" } }] }),
                None,
            ),
            delta(json!({}), Some("tool_calls")),
        ]),
        // A slow model: pieces 150 ms apart, a second in all.
        "slow" => {
            let frames = (0..7).map(|i| {
                let text = if i < 6 {
                    format!("data: {}\n\n", delta(json!({ "content": "." }), None))
                } else {
                    format!(
                        "data: {}\n\ndata: [DONE]\n\n",
                        delta(json!({}), Some("stop"))
                    )
                };
                async move {
                    tokio::time::sleep(Duration::from_millis(150)).await;
                    Ok::<_, std::io::Error>(text)
                }
            });
            Response::builder()
                .header(header::CONTENT_TYPE, "text/event-stream")
                .body(Body::from_stream(
                    futures_util::stream::iter(frames).then(|f| f),
                ))
                .unwrap()
        }
        // A stream that stops arriving.
        "stalled" => {
            let frames = futures_util::stream::iter([Ok::<_, std::io::Error>(format!(
                "data: {}\n\n",
                delta(json!({ "content": "a" }), None)
            ))])
            .chain(futures_util::stream::pending());
            Response::builder()
                .header(header::CONTENT_TYPE, "text/event-stream")
                .body(Body::from_stream(frames))
                .unwrap()
        }
        _ => Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .body(Body::from("data: not json\n\n"))
            .unwrap(),
    }
}

async fn fake_server() -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(seen.clone());
    let addr = rein_test_support::model::serve(app).await;
    (format!("http://{addr}/v1"), seen)
}

fn client(base: &str) -> ChatClient {
    ChatClient::new(ChatConfig {
        base_url: base.into(),
        api_key: Some("sk-test".into()),
        model: "gpt-test".into(),
        idle_timeout: Duration::from_secs(10),
        stream: true,
    })
}

fn user(text: &str) -> Vec<Message> {
    vec![
        Message::System {
            content: "be brief".into(),
        },
        Message::User {
            content: text.into(),
        },
    ]
}

#[tokio::test]
async fn content_streams_in_pieces_and_the_request_is_the_real_shape() {
    let (base, seen) = fake_server().await;
    let mut pieces = Vec::new();
    let done = client(&base)
        .complete(&user("hello"), &[], |t| pieces.push(t.to_owned()))
        .await
        .unwrap();
    assert_eq!(done.content, "Hello!");
    assert_eq!(pieces, ["Hel", "lo", "!"]);
    assert_eq!(done.finish_reason, "stop");
    assert!(done.tool_calls.is_empty());
    let (auth, body) = seen.0.lock().unwrap()[0].clone();
    assert_eq!(auth.as_deref(), Some("Bearer sk-test"));
    assert_eq!(body["model"], "gpt-test");
    assert_eq!(body["stream"], true);
    assert_eq!(
        body["messages"][0],
        json!({ "role": "system", "content": "be brief" })
    );
    assert!(body.get("tools").is_none(), "no tools, no tools key");
}

#[tokio::test]
async fn tool_calls_are_put_together_from_their_pieces() {
    let (base, seen) = fake_server().await;
    let tools = [ToolSpec {
        name: "list_dir".into(),
        description: "List a directory".into(),
        parameters: json!({ "type": "object", "properties": { "path": { "type": "string" } } }),
    }];
    let done = client(&base)
        .complete(&user("list"), &tools, |_| {})
        .await
        .unwrap();
    assert_eq!(done.finish_reason, "tool_calls");
    let calls: Vec<(&str, &str, &str)> = done
        .tool_calls
        .iter()
        .map(|c| {
            (
                c.id.as_str(),
                c.function.name.as_str(),
                c.function.arguments.as_str(),
            )
        })
        .collect();
    assert_eq!(
        calls,
        [
            ("call_1", "list_dir", "{\"path\": \".\"}"),
            ("call_2", "read_file", "{\"path\": \"a.md\"}"),
        ]
    );
    let body = seen.0.lock().unwrap()[0].1.clone();
    assert_eq!(body["tools"][0]["function"]["name"], "list_dir");
    assert_eq!(body["tools"][0]["type"], "function");
    // The assistant's tool calls and the tool's answer go back in the API's shape.
    let replay = serde_json::to_value(vec![
        Message::Assistant {
            content: None,
            tool_calls: done.tool_calls.clone(),
        },
        Message::Tool {
            tool_call_id: "call_1".into(),
            content: "a.md".into(),
        },
    ])
    .unwrap();
    assert_eq!(replay[0]["role"], "assistant");
    assert_eq!(replay[0]["tool_calls"][0]["type"], "function");
    assert_eq!(
        replay[1],
        json!({ "role": "tool", "tool_call_id": "call_1", "content": "a.md" })
    );
}

#[tokio::test]
async fn the_servers_refusals_and_broken_streams_are_named() {
    let (base, _) = fake_server().await;
    let err = client(&base)
        .complete(&user("busy"), &[], |_| {})
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ChatError::Http {
            status: 429,
            message: "Rate limit reached".into(),
            retry_after: Some(Duration::from_secs(7)),
            code: Some("rate_limit".into()),
        }
    );
    let err = client(&base)
        .complete(&user("garbage"), &[], |_| {})
        .await
        .unwrap_err();
    assert!(err.to_string().contains("a chunk is not JSON"), "{err}");
    let err = client(&base)
        .complete(&user("cut"), &[], |_| {})
        .await
        .unwrap_err();
    let said = err.to_string();
    assert!(
        said.contains("answered 200 (text/event-stream) with a body beginning `data: {")
            && said.contains("1 chunk and no finish reason")
            && said.contains("the server's own log will have the cause"),
        "{said}"
    );
    let err = client("http://127.0.0.1:9/v1")
        .complete(&user("hello"), &[], |_| {})
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("cannot reach the model API at http://127.0.0.1:9/v1"),
        "{err}"
    );
}

#[tokio::test]
async fn an_empty_stream_says_what_came_back_and_where_the_cause_is() {
    let (base, _) = fake_server().await;
    let said = client(&base)
        .complete(&user("empty"), &[], |_| {})
        .await
        .unwrap_err()
        .to_string();
    assert!(
        said.contains("/chat/completions answered 200 (text/event-stream) with an empty body: no chunk and no finish reason")
            && said.contains("the server's own log"),
        "{said}"
    );
}

#[tokio::test]
async fn an_error_in_the_stream_is_classified_like_the_http_error_it_names() {
    let (base, _) = fake_server().await;
    let err = client(&base)
        .complete(&user("midway"), &[], |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ChatError::Http { status: 429, message, .. } if message.contains("slow down")),
        "{err:?}"
    );
    let err = client(&base)
        .complete(&user("overloaded"), &[], |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(err, ChatError::Http { status: 529, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_name_repeated_in_every_chunk_is_the_name_once() {
    let (base, _) = fake_server().await;
    let done = client(&base)
        .complete(&user("repeat"), &[], |_| {})
        .await
        .unwrap();
    assert_eq!(done.tool_calls.len(), 1);
    assert_eq!(done.tool_calls[0].id, "call_1");
    assert_eq!(done.tool_calls[0].function.name, "write_file");
    assert_eq!(
        done.tool_calls[0].function.arguments,
        "{\"path\": \"a.txt\"}"
    );
    // A turn that only calls tools goes back with an empty content, not none.
    let replay = serde_json::to_value(Message::Assistant {
        content: None,
        tool_calls: done.tool_calls,
    })
    .unwrap();
    assert_eq!(replay["content"], "");
}

#[tokio::test]
async fn the_idle_timeout_spares_a_slow_stream_and_cuts_a_stalled_one() {
    let (base, _) = fake_server().await;
    let patient = ChatClient::new(ChatConfig {
        base_url: base.clone(),
        api_key: None,
        model: "gpt-test".into(),
        idle_timeout: Duration::from_millis(600),
        stream: true,
    });
    // A second in all, but never 600 ms without a piece.
    let done = patient.complete(&user("slow"), &[], |_| {}).await.unwrap();
    assert_eq!(done.content, "......");
    let err = patient
        .complete(&user("stalled"), &[], |_| {})
        .await
        .unwrap_err();
    assert_eq!(err, ChatError::TimedOut(Duration::from_millis(600)));
    assert!(err.to_string().contains("REIN_MODEL_IDLE_TIMEOUT"), "{err}");
}
