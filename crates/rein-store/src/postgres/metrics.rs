//! The counters of spec §6 rule 21 on PostgreSQL: the SQLite queries, with
//! PostgreSQL's JSON and time functions.

use std::collections::BTreeMap;

use deadpool_postgres::Object;
use rein_core::StoreResult;
use rein_protocol::HarnessMetrics;
use rein_protocol::metrics::{CheckpointMetrics, HumanLoopMetrics, RecoveryMetrics, TaskMetrics};

use super::pg;

/// Milliseconds from text timestamp `a` to `b`.
macro_rules! ms {
    ($from:expr, $to:expr) => {
        concat!(
            "EXTRACT(EPOCH FROM ((",
            $to,
            ")::timestamptz - (",
            $from,
            ")::timestamptz)) * 1000"
        )
    };
}

async fn counts(c: &Object, sql: &str) -> StoreResult<BTreeMap<String, u64>> {
    let rows = c.query(sql, &[]).await.map_err(pg)?;
    Ok(rows
        .iter()
        .map(|r| {
            let key: Option<String> = r.get(0);
            (
                key.unwrap_or_default(),
                u64::try_from(r.get::<_, i64>(1)).unwrap_or(0),
            )
        })
        .collect())
}

async fn average(c: &Object, sql: &str) -> StoreResult<Option<f64>> {
    let row = c.query_one(sql, &[]).await.map_err(pg)?;
    Ok(row.get::<_, Option<f64>>(0))
}

pub(crate) async fn compute(c: &Object) -> StoreResult<HarnessMetrics> {
    let by_status = counts(c, "SELECT status, COUNT(*) FROM tasks GROUP BY status").await?;
    let status = |s: &str| by_status.get(s).copied().unwrap_or(0);
    let tasks = TaskMetrics {
        total: by_status.values().sum(),
        pending: status("pending"),
        in_progress: status("in_progress"),
        completed: status("completed"),
        failed: status("failed"),
        paused: status("paused"),
        cancelled: status("cancelled"),
        average_duration_ms: average(
            c,
            concat!(
                "SELECT AVG(",
                ms!("created_at", "status_at"),
                ")::float8 FROM tasks WHERE status IN ('completed', 'failed', 'cancelled')"
            ),
        )
        .await?,
    };

    let events = counts(
        c,
        "SELECT type, COUNT(*) FROM events
         WHERE type IN ('checkpoint_created', 'checkpoint_passed', 'checkpoint_failed',
                        'checkpoint_skipped', 'recovery_attempted', 'recovery_succeeded',
                        'recovery_failed')
         GROUP BY type",
    )
    .await?;
    let event = |t: &str| events.get(t).copied().unwrap_or(0);
    let checkpoints = CheckpointMetrics {
        total: event("checkpoint_created"),
        passed: event("checkpoint_passed"),
        failed: event("checkpoint_failed"),
        skipped: event("checkpoint_skipped"),
        average_duration_ms: average(
            c,
            "SELECT AVG((body::json #>> '{data,duration_ms}')::float8)::float8 FROM events
             WHERE type IN ('checkpoint_passed', 'checkpoint_failed')",
        )
        .await?,
        by_type: counts(
            c,
            "SELECT body::json #>> '{data,checkpoint,type}', COUNT(*) FROM events
             WHERE type = 'checkpoint_created' GROUP BY 1",
        )
        .await?,
    };
    let recovery = RecoveryMetrics {
        attempts: event("recovery_attempted"),
        successes: event("recovery_succeeded"),
        failures: event("recovery_failed"),
        by_error_type: counts(
            c,
            "SELECT body::json #>> '{data,error_type}', COUNT(*) FROM events
             WHERE type IN ('recovery_attempted', 'recovery_failed') GROUP BY 1",
        )
        .await?,
    };

    let approvals = counts(c, "SELECT status, COUNT(*) FROM approvals GROUP BY status").await?;
    let approval = |s: &str| approvals.get(s).copied().unwrap_or(0);
    let human_loop = HumanLoopMetrics {
        requests: approvals.values().sum(),
        pending: approval("pending"),
        approvals: approval("approved"),
        denials: approval("denied"),
        skips: approval("skipped"),
        expirations: approval("expired"),
        average_response_ms: average(
            c,
            concat!(
                "SELECT AVG(",
                ms!("created_at", "body::json #>> '{response,decided_at}'"),
                ")::float8 FROM approvals
                 WHERE status IN ('approved', 'denied', 'skipped')
                   AND body::json #>> '{response,decided_at}' IS NOT NULL"
            ),
        )
        .await?,
    };
    Ok(HarnessMetrics {
        tasks,
        checkpoints,
        recovery,
        human_loop,
        generated_at: chrono::Utc::now(),
    })
}
