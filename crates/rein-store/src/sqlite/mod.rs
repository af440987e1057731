//! The SQLite store: one file, WAL mode, `synchronous=FULL` (a committed write
//! survives power loss), all writes through the group-committing [`Writer`], reads
//! from a small pool of read connections.
//!
//! A write appends a task's events, the last of them carrying the task's summary
//! as of that write (only what moved, where the rest is the task row's); the
//! task row is rewritten only when the status changes. A
//! step's commit thus touches the end of the log and of its per-task index: a
//! few pages, whatever the size of the task, so a long task does not write more
//! per step than a short one.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rein_core::store::{
    ApprovalFilter, AuditRecord, ControlRequest, LostWrites, NewTask, Record, RecordFilter,
    RecordKind, RecordPage, SharedStateFilter, SharedStatePage, SnapshotInfo, TaskFilter, TaskPage,
    TaskWrite, UsageFilter, UsageRow,
};
use rein_core::{ApprovalStore, DocumentStore, JournalStore, StoreError, StoreResult, TaskStore};
use rein_protocol::{
    ApprovalId, ApprovalRequest, HarnessEvent, HarnessMetrics, LedgerEntry, SharedHarnessState,
    Snapshot, SnapshotId, TaskDecomposition, TaskId, TaskSummary,
};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use crate::head::{self, Head, HeadFile};
use crate::query::{Mark, Where};
use crate::rows;
pub use crate::rows::MAX_PAGE;
pub(crate) use crate::rows::backend;

mod approvals;
mod documents;
mod event_body;
mod journal;
mod tasks;

use crate::rows::{
    RecordRow, SharedRow, WriteBack, page, record_cursor, seq, shared_state_cursor, time_id_cursor,
    ts,
};
use crate::schema::{self, MigrationError};
use crate::writer::{Writer, WriterOptions};
use approvals::*;

const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct SqliteStore {
    path: PathBuf,
    writer: Writer,
    readers: Arc<Mutex<Vec<Connection>>>,
    /// Reads on the blocking pool at once: many callers at a time (a thousand
    /// event streams woken together) queue here instead of each taking a
    /// thread and a connection of its own.
    read_slots: Arc<tokio::sync::Semaphore>,
    /// What opening it migrated.
    migrated: schema::Migrated,
    /// Losses of committed writes nobody had acknowledged when it was opened.
    unacknowledged: Vec<LostWrites>,
}

/// Most reads running at once, and most read connections kept open.
const READERS: usize = 8;

/// How many transactions carried how many writes since the store was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreStats {
    pub commits: u64,
    pub writes: u64,
    /// Nanoseconds the writer spent inside transactions, the fsync included.
    pub busy_ns: u64,
}

fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

/// Opens a connection, waiting out other processes' locks. SQLite does not call the
/// busy handler for every lock taken while a connection is set up (the WAL index
/// can be busy while another process opens or checkpoints the file), so a busy
/// open is retried until [`BUSY_TIMEOUT`].
fn open_connection(path: &Path, flags: OpenFlags) -> rusqlite::Result<Connection> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        match try_open_connection(path, flags) {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            other => return other,
        }
    }
}

fn try_open_connection(path: &Path, flags: OpenFlags) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(conn)
}

/// The first bytes of every SQLite database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// An I/O error said plainly: "read-only" for a read-only file system or a
/// directory rein may not write.
fn io_reason(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) if code == nix::libc::EROFS => "the file system is read-only".to_owned(),
        Some(code) if code == nix::libc::EACCES || code == nix::libc::EPERM => {
            format!("permission denied ({e})")
        }
        _ => e.to_string(),
    }
}

