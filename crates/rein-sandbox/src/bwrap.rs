//! Sandboxed commands under bubblewrap (`bwrap`): the workspace writable, the
//! system's programs and libraries read-only, everything else (home directories,
//! rein's own data, other workspaces, the host's /tmp) absent; fresh user, PID,
//! IPC, UTS and network namespaces (the network shared only when allowed); a clean
//! environment; limits on memory. When the command ends, its PID namespace ends with
//! it, and with it anything it left running in the background.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

pub use crate::confinement::Confinement;
use crate::confinement::{MASKED, READ_ONLY};
use crate::pin::{InChild, Pinned};

/// What a health report adds when rein runs as root.
fn as_root() -> &'static str {
    if nix::unistd::geteuid().is_root() {
        "; rein runs as root: steps run as the owner of their workspace, and process limits bind only where that is not root"
    } else {
        ""
    }
}

/// How long the capability probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The hidden directories that a directory mounted into a bubblewrap sandbox
/// would show: the ones an empty tmpfs covers.
fn covered<'c>(workspace: &Path, confinement: &'c Confinement) -> Vec<&'c PathBuf> {
    let mounted: Vec<&Path> = read_only_mounts(confinement).chain([workspace]).collect();
    confinement
        .hidden
        .iter()
        .filter(|h| mounted.iter().any(|m| h.starts_with(m)))
        .collect()
}

/// The directories a command may read: the system's and the step's own.
fn read_only_mounts(confinement: &Confinement) -> impl Iterator<Item = &Path> {
    READ_ONLY
        .iter()
        .map(Path::new)
        .chain(confinement.read_only.iter().map(PathBuf::as_path))
}

/// What a sandboxed command could reach, as recorded with its run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Reach {
    /// `bubblewrap`, `landlock` or `none`.
    pub sandbox: String,
    /// Where it could write.
    pub writable: Vec<String>,
    /// Where it could read (beside what it could write).
    pub readable: Vec<String>,
    /// Directories kept out of its reach although a mounted one holds them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<String>,
    pub network: bool,
    /// What the record cannot promise, when there is something.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Reach {
    /// What a command run with rein's own permissions can reach: what rein can.
    pub fn unsandboxed() -> Reach {
        Reach {
            sandbox: SandboxKind::None.as_str().to_owned(),
            writable: vec!["/".into()],
            readable: vec!["/".into()],
            hidden: Vec::new(),
            network: true,
            note: Some("unsandboxed: the command had rein's own permissions".into()),
        }
    }
}

/// Which sandbox confines commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxKind {
    Bubblewrap,
    /// Landlock rules a trampoline applies to itself (where bubblewrap cannot run).
    Landlock,
    /// Nothing: chosen explicitly by the operator (`--sandbox none`).
    None,
}

impl SandboxKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxKind::Bubblewrap => "bubblewrap",
            SandboxKind::Landlock => "landlock",
            SandboxKind::None => "none",
        }
    }
}

/// The program that applies Landlock to itself and becomes the command: the
/// `rein-confine` binary, or `rein __confine` (`args` come first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trampoline {
    pub program: PathBuf,
    pub args: Vec<std::ffi::OsString>,
}

impl Trampoline {
    /// The name of the small trampoline built beside `rein`.
    pub const SMALL: &str = "rein-confine";

    /// The trampoline for the `rein` at `rein`: the small `rein-confine`
    /// beside it when that is of this very build (it answers `--build` with
    /// [`crate::landlock::BUILD`]), which starts in half the time of the large
    /// `rein`; else `rein` itself with `args` (`__confine`).
    pub async fn beside(rein: PathBuf, args: Vec<std::ffi::OsString>) -> Trampoline {
        let small = rein.with_file_name(Self::SMALL);
        let answer = tokio::process::Command::new(&small)
            .arg("--build")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .await;
        match answer {
            Ok(out)
                if out.status.success()
                    && String::from_utf8_lossy(&out.stdout).trim() == crate::landlock::BUILD =>
            {
                Trampoline {
                    program: small,
                    args: Vec::new(),
                }
            }
            _ => Trampoline {
                program: rein,
                args,
            },
        }
    }
}

/// Why no sandbox can run here, with what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no sandbox can run here: {reason}; {remedy}")]
pub struct Unavailable {
    pub reason: String,
    pub remedy: String,
}

/// The sandbox in force, found by a real probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    how: How,
    /// What the probe found, for health and audit.
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum How {
    Bubblewrap {
        bwrap: PathBuf,
        prlimit: Option<PathBuf>,
        /// What starts bwrap without a fork of rein (`--exec`), when one
        /// passed a trial; else rein forks to start it.
        starter: Option<Trampoline>,
    },
    Landlock(Trampoline),
}

