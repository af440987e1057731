//! `rein run PLAN` and `rein tasks resume`: run tasks in the foreground.
//!
//! The first Ctrl-C pauses (no new steps start; running ones finish); a second one,
//! or SIGTERM, stops running steps at once and leaves the task resumable exactly as
//! a crash would.
//!
//! With `--url` the task runs in the server: the plan is read and checked here,
//! sent, and its events are followed over the server's event stream with the same
//! progress and outcome lines. There the first Ctrl-C asks the server to pause the
//! task; a second one, or SIGTERM, stops watching and leaves the task to the server.

use crate::output::{say, shout};
use std::sync::Arc;

use rein_core::plan::{PlanSpec, load_plan_file};
use rein_core::{CreateTask, Engine, RunOptions};
use rein_protocol::{TaskChange, TaskId, TaskState, TaskStatus};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::backend::Backend;
use crate::cli::{ResumeArgs, RunArgs, RunOutput};
use crate::client::{Client, TaskEnvelope};
use crate::commands::{Context, Stop, StopSignals, Target, parse_task_id, print_json};
use crate::exit::{self, UsageError};
use crate::progress::ProgressView;
use crate::prompt::{self, Prompter};
use rein_protocol::api::SubmitTask;

/// The plan of `rein run --goal`: no steps yet, the goal to decompose.
fn goal_spec(goal: &str, args: &RunArgs) -> anyhow::Result<PlanSpec> {
    if goal.trim().is_empty() {
        return Err(UsageError("--goal is empty: say what the task is to achieve".into()).into());
    }
    let mut plan = rein_protocol::TaskDecomposition::new(goal.trim(), Vec::new());
    plan.goal = Some(crate::commands::goal(&args.decompose));
    Ok(PlanSpec {
        plan,
        session: None,
        workspace: None,
    })
}

/// A goal whose model nobody configured is refused before anything is made:
/// rein would otherwise call a hosted API with no key and leave a paused task
/// behind. A plugin may serve the route, so with plugins nothing is refused.
fn no_model_for(target: &Target, goal: &rein_protocol::Goal) -> anyhow::Result<()> {
    if !target.plugins.is_empty()
        || goal
            .runtime
            .as_deref()
            .is_some_and(|r| r != rein_protocol::BUILTIN_RUNTIME)
    {
        return Ok(());
    }
    let providers = &target.providers;
    let (hosted, key) = match goal.provider.as_deref().unwrap_or("openai") {
        "anthropic" => (
            (providers.anthropic.api_key.is_none()
                && providers.anthropic.base_url == rein_runtimes::anthropic::ANTHROPIC_BASE_URL)
                .then_some(rein_runtimes::anthropic::ANTHROPIC_BASE_URL),
            "ANTHROPIC_API_KEY",
        ),
        "openai" => (
            (providers.openai.api_key.is_none()
                && providers.openai.base_url == rein_runtimes::openai::OPENAI_BASE_URL)
                .then_some(rein_runtimes::openai::OPENAI_BASE_URL),
            "OPENAI_API_KEY",
        ),
        _ => (None, ""),
    };
    match hosted {
        None => Ok(()),
        Some(url) => Err(UsageError(format!(
            "a goal needs a model to plan it, and none is configured: rein would call {url} with no API key. \
             Point rein at one: set {key} (and REIN_MODEL), or run a local OpenAI-compatible server and set OPENAI_BASE_URL — \
             llama.cpp's (`pip install 'llama-cpp-python[server]'`, `python -m llama_cpp.server --model MODEL.gguf`): \
             OPENAI_BASE_URL=http://127.0.0.1:8000/v1; Ollama: OPENAI_BASE_URL=http://127.0.0.1:11434/v1 REIN_MODEL=llama3.2 — \
             or write it under [openai] in rein.toml (`rein config show` says where rein looked). Nothing was created."
        ))
        .into()),
    }
}

