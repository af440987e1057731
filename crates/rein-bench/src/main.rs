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
//! Beside the ceiling, the same disk's bare commits shaped like a step's
//! (`sqlite_shape_commits_per_s`: as many rows per commit, of the same size,
//! into a table laid out like the event log) split the gap in two: what the
//! shape of a step's writes costs the disk, and what the engine adds to it.
//! `--runs K` repeats the whole measurement K times, each on a fresh store, and
//! prints the median of each figure, with every run's figures beside them.
//!
//! `rein-bench approvals --decisions N --paused M` times decision → next step (p50,
//! p99) and reports memory with M tasks paused on approvals.
//!
//! `rein-bench http --connections N --seconds S`: GET throughput and latency of
//! task reads over the admin API on loopback, N kept-alive connections.
//!
//! `rein-bench ui` times the Control UI: the server's time for the tasks page,
//! then Chromium's for the pages a person uses.
//!
//! `rein-bench goal --steps N` times a decomposition's answer to the first step
//! running.
//!
//! Each benchmark is the module of its name.
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
//! `rein-bench saved` times keeping a workspace at a step boundary: 10,000
//! files with one changed, 1 GiB unchanged, and the store's growth over
//! 1,000 steps that each change one 1 KiB file.
//!
//! `rein-bench fork` times a fork of a task of 100,000 events with a 100 MiB
//! workspace, from asking to its first step running.
//!
//! `rein-bench sse --clients N` measures what N idle event-stream clients cost a
//! real `rein serve` process: CPU while they idle, memory, files and threads
//! before, with and after them.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod acp;
mod agent;
mod approvals;
mod conflicts;
mod fork;
mod goal;
mod http;
mod postgres;
mod sandbox;
mod saved;
mod sse;
mod steps;
mod takeover;
mod ui;
mod usage;

use approvals::*;
use conflicts::*;
use http::*;
use sandbox::*;
use steps::*;

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
    /// What keeping a workspace at a step boundary costs and stores.
    Saved {
        /// Small files in the workspace where one changes between saves.
        #[arg(long, default_value_t = 10_000)]
        files: usize,
        /// MiB of the workspace saved again unchanged.
        #[arg(long, default_value_t = 1024)]
        large_mb: u64,
        /// Saves, each after one 1 KiB file changed, for the store's growth.
        #[arg(long, default_value_t = 1000)]
        steps: usize,
        /// Saves timed for each median.
        #[arg(long, default_value_t = 21)]
        saves: usize,
        /// Directory for the workspaces and the keepers [default: a temporary directory].
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// How long a fork of a long task with a large workspace takes to run.
    Fork {
        /// Events in the source task's log.
        #[arg(long, default_value_t = 100_000)]
        events: usize,
        /// MiB of its workspace (in 1 MiB files).
        #[arg(long, default_value_t = 100)]
        workspace_mb: u64,
        /// Small files beside them.
        #[arg(long, default_value_t = 1000)]
        files: usize,
        /// Forks timed.
        #[arg(long, default_value_t = 5)]
        forks: usize,
        /// Directory for the store, the keeper and the workspaces [default: a temporary directory].
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
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

/// An engine over `store` that runs commands unsandboxed, with its
/// workspaces under `dir/ws`: what most benchmarks time.
fn command_engine(store: Arc<dyn rein_core::Store>, dir: &Path) -> Arc<Engine> {
    Arc::new(Engine::new(
        store,
        Arc::new(CommandExecutor::unsandboxed()),
        EngineConfig::new(dir.join("ws")),
    ))
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
        Bench::Saved {
            files,
            large_mb,
            steps,
            saves,
            dir,
        } => {
            let temp = tempfile::tempdir()?;
            let dir = dir.unwrap_or_else(|| temp.path().to_owned());
            std::fs::create_dir_all(&dir)?;
            let line = runtime.block_on(saved::run(files, large_mb, steps, saves.max(1), &dir))?;
            println!("{line}");
        }
        Bench::Fork {
            events,
            workspace_mb,
            files,
            forks,
            dir,
        } => {
            let temp = tempfile::tempdir()?;
            let dir = dir.unwrap_or_else(|| temp.path().to_owned());
            std::fs::create_dir_all(&dir)?;
            let line =
                runtime.block_on(fork::run(events, workspace_mb, files, forks.max(1), &dir))?;
            println!("{line}");
        }
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
