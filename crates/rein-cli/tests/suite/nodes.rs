//! Several `rein serve` nodes sharing one PostgreSQL store: tasks shared out
//! by lease, a node killed with -9 mid-run and its tasks taken over, a
//! decision on one node reaching a task on another, a node paused past its
//! lease that finds, when it comes back, that it may no longer write, and a
//! node cut off from the database that stops its steps before another node
//! runs them. Real nodes (the `rein` binary), a real server (a throwaway
//! cluster).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Server, http, kill9, listening, rein, run_ok};
use rein_core::{Engine, EngineConfig};
use serde_json::Value;

const TOKEN: &str = "nodes-token-0123456";

fn database() -> String {
    let cluster = rein_test_support::postgres::shared().unwrap();
    runtime().block_on(cluster.database()).unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A node on `url` with its own data directory.
struct Node {
    server: Server,
    addr: String,
}

/// What every node is started with: the store at `url`, steps unsandboxed,
/// a free loopback port, a lease of a second.
fn serve_args(url: &str) -> [&str; 9] {
    [
        "--store",
        url,
        "--sandbox",
        "none",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--lease",
        "1s",
    ]
}

fn node(dir: &Path, name: &str, url: &str, extra: &[&str]) -> Node {
    let mut child = rein(&dir.join(name))
        .args(serve_args(url))
        .args(extra)
        .env("REIN_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = listening(&mut child);
    Node {
        server: Server(child),
        addr,
    }
}

fn get(node: &Node, path: &str) -> Value {
    let (status, body) = http(&node.addr, "GET", path, Some(TOKEN), None);
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

fn submit(node: &Node, plan: &str) -> String {
    let (status, body) = http(
        &node.addr,
        "POST",
        "/admin/tasks",
        Some(TOKEN),
        Some(("application/toml", plan)),
    );
    assert_eq!(status, 201, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["task"]["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// How many tasks are in `status`, as `node` sees them.
fn count(node: &Node, status: &str) -> usize {
    let mut n = 0;
    let mut cursor = String::new();
    loop {
        let page = get(
            node,
            &format!("/admin/tasks?status={status}&limit=500{cursor}"),
        );
        n += page["items"].as_array().unwrap().len();
        match page["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => return n,
        }
    }
}

fn leases(node: &Node) -> Vec<String> {
    let health = get(node, "/healthz");
    health["node"]["leases"]
        .as_array()
        .unwrap_or_else(|| panic!("no node in {health}"))
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect()
}

fn until<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every task in the store at `url`, each with what `read` makes of it.
fn each_task<T>(
    url: &str,
    read: impl AsyncFn(&Engine, &rein_protocol::TaskSummary) -> T,
) -> Vec<T> {
    runtime().block_on(async {
        let store = std::sync::Arc::new(rein_store::PostgresStore::connect(url).await.unwrap());
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::new(
            store,
            std::sync::Arc::new(rein_core::CommandExecutor::unsandboxed()),
            EngineConfig::new(dir.path().join("w")),
        );
        let mut filter = rein_core::store::TaskFilter {
            limit: Some(500),
            ..Default::default()
        };
        let mut out = Vec::new();
        loop {
            let page = engine.list(&filter).await.unwrap();
            for summary in &page.items {
                out.push(read(&engine, summary).await);
            }
            match page.next_cursor {
                Some(c) => filter.cursor = Some(c),
                None => return out,
            }
        }
    })
}

/// Every task's folded state, read from the store itself.
fn states(url: &str) -> Vec<rein_protocol::TaskState> {
    each_task(url, async |engine, task| {
        engine.get(&task.id).await.unwrap()
    })
}

/// The pids of the nodes that took a task up (started or resumed it), in
/// the order of its events.
fn taken_up_by(events: &[rein_protocol::HarnessEvent]) -> Vec<u32> {
    events
        .iter()
        .filter_map(|e| match &e.change {
            rein_protocol::TaskChange::TaskStarted { runner }
            | rein_protocol::TaskChange::TaskResumed { runner, .. } => {
                runner.as_ref().map(|r| r.pid)
            }
            _ => None,
        })
        .collect()
}

/// The pids of the nodes that took each task up (started or resumed it), in
/// order, read from the store.
fn runners(url: &str) -> BTreeMap<String, Vec<u32>> {
    each_task(url, async |engine, task| {
        let events = engine
            .store()
            .events(&task.id, 0, usize::MAX)
            .await
            .unwrap();
        let pids = taken_up_by(&events);
        (task.id.to_string(), pids)
    })
    .into_iter()
    .collect()
}

/// Two steps that write to `log` as each attempt starts and ends.
fn marking_plan(log: &Path) -> String {
    let mut plan = String::from("description = \"shared\"\n");
    for (step, deps) in [("first", ""), ("second", "\"first\"")] {
        plan.push_str(&format!(
            "[[steps]]\nid = \"{step}\"\nidempotent = true\ndepends_on = [{deps}]\n\
             run = \"t=$(basename \\\"$PWD\\\"); echo \\\"start $t {step}\\\" >> {log}; sleep 0.1; echo \\\"end $t {step}\\\" >> {log}\"\n",
            log = log.display()
        ));
    }
    plan
}

#[test]
fn three_nodes_share_300_tasks_and_lose_none_when_one_is_killed() {
    let url = database();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("attempts.log");
    std::fs::write(&log, "").unwrap();
    let max = ["--max-tasks", "40"];
    let mut nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|n| node(dir.path(), n, &url, &max))
        .collect();
    let plan = marking_plan(&log);
    let ids: Vec<String> = (0..300).map(|i| submit(&nodes[i % 3], &plan)).collect();
    // Mid-run, with tasks running on the node: it dies.
    until(
        "a third of the tasks to complete",
        Duration::from_secs(120),
        || (count(&nodes[1], "completed") >= 100).then_some(()),
    );
    let held = leases(&nodes[0]);
    assert!(!held.is_empty(), "node a runs nothing to take over");
    assert!(
        held.len() <= 40,
        "node a runs {} tasks, above --max-tasks",
        held.len()
    );
    let mut a = nodes.remove(0);
    let a_pid = a.server.0.id();
    kill9(&mut a.server.0);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"killed\n"))
        .unwrap();
    let killed_at = Instant::now();
    // Its tasks run again elsewhere within the lease (1 s) and a little.
    let first_taken = until(
        "a's tasks to be taken over",
        Duration::from_secs(30),
        || {
            let now: Vec<String> = nodes.iter().flat_map(leases).collect();
            held.iter()
                .any(|t| now.contains(t))
                .then(|| killed_at.elapsed())
        },
    );
    until("every task to complete", Duration::from_secs(180), || {
        (count(&nodes[0], "completed") == 300).then_some(())
    });
    eprintln!("node a's first task ran again on another node {first_taken:?} after the kill");

    // Each step completed once, in every task.
    let states = states(&url);
    assert_eq!(states.len(), 300);
    for state in &states {
        assert_eq!(state.status(), rein_protocol::TaskStatus::Completed);
        let mut passed: BTreeMap<&str, usize> = BTreeMap::new();
        for cp in &state.checkpoints {
            if let (Some(step), rein_protocol::CheckpointStatus::Completed) =
                (cp.step_id.as_deref(), cp.status)
                && cp.kind == rein_protocol::CheckpointType::TaskExec
            {
                *passed.entry(step).or_default() += 1;
            }
        }
        assert_eq!(
            passed,
            BTreeMap::from([("first", 1), ("second", 1)]),
            "task {}",
            state.id()
        );
    }
    let mut all: Vec<String> = states.iter().map(|s| s.id().to_string()).collect();
    all.sort();
    let mut submitted = ids.clone();
    submitted.sort();
    assert_eq!(all, submitted);

    // No two attempts of a step at once; a step ran again only if it was
    // running on the killed node.
    let text = std::fs::read_to_string(&log).unwrap();
    // Per step: whether an attempt is running, and whether the killed node
    // left it so (its steps died with it and never wrote their end).
    #[derive(Clone, Copy, PartialEq)]
    enum Attempt {
        Ended,
        Running,
        LeftByTheKilled,
    }
    let mut open: BTreeMap<(String, String), Attempt> = BTreeMap::new();
    let mut runs: BTreeMap<(String, String), usize> = BTreeMap::new();
    for line in text.lines() {
        if line == "killed" {
            for attempt in open.values_mut() {
                if *attempt == Attempt::Running {
                    *attempt = Attempt::LeftByTheKilled;
                }
            }
            continue;
        }
        let mut words = line.split_whitespace();
        let (what, task, step) = (
            words.next().unwrap(),
            words.next().unwrap().to_owned(),
            words.next().unwrap().to_owned(),
        );
        let key = (task, step);
        let attempt = open.entry(key.clone()).or_insert(Attempt::Ended);
        if what == "start" {
            assert!(
                *attempt != Attempt::Running,
                "two attempts of {key:?} at once: {line}"
            );
            *attempt = Attempt::Running;
            *runs.entry(key).or_default() += 1;
        } else {
            *attempt = Attempt::Ended;
        }
    }
    // The tasks the killed node had taken up (it may have taken more in the
    // moment between the look at its leases and the kill).
    let runners = runners(&url);
    let again: Vec<_> = runs.iter().filter(|(_, n)| **n > 1).collect();
    for ((task, _), n) in &again {
        assert!(*n <= &2, "{task} ran {n} times");
        let took_up = &runners[task.as_str()];
        assert!(
            took_up.contains(&a_pid) && took_up.last() != Some(&a_pid),
            "{task} ran again but was not taken over from the killed node: {took_up:?}"
        );
    }
    eprintln!(
        "{} step(s) of the killed node's tasks ran again",
        again.len()
    );
}

const ASKING: &str = r#"
description = "asks"
[[steps]]
id = "ask"
kind = "approve"
title = "Go ahead?"
[[steps]]
id = "after"
run = "true"
depends_on = ["ask"]
"#;

#[test]
fn a_decision_on_one_node_wakes_its_task_on_another_at_once_and_streams_there() {
    let url = database();
    let dir = tempfile::tempdir().unwrap();
    let a = node(dir.path(), "a", &url, &[]);
    let b = node(dir.path(), "b", &url, &[]);
    let id = submit(&a, ASKING);
    let approval = until("the question", Duration::from_secs(30), || {
        let listed = get(&b, &format!("/admin/approvals?task_id={id}&status=pending"));
        let items = listed["items"].as_array().or(listed.as_array())?.clone();
        items.first().map(|r| r["id"].as_str().unwrap().to_owned())
    });
    assert_eq!(
        leases(&a),
        vec![id.clone()],
        "node a runs the task: {} {}",
        get(&a, "/healthz")["node"],
        get(&a, &format!("/admin/tasks/{id}"))["task"]["status"]
    );
    // Node b streams the events of the task node a runs.
    let mut stream = std::net::TcpStream::connect(&b.addr).unwrap();
    std::io::Write::write_all(
        &mut stream,
        format!(
            "GET /admin/tasks/{id}/events/stream HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n",
            b.addr
        )
        .as_bytes(),
    )
    .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let asked = Instant::now();
    let (status, body) = http(
        &b.addr,
        "POST",
        &format!("/admin/approvals/{approval}/decision"),
        Some(TOKEN),
        Some((
            "application/json",
            r#"{"decision":"approve","reason":"decided on node b"}"#,
        )),
    );
    assert_eq!(status, 200, "{body}");
    until(
        "the task to complete on node a",
        Duration::from_secs(30),
        || (get(&a, &format!("/admin/tasks/{id}"))["task"]["status"] == "completed").then_some(()),
    );
    let took = asked.elapsed();
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("task_completed") {
        let n = std::io::Read::read(&mut stream, &mut chunk).expect("node b's stream goes on");
        assert!(
            n > 0,
            "node b's stream ended early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&seen);
    assert!(
        text.contains("human_approval_received"),
        "the decision streamed too: {text}"
    );
    // Node a polls for decisions every 2 s on a shared store: the
    // notification is what brings this one sooner.
    assert!(
        took < Duration::from_millis(1500),
        "the decision took {took:?} to reach node a"
    );
    eprintln!("a decision on node b completed the task on node a in {took:?}");
}

/// One idempotent step that notes its attempt in `marks`, then takes a while.
fn long(marks: &Path) -> String {
    format!(
        "description = \"long\"\n[[steps]]\nid = \"long\"\nidempotent = true\nrun = \": > {}/$REIN_ATTEMPT; sleep 2\"\n",
        marks.display()
    )
}

#[test]
fn a_node_paused_past_its_lease_finds_it_gone_and_does_not_write() {
    let url = database();
    let dir = tempfile::tempdir().unwrap();
    let a = node(dir.path(), "a", &url, &[]);
    let marks = dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let id = submit(&a, &long(&marks));
    until("node a to run its step", Duration::from_secs(30), || {
        marks.join("1").exists().then_some(())
    });
    assert!(leases(&a).contains(&id));
    let a_pid = nix::unistd::Pid::from_raw(a.server.0.id() as i32);
    nix::sys::signal::kill(a_pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let b = node(dir.path(), "b", &url, &[]);
    until("node b to take it over", Duration::from_secs(30), || {
        leases(&b).contains(&id).then_some(())
    });
    nix::sys::signal::kill(a_pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    until("the task to complete", Duration::from_secs(60), || {
        (get(&b, &format!("/admin/tasks/{id}"))["task"]["status"] == "completed").then_some(())
    });
    // Node a found its lease gone at its first write, and let the task go.
    until("node a to stop running it", Duration::from_secs(30), || {
        (get(&a, "/healthz")["node"]["running"] == 0).then_some(())
    });
    assert!(leases(&a).is_empty(), "node a still holds {:?}", leases(&a));
    let state = states(&url).pop().unwrap();
    // The runners that took the task up, in order: a, then b, and nobody after.
    let events = runtime().block_on(async {
        use rein_core::TaskStore;
        let store = rein_store::PostgresStore::connect(&url).await.unwrap();
        store.events(state.id(), 0, usize::MAX).await.unwrap()
    });
    let runners = taken_up_by(&events);
    assert_eq!(runners, [a.server.0.id(), b.server.0.id()]);
    assert!(
        marks.join("2").exists(),
        "node b ran the interrupted step again"
    );
    assert_eq!(completions(&state, "long"), 1, "{:?}", state.checkpoints);
    let pids: Vec<u32> = [&a, &b].iter().map(|n| n.server.0.id()).collect();
    eprintln!("nodes {pids:?}: the paused node wrote nothing after the take-over");
}

#[test]
fn the_cli_on_any_node_aborts_a_task_another_node_runs() {
    let url = database();
    let dir = tempfile::tempdir().unwrap();
    let a = node(dir.path(), "a", &url, &[]);
    let b = node(dir.path(), "b", &url, &[]);
    let id = submit(
        &a,
        "description = \"long\"\n[[steps]]\nid = \"wait\"\nrun = \"sleep 30\"\n",
    );
    until("node a to run it", Duration::from_secs(30), || {
        leases(&a).contains(&id).then_some(())
    });
    let asked = Instant::now();
    let out = run_ok(
        rein(&dir.path().join("cli"))
            .args(["--url", &format!("http://{}", b.addr), "--token", TOKEN])
            .args(["tasks", "abort", &id]),
    );
    // Node b hands the request to node a, which runs the task.
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains(&a.server.0.id().to_string()), "{said}");
    until(
        "the task to be cancelled on node a",
        Duration::from_secs(10),
        || (get(&b, &format!("/admin/tasks/{id}"))["task"]["status"] == "cancelled").then_some(()),
    );
    let took = asked.elapsed();
    assert!(
        took < Duration::from_millis(1500),
        "the abort took {took:?} to reach node a"
    );
    assert!(leases(&a).is_empty());
}

/// How many attempts of `step` completed.
fn completions(state: &rein_protocol::TaskState, step: &str) -> usize {
    state
        .checkpoints
        .iter()
        .filter(|c| {
            c.step_id.as_deref() == Some(step)
                && c.status == rein_protocol::CheckpointStatus::Completed
        })
        .count()
}

/// Whether process `pid` is gone (or only a zombie waiting to be reaped).
fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            == Some("Z")
    })
}

#[test]
fn a_node_cut_off_from_the_store_stops_its_steps_before_another_node_runs_them() {
    let url = database();
    let port: u16 = url
        .rsplit(':')
        .next()
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap();
    // Node a reaches the database through a relay the test can cut.
    let relaying = runtime();
    let relay = relaying
        .block_on(rein_test_support::postgres::Relay::to(port))
        .unwrap();
    let through = url.replace(&format!(":{port}/"), &format!(":{}/", relay.port()));
    let dir = tempfile::tempdir().unwrap();
    let a = node(dir.path(), "a", &through, &[]);
    let marks = dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    // The first attempt notes its process and sleeps; a second ends at once.
    let plan = format!(
        "description = \"cut off\"\n[[steps]]\nid = \"s\"\nidempotent = true\nrun = \"echo $$ > {}/$REIN_ATTEMPT; [ $REIN_ATTEMPT = 1 ] && exec sleep 60; true\"\n",
        marks.display()
    );
    let id = submit(&a, &plan);
    let first: u32 = until("node a to run the step", Duration::from_secs(30), || {
        std::fs::read_to_string(marks.join("1"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    });
    let b = node(dir.path(), "b", &url, &[]);
    assert!(leases(&a).contains(&id));
    relay.cut();
    let cut = Instant::now();
    // Node a stops its step before its lease can run out; node b takes the
    // task up only after that, and never while the first attempt runs.
    let mut stopped = None;
    until(
        "node b to run the step again",
        Duration::from_secs(30),
        || {
            if stopped.is_none() && gone(first) {
                stopped = Some(cut.elapsed());
            }
            marks.join("2").exists().then_some(())
        },
    );
    let stopped = stopped.expect("the first attempt was still running when the second started");
    let again = cut.elapsed();
    until("the task to complete", Duration::from_secs(30), || {
        (get(&b, &format!("/admin/tasks/{id}"))["task"]["status"] == "completed").then_some(())
    });
    assert!(stopped < Duration::from_secs(1), "{stopped:?}");
    let state = states(&url).pop().unwrap();
    assert_eq!(completions(&state, "s"), 1, "{:?}", state.checkpoints);
    eprintln!(
        "cut off: node a stopped its step {stopped:?} after the cut, node b ran it again after {again:?}"
    );
}

/// A node as if on a machine of its own: a PID, mount and UTS namespace of
/// its own (its own `/proc`, its own host name), so no other node can see,
/// or stop, its processes. The node's rein and its host pid.
fn node_apart(dir: &Path, name: &str, url: &str) -> (Node, nix::unistd::Pid) {
    let home = dir.join(name);
    let command = rein(&home);
    let program = command.get_program().to_owned();
    let args: Vec<std::ffi::OsString> = command.get_args().map(ToOwned::to_owned).collect();
    let mut wrapped = std::process::Command::new("unshare");
    wrapped
        .args([
            "--pid",
            "--mount",
            "--uts",
            "--mount-proc",
            "--fork",
            "--kill-child",
        ])
        .args([
            "sh",
            "-c",
            "printf %s \"$0\" > /proc/sys/kernel/hostname && exec \"$@\"",
        ])
        .arg(format!("rein-node-{name}"))
        .arg(program)
        .args(args)
        .args(serve_args(url));
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => wrapped.env(key, value),
            None => wrapped.env_remove(key),
        };
    }
    let mut child = wrapped
        .env("REIN_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .spawn()
        .expect("unshare (util-linux) starts a node in namespaces of its own");
    let addr = listening(&mut child);
    let unshare = child.id();
    let rein_pid: i32 = std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"))
        .unwrap()
        .split_whitespace()
        .next()
        .expect("unshare's child is the node")
        .parse()
        .unwrap();
    (
        Node {
            server: Server(child),
            addr,
        },
        nix::unistd::Pid::from_raw(rein_pid),
    )
}

/// A node frozen past its lease (SIGSTOP) has its steps' processes stopped
/// by their supervisors — half a lease without rein's heartbeat — before
/// another node takes the steps over: no two attempts of a step ever ran at
/// once. Each node is on a machine of its own (namespaces), so the node
/// taking over cannot stop the frozen node's processes itself.
#[test]
fn a_frozen_nodes_steps_stop_before_another_node_runs_them() {
    let url = database();
    let dir = tempfile::tempdir().unwrap();
    let (a, a_rein) = node_apart(dir.path(), "a", &url);
    let marks = dir.path().join("marks.log");
    let mut plan = String::from("description = \"held\"\nmax_parallel = 6\n");
    for i in 0..6 {
        plan.push_str(&format!(
            "[[steps]]\nid = \"h{i}\"\nidempotent = true\n\
             run = '''a=$(cat /proc/sys/kernel/random/uuid); i=0; while [ $i -lt 300 ]; do echo \"$REIN_STEP_ID $a $(date +%s%N)\" >> {}; i=$((i+1)); sleep 0.01; done'''\n",
            marks.display()
        ));
    }
    let id = submit(&a, &plan);
    until(
        "node a to run all six steps",
        Duration::from_secs(30),
        || {
            let text = std::fs::read_to_string(&marks).unwrap_or_default();
            (0..6)
                .all(|i| text.contains(&format!("h{i} ")))
                .then_some(())
        },
    );
    nix::sys::signal::kill(a_rein, nix::sys::signal::Signal::SIGSTOP).unwrap();
    // Node b on a machine of its own too: it cannot see node a's processes
    // (from the host's PID namespace it could, and would stop them).
    let (b, _) = node_apart(dir.path(), "b", &url);
    until(
        "node b to take the task over",
        Duration::from_secs(30),
        || leases(&b).contains(&id).then_some(()),
    );
    until("the task to complete", Duration::from_secs(90), || {
        (get(&b, &format!("/admin/tasks/{id}"))["task"]["status"] == "completed").then_some(())
    });
    nix::sys::signal::kill(a_rein, nix::sys::signal::Signal::SIGCONT).unwrap();
    // (step, attempt) → (first mark, last mark).
    let text = std::fs::read_to_string(&marks).unwrap();
    let mut spans: BTreeMap<(String, String), (u128, u128)> = BTreeMap::new();
    for line in text.lines() {
        let mut parts = line.split(' ');
        let (Some(step), Some(attempt), Some(Ok(at))) = (
            parts.next(),
            parts.next(),
            parts.next().map(str::parse::<u128>),
        ) else {
            continue;
        };
        let span = spans
            .entry((step.to_owned(), attempt.to_owned()))
            .or_insert((at, at));
        span.0 = span.0.min(at);
        span.1 = span.1.max(at);
    }
    let mut overlaps = Vec::new();
    for ((step, one), (a0, a1)) in &spans {
        for ((other_step, two), (b0, b1)) in &spans {
            if step == other_step && one < two && a0 <= b1 && b0 <= a1 {
                overlaps.push(format!(
                    "{step}: {} ms",
                    (a1.min(b1) - a0.max(b0)) / 1_000_000
                ));
            }
        }
    }
    let reran = spans.len() - 6;
    eprintln!(
        "{reran} steps ran again on node b; {} overlapping",
        overlaps.len()
    );
    assert_eq!(reran, 6, "every held step ran again on node b: {spans:?}");
    assert!(overlaps.is_empty(), "attempts ran at once: {overlaps:?}");
}