pub async fn run(target: &Target, args: RunArgs) -> anyhow::Result<u8> {
    let mut spec = match (&args.goal, &args.plan) {
        (Some(goal), _) => goal_spec(goal, &args)?,
        (None, Some(plan)) => load_plan_file(plan)?,
        (None, None) => {
            return Err(UsageError("give a plan file, or --goal \"…\"".into()).into());
        }
    };
    // The flags' budget over the plan's, bound by bound.
    spec.plan.budget = args.budget.over(spec.plan.budget)?;
    if let Some(url) = &target.url {
        let client = Client::new(url, target.token.clone())?;
        return run_remote(client, spec, args).await;
    }
    if let Some(goal) = &spec.plan.goal {
        no_model_for(target, goal)?;
    }
    let executor = crate::commands::executor(&target.sandbox, true).await?;
    let ctx = Context::for_target(target, args.max_parallel as usize, executor)?;
    let state = ctx
        .engine
        .create_here(CreateTask {
            plan: spec.plan,
            session_id: args.session.or(spec.session),
            workspace: args.workspace.or(spec.workspace),
            confined_to: None,
        })
        .await?;
    let out = Out::new(args.output, false);
    announce(out, &state);
    drive_new(&ctx.engine, state, out, args.no_wait, args.output).await
}

/// Runs a task just made here to where it stops, Ctrl-C pausing it: its exit
/// code.
pub(super) async fn drive_new(
    engine: &Arc<Engine>,
    state: TaskState,
    out: Out,
    no_wait: bool,
    output: RunOutput,
) -> anyhow::Result<u8> {
    let signals = Signals::install(out, no_wait);
    let (code, _) = drive(engine, state, Vec::new(), Vec::new(), &signals, output).await?;
    Ok(code)
}

/// Where task `state` works, as its announcement says it.
pub(super) fn workspace_of(state: &TaskState) -> &str {
    state
        .head
        .resources
        .workspace_path
        .as_deref()
        .unwrap_or("-")
}

