//! Which directories a task may be given: its workspace (writable) and the
//! directories its steps may read (`allow_read`). A workspace is the one place
//! a sandbox leaves writable, so a workspace that is `/`, a system directory or
//! a directory holding rein's own data would switch the sandbox off in all but
//! name. Every path is resolved first — symlinks followed, `..` applied to what
//! they point at — and the rules are checked on what it really is.
//!
//! The rules, each named in the refusal:
//! - `/` is never a workspace;
//! - the system trees (`/etc`, `/usr`, `/bin`, `/sbin`, `/lib*`, `/boot`,
//!   `/dev`, `/proc`, `/sys`, `/run`) and anything inside them are not;
//! - the top-level directories that hold other people's data (`/home`, `/root`,
//!   `/var`, `/tmp`, `/opt`, `/srv`, `/mnt`, `/media`) are not, themselves (a
//!   directory inside one is fine);
//! - rein's data directory, anything containing it, and anything inside it are
//!   not, except rein's own task workspaces below it;
//! - where roots are given (a server's `--workspace-root`), the path must lie
//!   inside one of them; with an empty list, no path is accepted at all;
//! - when rein runs as root, a path outside rein's own task workspaces and
//!   outside the directories the operator declared for workspaces
//!   (`workspace_roots`, a server's `--workspace-root`) must belong to
//!   another user: what exists of it (the path, else the nearest directory
//!   above it) may not be root's. A root rein runs steps as the owner of
//!   their workspace, so a root-owned one (`/var/lib`, `/root/.cache`) would
//!   give its steps root's reach.
//!
//! The directories a step, or an MCP server it starts, may read follow the
//! data-directory and root rules, and their own: never `/`, nor a shared
//! top-level directory itself (`/home`, `/var`, …), nor root's home (`/root`
//! and anything inside it), nor the files every sandbox masks (`/etc/shadow`,
//! `/etc/gshadow`, `/etc/sudoers`). The system trees are readable to every
//! step anyway.

use std::path::{Component, Path, PathBuf};

/// Trees that belong to the system: refused, and so is everything inside them.
const SYSTEM_TREES: &[&str] = &[
    "/etc", "/usr", "/bin", "/sbin", "/boot", "/dev", "/proc", "/sys", "/run",
];

/// Top-level directories that hold everybody's data: refused themselves.
const SHARED_TOPS: &[&str] = &[
    "/home", "/root", "/var", "/tmp", "/opt", "/srv", "/mnt", "/media",
];

/// What a task's directories must keep clear of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Protected {
    /// rein's data directory: the store, the ledger, the task workspaces.
    pub data_dir: Option<PathBuf>,
    /// Where rein makes fresh task workspaces (inside the data directory);
    /// directories below it may be workspaces.
    pub task_workspaces: Option<PathBuf>,
    /// When set, the only directories the paths may lie in (a server started
    /// with `--workspace-root DIR`); empty: no path is accepted.
    pub roots: Option<Vec<PathBuf>>,
    /// Directories the operator declared for workspaces (`workspace_roots`,
    /// a server's `--workspace-root`): inside them a root-owned path is
    /// accepted even when rein runs as root.
    pub declared: Vec<PathBuf>,
    /// rein runs as root: paths outside its task workspaces and `declared`
    /// must belong to another user.
    pub as_root: bool,
}

/// What a refused path was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// The task's workspace, writable by its steps.
    Workspace,
    /// A directory a step may read (`allow_read`).
    Read,
}

impl Use {
    fn as_str(self) -> &'static str {
        match self {
            Use::Workspace => "workspace",
            Use::Read => "allow_read",
        }
    }
}

/// A path a task may not be given, with the rule that refuses it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} `{}`{}: refused: {rule}", .used.as_str(), .requested.display(), resolved_note(.requested, .resolved))]
pub struct Refused {
    pub used: Use,
    pub requested: PathBuf,
    /// What it resolves to, symlinks followed.
    pub resolved: PathBuf,
    pub rule: String,
}

fn resolved_note(requested: &Path, resolved: &Path) -> String {
    if requested == resolved {
        String::new()
    } else {
        format!(" (resolves to {})", resolved.display())
    }
}

