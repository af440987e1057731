//! Questions a running step puts to a person (an agent asking permission): each
//! is an approval request of the step's checkpoint, answered like any other,
//! and its decision goes back to the step, which goes on running.
//!
//! A question rein stopped in the middle of stays pending in the store. When
//! the step runs again and asks the same question (same key), it gets that
//! request — and its answer, if a person gave one meanwhile — instead of a new
//! one. A question nobody needs any more (its step ended, or the task was
//! aborted) is withdrawn.

use std::collections::HashSet;

use rein_protocol::{ApprovalId, ApprovalRequest, ApprovalStatus, TaskChange};
use tokio::sync::oneshot;

use super::{Progress, TaskRun};
use crate::error::Result;
use crate::executor::{Ask, AskError, StepMessage};
use crate::fold::QUESTIONS;
use crate::recorder::SpanRef;

/// A question waiting for a person, and where its answer goes.
pub(super) struct Asked {
    step: usize,
    span: SpanRef,
    request: ApprovalRequest,
    reply: oneshot::Sender<std::result::Result<ApprovalRequest, AskError>>,
}

/// The questions of one run.
#[derive(Default)]
pub(super) struct Questions {
    waiting: Vec<Asked>,
    /// Requests of earlier runs of a step already taken up again in this one.
    reused: HashSet<ApprovalId>,
    /// Whether this task has had questions at all (else nothing to withdraw).
    pub(super) seen: bool,
    /// Under `--no-wait`: steps stopped because they asked, each with its
    /// question's id (kept pending for the run that resumes the task).
    pub(super) parked: Vec<(usize, ApprovalId)>,
    /// Park a step that asks instead of letting it wait.
    pub(super) no_wait: bool,
}

impl Questions {
    pub(super) fn any(&self) -> bool {
        !self.waiting.is_empty()
    }

    pub(super) fn requests(&self) -> impl Iterator<Item = &ApprovalRequest> {
        self.waiting.iter().map(|a| &a.request)
    }
}

