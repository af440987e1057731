//! The API against its own OpenAPI document, fuzzed by schemathesis (a
//! third-party tool, from PyPI; `.ci/run` installs it): every operation gets a
//! few generated requests, from each of two fixed seeds, in every phase and
//! with every check, against a real `rein serve` with
//! the sandbox on and a local fake model (the hosted API cannot be reached
//! here). Any 5xx, any status, media type, header or body the document does
//! not describe, any refusal of a request the document allows, any acceptance
//! of one it refuses, and any answer to a wrong token but 401 fails the
//! test (`tests/schemathesis.toml` names the exceptions, and why).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::model;

use std::process::Command;

/// The version `.ci/run` installs.
const SCHEMATHESIS: &str = "schemathesis==4.32.5";

/// Each seed is its own test, against its own server, so the two run side by
/// side.
#[test]
fn every_operation_answers_as_the_document_says_seed_1() {
    fuzz(1);
}

#[test]
fn every_operation_answers_as_the_document_says_seed_42() {
    fuzz(42);
}

fn fuzz(seed: u32) {
    let version = Command::new("st").arg("--version").output();
    assert!(
        version.as_ref().is_ok_and(|o| o.status.success()),
        "schemathesis is not installed: `pip install {SCHEMATHESIS}` (.ci/run does)"
    );
    let m = model::model();
    let (dir, data) = common::scratch();
    // Its checks of authentication send wrong tokens by the hundred: the
    // throttle on failed sign-ins would answer the rest with 429.
    let (_server, addr) = common::serve_with(
        m.rein(&data),
        Some("st-admin-token-0123"),
        &["--sign-in-failures".as_ref(), "1000000".as_ref()],
    );
    let document = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/src/api/openapi.json"
    );
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
            &seed.to_string(),
            // The event streams never end: a stream is read for two seconds.
            "--request-timeout",
            "2",
            // Every phase (examples, coverage, fuzzing, stateful sequences
            // that follow one operation's answer into the next) and every
            // check: 5xx, status codes, media types, headers and bodies the
            // document does not describe, requests it allows refused and
            // requests it refuses accepted, authentication ignored.
            "--no-color",
        ])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis (seed {seed}) found answers the document does not describe:\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // It ran every operation, in every phase, not none.
    let operations = rein_protocol::endpoints::ALL.len();
    assert!(
        report.contains(&format!("{operations} selected")),
        "expected {operations} operations in:\n{report}"
    );
    // (The document holds no examples: that phase has nothing to run.)
    for phase in ["Coverage", "Fuzzing", "Stateful"] {
        assert!(
            report.contains(&format!("✅ {phase}")),
            "the {phase} phase did not run clean:\n{report}"
        );
    }
}
