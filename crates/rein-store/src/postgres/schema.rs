//! The PostgreSQL schema, as numbered migrations tracked in the one-row table
//! `rein_schema`. The numbers are this backend's own: the SQLite schema took
//! seven steps to its shape, this one starts there.
//!
//! Bodies are kept as `TEXT` holding the JSON rein wrote, byte for byte (the
//! ledger's hashes are over what was sealed); the few queries that look
//! inside one cast it to `json`. Timestamps are fixed-width RFC 3339 text, as
//! in SQLite, so page cursors are the same on both backends.

use tokio_postgres::Client;

/// Migration `i` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: everything the SQLite schema holds at its version 7. The task row
    //    keeps the task's position and summary (rewritten by each write: a
    //    heap-only update, no index changes).
    "
    CREATE TABLE tasks (
        tkey       BIGSERIAL PRIMARY KEY,
        id         TEXT NOT NULL UNIQUE,
        session_id TEXT NOT NULL,
        status     TEXT NOT NULL,
        created_at TEXT NOT NULL,
        status_at  TEXT NOT NULL,
        last_seq   BIGINT NOT NULL,
        summary    TEXT NOT NULL
    );
    CREATE INDEX tasks_by_session ON tasks(session_id, id);
    CREATE INDEX tasks_by_status ON tasks(status, id);
    CREATE TABLE plans (
        task_id TEXT PRIMARY KEY,
        plan    TEXT NOT NULL
    );
    CREATE TABLE events (
        gseq BIGSERIAL PRIMARY KEY,
        tkey BIGINT NOT NULL,
        seq  BIGINT NOT NULL,
        type TEXT NOT NULL,
        body TEXT NOT NULL,
        UNIQUE (tkey, seq)
    );
    CREATE INDEX events_by_type ON events(type);
    CREATE TABLE snapshots (
        id         TEXT PRIMARY KEY,
        task_id    TEXT NOT NULL,
        seq        BIGINT NOT NULL,
        created_at TEXT NOT NULL,
        body       TEXT NOT NULL
    );
    CREATE INDEX snapshots_by_task ON snapshots(task_id, id);
    CREATE TABLE controls (
        id      BIGSERIAL PRIMARY KEY,
        task_id TEXT NOT NULL,
        body    TEXT NOT NULL
    );
    CREATE INDEX controls_by_task ON controls(task_id);
    CREATE TABLE approvals (
        id         TEXT PRIMARY KEY,
        task_id    TEXT NOT NULL,
        status     TEXT NOT NULL,
        created_at TEXT NOT NULL,
        body       TEXT NOT NULL
    );
    CREATE INDEX approvals_by_status ON approvals(status, id);
    CREATE INDEX approvals_by_task ON approvals(task_id, id);
    CREATE TABLE ledger (
        seq  BIGINT PRIMARY KEY,
        id   TEXT NOT NULL UNIQUE,
        body TEXT NOT NULL
    );
    CREATE TABLE shared_states (
        id                  TEXT PRIMARY KEY,
        session_id          TEXT,
        parent_session_id   TEXT,
        harness_contract_id TEXT,
        status              TEXT NOT NULL,
        created_at          TEXT NOT NULL,
        version             BIGINT NOT NULL,
        body                TEXT NOT NULL
    );
    CREATE INDEX shared_states_by_time ON shared_states(created_at, id);
    CREATE INDEX shared_states_by_session ON shared_states(session_id, created_at, id);
    CREATE TABLE audit (
        seq  BIGSERIAL PRIMARY KEY,
        body TEXT NOT NULL
    );
    CREATE TABLE records (
        kind            TEXT NOT NULL,
        id              TEXT NOT NULL,
        status          TEXT,
        task_id         TEXT,
        shared_state_id TEXT,
        contract_id     TEXT,
        created_at      TEXT NOT NULL,
        version         BIGINT NOT NULL,
        body            TEXT NOT NULL,
        PRIMARY KEY (kind, id)
    );
    CREATE INDEX records_by_time ON records(kind, created_at, id);
    CREATE INDEX records_by_task ON records(task_id, kind);
    CREATE INDEX records_by_contract ON records(contract_id, kind);
    CREATE TABLE journal (
        task_id TEXT NOT NULL,
        step_id TEXT NOT NULL,
        seq     BIGINT NOT NULL,
        body    TEXT NOT NULL,
        PRIMARY KEY (task_id, step_id, seq)
    );
    ",
    // 2: task leases, for several nodes sharing the store. `token` grows with
    //    every new holder: a write under an older one is refused (fencing).
    "
    CREATE TABLE leases (
        task_id    TEXT PRIMARY KEY,
        node       TEXT NOT NULL,
        runner     TEXT NOT NULL,
        token      BIGINT NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL
    );
    CREATE INDEX leases_by_node ON leases(node);
    ",
    // 3: model calls, one row per journal entry that records a usage, written
    //    with the entry and kept when its task is deleted (as on SQLite).
    "
    CREATE TABLE model_usage (
        task_id      TEXT NOT NULL,
        journal      TEXT NOT NULL,
        seq          BIGINT NOT NULL,
        step_id      TEXT,
        session_id   TEXT,
        at           TEXT NOT NULL,
        provider     TEXT NOT NULL,
        model        TEXT NOT NULL,
        served_model TEXT,
        input        BIGINT NOT NULL,
        cached       BIGINT NOT NULL,
        output       BIGINT NOT NULL,
        reasoning    BIGINT,
        estimated    BOOLEAN NOT NULL,
        PRIMARY KEY (task_id, journal, seq)
    );
    CREATE INDEX model_usage_by_time ON model_usage(at);
    ",
    // 4: model calls added up per UTC day, task, session and model (as on
    //    SQLite).
    "
    CREATE TABLE model_usage_daily (
        day        TEXT NOT NULL,
        task_id    TEXT NOT NULL,
        session_id TEXT NOT NULL,
        provider   TEXT NOT NULL,
        model      TEXT NOT NULL,
        calls      BIGINT NOT NULL,
        input      BIGINT NOT NULL,
        cached     BIGINT NOT NULL,
        output     BIGINT NOT NULL,
        reasoning  BIGINT,
        estimated  BOOLEAN NOT NULL,
        PRIMARY KEY (day, task_id, session_id, provider, model)
    );
    INSERT INTO model_usage_daily
        SELECT substr(at, 1, 10), task_id, COALESCE(session_id, ''), provider, model,
               COUNT(*), SUM(input), SUM(cached), SUM(output), SUM(reasoning), bool_or(estimated)
        FROM model_usage GROUP BY 1, 2, 3, 4, 5;
    ",
];

