//! Plans: validation of a [`TaskDecomposition`] as a DAG (spec `tasks.md` §5 rule
//! 17), and the TOML plan file that `rein run` reads (see the README for its format).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use rein_protocol::{
    CheckpointType, Decision, ErrorType, Priority, RecoveryAction, RecoveryPolicy,
    RecoveryStrategy, RiskLevel, StepAction, StepType, TaskDecomposition, TaskStep, Trigger,
};
use serde::Deserialize;

/// One thing wrong with a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanIssue {
    NoSteps,
    /// The task says nothing about what it is.
    EmptyDescription,
    /// A string that becomes one argument of `exec` (the command, an
    /// environment variable) is longer than the kernel takes.
    TooLongForExec {
        step: String,
        what: String,
        bytes: usize,
    },
    EmptyStepId {
        index: usize,
    },
    BadStepId {
        id: String,
    },
    DuplicateStepId {
        id: String,
    },
    UnknownDependency {
        step: String,
        dependency: String,
    },
    DuplicateDependency {
        step: String,
        dependency: String,
    },
    Cycle {
        path: Vec<String>,
    },
    /// A `session` name that is empty or not made of letters, digits, `_`, `-`, `.`.
    BadSessionName {
        step: String,
        name: String,
    },
    /// Two steps share a session but neither depends (however indirectly) on
    /// the other: they could take turns in one conversation at once.
    UnorderedSession {
        session: String,
        first: String,
        second: String,
    },
    EmptyCommand {
        step: String,
    },
    ZeroTimeout {
        step: String,
    },
    ZeroParallelism,
    /// A budget bounds nothing, or not sensibly (`step`: a step's; `None`:
    /// the plan's).
    BadBudget {
        step: Option<String>,
        detail: String,
    },
    EmptyApprovalTitle {
        step: String,
    },
    RecommendedNotAnOption {
        step: String,
        option: String,
    },
    DuplicateOption {
        step: String,
        option: String,
    },
    ExpiryCannotDelegate {
        step: String,
    },
    /// The permission rules deny the step's command.
    Denied {
        step: String,
        subject: String,
        rule: String,
        reason: Option<String>,
    },
    /// The step's own permission rules are malformed.
    BadPermissions {
        step: String,
        detail: String,
    },
    /// A plan–execute–verify step (or a verify step) that cannot run as one.
    BadPev {
        step: String,
        detail: String,
    },
}

