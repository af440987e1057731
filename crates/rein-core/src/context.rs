//! What a task's run needs of the engine, and nothing more: the store, the
//! step executor, the configuration (its clock among it), where durable
//! events go, which runner this is, and the engine's shared limits.
//! [`crate::Engine`] holds one and hands the run, approvals, sessions,
//! contracts, shared states and goal decomposition a reference to it, so none
//! of them imports the engine back.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rein_protocol::{HarnessEvent, RunnerInfo};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, SystemClock};
use crate::controls::ControlHub;
use crate::executor::StepExecutor;
use crate::store::Store;

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Most steps of one task running at once, unless its plan says otherwise.
    pub max_parallel: usize,
    /// Bytes kept from the end of each step's stdout and stderr.
    pub output_tail_bytes: usize,
    /// How often the engine checks for pause and abort requests from other processes.
    pub control_poll: Duration,
    /// Where tasks without a workspace of their own get a fresh directory.
    pub workspace_root: PathBuf,
    pub default_session: String,
    /// Wall-clock time for deadlines.
    pub clock: Arc<dyn Clock>,
    /// Permission rules for command steps (none: everything is allowed).
    pub policy: Arc<rein_sandbox::Policy>,
    /// rein's data directory, which no task may be given as (or around) its
    /// workspace or read, and which the sandbox hides from every step.
    pub data_dir: Option<PathBuf>,
    /// Where nodes share the store: the most tasks this node runs at once;
    /// others wait for a node with room.
    pub max_tasks: usize,
    /// Directories the operator declared for workspaces (`workspace_roots`,
    /// a server's `--workspace-root`): a root rein accepts root's
    /// directories inside them as workspaces (see [`rein_sandbox::guard`]).
    pub workspace_roots: Vec<PathBuf>,
    /// The keeper of each task's workspace as it was at its step boundaries
    /// (none: nothing is kept), and what it keeps unless a plan says more
    /// (`[snapshot]` in `rein.toml`).
    pub saved: Option<Arc<dyn crate::saved::WorkspaceHistory>>,
    pub snapshot: rein_protocol::SnapshotRules,
    /// The file the permission rules were loaded from, and its text then:
    /// health reads it again, so a file broken or changed since is told.
    pub policy_file: Option<(PathBuf, String)>,
}

/// The permission rules' file as it reads now, against what was loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyFile {
    /// No file: the rules are the defaults.
    None,
    /// It reads as it was loaded.
    AsLoaded(PathBuf),
    /// It parses, but differs from what is in force.
    Changed(PathBuf),
    /// It no longer reads or parses, said why.
    Broken(PathBuf, String),
}

/// [`EngineConfig::max_tasks`] unless set.
pub const DEFAULT_MAX_TASKS: usize = 1000;

impl EngineConfig {
    pub fn new(workspace_root: PathBuf) -> EngineConfig {
        EngineConfig {
            max_parallel: 4,
            output_tail_bytes: 4096,
            control_poll: Duration::from_millis(200),
            workspace_root,
            default_session: "default".to_owned(),
            clock: Arc::new(SystemClock),
            policy: Arc::default(),
            data_dir: None,
            max_tasks: DEFAULT_MAX_TASKS,
            workspace_roots: Vec::new(),
            saved: None,
            snapshot: rein_protocol::SnapshotRules::default(),
            policy_file: None,
        }
    }

    /// The policy file read again (health's probe of the permission rules).
    pub fn policy_file(&self) -> PolicyFile {
        let Some((path, then)) = &self.policy_file else {
            return PolicyFile::None;
        };
        match std::fs::read_to_string(path) {
            Err(e) => PolicyFile::Broken(path.clone(), format!("it cannot be read ({e})")),
            Ok(now) => match rein_sandbox::Policy::parse(&now, &path.display().to_string()) {
                Err(e) => PolicyFile::Broken(path.clone(), e.to_string()),
                Ok(_) if now != *then => PolicyFile::Changed(path.clone()),
                Ok(_) => PolicyFile::AsLoaded(path.clone()),
            },
        }
    }

    /// What the directories given to a task must keep clear of: the data
    /// directory (but for the task workspaces in it) and, for a submission
    /// confined to `roots`, everything outside them.
    pub fn protected(&self, roots: Option<Vec<PathBuf>>) -> rein_sandbox::Protected {
        // A server's roots were declared by its operator, as configured ones are.
        let declared = self
            .workspace_roots
            .iter()
            .chain(roots.iter().flatten())
            .cloned()
            .collect();
        rein_sandbox::Protected {
            data_dir: self.data_dir.clone(),
            task_workspaces: Some(self.workspace_root.clone()),
            roots,
            declared,
            as_root: nix::unistd::geteuid().is_root(),
        }
    }
}

/// How to run or resume a task.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Interrupted steps to run again although they are not idempotent.
    pub rerun: Vec<String>,
    /// Interrupted steps to record as skipped.
    pub skip: Vec<String>,
    /// Fired: start no more steps, let running ones finish, then pause the task.
    pub pause: CancellationToken,
    /// Fired: stop running steps now and return, leaving the task resumable
    /// exactly as a crash would.
    pub cancel: CancellationToken,
    /// When all that is left waits for a person, pause the task and return instead
    /// of waiting for the decision.
    pub no_wait: bool,
    /// Who `rerun` and `skip` come from, as recorded in the ledger (empty: "operator").
    pub decided_by: String,
    /// A look at this machine's processes taken after the task's last runner
    /// stopped (a take-over of many tasks at once): the interrupted attempts it
    /// did not see are not looked for again. None: each take-up looks itself.
    pub sweep: Option<rein_sandbox::process::Sweep>,
}

/// The engine's parts a run, a decision and a record change use.
#[derive(Debug)]
pub struct RunContext {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) executor: Arc<dyn StepExecutor>,
    pub(crate) config: EngineConfig,
    pub(crate) events: broadcast::Sender<HarnessEvent>,
    pub(crate) runner: RunnerInfo,
    /// The tasks this engine is running right now, and the way to reach them.
    pub(crate) controls: Arc<ControlHub>,
    /// Woken when this engine writes an audit record (streams also poll, for
    /// records other processes write).
    pub(crate) audited: Arc<tokio::sync::Notify>,
    /// What serves isolated completions: a goal's decomposition, `rein complete`.
    pub(crate) completer: Option<Arc<dyn crate::harness::completion::Completer>>,
    /// Runs starting or resuming at once, up to their first steps: a thousand
    /// tasks taken up together go through a few at a time, so whatever else
    /// the engine's threads serve (a request, a step that ends) waits behind a
    /// few take-ups, not behind all of them.
    pub(crate) starting: Arc<tokio::sync::Semaphore>,
}

impl RunContext {
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Resolves when another node changed `what` in the shared store (never,
    /// on a store of one node).
    pub async fn changed_elsewhere(&self, what: crate::store::Change) {
        crate::store::changed_elsewhere(self.store.as_ref(), what).await;
    }
}

impl RunContext {
    /// The engine's agent sessions.
    pub fn sessions(&self) -> crate::sessions::Sessions {
        crate::sessions::Sessions {
            store: Arc::clone(&self.store),
            clock: Arc::clone(&self.config.clock),
            audited: Arc::clone(&self.audited),
        }
    }
}
