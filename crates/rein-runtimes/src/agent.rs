//! Agent steps (`kind = "agent"`): the runtime the selection policy picks
//! does the work — a plugin's harness, or the built-in runtime `rein`, an agent
//! loop over an OpenAI-compatible chat API with tools confined to the task's
//! workspace.
//!
//! The built-in loop appends each model turn and each tool answer to the
//! step's journal before the next begins. An attempt resumed after a crash
//! reads it back: turns and tool calls already in it are not repeated; a tool
//! call that was running when rein stopped runs again.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rein_core::executor::{CommandOutput, StepOutcome, StepRequest};
use rein_core::harness::{
    AttemptEvent, AttemptParams, HarnessError, HarnessRegistry, RuntimePolicy, SelectionRequest,
    select,
};
use rein_core::recovery::Failure;
use rein_core::sessions::{SessionName, Sessions, TASK_ACTOR};
use rein_core::{ExecutorHealth, StepExecutor};
use rein_protocol::{
    AgentSessionInfo, BUILTIN_RUNTIME, Delegation, SelectionDecision, StepAction, TaskStep, Usage,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::anthropic::AnthropicConfig;
use crate::context::Compacted;
use crate::mcp::{CallOutcome, McpServers, StepMcp};
use crate::openai::{ChatClient, ChatConfig, ChatError, ChatResponse, Message, ToolCall, ToolSpec};
use crate::provider::{ModelClient, Providers};

/// Runs agent steps, and hands every other step to `commands`.
pub struct AgentExecutor {
    commands: Arc<dyn StepExecutor>,
    registry: Arc<HarnessRegistry>,
    policy: RuntimePolicy,
    providers: Providers,
    max_turns: usize,
    mcp_servers: McpServers,
    /// Prices and context windows, by `PROVIDER/MODEL`.
    models: Arc<Models>,
    /// The context windows servers said, or overflow errors named.
    windows: Arc<crate::context::Windows>,
    /// The models a step that names none falls back to (`PROVIDER/MODEL`).
    fallback_models: Vec<String>,
    /// What every task's model calls together may spend in a UTC day.
    daily_budget: Option<rein_protocol::Budget>,
}

/// What rein knows of each model, by `PROVIDER/MODEL`.
pub use rein_protocol::Models;

impl std::fmt::Debug for AgentExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentExecutor")
            .field("providers", &self.providers)
            .finish_non_exhaustive()
    }
}

/// The most model turns one agent step may take.
pub const MAX_TURNS: usize = 32;
/// How long a plugin's attempt may take when the step sets no timeout.
const ATTEMPT_DEADLINE: Duration = Duration::from_secs(30 * 60);
/// The most bytes of a file `read_file` returns.
const READ_LIMIT: usize = 64 * 1024;

impl AgentExecutor {
    pub fn new(
        commands: Arc<dyn StepExecutor>,
        registry: Arc<HarnessRegistry>,
        policy: RuntimePolicy,
        chat: ChatConfig,
    ) -> AgentExecutor {
        AgentExecutor {
            commands,
            registry,
            policy,
            providers: Providers {
                openai: chat,
                ..Providers::default()
            },
            max_turns: MAX_TURNS,
            mcp_servers: McpServers::new(),
            models: Arc::default(),
            windows: Arc::default(),
            fallback_models: Vec::new(),
            daily_budget: None,
        }
    }

    /// Models' prices (and context windows): a step's usage is costed with
    /// them; a model without is unpriced.
    pub fn with_models(mut self, models: Models) -> AgentExecutor {
        self.models = Arc::new(models);
        self
    }

    /// The models (`PROVIDER/MODEL`) an agent step that names none of its
    /// own falls back to, in order.
    pub fn with_fallback_models(mut self, models: Vec<String>) -> AgentExecutor {
        self.fallback_models = models;
        self
    }

    /// What every task's model calls together may spend in a UTC day
    /// (`daily_budget` in `rein.toml`).
    pub fn with_daily_budget(mut self, budget: Option<rein_protocol::Budget>) -> AgentExecutor {
        self.daily_budget = budget;
        self
    }

    /// The MCP servers the configuration declares, for steps that name one
    /// their plan does not declare.
    pub fn with_mcp_servers(mut self, servers: McpServers) -> AgentExecutor {
        self.mcp_servers = servers;
        self
    }

    /// Steps on `provider = "anthropic"` ask the Messages API with these
    /// settings (default: the Anthropic API, no key).
    pub fn with_anthropic(mut self, anthropic: AnthropicConfig) -> AgentExecutor {
        self.providers.anthropic = anthropic;
        self
    }

    /// At most `turns` model turns per agent step (default [`MAX_TURNS`]).
    pub fn with_max_turns(mut self, turns: usize) -> AgentExecutor {
        self.max_turns = turns.max(1);
        self
    }
}

#[async_trait]
impl StepExecutor for AgentExecutor {
    async fn execute(&self, request: StepRequest, cancel: CancellationToken) -> StepOutcome {
        match &request.step.action {
            StepAction::Agent { .. } => {
                // One rule set governs every action the step takes, whoever
                // asks for it: the configured rules and the step's own, for
                // its commands, its MCP calls, its runtime's permission
                // requests.
                let policy = match rein_core::permissions::for_step(&request.step, &request.policy)
                {
                    Ok(policy) => policy,
                    Err(detail) => {
                        return failed(
                            format!("the step's permissions are invalid: {detail}"),
                            Failure::PermissionDenied,
                            None,
                        );
                    }
                };
                let request = StepRequest {
                    policy: Arc::new(policy),
                    ..request
                };
                self.run_agent(&request, &cancel).await
            }
            _ => self.commands.execute(request, cancel).await,
        }
    }

