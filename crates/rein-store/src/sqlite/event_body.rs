//! How an event is kept in `events.body`. Most of a task's events repeat what
//! the row and the task already hold: the position (`seq`, a column), the
//! task's id, its session and its trace (the task's row and summary). An event
//! whose task, session and trace are its task's is stored without them (a
//! "slim" body, a third smaller), and a read puts them back from the row and
//! the task; any other event keeps its whole body. A step's commit then writes
//! fewer bytes, so the log's pages fill (and the file grows) less often.
//!
//! A slim body also leaves out the event's `checkpoint_id` when it is the one
//! its change names (every event rein records; a read takes it from the
//! change), so a step's three checkpoint events do not each say it twice.
//!
//! A slim body is one without `seq`: every whole body has it. Bodies written
//! before slim ones existed are whole, and read as they were; slim ones
//! written before the checkpoint id was left out carry it, and are read with it.

use rein_protocol::{
    CheckpointId, EventId, HarnessEvent, TaskChange, TaskId, TaskSummary, Timestamp,
};
use serde::{Deserialize, Serialize};

/// An event as stored when its task, session and trace are its task's.
#[derive(Serialize)]
struct Slim<'a> {
    id: &'a EventId,
    timestamp: &'a Timestamp,
    #[serde(flatten)]
    change: &'a TaskChange,
    #[serde(skip_serializing_if = "Option::is_none")]
    checkpoint_id: Option<&'a CheckpointId>,
    span_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_span_id: Option<&'a str>,
}

/// The body to store for `event`, a write of the task `summary` describes.
pub(super) fn encode(event: &HarnessEvent, summary: &TaskSummary) -> serde_json::Result<String> {
    let own = event.task_id.as_ref() == Some(&summary.id)
        && event.session_id == summary.session_id
        && event.trace_id == summary.trace_id;
    // No checkpoint id where the change names one could not be told from the
    // change's own, left out: such an event keeps its whole body.
    let named = event.change.checkpoint_id();
    if !own || (event.checkpoint_id.is_none() && named.is_some()) {
        return serde_json::to_string(event);
    }
    serde_json::to_string(&Slim {
        id: &event.id,
        timestamp: &event.timestamp,
        change: &event.change,
        checkpoint_id: event.checkpoint_id.as_ref().filter(|&id| Some(id) != named),
        span_id: &event.span_id,
        parent_span_id: event.parent_span_id.as_deref(),
    })
}

/// A stored body, slim or whole.
#[derive(Deserialize)]
struct Stored {
    id: EventId,
    #[serde(default)]
    seq: Option<u64>,
    timestamp: Timestamp,
    #[serde(flatten)]
    change: TaskChange,
    #[serde(default)]
    task_id: Option<TaskId>,
    #[serde(default)]
    checkpoint_id: Option<CheckpointId>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    trace_id: Option<String>,
    span_id: String,
    #[serde(default)]
    parent_span_id: Option<String>,
}

/// What a read knows of a stored event besides its body: its row's position
/// and its task's id, session and trace.
pub(super) struct Row<'a> {
    pub seq: u64,
    pub task_id: &'a str,
    pub session_id: &'a str,
    pub trace_id: &'a str,
}

