//! What the server's tasks have done lately, for the Control UI's chart:
//! checkpoints passed and failed, and approval decisions taken in, per minute
//! over the last half hour. Counted from the events this server's engine
//! records as they become durable (its broadcast), from the moment the server
//! started: work done by other processes on the same store, or before the
//! server started, is in the counters of `/admin/metrics` but not here.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rein_core::Engine;
use rein_protocol::{HarnessEvent, TaskChange, Timestamp};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

/// The length of one bucket, in seconds.
pub const BUCKET_SECS: i64 = 60;
/// How many buckets are kept (and drawn).
pub const BUCKETS: usize = 30;

/// One minute of activity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bucket {
    /// Its start, in seconds since the Unix epoch (a multiple of
    /// [`BUCKET_SECS`]).
    pub start: i64,
    pub passed: u64,
    pub failed: u64,
    pub decisions: u64,
}

#[derive(Debug, Default)]
pub struct Activity {
    buckets: Mutex<VecDeque<Bucket>>,
    /// Events the follower fell too far behind to count.
    missed: AtomicU64,
}

impl Activity {
    /// Counts `event` in the minute it happened.
    pub fn record(&self, event: &HarnessEvent) {
        let add: fn(&mut Bucket) = match &event.change {
            TaskChange::CheckpointPassed { .. } => |b| b.passed += 1,
            TaskChange::CheckpointFailed { .. } => |b| b.failed += 1,
            TaskChange::HumanApprovalReceived {
                response: Some(_), ..
            } => |b| b.decisions += 1,
            _ => return,
        };
        let start = event.timestamp.timestamp().div_euclid(BUCKET_SECS) * BUCKET_SECS;
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Events arrive in about the order they happened; one a little late
        // goes into its own minute if that is still kept.
        let at = match buckets.iter().rposition(|b| b.start <= start) {
            Some(i) if buckets[i].start == start => i,
            found => {
                let i = found.map_or(0, |i| i + 1);
                buckets.insert(
                    i,
                    Bucket {
                        start,
                        ..Bucket::default()
                    },
                );
                i
            }
        };
        add(&mut buckets[at]);
        while buckets.len() > BUCKETS {
            buckets.pop_front();
        }
    }

    /// The last [`BUCKETS`] minutes up to `now`, oldest first, a minute with
    /// nothing in it as zeros.
    pub fn window(&self, now: Timestamp) -> Vec<Bucket> {
        let last = now.timestamp().div_euclid(BUCKET_SECS) * BUCKET_SECS;
        let first = last - (BUCKETS as i64 - 1) * BUCKET_SECS;
        let buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (0..BUCKETS as i64)
            .map(|i| {
                let start = first + i * BUCKET_SECS;
                buckets
                    .iter()
                    .find(|b| b.start == start)
                    .copied()
                    .unwrap_or(Bucket {
                        start,
                        ..Bucket::default()
                    })
            })
            .collect()
    }

    /// How many events went uncounted because the follower fell behind.
    pub fn missed(&self) -> u64 {
        self.missed.load(Ordering::Relaxed)
    }

    /// Counts `engine`'s events until `shutdown`.
    pub fn follow(self: &Arc<Self>, engine: &Engine, shutdown: CancellationToken) {
        let mut events = engine.subscribe();
        let activity = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    () = shutdown.cancelled() => return,
                    event = events.recv() => event,
                };
                match event {
                    Ok(event) => activity.record(&event),
                    Err(RecvError::Lagged(n)) => {
                        activity.missed.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(at: &str, change: TaskChange) -> HarnessEvent {
        HarnessEvent {
            id: rein_protocol::EventId::new(),
            seq: 1,
            timestamp: chrono::DateTime::parse_from_rfc3339(at).unwrap().to_utc(),
            change,
            task_id: None,
            checkpoint_id: None,
            session_id: "s".into(),
            trace_id: "t".into(),
            span_id: "p".into(),
            parent_span_id: None,
        }
    }

    fn passed() -> TaskChange {
        TaskChange::CheckpointPassed {
            checkpoint_id: rein_protocol::CheckpointId::new(),
            duration_ms: 1,
            output: None,
            approved_by: None,
        }
    }

    fn failed() -> TaskChange {
        TaskChange::CheckpointFailed {
            checkpoint_id: rein_protocol::CheckpointId::new(),
            duration_ms: 1,
            error: "no".into(),
            output: None,
            will_retry: false,
            error_type: None,
            retry_at: None,
        }
    }

    #[test]
    fn counts_each_minute_and_keeps_the_last_half_hour() {
        let activity = Activity::default();
        activity.record(&event("2026-12-03T10:00:05Z", passed()));
        activity.record(&event("2026-12-03T10:00:59Z", passed()));
        activity.record(&event("2026-12-03T10:02:00Z", failed()));
        // Late, into a minute already passed.
        activity.record(&event("2026-12-03T10:01:30Z", passed()));
        // Not counted: what is neither a checkpoint nor a decision.
        activity.record(&event(
            "2026-12-03T10:02:10Z",
            TaskChange::TaskPaused { reason: "x".into() },
        ));
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-03T10:02:30Z")
            .unwrap()
            .to_utc();
        let window = activity.window(now);
        assert_eq!(window.len(), BUCKETS);
        let last = &window[BUCKETS - 3..];
        assert_eq!(
            last.iter()
                .map(|b| (b.passed, b.failed))
                .collect::<Vec<_>>(),
            [(2, 0), (1, 0), (0, 1)]
        );
        assert_eq!(last[2].start, now.timestamp() - 30);
        assert!(window[..BUCKETS - 3].iter().all(|b| *b
            == Bucket {
                start: b.start,
                ..Bucket::default()
            }));
        // An hour on, what was counted has left the window and the store.
        for minute in 0..40 {
            activity.record(&event(&format!("2026-12-03T11:{minute:02}:00Z"), passed()));
        }
        assert_eq!(activity.buckets.lock().unwrap().len(), BUCKETS);
        let later = chrono::DateTime::parse_from_rfc3339("2026-12-03T11:39:00Z")
            .unwrap()
            .to_utc();
        assert_eq!(
            activity.window(later).iter().map(|b| b.passed).sum::<u64>(),
            BUCKETS as u64
        );
    }
}
