//! `rein-bench`: measures the harness's own cost.
//!
//! `rein-bench steps --tasks N --steps M` runs N tasks of M sequential in-process
//! no-op steps through the engine and the SQLite store (every step durable before
//! the next starts), and prints one JSON line: durable steps per second, the
//! latency of each commit request (p50/p99), and — measured in the same run on the
//! same disk — the ceiling: how many bare `synchronous=FULL` SQLite commits per
//! second this machine does one after another. Both are timed on a store whose
//! write-ahead log has reached its working size (a fresh one pays a one-off while
//! its log grows; `--cold` times that instead), and the ceiling is measured half
//! before and half after the run, so a drift in the disk's speed is shared.
//! `--runs K` repeats the whole measurement K times, each on a fresh store, and
//! prints the median of each figure, with every run's figures beside them.
//!
//! `rein-bench approvals --decisions N --paused M` times decision → next step (p50,
//! p99) and reports memory with M tasks paused on approvals.
//!
//! `rein-bench conflicts --actions N` times conflict detection over a shared
//! state of N actions (median of `--runs`).
//!
//! `rein-bench sandbox --runs N` times starting and finishing `true` plainly
//! (`sh -c true`), under the bubblewrap sandbox and under Landlock (p50, p99):
//! what the sandbox costs a step.
//!
//! `rein-bench agent --tool-calls N` times what the built-in agent loop adds
//! per tool call, against a local fake chat-completions server.
//!
//! `rein-bench acp --rounds N` times, over stdio, from an editor's answer to a
//! permission request of `rein acp` to the update that shows it settled (p50,
//! p99), with a real ACP client (the TypeScript SDK's).
//!
//! `rein-bench takeover --tasks N` kills a real `rein serve` with N tasks in
//! flight (`kill -9`) and times its restart: until it answers, and until every
//! interrupted step runs again, against the same steps' scripts started bare.
//!
//! `rein-bench postgres` runs `--tasks` × `--steps` durable steps on a
//! PostgreSQL store against that server's bare commit ceiling, times how
//! long a killed node's tasks take to run again on another node, and, in the
//! same run, a single node's take-over on SQLite (`--takeover-tasks`).
//!
//! `rein-bench usage --turns N` times what metering adds to a turn's journal
//! append, and the store's usage reports (and `rein usage`) over N recorded
//! turns.
//!
//! `rein-bench sse --clients N` measures what N idle event-stream clients cost a
//! real `rein serve` process: CPU while they idle, memory, files and threads
//! before, with and after them.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod acp;
mod agent;
mod goal;
mod postgres;
mod sse;
mod takeover;
mod ui;
mod usage;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use rein_core::{CommandExecutor, CreateTask, Engine, EngineConfig, RunOptions};
use rein_protocol::{StepAction, TaskDecomposition, TaskStatus, TaskStep};
use rein_store::SqliteStore;

