//! What every backend of `rein_core::Store` guarantees, written once over any
//! store and run against each backend (`conformance!` below names them). Tasks
//! are made by a real engine over the store under test, so the events are the
//! ones rein writes; the guarantees are then checked on the store itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use rein_core::store::{
    ApprovalFilter, AuditRecord, ControlKind, ControlRequest, Record, RecordFilter, RecordKind,
    SharedStateFilter, TaskFilter, TaskWrite, UsageFilter, UsageGroup, UsageRow,
};
use rein_core::{CommandExecutor, CreateTask, Engine, EngineConfig, RunOptions, Store, StoreError};
use rein_protocol::{
    ApprovalStatus, EventId, HarnessEvent, LedgerEntry, LedgerId, LedgerKind, SharedHarnessState,
    StepAction, TaskDecomposition, TaskState, TaskStatus, TaskStep,
};
use serde_json::json;

/// A backend under test: the store, and what keeps it alive (its directory,
/// its server).
struct Backend {
    store: Arc<dyn Store>,
    engine: Arc<Engine>,
    _keep: Box<dyn std::any::Any + Send>,
}

fn with_engine(
    store: Arc<dyn Store>,
    dir: &std::path::Path,
    keep: Box<dyn std::any::Any + Send>,
) -> Backend {
    let mut config = EngineConfig::new(dir.join("workspaces"));
    config.saved = Some(Arc::new(
        rein_store::SavedWorkspaces::open(&dir.join("saved")).unwrap(),
    ));
    let engine = Arc::new(Engine::new(
        Arc::clone(&store),
        Arc::new(CommandExecutor::unsandboxed()),
        config,
    ));
    Backend {
        store,
        engine,
        _keep: keep,
    }
}

async fn sqlite() -> Backend {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(rein_store::SqliteStore::open(&dir.path().join("rein.db")).unwrap());
    let path = dir.path().to_owned();
    with_engine(store, &path, Box::new(dir))
}

/// A database of its own on the suite's throwaway PostgreSQL cluster.
async fn postgres() -> Backend {
    let cluster = rein_test_support::postgres::shared().unwrap();
    let url = cluster.database().await.unwrap();
    let store = Arc::new(rein_store::PostgresStore::connect(&url).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    with_engine(store, &path, Box::new(dir))
}

fn noop(id: &str, deps: &[&str]) -> TaskStep {
    TaskStep {
        depends_on: deps.iter().map(|d| (*d).to_owned()).collect(),
        ..TaskStep::new(id, StepAction::Noop)
    }
}

fn approval(id: &str) -> TaskStep {
    TaskStep::new(id, StepAction::approval("Go ahead?", ""))
}

async fn create(b: &Backend, steps: Vec<TaskStep>, session: &str) -> TaskState {
    b.engine
        .create(CreateTask {
            plan: TaskDecomposition::new("conformance", steps),
            session_id: Some(session.to_owned()),
            workspace: None,
            confined_to: None,
        })
        .await
        .unwrap()
}

async fn completed(b: &Backend, steps: usize) -> TaskState {
    let ids: Vec<String> = (0..steps).map(|i| format!("s{i}")).collect();
    let plan = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let deps: Vec<&str> = ids[..i].last().map(String::as_str).into_iter().collect();
            noop(id, &deps)
        })
        .collect();
    let state = create(b, plan, "ses_conformance").await;
    let done = b
        .engine
        .run(state.id(), RunOptions::default())
        .await
        .unwrap();
    assert_eq!(done.status(), TaskStatus::Completed);
    done
}

/// One more event after the task's last: what a writer at `last_seq` appends.
fn next_event(log: &[HarnessEvent]) -> HarnessEvent {
    let last = log.last().unwrap();
    HarnessEvent {
        id: EventId::new(),
        seq: last.seq + 1,
        ..last.clone()
    }
}

fn write_after(state: &TaskState, log: &[HarnessEvent]) -> TaskWrite {
    TaskWrite {
        task_id: state.id().clone(),
        expected_seq: state.head.last_seq,
        events: vec![next_event(log)],
        summary: state.head.summary(),
        approvals: Vec::new(),
        ledger: Vec::new(),
        plan: None,
    }
}

fn audit(action: &str, subject: &str) -> AuditRecord {
    AuditRecord {
        seq: 0,
        at: chrono::Utc::now(),
        who: "conformance".into(),
        action: action.into(),
        subject: subject.into(),
        detail: json!({}),
    }
}

// The guarantees, each over any store.

