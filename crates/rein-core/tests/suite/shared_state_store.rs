//! Shared harness state through the engine and a real SQLite store: an existing
//! id is never overwritten, listings filter and page, concurrent changes are not
//! lost, and detection replaces the stored conflict list.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use rein_core::store::SharedStateFilter;
use rein_core::{EngineError, ErrorKind};
use rein_protocol::{Action, ConflictType, SharedHarnessState, WorkStatus};
use serde_json::json;

fn parse(value: serde_json::Value) -> SharedHarnessState {
    serde_json::from_value(value).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_id_is_refused_never_overwritten() {
    let h = common::harness();
    let first = h
        .engine
        .create_shared_state(parse(json!({ "id": "shs_one", "goal": "first" })), "tester")
        .await
        .unwrap();
    let err = h
        .engine
        .create_shared_state(
            parse(json!({ "id": "shs_one", "goal": "second" })),
            "tester",
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(err.to_string().contains("shs_one"), "{err}");
    assert_eq!(h.engine.shared_state("shs_one").await.unwrap(), first);
    let missing = h.engine.shared_state("shs_nope").await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_filter_and_page_newest_first() {
    let h = common::harness();
    for i in 0..7 {
        h.engine
            .create_shared_state(
                parse(json!({
                "id": format!("shs_{i}"),
                "goal": "g",
                "sessionId": if i % 2 == 0 { "even" } else { "odd" },
                "status": if i == 3 { "completed" } else { "active" },
                "tags": if i < 2 { json!(["release"]) } else { json!([]) },
                })),
                "tester",
            )
            .await
            .unwrap();
    }
    let ids = |page: &rein_core::store::SharedStatePage| -> Vec<String> {
        page.items.iter().map(|s| s.id.clone()).collect()
    };
    let even = SharedStateFilter {
        session_id: Some("even".into()),
        ..SharedStateFilter::default()
    };
    assert_eq!(
        ids(&h.engine.shared_states(&even).await.unwrap()),
        vec!["shs_6", "shs_4", "shs_2", "shs_0"]
    );
    let tagged = SharedStateFilter {
        tag: Some("release".into()),
        ..SharedStateFilter::default()
    };
    assert_eq!(
        ids(&h.engine.shared_states(&tagged).await.unwrap()),
        vec!["shs_1", "shs_0"]
    );
    let done = SharedStateFilter {
        status: Some(WorkStatus::Completed),
        ..SharedStateFilter::default()
    };
    assert_eq!(
        ids(&h.engine.shared_states(&done).await.unwrap()),
        vec!["shs_3"]
    );
    // Pages of three, following the cursor, see every state once.
    let mut seen = Vec::new();
    let mut filter = SharedStateFilter {
        limit: Some(3),
        ..SharedStateFilter::default()
    };
    loop {
        let page = h.engine.shared_states(&filter).await.unwrap();
        seen.extend(ids(&page));
        match page.next_cursor {
            Some(c) => filter.cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen.len(), 7);
    let bad = SharedStateFilter {
        cursor: Some("garbage".into()),
        ..SharedStateFilter::default()
    };
    assert_eq!(
        h.engine.shared_states(&bad).await.unwrap_err().kind(),
        ErrorKind::Invalid
    );
    // The newest state of a session.
    assert_eq!(
        h.engine.session_shared_state("odd").await.unwrap().id,
        "shs_5"
    );
    assert_eq!(
        h.engine
            .session_shared_state("none")
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_changes_to_one_state_are_all_kept() {
    let h = common::harness();
    let engine = Arc::clone(&h.engine);
    engine
        .create_shared_state(parse(json!({ "id": "shs_busy", "goal": "g" })), "tester")
        .await
        .unwrap();
    let mut writers = tokio::task::JoinSet::new();
    for i in 0..24 {
        let engine = Arc::clone(&engine);
        writers.spawn(async move {
            let action: Action = serde_json::from_value(json!({
                "id": format!("a{i}"), "title": format!("action {i}")
            }))
            .unwrap();
            engine.add_action("shs_busy", action, "tester").await
        });
    }
    while let Some(done) = writers.join_next().await {
        done.unwrap().unwrap();
    }
    let state = engine.shared_state("shs_busy").await.unwrap();
    assert_eq!(state.actions.len(), 24, "no write was lost");
    // Every change has its audit record, written with it: one create, 24 adds.
    let records = engine.audit(0, 100).await.unwrap();
    assert_eq!(records.len(), 25);
    assert_eq!(records[0].action, "shared_state.create");
    assert!(
        records[1..]
            .iter()
            .all(|r| r.action == "shared_state.add_action"
                && r.who == "tester"
                && r.subject == "shs_busy")
    );
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (1..=25).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detection_replaces_the_stored_conflicts() {
    let h = common::harness();
    let write = |id: &str, path: &str| {
        serde_json::from_value::<Action>(json!({
            "id": id, "title": id, "writeSet": [{ "kind": "file", "path": path }]
        }))
        .unwrap()
    };
    h.engine
        .create_shared_state(parse(json!({ "id": "shs_c", "goal": "g" })), "tester")
        .await
        .unwrap();
    h.engine
        .add_action("shs_c", write("a", "x.md"), "tester")
        .await
        .unwrap();
    h.engine
        .add_action("shs_c", write("b", "x.md"), "tester")
        .await
        .unwrap();
    let (state, found) = h.engine.detect_conflicts("shs_c", "tester").await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].conflict_type, ConflictType::WriteWrite);
    assert_eq!(state.conflicts, found);
    assert_eq!(
        h.engine.shared_state("shs_c").await.unwrap().conflicts,
        found
    );
    // `b` moves elsewhere: the next detection clears the list.
    h.engine
        .add_action("shs_c", write("b", "y.md"), "tester")
        .await
        .unwrap();
    let (_, found) = h.engine.detect_conflicts("shs_c", "tester").await.unwrap();
    assert!(found.is_empty());
    assert!(
        h.engine
            .shared_state("shs_c")
            .await
            .unwrap()
            .conflicts
            .is_empty()
    );
    // Bad input is refused as such.
    let err: EngineError = h
        .engine
        .add_action("shs_c", write("c", "../../out"), "tester")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
}