impl fmt::Display for PlanIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanIssue::NoSteps => write!(f, "the plan has no steps"),
            PlanIssue::EmptyDescription => {
                write!(f, "the plan's `description` is empty: say what the task is")
            }
            PlanIssue::TooLongForExec { step, what, bytes } => write!(
                f,
                "step `{step}`: {what} is {bytes} bytes, longer than the {} bytes a program can be given in one argument or variable; put it in a file in the workspace and run that",
                MAX_EXEC_STRING
            ),
            PlanIssue::Denied {
                step,
                subject,
                rule,
                reason,
            } => {
                write!(f, "step `{step}`: `{subject}` is denied by {rule}")?;
                match reason {
                    Some(r) => write!(f, " ({r})"),
                    None => Ok(()),
                }
            }
            PlanIssue::BadPermissions { step, detail } => {
                write!(f, "step `{step}`: its permissions are invalid: {detail}")
            }
            PlanIssue::BadPev { step, detail } => {
                write!(f, "step `{step}`: plan–execute–verify: {detail}")
            }
            PlanIssue::EmptyStepId { index } => write!(f, "step #{} has an empty id", index + 1),
            PlanIssue::BadStepId { id } => write!(
                f,
                "step id `{id}` may only use letters, digits, `_`, `-` and `.` (at most 128)"
            ),
            PlanIssue::DuplicateStepId { id } => write!(f, "step id `{id}` is used more than once"),
            PlanIssue::UnknownDependency { step, dependency } => {
                write!(
                    f,
                    "step `{step}` depends on `{dependency}`, which is not a step of the plan"
                )
            }
            PlanIssue::DuplicateDependency { step, dependency } => {
                write!(
                    f,
                    "step `{step}` lists `{dependency}` in depends_on more than once"
                )
            }
            PlanIssue::Cycle { path } => write!(f, "dependency cycle: {}", path.join(" -> ")),
            PlanIssue::BadSessionName { step, name } => write!(
                f,
                "step `{step}` names session `{name}`; a session name is 1 to 128 letters, digits, `_`, `-` or `.`"
            ),
            PlanIssue::UnorderedSession {
                session,
                first,
                second,
            } => write!(
                f,
                "steps `{first}` and `{second}` share session `{session}` but neither depends on the other; add `depends_on = [\"{first}\"]` to `{second}` so their turns come one after the other"
            ),
            PlanIssue::EmptyCommand { step } => {
                write!(f, "step `{step}` has an empty `run` command")
            }
            PlanIssue::ZeroTimeout { step } => write!(f, "step `{step}` has a zero timeout"),
            PlanIssue::ZeroParallelism => write!(f, "max_parallel must be at least 1"),
            PlanIssue::BadBudget { step: None, detail } => {
                write!(f, "the plan's `budget`: {detail}")
            }
            PlanIssue::BadBudget {
                step: Some(step),
                detail,
            } => write!(f, "step `{step}`: `budget`: {detail}"),
            PlanIssue::EmptyApprovalTitle { step } => {
                write!(f, "approve step `{step}` has an empty title")
            }
            PlanIssue::RecommendedNotAnOption { step, option } => write!(
                f,
                "approve step `{step}` recommends `{option}`, which is not one of its options"
            ),
            PlanIssue::DuplicateOption { step, option } => {
                write!(
                    f,
                    "approve step `{step}` lists option `{option}` more than once"
                )
            }
            PlanIssue::ExpiryCannotDelegate { step } => write!(
                f,
                "approve step `{step}`: the default on expiry must be approve, deny or skip"
            ),
        }
    }
}

/// Everything wrong with a plan, each issue naming what it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PlanErrors(pub Vec<PlanIssue>);

impl fmt::Display for PlanErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid plan:")?;
        for issue in &self.0 {
            write!(f, "\n  - {issue}")?;
        }
        Ok(())
    }
}

fn approval_issues(
    step: &str,
    title: &str,
    options: &[String],
    recommended: Option<&str>,
    timeout_ms: Option<u64>,
    on_expiry: Decision,
    issues: &mut Vec<PlanIssue>,
) {
    let step = step.to_owned();
    if title.trim().is_empty() {
        issues.push(PlanIssue::EmptyApprovalTitle { step: step.clone() });
    }
    let mut seen = HashSet::new();
    for option in options {
        if !seen.insert(option.as_str()) {
            issues.push(PlanIssue::DuplicateOption {
                step: step.clone(),
                option: option.clone(),
            });
        }
    }
    if let Some(option) = recommended
        && !options.iter().any(|o| o == option)
    {
        issues.push(PlanIssue::RecommendedNotAnOption {
            step: step.clone(),
            option: option.to_owned(),
        });
    }
    if timeout_ms == Some(0) {
        issues.push(PlanIssue::ZeroTimeout { step: step.clone() });
    }
    if on_expiry == Decision::Delegate {
        issues.push(PlanIssue::ExpiryCannotDelegate { step });
    }
}

