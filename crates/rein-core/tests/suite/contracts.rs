//! Harness contracts and evidence bundles over a real SQLite store: the risk
//! derivation, the status flow transition by transition, and concurrent
//! changes that are never lost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use rein_core::contracts::derive_risk;
use rein_core::{EngineError, ErrorKind};
use rein_protocol::{
    ContractStatus, EvidenceBundle, EvidenceItem, EvidenceKind, HarnessContract, Resource, Risk,
};

fn res(kind: &str, path: &str) -> Resource {
    Resource {
        kind: kind.into(),
        path: Some(path.into()),
        ..Resource::default()
    }
}

fn contract(id: &str) -> HarnessContract {
    serde_json::from_value(serde_json::json!({ "id": id, "goal": "g", "status": "proposed" }))
        .unwrap()
}

#[test]
fn risk_is_derived_from_what_is_written_and_the_tools_needed() {
    let tools = |t: &[&str]| t.iter().map(|s| (*s).into()).collect::<Vec<_>>();
    assert_eq!(derive_risk(&[], &tools(&["grep"])), Risk::Low);
    assert_eq!(
        derive_risk(&[res("file", "a.md")], &tools(&["editor"])),
        Risk::Medium
    );
    assert_eq!(derive_risk(&[res("directory", "docs")], &[]), Risk::High);
    assert_eq!(derive_risk(&[res("file", "/etc/hosts")], &[]), Risk::High);
    assert_eq!(
        derive_risk(&[res("file", "a.md")], &tools(&["Kubectl"])),
        Risk::High
    );
    assert_eq!(derive_risk(&[], &tools(&["git push"])), Risk::High);
    assert_eq!(
        derive_risk(&[res("secret", "vault/key")], &[]),
        Risk::Critical
    );
    let sensitive = Resource {
        sensitive: true,
        ..res("file", "a.md")
    };
    assert_eq!(derive_risk(&[sensitive], &[]), Risk::Critical);
}

#[tokio::test]
async fn every_status_moves_exactly_where_its_flow_allows() {
    let h = harness();
    let records = h.engine.records();
    let mut n = 0;
    for from in ContractStatus::ALL {
        for to in ContractStatus::ALL {
            n += 1;
            let id = format!("hctr_{n}");
            records.create_contract(contract(&id), "ana").await.unwrap();
            // Walk to `from` along the flow's first branch that gets there.
            let route: &[ContractStatus] = match from {
                ContractStatus::Draft => &[],
                ContractStatus::Proposed => &[],
                ContractStatus::Approved => &[ContractStatus::Approved],
                ContractStatus::Executing => &[ContractStatus::Approved, ContractStatus::Executing],
                ContractStatus::Verified | ContractStatus::Failed | ContractStatus::RolledBack => {
                    &[ContractStatus::Approved, ContractStatus::Executing]
                }
                ContractStatus::Rejected | ContractStatus::Cancelled => &[],
            };
            if from == ContractStatus::Draft {
                let draft: HarnessContract = serde_json::from_value(
                    serde_json::json!({ "id": format!("{id}d"), "goal": "g" }),
                )
                .unwrap();
                records.create_contract(draft, "ana").await.unwrap();
            }
            let id = if from == ContractStatus::Draft {
                format!("{id}d")
            } else {
                id
            };
            for step in route {
                records
                    .transition_contract(&id, *step, "ana", None)
                    .await
                    .unwrap();
            }
            if !matches!(from, ContractStatus::Draft | ContractStatus::Proposed)
                && !route.ends_with(&[from])
            {
                records
                    .transition_contract(&id, from, "ana", None)
                    .await
                    .unwrap();
            }
            assert_eq!(records.contract(&id).await.unwrap().status, from);
            let result = records
                .transition_contract(&id, to, "bo", Some("why".into()))
                .await;
            if rein_core::lifecycle::contract_transition(from, to).is_ok() {
                let moved = result.unwrap();
                assert_eq!(moved.status, to);
                let last = moved.history.last().unwrap();
                assert_eq!(
                    (last.from, last.to, last.by.as_str()),
                    (Some(from), to, "bo")
                );
            } else {
                let err = result.unwrap_err();
                assert!(
                    matches!(err, EngineError::IllegalTransition { .. }),
                    "{from:?} → {to:?}: {err}"
                );
                assert_eq!(err.kind(), ErrorKind::Conflict);
                assert_eq!(records.contract(&id).await.unwrap().status, from);
            }
        }
    }
}

