//! The counters of spec §6 rule 21 on PostgreSQL: the SQLite queries, with
//! PostgreSQL's JSON and time functions, assembled as SQLite's are.

use std::collections::BTreeMap;

use deadpool_postgres::Object;
use rein_core::StoreResult;
use rein_protocol::HarnessMetrics;

use super::pg;
use crate::metrics::{COUNTED_EVENTS, Counted, assemble};

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
    Ok(assemble(Counted {
        tasks_by_status: counts(c, "SELECT status, COUNT(*) FROM tasks GROUP BY status").await?,
        task_duration_ms: average(
            c,
            concat!(
                "SELECT AVG(",
                ms!("created_at", "status_at"),
                ")::float8 FROM tasks WHERE status IN ('completed', 'failed', 'cancelled')"
            ),
        )
        .await?,
        events_by_type: counts(
            c,
            &format!(
                "SELECT type, COUNT(*) FROM events WHERE type IN ({COUNTED_EVENTS}) GROUP BY type"
            ),
        )
        .await?,
        checkpoint_duration_ms: average(
            c,
            "SELECT AVG((body::json #>> '{data,duration_ms}')::float8)::float8 FROM events
             WHERE type IN ('checkpoint_passed', 'checkpoint_failed')",
        )
        .await?,
        checkpoints_by_type: counts(
            c,
            "SELECT body::json #>> '{data,checkpoint,type}', COUNT(*) FROM events
             WHERE type = 'checkpoint_created' GROUP BY 1",
        )
        .await?,
        recoveries_by_error_type: counts(
            c,
            "SELECT body::json #>> '{data,error_type}', COUNT(*) FROM events
             WHERE type IN ('recovery_attempted', 'recovery_failed') GROUP BY 1",
        )
        .await?,
        approvals_by_status: counts(c, "SELECT status, COUNT(*) FROM approvals GROUP BY status")
            .await?,
        response_ms: average(
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
    }))
}
