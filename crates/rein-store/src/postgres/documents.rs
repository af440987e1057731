//! Versioned documents on PostgreSQL (shared states, contracts, evidence
//! bundles), each change with its audit record.

use super::*;

/// A versioned document inserted at version 1 with its audit record; `false`
/// (and no audit record) if its id is taken. `insert` must do nothing on a
/// taken id.
pub(super) async fn insert_document(
    c: &Object,
    insert: &str,
    values: &[&(dyn ToSql + Sync)],
    audit: &str,
) -> StoreResult<bool> {
    if c.execute(insert, values).await.map_err(pg)? == 0 {
        return Ok(false);
    }
    append_audit(c, audit).await?;
    Ok(true)
}

/// A versioned document written back with its audit record, if `update`
/// (which checks the version read) changes a row; else whether `exists`
/// finds it.
pub(super) async fn update_document(
    c: &Object,
    update: &str,
    values: &[&(dyn ToSql + Sync)],
    exists: &str,
    key: &[&(dyn ToSql + Sync)],
    audit: &str,
) -> StoreResult<WriteBack> {
    if c.execute(update, values).await.map_err(pg)? == 0 {
        let found = c.query_opt(exists, key).await.map_err(pg)?.is_some();
        return Ok(if found {
            WriteBack::Moved
        } else {
            WriteBack::Missing
        });
    }
    append_audit(c, audit).await?;
    Ok(WriteBack::Written)
}

pub(super) async fn append_audit(c: &Object, body: &str) -> StoreResult<()> {
    c.execute("INSERT INTO audit (body) VALUES ($1)", &[&body])
        .await
        .map_err(pg)?;
    Ok(())
}

/// A record from a row of `id, status, task_id, shared_state_id, contract_id,
/// created_at, body`.
pub(super) fn record_of(kind: RecordKind, r: &tokio_postgres::Row) -> StoreResult<Record> {
    let created_at = chrono::DateTime::parse_from_rfc3339(r.get::<_, &str>(5))
        .map_err(|e| corrupt("record timestamp", e))?
        .to_utc();
    Ok(Record {
        kind,
        id: r.get(0),
        status: r.get(1),
        task_id: r.get(2),
        shared_state_id: r.get(3),
        contract_id: r.get(4),
        created_at,
        body: json(r.get::<_, &str>(6), kind.noun())?,
    })
}

