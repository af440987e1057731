//! Running one step: the [`StepExecutor`] trait and the executor that runs plan
//! commands as child processes.

use std::collections::VecDeque;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use rein_protocol::{PermissionDecision, StepAction, TaskId, TaskStep};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

use rein_sandbox::{Confinement, Sandbox, SandboxKind, Unavailable};

use crate::recovery::Failure;

pub use crate::asking::{Ask, AskError, Asker, Question, StepMessage};

/// Everything an executor needs to run one attempt of a step.
#[derive(Debug, Clone)]
pub struct StepRequest {
    pub task_id: TaskId,
    pub step: Arc<TaskStep>,
    pub attempt: u32,
    /// The task's workspace: the directory it was given, by identity (a
    /// path that leads elsewhere by now is refused, not followed).
    pub workspace: rein_sandbox::Pinned,
    /// How many bytes of the end of stdout and of stderr to keep.
    pub output_tail_bytes: usize,
    /// The permission rules in force.
    pub policy: Arc<rein_sandbox::Policy>,
    /// Where a step that works in turns (an agent step) keeps what it has
    /// done, durably, so a resumed attempt does not do it again.
    pub journal: Option<crate::journal::Journal>,
    /// Who approved running this attempt, when it follows a person's answer to
    /// the step's escalation.
    pub approved_by: Option<String>,
    /// The step's line to a person while it runs (an agent asking permission).
    pub asker: Option<Asker>,
    /// rein's data directory, which the sandbox keeps out of the step's reach.
    pub data_dir: Option<PathBuf>,
    /// What every directory the step may read must keep clear of: each is
    /// checked again as the step starts what reads it (see
    /// [`rein_sandbox::guard`]).
    pub guard: Arc<rein_sandbox::Protected>,
    /// The agent sessions of the store (for agent steps).
    pub sessions: Option<crate::sessions::Sessions>,
    /// What the task's model calls may spend, all its steps together (the
    /// plan's `budget`).
    pub task_budget: Option<rein_protocol::Budget>,
}

/// What a step's command did, recorded in its checkpoint's `output`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandOutput {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    #[serde(default)]
    pub timed_out: bool,
    pub stdout_tail: String,
    pub stderr_tail: String,
    /// Bytes of output dropped from the front to keep only the tails.
    #[serde(default)]
    pub truncated_bytes: u64,
    /// The sandbox the command ran in: `bubblewrap`, `landlock`, or `none` when
    /// unsandboxed.
    #[serde(default)]
    pub sandbox: String,
    /// What the command could reach: where it could write and read, what was
    /// hidden from it, whether it had the network.
    pub reach: Option<rein_sandbox::Reach>,
    /// What the permission rules said, and which rule.
    pub permission: Option<PermissionDecision>,
    /// The policy in force: its rules by source and its default.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy: String,
    /// The step's process limit, and whether it binds.
    pub process_limit: Option<ProcessLimit>,
    /// The user the command ran as, when rein runs as root and ran it as the
    /// owner of its workspace.
    pub run_as_uid: Option<u32>,
}

/// A step's limit on processes, and whether it was in force.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessLimit {
    pub limit: u64,
    pub enforced: bool,
    /// Why it was not, when it was not.
    pub note: Option<String>,
}

