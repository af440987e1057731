//! One `[[steps]]` table of a plan file made into a plan step: its kind, its
//! action, its recovery policy and its durations.

use super::*;

/// `recovery.<error_type> = { … }` in a plan file.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct StrategyTable {
    /// What to do: retry, wait, skip, pause, abort or escalate.
    action: RecoveryAction,
    /// How many times to retry or wait before the fallback.
    #[serde(default)]
    max_retries: Option<u32>,
    /// The first delay between attempts (`2s`, `1m`); it doubles each time.
    #[serde(default)]
    retry_delay: Option<String>,
    /// What to do when the retries run out (not retry or wait).
    #[serde(default)]
    fallback: Option<RecoveryAction>,
}

/// One entry of a `[recovery]` table, as the plan's JSON Schema describes it.
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub(super) enum RecoverySetting {
    /// An action's name: `fatal = "pause"`.
    Action(RecoveryAction),
    /// A strategy: `transient = { action = "retry", max_retries = 5, retry_delay = "2s" }`.
    Strategy(StrategyTable),
}

/// A `[recovery]` table: each error type maps to an action name (`fatal = "pause"`)
/// or a table (`transient = { action = "retry", max_retries = 5, retry_delay = "2s" }`).
pub(super) fn recovery_policy(
    prefix: &str,
    table: BTreeMap<ErrorType, toml::Value>,
) -> Result<RecoveryPolicy, String> {
    let mut policy = RecoveryPolicy::new();
    for (error, value) in table {
        let at = format!("{prefix}recovery.{error}");
        let strategy = match value {
            toml::Value::String(_) => RecoveryStrategy::action(
                RecoveryAction::deserialize(value).map_err(|e| format!("{at}: {e}"))?,
            ),
            toml::Value::Table(_) => {
                let t = StrategyTable::deserialize(value).map_err(|e| format!("{at}: {e}"))?;
                let retry_delay_ms = match &t.retry_delay {
                    Some(d) => Some(
                        u64::try_from(parse_duration(&format!("{at}.retry_delay"), d)?.as_millis())
                            .unwrap_or(u64::MAX),
                    ),
                    None => None,
                };
                RecoveryStrategy {
                    action: t.action,
                    max_retries: t.max_retries,
                    retry_delay_ms,
                    fallback: t.fallback,
                }
            }
            other => {
                return Err(format!(
                    "{at}: expected an action (\"retry\", \"wait\", \"skip\", \"pause\", \"abort\", \"escalate\") or a table, found {}",
                    other.type_str()
                ));
            }
        };
        if strategy
            .fallback
            .is_some_and(|f| matches!(f, RecoveryAction::Retry | RecoveryAction::Wait))
        {
            return Err(format!(
                "{at}: the fallback after retries run out cannot be retry or wait"
            ));
        }
        policy.insert(error, strategy);
    }
    Ok(policy)
}

/// What kind of step it is.
#[derive(Debug, Default, Clone, Copy, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(super) enum StepKind {
    #[default]
    Exec,
    Gate,
    Review,
    Approve,
    Agent,
}

/// The checkpoint a gate step records.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(super) enum GateCheckpoint {
    QualityGate,
    TestPass,
    BuildPass,
}

