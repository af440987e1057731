//! Asking a turn's models: the route's models in order, rate limits waited out up
//! to a cap, server errors retried, a model that refuses passed over.

use super::*;

/// Why a model did not answer a turn.
pub(super) enum Refusal {
    /// The step cannot go on (its journal could not be written, the summary
    /// failed): no other model is asked.
    Stop(StepOutcome),
    /// The conversation does not fit the model's window.
    TooLong(StepOutcome),
    /// The model's API failed the request.
    Chat(ChatError),
}

/// The longest `Retry-After` a rate-limited model is waited for before the
/// turn moves on to the next model of its route.
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(30);

/// How often a model that answers a server error (500–599 but 503) is asked
/// again before the turn moves on.
pub(super) const SERVER_RETRIES: u32 = 2;

pub(super) const SERVER_BACKOFF: Duration = Duration::from_millis(500);

impl AgentExecutor {
    /// The answer of the step's model to the conversation, or, when it
    /// cannot serve the turn, of its fallback models in order: a rate limit
    /// (429; its `Retry-After` is waited once, up to [`RETRY_AFTER_CAP`]),
    /// an overload (503, 529), a server error that persists after
    /// [`SERVER_RETRIES`] retries, an unreachable server, or a conversation
    /// too long for its window move the turn on to the next model. The
    /// model that served stays `serving` for the attempt's next turns.
    /// Without fallbacks, a failure is the step's, for its recovery policy.
    pub(super) async fn ask_model(
        &self,
        turn: &Turn<'_>,
        session: &AgentSessionInfo,
        messages: &[Message],
        specs: &[ToolSpec],
        fit: &mut Fit<'_>,
        serving: &mut usize,
    ) -> Result<ChatResponse, StepOutcome> {
        let route: Vec<&ModelClient> = std::iter::once(turn.chat)
            .chain(turn.fallbacks.iter())
            .collect();
        let name = |c: &ModelClient| format!("{}/{}", c.provider(), c.model());
        if route.len() == 1 {
            return match self
                .ask_one(turn, turn.chat, session, messages, specs, fit)
                .await
            {
                Ok(r) => Ok(r),
                Err(Refusal::Stop(o) | Refusal::TooLong(o)) => Err(o),
                Err(Refusal::Chat(e)) => Err(chat_failure(e)),
            };
        }
        // What each model that could not serve said.
        let mut refused: Vec<(String, String)> = Vec::new();
        let mut last: Option<StepOutcome> = None;
        while let Some(chat) = route.get(*serving).copied() {
            let mut waited = false;
            let mut retries = 0;
            let why = loop {
                match self
                    .ask_one(turn, chat, session, messages, specs, fit)
                    .await
                {
                    Ok(r) => return Ok(r),
                    Err(Refusal::Stop(o)) => return Err(o),
                    Err(Refusal::TooLong(o)) => {
                        let why = match &o {
                            StepOutcome::Failed { error, .. } => error.clone(),
                            _ => "the conversation does not fit its window".into(),
                        };
                        last = Some(o);
                        break why;
                    }
                    Err(Refusal::Chat(e)) => {
                        let status = match &e {
                            ChatError::Http { status, .. } => Some(*status),
                            _ => None,
                        };
                        match (&e, status) {
                            (ChatError::Http { retry_after, .. }, Some(429)) => {
                                if let Some(wait) = retry_after.filter(|w| *w <= RETRY_AFTER_CAP)
                                    && !waited
                                {
                                    waited = true;
                                    tokio::time::sleep(wait).await;
                                    continue;
                                }
                            }
                            (_, Some(503 | 529)) => {}
                            (_, Some(500..=599)) => {
                                if retries < SERVER_RETRIES {
                                    retries += 1;
                                    tokio::time::sleep(SERVER_BACKOFF * retries).await;
                                    continue;
                                }
                            }
                            (ChatError::Unreachable { .. } | ChatError::TimedOut(_), _) => {}
                            // Refused for what it asked (a bad key, a bad
                            // request): another model would not help.
                            _ => return Err(chat_failure(e)),
                        }
                        let why = e.to_string();
                        last = Some(chat_failure(e));
                        break why;
                    }
                }
            };
            refused.push((name(chat), why.clone()));
            *serving += 1;
            if let (Some(next), Some(asker)) = (route.get(*serving), &turn.request.asker) {
                asker.report(json!({
                    "sessionUpdate": "fallback",
                    "session": session.id,
                    "from": name(chat),
                    "to": name(next),
                    "reason": clip(&why, 300),
                }));
            }
        }
        // Every model of the route refused: the step fails as the last one
        // did (its class decides the recovery), naming what each said.
        let said = refused
            .iter()
            .map(|(m, why)| format!("{m}: {why}"))
            .collect::<Vec<_>>()
            .join("; ");
        Err(match last {
            Some(StepOutcome::Failed {
                failure, output, ..
            }) => StepOutcome::Failed {
                error: format!("no model of the step's route could serve the turn ({said})"),
                failure,
                output,
            },
            Some(other) => other,
            None => failed(
                "the step's route has no model left to serve the turn".into(),
                Failure::Internal,
                None,
            ),
        })
    }

