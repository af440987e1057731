//! The single write connection, and the thread that commits every queued write
//! in one transaction (group commit). Callers wait for the commit.
//!
//! When nobody else is writing — no write queued, the connection free — a
//! caller commits its write itself, on its own thread: a lone task's chain of
//! steps then pays for its commit and nothing else (no hand-off to the writer
//! thread and back, which costs two thread wake-ups). As soon as writes queue,
//! they go to the writer thread and share its commits.
//!
//! Writes almost never fail, so a batch first runs plainly; if one write fails,
//! the transaction is rolled back and the batch runs again with a savepoint per
//! write, so the failing write fails alone and the others still commit. Write
//! closures are therefore `FnMut`: they may run twice.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use rein_core::{StoreError, StoreResult};
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::head::{Head, HeadFile};

/// Most writes one transaction takes.
const MAX_BATCH: usize = 512;

trait WriteOp: Send {
    /// Runs the write inside the open transaction; `false` if it failed. May be
    /// called again after a rollback.
    fn apply(&mut self, conn: &Connection) -> bool;
    /// Reports the outcome once the transaction has committed (or failed to).
    fn finish(self: Box<Self>, commit: Result<(), StoreError>);
}

struct Op<T, F> {
    work: F,
    result: Option<StoreResult<T>>,
    reply: oneshot::Sender<StoreResult<T>>,
}

impl<T: Send, F: FnMut(&Connection) -> StoreResult<T> + Send> WriteOp for Op<T, F> {
    fn apply(&mut self, conn: &Connection) -> bool {
        let result = (self.work)(conn);
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn finish(self: Box<Self>, commit: Result<(), StoreError>) {
        // The caller may have gone away; the write is committed either way.
        let _ = self.reply.send(outcome(self.result, commit));
    }
}

/// What a write's caller hears: its own failure, else the transaction's.
pub(crate) fn outcome<T>(
    applied: Option<StoreResult<T>>,
    commit: Result<(), StoreError>,
) -> StoreResult<T> {
    match (applied, commit) {
        (Some(Ok(value)), Ok(())) => Ok(value),
        (Some(Ok(_)), Err(e)) => Err(e),
        (Some(Err(e)), _) => Err(e),
        (None, Err(e)) => Err(e),
        (None, Ok(())) => Err(StoreError::Backend("write was never applied".into())),
    }
}

/// Counters for benchmarks and health: how many transactions carried how many writes.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub commits: AtomicU64,
    pub writes: AtomicU64,
    /// Time spent inside transactions (BEGIN to COMMIT, the fsync included).
    pub busy_ns: AtomicU64,
    /// The last transaction that failed, and when (for health reports).
    pub last_error: Mutex<Option<String>>,
}

impl Counters {
    /// Notes a transaction that failed, and when.
    pub fn failed(&self, e: &StoreError) {
        if let Ok(mut last) = self.last_error.lock() {
            *last = Some(format!("{} at {}", e, chrono::Utc::now().to_rfc3339()));
        }
    }
}

/// The write connection and how many writes wait for the writer thread.
#[derive(Debug)]
struct Shared {
    conn: Mutex<Connection>,
    queued: AtomicUsize,
    /// Where each commit's head is recorded (a store's writer; not a test's).
    head: Option<HeadFile>,
}

/// How a store's writes are waited for, beyond the defaults.
#[derive(Clone, Default)]
pub struct WriterOptions {
    /// Called once per write with the time from its request until it was
    /// committed (or failed): commit latency as callers see it, for
    /// benchmarks.
    pub on_commit: Option<Arc<dyn Fn(std::time::Duration) + Send + Sync>>,
    /// Callers wait for a queued write's commit on tokio's blocking pool
    /// instead of on the runtime. For tests on a paused clock: a runtime
    /// waiting on the writer thread looks idle, and a paused clock then jumps
    /// to the next timer; a blocking task under way holds it still.
    pub wait_blocking: bool,
}

impl std::fmt::Debug for WriterOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterOptions")
            .field("on_commit", &self.on_commit.is_some())
            .field("wait_blocking", &self.wait_blocking)
            .finish()
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Writer {
    queue: mpsc::Sender<Box<dyn WriteOp>>,
    shared: Arc<Shared>,
    pub counters: Arc<Counters>,
    options: WriterOptions,
    /// Last, so that it goes after the queue: the last writer dropped waits
    /// for the thread to end, and with it the write connection.
    _thread: Arc<Joined>,
}

/// The writer thread, waited for when the last [`Writer`] goes: the store's
/// write connection is closed (and its write-ahead log checkpointed) by the
/// time the store is dropped, not some moment later on another thread — a
/// process that then copies or replaces the database files finds them still.
#[derive(Debug)]
struct Joined(Option<std::thread::JoinHandle<()>>);

