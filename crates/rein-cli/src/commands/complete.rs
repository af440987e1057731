//! `rein complete`: one isolated completion — a fresh, prompt-only request
//! with no tools, on the runtime the selection policy picks — here, or in the
//! server with `--url` (`POST /admin/completions`).

use std::io::Read as _;

use rein_core::harness::completion::{CompletionFailure, CompletionRequest, Route};
use serde_json::Value;

use crate::cli::{CompleteArgs, RouteArgs};
use crate::client::Client;
use crate::commands::{Context, Target, print_json};
use crate::exit::{self, UsageError};
use crate::output::say;

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
        CompletionFailure::NotConfigured(m) => anyhow::anyhow!(
            "{m}: set OPENAI_BASE_URL (and OPENAI_API_KEY, REIN_MODEL) to a model server, or register a harness with --plugin"
        ),
        e @ CompletionFailure::Completion(_) => anyhow::anyhow!(
            "{e}\n  the model is the one at OPENAI_BASE_URL (with OPENAI_API_KEY), named by --model or REIN_MODEL; `rein harness explain --provider openai` shows which runtime serves the route"
        ),
        other => anyhow::anyhow!("{other}"),
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
    let schema = match &args.schema {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| UsageError(format!("cannot read {}: {e}", path.display())))?;
            Some(
                serde_json::from_str::<Value>(&text)
                    .map_err(|e| UsageError(format!("{}: not JSON ({e})", path.display())))?,
            )
        }
        None => None,
    };
    let request = CompletionRequest {
        prompt,
        system: args.system.clone(),
        route: route(&args.route),
        timeout,
        // The schema is asked of the model as structured output too, where
        // its provider has that.
        shape: rein_core::harness::isolated::AnswerShape {
            max_tokens: None,
            json_schema: schema.clone(),
        },
    };
    let completion: Value = match &target.url {
        Some(url) => {
            let client = Client::new(url, target.token.clone())?;
            let schema = match schema {
                None => None,
                Some(Value::Object(schema)) => Some(schema),
                Some(_) => {
                    return Err(UsageError(
                        "--schema: a server takes a JSON Schema that is an object".into(),
                    )
                    .into());
                }
            };
            let request = rein_protocol::api::CompletionRequest {
                prompt: request.prompt,
                system: request.system,
                provider: request.route.provider,
                model: request.route.model,
                runtime: request.route.runtime,
                timeout_ms: Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
                schema,
            };
            let done = client
                .call::<rein_protocol::endpoints::Complete>(&(), &(), &request)
                .await?;
            serde_json::to_value(done)?
        }
        None => {
            let ctx = Context::for_completions(target)?;
            let done = ctx
                .engine
                .complete(&request, schema.as_ref())
                .await
                .map_err(failure)?;
            serde_json::to_value(done)?
        }
    };
    if args.json {
        print_json(&completion)?;
    } else if let Some(answer) = completion.get("json") {
        print_json(answer)?;
    } else {
        say!("{}", completion["text"].as_str().unwrap_or_default());
    }
    Ok(exit::SUCCESS)
}
