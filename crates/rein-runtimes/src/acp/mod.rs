//! The ACP runtime: an external agent that speaks the Agent Client Protocol
//! over its stdin and stdout, with rein as the client.
//!
//! An attempt starts the agent, `initialize`s it (rein offers the
//! `fs/read_text_file` and `fs/write_text_file` callbacks, confined to the
//! task's workspace), opens a session — `session/load` of the one an earlier
//! attempt of the same rein session opened, when the agent can load sessions —
//! and sends the prompt as one `session/prompt` turn.
//!
//! - `session/update` notifications: message chunks are the partial reply;
//!   everything else goes into the task's log as `agent_update` events, in
//!   order with the step's questions.
//! - `session/request_permission` becomes a question to a person (an approval
//!   request of the running step); the decision goes back as the ACP outcome:
//!   approve with an option → that option, approve without one → `allow_once`,
//!   deny or expiry → `reject_once`, skip → `session/cancel` and then
//!   `cancelled`: the turn is cancelled (whatever the agent ends it with) and
//!   the step fails as a permission refusal.
//! - Cancelling the attempt sends `session/cancel`, answers open permission
//!   requests `cancelled`, and gives the agent a moment to end its turn before
//!   it is killed (its whole process group).
//!
//! What the agent does by itself (its own edits and commands) rein cannot see:
//! those side effects are recorded as `unsupported`. Writes made through rein's
//! `fs/write_text_file` callback are rein's own record (`callback`).

mod client;
mod permission;

use client::*;
use permission::*;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    CancelNotification, ClientCapabilities, ContentBlock, EnvVariable, FileSystemCapabilities,
    HttpHeader, InitializeRequest, LoadSessionRequest, McpServer, McpServerHttp, McpServerStdio,
    NewSessionRequest, PromptRequest, ReadTextFileRequest, ReadTextFileResponse,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse,
    SelectedPermissionOutcome, SessionNotification, SessionUpdate, StopReason, TextContent,
    WriteTextFileRequest, WriteTextFileResponse,
};
use agent_client_protocol::{Agent, ByteStreams, Client, Responder};
use async_trait::async_trait;
use rein_core::executor::{Asker, Question};
use rein_core::harness::{AgentHarness, AttemptEvent, AttemptParams, AttemptResult, HarnessError};
use rein_protocol::plugin::HarnessDeclaration;
use rein_protocol::{
    ApprovalContext, ApprovalStatus, Decision, Support, SupportContext, Trigger, Verdict,
};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

/// The step journal's entry naming the agent's session.
const SESSION_ENTRY: &str = "acp_session";
/// How long the agent has to answer `initialize` and open a session.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the agent has to end its turn after `session/cancel`.
const CANCEL_GRACE: Duration = Duration::from_secs(3);
/// How much of the end of the agent's stderr an error quotes.
const STDERR_TAIL: usize = 2048;
/// The most agent events one attempt reports (the rest are counted).
const MAX_EVENTS: usize = 1000;

/// One harness served by an external ACP agent.
pub struct AcpHarness {
    decl: HarnessDeclaration,
    plugin: String,
    command: Vec<String>,
    env: BTreeMap<String, String>,
    dir: PathBuf,
    /// The agent's native session ids by rein session key, for `session/load`.
    sessions: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for AcpHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpHarness")
            .field("id", &self.decl.id)
            .field("plugin", &self.plugin)
            .finish_non_exhaustive()
    }
}

