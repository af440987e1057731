//! `rein usage`: the model tokens the store metered, and their cost at the
//! prices of `rein.toml` (`[models."PROVIDER/MODEL"]`).

use std::collections::BTreeMap;

use rein_core::store::{UsageFilter, UsageGroup, UsageRow};
use rein_protocol::Usage;
use serde_json::{Value, json};

use crate::cli::UsageArgs;
use crate::commands::Target;
use crate::exit::{self, UsageError};
use crate::output::say;
use crate::render::{dollars, tokens};

/// One row of the report: its key, calls, tokens, cost (`None`: a model in
/// it has no price) and the models without one.
struct Row {
    key: String,
    calls: u64,
    usage: Usage,
    cost: Option<f64>,
    unpriced: Vec<String>,
}

impl Row {
    fn new(key: String) -> Row {
        Row {
            key,
            calls: 0,
            usage: Usage::default(),
            cost: Some(0.0),
            unpriced: Vec::new(),
        }
    }

    fn add(&mut self, r: &UsageRow, models: &rein_runtimes::agent::Models) {
        let name = format!("{}/{}", r.provider, r.model);
        self.calls += r.calls;
        self.usage.add(&r.usage);
        match models.get(&name).and_then(|m| m.cost_usd(&r.usage)) {
            Some(c) => self.cost = self.cost.map(|sum| sum + c),
            None => {
                self.cost = None;
                if !self.unpriced.contains(&name) {
                    self.unpriced.push(name);
                }
            }
        }
    }

    fn json(&self) -> Value {
        let mut out = json!(self.usage);
        out["calls"] = json!(self.calls);
        out["cost_usd"] = json!(self.cost);
        out["estimated"] = json!(self.usage.estimated);
        if !self.unpriced.is_empty() {
            out["unpriced"] = json!(self.unpriced);
        }
        out
    }
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
    let mut total = Row::new(String::new());
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    for r in &found {
        total.add(r, &target.models);
        let key = match by {
            Some("model") => format!("{}/{}", r.provider, r.model),
            _ => r.key.clone(),
        };
        rows.entry(key.clone())
            .or_insert_with(|| Row::new(key))
            .add(r, &target.models);
    }
    if args.json {
        let mut out = total.json();
        if let Some(by) = by {
            out["by"] = json!(by);
            out["rows"] = rows
                .values()
                .map(|r| {
                    let mut row = r.json();
                    row["key"] = json!(r.key);
                    row
                })
                .collect();
        }
        crate::commands::print_json(&out)?;
        return Ok(exit::SUCCESS);
    }
    if by.is_some() {
        for r in rows.values() {
            say!(
                "{:<32} {:>6} calls  {}  {}",
                r.key,
                r.calls,
                tokens(&r.usage),
                dollars(r.cost)
            );
        }
    }
    say!(
        "{:<32} {:>6} calls  {}  {}",
        "total",
        total.calls,
        tokens(&total.usage),
        dollars(total.cost)
    );
    if !total.unpriced.is_empty() {
        say!(
            "unpriced (no [models.\"PROVIDER/MODEL\"] prices in rein.toml): {}",
            total.unpriced.join(", ")
        );
    }
    Ok(exit::SUCCESS)
}
