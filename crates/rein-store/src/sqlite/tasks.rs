//! Tasks on SQLite: a write's events appended with the summary they carry, the
//! task row touched only when the status changes, reads of logs and summaries.

use rein_protocol::Timestamp;
use serde::Serialize;

use super::event_body::Row;
use super::*;

/// A task's summary as of its last write: the one its last write's last event
/// carries, or the task row's for a task none of whose events carries one. An
/// event carries either a whole summary (it starts with its `id`) or only what
/// moves as the task runs ([`Moving`]), a JSON merge patch over the row's.
macro_rules! current_summary {
    () => {
        "COALESCE((SELECT CASE WHEN substr(e.summary, 1, 6) = '{\"id\":' THEN e.summary
                               ELSE json_patch(tasks.summary, e.summary) END
                   FROM events e
                   WHERE e.tkey = tasks.tkey AND e.summary IS NOT NULL
                   ORDER BY e.seq DESC LIMIT 1), tasks.summary)"
    };
}

/// What of a task's summary stays as it was when the row was last written:
/// the task row keeps it (`tasks.lasting`), and a write whose summary still
/// has it carries only [`Moving`].
#[derive(Serialize)]
struct Lasting<'a> {
    id: &'a TaskId,
    session_id: &'a str,
    description: &'a str,
    workspace_path: &'a Option<String>,
    restored_from: &'a Option<rein_protocol::SnapshotId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    forked_from: &'a Option<rein_protocol::ForkedFrom>,
    trace_id: &'a str,
    created_at: &'a Timestamp,
}

/// What of a task's summary moves as the task runs, as a JSON merge patch:
/// a field that is none is written `null`, which takes it out.
#[derive(Serialize)]
struct Moving<'a> {
    status: rein_protocol::TaskStatus,
    steps_total: usize,
    steps_finished: usize,
    blocked_reason: &'a Option<String>,
    error: &'a Option<String>,
    runner: &'a Option<rein_protocol::RunnerInfo>,
    last_seq: u64,
    updated_at: &'a Timestamp,
}

/// The whole summary of its two parts, both JSON objects: the lasting fields,
/// then the moving ones (a field that is none written `null`, which reads as
/// none). It starts with its `id`, as a read expects of a whole summary.
fn whole(lasting: &str, moving: &str) -> String {
    let open = lasting.strip_suffix('}').unwrap_or(lasting);
    let rest = moving.strip_prefix('{').unwrap_or(moving);
    format!("{open},{rest}")
}

/// A summary's lasting part and its moving part, as stored.
fn split(summary: &TaskSummary) -> serde_json::Result<(String, String)> {
    let lasting = Lasting {
        id: &summary.id,
        session_id: &summary.session_id,
        description: &summary.description,
        workspace_path: &summary.workspace_path,
        restored_from: &summary.restored_from,
        forked_from: &summary.forked_from,
        trace_id: &summary.trace_id,
        created_at: &summary.created_at,
    };
    let moving = Moving {
        status: summary.status,
        steps_total: summary.steps_total,
        steps_finished: summary.steps_finished,
        blocked_reason: &summary.blocked_reason,
        error: &summary.error,
        runner: &summary.runner,
        last_seq: summary.last_seq,
        updated_at: &summary.updated_at,
    };
    Ok((
        serde_json::to_string(&lasting)?,
        serde_json::to_string(&moving)?,
    ))
}