/// The schema version this build writes.
pub const CURRENT_VERSION: i64 = MIGRATIONS.len() as i64;

/// The advisory lock a migration holds: two nodes starting on a new database
/// at once migrate it once.
const MIGRATION_LOCK: i64 = 0x7265_696e_0001;

#[derive(Debug)]
pub enum MigrationError {
    /// The database was migrated by a newer rein.
    TooNew {
        found: i64,
        supported: i64,
    },
    /// A database of something else: tables, and no rein schema version.
    Foreign {
        tables: Vec<String>,
    },
    Postgres(tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for MigrationError {
    fn from(e: tokio_postgres::Error) -> Self {
        MigrationError::Postgres(e)
    }
}

pub use crate::schema::Migrated;

/// Brings the schema up to [`CURRENT_VERSION`], in one transaction.
pub async fn migrate(client: &mut Client) -> Result<Migrated, MigrationError> {
    migrate_to(client, CURRENT_VERSION).await
}

/// Brings the schema up to `target` (at most [`CURRENT_VERSION`]).
pub async fn migrate_to(client: &mut Client, target: i64) -> Result<Migrated, MigrationError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    let tables: Vec<String> = tx
        .query(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'
             ORDER BY 1",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let found: i64 = if tables.iter().any(|t| t == "rein_schema") {
        tx.query_one("SELECT version FROM rein_schema", &[])
            .await?
            .get(0)
    } else if tables.is_empty() {
        tx.batch_execute("CREATE TABLE rein_schema (version BIGINT NOT NULL); INSERT INTO rein_schema VALUES (0)")
            .await?;
        0
    } else {
        // A rein database gets its version table with its first tables.
        return Err(MigrationError::Foreign { tables });
    };
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
        tx.batch_execute(sql).await?;
        let version = i64::try_from(i + 1).unwrap_or(i64::MAX);
        tx.execute("UPDATE rein_schema SET version = $1", &[&version])
            .await?;
    }
    tx.commit().await?;
    Ok(Migrated {
        from: found,
        to: found.max(target),
    })
}
