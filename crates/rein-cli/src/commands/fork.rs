//! `rein tasks fork` and `rein tasks retry`: a new task from a point of
//! another's history, run in the foreground like `rein run` (or, with
//! `--url`, in the server, followed from here).

use std::collections::BTreeMap;

use rein_core::fork::{Fork, ForkPoint};
use rein_protocol::api::{ForkRequest, RetryRequest};
use rein_protocol::{TaskChange, TaskId, TaskState};

use super::run::{Out, Signals, drive_new, report, watch_remote, workspace_of};
use crate::backend::Backend;
use crate::cli::{ForkArgs, ForkChanges, RetryArgs};
use crate::client::{Client, TaskEnvelope};
use crate::commands::{Context, Target, parse_task_id};
use crate::exit::UsageError;

/// `--set STEP.FIELD=VALUE`s: each value as JSON when it is JSON, else as text.
fn parse_set(set: &[String]) -> anyhow::Result<BTreeMap<String, serde_json::Value>> {
    let mut out = BTreeMap::new();
    for item in set {
        let Some((key, value)) = item.split_once('=') else {
            return Err(UsageError(format!(
                "--set {item}: write it STEP.FIELD=VALUE (for example draft.model=other-model)"
            ))
            .into());
        };
        let value = serde_json::from_str(value)
            .unwrap_or_else(|_| serde_json::Value::String(value.to_owned()));
        if out.insert(key.trim().to_owned(), value).is_some() {
            return Err(UsageError(format!("--set {key} is given twice")).into());
        }
    }
    Ok(out)
}

pub async fn fork(target: &Target, args: ForkArgs) -> anyhow::Result<u8> {
    let id = parse_task_id(&args.id)?;
    if args.turn.is_some() && args.at.is_none() {
        return Err(UsageError(
            "--turn goes with --at, the event an agent step started at (its turns' SEQ in `rein tasks history`)".into(),
        )
        .into());
    }
    let point = match (args.before, args.after, args.at) {
        (Some(step), None, None) => ForkPoint::Before(step),
        (None, Some(step), None) => ForkPoint::After(step),
        (None, None, Some(seq)) => ForkPoint::At {
            seq,
            turn: args.turn,
        },
        // clap lets exactly one through.
        _ => return Err(UsageError("give one of --before, --after and --at".into()).into()),
    };
    run_fork(target, &id, Some(point), args.changes).await
}

pub async fn retry(target: &Target, args: RetryArgs) -> anyhow::Result<u8> {
    let id = parse_task_id(&args.id)?;
    run_fork(target, &id, None, args.changes).await
}

/// Makes the fork (at `point`; a retry's if `None`) and runs it.
async fn run_fork(
    target: &Target,
    id: &TaskId,
    point: Option<ForkPoint>,
    changes: ForkChanges,
) -> anyhow::Result<u8> {
    let set = parse_set(&changes.set)?;
    if let Some(url) = &target.url {
        let client = Client::new(url, target.token.clone())?;
        return run_remote(client, id, point, set, changes).await;
    }
    let executor = crate::commands::executor(&target.sandbox, true).await?;
    let ctx = Context::for_target(target, 4, executor)?;
    let point = match point {
        Some(p) => p,
        None => ctx.engine.retry_point(id).await?,
    };
    let state = ctx
        .engine
        .fork(
            id,
            Fork {
                point,
                workspace: changes.workspace,
                set,
                confined_to: None,
            },
        )
        .await?;
    let out = Out::new(changes.output, false);
    let first = ctx.engine.events(state.id(), 0, 1).await?;
    announce_fork(out, &state, first.first().map(|e| &e.change));
    drive_new(&ctx.engine, state, out, changes.no_wait, changes.output).await
}

async fn run_remote(
    client: Client,
    id: &TaskId,
    point: Option<ForkPoint>,
    set: BTreeMap<String, serde_json::Value>,
    changes: ForkChanges,
) -> anyhow::Result<u8> {
    // The server checks the directory against its --workspace-root: it is
    // sent absolute, as it is here.
    let workspace = changes
        .workspace
        .as_deref()
        .map(|w| {
            std::path::absolute(w)
                .map(|p| p.display().to_string())
                .map_err(|e| UsageError(format!("cannot resolve {}: {e}", w.display())))
        })
        .transpose()?;
    let created: TaskEnvelope = match point {
        None => {
            let body = RetryRequest { workspace, set };
            client
                .call::<rein_protocol::endpoints::RetryTask>(id, &(), &body)
                .await?
        }
        Some(point) => {
            let mut body = ForkRequest {
                workspace,
                set,
                ..ForkRequest::default()
            };
            match point {
                ForkPoint::Before(step) => body.before = Some(step),
                ForkPoint::After(step) => body.after = Some(step),
                ForkPoint::At { seq, turn } => {
                    body.at = Some(seq);
                    body.turn = turn;
                }
            }
            client
                .call::<rein_protocol::endpoints::ForkTask>(id, &(), &body)
                .await?
        }
    };
    let out = Out::new(changes.output, true);
    let first = Backend::remote(client.clone())
        .events(created.task.id(), 0, 1)
        .await?;
    announce_fork(out, &created.task, first.first().map(|e| &e.change));
    let signals = Signals::install(out, changes.no_wait);
    let finals = watch_remote(&client, vec![created.task], &signals, changes.output).await?;
    report(out, &finals, false)
}

/// Says where the fork came from, what of the workspace it got, and which
/// steps it will ask about.
fn announce_fork(out: Out, state: &TaskState, first: Option<&TaskChange>) {
    out.line(&format!(
        "task {} created: {} steps to run, workspace {}",
        state.id(),
        state.head.context.pending_steps.len(),
        workspace_of(state)
    ));
    if let Some(from) = &state.head.forked_from {
        let turn = from
            .turn
            .map(|n| format!(", after turn {n}"))
            .unwrap_or_default();
        out.line(&format!(
            "forked from task {} at event {}{turn}",
            from.task_id, from.seq
        ));
        if let Some(TaskChange::TaskForked { workspace, .. }) = first {
            out.line(&format!("  {}", workspace.describe()));
        }
        for ran in &from.ran_in_source {
            out.line(&format!(
                "  `{}` already ran in {} ({}): it is asked about before it runs again",
                ran.step_id, from.task_id, ran.did
            ));
        }
    }
}