#[tokio::test]
async fn a_contract_refuses_paths_above_its_root_and_ids_unfit_for_a_url() {
    let h = harness();
    let records = h.engine.records();
    let mut c = contract("hctr_up");
    c.write_set = vec![res("file", "../outside")];
    let err = records.create_contract(c, "ana").await.unwrap_err();
    assert!(err.to_string().contains("`../outside`"), "{err}");
    let err = records
        .create_contract(contract("hctr/x"), "ana")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("`hctr/x`"), "{err}");
    assert_eq!(err.kind(), ErrorKind::Invalid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_additions_to_a_bundle_are_never_lost() {
    let h = harness();
    let records = h.engine.records();
    let bundle: EvidenceBundle =
        serde_json::from_value(serde_json::json!({ "summary": "s" })).unwrap();
    let id = records.create_evidence(bundle, "ana").await.unwrap().id;
    let mut writers = tokio::task::JoinSet::new();
    for n in 0..24 {
        let records = records.clone();
        let id = id.clone();
        writers.spawn(async move {
            let item = EvidenceItem {
                id: format!("i{n}"),
                kind: EvidenceKind::Note,
                title: format!("note {n}"),
                content: None,
                exit_code: None,
                capture: rein_protocol::Capture::Reported,
                ..EvidenceItem::default()
            };
            records.add_evidence_item(&id, item, "ana").await.unwrap();
        });
    }
    while writers.join_next().await.is_some() {}
    let stored = records.evidence(&id).await.unwrap();
    assert_eq!(stored.items.len(), 24);
}

#[test]
fn an_agent_steps_side_effects_become_evidence_that_says_how_rein_knows_them() {
    use rein_protocol::{Capture, EvidenceKind};
    let output = serde_json::json!({
        "selection": { "selected": "acp-test" },
        "side_effects": [
            { "what": "write_file", "path": "/ws/notes.md", "capture": "callback" },
            { "what": "edit", "title": "Write notes.md", "status": "completed",
              "locations": ["/ws/notes.md"], "capture": "callback" },
            { "what": "execute", "title": "npm install", "status": "completed",
              "locations": [], "capture": "unsupported" },
            // Whatever a runtime claims, an external side effect it did not
            // report through a callback is not vouched for.
            { "what": "delete", "title": "rm -rf build", "capture": "rein" },
        ],
    });
    let bundle = rein_core::contracts::agent_evidence("task_1", "draft", None, &output).unwrap();
    let items: Vec<(EvidenceKind, Capture)> =
        bundle.items.iter().map(|i| (i.kind, i.capture)).collect();
    assert_eq!(
        items,
        [
            (EvidenceKind::File, Capture::Callback),
            (EvidenceKind::ExternalSideEffect, Capture::Callback),
            (EvidenceKind::ExternalSideEffect, Capture::Unsupported),
            (EvidenceKind::ExternalSideEffect, Capture::Unsupported),
        ]
    );
    assert_eq!(
        bundle.items[2].title,
        "acp-test: execute tool call `npm install` (completed)"
    );
    assert_eq!(
        bundle.items[0]
            .resource
            .as_ref()
            .and_then(|r| r.path.as_deref()),
        Some("/ws/notes.md")
    );
    assert_eq!(bundle.step_id.as_deref(), Some("draft"));
    // A plugin that only says its side effects are its own: one item saying so.
    let plugin =
        serde_json::json!({ "selection": { "selected": "echo" }, "side_effects": "unsupported" });
    let bundle = rein_core::contracts::agent_evidence("t", "s", None, &plugin).unwrap();
    assert_eq!(bundle.items.len(), 1);
    assert_eq!(bundle.items[0].capture, Capture::Unsupported);
    // The built-in runtime names none: its journal is rein's own record.
    assert!(
        rein_core::contracts::agent_evidence(
            "t",
            "s",
            None,
            &serde_json::json!({ "text": "done" })
        )
        .is_none()
    );
}
