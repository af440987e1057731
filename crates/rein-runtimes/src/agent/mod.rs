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
use rein_core::harness::delegation::{DelegateAsk, DelegatedScope, authorize_session};
use rein_core::harness::{
    AttemptEvent, AttemptParams, HarnessError, HarnessRegistry, Registered, RuntimePolicy,
    SelectionRequest, select,
};
use rein_core::recovery::Failure;
use rein_core::sessions::{SessionName, Sessions, TASK_ACTOR};
use rein_core::{ExecutorHealth, StepExecutor};
use rein_protocol::{
    AgentSessionInfo, BUILTIN_RUNTIME, Delegation, SelectionDecision, StepAction, TaskStep, Usage,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

mod ask;
mod budgets;
mod converse;
mod tools;

pub use ask::RETRY_AFTER_CAP;
use budgets::*;
use converse::*;
pub use tools::TOOL_ANSWERS;
use tools::*;

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

/// The most bytes one image may have.
pub const MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;

/// A step's images read from its workspace (the plan checked their paths and
/// kinds): each one's bytes in base64 with its MIME type. One that cannot be
/// read, or is too large, is named.
fn read_images(
    workspace: &rein_sandbox::Pinned,
    paths: &[String],
) -> Result<Vec<rein_protocol::plugin::AttemptImage>, String> {
    use base64::Engine as _;
    paths
        .iter()
        .map(|path| {
            let mime = rein_core::plan::image_type(path)
                .ok_or_else(|| format!("image `{path}` is not a PNG, JPEG, GIF or WebP file"))?;
            let bytes = workspace
                .read(std::path::Path::new(path))
                .map_err(|e| format!("image `{path}` cannot be read in the workspace: {e}"))?;
            if bytes.len() > MAX_IMAGE_BYTES {
                return Err(format!(
                    "image `{path}` is {} bytes, more than the {MAX_IMAGE_BYTES} an image may have",
                    bytes.len()
                ));
            }
            Ok(rein_protocol::plugin::AttemptImage {
                mime_type: mime.to_owned(),
                data: base64::engine::general_purpose::STANDARD.encode(&bytes),
                path: path.clone(),
            })
        })
        .collect()
}

fn failed(error: String, failure: Failure, output: Option<Value>) -> StepOutcome {
    StepOutcome::Failed {
        error,
        output,
        failure,
    }
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
            images,
        } = &request.step.action
        else {
            return failed("not an agent step".into(), Failure::Internal, None);
        };
        let images = match read_images(&request.workspace, images) {
            Ok(i) => i,
            Err(e) => return failed(e, Failure::Validation, None),
        };
        let servers = match crate::mcp::resolve(mcp, &self.mcp_servers) {
            Ok(s) => s,
            Err((e, failure)) => return failed(e, failure, None),
        };
        // What the step is given is decided again as it runs, the configured
        // servers included (the plan's were decided when the task was made).
        // `request.policy` holds the step's own rules already (`execute`).
        let permission = rein_core::permissions::strictest(
            rein_core::permissions::decide_agent(
                *network,
                servers.iter().filter_map(|u| u.server.as_ref()),
                &request.policy,
            )
            .into_iter()
            // What the step declares it needs, decided again as it runs.
            .chain(rein_core::permissions::required(
                &request.step,
                &request.policy,
            ))
            .collect(),
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
        // A session handed to another plugin runs there, if the hand-over
        // still holds (rules 22–23, asked before every turn).
        if let Some(handed) = &session.delegated_execution {
            return match self.handed(&session, &handed.plugin) {
                Ok(delegated) => {
                    self.run_plugin(
                        request,
                        cancel,
                        sessions,
                        &session,
                        decision,
                        Some(delegated),
                        prompt,
                        tools,
                        servers,
                        images,
                    )
                    .await
                }
                Err(refused) => failed(refused, Failure::PermissionDenied, None),
            };
        }
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
                    request, cancel, sessions, &session, decision, None, prompt, tools, servers,
                    images,
                )
                .await;
        }
        if !images.is_empty() {
            // Never dropped: the step is refused, saying where images go.
            return failed(
                format!(
                    "the step gives {} image(s), and the built-in runtime does not send images to models: run it on a harness that takes them (`runtime = \"HARNESS\"`; `rein harness list` shows them)",
                    images.len()
                ),
                Failure::Validation,
                Some(json!({ "selection": decision })),
            );
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

    /// Whether `session`, handed to `plugin`, may run there now: the scope
    /// and the delegate's harness, or why not (what to do included).
    pub(super) fn handed<'r>(
        &'r self,
        session: &AgentSessionInfo,
        plugin: &str,
    ) -> Result<(DelegatedScope, &'r Registered), String> {
        authorize_session(&self.registry, session, plugin, &DelegateAsk::default()).map_err(
            |why| {
                format!(
                    "session {} is handed to plugin `{plugin}`, and that no longer holds: {why}; take it back with `rein sessions delegate {} --take-back`",
                    session.id, session.id
                )
            },
        )
    }

    /// A plugin's harness runs the attempt (the delegate's, scoped to the
    /// owner, for a session handed to another plugin); its failure is
    /// reported, never replayed on another runtime.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn run_plugin(
        &self,
        request: &StepRequest,
        cancel: &CancellationToken,
        sessions: &Sessions,
        session: &AgentSessionInfo,
        decision: SelectionDecision,
        delegated: Option<(DelegatedScope, &Registered)>,
        prompt: &str,
        tools: &[String],
        mcp_servers: Vec<rein_protocol::McpUse>,
        images: Vec<rein_protocol::plugin::AttemptImage>,
    ) -> StepOutcome {
        let (registered, scope) = match delegated {
            Some((scope, runner)) => (runner, Some(scope)),
            None => match self.registry.get(&decision.selected) {
                Some(r) => (r, None),
                None => {
                    return failed(
                        format!("harness `{}` vanished", decision.selected),
                        Failure::Internal,
                        None,
                    );
                }
            },
        };
        // The plugin's executor controller, if any: a current executor for
        // this session, a stale one retired first.
        // The controller of the harness's own plugin, or of a plugin whose
        // activation names the harness (rule 10).
        let controller = self
            .registry
            .controller_for(&decision.selected)
            .unwrap_or_else(|| registered.plugin.id.clone());
        let executor = match sessions
            .ensure_executor(session.id.as_str(), &self.registry, &controller, cancel)
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
            images,
            delegated_execution: scope.as_ref().map(Into::into),
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
                "delegated_execution": scope.as_ref().map(rein_protocol::plugin::DelegatedScope::from),
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
    use rein_core::harness::isolated::{CompletionError, CompletionOutput, validate};
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
    let content = crate::completion::content_parts(response.content, response.tool_calls);
    validate(
        &CompletionOutput {
            content,
            stop_reason: response.finish_reason,
            usage: response.usage,
        },
        policy,
    )
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
