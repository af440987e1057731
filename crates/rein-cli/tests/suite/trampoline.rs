//! The trampoline's own duties, with the real `rein-confine` binary: it dies
//! with the rein that started it (it is started without a fork of rein, so it
//! asks for that itself), refuses to run anything once that rein is gone, and
//! unconfined (`--sandbox none`) runs the script with rein's environment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn confine() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rein-confine"))
}

/// What a run that must exit 0 printed; its stderr if it did not.
fn stdout_of_success(out: &std::process::Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let after = &stat[stat.rfind(')').unwrap() + 1..];
            after.split_whitespace().next() != Some("Z")
        })
        .unwrap_or(false)
}

#[test]
fn unconfined_it_runs_the_script_in_the_workspace_with_reins_environment() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let args = rein_sandbox::landlock::unconfined_args(
        &rein_sandbox::Pinned::pin(&ws).unwrap(),
        "echo \"$FROM_REIN $ADDED\"; pwd",
        &[("ADDED".to_owned(), "added".to_owned())],
        None,
    );
    // The arguments name this process as the one to die with.
    assert_eq!(args[0], "--parent");
    assert_eq!(args[1], std::process::id().to_string().as_str());
    let out = confine()
        .args(&args)
        .env("FROM_REIN", "inherited")
        .output()
        .unwrap();
    assert_eq!(
        stdout_of_success(&out),
        format!("inherited added\n{}\n", ws.display())
    );
}

#[test]
fn unconfined_too_it_runs_only_in_the_directory_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let ws = base.join("ws");
    std::fs::create_dir(&ws).unwrap();
    let pinned = rein_sandbox::Pinned::pin(&ws).unwrap();
    let args = rein_sandbox::landlock::unconfined_args(&pinned, "touch made; pwd", &[], None);
    // Swapped for a symlink to `/`: refused before anything runs.
    std::fs::rename(&ws, base.join("ws.old")).unwrap();
    std::os::unix::fs::symlink("/", &ws).unwrap();
    let out = confine().args(&args).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(rein_sandbox::landlock::NOT_CONFINED),
        "{said}"
    );
    assert!(said.contains("symlink"), "{said}");
    assert!(!Path::new("/made").exists() && !base.join("ws.old/made").exists());
    // Put back, it runs there.
    std::fs::remove_file(&ws).unwrap();
    std::fs::rename(base.join("ws.old"), &ws).unwrap();
    let out = confine().args(&args).output().unwrap();
    assert_eq!(stdout_of_success(&out), format!("{}\n", ws.display()));
    assert!(ws.join("made").exists());
}

#[test]
fn a_trampoline_whose_rein_is_gone_runs_nothing() {
    let ws = tempfile::tempdir().unwrap();
    let marker = ws.path().join("ran");
    // Told to die with a process that is not its parent (as when rein died
    // before the trampoline could ask): it refuses.
    let out = confine()
        .args(["--parent", "1", "--unconfined", "--workspace"])
        .arg(ws.path())
        .args(["--", &format!("touch {}", marker.display())])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(rein_sandbox::landlock::NOT_CONFINED)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("rein stopped before the command could start"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!marker.exists(), "the script ran");
}

#[test]
fn with_exec_it_becomes_the_program_as_given_in_its_environment_and_directory() {
    let ws = tempfile::tempdir().unwrap();
    let ws = ws.path().canonicalize().unwrap();
    let me = std::process::id().to_string();
    let out = confine()
        .args(["--parent", &me, "--exec", "--", "sh", "-c"])
        .arg("echo \"$FROM_REIN|$0|$1\"; pwd")
        .args(["zero", "one  two"])
        .current_dir(&ws)
        .env("FROM_REIN", "inherited")
        .output()
        .unwrap();
    assert_eq!(
        stdout_of_success(&out),
        format!("inherited|zero|one  two\n{}\n", ws.display())
    );
    // A program that is not there is named.
    let said = common::fails(
        confine().args(["--parent", &me, "--exec", "--", "/nonexistent/bwrap"]),
        127,
    );
    assert!(said.contains("cannot run /nonexistent/bwrap"), "{said}");
}

