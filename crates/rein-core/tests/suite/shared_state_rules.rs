//! Validation of shared harness state, one test per rule of spec shared-state §3
//! that does not need a store (ids, duplicates, unknown values, replacement).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_core::shared_state::{SharedStateError, prepare_new, upsert_action, upsert_participant};
use rein_protocol::{Action, Participant, SharedHarnessState};
use serde_json::json;

fn parse(value: serde_json::Value) -> SharedHarnessState {
    serde_json::from_value(value).unwrap()
}

#[test]
fn a_missing_id_is_generated_and_a_given_one_kept() {
    let now = chrono::Utc::now();
    let s = prepare_new(parse(json!({ "goal": "g" })), now).unwrap();
    assert!(s.id.starts_with("shs_") && s.id.len() == 4 + 26, "{}", s.id);
    assert_eq!(s.created_at, Some(now));
    assert_eq!(s.updated_at, Some(now));
    let given = prepare_new(parse(json!({ "id": "shs_release", "goal": "g" })), now).unwrap();
    assert_eq!(given.id, "shs_release");
}

#[test]
fn participants_and_actions_without_ids_get_numbered_ones_around_the_given() {
    let s = prepare_new(
        parse(json!({
            "goal": "g",
            "participants": [
                { "role": "coder" }, { "id": "participant_1", "role": "tester" }, { "role": "reviewer" }
            ],
            "actions": [ { "title": "a" }, { "id": "x", "title": "b" }, { "title": "c" } ]
        })),
        chrono::Utc::now(),
    )
    .unwrap();
    let ids: Vec<&str> = s.participants.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, vec!["participant_2", "participant_1", "participant_3"]);
    let ids: Vec<&str> = s.actions.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, vec!["action_1", "x", "action_2"]);
}

#[test]
fn duplicate_ids_in_one_payload_are_refused_naming_the_id() {
    let dup = parse(json!({
        "goal": "g",
        "actions": [ { "id": "same", "title": "a" }, { "id": "same", "title": "b" } ]
    }));
    let err = prepare_new(dup, chrono::Utc::now()).unwrap_err();
    assert_eq!(
        err,
        SharedStateError::DuplicateId {
            what: "action",
            id: "same".into()
        }
    );
    assert!(err.to_string().contains("`same`"));
    let dup = parse(json!({
        "goal": "g",
        "participants": [ { "id": "p", "role": "coder" }, { "id": "p", "role": "tester" } ]
    }));
    assert!(matches!(
        prepare_new(dup, chrono::Utc::now()),
        Err(SharedStateError::DuplicateId {
            what: "participant",
            ..
        })
    ));
}

#[test]
fn unknown_status_role_and_risk_values_are_refused_naming_value_and_set() {
    for (body, value, allowed) in [
        (
            json!({ "goal": "g", "status": "paused" }),
            "paused",
            "blocked",
        ),
        (
            json!({ "goal": "g", "participants": [{ "role": "chef" }] }),
            "chef",
            "security_reviewer",
        ),
        (
            json!({ "goal": "g", "actions": [{ "title": "t", "riskLevel": "extreme" }] }),
            "extreme",
            "critical",
        ),
    ] {
        let err = serde_json::from_value::<SharedHarnessState>(body)
            .unwrap_err()
            .to_string();
        assert!(err.contains(value) && err.contains(allowed), "{err}");
    }
}

#[test]
fn adding_a_participant_or_action_with_an_existing_id_replaces_it() {
    let now = chrono::Utc::now();
    let mut s = prepare_new(
        parse(json!({
            "goal": "g",
            "participants": [{ "id": "p", "role": "coder" }],
            "actions": [{ "id": "a", "title": "first" }]
        })),
        now,
    )
    .unwrap();
    let p: Participant = serde_json::from_value(json!({ "id": "p", "role": "reviewer" })).unwrap();
    upsert_participant(&mut s, p, now);
    assert_eq!(s.participants.len(), 1);
    assert_eq!(
        serde_json::to_value(s.participants[0].role).unwrap(),
        "reviewer"
    );
    let a: Action = serde_json::from_value(json!({ "id": "a", "title": "second" })).unwrap();
    upsert_action(&mut s, a, now).unwrap();
    assert_eq!(s.actions.len(), 1);
    assert_eq!(s.actions[0].title, "second");
    let new: Action = serde_json::from_value(json!({ "title": "third" })).unwrap();
    upsert_action(&mut s, new, now).unwrap();
    assert_eq!(s.actions[1].id, "action_1");
    // An action whose path climbs out is refused and changes nothing.
    let bad: Action = serde_json::from_value(json!({
        "id": "bad", "title": "t", "writeSet": [{ "kind": "file", "path": "../../etc/passwd" }]
    }))
    .unwrap();
    let before = s.clone();
    assert!(matches!(
        upsert_action(&mut s, bad, now),
        Err(SharedStateError::InvalidResource(_))
    ));
    assert_eq!(s, before);
}