/// One `[[steps]]` table.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct StepFile {
    /// The step's id: letters, digits, `-`, `_` and `.`, unique in the plan.
    id: String,
    /// Command steps (and gates, reviews): the shell script, run with `sh -c` in the workspace.
    #[serde(default)]
    run: Option<String>,
    /// Approve steps: the question a person is asked.
    #[serde(default)]
    title: Option<String>,
    /// Approve steps: the answers offered (default approve, deny).
    #[serde(default)]
    options: Vec<String>,
    /// Approve steps: the option recommended.
    #[serde(default)]
    recommended: Option<String>,
    /// Approve steps: the decision taken when the deadline passes (default deny).
    #[serde(default)]
    default: Option<Decision>,
    /// Approve steps: why a person is asked.
    #[serde(default)]
    trigger: Option<Trigger>,
    /// Approve steps: how urgent the question is.
    #[serde(default)]
    priority: Option<Priority>,
    /// What the step does, for people (approve steps: what the person should know).
    #[serde(default)]
    description: Option<String>,
    /// The steps that must complete before this one starts.
    #[serde(default)]
    depends_on: Vec<String>,
    /// How long one attempt may run (`30s`, `10m`); approve steps: how long a person has.
    #[serde(default)]
    timeout: Option<String>,
    /// Whether running it again is harmless: a step interrupted by a crash is then re-run without asking.
    #[serde(default)]
    idempotent: Option<bool>,
    /// exec (default), gate, review, approve or agent.
    #[serde(default)]
    kind: StepKind,
    /// Agent steps: read, write or execute (what the work is; execute unless set).
    #[serde(default, rename = "type")]
    step_type: Option<StepType>,
    /// Gate steps: the checkpoint recorded (default quality_gate).
    #[serde(default)]
    checkpoint: Option<GateCheckpoint>,
    /// Command steps: environment variables the command is given.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Command and agent steps: whether the command (the agent's commands
    /// and stdio MCP servers) may use the network.
    #[serde(default)]
    network: bool,
    /// Command steps: the memory limit per process, in MiB.
    #[serde(default)]
    memory_mb: Option<u64>,
    /// Command steps: the most processes it may have at once.
    #[serde(default)]
    processes: Option<u32>,
    /// Command steps: directories beyond the workspace the command may read.
    #[serde(default)]
    allow_read: Vec<String>,
    /// Command steps: permission rules of the step's own.
    #[serde(default)]
    permissions: Vec<rein_protocol::PermissionRule>,
    /// What the step reads, recorded in the plan's shared state.
    #[serde(default)]
    reads: Vec<String>,
    /// What the step writes, recorded in the plan's shared state.
    #[serde(default)]
    writes: Vec<String>,
    /// low, medium or high: a high-risk step is security-scanned before it runs.
    #[serde(default)]
    risk_level: RiskLevel,
    /// Why the step is risky, for the person asked.
    #[serde(default)]
    risk_description: Option<String>,
    /// Permissions the step declares it needs (`network`, `write:PATH`, …), checked against the rules.
    #[serde(default)]
    required_permissions: Vec<String>,
    /// How the step's failures are handled, by error type, over the plan's `[recovery]`.
    #[serde(default)]
    #[schemars(with = "BTreeMap<ErrorType, RecoverySetting>")]
    recovery: BTreeMap<ErrorType, toml::Value>,
    /// Run as plan–execute–verify: contract, approval, execute, evidence, verification.
    #[serde(default)]
    pev: bool,
    /// Agent steps: the work asked for, and of whom.
    #[serde(default)]
    prompt: Option<String>,
    /// Agent steps: openai (default), openai-responses, anthropic, or one a plugin's harness serves.
    #[serde(default)]
    provider: Option<String>,
    /// Agent steps: the model (default `REIN_MODEL`).
    #[serde(default)]
    model: Option<String>,
    /// Agent steps: auto, rein or a harness id (default: the runtime policy).
    #[serde(default)]
    runtime: Option<String>,
    /// Agent steps: the built-in tools it is offered (read_file, write_file, list_dir, run_command, delegate).
    #[serde(default)]
    tools: Option<Vec<String>>,
    /// Agent steps naming the same session share one conversation.
    #[serde(default)]
    session: Option<String>,
    /// Agent steps: images in the workspace given with the prompt.
    #[serde(default)]
    images: Option<Vec<String>>,
    /// Agent steps: the plugin `delegate` calls hand their children to.
    #[serde(default)]
    delegate_to: Option<String>,
    /// Agent steps: `auto`, `required`, `none` or one of the step's tools.
    #[serde(default)]
    tool_choice: Option<String>,
    /// Agent steps: an answer without any tool call fails the step.
    #[serde(default)]
    require_tool_call: Option<bool>,
    /// Agent steps: the most model turns per budget.
    #[serde(default)]
    max_turns: Option<u32>,
    /// Agent steps: `fail` (default) or `continue` when the model stops at
    /// its token limit.
    #[serde(default)]
    on_token_limit: Option<String>,
    /// Agent steps: the most bytes of one tool answer the model is sent.
    #[serde(default)]
    max_tool_answer_bytes: Option<u64>,
    /// Agent steps: the share of the model's window (percent) a request may
    /// fill before the conversation is compacted.
    #[serde(default)]
    compact_at_percent: Option<u8>,
    /// Agent steps: the models that serve a turn when the step's cannot.
    #[serde(default)]
    fallback_models: Option<Vec<String>>,
    /// Agent steps: what the step's model calls may spend.
    #[serde(default)]
    budget: Option<rein_protocol::Budget>,
    /// Agent steps: whether model answers are asked for as a stream.
    #[serde(default)]
    stream: Option<bool>,
    /// Agent steps: the MCP servers whose tools the step is offered.
    #[serde(default)]
    mcp: Option<Vec<String>>,
    /// Plan–execute–verify steps: the commands that check the result.
    #[serde(default)]
    verify: Vec<String>,
    /// Plan–execute–verify steps: the command that undoes the step if verification fails.
    #[serde(default)]
    rollback: Option<String>,
}