/// The variables every process of an attempt is started with: the step's to
/// read, and what a resumed run finds what is left of the attempt by.
pub fn attempt_marks(task: &TaskId, step: &str, attempt: u32) -> [(&'static str, String); 3] {
    [
        ("REIN_TASK_ID", task.to_string()),
        ("REIN_STEP_ID", step.to_owned()),
        ("REIN_ATTEMPT", attempt.to_string()),
    ]
}

/// The directories `paths` a step may read, each checked again as it starts
/// (they were checked when the task was made; a declaration from the
/// configuration, or a symlink put in place since, is checked here), as
/// they resolve; `Err` names every one refused and the rule.
fn readable(
    request: &StepRequest,
    paths: impl Iterator<Item = PathBuf>,
) -> Result<Vec<PathBuf>, String> {
    let mut readable = Vec::new();
    let mut refused = Vec::new();
    for path in paths {
        match request.guard.check_readable(&path) {
            Ok(resolved) => readable.push(resolved),
            Err(why) => refused.push(why.to_string()),
        }
    }
    if refused.is_empty() {
        Ok(readable)
    } else {
        Err(format!("refused to start: {}", refused.join("; ")))
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum StepOutcome {
    Passed {
        output: Option<serde_json::Value>,
    },
    Failed {
        error: String,
        output: Option<serde_json::Value>,
        /// What went wrong, for classification and recovery.
        failure: Failure,
    },
    /// The caller cancelled the attempt; nothing is known about how far it got.
    Cancelled,
}

/// How well steps can run, from a real trial, for health checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecutorHealth {
    Healthy(String),
    /// Steps run, but with less protection than they should have.
    Degraded(String),
    /// Steps cannot run.
    Unhealthy(String),
}

#[async_trait]
pub trait StepExecutor: Send + Sync + std::fmt::Debug {
    /// Runs one attempt of a step. Must return promptly once `cancel` fires, having
    /// stopped whatever it started.
    async fn execute(&self, request: StepRequest, cancel: CancellationToken) -> StepOutcome;

    /// Runs something trivial the way steps run, and says how it went.
    async fn probe(&self) -> ExecutorHealth {
        ExecutorHealth::Healthy("steps run in process".into())
    }

    /// A task it ran steps of has ended (completed, failed or aborted): what
    /// it keeps for the task's sessions can go.
    async fn task_ended(&self, task: &TaskId, sessions: &crate::sessions::Sessions) {
        let _ = (task, sessions);
    }

    /// The command that starts `helper` for `request`'s step (an agent
    /// step's MCP server, spoken to over its stdio), confined the way the
    /// step's commands are; the caller adds stdio. `Err` says why none can
    /// start.
    fn helper(
        &self,
        request: &StepRequest,
        helper: &Helper,
    ) -> Result<(tokio::process::Command, rein_sandbox::Reach), String> {
        let _ = (request, helper);
        Err("this rein starts no helper processes for steps".into())
    }
}

/// A long-running process a step works with (an MCP server): a program and
/// its arguments, run in the step's workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Helper {
    pub program: String,
    pub args: Vec<String>,
    pub env: std::collections::BTreeMap<String, String>,
    /// Directories beyond the workspace it may read.
    pub allow_read: Vec<PathBuf>,
    pub network: bool,
}

/// Runs `command` steps with `sh -c` in the task's workspace, in a process group of
/// their own so a timeout or a cancel stops everything the command started:
/// under the sandbox, or refusing to when none can run, or (chosen explicitly)
/// unsandboxed.
#[derive(Debug, Default, Clone)]
pub struct CommandExecutor {
    confine: Confine,
    /// Unsandboxed: the trampoline that starts `sh` without a fork of rein
    /// (`rein __confine --unconfined`); none: `sh` is forked.
    spawner: Option<Arc<rein_sandbox::Trampoline>>,
    /// How long a step's supervisor waits for rein's heartbeat before it
    /// kills the step's tree (a node sharing its tasks: half its lease).
    heartbeat: Option<Duration>,
}

#[derive(Debug, Default, Clone)]
enum Confine {
    Sandboxed(Arc<Sandbox>),
    /// No sandbox can run: command steps fail, saying why and what to install.
    Refused(Unavailable),
    /// The operator chose no sandbox; every run is marked so.
    #[default]
    Unsandboxed,
}

impl CommandExecutor {
    /// Commands run under `sandbox`.
    pub fn sandboxed(sandbox: Sandbox) -> CommandExecutor {
        CommandExecutor {
            confine: Confine::Sandboxed(Arc::new(sandbox)),
            spawner: None,
            heartbeat: None,
        }
    }

    /// Command steps fail with `why` (no sandbox can run and none was waived).
    pub fn refusing(why: Unavailable) -> CommandExecutor {
        CommandExecutor {
            confine: Confine::Refused(why),
            spawner: None,
            heartbeat: None,
        }
    }

    /// Commands run with rein's own permissions (`--sandbox none`, and tests of
    /// the engine that are not about confinement).
    pub fn unsandboxed() -> CommandExecutor {
        CommandExecutor::default()
    }

    /// The same, each command started by `trampoline` (unconfined), so that
    /// rein is not forked to start it (see [`rein_sandbox::process`]).
    pub fn unsandboxed_via(trampoline: rein_sandbox::Trampoline) -> CommandExecutor {
        CommandExecutor {
            confine: Confine::Unsandboxed,
            spawner: Some(Arc::new(trampoline)),
            heartbeat: None,
        }
    }

    /// Each step's supervisor kills the step's tree when rein's heartbeat
    /// stops for `silence` (rein writes every quarter of it): a node frozen
    /// past its lease has its steps stopped before another node takes them.
    pub fn with_heartbeat(self, silence: Duration) -> CommandExecutor {
        CommandExecutor {
            heartbeat: Some(silence),
            ..self
        }
    }

    /// The heartbeat a step's command is started with: only a supervisor
    /// (the trampoline) reads one.
    fn supervised_heartbeat(&self) -> Option<Duration> {
        let supervised = match &self.confine {
            Confine::Sandboxed(sandbox) => sandbox.supervised(),
            Confine::Unsandboxed => self.spawner.is_some(),
            Confine::Refused(_) => false,
        };
        self.heartbeat.filter(|_| supervised)
    }

    /// The sandbox in force, as recorded with every run: `bubblewrap` or `none`.
    pub fn sandbox_kind(&self) -> SandboxKind {
        match &self.confine {
            Confine::Sandboxed(sandbox) => sandbox.kind(),
            Confine::Refused(_) | Confine::Unsandboxed => SandboxKind::None,
        }
    }
}

/// How long a stopped command gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);

#[async_trait]
impl StepExecutor for CommandExecutor {
    async fn probe(&self) -> ExecutorHealth {
        let dir = match rein_sandbox::Pinned::pin_resolved(&std::env::temp_dir()) {
            Ok(dir) => dir,
            Err(e) => {
                return ExecutorHealth::Unhealthy(format!("no directory to try a command in: {e}"));
            }
        };
        let env = std::collections::BTreeMap::new();
        let request = StepRequest {
            task_id: TaskId::new(),
            step: Arc::new(TaskStep::command("probe", "true")),
            attempt: 1,
            workspace: dir,
            output_tail_bytes: 1024,
            policy: Arc::default(),
            journal: None,
            approved_by: None,
            asker: None,
            data_dir: None,
            guard: Arc::default(),
            sessions: None,
            task_budget: None,
        };
        let ran = self
            .run_command(
                &request,
                "true",
                &env,
                &Confinement::default(),
                CommandOutput::default(),
                CancellationToken::new(),
            )
            .await;
        match (ran, &self.confine) {
            (StepOutcome::Passed { .. }, Confine::Sandboxed(sandbox)) => {
                ExecutorHealth::Healthy(format!("ran a command under {}", sandbox.detail))
            }
            (StepOutcome::Passed { .. }, _) => ExecutorHealth::Degraded(
                "steps run unsandboxed, with rein's own permissions (--sandbox none)".into(),
            ),
            (StepOutcome::Failed { error, .. }, _) => ExecutorHealth::Unhealthy(error),
            (StepOutcome::Cancelled, _) => {
                ExecutorHealth::Unhealthy("the trial command was cancelled".into())
            }
        }
    }

    fn helper(
        &self,
        request: &StepRequest,
        helper: &Helper,
    ) -> Result<(tokio::process::Command, rein_sandbox::Reach), String> {
        self.helper_command(request, helper)
    }

    async fn execute(&self, request: StepRequest, cancel: CancellationToken) -> StepOutcome {
        match &request.step.action {
            StepAction::Noop => StepOutcome::Passed { output: None },
            StepAction::Command {
                run,
                env,
                network,
                memory_mb,
                processes,
                allow_read,
            } => {
                // The rules are asked again: the run records what they said, and
                // under which policy.
                let policy = match crate::permissions::for_step(&request.step, &request.policy) {
                    Ok(policy) => policy,
                    Err(detail) => {
                        return StepOutcome::Failed {
                            error: format!("the step's permissions are invalid: {detail}"),
                            output: None,
                            failure: Failure::PermissionDenied,
                        };
                    }
                };
                let permission = crate::permissions::decide_under(&request.step, &policy);
                if let Some(refusal) = crate::permissions::refusal(&request.step, permission.as_ref()) {
                    let output = CommandOutput {
                        sandbox: self.sandbox_kind().as_str().to_owned(),
                        permission,
                        ..CommandOutput::default()
                    };
                    return StepOutcome::Failed {
                        error: refusal,
                        output: to_value(&output),
                        failure: Failure::PermissionDenied,
                    };
                }
                let sandboxed = self.sandbox_kind() != SandboxKind::None;
                let run_as = if sandboxed {
                    request.workspace.run_as()
                } else {
                    None
                };
                let process_limit = processes.map(|n| {
                    let note = if !sandboxed {
                        Some("not applied unsandboxed: the limit would count every process of rein's user".to_owned())
                    } else if run_as.is_none() && nix::unistd::geteuid().is_root() {
                        Some("not binding: rein runs as root and the workspace is root's, and the kernel does not limit root's processes; give the workspace to another user, or run rein as one".to_owned())
                    } else {
                        None
                    };
                    ProcessLimit {
                        limit: u64::from(n),
                        enforced: note.is_none(),
                        note,
                    }
                });
                let read_only = match readable(&request, allow_read.iter().map(PathBuf::from)) {
                    Ok(dirs) => dirs,
                    Err(refused) => {
                        return StepOutcome::Failed {
                            error: refused,
                            output: None,
                            failure: Failure::SandboxDenied { security: true },
                        };
                    }
                };
                let confinement = Confinement {
                    network: *network,
                    memory_bytes: memory_mb.map(|mb| mb.saturating_mul(1024 * 1024)),
                    read_only,
                    processes: process_limit
                        .as_ref()
                        .filter(|l| l.enforced)
                        .map(|l| l.limit),
                    run_as,
                    hidden: request.data_dir.iter().cloned().collect(),
                    heartbeat: self.supervised_heartbeat(),
                };
                let record = CommandOutput {
                    permission,
                    policy: policy.describe(),
                    process_limit,
                    run_as_uid: run_as.map(|(uid, _)| uid),
                    ..CommandOutput::default()
                };
                self.run_command(&request, run, env, &confinement, record, cancel)
                    .await
            }
            // The runner waits for a person on these; they never reach an executor.
            StepAction::Approval { .. } => StepOutcome::Failed {
                error: "an approve step is decided by a person, not executed".into(),
                output: None,
                failure: Failure::Unsupported,
            },
            // Agent runtimes live beside the engine (rein-runtimes), which wraps
            // this executor to run agent steps.
            StepAction::Agent { .. } => StepOutcome::Failed {
                error: "this rein runs no agent steps: start it with an agent runtime (the rein CLI and server do)".into(),
                output: None,
                failure: Failure::Unsupported,
            },
            // The engine verifies, with this executor running the verifiers.
            StepAction::Verify { .. } => StepOutcome::Failed {
                error: "a verify step is run by the engine, not an executor".into(),
                output: None,
                failure: Failure::Unsupported,
            },
        }
    }
}

impl CommandExecutor {
    /// `helper` as a command confined like the step's commands: `exec
    /// PROGRAM ARGS…` under the sandbox (or unsandboxed, if so chosen), with
    /// what it can reach.
    pub fn helper_command(
        &self,
        request: &StepRequest,
        helper: &Helper,
    ) -> Result<(tokio::process::Command, rein_sandbox::Reach), String> {
        let words: Vec<&str> = std::iter::once(helper.program.as_str())
            .chain(helper.args.iter().map(String::as_str))
            .collect();
        let script = format!("exec {}", shell_words::join(words));
        let vars: Vec<(String, String)> = helper
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        match &self.confine {
            Confine::Sandboxed(sandbox) => {
                let confinement = Confinement {
                    network: helper.network,
                    read_only: readable(request, helper.allow_read.iter().cloned())?,
                    run_as: request.workspace.run_as(),
                    hidden: request.data_dir.iter().cloned().collect(),
                    ..Confinement::default()
                };
                Ok((
                    sandbox.command(&request.workspace, &script, &vars, &confinement),
                    sandbox.reach(&request.workspace.path, &confinement),
                ))
            }
            Confine::Refused(why) => Err(why.to_string()),
            Confine::Unsandboxed => Ok((
                self.plain_sh(&request.workspace, &script, vars, None),
                rein_sandbox::Reach::unsandboxed(),
            )),
        }
    }

    /// `sh -c script` in `workspace`, unsandboxed, dying with rein: started
    /// by the trampoline when there is one, else forked with the parent-death
    /// signal set before it becomes `sh`.
    fn plain_sh(
        &self,
        workspace: &rein_sandbox::Pinned,
        script: &str,
        vars: Vec<(String, String)>,
        heartbeat: Option<Duration>,
    ) -> tokio::process::Command {
        if let Some(trampoline) = &self.spawner {
            let mut command = tokio::process::Command::new(&trampoline.program);
            command
                .args(&trampoline.args)
                .args(rein_sandbox::landlock::unconfined_args(
                    workspace, script, &vars, heartbeat,
                ))
                .current_dir("/");
            return command;
        }
        let mut command = tokio::process::Command::new("sh");
        command.arg("-c").arg(script).envs(vars);
        rein_sandbox::process::die_with_parent(&mut command);
        rein_sandbox::process::enter_pinned(&mut command, workspace);
        command
    }

    /// The command for one attempt: `sh -c run` in the workspace, confined as the
    /// executor is; `Err` if it refuses.
    fn launcher(
        &self,
        request: &StepRequest,
        run: &str,
        env: &std::collections::BTreeMap<String, String>,
        confinement: &Confinement,
    ) -> Result<tokio::process::Command, String> {
        let mut vars: Vec<(String, String)> =
            env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        vars.extend(
            attempt_marks(&request.task_id, &request.step.id, request.attempt)
                .map(|(key, value)| (key.to_owned(), value)),
        );
        match &self.confine {
            Confine::Sandboxed(sandbox) => {
                Ok(sandbox.command(&request.workspace, run, &vars, confinement))
            }
            Confine::Refused(why) => Err(why.to_string()),
            Confine::Unsandboxed => {
                Ok(self.plain_sh(&request.workspace, run, vars, self.supervised_heartbeat()))
            }
        }
    }

    async fn run_command(
        &self,
        request: &StepRequest,
        run: &str,
        env: &std::collections::BTreeMap<String, String>,
        confinement: &Confinement,
        record: CommandOutput,
        cancel: CancellationToken,
    ) -> StepOutcome {
        // The workspace must still be the directory the task was given; the
        // process that starts the command checks it again, and from then on
        // uses the directory it opened, not the path.
        if let Err(changed) = request.workspace.verify() {
            return StepOutcome::Failed {
                error: format!("refused to start the command: {changed}"),
                output: None,
                failure: Failure::SandboxDenied { security: true },
            };
        }
        let command = match self.launcher(request, run, env, confinement) {
            Ok(command) => command,
            Err(why) => {
                return StepOutcome::Failed {
                    error: why,
                    output: None,
                    failure: Failure::Unsupported,
                };
            }
        };
        let reach = match &self.confine {
            Confine::Sandboxed(sandbox) => sandbox.reach(&request.workspace.path, confinement),
            Confine::Refused(_) | Confine::Unsandboxed => rein_sandbox::Reach::unsandboxed(),
        };
        let record = CommandOutput {
            sandbox: self.sandbox_kind().as_str().to_owned(),
            reach: Some(reach),
            ..record
        };
        run_child(
            request,
            command,
            record,
            self.supervised_heartbeat(),
            cancel,
        )
        .await
    }
}

/// Why a step's command could not start, naming what is missing when the
/// system only says "not found": the program that starts `sh` (the
/// trampoline, which is rein itself or `rein-confine` beside it), or the
/// workspace.
fn spawn_error(
    command: &std::process::Command,
    workspace: &std::path::Path,
    e: &std::io::Error,
) -> String {
    let program = std::path::Path::new(command.get_program());
    let head = format!("cannot start `sh -c` in workspace {}", workspace.display());
    if e.kind() == std::io::ErrorKind::NotFound {
        if program.is_absolute() && !program.exists() {
            return format!(
                "{head}: {} is gone ({e}); it starts every step, so rein was moved, replaced or removed while it ran: restart rein",
                program.display()
            );
        }
        if !workspace.is_dir() {
            return format!("{head}: the workspace is gone ({e})");
        }
    }
    format!("{head}: {e}")
}

/// Writes a heartbeat to a step's supervisor every `every` until the step
/// ends (the task is aborted) or the supervisor stops reading.
async fn beat(mut stdin: tokio::process::ChildStdin, every: Duration) {
    use tokio::io::AsyncWriteExt;
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(1)));
    loop {
        tick.tick().await;
        if stdin.write_all(b".").await.is_err() {
            return;
        }
    }
}