/// A task is stored whole (its summary, plan and log, which folds to its
/// state), and its id only once.
async fn a_task_is_stored_whole_and_its_id_only_once(b: Backend) {
    let state = completed(&b, 3).await;
    let s = &b.store;
    assert_eq!(
        s.load_summary(state.id()).await.unwrap(),
        Some(state.head.summary())
    );
    let plan = s.load_plan(state.id()).await.unwrap().unwrap();
    assert_eq!(plan.steps.len(), 3);
    let log = s.events(state.id(), 0, usize::MAX).await.unwrap();
    assert_eq!(rein_core::fold::fold(&log).unwrap(), state);
    let again = rein_core::store::NewTask {
        plan,
        write: TaskWrite {
            task_id: state.id().clone(),
            expected_seq: 0,
            events: log[..1].to_vec(),
            summary: state.head.summary(),
            approvals: Vec::new(),
            ledger: Vec::new(),
            plan: None,
        },
    };
    let err = s.create(again).await.unwrap_err();
    assert!(
        matches!(err, StoreError::AlreadyExists(ref id) if id == state.id()),
        "{err}"
    );
    assert_eq!(s.events(state.id(), 0, usize::MAX).await.unwrap(), log);
    assert_eq!(
        s.load_summary(&rein_protocol::TaskId::new()).await.unwrap(),
        None
    );
}

/// A task's summary reads back exactly as its last write gave it, whichever
/// of its fields the write changed, kept or took out, with or without a
/// change of status (the SQLite store keeps the lasting part in the task row
/// and the moving part on the log: this holds it to the whole).
async fn a_summary_reads_back_as_each_write_left_it(b: Backend) {
    let state = completed(&b, 1).await;
    let s = &b.store;
    let mut log = s.events(state.id(), 0, usize::MAX).await.unwrap();
    let mut summary = state.head.summary();
    let changes: [&dyn Fn(&mut rein_protocol::TaskSummary); 4] = [
        // The moving part only.
        &|t| {
            t.error = Some("boom".into());
            t.runner = Some(rein_protocol::RunnerInfo {
                host: "h".into(),
                pid: 7,
                process_start: Some(9),
            });
        },
        // What moved taken out again; a lasting field changed too.
        &|t| {
            t.error = None;
            t.runner = None;
            t.description = "renamed".into();
        },
        // A change of status.
        &|t| t.status = TaskStatus::Failed,
        // The moving part after it.
        &|t| t.blocked_reason = Some("waiting".into()),
    ];
    for change in changes {
        change(&mut summary);
        let event = next_event(&log);
        summary.last_seq = event.seq;
        let write = TaskWrite {
            task_id: state.id().clone(),
            expected_seq: event.seq - 1,
            events: vec![event.clone()],
            summary: summary.clone(),
            approvals: Vec::new(),
            ledger: Vec::new(),
            plan: None,
        };
        s.save(write).await.unwrap();
        log.push(event);
        assert_eq!(
            s.load_summary(state.id()).await.unwrap(),
            Some(summary.clone())
        );
        let listed = s.list(&TaskFilter::default()).await.unwrap();
        assert_eq!(listed.items, vec![summary.clone()]);
    }
}

/// Of writers at one position, exactly one wins; the others are told where
/// the log is, and the log stays gap-free.
async fn of_writers_at_one_position_exactly_one_wins(b: Backend) {
    let state = completed(&b, 1).await;
    let log = b.store.events(state.id(), 0, usize::MAX).await.unwrap();
    let mut writers = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let store = Arc::clone(&b.store);
        let write = write_after(&state, &log);
        writers.spawn(async move { store.save(write).await });
    }
    let (mut won, mut refused) = (0, 0);
    while let Some(result) = writers.join_next().await {
        match result.unwrap() {
            Ok(()) => won += 1,
            Err(StoreError::Conflict {
                expected, actual, ..
            }) => {
                assert_eq!(
                    (expected, actual),
                    (state.head.last_seq, state.head.last_seq + 1)
                );
                refused += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!((won, refused), (1, 7));
    let after = b.store.events(state.id(), 0, usize::MAX).await.unwrap();
    let seqs: Vec<u64> = after.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=state.head.last_seq + 1).collect::<Vec<_>>());
    // A write with no events still checks the position; a write to a task
    // that is not there says so.
    let mut empty = write_after(&state, &log);
    empty.events.clear();
    let stale = b.store.save(empty.clone()).await.unwrap_err();
    assert!(matches!(stale, StoreError::Conflict { .. }), "{stale}");
    empty.expected_seq += 1;
    b.store.save(empty).await.unwrap();
    let mut unknown = write_after(&state, &log);
    unknown.task_id = rein_protocol::TaskId::new();
    let missing = b.store.save(unknown).await.unwrap_err();
    assert!(matches!(missing, StoreError::TaskNotFound(_)), "{missing}");
}

