//! `rein plan check` and `rein policy check`: plans and permission rules, tried
//! without running anything.

use crate::output::say;
use rein_core::plan::load_plan_file;
use rein_protocol::Verdict;

use crate::cli::{PlanCommand, PolicyCommand};
use crate::commands::{Target, load_policy, print_json};
use crate::exit;

pub fn dispatch(target: &Target, cmd: PlanCommand) -> anyhow::Result<u8> {
    match cmd {
        PlanCommand::Check { plan, json } => {
            let mut spec = load_plan_file(&plan)?;
            // The directories it names, as `rein run` will check them.
            rein_core::paths::check(
                &mut spec.plan,
                spec.workspace.as_deref(),
                &crate::commands::protected(target)?,
            )
            .map_err(rein_core::EngineError::from)?;
            // As the engine will take it: with the permission rules applied and
            // plan–execute–verify steps expanded (their contracts are proposed
            // only when a task is created).
            let policy = load_policy(target.policy.as_deref())?;
            let checked = rein_core::permissions::apply(spec.plan, &policy)
                .and_then(rein_core::plan::validate)
                .and_then(rein_core::pev::expand)
                .and_then(rein_core::plan::validate)
                .map_err(rein_core::EngineError::from)?;
            if json {
                print_json(&checked)?;
            } else {
                let p = &checked;
                say!("plan {} is valid: {} steps", plan.display(), p.steps.len());
                say!("  {}", p.original_task);
                for step in &p.steps {
                    let deps = if step.depends_on.is_empty() {
                        String::new()
                    } else {
                        format!(" after {}", step.depends_on.join(", "))
                    };
                    let flags = if step.idempotent { " (idempotent)" } else { "" };
                    say!("  - {} [{}]{deps}{flags}", step.id, step.checkpoint);
                }
            }
            Ok(exit::SUCCESS)
        }
    }
}

pub fn policy(target: &Target, cmd: PolicyCommand) -> anyhow::Result<u8> {
    let PolicyCommand::Check {
        script,
        json,
        command,
    } = cmd;
    let policy = load_policy(target.policy.as_deref())?;
    let decision = match &script {
        Some(script) => policy.check_script(script),
        None => policy.check_command(&command),
    };
    if json {
        print_json(&decision)?;
    } else {
        let reason = decision
            .reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        say!(
            "{}: `{}` — {}{reason}",
            decision.verdict.as_str(),
            decision.subject,
            decision.rule
        );
    }
    Ok(match decision.verdict {
        Verdict::Allow => exit::SUCCESS,
        Verdict::Deny => exit::FAILURE,
        Verdict::Ask => exit::WAITING,
    })
}
