//! `rein approvals …` and `rein ledger …`: people's decisions and their record.

use rein_core::store::ApprovalFilter;
use rein_protocol::{ApprovalRequest, ApprovalResponse, ApprovalStatus, Decision};

use crate::cli::{ApprovalsCommand, LedgerCommand};
use crate::commands::{Target, actor, print_json, task_flag};
use crate::exit::{self, UsageError};
use crate::output::say;
use crate::render;

pub async fn dispatch(target: &Target, cmd: ApprovalsCommand) -> anyhow::Result<u8> {
    let engine = &target.open(4)?;
    let (id, decision, option, delegate_to, who) = match cmd {
        ApprovalsCommand::List {
            status,
            task,
            limit,
            json,
        } => {
            let status = match status.as_str() {
                "all" => None,
                s => Some(ApprovalStatus::parse(s).ok_or_else(|| {
                    let allowed: Vec<&str> =
                        ApprovalStatus::ALL.iter().map(|s| s.as_str()).collect();
                    UsageError(format!(
                        "unknown status `{s}`; use one of {}, or all",
                        allowed.join(", ")
                    ))
                })?),
            };
            let filter = ApprovalFilter {
                status,
                task_id: task_flag(task.as_deref())?,
                limit: Some(limit as usize),
            };
            let requests = engine.approvals(&filter).await?;
            if json {
                print_json(&requests)?;
            } else if requests.is_empty() {
                say!("no {} approval requests", status.map_or("", |s| s.as_str()));
            } else {
                for r in &requests {
                    say!("{}", summary_line(r));
                }
            }
            return Ok(exit::SUCCESS);
        }
        ApprovalsCommand::Show { id, json } => {
            let request = engine.approval(&parse_approval_id(&id)?).await?;
            if json {
                print_json(&request)?;
            } else {
                say!("{}", details(&request));
            }
            return Ok(exit::SUCCESS);
        }
        ApprovalsCommand::Approve { id, option, who } => (id, Decision::Approve, option, None, who),
        ApprovalsCommand::Deny { id, who } => (id, Decision::Deny, None, None, who),
        ApprovalsCommand::Skip { id, who } => (id, Decision::Skip, None, None, who),
        ApprovalsCommand::Delegate { id, to, who } => (id, Decision::Delegate, None, Some(to), who),
    };
    if engine.is_remote() && who.actor.is_some() {
        return Err(UsageError(
            "--as cannot be used with --url: a server records a decision under the name of the token that sent it"
                .into(),
        )
        .into());
    }
    let response = ApprovalResponse {
        request_id: parse_approval_id(&id)?,
        decision,
        selected_option: option,
        reason: who.reason.clone(),
        decided_by: actor(who.actor.as_deref()),
        delegate_to,
        decided_at: chrono::Utc::now(),
    };
    let settled = engine.decide(response).await?;
    if who.json {
        print_json(&settled)?;
    } else {
        say!("{}", summary_line(&settled));
    }
    Ok(exit::SUCCESS)
}