/// The event a stored body is, given its row.
pub(super) fn decode(body: &str, row: &Row<'_>) -> Result<HarnessEvent, String> {
    let stored: Stored = serde_json::from_str(body).map_err(|e| e.to_string())?;
    let slim = stored.seq.is_none();
    let whole = |field: Option<String>, name: &str| {
        field.ok_or_else(|| format!("a whole event body without `{name}`"))
    };
    let (task_id, session_id, trace_id, checkpoint_id) = if slim {
        (
            Some(TaskId::parse(row.task_id).map_err(|e| e.to_string())?),
            row.session_id.to_owned(),
            row.trace_id.to_owned(),
            stored
                .checkpoint_id
                .or_else(|| stored.change.checkpoint_id().cloned()),
        )
    } else {
        (
            stored.task_id,
            whole(stored.session_id, "session_id")?,
            whole(stored.trace_id, "trace_id")?,
            stored.checkpoint_id,
        )
    };
    Ok(HarnessEvent {
        id: stored.id,
        seq: stored.seq.unwrap_or(row.seq),
        timestamp: stored.timestamp,
        change: stored.change,
        task_id,
        checkpoint_id,
        session_id,
        trace_id,
        span_id: stored.span_id,
        parent_span_id: stored.parent_span_id,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn event(summary: &TaskSummary) -> HarnessEvent {
        HarnessEvent {
            id: EventId::new(),
            seq: 7,
            timestamp: chrono::Utc::now(),
            change: TaskChange::TaskPaused {
                reason: "a \"quoted\" reason".into(),
            },
            task_id: Some(summary.id.clone()),
            checkpoint_id: Some(CheckpointId::new()),
            session_id: summary.session_id.clone(),
            trace_id: summary.trace_id.clone(),
            span_id: "00f067aa0ba902b7".into(),
            parent_span_id: Some("b7ad6b7169203331".into()),
        }
    }

    fn summary() -> TaskSummary {
        serde_json::from_value(serde_json::json!({
            "id": TaskId::new().to_string(),
            "session_id": "ses_one",
            "description": "d",
            "status": "in_progress",
            "steps_total": 1,
            "steps_finished": 0,
            "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
            "last_seq": 7,
            "created_at": "2026-12-05T00:00:00Z",
            "updated_at": "2026-12-05T00:00:00Z"
        }))
        .unwrap()
    }

    /// A stored body read back as the row of `summary`'s task at position 7.
    fn read(body: &str, summary: &TaskSummary) -> Result<HarnessEvent, String> {
        let id = summary.id.to_string();
        let row = Row {
            seq: 7,
            task_id: &id,
            session_id: &summary.session_id,
            trace_id: &summary.trace_id,
        };
        decode(body, &row)
    }

    #[test]
    fn an_event_of_its_own_task_is_stored_slim_and_read_back_whole() {
        let summary = summary();
        let event = event(&summary);
        let body = encode(&event, &summary).unwrap();
        let whole = serde_json::to_string(&event).unwrap();
        assert!(body.len() + 90 < whole.len(), "{body} vs {whole}");
        for field in ["\"seq\"", "\"task_id\"", "\"session_id\"", "\"trace_id\""] {
            assert!(!body.contains(field), "{field} in {body}");
        }
        assert_eq!(read(&body, &summary).unwrap(), event);
        // A whole body (any written before, or one not of its task's) reads as it is.
        assert_eq!(read(&whole, &summary).unwrap(), event);
    }

    #[test]
    fn a_checkpoint_id_its_change_names_is_stored_once() {
        let summary = summary();
        let checkpoint = CheckpointId::new();
        let mut event = event(&summary);
        event.change = TaskChange::CheckpointPassed {
            checkpoint_id: checkpoint.clone(),
            duration_ms: 3,
            output: None,
            approved_by: None,
        };
        event.checkpoint_id = Some(checkpoint.clone());
        let body = encode(&event, &summary).unwrap();
        assert_eq!(body.matches(checkpoint.as_str()).count(), 1, "{body}");
        assert_eq!(read(&body, &summary).unwrap(), event);
        // A slim body written before, with the id twice, reads the same.
        let mut before: serde_json::Value = serde_json::from_str(&body).unwrap();
        before["checkpoint_id"] = serde_json::json!(checkpoint);
        assert_eq!(read(&before.to_string(), &summary).unwrap(), event);
        // One naming another checkpoint keeps it; one naming none where its
        // change names one is stored whole (a read could not tell it apart).
        let other = CheckpointId::new();
        event.checkpoint_id = Some(other.clone());
        let body = encode(&event, &summary).unwrap();
        assert!(body.contains(other.as_str()), "{body}");
        assert_eq!(read(&body, &summary).unwrap(), event);
        event.checkpoint_id = None;
        let body = encode(&event, &summary).unwrap();
        assert_eq!(body, serde_json::to_string(&event).unwrap());
        assert_eq!(read(&body, &summary).unwrap(), event);
    }

    #[test]
    fn an_event_unlike_its_task_keeps_its_whole_body() {
        let summary = summary();
        let mut event = event(&summary);
        event.trace_id = "0af7651916cd43dd8448eb211c80319c".into();
        let body = encode(&event, &summary).unwrap();
        assert_eq!(body, serde_json::to_string(&event).unwrap());
        assert_eq!(read(&body, &summary).unwrap(), event);
        let broken = body.replace("\"session_id\"", "\"session\"");
        assert!(read(&broken, &summary).unwrap_err().contains("session_id"));
    }
}
