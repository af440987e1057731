//! `rein-bench agent --tool-calls N`: what the built-in agent loop adds per tool
//! call. One agent step runs against a local fake chat-completions server (the
//! real SSE wire format) that asks for `list_dir` N times, then answers. The
//! time per tool call is split into what it is made of: the model request's
//! round trip (timed alone against the same server), the two durable journal
//! appends of each call (the model's turn, then the tool's answer; timed alone
//! on the same store), and the rest — the harness's own overhead.
//!
//! With `--mcp` the tool is `bench__echo` of an MCP server over stdio (this
//! binary's `mcp-echo`, a minimal server so the time is rein's, not a
//! runtime's), and the call's own round trip through the SDK is timed alone
//! too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::response::Response;
use axum::routing::post;
use rein_core::harness::{HarnessRegistry, RuntimePolicy};
use rein_core::{CommandExecutor, CreateTask, Engine, EngineConfig, RunOptions};
use rein_protocol::{StepAction, TaskDecomposition, TaskStep};
use rein_runtimes::AgentExecutor;
use rein_runtimes::openai::{ChatClient, ChatConfig, Message};
use rein_test_support::model::sse;
use serde_json::{Value, json};

/// Asks for the tool until the conversation has `calls` answers.
async fn serve(calls: usize, mcp: bool, body: String) -> Response {
    let (tool, args) = if mcp {
        ("bench__echo", "{\"text\": \"x\"}")
    } else {
        ("list_dir", "{\"path\": \".\"}")
    };
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let answered = body["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
    if answered < calls {
        sse([
            json!({ "choices": [{ "index": 0, "delta": { "role": "assistant", "tool_calls": [
                { "index": 0, "id": format!("call_{answered}"), "type": "function",
                  "function": { "name": tool, "arguments": args } }] } }] }),
            json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "tool_calls" }] }),
        ])
    } else {
        sse([
            json!({ "choices": [{ "index": 0, "delta": { "role": "assistant", "content": "done" } }] }),
            json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "stop" }] }),
        ])
    }
}

fn mean_ms(times: &[Duration]) -> f64 {
    let total: f64 = times.iter().map(Duration::as_secs_f64).sum();
    (total / times.len().max(1) as f64 * 1e6).round() / 1000.0
}

