//! The built-in loop's conversation: turns asked, answers journaled, tool calls run,
//! until the model answers without calling a tool or a limit stops it.

use super::*;

/// What one step's turns run with.
#[derive(Clone, Copy)]
pub(super) struct Turn<'a> {
    pub(super) request: &'a StepRequest,
    pub(super) cancel: &'a CancellationToken,
    pub(super) sessions: &'a Sessions,
    pub(super) chat: &'a ModelClient,
    /// The models that serve a turn `chat` cannot, in order.
    pub(super) fallbacks: &'a [ModelClient],
    pub(super) decision: &'a SelectionDecision,
    pub(super) limits: &'a rein_protocol::AgentLimits,
    /// The step's MCP servers, if it names any.
    pub(super) mcp: Option<&'a StepMcp>,
}

/// Where a conversation stands against its model's context window.
pub(super) struct Fit<'a> {
    pub(super) journal: &'a rein_core::journal::Journal,
    /// The older part, summarised.
    pub(super) compacted: &'a mut Option<Compacted>,
    /// The size up to a model turn as its server counted it (its position,
    /// its input and output tokens).
    pub(super) sized: &'a mut Option<(usize, u64)>,
    pub(super) metered: &'a mut Vec<(usize, rein_protocol::TurnUsage)>,
    /// The request of the step that runs, restated after a summary that
    /// covers it.
    pub(super) task: &'a str,
    /// Where the step's part of the conversation begins.
    pub(super) mine: usize,
    /// The tokens the tools' declarations take, by rein's estimate.
    pub(super) tools: u64,
    /// The turn's `tool_choice`.
    pub(super) choice: Option<&'a str>,
}

impl Fit<'_> {
    /// The step's request, when the summary covers it.
    pub(super) fn task(&self) -> Option<&str> {
        self.compacted
            .as_ref()
            .filter(|c| self.mine < c.at)
            .map(|_| self.task)
    }

    /// The tokens the conversation's next request takes: what the server
    /// counted up to its last turn and rein's estimate of what came after,
    /// or rein's estimate of all it sends (`tools`: its tools' declarations).
    pub(super) fn size(&self, messages: &[Message]) -> u64 {
        match *self.sized {
            Some((at, counted)) if at < messages.len() => {
                counted + crate::context::estimate(&messages[at + 1..])
            }
            _ => {
                self.tools
                    + crate::context::estimate(&crate::context::view(
                        messages,
                        self.compacted.as_ref(),
                        self.task(),
                    ))
            }
        }
    }
}

/// What the loop says when a model's answer was cut at its token limit and
/// the step goes on (`on_token_limit = "continue"`).
pub(super) const GO_ON: &str = "Your answer was cut off at the output token limit. Continue exactly where it stopped, without repeating anything.";

/// The marker a step of a shared session (or a delegated child) writes where
/// its part of the conversation begins; a step's own session needs none.
pub(super) fn turn_marker(session: &AgentSessionInfo, step: &str) -> Option<String> {
    (session.shared || session.delegation.is_some()).then(|| step.to_owned())
}

