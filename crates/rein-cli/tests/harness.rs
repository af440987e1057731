//! `rein harness list | explain` with nothing but the built-in runtime: the
//! decision is explained, and an explicit runtime nobody registered is an
//! error naming what is registered.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{json, rein, run_ok};

#[test]
fn the_builtin_runtime_serves_every_route_until_a_plugin_says_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let listed = json(&run_ok(rein(&data).args(["harness", "list", "--json"])));
    assert_eq!(listed[0]["id"], "rein");
    assert_eq!(listed[0]["builtin"], true);

    let decision = json(&run_ok(rein(&data).args([
        "harness",
        "explain",
        "--provider",
        "openai",
        "--model",
        "gpt-4.1-mini",
        "--json",
    ])));
    assert_eq!(decision["selected"], "rein");
    assert_eq!(decision["reason"], "auto_builtin");
    assert_eq!(decision["policy"]["source"], "default");
    let forced = json(&run_ok(rein(&data).args([
        "harness",
        "explain",
        "--provider",
        "openai",
        "--runtime",
        "rein",
        "--json",
    ])));
    assert_eq!(forced["reason"], "forced_builtin");

    let out = rein(&data)
        .args([
            "harness",
            "explain",
            "--provider",
            "openai",
            "--runtime",
            "codex",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("no harness `codex` is registered (registered: none)")
    );
}
