//! A fake OpenAI-compatible chat-completions server for the agent tests: it
//! speaks the real wire format (SSE chunks) and plays a script keyed by the
//! prompt and by how many tool answers the conversation already has.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse as _;
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};

#[derive(Debug, Clone, Default)]
pub struct Seen(pub Arc<Mutex<Vec<Value>>>);

/// Serves `app` on a free loopback port, in the background: its address.
///
/// # Panics
/// If no loopback port can be bound.
#[allow(clippy::unwrap_used)]
pub async fn serve(app: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// A streamed chat-completions answer of `chunks`, ended with `[DONE]`.
pub fn sse<C: std::fmt::Display>(chunks: impl IntoIterator<Item = C>) -> Response {
    let mut body = String::new();
    for c in chunks {
        body.push_str(&format!("data: {c}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    let mut response = Response::new(Body::from(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    response
}

fn call(id: &str, name: &str, args: Value) -> Response {
    let args = args.to_string();
    let (a, b) = args.split_at(args.len() / 2);
    sse(vec![
        json!({ "choices": [{ "index": 0, "delta": { "role": "assistant", "tool_calls": [
            { "index": 0, "id": id, "type": "function", "function": { "name": name, "arguments": a } }] } }] }),
        json!({ "choices": [{ "index": 0, "delta": { "tool_calls": [
            { "index": 0, "function": { "arguments": b } }] } }] }),
        json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "tool_calls" }] }),
    ])
}

fn say(text: &str) -> Response {
    sse(vec![
        json!({ "choices": [{ "index": 0, "delta": { "role": "assistant", "content": text } }] }),
        json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "stop" }] }),
    ])
}

/// The scripted answer, and, when the request asks for it
/// (`stream_options.include_usage`), a last chunk with the usage as OpenAI
/// sends it (`choices: []`): prompt tokens a quarter of the request's bytes,
/// half of them cached, completion tokens a tenth of the answer's. What was
/// reported is kept with the request (`reported_usage`), for tests to add up.
async fn completions(
    State(seen): State<Seen>,
    headers: axum::http::HeaderMap,
    body: String,
) -> Response {
    // A key the provider no longer takes: OpenAI's 401 and its error body.
    if headers
        .get(header::AUTHORIZATION)
        .is_some_and(|v| v == "Bearer sk-expired")
    {
        seen.0
            .lock()
            .unwrap()
            .push(json!({ "refused_key": "sk-expired" }));
        return (
            axum::http::StatusCode::UNAUTHORIZED,
            [(header::CONTENT_TYPE, "application/json")],
            json!({ "error": {
                "message": "Incorrect API key provided: sk-expi*****. You can find your API key at https://platform.openai.com/account/api-keys.",
                "type": "invalid_request_error", "param": null, "code": "invalid_api_key" } })
            .to_string(),
        )
            .into_response();
    }
    answer(seen, body, false).await
}

/// The same server behind a proxy that turned streaming off: every answer
/// is one `chat.completion` body, whatever the request asked.
async fn completions_whole(State(seen): State<Seen>, body: String) -> Response {
    answer(seen, body, true).await
}

/// The scripted answer as the request asked for it (or whole, when
/// `whole`): a stream, or, for `stream: false`, one `chat.completion` body
/// with its usage, as OpenAI sends it.
async fn answer(seen: Seen, body: String, whole: bool) -> Response {
    let request: Value = serde_json::from_str(&body).unwrap();
    let answer = script(State(seen.clone()), body.clone()).await;
    let streamed = request["stream"] == json!(true) && !whole;
    let is_stream = answer
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v == "text/event-stream");
    if !is_stream || (streamed && request["stream_options"]["include_usage"] != json!(true)) {
        return answer;
    }
    let (parts, stream) = answer.into_parts();
    let bytes = axum::body::to_bytes(stream, usize::MAX).await.unwrap();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let prompt = (body.len() / 4) as u64;
    let usage = json!({
        "prompt_tokens": prompt,
        "completion_tokens": (text.len() / 10) as u64,
        "total_tokens": prompt + (text.len() / 10) as u64,
        "prompt_tokens_details": { "cached_tokens": prompt / 2 },
        "completion_tokens_details": { "reasoning_tokens": 0 },
    });
    if let Some(last) = seen.0.lock().unwrap().last_mut() {
        last["reported_usage"] = usage.clone();
        last["answered_whole"] = json!(!streamed);
    }
    if !streamed {
        let body = completion_of(&text, usage);
        return Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .header("x-request-id", "req_whole_1")
            .body(Body::from(body.to_string()))
            .unwrap();
    }
    let chunk = json!({ "id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-test-0001", "choices": [], "usage": usage });
    let text = text.replace("data: [DONE]", &format!("data: {chunk}\n\ndata: [DONE]"));
    Response::from_parts(parts, Body::from(text))
}

