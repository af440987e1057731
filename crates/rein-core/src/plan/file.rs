//! The TOML plan file: its shape, its MCP server declarations, and how it becomes a
//! plan (`parse_plan`, `load_plan_file`), a confirm step added where it asks for one.

use super::*;

/// Problems reading a plan file.
#[derive(Debug, thiserror::Error)]
pub enum PlanFileError {
    #[error("cannot read plan file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("plan file {path} is not a valid plan: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("plan file {path}: {errors}")]
    Invalid { path: PathBuf, errors: PlanErrors },
}

/// What a plan file describes: the validated plan plus where and as what it runs.
#[derive(Debug, Clone)]
pub struct PlanSpec {
    pub plan: TaskDecomposition,
    pub session: Option<String>,
    /// The workspace directory, resolved against the plan file's directory.
    pub workspace: Option<PathBuf>,
}

/// A plan file (`rein run PLAN`).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PlanFile {
    /// What the task is, for people (the task's `original_task`).
    description: String,
    /// A name for the task's session, shared by tasks that belong together.
    #[serde(default)]
    session: Option<String>,
    /// The directory the steps run in, relative to the plan file (default: a fresh one under the data directory).
    #[serde(default)]
    workspace: Option<String>,
    /// The most steps that run at once.
    #[serde(default)]
    max_parallel: Option<u32>,
    /// Stop every step when one fails (default: only the steps that depend on it).
    #[serde(default)]
    fail_fast: bool,
    /// keep | on_success | always: what becomes of a fresh workspace at the end.
    #[serde(default)]
    cleanup: rein_protocol::WorkspaceCleanup,
    /// A shared harness state to record the task's steps into.
    #[serde(default)]
    shared_state: Option<String>,
    /// CP1 by a person: nothing runs until someone confirms the task.
    #[serde(default)]
    confirm: bool,
    /// low, medium or high: the plan's risk.
    #[serde(default)]
    risk_level: RiskLevel,
    /// How long the task is expected to take (`10m`).
    #[serde(default)]
    estimated_duration: Option<String>,
    /// How failures are handled, by error type, over rein's defaults.
    #[serde(default)]
    #[schemars(with = "BTreeMap<ErrorType, RecoverySetting>")]
    recovery: BTreeMap<ErrorType, toml::Value>,
    /// MCP tool servers the plan's agent steps may name.
    #[serde(default)]
    mcp_servers: BTreeMap<String, McpServerFile>,
    /// What the task's model calls may spend before a person is asked.
    #[serde(default)]
    budget: Option<rein_protocol::Budget>,
    /// What of the workspace is kept at each step boundary.
    #[serde(default)]
    snapshot: Option<rein_protocol::SnapshotRules>,
    /// The steps, run as a DAG of their `depends_on`.
    #[serde(default)]
    steps: Vec<StepFile>,
}

/// `[mcp_servers.NAME]` in a plan file or in `rein.toml`: `command` (with
/// `args`, `env`, `allow_read`) for a server rein starts, or `url` (with
/// `headers`) for a streamable HTTP one.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerFile {
    /// A stdio server: the program rein starts, in the step's sandbox.
    #[serde(default)]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables it is given.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Directories beyond the workspace it may read (its own code, say).
    #[serde(default)]
    pub allow_read: Vec<String>,
    /// A streamable HTTP server's URL.
    #[serde(default)]
    pub url: Option<String>,
    /// Headers sent to an HTTP server (`Authorization`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// How long one tool call may take: `60s` unless set.
    #[serde(default)]
    pub timeout: Option<String>,
}

/// Whether `name` may name an MCP server: letters, digits, `-` and `_`,
/// without `__` (which separates server from tool in the names the model
/// sees, `fs__read_file`).
pub fn valid_mcp_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl McpServerFile {
    /// The server's declaration; `at` says where (`mcp_servers.fs`), `base`
    /// is the directory relative `allow_read` paths (and a relative
    /// `command` with a `/`) start from.
    pub fn resolve(self, at: &str, base: &Path) -> Result<rein_protocol::McpServer, String> {
        let timeout_ms = match &self.timeout {
            Some(t) => {
                let d = parse_duration(&format!("{at}.timeout"), t)?;
                if d.is_zero() {
                    return Err(format!("{at}.timeout: must be more than zero"));
                }
                Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            }
            None => None,
        };
        match (&self.command, &self.url) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "{at}: give `command` (a server rein starts) or `url` (a streamable HTTP one), not both"
                ));
            }
            (None, None) => {
                return Err(format!(
                    "{at}: needs `command` (a server rein starts, e.g. command = \"npx\") or `url` (a streamable HTTP endpoint)"
                ));
            }
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(format!("{at}.command is empty"));
                }
                if !self.headers.is_empty() {
                    return Err(format!(
                        "{at}: `headers` go with `url`; a server rein starts gets `env`"
                    ));
                }
            }
            (None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!(
                        "{at}.url `{url}` is not an http:// or https:// URL"
                    ));
                }
                let stdio_keys = [
                    ("args", !self.args.is_empty()),
                    ("env", !self.env.is_empty()),
                    ("allow_read", !self.allow_read.is_empty()),
                ];
                if let Some((key, _)) = stdio_keys.iter().find(|(_, set)| *set) {
                    return Err(format!(
                        "{at}: `{key}` goes with `command`; a server at a URL runs elsewhere"
                    ));
                }
            }
        }
        let command = self.command.map(|c| {
            if c.contains('/') && !Path::new(&c).is_absolute() {
                base.join(c).display().to_string()
            } else {
                c
            }
        });
        Ok(rein_protocol::McpServer {
            command,
            args: self.args,
            env: self.env,
            allow_read: self
                .allow_read
                .iter()
                .map(|r| base.join(r).display().to_string())
                .collect(),
            url: self.url,
            headers: self.headers,
            timeout_ms,
        })
    }
}

