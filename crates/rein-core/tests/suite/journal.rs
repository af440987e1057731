//! A step's journal over a real SQLite store: entries come back in order, a
//! position is written once, and the journal goes with its task.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use common::*;
use rein_core::StoreError;
use rein_core::journal::Journal;
use serde_json::json;

#[tokio::test]
async fn entries_append_in_order_once_each_and_go_with_their_task() {
    let h = harness();
    let state = h.run(plan(vec![step("a", "true", &[])])).await;
    let store: Arc<dyn rein_core::Store> = h.store.clone();
    let journal = Journal::new(Arc::clone(&store), state.id(), "a");
    assert!(journal.load().await.unwrap().is_empty());
    journal
        .append(&[json!({ "n": 1 }), json!({ "n": 2 })])
        .await
        .unwrap();
    journal.append(&[json!({ "n": 3 })]).await.unwrap();
    // A second writer that loaded before cannot overwrite what was appended.
    let late = Journal::new(Arc::clone(&store), state.id(), "a");
    let err = late.append(&[json!({ "n": 99 })]).await.unwrap_err();
    assert!(
        matches!(
            err,
            rein_core::EngineError::Store(StoreError::JournalMoved { seq: 0, .. })
        ),
        "{err}"
    );
    let again = Journal::new(Arc::clone(&store), state.id(), "a");
    let entries = again.load().await.unwrap();
    assert_eq!(
        entries,
        [json!({ "n": 1 }), json!({ "n": 2 }), json!({ "n": 3 })]
    );
    // Another step's journal is its own.
    assert!(
        Journal::new(Arc::clone(&store), state.id(), "b")
            .load()
            .await
            .unwrap()
            .is_empty()
    );
    h.engine.delete(state.id()).await.unwrap();
    assert!(
        again.load().await.unwrap().is_empty(),
        "deleted with the task"
    );
}
