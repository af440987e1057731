//! The Control UI's cost. First the server's time for the tasks page over a
//! store of many tasks (the first page, a status filter, a page deep in the
//! cursor), on one kept-alive loopback connection. Then, in Debian's Chromium
//! driven through chromedriver: from a click on "approve" in the inbox to the
//! next step of the task started (the step's checkpoint, on the same clock)
//! and to the card showing the decision.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::command_engine;
use rein_core::store::ApprovalFilter;
use rein_core::{CreateTask, Engine, RunOptions};
use rein_protocol::{
    ApprovalStatus, CheckpointType, StepAction, TaskDecomposition, TaskId, TaskStep,
};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::{percentile, read_response};

fn one_step() -> TaskDecomposition {
    TaskDecomposition::new("bench", vec![TaskStep::new("only", StepAction::Noop)])
}

fn approval_then_step() -> anyhow::Result<TaskDecomposition> {
    let plan = json!({ "original_task": "ship it", "steps": [
        { "id": "ship", "checkpoint": "user_approval", "action": {
            "kind": "approval", "title": "Ship?", "options": ["ship", "hold"],
            "recommended": "ship", "on_expiry": "deny", "trigger": "multiple_options" } },
        { "id": "publish", "depends_on": ["ship"], "checkpoint": "task_exec",
          "action": { "kind": "noop" } },
    ] });
    Ok(serde_json::from_value(plan)?)
}

/// `tasks` tasks stored (not run), 64 creates at a time.
async fn seed(engine: &Arc<Engine>, tasks: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut made = 0usize;
    let mut running = tokio::task::JoinSet::new();
    while made < tasks || !running.is_empty() {
        while made < tasks && running.len() < 64 {
            let engine = Arc::clone(engine);
            running.spawn(async move { engine.create(CreateTask::of(one_step())).await });
            made += 1;
        }
        if let Some(done) = running.join_next().await {
            done??;
        }
        if made % 10_000 == 0 && made < tasks {
            eprintln!("ui: {made}/{tasks} tasks stored");
        }
    }
    Ok(started.elapsed())
}

async fn get_times(
    addr: std::net::SocketAddr,
    path: &str,
    requests: usize,
) -> anyhow::Result<Vec<Duration>> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (read, mut write) = stream.into_split();
    let mut reader = tokio::io::BufReader::new(read);
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    let mut times = Vec::with_capacity(requests);
    for _ in 0..requests {
        let sent = Instant::now();
        write.write_all(request.as_bytes()).await?;
        let status = read_response(&mut reader).await?;
        anyhow::ensure!(status == 200, "GET {path} answered {status}");
        times.push(sent.elapsed());
    }
    times.sort();
    Ok(times)
}

fn summary(times: &[Duration]) -> Value {
    json!({
        "requests": times.len(),
        "p50_ms": (percentile(times, 0.50) * 100.0).round() / 100.0,
        "p99_ms": (percentile(times, 0.99) * 100.0).round() / 100.0,
    })
}

pub async fn ui(tasks: usize, requests: usize, clicks: usize, dir: &Path) -> anyhow::Result<Value> {
    let store = Arc::new(rein_store::SqliteStore::open(&dir.join("rein.db"))?);
    let engine = command_engine(store, dir);
    // A store kept from an earlier run (`--dir`) is topped up, not refilled.
    let stored = usize::try_from(engine.metrics().await?.tasks.total)?;
    let seeded = seed(&engine, tasks.saturating_sub(stored)).await?;
    eprintln!(
        "ui: {} tasks stored in {:.1} s ({stored} were there)",
        tasks.saturating_sub(stored),
        seeded.as_secs_f64()
    );
    // No tokens: the pages let the local user in, with no sign-in to time.
    let shutdown = tokio_util::sync::CancellationToken::new();
    let app = rein_server::AppState::new(
        Arc::clone(&engine),
        rein_server::Auth::new(Vec::new()),
        shutdown.clone(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(rein_server::serve(listener, app.clone()));

    // A cursor 100 pages in.
    let mut cursor = None;
    for _ in 0..100 {
        let page = engine
            .list(&rein_core::store::TaskFilter {
                limit: Some(50),
                cursor: cursor.clone(),
                ..Default::default()
            })
            .await?;
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let first = get_times(addr, "/ui/tasks", requests).await?;
    let filtered = get_times(addr, "/ui/tasks?status=pending", requests).await?;
    let deep = match &cursor {
        Some(c) => Some(get_times(addr, &format!("/ui/tasks?cursor={c}"), requests).await?),
        None => None,
    };
    let fragment = get_times(addr, "/ui/tasks/table", requests).await?;
    let browser = if clicks > 0 {
        Some(clicks_in_chromium(&engine, &app, addr, clicks, dir).await?)
    } else {
        None
    };
    shutdown.cancel();
    let _ = server.await;
    Ok(json!({
        "bench": "ui",
        "tasks": tasks,
        "seed_s": (seeded.as_secs_f64() * 10.0).round() / 10.0,
        "tasks_page": summary(&first),
        "tasks_page_status_filter": summary(&filtered),
        "tasks_page_100_pages_in": deep.as_deref().map(summary),
        "tasks_table_fragment": summary(&fragment),
        "approve_click": browser,
    }))
}

/// A chromedriver on a free port, and Chromium under it.
async fn chromium(dir: &Path) -> anyhow::Result<(tokio::process::Child, fantoccini::Client)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let driver = tokio::process::Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            anyhow::anyhow!("chromedriver: {e} (apt-get install chromium chromium-driver)")
        })?;
    let started = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(10),
            "chromedriver did not listen"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let client =
        fantoccini::ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(rein_server::ui::headless_chromium(&dir.join("chromium")))
            .connect(&format!("http://127.0.0.1:{port}"))
            .await?;
    Ok((driver, client))
}

