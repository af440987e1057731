//! MCP (Model Context Protocol) tool servers for the built-in agent loop,
//! through the official Rust SDK (`rmcp`, client side).
//!
//! A step that names servers (`mcp = ["fs"]`) connects to each when it starts:
//! a stdio server is a program rein starts in the step's sandbox (the
//! workspace writable, no network unless the step allows it), a streamable
//! HTTP one a URL. Their tools are offered to the model as `SERVER__TOOL`. A
//! call that fails because the server went away, or that takes longer than
//! the server's timeout, is answered with what went wrong and the server is
//! started again for the next call. Servers end with the step.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rein_core::StepExecutor;
use rein_core::executor::{Helper, StepRequest};
use rein_core::recovery::Failure;
use rein_protocol::{McpServer, McpUse};
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

use crate::openai::ToolSpec;

/// How long a server may take to start and list its tools.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one call may take unless the server's declaration says.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// The most stderr lines of one server that go into the task's log (per
/// start); the last few are kept for error messages whatever the count.
const STDERR_LINES_LOGGED: usize = 200;
const STDERR_LINES_KEPT: usize = 12;
/// Between a server's name and its tool's in the names the model sees.
pub const SEPARATOR: &str = "__";
/// The longest message rein reads from a stdio server (one JSON-RPC line).
/// A tool answer up to it reaches the agent loop, which sends the model its
/// first part and keeps the rest as a file; a longer one is dropped as it
/// streams in (never held in memory) and the call answered at once with
/// what happened, not left to time out.
pub const MESSAGE_LIMIT: usize = 64 * 1024 * 1024;

/// Messages a stdio server sent that were longer than [`MESSAGE_LIMIT`].
#[derive(Debug, Default)]
struct Oversized {
    lines: std::sync::atomic::AtomicU64,
    notify: tokio::sync::Notify,
}

impl Oversized {
    /// Once a message longer than the limit arrives after `seen` of them.
    async fn after(&self, seen: u64) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.lines.load(std::sync::atomic::Ordering::SeqCst) != seen {
                return;
            }
            notified.await;
        }
    }
}

/// A server's stdout as the transport reads it, measuring each line on the
/// way: the transport drops a line past the limit without a word to its
/// caller, and this says so.
struct Watched<R> {
    inner: R,
    /// The longest line the transport takes, its newline counted.
    limit: usize,
    line: usize,
    over: bool,
    oversized: Arc<Oversized>,
}

impl<R> Watched<R> {
    fn grow(&mut self, n: usize) {
        self.line = self.line.saturating_add(n);
        if !self.over && self.line > self.limit {
            self.over = true;
            self.oversized
                .lines
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.oversized.notify.notify_waiters();
        }
    }
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Watched<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = &polled {
            let mut rest = &buf.filled()[before..];
            while let Some(i) = rest.iter().position(|b| *b == b'\n') {
                // Its newline counted, as the transport counts it.
                self.grow(i + 1);
                self.line = 0;
                self.over = false;
                rest = &rest[i + 1..];
            }
            self.grow(rest.len());
        }
        polled
    }
}

/// The servers the configuration declares (`[mcp_servers.NAME]` in
/// `rein.toml`), for steps whose plan does not declare the ones they name.
pub type McpServers = BTreeMap<String, McpServer>;

/// One started server: the SDK's client over its transport, and the child
/// process for a stdio server (killed when this is dropped) with the task
/// that reads its stderr.
struct Live {
    client: RunningService<RoleClient, ClientConfig>,
    child: Option<tokio::process::Child>,
    stderr: Option<tokio::task::JoinHandle<()>>,
}

/// A server of the step: its declaration, the tools it offered when it
/// first started, and the connection (gone after a failure, until the next
/// call starts it again).
struct Connection {
    name: String,
    server: McpServer,
    tools: Vec<rmcp::model::Tool>,
    live: tokio::sync::Mutex<Option<Live>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// Messages of its server's too long to read.
    oversized: Arc<Oversized>,
    /// What the sandbox let the server reach (stdio servers).
    reach: Option<rein_sandbox::Reach>,
}

/// The MCP servers of one step's run.
pub struct StepMcp {
    connections: Vec<Connection>,
    helpers: Arc<dyn StepExecutor>,
    request: StepRequest,
    network: bool,
}

impl std::fmt::Debug for StepMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepMcp")
            .field(
                "servers",
                &self.connections.iter().map(|c| &c.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// What became of a call.
#[derive(Debug)]
pub enum CallOutcome {
    /// Text for the model (an error of the tool's, or of the server, too).
    Answer(String),
    /// The name is not one of the step's MCP tools.
    NotMine,
}

/// rmcp's reqwest has no TLS provider of its own: rein's is ring.
fn tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("rein", env!("CARGO_PKG_VERSION")),
    )
}