/// Each task's log is gap-free from 1 and pages by position; the feed of all
/// tasks is in commit order, each task's events in its own order.
async fn logs_are_gap_free_and_the_feed_is_in_commit_order(b: Backend) {
    let mut runs = tokio::task::JoinSet::new();
    let mut ids = Vec::new();
    for _ in 0..4 {
        let state = create(
            &b,
            (0..5).map(|i| noop(&format!("s{i}"), &[])).collect(),
            "ses_feed",
        )
        .await;
        ids.push(state.id().clone());
        let engine = Arc::clone(&b.engine);
        runs.spawn(async move { engine.run(state.id(), RunOptions::default()).await });
    }
    while let Some(done) = runs.join_next().await {
        assert_eq!(done.unwrap().unwrap().status(), TaskStatus::Completed);
    }
    for id in &ids {
        let log = b.store.events(id, 0, usize::MAX).await.unwrap();
        let seqs: Vec<u64> = log.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=log.len() as u64).collect::<Vec<_>>());
        let page = b.store.events(id, 3, 4).await.unwrap();
        assert_eq!(page, log[3..7].to_vec());
    }
    let feed = b.store.all_events(0, 100_000).await.unwrap();
    assert!(feed.windows(2).all(|w| w[0].0 < w[1].0), "positions rise");
    for id in &ids {
        let mine: Vec<u64> = feed
            .iter()
            .filter(|(_, e)| e.task_id.as_ref() == Some(id))
            .map(|(_, e)| e.seq)
            .collect();
        assert_eq!(mine, (1..=mine.len() as u64).collect::<Vec<_>>());
    }
    let (events, _) = b.store.positions().await.unwrap();
    assert_eq!(events, feed.last().unwrap().0);
    let tail = b.store.all_events(feed[9].0, 5).await.unwrap();
    assert_eq!(tail, feed[10..15].to_vec());
}