/// A script's chunks as the one `chat.completion` a server sends without
/// streaming: the content joined, each tool call whole (`arguments` as JSON
/// text), the finish reason, the usage.
fn completion_of(stream: &str, usage: Value) -> Value {
    let mut content = String::new();
    let mut calls: Vec<Value> = Vec::new();
    let mut finish = Value::Null;
    for line in stream.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        let chunk: Value = serde_json::from_str(data).unwrap();
        let Some(choice) = chunk["choices"].get(0) else {
            continue;
        };
        if let Some(text) = choice["delta"]["content"].as_str() {
            content.push_str(text);
        }
        for piece in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let index = piece["index"].as_u64().unwrap() as usize;
            while calls.len() <= index {
                calls.push(json!({ "id": "", "type": "function", "function": { "name": "", "arguments": "" } }));
            }
            let call = &mut calls[index];
            if let Some(id) = piece["id"].as_str() {
                call["id"] = json!(id);
            }
            if let Some(name) = piece["function"]["name"].as_str() {
                call["function"]["name"] = json!(name);
            }
            if let Some(args) = piece["function"]["arguments"].as_str() {
                let joined = format!("{}{args}", call["function"]["arguments"].as_str().unwrap());
                call["function"]["arguments"] = json!(joined);
            }
        }
        if !choice["finish_reason"].is_null() {
            finish = choice["finish_reason"].clone();
        }
    }
    let mut message = json!({ "role": "assistant", "content": if content.is_empty() { Value::Null } else { json!(content) } });
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    json!({
        "id": "chatcmpl-whole-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-test-0001",
        "choices": [{ "index": 0, "message": message, "logprobs": null, "finish_reason": finish }],
        "usage": usage,
    })
}

/// Whether the `say nothing once` script has said nothing already (in this
/// process).
static HOLLOW: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a summary request has hung already (in this process).
static HUNG_SUMMARY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

