//! `rein harness list | explain`: the registered agent harnesses, and which
//! runtime would serve a model route (the full selection decision).
//!
//! The registry holds the plugins named with `--plugin MANIFEST` (or
//! `REIN_PLUGINS`); with none, the built-in runtime serves every route. With
//! `--url`, both report the server's registry and runtime policy.

use rein_protocol::api::{ExplainQuery, HarnessInfo};
use rein_protocol::endpoints;

use crate::cli::HarnessCommand;
use crate::commands::{Target, print_json};
use crate::exit::{self, UsageError};
use crate::output::say;

pub async fn dispatch(target: &Target, cmd: HarnessCommand) -> anyhow::Result<u8> {
    let backend = target.open_with_harnesses()?;
    let client = backend.client();
    match cmd {
        HarnessCommand::List { json } => {
            // With --url, the server's registry: the harnesses its runs use.
            let rows: Vec<HarnessInfo> = client
                .call::<endpoints::ListHarnesses>(&(), &(), &())
                .await?
                .items;
            if json {
                print_json(&rows)?;
            } else {
                for row in &rows {
                    let owner = match &row.plugin {
                        Some(p) => format!("plugin {p}"),
                        None => "built in".to_owned(),
                    };
                    say!(
                        "{:<16} {:<14} {:<5} {}",
                        row.id,
                        owner,
                        row.protocol,
                        row.label
                    );
                }
            }
            Ok(exit::SUCCESS)
        }
        HarnessCommand::Explain {
            provider,
            model,
            runtime,
            json,
        } => {
            if provider.trim().is_empty() {
                return Err(UsageError("--provider must not be empty".into()).into());
            }
            // `--runtime` is what a step's `runtime` would say.
            let query = ExplainQuery {
                provider,
                model,
                runtime,
            };
            let decision = client
                .call::<endpoints::ExplainHarness>(&(), &query, &())
                .await?;
            if json {
                print_json(&decision)?;
            } else {
                say!(
                    "{} serves {} ({}; runtime `{}` from the {} setting)",
                    decision.selected,
                    match &decision.model {
                        Some(m) => format!("{}/{m}", decision.provider),
                        None => decision.provider.clone(),
                    },
                    decision.reason.as_str(),
                    decision.policy.runtime,
                    decision.policy.source.as_str()
                );
                if !decision.fallback_models.is_empty() {
                    say!(
                        "  then, turn by turn when it cannot serve: {}",
                        decision.fallback_models.join(" → ")
                    );
                }
                if decision.candidates.is_empty() {
                    say!("  no harness was asked");
                }
                for c in &decision.candidates {
                    say!(
                        "  {:<16} {}{}{}",
                        c.id,
                        if c.supported {
                            "supported"
                        } else {
                            "unsupported"
                        },
                        c.priority
                            .map(|p| format!(", priority {p}"))
                            .unwrap_or_default(),
                        c.reason
                            .as_deref()
                            .map(|r| format!(": {r}"))
                            .unwrap_or_default()
                    );
                }
            }
            Ok(exit::SUCCESS)
        }
    }
}
