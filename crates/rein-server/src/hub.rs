//! One watcher of the store for every live stream. Streams do not poll: they
//! wait on the hub, which wakes a task's streams when that task's log grows,
//! the all-events streams when any log grows, and the audit streams when an
//! audit record is written. The hub learns of commits at once when this
//! process makes them (the engine's event broadcast, its audit signal), and
//! for other processes' commits by one cheap look at the store's newest
//! positions every [`POLL`] — one query per interval for the whole server,
//! however many streams are open. It runs while any stream does, and stops
//! with the server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rein_core::Engine;
use rein_protocol::TaskId;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How often the hub looks for commits made by other processes.
pub const POLL: Duration = Duration::from_millis(250);
const BATCH: usize = 500;

/// The streams' wake-ups. Each `watch` carries a counter that moves on every
/// change; a stream subscribes before it reads, so no change is missed.
#[derive(Debug)]
pub struct Hub {
    engine: Arc<Engine>,
    shutdown: CancellationToken,
    /// Bumped when any task's log grows.
    global: watch::Sender<u64>,
    /// Bumped when an audit record is written.
    audit: watch::Sender<u64>,
    /// Bumped when the task's log grows, for the tasks that have streams.
    tasks: Mutex<HashMap<TaskId, watch::Sender<u64>>>,
    started: std::sync::Once,
}

impl Hub {
    pub fn new(engine: Arc<Engine>, shutdown: CancellationToken) -> Hub {
        Hub {
            engine,
            shutdown,
            global: watch::Sender::new(0),
            audit: watch::Sender::new(0),
            tasks: Mutex::new(HashMap::new()),
            started: std::sync::Once::new(),
        }
    }

    /// Woken when any task's log grows.
    pub fn all(self: &Arc<Self>) -> watch::Receiver<u64> {
        self.start();
        self.global.subscribe()
    }

    /// Woken when an audit record is written.
    pub fn audit(self: &Arc<Self>) -> watch::Receiver<u64> {
        self.start();
        self.audit.subscribe()
    }

    /// Woken when task `id`'s log grows.
    pub fn task(self: &Arc<Self>, id: &TaskId) -> watch::Receiver<u64> {
        self.start();
        let mut tasks = self
            .tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        tasks
            .entry(id.clone())
            .or_insert_with(|| watch::Sender::new(0))
            .subscribe()
    }

    /// Starts the watcher on first use (it needs a tokio runtime).
    fn start(self: &Arc<Self>) {
        let hub = Arc::clone(self);
        self.started.call_once(move || {
            tokio::spawn(async move { hub.watch().await });
        });
    }

    async fn watch(self: Arc<Self>) {
        let mut published = self.engine.subscribe();
        // Where the store was when last looked at; none yet: the first look
        // wakes every stream, since they may have read before the hub began.
        let mut seen: Option<(u64, u64)> = None;
        loop {
            // A burst of commits is one look at the store.
            while published.try_recv().is_ok() {}
            match (self.engine.store().positions().await, seen) {
                (Ok(now), None) => {
                    self.global.send_modify(|n| *n += 1);
                    self.audit.send_modify(|n| *n += 1);
                    if let Ok(tasks) = self.tasks.lock() {
                        for tx in tasks.values() {
                            tx.send_modify(|n| *n += 1);
                        }
                    }
                    seen = Some(now);
                }
                (Ok((events_now, audit_now)), Some((events_at, audit_at))) => {
                    let mut events_read = events_at;
                    if events_now > events_at {
                        events_read = self.wake_tasks(events_at, events_now).await;
                        self.global.send_modify(|n| *n += 1);
                    }
                    if audit_now > audit_at {
                        self.audit.send_modify(|n| *n += 1);
                    }
                    seen = Some((events_read, audit_now));
                }
                (Err(e), _) => {
                    tracing::warn!(error = %e, "event streams cannot read the store's position");
                }
            }
            // Streams that went away leave their task's entry unwatched.
            if let Ok(mut tasks) = self.tasks.lock() {
                tasks.retain(|_, tx| tx.receiver_count() > 0);
            }
            tokio::select! {
                () = self.shutdown.cancelled() => return,
                _ = published.recv() => {}
                () = self.engine.audited() => {}
                // Another node's commit, where nodes share the store.
                () = self.engine.changed_elsewhere(rein_core::store::Change::Events) => {}
                () = tokio::time::sleep(POLL) => {}
            }
        }
    }

    /// Wakes the streams of every task with events in `(from, to]`; returns
    /// the position it read up to.
    async fn wake_tasks(&self, from: u64, to: u64) -> u64 {
        let watched = self.tasks.lock().map(|t| !t.is_empty()).unwrap_or(false);
        if !watched {
            return to;
        }
        let mut at = from;
        while at < to {
            let Ok(batch) = self.engine.store().all_events(at, BATCH).await else {
                return at;
            };
            let Some(&(last, _)) = batch.last() else {
                return to;
            };
            if let Ok(tasks) = self.tasks.lock() {
                for (_, event) in &batch {
                    if let Some(tx) = event.task_id.as_ref().and_then(|id| tasks.get(id)) {
                        tx.send_modify(|n| *n += 1);
                    }
                }
            }
            at = last;
        }
        at
    }
}
