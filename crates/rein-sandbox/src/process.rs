//! Step processes that cannot outlive rein: the parent-death signal set in
//! the child before it becomes the command, and a record of each process group
//! precise enough to find — and stop — what a killed rein left behind.
//!
//! Where the signal is set decides how a command is started. The trampoline
//! asks for it itself (`--parent`, see [`die_with`]) and then confines itself
//! with Landlock, or (`--unconfined`, for `--sandbox none`) does not, or
//! (`--exec`) becomes bubblewrap, which must have the signal before it starts
//! (its own `--die-with-parent` comes too late). So rein starts it without a
//! `fork` (`posix_spawn`, which shares rein's memory until the `exec`): a
//! `fork` of a rein holding many tasks copies its page tables, and the forks
//! of one process wait for each other on its memory map, so a thousand steps
//! taken up at once took a thousand times that. Where no trampoline is known
//! (a library caller's sandbox), and for MCP servers, rein forks with
//! [`die_with_parent`].

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Makes the process `command` starts receive SIGKILL when rein dies.
///
/// The signal is set in the child after `fork` and before `exec` (it survives
/// `exec` into `sh`). If rein died between the `fork` and that moment, the
/// child has already been handed to another parent: it checks that its parent
/// is still the process that started it, and exits instead of running the
/// command if not.
///
/// Linux sends the signal when the *thread* that forked the child ends, so
/// commands must be started from threads that live as long as rein: tokio's
/// worker threads (where a task's steps are polled) do.
pub fn die_with_parent(command: &mut tokio::process::Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed. It makes two system calls (prctl,
    // getppid) and allocates nothing: the errors it returns are raw OS errors.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
                .map_err(|e| std::io::Error::from_raw_os_error(e as i32))?;
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(nix::libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Makes the process `command` starts begin in the pinned `workspace`: the
/// directory is opened (and checked) before the fork, and the child enters
/// it by its handle (`fchdir`), so a path swapped meanwhile leads nowhere.
/// If it is not the pinned directory, the start fails (`ESTALE`).
pub fn enter_pinned(command: &mut tokio::process::Command, workspace: &crate::Pinned) {
    crate::pin::in_child(command, workspace.open(), crate::pin::InChild::Enter);
}

/// What [`die_with_parent`] does in the child, for a program rein starts that
/// then becomes the command (the Landlock trampoline): SIGKILL when `parent`
/// dies, and an error if it already has (the process was handed to another
/// parent before it could ask).
pub fn die_with(parent: u32) -> Result<(), String> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| format!("cannot ask to die with rein: {e}"))?;
    if nix::unistd::getppid().as_raw() as u32 != parent {
        return Err("rein stopped before the command could start".into());
    }
    Ok(())
}

/// This boot of the machine: process ids and start times mean something only
/// within it.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// This machine's host name, as runners record it.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Start time of a process in clock ticks since boot (field 22 of
/// `/proc/PID/stat`), to tell a reused pid apart.
pub fn process_start(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// The fields of `/proc/PID/stat` after the command name (state first).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; the fields after it follow the last ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    Some(after.split_whitespace().map(str::to_owned).collect())
}

/// A live process as one look at `/proc` saw it.
#[derive(Debug)]
struct Seen {
    pid: u32,
    /// The fields of its `stat` after the command name (state first).
    stat: Vec<String>,
    environ: Vec<String>,
    args: Vec<String>,
}

impl Seen {
    /// Whether it carries every `(key, value)` of `marks`: in its environment
    /// (`key=value`), or on its command line as a sandbox passes it on
    /// (`--setenv key value` to bubblewrap, `--env key=value` to the
    /// trampoline).
    fn carries(&self, marks: &[(&str, &str)]) -> bool {
        marks.iter().all(|(key, value)| {
            let pair = format!("{key}={value}");
            self.environ.contains(&pair)
                || self.args.contains(&pair)
                || self.args.windows(2).any(|w| w[0] == *key && w[1] == *value)
        })
    }
}

/// The live (not zombie) processes of this machine but this one.
fn scan() -> Vec<Seen> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let split = |bytes: Vec<u8>| -> Vec<String> {
        bytes
            .split(|b| *b == 0)
            .map(|part| String::from_utf8_lossy(part).into_owned())
            .collect()
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let (stat, environ, args) = read_whole(pid)?;
            Some(Seen {
                pid,
                stat,
                environ: split(environ),
                args: split(args),
            })
        })
        .collect()
}