impl StepMcp {
    /// Starts the servers of `uses`, declared ([`resolve`]), and lists their
    /// tools. `Err` names the server and what went wrong, and whether trying
    /// again could help (a server that went away could come up; a program that
    /// is not there will not).
    pub async fn start(
        uses: Vec<McpUse>,
        helpers: Arc<dyn StepExecutor>,
        request: &StepRequest,
        network: bool,
    ) -> Result<StepMcp, (String, Failure)> {
        let mut mcp = StepMcp {
            connections: Vec::new(),
            helpers,
            request: request.clone(),
            network,
        };
        for used in uses {
            let server = used.server.unwrap_or_default();
            let mut connection = Connection {
                name: used.name.clone(),
                server,
                tools: Vec::new(),
                live: tokio::sync::Mutex::new(None),
                stderr: Arc::default(),
                oversized: Arc::default(),
                reach: None,
            };
            let (live, tools, reach) = mcp.connect(&connection).await?;
            connection.tools = tools;
            connection.reach = reach;
            *connection.live.get_mut() = Some(live);
            mcp.connections.push(connection);
        }
        Ok(mcp)
    }

    /// Starts `c`'s server, and lists its tools.
    async fn connect(
        &self,
        c: &Connection,
    ) -> Result<(Live, Vec<rmcp::model::Tool>, Option<rein_sandbox::Reach>), (String, Failure)>
    {
        let started = tokio::time::timeout(STARTUP_TIMEOUT, async {
            let (live, reach) = self.open(c).await?;
            let tools = live.client.list_all_tools().await.map_err(|e| {
                (
                    format!("it did not list its tools: {e}"),
                    Failure::Connection,
                )
            })?;
            Ok::<_, (String, Failure)>((live, tools, reach))
        })
        .await;
        let failed = |why: String| {
            format!(
                "MCP server `{}` could not be started: {why}{}",
                c.name,
                last_lines(&c.stderr)
            )
        };
        match started {
            Ok(Ok(done)) => Ok(done),
            Ok(Err((why, failure))) => Err((failed(why), failure)),
            Err(_) => Err((
                failed(format!(
                    "it did not answer within {}",
                    humantime::format_duration(STARTUP_TIMEOUT)
                )),
                Failure::Timeout,
            )),
        }
    }

