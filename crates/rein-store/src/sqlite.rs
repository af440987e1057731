//! The SQLite store: one file, WAL mode, `synchronous=FULL` (a committed write
//! survives power loss), all writes through the group-committing [`Writer`], reads
//! from a small pool of read connections.
//!
//! A write appends a task's events, the last of them carrying the task's summary
//! as of that write; the task row is rewritten only when the status changes. A
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
use crate::rows::{
    RecordRow, SharedRow, WriteBack, page, record_cursor, seq, shared_state_cursor, time_id_cursor,
    ts,
};
use crate::schema::{self, MigrationError};
use crate::writer::{Writer, WriterOptions};

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
                let counted = Head::count_commit(conn, before)?;
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

/// A write encoded on the caller's thread, so the writer thread only runs SQL.
struct Encoded {
    task_id: String,
    expected_seq: i64,
    status: &'static str,
    session_id: String,
    created_at: String,
    updated_at: String,
    summary: String,
    events: Vec<(i64, &'static str, String)>,
    /// New approval requests: (id, status, created_at, body).
    approvals: Vec<(String, &'static str, String, String)>,
    /// Ledger entries to seal after the ledger's last.
    ledger: Vec<LedgerEntry>,
    /// A plan replacing the task's.
    plan: Option<String>,
}

fn encode(write: &TaskWrite) -> StoreResult<Encoded> {
    let events = write
        .events
        .iter()
        .map(|e| {
            serde_json::to_string(e)
                .map(|body| (seq(e.seq), e.event_type().as_str(), body))
                .map_err(backend)
        })
        .collect::<StoreResult<Vec<_>>>()?;
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
        approvals,
        ledger: write.ledger.clone(),
        plan: write
            .plan
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(backend)?,
        task_id: write.task_id.to_string(),
        expected_seq: seq(write.expected_seq),
        status: write.summary.status.as_str(),
        session_id: write.summary.session_id.clone(),
        created_at: ts(&write.summary.created_at),
        updated_at: ts(&write.summary.updated_at),
        summary: serde_json::to_string(&write.summary).map_err(backend)?,
        events,
    })
}

/// Rows per multi-row INSERT (five parameters each, far below SQLite's limit).
const EVENTS_PER_INSERT: usize = 64;

/// Appends a write's events to the log of the task whose key is `tkey`; the last
/// of them carries the write's summary.
fn append(conn: &Connection, tkey: i64, w: &Encoded) -> StoreResult<()> {
    let last = w.events.len().saturating_sub(1);
    let (none, summary): (Option<&str>, Option<&str>) = (None, Some(&w.summary));
    for (n, chunk) in w.events.chunks(EVENTS_PER_INSERT).enumerate() {
        let mut sql = String::from("INSERT INTO events (tkey, seq, type, body, summary) VALUES ");
        for i in 0..chunk.len() {
            let p = i * 5;
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!(
                "(?{}, ?{}, ?{}, ?{}, ?{})",
                p + 1,
                p + 2,
                p + 3,
                p + 4,
                p + 5
            ));
        }
        let mut insert = conn.prepare_cached(&sql).map_err(backend)?;
        let mut params: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(chunk.len() * 5);
        for (i, (seq, kind, body)) in chunk.iter().enumerate() {
            let carried = if n * EVENTS_PER_INSERT + i == last {
                &summary
            } else {
                &none
            };
            params.extend([&tkey as &dyn rusqlite::ToSql, seq, kind, body, carried]);
        }
        insert.execute(params.as_slice()).map_err(backend)?;
    }
    for (id, status, created_at, body) in &w.approvals {
        conn.prepare_cached(
            "INSERT INTO approvals (id, task_id, status, created_at, body) VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .and_then(|mut stmt| stmt.execute(params![id, w.task_id, status, created_at, body]))
        .map_err(backend)?;
    }
    for entry in &w.ledger {
        append_ledger(conn, entry.clone())?;
    }
    Ok(())
}

/// Seals `entry` after the ledger's last entry and appends it, inside the
/// caller's transaction (so the chain has no gaps, whoever writes).
fn append_ledger(conn: &Connection, entry: LedgerEntry) -> StoreResult<LedgerEntry> {
    let mut last: Vec<LedgerEntry> = query_json(
        conn,
        "SELECT body FROM ledger ORDER BY seq DESC LIMIT 1",
        [],
        "ledger entry",
    )?;
    let sealed = entry.sealed_after(last.pop().as_ref());
    let sealed_body = serde_json::to_string(&sealed).map_err(backend)?;
    conn.execute(
        "INSERT INTO ledger (seq, id, body) VALUES (?1, ?2, ?3)",
        params![seq(sealed.seq), sealed.id.as_str(), sealed_body],
    )
    .map_err(backend)?;
    conn.prepare_cached("UPDATE store_head SET ledger_seq = ?1, ledger_hash = ?2 WHERE id = 0")
        .and_then(|mut stmt| stmt.execute(params![seq(sealed.seq), sealed.hash.as_str()]))
        .map_err(backend)?;
    Ok(sealed)
}