impl Drop for Joined {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take()
            // Dropped on the writer thread itself (a write held the last
            // handle): it ends on its own.
            && handle.thread().id() != std::thread::current().id()
        {
            let _ = handle.join();
        }
    }
}

impl Writer {
    #[cfg(test)]
    pub fn start(conn: Connection, options: WriterOptions) -> std::io::Result<Writer> {
        Writer::start_recording(conn, options, None)
    }

    /// [`Writer::start`], counting every commit in the store's head and
    /// recording the head in `head` once the commit is durable.
    pub fn start_recording(
        conn: Connection,
        options: WriterOptions,
        head: Option<HeadFile>,
    ) -> std::io::Result<Writer> {
        let (queue, jobs) = mpsc::channel::<Box<dyn WriteOp>>();
        let counters = Arc::new(Counters::default());
        let shared = Arc::new(Shared {
            conn: Mutex::new(conn),
            queued: AtomicUsize::new(0),
            head,
        });
        let thread_counters = Arc::clone(&counters);
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("rein-store-writer".into())
            .spawn(move || run(&thread_shared, jobs, &thread_counters))?;
        Ok(Writer {
            queue,
            shared,
            counters,
            options,
            _thread: Arc::new(Joined(Some(thread))),
        })
    }

    /// Commits `work` — itself when nobody else is writing, else in the writer
    /// thread's next transaction — and returns once it is committed.
    pub async fn write<T, F>(&self, work: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnMut(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let requested = std::time::Instant::now();
        let result = self.commit(work).await;
        if let Some(hook) = &self.options.on_commit {
            hook(requested.elapsed());
        }
        result
    }

    async fn commit<T, F>(&self, work: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnMut(&Connection) -> StoreResult<T> + Send + 'static,
    {
        if self.shared.queued.load(Ordering::SeqCst) == 0
            && let Ok(conn) = self.shared.conn.try_lock()
        {
            let (reply, mut done) = oneshot::channel();
            let op: Box<dyn WriteOp> = Box::new(Op {
                work,
                result: None,
                reply,
            });
            commit_and_finish(&conn, vec![op], &self.counters, self.shared.head.as_ref());
            drop(conn);
            return done.try_recv().map_err(|_| stopped())?;
        }
        let done = self.submit(work)?;
        if self.options.wait_blocking {
            return tokio::task::spawn_blocking(move || done.blocking_recv())
                .await
                .map_err(|_| stopped())?
                .map_err(|_| stopped())?;
        }
        done.await.map_err(|_| stopped())?
    }

    /// Queues `work` for the next transaction; the receiver gets its result once
    /// the transaction has committed.
    pub fn submit<T, F>(&self, work: F) -> StoreResult<oneshot::Receiver<StoreResult<T>>>
    where
        T: Send + 'static,
        F: FnMut(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let (reply, done) = oneshot::channel();
        let op: Box<dyn WriteOp> = Box::new(Op {
            work,
            result: None,
            reply,
        });
        self.shared.queued.fetch_add(1, Ordering::SeqCst);
        if self.queue.send(op).is_err() {
            self.shared.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(stopped());
        }
        Ok(done)
    }
}

fn stopped() -> StoreError {
    StoreError::Backend("the store's writer thread has stopped".into())
}

/// How long the writer looks for the next write before it sleeps. A task's next
/// write usually follows the last commit within tens of microseconds; catching it
/// awake saves a thread wake-up per commit.
const LINGER: std::time::Duration = std::time::Duration::from_micros(200);

/// The next write: taken at once if one arrives within [`LINGER`], else waited for.
fn next_write(jobs: &mpsc::Receiver<Box<dyn WriteOp>>) -> Option<Box<dyn WriteOp>> {
    let until = std::time::Instant::now() + LINGER;
    while std::time::Instant::now() < until {
        match jobs.try_recv() {
            Ok(op) => return Some(op),
            Err(mpsc::TryRecvError::Empty) => std::hint::spin_loop(),
            Err(mpsc::TryRecvError::Disconnected) => return None,
        }
    }
    jobs.recv().ok()
}

fn run(shared: &Shared, jobs: mpsc::Receiver<Box<dyn WriteOp>>, counters: &Counters) {
    while let Some(first) = next_write(&jobs) {
        // A caller committing its own write holds the connection meanwhile.
        let conn = shared
            .conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        shared.queued.fetch_sub(batch.len(), Ordering::SeqCst);
        commit_and_finish(&conn, batch, counters, shared.head.as_ref());
    }
}

/// Commits `batch` in one transaction and tells each write how it went.
fn commit_and_finish(
    conn: &Connection,
    mut batch: Vec<Box<dyn WriteOp>>,
    counters: &Counters,
    head: Option<&HeadFile>,
) {
    let started = std::time::Instant::now();
    let commit = commit_batch(conn, &mut batch, head);
    let busy = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    counters.busy_ns.fetch_add(busy, Ordering::Relaxed);
    counters.commits.fetch_add(1, Ordering::Relaxed);
    counters
        .writes
        .fetch_add(batch.len() as u64, Ordering::Relaxed);
    if let Err(e) = &commit {
        counters.failed(e);
    }
    for op in batch {
        op.finish(commit.clone());
    }
}

fn commit_batch(
    conn: &Connection,
    batch: &mut [Box<dyn WriteOp>],
    head: Option<&HeadFile>,
) -> Result<(), StoreError> {
    let backend = |e: rusqlite::Error| StoreError::Backend(e.to_string());
    // Every transaction runs these: prepared once, not parsed each time.
    let run = |sql: &str| {
        conn.prepare_cached(sql)
            .and_then(|mut s| s.execute([]))
            .map(drop)
    };
    run("BEGIN IMMEDIATE").map_err(backend)?;
    let before = match head {
        Some(file) => match file.before(conn) {
            Ok(before) => Some(before),
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(backend(e));
            }
        },
        None => None,
    };
    // Until this transaction commits, where the store stands is read again.
    if let Some(file) = head {
        file.committed(None);
    }
    let mut all_ok = true;
    for op in batch.iter_mut() {
        all_ok &= op.apply(conn);
    }
    if !all_ok && batch.len() > 1 {
        // Start over, isolating each write so only the failing ones fail.
        conn.execute_batch("ROLLBACK; BEGIN IMMEDIATE")
            .map_err(backend)?;
        for op in batch.iter_mut() {
            let step = conn.execute_batch("SAVEPOINT write").and_then(|()| {
                if op.apply(conn) {
                    conn.execute_batch("RELEASE write")
                } else {
                    conn.execute_batch("ROLLBACK TO write; RELEASE write")
                }
            });
            if let Err(e) = step {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(backend(e));
            }
        }
    } else if !all_ok {
        // The one write failed: commit nothing.
        return conn.execute_batch("ROLLBACK").map_err(backend);
    }
    let counted = match before {
        Some((version, before)) => match Head::count_commit(conn, before) {
            Ok((counted, after)) => Some((counted, (version, after))),
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(backend(e));
            }
        },
        None => None,
    };
    run("COMMIT").map_err(|e| {
        let _ = conn.execute_batch("ROLLBACK");
        backend(e)
    })?;
    if let (Some(file), Some((counted, after))) = (head, counted) {
        file.record(&counted);
        file.committed(Some(after));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(e: impl std::fmt::Display) -> StoreError {
        StoreError::Backend(e.to_string())
    }

    /// How many rows table `t` has, read through a write.
    async fn rows(writer: &Writer) -> i64 {
        writer
            .write(|c| {
                c.query_row("SELECT COUNT(*) FROM t", [], |r| r.get::<_, i64>(0))
                    .map_err(backend)
            })
            .await
            .unwrap()
    }

    /// Holds the writer thread inside a write until the returned sender is used,
    /// so the writes queued meanwhile all go into the next transaction.
    fn hold(
        writer: &Writer,
    ) -> (
        std::sync::mpsc::Sender<()>,
        oneshot::Receiver<StoreResult<()>>,
    ) {
        let (entered_tx, entered) = std::sync::mpsc::channel::<()>();
        let (release, held) = std::sync::mpsc::channel::<()>();
        let blocker = writer
            .submit(move |_| {
                entered_tx.send(()).map_err(backend)?;
                held.recv().map_err(backend)
            })
            .unwrap();
        entered.recv().unwrap();
        (release, blocker)
    }

    fn table(schema: &str) -> (tempfile::TempDir, Writer) {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("w.db")).unwrap();
        conn.execute_batch(schema).unwrap();
        (dir, Writer::start(conn, WriterOptions::default()).unwrap())
    }

