//! `rein contracts …` and `rein evidence …`: harness contracts and evidence
//! bundles — list, show, create from JSON files, move a contract along its flow,
//! add items, checks and reviews to a bundle.

use rein_core::store::{RecordFilter, RecordKind};
use rein_protocol::{ContractStatus, EvidenceBundle, HarnessContract, ReviewVerdict};

use crate::backend::EvidencePart;
use crate::cli::{ContractsCommand, EvidenceCommand};
use crate::commands::state::read_json;
use crate::commands::{Target, print_json, print_page};
use crate::exit::{self, UsageError};
use crate::output::say;

fn status(s: &str) -> Result<ContractStatus, UsageError> {
    ContractStatus::parse(s).ok_or_else(|| {
        let allowed: Vec<&str> = ContractStatus::ALL.iter().map(|c| c.as_str()).collect();
        UsageError(format!(
            "unknown contract status `{s}`; use one of {}",
            allowed.join(", ")
        ))
    })
}

pub async fn contracts(target: &Target, cmd: ContractsCommand) -> anyhow::Result<u8> {
    let backend = target.open(4)?;
    match cmd {
        ContractsCommand::List {
            status: wanted,
            task,
            state,
            limit,
            cursor,
            json,
        } => {
            if let Some(s) = &wanted {
                status(s)?;
            }
            let filter = RecordFilter {
                status: wanted,
                task_id: task,
                shared_state_id: state,
                limit: Some(limit as usize),
                cursor,
                ..RecordFilter::new(RecordKind::Contract)
            };
            let page = backend.contracts(&filter).await?;
            print_page(
                &page,
                json,
                "contracts",
                "rein contracts list",
                &[
                    ("ID", 32),
                    ("STATUS", 11),
                    ("RISK", 8),
                    ("TASK", 32),
                    ("GOAL", 0),
                ],
                |c| {
                    vec![
                        c.id.clone(),
                        c.status.as_str().to_owned(),
                        c.risk.map_or("-", |r| r.as_str()).to_owned(),
                        c.task_id.clone().unwrap_or_else(|| "-".into()),
                        c.goal.clone(),
                    ]
                },
            )?;
            Ok(exit::SUCCESS)
        }
        ContractsCommand::Show { id, json } => {
            let contract = backend.contract(&id).await?;
            show_contract(&contract, json)
        }
        ContractsCommand::Create { file, json } => {
            let contract: HarnessContract = read_json(&file, "harness contract")?;
            let created = backend.create_contract(contract).await?;
            show_contract(&created, json)
        }
        ContractsCommand::Status {
            id,
            status: to,
            reason,
            json,
        } => {
            let to = status(&to)?;
            let moved = backend.move_contract(&id, to, reason).await?;
            if json {
                print_json(&moved)?;
            } else {
                say!("{} is {}", moved.id, moved.status.as_str());
            }
            Ok(exit::SUCCESS)
        }
    }
}

