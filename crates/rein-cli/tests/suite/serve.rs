//! `rein serve` for real: a server process on a free loopback port, spoken to over
//! TCP and by the CLI with `--url`, stopped with SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{
    SHIP_PLAN, Server, eventually, http, in_workspace, json, listening, rein, run_ok, start,
    step_status, until_exists, write_plan,
};

#[test]
fn the_server_runs_a_plan_and_serves_health_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = start(&dir.path().join("data"), common::OPERATOR_TOKEN);
    let (status, body) = http(&addr, "GET", "/healthz", None, None);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"task_store\""), "{body}");
    assert_eq!(http(&addr, "GET", "/admin/tasks", None, None).0, 401);
    assert_eq!(
        http(&addr, "GET", "/admin/tasks", Some("wrong"), None).0,
        401
    );

    let plan = "description = 'over http'\n[[steps]]\nid = 'a'\nrun = 'echo hi'\n";
    let (status, body) = http(
        &addr,
        "POST",
        "/admin/tasks",
        Some(common::OPERATOR_TOKEN),
        Some(("application/toml", plan)),
    );
    assert_eq!(status, 201, "{body}");
    let created: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = created["task"]["id"].as_str().unwrap().to_owned();
    let start = Instant::now();
    loop {
        let (_, body) = common::operator_get(&addr, &format!("/admin/tasks/{id}"));
        let task: serde_json::Value = serde_json::from_str(&body).unwrap();
        if task["task"]["status"] == "completed" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the task did not complete: {body}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, metrics) = common::operator_get(&addr, "/metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.contains("rein_tasks{status=\"completed\"} 1"),
        "{metrics}"
    );

    stop(server);
    // The work is in the store for the CLI too.
    let out = rein(&dir.path().join("data"))
        .args(["tasks", "show", &id, "--json"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"status\": \"completed\""));
}

#[test]
fn without_a_token_the_server_only_listens_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let said = common::fails(
        rein(&dir.path().join("data"))
            .args(["serve", "--listen", "0.0.0.0:0"])
            .env_remove("REIN_TOKEN"),
        2,
    );
    assert!(
        said.contains("refusing to listen on 0.0.0.0") && said.contains("REIN_TOKEN"),
        "{said}"
    );
}

#[test]
fn a_short_operator_token_is_refused_at_start_naming_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    for token in ["a", "s3cret", "fifteen-chars15"] {
        let out = rein(&dir.path().join("data"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("REIN_TOKEN", token)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{token}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains(&format!("is {} characters", token.len()))
                && said.contains("at least 16")
                && (token.len() < 3 || !said.contains(token)),
            "{said}"
        );
    }
}

/// Ends the server with SIGTERM and checks that it stopped cleanly.
fn stop(mut server: Server) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(server.0.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(
        server.0.wait().unwrap().code(),
        Some(0),
        "a clean shutdown on SIGTERM"
    );
}

/// The CLI pointed at a server: `--url` and `--token`, and a data directory of its
/// own that must stay unused.
struct Remote {
    url: String,
    token: String,
    unused: std::path::PathBuf,
}

