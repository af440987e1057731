//! Out-of-process harness plugins: a manifest (`plugin.toml`) names a program
//! that speaks newline-delimited JSON-RPC 2.0 over its stdin and stdout (see
//! `docs/src/agents/plugin-protocol.md`). rein starts it on first use, and again after it
//! died. A plugin that exits, sends something that is not JSON-RPC, or does not
//! answer within its deadline fails the call in flight with an error that says
//! which; it is stopped, and rein goes on.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rein_core::harness::executor::{
    ExecutorBinding, ExecutorContext, ExecutorController, ExecutorError,
};
use rein_core::harness::isolated::{
    CompletionAuth, CompletionError, CompletionOutput, ContentPart, IsolatedParams,
};
use rein_core::harness::{
    AgentHarness, AgentSession, AttemptEvent, AttemptParams, AttemptResult, HarnessError,
    HarnessRegistry, PluginInfo, RegistrationError, ResetError,
};
use rein_protocol::plugin::{
    AgentEventParams, CREDENTIAL_ERROR, ExecutorParams, HarnessDeclaration, InitializeParams,
    InitializeResult, IsolatedCompletionParams, IsolatedCompletionResult, PLUGIN_PROTOCOL_VERSION,
    PartialReplyParams, PluginManifest, PluginProtocol, ResetParams, RunAttemptParams,
    RunAttemptResult, SESSION_CLEANUP_ERROR, SupportsParams, WireAuth, WireContent,
};
use rein_protocol::{Support, SupportContext};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

/// How long a call may take unless the manifest says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest line a plugin may send.
const MAX_LINE: usize = 4 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    #[error("plugin manifest {path}: {message}")]
    Manifest { path: String, message: String },
    #[error("plugin `{plugin}` cannot be started ({program}): {message}")]
    Start {
        plugin: String,
        program: String,
        message: String,
    },
    #[error("plugin `{plugin}` did not answer {method} within {ms} ms; it was stopped")]
    TimedOut {
        plugin: String,
        method: String,
        ms: u64,
    },
    #[error("plugin `{plugin}` {why}")]
    Broken { plugin: String, why: String },
    #[error("plugin `{plugin}` answered {method} with error {code}: {message}")]
    Rpc {
        plugin: String,
        method: String,
        code: i64,
        message: String,
    },
    #[error("plugin `{plugin}` answered {method} with a result rein cannot read: {message}")]
    BadResult {
        plugin: String,
        method: String,
        message: String,
    },
}