    /// The task's sessions end; their executors are retired.
    async fn task_ended(&self, task: &rein_protocol::TaskId, sessions: &Sessions) {
        if let Err(e) = sessions.end_task(task, &self.registry).await {
            tracing::warn!(task = %task, error = %e, "cannot end the task's sessions");
        }
        self.commands.task_ended(task, sessions).await;
    }

    async fn probe(&self) -> ExecutorHealth {
        self.commands.probe().await
    }

    fn helper(
        &self,
        request: &StepRequest,
        helper: &rein_core::executor::Helper,
    ) -> Result<(tokio::process::Command, rein_sandbox::Reach), String> {
        self.commands.helper(request, helper)
    }
}

/// The step cannot go on without recording what it did.
fn unwritten(e: &rein_core::EngineError) -> StepOutcome {
    failed(
        format!("cannot write the step's journal: {e}"),
        Failure::Internal,
        None,
    )
}

fn failed(error: String, failure: Failure, output: Option<Value>) -> StepOutcome {
    StepOutcome::Failed {
        error,
        output,
        failure,
    }
}

/// The tools offered to the model, by name.
fn tool_specs(names: &[String]) -> Vec<ToolSpec> {
    let path = json!({ "type": "object", "properties": { "path": { "type": "string", "description": "a path inside the workspace" } }, "required": ["path"] });
    names
        .iter()
        .filter_map(|name| {
            let (description, parameters) = match name.as_str() {
                "read_file" => (
                    "Read a file of the workspace (64 KiB at a time: give `offset` to read on)",
                    json!({ "type": "object", "properties": {
                        "path": { "type": "string", "description": "a path inside the workspace" },
                        "offset": { "type": "integer", "minimum": 0, "description": "the byte to start at (default 0)" } },
                        "required": ["path"] }),
                ),
                "list_dir" => ("List a directory of the workspace", path.clone()),
                "write_file" => (
                    "Write a file of the workspace (replacing it)",
                    json!({ "type": "object", "properties": {
                        "path": { "type": "string" }, "content": { "type": "string" } },
                        "required": ["path", "content"] }),
                ),
                "run_command" => (
                    "Run a shell command in the workspace, sandboxed",
                    json!({ "type": "object", "properties": { "command": { "type": "string" } }, "required": ["command"] }),
                ),
                "delegate" => (
                    "Hand a self-contained piece of work to a fresh helper agent with your tools; its final answer is the result",
                    json!({ "type": "object", "properties": { "prompt": { "type": "string", "description": "the work, with everything the helper needs to know" } }, "required": ["prompt"] }),
                ),
                _ => return None,
            };
            Some(ToolSpec {
                name: name.clone(),
                description: description.into(),
                parameters,
            })
        })
        .collect()
}

