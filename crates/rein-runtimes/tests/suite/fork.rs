//! A fork after an agent step's N-th turn: the fork's session continues from
//! the source's first N turns, against a local fake chat-completions server
//! (the hosted API cannot be reached here), without asking the model again
//! for what those turns said.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_test_support::engine::completes;
use std::sync::Arc;

use rein_core::fork::{Fork, ForkPoint};
use rein_core::{CreateTask, JournalStore};
use rein_protocol::{HistoryKind, StepAction, TaskDecomposition, TaskStep};
use rein_test_support::model as common;

fn lister() -> TaskStep {
    TaskStep::new(
        "draft",
        StepAction::agent("list three times", &["list_dir"]),
    )
}

/// The tool answers a request carries.
fn answers(request: &serde_json::Value) -> usize {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_after_turn_two_goes_on_from_the_first_two_turns() {
    let (base, seen) = common::fake_model().await;
    let dir = tempfile::tempdir().unwrap();
    let keeper = Arc::new(rein_store::SavedWorkspaces::open(&dir.path().join("saved")).unwrap());
    let agent = rein_test_support::engine::agent(&base, "gpt-test");
    let t = rein_test_support::engine::engine_in(dir.path())
        .executor(Arc::new(agent))
        .config(move |c| c.saved = Some(keeper))
        .build();
    let engine = t.engine;
    let source = engine
        .create(CreateTask::of(TaskDecomposition::new(
            "agent",
            vec![lister()],
        )))
        .await
        .unwrap();
    completes(&engine, source.id()).await;
    let source_requests = seen.0.lock().unwrap().len();
    assert_eq!(source_requests, 4, "three listings, then the answer");
    let source_journal = t.store.load_journal(source.id(), "draft").await.unwrap();

    // The second turn, as the history shows it.
    let history = engine.history(source.id()).await.unwrap();
    let second = history
        .points
        .iter()
        .find(|p| p.kind == HistoryKind::AgentTurn && p.turn == Some(2))
        .unwrap()
        .clone();
    let fork = engine
        .fork(
            source.id(),
            Fork {
                point: ForkPoint::At {
                    seq: second.seq,
                    turn: Some(2),
                },
                workspace: None,
                set: Default::default(),
                confined_to: None,
            },
        )
        .await
        .unwrap();
    let from = fork.head.forked_from.clone().unwrap();
    assert_eq!(from.turn, Some(2));
    // The step forked in is the one asked for: no question.
    assert!(from.ran_in_source.is_empty());
    let forked = completes(&engine, fork.id()).await;
    let output = forked
        .latest_for_step("draft")
        .unwrap()
        .output
        .clone()
        .unwrap();
    assert_eq!(output["text"], "listed three times");

    // The model was asked for the third turn and the answer only; the first
    // request carried the first two turns' messages, as the source's
    // journal has them.
    let requests = seen.0.lock().unwrap()[source_requests..].to_vec();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert_eq!(
        requests.iter().map(answers).collect::<Vec<_>>(),
        [2, 3],
        "no request of the first two turns was made again"
    );
    let first = requests[0]["messages"].as_array().unwrap();
    let carried: Vec<serde_json::Value> = source_journal[..first.len()]
        .iter()
        .map(|e| e["message"]["content"].clone())
        .collect();
    let sent: Vec<serde_json::Value> = first.iter().map(|m| m["content"].clone()).collect();
    assert_eq!(sent, carried);
    assert_eq!(first[4]["tool_calls"][0]["id"], "call_l1");

    // The fork's journal: the source's first two turns, then its own.
    let journal = t.store.load_journal(fork.id(), "draft").await.unwrap();
    for (mine, theirs) in journal[..6].iter().zip(&source_journal[..6]) {
        assert_eq!(mine["message"], theirs["message"]);
        assert!(mine.get("usage").is_none(), "the fork did not spend it");
    }
    assert_eq!(journal.len(), source_journal.len());
    // The source's journal is as it was.
    assert_eq!(
        t.store.load_journal(source.id(), "draft").await.unwrap(),
        source_journal
    );

    // A turn the step never took is refused.
    let refused = engine
        .fork(
            source.id(),
            Fork {
                point: ForkPoint::At {
                    seq: second.seq,
                    turn: Some(9),
                },
                workspace: None,
                set: Default::default(),
                confined_to: None,
            },
        )
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("took 4 turn(s): there is no turn 9"),
        "{refused}"
    );
}