#[test]
fn with_exec_it_refuses_what_it_would_not_do() {
    let ws = tempfile::tempdir().unwrap();
    let marker = ws.path().join("ran");
    let touch = ["touch".to_owned(), marker.display().to_string()];
    // Its rein gone: nothing runs.
    let out = confine()
        .args(["--parent", "1", "--exec", "--"])
        .args(&touch)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(rein_sandbox::landlock::NOT_CONFINED)
    );
    assert!(!marker.exists(), "the program ran");
    // Confinement asked of a program run as given would confine nothing: refused.
    let me = std::process::id().to_string();
    for extra in [
        vec!["--network"],
        vec!["--memory", "1000000"],
        vec!["--unconfined"],
        vec!["--env", "A=b"],
    ] {
        let said = common::fails(
            confine()
                .args(["--parent", &me])
                .args(&extra)
                .args(["--exec", "--"])
                .args(&touch),
            2,
        );
        assert!(
            said.contains(
                "--exec takes only --parent, --heartbeat, --run-as, --workspace and --pin"
            ),
            "{extra:?}: {}",
            said
        );
        assert!(!marker.exists(), "{extra:?}: the program ran");
    }
    common::exits(confine().args(["--parent", &me, "--exec", "--"]), 2);
}

#[test]
fn the_command_dies_with_the_process_that_started_the_trampoline() {
    // Unconfined (a script) and --exec (a program, as bubblewrap is started).
    for how in [
        "--unconfined --workspace {ws} -- '{body}'",
        "--exec -- sh -c '{body}'",
    ] {
        dies_with_its_starter(how);
    }
}

fn dies_with_its_starter(how: &str) {
    let ws = tempfile::tempdir().unwrap();
    let pid_file = ws.path().join("pid");
    // A stand-in for rein: a shell that starts the trampoline and waits.
    let how = how
        .replace("{ws}", &ws.path().display().to_string())
        .replace(
            "{body}",
            &format!("echo $$ > {}; exec sleep 30", pid_file.display()),
        );
    let script = format!(
        "{} --parent $$ {how} & wait",
        env!("CARGO_BIN_EXE_rein-confine"),
    );
    let mut rein = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let command: u32 = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break pid;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "never started");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(alive(command));
    rein.kill().unwrap();
    rein.wait().unwrap();
    let killed = Instant::now();
    while alive(command) {
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "the command outlived the process that started it"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test]
async fn rein_starts_steps_through_the_small_trampoline_of_its_own_build_only() {
    use rein_sandbox::Trampoline;
    let rein = std::path::PathBuf::from(env!("CARGO_BIN_EXE_rein"));
    let args = vec![std::ffi::OsString::from("__confine")];
    // Both answer with this build's id.
    for mut command in [confine(), {
        let mut c = Command::new(&rein);
        c.arg("__confine");
        c
    }] {
        let out = command.arg("--build").output().unwrap();
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            rein_sandbox::landlock::BUILD
        );
    }
    let chosen = Trampoline::beside(rein.clone(), args.clone()).await;
    assert_eq!(chosen.program, rein.with_file_name("rein-confine"));
    assert!(chosen.args.is_empty());

    // A `rein-confine` of another build beside it, or none: `rein __confine`.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("rein");
    std::os::unix::fs::symlink(&rein, &copy).unwrap();
    let alone = Trampoline::beside(copy.clone(), args.clone()).await;
    assert_eq!((alone.program, alone.args), (copy.clone(), args.clone()));
    let stale = dir.path().join("rein-confine");
    std::fs::write(&stale, "#!/bin/sh\necho 0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&stale, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let other = Trampoline::beside(copy.clone(), args.clone()).await;
    assert_eq!((other.program, other.args), (copy, args));
}

/// The live processes that carry `TREE_MARK=token` in their environment.
fn marked(token: &str) -> Vec<u32> {
    let needle = format!("TREE_MARK={token}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| alive(*pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
        })
        .collect()
}

/// A step that leaves everything a step can leave: a compound command's
/// child, a background job, a daemon that left the session; it writes
/// `started` once they all run.
const SPREADING: &str = "setsid sleep 60 & (sleep 60; echo late) & sh -c 'sleep 60' & \
                         sleep 0.2; touch started; sleep 60; echo done >> f";