/// A write encoded on the caller's thread, so the writer thread only runs SQL.
pub(super) struct Encoded {
    task_id: String,
    expected_seq: i64,
    status: &'static str,
    session_id: String,
    created_at: String,
    updated_at: String,
    summary: String,
    /// The summary's [`Lasting`] part, and its [`Moving`] part.
    lasting: String,
    moving: String,
    events: Vec<(i64, &'static str, String)>,
    /// New approval requests: (id, status, created_at, body).
    approvals: Vec<(String, &'static str, String, String)>,
    /// Ledger entries to seal after the ledger's last.
    ledger: Vec<LedgerEntry>,
    /// A plan replacing the task's.
    plan: Option<String>,
}

pub(super) fn encode(write: &TaskWrite) -> StoreResult<Encoded> {
    let events = write
        .events
        .iter()
        .map(|e| {
            super::event_body::encode(e, &write.summary)
                .map(|body| (seq(e.seq), e.event_type().as_str(), body))
                .map_err(backend)
        })
        .collect::<StoreResult<Vec<_>>>()?;
    let approvals = crate::rows::approval_rows(&write.approvals)?;
    let (lasting, moving) = split(&write.summary).map_err(backend)?;
    let summary = whole(&lasting, &moving);
    Ok(Encoded {
        lasting,
        moving,
        approvals,
        ledger: write.ledger.clone(),
        plan: write
            .plan
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(backend)?,
        task_id: write.task_id.to_string(),
        expected_seq: seq(write.expected_seq),
        status: write.summary.status.as_str(),
        session_id: write.summary.session_id.clone(),
        created_at: ts(&write.summary.created_at),
        updated_at: ts(&write.summary.updated_at),
        summary,
        events,
    })
}

/// Rows per multi-row INSERT (five parameters each, far below SQLite's limit).
pub(super) const EVENTS_PER_INSERT: usize = 64;

/// Appends a write's events to the log of the task whose key is `tkey`; the last
/// of them carries `summary` (the write's whole summary, or its moving part).
pub(super) fn append(conn: &Connection, tkey: i64, w: &Encoded, summary: &str) -> StoreResult<()> {
    let last = w.events.len().saturating_sub(1);
    let (none, summary): (Option<&str>, Option<&str>) = (None, Some(summary));
    for (n, chunk) in w.events.chunks(EVENTS_PER_INSERT).enumerate() {
        let mut sql = String::from("INSERT INTO events (tkey, seq, type, body, summary) VALUES ");
        for i in 0..chunk.len() {
            let p = i * 5;
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!(
                "(?{}, ?{}, ?{}, ?{}, ?{})",
                p + 1,
                p + 2,
                p + 3,
                p + 4,
                p + 5
            ));
        }
        let mut insert = conn.prepare_cached(&sql).map_err(backend)?;
        let mut params: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(chunk.len() * 5);
        for (i, (seq, kind, body)) in chunk.iter().enumerate() {
            let carried = if n * EVENTS_PER_INSERT + i == last {
                &summary
            } else {
                &none
            };
            params.extend([&tkey as &dyn rusqlite::ToSql, seq, kind, body, carried]);
        }
        insert.execute(params.as_slice()).map_err(backend)?;
    }
    for (id, status, created_at, body) in &w.approvals {
        conn.prepare_cached(
            "INSERT INTO approvals (id, task_id, status, created_at, body) VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .and_then(|mut stmt| stmt.execute(params![id, w.task_id, status, created_at, body]))
        .map_err(backend)?;
    }
    for entry in &w.ledger {
        append_ledger(conn, entry.clone())?;
    }
    Ok(())
}

/// A task's row as a write finds it: its key, its status and the lasting
/// part of its summary (none in a row written before it was kept).
pub(super) struct TaskRow {
    tkey: i64,
    status: String,
    lasting: Option<String>,
}

/// The row of a task whose log is at `expected` (its largest event `seq`); a
/// write that read the task at another position is refused.
pub(super) fn task_at(conn: &Connection, task_id: &TaskId, expected: i64) -> StoreResult<TaskRow> {
    let found = conn
        .prepare_cached(
            "SELECT tkey, status, (SELECT max(seq) FROM events WHERE events.tkey = tasks.tkey),
                    lasting
             FROM tasks WHERE id = ?1",
        )
        .and_then(|mut stmt| {
            stmt.query_row([task_id.as_str()], |r| {
                let row = TaskRow {
                    tkey: r.get(0)?,
                    status: r.get(1)?,
                    lasting: r.get(3)?,
                };
                Ok((row, r.get::<_, Option<i64>>(2)?))
            })
            .optional()
        })
        .map_err(backend)?;
    let Some((row, actual)) = found else {
        return Err(StoreError::TaskNotFound(task_id.clone()));
    };
    let actual = actual.unwrap_or(0);
    if actual != expected {
        return Err(StoreError::Conflict {
            task_id: task_id.clone(),
            expected: u64::try_from(expected).unwrap_or(0),
            actual: u64::try_from(actual).unwrap_or(0),
        });
    }
    Ok(row)
}

pub(super) fn task_id_of(id: &str) -> StoreResult<TaskId> {
    TaskId::parse(id).map_err(|e| corrupt("task id", e))
}

pub(super) fn load_summary(conn: &Connection, id: &str) -> StoreResult<Option<TaskSummary>> {
    let body: Option<String> = conn
        .prepare_cached(concat!(
            "SELECT ",
            current_summary!(),
            " FROM tasks WHERE id = ?1"
        ))
        .and_then(|mut stmt| stmt.query_row([id], |r| r.get(0)).optional())
        .map_err(backend)?;
    body.map(|b| serde_json::from_str(&b).map_err(|e| corrupt("task summary", e)))
        .transpose()
}

#[async_trait]
impl TaskStore for SqliteStore {
    async fn create(&self, task: NewTask) -> StoreResult<()> {
        let w = encode(&task.write)?;
        let plan = serde_json::to_string(&task.plan).map_err(backend)?;
        let id = task.write.task_id.clone();
        self.writer
            .write(move |conn| {
                let tkey: Option<i64> = conn
                    .query_row(
                        "INSERT INTO tasks (id, session_id, status, created_at, status_at, summary, lasting)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (id) DO NOTHING RETURNING tkey",
                        params![w.task_id, w.session_id, w.status, w.created_at, w.updated_at, w.summary, w.lasting],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(backend)?;
                let Some(tkey) = tkey else {
                    return Err(StoreError::AlreadyExists(id.clone()));
                };
                conn.execute("INSERT INTO plans (task_id, plan) VALUES (?1, ?2)", params![w.task_id, plan])
                    .map_err(backend)?;
                append(conn, tkey, &w, &w.moving)
            })
            .await
    }

    async fn save(&self, write: TaskWrite) -> StoreResult<()> {
        let w = encode(&write)?;
        let task_id = write.task_id;
        self.writer
            .write(move |conn| {
                // The log moves on only from the position the writer read.
                let task = task_at(conn, &task_id, w.expected_seq)?;
                if w.events.is_empty() {
                    // The summary and the status follow from the log: unchanged.
                    return Ok(());
                }
                // Most writes keep the status, and then the task row stays as it
                // is: the summary travels with the events, as what moved since
                // the row was written where the rest is the row's.
                let carried = if task.status != w.status {
                    conn.prepare_cached(
                        "UPDATE tasks SET status = ?2, status_at = ?3, summary = ?4, lasting = ?5
                         WHERE tkey = ?1",
                    )
                    .and_then(|mut stmt| {
                        stmt.execute(params![
                            task.tkey,
                            w.status,
                            w.updated_at,
                            w.summary,
                            w.lasting
                        ])
                    })
                    .map_err(backend)?;
                    &w.moving
                } else if task.lasting.as_deref() == Some(w.lasting.as_str()) {
                    &w.moving
                } else {
                    &w.summary
                };
                if let Some(plan) = &w.plan {
                    conn.execute(
                        "UPDATE plans SET plan = ?2 WHERE task_id = ?1",
                        params![w.task_id, plan],
                    )
                    .map_err(backend)?;
                }
                append(conn, task.tkey, &w, carried)
            })
            .await
    }

    async fn load_summary(&self, id: &TaskId) -> StoreResult<Option<TaskSummary>> {
        // One indexed row from the page cache: cheaper inline than a thread hop.
        self.read_inline(|conn| load_summary(conn, id.as_str()))
    }

    async fn load_plan(&self, id: &TaskId) -> StoreResult<Option<TaskDecomposition>> {
        let id = id.to_string();
        self.read(move |conn| {
            let body: Option<String> = conn
                .query_row("SELECT plan FROM plans WHERE task_id = ?1", [&id], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(backend)?;
            body.map(|b| serde_json::from_str(&b).map_err(|e| corrupt("plan", e)))
                .transpose()
        })
        .await
    }

    async fn list(&self, filter: &TaskFilter) -> StoreResult<TaskPage> {
        if let Some(c) = &filter.cursor {
            TaskId::parse(c).map_err(|_| StoreError::BadCursor(c.clone()))?;
        }
        let filter = filter.clone();
        self.read(move |conn| {
            let limit = filter.limit.unwrap_or(50).clamp(1, MAX_PAGE);
            let mut q = Where::new(
                concat!("SELECT ", current_summary!(), " FROM tasks"),
                Mark::Question,
            );
            q.and_some("session_id =", filter.session_id.clone());
            q.and_some("status =", filter.status.map(|s| s.as_str().to_owned()));
            q.and_some("created_at >=", filter.created_from.as_ref().map(ts));
            q.and_some("created_at <", filter.created_to.as_ref().map(ts));
            q.and_some("id <", filter.cursor.clone());
            q.and_some(
                "json_extract(tasks.summary, '$.forked_from.task_id') =",
                filter.forked_from.as_ref().map(|t| t.to_string()),
            );
            let items: Vec<TaskSummary> = q.run(
                conn,
                &format!(" ORDER BY id DESC LIMIT {}", limit + 1),
                "task summary",
            )?;
            let (items, next_cursor) = page(items, limit, |h| h.id.to_string());
            Ok(TaskPage { items, next_cursor })
        })
        .await
    }

    async fn events(
        &self,
        id: &TaskId,
        after_seq: u64,
        limit: usize,
    ) -> StoreResult<Vec<HarnessEvent>> {
        let id = id.to_string();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |conn| {
            // What the log's slim bodies leave out, read once for them all.
            let task: Option<(i64, String, Option<String>)> = conn
                .prepare_cached(
                    "SELECT tkey, session_id, json_extract(summary, '$.trace_id')
                     FROM tasks WHERE id = ?1",
                )
                .and_then(|mut stmt| {
                    stmt.query_row([&id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                        .optional()
                })
                .map_err(backend)?;
            let Some((tkey, session_id, trace_id)) = task else {
                return Ok(Vec::new());
            };
            let mut stmt = conn
                .prepare_cached(
                    "SELECT seq, body FROM events WHERE tkey = ?1 AND seq > ?2
                     ORDER BY seq LIMIT ?3",
                )
                .map_err(backend)?;
            let mut rows = stmt
                .query(params![tkey, seq(after_seq), limit])
                .map_err(backend)?;
            let mut out = Vec::new();
            while let Some(r) = rows.next().map_err(backend)? {
                let row = Row {
                    seq: r.get(0).map_err(backend)?,
                    task_id: &id,
                    session_id: &session_id,
                    trace_id: trace_id.as_deref().unwrap_or_default(),
                };
                out.push(decode_event(
                    &r.get::<_, String>(1).map_err(backend)?,
                    &row,
                )?);
            }
            Ok(out)
        })
        .await
    }

    async fn all_events(&self, after: u64, limit: usize) -> StoreResult<Vec<(u64, HarnessEvent)>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT e.gseq, e.seq, e.body, t.id, t.session_id,
                            json_extract(t.summary, '$.trace_id')
                     FROM events e JOIN tasks t ON t.tkey = e.tkey
                     WHERE e.gseq > ?1 ORDER BY e.gseq LIMIT ?2",
                )
                .map_err(backend)?;
            let mut rows = stmt.query(params![seq(after), limit]).map_err(backend)?;
            let mut out = Vec::new();
            while let Some(r) = rows.next().map_err(backend)? {
                let gseq: u64 = r.get(0).map_err(backend)?;
                let (task_id, session_id, trace_id): (String, String, Option<String>) = (
                    r.get(3).map_err(backend)?,
                    r.get(4).map_err(backend)?,
                    r.get(5).map_err(backend)?,
                );
                let row = Row {
                    seq: r.get(1).map_err(backend)?,
                    task_id: &task_id,
                    session_id: &session_id,
                    trace_id: trace_id.as_deref().unwrap_or_default(),
                };
                out.push((
                    gseq,
                    decode_event(&r.get::<_, String>(2).map_err(backend)?, &row)?,
                ));
            }
            Ok(out)
        })
        .await
    }

    async fn positions(&self) -> StoreResult<(u64, u64)> {
        self.read_inline(|conn| {
            conn.prepare_cached(
                "SELECT (SELECT coalesce(max(gseq), 0) FROM events), (SELECT coalesce(max(seq), 0) FROM audit)",
            )
            .and_then(|mut s| s.query_row([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))))
            .map(|(e, a)| (u64::try_from(e).unwrap_or(0), u64::try_from(a).unwrap_or(0)))
            .map_err(backend)
        })
    }

