//! The seed's payloads (seed 000, OpenClaw.NET) against rein's models: the
//! shared-state example copied verbatim, and a contract, an evidence bundle
//! and a shared state with every field the seed defines set
//! (`tests/data/seed-000-*-full.json`). Each parses as is and round-trips,
//! every field it gives kept under the seed's name; a field the seed does not
//! define is refused naming it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_protocol::{
    Confidence, ConfidenceLevel, EvidenceBundle, HarnessContract, ParticipantRole, Risk,
    SharedHarnessState, TextOr, WorkStatus,
};
use serde_json::Value;

const EXAMPLE: &str = include_str!("../data/seed-000-shared-state.json");

/// Every field of `given` is in `got` with the same value (objects may have more).
fn contains(got: &Value, given: &Value, at: &str) {
    match (got, given) {
        (Value::Object(g), Value::Object(w)) => {
            for (k, v) in w {
                let there = g.get(k).unwrap_or_else(|| panic!("{at}.{k} was dropped"));
                contains(there, v, &format!("{at}.{k}"));
            }
        }
        (Value::Array(g), Value::Array(w)) => {
            assert_eq!(g.len(), w.len(), "{at}: length");
            for (i, (a, b)) in g.iter().zip(w).enumerate() {
                contains(a, b, &format!("{at}[{i}]"));
            }
        }
        (Value::String(g), Value::String(w)) if g != w => {
            // A time may be written `+00:00` or `Z`: the same instant.
            let instant = |t: &str| chrono_like(t);
            assert!(
                instant(g).is_some() && instant(g) == instant(w),
                "{at}: {got} is not {given}"
            );
        }
        _ => assert_eq!(got, given, "{at}"),
    }
}

/// An RFC 3339 time in UTC as `YYYY-MM-DDTHH:MM:SS`, or None.
fn chrono_like(t: &str) -> Option<String> {
    let base = t.strip_suffix('Z').or_else(|| t.strip_suffix("+00:00"))?;
    (base.len() == 19 && base.as_bytes()[10] == b'T').then(|| base.to_owned())
}

/// `text` parsed as `T`, written back, and compared field by field.
fn round_trips<T: serde::de::DeserializeOwned + serde::Serialize>(text: &str) -> T {
    let given: Value = serde_json::from_str(text).unwrap();
    let parsed: T = serde_json::from_str(text).unwrap();
    contains(&serde_json::to_value(&parsed).unwrap(), &given, "$");
    parsed
}

/// `text` with `field` added at the top level is refused, naming it.
fn refuses_unknown<T: serde::de::DeserializeOwned + std::fmt::Debug>(text: &str, path: &[&str]) {
    let mut v: Value = serde_json::from_str(text).unwrap();
    let mut at = &mut v;
    for p in path {
        at = match p.parse::<usize>() {
            Ok(i) => &mut at[i],
            Err(_) => &mut at[*p],
        };
    }
    at["colourOfTheSky"] = Value::from("blue");
    let e = serde_json::from_value::<T>(v).unwrap_err().to_string();
    assert!(e.contains("colourOfTheSky"), "{path:?}: {e}");
}

const CONTRACT: &str = include_str!("../data/seed-000-contract-full.json");
const EVIDENCE: &str = include_str!("../data/seed-000-evidence-full.json");
const STATE: &str = include_str!("../data/seed-000-state-full.json");

#[test]
fn a_contract_with_every_seed_field_round_trips() {
    let c: HarnessContract = round_trips(CONTRACT);
    assert_eq!(
        c.risk,
        Some(Risk::Critical),
        "riskLevel is kept, not re-derived"
    );
    assert_eq!(
        c.planned_actions[0].action_type.as_deref(),
        Some("credential_rotation")
    );
    assert!(matches!(&c.required_tools[0], TextOr::Object(t) if t.tool_name == "shell"));
    assert!(c.write_set[0].sensitive, "isSensitive is read");
    for path in [
        &[][..],
        &["plannedActions", "0"],
        &["toolsRequired", "0"],
        &["verificationPlan", "0"],
        &["rollbackPlan", "0"],
        &["constraints", "0"],
        &["metadata"],
        &["writeSet", "0"],
    ] {
        refuses_unknown::<HarnessContract>(CONTRACT, path);
    }
}