fn valid_step_id(id: &str) -> bool {
    id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// The longest string `exec` takes as one argument or one `KEY=value`
/// variable (Linux's MAX_ARG_STRLEN, 32 pages, less its terminating NUL).
pub const MAX_EXEC_STRING: usize = 32 * 4096 - 1;

/// The strings of a command step that reach `exec` one by one, too long for it.
fn exec_issues(step: &TaskStep, issues: &mut Vec<PlanIssue>) {
    let StepAction::Command { run, env, .. } = &step.action else {
        return;
    };
    let too_long = |what: String, bytes: usize| PlanIssue::TooLongForExec {
        step: step.id.clone(),
        what,
        bytes,
    };
    if run.len() > MAX_EXEC_STRING {
        issues.push(too_long("`run`".into(), run.len()));
    }
    for (key, value) in env {
        let bytes = key.len() + 1 + value.len();
        if bytes > MAX_EXEC_STRING {
            issues.push(too_long(format!("`env.{key}`"), bytes));
        }
    }
}

/// Checks a plan and derives `blocking_steps` from `depends_on`.
///
/// Reports every issue found, not just the first; a cycle is reported once, as a
/// path that starts and ends at the same step.
pub fn validate(mut plan: TaskDecomposition) -> Result<TaskDecomposition, PlanErrors> {
    let mut issues = Vec::new();
    if plan.original_task.trim().is_empty() {
        issues.push(PlanIssue::EmptyDescription);
    }
    if plan.steps.is_empty() {
        issues.push(PlanIssue::NoSteps);
    }
    if plan.max_parallel == Some(0) {
        issues.push(PlanIssue::ZeroParallelism);
    }
    if let Some(Err(detail)) = plan.budget.as_ref().map(rein_protocol::Budget::check) {
        issues.push(PlanIssue::BadBudget { step: None, detail });
    }
    for step in &plan.steps {
        if let StepAction::Agent {
            limits:
                rein_protocol::AgentLimits {
                    budget: Some(budget),
                    ..
                },
            ..
        } = &step.action
            && let Err(detail) = budget.check()
        {
            issues.push(PlanIssue::BadBudget {
                step: Some(step.id.clone()),
                detail,
            });
        }
    }
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, step) in plan.steps.iter().enumerate() {
        if step.id.is_empty() {
            issues.push(PlanIssue::EmptyStepId { index: i });
        } else if !valid_step_id(&step.id) {
            issues.push(PlanIssue::BadStepId {
                id: step.id.clone(),
            });
        }
        if index.insert(step.id.as_str(), i).is_some() && !step.id.is_empty() {
            issues.push(PlanIssue::DuplicateStepId {
                id: step.id.clone(),
            });
        }
        if let StepAction::Command { run, .. } = &step.action
            && run.trim().is_empty()
        {
            issues.push(PlanIssue::EmptyCommand {
                step: step.id.clone(),
            });
        }
        if step.timeout_ms == Some(0) {
            issues.push(PlanIssue::ZeroTimeout {
                step: step.id.clone(),
            });
        }
        exec_issues(step, &mut issues);
        if let StepAction::Approval {
            title,
            options,
            recommended,
            timeout_ms,
            on_expiry,
            ..
        } = &step.action
        {
            approval_issues(
                &step.id,
                title,
                options,
                recommended.as_deref(),
                *timeout_ms,
                *on_expiry,
                &mut issues,
            );
        }
    }
    for step in &plan.steps {
        let mut seen = HashSet::new();
        for dep in &step.depends_on {
            if !seen.insert(dep.as_str()) {
                issues.push(PlanIssue::DuplicateDependency {
                    step: step.id.clone(),
                    dependency: dep.clone(),
                });
            } else if !index.contains_key(dep.as_str()) {
                issues.push(PlanIssue::UnknownDependency {
                    step: step.id.clone(),
                    dependency: dep.clone(),
                });
            }
        }
    }
    // Every cycle, whatever else is wrong: over the dependencies that exist.
    issues.extend(
        find_cycles(&plan.steps, &index)
            .into_iter()
            .map(|path| PlanIssue::Cycle { path }),
    );
    if issues.is_empty() {
        session_issues(&plan.steps, &index, &mut issues);
    }
    if !issues.is_empty() {
        return Err(PlanErrors(issues));
    }
    let mut blocking: Vec<Vec<String>> = vec![Vec::new(); plan.steps.len()];
    for step in &plan.steps {
        for dep in &step.depends_on {
            if let Some(&i) = index.get(dep.as_str()) {
                blocking[i].push(step.id.clone());
            }
        }
    }
    for (step, blocks) in plan.steps.iter_mut().zip(blocking) {
        step.blocking_steps = blocks;
    }
    Ok(plan)
}