impl AcpHarness {
    /// The harness `decl` of the plugin `plugin`, whose agent is `command`
    /// (a relative program path, and the agent's working directory, are `dir`).
    pub fn new(
        decl: HarnessDeclaration,
        plugin: String,
        command: Vec<String>,
        env: BTreeMap<String, String>,
        dir: PathBuf,
    ) -> AcpHarness {
        AcpHarness {
            decl,
            plugin,
            command,
            env,
            dir,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    fn failed(&self, message: impl Into<String>) -> HarnessError {
        HarnessError::Failed {
            harness: self.decl.id.clone(),
            message: message.into(),
        }
    }

    /// Starts the agent in its own process group.
    fn spawn(&self) -> Result<AgentProcess, HarnessError> {
        let (mut command, path) =
            crate::manifest::manifest_command(&self.dir, &self.command, &self.env);
        let mut child = command.process_group(0).spawn().map_err(|e| {
            self.failed(format!(
                "the ACP agent of plugin `{}` cannot be started ({}): {e}",
                self.plugin,
                path.display()
            ))
        })?;
        let stderr = Arc::new(Mutex::new(Vec::new()));
        if let Some(mut pipe) = child.stderr.take() {
            let tail = Arc::clone(&stderr);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut t) = tail.lock() {
                        t.extend_from_slice(&buf[..n]);
                        let excess = t.len().saturating_sub(STDERR_TAIL);
                        t.drain(..excess);
                    }
                }
            });
        }
        let group = child.id().and_then(|p| i32::try_from(p).ok());
        Ok(AgentProcess {
            child,
            group,
            stderr,
        })
    }
}

