//! `rein-bench usage --turns N`: what metering costs and how fast it reads.
//!
//! - Metering per turn: durable journal appends of a model turn with its
//!   usage (the `model_usage` row and the per-day rollup written in the same
//!   transaction) against the same appends without one, interleaved on one
//!   store; the difference is metering's cost.
//! - Reading: a store holding N recorded turns (over 30 days, 1,000 tasks,
//!   3 models; written with SQL, as the store's own write path would take
//!   hours for a million), and the time of the store's usage query for the
//!   reports `rein usage` makes — in all, by day, by task, by model, one
//!   task, the last 7 days and a window that starts mid-day — and of the
//!   whole `rein usage --json` process when the `rein` binary is beside this
//!   one.

use std::time::{Duration, Instant};

use rein_core::JournalStore;
use rein_core::store::{UsageFilter, UsageGroup};
use serde_json::json;

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

pub async fn run(turns: usize, runs: usize, appends: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("rein.db");
    let store = rein_store::SqliteStore::open(&db)?;

    // Metering's cost per turn: appends with and without a usage.
    let task = rein_protocol::TaskId::new();
    let mut with = Vec::with_capacity(appends);
    let mut without = Vec::with_capacity(appends);
    let turn = json!({ "message": { "role": "assistant", "content": "ok" }, "usage": {
        "provider": "openai", "model": "gpt-4.1-mini", "served_model": "gpt-4.1-mini-2025-04-14",
        "step": "draft", "session": "ses_bench", "input_tokens": 1200, "cached_input_tokens": 600,
        "output_tokens": 80 } });
    let bare = json!({ "message": { "role": "assistant", "content": "ok" } });
    for i in 0..appends * 2 {
        let (entry, into) = if i % 2 == 0 {
            (&turn, &mut with)
        } else {
            (&bare, &mut without)
        };
        let started = Instant::now();
        store
            .append_journal(&task, "draft", i as u64, std::slice::from_ref(entry))
            .await?;
        into.push(started.elapsed());
    }
    let (with_ms, without_ms) = (median(with), median(without));

    // A store of `turns` recorded turns.
    let tasks: Vec<String> = (0..1000)
        .map(|_| rein_protocol::TaskId::new().to_string())
        .collect();
    let models = ["gpt-4.1-mini", "gpt-4.1", "claude-sonnet-4-5"];
    let now = chrono::Utc::now();
    let fill = Instant::now();
    {
        let mut conn = rusqlite::Connection::open(&db)?;
        let tx = conn.transaction()?;
        {
            let mut insert = tx.prepare(
                "INSERT INTO model_usage (task_id, journal, seq, step_id, session_id, at, provider,
                   model, served_model, input, cached, output, reasoning, estimated)
                 VALUES (?1, 'draft', ?2, 'draft', ?3, ?4, 'openai', ?5, NULL, ?6, ?7, ?8, NULL, 0)",
            )?;
            for i in 0..turns {
                let task = &tasks[i % tasks.len()];
                let when = now
                    - chrono::Duration::days((i % 30) as i64)
                    - chrono::Duration::seconds((i % 86_000) as i64);
                insert.execute(rusqlite::params![
                    task,
                    (i / tasks.len()) as i64,
                    format!("ses_{}", i % tasks.len()),
                    when.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                    models[i % models.len()],
                    1000 + (i % 500) as i64,
                    (i % 400) as i64,
                    50 + (i % 90) as i64,
                ])?;
            }
        }
        // The rollup, as the migration builds it from the calls.
        tx.execute_batch(
            "INSERT INTO model_usage_daily
               SELECT substr(at, 1, 10), task_id, COALESCE(session_id, ''), provider, model,
                      COUNT(*), SUM(input), SUM(cached), SUM(output), SUM(reasoning), MAX(estimated)
               FROM model_usage GROUP BY 1, 2, 3, 4, 5
             ON CONFLICT (day, task_id, session_id, provider, model) DO NOTHING",
        )?;
        tx.commit()?;
    }
    let filled_s = fill.elapsed().as_secs_f64();
    let store = rein_store::SqliteStore::open(&db)?;
    let one: rein_protocol::TaskId = tasks[7].parse()?;
    let midday = now - chrono::Duration::days(7) + chrono::Duration::hours(5);
    let reports: Vec<(&str, UsageFilter)> = vec![
        ("all", UsageFilter::default()),
        (
            "by_day",
            UsageFilter {
                by: UsageGroup::Day,
                ..UsageFilter::default()
            },
        ),
        (
            "by_task",
            UsageFilter {
                by: UsageGroup::Task,
                ..UsageFilter::default()
            },
        ),
        (
            "one_task",
            UsageFilter {
                task_id: Some(one),
                ..UsageFilter::default()
            },
        ),
        (
            "last_7_days",
            UsageFilter {
                since: Some(now - chrono::Duration::days(7)),
                ..UsageFilter::default()
            },
        ),
        (
            "from_midday",
            UsageFilter {
                since: Some(midday),
                until: Some(now),
                ..UsageFilter::default()
            },
        ),
    ];
    let mut timed = serde_json::Map::new();
    let mut calls = 0;
    for (name, filter) in &reports {
        let mut took = Vec::new();
        for _ in 0..runs {
            let started = Instant::now();
            let rows = store.usage(filter).await?;
            took.push(started.elapsed());
            if *name == "all" {
                calls = rows.iter().map(|r| r.calls).sum::<u64>();
            }
        }
        timed.insert((*name).to_owned(), json!(median(took)));
    }
    // The whole command, when the binary is at hand.
    let rein = std::env::current_exe()?.with_file_name("rein");
    let mut process_ms = None;
    if rein.exists() {
        let mut took = Vec::new();
        for _ in 0..runs {
            let started = Instant::now();
            let out = std::process::Command::new(&rein)
                .arg("--data-dir")
                .arg(dir.path())
                .args(["usage", "--json", "--by", "model"])
                .output()?;
            took.push(started.elapsed());
            anyhow::ensure!(
                out.status.success(),
                "rein usage failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        process_ms = Some(median(took));
    }
    println!(
        "{}",
        json!({
            "bench": "usage",
            "turns": turns,
            "counted": calls,
            "fill_s": filled_s,
            "append_with_usage_ms": with_ms,
            "append_without_usage_ms": without_ms,
            "metering_per_turn_ms": with_ms - without_ms,
            "usage_query_ms": timed,
            "rein_usage_process_ms": process_ms,
        })
    );
    Ok(())
}