    #[tokio::test]
    async fn writes_queued_behind_a_commit_share_the_next_one() {
        let (_dir, writer) = table("CREATE TABLE t (x INTEGER)");
        let (release, blocker) = hold(&writer);
        let queued: Vec<_> = (0..10)
            .map(|i| {
                writer
                    .submit(move |c| c.execute("INSERT INTO t VALUES (?1)", [i]).map_err(backend))
                    .unwrap()
            })
            .collect();
        release.send(()).unwrap();
        blocker.await.unwrap().unwrap();
        for q in queued {
            assert_eq!(q.await.unwrap().unwrap(), 1);
        }
        assert_eq!(writer.counters.writes.load(Ordering::SeqCst), 11);
        assert_eq!(
            writer.counters.commits.load(Ordering::SeqCst),
            2,
            "the ten shared one commit"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_hook_times_each_write_and_a_blocking_wait_holds_a_paused_clock() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("w.db")).unwrap();
        conn.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
        let times = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&times);
        let options = WriterOptions {
            on_commit: Some(Arc::new(move |took| seen.lock().unwrap().push(took))),
            wait_blocking: true,
        };
        let writer = Writer::start(conn, options).unwrap();
        let clock = tokio::time::Instant::now();
        // Queued behind a held commit, so it waits for the writer thread.
        let (release, blocker) = hold(&writer);
        let queued = {
            let writer = writer.clone();
            tokio::spawn(async move {
                writer
                    .write(|c| c.execute("INSERT INTO t VALUES (1)", []).map_err(backend))
                    .await
            })
        };
        while writer.shared.queued.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        // A timer an idle runtime would jump to.
        let timer = tokio::spawn(tokio::time::sleep(std::time::Duration::from_secs(3600)));
        tokio::task::yield_now().await;
        std::thread::sleep(std::time::Duration::from_millis(20));
        release.send(()).unwrap();
        blocker.await.unwrap().unwrap();
        assert_eq!(queued.await.unwrap().unwrap(), 1);
        writer
            .write(|c| c.execute("INSERT INTO t VALUES (2)", []).map_err(backend))
            .await
            .unwrap();
        let times = times.lock().unwrap().clone();
        assert_eq!(times.len(), 2, "one call per write");
        assert!(
            times[0] >= std::time::Duration::from_millis(20),
            "{times:?}"
        );
        // The runtime never looked idle while a write was waited for.
        assert_eq!(clock.elapsed(), std::time::Duration::ZERO);
        timer.abort();
    }

    #[tokio::test]
    async fn a_failing_write_fails_alone_and_the_rest_of_its_batch_commits() {
        let (_dir, writer) = table("CREATE TABLE t (x INTEGER PRIMARY KEY)");
        let insert = |x: i64| {
            writer
                .submit(move |c| c.execute("INSERT INTO t VALUES (?1)", [x]).map_err(backend))
                .unwrap()
        };
        let (release, blocker) = hold(&writer);
        let (a, dup, b) = (insert(1), insert(1), insert(2));
        release.send(()).unwrap();
        blocker.await.unwrap().unwrap();
        assert_eq!(a.await.unwrap().unwrap(), 1);
        assert!(
            dup.await.unwrap().is_err(),
            "the duplicate key fails on its own"
        );
        assert_eq!(b.await.unwrap().unwrap(), 1);
        assert_eq!(rows(&writer).await, 2);
        assert_eq!(
            writer.counters.commits.load(Ordering::SeqCst),
            3,
            "blocker, the batch, the count"
        );
    }

    #[tokio::test]
    async fn a_lone_write_commits_on_the_callers_thread_and_others_queue_behind_a_commit() {
        let (_dir, writer) = table("CREATE TABLE t (x INTEGER)");
        let caller = std::thread::current().id();
        let ran_on = writer
            .write(|c| {
                c.execute("INSERT INTO t VALUES (1)", []).map_err(backend)?;
                Ok(std::thread::current().id())
            })
            .await
            .unwrap();
        assert_eq!(ran_on, caller, "nobody else was writing: no hand-off");
        // While the writer thread holds the connection, a write waits for it
        // and goes into the writer's next transaction.
        let (release, blocker) = hold(&writer);
        let w = writer.clone();
        let queued = tokio::spawn(async move {
            w.write(|c| {
                c.execute("INSERT INTO t VALUES (2)", []).map_err(backend)?;
                Ok(std::thread::current().id())
            })
            .await
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!queued.is_finished(), "it waits for the commit in progress");
        release.send(()).unwrap();
        blocker.await.unwrap().unwrap();
        let ran_on = queued.await.unwrap().unwrap();
        assert_ne!(ran_on, caller, "committed by the writer thread");
        assert_eq!(rows(&writer).await, 2);
    }

    #[tokio::test]
    async fn a_lone_failing_write_commits_nothing() {
        let (_dir, writer) = table("CREATE TABLE t (x INTEGER PRIMARY KEY)");
        let result = writer
            .write(|c| {
                c.execute("INSERT INTO t VALUES (1)", []).map_err(backend)?;
                Err::<(), _>(StoreError::Backend("changed my mind".into()))
            })
            .await;
        assert!(result.is_err());
        assert_eq!(rows(&writer).await, 0);
    }
}
