//! `rein state …` on the embedded store: the seed's example created from its
//! JSON, a colliding action added, conflicts detected with exit codes scripts can
//! use, and bad input named.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::{json, rein, run_ok, write_plan};

fn seed_example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../rein-protocol/tests/data/seed-000-shared-state.json")
}

#[test]
fn create_add_and_detect_conflicts_from_the_command_line() {
    let (dir, data) = common::scratch();
    let created = json(&run_ok(
        rein(&data)
            .args(["state", "create"])
            .arg(seed_example())
            .arg("--json"),
    ));
    assert_eq!(created["id"], "shs_release_docs");
    // The same id again is refused, never overwritten.
    let again = common::exits(rein(&data).args(["state", "create"]).arg(seed_example()), 1);
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));

    let no_conflicts = run_ok(rein(&data).args(["state", "conflicts", "shs_release_docs"]));
    assert!(String::from_utf8_lossy(&no_conflicts.stdout).contains("no conflicts"));

    let edit = write_plan(
        dir.path(),
        "edit.json",
        r#"{ "id": "edit", "participantId": "manager", "title": "Edit the docs",
             "writeSet": [{ "kind": "directory", "path": "docs" }] }"#,
    );
    run_ok(
        rein(&data)
            .args(["state", "add-action", "shs_release_docs"])
            .arg(&edit),
    );
    let out = run_ok(rein(&data).args(["state", "conflicts", "shs_release_docs"]));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("[warn] write_write") && said.contains("draft-release-notes, edit"),
        "{said}"
    );
    // Scripts choose what fails them.
    common::exits(
        rein(&data).args([
            "state",
            "conflicts",
            "shs_release_docs",
            "--fail-on",
            "warn",
        ]),
        1,
    );
    let escalate = rein(&data)
        .args([
            "state",
            "conflicts",
            "shs_release_docs",
            "--fail-on",
            "escalate",
        ])
        .output()
        .unwrap();
    assert_eq!(escalate.status.code(), Some(0), "a warn is below escalate");

    let listed = json(&run_ok(rein(&data).args(["state", "list", "--json"])))["items"].clone();
    assert_eq!(listed[0]["id"], "shs_release_docs");
    assert_eq!(listed[0]["conflicts"].as_array().unwrap().len(), 1);
    let session = run_ok(rein(&data).args(["state", "session", "session-release"]));
    assert!(String::from_utf8_lossy(&session.stdout).contains("Edit the docs"));
    common::exits(rein(&data).args(["state", "show", "shs_nope"]), 1);

    // Bad files are the user's to fix, named.
    let bad = write_plan(dir.path(), "bad.json", r#"{ "id": "p", "role": "chef" }"#);
    let said = common::fails(
        rein(&data)
            .args(["state", "add-participant", "shs_release_docs"])
            .arg(&bad),
        2,
    );
    assert!(said.contains("bad.json") && said.contains("chef"), "{said}");
}

#[test]
fn plans_that_name_a_shared_state_record_their_steps_and_collide_there() {
    let (dir, data) = common::scratch();
    let state = write_plan(
        dir.path(),
        "state.json",
        r#"{ "id": "shs_docs", "goal": "docs" }"#,
    );
    run_ok(rein(&data).args(["state", "create"]).arg(&state));
    let plan = |name: &str| {
        write_plan(
            dir.path(),
            &format!("{name}.toml"),
            &format!(
                "description = '{name}'\nshared_state = 'shs_docs'\n\
                 [[steps]]\nid = 'edit'\nrun = 'true'\nreads = ['CHANGELOG.md']\nwrites = ['docs/']\n"
            ),
        )
    };
    run_ok(rein(&data).arg("run").arg(plan("first")));
    run_ok(rein(&data).arg("run").arg(plan("second")));
    let state = json(&run_ok(
        rein(&data).args(["state", "show", "shs_docs", "--json"]),
    ));
    let participants = state["participants"].as_array().unwrap();
    assert_eq!(participants.len(), 2, "each task takes part");
    let actions = state["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 2);
    for a in actions {
        assert_eq!(a["status"], "completed");
        assert_eq!(a["writeSet"][0]["kind"], "directory");
        assert!(a["completedAtUtc"].is_string());
    }
    let conflicts = json(&run_ok(rein(&data).args([
        "state",
        "conflicts",
        "shs_docs",
        "--json",
    ])));
    let c = &conflicts.as_array().unwrap()[0];
    assert_eq!(c["type"], "write_write");
    assert!(c["actions"][0].as_str().unwrap().ends_with(".edit"));
    // A plan naming a state that does not exist is refused before anything runs.
    let lost = write_plan(
        dir.path(),
        "lost.toml",
        "description = 'lost'\nshared_state = 'shs_nowhere'\n[[steps]]\nid = 'a'\nrun = 'true'\n",
    );
    let said = common::fails(rein(&data).arg("run").arg(&lost), 2);
    assert!(said.contains("shs_nowhere"), "{said}");
}

/// Starts `rein run` on a plan recording into `state` whose one step writes
/// `writes` and then runs `run`; returns the process and the task id once the
/// step's action is active in the state.
fn run_recording(
    data: &Path,
    dir: &Path,
    name: &str,
    state: &str,
    writes: &str,
    run: &str,
) -> (std::process::Child, String) {
    let plan = write_plan(
        dir,
        &format!("{name}.toml"),
        &format!(
            "description = '{name}'\nshared_state = '{state}'\n\
             [[steps]]\nid = 'edit'\nrun = '{run}'\nwrites = ['{writes}']\n"
        ),
    );
    let child = rein(data)
        .arg("run")
        .arg(&plan)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let task = common::eventually(&format!("{name} is created"), || {
        let tasks = json(&run_ok(rein(data).args(["tasks", "list", "--json"])))["items"].clone();
        tasks
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["description"] == name)
            .map(|t| t["id"].as_str().unwrap().to_owned())
    });
    (child, task)
}

