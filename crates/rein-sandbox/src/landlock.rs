//! The fallback sandbox where bubblewrap cannot run: Landlock, applied by a
//! trampoline process to itself just before it becomes `sh -c SCRIPT`.
//!
//! The trampoline is a program that calls [`trampoline`] with its arguments: the
//! small `rein-confine` binary built beside `rein`, or `rein __confine`. It restricts itself
//! (Landlock rules: the system directories readable and executable, the workspace
//! read-write, nothing else; TCP bind and connect denied unless the network is
//! allowed, and a seccomp filter refusing every other IPv4/IPv6 socket and
//! io_uring; `no_new_privs`), sets the memory limit, clears the environment, and
//! executes the script. Landlock has no PID namespace: the step's process group is
//! stopped when it ends, but a process that leaves the group can outlive it.
//!
//! The same trampoline starts every step, so that rein never forks to start
//! one (see [`crate::process`]): unconfined under `--sandbox none`
//! ([`unconfined_args`]), and as bubblewrap's starter ([`exec_args`]: it only
//! becomes the user and asks to die with rein, then becomes bwrap).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use std::os::fd::AsFd;

use landlock::{
    ABI, Access, AccessFs, AccessNet, PathBeneath, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, path_beneath_rules,
};

use crate::confinement::{Confinement, READ_ONLY};
use crate::pin::Pinned;

/// Exit status of a trampoline that could not confine itself.
pub const NOT_CONFINED: i32 = 125;

/// Device files a command may read and write.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// What a trampoline of this very build answers to `--build` (see
/// [`crate::Trampoline::beside`]): a hash of this crate's sources, where the
/// trampoline's whole behaviour is, so a `rein-confine` left from another
/// build is told apart and not used.
pub const BUILD: &str = match std::str::from_utf8(&BUILD_HEX) {
    Ok(text) => text,
    Err(_) => "unknown",
};

/// FNV-1a over this crate's sources and version, as 16 hex digits.
const BUILD_HEX: [u8; 16] = {
    const SOURCES: &[&[u8]] = &[
        include_bytes!("landlock.rs"),
        include_bytes!("process.rs"),
        include_bytes!("bwrap.rs"),
        include_bytes!("pin.rs"),
        include_bytes!("supervise.rs"),
        include_bytes!("lib.rs"),
        env!("CARGO_PKG_VERSION").as_bytes(),
    ];
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < SOURCES.len() {
        let mut j = 0;
        while j < SOURCES[i].len() {
            hash ^= SOURCES[i][j] as u64;
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            j += 1;
        }
        i += 1;
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 16];
    let mut k = 0;
    while k < 16 {
        out[k] = HEX[((hash >> (60 - 4 * k)) & 0xf) as usize];
        k += 1;
    }
    out
};

/// The trampoline's arguments for running `script` confined to `workspace`.
pub fn trampoline_args(
    workspace: &Pinned,
    script: &str,
    env: &[(String, String)],
    confinement: &Confinement,
) -> Vec<OsString> {
    let mut args = head(workspace, false, confinement.heartbeat);
    if confinement.network {
        args.push("--network".into());
    }
    if let Some(bytes) = confinement.memory_bytes {
        args.push("--memory".into());
        args.push(bytes.to_string().into());
    }
    if let Some(n) = confinement.processes {
        args.push("--processes".into());
        args.push(n.to_string().into());
    }
    for dir in &confinement.read_only {
        args.push("--read".into());
        args.push(dir.into());
    }
    run_as_arg(&mut args, confinement.run_as);
    tail(args, script, env)
}

/// The trampoline's arguments for running `script` in `workspace` with
/// nothing confined (`--sandbox none`): it only makes the command die with
/// rein, and keeps rein's environment with `env` added.
pub fn unconfined_args(
    workspace: &Pinned,
    script: &str,
    env: &[(String, String)],
    heartbeat: Option<std::time::Duration>,
) -> Vec<OsString> {
    tail(head(workspace, true, heartbeat), script, env)
}