fn show_contract(c: &HarnessContract, json: bool) -> anyhow::Result<u8> {
    if json {
        print_json(c)?;
        return Ok(exit::SUCCESS);
    }
    let risk = match (c.risk, c.risk_derived) {
        (Some(r), true) => format!("{} (derived)", r.as_str()),
        (Some(r), false) => r.as_str().to_owned(),
        (None, _) => "-".to_owned(),
    };
    say!("{}  {}  {}", c.id, c.status.as_str(), c.goal);
    say!("  risk {risk}");
    if c.approval_required != rein_protocol::ApprovalRequirement::None {
        let why = c
            .approval_reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        say!(
            "  approval {}{why}",
            serde_json::to_value(c.approval_required)?
                .as_str()
                .unwrap_or("?")
        );
    }
    if let Some(u) = &c.user_request_summary {
        say!("  asked  {u}");
    }
    for a in &c.planned_actions {
        say!(
            "  action {}",
            if a.title.is_empty() { &a.id } else { &a.title }
        );
    }
    if let (Some(t), Some(s)) = (&c.task_id, &c.step_id) {
        say!("  task {t}, step {s}");
    }
    if !c.read_set.is_empty() {
        say!("  reads  {}", rein_protocol::Resource::names(&c.read_set));
    }
    if !c.write_set.is_empty() {
        say!("  writes {}", rein_protocol::Resource::names(&c.write_set));
    }
    if !c.required_tools.is_empty() {
        say!(
            "  tools  {}",
            c.required_tools
                .iter()
                .map(|t| t.said())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for v in &c.verification_plan {
        say!("  verify {v}");
    }
    if let Some(r) = &c.rollback_plan {
        say!("  rollback {r}");
    }
    if !c.evidence_bundle_ids.is_empty() {
        say!("  evidence {}", c.evidence_bundle_ids.join(", "));
    }
    say!("  history:");
    for h in &c.history {
        let reason = h
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        say!(
            "    {} {} by {}{reason}",
            h.at.to_rfc3339(),
            h.to.as_str(),
            h.by
        );
    }
    Ok(exit::SUCCESS)
}

pub async fn evidence(target: &Target, cmd: EvidenceCommand) -> anyhow::Result<u8> {
    let backend = target.open(4)?;
    match cmd {
        EvidenceCommand::List {
            contract,
            task,
            state,
            limit,
            cursor,
            json,
        } => {
            let filter = RecordFilter {
                contract_id: contract,
                task_id: task,
                shared_state_id: state,
                limit: Some(limit as usize),
                cursor,
                ..RecordFilter::new(RecordKind::Evidence)
            };
            let page = backend.evidence_bundles(&filter).await?;
            print_page(
                &page,
                json,
                "evidence bundles",
                "rein evidence list",
                &[
                    ("ID", 32),
                    ("CONTRACT", 32),
                    ("ITEMS", -5),
                    ("CHECKS", -6),
                    ("CONFIDENCE", -10),
                    ("SUMMARY", 0),
                ],
                |b| {
                    vec![
                        b.id.clone(),
                        b.harness_contract_id.clone().unwrap_or_else(|| "-".into()),
                        b.items.len().to_string(),
                        b.checks.len().to_string(),
                        b.confidence.map_or("-".to_owned(), |c| format!("{c:.2}")),
                        b.summary.clone(),
                    ]
                },
            )?;
            Ok(exit::SUCCESS)
        }
        EvidenceCommand::Show { id, json } => show_bundle(&backend.evidence(&id).await?, json),
        EvidenceCommand::Create { file, json } => {
            let bundle: EvidenceBundle = read_json(&file, "evidence bundle")?;
            show_bundle(&backend.create_evidence(bundle).await?, json)
        }
        EvidenceCommand::AddItem { id, file, json } => {
            let item = read_json(&file, "evidence item")?;
            show_bundle(
                &backend
                    .add_evidence(&id, EvidencePart::Item(Box::new(item)))
                    .await?,
                json,
            )
        }
        EvidenceCommand::AddCheck { id, file, json } => {
            let check = read_json(&file, "evidence check")?;
            show_bundle(
                &backend
                    .add_evidence(&id, EvidencePart::Check(Box::new(check)))
                    .await?,
                json,
            )
        }
        EvidenceCommand::Review {
            id,
            verdict,
            comment,
            json,
        } => {
            let verdict: ReviewVerdict =
                serde_json::from_value(serde_json::Value::String(verdict))?;
            let part = EvidencePart::Review { verdict, comment };
            show_bundle(&backend.add_evidence(&id, part).await?, json)
        }
    }
}

fn show_bundle(b: &EvidenceBundle, json: bool) -> anyhow::Result<u8> {
    if json {
        print_json(b)?;
        return Ok(exit::SUCCESS);
    }
    if b.title.is_empty() {
        say!("{}  {}", b.id, b.summary);
    } else {
        say!("{}  {}: {}", b.id, b.title, b.summary);
    }
    if let Some(c) = &b.harness_contract_id {
        say!("  contract {c}");
    }
    if let Some(c) = b.confidence {
        say!("  confidence {c:.2}");
    }
    let word = |v: &serde_json::Value| v.as_str().unwrap_or("?").to_owned();
    for i in &b.items {
        let exit_code = i
            .exit_code
            .map(|c| format!(", exit {c}"))
            .unwrap_or_default();
        say!(
            "  item {} [{} · {}{exit_code}] {}",
            i.id,
            word(&serde_json::to_value(i.kind)?),
            word(&serde_json::to_value(i.capture)?),
            i.title
        );
    }
    for c in &b.checks {
        let detail = c
            .detail
            .as_deref()
            .map(|d| format!(" ({d})"))
            .unwrap_or_default();
        say!(
            "  check {} {} {}{detail}",
            c.id,
            word(&serde_json::to_value(c.status)?),
            c.name
        );
    }
    for r in &b.risks {
        say!("  risk {r}");
    }
    for u in &b.untested_areas {
        say!("  untested {u}");
    }
    for h in &b.human_reviews {
        say!(
            "  human review {} by {}{}",
            h.decision.as_deref().unwrap_or("-"),
            h.reviewer.as_deref().unwrap_or("-"),
            h.notes
                .as_deref()
                .map(|n| format!(": {n}"))
                .unwrap_or_default()
        );
    }
    for r in &b.reviews {
        let comment = r
            .comment
            .as_deref()
            .map(|c| format!(": {c}"))
            .unwrap_or_default();
        say!(
            "  review by {} {}{comment}",
            r.reviewer,
            word(&serde_json::to_value(r.verdict)?)
        );
    }
    Ok(exit::SUCCESS)
}
