//! Launching steps: the ready ones started under the limits, each polled
//! by the runner, and what each attempt's end records.

use super::*;

pub(super) type Finished = (usize, StepOutcome, Duration);

impl TaskRun<'_> {
    pub(super) fn scheduling(&self) -> bool {
        self.pausing.is_none() && !(self.fail_fast && self.first_failure.is_some())
    }

    /// Opens checkpoints for ready steps, up to the limit; they start after the commit.
    pub(super) fn start_ready(&mut self) -> Result<Vec<usize>> {
        let mut started = Vec::new();
        // Nothing starts in a workspace that is no longer the directory the
        // task was given: the task pauses, saying what changed. (A person's
        // step and a no-op do nothing there: no look is needed for them.)
        let starts_work = self.ready.iter().any(|&i| {
            !matches!(
                self.steps[i].action,
                StepAction::Approval { .. } | StepAction::Noop
            )
        });
        if self.scheduling()
            && starts_work
            && self.running.len() < self.limit
            && let Err(changed) = self.workspace.verify()
        {
            tracing::warn!(task_id = %self.rec.state.head.id, "{changed}");
            self.pausing = Some(format!(
                "{changed}. Nothing more runs there: put the directory back and resume the task (`rein tasks resume`), or abort it"
            ));
            return Ok(started);
        }
        while self.scheduling() && self.running.len() + started.len() < self.limit {
            let Some(i) = self.ready.pop_first() else {
                break;
            };
            let step = Arc::clone(&self.steps[i]);
            self.attempts[i] += 1;
            if let Some(ran) = self.ran_in_source(i) {
                // A fork's step that already ran in the source: a person
                // says whether it runs again.
                self.ask_ran_in_source(i, ran)?;
                continue;
            }
            if matches!(step.action, StepAction::Approval { .. }) {
                // A person does this step: it waits without taking a running slot.
                self.ask(i)?;
                continue;
            }
            if !step.required_permissions.is_empty() {
                self.check_permissions(&step)?;
            }
            if step.risk_level == rein_protocol::RiskLevel::High {
                self.security_scan(&step)?;
            }
            let span = SpanRef::child_of(&self.rec.state.head.span_id);
            let input = match &step.action {
                StepAction::Command { run, .. } => Some(serde_json::json!({
                    "run": run,
                    "timeout_ms": step.timeout_ms,
                    "idempotent": step.idempotent,
                })),
                StepAction::Verify { step } => Some(serde_json::json!({ "verify": step })),
                StepAction::Agent {
                    prompt,
                    provider,
                    model,
                    runtime,
                    tools,
                    session,
                    limits,
                    mcp,
                    network,
                    images,
                } => Some(serde_json::json!({
                    "prompt": prompt, "provider": provider, "model": model,
                    "runtime": runtime, "tools": tools, "session": session,
                    "limits": limits,
                    // The servers by name: a declaration may hold secrets.
                    "mcp": mcp.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
                    "network": network,
                    "images": images,
                })),
                StepAction::Noop | StepAction::Approval { .. } => None,
            };
            let checkpoint = Checkpoint {
                input,
                ..Checkpoint::pending(
                    self.rec.state.head.id.clone(),
                    Some(step.id.clone()),
                    step.checkpoint,
                    self.attempts[i],
                )
            };
            let id = self.rec.enter_checkpoint(checkpoint, &span)?;
            self.set(
                i,
                StepEvent::Start,
                Progress::Running {
                    checkpoint: id,
                    span,
                    token: CancellationToken::new(),
                },
            )?;
            started.push(i);
        }
        Ok(started)
    }

    /// Records the `permission_check` of a step that declares what it needs
    /// (spec tasks.md rule 19: permissions are acquired, recorded, before the
    /// step's checkpoint): the rules' decision on each, passed when they
    /// allow it (or a person approved the step's `.permit`), failed naming
    /// why when not — the step's run is then refused for the same reason.
    fn check_permissions(&mut self, step: &TaskStep) -> Result<()> {
        let decided = crate::permissions::for_step(step, &self.ctx.config.policy)
            .map(|policy| crate::permissions::required(step, &policy));
        let input = serde_json::json!({
            "step": step.id,
            "required_permissions": step.required_permissions,
        });
        let (refused, decisions) = match decided {
            Ok(d) => {
                let worst = crate::permissions::strictest(d.clone());
                (crate::permissions::refusal(step, worst.as_ref()), d)
            }
            Err(e) => (Some(e), Vec::new()),
        };
        let output = serde_json::json!({ "decisions": decisions });
        self.rules_checkpoint(
            CheckpointType::PermissionCheck,
            input,
            output,
            refused.map(|why| (why, rein_protocol::ErrorType::PermissionDenied)),
        )
    }

    /// Records the `security_scan` of a step its plan marks high-risk (spec
    /// tasks.md CP3): what the permission rules say of each simple command
    /// of its script (an agent step: of its network and MCP servers), of
    /// the paths it reads and the network it is given, with the strictest
    /// of them. Passed unless a rule denies something (then failed, as a
    /// security violation: the step's run is refused for the same reason).
    fn security_scan(&mut self, step: &TaskStep) -> Result<()> {
        let mut input = serde_json::json!({ "step": step.id, "risk_level": "high" });
        let (decisions, strictest, refused) =
            match crate::permissions::for_step(step, &self.ctx.config.policy) {
                Ok(policy) => {
                    let mut decisions = Vec::new();
                    if let StepAction::Command { run, .. } = &step.action {
                        input["run"] = serde_json::json!(run);
                        match rein_sandbox::policy::simple_commands(run) {
                            Ok(commands) => {
                                decisions.extend(commands.iter().map(|c| policy.check_command(c)));
                            }
                            Err(_) => decisions.push(policy.check_script(run)),
                        }
                    }
                    let strictest = crate::permissions::decide_under(step, &policy);
                    // Only a denial fails the scan: an ask was a person's at `.permit`.
                    let refused = strictest
                        .as_ref()
                        .filter(|d| d.verdict == rein_protocol::Verdict::Deny)
                        .and_then(|d| crate::permissions::refusal(step, Some(d)))
                        .map(|why| {
                            format!("step `{}` is refused by the security scan: {why}", step.id)
                        });
                    (decisions, strictest, refused)
                }
                Err(e) => (Vec::new(), None, Some(e)),
            };
        let output = serde_json::json!({ "decisions": decisions, "strictest": strictest });
        self.rules_checkpoint(
            CheckpointType::SecurityScan,
            input,
            output,
            refused.map(|why| (why, rein_protocol::ErrorType::SecurityViolation)),
        )
    }

    /// A step-less checkpoint the permission rules decide before a step's
    /// own: passed, or failed for `refused`'s reason and error type.
    fn rules_checkpoint(
        &mut self,
        kind: CheckpointType,
        input: serde_json::Value,
        output: serde_json::Value,
        refused: Option<(String, rein_protocol::ErrorType)>,
    ) -> Result<()> {
        let Some((why, error_type)) = refused else {
            system_checkpoint(
                &mut self.rec,
                kind,
                Some(input),
                Some(output),
                ApprovedBy {
                    kind: Approver::System,
                    who: "the permission rules".into(),
                },
            )?;
            return Ok(());
        };
        let span = SpanRef::child_of(&self.rec.state.head.span_id);
        let checkpoint = Checkpoint {
            input: Some(input),
            ..Checkpoint::pending(self.rec.state.head.id.clone(), None, kind, 1)
        };
        let id = self.rec.enter_checkpoint(checkpoint, &span)?;
        self.rec.record(
            TaskChange::CheckpointFailed {
                checkpoint_id: id,
                duration_ms: 0,
                error: why,
                output: Some(output),
                will_retry: false,
                error_type: Some(error_type),
                retry_at: None,
            },
            &span,
        )?;
        Ok(())
    }

    /// Who told step `i` to run again, if this attempt follows a person's answer
    /// to its escalation (its checkpoint before the running one).
    pub(super) fn approved_rerun(&self, i: usize) -> Option<String> {
        // Every checkpoint of a step counts an attempt: the first has none before it.
        if self.attempts[i] <= 1 {
            return None;
        }
        let id = &self.steps[i].id;
        self.rec
            .state
            .checkpoints
            .iter()
            .rev()
            .filter(|cp| cp.step_id.as_deref() == Some(id.as_str()))
            .nth(1)
            .filter(|cp| {
                cp.kind == CheckpointType::UserApproval && cp.status == CheckpointStatus::Completed
            })
            .map(|cp| {
                cp.approved_by
                    .as_ref()
                    .map_or_else(|| "a person".to_owned(), |a| a.who.clone())
            })
    }

    pub(super) fn spawn(&mut self, i: usize) {
        let Progress::Running {
            token,
            checkpoint,
            span,
        } = &self.progress[i]
        else {
            return;
        };
        // A child of the task's span (the current one while the runner
        // drives), exported with the span id the step's events carry.
        let span = crate::spans::with_span_id(&span.span_id, || {
            tracing::info_span!(
                "step",
                step_id = %self.steps[i].id,
                checkpoint_id = %checkpoint,
                attempt = self.attempts[i],
                trace_id = %self.rec.state.head.trace_id,
                span_id = %span.span_id,
            )
        });
        let request = StepRequest {
            task_id: self.rec.state.head.id.clone(),
            step: Arc::clone(&self.steps[i]),
            attempt: self.attempts[i],
            workspace: self.workspace.clone(),
            output_tail_bytes: self.ctx.config.output_tail_bytes,
            policy: Arc::clone(&self.ctx.config.policy),
            journal: matches!(self.steps[i].action, StepAction::Agent { .. }).then(|| {
                crate::journal::Journal::new(
                    Arc::clone(&self.ctx.store),
                    &self.rec.state.head.id,
                    &self.steps[i].id,
                )
            }),
            approved_by: self.approved_rerun(i),
            asker: Some(crate::asking::Asker::new(i, self.asks_tx.clone())),
            data_dir: self.ctx.config.data_dir.clone(),
            guard: Arc::clone(&self.guard),
            sessions: matches!(self.steps[i].action, StepAction::Agent { .. })
                .then(|| self.ctx.sessions()),
            task_budget: self.budget,
        };
        let executor = Arc::clone(&self.ctx.executor);
        let token = token.clone();
        // A verify step is the engine's: it checks what its step did.
        let verification = match &self.steps[i].action {
            StepAction::Verify { step } => {
                self.steps
                    .iter()
                    .find(|s| &s.id == step)
                    .map(|target| crate::pev::Verification {
                        records: self.ctx.records(),
                        executor: Arc::clone(&executor),
                        step: Arc::clone(target),
                        request: request.clone(),
                        output: self
                            .rec
                            .state
                            .checkpoints
                            .iter()
                            .rev()
                            .find(|cp| {
                                cp.step_id.as_deref() == Some(step.as_str())
                                    && cp.status == CheckpointStatus::Completed
                            })
                            .and_then(|cp| cp.output.clone()),
                        shared_state: self.shared_state.clone(),
                    })
            }
            _ => None,
        };
        // With a shared state named by the plan, the step records itself there: an
        // action as it starts, and how it ended.
        let recording = self
            .shared_state
            .clone()
            .filter(|_| verification.is_none())
            .map(|state| {
                (
                    Arc::clone(&self.ctx.store),
                    Arc::clone(&self.ctx.config.clock),
                    state,
                    crate::shared_state::step_action(
                        &self.rec.state.head.id,
                        &self.steps[i],
                        rein_protocol::WorkStatus::Active,
                    ),
                )
            });
        // An agent step run by a runtime rein does not run leaves evidence of
        // its side effects.
        let evidence = matches!(self.steps[i].action, StepAction::Agent { .. }).then(|| {
            (
                self.ctx.records(),
                self.rec.state.head.id.to_string(),
                self.steps[i].id.clone(),
                self.shared_state.clone(),
            )
        });
        let poll = self.ctx.config.control_poll;
        let step = async move {
            if let Some((store, clock, state, action)) = &recording {
                // Under the state's enforcement this waits (serialize) or
                // refuses (reject) while the step collides with a running one.
                let start = crate::shared_state::start_step(
                    store.as_ref(),
                    state,
                    action.clone(),
                    clock.as_ref(),
                    poll,
                    &token,
                )
                .await;
                if let crate::shared_state::Start::Rejected(conflict) = start {
                    let error = format!(
                        "shared state {state} rejects the step: {} ({})",
                        conflict.summary, conflict.id
                    );
                    let outcome = StepOutcome::Failed {
                        error,
                        output: serde_json::to_value(&*conflict).ok(),
                        failure: crate::recovery::Failure::Validation,
                    };
                    return (i, outcome, Duration::ZERO);
                }
            }
            let started = Instant::now();
            let mut outcome = match verification {
                Some(v) => v.run(token).await,
                None => executor.execute(request, token).await,
            };
            let elapsed = started.elapsed();
            if let Some((records, task, step, state)) = evidence
                && let StepOutcome::Passed {
                    output: Some(output),
                }
                | StepOutcome::Failed {
                    output: Some(output),
                    ..
                } = &mut outcome
            {
                records
                    .record_agent_evidence(&task, &step, state, output)
                    .await;
            }
            if let Some((store, clock, state, action)) = recording {
                let status = match &outcome {
                    StepOutcome::Passed { .. } => rein_protocol::WorkStatus::Completed,
                    StepOutcome::Failed { .. } => rein_protocol::WorkStatus::Failed,
                    StepOutcome::Cancelled => rein_protocol::WorkStatus::Cancelled,
                };
                let ended = rein_protocol::Action { status, ..action };
                crate::shared_state::record_step(store.as_ref(), &state, ended, clock.now(), true)
                    .await;
            }
            (i, outcome, elapsed)
        }
        .instrument(span);
        let step = std::panic::AssertUnwindSafe(step)
            .catch_unwind()
            .map(move |ended| {
                ended.unwrap_or_else(|panic| {
                    let error = format!(
                        "the step's executor crashed (panic: {})",
                        panic_message(&*panic)
                    );
                    let failure = crate::recovery::Failure::Internal;
                    let outcome = StepOutcome::Failed {
                        error,
                        output: None,
                        failure,
                    };
                    (i, outcome, Duration::ZERO)
                })
            });
        self.running.push(Box::pin(step));
    }

    pub(super) fn on_joined(&mut self, (i, outcome, elapsed): Finished) -> Result<()> {
        // A step the run already closed (an abort) has nothing more to record.
        if !matches!(self.progress[i], Progress::Running { .. }) {
            return Ok(());
        }
        let Progress::Running {
            checkpoint, span, ..
        } = self.set(i, StepEvent::End, Progress::Ended)?
        else {
            return Ok(());
        };
        let duration_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        // A step that can change files: the workspace it left is kept.
        if self.ctx.config.saved.is_some()
            && matches!(
                self.steps[i].action,
                StepAction::Command { .. } | StepAction::Agent { .. }
            )
        {
            self.to_save.push(checkpoint.clone());
        }
        if let Some(question) = self.take_parked(i) {
            // Stopped to wait for a person (--no-wait): it runs again on resume.
            self.rec.record(
                to_run_again(
                    checkpoint,
                    duration_ms,
                    format!(
                        "stopped to wait for a person to answer {question}; it runs again when the task resumes"
                    ),
                ),
                &span,
            )?;
            self.set(i, StepEvent::RunAgain, Progress::NotStarted)?;
            return Ok(());
        }
        // An agent step's output names the runtime selected: an event of its own.
        let selection = match &outcome {
            StepOutcome::Passed { output } | StepOutcome::Failed { output, .. }
                if matches!(self.steps[i].action, StepAction::Agent { .. }) =>
            {
                output
                    .as_ref()
                    .and_then(|o| o.get("selection"))
                    .and_then(|s| {
                        serde_json::from_value::<rein_protocol::SelectionDecision>(s.clone()).ok()
                    })
            }
            _ => None,
        };
        if let Some(decision) = selection {
            self.rec.record(
                TaskChange::RuntimeSelected {
                    checkpoint_id: checkpoint.clone(),
                    decision: Box::new(decision),
                },
                &span,
            )?;
        }
        match outcome {
            StepOutcome::Passed { output } => {
                self.rec.record(
                    TaskChange::CheckpointPassed {
                        checkpoint_id: checkpoint,
                        duration_ms,
                        output,
                        approved_by: None,
                    },
                    &span,
                )?;
                if self.recoveries[i] > 0 {
                    self.rec.record(
                        TaskChange::RecoverySucceeded {
                            step_id: self.steps[i].id.clone(),
                            attempts: self.recoveries[i],
                        },
                        &span,
                    )?;
                }
                self.complete(i, StepEvent::Pass)?;
            }
            StepOutcome::Failed {
                error,
                output,
                failure,
            } => {
                let failed = recovery::FailedAttempt {
                    checkpoint,
                    span,
                    duration_ms,
                    error,
                    output,
                };
                self.recover(i, failed, &failure)?;
            }
            StepOutcome::Cancelled => {
                self.fail_step(
                    i,
                    checkpoint,
                    &span,
                    duration_ms,
                    "cancelled while running".to_owned(),
                )?;
            }
        }
        Ok(())
    }
}

/// The running steps' futures. The runner is shared with the threads that may
/// poll its task, so it must be `Sync`; the futures are only ever touched through
/// `&mut`, which `SyncWrapper` makes a guarantee.
#[derive(Default)]
pub(super) struct Running(
    sync_wrapper::SyncWrapper<FuturesUnordered<BoxFuture<'static, Finished>>>,
);

impl Running {
    pub(super) fn push(&mut self, step: BoxFuture<'static, Finished>) {
        self.0.get_mut().push(step);
    }

    pub(super) fn len(&mut self) -> usize {
        self.0.get_mut().len()
    }

    pub(super) fn is_empty(&mut self) -> bool {
        self.0.get_mut().is_empty()
    }

    /// The next step to end.
    pub(super) async fn next(&mut self) -> Option<Finished> {
        self.0.get_mut().next().await
    }

    /// A step that has ended already, if any.
    pub(super) fn next_ended(&mut self) -> Option<Finished> {
        self.0.get_mut().next().now_or_never().flatten()
    }
}

/// What a panic said, for the step's error.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panicked".to_owned())
}
