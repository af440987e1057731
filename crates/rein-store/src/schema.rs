//! The SQLite schema, as numbered migrations tracked in `PRAGMA user_version`.

use rusqlite::Connection;

/// Migration `i` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: tasks (the state row: a summary), their plans, event logs (the truth),
    //    snapshots, control requests. Events name their task by its integer key:
    //    small index entries, so a commit touches few index pages.
    "
    CREATE TABLE tasks (
        tkey       INTEGER PRIMARY KEY,
        id         TEXT NOT NULL UNIQUE,
        session_id TEXT NOT NULL,
        status     TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        last_seq   INTEGER NOT NULL,
        summary    TEXT NOT NULL
    ) STRICT;
    CREATE INDEX tasks_by_session ON tasks(session_id, id);
    CREATE INDEX tasks_by_status ON tasks(status, id);
    CREATE TABLE plans (
        task_id TEXT PRIMARY KEY,
        plan    TEXT NOT NULL
    ) STRICT;
    CREATE TABLE events (
        gseq    INTEGER PRIMARY KEY,
        tkey    INTEGER NOT NULL,
        seq     INTEGER NOT NULL,
        type    TEXT NOT NULL,
        body    TEXT NOT NULL,
        UNIQUE (tkey, seq)
    ) STRICT;
    CREATE TABLE snapshots (
        id         TEXT PRIMARY KEY,
        task_id    TEXT NOT NULL,
        seq        INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        body       TEXT NOT NULL
    ) STRICT;
    CREATE INDEX snapshots_by_task ON snapshots(task_id, id);
    CREATE TABLE controls (
        id      INTEGER PRIMARY KEY,
        task_id TEXT NOT NULL,
        body    TEXT NOT NULL
    ) STRICT;
    CREATE INDEX controls_by_task ON controls(task_id);
    ",
    // 2: approval requests (their status is the compare-and-set point of a decision)
    //    and the hash-chained governance ledger.
    "
    CREATE TABLE approvals (
        id         TEXT PRIMARY KEY,
        task_id    TEXT NOT NULL,
        status     TEXT NOT NULL,
        created_at TEXT NOT NULL,
        body       TEXT NOT NULL
    ) STRICT;
    CREATE INDEX approvals_by_status ON approvals(status, id);
    CREATE INDEX approvals_by_task ON approvals(task_id, id);
    CREATE TABLE ledger (
        seq  INTEGER PRIMARY KEY,
        id   TEXT NOT NULL UNIQUE,
        body TEXT NOT NULL
    ) STRICT;
    ",
    // 3: shared harness states; `version` is the optimistic-concurrency point of
    //    an update (read, change, write back if nobody wrote in between).
    "
    CREATE TABLE shared_states (
        id                  TEXT PRIMARY KEY,
        session_id          TEXT,
        parent_session_id   TEXT,
        harness_contract_id TEXT,
        status              TEXT NOT NULL,
        created_at          TEXT NOT NULL,
        version             INTEGER NOT NULL,
        body                TEXT NOT NULL
    ) STRICT;
    CREATE INDEX shared_states_by_time ON shared_states(created_at, id);
    CREATE INDEX shared_states_by_session ON shared_states(session_id, created_at, id);
    ",
    // 4: audit records of changes made outside a task's log.
    "
    CREATE TABLE audit (
        seq  INTEGER PRIMARY KEY,
        body TEXT NOT NULL
    ) STRICT;
    ",
    // 5: harness contracts and evidence bundles, one table: a JSON body, the
    //    columns they are found by, and an optimistic-concurrency version.
    "
    CREATE TABLE records (
        kind            TEXT NOT NULL,
        id              TEXT NOT NULL,
        status          TEXT,
        task_id         TEXT,
        shared_state_id TEXT,
        contract_id     TEXT,
        created_at      TEXT NOT NULL,
        version         INTEGER NOT NULL,
        body            TEXT NOT NULL,
        PRIMARY KEY (kind, id)
    ) STRICT;
    CREATE INDEX records_by_time ON records(kind, created_at, id);
    CREATE INDEX records_by_task ON records(task_id, kind);
    CREATE INDEX records_by_contract ON records(contract_id, kind);
    ",
    // 6: step journals, append-only: what a step that works in turns (an agent
    //    step) has done, one row per entry, so each turn writes only itself.
    "
    CREATE TABLE journal (
        task_id TEXT NOT NULL,
        step_id TEXT NOT NULL,
        seq     INTEGER NOT NULL,
        body    TEXT NOT NULL,
        PRIMARY KEY (task_id, step_id, seq)
    ) STRICT;
    ",
    // 7: a task's summary travels with its events: the last event of each write
    //    carries the summary as of that write, so a step's commit appends to the
    //    log and its index and leaves the task row alone. The task row keeps what
    //    lists are filtered by, and is written only when the status changes; its
    //    `summary` is then the one of that change, read only if no event carries
    //    one. A task's position is the largest `seq` of its events.
    "
    ALTER TABLE events ADD COLUMN summary TEXT;
    UPDATE events SET summary = (SELECT t.summary FROM tasks t WHERE t.tkey = events.tkey)
     WHERE gseq IN (SELECT e.gseq FROM tasks t JOIN events e ON e.tkey = t.tkey AND e.seq = t.last_seq);
    ALTER TABLE tasks DROP COLUMN last_seq;
    ALTER TABLE tasks RENAME COLUMN updated_at TO status_at;
    ",
    // 8: the store's head: how many transactions rein's writers committed and
    //    the ledger's newest entry, counted in every commit and recorded beside
    //    the store after it (`rein.db-head`), so that commits lost with a
    //    deleted write-ahead log are found at open; and each loss found.
    "
    CREATE TABLE store_head (
        id          INTEGER PRIMARY KEY CHECK (id = 0),
        commits     INTEGER NOT NULL,
        ledger_seq  INTEGER,
        ledger_hash TEXT
    ) STRICT;
    INSERT INTO store_head (id, commits, ledger_seq, ledger_hash)
    SELECT 0, 0, (SELECT seq FROM ledger ORDER BY seq DESC LIMIT 1),
           (SELECT json_extract(body, '$.hash') FROM ledger ORDER BY seq DESC LIMIT 1);
    CREATE TABLE lost_writes (
        id              INTEGER PRIMARY KEY,
        detected_at     TEXT NOT NULL,
        recorded        INTEGER NOT NULL,
        found           INTEGER NOT NULL,
        ledger_seq      INTEGER,
        ledger_hash     TEXT,
        acknowledged_at TEXT
    ) STRICT;
    ",
    // 9: model calls, one row per journal entry that records a usage, written
    //    with the entry (so each is counted once) and kept when its task is
    //    deleted: what was spent stays spent.
    "
    CREATE TABLE model_usage (
        task_id      TEXT NOT NULL,
        journal      TEXT NOT NULL,
        seq          INTEGER NOT NULL,
        step_id      TEXT,
        session_id   TEXT,
        at           TEXT NOT NULL,
        provider     TEXT NOT NULL,
        model        TEXT NOT NULL,
        served_model TEXT,
        input        INTEGER NOT NULL,
        cached       INTEGER NOT NULL,
        output       INTEGER NOT NULL,
        reasoning    INTEGER,
        estimated    INTEGER NOT NULL,
        PRIMARY KEY (task_id, journal, seq)
    ) STRICT;
    CREATE INDEX model_usage_by_time ON model_usage(at);
    ",
    // 10: model calls added up per UTC day, task, session ('' for none) and
    //     model, kept with each call in the same transaction: what a report
    //     over whole days reads instead of every call.
    "
    CREATE TABLE model_usage_daily (
        day        TEXT NOT NULL,
        task_id    TEXT NOT NULL,
        session_id TEXT NOT NULL,
        provider   TEXT NOT NULL,
        model      TEXT NOT NULL,
        calls      INTEGER NOT NULL,
        input      INTEGER NOT NULL,
        cached     INTEGER NOT NULL,
        output     INTEGER NOT NULL,
        reasoning  INTEGER,
        estimated  INTEGER NOT NULL,
        PRIMARY KEY (day, task_id, session_id, provider, model)
    ) STRICT;
    INSERT INTO model_usage_daily
        SELECT substr(at, 1, 10), task_id, COALESCE(session_id, ''), provider, model,
               COUNT(*), SUM(input), SUM(cached), SUM(output), SUM(reasoning), MAX(estimated)
        FROM model_usage GROUP BY 1, 2, 3, 4, 5;
    ",
    // 11: a commit that appends events counts itself on its newest event
    //     (`commit_no`), on the page the append writes anyway, instead of in
    //     `store_head`: a step's commit then writes two pages (the log and its
    //     index), not three. The store's commit count is the larger of
    //     `store_head.commits` (counted by commits that append no event) and the
    //     newest event's `commit_no`; the newest event of a store made before
    //     carries the count it had.
    "
    ALTER TABLE events ADD COLUMN commit_no INTEGER;
    UPDATE events SET commit_no = (SELECT commits FROM store_head WHERE id = 0)
     WHERE gseq = (SELECT max(gseq) FROM events);
    ",
    // 12: the task row keeps the lasting part of the summary it was written
    //     with (id, session, description, workspace, trace, …), and a write
    //     whose summary still has it carries only the part that moves (status,
    //     steps, runner, position, time) as a JSON merge patch over the row's:
    //     a third of the bytes a step's commit wrote. Rows written before have
    //     none, and their writes carry whole summaries until the next status
    //     change writes it.
    "
    ALTER TABLE tasks ADD COLUMN lasting TEXT;
    ",
];