#[derive(Debug, Parser)]
#[command(name = "rein-bench")]
struct Cli {
    #[command(subcommand)]
    command: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Durable no-op steps per second through the engine.
    Steps {
        #[arg(long, default_value_t = 1)]
        tasks: usize,
        #[arg(long, default_value_t = 1000)]
        steps: usize,
        /// Bare commits to time for the ceiling (0 to skip).
        #[arg(long, default_value_t = 2000)]
        ceiling_commits: usize,
        /// Time the run on a fresh store, without the warm-up task that first
        /// brings its write-ahead log to its working size.
        #[arg(long)]
        cold: bool,
        /// Repeat the measurement this many times, each on a fresh store, and
        /// report the median of each figure.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        runs: u32,
        /// Directory for the store files [default: a temporary directory].
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// GET throughput and latency of task reads over the admin API, on loopback.
    Http {
        /// Concurrent keep-alive connections.
        #[arg(long, default_value_t = 32)]
        connections: usize,
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Conflict detection over a shared state of many actions.
    Conflicts {
        #[arg(long, default_value_t = 100_000)]
        actions: usize,
        /// Repetitions to time (the median is reported).
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// What the built-in agent loop adds per tool call, against a local fake model.
    Agent {
        #[arg(long, default_value_t = 200)]
        tool_calls: usize,
        /// The tool is an MCP server's (over stdio), not a built-in one.
        #[arg(long)]
        mcp: bool,
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// What metering costs a turn, and `rein usage` over many recorded turns.
    Usage {
        #[arg(long, default_value_t = 1_000_000)]
        turns: usize,
        #[arg(long, default_value_t = 7)]
        runs: usize,
        /// Journal appends timed with and without a usage, each.
        #[arg(long, default_value_t = 1000)]
        appends: usize,
    },
    /// A minimal MCP server over stdio (`echo {text}`), for `agent --mcp`.
    #[command(hide = true)]
    McpEcho,
    /// The cost of a sandboxed command: `true` plainly and under bubblewrap.
    Sandbox {
        #[arg(long, default_value_t = 200)]
        runs: usize,
    },
    /// CPU, memory and files of a real `rein serve` with many idle SSE clients.
    Sse {
        #[arg(long, default_value_t = 1000)]
        clients: usize,
        /// How long the clients sit idle while the server's CPU is timed.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// How many times the clients come and go.
        #[arg(long, default_value_t = 1)]
        bursts: usize,
        /// The rein binary [default: the one beside rein-bench].
        #[arg(long)]
        rein: Option<std::path::PathBuf>,
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// From an editor's decision to the next update it gets from `rein acp`.
    Acp {
        #[arg(long, default_value_t = 50)]
        rounds: usize,
        /// The rein binary [default: the one beside rein-bench].
        #[arg(long)]
        rein: Option<std::path::PathBuf>,
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// rein on PostgreSQL: durable steps/s against the server's bare commit
    /// ceiling, and the fail-over of a killed node's tasks to another node.
    Postgres {
        /// A database to use (empty or rein's) [default: a throwaway local
        /// cluster the bench starts].
        #[arg(long)]
        url: Option<String>,
        #[arg(long, default_value_t = 100)]
        tasks: usize,
        #[arg(long, default_value_t = 100)]
        steps: usize,
        #[arg(long, default_value_t = 2000)]
        ceiling_commits: usize,
        /// Tasks in flight on the node that is killed (0 to skip the fail-over).
        #[arg(long, default_value_t = 100)]
        failover_tasks: usize,
        /// The nodes' lease (`rein serve --lease`).
        #[arg(long, default_value = "2s")]
        lease: String,
        /// Tasks in flight for the single node's take-over on SQLite, timed
        /// in the same run (0 to skip; `rein-bench takeover` runs it alone).
        #[arg(long, default_value_t = 1000)]
        takeover_tasks: usize,
        /// The rein binary [default: the one beside rein-bench].
        #[arg(long)]
        rein: Option<std::path::PathBuf>,
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// `rein serve` killed with tasks in flight: until it answers again, and
    /// until they all run again.
    Takeover {
        #[arg(long, default_value_t = 1000)]
        tasks: usize,
        /// The server's `--sandbox` (`none`: the time is rein's; `auto`,
        /// `bubblewrap`, `landlock`: a user's default, confinement included).
        #[arg(long, default_value = "none")]
        sandbox: String,
        /// The rein binary [default: the one beside rein-bench].
        #[arg(long)]
        rein: Option<std::path::PathBuf>,
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// The Control UI: the tasks page's server time over many stored tasks,
    /// and in Chromium, from a click on "approve" to the next step started.
    Ui {
        #[arg(long, default_value_t = 100_000)]
        tasks: usize,
        /// Requests timed per page.
        #[arg(long, default_value_t = 200)]
        requests: usize,
        /// Approve clicks timed in the browser (0: no browser).
        #[arg(long, default_value_t = 20)]
        clicks: usize,
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// From a goal's decomposition answer to its first step running.
    Goal {
        #[arg(long, default_value_t = 50)]
        steps: usize,
        #[arg(long, default_value_t = 20)]
        runs: usize,
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Decision-to-next-step latency, and memory with many tasks paused on approvals.
    Approvals {
        /// Decisions to time, one after another.
        #[arg(long, default_value_t = 200)]
        decisions: usize,
        /// Tasks to leave paused on an approval while measuring memory.
        #[arg(long, default_value_t = 10_000)]
        paused: usize,
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
}

/// `ask` (a person decides) then `next` (a no-op).
fn ask_then_next() -> TaskDecomposition {
    let ask = TaskStep {
        checkpoint: rein_protocol::CheckpointType::UserApproval,
        ..TaskStep::new("ask", StepAction::approval("Go on?", ""))
    };
    let next = TaskStep {
        depends_on: vec!["ask".into()],
        ..TaskStep::new("next", StepAction::Noop)
    };
    TaskDecomposition::new("approval bench", vec![ask, next])
}

/// A field of /proc/self/status in MiB (VmRSS now, VmHWM at its peak).
fn memory_mib(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

async fn approvals(
    decisions: usize,
    paused: usize,
    dir: &Path,
) -> anyhow::Result<serde_json::Value> {
    use rein_protocol::{ApprovalResponse, Decision, TaskChange};
    let store = Arc::new(SqliteStore::open(&dir.join("rein.db"))?);
    let engine = Arc::new(Engine::new(
        store,
        Arc::new(CommandExecutor::unsandboxed()),
        EngineConfig::new(dir.join("ws")),
    ));

    // Decision → next step: a runner waits in this process; time from the decision's
    // commit (decide returns) to the next step's checkpoint being entered (committed).
    let mut latencies = Vec::with_capacity(decisions);
    for _ in 0..decisions {
        let state = engine
            .create(CreateTask {
                plan: ask_then_next(),
                session_id: None,
                workspace: None,
                confined_to: None,
            })
            .await?;
        let mut events = engine.subscribe();
        let run = {
            let engine = engine.clone();
            let id = state.id().clone();
            tokio::spawn(async move { engine.run(&id, RunOptions::default()).await })
        };
        let request = loop {
            let event = events.recv().await?;
            if let TaskChange::HumanApprovalRequested { request } = event.change {
                break request;
            }
        };
        let mut next_cp = None;
        let response = ApprovalResponse {
            request_id: request.id.clone(),
            decision: Decision::Approve,
            selected_option: None,
            reason: None,
            decided_by: "bench".into(),
            delegate_to: None,
            decided_at: chrono::Utc::now(),
        };
        engine.decide(response).await?;
        let decided = Instant::now();
        loop {
            let event = events.recv().await?;
            match &event.change {
                TaskChange::CheckpointCreated { checkpoint }
                    if checkpoint.step_id.as_deref() == Some("next") =>
                {
                    next_cp = Some(checkpoint.id.clone());
                }
                TaskChange::CheckpointEntered { checkpoint_id }
                    if Some(checkpoint_id) == next_cp.as_ref() =>
                {
                    latencies.push(decided.elapsed());
                    break;
                }
                _ => {}
            }
        }
        let done = run.await??;
        anyhow::ensure!(
            done.status() == TaskStatus::Completed,
            "a task ended {}",
            done.status()
        );
    }
    latencies.sort();

    // Memory: many tasks paused on a person, each run until it pauses.
    let rss_before = memory_mib("VmRSS:");
    let started = Instant::now();
    let mut runs = tokio::task::JoinSet::new();
    for _ in 0..paused {
        let state = engine
            .create(CreateTask {
                plan: ask_then_next(),
                session_id: None,
                workspace: None,
                confined_to: None,
            })
            .await?;
        let engine = engine.clone();
        runs.spawn(async move {
            engine
                .run(
                    state.id(),
                    RunOptions {
                        no_wait: true,
                        ..RunOptions::default()
                    },
                )
                .await
        });
        // Keep a bounded number of runs in flight, as a server taking up tasks would.
        while runs.len() >= 256 {
            let state = runs
                .join_next()
                .await
                .ok_or_else(|| anyhow::anyhow!("no run"))???;
            anyhow::ensure!(
                state.status() == TaskStatus::Paused,
                "a task ended {}",
                state.status()
            );
        }
    }
    while let Some(done) = runs.join_next().await {
        let state = done??;
        anyhow::ensure!(
            state.status() == TaskStatus::Paused,
            "a task ended {}",
            state.status()
        );
    }
    let pausing_s = started.elapsed().as_secs_f64();
    let waiting = engine
        .store()
        .list_approvals(&rein_core::store::ApprovalFilter {
            status: Some(rein_protocol::ApprovalStatus::Pending),
            limit: Some(1),
            ..Default::default()
        })
        .await?;
    anyhow::ensure!(!waiting.is_empty(), "no request is pending");
    let metrics = engine.metrics().await?;
    Ok(serde_json::json!({
        "bench": "approvals",
        "decisions": decisions,
        "decision_to_next_step_p50_ms": (percentile(&latencies, 0.50) * 1000.0).round() / 1000.0,
        "decision_to_next_step_p99_ms": (percentile(&latencies, 0.99) * 1000.0).round() / 1000.0,
        "paused_tasks": metrics.tasks.paused,
        "pending_requests": metrics.human_loop.pending,
        "pausing_s": (pausing_s * 100.0).round() / 100.0,
        "rss_mib_before": rss_before.map(|v| v.round()),
        "rss_mib_with_paused": memory_mib("VmRSS:").map(|v| v.round()),
        "peak_rss_mib": memory_mib("VmHWM:").map(|v| v.round()),
    }))
}

/// Reads one HTTP/1.1 response from a keep-alive connection; its status.
async fn read_response(
    reader: &mut tokio::io::BufReader<tokio::net::tcp::OwnedReadHalf>,
) -> anyhow::Result<u16> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt};
    let mut line = String::new();
    reader.read_line(&mut line).await?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("no status line"))?
        .parse()?;
    let mut length = 0usize;
    loop {
        line.clear();
        reader.read_line(&mut line).await?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse()?;
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).await?;
    Ok(status)
}

async fn http(connections: usize, seconds: u64, dir: &Path) -> anyhow::Result<serde_json::Value> {
    use tokio::io::AsyncWriteExt;
    let store = Arc::new(SqliteStore::open(&dir.join("rein.db"))?);
    let engine = Arc::new(Engine::new(
        store,
        Arc::new(CommandExecutor::unsandboxed()),
        EngineConfig::new(dir.join("ws")),
    ));
    let state = engine
        .create(CreateTask {
            plan: chain(20),
            session_id: None,
            workspace: None,
            confined_to: None,
        })
        .await?;
    engine.run(state.id(), RunOptions::default()).await?;
    let token = "bench-token-0123456";
    let auth = rein_server::Auth::new(vec![rein_server::TokenEntry {
        name: "bench".into(),
        role: rein_server::Role::Viewer,
        sha256: rein_server::auth::hash_token(token),
    }]);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let app = rein_server::AppState::new(engine, auth, shutdown.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(rein_server::serve(listener, app));
    let request = format!(
        "GET /admin/tasks/{} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n",
        state.id()
    );
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let request = request.clone();
        clients.spawn(async move {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let (read, mut write) = stream.into_split();
            let mut reader = tokio::io::BufReader::new(read);
            let mut latencies = Vec::new();
            let mut errors = 0u64;
            while Instant::now() < until {
                let sent = Instant::now();
                write.write_all(request.as_bytes()).await?;
                let status = read_response(&mut reader).await?;
                latencies.push(sent.elapsed());
                if status != 200 {
                    errors += 1;
                }
            }
            anyhow::Ok((latencies, errors))
        });
    }
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut errors = 0;
    while let Some(done) = clients.join_next().await {
        let (l, e) = done??;
        latencies.extend(l);
        errors += e;
    }
    let elapsed = started.elapsed().as_secs_f64();
    shutdown.cancel();
    let _ = server.await;
    latencies.sort();
    Ok(serde_json::json!({
        "bench": "http",
        "route": "GET /admin/tasks/{id} (a 20-step task)",
        "connections": connections,
        "requests": latencies.len(),
        "non_200": errors,
        "requests_per_s": (latencies.len() as f64 / elapsed).round(),
        "p50_ms": (percentile(&latencies, 0.50) * 1000.0).round() / 1000.0,
        "p99_ms": (percentile(&latencies, 0.99) * 1000.0).round() / 1000.0,
    }))
}

/// A chain of `n` no-op steps, each depending on the one before.
/// `tasks` new tasks, each a [`chain`] of `steps`.
async fn chains(
    engine: &Engine,
    tasks: usize,
    steps: usize,
) -> anyhow::Result<Vec<rein_protocol::TaskId>> {
    let mut ids = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        let created = engine
            .create(CreateTask {
                plan: chain(steps),
                session_id: None,
                workspace: None,
                confined_to: None,
            })
            .await?;
        ids.push(created.id().clone());
    }
    Ok(ids)
}

/// Runs every task of `ids` at once; an error unless all complete.
async fn run_all(engine: &Arc<Engine>, ids: Vec<rein_protocol::TaskId>) -> anyhow::Result<()> {
    let mut runs = tokio::task::JoinSet::new();
    for id in ids {
        let engine = Arc::clone(engine);
        runs.spawn(async move { engine.run(&id, RunOptions::default()).await });
    }
    while let Some(done) = runs.join_next().await {
        let state = done??;
        anyhow::ensure!(
            state.status() == TaskStatus::Completed,
            "a task ended {}",
            state.status()
        );
    }
    Ok(())
}

fn chain(n: usize) -> TaskDecomposition {
    let steps = (0..n)
        .map(|i| TaskStep {
            depends_on: if i == 0 {
                vec![]
            } else {
                vec![format!("s{}", i - 1)]
            },
            idempotent: true,
            ..TaskStep::new(format!("s{i}"), StepAction::Noop)
        })
        .collect();
    TaskDecomposition::new("bench", steps)
}

/// A shared state of `n` actions shaped like real work, with the same density
/// of overlap at every size (a bigger state spans more modules, not more
/// writers per file): `n / 20` modules of about 20 files; each action writes a
/// file of its own, one in 100 also one of the `n / 200` `mod.rs` files (two
/// writers each), one in 1,000 a whole module directory; each reads one file
/// pinned by a version dependency, and one in 10 states an assumption (one of
/// `n / 1000` keys, three values each).
fn busy_state(n: usize) -> anyhow::Result<rein_protocol::SharedHarnessState> {
    let mut actions = Vec::with_capacity(n);
    let modules = (n / 20).max(1);
    let mod_files = (n / 200).max(1);
    let keys = (n / 1000).max(1);
    for i in 0..n {
        let module = i % modules;
        let mut write =
            vec![serde_json::json!({ "kind": "file", "path": format!("src/m{module}/f{i}.rs") })];
        if i % 100 == 0 {
            write.push(
                serde_json::json!({ "kind": "file", "path": format!("src/m{}/mod.rs", (i / 100) % mod_files) }),
            );
        }
        if i % 1000 == 0 {
            write.push(serde_json::json!({ "kind": "directory", "path": format!("src/m{}", (module + 1) % modules) }));
        }
        let read = serde_json::json!({ "kind": "file", "path": format!("src/m{}/f{}.rs", (module + 7) % modules, i / 3) });
        let mut action = serde_json::json!({
            "id": format!("a{i}"), "participantId": format!("p{}", i % 20),
            "title": format!("change {i}"), "writeSet": write, "readSet": [read.clone()],
            "versionDependencies": [{ "id": format!("v{i}"), "resource": read }],
        });
        if i % 10 == 0 {
            action["assumptions"] = serde_json::json!([{ "id": format!("s{i}"), "key": format!("flag{}", i % keys), "value": format!("{}", i % 3) }]);
        }
        actions.push(action);
    }
    // Read from JSON text, as the store hands a state to the detector.
    let text =
        serde_json::json!({ "id": "shs_bench", "goal": "bench", "actions": actions }).to_string();
    Ok(serde_json::from_str(&text)?)
}

fn conflicts(n: usize, runs: usize) -> anyhow::Result<serde_json::Value> {
    let state = busy_state(n)?;
    let mut times = Vec::with_capacity(runs);
    let mut found = 0;
    for _ in 0..runs.max(1) {
        let started = Instant::now();
        found = rein_core::conflicts::detect(&state)?.len();
        times.push(started.elapsed());
    }
    let first = times[0];
    times.sort();
    Ok(serde_json::json!({
        "bench": "conflicts",
        "actions": n,
        "conflicts": found,
        "median_ms": (percentile(&times, 0.5) * 1000.0).round() / 1000.0,
        "max_ms": (percentile(&times, 1.0) * 1000.0).round() / 1000.0,
        "first_ms": (first.as_secs_f64() * 1e6).round() / 1000.0,
    }))
}

/// Times `runs` runs of `true`, plainly, under bubblewrap (forked from this
/// process, and started through the trampoline as `rein` starts it), and
/// under Landlock (through the `rein-confine` trampoline beside this binary,
/// when it is built: `cargo build --release -p rein-cli`), one of each in turn.
async fn sandbox(runs: usize) -> anyhow::Result<serde_json::Value> {
    let bwrap = rein_sandbox::Sandbox::probe().await?;
    let trampoline = std::env::current_exe()?.with_file_name("rein-confine");
    let (landlock, bwrap_started) = if trampoline.exists() {
        let t = rein_sandbox::Trampoline {
            program: trampoline,
            args: Vec::new(),
        };
        (
            Some(rein_sandbox::Sandbox::probe_landlock(t.clone()).await?),
            Some(bwrap.clone().started_by(t).await),
        )
    } else {
        (None, None)
    };
    let dir = tempfile::tempdir()?;
    let workspace = dir.path().canonicalize()?;
    let pinned = rein_sandbox::Pinned::pin(&workspace)?;
    let confinement = rein_sandbox::Confinement::default();
    let mut plain = Vec::with_capacity(runs);
    let mut boxed = Vec::with_capacity(runs);
    let mut locked = Vec::with_capacity(runs);
    let mut through = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let status = tokio::process::Command::new("sh")
            .args(["-c", "true"])
            .current_dir(&workspace)
            .status()
            .await?;
        anyhow::ensure!(status.success(), "plain `true` failed");
        plain.push(started.elapsed());
        for (sandbox, times) in [
            (Some(&bwrap), &mut boxed),
            (landlock.as_ref(), &mut locked),
            (bwrap_started.as_ref(), &mut through),
        ] {
            let Some(sandbox) = sandbox else { continue };
            let started = Instant::now();
            let status = sandbox
                .command(&pinned, "true", &[], &confinement)
                .status()
                .await?;
            anyhow::ensure!(status.success(), "sandboxed `true` failed");
            times.push(started.elapsed());
        }
    }
    plain.sort();
    boxed.sort();
    locked.sort();
    through.sort();
    let ms = |d: f64| (d * 1000.0).round() / 1000.0;
    let at = |times: &[Duration], p: f64| (!times.is_empty()).then(|| ms(percentile(times, p)));
    Ok(serde_json::json!({
        "bench": "sandbox",
        "runs": runs,
        "sandbox": bwrap.detail,
        "plain_p50_ms": ms(percentile(&plain, 0.50)),
        "plain_p99_ms": ms(percentile(&plain, 0.99)),
        "sandboxed_p50_ms": ms(percentile(&boxed, 0.50)),
        "sandboxed_p99_ms": ms(percentile(&boxed, 0.99)),
        "overhead_p50_ms": ms(percentile(&boxed, 0.50) - percentile(&plain, 0.50)),
        "started_through_trampoline_p50_ms": at(&through, 0.50),
        "started_through_trampoline_p99_ms": at(&through, 0.99),
        "landlock_p50_ms": at(&locked, 0.50),
        "landlock_p99_ms": at(&locked, 0.99),
    }))
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

fn mean_ms(samples: &[Duration]) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.iter().map(Duration::as_secs_f64).sum::<f64>() * 1000.0 / samples.len() as f64
}

/// Bare sequential commits of one small row each, WAL + synchronous=FULL.
struct Ceiling {
    conn: rusqlite::Connection,
    next: i64,
}

impl Ceiling {
    /// Opens the file and brings it to a steady state first: until SQLite's
    /// automatic checkpoint (at 1,000 WAL pages) has run once, every commit
    /// grows the WAL file, and growing a file costs its fsync more than
    /// overwriting it does. Measuring those commits would lower the ceiling.
    fn open(dir: &Path) -> anyhow::Result<Ceiling> {
        let conn = rusqlite::Connection::open(dir.join("ceiling.db"))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch("CREATE TABLE t (x INTEGER)")?;
        let mut ceiling = Ceiling { conn, next: 0 };
        ceiling.time(1_100)?;
        Ok(ceiling)
    }

    /// How long `commits` of them take.
    fn time(&mut self, commits: usize) -> anyhow::Result<Duration> {
        let started = Instant::now();
        for _ in 0..commits {
            self.conn.execute_batch("BEGIN")?;
            self.conn
                .execute("INSERT INTO t VALUES (?1)", [self.next])?;
            self.conn.execute_batch("COMMIT")?;
            self.next += 1;
        }
        Ok(started.elapsed())
    }
}

/// Commits per second over the two halves of a ceiling measured around a run.
fn per_s(commits: usize, took: Duration) -> f64 {
    commits as f64 / took.as_secs_f64().max(f64::MIN_POSITIVE)
}

/// Steps of the untimed task that warms a fresh store up: about 1,300 WAL
/// pages, past SQLite's automatic checkpoint (1,000 pages), after which the
/// log is overwritten in place rather than grown.
const WARM_UP_STEPS: usize = 300;

async fn steps(
    tasks: usize,
    steps: usize,
    ceiling_commits: usize,
    cold: bool,
    dir: &Path,
) -> anyhow::Result<serde_json::Value> {
    // Every commit request timed on its way through.
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let timed = Arc::clone(&latencies);
    let options = rein_store::WriterOptions {
        on_commit: Some(Arc::new(move |took| {
            if let Ok(mut l) = timed.lock() {
                l.push(took);
            }
        })),
        ..rein_store::WriterOptions::default()
    };
    let store = Arc::new(SqliteStore::open_with(&dir.join("rein.db"), options)?);
    let engine = Arc::new(Engine::new(
        store.clone(),
        Arc::new(CommandExecutor::unsandboxed()),
        EngineConfig::new(dir.join("ws")),
    ));
    // Until the write-ahead log has reached its working size, each commit
    // extends the file, and an fsync that extends a file also commits the
    // filesystem's metadata: on this kind of disk about twice the cost. That
    // is a one-off of a fresh store (about 1,000 WAL pages), so the run and the
    // ceiling are both timed past it, unless --cold asks for the fresh store.
    let warm_up = if cold { 0 } else { WARM_UP_STEPS };
    if warm_up > 0 {
        run_all(&engine, chains(&engine, 1, warm_up).await?).await?;
    }
    let ids = chains(&engine, tasks, steps).await?;
    // The ceiling is measured in two halves, just before the run and just
    // after it: the disk's speed drifts over seconds, and bracketing the run
    // averages the drift out instead of comparing against one side of it.
    let (first_half, second_half) = (ceiling_commits / 2, ceiling_commits - ceiling_commits / 2);
    let mut bare = (ceiling_commits > 0)
        .then(|| Ceiling::open(dir))
        .transpose()?;
    let ceiling_before = bare.as_mut().map(|c| c.time(first_half)).transpose()?;
    let before = store.stats();
    latencies
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clear();
    let started = Instant::now();
    run_all(&engine, ids).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let after = store.stats();
    let mut latencies = latencies
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    latencies.sort();
    let total = tasks * steps;
    let steps_per_s = total as f64 / elapsed;
    let ceiling_after = bare.as_mut().map(|c| c.time(second_half)).transpose()?;
    let (ceiling, halves) = match (ceiling_before, ceiling_after) {
        (Some(before), Some(after)) => (
            Some(per_s(ceiling_commits, before + after)),
            Some([
                per_s(first_half, before).round(),
                per_s(second_half, after).round(),
            ]),
        ),
        _ => (None, None),
    };
    Ok(serde_json::json!({
        "bench": "steps",
        "tasks": tasks,
        "steps_per_task": steps,
        "warm_up_steps": warm_up,
        "total_steps": total,
        "elapsed_s": (elapsed * 1000.0).round() / 1000.0,
        "steps_per_s": steps_per_s.round(),
        "commit_p50_ms": (percentile(&latencies, 0.50) * 1000.0).round() / 1000.0,
        "commit_p99_ms": (percentile(&latencies, 0.99) * 1000.0).round() / 1000.0,
        "commit_mean_ms": (mean_ms(&latencies) * 1000.0).round() / 1000.0,
        "commit_requests": latencies.len(),
        "sqlite_transactions": after.commits - before.commits,
        "transaction_mean_ms": ((after.busy_ns - before.busy_ns) as f64 / (after.commits - before.commits).max(1) as f64 / 1e3).round() / 1e3,
        "sqlite_ceiling_commits_per_s": ceiling.map(f64::round),
        "sqlite_ceiling_before_after": halves,
        "steps_per_s_over_ceiling": ceiling.map(|c| (steps_per_s / c * 1000.0).round() / 1000.0),
    }))
}

/// The figures of several runs as one: each number the median of the runs'
/// (the mean of the middle two for an even count), anything else only where
/// every run agrees, and every run's own figures under `runs`.
fn medians(each: Vec<serde_json::Value>) -> serde_json::Value {
    let mut line = serde_json::Map::new();
    if let Some(serde_json::Value::Object(first)) = each.first() {
        for (key, value) in first {
            let mut numbers: Vec<f64> = each.iter().filter_map(|r| r[key].as_f64()).collect();
            if each.iter().all(|r| r[key] == *value) {
                line.insert(key.clone(), value.clone());
            } else if numbers.len() == each.len() {
                numbers.sort_by(f64::total_cmp);
                let mid = numbers.len() / 2;
                let m = if numbers.len() % 2 == 0 {
                    (numbers[mid - 1] + numbers[mid]) / 2.0
                } else {
                    numbers[mid]
                };
                line.insert(
                    key.clone(),
                    serde_json::json!((m * 1000.0).round() / 1000.0),
                );
            }
        }
    }
    line.insert("runs".into(), serde_json::Value::Array(each));
    serde_json::Value::Object(line)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Bench::Steps {
            tasks,
            steps: n,
            ceiling_commits,
            cold,
            runs,
            dir,
        } => {
            let temp = tempfile::tempdir()?;
            let dir = dir.unwrap_or_else(|| temp.path().to_owned());
            std::fs::create_dir_all(&dir)?;
            let line = if runs == 1 {
                runtime.block_on(steps(tasks, n, ceiling_commits, cold, &dir))?
            } else {
                let mut each = Vec::new();
                for k in 1..=runs {
                    let run_dir = dir.join(format!("run-{k}"));
                    std::fs::create_dir_all(&run_dir)?;
                    let run = runtime.block_on(steps(tasks, n, ceiling_commits, cold, &run_dir))?;
                    eprintln!(
                        "run {k}/{runs}: {} steps/s, {} of the ceiling",
                        run["steps_per_s"], run["steps_per_s_over_ceiling"]
                    );
                    each.push(run);
                }
                medians(each)
            };
            println!("{line}");
        }
        Bench::Http {
            connections,
            seconds,
            dir,
        } => {
            let temp = tempfile::tempdir()?;
            let dir = dir.unwrap_or_else(|| temp.path().to_owned());
            std::fs::create_dir_all(&dir)?;
            let line = runtime.block_on(http(connections, seconds, &dir))?;
            println!("{line}");
        }
        Bench::Conflicts { actions, runs } => {
            println!("{}", conflicts(actions, runs)?);
        }
        Bench::Usage {
            turns,
            runs,
            appends,
        } => runtime.block_on(usage::run(turns, runs.max(1), appends.max(1)))?,
        Bench::Agent {
            tool_calls,
            mcp,
            dir,
        } => {
            let temp = tempfile::tempdir()?;
            let dir = dir.unwrap_or_else(|| temp.path().to_owned());
            std::fs::create_dir_all(&dir)?;
            println!(
                "{}",
                runtime.block_on(agent::agent(tool_calls.max(1), mcp, &dir))?
            );
        }
        Bench::McpEcho => agent::mcp_echo()?,
        Bench::Sandbox { runs } => {
            let line = runtime.block_on(sandbox(runs))?;
            println!("{line}");
        }
        Bench::Sse {
            clients,
            seconds,
            bursts,
            rein,
            dir,
        } => {
            let temp = tempfile::tempdir()?;
            let dir = dir.unwrap_or_else(|| temp.path().to_owned());
            std::fs::create_dir_all(&dir)?;
            println!(
                "{}",
                runtime.block_on(sse::sse(clients, seconds, bursts, rein, &dir))?
            );
        }
        Bench::Acp { rounds, rein, dir } => {
            let temp = tempfile::tempdir()?;
            let dir = dir.unwrap_or_else(|| temp.path().to_owned());
            std::fs::create_dir_all(&dir)?;
            println!("{}", runtime.block_on(acp::acp(rounds.max(1), rein, &dir))?);
        }
        Bench::Ui {
            tasks,
            requests,
            clicks,
            dir,
        } => {
            let temp = tempfile::tempdir()?;
            let dir = dir.unwrap_or_else(|| temp.path().to_owned());
            std::fs::create_dir_all(&dir)?;
            println!(
                "{}",
                runtime.block_on(ui::ui(tasks, requests.max(1), clicks, &dir))?
            );
        }
        Bench::Postgres {
            url,
            tasks,
            steps,
            ceiling_commits,
            failover_tasks,
            lease,
            takeover_tasks,
            rein,
            dir,
        } => {
            let temp = tempfile::tempdir()?;
            let dir = dir.unwrap_or_else(|| temp.path().to_owned());
            std::fs::create_dir_all(&dir)?;
            let line = runtime.block_on(postgres::postgres(
                url,
                tasks,
                steps,
                ceiling_commits,
                failover_tasks,
                &lease,
                takeover_tasks,
                rein,
                &dir,
            ))?;
            println!("{line}");
        }
        Bench::Takeover {
            tasks,
            sandbox,
            rein,
            dir,
        } => {
            let temp = tempfile::tempdir()?;
            let dir = dir.unwrap_or_else(|| temp.path().to_owned());
            std::fs::create_dir_all(&dir)?;
            println!(
                "{}",
                runtime.block_on(takeover::takeover(tasks.max(1), &sandbox, rein, &dir))?
            );
        }
        Bench::Goal { steps, runs, dir } => {
            let temp = tempfile::tempdir()?;
            let dir = dir.unwrap_or_else(|| temp.path().to_owned());
            std::fs::create_dir_all(&dir)?;
            let line = runtime.block_on(goal::goal(steps.max(1), runs.max(1), &dir))?;
            println!("{line}");
        }
        Bench::Approvals {
            decisions,
            paused,
            dir,
        } => {
            let temp = tempfile::tempdir()?;
            let dir = dir.unwrap_or_else(|| temp.path().to_owned());
            std::fs::create_dir_all(&dir)?;
            let line = runtime.block_on(approvals(decisions, paused, &dir))?;
            println!("{line}");
        }
    }
    Ok(())
}
