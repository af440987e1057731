//! Each step's progress through its lifecycle ([`crate::lifecycle::Steps`]),
//! and the moves of the run that change it.

use super::*;

/// A step's place in its lifecycle ([`Steps`]), with what the runner keeps
/// for it there.
#[derive(Debug)]
pub(super) enum Progress {
    NotStarted,
    Running {
        checkpoint: CheckpointId,
        span: SpanRef,
        token: CancellationToken,
    },
    /// Its attempt has ended; the runner is recording the outcome.
    Ended,
    /// Waiting for a person to settle `request`.
    Awaiting {
        checkpoint: CheckpointId,
        span: SpanRef,
        request: Box<ApprovalRequest>,
    },
    /// To run again once `until` has passed (a durable retry timer).
    Delayed {
        until: rein_protocol::Timestamp,
    },
    /// Left in progress by a runner that stopped.
    Interrupted {
        checkpoint: CheckpointId,
        started_at: rein_protocol::Timestamp,
    },
    Completed,
    /// Skipped on purpose: counts as done for the steps that depend on it.
    Skipped,
    Failed,
    /// Not run because a dependency failed.
    DependencyFailed,
}

impl Progress {
    pub(super) fn state(&self) -> StepState {
        match self {
            Progress::NotStarted => StepState::NotStarted,
            Progress::Running { .. } => StepState::Running,
            Progress::Ended => StepState::Ended,
            Progress::Awaiting { .. } => StepState::Awaiting,
            Progress::Delayed { .. } => StepState::Delayed,
            Progress::Interrupted { .. } => StepState::Interrupted,
            Progress::Completed => StepState::Completed,
            Progress::Skipped => StepState::Skipped,
            Progress::Failed => StepState::Failed,
            Progress::DependencyFailed => StepState::DependencyFailed,
        }
    }

    pub(super) fn satisfies_dependants(&self) -> bool {
        matches!(self, Progress::Completed | Progress::Skipped)
    }
    pub(super) fn is_failure(&self) -> bool {
        matches!(self, Progress::Failed | Progress::DependencyFailed)
    }
}

/// Each step's progress, with how many steps wait on a person or on a retry
/// timer: the run loop asks both on every turn, and counting them as they change
/// spares it a walk over every step of a long plan. Reads go through the slice;
/// every change goes through [`Progresses::set`], which holds it to the step
/// lifecycle's table.
pub(super) struct Progresses {
    items: Vec<Progress>,
    pub(super) awaiting: usize,
    pub(super) delayed: usize,
}

impl Progresses {
    pub(super) fn new(items: Vec<Progress>) -> Progresses {
        let (awaiting, delayed) = Progresses::count(&items);
        Progresses {
            items,
            awaiting,
            delayed,
        }
    }

    /// (awaiting, delayed) among `items`, counted.
    fn count(items: &[Progress]) -> (usize, usize) {
        let count = |f: fn(&Progress) -> bool| items.iter().filter(|p| f(p)).count();
        (
            count(|p| matches!(p, Progress::Awaiting { .. })),
            count(|p| matches!(p, Progress::Delayed { .. })),
        )
    }

    /// Moves step `i` by `event` to `new`, which must be where the step
    /// lifecycle's table takes it; returns what it was.
    pub(super) fn set(
        &mut self,
        i: usize,
        event: StepEvent,
        new: Progress,
    ) -> std::result::Result<Progress, IllegalTransition> {
        let from = self.items[i].state();
        if Steps::next(from, event)? != new.state() {
            let asked = format!(
                "{} into {}",
                Steps::event_name(event),
                Steps::state_name(new.state())
            );
            return Err(Steps::refusal(from, &asked));
        }
        let old = std::mem::replace(&mut self.items[i], new);
        for (p, add) in [(&old, false), (&self.items[i], true)] {
            let counter = match p {
                Progress::Awaiting { .. } => &mut self.awaiting,
                Progress::Delayed { .. } => &mut self.delayed,
                _ => continue,
            };
            if add {
                *counter += 1;
            } else {
                *counter -= 1;
            }
        }
        // Every engine test that waits on a person or a timer checks the counts.
        debug_assert_eq!(
            (self.awaiting, self.delayed),
            Progresses::count(&self.items)
        );
        Ok(old)
    }

    /// The request step `i` waits on, to bring up to date.
    pub(super) fn awaited_mut(&mut self, i: usize) -> Option<&mut ApprovalRequest> {
        match &mut self.items[i] {
            Progress::Awaiting { request, .. } => Some(request),
            _ => None,
        }
    }
}

impl std::ops::Deref for Progresses {
    type Target = [Progress];
    fn deref(&self) -> &[Progress] {
        &self.items
    }
}

