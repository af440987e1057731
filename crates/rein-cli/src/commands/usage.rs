//! `rein usage`: the model tokens the store metered, and their cost at the
//! prices of `rein.toml` (`[models."PROVIDER/MODEL"]`).

use std::collections::BTreeMap;

use rein_core::store::{UsageFilter, UsageGroup};
use rein_protocol::Spend;
use serde_json::{Value, json};

use crate::cli::UsageArgs;
use crate::commands::Target;
use crate::exit::{self, UsageError};
use crate::output::say;
use crate::render::{dollars, tokens};

/// A row of the report (or its total) as JSON.
fn row_json(spent: &Spend) -> Value {
    let mut out = json!(spent.usage);
    out["calls"] = json!(spent.calls);
    out["cost_usd"] = json!(spent.cost_usd);
    out["estimated"] = json!(spent.usage.estimated);
    if !spent.unpriced.is_empty() {
        out["unpriced"] = json!(spent.unpriced);
    }
    out
}

pub async fn usage(target: &Target, args: UsageArgs) -> anyhow::Result<u8> {
    if target.url.is_some() {
        return Err(UsageError(
            "rein usage reads the store itself: run it where the store is, without --url (REIN_URL)"
                .into(),
        )
        .into());
    }
    let by = args.by.as_deref();
    let group = match by {
        None | Some("model") => UsageGroup::All,
        Some("task") => UsageGroup::Task,
        Some("day") => UsageGroup::Day,
        Some(other) => {
            return Err(UsageError(format!("--by `{other}`: add up by task, model or day")).into());
        }
    };
    let task_id = args
        .task
        .as_deref()
        .map(|t| {
            t.parse::<rein_protocol::TaskId>()
                .map_err(|e| UsageError(format!("--task `{t}`: {e}")))
        })
        .transpose()?;
    let filter = UsageFilter {
        task_id,
        session_id: args.session,
        since: args
            .since
            .as_deref()
            .map(|v| crate::commands::tasks::parse_time("--since", v))
            .transpose()?,
        until: args
            .until
            .as_deref()
            .map(|v| crate::commands::tasks::parse_time("--until", v))
            .transpose()?,
        by: group,
    };
    let store = crate::commands::open_target_store(target)?;
    let found = store.usage(&filter).await?;
    let mut total = Spend::default();
    let mut rows: BTreeMap<String, Spend> = BTreeMap::new();
    for r in &found {
        let model = format!("{}/{}", r.provider, r.model);
        total.add(&model, &r.usage, r.calls, &target.models);
        let key = match by {
            Some("model") => model.clone(),
            _ => r.key.clone(),
        };
        rows.entry(key)
            .or_default()
            .add(&model, &r.usage, r.calls, &target.models);
    }
    if args.json {
        let mut out = row_json(&total);
        if let Some(by) = by {
            out["by"] = json!(by);
            out["rows"] = rows
                .iter()
                .map(|(key, spent)| {
                    let mut row = row_json(spent);
                    row["key"] = json!(key);
                    row
                })
                .collect();
        }
        crate::commands::print_json(&out)?;
        return Ok(exit::SUCCESS);
    }
    if by.is_some() {
        for (key, spent) in &rows {
            say!(
                "{:<32} {:>6} calls  {}  {}",
                key,
                spent.calls,
                tokens(&spent.usage),
                dollars(spent.cost_usd)
            );
        }
    }
    say!(
        "{:<32} {:>6} calls  {}  {}",
        "total",
        total.calls,
        tokens(&total.usage),
        dollars(total.cost_usd)
    );
    if !total.unpriced.is_empty() {
        say!(
            "unpriced (no [models.\"PROVIDER/MODEL\"] prices in rein.toml): {}",
            total.unpriced.join(", ")
        );
    }
    Ok(exit::SUCCESS)
}
