//! Tasks on PostgreSQL: a write's events appended and the task row advanced in
//! one statement, fenced by the task's lease; reads of logs and summaries.

use super::*;

/// A write encoded on the caller's task, so the writer only runs SQL.
pub(super) struct Encoded {
    task_id: String,
    expected_seq: i64,
    last_seq: i64,
    status: &'static str,
    session_id: String,
    created_at: String,
    updated_at: String,
    summary: String,
    seqs: Vec<i64>,
    types: Vec<String>,
    bodies: Vec<String>,
    /// New approval requests: (id, status, created_at, body).
    approvals: Vec<(String, &'static str, String, String)>,
    ledger: Vec<LedgerEntry>,
    plan: Option<String>,
}

pub(super) fn encode(write: &TaskWrite) -> StoreResult<Encoded> {
    let mut seqs = Vec::with_capacity(write.events.len());
    let mut types = Vec::with_capacity(write.events.len());
    let mut bodies = Vec::with_capacity(write.events.len());
    for e in &write.events {
        seqs.push(seq(e.seq));
        types.push(e.event_type().as_str().to_owned());
        bodies.push(serde_json::to_string(e).map_err(backend)?);
    }
    let approvals = crate::rows::approval_rows(&write.approvals)?;
    Ok(Encoded {
        task_id: write.task_id.to_string(),
        expected_seq: seq(write.expected_seq),
        last_seq: seqs.last().copied().unwrap_or(seq(write.expected_seq)),
        status: write.summary.status.as_str(),
        session_id: write.summary.session_id.clone(),
        created_at: ts(&write.summary.created_at),
        updated_at: ts(&write.summary.updated_at),
        summary: serde_json::to_string(&write.summary).map_err(backend)?,
        seqs,
        types,
        bodies,
        approvals,
        ledger: write.ledger.clone(),
        plan: write
            .plan
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(backend)?,
    })
}

/// A task write in one statement: the task's row brought to the write's
/// last event if its log is still where the write read it (`$2`), and the
/// write's events appended. It changes no row, and appends none, otherwise.
pub(super) const ADVANCE: &str = "WITH t AS (
        UPDATE tasks SET last_seq = $3, summary = $4, status = $5,
            status_at = CASE WHEN status = $5 THEN status_at ELSE $6 END
        WHERE id = $1 AND last_seq = $2 RETURNING tkey)
    INSERT INTO events (tkey, seq, type, body)
    SELECT t.tkey, e.* FROM t, UNNEST($7::bigint[], $8::text[], $9::text[]) AS e";

/// Appends a write's events, approvals and ledger entries.
async fn append(c: &Object, tkey: i64, w: &Encoded) -> StoreResult<()> {
    if !w.seqs.is_empty() {
        let insert = prepared!(
            c,
            "INSERT INTO events (tkey, seq, type, body)
             SELECT $1, * FROM UNNEST($2::bigint[], $3::text[], $4::text[])"
        );
        c.execute(&insert, &[&tkey, &w.seqs, &w.types, &w.bodies])
            .await
            .map_err(pg)?;
    }
    append_rest(c, w).await
}

/// Appends a write's approvals and ledger entries.
pub(super) async fn append_rest(c: &Object, w: &Encoded) -> StoreResult<()> {
    for (id, status, created_at, body) in &w.approvals {
        let insert = prepared!(
            c,
            "INSERT INTO approvals (id, task_id, status, created_at, body) VALUES ($1, $2, $3, $4, $5)"
        );
        c.execute(&insert, &[id, &w.task_id, status, created_at, body])
            .await
            .map_err(pg)?;
    }
    for entry in &w.ledger {
        append_ledger(c, entry.clone()).await?;
    }
    Ok(())
}

/// A task's row as a write finds it.
pub(super) struct TaskRow {
    tkey: i64,
}

/// The row of a task whose log is at `expected`; a write that read the task
/// at another position is refused.
pub(super) async fn task_at(c: &Object, task_id: &TaskId, expected: i64) -> StoreResult<TaskRow> {
    let stmt = prepared!(c, "SELECT tkey, last_seq FROM tasks WHERE id = $1");
    let Some(row) = c.query_opt(&stmt, &[&task_id.as_str()]).await.map_err(pg)? else {
        return Err(StoreError::TaskNotFound(task_id.clone()));
    };
    let actual: i64 = row.get(1);
    if actual != expected {
        return Err(StoreError::Conflict {
            task_id: task_id.clone(),
            expected: unseq(expected),
            actual: unseq(actual),
        });
    }
    Ok(TaskRow { tkey: row.get(0) })
}