/// The trampoline's arguments for starting `program` with `args` as they are
/// (bubblewrap, which confines the command itself), as user `run_as` if
/// given: it only makes the program die with rein, so that rein need not
/// fork to set the parent-death signal. The program gets the trampoline's
/// environment and working directory, which rein sets. With `workspace`, the
/// trampoline opens it, checks it is the pinned directory, and hands it on
/// as descriptor [`crate::pin::PINNED_FD`] (for bubblewrap's `--bind-fd`).
pub fn exec_args(
    program: &Path,
    args: impl IntoIterator<Item = OsString>,
    confinement: &Confinement,
    workspace: Option<&Pinned>,
) -> Vec<OsString> {
    let mut all = parent(confinement.heartbeat);
    run_as_arg(&mut all, confinement.run_as);
    if let Some(workspace) = workspace {
        pin_args(&mut all, workspace);
    }
    all.extend(["--exec".into(), "--".into(), program.into()]);
    all.extend(args);
    all
}

/// `--run-as UID:GID`, if the command runs as another user.
fn run_as_arg(args: &mut Vec<OsString>, run_as: Option<(u32, u32)>) {
    if let Some((uid, gid)) = run_as {
        args.push("--run-as".into());
        args.push(format!("{uid}:{gid}").into());
    }
}

/// What every trampoline is told first: the rein building the arguments,
/// which it dies with, and the heartbeat rein keeps up, if any.
fn parent(heartbeat: Option<std::time::Duration>) -> Vec<OsString> {
    let mut args = vec!["--parent".into(), std::process::id().to_string().into()];
    if let Some(every) = heartbeat {
        args.push("--heartbeat".into());
        args.push(every.as_millis().max(1).to_string().into());
    }
    args
}

/// What a trampoline that runs a script is told first: [`parent`], then the
/// workspace.
fn head(
    workspace: &Pinned,
    unconfined: bool,
    heartbeat: Option<std::time::Duration>,
) -> Vec<OsString> {
    let mut args = parent(heartbeat);
    if unconfined {
        args.push("--unconfined".into());
    }
    pin_args(&mut args, workspace);
    args
}

/// `--workspace PATH --pin DEV:INO`: the workspace, and which directory it
/// must be.
fn pin_args(args: &mut Vec<OsString>, workspace: &Pinned) {
    args.push("--workspace".into());
    args.push(workspace.path.clone().into());
    args.push("--pin".into());
    args.push(workspace.arg().into());
}

/// The step's variables and the script, last.
fn tail(mut args: Vec<OsString>, script: &str, env: &[(String, String)]) -> Vec<OsString> {
    for (key, value) in env {
        args.push("--env".into());
        args.push(format!("{key}={value}").into());
    }
    args.push("--".into());
    args.push(script.into());
    args
}

struct Parsed {
    /// The rein that started the trampoline: it dies with it.
    parent: Option<u32>,
    /// rein writes to stdin while it runs the step; silent this long, the
    /// step's tree is killed (`--heartbeat MS`).
    heartbeat: Option<std::time::Duration>,
    pinned: Option<Told>,
    /// Nothing confined: `sh` with rein's environment (and `env`).
    unconfined: bool,
    confinement: Confinement,
    env: Vec<(OsString, OsString)>,
    body: Body,
}

/// What the trampoline becomes.
enum Body {
    /// `sh -c SCRIPT` in the workspace.
    Script { script: OsString },
    /// A program and its arguments, as given (`--exec`).
    Program(Vec<OsString>),
}

/// The argument after `flag`, read as a number; `what` says which when it
/// is not one.
fn number<T: std::str::FromStr>(
    it: &mut std::slice::Iter<'_, OsString>,
    flag: &str,
    what: &str,
) -> Result<T, String> {
    it.next()
        .ok_or_else(|| format!("{flag} needs a value"))?
        .to_str()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("{flag} needs {what}"))
}