/// Reads and checks a plugin manifest; returns it with its directory (relative
/// program paths are that directory's).
pub fn load_manifest(path: &Path) -> Result<(PluginManifest, PathBuf), PluginError> {
    let bad = |message: String| PluginError::Manifest {
        path: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let manifest: PluginManifest = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
    if manifest.id.trim().is_empty() {
        return Err(bad("`id` must not be empty".into()));
    }
    if manifest.command.first().is_none_or(|p| p.trim().is_empty()) {
        return Err(bad(
            "`command` must name the program to run, e.g. command = [\"python3\", \"plugin.py\"]"
                .into(),
        ));
    }
    if let Some(exec) = &manifest.executor
        && !Path::new(&exec.workspace_directory).is_absolute()
    {
        return Err(bad(format!(
            "`executor.workspace_directory` must be absolute, not `{}`",
            exec.workspace_directory
        )));
    }
    if manifest.protocol == PluginProtocol::Acp {
        if manifest.executor.is_some() {
            return Err(bad(
                "an ACP agent (`protocol = \"acp\"`) has no executor controller: remove `[executor]`"
                    .into(),
            ));
        }
        if let Some(h) = manifest.harnesses.iter().find(|h| h.isolated_completion) {
            return Err(bad(format!(
                "harness `{}`: an ACP agent serves no isolated completions: remove `isolated_completion`",
                h.id
            )));
        }
        if manifest.harnesses.is_empty() {
            return Err(bad(
                "an ACP agent must declare the harness id it serves: add [[harnesses]] with an `id`"
                    .into(),
            ));
        }
    }
    // A bare file name's directory is the current one (its parent is "",
    // which no process can start in); made absolute, it stays that one.
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    Ok((manifest, dir))
}

/// Registers a plugin's harnesses (and executor controller) in `registry`;
/// returns what the registry refused. Nothing is started until it is used.
pub fn register_plugin(
    registry: &mut HarnessRegistry,
    manifest: PluginManifest,
    dir: PathBuf,
) -> Vec<RegistrationError> {
    let info = PluginInfo {
        id: manifest.id.clone(),
        name: if manifest.name.is_empty() {
            manifest.id.clone()
        } else {
            manifest.name.clone()
        },
        description: manifest.description.clone(),
        activates: manifest.activation.on_agent_harnesses.clone(),
    };
    if manifest.protocol == PluginProtocol::Acp {
        return registry.load(info, |api| {
            for decl in &manifest.harnesses {
                let _ = api.register_agent_harness(Arc::new(crate::acp::AcpHarness::new(
                    decl.clone(),
                    manifest.id.clone(),
                    manifest.command.clone(),
                    manifest.env.clone(),
                    dir.clone(),
                )));
            }
        });
    }
    let process = Arc::new(PluginProcess::new(manifest, dir));
    registry.load(info, |api| {
        for decl in &process.manifest.harnesses {
            let _ = api.register_agent_harness(Arc::new(PluginHarness {
                decl: decl.clone(),
                process: Arc::clone(&process),
            }));
        }
        if let Some(exec) = &process.manifest.executor {
            let _ = api.register_executor_controller(Arc::new(PluginExecutor {
                workspace: PathBuf::from(&exec.workspace_directory),
                process: Arc::clone(&process),
            }));
        }
    })
}

/// Why a call did not get a result.
enum Failure {
    Error { code: i64, message: String },
    Broken(String),
}

type Reply = oneshot::Sender<Result<Value, Failure>>;

/// What the reader of a plugin's stdout shares with its callers.
#[derive(Default)]
struct Shared {
    pending: Mutex<HashMap<u64, Reply>>,
    /// Where each running attempt's notifications go (the process's, shared).
    attempts: Attempts,
    /// Why the connection cannot be used any more.
    broken: Mutex<Option<String>>,
}

type Attempts = Arc<Mutex<HashMap<String, mpsc::UnboundedSender<AttemptEvent>>>>;

impl Shared {
    /// Marks the connection unusable and fails every call waiting on it.
    fn break_with(&self, why: String) {
        if let Ok(mut b) = self.broken.lock()
            && b.is_none()
        {
            *b = Some(why.clone());
        }
        let waiting: Vec<Reply> = self
            .pending
            .lock()
            .map(|mut p| p.drain().map(|(_, r)| r).collect())
            .unwrap_or_default();
        for reply in waiting {
            let _ = reply.send(Err(Failure::Broken(why.clone())));
        }
    }

    fn is_broken(&self) -> bool {
        self.broken.lock().map(|b| b.is_some()).unwrap_or(true)
    }
}

struct Connection {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    shared: Arc<Shared>,
}

/// One plugin's process, started on first use.
pub struct PluginProcess {
    manifest: PluginManifest,
    dir: PathBuf,
    timeout: Duration,
    conn: tokio::sync::Mutex<Option<Connection>>,
    next_id: AtomicU64,
    attempts: Attempts,
}

impl std::fmt::Debug for PluginProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginProcess")
            .field("plugin", &self.manifest.id)
            .finish()
    }
}

impl PluginProcess {
    fn new(manifest: PluginManifest, dir: PathBuf) -> PluginProcess {
        let timeout = manifest
            .timeout_ms
            .map_or(DEFAULT_TIMEOUT, Duration::from_millis);
        PluginProcess {
            manifest,
            dir,
            timeout,
            conn: tokio::sync::Mutex::new(None),
            next_id: AtomicU64::new(1),
            attempts: Attempts::default(),
        }
    }

    fn id(&self) -> &str {
        &self.manifest.id
    }

    /// Stops the program (a reload): calls waiting on it fail, saying so,
    /// and the next call starts it anew.
    async fn restart(&self) {
        stop(
            &mut *self.conn.lock().await,
            Some("was reloaded while the call waited"),
        );
    }

