//! Plan steps under the sandbox, end to end: `rein run` confines every command
//! step by default, records the sandbox with each run, refuses to run steps when
//! no sandbox can, and runs them unsandboxed only when told to — loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::{
    eventually, json, rein, run_ok, show, step_status, task_ids, until_exists, write_plan,
};

/// The `output` of a step's newest checkpoint.
fn step_output(state: &serde_json::Value, step: &str) -> serde_json::Value {
    common::checkpoint(state, step, None)["output"].clone()
}

/// Runs a plan whose second step writes into a directory of the host's beside
/// the data directory (absent or refused in the sandbox); `no_path` runs rein
/// without PATH, so bubblewrap is not found. Returns the state and the file the
/// step tried to write.
fn escape_attempt(dir: &std::path::Path, no_path: bool) -> (serde_json::Value, std::path::PathBuf) {
    let data = dir.join("data");
    std::fs::create_dir_all(dir.join("outside")).unwrap();
    let outside = dir.join("outside").join("escaped.txt");
    let plan = write_plan(
        dir,
        "p.toml",
        &format!(
            "description = 'confined'\n\
             [[steps]]\nid = 'inside'\nrun = 'echo ok > inside.txt'\n\
             [[steps]]\nid = 'escape'\nrun = 'echo x > {}'\ndepends_on = ['inside']\n",
            outside.display()
        ),
    );
    let mut cmd = rein(&data);
    if no_path {
        // The steps still find `sh`: the sandbox sets its own PATH.
        cmd.env("PATH", "");
    }
    let out = cmd.arg("run").arg(&plan).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "the escaping step fails the task: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !outside.exists(),
        "nothing was written outside the workspace"
    );
    (show(&data, &task_ids(&data)[0]), outside)
}

/// Both steps ran under `kind`, and the escape was refused with `message`.
fn assert_confined(state: &serde_json::Value, kind: &str, message: &str) {
    assert_eq!(step_output(state, "inside")["sandbox"], kind);
    let escape = step_output(state, "escape");
    assert_eq!(escape["sandbox"], kind);
    assert!(
        escape["stderr_tail"].as_str().unwrap().contains(message),
        "{escape}"
    );
}

#[test]
fn steps_run_sandboxed_and_each_run_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (state, _) = escape_attempt(dir.path(), false);
    assert_confined(&state, "bubblewrap", "Directory nonexistent");
}

#[test]
fn a_steps_memory_limit_and_network_come_from_the_plan() {
    let (dir, data, plan) = common::with_plan(
        "p.toml",
        "description = 'limits'\n\
         [[steps]]\nid = 'big'\nmemory_mb = 128\n\
         run = \"python3 -c 'b = bytearray(512 * 1024 * 1024)'\"\n",
    );
    common::exits(rein(&data).arg("run").arg(&plan), 1);
    let state = show(&data, &task_ids(&data)[0]);
    let big = step_output(&state, "big");
    assert!(
        big["stderr_tail"].as_str().unwrap().contains("MemoryError"),
        "{big}"
    );
    // Confinement keys belong to command steps.
    let bad = write_plan(
        dir.path(),
        "bad.toml",
        "description = 'bad'\n[[steps]]\nid = 'ask'\nkind = 'approve'\ntitle = 'Go?'\nnetwork = true\n",
    );
    let said = common::fails(rein(&data).args(["plan", "check"]).arg(&bad), 2);
    assert!(said.contains("`network`"));
}

#[test]
fn with_no_sandbox_available_steps_are_refused_with_what_to_install() {
    let (_dir, data, plan) = common::with_plan(
        "p.toml",
        "description = 'x'\n[[steps]]\nid = 'a'\nrun = 'true'\n",
    );
    // No PATH: bubblewrap cannot be found, and it is the sandbox asked for.
    let said = common::fails(
        rein(&data)
            .env("PATH", "")
            .args(["--sandbox", "bubblewrap", "run"])
            .arg(&plan),
        1,
    );
    assert!(
        said.contains("no sandbox can run here")
            && said.contains("apt-get install bubblewrap")
            && said.contains("--sandbox none"),
        "{said}"
    );
    assert!(task_ids(&data).is_empty(), "no task was created");
}

