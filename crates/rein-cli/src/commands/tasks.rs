//! `rein tasks …`: list, show, events, follow, resume, pause, abort, snapshots,
//! restore, delete.

use crate::output::{say, say_raw, shout};
use std::path::PathBuf;
use std::time::Duration;

use rein_core::ControlOutcome;
use rein_core::process::runner_alive;
use rein_core::store::TaskFilter;
use rein_protocol::{TaskStatus, Timestamp};

use crate::cli::{ListArgs, TasksCommand};
use crate::commands::{Context, parse_snapshot_id, parse_task_id, print_json, run};
use crate::exit::{self, UsageError};
use crate::render::{self, CheckpointIndex};

/// How often `follow` looks for new events written by another process.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

pub async fn dispatch(data_dir: Option<PathBuf>, cmd: TasksCommand) -> anyhow::Result<u8> {
    if let TasksCommand::Resume(args) = cmd {
        return run::resume(data_dir, args).await;
    }
    let ctx = Context::open(data_dir, 4)?;
    let engine = &ctx.engine;
    match cmd {
        TasksCommand::Resume(_) => Ok(exit::SUCCESS),
        TasksCommand::List(args) => list(&ctx, args).await,
        TasksCommand::Show { id, json } => {
            let state = engine.get(&parse_task_id(&id)?).await?;
            if json {
                print_json(&state)?;
            } else {
                say_raw!("{}", render::task_details(&state));
            }
            Ok(exit::SUCCESS)
        }
        TasksCommand::Events { id, after, json } => {
            let id = parse_task_id(&id)?;
            let state = engine.get(&id).await?;
            let mut all = Vec::new();
            let mut cursor = after;
            loop {
                let page = engine.events(&id, cursor, 1000).await?;
                let Some(last) = page.last() else { break };
                cursor = last.seq;
                all.extend(page);
            }
            if json {
                print_json(&all)?;
            } else {
                let mut index = CheckpointIndex::from_state(&state);
                for e in &all {
                    index.observe(e);
                    let line = render::describe(e, &index)
                        .unwrap_or_else(|| e.event_type().as_str().to_owned());
                    say!("{:>5} {}", e.seq, render::timed(e, &line));
                }
            }
            Ok(exit::SUCCESS)
        }
        TasksCommand::Follow { id, after, json } => follow(&ctx, &id, after, json).await,
        TasksCommand::Pause { id, reason } => {
            let id = parse_task_id(&id)?;
            match engine.pause(&id, "cli", &reason).await? {
                ControlOutcome::Applied(_) => say!("task {id} paused"),
                ControlOutcome::Requested { runner } => say!(
                    "pause requested: the runner (pid {}) starts no more steps and pauses once running ones finish",
                    runner.pid
                ),
                ControlOutcome::AlreadyThere(_) => say!("task {id} is already paused"),
            }
            Ok(exit::SUCCESS)
        }
        TasksCommand::Abort { id, reason } => {
            let id = parse_task_id(&id)?;
            match engine.abort(&id, "cli", &reason).await? {
                ControlOutcome::Applied(_) => say!("task {id} cancelled"),
                ControlOutcome::Requested { runner } => say!(
                    "abort requested: the runner (pid {}) stops running steps and cancels the task",
                    runner.pid
                ),
                ControlOutcome::AlreadyThere(_) => say!("task {id} is already cancelled"),
            }
            Ok(exit::SUCCESS)
        }
        TasksCommand::Snapshot { id, json } => {
            let snapshot = engine.snapshot(&parse_task_id(&id)?).await?;
            if json {
                print_json(&serde_json::json!({
                    "id": snapshot.id,
                    "task_id": snapshot.task_id,
                    "seq": snapshot.seq,
                    "created_at": snapshot.created_at,
                    "status": snapshot.state.status(),
                }))?;
            } else {
                say!(
                    "snapshot {} of task {} at event {} ({})",
                    snapshot.id,
                    snapshot.task_id,
                    snapshot.seq,
                    snapshot.state.status()
                );
            }
            Ok(exit::SUCCESS)
        }
        TasksCommand::Snapshots { id, json } => {
            let id = parse_task_id(&id)?;
            engine.get(&id).await?;
            let snapshots = engine.store().list_snapshots(&id).await?;
            if json {
                print_json(&snapshots)?;
            } else if snapshots.is_empty() {
                say!("task {id} has no snapshots; take one with: rein tasks snapshot {id}");
            } else {
                for s in snapshots {
                    say!(
                        "{}  event {:<6} {}",
                        s.id,
                        s.seq,
                        render::short_time(&s.created_at)
                    );
                }
            }
            Ok(exit::SUCCESS)
        }
        TasksCommand::Restore { snapshot, json } => {
            let state = engine.restore(&parse_snapshot_id(&snapshot)?).await?;
            if json {
                print_json(&state)?;
            } else {
                say!(
                    "task {} restored from snapshot {snapshot} ({}); the original task is unchanged",
                    state.id(),
                    state.status()
                );
                if matches!(state.status(), TaskStatus::Paused | TaskStatus::Pending) {
                    say!("  resume with: rein tasks resume {}", state.id());
                }
            }
            Ok(exit::SUCCESS)
        }
        TasksCommand::Delete { id } => {
            let id = parse_task_id(&id)?;
            engine.delete(&id).await?;
            say!("task {id} deleted with its log and snapshots");
            Ok(exit::SUCCESS)
        }
    }
}