    /// Starts the program and its stdout reader.
    fn spawn(&self) -> Result<Connection, PluginError> {
        let (mut command, path) = crate::manifest::manifest_command(
            &self.dir,
            &self.manifest.command,
            &self.manifest.env,
        );
        let mut child = command.spawn().map_err(|e| PluginError::Start {
            plugin: self.id().to_owned(),
            program: path.display().to_string(),
            message: e.to_string(),
        })?;
        let shared = Arc::new(Shared {
            attempts: Arc::clone(&self.attempts),
            ..Shared::default()
        });
        let (Some(stdin), Some(stdout), stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(PluginError::Start {
                plugin: self.id().to_owned(),
                program: path.display().to_string(),
                message: "its stdio could not be connected".into(),
            });
        };
        tokio::spawn(read_replies(stdout, Arc::clone(&shared)));
        if let Some(stderr) = stderr {
            let plugin = self.id().to_owned();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::info!(plugin = %plugin, "{line}");
                }
            });
        }
        Ok(Connection {
            child,
            stdin,
            shared,
        })
    }

    /// Sends one request on a live connection; `None` connection: started.
    async fn send(
        &self,
        conn: &mut Option<Connection>,
        method: &str,
        params: &Value,
    ) -> Result<oneshot::Receiver<Result<Value, Failure>>, PluginError> {
        let c = match conn {
            Some(c) => c,
            None => conn.insert(self.spawn()?),
        };
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (reply, rx) = oneshot::channel();
        if let Ok(mut p) = c.shared.pending.lock() {
            p.insert(id, reply);
        }
        let mut line = serde_json::to_vec(
            &json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }),
        )
        .unwrap_or_default();
        line.push(b'\n');
        if let Err(e) = c.stdin.write_all(&line).await {
            c.shared
                .break_with(format!("stopped reading its input ({e})"));
        }
        let _ = c.stdin.flush().await;
        Ok(rx)
    }

    /// A request and its answer within `timeout`. A plugin that died is started
    /// again first (and initialized); one that does not answer is stopped.
    async fn call(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, PluginError> {
        let rx = {
            let mut conn = self.conn.lock().await;
            if conn.as_ref().is_some_and(|c| c.shared.is_broken()) {
                stop(&mut conn, None);
            }
            if conn.is_none()
                && let Err(e) = self.initialize(&mut conn).await
            {
                stop(&mut conn, None);
                return Err(e);
            }
            self.send(&mut conn, method, &params).await?
        };
        let answer = self.wait(rx, method, timeout).await;
        if let Err(PluginError::TimedOut { .. }) = &answer {
            // It is stuck: stop it; the next call starts it afresh.
            stop(
                &mut *self.conn.lock().await,
                Some("was stopped: it did not answer in time"),
            );
        }
        answer
    }

    /// Starts the plugin and agrees on the protocol version.
    async fn initialize(&self, conn: &mut Option<Connection>) -> Result<(), PluginError> {
        let init = json!(InitializeParams {
            protocol_version: PLUGIN_PROTOCOL_VERSION,
            plugin_id: self.id().to_owned(),
        });
        let rx = self.send(conn, "initialize", &init).await?;
        let answer = self.wait(rx, "initialize", self.timeout).await?;
        let init: InitializeResult = self.decode("initialize", answer)?;
        if init.protocol_version != PLUGIN_PROTOCOL_VERSION {
            return Err(PluginError::Broken {
                plugin: self.id().to_owned(),
                why: format!(
                    "speaks plugin protocol {}, rein speaks {PLUGIN_PROTOCOL_VERSION}",
                    init.protocol_version
                ),
            });
        }
        Ok(())
    }

    async fn wait(
        &self,
        rx: oneshot::Receiver<Result<Value, Failure>>,
        method: &str,
        timeout: Duration,
    ) -> Result<Value, PluginError> {
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(Ok(value))) => Ok(value),
            Ok(Ok(Err(Failure::Error { code, message }))) => Err(PluginError::Rpc {
                plugin: self.id().to_owned(),
                method: method.to_owned(),
                code,
                message,
            }),
            Ok(Ok(Err(Failure::Broken(why)))) => Err(PluginError::Broken {
                plugin: self.id().to_owned(),
                why,
            }),
            Ok(Err(_)) => Err(PluginError::Broken {
                plugin: self.id().to_owned(),
                why: "went away".into(),
            }),
            Err(_) => Err(PluginError::TimedOut {
                plugin: self.id().to_owned(),
                method: method.to_owned(),
                ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            }),
        }
    }

    fn decode<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        value: Value,
    ) -> Result<T, PluginError> {
        serde_json::from_value(value).map_err(|e| PluginError::BadResult {
            plugin: self.id().to_owned(),
            method: method.to_owned(),
            message: e.to_string(),
        })
    }

    /// Sends a notification (no answer expected) if the plugin is running.
    async fn notify(&self, method: &str, params: Value) {
        let mut conn = self.conn.lock().await;
        if let Some(c) = conn.as_mut() {
            let mut line = serde_json::to_vec(
                &json!({ "jsonrpc": "2.0", "method": method, "params": params }),
            )
            .unwrap_or_default();
            line.push(b'\n');
            let _ = c.stdin.write_all(&line).await;
            let _ = c.stdin.flush().await;
        }
    }
}

