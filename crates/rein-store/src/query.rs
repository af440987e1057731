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