/// The tool calls of the last model turn that have no answer yet.
pub(super) fn pending_calls(messages: &[Message]) -> Vec<ToolCall> {
    let Some(last_turn) = messages
        .iter()
        .rposition(|m| matches!(m, Message::Assistant { .. }))
    else {
        return Vec::new();
    };
    let Message::Assistant { tool_calls, .. } = &messages[last_turn] else {
        return Vec::new();
    };
    let answered: Vec<&str> = messages[last_turn..]
        .iter()
        .filter_map(|m| match m {
            Message::Tool { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    tool_calls
        .iter()
        .filter(|c| !answered.contains(&c.id.as_str()))
        .cloned()
        .collect()
}

/// A message's journal entry.
pub(super) fn entry(message: &Message, request_id: Option<String>) -> Value {
    turn_entry(message, request_id, None, None)
}

/// Whether a runtime's turn produced nothing: no text, no event (a tool
/// call, a plan), and in what it reported no tool call and no side effect.
pub(super) fn hollow(text: &str, output: &Value) -> bool {
    let none = |key: &str| {
        output
            .get(key)
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
    };
    text.trim().is_empty() && none("agent_events") && none("tool_calls") && none("side_effects")
}

/// The HTTP status of the model API error an agent reports, where its
/// message names one: `API Error: 429 …` (Claude Code's words), `status
/// 503`, `HTTP 500`, or the kind (`rate_limit_error`, `overloaded_error`,
/// `api_error`, `invalid_request_error`).
pub(super) fn upstream_status(message: &str) -> Option<u16> {
    let lower = message.to_ascii_lowercase();
    for marker in [
        "api error: ",
        "api error ",
        "status code ",
        "status: ",
        "status ",
        "http ",
    ] {
        let mut rest = lower.as_str();
        while let Some(at) = rest.find(marker) {
            rest = &rest[at + marker.len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if let Ok(status) = digits.parse::<u16>()
                && digits.len() == 3
                && (400..600).contains(&status)
            {
                return Some(status);
            }
        }
    }
    [
        ("rate_limit", 429),
        ("rate limit", 429),
        ("overloaded", 529),
        ("invalid_request_error", 400),
        ("api_error", 500),
    ]
    .into_iter()
    .find(|(kind, _)| lower.contains(kind))
    .map(|(_, status)| status)
}

/// What is wrong with the tool calls a stream put together, if anything: a
/// call without an id or a tool, two calls with one id, arguments that are
/// not a JSON object (none at all stand for `{}`).
pub(super) fn malformed(calls: &[ToolCall]) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    for call in calls {
        if call.id.trim().is_empty() {
            return Some(format!("a call of `{}` has no id", call.function.name));
        }
        if !seen.insert(call.id.as_str()) {
            let n = calls.iter().filter(|c| c.id == call.id).count();
            return Some(format!("{n} tool calls share the id `{}`", call.id));
        }
    }
    for call in calls {
        if call.function.name.trim().is_empty() {
            return Some(format!("tool call `{}` names no tool", call.id));
        }
        let args = call.function.arguments.trim();
        if !args.is_empty() && !serde_json::from_str::<Value>(args).is_ok_and(|v| v.is_object()) {
            return Some(format!(
                "the arguments of tool call `{}` (`{}`) are not a JSON object",
                call.id,
                clip(args, 80)
            ));
        }
    }
    None
}

/// The `tool_choice` of a step's next turn: `auto` and `none` always; a
/// forced one (`required`, or a tool's name) until the model has made that
/// call in the step's part of the conversation, then the server's default
/// (`auto`), so a step that forces a tool can finish.
pub(super) fn forced_choice<'a>(choice: Option<&'a str>, part: &[Message]) -> Option<&'a str> {
    let c = choice?;
    if matches!(c, "auto" | "none") {
        return Some(c);
    }
    let made = part.iter().any(|m| {
        matches!(m, Message::Assistant { tool_calls, .. }
            if tool_calls.iter().any(|t| c == "required" || t.function.name == c))
    });
    (!made).then_some(c)
}

/// A model turn's journal entry: with the provider's id of its request and
/// what the turn used, so a resume reads the count and never counts again.
pub(super) fn turn_entry(
    message: &Message,
    request_id: Option<String>,
    used: Option<rein_protocol::TurnUsage>,
    forced: Option<String>,
) -> Value {
    let mut entry = json!({ "message": message });
    if let Some(choice) = forced {
        entry["tool_choice"] = json!(choice);
    }
    if let Some(id) = request_id {
        entry["request_id"] = json!(id);
    }
    if let Some(used) = used {
        entry["usage"] = json!(used);
    }
    entry
}

/// What a turn used by rein's estimate, for a server that reported nothing
/// (llama-cpp-python's, streaming): a token per four bytes of what was sent
/// and what came back, marked `estimated`.
pub(super) fn estimate(messages: &[Message], specs: &[ToolSpec], response: &ChatResponse) -> Usage {
    let sent = serde_json::to_string(messages).map_or(0, |s| s.len())
        + specs
            .iter()
            .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
            .sum::<usize>();
    let got = response.content.len()
        + response
            .tool_calls
            .iter()
            .map(|c| c.function.name.len() + c.function.arguments.len())
            .sum::<usize>();
    let tokens = |bytes: usize| u64::try_from(bytes.div_ceil(4)).unwrap_or(u64::MAX);
    Usage {
        input_tokens: tokens(sent),
        output_tokens: tokens(got),
        estimated: true,
        ..Usage::default()
    }
}

/// A step's usage in its output: the sum, and the sum by model
/// (`PROVIDER/MODEL`), each with its cost where its model is priced. The
/// sum's `cost_usd` is there only when every model is priced; otherwise
/// `unpriced` names the models without a price (never counted as free).
pub(super) fn usage_of<'a>(
    turns: impl Iterator<Item = &'a rein_protocol::TurnUsage>,
    models: &Models,
) -> Value {
    let mut total = rein_protocol::Spend::default();
    let mut by_model: std::collections::BTreeMap<String, rein_protocol::Spend> =
        std::collections::BTreeMap::new();
    for turn in turns {
        let name = format!("{}/{}", turn.provider, turn.model);
        total.add(&name, &turn.usage, 1, models);
        by_model
            .entry(name.clone())
            .or_default()
            .add(&name, &turn.usage, 1, models);
    }
    let mut out = json!(total.usage);
    out["by_model"] = by_model
        .iter()
        .map(|(name, spent)| {
            let mut row = json!(spent.usage);
            if let Some(dollars) = spent.cost_usd {
                row["cost_usd"] = json!(dollars);
            }
            (name.clone(), row)
        })
        .collect::<serde_json::Map<_, _>>()
        .into();
    match total.cost_usd {
        Some(dollars) if total.calls > 0 => out["cost_usd"] = json!(dollars),
        Some(_) => {}
        None => out["unpriced"] = json!(total.unpriced),
    }
    out
}

