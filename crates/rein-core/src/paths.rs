//! The directories a task is given — its workspace and the directories its
//! command steps may read — checked against [`rein_sandbox::Protected`] before
//! anything is created, and stored resolved (symlinks followed), so that what
//! the sandbox binds is what was checked.

use std::path::{Path, PathBuf};

use rein_protocol::{StepAction, TaskDecomposition};
use rein_sandbox::{Protected, Refused};

/// Every path of the plan (and the workspace asked for) that `guard` refuses,
/// all at once; on success the plan's `allow_read` paths are replaced by what
/// they resolve to, and the workspace asked for is returned resolved.
pub fn check(
    plan: &mut TaskDecomposition,
    workspace: Option<&Path>,
    guard: &Protected,
) -> Result<Option<PathBuf>, PathsRefused> {
    let mut refused = Vec::new();
    let workspace = workspace.and_then(|dir| match guard.check_workspace(dir) {
        Ok(resolved) => Some(resolved),
        Err(why) => {
            refused.push(why);
            None
        }
    });
    for step in &mut plan.steps {
        let StepAction::Command { allow_read, .. } = &mut step.action else {
            continue;
        };
        for path in allow_read.iter_mut() {
            match guard.check_readable(Path::new(path.as_str())) {
                Ok(resolved) => *path = resolved.display().to_string(),
                Err(why) => refused.push(Refused {
                    rule: format!("{} (step `{}`)", why.rule, step.id),
                    ..why
                }),
            }
        }
    }
    if refused.is_empty() {
        Ok(workspace)
    } else {
        Err(PathsRefused(refused))
    }
}

/// Directories a task may not be given, each with the rule that refuses it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct PathsRefused(pub Vec<Refused>);
