//! `rein-bench acp --rounds N`: from a decision an editor makes to the next
//! update it receives, over stdio. A real ACP client (the official TypeScript
//! SDK's, `crates/rein-runtimes/tests/acp/client.mjs`) drives a real `rein
//! acp`: each round is a prompt whose goal becomes one approval step; the
//! client answers the permission request and times, on its side, until the
//! `session/update` that shows the request settled arrives. In between: the
//! answer's JSON-RPC line, the decision's durable commit (SQLite,
//! `synchronous=FULL`) and ledger entry, the event, and the update's line
//! back. The goal's model is a local fake chat-completions server that answers
//! at once.

use std::path::{Path, PathBuf};

use axum::Router;
use axum::routing::post;
use serde_json::{Value, json};

/// The decomposition of every goal: one step that asks a person.
async fn answer(body: String) -> axum::response::Response {
    let asks_plan = body.contains("Goal: ");
    let text = if asks_plan {
        json!({ "original_task": "approve", "risk_level": "low", "steps": [
            { "id": "ok", "type": "approve", "risk_level": "low",
              "description": "Approve the release?" }] })
        .to_string()
    } else {
        "Approved.".to_owned()
    };
    rein_test_support::model::sse([
        json!({ "choices": [{ "index": 0, "delta": { "role": "assistant", "content": text } }] }),
        json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "stop" }] }),
    ])
}

pub async fn acp(rounds: usize, rein: Option<PathBuf>, dir: &Path) -> anyhow::Result<Value> {
    let rein = crate::sse::rein_binary(rein)?;
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("../rein-runtimes/tests/acp");
    anyhow::ensure!(
        client
            .join("node_modules/@agentclientprotocol/sdk")
            .is_dir(),
        "the ACP client's SDK is not installed: npm ci --prefix {}",
        client.display()
    );
    let app = Router::new().route("/v1/chat/completions", post(answer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}/v1", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    let ws = dir.join("project");
    std::fs::create_dir_all(&ws)?;
    let data = dir.join("data");
    let out = tokio::process::Command::new("node")
        .arg(client.join("client.mjs"))
        .env("REIN_BIN", &rein)
        .env(
            "REIN_ARGS",
            json!(["--data-dir", data, "--sandbox", "none", "--yes"]).to_string(),
        )
        .env("OPENAI_BASE_URL", &base)
        .env("OPENAI_API_KEY", "sk-bench")
        .env("REIN_MODEL", "bench")
        .env("ACP_CWD", &ws)
        .env("ACP_PROMPT", "approve the release")
        .env("ACP_SCENARIO", "bench")
        .env("ACP_ROUNDS", rounds.to_string())
        .stderr(std::process::Stdio::null())
        .output()
        .await?;
    anyhow::ensure!(out.status.success(), "the ACP client failed: {out:?}");
    let seen: Value = serde_json::from_slice(&out.stdout)?;
    anyhow::ensure!(
        seen["errors"].as_array().is_some_and(Vec::is_empty),
        "the ACP client saw errors: {}",
        seen["errors"]
    );
    let mut ms: Vec<f64> = seen["timings"]
        .as_array()
        .map(|t| t.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    anyhow::ensure!(
        ms.len() == rounds,
        "{} of {rounds} decisions were timed",
        ms.len()
    );
    ms.sort_by(f64::total_cmp);
    let at = |p: f64| {
        let rank = ((ms.len() as f64 - 1.0) * p).round() as usize;
        (ms[rank.min(ms.len() - 1)] * 1000.0).round() / 1000.0
    };
    Ok(json!({
        "bench": "acp",
        "rounds": rounds,
        "decision_to_update_p50_ms": at(0.50),
        "decision_to_update_p99_ms": at(0.99),
        "decision_to_update_max_ms": at(1.0),
        "stops": seen["stops"].as_array().map_or(0, Vec::len),
    }))
}