pub async fn agent(calls: usize, mcp: bool, dir: &std::path::Path) -> anyhow::Result<Value> {
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move |body: String| serve(calls, mcp, body)),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}/v1", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    let chat = ChatConfig {
        base_url: base,
        api_key: None,
        model: "bench".into(),
        idle_timeout: Duration::from_secs(30),
        stream: true,
    };

    let store = Arc::new(rein_store::SqliteStore::open(&dir.join("rein.db"))?);
    let agent = AgentExecutor::new(
        Arc::new(CommandExecutor::unsandboxed()),
        Arc::new(HarnessRegistry::new(1)),
        RuntimePolicy::default(),
        chat.clone(),
    )
    .with_max_turns(calls + 1);
    let engine = Engine::new(store, Arc::new(agent), EngineConfig::new(dir.join("ws")));
    let step = TaskStep::new(
        "agent",
        StepAction::Agent {
            prompt: "list".into(),
            provider: None,
            model: None,
            runtime: None,
            tools: if mcp {
                Vec::new()
            } else {
                vec!["list_dir".into()]
            },
            session: None,
            limits: Default::default(),
            mcp: if mcp {
                vec![rein_protocol::McpUse {
                    name: "bench".into(),
                    server: Some(echo_server()?),
                }]
            } else {
                Vec::new()
            },
            network: false,
            images: Vec::new(),
        },
    );
    let state = engine
        .create(CreateTask::of(TaskDecomposition::new("bench", vec![step])))
        .await?;
    let started = Instant::now();
    let done = engine.run(state.id(), RunOptions::default()).await?;
    let elapsed = started.elapsed();
    anyhow::ensure!(
        done.status() == rein_protocol::TaskStatus::Completed,
        "the agent step did not complete: {:?}",
        done.latest_for_step("agent").and_then(|c| c.error.clone())
    );

    // The model request alone: the same server, a conversation of the same size.
    let entries = rein_core::journal::Journal::new(Arc::clone(engine.store()), state.id(), "agent")
        .load()
        .await?;
    let messages: Vec<Message> = entries
        .iter()
        .filter_map(|e| serde_json::from_value(e["message"].clone()).ok())
        .collect();
    // The run's conversations grow from nothing to all of it: half is the average.
    let half: Vec<Message> = messages[..messages.len() / 2].to_vec();
    let client = ChatClient::new(chat);
    let mut model = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        client.complete(&half, &[], |_| {}).await?;
        model.push(t.elapsed());
    }
    // A durable journal append alone, of one entry like the run's.
    let entry = entries.last().cloned().unwrap_or(Value::Null);
    let bench_task = rein_protocol::TaskId::new();
    let writer = rein_core::journal::Journal::new(Arc::clone(engine.store()), &bench_task, "agent");
    let mut commits = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        writer.append(std::slice::from_ref(&entry)).await?;
        commits.push(t.elapsed());
    }
    // An MCP call alone: the same server, through the SDK's client.
    let mut mcp_calls = Vec::new();
    if mcp {
        let server = echo_server()?;
        let mut child = tokio::process::Command::new(server.command.unwrap_or_default())
            .args(&server.args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            anyhow::bail!("the echo server's stdio");
        };
        let client = rmcp::ServiceExt::serve((), (stdout, stdin)).await?;
        for _ in 0..calls {
            let mut params = rmcp::model::CallToolRequestParams::new("echo");
            params.arguments = json!({ "text": "x" }).as_object().cloned();
            let t = Instant::now();
            client.call_tool(params).await?;
            mcp_calls.push(t.elapsed());
        }
        let _ = client.cancel().await;
    }
    let per_call = elapsed.as_secs_f64() * 1000.0 / calls as f64;
    let (model_ms, commit_ms, mcp_ms) = (mean_ms(&model), mean_ms(&commits), mean_ms(&mcp_calls));
    let mut out = json!({
        "bench": if mcp { "agent-mcp" } else { "agent" },
        "tool_calls": calls,
        "elapsed_s": (elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
        "per_tool_call_ms": (per_call * 1000.0).round() / 1000.0,
        "model_request_ms": model_ms,
        "journal_commit_ms": commit_ms,
        "overhead_per_tool_call_ms": ((per_call - model_ms - 2.0 * commit_ms - if mcp { mcp_ms } else { 0.0 }) * 1000.0).round() / 1000.0,
    });
    if mcp {
        out["mcp_call_ms"] = json!(mcp_ms);
    }
    Ok(out)
}

/// This binary's `mcp-echo`, as an MCP server declaration.
fn echo_server() -> anyhow::Result<rein_protocol::McpServer> {
    Ok(rein_protocol::McpServer {
        command: Some(std::env::current_exe()?.display().to_string()),
        args: vec!["mcp-echo".into()],
        ..Default::default()
    })
}

/// `rein-bench mcp-echo`: the least an MCP server over stdio does — it
/// initializes, lists one tool, `echo {text}`, and answers its calls — so a
/// benchmark times rein's side of a call, not a server's runtime.
pub fn mcp_echo() -> anyhow::Result<()> {
    use std::io::{BufRead, Write};
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let request: Value = serde_json::from_str(&line?)?;
        let Some(id) = request.get("id").cloned() else {
            continue; // a notification
        };
        let result = match request["method"].as_str() {
            Some("initialize") => json!({
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": { "tools": {} },
                "serverInfo": { "name": "rein-bench-echo", "version": "1" },
            }),
            Some("tools/list") => json!({ "tools": [{
                "name": "echo",
                "description": "Echoes its text",
                "inputSchema": { "type": "object", "properties": { "text": { "type": "string" } }, "required": ["text"] },
            }] }),
            Some("tools/call") => json!({ "content": [{
                "type": "text",
                "text": request["params"]["arguments"]["text"],
            }] }),
            _ => json!({}),
        };
        writeln!(
            out,
            "{}",
            json!({ "jsonrpc": "2.0", "id": id, "result": result })
        )?;
        out.flush()?;
    }
    Ok(())
}
