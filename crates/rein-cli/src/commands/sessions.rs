//! `rein sessions list | show | reset | pin`: the agent sessions of tasks.
//!
//! `reset` and `pin` reach the harnesses of the plugins named with `--plugin`
//! (a session a plugin's harness served is reset through that plugin); with
//! `--url`, the server's.

use rein_protocol::AgentSessionInfo;
use rein_protocol::api::{DelegateSessionRequest, PinRequest, SessionQuery};
use rein_protocol::endpoints;
use serde_json::json;

use crate::cli::SessionsCommand;
use crate::commands::{
    Context, Target, actor, parse_session_id, print_json, print_page, task_flag,
};
use crate::exit;
use crate::output::say;

pub async fn dispatch(target: &Target, cmd: SessionsCommand) -> anyhow::Result<u8> {
    // Reading sessions needs no runtime; resetting and pinning one go
    // through the harnesses of the plugins named with `--plugin`.
    let reader = || target.open(1);
    let backend = || target.open_with_harnesses();
    match cmd {
        SessionsCommand::List {
            task,
            status,
            parent,
            limit,
            cursor,
            json,
        } => {
            let task = task_flag(task.as_deref())?;
            let query = SessionQuery {
                task_id: task.as_ref().map(ToString::to_string),
                status,
                parent,
                limit: Some(limit as usize),
                cursor,
            };
            let page = reader()?
                .client()
                .call::<endpoints::ListAgentSessions>(&(), &query, &())
                .await?;
            print_page(
                &page,
                json,
                "sessions",
                "rein sessions list",
                &[
                    ("ID", 30),
                    ("STATUS", 7),
                    ("RUNTIME", 10),
                    ("TURNS", -5),
                    ("TASK", 31),
                    ("NAME", 0),
                ],
                |s| {
                    vec![
                        s.id.to_string(),
                        s.status.as_str().to_owned(),
                        s.pinned_runtime
                            .as_deref()
                            .map(|p| format!("{p}*"))
                            .or_else(|| s.runtime.clone())
                            .unwrap_or_else(|| "-".into()),
                        s.turns.to_string(),
                        s.task_id.to_string(),
                        s.name.clone(),
                    ]
                },
            )?;
            Ok(exit::SUCCESS)
        }
        SessionsCommand::Show { id, json } => {
            let shown = reader()?
                .client()
                .call::<endpoints::ShowAgentSession>(&parse_session_id(&id)?, &(), &())
                .await?;
            let children = shown.children.unwrap_or_default();
            if json {
                print_json(&json!({ "session": shown.session, "children": children }))?;
            } else {
                show(&shown.session, &children);
            }
            Ok(exit::SUCCESS)
        }
        SessionsCommand::Reset { id, json } => {
            let session = backend()?
                .client()
                .call::<endpoints::ResetAgentSession>(&parse_session_id(&id)?, &(), &())
                .await?
                .session;
            if json {
                print_json(&session)?;
            } else {
                say!(
                    "{} was reset: generation {}, its conversation starts over",
                    session.id,
                    session.generation
                );
            }
            Ok(exit::SUCCESS)
        }
        SessionsCommand::Compact { id, json } => compact(target, &id, json).await,
        SessionsCommand::Pin {
            id,
            runtime,
            unpin: _,
            json,
        } => {
            let session = backend()?
                .client()
                .call::<endpoints::PinAgentSession>(
                    &parse_session_id(&id)?,
                    &(),
                    &PinRequest { runtime },
                )
                .await?
                .session;
            if json {
                print_json(&session)?;
            } else {
                match &session.pinned_runtime {
                    Some(r) => say!("{} is pinned to {r}", session.id),
                    None => say!("{} is not pinned", session.id),
                }
            }
            Ok(exit::SUCCESS)
        }
        SessionsCommand::Delegate {
            id,
            to,
            take_back: _,
            session_key,
            store_path,
            session_id,
            json,
        } => {
            let session = backend()?
                .client()
                .call::<endpoints::DelegateAgentSession>(
                    &parse_session_id(&id)?,
                    &(),
                    &DelegateSessionRequest {
                        plugin: to,
                        session_key,
                        store_path,
                        session_id,
                    },
                )
                .await?
                .session;
            if json {
                print_json(&session)?;
            } else {
                match &session.delegated_execution {
                    Some(d) => say!(
                        "{} is handed to plugin {} (harness {}), run as {}'s on {}",
                        session.id,
                        d.plugin,
                        d.harness,
                        d.owner,
                        d.owner_harness
                    ),
                    None => say!("{} is run by its owner", session.id),
                }
            }
            Ok(exit::SUCCESS)
        }
    }
}

/// `rein sessions compact`: the session's model asked from here.
async fn compact(target: &Target, id: &str, json: bool) -> anyhow::Result<u8> {
    if target.url.is_some() {
        return Err(crate::exit::UsageError(
            "rein sessions compact asks the session's model from here, on the store itself: run it where the store is, without --url (REIN_URL)".into(),
        )
        .into());
    }
    let sessions = Context::open(target.place(), 1)?.engine.sessions();
    let done = rein_runtimes::context::compact_session(
        &sessions,
        id.trim(),
        &target.providers,
        &target.models,
        &actor(None),
    )
    .await
    .map_err(|e| anyhow::anyhow!(e))?;
    if json {
        print_json(&done)?;
    } else if done.compacted {
        say!(
            "{} was compacted by {}: {} messages summarised, about {} → {} tokens",
            done.session,
            done.model,
            done.messages,
            done.tokens_before,
            done.tokens_after
        );
    } else {
        say!(
            "{} has nothing older to compact (about {} tokens)",
            done.session,
            done.tokens_before
        );
    }
    Ok(exit::SUCCESS)
}

fn show(s: &AgentSessionInfo, children: &[AgentSessionInfo]) {
    say!("{}  {}  {}", s.id, s.status.as_str(), s.name);
    say!("  task {}", s.task_id);
    if !s.steps.is_empty() {
        say!("  steps {}", s.steps.join(", "));
    }
    if let Some(route) = &s.route {
        say!("  route {route}");
    }
    say!(
        "  runtime {}{}",
        s.runtime.as_deref().unwrap_or("-"),
        s.pinned_runtime
            .as_deref()
            .map(|p| format!(" (pinned to {p})"))
            .unwrap_or_default()
    );
    say!("  turns {}, generation {}", s.turns, s.generation);
    if let Some(n) = &s.native_session_id {
        say!("  native session {n}");
    }
    if let Some(e) = &s.executor {
        say!(
            "  executor {} of plugin {}: {}",
            e.environment_id,
            e.plugin,
            serde_json::to_value(e.phase)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        );
    }
    if let Some(d) = &s.delegation {
        say!(
            "  delegated by {} (step {}, call {}){}",
            d.parent,
            d.step_id,
            d.call_id,
            if d.answer.is_some() { ", answered" } else { "" }
        );
    }
    if let Some(d) = &s.delegated_execution {
        say!(
            "  handed to plugin {} (harness {}) by {} at {}, run as plugin {}'s",
            d.plugin,
            d.harness,
            d.by,
            d.at,
            d.owner
        );
    }
    for c in children {
        say!("  child {}  {}  {} turns", c.id, c.status.as_str(), c.turns);
    }
}
