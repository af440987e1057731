//! What both backends write the same way: timestamps and positions as
//! stored, page cursors, and the columns of shared states and records.

use chrono::SecondsFormat;
use rein_core::store::{Record, RecordKind, UsageFilter, UsageGroup, UsageRow};
use rein_core::{StoreError, StoreResult};
use rein_protocol::{SharedHarnessState, Timestamp};

/// The largest page a listing returns.
pub const MAX_PAGE: usize = 500;

pub(crate) fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// Timestamps as stored: fixed-width RFC 3339, so text order is time order.
pub(crate) fn ts(t: &Timestamp) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// A position as stored (the databases' integers are signed).
pub(crate) fn seq(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A `created_at|id` page cursor, split.
pub(crate) fn time_id_cursor(cursor: Option<&str>) -> StoreResult<Option<(String, String)>> {
    cursor
        .map(|c| {
            c.split_once('|')
                .map(|(t, id)| (t.to_owned(), id.to_owned()))
                .ok_or_else(|| StoreError::BadCursor(c.to_owned()))
        })
        .transpose()
}

/// The first `limit` of `items` (a listing reads one more than a page) and
/// the cursor of the next page, if there is one: `cursor` of the last item kept.
pub(crate) fn page<T>(
    mut items: Vec<T>,
    limit: usize,
    cursor: impl Fn(&T) -> String,
) -> (Vec<T>, Option<String>) {
    if items.len() > limit {
        items.truncate(limit);
        let next = items.last().map(cursor);
        (items, next)
    } else {
        (items, None)
    }
}

/// What writing a versioned document back found.
pub(crate) enum WriteBack {
    Written,
    /// Someone wrote it since it was read.
    Moved,
    Missing,
}

impl WriteBack {
    /// A shared state's write-back as its outcome.
    pub fn of_state(self, id: &str, expected: u64) -> StoreResult<()> {
        match self {
            WriteBack::Written => Ok(()),
            WriteBack::Moved => Err(StoreError::SharedStateMoved {
                id: id.to_owned(),
                expected,
            }),
            WriteBack::Missing => Err(StoreError::SharedStateNotFound(id.to_owned())),
        }
    }

    /// A record's write-back as its outcome.
    pub fn of_record(self, kind: RecordKind, id: &str, expected: u64) -> StoreResult<()> {
        let id = id.to_owned();
        match self {
            WriteBack::Written => Ok(()),
            WriteBack::Moved => Err(StoreError::RecordMoved { kind, id, expected }),
            WriteBack::Missing => Err(StoreError::RecordNotFound { kind, id }),
        }
    }
}

/// The columns of a shared state's row.
pub(crate) struct SharedRow {
    pub id: String,
    pub session_id: Option<String>,
    pub parent_session_id: Option<String>,
    pub harness_contract_id: Option<String>,
    pub status: String,
    pub created_at: String,
    pub body: String,
}

impl SharedRow {
    pub fn of(state: &SharedHarnessState) -> StoreResult<SharedRow> {
        Ok(SharedRow {
            id: state.id.clone(),
            session_id: state.session_id.clone(),
            parent_session_id: state.parent_session_id.clone(),
            harness_contract_id: state.harness_contract_id.clone(),
            status: state.status.as_str().to_owned(),
            created_at: state.created_at.as_ref().map(ts).unwrap_or_default(),
            body: serde_json::to_string(state).map_err(backend)?,
        })
    }
}

/// A contract's or evidence bundle's row, ready to bind.
pub(crate) struct RecordRow {
    pub kind: &'static str,
    pub id: String,
    pub status: Option<String>,
    pub task_id: Option<String>,
    pub shared_state_id: Option<String>,
    pub contract_id: Option<String>,
    pub created_at: String,
    pub body: String,
}

impl RecordRow {
    pub fn of(r: &Record) -> StoreResult<RecordRow> {
        Ok(RecordRow {
            kind: r.kind.as_str(),
            id: r.id.clone(),
            status: r.status.clone(),
            task_id: r.task_id.clone(),
            shared_state_id: r.shared_state_id.clone(),
            contract_id: r.contract_id.clone(),
            created_at: ts(&r.created_at),
            body: serde_json::to_string(&r.body).map_err(backend)?,
        })
    }
}

/// A shared state's page cursor.
pub(crate) fn shared_state_cursor(s: &SharedHarnessState) -> String {
    format!(
        "{}|{}",
        s.created_at.as_ref().map(ts).unwrap_or_default(),
        s.id
    )
}

/// A record's page cursor.
pub(crate) fn record_cursor(r: &Record) -> String {
    format!("{}|{}", ts(&r.created_at), r.id)
}

/// How a backend spells a usage query's aggregates and truth.
pub(crate) struct UsageSql {
    /// `WHERE` of no condition.
    pub truth: &'static str,
    /// Over `model_usage`: calls, input, cached, output, reasoning, estimated.
    pub raw: &'static str,
    /// The same over `model_usage_daily`.
    pub daily: &'static str,
}

/// The queries (SQL and values) whose rows, added up, answer `filter`: the
/// per-day rollup (`model_usage_daily`) for the whole UTC days in its range,
/// and the calls themselves (`model_usage`) for the part days at its ends,
/// so a report over a million calls reads a row per day, task, session and
/// model. `placeholder(n)` spells the nth value as the backend takes it.
pub(crate) fn usage_queries(
    filter: &UsageFilter,
    placeholder: fn(usize) -> String,
    sql: &UsageSql,
) -> Vec<(String, Vec<String>)> {
    use chrono::{Duration, NaiveTime};
    let midnight = |t: &Timestamp| t.date_naive().and_time(NaiveTime::MIN).and_utc();
    // The whole days: from the first midnight at or after `since`, to the
    // last midnight at or before `until`.
    let first = filter.since.map(|s| {
        let m = midnight(&s);
        if m == s { m } else { m + Duration::days(1) }
    });
    let last = filter.until.map(|u| midnight(&u));
    let mut raw_ranges: Vec<(Option<Timestamp>, Option<Timestamp>)> = Vec::new();
    let daily = match (first, last) {
        (Some(f), Some(l)) if f >= l => {
            // Less than a whole day: the calls themselves.
            raw_ranges.push((filter.since, filter.until));
            None
        }
        _ => {
            if let (Some(s), Some(f)) = (filter.since, first)
                && s < f
            {
                raw_ranges.push((Some(s), Some(f)));
            }
            if let (Some(u), Some(l)) = (filter.until, last)
                && l < u
            {
                raw_ranges.push((Some(l), Some(u)));
            }
            Some((first, last))
        }
    };
    let mut queries = Vec::new();
    let build = |table: &str,
                 key: &str,
                 aggregates: &str,
                 session: &str,
                 from_col: &str,
                 range: (Option<String>, Option<String>)| {
        let mut conditions = String::new();
        let mut values = Vec::new();
        let wanted = [
            (
                "task_id =".to_owned(),
                filter.task_id.as_ref().map(ToString::to_string),
            ),
            (format!("{session} ="), filter.session_id.clone()),
            (format!("{from_col} >="), range.0),
            (format!("{from_col} <"), range.1),
        ];
        for (clause, value) in wanted {
            if let Some(value) = value {
                values.push(value);
                conditions.push_str(&format!(" AND {clause} {}", placeholder(values.len())));
            }
        }
        (
            format!(
                "SELECT {key}, provider, model, {aggregates} FROM {table} WHERE {}{conditions} GROUP BY 1, 2, 3",
                sql.truth
            ),
            values,
        )
    };
    if let Some((first, last)) = daily {
        let key = match filter.by {
            UsageGroup::All => "''",
            UsageGroup::Task => "task_id",
            UsageGroup::Day => "day",
        };
        let day = |t: Option<Timestamp>| t.map(|t| t.format("%Y-%m-%d").to_string());
        queries.push(build(
            "model_usage_daily",
            key,
            sql.daily,
            "session_id",
            "day",
            (day(first), day(last)),
        ));
    }
    for (from, to) in raw_ranges {
        let key = match filter.by {
            UsageGroup::All => "''",
            UsageGroup::Task => "task_id",
            UsageGroup::Day => "substr(at, 1, 10)",
        };
        queries.push(build(
            "model_usage",
            key,
            sql.raw,
            "session_id",
            "at",
            (from.as_ref().map(ts), to.as_ref().map(ts)),
        ));
    }
    queries
}

/// Rows of several usage queries added up by key and model, in order.
pub(crate) fn merge_usage(parts: Vec<UsageRow>) -> Vec<UsageRow> {
    let mut merged: std::collections::BTreeMap<(String, String, String), UsageRow> =
        std::collections::BTreeMap::new();
    for row in parts {
        match merged.entry((row.key.clone(), row.provider.clone(), row.model.clone())) {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(row);
            }
            std::collections::btree_map::Entry::Occupied(mut o) => {
                let kept = o.get_mut();
                kept.calls += row.calls;
                kept.usage.add(&row.usage);
            }
        }
    }
    merged.into_values().collect()
}