    async fn delete(&self, id: &TaskId, expected_seq: u64) -> StoreResult<()> {
        let task_id = id.clone();
        let expected = seq(expected_seq);
        self.writer
            .write(move |conn| {
                let id = task_id.as_str();
                let tkey = task_at(conn, &task_id, expected)?.tkey;
                for table in ["tasks", "events"] {
                    conn.execute(&format!("DELETE FROM {table} WHERE tkey = ?1"), [tkey])
                        .map_err(backend)?;
                }
                for table in ["snapshots", "controls", "plans", "approvals", "journal"] {
                    conn.execute(&format!("DELETE FROM {table} WHERE task_id = ?1"), [id])
                        .map_err(backend)?;
                }
                // A task's agent sessions go with it (its contracts and evidence stay).
                conn.execute(
                    "DELETE FROM records WHERE task_id = ?1 AND kind = ?2",
                    params![id, RecordKind::Session.as_str()],
                )
                .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn put_snapshot(&self, snapshot: &Snapshot) -> StoreResult<()> {
        let body = serde_json::to_string(snapshot).map_err(backend)?;
        let (id, task, s, at) = (
            snapshot.id.to_string(),
            snapshot.task_id.to_string(),
            seq(snapshot.seq),
            ts(&snapshot.created_at),
        );
        let task_id = snapshot.task_id.clone();
        self.writer
            .write(move |conn| {
                let exists: Option<i64> = conn
                    .query_row("SELECT 1 FROM tasks WHERE id = ?1", [&task], |r| r.get(0))
                    .optional()
                    .map_err(backend)?;
                if exists.is_none() {
                    return Err(StoreError::TaskNotFound(task_id.clone()));
                }
                conn.execute(
                    "INSERT INTO snapshots (id, task_id, seq, created_at, body) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![id, task, s, at, body],
                )
                .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn get_snapshot(&self, id: &SnapshotId) -> StoreResult<Option<Snapshot>> {
        let id = id.to_string();
        self.read(move |conn| {
            let body: Option<String> = conn
                .query_row("SELECT body FROM snapshots WHERE id = ?1", [&id], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(backend)?;
            body.map(|b| serde_json::from_str(&b).map_err(|e| corrupt("snapshot", e)))
                .transpose()
        })
        .await
    }

    async fn list_snapshots(&self, task_id: &TaskId) -> StoreResult<Vec<SnapshotInfo>> {
        let id = task_id.to_string();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare("SELECT id, task_id, seq, created_at FROM snapshots WHERE task_id = ?1 ORDER BY id")
                .map_err(backend)?;
            let rows = stmt
                .query_map([&id], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?, r.get::<_, String>(3)?))
                })
                .map_err(backend)?;
            rows.map(|row| {
                let (id, task, s, at) = row.map_err(backend)?;
                Ok(SnapshotInfo {
                    id: SnapshotId::parse(&id).map_err(|e| corrupt("snapshot id", e))?,
                    task_id: task_id_of(&task)?,
                    seq: u64::try_from(s).unwrap_or(0),
                    created_at: chrono::DateTime::parse_from_rfc3339(&at)
                        .map_err(|e| corrupt("snapshot time", e))?
                        .to_utc(),
                })
            })
            .collect()
        })
        .await
    }

    async fn request_control(&self, request: &ControlRequest) -> StoreResult<()> {
        let body = serde_json::to_string(request).map_err(backend)?;
        let task = request.task_id.to_string();
        self.writer
            .write(move |conn| {
                conn.execute(
                    "INSERT INTO controls (task_id, body) VALUES (?1, ?2)",
                    params![task, body],
                )
                .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn pending_controls(&self) -> StoreResult<Vec<ControlRequest>> {
        self.read(|conn| {
            query_json(
                conn,
                "SELECT body FROM controls ORDER BY id",
                [],
                "control request",
            )
        })
        .await
    }

    async fn take_controls(&self, task_id: &TaskId) -> StoreResult<Vec<ControlRequest>> {
        let id = task_id.to_string();
        self.writer
            .write(move |conn| {
                let found = query_json(
                    conn,
                    "SELECT body FROM controls WHERE task_id = ?1 ORDER BY id",
                    [&id],
                    "control request",
                )?;
                conn.execute("DELETE FROM controls WHERE task_id = ?1", [&id])
                    .map_err(backend)?;
                Ok(found)
            })
            .await
    }

    async fn metrics(&self) -> StoreResult<HarnessMetrics> {
        self.read(crate::metrics::compute).await
    }

    async fn probe(&self) -> StoreResult<rein_core::store::StoreProbe> {
        // A row written to a real table of the store's own file and taken
        // out again in the same transaction: the commit writes its pages to
        // the file (a full disk fails it), and nobody ever sees the row.
        let probed = self
            .writer
            .write(|conn| {
                conn.execute(
                    "INSERT INTO controls (task_id, body) VALUES ('health-probe', '{}')",
                    [],
                )
                .and_then(|_| {
                    conn.execute("DELETE FROM controls WHERE rowid = last_insert_rowid()", [])
                })
                .map(drop)
                .map_err(backend)
            })
            .await;
        let last_write_error = crate::rows::probe_write(probed, &self.writer.counters.last_error)?;
        self.read(|conn| {
            conn.query_row("SELECT COUNT(*) FROM tasks", [], |r| r.get::<_, i64>(0))
                .map_err(backend)?;
            Ok(())
        })
        .await?;
        let free_bytes = nix::sys::statvfs::statvfs(store_dir(&self.path))
            .ok()
            .map(|v| v.blocks_available().saturating_mul(v.fragment_size()));
        let mut lost = self.read(lost_writes).await?;
        lost.retain(|l| l.acknowledged_at.is_none());
        Ok(rein_core::store::StoreProbe {
            location: self.path.display().to_string(),
            free_bytes,
            last_write_error,
            lost_writes: lost,
        })
    }

    async fn lost_writes(&self) -> StoreResult<Vec<LostWrites>> {
        self.read(lost_writes).await
    }

    async fn acknowledge_lost_writes(&self) -> StoreResult<usize> {
        let now = rows::ts(&chrono::Utc::now());
        self.writer
            .write(move |conn| {
                conn.execute(
                    "UPDATE lost_writes SET acknowledged_at = ?1 WHERE acknowledged_at IS NULL",
                    [&now],
                )
                .map_err(backend)
            })
            .await
    }
}

/// A stored event body read back whole, given its row ([`super::event_body`]).
fn decode_event(body: &str, row: &Row<'_>) -> StoreResult<HarnessEvent> {
    super::event_body::decode(body, row).map_err(|e| corrupt("event", e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn summary(status: &str, error: Option<&str>, runner: bool) -> TaskSummary {
        let mut value = serde_json::json!({
            "id": "task_01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "session_id": "s",
            "description": "d",
            "status": status,
            "steps_total": 4,
            "steps_finished": 2,
            "blocked_reason": "waiting",
            "workspace_path": "/w",
            "restored_from": "snap_01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
            "last_seq": 9,
            "created_at": "2026-12-05T00:00:00Z",
            "updated_at": "2026-12-05T00:00:01Z"
        });
        if let Some(e) = error {
            value["error"] = e.into();
        }
        if runner {
            value["runner"] = serde_json::json!({ "host": "h", "pid": 7 });
        }
        serde_json::from_value(value).unwrap()
    }

    fn keys(json: &str) -> Vec<String> {
        let value: serde_json::Value = serde_json::from_str(json).unwrap();
        value.as_object().unwrap().keys().cloned().collect()
    }

    #[test]
    fn a_summary_is_its_lasting_part_and_its_moving_part_each_field_once() {
        let full = summary("failed", Some("boom"), true);
        let (lasting, moving) = split(&full).unwrap();
        let mut parts = keys(&lasting);
        parts.extend(keys(&moving));
        parts.sort();
        let mut fields = keys(&serde_json::to_string(&full).unwrap());
        fields.sort();
        assert_eq!(
            parts, fields,
            "a field of TaskSummary in neither part, or in both"
        );
        // The whole summary starts with its id (what a read tells it by); the
        // moving part does not.
        assert!(
            serde_json::to_string(&full)
                .unwrap()
                .starts_with("{\"id\":")
        );
        assert!(!moving.starts_with("{\"id\":"));
        // What a write stores as the whole summary is its parts joined: it
        // starts with the id, and reads as the summary itself.
        let joined = whole(&lasting, &moving);
        assert!(joined.starts_with("{\"id\":"), "{joined}");
        assert_eq!(serde_json::from_str::<TaskSummary>(&joined).unwrap(), full);
    }

    #[test]
    fn the_moving_part_over_an_older_row_reads_as_the_whole_summary() {
        let conn = Connection::open_in_memory().unwrap();
        // The row as written at a status change; then the task moved on, and
        // lost its error and its runner.
        let row = summary("in_progress", Some("old"), true);
        let now = summary("paused", None, false);
        let (_, moving) = split(&now).unwrap();
        let merged: String = conn
            .query_row(
                "SELECT json_patch(?1, ?2)",
                [serde_json::to_string(&row).unwrap(), moving],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(serde_json::from_str::<TaskSummary>(&merged).unwrap(), now);
    }
}