    /// The transport to `c`'s server, initialized.
    async fn open(
        &self,
        c: &Connection,
    ) -> Result<(Live, Option<rein_sandbox::Reach>), (String, Failure)> {
        let invalid = |why: String| (why, Failure::Validation);
        if let Some(url) = &c.server.url {
            tls_provider();
            let mut headers = std::collections::HashMap::new();
            for (k, v) in &c.server.headers {
                let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                    .map_err(|e| invalid(format!("header `{k}` is not a header name: {e}")))?;
                let value = reqwest::header::HeaderValue::from_str(v).map_err(|e| {
                    invalid(format!("header `{k}` has a value that cannot be sent: {e}"))
                })?;
                headers.insert(name, value);
            }
            let mut config =
                rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                    url.as_str(),
                )
                .custom_headers(headers);
            config.max_sse_event_size = MESSAGE_LIMIT;
            let transport = rmcp::transport::StreamableHttpClientTransport::from_config(config);
            let client = client_config().serve(transport).await.map_err(|e| {
                (
                    format!("{url} did not initialize an MCP session: {e}"),
                    Failure::Connection,
                )
            })?;
            return Ok((
                Live {
                    client,
                    child: None,
                    stderr: None,
                },
                None,
            ));
        }
        let helper = Helper {
            program: c.server.command.clone().unwrap_or_default(),
            args: c.server.args.clone(),
            env: c.server.env.clone(),
            allow_read: c.server.allow_read.iter().map(PathBuf::from).collect(),
            network: self.network,
        };
        let (mut command, reach) = self
            .helpers
            .helper(&self.request, &helper)
            .map_err(|why| (why, Failure::Unsupported))?;
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        rein_sandbox::process::die_with_parent(&mut command);
        let mut child = command.spawn().map_err(|e| {
            (
                format!("cannot start `{}`: {e}", helper.program),
                Failure::Unsupported,
            )
        })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(("its stdio could not be connected".into(), Failure::Internal));
        };
        let forwarding = child
            .stderr
            .take()
            .map(|stderr| self.forward_stderr(c, stderr));
        let stdout = Watched {
            inner: stdout,
            limit: MESSAGE_LIMIT,
            line: 0,
            over: false,
            oversized: Arc::clone(&c.oversized),
        };
        let transport = rmcp::transport::async_rw::AsyncRwTransport::new_client(stdout, stdin)
            .with_max_line_length(MESSAGE_LIMIT);
        match client_config().serve(transport).await {
            Ok(client) => Ok((
                Live {
                    client,
                    child: Some(child),
                    stderr: forwarding,
                },
                Some(reach),
            )),
            Err(e) => {
                // Why it went: its exit status, if it has one by now. The
                // shell's 126 and 127 (not executable, not found) will not
                // change by trying again.
                let status = tokio::time::timeout(Duration::from_millis(500), child.wait())
                    .await
                    .ok()
                    .and_then(Result::ok);
                let failure = match status.and_then(|s| s.code()) {
                    Some(126 | 127) => Failure::Unsupported,
                    _ => Failure::Connection,
                };
                let status = status.map(|s| format!(" ({s})")).unwrap_or_default();
                read_to_end(forwarding).await;
                Err((format!("it did not initialize{status}: {e}"), failure))
            }
        }
    }

    /// The server's stderr: line by line into the task's log (up to a
    /// bound), the last lines kept for error messages.
    fn forward_stderr(
        &self,
        c: &Connection,
        stderr: tokio::process::ChildStderr,
    ) -> tokio::task::JoinHandle<()> {
        let kept = Arc::clone(&c.stderr);
        let asker = self.request.asker.clone();
        let name = c.name.clone();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            let mut logged = 0usize;
            while let Ok(Some(line)) = lines.next_line().await {
                let line = String::from_utf8_lossy(&strip_ansi_escapes::strip(&line)).into_owned();
                if logged < STDERR_LINES_LOGGED {
                    logged += 1;
                    match &asker {
                        Some(asker) => asker
                            .report(json!({ "kind": "mcp_stderr", "server": name, "line": line })),
                        None => tracing::debug!(server = %name, "{line}"),
                    }
                }
                if let Ok(mut kept) = kept.lock() {
                    if kept.len() == STDERR_LINES_KEPT {
                        kept.pop_front();
                    }
                    kept.push_back(line);
                }
            }
        })
    }

    /// The tools offered to the model: each server's, as `SERVER__TOOL`
    /// (names a chat API would refuse are left out).
    pub fn specs(&self) -> Vec<ToolSpec> {
        let mut specs = Vec::new();
        for c in &self.connections {
            for tool in &c.tools {
                let name = format!("{}{SEPARATOR}{}", c.name, tool.name);
                if !offerable(&name) {
                    tracing::warn!(server = %c.name, tool = %tool.name, "an MCP tool whose name a chat API refuses is not offered");
                    continue;
                }
                let description = tool
                    .description
                    .as_deref()
                    .or(tool.title.as_deref())
                    .unwrap_or("")
                    .to_owned();
                specs.push(ToolSpec {
                    name,
                    description: format!("[MCP server {}] {description}", c.name),
                    parameters: Value::Object((*tool.input_schema).clone()),
                });
            }
        }
        specs
    }

    /// The server and tool a name the model called stands for, if it is one
    /// of the step's MCP tools.
    pub fn tool_of<'n>(&self, called: &'n str) -> Option<(&str, &'n str)> {
        let (server, tool) = called.split_once(SEPARATOR)?;
        let c = self.connections.iter().find(|c| c.name == server)?;
        c.tools
            .iter()
            .any(|t| t.name == tool)
            .then_some((c.name.as_str(), tool))
    }

    /// Calls `tool` of `server` with `arguments` (JSON text from the model).
    pub async fn call(&self, server: &str, tool: &str, arguments: &str) -> CallOutcome {
        let Some(c) = self.connections.iter().find(|c| c.name == server) else {
            return CallOutcome::NotMine;
        };
        // No arguments (an empty string, as some models send) is none.
        let parsed = match arguments.trim() {
            "" => Ok(Value::Null),
            text => serde_json::from_str::<Value>(text),
        };
        let arguments = match parsed {
            Ok(Value::Object(map)) => Some(map),
            Ok(Value::Null) => None,
            Ok(other) => {
                return CallOutcome::Answer(format!(
                    "error: the arguments must be a JSON object, not {other}"
                ));
            }
            Err(e) => {
                return CallOutcome::Answer(format!("error: the arguments are not JSON ({e})"));
            }
        };
        let mut live = c.live.lock().await;
        if live.is_none() {
            match self.connect(c).await {
                Ok((started, _, _)) => *live = Some(started),
                Err((why, _)) => return CallOutcome::Answer(format!("error: {why}")),
            }
        }
        let Some(current) = live.as_ref() else {
            return CallOutcome::Answer("error: the server is not running".into());
        };
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = arguments;
        let limit = c
            .server
            .timeout_ms
            .map_or(CALL_TIMEOUT, Duration::from_millis);
        let seen = c.oversized.lines.load(std::sync::atomic::Ordering::SeqCst);
        let answer = tokio::select! {
            answer = tokio::time::timeout(limit, current.client.call_tool(params)) => answer,
            () = c.oversized.after(seen) => {
                return CallOutcome::Answer(format!(
                    "error: MCP server `{server}` answered `{tool}` with a message over {} MiB, more than rein reads from an MCP server; the answer was dropped as it came (the server still runs): ask it for less at a time",
                    MESSAGE_LIMIT / (1024 * 1024)
                ));
            }
        };
        match answer {
            Ok(Ok(result)) => CallOutcome::Answer(result_text(
                &serde_json::to_value(&result).unwrap_or(Value::Null),
            )),
            // An error of the protocol (unknown tool, bad arguments): the
            // server is still there.
            Ok(Err(rmcp::ServiceError::McpError(e))) => {
                CallOutcome::Answer(format!("error: the server refused the call: {}", e.message))
            }
            Ok(Err(e)) => {
                let (child, stderr) = match live.take() {
                    Some(gone) => (gone.child, gone.stderr),
                    None => (None, None),
                };
                let status = match child {
                    Some(mut child) => {
                        match tokio::time::timeout(Duration::from_millis(500), child.wait()).await {
                            Ok(Ok(s)) => format!(" (it exited: {s})"),
                            _ => String::new(),
                        }
                    }
                    None => String::new(),
                };
                read_to_end(stderr).await;
                CallOutcome::Answer(format!(
                    "error: MCP server `{server}` failed during the call{status}: {e}; it is started again for the next call{}",
                    last_lines(&c.stderr)
                ))
            }
            Err(_) => {
                // Dropped: a stdio server is killed, and started anew next time.
                live.take();
                CallOutcome::Answer(format!(
                    "error: MCP server `{server}` did not answer `{tool}` within {}; it was stopped, and is started again for the next call",
                    humantime::format_duration(limit)
                ))
            }
        }
    }

    /// What the step's output records: each server, how it was reached,
    /// and how many tools it offered.
    pub fn describe(&self) -> Value {
        Value::Array(
            self.connections
                .iter()
                .map(|c| {
                    json!({
                        "name": c.name,
                        "transport": if c.server.url.is_some() { "streamable_http" } else { "stdio" },
                        "tools": c.tools.len(),
                        "reach": c.reach,
                    })
                })
                .collect(),
        )
    }

    /// Ends every server: the session closed, a child's stdin with it; a
    /// child that lingers is killed.
    pub async fn close(self) {
        for c in self.connections {
            if let Some(live) = c.live.into_inner() {
                let Live { client, child, .. } = live;
                let _ = tokio::time::timeout(Duration::from_secs(2), client.cancel()).await;
                drop(child);
            }
        }
    }
}