async fn script(State(seen): State<Seen>, body: String) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap();
    seen.0.lock().unwrap().push(body.clone());
    let messages = body["messages"].as_array().unwrap();
    // A summary request of compaction (no tools): the first one of a
    // conversation that lists three times hangs (until the test kills rein),
    // once per process; every other is answered.
    if messages
        .first()
        .and_then(|m| m["content"].as_str())
        .is_some_and(|s| s.starts_with("You compact"))
    {
        let asked = messages
            .last()
            .and_then(|m| m["content"].as_str())
            .unwrap_or("");
        if asked.contains("list three times")
            && !HUNG_SUMMARY.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            tokio::time::sleep(std::time::Duration::from_secs(60)).await;
        }
        return say("The user asked to list the workspace three times; it was listed.");
    }
    let prompt = messages
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_owned();
    let answers: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or(""))
        .collect();
    // Scripts of sessions, keyed by the newest user message and the tool
    // answers since: a step that joins a shared session (or a delegated
    // child) speaks after what came before.
    let newest = messages
        .iter()
        .rposition(|m| m["role"] == "user")
        .unwrap_or(0);
    let latest = messages[newest]["content"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    let since: Vec<&str> = messages[newest..]
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or(""))
        .collect();
    let earlier = messages[..newest]
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let hang_once = |marker: &str| {
        format!("if [ -e {marker} ]; then echo again; else touch {marker}; sleep 60; fi")
    };
    match (latest.as_str(), since.len()) {
        // A model that goes on and on: a piece every 50 ms, never finished.
        ("ramble", _) => {
            let pieces = futures_util::stream::unfold((), |()| async {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                let chunk = json!({ "choices": [{ "index": 0, "delta": { "content": "and " } }] });
                Some((Ok::<_, std::io::Error>(format!("data: {chunk}\n\n")), ()))
            });
            return Response::builder()
                .header(header::CONTENT_TYPE, "text/event-stream")
                .body(Body::from_stream(pieces))
                .unwrap();
        }
        // Prose, never a tool call.
        ("prose", _) => return say("Here is what I would do."),
        // A turn with nothing in it (a model that crashed mid-stream), once;
        // then an answer.
        ("say nothing once", 0) if !HOLLOW.swap(true, std::sync::atomic::Ordering::SeqCst) => {
            return say("");
        }
        ("say nothing once", _) => return say("said something"),
        // A broken stream, as a bridge once sent one: two tool calls that
        // share an id, one with arguments cut short.
        ("garbled", _) => {
            return sse(vec![
                json!({ "choices": [{ "index": 0, "delta": { "role": "assistant", "tool_calls": [
                    { "index": 0, "id": "toolu_1", "type": "function", "function": { "name": "write_file", "arguments": "{\"" } },
                    { "index": 1, "id": "toolu_1", "type": "function", "function": { "name": "write_file", "arguments": "{\"path\": \"a.txt\", \"content\": \"x\"}" } }] } }] }),
                json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "tool_calls" }] }),
            ]);
        }
        // An answer cut at the token limit; asked to go on, the rest.
        ("long", _) => {
            return sse(vec![
                json!({ "choices": [{ "index": 0, "delta": { "role": "assistant", "content": "part one, " } }] }),
                json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "length" }] }),
            ]);
        }
        (p, _) if p.starts_with("Your answer was cut off at the output token limit") => {
            return say("part two.");
        }
        // Three directory listings, one per turn, then done.
        ("list three times", n) if n < 3 => {
            return call(&format!("call_l{n}"), "list_dir", json!({ "path": "." }));
        }
        ("list three times", _) => return say("listed three times"),
        // Compacted: the summary, with the request restated, stands first.
        (l, _) if l.starts_with("[rein compacted") && l.contains("list three times") => {
            return say("listed three times");
        }
        ("Remember: the code word is heron.", _) => return say("Noted: heron."),
        ("What was the code word?", _) => {
            return say(if earlier.contains("heron") {
                "The code word was heron."
            } else {
                "I was never told a code word."
            });
        }
        ("Hand it over", 0) => {
            return call(
                "call_h",
                "delegate",
                json!({ "prompt": "who is the helper" }),
            );
        }
        ("Hand it over", _) => {
            return say(&format!("the helper said: {}", since[0]));
        }
        ("Delegate the work", 0) => {
            return call(
                "call_d",
                "delegate",
                json!({ "prompt": "Child work: log once, then wait" }),
            );
        }
        ("Delegate the work", 1) => {
            return call(
                "call_p",
                "run_command",
                json!({ "command": hang_once("parent-started") }),
            );
        }
        ("Delegate the work", _) => {
            return say(&format!("parent done; the helper said: {}", since[0]));
        }
        ("Child work: log once, then wait", 0) => {
            return call(
                "call_c1",
                "run_command",
                json!({ "command": "echo child >> child.log" }),
            );
        }
        ("Child work: log once, then wait", 1) => {
            return call(
                "call_c2",
                "run_command",
                json!({ "command": hang_once("child-started") }),
            );
        }
        ("Child work: log once, then wait", _) => return say("child done"),
        // MCP tools of the reference servers (`fs`: filesystem; `ev`: everything).
        (p, 0) if p.starts_with("mcp: list and read") => {
            return call("call_m1", "fs__list_directory", json!({ "path": "." }));
        }
        (p, 1) if p.starts_with("mcp: list and read") => {
            return call(
                "call_m2",
                "fs__read_text_file",
                json!({ "path": "notes.txt" }),
            );
        }
        ("mcp: write", 0) => {
            return call(
                "call_w",
                "fs__write_file",
                json!({ "path": "x.txt", "content": "written" }),
            );
        }
        ("mcp: move, wait, read", 0) => {
            return call(
                "call_mv",
                "fs__move_file",
                json!({ "source": "a.txt", "destination": "b.txt" }),
            );
        }
        ("mcp: move, wait, read", 1) => {
            return call(
                "call_wait",
                "run_command",
                json!({ "command": hang_once("started") }),
            );
        }
        ("mcp: move, wait, read", 2) => {
            return call("call_rd", "fs__read_text_file", json!({ "path": "b.txt" }));
        }
        ("mcp: echo", 0) => {
            return call("call_e", "ev__echo", json!({ "message": "hi from rein" }));
        }
        ("mcp: stall, then echo", 0) => {
            return call(
                "call_s",
                "ev__trigger-long-running-operation",
                json!({ "duration": 30, "steps": 3 }),
            );
        }
        ("mcp: stall, then echo", 1) => {
            return call(
                "call_e",
                "ev__echo",
                json!({ "message": "after the stall" }),
            );
        }
        // Answers of 300 kB, 20 MB and 70 MB from `big` (big_answer.py), then
        // the end of the first one's kept file read with an offset.
        ("mcp: big answers", n) if n < 3 => {
            let bytes = [300_000, 20_000_000, 70_000_000][n];
            return call(
                &format!("call_b{n}"),
                "big__emit",
                json!({ "bytes": bytes }),
            );
        }
        ("mcp: big answers", 3) => {
            return call(
                "call_r",
                "read_file",
                json!({ "path": ".rein/tool-answers/agent-call_b0.txt", "offset": 299_990 }),
            );
        }
        ("mcp: work twice", n) if n < 2 => {
            return call(&format!("call_w{n}"), "cr__work", json!({}));
        }
        (p, _) if p.starts_with("mcp: ") => return say(&since.join(" | ")),
        _ => {}
    }
    match (prompt.as_str(), answers.len()) {
        ("write notes", 0) => call(
            "call_1",
            "write_file",
            json!({ "path": "notes.txt", "content": "draft" }),
        ),
        ("write notes", 1) => call(
            "call_2",
            "run_command",
            json!({ "command": "cat notes.txt" }),
        ),
        ("write notes", _) => say(&format!("done: {}", answers[1])),
        ("escape", 0) => call(
            "call_1",
            "write_file",
            json!({ "path": "../outside.txt", "content": "x" }),
        ),
        ("escape", _) => say(answers[0]),
        // Two commands; the second hangs on its first run, so a test can kill rein there.
        (p, 0) if p == "twice" || p.starts_with("Run two commands") => call(
            "call_1",
            "run_command",
            json!({ "command": "echo ran >> runs.log" }),
        ),
        (p, 1) if p == "twice" || p.starts_with("Run two commands") => call(
            "call_2",
            "run_command",
            json!({ "command": "if [ -e started ]; then echo second; else touch started; sleep 60; fi" }),
        ),
        (p, _) if p == "twice" || p.starts_with("Run two commands") => say("both ran"),
        ("risky", 0) => call(
            "call_1",
            "run_command",
            json!({ "command": "rm -f old.txt" }),
        ),
        ("risky", _) => say(answers[0]),
        // examples/agent.toml
        (p, 0) if p.starts_with("Read CHANGELOG.md") => {
            call("call_1", "read_file", json!({ "path": "CHANGELOG.md" }))
        }
        (p, 1) if p.starts_with("Read CHANGELOG.md") => {
            let version = answers[0].lines().next().unwrap_or("").to_owned();
            call(
                "call_2",
                "write_file",
                json!({ "path": "RELEASE_NOTES.md", "content": format!("rein {version}: contracts, evidence and agent steps.\n") }),
            )
        }
        (p, _) if p.starts_with("Read CHANGELOG.md") => say("Wrote RELEASE_NOTES.md."),
        (p, 0) if p.starts_with("Check RELEASE_NOTES.md") => {
            call("call_1", "read_file", json!({ "path": "RELEASE_NOTES.md" }))
        }
        (p, _) if p.starts_with("Check RELEASE_NOTES.md") => say("The notes name the version."),
        (p, _) if p.starts_with("Say in one line") => {
            say("Wrote RELEASE_NOTES.md for 0.3.0 and checked it.")
        }
        // An answer with no visible text at all.
        (p, _) if p.starts_with("Answer with nothing") => say(""),
        // Goals: a decomposition request (isolated: no tools).
        (p, _) if p.starts_with("Goal: ") => decompose(p, &seen).await,
        _ => say("I do not know this script"),
    }
}