/// Whether `dir` can be written (a read-only mount, or a directory rein may
/// not write).
fn read_only(dir: &Path) -> bool {
    nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_err()
        || nix::sys::statvfs::statvfs(dir)
            .is_ok_and(|v| v.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
}

/// Why a store could not be opened, read-only data directories named as such.
fn open_error(path: &Path, e: &rusqlite::Error) -> StoreError {
    let dir = store_dir(path);
    if read_only(dir) {
        return read_only_error(path, dir);
    }
    backend(format!("cannot open store {}: {e}", path.display()))
}

/// The directory a store file is in.
fn store_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

fn read_only_error(path: &Path, dir: &Path) -> StoreError {
    backend(format!(
        "cannot open store {}: its directory {} is read-only (rein writes its store, its write-ahead log and task workspaces there); make it writable or choose another --data-dir",
        path.display(),
        dir.display()
    ))
}

/// An existing store file that cannot be one: empty, or not SQLite.
fn check_file(path: &Path) -> StoreResult<()> {
    use std::io::Read;
    let mut head = Vec::with_capacity(16);
    std::fs::File::open(path)
        .and_then(|f| f.take(16).read_to_end(&mut head))
        .map_err(|e| {
            backend(format!(
                "cannot read store {}: {}",
                path.display(),
                io_reason(&e)
            ))
        })?;
    if head.is_empty() {
        return Err(backend(format!(
            "store {} is empty (0 bytes): it is not a rein store, and rein will not start a new one over it; restore it from a backup, or move it away to start afresh",
            path.display()
        )));
    }
    if head.as_slice() != SQLITE_HEADER.as_slice() {
        return Err(backend(format!(
            "{} is not a rein store: it is not an SQLite database; give rein its own --data-dir",
            path.display()
        )));
    }
    Ok(())
}

fn migrate_store(conn: &mut Connection, path: &Path) -> StoreResult<schema::Migrated> {
    schema::migrate(conn).map_err(|e| match e {
        MigrationError::TooNew { found, supported } => backend(format!(
            "store {} has schema version {found}, newer than this rein supports ({supported}); upgrade rein",
            path.display()
        )),
        MigrationError::Foreign { tables } => backend(format!(
            "{} is not a rein store: it is an SQLite database of something else (tables {}); give rein its own --data-dir",
            path.display(),
            tables.join(", ")
        )),
        MigrationError::Sqlite(e) => backend(format!("cannot migrate store {}: {e}", path.display())),
    })
}

/// Makes a new store at `path`: whole, under another name, then linked into
/// place (a link does not replace a store another process made meanwhile).
/// What it migrated, if it was the one that made it.
fn create(path: &Path) -> StoreResult<Option<schema::Migrated>> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".new-{}-{nanos}", std::process::id()));
    let fresh = PathBuf::from(name);
    let made = (|| {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = open_connection(&fresh, flags).map_err(|e| open_error(path, &e))?;
        let migrated = migrate_store(&mut conn, path)?;
        conn.close().map_err(|(_, e)| open_error(path, &e))?;
        match std::fs::hard_link(&fresh, path) {
            Ok(()) => Ok(Some(migrated)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(backend(format!(
                "cannot create store {}: {}",
                path.display(),
                io_reason(&e)
            ))),
        }
    })();
    for suffix in ["", "-wal", "-shm"] {
        let mut name = fresh.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(name));
    }
    made
}

/// Compares the head recorded beside the store with the one inside it, and
/// records a loss when the recorded one is ahead: committed writes are gone.
/// The recorded head is read first: another process's commit may land
/// between the two reads, and then only the store's head has moved on. A
/// store just made has nothing to lose: whatever is recorded is of a store
/// that is no longer there, and is written over.
fn check_head(conn: &Connection, file: &HeadFile, created: bool) -> StoreResult<()> {
    let recorded = file.recorded();
    let held = Head::read(conn).map_err(backend)?;
    match recorded {
        Some(recorded) if !created && recorded.commits > held.commits => {
            let now = rows::ts(&chrono::Utc::now());
            let seq = recorded.ledger.as_ref().map(|h| rows::seq(h.seq));
            let hash = recorded.ledger.as_ref().map(|h| h.hash.clone());
            let counted = (|| {
                conn.execute_batch("BEGIN IMMEDIATE")?;
                let before = Head::before(conn)?;
                conn.execute(
                    "INSERT INTO lost_writes (detected_at, recorded, found, ledger_seq, ledger_hash)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![
                        now,
                        rows::seq(recorded.commits),
                        rows::seq(held.commits),
                        seq,
                        hash
                    ],
                )?;
                let (counted, _) = Head::count_commit(conn, before)?;
                conn.execute_batch("COMMIT")?;
                Ok(counted)
            })()
            .map_err(|e: rusqlite::Error| {
                let _ = conn.execute_batch("ROLLBACK");
                backend(format!("cannot record the lost writes: {e}"))
            })?;
            tracing::error!(
                recorded = recorded.commits,
                found = held.commits,
                "the store lost committed writes: its write-ahead log was deleted or an older copy restored"
            );
            file.record(&counted);
        }
        Some(recorded) if recorded == held => {}
        _ => file.record(&held),
    }
    Ok(())
}

