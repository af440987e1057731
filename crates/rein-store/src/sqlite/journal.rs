//! Step journals and the model usage indexed from them, on SQLite.

use super::*;

#[async_trait]
impl JournalStore for SqliteStore {
    async fn append_journal(
        &self,
        task_id: &TaskId,
        step_id: &str,
        from: u64,
        entries: &[serde_json::Value],
    ) -> StoreResult<()> {
        let (bodies, metered) = crate::rows::journal_rows(entries)?;
        let now = rows::ts(&chrono::Utc::now());
        let (task, step) = (task_id.clone(), step_id.to_owned());
        self.writer
            .write(move |conn| {
                for (i, body) in bodies.iter().enumerate() {
                    let at = from + i as u64;
                    let inserted = conn
                        .execute(
                            "INSERT INTO journal (task_id, step_id, seq, body) VALUES (?1, ?2, ?3, ?4)
                             ON CONFLICT DO NOTHING",
                            params![task.as_str(), step, seq(at), body],
                        )
                        .map_err(backend)?;
                    if inserted == 0 {
                        return Err(StoreError::JournalMoved {
                            task_id: task.clone(),
                            step: step.clone(),
                            seq: at,
                        });
                    }
                    if let Some(used) = &metered[i] {
                        let row = crate::rows::usage_values(task.as_str(), &step, at, used, &now);
                        conn.prepare_cached(crate::rows::INSERT_USAGE)
                            .and_then(|mut stmt| stmt.execute(rusqlite::params_from_iter(&row)))
                            .and_then(|_| conn.prepare_cached(crate::rows::ADD_USAGE_TO_DAY))
                            .and_then(|mut stmt| stmt.execute(params![task.as_str(), step, seq(at)]))
                            .map_err(backend)?;
                    }
                }
                Ok(())
            })
            .await
    }

    async fn usage(&self, filter: &UsageFilter) -> StoreResult<Vec<UsageRow>> {
        const SQL: rows::UsageSql = rows::UsageSql {
            truth: "1 = 1",
            raw: "COUNT(*), SUM(input), SUM(cached), SUM(output), SUM(reasoning), MAX(estimated)",
            daily: "SUM(calls), SUM(input), SUM(cached), SUM(output), SUM(reasoning), MAX(estimated)",
        };
        let queries = rows::usage_queries(filter, |n| format!("?{n}"), &SQL);
        // One read, so the rollup and the calls are of one moment.
        let parts = self
            .read(move |conn| {
                let snapshot = conn.unchecked_transaction().map_err(backend)?;
                let mut parts = Vec::new();
                for (sql, args) in &queries {
                    let mut stmt = conn.prepare_cached(sql).map_err(backend)?;
                    let found = stmt
                        .query_map(rusqlite::params_from_iter(args.iter()), |r| {
                            let n = |i: usize| -> rusqlite::Result<u64> {
                                Ok(u64::try_from(r.get::<_, Option<i64>>(i)?.unwrap_or(0))
                                    .unwrap_or(0))
                            };
                            Ok(UsageRow {
                                key: r.get(0)?,
                                provider: r.get(1)?,
                                model: r.get(2)?,
                                calls: n(3)?,
                                usage: rein_protocol::Usage {
                                    input_tokens: n(4)?,
                                    cached_input_tokens: n(5)?,
                                    output_tokens: n(6)?,
                                    reasoning_tokens: r
                                        .get::<_, Option<i64>>(7)?
                                        .map(|v| u64::try_from(v).unwrap_or(0)),
                                    estimated: r.get::<_, Option<i64>>(8)?.unwrap_or(0) != 0,
                                },
                            })
                        })
                        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                        .map_err(backend)?;
                    parts.extend(found);
                }
                drop(snapshot);
                Ok(parts)
            })
            .await?;
        Ok(rows::merge_usage(parts))
    }

    async fn load_journal(
        &self,
        task_id: &TaskId,
        step_id: &str,
    ) -> StoreResult<Vec<serde_json::Value>> {
        let (task, step) = (task_id.to_string(), step_id.to_owned());
        self.read(move |conn| {
            query_json(
                conn,
                "SELECT body FROM journal WHERE task_id = ?1 AND step_id = ?2 ORDER BY seq",
                params![task, step],
                "journal entry",
            )
        })
        .await
    }
}
