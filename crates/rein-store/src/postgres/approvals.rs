//! Approval requests and the hash-chained ledger on PostgreSQL.

use super::*;

/// Seals `entry` after the ledger's last entry and appends it (under the
/// write lock, so the chain has no gaps whoever writes).
pub(super) async fn append_ledger(c: &Object, entry: LedgerEntry) -> StoreResult<LedgerEntry> {
    let last = c
        .query_opt("SELECT body FROM ledger ORDER BY seq DESC LIMIT 1", &[])
        .await
        .map_err(pg)?
        .map(|r| json::<LedgerEntry>(r.get::<_, &str>(0), "ledger entry"))
        .transpose()?;
    let sealed = entry.sealed_after(last.as_ref());
    let body = serde_json::to_string(&sealed).map_err(backend)?;
    c.execute(
        "INSERT INTO ledger (seq, id, body) VALUES ($1, $2, $3)",
        &[&seq(sealed.seq), &sealed.id.as_str(), &body],
    )
    .await
    .map_err(pg)?;
    Ok(sealed)
}

/// Whether the entry `id` may be revoked, in the caller's transaction.
async fn revocable(c: &Object, id: &str) -> StoreResult<()> {
    let target = c
        .query_opt("SELECT body FROM ledger WHERE id = $1", &[&id])
        .await
        .map_err(pg)?
        .map(|r| json::<LedgerEntry>(r.get::<_, &str>(0), "ledger entry"))
        .transpose()?
        .ok_or_else(|| StoreError::LedgerEntryNotFound(id.to_owned()))?;
    let by = c
        .query_opt(
            "SELECT id FROM ledger WHERE body::json ->> 'revokes' = $1 LIMIT 1",
            &[&id],
        )
        .await
        .map_err(pg)?
        .map(|r| r.get::<_, String>(0));
    crate::rows::revocable(&target, || Ok(by))
}

#[async_trait]
impl ApprovalStore for PostgresStore {
    async fn append_ledger(&self, entry: LedgerEntry) -> StoreResult<LedgerEntry> {
        self.writer
            .write(move |c| {
                let entry = entry.clone();
                Box::pin(async move {
                    if let Some(target) = &entry.revokes {
                        revocable(c, target.as_str()).await?;
                    }
                    append_ledger(c, entry).await
                })
            })
            .await
    }

    async fn get_approval(&self, id: &ApprovalId) -> StoreResult<Option<ApprovalRequest>> {
        self.body(
            "SELECT body FROM approvals WHERE id = $1",
            id.as_str(),
            "approval request",
        )
        .await
    }

    async fn list_approvals(&self, filter: &ApprovalFilter) -> StoreResult<Vec<ApprovalRequest>> {
        let limit = filter.limit.unwrap_or(50).clamp(1, MAX_PAGE);
        let mut q = Where::new("SELECT body FROM approvals", Mark::Dollar);
        q.and_some("status =", filter.status.map(|s| s.as_str().to_owned()));
        q.and_some("task_id =", filter.task_id.as_ref().map(|t| t.to_string()));
        let sql = format!("{} ORDER BY id DESC LIMIT {limit}", q.sql);
        let rows = self.rows(&sql, &params(&q.args)).await?;
        bodies(&rows, "approval request")
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
            .write(move |c| {
                Box::pin(async move {
                    let changed = c
                        .execute(
                            "UPDATE approvals SET status = $2, body = $3 WHERE id = $1 AND status = 'pending'",
                            &[&id.as_str(), &status, &body],
                        )
                        .await
                        .map_err(pg)?;
                    if changed == 0 {
                        let current = c
                            .query_opt("SELECT body FROM approvals WHERE id = $1", &[&id.as_str()])
                            .await
                            .map_err(pg)?;
                        return Err(match current {
                            Some(row) => StoreError::NotPending {
                                current: Box::new(json(row.get::<_, &str>(0), "approval request")?),
                            },
                            None => StoreError::ApprovalNotFound(id.clone()),
                        });
                    }
                    let sealed = append_ledger(c, entry).await?;
                    // For the node whose task waits on the decision.
                    leases::notify(c, Change::Decisions).await?;
                    Ok(sealed)
                })
            })
            .await
    }

    async fn ledger(&self, after_seq: u64, limit: usize) -> StoreResult<Vec<LedgerEntry>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .rows(
                "SELECT seq, body FROM ledger WHERE seq > $1 ORDER BY seq LIMIT $2",
                &[&seq(after_seq), &limit],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let at: i64 = r.get(0);
                serde_json::from_str(r.get::<_, &str>(1)).map_err(|e| {
                    StoreError::Corrupt(format!(
                        "ledger entry {at} is damaged: it is not a ledger entry ({e}); the entries after it were not checked"
                    ))
                })
            })
            .collect()
    }
}
