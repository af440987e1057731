//! The step's supervisor: the trampoline stays as the parent of the step's
//! command and outlives nothing it started.
//!
//! Before it becomes the command, the trampoline forks. The child goes on to
//! be the command (confined, as the user, dying with the supervisor); the
//! parent — the supervisor — is a subreaper (`PR_SET_CHILD_SUBREAPER`), so
//! every process of the step whose parent dies is handed to it, not to init:
//! a compound command's `sleep`, a daemon that called `setsid`, bubblewrap's
//! own processes. Whatever ends the step, the supervisor kills its whole tree
//! (every descendant, found through `/proc/PID/task/TID/children`, killed and
//! reaped until none is left), then ends as the command did (its exit
//! status, or the same signal). It ends the tree when:
//!
//! - the command ends: what it left running in the background goes too;
//! - rein dies, whatever kills it: the parent-death signal ([`REIN_GONE`])
//!   and, with a heartbeat, the end of the heartbeat pipe;
//! - rein stops renewing (`--heartbeat MS`): rein writes to the supervisor's
//!   stdin while it runs the step; when nothing comes for that long (a node
//!   frozen past its lease, a stopped rein), the tree is killed before
//!   another node can take the step over;
//! - rein stops the step (SIGTERM on a timeout or a cancel): the command
//!   gets the same SIGTERM (it is in the supervisor's process group), and
//!   [`GRACE`] later whatever is left is killed.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid};

/// The signal the kernel sends the supervisor when rein dies.
pub const REIN_GONE: Signal = Signal::SIGUSR2;

/// How long a command stopped with SIGTERM has before the supervisor kills
/// what is left (rein waits two seconds, then kills the group).
pub const GRACE: Duration = Duration::from_millis(1500);

/// Signals the supervisor takes through its signalfd instead of dying of.
fn watched() -> SigSet {
    let mut set = SigSet::empty();
    for signal in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        REIN_GONE,
    ] {
        set.add(signal);
    }
    set
}

/// Which side of the fork [`start`] returned in.
#[derive(Debug)]
pub enum Role {
    /// The child: go on to become the command, dying with `supervisor`.
    Command { supervisor: u32 },
    /// The supervisor, once the step is over and its tree gone: the exit
    /// status to end with (a signal is raised on the supervisor itself
    /// before this returns).
    Done(i32),
}

/// Why the supervisor ended the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The command ended, as this status says.
    Exited(WaitStatus),
    /// rein died.
    ReinGone,
    /// Nothing came from rein for the heartbeat's length.
    Silent,
    /// rein stopped the step and the grace ran out.
    Stopped,
}

/// Makes this process the supervisor of a command and forks it. `rein` is
/// the process that started the trampoline (its death ends the step); with
/// `heartbeat`, rein writes to stdin while it runs the step, and the command
/// gets `/dev/null` as its stdin. Returns in the child as [`Role::Command`];
/// in the supervisor only when the step is over.
pub fn start(rein: Option<u32>, heartbeat: Option<Duration>) -> Result<Role, String> {
    nix::sys::prctl::set_child_subreaper(true).map_err(|e| format!("subreaper: {e}"))?;
    let watched = watched();
    let mut before = SigSet::empty();
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&watched), Some(&mut before))
        .map_err(|e| format!("sigprocmask: {e}"))?;
    if let Some(rein) = rein {
        nix::sys::prctl::set_pdeathsig(REIN_GONE)
            .map_err(|e| format!("cannot ask to hear of rein's end: {e}"))?;
        if nix::unistd::getppid().as_raw() as u32 != rein {
            return Err("rein stopped before the command could start".into());
        }
    }
    let signals = SignalFd::with_flags(&watched, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(|e| format!("signalfd: {e}"))?;
    let supervisor = nix::unistd::getpid();
    // SAFETY: the trampoline is single-threaded here (it has started no
    // thread), so the child may do anything the parent could.
    #[allow(unsafe_code)]
    let forked = unsafe { nix::unistd::fork() }.map_err(|e| format!("fork: {e}"))?;
    match forked {
        ForkResult::Child => {
            drop(signals);
            sigprocmask(SigmaskHow::SIG_SETMASK, Some(&before), None)
                .map_err(|e| format!("sigprocmask: {e}"))?;
            if heartbeat.is_some() {
                let null = std::fs::File::open("/dev/null")
                    .map_err(|e| format!("cannot open /dev/null: {e}"))?;
                nix::unistd::dup2_stdin(null).map_err(|e| format!("dup2: {e}"))?;
            }
            Ok(Role::Command {
                supervisor: supervisor.as_raw() as u32,
            })
        }
        ForkResult::Parent { child } => Ok(Role::Done(supervise(child, &signals, heartbeat))),
    }
}

