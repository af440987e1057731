//! The PostgreSQL store: the store several rein nodes share. Reads come from a
//! pool of connections; every write of this process goes through one
//! group-committing [`writer`], and write transactions of all nodes commit
//! one at a time (an advisory lock), so the guarantees of the SQLite store
//! hold unchanged: a change is one transaction with its events, commits are
//! durable (`synchronous_commit = on` on every connection rein opens),
//! sequence numbers are gap-free per task, the global feed is in commit
//! order, and the first decision on an approval wins. Connections are
//! secured as the URL's `sslmode` says ([`tls`]).

mod leases;
mod metrics;
pub mod schema;
pub mod scratch;
pub mod tls;
mod writer;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use futures_util::future::{join, join3};
use rein_core::store::{
    ApprovalFilter, AuditRecord, Change, ControlRequest, NewTask, Record, RecordFilter, RecordKind,
    RecordPage, SharedStateFilter, SharedStatePage, SnapshotInfo, StoreProbe, TaskFilter, TaskPage,
    TaskWrite, UsageFilter, UsageRow,
};
use rein_core::{ApprovalStore, DocumentStore, JournalStore, StoreError, StoreResult, TaskStore};
use rein_protocol::{
    ApprovalId, ApprovalRequest, HarnessEvent, HarnessMetrics, LedgerEntry, SharedHarnessState,
    Snapshot, SnapshotId, TaskDecomposition, TaskId, TaskSummary,
};
use tokio_postgres::types::ToSql;

use crate::StoreStats;
use crate::query::{Mark, Where};
use crate::rows::{
    MAX_PAGE, RecordRow, SharedRow, WriteBack, backend, page, record_cursor, seq,
    shared_state_cursor, time_id_cursor, ts,
};
use schema::MigrationError;
use writer::Writer;

/// Connections in the pool (reads, and the writer's one at a time).
const POOL_SIZE: usize = 16;

#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    writer: Writer,
    /// `postgres://user@host:port/db`, without a password.
    location: String,
    migrated: schema::Migrated,
    leases: Arc<leases::Leases>,
}

/// How a store is opened.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// How long a task's lease lasts unless renewed (it is renewed every
    /// quarter of that): how long a dead node's tasks wait before another node
    /// takes them over.
    pub lease: Duration,
    /// Migrate only up to this schema version (how migrations are tested).
    pub target: i64,
    /// The node its leases name [default: this process].
    pub node: Option<rein_protocol::RunnerInfo>,
}

/// The lease a node holds on the tasks it runs, unless set otherwise.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            lease: DEFAULT_LEASE,
            target: schema::CURRENT_VERSION,
            node: None,
        }
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

/// A PostgreSQL error with what the server said (`Display` alone says only
/// "db error").
fn pg(e: tokio_postgres::Error) -> StoreError {
    match e.as_db_error() {
        Some(db) => backend(format!("PostgreSQL: {db}")),
        None => backend(format!("PostgreSQL: {e}")),
    }
}

fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