#[test]
fn sandbox_none_runs_unsandboxed_loudly_and_marks_every_run() {
    let (dir, data) = common::scratch();
    let outside = dir.path().join("outside.txt");
    let plan = write_plan(
        dir.path(),
        "p.toml",
        &format!(
            "description = 'open'\n[[steps]]\nid = 'a'\nrun = 'echo x > {}'\n",
            outside.display()
        ),
    );
    let out = run_ok(rein(&data).args(["--sandbox", "none", "run"]).arg(&plan));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("warning: --sandbox none"), "{said}");
    assert!(outside.exists(), "unsandboxed, the step could write there");
    let state = json(&run_ok(rein(&data).args([
        "tasks",
        "show",
        &task_ids(&data)[0],
        "--json",
    ])));
    assert_eq!(step_output(&state, "a")["sandbox"], "none");
}

#[test]
fn without_bubblewrap_auto_falls_back_to_landlock() {
    let dir = tempfile::tempdir().unwrap();
    let (state, _) = escape_attempt(dir.path(), true);
    assert_confined(&state, "landlock", "Permission denied");
}

#[test]
fn a_finished_tasks_fresh_workspace_is_kept_or_cleaned_by_the_plan() {
    let (dir, data) = common::scratch();
    let run = |name: &str, cleanup: &str, command: &str, extra: &[&str]| {
        let plan = write_plan(
            dir.path(),
            name,
            &format!(
                "description = '{name}'\ncleanup = '{cleanup}'\n[[steps]]\nid = 'a'\nrun = '{command}'\n"
            ),
        );
        let out = rein(&data)
            .arg("run")
            .args(extra)
            .arg(&plan)
            .output()
            .unwrap();
        let id = task_ids(&data)[0].clone();
        (out.status.code(), data.join("workspaces").join(id))
    };
    let (code, ws) = run("ok.toml", "on_success", "touch made", &[]);
    assert_eq!(code, Some(0));
    assert!(!ws.exists(), "completed: removed");
    let (code, ws) = run("bad.toml", "on_success", "touch made; false", &[]);
    assert_eq!(code, Some(1));
    assert!(ws.join("made").exists(), "failed: kept for a look");
    let (code, ws) = run("always.toml", "always", "false", &[]);
    assert_eq!(code, Some(1));
    assert!(!ws.exists(), "always: removed however it ended");
    let (code, ws) = run("keep.toml", "keep", "touch made", &[]);
    assert_eq!(code, Some(0));
    assert!(ws.join("made").exists(), "keep: the default");
    // A workspace the task was given is never removed.
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let (code, _) = run(
        "given.toml",
        "always",
        "touch made",
        &["--workspace", project.to_str().unwrap()],
    );
    assert_eq!(code, Some(0));
    assert!(project.join("made").exists());
    // An unknown policy is refused, naming the key.
    let bad = write_plan(
        dir.path(),
        "odd.toml",
        "description = 'odd'\ncleanup = 'sometimes'\n[[steps]]\nid = 'a'\nrun = 'true'\n",
    );
    let said = common::fails(rein(&data).args(["plan", "check"]).arg(&bad), 2);
    assert!(said.contains("sometimes"));
}

