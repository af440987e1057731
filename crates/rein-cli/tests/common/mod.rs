//! Helpers shared by the CLI's end-to-end tests: they run the real `rein` binary
//! against a real SQLite file in a temporary data directory.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn rein_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rein"))
}

/// The settings a test's `rein` must not inherit from the environment.
pub const REIN_SETTINGS: [&str; 15] = [
    "REIN_CONFIG",
    "REIN_WORKSPACE_ROOTS",
    "REIN_DATA_DIR",
    "REIN_STORE",
    "REIN_URL",
    "REIN_TOKEN",
    "REIN_SANDBOX",
    "REIN_POLICY",
    "REIN_PLUGINS",
    "REIN_RUNTIME_POLICY",
    "REIN_MODEL",
    "REIN_MODEL_IDLE_TIMEOUT",
    "REIN_ANTHROPIC_MODEL",
    "REIN_ANTHROPIC_MAX_TOKENS",
    "ANTHROPIC_API_KEY",
];

/// A `rein` command on a data directory, with no inherited REIN_* settings
/// and no configuration file of the user's (the XDG config directory is one
/// beside the data directory).
pub fn rein(data_dir: &Path) -> Command {
    let mut cmd = Command::new(rein_bin());
    for setting in REIN_SETTINGS {
        cmd.env_remove(setting);
    }
    let place = data_dir.parent().unwrap_or(data_dir);
    cmd.env("XDG_CONFIG_HOME", place.join("xdg-config"));
    // The test's own directory is declared for workspaces: a test run as
    // root gives its steps directories of root's there.
    cmd.env("REIN_WORKSPACE_ROOTS", place);
    cmd.arg("--data-dir").arg(data_dir);
    cmd
}

/// `rein tasks fork TASK --after STEP --no-wait`: a fork that answers at once.
pub fn fork_after(data_dir: &Path, task: &str, step: &str) -> Command {
    let mut cmd = rein(data_dir);
    cmd.args(["tasks", "fork", task, "--after", step, "--no-wait"]);
    cmd
}

/// `rein --data-dir DATA ARGS…` on a real pseudo-terminal (util-linux
/// `script`), as user `terminal-user`, with no inherited REIN_* settings: its
/// stdin is what a person types.
pub fn rein_on_terminal(data_dir: &Path, args: &[&Path]) -> Child {
    let mut command = format!("{} --data-dir {}", rein_bin().display(), data_dir.display());
    for arg in args {
        command.push(' ');
        command.push_str(&arg.display().to_string());
    }
    let mut script = Command::new("script");
    for setting in REIN_SETTINGS {
        script.env_remove(setting);
    }
    script
        .args(["-qefc", &command, "/dev/null"])
        .env("REIN_USER", "terminal-user")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("`script` (util-linux) runs rein on a pseudo-terminal")
}

/// Types `line` into a [`rein_on_terminal`] and waits for it to end: its exit
/// code and what the terminal showed.
pub fn type_and_wait(mut child: Child, line: &str) -> (Option<i32>, String) {
    use std::io::Write;
    let stdin = child.stdin.as_mut().unwrap();
    stdin.write_all(line.as_bytes()).unwrap();
    stdin.flush().unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Every approval request in the data directory, any status
/// (`rein approvals list --status all --json`).
pub fn all_approvals(data_dir: &Path) -> serde_json::Value {
    json(&run_ok(rein(data_dir).args([
        "approvals",
        "list",
        "--status",
        "all",
        "--json",
    ])))
}

pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("rein runs");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Starts `cmd` in the background, its output thrown away: a runner the test
/// watches through the store, or kills.
pub fn spawn_quiet(cmd: &mut Command) -> Child {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?} cannot start: {e}"))
}

/// The tasks forked from `source`, as `rein tasks list --forked-from` lists them.
pub fn forks_of(data_dir: &Path, source: &str) -> Vec<serde_json::Value> {
    let listed = json(&run_ok(rein(data_dir).args([
        "tasks",
        "list",
        "--forked-from",
        source,
        "--json",
    ])));
    listed["items"].as_array().cloned().unwrap_or_default()
}