impl AgentExecutor {
    async fn run_agent(&self, request: &StepRequest, cancel: &CancellationToken) -> StepOutcome {
        let StepAction::Agent {
            prompt,
            provider,
            model,
            runtime,
            tools,
            session,
            limits,
            mcp,
            network,
        } = &request.step.action
        else {
            return failed("not an agent step".into(), Failure::Internal, None);
        };
        let servers = match crate::mcp::resolve(mcp, &self.mcp_servers) {
            Ok(s) => s,
            Err((e, failure)) => return failed(e, failure, None),
        };
        // What the step is given is decided again as it runs, the configured
        // servers included (the plan's were decided when the task was made).
        // `request.policy` holds the step's own rules already (`execute`).
        let permission = rein_core::permissions::decide_agent(
            *network,
            servers.iter().filter_map(|u| u.server.as_ref()),
            &request.policy,
        );
        if let Some(refusal) = rein_core::permissions::refusal(&request.step, permission.as_ref()) {
            return failed(
                refusal,
                Failure::PermissionDenied,
                permission.map(|p| json!({ "permission": p })),
            );
        }
        let Some(sessions) = &request.sessions else {
            return failed(
                "an agent step needs the store's sessions".into(),
                Failure::Internal,
                None,
            );
        };
        let provider = provider.clone().unwrap_or_else(|| "openai".into());
        let model = model
            .clone()
            .unwrap_or_else(|| self.providers.default_model(&provider));
        let name = match session {
            Some(n) => SessionName::Shared(n),
            None => SessionName::Own,
        };
        let session = match sessions
            .open(
                &request.task_id,
                &request.step.id,
                name,
                &format!("{provider}/{model}"),
            )
            .await
        {
            Ok(s) => s,
            Err(e) => return unwritten(&e),
        };
        let wanted = SelectionRequest {
            session_runtime: session.pinned_runtime.clone(),
            step_runtime: runtime.clone(),
            session: Some(session.id.to_string()),
            ..self.policy.request(
                &provider,
                Some(model.clone()),
                &self.providers.facts(&provider),
            )
        };
        let mut decision = match select(&self.registry, &self.policy, &wanted).await {
            Ok(d) => d,
            Err(e) => return failed(e.to_string(), Failure::Validation, None),
        };
        // A plugin's harness is recorded before its attempt (a reset goes
        // through it, even after a crash mid-attempt); the built-in runtime
        // needs no such trace and is recorded with the turns.
        if decision.selected != BUILTIN_RUNTIME
            && session.runtime.as_deref() != Some(decision.selected.as_str())
        {
            let selected = decision.selected.clone();
            let changed = sessions
                .change(session.id.as_str(), TASK_ACTOR, "session.runtime", |s| {
                    s.runtime = Some(selected.clone());
                    Ok(Some(()))
                })
                .await;
            if let Err(e) = changed {
                return unwritten(&e);
            }
        }
        if decision.selected != BUILTIN_RUNTIME {
            return self
                .run_plugin(
                    request, cancel, sessions, &session, decision, prompt, tools, servers,
                )
                .await;
        }
        // A step's `stream` holds for its model and the models it falls
        // back to.
        let chat = match self.providers.client(&provider, &model) {
            Ok(c) => c.streaming(limits.stream),
            Err(e) => return failed(e, Failure::Validation, None),
        };
        // The models that serve a turn the step's model cannot, in order.
        let chain = if limits.fallback_models.is_empty() {
            &self.fallback_models
        } else {
            &limits.fallback_models
        };
        let mut fallbacks = Vec::new();
        for name in chain {
            if *name == format!("{provider}/{model}") {
                continue;
            }
            let client = name
                .split_once('/')
                .ok_or_else(|| format!("`{name}` is not a model named as \"PROVIDER/MODEL\""))
                .and_then(|(p, m)| self.providers.client(p, m));
            match client {
                Ok(c) => fallbacks.push(c.streaming(limits.stream)),
                Err(e) => {
                    return failed(
                        format!("fallback model `{name}`: {e}"),
                        Failure::Validation,
                        None,
                    );
                }
            }
        }
        decision.fallback_models = fallbacks
            .iter()
            .map(|c| format!("{}/{}", c.provider(), c.model()))
            .collect();
        let servers = if servers.is_empty() {
            None
        } else {
            let started = tokio::select! {
                s = StepMcp::start(servers, Arc::clone(&self.commands), request, *network) => s,
                () = cancel.cancelled() => return StepOutcome::Cancelled,
            };
            match started {
                Ok(s) => Some(s),
                Err((e, failure)) => return failed(e, failure, None),
            }
        };
        let turn = Turn {
            request,
            cancel,
            sessions,
            chat: &chat,
            fallbacks: &fallbacks,
            decision: &decision,
            limits,
            mcp: servers.as_ref(),
        };
        // The step's own timeout bounds the whole loop (each request has the
        // model's idle timeout); what was journaled stays for the next attempt.
        let outcome = match request.step.timeout_ms.map(Duration::from_millis) {
            Some(limit) => {
                match tokio::time::timeout(limit, self.converse(&turn, &session, prompt, tools))
                    .await
                {
                    Ok(outcome) => outcome,
                    Err(_) => failed(
                        format!(
                            "the agent step did not finish within its timeout of {}",
                            humantime::format_duration(limit)
                        ),
                        Failure::Timeout,
                        None,
                    ),
                }
            }
            None => self.converse(&turn, &session, prompt, tools).await,
        };
        let mut outcome = outcome;
        if let Some(servers) = servers {
            if let StepOutcome::Passed { output: Some(o) } = &mut outcome {
                o["mcp"] = servers.describe();
            }
            servers.close().await;
        }
        if let StepOutcome::Passed { output: Some(o) } = &outcome {
            let turns = o["turns"].as_u64().unwrap_or(0);
            if let Err(e) = sessions
                .took_turns(session.id.as_str(), BUILTIN_RUNTIME, None, turns)
                .await
            {
                return unwritten(&e);
            }
        }
        outcome
    }

