//! `rein run PLAN` and `rein tasks resume`: run tasks in the foreground.
//!
//! The first Ctrl-C pauses (no new steps start; running ones finish); a second one,
//! or SIGTERM, stops running steps at once and leaves the task resumable exactly as
//! a crash would.

use crate::output::{say, shout};
use std::path::PathBuf;
use std::sync::Arc;

use rein_core::plan::load_plan_file;
use rein_core::{CreateTask, Engine, RunOptions};
use rein_protocol::{TaskId, TaskState, TaskStatus};
use tokio_util::sync::CancellationToken;

use crate::cli::{ResumeArgs, RunArgs, RunOutput};
use crate::commands::{Context, parse_task_id, print_json};
use crate::exit::{self, UsageError};
use crate::progress::ProgressView;
use crate::prompt::{self, Prompter};

pub async fn run(data_dir: Option<PathBuf>, args: RunArgs) -> anyhow::Result<u8> {
    let spec = load_plan_file(&args.plan)?;
    let ctx = Context::open(data_dir, args.max_parallel as usize)?;
    let state = ctx
        .engine
        .create(CreateTask {
            plan: spec.plan,
            session_id: args.session.or(spec.session),
            workspace: args.workspace.or(spec.workspace),
        })
        .await?;
    let out = Out(args.output);
    out.line(&format!(
        "task {} created: {} steps, workspace {}",
        state.id(),
        state.head.context.pending_steps.len(),
        state
            .head
            .resources
            .workspace_path
            .as_deref()
            .unwrap_or("-")
    ));
    for cp in &state.checkpoints {
        let who = cp
            .approved_by
            .as_ref()
            .map(|a| format!(" by {}", a.who))
            .unwrap_or_default();
        out.line(&format!(
            "[{}] {} {} passed{who}",
            cp.started_at.format("%H:%M:%S%.3f"),
            cp.kind.phase().label(),
            cp.kind
        ));
    }
    let signals = Signals::install(out, args.no_wait);
    let (code, _) = drive(
        &ctx.engine,
        state,
        Vec::new(),
        Vec::new(),
        &signals,
        args.output,
    )
    .await?;
    Ok(code)
}

pub async fn resume(data_dir: Option<PathBuf>, args: ResumeArgs) -> anyhow::Result<u8> {
    let ctx = Context::open(data_dir, 4)?;
    let out = Out(args.output);
    let signals = Signals::install(out, args.no_wait);
    if let Some(id) = &args.id {
        let id = parse_task_id(id)?;
        let state = ctx.engine.get(&id).await?;
        let (code, _) = drive(
            &ctx.engine,
            state,
            args.rerun,
            args.skip,
            &signals,
            args.output,
        )
        .await?;
        return Ok(code);
    }
    if !args.rerun.is_empty() || !args.skip.is_empty() {
        return Err(UsageError(
            "--rerun and --skip name steps of one task: give its id instead of --all".into(),
        )
        .into());
    }
    let heads = ctx.engine.resumable().await?;
    if heads.is_empty() {
        out.line(
            "nothing to resume: no task is pending, paused or left in progress by a stopped runner",
        );
        if args.output.json {
            say!("[]");
        }
        return Ok(exit::SUCCESS);
    }
    out.line(&format!("resuming {} task(s)", heads.len()));
    let mut states = Vec::new();
    for head in &heads {
        states.push(ctx.engine.get(&head.id).await?);
    }
    let steps = plan_steps(&ctx.engine, &states).await?;
    let view = ProgressView::start(ctx.engine.subscribe(), &states, steps, args.output);
    let mut runs = tokio::task::JoinSet::new();
    for state in &states {
        let engine = Arc::clone(&ctx.engine);
        let id = state.id().clone();
        let options = signals.options(Vec::new(), Vec::new());
        runs.spawn(async move { (id.clone(), engine.run(&id, options).await) });
    }
    let mut finals = Vec::new();
    let mut worst = exit::SUCCESS;
    while let Some(joined) = runs.join_next().await {
        let (id, result) = joined?;
        match result {
            Ok(state) => {
                worst = worse(worst, exit::for_status(state.status()));
                finals.push(state);
            }
            Err(e) => {
                shout!("error: task {id}: {e}");
                worst = worse(worst, exit::code_for(&e.into()));
            }
        }
    }
    view.finish().await;
    finals.sort_by(|a, b| a.id().cmp(b.id()));
    if args.output.json {
        print_json(&finals)?;
    } else {
        for state in &finals {
            out.outcome(state);
        }
    }
    Ok(worst)
}

