//! `rein plan check`, `rein plan schema` and `rein policy check`: plans and permission rules, tried
//! without running anything.

use crate::exit::UsageError;
use crate::output::{say, shout};
use rein_core::plan::load_plan_file;
use rein_protocol::Verdict;

use crate::cli::{PlanCommand, PolicyCommand};
use crate::commands::{Target, load_policy, print_json};
use crate::exit;

pub async fn dispatch(target: &Target, cmd: PlanCommand) -> anyhow::Result<u8> {
    match cmd {
        PlanCommand::Schema => {
            print_json(&rein_core::plan::plan_file_schema())?;
            Ok(exit::SUCCESS)
        }
        PlanCommand::Draft {
            goal,
            workspace,
            output,
            decompose,
            json,
        } => draft(target, &goal, workspace, output, &decompose, json).await,
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

/// `rein plan draft`: the goal decomposed as a goal task's CP2 would, written
/// as a plan file; nothing is stored or run.
async fn draft(
    target: &Target,
    goal: &str,
    workspace: Option<std::path::PathBuf>,
    output: Option<std::path::PathBuf>,
    args: &crate::cli::GoalArgs,
    json: bool,
) -> anyhow::Result<u8> {
    if target.url.is_some() {
        return Err(UsageError(
            "`rein plan draft` asks the model from here and stores nothing; unset --url (REIN_URL)"
                .into(),
        )
        .into());
    }
    if goal.trim().is_empty() {
        return Err(UsageError("--goal is empty: say what the task is to achieve".into()).into());
    }
    // Only a directory a task could be given is listed to the model.
    let workspace = workspace
        .map(|w| {
            crate::commands::protected(target)?
                .check_workspace(&w)
                .map_err(|why| {
                    anyhow::Error::from(rein_core::EngineError::from(
                        rein_core::paths::PathsRefused(vec![why]),
                    ))
                })
        })
        .transpose()?;
    let ctx = crate::commands::Context::for_completions(target)?;
    let spec = crate::commands::goal(args);
    let done = ctx
        .engine
        .draft(goal.trim(), &spec, workspace.as_deref(), |r| {
            shout!(
                "answer {} was refused and sent back: {}",
                r.attempt,
                r.errors.join("; ")
            );
        })
        .await
        .map_err(|e| match e {
            rein_core::goal::DecomposeError::Completion(f) => crate::commands::complete::failure(f),
            other => anyhow::anyhow!("{other}"),
        })?;
    if json {
        print_json(&serde_json::json!({
            "decomposition": done.answer,
            "plan": done.plan,
            "draft": done.draft,
            "attempt": done.attempt,
            "completion": done.completion,
        }))?;
    } else if let Some(path) = &output {
        std::fs::write(path, &done.draft)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        let hint = workspace
            .as_ref()
            .map(|w| format!(" --workspace {}", w.display()))
            .unwrap_or_default();
        say!(
            "wrote {}: {} steps; read it, edit it, then: rein run {}{hint}",
            path.display(),
            done.answer.steps.len(),
            path.display()
        );
    } else {
        say!("{}", done.draft.trim_end());
    }
    Ok(exit::SUCCESS)
}

pub fn policy(target: &Target, cmd: PolicyCommand) -> anyhow::Result<u8> {
    let PolicyCommand::Check {
        script,
        mcp,
        json,
        command,
    } = cmd;
    let policy = load_policy(target.policy.as_deref())?;
    let decision = match (&script, &mcp) {
        (Some(script), _) => policy.check_script(script),
        (None, Some(tool)) => {
            let Some((server, tool)) = tool.split_once('/') else {
                return Err(UsageError(format!(
                    "--mcp `{tool}`: write SERVER/TOOL, e.g. fs/write_file"
                ))
                .into());
            };
            policy.check_mcp(server, tool)
        }
        (None, None) => policy.check_command(&command),
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
