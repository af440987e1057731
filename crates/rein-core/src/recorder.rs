//! Records changes to one task: each change becomes an event, is applied to the
//! in-memory state at once (so an illegal change fails before it is stored), and
//! waits in a batch until [`Recorder::flush`] commits the batch in one transaction.

use std::sync::Arc;

use rein_protocol::ids::new_span_id;
use rein_protocol::{
    ApprovalRequest, ApprovedBy, Checkpoint, CheckpointId, CheckpointType, EventId, HarnessEvent,
    TaskChange, TaskDecomposition, TaskState,
};
use tokio::sync::broadcast;

use crate::error::{EngineError, Result};
use crate::fold;
use crate::store::{NewTask, Store, TaskWrite};

/// The span an event belongs to.
#[derive(Debug, Clone)]
pub struct SpanRef {
    pub span_id: String,
    pub parent_span_id: Option<String>,
}

impl SpanRef {
    /// A new child span of `parent`.
    pub fn child_of(parent: &str) -> SpanRef {
        SpanRef {
            span_id: new_span_id(),
            parent_span_id: Some(parent.to_owned()),
        }
    }
}

#[derive(Debug)]
pub struct Recorder {
    pub state: TaskState,
    batch: Vec<HarnessEvent>,
    /// `last_seq` as the store has it: where the batch starts.
    stored_seq: u64,
    /// Approval requests raised by the batch, stored with it.
    approvals: Vec<ApprovalRequest>,
    /// Ledger entries to store with the batch.
    ledger: Vec<rein_protocol::LedgerEntry>,
    /// A plan to store with the batch, replacing the task's.
    plan: Option<TaskDecomposition>,
    /// The ids of the state's checkpoints, so a new one is checked for a
    /// duplicate in O(1) rather than against every checkpoint.
    checkpoint_ids: CheckpointIds,
}

/// The ids of the first `known` checkpoints of a state, caught up on use.
#[derive(Debug, Default)]
struct CheckpointIds {
    ids: rustc_hash::FxHashSet<CheckpointId>,
    known: usize,
}

impl CheckpointIds {
    /// Whether `state` already has a checkpoint `id`.
    fn contains(&mut self, state: &TaskState, id: &CheckpointId) -> bool {
        for cp in state.checkpoints.get(self.known..).unwrap_or_default() {
            self.ids.insert(cp.id.clone());
        }
        self.known = state.checkpoints.len();
        self.ids.contains(id)
    }
}

impl Recorder {
    /// Continues recording to a task loaded from the store.
    pub fn resume(state: TaskState) -> Recorder {
        let stored_seq = state.head.last_seq;
        Recorder {
            state,
            batch: Vec::new(),
            stored_seq,
            approvals: Vec::new(),
            ledger: Vec::new(),
            plan: None,
            checkpoint_ids: CheckpointIds::default(),
        }
    }

    /// Starts a new task from its first event (`task_created` or `task_restored`).
    pub fn genesis(first: HarnessEvent) -> Result<Recorder> {
        let task_id = first.task_id.clone();
        let state = fold::genesis(&first).map_err(|error| EngineError::Corrupt {
            task_id: task_id.unwrap_or_default(),
            error,
        })?;
        Ok(Recorder {
            state,
            batch: vec![first],
            stored_seq: 0,
            approvals: Vec::new(),
            ledger: Vec::new(),
            plan: None,
            checkpoint_ids: CheckpointIds::default(),
        })
    }

    pub fn task_span(&self) -> SpanRef {
        SpanRef {
            span_id: self.state.head.span_id.clone(),
            parent_span_id: None,
        }
    }

    /// Records a change in the task's own span.
    pub fn task_event(&mut self, change: TaskChange) -> Result<()> {
        let span = self.task_span();
        self.record(change, &span)
    }

    /// Records a change, applying it to the in-memory state.
    pub fn record(&mut self, change: TaskChange, span: &SpanRef) -> Result<()> {
        let event = HarnessEvent {
            id: EventId::new(),
            seq: self.state.head.last_seq + 1,
            timestamp: chrono::Utc::now(),
            checkpoint_id: change.checkpoint_id().cloned(),
            change,
            task_id: Some(self.state.head.id.clone()),
            session_id: self.state.head.session_id.clone(),
            trace_id: self.state.head.trace_id.clone(),
            span_id: span.span_id.clone(),
            parent_span_id: span.parent_span_id.clone(),
        };
        let applied = match &event.change {
            TaskChange::CheckpointCreated { checkpoint }
                if self.checkpoint_ids.contains(&self.state, &checkpoint.id) =>
            {
                Err(fold::FoldError::DuplicateCheckpoint {
                    seq: event.seq,
                    checkpoint_id: checkpoint.id.to_string(),
                })
            }
            _ => fold::apply_checked(&mut self.state, &event, fold::Checked::NewCheckpointIsNew),
        };
        applied.map_err(|error| EngineError::Corrupt {
            task_id: self.state.head.id.clone(),
            error,
        })?;
        self.batch.push(event);
        Ok(())
    }

