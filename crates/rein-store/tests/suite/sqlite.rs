//! SQLite-specific behaviour: pragmas, schema versions.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use rein_store::SqliteStore;
use rein_store::schema::CURRENT_VERSION;

#[test]
fn the_file_uses_wal_full_sync_and_the_current_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join("rein.db");
    let _store = SqliteStore::open(&path).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, CURRENT_VERSION);
}

#[test]
fn a_file_from_a_newer_rein_is_refused_with_advice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    drop(SqliteStore::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!("PRAGMA user_version = {}", CURRENT_VERSION + 1))
        .unwrap();
    drop(conn);
    let err = SqliteStore::open(&path).unwrap_err().to_string();
    assert!(
        err.contains("newer than this rein supports") && err.contains("upgrade rein"),
        "{err}"
    );
}

#[test]
fn opening_twice_migrates_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let first = SqliteStore::open(&path).unwrap();
    assert_eq!(
        first.migrated().applied(),
        CURRENT_VERSION,
        "a new store runs every migration"
    );
    drop(first);
    let second = SqliteStore::open(&path).unwrap();
    assert_eq!(
        second.migrated().applied(),
        0,
        "an opened store runs none again"
    );
    assert_eq!(second.migrated().to, CURRENT_VERSION);
}

/// What opening a store at `path` says (it must refuse).
fn refusal(path: &std::path::Path) -> String {
    SqliteStore::open(path).unwrap_err().to_string()
}

#[test]
fn only_a_missing_file_becomes_a_new_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    // Truncated to nothing: refused, not started afresh.
    std::fs::write(&path, b"").unwrap();
    let said = refusal(&path);
    assert!(
        said.contains("is empty (0 bytes)") && said.contains("backup"),
        "{said}"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "left as it was");
    // Not SQLite at all.
    std::fs::write(&path, b"hello, this is a text file").unwrap();
    let said = refusal(&path);
    assert!(said.contains("not an SQLite database"), "{said}");
    // SQLite, but someone else's.
    std::fs::remove_file(&path).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("CREATE TABLE photos (id INTEGER); INSERT INTO photos VALUES (1);")
        .unwrap();
    drop(conn);
    let said = refusal(&path);
    assert!(
        said.contains("not a rein store") && said.contains("photos"),
        "{said}"
    );
    let conn = rusqlite::Connection::open(&path).unwrap();
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 1, "nothing was added to it");
    // Two processes making the same new store: one store, both open it.
    let fresh = dir.path().join("fresh.db");
    let opened: Vec<_> = (0..4)
        .map(|_| {
            let fresh = fresh.clone();
            std::thread::spawn(move || SqliteStore::open(&fresh).map(|s| s.migrated()))
        })
        .collect();
    let migrated: Vec<_> = opened
        .into_iter()
        .map(|t| t.join().unwrap().unwrap())
        .collect();
    assert!(
        migrated.iter().all(|m| m.to == CURRENT_VERSION),
        "{migrated:?}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".new-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_data_directory_that_cannot_be_created_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let err = SqliteStore::open(&file.join("rein.db"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not-a-dir"), "{err}");
}

/// Every file of the store at `path` copied to `to` (the same names).
fn copy_store(path: &std::path::Path, to: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let from = std::path::PathBuf::from(format!("{}{suffix}", path.display()));
        let into = std::path::PathBuf::from(format!("{}{suffix}", to.display()));
        let _ = std::fs::remove_file(&into);
        if from.exists() {
            std::fs::copy(&from, &into).unwrap();
        }
    }
}

/// A new store with one commit, and a copy of it as it is then (`old.db`
/// beside it), to put back later: (its directory, the store, the copy).
async fn store_and_an_old_copy() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    use rein_core::TaskStore;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let old = dir.path().join("old.db");
    let store = SqliteStore::open(&path).unwrap();
    store.probe().await.unwrap();
    drop(store);
    copy_store(&path, &old);
    (dir, path, old)
}