/// The steps of the release-notes goal: a write step, then a review.
fn release_notes_plan() -> Value {
    json!({
        "original_task": "Write release notes",
        "risk_level": "low",
        "estimated_duration_s": 120,
        "steps": [
            { "id": "notes", "type": "write", "risk_level": "low",
              "description": "Read CHANGELOG.md and write RELEASE_NOTES.md naming the latest version." },
            { "id": "check", "type": "review", "risk_level": "low", "depends_on": ["notes"],
              "description": "Check RELEASE_NOTES.md against CHANGELOG.md." }
        ]
    })
}

/// A decomposition in the seed's own camelCase shape: `blockingSteps` (not
/// `dependsOn`) orders the two steps.
fn seed_shaped_plan() -> Value {
    json!({
        "originalTask": "Write release notes",
        "estimatedDuration": 90,
        "riskLevel": "low",
        "steps": [
            { "id": "notes", "description": "Read CHANGELOG.md and write RELEASE_NOTES.md naming the latest version.",
              "type": "write", "dependsOn": [], "blockingSteps": ["check"], "checkpoint": "task_exec",
              "requiredPermissions": ["file_write"], "riskLevel": "low" },
            { "id": "check", "description": "Check RELEASE_NOTES.md against CHANGELOG.md.",
              "type": "review", "dependsOn": [], "blockingSteps": [], "checkpoint": "task_review",
              "requiredPermissions": ["file_read"], "riskLevel": "low", "riskDescription": "none: it only reads" }
        ]
    })
}

