//! Versioned documents on SQLite (shared states, contracts, evidence bundles),
//! each change with its audit record.

use super::*;

#[async_trait]
impl DocumentStore for SqliteStore {
    async fn insert_shared_state(
        &self,
        state: &SharedHarnessState,
        audit: &AuditRecord,
    ) -> StoreResult<()> {
        let row = SharedRow::of(state)?;
        let audit = serde_json::to_string(audit).map_err(backend)?;
        self.writer
            .write(move |conn| {
                let inserted = insert_document(
                    conn,
                    "INSERT INTO shared_states (id, session_id, parent_session_id, harness_contract_id, status, created_at, version, body)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, ?7) ON CONFLICT(id) DO NOTHING",
                    params![row.id, row.session_id, row.parent_session_id, row.harness_contract_id, row.status, row.created_at, row.body],
                    &audit,
                )?;
                if inserted {
                    Ok(())
                } else {
                    Err(StoreError::SharedStateExists(row.id.clone()))
                }
            })
            .await
    }

    async fn load_shared_state(&self, id: &str) -> StoreResult<Option<(SharedHarnessState, u64)>> {
        let id = id.to_owned();
        self.read(move |conn| {
            let row: Option<(String, i64)> = conn
                .query_row(
                    "SELECT body, version FROM shared_states WHERE id = ?1",
                    [&id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(backend)?;
            row.map(|(body, version)| {
                let state = serde_json::from_str(&body).map_err(|e| corrupt("shared state", e))?;
                Ok((state, u64::try_from(version).unwrap_or(0)))
            })
            .transpose()
        })
        .await
    }

    async fn update_shared_state(
        &self,
        state: &SharedHarnessState,
        expected: u64,
        audit: &AuditRecord,
    ) -> StoreResult<()> {
        let row = SharedRow::of(state)?;
        let audit = serde_json::to_string(audit).map_err(backend)?;
        let expected_i = i64::try_from(expected).map_err(backend)?;
        self.writer
            .write(move |conn| {
                let written = update_document(
                    conn,
                    "UPDATE shared_states SET session_id = ?2, parent_session_id = ?3, harness_contract_id = ?4,
                     status = ?5, version = version + 1, body = ?6 WHERE id = ?1 AND version = ?7",
                    params![row.id, row.session_id, row.parent_session_id, row.harness_contract_id, row.status, row.body, expected_i],
                    "SELECT 1 FROM shared_states WHERE id = ?1",
                    params![row.id],
                    &audit,
                )?;
                written.of_state(&row.id, expected)
            })
            .await
    }

    async fn list_shared_states(&self, filter: &SharedStateFilter) -> StoreResult<SharedStatePage> {
        let cursor = time_id_cursor(filter.cursor.as_deref())?;
        let filter = filter.clone();
        self.read(move |conn| {
            let limit = filter.limit.unwrap_or(50).clamp(1, MAX_PAGE);
            let q =
                crate::query::shared_states_page(&filter, cursor, limit, Mark::Question, TAGGED);
            let items: Vec<SharedHarnessState> = q.run(conn, "", "shared state")?;
            let (items, next_cursor) = page(items, limit, shared_state_cursor);
            Ok(SharedStatePage { items, next_cursor })
        })
        .await
    }

    async fn audit_records(&self, after: u64, limit: usize) -> StoreResult<Vec<AuditRecord>> {
        let after = i64::try_from(after).map_err(backend)?;
        let limit = i64::try_from(limit.clamp(1, 10_000)).map_err(backend)?;
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached("SELECT seq, body FROM audit WHERE seq > ?1 ORDER BY seq LIMIT ?2")
                .map_err(backend)?;
            let rows = stmt
                .query_map(params![after, limit], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
                })
                .map_err(backend)?;
            let mut out = Vec::new();
            for row in rows {
                let (seq, body) = row.map_err(backend)?;
                let mut record: AuditRecord =
                    serde_json::from_str(&body).map_err(|e| corrupt("audit record", e))?;
                record.seq = u64::try_from(seq).unwrap_or(0);
                out.push(record);
            }
            Ok(out)
        })
        .await
    }

    async fn insert_record(&self, record: &Record, audit: &AuditRecord) -> StoreResult<()> {
        let row = RecordRow::of(record)?;
        let audit = serde_json::to_string(audit).map_err(backend)?;
        let (kind, id) = (record.kind, record.id.clone());
        self.writer
            .write(move |conn| {
                let inserted = insert_document(
                    conn,
                    "INSERT INTO records (kind, id, status, task_id, shared_state_id, contract_id, created_at, version, body)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 1, ?8) ON CONFLICT(kind, id) DO NOTHING",
                    params![row.kind, row.id, row.status, row.task_id, row.shared_state_id, row.contract_id, row.created_at, row.body],
                    &audit,
                )?;
                if inserted {
                    Ok(())
                } else {
                    Err(StoreError::RecordExists { kind, id: id.clone() })
                }
            })
            .await
    }

    async fn load_record(&self, kind: RecordKind, id: &str) -> StoreResult<Option<(Record, u64)>> {
        let id = id.to_owned();
        self.read(move |conn| {
            let row = conn
                .query_row(
                    "SELECT id, status, task_id, shared_state_id, contract_id, created_at, body, version
                     FROM records WHERE kind = ?1 AND id = ?2",
                    params![kind.as_str(), id],
                    |r| Ok((record_of(kind, r), r.get::<_, i64>(7)?)),
                )
                .optional()
                .map_err(backend)?;
            row.map(|(record, version)| Ok((record?, u64::try_from(version).unwrap_or(0))))
                .transpose()
        })
        .await
    }

    async fn update_record(
        &self,
        record: &Record,
        expected: u64,
        audit: &AuditRecord,
    ) -> StoreResult<()> {
        let row = RecordRow::of(record)?;
        let audit = serde_json::to_string(audit).map_err(backend)?;
        let expected_i = i64::try_from(expected).map_err(backend)?;
        let kind = record.kind;
        self.writer
            .write(move |conn| {
                let written = update_document(
                    conn,
                    "UPDATE records SET status = ?3, task_id = ?4, shared_state_id = ?5, contract_id = ?6,
                     version = version + 1, body = ?7 WHERE kind = ?1 AND id = ?2 AND version = ?8",
                    params![row.kind, row.id, row.status, row.task_id, row.shared_state_id, row.contract_id, row.body, expected_i],
                    "SELECT 1 FROM records WHERE kind = ?1 AND id = ?2",
                    params![row.kind, row.id],
                    &audit,
                )?;
                written.of_record(kind, &row.id, expected)
            })
            .await
    }

    async fn list_records(&self, filter: &RecordFilter) -> StoreResult<RecordPage> {
        let cursor = time_id_cursor(filter.cursor.as_deref())?;
        let filter = filter.clone();
        self.read(move |conn| {
            let limit = filter.limit.unwrap_or(50).clamp(1, MAX_PAGE);
            let q = crate::query::records_page(
                &filter,
                cursor,
                limit,
                Mark::Question,
                |name| format!("json_extract(body, '$.{name}')"),
                TAGGED,
            );
            let mut stmt = conn.prepare(&q.sql).map_err(backend)?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter(q.args.iter()), |r| {
                    Ok(record_of(filter.kind, r))
                })
                .map_err(backend)?;
            let mut items = Vec::new();
            for row in rows {
                items.push(row.map_err(backend)??);
            }
            let (items, next_cursor) = page(items, limit, record_cursor);
            Ok(RecordPage { items, next_cursor })
        })
        .await
    }
}

