//! `rein-bench takeover --tasks N`: how long a real `rein serve` on SQLite
//! takes to be back after `kill -9` with N tasks in flight. N tasks of one
//! idempotent step (its shell creates a file named by its attempt, then sleeps) are submitted over the
//! API; once every step runs, the server is killed with SIGKILL (the steps die
//! with it) and started again on the same data directory. Timed from that
//! start: until it answers a read (a page of tasks), then `/healthz`, and until every interrupted step runs
//! again (its second attempt has noted itself). Steps run unsandboxed by
//! default, so the time is rein's, not the sandbox's; `--sandbox bubblewrap`
//! (or `auto`, `landlock`) times a user's default instead, each task's
//! workspace the marks directory. Before that, the floor: the same N scripts
//! started by the bench alone (see [`bare_starts`]), under bubblewrap also as
//! bwrap commands.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::sse::{TOKEN, start_serve_with};

/// One HTTP/1.1 request (the connection closed after it), with a plan file
/// as its body if any; the status.
pub(crate) async fn request(
    addr: &str,
    method: &str,
    path: &str,
    plan: Option<&str>,
) -> anyhow::Result<u16> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let body = plan.unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\nContent-Type: application/toml\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body.as_bytes()).await?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await?;
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("not an HTTP answer: {text}"))
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

/// How many tasks' steps have noted an attempt numbered `attempt` or later
/// (each attempt creates `TASK.ATTEMPT`).
pub(crate) fn attempts(marks: &Path, attempt: u32) -> usize {
    let mut tasks = std::collections::HashSet::new();
    if let Ok(entries) = std::fs::read_dir(marks) {
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some((task, n)) = name.rsplit_once('.')
                && n.parse::<u32>().is_ok_and(|n| n >= attempt)
            {
                tasks.insert(task.to_owned());
            }
        }
    }
    tasks.len()
}

/// A plan of one idempotent step that notes its attempt in `marks`
/// (`TASK.ATTEMPT`) and then sleeps: a step in flight.
pub(crate) fn in_flight(marks: &Path) -> String {
    in_flight_at(marks, false)
}

/// [`in_flight`], run in `marks` as its workspace if `there` (a sandboxed
/// step reaches nothing outside its workspace; the server needs `marks`
/// inside a `--workspace-root`).
fn in_flight_at(marks: &Path, there: bool) -> String {
    let workspace = if there {
        format!(
            "workspace = {}\n",
            toml_string(&marks.display().to_string())
        )
    } else {
        String::new()
    };
    format!(
        "description = \"a step in flight\"\n{workspace}[[steps]]\nid = \"wait\"\nrun = {}\nidempotent = true\n",
        toml_string(&step_script(marks))
    )
}

/// The script of [`in_flight`]'s step. The shell notes the attempt itself (a
/// redirection, no program of its own), so what is timed is starting steps,
/// not coreutils.
fn step_script(marks: &Path) -> String {
    format!(
        ": > {}/\"$REIN_TASK_ID.$REIN_ATTEMPT\"; exec sleep 3600",
        marks.display()
    )
}

/// How the bench starts a step's script itself, for the floor.
enum Bare<'a> {
    /// `sh -c SCRIPT`.
    Sh,
    /// Through the trampoline rein starts steps with (`rein-confine`,
    /// unconfined): the same three programs as one of rein's steps.
    Trampoline(&'a Path),
    /// As `sandbox` starts it, in `marks` as the workspace.
    Sandboxed(&'a rein_sandbox::Sandbox),
}

/// The floor under a take-over on this machine: `tasks` copies of the step's
/// script started by this process itself, as `how` says, with no rein and no
/// store, from as many threads as there are cores (each start waits for its
/// `exec`), and timed until every one has noted itself. The processes are
/// killed before it returns.
fn bare_starts(tasks: usize, how: &Bare<'_>, dir: &Path) -> anyhow::Result<Duration> {
    let marks = dir.join(match how {
        Bare::Sh => "bare-sh",
        Bare::Trampoline(_) => "bare-trampoline",
        Bare::Sandboxed(_) => "bare-sandboxed",
    });
    std::fs::create_dir_all(&marks)?;
    let marks = marks.canonicalize()?;
    let pinned = rein_sandbox::Pinned::pin(&marks)?;
    let script = step_script(&marks);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let me = std::process::id().to_string();
    let start = |i: usize| {
        let env = [
            ("REIN_TASK_ID".to_owned(), format!("bare{i}")),
            ("REIN_ATTEMPT".to_owned(), "1".to_owned()),
        ];
        let mut command = match how {
            Bare::Trampoline(trampoline) => {
                let mut c = std::process::Command::new(trampoline);
                c.args(["--parent", &me, "--unconfined", "--workspace"])
                    .arg(dir)
                    .args(["--", &script]);
                c
            }
            Bare::Sh => {
                let mut c = std::process::Command::new("sh");
                c.args(["-c", &script]).current_dir(dir);
                c
            }
            Bare::Sandboxed(sandbox) => {
                // The sandbox's own command, started from this thread.
                let made = sandbox.command(&pinned, &script, &env, &Default::default());
                let made = made.as_std();
                let mut c = std::process::Command::new(made.get_program());
                c.args(made.get_args()).env_clear().current_dir(&marks);
                c
            }
        };
        if !matches!(how, Bare::Sandboxed(_)) {
            command.envs(env);
        }
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
    };
    let started = Instant::now();
    let (sent, started_children) = std::sync::mpsc::channel();
    // The trampoline dies with the thread that started it, so the threads
    // live until the processes are killed.
    let (done, until_done) = std::sync::mpsc::channel::<()>();
    let until_done = std::sync::Mutex::new(until_done);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (start, sent, until_done) = (&start, sent.clone(), &until_done);
            scope.spawn(move || {
                for i in (t..tasks).step_by(threads) {
                    let _ = sent.send(start(i));
                }
                drop(sent);
                // Every thread waits for the one message (or the sender's end).
                let _ = until_done.lock().map(|r| r.recv());
            });
        }
        drop(sent);
        let mut children = Vec::with_capacity(tasks);
        let mut all = Ok(());
        for child in started_children.iter().take(tasks) {
            match child {
                Ok(child) => children.push(child),
                Err(e) => all = Err(anyhow::anyhow!("cannot start a bare step: {e}")),
            }
        }
        let until = started + Duration::from_secs(120);
        while all.is_ok() && attempts(&marks, 1) < tasks {
            if Instant::now() > until {
                all = Err(anyhow::anyhow!("timed out waiting for the bare steps"));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let took = started.elapsed();
        for child in &mut children {
            let _ = child.kill();
            let _ = child.wait();
        }
        drop(done);
        all.map(|()| took)
    })
}

