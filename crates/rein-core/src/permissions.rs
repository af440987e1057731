//! Permission rules applied to a plan's command steps, when the task is created
//! (CP2) and again when each step runs.
//!
//! At creation a step the rules deny makes the plan invalid, naming the step, the
//! command and the rule; a step they ask about gets an approve step of its own,
//! `STEP.permit`, which it depends on, so the question is a durable approval like
//! any other (its trigger is the rule's: suspicious command, destructive action or
//! external network call), asked when the step is about to become ready. When the
//! step runs, the decision is made again and recorded with the run.

use std::path::Path;

use rein_protocol::{
    Access, AskTrigger, CheckpointType, Decision, McpServer, PermissionDecision, StepAction,
    StepType, TaskDecomposition, TaskStep, Trigger, Verdict,
};
use rein_sandbox::Policy;

use crate::plan::{PlanErrors, PlanIssue};

/// The id of the approve step that asks whether `step` may run.
pub fn permit_id(step: &str) -> String {
    format!("{step}.permit")
}

/// The policy's strictest decision on a command step: its script, its network use
/// and the paths it reads beyond its workspace, by the configured rules and the
/// step's own. `None` for steps that run no command.
pub fn decide(step: &TaskStep, policy: &Policy) -> Result<Option<PermissionDecision>, String> {
    Ok(decide_under(step, &for_step(step, policy)?))
}

/// [`decide`] under `policy` as it is: the step's own rules already in it
/// ([`for_step`]). An agent step is decided on what its sandbox is given: the
/// network, and the MCP servers the plan declares for it ([`decide_agent`]).
pub fn decide_under(step: &TaskStep, policy: &Policy) -> Option<PermissionDecision> {
    match &step.action {
        StepAction::Command {
            run,
            network,
            allow_read,
            ..
        } => {
            let mut decisions = vec![policy.check_script(run)];
            if *network {
                decisions.push(policy.check_network(None));
            }
            for path in allow_read {
                decisions.push(policy.check_path(Path::new(path), Access::Read));
            }
            // What it declares it needs, decided again as it runs.
            decisions.extend(required(step, policy));
            strictest(decisions)
        }
        StepAction::Agent { network, mcp, .. } => strictest(
            decide_agent(
                *network,
                mcp.iter().filter_map(|u| u.server.as_ref()),
                policy,
            )
            .into_iter()
            .chain(required(step, policy))
            .collect(),
        ),
        _ => None,
    }
}

/// The policy's strictest decision on what an agent step is given: the
/// network (`network`), and for each of its MCP `servers` the program a stdio
/// one runs and the paths it reads, or the host a streamable HTTP one is
/// reached at. `None` when it is given none of these.
pub fn decide_agent<'a>(
    network: bool,
    servers: impl IntoIterator<Item = &'a McpServer>,
    policy: &Policy,
) -> Option<PermissionDecision> {
    let mut decisions = Vec::new();
    if network {
        decisions.push(policy.check_network(None));
    }
    for server in servers {
        if let Some(url) = &server.url {
            let parsed = url::Url::parse(url).ok();
            let host = parsed.as_ref().and_then(url::Url::host_str).unwrap_or(url);
            decisions.push(policy.check_network(Some(host)));
        }
        if let Some(program) = &server.command {
            let mut words = vec![program.clone()];
            words.extend(server.args.iter().cloned());
            decisions.push(policy.check_command(&words));
        }
        for path in &server.allow_read {
            decisions.push(policy.check_path(Path::new(path), Access::Read));
        }
    }
    strictest(decisions)
}

/// The first of the strictest of `decisions`.
pub fn strictest(decisions: Vec<PermissionDecision>) -> Option<PermissionDecision> {
    let mut worst: Option<PermissionDecision> = None;
    for d in decisions {
        if worst.as_ref().is_none_or(|w| d.verdict > w.verdict) {
            worst = Some(d);
        }
    }
    worst
}