/// A `lost_writes` row as stored.
struct LostRow {
    detected_at: String,
    recorded: i64,
    found: i64,
    ledger_seq: Option<i64>,
    ledger_hash: Option<String>,
    acknowledged_at: Option<String>,
}

/// The losses of committed writes the store has recorded.
fn lost_writes(conn: &Connection) -> StoreResult<Vec<LostWrites>> {
    let parse = |t: String| {
        chrono::DateTime::parse_from_rfc3339(&t)
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(|e| StoreError::Corrupt(format!("a lost-writes time `{t}`: {e}")))
    };
    let rows: Vec<LostRow> = conn
        .prepare_cached(
            "SELECT detected_at, recorded, found, ledger_seq, ledger_hash, acknowledged_at
             FROM lost_writes ORDER BY id",
        )
        .and_then(|mut stmt| {
            stmt.query_map([], |r| {
                Ok(LostRow {
                    detected_at: r.get(0)?,
                    recorded: r.get(1)?,
                    found: r.get(2)?,
                    ledger_seq: r.get(3)?,
                    ledger_hash: r.get(4)?,
                    acknowledged_at: r.get(5)?,
                })
            })?
            .collect()
        })
        .map_err(backend)?;
    rows.into_iter()
        .map(|row| {
            Ok(LostWrites {
                detected_at: parse(row.detected_at)?,
                recorded: u64::try_from(row.recorded).unwrap_or(0),
                found: u64::try_from(row.found).unwrap_or(0),
                ledger_head: row.ledger_seq.zip(row.ledger_hash).map(|(seq, hash)| {
                    rein_protocol::LedgerHead {
                        seq: u64::try_from(seq).unwrap_or(0),
                        hash,
                    }
                }),
                acknowledged_at: row.acknowledged_at.map(parse).transpose()?,
            })
        })
        .collect()
}

impl SqliteStore {
    /// Opens the store file at `path`, migrating its schema. Only a missing
    /// file becomes a new store (made whole under another name, then linked
    /// into place, so a crash while it is made leaves no half store); an empty
    /// file, a file that is not SQLite, or an SQLite file of something else is
    /// refused, saying what it is.
    pub fn open(path: &Path) -> StoreResult<SqliteStore> {
        SqliteStore::open_with(path, WriterOptions::default())
    }

