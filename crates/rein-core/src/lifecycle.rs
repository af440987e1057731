//! The lifecycle as explicit transition tables: (state, event) → state.
//!
//! Every status change of a task or a checkpoint goes through [`task_transition`]
//! or [`checkpoint_transition`]; anything not in a table is an
//! [`IllegalTransition`] error.

use rein_protocol::{CheckpointStatus, TaskStatus};

/// What can happen to a task's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskEvent {
    /// A runner takes up a pending task.
    Start,
    /// A runner takes up a paused task, or an in-progress task whose runner died.
    Resume,
    Pause,
    Complete,
    Fail,
    Cancel,
}

impl TaskEvent {
    pub const ALL: [TaskEvent; 6] = [
        TaskEvent::Start,
        TaskEvent::Resume,
        TaskEvent::Pause,
        TaskEvent::Complete,
        TaskEvent::Fail,
        TaskEvent::Cancel,
    ];
}

/// What can happen to a checkpoint's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointEvent {
    Enter,
    Pass,
    Fail,
    Skip,
}

impl CheckpointEvent {
    pub const ALL: [CheckpointEvent; 4] = [
        CheckpointEvent::Enter,
        CheckpointEvent::Pass,
        CheckpointEvent::Fail,
        CheckpointEvent::Skip,
    ];
}

use CheckpointStatus as C;
use TaskStatus as T;

/// Every legal task transition. Completed, failed and cancelled have no way out.
pub const TASK_TRANSITIONS: &[(TaskStatus, TaskEvent, TaskStatus)] = &[
    (T::Pending, TaskEvent::Start, T::InProgress),
    (T::Pending, TaskEvent::Pause, T::Paused),
    (T::Pending, TaskEvent::Cancel, T::Cancelled),
    (T::InProgress, TaskEvent::Resume, T::InProgress),
    (T::InProgress, TaskEvent::Pause, T::Paused),
    (T::InProgress, TaskEvent::Complete, T::Completed),
    (T::InProgress, TaskEvent::Fail, T::Failed),
    (T::InProgress, TaskEvent::Cancel, T::Cancelled),
    (T::Paused, TaskEvent::Resume, T::InProgress),
    (T::Paused, TaskEvent::Cancel, T::Cancelled),
];

/// Every legal checkpoint transition: pending → in_progress → completed | failed |
/// skipped, and pending → skipped for a step that never ran. Never backwards.
pub const CHECKPOINT_TRANSITIONS: &[(CheckpointStatus, CheckpointEvent, CheckpointStatus)] = &[
    (C::Pending, CheckpointEvent::Enter, C::InProgress),
    (C::Pending, CheckpointEvent::Skip, C::Skipped),
    (C::InProgress, CheckpointEvent::Pass, C::Completed),
    (C::InProgress, CheckpointEvent::Fail, C::Failed),
    (C::InProgress, CheckpointEvent::Skip, C::Skipped),
];

/// A transition not in the table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("illegal transition: cannot {event} a {kind} that is {from}")]
pub struct IllegalTransition {
    pub kind: &'static str,
    pub from: String,
    pub event: String,
}

pub fn task_transition(
    from: TaskStatus,
    event: TaskEvent,
) -> Result<TaskStatus, IllegalTransition> {
    TASK_TRANSITIONS
        .iter()
        .find(|(f, e, _)| *f == from && *e == event)
        .map(|(_, _, to)| *to)
        .ok_or_else(|| IllegalTransition {
            kind: "task",
            from: from.as_str().to_owned(),
            event: format!("{event:?}").to_lowercase(),
        })
}

pub fn checkpoint_transition(
    from: CheckpointStatus,
    event: CheckpointEvent,
) -> Result<CheckpointStatus, IllegalTransition> {
    CHECKPOINT_TRANSITIONS
        .iter()
        .find(|(f, e, _)| *f == from && *e == event)
        .map(|(_, _, to)| *to)
        .ok_or_else(|| IllegalTransition {
            kind: "checkpoint",
            from: from.as_str().to_owned(),
            event: format!("{event:?}").to_lowercase(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole matrix, written out: every (status, event) pair and what it must give.
    #[test]
    fn every_task_transition_is_as_specified() {
        use TaskEvent::*;
        let expect = |from: TaskStatus, ev: TaskEvent| -> Option<TaskStatus> {
            match (from, ev) {
                (T::Pending, Start) => Some(T::InProgress),
                (T::Pending, Pause) => Some(T::Paused),
                (T::Pending, Cancel) => Some(T::Cancelled),
                (T::InProgress, Resume) => Some(T::InProgress),
                (T::InProgress, Pause) => Some(T::Paused),
                (T::InProgress, Complete) => Some(T::Completed),
                (T::InProgress, Fail) => Some(T::Failed),
                (T::InProgress, Cancel) => Some(T::Cancelled),
                (T::Paused, Resume) => Some(T::InProgress),
                (T::Paused, Cancel) => Some(T::Cancelled),
                _ => None,
            }
        };
        let mut legal = 0;
        for from in TaskStatus::ALL {
            for ev in TaskEvent::ALL {
                let got = task_transition(from, ev);
                match expect(from, ev) {
                    Some(to) => {
                        legal += 1;
                        assert_eq!(got, Ok(to), "{from:?} + {ev:?}");
                    }
                    None => {
                        let err = got.expect_err("must be illegal");
                        assert_eq!(err.from, from.as_str());
                        assert!(err.to_string().contains("illegal transition"));
                    }
                }
            }
        }
        assert_eq!(legal, TASK_TRANSITIONS.len());
    }

    #[test]
    fn terminal_tasks_have_no_way_out() {
        for from in [T::Completed, T::Failed, T::Cancelled] {
            for ev in TaskEvent::ALL {
                assert!(task_transition(from, ev).is_err(), "{from:?} + {ev:?}");
            }
        }
    }

    #[test]
    fn every_checkpoint_transition_is_as_specified() {
        use CheckpointEvent::*;
        let expect = |from: CheckpointStatus, ev: CheckpointEvent| match (from, ev) {
            (C::Pending, Enter) => Some(C::InProgress),
            (C::Pending, Skip) => Some(C::Skipped),
            (C::InProgress, Pass) => Some(C::Completed),
            (C::InProgress, CheckpointEvent::Fail) => Some(C::Failed),
            (C::InProgress, Skip) => Some(C::Skipped),
            _ => None,
        };
        for from in CheckpointStatus::ALL {
            for ev in CheckpointEvent::ALL {
                assert_eq!(
                    checkpoint_transition(from, ev).ok(),
                    expect(from, ev),
                    "{from:?} + {ev:?}"
                );
            }
        }
    }

    #[test]
    fn checkpoints_never_go_backwards() {
        for from in [C::Completed, C::Failed, C::Skipped] {
            for ev in CheckpointEvent::ALL {
                assert!(checkpoint_transition(from, ev).is_err());
            }
        }
        assert!(checkpoint_transition(C::InProgress, CheckpointEvent::Enter).is_err());
    }
}
