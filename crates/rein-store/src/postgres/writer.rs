//! The PostgreSQL writer: every write of this process goes through one task
//! that commits what has queued as one transaction, so writes that arrive
//! while a commit is flushing share the next one (group commit, as the SQLite
//! writer does).
//!
//! Each transaction first takes one advisory lock, held until it commits:
//! writers on every node commit one at a time, so the order of the events'
//! global positions is the order their transactions committed, and a reader
//! of the feed that has seen position `n` never later finds a smaller one.
//! Within a batch each write runs under its own savepoint: one that fails
//! (a conflict, a taken id) is rolled back alone and the rest commit.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use deadpool_postgres::{Object, Pool};
use futures_util::future::BoxFuture;
use rein_core::{StoreError, StoreResult};
use tokio::sync::{mpsc, oneshot};

use crate::writer::{Counters, outcome};

/// The advisory lock every write transaction holds until it commits.
const WRITE_LOCK: i64 = 0x7265_696e_0002;

/// Most writes in one transaction.
const MAX_BATCH: usize = 256;

/// One queued write: runs inside the open transaction, then hears whether
/// the transaction committed.
trait Job: Send {
    fn apply<'c>(&'c mut self, client: &'c Object) -> BoxFuture<'c, bool>;
    fn finish(self: Box<Self>, commit: Result<(), StoreError>);
}

/// A write's work: statements on the writer's connection, inside its
/// transaction.
pub(crate) trait Work<T>:
    for<'c> FnOnce(&'c Object) -> BoxFuture<'c, StoreResult<T>> + Send
{
}
impl<T, F> Work<T> for F where F: for<'c> FnOnce(&'c Object) -> BoxFuture<'c, StoreResult<T>> + Send {}

struct Op<T, F> {
    work: Option<F>,
    result: Option<StoreResult<T>>,
    reply: oneshot::Sender<StoreResult<T>>,
}

impl<T: Send, F: Work<T>> Job for Op<T, F> {
    fn apply<'c>(&'c mut self, client: &'c Object) -> BoxFuture<'c, bool> {
        Box::pin(async move {
            let Some(work) = self.work.take() else {
                return false;
            };
            let result = work(client).await;
            let ok = result.is_ok();
            self.result = Some(result);
            ok
        })
    }

    fn finish(self: Box<Self>, commit: Result<(), StoreError>) {
        let _ = self.reply.send(outcome(self.result, commit));
    }
}

#[derive(Clone)]
pub(crate) struct Writer {
    jobs: mpsc::UnboundedSender<Box<dyn Job>>,
    pub counters: Arc<Counters>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").finish_non_exhaustive()
    }
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

impl Writer {
    /// Starts the writer task on the current runtime; it ends when the last
    /// handle is dropped.
    pub fn start(pool: Pool) -> Writer {
        let (jobs, queue) = mpsc::unbounded_channel();
        let counters = Arc::new(Counters::default());
        tokio::spawn(run(pool, queue, Arc::clone(&counters)));
        Writer { jobs, counters }
    }

    /// Runs `work` in the next transaction and returns its result once that
    /// transaction has committed.
    pub async fn write<T, F>(&self, work: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: Work<T> + 'static,
    {
        let (reply, result) = oneshot::channel();
        let op: Box<dyn Job> = Box::new(Op {
            work: Some(work),
            result: None,
            reply,
        });
        self.jobs
            .send(op)
            .map_err(|_| backend("the store's writer has stopped"))?;
        result
            .await
            .map_err(|_| backend("the store's writer has stopped"))?
    }
}

async fn run(
    pool: Pool,
    mut queue: mpsc::UnboundedReceiver<Box<dyn Job>>,
    counters: Arc<Counters>,
) {
    while let Some(first) = queue.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let started = std::time::Instant::now();
        let n = batch.len() as u64;
        let committed = commit(&pool, &mut batch).await;
        counters.busy_ns.fetch_add(
            u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        match &committed {
            Ok(()) => {
                counters.commits.fetch_add(1, Ordering::Relaxed);
                counters.writes.fetch_add(n, Ordering::Relaxed);
            }
            Err(e) => counters.failed(e),
        }
        for job in batch {
            job.finish(committed.clone());
        }
    }
}

/// One transaction for the batch: the write lock, then each write (under a
/// savepoint when it has company), then the commit.
async fn commit(pool: &Pool, batch: &mut [Box<dyn Job>]) -> Result<(), StoreError> {
    let client = pool
        .get()
        .await
        .map_err(|e| backend(format!("cannot reach PostgreSQL: {e}")))?;
    client
        .batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK})"
        ))
        .await
        .map_err(backend)?;
    let last = batch.len() - 1;
    let applied: Result<bool, StoreError> = async {
        if last == 0 {
            return Ok(batch[0].apply(&client).await);
        }
        let mut any = false;
        client.batch_execute("SAVEPOINT w").await.map_err(backend)?;
        for (i, job) in batch.iter_mut().enumerate() {
            let ok = job.apply(&client).await;
            any |= ok;
            // One round trip ends this write's savepoint and opens the next's.
            let end = match (ok, i == last) {
                (true, true) => "RELEASE SAVEPOINT w",
                (true, false) => "RELEASE SAVEPOINT w; SAVEPOINT w",
                (false, true) => "ROLLBACK TO SAVEPOINT w; RELEASE SAVEPOINT w",
                (false, false) => "ROLLBACK TO SAVEPOINT w; RELEASE SAVEPOINT w; SAVEPOINT w",
            };
            client.batch_execute(end).await.map_err(backend)?;
        }
        Ok(any)
    }
    .await;
    match applied {
        Ok(true) => client.batch_execute("COMMIT").await.map_err(backend),
        // Nothing to keep: whatever a failed write did is undone.
        Ok(false) => client.batch_execute("ROLLBACK").await.map_err(backend),
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK").await;
            Err(e)
        }
    }
}