#[test]
fn an_evidence_bundle_with_every_seed_field_round_trips() {
    let b: EvidenceBundle = round_trips(EVIDENCE);
    assert_eq!(b.confidence, Some(Confidence::Level(ConfidenceLevel::High)));
    assert_eq!(b.title, "Deploy key rotation");
    assert_eq!(b.source_session_id.as_deref(), Some("session-ops"));
    for path in [
        &[][..],
        &["items", "0"],
        &["items", "0", "source"],
        &["checks", "0"],
        &["risks", "0"],
        &["untestedAreas", "0"],
        &["humanReviews", "0"],
        &["assumptions", "0"],
    ] {
        refuses_unknown::<EvidenceBundle>(EVIDENCE, path);
    }
    // rein's own forms still parse: a score and text risks.
    let rein: EvidenceBundle =
        serde_json::from_str(r#"{"confidence": 0.5, "risks": ["r"], "untestedAreas": ["u"]}"#)
            .unwrap();
    assert_eq!(rein.confidence, Some(Confidence::Score(0.5)));
    assert_eq!(rein.risks[0], "r");
}

#[test]
fn a_shared_state_with_every_seed_field_round_trips() {
    let s: SharedHarnessState = round_trips(STATE);
    assert!(s.actions[0].write_set[0].sensitive);
    assert_eq!(s.actions[0].risk_level, Some(Risk::Unknown));
    assert!(s.participants[0].completed_at.is_some());
    // The seed's defaults: required obligations and dependencies, an
    // obligation's status unknown, a participant's role custom, a resource's
    // kind unknown, an action's title empty.
    assert!(s.verifier_obligations[0].required);
    assert!(s.version_dependencies[0].required);
    assert_eq!(s.verifier_obligations[0].status, WorkStatus::Unknown);
    let bare: SharedHarnessState = serde_json::from_str(
        r#"{"participants": [{"id": "p"}], "actions": [{"id": "a", "readSet": [{"path": "x"}]}]}"#,
    )
    .unwrap();
    assert_eq!(bare.participants[0].role, ParticipantRole::Custom);
    assert_eq!(bare.actions[0].title, "");
    assert_eq!(bare.actions[0].read_set[0].kind, "unknown");
    for path in [
        &[][..],
        &["participants", "0"],
        &["actions", "0"],
        &["actions", "0", "writeSet", "0"],
        &["actions", "0", "verifierObligations", "0"],
        &["actions", "0", "versionDependencies", "0"],
        &["actions", "0", "assumptions", "0"],
    ] {
        refuses_unknown::<SharedHarnessState>(STATE, path);
    }
    // rein's earlier names are still read.
    let old: SharedHarnessState = serde_json::from_str(
        r#"{"createdAt": "2026-01-01T00:00:00Z", "sharedWriteSet": [{"kind": "file", "path": "a", "sensitive": true}]}"#,
    )
    .unwrap();
    assert!(old.created_at.is_some() && old.shared_write_set[0].sensitive);
}

#[test]
fn the_seed_example_parses_as_is_and_round_trips() {
    let state: SharedHarnessState = serde_json::from_str(EXAMPLE).unwrap();
    assert_eq!(state.id, "shs_release_docs");
    assert_eq!(state.participants[1].role, ParticipantRole::DocsWriter);
    assert_eq!(
        state.participants[0].status,
        WorkStatus::Active,
        "a missing status is active"
    );
    let action = &state.actions[0];
    assert_eq!(
        action.write_set[0].path.as_deref(),
        Some("docs/RELEASES.md")
    );
    assert!(action.verifier_obligations[0].required);
    assert!(
        action.version_dependencies[0].required,
        "required unless said"
    );

    let written = serde_json::to_value(&state).unwrap();
    let given: Value = serde_json::from_str(EXAMPLE).unwrap();
    contains(&written, &given, "state");
    let again: SharedHarnessState = serde_json::from_value(written).unwrap();
    assert_eq!(again, state);
}

#[test]
fn unknown_values_are_refused_naming_them() {
    let bad_role = EXAMPLE.replace("\"docs_writer\"", "\"poet\"");
    let err = serde_json::from_str::<SharedHarnessState>(&bad_role)
        .unwrap_err()
        .to_string();
    assert!(err.contains("poet") && err.contains("docs_writer"), "{err}");
    let bad_status = EXAMPLE.replace("\"status\": \"active\"", "\"status\": \"sleepy\"");
    let err = serde_json::from_str::<SharedHarnessState>(&bad_status)
        .unwrap_err()
        .to_string();
    assert!(err.contains("sleepy"), "{err}");
}
