//! `rein-bench conflicts`: conflict detection over a busy shared state.

use super::*;

/// A shared state of `n` actions shaped like real work, with the same density
/// of overlap at every size (a bigger state spans more modules, not more
/// writers per file): `n / 20` modules of about 20 files; each action writes a
/// file of its own, one in 100 also one of the `n / 200` `mod.rs` files (two
/// writers each), one in 1,000 a whole module directory; each reads one file
/// pinned by a version dependency, and one in 10 states an assumption (one of
/// `n / 1000` keys, three values each).
pub(super) fn busy_state(n: usize) -> anyhow::Result<rein_protocol::SharedHarnessState> {
    let mut actions = Vec::with_capacity(n);
    let modules = (n / 20).max(1);
    let mod_files = (n / 200).max(1);
    let keys = (n / 1000).max(1);
    for i in 0..n {
        let module = i % modules;
        let mut write =
            vec![serde_json::json!({ "kind": "file", "path": format!("src/m{module}/f{i}.rs") })];
        if i % 100 == 0 {
            write.push(
                serde_json::json!({ "kind": "file", "path": format!("src/m{}/mod.rs", (i / 100) % mod_files) }),
            );
        }
        if i % 1000 == 0 {
            write.push(serde_json::json!({ "kind": "directory", "path": format!("src/m{}", (module + 1) % modules) }));
        }
        let read = serde_json::json!({ "kind": "file", "path": format!("src/m{}/f{}.rs", (module + 7) % modules, i / 3) });
        let mut action = serde_json::json!({
            "id": format!("a{i}"), "participantId": format!("p{}", i % 20),
            "title": format!("change {i}"), "writeSet": write, "readSet": [read.clone()],
            "versionDependencies": [{ "id": format!("v{i}"), "resource": read }],
        });
        if i % 10 == 0 {
            action["assumptions"] = serde_json::json!([{ "id": format!("s{i}"), "key": format!("flag{}", i % keys), "value": format!("{}", i % 3) }]);
        }
        actions.push(action);
    }
    // Read from JSON text, as the store hands a state to the detector.
    let text =
        serde_json::json!({ "id": "shs_bench", "goal": "bench", "actions": actions }).to_string();
    Ok(serde_json::from_str(&text)?)
}

pub(super) fn conflicts(n: usize, runs: usize) -> anyhow::Result<serde_json::Value> {
    let state = busy_state(n)?;
    let mut times = Vec::with_capacity(runs);
    let mut found = 0;
    for _ in 0..runs.max(1) {
        let started = Instant::now();
        found = rein_core::conflicts::detect(&state)?.len();
        times.push(started.elapsed());
    }
    let first = times[0];
    times.sort();
    Ok(serde_json::json!({
        "bench": "conflicts",
        "actions": n,
        "conflicts": found,
        "median_ms": (percentile(&times, 0.5) * 1000.0).round() / 1000.0,
        "max_ms": (percentile(&times, 1.0) * 1000.0).round() / 1000.0,
        "first_ms": (first.as_secs_f64() * 1e6).round() / 1000.0,
    }))
}