/// Answers a decomposition request by the goal: the first answer to the
/// release-notes goal is malformed (a refused answer goes back with its
/// errors); `hang` holds its first request for a minute; `nonsense` is never
/// valid.
async fn decompose(prompt: &str, seen: &Seen) -> Response {
    let again = prompt.contains("Your previous answer was refused");
    let goal = prompt
        .lines()
        .next()
        .unwrap_or("")
        .trim_start_matches("Goal: ");
    let asked = seen
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|b| b.to_string().contains(&format!("Goal: {goal}")))
        .count();
    match goal {
        g if g.starts_with("Write release notes") && !again => say(
            "```json\n{\"original_task\": \"notes\", \"risk_level\": \"low\", \"steps\": [{\"id\": \"notes\", \"type\": \"delete\", \"description\": \"x\"}]}\n```",
        ),
        g if g.starts_with("Write release notes") => say(&release_notes_plan().to_string()),
        // The seed's TaskDecomposition (seed 002 §6.1), field for field.
        g if g.starts_with("seed shaped") => say(&seed_shaped_plan().to_string()),
        // Nothing at all, then a plan.
        g if g.starts_with("say nothing") && !again => say(""),
        // An answer cut at the token limit, then a plan.
        g if g.starts_with("cut off") && !again => sse(vec![
            json!({ "choices": [{ "index": 0, "delta": { "role": "assistant", "content": "{\"original_task\": \"notes\", \"steps\": [{\"id\": \"no" } }] }),
            json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "length" }] }),
        ]),
        g if g.starts_with("say nothing") || g.starts_with("cut off") => {
            say(&release_notes_plan().to_string())
        }
        g if g.starts_with("hang") => {
            if asked <= 1 {
                tokio::time::sleep(std::time::Duration::from_secs(60)).await;
            }
            say(&release_notes_plan().to_string())
        }
        g if g.starts_with("slow step") => say(
            &json!({ "original_task": "two commands", "risk_level": "low", "steps": [
                { "id": "run", "type": "execute", "risk_level": "low",
                  "description": "Run two commands, one after the other." }] })
            .to_string(),
        ),
        // One step that reads the workspace through the `fs` MCP server.
        g if g.starts_with("mcp notes") => say(
            &json!({ "original_task": "read the notes", "risk_level": "low", "steps": [
                { "id": "read", "type": "read", "risk_level": "low",
                  "description": "mcp: list and read the workspace's notes." }] })
            .to_string(),
        ),
        g if g.starts_with("risky") => {
            let mut plan = release_notes_plan();
            plan["steps"][0]["risk_level"] = json!("high");
            plan["steps"][0]["risk_description"] = json!("overwrites the notes");
            say(&plan.to_string())
        }
        _ => say("{\"steps\": []}"),
    }
}

