//! The task store's rules (spec `tasks.md` §2) through the engine over SQLite:
//! snapshot and restore never overwrite history, delete refuses running tasks and
//! removes everything of finished ones, list filters and pages newest first.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::sync::Arc;

use rein_core::store::TaskFilter;
use rein_core::{
    CommandExecutor, CreateTask, Engine, EngineConfig, EngineError, RunOptions, StoreError,
    TaskStore,
};
use rein_protocol::{
    CheckpointStatus, SnapshotId, TaskChange, TaskDecomposition, TaskStatus, TaskStep,
};
use rein_store::SqliteStore;

fn setup() -> (tempfile::TempDir, Arc<SqliteStore>, Arc<Engine>) {
    let t = rein_test_support::engine::engine().build();
    (t.dir.unwrap(), t.store, t.engine)
}

/// A chain of idempotent command steps `s0`, `s1`, … running `runs`.
fn plan(runs: &[&str]) -> TaskDecomposition {
    let steps = runs
        .iter()
        .enumerate()
        .map(|(i, run)| TaskStep {
            depends_on: if i == 0 {
                vec![]
            } else {
                vec![format!("s{}", i - 1)]
            },
            idempotent: true,
            ..TaskStep::command(format!("s{i}"), *run)
        })
        .collect();
    TaskDecomposition::new("rules", steps)
}