impl TaskRun<'_> {
    /// Records an attempt's failure as the step's outcome: its dependants will not run.
    pub(super) fn fail_step(
        &mut self,
        i: usize,
        checkpoint: CheckpointId,
        span: &SpanRef,
        duration_ms: u64,
        error: String,
    ) -> Result<()> {
        self.rec.record(
            TaskChange::CheckpointFailed {
                checkpoint_id: checkpoint,
                duration_ms,
                error,
                output: None,
                will_retry: false,
                error_type: None,
                retry_at: None,
            },
            span,
        )?;
        self.mark_failed(i)
    }

    /// Records a step's attempt as skipped after `duration_ms`, and the step
    /// as done, skipped.
    pub(super) fn skip_step(
        &mut self,
        i: usize,
        checkpoint: CheckpointId,
        span: &SpanRef,
        duration_ms: u64,
        reason: String,
    ) -> Result<()> {
        self.rec.record(
            TaskChange::CheckpointSkipped {
                checkpoint_id: checkpoint,
                reason,
                duration_ms: Some(duration_ms),
            },
            span,
        )?;
        self.complete(i, StepEvent::Skip)
    }

    /// Marks a step failed for good and records its dependants as not run.
    pub(super) fn mark_failed(&mut self, i: usize) -> Result<()> {
        self.set(i, StepEvent::Fail, Progress::Failed)?;
        self.first_failure.get_or_insert(i);
        self.fail_dependants(i)
    }

    /// Lets a step run again: ready now if nothing it depends on is outstanding.
    pub(super) fn run_again(&mut self, i: usize) -> Result<()> {
        self.set(i, StepEvent::RunAgain, Progress::NotStarted)?;
        if self.waiting_on[i] == 0 {
            self.ready.insert(i);
        }
        Ok(())
    }

    /// Moves step `i` by `event` to `new` (see [`Progresses::set`]), naming the
    /// step if its lifecycle does not allow it.
    pub(super) fn set(&mut self, i: usize, event: StepEvent, new: Progress) -> Result<Progress> {
        self.progress.set(i, event, new).map_err(|e| {
            e.of(format!(
                "`{}` of task {}",
                self.steps[i].id, self.rec.state.head.id
            ))
            .into()
        })
    }

    /// Marks a step done (`Pass`: completed, `Skip`: skipped) and readies what
    /// waited only on it.
    pub(super) fn complete(&mut self, i: usize, event: StepEvent) -> Result<()> {
        let done = match event {
            StepEvent::Pass => Progress::Completed,
            _ => Progress::Skipped,
        };
        self.set(i, event, done)?;
        for d in self.dependants[i].clone() {
            self.waiting_on[d] -= 1;
            if self.waiting_on[d] == 0 && matches!(self.progress[d], Progress::NotStarted) {
                self.ready.insert(d);
            }
        }
        Ok(())
    }

    /// Records every step that (transitively) depends on `failed` as not run.
    pub(super) fn fail_dependants(&mut self, failed: usize) -> Result<()> {
        let mut stack = vec![failed];
        while let Some(f) = stack.pop() {
            for d in self.dependants[f].clone() {
                if !matches!(self.progress[d], Progress::NotStarted) {
                    continue;
                }
                let reason = format!("not run: dependency `{}` failed", self.steps[f].id);
                self.skip_unstarted(d, reason, DEPENDENCY_FAILED)?;
                self.set(d, StepEvent::Block, Progress::DependencyFailed)?;
                stack.push(d);
            }
        }
        Ok(())
    }

    pub(super) fn skip_unstarted(&mut self, i: usize, reason: String, kind: &str) -> Result<()> {
        self.ready.remove(&i);
        self.attempts[i] += 1;
        let span = SpanRef::child_of(&self.rec.state.head.span_id);
        let mut metadata = std::collections::BTreeMap::new();
        metadata.insert("skipped_kind".to_owned(), serde_json::Value::from(kind));
        let checkpoint = Checkpoint {
            metadata,
            ..Checkpoint::pending(
                self.rec.state.head.id.clone(),
                Some(self.steps[i].id.clone()),
                self.steps[i].checkpoint,
                self.attempts[i],
            )
        };
        let id = self.rec.create_checkpoint(checkpoint, &span)?;
        self.rec.record(
            TaskChange::CheckpointSkipped {
                checkpoint_id: id,
                reason,
                duration_ms: None,
            },
            &span,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{Progress, Progresses, StepEvent};

    #[test]
    fn progresses_count_the_steps_on_a_retry_timer_as_they_change() {
        let at = chrono::Utc::now();
        let mut p = Progresses::new(vec![
            Progress::Delayed { until: at },
            Progress::NotStarted,
            Progress::Completed,
        ]);
        assert_eq!((p.awaiting, p.delayed), (0, 1));
        let cp = rein_protocol::CheckpointId::new();
        let running = || Progress::Running {
            checkpoint: cp.clone(),
            span: crate::recorder::SpanRef::child_of("0000000000000001"),
            token: tokio_util::sync::CancellationToken::new(),
        };
        p.set(1, StepEvent::Start, running()).unwrap();
        p.set(1, StepEvent::End, Progress::Ended).unwrap();
        assert!(matches!(
            p.set(1, StepEvent::Delay, Progress::Delayed { until: at }),
            Ok(Progress::Ended)
        ));
        assert_eq!(p.delayed, 2);
        // Delayed to delayed is no transition: refused, and still counted once.
        let err = p
            .set(1, StepEvent::Delay, Progress::Delayed { until: at })
            .unwrap_err();
        assert_eq!(
            (err.from.as_str(), err.event.as_str()),
            ("delayed", "delay")
        );
        assert_eq!(p.delayed, 2);
        // An event that leads elsewhere than the progress given is refused too.
        assert!(p.set(0, StepEvent::RunAgain, Progress::Failed).is_err());
        assert!(matches!(
            p.set(0, StepEvent::RunAgain, Progress::NotStarted),
            Ok(Progress::Delayed { .. })
        ));
        p.set(1, StepEvent::RunAgain, Progress::NotStarted).unwrap();
        assert_eq!((p.awaiting, p.delayed), (0, 0));
        assert!(matches!(p[2], Progress::Completed));
    }
}