/// Stops the plugin's process, if it runs, failing what waits on it with `why`.
fn stop(conn: &mut Option<Connection>, why: Option<&str>) {
    if let Some(mut c) = conn.take() {
        if let Some(why) = why {
            c.shared.break_with(why.to_owned());
        }
        let _ = c.child.start_kill();
    }
}

/// Reads a plugin's stdout: answers go to their callers, notifications to their
/// attempts; anything else breaks the connection, as does the end of output.
async fn read_replies(stdout: tokio::process::ChildStdout, shared: Arc<Shared>) {
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        let read = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_line(&mut line)
            .await;
        match read {
            Ok(0) => {
                shared.break_with("exited (its output ended)".into());
                return;
            }
            Ok(n) if n > MAX_LINE => {
                shared.break_with(format!("sent a line longer than {MAX_LINE} bytes"));
                return;
            }
            Ok(_) => {}
            Err(e) => {
                shared.break_with(format!("sent output rein cannot read ({e})"));
                return;
            }
        }
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        if let Err(why) = dispatch(text, &shared) {
            let snippet: String = text.chars().take(80).collect();
            shared.break_with(format!(
                "sent something that is not JSON-RPC 2.0 ({why}): `{snippet}`"
            ));
            return;
        }
    }
}

/// Routes one message from the plugin.
fn dispatch(text: &str, shared: &Shared) -> Result<(), String> {
    let msg: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if msg.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err("no `\"jsonrpc\": \"2.0\"`".into());
    }
    if let Some(method) = msg.get("method").and_then(Value::as_str) {
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        let event = match method {
            "harness/partialReply" => {
                let p: PartialReplyParams =
                    serde_json::from_value(params).map_err(|e| format!("{method}: {e}"))?;
                Some((p.attempt_id, AttemptEvent::PartialReply(p.text)))
            }
            "harness/agentEvent" => {
                let p: AgentEventParams =
                    serde_json::from_value(params).map_err(|e| format!("{method}: {e}"))?;
                Some((p.attempt_id, AttemptEvent::Agent(p.event)))
            }
            other => {
                tracing::debug!(method = other, "a plugin notification rein does not handle");
                None
            }
        };
        if let Some((attempt, event)) = event
            && let Some(tx) = shared
                .attempts
                .lock()
                .ok()
                .and_then(|a| a.get(&attempt).cloned())
        {
            let _ = tx.send(event);
        }
        return Ok(());
    }
    let id = msg
        .get("id")
        .and_then(Value::as_u64)
        .ok_or("a message with neither `method` nor a numeric `id`")?;
    let outcome = if let Some(result) = msg.get("result") {
        Ok(result.clone())
    } else if let Some(error) = msg.get("error") {
        Err(Failure::Error {
            code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
        })
    } else {
        return Err("an answer with neither `result` nor `error`".into());
    };
    let reply = shared.pending.lock().ok().and_then(|mut p| p.remove(&id));
    if let Some(reply) = reply {
        let _ = reply.send(outcome);
    }
    Ok(())
}