impl TaskRun<'_> {
    /// A question or a report from a running step.
    pub(super) async fn on_step_message(&mut self, message: StepMessage) -> Result<()> {
        match message {
            StepMessage::Ask(ask) => self.on_ask(*ask).await,
            // A compaction is an event of its own; anything else the runtime
            // reported, an agent update.
            StepMessage::Report { step, update } if update["sessionUpdate"] == "compacted" => {
                let text = |k: &str| update[k].as_str().unwrap_or_default().to_owned();
                let n = |k: &str| update[k].as_u64().unwrap_or(0);
                self.record_running(step, |checkpoint_id| TaskChange::Compacted {
                    checkpoint_id,
                    session: text("session"),
                    model: text("model"),
                    reason: text("reason"),
                    messages: n("messages"),
                    tokens_before: n("tokens_before"),
                    tokens_after: n("tokens_after"),
                })
            }
            StepMessage::Report { step, update } => {
                self.record_running(step, |checkpoint_id| TaskChange::AgentUpdate {
                    checkpoint_id,
                    update,
                })
            }
            StepMessage::Started { step, process } => {
                self.record_running(step, |checkpoint_id| TaskChange::ProcessStarted {
                    checkpoint_id,
                    process,
                })
            }
        }
    }

    /// Records what `change` makes of step `step`'s running checkpoint; nothing
    /// if the step is no longer running (its message came too late).
    fn record_running(
        &mut self,
        step: usize,
        change: impl FnOnce(rein_protocol::CheckpointId) -> TaskChange,
    ) -> Result<()> {
        if let Some(Progress::Running {
            checkpoint, span, ..
        }) = self.progress.get(step)
        {
            let (checkpoint_id, span) = (checkpoint.clone(), span.clone());
            self.rec.record(change(checkpoint_id), &span)?;
        }
        Ok(())
    }

    /// Every step message already sent.
    pub(super) async fn take_step_messages(&mut self) -> Result<()> {
        while let Ok(message) = self.asks.try_recv() {
            self.on_step_message(message).await?;
        }
        Ok(())
    }

    /// Raises a running step's question, or takes up the same question an
    /// earlier run of the step raised and nobody received the answer of.
    pub(super) async fn on_ask(&mut self, ask: Ask) -> Result<()> {
        let Ask {
            step: i,
            question,
            reply,
        } = ask;
        let Some(Progress::Running {
            checkpoint, span, ..
        }) = self.progress.get(i)
        else {
            let _ = reply.send(Err(AskError::Unavailable(
                "the step that asked is not running".into(),
            )));
            return Ok(());
        };
        let (checkpoint, span) = (checkpoint.clone(), span.clone());
        self.questions.seen = true;
        if let Some(request) = self.earlier_question(i, &checkpoint, &question.key).await? {
            self.questions.reused.insert(request.id.clone());
            let asked = Asked {
                step: i,
                span,
                request,
                reply,
            };
            if asked.request.status != ApprovalStatus::Pending {
                return self.deliver(asked);
            }
            self.wait_or_park(asked);
            return Ok(());
        }
        let now = self.ctx.config.clock.now();
        let request = ApprovalRequest {
            description: question.description,
            options: question.options,
            recommended_option: question.recommended,
            context: question.context,
            timeout_s: question.timeout_ms.map(|ms| ms.div_ceil(1000)),
            deadline: question.timeout_ms.map(|ms| {
                now + chrono::Duration::milliseconds(i64::try_from(ms).unwrap_or(i64::MAX))
            }),
            on_expiry: question.on_expiry,
            question: Some(question.key),
            ..ApprovalRequest::pending(
                self.rec.state.head.id.clone(),
                checkpoint,
                Some(self.steps[i].id.clone()),
                question.trigger,
                question.title,
                now,
            )
        };
        // Stored with the next commit, before anyone can answer it.
        self.rec.request_approval(request.clone(), &span)?;
        self.wait_or_park(Asked {
            step: i,
            span,
            request,
            reply,
        });
        Ok(())
    }

    /// A pending question waits for its answer, or under `--no-wait` stops its step.
    fn wait_or_park(&mut self, asked: Asked) {
        if self.questions.no_wait {
            self.park(asked);
        } else {
            self.questions.waiting.push(asked);
        }
    }

    /// `--no-wait`: nobody is waited for, so the step that asked is stopped
    /// and the task pauses once it has; the question stays pending, and the
    /// step asking it again when the task resumes gets its answer.
    fn park(&mut self, asked: Asked) {
        if let Some(Progress::Running { token, .. }) = self.progress.get(asked.step) {
            token.cancel();
        }
        self.pausing.get_or_insert_with(|| {
            format!(
                "waiting for a person to answer {} (\"{}\"); answer with `rein approvals approve {}` (or deny, skip), then `rein tasks resume {}`",
                asked.request.id,
                asked.request.title,
                asked.request.id,
                self.rec.state.head.id
            )
        });
        self.questions.parked.push((asked.step, asked.request.id));
        // The step hears nothing more: it has been told to stop.
        drop(asked.reply);
    }

    /// Whether step `i` was stopped to wait for an answer (and is no longer).
    pub(super) fn take_parked(&mut self, i: usize) -> Option<ApprovalId> {
        let at = self.questions.parked.iter().position(|(s, _)| *s == i)?;
        Some(self.questions.parked.swap_remove(at).1)
    }

    /// A request of an earlier checkpoint of step `i` with this key whose
    /// answer no run received.
    async fn earlier_question(
        &self,
        i: usize,
        current: &rein_protocol::CheckpointId,
        key: &str,
    ) -> Result<Option<ApprovalRequest>> {
        let step = self.steps[i].id.as_str();
        let candidates: Vec<ApprovalId> = self
            .rec
            .state
            .checkpoints
            .iter()
            .filter(|cp| cp.step_id.as_deref() == Some(step) && &cp.id != current)
            .flat_map(unreceived)
            .filter(|id| !self.questions.reused.contains(id))
            .collect();
        for id in candidates {
            let request = self.ctx.approval(&id).await?;
            if request.question.as_deref() == Some(key) {
                return Ok(Some(request));
            }
        }
        Ok(None)
    }

    /// Hands a settled question's request to its step; `false` when `request`
    /// is not a question of this run. A delegation keeps it waiting.
    pub(super) fn answer_question(&mut self, request: &ApprovalRequest) -> Result<bool> {
        let Some(at) = self
            .questions
            .waiting
            .iter()
            .position(|a| a.request.id == request.id)
        else {
            return Ok(false);
        };
        if request.status == ApprovalStatus::Pending {
            self.questions.waiting[at].request = request.clone();
            return Ok(true);
        }
        let mut asked = self.questions.waiting.swap_remove(at);
        asked.request = request.clone();
        self.deliver(asked)?;
        Ok(true)
    }

    /// Records that the step received the decision, and gives it to the step.
    fn deliver(&mut self, asked: Asked) -> Result<()> {
        self.rec
            .record(TaskChange::approval_received(&asked.request), &asked.span)?;
        // A step that stopped listening has ended; its end is recorded anyway.
        let _ = asked.reply.send(Ok(asked.request));
        Ok(())
    }

    /// Withdraws the questions nobody needs any more: those of steps no longer
    /// running, and those earlier runs of a step left pending once the step has
    /// ended. With `everything`, all of them (the task was aborted).
    pub(super) async fn withdraw_questions(&mut self, why: &str, everything: bool) -> Result<()> {
        if !self.questions.seen {
            return Ok(());
        }
        let (gone, kept): (Vec<Asked>, Vec<Asked>) = std::mem::take(&mut self.questions.waiting)
            .into_iter()
            .partition(|a| {
                everything || !matches!(self.progress[a.step], Progress::Running { .. })
            });
        self.questions.waiting = kept;
        for asked in gone {
            let revoked = self.ctx.revoke(asked.request.clone(), why).await?;
            self.rec
                .record(TaskChange::approval_received(&revoked), &asked.span)?;
        }
        // Left by a run that stopped: pending, for a step that has ended.
        let stale: Vec<ApprovalId> = self
            .rec
            .state
            .checkpoints
            .iter()
            // Most checkpoints hold no pending question: that is looked at first.
            .filter(|cp| unreceived(cp).next().is_some())
            .filter(|cp| {
                everything
                    || cp
                        .step_id
                        .as_deref()
                        .and_then(|s| self.steps.iter().position(|st| st.id == s))
                        .is_some_and(|i| ended(&self.progress[i]))
            })
            .flat_map(unreceived)
            .collect();
        for id in stale {
            let request = self.ctx.approval(&id).await?;
            let revoked = self.ctx.revoke(request, why).await?;
            let span = SpanRef::child_of(&self.rec.state.head.span_id);
            self.rec
                .record(TaskChange::approval_received(&revoked), &span)?;
        }
        Ok(())
    }

    /// Whether any checkpoint holds a question no run received the answer of.
    pub(super) fn unreceived_any(&self) -> bool {
        self.rec
            .state
            .checkpoints
            .iter()
            .any(|cp| unreceived(cp).next().is_some())
    }
}

/// The questions of a checkpoint whose answer no run received.
fn unreceived(cp: &rein_protocol::Checkpoint) -> impl Iterator<Item = ApprovalId> + '_ {
    cp.metadata
        .get(QUESTIONS)
        .and_then(serde_json::Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(_, status)| status.as_str() == Some(ApprovalStatus::Pending.as_str()))
        .filter_map(|(id, _)| ApprovalId::parse(id).ok())
}

fn ended(progress: &Progress) -> bool {
    matches!(
        progress,
        Progress::Completed | Progress::Skipped | Progress::Failed | Progress::DependencyFailed
    )
}