pub async fn ledger(target: &Target, cmd: LedgerCommand) -> anyhow::Result<u8> {
    let backend = target.open(4)?;
    match cmd {
        LedgerCommand::List { json } => {
            let entries = backend.ledger().await?;
            if json {
                print_json(&entries)?;
            } else if entries.is_empty() {
                say!("the ledger is empty: no human decision has been recorded yet");
            } else {
                for e in &entries {
                    let reason = e
                        .reason
                        .as_deref()
                        .map(|r| format!(" — {r}"))
                        .unwrap_or_default();
                    let revokes = e
                        .revokes
                        .as_ref()
                        .map(|r| format!(" (revokes {r})"))
                        .unwrap_or_default();
                    say!(
                        "{:>5} {} {:<9} {:<16} {}{revokes}{reason}",
                        e.seq,
                        render::short_time(&e.at),
                        e.kind.as_str(),
                        e.who,
                        e.scope
                    );
                }
            }
            Ok(exit::SUCCESS)
        }
        LedgerCommand::Add {
            file,
            decision,
            summary,
            scope,
            risk,
            tool,
            reason,
            by,
            json,
        } => {
            let add: rein_protocol::GovernanceAdd = match file {
                Some(path) => crate::commands::state::read_json(&path, "governance-ledger entry")?,
                None => {
                    let mut v = serde_json::Map::new();
                    for (name, value) in [
                        ("decision", decision),
                        ("actionSummary", summary),
                        ("scope", scope),
                        ("riskLevel", risk),
                        ("toolName", tool),
                        ("decisionReason", reason),
                        ("decidedBy", by),
                    ] {
                        if let Some(value) = value {
                            v.insert(name.into(), value.into());
                        }
                    }
                    if v.is_empty() {
                        return Err(UsageError(
                            "give the entry as a JSON file, or at least --decision and --summary"
                                .into(),
                        )
                        .into());
                    }
                    serde_json::from_value(serde_json::Value::Object(v))
                        .map_err(|e| UsageError(format!("the entry: {e}")))?
                }
            };
            let entry = backend.add_governance(&add).await?;
            if json {
                print_json(&entry)?;
            } else {
                say!(
                    "recorded {} (entry {}): {} by {}",
                    entry.id,
                    entry.seq,
                    entry.decision.as_str(),
                    entry.decided_by
                );
            }
            Ok(exit::SUCCESS)
        }
        LedgerCommand::Revoke {
            id,
            reason,
            by,
            json,
        } => {
            let request = rein_protocol::RevokeRequest {
                revoked_by: by,
                reason,
            };
            let entry = backend.revoke_governance(&id, &request).await?;
            if json {
                print_json(&entry)?;
            } else {
                say!(
                    "revoked {} (was {} by {}), by {}",
                    entry.id,
                    entry.decision.as_str(),
                    entry.decided_by,
                    entry.revoked_by.as_deref().unwrap_or("-")
                );
            }
            Ok(exit::SUCCESS)
        }
        LedgerCommand::Verify { head, json } => {
            let head = head
                .as_deref()
                .map(rein_protocol::LedgerHead::parse)
                .transpose()
                .map_err(|e| UsageError(format!("--head: {e}")))?;
            let check = backend.verify_ledger(head).await?;
            if json {
                print_json(&check)?;
            } else {
                let checked = check.entries;
                let against = check
                    .against
                    .as_ref()
                    .map(|h| format!(", and it still holds the recorded head {}", h.seq))
                    .unwrap_or_default();
                if check.intact {
                    say!(
                        "ledger intact: {}, every hash and link checks out{against}",
                        rein_core::history::counted(checked as u64, "entry", "entries")
                    );
                } else {
                    say!(
                        "ledger BROKEN: {} in {}",
                        rein_core::history::counted(
                            check.problems.len() as u64,
                            "problem",
                            "problems"
                        ),
                        rein_core::history::counted(checked as u64, "entry", "entries")
                    );
                    for b in &check.problems {
                        say!("  - {b}");
                    }
                }
                if let Some(now) = &check.head {
                    say!("head {now}");
                    say!(
                        "  (record it, and check against it later with --head: the chain alone cannot tell that its newest entries were removed)"
                    );
                }
            }
            Ok(if check.intact {
                exit::SUCCESS
            } else {
                exit::FAILURE
            })
        }
    }
}

/// `rein health`: the report of `/healthz`, from this store and sandbox or from
/// a server.
pub async fn health(target: &Target, json: bool, acknowledge: bool) -> anyhow::Result<u8> {
    if acknowledge {
        if target.url.is_some() {
            return Err(crate::exit::UsageError(
                "--acknowledge-lost-writes changes the store itself: run it on the store's machine, without --url"
                    .into(),
            )
            .into());
        }
        let store = crate::commands::open_target_store(target)?;
        let n = store.acknowledge_lost_writes().await?;
        say!(
            "{}",
            match n {
                0 => "no loss of committed writes waited to be acknowledged".to_owned(),
                1 => "acknowledged 1 loss of committed writes".to_owned(),
                n => format!("acknowledged {n} losses of committed writes"),
            }
        );
    }
    // Embedded, the sandbox is probed as `rein run` would (not strictly: a
    // sandbox that cannot run is what the report is for).
    let backend = match &target.url {
        Some(_) => target.open(4)?,
        None => {
            let executor = crate::commands::executor(&target.sandbox, false).await?;
            let ctx = crate::commands::Context::for_target(target, 4, executor)?;
            target.serve_here(ctx)
        }
    };
    let report = backend.health().await?;
    if json {
        print_json(&report)?;
    } else {
        say!("{}", report.status.as_str());
        for (name, c) in report.components.named() {
            say!("  {name:<19} {:<9} {}", c.status.as_str(), c.detail);
        }
    }
    Ok(
        if report.status == rein_protocol::api::HealthStatus::Unhealthy {
            exit::FAILURE
        } else {
            exit::SUCCESS
        },
    )
}

