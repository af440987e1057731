//! The directories a task is given — its workspace and the directories its
//! command steps may read — checked against [`rein_sandbox::Protected`] before
//! anything is created, and stored resolved (symlinks followed), so that what
//! the sandbox binds is what was checked.

use std::path::{Path, PathBuf};

use rein_protocol::{StepAction, TaskDecomposition};
use rein_sandbox::{Protected, Refused};

pub use crate::error::PathsRefused;

/// Every path of the plan (and the workspace asked for) that `guard` refuses,
/// all at once: the workspace, the directories command steps may read, and
/// those the MCP servers the plan declares may read. On success those
/// `allow_read` paths are replaced by what they resolve to, and the
/// workspace asked for is returned resolved.
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
        let mut readable: Vec<(String, &mut String)> = Vec::new();
        match &mut step.action {
            StepAction::Command { allow_read, .. } => {
                readable.extend(allow_read.iter_mut().map(|p| (String::new(), p)));
            }
            StepAction::Agent { mcp, .. } => {
                for server in mcp.iter_mut() {
                    let name = format!(", MCP server `{}`", server.name);
                    if let Some(declared) = &mut server.server {
                        readable.extend(declared.allow_read.iter_mut().map(|p| (name.clone(), p)));
                    }
                }
            }
            StepAction::Noop | StepAction::Approval { .. } | StepAction::Verify { .. } => {}
        }
        for (whose, path) in readable {
            match guard.check_readable(Path::new(path.as_str())) {
                Ok(resolved) => *path = resolved.display().to_string(),
                Err(why) => refused.push(Refused {
                    rule: format!("{} (step `{}`{whose})", why.rule, step.id),
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

/// Makes the workspace directory `dir` and any directories above it that are
/// missing. A root rein gives what it makes to the owner of the nearest
/// directory that was there, so the workspace is that user's (and its steps
/// run as them), as if they had made it.
pub fn make_workspace(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let there = rein_sandbox::guard::existing_part(dir).map(|(at, meta)| {
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|a| *a != at)
            .map(Path::to_owned)
            .collect();
        (missing, meta.uid(), meta.gid())
    });
    std::fs::create_dir_all(dir)?;
    if let Some((missing, uid, gid)) = there.filter(|(_, uid, _)| *uid != 0)
        && nix::unistd::geteuid().is_root()
    {
        for made in missing.iter().rev() {
            std::os::unix::fs::lchown(made, Some(uid), Some(gid))?;
        }
    }
    Ok(())
}

/// The workspace at `dir` (resolved and checked) pinned as it is now.
pub fn pin(dir: &Path) -> crate::error::Result<rein_sandbox::Pinned> {
    rein_sandbox::Pinned::pin(dir).map_err(|e| crate::error::EngineError::Workspace {
        path: dir.display().to_string(),
        error: std::io::Error::other(e.to_string()),
    })
}
