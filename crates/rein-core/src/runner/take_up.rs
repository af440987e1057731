//! Taking a task up: what an interrupted run left (its attempts' processes,
//! its steps in progress) settled before anything new starts.

use super::*;

impl TaskRun<'_> {
    /// Records the start or resumption, and settles steps a stopped runner left in
    /// progress: idempotent ones (and `--rerun`) run again, `--skip` ones are
    /// skipped, and any other pauses the task naming it.
    pub(super) fn take_up(
        &mut self,
        options: &RunOptions,
        mut leftovers: HashMap<usize, std::result::Result<Option<String>, String>>,
    ) -> Result<()> {
        if !self.taken_up {
            let change =
                crate::goal_run::take_up_change(&self.ctx.runner, &self.rec.state, options);
            self.rec.task_event(change)?;
        }
        for i in 0..self.steps.len() {
            let Progress::Interrupted {
                checkpoint,
                started_at,
            } = &self.progress[i]
            else {
                continue;
            };
            let (checkpoint, duration_ms) = (checkpoint.clone(), elapsed_ms(*started_at));
            let step = Arc::clone(&self.steps[i]);
            // Nothing of the attempt may still run beside a new one, nor while
            // a person is asked whether it partly ran.
            let leftover = match leftovers.remove(&i).unwrap_or(Ok(None)) {
                Ok(found) => found,
                Err(reason) => {
                    self.rec.task_event(TaskChange::TaskPaused { reason })?;
                    return Ok(());
                }
            };
            let found = leftover
                .as_deref()
                .map(|l| format!("; {l}"))
                .unwrap_or_default();
            if options.skip.contains(&step.id) {
                self.rec.task_event(TaskChange::CheckpointSkipped {
                    checkpoint_id: checkpoint,
                    reason: "skipped by the operator after rein stopped while it was running"
                        .into(),
                    duration_ms: Some(duration_ms),
                })?;
                self.set(i, StepEvent::Skip, Progress::Skipped)?;
            } else if step.idempotent || options.rerun.contains(&step.id) {
                let why = if step.idempotent {
                    "it is idempotent"
                } else {
                    "the operator chose --rerun"
                };
                self.rec.task_event(to_run_again(
                    checkpoint,
                    duration_ms,
                    format!("interrupted: rein stopped while this step was running{found}; running it again because {why}"),
                ))?;
                self.set(i, StepEvent::RunAgain, Progress::NotStarted)?;
            } else {
                // It may have partly run: a person decides.
                self.ask_interrupted(i, checkpoint, leftover.as_deref())?;
            }
        }
        Ok(())
    }

    /// Stops what is left of the interrupted attempts' processes: each one's
    /// process group as recorded, and any process started with its `REIN_*`
    /// marks (which also finds an attempt killed before its group was
    /// recorded). Off the async threads: it looks at `/proc` and may wait.
    /// An attempt `sweep` (taken after the runner stopped) did not see is gone.
    /// By step: `Ok(what was found)`, or `Err(why the task must pause)` when
    /// some of it is still there after the wait.
    pub(super) async fn stop_leftovers(
        &self,
        sweep: Option<&rein_sandbox::process::Sweep>,
    ) -> HashMap<usize, std::result::Result<Option<String>, String>> {
        use rein_sandbox::process::{Leftover, stop_leftover};
        let mut out = HashMap::new();
        for i in 0..self.steps.len() {
            let Progress::Interrupted { checkpoint, .. } = &self.progress[i] else {
                continue;
            };
            let Some(cp) = self.rec.state.checkpoint(checkpoint) else {
                continue;
            };
            let recorded = cp
                .metadata
                .get(crate::fold::PROCESS)
                .and_then(|p| serde_json::from_value::<rein_protocol::StepProcess>(p.clone()).ok());
            let marks = crate::executor::attempt_marks(
                &self.rec.state.head.id,
                &self.steps[i].id,
                cp.attempt,
            );
            if let Some(sweep) = sweep {
                let marks: Vec<(&str, &str)> =
                    marks.iter().map(|(k, v)| (*k, v.as_str())).collect();
                if !sweep.saw(recorded.as_ref(), &marks) {
                    out.insert(i, Ok(None));
                    continue;
                }
            }
            let looked = tokio::task::spawn_blocking(move || {
                let marks: Vec<(&str, &str)> =
                    marks.iter().map(|(k, v)| (*k, v.as_str())).collect();
                stop_leftover(recorded.as_ref(), &marks, LEFTOVER_WAIT)
            })
            .await;
            let step = &self.steps[i].id;
            out.insert(
                i,
                match looked {
                    Ok(Leftover::Gone) => Ok(None),
                    Ok(Leftover::Stopped { processes }) => Ok(Some(format!(
                        "{processes} process(es) of the interrupted attempt were still running and were stopped first"
                    ))),
                    Ok(Leftover::StillThere { processes }) => Err(format!(
                        "{processes} process(es) of an interrupted attempt of `{step}` are still running after SIGKILL; stop them, then resume the task"
                    )),
                    Err(e) => Err(format!(
                        "could not look for what is left of an interrupted attempt of `{step}` ({e}); resume the task again"
                    )),
                },
            );
        }
        out
    }

    /// Counts open dependencies, fills the ready set, and marks the dependants of
    /// failed steps (a resumed run may find failures that were not propagated yet).
    pub(super) fn settle_dependencies(&mut self) -> Result<()> {
        let mut failed = Vec::new();
        self.waiting_on.fill(0);
        for j in 0..self.steps.len() {
            if !self.progress[j].satisfies_dependants() {
                for &i in &self.dependants[j] {
                    self.waiting_on[i] += 1;
                }
            }
            if self.progress[j].is_failure() {
                failed.push(j);
            }
        }
        for i in failed {
            self.fail_dependants(i)?;
        }
        for i in 0..self.steps.len() {
            if matches!(self.progress[i], Progress::NotStarted) && self.waiting_on[i] == 0 {
                self.ready.insert(i);
            }
        }
        Ok(())
    }
}
