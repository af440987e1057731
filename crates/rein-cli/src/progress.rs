//! Live progress of a run: a progress bar on a terminal, timestamped lines
//! otherwise. It only reads the engine's published (committed) events.

use crate::output::{say, shout};
use std::collections::{BTreeSet, HashMap};
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use rein_protocol::{HarnessEvent, TaskChange, TaskId, TaskState};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::cli::RunOutput;
use crate::render::{CheckpointIndex, describe, timed};

/// Where progress goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Bar,
    Lines { stderr: bool },
    Quiet,
}

pub struct ProgressView {
    stop: CancellationToken,
    handle: tokio::task::JoinHandle<()>,
    bar: Option<ProgressBar>,
}

struct TaskView {
    index: CheckpointIndex,
    running: BTreeSet<String>,
    prefix: String,
}

impl ProgressView {
    /// Starts showing the events of `tasks` (their states before the run).
    pub fn start(
        events: broadcast::Receiver<HarnessEvent>,
        tasks: &[TaskState],
        steps: u64,
        output: RunOutput,
    ) -> Self {
        let mode = if output.quiet {
            Mode::Quiet
        } else if !output.json
            && tasks.len() == 1
            && std::io::stderr().is_terminal()
            && std::io::stdout().is_terminal()
        {
            Mode::Bar
        } else {
            Mode::Lines {
                stderr: output.json,
            }
        };
        let multi = tasks.len() > 1;
        let views: HashMap<TaskId, TaskView> = tasks
            .iter()
            .map(|t| {
                let prefix = if multi {
                    format!("{} ", t.id())
                } else {
                    String::new()
                };
                (
                    t.id().clone(),
                    TaskView {
                        index: CheckpointIndex::from_state(t),
                        running: BTreeSet::new(),
                        prefix,
                    },
                )
            })
            .collect();
        let done = tasks
            .iter()
            .map(|t| t.head.context.completed_steps.len() as u64)
            .sum();
        let bar = (mode == Mode::Bar).then(|| {
            let bar = ProgressBar::new(steps);
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:32} {pos}/{len} steps  {wide_msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.set_position(done);
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        let stop = CancellationToken::new();
        let handle = tokio::spawn(show(events, views, mode, bar.clone(), stop.clone()));
        ProgressView { stop, handle, bar }
    }

    /// The progress bar, when one is drawn (a question must hide it to be typed at).
    pub fn bar(&self) -> Option<ProgressBar> {
        self.bar.clone()
    }

    /// Shows what is left to show, then stops.
    pub async fn finish(self) {
        self.stop.cancel();
        let _ = self.handle.await;
    }
}

async fn show(
    mut events: broadcast::Receiver<HarnessEvent>,
    mut views: HashMap<TaskId, TaskView>,
    mode: Mode,
    bar: Option<ProgressBar>,
    stop: CancellationToken,
) {
    loop {
        let event = tokio::select! {
            biased;
            received = events.recv() => received,
            () = stop.cancelled() => match events.try_recv() {
                Ok(e) => Ok(e),
                Err(_) => break,
            },
        };
        let event = match event {
            Ok(e) => e,
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => break,
        };
        let Some(view) = event.task_id.as_ref().and_then(|id| views.get_mut(id)) else {
            continue;
        };
        view.index.observe(&event);
        let line = describe(&event, &view.index);
        if let Some(bar) = &bar {
            track(&event, view, bar);
        }
        let Some(line) = line else { continue };
        let line = timed(&event, &format!("{}{line}", view.prefix));
        match mode {
            Mode::Quiet => {}
            Mode::Bar => {
                if let Some(bar) = &bar
                    && !line.contains("] started  ")
                {
                    // Works whether the bar is drawn or hidden behind a question.
                    bar.suspend(|| shout!("{line}"));
                }
            }
            Mode::Lines { stderr: true } => shout!("{line}"),
            Mode::Lines { stderr: false } => say!("{line}"),
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
}

/// Keeps the bar's count and its list of running steps up to date.
fn track(event: &HarnessEvent, view: &mut TaskView, bar: &ProgressBar) {
    match &event.change {
        TaskChange::CheckpointEntered { checkpoint_id } => {
            if let Some(step) = view.index.step(checkpoint_id) {
                view.running.insert(step.to_owned());
            }
        }
        TaskChange::CheckpointPassed { checkpoint_id, .. }
        | TaskChange::CheckpointFailed { checkpoint_id, .. }
        | TaskChange::CheckpointSkipped { checkpoint_id, .. } => {
            if let Some(step) = view.index.step(checkpoint_id) {
                view.running.remove(step);
                if !matches!(event.change, TaskChange::CheckpointFailed { .. }) {
                    bar.inc(1);
                }
            }
        }
        // A goal became a plan: its steps count from now on.
        TaskChange::PlanDecomposed { steps, .. } => bar.inc_length(steps.len() as u64),
        _ => {}
    }
    let running: Vec<&str> = view.running.iter().map(String::as_str).collect();
    bar.set_message(if running.is_empty() {
        String::new()
    } else {
        format!("running: {}", running.join(", "))
    });
}
