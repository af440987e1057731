//! The counters of spec §6 rule 21, aggregated in SQL from what the store already
//! holds: task rows, the event logs, and approval rows.

use std::collections::BTreeMap;

use rein_core::StoreResult;
use rein_protocol::HarnessMetrics;
use rein_protocol::metrics::{CheckpointMetrics, HumanLoopMetrics, RecoveryMetrics, TaskMetrics};
use rusqlite::Connection;

use crate::sqlite::backend;

/// Milliseconds between two RFC 3339 text columns or expressions.
const MS: &str = "86400000.0";

fn counts(conn: &Connection, sql: &str) -> StoreResult<BTreeMap<String, u64>> {
    let mut stmt = conn.prepare_cached(sql).map_err(backend)?;
    let rows = stmt
        .query_map([], |r| {
            Ok((r.get::<_, Option<String>>(0)?, r.get::<_, i64>(1)?))
        })
        .map_err(backend)?;
    let mut out = BTreeMap::new();
    for row in rows {
        let (key, n) = row.map_err(backend)?;
        out.insert(key.unwrap_or_default(), u64::try_from(n).unwrap_or(0));
    }
    Ok(out)
}

fn average(conn: &Connection, sql: &str) -> StoreResult<Option<f64>> {
    conn.query_row(sql, [], |r| r.get::<_, Option<f64>>(0))
        .map_err(backend)
}

pub(crate) fn compute(conn: &Connection) -> StoreResult<HarnessMetrics> {
    Ok(assemble(Counted {
        tasks_by_status: counts(conn, "SELECT status, COUNT(*) FROM tasks GROUP BY status")?,
        task_duration_ms: average(
            conn,
            &format!(
                "SELECT AVG((julianday(status_at) - julianday(created_at)) * {MS}) FROM tasks
                 WHERE status IN ('completed', 'failed', 'cancelled')"
            ),
        )?,
        events_by_type: counts(conn, &format!("SELECT type, COUNT(*) FROM events WHERE type IN ({COUNTED_EVENTS}) GROUP BY type"))?,
        checkpoint_duration_ms: average(
            conn,
            "SELECT AVG(json_extract(body, '$.data.duration_ms')) FROM events
             WHERE type IN ('checkpoint_passed', 'checkpoint_failed')",
        )?,
        checkpoints_by_type: counts(
            conn,
            "SELECT json_extract(body, '$.data.checkpoint.type'), COUNT(*) FROM events
             WHERE type = 'checkpoint_created' GROUP BY 1",
        )?,
        recoveries_by_error_type: counts(
            conn,
            "SELECT json_extract(body, '$.data.error_type'), COUNT(*) FROM events
             WHERE type IN ('recovery_attempted', 'recovery_failed') GROUP BY 1",
        )?,
        approvals_by_status: counts(conn, "SELECT status, COUNT(*) FROM approvals GROUP BY status")?,
        response_ms: average(
            conn,
            &format!(
                "SELECT AVG((julianday(json_extract(body, '$.response.decided_at')) - julianday(created_at)) * {MS})
                 FROM approvals
                 WHERE status IN ('approved', 'denied', 'skipped')
                   AND json_extract(body, '$.response.decided_at') IS NOT NULL"
            ),
        )?,
    }))
}

/// The event types the counters count.
pub(crate) const COUNTED_EVENTS: &str =
    "'checkpoint_created', 'checkpoint_passed', 'checkpoint_failed',
    'checkpoint_skipped', 'recovery_attempted', 'recovery_succeeded', 'recovery_failed'";

/// What a backend's queries counted, for [`assemble`].
pub(crate) struct Counted {
    pub tasks_by_status: BTreeMap<String, u64>,
    /// Of finished tasks, from creation to their last status change.
    pub task_duration_ms: Option<f64>,
    /// Of the [`COUNTED_EVENTS`].
    pub events_by_type: BTreeMap<String, u64>,
    pub checkpoint_duration_ms: Option<f64>,
    pub checkpoints_by_type: BTreeMap<String, u64>,
    pub recoveries_by_error_type: BTreeMap<String, u64>,
    pub approvals_by_status: BTreeMap<String, u64>,
    /// Of decided requests, from asking to the decision.
    pub response_ms: Option<f64>,
}

/// The counters of spec §6 rule 21 from what was counted.
pub(crate) fn assemble(c: Counted) -> HarnessMetrics {
    let status = |s: &str| c.tasks_by_status.get(s).copied().unwrap_or(0);
    let tasks = TaskMetrics {
        total: c.tasks_by_status.values().sum(),
        pending: status("pending"),
        in_progress: status("in_progress"),
        completed: status("completed"),
        failed: status("failed"),
        paused: status("paused"),
        cancelled: status("cancelled"),
        average_duration_ms: c.task_duration_ms,
    };
    let event = |t: &str| c.events_by_type.get(t).copied().unwrap_or(0);
    let checkpoints = CheckpointMetrics {
        total: event("checkpoint_created"),
        passed: event("checkpoint_passed"),
        failed: event("checkpoint_failed"),
        skipped: event("checkpoint_skipped"),
        average_duration_ms: c.checkpoint_duration_ms,
        by_type: c.checkpoints_by_type,
    };
    let recovery = RecoveryMetrics {
        attempts: event("recovery_attempted"),
        successes: event("recovery_succeeded"),
        failures: event("recovery_failed"),
        by_error_type: c.recoveries_by_error_type,
    };
    let approval = |s: &str| c.approvals_by_status.get(s).copied().unwrap_or(0);
    let human_loop = HumanLoopMetrics {
        requests: c.approvals_by_status.values().sum(),
        pending: approval("pending"),
        approvals: approval("approved"),
        denials: approval("denied"),
        skips: approval("skipped"),
        expirations: approval("expired"),
        average_response_ms: c.response_ms,
    };
    HarnessMetrics {
        tasks,
        checkpoints,
        recovery,
        human_loop,
        generated_at: chrono::Utc::now(),
    }
}