fn unseq(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn json<T: serde::de::DeserializeOwned>(body: &str, what: &str) -> StoreResult<T> {
    serde_json::from_str(body).map_err(|e| corrupt(what, e))
}

/// Rows whose first column is a JSON body, decoded.
fn bodies<T: serde::de::DeserializeOwned>(
    rows: &[tokio_postgres::Row],
    what: &str,
) -> StoreResult<Vec<T>> {
    rows.iter()
        .map(|r| json(r.get::<_, &str>(0), what))
        .collect()
}

/// Text parameters as PostgreSQL binds them.
fn params(args: &[String]) -> Vec<&(dyn ToSql + Sync)> {
    args.iter().map(|a| a as &(dyn ToSql + Sync)).collect()
}

/// Where a PostgreSQL URL points, without its password.
fn location(config: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("");
    let db = config.get_dbname().unwrap_or(user);
    let at = if user.is_empty() {
        String::new()
    } else {
        format!("{user}@")
    };
    format!("postgres://{at}{host}:{port}/{db}")
}

impl PostgresStore {
    /// Connects to the database `url` names (`postgres://user[:password]@host[:port]/db`)
    /// and migrates its schema. A database with tables but no rein schema, or
    /// one migrated by a newer rein, is refused, saying so.
    pub async fn connect(url: &str) -> StoreResult<PostgresStore> {
        PostgresStore::connect_with(url, PostgresOptions::default()).await
    }

    /// [`PostgresStore::connect`], migrating only up to `target` (how the
    /// migrations and the version check are tested).
    pub async fn connect_to(url: &str, target: i64) -> StoreResult<PostgresStore> {
        let options = PostgresOptions {
            target,
            ..PostgresOptions::default()
        };
        PostgresStore::connect_with(url, options).await
    }

    /// [`PostgresStore::connect`] as `options` say.
    pub async fn connect_with(url: &str, options: PostgresOptions) -> StoreResult<PostgresStore> {
        let target = options.target;
        let tls::Secured {
            mut config,
            connector,
            mode,
        } = tls::secure(url).map_err(|e| {
            backend(format!(
                "invalid PostgreSQL URL `{}`: {e}; write it as postgres://USER@HOST:PORT/DATABASE[?sslmode=verify-full&sslrootcert=FILE]",
                redacted(url)
            ))
        })?;
        let location = location(&config);
        // Durable commits whatever the server's default: a write rein has
        // answered for is on the server's disk.
        // A node stopped in the middle of a transaction (paused, cut off)
        // would hold the write lock, and every node's writes with it: the
        // server ends such a session once it has been idle for a lease, and
        // its locks go with it (by then the node's leases are gone too).
        let idle = options.lease.max(Duration::from_secs(1)).as_millis();
        let ours =
            format!("-c synchronous_commit=on -c idle_in_transaction_session_timeout={idle}");
        let settings = match config.get_options() {
            Some(o) => format!("{o} {ours}"),
            None => ours,
        };
        config.options(&settings);
        if config.get_application_name().is_none() {
            config.application_name("rein");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_secs(10));
        }
        let listen_config = config.clone();
        let manager = Manager::from_config(
            config,
            connector.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .build()
            .map_err(backend)?;
        let mut client = pool.get().await.map_err(|e| {
            let why = pool_error(&e);
            let next = if why.contains("client certificate") {
                "give the certificate the server's authority signed for this user as sslcert, and its key as sslkey"
            } else if why.contains("peer certificate") {
                "check that sslrootcert holds the authority that signed the server's certificate, and (verify-full) that the URL's host is a name the certificate holds"
            } else {
                "check that the server runs and that --store (or REIN_STORE) names it"
            };
            backend(format!(
                "cannot connect to PostgreSQL at {location} (sslmode={}): {why}; {next}",
                mode.as_str(),
            ))
        })?;
        let migrated = schema::migrate_to(&mut client, target)
            .await
            .map_err(|e| match e {
                MigrationError::TooNew { found, supported } => backend(format!(
                    "store {location} has schema version {found}, newer than this rein supports ({supported}); upgrade rein"
                )),
                MigrationError::Foreign { tables } => backend(format!(
                    "{location} is not a rein store: the database holds tables of something else ({}); give rein a database of its own",
                    tables.join(", ")
                )),
                MigrationError::Postgres(e) => {
                    backend(format!("cannot migrate store {location}: {}", pg(e)))
                }
            })?;
        drop(client);
        let writer = Writer::start(pool.clone());
        let leases = leases::Leases::start(listen_config, connector, options.lease, options.node);
        Ok(PostgresStore {
            writer,
            pool,
            location,
            migrated,
            leases,
        })
    }

    /// What connecting migrated.
    pub fn migrated(&self) -> schema::Migrated {
        self.migrated
    }

    /// `postgres://user@host:port/db`.
    pub fn location(&self) -> &str {
        &self.location
    }

    pub fn stats(&self) -> StoreStats {
        let c = &self.writer.counters;
        StoreStats {
            commits: c.commits.load(Ordering::Relaxed),
            writes: c.writes.load(Ordering::Relaxed),
            busy_ns: c.busy_ns.load(Ordering::Relaxed),
        }
    }

    async fn client(&self) -> StoreResult<Object> {
        self.pool.get().await.map_err(|e| {
            backend(format!(
                "cannot reach PostgreSQL at {}: {}",
                self.location,
                pool_error(&e)
            ))
        })
    }

    /// The JSON body of the one row `sql` finds by `key`, if any.
    async fn body<T: serde::de::DeserializeOwned>(
        &self,
        sql: &str,
        key: &str,
        what: &str,
    ) -> StoreResult<Option<T>> {
        let rows = self.rows(sql, &[&key]).await?;
        Ok(bodies(&rows, what)?.pop())
    }

    /// Rows of a read on a pooled connection.
    async fn rows(
        &self,
        sql: &str,
        args: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<Vec<tokio_postgres::Row>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql).await.map_err(pg)?;
        client.query(&stmt, args).await.map_err(pg)
    }
}

fn pool_error(e: &deadpool_postgres::PoolError) -> String {
    match e {
        deadpool_postgres::PoolError::Backend(e) => match e.as_db_error() {
            Some(db) => db.to_string(),
            None => {
                let mut text = e.to_string();
                let mut source = std::error::Error::source(e);
                while let Some(s) = source {
                    text = format!("{text}: {s}");
                    source = s.source();
                }
                text
            }
        },
        other => other.to_string(),
    }
}

/// A URL with its password replaced, for messages.
pub fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_owned(),
    }
}

/// A statement prepared once per connection.
macro_rules! prepared {
    ($client:expr, $sql:expr) => {
        $client.prepare_cached($sql).await.map_err(pg)?
    };
}