/// The tools an agent step may be given.
pub const AGENT_TOOLS: &[&str] = &[
    "read_file",
    "write_file",
    "list_dir",
    "run_command",
    "delegate",
];

/// The id of the step `confirm = true` adds.
pub const CONFIRM_STEP: &str = "confirm";

/// `confirm = true`: a first step that asks a person to confirm the task (its
/// `user_approval` checkpoint is the CP1 confirmation); every step without
/// dependencies waits for it.
pub(super) fn with_confirmation(
    description: &str,
    mut steps: Vec<TaskStep>,
) -> Result<Vec<TaskStep>, String> {
    if steps.iter().any(|s| s.id == CONFIRM_STEP) {
        return Err(format!(
            "step id `{CONFIRM_STEP}` is reserved in a plan with confirm = true"
        ));
    }
    let names: Vec<&str> = steps.iter().map(|s| s.id.as_str()).collect();
    let confirm = TaskStep {
        description: format!("Confirm the task: {description}"),
        step_type: StepType::Approve,
        checkpoint: CheckpointType::UserApproval,
        ..TaskStep::new(
            CONFIRM_STEP,
            StepAction::approval(
                format!("Start this task? {description}"),
                format!("The plan has {} steps: {}.", names.len(), names.join(", ")),
            ),
        )
    };
    for step in &mut steps {
        if step.depends_on.is_empty() {
            step.depends_on.push(CONFIRM_STEP.to_owned());
        }
    }
    steps.insert(0, confirm);
    Ok(steps)
}

/// Parses plan-file text. `base` is the directory relative workspace paths start from.
pub fn parse_plan(text: &str, base: &Path) -> Result<PlanSpec, (String, Option<PlanErrors>)> {
    // Read twice: once as a table, for every unknown key at once; then as a
    // plan from the text, whose errors name the line and column (a plan
    // deserialised from the table would lose them).
    let value: toml::Table = toml::from_str(text).map_err(|e| (e.to_string(), None))?;
    let unknown = super::keys::unknown_keys(&toml::Value::Table(value));
    if !unknown.is_empty() {
        let errors = PlanErrors(unknown);
        return Err((errors.to_string(), Some(errors)));
    }
    let file: PlanFile = toml::from_str(text).map_err(|e| (e.to_string(), None))?;
    let mut servers = BTreeMap::new();
    for (name, server) in file.mcp_servers {
        let at = format!("mcp_servers.{name}");
        if !valid_mcp_name(&name) {
            return Err((
                format!(
                    "{at}: a server's name has letters, digits, `-` and `_` (no `__`), at most 32"
                ),
                None,
            ));
        }
        let server = server.resolve(&at, base).map_err(|m| (m, None))?;
        servers.insert(name, server);
    }
    let mut steps = file
        .steps
        .into_iter()
        .map(|s| step_from_file(s, base, &servers))
        .collect::<Result<Vec<_>, String>>()
        .map_err(|m| (m, None))?;
    if file.confirm {
        steps = with_confirmation(&file.description, steps).map_err(|m| (m, None))?;
    }
    let estimated_duration_s = match &file.estimated_duration {
        Some(d) => Some(
            parse_duration("estimated_duration", d)
                .map_err(|m| (m, None))?
                .as_secs(),
        ),
        None => None,
    };
    let recovery = recovery_policy("", file.recovery).map_err(|m| (m, None))?;
    let plan = TaskDecomposition {
        recovery,
        original_task: file.description,
        steps,
        estimated_duration_s,
        risk_level: file.risk_level,
        max_parallel: file.max_parallel,
        fail_fast: file.fail_fast,
        cleanup: file.cleanup,
        shared_state: file.shared_state,
        goal: None,
        budget: file.budget,
        snapshot: file.snapshot,
    };
    let plan = validate(plan).map_err(|e| (e.to_string(), Some(e)))?;
    Ok(PlanSpec {
        plan,
        session: file.session,
        workspace: file.workspace.map(|w| base.join(w)),
    })
}

/// Reads and validates a plan file.
pub fn load_plan_file(path: &Path) -> Result<PlanSpec, PlanFileError> {
    let text = std::fs::read_to_string(path).map_err(|error| PlanFileError::Read {
        path: path.to_owned(),
        error,
    })?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    parse_plan(&text, &base).map_err(|(message, errors)| match errors {
        Some(errors) => PlanFileError::Invalid {
            path: path.to_owned(),
            errors,
        },
        None => PlanFileError::Parse {
            path: path.to_owned(),
            message,
        },
    })
}