fn parse(args: &[OsString]) -> Result<Parsed, String> {
    let mut workspace = None;
    let mut pin = None;
    let mut parent = None;
    let mut heartbeat = None;
    let mut unconfined = false;
    let mut exec = false;
    let mut confinement = Confinement::default();
    let mut env = Vec::new();
    let mut it = args.iter();
    let value = |it: &mut std::slice::Iter<'_, OsString>, flag: &str| {
        it.next()
            .cloned()
            .ok_or_else(|| format!("{flag} needs a value"))
    };
    loop {
        let Some(arg) = it.next() else {
            return Err("missing `-- SCRIPT`".into());
        };
        match arg.to_str() {
            Some("--workspace") => workspace = Some(PathBuf::from(value(&mut it, "--workspace")?)),
            Some("--parent") => parent = Some(number(&mut it, "--parent", "a process id")?),
            Some("--pin") => {
                let v = value(&mut it, "--pin")?;
                pin = Some(
                    v.to_str()
                        .and_then(|v| v.split_once(':'))
                        .and_then(|(d, i)| Some((d.parse().ok()?, i.parse().ok()?)))
                        .ok_or("--pin needs DEVICE:INODE")?,
                );
            }
            Some("--heartbeat") => {
                let ms: u64 = number(&mut it, "--heartbeat", "a number of milliseconds")?;
                if ms == 0 {
                    return Err("--heartbeat needs a number of milliseconds".into());
                }
                heartbeat = Some(std::time::Duration::from_millis(ms));
            }
            Some("--unconfined") => unconfined = true,
            Some("--exec") => exec = true,
            Some("--network") => confinement.network = true,
            Some("--memory") => {
                confinement.memory_bytes = Some(number(&mut it, "--memory", "a number of bytes")?);
            }
            Some("--processes") => {
                confinement.processes = Some(number(&mut it, "--processes", "a number")?);
            }
            Some("--read") => confinement
                .read_only
                .push(PathBuf::from(value(&mut it, "--read")?)),
            Some("--run-as") => {
                let v = value(&mut it, "--run-as")?;
                let ids = v
                    .to_str()
                    .and_then(|v| v.split_once(':'))
                    .and_then(|(u, g)| Some((u.parse().ok()?, g.parse().ok()?)))
                    .ok_or("--run-as needs UID:GID")?;
                confinement.run_as = Some(ids);
            }
            Some("--env") => {
                let v = value(&mut it, "--env")?;
                let bytes = v.as_bytes();
                let eq = bytes
                    .iter()
                    .position(|b| *b == b'=')
                    .ok_or("--env needs KEY=VALUE")?;
                env.push((
                    OsStr::from_bytes(&bytes[..eq]).to_owned(),
                    OsStr::from_bytes(&bytes[eq + 1..]).to_owned(),
                ));
            }
            Some("--") => {
                let (pinned, body) = if exec {
                    let pinned = pinned(workspace, pin)?;
                    let program: Vec<OsString> = it.cloned().collect();
                    if program.is_empty() {
                        return Err("--exec needs `-- PROGRAM [ARGS…]`".into());
                    }
                    // Only who runs it and what it dies with apply to a
                    // program run as given: anything else would confine
                    // nothing.
                    let run_as_only = Confinement {
                        run_as: confinement.run_as,
                        ..Confinement::default()
                    };
                    if unconfined || !env.is_empty() || confinement != run_as_only {
                        return Err(
                            "--exec takes only --parent, --heartbeat, --run-as, --workspace and --pin"
                                .into(),
                        );
                    }
                    (pinned, Body::Program(program))
                } else {
                    let script = value(&mut it, "--")?;
                    if workspace.is_none() {
                        return Err("--workspace is required".into());
                    }
                    (pinned(workspace, pin)?, Body::Script { script })
                };
                return Ok(Parsed {
                    parent,
                    heartbeat,
                    pinned,
                    unconfined,
                    confinement,
                    env,
                    body,
                });
            }
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
}

/// The workspace a trampoline is told, and which directory it must be
/// (device, inode), if told (rein always tells).
type Told = (PathBuf, Option<(u64, u64)>);

/// The workspace and its pin (a pin needs a workspace).
fn pinned(workspace: Option<PathBuf>, pin: Option<(u64, u64)>) -> Result<Option<Told>, String> {
    match (workspace, pin) {
        (Some(w), pin) => Ok(Some((w, pin))),
        (None, None) => Ok(None),
        (None, Some(_)) => Err("--pin needs --workspace".into()),
    }
}

/// Restricts this process as `confinement` says, with the directory open as
/// `workspace` read-write.
pub fn confine_self(
    workspace: &impl AsFd,
    confinement: &Confinement,
) -> Result<RulesetStatus, String> {
    let abi = ABI::V5;
    let fail = |e: landlock::RulesetError| format!("Landlock: {e}");
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .map_err(fail)?;
    if !confinement.network {
        // Handled and never allowed: every TCP bind and connect is denied.
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI::V4))
            .map_err(fail)?;
    }
    let read = AccessFs::from_read(abi);
    let status = ruleset
        .create()
        .map_err(fail)?
        .add_rules(path_beneath_rules(READ_ONLY, read))
        .map_err(fail)?
        .add_rules(path_beneath_rules(["/proc", "/dev"], read))
        .map_err(fail)?
        .add_rules(path_beneath_rules(&confinement.read_only, read))
        .map_err(fail)?
        .add_rules(path_beneath_rules(DEVICES, AccessFs::from_all(abi)))
        .map_err(fail)?
        .add_rule(PathBeneath::new(workspace.as_fd(), AccessFs::from_all(abi)))
        .map_err(fail)?
        .restrict_self()
        .map_err(fail)?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err("Landlock is not enabled in this kernel".into());
    }
    if !confinement.network {
        no_inet_sockets()?;
    }
    if let Some(bytes) = confinement.memory_bytes {
        use nix::sys::resource::{Resource, setrlimit};
        setrlimit(Resource::RLIMIT_AS, bytes, bytes)
            .map_err(|e| format!("cannot set the memory limit: {e}"))?;
    }
    Ok(status.ruleset)
}