#[test]
fn a_steps_process_limit_binds_and_each_run_says_whether_it_did() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = dir.path().join("data");
    let plan = write_plan(
        dir.path(),
        "p.toml",
        "description = 'fork'\n\
         [[steps]]\nid = 'many'\nprocesses = 8\n\
         run = 'i=0; while [ $i -lt 20 ]; do sleep 0.3 & i=$((i+1)); done; wait; echo all'\n",
    );
    let root = nix::unistd::geteuid().is_root();

    // A fresh workspace is rein's own: as root, the limit cannot bind, and the
    // run says so; as anyone else it binds.
    let out = rein(&data).arg("run").arg(&plan).output().unwrap();
    let state = show(&data, &task_ids(&data)[0]);
    let many = step_output(&state, "many");
    assert_eq!(many["process_limit"]["limit"], 8);
    assert_eq!(many["process_limit"]["enforced"], !root, "{many}");
    if root {
        assert_eq!(out.status.code(), Some(0), "{many}");
        assert!(
            many["process_limit"]["note"]
                .as_str()
                .unwrap()
                .contains("rein runs as root"),
            "{many}"
        );
    } else {
        assert_eq!(out.status.code(), Some(1), "{many}");
        assert!(
            many["stderr_tail"].as_str().unwrap().contains("fork"),
            "{many}"
        );
    }

    // A workspace that belongs to someone else: a root rein runs the step as
    // its owner, and the limit binds.
    if root {
        let ws = dir.path().join("theirs");
        std::fs::create_dir(&ws).unwrap();
        std::os::unix::fs::chown(&ws, Some(65534), Some(65534)).unwrap();
        common::exits(
            rein(&data)
                .arg("run")
                .arg("--workspace")
                .arg(&ws)
                .arg(&plan),
            1,
        );
        let state = show(&data, &task_ids(&data)[0]);
        let many = step_output(&state, "many");
        assert_eq!(many["run_as_uid"], 65534, "{many}");
        assert_eq!(many["process_limit"]["enforced"], true, "{many}");
        assert!(
            many["stderr_tail"].as_str().unwrap().contains("fork"),
            "{many}"
        );
        // What the step writes stays its owner's.
        let touch = write_plan(
            dir.path(),
            "touch.toml",
            "description = 'touch'\n[[steps]]\nid = 'touch'\nrun = 'echo hi > made.txt'\n",
        );
        run_ok(
            rein(&data)
                .arg("run")
                .arg("--workspace")
                .arg(&ws)
                .arg(&touch),
        );
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(ws.join("made.txt")).unwrap().uid(), 65534);
    }
}

#[test]
fn rein_health_probes_the_sandbox_for_real() {
    let (_dir, data) = common::scratch();
    let report = json(&run_ok(rein(&data).args(["health", "--json"])));
    assert_eq!(report["status"], "healthy", "{report}");
    let sandbox = report["components"]["sandbox_manager"]["detail"]
        .as_str()
        .unwrap();
    assert!(
        sandbox.contains("ran a command under bubblewrap"),
        "{report}"
    );
    assert_eq!(report["components"]["task_store"]["status"], "healthy");
    // With no sandbox to be found, the report says so and scripts get exit 1.
    let out = common::exits(
        rein(&data)
            .env("PATH", "")
            .args(["--sandbox", "bubblewrap", "health"]),
        1,
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with("unhealthy") && said.contains("sandbox_manager     unhealthy"),
        "{said}"
    );
}

/// `rein run PLAN` (and `rein plan check PLAN`) with `workspace = WS` in the
/// plan: both refuse it, exit 2, with stderr naming `rule`; no task is made.
fn assert_workspace_refused(dir: &std::path::Path, data: &std::path::Path, ws: &str, rule: &str) {
    let plan = write_plan(
        dir,
        "ws.toml",
        &format!(
            "description = 'ws'\nworkspace = '{ws}'\n[[steps]]\nid = 'a'\nrun = 'touch made'\n"
        ),
    );
    for args in [&["run"][..], &["plan", "check"]] {
        let out = rein(data).args(args).arg(&plan).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{ws} ({args:?}): {said}");
        assert!(
            said.contains("workspace") && said.contains(rule),
            "{ws}: {said}"
        );
    }
    assert!(task_ids(data).is_empty(), "{ws}: no task was created");
}

#[test]
fn workspaces_that_would_switch_the_sandbox_off_are_refused_naming_the_rule() {
    let (dir, data) = common::scratch();
    std::fs::create_dir_all(&data).unwrap();
    std::os::unix::fs::symlink("/", dir.path().join("to-root")).unwrap();
    for (ws, rule) in [
        ("/", "`/` is the whole file system"),
        (
            "../../../../../../../../../..",
            "`/` is the whole file system",
        ),
        ("to-root", "`/` is the whole file system"),
        ("/etc", "`/etc` is a system directory"),
        ("/usr/local/lib", "`/usr` is a system directory"),
        ("/home", "`/home` itself"),
        // The plan's own directory holds the data directory.
        (".", "contains rein's data directory"),
        ("data", "contains rein's data directory"),
        ("data/workspaces", "inside rein's data directory"),
    ] {
        assert_workspace_refused(dir.path(), &data, ws, rule);
    }
    // A directory beside the data directory is a workspace.
    std::fs::create_dir_all(dir.path().join("project")).unwrap();
    let plan = write_plan(
        dir.path(),
        "ok.toml",
        "description = 'ok'\nworkspace = 'project'\n[[steps]]\nid = 'a'\nrun = 'touch made'\n",
    );
    run_ok(rein(&data).arg("run").arg(&plan));
    assert!(dir.path().join("project/made").exists());
    // A step may not read the data directory either.
    let plan = write_plan(
        dir.path(),
        "read.toml",
        "description = 'read'\nworkspace = 'project'\n[[steps]]\nid = 'a'\nrun = 'true'\nallow_read = ['.']\n",
    );
    let out = rein(&data).arg("run").arg(&plan).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("allow_read") && said.contains("contains rein's data directory"),
        "{said}"
    );
}

