//! The shared-state model against the seed's JSON example (copied verbatim into
//! `tests/data/`): it parses as is and round-trips, every field it gives kept.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_protocol::{ParticipantRole, SharedHarnessState, WorkStatus};
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
        _ => assert_eq!(got, given, "{at}"),
    }
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
