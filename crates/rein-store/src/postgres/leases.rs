//! Task leases on PostgreSQL: which node runs which task, renewed while the
//! node lives, taken over when it stops renewing, and fenced by a token; and
//! the notifications (`LISTEN/NOTIFY` on channel `rein`) that tell the other
//! nodes something was written that they may wait for.
//!
//! Claims run in the writer's transactions, under its lock, as every write
//! does: a task write's lease check (see [`fenced`]) and a claim never
//! interleave. Renewals only extend a lease this node holds and run on their
//! own connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_postgres_rustls::MakeRustlsConnect;

use async_trait::async_trait;
use deadpool_postgres::Object;
use futures_util::StreamExt;
use rein_core::store::{Change, Lease};
use rein_core::{LeaseStore, StoreError, StoreResult};
use rein_protocol::{RunnerInfo, TaskId, Timestamp};
use tokio::sync::{Notify, watch};

use super::{PostgresStore, backend, pg};

/// The notification channel.
pub(super) const CHANNEL: &str = "rein";

/// This node's side of the leases.
#[derive(Debug)]
pub(super) struct Leases {
    pub node: RunnerInfo,
    /// `host/pid/start`: how the `leases` table names a node.
    pub key: String,
    pub ttl: Duration,
    /// The token of each lease this node claimed (kept after a loss, so a
    /// write under it is refused).
    pub held: Mutex<HashMap<TaskId, i64>>,
    /// Until when, on this node's clock, each held lease is surely this
    /// node's: a lease lasts `ttl` from the moment the server took its
    /// claim or last renewal, which is after this node sent it.
    until: Mutex<HashMap<TaskId, tokio::time::Instant>>,
    /// Woken by the store's notifications, one for each kind of change.
    pub wake: Arc<Wakes>,
    /// Dropped with the store: its renewal and listening tasks end.
    _alive: watch::Sender<()>,
}

