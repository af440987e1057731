//! `rein-bench postgres`: rein on a PostgreSQL store, in one run.
//!
//! - Durable steps per second for `--tasks` × `--steps` no-op steps through
//!   the engine on a PostgreSQL store, against the ceiling of the same server
//!   measured the same way as SQLite's: bare sequential commits of one small
//!   row each (`BEGIN`, `INSERT`, `COMMIT`, `synchronous_commit = on`), half
//!   before the run and half after it.
//! - Fail-over: two `rein serve` nodes on the store, `--failover-tasks` tasks
//!   of one idempotent step in flight on the first; it is killed with -9, and
//!   the time is taken from the kill until the second node runs every
//!   interrupted step again, with the lease it was given (`--lease`).
//! - The single node's take-over on SQLite, beside it: `--takeover-tasks`
//!   tasks in flight, `kill -9`, and the time until they all run again (see
//!   [`crate::takeover`]; `rein-bench takeover` runs it alone).
//!
//! The server is a throwaway cluster the bench starts (`initdb`, a private
//! port), unless `--url` names one: its database must be empty or rein's.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::command_engine;
use rein_store::PostgresStore;
use serde_json::{Value, json};

use crate::sse::start_serve_with;
use crate::takeover::{attempts, in_flight, request, wait_for};

/// Bare sequential commits on their own connection.
struct Ceiling {
    client: tokio_postgres::Client,
    next: i64,
}

impl Ceiling {
    async fn open(url: &str) -> anyhow::Result<Ceiling> {
        // Connected as the store connects, TLS and all.
        let rein_store::postgres::tls::Secured {
            mut config,
            connector,
            ..
        } = rein_store::postgres::tls::secure(url).map_err(anyhow::Error::msg)?;
        config.options("-c synchronous_commit=on");
        let (client, connection) = config.connect(connector).await?;
        tokio::spawn(connection);
        client
            .batch_execute("CREATE TABLE IF NOT EXISTS bench_ceiling (x BIGINT)")
            .await?;
        let mut ceiling = Ceiling { client, next: 0 };
        ceiling.time(200).await?;
        Ok(ceiling)
    }

    async fn time(&mut self, commits: usize) -> anyhow::Result<Duration> {
        let insert = self
            .client
            .prepare("INSERT INTO bench_ceiling VALUES ($1)")
            .await?;
        let started = Instant::now();
        for _ in 0..commits {
            self.client.batch_execute("BEGIN").await?;
            self.client.execute(&insert, &[&self.next]).await?;
            self.client.batch_execute("COMMIT").await?;
            self.next += 1;
        }
        Ok(started.elapsed())
    }
}

fn per_s(n: usize, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64().max(f64::MIN_POSITIVE)
}