    /// Records a new checkpoint, `pending`, and returns its id.
    pub fn create_checkpoint(
        &mut self,
        checkpoint: Checkpoint,
        span: &SpanRef,
    ) -> Result<CheckpointId> {
        let id = checkpoint.id.clone();
        self.record(
            TaskChange::CheckpointCreated {
                checkpoint: Box::new(checkpoint),
            },
            span,
        )?;
        Ok(id)
    }

    /// Records a new checkpoint and enters it (`in_progress`); returns its id.
    pub fn enter_checkpoint(
        &mut self,
        checkpoint: Checkpoint,
        span: &SpanRef,
    ) -> Result<CheckpointId> {
        let id = self.create_checkpoint(checkpoint, span)?;
        self.record(
            TaskChange::CheckpointEntered {
                checkpoint_id: id.clone(),
            },
            span,
        )?;
        Ok(id)
    }

    /// Raises an approval request: recorded in the log now, stored with the batch.
    pub fn request_approval(&mut self, request: ApprovalRequest, span: &SpanRef) -> Result<()> {
        self.record(
            TaskChange::HumanApprovalRequested {
                request: Box::new(request.clone()),
            },
            span,
        )?;
        self.approvals.push(request);
        Ok(())
    }

    /// Adds a ledger entry to the batch: stored, sealed, with its events.
    pub fn record_ledger(&mut self, entry: rein_protocol::LedgerEntry) {
        self.ledger.push(entry);
    }

    /// Stores `plan` as the task's with the batch (which must record why).
    pub fn replace_plan(&mut self, plan: TaskDecomposition) {
        self.plan = Some(plan);
    }

    pub fn has_unsaved(&self) -> bool {
        !self.batch.is_empty()
    }

    fn take_write(&mut self) -> TaskWrite {
        let write = TaskWrite {
            task_id: self.state.head.id.clone(),
            expected_seq: self.stored_seq,
            events: std::mem::take(&mut self.batch),
            summary: self.state.head.summary(),
            approvals: std::mem::take(&mut self.approvals),
            ledger: std::mem::take(&mut self.ledger),
            plan: self.plan.take(),
        };
        self.stored_seq = self.state.head.last_seq;
        write
    }

    /// Commits the batch; publishes its events once they are durable.
    pub async fn flush(
        &mut self,
        store: &Arc<dyn Store>,
        events: &broadcast::Sender<HarnessEvent>,
    ) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let write = self.take_write();
        let published = (events.receiver_count() > 0).then(|| write.events.clone());
        store.save(write).await?;
        publish(events, published);
        Ok(())
    }

    /// Commits a new task with its plan.
    pub async fn flush_new(
        &mut self,
        plan: TaskDecomposition,
        store: &Arc<dyn Store>,
        events: &broadcast::Sender<HarnessEvent>,
    ) -> Result<()> {
        let write = self.take_write();
        let published = (events.receiver_count() > 0).then(|| write.events.clone());
        store.create(NewTask { plan, write }).await?;
        publish(events, published);
        Ok(())
    }
}

fn publish(events: &broadcast::Sender<HarnessEvent>, published: Option<Vec<HarnessEvent>>) {
    for event in published.into_iter().flatten() {
        // No receiver left is fine: nobody is watching.
        let _ = events.send(event);
    }
}

/// Records a checkpoint of the engine's own (no plan step) that passes at once.
pub(crate) fn system_checkpoint(
    rec: &mut Recorder,
    kind: CheckpointType,
    input: Option<serde_json::Value>,
    output: Option<serde_json::Value>,
    approved_by: ApprovedBy,
) -> Result<CheckpointId> {
    let span = SpanRef::child_of(&rec.state.head.span_id);
    let checkpoint = Checkpoint {
        input,
        ..Checkpoint::pending(rec.state.head.id.clone(), None, kind, 1)
    };
    let id = rec.enter_checkpoint(checkpoint, &span)?;
    rec.record(
        TaskChange::CheckpointPassed {
            checkpoint_id: id.clone(),
            duration_ms: 0,
            output,
            approved_by: Some(approved_by),
        },
        &span,
    )?;
    Ok(id)
}

/// A checkpoint that ends, failed for good, because `by` aborted its task.
pub(crate) fn aborted_checkpoint(
    checkpoint_id: CheckpointId,
    duration_ms: u64,
    by: &str,
) -> TaskChange {
    TaskChange::CheckpointFailed {
        checkpoint_id,
        duration_ms,
        error: format!("cancelled: the task was aborted by {by}"),
        output: None,
        will_retry: false,
        error_type: None,
        retry_at: None,
    }
}

/// Milliseconds from `since` until now (0 for a time ahead of the clock).
pub(crate) fn elapsed_ms(since: rein_protocol::Timestamp) -> u64 {
    u64::try_from((chrono::Utc::now() - since).num_milliseconds().max(0)).unwrap_or(0)
}
