//! Sandboxed commands under bubblewrap (`bwrap`): the workspace writable, the
//! system's programs and libraries read-only, everything else (home directories,
//! rein's own data, other workspaces, the host's /tmp) absent; fresh user, PID,
//! IPC, UTS and network namespaces (the network shared only when allowed); a clean
//! environment; limits on memory. When the command ends, its PID namespace ends with
//! it, and with it anything it left running in the background.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// System directories a command may read (those that exist on this host).
const READ_ONLY: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];

/// Files under the read-only directories that stay hidden (masked with /dev/null).
const MASKED: &[&str] = &["/etc/shadow", "/etc/gshadow", "/etc/sudoers"];

/// How long the capability probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a sandboxed command may do beyond its workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Confinement {
    /// Whether it may open network connections (it shares the host's network).
    pub network: bool,
    /// Most bytes of address space each of its processes may map.
    pub memory_bytes: Option<u64>,
    /// More directories it may read (read-only), e.g. a toolchain outside /usr.
    pub read_only: Vec<PathBuf>,
}

/// Which sandbox confines commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxKind {
    Bubblewrap,
    /// Nothing: chosen explicitly by the operator (`--sandbox none`).
    None,
}

impl SandboxKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxKind::Bubblewrap => "bubblewrap",
            SandboxKind::None => "none",
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
    bwrap: PathBuf,
    prlimit: Option<PathBuf>,
    /// What the probe found, for health and audit.
    pub detail: String,
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
            "bubblewrap at {}: user, PID, IPC, UTS and network namespaces; memory limits {}",
            bwrap.display(),
            if prlimit.is_some() {
                "by prlimit"
            } else {
                "unavailable (no prlimit)"
            }
        );
        Ok(Sandbox {
            bwrap,
            prlimit,
            detail,
        })
    }

    /// Whether memory limits can be enforced.
    pub fn limits_memory(&self) -> bool {
        self.prlimit.is_some()
    }

    /// `sh -c script` confined to `workspace` (its working directory), with only
    /// `env` in its environment (plus PATH, HOME = the workspace, and LANG). The
    /// caller adds stdio and process-group settings.
    pub fn command(
        &self,
        workspace: &Path,
        script: &str,
        env: &[(String, String)],
        confinement: &Confinement,
    ) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.bwrap);
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
        cmd.arg("--bind").arg(workspace).arg(workspace);
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
        if let (Some(prlimit), Some(bytes)) = (&self.prlimit, confinement.memory_bytes) {
            cmd.arg(prlimit).arg(format!("--as={bytes}")).arg("--");
        }
        cmd.args(["sh", "-c", script]);
        cmd.env_clear();
        cmd.current_dir(workspace);
        cmd
    }
}