/// Whether a process is one of the kernel's own threads (`PF_KTHREAD` in the
/// flags of its `stat`, the seventh field after the command name).
fn kernel_thread(stat: &[String]) -> bool {
    const PF_KTHREAD: u64 = 0x0020_0000;
    stat.get(6)
        .and_then(|flags| flags.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_KTHREAD != 0)
}

/// A live process's `stat` fields, environment and command line, read whole.
///
/// A process inside an `exec` is read torn: for a moment its new memory has
/// neither an environment nor a command line yet, and a read begun on its old
/// memory ends where that memory went, part way through. Either would hide
/// the marks it carries. So the read is checked against the environment's
/// bounds that `stat` gives (before and after it: an `exec` moves them), and
/// made again, briefly, until it is whole or the process is gone. What cannot
/// be read at all (another user's process) is taken as it is. `None` for a
/// process that is gone or a zombie.
fn read_whole(pid: u32) -> Option<(Vec<String>, Vec<u8>, Vec<u8>)> {
    let read = |file: &str| std::fs::read(format!("/proc/{pid}/{file}"));
    // The environment's bounds (`env_start`, `env_end`: fields 50 and 51 of
    // `stat`, the 48th and 49th after the command name).
    let bounds = |stat: &[String]| -> Option<(u64, u64)> {
        Some((stat.get(47)?.parse().ok()?, stat.get(48)?.parse().ok()?))
    };
    let mut tries = 0;
    loop {
        let stat = stat_fields(pid)?;
        if stat.first().is_none_or(|state| state == "Z") {
            return None;
        }
        // The kernel's own threads have neither, and are not read.
        if kernel_thread(&stat) {
            return Some((stat, Vec::new(), Vec::new()));
        }
        let (environ, args) = (read("environ"), read("cmdline"));
        let Ok(environ) = environ else {
            return Some((stat, Vec::new(), args.unwrap_or_default()));
        };
        let after = stat_fields(pid)?;
        let whole = match (bounds(&stat), bounds(&after)) {
            (Some((start, end)), Some(later)) => {
                // A new memory's bounds are 0 until its `exec` sets them; an
                // empty environment has bounds that meet.
                (start, end) == later && start > 0 && environ.len() as u64 == end - start
            }
            // A kernel without the bounds in `stat`: as read.
            _ => true,
        };
        tries += 1;
        if whole || tries >= 200 {
            return Some((stat, environ, args.unwrap_or_default()));
        }
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

/// Looks at `/proc` shared by concurrent callers, as group commit shares a
/// transaction: a caller gets a look that began after it asked (so it sees
/// every process alive at that moment), and callers that ask while a look is
/// under way share the next one. A thousand interrupted steps taken up at
/// once cost a handful of looks, not a thousand.
struct Looks {
    state: std::sync::Mutex<LookState>,
    done: std::sync::Condvar,
}

struct LookState {
    /// Looks completed so far.
    completed: u64,
    looking: bool,
    latest: Option<std::sync::Arc<Vec<Seen>>>,
}

static LOOKS: Looks = Looks {
    state: std::sync::Mutex::new(LookState {
        completed: 0,
        looking: false,
        latest: None,
    }),
    done: std::sync::Condvar::new(),
};

/// The live processes as a look that began after this call saw them.
fn fresh_look() -> std::sync::Arc<Vec<Seen>> {
    let Ok(mut state) = LOOKS.state.lock() else {
        return std::sync::Arc::new(scan());
    };
    // A look under way began before this call: the one after it is needed.
    let wanted = state.completed + if state.looking { 2 } else { 1 };
    loop {
        if state.completed >= wanted
            && let Some(latest) = &state.latest
        {
            return std::sync::Arc::clone(latest);
        }
        if state.looking {
            state = match LOOKS.done.wait(state) {
                Ok(s) => s,
                Err(_) => return std::sync::Arc::new(scan()),
            };
            continue;
        }
        state.looking = true;
        drop(state);
        let seen = std::sync::Arc::new(scan());
        state = match LOOKS.state.lock() {
            Ok(s) => s,
            Err(_) => return seen,
        };
        state.looking = false;
        state.completed += 1;
        state.latest = Some(seen);
        LOOKS.done.notify_all();
    }
}

/// The live (not zombie) processes of this machine, but this one, that match `keep`.
fn processes_where(keep: impl Fn(&Seen) -> bool) -> Vec<u32> {
    fresh_look()
        .iter()
        .filter(|p| keep(p))
        .map(|p| p.pid)
        .collect()
}

/// Whether process `pid` is a zombie: it died and was not reaped (as under an
/// init that reaps nothing), so its pid still answers signals.
pub fn zombie(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| f.first().is_some_and(|state| state == "Z"))
}

/// What stopping an interrupted attempt's processes found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leftover {
    /// Nothing of it is left.
    Gone,
    /// Some of it was still running, and has been stopped (SIGKILL) for good.
    Stopped { processes: usize },
    /// Some of it was still running and did not go within the wait.
    StillThere { processes: usize },
}

