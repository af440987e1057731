//! Wall-clock time for the engine's deadlines (approval expiry). Injected, so tests
//! can run deadlines on tokio's paused clock.

use std::fmt::Debug;

use rein_protocol::Timestamp;

pub trait Clock: Send + Sync + Debug {
    fn now(&self) -> Timestamp;
}

/// The system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        chrono::Utc::now()
    }
}

/// Wall-clock time that advances with tokio's clock: the wall-clock time at creation
/// plus tokio time elapsed since. Under `tokio::time::pause` it moves only when the
/// test's timers do.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    wall: Timestamp,
    start: tokio::time::Instant,
}

impl TokioClock {
    pub fn new() -> TokioClock {
        TokioClock {
            wall: chrono::Utc::now(),
            start: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = tokio::time::Instant::now() - self.start;
        self.wall + chrono::Duration::from_std(elapsed).unwrap_or_default()
    }
}

/// How long from `now` until `at` (zero if it has passed).
pub fn until(now: Timestamp, at: Timestamp) -> std::time::Duration {
    (at - now).to_std().unwrap_or_default()
}
