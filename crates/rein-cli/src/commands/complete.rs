//! `rein complete`: one isolated completion — a fresh, prompt-only request
//! with no tools, on the runtime the selection policy picks — through
//! `POST /admin/completions`: the server's with `--url`, else the same route
//! served here.

use std::io::Read as _;

use rein_core::harness::completion::{CompletionFailure, Route};
use serde_json::Value;

use crate::cli::{CompleteArgs, RouteArgs};
use crate::commands::{Context, Target, print_json};
use crate::exit::{self, UsageError};
use crate::output::say;

/// The longest a completion may take (the API's bound).
const MAX_TIMEOUT_MS: u64 = 1_800_000;

/// The route flags as a completion's route.
pub fn route(args: &RouteArgs) -> Route {
    Route {
        provider: args.provider.clone(),
        model: args.model.clone(),
        runtime: args.runtime.clone(),
    }
}

/// A completion failure as the error a command ends with: what the user can
/// fix (the schema, the runtime named) is bad usage; the rest a failure.
pub fn failure(e: CompletionFailure) -> anyhow::Error {
    match e {
        CompletionFailure::BadSchema(_) | CompletionFailure::Selection(_) => {
            UsageError(e.to_string()).into()
        }
        other => anyhow::anyhow!(other.advised()),
    }
}

pub async fn complete(target: &Target, args: CompleteArgs) -> anyhow::Result<u8> {
    let prompt = if args.prompt == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| UsageError(format!("cannot read the prompt from stdin: {e}")))?;
        text
    } else {
        args.prompt.clone()
    };
    if prompt.trim().is_empty() {
        return Err(UsageError("the prompt is empty: say what to ask".into()).into());
    }
    let timeout = humantime::parse_duration(args.timeout.trim()).map_err(|e| {
        UsageError(format!(
            "--timeout: `{}` is not a duration ({e}); write e.g. 30s or 2m",
            args.timeout
        ))
    })?;
    let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    if !(1..=MAX_TIMEOUT_MS).contains(&timeout_ms) {
        return Err(UsageError(format!(
            "--timeout: `{}` is outside 1ms–30m, what a completion may take",
            args.timeout
        ))
        .into());
    }
    let schema = match &args.schema {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| UsageError(format!("cannot read {}: {e}", path.display())))?;
            match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(schema)) => Some(schema),
                Ok(_) => {
                    return Err(UsageError(format!(
                        "{}: a JSON Schema here is an object",
                        path.display()
                    ))
                    .into());
                }
                Err(e) => {
                    return Err(UsageError(format!("{}: not JSON ({e})", path.display())).into());
                }
            }
        }
        None => None,
    };
    let route = route(&args.route);
    let request = rein_protocol::api::CompletionRequest {
        prompt,
        system: args.system.clone(),
        provider: route.provider,
        model: route.model,
        runtime: route.runtime,
        timeout_ms: Some(timeout_ms),
        schema,
        visibility: args.visible.as_deref().map(|v| match v {
            "strict" => rein_protocol::api::Visibility::Strict,
            _ => rein_protocol::api::Visibility::Default,
        }),
    };
    // The same operation either way: a server's, or the same route served
    // here over this machine's model settings and plugins.
    let backend = match &target.url {
        Some(_) => target.open(1)?,
        None => target.serve_here(Context::for_completions(target)?),
    };
    let done = backend
        .client()
        .call::<rein_protocol::endpoints::Complete>(&(), &(), &request)
        .await?;
    let completion = serde_json::to_value(done)?;
    if args.json {
        print_json(&completion)?;
    } else if let Some(answer) = completion.get("json") {
        print_json(answer)?;
    } else {
        say!("{}", completion["text"].as_str().unwrap_or_default());
    }
    Ok(exit::SUCCESS)
}
