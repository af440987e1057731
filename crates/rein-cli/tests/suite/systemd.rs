//! The systemd unit the README ships (`examples/systemd/rein.service`) is
//! one systemd accepts: `systemd-analyze verify` checks it — its directives,
//! its hardening, the program it starts (this build of rein) and the man
//! pages it names (written by `rein manpages`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{rein, run_ok};

#[test]
fn the_shipped_systemd_unit_passes_systemd_analyze_verify() {
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/systemd/rein.service"),
    )
    .unwrap();
    assert!(
        unit.contains("ExecStart=/usr/local/bin/rein serve"),
        "{unit}"
    );
    // The program it starts is this build's.
    let unit = unit.replace(
        "/usr/local/bin/rein",
        &common::rein_bin().display().to_string(),
    );
    let path = dir.path().join("rein.service");
    std::fs::write(&path, unit).unwrap();
    let man = dir.path().join("man");
    run_ok(
        rein(&dir.path().join("data"))
            .arg("manpages")
            .arg(man.join("man1")),
    );
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .env("MANPATH", &man)
        .output()
        .expect("systemd-analyze runs: apt-get install systemd man-db (.ci/run does)");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(!said.contains("rein.service:"), "{said}");
}
