//! Plans: validation of a [`TaskDecomposition`] as a DAG (spec `tasks.md` §5 rule
//! 17), and the TOML plan file that `rein run` reads (see the README for its format).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use rein_protocol::{CheckpointType, RiskLevel, StepAction, StepType, TaskDecomposition, TaskStep};
use serde::Deserialize;

/// One thing wrong with a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanIssue {
    NoSteps,
    EmptyStepId { index: usize },
    BadStepId { id: String },
    DuplicateStepId { id: String },
    UnknownDependency { step: String, dependency: String },
    DuplicateDependency { step: String, dependency: String },
    Cycle { path: Vec<String> },
    EmptyCommand { step: String },
    ZeroTimeout { step: String },
    ZeroParallelism,
}

impl fmt::Display for PlanIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanIssue::NoSteps => write!(f, "the plan has no steps"),
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
            PlanIssue::EmptyCommand { step } => {
                write!(f, "step `{step}` has an empty `run` command")
            }
            PlanIssue::ZeroTimeout { step } => write!(f, "step `{step}` has a zero timeout"),
            PlanIssue::ZeroParallelism => write!(f, "max_parallel must be at least 1"),
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

fn valid_step_id(id: &str) -> bool {
    id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Checks a plan and derives `blocking_steps` from `depends_on`.
///
/// Reports every issue found, not just the first; a cycle is reported once, as a
/// path that starts and ends at the same step.
pub fn validate(mut plan: TaskDecomposition) -> Result<TaskDecomposition, PlanErrors> {
    let mut issues = Vec::new();
    if plan.steps.is_empty() {
        issues.push(PlanIssue::NoSteps);
    }
    if plan.max_parallel == Some(0) {
        issues.push(PlanIssue::ZeroParallelism);
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
    if issues.is_empty()
        && let Some(path) = find_cycle(&plan.steps, &index)
    {
        issues.push(PlanIssue::Cycle { path });
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

/// Kahn's algorithm; what it cannot order lies on or behind a cycle, and a walk
/// along dependencies inside that remainder must come back to a step it has seen.
fn find_cycle(steps: &[TaskStep], index: &HashMap<&str, usize>) -> Option<Vec<String>> {
    let n = steps.len();
    let mut indegree: Vec<usize> = steps.iter().map(|s| s.depends_on.len()).collect();
    let mut dependants: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, step) in steps.iter().enumerate() {
        for dep in &step.depends_on {
            dependants[index[dep.as_str()]].push(i);
        }
    }
    let mut queue: Vec<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut ordered = 0;
    while let Some(i) = queue.pop() {
        ordered += 1;
        for &d in &dependants[i] {
            indegree[d] -= 1;
            if indegree[d] == 0 {
                queue.push(d);
            }
        }
    }
    if ordered == n {
        return None;
    }
    // Every step left has a dependency that is also left; follow those.
    let start = (0..n).find(|&i| indegree[i] > 0)?;
    let mut position: HashMap<usize, usize> = HashMap::new();
    let mut walk = vec![start];
    let mut current = start;
    loop {
        position.insert(current, walk.len() - 1);
        let next = steps[current]
            .depends_on
            .iter()
            .map(|d| index[d.as_str()])
            .find(|&d| indegree[d] > 0)?;
        if let Some(&at) = position.get(&next) {
            // `walk[at..]` follows depends_on edges; print it in running order.
            let mut cycle: Vec<String> = walk[at..].iter().map(|&i| steps[i].id.clone()).collect();
            cycle.reverse();
            cycle.push(cycle[0].clone());
            return Some(cycle);
        }
        walk.push(next);
        current = next;
    }
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
    #[serde(default)]
    risk_level: RiskLevel,
    #[serde(default)]
    estimated_duration: Option<String>,
    #[serde(default)]
    steps: Vec<StepFile>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum StepKind {
    #[default]
    Exec,
    Gate,
    Review,
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
    run: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    depends_on: Vec<String>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    idempotent: bool,
    #[serde(default)]
    kind: StepKind,
    #[serde(default)]
    checkpoint: Option<GateCheckpoint>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    risk_level: RiskLevel,
    #[serde(default)]
    risk_description: Option<String>,
    #[serde(default)]
    required_permissions: Vec<String>,
}

fn parse_duration(what: &str, value: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(value.trim()).map_err(|e| {
        format!("{what}: `{value}` is not a duration ({e}); write e.g. 30s, 10m or 1h30m")
    })
}

/// Parses plan-file text. `base` is the directory relative workspace paths start from.
pub fn parse_plan(text: &str, base: &Path) -> Result<PlanSpec, (String, Option<PlanErrors>)> {
    let file: PlanFile = toml::from_str(text).map_err(|e| (e.to_string(), None))?;
    let mut steps = Vec::with_capacity(file.steps.len());
    for s in file.steps {
        let checkpoint = match (s.kind, s.checkpoint) {
            (StepKind::Gate, None | Some(GateCheckpoint::QualityGate)) => {
                CheckpointType::QualityGate
            }
            (StepKind::Gate, Some(GateCheckpoint::TestPass)) => CheckpointType::TestPass,
            (StepKind::Gate, Some(GateCheckpoint::BuildPass)) => CheckpointType::BuildPass,
            (StepKind::Exec | StepKind::Review, Some(_)) => {
                return Err((
                    format!(
                        "step `{}`: `checkpoint` is only for steps of kind = \"gate\"",
                        s.id
                    ),
                    None,
                ));
            }
            (StepKind::Exec, None) => CheckpointType::TaskExec,
            (StepKind::Review, None) => CheckpointType::TaskReview,
        };
        let timeout_ms = match &s.timeout {
            Some(t) => {
                let d = parse_duration(&format!("step `{}`: timeout", s.id), t)
                    .map_err(|m| (m, None))?;
                Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            }
            None => None,
        };
        steps.push(TaskStep {
            description: s.description.unwrap_or_else(|| s.run.clone()),
            id: s.id,
            step_type: match s.kind {
                StepKind::Exec => StepType::Execute,
                StepKind::Gate | StepKind::Review => StepType::Review,
            },
            depends_on: s.depends_on,
            blocking_steps: Vec::new(),
            checkpoint,
            required_permissions: s.required_permissions,
            risk_level: s.risk_level,
            risk_description: s.risk_description,
            action: StepAction::Command {
                run: s.run,
                env: s.env,
            },
            timeout_ms,
            idempotent: s.idempotent,
        });
    }
    let estimated_duration_s = match &file.estimated_duration {
        Some(d) => Some(
            parse_duration("estimated_duration", d)
                .map_err(|m| (m, None))?
                .as_secs(),
        ),
        None => None,
    };
    let plan = TaskDecomposition {
        original_task: file.description,
        steps,
        estimated_duration_s,
        risk_level: file.risk_level,
        max_parallel: file.max_parallel,
        fail_fast: file.fail_fast,
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