/// `path` as it really is: absolute, symlinks followed in the part that exists,
/// `..` applied to what they point at; the part that does not exist yet taken
/// as written. A relative path is taken from the current directory.
pub fn real_path(path: &Path) -> std::io::Result<PathBuf> {
    let mut current = if path.is_absolute() {
        PathBuf::from("/")
    } else {
        std::env::current_dir()?.canonicalize()?
    };
    // Once a component does not exist, nothing below it can be a symlink.
    let mut exists = true;
    for part in path.components() {
        match part {
            Component::RootDir | Component::Prefix(_) => current = PathBuf::from("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                current.pop();
            }
            Component::Normal(name) => {
                current.push(name);
                if exists {
                    match current.canonicalize() {
                        Ok(real) => current = real,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                            // A dangling symlink is not "not there yet": refuse to guess.
                            if current.symlink_metadata().is_ok() {
                                return Err(std::io::Error::new(
                                    std::io::ErrorKind::NotFound,
                                    format!("{} is a symlink to nowhere", current.display()),
                                ));
                            }
                            exists = false;
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
    Ok(current)
}

impl Protected {
    /// Checks a workspace; returns it resolved.
    pub fn check_workspace(&self, path: &Path) -> Result<PathBuf, Refused> {
        self.check(Use::Workspace, path)
    }

    /// Checks a directory a step may read; returns it resolved.
    pub fn check_readable(&self, path: &Path) -> Result<PathBuf, Refused> {
        self.check(Use::Read, path)
    }

    fn check(&self, used: Use, path: &Path) -> Result<PathBuf, Refused> {
        let refuse = |resolved: PathBuf, rule: String| Refused {
            used,
            requested: path.to_owned(),
            resolved,
            rule,
        };
        if self.roots.is_some() && !path.is_absolute() {
            return Err(refuse(
                path.to_owned(),
                "a path sent to the server must be absolute".into(),
            ));
        }
        let resolved = real_path(path)
            .map_err(|e| refuse(path.to_owned(), format!("it cannot be resolved: {e}")))?;
        if let Some(rule) = self.rule_against(used, &resolved) {
            return Err(refuse(resolved, rule));
        }
        Ok(resolved)
    }

    /// The rule `resolved` breaks, if any.
    fn rule_against(&self, used: Use, resolved: &Path) -> Option<String> {
        if used == Use::Workspace {
            if resolved == Path::new("/") {
                return Some("`/` is the whole file system".into());
            }
            if let Some(tree) = system_tree(resolved) {
                return Some(format!(
                    "`{tree}` is a system directory; a workspace may not be in it"
                ));
            }
            if let Some(top) = SHARED_TOPS.iter().find(|t| resolved == Path::new(t)) {
                return Some(format!(
                    "`{top}` itself holds everybody's files; use a directory inside it"
                ));
            }
        }
        if let Some(data) = self.data_dir.as_deref().map(real_or_same) {
            if data.starts_with(resolved) {
                return Some(format!(
                    "it contains rein's data directory {} (the store and the ledger); use a directory beside it",
                    data.display()
                ));
            }
            let own = self
                .task_workspaces
                .as_deref()
                .map(real_or_same)
                .filter(|w| resolved.starts_with(w) && resolved != w);
            if resolved.starts_with(&data) && own.is_none() {
                return Some(format!(
                    "it is inside rein's data directory {}, where only rein's own task workspaces may be",
                    data.display()
                ));
            }
        }
        if let Some(roots) = &self.roots {
            if roots.is_empty() {
                return Some(format!(
                    "the server takes no `{}` unless it is started with --workspace-root DIR, and then only inside DIR",
                    used.as_str()
                ));
            }
            let inside = roots
                .iter()
                .map(|r| real_or_same(r))
                .any(|r| resolved.starts_with(r));
            if !inside {
                let list: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
                return Some(format!(
                    "it is not inside the server's --workspace-root ({})",
                    list.join(", ")
                ));
            }
        }
        match used {
            Use::Workspace => self.owner_rule(resolved),
            Use::Read => read_rule(resolved),
        }
    }
}

impl Protected {
    /// The owner rule (see the module's doc), if `resolved` breaks it.
    fn owner_rule(&self, resolved: &Path) -> Option<String> {
        use std::os::unix::fs::MetadataExt;
        if !self.as_root {
            return None;
        }
        let exempt = self
            .task_workspaces
            .iter()
            .chain(&self.declared)
            .any(|d| resolved.starts_with(real_or_same(d)));
        if exempt {
            return None;
        }
        let (at, meta) = existing_part(resolved)?;
        (meta.uid() == 0).then(|| {
            let whose = if at == resolved {
                "it belongs to root".to_owned()
            } else {
                format!("it would be made in {}, which belongs to root", at.display())
            };
            format!(
                "{whose}, and rein runs as root: steps there would run as root; give the directory to the user whose work it is (chown), or declare a directory for such workspaces (`workspace_roots` in rein.toml, REIN_WORKSPACE_ROOTS, or a server's --workspace-root)"
            )
        })
    }
}

/// What exists of `path`: the path itself, else the nearest directory above
/// it that does, with its metadata (symlinks not followed).
pub fn existing_part(path: &Path) -> Option<(&Path, std::fs::Metadata)> {
    path.ancestors()
        .find_map(|at| at.symlink_metadata().ok().map(|meta| (at, meta)))
}

/// The rule a directory to read breaks, if any (see the module's doc).
fn read_rule(resolved: &Path) -> Option<String> {
    if resolved == Path::new("/") {
        return Some("`/` is the whole file system, secrets included".into());
    }
    if resolved.starts_with("/root") {
        return Some("`/root` is root's home: its keys and tokens are no step's to read".into());
    }
    if let Some(top) = SHARED_TOPS.iter().find(|t| resolved == Path::new(t)) {
        return Some(format!(
            "`{top}` itself holds everybody's files; name the directory inside it that is needed"
        ));
    }
    crate::confinement::MASKED
        .iter()
        .find(|m| resolved.starts_with(m))
        .map(|m| format!("`{m}` is hidden from every step"))
}

/// The system tree `path` is (in), if any: the named ones and `/lib*`.
fn system_tree(path: &Path) -> Option<String> {
    if let Some(tree) = SYSTEM_TREES.iter().find(|t| path.starts_with(t)) {
        return Some((*tree).to_owned());
    }
    let mut parts = path.components();
    let (Some(Component::RootDir), Some(Component::Normal(top))) = (parts.next(), parts.next())
    else {
        return None;
    };
    let top = top.to_string_lossy();
    top.starts_with("lib").then(|| format!("/{top}"))
}

fn real_or_same(path: &Path) -> PathBuf {
    real_path(path).unwrap_or_else(|_| path.to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    struct Place {
        _dir: tempfile::TempDir,
        root: PathBuf,
        protected: Protected,
    }

    fn place() -> Place {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let data = root.join("home/ana/.local/share/rein");
        std::fs::create_dir_all(data.join("workspaces/task_1")).unwrap();
        std::fs::create_dir_all(root.join("home/ana/project")).unwrap();
        let protected = Protected {
            data_dir: Some(data.clone()),
            task_workspaces: Some(data.join("workspaces")),
            roots: None,
            ..Protected::default()
        };
        Place {
            _dir: dir,
            root,
            protected,
        }
    }

    fn rule(result: Result<PathBuf, Refused>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn the_root_and_system_directories_are_refused_naming_the_rule() {
        let p = place();
        let refused = rule(p.protected.check_workspace(Path::new("/")));
        assert!(refused.contains("whole file system"), "{refused}");
        for (dir, named) in [
            ("/etc", "`/etc` is a system directory"),
            ("/etc/ssh", "`/etc` is a system directory"),
            ("/usr/lib", "`/usr`"),
            ("/lib64", "`/lib64`"),
            ("/proc/self", "`/proc`"),
            ("/home", "`/home` itself"),
            ("/root", "`/root` itself"),
            ("/var", "`/var` itself"),
            ("/tmp", "`/tmp` itself"),
        ] {
            let refused = rule(p.protected.check_workspace(Path::new(dir)));
            assert!(refused.contains(named), "{dir}: {refused}");
        }
        // Inside a shared top-level directory is fine.
        assert!(p.protected.check_workspace(&p.root.join("x")).is_ok());
    }

    #[test]
    fn dot_dot_and_symlinks_are_resolved_before_the_rules() {
        let p = place();
        let deep = p.root.join("home/ana/project");
        let climb = deep.join("../../../../../../../../..");
        let refused = rule(p.protected.check_workspace(&climb));
        assert!(refused.contains("resolves to /)"), "{refused}");
        std::os::unix::fs::symlink("/", deep.join("to-root")).unwrap();
        let refused = rule(p.protected.check_workspace(&deep.join("to-root")));
        assert!(refused.contains("whole file system"), "{refused}");
        std::os::unix::fs::symlink("/etc", deep.join("to-etc")).unwrap();
        let refused = rule(p.protected.check_workspace(&deep.join("to-etc/new")));
        assert!(refused.contains("`/etc`"), "{refused}");
        // A path that does not exist yet is checked as written.
        assert_eq!(
            p.protected
                .check_workspace(&deep.join("new/../fresh"))
                .unwrap(),
            deep.join("fresh")
        );
        // A dangling symlink is refused, not guessed at.
        std::os::unix::fs::symlink("/nonexistent/x", deep.join("dangling")).unwrap();
        assert!(p.protected.check_workspace(&deep.join("dangling")).is_err());
    }

    #[test]
    fn the_data_directory_is_off_limits_but_for_task_workspaces() {
        let p = place();
        let data = p.protected.data_dir.clone().unwrap();
        for dir in [
            p.root.join("home/ana"),
            p.root.join("home/ana/.local"),
            data.clone(),
        ] {
            let refused = rule(p.protected.check_workspace(&dir));
            assert!(
                refused.contains("contains rein's data directory"),
                "{refused}"
            );
            // Reading it is as refused as writing it.
            assert!(p.protected.check_readable(&dir).is_err());
        }
        for dir in [data.join("workspaces"), data.join("snapshots")] {
            let refused = rule(p.protected.check_workspace(&dir));
            assert!(
                refused.contains("inside rein's data directory"),
                "{refused}"
            );
        }
        assert!(
            p.protected
                .check_workspace(&data.join("workspaces/task_1"))
                .is_ok()
        );
        assert!(
            p.protected
                .check_workspace(&p.root.join("home/ana/project"))
                .is_ok()
        );
        // Through a symlink it is still the data directory.
        std::os::unix::fs::symlink(&data, p.root.join("home/ana/project/db")).unwrap();
        let refused = rule(
            p.protected
                .check_workspace(&p.root.join("home/ana/project/db")),
        );
        assert!(refused.contains("data directory"), "{refused}");
    }

    #[test]
    fn a_root_rein_refuses_what_belongs_to_root_outside_declared_directories() {
        use std::os::unix::fs::MetadataExt;
        let mut p = place();
        p.protected.as_root = true;
        for dir in [
            "/var/lib",
            "/var/spool",
            "/var/lib/dpkg",
            "/root/.cache",
            "/srv/x",
        ] {
            let refused = rule(p.protected.check_workspace(Path::new(dir)));
            assert!(
                refused.contains("rein runs as root") && refused.contains("chown"),
                "{dir}: {refused}"
            );
        }
        // Reading is not about whose a directory is (a toolchain is root's).
        assert!(p.protected.check_readable(Path::new("/usr/share")).is_ok());
        assert!(p.protected.check_readable(Path::new("/var/lib")).is_ok());
        // Someone else's directory is fine (the test's own, given away first
        // when the test runs as root).
        let project = p.root.join("home/ana/project");
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&project, Some(65534), Some(65534)).unwrap();
        }
        assert_ne!(project.metadata().unwrap().uid(), 0);
        assert!(p.protected.check_workspace(&project).is_ok());
        assert!(
            p.protected
                .check_workspace(&project.join("new/deeper"))
                .is_ok()
        );
        // rein's own task workspaces are root's and fine.
        let data = p.protected.data_dir.clone().unwrap();
        assert!(
            p.protected
                .check_workspace(&data.join("workspaces/task_1"))
                .is_ok()
        );
        // A declared directory takes root's workspaces.
        let refused = rule(p.protected.check_workspace(Path::new("/var/lib/dpkg")));
        assert!(refused.contains("workspace_roots"), "{refused}");
        p.protected.declared = vec![PathBuf::from("/var/lib")];
        assert!(
            p.protected
                .check_workspace(Path::new("/var/lib/dpkg"))
                .is_ok()
        );
        // Not root: none of this applies.
        p.protected.declared.clear();
        p.protected.as_root = false;
        assert!(
            p.protected
                .check_workspace(Path::new("/var/lib/dpkg"))
                .is_ok()
        );
    }

    #[test]
    fn what_no_step_may_read_is_refused_naming_the_rule() {
        // Without a data directory to refuse them first.
        let p = Place {
            protected: Protected::default(),
            ..place()
        };
        for (dir, named) in [
            ("/", "whole file system"),
            ("/root", "root's home"),
            ("/root/.ssh", "root's home"),
            ("/home", "`/home` itself"),
            ("/etc/shadow", "hidden from every step"),
        ] {
            let refused = rule(p.protected.check_readable(Path::new(dir)));
            assert!(refused.contains(named), "{dir}: {refused}");
        }
        assert!(p.protected.check_readable(Path::new("/etc/ssl")).is_ok());
    }

    #[test]
    fn roots_confine_what_a_server_accepts() {
        let mut p = place();
        p.protected.roots = Some(Vec::new());
        let refused = rule(
            p.protected
                .check_workspace(&p.root.join("home/ana/project")),
        );
        assert!(refused.contains("--workspace-root"), "{refused}");
        let refused = rule(p.protected.check_readable(Path::new("/root")));
        assert!(refused.contains("no `allow_read`"), "{refused}");
        p.protected.roots = Some(vec![p.root.join("home/ana")]);
        assert!(
            p.protected
                .check_workspace(&p.root.join("home/ana/project"))
                .is_ok()
        );
        let refused = rule(p.protected.check_readable(Path::new("/root")));
        assert!(
            refused.contains("not inside the server's --workspace-root"),
            "{refused}"
        );
        let refused = rule(p.protected.check_workspace(Path::new("relative/dir")));
        assert!(refused.contains("must be absolute"), "{refused}");
    }
}