async fn steps(
    url: &str,
    tasks: usize,
    steps: usize,
    ceiling_commits: usize,
    dir: &Path,
) -> anyhow::Result<Value> {
    let store = Arc::new(PostgresStore::connect(url).await?);
    let engine = command_engine(store.clone(), dir);
    let ids = crate::chains(&engine, tasks, steps).await?;
    let (first, second) = (ceiling_commits / 2, ceiling_commits - ceiling_commits / 2);
    let mut bare = Ceiling::open(url).await?;
    let before_run = bare.time(first).await?;
    let stats_before = store.stats();
    let started = Instant::now();
    crate::run_all(&engine, ids).await?;
    let elapsed = started.elapsed();
    let stats_after = store.stats();
    let after_run = bare.time(second).await?;
    let steps_per_s = per_s(tasks * steps, elapsed);
    let ceiling = per_s(ceiling_commits, before_run + after_run);
    let transactions = stats_after.commits - stats_before.commits;
    Ok(json!({
        "tasks": tasks,
        "steps_per_task": steps,
        "elapsed_s": (elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
        "steps_per_s": steps_per_s.round(),
        "transactions": transactions,
        "writes_per_transaction": ((stats_after.writes - stats_before.writes) as f64 / transactions.max(1) as f64 * 10.0).round() / 10.0,
        "transaction_mean_ms": ((stats_after.busy_ns - stats_before.busy_ns) as f64 / transactions.max(1) as f64 / 1e3).round() / 1e3,
        "ceiling_commits_per_s": ceiling.round(),
        "ceiling_before_after": [per_s(first, before_run).round(), per_s(second, after_run).round()],
        "steps_per_s_over_ceiling": (steps_per_s / ceiling * 1000.0).round() / 1000.0,
    }))
}

async fn failover(
    url: &str,
    tasks: usize,
    lease: &str,
    rein: &Path,
    dir: &Path,
) -> anyhow::Result<Value> {
    let marks = dir.join("marks");
    std::fs::create_dir_all(&marks)?;
    let more = ["--store", url, "--lease", lease];
    let (mut a, a_addr) = start_serve_with(rein, &dir.join("a"), "none", &more).await?;
    let (mut b, _) = start_serve_with(rein, &dir.join("b"), "none", &more).await?;
    let plan = in_flight(&marks);
    for _ in 0..tasks {
        let status = request(&a_addr, "POST", "/admin/tasks", Some(&plan)).await?;
        anyhow::ensure!(status == 201, "submitting a task got {status}");
    }
    wait_for("every step to run", Duration::from_secs(120), || {
        attempts(&marks, 1) >= tasks
    })
    .await?;
    a.start_kill()?;
    a.wait().await?;
    let killed = Instant::now();
    wait_for(
        "the first step to run again",
        Duration::from_secs(120),
        || attempts(&marks, 2) >= 1,
    )
    .await?;
    let first = killed.elapsed();
    wait_for("every step to run again", Duration::from_secs(120), || {
        attempts(&marks, 2) >= tasks
    })
    .await?;
    let all = killed.elapsed();
    let _ = b.start_kill();
    let ms = |d: Duration| (d.as_secs_f64() * 1e6).round() / 1000.0;
    let lease = humantime::parse_duration(lease)?;
    Ok(json!({
        "tasks": tasks,
        "lease_ms": ms(lease),
        "first_running_again_ms": ms(first),
        "all_running_again_ms": ms(all),
        "beyond_lease_ms": ms(all.saturating_sub(lease)),
    }))
}

#[allow(clippy::too_many_arguments)]
pub async fn postgres(
    url: Option<String>,
    tasks: usize,
    n: usize,
    ceiling_commits: usize,
    failover_tasks: usize,
    lease: &str,
    takeover_tasks: usize,
    rein: Option<PathBuf>,
    dir: &Path,
) -> anyhow::Result<Value> {
    let cluster = match url {
        Some(_) => None,
        None => Some(rein_test_support::postgres::Scratch::start()?),
    };
    let database = |name: &'static str| {
        let url = url.clone();
        let cluster = cluster.as_ref();
        async move {
            match (url, cluster) {
                (Some(url), _) => Ok::<String, anyhow::Error>(url),
                (None, Some(c)) => Ok(c
                    .database()
                    .await
                    .map_err(|e| anyhow::anyhow!("{name}: {e}"))?),
                (None, None) => anyhow::bail!("no server"),
            }
        }
    };
    let steps_url = database("steps").await?;
    let steps = steps(&steps_url, tasks, n, ceiling_commits, dir).await?;
    let failover = if failover_tasks > 0 {
        let rein = crate::sse::rein_binary(rein.clone())?;
        let url = database("failover").await?;
        failover(&url, failover_tasks, lease, &rein, dir).await?
    } else {
        Value::Null
    };
    let takeover = if takeover_tasks > 0 {
        let own = dir.join("takeover");
        std::fs::create_dir_all(&own)?;
        crate::takeover::takeover(takeover_tasks, "none", rein, &own).await?
    } else {
        Value::Null
    };
    Ok(json!({
        "bench": "postgres",
        "server": cluster.as_ref().map_or("given by --url", |_| "a throwaway local cluster"),
        "steps": steps,
        "failover": failover,
        "sqlite_takeover": takeover,
    }))
}
