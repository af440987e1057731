//! Workspaces as they were: rein keeps a task's workspace at its step
//! boundaries, content-addressed (a file that did not change is not stored
//! again, identical files across tasks are stored once), so that a task can
//! later be taken back to one of those points. [`WorkspaceHistory`] is what
//! the engine asks of the keeper; `rein-store` has the one rein uses.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use rein_protocol::{SavedWorkspace, SnapshotRules, TaskId};

/// What a kept tree wrote back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Restored {
    pub files: u64,
    pub bytes: u64,
}

/// The keeper of tasks' workspaces as they were.
#[async_trait]
pub trait WorkspaceHistory: Send + Sync + std::fmt::Debug {
    /// Keeps the directory open as `workspace` as it is now, as task
    /// `task`'s workspace at log position `seq`. Never an error: a workspace
    /// that could not be kept (over the cap, a full disk) comes back with
    /// `unavailable` saying why, and the task goes on.
    async fn save(
        &self,
        task: &TaskId,
        seq: u64,
        workspace: std::os::fd::OwnedFd,
        rules: &SnapshotRules,
    ) -> SavedWorkspace;

    /// Writes the kept tree `root` into `into`, which must not exist or be
    /// empty: every file byte for byte with its permissions, every
    /// directory and symbolic link.
    async fn restore(&self, root: &str, into: &Path) -> Result<Restored, String>;

    /// [`WorkspaceHistory::restore`], for task `task`'s workspace (a
    /// fork's): the keeper may remember what it wrote, so that the task's
    /// first save does not read it all again.
    async fn restore_for(
        &self,
        task: &TaskId,
        root: &str,
        into: &Path,
    ) -> Result<Restored, String> {
        let _ = task;
        self.restore(root, into).await
    }

    /// Forgets task `task`'s points; what no other task's points use is
    /// deleted. Answers the bytes freed.
    async fn release(&self, task: &TaskId) -> Result<u64, String>;
}

/// The patterns of [`SnapshotRules::exclude`], as in `.gitignore`: `target/`
/// a directory of that name anywhere, `*.log` a name anywhere, `/build` one
/// at the top, `docs/*.pdf` a path from the top.
#[derive(Debug)]
pub struct Excludes {
    patterns: Vec<(String, globset::GlobMatcher, bool)>,
}

impl Excludes {
    pub fn new(patterns: &[String]) -> Result<Excludes, String> {
        let mut out = Vec::new();
        for pattern in patterns {
            let dir_only = pattern.ends_with('/');
            let body = pattern.trim_end_matches('/');
            let glob = if let Some(anchored) = body.strip_prefix('/') {
                anchored.to_owned()
            } else if body.contains('/') {
                body.to_owned()
            } else {
                format!("**/{body}")
            };
            let matcher = globset::GlobBuilder::new(&glob)
                .literal_separator(true)
                .build()
                .map_err(|e| format!("snapshot.exclude `{pattern}`: {e}"))?
                .compile_matcher();
            out.push((pattern.clone(), matcher, dir_only));
        }
        Ok(Excludes { patterns: out })
    }

    /// As [`Excludes::matching`], the path made only when there are
    /// patterns to match it against.
    pub fn matching_any(&self, rel: impl FnOnce() -> PathBuf, is_dir: bool) -> Option<&str> {
        if self.patterns.is_empty() {
            return None;
        }
        self.matching(&rel(), is_dir)
    }

    /// The pattern that leaves `rel` out, if one does.
    pub fn matching(&self, rel: &Path, is_dir: bool) -> Option<&str> {
        self.patterns
            .iter()
            .find(|(_, m, dir_only)| (is_dir || !dir_only) && m.is_match(rel))
            .map(|(p, _, _)| p.as_str())
    }
}