/// Starts the trampoline (unconfined) from a stand-in for rein, a shell
/// that waits for it, with `extra` arguments; returns the stand-in and the
/// step's token once the step's tree is all there. The trampoline shares
/// the stand-in's stdin (a shell gives a background job `/dev/null`
/// otherwise).
fn spread(ws: &std::path::Path, extra: &str, script: &str) -> (std::process::Child, String) {
    let token = format!("{}-{}", std::process::id(), ws.display()).replace('/', "_");
    let pinned = rein_sandbox::Pinned::pin(&ws.canonicalize().unwrap()).unwrap();
    let shell = format!(
        "exec 3<&0; {} --parent $$ {extra} --unconfined --workspace {} --pin {} --env TREE_MARK={token} -- \"$1\" <&3 & wait",
        env!("CARGO_BIN_EXE_rein-confine"),
        pinned.path.display(),
        pinned.arg(),
    );
    let rein = Command::new("sh")
        .args(["-c", &shell, "rein", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !ws.join("started").exists() {
        assert!(started.elapsed() < Duration::from_secs(10), "never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    (rein, token)
}

/// Waits up to `limit` for every process of the step to be gone; what is
/// left if some is not.
fn gone_within(token: &str, limit: Duration) -> Vec<u32> {
    let since = Instant::now();
    loop {
        let left = marked(token);
        if left.is_empty() || since.elapsed() > limit {
            return left;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The supervisor outlives nothing of the step: killed with `kill -9`, the
/// stand-in for rein takes every process of the step with it — the
/// compound command's child, the background job, the daemon that called
/// `setsid` — within half a second.
#[test]
fn a_killed_rein_takes_the_steps_whole_tree_with_it() {
    let ws = tempfile::tempdir().unwrap();
    let (mut rein, token) = spread(ws.path(), "", SPREADING);
    let before = marked(&token);
    assert!(before.len() >= 6, "the step's tree: {before:?}");
    rein.kill().unwrap();
    rein.wait().unwrap();
    let left = gone_within(&token, Duration::from_millis(500));
    assert!(left.is_empty(), "left after the kill: {left:?}");
}

/// When the command ends, what it left running goes with it, and the
/// supervisor ends as the command did: its exit status, or its signal.
#[test]
fn when_the_command_ends_what_it_left_goes_and_its_status_is_passed_on() {
    use std::os::unix::process::ExitStatusExt;
    let ws = tempfile::tempdir().unwrap();
    let quick = "setsid sleep 60 & sleep 60 & sleep 0.2; touch started; exit 7";
    let (rein, token) = spread(ws.path(), "", quick);
    let out = rein.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "the stand-in waited");
    let left = gone_within(&token, Duration::from_millis(500));
    assert!(left.is_empty(), "left after the command ended: {left:?}");
    // The status, straight from the trampoline.
    let dir = tempfile::tempdir().unwrap();
    let pinned = rein_sandbox::Pinned::pin(&dir.path().canonicalize().unwrap()).unwrap();
    for (script, code, signal) in [("exit 7", Some(7), None), ("kill -TERM $$", None, Some(15))] {
        let status = confine()
            .args(["--unconfined", "--workspace"])
            .arg(&pinned.path)
            .args(["--pin", &pinned.arg(), "--", script])
            .status()
            .unwrap();
        assert_eq!((status.code(), status.signal()), (code, signal), "{script}");
    }
}

/// With a heartbeat, the supervisor kills the step's tree once rein falls
/// silent for that long (a frozen node), and at once when the heartbeat's
/// pipe closes; beating, the step runs on.
#[test]
fn a_silent_rein_has_its_steps_tree_killed() {
    use std::io::Write;
    // Silent: nothing is written on the stand-in's stdin, which the
    // trampoline shares.
    let ws = tempfile::tempdir().unwrap();
    let (mut rein, token) = spread(ws.path(), "--heartbeat 400", SPREADING);
    let silent = Instant::now();
    let left = gone_within(&token, Duration::from_secs(3));
    assert!(
        left.is_empty(),
        "left after the heartbeat stopped: {left:?}"
    );
    assert!(
        silent.elapsed() < Duration::from_millis(1500),
        "{:?}",
        silent.elapsed()
    );
    rein.wait().unwrap();
    // Beating: it runs on past many heartbeats' length.
    let ws = tempfile::tempdir().unwrap();
    let (mut rein, token) = spread(ws.path(), "--heartbeat 400", SPREADING);
    let mut beat = rein.stdin.take().unwrap();
    for _ in 0..15 {
        beat.write_all(b".").unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(marked(&token).len() >= 6, "the step ran on while rein beat");
    // The pipe closes (rein is gone): at once.
    drop(beat);
    let left = gone_within(&token, Duration::from_millis(500));
    assert!(
        left.is_empty(),
        "left after the heartbeat's pipe closed: {left:?}"
    );
    rein.wait().unwrap();
}