/// Each round: a task waits on an approval; the inbox is loaded; "approve" is
/// clicked in the page, the time taken there; then the next step's start (its
/// checkpoint's time) and the card's change (seen by the page itself).
async fn clicks_in_chromium(
    engine: &Arc<Engine>,
    app: &rein_server::AppState,
    addr: std::net::SocketAddr,
    rounds: usize,
    dir: &Path,
) -> anyhow::Result<Value> {
    let (_driver, client) = chromium(dir).await?;
    let mut to_step = Vec::new();
    let mut to_card = Vec::new();
    for _ in 0..rounds {
        let task = engine.create(CreateTask::of(approval_then_step()?)).await?;
        let id: TaskId = task.id().clone();
        app.start(id.clone(), RunOptions::default());
        let approval = loop {
            let pending = engine
                .approvals(&ApprovalFilter {
                    status: Some(ApprovalStatus::Pending),
                    task_id: Some(id.clone()),
                    limit: Some(1),
                })
                .await?;
            if let Some(a) = pending.into_iter().next() {
                break a;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        client.goto(&format!("http://{addr}/ui/approvals")).await?;
        let card = format!("#a-{}", approval.id);
        // Clicked in the page, and the card's change watched by the page.
        let clicked = client
            .execute(
                "const card = arguments[0];
                 window.reinShown = null;
                 new MutationObserver((_, observer) => {
                     if (document.querySelector(card + '[data-status=approved]')) {
                         window.reinShown = performance.timeOrigin + performance.now();
                         observer.disconnect();
                     }
                 }).observe(document.body, { childList: true, subtree: true });
                 const at = performance.timeOrigin + performance.now();
                 document.querySelector(card + ' button[value=approve]').click();
                 return at;",
                vec![json!(card)],
            )
            .await?
            .as_f64()
            .ok_or_else(|| anyhow::anyhow!("no click time"))?;
        let started = loop {
            let state = engine.get(&id).await?;
            if let Some(cp) = state.checkpoints.iter().find(|c| {
                c.step_id.as_deref() == Some("publish") && c.kind == CheckpointType::TaskExec
            }) {
                break cp.started_at;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        let shown = loop {
            if let Some(at) = client
                .execute("return window.reinShown;", vec![])
                .await?
                .as_f64()
            {
                break at;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let step_ms = started.timestamp_micros() as f64 / 1000.0 - clicked;
        to_step.push(Duration::from_secs_f64(step_ms.max(0.0) / 1000.0));
        to_card.push(Duration::from_secs_f64((shown - clicked).max(0.0) / 1000.0));
    }
    client.close().await?;
    to_step.sort();
    to_card.sort();
    Ok(json!({
        "rounds": rounds,
        "click_to_next_step_started_p50_ms": (percentile(&to_step, 0.50) * 100.0).round() / 100.0,
        "click_to_next_step_started_p99_ms": (percentile(&to_step, 0.99) * 100.0).round() / 100.0,
        "click_to_card_shown_p50_ms": (percentile(&to_card, 0.50) * 100.0).round() / 100.0,
        "click_to_card_shown_p99_ms": (percentile(&to_card, 0.99) * 100.0).round() / 100.0,
    }))
}
