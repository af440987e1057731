//! A step's journal: what a step that works in turns (an agent step) has done
//! so far, written durably after each turn, so that an attempt resumed after a
//! crash picks up from it instead of doing the work again. One record per task
//! and step, beside the task's log.

use rein_protocol::TaskId;

use crate::EngineError;
use crate::contracts::Records;
use crate::store::{AuditRecord, Record, RecordKind, StoreError};

/// The journal of one step of one task.
#[derive(Debug, Clone)]
pub struct Journal {
    records: Records,
    id: String,
    task_id: String,
}

impl Journal {
    pub fn new(records: Records, task: &TaskId, step: &str) -> Journal {
        Journal {
            records,
            id: format!("{task}.{step}"),
            task_id: task.to_string(),
        }
    }

    /// What was written last, if anything.
    pub async fn load(&self) -> Result<Option<serde_json::Value>, EngineError> {
        Ok(self
            .records
            .store
            .load_record(RecordKind::Journal, &self.id)
            .await?
            .map(|(r, _)| r.body))
    }

    /// Replaces the journal with `body`, durably (the store's commit).
    pub async fn save(&self, body: serde_json::Value) -> Result<(), EngineError> {
        let now = self.records.clock.now();
        let audit = AuditRecord {
            seq: 0,
            at: now,
            who: self.task_id.clone(),
            action: "journal.save".into(),
            subject: self.id.clone(),
            detail: serde_json::Value::Null,
        };
        let store = &self.records.store;
        for _ in 0..16 {
            let record = Record {
                kind: RecordKind::Journal,
                id: self.id.clone(),
                status: None,
                task_id: Some(self.task_id.clone()),
                shared_state_id: None,
                contract_id: None,
                created_at: now,
                body: body.clone(),
            };
            let written = match store.load_record(RecordKind::Journal, &self.id).await? {
                None => store.insert_record(&record, &audit).await,
                Some((old, version)) => {
                    let record = Record {
                        created_at: old.created_at,
                        ..record
                    };
                    store.update_record(&record, version, &audit).await
                }
            };
            match written {
                Ok(()) => return Ok(()),
                Err(StoreError::RecordMoved { .. } | StoreError::RecordExists { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(EngineError::BadRequest(format!(
            "journal {} kept changing underneath its step",
            self.id
        )))
    }
}