    /// A plugin's harness runs the attempt; its failure is reported, never
    /// replayed on another runtime.
    #[allow(clippy::too_many_arguments)]
    async fn run_plugin(
        &self,
        request: &StepRequest,
        cancel: &CancellationToken,
        sessions: &Sessions,
        session: &AgentSessionInfo,
        decision: SelectionDecision,
        prompt: &str,
        tools: &[String],
        mcp_servers: Vec<rein_protocol::McpUse>,
    ) -> StepOutcome {
        let Some(registered) = self.registry.get(&decision.selected) else {
            return failed(
                format!("harness `{}` vanished", decision.selected),
                Failure::Internal,
                None,
            );
        };
        // The plugin's executor controller, if any: a current executor for
        // this session, a stale one retired first.
        let executor = match sessions
            .ensure_executor(
                session.id.as_str(),
                &self.registry,
                &registered.plugin.id,
                cancel,
            )
            .await
        {
            Ok(h) => h,
            Err(_) if cancel.is_cancelled() => return StepOutcome::Cancelled,
            Err(e) => {
                return failed(
                    format!(
                        "the executor of session {} could not be made ready: {e}",
                        session.id
                    ),
                    Failure::Connection,
                    None,
                );
            }
        };
        let (events, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let attempt = registered.harness.run_attempt(AttemptParams {
            attempt_id: format!(
                "{}.{}.{}",
                request.task_id, request.step.id, request.attempt
            ),
            prompt: prompt.to_owned(),
            tools: tools.to_vec(),
            session_key: session.id.to_string(),
            workspace: request.workspace.clone(),
            deadline: request
                .step
                .timeout_ms
                .map_or(ATTEMPT_DEADLINE, Duration::from_millis),
            cancel: cancel.clone(),
            events,
            asker: request.asker.clone(),
            journal: request.journal.clone(),
            mcp_servers,
            policy: Arc::clone(&request.policy),
        });
        // Agent events go into the task's log as they come (with a run to
        // record them); the partial reply is kept for a failure's output.
        let mut partial = String::new();
        let mut agent_events = Vec::new();
        let mut take = |e: AttemptEvent| match e {
            AttemptEvent::PartialReply(t) => partial.push_str(&t),
            AttemptEvent::Agent(v) => match &request.asker {
                Some(asker) => asker.report(v),
                None => agent_events.push(v),
            },
        };
        tokio::pin!(attempt);
        let attempt = loop {
            tokio::select! {
                done = &mut attempt => break done,
                Some(e) = rx.recv() => take(e),
            }
        };
        while let Ok(e) = rx.try_recv() {
            take(e);
        }
        let output = |text: &str, details: &Value| {
            let mut output = json!({
                "selection": decision,
                "policy": request.policy.describe(),
                "plugin": registered.plugin.id,
                "session": session.id,
                "executor": executor.as_ref().map(|h| h.generation()),
                "text": text,
                "agent_events": agent_events,
                // Side effects inside the plugin's runtime are its own account.
                "side_effects": "unsupported",
            });
            // What the runtime reported besides (an ACP agent: its tool calls,
            // permission answers, and side effects item by item).
            if let (Some(out), Some(more)) = (output.as_object_mut(), details.as_object()) {
                for (k, v) in more {
                    if !matches!(k.as_str(), "selection" | "policy" | "text") {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            output
        };
        match attempt {
            Ok(result) => {
                if let Err(e) = sessions
                    .took_turns(session.id.as_str(), &decision.selected, None, 1)
                    .await
                {
                    return unwritten(&e);
                }
                let mut out = output(&result.text, &result.details);
                // A turn that ended with nothing — no text, no tool call, no
                // side effect — is no success (an agent whose upstream model
                // failed mid-stream ends its turn so): retryable.
                if hollow(&result.text, &out) {
                    return failed(
                        format!(
                            "the agent of `{}` ended its turn with nothing: no text, no tool call, no file change (stop reason `{}`); the step is retried",
                            decision.selected, result.stop_reason
                        ),
                        Failure::Http {
                            status: 502,
                            retry_after: None,
                        },
                        Some(out),
                    );
                }
                // What the runtime says its calls used is metered like a
                // turn of rein's own: journaled (so counted once), and in
                // the step's output.
                if let Some((usage, model)) = result.usage {
                    let used = rein_protocol::TurnUsage {
                        provider: decision.provider.clone(),
                        model: decision
                            .model
                            .clone()
                            .unwrap_or_else(|| decision.selected.clone()),
                        served_model: model,
                        step: Some(request.step.id.clone()),
                        session: Some(session.id.to_string()),
                        usage,
                    };
                    let entry = json!({ "usage": used, "runtime": decision.selected });
                    let journal = sessions.journal(session);
                    let written = async {
                        journal.load().await?;
                        journal.append(&[entry]).await
                    };
                    if let Err(e) = written.await {
                        return unwritten(&e);
                    }
                    out["usage"] = usage_of(std::iter::once(&used), &self.models);
                }
                StepOutcome::Passed { output: Some(out) }
            }
            Err(HarnessError::Cancelled) => StepOutcome::Cancelled,
            Err(e) => {
                let failure = match &e {
                    HarnessError::TimedOut { .. } => Failure::Timeout,
                    HarnessError::Refused { .. } => Failure::PermissionDenied,
                    // An agent reporting its model API's error is classified
                    // by that error: a 429 waits, a 5xx is retried, a 400 is
                    // the request's fault.
                    HarnessError::Failed { message, .. } => match upstream_status(message) {
                        Some(status) => Failure::Http {
                            status,
                            retry_after: None,
                        },
                        None => Failure::Internal,
                    },
                    _ => Failure::Internal,
                };
                failed(e.to_string(), failure, Some(output(&partial, &Value::Null)))
            }
        }
    }

    /// The built-in loop: ask the model, run the tools it calls, until it
    /// answers without calling any. The conversation is the session's (after
    /// its last reset); a step joining a shared session adds its prompt after
    /// what the earlier steps said, marked as its own.
    fn converse<'a>(
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
                    compacted = Some(Compacted {
                        at: c["at"]
                            .as_u64()
                            .and_then(|n| usize::try_from(n).ok())
                            .unwrap_or(0)
                            .min(messages.len()),
                        summary: c["summary"].as_str().unwrap_or_default().to_owned(),
                    });
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
                    let next = Fit {
                        journal: &journal,
                        compacted: &mut compacted,
                        sized: &mut sized,
                        metered: &mut metered,
                        task: prompt,
                        mine,
                        tools: tools_tokens,
                        choice: None,
                    }
                    .size(&messages);
                    let over = tokio::select! {
                        o = self.hold_to_budgets(turn, session, &journal, &messages, &metered[..], mine, &mut grants, by, next) => o,
                        () = cancel.cancelled() => return StepOutcome::Cancelled,
                    };
                    if let Some(stopped) = over {
                        return stopped;
                    }
                    // A forced choice holds until the model has made that call.
                    let choice = forced_choice(limits.tool_choice.as_deref(), &messages[mine..]);
                    let mut fit = Fit {
                        journal: &journal,
                        compacted: &mut compacted,
                        sized: &mut sized,
                        metered: &mut metered,
                        task: prompt,
                        mine,
                        tools: tools_tokens,
                        choice,
                    };
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

    /// The answer of the step's model to the conversation, or, when it
    /// cannot serve the turn, of its fallback models in order: a rate limit
    /// (429; its `Retry-After` is waited once, up to [`RETRY_AFTER_CAP`]),
    /// an overload (503, 529), a server error that persists after
    /// [`SERVER_RETRIES`] retries, an unreachable server, or a conversation
    /// too long for its window move the turn on to the next model. The
    /// model that served stays `serving` for the attempt's next turns.
    /// Without fallbacks, a failure is the step's, for its recovery policy.
    async fn ask_model(
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
    async fn ask_one(
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

    /// Holds what was spent, and what the next request of `by` takes
    /// (`next` input tokens), to each budget in force — the step's, the
    /// task's, the day's — and asks a person about one the turn would pass:
    /// a grant raises it (journaled, so a resumed step keeps it), a refusal
    /// or nobody to ask stops the step naming the budget.
    #[allow(clippy::too_many_arguments)]
    async fn hold_to_budgets(
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
    async fn compact(
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

    /// `delegate {prompt}`: a child session on the same, locked model route,
    /// run as this step (its identity, rules and cancellation), whose final
    /// answer is the call's result. The child is keyed by the call, so a
    /// resumed step picks up the child where it stopped, and takes the answer
    /// of one that finished instead of running it again.
    async fn delegate(
        &self,
        turn: &Turn<'_>,
        parent: &AgentSessionInfo,
        call: &ToolCall,
        tools: &[String],
    ) -> ToolOutcome {
        let args: Value = serde_json::from_str(&call.function.arguments).unwrap_or(Value::Null);
        let Some(prompt) = args["prompt"].as_str().filter(|p| !p.trim().is_empty()) else {
            return ToolOutcome::Answer("error: `prompt` is required: the work to delegate".into());
        };
        let request = turn.request;
        let child = match turn
            .sessions
            .open(
                &request.task_id,
                &request.step.id,
                SessionName::Delegated(Delegation {
                    parent: parent.id.clone(),
                    step_id: request.step.id.clone(),
                    call_id: call.id.clone(),
                    answer: None,
                }),
                parent.route.as_deref().unwrap_or_default(),
            )
            .await
        {
            Ok(c) => c,
            Err(e) => return ToolOutcome::Stopped(unwritten(&e)),
        };
        if let Some(answer) = child.delegation.as_ref().and_then(|d| d.answer.clone()) {
            return ToolOutcome::Answer(answer);
        }
        let report = |state: &str| {
            if let Some(asker) = &request.asker {
                asker.report(json!({ "kind": "delegation", "state": state, "session": child.id, "parent": parent.id, "call": call.id }));
            }
        };
        report("started");
        // A child delegates no further, and is not held to the step's choice
        // of tool.
        let child_tools: Vec<String> = tools.iter().filter(|t| *t != "delegate").cloned().collect();
        let child_limits = rein_protocol::AgentLimits {
            tool_choice: None,
            require_tool_call: false,
            ..turn.limits.clone()
        };
        let child_turn = Turn {
            limits: &child_limits,
            ..*turn
        };
        match self
            .converse(&child_turn, &child, prompt, &child_tools)
            .await
        {
            StepOutcome::Passed { output } => {
                let output = output.unwrap_or_default();
                let text = output["text"].as_str().unwrap_or_default().to_owned();
                let turns = output["turns"].as_u64().unwrap_or(0);
                let recorded = async {
                    turn.sessions
                        .took_turns(child.id.as_str(), BUILTIN_RUNTIME, None, turns)
                        .await?;
                    turn.sessions.answered(child.id.as_str(), &text).await
                };
                if let Err(e) = recorded.await {
                    return ToolOutcome::Stopped(unwritten(&e));
                }
                report("answered");
                ToolOutcome::Answer(text)
            }
            StepOutcome::Failed {
                error,
                output,
                failure,
            } => {
                if matches!(failure, Failure::PermissionDenied) {
                    return ToolOutcome::Stopped(StepOutcome::Failed {
                        error: format!("delegated session {}: {error}", child.id),
                        output,
                        failure,
                    });
                }
                ToolOutcome::Answer(format!(
                    "error: the delegated session {} failed: {error}",
                    child.id
                ))
            }
            StepOutcome::Cancelled => ToolOutcome::Stopped(StepOutcome::Cancelled),
        }
    }

    /// Runs one tool call; its answer (or what went wrong) is text for the
    /// model, unless a person must approve it first.
    async fn run_tool(
        &self,
        turn: &Turn<'_>,
        session: &AgentSessionInfo,
        call: &ToolCall,
        allowed: &[String],
        n: usize,
        approved: Option<&str>,
    ) -> ToolOutcome {
        let (request, cancel) = (turn.request, turn.cancel);
        if call.function.name == "delegate" && allowed.iter().any(|t| t == "delegate") {
            return self.delegate(turn, session, call, allowed).await;
        }
        if let Some(mcp) = turn.mcp
            && let Some((server, tool)) = mcp.tool_of(&call.function.name)
        {
            return call_mcp(
                request,
                mcp,
                server,
                tool,
                &call.function.arguments,
                approved,
            )
            .await;
        }
        if call.function.name == "run_command"
            && let Ok(args) = serde_json::from_str::<Value>(&call.function.arguments)
            && let Some(command) = args["command"].as_str()
            && allowed.iter().any(|t| t == "run_command")
        {
            return self
                .run_command(request, cancel, command, n, approved)
                .await;
        }
        ToolOutcome::Answer(self.run_file_tool(request, call, allowed).await)
    }

    /// The file tools, and what is wrong with any other call.
    async fn run_file_tool(
        &self,
        request: &StepRequest,
        call: &ToolCall,
        allowed: &[String],
    ) -> String {
        let name = call.function.name.as_str();
        if !allowed.iter().any(|t| t == name) {
            return format!("error: the tool `{name}` is not available to this step");
        }
        let args: Value = match serde_json::from_str(&call.function.arguments) {
            Ok(v) => v,
            Err(e) => return format!("error: the arguments are not JSON ({e})"),
        };
        let text = |key: &str| args[key].as_str().map(str::to_owned);
        let ws = &request.workspace;
        match name {
            "read_file" => match text("path").map(|p| resolve(ws, &p)) {
                Some(Ok(path)) => match ws.read(&path) {
                    Ok(bytes) => {
                        let from = args["offset"]
                            .as_u64()
                            .map_or(0, |o| usize::try_from(o).unwrap_or(usize::MAX))
                            .min(bytes.len());
                        let to = (from + READ_LIMIT).min(bytes.len());
                        let mut out = String::from_utf8_lossy(&bytes[from..to]).into_owned();
                        if to < bytes.len() {
                            out.push_str(&format!(
                                "\n[… {} more bytes: read on with offset {to}]",
                                bytes.len() - to
                            ));
                        }
                        out
                    }
                    Err(e) => format!("error: cannot read it: {e}"),
                },
                Some(Err(e)) => format!("error: {e}"),
                None => "error: `path` is required".into(),
            },
            "write_file" => match (text("path").map(|p| resolve(ws, &p)), text("content")) {
                (Some(Ok(path)), Some(content)) => match ws.write(&path, content.as_bytes()) {
                    Ok(()) => format!("wrote {} bytes", content.len()),
                    Err(e) => format!("error: cannot write it: {e}"),
                },
                (Some(Err(e)), _) => format!("error: {e}"),
                _ => "error: `path` and `content` are required".into(),
            },
            "list_dir" => match text("path").map(|p| resolve(ws, &p)) {
                Some(Ok(path)) => match ws.list(&path) {
                    Ok(names) => names.join("\n"),
                    Err(e) => format!("error: cannot list it: {e}"),
                },
                Some(Err(e)) => format!("error: {e}"),
                None => "error: `path` is required".into(),
            },
            "run_command" => "error: `command` is required".into(),
            "delegate" => "error: `prompt` is required: the work to delegate".into(),
            other => format!("error: unknown tool `{other}`"),
        }
    }

    /// `run_command`: the step's permission rules decide; an allowed command
    /// runs the way command steps run (sandboxed).
    async fn run_command(
        &self,
        request: &StepRequest,
        cancel: &CancellationToken,
        command: &str,
        n: usize,
        approved: Option<&str>,
    ) -> ToolOutcome {
        let decision = request.policy.check_script(command);
        let note = match permitted(
            decision,
            approved,
            format!("run `{command}`"),
            json!({ "command": command }),
        ) {
            Ok(note) => note,
            Err(refused) => return refused,
        };
        let mut step = TaskStep::command(format!("{}.tool{}", request.step.id, n + 1), command);
        step.timeout_ms = request.step.timeout_ms;
        if let StepAction::Command { network, .. } = &mut step.action {
            *network = step_network(request);
        }
        if approved.is_some() {
            // A person approved it (the step's escalation stands for the
            // command's permit), so the executor's own check lets it through.
            step.depends_on = vec![rein_core::permissions::permit_id(&step.id)];
        }
        let tool = StepRequest {
            step: Arc::new(step),
            journal: None,
            asker: None,
            ..request.clone()
        };
        let (code, output) = match self.commands.execute(tool, cancel.clone()).await {
            StepOutcome::Passed { output } => (Some(0), output),
            StepOutcome::Failed { error, output, .. } => {
                (None, output.or_else(|| Some(json!({ "error": error }))))
            }
            StepOutcome::Cancelled => return ToolOutcome::Answer("error: cancelled".into()),
        };
        let out: Option<CommandOutput> = output
            .as_ref()
            .and_then(|o| serde_json::from_value(o.clone()).ok());
        let answer = match out {
            Some(o) => json!({
                "exit_code": o.exit_code.or(code),
                "stdout": o.stdout_tail,
                "stderr": o.stderr_tail,
            })
            .to_string(),
            None => json!({ "exit_code": code, "error": output }).to_string(),
        };
        ToolOutcome::Answer(format!("{answer}{note}"))
    }
}

/// What a person said when the step used up its turns.
enum Grant {
    /// Go on, for this many more turns.
    More(usize),
    /// Stop, and why (who declined).
    Declined(String),
    /// Nobody can be asked (the step runs without a line to a person).
    NobodyToAsk,
}

/// The most turns one grant may give.
const MOST_TURNS: usize = 1000;

/// Asks a person whether the agent, which used its `budget` turns without
/// finishing, may go on: `N more turns` for a few N, or `stop`. The question
/// is the same each time the step asks it at this point of its conversation,
/// so a step run again after rein stopped gets the answer already given.
async fn more_turns(
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

/// Whether the agent step may use the network (its commands, its stdio MCP
/// servers).
fn step_network(request: &StepRequest) -> bool {
    matches!(request.step.action, StepAction::Agent { network: true, .. })
}

/// What the permission rules' `decision` on a tool call comes to: go on
/// (with a note when a person approved it), or the call's outcome — refused,
/// or waiting for a person, who is asked to allow `what`.
fn permitted(
    decision: rein_protocol::PermissionDecision,
    approved: Option<&str>,
    what: String,
    subject: Value,
) -> Result<String, ToolOutcome> {
    match (decision.verdict, approved) {
        (rein_protocol::Verdict::Allow, _) => Ok(String::new()),
        (rein_protocol::Verdict::Deny, _) => Err(ToolOutcome::Answer(format!(
            "refused by the permission rules: {}",
            decision.rule
        ))),
        (rein_protocol::Verdict::Ask, Some(who)) => Ok(format!(" (approved by {who})")),
        (rein_protocol::Verdict::Ask, None) => Err(ToolOutcome::NeedsApproval {
            what,
            subject,
            rule: decision.rule,
        }),
    }
}

/// A call of an MCP tool: the permission rules decide on `mcp:SERVER/TOOL`,
/// then the server answers.
async fn call_mcp(
    request: &StepRequest,
    mcp: &StepMcp,
    server: &str,
    tool: &str,
    arguments: &str,
    approved: Option<&str>,
) -> ToolOutcome {
    let decision = request.policy.check_mcp(server, tool);
    let note = match permitted(
        decision,
        approved,
        format!("call the MCP tool `{server}/{tool}`"),
        json!({ "mcp": format!("{server}/{tool}"), "arguments": arguments }),
    ) {
        Ok(note) => note,
        Err(refused) => return refused,
    };
    match mcp.call(server, tool, arguments).await {
        CallOutcome::Answer(text) => ToolOutcome::Answer(format!("{text}{note}")),
        CallOutcome::NotMine => ToolOutcome::Answer(format!(
            "error: `{server}` is not one of the step's MCP servers"
        )),
    }
}

/// What a tool call came to.
enum ToolOutcome {
    /// Text for the model.
    Answer(String),
    /// The permission rules ask a person first, about `what` (`run `ls``).
    NeedsApproval {
        what: String,
        subject: Value,
        rule: String,
    },
    /// The step stops here (a delegated child stopped, or its record could
    /// not be written).
    Stopped(StepOutcome),
}

/// What one step's turns run with.
#[derive(Clone, Copy)]
struct Turn<'a> {
    request: &'a StepRequest,
    cancel: &'a CancellationToken,
    sessions: &'a Sessions,
    chat: &'a ModelClient,
    /// The models that serve a turn `chat` cannot, in order.
    fallbacks: &'a [ModelClient],
    decision: &'a SelectionDecision,
    limits: &'a rein_protocol::AgentLimits,
    /// The step's MCP servers, if it names any.
    mcp: Option<&'a StepMcp>,
}

/// What people granted past a step's budgets: each scope's raised budget
/// (the latest grant) and how many grants it had.
#[derive(Debug, Default)]
struct Grants(std::collections::BTreeMap<&'static str, (rein_protocol::Budget, usize)>);

impl Grants {
    /// A journaled `budget_grant`.
    fn take(&mut self, grant: &Value) {
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

    fn raised(&self, scope: crate::budget::Scope) -> Option<rein_protocol::Budget> {
        self.0.get(scope.as_str()).map(|(b, _)| *b)
    }

    fn count(&self, scope: crate::budget::Scope) -> usize {
        self.0.get(scope.as_str()).map_or(0, |(_, n)| *n)
    }
}

/// Why a model did not answer a turn.
enum Refusal {
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
const SERVER_RETRIES: u32 = 2;
const SERVER_BACKOFF: Duration = Duration::from_millis(500);

/// Where a conversation stands against its model's context window.
struct Fit<'a> {
    journal: &'a rein_core::journal::Journal,
    /// The older part, summarised.
    compacted: &'a mut Option<Compacted>,
    /// The size up to a model turn as its server counted it (its position,
    /// its input and output tokens).
    sized: &'a mut Option<(usize, u64)>,
    metered: &'a mut Vec<(usize, rein_protocol::TurnUsage)>,
    /// The request of the step that runs, restated after a summary that
    /// covers it.
    task: &'a str,
    /// Where the step's part of the conversation begins.
    mine: usize,
    /// The tokens the tools' declarations take, by rein's estimate.
    tools: u64,
    /// The turn's `tool_choice`.
    choice: Option<&'a str>,
}

impl Fit<'_> {
    /// The step's request, when the summary covers it.
    fn task(&self) -> Option<&str> {
        self.compacted
            .as_ref()
            .filter(|c| self.mine < c.at)
            .map(|_| self.task)
    }

    /// The tokens the conversation's next request takes: what the server
    /// counted up to its last turn and rein's estimate of what came after,
    /// or rein's estimate of all it sends (`tools`: its tools' declarations).
    fn size(&self, messages: &[Message]) -> u64 {
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
const GO_ON: &str = "Your answer was cut off at the output token limit. Continue exactly where it stopped, without repeating anything.";

/// The marker a step of a shared session (or a delegated child) writes where
/// its part of the conversation begins; a step's own session needs none.
fn turn_marker(session: &AgentSessionInfo, step: &str) -> Option<String> {
    (session.shared || session.delegation.is_some()).then(|| step.to_owned())
}

/// An isolated completion served by the built-in runtime (spec §4): one
/// prompt-only request with a literally empty tool list, its output checked
/// like any isolated completion's.
pub async fn builtin_isolated_completion(
    chat: &ChatClient,
    prompt: &str,
    system: Option<&str>,
    policy: rein_core::harness::isolated::OutputTextPolicy,
) -> Result<String, rein_core::harness::isolated::CompletionError> {
    use rein_core::harness::isolated::{CompletionError, CompletionOutput, ContentPart, validate};
    let mut messages = Vec::new();
    if let Some(system) = system {
        messages.push(Message::System {
            content: system.to_owned(),
        });
    }
    messages.push(Message::User {
        content: prompt.to_owned(),
    });
    let response = chat
        .complete(&messages, &[], |_| {})
        .await
        .map_err(|e| CompletionError::Failed(e.to_string()))?;
    let mut content = vec![ContentPart::Text(response.content)];
    content.extend(
        response
            .tool_calls
            .into_iter()
            .map(|c| ContentPart::ToolCall {
                name: c.function.name,
            }),
    );
    validate(
        &CompletionOutput {
            content,
            stop_reason: response.finish_reason,
            usage: response.usage,
        },
        policy,
    )
}

/// A path the model gave, inside the workspace (`..`, absolute paths
/// elsewhere and symlinks out are refused), relative to it: the file tools
/// open it beneath the pinned workspace ([`rein_sandbox::Pinned`]).
fn resolve(workspace: &rein_sandbox::Pinned, path: &str) -> Result<std::path::PathBuf, String> {
    rein_sandbox::workspace::relative(workspace, path).map_err(|e| e.to_string())
}

/// The tool calls of the last model turn that have no answer yet.
fn pending_calls(messages: &[Message]) -> Vec<ToolCall> {
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
fn entry(message: &Message, request_id: Option<String>) -> Value {
    turn_entry(message, request_id, None, None)
}

/// Whether a runtime's turn produced nothing: no text, no event (a tool
/// call, a plan), and in what it reported no tool call and no side effect.
fn hollow(text: &str, output: &Value) -> bool {
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
fn upstream_status(message: &str) -> Option<u16> {
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
fn malformed(calls: &[ToolCall]) -> Option<String> {
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
fn forced_choice<'a>(choice: Option<&'a str>, part: &[Message]) -> Option<&'a str> {
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
fn turn_entry(
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
fn estimate(messages: &[Message], specs: &[ToolSpec], response: &ChatResponse) -> Usage {
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
fn usage_of<'a>(
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
fn answer_text(part: &[Message], last: Option<&str>) -> String {
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

/// At most `n` characters of `text`, marked when cut.
/// Reports a tool call the model asked for, as it starts, in the shape of an
/// ACP `tool_call` update (what an external agent's updates are recorded as),
/// so that every runtime's calls read alike in the task's log.
fn report_call(request: &StepRequest, call: &ToolCall) {
    let Some(asker) = &request.asker else { return };
    let input: Value = serde_json::from_str(&call.function.arguments).unwrap_or(Value::Null);
    let name = call.function.name.as_str();
    // What the call is about, for its title: a path or a command.
    let about = ["path", "command"]
        .iter()
        .find_map(|k| input[*k].as_str())
        .map(|a| format!(" {}", clip(a, 80)))
        .unwrap_or_default();
    let kind = match name {
        "read_file" | "list_dir" => "read",
        "write_file" => "edit",
        "run_command" => "execute",
        _ => "other",
    };
    asker.report(json!({
        "sessionUpdate": "tool_call",
        "toolCallId": call.id,
        "title": format!("{name}{about}"),
        "kind": kind,
        "status": "in_progress",
        "rawInput": input,
    }));
}

/// Where, inside the workspace, tool answers too long for the model are kept.
pub const TOOL_ANSWERS: &str = ".rein/tool-answers";

/// A tool answer as the model is sent it (and the journal keeps it): whole
/// up to `limit` bytes; past that, its first `limit` bytes and a note that
/// says it was cut and where all of it is: a file of the workspace, under
/// [`TOOL_ANSWERS`], that `read_file` reads on from an `offset`.
fn bounded(request: &StepRequest, call: &ToolCall, text: String, limit: usize) -> String {
    if text.len() <= limit {
        return text;
    }
    let mut cut = limit;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let safe = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect()
    };
    let name = format!("{}-{}.txt", safe(&request.step.id), safe(&call.id));
    let relative = std::path::Path::new(TOOL_ANSWERS).join(name);
    let kept = match request.workspace.write(&relative, text.as_bytes()) {
        Ok(()) => format!(
            "all of it is in the workspace file `{0}`: read on with read_file {{\"path\": \"{0}\", \"offset\": {cut}}}",
            relative.display()
        ),
        Err(e) => format!("the rest could not be kept ({e})"),
    };
    format!(
        "{}\n[rein: this answer was cut at {cut} of its {} bytes (the step's max_tool_answer_bytes is {limit}); {kept}]",
        &text[..cut],
        text.len()
    )
}

/// Reports how a tool call ended: `failed` when its answer is an error.
fn report_result(request: &StepRequest, call: &ToolCall, answer: &str) {
    let Some(asker) = &request.asker else { return };
    let status = if answer.starts_with("error") {
        "failed"
    } else {
        "completed"
    };
    asker.report(json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": call.id,
        "status": status,
        "rawOutput": { "text": clip(answer, 2000) },
    }));
}

/// Reports that a tool call waits (for a person, who decides whether it runs).
fn report_status(request: &StepRequest, call: &ToolCall, status: &str) {
    if let Some(asker) = &request.asker {
        asker.report(json!({
            "sessionUpdate": "tool_call_update",
            "toolCallId": call.id,
            "status": status,
        }));
    }
}

fn clip(text: &str, n: usize) -> String {
    match text.char_indices().nth(n) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

fn count_calls(messages: &[Message]) -> usize {
    messages
        .iter()
        .filter(|m| matches!(m, Message::Tool { .. }))
        .count()
}

/// A failed model request as a step failure recovery understands.
fn chat_failure(e: ChatError) -> StepOutcome {
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

#[cfg(test)]
mod tests {
    use super::upstream_status;

    #[test]
    fn an_agents_report_of_its_model_apis_error_names_the_status() {
        assert_eq!(
            upstream_status(
                "Internal error ({\"details\":\"API Error: 529 {\\\"type\\\":\\\"error\\\"}\"})"
            ),
            Some(529)
        );
        assert_eq!(
            upstream_status("request failed with status code 502"),
            Some(502)
        );
        assert_eq!(upstream_status("HTTP 404 from the gateway"), Some(404));
        assert_eq!(
            upstream_status("{\"type\":\"rate_limit_error\"}"),
            Some(429)
        );
        assert_eq!(upstream_status("the model is Overloaded"), Some(529));
        // Numbers that are no status, and no error kind: nothing.
        assert_eq!(upstream_status("API Error: 42 things"), None);
        assert_eq!(upstream_status("status 200 but the tool failed"), None);
        assert_eq!(upstream_status("the agent exited: exit status: 1"), None);
    }
}
