//! Approval requests and the hash-chained ledger on SQLite.

use super::*;

/// Seals `entry` after the ledger's last entry and appends it, inside the
/// caller's transaction (so the chain has no gaps, whoever writes).
pub(super) fn append_ledger(conn: &Connection, entry: LedgerEntry) -> StoreResult<LedgerEntry> {
    let mut last: Vec<LedgerEntry> = query_json(
        conn,
        "SELECT body FROM ledger ORDER BY seq DESC LIMIT 1",
        [],
        "ledger entry",
    )?;
    let sealed = entry.sealed_after(last.pop().as_ref());
    let sealed_body = serde_json::to_string(&sealed).map_err(backend)?;
    conn.execute(
        "INSERT INTO ledger (seq, id, body) VALUES (?1, ?2, ?3)",
        params![seq(sealed.seq), sealed.id.as_str(), sealed_body],
    )
    .map_err(backend)?;
    conn.prepare_cached("UPDATE store_head SET ledger_seq = ?1, ledger_hash = ?2 WHERE id = 0")
        .and_then(|mut stmt| stmt.execute(params![seq(sealed.seq), sealed.hash.as_str()]))
        .map_err(backend)?;
    Ok(sealed)
}

/// Whether the entry `id` may be revoked, in the caller's transaction.
fn revocable(conn: &Connection, id: &str) -> StoreResult<()> {
    let mut target: Vec<LedgerEntry> = query_json(
        conn,
        "SELECT body FROM ledger WHERE id = ?1",
        [id],
        "ledger entry",
    )?;
    let target = target
        .pop()
        .ok_or_else(|| StoreError::LedgerEntryNotFound(id.to_owned()))?;
    crate::rows::revocable(&target, || {
        conn.query_row(
            "SELECT id FROM ledger WHERE json_extract(body, '$.revokes') = ?1 LIMIT 1",
            [id],
            |r| r.get::<_, String>(0),
        )
        .optional()
        .map_err(backend)
    })
}

#[async_trait]
impl ApprovalStore for SqliteStore {
    async fn append_ledger(&self, entry: LedgerEntry) -> StoreResult<LedgerEntry> {
        self.writer
            .write(move |conn| {
                if let Some(target) = &entry.revokes {
                    revocable(conn, target.as_str())?;
                }
                append_ledger(conn, entry.clone())
            })
            .await
    }

    async fn get_approval(&self, id: &ApprovalId) -> StoreResult<Option<ApprovalRequest>> {
        let id = id.to_string();
        self.read(move |conn| {
            let mut found: Vec<ApprovalRequest> = query_json(
                conn,
                "SELECT body FROM approvals WHERE id = ?1",
                [&id],
                "approval request",
            )?;
            Ok(found.pop())
        })
        .await
    }

    async fn list_approvals(&self, filter: &ApprovalFilter) -> StoreResult<Vec<ApprovalRequest>> {
        let filter = filter.clone();
        self.read(move |conn| {
            let limit = filter.limit.unwrap_or(50).clamp(1, MAX_PAGE);
            let mut sql = String::from("SELECT body FROM approvals WHERE 1 = 1");
            let mut args: Vec<String> = Vec::new();
            if let Some(status) = filter.status {
                args.push(status.as_str().to_owned());
                sql.push_str(&format!(" AND status = ?{}", args.len()));
            }
            if let Some(task) = &filter.task_id {
                args.push(task.to_string());
                sql.push_str(&format!(" AND task_id = ?{}", args.len()));
            }
            sql.push_str(&format!(" ORDER BY id DESC LIMIT {limit}"));
            query_json(
                conn,
                &sql,
                rusqlite::params_from_iter(args.iter()),
                "approval request",
            )
        })
        .await
    }

    async fn settle_approval(
        &self,
        updated: &ApprovalRequest,
        entry: LedgerEntry,
    ) -> StoreResult<LedgerEntry> {
        let body = serde_json::to_string(updated).map_err(backend)?;
        let id = updated.id.clone();
        let status = updated.status.as_str();
        self.writer
            .write(move |conn| {
                let changed = conn
                    .execute(
                        "UPDATE approvals SET status = ?2, body = ?3 WHERE id = ?1 AND status = 'pending'",
                        params![id.as_str(), status, body],
                    )
                    .map_err(backend)?;
                if changed == 0 {
                    let mut current: Vec<ApprovalRequest> = query_json(
                        conn,
                        "SELECT body FROM approvals WHERE id = ?1",
                        [id.as_str()],
                        "approval request",
                    )?;
                    return Err(match current.pop() {
                        Some(current) => StoreError::NotPending { current: Box::new(current) },
                        None => StoreError::ApprovalNotFound(id.clone()),
                    });
                }
                append_ledger(conn, entry.clone())
            })
            .await
    }

    async fn ledger(&self, after_seq: u64, limit: usize) -> StoreResult<Vec<LedgerEntry>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached("SELECT seq, body FROM ledger WHERE seq > ?1 ORDER BY seq LIMIT ?2")
                .map_err(backend)?;
            let mut rows = stmt
                .query(params![seq(after_seq), limit])
                .map_err(backend)?;
            let mut entries = Vec::new();
            // Read as bytes: damaged bytes name their entry instead of failing
            // the whole read with a conversion error.
            while let Some(row) = rows.next().map_err(backend)? {
                let at: i64 = row.get(0).map_err(backend)?;
                let damaged = |why: String| {
                    StoreError::Corrupt(format!(
                        "ledger entry {at} is damaged: {why}; the entries after it were not checked"
                    ))
                };
                let bytes = match row.get_ref(1).map_err(backend)? {
                    rusqlite::types::ValueRef::Text(b) | rusqlite::types::ValueRef::Blob(b) => b,
                    other => {
                        return Err(damaged(format!(
                            "its body is {:?}, not text",
                            other.data_type()
                        )));
                    }
                };
                let text = std::str::from_utf8(bytes)
                    .map_err(|e| damaged(format!("its stored bytes are not valid UTF-8 ({e})")))?;
                let entry: LedgerEntry = serde_json::from_str(text)
                    .map_err(|e| damaged(format!("it is not a ledger entry ({e})")))?;
                entries.push(entry);
            }
            Ok(entries)
        })
        .await
    }
}
