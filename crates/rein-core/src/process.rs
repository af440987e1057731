//! Who is running a task, and whether that process is still alive.

use rein_protocol::RunnerInfo;

/// This process, as recorded on the tasks it runs.
pub fn current_runner() -> RunnerInfo {
    let pid = std::process::id();
    RunnerInfo {
        host: hostname(),
        pid,
        process_start: process_start(pid),
    }
}

use rein_sandbox::process::{hostname, process_start};

/// One look at this machine's processes for a take-over of many tasks (see
/// [`crate::RunOptions::sweep`]).
pub use rein_sandbox::process::Sweep;

/// Whether the process that recorded `runner` is still running.
///
/// A runner on another host is assumed alive: this host cannot tell. A pid that is
/// alive but started at another time is a reused pid, so the runner is gone.
pub fn runner_alive(runner: &RunnerInfo) -> bool {
    if runner.host != hostname() {
        return true;
    }
    let Ok(pid) = i32::try_from(runner.pid) else {
        return false;
    };
    let exists = match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(nix::errno::Errno::EPERM) => true,
        Err(_) => false,
    };
    // A runner killed under an init that does not reap keeps its pid as a
    // zombie: it runs nothing.
    if !exists || rein_sandbox::process::zombie(runner.pid) {
        return false;
    }
    match (runner.process_start, process_start(runner.pid)) {
        (Some(recorded), Some(now)) => recorded == now,
        _ => true,
    }
}

/// Whether `runner` is this very process.
pub fn is_current(runner: &RunnerInfo) -> bool {
    *runner == current_runner()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_current() {
        let me = current_runner();
        assert!(me.process_start.is_some());
        assert!(runner_alive(&me));
        assert!(is_current(&me));
    }

    #[test]
    fn a_dead_or_reused_pid_is_not_alive() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let dead = RunnerInfo {
            host: hostname(),
            pid,
            process_start: Some(1),
        };
        assert!(!runner_alive(&dead));
        let reused = RunnerInfo {
            process_start: Some(0),
            ..current_runner()
        };
        assert!(!runner_alive(&reused));
    }

    #[test]
    fn a_runner_left_a_zombie_is_not_alive() {
        // Exited and not reaped yet: its pid still answers signals.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !rein_sandbox::process::zombie(pid) {
            assert!(std::time::Instant::now() < until, "`true` never exited");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let zombie = RunnerInfo {
            host: hostname(),
            pid,
            process_start: process_start(pid),
        };
        assert!(!runner_alive(&zombie));
        child.wait().unwrap();
    }
}