#[async_trait]
impl TaskStore for PostgresStore {
    async fn create(&self, task: NewTask) -> StoreResult<()> {
        let w = encode(&task.write)?;
        let plan = serde_json::to_string(&task.plan).map_err(backend)?;
        let id = task.write.task_id.clone();
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    let stmt = prepared!(
                        c,
                        "INSERT INTO tasks (id, session_id, status, created_at, status_at, last_seq, summary)
                         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING RETURNING tkey"
                    );
                    let Some(row) = c
                        .query_opt(
                            &stmt,
                            &[&w.task_id, &w.session_id, &w.status, &w.created_at, &w.updated_at, &w.last_seq, &w.summary],
                        )
                        .await
                        .map_err(pg)?
                    else {
                        return Err(StoreError::AlreadyExists(id));
                    };
                    let tkey: i64 = row.get(0);
                    let stmt = prepared!(c, "INSERT INTO plans (task_id, plan) VALUES ($1, $2)");
                    c.execute(&stmt, &[&w.task_id, &plan]).await.map_err(pg)?;
                    append(c, tkey, &w).await?;
                    // A new task for whichever node has room.
                    leases::notify(c, Change::Tasks).await
                })
            })
            .await
    }

    async fn save(&self, write: TaskWrite) -> StoreResult<()> {
        let w = encode(&write)?;
        let task_id = write.task_id;
        let leases = Arc::clone(&self.leases);
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    // A node that lost the task's lease hears so, whatever
                    // else changed since it read the task.
                    // The fence, the write and the notification go out
                    // together (tokio-postgres pipelines what is awaited at
                    // once) and are judged in that order: what a failed
                    // check let through is undone with the write's savepoint.
                    let fence = leases::fenced(c, &leases, &task_id);
                    if w.seqs.is_empty() {
                        let (fenced, task) =
                            join(fence, task_at(c, &task_id, w.expected_seq)).await;
                        fenced?;
                        return task.map(|_| ());
                    }
                    let advance = async {
                        let stmt = prepared!(c, ADVANCE);
                        c.execute(
                            &stmt,
                            &[
                                &w.task_id,
                                &w.expected_seq,
                                &w.last_seq,
                                &w.summary,
                                &w.status,
                                &w.updated_at,
                                &w.seqs,
                                &w.types,
                                &w.bodies,
                            ],
                        )
                        .await
                        .map_err(pg)
                    };
                    // For event streams on every node.
                    let notify = leases::notify(c, Change::Events);
                    let (fenced, advanced, notified) = join3(fence, advance, notify).await;
                    fenced?;
                    if advanced? == 0 {
                        // Not where the write read it: say where it is.
                        task_at(c, &task_id, w.expected_seq).await?;
                        return Err(backend(format!(
                            "task {task_id} was at {} but took no write",
                            w.expected_seq
                        )));
                    }
                    notified?;
                    if let Some(plan) = &w.plan {
                        c.execute(
                            "UPDATE plans SET plan = $2 WHERE task_id = $1",
                            &[&w.task_id, plan],
                        )
                        .await
                        .map_err(pg)?;
                    }
                    append_rest(c, &w).await
                })
            })
            .await
    }

    async fn load_summary(&self, id: &TaskId) -> StoreResult<Option<TaskSummary>> {
        self.body(
            "SELECT summary FROM tasks WHERE id = $1",
            id.as_str(),
            "task summary",
        )
        .await
    }

    async fn load_plan(&self, id: &TaskId) -> StoreResult<Option<TaskDecomposition>> {
        self.body(
            "SELECT plan FROM plans WHERE task_id = $1",
            id.as_str(),
            "plan",
        )
        .await
    }

    async fn list(&self, filter: &TaskFilter) -> StoreResult<TaskPage> {
        if let Some(c) = &filter.cursor {
            TaskId::parse(c).map_err(|_| StoreError::BadCursor(c.clone()))?;
        }
        let limit = filter.limit.unwrap_or(50).clamp(1, MAX_PAGE);
        let mut q = Where::new("SELECT summary FROM tasks", Mark::Dollar);
        q.and_some("session_id =", filter.session_id.clone());
        q.and_some("status =", filter.status.map(|s| s.as_str().to_owned()));
        q.and_some("created_at >=", filter.created_from.as_ref().map(ts));
        q.and_some("created_at <", filter.created_to.as_ref().map(ts));
        q.and_some("id <", filter.cursor.clone());
        q.and_some(
            "(summary::jsonb -> 'forked_from' ->> 'task_id') =",
            filter.forked_from.as_ref().map(|t| t.to_string()),
        );
        let sql = format!("{} ORDER BY id DESC LIMIT {}", q.sql, limit + 1);
        let rows = self.rows(&sql, &params(&q.args)).await?;
        let items: Vec<TaskSummary> = bodies(&rows, "task summary")?;
        let (items, next_cursor) = page(items, limit, |h| h.id.to_string());
        Ok(TaskPage { items, next_cursor })
    }

    async fn events(
        &self,
        id: &TaskId,
        after_seq: u64,
        limit: usize,
    ) -> StoreResult<Vec<HarnessEvent>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .rows(
                "SELECT e.body FROM events e JOIN tasks t ON t.tkey = e.tkey
                 WHERE t.id = $1 AND e.seq > $2 ORDER BY e.seq LIMIT $3",
                &[&id.as_str(), &seq(after_seq), &limit],
            )
            .await?;
        bodies(&rows, "event")
    }

    async fn all_events(&self, after: u64, limit: usize) -> StoreResult<Vec<(u64, HarnessEvent)>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .rows(
                "SELECT gseq, body FROM events WHERE gseq > $1 ORDER BY gseq LIMIT $2",
                &[&seq(after), &limit],
            )
            .await?;
        rows.iter()
            .map(|r| Ok((unseq(r.get(0)), json(r.get::<_, &str>(1), "event")?)))
            .collect()
    }

    async fn positions(&self) -> StoreResult<(u64, u64)> {
        let rows = self
            .rows(
                "SELECT (SELECT coalesce(max(gseq), 0) FROM events)::bigint,
                        (SELECT coalesce(max(seq), 0) FROM audit)::bigint",
                &[],
            )
            .await?;
        let row = rows.first().ok_or_else(|| backend("no row"))?;
        Ok((unseq(row.get(0)), unseq(row.get(1))))
    }

    async fn delete(&self, id: &TaskId, expected_seq: u64) -> StoreResult<()> {
        let task_id = id.clone();
        let expected = seq(expected_seq);
        let leases = Arc::clone(&self.leases);
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    leases::fenced(c, &leases, &task_id).await?;
                    let tkey = task_at(c, &task_id, expected).await?.tkey;
                    for table in ["tasks", "events"] {
                        c.execute(&format!("DELETE FROM {table} WHERE tkey = $1"), &[&tkey])
                            .await
                            .map_err(pg)?;
                    }
                    let id = task_id.as_str();
                    for table in [
                        "snapshots",
                        "controls",
                        "plans",
                        "approvals",
                        "journal",
                        "leases",
                    ] {
                        c.execute(&format!("DELETE FROM {table} WHERE task_id = $1"), &[&id])
                            .await
                            .map_err(pg)?;
                    }
                    // A task's agent sessions go with it (its contracts and evidence stay).
                    c.execute(
                        "DELETE FROM records WHERE task_id = $1 AND kind = $2",
                        &[&id, &RecordKind::Session.as_str()],
                    )
                    .await
                    .map_err(pg)?;
                    Ok(())
                })
            })
            .await
    }

    async fn put_snapshot(&self, snapshot: &Snapshot) -> StoreResult<()> {
        let body = serde_json::to_string(snapshot).map_err(backend)?;
        let (id, s, at) = (
            snapshot.id.to_string(),
            seq(snapshot.seq),
            ts(&snapshot.created_at),
        );
        let task_id = snapshot.task_id.clone();
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    let task = task_id.as_str();
                    let exists = c
                        .query_opt("SELECT 1 FROM tasks WHERE id = $1", &[&task])
                        .await
                        .map_err(pg)?;
                    if exists.is_none() {
                        return Err(StoreError::TaskNotFound(task_id.clone()));
                    }
                    c.execute(
                        "INSERT INTO snapshots (id, task_id, seq, created_at, body) VALUES ($1, $2, $3, $4, $5)",
                        &[&id, &task, &s, &at, &body],
                    )
                    .await
                    .map_err(pg)?;
                    Ok(())
                })
            })
            .await
    }

    async fn get_snapshot(&self, id: &SnapshotId) -> StoreResult<Option<Snapshot>> {
        self.body(
            "SELECT body FROM snapshots WHERE id = $1",
            id.as_str(),
            "snapshot",
        )
        .await
    }

    async fn list_snapshots(&self, task_id: &TaskId) -> StoreResult<Vec<SnapshotInfo>> {
        let rows = self
            .rows(
                "SELECT id, task_id, seq, created_at FROM snapshots WHERE task_id = $1 ORDER BY id",
                &[&task_id.as_str()],
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(SnapshotInfo {
                    id: SnapshotId::parse(r.get::<_, &str>(0))
                        .map_err(|e| corrupt("snapshot id", e))?,
                    task_id: TaskId::parse(r.get::<_, &str>(1))
                        .map_err(|e| corrupt("task id", e))?,
                    seq: unseq(r.get(2)),
                    created_at: chrono::DateTime::parse_from_rfc3339(r.get::<_, &str>(3))
                        .map_err(|e| corrupt("snapshot time", e))?
                        .to_utc(),
                })
            })
            .collect()
    }

    async fn request_control(&self, request: &ControlRequest) -> StoreResult<()> {
        let body = serde_json::to_string(request).map_err(backend)?;
        let task = request.task_id.to_string();
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    c.execute(
                        "INSERT INTO controls (task_id, body) VALUES ($1, $2)",
                        &[&task, &body],
                    )
                    .await
                    .map_err(pg)?;
                    // For the node that runs the task.
                    leases::notify(c, Change::Controls).await
                })
            })
            .await
    }

    async fn pending_controls(&self) -> StoreResult<Vec<ControlRequest>> {
        let rows = self
            .rows("SELECT body FROM controls ORDER BY id", &[])
            .await?;
        bodies(&rows, "control request")
    }

    async fn take_controls(&self, task_id: &TaskId) -> StoreResult<Vec<ControlRequest>> {
        let id = task_id.to_string();
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    let mut rows = c
                        .query(
                            "DELETE FROM controls WHERE task_id = $1 RETURNING id, body",
                            &[&id],
                        )
                        .await
                        .map_err(pg)?;
                    rows.sort_by_key(|r| r.get::<_, i64>(0));
                    rows.iter()
                        .map(|r| json(r.get::<_, &str>(1), "control request"))
                        .collect()
                })
            })
            .await
    }

    async fn metrics(&self) -> StoreResult<HarnessMetrics> {
        let client = self.client().await?;
        metrics::compute(&client).await
    }

    async fn probe(&self) -> StoreResult<StoreProbe> {
        // A row written to a real table and taken out again in the same
        // transaction: the commit goes through the server's log, and nobody
        // ever sees the row.
        let probed = self
            .writer
            .write(|c| {
                Box::pin(async move {
                    let row = c
                        .query_one(
                            "INSERT INTO controls (task_id, body) VALUES ('health-probe', '{}') RETURNING id",
                            &[],
                        )
                        .await
                        .map_err(pg)?;
                    c.execute("DELETE FROM controls WHERE id = $1", &[&row.get::<_, i64>(0)])
                        .await
                        .map_err(pg)?;
                    Ok(())
                })
            })
            .await;
        let last_write_error = crate::rows::probe_write(probed, &self.writer.counters.last_error)?;
        self.rows("SELECT COUNT(*) FROM tasks", &[]).await?;
        Ok(StoreProbe {
            location: self.location.clone(),
            free_bytes: None,
            last_write_error,
            // PostgreSQL keeps its own write-ahead log, and says when it is lost.
            lost_writes: Vec::new(),
        })
    }

    fn leases(&self) -> Option<&dyn rein_core::LeaseStore> {
        Some(self)
    }
}
