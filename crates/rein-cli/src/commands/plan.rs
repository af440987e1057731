//! `rein plan check`.

use crate::output::say;
use rein_core::plan::load_plan_file;

use crate::cli::PlanCommand;
use crate::commands::print_json;
use crate::exit;

pub fn dispatch(cmd: PlanCommand) -> anyhow::Result<u8> {
    match cmd {
        PlanCommand::Check { plan, json } => {
            let spec = load_plan_file(&plan)?;
            if json {
                print_json(&spec.plan)?;
            } else {
                let p = &spec.plan;
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