/// A versioned document (a shared state, a contract, an evidence bundle)
/// inserted at version 1 with its audit record, in the caller's transaction;
/// `false` (and no audit record) if its id is taken. `insert` must do nothing
/// on a taken id.
pub(super) fn insert_document(
    conn: &Connection,
    insert: &str,
    values: &[&dyn rusqlite::ToSql],
    audit: &str,
) -> StoreResult<bool> {
    if conn.execute(insert, values).map_err(backend)? == 0 {
        return Ok(false);
    }
    append_audit(conn, audit)?;
    Ok(true)
}

/// A versioned document written back with its audit record, if `update` (which
/// checks the version read) changes a row; else whether `exists` finds it.
pub(super) fn update_document(
    conn: &Connection,
    update: &str,
    values: &[&dyn rusqlite::ToSql],
    exists: &str,
    key: &[&dyn rusqlite::ToSql],
    audit: &str,
) -> StoreResult<WriteBack> {
    if conn.execute(update, values).map_err(backend)? == 0 {
        let found = conn
            .query_row(exists, key, |_| Ok(()))
            .optional()
            .map_err(backend)?
            .is_some();
        return Ok(if found {
            WriteBack::Moved
        } else {
            WriteBack::Missing
        });
    }
    append_audit(conn, audit)?;
    Ok(WriteBack::Written)
}

pub(super) fn append_audit(conn: &Connection, body: &str) -> StoreResult<()> {
    conn.execute("INSERT INTO audit (body) VALUES (?1)", [body])
        .map_err(backend)?;
    Ok(())
}

/// A record from a row of `id, status, task_id, shared_state_id, contract_id,
/// created_at, body`.
pub(super) fn record_of(kind: RecordKind, r: &rusqlite::Row<'_>) -> StoreResult<Record> {
    let text = |i: usize| r.get::<_, Option<String>>(i).map_err(backend);
    let created = text(5)?.unwrap_or_default();
    let created_at = chrono::DateTime::parse_from_rfc3339(&created)
        .map_err(|e| corrupt("record timestamp", e))?
        .to_utc();
    let body = text(6)?.unwrap_or_default();
    Ok(Record {
        kind,
        id: text(0)?.unwrap_or_default(),
        status: text(1)?,
        task_id: text(2)?,
        shared_state_id: text(3)?,
        contract_id: text(4)?,
        created_at,
        body: serde_json::from_str(&body).map_err(|e| corrupt(kind.noun(), e))?,
    })
}

/// That a document's body has the filter's tag among its `tags`.
const TAGGED: &str = "EXISTS (SELECT 1 FROM json_each(body, '$.tags') WHERE value = ?)";