/// A write encoded on the caller's task, so the writer only runs SQL.
struct Encoded {
    task_id: String,
    expected_seq: i64,
    last_seq: i64,
    status: &'static str,
    session_id: String,
    created_at: String,
    updated_at: String,
    summary: String,
    seqs: Vec<i64>,
    types: Vec<String>,
    bodies: Vec<String>,
    /// New approval requests: (id, status, created_at, body).
    approvals: Vec<(String, &'static str, String, String)>,
    ledger: Vec<LedgerEntry>,
    plan: Option<String>,
}

fn encode(write: &TaskWrite) -> StoreResult<Encoded> {
    let mut seqs = Vec::with_capacity(write.events.len());
    let mut types = Vec::with_capacity(write.events.len());
    let mut bodies = Vec::with_capacity(write.events.len());
    for e in &write.events {
        seqs.push(seq(e.seq));
        types.push(e.event_type().as_str().to_owned());
        bodies.push(serde_json::to_string(e).map_err(backend)?);
    }
    let approvals = write
        .approvals
        .iter()
        .map(|a| {
            serde_json::to_string(a)
                .map(|body| (a.id.to_string(), a.status.as_str(), ts(&a.created_at), body))
                .map_err(backend)
        })
        .collect::<StoreResult<Vec<_>>>()?;
    Ok(Encoded {
        task_id: write.task_id.to_string(),
        expected_seq: seq(write.expected_seq),
        last_seq: seqs.last().copied().unwrap_or(seq(write.expected_seq)),
        status: write.summary.status.as_str(),
        session_id: write.summary.session_id.clone(),
        created_at: ts(&write.summary.created_at),
        updated_at: ts(&write.summary.updated_at),
        summary: serde_json::to_string(&write.summary).map_err(backend)?,
        seqs,
        types,
        bodies,
        approvals,
        ledger: write.ledger.clone(),
        plan: write
            .plan
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(backend)?,
    })
}

/// A task write in one statement: the task's row brought to the write's
/// last event if its log is still where the write read it (`$2`), and the
/// write's events appended. It changes no row, and appends none, otherwise.
const ADVANCE: &str = "WITH t AS (
        UPDATE tasks SET last_seq = $3, summary = $4, status = $5,
            status_at = CASE WHEN status = $5 THEN status_at ELSE $6 END
        WHERE id = $1 AND last_seq = $2 RETURNING tkey)
    INSERT INTO events (tkey, seq, type, body)
    SELECT t.tkey, e.* FROM t, UNNEST($7::bigint[], $8::text[], $9::text[]) AS e";

/// Appends a write's events, approvals and ledger entries.
async fn append(c: &Object, tkey: i64, w: &Encoded) -> StoreResult<()> {
    if !w.seqs.is_empty() {
        let insert = prepared!(
            c,
            "INSERT INTO events (tkey, seq, type, body)
             SELECT $1, * FROM UNNEST($2::bigint[], $3::text[], $4::text[])"
        );
        c.execute(&insert, &[&tkey, &w.seqs, &w.types, &w.bodies])
            .await
            .map_err(pg)?;
    }
    append_rest(c, w).await
}

/// Appends a write's approvals and ledger entries.
async fn append_rest(c: &Object, w: &Encoded) -> StoreResult<()> {
    for (id, status, created_at, body) in &w.approvals {
        let insert = prepared!(
            c,
            "INSERT INTO approvals (id, task_id, status, created_at, body) VALUES ($1, $2, $3, $4, $5)"
        );
        c.execute(&insert, &[id, &w.task_id, status, created_at, body])
            .await
            .map_err(pg)?;
    }
    for entry in &w.ledger {
        append_ledger(c, entry.clone()).await?;
    }
    Ok(())
}