pub(super) fn parse_duration(what: &str, value: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(value.trim()).map_err(|e| {
        format!("{what}: `{value}` is not a duration ({e}); write e.g. 30s, 10m or 1h30m")
    })
}

/// One `[[steps]]` table as a [`TaskStep`]; errors name the step and the key.
pub(super) fn step_from_file(
    s: StepFile,
    base: &Path,
    servers: &BTreeMap<String, rein_protocol::McpServer>,
) -> Result<TaskStep, String> {
    let id = s.id;
    let only_for = |key: &str, kind: &str| {
        format!("step `{id}`: `{key}` is only for steps of kind = \"{kind}\"")
    };
    let timeout_ms = match &s.timeout {
        Some(t) => {
            let d = parse_duration(&format!("step `{id}`: timeout"), t)?;
            Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        }
        None => None,
    };
    if s.kind != StepKind::Gate && s.checkpoint.is_some() {
        return Err(only_for("checkpoint", "gate"));
    }
    if s.kind != StepKind::Approve {
        let approve_keys = [
            ("title", s.title.is_some()),
            ("options", !s.options.is_empty()),
            ("recommended", s.recommended.is_some()),
            ("default", s.default.is_some()),
            ("trigger", s.trigger.is_some()),
            ("priority", s.priority.is_some()),
        ];
        if let Some((key, _)) = approve_keys.iter().find(|(_, set)| *set) {
            return Err(only_for(key, "approve"));
        }
    }
    let (checkpoint, step_type) = match (s.kind, s.checkpoint) {
        (StepKind::Gate, None | Some(GateCheckpoint::QualityGate)) => {
            (CheckpointType::QualityGate, StepType::Review)
        }
        (StepKind::Gate, Some(GateCheckpoint::TestPass)) => {
            (CheckpointType::TestPass, StepType::Review)
        }
        (StepKind::Gate, Some(GateCheckpoint::BuildPass)) => {
            (CheckpointType::BuildPass, StepType::Review)
        }
        (StepKind::Exec, _) => (CheckpointType::TaskExec, StepType::Execute),
        (StepKind::Review, _) => (CheckpointType::TaskReview, StepType::Review),
        (StepKind::Approve, _) => (CheckpointType::UserApproval, StepType::Approve),
        (StepKind::Agent, _) => (CheckpointType::TaskExec, StepType::Execute),
    };
    // A review step is done by an agent when it has a prompt (and by a
    // command when it has `run`).
    let by_agent = s.kind == StepKind::Agent || (s.kind == StepKind::Review && s.prompt.is_some());
    let step_type = match (s.kind, s.step_type) {
        (_, None) => step_type,
        (StepKind::Agent, Some(t @ (StepType::Read | StepType::Write | StepType::Execute))) => t,
        (StepKind::Agent, Some(_)) => {
            return Err(format!(
                "step `{id}`: `type` of an agent step is read, write or execute; a review is kind = \"review\", a person's decision kind = \"approve\""
            ));
        }
        (_, Some(_)) => return Err(only_for("type", "agent")),
    };
    let agent_keys = [
        ("prompt", s.prompt.is_some()),
        ("provider", s.provider.is_some()),
        ("model", s.model.is_some()),
        ("runtime", s.runtime.is_some()),
        ("tools", s.tools.is_some()),
        ("session", s.session.is_some()),
        ("tool_choice", s.tool_choice.is_some()),
        ("require_tool_call", s.require_tool_call.is_some()),
        ("max_turns", s.max_turns.is_some()),
        ("on_token_limit", s.on_token_limit.is_some()),
        ("max_tool_answer_bytes", s.max_tool_answer_bytes.is_some()),
        ("compact_at_percent", s.compact_at_percent.is_some()),
        ("fallback_models", s.fallback_models.is_some()),
        ("budget", s.budget.is_some()),
        ("stream", s.stream.is_some()),
        ("mcp", s.mcp.is_some()),
        ("images", s.images.is_some()),
        ("delegate_to", s.delegate_to.is_some()),
    ];
    if !by_agent && let Some((key, _)) = agent_keys.iter().find(|(_, set)| *set) {
        return Err(only_for(key, "agent"));
    }
    let (action, step_timeout, description) = if by_agent {
        if s.run.is_some() {
            return Err(format!(
                "step `{id}`: an agent step has a `prompt`, not a `run`"
            ));
        }
        let prompt = s.prompt.filter(|p| !p.trim().is_empty()).ok_or_else(|| {
            format!("step `{id}`: an agent step needs a `prompt`: the work to do")
        })?;
        let tools = s.tools.unwrap_or_default();
        for tool in &tools {
            if !AGENT_TOOLS.contains(&tool.as_str()) {
                return Err(format!(
                    "step `{id}`: unknown tool `{tool}`; the tools are {}",
                    AGENT_TOOLS.join(", ")
                ));
            }
        }
        if let Some(choice) = &s.tool_choice
            && !matches!(choice.as_str(), "auto" | "required" | "none")
            && !tools.contains(choice)
        {
            return Err(format!(
                "step `{id}`: `tool_choice = \"{choice}\"` is neither auto, required, none nor one of the step's tools ({})",
                if tools.is_empty() {
                    "it has none".to_owned()
                } else {
                    tools.join(", ")
                }
            ));
        }
        match s.delegate_to.as_deref() {
            Some(p) if p.trim().is_empty() => {
                return Err(format!(
                    "step `{id}`: `delegate_to` names no plugin; name the plugin its `delegate` calls are handed to"
                ));
            }
            Some(p) if !tools.iter().any(|t| t == "delegate") => {
                return Err(format!(
                    "step `{id}`: `delegate_to = \"{p}\"` hands the step's `delegate` calls to a plugin, and the step has no `delegate` tool; add \"delegate\" to its `tools`"
                ));
            }
            _ => {}
        }
        if s.max_turns.is_some_and(|n| n == 0 || n > 1000) {
            return Err(format!("step `{id}`: `max_turns` is between 1 and 1000"));
        }
        let continue_at_length = match s.on_token_limit.as_deref() {
            None | Some("fail") => false,
            Some("continue") => true,
            Some(other) => {
                return Err(format!(
                    "step `{id}`: `on_token_limit = \"{other}\"`; write \"fail\" or \"continue\""
                ));
            }
        };
        if s.max_tool_answer_bytes
            .is_some_and(|n| !(1024..=16 * 1024 * 1024).contains(&n))
        {
            return Err(format!(
                "step `{id}`: `max_tool_answer_bytes` is between 1024 and 16777216 (16 MiB)"
            ));
        }
        if s.compact_at_percent
            .is_some_and(|n| !(10..=95).contains(&n))
        {
            return Err(format!(
                "step `{id}`: `compact_at_percent` is between 10 and 95 (the share of the model's context window a request may fill before the conversation is compacted)"
            ));
        }
        let fallback_models = s.fallback_models.unwrap_or_default();
        for (i, name) in fallback_models.iter().enumerate() {
            rein_protocol::check_model_name(name)
                .map_err(|e| format!("step `{id}`: `fallback_models`: {e}"))?;
            if fallback_models[..i].contains(name) {
                return Err(format!(
                    "step `{id}`: `fallback_models` names `{name}` twice"
                ));
            }
        }
        let limits = rein_protocol::AgentLimits {
            tool_choice: s.tool_choice,
            require_tool_call: s.require_tool_call.unwrap_or(false),
            max_turns: s.max_turns,
            continue_at_length,
            max_tool_answer_bytes: s.max_tool_answer_bytes,
            compact_at_percent: s.compact_at_percent,
            fallback_models,
            budget: s.budget,
            stream: s.stream,
            delegate_to: s.delegate_to,
        };
        let mut mcp = Vec::new();
        for name in s.mcp.unwrap_or_default() {
            if !valid_mcp_name(&name) {
                return Err(format!(
                    "step `{id}`: `mcp` names `{name}`; a server's name has letters, digits, `-` and `_` (no `__`), at most 32"
                ));
            }
            if mcp.iter().any(|m: &rein_protocol::McpUse| m.name == name) {
                return Err(format!("step `{id}`: `mcp` names `{name}` twice"));
            }
            mcp.push(rein_protocol::McpUse {
                server: servers.get(&name).cloned(),
                name,
            });
        }
        if s.memory_mb.is_some()
            || s.processes.is_some()
            || !s.allow_read.is_empty()
            || !s.env.is_empty()
        {
            return Err(format!(
                "step `{id}`: `memory_mb`, `processes`, `allow_read` and `env` confine a command step; an agent step's MCP servers take `allow_read` and `env` in their [mcp_servers] declaration"
            ));
        }
        let description = s.description.unwrap_or_else(|| prompt.clone());
        (
            StepAction::Agent {
                prompt,
                provider: s.provider,
                model: s.model,
                runtime: s.runtime,
                tools,
                session: s.session,
                limits: Box::new(limits),
                mcp,
                network: s.network,
                images: s.images.unwrap_or_default(),
            },
            timeout_ms,
            description,
        )
    } else if s.kind == StepKind::Approve {
        if s.run.is_some() {
            return Err(format!(
                "step `{id}`: an approve step asks a person and has no `run`"
            ));
        }
        if s.network
            || s.memory_mb.is_some()
            || s.processes.is_some()
            || !s.allow_read.is_empty()
            || !s.permissions.is_empty()
        {
            return Err(format!(
                "step `{id}`: `network`, `memory_mb`, `processes`, `allow_read` and `permissions` confine a command; an approve step runs none"
            ));
        }
        let title = s
            .title
            .ok_or_else(|| format!("step `{id}`: an approve step needs a `title`"))?;
        let trigger = s.trigger.unwrap_or(if s.options.is_empty() {
            Trigger::SignificantChange
        } else {
            Trigger::MultipleOptions
        });
        let description = s.description.unwrap_or_default();
        let action = StepAction::Approval {
            title: title.clone(),
            description: description.clone(),
            options: s.options,
            recommended: s.recommended,
            // For an approve step, `timeout` is how long a person has to answer.
            timeout_ms,
            on_expiry: s.default.unwrap_or(Decision::Deny),
            trigger,
            priority: s.priority,
        };
        (
            action,
            None,
            if description.is_empty() {
                title
            } else {
                description
            },
        )
    } else {
        let run = s
            .run
            .ok_or_else(|| format!("step `{id}` needs `run`: the command to run"))?;
        let description = s.description.unwrap_or_else(|| run.clone());
        if s.memory_mb == Some(0) {
            return Err(format!("step `{id}`: `memory_mb` must be at least 1"));
        }
        if s.processes == Some(0) {
            return Err(format!(
                "step `{id}`: `processes` must be at least 1 (the command itself is one)"
            ));
        }
        (
            StepAction::Command {
                run,
                env: s.env,
                network: s.network,
                memory_mb: s.memory_mb,
                processes: s.processes,
                allow_read: s
                    .allow_read
                    .iter()
                    .map(|r| base.join(r).display().to_string())
                    .collect(),
            },
            timeout_ms,
            description,
        )
    };
    let recovery = recovery_policy(&format!("step `{id}`: "), s.recovery)?;
    let pev = if s.pev {
        if s.kind == StepKind::Approve {
            return Err(format!(
                "step `{id}`: `pev` runs a command under a contract; an approve step runs none"
            ));
        }
        if s.verify.iter().all(|v| v.trim().is_empty()) {
            return Err(format!(
                "step `{id}`: a step with `pev = true` needs `verify`: at least one command that checks its result"
            ));
        }
        Some(rein_protocol::Pev {
            verify: s.verify,
            rollback: s.rollback,
            contract_id: None,
        })
    } else if !s.verify.is_empty() || s.rollback.is_some() {
        let key = if s.verify.is_empty() {
            "rollback"
        } else {
            "verify"
        };
        return Err(format!(
            "step `{id}`: `{key}` is only for plan–execute–verify steps; add `pev = true`"
        ));
    } else {
        None
    };
    Ok(TaskStep {
        pev,
        recovery,
        permissions: s.permissions,
        reads: s.reads,
        writes: s.writes,
        id,
        description,
        step_type,
        depends_on: s.depends_on,
        blocking_steps: Vec::new(),
        checkpoint,
        required_permissions: s.required_permissions,
        risk_level: s.risk_level,
        risk_description: s.risk_description,
        action,
        timeout_ms: step_timeout,
        // An agent step resumes from its journal, so running it again repeats
        // at most the tool call in flight: idempotent unless the plan says not.
        idempotent: s.idempotent.unwrap_or(by_agent),
    })
}
