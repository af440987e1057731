//! The API against its own OpenAPI document, fuzzed by schemathesis (a
//! third-party tool, from PyPI; `.ci/run` installs it): every operation gets a
//! few generated requests, from a fixed seed, against a real `rein serve` with
//! the sandbox on and a local fake model (the hosted API cannot be reached
//! here). Any 5xx, any status, media type, header or body the document does
//! not describe, and any refusal of a request the document allows fails the
//! test (`tests/schemathesis.toml` names the exceptions, and why).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod model;

use std::process::{Command, Stdio};

/// The version `.ci/run` installs.
const SCHEMATHESIS: &str = "schemathesis==4.32.5";

#[test]
fn every_operation_answers_as_the_document_says() {
    let version = Command::new("st").arg("--version").output();
    assert!(
        version.as_ref().is_ok_and(|o| o.status.success()),
        "schemathesis is not installed: `pip install {SCHEMATHESIS}` (.ci/run does)"
    );
    let m = model::model();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut child = m
        .rein(&data)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("REIN_TOKEN", "st-admin-token-0123")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = common::listening(&mut child);
    let _server = common::Server(child);
    let document = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.json");
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/schemathesis.toml");
    let out = Command::new("st")
        .current_dir(dir.path())
        .args(["--config-file", config, "run", document, "--url"])
        .arg(format!("http://{addr}"))
        .args([
            "--header",
            "Authorization: Bearer st-admin-token-0123",
            "--max-examples",
            "5",
            "--seed",
            "1",
            // The event streams never end: a stream is read for two seconds.
            "--request-timeout",
            "2",
            "--phases",
            "fuzzing",
            // Every check of a response against the document (5xx, status,
            // media type, headers, body, `Allow`, methods refused with 405),
            // and that a request it allows is not refused; not the checks
            // that need requests it does not allow, or several operations.
            "--exclude-checks",
            "negative_data_rejection,missing_required_header,use_after_free,\
             ensure_resource_availability,ignored_auth,object_level_authorization",
            "--no-color",
        ])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found responses the document does not describe:\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // It ran every operation, not none.
    let operations = rein_server::openapi::table()
        .iter()
        .map(|r| r.operations.len())
        .sum::<usize>();
    assert!(
        report.contains(&format!("{operations} selected")),
        "expected {operations} operations in:\n{report}"
    );
}
