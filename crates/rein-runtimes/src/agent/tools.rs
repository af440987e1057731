//! The tools an agent step's model calls: the built-in file and command tools,
//! MCP servers' tools and delegation, each confined to the task's workspace and
//! reported to the step's log.

use super::*;

/// The tools offered to the model, by name.
pub(super) fn tool_specs(names: &[String]) -> Vec<ToolSpec> {
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

/// Whether the agent step may use the network (its commands, its stdio MCP
/// servers).
pub(super) fn step_network(request: &StepRequest) -> bool {
    matches!(request.step.action, StepAction::Agent { network: true, .. })
}

/// What the permission rules' `decision` on a tool call comes to: go on
/// (with a note when a person approved it), or the call's outcome — refused,
/// or waiting for a person, who is asked to allow `what`.
pub(super) fn permitted(
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
pub(super) async fn call_mcp(
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
pub(super) enum ToolOutcome {
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

/// A path the model gave, inside the workspace (`..`, absolute paths
/// elsewhere and symlinks out are refused), relative to it: the file tools
/// open it beneath the pinned workspace ([`rein_sandbox::Pinned`]).
pub(super) fn resolve(
    workspace: &rein_sandbox::Pinned,
    path: &str,
) -> Result<std::path::PathBuf, String> {
    rein_sandbox::workspace::relative(workspace, path).map_err(|e| e.to_string())
}

/// At most `n` characters of `text`, marked when cut.
/// Reports a tool call the model asked for, as it starts, in the shape of an
/// ACP `tool_call` update (what an external agent's updates are recorded as),
/// so that every runtime's calls read alike in the task's log.
pub(super) fn report_call(request: &StepRequest, call: &ToolCall) {
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
pub(super) fn bounded(
    request: &StepRequest,
    call: &ToolCall,
    text: String,
    limit: usize,
) -> String {
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
pub(super) fn report_result(request: &StepRequest, call: &ToolCall, answer: &str) {
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
pub(super) fn report_status(request: &StepRequest, call: &ToolCall, status: &str) {
    if let Some(asker) = &request.asker {
        asker.report(json!({
            "sessionUpdate": "tool_call_update",
            "toolCallId": call.id,
            "status": status,
        }));
    }
}

pub(super) fn clip(text: &str, n: usize) -> String {
    match text.char_indices().nth(n) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

impl AgentExecutor {
    /// `delegate {prompt}`: a child session on the same, locked model route,
    /// run as this step (its identity, rules and cancellation), whose final
    /// answer is the call's result. The child is keyed by the call, so a
    /// resumed step picks up the child where it stopped, and takes the answer
    /// of one that finished instead of running it again.
    pub(super) async fn delegate(
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
        if let Some(plugin) = &turn.limits.delegate_to {
            let outcome = self
                .delegate_to_plugin(turn, &child, plugin, prompt, &child_tools)
                .await;
            return self.delegated_answer(turn, &child, outcome, &report).await;
        }
        let child_limits = rein_protocol::AgentLimits {
            tool_choice: None,
            require_tool_call: false,
            ..turn.limits.clone()
        };
        let child_turn = Turn {
            limits: &child_limits,
            ..*turn
        };
        let outcome = self
            .converse(&child_turn, &child, prompt, &child_tools)
            .await;
        if let StepOutcome::Passed { output: Some(o) } = &outcome {
            let turns = o["turns"].as_u64().unwrap_or(0);
            if let Err(e) = turn
                .sessions
                .took_turns(child.id.as_str(), BUILTIN_RUNTIME, None, turns)
                .await
            {
                return ToolOutcome::Stopped(unwritten(&e));
            }
        }
        self.delegated_answer(turn, &child, outcome, &report).await
    }

    /// What a delegated child's run answers its parent's `delegate` call:
    /// its final text (kept, so a resumed parent takes it), or what went
    /// wrong; a refused permission stops the step.
    async fn delegated_answer(
        &self,
        turn: &Turn<'_>,
        child: &AgentSessionInfo,
        outcome: StepOutcome,
        report: &impl Fn(&str),
    ) -> ToolOutcome {
        match outcome {
            StepOutcome::Passed { output } => {
                let output = output.unwrap_or_default();
                let text = output["text"].as_str().unwrap_or_default().to_owned();
                if let Err(e) = turn.sessions.answered(child.id.as_str(), &text).await {
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
                    let error = if error.contains(child.id.as_str()) {
                        error
                    } else {
                        format!("delegated session {}: {error}", child.id)
                    };
                    return ToolOutcome::Stopped(StepOutcome::Failed {
                        error,
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

    /// A `delegate` call of a step with `delegate_to = PLUGIN` (rules
    /// 22–23): the child is made by its owner — the harness the runtime
    /// policy gives the step's route — locked to that harness, handed to
    /// `plugin`, and run on the plugin's harness scoped to the owner. A
    /// refusal fails the step, naming why.
    async fn delegate_to_plugin(
        &self,
        turn: &Turn<'_>,
        child: &AgentSessionInfo,
        plugin: &str,
        prompt: &str,
        tools: &[String],
    ) -> StepOutcome {
        let request = turn.request;
        let refused = |why: String| {
            failed(
                format!(
                    "step `{}` hands its `delegate` calls to plugin `{plugin}`: {why}",
                    request.step.id
                ),
                Failure::PermissionDenied,
                None,
            )
        };
        let route = child.route.clone().unwrap_or_default();
        let Some((provider, model)) = route.split_once('/') else {
            return refused(format!("the session's route `{route}` names no model"));
        };
        let wanted = SelectionRequest {
            session_runtime: child.pinned_runtime.clone(),
            session: Some(child.id.to_string()),
            ..self.policy.request(
                provider,
                Some(model.to_owned()),
                &self.providers.facts(provider),
            )
        };
        let decision = match select(&self.registry, &self.policy, &wanted).await {
            Ok(d) => d,
            Err(e) => return refused(e.to_string()),
        };
        if decision.selected == BUILTIN_RUNTIME {
            return refused(format!(
                "sessions on `{route}` are run by rein's built-in runtime, which is no plugin's and lists no delegates; give the route a plugin's harness in the runtime policy (`[runtime.models] \"{route}\" = \"HARNESS\"`)"
            ));
        }
        // Made by its owner: locked to the owner's harness.
        let owner = decision.selected.clone();
        let mut child = child.clone();
        if child.runtime.as_deref() != Some(owner.as_str())
            || child.pinned_runtime.as_deref() != Some(owner.as_str())
        {
            match turn
                .sessions
                .change(child.id.as_str(), TASK_ACTOR, "session.lock", |s| {
                    s.runtime = Some(owner.clone());
                    s.pinned_runtime = Some(owner.clone());
                    Ok(Some(()))
                })
                .await
            {
                Ok((c, _)) => child = c,
                Err(e) => return unwritten(&e),
            }
        }
        if child.delegated_execution.is_none() {
            match turn
                .sessions
                .hand_over(
                    &child,
                    plugin,
                    &DelegateAsk::default(),
                    &self.registry,
                    TASK_ACTOR,
                )
                .await
            {
                Ok(c) => child = c,
                Err(rein_core::EngineError::Store(e)) => {
                    return unwritten(&rein_core::EngineError::Store(e));
                }
                // It says which session and plugin, and why.
                Err(e) => return failed(e.to_string(), Failure::PermissionDenied, None),
            }
        }
        match self.handed(&child, plugin) {
            Ok(delegated) => {
                self.run_plugin(
                    request,
                    turn.cancel,
                    turn.sessions,
                    &child,
                    decision,
                    Some(delegated),
                    prompt,
                    tools,
                    Vec::new(),
                    Vec::new(),
                )
                .await
            }
            Err(why) => refused(why),
        }
    }

    /// Runs one tool call; its answer (or what went wrong) is text for the
    /// model, unless a person must approve it first.
    pub(super) async fn run_tool(
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
    pub(super) async fn run_file_tool(
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
    pub(super) async fn run_command(
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