/// The servers `uses` names, each with its declaration: the plan's, else
/// the configuration's; `Err` names one that neither declares.
pub fn resolve(uses: &[McpUse], configured: &McpServers) -> Result<Vec<McpUse>, (String, Failure)> {
    uses.iter()
        .map(|used| {
            let server = used
                .server
                .clone()
                .or_else(|| configured.get(&used.name).cloned());
            match server {
                Some(s) => Ok(McpUse {
                    name: used.name.clone(),
                    server: Some(s),
                }),
                None => Err((
                    format!(
                        "the step names MCP server `{0}`, which neither the plan's [mcp_servers] nor the configuration declares; declare it as [mcp_servers.{0}] in the plan or in rein.toml (`rein config show` lists the configured ones)",
                        used.name
                    ),
                    Failure::Validation,
                )),
            }
        })
        .collect()
}

/// Whether a chat API takes `name` as a function's name.
fn offerable(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Waits (up to 500 ms) until the stderr of a server that went is read to
/// its end: a busy machine may not have read what it said last yet, and the
/// error shows it.
async fn read_to_end(stderr: Option<tokio::task::JoinHandle<()>>) {
    if let Some(stderr) = stderr {
        let _ = tokio::time::timeout(Duration::from_millis(500), stderr).await;
    }
}

/// The last lines a server wrote to stderr, for an error message.
fn last_lines(kept: &Mutex<VecDeque<String>>) -> String {
    let lines: Vec<String> = kept
        .lock()
        .map(|k| k.iter().cloned().collect())
        .unwrap_or_default();
    if lines.is_empty() {
        String::new()
    } else {
        format!("; its stderr ended with: {}", lines.join(" | "))
    }
}

/// A tool's result as text for the model: its text content, a note for
/// each other kind, its structured content when there is no text; marked
/// when the tool says it failed.
fn result_text(result: &Value) -> String {
    let mut parts: Vec<String> = Vec::new();
    for block in result["content"].as_array().into_iter().flatten() {
        match block["type"].as_str() {
            Some("text") => parts.push(block["text"].as_str().unwrap_or_default().to_owned()),
            Some("resource") => {
                let r = &block["resource"];
                match r["text"].as_str() {
                    Some(text) => parts.push(format!(
                        "[resource {}]\n{text}",
                        r["uri"].as_str().unwrap_or("")
                    )),
                    None => parts.push(format!(
                        "[resource {} ({}), binary, not shown]",
                        r["uri"].as_str().unwrap_or(""),
                        r["mimeType"].as_str().unwrap_or("unknown type")
                    )),
                }
            }
            Some("resource_link") => parts.push(format!(
                "[resource link {}]",
                block["uri"].as_str().unwrap_or("")
            )),
            Some(kind @ ("image" | "audio")) => parts.push(format!(
                "[{kind} ({}), {} bytes of base64, not shown]",
                block["mimeType"].as_str().unwrap_or("unknown type"),
                block["data"].as_str().map_or(0, str::len)
            )),
            Some(other) => parts.push(format!("[{other} content, not shown]")),
            None => {}
        }
    }
    if parts.is_empty()
        && let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null())
    {
        parts.push(structured.to_string());
    }
    let text = parts.join("\n");
    if result["isError"].as_bool() == Some(true) {
        format!("error: {text}")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines measured as the transport measures them, newline included,
    /// across reads that split them anywhere: one over the limit is said
    /// once, one at it is not.
    #[tokio::test]
    async fn a_line_past_the_limit_is_said_once_and_one_at_it_not() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut server, stdout) = tokio::io::duplex(7);
        let oversized = Arc::new(Oversized::default());
        let mut watched = Watched {
            inner: stdout,
            limit: 10,
            line: 0,
            over: false,
            oversized: Arc::clone(&oversized),
        };
        let count = || oversized.lines.load(std::sync::atomic::Ordering::SeqCst);
        let writer = tokio::spawn(async move {
            // 9 bytes and a newline: at the limit. Then 11 and a newline,
            // then 10 and a newline: over it, twice.
            for line in ["123456789\n", "12345678901\n", "1234567890\n", "ok\n"] {
                server.write_all(line.as_bytes()).await.unwrap();
            }
        });
        let mut seen = Vec::new();
        let mut buf = [0u8; 3];
        let mut after_first = None;
        loop {
            let n = watched.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
            if seen.len() >= 10 && after_first.is_none() {
                after_first = Some(count());
            }
        }
        writer.await.unwrap();
        assert_eq!(seen.len(), 36, "everything passed through");
        assert_eq!(after_first, Some(0), "a line at the limit is not over it");
        assert_eq!(count(), 2);
        // Waiting from a count already passed returns at once.
        tokio::time::timeout(Duration::from_secs(1), oversized.after(1))
            .await
            .unwrap();
    }

    #[test]
    fn results_become_text_for_the_model() {
        let r = json!({ "content": [
            { "type": "text", "text": "hello" },
            { "type": "image", "data": "aGk=", "mimeType": "image/png" },
            { "type": "resource", "resource": { "uri": "file:///a", "text": "inside" } },
        ] });
        assert_eq!(
            result_text(&r),
            "hello\n[image (image/png), 4 bytes of base64, not shown]\n[resource file:///a]\ninside"
        );
        let failed =
            json!({ "content": [{ "type": "text", "text": "no such file" }], "isError": true });
        assert_eq!(result_text(&failed), "error: no such file");
        let structured = json!({ "content": [], "structuredContent": { "sum": 3 } });
        assert_eq!(result_text(&structured), "{\"sum\":3}");
    }

    #[test]
    fn only_names_a_chat_api_takes_are_offered() {
        assert!(offerable("fs__read_text_file"));
        assert!(offerable("ev__trigger-long-running-operation"));
        assert!(!offerable("fs__read.file"));
        assert!(!offerable(&"x".repeat(65)));
    }
}