/// Stops whatever is left of one attempt of a step, and waits (up to `wait`)
/// until it is gone. Two ways find it:
///
/// - `recorded`, the attempt's process group as its start recorded it. A
///   process group's id is its leader's pid, and Linux does not hand out a pid
///   while a group still uses it as its id: so if the leader is alive but
///   started at another time, the id was reused after the old group ended and
///   is left alone; if there is no leader, what is still in the group is the
///   old group's. A group recorded on another host, or before this machine
///   last booted, is not this machine's to touch.
/// - `marks`, the variables every process of the attempt is started with
///   (`REIN_TASK_ID`, `REIN_STEP_ID`, `REIN_ATTEMPT`): this finds the attempt
///   also when rein died before its process group was recorded, and what left
///   the group but kept its environment.
pub fn stop_leftover(
    recorded: Option<&rein_protocol::StepProcess>,
    marks: &[(&str, &str)],
    wait: std::time::Duration,
) -> Leftover {
    let group = recorded_group(recorded);
    let find = || processes_where(|p| of_attempt(p, group, marks));
    let first = find();
    if first.is_empty() {
        return Leftover::Gone;
    }
    let until = std::time::Instant::now() + wait;
    let mut left = first.clone();
    loop {
        if let Some(g) = group.and_then(|g| i32::try_from(g).ok()) {
            let _ = killpg(Pid::from_raw(g), Signal::SIGKILL);
        }
        for pid in &left {
            if let Ok(pid) = i32::try_from(*pid) {
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        left = find();
        if left.is_empty() {
            return Leftover::Stopped {
                processes: first.len(),
            };
        }
        if std::time::Instant::now() >= until {
            return Leftover::StillThere {
                processes: left.len(),
            };
        }
    }
}

/// The process group recorded for an attempt, if it is this machine's and
/// still the attempt's (see [`stop_leftover`]).
fn recorded_group(recorded: Option<&rein_protocol::StepProcess>) -> Option<u32> {
    recorded.and_then(|p| {
        let here = p.host == hostname()
            && p.boot_id
                .as_deref()
                .is_none_or(|b| Some(b) == boot_id().as_deref());
        let reused = matches!(
            (p.process_start, process_start(p.pgid)),
            (Some(recorded), Some(now)) if recorded != now
        );
        (here && !reused && p.pgid > 1).then_some(p.pgid)
    })
}

/// Whether `p` belongs to the attempt: in its group, or carrying its marks.
fn of_attempt(p: &Seen, group: Option<u32>, marks: &[(&str, &str)]) -> bool {
    group.is_some_and(|g| p.stat.get(2).and_then(|f| f.parse::<u32>().ok()) == Some(g))
        || (!marks.is_empty() && p.carries(marks))
}

/// One look at this machine's processes for many interrupted attempts at once,
/// as a take-over at start needs: a thousand tasks taken up then ask one look
/// instead of sharing a few dozen that grow with the steps started meanwhile.
///
/// A sweep answers for attempts whose runner had already stopped when it was
/// taken: nothing of such an attempt can start afterwards (its processes only
/// come from the runner and from each other), so an attempt the sweep did not
/// see is gone for good. An attempt it saw is stopped by [`stop_leftover`],
/// which looks again.
#[derive(Clone)]
pub struct Sweep(std::sync::Arc<Vec<Seen>>);

impl Sweep {
    /// Looks now.
    pub fn now() -> Sweep {
        Sweep(fresh_look())
    }

    /// Whether any process of the attempt was alive at the sweep.
    pub fn saw(
        &self,
        recorded: Option<&rein_protocol::StepProcess>,
        marks: &[(&str, &str)],
    ) -> bool {
        let group = recorded_group(recorded);
        self.0.iter().any(|p| of_attempt(p, group, marks))
    }
}

impl std::fmt::Debug for Sweep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sweep({} processes)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    fn spawn_group(script: &str, env: &[(&str, &str)]) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("sh")
            .args(["-c", script])
            .envs(env.iter().copied())
            .process_group(0)
            .spawn()
            .unwrap()
    }

    fn record(child: &std::process::Child) -> rein_protocol::StepProcess {
        rein_protocol::StepProcess {
            host: hostname(),
            boot_id: boot_id(),
            pgid: child.id(),
            process_start: process_start(child.id()),
        }
    }

    /// The live processes of group `pgid`.
    fn members(pgid: u32) -> usize {
        processes_where(|p| of_attempt(p, Some(pgid), &[])).len()
    }

    /// Waits (up to 5 s) until a look finds at least `n` processes `keep`
    /// matches.
    fn until_seen(n: usize, keep: impl Fn(&Seen) -> bool) {
        let begun = std::time::Instant::now();
        while processes_where(&keep).len() < n && begun.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn until_members(pgid: u32, n: usize) {
        until_seen(n, |p| of_attempt(p, Some(pgid), &[]));
    }

    /// Waits until a look finds `n` processes carrying `marks`. Until a new
    /// process has finished its exec, its environment reads as empty (the
    /// kernel sets it up after letting the parent go on), so a look just after
    /// it was spawned may not find it by its marks yet.
    fn until_carried(marks: &[(&str, &str)], n: usize) {
        until_seen(n, |p| p.carries(marks));
    }

    #[test]
    fn concurrent_looks_share_scans_and_each_sees_what_was_alive_when_it_asked() {
        let marks = [("REIN_TEST_LOOK", "shared")];
        let mut child = spawn_group("exec sleep 30", &marks);
        until_carried(&marks, 1);
        let before = LOOKS.state.lock().unwrap().completed;
        let callers: Vec<_> = (0..64)
            .map(|_| std::thread::spawn(move || processes_where(|p| p.carries(&marks)).len()))
            .collect();
        for caller in callers {
            assert_eq!(caller.join().unwrap(), 1, "every caller sees the process");
        }
        let scans = LOOKS.state.lock().unwrap().completed - before;
        assert!(scans < 64, "64 callers at once took {scans} scans");
        child.kill().unwrap();
        child.wait().unwrap();
        // Gone (and reaped): a look that begins now does not see it.
        assert!(processes_where(|p| p.carries(&marks)).is_empty());
    }

    #[test]
    fn a_leftover_group_is_stopped_and_a_reused_id_left_alone() {
        let mut child = spawn_group("sleep 30 & sleep 30 & wait", &[]);
        let recorded = record(&child);
        until_members(recorded.pgid, 3);
        // Recorded with another start time: someone else's group now.
        let reused = rein_protocol::StepProcess {
            process_start: recorded.process_start.map(|s| s + 1),
            ..recorded.clone()
        };
        assert_eq!(
            stop_leftover(Some(&reused), &[], Duration::ZERO),
            Leftover::Gone
        );
        // Another host, or another boot: not touched.
        for elsewhere in [
            rein_protocol::StepProcess {
                host: "elsewhere".into(),
                ..recorded.clone()
            },
            rein_protocol::StepProcess {
                boot_id: Some("another-boot".into()),
                ..recorded.clone()
            },
        ] {
            assert_eq!(
                stop_leftover(Some(&elsewhere), &[], Duration::ZERO),
                Leftover::Gone
            );
        }
        assert_eq!(members(recorded.pgid), 3);
        let stopped = stop_leftover(Some(&recorded), &[], Duration::from_secs(5));
        // The leader is this test's child: a zombie until it is waited for.
        assert_eq!(stopped, Leftover::Stopped { processes: 3 });
        child.wait().unwrap();
        assert_eq!(
            stop_leftover(Some(&recorded), &[], Duration::ZERO),
            Leftover::Gone
        );
    }

    #[test]
    fn a_sweep_answers_for_what_was_alive_when_it_was_taken() {
        let marks = [("REIN_TASK_ID", "task_sweep_test"), ("REIN_ATTEMPT", "1")];
        let before = Sweep::now();
        let mut child = spawn_group("exec sleep 30", &marks);
        let recorded = record(&child);
        until_carried(&marks, 1);
        // Taken before the attempt started: it saw nothing of it.
        assert!(!before.saw(Some(&recorded), &marks));
        let after = Sweep::now();
        assert!(after.saw(Some(&recorded), &marks), "{after:?}");
        assert!(after.saw(None, &marks), "found by its marks alone");
        assert!(!after.saw(None, &[("REIN_TASK_ID", "task_sweep_other")]));
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn an_attempt_is_found_by_its_marks_without_a_record_and_after_leaving_its_group() {
        let marks = [("REIN_TASK_ID", "task_marks_test"), ("REIN_ATTEMPT", "2")];
        // The second sleep leaves the group (a session of its own).
        let mut child = spawn_group(
            "sleep 30 & setsid sleep 31 & wait",
            &[("REIN_TASK_ID", "task_marks_test"), ("REIN_ATTEMPT", "2")],
        );
        let other = spawn_group(
            "exec sleep 30",
            &[("REIN_TASK_ID", "task_marks_test"), ("REIN_ATTEMPT", "1")],
        );
        until_carried(&marks, 3);
        let stopped = stop_leftover(None, &marks, Duration::from_secs(5));
        assert_eq!(stopped, Leftover::Stopped { processes: 3 });
        child.wait().unwrap();
        // Another attempt of the same task is not this one.
        assert!(members(other.id()) >= 1, "still running");
        let mut other = other;
        other.kill().unwrap();
        other.wait().unwrap();
    }

    /// A process of an attempt that is in the middle of an `exec` reads, for
    /// that moment, as having no environment and no command line: a look by
    /// the attempt's marks alone (no process group recorded: rein died
    /// before it could) must still find it. The process here does nothing
    /// but `exec` itself (a shell told to become the same shell, again), so
    /// that many of the looks land inside an `exec`.
    #[test]
    fn a_process_caught_inside_an_exec_is_still_found_by_its_marks() {
        const ROUNDS: usize = 150;
        let again = r#"exec sh -c "$0" "$0""#;
        let mut missed = 0;
        for round in 0..ROUNDS {
            let attempt = format!("{round}");
            let marks = [
                ("REIN_TASK_ID", "task_exec_test"),
                ("REIN_ATTEMPT", attempt.as_str()),
            ];
            let mut child = std::process::Command::new("sh")
                .args(["-c", again, again])
                .envs(marks.iter().copied())
                .spawn()
                .unwrap();
            // Running (exec'ing) for a moment first.
            std::thread::sleep(Duration::from_millis(5));
            match stop_leftover(None, &marks, Duration::from_secs(5)) {
                Leftover::Stopped { .. } => {}
                other => {
                    missed += 1;
                    eprintln!("round {round}: {other:?}");
                    child.kill().unwrap();
                }
            }
            child.wait().unwrap();
        }
        assert_eq!(
            missed, 0,
            "{missed} of {ROUNDS} looks missed a process inside an exec"
        );
    }
}