/// Waits for the step to end (see the module's doc), kills its tree, and
/// returns the status to end with.
fn supervise(child: Pid, signals: &SignalFd, heartbeat: Option<Duration>) -> i32 {
    let stdin = std::io::stdin();
    let mut beat_at = Instant::now();
    let mut kill_at: Option<Instant> = None;
    let mut reading = heartbeat.is_some();
    let end = 'watch: loop {
        let now = Instant::now();
        let deadlines = [heartbeat.map(|h| beat_at + h), kill_at];
        let next = deadlines.iter().flatten().min().copied();
        if let Some(at) = next
            && at <= now
        {
            break if kill_at.is_some_and(|k| k <= now) {
                End::Stopped
            } else {
                End::Silent
            };
        }
        // Rounded up: a poll of 0 ms before a deadline would spin.
        let timeout = next.map_or(PollTimeout::NONE, |at| {
            PollTimeout::try_from(at - now + Duration::from_millis(1)).unwrap_or(PollTimeout::MAX)
        });
        let mut fds = vec![PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
        if reading {
            fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => break End::ReinGone,
        }
        let beat = fds.get(1).and_then(PollFd::revents);
        drop(fds);
        while let Ok(Some(info)) = signals.read_signal() {
            match Signal::try_from(info.ssi_signo as i32) {
                Ok(Signal::SIGCHLD) => {
                    if let Some(status) = reap(Some(child)) {
                        break 'watch End::Exited(status);
                    }
                }
                Ok(signal) if signal == REIN_GONE => break 'watch End::ReinGone,
                Ok(_) => {
                    kill_at.get_or_insert_with(|| Instant::now() + GRACE);
                }
                Err(_) => {}
            }
        }
        if let Some(events) = beat
            && !events.is_empty()
        {
            let mut buf = [0u8; 64];
            match nix::unistd::read(&stdin, &mut buf) {
                // The heartbeat's pipe closed: rein is gone.
                Ok(0) => break End::ReinGone,
                Ok(_) => beat_at = Instant::now(),
                Err(Errno::EAGAIN | Errno::EINTR) => {}
                Err(_) => reading = false,
            }
        }
    };
    kill_tree();
    match end {
        End::Exited(WaitStatus::Exited(_, code)) => code,
        End::Exited(WaitStatus::Signaled(_, signal, _)) => die_of(signal),
        End::Exited(_) | End::ReinGone | End::Silent | End::Stopped => die_of(Signal::SIGKILL),
    }
}

/// Reaps every child that has ended; the `main` child's status, if it was
/// one.
fn reap(main: Option<Pid>) -> Option<WaitStatus> {
    let mut ended = None;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return ended,
            Ok(status) => {
                if main.is_some()
                    && status.pid() == main
                    && matches!(status, WaitStatus::Exited(..) | WaitStatus::Signaled(..))
                {
                    ended = Some(status);
                }
            }
        }
    }
}

/// Every process below `pid`, through the kernel's list of each thread's
/// children.
fn descendants(pid: u32, into: &mut Vec<u32>) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return;
    };
    for task in tasks.flatten() {
        let Ok(children) = std::fs::read_to_string(task.path().join("children")) else {
            continue;
        };
        for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
            if !into.contains(&child) {
                into.push(child);
                descendants(child, into);
            }
        }
    }
}

/// Kills every descendant of this process and reaps them, until none is
/// left (a process that forks meanwhile leaves an orphan, handed to this
/// subreaper and killed in the next round). Waits on the kernel, not a
/// clock: each round blocks until one of the killed children is reaped.
pub fn kill_tree() {
    let me = std::process::id();
    for _ in 0..100_000 {
        let mut found = Vec::new();
        descendants(me, &mut found);
        for pid in &found {
            if let Ok(pid) = i32::try_from(*pid) {
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        match waitpid(None, None) {
            // One reaped: the rest that have died too, then look again.
            Ok(_) => {
                reap(None);
            }
            Err(Errno::EINTR) => {}
            // No child left: below this process there is nothing.
            Err(_) => return,
        }
    }
}

/// Ends this process as the command ended: of `signal`, raised on itself
/// with its default action. Returns a status only if that did not end it.
fn die_of(signal: Signal) -> i32 {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, sigaction};
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    // SAFETY: the default action; no handler of this process's is replaced.
    #[allow(unsafe_code)]
    let _ = unsafe { sigaction(signal, &default) };
    let mut only = SigSet::empty();
    only.add(signal);
    let _ = sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&only), None);
    let _ = nix::sys::signal::raise(signal);
    128 + signal as i32
}