async fn create(engine: &Engine, runs: &[&str], session: &str) -> rein_protocol::TaskState {
    engine
        .create(CreateTask {
            plan: plan(runs),
            session_id: Some(session.into()),
            workspace: None,
            confined_to: None,
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn restore_creates_a_new_task_and_leaves_the_original_and_its_log_alone() {
    let (_dir, store, engine) = setup();
    let original = create(&engine, &["true", "true"], "s").await;
    let snapshot = engine.snapshot(original.id()).await.unwrap();
    assert_eq!(snapshot.state.status(), TaskStatus::Pending);
    let done = engine
        .run(original.id(), RunOptions::default())
        .await
        .unwrap();
    assert_eq!(done.status(), TaskStatus::Completed);
    let log_before = store.events(original.id(), 0, usize::MAX).await.unwrap();

    let restored = engine.restore(&snapshot.id).await.unwrap();
    assert_ne!(restored.id(), original.id());
    assert_eq!(
        restored.status(),
        TaskStatus::Pending,
        "the state is the snapshot's, not the task's now"
    );
    assert_eq!(restored.head.restored_from.as_ref(), Some(&snapshot.id));
    assert_eq!(
        restored.head.context.task_history,
        vec![original.id().clone()]
    );
    assert_eq!(
        restored.head.context.pending_steps,
        snapshot.state.head.context.pending_steps
    );
    assert_eq!(restored.checkpoints.len(), snapshot.state.checkpoints.len());
    assert!(
        restored
            .checkpoints
            .iter()
            .all(|c| c.task_id == *restored.id())
    );
    for (copy, source) in restored.checkpoints.iter().zip(&snapshot.state.checkpoints) {
        assert_ne!(
            copy.id, source.id,
            "a copied checkpoint gets an id of its own"
        );
        assert_eq!(copy.metadata["copied_from"], source.id.to_string());
    }

    // The original and its log are exactly as they were.
    assert_eq!(
        store.events(original.id(), 0, usize::MAX).await.unwrap(),
        log_before
    );
    assert_eq!(engine.get(original.id()).await.unwrap(), done);
    // The new task's log starts with the restore and folds to its state.
    let log = store.events(restored.id(), 0, usize::MAX).await.unwrap();
    assert!(matches!(log[0].change, TaskChange::TaskRestored { .. }));
    assert_eq!(
        rein_core::fold::fold(&log).unwrap().head.summary(),
        store.load_summary(restored.id()).await.unwrap().unwrap()
    );
    // And it runs to completion on its own.
    let rerun = engine
        .run(restored.id(), RunOptions::default())
        .await
        .unwrap();
    assert_eq!(rerun.status(), TaskStatus::Completed);
}

#[tokio::test]
async fn restoring_a_snapshot_of_a_running_task_gives_a_paused_task() {
    let (_dir, store, engine) = setup();
    let task = create(&engine, &["true"], "s").await;
    // Make it look like a task whose runner is mid-step: start it and stop it hard.
    let options = RunOptions::default();
    options.cancel.cancel();
    let running = engine.run(task.id(), options).await.unwrap();
    assert_eq!(running.status(), TaskStatus::InProgress);
    let snapshot = engine.snapshot(task.id()).await.unwrap();
    let restored = engine.restore(&snapshot.id).await.unwrap();
    assert_eq!(restored.status(), TaskStatus::Paused);
    assert!(
        restored
            .head
            .context
            .blocked_reason
            .as_deref()
            .unwrap()
            .contains(&snapshot.id.to_string())
    );
    assert!(restored.head.runner.is_none());
    assert_eq!(store.list_snapshots(task.id()).await.unwrap().len(), 1);
}

#[tokio::test]
async fn delete_refuses_a_running_task_and_removes_everything_of_a_finished_one() {
    let (_dir, store, engine) = setup();
    let task = create(&engine, &["true"], "s").await;
    let err = engine.delete(task.id()).await.unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::WrongStatus {
                status: TaskStatus::Pending,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("abort it first"), "{err}");
    let options = RunOptions::default();
    options.cancel.cancel();
    engine.run(task.id(), options).await.unwrap();
    let err = engine.delete(task.id()).await.unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::WrongStatus {
                status: TaskStatus::InProgress,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        store.load_summary(task.id()).await.unwrap().is_some(),
        "nothing was deleted"
    );

    let done = engine.run(task.id(), RunOptions::default()).await.unwrap();
    assert_eq!(done.status(), TaskStatus::Completed);
    let snapshot = engine.snapshot(task.id()).await.unwrap();
    engine.delete(task.id()).await.unwrap();
    assert!(store.load_summary(task.id()).await.unwrap().is_none());
    assert!(store.load_plan(task.id()).await.unwrap().is_none());
    assert!(store.events(task.id(), 0, 100).await.unwrap().is_empty());
    assert!(store.get_snapshot(&snapshot.id).await.unwrap().is_none());
    assert!(matches!(
        engine.delete(task.id()).await.unwrap_err(),
        EngineError::TaskNotFound(_)
    ));
    assert!(matches!(
        engine.restore(&SnapshotId::new()).await.unwrap_err(),
        EngineError::SnapshotNotFound(_)
    ));
}

#[tokio::test]
async fn list_filters_by_session_status_and_time_and_pages_newest_first() {
    let (_dir, store, engine) = setup();
    let mut ids = Vec::new();
    for i in 0..7 {
        let t = create(&engine, &["true"], if i % 2 == 0 { "even" } else { "odd" }).await;
        ids.push(t.id().clone());
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    engine.run(&ids[0], RunOptions::default()).await.unwrap();

    let all = store.list(&TaskFilter::default()).await.unwrap();
    let listed: Vec<_> = all.items.iter().map(|h| h.id.clone()).collect();
    let mut newest_first = ids.clone();
    newest_first.reverse();
    assert_eq!(listed, newest_first);
    assert!(all.next_cursor.is_none());

    let even = store
        .list(&TaskFilter {
            session_id: Some("even".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(even.items.len(), 4);
    assert!(even.items.iter().all(|h| h.session_id == "even"));

    let completed = store
        .list(&TaskFilter {
            status: Some(TaskStatus::Completed),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        completed.items.iter().map(|h| &h.id).collect::<Vec<_>>(),
        vec![&ids[0]]
    );

    let t3 = engine.get(&ids[3]).await.unwrap().head.created_at;
    let later = store
        .list(&TaskFilter {
            created_from: Some(t3),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(later.items.len(), 4);
    let earlier = store
        .list(&TaskFilter {
            created_to: Some(t3),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(earlier.items.len(), 3);

    // Pages of 3 walk every task once, newest first.
    let mut walked = Vec::new();
    let mut filter = TaskFilter {
        limit: Some(3),
        ..Default::default()
    };
    loop {
        let page = store.list(&filter).await.unwrap();
        assert!(page.items.len() <= 3);
        walked.extend(page.items.into_iter().map(|h| h.id));
        match page.next_cursor {
            Some(c) => filter.cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(walked, newest_first);

    let bad = store
        .list(&TaskFilter {
            cursor: Some("garbage".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(bad, StoreError::BadCursor(_)));
}

#[tokio::test]
async fn state_survives_reopening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let engine = rein_test_support::engine::engine_in(dir.path())
            .build()
            .engine;
        let t = create(&engine, &["true", "true"], "s").await;
        engine.run(t.id(), RunOptions::default()).await.unwrap();
        t.id().clone()
    };
    let rein_test_support::engine::TestEngine { store, engine, .. } =
        rein_test_support::engine::engine_in(dir.path()).build();
    let state = engine.get(&id).await.unwrap();
    assert_eq!(state.status(), TaskStatus::Completed);
    assert!(
        state
            .checkpoints
            .iter()
            .all(|c| c.status == CheckpointStatus::Completed)
    );
    let log = store.events(&id, 0, usize::MAX).await.unwrap();
    assert_eq!(rein_core::fold::fold(&log).unwrap(), state);
    assert_eq!(
        store.load_summary(&id).await.unwrap().unwrap(),
        state.head.summary()
    );
    store.probe().await.unwrap();
}

/// A file written by the schema before a task's summary travelled with its
/// events (version 6: the summary and the log position on the task row) opens
/// with every task whole, and an unfinished task runs on from where it was.
#[tokio::test]
async fn a_store_of_the_previous_schema_opens_with_its_tasks_whole() {
    let dir = tempfile::tempdir().unwrap();
    let engine_on = |path: &std::path::Path| {
        let store = Arc::new(SqliteStore::open(path).unwrap());
        let engine = Engine::new(
            store.clone(),
            Arc::new(CommandExecutor::unsandboxed()),
            EngineConfig::new(dir.path().join("ws")),
        );
        (store, engine)
    };
    // Tasks as this rein writes them: one finished, one stopped midway.
    let current = dir.path().join("current.db");
    let (store, engine) = engine_on(&current);
    let done = create(&engine, &["true", "true"], "a").await;
    engine.run(done.id(), RunOptions::default()).await.unwrap();
    let open = create(&engine, &["true", "true"], "b").await;
    let options = RunOptions::default();
    options.cancel.cancel();
    engine.run(open.id(), options).await.unwrap();
    let mut before = Vec::new();
    for id in [done.id(), open.id()] {
        before.push(store.load_summary(id).await.unwrap().unwrap());
    }
    assert_eq!(before[1].status, TaskStatus::InProgress);
    drop((store, engine));

    // The same tasks in a file of schema version 6.
    let old = dir.path().join("old.db");
    let mut conn = rusqlite::Connection::open(&old).unwrap();
    assert_eq!(rein_store::schema::migrate_to(&mut conn, 6).unwrap().to, 6);
    conn.execute("ATTACH ?1 AS cur", [current.to_str().unwrap()])
        .unwrap();
    conn.execute_batch(
        "INSERT INTO tasks (tkey, id, session_id, status, created_at, updated_at, last_seq, summary)
           SELECT t.tkey, t.id, t.session_id, t.status, t.created_at, t.status_at,
                  (SELECT max(seq) FROM cur.events e WHERE e.tkey = t.tkey),
                  (SELECT CASE WHEN substr(e.summary, 1, 6) = '{\"id\":' THEN e.summary
                               ELSE json_patch(t.summary, e.summary) END
                     FROM cur.events e
                    WHERE e.tkey = t.tkey AND e.summary IS NOT NULL ORDER BY e.seq DESC LIMIT 1)
           FROM cur.tasks t;
         INSERT INTO plans SELECT * FROM cur.plans;
         INSERT INTO events (gseq, tkey, seq, type, body)
           SELECT gseq, tkey, seq, type, body FROM cur.events;
         DETACH cur;",
    )
    .unwrap();
    drop(conn);

    let (store, engine) = engine_on(&old);
    // Each task's last event now carries its summary, so reading one does not
    // walk the log back to the task row's.
    let carried: Vec<(i64, String)> = rusqlite::Connection::open(&old)
        .unwrap()
        .prepare(
            "SELECT e.tkey, e.summary FROM events e JOIN tasks t ON t.tkey = e.tkey
              WHERE e.summary IS NOT NULL
                AND e.seq = (SELECT max(seq) FROM events WHERE tkey = e.tkey)
              ORDER BY e.tkey",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(carried.len(), 2, "{carried:?}");
    for (id, summary) in [done.id(), open.id()].into_iter().zip(&before) {
        assert_eq!(&store.load_summary(id).await.unwrap().unwrap(), summary);
        let state = engine.get(id).await.unwrap();
        let log = store.events(id, 0, usize::MAX).await.unwrap();
        assert_eq!(rein_core::fold::fold(&log).unwrap(), state);
    }
    let listed = store.list(&TaskFilter::default()).await.unwrap().items;
    assert_eq!(listed, vec![before[1].clone(), before[0].clone()]);

    // The unfinished task's next writes start from its migrated position.
    let finished = engine.run(open.id(), RunOptions::default()).await.unwrap();
    assert_eq!(finished.status(), TaskStatus::Completed);
    let summary = store.load_summary(open.id()).await.unwrap().unwrap();
    assert_eq!(summary, finished.head.summary());
    assert!(summary.last_seq > before[1].last_seq);
    let completed = TaskFilter {
        status: Some(TaskStatus::Completed),
        ..TaskFilter::default()
    };
    assert_eq!(store.list(&completed).await.unwrap().items.len(), 2);
}
