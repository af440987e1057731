//! `rein acp`: rein as an Agent Client Protocol agent on stdin and stdout, so
//! that an editor drives it and answers its questions.
//!
//! A session (`session/new`) is a workspace, the client's `cwd`, and the id
//! its tasks are filed under; each prompt becomes a goal task there, run by
//! this process. What the task does streams back as `session/update`: its plan
//! (entries follow the steps), the tool calls of its agent steps, their answers
//! and how the task ended. Every approval request of the task is asked as
//! `session/request_permission`; the answer is the decision, recorded as
//! `acp:<client name>`. `session/cancel` pauses the task; `session/load`
//! replays a session's tasks from the store and takes up one left unfinished,
//! asking its pending questions again. `/resume` resumes the session's paused
//! task.
//!
//! What it takes is bounded: lines that are not UTF-8 or too long get a
//! parse error ([`input`]); at most [`MOST_SESSIONS`] sessions are open at
//! once and a prompt has at most [`MOST_PROMPT_BYTES`]; `session/load` takes
//! only ids rein issued (`acp_` and a ULID) that it knows.

mod input;
mod permission;
mod view;

use permission::*;
use view::*;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, AvailableCommand, AvailableCommandsUpdate, CancelNotification, ContentBlock,
    ContentChunk, Implementation, InitializeRequest, InitializeResponse, LoadSessionRequest,
    LoadSessionResponse, McpCapabilities, McpServer, NewSessionRequest, NewSessionResponse,
    PermissionOption, PermissionOptionKind, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus,
    PromptRequest, PromptResponse, RequestPermissionOutcome, RequestPermissionRequest,
    SessionNotification, SessionUpdate, StopReason, TextContent, ToolCall, ToolCallContent,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use agent_client_protocol::{ByteStreams, Client, Responder};
use rein_core::store::{ApprovalFilter, TaskFilter};
use rein_core::{CreateTask, Engine, EngineError, RunOptions};
use rein_protocol::{
    ApprovalRequest, ApprovalResponse, ApprovalStatus, CheckpointId, CheckpointStatus,
    CheckpointType, Decision, HarnessEvent, McpUse, RiskLevel, TaskChange, TaskId, TaskStatus,
};
use tokio::sync::broadcast;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cli::AcpArgs;
use crate::commands::{Context, Target};
use crate::exit::UsageError;

/// The prompt that resumes a session's paused task instead of starting one.
const RESUME: &str = "/resume";

/// The most sessions one `rein acp` holds open at once.
pub const MOST_SESSIONS: usize = 64;

/// The most bytes of text a prompt may have.
pub const MOST_PROMPT_BYTES: usize = 256 * 1024;

