//! The benchmark runs and reports what it promises (the numbers themselves are
//! measured in release builds, not asserted here).
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// `rein-bench ARGS --dir DIR`, run to its end.
fn bench(args: &[&str], dir: &std::path::Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_rein-bench"))
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap()
}

/// Each of `fields` of `line` is a number above zero.
fn positive(line: &serde_json::Value, fields: &[&str]) {
    for field in fields {
        assert!(line[field].as_f64().unwrap() > 0.0, "{field}: {line}");
    }
}

/// The one JSON line `rein-bench ARGS --dir DIR` prints, once it succeeded.
fn line_of(args: &[&str], dir: &std::path::Path) -> serde_json::Value {
    let out = bench(args, dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn steps_prints_one_json_line_with_the_promised_fields() {
    let dir = tempfile::tempdir().unwrap();
    let line = line_of(
        &[
            "steps",
            "--tasks",
            "3",
            "--steps",
            "20",
            "--ceiling-commits",
            "20",
        ],
        dir.path(),
    );
    assert_eq!(line["total_steps"], 60);
    // Every write is counted: one per step, plus the task's start and the
    // run's take of its control requests; the last step's result shares the
    // commit of the task's close.
    assert_eq!(line["commit_requests"], 3 * 22);
    positive(
        &line,
        &[
            "steps_per_s",
            "commit_p50_ms",
            "commit_p99_ms",
            "sqlite_ceiling_commits_per_s",
            "sqlite_shape_commits_per_s",
            "steps_per_s_over_shape",
        ],
    );
    // The shape is the warm-up's: its events per commit (about three for a
    // no-op step), each of their average size.
    let rows = line["step_shape"]["rows"].as_u64().unwrap();
    assert!((2..=4).contains(&rows), "{line}");
    assert!(
        line["step_shape"]["bytes"].as_u64().unwrap() > 100,
        "{line}"
    );
    assert!(line["commit_p50_ms"].as_f64() <= line["commit_p99_ms"].as_f64());
}

#[test]
fn steps_with_runs_reports_the_median_of_each_figure_and_every_run() {
    let dir = tempfile::tempdir().unwrap();
    let steps = |runs: &str| {
        bench(
            &[
                "steps",
                "--steps",
                "10",
                "--ceiling-commits",
                "10",
                "--runs",
                runs,
            ],
            dir.path(),
        )
    };
    let out = steps("3");
    let progress = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{progress}");
    assert_eq!(
        progress.lines().filter(|l| l.starts_with("run ")).count(),
        3,
        "{progress}"
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    let line: serde_json::Value = serde_json::from_str(&text).unwrap();
    let runs = line["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert_eq!(line["total_steps"], 10);
    for field in ["steps_per_s", "steps_per_s_over_ceiling", "commit_p99_ms"] {
        let mut each: Vec<f64> = runs.iter().map(|r| r[field].as_f64().unwrap()).collect();
        each.sort_by(f64::total_cmp);
        assert_eq!(line[field].as_f64().unwrap(), each[1], "{field}: {line}");
    }

    let refused = steps("0");
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--runs"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

#[test]
fn approvals_reports_latency_and_memory_with_tasks_paused() {
    let dir = tempfile::tempdir().unwrap();
    let line = line_of(
        &["approvals", "--decisions", "5", "--paused", "20"],
        dir.path(),
    );
    assert_eq!(line["paused_tasks"], 20);
    assert_eq!(line["pending_requests"], 20);
    assert!(line["decision_to_next_step_p50_ms"].as_f64().unwrap() > 0.0);
    assert!(line["rss_mib_with_paused"].as_f64().unwrap() > 0.0);
}

#[test]
fn goal_times_a_decomposition_answer_to_the_first_step() {
    let dir = tempfile::tempdir().unwrap();
    let line = line_of(&["goal", "--steps", "5", "--runs", "2"], dir.path());
    assert_eq!(line["steps"], 5);
    let t = &line["answer_to_first_step_ms"];
    assert!(t["median"].as_f64().unwrap() > 0.0, "{line}");
    assert!(t["min"].as_f64().unwrap() <= t["max"].as_f64().unwrap());
}

#[test]
fn saved_times_a_save_with_one_file_changed_and_measures_the_growth() {
    let dir = tempfile::tempdir().unwrap();
    let line = line_of(
        &[
            "saved",
            "--files",
            "200",
            "--large-mb",
            "1",
            "--steps",
            "20",
            "--saves",
            "3",
        ],
        dir.path(),
    );
    positive(
        &line,
        &[
            "first_save_ms",
            "one_file_changed_p50_ms",
            "stat_walk_p50_ms",
            "large_unchanged_p50_ms",
        ],
    );
    // Twenty kilobytes that no other step wrote, and their listings: stored
    // once each, so the keeper grew by more than them and not by much more.
    let grown = line["growth_bytes"].as_u64().unwrap();
    assert!((20 * 1024..200 * 1024).contains(&grown), "{line}");
}

#[test]
fn fork_times_a_fork_of_a_long_task_to_its_first_step() {
    let dir = tempfile::tempdir().unwrap();
    let line = line_of(
        &[
            "fork",
            "--events",
            "600",
            "--workspace-mb",
            "2",
            "--files",
            "20",
            "--forks",
            "2",
        ],
        dir.path(),
    );
    assert!(line["events"].as_u64().unwrap() >= 600, "{line}");
    positive(
        &line,
        &[
            "fork_made_p50_ms",
            "fork_running_p50_ms",
            "log_read_and_fold_p50_ms",
            "workspace_written_p50_ms",
        ],
    );
    assert!(
        line["fork_running_p50_ms"].as_f64() >= line["fork_made_p50_ms"].as_f64(),
        "{line}"
    );
}