/// Landlock rules TCP only: UDP, ICMP and raw sockets are beyond it. A
/// seccomp filter closes the rest: no IPv4 or IPv6 socket of any kind can be
/// made (EACCES), and io_uring, whose operations would slip past the filter,
/// cannot be set up (ENOSYS). Unix sockets stay. Inherited by everything the
/// command starts; Landlock has already set no_new_privs, which it needs.
fn no_inet_sockets() -> Result<(), String> {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    };
    fn fail(e: impl std::fmt::Display) -> String {
        format!("seccomp: {e}")
    }
    let family = |f: i32| {
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, f as u64)
            .and_then(|c| SeccompRule::new(vec![c]))
            .map_err(fail)
    };
    let sockets = vec![family(nix::libc::AF_INET)?, family(nix::libc::AF_INET6)?];
    let arch: seccompiler::TargetArch = std::env::consts::ARCH.try_into().map_err(fail)?;
    let inet: seccompiler::BpfProgram = SeccompFilter::new(
        [(nix::libc::SYS_socket, sockets)].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(nix::libc::EACCES as u32),
        arch,
    )
    .and_then(TryInto::try_into)
    .map_err(fail)?;
    let uring: seccompiler::BpfProgram = SeccompFilter::new(
        [(nix::libc::SYS_io_uring_setup, Vec::new())]
            .into_iter()
            .collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(nix::libc::ENOSYS as u32),
        arch,
    )
    .and_then(TryInto::try_into)
    .map_err(fail)?;
    for program in [inet, uring] {
        seccompiler::apply_filter(&program).map_err(fail)?;
    }
    Ok(())
}