/// A journal write's entries as stored: each entry's body, and the model
/// usage it records (indexed into `model_usage` with it), if any.
pub(crate) type JournalRows = (Vec<String>, Vec<Option<rein_protocol::TurnUsage>>);

/// What both backends store of `entries` appended to a step's journal.
pub(crate) fn journal_rows(entries: &[serde_json::Value]) -> StoreResult<JournalRows> {
    let bodies = entries
        .iter()
        .map(serde_json::to_string)
        .collect::<Result<_, _>>()
        .map_err(backend)?;
    let metered = entries.iter().map(rein_core::store::entry_usage).collect();
    Ok((bodies, metered))
}

/// A write's new approval requests as rows: (id, status, created_at, body).
pub(crate) fn approval_rows(
    requests: &[rein_protocol::ApprovalRequest],
) -> StoreResult<Vec<(String, &'static str, String, String)>> {
    requests
        .iter()
        .map(|a| {
            serde_json::to_string(a)
                .map(|body| (a.id.to_string(), a.status.as_str(), ts(&a.created_at), body))
                .map_err(backend)
        })
        .collect()
}

/// A health probe's test write, failed with the store's last failed write
/// named (the likelier cause); else that last failure, if any, to report.
pub(crate) fn probe_write(
    probed: StoreResult<()>,
    last_error: &std::sync::Mutex<Option<String>>,
) -> StoreResult<Option<String>> {
    let last = last_error.lock().ok().and_then(|e| e.clone());
    probed.map_err(|e| match &last {
        Some(last) => backend(format!("{e} (last failed write: {last})")),
        None => e,
    })?;
    Ok(last)
}