/// The first executable called `name` on PATH (or the default system path).
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

impl Sandbox {
    /// Finds bubblewrap and checks it can really create its namespaces here.
    pub async fn probe() -> Result<Sandbox, Unavailable> {
        let remedy = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap), or run with --sandbox none to run steps unsandboxed".to_owned();
        let Some(bwrap) = find_program("bwrap") else {
            return Err(Unavailable {
                reason: "bubblewrap (`bwrap`) is not installed".into(),
                remedy,
            });
        };
        let mut check = tokio::process::Command::new(&bwrap);
        check
            .args(["--unshare-all", "--die-with-parent", "--ro-bind", "/", "/"])
            .args(["--proc", "/proc", "--dev", "/dev", "--", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let ran = tokio::time::timeout(PROBE_TIMEOUT, check.output()).await;
        let output = match ran {
            Ok(Ok(output)) => output,
            Ok(Err(e)) => {
                return Err(Unavailable {
                    reason: format!("{} cannot be started: {e}", bwrap.display()),
                    remedy,
                });
            }
            Err(_) => {
                return Err(Unavailable {
                    reason: format!("{} did not finish a trial run", bwrap.display()),
                    remedy,
                });
            }
        };
        if !output.status.success() {
            let said = String::from_utf8_lossy(&output.stderr).trim().to_owned();
            return Err(Unavailable {
                reason: format!(
                    "{} cannot create namespaces here ({said})",
                    bwrap.display()
                ),
                remedy: "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1) or make bwrap setuid, or run with --sandbox none".into(),
            });
        }
        let prlimit = find_program("prlimit");
        let detail = format!(
            "bubblewrap at {}: user, PID, IPC, UTS and network namespaces; memory and process limits {}{}",
            bwrap.display(),
            if prlimit.is_some() {
                "by prlimit"
            } else {
                "unavailable (no prlimit)"
            },
            as_root()
        );
        Ok(Sandbox {
            how: How::Bubblewrap {
                bwrap,
                prlimit,
                starter: None,
            },
            detail,
        })
    }

    /// Checks that `trampoline` can confine a command with Landlock here, by
    /// running `true` through it in a scratch workspace.
    pub async fn probe_landlock(trampoline: Trampoline) -> Result<Sandbox, Unavailable> {
        let remedy = "use a kernel with Landlock enabled (Linux 5.13 or later, `lsm=landlock`), or install bubblewrap, or run with --sandbox none".to_owned();
        let sandbox = Sandbox {
            how: How::Landlock(trampoline.clone()),
            detail: format!(
                "Landlock through {}: the workspace read-write, system directories read-only, nothing else; no IPv4 or IPv6 sockets unless allowed (TCP by Landlock, the rest by seccomp); memory and process limits by setrlimit; no PID namespace{}",
                trampoline.program.display(),
                as_root()
            ),
        };
        sandbox
            .trial("landlock")
            .await
            .map(|()| sandbox)
            .map_err(|reason| Unavailable { reason, remedy })
    }

    /// Bubblewrap started through `trampoline` (`--exec`), which sets the
    /// parent-death signal itself, instead of by a fork of rein: a fork
    /// copies the page tables of a rein holding many tasks, and the forks of
    /// one process wait for each other. Kept only if a trial command runs
    /// that way; else bwrap is forked as before, and the detail says why.
    /// Any other sandbox is returned as it is.
    pub async fn started_by(self, trampoline: Trampoline) -> Sandbox {
        let How::Bubblewrap {
            bwrap,
            prlimit,
            starter: None,
        } = &self.how
        else {
            return self;
        };
        let program = trampoline.program.display().to_string();
        let through = Sandbox {
            how: How::Bubblewrap {
                bwrap: bwrap.clone(),
                prlimit: prlimit.clone(),
                starter: Some(trampoline),
            },
            detail: format!("{}; started through {program}", self.detail),
        };
        match through.trial("bubblewrap").await {
            Ok(()) => through,
            Err(why) => Sandbox {
                detail: format!(
                    "{}; started by a fork of rein ({program} failed a trial: {why})",
                    self.detail
                ),
                ..self
            },
        }
    }

    /// Bubblewrap if it runs here, started through `trampoline` if one is
    /// given and passes its trial (see [`Sandbox::started_by`]).
    pub async fn probe_started_by(trampoline: Option<Trampoline>) -> Result<Sandbox, Unavailable> {
        let sandbox = Sandbox::probe().await?;
        Ok(match trampoline {
            Some(t) => sandbox.started_by(t).await,
            None => sandbox,
        })
    }

    /// Runs `true` as a step would, in a scratch workspace; why not, if it fails.
    async fn trial(&self, name: &str) -> Result<(), String> {
        let scratch = std::env::temp_dir().join(format!(
            "rein-{name}-probe-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        ));
        std::fs::create_dir_all(&scratch)
            .map_err(|e| format!("cannot create {}: {e}", scratch.display()))?;
        let pinned = match Pinned::pin_resolved(&scratch) {
            Ok(pinned) => pinned,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&scratch);
                return Err(e);
            }
        };
        let mut check = self.command(&pinned, "true", &[], &Confinement::default());
        check
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let ran = tokio::time::timeout(PROBE_TIMEOUT, check.output()).await;
        let _ = std::fs::remove_dir_all(&scratch);
        match ran {
            Ok(Ok(out)) if out.status.success() => Ok(()),
            Ok(Ok(out)) => Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
            Ok(Err(e)) => Err(format!(
                "{} cannot be started: {e}",
                check.as_std().get_program().to_string_lossy()
            )),
            Err(_) => Err(format!("the {name} trial did not finish")),
        }
    }

    /// Bubblewrap if it runs here (see [`Sandbox::probe_started_by`]), else
    /// Landlock through `trampoline` if given.
    pub async fn probe_any(trampoline: Option<Trampoline>) -> Result<Sandbox, Unavailable> {
        let bwrap = match Sandbox::probe_started_by(trampoline.clone()).await {
            Ok(sandbox) => return Ok(sandbox),
            Err(why) => why,
        };
        let Some(trampoline) = trampoline else {
            return Err(bwrap);
        };
        Sandbox::probe_landlock(trampoline)
            .await
            .map_err(|landlock| Unavailable {
                reason: format!("{}; and Landlock: {}", bwrap.reason, landlock.reason),
                remedy: bwrap.remedy,
            })
    }

    /// Whether its commands start under a supervisor (the trampoline, see
    /// [`crate::supervise`]): Landlock's always, bubblewrap's when started
    /// through the trampoline.
    pub fn supervised(&self) -> bool {
        match &self.how {
            How::Bubblewrap { starter, .. } => starter.is_some(),
            How::Landlock(_) => true,
        }
    }

    /// Which sandbox this is.
    pub fn kind(&self) -> SandboxKind {
        match self.how {
            How::Bubblewrap { .. } => SandboxKind::Bubblewrap,
            How::Landlock(_) => SandboxKind::Landlock,
        }
    }

    /// What a command [`Sandbox::command`] makes for `workspace` and
    /// `confinement` can reach.
    pub fn reach(&self, workspace: &Path, confinement: &Confinement) -> Reach {
        let readable = read_only_mounts(confinement)
            .filter(|p| p.exists())
            .map(|p| p.display().to_string())
            .collect();
        let (hidden, note) = match self.how {
            How::Bubblewrap { .. } => (
                covered(workspace, confinement)
                    .into_iter()
                    .map(|p| p.display().to_string())
                    .collect(),
                None,
            ),
            How::Landlock(_) => (
                Vec::new(),
                Some("Landlock: the rest of the file system is refused, not absent; no PID namespace".into()),
            ),
        };
        Reach {
            sandbox: self.kind().as_str().to_owned(),
            writable: vec![workspace.display().to_string()],
            readable,
            hidden,
            network: confinement.network,
            note,
        }
    }

    /// `sh -c script` confined to `workspace` (its working directory), with only
    /// `env` in its environment (plus PATH, HOME = the workspace, and LANG). The
    /// caller adds stdio and process-group settings.
    ///
    /// The workspace is the pinned directory, not whatever its path names
    /// when the command starts: the process that starts the command opens
    /// the path with no symlink followed and refuses to go on unless it is
    /// the directory pinned (see [`crate::pin`]); the sandbox is then made
    /// from that open directory.
    pub fn command(
        &self,
        workspace: &Pinned,
        script: &str,
        env: &[(String, String)],
        confinement: &Confinement,
    ) -> tokio::process::Command {
        let (bwrap, prlimit, starter) = match &self.how {
            How::Bubblewrap {
                bwrap,
                prlimit,
                starter,
            } => (bwrap, prlimit, starter),
            How::Landlock(trampoline) => {
                let mut cmd = tokio::process::Command::new(&trampoline.program);
                cmd.args(&trampoline.args)
                    .args(crate::landlock::trampoline_args(
                        workspace,
                        script,
                        env,
                        confinement,
                    ))
                    .env_clear()
                    // The trampoline enters the workspace it opened itself.
                    .current_dir("/");
                // The trampoline becomes `run_as` itself (`--run-as`), so it
                // starts without a fork of rein.
                return cmd;
            }
        };
        // Its own --die-with-parent comes too late (once bwrap runs): the
        // signal is set before it starts, by the trampoline if there is one
        // (which becomes `run_as` itself, then bwrap), else in a fork of rein.
        // Whichever starts bwrap hands it the workspace open (`--bind-fd`).
        let mut cmd = match starter {
            Some(trampoline) => {
                let args = bwrap_args(
                    crate::pin::PINNED_FD,
                    &workspace.path,
                    script,
                    env,
                    confinement,
                    prlimit.as_deref(),
                );
                let mut cmd = tokio::process::Command::new(&trampoline.program);
                cmd.args(&trampoline.args).args(crate::landlock::exec_args(
                    bwrap,
                    args,
                    confinement,
                    Some(workspace),
                ));
                cmd
            }
            None => {
                let mut cmd = tokio::process::Command::new(bwrap);
                crate::process::die_with_parent(&mut cmd);
                let opened = workspace.open();
                let fd = opened.as_ref().map_or(-1, AsRawFd::as_raw_fd);
                cmd.args(bwrap_args(
                    fd,
                    &workspace.path,
                    script,
                    env,
                    confinement,
                    prlimit.as_deref(),
                ));
                crate::pin::in_child(&mut cmd, opened, InChild::KeepOpen);
                if let Some((uid, gid)) = confinement.run_as {
                    cmd.uid(uid).gid(gid);
                }
                cmd
            }
        };
        cmd.env_clear();
        cmd.current_dir("/");
        cmd
    }
}

/// bwrap's arguments for running `sh -c script` confined to the directory
/// open as descriptor `fd`, mounted at `workspace` (see [`Sandbox::command`]).
fn bwrap_args(
    fd: i32,
    workspace: &Path,
    script: &str,
    env: &[(String, String)],
    confinement: &Confinement,
    prlimit: Option<&Path>,
) -> Vec<std::ffi::OsString> {
    let mut cmd = Args::default();
    cmd.args(["--die-with-parent", "--new-session", "--unshare-all"]);
    if confinement.network {
        cmd.arg("--share-net");
    }
    for dir in READ_ONLY.iter().map(Path::new) {
        if dir.exists() {
            cmd.arg("--ro-bind").arg(dir).arg(dir);
        }
    }
    for file in MASKED {
        if Path::new(file).exists() {
            cmd.args(["--ro-bind", "/dev/null", file]);
        }
    }
    // Mounts stack in order: what goes inside the fresh /tmp comes after it.
    cmd.args(["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]);
    for dir in &confinement.read_only {
        if dir.exists() {
            cmd.arg("--ro-bind").arg(dir).arg(dir);
        }
    }
    // What a mounted directory shows of a hidden one is covered, before
    // the workspace is bound (so a workspace inside it is still there).
    let covered = covered(workspace, confinement);
    for dir in &covered {
        cmd.arg("--tmpfs").arg(dir);
    }
    cmd.arg("--bind-fd").arg(fd.to_string()).arg(workspace);
    // A hidden directory inside the workspace (the checks refuse such a
    // workspace; this is the second line) is covered once more.
    for dir in covered.iter().filter(|h| h.starts_with(workspace)) {
        cmd.arg("--tmpfs").arg(dir);
    }
    cmd.arg("--chdir").arg(workspace);
    cmd.arg("--clearenv");
    let path = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";
    cmd.args(["--setenv", "PATH", path]);
    cmd.arg("--setenv").arg("HOME").arg(workspace);
    cmd.args(["--setenv", "LANG", "C.UTF-8"]);
    for (key, value) in env {
        cmd.arg("--setenv").arg(key).arg(value);
    }
    cmd.arg("--");
    if let Some(prlimit) = prlimit
        && (confinement.memory_bytes.is_some() || confinement.processes.is_some())
    {
        cmd.arg(prlimit);
        if let Some(bytes) = confinement.memory_bytes {
            cmd.arg(format!("--as={bytes}"));
        }
        if let Some(n) = confinement.processes {
            cmd.arg(format!("--nproc={n}"));
        }
        cmd.arg("--");
    }
    cmd.args(["sh", "-c", script]);
    cmd.0
}

/// Arguments gathered as [`tokio::process::Command`] takes them.
#[derive(Default)]
struct Args(Vec<std::ffi::OsString>);

impl Args {
    fn arg(&mut self, arg: impl AsRef<std::ffi::OsStr>) -> &mut Args {
        self.0.push(arg.as_ref().to_owned());
        self
    }

    fn args(&mut self, args: impl IntoIterator<Item = impl AsRef<std::ffi::OsStr>>) -> &mut Args {
        for arg in args {
            self.arg(arg);
        }
        self
    }
}