/// Why `step` may not run under `permission`, the decision made as it is
/// about to run: denied, or asked about with no `.permit` step answered for it
/// (the rules changed since the task was made). `None`: it may.
pub fn refusal(step: &TaskStep, permission: Option<&PermissionDecision>) -> Option<String> {
    let d = permission?;
    let reason = reason_note(d);
    match d.verdict {
        Verdict::Allow => None,
        Verdict::Deny => Some(format!("`{}` is denied by {}{reason}", d.subject, d.rule)),
        Verdict::Ask if step.depends_on.contains(&permit_id(&step.id)) => None,
        Verdict::Ask => Some(format!(
            "`{}` needs a person's approval by {}{reason}, and this task has no `{}` step to ask it: create the task again",
            d.subject,
            d.rule,
            permit_id(&step.id)
        )),
    }
}

/// The rule's reason as a note after its text, ` (REASON)`, or nothing.
fn reason_note(d: &PermissionDecision) -> String {
    d.reason
        .as_deref()
        .map(|r| format!(" ({r})"))
        .unwrap_or_default()
}

/// The policy in force for `step`: the configured rules, then the step's own.
pub fn for_step(step: &TaskStep, policy: &Policy) -> Result<Policy, String> {
    let mut policy = policy.clone();
    policy
        .add_rules(&step.permissions, &format!("step `{}`", step.id))
        .map_err(|e| e.to_string())?;
    Ok(policy)
}

/// The decision on a step, high risk included: the strictest of what its
/// command is allowed and what the policy says of high-risk steps.
fn decide_with_risk(
    step: &TaskStep,
    policy: &Policy,
) -> Result<Option<PermissionDecision>, String> {
    let command = decide(step, policy)?;
    let asks_nothing = matches!(
        step.action,
        StepAction::Approval { .. } | StepAction::Verify { .. } | StepAction::Noop
    );
    // What a working step says it needs is in `command` (`decide_under`);
    // a name the rules cannot judge is refused here.
    if !asks_nothing && let Some(why) = unknown_requirement(step) {
        return Err(why);
    }
    if step.risk_level != rein_protocol::RiskLevel::High || asks_nothing {
        return Ok(command);
    }
    let risk = policy.check_high_risk(&step.id);
    Ok(match command {
        Some(c) if c.verdict >= risk.verdict => Some(c),
        _ => Some(risk),
    })
}

/// Why what `step` declares it needs cannot be judged: a name rein does not
/// know, or `execute` on a step that runs nothing (an agent step must be
/// offered `run_command`). `None`: every name can be.
pub fn unknown_requirement(step: &TaskStep) -> Option<String> {
    step.required_permissions.iter().find_map(|name| {
        match name.as_str() {
        "file_read" | "file_write" | "network" => None,
        "execute" => match &step.action {
            StepAction::Command { .. } => None,
            StepAction::Agent { tools, .. } if tools.iter().any(|t| t == "run_command") => None,
            StepAction::Agent { .. } => Some(
                "it requires `execute` but is not offered `run_command`: add it to the step's tools"
                    .into(),
            ),
            _ => Some(
                "it requires `execute`, and only a command or an agent step runs anything".into(),
            ),
        },
        other => Some(format!(
            "required permission `{other}` is not one rein knows: {}",
            REQUIRED_PERMISSIONS.join(", ")
        )),
    }
    })
}

/// The rules' decisions on what `step` declares it needs (spec tasks.md rule
/// 19, "acquire permissions"): `file_read` and `file_write` on the paths it
/// declares reading and writing (its workspace, `.`, when it declares none),
/// `network` on reaching any host, `execute` on a command step's command (an
/// agent step's commands are judged as they are called). Names
/// [`unknown_requirement`] refuses decide nothing here.
pub fn required(step: &TaskStep, policy: &Policy) -> Vec<PermissionDecision> {
    let paths = |declared: &[String]| -> Vec<String> {
        if declared.is_empty() {
            vec![".".to_owned()]
        } else {
            declared.to_vec()
        }
    };
    let mut out = Vec::new();
    for name in &step.required_permissions {
        match (name.as_str(), &step.action) {
            ("file_read", _) => out.extend(
                paths(&step.reads)
                    .iter()
                    .map(|p| policy.check_path(Path::new(p), Access::Read)),
            ),
            ("file_write", _) => out.extend(
                paths(&step.writes)
                    .iter()
                    .map(|p| policy.check_path(Path::new(p), Access::Write)),
            ),
            ("network", _) => out.push(policy.check_network(None)),
            ("execute", StepAction::Command { run, .. }) => out.push(policy.check_script(run)),
            _ => {}
        }
    }
    out
}