    /// The answer of one model to the conversation, as it fits the model's
    /// context window: compacted first when the request would fill more
    /// than the step's share of the window, and compacted and asked again
    /// once when the server says it is too long.
    pub(super) async fn ask_one(
        &self,
        turn: &Turn<'_>,
        chat: &ModelClient,
        session: &AgentSessionInfo,
        messages: &[Message],
        specs: &[ToolSpec],
        fit: &mut Fit<'_>,
    ) -> Result<ChatResponse, Refusal> {
        let name = format!("{}/{}", chat.provider(), chat.model());
        let configured = self.models.get(&name).and_then(|m| m.context_window);
        let mut window = self.windows.of(chat, configured).await;
        let share = u64::from(
            turn.limits
                .compact_at_percent
                .unwrap_or(crate::context::COMPACT_AT_PERCENT),
        );
        let mut retried = false;
        loop {
            let size = fit.size(messages);
            if let Some(w) = window
                && size > w * share / 100
            {
                self.compact(turn, chat, session, messages, fit, w, size, "threshold")
                    .await
                    .map_err(Refusal::Stop)?;
                let after = fit.size(messages);
                if after > w {
                    return Err(Refusal::TooLong(failed(
                        format!(
                            "the conversation does not fit {name}'s context window of {w} tokens even after compaction (about {after} tokens are left: its newest turns); give the step a model with a larger window, or lower max_tool_answer_bytes"
                        ),
                        Failure::Validation,
                        Some(
                            json!({ "session": session.id, "context_window": w, "tokens": after }),
                        ),
                    )));
                }
            }
            let view = crate::context::view(messages, fit.compacted.as_ref(), fit.task());
            match chat.complete_with(&view, specs, fit.choice, |_| {}).await {
                Ok(response) => return Ok(response),
                Err(e) if e.context_overflow() && !retried => {
                    retried = true;
                    // The window the error names (learned for the next
                    // request), or else the size that did not fit.
                    let w = match e.overflow_window() {
                        Some(n) => {
                            self.windows.learn(chat, n);
                            window = Some(n);
                            n
                        }
                        None => window.unwrap_or(size).min(size),
                    };
                    self.compact(turn, chat, session, messages, fit, w, size, "overflow")
                        .await
                        .map_err(Refusal::Stop)?;
                }
                Err(e) if e.context_overflow() => {
                    return Err(Refusal::TooLong(failed(
                        format!(
                            "the conversation does not fit {name}'s context window even after compaction ({e}); give the step a model with a larger window, or lower max_tool_answer_bytes"
                        ),
                        Failure::Validation,
                        Some(json!({ "session": session.id })),
                    )));
                }
                Err(e) => return Err(Refusal::Chat(e)),
            }
        }
    }
}
