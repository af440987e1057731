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

use axum::extract::{Path, State};
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
use crate::routes::Params;

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

/// Where a stream's frames go: the client's end of the response.
pub(crate) type FrameSink = mpsc::Sender<Result<Event, Infallible>>;

/// One log tailed as Server-Sent Events: read from a position in batches,
/// each item sent as a frame, and waited on when it has nothing newer.
/// [`tail`] is the loop every such stream shares.
pub(crate) trait Tailed: Send + 'static {
    type Item: Send + Sync;
    /// Up to `limit` items after position `after`, oldest first.
    fn read(
        &mut self,
        after: u64,
        limit: usize,
    ) -> impl std::future::Future<Output = Result<Vec<Self::Item>, String>> + Send;
    /// An item's position: what a client resumes after.
    fn position(item: &Self::Item) -> u64;
    fn frame(item: &Self::Item) -> Event;
    /// Waits until there may be items after `after` (`sent`: whether the
    /// last read sent any); `false` ends the stream. Only a wake-up needs
    /// waiting for here: the client going away and the server's shutdown are
    /// [`tail`]'s.
    fn wait(
        &mut self,
        after: u64,
        sent: bool,
        frames: &FrameSink,
    ) -> impl std::future::Future<Output = bool> + Send;
}

/// Streams `log` from `after` as Server-Sent Events, `batch` items a read,
/// until the client goes away, the log says it has ended, or the server shuts
/// down. A read that fails is sent as one `error` event and ends the stream.
pub(crate) fn tail<T: Tailed>(
    state: &AppState,
    mut log: T,
    mut after: u64,
    batch: usize,
) -> Frames {
    let shutdown = state.shutdown.clone();
    stream(64, move |tx| async move {
        loop {
            let items = match log.read(after, batch).await {
                Ok(items) => items,
                Err(e) => {
                    let _ = tx.send(Ok(Event::default().event("error").data(e))).await;
                    return;
                }
            };
            for item in &items {
                if tx.send(Ok(T::frame(item))).await.is_err() {
                    return; // the client went away
                }
                after = T::position(item);
            }
            if items.len() == batch {
                continue;
            }
            tokio::select! {
                more = log.wait(after, !items.is_empty(), &tx) => if !more { return },
                () = tx.closed() => return,
                () = shutdown.cancelled() => return,
            }
        }
    })
}

/// A Server-Sent Events response whose frames `produce` sends (`capacity`
/// frames may wait for the client), with the keep-alive comments every
/// stream of rein's has.
pub(crate) fn stream<F, Fut>(capacity: usize, produce: F) -> Frames
where
    F: FnOnce(FrameSink) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Result<Event, Infallible>>(capacity);
    tokio::spawn(produce(tx));
    Sse::new(ReceiverStream::new(rx))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// One task's log, as [`task_stream`] tails it.
struct TaskLog {
    state: AppState,
    id: TaskId,
    changed: tokio::sync::watch::Receiver<u64>,
    stalled: bool,
}

impl Tailed for TaskLog {
    type Item = HarnessEvent;

    async fn read(&mut self, after: u64, limit: usize) -> Result<Vec<HarnessEvent>, String> {
        self.state
            .engine
            .events(&self.id, after, limit)
            .await
            .map_err(|e| e.to_string())
    }

    fn position(event: &HarnessEvent) -> u64 {
        event.seq
    }

    fn frame(event: &HarnessEvent) -> Event {
        frame(event.seq, event)
    }

    async fn wait(&mut self, after: u64, sent: bool, frames: &FrameSink) -> bool {
        if sent {
            self.stalled = false;
        }
        let id = &self.id;
        // Finished and fully sent: the stream ends.
        let summary = match self.state.engine.summary(id).await {
            Ok(summary) if summary.status.is_terminal() && summary.last_seq <= after => {
                return false;
            }
            Ok(summary) => summary,
            Err(_) => return false, // deleted
        };
        // Run by another process: whether it is still alive is checked now
        // and then, since a runner that died writes nothing to say so.
        let elsewhere = summary.status == TaskStatus::InProgress
            && summary.last_seq <= after
            && !self.state.engine.runs_here(id);
        loop {
            // Left in progress by a runner that is gone: say so once, so a
            // follower need not wait for events that will not come.
            let gone = elsewhere && summary.runner.as_ref().is_some_and(|r| !runner_alive(r));
            if gone && !self.stalled {
                self.stalled = true;
                let note = Event::default()
                    .event(STALLED)
                    .data(format!("the runner of task {id} is gone; resume it"));
                if frames.send(Ok(note)).await.is_err() {
                    return false;
                }
            }
            tokio::select! {
                woke = self.changed.changed() => return woke.is_ok(),
                () = tokio::time::sleep(STALL_CHECK), if elsewhere && !self.stalled => {}
            }
        }
    }
}

/// One task's events; the stream ends once the task has finished and all its
/// events were sent.
pub async fn task_stream(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Params(query): Params<StreamQuery>,
) -> ApiResult<Frames> {
    let id: TaskId = crate::routes::parse_id(&id)?;
    state.engine.summary(&id).await?;
    let after = position(&headers, &query)?;
    // Subscribed before the first read: a commit in between wakes it.
    let log = TaskLog {
        changed: state.hub.task(&id),
        state: state.clone(),
        id,
        stalled: false,
    };
    Ok(tail(&state, log, after, BATCH))
}

/// Every task's log, in the order of the store's commits.
struct AllLog {
    state: AppState,
    changed: tokio::sync::watch::Receiver<u64>,
}

impl Tailed for AllLog {
    type Item = (u64, HarnessEvent);

    async fn read(&mut self, after: u64, limit: usize) -> Result<Vec<(u64, HarnessEvent)>, String> {
        self.state
            .engine
            .store()
            .all_events(after, limit)
            .await
            .map_err(|e| e.to_string())
    }

    fn position((position, _): &(u64, HarnessEvent)) -> u64 {
        *position
    }

    fn frame((position, event): &(u64, HarnessEvent)) -> Event {
        frame(*position, event)
    }

    async fn wait(&mut self, _after: u64, _sent: bool, _frames: &FrameSink) -> bool {
        self.changed.changed().await.is_ok()
    }
}

/// Every task's events, in the order they were committed.
pub async fn all_stream(
    State(state): State<AppState>,
    headers: HeaderMap,
    Params(query): Params<StreamQuery>,
) -> ApiResult<Frames> {
    let after = position(&headers, &query)?;
    let log = AllLog {
        changed: state.hub.all(),
        state: state.clone(),
    };
    Ok(tail(&state, log, after, BATCH))
}
