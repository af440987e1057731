//! What rein answers an ACP agent as its client: files read and written inside
//! the task's workspace, and how the agent's errors and stop reasons are named.

use super::*;

pub(super) fn stop_name(reason: StopReason) -> String {
    serde_json::to_value(reason)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{reason:?}"))
}

/// What went wrong on the connection, in words.
pub(super) fn describe(e: &agent_client_protocol::Error) -> String {
    let data = e
        .data
        .as_ref()
        .map(|d| format!(" ({d})"))
        .unwrap_or_default();
    format!("{}{data}", e.message)
}

/// `fs/write_text_file`: inside the workspace only.
pub(super) fn write_text_file(
    workspace: &rein_sandbox::Pinned,
    path: &Path,
    content: &str,
) -> Result<(), String> {
    let target = inside(workspace, path)?;
    workspace
        .write(&target, content.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// `fs/read_text_file`: inside the workspace only; `line` (1-based) and
/// `limit` select lines.
pub(super) fn read_text_file(
    workspace: &rein_sandbox::Pinned,
    path: &Path,
    line: Option<u32>,
    limit: Option<u32>,
) -> Result<String, String> {
    let target = inside(workspace, path)?;
    let bytes = workspace
        .read(&target)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("cannot read {}: it is not UTF-8 text", path.display()))?;
    if line.is_none() && limit.is_none() {
        return Ok(text);
    }
    let skip = line.map_or(0, |l| l.saturating_sub(1) as usize);
    let take = limit.map_or(usize::MAX, |l| l as usize);
    Ok(text
        .lines()
        .skip(skip)
        .take(take)
        .collect::<Vec<_>>()
        .join("\n"))
}

/// An absolute path the agent gave, if it lies in the workspace: relative to
/// it, to be opened beneath the pinned directory.
pub(super) fn inside(workspace: &rein_sandbox::Pinned, path: &Path) -> Result<PathBuf, String> {
    let relative = if path.is_absolute() {
        path.strip_prefix(&workspace.path).map_err(|_| {
            format!(
                "{} is outside the task's workspace {}",
                path.display(),
                workspace.path.display()
            )
        })?
    } else {
        path
    };
    rein_sandbox::workspace::relative(workspace, &relative.to_string_lossy())
        .map_err(|e| e.to_string())
}