/// What the fake model server reported at `field` (a JSON pointer into a
/// request's `reported_usage`), added up over `requests`; each must have it.
pub fn reported(requests: &[serde_json::Value], field: &str) -> u64 {
    requests
        .iter()
        .map(|r| {
            r["reported_usage"]
                .pointer(field)
                .and_then(serde_json::Value::as_u64)
                .unwrap_or_else(|| panic!("no {field} reported in {r}"))
        })
        .sum()
}

/// Runs `cmd`, which must end with exit code `code`: what it printed.
pub fn exits(cmd: &mut Command, code: i32) -> Output {
    let out = cmd.output().expect("rein runs");
    assert_eq!(
        out.status.code(),
        Some(code),
        "{cmd:?}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `cmd`, which must end with exit code `code`: what it said on stderr.
pub fn fails(cmd: &mut Command, code: i32) -> String {
    String::from_utf8_lossy(&exits(cmd, code).stderr).into_owned()
}

pub fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// A test's scratch directory and the data directory in it (`data`, made by
/// the first `rein` that uses it).
pub fn scratch() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    (dir, data)
}

/// A [`scratch`] directory with the plan `text` written in it as `name`: the
/// directory, its data directory and the plan's path.
pub fn with_plan(name: &str, text: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let (dir, data) = scratch();
    let plan = write_plan(dir.path(), name, text);
    (dir, data, plan)
}

pub fn write_plan(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write plan");
    path
}

/// `text` written as `rein.toml` in `dir`: a configuration file for
/// `--config`. Its path.
pub fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("rein.toml");
    std::fs::write(&path, text).expect("write rein.toml");
    path
}

/// The approval requests waiting for an answer, as `rein approvals list
/// --json` shows them.
pub fn pending(data_dir: &Path) -> Vec<serde_json::Value> {
    json(&run_ok(rein(data_dir).args([
        "approvals",
        "list",
        "--json",
    ])))
    .as_array()
    .unwrap()
    .clone()
}

/// The item of the JSON array `list` whose `key` is `value`; fails the test,
/// showing the list, if there is none.
pub fn item<'a, V>(list: &'a serde_json::Value, key: &str, value: V) -> &'a serde_json::Value
where
    serde_json::Value: PartialEq<V>,
{
    list.as_array()
        .and_then(|items| items.iter().find(|i| i[key] == value))
        .unwrap_or_else(|| panic!("no item with {key} as asked in {list}"))
}

/// The items of the JSON array `list` whose `key` is `value`, in order; fails
/// the test, showing it, if `list` is not an array.
pub fn items<'a, V>(list: &'a serde_json::Value, key: &str, value: V) -> Vec<&'a serde_json::Value>
where
    serde_json::Value: PartialEq<V>,
{
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .filter(|i| i[key] == value)
        .collect()
}

/// The ids of all tasks in a data directory, newest first.
pub fn task_ids(data_dir: &Path) -> Vec<String> {
    let out = run_ok(rein(data_dir).args(["tasks", "list", "--json"]));
    json(&out)["items"]
        .as_array()
        .expect("a page of items")
        .iter()
        .map(|t| t["id"].as_str().expect("id").to_owned())
        .collect()
}

pub fn show(data_dir: &Path, id: &str) -> serde_json::Value {
    json(&run_ok(
        rein(data_dir).args(["tasks", "show", id, "--json"]),
    ))
}

/// A plan with an approval between two command steps.
pub const SHIP_PLAN: &str = r#"
description = "ship it"
[[steps]]
id = "build"
run = "echo built"
[[steps]]
id = "ship"
kind = "approve"
title = "Publish the release notes?"
options = ["publish", "hold"]
recommended = "publish"
depends_on = ["build"]
[[steps]]
id = "publish"
run = "echo published > published.txt"
depends_on = ["ship"]
"#;

/// A file in the task's workspace: where a test puts what a step, confined to
/// that workspace by the sandbox, waits for.
pub fn in_workspace(data_dir: &Path, task: &str, name: &str) -> PathBuf {
    data_dir.join("workspaces").join(task).join(name)
}

/// A shell command that returns once `path` exists: a step the test lets finish.
/// A relative path is the step's workspace's.
pub fn until_exists(path: &Path) -> String {
    // Bounded, so a failed test leaves nothing waiting for long.
    format!(
        "i=0; while [ ! -e {} ]; do i=$((i+1)); [ $i -gt 3000 ] && exit 9; sleep 0.01; done",
        path.display()
    )
}

