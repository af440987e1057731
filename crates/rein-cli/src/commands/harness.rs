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
    let (plugin, json, to) = match cmd {
        HarnessCommand::Disable { plugin, json } => (plugin, json, "disabled"),
        HarnessCommand::Enable { plugin, json } => (plugin, json, "enabled"),
        HarnessCommand::Revoke { plugin, json } => (plugin, json, "revoked"),
        HarnessCommand::Reload { plugin, json } => (plugin, json, "reloaded"),
        other => return list_or_explain(target, other).await,
    };
    change(target, to, &plugin, json).await
}

async fn list_or_explain(target: &Target, cmd: HarnessCommand) -> anyhow::Result<u8> {
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
        HarnessCommand::Disable { .. }
        | HarnessCommand::Enable { .. }
        | HarnessCommand::Revoke { .. }
        | HarnessCommand::Reload { .. } => Err(UsageError(
            "a plugin's status is changed with `rein harness disable|enable|revoke|reload`".into(),
        )
        .into()),
    }
}

/// `rein harness disable|enable|revoke|reload PLUGIN`: a running server's plugin,
/// changed there (a plugin of this process lives only as long as the
/// command, so there is nothing to change without `--url`).
async fn change(target: &Target, done: &str, plugin: &str, json: bool) -> anyhow::Result<u8> {
    if target.url.is_none() {
        return Err(UsageError(format!(
            "a plugin is switched off, on, revoked or reloaded in a running server: give its --url (here, `{plugin}` lives only as long as this command)"
        ))
        .into());
    }
    let backend = target.open(1)?;
    let client = backend.client();
    let plugin = plugin.to_owned();
    let rows = match done {
        "disabled" => {
            client
                .call::<endpoints::DisablePlugin>(plugin.as_str(), &(), &())
                .await?
        }
        "enabled" => {
            client
                .call::<endpoints::EnablePlugin>(plugin.as_str(), &(), &())
                .await?
        }
        "reloaded" => {
            client
                .call::<endpoints::ReloadPlugin>(plugin.as_str(), &(), &())
                .await?
        }
        _ => {
            client
                .call::<endpoints::RevokePlugin>(plugin.as_str(), &(), &())
                .await?
        }
    };
    if json {
        print_json(&rows.items)?;
    } else {
        say!("plugin {plugin} is {done}");
        for row in rows
            .items
            .iter()
            .filter(|r| r.plugin.as_deref() == Some(plugin.as_str()))
        {
            say!(
                "  harness {} ({})",
                row.id,
                row.status.as_deref().unwrap_or("-")
            );
        }
    }
    Ok(exit::SUCCESS)
}