#[async_trait]
impl DocumentStore for PostgresStore {
    async fn insert_shared_state(
        &self,
        state: &SharedHarnessState,
        audit: &AuditRecord,
    ) -> StoreResult<()> {
        let row = SharedRow::of(state)?;
        let audit = serde_json::to_string(audit).map_err(backend)?;
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    let inserted = insert_document(
                        c,
                        "INSERT INTO shared_states (id, session_id, parent_session_id, harness_contract_id, status, created_at, version, body)
                         VALUES ($1, $2, $3, $4, $5, $6, 1, $7) ON CONFLICT (id) DO NOTHING",
                        &[&row.id, &row.session_id, &row.parent_session_id, &row.harness_contract_id, &row.status, &row.created_at, &row.body],
                        &audit,
                    )
                    .await?;
                    if inserted {
                        Ok(())
                    } else {
                        Err(StoreError::SharedStateExists(row.id.clone()))
                    }
                })
            })
            .await
    }

    async fn load_shared_state(&self, id: &str) -> StoreResult<Option<(SharedHarnessState, u64)>> {
        let rows = self
            .rows(
                "SELECT body, version FROM shared_states WHERE id = $1",
                &[&id],
            )
            .await?;
        rows.first()
            .map(|r| Ok((json(r.get::<_, &str>(0), "shared state")?, unseq(r.get(1)))))
            .transpose()
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
            .write(move |c| {
                Box::pin(async move {
                    let written = update_document(
                        c,
                        "UPDATE shared_states SET session_id = $2, parent_session_id = $3, harness_contract_id = $4,
                         status = $5, version = version + 1, body = $6 WHERE id = $1 AND version = $7",
                        &[&row.id, &row.session_id, &row.parent_session_id, &row.harness_contract_id, &row.status, &row.body, &expected_i],
                        "SELECT 1 FROM shared_states WHERE id = $1",
                        &[&row.id],
                        &audit,
                    )
                    .await?;
                    written.of_state(&row.id, expected)
                })
            })
            .await
    }

    async fn list_shared_states(&self, filter: &SharedStateFilter) -> StoreResult<SharedStatePage> {
        let cursor = time_id_cursor(filter.cursor.as_deref())?;
        let limit = filter.limit.unwrap_or(50).clamp(1, MAX_PAGE);
        let q = crate::query::shared_states_page(filter, cursor, limit, Mark::Dollar, TAGGED);
        let rows = self.rows(&q.sql, &params(&q.args)).await?;
        let items: Vec<SharedHarnessState> = bodies(&rows, "shared state")?;
        let (items, next_cursor) = page(items, limit, shared_state_cursor);
        Ok(SharedStatePage { items, next_cursor })
    }

    async fn audit_records(&self, after: u64, limit: usize) -> StoreResult<Vec<AuditRecord>> {
        let after = i64::try_from(after).map_err(backend)?;
        let limit = i64::try_from(limit.clamp(1, 10_000)).map_err(backend)?;
        let rows = self
            .rows(
                "SELECT seq, body FROM audit WHERE seq > $1 ORDER BY seq LIMIT $2",
                &[&after, &limit],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let mut record: AuditRecord = json(r.get::<_, &str>(1), "audit record")?;
                record.seq = unseq(r.get(0));
                Ok(record)
            })
            .collect()
    }

    async fn insert_record(&self, record: &Record, audit: &AuditRecord) -> StoreResult<()> {
        let row = RecordRow::of(record)?;
        let audit = serde_json::to_string(audit).map_err(backend)?;
        let (kind, id) = (record.kind, record.id.clone());
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    let inserted = insert_document(
                        c,
                        "INSERT INTO records (kind, id, status, task_id, shared_state_id, contract_id, created_at, version, body)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8) ON CONFLICT (kind, id) DO NOTHING",
                        &[&row.kind, &row.id, &row.status, &row.task_id, &row.shared_state_id, &row.contract_id, &row.created_at, &row.body],
                        &audit,
                    )
                    .await?;
                    if inserted {
                        Ok(())
                    } else {
                        Err(StoreError::RecordExists { kind, id })
                    }
                })
            })
            .await
    }

    async fn load_record(&self, kind: RecordKind, id: &str) -> StoreResult<Option<(Record, u64)>> {
        let rows = self
            .rows(
                "SELECT id, status, task_id, shared_state_id, contract_id, created_at, body, version
                 FROM records WHERE kind = $1 AND id = $2",
                &[&kind.as_str(), &id],
            )
            .await?;
        rows.first()
            .map(|r| Ok((record_of(kind, r)?, unseq(r.get(7)))))
            .transpose()
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
            .write(move |c| {
                Box::pin(async move {
                    let written = update_document(
                        c,
                        "UPDATE records SET status = $3, task_id = $4, shared_state_id = $5, contract_id = $6,
                         version = version + 1, body = $7 WHERE kind = $1 AND id = $2 AND version = $8",
                        &[&row.kind, &row.id, &row.status, &row.task_id, &row.shared_state_id, &row.contract_id, &row.body, &expected_i],
                        "SELECT 1 FROM records WHERE kind = $1 AND id = $2",
                        &[&row.kind, &row.id],
                        &audit,
                    )
                    .await?;
                    written.of_record(kind, &row.id, expected)
                })
            })
            .await
    }

    async fn list_records(&self, filter: &RecordFilter) -> StoreResult<RecordPage> {
        let cursor = time_id_cursor(filter.cursor.as_deref())?;
        let limit = filter.limit.unwrap_or(50).clamp(1, MAX_PAGE);
        let q = crate::query::records_page(
            filter,
            cursor,
            limit,
            Mark::Dollar,
            |name| format!("(body::json ->> '{name}')"),
            TAGGED,
        );
        let rows = self.rows(&q.sql, &params(&q.args)).await?;
        let items = rows
            .iter()
            .map(|r| record_of(filter.kind, r))
            .collect::<StoreResult<Vec<_>>>()?;
        let (items, next_cursor) = page(items, limit, record_cursor);
        Ok(RecordPage { items, next_cursor })
    }
}

/// That a document's body has the filter's tag among its `tags`.
const TAGGED: &str = "EXISTS (SELECT 1 FROM json_array_elements_text(
     CASE WHEN json_typeof(body::json -> 'tags') = 'array' THEN body::json -> 'tags' ELSE '[]'::json END
 ) AS tag WHERE tag = ?)";