/// Seals `entry` after the ledger's last entry and appends it (under the
/// write lock, so the chain has no gaps whoever writes).
async fn append_ledger(c: &Object, entry: LedgerEntry) -> StoreResult<LedgerEntry> {
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

/// A task's row as a write finds it.
struct TaskRow {
    tkey: i64,
}

/// The row of a task whose log is at `expected`; a write that read the task
/// at another position is refused.
async fn task_at(c: &Object, task_id: &TaskId, expected: i64) -> StoreResult<TaskRow> {
    let stmt = prepared!(c, "SELECT tkey, last_seq FROM tasks WHERE id = $1");
    let Some(row) = c.query_opt(&stmt, &[&task_id.as_str()]).await.map_err(pg)? else {
        return Err(StoreError::TaskNotFound(task_id.clone()));
    };
    let actual: i64 = row.get(1);
    if actual != expected {
        return Err(StoreError::Conflict {
            task_id: task_id.clone(),
            expected: unseq(expected),
            actual: unseq(actual),
        });
    }
    Ok(TaskRow { tkey: row.get(0) })
}

#[async_trait]
impl TaskStore for PostgresStore {
    async fn create(&self, task: NewTask) -> StoreResult<()> {
        let w = encode(&task.write)?;
        let plan = serde_json::to_string(&task.plan).map_err(backend)?;
        let id = task.write.task_id.clone();
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    let stmt = prepared!(
                        c,
                        "INSERT INTO tasks (id, session_id, status, created_at, status_at, last_seq, summary)
                         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING RETURNING tkey"
                    );
                    let Some(row) = c
                        .query_opt(
                            &stmt,
                            &[&w.task_id, &w.session_id, &w.status, &w.created_at, &w.updated_at, &w.last_seq, &w.summary],
                        )
                        .await
                        .map_err(pg)?
                    else {
                        return Err(StoreError::AlreadyExists(id));
                    };
                    let tkey: i64 = row.get(0);
                    let stmt = prepared!(c, "INSERT INTO plans (task_id, plan) VALUES ($1, $2)");
                    c.execute(&stmt, &[&w.task_id, &plan]).await.map_err(pg)?;
                    append(c, tkey, &w).await?;
                    // A new task for whichever node has room.
                    leases::notify(c, Change::Tasks).await
                })
            })
            .await
    }

    async fn save(&self, write: TaskWrite) -> StoreResult<()> {
        let w = encode(&write)?;
        let task_id = write.task_id;
        let leases = Arc::clone(&self.leases);
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    // A node that lost the task's lease hears so, whatever
                    // else changed since it read the task.
                    // The fence, the write and the notification go out
                    // together (tokio-postgres pipelines what is awaited at
                    // once) and are judged in that order: what a failed
                    // check let through is undone with the write's savepoint.
                    let fence = leases::fenced(c, &leases, &task_id);
                    if w.seqs.is_empty() {
                        let (fenced, task) =
                            join(fence, task_at(c, &task_id, w.expected_seq)).await;
                        fenced?;
                        return task.map(|_| ());
                    }
                    let advance = async {
                        let stmt = prepared!(c, ADVANCE);
                        c.execute(
                            &stmt,
                            &[
                                &w.task_id,
                                &w.expected_seq,
                                &w.last_seq,
                                &w.summary,
                                &w.status,
                                &w.updated_at,
                                &w.seqs,
                                &w.types,
                                &w.bodies,
                            ],
                        )
                        .await
                        .map_err(pg)
                    };
                    // For event streams on every node.
                    let notify = leases::notify(c, Change::Events);
                    let (fenced, advanced, notified) = join3(fence, advance, notify).await;
                    fenced?;
                    if advanced? == 0 {
                        // Not where the write read it: say where it is.
                        task_at(c, &task_id, w.expected_seq).await?;
                        return Err(backend(format!(
                            "task {task_id} was at {} but took no write",
                            w.expected_seq
                        )));
                    }
                    notified?;
                    if let Some(plan) = &w.plan {
                        c.execute(
                            "UPDATE plans SET plan = $2 WHERE task_id = $1",
                            &[&w.task_id, plan],
                        )
                        .await
                        .map_err(pg)?;
                    }
                    append_rest(c, &w).await
                })
            })
            .await
    }

    async fn load_summary(&self, id: &TaskId) -> StoreResult<Option<TaskSummary>> {
        self.body(
            "SELECT summary FROM tasks WHERE id = $1",
            id.as_str(),
            "task summary",
        )
        .await
    }

    async fn load_plan(&self, id: &TaskId) -> StoreResult<Option<TaskDecomposition>> {
        self.body(
            "SELECT plan FROM plans WHERE task_id = $1",
            id.as_str(),
            "plan",
        )
        .await
    }

    async fn list(&self, filter: &TaskFilter) -> StoreResult<TaskPage> {
        if let Some(c) = &filter.cursor {
            TaskId::parse(c).map_err(|_| StoreError::BadCursor(c.clone()))?;
        }
        let limit = filter.limit.unwrap_or(50).clamp(1, MAX_PAGE);
        let mut q = Where::new("SELECT summary FROM tasks", Mark::Dollar);
        q.and_some("session_id =", filter.session_id.clone());
        q.and_some("status =", filter.status.map(|s| s.as_str().to_owned()));
        q.and_some("created_at >=", filter.created_from.as_ref().map(ts));
        q.and_some("created_at <", filter.created_to.as_ref().map(ts));
        q.and_some("id <", filter.cursor.clone());
        let sql = format!("{} ORDER BY id DESC LIMIT {}", q.sql, limit + 1);
        let rows = self.rows(&sql, &params(&q.args)).await?;
        let items: Vec<TaskSummary> = bodies(&rows, "task summary")?;
        let (items, next_cursor) = page(items, limit, |h| h.id.to_string());
        Ok(TaskPage { items, next_cursor })
    }

    async fn events(
        &self,
        id: &TaskId,
        after_seq: u64,
        limit: usize,
    ) -> StoreResult<Vec<HarnessEvent>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .rows(
                "SELECT e.body FROM events e JOIN tasks t ON t.tkey = e.tkey
                 WHERE t.id = $1 AND e.seq > $2 ORDER BY e.seq LIMIT $3",
                &[&id.as_str(), &seq(after_seq), &limit],
            )
            .await?;
        bodies(&rows, "event")
    }

    async fn all_events(&self, after: u64, limit: usize) -> StoreResult<Vec<(u64, HarnessEvent)>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .rows(
                "SELECT gseq, body FROM events WHERE gseq > $1 ORDER BY gseq LIMIT $2",
                &[&seq(after), &limit],
            )
            .await?;
        rows.iter()
            .map(|r| Ok((unseq(r.get(0)), json(r.get::<_, &str>(1), "event")?)))
            .collect()
    }

    async fn positions(&self) -> StoreResult<(u64, u64)> {
        let rows = self
            .rows(
                "SELECT (SELECT coalesce(max(gseq), 0) FROM events)::bigint,
                        (SELECT coalesce(max(seq), 0) FROM audit)::bigint",
                &[],
            )
            .await?;
        let row = rows.first().ok_or_else(|| backend("no row"))?;
        Ok((unseq(row.get(0)), unseq(row.get(1))))
    }

    async fn delete(&self, id: &TaskId, expected_seq: u64) -> StoreResult<()> {
        let task_id = id.clone();
        let expected = seq(expected_seq);
        let leases = Arc::clone(&self.leases);
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    leases::fenced(c, &leases, &task_id).await?;
                    let tkey = task_at(c, &task_id, expected).await?.tkey;
                    for table in ["tasks", "events"] {
                        c.execute(&format!("DELETE FROM {table} WHERE tkey = $1"), &[&tkey])
                            .await
                            .map_err(pg)?;
                    }
                    let id = task_id.as_str();
                    for table in [
                        "snapshots",
                        "controls",
                        "plans",
                        "approvals",
                        "journal",
                        "leases",
                    ] {
                        c.execute(&format!("DELETE FROM {table} WHERE task_id = $1"), &[&id])
                            .await
                            .map_err(pg)?;
                    }
                    // A task's agent sessions go with it (its contracts and evidence stay).
                    c.execute(
                        "DELETE FROM records WHERE task_id = $1 AND kind = $2",
                        &[&id, &RecordKind::Session.as_str()],
                    )
                    .await
                    .map_err(pg)?;
                    Ok(())
                })
            })
            .await
    }

    async fn put_snapshot(&self, snapshot: &Snapshot) -> StoreResult<()> {
        let body = serde_json::to_string(snapshot).map_err(backend)?;
        let (id, s, at) = (
            snapshot.id.to_string(),
            seq(snapshot.seq),
            ts(&snapshot.created_at),
        );
        let task_id = snapshot.task_id.clone();
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    let task = task_id.as_str();
                    let exists = c
                        .query_opt("SELECT 1 FROM tasks WHERE id = $1", &[&task])
                        .await
                        .map_err(pg)?;
                    if exists.is_none() {
                        return Err(StoreError::TaskNotFound(task_id.clone()));
                    }
                    c.execute(
                        "INSERT INTO snapshots (id, task_id, seq, created_at, body) VALUES ($1, $2, $3, $4, $5)",
                        &[&id, &task, &s, &at, &body],
                    )
                    .await
                    .map_err(pg)?;
                    Ok(())
                })
            })
            .await
    }

    async fn get_snapshot(&self, id: &SnapshotId) -> StoreResult<Option<Snapshot>> {
        self.body(
            "SELECT body FROM snapshots WHERE id = $1",
            id.as_str(),
            "snapshot",
        )
        .await
    }

    async fn list_snapshots(&self, task_id: &TaskId) -> StoreResult<Vec<SnapshotInfo>> {
        let rows = self
            .rows(
                "SELECT id, task_id, seq, created_at FROM snapshots WHERE task_id = $1 ORDER BY id",
                &[&task_id.as_str()],
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(SnapshotInfo {
                    id: SnapshotId::parse(r.get::<_, &str>(0))
                        .map_err(|e| corrupt("snapshot id", e))?,
                    task_id: TaskId::parse(r.get::<_, &str>(1))
                        .map_err(|e| corrupt("task id", e))?,
                    seq: unseq(r.get(2)),
                    created_at: chrono::DateTime::parse_from_rfc3339(r.get::<_, &str>(3))
                        .map_err(|e| corrupt("snapshot time", e))?
                        .to_utc(),
                })
            })
            .collect()
    }

    async fn request_control(&self, request: &ControlRequest) -> StoreResult<()> {
        let body = serde_json::to_string(request).map_err(backend)?;
        let task = request.task_id.to_string();
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    c.execute(
                        "INSERT INTO controls (task_id, body) VALUES ($1, $2)",
                        &[&task, &body],
                    )
                    .await
                    .map_err(pg)?;
                    // For the node that runs the task.
                    leases::notify(c, Change::Controls).await
                })
            })
            .await
    }

    async fn pending_controls(&self) -> StoreResult<Vec<ControlRequest>> {
        let rows = self
            .rows("SELECT body FROM controls ORDER BY id", &[])
            .await?;
        bodies(&rows, "control request")
    }

    async fn take_controls(&self, task_id: &TaskId) -> StoreResult<Vec<ControlRequest>> {
        let id = task_id.to_string();
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    let mut rows = c
                        .query(
                            "DELETE FROM controls WHERE task_id = $1 RETURNING id, body",
                            &[&id],
                        )
                        .await
                        .map_err(pg)?;
                    rows.sort_by_key(|r| r.get::<_, i64>(0));
                    rows.iter()
                        .map(|r| json(r.get::<_, &str>(1), "control request"))
                        .collect()
                })
            })
            .await
    }

    async fn metrics(&self) -> StoreResult<HarnessMetrics> {
        let client = self.client().await?;
        metrics::compute(&client).await
    }

    async fn probe(&self) -> StoreResult<StoreProbe> {
        // A row written to a real table and taken out again in the same
        // transaction: the commit goes through the server's log, and nobody
        // ever sees the row.
        let probed = self
            .writer
            .write(|c| {
                Box::pin(async move {
                    let row = c
                        .query_one(
                            "INSERT INTO controls (task_id, body) VALUES ('health-probe', '{}') RETURNING id",
                            &[],
                        )
                        .await
                        .map_err(pg)?;
                    c.execute("DELETE FROM controls WHERE id = $1", &[&row.get::<_, i64>(0)])
                        .await
                        .map_err(pg)?;
                    Ok(())
                })
            })
            .await;
        let last_write_error = self
            .writer
            .counters
            .last_error
            .lock()
            .ok()
            .and_then(|e| e.clone());
        probed.map_err(|e| match &last_write_error {
            Some(last) => backend(format!("{e} (last failed write: {last})")),
            None => e,
        })?;
        self.rows("SELECT COUNT(*) FROM tasks", &[]).await?;
        Ok(StoreProbe {
            location: self.location.clone(),
            free_bytes: None,
            last_write_error,
            // PostgreSQL keeps its own write-ahead log, and says when it is lost.
            lost_writes: Vec::new(),
        })
    }

    fn leases(&self) -> Option<&dyn rein_core::LeaseStore> {
        Some(self)
    }
}