/// The schema version this build writes.
pub const CURRENT_VERSION: i64 = MIGRATIONS.len() as i64;

#[derive(Debug)]
pub enum MigrationError {
    /// The file was written by a newer rein.
    TooNew {
        found: i64,
        supported: i64,
    },
    /// An SQLite file of something else: tables, and no rein schema version.
    Foreign {
        tables: Vec<String>,
    },
    Sqlite(rusqlite::Error),
}

impl From<rusqlite::Error> for MigrationError {
    fn from(e: rusqlite::Error) -> Self {
        MigrationError::Sqlite(e)
    }
}

/// What a migration did: the schema version it found and the one it left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migrated {
    pub from: i64,
    pub to: i64,
}

impl Migrated {
    /// How many migrations ran.
    pub fn applied(self) -> i64 {
        self.to - self.from
    }
}

/// Brings the schema up to [`CURRENT_VERSION`], in one transaction so two processes
/// opening a fresh file at once cannot both migrate it.
pub fn migrate(conn: &mut Connection) -> Result<Migrated, MigrationError> {
    migrate_to(conn, CURRENT_VERSION)
}

/// Brings the schema up to `target` (at most [`CURRENT_VERSION`]): a file as an
/// older rein wrote it, which is how the migrations are tested.
pub fn migrate_to(conn: &mut Connection, target: i64) -> Result<Migrated, MigrationError> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let found: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if found == 0 {
        // A rein store is migrated in one transaction with its version: tables
        // without a version are someone else's.
        let mut tables = tx.prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
        )?;
        let tables: Vec<String> = tables
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        if !tables.is_empty() {
            return Err(MigrationError::Foreign { tables });
        }
    }
    if found > CURRENT_VERSION {
        return Err(MigrationError::TooNew {
            found,
            supported: CURRENT_VERSION,
        });
    }
    let target = target.min(CURRENT_VERSION);
    for (i, sql) in MIGRATIONS
        .iter()
        .enumerate()
        .take(usize::try_from(target).unwrap_or(0))
        .skip(usize::try_from(found).unwrap_or(0))
    {
        tx.execute_batch(sql)?;
        tx.execute_batch(&format!("PRAGMA user_version = {}", i + 1))?;
    }
    tx.commit()?;
    Ok(Migrated {
        from: found,
        to: found.max(target),
    })
}
