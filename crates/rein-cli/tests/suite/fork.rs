//! `rein tasks fork` and `rein tasks retry` end to end, embedded: a fork's
//! files and modes as they were at its point, the source's as they are; the
//! step that already ran asked about; a failed task retried once its cause
//! is fixed; exit codes, `--json`, and mistakes named.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{json, rein, run_ok, show, task_ids, write_plan};

/// A plan whose last step needs `flag` (outside the workspace) to exist.
fn plan(dir: &Path) -> std::path::PathBuf {
    let outside = dir.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    write_plan(
        dir,
        "plan.toml",
        &format!(
            r#"
description = "fork me"
[[steps]]
id = "write"
run = "echo one > a.txt && chmod 640 a.txt && mkdir d && printf x > d/b && chmod 750 d"
[[steps]]
id = "append"
run = "echo two >> a.txt"
depends_on = ["write"]
[[steps]]
id = "check"
run = "test -f {flag} && wc -l < a.txt > n.txt"
allow_read = ["{outside}"]
idempotent = true
depends_on = ["append"]
"#,
            flag = outside.join("flag").display(),
            outside = outside.display()
        ),
    )
}

fn workspace(data: &Path, state: &serde_json::Value) -> std::path::PathBuf {
    let _ = data;
    Path::new(state["resources"]["workspace_path"].as_str().unwrap()).to_owned()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_task_is_forked_after_a_step_and_retried_after_its_cause_is_fixed() {
    let (dir, data) = common::scratch();
    let plan = plan(dir.path());
    common::exits(rein(&data).arg("run").arg(&plan).arg("--quiet"), 1);
    let source = task_ids(&data)[0].clone();
    let source_state = show(&data, &source);
    let source_events = json(&run_ok(
        rein(&data).args(["tasks", "events", &source, "--json"]),
    ));

    // After `write`: its files as they were, and `append` asked about.
    let out = common::fork_after(&data, &source, "write")
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "waits for a person: {}",
        stderr(&out)
    );
    let fork = json(&out);
    assert_eq!(fork["status"], "paused");
    assert_eq!(fork["forked_from"]["task_id"], source.as_str());
    let said = stderr(&out);
    assert!(
        said.contains(&format!("forked from task {source} at event"))
            && said.contains("workspace kept: 2 files")
            && said.contains("`append` already ran in"),
        "{said}"
    );
    let fork_id = fork["id"].as_str().unwrap().to_owned();
    let mine = workspace(&data, &fork);
    assert_eq!(
        std::fs::read_to_string(mine.join("a.txt")).unwrap(),
        "one\n"
    );
    assert_eq!(mode(&mine.join("a.txt")), 0o640);
    assert_eq!(mode(&mine.join("d")), 0o750);
    assert_eq!(std::fs::read(mine.join("d/b")).unwrap(), b"x");
    let theirs = workspace(&data, &source_state);
    assert_eq!(
        std::fs::read_to_string(theirs.join("a.txt")).unwrap(),
        "one\ntwo\n"
    );
    let approvals = json(&run_ok(rein(&data).args([
        "approvals",
        "list",
        "--task",
        &fork_id,
        "--json",
    ])));
    assert_eq!(approvals[0]["step_id"], "append");
    assert!(
        approvals[0]["description"]
            .as_str()
            .unwrap()
            .contains("echo two >> a.txt"),
        "{approvals}"
    );

    // A failed task is retried: fork before `check`, which runs once the
    // flag is there.
    std::fs::write(dir.path().join("outside/flag"), "").unwrap();
    let out = common::exits(rein(&data).args(["tasks", "retry", &source, "--json"]), 0);
    let retried = json(&out);
    assert_eq!(retried["status"], "completed");
    assert_eq!(
        std::fs::read_to_string(workspace(&data, &retried).join("n.txt"))
            .unwrap()
            .trim(),
        "2"
    );

    // The source is as it was, and links its forks; each fork its source.
    assert_eq!(
        json(&run_ok(
            rein(&data).args(["tasks", "events", &source, "--json"])
        )),
        source_events
    );
    assert_eq!(common::forks_of(&data, &source).len(), 2);
    let text =
        String::from_utf8(run_ok(rein(&data).args(["tasks", "show", &source])).stdout).unwrap();
    assert!(
        text.contains(&format!("fork {fork_id} from event")),
        "{text}"
    );
    let text =
        String::from_utf8(run_ok(rein(&data).args(["tasks", "show", &fork_id])).stdout).unwrap();
    assert!(
        text.contains(&format!("forked from {source} at event")),
        "{text}"
    );
    let history = json(&run_ok(
        rein(&data).args(["tasks", "history", &fork_id, "--json"]),
    ));
    assert!(
        history["points"][0]["description"]
            .as_str()
            .unwrap()
            .starts_with(&format!("forked from task {source}")),
        "{history}"
    );
    // A task that did not fail is not retried (exit 1, saying what to do).
    let out = common::exits(
        rein(&data).args(["tasks", "retry", retried["id"].as_str().unwrap()]),
        1,
    );
    assert!(stderr(&out).contains("rein tasks fork"), "{}", stderr(&out));
}

#[test]
fn fork_mistakes_are_named_and_make_nothing() {
    let (dir, data) = common::scratch();
    let plan = plan(dir.path());
    rein(&data)
        .arg("run")
        .arg(&plan)
        .arg("--quiet")
        .output()
        .unwrap();
    let source = task_ids(&data)[0].clone();
    for (args, code, says) in [
        (vec![], 2, "--before"),
        (
            vec!["--before", "write", "--at", "3"],
            2,
            "cannot be used with",
        ),
        (vec!["--turn", "2", "--before", "write"], 2, "--at"),
        // What the task's history or plan does not allow: exit 1.
        (vec!["--before", "ghost"], 1, "has no step `ghost`"),
        (vec!["--after", "check"], 1, "never completed"),
        (
            vec!["--before", "check", "--set", "check"],
            2,
            "STEP.FIELD=VALUE",
        ),
        (
            vec!["--before", "check", "--set", "check.rnu=true"],
            1,
            "has no field `rnu`",
        ),
        (vec!["--at", "99999"], 1, "has no event 99999"),
    ] {
        let out = rein(&data)
            .args(["tasks", "fork", &source])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(task_ids(&data).len(), 1, "nothing was made");
}
