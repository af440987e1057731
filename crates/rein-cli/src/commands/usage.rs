//! `rein usage`: the model tokens the store metered, and their cost at the
//! prices of `rein.toml` (`[models."PROVIDER/MODEL"]`); with `--url`, the
//! server's report (`GET /admin/usage`, at the server's prices).

use crate::cli::UsageArgs;
use crate::commands::Target;
use crate::exit::{self, UsageError};
use crate::output::say;
use crate::render::{dollars, tokens};

pub async fn usage(target: &Target, args: UsageArgs) -> anyhow::Result<u8> {
    // Checked here, to name the flag that is wrong.
    let by = args.by.as_deref();
    if rein_core::store::usage_group(by).is_none() {
        return Err(UsageError(format!(
            "--by `{}`: add up by task, model or day",
            by.unwrap_or_default()
        ))
        .into());
    }
    let task = crate::commands::task_flag(args.task.as_deref())?;
    let time = |flag: &str, value: Option<&str>| {
        value
            .map(|v| crate::commands::tasks::parse_time(flag, v).map(|t| t.to_rfc3339()))
            .transpose()
    };
    let query = rein_protocol::api::UsageQuery {
        task: task.as_ref().map(ToString::to_string),
        session: args.session,
        since: time("--since", args.since.as_deref())?,
        until: time("--until", args.until.as_deref())?,
        by: by.map(str::to_owned),
    };
    let report = target
        .open(1)?
        .client()
        .call::<rein_protocol::endpoints::Usage>(&(), &query, &())
        .await?;
    if args.json {
        crate::commands::print_json(&report)?;
        return Ok(exit::SUCCESS);
    }
    let line = |l: &rein_protocol::UsageLine| {
        let usage = rein_protocol::Usage {
            input_tokens: l.input_tokens,
            cached_input_tokens: l.cached_input_tokens,
            output_tokens: l.output_tokens,
            reasoning_tokens: l.reasoning_tokens,
            estimated: l.estimated,
        };
        say!(
            "{:<32} {:>6} calls  {}  {}",
            l.key.as_deref().unwrap_or("total"),
            l.calls,
            tokens(&usage),
            dollars(l.cost_usd)
        );
    };
    for row in report.rows.iter().flatten() {
        line(row);
    }
    line(&report.total);
    if !report.total.unpriced.is_empty() {
        say!(
            "unpriced (no [models.\"PROVIDER/MODEL\"] prices in rein.toml): {}",
            report.total.unpriced.join(", ")
        );
    }
    Ok(exit::SUCCESS)
}
