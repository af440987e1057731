//! `rein serve`: the admin HTTP API.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use rein_protocol::TaskStatus;
use rein_server::auth::hash_token;
use rein_server::{AppState, Auth, Role, TokenEntry};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::cli::ServeArgs;
use crate::commands::{Context, StopSignals, Target};
use crate::exit::{self, UsageError};
use crate::output::say;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    tokens: Vec<TokenEntry>,
}

/// The fewest characters an operator token given to `rein serve` may have.
pub const MIN_TOKEN_CHARS: usize = 16;

fn tokens(args: &ServeArgs, admin: Option<&str>) -> anyhow::Result<Vec<TokenEntry>> {
    let mut tokens = Vec::new();
    if let Some(path) = &args.tokens {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read tokens file {}", path.display()))?;
        let file: TokensFile = toml::from_str(&text)
            .map_err(|e| UsageError(format!("tokens file {}: {e}", path.display())))?;
        for t in &file.tokens {
            if t.sha256.len() != 64 || !t.sha256.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(UsageError(format!(
                    "tokens file {}: token `{}` needs `sha256` as 64 hex digits (printf %s TOKEN | sha256sum)",
                    path.display(),
                    t.name
                ))
                .into());
            }
        }
        tokens.extend(file.tokens);
    }
    if let Some(token) = admin.filter(|t| !t.is_empty()) {
        let length = token.chars().count();
        if length < MIN_TOKEN_CHARS {
            return Err(UsageError(format!(
                "the operator token (REIN_TOKEN or --token) is {length} characters: it must be at least {MIN_TOKEN_CHARS}, so that it cannot be guessed; make one with `openssl rand -hex 16`"
            ))
            .into());
        }
        tokens.push(TokenEntry {
            name: "admin".into(),
            role: Role::Admin,
            sha256: hash_token(token),
        });
    }
    Ok(tokens)
}

pub async fn serve(target: &Target, args: ServeArgs) -> anyhow::Result<u8> {
    let token = target.token.clone();
    let addr: SocketAddr = args.listen.parse().map_err(|_| {
        UsageError(format!(
            "--listen `{}` is not ADDR:PORT (e.g. 127.0.0.1:7433)",
            args.listen
        ))
    })?;
    let auth = Auth::new(tokens(&args, token.as_deref())?);
    if !auth.enabled() && !addr.ip().is_loopback() {
        return Err(UsageError(format!(
            "refusing to listen on {addr} with no token configured: anyone who can reach it could run commands; \
             set REIN_TOKEN (or --tokens FILE), or listen on 127.0.0.1"
        ))
        .into());
    }
    let executor = crate::commands::executor(&target.sandbox, false).await?;
    let mut roots = Vec::new();
    for root in &args.workspace_roots {
        let real = root.canonicalize().map_err(|e| {
            UsageError(format!(
                "--workspace-root {}: {e}; give a directory that exists",
                root.display()
            ))
        })?;
        // A root is where workspaces go: it obeys the workspace rules
        // itself (but for whose it is: the operator declared it).
        let mut guard = crate::commands::protected(target)?;
        guard.declared.push(real.clone());
        guard
            .check_workspace(&real)
            .map_err(|why| UsageError(format!("--workspace-root: {why}")))?;
        roots.push(real);
    }
    let target = &Target {
        lease: Some(args.lease),
        max_tasks: Some(args.max_tasks as usize),
        workspace_roots: target
            .workspace_roots
            .iter()
            .chain(&roots)
            .cloned()
            .collect(),
        ..target.clone()
    };
    let ctx = Context::for_target(target, 4, executor)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let shutdown = CancellationToken::new();
    let mut state = AppState::new(Arc::clone(&ctx.engine), auth, shutdown.clone())
        .with_workspace_roots(roots)
        .with_sign_in_failures(args.sign_in_failures)
        .with_models(target.models.clone());
    if let Some(harnesses) = &ctx.harnesses {
        state = state.with_harnesses(Arc::clone(harnesses));
    }
    // Take up what a stopped rein left running: where nodes share the store,
    // whatever no live node holds, as this node has room (and from then on,
    // new tasks and those of nodes that die); else every task this machine
    // was running.
    let shared = ctx.engine.store().leases().is_some();
    state.share_work();
    let (resumable, sweep) = if shared {
        (Vec::new(), None)
    } else {
        ctx.engine.resumable_swept().await?
    };
    for task in resumable {
        if matches!(task.status, TaskStatus::InProgress | TaskStatus::Pending) {
            let options = rein_core::RunOptions {
                sweep: sweep.clone(),
                ..rein_core::RunOptions::default()
            };
            let _ = state.start(task.id, options);
        }
    }
    let local = listener.local_addr()?;
    say!(
        "rein serve: listening on http://{local}{}",
        if state.auth.enabled() {
            ""
        } else {
            " (no token: local use only)"
        }
    );
    let signals = shutdown.clone();
    tokio::spawn(async move {
        if let Some(mut stop) = StopSignals::listen() {
            stop.next().await;
            signals.cancel();
        }
    });
    let limits = rein_server::listen::Limits {
        header_timeout: args.header_timeout,
        max_connections: args.max_connections as usize,
        max_per_client: args.max_connections_per_client as usize,
        shutdown_grace: args.shutdown_grace,
    };
    rein_server::serve_with(listener, state, limits).await?;
    say!("rein serve: stopped; running tasks were left resumable");
    Ok(exit::SUCCESS)
}
