//! What both backends write the same way: timestamps and positions as
//! stored, page cursors, and the columns of shared states and records.

use chrono::SecondsFormat;
use rein_core::store::{Record, UsageFilter, UsageGroup};
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

/// The column a `model_usage` query groups by, for `by`.
pub(crate) fn usage_key(by: UsageGroup) -> &'static str {
    match by {
        UsageGroup::All => "''",
        UsageGroup::Task => "task_id",
        UsageGroup::Day => "substr(at, 1, 10)",
    }
}

/// A `model_usage` query's conditions (` AND …` each) and their values in
/// order; `placeholder(n)` spells the nth value as the backend takes it.
pub(crate) fn usage_conditions(
    filter: &UsageFilter,
    placeholder: fn(usize) -> String,
) -> (String, Vec<String>) {
    let mut conditions = String::new();
    let mut values = Vec::new();
    let wanted = [
        (
            "task_id =",
            filter.task_id.as_ref().map(ToString::to_string),
        ),
        ("session_id =", filter.session_id.clone()),
        ("at >=", filter.since.as_ref().map(ts)),
        ("at <", filter.until.as_ref().map(ts)),
    ];
    for (clause, value) in wanted {
        if let Some(value) = value {
            values.push(value);
            conditions.push_str(&format!(" AND {clause} {}", placeholder(values.len())));
        }
    }
    (conditions, values)
}