fn action_status(data: &Path, state: &str, task: &str) -> Option<String> {
    let s = json(&run_ok(rein(data).args(["state", "show", state, "--json"])));
    s["actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == format!("{task}.edit"))
        .map(|a| a["status"].as_str().unwrap().to_owned())
}

#[test]
fn a_serializing_state_makes_a_colliding_step_wait_and_a_rejecting_one_fails_it() {
    let (dir, data) = common::scratch();
    for (id, mode) in [("shs_serial", "serialize"), ("shs_strict", "reject")] {
        let file = write_plan(
            dir.path(),
            &format!("{id}.json"),
            &format!(r#"{{ "id": "{id}", "goal": "docs", "enforcement": "{mode}" }}"#),
        );
        run_ok(rein(&data).args(["state", "create"]).arg(&file));
    }
    let hold = common::until_exists(Path::new("gate"));

    // serialize: `second` waits while `first` holds docs/.
    let (first, a) = run_recording(&data, dir.path(), "first", "shs_serial", "docs/", &hold);
    common::eventually("first's action is active", || {
        (action_status(&data, "shs_serial", &a).as_deref() == Some("active")).then_some(())
    });
    let (second, b) = run_recording(
        &data,
        dir.path(),
        "second",
        "shs_serial",
        "docs/a.md",
        "touch ran",
    );
    // Its step has started in the task, but not in the state, and has not run.
    common::eventually("second's step is in progress", || {
        let state = common::show(&data, &b);
        (common::step_status(&state, "edit").as_deref() == Some("in_progress")).then_some(())
    });
    assert_eq!(action_status(&data, "shs_serial", &b), None, "it waits");
    assert!(!common::in_workspace(&data, &b, "ran").exists());
    std::fs::write(common::in_workspace(&data, &a, "gate"), "").unwrap();
    assert!(first.wait_with_output().unwrap().status.success());
    let out = second.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(common::in_workspace(&data, &b, "ran").exists());
    assert_eq!(
        action_status(&data, "shs_serial", &b).as_deref(),
        Some("completed")
    );
    // Waiting wrote nothing: joining, starting and ending are all the records.
    let db = rusqlite::Connection::open(data.join("rein.db")).unwrap();
    let records: i64 = db
        .query_row(
            "SELECT count(*) FROM audit WHERE json_extract(body, '$.who') = ?1",
            [&b],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(records, 3);

    // reject: `fourth` fails, naming the conflict, while `third` holds docs/.
    let (third, c) = run_recording(&data, dir.path(), "third", "shs_strict", "docs/", &hold);
    common::eventually("third's action is active", || {
        (action_status(&data, "shs_strict", &c).as_deref() == Some("active")).then_some(())
    });
    let (fourth, d) = run_recording(
        &data,
        dir.path(),
        "fourth",
        "shs_strict",
        "docs/a.md",
        "touch ran",
    );
    let out = fourth.wait_with_output().unwrap();
    // The step fails; the task then goes as recovery says (a validation error
    // pauses it for a person): either way, nothing ran.
    assert_ne!(out.status.code(), Some(0));
    let state = common::show(&data, &d);
    let error = state["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|cp| cp["error"].as_str().map(str::to_owned))
        .unwrap_or_default();
    assert!(
        error.contains("shs_strict rejects the step") && error.contains("write"),
        "{error}"
    );
    assert!(!common::in_workspace(&data, &d, "ran").exists());
    std::fs::write(common::in_workspace(&data, &c, "gate"), "").unwrap();
    assert!(third.wait_with_output().unwrap().status.success());
}