#[async_trait]
impl ApprovalStore for PostgresStore {
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

/// A versioned document inserted at version 1 with its audit record; `false`
/// (and no audit record) if its id is taken. `insert` must do nothing on a
/// taken id.
async fn insert_document(
    c: &Object,
    insert: &str,
    values: &[&(dyn ToSql + Sync)],
    audit: &str,
) -> StoreResult<bool> {
    if c.execute(insert, values).await.map_err(pg)? == 0 {
        return Ok(false);
    }
    append_audit(c, audit).await?;
    Ok(true)
}

/// A versioned document written back with its audit record, if `update`
/// (which checks the version read) changes a row; else whether `exists`
/// finds it.
async fn update_document(
    c: &Object,
    update: &str,
    values: &[&(dyn ToSql + Sync)],
    exists: &str,
    key: &[&(dyn ToSql + Sync)],
    audit: &str,
) -> StoreResult<WriteBack> {
    if c.execute(update, values).await.map_err(pg)? == 0 {
        let found = c.query_opt(exists, key).await.map_err(pg)?.is_some();
        return Ok(if found {
            WriteBack::Moved
        } else {
            WriteBack::Missing
        });
    }
    append_audit(c, audit).await?;
    Ok(WriteBack::Written)
}

async fn append_audit(c: &Object, body: &str) -> StoreResult<()> {
    c.execute("INSERT INTO audit (body) VALUES ($1)", &[&body])
        .await
        .map_err(pg)?;
    Ok(())
}

/// A record from a row of `id, status, task_id, shared_state_id, contract_id,
/// created_at, body`.
fn record_of(kind: RecordKind, r: &tokio_postgres::Row) -> StoreResult<Record> {
    let created_at = chrono::DateTime::parse_from_rfc3339(r.get::<_, &str>(5))
        .map_err(|e| corrupt("record timestamp", e))?
        .to_utc();
    Ok(Record {
        kind,
        id: r.get(0),
        status: r.get(1),
        task_id: r.get(2),
        shared_state_id: r.get(3),
        contract_id: r.get(4),
        created_at,
        body: json(r.get::<_, &str>(6), kind.noun())?,
    })
}

#[async_trait]
impl DocumentStore for PostgresStore {
    async fn insert_shared_state(
        &self,
        state: &SharedHarnessState,
        audit: &AuditRecord,
    ) -> StoreResult<()> {
        let row = SharedRow::of(state)?;
        let audit = serde_json::to_string(audit).map_err(backend)?;
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    let inserted = insert_document(
                        c,
                        "INSERT INTO shared_states (id, session_id, parent_session_id, harness_contract_id, status, created_at, version, body)
                         VALUES ($1, $2, $3, $4, $5, $6, 1, $7) ON CONFLICT (id) DO NOTHING",
                        &[&row.id, &row.session_id, &row.parent_session_id, &row.harness_contract_id, &row.status, &row.created_at, &row.body],
                        &audit,
                    )
                    .await?;
                    if inserted {
                        Ok(())
                    } else {
                        Err(StoreError::SharedStateExists(row.id.clone()))
                    }
                })
            })
            .await
    }

    async fn load_shared_state(&self, id: &str) -> StoreResult<Option<(SharedHarnessState, u64)>> {
        let rows = self
            .rows(
                "SELECT body, version FROM shared_states WHERE id = $1",
                &[&id],
            )
            .await?;
        rows.first()
            .map(|r| Ok((json(r.get::<_, &str>(0), "shared state")?, unseq(r.get(1)))))
            .transpose()
    }

    async fn update_shared_state(
        &self,
        state: &SharedHarnessState,
        expected: u64,
        audit: &AuditRecord,
    ) -> StoreResult<()> {
        let row = SharedRow::of(state)?;
        let audit = serde_json::to_string(audit).map_err(backend)?;
        let expected_i = i64::try_from(expected).map_err(backend)?;
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    let written = update_document(
                        c,
                        "UPDATE shared_states SET session_id = $2, parent_session_id = $3, harness_contract_id = $4,
                         status = $5, version = version + 1, body = $6 WHERE id = $1 AND version = $7",
                        &[&row.id, &row.session_id, &row.parent_session_id, &row.harness_contract_id, &row.status, &row.body, &expected_i],
                        "SELECT 1 FROM shared_states WHERE id = $1",
                        &[&row.id],
                        &audit,
                    )
                    .await?;
                    match written {
                        WriteBack::Written => Ok(()),
                        WriteBack::Moved => Err(StoreError::SharedStateMoved { id: row.id.clone(), expected }),
                        WriteBack::Missing => Err(StoreError::SharedStateNotFound(row.id.clone())),
                    }
                })
            })
            .await
    }

    async fn list_shared_states(&self, filter: &SharedStateFilter) -> StoreResult<SharedStatePage> {
        let cursor = time_id_cursor(filter.cursor.as_deref())?;
        let limit = filter.limit.unwrap_or(50).clamp(1, MAX_PAGE);
        let mut q = Where::new("SELECT body FROM shared_states", Mark::Dollar);
        q.and_some("session_id =", filter.session_id.clone());
        q.and_some("parent_session_id =", filter.parent_session_id.clone());
        q.and_some("harness_contract_id =", filter.harness_contract_id.clone());
        q.and_some("status =", filter.status.map(|s| s.as_str().to_owned()));
        q.and_some("created_at >=", filter.created_from.as_ref().map(ts));
        q.and_some("created_at <", filter.created_to.as_ref().map(ts));
        q.and_some(
            "EXISTS (SELECT 1 FROM json_array_elements_text(
                 CASE WHEN json_typeof(body::json -> 'tags') = 'array' THEN body::json -> 'tags' ELSE '[]'::json END
             ) AS tag WHERE tag = ?)",
            filter.tag.clone(),
        );
        if let Some((t, id)) = cursor {
            q.and("(created_at < ? OR (created_at = ? AND id < ?))", t.clone());
            q.also(t);
            q.also(id);
        }
        let sql = format!(
            "{} ORDER BY created_at DESC, id DESC LIMIT {}",
            q.sql,
            limit + 1
        );
        let rows = self.rows(&sql, &params(&q.args)).await?;
        let items: Vec<SharedHarnessState> = bodies(&rows, "shared state")?;
        let (items, next_cursor) = page(items, limit, shared_state_cursor);
        Ok(SharedStatePage { items, next_cursor })
    }

    async fn audit_records(&self, after: u64, limit: usize) -> StoreResult<Vec<AuditRecord>> {
        let after = i64::try_from(after).map_err(backend)?;
        let limit = i64::try_from(limit.clamp(1, 10_000)).map_err(backend)?;
        let rows = self
            .rows(
                "SELECT seq, body FROM audit WHERE seq > $1 ORDER BY seq LIMIT $2",
                &[&after, &limit],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let mut record: AuditRecord = json(r.get::<_, &str>(1), "audit record")?;
                record.seq = unseq(r.get(0));
                Ok(record)
            })
            .collect()
    }

    async fn insert_record(&self, record: &Record, audit: &AuditRecord) -> StoreResult<()> {
        let row = RecordRow::of(record)?;
        let audit = serde_json::to_string(audit).map_err(backend)?;
        let (kind, id) = (record.kind, record.id.clone());
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    let inserted = insert_document(
                        c,
                        "INSERT INTO records (kind, id, status, task_id, shared_state_id, contract_id, created_at, version, body)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8) ON CONFLICT (kind, id) DO NOTHING",
                        &[&row.kind, &row.id, &row.status, &row.task_id, &row.shared_state_id, &row.contract_id, &row.created_at, &row.body],
                        &audit,
                    )
                    .await?;
                    if inserted {
                        Ok(())
                    } else {
                        Err(StoreError::RecordExists { kind, id })
                    }
                })
            })
            .await
    }

    async fn load_record(&self, kind: RecordKind, id: &str) -> StoreResult<Option<(Record, u64)>> {
        let rows = self
            .rows(
                "SELECT id, status, task_id, shared_state_id, contract_id, created_at, body, version
                 FROM records WHERE kind = $1 AND id = $2",
                &[&kind.as_str(), &id],
            )
            .await?;
        rows.first()
            .map(|r| Ok((record_of(kind, r)?, unseq(r.get(7)))))
            .transpose()
    }

    async fn update_record(
        &self,
        record: &Record,
        expected: u64,
        audit: &AuditRecord,
    ) -> StoreResult<()> {
        let row = RecordRow::of(record)?;
        let audit = serde_json::to_string(audit).map_err(backend)?;
        let expected_i = i64::try_from(expected).map_err(backend)?;
        let kind = record.kind;
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    let written = update_document(
                        c,
                        "UPDATE records SET status = $3, task_id = $4, shared_state_id = $5, contract_id = $6,
                         version = version + 1, body = $7 WHERE kind = $1 AND id = $2 AND version = $8",
                        &[&row.kind, &row.id, &row.status, &row.task_id, &row.shared_state_id, &row.contract_id, &row.body, &expected_i],
                        "SELECT 1 FROM records WHERE kind = $1 AND id = $2",
                        &[&row.kind, &row.id],
                        &audit,
                    )
                    .await?;
                    let id = row.id.clone();
                    match written {
                        WriteBack::Written => Ok(()),
                        WriteBack::Moved => Err(StoreError::RecordMoved { kind, id, expected }),
                        WriteBack::Missing => Err(StoreError::RecordNotFound { kind, id }),
                    }
                })
            })
            .await
    }

    async fn list_records(&self, filter: &RecordFilter) -> StoreResult<RecordPage> {
        let cursor = time_id_cursor(filter.cursor.as_deref())?;
        let limit = filter.limit.unwrap_or(50).clamp(1, MAX_PAGE);
        let mut q = Where::new(
            "SELECT id, status, task_id, shared_state_id, contract_id, created_at, body FROM records",
            Mark::Dollar,
        );
        q.and("kind =", filter.kind.as_str().to_owned());
        q.and_some("status =", filter.status.clone());
        q.and_some("task_id =", filter.task_id.clone());
        q.and_some("shared_state_id =", filter.shared_state_id.clone());
        q.and_some("contract_id =", filter.contract_id.clone());
        if let Some((t, id)) = cursor {
            q.and("(created_at < ? OR (created_at = ? AND id < ?))", t.clone());
            q.also(t);
            q.also(id);
        }
        let sql = format!(
            "{} ORDER BY created_at DESC, id DESC LIMIT {}",
            q.sql,
            limit + 1
        );
        let rows = self.rows(&sql, &params(&q.args)).await?;
        let items = rows
            .iter()
            .map(|r| record_of(filter.kind, r))
            .collect::<StoreResult<Vec<_>>>()?;
        let (items, next_cursor) = page(items, limit, record_cursor);
        Ok(RecordPage { items, next_cursor })
    }
}