/// The agent's process: its whole group is killed when this is dropped.
struct AgentProcess {
    child: tokio::process::Child,
    /// The group the agent leads (its pid), kept for the group's other
    /// members after the agent itself has been reaped.
    group: Option<i32>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl AgentProcess {
    /// The end of what the agent wrote to stderr, for an error message.
    fn stderr_tail(&self) -> String {
        // Without the colours and cursor moves a terminal would have drawn.
        let tail = self
            .stderr
            .lock()
            .map(|t| {
                String::from_utf8_lossy(&strip_ansi_escapes::strip(&*t))
                    .trim()
                    .to_owned()
            })
            .unwrap_or_default();
        if tail.is_empty() {
            String::new()
        } else {
            format!("; its stderr ends: {tail}")
        }
    }

    /// How the process ended, if it does within `wait`.
    async fn exit_within(&mut self, wait: Duration) -> Option<String> {
        match tokio::time::timeout(wait, self.child.wait()).await {
            Ok(Ok(status)) => Some(status.to_string()),
            _ => None,
        }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if let Some(pid) = self.group {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// The longest line an agent may send.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// Passes on the agent's stdout line by line while each line is JSON; at the
/// first line that is not (or is too long), the stream ends there and the line
/// is kept for the error message.
fn guard_lines(
    stdout: tokio::process::ChildStdout,
) -> (tokio::io::DuplexStream, Arc<Mutex<Option<String>>>) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (mut tx, rx) = tokio::io::duplex(64 * 1024);
    let garbage: Arc<Mutex<Option<String>>> = Arc::default();
    let seen = Arc::clone(&garbage);
    tokio::spawn(async move {
        let mut reader = tokio::io::BufReader::new(stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            match (&mut reader)
                .take(MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut line)
                .await
            {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let text = String::from_utf8_lossy(&line);
            let trimmed = text.trim();
            if trimmed.is_empty() {
                continue;
            }
            if line.len() > MAX_LINE
                || serde_json::from_str::<serde::de::IgnoredAny>(trimmed).is_err()
            {
                let shown: String = trimmed.chars().take(200).collect();
                if let Ok(mut g) = seen.lock() {
                    *g = Some(shown);
                }
                break;
            }
            if tx.write_all(&line).await.is_err() {
                break;
            }
            if !line.ends_with(b"\n") && tx.write_all(b"\n").await.is_err() {
                break;
            }
        }
        let _ = tx.shutdown().await;
    });
    (rx, garbage)
}

/// What one prompt turn reported.
#[derive(Debug, Default)]
struct Turn {
    text: String,
    events: usize,
    /// Tool calls by id, their fields merged as updates came.
    tool_calls: BTreeMap<String, Value>,
    /// Permission questions and what was answered.
    permissions: Vec<Value>,
    /// Writes the agent made through rein's callback.
    callbacks: Vec<Value>,
}

type Shared = Arc<Mutex<Turn>>;

fn with<T>(turn: &Shared, f: impl FnOnce(&mut Turn) -> T) -> Option<T> {
    turn.lock().ok().map(|mut t| f(&mut t))
}

/// A `session/update`, recorded and passed on: message text as the partial
/// reply; anything else to the step's run (in order with the step's
/// questions), or as an agent event when there is no run.
fn on_update(
    turn: &Shared,
    events: &mpsc::UnboundedSender<AttemptEvent>,
    asker: Option<&Asker>,
    update: SessionUpdate,
) {
    if let SessionUpdate::AgentMessageChunk(chunk) = &update {
        if let ContentBlock::Text(t) = &chunk.content {
            with(turn, |turn| turn.text.push_str(&t.text));
            let _ = events.send(AttemptEvent::PartialReply(t.text.clone()));
        }
        return;
    }
    let value = serde_json::to_value(&update).unwrap_or(Value::Null);
    if matches!(
        update,
        SessionUpdate::ToolCall(_) | SessionUpdate::ToolCallUpdate(_)
    ) && let Some(id) = value.get("toolCallId").and_then(Value::as_str)
    {
        with(turn, |turn| {
            let call = turn
                .tool_calls
                .entry(id.to_owned())
                .or_insert_with(|| json!({ "toolCallId": id }));
            if let (Some(call), Some(fields)) = (call.as_object_mut(), value.as_object()) {
                for (k, v) in fields {
                    if k != "sessionUpdate" && !v.is_null() {
                        call.insert(k.clone(), v.clone());
                    }
                }
            }
        });
    }
    let send = with(turn, |turn| {
        turn.events += 1;
        turn.events <= MAX_EVENTS
    });
    if send == Some(true) {
        match asker {
            Some(asker) => asker.report(value),
            None => {
                let _ = events.send(AttemptEvent::Agent(value));
            }
        }
    }
}

/// An ACP turn's usage, normalised to rein's rule: every prompt token in
/// `input_tokens` (the fresh ones, the cache reads and the cache writes, as
/// the agents that report it count them apart), the cache reads as
/// `cached_input_tokens`.
fn acp_usage(u: &agent_client_protocol::v1::schema::Usage) -> rein_protocol::Usage {
    let read = u.cached_read_tokens.unwrap_or(0);
    let written = u.cached_write_tokens.unwrap_or(0);
    rein_protocol::Usage {
        input_tokens: u.input_tokens.saturating_add(read).saturating_add(written),
        cached_input_tokens: read,
        output_tokens: u.output_tokens,
        reasoning_tokens: u.thought_tokens,
        estimated: false,
    }
}

/// How the turn ended, seen from the connection.
struct Ended {
    stop_reason: StopReason,
    /// The turn's token usage, if the agent reported it (ACP's
    /// `PromptResponse.usage`).
    usage: Option<rein_protocol::Usage>,
    session_id: String,
    /// The permission request a person skipped, which cancelled the turn.
    skipped: Option<String>,
}

type PermissionAsk = (
    RequestPermissionRequest,
    Responder<RequestPermissionResponse, agent_client_protocol::V1>,
);

#[async_trait]
impl AgentHarness for AcpHarness {
    crate::manifest::declared_harness!();

    /// An ACP agent serves whatever route it is chosen for: which providers
    /// `auto` may choose it for is the manifest's
    /// `auto_selection_provider_ids`.
    async fn supports(&self, ctx: &SupportContext) -> Support {
        Support::Supported {
            priority: 0,
            reason: Some(format!(
                "ACP agent of plugin `{}` (provider `{}`)",
                self.plugin, ctx.provider
            )),
        }
    }

    fn protocol(&self) -> &'static str {
        "acp"
    }

    async fn run_attempt(&self, params: AttemptParams) -> Result<AttemptResult, HarnessError> {
        let pinned = params.workspace.clone();
        let workspace = std::path::absolute(&pinned.path)
            .map_err(|e| self.failed(format!("the workspace has no absolute path: {e}")))?;
        let mut process = self.spawn()?;
        let (Some(stdin), Some(stdout)) = (process.child.stdin.take(), process.child.stdout.take())
        else {
            return Err(self.failed("the ACP agent's stdio could not be opened"));
        };
        let (lines, garbage) = guard_lines(stdout);
        let transport = ByteStreams::new(stdin.compat_write(), lines.compat());
        let turn: Shared = Arc::default();
        let (asks_tx, asks) = mpsc::unbounded_channel::<PermissionAsk>();
        // The session an earlier attempt opened: this process remembers it,
        // and the step's journal keeps it across a restart of rein.
        let journaled = match &params.journal {
            Some(journal) => journal.load().await.ok().and_then(|entries| {
                entries.iter().rev().find_map(|e| {
                    e.get(SESSION_ENTRY)
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
            }),
            None => None,
        };
        let known = journaled.clone().or_else(|| {
            self.sessions
                .lock()
                .ok()
                .and_then(|s| s.get(&params.session_key).cloned())
        });
        let cancel = params.cancel.clone();
        let connection =
            Client
                .v1()
                .on_receive_notification(
                    {
                        let turn = Arc::clone(&turn);
                        let events = params.events.clone();
                        let asker = params.asker.clone();
                        async move |n: SessionNotification, _cx| {
                            on_update(&turn, &events, asker.as_ref(), n.update);
                            Ok(())
                        }
                    },
                    agent_client_protocol::on_receive_notification!(),
                )
                .on_receive_request(
                    // Answered by the turn's own loop, which can wait for a person
                    // without holding up the connection.
                    async move |request: RequestPermissionRequest, responder, _cx| {
                        if let Err(tokio::sync::mpsc::error::SendError((_, responder))) =
                            asks_tx.send((request, responder))
                        {
                            return responder.respond(RequestPermissionResponse::new(
                                RequestPermissionOutcome::Cancelled,
                            ));
                        }
                        Ok(())
                    },
                    agent_client_protocol::on_receive_request!(),
                )
                .on_receive_request(
                    {
                        let turn = Arc::clone(&turn);
                        let workspace = pinned.clone();
                        async move |request: WriteTextFileRequest, responder, _cx| {
                            match write_text_file(&workspace, &request.path, &request.content) {
                                Ok(()) => {
                                    let path = request.path.display().to_string();
                                    with(&turn, |t| {
                                        t.callbacks.push(json!({
                                            "what": "write_file",
                                            "path": path,
                                            "bytes": request.content.len(),
                                            "capture": "callback",
                                            "via": "fs/write_text_file",
                                        }));
                                    });
                                    responder.respond(WriteTextFileResponse::new())
                                }
                                Err(e) => responder.respond_with_error(
                                    agent_client_protocol::Error::invalid_params().data(e),
                                ),
                            }
                        }
                    },
                    agent_client_protocol::on_receive_request!(),
                )
                .on_receive_request(
                    {
                        let workspace = pinned.clone();
                        async move |request: ReadTextFileRequest, responder, _cx| {
                            match read_text_file(
                                &workspace,
                                &request.path,
                                request.line,
                                request.limit,
                            ) {
                                Ok(content) => {
                                    responder.respond(ReadTextFileResponse::new(content))
                                }
                                Err(e) => responder.respond_with_error(
                                    agent_client_protocol::Error::invalid_params().data(e),
                                ),
                            }
                        }
                    },
                    agent_client_protocol::on_receive_request!(),
                )
                .connect_with(transport, {
                    let turn = Arc::clone(&turn);
                    let opening = Opening {
                        workspace,
                        known,
                        journaled,
                        journal: params.journal.clone(),
                        prompt: params.prompt.clone(),
                        agent: self.decl.id.clone(),
                        mcp: params.mcp_servers.clone(),
                        policy: Arc::clone(&params.policy),
                        images: params.images.clone(),
                    };
                    let asker = params.asker.clone();
                    let cancel = cancel.clone();
                    async move |conn: ConnectionTo<Agent>| {
                        prompt_turn(conn, opening, asks, asker, cancel, turn).await
                    }
                });
        let deadline_ms = u64::try_from(params.deadline.as_millis()).unwrap_or(u64::MAX);
        let ended = tokio::select! {
            ended = connection => ended,
            () = tokio::time::sleep(params.deadline) => {
                return Err(HarnessError::TimedOut { harness: self.decl.id.clone(), ms: deadline_ms });
            }
            () = async { cancel.cancelled().await; tokio::time::sleep(CANCEL_GRACE).await } => {
                return Err(HarnessError::Cancelled);
            }
        };
        let ended = match ended {
            Ok(ended) => ended,
            Err(e) => {
                // A dying agent's exit status, if it comes within a moment.
                let exit = process
                    .exit_within(Duration::from_millis(200))
                    .await
                    .map(|s| format!(" (the agent exited: {s})"))
                    .unwrap_or_default();
                let why = match garbage.lock().ok().and_then(|g| g.clone()) {
                    Some(line) => format!(
                        "it wrote a line that is not JSON-RPC, so rein stopped it: `{line}`"
                    ),
                    None => describe(&e),
                };
                return Err(self.failed(format!(
                    "ACP agent of plugin `{}`: {why}{exit}{}",
                    self.plugin,
                    process.stderr_tail()
                )));
            }
        };
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.insert(params.session_key.clone(), ended.session_id.clone());
        }

        let details = with(&turn, |t| details(t, &self.plugin, &ended)).unwrap_or(Value::Null);
        let text = with(&turn, |t| t.text.clone()).unwrap_or_default();
        if let Some(title) = &ended.skipped {
            return Err(HarnessError::Refused {
                harness: self.decl.id.clone(),
                message: format!(
                    "a person skipped the permission request for \"{title}\": the agent's turn was cancelled"
                ),
            });
        }
        let stop_reason = stop_name(ended.stop_reason);
        match ended.stop_reason {
            StopReason::EndTurn => Ok(AttemptResult {
                text,
                stop_reason,
                details,
                usage: ended.usage.map(|u| (u, None)),
            }),
            StopReason::Cancelled => Err(HarnessError::Cancelled),
            _ => Err(self.failed(format!("the agent stopped its turn: {stop_reason}"))),
        }
    }
}

/// What opening the turn needs: where, which session to load (and whether the
/// step's journal has it already), and what to say.
struct Opening {
    workspace: PathBuf,
    known: Option<String>,
    journaled: Option<String>,
    journal: Option<rein_core::journal::Journal>,
    prompt: String,
    agent: String,
    mcp: Vec<rein_protocol::McpUse>,
    /// The step's permission rules, which decide a request before a person.
    policy: Arc<rein_sandbox::Policy>,
    /// Images sent with the prompt, as `image` content blocks.
    images: Vec<rein_protocol::plugin::AttemptImage>,
}

/// Initialize, open (or load) the session, and run the prompt turn, answering
/// permission requests as they come.
async fn prompt_turn(
    conn: ConnectionTo<Agent>,
    opening: Opening,
    mut asks: mpsc::UnboundedReceiver<PermissionAsk>,
    asker: Option<Asker>,
    cancel: tokio_util::sync::CancellationToken,
    turn: Shared,
) -> Result<Ended, agent_client_protocol::Error> {
    let Opening {
        workspace,
        known,
        journaled,
        journal,
        prompt,
        agent,
        mcp,
        policy,
        images,
    } = opening;
    let setup = |what: &str| {
        agent_client_protocol::Error::new(
            -32000,
            format!(
                "the agent did not answer {what} within {} ms",
                SETUP_TIMEOUT.as_millis()
            ),
        )
    };
    let init = conn
        .send_request(
            InitializeRequest::new(agent_client_protocol::schema::ProtocolVersion::V1)
                .client_capabilities(
                    ClientCapabilities::new().fs(FileSystemCapabilities::new()
                        .read_text_file(true)
                        .write_text_file(true)),
                ),
        )
        .block_task();
    let init = tokio::time::timeout(SETUP_TIMEOUT, init)
        .await
        .map_err(|_| setup("initialize"))??;
    let servers = acp_mcp_servers(&mcp, init.agent_capabilities.mcp_capabilities.http)
        .map_err(|why| agent_client_protocol::Error::new(-32602, why))?;
    // Images go as `image` blocks, to an agent that says it takes them;
    // never dropped.
    if !images.is_empty() && !init.agent_capabilities.prompt_capabilities.image {
        return Err(agent_client_protocol::Error::new(
            -32602,
            format!(
                "the step gives {} image(s), and the agent does not take images (its promptCapabilities.image is not true): remove `images` from the step, or run it on a harness that takes them",
                images.len()
            ),
        ));
    }
    let mut blocks = vec![ContentBlock::Text(TextContent::new(prompt))];
    blocks.extend(images.into_iter().map(|i| {
        ContentBlock::Image(agent_client_protocol::v1::schema::ImageContent::new(
            i.data,
            i.mime_type,
        ))
    }));
    let loaded = match known {
        Some(id) if init.agent_capabilities.load_session => conn
            .send_request(
                LoadSessionRequest::new(id.clone(), workspace.clone()).mcp_servers(servers.clone()),
            )
            .block_task()
            .await
            .ok()
            .map(|_| id),
        _ => None,
    };
    let session_id = match loaded {
        Some(id) => id,
        None => open_session(&conn, workspace, servers, &setup).await?,
    };
    // Durable before the turn begins: an attempt after a crash loads it.
    if journaled.as_deref() != Some(session_id.as_str())
        && let Some(journal) = &journal
        && let Err(e) = journal
            .append(&[json!({ SESSION_ENTRY: session_id })])
            .await
    {
        // Only a later session/load is lost: it opens a new session.
        tracing::warn!(error = %e, "cannot journal the ACP session id");
    }
    let mut answer = Box::pin(
        conn.send_request(PromptRequest::new(session_id.clone(), blocks))
            .block_task(),
    );
    let mut cancelling = false;
    let mut skipped: Option<String> = None;
    loop {
        tokio::select! {
            response = &mut answer => {
                let response = response?;
                let usage = response.usage.as_ref().map(acp_usage);
                // A skipped request cancelled the turn, whatever the agent
                // says it ended with.
                let stop_reason = if skipped.is_some() { StopReason::Cancelled } else { response.stop_reason };
                return Ok(Ended { stop_reason, usage, session_id, skipped });
            }
            Some((request, responder)) = asks.recv() => {
                let outcome = if cancelling {
                    RequestPermissionOutcome::Cancelled
                } else {
                    tokio::select! {
                        (o, skip) = decide(asker.as_ref(), &policy, &request, &turn, &agent) => {
                            // Skip cancels the turn: `session/cancel` first,
                            // then the `cancelled` outcome (the ACP spec).
                            if let Some(title) = skip {
                                cancelling = true;
                                conn.send_notification(CancelNotification::new(session_id.clone()))?;
                                skipped = Some(title);
                            }
                            o
                        }
                        () = cancel.cancelled() => {
                            cancelling = true;
                            conn.send_notification(CancelNotification::new(session_id.clone()))?;
                            RequestPermissionOutcome::Cancelled
                        }
                    }
                };
                responder.respond(RequestPermissionResponse::new(outcome))?;
            }
            () = cancel.cancelled(), if !cancelling => {
                cancelling = true;
                conn.send_notification(CancelNotification::new(session_id.clone()))?;
            }
        }
    }
}

/// `session/new` in the workspace, within the setup time.
async fn open_session(
    conn: &ConnectionTo<Agent>,
    workspace: PathBuf,
    servers: Vec<McpServer>,
    setup: &impl Fn(&str) -> agent_client_protocol::Error,
) -> Result<String, agent_client_protocol::Error> {
    let opened = tokio::time::timeout(
        SETUP_TIMEOUT,
        conn.send_request(NewSessionRequest::new(workspace).mcp_servers(servers))
            .block_task(),
    )
    .await
    .map_err(|_| setup("session/new"))??;
    Ok(opened.session_id.to_string())
}

/// The step's MCP servers as ACP's `mcpServers`: a stdio server as its
/// command, arguments and environment (the agent starts it, outside rein's
/// sandbox); one at a URL only if the agent takes HTTP servers.
fn acp_mcp_servers(uses: &[rein_protocol::McpUse], http: bool) -> Result<Vec<McpServer>, String> {
    let mut servers = Vec::new();
    for used in uses {
        let Some(server) = &used.server else {
            return Err(format!("MCP server `{}` has no declaration", used.name));
        };
        match (&server.command, &server.url) {
            (Some(command), _) => servers.push(McpServer::Stdio(
                McpServerStdio::new(used.name.clone(), command.clone())
                    .args(server.args.clone())
                    .env(
                        server
                            .env
                            .iter()
                            .map(|(k, v)| EnvVariable::new(k.clone(), v.clone()))
                            .collect(),
                    ),
            )),
            (None, Some(url)) if http => servers.push(McpServer::Http(
                McpServerHttp::new(used.name.clone(), url.clone()).headers(
                    server
                        .headers
                        .iter()
                        .map(|(k, v)| HttpHeader::new(k.clone(), v.clone()))
                        .collect(),
                ),
            )),
            (None, Some(_)) => {
                return Err(format!(
                    "MCP server `{}` is at a URL, and this ACP agent does not take HTTP MCP servers (its mcpCapabilities.http is false); declare a stdio one, or run the step on the built-in runtime",
                    used.name
                ));
            }
            (None, None) => {
                return Err(format!(
                    "MCP server `{}` has neither command nor url",
                    used.name
                ));
            }
        }
    }
    Ok(servers)
}

/// The attempt's account: tool calls, permission answers, and side effects —
/// `callback` for writes through rein, `unsupported` for what the agent did
/// by itself.
fn details(turn: &Turn, plugin: &str, ended: &Ended) -> Value {
    let mut side_effects: Vec<Value> = turn.callbacks.clone();
    let written: Vec<&str> = turn
        .callbacks
        .iter()
        .filter_map(|c| c["path"].as_str())
        .collect();
    for call in turn.tool_calls.values() {
        let kind = call["kind"].as_str().unwrap_or("other");
        if matches!(kind, "read" | "search" | "think") {
            continue;
        }
        let locations = locations(call);
        // An edit whose every file came through rein's callback is on rein's
        // record; anything else the agent did by itself.
        let through_rein = kind == "edit"
            && !locations.is_empty()
            && locations.iter().all(|p| written.contains(p));
        side_effects.push(json!({
            "what": kind,
            "tool_call": call["toolCallId"],
            "title": call["title"],
            "status": call["status"],
            "locations": locations,
            "capture": if through_rein { "callback" } else { "unsupported" },
        }));
    }
    json!({
        "runtime": "acp",
        "plugin": plugin,
        "session_id": ended.session_id,
        "stop_reason": stop_name(ended.stop_reason),
        "tool_calls": turn.tool_calls.values().collect::<Vec<_>>(),
        "permissions": turn.permissions,
        "side_effects": side_effects,
        "events": turn.events,
    })
}
