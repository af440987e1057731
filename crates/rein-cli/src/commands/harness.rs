//! `rein harness list | explain`: the registered agent harnesses, and which
//! runtime would serve a model route (the full selection decision).
//!
//! The registry holds the plugins named with `--plugin MANIFEST` (or
//! `REIN_PLUGINS`); with none, the built-in runtime serves every route.

use rein_core::harness::{SelectionRequest, select};
use rein_protocol::BUILTIN_RUNTIME;

use crate::cli::HarnessCommand;
use crate::commands::{Target, print_json};
use crate::exit::{self, UsageError};
use crate::output::say;

pub async fn dispatch(target: &Target, cmd: HarnessCommand) -> anyhow::Result<u8> {
    let registry = crate::commands::harness_registry(&target.plugins)?;
    match cmd {
        HarnessCommand::List { json } => {
            let mut rows = vec![serde_json::json!({
                "id": BUILTIN_RUNTIME,
                "label": "the built-in runtime",
                "plugin": null,
                "builtin": true,
                "protocol": "rein",
            })];
            for r in registry.harnesses() {
                let h = &r.harness;
                rows.push(serde_json::json!({
                    "id": h.id(),
                    "label": h.label(),
                    "plugin": r.plugin.id,
                    "builtin": false,
                    "protocol": h.protocol(),
                    "auto_selection_provider_ids": h.auto_selection_provider_ids(),
                    "auth_bootstrap": if h.auth_bootstrap_harness() { "harness" } else { "host" },
                    "workspace_environment": h.workspace_environment(),
                    "delegated_execution_plugin_ids": h.delegated_execution_plugin_ids(),
                }));
            }
            if json {
                print_json(&rows)?;
            } else {
                for row in &rows {
                    let owner = match row["plugin"].as_str() {
                        Some(p) => format!("plugin {p}"),
                        None => "built in".to_owned(),
                    };
                    say!(
                        "{:<16} {:<14} {:<5} {}",
                        row["id"].as_str().unwrap_or(""),
                        owner,
                        row["protocol"].as_str().unwrap_or(""),
                        row["label"].as_str().unwrap_or("")
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
            let policy = crate::commands::runtime_policy(target.runtime_policy.as_deref())?;
            // `--runtime` is what a step's `runtime` would say.
            let request = SelectionRequest {
                provider,
                model,
                step_runtime: runtime,
                ..SelectionRequest::default()
            };
            let decision = select(&registry, &policy, &request).await?;
            if json {
                print_json(&decision)?;
            } else {
                let reason = serde_json::to_value(decision.reason)?;
                say!(
                    "{} serves {} ({}; runtime `{}` from the {} setting)",
                    decision.selected,
                    match &decision.model {
                        Some(m) => format!("{}/{m}", decision.provider),
                        None => decision.provider.clone(),
                    },
                    reason.as_str().unwrap_or(""),
                    decision.policy.runtime,
                    serde_json::to_value(decision.policy.source)?
                        .as_str()
                        .unwrap_or("")
                );
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
