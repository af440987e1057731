//! `rein state …` on the embedded store: the seed's example created from its
//! JSON, a colliding action added, conflicts detected with exit codes scripts can
//! use, and bad input named.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use common::{json, rein, run_ok, write_plan};

fn seed_example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../rein-protocol/tests/data/seed-000-shared-state.json")
}

#[test]
fn create_add_and_detect_conflicts_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let created = json(&run_ok(
        rein(&data)
            .args(["state", "create"])
            .arg(seed_example())
            .arg("--json"),
    ));
    assert_eq!(created["id"], "shs_release_docs");
    // The same id again is refused, never overwritten.
    let again = rein(&data)
        .args(["state", "create"])
        .arg(seed_example())
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));
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
    let warn = rein(&data)
        .args([
            "state",
            "conflicts",
            "shs_release_docs",
            "--fail-on",
            "warn",
        ])
        .output()
        .unwrap();
    assert_eq!(warn.status.code(), Some(1));
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

    let listed = json(&run_ok(rein(&data).args(["state", "list", "--json"])));
    assert_eq!(listed[0]["id"], "shs_release_docs");
    assert_eq!(listed[0]["conflicts"].as_array().unwrap().len(), 1);
    let session = run_ok(rein(&data).args(["state", "session", "session-release"]));
    assert!(String::from_utf8_lossy(&session.stdout).contains("Edit the docs"));
    let missing = rein(&data)
        .args(["state", "show", "shs_nope"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));

    // Bad files are the user's to fix, named.
    let bad = write_plan(dir.path(), "bad.json", r#"{ "id": "p", "role": "chef" }"#);
    let out = rein(&data)
        .args(["state", "add-participant", "shs_release_docs"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("bad.json") && said.contains("chef"), "{said}");
}

#[test]
fn plans_that_name_a_shared_state_record_their_steps_and_collide_there() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
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
        assert!(a["completedAt"].is_string());
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
    let out = rein(&data).arg("run").arg(&lost).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("shs_nowhere"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