/// The heartbeat task, stopped when the step ends.
struct Beating(tokio::task::JoinHandle<()>);

impl Drop for Beating {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A step's process group, killed when dropped unless already killed.
struct Group(Option<Pid>);

impl Group {
    fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `command` as one attempt of `request`'s step; `record` holds what the
/// output records besides the run itself (sandbox, permission, policy).
async fn run_child(
    request: &StepRequest,
    mut command: tokio::process::Command,
    record: CommandOutput,
    heartbeat: Option<Duration>,
    cancel: CancellationToken,
) -> StepOutcome {
    command
        .stdin(if heartbeat.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // Killed with rein, whatever kills rein: the sandbox's command sees to it
    // (`Sandbox::command`), as does `plain_sh`.
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let failure = match e.kind() {
                std::io::ErrorKind::PermissionDenied => Failure::PermissionDenied,
                std::io::ErrorKind::NotFound => Failure::Unsupported,
                _ => Failure::Internal,
            };
            return StepOutcome::Failed {
                error: spawn_error(command.as_std(), &request.workspace.path, &e),
                output: None,
                failure,
            };
        }
    };
    // Recorded, so a run resumed after a crash can stop what is left of it.
    if let (Some(asker), Some(id)) = (&request.asker, child.id()) {
        asker.started(rein_protocol::StepProcess {
            host: rein_sandbox::process::hostname(),
            boot_id: rein_sandbox::process::boot_id(),
            pgid: id,
            process_start: rein_sandbox::process::process_start(id),
        });
    }
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    // A step dropped before it ends (its run stopped from outside) takes its
    // whole group with it, not only the process it started.
    let mut group = Group(pgid);
    // rein's heartbeat to the step's supervisor, while the step runs.
    let _beating = match (heartbeat, child.stdin.take()) {
        (Some(silence), Some(stdin)) => Some(Beating(tokio::spawn(beat(stdin, silence / 4)))),
        _ => None,
    };
    let tail = request.output_tail_bytes;
    let stdout = child
        .stdout
        .take()
        .map(|s| tokio::spawn(read_tail(s, tail)));
    let stderr = child
        .stderr
        .take()
        .map(|s| tokio::spawn(read_tail(s, tail)));