/// Failure beats waiting beats success.
fn worse(a: u8, b: u8) -> u8 {
    let rank = |c| match c {
        exit::SUCCESS => 0,
        exit::WAITING => 1,
        _ => 2,
    };
    if rank(b) > rank(a) { b } else { a }
}

async fn plan_steps(engine: &Engine, states: &[TaskState]) -> anyhow::Result<u64> {
    let mut total = 0;
    for s in states {
        total += engine.plan(s.id()).await?.steps.len() as u64;
    }
    Ok(total)
}

/// Runs one task with progress, then reports how it ended.
async fn drive(
    engine: &Arc<Engine>,
    state: TaskState,
    rerun: Vec<String>,
    skip: Vec<String>,
    signals: &Signals,
    output: RunOutput,
) -> anyhow::Result<(u8, TaskState)> {
    let steps = plan_steps(engine, std::slice::from_ref(&state)).await?;
    let view = ProgressView::start(
        engine.subscribe(),
        std::slice::from_ref(&state),
        steps,
        output,
    );
    let id: TaskId = state.id().clone();
    // On a terminal, questions for this task are asked right here.
    let asking =
        (prompt::interactive() && !signals.no_wait && !output.json && !output.quiet).then(|| {
            Prompter::start(
                Arc::clone(engine),
                engine.subscribe(),
                id.clone(),
                crate::commands::actor(None),
                view.bar(),
            )
        });
    let result = engine.run(&id, signals.options(rerun, skip)).await;
    if let Some(asking) = asking {
        asking.finish().await;
    }
    view.finish().await;
    let state = result?;
    if output.json {
        print_json(&state)?;
    } else {
        Out(output).outcome(&state);
    }
    Ok((exit::for_status(state.status()), state))
}

/// Progress and outcome lines: stdout normally, stderr with --json, none with --quiet.
#[derive(Clone, Copy)]
struct Out(RunOutput);

impl Out {
    fn line(&self, text: &str) {
        if self.0.quiet {
        } else if self.0.json {
            shout!("{text}");
        } else {
            say!("{text}");
        }
    }

    fn outcome(&self, state: &TaskState) {
        let id = state.id();
        let h = &state.head;
        let text = match state.status() {
            TaskStatus::Completed => {
                let ms = (h.updated_at - h.created_at).num_milliseconds().max(0) as u64;
                format!(
                    "task {id} completed: {} steps in {}",
                    h.context.completed_steps.len(),
                    crate::render::duration_ms(ms)
                )
            }
            TaskStatus::Failed => format!(
                "task {id} failed: {}\n  details: rein tasks show {id}",
                h.error.as_deref().unwrap_or("unknown error")
            ),
            TaskStatus::Cancelled => {
                format!("task {id} cancelled: {}", h.error.as_deref().unwrap_or(""))
            }
            TaskStatus::Paused => format!(
                "task {id} paused: {}\n  resume with: rein tasks resume {id}",
                h.context
                    .blocked_reason
                    .as_deref()
                    .unwrap_or("no reason given")
            ),
            TaskStatus::InProgress | TaskStatus::Pending => {
                format!("task {id} stopped before it finished; resume with: rein tasks resume {id}")
            }
        };
        if self.0.quiet {
            // The outcome is the one line --quiet keeps.
            say!("{}", text.lines().next().unwrap_or_default());
        } else {
            self.line(&text);
        }
    }
}

/// Ctrl-C and SIGTERM, turned into the engine's pause and cancel tokens, and how
/// runs started here treat waiting for a person.
struct Signals {
    pause: CancellationToken,
    cancel: CancellationToken,
    no_wait: bool,
}

impl Signals {
    fn install(out: Out, no_wait: bool) -> Signals {
        let pause = CancellationToken::new();
        let cancel = CancellationToken::new();
        let (p, c) = (pause.clone(), cancel.clone());
        tokio::spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut int), Ok(mut term)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) else {
                return;
            };
            loop {
                tokio::select! {
                    _ = int.recv() => {
                        if p.is_cancelled() {
                            c.cancel();
                            out.line("interrupt: stopping running steps now; the task stays resumable");
                        } else {
                            p.cancel();
                            out.line("interrupt: pausing once running steps finish (Ctrl-C again to stop them now)");
                        }
                    }
                    _ = term.recv() => {
                        c.cancel();
                        out.line("terminated: stopping running steps now; the task stays resumable");
                    }
                }
            }
        });
        Signals {
            pause,
            cancel,
            no_wait,
        }
    }

    fn options(&self, rerun: Vec<String>, skip: Vec<String>) -> RunOptions {
        RunOptions {
            rerun,
            skip,
            pause: self.pause.clone(),
            cancel: self.cancel.clone(),
            no_wait: self.no_wait,
            decided_by: crate::commands::actor(None),
        }
    }
}