pub async fn metrics(target: &Target, json: bool) -> anyhow::Result<u8> {
    let m = target.open(4)?.metrics().await?;
    if json {
        print_json(&m)?;
        return Ok(exit::SUCCESS);
    }
    let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| render::duration_ms(v.round() as u64));
    let t = &m.tasks;
    say!(
        "tasks        {} in all: {} completed, {} failed, {} paused, {} cancelled, {} running, {} pending; average {}",
        t.total,
        t.completed,
        t.failed,
        t.paused,
        t.cancelled,
        t.in_progress,
        t.pending,
        ms(t.average_duration_ms)
    );
    let c = &m.checkpoints;
    say!(
        "checkpoints  {} in all: {} passed, {} failed, {} skipped; average {}",
        c.total,
        c.passed,
        c.failed,
        c.skipped,
        ms(c.average_duration_ms)
    );
    let by_type: Vec<String> = c.by_type.iter().map(|(k, v)| format!("{k} {v}")).collect();
    say!("             by type: {}", by_type.join(", "));
    let r = &m.recovery;
    let by_error: Vec<String> = r
        .by_error_type
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    say!(
        "recovery     {} attempts, {} succeeded, {} gave up; by error type: {}",
        r.attempts,
        r.successes,
        r.failures,
        if by_error.is_empty() {
            "-".to_owned()
        } else {
            by_error.join(", ")
        }
    );
    let h = &m.human_loop;
    say!(
        "human loop   {} requests: {} approved, {} denied, {} skipped, {} expired, {} pending; average response {}",
        h.requests,
        h.approvals,
        h.denials,
        h.skips,
        h.expirations,
        h.pending,
        ms(h.average_response_ms)
    );
    Ok(exit::SUCCESS)
}

fn parse_approval_id(id: &str) -> anyhow::Result<rein_protocol::ApprovalId> {
    rein_protocol::ApprovalId::parse(id.trim()).map_err(|e| UsageError(e.to_string()).into())
}

fn summary_line(r: &ApprovalRequest) -> String {
    let settled = match &r.response {
        Some(resp) if r.status != ApprovalStatus::Pending => format!(" by {}", resp.decided_by),
        _ => r
            .assigned_to
            .as_deref()
            .map(|a| format!(" (delegated to {a})"))
            .unwrap_or_default(),
    };
    format!(
        "{}  {:<8}{settled}  {}  task {} step {}",
        r.id,
        r.status,
        r.title,
        r.task_id,
        r.step_id.as_deref().unwrap_or("-")
    )
}

fn details(r: &ApprovalRequest) -> String {
    let mut out = format!(
        "{}  {}  ({} request, {} priority)\n",
        r.id,
        r.status,
        r.kind.as_str(),
        r.priority.as_str()
    );
    out.push_str(&format!("  {}\n", r.title));
    if !r.description.is_empty() {
        out.push_str(&format!("  {}\n", r.description));
    }
    out.push_str(&format!(
        "  task {} step {}\n",
        r.task_id,
        r.step_id.as_deref().unwrap_or("-")
    ));
    if r.status == ApprovalStatus::Pending {
        out.push_str(&format!("  {}\n", render::ask(r)));
    }
    if let Some(resp) = &r.response {
        out.push_str(&format!(
            "  {} by {} at {}",
            resp.decision.as_str(),
            resp.decided_by,
            render::short_time(&resp.decided_at)
        ));
        if let Some(o) = &resp.selected_option {
            out.push_str(&format!(" (option `{o}`)"));
        }
        if let Some(reason) = &resp.reason {
            out.push_str(&format!(": {reason}"));
        }
        out.push('\n');
    }
    out.trim_end().to_owned()
}
