//! Plans: validation of a [`TaskDecomposition`] as a DAG (spec `tasks.md` §5 rule
//! 17), and the TOML plan file that `rein run` reads (its format: `docs/src/plans/`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use rein_protocol::{
    CheckpointType, Decision, ErrorType, Priority, RecoveryAction, RecoveryPolicy,
    RecoveryStrategy, RiskLevel, StepAction, StepType, TaskDecomposition, TaskStep, Trigger,
};
use serde::Deserialize;

mod file;
mod keys;
mod step_file;

pub use file::{
    AGENT_TOOLS, CONFIRM_STEP, McpServerFile, PlanFileError, PlanSpec, load_plan_file, parse_plan,
    valid_mcp_name,
};
pub use keys::plan_file_schema;
use step_file::*;

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
    /// A key of the plan file that is not one (a typo, mostly).
    UnknownKey {
        /// Where: `the plan`, `steps[1] (`build`)`, `mcp_servers.fs`.
        at: String,
        key: String,
        /// The known key nearest to it.
        suggestion: Option<String>,
    },
    /// An agent step's image that is not a workspace path of a kind sent.
    BadImage {
        step: String,
        image: String,
        why: &'static str,
    },
    /// A step's `blocking_steps` names no step of the plan.
    UnknownBlocked {
        step: String,
        blocked: String,
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
    /// A `snapshot.exclude` pattern that is no pattern.
    BadSnapshotPattern {
        detail: String,
    },
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
            PlanIssue::UnknownKey {
                at,
                key,
                suggestion,
            } => match suggestion {
                Some(s) => write!(f, "{at}: unknown key `{key}`; did you mean `{s}`?"),
                None => write!(
                    f,
                    "{at}: unknown key `{key}` (`rein plan schema` prints every key a plan takes)"
                ),
            },
            PlanIssue::UnknownDependency { step, dependency } => {
                write!(
                    f,
                    "step `{step}` depends on `{dependency}`, which is not a step of the plan"
                )
            }
            PlanIssue::BadImage { step, image, why } => {
                write!(f, "step `{step}`: image `{image}` {why}")
            }
            PlanIssue::UnknownBlocked { step, blocked } => {
                write!(
                    f,
                    "step `{step}` blocks `{blocked}` (blocking_steps), which is not a step of the plan"
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
            PlanIssue::BadSnapshotPattern { detail } => write!(f, "{detail}"),
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

/// [`validate`] for a plan as a caller gives it: the `blocking_steps` it
/// gives (the seed's `blockingSteps`) are first made dependencies of the steps
/// they name, never dropped. Plans rein derived itself (a stored plan, a
/// fork's) keep to [`validate`], whose blocking steps follow the dependencies.
pub fn validate_given(mut plan: TaskDecomposition) -> Result<TaskDecomposition, PlanErrors> {
    let mut issues = Vec::new();
    fold_blocking(&mut plan.steps, &mut issues);
    if !issues.is_empty() {
        return Err(PlanErrors(issues));
    }
    validate(plan)
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
    if let Some(Err(detail)) = plan
        .snapshot
        .as_ref()
        .map(|rules| crate::saved::Excludes::new(&rules.exclude))
    {
        issues.push(PlanIssue::BadSnapshotPattern { detail });
    }
    for step in &plan.steps {
        if let StepAction::Agent { limits, .. } = &step.action
            && let Some(budget) = &limits.budget
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
        image_issues(step, &mut issues);
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

/// The most images one agent step is given.
pub const MAX_IMAGES: usize = 8;

/// The images rein sends: each extension with its MIME type (the first of a
/// type is the extension a received image is saved with).
const IMAGE_TYPES: [(&str, &str); 5] = [
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
];

/// The MIME type an image path's extension says, if it is one rein sends.
pub fn image_type(path: &str) -> Option<&'static str> {
    let ext = path.rsplit_once('.')?.1.to_ascii_lowercase();
    IMAGE_TYPES
        .iter()
        .find(|(e, _)| *e == ext)
        .map(|(_, mime)| *mime)
}

/// The extension an image of MIME type `mime` is saved with, if rein sends
/// that type.
pub fn image_extension(mime: &str) -> Option<&'static str> {
    IMAGE_TYPES
        .iter()
        .find(|(_, m)| *m == mime)
        .map(|(ext, _)| *ext)
}

/// An agent step's images: at most [`MAX_IMAGES`], each a relative path that
/// stays inside the workspace, of a kind [`image_type`] knows.
fn image_issues(step: &TaskStep, issues: &mut Vec<PlanIssue>) {
    let StepAction::Agent { images, .. } = &step.action else {
        return;
    };
    let bad = |image: &str, why| PlanIssue::BadImage {
        step: step.id.clone(),
        image: image.to_owned(),
        why,
    };
    if images.len() > MAX_IMAGES {
        issues.push(bad(
            &images[MAX_IMAGES],
            "is one too many: an agent step is given at most 8 images",
        ));
    }
    for image in images {
        let path = std::path::Path::new(image);
        if image.trim().is_empty()
            || path.is_absolute()
            || path
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            issues.push(bad(
                image,
                "must be a path inside the workspace (relative, without `..`)",
            ));
        } else if image_type(image).is_none() {
            issues.push(bad(
                image,
                "is not a PNG, JPEG, GIF or WebP file (by its extension)",
            ));
        }
    }
}

/// Each step's `blocking_steps` (the seed's: the steps that wait for it) made
/// dependencies of those steps, so the plan says each order one way; the
/// blocking steps are then derived again from the dependencies. One that names
/// no step is an issue.
fn fold_blocking(steps: &mut [TaskStep], issues: &mut Vec<PlanIssue>) {
    let ids: HashMap<String, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.clone(), i))
        .collect();
    let mut adds = Vec::new();
    for s in steps.iter() {
        for blocked in &s.blocking_steps {
            match ids.get(blocked) {
                Some(&j) => adds.push((j, s.id.clone())),
                None => issues.push(PlanIssue::UnknownBlocked {
                    step: s.id.clone(),
                    blocked: blocked.clone(),
                }),
            }
        }
    }
    for (j, dep) in adds {
        if !steps[j].depends_on.contains(&dep) {
            steps[j].depends_on.push(dep);
        }
    }
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

#[cfg(test)]
mod tests;