/// The final answer: the last turn's text, joined to the turns it continued
/// when the model was asked to go on after its token limit.
pub(super) fn answer_text(part: &[Message], last: Option<&str>) -> String {
    let mut pieces = vec![last.unwrap_or_default().to_owned()];
    let mut i = part.len().saturating_sub(1);
    while i >= 2 {
        match (&part[i - 1], &part[i - 2]) {
            (
                Message::User { content: go_on },
                Message::Assistant {
                    content,
                    tool_calls,
                },
            ) if go_on == GO_ON && tool_calls.is_empty() => {
                pieces.push(content.clone().unwrap_or_default());
                i -= 2;
            }
            _ => break,
        }
    }
    pieces.reverse();
    pieces.concat()
}

pub(super) fn count_calls(messages: &[Message]) -> usize {
    messages
        .iter()
        .filter(|m| matches!(m, Message::Tool { .. }))
        .count()
}

/// A failed model request as a step failure recovery understands.
pub(super) fn chat_failure(e: ChatError) -> StepOutcome {
    let failure = match &e {
        ChatError::Http {
            status,
            retry_after,
            ..
        } => Failure::Http {
            status: *status,
            retry_after: *retry_after,
        },
        ChatError::Unreachable { .. } => Failure::Connection,
        ChatError::TimedOut(_) => Failure::Timeout,
        ChatError::Protocol(_) => Failure::Validation,
    };
    failed(e.to_string(), failure, None)
}