pub(crate) async fn wait_for(
    what: &str,
    limit: Duration,
    mut done: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let until = Instant::now() + limit;
    while !done() {
        anyhow::ensure!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

pub async fn takeover(
    tasks: usize,
    sandbox: &str,
    rein: Option<PathBuf>,
    dir: &Path,
) -> anyhow::Result<Value> {
    let rein = crate::sse::rein_binary(rein)?;
    let trampoline = rein.with_file_name("rein-confine");
    let bare_sh = bare_starts(tasks, &Bare::Sh, dir)?;
    let bare_trampoline = if trampoline.exists() {
        Some(bare_starts(tasks, &Bare::Trampoline(&trampoline), dir)?)
    } else {
        None
    };
    // Under bubblewrap, also the same bwrap commands rein makes, started
    // through the trampoline as rein starts them.
    let bare_sandboxed = if sandbox == "bubblewrap" && trampoline.exists() {
        let made = rein_sandbox::Sandbox::probe_started_by(Some(rein_sandbox::Trampoline {
            program: trampoline.clone(),
            args: Vec::new(),
        }))
        .await?;
        Some(bare_starts(tasks, &Bare::Sandboxed(&made), dir)?)
    } else {
        None
    };
    let data = dir.join("data");
    let marks = dir.join("marks");
    std::fs::create_dir_all(&marks)?;
    let sandboxed = sandbox != "none";
    let root = marks.display().to_string();
    let more: &[&str] = if sandboxed {
        &["--workspace-root", &root]
    } else {
        &[]
    };
    let (mut server, addr) = start_serve_with(&rein, &data, sandbox, more).await?;
    let plan = in_flight_at(&marks, sandboxed);
    for _ in 0..tasks {
        let status = request(&addr, "POST", "/admin/tasks", Some(&plan)).await?;
        anyhow::ensure!(status == 201, "submitting a task got {status}");
    }
    wait_for("every step to run", Duration::from_secs(120), || {
        attempts(&marks, 1) >= tasks
    })
    .await?;
    // kill -9, and the same data directory again.
    server.start_kill()?;
    server.wait().await?;
    let started = Instant::now();
    let (mut again, addr) = start_serve_with(&rein, &data, sandbox, more).await?;
    let listening = started.elapsed();
    // A read first (a page of the task list), then a health check (which
    // writes to the store, runs a trial command, verifies the ledger).
    loop {
        if request(&addr, "GET", "/admin/tasks?limit=1", None)
            .await
            .is_ok_and(|s| s == 200)
        {
            break;
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(60), "no task list");
    }
    let reading = started.elapsed();
    loop {
        if request(&addr, "GET", "/healthz", None).await.is_ok() {
            break;
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(60), "no /healthz");
    }
    let answering = started.elapsed();
    wait_for("every step to run again", Duration::from_secs(120), || {
        attempts(&marks, 2) >= tasks
    })
    .await?;
    let all_running = started.elapsed();
    let _ = again.start_kill();
    let ms = |d: Duration| (d.as_secs_f64() * 1e6).round() / 1000.0;
    let over =
        |floor: Duration| (all_running.as_secs_f64() / floor.as_secs_f64() * 100.0).round() / 100.0;
    Ok(json!({
        "bench": "takeover",
        "tasks": tasks,
        "sandbox": sandbox,
        "listening_ms": ms(listening),
        "reading_ms": ms(reading),
        "answering_ms": ms(answering),
        "all_running_again_ms": ms(all_running),
        "bare_sh_ms": ms(bare_sh),
        "bare_trampoline_ms": bare_trampoline.map(ms),
        "bare_sandboxed_ms": bare_sandboxed.map(ms),
        "over_bare_trampoline": bare_trampoline.map(over),
        "over_bare_sandboxed": bare_sandboxed.map(over),
    }))
}