fn key_of(node: &RunnerInfo) -> String {
    format!(
        "{}/{}/{}",
        node.host,
        node.pid,
        node.process_start
            .map_or(String::from("-"), |s| s.to_string())
    )
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn timestamp(micros: i64) -> Timestamp {
    chrono::DateTime::from_timestamp_micros(micros).unwrap_or_default()
}

impl Leases {
    /// This node's leases, renewed every quarter of `ttl` by a task that ends
    /// with the store, and a listener for the store's notifications.
    pub fn start(
        config: tokio_postgres::Config,
        tls: MakeRustlsConnect,
        ttl: Duration,
        node: Option<RunnerInfo>,
    ) -> Arc<Leases> {
        let node = node.unwrap_or_else(rein_core::process::current_runner);
        let (alive, stopped) = watch::channel(());
        let leases = Arc::new(Leases {
            key: key_of(&node),
            node,
            ttl,
            held: Mutex::new(HashMap::new()),
            until: Mutex::new(HashMap::new()),
            wake: Arc::new(Wakes::default()),
            _alive: alive,
        });
        tokio::spawn(renew(
            (config.clone(), tls.clone()),
            Arc::downgrade(&leases),
            stopped.clone(),
        ));
        tokio::spawn(listen(config, tls, Arc::clone(&leases.wake), stopped));
        leases
    }

    fn hold(&self, task: &TaskId, token: i64, sent: tokio::time::Instant) {
        if let Ok(mut held) = self.held.lock() {
            held.insert(task.clone(), token);
        }
        if let Ok(mut until) = self.until.lock() {
            let at = until.entry(task.clone()).or_insert(sent + self.ttl);
            *at = (*at).max(sent + self.ttl);
        }
    }

    /// `tasks`' leases were renewed by a statement sent at `sent` (those
    /// still held: one given up meanwhile stays given up).
    fn extend(&self, tasks: &[TaskId], sent: tokio::time::Instant) {
        if let Ok(mut until) = self.until.lock() {
            for task in tasks {
                if let Some(at) = until.get_mut(task) {
                    *at = (*at).max(sent + self.ttl);
                }
            }
        }
    }

    /// Stops counting on `task`'s lease (released, or let go).
    fn forget(&self, task: &TaskId) -> Option<i64> {
        if let Ok(mut until) = self.until.lock() {
            until.remove(task);
        }
        self.held.lock().ok().and_then(|mut h| h.remove(task))
    }

    /// When this node stops counting on `task`'s lease: a tenth of a lease
    /// before it may have run out, time to stop the task's steps.
    fn counted_until(&self, task: &TaskId) -> Option<tokio::time::Instant> {
        let until = self.until.lock().ok()?.get(task).copied()?;
        Some(until - self.ttl / 10)
    }
}

/// Extends this node's leases every quarter of their length while the store
/// lives, on a connection of its own (a busy pool does not hold a renewal
/// up); a failed renewal is tried again at the next turn, on a new
/// connection. A lease not renewed for nine tenths of its length is given up
/// by its run (see [`Leases::counted_until`]): two turns may fail first.
async fn renew(
    (config, tls): (tokio_postgres::Config, MakeRustlsConnect),
    leases: std::sync::Weak<Leases>,
    mut stopped: watch::Receiver<()>,
) {
    let Some((key, ttl)) = leases.upgrade().map(|l| (l.key.clone(), l.ttl)) else {
        return;
    };
    let every = (ttl / 4).max(Duration::from_millis(20));
    let mut client: Option<tokio_postgres::Client> = None;
    loop {
        tokio::select! {
            changed = stopped.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(every) => {}
        }
        let Some(mine) = leases.upgrade() else {
            return;
        };
        // Only the leases of runs under way: one given up, even if the store
        // could not be told, runs out.
        let held: Vec<TaskId> = mine
            .held
            .lock()
            .map(|h| h.keys().cloned().collect())
            .unwrap_or_default();
        drop(mine);
        if held.is_empty() {
            continue;
        }
        let sent = tokio::time::Instant::now();
        let ids: Vec<&str> = held.iter().map(TaskId::as_str).collect();
        let renewed = async {
            if client
                .as_ref()
                .is_none_or(tokio_postgres::Client::is_closed)
            {
                let (fresh, connection) = tokio::time::timeout(every, config.connect(tls.clone()))
                    .await
                    .map_err(|_| backend("connecting took longer than a turn"))?
                    .map_err(pg)?;
                tokio::spawn(connection);
                client = Some(fresh);
            }
            let Some(c) = client.as_ref() else {
                return Err(backend("no connection"));
            };
            c.query(
                "UPDATE leases SET expires_at = now() + $2::bigint * interval '1 millisecond'
                 WHERE node = $1 AND task_id = ANY($3::text[]) RETURNING task_id",
                &[&key, &millis(ttl), &ids],
            )
            .await
            .map_err(pg)
        };
        // A connection that went quiet (a network cut drops no packets back)
        // is given up on after half a lease.
        let renewed = tokio::time::timeout(ttl / 2, renewed)
            .await
            .unwrap_or_else(|_| Err(backend("no answer within half a lease")));
        match renewed {
            Ok(rows) => {
                let renewed: Vec<TaskId> = rows
                    .iter()
                    .filter_map(|r| TaskId::parse(r.get::<_, &str>(0)).ok())
                    .collect();
                if let Some(mine) = leases.upgrade() {
                    mine.extend(&renewed, sent);
                }
            }
            Err(e) => {
                client = None;
                tracing::warn!(error = %e, "cannot renew this node's task leases; trying again");
            }
        }
    }
}

/// Listens on the store's channel and wakes [`Leases::wake`]'s waiters for
/// every notification, reconnecting when the connection drops (and waking
/// them then too: something may have been missed).
async fn listen(
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    wake: Arc<Wakes>,
    mut stopped: watch::Receiver<()>,
) {
    loop {
        let session = async {
            let (client, mut connection) = config.connect(tls.clone()).await?;
            let (heard, mut notes) = tokio::sync::mpsc::unbounded_channel();
            // The connection is driven by reading its messages; it ends when
            // the client is dropped.
            let driver = tokio::spawn(async move {
                let mut messages =
                    futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                while let Some(message) = messages.next().await {
                    match message {
                        Ok(tokio_postgres::AsyncMessage::Notification(note)) => {
                            let _ = heard.send(note.payload().to_owned());
                        }
                        Ok(_) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            });
            client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
            wake.all();
            while let Some(payload) = notes.recv().await {
                wake.heard(&payload);
            }
            drop(client);
            driver.await.unwrap_or(Ok(()))
        };
        tokio::select! {
            changed = stopped.changed() => if changed.is_err() { return },
            ended = session => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "the store's notification connection dropped; reconnecting");
                }
            }
        }
        wake.all();
        tokio::select! {
            changed = stopped.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}

/// Refuses a write to `task` this node may no longer make: one under a lease
/// that another node has since taken over, or to a task another node holds a
/// live lease on. Runs in the writer's transaction.
pub(super) async fn fenced(c: &Object, leases: &Leases, task: &TaskId) -> StoreResult<()> {
    let mine = leases.held.lock().ok().and_then(|h| h.get(task).copied());
    let stmt = c
        .prepare_cached(
            "SELECT node, token, expires_at > now(), runner FROM leases WHERE task_id = $1",
        )
        .await
        .map_err(pg)?;
    let row = c.query_opt(&stmt, &[&task.as_str()]).await.map_err(pg)?;
    let holder = |row: &tokio_postgres::Row| {
        serde_json::from_str::<RunnerInfo>(row.get::<_, &str>(3))
            .map(|r| format!("pid {} on {}", r.pid, r.host))
            .unwrap_or_else(|_| row.get::<_, String>(0))
    };
    let lost = |holder: String| StoreError::LeaseLost {
        task_id: task.clone(),
        holder,
    };
    match (mine, row) {
        (Some(token), Some(row)) => {
            if row.get::<_, &str>(0) == leases.key && row.get::<_, i64>(1) == token {
                Ok(())
            } else {
                Err(lost(holder(&row)))
            }
        }
        (Some(_), None) => Err(lost("no node".into())),
        (None, Some(row)) if row.get::<_, bool>(2) && row.get::<_, &str>(0) != leases.key => {
            Err(lost(holder(&row)))
        }
        _ => Ok(()),
    }
}

/// Takes or keeps the lease of each task `rows` returned, claimed by a
/// statement sent at `sent`.
fn claimed(
    leases: &Leases,
    rows: &[tokio_postgres::Row],
    sent: tokio::time::Instant,
) -> Vec<Lease> {
    rows.iter()
        .filter_map(|r| {
            let task = TaskId::parse(r.get::<_, &str>(0)).ok()?;
            let token: i64 = r.get(1);
            leases.hold(&task, token, sent);
            Some(Lease {
                task_id: task,
                runner: leases.node.clone(),
                token: u64::try_from(token).unwrap_or(0),
                expires_at: timestamp(r.get(2)),
            })
        })
        .collect()
}

/// What a claim's upsert sets: a lease this node holds keeps its token, one
/// taken over from another node gets the next.
const UPSERT: &str = "
    ON CONFLICT (task_id) DO UPDATE SET node = EXCLUDED.node, runner = EXCLUDED.runner,
        token = CASE WHEN leases.node = EXCLUDED.node THEN leases.token ELSE leases.token + 1 END,
        expires_at = EXCLUDED.expires_at
    WHERE leases.node = EXCLUDED.node OR leases.expires_at < now()
    RETURNING task_id, token, (extract(epoch FROM expires_at) * 1000000)::bigint";

/// The leases as [`lease_of`] reads them.
const LEASES: &str =
    "SELECT task_id, runner, token, (extract(epoch FROM expires_at) * 1000000)::bigint FROM leases";

/// A lease from a row of [`LEASES`].
fn lease_of(row: &tokio_postgres::Row) -> StoreResult<Lease> {
    Ok(Lease {
        task_id: TaskId::parse(row.get::<_, &str>(0)).map_err(backend)?,
        runner: serde_json::from_str(row.get::<_, &str>(1)).map_err(backend)?,
        token: u64::try_from(row.get::<_, i64>(2)).unwrap_or(0),
        expires_at: timestamp(row.get(3)),
    })
}

#[async_trait]
impl LeaseStore for PostgresStore {
    fn node(&self) -> &RunnerInfo {
        &self.leases.node
    }

    fn lease_duration(&self) -> Duration {
        self.leases.ttl
    }

    async fn claim(&self, task: &TaskId) -> StoreResult<Result<Lease, Lease>> {
        let leases = Arc::clone(&self.leases);
        // Before the server's `now()`, which the lease runs from.
        let sent = tokio::time::Instant::now();
        let runner = serde_json::to_string(&leases.node).map_err(backend)?;
        let task = task.clone();
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    let sql = format!(
                        "INSERT INTO leases (task_id, node, runner, token, expires_at)
                         VALUES ($1, $2, $3, 1, now() + $4::bigint * interval '1 millisecond') {UPSERT}"
                    );
                    let rows = c
                        .query(&sql, &[&task.as_str(), &leases.key, &runner, &millis(leases.ttl)])
                        .await
                        .map_err(pg)?;
                    if let Some(lease) = claimed(&leases, &rows, sent).pop() {
                        return Ok(Ok(lease));
                    }
                    let holder = c
                        .query_one(
                            &format!("{LEASES} WHERE task_id = $1"),
                            &[&task.as_str()],
                        )
                        .await
                        .map_err(pg)?;
                    Ok(Err(lease_of(&holder)?))
                })
            })
            .await
    }

    async fn claim_free(&self, n: usize) -> StoreResult<Vec<Lease>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let leases = Arc::clone(&self.leases);
        // Before the server's `now()`, which the lease runs from.
        let sent = tokio::time::Instant::now();
        let runner = serde_json::to_string(&leases.node).map_err(backend)?;
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    let sql = format!(
                        "WITH free AS (
                             SELECT t.id FROM tasks t
                             WHERE t.status IN ('pending', 'in_progress')
                               AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.task_id = t.id AND l.expires_at >= now())
                             ORDER BY t.tkey LIMIT $1
                             FOR UPDATE OF t SKIP LOCKED)
                         INSERT INTO leases (task_id, node, runner, token, expires_at)
                         SELECT id, $2, $3, 1, now() + $4::bigint * interval '1 millisecond' FROM free {UPSERT}"
                    );
                    let rows = c
                        .query(&sql, &[&n, &leases.key, &runner, &millis(leases.ttl)])
                        .await
                        .map_err(pg)?;
                    Ok(claimed(&leases, &rows, sent))
                })
            })
            .await
    }

    async fn claim_from(&self, lease: &Lease) -> StoreResult<Option<Lease>> {
        let leases = Arc::clone(&self.leases);
        // Before the server's `now()`, which the lease runs from.
        let sent = tokio::time::Instant::now();
        let runner = serde_json::to_string(&leases.node).map_err(backend)?;
        let holder = serde_json::to_string(&lease.runner).map_err(backend)?;
        let (task, token) = (
            lease.task_id.clone(),
            i64::try_from(lease.token).unwrap_or(i64::MAX),
        );
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    let rows = c
                        .query(
                            "UPDATE leases SET node = $2, runner = $3, token = token + 1,
                                 expires_at = now() + $4::bigint * interval '1 millisecond'
                             WHERE task_id = $1 AND token = $5 AND runner = $6
                             RETURNING task_id, token, (extract(epoch FROM expires_at) * 1000000)::bigint",
                            &[&task.as_str(), &leases.key, &runner, &millis(leases.ttl), &token, &holder],
                        )
                        .await
                        .map_err(pg)?;
                    Ok(claimed(&leases, &rows, sent).pop())
                })
            })
            .await
    }

    async fn release(&self, task: &TaskId) -> StoreResult<()> {
        let Some(token) = self.leases.forget(task) else {
            return Ok(());
        };
        let (key, task) = (self.leases.key.clone(), task.clone());
        self.writer
            .write(move |c| {
                Box::pin(async move {
                    c.execute(
                        "DELETE FROM leases WHERE task_id = $1 AND node = $2 AND token = $3",
                        &[&task.as_str(), &key, &token],
                    )
                    .await
                    .map_err(pg)?;
                    Ok(())
                })
            })
            .await
    }

    async fn live(&self) -> StoreResult<Vec<Lease>> {
        let rows = self
            .rows(
                &format!("{LEASES} WHERE expires_at >= now() ORDER BY task_id"),
                &[],
            )
            .await?;
        rows.iter().map(lease_of).collect()
    }

    async fn holder(&self, task: &TaskId) -> StoreResult<Option<Lease>> {
        let rows = self
            .rows(
                &format!("{LEASES} WHERE task_id = $1 AND expires_at >= now()"),
                &[&task.as_str()],
            )
            .await?;
        rows.first().map(lease_of).transpose()
    }

    async fn lost(&self, task: &TaskId) {
        loop {
            let Some(until) = self.leases.counted_until(task) else {
                return std::future::pending().await;
            };
            tokio::time::sleep_until(until).await;
            // Renewed meanwhile: count on it to the new end.
            if self
                .leases
                .counted_until(task)
                .is_none_or(|later| later <= tokio::time::Instant::now())
            {
                return;
            }
        }
    }

    async fn changed(&self, what: Change) {
        self.leases.wake.of(what).notified().await;
    }
}

