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

mod approvals;
mod documents;
mod journal;
mod tasks;

use approvals::*;