/// A task's row as a write finds it: its key and its status.
struct TaskRow {
    tkey: i64,
    status: String,
}

/// The row of a task whose log is at `expected` (its largest event `seq`); a
/// write that read the task at another position is refused.
fn task_at(conn: &Connection, task_id: &TaskId, expected: i64) -> StoreResult<TaskRow> {
    let found = conn
        .prepare_cached(
            "SELECT tkey, status, (SELECT max(seq) FROM events WHERE events.tkey = tasks.tkey)
             FROM tasks WHERE id = ?1",
        )
        .and_then(|mut stmt| {
            stmt.query_row([task_id.as_str()], |r| {
                let row = TaskRow {
                    tkey: r.get(0)?,
                    status: r.get(1)?,
                };
                Ok((row, r.get::<_, Option<i64>>(2)?))
            })
            .optional()
        })
        .map_err(backend)?;
    let Some((row, actual)) = found else {
        return Err(StoreError::TaskNotFound(task_id.clone()));
    };
    let actual = actual.unwrap_or(0);
    if actual != expected {
        return Err(StoreError::Conflict {
            task_id: task_id.clone(),
            expected: u64::try_from(expected).unwrap_or(0),
            actual: u64::try_from(actual).unwrap_or(0),
        });
    }
    Ok(row)
}

/// A task's summary as of its last write: the one its last write's last event
/// carries, or the task row's for a task none of whose events carries one.
macro_rules! current_summary {
    () => {
        "COALESCE((SELECT e.summary FROM events e
                   WHERE e.tkey = tasks.tkey AND e.summary IS NOT NULL
                   ORDER BY e.seq DESC LIMIT 1), tasks.summary)"
    };
}

fn task_id_of(id: &str) -> StoreResult<TaskId> {
    TaskId::parse(id).map_err(|e| corrupt("task id", e))
}

fn load_summary(conn: &Connection, id: &str) -> StoreResult<Option<TaskSummary>> {
    let body: Option<String> = conn
        .prepare_cached(concat!(
            "SELECT ",
            current_summary!(),
            " FROM tasks WHERE id = ?1"
        ))
        .and_then(|mut stmt| stmt.query_row([id], |r| r.get(0)).optional())
        .map_err(backend)?;
    body.map(|b| serde_json::from_str(&b).map_err(|e| corrupt("task summary", e)))
        .transpose()
}

