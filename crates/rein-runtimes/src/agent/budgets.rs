//! What a conversation may spend: turns and budgets held to, grants asked of a
//! person when they run out, and compaction when the context window fills.

use super::*;

/// What a person said when the step used up its turns.
pub(super) enum Grant {
    /// Go on, for this many more turns.
    More(usize),
    /// Stop, and why (who declined).
    Declined(String),
    /// Nobody can be asked (the step runs without a line to a person).
    NobodyToAsk,
}

/// The most turns one grant may give.
pub(super) const MOST_TURNS: usize = 1000;

/// Asks a person whether the agent, which used its `budget` turns without
/// finishing, may go on: `N more turns` for a few N, or `stop`. The question
/// is the same each time the step asks it at this point of its conversation,
/// so a step run again after rein stopped gets the answer already given.
pub(super) async fn more_turns(
    request: &StepRequest,
    session: &AgentSessionInfo,
    messages: &[Message],
    budget: usize,
    max_turns: usize,
) -> Grant {
    let Some(asker) = &request.asker else {
        return Grant::NobodyToAsk;
    };
    let mut offered: Vec<usize> = [max_turns, max_turns * 2, max_turns * 4]
        .into_iter()
        .map(|n| n.clamp(1, MOST_TURNS))
        .collect();
    offered.dedup();
    let mut options: Vec<String> = offered.iter().map(|n| format!("{n} more turns")).collect();
    options.push("stop".into());
    let last = messages.iter().rev().find_map(|m| match m {
        Message::Assistant { content, .. } => content.clone().filter(|c| !c.trim().is_empty()),
        _ => None,
    });
    let question = rein_core::executor::Question {
        key: format!("turn-limit:{}:{}", session.id, messages.len()),
        trigger: rein_protocol::Trigger::TaskBlocked,
        title: format!(
            "The agent of step `{}` used its {budget} model turns without finishing: let it go on?",
            request.step.id
        ),
        description: match last {
            Some(said) => format!("Its last words: {}", clip(&said, 400)),
            None => "It has been calling tools without saying anything.".into(),
        },
        recommended: options.first().cloned(),
        options,
        context: rein_protocol::ApprovalContext::default(),
        timeout_ms: None,
        on_expiry: rein_protocol::Decision::Deny,
    };
    let answered = match asker.ask(question).await {
        Ok(a) => a,
        Err(_) => return Grant::NobodyToAsk,
    };
    let who = answered
        .response
        .as_ref()
        .map_or_else(|| "a person".to_owned(), |r| r.decided_by.clone());
    let chosen = answered
        .response
        .as_ref()
        .and_then(|r| r.selected_option.clone());
    match (answered.status, chosen.as_deref()) {
        (rein_protocol::ApprovalStatus::Approved, Some("stop")) => {
            Grant::Declined(format!("{who} chose to stop it"))
        }
        (rein_protocol::ApprovalStatus::Approved, chosen) => Grant::More(
            chosen
                .and_then(|c| c.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(max_turns)
                .clamp(1, MOST_TURNS),
        ),
        (status, _) => Grant::Declined(format!("{who} did not let it go on ({})", status.as_str())),
    }
}

/// What people granted past a step's budgets: each scope's raised budget
/// (the latest grant) and how many grants it had.
#[derive(Debug, Default)]
pub(super) struct Grants(
    pub(super) std::collections::BTreeMap<&'static str, (rein_protocol::Budget, usize)>,
);

impl Grants {
    /// A journaled `budget_grant`.
    pub(super) fn take(&mut self, grant: &Value) {
        let Some(scope) = grant["scope"]
            .as_str()
            .and_then(crate::budget::Scope::parse)
        else {
            return;
        };
        let Ok(budget) = serde_json::from_value(grant["budget"].clone()) else {
            return;
        };
        let entry = self.0.entry(scope.as_str()).or_insert((budget, 0));
        *entry = (budget, entry.1 + 1);
    }

    pub(super) fn raised(&self, scope: crate::budget::Scope) -> Option<rein_protocol::Budget> {
        self.0.get(scope.as_str()).map(|(b, _)| *b)
    }

    pub(super) fn count(&self, scope: crate::budget::Scope) -> usize {
        self.0.get(scope.as_str()).map_or(0, |(_, n)| *n)
    }
}

impl AgentExecutor {
    /// Holds what was spent, and what the next request of `by` takes
    /// (`next` input tokens), to each budget in force — the step's, the
    /// task's, the day's — and asks a person about one the turn would pass:
    /// a grant raises it (journaled, so a resumed step keeps it), a refusal
    /// or nobody to ask stops the step naming the budget.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn hold_to_budgets(
        &self,
        turn: &Turn<'_>,
        session: &AgentSessionInfo,
        journal: &rein_core::journal::Journal,
        messages: &[Message],
        metered: &[(usize, rein_protocol::TurnUsage)],
        mine: usize,
        grants: &mut Grants,
        by: &ModelClient,
        next: u64,
    ) -> Option<StepOutcome> {
        use crate::budget::{Scope, Spent};
        let request = turn.request;
        let model = format!("{}/{}", by.provider(), by.model());
        for scope in [Scope::Step, Scope::Task, Scope::Daily] {
            let configured = match scope {
                Scope::Step => turn.limits.budget,
                Scope::Task => request.task_budget,
                Scope::Daily => self.daily_budget,
            };
            while let Some(budget) = grants.raised(scope).or(configured) {
                let spent = match scope {
                    Scope::Step => {
                        let mut spent = Spent::nothing();
                        for (_, t) in metered.iter().filter(|(at, _)| *at >= mine) {
                            spent.add(
                                &format!("{}/{}", t.provider, t.model),
                                &t.usage,
                                &self.models,
                            );
                        }
                        spent
                    }
                    Scope::Task | Scope::Daily => {
                        let filter = if scope == Scope::Task {
                            rein_core::store::UsageFilter {
                                task_id: Some(request.task_id.clone()),
                                ..Default::default()
                            }
                        } else {
                            let midnight = chrono::Utc::now()
                                .date_naive()
                                .and_hms_opt(0, 0, 0)
                                .map(|t| t.and_utc());
                            rein_core::store::UsageFilter {
                                since: midnight,
                                ..Default::default()
                            }
                        };
                        let rows = match turn.sessions.usage(&filter).await {
                            Ok(rows) => rows,
                            Err(e) => {
                                return Some(failed(
                                    format!(
                                        "cannot read what the {} budget has spent: {e}",
                                        scope.as_str()
                                    ),
                                    Failure::Internal,
                                    None,
                                ));
                            }
                        };
                        let mut spent = Spent::nothing();
                        for row in &rows {
                            spent.add(
                                &format!("{}/{}", row.provider, row.model),
                                &row.usage,
                                &self.models,
                            );
                        }
                        spent
                    }
                };
                let Some(why) = crate::budget::passed(&budget, &spent, next, &model, &self.models)
                else {
                    break;
                };
                let who = scope.who(&request.step.id);
                let said = format!(
                    "{who} {why}, its {} budget being {}",
                    scope.as_str(),
                    crate::budget::describe(&budget)
                );
                let Some(asker) = &request.asker else {
                    return Some(failed(
                        format!("stopped at the {} budget: {said}", scope.as_str()),
                        Failure::Validation,
                        Some(json!({ "session": session.id, "budget": scope.as_str() })),
                    ));
                };
                let question = rein_core::executor::Question {
                    key: format!(
                        "budget:{}:{}:{}:{}",
                        scope.as_str(),
                        session.id,
                        messages.len(),
                        grants.count(scope)
                    ),
                    trigger: rein_protocol::Trigger::TaskBlocked,
                    title: format!("{said}: let it go on?"),
                    description: format!(
                        "The next model turn would pass the {} budget ({}). Allow ×2 or ×4 raises it so; to give an amount, choose `{}` and write it as the reason (50000 tokens, or $2.50); stop fails the step.",
                        scope.as_str(),
                        crate::budget::describe(&budget),
                        crate::budget::AMOUNT
                    ),
                    recommended: Some("stop".into()),
                    options: crate::budget::options(),
                    context: rein_protocol::ApprovalContext::default(),
                    timeout_ms: None,
                    on_expiry: rein_protocol::Decision::Deny,
                };
                let answered = match asker.ask(question).await {
                    Ok(a) => a,
                    Err(e) => {
                        return Some(failed(
                            format!(
                                "stopped at the {} budget: {said}; nobody could be asked ({e})",
                                scope.as_str()
                            ),
                            Failure::Validation,
                            Some(json!({ "session": session.id, "budget": scope.as_str() })),
                        ));
                    }
                };
                let response = answered.response.as_ref();
                let who_said =
                    response.map_or_else(|| "a person".to_owned(), |r| r.decided_by.clone());
                let chosen = response.and_then(|r| r.selected_option.clone());
                let stop = |why: String| {
                    Some(failed(
                        format!("stopped at the {} budget: {said}; {why}", scope.as_str()),
                        Failure::Validation,
                        Some(
                            json!({ "session": session.id, "budget": scope.as_str(), "approval_id": answered.id }),
                        ),
                    ))
                };
                if answered.status != rein_protocol::ApprovalStatus::Approved {
                    return stop(format!(
                        "{who_said} did not let it go on ({})",
                        answered.status.as_str()
                    ));
                }
                let chosen = chosen.unwrap_or_else(|| "stop".into());
                if chosen == "stop" {
                    return stop(format!("{who_said} chose to stop it"));
                }
                let raised = match crate::budget::granted(
                    &budget,
                    &chosen,
                    response.and_then(|r| r.reason.as_deref()),
                ) {
                    Ok(b) => b,
                    Err(e) => return stop(e),
                };
                let record = json!({ "budget_grant": {
                    "scope": scope.as_str(),
                    "budget": raised,
                    "by": who_said,
                    "approval_id": answered.id,
                } });
                if let Err(e) = journal.append(std::slice::from_ref(&record)).await {
                    return Some(unwritten(&e));
                }
                grants.take(&record["budget_grant"]);
            }
        }
        None
    }

    /// Summarises the older part of the conversation (what would not leave
    /// the recent turns within their share of `window`), journals the
    /// summary as a session entry with what its request used, and reports
    /// `compacted`. Nothing older to summarise: nothing happens.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn compact(
        &self,
        turn: &Turn<'_>,
        chat: &ModelClient,
        session: &AgentSessionInfo,
        messages: &[Message],
        fit: &mut Fit<'_>,
        window: u64,
        before: u64,
        reason: &str,
    ) -> Result<(), StepOutcome> {
        let done = crate::context::compact_once(
            chat,
            messages,
            fit.compacted.as_ref(),
            window,
            Some((fit.mine, fit.task)),
        )
        .await
        .map_err(|e| {
            failed(
                format!("the conversation had to be compacted, and its summary failed: {e}"),
                Failure::Validation,
                Some(json!({ "session": session.id })),
            )
        })?;
        let Some(done) = done else {
            return Ok(());
        };
        let used = rein_protocol::TurnUsage {
            provider: chat.provider().to_owned(),
            model: chat.model().to_owned(),
            served_model: done.served_model.clone(),
            step: Some(turn.request.step.id.clone()),
            session: Some(session.id.to_string()),
            usage: done.usage,
        };
        let next = done.compacted;
        let at = next.at;
        let after = fit.tools + done.tokens_after;
        let record = json!({
            "compacted": {
                "at": at,
                "summary": next.summary,
                "tokens_before": before,
                "tokens_after": after,
                "reason": reason,
            },
            "usage": used,
        });
        if let Err(e) = fit.journal.append(&[record]).await {
            return Err(unwritten(&e));
        }
        fit.metered.push((messages.len(), used));
        *fit.compacted = Some(next);
        *fit.sized = None;
        if let Some(asker) = &turn.request.asker {
            asker.report(json!({
                "sessionUpdate": "compacted",
                "session": session.id,
                "model": format!("{}/{}", chat.provider(), chat.model()),
                "reason": reason,
                "messages": done.messages,
                "tokens_before": before,
                "tokens_after": after,
            }));
        }
        Ok(())
    }
}