/// An RFC 3339 time, or a duration meaning that long ago.
fn parse_time(flag: &str, value: &str) -> anyhow::Result<Timestamp> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(value) {
        return Ok(t.to_utc());
    }
    match humantime::parse_duration(value) {
        Ok(d) => Ok(chrono::Utc::now() - chrono::Duration::from_std(d)?),
        Err(_) => Err(UsageError(format!(
            "{flag} `{value}` is neither an RFC 3339 time (2026-01-31T12:00:00Z) nor a duration (2h, 30m)"
        ))
        .into()),
    }
}

async fn list(ctx: &Context, args: ListArgs) -> anyhow::Result<u8> {
    let status = match &args.status {
        Some(s) => Some(TaskStatus::parse(s).ok_or_else(|| {
            let allowed: Vec<&str> = TaskStatus::ALL.iter().map(|s| s.as_str()).collect();
            UsageError(format!(
                "unknown status `{s}`; use one of {}",
                allowed.join(", ")
            ))
        })?),
        None => None,
    };
    let filter = TaskFilter {
        session_id: args.session,
        status,
        created_from: args
            .since
            .as_deref()
            .map(|v| parse_time("--since", v))
            .transpose()?,
        created_to: args
            .until
            .as_deref()
            .map(|v| parse_time("--until", v))
            .transpose()?,
        limit: Some(args.limit as usize),
        cursor: args.cursor,
    };
    let page = ctx.engine.list(&filter).await?;
    if args.json {
        print_json(&page.items)?;
        if let Some(c) = &page.next_cursor {
            shout!("more tasks: --cursor {c}");
        }
    } else if page.items.is_empty() {
        say!("no tasks");
    } else {
        say_raw!("{}", render::task_table(&page.items));
        if let Some(c) = &page.next_cursor {
            say!("more: rein tasks list --cursor {c}");
        }
    }
    Ok(exit::SUCCESS)
}

/// Prints events as another process records them, until the task finishes, pauses,
/// or its runner is gone.
async fn follow(ctx: &Context, id: &str, after: u64, json: bool) -> anyhow::Result<u8> {
    let id = parse_task_id(id)?;
    let engine = &ctx.engine;
    let mut index = CheckpointIndex::from_state(&engine.get(&id).await?);
    let mut seen = after;
    loop {
        // The state first: every event up to its last_seq is already in the log.
        let head = engine
            .store()
            .load_summary(&id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("task {id} was deleted while being followed"))?;
        loop {
            let events = engine.events(&id, seen, 500).await?;
            for e in &events {
                index.observe(e);
                if json {
                    say!("{}", serde_json::to_string(e)?);
                } else if let Some(line) = render::describe(e, &index) {
                    say!("{}", render::timed(e, &line));
                }
                seen = e.seq;
            }
            if events.len() < 500 {
                break;
            }
        }
        if seen >= head.last_seq {
            match head.status {
                s if s.is_terminal() => return Ok(exit::for_status(s)),
                TaskStatus::Paused => return Ok(exit::WAITING),
                TaskStatus::InProgress
                    if head.runner.as_ref().is_some_and(|r| !runner_alive(r)) =>
                {
                    if !json {
                        say!("the task's runner is gone; resume it with: rein tasks resume {id}");
                    }
                    return Ok(exit::WAITING);
                }
                _ => {}
            }
        }
        tokio::time::sleep(FOLLOW_POLL).await;
    }
}
