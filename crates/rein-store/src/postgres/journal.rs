//! Step journals and the model usage indexed from them, on PostgreSQL.

use super::*;

#[async_trait]
impl JournalStore for PostgresStore {
    async fn append_journal(
        &self,
        task_id: &TaskId,
        step_id: &str,
        from: u64,
        entries: &[serde_json::Value],
    ) -> StoreResult<()> {
        let (bodies, metered) = crate::rows::journal_rows(entries)?;
        let now = ts(&chrono::Utc::now());
        let (task, step) = (task_id.clone(), step_id.to_owned());
        self.writer
            .write(move |c| {
                let metered = metered.clone();
                let now = now.clone();
                Box::pin(async move {
                    for (i, body) in bodies.iter().enumerate() {
                        let at = from + i as u64;
                        let inserted = c
                            .execute(
                                "INSERT INTO journal (task_id, step_id, seq, body) VALUES ($1, $2, $3, $4)
                                 ON CONFLICT DO NOTHING",
                                &[&task.as_str(), &step, &seq(at), body],
                            )
                            .await
                            .map_err(pg)?;
                        if inserted == 0 {
                            return Err(StoreError::JournalMoved {
                                task_id: task.clone(),
                                step: step.clone(),
                                seq: at,
                            });
                        }
                        if let Some(used) = &metered[i] {
                            let row = crate::rows::usage_values(task.as_str(), &step, at, used, &now);
                            let values: Vec<_> = row.iter().map(crate::rows::Value::pg).collect();
                            c.execute(crate::rows::INSERT_USAGE, &values).await.map_err(pg)?;
                            c.execute(
                                crate::rows::ADD_USAGE_TO_DAY,
                                &[&task.as_str(), &step, &seq(at)],
                            )
                            .await
                            .map_err(pg)?;
                        }
                    }
                    Ok(())
                })
            })
            .await
    }

    async fn usage(&self, filter: &UsageFilter) -> StoreResult<Vec<UsageRow>> {
        const SQL: crate::rows::UsageSql = crate::rows::UsageSql {
            truth: "TRUE",
            raw: "COUNT(*)::BIGINT, SUM(input)::BIGINT, SUM(cached)::BIGINT, SUM(output)::BIGINT,
                  SUM(reasoning)::BIGINT, bool_or(estimated)",
            daily:
                "SUM(calls)::BIGINT, SUM(input)::BIGINT, SUM(cached)::BIGINT, SUM(output)::BIGINT,
                    SUM(reasoning)::BIGINT, bool_or(estimated)",
        };
        let queries = crate::rows::usage_queries(filter, |n| format!("${n}"), &SQL);
        // One snapshot, so the rollup and the calls are of one moment.
        let mut client = self.client().await?;
        let snapshot = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(pg)?;
        let n = |v: Option<i64>| u64::try_from(v.unwrap_or(0)).unwrap_or(0);
        let mut parts = Vec::new();
        for (sql, args) in &queries {
            let params: Vec<&(dyn ToSql + Sync)> =
                args.iter().map(|a| a as &(dyn ToSql + Sync)).collect();
            let stmt = snapshot.prepare_cached(sql).await.map_err(pg)?;
            let rows = snapshot.query(&stmt, &params).await.map_err(pg)?;
            parts.extend(rows.iter().map(|r| UsageRow {
                key: r.get(0),
                provider: r.get(1),
                model: r.get(2),
                calls: n(r.get(3)),
                usage: rein_protocol::Usage {
                    input_tokens: n(r.get(4)),
                    cached_input_tokens: n(r.get(5)),
                    output_tokens: n(r.get(6)),
                    reasoning_tokens: r.get::<_, Option<i64>>(7).map(|v| n(Some(v))),
                    estimated: r.get::<_, Option<bool>>(8).unwrap_or(false),
                },
            }));
        }
        snapshot.commit().await.map_err(pg)?;
        Ok(crate::rows::merge_usage(parts))
    }

    async fn load_journal(
        &self,
        task_id: &TaskId,
        step_id: &str,
    ) -> StoreResult<Vec<serde_json::Value>> {
        let rows = self
            .rows(
                "SELECT body FROM journal WHERE task_id = $1 AND step_id = $2 ORDER BY seq",
                &[&task_id.as_str(), &step_id],
            )
            .await?;
        bodies(&rows, "journal entry")
    }
}