/// Becomes user `uid` with group `gid` and no supplementary groups (what
/// `Command::uid` and `gid` do, which would make rein fork to start the
/// trampoline).
fn become_user(uid: u32, gid: u32) -> Result<(), String> {
    use nix::unistd::{Gid, Uid, setgid, setgroups, setuid};
    setgroups(&[]).map_err(|e| format!("setgroups: {e}"))?;
    setgid(Gid::from_raw(gid)).map_err(|e| format!("setgid: {e}"))?;
    setuid(Uid::from_raw(uid)).map_err(|e| format!("setuid: {e}"))?;
    // A change of user leaves the process undumpable, its /proc files root's,
    // until the next exec: the user namespace of a process limit is made by
    // writing them. Started as the user, it would be dumpable: so it is again.
    nix::sys::prctl::set_dumpable(true).map_err(|e| format!("prctl: {e}"))
}

/// Limits this process and its descendants to `n` processes at once. The count
/// is the user's processes in a user namespace of their own, made here (the same
/// user inside as outside), so it counts this command's processes only.
fn limit_processes(n: u64) -> Result<(), String> {
    use nix::sys::resource::{Resource, setrlimit};
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    if uid.is_root() {
        return Err("it does not bind root; run the step as another user".into());
    }
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER)
        .map_err(|e| format!("no user namespace to count in ({e})"))?;
    let write = |file: &str, text: String| {
        std::fs::write(format!("/proc/self/{file}"), text)
            .map_err(|e| format!("cannot write /proc/self/{file}: {e}"))
    };
    write("setgroups", "deny".into())?;
    write("uid_map", format!("{uid} {uid} 1"))?;
    write("gid_map", format!("{gid} {gid} 1"))?;
    setrlimit(Resource::RLIMIT_NPROC, n, n).map_err(|e| format!("setrlimit: {e}"))
}