/// A value either backend binds to a statement.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    Text(String),
    OptText(Option<String>),
    Int(i64),
    OptInt(Option<i64>),
    Bool(bool),
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            Value::Text(v) => v.to_sql(),
            Value::OptText(v) => v.to_sql(),
            Value::Int(v) => v.to_sql(),
            Value::OptInt(v) => v.to_sql(),
            Value::Bool(v) => v.to_sql(),
        }
    }
}

impl Value {
    /// The value as PostgreSQL binds it.
    pub fn pg(&self) -> &(dyn tokio_postgres::types::ToSql + Sync) {
        match self {
            Value::Text(v) => v,
            Value::OptText(v) => v,
            Value::Int(v) => v,
            Value::OptInt(v) => v,
            Value::Bool(v) => v,
        }
    }
}

/// The model call a journal entry records, as a row of `model_usage`: the
/// values of [`INSERT_USAGE`] in order.
pub(crate) fn usage_values(
    task: &str,
    journal: &str,
    at_seq: u64,
    used: &rein_protocol::TurnUsage,
    at: &str,
) -> [Value; 14] {
    let u = &used.usage;
    [
        Value::Text(task.to_owned()),
        Value::Text(journal.to_owned()),
        Value::Int(seq(at_seq)),
        Value::OptText(used.step.clone()),
        Value::OptText(used.session.clone()),
        Value::Text(at.to_owned()),
        Value::Text(used.provider.clone()),
        Value::Text(used.model.clone()),
        Value::OptText(used.served_model.clone()),
        Value::Int(seq(u.input_tokens)),
        Value::Int(seq(u.cached_input_tokens)),
        Value::Int(seq(u.output_tokens)),
        Value::OptInt(u.reasoning_tokens.map(seq)),
        Value::Bool(u.estimated),
    ]
}

/// A model call's row (both backends: `$n` is a positional parameter on
/// SQLite too).
pub(crate) const INSERT_USAGE: &str =
    "INSERT INTO model_usage (task_id, journal, seq, step_id, session_id, at,
       provider, model, served_model, input, cached, output, reasoning, estimated)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)";

/// The call of `model_usage` keyed `($1, $2, $3)` (task, journal, position)
/// added to its day's row, in the same transaction (both backends).
pub(crate) const ADD_USAGE_TO_DAY: &str =
    "INSERT INTO model_usage_daily (day, task_id, session_id, provider, model,
       calls, input, cached, output, reasoning, estimated)
     SELECT substr(at, 1, 10), task_id, COALESCE(session_id, ''), provider, model,
            1, input, cached, output, reasoning, estimated
     FROM model_usage WHERE task_id = $1 AND journal = $2 AND seq = $3
     ON CONFLICT (day, task_id, session_id, provider, model) DO UPDATE SET
       calls = model_usage_daily.calls + 1,
       input = model_usage_daily.input + excluded.input,
       cached = model_usage_daily.cached + excluded.cached,
       output = model_usage_daily.output + excluded.output,
       reasoning = CASE WHEN excluded.reasoning IS NULL THEN model_usage_daily.reasoning
                   ELSE COALESCE(model_usage_daily.reasoning, 0) + excluded.reasoning END,
       estimated = model_usage_daily.estimated OR excluded.estimated";

/// Whether `target` may be revoked: not a revocation itself, and not revoked
/// already (`revoked_by` finds the entry that did, if any).
pub(crate) fn revocable(
    target: &rein_protocol::LedgerEntry,
    revoked_by: impl FnOnce() -> rein_core::store::StoreResult<Option<String>>,
) -> rein_core::store::StoreResult<()> {
    let refuse = |why: String| rein_core::store::StoreError::NotRevocable {
        id: target.id.to_string(),
        why,
    };
    if let Some(of) = &target.revokes {
        return Err(refuse(format!(
            "it is itself the revocation of {of}; an entry is never taken back twice"
        )));
    }
    if let Some(by) = revoked_by()? {
        return Err(refuse(format!("it was already revoked by {by}")));
    }
    Ok(())
}