/// Listings come newest first, filter and page without losing or repeating a
/// task, and a cursor that is not one is refused.
async fn listings_page_newest_first_and_refuse_a_bad_cursor(b: Backend) {
    let mut made = Vec::new();
    for i in 0..5 {
        let session = if i % 2 == 0 { "ses_even" } else { "ses_odd" };
        made.push(create(&b, vec![noop("s", &[])], session).await.id().clone());
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = b
            .store
            .list(&TaskFilter {
                limit: Some(2),
                cursor: cursor.clone(),
                ..TaskFilter::default()
            })
            .await
            .unwrap();
        assert!(page.items.len() <= 2);
        seen.extend(page.items.iter().map(|t| t.id.clone()));
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    made.reverse();
    assert_eq!(seen, made, "newest first, each once");
    let even = b
        .store
        .list(&TaskFilter {
            session_id: Some("ses_even".into()),
            status: Some(TaskStatus::Pending),
            ..TaskFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(even.items.len(), 3);
    let err = b
        .store
        .list(&TaskFilter {
            cursor: Some("not a cursor".into()),
            ..TaskFilter::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::BadCursor(_)), "{err}");
}

/// A fork's summary names its source and where it forked, and the source's
/// forks are listed by it.
async fn a_forks_source_lists_it(b: Backend) {
    let source = completed(&b, 2).await;
    let other = completed(&b, 1).await;
    let mut forks = Vec::new();
    for step in ["s0", "s1"] {
        let fork = b
            .engine
            .fork(
                source.id(),
                rein_core::fork::Fork {
                    point: rein_core::fork::ForkPoint::After(step.into()),
                    workspace: None,
                    set: Default::default(),
                    confined_to: None,
                },
            )
            .await
            .unwrap();
        forks.push(fork);
    }
    let listed = b
        .store
        .list(&TaskFilter {
            forked_from: Some(source.id().clone()),
            ..TaskFilter::default()
        })
        .await
        .unwrap();
    let ids: Vec<&rein_protocol::TaskId> = listed.items.iter().map(|t| &t.id).collect();
    assert_eq!(ids, [forks[1].id(), forks[0].id()], "newest first");
    let origin = listed.items[1].forked_from.clone().unwrap();
    assert_eq!(
        (&origin.task_id, origin.seq),
        (source.id(), forks[0].head.forked_from.as_ref().unwrap().seq)
    );
    // What the fork still had to do stays in its state, not its summary.
    assert!(origin.ran_in_source.is_empty() && origin.journals.is_empty());
    let none = b
        .store
        .list(&TaskFilter {
            forked_from: Some(other.id().clone()),
            ..TaskFilter::default()
        })
        .await
        .unwrap();
    assert!(none.items.is_empty());
    let read = b.store.load_summary(forks[0].id()).await.unwrap().unwrap();
    assert_eq!(read.forked_from, Some(origin));
}

/// Control requests wait until their task's runner takes them, once.
async fn control_requests_wait_until_taken_once(b: Backend) {
    let one = create(&b, vec![noop("s", &[])], "ses_c").await;
    let other = create(&b, vec![noop("s", &[])], "ses_c").await;
    for (task, kind) in [
        (&one, ControlKind::Pause),
        (&other, ControlKind::Abort),
        (&one, ControlKind::Abort),
    ] {
        b.store
            .request_control(&ControlRequest {
                task_id: task.id().clone(),
                kind,
                by: "conformance".into(),
                reason: "testing".into(),
                requested_at: chrono::Utc::now(),
            })
            .await
            .unwrap();
    }
    assert_eq!(b.store.pending_controls().await.unwrap().len(), 3);
    let taken = b.store.take_controls(one.id()).await.unwrap();
    let kinds: Vec<ControlKind> = taken.iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [ControlKind::Pause, ControlKind::Abort],
        "oldest first"
    );
    assert!(b.store.take_controls(one.id()).await.unwrap().is_empty());
    let left = b.store.pending_controls().await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(&left[0].task_id, other.id());
}

/// Deleting needs the log's current position, and takes the summary, plan,
/// log, snapshots and control requests with it.
async fn deleting_needs_the_current_position_and_takes_everything(b: Backend) {
    let state = completed(&b, 2).await;
    let snapshot = b.engine.snapshot(state.id()).await.unwrap();
    assert_eq!(b.store.list_snapshots(state.id()).await.unwrap().len(), 1);
    b.store
        .request_control(&ControlRequest {
            task_id: state.id().clone(),
            kind: ControlKind::Pause,
            by: "conformance".into(),
            reason: "testing".into(),
            requested_at: chrono::Utc::now(),
        })
        .await
        .unwrap();
    let err = b
        .store
        .delete(state.id(), state.head.last_seq - 1)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    assert!(b.store.load_summary(state.id()).await.unwrap().is_some());
    b.store
        .delete(state.id(), state.head.last_seq)
        .await
        .unwrap();
    assert_eq!(b.store.load_summary(state.id()).await.unwrap(), None);
    assert_eq!(b.store.load_plan(state.id()).await.unwrap(), None);
    assert!(
        b.store
            .events(state.id(), 0, usize::MAX)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(b.store.list_snapshots(state.id()).await.unwrap().is_empty());
    assert_eq!(b.store.get_snapshot(&snapshot.id).await.unwrap(), None);
    assert!(b.store.pending_controls().await.unwrap().is_empty());
}

/// Of two decisions on one request, the first wins; the other is told what
/// the request now is; the winner's entry is sealed onto the ledger's chain.
async fn the_first_decision_wins_and_is_sealed_onto_the_chain(b: Backend) {
    let mut asked = Vec::new();
    for _ in 0..2 {
        let state = create(&b, vec![approval("ship")], "ses_a").await;
        let options = RunOptions {
            no_wait: true,
            ..RunOptions::default()
        };
        let paused = b.engine.run(state.id(), options).await.unwrap();
        assert_eq!(paused.status(), TaskStatus::Paused);
        asked.push(state.id().clone());
    }
    let pending = ApprovalFilter {
        status: Some(ApprovalStatus::Pending),
        ..ApprovalFilter::default()
    };
    let requests = b.store.list_approvals(&pending).await.unwrap();
    assert_eq!(requests.len(), 2);
    let mine = ApprovalFilter {
        task_id: Some(asked[0].clone()),
        ..ApprovalFilter::default()
    };
    assert_eq!(b.store.list_approvals(&mine).await.unwrap().len(), 1);
    let mut sealed = Vec::new();
    for request in &requests {
        let mut deciders = tokio::task::JoinSet::new();
        for (status, kind, who) in [
            (ApprovalStatus::Approved, LedgerKind::Approved, "alice"),
            (ApprovalStatus::Denied, LedgerKind::Rejected, "bob"),
        ] {
            let store = Arc::clone(&b.store);
            let mut updated = request.clone();
            updated.status = status;
            let entry = LedgerEntry {
                id: LedgerId::new(),
                seq: 0,
                kind,
                request_id: Some(request.id.clone()),
                task_id: Some(request.task_id.clone()),
                who: who.into(),
                at: chrono::Utc::now(),
                scope: "conformance".into(),
                reason: None,
                selected_option: None,
                revokes: None,
                details: None,
                prev_hash: String::new(),
                hash: String::new(),
            };
            deciders.spawn(async move { (status, store.settle_approval(&updated, entry).await) });
        }
        let mut winner = None;
        let mut loser = None;
        while let Some(done) = deciders.join_next().await {
            match done.unwrap() {
                (status, Ok(entry)) => winner = Some((status, entry)),
                (_, Err(StoreError::NotPending { current })) => loser = Some(current),
                (_, Err(e)) => panic!("{e}"),
            }
        }
        let (status, entry) = winner.expect("one decision wins");
        assert_eq!(loser.expect("the other is refused").status, status);
        assert_eq!(
            b.store
                .get_approval(&request.id)
                .await
                .unwrap()
                .unwrap()
                .status,
            status
        );
        sealed.push(entry);
    }
    let ledger = b.store.ledger(0, usize::MAX).await.unwrap();
    assert_eq!(
        ledger, sealed,
        "both entries, in the order they were sealed"
    );
    assert_eq!(ledger.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
    assert!(rein_protocol::ledger::verify_chain(&ledger).is_empty());
    assert_eq!(b.store.ledger(1, 10).await.unwrap(), ledger[1..].to_vec());
    assert!(b.store.list_approvals(&pending).await.unwrap().is_empty());
}

/// Shared states and records: an id is taken once; a write back needs the
/// version it read; each successful write has its audit record and a refused
/// one has none.
async fn documents_are_written_back_only_at_the_version_read(b: Backend) {
    let s = &b.store;
    let state: SharedHarnessState =
        serde_json::from_value(json!({ "id": "shs_conf", "goal": "first" })).unwrap();
    s.insert_shared_state(&state, &audit("shared_state.create", "shs_conf"))
        .await
        .unwrap();
    let err = s
        .insert_shared_state(&state, &audit("shared_state.create", "shs_conf"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::SharedStateExists(_)), "{err}");
    let (loaded, version) = s.load_shared_state("shs_conf").await.unwrap().unwrap();
    assert_eq!((loaded, version), (state.clone(), 1));
    let mut changed = state.clone();
    changed.goal = "second".into();
    s.update_shared_state(&changed, 1, &audit("shared_state.update", "shs_conf"))
        .await
        .unwrap();
    let err = s
        .update_shared_state(&changed, 1, &audit("shared_state.update", "shs_conf"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::SharedStateMoved { expected: 1, .. }),
        "{err}"
    );
    let mut missing = changed.clone();
    missing.id = "shs_missing".into();
    let err = s
        .update_shared_state(&missing, 1, &audit("shared_state.update", "shs_missing"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::SharedStateNotFound(_)), "{err}");
    assert_eq!(
        s.load_shared_state("shs_conf").await.unwrap().unwrap(),
        (changed, 2)
    );
    let listed = s
        .list_shared_states(&SharedStateFilter::default())
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);

    let record = Record {
        kind: RecordKind::Contract,
        id: "hctr_conf".into(),
        status: Some("draft".into()),
        task_id: None,
        shared_state_id: Some("shs_conf".into()),
        contract_id: None,
        created_at: chrono::Utc::now(),
        body: json!({ "id": "hctr_conf" }),
    };
    s.insert_record(&record, &audit("contract.create", "hctr_conf"))
        .await
        .unwrap();
    let err = s
        .insert_record(&record, &audit("contract.create", "hctr_conf"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::RecordExists {
                kind: RecordKind::Contract,
                ..
            }
        ),
        "{err}"
    );
    // The same id of another kind is another record.
    let evidence = Record {
        kind: RecordKind::Evidence,
        ..record.clone()
    };
    s.insert_record(&evidence, &audit("evidence.create", "hctr_conf"))
        .await
        .unwrap();
    let signed = Record {
        status: Some("signed".into()),
        ..record.clone()
    };
    s.update_record(&signed, 1, &audit("contract.sign", "hctr_conf"))
        .await
        .unwrap();
    let err = s
        .update_record(&signed, 1, &audit("contract.sign", "hctr_conf"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::RecordMoved { expected: 1, .. }),
        "{err}"
    );
    let (loaded, version) = s
        .load_record(RecordKind::Contract, "hctr_conf")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(version, 2);
    assert_eq!(loaded.status.as_deref(), Some("signed"));
    let mut by_status = RecordFilter::new(RecordKind::Contract);
    by_status.status = Some("signed".into());
    assert_eq!(s.list_records(&by_status).await.unwrap().items.len(), 1);
    by_status.status = Some("draft".into());
    assert!(s.list_records(&by_status).await.unwrap().items.is_empty());

    // The seed's list filters: top-level body fields, a tag, a time range.
    let seeded = Record {
        id: "hctr_seeded".into(),
        created_at: chrono::DateTime::parse_from_rfc3339("2026-11-02T09:00:00Z")
            .unwrap()
            .to_utc(),
        body: json!({ "id": "hctr_seeded", "riskLevel": "critical", "actorId": "a7", "tags": ["ops", "keys"] }),
        ..record.clone()
    };
    s.insert_record(&seeded, &audit("contract.create", "hctr_seeded"))
        .await
        .unwrap();
    let ids = |f: RecordFilter| async move {
        s.list_records(&f)
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|r| r.id)
            .collect::<Vec<_>>()
    };
    let at = |t: &str| chrono::DateTime::parse_from_rfc3339(t).unwrap().to_utc();
    let mut f = RecordFilter::new(RecordKind::Contract);
    f.fields = vec![("riskLevel", "critical".into()), ("actorId", "a7".into())];
    f.tag = Some("keys".into());
    f.created_from = Some(at("2026-11-01T00:00:00Z"));
    f.created_to = Some(at("2026-11-03T00:00:00Z"));
    assert_eq!(ids(f.clone()).await, ["hctr_seeded"]);
    for miss in [
        RecordFilter {
            fields: vec![("riskLevel", "low".into())],
            ..f.clone()
        },
        RecordFilter {
            tag: Some("finance".into()),
            ..f.clone()
        },
        RecordFilter {
            created_from: Some(at("2026-11-03T00:00:00Z")),
            created_to: None,
            ..f.clone()
        },
    ] {
        assert!(ids(miss).await.is_empty());
    }

    let actions: Vec<String> = s
        .audit_records(0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.action)
        .collect();
    assert_eq!(
        actions,
        [
            "shared_state.create",
            "shared_state.update",
            "contract.create",
            "evidence.create",
            "contract.sign",
            "contract.create"
        ]
    );
    let (_, audits) = s.positions().await.unwrap();
    assert_eq!(s.audit_records(audits - 1, 10).await.unwrap().len(), 1);
}

/// A step's journal takes each position once and reads back in order.
async fn a_journal_takes_each_position_once(b: Backend) {
    let state = create(&b, vec![noop("s", &[])], "ses_j").await;
    let s = &b.store;
    s.append_journal(state.id(), "s", 0, &[json!(0), json!(1)])
        .await
        .unwrap();
    let err = s
        .append_journal(state.id(), "s", 1, &[json!("again")])
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::JournalMoved { seq: 1, .. }),
        "{err}"
    );
    s.append_journal(state.id(), "s", 2, &[json!(2)])
        .await
        .unwrap();
    s.append_journal(state.id(), "other", 0, &[json!("x")])
        .await
        .unwrap();
    assert_eq!(
        s.load_journal(state.id(), "s").await.unwrap(),
        [json!(0), json!(1), json!(2)]
    );
    assert!(s.load_journal(state.id(), "none").await.unwrap().is_empty());
}