/// A harness a plugin serves.
struct PluginHarness {
    decl: HarnessDeclaration,
    process: Arc<PluginProcess>,
}

#[async_trait]
impl AgentHarness for PluginHarness {
    crate::manifest::declared_harness!();

    /// What the plugin says; a plugin that cannot answer does not support it,
    /// and the reason says why.
    async fn supports(&self, ctx: &SupportContext) -> Support {
        let params = json!(SupportsParams {
            harness_id: self.decl.id.clone(),
            context: ctx.clone(),
        });
        let answer = self
            .process
            .call("harness/supports", params, self.process.timeout)
            .await
            .and_then(|v| {
                self.process
                    .decode::<rein_protocol::plugin::SupportsResult>("harness/supports", v)
            })
            .map(Support::from);
        answer.unwrap_or_else(|e| Support::Unsupported {
            reason: Some(e.to_string()),
            fallback_runtime: None,
        })
    }

    async fn run_attempt(&self, params: AttemptParams) -> Result<AttemptResult, HarnessError> {
        let harness = self.decl.id.clone();
        if let Ok(mut a) = self.process.attempts.lock() {
            a.insert(params.attempt_id.clone(), params.events.clone());
        }
        let wire = json!(RunAttemptParams {
            harness_id: harness.clone(),
            attempt_id: params.attempt_id.clone(),
            prompt: params.prompt.clone(),
            tools: params.tools.clone(),
            session_key: params.session_key.clone(),
            workspace: params.workspace.path.display().to_string(),
            deadline_ms: u64::try_from(params.deadline.as_millis()).unwrap_or(u64::MAX),
            mcp_servers: params.mcp_servers.clone(),
            images: params.images.clone(),
            delegated_execution: params.delegated_execution.clone(),
        });
        let call = self
            .process
            .call("harness/runAttempt", wire, params.deadline);
        let outcome = tokio::select! {
            answer = call => Some(answer),
            () = params.cancel.cancelled() => None,
        };
        if let Ok(mut a) = self.process.attempts.lock() {
            a.remove(&params.attempt_id);
        }
        let Some(answer) = outcome else {
            self.process
                .notify("harness/cancel", json!({ "attemptId": params.attempt_id }))
                .await;
            return Err(HarnessError::Cancelled);
        };
        let result = answer
            .and_then(|v| {
                self.process
                    .decode::<RunAttemptResult>("harness/runAttempt", v)
            })
            .map_err(|e| match e {
                PluginError::TimedOut { ms, .. } => HarnessError::TimedOut {
                    harness: harness.clone(),
                    ms,
                },
                other => HarnessError::Failed {
                    harness: harness.clone(),
                    message: other.to_string(),
                },
            })?;
        Ok(AttemptResult {
            text: result.text,
            stop_reason: result.stop_reason,
            details: Value::Null,
            usage: result.usage.map(|u| {
                (
                    rein_protocol::Usage {
                        input_tokens: u.input_tokens,
                        cached_input_tokens: u.cached_input_tokens.min(u.input_tokens),
                        output_tokens: u.output_tokens,
                        reasoning_tokens: u.reasoning_tokens,
                        estimated: false,
                    },
                    u.model,
                )
            }),
        })
    }

    async fn run_isolated_completion_v2(
        &self,
        params: &IsolatedParams,
    ) -> Option<Result<CompletionOutput, CompletionError>> {
        if !self.decl.isolated_completion {
            return None;
        }
        Some(self.isolated(params).await)
    }

    async fn restart(&self) {
        self.process.restart().await;
    }

    async fn reset(&self, session: &AgentSession) -> Result<(), ResetError> {
        let params = json!(ResetParams {
            harness_id: self.decl.id.clone(),
            session_key: session.key.clone(),
            native_session_id: session.native_session_id.clone(),
        });
        match self
            .process
            .call("harness/reset", params, self.process.timeout)
            .await
        {
            Ok(_) => Ok(()),
            Err(PluginError::Rpc { code, message, .. }) if code == SESSION_CLEANUP_ERROR => {
                Err(ResetError::Cleanup(message))
            }
            Err(e) => Err(ResetError::Other(e.to_string())),
        }
    }
}