/// An older copy of the store put in its place (or its write-ahead log
/// deleted: the same to the store) is found at open, kept until
/// acknowledged, and found once; commits from two handles at once, and a
/// new store beside the head of a deleted one, are no loss.
#[tokio::test(flavor = "multi_thread")]
async fn committed_writes_gone_are_found_at_open_and_nothing_else_is() {
    use rein_core::TaskStore;
    let (_dir, path, old) = store_and_an_old_copy().await;
    // Two handles on one store (two processes, as far as SQLite knows),
    // committing at once: the head recorded lags, never leads.
    let (a, b) = (
        SqliteStore::open(&path).unwrap(),
        SqliteStore::open(&path).unwrap(),
    );
    let writes = (0..50).map(|i| {
        let store = if i % 2 == 0 { &a } else { &b };
        store.probe()
    });
    for probed in futures_util::future::join_all(writes).await {
        probed.unwrap();
    }
    drop((a, b));
    let store = SqliteStore::open(&path).unwrap();
    assert!(store.unacknowledged_lost_writes().is_empty());
    assert!(store.lost_writes().await.unwrap().is_empty());
    drop(store);

    copy_store(&old, &path);
    let store = SqliteStore::open(&path).unwrap();
    let lost = store.unacknowledged_lost_writes().to_vec();
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert!(lost[0].recorded >= lost[0].found + 50, "{lost:?}");
    assert_eq!(store.probe().await.unwrap().lost_writes, lost);
    drop(store);
    // Found once, kept until acknowledged.
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.unacknowledged_lost_writes(), lost.as_slice());
    assert_eq!(store.acknowledge_lost_writes().await.unwrap(), 1);
    assert!(store.probe().await.unwrap().lost_writes.is_empty());
    let all = store.lost_writes().await.unwrap();
    assert!(all[0].acknowledged_at.is_some(), "{all:?}");
    drop(store);
    assert!(
        SqliteStore::open(&path)
            .unwrap()
            .unacknowledged_lost_writes()
            .is_empty()
    );

    // The store deleted, its head left: a new store has lost nothing.
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let store = SqliteStore::open(&path).unwrap();
    assert!(store.unacknowledged_lost_writes().is_empty());
    assert!(store.lost_writes().await.unwrap().is_empty());
}

/// A commit that appends events counts itself on the newest event, any other
/// in the head row: every commit is counted exactly once either way — tasks
/// run (appends), a task deleted (the newest events go, nothing appended), a
/// task made after that (appends below the deleted ones' positions), probes
/// (no event) — so an older copy put back is found short by exactly the
/// commits made since.
#[tokio::test(flavor = "multi_thread")]
async fn every_commit_is_counted_once_whether_it_appends_events_or_not() {
    use rein_core::{CommandExecutor, CreateTask, Engine, EngineConfig, RunOptions, TaskStore};
    use rein_protocol::{StepAction, TaskDecomposition, TaskStatus, TaskStep};
    let (dir, path, old) = store_and_an_old_copy().await;

    let store = std::sync::Arc::new(SqliteStore::open(&path).unwrap());
    let engine = Engine::new(
        store.clone(),
        std::sync::Arc::new(CommandExecutor::unsandboxed()),
        EngineConfig::new(dir.path().join("ws")),
    );
    let chain = |n: usize| {
        let steps = (0..n)
            .map(|i| TaskStep {
                depends_on: (i > 0).then(|| format!("s{}", i - 1)).into_iter().collect(),
                ..TaskStep::new(format!("s{i}"), StepAction::Noop)
            })
            .collect();
        CreateTask::of(TaskDecomposition::new("counted", steps))
    };
    let first = engine.create(chain(2)).await.unwrap();
    let second = engine.create(chain(3)).await.unwrap();
    for task in [&first, &second] {
        let done = engine.run(task.id(), RunOptions::default()).await.unwrap();
        assert_eq!(done.status(), TaskStatus::Completed);
    }
    store.probe().await.unwrap();
    // The newest events are the second task's: deleting it takes them away.
    engine.delete(second.id()).await.unwrap();
    let third = engine.create(chain(1)).await.unwrap();
    engine.run(third.id(), RunOptions::default()).await.unwrap();
    store.probe().await.unwrap();
    let made = store.stats().commits;
    assert!(made > 10, "{:?}", store.stats());
    drop(engine);
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    assert!(store.unacknowledged_lost_writes().is_empty());
    drop(store);

    copy_store(&old, &path);
    let store = SqliteStore::open(&path).unwrap();
    let lost = store.unacknowledged_lost_writes().to_vec();
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0].recorded - lost[0].found, made, "{lost:?}");
}