impl Remote {
    /// `rein ARGS` prints the same over `--url` as embedded on `data`, but for
    /// the free space the store reports, which moves with whatever else writes
    /// to the disk between the two reads.
    fn same_as_embedded(&self, data: &Path, args: &[&str]) {
        let steady = |out: String| {
            out.lines()
                .map(|l| match l.find(" MiB free") {
                    Some(end) => {
                        let start = l[..end].rfind(' ').map_or(0, |s| s + 1);
                        format!("{}N{}", &l[..start], &l[end..])
                    }
                    None => l.to_owned(),
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        let over_http = steady(text(&self.ok(args)));
        let embedded = steady(text(&run_ok(rein(data).args(args))));
        assert_eq!(over_http, embedded, "rein {args:?} differs over --url");
    }

    fn cmd(&self) -> Command {
        let mut cmd = rein(&self.unused);
        cmd.args(["--url", &self.url, "--token", &self.token]);
        cmd
    }

    fn ok(&self, args: &[&str]) -> Output {
        run_ok(self.cmd().args(args))
    }

    fn show(&self, id: &str) -> serde_json::Value {
        json(&self.ok(&["tasks", "show", id, "--json"]))
    }

    /// `rein run PLAN --url …` in the background, its output piped.
    fn spawn_run(&self, plan: &Path) -> Child {
        self.cmd()
            .arg("run")
            .arg(plan)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// The first item `rein … --json` lists, once there is one.
    fn first(&self, what: &str, args: &[&str]) -> serde_json::Value {
        eventually(what, || {
            // A paged listing's items, or a plain one's.
            let listed = json(&self.ok(args));
            let items = listed.get("items").unwrap_or(&listed);
            items.as_array().unwrap().first().cloned()
        })
    }
}

/// A server on a fresh data directory under `dir`, and the CLI pointed at it.
fn served(dir: &Path) -> (Server, String, Remote) {
    let (server, addr) = start(&dir.join("data"), common::OPERATOR_TOKEN);
    let remote = Remote {
        url: format!("http://{addr}"),
        token: common::OPERATOR_TOKEN.into(),
        unused: dir.join("client"),
    };
    (server, addr, remote)
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_cli_drives_a_plan_through_the_server_and_follows_it_over_sse() {
    let (dir, data) = common::scratch();
    let (server, addr, remote) = served(dir.path());
    let plan = write_plan(dir.path(), "ship.toml", SHIP_PLAN);

    // Without the token the server's refusal comes with the way out.
    let said = common::fails(
        rein(&remote.unused).args(["--url", &remote.url, "tasks", "list"]),
        1,
    );
    assert!(
        said.contains("--token") && said.contains("REIN_TOKEN"),
        "{said}"
    );

    // The run: submitted to the server, followed from here until the task ends.
    let runner = remote.spawn_run(&plan);
    let request = remote.first(
        "an approval request appears",
        &["approvals", "list", "--json"],
    );
    let task = request["task_id"].as_str().unwrap().to_owned();
    let approval = request["id"].as_str().unwrap().to_owned();
    // A second follower, over the server's event stream, while the task waits.
    let follower = remote
        .cmd()
        .args(["tasks", "follow", &task, "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();

    // Over a server a decision is the token's; --as cannot claim another name.
    common::exits(
        remote
            .cmd()
            .args(["approvals", "approve", &approval, "--as", "mallory"]),
        2,
    );
    let decided = text(&remote.ok(&["approvals", "approve", &approval, "--reason", "looks right"]));
    assert!(
        decided.contains("approved") && decided.contains("by admin"),
        "{decided}"
    );

    let ran = runner.wait_with_output().unwrap();
    let ran_text = text(&ran);
    assert_eq!(ran.status.code(), Some(0), "{ran_text}");
    assert!(
        ran_text.contains(&format!("task {task} created: 3 steps")),
        "{ran_text}"
    );
    assert!(ran_text.contains("passed   publish"), "{ran_text}");
    assert!(
        ran_text.contains(&format!("task {task} completed: 3 steps")),
        "{ran_text}"
    );
    assert!(
        data.join("workspaces")
            .join(&task)
            .join("published.txt")
            .exists()
    );

    let followed = follower.wait_with_output().unwrap();
    assert_eq!(followed.status.code(), Some(0));
    let seqs: Vec<u64> = text(&followed)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    let logged: Vec<u64> = json(&remote.ok(&["tasks", "events", &task, "--json"]))
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, logged, "the stream sent every event once, in order");
    assert_eq!(seqs, (1..=logged.len() as u64).collect::<Vec<_>>());

    // The same output as the embedded CLI reading the server's store.
    for args in [
        vec!["tasks", "show", task.as_str()],
        vec!["tasks", "events", task.as_str()],
        vec!["tasks", "list"],
        vec!["approvals", "show", approval.as_str()],
        vec!["approvals", "list", "--status", "all"],
        vec!["ledger", "list"],
        vec!["ledger", "verify"],
        vec!["metrics"],
        vec!["health"],
        vec!["usage", "--by", "day"],
        vec!["usage", "--task", task.as_str(), "--json"],
    ] {
        remote.same_as_embedded(&data, &args);
    }

    let (status, body) = http(&addr, "GET", "/healthz", None, None);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"task_store\""), "{body}");
    let (status, metrics) = common::operator_get(&addr, "/metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.contains("rein_tasks{status=\"completed\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("rein_approval_requests{status=\"approved\"} 1"),
        "{metrics}"
    );
    stop(server);
    assert!(
        !remote.unused.exists(),
        "with --url the CLI opens no store of its own"
    );
}

#[test]
fn pause_resume_snapshot_restore_and_delete_over_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _, remote) = served(dir.path());
    let server_pid = server.0.id();
    let plan = write_plan(
        dir.path(),
        "slow.toml",
        &format!(
            "description = 'slow'\n[[steps]]\nid = 'wait'\nrun = '{}'\n[[steps]]\nid = 'after'\nrun = 'true'\ndepends_on = ['wait']\n",
            until_exists(Path::new("gate"))
        ),
    );
    let runner = remote.spawn_run(&plan);
    let task = remote.first("the task appears", &["tasks", "list", "--json"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    eventually("step `wait` runs", || {
        (step_status(&remote.show(&task), "wait").as_deref() == Some("in_progress")).then_some(())
    });
    let asked = text(&remote.ok(&["tasks", "pause", &task]));
    assert!(
        asked.contains(&format!("the runner (pid {server_pid})")),
        "the server's runner is asked: {asked}"
    );
    std::fs::write(in_workspace(&dir.path().join("data"), &task, "gate"), "").unwrap();
    let ran = runner.wait_with_output().unwrap();
    let ran_text = text(&ran);
    assert_eq!(ran.status.code(), Some(3), "paused: {ran_text}");
    assert!(
        ran_text.contains(&format!("task {task} paused")),
        "{ran_text}"
    );

    let snapshot = json(&remote.ok(&["tasks", "snapshot", &task, "--json"]));
    assert_eq!(snapshot["status"], "paused");
    let snapshot_id = snapshot["id"].as_str().unwrap().to_owned();
    let listed = json(&remote.ok(&["tasks", "snapshots", &task, "--json"]));
    assert_eq!(listed[0]["id"], snapshot_id.as_str());

    let resumed = remote.ok(&["tasks", "resume", &task]);
    assert!(
        text(&resumed).contains(&format!("task {task} completed: 2 steps")),
        "{}",
        text(&resumed)
    );
    // Its history over the API: the pause and the take-up again are points,
    // in order, between the steps.
    let history = json(&remote.ok(&["tasks", "history", &task, "--json"]));
    let said: Vec<&str> = history["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["description"].as_str().unwrap())
        .collect();
    let at = |what: &str| {
        said.iter()
            .position(|d| d.starts_with(what))
            .unwrap_or_else(|| panic!("no {what:?} in {said:?}"))
    };
    assert!(at("step wait started") < at("paused: "), "{said:?}");
    assert!(at("paused: ") < at("resumed"), "{said:?}");
    assert!(at("resumed") < at("step after started"), "{said:?}");
    assert_eq!(history["status"], "completed");
    let table = text(&remote.ok(&["tasks", "history", &task]));
    assert!(table.starts_with("  SEQ  TIME (UTC)"), "{table}");
    assert!(table.contains("step after passed in"), "{table}");

    let restored = json(&remote.ok(&["tasks", "restore", &snapshot_id, "--json"]));
    let copy = restored["id"].as_str().unwrap().to_owned();
    assert_ne!(copy, task);
    assert_eq!(restored["status"], "paused");
    // `resume --all` takes up the restored copy in the server and follows it.
    let all = json(&remote.ok(&["tasks", "resume", "--all", "--json"]));
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0]["id"], copy.as_str());
    assert_eq!(all[0]["status"], "completed");

    remote.ok(&["tasks", "delete", &copy]);
    let gone = common::exits(remote.cmd().args(["tasks", "show", &copy]), 1);
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("not found"),
        "{}",
        String::from_utf8_lossy(&gone.stderr)
    );
    // A bad id is the user's to fix (exit 2), as it is embedded.
    common::exits(remote.cmd().args(["tasks", "show", "nope"]), 2);
    stop(server);
}

#[test]
fn an_unreachable_server_is_named_with_what_to_check() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let said = common::fails(
        rein(&dir.path().join("data")).args([
            "--url",
            &format!("http://127.0.0.1:{port}"),
            "tasks",
            "list",
        ]),
        1,
    );
    assert!(
        said.contains(&format!("cannot reach rein at http://127.0.0.1:{port}"))
            && said.contains("rein serve"),
        "{said}"
    );
    let said = common::fails(
        rein(&dir.path().join("data")).args(["--url", "ftp://example", "tasks", "list"]),
        2,
    );
    assert!(said.contains("http://"));
}

#[test]
fn following_a_task_whose_runner_was_killed_says_so_instead_of_waiting() {
    let (dir, data) = common::scratch();
    let (server, _, remote) = served(dir.path());
    // Run by a `rein run` of its own on the server's store, which is then killed.
    let plan = write_plan(
        dir.path(),
        "stuck.toml",
        &format!(
            "description = 'stuck'\n[[steps]]\nid = 'hold'\nrun = 'touch started; {}'\n",
            until_exists(Path::new("gate"))
        ),
    );
    let mut runner = common::spawn_quiet(rein(&data).arg("run").arg(&plan));
    let task = remote.first("the task appears", &["tasks", "list", "--json"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let started = in_workspace(&data, &task, "started");
    eventually("the step runs", || started.exists().then_some(()));
    runner.kill().unwrap();
    runner.wait().unwrap();
    let out = common::exits(remote.cmd().args(["tasks", "follow", &task]), 3);
    assert!(
        text(&out).contains(&format!(
            "the task's runner is gone; resume it with: rein tasks resume {task}"
        )),
        "{}",
        text(&out)
    );
    // Embedded, the same stream is served here: the same lines, the same exit.
    let here = common::exits(rein(&data).args(["tasks", "follow", &task]), 3);
    assert_eq!(text(&here), text(&out));
    // The sandbox died with its runner (bwrap --die-with-parent): nothing waits on.
    stop(server);
}

#[test]
fn the_state_commands_work_the_same_against_a_server() {
    let (dir, data) = common::scratch();
    let (server, _, remote) = served(dir.path());
    let seed = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../rein-protocol/tests/data/seed-000-shared-state.json");
    let created = json(&remote.ok(&["state", "create", seed.to_str().unwrap(), "--json"]));
    assert_eq!(created["id"], "shs_release_docs");
    let edit = write_plan(
        dir.path(),
        "edit.json",
        r#"{ "id": "edit", "title": "Edit", "writeSet": [{ "kind": "file", "path": "docs/RELEASES.md" }] }"#,
    );
    remote.ok(&[
        "state",
        "add-action",
        "shs_release_docs",
        edit.to_str().unwrap(),
    ]);
    let over_http = text(&remote.ok(&["state", "conflicts", "shs_release_docs"]));
    assert!(over_http.contains("write_write"), "{over_http}");
    for args in [
        vec!["state", "list"],
        vec!["state", "show", "shs_release_docs"],
        vec!["state", "session", "session-release"],
        vec!["state", "show", "shs_release_docs", "--json"],
        vec!["state", "conflicts", "shs_release_docs"],
    ] {
        remote.same_as_embedded(&data, &args);
    }

    // Contracts and evidence, created and changed over the server.
    let contract = write_plan(
        dir.path(),
        "contract.json",
        r#"{ "id": "hctr_notes", "goal": "Ship the notes", "writeSet": [{ "kind": "file", "path": "docs/RELEASES.md" }] }"#,
    );
    remote.ok(&["contracts", "create", contract.to_str().unwrap()]);
    remote.ok(&[
        "contracts",
        "status",
        "hctr_notes",
        "proposed",
        "--reason",
        "ready",
    ]);
    let bundle = write_plan(
        dir.path(),
        "evidence.json",
        r#"{ "id": "evb_notes", "harnessContractId": "hctr_notes", "summary": "the diff", "items": [{ "kind": "diff", "title": "docs/RELEASES.md" }] }"#,
    );
    remote.ok(&["evidence", "create", bundle.to_str().unwrap()]);
    remote.ok(&["evidence", "review", "evb_notes", "--verdict", "approved"]);
    for args in [
        vec!["contracts", "list"],
        vec!["contracts", "show", "hctr_notes"],
        vec!["contracts", "show", "hctr_notes", "--json"],
        vec!["evidence", "list"],
        vec!["evidence", "list", "--contract", "hctr_notes", "--json"],
        vec!["evidence", "show", "evb_notes"],
    ] {
        remote.same_as_embedded(&data, &args);
    }
    let shown = text(&remote.ok(&["contracts", "show", "hctr_notes"]));
    assert!(shown.contains("proposed by "), "{shown}");
    assert!(shown.contains("evidence evb_notes"), "{shown}");
    stop(server);
}

/// Embedded, a command calls the same router a server serves, in-process:
/// what it refuses, and how, is the server's, to the byte and exit code.
#[test]
fn an_embedded_command_refuses_what_a_server_refuses_in_the_same_words() {
    let (dir, data) = common::scratch();
    let (server, _, remote) = served(dir.path());
    for args in [
        // A value the API's query refuses (400: exit 2).
        vec!["tasks", "list", "--cursor", "xyz"],
        vec!["sessions", "list", "--cursor", "abc"],
        // An id of the right form that names nothing (404: exit 1).
        vec!["tasks", "show", "task_01ARZ3NDEKTSV4RRFFQ69G5FAV"],
        vec!["approvals", "show", "apr_01ARZ3NDEKTSV4RRFFQ69G5FAV"],
        vec!["contracts", "show", "hctr_nothing"],
        // A ledger head the chain does not hold.
        vec![
            "ledger",
            "verify",
            "--head",
            "7:00000000000000000000000000000000000000000000000000000000000000ff",
        ],
    ] {
        let over_http = remote.cmd().args(&args).output().unwrap();
        let embedded = rein(&data).args(&args).output().unwrap();
        assert_eq!(
            (
                over_http.status.code(),
                String::from_utf8_lossy(&over_http.stderr)
            ),
            (
                embedded.status.code(),
                String::from_utf8_lossy(&embedded.stderr)
            ),
            "rein {args:?}"
        );
        assert_eq!(over_http.stdout, embedded.stdout, "rein {args:?}");
    }
    // And what it lists, it lists the same.
    for args in [
        vec!["tasks", "list"],
        vec!["sessions", "list", "--json"],
        vec!["usage", "--json"],
    ] {
        remote.same_as_embedded(&data, &args);
    }
    stop(server);
}

/// `rein serve` on a tmpfs of `size` of its own (a mount namespace made with
/// `unshare`), the data directory in it; returns the server, its address and
/// the tmpfs as this process reaches it (through the server's /proc root).
fn start_on_small_disk(dir: &Path, size: &str) -> (Server, String, std::path::PathBuf) {
    let mount = dir.join("small");
    std::fs::create_dir_all(&mount).unwrap();
    let script = format!(
        "mount -t tmpfs -o size={size} tmpfs {m} && exec {rein} --data-dir {m}/data --sandbox none serve --listen 127.0.0.1:0",
        m = mount.display(),
        rein = common::rein_bin().display()
    );
    let mut child = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c", &script])
        .env_remove("REIN_DATA_DIR")
        .env_remove("REIN_URL")
        .env("REIN_TOKEN", common::OPERATOR_TOKEN)
        .stdout(Stdio::piped())
        .spawn()
        .expect("unshare (util-linux) starts rein in a mount namespace of its own");
    let addr = listening(&mut child);
    let seen = std::path::PathBuf::from(format!("/proc/{}/root{}", child.id(), mount.display()));
    (Server(child), addr, seen)
}

fn health(addr: &str) -> (u16, serde_json::Value) {
    let (status, body) = http(addr, "GET", "/healthz", None, None);
    (status, serde_json::from_str(&body).unwrap())
}

/// Writes zeros into `path` until the file system is full.
fn fill(path: &Path) {
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while file.write_all(&chunk).is_ok() {}
    let _ = file.sync_all();
}

#[test]
fn a_full_disk_makes_the_store_unhealthy_and_the_server_takes_its_tasks_up_when_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let (server, addr, disk) = start_on_small_disk(dir.path(), "24m");
    // Little room: still working, degraded, saying how much is left.
    let (status, report) = health(&addr);
    assert_eq!(status, 200, "{report}");
    let store = &report["components"]["task_store"];
    assert_eq!(store["status"], "degraded", "{report}");
    assert!(
        store["detail"].as_str().unwrap().contains("MiB are free"),
        "{store}"
    );

    // A step holds on until the test lets it go; its result is written then.
    let hold = disk.join("hold");
    std::fs::write(&hold, "").unwrap();
    let inside = format!("{}/hold", dir.path().join("small").display());
    let plan = format!(
        "description = 'full disk'\n[[steps]]\nid = 'a'\nidempotent = true\n\
         run = 'while [ -e {inside} ]; do sleep 0.01; done'\n\
         [[steps]]\nid = 'b'\nrun = 'echo after'\ndepends_on = ['a']\n"
    );
    let (status, body) = http(
        &addr,
        "POST",
        "/admin/tasks",
        Some(common::OPERATOR_TOKEN),
        Some(("application/toml", &plan)),
    );
    assert_eq!(status, 201, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["task"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let task = |addr: &str| {
        let (_, body) = common::operator_get(addr, &format!("/admin/tasks/{id}"));
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["task"].clone()
    };
    eventually("step a runs", || {
        (step_status(&task(&addr), "a").as_deref() == Some("in_progress")).then_some(())
    });

    // The disk fills; the step ends; its result cannot be written.
    fill(&disk.join("fill"));
    std::fs::remove_file(&hold).unwrap();
    let report = eventually("the store is reported unhealthy", || {
        let (status, report) = health(&addr);
        (status == 503).then_some(report)
    });
    assert_eq!(
        report["components"]["task_store"]["status"], "unhealthy",
        "{report}"
    );
    assert!(
        report["components"]["task_store"]["detail"]
            .as_str()
            .unwrap()
            .contains("full"),
        "{report}"
    );
    assert_ne!(task(&addr)["status"], "completed");

    // Space returns: the server takes its task up again by itself.
    std::fs::remove_file(disk.join("fill")).unwrap();
    let done = eventually("the task completes", || {
        let t = task(&addr);
        (t["status"] == "completed").then_some(t)
    });
    assert_eq!(step_status(&done, "b").as_deref(), Some("completed"));
    let (status, report) = health(&addr);
    assert_eq!(status, 200, "{report}");
    assert!(
        report["components"]["task_store"]["detail"]
            .as_str()
            .unwrap()
            .contains("a write failed earlier"),
        "{report}"
    );
    drop(server);
}

/// `rein serve` with `args` after `serve`, under a file limit of `files`
/// (util-linux `prlimit`); the server and its address.
fn start_with(data: &Path, files: u32, args: &[&str]) -> (Server, String) {
    let mut child = Command::new("prlimit")
        .arg(format!("--nofile={files}:{files}"))
        .arg(common::rein_bin())
        .arg("--data-dir")
        .arg(data)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("REIN_DATA_DIR")
        .env_remove("REIN_URL")
        .env("REIN_TOKEN", common::OPERATOR_TOKEN)
        .stdout(Stdio::piped())
        .spawn()
        .expect("prlimit (util-linux) starts rein serve");
    let addr = listening(&mut child);
    (Server(child), addr)
}

/// Lets this test process hold `n` more connections.
fn allow_files(n: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if soft < n + 256 {
        setrlimit(Resource::RLIMIT_NOFILE, hard.min(n + 4096).max(soft), hard).unwrap();
    }
}

/// Whether the server has closed `stream` (or answered it: a refusal), waiting
/// up to `wait`.
fn closed_by_server(stream: &mut TcpStream, wait: Duration) -> bool {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 512];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // a refusal being written; read on to its end
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn slow_connections_are_cut_and_healthz_answers_while_a_thousand_are_open() {
    allow_files(1100);
    let dir = tempfile::tempdir().unwrap();
    // The file limit of the report: 1,024, more slow connections than that.
    let (server, addr) = start_with(&dir.path().join("data"), 1024, &["--header-timeout", "2s"]);
    let mut slow: Vec<TcpStream> = (0..1000)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(b"GET /admin/tasks HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
            s
        })
        .collect();
    // With all of them open, a health probe gets through.
    let started = Instant::now();
    let (status, body) = http(&addr, "GET", "/healthz", None, None);
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // None of them is served forever: each is cut by its deadline (or was
    // refused at once, with a 503 that says why).
    let mut cut = 0;
    for s in &mut slow {
        if closed_by_server(s, Duration::from_secs(5)) {
            cut += 1;
        }
    }
    assert_eq!(cut, 1000, "every slow connection was closed by the server");
    drop(slow);
    // And the server serves as before.
    let (status, _) = common::operator_get(&addr, "/admin/tasks");
    assert_eq!(status, 200);
    stop(server);
}

#[test]
fn sigterm_stops_the_server_within_its_grace_with_a_stream_and_a_half_sent_request_open() {
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = start_with(&dir.path().join("data"), 4096, &["--shutdown-grace", "3s"]);
    let mut stream = TcpStream::connect(&addr).unwrap();
    stream
        .write_all(
            format!("GET /admin/events/stream HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\r\n", common::OPERATOR_TOKEN)
                .as_bytes(),
        )
        .unwrap();
    let mut head = [0u8; 64];
    let n = stream.read(&mut head).unwrap();
    assert!(String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 200"));
    let mut half = TcpStream::connect(&addr).unwrap();
    half.write_all(b"POST /admin/tasks HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pl")
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let asked = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(server.0.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    // The event stream is ended by the server, not left hanging.
    assert!(closed_by_server(&mut stream, Duration::from_secs(5)));
    let mut server = server;
    let status = loop {
        if let Some(status) = server.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            asked.elapsed() < Duration::from_secs(6),
            "rein serve did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    assert!(
        asked.elapsed() < Duration::from_secs(4),
        "{:?}",
        asked.elapsed()
    );
}

/// A connection to `addr` from the loopback address `from` (127.0.0.0/8 is
/// all this machine's): another client, as the server sees it.
fn connect_from(from: &str, addr: &str) -> TcpStream {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let stream = runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
        socket.connect(addr.parse().unwrap()).await.unwrap()
    });
    let stream = stream.into_std().unwrap();
    stream.set_nonblocking(false).unwrap();
    stream
}

/// One request on a connection from `from`: its status, its head and body.
fn request_from(from: &str, addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut stream = connect_from(from, addr);
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{auth}\r\n"
    )
    .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, answer)
}

/// Wrong tokens from one address: after ten, that address gets 429 with
/// `Retry-After` (the right token too), while the right token from another
/// address is served.
#[test]
fn failed_sign_ins_are_throttled_per_client_address() {
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = start(&dir.path().join("data"), common::OPERATOR_TOKEN);
    let mut statuses = Vec::new();
    for i in 0..15 {
        let (status, _) = request_from(
            "127.0.0.1",
            &addr,
            "/admin/tasks",
            Some(&format!("guess-{i:012}")),
        );
        statuses.push(status);
    }
    assert_eq!(&statuses[..10], &[401; 10], "{statuses:?}");
    assert_eq!(&statuses[10..], &[429; 5], "{statuses:?}");
    let (status, answer) = request_from(
        "127.0.0.1",
        &addr,
        "/admin/tasks",
        Some(common::OPERATOR_TOKEN),
    );
    assert_eq!(status, 429, "{answer}");
    let retry: u64 = answer
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("retry-after: ")
                .map(|v| v.trim().to_owned())
        })
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After header");
    assert!((1..=60).contains(&retry), "{answer}");
    assert!(answer.contains("too_many_failed_sign_ins"), "{answer}");
    // Another address, the right token: served.
    let (status, answer) = request_from(
        "127.0.0.2",
        &addr,
        "/admin/tasks",
        Some(common::OPERATOR_TOKEN),
    );
    assert_eq!(status, 200, "{answer}");
    // Health needs no sign-in and is not throttled.
    assert_eq!(request_from("127.0.0.1", &addr, "/healthz", None).0, 200);
    stop(server);
}