impl PluginHarness {
    async fn isolated(&self, params: &IsolatedParams) -> Result<CompletionOutput, CompletionError> {
        let (auth, profile) = match &params.auth {
            CompletionAuth::Host {
                transport_model,
                profile,
            } => (
                WireAuth::Host {
                    transport_model: transport_model.clone(),
                    profile_id: profile.id.clone(),
                    credential: profile.credential.clone(),
                },
                profile.id.clone(),
            ),
            CompletionAuth::Harness { auth_plan, profile } => (
                WireAuth::Harness {
                    auth_plan: auth_plan.clone(),
                    profile_id: profile.id.clone(),
                    credential: profile.credential.clone(),
                },
                profile.id.clone(),
            ),
        };
        let wire = json!(IsolatedCompletionParams {
            harness_id: self.decl.id.clone(),
            prompt: params.prompt.clone(),
            system: params.system.clone(),
            auth,
        });
        // Current before the credentials are handed over.
        params.ctx.assert_current()?;
        let answer = self
            .process
            .call("completion/isolated", wire, self.process.timeout)
            .await;
        let value = match answer {
            Ok(v) => v,
            Err(PluginError::Rpc { code, message, .. }) if code == CREDENTIAL_ERROR => {
                return Err(CompletionError::Credential { profile, message });
            }
            Err(e) => return Err(CompletionError::Failed(e.to_string())),
        };
        let result: IsolatedCompletionResult = self
            .process
            .decode("completion/isolated", value)
            .map_err(|e| CompletionError::Failed(e.to_string()))?;
        if let Some(ms) = result.request_duration_ms {
            params.ctx.on_request_complete(ms);
        }
        Ok(CompletionOutput {
            content: result
                .content
                .into_iter()
                .map(|c| match c {
                    WireContent::Text { text } => ContentPart::Text(text),
                    WireContent::Thinking { text } => ContentPart::Thinking(text),
                    WireContent::ToolCall { name } => ContentPart::ToolCall { name },
                })
                .collect(),
            stop_reason: result.stop_reason,
            usage: None,
        })
    }
}

/// A plugin's executor controller.
struct PluginExecutor {
    workspace: PathBuf,
    process: Arc<PluginProcess>,
}

impl PluginExecutor {
    async fn operate(
        &self,
        method: &str,
        binding: &ExecutorBinding,
        ctx: &ExecutorContext,
    ) -> Result<(), ExecutorError> {
        ctx.assert_current()?;
        let params = json!(ExecutorParams {
            session_key: binding.session_key.clone(),
            agent_id: binding.agent_id.clone(),
            native_session_id: binding.native_session_id.clone(),
            environment_id: binding.environment_id.clone(),
            remote_url: binding.remote_url.clone(),
            workspace_directory: binding.workspace_directory.display().to_string(),
        });
        let call = self.process.call(method, params, self.process.timeout);
        let answer = tokio::select! {
            answer = call => answer,
            () = ctx.cancel.cancelled() => {
                return Err(ExecutorError::Failed {
                    plugin: self.process.id().to_owned(),
                    message: format!("{method} was cancelled"),
                });
            }
        };
        answer.map(|_| ()).map_err(|e| ExecutorError::Failed {
            plugin: self.process.id().to_owned(),
            message: e.to_string(),
        })
    }
}

#[async_trait]
impl ExecutorController for PluginExecutor {
    fn workspace_directory(&self) -> &Path {
        &self.workspace
    }

    async fn restart(&self) {
        self.process.restart().await;
    }

    async fn ensure(
        &self,
        binding: &ExecutorBinding,
        ctx: &ExecutorContext,
    ) -> Result<(), ExecutorError> {
        self.operate("executor/ensure", binding, ctx).await
    }

    async fn retire(
        &self,
        binding: &ExecutorBinding,
        ctx: &ExecutorContext,
    ) -> Result<(), ExecutorError> {
        self.operate("executor/retire", binding, ctx).await
    }
}
