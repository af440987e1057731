//! How a run ends: it completes (reviewed, summarised), fails, pauses, stops
//! or is aborted, and the contracts of its steps follow.

use super::*;

impl TaskRun<'_> {
    pub(super) async fn flush(&mut self) -> Result<()> {
        self.rec.flush(&self.ctx.store, &self.ctx.events).await
    }

    /// Nothing runs and nothing more will start: the task pauses, fails or completes.
    pub(super) async fn finish(mut self) -> Result<TaskState> {
        let unstarted: Vec<usize> = (0..self.steps.len())
            .filter(|&i| {
                matches!(
                    self.progress[i],
                    Progress::NotStarted | Progress::Delayed { .. }
                )
            })
            .collect();
        if let Some(reason) = self.pausing.clone()
            && (!unstarted.is_empty() || self.awaiting_any())
        {
            self.rec.task_event(TaskChange::TaskPaused { reason })?;
        } else if let Some(first) = self.first_failure.or_else(|| {
            (0..self.steps.len()).find(|&i| matches!(self.progress[i], Progress::Failed))
        }) {
            let name = self.steps[first].id.clone();
            for request in self.awaited() {
                let why = format!("the plan stopped after `{name}` failed (fail_fast)");
                self.withdraw(request, &why).await?;
            }
            for i in unstarted {
                self.skip_unstarted(
                    i,
                    format!("not run: fail_fast stopped the plan after `{name}` failed"),
                    "fail_fast",
                )?;
            }
            let failed: Vec<&str> = (0..self.steps.len())
                .filter(|&i| matches!(self.progress[i], Progress::Failed))
                .map(|i| self.steps[i].id.as_str())
                .collect();
            let error = match self
                .rec
                .state
                .latest_for_step(&name)
                .and_then(|c| c.error.clone())
            {
                Some(e) => format!("step `{name}` failed: {e}"),
                None => format!("step `{name}` failed"),
            };
            let error = if failed.len() > 1 {
                format!(
                    "{error} ({} steps failed: {})",
                    failed.len(),
                    failed.join(", ")
                )
            } else {
                error
            };
            self.rec.task_event(TaskChange::TaskFailed { error })?;
        } else {
            let summary = self.summarize().await;
            self.review_and_complete(summary)?;
        }
        self.flush().await?;
        self.sync_contracts(false).await;
        if self.rec.state.status().is_terminal() {
            crate::spans::export_root_span(&self.rec.state);
        }
        Ok(self.rec.state)
    }

    /// Brings the contracts of plan–execute–verify steps up to date with their
    /// steps (see [`crate::pev`]): after a commit, so a contract never runs ahead
    /// of the log, and on every resume. Contracts are records beside the task;
    /// one that cannot be updated now is logged and tried again next time.
    pub(super) async fn sync_contracts(&mut self, aborted: bool) {
        if self.contracts.is_empty() {
            return;
        }
        let records = self.ctx.records();
        for w in 0..self.contracts.len() {
            let ContractWatch {
                step: i, approve, ..
            } = self.contracts[w];
            let step_id = self.steps[i].id.clone();
            let denied = approve.is_some_and(|j| matches!(self.progress[j], Progress::Failed));
            use rein_protocol::ContractStatus as C;
            let target = match &self.progress[i] {
                _ if aborted => Some((C::Cancelled, "the task was aborted".to_owned())),
                Progress::Running { .. } | Progress::Completed => {
                    Some((C::Executing, format!("step `{step_id}` started")))
                }
                Progress::Failed => Some((C::Failed, format!("step `{step_id}` failed"))),
                Progress::Skipped => Some((C::Cancelled, format!("step `{step_id}` was skipped"))),
                Progress::DependencyFailed if denied => Some((
                    C::Rejected,
                    format!(
                        "the approval `{}` was denied or expired",
                        crate::pev::approve_id(&step_id)
                    ),
                )),
                Progress::DependencyFailed => Some((
                    C::Cancelled,
                    format!("a step that `{step_id}` depends on failed"),
                )),
                _ => None,
            };
            let Some((target, reason)) = target else {
                continue;
            };
            if self.contracts[w].seen == Some(target) {
                continue;
            }
            // The approval step's checkpoint says who let it pass.
            let approver = approve.and_then(|j| {
                let step = Some(self.steps[j].id.as_str());
                self.rec
                    .state
                    .checkpoints
                    .iter()
                    .rev()
                    .filter(|c| c.step_id.as_deref() == step)
                    .find_map(|c| c.approved_by.as_ref())
                    .map(|a| a.who.clone())
            });
            let watch = &mut self.contracts[w];
            match crate::pev::advance_decided(
                &records,
                &watch.contract,
                target,
                "rein",
                approver.as_deref(),
                &reason,
            )
            .await
            {
                Ok(()) => watch.seen = Some(target),
                Err(e) => {
                    tracing::warn!(contract = %watch.contract, error = %e, "cannot bring the contract up to date")
                }
            }
        }
    }

    /// CP5: a system review unless the plan has review steps, then completion.
    /// A goal task's one-line account of what it did, from an isolated
    /// completion on the goal's route; `None` for a plan task, or when the model
    /// does not answer (the task completes all the same).
    pub(super) async fn summarize(&self) -> Option<String> {
        let (goal_text, goal) = self.goal.as_ref()?;
        let completer = self.ctx.completer.as_ref()?;
        let mut prompt = format!(
            "Say in one line, at most 25 words, what this finished task did.\nThe goal was: {goal_text}\nIts steps:\n"
        );
        for step in &self.steps {
            let said = self
                .rec
                .state
                .latest_for_step(&step.id)
                .and_then(|c| c.output.as_ref()?.get("text")?.as_str().map(str::to_owned))
                .unwrap_or_default();
            let said: String = said.chars().take(300).collect();
            prompt.push_str(&format!("- {}: {} {}\n", step.id, step.description, said));
        }
        let request = crate::harness::completion::CompletionRequest {
            prompt,
            system: None,
            route: crate::goal::route(goal),
            timeout: SUMMARY_TIMEOUT,
            // One line is asked for.
            shape: crate::harness::isolated::AnswerShape {
                max_tokens: Some(200),
                json_schema: None,
            },
            policy: Default::default(),
        };
        match completer.complete(&request).await {
            Ok(done) => {
                crate::harness::completion::meter(
                    &self.ctx.store,
                    &self.rec.state.head.id,
                    "summary",
                    &done,
                )
                .await;
                let line: String = done.text.trim().lines().next()?.chars().take(300).collect();
                (!line.is_empty()).then_some(line)
            }
            Err(e) => {
                tracing::warn!(error = %e, "no summary for the finished task");
                None
            }
        }
    }

    pub(super) fn review_and_complete(&mut self, line: Option<String>) -> Result<()> {
        let skipped = self
            .progress
            .iter()
            .filter(|p| matches!(p, Progress::Skipped))
            .count();
        let mut summary = serde_json::json!({
            "steps": self.steps.len(),
            "completed": self.steps.len() - skipped,
            "skipped": skipped,
        });
        if let Some(line) = line {
            summary["summary"] = line.into();
        }
        if !self
            .steps
            .iter()
            .any(|s| s.checkpoint == CheckpointType::TaskReview)
        {
            system_checkpoint(
                &mut self.rec,
                CheckpointType::TaskReview,
                None,
                Some(summary.clone()),
                ApprovedBy {
                    kind: Approver::System,
                    who: "policy:all_steps_passed".into(),
                },
            )?;
        }
        system_checkpoint(
            &mut self.rec,
            CheckpointType::TaskComplete,
            None,
            Some(summary),
            ApprovedBy {
                kind: Approver::System,
                who: "policy:all_steps_passed".into(),
            },
        )?;
        self.rec.task_event(TaskChange::TaskCompleted {})
    }

    /// Stops running steps, records them as cancelled, and cancels the task.
    pub(super) async fn abort(mut self) -> Result<TaskState> {
        self.cancel_running().await;
        let (by, reason) = self
            .abort_by
            .clone()
            .unwrap_or_else(|| ("operator".into(), "aborted".into()));
        self.withdraw_questions(&format!("the task was aborted by {by}"), true)
            .await?;
        for i in 0..self.steps.len() {
            let (checkpoint, span, request) = match &self.progress[i] {
                Progress::Running {
                    checkpoint, span, ..
                } => (checkpoint.clone(), span.clone(), None),
                Progress::Awaiting {
                    checkpoint,
                    span,
                    request,
                } => (checkpoint.clone(), span.clone(), Some((**request).clone())),
                _ => continue,
            };
            if let Some(request) = request {
                self.ctx
                    .revoke(request, &format!("the task was aborted by {by}"))
                    .await?;
            }
            let duration_ms = self
                .rec
                .state
                .checkpoint(&checkpoint)
                .map_or(0, |c| elapsed_ms(c.started_at));
            self.rec
                .record(aborted_checkpoint(checkpoint, duration_ms, &by), &span)?;
            self.set(i, StepEvent::Fail, Progress::Failed)?;
        }
        self.rec
            .task_event(TaskChange::TaskCancelled { reason, by })?;
        self.flush().await?;
        self.sync_contracts(true).await;
        crate::spans::export_root_span(&self.rec.state);
        Ok(self.rec.state)
    }

    /// Stops running steps without recording them: the task stays in progress and
    /// its interrupted steps are settled on resume, exactly as after a crash.
    pub(super) async fn stop(mut self) -> Result<TaskState> {
        self.cancel_running().await;
        self.flush().await?;
        Ok(self.rec.state)
    }

    pub(super) async fn cancel_running(&mut self) {
        for p in self.progress.iter() {
            if let Progress::Running { token, .. } = p {
                token.cancel();
            }
        }
        while self.running.next().await.is_some() {}
    }
}
