//! Pause and abort requests reach a task's runner through the store, so they work
//! across processes (`rein tasks pause` in one terminal, `rein run` in another).
//! One watcher per engine reads the waiting requests for every task the engine
//! runs and hands each to its runner; it stops when the engine runs nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rein_protocol::{ApprovalRequest, TaskId};
use tokio::sync::mpsc;

use crate::store::{ControlRequest, Store};

#[derive(Debug)]
pub(crate) struct ControlHub {
    store: Arc<dyn Store>,
    poll: Duration,
    state: Mutex<HubState>,
}

/// What reaches a running task from outside its runner.
#[derive(Debug, Clone)]
pub(crate) enum RunnerMessage {
    Control(ControlRequest),
    /// An approval request of the task was decided, delegated or expired.
    Settled(Box<ApprovalRequest>),
}

#[derive(Debug, Default)]
struct HubState {
    runs: HashMap<TaskId, mpsc::UnboundedSender<RunnerMessage>>,
    watching: bool,
}

/// A run registered with the hub; dropping it unregisters the run.
#[derive(Debug)]
pub(crate) struct RunGuard {
    hub: Arc<ControlHub>,
    id: TaskId,
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        if let Ok(mut state) = self.hub.state.lock() {
            state.runs.remove(&self.id);
        }
    }
}

impl ControlHub {
    pub fn new(store: Arc<dyn Store>, poll: Duration) -> Arc<ControlHub> {
        Arc::new(ControlHub {
            store,
            poll,
            state: Mutex::new(HubState::default()),
        })
    }

    /// Registers a run of `id`, or `None` if this engine already runs it. Must be
    /// called on a tokio runtime: it may start the watcher.
    pub fn register(
        self: &Arc<Self>,
        id: &TaskId,
    ) -> Option<(RunGuard, mpsc::UnboundedReceiver<RunnerMessage>)> {
        let mut state = self.state.lock().ok()?;
        if state.runs.contains_key(id) {
            return None;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        state.runs.insert(id.clone(), tx);
        if !state.watching {
            state.watching = true;
            tokio::spawn(watch(Arc::clone(self)));
        }
        Some((
            RunGuard {
                hub: Arc::clone(self),
                id: id.clone(),
            },
            rx,
        ))
    }

    /// Hands a settled request to the task's runner in this engine, if it has one.
    pub fn deliver(&self, request: &ApprovalRequest) {
        let tx = self
            .state
            .lock()
            .ok()
            .and_then(|s| s.runs.get(&request.task_id).cloned());
        if let Some(tx) = tx {
            let _ = tx.send(RunnerMessage::Settled(Box::new(request.clone())));
        }
    }

    pub fn running(&self) -> usize {
        self.state.lock().map(|s| s.runs.len()).unwrap_or(0)
    }

    pub fn is_running(&self, id: &TaskId) -> bool {
        self.state
            .lock()
            .map(|s| s.runs.contains_key(id))
            .unwrap_or(false)
    }
}

async fn watch(hub: Arc<ControlHub>) {
    loop {
        // A store several nodes share says when a request was written
        // anywhere; the poll catches what a notification missed.
        tokio::select! {
            () = tokio::time::sleep(hub.poll) => {}
            () = crate::store::changed_elsewhere(hub.store.as_ref(), crate::store::Change::Controls) => {}
        }
        {
            let Ok(mut state) = hub.state.lock() else {
                return;
            };
            if state.runs.is_empty() {
                state.watching = false;
                return;
            }
        }
        let waiting = match hub.store.pending_controls().await {
            Ok(waiting) => waiting,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read pause/abort requests; trying again");
                continue;
            }
        };
        let mut tasks: Vec<TaskId> = waiting.into_iter().map(|r| r.task_id).collect();
        tasks.dedup();
        for task in tasks {
            hub.hand_over(&task).await;
        }
    }
}

impl ControlHub {
    /// Takes the waiting pause/abort requests of `task` and hands them to its
    /// runner, if this engine runs it (else they wait for the process that does).
    pub async fn hand_over(&self, task: &TaskId) {
        if !self.is_running(task) {
            return; // a task some other process runs
        }
        match self.store.take_controls(task).await {
            Ok(requests) => self.send_controls(task, requests),
            Err(e) => {
                tracing::warn!(error = %e, task = %task, "cannot take pause/abort requests")
            }
        }
    }

    /// Hands requests to the run of `task` in this engine.
    pub fn send_controls(&self, task: &TaskId, requests: Vec<ControlRequest>) {
        let tx = self
            .state
            .lock()
            .ok()
            .and_then(|s| s.runs.get(task).cloned());
        if let Some(tx) = tx {
            for request in requests {
                // The run may have just ended; then the request has no one to reach.
                let _ = tx.send(RunnerMessage::Control(request));
            }
        }
    }
}