impl AgentExecutor {
    /// The built-in loop: ask the model, run the tools it calls, until it
    /// answers without calling any. The conversation is the session's (after
    /// its last reset); a step joining a shared session adds its prompt after
    /// what the earlier steps said, marked as its own.
    pub(super) fn converse<'a>(
        &'a self,
        turn: &'a Turn<'a>,
        session: &'a AgentSessionInfo,
        prompt: &'a str,
        tools: &'a [String],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = StepOutcome> + Send + 'a>> {
        Box::pin(async move {
            let Turn {
                request,
                cancel,
                sessions,
                chat,
                fallbacks: _,
                decision,
                limits,
                mcp,
            } = *turn;
            let max_turns = limits
                .max_turns
                .map_or(self.max_turns, |n| n as usize)
                .max(1);
            let journal = sessions.journal(session);
            // The journal: one entry per message, a marker where each step of a
            // shared session began, one when the step stopped to ask a person
            // about a call, and one at each reset.
            let entries = match journal.load().await {
                Ok(e) => e,
                Err(e) => {
                    return failed(
                        format!("cannot read the session's journal: {e}"),
                        Failure::Internal,
                        None,
                    );
                }
            };
            let since = entries
                .iter()
                .rposition(|e| e.get("reset").is_some())
                .map_or(0, |i| i + 1);
            let me = turn_marker(session, &request.step.id);
            let mut messages: Vec<Message> = Vec::with_capacity(entries.len());
            let mut awaiting: Option<String> = None;
            // Where this step's part of the conversation begins.
            let mut mine: Option<usize> = None;
            // Where the current budget of turns began (a resume after the
            // step stopped at its turn limit grants a fresh one).
            let mut budget_from = 0usize;
            // How many turns the current budget has: `max_turns`, or what a
            // person granted when the step reached its limit.
            let mut budget = max_turns;
            let stopped_at_limit = entries[since..]
                .last()
                .is_some_and(|e| e.get("turn_limit").is_some());
            // The usage of each model call journaled, by the position of
            // the conversation it was made at.
            let mut metered: Vec<(usize, rein_protocol::TurnUsage)> = Vec::new();
            // The conversation's older part, summarised.
            let mut compacted: Option<Compacted> = None;
            // The size of the conversation up to a model turn, as its server
            // counted it: (the turn's position, its input and output tokens).
            let mut sized: Option<(usize, u64)> = None;
            // What a person granted past each budget, and how often.
            let mut grants = Grants::default();
            for entry in &entries[since..] {
                if let Some(m) = entry.get("message") {
                    if let Some(used) = rein_core::store::entry_usage(entry) {
                        if !used.usage.estimated {
                            sized = Some((
                                messages.len(),
                                used.usage.input_tokens + used.usage.output_tokens,
                            ));
                        }
                        metered.push((messages.len(), used));
                    }
                    match serde_json::from_value(m.clone()) {
                        Ok(m) => messages.push(m),
                        Err(e) => {
                            return failed(
                                format!("the session's journal is unreadable: {e}"),
                                Failure::Internal,
                                None,
                            );
                        }
                    }
                    awaiting = None;
                } else if let Some(c) = entry.get("compacted") {
                    if let Some(used) = rein_core::store::entry_usage(entry) {
                        metered.push((messages.len(), used));
                    }
                    compacted = Some(Compacted::from_entry(c, messages.len()));
                    sized = None;
                } else if let Some(g) = entry.get("budget_grant") {
                    grants.take(g);
                } else if let Some(id) = entry.get("awaiting").and_then(Value::as_str) {
                    awaiting = Some(id.to_owned());
                } else if let Some(granted) = entry.get("budget") {
                    budget_from = messages.len();
                    budget = granted
                        .as_u64()
                        .map_or(max_turns, |n| usize::try_from(n).unwrap_or(max_turns));
                } else if me.is_some()
                    && entry.get("turn_of").and_then(Value::as_str) == me.as_deref()
                {
                    mine = Some(messages.len());
                }
            }
            if me.is_none() && !messages.is_empty() {
                mine = Some(0);
            }
            if mine.is_none() {
                let mut first: Vec<Value> = Vec::new();
                if messages.is_empty() {
                    let system = Message::System {
                        content: format!(
                            "You are rein's built-in agent. You work in a workspace directory; paths are relative to it.{}",
                            match (tools.is_empty(), mcp) {
                                (true, None) => String::new(),
                                (false, None) => format!(" Your tools: {}.", tools.join(", ")),
                                (_, Some(_)) => format!(
                                    " Your tools: {}; the tools named SERVER__TOOL are those of MCP servers.",
                                    if tools.is_empty() {
                                        "those below".to_owned()
                                    } else {
                                        tools.join(", ")
                                    }
                                ),
                            }
                        ),
                    };
                    first.push(entry(&system, None));
                    messages.push(system);
                }
                // Calls an earlier step of the session left unanswered get an
                // answer, so the conversation stays one the API takes.
                for call in pending_calls(&messages) {
                    let answer = Message::Tool {
                        tool_call_id: call.id.clone(),
                        content: "error: not run; the step that asked for it ended first".into(),
                    };
                    first.push(entry(&answer, None));
                    messages.push(answer);
                }
                if let Some(marker) = &me {
                    first.push(json!({ "turn_of": marker }));
                }
                mine = Some(messages.len());
                let user = Message::User {
                    content: prompt.to_owned(),
                };
                first.push(entry(&user, None));
                messages.push(user);
                if let Err(e) = journal.append(&first).await {
                    return unwritten(&e);
                }
            }
            let mine = mine.unwrap_or(0);
            if stopped_at_limit {
                if let Err(e) = journal.append(&[json!({ "budget": max_turns })]).await {
                    return unwritten(&e);
                }
                budget_from = messages.len();
                budget = max_turns;
            }
            let mut counted_from = budget_from.max(mine);
            let mut specs = tool_specs(tools);
            if let Some(mcp) = mcp {
                specs.extend(mcp.specs());
            }
            let tools_tokens = crate::context::tokens_of(crate::context::specs_bytes(&specs));
            // The model of the route that serves the turns (0: the step's).
            let mut serving = 0usize;
            let mut request_id: Option<String> = None;
            let mut used: Option<rein_protocol::TurnUsage> = None;
            // The tool the turn was forced to call, for its journal entry.
            let mut forced: Option<String> = None;
            let mut tool_runs = 0usize;
            // A bound on the loop itself (each turn and each tool call is one
            // pass); the budget of turns is what stops an agent.
            for _ in 0..(self.max_turns + MOST_TURNS) * 256 {
                if cancel.is_cancelled() {
                    return StepOutcome::Cancelled;
                }
                let turns = messages[mine..]
                    .iter()
                    .filter(|m| matches!(m, Message::Assistant { .. }))
                    .count();
                let budget_used = messages[counted_from.min(messages.len())..]
                    .iter()
                    .filter(|m| matches!(m, Message::Assistant { .. }))
                    .count();
                // Tool calls of the last turn that have no answer yet.
                let pending = pending_calls(&messages[mine..]);
                if let Some(call) = pending.first() {
                    // A person approved this attempt after the step asked about this call.
                    let approved = request
                        .approved_by
                        .as_deref()
                        .filter(|_| awaiting.as_deref() == Some(call.id.as_str()));
                    report_call(request, call);
                    let outcome = tokio::select! {
                        r = self.run_tool(turn, session, call, tools, tool_runs, approved) => r,
                        () = cancel.cancelled() => return StepOutcome::Cancelled,
                    };
                    let result = match outcome {
                        ToolOutcome::Answer(text) => {
                            let text = bounded(request, call, text, limits.tool_answer_bytes());
                            report_result(request, call, &text);
                            text
                        }
                        ToolOutcome::NeedsApproval {
                            what,
                            subject,
                            rule,
                        } => {
                            report_status(request, call, "pending");
                            if let Err(e) = journal.append(&[json!({ "awaiting": call.id })]).await
                            {
                                return unwritten(&e);
                            }
                            let mut awaiting = json!({ "call": call.id, "rule": rule });
                            if let (Some(a), Some(s)) =
                                (awaiting.as_object_mut(), subject.as_object())
                            {
                                a.extend(s.clone());
                            }
                            // Escalated to a person (permission_denied): run again
                            // to approve it, skip the step, or abort the task.
                            return failed(
                                format!(
                                    "the agent wants to {what}, which the permission rules ask a person about ({rule}); run the step again to allow it"
                                ),
                                Failure::PermissionDenied,
                                Some(
                                    json!({ "selection": decision, "session": session.id, "awaiting": awaiting }),
                                ),
                            );
                        }
                        // A delegated child stopped: the step stops with it, and
                        // picks the child up when it runs again.
                        ToolOutcome::Stopped(outcome) => return outcome,
                    };
                    awaiting = None;
                    tool_runs += 1;
                    messages.push(Message::Tool {
                        tool_call_id: call.id.clone(),
                        content: result,
                    });
                } else if let Some(Message::Assistant {
                    content,
                    tool_calls,
                }) = messages.last()
                    && tool_calls.is_empty()
                    && messages.len() > mine
                {
                    let text = answer_text(&messages[mine..], content.as_deref());
                    let calls = count_calls(&messages[mine..]);
                    if limits.require_tool_call && calls == 0 {
                        return failed(
                            format!(
                                "the agent answered without calling any tool, and the step has require_tool_call = true; its answer: {}",
                                clip(&text, 200)
                            ),
                            Failure::Validation,
                            Some(
                                json!({ "selection": decision, "session": session.id, "text": text }),
                            ),
                        );
                    }
                    return StepOutcome::Passed {
                        output: Some(json!({
                            "selection": decision,
                            "policy": request.policy.describe(),
                            "session": session.id,
                            "text": text,
                            "turns": turns,
                            "tool_calls": count_calls(&messages[mine..]),
                            "usage": usage_of(
                                metered.iter().filter(|(at, _)| *at >= mine).map(|(_, u)| u),
                                &self.models,
                            ),
                        })),
                    };
                } else {
                    if budget_used >= budget {
                        // A person decides whether it goes on, and for how long.
                        let asked = tokio::select! {
                            a = more_turns(request, session, &messages, budget, max_turns) => a,
                            () = cancel.cancelled() => return StepOutcome::Cancelled,
                        };
                        match asked {
                            Grant::More(n) => {
                                if let Err(e) = journal.append(&[json!({ "budget": n })]).await {
                                    return unwritten(&e);
                                }
                                budget = n;
                                counted_from = messages.len();
                                continue;
                            }
                            Grant::Declined(why) => {
                                return failed(
                                    format!(
                                        "the agent did not finish within {budget} model turns, and {why}"
                                    ),
                                    Failure::Validation,
                                    None,
                                );
                            }
                            Grant::NobodyToAsk => {}
                        }
                        // Marked, so that resuming the step grants a fresh budget.
                        if let Err(e) = journal.append(&[json!({ "turn_limit": budget })]).await {
                            return unwritten(&e);
                        }
                        return failed(
                            format!(
                                "the agent did not finish within {budget} model turns; resume the step for {max_turns} more, or raise its `max_turns`"
                            ),
                            Failure::Validation,
                            None,
                        );
                    }
                    let by = serving
                        .checked_sub(1)
                        .and_then(|i| turn.fallbacks.get(i))
                        .unwrap_or(chat);
                    // The conversation's fit for a turn asking `choice`.
                    macro_rules! fit {
                        ($choice:expr) => {
                            Fit {
                                journal: &journal,
                                compacted: &mut compacted,
                                sized: &mut sized,
                                metered: &mut metered,
                                task: prompt,
                                mine,
                                tools: tools_tokens,
                                choice: $choice,
                            }
                        };
                    }
                    let next = fit!(None).size(&messages);
                    let over = tokio::select! {
                        o = self.hold_to_budgets(turn, session, &journal, &messages, &metered[..], mine, &mut grants, by, next) => o,
                        () = cancel.cancelled() => return StepOutcome::Cancelled,
                    };
                    if let Some(stopped) = over {
                        return stopped;
                    }
                    // A forced choice holds until the model has made that call.
                    let choice = forced_choice(limits.tool_choice.as_deref(), &messages[mine..]);
                    let mut fit = fit!(choice);
                    // A span per model turn, in the GenAI semantic conventions.
                    let span = tracing::info_span!(
                        "chat",
                        otel.name = %format!("chat {}", by.model()),
                        gen_ai.operation.name = "chat",
                        gen_ai.provider.name = by.provider(),
                        gen_ai.request.model = by.model(),
                        gen_ai.response.model = tracing::field::Empty,
                        gen_ai.response.id = tracing::field::Empty,
                        gen_ai.response.finish_reasons = tracing::field::Empty,
                        gen_ai.usage.input_tokens = tracing::field::Empty,
                        gen_ai.usage.output_tokens = tracing::field::Empty,
                        gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
                        rein.usage.estimated = tracing::field::Empty,
                        rein.step_id = %request.step.id,
                    );
                    let answer = tokio::select! {
                        a = tracing::Instrument::instrument(
                            self.ask_model(turn, session, &messages, &specs, &mut fit, &mut serving),
                            span.clone(),
                        ) => a,
                        () = cancel.cancelled() => return StepOutcome::Cancelled,
                    };
                    let response = match answer {
                        Ok(r) => r,
                        Err(outcome) => return outcome,
                    };
                    // An answer the stream put together wrong is not acted on,
                    // nor kept: the turn is asked again when the step is.
                    if let Some(problem) = malformed(&response.tool_calls) {
                        return failed(
                            format!(
                                "the model API's answer cannot be acted on: {problem}; nothing of it was run or journaled, and the turn is asked again when the step is retried"
                            ),
                            Failure::Http {
                                status: 502,
                                retry_after: None,
                            },
                            Some(
                                json!({ "session": session.id, "tool_calls": response.tool_calls }),
                            ),
                        );
                    }
                    let cut = response.finish_reason == "length";
                    let response_finish = response.finish_reason.clone();
                    if cut && (!limits.continue_at_length || !response.tool_calls.is_empty()) {
                        return failed(
                            "the model stopped at its output token limit (finish_reason `length`) before finishing its answer; raise the server's limit (max_tokens; llama.cpp's --n-predict) or set on_token_limit = \"continue\"".into(),
                            Failure::Validation,
                            Some(json!({ "selection": decision, "session": session.id, "partial": response.content })),
                        );
                    }
                    // A turn with nothing in it, in a step part that did
                    // nothing yet, is no answer (a server whose model crashed
                    // mid-stream ends a turn so): retryable, and not kept.
                    if response.content.trim().is_empty()
                        && response.tool_calls.is_empty()
                        && count_calls(&messages[mine..]) == 0
                    {
                        return failed(
                            "the model's answer was empty: no text and no tool call, and nothing done before it in this step; it was not journaled, and the turn is asked again when the step is retried (a model server that failed mid-answer can end a turn so)".into(),
                            Failure::Http {
                                status: 502,
                                retry_after: None,
                            },
                            Some(json!({ "selection": decision, "session": session.id, "empty_answer": true })),
                        );
                    }
                    request_id = response.request_id.clone();
                    // The model of the route that answered.
                    let by = serving
                        .checked_sub(1)
                        .and_then(|i| turn.fallbacks.get(i))
                        .unwrap_or(chat);
                    let turn = rein_protocol::TurnUsage {
                        provider: by.provider().to_owned(),
                        model: by.model().to_owned(),
                        served_model: response.served_model.clone(),
                        step: Some(request.step.id.clone()),
                        session: Some(session.id.to_string()),
                        usage: response
                            .usage
                            .unwrap_or_else(|| estimate(&messages, &specs, &response)),
                    };
                    if !turn.usage.estimated {
                        sized = Some((
                            messages.len(),
                            turn.usage.input_tokens + turn.usage.output_tokens,
                        ));
                    }
                    span.record(
                        "gen_ai.response.model",
                        turn.served_model.as_deref().unwrap_or(&turn.model),
                    );
                    if let Some(id) = &request_id {
                        span.record("gen_ai.response.id", id.as_str());
                    }
                    span.record("gen_ai.response.finish_reasons", response_finish.as_str());
                    // As integers (OTLP's are signed; a u64 would go as text).
                    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
                    span.record("gen_ai.usage.input_tokens", int(turn.usage.input_tokens));
                    span.record("gen_ai.usage.output_tokens", int(turn.usage.output_tokens));
                    span.record(
                        "gen_ai.usage.cache_read.input_tokens",
                        int(turn.usage.cached_input_tokens),
                    );
                    span.record("rein.usage.estimated", turn.usage.estimated);
                    metered.push((messages.len(), turn.clone()));
                    used = Some(turn);
                    forced = choice
                        .filter(|c| !matches!(*c, "auto" | "none"))
                        .map(str::to_owned);
                    messages.push(Message::Assistant {
                        content: (!response.content.is_empty()).then_some(response.content),
                        tool_calls: response.tool_calls,
                    });
                    if cut {
                        let newest = messages
                            .last()
                            .map(|m| turn_entry(m, request_id.take(), used.take(), forced.take()));
                        if let Err(e) = journal.append(newest.as_slice()).await {
                            return unwritten(&e);
                        }
                        messages.push(Message::User {
                            content: GO_ON.to_owned(),
                        });
                    }
                }
                // Durable before the next turn or tool call begins; a model
                // turn with the provider's id of its request.
                let newest = messages
                    .last()
                    .map(|m| turn_entry(m, request_id.take(), used.take(), forced.take()));
                if let Err(e) = journal.append(newest.as_slice()).await {
                    return unwritten(&e);
                }
            }
            failed(
                "the agent loop did not settle".into(),
                Failure::Internal,
                None,
            )
        })
    }
}
