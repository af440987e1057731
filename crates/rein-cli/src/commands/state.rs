//! `rein state …`: shared harness state — list, show, a session's newest,
//! conflicts, and creating and changing states from JSON files for scripts.

use std::path::Path;

use rein_core::store::SharedStateFilter;
use rein_protocol::{Conflict, ConflictPolicy, SharedHarnessState, WorkStatus};
use serde::de::DeserializeOwned;

use crate::cli::StateCommand;
use crate::commands::{Target, print_json, print_page};
use crate::exit::{self, UsageError};
use crate::output::say;

/// Reads a JSON file of the spec's wire format, naming the file and the problem.
pub(crate) fn read_json<T: DeserializeOwned>(path: &Path, what: &str) -> anyhow::Result<T> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text)
        .map_err(|e| UsageError(format!("{}: not a valid {what}: {e}", path.display())).into())
}

pub async fn dispatch(target: &Target, cmd: StateCommand) -> anyhow::Result<u8> {
    let backend = target.open(4)?;
    match cmd {
        StateCommand::List {
            session,
            status,
            tag,
            limit,
            cursor,
            json,
        } => {
            let status = status
                .map(|s| {
                    WorkStatus::parse(&s).ok_or_else(|| {
                        let allowed: Vec<&str> =
                            WorkStatus::ALL.iter().map(|w| w.as_str()).collect();
                        UsageError(format!(
                            "unknown status `{s}`; use one of {}",
                            allowed.join(", ")
                        ))
                    })
                })
                .transpose()?;
            let filter = SharedStateFilter {
                session_id: session,
                status,
                tag,
                limit: Some(limit as usize),
                cursor,
                ..SharedStateFilter::default()
            };
            let page = backend.shared_states(&filter).await?;
            print_page(
                &page,
                json,
                "shared states",
                "rein state list",
                &[
                    ("ID", 28),
                    ("STATUS", 10),
                    ("SESSION", 20),
                    ("ACTIONS", -7),
                    ("CONFLICTS", -9),
                    ("GOAL", 0),
                ],
                |s| {
                    vec![
                        s.id.to_string(),
                        s.status.as_str().to_owned(),
                        s.session_id.clone().unwrap_or_else(|| "-".into()),
                        s.actions.len().to_string(),
                        s.conflicts.len().to_string(),
                        s.goal.clone(),
                    ]
                },
            )?;
            Ok(exit::SUCCESS)
        }
        StateCommand::Show { id, json } => {
            let state = backend.shared_state(&id).await?;
            show(&state, json)
        }
        StateCommand::Session { session, json } => {
            let state = backend.session_shared_state(&session).await?;
            show(&state, json)
        }
        StateCommand::Conflicts { id, fail_on, json } => {
            let found = backend.detect_conflicts(&id).await?;
            if json {
                print_json(&found)?;
            } else if found.is_empty() {
                say!("no conflicts in {id}");
            } else {
                for c in &found {
                    say!("{}", conflict_line(c));
                    say!("    {}", c.recommendation);
                }
            }
            let threshold = match fail_on.as_deref() {
                Some("warn") => Some(ConflictPolicy::Warn),
                Some(_) => Some(ConflictPolicy::Escalate),
                None => None,
            };
            let strictness = |p: ConflictPolicy| match p {
                ConflictPolicy::Allow => 0,
                ConflictPolicy::Warn => 1,
                ConflictPolicy::Serialize => 2,
                ConflictPolicy::Escalate => 3,
                ConflictPolicy::Reject => 4,
            };
            let fails = threshold
                .is_some_and(|t| found.iter().any(|c| strictness(c.policy) >= strictness(t)));
            Ok(if fails { exit::FAILURE } else { exit::SUCCESS })
        }
        StateCommand::Create { file, json } => {
            let state: SharedHarnessState = read_json(&file, "shared state")?;
            let created = backend.create_shared_state(state).await?;
            changed(&created, json, "created")
        }
        StateCommand::AddParticipant { id, file, json } => {
            let participant = read_json(&file, "participant")?;
            let state = backend.add_participant(&id, participant).await?;
            changed(&state, json, "participant added to")
        }
        StateCommand::AddAction { id, file, json } => {
            let action = read_json(&file, "action")?;
            let state = backend.add_action(&id, action).await?;
            changed(&state, json, "action added to")
        }
    }
}

fn changed(state: &SharedHarnessState, json: bool, what: &str) -> anyhow::Result<u8> {
    if json {
        print_json(state)?;
    } else {
        say!(
            "{what} {}: {} participant(s), {} action(s)",
            state.id,
            state.participants.len(),
            state.actions.len()
        );
    }
    Ok(exit::SUCCESS)
}

fn conflict_line(c: &Conflict) -> String {
    format!(
        "[{}] {} {} ({}): {}",
        c.policy.as_str(),
        c.conflict_type.as_str(),
        c.id,
        c.actions.join(", "),
        c.summary
    )
}

fn show(state: &SharedHarnessState, json: bool) -> anyhow::Result<u8> {
    if json {
        print_json(state)?;
        return Ok(exit::SUCCESS);
    }
    say!("{}  {}  {}", state.id, state.status.as_str(), state.goal);
    if let Some(s) = &state.session_id {
        say!("  session {s}");
    }
    if !state.tags.is_empty() {
        say!("  tags: {}", state.tags.join(", "));
    }
    say!("  participants:");
    for p in &state.participants {
        let role = p.role.as_str();
        say!(
            "    {} ({role}, {}){}",
            p.id,
            p.status.as_str(),
            p.display_name
                .as_deref()
                .map(|n| format!(" {n}"))
                .unwrap_or_default()
        );
    }
    say!("  actions:");
    for a in &state.actions {
        say!(
            "    {} ({}) {}{}",
            a.id,
            a.status.as_str(),
            a.title,
            a.participant_id
                .as_deref()
                .map(|p| format!(" — by {p}"))
                .unwrap_or_default()
        );
        if !a.read_set.is_empty() {
            say!(
                "      reads  {}",
                rein_protocol::Resource::names(&a.read_set)
            );
        }
        if !a.write_set.is_empty() {
            say!(
                "      writes {}",
                rein_protocol::Resource::names(&a.write_set)
            );
        }
    }
    if state.conflicts.is_empty() {
        say!(
            "  conflicts: none recorded (rein state conflicts {} detects)",
            state.id
        );
    } else {
        say!("  conflicts:");
        for c in &state.conflicts {
            say!("    {}", conflict_line(c));
        }
    }
    Ok(exit::SUCCESS)
}
