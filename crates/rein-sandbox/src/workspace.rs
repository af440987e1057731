//! Paths given to a task's tools and steps, confined to its workspace: `..` that
//! climbs out, absolute paths elsewhere, and symlinks that point out are refused
//! with an error naming the path.

use std::path::{Component, Path, PathBuf};

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("`{path}` is outside the workspace {workspace}: {why}")]
    Escapes {
        path: String,
        workspace: PathBuf,
        why: &'static str,
    },
    #[error("`{path}` cannot be checked: {detail}")]
    Unreadable { path: String, detail: String },
    #[error("the workspace {workspace} cannot be used: {detail}")]
    Workspace { workspace: PathBuf, detail: String },
}

/// Resolves `requested` (relative to the workspace, or absolute) to a path inside
/// `workspace`. The path need not exist; the part of it that does is followed
/// through symlinks, and must stay inside the workspace.
pub fn resolve(workspace: &Path, requested: &str) -> Result<PathBuf, PathError> {
    let root = workspace.canonicalize().map_err(|e| PathError::Workspace {
        workspace: workspace.to_owned(),
        detail: e.to_string(),
    })?;
    let escapes = |why| PathError::Escapes {
        path: requested.to_owned(),
        workspace: root.clone(),
        why,
    };
    if requested.contains('\0') {
        return Err(escapes("it contains a NUL byte"));
    }
    let asked = Path::new(requested);
    // Lexically first: `..` may not climb above the workspace.
    let mut lexical = if asked.is_absolute() {
        PathBuf::from("/")
    } else {
        root.clone()
    };
    for part in asked.components() {
        match part {
            Component::RootDir | Component::Prefix(_) => lexical = PathBuf::from("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                if !lexical.pop() || !lexical.starts_with(&root) {
                    return Err(escapes("`..` climbs out of it"));
                }
            }
            Component::Normal(name) => lexical.push(name),
        }
    }
    if !lexical.starts_with(&root) {
        let why = if asked.is_absolute() {
            "an absolute path elsewhere"
        } else {
            "`..` climbs out of it"
        };
        return Err(escapes(why));
    }
    // Then through symlinks: the longest existing prefix, followed, must stay in.
    let mut existing = lexical.as_path();
    let mut rest = Vec::new();
    while existing.symlink_metadata().is_err() {
        let Some(name) = existing.file_name() else {
            break;
        };
        rest.push(name.to_owned());
        existing = existing.parent().unwrap_or(&root);
    }
    let followed = existing.canonicalize().map_err(|e| PathError::Unreadable {
        path: requested.to_owned(),
        detail: e.to_string(),
    })?;
    if !followed.starts_with(&root) {
        return Err(escapes("a symlink in it points out of the workspace"));
    }
    let mut resolved = followed;
    for name in rest.into_iter().rev() {
        resolved.push(name);
    }
    Ok(resolved)
}

/// [`resolve`] inside the pinned `workspace`, as a path relative to it (for
/// [`crate::Pinned::read`] and its kin, which open it beneath the pinned
/// directory). A workspace that is no longer the pinned directory is refused.
pub fn relative(workspace: &crate::Pinned, requested: &str) -> Result<PathBuf, PathError> {
    let changed = |e: crate::Changed| PathError::Workspace {
        workspace: workspace.path.clone(),
        detail: e.to_string(),
    };
    workspace.verify().map_err(changed)?;
    let resolved = resolve(&workspace.path, requested)?;
    resolved
        .strip_prefix(&workspace.path)
        .map(Path::to_owned)
        .map_err(|_| PathError::Workspace {
            workspace: workspace.path.clone(),
            detail: "it is not where the task was given it".into(),
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ws() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("docs")).unwrap();
        let root = ws.canonicalize().unwrap();
        (dir, root)
    }

    #[test]
    fn paths_inside_resolve_whether_or_not_they_exist() {
        let (_dir, ws) = ws();
        assert_eq!(resolve(&ws, "docs").unwrap(), ws.join("docs"));
        assert_eq!(
            resolve(&ws, "docs/new/a.md").unwrap(),
            ws.join("docs/new/a.md")
        );
        assert_eq!(resolve(&ws, "./docs/../b.md").unwrap(), ws.join("b.md"));
        assert_eq!(resolve(&ws, "").unwrap(), ws);
        let absolute = ws.join("docs/a.md");
        assert_eq!(resolve(&ws, absolute.to_str().unwrap()).unwrap(), absolute);
    }

    #[test]
    fn dot_dot_out_of_the_workspace_is_refused_naming_the_path() {
        let (_dir, ws) = ws();
        for path in ["..", "../x", "docs/../../x", "docs/../../ws/x"] {
            let err = resolve(&ws, path).unwrap_err();
            assert!(matches!(err, PathError::Escapes { .. }), "{path}: {err:?}");
            assert!(err.to_string().contains(&format!("`{path}`")), "{err}");
        }
    }

    #[test]
    fn absolute_paths_elsewhere_are_refused() {
        let (_dir, ws) = ws();
        let err = resolve(&ws, "/etc/passwd").unwrap_err();
        assert!(err.to_string().contains("absolute path elsewhere"), "{err}");
        // A sibling whose name starts like the workspace's is not inside it.
        let sibling = format!("{}x/a", ws.display());
        assert!(resolve(&ws, &sibling).is_err());
    }

    #[test]
    fn symlinks_pointing_out_are_refused_and_those_inside_followed() {
        let (dir, ws) = ws();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("out")).unwrap();
        std::os::unix::fs::symlink(ws.join("docs"), ws.join("in")).unwrap();
        for path in ["out", "out/new.txt", "out/deeper/new.txt"] {
            let err = resolve(&ws, path).unwrap_err();
            assert!(err.to_string().contains("symlink"), "{path}: {err}");
        }
        assert_eq!(resolve(&ws, "in/a.md").unwrap(), ws.join("docs/a.md"));
        // A dangling link cannot be followed to a place inside: refused.
        std::os::unix::fs::symlink("/nonexistent/place", ws.join("dangling")).unwrap();
        assert!(resolve(&ws, "dangling").is_err());
    }
}