/// `--sign-in-failures` sets how many wrong tokens an address may send.
#[test]
fn the_number_of_failed_sign_ins_is_the_operators() {
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = start_with(&dir.path().join("data"), 4096, &["--sign-in-failures", "3"]);
    let statuses: Vec<u16> = (0..5)
        .map(|i| {
            let token = format!("guess-{i:012}");
            request_from("127.0.0.1", &addr, "/admin/tasks", Some(&token)).0
        })
        .collect();
    assert_eq!(statuses, [401, 401, 401, 429, 429]);
    let (_, answer) = request_from("127.0.0.1", &addr, "/admin/tasks", Some("guess-again-0000"));
    assert!(answer.contains("3 failed sign-ins"), "{answer}");
    stop(server);
}

/// One client holding its cap of idle connections gets 429 for the next
/// (a health probe still answered); another client is served.
#[test]
fn one_client_cannot_hold_every_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = start_with(
        &dir.path().join("data"),
        4096,
        &["--max-connections-per-client", "50"],
    );
    let idle: Vec<TcpStream> = (0..50).map(|_| connect_from("127.0.0.1", &addr)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let (status, answer) = request_from("127.0.0.1", &addr, "/admin/tasks", None);
    assert_eq!(status, 429, "{answer}");
    assert!(
        answer.contains("too_many_connections_from_client") && answer.contains("50 connections"),
        "{answer}"
    );
    // A client whose request arrives in two parts still reads its refusal:
    // the server reads the rest before it closes, so the connection is not
    // reset under the client's second write.
    let mut stream = connect_from("127.0.0.1", &addr);
    stream.write_all(b"GET /admin/tasks").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    stream
        .write_all(format!(" HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
        .expect("the second part is taken, not reset");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .expect("the refusal is read, not reset");
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert_eq!(request_from("127.0.0.1", &addr, "/healthz", None).0, 200);
    let (status, answer) = request_from(
        "127.0.0.2",
        &addr,
        "/admin/tasks",
        Some(common::OPERATOR_TOKEN),
    );
    assert_eq!(status, 200, "{answer}");
    // Its connections closed, the client is served again.
    drop(idle);
    eventually("the first client is served again", || {
        (request_from(
            "127.0.0.1",
            &addr,
            "/admin/tasks",
            Some(common::OPERATOR_TOKEN),
        )
        .0 == 200)
            .then_some(())
    });
    stop(server);
}

#[test]
fn fork_and_retry_over_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let (server, addr, remote) = served(dir.path());
    let plan = write_plan(
        dir.path(),
        "fails.toml",
        "description = 'fails'\n[[steps]]\nid = 'write'\nrun = 'echo one > a.txt'\n[[steps]]\nid = 'check'\nrun = 'test -f missing'\ndepends_on = ['write']\n",
    );
    common::exits(remote.cmd().arg("run").arg(&plan).arg("--quiet"), 1);
    let task = remote.first("the task appears", &["tasks", "list", "--json"])["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Forked after `write` with `check` corrected: the server runs it, the
    // CLI follows it to its end.
    let out = remote.ok(&[
        "tasks",
        "fork",
        &task,
        "--after",
        "write",
        "--set",
        "check.run=cat a.txt",
        "--json",
    ]);
    let fork = json(&out);
    assert_eq!(fork["status"], "completed", "{fork}");
    assert_eq!(fork["forked_from"]["task_id"], task.as_str());
    let retried = json(&remote.ok(&["tasks", "retry", &task, "--set", "check.run=true", "--json"]));
    assert_eq!(retried["status"], "completed", "{retried}");
    let (status, body) = http(
        &addr,
        "GET",
        &format!("/admin/tasks?forked_from={task}"),
        Some(&remote.token),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let listed: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(listed["items"].as_array().unwrap().len(), 2, "{listed}");

    // Mistakes are the caller's, named; nothing is made of them.
    let post = |path: &str, body: &str| {
        http(
            &addr,
            "POST",
            path,
            Some(&remote.token),
            Some(("application/json", body)),
        )
    };
    let fork_path = format!("/admin/tasks/{task}/fork");
    for (body, code, says) in [
        ("{}", 400, "say where the fork starts"),
        (r#"{"before":"check","at":3}"#, 400, "not several"),
        (r#"{"befor":"check"}"#, 400, "befor"),
        (r#"{"after":"check"}"#, 409, "never completed"),
        (
            r#"{"before":"write","turn":1}"#,
            400,
            "`turn` goes with `at`",
        ),
        (r#"{"after":"write","workspace":"/tmp"}"#, 400, "workspace"),
    ] {
        let (status, answer) = post(&fork_path, body);
        assert_eq!(status, code, "{body}: {answer}");
        assert!(answer.contains(says), "{body}: {answer}");
    }
    let (status, answer) = post(
        "/admin/tasks/task_01ARZ3NDEKTSV4RRFFQ69G5FAV/fork",
        r#"{"after":"write"}"#,
    );
    assert_eq!(status, 404, "{answer}");
    let (status, answer) = post(
        &format!("/admin/tasks/{}/retry", fork["id"].as_str().unwrap()),
        "{}",
    );
    assert_eq!(status, 409, "a completed task is not retried: {answer}");
    assert_eq!(
        json(&remote.ok(&["tasks", "list", "--json"]))["items"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    stop(server);
}