/// Says that a task was created, and which control points it passed on the way.
fn announce(out: Out, state: &TaskState) {
    let steps = match state.head.context.pending_steps.len() {
        // A goal's steps come at CP2.
        0 if !state
            .checkpoints
            .iter()
            .any(|c| c.kind == rein_protocol::CheckpointType::TaskPlan) =>
        {
            "a goal to decompose".to_owned()
        }
        n => format!("{n} steps"),
    };
    out.line(&format!(
        "task {} created: {steps}, workspace {}",
        state.id(),
        workspace_of(state)
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
}

/// `rein run --url`: the plan runs in the server; this process follows it.
async fn run_remote(client: Client, spec: PlanSpec, args: RunArgs) -> anyhow::Result<u8> {
    // The server checks the directories against its --workspace-root: they
    // are sent absolute, as they are here (it refuses them without a root).
    let absolute = |path: &std::path::Path| {
        rein_sandbox::guard::real_path(path)
            .map_err(|e| UsageError(format!("cannot resolve {}: {e}", path.display())))
    };
    let workspace = args
        .workspace
        .or(spec.workspace)
        .map(|w| absolute(&w))
        .transpose()?;
    let mut plan = spec.plan;
    for step in &mut plan.steps {
        if let rein_protocol::StepAction::Command { allow_read, .. } = &mut step.action {
            for path in allow_read.iter_mut() {
                *path = absolute(std::path::Path::new(path.as_str()))?
                    .display()
                    .to_string();
            }
        }
    }
    plan.max_parallel = plan.max_parallel.or(Some(args.max_parallel));
    let session_id = args.session.or(spec.session);
    // A goal's keys go beside it; a plan says them in its steps.
    let body = match plan.goal.clone() {
        Some(goal) => SubmitTask {
            goal: Some(plan.original_task.clone()),
            provider: goal.provider,
            model: goal.model,
            runtime: goal.runtime,
            confirm: Some(goal.confirm),
            attempts: goal.attempts,
            max_tokens: goal.max_tokens,
            max_parallel: plan.max_parallel,
            budget: plan.budget,
            session_id,
            workspace,
            ..SubmitTask::default()
        },
        None => SubmitTask {
            plan: Some(plan),
            session_id,
            workspace,
            ..SubmitTask::default()
        },
    };
    let created: TaskEnvelope = client
        .call::<rein_protocol::endpoints::CreateTask>(&(), &(), &body)
        .await?;
    let out = Out::new(args.output, true);
    announce(out, &created.task);
    let signals = Signals::install(out, args.no_wait);
    let finals = watch_remote(&client, vec![created.task], &signals, args.output).await?;
    report(out, &finals, false)
}

/// Prints how runs ended (with --json their states: a list if `list`, else the
/// one) and returns the exit code of the worst.
pub(super) fn report(out: Out, finals: &[TaskState], list: bool) -> anyhow::Result<u8> {
    if out.output.json {
        match finals {
            [one] if !list => print_json(one)?,
            all => print_json(&all)?,
        }
    } else {
        for state in finals {
            out.outcome(state);
        }
    }
    Ok(finals
        .iter()
        .map(|s| exit::for_status(s.status()))
        .fold(exit::SUCCESS, worse))
}

/// Follows tasks the server runs, with progress and (on a terminal, for one task)
/// its questions asked here, until each finishes, pauses, stalls, waits for a
/// person under --no-wait, or the user stops watching. Returns their states then.
pub(super) async fn watch_remote(
    client: &Client,
    states: Vec<TaskState>,
    signals: &Signals,
    output: RunOutput,
) -> anyhow::Result<Vec<TaskState>> {
    let backend = Backend::remote(client.clone());
    let mut steps = 0;
    for s in &states {
        steps += backend.plan(s.id()).await?.steps.len() as u64;
    }
    let (events, _) = broadcast::channel(4096);
    let view = ProgressView::start(events.subscribe(), &states, steps, output);
    let asking = match states.as_slice() {
        [one] if prompt::interactive() && !signals.no_wait && !output.json && !output.quiet => {
            Some(Prompter::start(
                backend.clone(),
                events.subscribe(),
                one.id().clone(),
                crate::commands::actor(None),
                view.bar(),
            ))
        }
        _ => None,
    };
    let mut watchers = tokio::task::JoinSet::new();
    for state in &states {
        let (client, id, after) = (client.clone(), state.id().clone(), state.head.last_seq);
        let (events, stop, no_wait) = (events.clone(), signals.cancel.clone(), signals.no_wait);
        watchers.spawn(async move {
            client
                .watch(&id, after, &stop, |e| {
                    let _ = events.send(e.clone());
                    // Under --no-wait, a question for a person ends the watch.
                    Ok(no_wait && matches!(e.change, TaskChange::HumanApprovalRequested { .. }))
                })
                .await
                .map(|(_, state)| state)
        });
    }
    let mut finals = Vec::new();
    let mut pause_sent = false;
    let mut failure = None;
    loop {
        tokio::select! {
            joined = watchers.join_next() => match joined {
                None => break,
                Some(joined) => match joined? {
                    Ok(state) => finals.push(state),
                    Err(e) => {
                        signals.cancel.cancel();
                        failure.get_or_insert(e);
                    }
                },
            },
            () = signals.pause.cancelled(), if !pause_sent => {
                pause_sent = true;
                for state in &states {
                    let reason = "interrupted at the terminal that runs it";
                    if let Err(e) = backend.control(state.id(), false, &crate::commands::actor(None), reason).await {
                        shout!("error: cannot pause task {}: {e:#}", state.id());
                    }
                }
            }
        }
    }
    if let Some(asking) = asking {
        asking.finish().await;
    }
    view.finish().await;
    if let Some(e) = failure {
        return Err(e);
    }
    finals.sort_by(|a, b| a.id().cmp(b.id()));
    Ok(finals)
}

pub async fn resume(target: &Target, args: ResumeArgs) -> anyhow::Result<u8> {
    if let Some(url) = &target.url {
        let client = Client::new(url, target.token.clone())?;
        return resume_remote(client, args).await;
    }
    let executor = crate::commands::executor(&target.sandbox, true).await?;
    let ctx = Context::for_target(target, 4, executor)?;
    let out = Out::new(args.output, false);
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
    refuse_steps_with_all(&args)?;
    let (heads, sweep) = ctx.engine.resumable_swept().await?;
    if heads.is_empty() {
        // Say who runs what is still in progress, so "nothing" is not a puzzle.
        for (task, runner) in ctx.engine.run_elsewhere().await? {
            out.line(&format!(
                "task {} is being run by process {} on {}: not resumed here (pause or abort it there, or wait for it)",
                task.id, runner.pid, runner.host
            ));
        }
        return Ok(nothing_to_resume(out));
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
        let options = rein_core::RunOptions {
            sweep: sweep.clone(),
            ..signals.options(Vec::new(), Vec::new())
        };
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

fn refuse_steps_with_all(args: &ResumeArgs) -> anyhow::Result<()> {
    if !args.rerun.is_empty() || !args.skip.is_empty() {
        return Err(UsageError(
            "--rerun and --skip name steps of one task: give its id instead of --all".into(),
        )
        .into());
    }
    Ok(())
}

fn nothing_to_resume(out: Out) -> u8 {
    out.line(
        "nothing to resume: no task is pending, paused or left in progress by a stopped runner",
    );
    if out.output.json {
        say!("[]");
    }
    exit::SUCCESS
}

/// `rein tasks resume --url`: the server takes the task(s) up; this process follows.
async fn resume_remote(client: Client, args: ResumeArgs) -> anyhow::Result<u8> {
    let backend = Backend::remote(client.clone());
    let out = Out::new(args.output, true);
    let signals = Signals::install(out, args.no_wait);
    if let Some(id) = &args.id {
        let id = parse_task_id(id)?;
        // The state first: the events the run adds come after it.
        let state = backend.get(&id).await?;
        backend.start(&id, &args.rerun, &args.skip).await?;
        let finals = watch_remote(&client, vec![state], &signals, args.output).await?;
        return report(out, &finals, false);
    }
    refuse_steps_with_all(&args)?;
    let resumed = client
        .call::<rein_protocol::endpoints::ResumeAll>(&(), &(), &())
        .await?;
    if resumed.task_ids.is_empty() {
        return Ok(nothing_to_resume(out));
    }
    out.line(&format!("resuming {} task(s)", resumed.task_ids.len()));
    let mut states = Vec::new();
    for id in &resumed.task_ids {
        states.push(backend.get(id).await?);
    }
    let finals = watch_remote(&client, states, &signals, args.output).await?;
    report(out, &finals, true)
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
pub(super) async fn drive(
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
                Backend::local(Arc::clone(engine), Default::default()),
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
        Out::new(output, false).outcome(&state);
    }
    Ok((exit::for_status(state.status()), state))
}

/// Progress and outcome lines: stdout normally, stderr with --json, none with
/// --quiet; `remote` when the task runs in a server.
#[derive(Clone, Copy)]
pub(super) struct Out {
    output: RunOutput,
    remote: bool,
}

impl Out {
    pub(super) fn new(output: RunOutput, remote: bool) -> Out {
        Out { output, remote }
    }

    pub(super) fn line(&self, text: &str) {
        if self.output.quiet {
        } else if self.output.json {
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
            TaskStatus::InProgress | TaskStatus::Pending if self.remote => format!(
                "task {id} goes on in the server; follow it with: rein tasks follow {id}\n  questions waiting for a person: rein approvals list --task {id}"
            ),
            TaskStatus::InProgress | TaskStatus::Pending => {
                format!("task {id} stopped before it finished; resume with: rein tasks resume {id}")
            }
        };
        if self.output.quiet {
            // The outcome is the one line --quiet keeps.
            say!("{}", text.lines().next().unwrap_or_default());
        } else {
            self.line(&text);
        }
    }
}

/// Ctrl-C and SIGTERM, turned into the engine's pause and cancel tokens, and how
/// runs started here treat waiting for a person.
pub(super) struct Signals {
    pause: CancellationToken,
    cancel: CancellationToken,
    no_wait: bool,
}

impl Signals {
    pub(super) fn install(out: Out, no_wait: bool) -> Signals {
        let pause = CancellationToken::new();
        let cancel = CancellationToken::new();
        let (p, c) = (pause.clone(), cancel.clone());
        tokio::spawn(async move {
            let Some(mut signals) = StopSignals::listen() else {
                return;
            };
            loop {
                match signals.next().await {
                    Stop::Interrupt => {
                        if p.is_cancelled() {
                            c.cancel();
                            out.line(if out.remote {
                                "interrupt: no longer watching; the task goes on in the server"
                            } else {
                                "interrupt: stopping running steps now; the task stays resumable"
                            });
                        } else {
                            p.cancel();
                            out.line(if out.remote {
                                "interrupt: the server pauses the task once running steps finish (Ctrl-C again to stop watching)"
                            } else {
                                "interrupt: pausing once running steps finish (Ctrl-C again to stop them now)"
                            });
                        }
                    }
                    Stop::Terminate => {
                        c.cancel();
                        out.line(if out.remote {
                            "terminated: no longer watching; the task goes on in the server"
                        } else {
                            "terminated: stopping running steps now; the task stays resumable"
                        });
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
            sweep: None,
        }
    }
}