#[async_trait]
impl TaskStore for SqliteStore {
    async fn create(&self, task: NewTask) -> StoreResult<()> {
        let w = encode(&task.write)?;
        let plan = serde_json::to_string(&task.plan).map_err(backend)?;
        let id = task.write.task_id.clone();
        self.writer
            .write(move |conn| {
                let tkey: Option<i64> = conn
                    .query_row(
                        "INSERT INTO tasks (id, session_id, status, created_at, status_at, summary)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (id) DO NOTHING RETURNING tkey",
                        params![w.task_id, w.session_id, w.status, w.created_at, w.updated_at, w.summary],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(backend)?;
                let Some(tkey) = tkey else {
                    return Err(StoreError::AlreadyExists(id.clone()));
                };
                conn.execute("INSERT INTO plans (task_id, plan) VALUES (?1, ?2)", params![w.task_id, plan])
                    .map_err(backend)?;
                append(conn, tkey, &w)
            })
            .await
    }

    async fn save(&self, write: TaskWrite) -> StoreResult<()> {
        let w = encode(&write)?;
        let task_id = write.task_id;
        self.writer
            .write(move |conn| {
                // The log moves on only from the position the writer read.
                let task = task_at(conn, &task_id, w.expected_seq)?;
                if w.events.is_empty() {
                    // The summary and the status follow from the log: unchanged.
                    return Ok(());
                }
                // Most writes keep the status, and then the task row stays as it
                // is: the summary travels with the events.
                if task.status != w.status {
                    conn.prepare_cached(
                        "UPDATE tasks SET status = ?2, status_at = ?3, summary = ?4 WHERE tkey = ?1",
                    )
                    .and_then(|mut stmt| {
                        stmt.execute(params![task.tkey, w.status, w.updated_at, w.summary])
                    })
                    .map_err(backend)?;
                }
                if let Some(plan) = &w.plan {
                    conn.execute(
                        "UPDATE plans SET plan = ?2 WHERE task_id = ?1",
                        params![w.task_id, plan],
                    )
                    .map_err(backend)?;
                }
                append(conn, task.tkey, &w)
            })
            .await
    }

    async fn load_summary(&self, id: &TaskId) -> StoreResult<Option<TaskSummary>> {
        // One indexed row from the page cache: cheaper inline than a thread hop.
        self.read_inline(|conn| load_summary(conn, id.as_str()))
    }

    async fn load_plan(&self, id: &TaskId) -> StoreResult<Option<TaskDecomposition>> {
        let id = id.to_string();
        self.read(move |conn| {
            let body: Option<String> = conn
                .query_row("SELECT plan FROM plans WHERE task_id = ?1", [&id], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(backend)?;
            body.map(|b| serde_json::from_str(&b).map_err(|e| corrupt("plan", e)))
                .transpose()
        })
        .await
    }

    async fn list(&self, filter: &TaskFilter) -> StoreResult<TaskPage> {
        if let Some(c) = &filter.cursor {
            TaskId::parse(c).map_err(|_| StoreError::BadCursor(c.clone()))?;
        }
        let filter = filter.clone();
        self.read(move |conn| {
            let limit = filter.limit.unwrap_or(50).clamp(1, MAX_PAGE);
            let mut q = Where::new(
                concat!("SELECT ", current_summary!(), " FROM tasks"),
                Mark::Question,
            );
            q.and_some("session_id =", filter.session_id.clone());
            q.and_some("status =", filter.status.map(|s| s.as_str().to_owned()));
            q.and_some("created_at >=", filter.created_from.as_ref().map(ts));
            q.and_some("created_at <", filter.created_to.as_ref().map(ts));
            q.and_some("id <", filter.cursor.clone());
            let items: Vec<TaskSummary> = q.run(
                conn,
                &format!(" ORDER BY id DESC LIMIT {}", limit + 1),
                "task summary",
            )?;
            let (items, next_cursor) = page(items, limit, |h| h.id.to_string());
            Ok(TaskPage { items, next_cursor })
        })
        .await
    }

    async fn events(
        &self,
        id: &TaskId,
        after_seq: u64,
        limit: usize,
    ) -> StoreResult<Vec<HarnessEvent>> {
        let id = id.to_string();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |conn| {
            query_json(
                conn,
                "SELECT body FROM events
                 WHERE tkey = (SELECT tkey FROM tasks WHERE id = ?1) AND seq > ?2
                 ORDER BY seq LIMIT ?3",
                params![id, seq(after_seq), limit],
                "event",
            )
        })
        .await
    }

    async fn all_events(&self, after: u64, limit: usize) -> StoreResult<Vec<(u64, HarnessEvent)>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT gseq, body FROM events WHERE gseq > ?1 ORDER BY gseq LIMIT ?2",
                )
                .map_err(backend)?;
            let rows = stmt
                .query_map(params![seq(after), limit], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
                })
                .map_err(backend)?;
            rows.map(|row| {
                let (gseq, body) = row.map_err(backend)?;
                let event = serde_json::from_str(&body).map_err(|e| corrupt("event", e))?;
                Ok((u64::try_from(gseq).unwrap_or(0), event))
            })
            .collect()
        })
        .await
    }

    async fn positions(&self) -> StoreResult<(u64, u64)> {
        self.read_inline(|conn| {
            conn.prepare_cached(
                "SELECT (SELECT coalesce(max(gseq), 0) FROM events), (SELECT coalesce(max(seq), 0) FROM audit)",
            )
            .and_then(|mut s| s.query_row([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))))
            .map(|(e, a)| (u64::try_from(e).unwrap_or(0), u64::try_from(a).unwrap_or(0)))
            .map_err(backend)
        })
    }

    async fn delete(&self, id: &TaskId, expected_seq: u64) -> StoreResult<()> {
        let task_id = id.clone();
        let expected = seq(expected_seq);
        self.writer
            .write(move |conn| {
                let id = task_id.as_str();
                let tkey = task_at(conn, &task_id, expected)?.tkey;
                for table in ["tasks", "events"] {
                    conn.execute(&format!("DELETE FROM {table} WHERE tkey = ?1"), [tkey])
                        .map_err(backend)?;
                }
                for table in ["snapshots", "controls", "plans", "approvals", "journal"] {
                    conn.execute(&format!("DELETE FROM {table} WHERE task_id = ?1"), [id])
                        .map_err(backend)?;
                }
                // A task's agent sessions go with it (its contracts and evidence stay).
                conn.execute(
                    "DELETE FROM records WHERE task_id = ?1 AND kind = ?2",
                    params![id, RecordKind::Session.as_str()],
                )
                .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn put_snapshot(&self, snapshot: &Snapshot) -> StoreResult<()> {
        let body = serde_json::to_string(snapshot).map_err(backend)?;
        let (id, task, s, at) = (
            snapshot.id.to_string(),
            snapshot.task_id.to_string(),
            seq(snapshot.seq),
            ts(&snapshot.created_at),
        );
        let task_id = snapshot.task_id.clone();
        self.writer
            .write(move |conn| {
                let exists: Option<i64> = conn
                    .query_row("SELECT 1 FROM tasks WHERE id = ?1", [&task], |r| r.get(0))
                    .optional()
                    .map_err(backend)?;
                if exists.is_none() {
                    return Err(StoreError::TaskNotFound(task_id.clone()));
                }
                conn.execute(
                    "INSERT INTO snapshots (id, task_id, seq, created_at, body) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![id, task, s, at, body],
                )
                .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn get_snapshot(&self, id: &SnapshotId) -> StoreResult<Option<Snapshot>> {
        let id = id.to_string();
        self.read(move |conn| {
            let body: Option<String> = conn
                .query_row("SELECT body FROM snapshots WHERE id = ?1", [&id], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(backend)?;
            body.map(|b| serde_json::from_str(&b).map_err(|e| corrupt("snapshot", e)))
                .transpose()
        })
        .await
    }

    async fn list_snapshots(&self, task_id: &TaskId) -> StoreResult<Vec<SnapshotInfo>> {
        let id = task_id.to_string();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare("SELECT id, task_id, seq, created_at FROM snapshots WHERE task_id = ?1 ORDER BY id")
                .map_err(backend)?;
            let rows = stmt
                .query_map([&id], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?, r.get::<_, String>(3)?))
                })
                .map_err(backend)?;
            rows.map(|row| {
                let (id, task, s, at) = row.map_err(backend)?;
                Ok(SnapshotInfo {
                    id: SnapshotId::parse(&id).map_err(|e| corrupt("snapshot id", e))?,
                    task_id: task_id_of(&task)?,
                    seq: u64::try_from(s).unwrap_or(0),
                    created_at: chrono::DateTime::parse_from_rfc3339(&at)
                        .map_err(|e| corrupt("snapshot time", e))?
                        .to_utc(),
                })
            })
            .collect()
        })
        .await
    }

    async fn request_control(&self, request: &ControlRequest) -> StoreResult<()> {
        let body = serde_json::to_string(request).map_err(backend)?;
        let task = request.task_id.to_string();
        self.writer
            .write(move |conn| {
                conn.execute(
                    "INSERT INTO controls (task_id, body) VALUES (?1, ?2)",
                    params![task, body],
                )
                .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn pending_controls(&self) -> StoreResult<Vec<ControlRequest>> {
        self.read(|conn| {
            query_json(
                conn,
                "SELECT body FROM controls ORDER BY id",
                [],
                "control request",
            )
        })
        .await
    }

    async fn take_controls(&self, task_id: &TaskId) -> StoreResult<Vec<ControlRequest>> {
        let id = task_id.to_string();
        self.writer
            .write(move |conn| {
                let found = query_json(
                    conn,
                    "SELECT body FROM controls WHERE task_id = ?1 ORDER BY id",
                    [&id],
                    "control request",
                )?;
                conn.execute("DELETE FROM controls WHERE task_id = ?1", [&id])
                    .map_err(backend)?;
                Ok(found)
            })
            .await
    }

    async fn metrics(&self) -> StoreResult<HarnessMetrics> {
        self.read(crate::metrics::compute).await
    }

    async fn probe(&self) -> StoreResult<rein_core::store::StoreProbe> {
        // A row written to a real table of the store's own file and taken
        // out again in the same transaction: the commit writes its pages to
        // the file (a full disk fails it), and nobody ever sees the row.
        let probed = self
            .writer
            .write(|conn| {
                conn.execute(
                    "INSERT INTO controls (task_id, body) VALUES ('health-probe', '{}')",
                    [],
                )
                .and_then(|_| {
                    conn.execute("DELETE FROM controls WHERE rowid = last_insert_rowid()", [])
                })
                .map(drop)
                .map_err(backend)
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
        self.read(|conn| {
            conn.query_row("SELECT COUNT(*) FROM tasks", [], |r| r.get::<_, i64>(0))
                .map_err(backend)?;
            Ok(())
        })
        .await?;
        let free_bytes = nix::sys::statvfs::statvfs(store_dir(&self.path))
            .ok()
            .map(|v| v.blocks_available().saturating_mul(v.fragment_size()));
        let mut lost = self.read(lost_writes).await?;
        lost.retain(|l| l.acknowledged_at.is_none());
        Ok(rein_core::store::StoreProbe {
            location: self.path.display().to_string(),
            free_bytes,
            last_write_error,
            lost_writes: lost,
        })
    }

    async fn lost_writes(&self) -> StoreResult<Vec<LostWrites>> {
        self.read(lost_writes).await
    }

    async fn acknowledge_lost_writes(&self) -> StoreResult<usize> {
        let now = rows::ts(&chrono::Utc::now());
        self.writer
            .write(move |conn| {
                conn.execute(
                    "UPDATE lost_writes SET acknowledged_at = ?1 WHERE acknowledged_at IS NULL",
                    [&now],
                )
                .map_err(backend)
            })
            .await
    }
}

#[async_trait]
impl ApprovalStore for SqliteStore {
    async fn get_approval(&self, id: &ApprovalId) -> StoreResult<Option<ApprovalRequest>> {
        let id = id.to_string();
        self.read(move |conn| {
            let mut found: Vec<ApprovalRequest> = query_json(
                conn,
                "SELECT body FROM approvals WHERE id = ?1",
                [&id],
                "approval request",
            )?;
            Ok(found.pop())
        })
        .await
    }

    async fn list_approvals(&self, filter: &ApprovalFilter) -> StoreResult<Vec<ApprovalRequest>> {
        let filter = filter.clone();
        self.read(move |conn| {
            let limit = filter.limit.unwrap_or(50).clamp(1, MAX_PAGE);
            let mut sql = String::from("SELECT body FROM approvals WHERE 1 = 1");
            let mut args: Vec<String> = Vec::new();
            if let Some(status) = filter.status {
                args.push(status.as_str().to_owned());
                sql.push_str(&format!(" AND status = ?{}", args.len()));
            }
            if let Some(task) = &filter.task_id {
                args.push(task.to_string());
                sql.push_str(&format!(" AND task_id = ?{}", args.len()));
            }
            sql.push_str(&format!(" ORDER BY id DESC LIMIT {limit}"));
            query_json(
                conn,
                &sql,
                rusqlite::params_from_iter(args.iter()),
                "approval request",
            )
        })
        .await
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
            .write(move |conn| {
                let changed = conn
                    .execute(
                        "UPDATE approvals SET status = ?2, body = ?3 WHERE id = ?1 AND status = 'pending'",
                        params![id.as_str(), status, body],
                    )
                    .map_err(backend)?;
                if changed == 0 {
                    let mut current: Vec<ApprovalRequest> = query_json(
                        conn,
                        "SELECT body FROM approvals WHERE id = ?1",
                        [id.as_str()],
                        "approval request",
                    )?;
                    return Err(match current.pop() {
                        Some(current) => StoreError::NotPending { current: Box::new(current) },
                        None => StoreError::ApprovalNotFound(id.clone()),
                    });
                }
                append_ledger(conn, entry.clone())
            })
            .await
    }

    async fn ledger(&self, after_seq: u64, limit: usize) -> StoreResult<Vec<LedgerEntry>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached("SELECT seq, body FROM ledger WHERE seq > ?1 ORDER BY seq LIMIT ?2")
                .map_err(backend)?;
            let mut rows = stmt
                .query(params![seq(after_seq), limit])
                .map_err(backend)?;
            let mut entries = Vec::new();
            // Read as bytes: damaged bytes name their entry instead of failing
            // the whole read with a conversion error.
            while let Some(row) = rows.next().map_err(backend)? {
                let at: i64 = row.get(0).map_err(backend)?;
                let damaged = |why: String| {
                    StoreError::Corrupt(format!(
                        "ledger entry {at} is damaged: {why}; the entries after it were not checked"
                    ))
                };
                let bytes = match row.get_ref(1).map_err(backend)? {
                    rusqlite::types::ValueRef::Text(b) | rusqlite::types::ValueRef::Blob(b) => b,
                    other => {
                        return Err(damaged(format!(
                            "its body is {:?}, not text",
                            other.data_type()
                        )));
                    }
                };
                let text = std::str::from_utf8(bytes)
                    .map_err(|e| damaged(format!("its stored bytes are not valid UTF-8 ({e})")))?;
                let entry: LedgerEntry = serde_json::from_str(text)
                    .map_err(|e| damaged(format!("it is not a ledger entry ({e})")))?;
                entries.push(entry);
            }
            Ok(entries)
        })
        .await
    }
}

#[async_trait]
impl DocumentStore for SqliteStore {
    async fn insert_shared_state(
        &self,
        state: &SharedHarnessState,
        audit: &AuditRecord,
    ) -> StoreResult<()> {
        let row = SharedRow::of(state)?;
        let audit = serde_json::to_string(audit).map_err(backend)?;
        self.writer
            .write(move |conn| {
                let inserted = insert_document(
                    conn,
                    "INSERT INTO shared_states (id, session_id, parent_session_id, harness_contract_id, status, created_at, version, body)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, ?7) ON CONFLICT(id) DO NOTHING",
                    params![row.id, row.session_id, row.parent_session_id, row.harness_contract_id, row.status, row.created_at, row.body],
                    &audit,
                )?;
                if inserted {
                    Ok(())
                } else {
                    Err(StoreError::SharedStateExists(row.id.clone()))
                }
            })
            .await
    }

    async fn load_shared_state(&self, id: &str) -> StoreResult<Option<(SharedHarnessState, u64)>> {
        let id = id.to_owned();
        self.read(move |conn| {
            let row: Option<(String, i64)> = conn
                .query_row(
                    "SELECT body, version FROM shared_states WHERE id = ?1",
                    [&id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(backend)?;
            row.map(|(body, version)| {
                let state = serde_json::from_str(&body).map_err(|e| corrupt("shared state", e))?;
                Ok((state, u64::try_from(version).unwrap_or(0)))
            })
            .transpose()
        })
        .await
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
            .write(move |conn| {
                let written = update_document(
                    conn,
                    "UPDATE shared_states SET session_id = ?2, parent_session_id = ?3, harness_contract_id = ?4,
                     status = ?5, version = version + 1, body = ?6 WHERE id = ?1 AND version = ?7",
                    params![row.id, row.session_id, row.parent_session_id, row.harness_contract_id, row.status, row.body, expected_i],
                    "SELECT 1 FROM shared_states WHERE id = ?1",
                    params![row.id],
                    &audit,
                )?;
                match written {
                    WriteBack::Written => Ok(()),
                    WriteBack::Moved => Err(StoreError::SharedStateMoved { id: row.id.clone(), expected }),
                    WriteBack::Missing => Err(StoreError::SharedStateNotFound(row.id.clone())),
                }
            })
            .await
    }

    async fn list_shared_states(&self, filter: &SharedStateFilter) -> StoreResult<SharedStatePage> {
        let cursor = time_id_cursor(filter.cursor.as_deref())?;
        let filter = filter.clone();
        self.read(move |conn| {
            let limit = filter.limit.unwrap_or(50).clamp(1, MAX_PAGE);
            let mut q = Where::new("SELECT body FROM shared_states", Mark::Question);
            q.and_some("session_id =", filter.session_id.clone());
            q.and_some("parent_session_id =", filter.parent_session_id.clone());
            q.and_some("harness_contract_id =", filter.harness_contract_id.clone());
            q.and_some("status =", filter.status.map(|s| s.as_str().to_owned()));
            q.and_some("created_at >=", filter.created_from.as_ref().map(ts));
            q.and_some("created_at <", filter.created_to.as_ref().map(ts));
            if let Some(t) = &filter.tag {
                q.and(
                    "EXISTS (SELECT 1 FROM json_each(body, '$.tags') WHERE value = ?)",
                    t.clone(),
                );
            }
            if let Some((t, id)) = cursor {
                q.and("(created_at < ? OR (created_at = ? AND id < ?))", t.clone());
                q.also(t);
                q.also(id);
            }
            let items: Vec<SharedHarnessState> = q.run(
                conn,
                &format!(" ORDER BY created_at DESC, id DESC LIMIT {}", limit + 1),
                "shared state",
            )?;
            let (items, next_cursor) = page(items, limit, shared_state_cursor);
            Ok(SharedStatePage { items, next_cursor })
        })
        .await
    }

    async fn audit_records(&self, after: u64, limit: usize) -> StoreResult<Vec<AuditRecord>> {
        let after = i64::try_from(after).map_err(backend)?;
        let limit = i64::try_from(limit.clamp(1, 10_000)).map_err(backend)?;
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached("SELECT seq, body FROM audit WHERE seq > ?1 ORDER BY seq LIMIT ?2")
                .map_err(backend)?;
            let rows = stmt
                .query_map(params![after, limit], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
                })
                .map_err(backend)?;
            let mut out = Vec::new();
            for row in rows {
                let (seq, body) = row.map_err(backend)?;
                let mut record: AuditRecord =
                    serde_json::from_str(&body).map_err(|e| corrupt("audit record", e))?;
                record.seq = u64::try_from(seq).unwrap_or(0);
                out.push(record);
            }
            Ok(out)
        })
        .await
    }

    async fn insert_record(&self, record: &Record, audit: &AuditRecord) -> StoreResult<()> {
        let row = RecordRow::of(record)?;
        let audit = serde_json::to_string(audit).map_err(backend)?;
        let (kind, id) = (record.kind, record.id.clone());
        self.writer
            .write(move |conn| {
                let inserted = insert_document(
                    conn,
                    "INSERT INTO records (kind, id, status, task_id, shared_state_id, contract_id, created_at, version, body)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 1, ?8) ON CONFLICT(kind, id) DO NOTHING",
                    params![row.kind, row.id, row.status, row.task_id, row.shared_state_id, row.contract_id, row.created_at, row.body],
                    &audit,
                )?;
                if inserted {
                    Ok(())
                } else {
                    Err(StoreError::RecordExists { kind, id: id.clone() })
                }
            })
            .await
    }

    async fn load_record(&self, kind: RecordKind, id: &str) -> StoreResult<Option<(Record, u64)>> {
        let id = id.to_owned();
        self.read(move |conn| {
            let row = conn
                .query_row(
                    "SELECT id, status, task_id, shared_state_id, contract_id, created_at, body, version
                     FROM records WHERE kind = ?1 AND id = ?2",
                    params![kind.as_str(), id],
                    |r| Ok((record_of(kind, r), r.get::<_, i64>(7)?)),
                )
                .optional()
                .map_err(backend)?;
            row.map(|(record, version)| Ok((record?, u64::try_from(version).unwrap_or(0))))
                .transpose()
        })
        .await
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
            .write(move |conn| {
                let written = update_document(
                    conn,
                    "UPDATE records SET status = ?3, task_id = ?4, shared_state_id = ?5, contract_id = ?6,
                     version = version + 1, body = ?7 WHERE kind = ?1 AND id = ?2 AND version = ?8",
                    params![row.kind, row.id, row.status, row.task_id, row.shared_state_id, row.contract_id, row.body, expected_i],
                    "SELECT 1 FROM records WHERE kind = ?1 AND id = ?2",
                    params![row.kind, row.id],
                    &audit,
                )?;
                let id = row.id.clone();
                match written {
                    WriteBack::Written => Ok(()),
                    WriteBack::Moved => Err(StoreError::RecordMoved { kind, id, expected }),
                    WriteBack::Missing => Err(StoreError::RecordNotFound { kind, id }),
                }
            })
            .await
    }

    async fn list_records(&self, filter: &RecordFilter) -> StoreResult<RecordPage> {
        let cursor = time_id_cursor(filter.cursor.as_deref())?;
        let filter = filter.clone();
        self.read(move |conn| {
            let limit = filter.limit.unwrap_or(50).clamp(1, MAX_PAGE);
            let mut sql = String::from(
                "SELECT id, status, task_id, shared_state_id, contract_id, created_at, body FROM records WHERE kind = ?1",
            );
            let mut values: Vec<String> = vec![filter.kind.as_str().to_owned()];
            let mut and = |column: &str, value: String| {
                values.push(value);
                sql.push_str(&format!(" AND {column} ?{}", values.len()));
            };
            for (column, value) in [
                ("status =", &filter.status),
                ("task_id =", &filter.task_id),
                ("shared_state_id =", &filter.shared_state_id),
                ("contract_id =", &filter.contract_id),
            ] {
                if let Some(v) = value {
                    and(column, v.clone());
                }
            }
            if let Some((t, id)) = cursor {
                values.push(t);
                values.push(id);
                let (a, b) = (values.len() - 1, values.len());
                sql.push_str(&format!(" AND (created_at < ?{a} OR (created_at = ?{a} AND id < ?{b}))"));
            }
            sql.push_str(&format!(" ORDER BY created_at DESC, id DESC LIMIT {}", limit + 1));
            let mut stmt = conn.prepare(&sql).map_err(backend)?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter(values.iter()), |r| {
                    Ok(record_of(filter.kind, r))
                })
                .map_err(backend)?;
            let mut items = Vec::new();
            for row in rows {
                items.push(row.map_err(backend)??);
            }
            let (items, next_cursor) = page(items, limit, record_cursor);
            Ok(RecordPage { items, next_cursor })
        })
        .await
    }
}

#[async_trait]
impl JournalStore for SqliteStore {
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
                        let u = &used.usage;
                        conn.prepare_cached(
                            "INSERT INTO model_usage (task_id, journal, seq, step_id, session_id, at,
                               provider, model, served_model, input, cached, output, reasoning, estimated)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                        )
                        .and_then(|mut stmt| {
                            stmt.execute(params![
                                task.as_str(),
                                step,
                                seq(at),
                                used.step,
                                used.session,
                                now,
                                used.provider,
                                used.model,
                                used.served_model,
                                seq(u.input_tokens),
                                seq(u.cached_input_tokens),
                                seq(u.output_tokens),
                                u.reasoning_tokens.map(seq),
                                u.estimated,
                            ])
                        })
                        .map_err(backend)?;
                        conn.prepare_cached(
                            "INSERT INTO model_usage_daily (day, task_id, session_id, provider, model,
                               calls, input, cached, output, reasoning, estimated)
                             VALUES (substr(?1, 1, 10), ?2, ?3, ?4, ?5, 1, ?6, ?7, ?8, ?9, ?10)
                             ON CONFLICT (day, task_id, session_id, provider, model) DO UPDATE SET
                               calls = calls + 1,
                               input = input + excluded.input,
                               cached = cached + excluded.cached,
                               output = output + excluded.output,
                               reasoning = CASE WHEN excluded.reasoning IS NULL THEN reasoning
                                           ELSE COALESCE(reasoning, 0) + excluded.reasoning END,
                               estimated = max(estimated, excluded.estimated)",
                        )
                        .and_then(|mut stmt| {
                            stmt.execute(params![
                                now,
                                task.as_str(),
                                used.session.as_deref().unwrap_or_default(),
                                used.provider,
                                used.model,
                                seq(u.input_tokens),
                                seq(u.cached_input_tokens),
                                seq(u.output_tokens),
                                u.reasoning_tokens.map(seq),
                                u.estimated,
                            ])
                        })
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