/// The data directory with the defaults of a user whose home is `home`.
fn default_data_dir(home: &std::path::Path) -> std::path::PathBuf {
    home.join(".local/share/rein")
}

/// `rein ARGS` as a user whose home is `home`, on the default data directory.
fn rein_at_home(home: &std::path::Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(common::rein_bin());
    for setting in [
        "REIN_DATA_DIR",
        "REIN_URL",
        "REIN_TOKEN",
        "REIN_SANDBOX",
        "XDG_DATA_HOME",
    ] {
        cmd.env_remove(setting);
    }
    cmd.env("HOME", home);
    // The test's home is declared for workspaces: a test run as root gives
    // its steps directories of root's there.
    cmd.env("REIN_WORKSPACE_ROOTS", home);
    cmd
}

#[test]
fn a_plan_in_a_home_directory_cannot_touch_the_default_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home/ana");
    std::fs::create_dir_all(home.join("project")).unwrap();
    // A first task makes the default data directory and its store.
    let first = write_plan(
        &home,
        "first.toml",
        "description = 'first'\n[[steps]]\nid = 'a'\nrun = 'true'\n",
    );
    run_ok(rein_at_home(&home).arg("run").arg(&first));
    let data = default_data_dir(&home);
    let db = data.join("rein.db");
    assert!(db.exists());
    // `workspace = "."` in a plan kept at home would hold the store: refused.
    let plan = write_plan(
        &home,
        "home.toml",
        "description = 'home'\nworkspace = '.'\n[[steps]]\nid = 'a'\nrun = 'rm -f .local/share/rein/rein.db'\n",
    );
    let out = rein_at_home(&home).arg("run").arg(&plan).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("contains rein's data directory"), "{said}");
    // From a project beside it, under either sandbox, the store is out of reach.
    let reach = format!(
        "description = 'reach'\nworkspace = 'project'\n\
         [[steps]]\nid = 'a'\nrun = 'ls {data}; rm -f {db}; echo x >> {db}'\n",
        data = data.display(),
        db = db.display()
    );
    let reach = write_plan(&home, "reach.toml", &reach);
    let before = std::fs::read(&db).unwrap();
    for sandbox in ["bubblewrap", "landlock"] {
        let out = rein_at_home(&home)
            .args(["--sandbox", sandbox, "run"])
            .arg(&reach)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{sandbox}: the step fails");
        assert!(db.exists(), "{sandbox}: the store is still there");
    }
    let after = std::fs::read(&db).unwrap();
    assert!(
        after.len() >= before.len() && !after.ends_with(b"x\n"),
        "nothing was appended to the store"
    );
    // And the run says what confined it.
    let list = json(&run_ok(
        rein_at_home(&home).args(["tasks", "list", "--json"]),
    ))["items"]
        .clone();
    let id = list[0]["id"].as_str().unwrap();
    let state = json(&run_ok(
        rein_at_home(&home).args(["tasks", "show", id, "--json"]),
    ));
    let reach = &step_output(&state, "a")["reach"];
    assert_eq!(reach["sandbox"], "landlock", "{reach}");
    assert_eq!(
        reach["writable"],
        serde_json::json!([home.join("project").canonicalize().unwrap()])
    );
}