pub async fn serve(target: &Target, args: AcpArgs) -> anyhow::Result<u8> {
    if target.url.is_some() {
        return Err(UsageError(
            "`rein acp` runs its tasks in this process, on --data-dir: it does not take --url (unset REIN_URL)".into(),
        )
        .into());
    }
    let executor = crate::commands::executor(&target.sandbox, true).await?;
    let ctx = Context::for_target(target, args.max_parallel as usize, executor)?;
    let agent = Arc::new(AcpAgent {
        engine: Arc::clone(&ctx.engine),
        goal: crate::commands::goal(&args.decompose),
        budget: args.budget.over(None)?,
        actor: Mutex::new("acp:client".into()),
        sessions: Mutex::new(HashMap::new()),
        closed: CancellationToken::new(),
        runs: TaskTracker::new(),
    });
    let served = agent_client_protocol::Agent
        .v1()
        .name("rein")
        .on_receive_request(
            {
                let agent = Arc::clone(&agent);
                async move |request: InitializeRequest, responder, _cx| {
                    responder.respond(agent.initialize(&request))
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let agent = Arc::clone(&agent);
                async move |request: NewSessionRequest, responder, cx| match agent.open(
                    None,
                    request.cwd,
                    request.mcp_servers,
                ) {
                    Ok(session) => {
                        // The session's id first: what follows names it.
                        responder.respond(NewSessionResponse::new(session.id.clone()))?;
                        commands(&cx, &session.id);
                        Ok(())
                    }
                    Err(why) => responder.respond_with_error(invalid(why)),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let agent = Arc::clone(&agent);
                async move |request: LoadSessionRequest, responder, cx| {
                    let agent = Arc::clone(&agent);
                    // Off the dispatch loop: the replay reads the store.
                    cx.spawn({
                        let cx = cx.clone();
                        async move { agent.load(request, responder, cx).await }
                    })
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let agent = Arc::clone(&agent);
                async move |request: PromptRequest, responder, cx| {
                    let agent = Arc::clone(&agent);
                    cx.spawn({
                        let cx = cx.clone();
                        async move { agent.prompt(request, responder, cx).await }
                    })
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            {
                let agent = Arc::clone(&agent);
                async move |cancel: CancelNotification, _cx| {
                    agent.cancel(cancel.session_id.0.as_ref());
                    Ok(())
                }
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(ByteStreams::new(
            tokio::io::stdout().compat_write(),
            input::checked(tokio::io::stdin()).compat(),
        ))
        .await;
    // The client is gone: running steps stop now and their tasks stay
    // resumable, as after a crash (`session/load` or `rein tasks resume`).
    agent.closed.cancel();
    agent.runs.close();
    agent.runs.wait().await;
    served.map_err(|e| anyhow::anyhow!("the ACP connection failed: {e}"))?;
    Ok(crate::exit::SUCCESS)
}

fn invalid(why: String) -> agent_client_protocol::Error {
    agent_client_protocol::Error::invalid_params().data(serde_json::Value::String(why))
}

/// What `rein acp` keeps: the engine, and the sessions of this connection.
struct AcpAgent {
    engine: Arc<Engine>,
    /// How prompts become plans (`--provider`, `--model`, `--yes`, …).
    goal: rein_protocol::Goal,
    /// What each prompt's task may spend (`--budget-tokens`, `--budget-usd`).
    budget: Option<rein_protocol::Budget>,
    /// Who the client's answers are recorded as: `acp:<clientInfo name>`.
    actor: Mutex<String>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Fired when the client has gone.
    closed: CancellationToken,
    /// The task runs, waited for before rein exits.
    runs: TaskTracker,
}

/// One ACP session: a workspace and the tasks filed under its id.
struct Session {
    id: String,
    cwd: PathBuf,
    /// The client's MCP servers, given to the agent steps of its tasks.
    mcp: Vec<McpUse>,
    running: Mutex<Option<Run>>,
    /// The approval requests the client is being asked now (a permission
    /// request outstanding): asked once, whichever turn or load asks.
    asked: Arc<Mutex<HashSet<String>>>,
}

/// The run a session has now: one at a time.
#[derive(Clone)]
struct Run {
    /// The task, once it exists.
    task: Option<TaskId>,
    /// `session/cancel`: the task pauses once its running steps finish.
    pause: CancellationToken,
}

impl Session {
    fn running(&self) -> Option<Run> {
        self.running.lock().ok().and_then(|r| r.clone())
    }

    /// Takes the session for a run, or says what it runs already.
    fn begin(self: &Arc<Self>) -> Result<Busy, String> {
        let mut running = self
            .running
            .lock()
            .map_err(|_| "the session's state is poisoned".to_owned())?;
        if let Some(run) = &*running {
            return Err(match &run.task {
                Some(task) => format!(
                    "session {} still runs task {task}: wait for it, or cancel it",
                    self.id
                ),
                None => format!("session {} is starting a task: wait for it", self.id),
            });
        }
        let pause = CancellationToken::new();
        *running = Some(Run {
            task: None,
            pause: pause.clone(),
        });
        Ok(Busy {
            session: Arc::clone(self),
            pause,
        })
    }
}

/// A session taken for a run; given back when dropped.
struct Busy {
    session: Arc<Session>,
    pause: CancellationToken,
}

impl Busy {
    fn runs(&self, task: &TaskId) {
        if let Ok(mut running) = self.session.running.lock()
            && let Some(run) = running.as_mut()
        {
            run.task = Some(task.clone());
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Ok(mut running) = self.session.running.lock() {
            *running = None;
        }
    }
}

impl AcpAgent {
    fn actor(&self) -> String {
        self.actor
            .lock()
            .map(|a| a.clone())
            .unwrap_or_else(|_| "acp:client".into())
    }

    fn initialize(&self, request: &InitializeRequest) -> InitializeResponse {
        if let Some(info) = &request.client_info
            && !info.name.trim().is_empty()
            && let Ok(mut actor) = self.actor.lock()
        {
            *actor = format!("acp:{}", info.name.trim());
        }
        // Version 1 is the one rein speaks, whatever the client asked for.
        InitializeResponse::new(agent_client_protocol::schema::ProtocolVersion::V1)
            .agent_capabilities(
                AgentCapabilities::new()
                    .load_session(true)
                    .mcp_capabilities(McpCapabilities::new().http(true))
                    // A prompt's images go to the task's agent steps.
                    .prompt_capabilities(
                        agent_client_protocol::v1::schema::PromptCapabilities::new().image(true),
                    ),
            )
            .agent_info(Implementation::new("rein", env!("CARGO_PKG_VERSION")).title("rein"))
    }

    /// Opens session `id` (a new one when `None`) on `cwd`.
    fn open(
        &self,
        id: Option<String>,
        cwd: PathBuf,
        servers: Vec<McpServer>,
    ) -> Result<Arc<Session>, String> {
        if !cwd.is_absolute() {
            return Err(format!(
                "cwd `{}` is not an absolute path: give the project's directory",
                cwd.display()
            ));
        }
        if !cwd.is_dir() {
            return Err(format!("cwd `{}` is not a directory", cwd.display()));
        }
        // The workspace rules, as a task made there would meet them.
        self.engine
            .config()
            .protected(None)
            .check_workspace(&cwd)
            .map_err(|e| format!("cwd `{}` cannot be a workspace: {e}", cwd.display()))?;
        let mcp = servers
            .into_iter()
            .map(mcp_use)
            .collect::<Result<Vec<_>, _>>()?;
        let open = self.sessions.lock().map_or(0, |s| s.len());
        let again = id.as_ref().is_some_and(|id| self.session(id).is_some());
        if open >= MOST_SESSIONS && !again {
            return Err(format!(
                "{open} sessions are open here, the most one rein acp holds ({MOST_SESSIONS}): start another rein acp for more"
            ));
        }
        let id = id.unwrap_or_else(|| format!("acp_{}", ulid::Ulid::new()));
        // Opened again (session/load of a session open here), it keeps what
        // the client is being asked.
        let asked = self
            .session(&id)
            .map(|s| Arc::clone(&s.asked))
            .unwrap_or_default();
        let session = Arc::new(Session {
            id: id.clone(),
            cwd,
            mcp,
            running: Mutex::new(None),
            asked,
        });
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.insert(id, Arc::clone(&session));
        }
        Ok(session)
    }

    fn session(&self, id: &str) -> Option<Arc<Session>> {
        self.sessions.lock().ok().and_then(|s| s.get(id).cloned())
    }

    fn cancel(&self, id: &str) {
        if let Some(run) = self.session(id).and_then(|s| s.running()) {
            run.pause.cancel();
        }
    }

    /// The tasks filed under a session, oldest first.
    async fn tasks_of(&self, session: &str) -> Result<Vec<TaskId>, EngineError> {
        let mut ids = Vec::new();
        let mut cursor = None;
        loop {
            let page = self
                .engine
                .list(&TaskFilter {
                    session_id: Some(session.to_owned()),
                    limit: Some(500),
                    cursor,
                    ..TaskFilter::default()
                })
                .await?;
            ids.extend(page.items.into_iter().map(|t| t.id));
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        ids.reverse();
        Ok(ids)
    }

    async fn load(
        self: Arc<Self>,
        request: LoadSessionRequest,
        responder: Responder<LoadSessionResponse, agent_client_protocol::V1>,
        cx: ConnectionTo<Client>,
    ) -> Result<(), agent_client_protocol::Error> {
        let id = request.session_id.0.to_string();
        // Only an id rein issued, of a session it knows: open here, or with
        // tasks filed under it.
        let issued = id
            .strip_prefix("acp_")
            .is_some_and(|ulid| ulid.len() == 26 && ulid::Ulid::from_string(ulid).is_ok());
        if !issued {
            let shown: String = id.chars().take(64).collect();
            return responder.respond_with_error(invalid(format!(
                "session `{shown}`{} is not one rein issued: a session id is `acp_` and a ULID, from session/new",
                if id.chars().count() > 64 { "…" } else { "" }
            )));
        }
        if self.session(&id).is_none() {
            match self.tasks_of(&id).await {
                Ok(tasks) if tasks.is_empty() => {
                    return responder.respond_with_error(invalid(format!(
                        "no session {id} is known here: it has no tasks in this store; open one with session/new"
                    )));
                }
                Ok(_) => {}
                Err(e) => return responder.respond_with_error(internal(&e.to_string())),
            }
        }
        if self.session(&id).is_some_and(|s| s.running().is_some()) {
            return responder.respond_with_error(invalid(format!(
                "session {id} is open here and runs a task: cancel it first"
            )));
        }
        let session = match self.open(Some(id.clone()), request.cwd, request.mcp_servers) {
            Ok(s) => s,
            Err(why) => return responder.respond_with_error(invalid(why)),
        };
        let tasks = match self.tasks_of(&id).await {
            Ok(t) => t,
            Err(e) => return responder.respond_with_error(internal(&e.to_string())),
        };
        // The conversation as it went: each task's prompt and what it did.
        let mut last = None;
        for task in &tasks {
            let mut view = View::new(task.clone(), &id);
            if let Err(e) = view.read_log(&self.engine, Some(&cx)).await {
                return responder.respond_with_error(internal(&e.to_string()));
            }
            last = Some(view);
        }
        responder.respond(LoadSessionResponse::new())?;
        commands(&cx, &id);
        // A task left unfinished (rein was stopped or killed) goes on, and
        // its pending questions are asked again; a paused one waits for
        // `/resume`, its questions asked all the same.
        if let Some(view) = last {
            let status = self.engine.get(&view.task).await.map(|s| s.status());
            match status {
                Ok(TaskStatus::InProgress | TaskStatus::Pending) => match session.begin() {
                    Ok(busy) => {
                        self.drive(&busy, view, &cx).await;
                    }
                    Err(why) => say(&cx, &id, &why),
                },
                Ok(TaskStatus::Paused) => {
                    let asker = Asker::new(&self, &cx, &session);
                    asker.ask_pending(&view.task).await;
                }
                _ => {}
            }
        }
        Ok(())
    }

    async fn prompt(
        self: Arc<Self>,
        request: PromptRequest,
        responder: Responder<PromptResponse, agent_client_protocol::V1>,
        cx: ConnectionTo<Client>,
    ) -> Result<(), agent_client_protocol::Error> {
        let id = request.session_id.0.to_string();
        let Some(session) = self.session(&id) else {
            return responder.respond_with_error(invalid(format!(
                "no session {id} here: open it with session/new or session/load"
            )));
        };
        let size: usize = request
            .prompt
            .iter()
            .map(|block| match block {
                ContentBlock::Text(t) => t.text.len(),
                _ => 0,
            })
            .sum();
        if size > MOST_PROMPT_BYTES {
            return responder.respond_with_error(invalid(format!(
                "the prompt has {size} bytes of text, more than the {MOST_PROMPT_BYTES} rein acp takes: put the material in a file of the workspace and name it"
            )));
        }
        let busy = match session.begin() {
            Ok(b) => b,
            Err(why) => return responder.respond_with_error(invalid(why)),
        };
        let text = prompt_text(&request.prompt);
        let images = match prompt_images(&request.prompt, &session.cwd) {
            Ok(i) => i,
            Err(why) => return responder.respond_with_error(invalid(why)),
        };
        if text.trim().is_empty() {
            return responder.respond_with_error(invalid(
                "the prompt has no text: say what the task is to achieve".into(),
            ));
        }
        let view = if text.trim() == RESUME {
            let paused = match self.tasks_of(&id).await {
                Ok(tasks) => tasks.last().cloned(),
                Err(e) => return responder.respond_with_error(internal(&e.to_string())),
            };
            let resumable = match &paused {
                Some(task) => self
                    .engine
                    .get(task)
                    .await
                    .ok()
                    .filter(|s| !s.status().is_terminal()),
                None => None,
            };
            let Some(state) = resumable else {
                say(
                    &cx,
                    &id,
                    "Nothing to resume: the session's last task has ended.",
                );
                return responder.respond(PromptResponse::new(StopReason::EndTurn));
            };
            say(&cx, &id, &format!("Resuming task {}.", state.id()));
            // Where its steps stand, from its log, shown again as they change.
            let mut view = View::new(state.id().clone(), &id);
            if let Err(e) = view.read_log(&self.engine, None).await {
                return responder.respond_with_error(internal(&e.to_string()));
            }
            view.sent_plan = None;
            view
        } else {
            let mut plan = rein_protocol::TaskDecomposition::new(text.trim(), Vec::new());
            let mut goal = self.goal.clone();
            goal.mcp = session.mcp.clone();
            goal.images = images;
            plan.goal = Some(goal);
            plan.budget = self.budget;
            let created = self
                .engine
                .create_here(CreateTask {
                    plan,
                    session_id: Some(id.clone()),
                    workspace: Some(session.cwd.clone()),
                    confined_to: None,
                })
                .await;
            let state = match created {
                Ok(s) => s,
                Err(e) => {
                    say(&cx, &id, &format!("The task was not created: {e}"));
                    return responder.respond(PromptResponse::new(StopReason::Refusal));
                }
            };
            say(&cx, &id, &format!("Task {} created.", state.id()));
            View::new(state.id().clone(), &id)
        };
        let task = view.task.clone();
        let stop = self.drive(&busy, view, &cx).await;
        // Free before the answer: the client's next prompt may follow at once.
        drop(busy);
        responder.respond(PromptResponse::new(stop).usage(self.usage_of(&task).await))
    }

    /// What the task's model calls used so far, in ACP's terms (its
    /// `inputTokens` fresh, the cache reads apart), for the turn's answer.
    async fn usage_of(&self, task: &TaskId) -> Option<agent_client_protocol::v1::schema::Usage> {
        let rows = self
            .engine
            .store()
            .usage(&rein_core::store::UsageFilter {
                task_id: Some(task.clone()),
                ..Default::default()
            })
            .await
            .ok()?;
        let mut sum = rein_protocol::Usage::default();
        for row in &rows {
            sum.add(&row.usage);
        }
        (!rows.is_empty()).then(|| {
            let fresh = sum.input_tokens - sum.cached_input_tokens;
            agent_client_protocol::v1::schema::Usage::new(sum.total(), fresh, sum.output_tokens)
                .thought_tokens(sum.reasoning_tokens)
                .cached_read_tokens(sum.cached_input_tokens)
        })
    }

    /// Runs the view's task here, streaming what happens, until it ends or
    /// pauses. The stop reason of the turn.
    async fn drive(
        self: &Arc<Self>,
        busy: &Busy,
        mut view: View,
        cx: &ConnectionTo<Client>,
    ) -> StopReason {
        let session = &busy.session;
        busy.runs(&view.task);
        let mut events = self.engine.subscribe();
        let asker = Asker::new(self, cx, session);
        // What was logged before the subscription: the task's creation, its
        // checkpoints so far.
        self.catch_up(&mut view, cx, &asker).await;
        asker.ask_pending(&view.task).await;
        let options = RunOptions {
            rerun: Vec::new(),
            skip: Vec::new(),
            pause: busy.pause.clone(),
            cancel: self.closed.child_token(),
            no_wait: false,
            decided_by: self.actor(),
            sweep: None,
        };
        let engine = Arc::clone(&self.engine);
        let task = view.task.clone();
        let running = self
            .runs
            .spawn(async move { engine.run(&task, options).await });
        tokio::pin!(running);
        let result = loop {
            tokio::select! {
                done = &mut running => break done,
                event = events.recv() => match event {
                    Ok(event) => self.forward(&mut view, &event, cx, &asker).await,
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        self.catch_up(&mut view, cx, &asker).await;
                    }
                    Err(broadcast::error::RecvError::Closed) => break (&mut running).await,
                },
            }
        };
        // The run's last events, from the log.
        self.catch_up(&mut view, cx, &asker).await;
        let state = match result {
            Ok(Ok(state)) => state,
            Ok(Err(e)) => {
                say(cx, &session.id, &format!("The task did not run: {e}"));
                return StopReason::EndTurn;
            }
            Err(e) => {
                say(cx, &session.id, &format!("The task's run failed: {e}"));
                return StopReason::EndTurn;
            }
        };
        match state.status() {
            TaskStatus::Paused if busy.pause.is_cancelled() => StopReason::Cancelled,
            _ => StopReason::EndTurn,
        }
    }

    /// Sends what the log holds past the view's last event.
    async fn catch_up(&self, view: &mut View, cx: &ConnectionTo<Client>, asker: &Asker) {
        loop {
            let Ok(events) = self.engine.events(&view.task, view.seen_to, 500).await else {
                return;
            };
            if events.is_empty() {
                return;
            }
            for event in &events {
                self.forward(view, event, cx, asker).await;
            }
        }
    }

    async fn forward(
        &self,
        view: &mut View,
        event: &HarnessEvent,
        cx: &ConnectionTo<Client>,
        asker: &Asker,
    ) {
        if event.task_id.as_ref() != Some(&view.task) || event.seq <= view.seen_to {
            return;
        }
        for update in view.updates(&self.engine, event, false).await {
            send(cx, &view.session, update);
        }
        if let TaskChange::HumanApprovalRequested { request } = &event.change {
            asker.ask(request);
        }
    }
}

fn internal(why: &str) -> agent_client_protocol::Error {
    agent_client_protocol::Error::internal_error().data(serde_json::Value::String(why.to_owned()))
}

/// Where a prompt's images are kept in the session's workspace, for its
/// task's agent steps to be given.
pub const PROMPT_IMAGES: &str = ".rein/images";

/// A prompt's image blocks saved in the workspace (`.rein/images/`, named by
/// their content), as the workspace paths a goal gives its agent steps. A
/// block rein cannot keep — a kind it does not send, bad base64, too large,
/// or another content type it does not take (audio, embedded resources) —
/// refuses the prompt, naming it: nothing is dropped.
fn prompt_images(blocks: &[ContentBlock], cwd: &std::path::Path) -> Result<Vec<String>, String> {
    use base64::Engine as _;
    use sha2::Digest as _;
    let mut paths = Vec::new();
    for (n, block) in blocks.iter().enumerate() {
        let image = match block {
            ContentBlock::Text(_) | ContentBlock::ResourceLink(_) => continue,
            ContentBlock::Image(i) => i,
            other => {
                let kind = serde_json::to_value(other)
                    .ok()
                    .and_then(|v| v["type"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| "unknown".into());
                return Err(format!(
                    "prompt block {n} is `{kind}`, which rein acp does not take: send text, resource links and images"
                ));
            }
        };
        let ext = rein_core::plan::image_extension(&image.mime_type).ok_or_else(|| {
            format!(
                "prompt block {n} is an image of type `{}`: rein takes PNG, JPEG, GIF and WebP",
                image.mime_type
            )
        })?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(image.data.trim())
            .map_err(|e| format!("prompt block {n}: the image's data is not base64 ({e})"))?;
        if bytes.len() > rein_runtimes::agent::MAX_IMAGE_BYTES {
            return Err(format!(
                "prompt block {n}: the image has {} bytes, more than the {} an image may have",
                bytes.len(),
                rein_runtimes::agent::MAX_IMAGE_BYTES
            ));
        }
        if paths.len() == rein_core::plan::MAX_IMAGES {
            return Err(format!(
                "the prompt has more than {} images, the most an agent step is given",
                rein_core::plan::MAX_IMAGES
            ));
        }
        let digest = sha2::Sha256::digest(&bytes);
        let name: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        let relative = format!("{PROMPT_IMAGES}/{name}.{ext}");
        let dir = cwd.join(PROMPT_IMAGES);
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(cwd.join(&relative), &bytes))
            .map_err(|e| format!("cannot keep the prompt's image in {}: {e}", dir.display()))?;
        if !paths.contains(&relative) {
            paths.push(relative);
        }
    }
    Ok(paths)
}

/// The text of a prompt: its text blocks, and the resources it links by URI.
fn prompt_text(blocks: &[ContentBlock]) -> String {
    let mut text = String::new();
    for block in blocks {
        match block {
            ContentBlock::Text(t) => text.push_str(&t.text),
            ContentBlock::ResourceLink(link) => {
                text.push_str(&format!(" {}", link.uri));
            }
            _ => {}
        }
    }
    text
}

/// An ACP client's MCP server as a step's: stdio or streamable HTTP.
fn mcp_use(server: McpServer) -> Result<McpUse, String> {
    let declared = match server {
        McpServer::Stdio(s) => {
            let mut allow_read: Vec<String> = Vec::new();
            let paths = std::iter::once(s.command.clone()).chain(s.args.iter().map(PathBuf::from));
            for dir in paths.filter_map(|p| code_dir(&p)) {
                let dir = dir.display().to_string();
                if !allow_read.contains(&dir) {
                    allow_read.push(dir);
                }
            }
            (
                s.name,
                rein_protocol::McpServer {
                    command: Some(s.command.display().to_string()),
                    args: s.args,
                    env: s.env.into_iter().map(|v| (v.name, v.value)).collect(),
                    allow_read,
                    ..rein_protocol::McpServer::default()
                },
            )
        }
        McpServer::Http(h) => (
            h.name,
            rein_protocol::McpServer {
                url: Some(h.url),
                headers: h.headers.into_iter().map(|v| (v.name, v.value)).collect(),
                ..rein_protocol::McpServer::default()
            },
        ),
        McpServer::Sse(s) => {
            return Err(format!(
                "MCP server `{}` speaks SSE, which rein does not: give it as stdio or streamable HTTP",
                s.name
            ));
        }
        _ => return Err("an MCP server of a kind rein does not know".into()),
    };
    if !rein_core::plan::valid_mcp_name(&declared.0) {
        return Err(format!(
            "MCP server `{}`: a server's name has letters, digits, `-` and `_` (no `__`), at most 32; rename it in the editor's settings",
            declared.0
        ));
    }
    Ok(McpUse {
        name: declared.0,
        server: Some(declared.1),
    })
}

/// Where a stdio server's own code lives, for a path it is started with (its
/// program, its script): the directory of an absolute file, or the package
/// root above the outermost `node_modules` it is in — what the server may read
/// beside the workspace, as a plan's `allow_read` says, under the same
/// permission rules. Relative paths and what does not exist give nothing.
fn code_dir(path: &std::path::Path) -> Option<PathBuf> {
    if !path.is_absolute() || !path.exists() {
        return None;
    }
    let dir = if path.is_dir() { path } else { path.parent()? };
    let installed = dir
        .ancestors()
        .filter(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .last()
        .and_then(std::path::Path::parent);
    Some(installed.unwrap_or(dir).to_path_buf())
}

fn send(cx: &ConnectionTo<Client>, session: &str, update: SessionUpdate) {
    if let Err(e) = cx.send_notification(SessionNotification::new(session.to_owned(), update)) {
        tracing::debug!(error = %e, "cannot send a session/update");
    }
}

fn text(text: &str) -> SessionUpdate {
    SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(TextContent::new(
        text,
    ))))
}

/// Says `line` to the client, as the agent's message.
fn say(cx: &ConnectionTo<Client>, session: &str, line: &str) {
    send(cx, session, text(&format!("{line}\n")));
}

/// The commands a session takes beside prompts.
fn commands(cx: &ConnectionTo<Client>, session: &str) {
    send(
        cx,
        session,
        SessionUpdate::AvailableCommandsUpdate(AvailableCommandsUpdate::new(vec![
            AvailableCommand::new("resume", "Resume the session's paused or interrupted task"),
        ])),
    );
}