/// The permissions a step may declare it needs.
pub const REQUIRED_PERMISSIONS: [&str; 4] = ["file_read", "file_write", "network", "execute"];

/// Checks every step: denied steps are plan issues, asked-about ones (a
/// command the rules ask about, a high-risk step) get their `.permit` approve
/// step. Call [`crate::plan::validate`] again afterwards.
pub fn apply(
    mut plan: TaskDecomposition,
    policy: &Policy,
) -> Result<TaskDecomposition, PlanErrors> {
    let mut issues = Vec::new();
    let mut permits = Vec::new();
    for step in &mut plan.steps {
        let decision = match decide_with_risk(step, policy) {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(detail) => {
                issues.push(PlanIssue::BadPermissions {
                    step: step.id.clone(),
                    detail,
                });
                continue;
            }
        };
        match decision.verdict {
            Verdict::Allow => {}
            Verdict::Deny => issues.push(PlanIssue::Denied {
                step: step.id.clone(),
                subject: decision.subject,
                rule: decision.rule,
                reason: decision.reason,
            }),
            Verdict::Ask => {
                let permit = permit_step(step, &decision);
                step.depends_on = vec![permit.id.clone()];
                permits.push(permit);
            }
        }
    }
    if !issues.is_empty() {
        return Err(PlanErrors(issues));
    }
    plan.steps.extend(permits);
    Ok(plan)
}

/// The approve step that asks whether `step` may run, waiting for what `step`
/// waited for.
fn permit_step(step: &TaskStep, decision: &PermissionDecision) -> TaskStep {
    let trigger = match decision.trigger {
        Some(AskTrigger::DestructiveAction) => Trigger::DestructiveAction,
        Some(AskTrigger::ExternalNetworkCall) => Trigger::ExternalNetworkCall,
        Some(AskTrigger::SuspiciousCommand) | None => Trigger::SuspiciousCommand,
    };
    let reason = reason_note(decision);
    let (title, description) = match (&step.action, &step.risk_description) {
        (StepAction::Command { .. }, _) if !decision.subject.starts_with("high-risk step") => (
            format!("Allow step `{}` to run `{}`?", step.id, decision.subject),
            format!("{}{reason}", decision.rule),
        ),
        (StepAction::Agent { .. }, _) if !decision.subject.starts_with("high-risk step") => (
            format!(
                "Allow agent step `{}` to run with `{}`?",
                step.id, decision.subject
            ),
            format!("{}{reason}", decision.rule),
        ),
        (_, risk) => (
            format!(
                "Allow high-risk step `{}` to run? {}",
                step.id, step.description
            ),
            match risk {
                Some(risk) => format!("{risk} ({})", decision.rule),
                None => decision.rule.clone(),
            },
        ),
    };
    let mut permit = TaskStep::new(
        permit_id(&step.id),
        StepAction::Approval {
            title,
            description,
            options: Vec::new(),
            recommended: None,
            timeout_ms: None,
            on_expiry: Decision::Deny,
            trigger,
            priority: None,
        },
    );
    permit.description = format!("permission for `{}`: {}", step.id, decision.rule);
    permit.step_type = StepType::Approve;
    permit.checkpoint = CheckpointType::UserApproval;
    permit.depends_on = step.depends_on.clone();
    permit.risk_level = step.risk_level;
    permit
}