/// The trampoline's body: confine this process, then become `sh -c SCRIPT` in
/// the workspace; or (`--exec`) only run as the user and die with rein, then
/// become the program given. Returns only on failure, with the exit status to
/// use.
pub fn trampoline(args: &[OsString]) -> i32 {
    if args.len() == 1 && args[0] == "--build" {
        use std::io::Write;
        return match writeln!(std::io::stdout(), "{BUILD}") {
            Ok(()) => 0,
            Err(_) => 1,
        };
    }
    let parsed = match parse(args) {
        Ok(p) => p,
        Err(e) => {
            report(&format!("rein sandbox: {e}"));
            return 2;
        }
    };
    // The workspace, opened while the trampoline may still traverse every
    // directory on its way, and checked to be the one pinned: from here on
    // the open directory is what is used, not the path.
    let workspace = match &parsed.pinned {
        Some((path, pin)) => match crate::pin::open_expecting(path, *pin) {
            Ok(fd) => Some((path.clone(), fd)),
            Err(e) => {
                report(&format!("rein sandbox: refused: {e}"));
                return NOT_CONFINED;
            }
        },
        None => None,
    };
    // The supervisor stays; its child goes on to be the command. A
    // trampoline whose rein is gone runs nothing.
    let supervisor = match crate::supervise::start(parsed.parent, parsed.heartbeat) {
        Ok(crate::supervise::Role::Done(code)) => return code,
        Ok(crate::supervise::Role::Command { supervisor }) => supervisor,
        Err(e) => {
            report(&format!("rein sandbox: {e}"));
            return NOT_CONFINED;
        }
    };
    // The user to run as: a change of user clears the parent-death signal,
    // so it is asked for after it.
    if let Some((uid, gid)) = parsed.confinement.run_as
        && let Err(e) = become_user(uid, gid)
    {
        report(&format!("rein sandbox: cannot run as {uid}:{gid}: {e}"));
        return NOT_CONFINED;
    }
    if let Err(e) = crate::process::die_with(supervisor) {
        report(&format!("rein sandbox: {e}"));
        return NOT_CONFINED;
    }
    let script = match parsed.body {
        Body::Program(program) => {
            if let Some((_, fd)) = workspace
                && let Err(e) = crate::pin::hand_on(fd)
            {
                report(&format!("rein sandbox: cannot hand on the workspace: {e}"));
                return NOT_CONFINED;
            }
            let err = std::process::Command::new(&program[0])
                .args(&program[1..])
                .exec();
            report(&format!(
                "rein sandbox: cannot run {}: {err}",
                Path::new(&program[0]).display()
            ));
            return 127;
        }
        Body::Script { script } => script,
    };
    let Some((workspace, dir)) = workspace else {
        report("rein sandbox: --workspace is required");
        return 2;
    };
    // The working directory is the directory opened, whatever the path
    // names by now.
    if let Err(e) = nix::unistd::fchdir(&dir) {
        report(&format!(
            "rein sandbox: cannot enter {}: {e}",
            workspace.display()
        ));
        return NOT_CONFINED;
    }
    if parsed.unconfined {
        let err = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .envs(parsed.env)
            .exec();
        report(&format!("rein: cannot run sh: {err}"));
        return 127;
    }
    let tmp = workspace.join(".tmp");
    if let Err(e) = nix::sys::stat::mkdirat(
        &dir,
        ".tmp",
        nix::sys::stat::Mode::from_bits_truncate(0o755),
    )
    .or_else(|e| {
        if e == nix::errno::Errno::EEXIST {
            Ok(())
        } else {
            Err(e)
        }
    }) {
        report(&format!(
            "rein sandbox: cannot create {}: {e}",
            tmp.display()
        ));
        return NOT_CONFINED;
    }
    if let Some(n) = parsed.confinement.processes
        && let Err(e) = limit_processes(n)
    {
        report(&format!(
            "rein sandbox: cannot enforce the process limit of {n}: {e}"
        ));
        return NOT_CONFINED;
    }
    if let Err(e) = confine_self(&dir, &parsed.confinement) {
        report(&format!("rein sandbox: cannot confine the command: {e}"));
        return NOT_CONFINED;
    }
    let path = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";
    let err = std::process::Command::new("sh")
        .arg("-c")
        .arg(&script)
        .env_clear()
        .env("PATH", path)
        .env("HOME", &workspace)
        .env("LANG", "C.UTF-8")
        .env("TMPDIR", &tmp)
        .envs(parsed.env)
        .exec();
    report(&format!("rein sandbox: cannot run sh: {err}"));
    127
}

/// A line on stderr from the trampoline (the step's stderr).
fn report(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn args(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_trampolines_numbers_are_read_and_a_bad_one_is_named() {
        let parsed = parse(&args(&[
            "--workspace",
            "/w",
            "--parent",
            "42",
            "--heartbeat",
            "250",
            "--memory",
            "1048576",
            "--processes",
            "64",
            "--",
            "true",
        ]))
        .unwrap();
        assert_eq!(parsed.parent, Some(42));
        assert_eq!(
            parsed.heartbeat,
            Some(std::time::Duration::from_millis(250))
        );
        assert_eq!(parsed.confinement.memory_bytes, Some(1_048_576));
        assert_eq!(parsed.confinement.processes, Some(64));
        for (flag, value, said) in [
            ("--parent", "me", "--parent needs a process id"),
            ("--memory", "lots", "--memory needs a number of bytes"),
            ("--processes", "-1", "--processes needs a number"),
            (
                "--heartbeat",
                "0",
                "--heartbeat needs a number of milliseconds",
            ),
        ] {
            let refused = parse(&args(&["--workspace", "/w", flag, value, "--", "true"]));
            assert_eq!(refused.err().as_deref(), Some(said), "{flag} {value}");
        }
        let missing = parse(&args(&["--workspace", "/w", "--memory"]));
        assert_eq!(missing.err().as_deref(), Some("--memory needs a value"));
    }
}
