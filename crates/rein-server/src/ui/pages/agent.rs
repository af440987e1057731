//! An agent step's work on the task page: its turns, tool calls and usage, read
//! from its journal.

use super::*;

/// The most updates and turns shown for one agent step (the newest).
pub(super) const AGENT_LINES: usize = 50;

/// What an agent step did: its conversation's turns (from the session's
/// journal, the built-in runtime's) and what its runtime reported.
#[derive(Debug, Default)]
pub(super) struct AgentWork {
    pub(super) turns: Vec<Turn>,
    pub(super) updates: Vec<String>,
}

#[derive(Debug)]
pub(super) struct Turn {
    pub(super) role: String,
    pub(super) text: String,
    pub(super) calls: Vec<String>,
}

/// At most `n` characters of `text`, marked when cut.
pub(super) fn cut(text: &str, n: usize) -> String {
    if text.chars().count() <= n {
        text.to_owned()
    } else {
        format!("{}…", text.chars().take(n).collect::<String>())
    }
}

/// The turns of the session an agent step's newest attempt worked in (its
/// output names it), newest last. A session another runtime keeps (an ACP
/// agent's) has none here.
pub(super) async fn turns(state: &AppState, output: Option<&serde_json::Value>) -> Vec<Turn> {
    let Some(session) = output
        .and_then(|o| o.get("session"))
        .and_then(|s| s.as_str())
    else {
        return Vec::new();
    };
    let sessions = state.engine.sessions();
    let Ok(info) = sessions.get(session).await else {
        return Vec::new();
    };
    let Ok(entries) = sessions.journal(&info).load().await else {
        return Vec::new();
    };
    let mut turns: Vec<Turn> = entries
        .iter()
        .filter_map(|e| e.get("message"))
        .filter(|m| m["role"] != "system")
        .map(|m| Turn {
            role: m["role"].as_str().unwrap_or("?").to_owned(),
            text: cut(m["content"].as_str().unwrap_or_default(), 400),
            calls: m["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    let f = &c["function"];
                    format!(
                        "{}({})",
                        f["name"].as_str().unwrap_or("?"),
                        cut(f["arguments"].as_str().unwrap_or_default(), 120)
                    )
                })
                .collect(),
        })
        .collect();
    let drop = turns.len().saturating_sub(AGENT_LINES);
    turns.drain(..drop);
    turns
}

/// What each agent step's runtime reported — which runtime served it, its
/// tool calls and plans — newest last, by step.
pub(super) async fn agent_activity(
    state: &AppState,
    task: &TaskState,
    plan: Option<&rein_protocol::TaskDecomposition>,
) -> Vec<(String, AgentWork)> {
    let step_of = |cp: &rein_protocol::CheckpointId| {
        task.checkpoints
            .iter()
            .find(|c| &c.id == cp)
            .and_then(|c| c.step_id.clone())
    };
    let mut by_step: Vec<(String, AgentWork)> = Vec::new();
    for step in plan.map(|p| p.steps.as_slice()).unwrap_or_default() {
        if matches!(step.action, rein_protocol::StepAction::Agent { .. }) {
            let output = task
                .latest_for_step(&step.id)
                .and_then(|c| c.output.as_ref());
            let work = AgentWork {
                turns: turns(state, output).await,
                updates: Vec::new(),
            };
            by_step.push((step.id.clone(), work));
        }
    }
    let mut lines = rein_protocol::event::AgentUpdateLines::default();
    let mut after = 0;
    loop {
        let Ok(events) = state.engine.events(task.id(), after, 1000).await else {
            break;
        };
        for event in &events {
            let (cp, line) = match &event.change {
                rein_protocol::TaskChange::AgentUpdate {
                    checkpoint_id,
                    update,
                } => (checkpoint_id, lines.line(update)),
                rein_protocol::TaskChange::Compacted {
                    checkpoint_id,
                    model,
                    reason,
                    messages,
                    tokens_before,
                    tokens_after,
                    ..
                } => (
                    checkpoint_id,
                    format!(
                        "compacted: {messages} messages summarised by {model} ({reason}), about {tokens_before} → {tokens_after} tokens"
                    ),
                ),
                rein_protocol::TaskChange::RuntimeSelected {
                    checkpoint_id,
                    decision,
                } => (
                    checkpoint_id,
                    format!(
                        "served by {} ({})",
                        decision.selected,
                        decision.reason.as_str().replace('_', " ")
                    ),
                ),
                _ => continue,
            };
            let Some(step) = step_of(cp) else { continue };
            match by_step.iter_mut().find(|(s, _)| *s == step) {
                Some((_, work)) => work.updates.push(line),
                None => by_step.push((
                    step,
                    AgentWork {
                        turns: Vec::new(),
                        updates: vec![line],
                    },
                )),
            }
        }
        match events.last() {
            Some(last) if events.len() == 1000 => after = last.seq,
            _ => break,
        }
    }
    for (_, work) in &mut by_step {
        let drop = work.updates.len().saturating_sub(AGENT_LINES);
        work.updates.drain(..drop);
    }
    by_step.retain(|(_, work)| !work.turns.is_empty() || !work.updates.is_empty());
    by_step
}
