//! rein on a PostgreSQL store (`--store postgres://…`), end to end: the real
//! binary against a real server, a throwaway cluster this test starts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{json, rein, run_ok, write_plan};

fn database() -> String {
    let cluster = rein_test_support::postgres::shared().unwrap();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(cluster.database())
        .unwrap()
}

const PLAN: &str = r#"
description = "on postgres"
[[steps]]
id = "a"
run = "echo a > a.txt"
[[steps]]
id = "b"
run = "cat a.txt"
depends_on = ["a"]
"#;

#[test]
fn a_plan_runs_on_postgres_and_every_command_reads_it_there() {
    let url = database();
    let (_dir, data, plan) = common::with_plan("plan.toml", PLAN);
    let ran = run_ok(
        rein(&data)
            .args(["--store", &url, "--sandbox", "none", "run"])
            .arg(&plan),
    );
    assert!(ran.status.success());
    let listed = json(&run_ok(
        rein(&data)
            .env("REIN_STORE", &url)
            .args(["tasks", "list", "--json"]),
    ))["items"]
        .clone();
    let tasks = listed.as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{listed}");
    assert_eq!(tasks[0]["status"], "completed");
    let id = tasks[0]["id"].as_str().unwrap();
    let shown = json(&run_ok(
        rein(&data).args(["--store", &url, "tasks", "show", id, "--json"]),
    ));
    assert_eq!(
        shown["context"]["completed_steps"],
        serde_json::json!(["a", "b"])
    );
    let read = common::checkpoint(&shown, "b", None);
    assert_eq!(read["output"]["stdout_tail"], "a\n", "b read what a wrote");
    // The task is in the database, not in a file beside the workspaces.
    assert!(!data.join("rein.db").exists());
    let local = json(&run_ok(rein(&data).args(["tasks", "list", "--json"])))["items"].clone();
    assert_eq!(local.as_array().unwrap().len(), 0, "{local}");
    let shown = json(&run_ok(
        rein(&data).args(["--store", &url, "config", "show", "--json"]),
    ));
    let store = common::item(&shown["settings"], "key", "store").clone();
    assert_eq!(store["value"], url.as_str());
    assert_eq!(store["source"], "flag --store");
}

#[test]
fn a_store_that_is_not_a_postgres_url_is_bad_usage() {
    let dir = tempfile::tempdir().unwrap();
    let said = common::fails(
        rein(dir.path()).args(["--store", "mysql://x@y/z", "tasks", "list"]),
        2,
    );
    assert!(
        said.contains("not a PostgreSQL URL") && said.contains("postgres://USER@HOST"),
        "{said}"
    );
}

#[test]
fn an_unreachable_store_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let said = common::fails(
        rein(dir.path()).args([
            "--store",
            &format!("postgres://rein:pw@127.0.0.1:{port}/x"),
            "tasks",
            "list",
        ]),
        1,
    );
    assert!(
        said.contains(&format!(
            "cannot connect to PostgreSQL at postgres://rein@127.0.0.1:{port}/x"
        )) && !said.contains("pw"),
        "{said}"
    );
}

#[test]
fn a_node_restarted_after_kill_9_takes_its_tasks_up_without_waiting_out_its_leases() {
    let url = database();
    let (dir, data) = common::scratch();
    let marks = dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let serve = || {
        let mut on_postgres = rein(&data);
        on_postgres.args(["--store", &url, "--sandbox", "none"]);
        // A lease far longer than the test may wait.
        common::serve_with(
            on_postgres,
            Some("postgres-test-token"),
            &["--lease".as_ref(), "60s".as_ref()],
        )
    };
    let (mut first, addr) = serve();
    let plan = format!(
        "description = \"in flight\"\n[[steps]]\nid = \"wait\"\nidempotent = true\nrun = \": > {}/$REIN_ATTEMPT; exec sleep 60\"\n",
        marks.display()
    );
    let (status, body) = common::http(
        &addr,
        "POST",
        "/admin/tasks",
        Some("postgres-test-token"),
        Some(("application/toml", &plan)),
    );
    assert_eq!(status, 201, "{body}");
    common::eventually("the first attempt", || {
        marks.join("1").exists().then_some(())
    });
    common::kill9(&mut first.0);
    let restarted = std::time::Instant::now();
    let (_again, _) = serve();
    common::eventually("the second attempt", || {
        marks.join("2").exists().then_some(())
    });
    let took = restarted.elapsed();
    assert!(
        took < std::time::Duration::from_secs(20),
        "the restarted node waited {took:?}: its old lease lasts 60 s"
    );
}

#[test]
fn a_store_over_tls_is_checked_as_the_url_says() {
    use rein_test_support::postgres::{Certificates, Scratch};
    let dir = tempfile::tempdir().unwrap();
    let certs = Certificates::make(dir.path()).unwrap();
    let cluster = Scratch::start_tls(&certs).unwrap();
    let db = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(cluster.database_named())
        .unwrap();
    let url = |root: &std::path::Path| {
        format!(
            "postgres://rein@localhost:{}/{db}?sslmode=verify-full&sslrootcert={}",
            cluster.port(),
            root.display()
        )
    };
    let data = dir.path().join("data");
    let plan = write_plan(dir.path(), "plan.toml", PLAN);
    let checked = url(&certs.authority);
    run_ok(
        rein(&data)
            .args(["--store", &checked, "--sandbox", "none", "run"])
            .arg(&plan),
    );
    let listed = json(&run_ok(
        rein(&data).args(["--store", &checked, "tasks", "list", "--json"]),
    ))["items"]
        .clone();
    assert_eq!(listed[0]["status"], "completed", "{listed}");
    let said = common::fails(
        rein(&data).args(["--store", &url(&certs.other_authority), "tasks", "list"]),
        1,
    );
    assert!(
        said.contains("invalid peer certificate") && said.contains("sslrootcert"),
        "{said}"
    );
}