/// The status of a step's newest checkpoint in a task's JSON state.
pub fn step_status(state: &serde_json::Value, step: &str) -> Option<String> {
    newest_checkpoint(state, step, None).map(|c| c["status"].as_str().unwrap().to_owned())
}

/// Writes at `path` a manifest of the test echo plugin
/// (`rein-runtimes/tests/plugins/echo_plugin.py`, started with `args`):
/// plugin `id`, then `rest` (its `[[harnesses]]`, `[executor]`, …).
pub fn echo_manifest(path: &Path, id: &str, args: &[&str], rest: &str) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../rein-runtimes/tests/plugins/echo_plugin.py")
        .display()
        .to_string();
    let command: Vec<String> = ["python3", script.as_str()]
        .iter()
        .chain(args)
        .map(|a| format!("{a:?}"))
        .collect();
    let text = format!("id = {id:?}\ncommand = [{}]\n{rest}", command.join(", "));
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path.to_owned()
}

/// The newest checkpoint of `step` in a task's state (`rein tasks show
/// --json`), of `status` if one is given.
pub fn newest_checkpoint<'a>(
    state: &'a serde_json::Value,
    step: &str,
    status: Option<&str>,
) -> Option<&'a serde_json::Value> {
    state["checkpoints"]
        .as_array()?
        .iter()
        .rev()
        .find(|c| c["step_id"] == step && status.is_none_or(|s| c["status"] == s))
}

/// [`newest_checkpoint`], which must be there: fails the test, showing the
/// state, if it is not.
pub fn checkpoint(
    state: &serde_json::Value,
    step: &str,
    status: Option<&str>,
) -> serde_json::Value {
    newest_checkpoint(state, step, status)
        .cloned()
        .unwrap_or_else(|| panic!("no checkpoint of `{step}` ({status:?}) in {state}"))
}

/// Polls `check` until it gives a value; fails the test after 20 s naming `what`.
pub fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The operator token the tests' servers are started with (`REIN_TOKEN`).
pub const OPERATOR_TOKEN: &str = "s3cret-operator-token";

/// `GET path` as the operator: the status and the body.
pub fn operator_get(addr: &str, path: &str) -> (u16, String) {
    http(addr, "GET", path, Some(OPERATOR_TOKEN), None)
}

/// One HTTP/1.1 request; the status and the body.
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<(&str, &str)>,
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if let Some((content_type, b)) = body {
        req.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        ));
    } else {
        req.push_str("\r\n");
    }
    stream.write_all(req.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// A `rein serve` process; killed if a failed test leaves it running (it holds the
/// test's output pipe).
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts `rein serve` on a free port; returns it and the address it printed.
pub fn start(data: &std::path::Path, token: &str) -> (Server, String) {
    serve(rein(data), token)
}

/// Starts `command` (`rein` with its global flags: plugins, policies, a
/// model's environment) as `rein serve` on a free port, with the operator
/// token `token`; returns it and the address it printed.
pub fn serve(command: Command, token: &str) -> (Server, String) {
    serve_with(command, Some(token), &[])
}

/// [`serve`], with `rein serve`'s own flags `flags`, and the operator token
/// (if any: `--tokens` may name the users instead) in `REIN_TOKEN`.
pub fn serve_with(
    mut command: Command,
    token: Option<&str>,
    flags: &[&std::ffi::OsStr],
) -> (Server, String) {
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(flags);
    if let Some(token) = token {
        command.env("REIN_TOKEN", token);
    }
    let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
    let addr = listening(&mut child);
    (Server(child), addr)
}

/// `rein` as a client of the server at `addr` with the operator token
/// `token` (`--url`, `--token`), its own data directory `data`: each call a
/// command with `args`.
pub fn client(data: std::path::PathBuf, addr: &str, token: &str) -> impl Fn(&[&str]) -> Command {
    let (url, token) = (format!("http://{addr}"), token.to_owned());
    move |args: &[&str]| {
        let mut cmd = rein(&data);
        cmd.args(["--url", &url, "--token", &token]).args(args);
        cmd
    }
}

/// The address a starting `rein serve` prints on its first line.
pub fn listening(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("listening on"), "{line}");
    line.trim()
        .rsplit("http://")
        .next()
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// Kills `child` with SIGKILL, as a crash would, and reaps it.
pub fn kill9(child: &mut Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
}