/// Starts the fake server on a free loopback port; returns its base URL.
pub async fn fake_model() -> (String, Seen) {
    serve_completions(false).await
}

/// Starts the fake server behind a proxy that answers every request whole
/// (one `chat.completion` body, even to a request for a stream).
pub async fn fake_model_unstreamed() -> (String, Seen) {
    serve_completions(true).await
}

async fn serve_completions(whole: bool) -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route(
            "/v1/chat/completions",
            if whole {
                post(completions_whole)
            } else {
                post(completions)
            },
        )
        .with_state(seen.clone());
    let addr = serve(app).await;
    (format!("http://{addr}/v1"), seen)
}

/// A server that behaves as llama.cpp's does where rein once broke: its chat
/// template reads `content` of every message (a message without one gets a
/// 200 with an empty stream, one with `null` a 500), and a streamed tool call
/// names its function in every chunk. Its script: write `out.txt`, then say so.
async fn llama_completions(State(seen): State<Seen>, body: String) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap();
    seen.0.lock().unwrap().push(body.clone());
    let messages = body["messages"].as_array().unwrap();
    for m in messages {
        match m.get("content") {
            None => {
                return Response::builder()
                    .header(header::CONTENT_TYPE, "text/event-stream")
                    .body(Body::empty())
                    .unwrap();
            }
            Some(Value::Null) => {
                return Response::builder()
                    .status(500)
                    .body(Body::from(
                        r#"{"error":{"code":500,"message":"Value is not a string: null"}}"#,
                    ))
                    .unwrap();
            }
            Some(_) => {}
        }
    }
    if messages.iter().any(|m| m["role"] == "tool") {
        return say("wrote out.txt");
    }
    let piece = |args: &str| {
        json!({ "choices": [{ "index": 0, "delta": { "tool_calls": [
            { "index": 0, "id": "call_llama", "type": "function",
              "function": { "name": "write_file", "arguments": args } }] } }] })
    };
    sse(vec![
        piece("{\"path\": \"out.txt\", "),
        piece("\"content\": \"from llama\"}"),
        json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "tool_calls" }] }),
    ])
}

/// Starts the llama.cpp-like server; returns its base URL.
pub async fn llama_like() -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/v1/chat/completions", post(llama_completions))
        .with_state(seen.clone());
    let addr = serve(app).await;
    (format!("http://{addr}/v1"), seen)
}

/// Server-sent events as the Messages API sends them: `event:` and `data:`.
fn anthropic_sse(events: Vec<Value>) -> Response {
    let mut body = String::new();
    for e in events {
        body.push_str(&format!(
            "event: {}\ndata: {e}\n\n",
            e["type"].as_str().unwrap()
        ));
    }
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header("request-id", "req_ant_1")
        .body(Body::from(body))
        .unwrap()
}