/// Steps sharing a session must take their turns one after the other: each
/// pair ordered by the dependencies (run on an acyclic plan only).
fn session_issues(steps: &[TaskStep], index: &HashMap<&str, usize>, issues: &mut Vec<PlanIssue>) {
    let mut by_session: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, step) in steps.iter().enumerate() {
        if let StepAction::Agent {
            session: Some(name),
            ..
        } = &step.action
        {
            if name.is_empty() || !valid_step_id(name) {
                issues.push(PlanIssue::BadSessionName {
                    step: step.id.clone(),
                    name: name.clone(),
                });
            } else {
                by_session.entry(name.as_str()).or_default().push(i);
            }
        }
    }
    // Whether `later` depends on `earlier`, directly or not.
    let depends = |later: usize, earlier: usize| {
        let mut stack = vec![later];
        let mut seen = HashSet::new();
        while let Some(i) = stack.pop() {
            for dep in &steps[i].depends_on {
                let Some(&d) = index.get(dep.as_str()) else {
                    continue;
                };
                if d == earlier {
                    return true;
                }
                if seen.insert(d) {
                    stack.push(d);
                }
            }
        }
        false
    };
    for (session, members) in by_session {
        for (n, &a) in members.iter().enumerate() {
            for &b in &members[n + 1..] {
                if !depends(a, b) && !depends(b, a) {
                    issues.push(PlanIssue::UnorderedSession {
                        session: session.to_owned(),
                        first: steps[a].id.clone(),
                        second: steps[b].id.clone(),
                    });
                }
            }
        }
    }
}

