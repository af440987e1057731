//! The runner's side of error recovery: a failed attempt is classified, its
//! strategy chosen, and the step retried after a durable timer, waited on,
//! skipped, paused, aborted, or escalated to a person.

use std::sync::Arc;
use std::time::Duration;

use rein_protocol::{CheckpointId, ErrorType, LedgerKind, RecoveryAction, TaskChange, Trigger};

use super::{Progress, TaskRun};
use crate::clock::until;
use crate::error::Result;
use crate::fold::RECOVERY;
use crate::lifecycle::StepEvent;
use crate::recorder::SpanRef;
use crate::recovery::{Failure, backoff, classify, resolve, retry_after};

/// A failed attempt, as it ended.
pub(super) struct FailedAttempt {
    pub checkpoint: CheckpointId,
    pub span: SpanRef,
    pub duration_ms: u64,
    pub error: String,
    pub output: Option<serde_json::Value>,
}

impl TaskRun<'_> {
    /// Handles a failed attempt of step `i` by the strategy for its error type.
    pub(super) fn recover(
        &mut self,
        i: usize,
        failed: FailedAttempt,
        failure: &Failure,
    ) -> Result<()> {
        let step = Arc::clone(&self.steps[i]);
        let error_type = classify(failure);
        let strategy = resolve(error_type, &step.recovery, &self.plan_recovery);
        let done = self.recoveries[i];
        let (action, exhausted) = match strategy.action {
            RecoveryAction::Retry | RecoveryAction::Wait
                if done >= strategy.max_retries.unwrap_or(0) =>
            {
                (strategy.fallback.unwrap_or(RecoveryAction::Abort), true)
            }
            action => (action, false),
        };
        let will_retry = matches!(
            action,
            RecoveryAction::Retry
                | RecoveryAction::Wait
                | RecoveryAction::Pause
                | RecoveryAction::Escalate
        );
        let base = Duration::from_millis(strategy.retry_delay_ms.unwrap_or(5_000));
        let retry_at = match action {
            RecoveryAction::Retry => Some(backoff(base, done + 1, rand::random::<f64>())),
            RecoveryAction::Wait => Some(retry_after(failure).unwrap_or(base)),
            RecoveryAction::Skip
            | RecoveryAction::Pause
            | RecoveryAction::Abort
            | RecoveryAction::Escalate => None,
        }
        .map(|delay| {
            self.ctx.config.clock.now() + chrono::Duration::from_std(delay).unwrap_or_default()
        });
        let FailedAttempt {
            checkpoint,
            span,
            duration_ms,
            error,
            output,
        } = failed;
        self.rec.record(
            TaskChange::CheckpointFailed {
                checkpoint_id: checkpoint.clone(),
                duration_ms,
                error: error.clone(),
                output,
                will_retry,
                error_type: Some(error_type),
                retry_at,
            },
            &span,
        )?;
        if exhausted || action == RecoveryAction::Abort {
            let reason = if exhausted {
                format!(
                    "{} retries ran out; then {}",
                    strategy.max_retries.unwrap_or(0),
                    action.as_str()
                )
            } else {
                format!("{error_type} errors are not recovered: abort")
            };
            self.rec.record(
                TaskChange::RecoveryFailed {
                    step_id: step.id.clone(),
                    error_type,
                    attempts: done,
                    reason,
                },
                &span,
            )?;
        }
        if action != RecoveryAction::Abort {
            self.rec.record(
                TaskChange::RecoveryAttempted {
                    step_id: step.id.clone(),
                    checkpoint_id: checkpoint,
                    error_type,
                    action,
                    attempt: done + 1,
                    retry_at,
                },
                &span,
            )?;
        }
        match action {
            RecoveryAction::Retry | RecoveryAction::Wait => {
                self.recoveries[i] += 1;
                match retry_at {
                    Some(until) => self.set(i, StepEvent::Delay, Progress::Delayed { until })?,
                    None => self.set(i, StepEvent::RunAgain, Progress::NotStarted)?,
                };
            }
            RecoveryAction::Skip => {
                self.skip_unstarted(
                    i,
                    format!("skipped by recovery after a {error_type} error: {error}"),
                    "recovery",
                )?;
                self.complete(i, StepEvent::Skip)?;
            }
            RecoveryAction::Pause => {
                let task = &self.rec.state.head.id;
                self.pausing.get_or_insert_with(|| {
                    format!(
                        "step `{}` failed with a {error_type} error ({error}); fix the cause and `rein tasks resume {task}` to run it again",
                        step.id
                    )
                });
                self.set(i, StepEvent::RunAgain, Progress::NotStarted)?;
            }
            RecoveryAction::Abort => self.mark_failed(i)?,
            RecoveryAction::Escalate => self.escalate(i, error_type, &error)?,
        }
        Ok(())
    }

    /// Asks a person whether to run a failed step again, skip it, or abort it.
    fn escalate(&mut self, i: usize, error_type: ErrorType, error: &str) -> Result<()> {
        let step = Arc::clone(&self.steps[i]);
        let span = SpanRef::child_of(&self.rec.state.head.span_id);
        self.attempts[i] += 1;
        let mark = RecoveryAction::Escalate.as_str().into();
        let checkpoint_id = self.open_question(i, (RECOVERY, mark), &span)?;
        let trigger = match error_type {
            ErrorType::PermissionDenied => Trigger::PermissionDenied,
            ErrorType::SecurityViolation => Trigger::SecurityViolation,
            ErrorType::Transient
            | ErrorType::RateLimit
            | ErrorType::ResourceBusy
            | ErrorType::ValidationError
            | ErrorType::Fatal
            | ErrorType::Unsupported => Trigger::TaskBlocked,
        };
        let mut request = self.rerun_question(
            i,
            &checkpoint_id,
            trigger,
            format!(
                "Step `{}` failed ({error_type}): run it again, skip it, or abort it?",
                step.id
            ),
            error.to_owned(),
        );
        request.context.risk_assessment = Some(format!(
            "attempt {} failed with a {error_type} error: {error}",
            self.attempts[i] - 1
        ));
        // The escalation itself is on the record, with the failure behind it.
        self.rec.record_ledger(crate::approvals::ledger_entry(
            &request,
            LedgerKind::Escalated,
            "system:recovery",
            Some(format!("{error_type} error: {error}")),
        ));
        self.await_request(i, checkpoint_id, span, request)
    }

    pub(super) fn delayed_any(&self) -> bool {
        self.progress.delayed > 0
    }

    /// How long until the nearest retry timer.
    pub(super) fn next_retry(&self) -> Option<Duration> {
        if !self.delayed_any() {
            return None;
        }
        let now = self.ctx.config.clock.now();
        self.progress
            .iter()
            .filter_map(|p| match p {
                Progress::Delayed { until } => Some(*until),
                _ => None,
            })
            .min()
            .map(|at| until(now, at))
    }

    /// Steps whose retry time has come are ready again.
    pub(super) fn release_due(&mut self) -> Result<()> {
        if !self.delayed_any() {
            return Ok(());
        }
        let now = self.ctx.config.clock.now();
        for i in 0..self.steps.len() {
            if let Progress::Delayed { until } = self.progress[i]
                && until <= now
            {
                self.run_again(i)?;
            }
        }
        Ok(())
    }
}
