//! `rein tasks …`: list, show, events, follow, resume, pause, abort, snapshots,
//! restore, delete.

use crate::output::{say, say_raw};

use rein_core::store::TaskFilter;
use rein_protocol::{HarnessEvent, TaskId, TaskStatus, Timestamp};

use crate::backend::{Backend, Control};
use crate::cli::{ListArgs, TasksCommand};
use crate::client::{Client, Ended};
use crate::commands::{Target, parse_snapshot_id, parse_task_id, print_json, run};
use crate::exit::{self, UsageError};
use crate::render::{self, CheckpointIndex};

pub async fn dispatch(target: &Target, cmd: TasksCommand) -> anyhow::Result<u8> {
    match cmd {
        TasksCommand::Resume(args) => return run::resume(target, args).await,
        TasksCommand::Fork(args) => return super::fork::fork(target, args).await,
        TasksCommand::Retry(args) => return super::fork::retry(target, args).await,
        _ => {}
    }
    let backend = if matches!(
        cmd,
        TasksCommand::Abort { .. } | TasksCommand::Delete { .. }
    ) {
        target.open_ending(4)?
    } else {
        target.open(4)?
    };
    let engine = &backend;
    match cmd {
        TasksCommand::Resume(_) | TasksCommand::Fork(_) | TasksCommand::Retry(_) => {
            Ok(exit::SUCCESS)
        }
        TasksCommand::List(args) => list(&backend, args).await,
        TasksCommand::Show { id, json } => {
            let state = engine.get(&parse_task_id(&id)?).await?;
            if json {
                print_json(&state)?;
            } else {
                say_raw!("{}", render::task_details(&state));
                let forks = engine
                    .list(&TaskFilter {
                        forked_from: Some(state.id().clone()),
                        limit: Some(500),
                        ..TaskFilter::default()
                    })
                    .await?;
                for fork in &forks.items {
                    let at = fork.forked_from.as_ref().map_or(0, |f| f.seq);
                    say!("  fork {} from event {at} ({})", fork.id, fork.status);
                }
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
        TasksCommand::History { id, json } => {
            let history = engine.history(&parse_task_id(&id)?).await?;
            if json {
                print_json(&history)?;
            } else {
                say_raw!("{}", render::history_table(&history));
            }
            Ok(exit::SUCCESS)
        }
        TasksCommand::Follow { id, after, json } => {
            let id = parse_task_id(&id)?;
            follow(backend.client(), &id, after, json).await
        }
        TasksCommand::Pause { id, reason } => {
            let id = parse_task_id(&id)?;
            match engine
                .control(&id, false, &crate::commands::actor(None), &reason)
                .await?
            {
                Control::Applied => say!("task {id} paused"),
                Control::Requested { pid } => say!(
                    "pause requested: the runner (pid {pid}) starts no more steps and pauses once running ones finish"
                ),
                Control::Already => say!("task {id} is already paused"),
            }
            Ok(exit::SUCCESS)
        }
        TasksCommand::Abort { id, reason } => {
            let id = parse_task_id(&id)?;
            match engine
                .control(&id, true, &crate::commands::actor(None), &reason)
                .await?
            {
                Control::Applied => say!("task {id} cancelled"),
                Control::Requested { pid } => say!(
                    "abort requested: the runner (pid {pid}) stops running steps and cancels the task"
                ),
                Control::Already => say!("task {id} is already cancelled"),
            }
            Ok(exit::SUCCESS)
        }
        TasksCommand::Snapshot { id, json } => {
            let snapshot = engine.snapshot(&parse_task_id(&id)?).await?;
            if json {
                print_json(&snapshot)?;
            } else {
                say!(
                    "snapshot {} of task {} at event {} ({})",
                    snapshot.id,
                    snapshot.task_id,
                    snapshot.seq,
                    snapshot.status
                );
            }
            Ok(exit::SUCCESS)
        }
        TasksCommand::Snapshots { id, json } => {
            let id = parse_task_id(&id)?;
            let snapshots = engine.snapshots(&id).await?;
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
pub(crate) fn parse_time(flag: &str, value: &str) -> anyhow::Result<Timestamp> {
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

async fn list(backend: &Backend, args: ListArgs) -> anyhow::Result<u8> {
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
        forked_from: args.forked_from.as_deref().map(parse_task_id).transpose()?,
    };
    let page = backend.list(&filter).await?;
    if args.json {
        // The page as the API answers it: the cursor `null` on the last page.
        print_json(&page)?;
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
/// One followed event: its JSON line, or its description.
fn print_followed(index: &mut CheckpointIndex, e: &HarnessEvent, json: bool) -> anyhow::Result<()> {
    index.observe(e);
    if json {
        say!("{}", serde_json::to_string(e)?);
    } else if let Some(line) = render::describe(e, index) {
        say!("{}", render::timed(e, &line));
    }
    Ok(())
}

/// `rein tasks follow`: the task's event stream (a server's, or the same
/// route served here over the store), until the task finishes (the stream
/// ends), pauses, or its runner is gone (the stream says `stalled`).
async fn follow(client: &Client, id: &TaskId, after: u64, json: bool) -> anyhow::Result<u8> {
    let mut index = CheckpointIndex::from_state(&client.task(id).await?);
    let never = tokio_util::sync::CancellationToken::new();
    let (ended, state) = client
        .watch(id, after, &never, |e| {
            print_followed(&mut index, e, json)?;
            Ok(false)
        })
        .await?;
    if ended == Ended::Stalled && !json {
        say!("the task's runner is gone; resume it with: rein tasks resume {id}");
    }
    Ok(exit::for_status(state.status()))
}