/// A journal entry of a model turn, as the agent loop writes one.
fn turn(model: &str, session: &str, input: u64, cached: u64, output: u64) -> serde_json::Value {
    json!({
        "message": { "role": "assistant", "content": "ok" },
        "usage": {
            "provider": "openai", "model": model, "served_model": format!("{model}-0001"),
            "step": "s", "session": session,
            "input_tokens": input, "cached_input_tokens": cached, "output_tokens": output,
        },
    })
}

/// Calls of one task, session and model on one day share that day's rollup
/// row, which adds them up as the calls themselves do: tokens summed,
/// reasoning where any call has it, estimated if any call was.
async fn calls_of_one_day_add_up_in_their_rollup_row(b: Backend) {
    let t = create(&b, vec![noop("s", &[])], "ses_day").await;
    let s = &b.store;
    let mut third = turn("m-d", "ses_d", 5, 1, 2);
    third["usage"]["reasoning_tokens"] = json!(4);
    third["usage"]["estimated"] = json!(true);
    let calls = [
        turn("m-d", "ses_d", 100, 40, 10),
        turn("m-d", "ses_d", 7, 0, 3),
        third,
    ];
    s.append_journal(t.id(), "s", 0, &calls).await.unwrap();
    let now = chrono::Utc::now();
    for by in [UsageGroup::All, UsageGroup::Task, UsageGroup::Day] {
        // No bounds: whole days, read from the rollup. A minute either side
        // of now: less than a day, read from the calls.
        let rollup = s
            .usage(&UsageFilter {
                by,
                ..UsageFilter::default()
            })
            .await
            .unwrap();
        let counted = s
            .usage(&UsageFilter {
                by,
                since: Some(now - chrono::Duration::minutes(1)),
                until: Some(now + chrono::Duration::minutes(1)),
                ..UsageFilter::default()
            })
            .await
            .unwrap();
        assert_eq!(rollup, counted, "by {by:?}");
        assert_eq!(rollup.len(), 1, "{rollup:?}");
        assert_eq!(rollup[0].calls, 3);
        assert_eq!(
            rollup[0].usage,
            rein_protocol::Usage {
                input_tokens: 112,
                cached_input_tokens: 41,
                output_tokens: 15,
                reasoning_tokens: Some(4),
                estimated: true,
            }
        );
    }
}