/// A versioned document (a shared state, a contract, an evidence bundle)
/// inserted at version 1 with its audit record, in the caller's transaction;
/// `false` (and no audit record) if its id is taken. `insert` must do nothing
/// on a taken id.
fn insert_document(
    conn: &Connection,
    insert: &str,
    values: &[&dyn rusqlite::ToSql],
    audit: &str,
) -> StoreResult<bool> {
    if conn.execute(insert, values).map_err(backend)? == 0 {
        return Ok(false);
    }
    append_audit(conn, audit)?;
    Ok(true)
}

/// A versioned document written back with its audit record, if `update` (which
/// checks the version read) changes a row; else whether `exists` finds it.
fn update_document(
    conn: &Connection,
    update: &str,
    values: &[&dyn rusqlite::ToSql],
    exists: &str,
    key: &[&dyn rusqlite::ToSql],
    audit: &str,
) -> StoreResult<WriteBack> {
    if conn.execute(update, values).map_err(backend)? == 0 {
        let found = conn
            .query_row(exists, key, |_| Ok(()))
            .optional()
            .map_err(backend)?
            .is_some();
        return Ok(if found {
            WriteBack::Moved
        } else {
            WriteBack::Missing
        });
    }
    append_audit(conn, audit)?;
    Ok(WriteBack::Written)
}

fn append_audit(conn: &Connection, body: &str) -> StoreResult<()> {
    conn.execute("INSERT INTO audit (body) VALUES (?1)", [body])
        .map_err(backend)?;
    Ok(())
}

/// A record from a row of `id, status, task_id, shared_state_id, contract_id,
/// created_at, body`.
fn record_of(kind: RecordKind, r: &rusqlite::Row<'_>) -> StoreResult<Record> {
    let text = |i: usize| r.get::<_, Option<String>>(i).map_err(backend);
    let created = text(5)?.unwrap_or_default();
    let created_at = chrono::DateTime::parse_from_rfc3339(&created)
        .map_err(|e| corrupt("record timestamp", e))?
        .to_utc();
    let body = text(6)?.unwrap_or_default();
    Ok(Record {
        kind,
        id: text(0)?.unwrap_or_default(),
        status: text(1)?,
        task_id: text(2)?,
        shared_state_id: text(3)?,
        contract_id: text(4)?,
        created_at,
        body: serde_json::from_str(&body).map_err(|e| corrupt(kind.noun(), e))?,
    })
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