#[async_trait]
impl JournalStore for PostgresStore {
    async fn append_journal(
        &self,
        task_id: &TaskId,
        step_id: &str,
        from: u64,
        entries: &[serde_json::Value],
    ) -> StoreResult<()> {
        let bodies: Vec<String> = entries
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<_, _>>()
            .map_err(backend)?;
        let metered: Vec<Option<rein_protocol::TurnUsage>> =
            entries.iter().map(rein_core::store::entry_usage).collect();
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
                            let u = &used.usage;
                            c.execute(
                                "INSERT INTO model_usage (task_id, journal, seq, step_id, session_id, at,
                                   provider, model, served_model, input, cached, output, reasoning, estimated)
                                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
                                &[
                                    &task.as_str(),
                                    &step,
                                    &seq(at),
                                    &used.step,
                                    &used.session,
                                    &now,
                                    &used.provider,
                                    &used.model,
                                    &used.served_model,
                                    &seq(u.input_tokens),
                                    &seq(u.cached_input_tokens),
                                    &seq(u.output_tokens),
                                    &u.reasoning_tokens.map(seq),
                                    &u.estimated,
                                ],
                            )
                            .await
                            .map_err(pg)?;
                            c.execute(
                                "INSERT INTO model_usage_daily (day, task_id, session_id, provider, model,
                                   calls, input, cached, output, reasoning, estimated)
                                 VALUES (substr($1, 1, 10), $2, $3, $4, $5, 1, $6, $7, $8, $9, $10)
                                 ON CONFLICT (day, task_id, session_id, provider, model) DO UPDATE SET
                                   calls = model_usage_daily.calls + 1,
                                   input = model_usage_daily.input + excluded.input,
                                   cached = model_usage_daily.cached + excluded.cached,
                                   output = model_usage_daily.output + excluded.output,
                                   reasoning = CASE WHEN excluded.reasoning IS NULL THEN model_usage_daily.reasoning
                                               ELSE COALESCE(model_usage_daily.reasoning, 0) + excluded.reasoning END,
                                   estimated = model_usage_daily.estimated OR excluded.estimated",
                                &[
                                    &now,
                                    &task.as_str(),
                                    &used.session.as_deref().unwrap_or_default(),
                                    &used.provider,
                                    &used.model,
                                    &seq(u.input_tokens),
                                    &seq(u.cached_input_tokens),
                                    &seq(u.output_tokens),
                                    &u.reasoning_tokens.map(seq),
                                    &u.estimated,
                                ],
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