/// The model calls journaled are counted once each, when appended, added
/// up by task, day or in all and by model, and filtered by task, session
/// and time; deleting a task leaves what it spent.
async fn model_usage_is_counted_once_and_added_up(b: Backend) {
    let one = create(&b, vec![noop("s", &[])], "ses_u1").await;
    let two = create(&b, vec![noop("s", &[])], "ses_u2").await;
    let s = &b.store;
    let before = chrono::Utc::now() - chrono::Duration::seconds(1);
    s.append_journal(
        one.id(),
        "s",
        0,
        &[
            json!({ "message": "not a turn" }),
            turn("m-a", "ses_a", 100, 40, 10),
        ],
    )
    .await
    .unwrap();
    // A position taken again is refused, and counts nothing.
    s.append_journal(one.id(), "s", 1, &[turn("m-a", "ses_a", 999, 0, 999)])
        .await
        .unwrap_err();
    s.append_journal(one.id(), "s", 2, &[turn("m-b", "ses_a", 7, 0, 3)])
        .await
        .unwrap();
    s.append_journal(two.id(), "s", 0, &[turn("m-a", "ses_b", 50, 0, 5)])
        .await
        .unwrap();
    let all = s.usage(&UsageFilter::default()).await.unwrap();
    let of = |rows: &[UsageRow], key: &str, model: &str| -> (u64, u64, u64, u64) {
        let r = rows
            .iter()
            .find(|r| r.key == key && r.model == model)
            .unwrap_or_else(|| panic!("no row {key} {model} in {rows:?}"));
        assert_eq!(r.provider, "openai");
        (
            r.calls,
            r.usage.input_tokens,
            r.usage.cached_input_tokens,
            r.usage.output_tokens,
        )
    };
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(of(&all, "", "m-a"), (2, 150, 40, 15));
    assert_eq!(of(&all, "", "m-b"), (1, 7, 0, 3));
    let by_task = s
        .usage(&UsageFilter {
            by: UsageGroup::Task,
            ..UsageFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(of(&by_task, one.id().as_str(), "m-a"), (1, 100, 40, 10));
    assert_eq!(of(&by_task, two.id().as_str(), "m-a"), (1, 50, 0, 5));
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let by_day = s
        .usage(&UsageFilter {
            by: UsageGroup::Day,
            ..UsageFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(of(&by_day, &today, "m-a").0, 2, "{by_day:?}");
    let of_task = s
        .usage(&UsageFilter {
            task_id: Some(two.id().clone()),
            ..UsageFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(of_task.len(), 1);
    assert_eq!(of(&of_task, "", "m-a"), (1, 50, 0, 5));
    let of_session = s
        .usage(&UsageFilter {
            session_id: Some("ses_a".into()),
            ..UsageFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(of(&of_session, "", "m-a"), (1, 100, 40, 10));
    let later = s
        .usage(&UsageFilter {
            since: Some(chrono::Utc::now() + chrono::Duration::seconds(60)),
            ..UsageFilter::default()
        })
        .await
        .unwrap();
    assert!(later.is_empty(), "{later:?}");
    let window = s
        .usage(&UsageFilter {
            since: Some(before),
            until: Some(chrono::Utc::now() + chrono::Duration::seconds(60)),
            ..UsageFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(window, all);
    // Whole days are read from the per-day rollup, part days from the calls
    // themselves: each way, and both at once, adds up to the same.
    let now = chrono::Utc::now();
    let midnight = now.date_naive().and_hms_opt(0, 0, 0).unwrap().and_utc();
    let tomorrow = midnight + chrono::Duration::days(1);
    for (since, until) in [
        (Some(midnight), None),
        (Some(midnight), Some(tomorrow)),
        (Some(midnight - chrono::Duration::hours(5)), Some(tomorrow)),
        (
            Some(midnight - chrono::Duration::days(3)),
            Some(tomorrow + chrono::Duration::hours(7)),
        ),
        (None, Some(tomorrow + chrono::Duration::hours(7))),
    ] {
        for by in [UsageGroup::All, UsageGroup::Task, UsageGroup::Day] {
            let filter = |since, until| UsageFilter {
                since,
                until,
                by,
                ..UsageFilter::default()
            };
            let read = s.usage(&filter(since, until)).await.unwrap();
            let whole = s.usage(&filter(None, None)).await.unwrap();
            assert_eq!(read, whole, "{since:?}..{until:?} by {by:?}");
        }
    }
    let of_session_today = s
        .usage(&UsageFilter {
            session_id: Some("ses_a".into()),
            since: Some(midnight),
            ..UsageFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(of(&of_session_today, "", "m-a"), (1, 100, 40, 10));
    assert_eq!(of(&of_session_today, "", "m-b"), (1, 7, 0, 3));
    // What was spent stays spent when the task goes.
    s.delete(two.id(), two.head.last_seq).await.unwrap();
    assert_eq!(s.usage(&UsageFilter::default()).await.unwrap(), all);
}

/// The counters of spec §6 rule 21, aggregated by the store: tasks by
/// status, checkpoints by type, approvals by outcome, with their averages.
async fn the_counters_count_what_the_store_holds(b: Backend) {
    completed(&b, 3).await;
    completed(&b, 3).await;
    let mut asked = Vec::new();
    for _ in 0..2 {
        let state = create(&b, vec![approval("ship")], "ses_m").await;
        let options = RunOptions {
            no_wait: true,
            ..RunOptions::default()
        };
        b.engine.run(state.id(), options).await.unwrap();
        asked.push(state.id().clone());
    }
    let request = b
        .store
        .list_approvals(&ApprovalFilter {
            task_id: Some(asked[0].clone()),
            ..ApprovalFilter::default()
        })
        .await
        .unwrap()
        .remove(0);
    b.engine
        .decide(rein_protocol::ApprovalResponse {
            request_id: request.id.clone(),
            decision: rein_protocol::Decision::Approve,
            selected_option: None,
            reason: None,
            decided_by: "ana".into(),
            delegate_to: None,
            decided_at: chrono::Utc::now(),
        })
        .await
        .unwrap();
    let m = b.store.metrics().await.unwrap();
    assert_eq!(
        (m.tasks.total, m.tasks.completed, m.tasks.paused),
        (4, 2, 2)
    );
    assert!(m.tasks.average_duration_ms.is_some_and(|ms| ms >= 0.0));
    assert_eq!(m.checkpoints.by_type.get("task_exec"), Some(&8), "{m:?}");
    assert!(m.checkpoints.passed >= 6 && m.checkpoints.total >= m.checkpoints.passed);
    assert!(
        m.checkpoints
            .average_duration_ms
            .is_some_and(|ms| ms >= 0.0)
    );
    assert_eq!(
        (
            m.human_loop.requests,
            m.human_loop.pending,
            m.human_loop.approvals
        ),
        (2, 1, 1)
    );
    assert!(m.human_loop.average_response_ms.is_some_and(|ms| ms >= 0.0));
    assert_eq!((m.recovery.attempts, m.recovery.failures), (0, 0));
}

/// An entry added by hand is sealed onto the chain; of revocations of it sent
/// at once, exactly one is appended; a revocation cannot itself be revoked,
/// nor an entry that does not exist.
async fn a_ledger_entry_is_revoked_once(b: Backend) {
    let decided = LedgerEntry::new(LedgerKind::Approved, "ana", "tool:deploy".into());
    let decided = b.store.append_ledger(decided).await.unwrap();
    assert_eq!(decided.seq, 1);
    let mut revokers = tokio::task::JoinSet::new();
    for who in ["bob", "cy", "di", "ed"] {
        let store = Arc::clone(&b.store);
        let mut revocation = LedgerEntry::new(LedgerKind::Revoked, who, "ledger".into());
        revocation.revokes = Some(decided.id.clone());
        revokers.spawn(async move { store.append_ledger(revocation).await });
    }
    let (mut won, mut refused) = (Vec::new(), 0);
    while let Some(done) = revokers.join_next().await {
        match done.unwrap() {
            Ok(e) => won.push(e),
            Err(StoreError::NotRevocable { why, .. }) => {
                assert!(why.contains("already revoked"), "{why}");
                refused += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!((won.len(), refused), (1, 3));
    let mut again = LedgerEntry::new(LedgerKind::Revoked, "fay", "ledger".into());
    again.revokes = Some(won[0].id.clone());
    assert!(matches!(
        b.store.append_ledger(again).await,
        Err(StoreError::NotRevocable { .. })
    ));
    let mut nothing = LedgerEntry::new(LedgerKind::Revoked, "fay", "ledger".into());
    nothing.revokes = Some(LedgerId::new());
    assert!(matches!(
        b.store.append_ledger(nothing).await,
        Err(StoreError::LedgerEntryNotFound(_))
    ));
    let ledger = b.store.ledger(0, usize::MAX).await.unwrap();
    assert_eq!(ledger.len(), 2);
    assert!(rein_protocol::ledger::verify_chain(&ledger).is_empty());
}

/// The suite for one backend: `conformance!(module, constructor)`.
macro_rules! conformance {
    ($backend:ident, $make:expr) => {
        mod $backend {
            conformance!(@cases $make;
                a_task_is_stored_whole_and_its_id_only_once,
                of_writers_at_one_position_exactly_one_wins,
                logs_are_gap_free_and_the_feed_is_in_commit_order,
                listings_page_newest_first_and_refuse_a_bad_cursor,
                a_forks_source_lists_it,
                control_requests_wait_until_taken_once,
                deleting_needs_the_current_position_and_takes_everything,
                the_first_decision_wins_and_is_sealed_onto_the_chain,
                a_ledger_entry_is_revoked_once,
                documents_are_written_back_only_at_the_version_read,
                a_journal_takes_each_position_once,
                model_usage_is_counted_once_and_added_up,
                calls_of_one_day_add_up_in_their_rollup_row,
                the_counters_count_what_the_store_holds,
                a_summary_reads_back_as_each_write_left_it,
            );
        }
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                super::$case($make().await).await;
            }
        )*
    };
}

conformance!(sqlite, super::sqlite);
conformance!(postgres, super::postgres);