/// The attack of a workspace swapped while its task runs, as another user
/// runs it: the workspace `outer/inner` lies in a directory of theirs
/// (`nobody`'s, when the test runs as root); while step `a` runs, they move
/// `inner` away and put a symlink to `/` in its place. Step `b` would then
/// have run with `/` as its workspace, writable. Instead the task pauses,
/// naming what changed, and `b` never starts; once the directory is back,
/// a resume runs `b` in it.
#[test]
fn a_workspace_swapped_for_a_symlink_while_its_task_runs_pauses_the_task() {
    use std::os::unix::fs::PermissionsExt;
    let root = nix::unistd::geteuid().is_root();
    for sandbox in ["bubblewrap", "landlock"] {
        let dir = tempfile::tempdir().unwrap();
        let place = dir.path().canonicalize().unwrap();
        std::fs::set_permissions(&place, std::fs::Permissions::from_mode(0o755)).unwrap();
        let data = place.join("data");
        let outer = place.join("outer");
        let inner = outer.join("inner");
        std::fs::create_dir_all(&inner).unwrap();
        if root {
            // The attacker's directory; the workspace in it stays root's.
            std::os::unix::fs::chown(&outer, Some(65534), Some(65534)).unwrap();
        }
        // What step `b` writes in its working directory: in `/` had it
        // been given the symlink's target.
        let name = format!("rein-swap-{}-{sandbox}", std::process::id());
        let escaped = Path::new("/").join(&name);
        let stolen = Path::new("/").join(format!("{name}.db"));
        let plan = write_plan(
            &place,
            "p.toml",
            &format!(
                "description = 'swap'\n\
                 [[steps]]\nid = 'a'\nrun = 'touch a-started; {}'\n\
                 [[steps]]\nid = 'b'\ndepends_on = ['a']\n\
                 run = 'echo ran > {name}; cat {db} > {name}.db 2>/dev/null; true'\n",
                until_exists(Path::new("go")),
                db = data.join("rein.db").display(),
            ),
        );
        let run = rein(&data)
            .args(["--sandbox", sandbox, "run", "--json", "--workspace"])
            .arg(&inner)
            .arg(&plan)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        eventually("step a runs", || {
            inner.join("a-started").exists().then_some(())
        });
        // The other user swaps the workspace for a symlink to `/`.
        let swap = "mv inner inner.old && ln -s / inner";
        let mut attacker = Command::new("sh");
        attacker.args(["-c", swap]).current_dir(&outer);
        if root {
            attacker = Command::new("setpriv");
            attacker
                .args([
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "sh",
                    "-c",
                    swap,
                ])
                .current_dir(&outer);
        }
        assert!(attacker.status().unwrap().success(), "{sandbox}: the swap");
        std::fs::write(outer.join("inner.old/go"), "").unwrap();
        let out = run.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        let wrote = [&escaped, &stolen].map(|p| p.exists());
        for p in [&escaped, &stolen] {
            let _ = std::fs::remove_file(p);
        }
        assert_eq!(
            wrote,
            [false, false],
            "{sandbox}: step b wrote in `/`: {said}"
        );
        assert_eq!(out.status.code(), Some(3), "{sandbox}: paused: {said}");
        let id = task_ids(&data)[0].clone();
        let state = show(&data, &id);
        assert_eq!(state["status"], "paused", "{sandbox}: {state}");
        let reason = state["context"]["blocked_reason"].as_str().unwrap();
        assert!(
            reason.contains(&inner.display().to_string()) && reason.contains("symlink"),
            "{sandbox}: {reason}"
        );
        assert_eq!(step_status(&state, "b"), None, "{sandbox}: b never started");
        // Resumed while the symlink is still there: paused again.
        let out = rein(&data)
            .args(["--sandbox", sandbox, "tasks", "resume", &id])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{sandbox}");
        assert_eq!(step_status(&show(&data, &id), "b"), None);
        // The directory put back: b runs, in it.
        std::fs::remove_file(&inner).unwrap();
        std::fs::rename(outer.join("inner.old"), &inner).unwrap();
        run_ok(rein(&data).args(["--sandbox", sandbox, "tasks", "resume", &id]));
        assert_eq!(std::fs::read_to_string(inner.join(&name)).unwrap(), "ran\n");
        assert!(!escaped.exists() && !stolen.exists(), "{sandbox}");
    }
}