/// A server that speaks Anthropic's Messages API, streaming: it checks the
/// key and version headers, and plays a script keyed by the first user text
/// — `write hello` (a `tool_use` of `write_file`, then a text answer once the
/// result comes back), `busy` (429 with `Retry-After`), `overloaded` (an
/// `error` event in the stream).
async fn messages(
    State(seen): State<Seen>,
    headers: axum::http::HeaderMap,
    body: String,
) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap();
    seen.0.lock().unwrap().push(body.clone());
    let json_error = |status: u16, kind: &str, message: &str| {
        Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::RETRY_AFTER, "3")
            .body(Body::from(
                json!({ "type": "error", "error": { "type": kind, "message": message } })
                    .to_string(),
            ))
            .unwrap()
    };
    if headers.get("x-api-key").and_then(|v| v.to_str().ok()) != Some("sk-ant-test")
        || headers.get("anthropic-version").is_none()
    {
        return json_error(401, "authentication_error", "invalid x-api-key");
    }
    let messages = body["messages"].as_array().unwrap();
    let first = messages[0]["content"][0]["text"].as_str().unwrap_or("");
    let answered = messages.iter().any(|m| {
        m["content"]
            .as_array()
            .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
    });
    let start = json!({ "type": "message_start", "message": { "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": body["model"], "stop_reason": null, "usage": { "input_tokens": 10, "cache_creation_input_tokens": 4, "cache_read_input_tokens": 6, "output_tokens": 1 } } });
    // Without streaming: one message, as the API sends it.
    if body["stream"] == json!(false) && first != "busy" {
        let message = |content: Value, stop: &str, output: u64| {
            Response::builder()
                .header(header::CONTENT_TYPE, "application/json")
                .header("request-id", "req_ant_whole")
                .body(Body::from(
                    json!({ "id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
                        "content": content, "stop_reason": stop, "stop_sequence": null,
                        "usage": { "input_tokens": 10, "cache_creation_input_tokens": 4, "cache_read_input_tokens": 6, "output_tokens": output } })
                    .to_string(),
                ))
                .unwrap()
        };
        return match (first, answered) {
            ("overloaded", _) => json_error(529, "overloaded_error", "Overloaded"),
            (_, true) => message(
                json!([{ "type": "text", "text": "Wrote hello.txt." }]),
                "end_turn",
                5,
            ),
            (_, false) => message(
                json!([
                    { "type": "text", "text": "I will write it." },
                    { "type": "tool_use", "id": "toolu_1", "name": "write_file", "input": { "path": "hello.txt", "content": "hello from claude" } },
                ]),
                "tool_use",
                20,
            ),
        };
    }
    match (first, answered) {
        ("busy", _) => json_error(
            429,
            "rate_limit_error",
            "Number of requests has exceeded your rate limit",
        ),
        ("overloaded", _) => anthropic_sse(vec![
            start,
            json!({ "type": "error", "error": { "type": "overloaded_error", "message": "Overloaded" } }),
        ]),
        (_, true) => anthropic_sse(vec![
            start,
            json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
            json!({ "type": "ping" }),
            json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": "Wrote " } }),
            json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": "hello.txt." } }),
            json!({ "type": "content_block_stop", "index": 0 }),
            json!({ "type": "message_delta", "delta": { "stop_reason": "end_turn", "stop_sequence": null }, "usage": { "output_tokens": 5 } }),
            json!({ "type": "message_stop" }),
        ]),
        (_, false) => anthropic_sse(vec![
            start,
            json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
            json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": "I will write it." } }),
            json!({ "type": "content_block_stop", "index": 0 }),
            json!({ "type": "content_block_start", "index": 1, "content_block": { "type": "tool_use", "id": "toolu_1", "name": "write_file", "input": {} } }),
            json!({ "type": "content_block_delta", "index": 1, "delta": { "type": "input_json_delta", "partial_json": "{\"path\": \"hello.txt\", " } }),
            json!({ "type": "content_block_delta", "index": 1, "delta": { "type": "input_json_delta", "partial_json": "\"content\": \"hello from claude\"}" } }),
            json!({ "type": "content_block_stop", "index": 1 }),
            json!({ "type": "message_delta", "delta": { "stop_reason": "tool_use", "stop_sequence": null }, "usage": { "output_tokens": 20 } }),
            json!({ "type": "message_stop" }),
        ]),
    }
}

/// Starts the Messages API server; returns its base URL (without `/v1`).
pub async fn anthropic_like() -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/v1/messages", post(messages))
        .with_state(seen.clone());
    let addr = serve(app).await;
    (format!("http://{addr}"), seen)
}