    let timeout = request.step.timeout_ms.map(Duration::from_millis);
    let deadline = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    enum End {
        Exited(std::io::Result<std::process::ExitStatus>),
        TimedOut,
        Cancelled,
    }
    let end = tokio::select! {
        status = child.wait() => End::Exited(status),
        () = deadline => End::TimedOut,
        () = cancel.cancelled() => End::Cancelled,
    };
    let (cancelled, timed_out) = (matches!(end, End::Cancelled), matches!(end, End::TimedOut));
    let status = match end {
        End::Exited(status) => Some(status),
        End::TimedOut | End::Cancelled => {
            if let Some(pgid) = pgid {
                let _ = killpg(pgid, Signal::SIGTERM);
            }
            tokio::time::timeout(KILL_GRACE, child.wait()).await.ok()
        }
    };
    // Whatever the command left running in its group ends with the step.
    group.kill();
    let status = match status {
        Some(s) => s,
        None => child.wait().await,
    };
    let (stdout_tail, out_dropped) = join_tail(stdout).await;
    let (stderr_tail, err_dropped) = join_tail(stderr).await;
    let mut output = CommandOutput {
        stdout_tail,
        stderr_tail,
        truncated_bytes: out_dropped + err_dropped,
        ..record
    };
    if cancelled {
        return StepOutcome::Cancelled;
    }
    let status = match status {
        Ok(status) => status,
        Err(e) => {
            return StepOutcome::Failed {
                error: format!("lost track of the step's process: {e}"),
                output: to_value(&output),
                failure: Failure::Internal,
            };
        }
    };
    output.exit_code = status.code();
    output.signal = status.signal();
    if timed_out {
        output.timed_out = true;
        let limit = humantime::format_duration(timeout.unwrap_or_default());
        return StepOutcome::Failed {
            error: format!("timed out after {limit} and was stopped"),
            output: to_value(&output),
            failure: Failure::Timeout,
        };
    }
    if status.success() {
        StepOutcome::Passed {
            output: to_value(&output),
        }
    } else {
        let (error, failure) = match (status.code(), status.signal()) {
            (Some(code), _) => (
                format!("command exited with status {code}"),
                Failure::Exit { code },
            ),
            (None, Some(signal)) => (
                format!("command was killed by signal {signal}"),
                Failure::Signal { signal },
            ),
            (None, None) => ("command failed".to_owned(), Failure::Internal),
        };
        StepOutcome::Failed {
            error,
            output: to_value(&output),
            failure,
        }
    }
}

fn to_value(output: &CommandOutput) -> Option<serde_json::Value> {
    serde_json::to_value(output).ok()
}

async fn join_tail(handle: Option<tokio::task::JoinHandle<(String, u64)>>) -> (String, u64) {
    match handle {
        Some(h) => h.await.unwrap_or_default(),
        None => (String::new(), 0),
    }
}

/// Reads a stream to its end, keeping only its last `keep` bytes.
async fn read_tail(mut stream: impl AsyncRead + Unpin, keep: usize) -> (String, u64) {
    let mut tail: VecDeque<u8> = VecDeque::with_capacity(keep.min(64 * 1024));
    let mut dropped = 0u64;
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                tail.extend(&buf[..n]);
                if tail.len() > keep {
                    let excess = tail.len() - keep;
                    tail.drain(..excess);
                    dropped += excess as u64;
                }
            }
        }
    }
    let bytes: Vec<u8> = tail.into_iter().collect();
    (String::from_utf8_lossy(&bytes).into_owned(), dropped)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_step_that_cannot_start_names_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let gone = std::io::Error::from(std::io::ErrorKind::NotFound);
        let trampoline = std::process::Command::new("/nonexistent/rein-confine");
        let why = spawn_error(&trampoline, dir.path(), &gone);
        assert!(why.contains("/nonexistent/rein-confine is gone"), "{why}");
        assert!(why.contains("restart rein"), "{why}");
        let sh = std::process::Command::new("sh");
        let why = spawn_error(&sh, &dir.path().join("missing"), &gone);
        assert!(why.contains("the workspace is gone"), "{why}");
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let why = spawn_error(&sh, dir.path(), &denied);
        assert!(
            why.starts_with("cannot start `sh -c` in workspace"),
            "{why}"
        );
        assert!(!why.contains("gone"), "{why}");
    }
}
