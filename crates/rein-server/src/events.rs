//! Live events over Server-Sent Events: one task's (`id` = its log sequence) or
//! every task's (`id` = the store's global position). A client resumes with
//! `Last-Event-ID` (or `?after=`) and gets every event after it, none twice, none
//! missed: the store's log is the source, read again whenever the [`crate::hub`]
//! says the log grew (a commit of this process at once, another process's within
//! its poll). A task's stream ends once the task has finished; while it is left
//! in progress by a runner that is gone it sends one `stalled` event (no id) and
//! stays open. Every stream ends when the server shuts down.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use rein_core::process::runner_alive;
use rein_protocol::api::StreamQuery;
use rein_protocol::{HarnessEvent, TaskId, TaskStatus};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::AppState;
use crate::error::{ApiError, ApiResult};

const BATCH: usize = 500;
/// How often a stream of a task run by another process checks that its
/// runner is alive (a process check, no store read).
const STALL_CHECK: Duration = Duration::from_secs(2);

/// The SSE event type sent (once, without an id) when a task is left in progress
/// by a runner that is gone.
pub const STALLED: &str = "stalled";

/// Where the client is: `Last-Event-ID`, else `?after=`, else the start.
pub(crate) fn position(headers: &HeaderMap, query: &StreamQuery) -> ApiResult<u64> {
    match headers.get("last-event-id") {
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| {
                ApiError::bad_request("Last-Event-ID must be the id of an event (a number)")
            }),
        None => Ok(query.after.unwrap_or(0)),
    }
}

fn frame(id: u64, event: &HarnessEvent) -> Event {
    Event::default()
        .id(id.to_string())
        .event(event.event_type().as_str())
        .json_data(event)
        .unwrap_or_else(|_| Event::default().comment("unencodable event"))
}

type Frames = axum::response::Response;

/// One task's events; the stream ends once the task has finished and all its
/// events were sent.
pub async fn task_stream(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Frames> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let id: TaskId = crate::routes::parse_id(&id)?;
    state.engine.summary(&id).await?;
    let mut after = position(&headers, &query)?;
    let (tx, rx) = mpsc::channel::<Result<Event, Infallible>>(64);
    tokio::spawn(async move {
        // Subscribed before the first read: a commit in between wakes it.
        let mut changed = state.hub.task(&id);
        let mut stalled = false;
        loop {
            let events = match state.engine.events(&id, after, BATCH).await {
                Ok(events) => events,
                Err(e) => {
                    let _ = tx
                        .send(Ok(Event::default().event("error").data(e.to_string())))
                        .await;
                    return;
                }
            };
            for event in &events {
                if tx.send(Ok(frame(event.seq, event))).await.is_err() {
                    return; // the client went away
                }
                after = event.seq;
            }
            if events.len() == BATCH {
                continue;
            }
            if !events.is_empty() {
                stalled = false;
            }
            // Finished and fully sent: the stream ends.
            let summary = match state.engine.summary(&id).await {
                Ok(summary) if summary.status.is_terminal() && summary.last_seq <= after => return,
                Ok(summary) => summary,
                Err(_) => return, // deleted
            };
            // Run by another process: whether it is still alive is checked now
            // and then, since a runner that died writes nothing to say so.
            let elsewhere = summary.status == TaskStatus::InProgress
                && summary.last_seq <= after
                && !state.engine.runs_here(&id);
            loop {
                // Left in progress by a runner that is gone: say so once, so a
                // follower need not wait for events that will not come.
                let gone = elsewhere && summary.runner.as_ref().is_some_and(|r| !runner_alive(r));
                if gone && !stalled {
                    stalled = true;
                    let note = Event::default()
                        .event(STALLED)
                        .data(format!("the runner of task {id} is gone; resume it"));
                    if tx.send(Ok(note)).await.is_err() {
                        return;
                    }
                }
                tokio::select! {
                    woke = changed.changed() => {
                        if woke.is_err() {
                            return;
                        }
                        break;
                    }
                    () = tokio::time::sleep(STALL_CHECK), if elsewhere && !stalled => {}
                    () = tx.closed() => return,
                    () = state.shutdown.cancelled() => return,
                }
            }
        }
    });
    Ok(Sse::new(ReceiverStream::new(rx))
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// Every task's events, in the order they were committed.
pub async fn all_stream(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Frames> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let mut after = position(&headers, &query)?;
    let (tx, rx) = mpsc::channel::<Result<Event, Infallible>>(64);
    tokio::spawn(async move {
        let mut changed = state.hub.all();
        loop {
            let events = match state.engine.store().all_events(after, BATCH).await {
                Ok(events) => events,
                Err(e) => {
                    let _ = tx
                        .send(Ok(Event::default().event("error").data(e.to_string())))
                        .await;
                    return;
                }
            };
            for (position, event) in &events {
                if tx.send(Ok(frame(*position, event))).await.is_err() {
                    return;
                }
                after = *position;
            }
            if events.len() == BATCH {
                continue;
            }
            tokio::select! {
                woke = changed.changed() => {
                    if woke.is_err() {
                        return;
                    }
                }
                () = tx.closed() => return,
                () = state.shutdown.cancelled() => return,
            }
        }
    });
    Ok(Sse::new(ReceiverStream::new(rx))
        .keep_alive(KeepAlive::default())
        .into_response())
}