    /// [`SqliteStore::open`], its writes waited for as `options` say.
    pub fn open_with(path: &Path, options: WriterOptions) -> StoreResult<SqliteStore> {
        let dir = store_dir(path);
        std::fs::create_dir_all(dir).map_err(|e| {
            backend(format!(
                "cannot create data directory {}: {}",
                dir.display(),
                io_reason(&e)
            ))
        })?;
        // The store is written from its first moment (migrations, the
        // write-ahead log): a read-only directory is said to be one up front,
        // whatever SQLite would make of it.
        if read_only(dir) {
            return Err(read_only_error(path, dir));
        }
        let created = match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(path)?,
            Err(e) => {
                return Err(backend(format!(
                    "cannot read store {}: {}",
                    path.display(),
                    io_reason(&e)
                )));
            }
            Ok(_) => {
                check_file(path)?;
                None
            }
        };
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = open_connection(path, flags).map_err(|e| open_error(path, &e))?;
        let migrated = migrate_store(&mut conn, path)?;
        let migrated = match created {
            Some(made) => schema::Migrated {
                from: made.from,
                to: migrated.to,
            },
            None => migrated,
        };
        let head = HeadFile::open(path).map_err(|e| {
            backend(format!(
                "cannot open {} (the store's head, recorded beside it): {}",
                head::path_of(path).display(),
                io_reason(&e)
            ))
        })?;
        check_head(&conn, &head, created.is_some())?;
        let mut unacknowledged = lost_writes(&conn)?;
        unacknowledged.retain(|l| l.acknowledged_at.is_none());
        let writer = Writer::start_recording(conn, options, Some(head))
            .map_err(|e| backend(format!("cannot start writer thread: {e}")))?;
        Ok(SqliteStore {
            path: path.to_owned(),
            writer,
            readers: Arc::new(Mutex::new(Vec::new())),
            read_slots: Arc::new(tokio::sync::Semaphore::new(READERS)),
            migrated,
            unacknowledged,
        })
    }

    /// Losses of committed writes nobody had acknowledged when the store was
    /// opened (the one found opening it included): for the opener to say.
    pub fn unacknowledged_lost_writes(&self) -> &[LostWrites] {
        &self.unacknowledged
    }

    /// What opening this store migrated (a new store: every migration).
    pub fn migrated(&self) -> schema::Migrated {
        self.migrated
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn stats(&self) -> StoreStats {
        StoreStats {
            commits: self.writer.counters.commits.load(Ordering::Relaxed),
            writes: self.writer.counters.writes.load(Ordering::Relaxed),
            busy_ns: self.writer.counters.busy_ns.load(Ordering::Relaxed),
        }
    }

    /// Runs a read on a pooled read connection, off the async threads.
    async fn read<T, F>(&self, work: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let readers = Arc::clone(&self.readers);
        let path = self.path.clone();
        let slot = Arc::clone(&self.read_slots)
            .acquire_owned()
            .await
            .map_err(backend)?;
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            with_reader(&readers, &path, work)
        })
        .await
        .map_err(backend)?
    }
}

impl SqliteStore {
    /// Runs a small point read on a pooled connection right here, without a hop
    /// to the blocking pool: for single indexed rows, which WAL readers get without
    /// waiting on writers.
    fn read_inline<T>(&self, work: impl FnOnce(&Connection) -> StoreResult<T>) -> StoreResult<T> {
        with_reader(&self.readers, &self.path, work)
    }
}

/// Runs `work` on a pooled read connection (or a new one), and keeps the
/// connection for the next read if the pool has room.
fn with_reader<T>(
    readers: &Mutex<Vec<Connection>>,
    path: &Path,
    work: impl FnOnce(&Connection) -> StoreResult<T>,
) -> StoreResult<T> {
    let pooled = readers.lock().map_err(backend)?.pop();
    let conn = match pooled {
        Some(c) => c,
        None => open_connection(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(backend)?,
    };
    let result = work(&conn);
    if let Ok(mut pool) = readers.lock()
        && pool.len() < READERS
    {
        pool.push(conn);
    }
    result
}

impl Where {
    /// Runs it with `tail` (ordering, limit) appended; each row one JSON body.
    fn run<T: serde::de::DeserializeOwned>(
        &self,
        conn: &Connection,
        tail: &str,
        what: &str,
    ) -> StoreResult<Vec<T>> {
        query_json(
            conn,
            &format!("{}{tail}", self.sql),
            rusqlite::params_from_iter(self.args.iter()),
            what,
        )
    }
}

/// Runs a query whose single column is a JSON body, decoding each row as a `T`
/// (`what` names it in errors).
fn query_json<T: serde::de::DeserializeOwned>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    what: &str,
) -> StoreResult<Vec<T>> {
    let mut stmt = conn.prepare_cached(sql).map_err(backend)?;
    let rows = stmt
        .query_map(params, |r| r.get::<_, String>(0))
        .map_err(backend)?;
    rows.map(|body| {
        let body = body.map_err(backend)?;
        serde_json::from_str(&body).map_err(|e| corrupt(what, e))
    })
    .collect()
}
