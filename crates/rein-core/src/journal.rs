//! A step's journal: what a step that works in turns (an agent step) has done
//! so far, appended durably entry by entry, so that an attempt resumed after a
//! crash picks up from it instead of doing the work again. Each write adds only
//! the new entries; the journal goes with its task when the task is deleted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rein_protocol::TaskId;

use crate::{EngineError, Store};

/// The journal of one step of one task.
#[derive(Clone)]
pub struct Journal {
    store: Arc<dyn Store>,
    task_id: TaskId,
    step_id: String,
    /// Entries written so far (known after `load`).
    len: Arc<AtomicU64>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("task_id", &self.task_id)
            .field("step_id", &self.step_id)
            .finish()
    }
}

impl Journal {
    pub fn new(store: Arc<dyn Store>, task: &TaskId, step: &str) -> Journal {
        Journal {
            store,
            task_id: task.clone(),
            step_id: step.to_owned(),
            len: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Every entry written, in order. Appends go after them.
    pub async fn load(&self) -> Result<Vec<serde_json::Value>, EngineError> {
        let entries = self
            .store
            .load_journal(&self.task_id, &self.step_id)
            .await?;
        self.len.store(entries.len() as u64, Ordering::SeqCst);
        Ok(entries)
    }

    /// Appends entries, durably (the store's commit), after those loaded or
    /// appended before.
    pub async fn append(&self, entries: &[serde_json::Value]) -> Result<(), EngineError> {
        let from = self.len.load(Ordering::SeqCst);
        self.store
            .append_journal(&self.task_id, &self.step_id, from, entries)
            .await?;
        self.len.fetch_add(entries.len() as u64, Ordering::SeqCst);
        Ok(())
    }
}