/// A server that speaks OpenAI's Responses API, streaming (`event:` names and
/// typed `data:`): a `function_call` of `write_file`, then a text answer once
/// its output comes back; `busy` gets an `error` event in the stream.
async fn responses(State(seen): State<Seen>, body: String) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap();
    seen.0.lock().unwrap().push(body.clone());
    let input = body["input"].as_array().unwrap();
    let first = input[0]["content"][0]["text"].as_str().unwrap_or("");
    let answered = input.iter().any(|i| i["type"] == "function_call_output");
    let events = |events: Vec<Value>| {
        let mut text = String::new();
        for e in events {
            text.push_str(&format!(
                "event: {}\ndata: {e}\n\n",
                e["type"].as_str().unwrap()
            ));
        }
        Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header("x-request-id", "req_resp_1")
            .body(Body::from(text))
            .unwrap()
    };
    let created = json!({ "type": "response.created", "sequence_number": 0, "response": { "id": "resp_1", "status": "in_progress", "output": [] } });
    // Without streaming: the response object, as the API sends it.
    if body["stream"] == json!(false) {
        let usage = json!({ "input_tokens": 30, "input_tokens_details": { "cached_tokens": 8 }, "output_tokens": 12, "output_tokens_details": { "reasoning_tokens": 3 }, "total_tokens": 42 });
        let output = if first == "busy" {
            return Response::builder()
                .status(429)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(
                    json!({ "error": { "message": "Rate limit reached", "type": "requests", "param": null, "code": "rate_limit_exceeded" } }).to_string(),
                ))
                .unwrap();
        } else if answered {
            json!([{ "type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                "content": [{ "type": "output_text", "text": "Wrote it.", "annotations": [] }] }])
        } else {
            json!([{ "type": "function_call", "id": "fc_1", "call_id": "call_r1", "name": "write_file",
                "arguments": "{\"path\": \"r.txt\", \"content\": \"from responses\"}", "status": "completed" }])
        };
        return Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .header("x-request-id", "req_resp_whole")
            .body(Body::from(
                json!({ "id": "resp_1", "object": "response", "status": "completed", "model": "gpt-resp-2025",
                    "output": output, "error": null, "incomplete_details": null, "usage": usage })
                .to_string(),
            ))
            .unwrap();
    }
    if first == "busy" {
        return events(vec![
            created,
            json!({ "type": "error", "code": "rate_limit_exceeded", "message": "Rate limit reached", "param": null }),
        ]);
    }
    if answered {
        return events(vec![
            created,
            json!({ "type": "response.output_item.added", "output_index": 0, "item": { "type": "message", "id": "msg_1", "role": "assistant", "content": [] } }),
            json!({ "type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "Wrote " }),
            json!({ "type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "it." }),
            json!({ "type": "response.output_item.done", "output_index": 0, "item": { "type": "message", "id": "msg_1" } }),
            json!({ "type": "response.completed", "response": { "id": "resp_1", "status": "completed", "model": "gpt-resp-2025", "usage": { "input_tokens": 30, "input_tokens_details": { "cached_tokens": 8 }, "output_tokens": 12, "output_tokens_details": { "reasoning_tokens": 3 }, "total_tokens": 42 } } }),
        ]);
    }
    events(vec![
        created,
        json!({ "type": "response.output_item.added", "output_index": 0, "item": { "type": "function_call", "id": "fc_1", "call_id": "call_r1", "name": "write_file", "arguments": "" } }),
        json!({ "type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0, "delta": "{\"path\": \"r.txt\", " }),
        json!({ "type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0, "delta": "\"content\": \"from responses\"}" }),
        json!({ "type": "response.function_call_arguments.done", "item_id": "fc_1", "output_index": 0, "arguments": "{\"path\": \"r.txt\", \"content\": \"from responses\"}" }),
        json!({ "type": "response.output_item.done", "output_index": 0, "item": { "type": "function_call", "id": "fc_1", "call_id": "call_r1", "name": "write_file" } }),
        json!({ "type": "response.completed", "response": { "id": "resp_1", "status": "completed", "model": "gpt-resp-2025", "usage": { "input_tokens": 30, "input_tokens_details": { "cached_tokens": 8 }, "output_tokens": 12, "output_tokens_details": { "reasoning_tokens": 3 }, "total_tokens": 42 } } }),
    ])
}

/// Starts the Responses API server; returns its base URL (with `/v1`).
pub async fn responses_like() -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/v1/responses", post(responses))
        .with_state(seen.clone());
    let addr = serve(app).await;
    (format!("http://{addr}/v1"), seen)
}
