//! A `SELECT` with `AND`-ed conditions and numbered parameters, for both
//! backends: SQLite numbers its parameters `?1`, PostgreSQL `$1`.

/// How a backend writes its `n`th parameter.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mark {
    /// `?n` (SQLite).
    Question,
    /// `$n` (PostgreSQL).
    Dollar,
}

impl Mark {
    fn of(self, n: usize) -> String {
        match self {
            Mark::Question => format!("?{n}"),
            Mark::Dollar => format!("${n}"),
        }
    }
}

/// A condition's `?`s are numbered in order; one without a `?` gets its
/// parameter at the end.
pub(crate) struct Where {
    pub sql: String,
    pub args: Vec<String>,
    mark: Mark,
}

impl Where {
    pub fn new(select: &str, mark: Mark) -> Where {
        Where {
            sql: format!("{select} WHERE 1 = 1"),
            args: Vec::new(),
            mark,
        }
    }

    /// `AND cond`, with `value` as its first parameter.
    pub fn and(&mut self, cond: &str, value: String) {
        self.sql.push_str(" AND ");
        if cond.contains('?') {
            let mut first = true;
            let mut n = self.args.len();
            for part in cond.split('?') {
                if !first {
                    n += 1;
                    self.sql.push_str(&self.mark.of(n));
                }
                first = false;
                self.sql.push_str(part);
            }
        } else {
            let at = self.mark.of(self.args.len() + 1);
            self.sql.push_str(&format!("{cond} {at}"));
        }
        self.args.push(value);
    }

    /// `AND cond` if there is a value.
    pub fn and_some(&mut self, cond: &str, value: Option<String>) {
        if let Some(v) = value {
            self.and(cond, v);
        }
    }

    /// A further parameter of the last condition.
    pub fn also(&mut self, value: String) {
        self.args.push(value);
    }
}

/// `AND` the position before `cursor` (`TIME|ID` of the previous page's last
/// item), newest first.
fn before(q: &mut Where, cursor: Option<(String, String)>) {
    if let Some((t, id)) = cursor {
        q.and("(created_at < ? OR (created_at = ? AND id < ?))", t.clone());
        q.also(t);
        q.also(id);
    }
}

/// `AND` created at or after `from` and before `to`, where given.
fn created_between(
    q: &mut Where,
    from: Option<rein_protocol::Timestamp>,
    to: Option<rein_protocol::Timestamp>,
) {
    q.and_some("created_at >=", from.as_ref().map(crate::rows::ts));
    q.and_some("created_at <", to.as_ref().map(crate::rows::ts));
}

/// The query of a page of records of `filter`'s kind, newest first (one
/// more than `limit`, to tell whether a next page follows). `field` is how
/// the backend reads a top-level text field of the body, `tagged` the
/// condition that the body's `tags` hold the filter's tag.
pub(crate) fn records_page(
    filter: &rein_core::store::RecordFilter,
    cursor: Option<(String, String)>,
    limit: usize,
    mark: Mark,
    field: fn(&str) -> String,
    tagged: &str,
) -> Where {
    let mut q = Where::new(
        "SELECT id, status, task_id, shared_state_id, contract_id, created_at, body FROM records",
        mark,
    );
    q.and("kind =", filter.kind.as_str().to_owned());
    q.and_some("status =", filter.status.clone());
    q.and_some("task_id =", filter.task_id.clone());
    q.and_some("shared_state_id =", filter.shared_state_id.clone());
    q.and_some("contract_id =", filter.contract_id.clone());
    for (name, value) in &filter.fields {
        debug_assert!(name.chars().all(|c| c.is_ascii_alphanumeric()));
        q.and(&format!("{} =", field(name)), value.clone());
    }
    q.and_some(tagged, filter.tag.clone());
    created_between(&mut q, filter.created_from, filter.created_to);
    before(&mut q, cursor);
    q.sql.push_str(&format!(
        " ORDER BY created_at DESC, id DESC LIMIT {}",
        limit + 1
    ));
    q
}

/// The query of a page of shared states' bodies, newest first (one more than
/// `limit`); `tagged` is the condition that a state has the filter's tag, as
/// the backend reads a JSON array.
pub(crate) fn shared_states_page(
    filter: &rein_core::store::SharedStateFilter,
    cursor: Option<(String, String)>,
    limit: usize,
    mark: Mark,
    tagged: &str,
) -> Where {
    let mut q = Where::new("SELECT body FROM shared_states", mark);
    q.and_some("session_id =", filter.session_id.clone());
    q.and_some("parent_session_id =", filter.parent_session_id.clone());
    q.and_some("harness_contract_id =", filter.harness_contract_id.clone());
    q.and_some("status =", filter.status.map(|s| s.as_str().to_owned()));
    created_between(&mut q, filter.created_from, filter.created_to);
    q.and_some(tagged, filter.tag.clone());
    before(&mut q, cursor);
    q.sql.push_str(&format!(
        " ORDER BY created_at DESC, id DESC LIMIT {}",
        limit + 1
    ));
    q
}