/// One cycle of each group of steps that depend on each other in a ring (a
/// strongly connected component with more than one step, or a step that
/// depends on itself), in plan order; dependencies on unknown steps are left
/// out (they are reported on their own), and a duplicated id counts as the
/// step that uses it last.
fn find_cycles(steps: &[TaskStep], index: &HashMap<&str, usize>) -> Vec<Vec<String>> {
    let n = steps.len();
    let deps: Vec<Vec<usize>> = steps
        .iter()
        .map(|s| {
            s.depends_on
                .iter()
                .filter_map(|d| index.get(d.as_str()).copied())
                .collect()
        })
        .collect();
    // Tarjan's algorithm, without recursion: a plan may be long.
    let (mut next, mut order, mut low) = (0usize, vec![usize::MAX; n], vec![0usize; n]);
    let (mut stack, mut on_stack) = (Vec::new(), vec![false; n]);
    let mut component = vec![usize::MAX; n];
    let mut components = 0;
    for root in 0..n {
        if order[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut edge)) = work.last_mut() {
            if *edge == 0 && order[v] == usize::MAX {
                order[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = deps[v].get(*edge) {
                *edge += 1;
                if order[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(order[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == order[v] {
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component[w] = components;
                    if w == v {
                        break;
                    }
                }
                components += 1;
            }
        }
    }
    let mut seen = vec![false; components];
    let mut cycles = Vec::new();
    for start in 0..n {
        let c = component[start];
        let ring = deps[start].contains(&start) || deps[start].iter().any(|&d| component[d] == c);
        if seen[c] || !ring {
            continue;
        }
        seen[c] = true;
        // Walk dependencies inside the component until a step comes round again.
        let mut position: HashMap<usize, usize> = HashMap::new();
        let mut walk = vec![start];
        let mut current = start;
        loop {
            position.insert(current, walk.len() - 1);
            let Some(&step) = deps[current].iter().find(|&&d| component[d] == c) else {
                break;
            };
            if let Some(&at) = position.get(&step) {
                // `walk[at..]` follows depends_on edges; print it in running order.
                let mut cycle: Vec<String> =
                    walk[at..].iter().map(|&i| steps[i].id.clone()).collect();
                cycle.reverse();
                cycle.push(cycle[0].clone());
                cycles.push(cycle);
                break;
            }
            walk.push(step);
            current = step;
        }
    }
    cycles
}

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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFile {
    description: String,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    workspace: Option<String>,
    #[serde(default)]
    max_parallel: Option<u32>,
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
    #[serde(default)]
    risk_level: RiskLevel,
    #[serde(default)]
    estimated_duration: Option<String>,
    #[serde(default)]
    recovery: BTreeMap<ErrorType, toml::Value>,
    /// MCP tool servers the plan's agent steps may name.
    #[serde(default)]
    mcp_servers: BTreeMap<String, McpServerFile>,
    /// What the task's model calls may spend before a person is asked.
    #[serde(default)]
    budget: Option<rein_protocol::Budget>,
    #[serde(default)]
    steps: Vec<StepFile>,
}

/// `[mcp_servers.NAME]` in a plan file or in `rein.toml`: `command` (with
/// `args`, `env`, `allow_read`) for a server rein starts, or `url` (with
/// `headers`) for a streamable HTTP one.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerFile {
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub allow_read: Vec<String>,
    #[serde(default)]
    pub url: Option<String>,
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

/// `recovery.<error_type> = { … }` in a plan file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StrategyTable {
    action: RecoveryAction,
    #[serde(default)]
    max_retries: Option<u32>,
    #[serde(default)]
    retry_delay: Option<String>,
    #[serde(default)]
    fallback: Option<RecoveryAction>,
}

/// A `[recovery]` table: each error type maps to an action name (`fatal = "pause"`)
/// or a table (`transient = { action = "retry", max_retries = 5, retry_delay = "2s" }`).
fn recovery_policy(
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

#[derive(Debug, Default, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum StepKind {
    #[default]
    Exec,
    Gate,
    Review,
    Approve,
    Agent,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum GateCheckpoint {
    QualityGate,
    TestPass,
    BuildPass,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepFile {
    id: String,
    #[serde(default)]
    run: Option<String>,
    /// Approve steps: the question, its options, the recommended one, what expiry means.
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    options: Vec<String>,
    #[serde(default)]
    recommended: Option<String>,
    #[serde(default)]
    default: Option<Decision>,
    #[serde(default)]
    trigger: Option<Trigger>,
    #[serde(default)]
    priority: Option<Priority>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    depends_on: Vec<String>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    idempotent: Option<bool>,
    #[serde(default)]
    kind: StepKind,
    /// Agent steps: read, write or execute (what the work is; execute unless set).
    #[serde(default, rename = "type")]
    step_type: Option<StepType>,
    #[serde(default)]
    checkpoint: Option<GateCheckpoint>,
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
    /// What the step reads and writes, recorded in the plan's shared state.
    #[serde(default)]
    reads: Vec<String>,
    #[serde(default)]
    writes: Vec<String>,
    #[serde(default)]
    risk_level: RiskLevel,
    #[serde(default)]
    risk_description: Option<String>,
    #[serde(default)]
    required_permissions: Vec<String>,
    #[serde(default)]
    recovery: BTreeMap<ErrorType, toml::Value>,
    /// Run as plan–execute–verify: contract, approval, execute, evidence, verification.
    #[serde(default)]
    pev: bool,
    /// Agent steps: the work asked for, and of whom.
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    provider: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    runtime: Option<String>,
    #[serde(default)]
    tools: Option<Vec<String>>,
    /// Agent steps naming the same session share one conversation.
    #[serde(default)]
    session: Option<String>,
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

fn parse_duration(what: &str, value: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(value.trim()).map_err(|e| {
        format!("{what}: `{value}` is not a duration ({e}); write e.g. 30s, 10m or 1h30m")
    })
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
fn with_confirmation(description: &str, mut steps: Vec<TaskStep>) -> Result<Vec<TaskStep>, String> {
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

/// One `[[steps]]` table as a [`TaskStep`]; errors name the step and the key.
fn step_from_file(
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
                limits,
                mcp,
                network: s.network,
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

/// Parses plan-file text. `base` is the directory relative workspace paths start from.
pub fn parse_plan(text: &str, base: &Path) -> Result<PlanSpec, (String, Option<PlanErrors>)> {
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

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