/// Tells every node, when the transaction commits, that `what` was written
/// (one notification per kind and transaction: the server folds repeats).
pub(super) async fn notify(c: &Object, what: Change) -> StoreResult<()> {
    let stmt = c
        .prepare_cached("SELECT pg_notify($1, $2)")
        .await
        .map_err(pg)?;
    c.execute(&stmt, &[&CHANNEL, &what.as_str()])
        .await
        .map_err(pg)?;
    Ok(())
}

/// One waker per kind of change.
#[derive(Debug, Default)]
pub(super) struct Wakes {
    tasks: Notify,
    controls: Notify,
    decisions: Notify,
    events: Notify,
}

impl Wakes {
    fn of(&self, what: Change) -> &Notify {
        match what {
            Change::Tasks => &self.tasks,
            Change::Controls => &self.controls,
            Change::Decisions => &self.decisions,
            Change::Events => &self.events,
        }
    }

    fn heard(&self, payload: &str) {
        match Change::ALL.iter().find(|c| c.as_str() == payload) {
            Some(what) => self.of(*what).notify_waiters(),
            None => self.all(),
        }
    }

    /// Everyone looks again (something may have been missed).
    fn all(&self) {
        for what in Change::ALL {
            self.of(what).notify_waiters();
        }
    }
}
